//! End-to-end tests of what one principal may do with another's conversation: nothing. A
//! context belongs to the principal that created it; a message of another principal naming
//! it, or naming one of its tasks, is told the context or task is not found, on both
//! bindings, whatever role it is sent to, and nothing of it reaches that caller or the
//! model. What a task delegates on its node (children, forks) belongs to its principal too.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    ContextId, ErrorKind, GetTaskRequest, ListTasksRequest, Message, SendMessageRequest,
    SendMessageResponse, Task, TaskId, TaskState,
};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, echo_role, scripted_model_config, status_text};
use mew_transport::{AgentTransport, Binding, CallContext, Error, RemoteAgent};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::HttpJson];
const WAIT: Duration = Duration::from_secs(60);
const ALICE_KEY: &str = "alice-key-0123456789";
const BOB_KEY: &str = "bob-key-9876543210";

const AUTH: &str = "auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n    \
                    - name: bob\n      key_env: TEST_KEY_BOB\n";

/// A node with two callers, alice and bob, by API key, and `config` besides.
async fn two_principal_node(config: &str, roles: &[(&str, &str)]) -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(&format!("{AUTH}{config}"))?;
    for (file, text) in roles {
        node.write_role(file, text)?;
    }
    node.set_env("TEST_KEY_ALICE", ALICE_KEY);
    node.set_env("TEST_KEY_BOB", BOB_KEY);
    node.launch().await?;
    Ok(node)
}

/// A client of the agent at `path` that authenticates with `key`.
async fn as_caller(
    node: &MewNode,
    path: &str,
    binding: Binding,
    key: &str,
) -> anyhow::Result<RemoteAgent> {
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_str(key)?);
    node.agent_with_headers(path, binding, headers).await
}

async fn send(agent: &dyn AgentTransport, message: Message) -> Result<Task, Error> {
    let request = SendMessageRequest::new(message);
    let response =
        tokio::time::timeout(WAIT, agent.send_message(&CallContext::anonymous(), request))
            .await
            .map_err(|_| Error::transport("no answer in time"))??;
    match response {
        SendMessageResponse::Task(task) => Ok(task),
        SendMessageResponse::Message(m) => Err(Error::transport(format!(
            "expected a task, got the message {m:?}"
        ))),
    }
}

/// A user message with `text`, in context `context` or continuing task `task`.
fn message(text: &str, context: Option<&ContextId>, task: Option<&TaskId>) -> Message {
    let mut message = Message::user_text(text);
    message.context_id = context.cloned();
    message.task_id = task.cloned();
    message
}

/// The call failed with TaskNotFound (the spec's error for what the caller may not see).
fn expect_not_found<T: std::fmt::Debug>(
    outcome: Result<T, Error>,
    what: &str,
) -> anyhow::Result<()> {
    match outcome {
        Err(Error::Protocol(e)) if e.kind == ErrorKind::TaskNotFound => Ok(()),
        other => bail!("{what}: expected TaskNotFound, got {other:?}"),
    }
}

/// What bob tries with alice's context `context` and her task `task` through `agent`: a new
/// task in the context, blocking and streaming, and a message to the task. Each is not found.
async fn bob_is_refused(
    agent: &RemoteAgent,
    context: &ContextId,
    task: &TaskId,
    what: &str,
) -> anyhow::Result<()> {
    expect_not_found(
        send(agent, message("history", Some(context), None)).await,
        &format!("{what}: SendMessage in alice's context"),
    )?;
    let streamed = agent
        .send_streaming_message(
            &CallContext::anonymous(),
            SendMessageRequest::new(message("history", Some(context), None)),
        )
        .await;
    let streamed = match streamed {
        Ok(mut stream) => match tokio::time::timeout(WAIT, stream.next()).await {
            Ok(Some(Ok(event))) => Ok(event),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(Error::transport("the stream ended without an event")),
            Err(_) => Err(Error::transport("no event in time")),
        },
        Err(e) => Err(e),
    };
    expect_not_found(
        streamed,
        &format!("{what}: SendStreamingMessage in alice's context"),
    )?;
    expect_not_found(
        send(agent, message("history", None, Some(task))).await,
        &format!("{what}: a message to alice's task"),
    )?;
    expect_not_found(
        send(agent, message("history", Some(context), Some(task))).await,
        &format!("{what}: a message to alice's task in her context"),
    )?;
    Ok(())
}

/// The texts of the messages the echo role's `history` command saw before its own message.
fn seen_history(task: &Task) -> anyhow::Result<Vec<String>> {
    let data = task
        .artifacts
        .iter()
        .flat_map(|a| a.parts.iter())
        .find_map(|p| match &p.content {
            mew_cards::PartContent::Data(value) => Some(value.clone()),
            _ => None,
        })
        .with_context(|| format!("no history data in {task:?}"))?;
    let items = data
        .as_array()
        .cloned()
        .or_else(|| data.get("messages").and_then(Value::as_array).cloned())
        .with_context(|| format!("the history data is not a list: {data}"))?;
    Ok(items
        .iter()
        .filter_map(|item| item.get("text").and_then(Value::as_str))
        .map(str::to_owned)
        .collect())
}

