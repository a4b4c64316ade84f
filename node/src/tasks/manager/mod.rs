//! The task manager: every task on the node, its state machine, limits, events and runs.
//!
//! Each change to a task is applied to its snapshot, persisted, and only then
//! broadcast, under the task's own lock, so subscribers see changes in the
//! order they were stored. Work runs on tracked tokio tasks: a stream that is
//! dropped never stops it, and a subscriber that lags gets a fresh snapshot
//! instead of the events it missed. A task's push configs live beside its
//! snapshot: each event is enqueued for them in the write that persists it,
//! and `crate::push` delivers the outbox. What a turn keeps without announcing
//! it (the runner's private state, a value it annotates the task with) waits in
//! the snapshot and is written with the next event, at the latest the one that
//! ends the turn: one write fewer each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use mew_cards::{
    A2aError, ArtifactId, ContextId, ErrorKind, Message, MessageId, Role, RoleDefinition,
    StreamResponse, Task, TaskId, TaskPushNotificationConfig, TaskState, TaskStatus,
    TaskStatusUpdateEvent, Timestamp,
};
use mew_transport::{Error, EventStream};
use tokio::sync::{Mutex, Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};

use crate::telemetry::TraceParent;

mod cluster;
mod listing;
mod push_configs;
mod recover;
mod sink;
mod slots;
mod watch;

#[cfg(test)]
pub(crate) use push_configs::MAX_PUSH_CONFIGS;
use sink::Sink;
use slots::{Full, Slot as Place, Slots, Waiting};

use super::executor::{Annotation, EventSink, ExecError, Executor, Turn};
use super::store::{OutboxRow, StoreError, StoredTask, TaskStore};

/// How much work the node takes on.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Turns running at once; more wait in SUBMITTED, each role's first come first served,
    /// the roles in turn (see `slots`).
    pub(crate) max_running: usize,
    /// Turns of one role running at once, unless the role's `maxRunning` says otherwise.
    pub(crate) max_running_per_role: usize,
    /// Tasks waiting for a slot; beyond this, new tasks are refused.
    pub(crate) max_queued: usize,
    /// How long a turn waits for a slot before its task says why (`None`: it never says).
    pub(crate) queue_notice: Option<Duration>,
    /// Time allowed for one turn (`None`: unlimited).
    pub(crate) task_timeout: Option<Duration>,
    /// Events buffered per task for slow subscribers.
    pub(crate) event_buffer: usize,
    /// History messages per task in `ListTasks` when the caller asks for no number.
    pub(crate) list_history: usize,
    /// A `ListTasks` page ends early once the tasks read for it come to this many bytes of
    /// stored JSON (it always holds one task).
    pub(crate) max_list_bytes: usize,
    /// How many times a turn is started over after the node running it was lost; the next
    /// loss fails the task.
    pub(crate) max_attempts: u32,
    /// How often a replica on a shared store renews its leases and looks for work left by
    /// lost replicas.
    pub(crate) heartbeat: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_running: 16,
            max_running_per_role: 12,
            max_queued: 1024,
            queue_notice: Some(Duration::from_secs(10)),
            task_timeout: Some(Duration::from_secs(30 * 60)),
            event_buffer: 64,
            list_history: 10,
            max_list_bytes: 4 * 1024 * 1024,
            max_attempts: 3,
            heartbeat: Duration::from_secs(5),
        }
    }
}

/// What the manager needs to know about roles.
pub(crate) trait Roles: Send + Sync {
    /// The role with this name.
    fn role(&self, name: &str) -> Option<Arc<RoleDefinition>>;
    /// What runs this role's turns.
    fn executor(&self, role: &RoleDefinition) -> Arc<dyn Executor>;
}

/// Which tasks a caller may see: one role's (or all), one principal's (or all).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    /// Only this role's tasks.
    pub(crate) role: Option<String>,
    /// Only this principal's tasks.
    pub(crate) owner: Option<String>,
}

impl Scope {
    fn admits(&self, task: &StoredTask) -> bool {
        self.role.as_ref().is_none_or(|r| *r == task.role)
            && self
                .owner
                .as_ref()
                .is_none_or(|o| task.owner.as_ref() == Some(o))
    }
}

/// A new message for a role, as the manager takes it.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The role to run a new task with (ignored when the message continues a task).
    pub(crate) role: Arc<RoleDefinition>,
    /// The message.
    pub(crate) message: Message,
    /// Who sends it.
    pub(crate) owner: Option<String>,
    /// The delegating task, if any.
    pub(crate) parent: Option<TaskId>,
    /// Metadata for a new task.
    pub(crate) metadata: Option<mew_cards::Metadata>,
    /// The runner's starting state for a new task (`Null`: none); a fork starts
    /// from its parent's conversation.
    pub(crate) private: serde_json::Value,
    /// A push config for a new task (checked by the caller, with its id set): registered
    /// before the task's first event, so its webhook receives every event.
    pub(crate) push: Option<TaskPushNotificationConfig>,
    /// The new task's id, when it had to be named before the task existed (a `TaskReceived`
    /// hook is told it); `None`: a fresh one.
    pub(crate) id: Option<TaskId>,
}

/// An event with its position in its task's sequence.
#[derive(Clone, Debug)]
struct Stamped {
    seq: u64,
    event: StreamResponse,
}

/// A task that is running or can still change.
struct Live {
    id: TaskId,
    context_id: ContextId,
    /// The principal the task belongs to: its turns read only this owner's tasks of the
    /// context, and its children belong to it too.
    owner: Option<String>,
    cancel: CancellationToken,
    /// Canceled when this node lets go of the task unfinished: stopping, it hands the task
    /// back (see [`TaskManager::fail`]), or another replica took it over. Nothing more is
    /// written through this entry, and its subscriptions end without a final event.
    released: CancellationToken,
    /// Poked when the shared store says the task changed (see `cluster.rs`).
    poke: Notify,
    /// Whether a follower reads what another replica writes of the task into this entry.
    following: std::sync::atomic::AtomicBool,
    /// Set while a new task waits for a slot with its lease let go for another replica to
    /// take: this replica must claim it again before it writes it.
    offered: std::sync::atomic::AtomicBool,
    /// The trace the task started in (`metadata.mew.traceparent`): each of its turns is a
    /// span of it, wherever and whenever it runs.
    trace: Option<TraceParent>,
    state: Mutex<LiveState>,
}

