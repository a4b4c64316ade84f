//! An MCP server behind OAuth, through a running node: the server asks for authorization, a
//! task that needs it asks its caller to sign in (AUTH_REQUIRED with the authorization URL),
//! the authorization server sends the browser back to the node's callback, and the task goes
//! on by itself; a rejected token is refreshed without asking anyone, and when the refresh
//! token is gone too, the call that failed asks for a new sign-in and is made again after it.

use anyhow::{Context, ensure};
use mew_cards::{GetTaskRequest, Message, Task, TaskId, TaskState};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, poll_until, scripted_model_config, status_text};
use mew_tests::oauth::ProtectedMcpServer;
use mew_transport::{AgentTransport, Binding, CallContext};
use serde_json::json;

/// How long a condition may take on a busy machine.
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The API keys of the two principals of the tests with `auth:`.
const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-9876543210";

/// A running node whose role `toolsmith` uses the protected server as `secure` (its entry's
/// `oauth:` is `oauth` when not empty), on `model`, the echo tool allowed; with `auth`, alice
/// and bob authenticate by API key. `env` is set for the node.
async fn toolsmith_node(
    model: &ScriptedModel,
    server: &ProtectedMcpServer,
    auth: bool,
    oauth: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<MewNode> {
    let mut config = scripted_model_config(model);
    if auth {
        config.push_str(
            "auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n    - name: bob\n      key_env: TEST_KEY_BOB\n",
        );
    }
    config.push_str(&format!(
        "permissions:\n  allow: [mcp__secure__echo]\nmcp_servers:\n  secure:\n    url: {}\n    connect_timeout: 10s\n",
        server.url()
    ));
    if !oauth.is_empty() {
        config.push_str(&format!("    oauth: {oauth}\n"));
    }
    let mut node = MewNode::new()?;
    node.write_config(&config)?;
    node.set_env("TEST_KEY_ALICE", ALICE);
    node.set_env("TEST_KEY_BOB", BOB);
    for (name, value) in env {
        node.set_env(name, value);
    }
    node.write_role(
        "toolsmith.md",
        "---\nname: toolsmith\ndescription: Uses MCP tools.\ntools: [mcp__secure]\n---\nUse the tools.\n",
    )?;
    node.launch().await?;
    Ok(node)
}

/// The authorization URL of a task in AUTH_REQUIRED, from the data part of its status message.
fn authorization_url(task: &Task) -> anyhow::Result<String> {
    ensure!(
        task.status.state == TaskState::AuthRequired,
        "{:?}: {}",
        task.status.state,
        status_text(task)
    );
    let message = task.status.message.as_ref().context("no status message")?;
    let ask = message
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("ask"))
        .cloned();
    ensure!(ask == Some(json!("authorization")), "mew.ask is {ask:?}");
    let data = message
        .parts
        .iter()
        .find_map(|part| match &part.content {
            mew_cards::PartContent::Data(data) => Some(data.clone()),
            _ => None,
        })
        .context("no data part")?;
    ensure!(data["server"] == "secure", "{data}");
    let url = data["url"].as_str().context("no url")?.to_owned();
    ensure!(
        message.text().contains(&url),
        "the message does not say where to sign in: {}",
        message.text()
    );
    Ok(url)
}

/// What the user does with the authorization URL: opens it; the authorization server
/// approves and sends the browser to the node's callback. Returns the page the callback
/// showed.
async fn sign_in(url: &str) -> anyhow::Result<String> {
    let response = reqwest::get(url).await?;
    let status = response.status();
    let page = response.text().await?;
    ensure!(
        status.is_success(),
        "the callback answered {status}: {page}"
    );
    Ok(page)
}

/// Waits until the task `id` of the role `toolsmith` is over, and returns it.
async fn finished(node: &MewNode, id: &TaskId) -> anyhow::Result<Task> {
    let agent = node.agent("/agents/toolsmith", Binding::JsonRpc).await?;
    poll_until("the task goes on and completes", WAIT, || {
        let agent = agent.clone();
        async move {
            let task = agent
                .get_task(
                    &CallContext::default(),
                    GetTaskRequest {
                        id: id.clone(),
                        ..Default::default()
                    },
                )
                .await?;
            Ok(task.status.state.is_terminal().then_some(task))
        }
    })
    .await
}

