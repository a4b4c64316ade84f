//! MCP through a running node: a model role calls a tool of an MCP server the node connected
//! to, and a broken server next to a good one is reported without harming it; a project's
//! Claude Code `.mcp.json` read as Claude Code reads it, through `mew run`.

use anyhow::{Context, bail, ensure};
use mew_cards::{Message, SendMessageRequest, SendMessageResponse, StreamResponse, TaskState};
use mew_tests::model::{ScriptedModel, Step, ToolCall};
use mew_tests::node::{MewNode, poll_until, scripted_model_config, status_text};
use mew_transport::{AgentTransport, Binding, CallContext};
use serde_json::json;

/// How long a condition may take on a busy machine.
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A node whose model roles run on `model` and that knows the hermetic MCP server (stdio) as
/// `hermetic` and a server whose program does not exist as `broken`. MCP tools are `exec`
/// tools: a rule allows the echo tool without asking.
async fn node(model: &ScriptedModel) -> anyhow::Result<MewNode> {
    let server = mew_tests::mcp::server_bin()?;
    let config = format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n\
         permissions:\n  allow: [mcp__hermetic__echo, mcp__hermetic__report]\n\
         mcp_servers:\n\
         \x20 hermetic:\n    command: {}\n    deny_tools: [crash]\n\
         \x20 broken:\n    command: mew-test-no-such-mcp-server\n    connect_timeout: 10s\n",
        model.base_url(),
        server.display()
    );
    let mut node = MewNode::new()?;
    node.write_config(&config)?;
    node.write_role(
        "toolsmith.md",
        "---\nname: toolsmith\ndescription: Uses MCP tools.\ntools: [mcp__hermetic]\n---\nUse the tools.\n",
    )?;
    node.launch().await?;
    Ok(node)
}

/// A running node whose role `toolsmith` (with `tools`) uses the hermetic server over stdio,
/// whose entry adds `entry` (lines indented by four spaces), with `allow` as the allow rules.
async fn hermetic_node(
    model: &ScriptedModel,
    allow: &str,
    entry: &str,
    tools: &str,
) -> anyhow::Result<MewNode> {
    let role = format!(
        "---\nname: toolsmith\ndescription: Uses MCP tools.\ntools: [{tools}]\n---\nUse the tools.\n"
    );
    hermetic_node_with_role(model, allow, entry, ("toolsmith.md", &role)).await
}

/// [`hermetic_node`] with a role file of the test's own, `(file name, contents)`.
async fn hermetic_node_with_role(
    model: &ScriptedModel,
    allow: &str,
    entry: &str,
    (file, role): (&str, &str),
) -> anyhow::Result<MewNode> {
    let config = format!(
        "{}permissions:\n  allow: [{allow}]\nmcp_servers:\n  hermetic:\n    command: {}\n{entry}",
        scripted_model_config(model),
        mew_tests::mcp::server_bin()?.display()
    );
    let mut node = MewNode::new()?;
    node.write_config(&config)?;
    node.write_role(file, role)?;
    node.launch().await?;
    Ok(node)
}

#[tokio::test]
async fn a_model_role_calls_an_mcp_tool_through_a_running_node() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "mcp__hermetic__echo",
            json!({"text": "meow", "times": 3}),
        )
        .expect_tools_include(["mcp__hermetic__echo", "mcp__hermetic__image"])
        .expect_tools_exclude(["mcp__hermetic__crash", "read_file"]),
        Step::text("The server said meow three times.")
            .expect_tool_results(["call_1"])
            .expect_last_user("meow meow meow"),
    ])?;
    let node = node(&model).await?;
    let agent = node.agent("/agents/toolsmith", Binding::JsonRpc).await?;
    let task = match agent
        .send_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("echo meow three times")),
        )
        .await?
    {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    let said = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    ensure!(
        task.status.state == TaskState::Completed && said == "The server said meow three times.",
        "{:?}: {said}",
        task.status.state
    );
    model.assert_done();
    // The node logs at INFO; the MCP SDK's own INFO lines (each handshake with the server's
    // whole description) are not the node's to show.
    let output = node.output();
    ensure!(
        !output.contains("Service initialized as client"),
        "the SDK's INFO lines reach the node's log:\n{output}"
    );
    Ok(())
}

