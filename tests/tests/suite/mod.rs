//! The end-to-end test modules.

mod agent_skills;
mod backends;
mod conformance;
mod error_kinds;
mod example_sdk_peers;
mod example_wrap_cli;
mod init;
mod node_agent;
mod node_auth;
mod node_cluster;
mod node_e2e;
mod node_hooks;
mod node_isolation;
mod node_limits;
mod node_mcp;
mod node_peer_auth;
mod node_push;
mod node_reload;
mod node_signing;
mod node_skills;
mod node_store;
mod node_tls;
mod python_client;
mod remote_roles;
mod server_errors;
