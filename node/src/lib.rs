//! The Mew node: publishes roles as A2A agents and runs their tasks.

mod bench;
pub mod cli;
pub mod config;
mod node;
mod process;
mod roles;
mod server;
mod tasks;