#[tokio::test]
async fn a_tool_an_mcp_server_adds_during_a_turn_is_offered_at_the_next_model_call()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    // The model adds a tool, then waits at a gate (a bash call) that the test opens once the
    // node has reloaded the server's tools; its next request must offer the new tool.
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![
            ToolCall::new("add", "mcp__hermetic__add_tool", json!({"name": "extra"})),
            ToolCall::new(
                "wait",
                "bash",
                json!({"command": format!(
                    "while [ ! -f '{}' ]; do sleep 0.05; done; echo open",
                    gate.display()
                )}),
            ),
        ])
        .expect_tools_include(["mcp__hermetic__add_tool"])
        .expect_tools_exclude(["mcp__hermetic__extra"]),
        Step::tool_call("use", "mcp__hermetic__extra", json!({}))
            .expect_tool_results(["add", "wait"])
            .expect_tools_include(["mcp__hermetic__extra"]),
        Step::text("The new tool answered.")
            .expect_tool_results(["use"])
            .expect_last_user("extra tool extra"),
    ])?;
    let node = hermetic_node(&model, "mcp__hermetic, bash", "", "mcp__hermetic, bash").await?;
    let agent = node.agent("/agents/toolsmith", Binding::JsonRpc).await?;
    let turn = tokio::spawn(async move {
        agent
            .send_message(
                &CallContext::default(),
                SendMessageRequest::new(Message::user_text("add a tool and use it")),
            )
            .await
    });
    poll_until("the node reloads the server's tools", WAIT, || async {
        Ok(node
            .log()
            .contains("reloaded the MCP server's tools")
            .then_some(()))
    })
    .await?;
    std::fs::write(&gate, "")?;
    let task = match turn.await?? {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn an_mcp_servers_progress_and_log_messages_are_the_tasks_progress_notes()
-> anyhow::Result<()> {
    use futures_util::StreamExt as _;
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "mcp__hermetic__report",
            json!({"gate": gate.display().to_string()}),
        ),
        Step::text("Reported.")
            .expect_tool_results(["call_1"])
            .expect_last_user("reported"),
    ])?;
    let node = node(&model).await?;
    let agent = node.agent("/agents/toolsmith", Binding::JsonRpc).await?;
    let mut stream = agent
        .send_streaming_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("report")),
        )
        .await?;
    // The notes of the call, as (phase, detail), while it waits at the gate.
    let note = |event: &StreamResponse| match event {
        StreamResponse::StatusUpdate(update) => update
            .metadata
            .as_ref()
            .and_then(|m| m.get("mew"))
            .and_then(|mew| mew.get("tool"))
            .filter(|tool| tool["name"] == "mcp__hermetic__report" && tool["id"] == "call_1")
            .map(|tool| (tool["phase"].clone(), tool["detail"].clone())),
        _ => None,
    };
    let mut notes = Vec::new();
    let wanted = |notes: &[(serde_json::Value, serde_json::Value)]| {
        notes.iter().any(|(phase, detail)| {
            phase == "progress"
                && *detail == json!({"progress": 1.0, "total": 2.0, "message": "halfway"})
        }) && notes.iter().any(|(phase, detail)| {
            phase == "log" && *detail == json!({"level": "info", "message": "reporting"})
        })
    };
    while !wanted(&notes) {
        let event = tokio::time::timeout(WAIT, stream.next())
            .await
            .context("no event")?
            .context("the stream ended before the server's notes")??;
        notes.extend(note(&event));
    }
    std::fs::write(&gate, "")?;
    let mut last = None;
    while let Some(event) = tokio::time::timeout(WAIT, stream.next())
        .await
        .context("the stream did not end")?
    {
        last = Some(event?);
    }
    match last {
        Some(StreamResponse::StatusUpdate(update)) => ensure!(
            update.status.state == TaskState::Completed,
            "ended {:?}",
            update.status
        ),
        other => bail!("the stream ended with {other:?}"),
    }
    model.assert_done();
    // The node logs the server's log message as its own, under the server's name.
    ensure!(
        node.log()
            .lines()
            .any(|line| line.contains("reporting") && line.contains("hermetic")),
        "{}",
        node.log()
    );
    Ok(())
}