#[tokio::test]
async fn a_task_asks_its_caller_to_sign_in_and_goes_on_after_the_callback() -> anyhow::Result<()> {
    let server = ProtectedMcpServer::start().await?;
    let model = ScriptedModel::start(vec![
        // The server is not signed in to: only its sign-in tool is offered.
        Step::tool_call("call_1", "mcp__secure__sign_in", json!({}))
            .expect_tools_include(["mcp__secure__sign_in"])
            .expect_tools_exclude(["mcp__secure__echo"]),
        // The callback continued the task: the server's tools are offered now.
        Step::tool_call("call_2", "mcp__secure__echo", json!({"text": "hi"}))
            .expect_tool_results(["call_1"])
            .expect_last_user("Signed in to the MCP server secure")
            .expect_tools_include(["mcp__secure__echo"]),
        Step::text("The server said hi.").expect_last_user("hi"),
        // A second task, after the access token was revoked: refreshed, nobody is asked.
        Step::tool_call("call_3", "mcp__secure__echo", json!({"text": "again"})),
        Step::text("The server said again.").expect_last_user("again"),
        // A third, after every token was revoked: the call asks for a new sign-in, and is
        // made again after it.
        Step::tool_call("call_4", "mcp__secure__echo", json!({"text": "third"})),
        Step::text("The server said third.")
            .expect_tool_results(["call_4"])
            .expect_last_user("third"),
    ])?;
    let node = toolsmith_node(&model, &server, false, "", &[]).await?;

    let asked = mew_tests::node::send(&node, "toolsmith", Message::user_text("say hi")).await?;
    let url = authorization_url(&asked)?;
    let page = sign_in(&url).await?;
    ensure!(
        page.contains("Signed in to the MCP server secure"),
        "{page}"
    );
    let done = finished(&node, &asked.id).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "The server said hi.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    ensure!(server.sign_ins() == 1, "{} sign-ins", server.sign_ins());
    // The callback's state is good once.
    let again = reqwest::get(&url).await?;
    ensure!(
        again.status() == reqwest::StatusCode::BAD_REQUEST,
        "a used sign-in completed twice: {}",
        again.status()
    );

    // A forged state, an authorization server's refusal, an oversized query: refused, and
    // nothing changes.
    let callback = format!("{}/mew/v1/mcp/oauth/callback", node.url());
    for (query, says) in [
        ("code=c&state=forged".to_owned(), "no sign-in waits"),
        ("error=access_denied&state=x".to_owned(), "access_denied"),
        (format!("state={}", "x".repeat(9000)), "too long"),
    ] {
        let response = reqwest::get(format!("{callback}?{query}")).await?;
        let status = response.status();
        let page = response.text().await?;
        ensure!(
            status.is_client_error() && page.contains(says),
            "{query:.40}: {status} {page}"
        );
    }
    ensure!(server.sign_ins() == 1, "{} sign-ins", server.sign_ins());

    server.revoke_access_tokens();
    let refreshed = mew_tests::node::send(&node, "toolsmith", Message::user_text("again")).await?;
    ensure!(
        refreshed.status.state == TaskState::Completed
            && status_text(&refreshed) == "The server said again.",
        "{:?}: {}",
        refreshed.status.state,
        status_text(&refreshed)
    );
    ensure!(server.refreshes() == 1, "{} refreshes", server.refreshes());

    server.revoke_everything();
    let asked = mew_tests::node::send(&node, "toolsmith", Message::user_text("third")).await?;
    let url = authorization_url(&asked)?;
    sign_in(&url).await?;
    let done = finished(&node, &asked.id)
        .await
        .with_context(|| node.log())?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "The server said third.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    ensure!(server.sign_ins() == 2, "{} sign-ins", server.sign_ins());
    model.assert_done();

    // The tokens are sealed in the data directory, never written in the clear.
    let dir = node.data_dir().join("mcp-oauth/secure");
    let sealed = std::fs::read(dir.join("node.token"))?;
    ensure!(
        !String::from_utf8_lossy(&sealed).contains("access-"),
        "a token is in the clear"
    );
    Ok(())
}

