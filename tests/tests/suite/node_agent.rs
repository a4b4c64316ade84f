//! Model-driven roles on a real node: the provider's real HTTP code against the
//! scripted model server, tools run by the agent loop, permissions that ask.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskState,
};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::MewNode;
use mew_transport::{AgentTransport, Binding, CallContext};
use serde_json::json;

const KEY_VAR: &str = "MEW_TEST_MODEL_KEY";
const KEY: &str = "sk-test-scripted";

/// A node whose model roles run on `model`, over the OpenAI-compatible API or Anthropic's.
async fn node(
    model: &ScriptedModel,
    kind: &str,
    roles: &[(&str, &str)],
) -> anyhow::Result<MewNode> {
    let (base, key) = match kind {
        "openai" => (format!("{}/v1", model.base_url()), ""),
        _ => (
            model.base_url().to_owned(),
            "\n    api_key_env: MEW_TEST_MODEL_KEY",
        ),
    };
    let config = format!(
        "agent:\n  provider: scripted\n  model: sonnet\nproviders:\n  scripted:\n    kind: {kind}\n    base_url: {base}{key}\n    max_retries: 0\n"
    );
    let mut node = MewNode::new()?;
    node.set_env(KEY_VAR, KEY);
    node.write_config(&config)?;
    for (file, text) in roles {
        node.write_role(file, text)?;
    }
    node.launch().await?;
    Ok(node)
}

fn role(name: &str, frontmatter: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: A test role.\n{frontmatter}---\nYou help with tests.\n"
    )
}

async fn send(node: &MewNode, role: &str, message: Message) -> anyhow::Result<Task> {
    let agent = node
        .agent(&format!("/agents/{role}"), Binding::JsonRpc)
        .await?;
    match agent
        .send_message(&CallContext::default(), SendMessageRequest::new(message))
        .await?
    {
        SendMessageResponse::Task(task) => Ok(task),
        other => bail!("expected a task, got {other:?}"),
    }
}

/// All text of the task's artifacts, chunks joined as they were streamed.
fn artifact_text(task: &Task) -> String {
    task.artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect()
}

fn status_text(task: &Task) -> String {
    task.status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default()
}

