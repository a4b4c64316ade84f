//! End-to-end tests of `mew up`: the real binary, its roles as A2A agents, durable tasks
//! across crashes and restarts, limits, and broken role files.
//!
//! Every node runs in its own temporary home, project and data directory
//! (`mew_tests::node::MewNode`); the echo role is `tests/peers/echo_role.py`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    CancelTaskRequest, ContextId, ErrorKind, GetTaskRequest, ListTasksRequest, Message, Role,
    SendMessageConfiguration, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskId, TaskState, join_text,
};
use mew_tests::node::{MewNode, command_role, echo_role, poll_until, status_text};
use mew_tests::python::run_driver;
use mew_transport::{AgentTransport, Binding, CallContext, Error, EventStream};
use serde_json::json;

const BINDINGS: [Binding; 3] = [Binding::JsonRpc, Binding::HttpJson, Binding::Grpc];

/// The bound on any single call or wait in these tests.
const WAIT: Duration = Duration::from_secs(30);

/// What every task running when the node died says after the restart (`RESTART_REASON`).
const RESTART_REASON: &str = "the node restarted while this task was running; its work was lost";

/// What a task running at a graceful stop says after it (`SHUTDOWN_REASON`).
const SHUTDOWN_REASON: &str = "the node shut down while this task was running";

fn ctx() -> CallContext {
    CallContext::anonymous()
}

/// The `upper` role: `tr a-z A-Z` on the message text.
fn upper_role() -> String {
    command_role("upper", "sh -c 'tr a-z A-Z'")
}

/// Runs `future` for at most [`WAIT`].
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, future)
        .await
        .with_context(|| format!("{what}: no answer within {WAIT:?}"))
}

async fn send(agent: &dyn AgentTransport, message: Message) -> anyhow::Result<SendMessageResponse> {
    Ok(bounded(
        "SendMessage",
        agent.send_message(&ctx(), SendMessageRequest::new(message)),
    )
    .await??)
}

/// Sends `message` and expects a task back.
async fn send_message(agent: &dyn AgentTransport, message: Message) -> anyhow::Result<Task> {
    match send(agent, message).await? {
        SendMessageResponse::Task(task) => Ok(task),
        SendMessageResponse::Message(m) => bail!("expected a task, got the message {m:?}"),
    }
}

async fn send_text(agent: &dyn AgentTransport, text: &str) -> anyhow::Result<Task> {
    send_message(agent, Message::user_text(text)).await
}

/// Sends `text` with `returnImmediately` and returns the task as it is then.
async fn start(agent: &dyn AgentTransport, text: &str) -> anyhow::Result<Task> {
    let request = SendMessageRequest {
        configuration: Some(SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text(text))
    };
    match bounded("SendMessage", agent.send_message(&ctx(), request)).await?? {
        SendMessageResponse::Task(task) => Ok(task),
        other => bail!("expected a task, got {other:?}"),
    }
}

/// A user message that answers (or continues) `task`.
fn reply_to(task: &Task, text: &str) -> Message {
    let mut message = Message::user_text(text);
    message.task_id = Some(task.id.clone());
    message.context_id = Some(task.context_id.clone());
    message
}

async fn get(agent: &dyn AgentTransport, id: &TaskId) -> anyhow::Result<Task> {
    let request = GetTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    Ok(bounded("GetTask", agent.get_task(&ctx(), request)).await??)
}

async fn cancel(agent: &dyn AgentTransport, id: &TaskId) -> anyhow::Result<Task> {
    let request = CancelTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    Ok(bounded("CancelTask", agent.cancel_task(&ctx(), request)).await??)
}

/// Polls GetTask until the task is in `state`.
async fn wait_for_state(
    agent: &dyn AgentTransport,
    id: &TaskId,
    state: TaskState,
) -> anyhow::Result<Task> {
    poll_until(&format!("task {id} is {state}"), WAIT, || async {
        let task = get(agent, id).await?;
        Ok((task.status.state == state).then_some(task))
    })
    .await
}

async fn collect(stream: EventStream) -> anyhow::Result<Vec<StreamResponse>> {
    bounded("the stream's end", stream.collect::<Vec<_>>())
        .await?
        .into_iter()
        .map(|item| item.map_err(anyhow::Error::from))
        .collect()
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

fn artifact_text(task: &Task) -> String {
    task.artifacts
        .iter()
        .map(|a| join_text(&a.parts))
        .collect::<Vec<_>>()
        .join("")
}

fn history_texts(task: &Task) -> Vec<String> {
    task.history.iter().map(Message::text).collect()
}

fn ids(tasks: &[Task]) -> Vec<TaskId> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

/// Every page of ListTasks with `page_size`: the page lengths and the ids in order; checks
/// `totalSize` on each page.
async fn list_all(
    agent: &dyn AgentTransport,
    page_size: i32,
    total: i32,
) -> anyhow::Result<(Vec<usize>, Vec<TaskId>)> {
    let mut pages = Vec::new();
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let request = ListTasksRequest {
            page_size: Some(page_size),
            page_token: token,
            ..Default::default()
        };
        let page = bounded("ListTasks", agent.list_tasks(&ctx(), request)).await??;
        ensure!(
            page.total_size == total,
            "totalSize {} != {total}",
            page.total_size
        );
        ensure!(page.page_size == page_size, "pageSize {}", page.page_size);
        ensure!(
            page.tasks.iter().all(|t| t.artifacts.is_empty()),
            "artifacts listed without includeArtifacts"
        );
        pages.push(page.tasks.len());
        seen.extend(ids(&page.tasks));
        if page.next_page_token.is_empty() {
            return Ok((pages, seen));
        }
        ensure!(pages.len() <= 10, "the pages do not end: {pages:?}");
        token = page.next_page_token;
    }
}

/// True once `pid` has exited (gone, or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// The `sleeper` role: a script that starts a background `sleep 1000`, writes its pid to
/// `pid_file`, and waits. Written into `node`'s directory, not started.
fn add_sleeper(node: &MewNode, pid_file: &Path) -> anyhow::Result<()> {
    let script = node.dir().join("sleeper.sh");
    std::fs::write(
        &script,
        "sleep 1000 &\necho $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\nwait\n",
    )?;
    let sleeper = command_role(
        "sleeper",
        &format!("sh '{}' '{}'", script.display(), pid_file.display()),
    );
    node.write_role("sleeper.md", &sleeper)
}

/// Waits until the sleeper role has written its grandchild's pid, and checks that it runs.
async fn sleeper_pid(pid_file: &Path) -> anyhow::Result<u32> {
    let pid: u32 = poll_until("the role wrote its grandchild's pid", WAIT, || async {
        Ok(std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok()))
    })
    .await?;
    // The shell knows `$!` as soon as it has forked: the child may not run `sleep` yet.
    poll_until(
        &format!("pid {pid} runs the background sleep"),
        WAIT,
        || async {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            Ok(cmdline.starts_with(b"sleep\0").then_some(()))
        },
    )
    .await?;
    Ok(pid)
}