#[tokio::test]
async fn a_servers_sampling_request_is_answered_by_the_tasks_model_and_counted_in_its_usage()
-> anyhow::Result<()> {
    use mew_tests::model::Usage;
    // The server asks the task's model; its hint `haiku` goes through the provider's aliases.
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "mcp__hermetic__sample",
            json!({"prompt": "name a cat", "hint": "haiku"}),
        )
        .with_usage(Usage::new(100, 10)),
        Step::text("Tom")
            .expect_system("Answer in one word.")
            .expect_last_user("name a cat")
            .expect_model("gpt-4o-mini")
            .expect_tools_exclude(["mcp__hermetic__sample"])
            .with_usage(Usage::new(7, 1)),
        Step::text("The server's question was answered.")
            .expect_tool_results(["call_1"])
            .expect_last_user("model said: Tom (gpt-4o-mini)")
            .with_usage(Usage::new(120, 5)),
    ])?;
    let node = hermetic_node(
        &model,
        "mcp__hermetic__sample",
        "    sampling: true\n",
        "mcp__hermetic",
    )
    .await?;
    let agent = node.agent("/agents/toolsmith", Binding::JsonRpc).await?;
    let task = match agent
        .send_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("ask the server")),
        )
        .await?
    {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    let task = agent
        .get_task(
            &CallContext::default(),
            mew_cards::GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    let usage = task
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("usage"))
        .cloned()
        .context("no usage on the task")?;
    ensure!(
        usage["inputTokens"] == 227 && usage["outputTokens"] == 16 && usage["modelCalls"] == 3,
        "the sampling call is not in the task's usage: {usage}"
    );
    Ok(())
}

/// A model that calls the hermetic server's `ask` and expects the greeting of Ada.
fn greeting_model() -> anyhow::Result<ScriptedModel> {
    ScriptedModel::start(vec![
        Step::tool_call("ask_1", "mcp__hermetic__ask", json!({})),
        Step::text("Greeted Ada.")
            .expect_tool_results(["ask_1"])
            .expect_last_user("hello Ada"),
    ])
}

/// A node whose role `toolsmith` may call the hermetic server's `ask`.
async fn asking_node(model: &ScriptedModel) -> anyhow::Result<MewNode> {
    hermetic_node(model, "mcp__hermetic__ask", "", "mcp__hermetic").await
}

#[tokio::test]
async fn a_servers_question_puts_the_task_in_input_required_and_the_callers_form_reaches_it()
-> anyhow::Result<()> {
    let model = greeting_model()?;
    let node = asking_node(&model).await?;
    the_callers_form_reaches_the_server(&node, &model).await
}

#[tokio::test]
async fn a_2025_11_25_servers_question_during_a_call_waits_in_input_required_for_the_callers_form()
-> anyhow::Result<()> {
    // The server asks with `elicitation/create` while the call waits, not in its result: the
    // call stays open on the node while the task waits for its caller.
    let model = greeting_model()?;
    let node = hermetic_node(
        &model,
        "mcp__hermetic__ask",
        "    args: [--protocol, legacy]\n",
        "mcp__hermetic",
    )
    .await?;
    the_callers_form_reaches_the_server(&node, &model).await
}