#[tokio::test]
async fn a_model_role_reads_a_file_with_a_tool() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "read_file", json!({"file_path": "notes.txt"}))
            .expect_tools_include(["read_file"])
            .expect_tools_exclude(["bash", "Agent"])
            .expect_last_user("what do the notes say"),
        Step::text("The notes say hello.").expect_tool_results(["call_1"]),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("reader.md", &role("reader", "tools: [read_file]\n"))],
    )
    .await?;
    std::fs::write(
        node.project_dir().join("notes.txt"),
        "hello from the notes\n",
    )?;

    let task = send(
        &node,
        "reader",
        Message::user_text("what do the notes say?"),
    )
    .await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    ensure!(
        status_text(&task) == "The notes say hello.",
        "answer {:?}",
        status_text(&task)
    );
    let response = artifact_text(&task);
    ensure!(
        response.contains("The notes say hello."),
        "artifact {response:?}"
    );
    let requests = model.requests();
    ensure!(requests.len() == 2, "{} model calls", requests.len());
    ensure!(
        requests[1]
            .last_user_text()
            .contains("hello from the notes"),
        "the tool result did not reach the model"
    );
    ensure!(
        requests[0].body["model"] != json!("sonnet"),
        "the alias was not mapped to a model id"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_permission_ask_becomes_input_required_and_the_reply_resumes() -> anyhow::Result<()> {
    let model = ScriptedModel::with_key(
        vec![
            Step::tool_call("toolu_1", "bash", json!({"command": "echo done > out.txt"})),
            Step::text("Wrote it.").expect_tool_results(["toolu_1"]),
        ],
        KEY,
    )?;
    let node = node(
        &model,
        "anthropic",
        &[("writer.md", &role("writer", "tools: [bash]\n"))],
    )
    .await?;

    let asked = send(&node, "writer", Message::user_text("write the file")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "state {:?}: {}",
        asked.status.state,
        status_text(&asked)
    );
    ensure!(
        status_text(&asked).contains("echo done > out.txt"),
        "question {:?}",
        status_text(&asked)
    );
    ensure!(
        !node.project_dir().join("out.txt").exists(),
        "the command ran before it was approved"
    );

    let mut yes = Message::user_text("yes");
    yes.task_id = Some(asked.id.clone());
    let done = send(&node, "writer", yes).await?;
    ensure!(
        done.id == asked.id && done.status.state == TaskState::Completed,
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    let written = std::fs::read_to_string(node.project_dir().join("out.txt")).context("out.txt")?;
    ensure!(written.trim() == "done", "out.txt holds {written:?}");
    ensure!(
        model.requests()[0].header("x-api-key") == Some(KEY),
        "the key from the environment was not sent"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_refused_call_goes_back_to_the_model_as_an_error() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
        Step::text("Understood, I will not delete it.")
            .expect_tool_results(["call_1"])
            .expect_last_user("did not allow"),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("cleaner.md", &role("cleaner", "tools: [bash]\n"))],
    )
    .await?;
    let asked = send(&node, "cleaner", Message::user_text("clean up")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "state {:?}",
        asked.status.state
    );
    let mut no = Message::user_text("no, keep it");
    no.task_id = Some(asked.id.clone());
    let done = send(&node, "cleaner", no).await?;
    ensure!(
        done.status.state == TaskState::Completed,
        "state {:?}: {}",
        done.status.state,
        status_text(&done)
    );
    ensure!(
        status_text(&done) == "Understood, I will not delete it.",
        "answer {:?}",
        status_text(&done)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn max_turns_stops_a_model_that_never_finishes() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "glob", json!({"pattern": "*.txt"})),
        Step::tool_call("call_2", "glob", json!({"pattern": "*.md"})),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("looper.md", &role("looper", "tools: [glob]\nmaxTurns: 2\n"))],
    )
    .await?;
    let task = send(&node, "looper", Message::user_text("look around")).await?;
    ensure!(
        task.status.state == TaskState::Failed,
        "state {:?}",
        task.status.state
    );
    ensure!(
        status_text(&task).contains("limit of 2 model calls"),
        "reason {:?}",
        status_text(&task)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn the_answer_streams_as_artifact_chunks_with_tool_progress() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "grep", json!({"pattern": "needle"})).with_text("Searching."),
        Step::text("Found the needle in hay.txt.")
            .with_chunks(4)
            .expect_tool_results(["call_1"]),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("finder.md", &role("finder", "tools: [grep]\n"))],
    )
    .await?;
    std::fs::write(node.project_dir().join("hay.txt"), "hay\nneedle\nhay\n")?;
    let agent = node.agent("/agents/finder", Binding::HttpJson).await?;
    let stream = agent
        .send_streaming_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("find it")),
        )
        .await?;
    let events: Vec<StreamResponse> =
        tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>())
            .await
            .context("the stream did not end")?
            .into_iter()
            .collect::<Result<_, _>>()?;
    let chunks = events
        .iter()
        .filter(|e| matches!(e, StreamResponse::ArtifactUpdate(_)))
        .count();
    ensure!(chunks >= 1, "no artifact chunks");
    let tool_notes = events
        .iter()
        .filter(|e| matches!(e, StreamResponse::StatusUpdate(u) if u.metadata.as_ref().is_some_and(|m| m.contains_key("mew"))))
        .count();
    ensure!(
        tool_notes >= 2,
        "expected tool started/finished notes, got {tool_notes}"
    );
    let mut task = match events.first() {
        Some(StreamResponse::Task(task)) => task.clone(),
        other => bail!("first event {other:?}"),
    };
    for event in &events[1..] {
        task.apply(event);
    }
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}",
        task.status.state
    );
    let text = artifact_text(&task);
    ensure!(
        text.contains("Found the needle in hay.txt."),
        "artifact text {text:?}"
    );
    model.assert_done();
    Ok(())
}

fn command_role(name: &str, command: &str) -> String {
    format!("---\nname: {name}\ndescription: Runs {command}.\ncommand: {command}\n---\n")
}

