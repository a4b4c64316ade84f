//! Shared support for the end-to-end tests: reference agents, peers, a headless browser and
//! process helpers.

pub mod bench_server;
pub mod browser;
pub mod example;
pub mod mcp;
pub mod model;
pub mod node;
pub mod oauth;
pub mod otlp;
pub mod postgres;
pub mod process;
pub mod python;
pub mod tls;

mod echo;
mod fixed;
pub use echo::EchoAgent;
pub use fixed::FixedAgent;
