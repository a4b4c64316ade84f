//! The Mew node: publishes roles as A2A agents and runs their tasks.

mod agent;
mod bench;
pub mod cli;
mod config;
mod conversation;
mod duration;
mod hooks;
mod identity;
mod matcher;
mod mcp;
mod metrics;
mod node;
mod peers;
mod permission;
mod plugins;
mod process;
mod provider;
mod push;
mod roles;
mod server;
mod skills;
mod ssrf;
mod tasks;
mod telemetry;
mod tools;
mod tree;
mod user_file;