/// Polls until `pid` has exited, for at most 10 s.
async fn wait_until_gone(pid: u32) -> anyhow::Result<()> {
    poll_until(
        &format!("process {pid} is gone"),
        Duration::from_secs(10),
        || async { Ok(process_gone(pid).then_some(())) },
    )
    .await
}

/// JSON-RPC `GetTask` of an unknown task, POSTed to `url`: the JSON-RPC error code it gets.
async fn jsonrpc_error_code(url: &str) -> anyhow::Result<serde_json::Value> {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}});
    let response = reqwest::Client::new()
        .post(url)
        .header("A2A-Version", "1.0")
        .json(&body)
        .timeout(WAIT)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let answer: serde_json::Value = response
        .json()
        .await
        .with_context(|| format!("POST {url}"))?;
    Ok(answer["error"]["code"].clone())
}

// ---- discovery ----

#[tokio::test]
async fn discovery_front_card_role_cards_and_health() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start_echo("", &[("upper.md", &upper)]).await?;
    let roles = ["Explore", "Plan", "echo", "general-purpose", "upper"];

    for binding in BINDINGS {
        let front = node.agent("", binding).await?;
        let card = front.agent_card();
        ensure!(card.name == "mew", "front card name {:?}", card.name);
        let skills: Vec<&str> = card.skills.iter().map(|s| s.id.as_str()).collect();
        ensure!(skills == roles, "front skills {skills:?}");
        ensure!(
            card.supported_interfaces
                .iter()
                .all(|i| i.url == node.url() && i.protocol_version == "1.0" && i.tenant.is_empty()),
            "front interfaces {:?}",
            card.supported_interfaces
        );
        ensure!(
            card.description.contains("run the role echo"),
            "the front card does not name the default role: {:?}",
            card.description
        );

        // Every card declares the Mew extension its tasks' metadata follows, not required.
        let declares_mew = |card: &mew_cards::AgentCard| {
            card.capabilities
                .extensions
                .iter()
                .any(|e| e.uri == mew_cards::mew::EXTENSION_URI && !e.required)
        };
        ensure!(
            declares_mew(card),
            "the front card does not declare the Mew extension: {:?}",
            card.capabilities
        );

        let role = node.agent("/agents/upper", binding).await?;
        let card = role.agent_card();
        ensure!(card.name == "upper", "role card name {:?}", card.name);
        ensure!(
            declares_mew(card),
            "the role card does not declare the Mew extension: {:?}",
            card.capabilities
        );
        ensure!(
            card.skills.len() == 1 && card.skills[0].id == "upper",
            "role skills {:?}",
            card.skills
        );
        // The HTTP bindings under the role's URL; gRPC at the node's, the role as tenant.
        ensure!(
            card.supported_interfaces
                .iter()
                .all(|i| match i.protocol_binding.as_str() {
                    mew_cards::binding::GRPC => i.url == node.url() && i.tenant == "upper",
                    _ => i.url == node.role_url("upper") && i.tenant.is_empty(),
                }),
            "role interfaces {:?}",
            card.supported_interfaces
        );
        ensure!(
            card.supported_interfaces.len() == 3,
            "role interfaces {:?}",
            card.supported_interfaces
        );
    }

    // The Python SDK resolves the same cards, and runs a role through its own client.
    let out = run_driver(node.url(), "jsonrpc", &["card"]).await?;
    ensure!(
        out.code == 0,
        "the SDK failed ({}): {}",
        out.code,
        out.stderr
    );
    ensure!(
        out.lines[0]["name"] == "mew",
        "SDK front card {}",
        out.lines[0]
    );
    ensure!(
        out.lines[0]["skills"].as_array().map(Vec::len) == Some(roles.len()),
        "SDK front card skills {}",
        out.lines[0]["skills"]
    );
    let out = run_driver(&node.role_url("echo"), "rest", &["card"]).await?;
    ensure!(
        out.code == 0,
        "the SDK failed ({}): {}",
        out.code,
        out.stderr
    );
    ensure!(
        out.lines[0]["name"] == "echo",
        "SDK role card {}",
        out.lines[0]
    );
    let out = run_driver(&node.role_url("upper"), "jsonrpc", &["send", "hello sdk"]).await?;
    ensure!(
        out.code == 0,
        "the SDK failed ({}): {}",
        out.code,
        out.stderr
    );
    let task = &out.lines[0]["task"];
    ensure!(
        task["status"]["state"] == "TASK_STATE_COMPLETED",
        "SDK send answered {}",
        out.lines[0]
    );
    ensure!(
        task["artifacts"][0]["parts"][0]["text"] == "HELLO SDK",
        "SDK send artifacts {}",
        task["artifacts"]
    );

    let (status, agents) = node.get_json("/agents").await?;
    ensure!(status == 200, "GET /agents: {status}");
    let cards = agents["agents"].as_array().context("no agents array")?;
    let names: Vec<&str> = cards.iter().filter_map(|c| c["name"].as_str()).collect();
    ensure!(names == roles, "GET /agents lists {names:?}");
    for card in cards {
        let name = card["name"].as_str().unwrap_or_default();
        ensure!(
            card["supportedInterfaces"][0]["url"] == json!(node.role_url(name)),
            "the card of {name} points elsewhere: {}",
            card["supportedInterfaces"]
        );
    }

    let (status, health) = node.get_json("/healthz").await?;
    ensure!(
        status == 200 && health == json!({"status": "ok"}),
        "/healthz: {status} {health}"
    );
    let (status, ready) = node.get_json("/readyz").await?;
    ensure!(
        status == 200 && ready == json!({"status": "ready"}),
        "/readyz: {status} {ready}"
    );
    Ok(())
}

/// A role's interfaces live under `/agents/R/` (DESIGN.md; examples/wrap-cli/README.md posts
/// JSON-RPC to `http://127.0.0.1:7777/agents/wc/`): the JSON-RPC endpoint answers with and
/// without the trailing slash, as the front agent's does.
#[tokio::test]
async fn jsonrpc_endpoints_answer_with_and_without_a_trailing_slash() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start(&[("upper.md", &upper)]).await?;
    let role = node.role_url("upper");
    for url in [
        node.url().to_owned(),
        format!("{}/", node.url()),
        role.clone(),
        format!("{role}/"),
    ] {
        let code = jsonrpc_error_code(&url).await?;
        ensure!(
            code == json!(-32001),
            "POST {url}: error code {code}, not TaskNotFound"
        );
    }
    Ok(())
}

// ---- running roles ----

