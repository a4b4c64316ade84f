//! Replicas on one PostgreSQL, from outside: several `mew up` processes on one database answer
//! for every task, follow each other's tasks, take over the work of a replica that is killed
//! or paused past its lease, and refuse the writes of one that comes back; behind the HAProxy
//! of `deploy/compose`, sends and a resumed stream go on while replicas die and restart.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures_util::StreamExt;
use mew_cards::{
    CancelTaskRequest, ErrorKind, GetTaskRequest, Message, SendMessageConfiguration,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task, TaskId,
    TaskState,
};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{
    MewNode, command_role, echo_role, poll_until, scripted_model_config, status_text,
};
use mew_tests::postgres;
use mew_transport::{AgentTransport, Binding, CallContext, EventStream, RemoteAgent};
use rustix::process::Signal;
use serde_json::{Value, json};

/// The bound on any one wait of these tests.
const WAIT: Duration = Duration::from_secs(60);

/// A short lease: a lost replica's work is taken over within seconds.
const STORE: &str = "store:\n  lease: 2s\n";

/// Replicas on one new database.
struct Cluster {
    url: String,
    nodes: Vec<MewNode>,
}

impl Cluster {
    /// `n` replicas with `config` (beside [`STORE`]) and `roles`, started at once (their
    /// migrations race).
    async fn start(n: usize, config: &str, roles: &[(&str, String)]) -> anyhow::Result<Self> {
        Self::start_with_env(n, config, roles, &[]).await
    }

    /// [`Cluster::start`] with `env` set for every replica.
    async fn start_with_env(
        n: usize,
        config: &str,
        roles: &[(&str, String)],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let url = postgres::database().await?;
        let mut nodes = Vec::new();
        for _ in 0..n {
            let mut node = MewNode::new()?;
            node.write_config(&format!("{STORE}{config}"))?;
            for (file, text) in roles {
                node.write_role(file, text)?;
            }
            for (name, value) in env {
                node.set_env(name, value);
            }
            node.set_env("MEW_STORE_URL", &url);
            nodes.push(node);
        }
        futures_util::future::try_join_all(nodes.iter_mut().map(MewNode::launch)).await?;
        Ok(Self { url, nodes })
    }

    async fn agent(&self, replica: usize, role: &str) -> anyhow::Result<RemoteAgent> {
        self.nodes[replica]
            .agent(&format!("/agents/{role}"), Binding::JsonRpc)
            .await
    }

