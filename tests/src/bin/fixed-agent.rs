//! Serves `FixedAgent` with `mew-transport` alone: the ceiling's answer with the transport's
//! work, for benchmarks.
//!
//! Usage: `fixed-agent [PORT]` (0 or none: a free port). Prints `READY <base_url>`.

use std::sync::Arc;

use mew_tests::FixedAgent;

// The node's allocator (see node/src/main.rs), so that benchmarks against this server compare
// protocol work, not allocators.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let router = mew_transport::router(Arc::new(FixedAgent::new(&base_url)));
    println!("READY {base_url}");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router).await?;
    Ok(())
}
