//! Outbound credentials: a node presents each peer the credentials its `peers.NAME.auth`
//! names (an API key from the environment, or a JWT it mints with its own key), on the Agent
//! tool's calls by peer role and by URL; the peer sees the caller as that principal.

use anyhow::ensure;
use mew_cards::{Task, TaskState};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, command_role, scripted_model_config, send_text, status_text};
use mew_transport::{AgentTransport, Binding, CallContext, ClientOptions, RemoteAgent};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::json;

const MODEL_KEY_VAR: &str = "MEW_TEST_MODEL_KEY";

/// Node A: a `boss` role driven by `model` that may delegate, `peers` as given, and `env`.
async fn delegating_node(
    model: &ScriptedModel,
    peers: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<MewNode> {
    let config = format!("{}{peers}", scripted_model_config(model));
    let mut node = MewNode::new()?;
    node.set_env(MODEL_KEY_VAR, "sk-test-scripted");
    for (name, value) in env {
        node.set_env(name, value);
    }
    node.write_config(&config)?;
    node.write_role(
        "boss.md",
        "---\nname: boss\ndescription: Delegates.\ntools: [Agent]\n---\nYou delegate.\n",
    )?;
    node.launch().await?;
    Ok(node)
}

/// The tasks node `node` shows to the caller with `headers`.
async fn tasks_seen_with(node: &MewNode, headers: HeaderMap) -> anyhow::Result<Vec<Task>> {
    let options = ClientOptions {
        binding: Some(Binding::JsonRpc),
        headers,
        ..ClientOptions::default()
    };
    let agent = RemoteAgent::resolve_with(node.url(), options).await?;
    Ok(agent
        .list_tasks(
            &CallContext::default(),
            mew_cards::ListTasksRequest::default(),
        )
        .await?
        .tasks)
}

/// Node B: role `upper`, open to the principal `node-a`, whose API key is `key-of-node-a`.
async fn keyed_peer() -> anyhow::Result<MewNode> {
    let mut b = MewNode::new()?;
    b.set_env("B_KEY_FOR_A", "key-of-node-a");
    b.write_config("auth:\n  api_keys:\n    - name: node-a\n      key_env: B_KEY_FOR_A\n")?;
    b.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    b.launch().await?;
    Ok(b)
}

#[tokio::test]
async fn an_api_key_from_the_environment_reaches_the_peer_by_role_and_by_url() -> anyhow::Result<()>
{
    let b = keyed_peer().await?;

    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": "b/upper"}),
        ),
        Step::text("It shouted.")
            .expect_tool_results(["call_1"])
            .expect_last_user("SHOUT THIS"),
        Step::tool_call(
            "call_2",
            "Agent",
            json!({"prompt": "and this", "description": "shout", "subagent_type": b.role_url("upper")}),
        ),
        Step::text("It shouted again.")
            .expect_tool_results(["call_2"])
            .expect_last_user("AND THIS"),
    ])?;
    let peers = format!(
        "peers:\n  b:\n    url: {}\n    auth:\n      api_key_env: KEY_FOR_B\n",
        b.url()
    );
    // The key for B is in A's environment, never in its configuration.
    let a = delegating_node(&model, &peers, &[("KEY_FOR_B", "key-of-node-a")]).await?;

    for text in ["shout", "again"] {
        let boss = send_text(&a, "boss", text).await?;
        ensure!(
            boss.status.state == TaskState::Completed,
            "{:?}: {}",
            boss.status.state,
            status_text(&boss)
        );
    }
    model.assert_done();

    // B ran both children for the principal the key names.
    let mut as_a = HeaderMap::new();
    as_a.insert(
        HeaderName::from_static("x-api-key"),
        HeaderValue::from_static("key-of-node-a"),
    );
    let on_b = tasks_seen_with(&b, as_a).await?;
    ensure!(on_b.len() == 2, "tasks of node-a on B: {on_b:?}");
    ensure!(
        on_b.iter().all(|t| t.status.state == TaskState::Completed),
        "{on_b:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_jwt_minted_by_the_node_verifies_against_its_jwks_on_the_peer() -> anyhow::Result<()> {
    // B's port is chosen first, so that A can name B as a peer and B can name A's JWKS.
    let b_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let b_url = format!("http://127.0.0.1:{b_port}");

    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": "b/upper"}),
        ),
        Step::text("It shouted.")
            .expect_tool_results(["call_1"])
            .expect_last_user("SHOUT THIS"),
    ])?;
    let a = delegating_node(
        &model,
        &format!(
            "peers:\n  b:\n    url: {b_url}\n    auth:\n      jwt:\n        audience: node-b\n"
        ),
        &[],
    )
    .await?;

    let mut b = MewNode::new()?;
    b.set_port(b_port);
    b.write_config(&format!(
        "auth:\n  jwt:\n    jwks_url: {a}/.well-known/jwks.json\n    issuer: {a}\n    audience: node-b\n    algorithms: [EdDSA]\n",
        a = a.url()
    ))?;
    b.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    b.launch().await?;

    let boss = send_text(&a, "boss", "shout").await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    model.assert_done();

    // Without A's token B refuses.
    let (status, _) = b.get_json("/tasks").await?;
    ensure!(status == 401, "an anonymous caller got {status}");
    let log = b.log();
    ensure!(!log.contains("panicked"), "B's log: {log}");
    Ok(())
}

#[tokio::test]
async fn a_peer_without_credentials_is_refused_and_the_model_sees_why() -> anyhow::Result<()> {
    let b = keyed_peer().await?;

    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": "b/upper"}),
        ),
        Step::text("B refused.").expect_tool_results(["call_1"]),
    ])?;
    let a = delegating_node(
        &model,
        &format!("peers:\n  b:\n    url: {}\n", b.url()),
        &[],
    )
    .await?;
    let boss = send_text(&a, "boss", "shout").await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    model.assert_done();
    let requests = model.requests();
    let result = requests[1].last_user_text();
    ensure!(
        result.contains("credentials") || result.contains("401"),
        "the tool result does not say why: {result}"
    );
    ensure!(
        !result.contains("SHOUT THIS"),
        "the child ran without credentials: {result}"
    );
    Ok(())
}