    async fn database(&self) -> anyhow::Result<tokio_postgres::Client> {
        let (client, connection) =
            tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// The logged events of a task, by number, checked to be numbered 1, 2, ... up to the
    /// task's generation without a gap.
    async fn events(&self, id: &TaskId) -> anyhow::Result<Vec<Value>> {
        let db = self.database().await?;
        let rows = db
            .query(
                "SELECT generation, event FROM task_events WHERE task_id = $1 ORDER BY generation",
                &[&id.as_str()],
            )
            .await?;
        let generation: i64 = db
            .query_one(
                "SELECT generation FROM tasks WHERE id = $1",
                &[&id.as_str()],
            )
            .await?
            .get(0);
        let numbers: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
        ensure!(
            numbers == (1..=generation).collect::<Vec<_>>(),
            "the events of {id} are not 1..={generation}: {numbers:?}"
        );
        rows.iter()
            .map(|row| Ok(serde_json::from_str(row.get::<_, &str>(1))?))
            .collect()
    }
}

fn ctx() -> CallContext {
    CallContext::anonymous()
}

/// Sends `text` and returns the task at once, while it runs.
async fn start(agent: &RemoteAgent, text: &str) -> anyhow::Result<Task> {
    let request = SendMessageRequest {
        configuration: Some(SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text(text))
    };
    match agent.send_message(&ctx(), request).await? {
        SendMessageResponse::Task(task) => Ok(task),
        other => bail!("expected a task, got {other:?}"),
    }
}

async fn get(agent: &RemoteAgent, id: &TaskId) -> anyhow::Result<Task> {
    let request = GetTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    Ok(agent.get_task(&ctx(), request).await?)
}

async fn subscribe(agent: &RemoteAgent, id: &TaskId) -> anyhow::Result<EventStream> {
    Ok(resubscribe(agent, id, None).await?)
}

/// A subscription that resumes after event number `after` (SSE `Last-Event-ID`).
async fn resubscribe(
    agent: &RemoteAgent,
    id: &TaskId,
    after: Option<u64>,
) -> Result<EventStream, mew_transport::Error> {
    let request = SubscribeToTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    let ctx = CallContext {
        last_event_id: after,
        ..ctx()
    };
    agent.subscribe_to_task(&ctx, request).await
}

/// Everything a stream yields until it ends, each event with its number (its SSE `id`).
async fn drain_numbered(mut stream: EventStream) -> anyhow::Result<Vec<(u64, Value)>> {
    let mut events = Vec::new();
    let collect = async {
        while let Some(event) = stream.next().await {
            let event = event?;
            let id = stream
                .event_id()
                .with_context(|| format!("an event without an id: {event:?}"))?;
            events.push((id, serde_json::to_value(&event)?));
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(WAIT, collect)
        .await
        .context("the stream did not end")??;
    Ok(events)
}

/// Everything a stream yields until it ends.
async fn drain(mut stream: EventStream) -> anyhow::Result<Vec<StreamResponse>> {
    let mut events = Vec::new();
    let collect = async {
        while let Some(event) = stream.next().await {
            events.push(event?);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(WAIT, collect)
        .await
        .context("the stream did not end")??;
    Ok(events)
}

/// Waits until the task is over, as `agent` sees it.
async fn finished(agent: &RemoteAgent, id: &TaskId) -> anyhow::Result<Task> {
    poll_until("the task is over", WAIT, || async {
        let task = get(agent, id).await?;
        Ok(task.status.state.is_terminal().then_some(task))
    })
    .await
}

/// The first line of a file once it has one.
async fn first_line(path: &Path) -> anyhow::Result<String> {
    poll_until("the command has started", WAIT, || async {
        Ok(std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned)))
    })
    .await
}

fn kill(pid: &str) -> anyhow::Result<()> {
    if let Some(pid) = pid
        .trim()
        .parse()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        // Gone already is fine.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    Ok(())
}

/// A command role that says it started, waits for `gate` to exist, and says it passed.
fn gate_role(gate: &Path) -> String {
    command_role(
        "gate",
        &format!(
            "sh -c 'echo started; while [ ! -f {gate} ]; do sleep 0.05; done; echo passed'",
            gate = gate.display()
        ),
    )
}

#[tokio::test]
async fn a_task_sent_to_one_replica_is_watched_on_another_and_read_on_a_third() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let cluster = Cluster::start(3, "", &[("gate.md", gate_role(&gate))]).await?;

    // Each replica lists the three.
    let (code, status) = cluster.nodes[2].get_json("/status").await?;
    ensure!(code == 200, "/status answered {code}");
    let mut addresses: Vec<&str> = status["replicas"]
        .as_array()
        .context("no replicas in /status")?
        .iter()
        .filter(|r| r["alive"] == true)
        .filter_map(|r| r["address"].as_str())
        .collect();
    addresses.sort_unstable();
    let mut urls: Vec<&str> = cluster.nodes.iter().map(MewNode::url).collect();
    urls.sort_unstable();
    ensure!(addresses == urls, "{addresses:?} vs {urls:?}");
    let (code, out, err) = cluster.nodes[0]
        .client(&["status", "--node", cluster.nodes[0].url()])
        .await?;
    ensure!(
        code == 0 && out.contains("(3 alive of 3)"),
        "mew status: {code}\n{out}\n{err}"
    );

    let task = start(&cluster.agent(0, "gate").await?, "go").await?;
    // A watcher on the second replica reads the task, loses its stream, and resumes on the
    // third after the last event it saw.
    let mut lost = subscribe(&cluster.agent(1, "gate").await?, &task.id).await?;
    let snapshot = lost.next().await.context("no snapshot")??;
    ensure!(
        matches!(snapshot, StreamResponse::Task(_)),
        "a subscription starts with the task: {snapshot:?}"
    );
    let seen = lost.event_id().context("the snapshot has no id")?;
    drop(lost);
    let watched = resubscribe(&cluster.agent(2, "gate").await?, &task.id, Some(seen)).await?;

    // The replicas' listening connections are cut: events still arrive (they are read from
    // the store, and the replicas listen again).
    let db = cluster.database().await?;
    let name = postgres::name_of(&cluster.url).to_owned();
    let listening = "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = $1 AND query LIKE 'LISTEN%'";
    poll_until("every replica listens", WAIT, || async {
        let count: i64 = db.query_one(listening, &[&name]).await?.get(0);
        Ok((count == 3).then_some(()))
    })
    .await?;
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND query LIKE 'LISTEN%'",
        &[&name],
    )
    .await?;
    std::fs::write(&gate, "")?;

    let events = drain_numbered(watched).await?;
    let (_, last) = events.last().context("no events")?;
    ensure!(
        last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED",
        "the stream ended with {last:?}"
    );

    // The third replica reads the task as the first does, and as the log has it.
    let read = get(&cluster.agent(2, "gate").await?, &task.id).await?;
    let sent = get(&cluster.agent(0, "gate").await?, &task.id).await?;
    ensure!(read == sent, "{read:?} vs {sent:?}");
    ensure!(read.status.state == TaskState::Completed, "{read:?}");
    let text: String = read
        .artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect();
    ensure!(
        text.contains("started") && text.contains("passed"),
        "{text:?}"
    );

    // The resumed watcher saw every logged event after the one it had, each once, in order,
    // numbered as the log numbers them.
    let logged = cluster.events(&task.id).await?;
    let after = usize::try_from(seen)?;
    let expected: Vec<(u64, Value)> = (seen + 1..).zip(logged[after..].iter().cloned()).collect();
    ensure!(
        events == expected,
        "the resumed stream is not the log after event {seen}:\nseen {events:#?}\nlogged {logged:#?}"
    );
    // Resumed once the task has ended, a subscription gets the same rest from the log; one
    // that saw the end has nothing left to watch.
    let agent = cluster.agent(0, "gate").await?;
    let again = drain_numbered(resubscribe(&agent, &task.id, Some(seen)).await?).await?;
    ensure!(again == expected, "{again:#?} vs {expected:#?}");
    let generation = u64::try_from(logged.len())?;
    let over = resubscribe(&agent, &task.id, Some(generation)).await;
    ensure!(
        over.is_err(),
        "a subscription after the last event: {over:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_killed_replicas_model_task_is_finished_by_another_and_its_command_task_fails()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let started = dir.path().join("started.txt");
    let sleeper = dir.path().join("sleeper.pid");
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "bash",
            json!({"command": format!("echo $$ >> {}; exec sleep 600", started.display())}),
        ),
        Step::text("Carried on elsewhere.").expect_tool_results(["call_1"]),
    ])?;
    let runner = "---\nname: runner\ndescription: A test role.\ntools: [bash]\n\
                  permissionMode: bypassPermissions\n---\nYou help with tests.\n";
    let cluster = Cluster::start(
        3,
        &scripted_model_config(&model),
        &[
            ("runner.md", runner.to_owned()),
            (
                "sleeper.md",
                command_role(
                    "sleeper",
                    &format!("sh -c 'echo $$ > {}; exec sleep 600'", sleeper.display()),
                ),
            ),
        ],
    )
    .await?;
    let mut cluster = cluster;
    let task = start(&cluster.agent(0, "runner").await?, "run the long job").await?;
    let command = start(&cluster.agent(0, "sleeper").await?, "sleep").await?;
    let bash_pid = first_line(&started).await?;
    let sleeper_pid = first_line(&sleeper).await?;
    let watched = subscribe(&cluster.agent(2, "runner").await?, &task.id).await?;

    cluster.nodes[0].kill_hard().await?;
    // What the killed replica ran outlives it, as after a real crash; the test ends it.
    kill(&bash_pid)?;
    kill(&sleeper_pid)?;

    // The watcher on a surviving replica sees the task finished from its checkpoint.
    let events = drain(watched).await?;
    let Some(StreamResponse::StatusUpdate(last)) = events.last() else {
        bail!("the stream ended with {:?}", events.last());
    };
    ensure!(
        last.status.state == TaskState::Completed,
        "{:?}",
        last.status
    );
    let done = get(&cluster.agent(1, "runner").await?, &task.id).await?;
    ensure!(
        status_text(&done) == "Carried on elsewhere.",
        "{:?}",
        status_text(&done)
    );
    let requests = model.requests();
    ensure!(requests.len() == 2, "{} model requests", requests.len());
    let result = requests[1].last_user_text();
    ensure!(
        result.contains("interrupted") && result.contains("unknown"),
        "the model was not told the call was interrupted: {result:?}"
    );
    let runs = std::fs::read_to_string(&started)?;
    ensure!(runs.lines().count() == 1, "the command ran again: {runs:?}");
    model.assert_done();

    // A command role that cannot start over fails, with the reason.
    let failed = finished(&cluster.agent(1, "sleeper").await?, &command.id).await?;
    ensure!(failed.status.state == TaskState::Failed, "{failed:?}");
    let reason = status_text(&failed);
    ensure!(reason.contains("its work was lost"), "{reason:?}");
    cluster.events(&task.id).await?;
    cluster.events(&command.id).await?;

    // The survivors count the two tasks they took over, once each, between them.
    let survivors = &cluster.nodes[1..];
    poll_until(
        "the survivors count two takeovers",
        Duration::from_secs(30),
        || async move {
            let mut total = 0.0;
            for node in survivors {
                total += takeovers(node).await?;
            }
            Ok((total == 2.0).then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// `mew_lease_takeovers_total` on `node`'s `/metrics`.
async fn takeovers(node: &MewNode) -> anyhow::Result<f64> {
    let text = reqwest::get(format!("{}/metrics", node.url()))
        .await?
        .text()
        .await?;
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix("mew_lease_takeovers_total "))
        .with_context(|| format!("no takeover counter in\n{text}"))?;
    Ok(value.parse()?)
}

#[tokio::test]
async fn a_replica_paused_past_its_lease_writes_nothing_when_it_wakes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runs = dir.path().join("runs.txt");
    let release = dir.path().join("release");
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "bash",
            json!({"command": format!(
                "echo $$ >> {runs}; while [ ! -f {release} ]; do sleep 0.05; done; echo finished",
                runs = runs.display(),
                release = release.display()
            )}),
        ),
        Step::text("Done elsewhere.").expect_tool_results(["call_1"]),
    ])?;
    let runner = "---\nname: runner\ndescription: A test role.\ntools: [bash]\n\
                  permissionMode: bypassPermissions\n---\nYou help with tests.\n";
    let mut cluster = Cluster::start(
        2,
        &scripted_model_config(&model),
        &[("runner.md", runner.to_owned())],
    )
    .await?;
    let task = start(&cluster.agent(0, "runner").await?, "run it").await?;
    first_line(&runs).await?;

    cluster.nodes[0].signal(Signal::STOP)?;
    let other = cluster.agent(1, "runner").await?;
    let done = finished(&other, &task.id).await?;
    ensure!(done.status.state == TaskState::Completed, "{done:?}");
    let logged = cluster.events(&task.id).await?;

    // Awake again, the old executor's call finishes; its writes are refused, and it stops.
    cluster.nodes[0].signal(Signal::CONT)?;
    std::fs::write(&release, "")?;
    poll_until("the old executor knows it lost the task", WAIT, || async {
        Ok(cluster.nodes[0]
            .log()
            .contains("another replica")
            .then_some(()))
    })
    .await?;
    ensure!(
        cluster.events(&task.id).await? == logged,
        "the paused replica wrote events after it woke"
    );
    ensure!(get(&other, &task.id).await? == done, "the task changed");
    let runs = std::fs::read_to_string(&runs)?;
    ensure!(runs.lines().count() == 1, "the tool ran twice: {runs:?}");
    ensure!(
        model.requests().len() == 2,
        "{} model requests",
        model.requests().len()
    );
    model.assert_done();
    cluster.nodes[0].stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_cancel_and_an_answer_reach_a_task_through_any_replica() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let cluster = Cluster::start(
        2,
        "",
        &[
            ("gate.md", gate_role(&gate)),
            ("echo.md", echo_role("echo")?),
        ],
    )
    .await?;

    // Canceled through the replica that does not run it.
    let running = start(&cluster.agent(0, "gate").await?, "go").await?;
    let other = cluster.agent(1, "gate").await?;
    poll_until("the task runs", WAIT, || async {
        Ok((get(&other, &running.id).await?.status.state == TaskState::Working).then_some(()))
    })
    .await?;
    let request = CancelTaskRequest {
        id: running.id.clone(),
        ..Default::default()
    };
    let canceled = other.cancel_task(&ctx(), request).await?;
    ensure!(canceled.status.state == TaskState::Canceled, "{canceled:?}");
    let seen_by_runner = get(&cluster.agent(0, "gate").await?, &running.id).await?;
    ensure!(
        seen_by_runner.status.state == TaskState::Canceled,
        "{seen_by_runner:?}"
    );
    cluster.events(&running.id).await?;

    // A question asked on one replica, answered on the other.
    let asker = cluster.agent(0, "echo").await?;
    let asked = match asker
        .send_message(&ctx(), SendMessageRequest::new(Message::user_text("ask")))
        .await?
    {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(asked.status.state == TaskState::InputRequired, "{asked:?}");
    let mut reply = Message::user_text("blue");
    reply.task_id = Some(asked.id.clone());
    reply.context_id = Some(asked.context_id.clone());
    let answered = match cluster
        .agent(1, "echo")
        .await?
        .send_message(&ctx(), SendMessageRequest::new(reply))
        .await?
    {
        SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(answered.id == asked.id, "the answer started another task");
    ensure!(
        answered.status.state == TaskState::Completed,
        "{answered:?}"
    );
    let seen_by_asker = get(&asker, &asked.id).await?;
    ensure!(
        seen_by_asker == answered,
        "{seen_by_asker:?} vs {answered:?}"
    );
    cluster.events(&asked.id).await?;
    Ok(())
}

#[tokio::test]
async fn a_new_task_a_full_replica_cannot_start_is_run_by_one_with_room() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    // `who` says which process runs it: its parent is the replica.
    let who = command_role("who", "sh -c 'echo $PPID'");
    let cluster = Cluster::start(
        2,
        "limits:\n  max_running_tasks: 1\n",
        &[("gate.md", gate_role(&gate)), ("who.md", who)],
    )
    .await?;

    // The first replica's one slot is taken.
    let full = cluster.agent(0, "gate").await?;
    let blocking = start(&full, "go").await?;
    poll_until("the gate task runs", WAIT, || async {
        Ok((get(&full, &blocking.id).await?.status.state == TaskState::Working).then_some(()))
    })
    .await?;

    // A blocking send to it is answered when the other replica has run the task.
    let request = SendMessageRequest::new(Message::user_text("who"));
    let answer = tokio::time::timeout(
        WAIT,
        cluster.agent(0, "who").await?.send_message(&ctx(), request),
    )
    .await
    .context("the waiting task was not run elsewhere")??;
    let SendMessageResponse::Task(task) = answer else {
        bail!("expected a task, got {answer:?}");
    };
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    let ran_in: String = task
        .artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect();
    let other = cluster.nodes[1].pid().context("no pid")?;
    ensure!(
        ran_in.trim() == other.to_string(),
        "the task ran in {ran_in:?}, not in the replica with room ({other})"
    );
    cluster.events(&task.id).await?;

    std::fs::write(&gate, "")?;
    let done = finished(&full, &blocking.id).await?;
    ensure!(done.status.state == TaskState::Completed, "{done:?}");
    Ok(())
}

