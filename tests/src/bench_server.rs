//! How the benchmark servers (`bare-axum`, `echo-agent`, `fixed-agent`) serve: one router on
//! loopback, announced with a `READY <base_url>` line.

use axum::Router;

/// Serves the router that `make` builds for the base URL, on 127.0.0.1 at `port` (0: a free
/// one), after printing `READY <base_url>`; with `TCP_NODELAY`, as the node sets it. Returns when
/// serving fails.
///
/// # Errors
///
/// When the port cannot be bound, `make` fails, or serving fails.
pub async fn serve(
    port: u16,
    make: impl FnOnce(&str) -> anyhow::Result<Router>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let router = make(&base_url)?;
    println!("READY {base_url}");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router).await?;
    Ok(())
}

/// The port given as the program's first argument, 0 (a free one) when there is none.
///
/// # Errors
///
/// When the argument is not a port number.
pub fn port_argument() -> anyhow::Result<u16> {
    Ok(std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0))
}