#[tokio::test]
async fn where_callers_are_told_apart_no_task_signs_the_node_in_for_everyone() -> anyhow::Result<()>
{
    // The node's tokens act for every task: with two principals, a sign-in alice made would
    // act for bob too. So tasks do not ask; the server's tools stay away until the node's
    // operator signs in with `mew mcp login`, and the call-time refusal says so.
    let server = ProtectedMcpServer::start().await?;
    let model = ScriptedModel::start(vec![
        Step::text("The server is not reachable.")
            .expect_tools_exclude(["mcp__secure__sign_in", "mcp__secure__echo"]),
    ])?;
    let node = toolsmith_node(&model, &server, true, "", &[]).await?;
    let agent = agent_as(&node, ALICE).await?;
    let task = match agent
        .send_message(
            &CallContext::default(),
            mew_cards::SendMessageRequest::new(Message::user_text("say hi")),
        )
        .await?
    {
        mew_cards::SendMessageResponse::Task(task) => task,
        other => anyhow::bail!("expected a task, got {other:?}"),
    };
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    ensure!(server.sign_ins() == 0, "{} sign-ins", server.sign_ins());
    // The node says how to sign in.
    ensure!(
        node.log().contains("mew mcp login secure"),
        "{}",
        node.log()
    );
    Ok(())
}

#[tokio::test]
async fn a_machine_client_gets_its_tokens_with_its_own_credentials_and_again_when_refused()
-> anyhow::Result<()> {
    // `grant: client_credentials`: no user, no sign-in tool; a refused token is replaced by a
    // new grant on a new connection, and the call is made once more.
    let server = ProtectedMcpServer::start().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "mcp__secure__echo", json!({"text": "hi"}))
            .expect_tools_include(["mcp__secure__echo"])
            .expect_tools_exclude(["mcp__secure__sign_in"]),
        Step::text("The server said hi.").expect_last_user("hi"),
        Step::tool_call("call_2", "mcp__secure__echo", json!({"text": "again"})),
        Step::text("The server said again.").expect_last_user("again"),
    ])?;
    let (id, secret) = mew_tests::oauth::MACHINE_CLIENT;
    let oauth = format!(
        "{{client_id: {id}, client_secret: \"${{MACHINE_SECRET}}\", grant: client_credentials}}"
    );
    let node = toolsmith_node(
        &model,
        &server,
        false,
        &oauth,
        &[("MACHINE_SECRET", secret)],
    )
    .await?;
    let first = mew_tests::node::send(&node, "toolsmith", Message::user_text("say hi")).await?;
    ensure!(
        status_text(&first) == "The server said hi.",
        "{:?}: {}",
        first.status.state,
        status_text(&first)
    );
    ensure!(
        server.client_grants() == 1,
        "{} grants",
        server.client_grants()
    );
    server.revoke_everything();
    let second = mew_tests::node::send(&node, "toolsmith", Message::user_text("again")).await?;
    ensure!(
        status_text(&second) == "The server said again.",
        "{:?}: {}",
        second.status.state,
        status_text(&second)
    );
    ensure!(
        server.client_grants() == 2,
        "{} grants",
        server.client_grants()
    );
    ensure!(server.sign_ins() == 0, "{} sign-ins", server.sign_ins());
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn mew_mcp_login_signs_the_node_in_and_logout_revokes_the_grant() -> anyhow::Result<()> {
    let server = ProtectedMcpServer::start().await?;
    let mut node = MewNode::new()?;
    node.write_config(&format!(
        "mcp_servers:\n  secure:\n    url: {}\n    connect_timeout: 10s\n",
        server.url()
    ))?;
    // The user's browser: follows the authorization server's redirect to the loopback
    // callback, as a click on "approve" would.
    node.set_env(
        "BROWSER",
        "curl --silent --fail --location --output /dev/null",
    );
    let (code, out, err) = node.client(&["mcp", "login", "secure"]).await?;
    ensure!(code == 0, "login failed ({code}): {out}{err}");
    ensure!(server.sign_ins() == 1, "{} sign-ins", server.sign_ins());
    let (code, out, err) = node.client(&["mcp", "tools", "secure"]).await?;
    ensure!(
        code == 0 && out.contains("mcp__secure__echo"),
        "the signed-in node cannot list the tools ({code}): {out}{err}"
    );
    let (code, out, err) = node.client(&["mcp", "logout", "secure"]).await?;
    ensure!(
        code == 0 && out.contains("revoked the grant"),
        "logout ({code}): {out}{err}"
    );
    ensure!(
        server.revocations() == 1,
        "{} revocations",
        server.revocations()
    );
    ensure!(!server.has_refresh_tokens(), "the grant is still good");
    let (code, out, err) = node.client(&["mcp", "tools", "secure"]).await?;
    ensure!(
        code != 0 && format!("{out}{err}").contains("mew mcp login secure"),
        "after logout ({code}): {out}{err}"
    );
    let (code, out, _) = node.client(&["mcp", "logout", "secure"]).await?;
    ensure!(code == 0 && out.contains("no tokens kept"), "{out}");
    Ok(())
}

