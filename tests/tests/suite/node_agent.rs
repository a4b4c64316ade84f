//! Model-driven roles on a real node: the provider's real HTTP code against the
//! scripted model server, tools run by the agent loop, permissions that ask.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskState,
};
use mew_tests::model::{ScriptedModel, Step, ToolCall, Usage};
use mew_tests::node::{MewNode, send, status_text};
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
    node_with(model, kind, "", roles).await
}

/// [`node`] with more `agent:` settings (lines indented by two spaces).
async fn node_with(
    model: &ScriptedModel,
    kind: &str,
    agent: &str,
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
        "agent:\n  provider: scripted\n  model: sonnet\n{agent}providers:\n  scripted:\n    kind: {kind}\n    base_url: {base}{key}\n    max_retries: 0\n"
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

/// All text of the task's artifacts, chunks joined as they were streamed.
fn artifact_text(task: &Task) -> String {
    task.artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect()
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
    // The last chunk says it is the last; the stored task holds the text whole, in one part.
    let last = events
        .iter()
        .rev()
        .find_map(|e| match e {
            StreamResponse::ArtifactUpdate(update) => Some(update),
            _ => None,
        })
        .context("no artifact update")?;
    ensure!(last.last_chunk, "the last artifact update: {last:?}");
    ensure!(chunks >= 2, "{chunks} chunks: the answer did not stream");
    let stored = task_on(&node, &task.id).await?;
    let parts: Vec<&str> = stored
        .artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect();
    ensure!(
        parts == ["Searching.Found the needle in hay.txt."],
        "stored parts {parts:?}"
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

/// The children a task recorded (`metadata.mew.children`).
fn children_of(task: &Task) -> Vec<serde_json::Value> {
    task.metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("children"))
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default()
}

async fn task_on(node: &MewNode, id: &mew_cards::TaskId) -> anyhow::Result<Task> {
    let agent = node.agent("", Binding::JsonRpc).await?;
    let request = mew_cards::GetTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    Ok(agent.get_task(&CallContext::default(), request).await?)
}

#[tokio::test]
async fn a_background_child_notifies_its_parent_which_answers_after_it() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "hello", "description": "shout later", "subagent_type": "slowshout",
                   "run_in_background": true, "name": "shouter"}),
        ),
        Step::text("I will wait for it.")
            .expect_tool_results(["call_1"])
            .expect_last_user("async_launched"),
        Step::text("It shouted HELLO.")
            .expect_last_user("task-notification")
            .expect_last_user("HELLO"),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent]\n")),
        (
            "slowshout.md",
            command_role("slowshout", "[sh, -c, \"sleep 1; tr a-z A-Z\"]"),
        ),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let node = node(&model, "openai", &refs).await?;
    let boss = send(
        &node,
        "boss",
        Message::user_text("shout hello, in the background"),
    )
    .await?;
    ensure!(
        boss.status.state == TaskState::Completed && status_text(&boss) == "It shouted HELLO.",
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let boss = task_on(&node, &boss.id).await?;
    let links = children_of(&boss);
    ensure!(links.len() == 1, "children recorded: {links:?}");
    ensure!(
        links[0]["name"] == "shouter"
            && links[0]["background"] == true
            && links[0]["agent"] == "slowshout",
        "link {:?}",
        links[0]
    );
    let child_id = links[0]["taskId"].as_str().context("taskId")?;
    let child = task_on(&node, &mew_cards::TaskId::from(child_id)).await?;
    ensure!(
        child.status.state == TaskState::Completed
            && parent_of(&child).as_deref() == Some(boss.id.as_str()),
        "child {child:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_notice_that_arrives_while_the_parent_waits_for_input_reaches_its_next_turn()
-> anyhow::Result<()> {
    // One answer starts a background child and asks to run a command: the parent waits for
    // the user while the child ends; the reply resumes the parent, which reads the notice.
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![
            ToolCall::new(
                "call_1",
                "Agent",
                json!({"prompt": "hello", "description": "shout later", "subagent_type": "slowshout",
                       "run_in_background": true, "name": "shouter"}),
            ),
            ToolCall::new(
                "call_2",
                "bash",
                json!({"command": "echo asked > asked.txt"}),
            ),
        ]),
        Step::text("It shouted HELLO.")
            .expect_tool_results(["call_1", "call_2"])
            .expect_last_user("HELLO"),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent, bash]\n")),
        (
            "slowshout.md",
            command_role("slowshout", "[sh, -c, \"sleep 1; tr a-z A-Z\"]"),
        ),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let node = node(&model, "openai", &refs).await?;
    let asked = send(&node, "boss", Message::user_text("shout hello, then write")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "{:?}: {}",
        asked.status.state,
        status_text(&asked)
    );
    // The child ends while its parent waits.
    let links = children_of(&task_on(&node, &asked.id).await?);
    let child_id = mew_cards::TaskId::from(
        links
            .first()
            .and_then(|l| l["taskId"].as_str())
            .context("no child recorded")?,
    );
    mew_tests::node::poll_until("the child completed", Duration::from_secs(30), || async {
        let child = task_on(&node, &child_id).await?;
        Ok((child.status.state == TaskState::Completed).then_some(()))
    })
    .await?;
    let mut yes = Message::user_text("yes");
    yes.task_id = Some(asked.id.clone());
    let done = send(&node, "boss", yes).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "It shouted HELLO.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    let requests = model.requests();
    let last = requests.last().context("no request")?.last_user_text();
    ensure!(
        last.contains("task-notification") && last.contains("HELLO"),
        "the resumed turn did not get the notice: {last}"
    );
    ensure!(
        node.project_dir().join("asked.txt").exists(),
        "the approved command did not run"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_slow_foreground_child_moves_to_the_background_instead_of_failing() -> anyhow::Result<()>
{
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "hello", "description": "shout slowly", "subagent_type": "slowshout"}),
        ),
        Step::text("Still going; I will wait.")
            .expect_tool_results(["call_1"])
            .expect_last_user("timed_out_to_background"),
        Step::text("Done: HELLO.").expect_last_user("HELLO"),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent]\n")),
        (
            "slowshout.md",
            command_role("slowshout", "[sh, -c, \"sleep 3; tr a-z A-Z\"]"),
        ),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let node = node_with(&model, "openai", "  background_after: 1s\n", &refs).await?;
    let boss = send(&node, "boss", Message::user_text("shout hello")).await?;
    ensure!(
        boss.status.state == TaskState::Completed && status_text(&boss) == "Done: HELLO.",
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let links = children_of(&task_on(&node, &boss.id).await?);
    ensure!(
        links.iter().any(|l| l["background"] == true),
        "the move to the background is not recorded: {links:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn send_message_continues_a_finished_child_after_a_restart() -> anyhow::Result<()> {
    // One scripted model serves the boss and its helper; foreground calls keep the order.
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "remember the number 42", "description": "remember",
                   "subagent_type": "helper", "name": "keeper"}),
        ),
        Step::text("I will remember 42.").expect_last_user("remember the number 42"),
        Step::text("Delegated.").expect_tool_results(["call_1"]),
        Step::tool_call(
            "call_2",
            "SendMessage",
            json!({"to": "keeper", "message": "which number was it?"}),
        )
        .expect_last_user("ask the keeper")
        .expect_tools_include(["SendMessage"]),
        Step::text("The number is 42.").expect_last_user("which number was it?"),
        Step::text("The keeper says 42.")
            .expect_tool_results(["call_2"])
            .expect_last_user("The number is 42."),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent, SendMessage]\n")),
        ("helper.md", role("helper", "")),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let mut node = node(&model, "openai", &refs).await?;
    let first = send(
        &node,
        "boss",
        Message::user_text("have someone remember 42"),
    )
    .await?;
    ensure!(
        first.status.state == TaskState::Completed,
        "{:?}: {}",
        first.status.state,
        status_text(&first)
    );

    node.restart().await?;
    let mut again = Message::user_text("ask the keeper");
    again.context_id = Some(first.context_id.clone());
    let second = send(&node, "boss", again).await?;
    ensure!(
        second.status.state == TaskState::Completed
            && status_text(&second) == "The keeper says 42.",
        "{:?}: {}",
        second.status.state,
        status_text(&second)
    );
    // The helper's second task continues its first one's conversation.
    let requests = model.requests();
    let continued = requests.get(4).context("the helper's second request")?;
    ensure!(
        continued.body.to_string().contains("I will remember 42."),
        "the continued helper did not see its earlier conversation: {}",
        continued.body
    );
    let helpers: Vec<Task> = tasks_of(&node)
        .await?
        .into_iter()
        .filter(|t| t.id != first.id && t.id != second.id)
        .collect();
    ensure!(
        helpers.len() == 2 && helpers[0].context_id == helpers[1].context_id,
        "helper tasks: {helpers:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_permission_ask_on_another_node_surfaces_as_input_required_and_the_reply_resumes_it()
-> anyhow::Result<()> {
    let b_model = ScriptedModel::with_key(
        vec![
            Step::tool_call("toolu_1", "bash", json!({"command": "echo done > out.txt"})),
            Step::text("Wrote it.").expect_tool_results(["toolu_1"]),
        ],
        KEY,
    )?;
    let b = node(
        &b_model,
        "anthropic",
        &[("writer.md", &role("writer", "tools: [bash]\n"))],
    )
    .await?;
    let a_model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "write out.txt", "description": "write", "subagent_type": b.role_url("writer")}),
        ),
        Step::text("B wrote it.")
            .expect_tool_results(["call_1"])
            .expect_last_user("Wrote it."),
    ])?;
    let a = node(
        &a_model,
        "openai",
        &[("boss.md", &role("boss", "tools: [Agent]\n"))],
    )
    .await?;

    let asked = send(&a, "boss", Message::user_text("get out.txt written on B")).await?;
    ensure!(
        asked.status.state == TaskState::InputRequired,
        "{:?}: {}",
        asked.status.state,
        status_text(&asked)
    );
    ensure!(
        status_text(&asked).contains("echo done > out.txt"),
        "A's question does not carry B's: {:?}",
        status_text(&asked)
    );
    ensure!(
        !b.project_dir().join("out.txt").exists(),
        "B ran the command before anyone approved it"
    );

    let mut yes = Message::user_text("yes");
    yes.task_id = Some(asked.id.clone());
    let done = send(&a, "boss", yes).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "B wrote it.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    let written = std::fs::read_to_string(b.project_dir().join("out.txt")).context("out.txt")?;
    ensure!(written.trim() == "done", "out.txt holds {written:?}");
    a_model.assert_done();
    b_model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_fork_sees_the_parent_conversation_and_reports_back() -> anyhow::Result<()> {
    // The boss's second request and the fork's first one race: both get the same answer.
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "count to three", "description": "count"}),
        ),
        Step::text("Scope: counted 1 2 3."),
        Step::text("Scope: counted 1 2 3."),
        Step::text("The fork counted.").expect_last_user("task-notification"),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("boss.md", &role("boss", "tools: [Agent, read_file]\n"))],
    )
    .await?;
    let boss = send(&node, "boss", Message::user_text("fork yourself to count")).await?;
    ensure!(
        boss.status.state == TaskState::Completed && status_text(&boss) == "The fork counted.",
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let requests = model.requests();
    let fork = requests
        .iter()
        .find(|r| r.last_user_text().contains("fork_boilerplate"))
        .context("no request from the fork")?;
    let body = fork.body.to_string();
    ensure!(
        body.contains("fork yourself to count") && fork.last_user_text().contains("count to three"),
        "the fork did not get the parent's conversation and its task: {body}"
    );
    ensure!(
        fork.tool_result_ids() == ["call_1"],
        "the fork's copy of the Agent call has no result: {body}"
    );
    let names = fork.tool_names();
    ensure!(
        names.contains(&"read_file".to_owned()) && !names.contains(&"Agent".to_owned()),
        "fork tools {names:?}"
    );
    let links = children_of(&task_on(&node, &boss.id).await?);
    ensure!(
        links.len() == 1 && links[0]["agent"] == "boss" && links[0]["background"] == true,
        "links {links:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn children_beyond_the_limit_wait_for_a_place() -> anyhow::Result<()> {
    // Two delegations in one answer run as one concurrent batch; with max_children 1 the
    // second child starts only after the first has ended.
    let call = |id: &str, prompt: &str| {
        mew_tests::model::ToolCall::new(
            id,
            "Agent",
            json!({"prompt": prompt, "description": "shout", "subagent_type": "slowshout"}),
        )
    };
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![call("call_1", "one"), call("call_2", "two")]),
        Step::text("Both shouted.").expect_tool_results(["call_1", "call_2"]),
    ])?;
    let roles = [
        ("boss.md", role("boss", "tools: [Agent]\n")),
        (
            "slowshout.md",
            command_role("slowshout", "[sh, -c, \"sleep 1; tr a-z A-Z\"]"),
        ),
    ];
    let refs: Vec<(&str, &str)> = roles.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let node = node_with(&model, "openai", "  max_children: 1\n", &refs).await?;
    let boss = send(&node, "boss", Message::user_text("shout twice")).await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let mut children: Vec<Task> = tasks_of(&node)
        .await?
        .into_iter()
        .filter(|t| t.id != boss.id)
        .collect();
    ensure!(children.len() == 2, "children: {children:?}");
    // Task ids are UUIDv7: their order is their creation order.
    children.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    let first_ended = children[0].status.timestamp.context("first end")?;
    // The id keeps milliseconds: allow one more. Without the limit the second child would
    // start with the first, a whole second before it ends.
    let second_created = mew_cards::Timestamp::from_unix_nanos(
        (i128::from(uuid_millis(children[1].id.as_str())?) + 1) * 1_000_000,
    );
    ensure!(
        second_created >= first_ended,
        "the second child was created at {second_created} before the first ended at {first_ended}"
    );
    model.assert_done();
    Ok(())
}