#[tokio::test]
async fn command_role_completes_blocking_and_streaming_on_every_binding() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start(&[("upper.md", &upper)]).await?;
    for binding in BINDINGS {
        let agent = node.agent("/agents/upper", binding).await?;

        let task = send_text(&agent, "hello mew").await?;
        ensure!(
            task.status.state == TaskState::Completed,
            "{binding:?}: {task:?}"
        );
        ensure!(
            task.artifacts.len() == 1 && task.artifacts[0].name == "output",
            "{binding:?}: artifacts {:?}",
            task.artifacts
        );
        ensure!(artifact_text(&task) == "HELLO MEW", "{binding:?}: {task:?}");
        ensure!(
            history_texts(&task) == ["hello mew"],
            "{binding:?}: {task:?}"
        );
        let stored = get(&agent, &task.id).await?;
        ensure!(
            stored == task,
            "{binding:?}: GetTask differs: {stored:?} vs {task:?}"
        );

        let stream = bounded(
            "SendStreamingMessage",
            agent.send_streaming_message(
                &ctx(),
                SendMessageRequest::new(Message::user_text("stream me")),
            ),
        )
        .await??;
        let items = collect(stream).await?;
        let [
            StreamResponse::Task(first),
            StreamResponse::StatusUpdate(working),
            StreamResponse::ArtifactUpdate(output),
            StreamResponse::StatusUpdate(done),
        ] = items.as_slice()
        else {
            bail!("{binding:?}: the stream was {items:?}");
        };
        ensure!(
            first.status.state == TaskState::Submitted,
            "{binding:?}: {first:?}"
        );
        ensure!(
            working.status.state == TaskState::Working,
            "{binding:?}: {working:?}"
        );
        ensure!(
            output.artifact.name == "output"
                && join_text(&output.artifact.parts) == "STREAM ME"
                && !output.append
                && output.last_chunk,
            "{binding:?}: {output:?}"
        );
        ensure!(
            done.status.state == TaskState::Completed,
            "{binding:?}: {done:?}"
        );
        ensure!(
            [&working.task_id, &output.task_id, &done.task_id]
                .iter()
                .all(|id| **id == first.id),
            "{binding:?}: events of another task"
        );
        let stored = get(&agent, &first.id).await?;
        ensure!(
            stored.status.state == TaskState::Completed && artifact_text(&stored) == "STREAM ME",
            "{binding:?}: stored {stored:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn input_required_and_back_over_http() -> anyhow::Result<()> {
    let node = MewNode::start_echo("", &[]).await?;
    let agent = node.agent("/agents/echo", Binding::HttpJson).await?;
    // The program asks, then takes a second more to exit: the question is out, and the
    // caller may answer it at once.
    let asked = send_text(&agent, "ask 1").await?;
    ensure!(asked.status.state == TaskState::InputRequired, "{asked:?}");
    let question = asked.status.message.as_ref().context("no question")?;
    ensure!(
        question.text() == "need input" && question.role == Role::Agent,
        "question {question:?}"
    );
    ensure!(
        question.task_id.as_ref() == Some(&asked.id),
        "the question names another task: {question:?}"
    );

    // A client may answer as soon as it is asked.
    let done = send_message(&agent, reply_to(&asked, "blue")).await?;
    ensure!(done.id == asked.id, "the reply started another task");
    ensure!(done.status.state == TaskState::Completed, "{done:?}");
    ensure!(artifact_text(&done) == "got blue", "{done:?}");
    ensure!(
        history_texts(&done) == ["ask 1", "need input", "blue"],
        "history {:?}",
        history_texts(&done)
    );
    Ok(())
}

#[tokio::test]
async fn cancel_kills_the_role_process_group() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let pid_file = node.dir().join("grandchild.pid");
    add_sleeper(&node, &pid_file)?;
    node.launch().await?;
    let agent = node.agent("/agents/sleeper", Binding::JsonRpc).await?;

    let task = start(&agent, "go").await?;
    let pid = sleeper_pid(&pid_file).await?;
    ensure!(
        !process_gone(pid),
        "the grandchild is gone before the cancel"
    );

    let canceled = cancel(&agent, &task.id).await?;
    ensure!(canceled.status.state == TaskState::Canceled, "{canceled:?}");
    wait_until_gone(pid).await?;
    let stored = get(&agent, &task.id).await?;
    ensure!(stored.status.state == TaskState::Canceled, "{stored:?}");
    Ok(())
}

// ---- durability ----

#[tokio::test]
async fn crash_marks_running_tasks_failed_and_keeps_the_rest() -> anyhow::Result<()> {
    crash_keeps_finished_tasks(MewNode::new_echo("")?).await
}

#[tokio::test]
async fn crash_marks_running_tasks_failed_and_keeps_the_rest_on_postgres() -> anyhow::Result<()> {
    let mut node = MewNode::new_echo("")?;
    node.set_env("MEW_STORE_URL", &mew_tests::postgres::database().await?);
    crash_keeps_finished_tasks(node).await?;
    Ok(())
}

#[tokio::test]
async fn every_acknowledged_task_survives_a_kill_under_load() -> anyhow::Result<()> {
    let mut node = MewNode::new_echo("")?;
    node.launch().await?;
    // Workers send at once, blocking (a finished task) or not (a task just stored), and keep
    // what the node acknowledged, until the node is killed under them.
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(bool, Task)>::new()));
    let mut workers = Vec::new();
    for worker in 0..6 {
        let agent = node.agent("", Binding::JsonRpc).await?;
        let acked = acked.clone();
        workers.push(tokio::spawn(async move {
            for n in 0.. {
                let blocking = (worker + n) % 2 == 0;
                let text = format!("echo {worker}-{n}");
                let request = SendMessageRequest {
                    configuration: Some(SendMessageConfiguration {
                        return_immediately: !blocking,
                        ..Default::default()
                    }),
                    ..SendMessageRequest::new(Message::user_text(&text))
                };
                match agent.send_message(&ctx(), request).await {
                    Ok(SendMessageResponse::Task(task)) => acked
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((blocking, task)),
                    Ok(_) | Err(_) => return,
                }
            }
        }));
    }
    let count = || {
        acked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    };
    poll_until("sends acknowledged", WAIT, || async {
        Ok((count() >= 40).then_some(()))
    })
    .await?;
    node.kill_hard().await?;
    for worker in workers {
        worker.await?;
    }
    let acked = std::mem::take(
        &mut *acked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    node.restart().await?;
    let agent = node.agent("", Binding::HttpJson).await?;
    for (blocking, before) in &acked {
        let after = get(&agent, &before.id).await?;
        if *blocking {
            ensure!(
                after == *before,
                "a finished task changed across the kill: {after:?} vs {before:?}"
            );
        } else {
            // Run, failed by the restart, or still to run: its message is there.
            ensure!(
                after.history.first() == before.history.first() && after.history.len() <= 2,
                "an acknowledged task lost its message: {after:?} vs {before:?}"
            );
        }
    }
    Ok(())
}

