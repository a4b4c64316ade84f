//! End-to-end tests of what one client may cost a node: connections that never finish their
//! headers (slowloris) beyond the open-file limit, idle kept-alive connections, bodies that
//! never finish, and request bodies beyond a role's budget. The node keeps answering.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use mew_tests::node::{MewNode, command_role, poll_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The bound on any wait in these tests (a loaded machine is slow, never this slow).
const WAIT: Duration = Duration::from_secs(60);

/// A node under an open-file limit of `files`, with short timeouts so that closing shows.
async fn limited_node(files: u64, limits: &str) -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(&format!("limits:\n{limits}"))?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.set_file_limit(files);
    node.launch().await?;
    Ok(node)
}

fn address(node: &MewNode) -> anyhow::Result<String> {
    Ok(node
        .url()
        .strip_prefix("http://")
        .context("the node's URL is not http")?
        .to_owned())
}

/// Whether the server has closed `stream` (a read sees the end, or a reset).
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 512];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return true,
            // A 4xx answer before closing is fine; keep reading to the end.
            Ok(_) => {}
        }
    }
}

/// `GET /healthz` on a new connection: the status line's code.
async fn healthz(address: &str) -> anyhow::Result<u16> {
    let mut stream = TcpStream::connect(address).await?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP answer: {answer:?}"))?;
    Ok(code)
}

#[tokio::test]
async fn half_sent_requests_beyond_the_file_limit_do_not_stop_the_node() -> anyhow::Result<()> {
    // 128 files leave the node 64 connections; 200 clients that stop halfway through their
    // headers would exhaust its files without the limit.
    let node = limited_node(128, "  header_timeout: 2s\n").await?;
    poll_until(
        "the node's connection limit in its output",
        WAIT,
        || async {
            Ok(node
                .output()
                .contains("at most 64 connections at once (open-file limit 128)")
                .then_some(()))
        },
    )
    .await
    .with_context(|| node.output())?;
    let address = address(&node)?;
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(&address).await?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: no")
            .await?;
        slow.push(stream);
    }
    // The node still answers a probe while they hang on.
    let code = poll_until("GET /healthz during the flood", WAIT, || async {
        Ok(healthz(&address).await.ok().filter(|code| *code == 200))
    })
    .await?;
    ensure!(code == 200);
    // And it closes every one of them: made room for newer ones, or out of time.
    for (i, stream) in slow.iter_mut().enumerate() {
        let closed = tokio::time::timeout(WAIT, closed_by_server(stream)).await;
        ensure!(
            closed == Ok(true),
            "half-sent request {i} is still open after {WAIT:?}"
        );
    }
    ensure!(healthz(&address).await? == 200);
    let log = node.log();
    ensure!(
        !log.contains("Too many open files") && !log.contains("cannot accept"),
        "the node ran out of files:\n{log}"
    );
    Ok(())
}

#[tokio::test]
async fn idle_connections_and_slow_bodies_are_closed() -> anyhow::Result<()> {
    let node = limited_node(
        1024,
        "  header_timeout: 2s\n  idle_timeout: 2s\n  body_timeout: 2s\n",
    )
    .await?;
    let address = address(&node)?;

    // A kept-alive connection that answered one request and then sends nothing is closed.
    let mut idle = TcpStream::connect(&address).await?;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
        .await?;
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await?;
    ensure!(
        &first == b"HTTP/1.1 200",
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    ensure!(
        tokio::time::timeout(WAIT, closed_by_server(&mut idle)).await == Ok(true),
        "an idle kept-alive connection stayed open"
    );

    // A request whose body stops halfway is answered 408 with an A2A error, on both bindings.
    for (path, media) in [
        ("/agents/upper", "application/json"),
        ("/agents/upper/message:send", "application/a2a+json"),
    ] {
        let mut stream = TcpStream::connect(&address).await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: node\r\nA2A-Version: 1.0\r\nContent-Type: {media}\r\n\
             Content-Length: 1000\r\n\r\n{{\"jsonrpc\": \"2.0\""
        );
        stream.write_all(head.as_bytes()).await?;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        match read {
            Ok(_) => ensure!(
                answer.starts_with("HTTP/1.1 408") && answer.contains("did not arrive within"),
                "{path}: {answer}"
            ),
            Err(_) => bail!("{path}: a stalled body got no answer in {WAIT:?}: {answer}"),
        }
    }
    Ok(())
}
