//! Tests of the task manager over a real SQLite store and a scripted executor.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::{
    Artifact, ContextId, ErrorKind, ListTasksRequest, Message, Part, RoleDefinition, RoleSource,
    StreamResponse, Task, TaskId, TaskState, parse_role,
};
use mew_transport::Error;
use tokio::sync::Mutex;

use super::executor::{Annotation, EventSink, ExecError, Executor, Turn};
use super::manager::{Limits, RESTART_REASON, Roles, Scope, Submission, TaskManager};
use super::sqlite::SqliteStore;
use super::store::{
    OutboxRow, PendingPush, StoreError, StoredTask, TaskPage, TaskQuery, TaskStore,
};

/// Follows the first word of the message: `done`, `ask`, `wait`, `fail`,
/// `panic`, `chunks N`, `reply`, `history`, `illegal`, `link`, and, saving the
/// runner's private state `{"kept": REST}` first, `keep`, `keep-ask`,
/// `keep-only`, `keep-fail`, `keep-wait`; and `resume`, which checkpoints `{"step": 1}` and
/// waits, and when its turn starts over answers with the checkpoint it got.
#[derive(Default)]
struct Script {
    /// Whether its turns may start over after a lost node.
    resumable: bool,
    runs: AtomicUsize,
    turns: Mutex<Vec<(bool, usize)>>,
    /// Each turn's `recovered` flag and the private state it started with.
    starts: Mutex<Vec<(bool, serde_json::Value)>>,
    /// Poked when a `keep-wait` turn has saved its private state.
    saved: tokio::sync::Notify,
    /// Poked when a `wait` turn has started waiting: a task is WORKING before its runner is called.
    waiting: tokio::sync::Notify,
}

#[async_trait]
impl Executor for Script {
    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.turns
            .lock()
            .await
            .push((turn.resumed, turn.history.len()));
        self.starts
            .lock()
            .await
            .push((turn.recovered, turn.private.clone()));
        let text = turn.message.text();
        let closed = |_| ExecError("closed".into());
        if text == "resume" {
            if turn.recovered {
                let answer = format!("continued from {}", turn.private);
                let artifact = Artifact::new("answer", vec![Part::text(answer)]);
                return sink.artifact(artifact, false, false).await.map_err(closed);
            }
            sink.checkpoint(serde_json::json!({"step": 1}))
                .await
                .map_err(closed)?;
            self.saved.notify_one();
            turn.cancel.cancelled().await;
            return Err(ExecError("canceled".into()));
        }
        if turn.resumed {
            let answer = if turn.private.is_null() {
                format!("got {text}")
            } else {
                format!("got {text} with {}", turn.private)
            };
            let artifact = Artifact::new("answer", vec![Part::text(answer)]);
            return sink.artifact(artifact, false, false).await.map_err(closed);
        }
        let (word, rest) = text.split_once(' ').unwrap_or((&text, ""));
        let kept = serde_json::json!({ "kept": rest });
        match word {
            // What a model role's turn reports: its answer, its usage, its conversation, the end.
            "keep" => {
                sink.artifact(Artifact::new("out", vec![Part::text(rest)]), false, false)
                    .await
                    .map_err(closed)?;
                sink.annotate(Annotation::Usage(seven_tokens()))
                    .await
                    .map_err(closed)?;
                sink.save_private(kept).await.map_err(closed)?;
                sink.status(TaskState::Completed, Some(Message::agent_text("done")))
                    .await
                    .map_err(closed)
            }
            "keep-ask" => {
                sink.save_private(kept).await.map_err(closed)?;
                sink.status(
                    TaskState::InputRequired,
                    Some(Message::agent_text("which one?")),
                )
                .await
                .map_err(closed)
            }
            // A delegation link is written at once; a value set is read back before its write.
            "link" => {
                sink.annotate(Annotation::Child(link(rest)))
                    .await
                    .map_err(closed)?;
                sink.annotate(Annotation::Usage(seven_tokens()))
                    .await
                    .map_err(closed)?;
                let seen: Vec<String> = sink
                    .context_children()
                    .await
                    .into_iter()
                    .map(|link| link.task_id)
                    .collect();
                sink.artifact(
                    Artifact::new("seen", vec![Part::text(seen.join("|"))]),
                    false,
                    false,
                )
                .await
                .map_err(closed)
            }
            // The turn ends right after the save: no event of its own follows.
            "keep-only" => sink.save_private(kept).await.map_err(closed),
            "keep-fail" => {
                sink.save_private(kept).await.map_err(closed)?;
                Err(ExecError("it broke after saving".into()))
            }
            "keep-wait" => {
                sink.save_private(kept).await.map_err(closed)?;
                self.saved.notify_one();
                turn.cancel.cancelled().await;
                Err(ExecError("canceled".into()))
            }
            "done" => sink
                .artifact(Artifact::new("out", vec![Part::text(rest)]), false, false)
                .await
                .map_err(closed),
            "ask" => sink
                .status(
                    TaskState::InputRequired,
                    Some(Message::agent_text("which one?")),
                )
                .await
                .map_err(closed),
            "wait" => {
                self.waiting.notify_one();
                turn.cancel.cancelled().await;
                Err(ExecError("canceled".into()))
            }
            "fail" => Err(ExecError("it broke".into())),
            "panic" => panic!("the script panicked"),
            "chunks" => {
                let n: usize = rest.parse().unwrap_or(1);
                let mut artifact = Artifact::new("chunks", vec![]);
                for i in 0..n {
                    artifact.parts = vec![Part::text(i.to_string())];
                    sink.artifact(artifact.clone(), i > 0, i + 1 == n)
                        .await
                        .map_err(closed)?;
                }
                Ok(())
            }
            "reply" => sink
                .message(Message::agent_text(format!("re: {rest}")))
                .await
                .map_err(closed),
            "history" => {
                let said: Vec<String> = turn.history.iter().map(Message::text).collect();
                sink.artifact(
                    Artifact::new("history", vec![Part::text(said.join("|"))]),
                    false,
                    false,
                )
                .await
                .map_err(closed)
            }
            "illegal" => {
                // A runner cannot send a task back to SUBMITTED: the change is ignored.
                sink.status(TaskState::Submitted, None)
                    .await
                    .map_err(closed)?;
                sink.artifact(
                    Artifact::new("out", vec![Part::text("still fine")]),
                    false,
                    false,
                )
                .await
                .map_err(closed)
            }
            other => Err(ExecError(format!("no script {other}"))),
        }
    }

    fn resumable(&self, _: &RoleDefinition) -> bool {
        self.resumable
    }
}

