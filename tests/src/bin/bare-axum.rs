//! The ceiling for benchmarks: a bare axum handler that answers a
//! SendMessage-shaped JSON-RPC request with a fixed completed task, doing no
//! protocol work at all (no parsing beyond the body, no task state).
//!
//! Usage: `bare-axum [PORT]`. Prints `READY <base_url>`; serves a card so that
//! `mew bench` can resolve it.

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::{get, post};
use mew_tests::EchoAgent;

const ANSWER: &str = r#"{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"text":"hi"}]}]}}}"#;

// The node's allocator (see node/src/main.rs), so that benchmarks against this server compare
// protocol work, not allocators.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mew_tests::bench_server::serve(mew_tests::bench_server::port_argument()?, |base_url| {
        let card = serde_json::to_string(&EchoAgent::default_card(base_url))?;
        Ok(Router::new()
            .route(
                "/.well-known/agent-card.json",
                get(move || async move { ([(header::CONTENT_TYPE, "application/json")], card) }),
            )
            .route(
                "/",
                post(|_body: Bytes| async {
                    ([(header::CONTENT_TYPE, "application/json")], ANSWER)
                }),
            ))
    })
    .await
}