struct LiveState {
    stored: StoredTask,
    events: broadcast::Sender<Stamped>,
    /// The number of the current turn (the first is 1).
    turn: u64,
    /// True while the current turn is queued or running and has not reached a
    /// terminal or interrupted state. A turn that has asked for input is over,
    /// even while its program is still exiting: the reply starts the next turn.
    busy: bool,
    /// The task's push configs, as stored: every recorded event is enqueued for each.
    push: Vec<TaskPushNotificationConfig>,
    /// Annotations made during the running turn and not written yet: the next write of
    /// the task (its next event, at the latest the one that ends the turn) applies them.
    /// The runner's private state needs no such list: `stored.private` is what that write
    /// stores.
    annotations: Vec<Annotation>,
}

impl Live {
    /// Another replica took the task over: nothing more is written through this entry, and
    /// what runs it stops.
    fn lost(&self) {
        self.released.cancel();
        self.cancel.cancel();
    }
}

impl LiveState {
    /// Applies the annotations not written yet to the snapshot, before it is written.
    fn apply_annotations(&mut self) {
        for annotation in &self.annotations {
            apply_annotation(annotation, &mut self.stored.task.metadata);
        }
    }
}

/// Applies `annotation` to a task's metadata: sets `mew.usage` or `mew.todos`, or appends to
/// `mew.children`.
/// Only that field changes: whatever else `mew` holds (a caller's fields, say) stays as it is.
fn apply_annotation(annotation: &Annotation, metadata: &mut Option<mew_cards::Metadata>) {
    let metadata = metadata.get_or_insert_with(Default::default);
    match annotation {
        Annotation::Usage(usage) => mew_cards::mew::MewMetadata::set_usage(metadata, usage),
        Annotation::Child(link) => mew_cards::mew::MewMetadata::push_child(metadata, link),
        Annotation::Todos(todos) => mew_cards::mew::MewMetadata::set_todos(metadata, todos),
    }
}

fn store_error(error: StoreError) -> Error {
    match error {
        // Another principal's context is, to this caller, one that does not exist.
        StoreError::ForeignContext(context) => context_not_found(&context),
        error => Error::Protocol(A2aError::internal(error.to_string())),
    }
}

/// What a caller is told of a context it may not use: that there is no such context (the
/// spec's "not found", as for a task the caller may not see).
fn context_not_found(context: &ContextId) -> Error {
    protocol(
        ErrorKind::TaskNotFound,
        format!("context {context} not found"),
    )
}

fn protocol(kind: ErrorKind, message: impl Into<String>) -> Error {
    Error::Protocol(A2aError::new(kind, message))
}

/// The reason given to tasks that were running when the node went away, and whose role cannot
/// start a turn over.
pub(crate) const RESTART_REASON: &str =
    "the node restarted while this task was running; its work was lost";
const SHUTDOWN_REASON: &str = "the node shut down while this task was running";

