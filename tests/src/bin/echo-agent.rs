//! Serves `EchoAgent` with `mew-transport` alone, for benchmarks and manual tests.
//!
//! Usage: `echo-agent [PORT]` (0 or none: a free port). Prints `READY <base_url>`.

use std::sync::Arc;

use mew_tests::EchoAgent;

// The node's allocator (see node/src/main.rs), so that benchmarks against this server compare
// protocol work, not allocators.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mew_tests::bench_server::serve(mew_tests::bench_server::port_argument()?, |base_url| {
        Ok(mew_transport::router(Arc::new(EchoAgent::new(base_url))))
    })
    .await
}
