//! Tasks: one manager for every task on the node, its durable store, and the executors that run turns.

pub(crate) mod executor;
pub(crate) mod manager;
pub(crate) mod postgres;
mod rows;
pub(crate) mod sqlite;
pub(crate) mod store;

#[cfg(test)]
mod manager_tests;
#[cfg(test)]
pub(crate) mod store_tests;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use self::store::{StoreError, TaskStore};

/// `store:` — where the node keeps its tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreConfig {
    /// A PostgreSQL URL (`MEW_STORE_URL`); `None`: SQLite, `tasks.db` in the data directory.
    #[serde(serialize_with = "serialize_url")]
    pub url: Option<String>,
    /// The environment variable that holds the database password, when the URL has none.
    pub password_env: String,
    /// How long a replica's hold on a task lasts without a heartbeat (`store.lease`): another
    /// replica takes the task over after that. Heartbeats come three times per lease.
    #[serde(serialize_with = "crate::duration::serialize")]
    pub lease: std::time::Duration,
    /// This replica's name among those sharing the database (`MEW_REPLICA_ID`, e.g. a pod's
    /// name); `None`: one made once per data directory and kept in it.
    pub replica_id: Option<String>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            password_env: "MEW_STORE_PASSWORD".to_owned(),
            lease: std::time::Duration::from_secs(15),
            replica_id: None,
        }
    }
}

impl StoreConfig {
    /// Whether a `postgres://user:password@host` URL names a password.
    pub(crate) fn url_has_password(url: &str) -> bool {
        redacted(url).is_some()
    }
}

/// `url` with its password replaced by `***`, if it has one.
fn redacted(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}:***@{host}{tail}"))
}

/// Writes the URL without its password (what `mew config show` prints).
fn serialize_url<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => s.serialize_some(&redacted(url).unwrap_or_else(|| url.clone())),
        None => s.serialize_none(),
    }
}

/// Opens the node's task store: the PostgreSQL database of `config.url`, with the password
/// from `env` if the URL has none, or else the SQLite database `tasks.db` in `data_dir`.
pub(crate) async fn open_store(
    config: &StoreConfig,
    data_dir: &Path,
    env: &HashMap<String, String>,
    address: &str,
) -> Result<Arc<dyn TaskStore>, StoreError> {
    match &config.url {
        Some(url) => {
            let password = env.get(&config.password_env).map(String::as_str);
            let id = match &config.replica_id {
                Some(id) => id.clone(),
                None => replica_id(data_dir)?,
            };
            let replica = store::Replica {
                id,
                address: address.to_owned(),
                lease: config.lease,
            };
            Ok(Arc::new(
                postgres::PostgresStore::open(url, password, replica).await?,
            ))
        }
        None => {
            let path = data_dir.join("tasks.db");
            let store = tokio::task::spawn_blocking(move || sqlite::SqliteStore::open(&path))
                .await
                .map_err(|e| {
                    StoreError::Backend(format!("opening the task store failed: {e}"))
                })??;
            Ok(Arc::new(store))
        }
    }
}

/// The file in the data directory that names the replica.
const REPLICA_ID_FILE: &str = "replica-id";

/// This replica's id: made once per data directory and kept in it. The data directory is
/// locked while a node runs, so no two live processes share one, and a replica that restarts
/// knows which leases were its own.
fn replica_id(data_dir: &Path) -> Result<String, StoreError> {
    let path = data_dir.join(REPLICA_ID_FILE);
    let failed = |what: &str, e: std::io::Error| {
        StoreError::Backend(format!("cannot {what} {}: {e}", path.display()))
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => Err(StoreError::Backend(format!(
            "{} is empty: delete it to make a new replica id",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::now_v7().simple().to_string();
            std::fs::write(&path, format!("{id}\n")).map_err(|e| failed("write", e))?;
            Ok(id)
        }
        Err(e) => Err(failed("read", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_and_redacted() {
        assert_eq!(
            redacted("postgres://mew:s3cr:et@db:5432/mew?sslmode=require").as_deref(),
            Some("postgres://mew:***@db:5432/mew?sslmode=require")
        );
        assert!(StoreConfig::url_has_password("postgresql://a:b@h/d"));
        assert!(!StoreConfig::url_has_password("postgres://mew@db/mew"));
        assert!(!StoreConfig::url_has_password("postgres://db/mew"));
    }
}
