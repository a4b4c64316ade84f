//! End-to-end tests of inbound authentication: API keys and JWT bearer tokens (HS256 and
//! public keys from a JWKS file) on every binding (in gRPC's metadata too), the public cards,
//! task visibility between principals, role access rules (403; on gRPC, by the request's
//! tenant), the extended agent card, and the refusal to serve a
//! non-loopback address without authentication.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use jsonwebtoken::{EncodingKey, Header};
use mew_cards::{
    AgentCard, CancelTaskRequest, ErrorKind, GetExtendedAgentCardRequest, GetTaskRequest,
    ListTasksRequest, Message, SecurityScheme, SendMessageRequest, SendMessageResponse,
    SubscribeToTaskRequest, Task, TaskState,
};
use mew_tests::node::{MewNode, command_role};
use mew_transport::{AgentTransport, Binding, CallContext, ClientOptions, Error, RemoteAgent};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use serde_json::{Value, json};

const BINDINGS: [Binding; 3] = [Binding::JsonRpc, Binding::HttpJson, Binding::Grpc];
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
async fn credentials_are_checked_on_every_binding() -> anyhow::Result<()> {
    let node = auth_node().await?;
    let good_jwt = token("carol", now() + 3600, SECRET, AUDIENCE)?;
    let expired_jwt = token("carol", now() - 3600, SECRET, AUDIENCE)?;
    let forged_jwt = token("carol", now() + 3600, "not-the-secret", AUDIENCE)?;
    let wrong_audience = token("carol", now() + 3600, SECRET, "someone-else")?;
    let bob_jwt = token("bob", now() + 3600, SECRET, AUDIENCE)?;
    for binding in BINDINGS {
        for path in ["", "/agents/upper"] {
            let mixed = headers(&[
                ("x-api-key", ALICE_KEY),
                ("authorization", &format!("Bearer {bob_jwt}")),
            ])?;
            let rejected: [(&str, HeaderMap); 7] = [
                ("no credentials", HeaderMap::new()),
                ("alice's API key and bob's JWT", mixed),
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
    // The task tree walk sends the token too; another principal is told it is not found.
    let (_, stdout, _) = node
        .client(&[
            "tasks", "list", "--json", "--node", &url, "--token", ALICE_KEY,
        ])
        .await?;
    let listed: Value = serde_json::from_str(&stdout)?;
    let id = listed["tasks"][0]["id"]
        .as_str()
        .context("no task id")?
        .to_owned();
    let tree = |key: &'static str| {
        let (url, id) = (url.clone(), id.clone());
        let node = &node;
        async move {
            node.client(&[
                "tasks", "tree", &id, "--json", "--node", &url, "--token", key,
            ])
            .await
        }
    };
    let (code, stdout, stderr) = tree(ALICE_KEY).await?;
    ensure!(
        code == 0 && stdout.contains(&id),
        "tasks tree with the owner's key: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = tree(BOB_KEY).await?;
    ensure!(
        code != 0 && stderr.to_lowercase().contains("not found"),
        "tasks tree with another's key: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    Ok(())
}

// Test keys, generated once for these tests only: P-256 private keys as PKCS#8 DER in hex,
// and the public half of the first as a JWK.
const ES_A_DER_HEX: &str = concat!(
    "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420dbec",
    "63dcc965dc924cfdfff9a13dd6bb2f5ea3604d8d19d26914a457fc79dd7da144034200047c65",
    "429c178e7c0c01c9d267e38d1a2ce8be3957ec6d9fb8cdb8683b770c05381ccbb9d53cb5b90f",
    "63aecdfcd373a046f38172065784b58b607c44b5a0fc81da",
);
const ES_B_DER_HEX: &str = concat!(
    "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b020101042041f7",
    "6e259d75ca3a68b9d790a52423fb24a0f53f32740bababd8fe67380e9a5da144034200044bb5",
    "026f512cda356b94180f66e6da5f48a13c31490169853ec9a1d2ca99122e5eab38e31802c5ad",
    "97169572d6832bd04ec2138cf86b432ff2b095f6537c7ffd",
);
const ES_A_JWK: &str = concat!(
    "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"fGVCnBeOfAwBydJn440aLOi-OVfsbZ-4zbhoO3cMBTg\",",
    "\"y\":\"HMu51Ty1uQ9jrs3803OgRvOBcgZXhLWLYHxEtaD8gdo\"}",
);

fn from_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            Ok(u8::from_str_radix(
                text.get(i..i + 2).context("odd hex")?,
                16,
            )?)
        })
        .collect()
}

/// An ES256 token for `sub` naming key `kid`, signed with the P-256 key `der_hex`.
fn es256_token(sub: &str, kid: &str, der_hex: &str) -> anyhow::Result<String> {
    let claims = json!({ "sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 3600 });
    let mut header = Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    Ok(jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ec_der(&from_hex(der_hex)?),
    )?)
}

#[tokio::test]
async fn a_jwks_node_accepts_tokens_of_its_keys_only() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let mut jwk: Value = serde_json::from_str(ES_A_JWK)?;
    jwk["kid"] = json!("es-1");
    jwk["alg"] = json!("ES256");
    std::fs::write(
        node.project_dir().join("jwks.json"),
        json!({ "keys": [jwk] }).to_string(),
    )?;
    node.write_config(
        "node:\n  default_role: upper\nauth:\n  jwt:\n    jwks_file: jwks.json\n    \
         issuer: https://issuer.test\n    audience: mew-test\n",
    )?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.launch().await?;
    let good = es256_token("erin", "es-1", ES_A_DER_HEX)?;
    let other_key = es256_token("erin", "es-1", ES_B_DER_HEX)?;
    let unknown_kid = es256_token("erin", "es-2", ES_A_DER_HEX)?;
    let hs256 = token("erin", now() + 3600, ES_A_JWK, AUDIENCE)?;
    for binding in BINDINGS {
        for path in ["", "/agents/upper"] {
            let client = agent(&node, path, binding, bearer(&good)?).await?;
            let task = bounded("send", send(&client, "hi")).await??;
            ensure!(
                task.status.state == TaskState::Completed,
                "{binding:?} {path:?}: {task:?}"
            );
            let listed = bounded(
                "list",
                client.list_tasks(&CallContext::anonymous(), ListTasksRequest::default()),
            )
            .await??;
            ensure!(
                listed.tasks.iter().any(|t| t.id == task.id),
                "{binding:?} {path:?}: erin does not list her task"
            );
            for (what, token) in [
                ("a token signed by another key", &other_key),
                ("a token naming an unknown key", &unknown_kid),
                ("an HS256 token", &hs256),
            ] {
                let client = agent(&node, path, binding, bearer(token)?).await?;
                let outcome = bounded(what, send(&client, "hi")).await?;
                expect_rejected(outcome, &format!("{binding:?} {path:?} with {what}"))?;
            }
        }
    }
    Ok(())
}

const ACCESS_CONFIG: &str = "node:\n  default_role: upper\n\
auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n    - name: bob\n      key_env: TEST_KEY_BOB\n  \
roles:\n    upper: [bob]\n    ghost: [alice]\n  \
extended_card:\n    description: The members' view of this agent.\n    \
skills:\n      - id: members-only\n        name: Members only\n        description: A skill only members see.\n        tags: [private]\n";

/// A node where only bob may use `upper` (also the default role), anyone may use `lower`,
/// and authenticated callers get an extended card.
async fn access_node() -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(ACCESS_CONFIG)?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.write_role("lower.md", &command_role("lower", "sh -c 'tr A-Z a-z'"))?;
    node.set_env("TEST_KEY_ALICE", ALICE_KEY);
    node.set_env("TEST_KEY_BOB", BOB_KEY);
    node.launch().await?;
    Ok(node)
}