/// Runs tasks on `node` (not launched yet), kills it mid-task, restarts it: the finished
/// tasks are as they were, the running one FAILED with the reason.
async fn crash_keeps_finished_tasks(mut node: MewNode) -> anyhow::Result<()> {
    node.launch().await?;
    let agent = node.agent("", Binding::JsonRpc).await?;
    let one = send_text(&agent, "echo one").await?;
    let two = send_text(&agent, "echo two").await?;
    let streamed = send_text(&agent, "stream 2").await?;
    let running = start(&agent, "wait").await?;
    wait_for_state(&agent, &running.id, TaskState::Working).await?;

    node.kill_hard().await?;
    node.restart().await?;
    let agent = node.agent("", Binding::HttpJson).await?;

    let request = ListTasksRequest {
        include_artifacts: Some(true),
        ..Default::default()
    };
    let listed = bounded("ListTasks", agent.list_tasks(&ctx(), request)).await??;
    ensure!(listed.total_size == 4, "after the restart: {listed:?}");
    ensure!(
        ids(&listed.tasks)
            == [
                running.id.clone(),
                streamed.id.clone(),
                two.id.clone(),
                one.id.clone()
            ],
        "listed {:?}",
        ids(&listed.tasks)
    );
    for (before, text, output) in [
        (&one, "echo one", "one"),
        (&two, "echo two", "two"),
        (&streamed, "stream 2", "chunk 1\nchunk 2"),
    ] {
        let after = get(&agent, &before.id).await?;
        ensure!(after.status.state == TaskState::Completed, "{after:?}");
        ensure!(
            artifact_text(&after) == output,
            "{text}: artifacts {:?}",
            after.artifacts
        );
        ensure!(
            history_texts(&after) == [text],
            "{text}: history {:?}",
            after.history
        );
        ensure!(
            after == *before,
            "{text} changed across the restart: {after:?} vs {before:?}"
        );
    }
    let failed = get(&agent, &running.id).await?;
    ensure!(failed.status.state == TaskState::Failed, "{failed:?}");
    ensure!(
        status_text(&failed) == RESTART_REASON,
        "reason {:?}",
        status_text(&failed)
    );
    ensure!(
        failed.status.message.as_ref().map(|m| m.role) == Some(Role::Agent),
        "the reason is not the agent's: {:?}",
        failed.status.message
    );
    expect_kind(
        agent
            .cancel_task(
                &ctx(),
                CancelTaskRequest {
                    id: running.id.clone(),
                    ..Default::default()
                },
            )
            .await,
        ErrorKind::TaskNotCancelable,
    )?;

    let after = send_text(&agent, "echo still here").await?;
    ensure!(artifact_text(&after) == "still here", "{after:?}");
    Ok(())
}

#[tokio::test]
async fn input_required_task_continues_after_a_crash() -> anyhow::Result<()> {
    let mut node = MewNode::start_echo("", &[]).await?;
    let agent = node.agent("/agents/echo", Binding::HttpJson).await?;
    let asked = send_text(&agent, "ask").await?;
    ensure!(asked.status.state == TaskState::InputRequired, "{asked:?}");
    let dropped = send_text(&agent, "ask").await?;
    ensure!(
        dropped.status.state == TaskState::InputRequired,
        "{dropped:?}"
    );

    node.kill_hard().await?;
    node.restart().await?;
    let agent = node.agent("/agents/echo", Binding::JsonRpc).await?;

    let waiting = get(&agent, &asked.id).await?;
    ensure!(
        waiting == asked,
        "changed across the restart: {waiting:?} vs {asked:?}"
    );
    // Watching a task that waits for input: its snapshot first; the stream stays open
    // until the task ends.
    let mut watched = bounded(
        "SubscribeToTask",
        agent.subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: asked.id.clone(),
                ..Default::default()
            },
        ),
    )
    .await??;
    let first = bounded("the snapshot", watched.next()).await?;
    ensure!(
        matches!(&first, Some(Ok(StreamResponse::Task(t))) if *t == asked),
        "subscribing to a task waiting for input gave {first:?}"
    );
    // The other question is withdrawn: canceled, it takes no answer.
    let canceled = cancel(&agent, &dropped.id).await?;
    ensure!(canceled.status.state == TaskState::Canceled, "{canceled:?}");
    expect_kind(
        agent
            .send_message(
                &ctx(),
                SendMessageRequest::new(reply_to(&dropped, "too late")),
            )
            .await,
        ErrorKind::UnsupportedOperation,
    )?;

    let done = send_message(&agent, reply_to(&asked, "later")).await?;
    ensure!(
        done.id == asked.id && done.status.state == TaskState::Completed,
        "{done:?}"
    );
    ensure!(artifact_text(&done) == "got later", "{done:?}");
    ensure!(
        history_texts(&done) == ["ask", "need input", "later"],
        "history {:?}",
        history_texts(&done)
    );
    // The subscription saw the answer through to the end.
    let rest = collect(watched).await?;
    let last = rest.iter().rev().find_map(|item| match item {
        StreamResponse::StatusUpdate(u) => Some(u.status.state),
        StreamResponse::Task(t) => Some(t.status.state),
        _ => None,
    });
    ensure!(
        last == Some(TaskState::Completed),
        "the subscription ended with {last:?}: {rest:?}"
    );
    Ok(())
}

// ---- conversations ----