#[tokio::test]
async fn a_rolling_restart_under_load_leaves_no_task_unfinished() -> anyhow::Result<()> {
    // A turn that may run again: a replica that stops hands its running turns back. Turns
    // end only once the gate opens, after the last restart, so a replica seen running one
    // still runs it when it is told to stop, however slow the machine.
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let work = format!(
        "---\nname: work\ndescription: Works until the gate opens.\n\
         command: \"sh -c 'while [ ! -f {gate} ]; do sleep 0.05; done; echo done'\"\n\
         resumable: true\n---\nWorks.\n",
        gate = gate.display()
    );
    let mut cluster = Cluster::start(3, "", &[("work.md", work)]).await?;
    // Each replica comes back on its own address, as behind a load balancer.
    for node in &mut cluster.nodes {
        let port = node
            .url()
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .context("no port in the node's URL")?;
        node.set_port(port);
    }
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_owned()).collect();

    // The load: tasks sent round the replicas until told to stop, each to the next replica
    // that answers.
    let stop = tokio_util::sync::CancellationToken::new();
    let senders = (0..4).map(|first| {
        let stop = stop.clone();
        let urls = urls.clone();
        async move {
            let mut sent = Vec::new();
            let mut refused = 0_usize;
            let mut next = first;
            while !stop.is_cancelled() {
                let url = format!("{}/agents/work", urls[next % urls.len()]);
                next += 1;
                let options = mew_transport::ClientOptions {
                    binding: Some(Binding::JsonRpc),
                    ..Default::default()
                };
                let Ok(agent) = RemoteAgent::resolve_with(&url, options).await else {
                    refused += 1;
                    continue;
                };
                match start(&agent, "go").await {
                    Ok(task) => sent.push(task.id),
                    Err(_) => refused += 1,
                }
            }
            (sent, refused)
        }
    });
    let load = tokio::spawn(futures_util::future::join_all(senders));

    // Every replica in turn stops (SIGTERM) and comes back while the load runs.
    let db = cluster.database().await?;
    for replica in 0..cluster.nodes.len() {
        let address = cluster.nodes[replica].url().to_owned();
        poll_until("the replica runs a task", WAIT, || async {
            let running: i64 = db
                .query_one(
                    "SELECT count(*) FROM tasks WHERE state = 2 AND starts_with(lease_owner, \
                     (SELECT id || '#' FROM replicas WHERE address = $1))",
                    &[&address],
                )
                .await?
                .get(0);
            Ok((running > 0).then_some(()))
        })
        .await?;
        cluster.nodes[replica].restart().await?;
    }
    stop.cancel();
    let (sent, refused): (Vec<Vec<TaskId>>, Vec<usize>) = load.await?.into_iter().unzip();
    std::fs::write(&gate, "")?;
    let sent: Vec<TaskId> = sent.into_iter().flatten().collect();
    let refused: usize = refused.into_iter().sum();
    // Each replica stopped while it ran a task, and handed it back.
    for node in &cluster.nodes {
        ensure!(
            node.log().contains("handed the task back"),
            "a replica stopped without handing a task back:\n{}",
            node.log()
        );
    }

    // Every task sent ends, completed: none is left WORKING or SUBMITTED.
    let agent = cluster.agent(0, "work").await?;
    for id in &sent {
        let task = finished(&agent, id).await?;
        ensure!(
            task.status.state == TaskState::Completed,
            "task {id} ended {}: {}",
            task.status.state,
            status_text(&task)
        );
    }
    let unfinished: i64 = db
        .query_one("SELECT count(*) FROM tasks WHERE state IN (1, 2)", &[])
        .await?
        .get(0);
    ensure!(unfinished == 0, "{unfinished} tasks are unfinished");
    eprintln!("{} tasks sent, {refused} sends refused", sent.len());
    Ok(())
}

