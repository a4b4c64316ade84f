//! Roles: the catalog of every role the node knows, and the runner of command-driven roles.

pub(crate) mod catalog;
pub(crate) mod command;