/// The creation time (Unix milliseconds) in a UUIDv7.
fn uuid_millis(id: &str) -> anyhow::Result<u64> {
    let hex: String = id.chars().filter(|c| *c != '-').take(12).collect();
    Ok(u64::from_str_radix(&hex, 16)?)
}

#[tokio::test]
async fn the_task_tree_crosses_nodes_and_rolls_usage_up() -> anyhow::Result<()> {
    // B's reader runs its own tool on its own model; A's boss delegates to it by URL.
    let b_model = ScriptedModel::start(vec![
        Step::tool_call("call_b", "read_file", json!({"file_path": "note.txt"}))
            .with_usage(Usage::new(100, 10)),
        Step::text("The note says hi.")
            .expect_tool_results(["call_b"])
            .expect_last_user("hi from B")
            .with_usage(Usage::new(200, 20)),
    ])?;
    let b = node(
        &b_model,
        "openai",
        &[("reader.md", &role("reader", "tools: [read_file]\n"))],
    )
    .await?;
    std::fs::write(b.project_dir().join("note.txt"), "hi from B\n")?;
    let a_model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_a",
            "Agent",
            json!({"prompt": "read note.txt", "description": "read the note", "subagent_type": b.role_url("reader")}),
        )
        .with_usage(Usage::new(1000, 100)),
        Step::text("B's note says hi.")
            .expect_tool_results(["call_a"])
            .expect_last_user("The note says hi.")
            .with_usage(Usage::new(1500, 150)),
    ])?;
    let a = node(
        &a_model,
        "openai",
        &[("boss.md", &role("boss", "tools: [Agent]\n"))],
    )
    .await?;
    // Streamed: the child's progress on B shows in A's stream as it happens.
    let agent = a.agent("/agents/boss", Binding::JsonRpc).await?;
    let stream = agent
        .send_streaming_message(
            &CallContext::default(),
            SendMessageRequest::new(Message::user_text("what does B's note say?")),
        )
        .await?;
    let events: Vec<StreamResponse> =
        tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>())
            .await
            .context("the stream did not end")?
            .into_iter()
            .collect::<Result<_, _>>()?;
    let child_tools: Vec<&serde_json::Value> = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::StatusUpdate(u) => {
                u.metadata.as_ref()?.get("mew")?.get("child")?.get("tool")
            }
            _ => None,
        })
        .collect();
    ensure!(
        child_tools.iter().any(|t| t["name"] == "read_file"),
        "A's stream did not show B's tool calls: {child_tools:?}"
    );
    let boss = match events.first() {
        Some(StreamResponse::Task(task)) => task_on(&a, &task.id).await?,
        other => bail!("first event {other:?}"),
    };
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );

    let (code, out, err) = a
        .client(&[
            "tasks",
            "tree",
            boss.id.as_str(),
            "--node",
            a.url(),
            "--json",
        ])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let tree: serde_json::Value = serde_json::from_str(&out).context("--json output")?;
    let children = tree["children"].as_array().context("children")?;
    ensure!(children.len() == 1, "{tree:#}");
    let child = &children[0];
    ensure!(
        child["url"] == b.role_url("reader")
            && child["task"]["state"] == "TASK_STATE_COMPLETED"
            && child["task"]["parentTask"] == boss.id.as_str()
            && child["ownUsage"]["inputTokens"] == 300
            && child["ownUsage"]["toolCalls"] == 1,
        "B's task in the tree: {child:#}"
    );
    ensure!(
        tree["ownUsage"]["inputTokens"] == 2500
            && tree["totalUsage"]["inputTokens"] == 2800
            && tree["totalUsage"]["outputTokens"] == 280
            && tree["totalUsage"]["modelCalls"] == 4
            && tree["tasks"] == 2
            && tree["partial"] == false,
        "the roll-up: {tree:#}"
    );

    // The terminal view shows both tasks, the child under the parent.
    let (code, out, err) = a
        .client(&["tasks", "tree", boss.id.as_str(), "--node", a.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let child_id = child["task"]["id"].as_str().context("child id")?;
    ensure!(
        out.lines()
            .next()
            .is_some_and(|l| l.starts_with(boss.id.as_str()))
            && out
                .lines()
                .any(|l| l.starts_with(&format!("└─ {child_id}"))),
        "{out}"
    );
    a_model.assert_done();
    b_model.assert_done();
    Ok(())
}

#[tokio::test]
async fn usage_a_server_does_not_report_is_unknown_not_zero() -> anyhow::Result<()> {
    // Some OpenAI-compatible servers ignore `stream_options.include_usage`.
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "read_file", json!({"file_path": "a.txt"})).without_usage(),
        Step::text("It says hello.")
            .expect_tool_results(["call_1"])
            .without_usage(),
    ])?;
    let node = node(
        &model,
        "openai",
        &[("reader.md", &role("reader", "tools: [read_file]\n"))],
    )
    .await?;
    std::fs::write(node.project_dir().join("a.txt"), "hello\n")?;
    let task = send(&node, "reader", Message::user_text("what does a.txt say?")).await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    let task = task_on(&node, &task.id).await?;
    let usage = task
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("usage"))
        .cloned()
        .context("no usage recorded")?;
    ensure!(
        usage["modelCalls"] == 2 && usage["unreportedModelCalls"] == 2,
        "usage {usage}"
    );
    let (code, stdout, stderr) = node
        .client(&["tasks", "tree", task.id.as_str(), "--node", node.url()])
        .await?;
    ensure!(
        code == 0 && stdout.contains("tokens not reported by the server"),
        "tasks tree: exit {code}\n{stdout}\n{stderr}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn the_read_only_explore_role_is_offered_no_tool_that_writes() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::text("Found it.")
            .expect_tools_include(["read_file", "grep", "glob"])
            .expect_tools_exclude(["write_file", "edit_file", "InstallSkill"]),
        // A role that may write gets them all: the check above can fail.
        Step::text("Wrote it.").expect_tools_include(["write_file", "edit_file", "InstallSkill"]),
    ])?;
    let node = node(&model, "openai", &[]).await?;
    let explored = send(&node, "Explore", Message::user_text("where is main?")).await?;
    ensure!(
        explored.status.state == TaskState::Completed,
        "{:?}: {}",
        explored.status.state,
        status_text(&explored)
    );
    let general = send(&node, "general-purpose", Message::user_text("write it")).await?;
    ensure!(
        general.status.state == TaskState::Completed,
        "{:?}: {}",
        general.status.state,
        status_text(&general)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_model_task_continues_from_its_checkpoint_after_the_node_is_killed() -> anyhow::Result<()>
{
    continues_after_the_node_goes(true).await
}

#[tokio::test]
async fn a_model_task_is_handed_back_at_a_graceful_stop_and_continues() -> anyhow::Result<()> {
    continues_after_the_node_goes(false).await
}

/// The first answer runs a command that records its pid and never ends; the node is killed
/// (`kill`) or stopped with SIGTERM while it runs. After the restart the model is asked again
/// with the call's result.
async fn continues_after_the_node_goes(kill: bool) -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "bash",
            json!({"command": "echo $$ >> started.txt; exec sleep 600"}),
        ),
        Step::text("Carried on after the crash.").expect_tool_results(["call_1"]),
    ])?;
    let mut node = node(
        &model,
        "openai",
        &[(
            "runner.md",
            &role(
                "runner",
                "tools: [bash]\npermissionMode: bypassPermissions\n",
            ),
        )],
    )
    .await?;
    let agent = node.agent("/agents/runner", Binding::JsonRpc).await?;
    let request = SendMessageRequest {
        configuration: Some(mew_cards::SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text("run the long job"))
    };
    let task = match agent.send_message(&CallContext::default(), request).await? {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    let started = node.project_dir().join("started.txt");
    let pid: i32 = mew_tests::node::poll_until(
        "the command has started",
        Duration::from_secs(30),
        || async {
            Ok(std::fs::read_to_string(&started)
                .ok()
                .and_then(|text| text.trim().parse().ok()))
        },
    )
    .await?;
    if kill {
        node.kill_hard().await?;
        // The command outlives the node, as a real crash leaves it; the test ends it.
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            rustix::process::kill_process(pid, rustix::process::Signal::KILL)?;
        }
    } else {
        let status = node.stop().await?;
        ensure!(status.success(), "the node exited with {status}");
    }

    node.restart().await?;
    ensure!(
        node.output().contains("1 resumed"),
        "the restart did not say it resumed the task: {}",
        node.output()
    );
    let agent = node.agent("/agents/runner", Binding::HttpJson).await?;
    let done = mew_tests::node::poll_until("the task is over", Duration::from_secs(30), || {
        let agent = &agent;
        let id = task.id.clone();
        async move {
            let request = mew_cards::GetTaskRequest {
                id,
                ..Default::default()
            };
            let task = agent.get_task(&CallContext::default(), request).await?;
            Ok(task.status.state.is_terminal().then_some(task))
        }
    })
    .await?;
    ensure!(
        done.status.state == TaskState::Completed,
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    ensure!(
        status_text(&done) == "Carried on after the crash.",
        "answer {:?}",
        status_text(&done)
    );
    // The command was not run again, and the model was told its outcome is unknown.
    let runs = std::fs::read_to_string(&started)?;
    ensure!(runs.lines().count() == 1, "the command ran again: {runs:?}");
    let requests = model.requests();
    ensure!(requests.len() == 2, "{} model requests", requests.len());
    let result = requests[1].last_user_text();
    ensure!(
        result.contains("interrupted") && result.contains("unknown"),
        "the model was not told the call was interrupted: {result:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_delegated_task_on_another_node_is_followed_again_after_a_crash_not_started_twice()
-> anyhow::Result<()> {
    let (b, runs, gate) = gated_worker().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "do the work", "description": "work", "subagent_type": b.role_url("worker")}),
        ),
        Step::text("The worker finished.").expect_tool_results(["call_1"]),
    ])?;
    let (mut a, boss) = boss_node(&model).await?;
    let task = start_task(&boss, "get the work done on B").await?;
    // The child runs on B, and A has recorded it with the call that started it.
    child_recorded(&boss, &task.id, &runs).await?;

    a.kill_hard().await?;
    a.restart().await?;
    std::fs::write(&gate, "")?;

    let boss = a.agent("/agents/boss", Binding::HttpJson).await?;
    let done = over(&boss, &task.id).await?;
    ensure!(
        done.status.state == TaskState::Completed && status_text(&done) == "The worker finished.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    // The model got the child's own answer, and B ran the work once.
    let requests = model.requests();
    ensure!(requests.len() == 2, "{} model requests", requests.len());
    let result = requests[1].last_user_text();
    ensure!(
        result.contains("finished the work") && !result.contains("interrupted"),
        "the model did not get the child's answer: {result:?}"
    );
    started_once(&b, &runs).await?;
    model.assert_done();
    Ok(())
}