/// A new message for `role`, from nobody in particular, without a push config.
fn submission(role: Arc<RoleDefinition>, message: Message) -> Submission {
    Submission {
        role,
        message,
        owner: None,
        parent: None,
        metadata: None,
        private: serde_json::Value::Null,
        push: None,
        id: None,
    }
}

struct OneRole {
    role: Arc<RoleDefinition>,
    script: Arc<Script>,
}

impl Roles for OneRole {
    fn role(&self, name: &str) -> Option<Arc<RoleDefinition>> {
        (name == self.role.name).then(|| self.role.clone())
    }

    fn executor(&self, _: &RoleDefinition) -> Arc<dyn Executor> {
        self.script.clone()
    }
}

/// The usage the scripted turns record.
fn seven_tokens() -> mew_cards::mew::Usage {
    mew_cards::mew::Usage {
        input_tokens: 7,
        ..Default::default()
    }
}

/// A child link to task `id`.
fn link(id: &str) -> mew_cards::mew::ChildLink {
    mew_cards::mew::ChildLink {
        task_id: id.to_owned(),
        agent: "helper".to_owned(),
        ..Default::default()
    }
}

fn role() -> Arc<RoleDefinition> {
    let text = "---\nname: scripted\ndescription: follows a script\ncommand: [true]\n---\n";
    Arc::new(
        parse_role(text, "scripted.md", RoleSource::Project)
            .unwrap()
            .definition,
    )
}

/// The SQLite store, keeping a copy of every task row it writes.
struct Counting {
    inner: SqliteStore,
    writes: std::sync::Mutex<Vec<StoredTask>>,
}

impl Counting {
    fn open(path: &std::path::Path) -> Self {
        Self {
            inner: SqliteStore::open(path).unwrap(),
            writes: std::sync::Mutex::default(),
        }
    }