#[tokio::test]
async fn another_principal_cannot_continue_or_join_a_conversation() -> anyhow::Result<()> {
    let echo = echo_role("echo")?;
    let other = echo_role("other")?;
    let node = two_principal_node(
        "node:\n  default_role: echo\n",
        &[("echo.md", &echo), ("other.md", &other)],
    )
    .await?;
    for binding in BINDINGS {
        let alice = as_caller(&node, "/agents/echo", binding, ALICE_KEY).await?;
        let first = send(&alice, message("echo alpha", None, None)).await?;
        ensure!(first.status.state == TaskState::Completed, "{first:?}");
        let context = first.context_id.clone();
        // A task of alice's that waits for input: bob may not answer it either.
        let asking = send(&alice, message("ask", Some(&context), None)).await?;
        ensure!(
            asking.status.state == TaskState::InputRequired,
            "{asking:?}"
        );

        // Bob, through every agent of the node: the same role, another role, the front.
        for path in ["/agents/echo", "/agents/other", ""] {
            let bob = as_caller(&node, path, binding, BOB_KEY).await?;
            let what = format!("{binding:?} {path:?}");
            bob_is_refused(&bob, &context, &first.id, &what).await?;
            bob_is_refused(&bob, &context, &asking.id, &what).await?;
            // Nothing of bob's attempts was stored, and nothing of alice's is listed to him.
            let listed = bob
                .list_tasks(
                    &CallContext::anonymous(),
                    ListTasksRequest {
                        context_id: context.clone(),
                        ..ListTasksRequest::default()
                    },
                )
                .await?;
            ensure!(listed.tasks.is_empty(), "{what}: bob lists {listed:?}");
        }

        // Alice's question is still open, and her context holds only her own messages.
        let answered = send(&alice, message("yes", Some(&context), Some(&asking.id))).await?;
        ensure!(
            answered.status.state == TaskState::Completed,
            "{binding:?}: alice's answer: {answered:?}"
        );
        let later = send(&alice, message("history", Some(&context), None)).await?;
        let seen = seen_history(&later)?;
        ensure!(
            seen.iter().all(|text| text != "history")
                && seen.contains(&"echo alpha".to_owned())
                && seen.contains(&"yes".to_owned()),
            "{binding:?}: alice's next task saw {seen:?}"
        );
        let listed = alice
            .list_tasks(
                &CallContext::anonymous(),
                ListTasksRequest {
                    context_id: context.clone(),
                    ..ListTasksRequest::default()
                },
            )
            .await?;
        ensure!(
            listed.tasks.len() == 3,
            "{binding:?}: alice's context holds {:?}",
            listed.tasks.iter().map(|t| &t.id).collect::<Vec<_>>()
        );

        // Bob's own conversation works as ever, and alice cannot join it either.
        let bob = as_caller(&node, "/agents/echo", binding, BOB_KEY).await?;
        let bobs = send(&bob, message("echo beta", None, None)).await?;
        ensure!(bobs.status.state == TaskState::Completed, "{bobs:?}");
        expect_not_found(
            send(&alice, message("history", Some(&bobs.context_id), None)).await,
            &format!("{binding:?}: alice in bob's context"),
        )?;
        let again = send(&bob, message("history", Some(&bobs.context_id), None)).await?;
        ensure!(
            seen_history(&again)? == ["echo beta"],
            "{binding:?}: bob's history {:?}",
            seen_history(&again)
        );
    }
    Ok(())
}

fn model_role(name: &str, tools: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: A test role.\ntools: [{tools}]\n---\nYou help with tests.\n"
    )
}