/// Every task on the node.
pub(crate) struct TaskManager {
    store: Arc<dyn TaskStore>,
    /// Poked after a write that enqueued push notifications.
    push_wake: Arc<Notify>,
    roles: Arc<dyn Roles>,
    limits: Limits,
    live: SyncMutex<HashMap<TaskId, Arc<Live>>>,
    slots: Arc<Slots>,
    queued: AtomicUsize,
    /// Whether other replicas beat at the last heartbeat: a new task that waits for a slot is
    /// offered to them only then.
    others_alive: AtomicBool,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl TaskManager {
    /// A manager over `store`. What an earlier run of the node left unfinished stays as it
    /// is until [`TaskManager::recover`] takes it up.
    pub(crate) async fn start(
        store: Arc<dyn TaskStore>,
        roles: Arc<dyn Roles>,
        limits: Limits,
    ) -> Result<Arc<Self>, StoreError> {
        let changes = store.changes();
        let manager = Arc::new(Self {
            store,
            push_wake: Arc::new(Notify::new()),
            roles,
            slots: Slots::new(limits.max_running),
            limits,
            live: SyncMutex::new(HashMap::new()),
            queued: AtomicUsize::new(0),
            others_alive: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        if let Some(changes) = changes {
            tokio::spawn(manager.clone().run_cluster(changes));
        }
        Ok(manager)
    }

    /// What the push dispatcher waits on: poked after each write that enqueued notifications
    /// (the failed tasks at start enqueued theirs before this manager existed).
    pub(crate) fn push_wake(&self) -> Arc<Notify> {
        self.push_wake.clone()
    }

    fn live_map(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<Live>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tasks this manager holds live now (running, queued, asking for input and loaded,
    /// or just ended and not yet let go), counted by role and state: what `/metrics` reports.
    /// Its cost is bounded by the live set, never by the store.
    pub(crate) async fn live_counts(&self) -> Vec<(String, TaskState, i64)> {
        let live: Vec<Arc<Live>> = self.live_map().values().cloned().collect();
        let mut counts: HashMap<(String, TaskState), i64> = HashMap::new();
        for entry in live {
            let state = entry.state.lock().await;
            let key = (state.stored.role.clone(), state.stored.task.status.state);
            *counts.entry(key).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((role, state), count)| (role, state, count))
            .collect()
    }

    /// The live entry of a task, loading it from the store if it can still change.
    async fn live_or_load(&self, id: &TaskId, scope: &Scope) -> Result<LiveOrDone, Error> {
        let existing = self.live_map().get(id).cloned();
        if let Some(live) = existing {
            let state = live.state.lock().await;
            if !scope.admits(&state.stored) {
                return Err(Error::Protocol(A2aError::task_not_found(id)));
            }
            drop(state);
            return Ok(LiveOrDone::Live(live));
        }
        let stored = self
            .store
            .get(id)
            .await
            .map_err(store_error)?
            .filter(|t| scope.admits(t))
            .ok_or_else(|| Error::Protocol(A2aError::task_not_found(id)))?;
        if stored.task.status.state.is_terminal() {
            return Ok(LiveOrDone::Done(Box::new(stored)));
        }
        let push = self.store.push_configs(id).await.map_err(store_error)?;
        // An interrupted task from the store (or one another call is loading): make it live once.
        let mut map = self.live_map();
        let live = map
            .entry(id.clone())
            .or_insert_with(|| self.new_live(stored, push))
            .clone();
        Ok(LiveOrDone::Live(live))
    }

    fn new_live(&self, stored: StoredTask, push: Vec<TaskPushNotificationConfig>) -> Arc<Live> {
        let (events, _) = broadcast::channel(self.limits.event_buffer.max(1));
        let trace = mew_cards::mew::MewMetadata::read(stored.task.metadata.as_ref())
            .traceparent
            .map(|traceparent| TraceParent {
                traceparent,
                tracestate: None,
            });
        Arc::new(Live {
            trace,
            id: stored.task.id.clone(),
            context_id: stored.task.context_id.clone(),
            owner: stored.owner.clone(),
            cancel: self.shutdown.child_token(),
            released: CancellationToken::new(),
            poke: Notify::new(),
            following: std::sync::atomic::AtomicBool::new(false),
            offered: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(LiveState {
                stored,
                events,
                turn: 0,
                busy: false,
                push,
                annotations: Vec::new(),
            }),
        })
    }

    /// Takes a message: starts a new task, or resumes the task it names.
    /// Returns the task as it is now and a subscription to what follows.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        submission: Submission,
        scope: &Scope,
    ) -> Result<(Task, EventStream), Error> {
        validate_message(&submission.message)?;
        match submission.message.task_id.clone() {
            Some(id) => self.resume(id, submission.message, scope).await,
            None => self.create(submission).await,
        }
    }

    /// Continues the interrupted task `id` with a user message of `text`, as its owner would:
    /// what the node itself sends when what the task waited for happened (an MCP sign-in it
    /// asked for completed). A task that no longer waits is left alone.
    pub(crate) async fn continue_task(
        self: &Arc<Self>,
        id: TaskId,
        text: String,
    ) -> Result<(), Error> {
        let mut message = Message::user_text(text);
        message.task_id = Some(id.clone());
        self.resume(id, message, &Scope::default())
            .await
            .map(|_| ())
    }

    async fn create(
        self: &Arc<Self>,
        submission: Submission,
    ) -> Result<(Task, EventStream), Error> {
        // A task delegated by a task running on this node runs on its parent's slot; a
        // caller naming someone else's task as its parent waits like anyone.
        let parent_runs_here = submission.parent.as_ref().is_some_and(|parent| {
            self.live_map()
                .get(parent)
                .is_some_and(|live| live.owner == submission.owner)
        });
        // A task that finds a slot free starts at once: it is stored WORKING in the write that
        // creates it (its SUBMITTED logged before), one write and one commit fewer before its
        // answer. Otherwise it takes its place in the queue now, before its first write.
        let slot = if parent_runs_here {
            Slot::Parents
        } else {
            match self
                .slots
                .take(&submission.role.name, self.role_limit(&submission.role))
            {
                Ok(place) => Slot::Taken(place),
                Err(waiting) => Slot::Queued(waiting),
            }
        };
        // Only a task that waits counts against the queue's bound (one refused here leaves
        // its place in the queue as its `Waiting` drops).
        let waits = !matches!(slot, Slot::Taken(_));
        if waits {
            let queued = self.queued.fetch_add(1, Ordering::SeqCst);
            if queued >= self.limits.max_queued {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                return Err(protocol(
                    ErrorKind::Internal,
                    format!("the node has {queued} tasks waiting already; try again later"),
                ));
            }
        }
        // A context made here has no earlier tasks: its first turn need not read them.
        let fresh_context = submission.message.context_id.is_none();
        let role = submission.role.clone();
        let (mut stored, message, push) = new_task(submission);
        let id = stored.task.id.clone();
        let mut events = Vec::new();
        if matches!(slot, Slot::Taken(_)) {
            let working = status_event(&stored.task, TaskStatus::new(TaskState::Working));
            events.push(StreamResponse::Task(stored.task.clone()));
            stored.task.apply(&working);
            stored.generation += 1;
            events.push(working);
        }
        // The webhook's first notification is the task as it starts; a context of another
        // principal is refused in the same write.
        let outbox = if push.is_empty() {
            Ok(Vec::new())
        } else if events.is_empty() {
            outbox_rows(&push, &StreamResponse::Task(stored.task.clone()))
        } else {
            events.iter().try_fold(Vec::new(), |mut rows, event| {
                rows.extend(outbox_rows(&push, event)?);
                Ok(rows)
            })
        };
        let written = match outbox {
            Ok(outbox) => self.store.create(&stored, &events, &push, &outbox).await,
            Err(e) => Err(e),
        };
        if written.is_ok() && !push.is_empty() {
            self.push_wake.notify_one();
        }
        if let Err(e) = written {
            if waits {
                self.queued.fetch_sub(1, Ordering::SeqCst);
            }
            return Err(store_error(e));
        }
        let live = self.new_live(stored, push);
        self.live_map().insert(id, live.clone());
        let (task, stream) = {
            let mut state = live.state.lock().await;
            state.turn = 1;
            state.busy = true;
            let stream = self.watch_opening(&live, &state, StreamResponse::ends_stream, events);
            (state.stored.task.clone(), stream)
        };
        let start = TurnStart {
            resumed: false,
            fresh_context,
            recovered: false,
        };
        self.spawn_turn(live, role, message, start, 1, slot);
        Ok((task, stream))
    }

    /// Stores a new task for `submission` that was refused before it started (a
    /// `TaskReceived` hook blocked it): `SUBMITTED`, then `REJECTED` with `reason` as its
    /// status message. Returns the task and a stream that yields it and ends.
    pub(crate) async fn reject(
        &self,
        submission: Submission,
        reason: &str,
    ) -> Result<(Task, EventStream), Error> {
        validate_message(&submission.message)?;
        let (mut stored, _, push) = new_task(Submission {
            private: serde_json::Value::Null,
            ..submission
        });
        self.store
            .create(&stored, &[], &[], &[])
            .await
            .map_err(store_error)?;
        let refusal = agent_message(&stored.task, reason.to_owned());
        let status = TaskStatus {
            state: TaskState::Rejected,
            message: Some(refusal),
            timestamp: Some(Timestamp::now()),
        };
        let event = status_event(&stored.task, status.clone());
        stored.task.status = status;
        stored.generation += 1;
        // A webhook learns of the refusal: the task as it ends.
        let outbox =
            outbox_rows(&push, &StreamResponse::Task(stored.task.clone())).map_err(store_error)?;
        self.store
            .put_with_events(&stored, std::slice::from_ref(&event), &push, &outbox)
            .await
            .map_err(store_error)?;
        ended(&stored);
        if !push.is_empty() {
            self.push_wake.notify_one();
        }
        let generation = stored.generation;
        let task = stored.task;
        let stream = EventStream::numbered(futures_util::stream::iter([Ok((
            Some(generation),
            StreamResponse::Task(task.clone()),
        ))]));
        Ok((task, stream))
    }

    async fn resume(
        self: &Arc<Self>,
        id: TaskId,
        message: Message,
        scope: &Scope,
    ) -> Result<(Task, EventStream), Error> {
        let live = match self.live_or_load(&id, scope).await? {
            LiveOrDone::Done(stored) => {
                return Err(protocol(
                    ErrorKind::UnsupportedOperation,
                    format!(
                        "task {id} is {}: it takes no more messages; continue in its context with a new task",
                        stored.task.status.state
                    ),
                ));
            }
            LiveOrDone::Live(live) => live,
        };
        let claimed = self.store.shared() && self.claim(&live).await?;
        let mut message = message;
        let checked = self.start_next_turn(&live, &mut message).await;
        if claimed && checked.is_err() {
            // The task stays as it was: let another replica continue it.
            if let Err(e) = self.store.release(&id).await {
                warn!(error = %e, "cannot let go of a task that was not continued");
            }
        }
        let (task, stream, role, turn) = checked?;
        self.queued.fetch_add(1, Ordering::SeqCst);
        let start = TurnStart {
            resumed: true,
            fresh_context: false,
            recovered: false,
        };
        self.spawn_turn(live, role, message, start, turn, Slot::Wait);
        Ok((task, stream))
    }

    /// Checks that `live` takes `message` now (it asks for input) and records its WORKING
    /// state: the task, a stream of what follows, its role and the number of the new turn.
    async fn start_next_turn(
        &self,
        live: &Arc<Live>,
        message: &mut Message,
    ) -> Result<(Task, EventStream, Arc<RoleDefinition>, u64), Error> {
        let id = live.id.clone();
        let (task, stream, role, turn) = {
            let mut state = live.state.lock().await;
            let current = state.stored.task.status.state;
            if !current.is_interrupted() || state.busy {
                let why = if current.is_terminal() {
                    "is over"
                } else {
                    "is still running"
                };
                return Err(protocol(
                    ErrorKind::UnsupportedOperation,
                    format!(
                        "task {id} {why} ({current}); it takes a message only when it asks for input"
                    ),
                ));
            }
            if let Some(context) = &message.context_id
                && *context != state.stored.task.context_id
            {
                return Err(protocol(
                    ErrorKind::InvalidParams,
                    format!(
                        "task {id} belongs to context {}, not {context}",
                        state.stored.task.context_id
                    ),
                ));
            }
            let role = self.roles.role(&state.stored.role).ok_or_else(|| {
                protocol(
                    ErrorKind::UnsupportedOperation,
                    format!(
                        "task {id} belongs to role {:?}, which this node no longer has",
                        state.stored.role
                    ),
                )
            })?;
            message.context_id = Some(state.stored.task.context_id.clone());
            state.stored.task.history.push(message.clone());
            let status = TaskStatus::new(TaskState::Working);
            let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: id.clone(),
                context_id: state.stored.task.context_id.clone(),
                status,
                metadata: None,
            });
            self.record(&mut state, event).await.map_err(store_error)?;
            state.turn += 1;
            state.busy = true;
            let stream = self.watch(live, &state, StreamResponse::ends_stream);
            (state.stored.task.clone(), stream, role, state.turn)
        };
        Ok((task, stream, role, turn))
    }

    /// Refuses a context that `owner` may not use (it holds another principal's task), as
    /// not found. The write of a new task checks it again, atomically; this early check
    /// keeps what runs before that write (`TaskReceived` hooks) from seeing the context.
    pub(crate) async fn check_context(
        &self,
        context: &ContextId,
        owner: Option<&str>,
    ) -> Result<(), Error> {
        if self
            .store
            .context_admits(context, owner)
            .await
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(context_not_found(context))
        }
    }

    async fn record(&self, state: &mut LiveState, event: StreamResponse) -> Result<(), StoreError> {
        let recorded = record(self.store.as_ref(), &self.push_wake, state, event).await;
        if let Err(StoreError::Fenced(id)) = &recorded {
            self.lose(id);
        }
        recorded
    }

    fn spawn_turn(
        self: &Arc<Self>,
        live: Arc<Live>,
        role: Arc<RoleDefinition>,
        message: Message,
        start: TurnStart,
        turn: u64,
        slot: Slot,
    ) {
        let manager = self.clone();
        let span = info_span!(
            "task",
            task_id = %live.id,
            context_id = %live.context_id,
            role = %role.name
        );
        let traced = turn_span(&live, &role.name, turn);
        self.tracker.spawn(
            async move {
                // A turn that holds its slot already was never counted as waiting.
                let waited = !matches!(slot, Slot::Taken(_));
                let permit = match slot {
                    Slot::Taken(place) => (!live.cancel.is_cancelled()).then_some(Some(place)),
                    Slot::Wait | Slot::Queued(_) => {
                        match manager.slot_or_offer(&live, &role, slot).await {
                            Waited::Slot(permit) => Some(Some(permit)),
                            Waited::Cancelled => None,
                            Waited::Elsewhere => {
                                manager.queued.fetch_sub(1, Ordering::SeqCst);
                                return;
                            }
                        }
                    }
                    // Its parent holds a slot and waits for it: waiting too could deadlock.
                    Slot::Parents => (!live.cancel.is_cancelled()).then_some(None),
                };
                if waited {
                    manager.queued.fetch_sub(1, Ordering::SeqCst);
                }
                if let Some(_permit) = permit {
                    manager.run_turn(&live, role, message, start, turn).await;
                }
                manager.finish(&live, turn).await;
            }
            .instrument(traced)
            .instrument(span),
        );
    }

    /// A slot for the turn of `live`. On a shared store with other replicas alive, a new task
    /// that has to wait for one is offered to them meanwhile (its lease let go, which wakes them): the
    /// first with room takes it, and this replica follows it instead. Only a task that has not
    /// started is offered: a continuation's turn has begun (WORKING), and taking it over
    /// would count as a lost replica's work.
    async fn slot_or_offer(
        self: &Arc<Self>,
        live: &Arc<Live>,
        role: &RoleDefinition,
        slot: Slot,
    ) -> Waited {
        let mut waiting = match slot {
            Slot::Queued(waiting) => waiting,
            _ => match self.slots.take(&role.name, self.role_limit(role)) {
                Ok(place) => return Waited::Slot(place),
                Err(waiting) => waiting,
            },
        };
        let offered = self.store.shared()
            && self.others_alive().await
            && live.state.lock().await.stored.task.status.state == TaskState::Submitted
            && {
                live.offered.store(true, Ordering::SeqCst);
                match self.store.offer(&live.id).await {
                    Ok(()) => true,
                    Err(e) => {
                        warn!(task_id = %live.id, error = %e, "cannot offer a waiting task to the other replicas");
                        false
                    }
                }
            };
        let waited = self.wait_offered(live, &mut waiting, offered).await;
        live.offered.store(false, Ordering::SeqCst);
        waited
    }

    /// How many turns of `role` may run at once: its own `maxRunning`, or the node's limit per
    /// role.
    fn role_limit(&self, role: &RoleDefinition) -> usize {
        match usize::try_from(role.max_running) {
            Ok(0) | Err(_) => self.limits.max_running_per_role,
            Ok(own) => own,
        }
    }

    /// Whether other replicas are alive: as the last heartbeat found, or, when it found none,
    /// as the store says now (a replica that started since is not missed until the next beat).
    async fn others_alive(&self) -> bool {
        if self.others_alive.load(Ordering::SeqCst) {
            return true;
        }
        let alive = self
            .store
            .replicas()
            .await
            .is_ok_and(|replicas| replicas.iter().filter(|r| r.alive).count() > 1);
        self.others_alive.store(alive, Ordering::SeqCst);
        alive
    }

    /// The rest of [`Self::slot_or_offer`].
    async fn wait_offered(
        self: &Arc<Self>,
        live: &Arc<Live>,
        waiting: &mut Waiting,
        offered: bool,
    ) -> Waited {
        if !offered {
            return self
                .wait_for_slot(live, waiting)
                .await
                .map_or(Waited::Cancelled, Waited::Slot);
        }
        let permit = tokio::select! {
            permit = self.wait_for_slot(live, waiting) => permit,
            () = self.taken_elsewhere(live) => {
                live.state.lock().await.busy = false;
                self.follow(live);
                return Waited::Elsewhere;
            }
        };
        let cancelled = permit.is_none();
        if cancelled
            && live
                .state
                .lock()
                .await
                .stored
                .task
                .status
                .state
                .is_terminal()
        {
            // Cancelled here, after a claim (see `TaskManager::claim`).
            return Waited::Cancelled;
        }
        let taken_back = match self.store.claim(&live.id).await {
            Ok(Some(stored)) => stored.generation == live.state.lock().await.stored.generation,
            Ok(None) => false,
            Err(e) => {
                warn!(task_id = %live.id, error = %e, "cannot take back a task offered to the other replicas");
                false
            }
        };
        if taken_back {
            return permit.map_or(Waited::Cancelled, Waited::Slot);
        }
        // Another replica runs it: this one follows it for whoever waits here. A cancel is
        // passed on to it, but not this node's shutdown (which also ends the wait): that
        // task goes on where it runs.
        if cancelled
            && !self.shutdown.is_cancelled()
            && let Err(e) = self.store.request_cancel(&live.id).await
        {
            warn!(task_id = %live.id, error = %e, "cannot pass a cancel on to the replica running the task");
        }
        live.state.lock().await.busy = false;
        self.follow(live);
        Waited::Elsewhere
    }

    /// Returns once another replica has written the offered task `live` (it started it).
    async fn taken_elsewhere(&self, live: &Live) {
        let ours = live.state.lock().await.stored.generation;
        loop {
            tokio::select! {
                () = live.poke.notified() => {}
                () = tokio::time::sleep(cluster::FOLLOW_POLL) => {}
            }
            if let Ok(Some(fresh)) = self.store.get(&live.id).await
                && fresh.generation > ours
            {
                return;
            }
        }
    }

    /// The slot `waiting` waits for, or `None` when the task is cancelled first. A turn that
    /// waits longer than `limits.queue_notice` has its task say why, once.
    async fn wait_for_slot(&self, live: &Live, waiting: &mut Waiting) -> Option<Place> {
        if let Some(after) = self.limits.queue_notice {
            tokio::select! {
                place = waiting.slot() => return Some(place),
                () = live.cancel.cancelled() => return None,
                () = tokio::time::sleep(after) => {}
            }
            self.say_why_it_waits(live, waiting.full, after).await;
        }
        tokio::select! {
            place = waiting.slot() => Some(place),
            () = live.cancel.cancelled() => None,
        }
    }

    /// Records that `live`'s turn has waited `after` for a slot, and for which limit: a
    /// status update in the state it is in (SUBMITTED for a new task) whose message says why,
    /// its `mew.waiting` for machines (it also ends a blocking send (see `server::agent`). A task offered
    /// to other replicas is not this replica's to write.
    async fn say_why_it_waits(&self, live: &Live, full: Full, after: Duration) {
        if live.offered.load(Ordering::SeqCst) {
            return;
        }
        let mut state = live.state.lock().await;
        if !state.busy || state.stored.task.status.state.is_terminal() {
            return;
        }
        let (limit, running, max, setting) = match full {
            Full::Role { running, limit } => (
                "role",
                running,
                limit,
                format!(
                    "role {} runs {running} of its {limit} tasks at once (its maxRunning, or limits.max_running_per_role)",
                    state.stored.role
                ),
            ),
            Full::Node { running, limit } => (
                "node",
                running,
                limit,
                format!(
                    "the node runs {running} of its {limit} tasks at once (limits.max_running_tasks)"
                ),
            ),
        };
        let text = format!(
            "waiting to start for {}: {setting}; it starts when a slot frees",
            humanize(after)
        );
        let mut message = agent_message(&state.stored.task, text);
        let note = mew_cards::mew::MewMetadata {
            waiting: Some(mew_cards::mew::WaitNote {
                limit: limit.to_owned(),
                running: u32::try_from(running).unwrap_or(u32::MAX),
                max: u32::try_from(max).unwrap_or(u32::MAX),
            }),
            ..Default::default()
        };
        message.metadata = Some(note.to_metadata());
        let mut status = TaskStatus::new(state.stored.task.status.state);
        status.message = Some(message);
        let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: live.id.clone(),
            context_id: state.stored.task.context_id.clone(),
            status,
            metadata: None,
        });
        if let Err(e) = self.record(&mut state, event).await {
            warn!(task_id = %live.id, error = %e, "cannot record why a task waits");
        }
    }

    async fn run_turn(
        &self,
        live: &Arc<Live>,
        role: Arc<RoleDefinition>,
        message: Message,
        start: TurnStart,
        turn: u64,
    ) {
        let resumed = start.resumed;
        let (task_id, context_id, history, private, depth) = {
            let mut state = live.state.lock().await;
            if state.turn != turn || !state.busy {
                return;
            }
            if !resumed && state.stored.task.status.state != TaskState::Working {
                let event = status_event(&state.stored.task, TaskStatus::new(TaskState::Working));
                if let Err(e) = self.record(&mut state, event).await {
                    warn!(error = %e, "cannot persist the WORKING state");
                    return;
                }
            }
            let own = state.stored.task.history.clone();
            (
                state.stored.task.id.clone(),
                state.stored.task.context_id.clone(),
                own,
                state.stored.private.clone(),
                delegation_depth(state.stored.task.metadata.as_ref()),
            )
        };
        let history_read = if start.fresh_context {
            Ok((Vec::new(), serde_json::Value::Null))
        } else {
            self.context_history(&context_id, live.owner.as_deref(), &task_id)
                .await
        };
        let (mut earlier, earlier_private) = match history_read {
            Ok(earlier) => earlier,
            Err(e) => {
                self.fail(
                    live,
                    format!("cannot read the context's history: {e}"),
                    turn,
                )
                .await;
                return;
            }
        };
        // This task's own history, without the message that starts this turn.
        earlier.extend(own_history_before(&history, &message.message_id));
        let turn_number = turn;
        let turn = Turn {
            task_id,
            context_id,
            owner: live.owner.clone(),
            role: role.clone(),
            message,
            history: earlier,
            resumed,
            recovered: start.recovered,
            cancel: live.cancel.clone(),
            private,
            earlier_private,
            depth,
        };
        let sink: Arc<dyn EventSink> = Arc::new(Sink {
            store: self.store.clone(),
            push_wake: self.push_wake.clone(),
            live: live.clone(),
            turn: turn_number,
        });
        let executor = self.roles.executor(&role);
        let run = std::panic::AssertUnwindSafe(executor.run(turn, sink)).catch_unwind();
        let outcome = match self.limits.task_timeout {
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    live.cancel.cancel();
                    Ok(Err(ExecError(format!(
                        "timed out after {}",
                        humanize(limit)
                    ))))
                }
            },
            None => run.await,
        };
        match outcome {
            Ok(Ok(())) => self.complete_if_running(live, turn_number).await,
            Ok(Err(ExecError(reason))) => self.fail(live, reason, turn_number).await,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                self.fail(
                    live,
                    format!("the role's runner panicked: {what}"),
                    turn_number,
                )
                .await;
            }
        }
    }

    /// The history of the context's other tasks of `owner`, oldest first, and the private
    /// state of the newest of them (`Null` if none).
    async fn context_history(
        &self,
        context: &ContextId,
        owner: Option<&str>,
        current: &TaskId,
    ) -> Result<(Vec<Message>, serde_json::Value), StoreError> {
        let tasks: Vec<StoredTask> = self
            .store
            .context(context, owner)
            .await?
            .into_iter()
            .filter(|t| t.task.id != *current)
            .collect();
        let private = tasks
            .last()
            .map(|t| t.private.clone())
            .unwrap_or(serde_json::Value::Null);
        Ok((
            tasks.into_iter().flat_map(|t| t.task.history).collect(),
            private,
        ))
    }

    /// Completes the task unless turn `turn` already ended it or asked for input.
    async fn complete_if_running(&self, live: &Live, turn: u64) {
        let mut state = live.state.lock().await;
        if state.turn != turn || !state.busy {
            return;
        }
        let event = status_event(&state.stored.task, TaskStatus::new(TaskState::Completed));
        if let Err(e) = self.record(&mut state, event).await {
            warn!(error = %e, "cannot persist the COMPLETED state");
        }
    }

    /// Fails the task with `reason`, unless turn `turn` is already over (the
    /// task ended, asked for input, or a later turn runs). During shutdown the
    /// reason says the node shut down, and a task the next start can take up is handed
    /// back instead, left as it is stored: one that never started, and a turn whose role
    /// can start it over (it continues from its checkpoint).
    async fn fail(&self, live: &Live, reason: String, turn: u64) {
        let mut state = live.state.lock().await;
        if state.turn != turn || !state.busy || live.released.is_cancelled() {
            return;
        }
        if self.shutdown.is_cancelled() && self.can_hand_back(&state.stored) {
            // The next start counts the turn as started over: a hand-back is no loss.
            if state.stored.task.status.state == TaskState::Working {
                let mut handed = state.stored.clone();
                handed.attempts = handed.attempts.saturating_sub(1);
                if let Err(e) = self.store.put(&handed).await {
                    warn!(error = %e, "cannot hand the task back; its next start counts an attempt");
                }
            }
            // Another replica may take it at once.
            if let Err(e) = self.store.release(&live.id).await {
                warn!(error = %e, "cannot let go of the task; another replica takes it when its lease lapses");
            }
            info!(task_id = %live.id, "handed the task back for the next start or another replica");
            live.released.cancel();
            return;
        }
        let reason = if self.shutdown.is_cancelled() {
            SHUTDOWN_REASON.to_owned()
        } else {
            reason
        };
        let message = agent_message(&state.stored.task, reason);
        let event = status_event(
            &state.stored.task,
            TaskStatus::with_message(TaskState::Failed, message),
        );
        if let Err(e) = self.record(&mut state, event).await {
            warn!(error = %e, "cannot persist the FAILED state");
        }
    }

    /// Whether a task stopped by the node's shutdown can be left for the next start.
    fn can_hand_back(&self, stored: &StoredTask) -> bool {
        match stored.task.status.state {
            TaskState::Submitted => true,
            TaskState::Working => self
                .roles
                .role(&stored.role)
                .is_some_and(|role| self.roles.executor(&role).resumable(&role)),
            _ => false,
        }
    }

    /// Turn `turn` has returned: a turn that reached no end state fails (it
    /// was stopped while queued, say); a task that is over leaves the live set.
    async fn finish(&self, live: &Arc<Live>, turn: u64) {
        let unfinished = {
            let state = live.state.lock().await;
            state.turn == turn && state.busy
        };
        if unfinished {
            self.fail(
                live,
                "the task's turn ended without a result".to_owned(),
                turn,
            )
            .await;
        }
        let state = live.state.lock().await;
        if state.stored.task.status.state.is_terminal() || live.released.is_cancelled() {
            self.forget(live);
        }
    }

    /// Takes `live` out of the live set, unless another entry stands for its task now.
    fn forget(&self, live: &Arc<Live>) {
        let mut map = self.live_map();
        if map
            .get(&live.id)
            .is_some_and(|entry| Arc::ptr_eq(entry, live))
        {
            map.remove(&live.id);
        }
    }

    /// `GetTask`.
    pub(crate) async fn get(&self, id: &TaskId, scope: &Scope) -> Result<StoredTask, Error> {
        // On a shared store another replica may have written the task since: the store has
        // every change.
        let live = if self.store.shared() {
            None
        } else {
            self.live_map().get(id).cloned()
        };
        let stored = match live {
            Some(live) => Some(live.state.lock().await.stored.clone()),
            None => self.store.get(id).await.map_err(store_error)?,
        };
        stored
            .filter(|t| scope.admits(t))
            .ok_or_else(|| Error::Protocol(A2aError::task_not_found(id)))
    }

    /// `CancelTask`.
    pub(crate) async fn cancel(
        self: &Arc<Self>,
        id: &TaskId,
        scope: &Scope,
    ) -> Result<Task, Error> {
        let live = match self.live_or_load(id, scope).await? {
            LiveOrDone::Done(stored) => {
                return Err(protocol(
                    ErrorKind::TaskNotCancelable,
                    format!("task {id} is already {}", stored.task.status.state),
                ));
            }
            LiveOrDone::Live(live) => live,
        };
        if self.store.shared() && !self.claim(&live).await? {
            return self.cancel_elsewhere(&live, scope).await;
        }
        let mut state = live.state.lock().await;
        let current = state.stored.task.status.state;
        if current.is_terminal() {
            return Err(protocol(
                ErrorKind::TaskNotCancelable,
                format!("task {id} is already {current}"),
            ));
        }
        let event = status_event(&state.stored.task, TaskStatus::new(TaskState::Canceled));
        self.record(&mut state, event).await.map_err(store_error)?;
        live.cancel.cancel();
        let task = state.stored.task.clone();
        drop(state);
        // A turn still running sees its sink closed and its token canceled.
        self.live_map().remove(id);
        Ok(task)
    }

    /// Stops the node's work: new turns are refused a slot, running turns are
    /// canceled, and their tasks fail with a reason that says the node shut down.
    pub(crate) fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
    }

    /// [`TaskManager::stop`], then waits up to `grace` for the turns to end.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.stop();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            warn!(grace = %humanize(grace), "tasks still running after the shutdown grace period");
        }
    }
}