/// Sends the role `toolsmith` of `node` a message whose task the server's question puts in
/// INPUT_REQUIRED, checks the question and its form, and fills the form in.
async fn the_callers_form_reaches_the_server(
    node: &MewNode,
    model: &ScriptedModel,
) -> anyhow::Result<()> {
    let asked = mew_tests::node::send(node, "toolsmith", Message::user_text("greet me")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "{:?}: {}",
        asked.status.state,
        status_text(&asked)
    );
    let question = asked.status.message.as_ref().context("no question")?;
    ensure!(
        question.text().contains("What is your name?"),
        "{}",
        question.text()
    );
    let ask = question
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("ask"))
        .cloned();
    ensure!(ask == Some(json!("elicitation")), "mew.ask is {ask:?}");
    let form = question
        .parts
        .iter()
        .find_map(|p| match &p.content {
            mew_cards::PartContent::Data(data) => Some(data.clone()),
            _ => None,
        })
        .context("no data part with the form")?;
    ensure!(
        form["requestedSchema"]["properties"]["name"]["type"] == "string"
            && form["server"] == "hermetic",
        "{form}"
    );
    // The caller fills the form in as a data part.
    let mut reply = Message::user_text("");
    reply.parts = vec![mew_cards::Part::data(json!({"name": "Ada"}))];
    reply.task_id = Some(asked.id.clone());
    reply.context_id = Some(asked.context_id.clone());
    let done = mew_tests::node::send(node, "toolsmith", reply).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "Greeted Ada.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn the_python_sdk_client_answers_a_servers_question_with_a_data_part() -> anyhow::Result<()> {
    use mew_tests::python::{run_driver, run_driver_with};
    let model = greeting_model()?;
    let node = asking_node(&model).await?;
    let url = node.role_url("toolsmith");
    let out = run_driver(&url, "jsonrpc", &["send", "greet me"]).await?;
    ensure!(
        out.code == 0,
        "the SDK failed ({}): {}",
        out.code,
        out.stderr
    );
    let task = &out.lines[0]["task"];
    let message = &task["status"]["message"];
    ensure!(
        task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            && message["metadata"]["mew"]["ask"] == "elicitation",
        "{task}"
    );
    let parts = message["parts"].as_array().context("no parts")?;
    ensure!(
        parts.iter().any(|p| p["text"]
            .as_str()
            .is_some_and(|t| t.contains("What is your name?")))
            && parts
                .iter()
                .any(|p| p["data"]["requestedSchema"]["properties"]["name"]["type"] == "string"),
        "{message}"
    );
    let (id, context) = (
        task["id"].as_str().context("no id")?,
        task["contextId"].as_str().context("no contextId")?,
    );
    let out = run_driver_with(
        &url,
        "jsonrpc",
        &[
            "--task",
            id,
            "--context",
            context,
            "--data",
            r#"{"name": "Ada"}"#,
        ],
        &["send"],
    )
    .await?;
    ensure!(
        out.code == 0,
        "the SDK failed ({}): {}",
        out.code,
        out.stderr
    );
    let task = &out.lines[0]["task"];
    ensure!(
        task["status"]["state"] == "TASK_STATE_COMPLETED"
            && task["status"]["message"]["parts"][0]["text"] == "Greeted Ada.",
        "{task}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_servers_question_on_another_node_reaches_the_caller_of_the_delegating_task()
-> anyhow::Result<()> {
    // B's role calls the server; A's role delegates to it.
    let b_model = greeting_model()?;
    let b = asking_node(&b_model).await?;
    let a_model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "greet the user", "description": "greet",
                   "subagent_type": b.role_url("toolsmith")}),
        ),
        Step::text("B greeted Ada.")
            .expect_tool_results(["call_1"])
            .expect_last_user("Greeted Ada."),
    ])?;
    let mut a = MewNode::new()?;
    a.write_config(&scripted_model_config(&a_model))?;
    a.write_role(
        "boss.md",
        "---\nname: boss\ndescription: Delegates.\ntools: [Agent]\n---\nDelegate.\n",
    )?;
    a.launch().await?;

    let asked = mew_tests::node::send(&a, "boss", Message::user_text("have B greet me")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "{:?}: {}",
        asked.status.state,
        status_text(&asked)
    );
    let question = asked.status.message.as_ref().context("no question")?;
    let ask = question
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("ask"))
        .cloned();
    let form = question.parts.iter().find_map(|p| match &p.content {
        mew_cards::PartContent::Data(data) => Some(data.clone()),
        _ => None,
    });
    ensure!(
        question.text().contains("What is your name?")
            && ask == Some(json!("elicitation"))
            && form.is_some_and(|f| f["requestedSchema"]["properties"]["name"]["type"] == "string"),
        "A's question does not carry B's server's: {question:?}"
    );
    let mut reply = Message::user_text("");
    reply.parts = vec![mew_cards::Part::data(json!({"name": "Ada"}))];
    reply.task_id = Some(asked.id.clone());
    let done = mew_tests::node::send(&a, "boss", reply).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "B greeted Ada.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    a_model.assert_done();
    b_model.assert_done();
    Ok(())
}

#[tokio::test]
async fn mew_mcp_list_reports_the_broken_server_and_the_good_one_works() -> anyhow::Result<()> {
    let model = ScriptedModel::start(Vec::new())?;
    let node = node(&model).await?;

    let (code, out, err) = node.client(&["mcp", "list"]).await?;
    ensure!(code == 1, "exit {code}: {out}{err}");
    ensure!(
        out.contains("hermetic\n  transport: stdio\n  state:     connected")
            && out.contains("broken\n  transport: stdio\n  state:     failed")
            && out.contains("mew-test-no-such-mcp-server"),
        "{out}"
    );
    ensure!(
        err.contains("1 of 2 MCP servers not connected: broken"),
        "{err}"
    );

    let (code, out, err) = node.client(&["--json", "mcp", "tools", "hermetic"]).await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let tools: serde_json::Value = serde_json::from_str(&out).context("--json output")?;
    let tools = tools["tools"].as_array().context("tools")?;
    let category = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["category"].clone())
    };
    ensure!(
        category("mcp__hermetic__echo") == Some(json!("exec"))
            && category("mcp__hermetic__crash").is_none(),
        "{tools:?}"
    );
    ensure!(
        tools.iter().any(|t| t["category"] == "read"),
        "no read-only tool listed: {tools:?}"
    );
    Ok(())
}

