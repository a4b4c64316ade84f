//! The end-to-end test modules.

mod backends;
mod conformance;
mod error_kinds;
mod node_agent;
mod node_e2e;
mod python_client;
mod server_errors;