#[tokio::test]
async fn a_restricted_role_is_403_for_other_principals() -> anyhow::Result<()> {
    let node = access_node().await?;
    let alice = || headers(&[("x-api-key", ALICE_KEY)]);
    let bob = || headers(&[("x-api-key", BOB_KEY)]);
    for binding in BINDINGS {
        for path in ["", "/agents/upper"] {
            let client = agent(&node, path, binding, alice()?).await?;
            let what = format!("alice on {binding:?} {path:?}");
            match bounded(&what, send(&client, "hi")).await? {
                Ok(task) => bail!("{what}: expected a 403, got {task:?}"),
                Err(error) => {
                    let text = format!("{error:?} {error}");
                    ensure!(
                        text.contains("403") || text.contains("forbidden"),
                        "{what}: expected a 403, got {text}"
                    );
                    ensure!(!text.contains("401"), "{what}: {text}");
                }
            }
            let client = agent(&node, path, binding, bob()?).await?;
            let task = bounded("bob sends", send(&client, "hi")).await??;
            ensure!(
                task.status.state == TaskState::Completed,
                "bob on {binding:?} {path:?}: {task:?}"
            );
        }
        let client = agent(&node, "/agents/lower", binding, alice()?).await?;
        let task = bounded("alice sends to lower", send(&client, "HI")).await??;
        ensure!(
            task.status.state == TaskState::Completed,
            "alice on {binding:?} lower: {task:?}"
        );
    }
    // The raw answers: 403 with an error body in the binding's shape, no challenge.
    let http = reqwest::Client::new();
    let url = node.url();
    let jsonrpc = json!({ "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {} });
    for request in [
        http.post(format!("{url}/")).json(&jsonrpc),
        http.post(format!("{url}/agents/upper")).json(&jsonrpc),
        http.get(format!("{url}/tasks")),
        http.get(format!("{url}/agents/upper/tasks")),
        // The front agent under the tenant `agents`.
        http.get(format!("{url}/agents/tasks")),
        http.post(format!("{url}/agents/upper/message:send")).json(
            &json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
        ),
    ] {
        let request = request
            .header("X-API-Key", ALICE_KEY)
            .header("A2A-Version", "1.0")
            .build()?;
        let what = format!("{} {}", request.method(), request.url());
        let response = bounded(&what, http.execute(request)).await??;
        ensure!(response.status() == 403, "{what}: {}", response.status());
        ensure!(
            response.headers().get(WWW_AUTHENTICATE).is_none(),
            "{what}: a 403 has no challenge"
        );
        let body: Value = response.json().await?;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains("`alice` may not use the role `upper`"),
            "{what}: body {body}"
        );
    }
    // The public cards stay public.
    for path in [
        "/.well-known/agent-card.json",
        "/agents/upper/.well-known/agent-card.json",
    ] {
        let (status, _) = node.get_json(path).await?;
        ensure!(status == 200, "{path}: {status}");
    }
    // Alice's refused message never became a task: bob, who may use upper, sees only his own.
    let client = agent(&node, "", Binding::JsonRpc, bob()?).await?;
    let listed = bounded(
        "bob lists",
        client.list_tasks(&CallContext::anonymous(), ListTasksRequest::default()),
    )
    .await??;
    ensure!(
        listed.tasks.len() == 2 * BINDINGS.len(),
        "bob's tasks: {:?}",
        listed.tasks.iter().map(|t| &t.id).collect::<Vec<_>>()
    );
    let log = node.log();
    ensure!(
        log.contains("auth.roles: there is no role `ghost`"),
        "no warning for the unknown role in the log:\n{log}"
    );
    Ok(())
}

#[tokio::test]
async fn the_extended_card_is_served_to_authenticated_callers() -> anyhow::Result<()> {
    let node = access_node().await?;
    let description = "The members' view of this agent.";
    let has_private_skill = |card: &AgentCard| card.skills.iter().any(|s| s.id == "members-only");
    for path in ["", "/agents/upper", "/agents/lower"] {
        let (status, body) = node
            .get_json(&format!("{path}/.well-known/agent-card.json"))
            .await?;
        ensure!(status == 200, "{path}: {status}");
        let card: AgentCard = serde_json::from_value(body.clone())?;
        ensure!(
            card.capabilities.extended_agent_card == Some(true),
            "{path}: the public card does not announce the extended card: {body}"
        );
        ensure!(
            !has_private_skill(&card) && card.description != description,
            "{path}: the public card shows the extended content: {body}"
        );
        for binding in BINDINGS {
            let client = agent(&node, path, binding, headers(&[("x-api-key", BOB_KEY)])?).await?;
            let extended = bounded(
                "extended card",
                client.get_extended_agent_card(
                    &CallContext::anonymous(),
                    GetExtendedAgentCardRequest::default(),
                ),
            )
            .await??;
            ensure!(
                extended.description == description && has_private_skill(&extended),
                "{binding:?} {path:?}: {extended:?}"
            );
            ensure!(
                extended.name == card.name && extended.skills.len() == card.skills.len() + 1,
                "{binding:?} {path:?}: the extended card is not the public one plus the \
                 content: {extended:?}"
            );
        }
    }
    // The raw requests, with and without a key.
    let http = reqwest::Client::new();
    let url = node.url();
    let jsonrpc =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {} });
    for key in [Some(BOB_KEY), None] {
        for (request, jsonrpc) in [
            (http.post(format!("{url}/")).json(&jsonrpc), true),
            (
                http.post(format!("{url}/agents/lower")).json(&jsonrpc),
                true,
            ),
            (http.get(format!("{url}/extendedAgentCard")), false),
            (
                http.get(format!("{url}/agents/lower/extendedAgentCard")),
                false,
            ),
        ] {
            let request = match key {
                Some(key) => request.header("X-API-Key", key),
                None => request,
            };
            let request = request.header("A2A-Version", "1.0").build()?;
            let what = format!("{} {} with {key:?}", request.method(), request.url());
            let response = bounded(&what, http.execute(request)).await??;
            let status = response.status();
            let body: Value = response.json().await?;
            if key.is_none() {
                ensure!(status == 401, "{what}: {status} {body}");
                continue;
            }
            ensure!(status == 200, "{what}: {status} {body}");
            let card = if jsonrpc { &body["result"] } else { &body };
            ensure!(card["description"] == description, "{what}: {body}");
            ensure!(
                card["skills"]
                    .as_array()
                    .is_some_and(|skills| skills.iter().any(|s| s["id"] == "members-only")),
                "{what}: {body}"
            );
        }
    }
    Ok(())
}