/// A project's `.mcp.json` as Claude Code's documentation writes them: variables with defaults
/// in a program's arguments and an endpoint's URL, a `description` Mew does not read, and a
/// server whose variable is set nowhere.
const CLAUDE_CODE_MCP_JSON: &str = r#"{
  "mcpServers": {
    "local": {
      "command": "${MEW_TEST_MCP_SERVER}",
      "args": ["--protocol", "${MEW_TEST_MCP_PROTOCOL:-legacy}"],
      "env": {"GREETING": "${MEW_TEST_GREETING:-hello from the default}"},
      "description": "The hermetic test server"
    },
    "remote": {
      "type": "http",
      "url": "${MEW_TEST_MCP_BASE:-http://127.0.0.1:1}/mcp",
      "headers": {"Authorization": "Bearer ${MEW_TEST_MCP_TOKEN}"}
    },
    "unset": {"command": "${MEW_TEST_NO_SUCH_PROGRAM}"}
  }
}
"#;

#[tokio::test]
async fn a_claude_code_mcp_json_expands_its_variables_and_mew_run_uses_its_servers()
-> anyhow::Result<()> {
    let remote = mew_tests::mcp::TestMcpServer::start_http().await?;
    let base = remote
        .url()
        .strip_suffix("/mcp")
        .context("the test server's URL")?
        .to_owned();
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "mcp__local__environment", json!({}))
            .expect_tools_include(["mcp__local__environment", "mcp__remote__echo"]),
        // The default of `env` reached the stdio server, started with its expanded arguments.
        Step::tool_call("call_2", "mcp__remote__echo", json!({"text": "meow"}))
            .expect_tool_results(["call_1"])
            .expect_last_user("hello from the default"),
        // The URL's variable named the HTTP server.
        Step::text("Both servers answered.")
            .expect_tool_results(["call_2"])
            .expect_last_user("meow"),
    ])?;
    let mut node = MewNode::new()?;
    node.set_env(
        "MEW_TEST_MCP_SERVER",
        &mew_tests::mcp::server_bin()?.display().to_string(),
    );
    node.set_env("MEW_TEST_MCP_BASE", &base);
    node.set_env("MEW_TEST_MCP_TOKEN", "t0k");
    node.write_config(&format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n\
         permissions:\n  allow: [mcp__local__environment, mcp__remote__echo]\n",
        model.base_url()
    ))?;
    node.write_role(
        "toolsmith.md",
        "---\nname: toolsmith\ndescription: Uses MCP tools.\n\
         tools: [mcp__local, mcp__remote]\n---\nUse the tools.\n",
    )?;
    let mcp_json = node.project_dir().join(".mcp.json");
    std::fs::write(&mcp_json, CLAUDE_CODE_MCP_JSON)?;

    let (code, out, err) = node
        .client(&["run", "--role", "toolsmith", "ask both servers"])
        .await?;
    ensure!(
        code == 0 && out.contains("Both servers answered."),
        "mew run ({code}):\n{out}{err}"
    );
    // The unknown key is a warning; the server whose variable is not set is skipped, named.
    ensure!(
        err.contains("MCP server `local`: unknown key `description`")
            && err.contains(
                "MCP server `unset` skipped: `command` refers to variable \
                 ${MEW_TEST_NO_SUCH_PROGRAM}, which is not set and has no default"
            ),
        "mew run's warnings:\n{err}"
    );
    model.assert_done();

    // `mew mcp list` shows both servers connected (the stdio one on the protocol its expanded
    // arguments chose) and fails for the skipped entry.
    let (code, out, err) = node.client(&["mcp", "list"]).await?;
    ensure!(code == 1, "exit {code}: {out}{err}");
    ensure!(
        out.contains("local\n  transport: stdio\n  state:     connected (protocol 2025-11-25)")
            && out.contains("remote\n  transport: http\n  state:     connected")
            && out.contains("skipped: ")
            && out.contains("MCP server `unset` skipped"),
        "{out}"
    );
    ensure!(
        err.contains("1 MCP server entry skipped for configuration problems: unset"),
        "{err}"
    );

    // Without the broken entry, the same list succeeds.
    std::fs::write(
        &mcp_json,
        CLAUDE_CODE_MCP_JSON.replace(
            ",\n    \"unset\": {\"command\": \"${MEW_TEST_NO_SUCH_PROGRAM}\"}",
            "",
        ),
    )?;
    let (code, out, err) = node.client(&["mcp", "list"]).await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    Ok(())
}

