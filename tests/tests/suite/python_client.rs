//! The Python SDK's client against Mew's server: discovery, every operation, all three
//! bindings (gRPC through the SDK's `grpc` extra, to a role of a node by its tenant too), and
//! credentials sent through the SDK's own auth interceptor to a node that requires them.

use anyhow::ensure;
use mew_tests::node::{MewNode, command_role};
use mew_tests::python::run_driver;
use serde_json::json;

use super::backends::{echo_with_grpc, serve};

const STEPS: [&str; 11] = [
    "card",
    "send echo",
    "stream",
    "send wait",
    "cancel",
    "subscribe",
    "send ask",
    "continue ask",
    "send message",
    "send fail",
    "list",
];

async fn roundtrip(binding: &str) -> anyhow::Result<()> {
    let (url, _server) = serve(echo_with_grpc).await?;
    roundtrip_at(&url, binding, "echo").await
}

/// The driver's roundtrip against the agent whose card is under `url`, named `name`.
async fn roundtrip_at(url: &str, binding: &str, name: &str) -> anyhow::Result<()> {
    let out = run_driver(url, binding, &["roundtrip"]).await?;
    ensure!(
        out.code == 0,
        "the Python client failed ({}): {}",
        out.code,
        out.stderr
    );
    let steps: Vec<&str> = out
        .lines
        .iter()
        .filter_map(|l| l["step"].as_str())
        .collect();
    ensure!(
        steps[..STEPS.len()] == STEPS && steps.last() == Some(&"get"),
        "steps {steps:?}"
    );
    let card = &out.lines[0]["result"];
    ensure!(card["name"] == name, "the SDK read the card as {card}");
    let canceled = &out.lines[4]["result"];
    ensure!(
        canceled["status"]["state"] == "TASK_STATE_CANCELED",
        "cancel answered {canceled}"
    );
    Ok(())
}

#[tokio::test]
async fn sdk_client_roundtrip_over_jsonrpc() -> anyhow::Result<()> {
    roundtrip("jsonrpc").await
}

#[tokio::test]
async fn sdk_client_roundtrip_over_rest() -> anyhow::Result<()> {
    roundtrip("rest").await
}

#[tokio::test]
async fn sdk_client_roundtrip_over_grpc() -> anyhow::Result<()> {
    roundtrip("grpc").await
}