/// The tasks of a node, newest first, through its front agent.
async fn tasks_of(node: &MewNode) -> anyhow::Result<Vec<Task>> {
    let agent = node.agent("", Binding::JsonRpc).await?;
    let request = mew_cards::ListTasksRequest {
        include_artifacts: Some(true),
        ..Default::default()
    };
    Ok(agent
        .list_tasks(&CallContext::default(), request)
        .await?
        .tasks)
}

fn parent_of(task: &Task) -> Option<String> {
    task.metadata
        .as_ref()?
        .get("mew")?
        .get("parentTask")?
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn a_model_role_delegates_to_a_local_role_through_the_agent_tool() -> anyhow::Result<()> {
    let model =
        ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "one two three", "description": "count words", "subagent_type": "wc"}),
        )
        .expect_tools_include(["Agent"]),
        Step::text("Three words.").expect_tool_results(["call_1"]).expect_last_user("3"),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent]\n")),
        ("wc.md", command_role("wc", "[wc, -w]")),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let node = node(&model, "openai", &refs).await?;
    let boss = send(
        &node,
        "boss",
        Message::user_text("count the words of 'one two three'"),
    )
    .await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let tasks = tasks_of(&node).await?;
    let child = tasks
        .iter()
        .find(|t| t.id != boss.id)
        .context("no child task")?;
    ensure!(
        parent_of(child).as_deref() == Some(boss.id.as_str()),
        "child metadata {:?}",
        child.metadata
    );
    ensure!(
        child.status.state == TaskState::Completed,
        "child {:?}",
        child.status.state
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn delegation_crosses_nodes_and_cancel_follows_it() -> anyhow::Result<()> {
    // Node B serves a fast role and a slow one; node A's model delegates to them by URL.
    let b = MewNode::start(&[
        ("upper.md", &command_role("upper", "[tr, a-z, A-Z]")),
        ("slow.md", &command_role("slow", "[sleep, \"1000\"]")),
    ])
    .await?;
    let upper_url = b.role_url("upper");
    let slow_url = b.role_url("slow");
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": upper_url}),
        ),
        Step::text("It shouted.")
            .expect_tool_results(["call_1"])
            .expect_last_user("SHOUT THIS"),
        Step::tool_call(
            "call_2",
            "Agent",
            json!({"prompt": "take your time", "description": "wait", "subagent_type": slow_url}),
        ),
    ])?;
    let a = node(
        &model,
        "openai",
        &[("boss.md", &role("boss", "tools: [Agent]\n"))],
    )
    .await?;

    let boss = send(&a, "boss", Message::user_text("shout")).await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let on_b = tasks_of(&b).await?;
    ensure!(
        on_b.len() == 1 && parent_of(&on_b[0]).as_deref() == Some(boss.id.as_str()),
        "tasks on B: {on_b:?}"
    );

    // A second task delegates to the slow role; cancelling it on A cancels the child on B.
    let agent = a.agent("/agents/boss", Binding::JsonRpc).await?;
    let config = mew_cards::SendMessageConfiguration {
        return_immediately: true,
        ..Default::default()
    };
    let request = SendMessageRequest {
        configuration: Some(config),
        ..SendMessageRequest::new(Message::user_text("wait"))
    };
    let waiting = match agent.send_message(&CallContext::default(), request).await? {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    let child =
        mew_tests::node::poll_until("the slow child on B", Duration::from_secs(20), || async {
            Ok(tasks_of(&b)
                .await?
                .into_iter()
                .find(|t| parent_of(t).as_deref() == Some(waiting.id.as_str())))
        })
        .await?;
    let cancel = mew_cards::CancelTaskRequest {
        id: waiting.id.clone(),
        ..Default::default()
    };
    agent.cancel_task(&CallContext::default(), cancel).await?;
    let b_agent = b.agent("", Binding::JsonRpc).await?;
    mew_tests::node::poll_until(
        "the child on B canceled",
        Duration::from_secs(20),
        || async {
            let request = mew_cards::GetTaskRequest {
                id: child.id.clone(),
                ..Default::default()
            };
            let task = b_agent.get_task(&CallContext::default(), request).await?;
            Ok((task.status.state == TaskState::Canceled).then_some(()))
        },
    )
    .await?;
    model.assert_done();
    Ok(())
}