/// How a turn starts.
#[derive(Clone, Copy, Debug)]
struct TurnStart {
    /// The message answers the task's question (INPUT_REQUIRED).
    resumed: bool,
    /// The task created its context: there are no earlier tasks to read.
    fresh_context: bool,
    /// The turn was running when the node was lost, and starts over ([`Turn::recovered`]).
    recovered: bool,
}

/// How waiting for a slot ended.
enum Waited {
    /// This replica runs the turn.
    Slot(Place),
    /// The task was cancelled while it waited.
    Cancelled,
    /// Another replica took the offered task; this one follows it.
    Elsewhere,
}

/// Whether a turn waits for a slot of its own.
enum Slot {
    /// It takes one of the node's slots, in order.
    Wait,
    /// It waits in its role's queue already.
    Queued(Waiting),
    /// It holds one of the node's slots already.
    Taken(Place),
    /// It runs on the slot of its parent, a task running on this node.
    Parents,
}

enum LiveOrDone {
    Live(Arc<Live>),
    Done(Box<StoredTask>),
}

/// The span of a turn of `live`'s task, in the trace the task started in (when it has one),
/// linked to the span that made this turn start when that is another (the request that
/// answered the task's question, say).
fn turn_span(live: &Live, role: &str, turn: u64) -> tracing::Span {
    let span = crate::telemetry::span!(
        "turn",
        otel.name = %format_args!("turn {role}"),
        mew.task_id = %live.id,
        mew.context_id = %live.context_id,
        mew.role = %role,
        mew.turn = i64::try_from(turn).unwrap_or(i64::MAX),
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(trace) = &live.trace {
        let starter = TraceParent::current();
        crate::telemetry::set_parent(&span, trace.context());
        if let Some(starter) = starter.filter(|s| s.traceparent != trace.traceparent) {
            crate::telemetry::add_link(&span, &starter);
        }
    }
    span
}

/// The new task `submission` asks for, SUBMITTED, with its id (chosen earlier, or new),
/// context (given, or new) and role (in `metadata.mew.role`): the stored task, its first
/// message, and its push config (with the task's id), if any.
fn new_task(submission: Submission) -> (StoredTask, Message, Vec<TaskPushNotificationConfig>) {
    let id = submission.id.unwrap_or_else(TaskId::generate);
    let context_id = submission
        .message
        .context_id
        .clone()
        .unwrap_or_else(ContextId::generate);
    let mut message = submission.message;
    message.task_id = Some(id.clone());
    message.context_id = Some(context_id.clone());
    let now = Timestamp::now();
    let push = submission
        .push
        .map(|config| TaskPushNotificationConfig {
            task_id: id.clone(),
            ..config
        })
        .into_iter()
        .collect();
    // Whoever reads the task (a client listing them, another node) learns which role runs
    // it; a caller's own `mew.role` was removed before it got here.
    let mut metadata = submission.metadata.unwrap_or_default();
    mew_cards::mew::MewMetadata::set_role(&mut metadata, &submission.role.name);
    // The span it starts in (the request's, a delegation's): its turns join that trace.
    if let Some(trace) = TraceParent::current() {
        mew_cards::mew::MewMetadata::set_traceparent(&mut metadata, &trace.traceparent);
    }
    let stored = StoredTask {
        task: Task {
            id,
            context_id,
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: Some(now),
            },
            artifacts: Vec::new(),
            history: vec![message.clone()],
            metadata: Some(metadata),
        },
        role: submission.role.name.clone(),
        owner: submission.owner,
        parent: submission.parent,
        created: now,
        private: submission.private,
        attempts: 0,
        generation: 1,
    };
    (stored, message, push)
}

