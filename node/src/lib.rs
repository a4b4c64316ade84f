//! The Mew node: publishes roles as A2A agents and runs their tasks.

mod agent;
mod bench;
pub mod cli;
pub mod config;
mod node;
mod peers;
mod permission;
mod process;
mod provider;
mod roles;
mod server;
mod tasks;
mod tools;
