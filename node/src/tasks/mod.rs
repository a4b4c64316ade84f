//! Tasks: one manager for every task on the node, its durable store, and the executors that run turns.

pub(crate) mod executor;
pub(crate) mod manager;
pub(crate) mod sqlite;
pub(crate) mod store;

#[cfg(test)]
mod manager_tests;
