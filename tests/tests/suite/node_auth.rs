//! End-to-end tests of inbound authentication: API keys and JWT bearer tokens on both
//! bindings, the public cards, task visibility between principals, and the refusal to
//! serve a non-loopback address without authentication.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use jsonwebtoken::{EncodingKey, Header};
use mew_cards::{
    CancelTaskRequest, ErrorKind, GetTaskRequest, ListTasksRequest, Message, SecurityScheme,
    SendMessageRequest, SendMessageResponse, SubscribeToTaskRequest, Task, TaskState,
};
use mew_tests::node::{MewNode, command_role};
use mew_transport::{AgentTransport, Binding, CallContext, ClientOptions, Error, RemoteAgent};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use serde_json::{Value, json};

const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::HttpJson];
const WAIT: Duration = Duration::from_secs(30);

const ALICE_KEY: &str = "alice-key-0123456789";
const BOB_KEY: &str = "bob-key-9876543210";
const SECRET: &str = "a-shared-secret-for-the-tests-only";
const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "mew-test";

const AUTH_CONFIG: &str = "node:\n  default_role: upper\n\
auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n    - name: bob\n      key_env: TEST_KEY_BOB\n  \
jwt:\n    secret_env: TEST_JWT_SECRET\n    issuer: https://issuer.test\n    audience: mew-test\n    algorithms: [HS256]\n";

/// A node with two API keys (alice, bob) and a JWT secret, serving the `upper` role.
async fn auth_node() -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(AUTH_CONFIG)?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.set_env("TEST_KEY_ALICE", ALICE_KEY);
    node.set_env("TEST_KEY_BOB", BOB_KEY);
    node.set_env("TEST_JWT_SECRET", SECRET);
    node.launch().await?;
    Ok(node)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// An HS256 token for `sub`, expiring at `exp`, signed with `secret`.
fn token(sub: &str, exp: u64, secret: &str, audience: &str) -> anyhow::Result<String> {
    let claims = json!({ "sub": sub, "iss": ISSUER, "aud": audience, "exp": exp, "iat": now() });
    Ok(jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes())?,
    )?)
}

fn headers(pairs: &[(&'static str, &str)]) -> anyhow::Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value)?);
    }
    Ok(map)
}

fn bearer(token: &str) -> anyhow::Result<HeaderMap> {
    headers(&[("authorization", &format!("Bearer {token}"))])
}

/// A client of the agent at `path` (`""` for the front agent) with `headers` on every request.
async fn agent(
    node: &MewNode,
    path: &str,
    binding: Binding,
    headers: HeaderMap,
) -> anyhow::Result<RemoteAgent> {
    let url = format!("{}{path}", node.url());
    let options = ClientOptions {
        binding: Some(binding),
        headers,
        ..ClientOptions::default()
    };
    let agent = RemoteAgent::resolve_with(&url, options)
        .await
        .with_context(|| format!("cannot resolve the agent at {url}"))?;
    ensure!(
        agent.binding() == binding,
        "the client picked {:?}",
        agent.binding()
    );
    Ok(agent)
}

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, future)
        .await
        .with_context(|| format!("{what}: no answer within {WAIT:?}"))
}

async fn send(agent: &dyn AgentTransport, text: &str) -> Result<Task, Error> {
    let request = SendMessageRequest::new(Message::user_text(text));
    let response =
        tokio::time::timeout(WAIT, agent.send_message(&CallContext::anonymous(), request))
            .await
            .map_err(|_| Error::Transport {
                message: "no answer in time".to_owned(),
                source: None,
            })??;
    match response {
        SendMessageResponse::Task(task) => Ok(task),
        SendMessageResponse::Message(m) => Err(Error::Transport {
            message: format!("expected a task, got {m:?}"),
            source: None,
        }),
    }
}

/// The call failed with HTTP 401 (the client reports it as a transport or decode error
/// naming the status, or as an A2A error; the raw checks below pin the status itself).
fn expect_rejected<T: std::fmt::Debug>(
    outcome: Result<T, Error>,
    what: &str,
) -> anyhow::Result<()> {
    match outcome {
        Ok(value) => bail!("{what}: expected a rejection, got {value:?}"),
        Err(error) => {
            let text = format!("{error:?} {error}");
            ensure!(
                text.contains("401") || text.contains("nauthenticated"),
                "{what}: expected a 401, got {text}"
            );
            Ok(())
        }
    }
}

fn expect_kind<T: std::fmt::Debug>(
    outcome: Result<T, Error>,
    kind: ErrorKind,
) -> anyhow::Result<()> {
    match outcome {
        Err(Error::Protocol(e)) if e.kind == kind => Ok(()),
        other => bail!("expected {kind}, got {other:?}"),
    }
}