/// Applies `event` to the snapshot, persists it, then announces it; on a
/// storage failure the snapshot is left as it was and nothing is announced.
///
/// The write also stores what the turn kept without writing it (the runner's
/// private state, annotations): the turn's last event, which ends it (a final
/// state, INPUT_REQUIRED), always comes through here, so nothing kept is left
/// unwritten when a turn is over.
async fn record(
    store: &dyn TaskStore,
    push_wake: &Notify,
    state: &mut LiveState,
    event: StreamResponse,
) -> Result<(), StoreError> {
    record_as(store, push_wake, state, event, Stored::AsSent).await
}

/// How an event changes the stored snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    /// As A2A applies it.
    AsSent,
    /// A piece of streamed text: joined to the text its artifact ends with.
    JoiningText,
}

/// [`record`], applying `event` to the snapshot as `stored` says.
async fn record_as(
    store: &dyn TaskStore,
    push_wake: &Notify,
    state: &mut LiveState,
    event: StreamResponse,
    stored: Stored,
) -> Result<(), StoreError> {
    record_all(store, push_wake, state, vec![(event, stored)]).await
}

/// Records `events` in order, in one write: each applied to the snapshot as its [`Stored`]
/// says and numbered, then all logged with the snapshot and their push notifications, and
/// only then announced.
async fn record_all(
    store: &dyn TaskStore,
    push_wake: &Notify,
    state: &mut LiveState,
    events: Vec<(StreamResponse, Stored)>,
) -> Result<(), StoreError> {
    let previous = state.stored.task.clone();
    let (attempts, generation) = (state.stored.attempts, state.stored.generation);
    state.apply_annotations();
    let mut outbox = Vec::new();
    let mut logged = Vec::with_capacity(events.len());
    let mut failed = None;
    for (event, stored) in events {
        state.stored.generation += 1;
        state.stored.task.apply(&event);
        if state.stored.task.status.state.ends_stream() {
            // The turn is over: the next one starts with all its attempts.
            state.stored.attempts = 0;
        }
        if let (Stored::JoiningText, StreamResponse::ArtifactUpdate(update)) = (stored, &event) {
            join_last_text(&mut state.stored.task, &update.artifact.artifact_id);
        }
        match outbox_rows(&state.push, &event) {
            Ok(rows) => outbox.extend(rows),
            Err(e) => failed = Some(e),
        }
        logged.push(event);
    }
    // The events are logged, and their push notifications enqueued, in the same transaction
    // as the change.
    let written = match failed {
        None => store
            .put_with_events(&state.stored, &logged, &[], &outbox)
            .await
            .inspect(|()| {
                if !outbox.is_empty() {
                    push_wake.notify_one();
                }
            }),
        Some(e) => Err(e),
    };
    if let Err(e) = written {
        state.stored.task = previous;
        state.stored.attempts = attempts;
        state.stored.generation = generation;
        return Err(e);
    }
    state.annotations.clear();
    if state.stored.task.status.state.is_terminal() && !previous.status.state.is_terminal() {
        ended(&state.stored);
    }
    if state.stored.task.status.state.ends_stream() {
        state.busy = false;
    }
    // No receivers is fine: nobody is watching.
    for (seq, event) in (generation + 1..).zip(logged) {
        let _ = state.events.send(Stamped { seq, event });
    }
    Ok(())
}