/// The children alice's task recorded (`metadata.mew.children`), by name or description.
fn child(task: &Task, key: &str) -> anyhow::Result<TaskId> {
    let links = task
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .and_then(|mew| mew.get("children"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    links
        .iter()
        .find(|l| l["name"] == key || l["description"] == key)
        .and_then(|l| l["taskId"].as_str())
        .map(TaskId::from)
        .with_context(|| format!("no child {key:?} in {links:?}"))
}

async fn get(agent: &RemoteAgent, id: &TaskId) -> Result<Task, Error> {
    agent
        .get_task(
            &CallContext::anonymous(),
            GetTaskRequest {
                id: id.clone(),
                ..GetTaskRequest::default()
            },
        )
        .await
}

#[tokio::test]
async fn delegated_children_and_forks_belong_to_the_principal_of_their_parent() -> anyhow::Result<()>
{
    // Only alice's requests reach the model: a request of bob's would exhaust the script.
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "remember the number 42", "description": "remember",
                   "subagent_type": "helper", "name": "keeper"}),
        ),
        Step::text("I will remember 42.").expect_last_user("remember the number 42"),
        Step::tool_call(
            "call_2",
            "Agent",
            json!({"prompt": "count to three", "description": "count"}),
        )
        .expect_tool_results(["call_1"]),
        // The fork's first request and the boss's next one race: both get the same answer.
        Step::text("Scope: counted 1 2 3."),
        Step::text("Scope: counted 1 2 3."),
        Step::text("Delegated and forked.").expect_last_user("task-notification"),
        // Alice continues: SendMessage reaches her child in its own conversation.
        Step::tool_call(
            "call_3",
            "SendMessage",
            json!({"to": "keeper", "message": "which number was it?"}),
        )
        .expect_last_user("ask the keeper"),
        Step::text("The number is 42.").expect_last_user("which number was it?"),
        Step::text("The keeper says 42.").expect_tool_results(["call_3"]),
    ])?;
    let boss = model_role("boss", "Agent, SendMessage, read_file");
    let helper = model_role("helper", "read_file");
    let node = two_principal_node(
        &scripted_model_config(&model),
        &[("boss.md", &boss), ("helper.md", &helper)],
    )
    .await?;
    let alice = as_caller(&node, "/agents/boss", Binding::JsonRpc, ALICE_KEY).await?;
    let first = send(
        &alice,
        message("have someone remember 42, then fork", None, None),
    )
    .await?;
    ensure!(
        first.status.state == TaskState::Completed,
        "{:?}: {}",
        first.status.state,
        status_text(&first)
    );
    let first = get(&alice, &first.id).await?;
    let keeper = child(&first, "keeper")?;
    let fork = child(&first, "count")?;

    for binding in BINDINGS {
        let alice_front = as_caller(&node, "", binding, ALICE_KEY).await?;
        for path in ["", "/agents/boss", "/agents/helper"] {
            let bob = as_caller(&node, path, binding, BOB_KEY).await?;
            let what = format!("{binding:?} {path:?}");
            for (id, name) in [(&keeper, "the child"), (&fork, "the fork")] {
                // The child belongs to alice: she sees it, bob does not.
                let task = get(&alice_front, id).await?;
                expect_not_found(get(&bob, id).await, &format!("{what}: GetTask of {name}"))?;
                // Neither its conversation nor the task itself takes bob's messages.
                bob_is_refused(&bob, &task.context_id, id, &format!("{what}: {name}")).await?;
            }
            // Nor the boss's conversation, where SendMessage would find alice's children.
            bob_is_refused(
                &bob,
                &first.context_id,
                &first.id,
                &format!("{what}: the boss"),
            )
            .await?;
        }
    }

    // The task tree: alice walks to both children; bob is told the task is not found.
    let url = node.url().to_owned();
    let tree = |key: &'static str| {
        let (url, id) = (url.clone(), first.id.to_string());
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
        code == 0
            && stdout.contains(keeper.as_str())
            && stdout.contains(fork.as_str())
            && !stdout.contains("\"error\": \""),
        "tasks tree as alice: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = tree(BOB_KEY).await?;
    ensure!(
        code != 0
            && stderr.to_lowercase().contains("not found")
            && !stdout.contains(keeper.as_str()),
        "tasks tree as bob: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    // Push configs of alice's child: not bob's to set or read.
    for binding in BINDINGS {
        let bob = as_caller(&node, "/agents/helper", binding, BOB_KEY).await?;
        let config = mew_cards::TaskPushNotificationConfig {
            task_id: keeper.clone(),
            url: "https://hooks.example/bob".to_owned(),
            ..Default::default()
        };
        expect_not_found(
            bob.create_task_push_notification_config(&CallContext::anonymous(), config)
                .await,
            &format!("{binding:?}: bob sets a push config on alice's child"),
        )?;
        let list = mew_cards::ListTaskPushNotificationConfigsRequest {
            task_id: keeper.clone(),
            ..Default::default()
        };
        expect_not_found(
            bob.list_task_push_notification_configs(&CallContext::anonymous(), list)
                .await,
            &format!("{binding:?}: bob lists the push configs of alice's child"),
        )?;
    }

    // Alice's conversation goes on, over the other binding: SendMessage finds her child.
    let alice = as_caller(&node, "/agents/boss", Binding::HttpJson, ALICE_KEY).await?;
    let second = send(
        &alice,
        message("ask the keeper", Some(&first.context_id), None),
    )
    .await?;
    ensure!(
        second.status.state == TaskState::Completed
            && status_text(&second) == "The keeper says 42.",
        "{:?}: {}",
        second.status.state,
        status_text(&second)
    );
    model.assert_done();
    Ok(())
}
