//! Tasks: one manager for every task on the node, its durable store, and the executors that run turns.

pub(crate) mod executor;
pub(crate) mod manager;
pub(crate) mod sqlite;
pub(crate) mod store;

#[cfg(test)]
mod manager_tests;

use std::path::Path;
use std::sync::Arc;

use self::store::{StoreError, TaskStore};

/// Opens the node's task store in its data directory: the SQLite database `tasks.db`.
pub(crate) fn open_store(data_dir: &Path) -> Result<Arc<dyn TaskStore>, StoreError> {
    Ok(Arc::new(sqlite::SqliteStore::open(
        &data_dir.join("tasks.db"),
    )?))
}