/// Counts `task`, just stored in its final state, among the tasks ended.
fn ended(task: &StoredTask) {
    let nanos = Timestamp::now().unix_nanos() - task.created.unix_nanos();
    // Precision beyond microseconds is of no use in a histogram of seconds.
    let seconds = nanos as f64 / 1e9;
    crate::metrics::task_ended(&task.role, task.task.status.state, seconds);
}

/// Joins the last two parts of artifact `id` when both are plain text.
fn join_last_text(task: &mut Task, id: &ArtifactId) {
    let Some(artifact) = task.artifacts.iter_mut().find(|a| a.artifact_id == *id) else {
        return;
    };
    let plain = |part: &mew_cards::Part| {
        part.metadata.is_none() && part.filename.is_empty() && part.media_type.is_empty()
    };
    let count = artifact.parts.len();
    if count < 2 || !plain(&artifact.parts[count - 1]) || !plain(&artifact.parts[count - 2]) {
        return;
    }
    if let Some(last) = artifact.parts.pop() {
        match (&mut artifact.parts[count - 2].content, last.content) {
            (mew_cards::PartContent::Text(text), mew_cards::PartContent::Text(more)) => {
                text.push_str(&more);
            }
            (_, content) => artifact.parts.push(mew_cards::Part { content, ..last }),
        }
    }
}