    /// Every row written for `task`, in order.
    fn writes_of(&self, task: &mew_cards::TaskId) -> Vec<StoredTask> {
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .filter(|w| w.task.id == *task)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl TaskStore for Counting {
    fn location(&self) -> String {
        self.inner.location()
    }

    async fn close(self: Arc<Self>) -> Result<(), StoreError> {
        match Arc::try_unwrap(self) {
            Ok(counting) => counting.inner.close().await,
            Err(_) => Ok(()),
        }
    }

    async fn push_depth(&self, limit: u64) -> Result<u64, StoreError> {
        self.inner.push_depth(limit).await
    }

    async fn put(&self, task: &StoredTask) -> Result<(), StoreError> {
        self.inner.put(task).await?;
        self.writes.lock().unwrap().push(task.clone());
        Ok(())
    }

    async fn create(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[mew_cards::TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        self.inner.create(task, events, configs, outbox).await?;
        self.writes.lock().unwrap().push(task.clone());
        Ok(())
    }

    async fn context_admits(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.inner.context_admits(context_id, owner).await
    }

    async fn put_with_events(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[mew_cards::TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        self.inner
            .put_with_events(task, events, configs, outbox)
            .await?;
        self.writes.lock().unwrap().push(task.clone());
        Ok(())
    }

    async fn events(
        &self,
        task: &TaskId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, StreamResponse)>, StoreError> {
        self.inner.events(task, after, limit).await
    }

    async fn push_configs(
        &self,
        task: &mew_cards::TaskId,
    ) -> Result<Vec<mew_cards::TaskPushNotificationConfig>, StoreError> {
        self.inner.push_configs(task).await
    }

    async fn put_push_config(
        &self,
        config: &mew_cards::TaskPushNotificationConfig,
    ) -> Result<(), StoreError> {
        self.inner.put_push_config(config).await
    }

    async fn delete_push_config(
        &self,
        task: &mew_cards::TaskId,
        id: &str,
    ) -> Result<(), StoreError> {
        self.inner.delete_push_config(task, id).await
    }

    async fn push_heads(&self, limit: usize) -> Result<Vec<PendingPush>, StoreError> {
        self.inner.push_heads(limit).await
    }

    async fn push_done(&self, seq: i64) -> Result<(), StoreError> {
        self.inner.push_done(seq).await
    }

    async fn push_retry(&self, seq: i64, next_at: i64, error: &str) -> Result<(), StoreError> {
        self.inner.push_retry(seq, next_at, error).await
    }

    async fn get(&self, id: &mew_cards::TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.inner.get(id).await
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        self.inner.list(query).await
    }

    async fn context(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<Vec<StoredTask>, StoreError> {
        self.inner.context(context_id, owner).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    async fn take_over(&self, limit: usize) -> Result<Vec<StoredTask>, StoreError> {
        self.inner.take_over(limit).await
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: Arc<Counting>,
    manager: Arc<TaskManager>,
    script: Arc<Script>,
    role: Arc<RoleDefinition>,
}

async fn fixture(limits: Limits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let counting = Arc::new(Counting::open(&path));
    let store: Arc<dyn TaskStore> = counting.clone();
    let script = Arc::new(Script::default());
    let role = role();
    let roles = Arc::new(OneRole {
        role: role.clone(),
        script: script.clone(),
    });
    let manager = TaskManager::start(store, roles, limits).await.unwrap();
    Fixture {
        _dir: dir,
        path,
        store: counting,
        manager,
        script,
        role,
    }
}

impl Fixture {
    async fn submit(&self, message: Message) -> Result<(Task, mew_transport::EventStream), Error> {
        let submission = submission(self.role.clone(), message);
        self.manager.submit(submission, &Scope::default()).await
    }

    /// Sends `text` and reads the stream to its end; returns the final snapshot.
    async fn run(&self, text: &str) -> Task {
        let (task, stream) = self.submit(Message::user_text(text)).await.unwrap();
        let mut folded = task;
        let events: Vec<_> =
            tokio::time::timeout(Duration::from_secs(20), stream.collect::<Vec<_>>())
                .await
                .unwrap();
        for event in events {
            folded.apply(&event.unwrap());
        }
        folded
    }

    async fn get(&self, task: &Task) -> StoredTask {
        self.manager.get(&task.id, &Scope::default()).await.unwrap()
    }

    /// Polls until the task reaches `state` (bounded).
    async fn wait_for(&self, task: &Task, state: TaskState) -> StoredTask {
        for _ in 0..400 {
            let stored = self.get(task).await;
            if stored.task.status.state == state {
                return stored;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("task {} never reached {state}", task.id);
    }
}

fn kind(error: Error) -> ErrorKind {
    error
        .kind()
        .unwrap_or_else(|| panic!("not a protocol error: {error}"))
}

#[tokio::test]
async fn a_task_runs_to_completion_and_is_stored_before_it_is_announced() {
    let f = fixture(Limits::default()).await;
    let (task, stream) = f.submit(Message::user_text("done result")).await.unwrap();
    // A slot was free: the task was stored WORKING in the write that created it, and its
    // stream still says it was SUBMITTED first.
    assert_eq!(task.status.state, TaskState::Working);
    let events: Vec<StreamResponse> = stream.map(Result::unwrap).collect().await;
    let states: Vec<TaskState> = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::StatusUpdate(u) => Some(u.status.state),
            _ => None,
        })
        .collect();
    assert!(
        matches!(&events[0], StreamResponse::Task(t) if t.status.state == TaskState::Submitted)
    );
    assert_eq!(states, [TaskState::Working, TaskState::Completed]);
    let stored = f.get(&task).await;
    assert_eq!(stored.task.artifacts[0].parts[0].as_text(), Some("result"));
    assert_eq!(stored.role, "scripted");
    // The A2A view says which role runs it, from the first snapshot on.
    let role_of = |task: &Task| mew_cards::mew::MewMetadata::read(task.metadata.as_ref()).role;
    assert_eq!(role_of(&task).as_deref(), Some("scripted"));
    assert_eq!(role_of(&stored.task).as_deref(), Some("scripted"));

    // Reopen the database: everything is there.
    f.manager.shutdown(Duration::from_secs(1)).await;
    let reopened = SqliteStore::open(&f.path).unwrap();
    let again = reopened.get(&task.id).await.unwrap().unwrap();
    assert_eq!(again.task.status.state, TaskState::Completed);
    assert_eq!(again.task.history[0].text(), "done result");
}

#[tokio::test]
async fn failures_timeouts_and_panics_fail_the_task_not_the_node() {
    let limits = Limits {
        task_timeout: Some(Duration::from_millis(200)),
        ..Limits::default()
    };
    let f = fixture(limits).await;
    let failed = f.run("fail").await;
    assert_eq!(failed.status.state, TaskState::Failed);
    assert_eq!(failed.status.message.unwrap().text(), "it broke");
    let timed_out = f.run("wait").await;
    assert_eq!(timed_out.status.state, TaskState::Failed);
    assert_eq!(
        timed_out.status.message.unwrap().text(),
        "timed out after 200ms"
    );
    let panicked = f.run("panic").await;
    assert_eq!(panicked.status.state, TaskState::Failed);
    assert!(
        panicked
            .status
            .message
            .unwrap()
            .text()
            .contains("the script panicked")
    );
    assert_eq!(
        f.run("done ok").await.status.state,
        TaskState::Completed,
        "the node still works"
    );
}

#[tokio::test]
async fn input_required_resumes_with_the_conversation() {
    let f = fixture(Limits::default()).await;
    let asked = f.run("ask").await;
    assert_eq!(asked.status.state, TaskState::InputRequired);
    let mut reply = Message::user_text("the blue one");
    reply.task_id = Some(asked.id.clone());
    let (_, stream) = f.submit(reply).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let done = f.get(&asked).await.task;
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(
        done.artifacts[0].parts[0].as_text(),
        Some("got the blue one")
    );
    let texts: Vec<String> = done.history.iter().map(Message::text).collect();
    assert_eq!(texts, ["ask", "which one?", "the blue one"]);
    let turns = f.script.turns.lock().await.clone();
    assert_eq!(
        turns,
        [(false, 0), (true, 2)],
        "the resumed turn sees the question and the first message"
    );

    // A message to a finished task is refused; so is one to a running task.
    let mut late = Message::user_text("more");
    late.task_id = Some(asked.id.clone());
    assert_eq!(
        kind(f.submit(late).await.err().unwrap()),
        ErrorKind::UnsupportedOperation
    );
}

#[tokio::test]
async fn a_new_task_in_a_context_sees_the_earlier_conversation() {
    let f = fixture(Limits::default()).await;
    let first = f.run("done one").await;
    let mut next = Message::user_text("history");
    next.context_id = Some(first.context_id.clone());
    let second = {
        let (task, stream) = f.submit(next).await.unwrap();
        let _: Vec<_> = stream.collect().await;
        f.get(&task).await.task
    };
    assert_ne!(second.id, first.id);
    assert_eq!(second.context_id, first.context_id);
    assert_eq!(second.artifacts[0].parts[0].as_text(), Some("done one"));
}

#[tokio::test]
async fn a_message_that_cannot_start_a_task_is_refused_with_what_is_wrong() {
    let f = fixture(Limits::default()).await;
    let mut agent = Message::agent_text("hello");
    agent.message_id = "m1".into();
    let mut no_id = Message::user_text("hello");
    no_id.message_id = String::new().into();
    let mut no_parts = Message::user_text("hello");
    no_parts.parts.clear();
    for (message, expected) in [
        (Message::default(), "message is required"),
        (no_parts, "message.parts must not be empty"),
        (no_id, "message.messageId is required"),
        (agent, "message.role must be ROLE_USER, not ROLE_AGENT"),
    ] {
        let error = f.submit(message).await.err().unwrap();
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(kind(error), ErrorKind::InvalidParams);
    }
    assert_eq!(f.script.runs.load(Ordering::SeqCst), 0);
    let page = f
        .manager
        .list(&ListTasksRequest::default(), &Scope::default())
        .await
        .unwrap();
    assert_eq!(page.total_size, 0, "no task was made");
}

#[tokio::test]
async fn tasks_wait_in_submitted_for_a_slot_in_order() {
    let limits = Limits {
        max_running: 1,
        ..Limits::default()
    };
    let f = fixture(limits).await;
    let (first, _s1) = f.submit(Message::user_text("wait")).await.unwrap();
    f.script.waiting.notified().await;
    let (second, s2) = f.submit(Message::user_text("done second")).await.unwrap();
    let (third, s3) = f.submit(Message::user_text("done third")).await.unwrap();
    // The slot is taken: the others stay SUBMITTED while the first runs.
    assert_eq!(f.get(&second).await.task.status.state, TaskState::Submitted);
    assert_eq!(f.script.runs.load(Ordering::SeqCst), 1);
    f.manager
        .cancel(&first.id, &Scope::default())
        .await
        .unwrap();
    let _: Vec<_> = s2.collect().await;
    let _: Vec<_> = s3.collect().await;
    assert_eq!(f.get(&second).await.task.status.state, TaskState::Completed);
    assert_eq!(f.get(&third).await.task.status.state, TaskState::Completed);
    let second_done = f.get(&second).await.status_time();
    let third_done = f.get(&third).await.status_time();
    assert!(second_done <= third_done, "first come, first served");
}

#[tokio::test]
async fn the_queue_is_bounded_and_queued_tasks_can_be_canceled() {
    let limits = Limits {
        max_running: 1,
        max_queued: 1,
        ..Limits::default()
    };
    let f = fixture(limits).await;
    let (running, _s) = f.submit(Message::user_text("wait")).await.unwrap();
    f.script.waiting.notified().await;
    let (queued, _q) = f.submit(Message::user_text("done never")).await.unwrap();
    let refused = f
        .submit(Message::user_text("done too many"))
        .await
        .err()
        .unwrap();
    assert_eq!(kind(refused), ErrorKind::Internal);
    let canceled = f
        .manager
        .cancel(&queued.id, &Scope::default())
        .await
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let again = f
        .manager
        .cancel(&queued.id, &Scope::default())
        .await
        .err()
        .unwrap();
    assert_eq!(kind(again), ErrorKind::TaskNotCancelable);
    f.manager
        .cancel(&running.id, &Scope::default())
        .await
        .unwrap();
    f.wait_for(&running, TaskState::Canceled).await;
    assert_eq!(
        f.script.runs.load(Ordering::SeqCst),
        1,
        "the canceled queued task never ran"
    );
}

#[tokio::test]
async fn a_lagging_subscriber_gets_every_event_in_order_from_the_log() {
    let limits = Limits {
        event_buffer: 1,
        ..Limits::default()
    };
    let f = fixture(limits).await;
    let (task, stream) = f.submit(Message::user_text("chunks 200")).await.unwrap();
    // Read nothing until the task is over: the subscriber lags far behind.
    f.wait_for(&task, TaskState::Completed).await;
    let events: Vec<StreamResponse> = stream.map(Result::unwrap).collect().await;
    assert!(matches!(events.first(), Some(StreamResponse::Task(_))));
    let chunks: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::ArtifactUpdate(u) => u.artifact.parts[0].as_text().map(str::to_owned),
            _ => None,
        })
        .collect();
    let expected: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    assert_eq!(chunks, expected, "every chunk, once, in order");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamResponse::Task(_)))
            .count(),
        1,
        "no snapshot stood in for missed events"
    );
    match events.last() {
        Some(StreamResponse::StatusUpdate(u)) => assert_eq!(u.status.state, TaskState::Completed),
        other => panic!("unexpected last event {other:?}"),
    }
    // Snapshot, WORKING, 200 chunks, COMPLETED: the task's generation counts them all.
    let stored = f.get(&task).await;
    assert_eq!(stored.task.artifacts[0].parts.len(), 200);
    assert_eq!(stored.generation, 203);
    assert_eq!(events.len(), 203);
}

#[tokio::test]
async fn a_direct_reply_completes_the_task_and_illegal_changes_are_ignored() {
    let f = fixture(Limits::default()).await;
    let (_, stream) = f.submit(Message::user_text("reply hi")).await.unwrap();
    let events: Vec<StreamResponse> = stream.map(Result::unwrap).collect().await;
    let reply = events.iter().find_map(|e| match e {
        StreamResponse::Message(m) => Some(m.text()),
        _ => None,
    });
    assert_eq!(reply.as_deref(), Some("re: hi"));
    let illegal = f.run("illegal").await;
    assert_eq!(illegal.status.state, TaskState::Completed);
    assert_eq!(illegal.artifacts[0].parts[0].as_text(), Some("still fine"));
}

fn stored(state: TaskState, text: &str) -> StoredTask {
    let mut message = Message::user_text(text);
    let task = Task {
        id: mew_cards::TaskId::generate(),
        context_id: ContextId::generate(),
        status: mew_cards::TaskStatus::new(state),
        ..Task::default()
    };
    message.task_id = Some(task.id.clone());
    message.context_id = Some(task.context_id.clone());
    let mut task = task;
    task.history.push(message);
    StoredTask {
        task,
        role: "scripted".into(),
        owner: None,
        parent: None,
        created: mew_cards::Timestamp::now(),
        private: serde_json::Value::Null,
        attempts: 0,
        generation: 0,
    }
}

#[tokio::test]
async fn unfinished_tasks_fail_on_restart_and_interrupted_ones_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    // What a node that died mid-task leaves behind: a turn running, a task waiting for a
    // slot, a task asking for input, and a task of a role that is gone since.
    let working = stored(TaskState::Working, "wait");
    let waiting = stored(TaskState::Submitted, "done queued");
    let asked = stored(TaskState::InputRequired, "ask");
    let mut orphan = stored(TaskState::Working, "wait");
    orphan.role = "gone".into();
    {
        let store = SqliteStore::open(&path).unwrap();
        for task in [&working, &waiting, &asked, &orphan] {
            store.put(task).await.unwrap();
        }
        store.close().await.unwrap();
    }
    let store: Arc<dyn TaskStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let roles = Arc::new(OneRole {
        role: role(),
        script: Arc::new(Script::default()),
    });
    let manager = TaskManager::start(store, roles, Limits::default())
        .await
        .unwrap();
    // Nothing changes until the node takes the tasks up.
    let untouched = manager
        .get(&working.task.id, &Scope::default())
        .await
        .unwrap();
    assert_eq!(untouched.task.status.state, TaskState::Working);
    let recovery = manager.recover().await.unwrap();
    assert_eq!(
        (recovery.started, recovery.resumed, recovery.failed),
        (1, 0, 2)
    );
    let failed = manager
        .get(&working.task.id, &Scope::default())
        .await
        .unwrap();
    assert_eq!(failed.task.status.state, TaskState::Failed);
    assert_eq!(failed.task.status.message.unwrap().text(), RESTART_REASON);
    let failed = manager
        .get(&orphan.task.id, &Scope::default())
        .await
        .unwrap();
    assert_eq!(failed.task.status.state, TaskState::Failed);
    assert_eq!(
        failed.task.status.message.unwrap().text(),
        format!("{RESTART_REASON}, and its role \"gone\" is gone")
    );
    // The task that never started runs now.
    let started = wait_until(&manager, &waiting.task.id, TaskState::Completed).await;
    assert_eq!(started.task.artifacts[0].parts[0].as_text(), Some("queued"));

    let mut reply = Message::user_text("after restart");
    reply.task_id = Some(asked.task.id.clone());
    let submission = submission(role(), reply);
    let (_, stream) = manager.submit(submission, &Scope::default()).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let resumed = manager
        .get(&asked.task.id, &Scope::default())
        .await
        .unwrap();
    assert_eq!(resumed.task.status.state, TaskState::Completed);
    assert_eq!(
        resumed.task.artifacts[0].parts[0].as_text(),
        Some("got after restart")
    );
}

/// Waits for a task to reach `state` (a watch of the task, not a sleep).
async fn wait_until(manager: &Arc<TaskManager>, id: &TaskId, state: TaskState) -> StoredTask {
    loop {
        let now = manager.get(id, &Scope::default()).await.unwrap();
        if now.task.status.state == state || now.task.status.state.is_terminal() {
            assert_eq!(now.task.status.state, state, "{now:?}");
            return now;
        }
        match manager.subscribe(id, &Scope::default(), None).await {
            Ok(stream) => drop(stream.collect::<Vec<_>>().await),
            Err(_) => continue,
        }
    }
}

#[tokio::test]
async fn a_running_turn_starts_over_from_its_checkpoint_when_its_role_allows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let script = Arc::new(Script {
        resumable: true,
        ..Script::default()
    });
    let roles = Arc::new(OneRole {
        role: role(),
        script: script.clone(),
    });
    // A first node runs the turn to its checkpoint; its store is then read as a crash left it.
    let task = {
        let store: Arc<dyn TaskStore> = Arc::new(SqliteStore::open(&path).unwrap());
        let manager = TaskManager::start(store.clone(), roles.clone(), Limits::default())
            .await
            .unwrap();
        let saved = script.saved.notified();
        let submission = submission(role(), Message::user_text("resume"));
        let (task, _stream) = manager.submit(submission, &Scope::default()).await.unwrap();
        saved.await;
        let left = store.get(&task.id).await.unwrap().unwrap();
        assert_eq!(left.task.status.state, TaskState::Working);
        assert_eq!(left.private, serde_json::json!({"step": 1}));
        left
    };
    let store = Arc::new(Counting::open(&dir.path().join("second.db")));
    store.put(&task).await.unwrap();
    let manager = TaskManager::start(store.clone(), roles, Limits::default())
        .await
        .unwrap();
    let recovery = manager.recover().await.unwrap();
    assert_eq!(recovery.resumed, 1);
    let done = wait_until(&manager, &task.task.id, TaskState::Completed).await;
    assert_eq!(
        done.task.artifacts[0].parts[0].as_text(),
        Some(r#"continued from {"step":1}"#)
    );
    assert_eq!(
        script.starts.lock().await.last(),
        Some(&(true, serde_json::json!({"step": 1})))
    );
    // The attempt was counted before the turn ran, and the turn's end reset it.
    let attempts: Vec<i32> = store
        .writes_of(&task.task.id)
        .iter()
        .map(|w| w.attempts)
        .collect();
    // (The first write is the one this test made.)
    assert_eq!(attempts.get(1), Some(&1), "{attempts:?}");
    assert_eq!(attempts.last(), Some(&0), "{attempts:?}");
    assert_eq!(done.attempts, 0);
}

#[tokio::test]
async fn a_turn_that_keeps_losing_its_node_fails_after_its_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TaskStore> =
        Arc::new(SqliteStore::open(&dir.path().join("tasks.db")).unwrap());
    let mut task = stored(TaskState::Working, "resume");
    task.attempts = 2;
    store.put(&task).await.unwrap();
    let script = Arc::new(Script {
        resumable: true,
        ..Script::default()
    });
    let roles = Arc::new(OneRole {
        role: role(),
        script: script.clone(),
    });
    let limits = Limits {
        max_attempts: 2,
        ..Limits::default()
    };
    let manager = TaskManager::start(store, roles, limits).await.unwrap();
    assert_eq!(manager.recover().await.unwrap().failed, 1);
    let failed = manager.get(&task.task.id, &Scope::default()).await.unwrap();
    assert_eq!(failed.task.status.state, TaskState::Failed);
    assert_eq!(
        failed.task.status.message.unwrap().text(),
        "the node running this task was lost 3 times while it ran; giving up"
    );
    assert_eq!(script.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn listing_pages_and_scopes() {
    let f = fixture(Limits::default()).await;
    let context = ContextId::generate();
    for i in 0..7 {
        let mut message = Message::user_text(format!("done {i}"));
        message.context_id = Some(context.clone());
        let (_, stream) = f.submit(message).await.unwrap();
        let _: Vec<_> = stream.collect().await;
    }
    let mut token = String::new();
    let mut sizes = Vec::new();
    loop {
        let request = ListTasksRequest {
            context_id: context.clone(),
            page_size: Some(3),
            page_token: token,
            ..Default::default()
        };
        let page = f.manager.list(&request, &Scope::default()).await.unwrap();
        assert_eq!(page.total_size, 7);
        assert!(
            page.tasks.iter().all(|t| t.artifacts.is_empty()),
            "artifacts only on request"
        );
        sizes.push(page.tasks.len());
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(sizes, [3, 3, 1]);
    let other_role = Scope {
        role: Some("someone-else".into()),
        owner: None,
    };
    let page = f
        .manager
        .list(&ListTasksRequest::default(), &other_role)
        .await
        .unwrap();
    assert_eq!(page.total_size, 0);
    let bad = ListTasksRequest {
        page_token: "not a token".into(),
        ..Default::default()
    };
    assert_eq!(
        kind(f.manager.list(&bad, &Scope::default()).await.err().unwrap()),
        ErrorKind::InvalidParams
    );
}

#[tokio::test]
async fn a_listing_since_a_time_counts_its_total_once_and_others_on_every_page() {
    let f = fixture(Limits::default()).await;
    let at = |i: i128| mew_cards::Timestamp::from_unix_nanos(1_700_000_000_000_000_000 + i);
    let put = |i: i128| {
        let mut task = stored(TaskState::Completed, &format!("task {i}"));
        task.task.status.timestamp = Some(at(i));
        let store = f.store.clone();
        async move { store.put(&task).await.unwrap() }
    };
    for i in 1..=5 {
        put(i).await;
    }
    let since = ListTasksRequest {
        status_timestamp_after: Some(at(1)),
        page_size: Some(2),
        ..Default::default()
    };
    let every = ListTasksRequest {
        page_size: Some(2),
        ..Default::default()
    };
    let scope = Scope::default();
    let first_since = f.manager.list(&since, &scope).await.unwrap();
    let first_every = f.manager.list(&every, &scope).await.unwrap();
    assert_eq!((first_since.total_size, first_every.total_size), (5, 5));
    // A task that matches both arrives between the pages.
    put(6).await;
    let next =
        |first: &mew_cards::ListTasksResponse, request: &ListTasksRequest| ListTasksRequest {
            page_token: first.next_page_token.clone(),
            ..request.clone()
        };
    let second_since = f
        .manager
        .list(&next(&first_since, &since), &scope)
        .await
        .unwrap();
    let second_every = f
        .manager
        .list(&next(&first_every, &every), &scope)
        .await
        .unwrap();
    // The time range was counted for the first page; the other listing counts every page.
    assert_eq!((second_since.total_size, second_every.total_size), (5, 6));
    assert_eq!(f.manager.list(&since, &scope).await.unwrap().total_size, 6);
}

#[tokio::test]
async fn listing_bounds_history_by_default_and_pages_by_bytes() {
    let f = fixture(Limits {
        list_history: 2,
        max_list_bytes: 20_000,
        ..Limits::default()
    })
    .await;
    // Five tasks of 12 messages, each message some 1000 bytes of JSON.
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut stored = stored(TaskState::Completed, &format!("task {i}"));
        for n in 0..11 {
            let mut message = Message::user_text(format!("{n:04} {}", "x".repeat(900)));
            message.task_id = Some(stored.task.id.clone());
            stored.task.history.push(message);
        }
        stored.task.status.timestamp = Some(mew_cards::Timestamp::from_unix_nanos(
            1_700_000_000_000_000_000 + i128::from(i),
        ));
        f.store.put(&stored).await.unwrap();
        ids.push(stored.task.id.clone());
    }
    // Unasked, a task comes with its two newest messages; asked, with as many as asked.
    let page = f
        .manager
        .list(&ListTasksRequest::default(), &Scope::default())
        .await
        .unwrap();
    assert!(
        page.tasks.iter().all(|t| t.history.len() == 2),
        "{:?}",
        page.tasks
    );
    assert_eq!(page.total_size, 5);
    // Each task is stored as ~12 kB of JSON: a page of 20 kB reads two of them, then points on.
    assert_eq!(page.tasks.len(), 2);
    assert!(!page.next_page_token.is_empty());
    let mut seen: Vec<_> = page.tasks.iter().map(|t| t.id.clone()).collect();
    let mut token = page.next_page_token;
    while !token.is_empty() {
        let request = ListTasksRequest {
            page_token: token,
            ..Default::default()
        };
        let page = f.manager.list(&request, &Scope::default()).await.unwrap();
        assert!(!page.tasks.is_empty());
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        token = page.next_page_token;
    }
    // Every task once, newest first, across the short pages.
    ids.reverse();
    assert_eq!(seen, ids);
    // Asked for, the whole history comes.
    let request = ListTasksRequest {
        history_length: Some(12),
        ..Default::default()
    };
    let page = f.manager.list(&request, &Scope::default()).await.unwrap();
    assert_eq!(page.tasks[0].history.len(), 12);
    // A task bigger than a page still comes, alone.
    let g = fixture(Limits {
        max_list_bytes: 1,
        ..Limits::default()
    })
    .await;
    g.store
        .put(&stored(TaskState::Completed, "one"))
        .await
        .unwrap();
    g.store
        .put(&stored(TaskState::Completed, "two"))
        .await
        .unwrap();
    let page = g
        .manager
        .list(&ListTasksRequest::default(), &Scope::default())
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert!(!page.next_page_token.is_empty());
}

fn webhook(task: &mew_cards::TaskId, id: &str) -> mew_cards::TaskPushNotificationConfig {
    mew_cards::TaskPushNotificationConfig {
        id: id.to_owned(),
        task_id: task.clone(),
        url: format!("https://hooks.example/{id}"),
        ..Default::default()
    }
}

/// Every notification waiting in the outbox at `path`: (config, body), in order.
fn outbox(path: &std::path::Path) -> Vec<(String, StreamResponse)> {
    let raw = rusqlite::Connection::open(path).unwrap();
    let mut stmt = raw
        .prepare("SELECT config_id, body FROM push_outbox ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(|row| {
            let (config, body) = row.unwrap();
            (config, serde_json::from_str(&body).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn an_inline_push_config_gets_every_event_from_the_first_snapshot() {
    let f = fixture(Limits::default()).await;
    let submission = Submission {
        push: Some(webhook(&mew_cards::TaskId::from(""), "a")),
        ..submission(f.role.clone(), Message::user_text("chunks 2"))
    };
    let (task, stream) = f
        .manager
        .submit(submission, &Scope::default())
        .await
        .unwrap();
    let streamed: Vec<StreamResponse> = stream.map(Result::unwrap).collect().await;
    let pushed = outbox(&f.path);
    assert!(pushed.iter().all(|(config, _)| config == "a"));
    let pushed: Vec<StreamResponse> = pushed.into_iter().map(|(_, event)| event).collect();
    assert_eq!(pushed, streamed);
    assert!(
        matches!(&pushed[0], StreamResponse::Task(t) if t.status.state == TaskState::Submitted)
    );
    assert_eq!(pushed.len(), 5, "{pushed:?}");
    // The config was saved with the task's id.
    let configs = f
        .manager
        .list_push_configs(&task.id, 0, "", &Scope::default())
        .await
        .unwrap();
    assert_eq!(configs.configs, [webhook(&task.id, "a")]);
}

#[tokio::test]
async fn push_configs_are_scoped_paged_and_deleted_idempotently() {
    let f = fixture(Limits::default()).await;
    let ask = Submission {
        owner: Some("alice".to_owned()),
        ..submission(f.role.clone(), Message::user_text("ask"))
    };
    let alice = Scope {
        role: None,
        owner: Some("alice".to_owned()),
    };
    let bob = Scope {
        role: None,
        owner: Some("bob".to_owned()),
    };
    let (task, stream) = f.manager.submit(ask, &alice).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let id = task.id.clone();

    for name in ["c", "a", "b"] {
        f.manager
            .set_push_config(webhook(&id, name), &alice)
            .await
            .unwrap();
    }
    // Another caller sees no such task, whatever it asks.
    assert_eq!(
        kind(
            f.manager
                .set_push_config(webhook(&id, "x"), &bob)
                .await
                .unwrap_err()
        ),
        ErrorKind::TaskNotFound
    );
    assert_eq!(
        kind(f.manager.get_push_config(&id, "a", &bob).await.unwrap_err()),
        ErrorKind::TaskNotFound
    );
    assert_eq!(
        kind(
            f.manager
                .list_push_configs(&id, 0, "", &bob)
                .await
                .unwrap_err()
        ),
        ErrorKind::TaskNotFound
    );
    assert_eq!(
        kind(
            f.manager
                .delete_push_config(&id, "a", &bob)
                .await
                .unwrap_err()
        ),
        ErrorKind::TaskNotFound
    );

    let first = f
        .manager
        .list_push_configs(&id, 2, "", &alice)
        .await
        .unwrap();
    let names: Vec<&str> = first.configs.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let second = f
        .manager
        .list_push_configs(&id, 2, &first.next_page_token, &alice)
        .await
        .unwrap();
    let names: Vec<&str> = second.configs.iter().map(|c| c.id.as_str()).collect();
    assert_eq!((names, second.next_page_token.as_str()), (vec!["c"], ""));
    assert_eq!(
        kind(
            f.manager
                .list_push_configs(&id, -1, "", &alice)
                .await
                .unwrap_err()
        ),
        ErrorKind::InvalidParams
    );
    assert_eq!(
        kind(
            f.manager
                .list_push_configs(&id, 2, "!!", &alice)
                .await
                .unwrap_err()
        ),
        ErrorKind::InvalidParams
    );

    assert_eq!(
        f.manager.get_push_config(&id, "b", &alice).await.unwrap(),
        webhook(&id, "b")
    );
    f.manager
        .delete_push_config(&id, "b", &alice)
        .await
        .unwrap();
    f.manager
        .delete_push_config(&id, "b", &alice)
        .await
        .unwrap();
    assert_eq!(
        kind(
            f.manager
                .get_push_config(&id, "b", &alice)
                .await
                .unwrap_err()
        ),
        ErrorKind::TaskNotFound
    );

    // The resumed turn's events reach the configs that are left, in order.
    let mut reply = Message::user_text("this one");
    reply.task_id = Some(id.clone());
    let reply = Submission {
        owner: Some("alice".to_owned()),
        ..submission(f.role.clone(), reply)
    };
    let (_, stream) = f.manager.submit(reply, &alice).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let pushed = outbox(&f.path);
    let configs: Vec<&str> = pushed.iter().map(|(c, _)| c.as_str()).collect();
    // WORKING, the artifact, COMPLETED: for `c` and `a` each (in the order they came).
    assert_eq!(configs, ["c", "a", "c", "a", "c", "a"]);

    // A task has a bounded number of configs.
    for n in 0..super::manager::MAX_PUSH_CONFIGS - 2 {
        f.manager
            .set_push_config(webhook(&id, &format!("n{n:02}")), &alice)
            .await
            .unwrap();
    }
    assert_eq!(
        kind(
            f.manager
                .set_push_config(webhook(&id, "one-more"), &alice)
                .await
                .unwrap_err()
        ),
        ErrorKind::InvalidParams
    );
    // Replacing one is fine.
    f.manager
        .set_push_config(webhook(&id, "a"), &alice)
        .await
        .unwrap();
}

/// The states of the rows written for a task, in order.
fn written_states(writes: &[StoredTask]) -> Vec<TaskState> {
    writes.iter().map(|w| w.task.status.state).collect()
}

fn usage_of(task: &Task) -> Option<&serde_json::Value> {
    task.metadata.as_ref()?.get("mew")?.get("usage")
}

#[tokio::test]
async fn private_state_and_usage_are_written_with_the_next_event_not_on_their_own() {
    let f = fixture(Limits::default()).await;
    let done = f.run("keep answer").await;
    assert_eq!(done.status.state, TaskState::Completed);
    let writes = f.store.writes_of(&done.id);
    // SUBMITTED with WORKING (a slot was free), the artifact, COMPLETED: the private state
    // and the usage annotation (a write each before) go with COMPLETED.
    assert_eq!(
        written_states(&writes),
        [TaskState::Working, TaskState::Working, TaskState::Completed]
    );
    let last = writes.last().unwrap();
    assert_eq!(last.private, serde_json::json!({ "kept": "answer" }));
    let usage = serde_json::to_value(seven_tokens()).unwrap();
    assert_eq!(usage_of(&last.task), Some(&usage));
    // GetTask after completion, and the store after a restart, have both.
    assert_eq!(usage_of(&f.get(&done).await.task), Some(&usage));
    f.manager.shutdown(Duration::from_secs(1)).await;
    let reopened = SqliteStore::open(&f.path).unwrap();
    let again = reopened.get(&done.id).await.unwrap().unwrap();
    assert_eq!(usage_of(&again.task), Some(&usage));
    assert_eq!(again.private, serde_json::json!({ "kept": "answer" }));
}

#[tokio::test]
async fn private_state_saved_before_a_question_is_stored_with_it_and_resumes_after_a_restart() {
    let f = fixture(Limits::default()).await;
    let asked = f.run("keep-ask blue").await;
    assert_eq!(asked.status.state, TaskState::InputRequired);
    let writes = f.store.writes_of(&asked.id);
    assert_eq!(
        written_states(&writes),
        [TaskState::Working, TaskState::InputRequired]
    );
    let kept = serde_json::json!({ "kept": "blue" });
    assert_eq!(writes.last().unwrap().private, kept);

    // A new node over the same database resumes the task with that state.
    f.manager.shutdown(Duration::from_secs(1)).await;
    let store: Arc<dyn TaskStore> = Arc::new(SqliteStore::open(&f.path).unwrap());
    assert_eq!(store.get(&asked.id).await.unwrap().unwrap().private, kept);
    let roles = Arc::new(OneRole {
        role: role(),
        script: Arc::new(Script::default()),
    });
    let manager = TaskManager::start(store, roles, Limits::default())
        .await
        .unwrap();
    let mut reply = Message::user_text("the blue one");
    reply.task_id = Some(asked.id.clone());
    let submission = submission(role(), reply);
    let (_, stream) = manager.submit(submission, &Scope::default()).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let resumed = manager.get(&asked.id, &Scope::default()).await.unwrap();
    assert_eq!(resumed.task.status.state, TaskState::Completed);
    assert_eq!(
        resumed.task.artifacts[0].parts[0].as_text(),
        Some(r#"got the blue one with {"kept":"blue"}"#)
    );
}

#[tokio::test]
async fn private_state_saved_last_in_a_turn_is_stored_however_the_turn_ends() {
    let f = fixture(Limits::default()).await;
    // The turn returns right after the save: the COMPLETED write carries it.
    let completed = f.run("keep-only a").await;
    assert_eq!(completed.status.state, TaskState::Completed);
    let writes = f.store.writes_of(&completed.id);
    assert_eq!(
        written_states(&writes),
        [TaskState::Working, TaskState::Completed]
    );
    // The turn fails after the save: the FAILED write carries it.
    let failed = f.run("keep-fail b").await;
    assert_eq!(failed.status.state, TaskState::Failed);
    // The task is canceled while its turn waits after the save: the CANCELED write carries it.
    let (waiting, stream) = f.submit(Message::user_text("keep-wait c")).await.unwrap();
    f.script.saved.notified().await;
    f.manager
        .cancel(&waiting.id, &Scope::default())
        .await
        .unwrap();
    let _: Vec<_> = stream.collect().await;

    for (task, state, kept) in [
        (&completed, TaskState::Completed, "a"),
        (&failed, TaskState::Failed, "b"),
        (&waiting, TaskState::Canceled, "c"),
    ] {
        let stored = f.store.get(&task.id).await.unwrap().unwrap();
        assert_eq!(stored.task.status.state, state);
        assert_eq!(
            stored.private,
            serde_json::json!({ "kept": kept }),
            "{state}"
        );
    }
}

#[tokio::test]
async fn an_appended_annotation_is_written_at_once_and_the_turn_reads_its_own() {
    let f = fixture(Limits::default()).await;
    let done = f.run("link x").await;
    let writes = f.store.writes_of(&done.id);
    // SUBMITTED with WORKING, the link, the artifact (with the value set), COMPLETED.
    assert_eq!(
        written_states(&writes),
        [
            TaskState::Working,
            TaskState::Working,
            TaskState::Working,
            TaskState::Completed
        ]
    );
    let mew = |w: &StoredTask| w.task.metadata.as_ref().unwrap()["mew"].clone();
    let x = serde_json::to_value(link("x")).unwrap();
    assert_eq!(
        mew(&writes[1]),
        serde_json::json!({ "role": "scripted", "children": [x] })
    );
    assert_eq!(
        mew(&writes[2]),
        serde_json::json!({ "role": "scripted", "children": [x], "usage": seven_tokens() })
    );
    assert_eq!(
        done.artifacts[0].parts[0].as_text(),
        Some("x"),
        "the turn sees the link it recorded"
    );
}

#[tokio::test]
async fn a_stopping_node_hands_back_what_the_next_start_can_take_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store: Arc<dyn TaskStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let script = Arc::new(Script {
        resumable: true,
        ..Script::default()
    });
    let roles = Arc::new(OneRole {
        role: role(),
        script: script.clone(),
    });
    let limits = Limits {
        max_running: 1,
        ..Limits::default()
    };
    let manager = TaskManager::start(store.clone(), roles.clone(), limits.clone())
        .await
        .unwrap();
    let submit = |text: &str| submission(role(), Message::user_text(text));
    let saved = script.saved.notified();
    let (running, stream) = manager
        .submit(submit("resume"), &Scope::default())
        .await
        .unwrap();
    saved.await;
    let (queued, _) = manager
        .submit(submit("done later"), &Scope::default())
        .await
        .unwrap();

    manager.shutdown(Duration::from_secs(20)).await;
    // The subscription ends without a final event: the task goes on elsewhere, later.
    let seen: Vec<StreamResponse> = stream.map(Result::unwrap).collect().await;
    assert!(
        seen.iter().all(|e| match e {
            StreamResponse::StatusUpdate(u) => !u.status.state.is_terminal(),
            _ => true,
        }),
        "{seen:?}"
    );
    let left = store.get(&running.id).await.unwrap().unwrap();
    assert_eq!(left.task.status.state, TaskState::Working);
    assert_eq!(left.attempts, -1, "a hand-back is not counted as a loss");
    let waiting = store.get(&queued.id).await.unwrap().unwrap();
    assert_eq!(waiting.task.status.state, TaskState::Submitted);

    let manager = TaskManager::start(store, roles, limits).await.unwrap();
    let recovery = manager.recover().await.unwrap();
    assert_eq!((recovery.started, recovery.resumed), (1, 1));
    let done = wait_until(&manager, &running.id, TaskState::Completed).await;
    assert_eq!(
        done.task.artifacts[0].parts[0].as_text(),
        Some(r#"continued from {"step":1}"#)
    );
    wait_until(&manager, &queued.id, TaskState::Completed).await;
}