/// A 2025-11-25 stdio server that answers every method it does not know, `server/discover`
/// included, with an empty result, as the TypeScript SDK's servers do: Mew must take that for
/// "no discovery here" and connect again with `initialize`.
const EMPTY_RESULT_SERVER: &str = r#"
import json, os, sys
log = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if log:
        log.write(f"{method}\n")
        log.flush()
    if "id" not in message:
        continue
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "empty-result", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": [
            {"name": "ping", "description": "Answers pong.", "inputSchema": {"type": "object"}},
            {"name": "crash", "description": "Exits.", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call" and message["params"]["name"] == "crash":
        os._exit(1)
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"#;

#[tokio::test]
async fn a_server_answering_discovery_with_an_empty_result_is_reached_with_initialize()
-> anyhow::Result<()> {
    let node = MewNode::new()?;
    let script = node.dir().join("empty_result_server.py");
    std::fs::write(&script, EMPTY_RESULT_SERVER)?;
    node.write_config(&format!(
        "mcp_servers:\n  older:\n    command: python3\n    args: [\"{}\"]\n",
        script.display()
    ))?;
    let (code, out, err) = node.client(&["mcp", "list"]).await?;
    ensure!(
        code == 0 && out.contains("state:     connected (protocol 2025-11-25)"),
        "mew mcp list ({code}):\n{out}{err}"
    );
    let (code, out, err) = node.client(&["mcp", "tools", "older"]).await?;
    ensure!(
        code == 0 && out.contains("mcp__older__ping"),
        "mew mcp tools ({code}):\n{out}{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_spoke_2025_11_25_is_reconnected_with_initialize_and_a_pinned_one_never_probed()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "mcp__older__crash", json!({})),
        // The crashed server is started again for the next call.
        Step::tool_call("call_2", "mcp__older__ping", json!({})).expect_tool_results(["call_1"]),
        Step::text("It came back.")
            .expect_tool_results(["call_2"])
            .expect_last_user("pong"),
    ])?;
    let node = MewNode::new()?;
    let script = node.dir().join("empty_result_server.py");
    std::fs::write(&script, EMPTY_RESULT_SERVER)?;
    let (older_log, pinned_log) = (node.dir().join("older.log"), node.dir().join("pinned.log"));
    node.write_config(&format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n\
         permissions:\n  allow: [mcp__older__crash, mcp__older__ping]\n\
         mcp_servers:\n\
         \x20 older:\n    command: python3\n    args: [\"{script}\", \"{older}\"]\n\
         \x20 pinned:\n    command: python3\n    args: [\"{script}\", \"{pinned}\"]\n\
         \x20   protocol: 2025-11-25\n",
        model.base_url(),
        script = script.display(),
        older = older_log.display(),
        pinned = pinned_log.display(),
    ))?;
    node.write_role(
        "toolsmith.md",
        "---\nname: toolsmith\ndescription: Uses MCP tools.\ntools: [mcp__older]\n---\nUse them.\n",
    )?;
    let (code, out, err) = node
        .client(&["run", "--role", "toolsmith", "crash it and ping it"])
        .await?;
    ensure!(
        code == 0 && out.contains("It came back."),
        "mew run ({code}):\n{out}{err}"
    );
    model.assert_done();
    // The first connection probed and fell back; the second began with initialize.
    let methods = std::fs::read_to_string(&older_log)?;
    let probes = methods.lines().filter(|m| *m == "server/discover").count();
    let handshakes = methods.lines().filter(|m| *m == "initialize").count();
    ensure!(
        probes == 1 && handshakes == 2,
        "methods the server got:\n{methods}"
    );
    // The pinned server was never probed.
    let methods = std::fs::read_to_string(&pinned_log)?;
    ensure!(
        methods.lines().next() == Some("initialize") && !methods.contains("server/discover"),
        "methods the pinned server got:\n{methods}"
    );
    Ok(())
}