#[tokio::test]
async fn new_task_in_a_finished_context_sees_the_conversation() -> anyhow::Result<()> {
    let node = MewNode::start_echo("", &[]).await?;
    let agent = node.agent("", Binding::JsonRpc).await?;
    let first = send_text(&agent, "echo first").await?;
    let context = first.context_id.clone();

    let mut second = Message::user_text("message second");
    second.context_id = Some(context.clone());
    let answer = match send(&agent, second).await? {
        SendMessageResponse::Message(m) => m,
        other => bail!("expected a direct message, got {other:?}"),
    };
    ensure!(answer.text() == "second", "{answer:?}");
    ensure!(answer.context_id.as_ref() == Some(&context), "{answer:?}");
    let second_id = answer.task_id.clone().context("the answer names no task")?;

    let mut third = Message::user_text("history");
    third.context_id = Some(context.clone());
    let third = send_message(&agent, third).await?;
    ensure!(third.status.state == TaskState::Completed, "{third:?}");
    ensure!(
        third.id != first.id && third.id != second_id,
        "the message continued a finished task"
    );
    ensure!(third.context_id == context, "a new context: {third:?}");
    let artifact = third.artifacts.first().context("no artifact")?;
    ensure!(join_text(&artifact.parts) == "history 3", "{artifact:?}");
    let seen = serde_json::to_value(&artifact.parts)?;
    ensure!(
        seen[1]["data"]["messages"]
            == json!([
                {"role": "ROLE_USER", "text": "echo first"},
                {"role": "ROLE_USER", "text": "message second"},
                {"role": "ROLE_AGENT", "text": "second"},
            ]),
        "the program saw {}",
        seen[1]
    );

    let request = ListTasksRequest {
        context_id: context.clone(),
        ..Default::default()
    };
    let listed = bounded("ListTasks", agent.list_tasks(&ctx(), request)).await??;
    ensure!(
        ids(&listed.tasks) == [third.id.clone(), second_id, first.id.clone()],
        "the context holds {:?}",
        ids(&listed.tasks)
    );
    let other = ListTasksRequest {
        context_id: ContextId::generate(),
        ..Default::default()
    };
    let listed = bounded("ListTasks", agent.list_tasks(&ctx(), other)).await??;
    ensure!(
        listed.tasks.is_empty() && listed.total_size == 0,
        "{listed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn message_to_a_terminal_task_is_unsupported() -> anyhow::Result<()> {
    let node = MewNode::start_echo("", &[]).await?;
    for binding in BINDINGS {
        let agent = node.agent("/agents/echo", binding).await?;
        let completed = send_text(&agent, "echo done").await?;
        let failed = send_text(&agent, "fail").await?;
        ensure!(failed.status.state == TaskState::Failed, "{failed:?}");
        ensure!(
            status_text(&failed).contains("failed on purpose"),
            "the stderr tail is not the reason: {:?}",
            status_text(&failed)
        );
        let waiting = start(&agent, "wait").await?;
        let canceled = cancel(&agent, &waiting.id).await?;
        for task in [completed, failed, canceled] {
            let outcome = agent
                .send_message(
                    &ctx(),
                    SendMessageRequest::new(reply_to(&task, "echo more")),
                )
                .await;
            expect_kind(outcome, ErrorKind::UnsupportedOperation)
                .with_context(|| format!("{binding:?}, a {} task", task.status.state))?;
            let after = get(&agent, &task.id).await?;
            ensure!(
                after.status.state == task.status.state
                    && after.history.len() == task.history.len(),
                "{binding:?}: the refused message changed the task: {after:?}"
            );
        }
    }
    Ok(())
}

// ---- listing ----

#[tokio::test]
async fn list_tasks_pages_on_the_front_and_a_role_agent() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start_echo("", &[("upper.md", &upper)]).await?;
    let front = node.agent("", Binding::JsonRpc).await?;
    let echo = node.agent("/agents/echo", Binding::HttpJson).await?;
    let upper = node.agent("/agents/upper", Binding::JsonRpc).await?;

    let mut echo_ids = Vec::new();
    for i in 0..7 {
        echo_ids.push(send_text(&echo, &format!("echo {i}")).await?.id);
    }
    let mut upper_ids = Vec::new();
    for i in 0..2 {
        upper_ids.push(send_text(&upper, &format!("up {i}")).await?.id);
    }
    echo_ids.reverse();
    upper_ids.reverse();

    let (pages, seen) = list_all(&echo, 3, 7).await?;
    ensure!(pages == [3, 3, 1], "role agent pages {pages:?}");
    ensure!(
        seen == echo_ids,
        "role agent order {seen:?} vs {echo_ids:?}"
    );

    let (pages, seen) = list_all(&front, 3, 9).await?;
    ensure!(pages == [3, 3, 3], "front pages {pages:?}");
    let all: Vec<TaskId> = upper_ids.iter().chain(&echo_ids).cloned().collect();
    ensure!(seen == all, "front order {seen:?} vs {all:?}");

    let (pages, seen) = list_all(&upper, 3, 2).await?;
    ensure!(pages == [2] && seen == upper_ids, "upper lists {seen:?}");

    // A role agent does not see the other roles' tasks at all.
    let outcome = echo
        .get_task(
            &ctx(),
            GetTaskRequest {
                id: upper_ids[0].clone(),
                ..Default::default()
            },
        )
        .await;
    expect_kind(outcome, ErrorKind::TaskNotFound)?;
    ensure!(
        get(&front, &upper_ids[0]).await?.id == upper_ids[0],
        "the front sees every task"
    );
    Ok(())
}

// ---- limits ----

#[tokio::test]
async fn max_running_tasks_keeps_the_next_task_submitted() -> anyhow::Result<()> {
    let node = MewNode::start_echo("limits:\n  max_running_tasks: 1\n", &[]).await?;
    let agent = node.agent("", Binding::HttpJson).await?;
    let first = start(&agent, "wait").await?;
    wait_for_state(&agent, &first.id, TaskState::Working).await?;

    let second = start(&agent, "wait").await?;
    ensure!(second.status.state == TaskState::Submitted, "{second:?}");
    let mut events = bounded(
        "SubscribeToTask",
        agent.subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: second.id.clone(),
                ..Default::default()
            },
        ),
    )
    .await??;
    match bounded("the first event", events.next()).await? {
        Some(Ok(StreamResponse::Task(snapshot))) => ensure!(
            snapshot.status.state == TaskState::Submitted,
            "the second task runs beside the first: {snapshot:?}"
        ),
        other => bail!("the subscription started with {other:?}"),
    }
    let queued = get(&agent, &second.id).await?;
    ensure!(queued.status.state == TaskState::Submitted, "{queued:?}");

    let canceled = cancel(&agent, &first.id).await?;
    let canceled_at = canceled.status.timestamp.context("no cancel time")?;
    let working = loop {
        match bounded("the second task's next event", events.next()).await? {
            Some(Ok(StreamResponse::StatusUpdate(update))) => {
                ensure!(
                    update.status.state == TaskState::Working,
                    "the second task went {:?}",
                    update.status.state
                );
                break update;
            }
            Some(Ok(_)) => {}
            other => bail!("the subscription ended with {other:?}"),
        }
    };
    let started_at = working.status.timestamp.context("no start time")?;
    ensure!(
        started_at >= canceled_at,
        "the second task started ({started_at:?}) before the first ended ({canceled_at:?})"
    );
    ensure!(cancel(&agent, &second.id).await?.status.state == TaskState::Canceled);
    let after = send_text(&agent, "echo free again").await?;
    ensure!(artifact_text(&after) == "free again", "{after:?}");
    Ok(())
}

/// What a status update's task says under `mew.waiting`: the limit it waits for.
fn waits_for(task: &Task) -> Option<String> {
    let note = mew_cards::mew::MewMetadata::read(task.status.message.as_ref()?.metadata.as_ref());
    note.waiting.map(|w| w.limit)
}