/// The outbox rows of `event`: one per push config.
fn outbox_rows(
    configs: &[TaskPushNotificationConfig],
    event: &StreamResponse,
) -> Result<Vec<OutboxRow>, StoreError> {
    if configs.is_empty() {
        return Ok(Vec::new());
    }
    let body = serde_json::to_string(event)
        .map_err(|e| StoreError::Backend(format!("cannot encode an event: {e}")))?;
    Ok(configs
        .iter()
        .map(|config| OutboxRow {
            task_id: config.task_id.clone(),
            config_id: config.id.clone(),
            body: body.clone(),
        })
        .collect())
}

/// The delegation depth a task's metadata records (`mew.depth`), 0 if none.
pub(crate) fn delegation_depth(metadata: Option<&mew_cards::Metadata>) -> u32 {
    mew_cards::mew::MewMetadata::read(metadata)
        .depth
        .unwrap_or(0)
}

/// A message from the agent, addressed to `task`.
fn own_message(task: &Task, mut message: Message) -> Message {
    message.role = Role::Agent;
    message.task_id = Some(task.id.clone());
    message.context_id = Some(task.context_id.clone());
    if message.message_id.is_empty() {
        message.message_id = MessageId::generate();
    }
    message
}

fn agent_message(task: &Task, text: String) -> Message {
    own_message(task, Message::agent_text(text))
}