async fn task_of(agent: &impl AgentTransport, id: &mew_cards::TaskId) -> anyhow::Result<Task> {
    let request = mew_cards::GetTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    Ok(agent.get_task(&CallContext::default(), request).await?)
}

#[tokio::test]
async fn a_background_child_running_at_a_crash_still_sends_its_notice() -> anyhow::Result<()> {
    let (b, runs, gate) = gated_worker().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "do the work", "description": "work", "subagent_type": b.role_url("worker"),
                   "run_in_background": true}),
        ),
        Step::text("Waiting for the worker.").expect_tool_results(["call_1"]),
        // Continued from the checkpoint after the launch: the model is asked again.
        Step::text("Still waiting.").expect_tool_results(["call_1"]),
        Step::text("The worker finished in the background.").expect_last_user("finished the work"),
    ])?;
    let (mut a, boss) = boss_node(&model).await?;
    let task = start_task(&boss, "get the work done on B in the background").await?;
    child_recorded(&boss, &task.id, &runs).await?;
    model_asked(&model, 2).await?;

    a.kill_hard().await?;
    a.restart().await?;
    // The parent waits for its child again before the child may end.
    model_asked(&model, 3).await?;
    std::fs::write(&gate, "")?;

    let boss = a.agent("/agents/boss", Binding::HttpJson).await?;
    let done = over(&boss, &task.id).await?;
    ensure!(
        done.status.state == TaskState::Completed
            && status_text(&done) == "The worker finished in the background.",
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    started_once(&b, &runs).await?;
    model.assert_done();
    Ok(())
}