/// An agent of the role `toolsmith` of `node`, calling with the API key `key`.
async fn agent_as(node: &MewNode, key: &str) -> anyhow::Result<mew_transport::RemoteAgent> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-api-key", key.parse()?);
    node.agent_with_headers("/agents/toolsmith", Binding::JsonRpc, headers)
        .await
}

/// Sends `text` through `agent` and returns the task as the blocking send left it.
async fn send_as(agent: &mew_transport::RemoteAgent, text: &str) -> anyhow::Result<Task> {
    match agent
        .send_message(
            &CallContext::default(),
            mew_cards::SendMessageRequest::new(Message::user_text(text)),
        )
        .await?
    {
        mew_cards::SendMessageResponse::Task(task) => Ok(task),
        other => anyhow::bail!("expected a task, got {other:?}"),
    }
}

#[tokio::test]
async fn with_per_caller_tokens_each_caller_signs_in_for_themselves_and_no_one_else()
-> anyhow::Result<()> {
    let server = ProtectedMcpServer::start().await?;
    let model = ScriptedModel::start(vec![
        // Alice: nobody has signed in, only the sign-in tool is offered.
        Step::tool_call("call_1", "mcp__secure__sign_in", json!({}))
            .expect_tools_include(["mcp__secure__sign_in"])
            .expect_tools_exclude(["mcp__secure__echo"]),
        // Her own session is connected: its tools are offered to her task.
        Step::tool_call("call_2", "mcp__secure__echo", json!({"text": "hi"}))
            .expect_tool_results(["call_1"])
            .expect_last_user("Signed in to the MCP server secure")
            .expect_tools_include(["mcp__secure__echo"]),
        Step::text("alice: hi").expect_last_user("hi"),
        // Bob: alice's sign-in is not his; he sees only the sign-in tool.
        Step::text("bob: not signed in")
            .expect_tools_include(["mcp__secure__sign_in"])
            .expect_tools_exclude(["mcp__secure__echo"]),
        // Alice again: her session serves her next task, no sign-in.
        Step::tool_call("call_3", "mcp__secure__echo", json!({"text": "again"}))
            .expect_tools_include(["mcp__secure__echo"]),
        Step::text("alice: again").expect_last_user("again"),
    ])?;
    let node = toolsmith_node(&model, &server, true, "{per_caller: true}", &[]).await?;
    let alice = agent_as(&node, ALICE).await?;
    let bob = agent_as(&node, BOB).await?;

    let asked = send_as(&alice, "say hi").await?;
    let url = authorization_url(&asked)?;
    sign_in(&url).await?;
    let done = poll_until("alice's task goes on and completes", WAIT, || {
        let (alice, id) = (alice.clone(), asked.id.clone());
        async move {
            let task = alice
                .get_task(
                    &CallContext::default(),
                    GetTaskRequest {
                        id,
                        ..Default::default()
                    },
                )
                .await?;
            Ok(task.status.state.is_terminal().then_some(task))
        }
    })
    .await?;
    ensure!(
        status_text(&done) == "alice: hi",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    // Bob cannot see alice's task, and his own task gets no tools of hers.
    ensure!(
        bob.get_task(
            &CallContext::default(),
            GetTaskRequest {
                id: asked.id.clone(),
                ..Default::default()
            },
        )
        .await
        .is_err(),
        "bob read alice's task"
    );
    let bobs = send_as(&bob, "say hi").await?;
    ensure!(
        status_text(&bobs) == "bob: not signed in",
        "{:?}: {}",
        bobs.status.state,
        status_text(&bobs)
    );
    let again = send_as(&alice, "again").await?;
    ensure!(
        status_text(&again) == "alice: again",
        "{:?}: {}",
        again.status.state,
        status_text(&again)
    );
    ensure!(server.sign_ins() == 1, "{} sign-ins", server.sign_ins());
    model.assert_done();
    // Alice's tokens are hers: sealed under her principal, none for the node.
    let dir = node.data_dir().join("mcp-oauth/secure");
    let files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    ensure!(
        files.len() == 1 && files[0] != "node.token" && files[0].ends_with(".token"),
        "token files: {files:?}"
    );
    Ok(())
}