#[tokio::test]
async fn what_one_principal_starts_on_one_replica_another_cannot_touch_on_any() -> anyhow::Result<()>
{
    const ALICE: &str = "alice-key-0123456789";
    const BOB: &str = "bob-key-9876543210";
    let auth = "auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n    \
                - name: bob\n      key_env: TEST_KEY_BOB\n";
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let cluster = Cluster::start_with_env(
        2,
        auth,
        &[("gate.md", gate_role(&gate))],
        &[("TEST_KEY_ALICE", ALICE), ("TEST_KEY_BOB", BOB)],
    )
    .await?;
    let caller = |replica: usize, key: &'static str, binding: Binding| {
        let node = &cluster.nodes[replica];
        async move {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert("x-api-key", reqwest::header::HeaderValue::from_static(key));
            node.agent_with_headers("/agents/gate", binding, headers)
                .await
        }
    };
    let alice = caller(0, ALICE, Binding::JsonRpc).await?;
    let task = start(&alice, "go").await?;
    poll_until("alice's task runs", WAIT, || async {
        Ok((get(&alice, &task.id).await?.status.state == TaskState::Working).then_some(()))
    })
    .await?;

    let not_found = |what: &str, outcome: Result<(), mew_transport::Error>| match outcome {
        Err(mew_transport::Error::Protocol(e)) if e.kind == ErrorKind::TaskNotFound => Ok(()),
        other => Err(anyhow::anyhow!(
            "{what}: expected TaskNotFound, got {other:?}"
        )),
    };
    for binding in [Binding::JsonRpc, Binding::HttpJson] {
        for replica in 0..2 {
            let bob = caller(replica, BOB, binding).await?;
            let what = |op: &str| format!("bob's {op} on replica {replica} over {binding:?}");
            let id = &task.id;
            let request = GetTaskRequest {
                id: id.clone(),
                ..Default::default()
            };
            not_found(&what("get"), bob.get_task(&ctx(), request).await.map(drop))?;
            for after in [None, Some(0)] {
                let outcome = match resubscribe(&bob, id, after).await {
                    Ok(mut stream) => match stream.next().await {
                        Some(Err(e)) => Err(e),
                        other => bail!("{}: {other:?}", what("subscription")),
                    },
                    Err(e) => Err(e),
                };
                not_found(&what("subscription"), outcome)?;
            }
            let request = CancelTaskRequest {
                id: id.clone(),
                ..Default::default()
            };
            not_found(
                &what("cancel"),
                bob.cancel_task(&ctx(), request).await.map(drop),
            )?;
            let mut message = Message::user_text("mine now");
            message.task_id = Some(id.clone());
            let request = SendMessageRequest::new(message);
            not_found(
                &what("message"),
                bob.send_message(&ctx(), request).await.map(drop),
            )?;
            let config = mew_cards::TaskPushNotificationConfig {
                task_id: id.clone(),
                url: "https://example.com/hook".to_owned(),
                ..Default::default()
            };
            let outcome = bob
                .create_task_push_notification_config(&ctx(), config)
                .await
                .map(drop);
            not_found(&what("push config"), outcome)?;
            let listed = bob
                .list_tasks(&ctx(), mew_cards::ListTasksRequest::default())
                .await?;
            ensure!(
                listed.tasks.iter().all(|t| t.id != *id),
                "{} shows alice's task",
                what("list")
            );
        }
    }

    // Alice's task ran on untouched, and she reads it on the other replica.
    let other = caller(1, ALICE, Binding::HttpJson).await?;
    ensure!(get(&other, &task.id).await?.status.state == TaskState::Working);
    std::fs::write(&gate, "")?;
    let done = finished(&other, &task.id).await?;
    ensure!(done.status.state == TaskState::Completed, "{done:?}");
    ensure!(
        done.history
            .iter()
            .all(|m| mew_cards::join_text(&m.parts) != "mine now"),
        "bob's message reached the task: {done:?}"
    );
    // Once it ended, the rest of its log is hers alone too.
    let bob = caller(1, BOB, Binding::JsonRpc).await?;
    not_found(
        "bob resuming alice's ended task",
        resubscribe(&bob, &task.id, Some(1)).await.map(drop),
    )?;
    Ok(())
}