/// A node B with a command role `worker` that appends a line to `runs` when it starts,
/// waits for `gate` to exist, and answers "finished the work".
async fn gated_worker() -> anyhow::Result<(MewNode, std::path::PathBuf, std::path::PathBuf)> {
    let mut b = MewNode::new()?;
    let runs = b.dir().join("runs.txt");
    let gate = b.dir().join("gate");
    b.write_role(
        "worker.md",
        &mew_tests::node::command_role(
            "worker",
            &format!(
                "sh -c 'echo run >> {runs}; while [ ! -f {gate} ]; do sleep 0.05; done; \
                 echo finished the work'",
                runs = runs.display(),
                gate = gate.display()
            ),
        ),
    )?;
    b.launch().await?;
    Ok((b, runs, gate))
}

/// A node A with a model role `boss` that may delegate, and its agent.
async fn boss_node(model: &ScriptedModel) -> anyhow::Result<(MewNode, mew_transport::RemoteAgent)> {
    let a = node(
        model,
        "openai",
        &[("boss.md", &role("boss", "tools: [Agent]\n"))],
    )
    .await?;
    let boss = a.agent("/agents/boss", Binding::JsonRpc).await?;
    Ok((a, boss))
}

/// Sends `text` and returns the task at once.
async fn start_task(agent: &impl AgentTransport, text: &str) -> anyhow::Result<Task> {
    let request = SendMessageRequest {
        configuration: Some(mew_cards::SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text(text))
    };
    match agent.send_message(&CallContext::default(), request).await? {
        SendMessageResponse::Task(task) => Ok(task),
        other => bail!("expected a task, got {other:?}"),
    }
}

