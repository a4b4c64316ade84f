//! The hermetic MCP server of `mew_tests::mcp`, over stdio or Streamable HTTP.
//!
//! Usage: `mcp-server [--protocol both|legacy|modern] [--tampered-skill] [--http PORT]`. Without `--http` it
//! speaks MCP on stdin and stdout (and `crash` ends the process); with it, it serves
//! `http://127.0.0.1:PORT/mcp` (0: a free port) and prints `READY <url>`.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use mew_tests::mcp::{Options, Protocol, TestServer, http_router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut options = Options::default();
    let mut http_port = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--protocol" => {
                let value = args.next().context("--protocol needs a value")?;
                options.protocol = Protocol::parse(&value)?;
            }
            "--tampered-skill" => options.tampered_skill = true,
            "--http" => {
                let value = args.next().context("--http needs a port")?;
                http_port = Some(value.parse::<u16>().context("--http needs a port")?);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    match http_port {
        None => {
            options.crash_exits = true;
            TestServer::new(options).serve_stdio().await
        }
        Some(port) => {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            let url = format!("http://{}/mcp", listener.local_addr()?);
            let router = http_router(
                TestServer::new(options),
                Arc::new(LocalSessionManager::default()),
                CancellationToken::new(),
            );
            println!("READY {url}");
            axum::serve(listener, router).await?;
            Ok(())
        }
    }
}