/// A port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// HAProxy with `deploy/compose/haproxy.cfg`, its addresses rewritten to loopback: it listens
/// on `port` and balances over the replicas at `ports` (in the order of its `server` lines).
/// The directory holds the rewritten configuration while it runs.
async fn balancer(
    port: u16,
    ports: &[u16],
) -> anyhow::Result<(mew_tests::process::ChildProcess, tempfile::TempDir)> {
    let path = mew_tests::process::workspace_root().join("deploy/compose/haproxy.cfg");
    let mut config = std::fs::read_to_string(&path)?;
    let mut rewrite = |from: &str, to: &str| {
        ensure!(config.contains(from), "{} has no {from:?}", path.display());
        config = config.replace(from, to);
        Ok(())
    };
    rewrite("bind :7777", &format!("bind 127.0.0.1:{port}"))?;
    // Docker's DNS is not here; the servers are addresses.
    rewrite(
        "resolvers docker\n    nameserver dns 127.0.0.11:53\n    hold valid 5s\n",
        "",
    )?;
    rewrite(" resolvers docker", "")?;
    for (i, port) in ports.iter().enumerate() {
        let n = i + 1;
        rewrite(
            &format!("server mew{n} mew{n}:7777"),
            &format!("server mew{n} 127.0.0.1:{port}"),
        )?;
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("haproxy.cfg");
    std::fs::write(&file, config)?;
    let haproxy = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("haproxy"))
        .find(|path| path.is_file())
        .context("haproxy is not installed: run scripts/deploy-tools")?;
    let mut command = mew_tests::process::command(haproxy);
    command
        .arg("-db")
        .arg("-f")
        .arg(&file)
        .stderr(std::process::Stdio::null());
    // Its first line says a server's state: the replicas not started yet are down.
    let (process, _) =
        mew_tests::process::ChildProcess::spawn_until("haproxy", command, "Server mew/", WAIT)
            .await?;
    Ok((process, dir))
}