#[tokio::test]
async fn one_roles_long_tasks_leave_room_for_the_other_roles() -> anyhow::Result<()> {
    // Role slow may run 2 tasks at once, on a node of 3.
    let slow =
        echo_role("slow")?.replacen("input: message\n", "input: message\nmaxRunning: 2\n", 1);
    let quick = echo_role("quick")?;
    let node = MewNode::start_with_config(
        "limits:\n  max_running_tasks: 3\n  queue_notice: 1s\n",
        &[("slow.md", &slow), ("quick.md", &quick)],
    )
    .await?;
    let slow = node.agent("/agents/slow", Binding::JsonRpc).await?;
    let quick = node.agent("/agents/quick", Binding::HttpJson).await?;
    let mut long = Vec::new();
    for _ in 0..5 {
        long.push(start(&slow, "wait").await?);
    }
    for task in &long[..2] {
        wait_for_state(&slow, &task.id, TaskState::Working).await?;
    }
    // Slow's backlog leaves the node's third slot to the other role.
    let answered = send_text(&quick, "echo still served").await?;
    ensure!(
        answered.status.state == TaskState::Completed && artifact_text(&answered) == "still served",
        "{answered:?}"
    );
    // A blocking send to the full role returns once its task says why it waits.
    let waiting = send_text(&slow, "echo later").await?;
    ensure!(
        waiting.status.state == TaskState::Submitted
            && waits_for(&waiting).as_deref() == Some("role")
            && status_text(&waiting).contains("role slow runs 2 of its 2 tasks at once"),
        "{waiting:?}"
    );
    let queued = poll_until("the first queued task says why it waits", WAIT, || async {
        let task = get(&slow, &long[2].id).await?;
        Ok(waits_for(&task).is_some().then_some(task))
    })
    .await?;
    ensure!(queued.status.state == TaskState::Submitted, "{queued:?}");

    // With the node full, a blocking send to the other role says so.
    let holder = start(&quick, "wait").await?;
    wait_for_state(&quick, &holder.id, TaskState::Working).await?;
    let blocked = send_text(&quick, "echo after the holder").await?;
    ensure!(
        blocked.status.state == TaskState::Submitted
            && waits_for(&blocked).as_deref() == Some("node")
            && status_text(&blocked).contains("the node runs 3 of its 3 tasks at once"),
        "{blocked:?}"
    );
    // The holder's slot goes to quick's waiting task, not to slow's older backlog (slow is
    // at its own limit).
    cancel(&quick, &holder.id).await?;
    let done = wait_for_state(&quick, &blocked.id, TaskState::Completed).await?;
    ensure!(artifact_text(&done) == "after the holder", "{done:?}");
    // A slot of slow's goes to its first queued task.
    cancel(&slow, &long[0].id).await?;
    wait_for_state(&slow, &long[2].id, TaskState::Working).await?;
    ensure!(get(&slow, &long[3].id).await?.status.state == TaskState::Submitted);
    for task in long.iter().skip(1).chain([&waiting]) {
        cancel(&slow, &task.id).await?;
    }
    Ok(())
}

// ---- roles that cannot run ----

#[tokio::test]
async fn broken_role_files_are_reported_and_skipped() -> anyhow::Result<()> {
    let good = command_role("good", "sh -c 'echo fine'");
    let twin_a = command_role("twin", "sh -c 'echo a'");
    let twin_b = command_role("twin", "sh -c 'echo b'");
    let node = MewNode::start(&[
        ("broken.md", "---\nname: [broken\n---\nbody\n"),
        ("dup-a.md", &twin_a),
        ("dup-b.md", &twin_b),
        (
            "bad-name.md",
            "---\nname: 9 lives\ndescription: a bad name\ncommand: cat\n---\n",
        ),
        ("good.md", &good),
    ])
    .await?;

    let (_, agents) = node.get_json("/agents").await?;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .context("no agents")?
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    ensure!(
        names == ["Explore", "Plan", "general-purpose", "good", "twin"],
        "served {names:?}"
    );
    let good = node.agent("/agents/good", Binding::JsonRpc).await?;
    ensure!(artifact_text(&send_text(&good, "x").await?) == "fine");
    let twin = node.agent("/agents/twin", Binding::HttpJson).await?;
    ensure!(
        artifact_text(&send_text(&twin, "x").await?) == "a",
        "the first file of the directory should win"
    );

    let path = |file: &str| node.roles_dir().join(file).display().to_string();
    let (status, report) = node.get_json("/status").await?;
    ensure!(status == 200, "/status: {status}");
    let problems = report["problems"].as_array().context("no problems")?;
    let paths: Vec<&str> = problems.iter().filter_map(|p| p["path"].as_str()).collect();
    ensure!(
        paths == [path("bad-name.md"), path("broken.md"), path("dup-b.md")],
        "problems {report}"
    );
    ensure!(
        problems.iter().all(|p| p["severity"] == "error"),
        "problems {report}"
    );
    let message = |i: usize| problems[i]["message"].as_str().unwrap_or_default();
    ensure!(
        message(0).contains("\"9 lives\" is invalid"),
        "{}",
        message(0)
    );
    ensure!(message(1).contains("YAML"), "{}", message(1));
    ensure!(
        message(2).contains("already defined by") && message(2).contains(&path("dup-a.md")),
        "{}",
        message(2)
    );

    let output = node.output();
    for file in ["bad-name.md", "broken.md", "dup-b.md"] {
        ensure!(
            output.contains(&path(file)),
            "the node never mentions {file}:\n{output}"
        );
    }
    ensure!(
        output.contains("3 problems"),
        "no count of problems:\n{output}"
    );
    Ok(())
}

/// A FIFO at `path`, made without a shell.
fn mkfifo(path: &Path) -> anyhow::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .with_context(|| format!("mkfifo {}", path.display()))
}