#[tokio::test]
async fn a_role_loads_an_mcp_servers_skill_and_its_file_and_a_forged_one_is_refused()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        // Both servers' skills are offered by name, unread.
        Step::tool_call(
            "load",
            "LoadSkill",
            json!({"name": "hermetic:greeting-kit"}),
        )
        .expect_system("**hermetic:greeting-kit**: Greets people in the house style")
        .expect_system("**forged:greeting-kit**")
        .expect_tools_include(["LoadSkill"]),
        Step::tool_call(
            "style",
            "LoadSkill",
            json!({"name": "hermetic:greeting-kit", "file": "references/STYLE.md"}),
        )
        .expect_tool_results(["load"])
        .expect_last_user("Skill hermetic:greeting-kit is active"),
        Step::tool_call(
            "forged",
            "LoadSkill",
            json!({"name": "forged:greeting-kit"}),
        )
        .expect_tool_results(["style"])
        .expect_last_user("Say ahoy before anything else."),
        Step::text("Ahoy! Welcome aboard.")
            .expect_tool_results(["forged"])
            .expect_last_user("its content is not used"),
    ])?;
    let server = mew_tests::mcp::server_bin()?;
    let config = format!(
        "{}mcp_servers:\n\
         \x20 hermetic:\n    command: {server}\n\
         \x20 forged:\n    command: {server}\n    args: [--tampered-skill]\n",
        scripted_model_config(&model),
        server = server.display()
    );
    let mut node = MewNode::new()?;
    node.write_config(&config)?;
    node.write_role(
        "greeter.md",
        "---\nname: greeter\ndescription: Greets.\n---\nGreet people.\n",
    )?;
    node.launch().await?;
    let task = mew_tests::node::send_text(&node, "greeter", "greet the new crew member").await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    // Once loaded, the skill's instructions ride in the requests that follow, with where its
    // files are; the forged server's never do.
    let requests = model.requests();
    let after_load = serde_json::to_string(&requests[1].body)?;
    ensure!(
        after_load.contains("Greet in the style that references/STYLE.md describes")
            && after_load.contains("served by the MCP server hermetic")
            && after_load.contains("references/STYLE.md (31 bytes)"),
        "the loaded skill is not in the next request: {after_load}"
    );
    let last = serde_json::to_string(&requests[3].body)?;
    ensure!(
        !last.contains("pirate style"),
        "the forged SKILL.md reached the model: {last}"
    );
    Ok(())
}

/// Runs `mew ARGS` in `dir` on a pseudo-terminal: waits for the prompt `> `, types `typed`,
/// and returns everything the command wrote to the terminal and its exit code.
async fn at_a_terminal(
    dir: &std::path::Path,
    args: &[&str],
    typed: &str,
) -> anyhow::Result<(String, i32)> {
    // Python's pty module: the terminal is real, so `mew` sees one on stdin.
    const DRIVER: &str = r#"
import json, os, pty, subprocess, sys
args, typed = json.loads(sys.argv[1]), sys.argv[2]
main, sub = pty.openpty()
child = subprocess.Popen(args, stdin=sub, stdout=sub, stderr=sub, close_fds=True)
os.close(sub)
seen, sent = b"", False
while True:
    try:
        chunk = os.read(main, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
    if not sent and seen.rstrip(b" ").endswith(b">"):
        os.write(main, (typed + "\n").encode())
        sent = True
print(json.dumps({"seen": seen.decode("utf-8", "replace"), "code": child.wait()}))
"#;
    let mut argv = vec![mew_tests::node::mew_bin()?.display().to_string()];
    argv.extend(args.iter().map(|arg| (*arg).to_owned()));
    let output = mew_tests::process::command(mew_tests::python::python()?)
        .current_dir(dir)
        .args(["-c", DRIVER, &serde_json::to_string(&argv)?, typed])
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "the terminal driver failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok((
        result["seen"].as_str().unwrap_or_default().to_owned(),
        result["code"].as_i64().unwrap_or(-1) as i32,
    ))
}