/// Waits until HAProxy's last word on `server` (`backend/name`) is `state` (`UP` or `DOWN`).
async fn balancer_says(
    haproxy: &mew_tests::process::ChildProcess,
    server: &str,
    state: &str,
) -> anyhow::Result<()> {
    let prefix = format!("Server {server} is ");
    poll_until(&format!("haproxy has {server} {state}"), WAIT, || async {
        let last = haproxy
            .stdout_lines()
            .into_iter()
            .rfind(|line| line.starts_with(&prefix));
        Ok(last
            .is_some_and(|line| line[prefix.len()..].starts_with(state))
            .then_some(()))
    })
    .await
}

/// The agent of `role` through the balancer at `lb` over `binding`: its card fetched there,
/// its interfaces pointed there (each replica's card names the replica itself).
async fn through(lb: &str, role: &str, binding: Binding) -> anyhow::Result<RemoteAgent> {
    let options = mew_transport::ClientOptions {
        binding: Some(binding),
        ..Default::default()
    };
    let base = format!("{lb}/agents/{role}");
    let mut card = mew_transport::fetch_card(&base, &options).await?;
    for interface in &mut card.supported_interfaces {
        interface.url = base.clone();
    }
    Ok(RemoteAgent::from_card(card, options)?)
}

#[tokio::test]
async fn the_compose_balancer_keeps_work_going_while_a_replica_is_killed_and_another_restarted()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    let gate_role = gate_role(&gate).replace("---\nA command", "resumable: true\n---\nA command");
    ensure!(gate_role.contains("resumable: true"), "{gate_role}");
    let url = postgres::database().await?;
    let ports = [free_port()?, free_port()?, free_port()?];
    let mut nodes = Vec::new();
    for port in ports {
        let mut node = MewNode::new()?;
        node.write_config(&format!("{STORE}node:\n  drain_delay: 10s\n"))?;
        node.write_role("gate.md", &gate_role)?;
        node.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
        node.set_env("MEW_STORE_URL", &url);
        node.set_port(port);
        nodes.push(node);
    }
    // Only the first replica runs when the stream starts: it serves the stream and runs the
    // task, so killing it cuts both.
    nodes[0].launch().await?;
    let lb_port = free_port()?;
    let (haproxy, _config) = balancer(lb_port, &ports).await?;
    let lb = format!("http://127.0.0.1:{lb_port}");
    // Each backend checks on its own: both see the replicas down before they start.
    for server in ["mew/mew2", "mew/mew3", "mew-grpc/mew2", "mew-grpc/mew3"] {
        balancer_says(&haproxy, server, "DOWN").await?;
    }

    let gate_agent = through(&lb, "gate", Binding::JsonRpc).await?;
    let task = start(&gate_agent, "go").await?;
    let mut stream = subscribe(&gate_agent, &task.id).await?;
    let mut seen = Vec::new();
    let first = stream.next().await.context("no snapshot")??;
    ensure!(matches!(first, StreamResponse::Task(_)), "{first:?}");
    seen.push(stream.event_id().context("no id")?);

    for node in &mut nodes[1..] {
        node.launch().await?;
    }
    for server in ["mew/mew2", "mew/mew3", "mew-grpc/mew2", "mew-grpc/mew3"] {
        balancer_says(&haproxy, server, "UP").await?;
    }

    // SIGKILL the replica with the task and the stream: the stream ends without the end.
    nodes[0].kill_hard().await?;
    let cut = async {
        while let Some(event) = stream.next().await {
            if event.is_err() {
                break;
            }
            seen.push(stream.event_id().context("no id")?);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(WAIT, cut)
        .await
        .context("the cut stream did not end")??;

    // Blocking and streaming sends through the balancer go on: it retries elsewhere until
    // its checks take the dead replica out.
    let upper = through(&lb, "upper", Binding::JsonRpc).await?;
    let upper_grpc = through(&lb, "upper", Binding::Grpc).await?;
    // Each blocking send goes once over JSON-RPC and once over gRPC (HTTP/2 to the replica).
    let blocking = |text: &'static str| {
        let agents = [&upper, &upper_grpc];
        async move {
            for agent in agents {
                let response = agent
                    .send_message(&ctx(), SendMessageRequest::new(Message::user_text(text)))
                    .await?;
                let SendMessageResponse::Task(task) = response else {
                    bail!("a message, not a task: {response:?}");
                };
                ensure!(
                    task.status.state == TaskState::Completed
                        && serde_json::to_string(&task.artifacts)?.contains(&text.to_uppercase()),
                    "{text} over {:?}: {:?} {}",
                    agent.binding(),
                    task.status.state,
                    status_text(&task)
                );
            }
            anyhow::Ok(())
        }
    };
    let streaming = |text: &'static str| {
        let upper = &upper;
        async move {
            let stream = upper
                .send_streaming_message(&ctx(), SendMessageRequest::new(Message::user_text(text)))
                .await?;
            let mut events = drain_numbered(stream).await?;
            let completed = |events: &[(u64, Value)]| {
                events.last().is_some_and(|(_, last)| {
                    last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
                })
            };
            // A replica that stops hands its running tasks on and ends their streams without
            // a final event: a client resumes after what it saw, through the balancer.
            if !completed(&events) {
                let (seen, first) = events.first().context("no events")?;
                let id = first["task"]["id"].as_str().context("no task first")?;
                let last_seen = events.last().map_or(*seen, |(n, _)| *n);
                let resumed = resubscribe(upper, &TaskId::from(id), Some(last_seen)).await?;
                events.extend(drain_numbered(resumed).await?);
            }
            ensure!(
                completed(&events),
                "{text}: the stream ended with {:?}",
                events.last()
            );
            anyhow::Ok(())
        }
    };
    for text in ["one", "two", "three", "four", "five"] {
        blocking(text).await?;
        streaming(text).await?;
    }

    // The cut stream resumes through the balancer after the last event it saw; the task goes
    // on on another replica (its role is resumable) and ends when the gate opens.
    let last_seen = *seen.last().context("nothing seen")?;
    let resumed = resubscribe(&gate_agent, &task.id, Some(last_seen)).await?;
    std::fs::write(&gate, "")?;
    let events = drain_numbered(resumed).await?;
    let (_, last) = events.last().context("no events after the cut")?;
    ensure!(
        last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED",
        "the resumed stream ended with {last}"
    );
    let cluster = Cluster { url, nodes };
    let logged = cluster.events(&task.id).await?;
    let after = usize::try_from(last_seen)?;
    let expected: Vec<(u64, Value)> = (last_seen + 1..)
        .zip(logged[after..].iter().cloned())
        .collect();
    ensure!(
        events == expected,
        "the resumed stream is not the log after event {last_seen}:\nseen {events:#?}\nlogged {logged:#?}"
    );

    // A graceful restart of another replica, with sends going on through it all: it turns
    // unready, the balancer moves the work, and it comes back.
    let mut nodes = cluster.nodes;
    let restart = async {
        nodes[1].stop().await?;
        nodes[1].launch().await?;
        anyhow::Ok(())
    };
    let sends = async {
        for text in ["six", "seven", "eight", "nine", "ten", "eleven", "twelve"] {
            blocking(text).await?;
            streaming(text).await?;
        }
        anyhow::Ok(())
    };
    let (restarted, sent) = tokio::join!(restart, sends);
    restarted?;
    sent?;
    balancer_says(&haproxy, "mew/mew2", "UP").await?;
    balancer_says(&haproxy, "mew-grpc/mew2", "UP").await?;
    blocking("thirteen").await?;
    Ok(())
}