#[tokio::test]
async fn hostile_files_are_reported_not_waited_on() -> anyhow::Result<()> {
    // Flow collections 200,000 deep: libyaml alone would take about a minute on these.
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let good = command_role("good", "sh -c 'echo fine'");
    let mut node = MewNode::new()?;
    node.write_role("good.md", &good)?;
    node.write_role(
        "deep.md",
        &format!(
            "---
name: deep
description: d
tools: {deep}
---
body
"
        ),
    )?;
    mkfifo(&node.roles_dir().join("pipe.md"))?;
    let skills = node.project_dir().join(".mew/skills");
    std::fs::create_dir_all(skills.join("deep"))?;
    std::fs::write(
        skills.join("deep/SKILL.md"),
        format!(
            "---
name: deep
description: {deep}
---
body
"
        ),
    )?;
    std::fs::create_dir_all(skills.join("piped"))?;
    mkfifo(&skills.join("piped/SKILL.md"))?;
    let hooks = node.home_dir().join(".mew/hooks.yaml");
    std::fs::create_dir_all(node.home_dir().join(".mew"))?;
    std::fs::write(
        &hooks,
        format!(
            "hooks: {deep}
"
        ),
    )?;
    std::fs::write(
        node.project_dir().join(".mcp.json"),
        format!("{{\"mcpServers\": {deep}}}"),
    )?;
    node.launch().await?;

    let agent = node.agent("/agents/good", Binding::JsonRpc).await?;
    ensure!(artifact_text(&send_text(&agent, "x").await?) == "fine");
    let (_, report) = node.get_json("/status").await?;
    let find = |key: &str, path: &Path| -> anyhow::Result<String> {
        let path = path.display().to_string();
        report[key]
            .as_array()
            .and_then(|items| items.iter().find(|p| p["path"] == path.as_str()))
            .and_then(|p| p["message"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("no {key} entry for {path} in {report}"))
    };
    let message = find("problems", &node.roles_dir().join("deep.md"))?;
    ensure!(
        message.contains("nested deeper than 64 levels at line 4"),
        "{message}"
    );
    let message = find("problems", &node.roles_dir().join("pipe.md"))?;
    ensure!(message.contains("FIFO"), "{message}");
    let message = find("skill_problems", &skills.join("deep/SKILL.md"))?;
    ensure!(
        message.contains("nested deeper than 64 levels"),
        "{message}"
    );
    let message = find("skill_problems", &skills.join("piped/SKILL.md"))?;
    ensure!(message.contains("FIFO"), "{message}");
    let message = find("hook_problems", &hooks)?;
    ensure!(
        message.contains("nested deeper than 64 levels"),
        "{message}"
    );
    let output = node.output();
    ensure!(
        output.contains(".mcp.json") && output.contains("nested deeper than 64 levels"),
        "the .mcp.json problem is not reported:\n{output}"
    );

    // A configuration file like that, or one that is a FIFO, stops the node with the reason.
    node.stop().await?;
    let config = node.project_dir().join(".mew/config.yaml");
    std::fs::write(&config, format!("node: {deep}\n"))?;
    let (code, _, stderr) = node.client(&["config", "show"]).await?;
    ensure!(
        code != 0 && stderr.contains("config.yaml") && stderr.contains("deeper than 64 levels"),
        "config show: exit {code}\n{stderr}"
    );
    std::fs::remove_file(&config)?;
    mkfifo(&config)?;
    let (code, _, stderr) = node.client(&["config", "show"]).await?;
    ensure!(
        code != 0 && stderr.contains("config.yaml") && stderr.contains("FIFO"),
        "config show: exit {code}\n{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn model_role_fails_without_a_model_provider() -> anyhow::Result<()> {
    let node = MewNode::start(&[]).await?;
    for (path, binding) in [
        ("", Binding::JsonRpc),
        ("/agents/Explore", Binding::HttpJson),
    ] {
        let agent = node.agent(path, binding).await?;
        let task = send_text(&agent, "summarise the repository").await?;
        ensure!(task.status.state == TaskState::Failed, "{path}: {task:?}");
        let reason = status_text(&task);
        ensure!(
            reason.contains("no model provider"),
            "{path}: the reason is {reason:?}"
        );
        ensure!(
            artifact_text(&task).is_empty(),
            "{path}: an answer was made up: {task:?}"
        );
    }
    Ok(())
}

// ---- shutdown ----

#[tokio::test]
async fn graceful_stop_fails_running_tasks_and_kills_their_processes() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let pid_file = node.dir().join("grandchild.pid");
    add_sleeper(&node, &pid_file)?;
    node.launch().await?;
    let agent = node.agent("/agents/sleeper", Binding::HttpJson).await?;
    let task = start(&agent, "go").await?;
    let pid = sleeper_pid(&pid_file).await?;

    let status = node.stop().await?;
    ensure!(status.success(), "the node exited with {status}");
    wait_until_gone(pid).await?;

    node.launch().await?;
    let agent = node.agent("/agents/sleeper", Binding::JsonRpc).await?;
    let stopped = get(&agent, &task.id).await?;
    ensure!(stopped.status.state == TaskState::Failed, "{stopped:?}");
    ensure!(
        status_text(&stopped) == SHUTDOWN_REASON,
        "reason {:?}",
        status_text(&stopped)
    );
    Ok(())
}

/// A client still watching a running task must not keep the node from stopping, and it sees
/// the task's final state before the stream ends.
#[tokio::test]
async fn graceful_stop_is_not_held_up_by_a_subscriber() -> anyhow::Result<()> {
    let mut node = MewNode::start_echo("", &[]).await?;
    let agent = node.agent("", Binding::HttpJson).await?;
    let task = start(&agent, "wait").await?;
    wait_for_state(&agent, &task.id, TaskState::Working).await?;
    let events = bounded(
        "SubscribeToTask",
        agent.subscribe_to_task(
            &ctx(),
            SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
        ),
    )
    .await??;
    let watcher = tokio::spawn(events.collect::<Vec<_>>());

    let status = node.stop().await?;
    ensure!(status.success(), "the node exited with {status}");
    let seen = bounded("the subscription's end", watcher).await??;
    let last_state = seen.iter().rev().find_map(|item| match item {
        Ok(StreamResponse::StatusUpdate(u)) => Some(u.status.state),
        Ok(StreamResponse::Task(t)) => Some(t.status.state),
        _ => None,
    });
    ensure!(
        last_state == Some(TaskState::Failed),
        "the subscriber saw {seen:?}"
    );
    Ok(())
}

/// A node killed with SIGKILL cannot stop its commands; the process ledger in its data
/// directory lets the next start kill them (with whatever they started in their group).
#[tokio::test]
async fn restart_after_a_crash_kills_the_commands_the_node_left_running() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let pid_file = node.dir().join("grandchild.pid");
    add_sleeper(&node, &pid_file)?;
    node.launch().await?;
    let agent = node.agent("/agents/sleeper", Binding::JsonRpc).await?;
    let task = start(&agent, "go").await?;
    let pid = sleeper_pid(&pid_file).await?;
    let ledger = node.data_dir().join("processes");
    let entries = || -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(&ledger)
            .with_context(|| format!("cannot read {}", ledger.display()))?
            .count())
    };
    ensure!(entries()? == 1, "the ledger does not hold the command");

    node.kill_hard().await?;
    ensure!(
        !process_gone(pid),
        "the grandchild died with the node: this test shows nothing"
    );

    node.launch().await?;
    wait_until_gone(pid).await?;
    ensure!(entries()? == 0, "the ledger still holds entries");
    let agent = node.agent("/agents/sleeper", Binding::HttpJson).await?;
    let failed = get(&agent, &task.id).await?;
    ensure!(failed.status.state == TaskState::Failed, "{failed:?}");
    ensure!(
        status_text(&failed) == RESTART_REASON,
        "reason {:?}",
        status_text(&failed)
    );
    let log = node.log();
    ensure!(
        log.contains("killed a command the previous run of the node left running")
            && log.contains(task.id.as_str()),
        "the node does not say what it killed:\n{log}"
    );
    Ok(())
}

// ---- mew tasks tree ----