#[tokio::test]
async fn mew_mcp_call_puts_a_servers_question_to_the_user_at_a_terminal() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "node:\n  data_dir: {}\nmcp_servers:\n  hermetic:\n    command: {}\n    args: [--protocol, modern]\n",
            dir.path().join("data").display(),
            mew_tests::mcp::server_bin()?.display()
        ),
    )?;
    let config = config.display().to_string();
    let call = [
        "--config",
        config.as_str(),
        "mcp",
        "call",
        "hermetic",
        "ask",
    ];
    let (seen, code) = at_a_terminal(dir.path(), &call, "Ada").await?;
    ensure!(code == 0, "exit {code}:\n{seen}");
    ensure!(
        seen.contains(
            "? The MCP server hermetic asks (for mcp__hermetic__ask): What is your name?"
        ) && seen.contains("  - name (string)")
            && seen.contains("hello Ada"),
        "the question, its field and the server's answer were not shown:\n{seen}"
    );
    let (seen, code) = at_a_terminal(dir.path(), &call, "decline").await?;
    ensure!(
        code == 0 && seen.contains("you declined"),
        "exit {code}:\n{seen}"
    );
    // Without a terminal and without --answer, the command says how to answer.
    let output = mew_tests::process::command(mew_tests::node::mew_bin()?)
        .current_dir(dir.path())
        .args(call)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        !output.status.success() && stderr.contains("give the answer with --answer"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn the_next_process_remembers_a_server_that_spoke_2025_11_25_and_does_not_probe_it()
-> anyhow::Result<()> {
    let node = MewNode::new()?;
    let script = node.dir().join("empty_result_server.py");
    std::fs::write(&script, EMPTY_RESULT_SERVER)?;
    let log = node.dir().join("older.log");
    node.write_config(&format!(
        "mcp_servers:\n  older:\n    command: python3\n    args: [\"{}\", \"{}\"]\n",
        script.display(),
        log.display(),
    ))?;
    for _ in 0..2 {
        let (code, out, err) = node.client(&["mcp", "tools", "older"]).await?;
        ensure!(
            code == 0 && out.contains("mcp__older__ping"),
            "mew mcp tools ({code}):\n{out}{err}"
        );
    }
    // The first process probed and fell back; the second began with initialize.
    let methods = std::fs::read_to_string(&log)?;
    let probes = methods.lines().filter(|m| *m == "server/discover").count();
    let handshakes = methods.lines().filter(|m| *m == "initialize").count();
    ensure!(
        probes == 1 && handshakes == 2,
        "methods the server got:\n{methods}"
    );
    Ok(())
}

#[tokio::test]
async fn a_role_that_declines_questions_gets_the_servers_answer_to_a_decline_at_once()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("ask_1", "mcp__hermetic__ask", json!({})),
        Step::text("It was declined.")
            .expect_tool_results(["ask_1"])
            .expect_last_user("you declined"),
    ])?;
    let node = hermetic_node_with_role(
        &model,
        "mcp__hermetic__ask",
        "",
        (
            "quiet.md",
            "---\nname: quiet\ndescription: Never asks.\ntools: [mcp__hermetic]\nelicitation: decline\n---\nUse the tools.\n",
        ),
    )
    .await?;
    let task = mew_tests::node::send_text(&node, "quiet", "greet whoever is there").await?;
    // No INPUT_REQUIRED on the way: the question was declined by the role's setting.
    ensure!(
        task.status.state == TaskState::Completed && status_text(&task) == "It was declined.",
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    Ok(())
}

/// A node whose hermetic server speaks `protocol` and may ask the task's model after the
/// caller allows it (`sampling` left at its default, ask): the caller is asked, says `reply`.
async fn sampling_asks_the_caller(protocol: &str, reply: &str) -> anyhow::Result<()> {
    let allowed = reply == "yes";
    let mut steps = vec![Step::tool_call(
        "call_1",
        "mcp__hermetic__sample",
        json!({"prompt": "name a cat"}),
    )];
    if allowed {
        steps.push(
            Step::text("Tom")
                .expect_system("Answer in one word.")
                .expect_last_user("name a cat"),
        );
    }
    steps.push(
        Step::text("Done.")
            .expect_tool_results(["call_1"])
            .expect_last_user(if allowed {
                "model said: Tom"
            } else {
                "did not let"
            }),
    );
    let model = ScriptedModel::start(steps)?;
    let node = hermetic_node(
        &model,
        "mcp__hermetic__sample",
        &format!("    args: [--protocol, {protocol}]\n"),
        "mcp__hermetic",
    )
    .await?;
    let asked = mew_tests::node::send_text(&node, "toolsmith", "ask the server").await?;
    let question = status_text(&asked);
    ensure!(
        asked.status.state == TaskState::InputRequired
            && question.contains("asks to use the task's model")
            && question.contains("name a cat"),
        "{protocol}: {:?}: {question}",
        asked.status.state
    );
    let mut answer = Message::user_text(reply);
    answer.task_id = Some(asked.id.clone());
    answer.context_id = Some(asked.context_id.clone());
    let done = mew_tests::node::send(&node, "toolsmith", answer).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "Done.",
        "{protocol}: {:?}: {}",
        done.status.state,
        status_text(&done)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn by_default_a_servers_sampling_request_waits_for_the_callers_yes_on_both_generations()
-> anyhow::Result<()> {
    for protocol in ["legacy", "modern"] {
        sampling_asks_the_caller(protocol, "yes").await?;
    }
    // A no: the model is not asked, and the call says so.
    for protocol in ["legacy", "modern"] {
        sampling_asks_the_caller(protocol, "no").await?;
    }
    Ok(())
}