/// The compose balancer tells gRPC (HTTP/2 with prior knowledge) from HTTP/1.1 on its one port
/// and carries each binding to a replica: blocking and streaming sends over all three.
#[tokio::test]
async fn the_compose_balancer_carries_every_binding_to_a_replica() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    let ports = [free_port()?, free_port()?, free_port()?];
    node.set_port(ports[0]);
    let lb_port = free_port()?;
    let (haproxy, _config) = balancer(lb_port, &ports).await?;
    // HAProxy speaks of a server when its state changes: the node starts once it is down.
    balancer_says(&haproxy, "mew/mew1", "DOWN").await?;
    balancer_says(&haproxy, "mew-grpc/mew1", "DOWN").await?;
    node.launch().await?;
    balancer_says(&haproxy, "mew/mew1", "UP").await?;
    balancer_says(&haproxy, "mew-grpc/mew1", "UP").await?;
    let lb = format!("http://127.0.0.1:{lb_port}");
    for binding in [Binding::JsonRpc, Binding::HttpJson, Binding::Grpc] {
        let upper = through(&lb, "upper", binding).await?;
        ensure!(upper.binding() == binding, "{:?}", upper.binding());
        let response = upper
            .send_message(&ctx(), SendMessageRequest::new(Message::user_text("abc")))
            .await?;
        let SendMessageResponse::Task(task) = response else {
            bail!("{binding:?}: a message, not a task: {response:?}");
        };
        ensure!(
            task.status.state == TaskState::Completed
                && serde_json::to_string(&task.artifacts)?.contains("ABC"),
            "{binding:?}: {:?} {}",
            task.status.state,
            status_text(&task)
        );
        let stream = upper
            .send_streaming_message(&ctx(), SendMessageRequest::new(Message::user_text("def")))
            .await?;
        let events = drain(stream).await?;
        let Some(StreamResponse::StatusUpdate(last)) = events.last() else {
            bail!("{binding:?}: the stream ended with {:?}", events.last());
        };
        ensure!(
            last.status.state == TaskState::Completed
                && serde_json::to_string(&events)?.contains("DEF"),
            "{binding:?}: {events:?}"
        );
        // What was sent through the balancer is read back through it on the same binding.
        let read = get(&upper, &last.task_id).await?;
        ensure!(
            read.status.state == TaskState::Completed,
            "{binding:?}: {read:?}"
        );
    }
    Ok(())
}