/// The SDK's gRPC client reaches a node's role by the tenant of the role card's `GRPC`
/// interface, on the node's own port: send (blocking and streaming), get, list, cancel, and
/// subscribe (to a finished task: the spec's error).
#[tokio::test]
async fn sdk_grpc_client_runs_every_operation_on_a_nodes_role() -> anyhow::Result<()> {
    let node = MewNode::start_echo("", &[]).await?;
    let url = node.role_url("echo");
    let context = mew_cards::ContextId::generate().to_string();
    let driver = |args: Vec<&str>| {
        let url = url.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_driver(&url, "grpc", &args).await?;
            anyhow::Ok(out)
        }
    };
    let out = driver(vec!["send", "--context", &context, "echo", "hi"]).await?;
    ensure!(out.code == 0, "send: {}", out.stderr);
    let task = out.lines[0]["task"].clone();
    ensure!(
        task["status"]["state"] == "TASK_STATE_COMPLETED"
            && task["artifacts"][0]["parts"][0]["text"] == "hi",
        "send: {task}"
    );
    let id = task["id"].as_str().unwrap_or_default().to_owned();

    let out = driver(vec!["stream", "--context", &context, "stream", "2"]).await?;
    ensure!(out.code == 0, "stream: {}", out.stderr);
    ensure!(
        out.lines.first().is_some_and(|l| l.get("task").is_some())
            && out
                .lines
                .last()
                .map(|l| l["statusUpdate"]["status"]["state"].clone())
                == Some("TASK_STATE_COMPLETED".into()),
        "stream: {:?}",
        out.lines
    );

    let out = driver(vec!["get", &id]).await?;
    ensure!(
        out.code == 0 && out.lines[0]["id"] == id.as_str(),
        "get: {:?} {}",
        out.lines,
        out.stderr
    );

    let out = driver(vec!["list", "--context", &context]).await?;
    ensure!(out.code == 0, "list: {}", out.stderr);
    ensure!(
        out.lines[0]["tasks"].as_array().map(Vec::len) == Some(2) && out.lines[0]["totalSize"] == 2,
        "list: {}",
        out.lines[0]
    );

    let out = driver(vec!["subscribe", &id]).await?;
    ensure!(
        out.code == 3 && out.stderr.contains("UNSUPPORTED_OPERATION"),
        "subscribe to a finished task: exit {} ({})",
        out.code,
        out.stderr
    );

    let out = driver(vec!["send", "--return-immediately", "wait"]).await?;
    ensure!(out.code == 0, "send wait: {}", out.stderr);
    let waiting = out.lines[0]["task"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let out = driver(vec!["cancel", &waiting]).await?;
    ensure!(
        out.code == 0 && out.lines[0]["status"]["state"] == "TASK_STATE_CANCELED",
        "cancel: {:?} {}",
        out.lines,
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn sdk_client_sees_typed_errors() -> anyhow::Result<()> {
    let (url, _server) = serve(echo_with_grpc).await?;
    for binding in ["jsonrpc", "rest", "grpc"] {
        let out = run_driver(&url, binding, &["get", "no-such-task"]).await?;
        ensure!(
            out.code == 3,
            "{binding}: exit {} ({})",
            out.code,
            out.stderr
        );
        ensure!(
            out.stderr.contains("TASK_NOT_FOUND") || out.stderr.contains("-32001"),
            "{binding}: {}",
            out.stderr
        );
    }
    Ok(())
}

#[tokio::test]
async fn sdk_client_streams_and_pages() -> anyhow::Result<()> {
    let (url, _server) = serve(echo_with_grpc).await?;
    for binding in ["jsonrpc", "rest", "grpc"] {
        let out = run_driver(&url, binding, &["stream", "stream", "2"]).await?;
        ensure!(out.code == 0, "{binding}: {}", out.stderr);
        ensure!(
            out.lines.first().is_some_and(|l| l.get("task").is_some()),
            "{binding}: first event {:?}",
            out.lines.first()
        );
        let last = out
            .lines
            .last()
            .map(|l| l["statusUpdate"]["status"]["state"].clone());
        ensure!(
            last == Some("TASK_STATE_COMPLETED".into()),
            "{binding}: last {last:?}"
        );
    }
    let context = mew_cards::ContextId::generate().to_string();
    for i in 0..3 {
        let out = run_driver(
            &url,
            "jsonrpc",
            &["send", "--context", &context, "echo", &i.to_string()],
        )
        .await?;
        ensure!(out.code == 0, "send {i}: {}", out.stderr);
    }
    let out = run_driver(
        &url,
        "rest",
        &["list", "--context", &context, "--page-size", "2"],
    )
    .await?;
    ensure!(out.code == 0, "list: {}", out.stderr);
    let page = &out.lines[0];
    ensure!(
        page["tasks"].as_array().map(Vec::len) == Some(2) && page["totalSize"] == 3,
        "page {page}"
    );
    let token = page["nextPageToken"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(!token.is_empty(), "no next page token");
    let out = run_driver(
        &url,
        "jsonrpc",
        &[
            "list",
            "--context",
            &context,
            "--page-size",
            "2",
            "--page-token",
            &token,
        ],
    )
    .await?;
    ensure!(
        out.lines[0]["tasks"].as_array().map(Vec::len) == Some(1),
        "second page {}",
        out.lines[0]
    );
    Ok(())
}

const KEY: &str = "python-key-0123456789";
const SECRET: &str = "a-shared-secret-for-the-python-tests";

#[tokio::test]
async fn sdk_client_authenticates_with_the_cards_schemes() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.write_config(
        "node:\n  default_role: upper\nauth:\n  api_keys:\n    - name: py\n      \
         key_env: TEST_KEY_PY\n  jwt:\n    secret_env: TEST_JWT_SECRET\n    \
         issuer: https://issuer.test\n    audience: mew-test\n",
    )?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.set_env("TEST_KEY_PY", KEY);
    node.set_env("TEST_JWT_SECRET", SECRET);
    node.launch().await?;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        + 3600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": "py-jwt", "iss": "https://issuer.test", "aud": "mew-test", "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes())?,
    )?;
    for url in [node.url().to_owned(), node.role_url("upper")] {
        for binding in ["jsonrpc", "rest", "grpc"] {
            for credential in [["--api-key", KEY], ["--bearer", token.as_str()]] {
                let mut args = credential.to_vec();
                args.extend(["send", "hello"]);
                let out = run_driver(&url, binding, &args).await?;
                let what = format!("{url} {binding} {}", credential[0]);
                ensure!(out.code == 0, "{what}: exit {} ({})", out.code, out.stderr);
                let task = &out.lines[0]["task"];
                ensure!(
                    task["status"]["state"] == "TASK_STATE_COMPLETED",
                    "{what}: {task}"
                );
                ensure!(
                    task["artifacts"][0]["parts"][0]["text"]
                        .as_str()
                        .is_some_and(|text| text.trim() == "HELLO"),
                    "{what}: {task}"
                );
            }
            let out = run_driver(&url, binding, &["send", "hello"]).await?;
            // HTTP's 401, or gRPC's UNAUTHENTICATED.
            let refused = |out: &mew_tests::python::DriverOutput| {
                out.code == 2
                    && (out.stderr.contains("401") || out.stderr.contains("nauthenticated"))
            };
            ensure!(
                refused(&out),
                "{url} {binding} without a credential: exit {} ({})",
                out.code,
                out.stderr
            );
            let out = run_driver(&url, binding, &["--api-key", "wrong", "send", "hello"]).await?;
            ensure!(
                refused(&out),
                "{url} {binding} with a wrong key: exit {} ({})",
                out.code,
                out.stderr
            );
        }
    }
    Ok(())
}