#[tokio::test]
async fn tasks_tree_shows_a_task_without_children() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start(&[("upper.md", &upper)]).await?;
    let agent = node.agent("/agents/upper", Binding::JsonRpc).await?;
    let task = send_text(&agent, "plain task").await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    let id = task.id.as_str();

    let (code, out, err) = node
        .client(&["tasks", "tree", id, "--node", node.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let expected = format!("{id}  upper  completed  plain task\n   usage: none recorded\n");
    ensure!(out == expected, "stdout {out:?}, expected {expected:?}");

    let (code, out, err) = node
        .client(&["tasks", "tree", id, "--node", node.url(), "--json"])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let tree: serde_json::Value = serde_json::from_str(&out).context("--json output")?;
    ensure!(
        tree["taskId"] == id
            && tree["url"] == node.url()
            && tree["role"] == "upper"
            && tree["task"]["id"] == id
            && tree["task"]["state"] == "TASK_STATE_COMPLETED"
            && tree["children"] == json!([])
            && tree["error"].is_null()
            && tree["ownUsage"].is_null()
            && tree["totalUsage"]["inputTokens"] == 0
            && tree["partial"] == false,
        "{tree:#}"
    );

    let (code, out, err) = node
        .client(&["tasks", "tree", "no-such-task", "--node", node.url()])
        .await?;
    ensure!(
        code == 1 && out.is_empty() && err.contains("cannot fetch task no-such-task"),
        "exit {code}: {out}{err}"
    );
    Ok(())
}

/// Role, links and usage are the node's to record: a caller's `metadata.mew` cannot forge them
/// (forged links would send the task's agent to agents of the caller's choosing).
#[tokio::test]
async fn a_caller_cannot_forge_a_tasks_role_children_or_usage() -> anyhow::Result<()> {
    let upper = upper_role();
    let node = MewNode::start(&[("upper.md", &upper)]).await?;
    let agent = node.agent("/agents/upper", Binding::JsonRpc).await?;
    let mut request = SendMessageRequest::new(Message::user_text("forge"));
    let forged = json!({
        "depth": 1,
        "role": "admin",
        "usage": {"inputTokens": 5},
        "children": [{"taskId": "x", "agent": "http://198.51.100.7/"}],
    });
    request.metadata = Some(serde_json::Map::from_iter([("mew".to_owned(), forged)]));
    let task = match bounded("SendMessage", agent.send_message(&ctx(), request)).await?? {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    let mew = task
        .metadata
        .as_ref()
        .and_then(|m| m.get("mew"))
        .context("metadata.mew")?;
    ensure!(
        mew.get("children").is_none()
            && mew.get("usage").is_none()
            && mew["role"] == "upper"
            && mew["depth"] == 1,
        "stored metadata.mew: {mew}"
    );
    Ok(())
}

#[tokio::test]
async fn a_resumable_command_role_runs_again_after_a_crash() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let marker = node.dir().join("first-run.pid");
    // The first run records its pid and waits forever; a run after a crash answers.
    let script = node.dir().join("job.sh");
    std::fs::write(
        &script,
        "read -r input\n\
         if [ \"$MEW_RECOVERED\" = 1 ]; then echo \"again: $input\"; exit 0; fi\n\
         echo $$ > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\nexec sleep 1000\n",
    )?;
    let role = command_role(
        "job",
        &format!("sh '{}' '{}'", script.display(), marker.display()),
    )
    .replacen("\n---\n", "\nresumable: true\n---\n", 1);
    node.write_role("job.md", &role)?;
    node.launch().await?;
    let agent = node.agent("/agents/job", Binding::JsonRpc).await?;
    let task = start(&agent, "the input").await?;
    poll_until("the first run has started", WAIT, || async {
        Ok(marker.exists().then_some(()))
    })
    .await?;

    node.kill_hard().await?;
    node.launch().await?;
    let agent = node.agent("/agents/job", Binding::HttpJson).await?;
    let done = poll_until("the task is over", WAIT, || async {
        let task = get(&agent, &task.id).await?;
        Ok(task.status.state.is_terminal().then_some(task))
    })
    .await?;
    ensure!(
        done.status.state == TaskState::Completed,
        "{:?}: {}",
        done.status.state,
        status_text(&done)
    );
    ensure!(
        artifact_text(&done) == "again: the input",
        "artifacts {:?}",
        done.artifacts
    );
    Ok(())
}

/// The SSE events of `response`, each with its `id`, until the stream ends or `max` came.
async fn sse_events(
    response: reqwest::Response,
    max: usize,
) -> anyhow::Result<Vec<(Option<String>, serde_json::Value)>> {
    let mut decoder = mew_transport::SseDecoder::default();
    let mut bytes = response.bytes_stream();
    let mut events = Vec::new();
    let read = async {
        while events.len() < max {
            if let Some(event) = decoder.next_event()? {
                events.push((event.id, serde_json::from_str(&event.data)?));
                continue;
            }
            match bytes.next().await {
                Some(chunk) => decoder.push(&chunk?),
                None => break,
            }
        }
        anyhow::Ok(())
    };
    bounded("the event stream", read).await??;
    Ok(events)
}

#[tokio::test]
async fn a_subscriber_that_lost_its_stream_resumes_after_the_last_event_id_it_saw()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let role = command_role(
        "gate",
        &format!(
            "sh -c 'echo started; while [ ! -f {} ]; do sleep 0.05; done; echo passed'",
            gate.display()
        ),
    );
    let node = MewNode::start(&[("gate.md", &role)]).await?;
    let agent = node.agent("/agents/gate", Binding::HttpJson).await?;
    let task = start(&agent, "go").await?;
    let http = reqwest::Client::new();
    let url = format!("{}/agents/gate/tasks/{}:subscribe", node.url(), task.id);
    let subscribe = |last: Option<&str>| {
        let request = http.get(&url).header("A2A-Version", "1.0");
        match last {
            Some(id) => request.header("Last-Event-ID", id),
            None => request,
        }
        .send()
    };

    // The first event is the task, numbered; an id the node never sent is ignored.
    for last in [None, Some("not-a-number")] {
        let first = sse_events(subscribe(last).await?, 1).await?;
        let [(id, event)] = first.as_slice() else {
            bail!("no first event: {first:?}");
        };
        ensure!(event.get("task").is_some(), "{event}");
        ensure!(id.is_some(), "the snapshot has no id");
    }
    let first = sse_events(subscribe(None).await?, 1).await?;
    let seen: u64 = first[0].0.as_deref().context("no id")?.parse()?;

    std::fs::write(&gate, "")?;
    wait_for_state(&agent, &task.id, TaskState::Completed).await?;

    // Resumed after the event it saw, the stream has only the later ones, numbered on from
    // it, and ends with the task.
    let rest = sse_events(subscribe(Some(&seen.to_string())).await?, usize::MAX).await?;
    let ids: Vec<Option<String>> = rest.iter().map(|(id, _)| id.clone()).collect();
    let expected: Vec<Option<String>> = (seen + 1..=seen + u64::try_from(rest.len())?)
        .map(|n| Some(n.to_string()))
        .collect();
    ensure!(!rest.is_empty() && ids == expected, "{rest:#?}");
    ensure!(
        rest.iter().all(|(_, event)| event.get("task").is_none()),
        "a resumed stream sends no snapshot: {rest:#?}"
    );
    let (_, last) = rest.last().context("no events")?;
    ensure!(
        last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED",
        "{last}"
    );
    let text: String = rest
        .iter()
        .filter_map(|(_, event)| event["artifactUpdate"]["artifact"]["parts"].as_array())
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .collect();
    ensure!(text.contains("passed"), "{rest:#?}");
    Ok(())
}