#[tokio::test]
async fn credentials_are_checked_on_both_bindings() -> anyhow::Result<()> {
    let node = auth_node().await?;
    let good_jwt = token("carol", now() + 3600, SECRET, AUDIENCE)?;
    let expired_jwt = token("carol", now() - 3600, SECRET, AUDIENCE)?;
    let forged_jwt = token("carol", now() + 3600, "not-the-secret", AUDIENCE)?;
    let wrong_audience = token("carol", now() + 3600, SECRET, "someone-else")?;
    for binding in BINDINGS {
        for path in ["", "/agents/upper"] {
            let rejected: [(&str, HeaderMap); 6] = [
                ("no credentials", HeaderMap::new()),
                ("a wrong API key", headers(&[("x-api-key", "wrong")])?),
                ("a wrong bearer", bearer("wrong")?),
                ("an expired JWT", bearer(&expired_jwt)?),
                ("a JWT with another secret", bearer(&forged_jwt)?),
                ("a JWT for another audience", bearer(&wrong_audience)?),
            ];
            for (what, headers) in rejected {
                let client = agent(&node, path, binding, headers).await?;
                let outcome = bounded(what, send(&client, "hi")).await?;
                expect_rejected(outcome, &format!("{binding:?} {path:?} with {what}"))?;
            }
            let accepted: [(&str, HeaderMap); 3] = [
                ("the API key header", headers(&[("x-api-key", ALICE_KEY)])?),
                ("the API key as bearer", bearer(ALICE_KEY)?),
                ("a good JWT", bearer(&good_jwt)?),
            ];
            for (what, headers) in accepted {
                let client = agent(&node, path, binding, headers).await?;
                let task = bounded(what, send(&client, "hi")).await??;
                ensure!(
                    task.status.state == TaskState::Completed,
                    "{binding:?} {path:?} with {what}: {task:?}"
                );
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn rejections_are_401_with_www_authenticate_on_every_route() -> anyhow::Result<()> {
    let node = auth_node().await?;
    let http = reqwest::Client::new();
    let url = node.url();
    let jsonrpc = json!({ "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {} });
    let expired = token("carol", now() - 3600, SECRET, AUDIENCE)?;
    let requests = [
        http.post(format!("{url}/")).json(&jsonrpc),
        http.post(format!("{url}/agents/upper")).json(&jsonrpc),
        http.get(format!("{url}/tasks")),
        http.get(format!("{url}/t1/tasks")),
        http.get(format!("{url}/agents/upper/tasks")),
        http.get(format!("{url}/agents/upper/t1/tasks")),
        http.get(format!("{url}/tasks"))
            .header(AUTHORIZATION, format!("Bearer {expired}")),
        http.post(format!("{url}/message:send")).json(&json!({})),
        http.get(format!("{url}/status")),
    ];
    for request in requests {
        let request = request.header("A2A-Version", "1.0").build()?;
        let what = format!("{} {}", request.method(), request.url());
        let response = bounded(&what, http.execute(request)).await??;
        ensure!(response.status() == 401, "{what}: {}", response.status());
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        ensure!(
            challenge.starts_with("Bearer"),
            "{what}: WWW-Authenticate {challenge:?}"
        );
        let body: Value = response.json().await?;
        ensure!(body.get("error").is_some(), "{what}: body {body}");
    }
    // With a key, the same routes answer.
    let response = http
        .get(format!("{url}/agents/upper/tasks"))
        .header("X-API-Key", ALICE_KEY)
        .header("A2A-Version", "1.0")
        .send()
        .await?;
    ensure!(
        response.status() == 200,
        "with a key: {}",
        response.status()
    );
    Ok(())
}

#[tokio::test]
async fn the_public_cards_are_public_and_list_the_schemes() -> anyhow::Result<()> {
    let node = auth_node().await?;
    for path in [
        "/.well-known/agent-card.json",
        "/agents/upper/.well-known/agent-card.json",
    ] {
        let (status, body) = node.get_json(path).await?;
        ensure!(status == 200, "{path}: {status}");
        let card: mew_cards::AgentCard = serde_json::from_value(body.clone())?;
        match card.security_schemes.get("apiKey") {
            Some(SecurityScheme::ApiKey(scheme)) => ensure!(
                scheme.location == "header" && scheme.name == "X-API-Key",
                "{path}: {scheme:?}"
            ),
            other => bail!("{path}: apiKey scheme {other:?} in {body}"),
        }
        match card.security_schemes.get("bearer") {
            Some(SecurityScheme::HttpAuth(scheme)) => ensure!(
                scheme.scheme == "Bearer" && scheme.bearer_format == "JWT",
                "{path}: {scheme:?}"
            ),
            other => bail!("{path}: bearer scheme {other:?} in {body}"),
        }
        let required: Vec<Vec<&String>> = card
            .security_requirements
            .iter()
            .map(|r| r.schemes.keys().collect())
            .collect();
        ensure!(
            required == [vec!["apiKey"], vec!["bearer"]],
            "{path}: requirements {required:?}"
        );
    }
    for path in ["/healthz", "/readyz"] {
        let (status, _) = node.get_json(path).await?;
        ensure!(status == 200, "{path}: {status}");
    }
    Ok(())
}

#[tokio::test]
async fn one_principal_cannot_see_or_cancel_anothers_tasks() -> anyhow::Result<()> {
    let node = auth_node().await?;
    let bob_jwt = token("bob", now() + 3600, SECRET, AUDIENCE)?;
    for binding in BINDINGS {
        for path in ["", "/agents/upper"] {
            let alice = agent(&node, path, binding, headers(&[("x-api-key", ALICE_KEY)])?).await?;
            // Bob by API key and by JWT (both name the principal `bob`).
            let bobs = [
                agent(&node, path, binding, headers(&[("x-api-key", BOB_KEY)])?).await?,
                agent(&node, path, binding, bearer(&bob_jwt)?).await?,
            ];
            let task = bounded("send", send(&alice, "mine")).await??;
            let ctx = CallContext::anonymous();
            let get = GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            };
            let seen = bounded("alice gets", alice.get_task(&ctx, get.clone())).await??;
            ensure!(seen.id == task.id, "alice sees her task");
            for bob in &bobs {
                let what = format!("{binding:?} {path:?}");
                expect_kind(
                    bounded("bob gets", bob.get_task(&ctx, get.clone())).await?,
                    ErrorKind::TaskNotFound,
                )
                .context(format!("{what}: GetTask"))?;
                let cancel = CancelTaskRequest {
                    id: task.id.clone(),
                    ..Default::default()
                };
                expect_kind(
                    bounded("bob cancels", bob.cancel_task(&ctx, cancel)).await?,
                    ErrorKind::TaskNotFound,
                )
                .context(format!("{what}: CancelTask"))?;
                let subscribe = SubscribeToTaskRequest {
                    id: task.id.clone(),
                    ..Default::default()
                };
                expect_kind(
                    bounded("bob subscribes", bob.subscribe_to_task(&ctx, subscribe))
                        .await?
                        .map(|_| ()),
                    ErrorKind::TaskNotFound,
                )
                .context(format!("{what}: SubscribeToTask"))?;
                let listed = bounded(
                    "bob lists",
                    bob.list_tasks(&ctx, ListTasksRequest::default()),
                )
                .await??;
                ensure!(
                    listed.tasks.iter().all(|t| t.id != task.id),
                    "{what}: bob lists alice's task"
                );
            }
            let listed = bounded(
                "alice lists",
                alice.list_tasks(&ctx, ListTasksRequest::default()),
            )
            .await??;
            ensure!(
                listed.tasks.iter().any(|t| t.id == task.id),
                "{binding:?} {path:?}: alice does not list her task"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_public_address_without_auth_is_refused() -> anyhow::Result<()> {
    let node = MewNode::new()?;
    node.write_config("node:\n  port: 0\n")?;
    let data = node.data_dir();
    let data = data.to_str().context("the data directory is not UTF-8")?;
    let (code, stdout, stderr) = node
        .client(&["up", "--host", "0.0.0.0", "--port", "0", "--data-dir", data])
        .await?;
    ensure!(code == 1, "exit {code}\nstdout: {stdout}\nstderr: {stderr}");
    ensure!(
        stderr.contains("refusing to serve 0.0.0.0 without authentication")
            && stderr.contains("auth.allow_unauthenticated: true"),
        "stderr: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn the_cli_authenticates_with_a_token() -> anyhow::Result<()> {
    let node = auth_node().await?;
    let url = node.url().to_owned();
    let (code, stdout, stderr) = node
        .client(&[
            "send", "upper", "hello", "--node", &url, "--token", ALICE_KEY,
        ])
        .await?;
    ensure!(
        code == 0 && stdout.contains("HELLO"),
        "with a token: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = node
        .client(&["send", "upper", "hello", "--node", &url])
        .await?;
    ensure!(
        code != 0 && !stdout.contains("HELLO"),
        "without a token: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let count = |stdout: &str| -> anyhow::Result<usize> {
        let listed: Value = serde_json::from_str(stdout).context("tasks list --json")?;
        Ok(listed["tasks"].as_array().map_or(0, Vec::len))
    };
    for (key, expected) in [(ALICE_KEY, 1), (BOB_KEY, 0)] {
        let (code, stdout, stderr) = node
            .client(&["tasks", "list", "--json", "--node", &url, "--token", key])
            .await?;
        ensure!(
            code == 0 && count(&stdout)? == expected,
            "tasks list with {key}: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
        );
    }
    Ok(())
}