fn status_event(task: &Task, status: TaskStatus) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status,
        metadata: None,
    })
}

/// The task's history before the message with `id` (all of it if absent).
fn own_history_before(history: &[Message], id: &MessageId) -> Vec<Message> {
    let end = history
        .iter()
        .rposition(|m| m.message_id == *id)
        .unwrap_or(history.len());
    history[..end].to_vec()
}

fn validate_message(message: &Message) -> Result<(), Error> {
    // A request without `message` reads as an empty one (proto3 JSON): say what is missing.
    if message.parts.is_empty() && message.message_id.is_empty() {
        return Err(protocol(ErrorKind::InvalidParams, "message is required"));
    }
    if message.parts.is_empty() {
        return Err(protocol(
            ErrorKind::InvalidParams,
            "message.parts must not be empty",
        ));
    }
    if message.message_id.is_empty() {
        return Err(protocol(
            ErrorKind::InvalidParams,
            "message.messageId is required",
        ));
    }
    if message.role != Role::User {
        return Err(protocol(
            ErrorKind::InvalidParams,
            format!("message.role must be ROLE_USER, not {}", message.role),
        ));
    }
    Ok(())
}

/// A duration as people write it: `90s`, `5m`, `2h`, `250ms`.
pub(crate) fn humanize(duration: Duration) -> String {
    let secs = duration.as_secs();
    match (secs, duration.subsec_millis()) {
        (0, ms) => format!("{ms}ms"),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        (s, ms) => format!("{s}.{ms:03}s"),
    }
}