/// Waits until the worker has started and the parent `id` has recorded it with the call
/// `call_1` that started it.
async fn child_recorded(
    agent: &impl AgentTransport,
    id: &mew_cards::TaskId,
    runs: &std::path::Path,
) -> anyhow::Result<()> {
    mew_tests::node::poll_until(
        "the parent has recorded its child",
        Duration::from_secs(30),
        || async {
            let parent = task_of(agent, id).await?;
            let link = parent
                .metadata
                .as_ref()
                .and_then(|m| m.get("mew"))
                .and_then(|m| m.get("children"))
                .and_then(|c| c.get(0))
                .and_then(|l| l.get("callId"))
                .cloned();
            Ok((link == Some(json!("call_1"))).then_some(()))
        },
    )
    .await?;
    mew_tests::node::poll_until("the child has started", Duration::from_secs(30), || async {
        Ok(std::fs::read_to_string(runs)
            .is_ok_and(|r| r.lines().count() == 1)
            .then_some(()))
    })
    .await
}

/// Waits until `model` has had `n` requests.
async fn model_asked(model: &ScriptedModel, n: usize) -> anyhow::Result<()> {
    mew_tests::node::poll_until("the model is asked", Duration::from_secs(30), || async {
        Ok((model.requests().len() >= n).then_some(()))
    })
    .await
}

/// Waits until the task `id` is over.
async fn over(agent: &impl AgentTransport, id: &mew_cards::TaskId) -> anyhow::Result<Task> {
    mew_tests::node::poll_until("the task is over", Duration::from_secs(30), || async {
        let task = task_of(agent, id).await?;
        Ok(task.status.state.is_terminal().then_some(task))
    })
    .await
}

/// Checks that the worker of `b` ran once: one line in `runs`, one task on B.
async fn started_once(b: &MewNode, runs: &std::path::Path) -> anyhow::Result<()> {
    let ran = std::fs::read_to_string(runs)?;
    ensure!(ran.lines().count() == 1, "the child started again: {ran:?}");
    let worker = b.agent("/agents/worker", Binding::JsonRpc).await?;
    let listed = worker
        .list_tasks(
            &CallContext::default(),
            mew_cards::ListTasksRequest::default(),
        )
        .await?;
    ensure!(
        listed.total_size == 1,
        "B holds {} tasks",
        listed.total_size
    );
    Ok(())
}
