//! `EchoAgent`: the reference in-process `AgentTransport`, mirroring `peers/echo_server.py`.
//!
//! The first text part of a new message picks the script:
//!
//! | text | what happens |
//! |---|---|
//! | `echo <text>` | WORKING, artifact `echo` with `<text>`, COMPLETED |
//! | `stream <n>` | WORKING, `n` chunks `chunk <i>` of one artifact, COMPLETED |
//! | `ask` | INPUT_REQUIRED "need input"; a follow-up `<t>` completes with `got <t>` |
//! | `wait` | WORKING until canceled |
//! | `fail` | FAILED "failed on purpose" |
//! | `message <text>` | a direct agent message, no task |
//! | anything else | like `echo <whole text>` |
//!
//! It holds at most [`EchoAgent::RETAINED_TASKS`] tasks: past that, the oldest finished ones
//! are forgotten, so its memory stays bounded under any load.
//!
//! Every task runs on its own tokio task and publishes its events on a bounded
//! broadcast channel, after storing them in the task. Streams are subscribers:
//! dropping one never stops the work, and one that lags gets a fresh task
//! snapshot instead of the events it missed.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use async_trait::async_trait;
use futures_util::stream;
use mew_cards::{
    A2aError, AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Artifact, ArtifactId,
    CancelTaskRequest, ContextId, DEFAULT_PAGE_SIZE, ErrorKind, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, MAX_PAGE_SIZE,
    Message, Part, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskArtifactUpdateEvent, TaskId, TaskPushNotificationConfig,
    TaskState, TaskStatus, TaskStatusUpdateEvent, binding,
};
use mew_transport::{AgentTransport, CallContext, Error, EventStream, collect_send};
use tokio::runtime::Handle;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

/// The reference in-process A2A agent: scripted echo behaviour, in-memory tasks.
///
/// Cheap to clone (all clones share one task store). Push notification configs
/// are stored, listed and deleted, and the card says `pushNotifications: true`,
/// but this reference agent stores configs only: it never delivers a
/// notification.
#[derive(Clone)]
pub struct EchoAgent {
    inner: Arc<Inner>,
}

struct Inner {
    card: AgentCard,
    capacity: usize,
    tasks: RwLock<Tasks>,
}

/// The tasks the agent holds: every running one, and the newest finished ones up to
/// [`EchoAgent::RETAINED_TASKS`] in all, so that its memory stays bounded under load.
#[derive(Default)]
struct Tasks {
    map: HashMap<TaskId, Arc<Slot>>,
    /// The ids in `map`, oldest first.
    order: VecDeque<TaskId>,
}

impl Tasks {
    /// Holds `slot`; past [`EchoAgent::RETAINED_TASKS`], forgets the oldest finished tasks
    /// (a running one keeps its place and is passed over).
    fn insert(&mut self, id: TaskId, slot: Arc<Slot>) {
        self.map.insert(id.clone(), slot);
        self.order.push_back(id);
        let mut passed = 0;
        while self.map.len() > EchoAgent::RETAINED_TASKS && passed < self.order.len() {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let finished = self
                .map
                .get(&oldest)
                .is_none_or(|slot| slot.lock().task.status.state.is_terminal());
            if finished {
                self.map.remove(&oldest);
            } else {
                self.order.push_back(oldest);
                passed += 1;
            }
        }
    }
}

/// One task: its immutable ids, its state, and the channel of its events.
struct Slot {
    id: TaskId,
    context_id: ContextId,
    cancel: CancellationToken,
    state: Mutex<SlotState>,
}

struct SlotState {
    task: Task,
    /// How many events have been stored in `task`.
    seq: u64,
    /// The task's live events; dropped once the task is terminal, which
    /// frees the buffer and closes the subscriptions after their last event.
    events: Option<broadcast::Sender<Arc<Stamped>>>,
    push_configs: Vec<TaskPushNotificationConfig>,
}

/// An event with its position in the task's event sequence.
struct Stamped {
    seq: u64,
    event: StreamResponse,
}

/// A subscription taken atomically with the snapshot it follows.
struct Watch {
    rx: broadcast::Receiver<Arc<Stamped>>,
    task: Task,
    seq: u64,
}

impl EchoAgent {
    /// Broadcast capacity per task unless [`EchoAgent::with_capacity`] says otherwise.
    pub const DEFAULT_CAPACITY: usize = 64;

    /// An echo agent whose card points both bindings at `base_url`.
    pub fn new(base_url: &str) -> Self {
        Self::with_card(Self::default_card(base_url))
    }

    /// An echo agent serving `card` as its public card.
    pub fn with_card(card: AgentCard) -> Self {
        Self::with_capacity(card, Self::DEFAULT_CAPACITY)
    }

    /// An echo agent whose per-task event channels hold `capacity` events
    /// (at least 1); a tiny capacity makes slow subscribers lag, for tests.
    pub fn with_capacity(card: AgentCard, capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                card,
                capacity: capacity.max(1),
                tasks: RwLock::new(Tasks::default()),
            }),
        }
    }

    /// The card [`EchoAgent::new`] serves: name `echo`, streaming, push
    /// notifications and extended card on, JSON-RPC and HTTP+JSON at `base_url`.
    pub fn default_card(base_url: &str) -> AgentCard {
        AgentCard {
            name: "echo".to_owned(),
            description: "Mew's reference echo agent: scripted commands drive task states."
                .to_owned(),
            supported_interfaces: vec![
                AgentInterface::new(base_url, binding::JSONRPC),
                AgentInterface::new(base_url, binding::HTTP_JSON),
            ],
            version: "1.0.0".to_owned(),
            capabilities: AgentCapabilities {
                streaming: Some(true),
                push_notifications: Some(true),
                extended_agent_card: Some(true),
                ..AgentCapabilities::default()
            },
            default_input_modes: vec!["text/plain".to_owned()],
            default_output_modes: vec!["text/plain".to_owned()],
            skills: vec![AgentSkill {
                id: "echo".to_owned(),
                name: "Echo".to_owned(),
                description: "Echoes text; scripted commands drive task states.".to_owned(),
                tags: vec!["test".to_owned()],
                examples: ["echo hi", "stream 3", "ask", "wait", "fail", "message hi"]
                    .map(str::to_owned)
                    .to_vec(),
                ..AgentSkill::default()
            }],
            ..AgentCard::default()
        }
    }

    /// How many finished and running tasks the agent holds at most; past that, the oldest
    /// finished ones are forgotten (GetTask then says they are not found).
    pub const RETAINED_TASKS: usize = 10_000;

    /// How many tasks the agent holds (at most [`EchoAgent::RETAINED_TASKS`] unless more run).
    pub fn task_count(&self) -> usize {
        self.inner.read_tasks().map.len()
    }

    /// Validates a send and starts (or resumes) its work; the stream follows it.
    fn start(&self, request: SendMessageRequest) -> Result<EventStream, A2aError> {
        let runtime = Handle::try_current()
            .map_err(|_| A2aError::internal("the echo agent runs inside a tokio runtime"))?;
        let history_length = checked_history(request.history_length())?;
        let push = request
            .configuration
            .and_then(|c| c.task_push_notification_config);
        if push.as_ref().is_some_and(|p| p.url.is_empty()) {
            return Err(A2aError::invalid_params(
                "taskPushNotificationConfig.url is required",
            ));
        }
        let message = request.message;
        validate(&message)?;
        match message.task_id.clone() {
            Some(task_id) => self.resume(&runtime, &task_id, message, push, history_length),
            None => match Command::parse(first_text(&message))? {
                Command::Reply(text) => Ok(direct_reply(&message, text)),
                Command::Work(work) => self.create(&runtime, message, work, push, history_length),
            },
        }
    }

    /// Stores a new SUBMITTED task and spawns its work.
    fn create(
        &self,
        runtime: &Handle,
        mut message: Message,
        work: Work,
        push: Option<TaskPushNotificationConfig>,
        history_length: Option<i32>,
    ) -> Result<EventStream, A2aError> {
        let (id, context_id) = new_task_ids(&mut message);
        let task = Task {
            id: id.clone(),
            context_id: context_id.clone(),
            status: TaskStatus::new(TaskState::Submitted),
            artifacts: Vec::new(),
            history: vec![message],
            metadata: None,
        };
        let push_configs = push
            .map(|p| vec![assign_config(p, &id)])
            .unwrap_or_default();
        let (events, _) = broadcast::channel(self.inner.capacity);
        let slot = Arc::new(Slot {
            id: id.clone(),
            context_id,
            cancel: CancellationToken::new(),
            state: Mutex::new(SlotState {
                task,
                seq: 0,
                events: Some(events),
                push_configs,
            }),
        });
        let watch = slot.watch()?;
        self.inner.write_tasks().insert(id, Arc::clone(&slot));
        runtime.spawn(run(Arc::clone(&slot), work));
        Ok(Feed::new(slot, watch, history_length).into_stream())
    }

    /// Continues an interrupted task with the caller's answer.
    fn resume(
        &self,
        runtime: &Handle,
        task_id: &TaskId,
        mut message: Message,
        push: Option<TaskPushNotificationConfig>,
        history_length: Option<i32>,
    ) -> Result<EventStream, A2aError> {
        let slot = self.inner.slot(task_id)?;
        if let Some(context_id) = &message.context_id
            && *context_id != slot.context_id
        {
            return Err(A2aError::invalid_params(format!(
                "message contextId {context_id} does not match task {task_id}'s contextId {}",
                slot.context_id
            )));
        }
        message.context_id = Some(slot.context_id.clone());
        let answer = format!("got {}", first_text(&message));
        let push = push.map(|p| assign_config(p, task_id));
        let watch = slot.resume(message, push)?;
        runtime.spawn(finish(Arc::clone(&slot), answer));
        Ok(Feed::new(slot, watch, history_length).into_stream())
    }
}

impl fmt::Debug for EchoAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EchoAgent")
            .field("card", &self.inner.card.name)
            .field("capacity", &self.inner.capacity)
            .field("tasks", &self.task_count())
            .finish()
    }
}

impl Inner {
    fn read_tasks(&self) -> std::sync::RwLockReadGuard<'_, Tasks> {
        self.tasks.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_tasks(&self) -> std::sync::RwLockWriteGuard<'_, Tasks> {
        self.tasks.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The task's slot, or TaskNotFound.
    fn slot(&self, id: &TaskId) -> Result<Arc<Slot>, A2aError> {
        self.read_tasks()
            .map
            .get(id)
            .cloned()
            .ok_or_else(|| A2aError::task_not_found(id))
    }

    /// Every slot, so that no map lock is held while slots are read.
    fn all_slots(&self) -> Vec<Arc<Slot>> {
        self.read_tasks().map.values().cloned().collect()
    }
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `event` in the task, then broadcasts it (under the same lock, so
    /// the broadcast order is the storage order). After a terminal state the
    /// channel is dropped: nothing follows it.
    fn commit(state: &mut SlotState, event: StreamResponse) {
        state.task.apply(&event);
        state.seq += 1;
        if let Some(events) = &state.events {
            // An error only means nobody listens right now: the task has the event.
            let _ = events.send(Arc::new(Stamped {
                seq: state.seq,
                event,
            }));
        }
        if state.task.status.state.is_terminal() {
            state.events = None;
        }
    }

    /// Commits `event` unless the task can no longer take it (it ended, e.g.
    /// canceled); false tells the work to stop.
    fn publish(&self, event: StreamResponse) -> bool {
        let mut state = self.lock();
        let current = state.task.status.state;
        let allowed = match &event {
            StreamResponse::StatusUpdate(update) => current.can_become(update.status.state),
            _ => !current.is_terminal(),
        };
        if allowed {
            Self::commit(&mut state, event);
        }
        allowed
    }

    /// Subscribes, then snapshots, under one lock: no event falls in between.
    /// A terminal task has no live events: UnsupportedOperation.
    fn watch(&self) -> Result<Watch, A2aError> {
        self.watch_locked(&self.lock())
    }

    fn watch_locked(&self, state: &SlotState) -> Result<Watch, A2aError> {
        match &state.events {
            Some(events) => Ok(Watch {
                rx: events.subscribe(),
                task: state.task.clone(),
                seq: state.seq,
            }),
            None => Err(A2aError::unsupported(format!(
                "task {} is in terminal state {}",
                self.id, state.task.status.state
            ))),
        }
    }

    /// Adds the caller's answer to an interrupted task and moves it to WORKING.
    fn resume(
        &self,
        message: Message,
        push: Option<TaskPushNotificationConfig>,
    ) -> Result<Watch, A2aError> {
        let mut state = self.lock();
        let current = state.task.status.state;
        if current.is_terminal() {
            return Err(A2aError::unsupported(format!(
                "task {} is in terminal state {current} and accepts no more messages",
                self.id
            )));
        }
        if !current.is_interrupted() {
            return Err(A2aError::unsupported(format!(
                "task {} is busy ({current}); send a follow-up only when it asks for input",
                self.id
            )));
        }
        state.task.history.push(message);
        if let Some(push) = push {
            upsert_config(&mut state.push_configs, push);
        }
        Self::commit(&mut state, self.status_event(TaskState::Working, None));
        self.watch_locked(&state)
    }

    /// Cancels a task that has not ended; the stored task is returned.
    fn cancel(&self) -> Result<Task, A2aError> {
        let mut state = self.lock();
        let current = state.task.status.state;
        if current.is_terminal() {
            return Err(A2aError::new(
                ErrorKind::TaskNotCancelable,
                format!("task {} is in terminal state {current}", self.id),
            ));
        }
        Self::commit(&mut state, self.status_event(TaskState::Canceled, None));
        let task = state.task.clone();
        drop(state);
        self.cancel.cancel();
        Ok(task)
    }

    /// The stored task, trimmed for an answer, and its event position.
    fn snapshot(&self, history_length: Option<i32>, include_artifacts: bool) -> (Task, u64) {
        let state = self.lock();
        (
            view(&state.task, history_length, include_artifacts),
            state.seq,
        )
    }

    /// A status update of this task, with an agent message when `text` is set.
    fn status_event(&self, state: TaskState, text: Option<&str>) -> StreamResponse {
        let status = match text {
            Some(text) => TaskStatus::with_message(state, self.agent_message(text)),
            None => TaskStatus::new(state),
        };
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.id.clone(),
            context_id: self.context_id.clone(),
            status,
            metadata: None,
        })
    }

    /// An artifact update of this task.
    fn artifact_event(&self, artifact: Artifact, append: bool, last_chunk: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: self.id.clone(),
            context_id: self.context_id.clone(),
            artifact,
            append,
            last_chunk,
            metadata: None,
        })
    }

    fn agent_message(&self, text: &str) -> Message {
        let mut message = Message::agent_text(text);
        message.task_id = Some(self.id.clone());
        message.context_id = Some(self.context_id.clone());
        message
    }
}

/// What the first text part of a new message asks for.
enum Command {
    /// `message <text>`: a direct reply, no task.
    Reply(String),
    /// Everything else: a task.
    Work(Work),
}

/// The scripted work of a new task.
enum Work {
    Echo(String),
    Stream(u32),
    Ask,
    Wait,
    Fail,
}

impl Command {
    /// Splits the text like `echo_server.py`: a known first word, else echo it all.
    fn parse(text: &str) -> Result<Self, A2aError> {
        let trimmed = text.trim();
        let (head, rest) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
        let work = match head {
            "message" => return Ok(Self::Reply(rest.to_owned())),
            "echo" => Work::Echo(rest.to_owned()),
            "stream" => Work::Stream(parse_count(rest)?),
            "ask" => Work::Ask,
            "wait" => Work::Wait,
            "fail" => Work::Fail,
            _ => Work::Echo(text.to_owned()),
        };
        Ok(Self::Work(work))
    }
}

/// The chunk count of `stream <n>`; a missing count is 1.
fn parse_count(text: &str) -> Result<u32, A2aError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(1);
    }
    text.parse().map_err(|_| {
        A2aError::invalid_params(format!(
            "`stream <n>` needs a whole number of chunks, got {text:?}"
        ))
    })
}

/// Runs a new task's script; every step stops if the task ended meanwhile.
async fn run(slot: Arc<Slot>, work: Work) {
    if !slot.publish(slot.status_event(TaskState::Working, None)) {
        return;
    }
    match work {
        Work::Echo(text) => {
            complete_with(&slot, "echo", text);
        }
        Work::Stream(count) => stream_chunks(&slot, count).await,
        Work::Ask => {
            slot.publish(slot.status_event(TaskState::InputRequired, Some("need input")));
        }
        // cancel_task stores CANCELED itself; the work only has to end.
        Work::Wait => slot.cancel.cancelled().await,
        Work::Fail => {
            slot.publish(slot.status_event(TaskState::Failed, Some("failed on purpose")));
        }
    }
}

/// Completes a resumed task with its answer.
async fn finish(slot: Arc<Slot>, answer: String) {
    complete_with(&slot, "echo", answer);
}

/// One text artifact, then COMPLETED.
fn complete_with(slot: &Slot, name: &str, text: String) -> bool {
    let artifact = Artifact::new(name, vec![Part::text(text)]);
    slot.publish(slot.artifact_event(artifact, false, false))
        && slot.publish(slot.status_event(TaskState::Completed, None))
}

/// `count` chunks of one artifact, yielding between them, then COMPLETED.
async fn stream_chunks(slot: &Slot, count: u32) {
    let artifact_id = ArtifactId::generate();
    for i in 1..=count {
        let artifact = Artifact {
            artifact_id: artifact_id.clone(),
            name: "stream".to_owned(),
            parts: vec![Part::text(format!("chunk {i}"))],
            ..Artifact::default()
        };
        if !slot.publish(slot.artifact_event(artifact, i > 1, i == count)) {
            return;
        }
        tokio::task::yield_now().await;
    }
    slot.publish(slot.status_event(TaskState::Completed, None));
}

/// A stream over one task: the snapshot first, then live events until the event `ends`
/// says is the last (a send's stream ends when the task ends or is interrupted, a
/// subscription when it ends).
struct Feed {
    slot: Arc<Slot>,
    rx: broadcast::Receiver<Arc<Stamped>>,
    first: Option<Task>,
    /// The last event position reflected in what was sent.
    seen: u64,
    history_length: Option<i32>,
    ends: fn(&StreamResponse) -> bool,
    done: bool,
}

impl Feed {
    fn new(slot: Arc<Slot>, watch: Watch, history_length: Option<i32>) -> Self {
        let mut first = watch.task;
        first.truncate_history(history_length);
        Self {
            slot,
            rx: watch.rx,
            first: Some(first),
            seen: watch.seq,
            history_length,
            ends: StreamResponse::ends_stream,
            done: false,
        }
    }

    /// A subscription's feed: it stays open while the task waits for input.
    fn subscription(slot: Arc<Slot>, watch: Watch) -> Self {
        Self {
            ends: StreamResponse::ends_subscription,
            ..Self::new(slot, watch, None)
        }
    }

    fn into_stream(self) -> EventStream {
        EventStream::new(stream::unfold(self, Self::next))
    }

    async fn next(mut self) -> Option<(Result<StreamResponse, Error>, Self)> {
        if self.done {
            return None;
        }
        let item = match self.first.take() {
            Some(task) => StreamResponse::Task(task),
            None => self.recv().await?,
        };
        self.done = (self.ends)(&item);
        Some((Ok(item), self))
    }

    /// The stored task in place of the events missed since `seen`.
    fn resync(&mut self) -> StreamResponse {
        let (task, seq) = self.slot.snapshot(self.history_length, true);
        self.seen = seq;
        StreamResponse::Task(task)
    }

    /// The next event not yet reflected in what was sent; after a lag, a
    /// fresh snapshot stands in for the missed events.
    async fn recv(&mut self) -> Option<StreamResponse> {
        loop {
            match self.rx.recv().await {
                Ok(stamped) if stamped.seq <= self.seen => continue,
                Ok(stamped) => {
                    self.seen = stamped.seq;
                    return Some(stamped.event.clone());
                }
                Err(RecvError::Lagged(_)) => return Some(self.resync()),
                // Only a terminal task closes its channel, and it sends its
                // last state first; the snapshot is a safety net.
                Err(RecvError::Closed) => {
                    let fresh = self.slot.lock().seq > self.seen;
                    return fresh.then(|| self.resync());
                }
            }
        }
    }
}

/// The answer to `message <text>`: one agent message in the sender's context.
fn direct_reply(message: &Message, text: String) -> EventStream {
    let mut reply = Message::agent_text(text);
    reply.context_id = Some(
        message
            .context_id
            .clone()
            .unwrap_or_else(ContextId::generate),
    );
    EventStream::once(Ok(StreamResponse::Message(reply)))
}

/// Fresh ids for the new task `message` starts: a task id, and the message's context or a new
/// one; the message is marked with both.
pub(crate) fn new_task_ids(message: &mut Message) -> (TaskId, ContextId) {
    let id = TaskId::generate();
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(ContextId::generate);
    message.task_id = Some(id.clone());
    message.context_id = Some(context_id.clone());
    (id, context_id)
}

/// The text of the first text part, or "".
fn first_text(message: &Message) -> &str {
    message
        .parts
        .iter()
        .find_map(Part::as_text)
        .unwrap_or_default()
}

/// The checks the SDK's field validation makes on an incoming message.
pub(crate) fn validate(message: &Message) -> Result<(), A2aError> {
    if message.message_id.is_empty() {
        return Err(A2aError::invalid_params("message.messageId is required"));
    }
    if message.role != Role::User {
        return Err(A2aError::invalid_params(format!(
            "message.role must be ROLE_USER, got {}",
            message.role
        )));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params("message.parts must not be empty"));
    }
    Ok(())
}

/// `historyLength` as given, refusing negative values.
pub(crate) fn checked_history(history_length: Option<i32>) -> Result<Option<i32>, A2aError> {
    match history_length {
        Some(n) if n < 0 => Err(A2aError::invalid_params(
            "historyLength must not be negative",
        )),
        other => Ok(other),
    }
}

/// A copy of `task` with at most `history_length` newest history messages,
/// and its artifacts only if asked; copies nothing it drops.
fn view(task: &Task, history_length: Option<i32>, include_artifacts: bool) -> Task {
    let len = task.history.len();
    let keep = history_length.map_or(len, |n| usize::try_from(n).unwrap_or(0).min(len));
    Task {
        id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        artifacts: if include_artifacts {
            task.artifacts.clone()
        } else {
            Vec::new()
        },
        history: task.history.iter().skip(len - keep).cloned().collect(),
        metadata: task.metadata.clone(),
    }
}

/// The page size of a `ListTasks` request: default 50, 1 to 100.
fn checked_page_size(page_size: Option<i32>) -> Result<usize, A2aError> {
    let size = page_size.unwrap_or(DEFAULT_PAGE_SIZE);
    if size < 1 {
        return Err(A2aError::invalid_params("minimum page size is 1"));
    }
    if size > MAX_PAGE_SIZE {
        return Err(A2aError::invalid_params(format!(
            "maximum page size is {MAX_PAGE_SIZE}"
        )));
    }
    usize::try_from(size).map_err(|_| A2aError::invalid_params("invalid page size"))
}

/// A position in the `ListTasks` order: status time (ns) then id, both descending.
type ListKey = (i128, TaskId);

fn list_key(task: &Task) -> ListKey {
    let nanos = task.status.timestamp.map_or(0, |t| t.unix_nanos());
    (nanos, task.id.clone())
}

/// The page token that resumes after `key`.
fn encode_token(key: &ListKey) -> String {
    format!("{}:{}", key.0, key.1)
}

/// Reads a page token back; empty is the first page.
fn decode_token(token: &str) -> Result<Option<ListKey>, A2aError> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = || A2aError::invalid_params(format!("invalid pageToken {token:?}"));
    let (nanos, id) = token.split_once(':').ok_or_else(invalid)?;
    let nanos = nanos.parse::<i128>().map_err(|_| invalid())?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok(Some((nanos, TaskId::from(id))))
}

/// Whether a task passes the `ListTasks` filters.
fn matches_filters(request: &ListTasksRequest, task: &Task) -> bool {
    let state_ok = request.status == TaskState::Unspecified || task.status.state == request.status;
    let time_ok = request.status_timestamp_after.is_none_or(|after| {
        task.status
            .timestamp
            .is_some_and(|t| t.unix_nanos() >= after.unix_nanos())
    });
    state_ok && time_ok
}

/// The config as stored: its task set, and an id when it had none.
fn assign_config(
    mut config: TaskPushNotificationConfig,
    task_id: &TaskId,
) -> TaskPushNotificationConfig {
    config.task_id = task_id.clone();
    if config.id.is_empty() {
        config.id = TaskId::generate().to_string();
    }
    config
}

/// Replaces the config with the same id, or adds it.
fn upsert_config(
    configs: &mut Vec<TaskPushNotificationConfig>,
    config: TaskPushNotificationConfig,
) {
    match configs.iter_mut().find(|c| c.id == config.id) {
        Some(existing) => *existing = config,
        None => configs.push(config),
    }
}

/// The offset a push config page token stands for.
fn decode_offset(token: &str) -> Result<usize, A2aError> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .parse()
        .map_err(|_| A2aError::invalid_params(format!("invalid pageToken {token:?}")))
}

#[async_trait]
impl AgentTransport for EchoAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.inner.card.clone())
    }

    async fn send_message(
        &self,
        _ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        let return_immediately = request.return_immediately();
        let history_length = request.history_length();
        let stream = self.start(request)?;
        let mut response = collect_send(stream, return_immediately).await?;
        if let SendMessageResponse::Task(task) = &mut response {
            task.truncate_history(history_length);
        }
        Ok(response)
    }

    async fn send_streaming_message(
        &self,
        _ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        Ok(self.start(request)?)
    }

    async fn get_task(&self, _ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error> {
        let history_length = checked_history(request.history_length)?;
        let slot = self.inner.slot(&request.id)?;
        Ok(slot.snapshot(history_length, true).0)
    }

    async fn list_tasks(
        &self,
        _ctx: &CallContext,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        let page_size = checked_page_size(request.page_size)?;
        let history_length = checked_history(request.history_length)?;
        let after = decode_token(&request.page_token)?;
        let include_artifacts = request.include_artifacts.unwrap_or(false);
        let mut found: Vec<(ListKey, Arc<Slot>)> = self
            .inner
            .all_slots()
            .into_iter()
            .filter(|slot| request.context_id.is_empty() || slot.context_id == request.context_id)
            .filter_map(|slot| {
                let state = slot.lock();
                let key = matches_filters(&request, &state.task).then(|| list_key(&state.task));
                drop(state);
                key.map(|key| (key, slot))
            })
            .collect();
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        let start = after.map_or(0, |after| found.partition_point(|(key, _)| *key >= after));
        let rest = found.get(start..).unwrap_or_default();
        let page = rest.get(..page_size).unwrap_or(rest);
        let next_page_token = match page.last() {
            Some((key, _)) if rest.len() > page_size => encode_token(key),
            _ => String::new(),
        };
        let tasks = page
            .iter()
            .map(|(_, slot)| slot.snapshot(history_length, include_artifacts).0)
            .collect();
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size: i32::try_from(page_size).unwrap_or(MAX_PAGE_SIZE),
            total_size: i32::try_from(found.len()).unwrap_or(i32::MAX),
        })
    }

    async fn cancel_task(
        &self,
        _ctx: &CallContext,
        request: CancelTaskRequest,
    ) -> Result<Task, Error> {
        Ok(self.inner.slot(&request.id)?.cancel()?)
    }

    async fn subscribe_to_task(
        &self,
        _ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        let slot = self.inner.slot(&request.id)?;
        let watch = slot.watch()?;
        Ok(Feed::subscription(slot, watch).into_stream())
    }

    async fn create_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        request: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Error> {
        if request.url.is_empty() {
            return Err(A2aError::invalid_params("url is required").into());
        }
        let slot = self.inner.slot(&request.task_id)?;
        let config = assign_config(request, &slot.id);
        upsert_config(&mut slot.lock().push_configs, config.clone());
        Ok(config)
    }

    async fn get_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        request: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, Error> {
        let slot = self.inner.slot(&request.task_id)?;
        let found = slot
            .lock()
            .push_configs
            .iter()
            .find(|c| c.id == request.id)
            .cloned();
        found.ok_or_else(|| {
            Error::protocol(
                ErrorKind::TaskNotFound,
                format!(
                    "push notification config {} not found for task {}",
                    request.id, request.task_id
                ),
            )
        })
    }

    async fn list_task_push_notification_configs(
        &self,
        _ctx: &CallContext,
        request: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, Error> {
        if request.page_size < 0 {
            return Err(A2aError::invalid_params("pageSize must not be negative").into());
        }
        let offset = decode_offset(&request.page_token)?;
        let slot = self.inner.slot(&request.task_id)?;
        let state = slot.lock();
        let rest = state.push_configs.get(offset..).unwrap_or_default();
        let size = usize::try_from(request.page_size).unwrap_or(0);
        let take = if size == 0 {
            rest.len()
        } else {
            size.min(rest.len())
        };
        let next_page_token = if take < rest.len() {
            (offset + take).to_string()
        } else {
            String::new()
        };
        Ok(ListTaskPushNotificationConfigsResponse {
            configs: rest.iter().take(take).cloned().collect(),
            next_page_token,
        })
    }

    async fn delete_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        request: GetTaskPushNotificationConfigRequest,
    ) -> Result<(), Error> {
        let slot = self.inner.slot(&request.task_id)?;
        slot.lock().push_configs.retain(|c| c.id != request.id);
        Ok(())
    }

    async fn get_extended_agent_card(
        &self,
        _ctx: &CallContext,
        _request: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, Error> {
        let mut card = self.inner.card.clone();
        card.description.push_str(" (extended)");
        Ok(card)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;
    use mew_cards::{MessageId, SendMessageConfiguration};

    use super::*;

    fn agent() -> EchoAgent {
        EchoAgent::new("http://127.0.0.1:9/")
    }

    fn ctx() -> CallContext {
        CallContext::anonymous()
    }

    fn send(text: &str) -> SendMessageRequest {
        SendMessageRequest::new(Message::user_text(text))
    }

    fn follow_up(task: &Task, text: &str) -> SendMessageRequest {
        let mut message = Message::user_text(text);
        message.task_id = Some(task.id.clone());
        SendMessageRequest::new(message)
    }

    fn immediately(text: &str) -> SendMessageRequest {
        let mut request = send(text);
        request.configuration = Some(SendMessageConfiguration {
            return_immediately: true,
            ..SendMessageConfiguration::default()
        });
        request
    }

    async fn send_task(agent: &EchoAgent, request: SendMessageRequest) -> Task {
        match agent.send_message(&ctx(), request).await.unwrap() {
            SendMessageResponse::Task(task) => task,
            SendMessageResponse::Message(message) => panic!("expected a task, got {message:?}"),
        }
    }

    async fn get(agent: &EchoAgent, id: &TaskId) -> Task {
        let request = GetTaskRequest {
            id: id.clone(),
            ..GetTaskRequest::default()
        };
        agent.get_task(&ctx(), request).await.unwrap()
    }

    async fn wait_for(agent: &EchoAgent, id: &TaskId, state: TaskState) -> Task {
        for _ in 0..5000 {
            let task = get(agent, id).await;
            if task.status.state == state {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("task {id} never reached {state}");
    }

    async fn collect(stream: EventStream) -> Vec<StreamResponse> {
        stream.map(|item| item.unwrap()).collect().await
    }

    fn text_of(parts: &[Part]) -> Vec<&str> {
        parts.iter().filter_map(Part::as_text).collect()
    }

    fn kind<T>(result: Result<T, Error>) -> ErrorKind {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(error) => error.kind().unwrap(),
        }
    }

    fn is_uuid_v7(id: &str) -> bool {
        id.len() == 36 && id.as_bytes().get(14) == Some(&b'7')
    }

    #[tokio::test]
    async fn echo_completes_with_the_artifact() {
        let agent = agent();
        let task = send_task(&agent, send("echo hello world")).await;
        assert_eq!(task.status.state, TaskState::Completed);
        assert!(is_uuid_v7(task.id.as_str()), "{}", task.id);
        assert!(is_uuid_v7(task.context_id.as_str()), "{}", task.context_id);
        assert_eq!(task.artifacts.len(), 1);
        assert_eq!(task.artifacts[0].name, "echo");
        assert_eq!(text_of(&task.artifacts[0].parts), ["hello world"]);
        assert_eq!(task.history.len(), 1);
        assert_eq!(task.history[0].text(), "echo hello world");
        assert_eq!(task.history[0].task_id.as_ref(), Some(&task.id));
        assert_eq!(task.history[0].context_id.as_ref(), Some(&task.context_id));
        assert_eq!(get(&agent, &task.id).await, task);

        let other = send_task(&agent, send("just words")).await;
        assert_eq!(text_of(&other.artifacts[0].parts), ["just words"]);
    }

    #[tokio::test]
    async fn echo_streams_submitted_working_artifact_completed() {
        let agent = agent();
        let stream = agent
            .send_streaming_message(&ctx(), send("echo hi"))
            .await
            .unwrap();
        let items = collect(stream).await;
        assert_eq!(items.len(), 4, "{items:?}");
        let StreamResponse::Task(task) = &items[0] else {
            panic!("first item is not the task: {:?}", items[0]);
        };
        assert_eq!(task.status.state, TaskState::Submitted);
        let states: Vec<TaskState> = items
            .iter()
            .filter_map(|item| match item {
                StreamResponse::StatusUpdate(update) => Some(update.status.state),
                _ => None,
            })
            .collect();
        assert_eq!(states, [TaskState::Working, TaskState::Completed]);
        assert!(
            matches!(&items[2], StreamResponse::ArtifactUpdate(u) if text_of(&u.artifact.parts) == ["hi"])
        );
    }

    #[tokio::test]
    async fn message_context_is_kept_and_tasks_join_it() {
        let agent = agent();
        let mut message = Message::user_text("echo a");
        message.context_id = Some(ContextId::from("ctx-1"));
        let task = send_task(&agent, SendMessageRequest::new(message)).await;
        assert_eq!(task.context_id.as_str(), "ctx-1");
    }

    #[tokio::test]
    async fn stream_chunks_in_order_with_append_and_last_chunk() {
        let agent = agent();
        let stream = agent
            .send_streaming_message(&ctx(), send("stream 3"))
            .await
            .unwrap();
        let items = collect(stream).await;
        assert_eq!(items.len(), 6, "{items:?}");
        assert!(
            matches!(&items[0], StreamResponse::Task(t) if t.status.state == TaskState::Submitted)
        );
        assert!(
            matches!(&items[1], StreamResponse::StatusUpdate(u) if u.status.state == TaskState::Working)
        );
        let chunks: Vec<&TaskArtifactUpdateEvent> = items[2..5]
            .iter()
            .filter_map(|item| match item {
                StreamResponse::ArtifactUpdate(update) => Some(update),
                _ => None,
            })
            .collect();
        assert_eq!(chunks.len(), 3);
        let flags: Vec<(bool, bool)> = chunks.iter().map(|c| (c.append, c.last_chunk)).collect();
        assert_eq!(flags, [(false, false), (true, false), (true, true)]);
        let texts: Vec<&str> = chunks
            .iter()
            .flat_map(|c| text_of(&c.artifact.parts))
            .collect();
        assert_eq!(texts, ["chunk 1", "chunk 2", "chunk 3"]);
        let id = &chunks[0].artifact.artifact_id;
        assert!(chunks.iter().all(|c| c.artifact.artifact_id == *id));
        assert!(
            matches!(&items[5], StreamResponse::StatusUpdate(u) if u.status.state == TaskState::Completed)
        );

        let stored = get(&agent, &chunks[0].task_id).await;
        assert_eq!(stored.artifacts.len(), 1);
        assert_eq!(stored.artifacts[0].name, "stream");
        assert_eq!(text_of(&stored.artifacts[0].parts), texts);
    }

    #[tokio::test]
    async fn ask_waits_for_input_then_completes_the_same_task() {
        let agent = agent();
        let asked = send_task(&agent, send("ask")).await;
        assert_eq!(asked.status.state, TaskState::InputRequired);
        let question = asked.status.message.as_ref().unwrap();
        assert_eq!(question.role, Role::Agent);
        assert_eq!(question.text(), "need input");
        assert_eq!(question.task_id.as_ref(), Some(&asked.id));
        assert_eq!(asked.history.len(), 2);

        let mut wrong = follow_up(&asked, "blue");
        wrong.message.context_id = Some(ContextId::from("another"));
        let mismatch = agent.send_message(&ctx(), wrong).await;
        assert_eq!(kind(mismatch), ErrorKind::InvalidParams);

        let done = send_task(&agent, follow_up(&asked, "blue")).await;
        assert_eq!(done.id, asked.id);
        assert_eq!(done.context_id, asked.context_id);
        assert_eq!(done.status.state, TaskState::Completed);
        assert_eq!(done.artifacts.len(), 1);
        assert_eq!(text_of(&done.artifacts[0].parts), ["got blue"]);
        let history: Vec<(Role, String)> =
            done.history.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(
            history,
            [
                (Role::User, "ask".to_owned()),
                (Role::Agent, "need input".to_owned()),
                (Role::User, "blue".to_owned()),
            ]
        );
        assert_eq!(done.history[2].context_id.as_ref(), Some(&asked.context_id));

        let mut short = follow_up(&asked, "again");
        short.configuration = Some(SendMessageConfiguration {
            history_length: Some(1),
            ..SendMessageConfiguration::default()
        });
        let again = agent.send_message(&ctx(), short).await;
        assert_eq!(kind(again), ErrorKind::UnsupportedOperation);
    }

    #[tokio::test]
    async fn history_length_trims_the_returned_task() {
        let agent = agent();
        let mut request = send("fail");
        request.configuration = Some(SendMessageConfiguration {
            history_length: Some(1),
            ..SendMessageConfiguration::default()
        });
        let task = send_task(&agent, request).await;
        assert_eq!(task.history.len(), 1);
        assert_eq!(task.history[0].text(), "failed on purpose");

        let zero = GetTaskRequest {
            id: task.id.clone(),
            history_length: Some(0),
            ..GetTaskRequest::default()
        };
        assert!(
            agent
                .get_task(&ctx(), zero)
                .await
                .unwrap()
                .history
                .is_empty()
        );
        let negative = GetTaskRequest {
            id: task.id.clone(),
            history_length: Some(-1),
            ..GetTaskRequest::default()
        };
        assert_eq!(
            kind(agent.get_task(&ctx(), negative).await),
            ErrorKind::InvalidParams
        );
        assert_eq!(get(&agent, &task.id).await.history.len(), 2);
    }

    #[tokio::test]
    async fn wait_runs_until_canceled_and_cannot_be_canceled_twice() {
        let agent = agent();
        let submitted = send_task(&agent, immediately("wait")).await;
        assert_eq!(submitted.status.state, TaskState::Submitted);
        let working = wait_for(&agent, &submitted.id, TaskState::Working).await;
        assert_eq!(working.id, submitted.id);

        let busy = agent
            .send_message(&ctx(), follow_up(&working, "hello"))
            .await;
        assert_eq!(kind(busy), ErrorKind::UnsupportedOperation);

        let cancel = CancelTaskRequest {
            id: submitted.id.clone(),
            ..CancelTaskRequest::default()
        };
        let canceled = agent.cancel_task(&ctx(), cancel.clone()).await.unwrap();
        assert_eq!(canceled.id, submitted.id);
        assert_eq!(canceled.status.state, TaskState::Canceled);
        assert_eq!(
            get(&agent, &submitted.id).await.status.state,
            TaskState::Canceled
        );
        assert_eq!(
            kind(agent.cancel_task(&ctx(), cancel).await),
            ErrorKind::TaskNotCancelable
        );

        let unknown = CancelTaskRequest {
            id: TaskId::from("no-such-task"),
            ..CancelTaskRequest::default()
        };
        assert_eq!(
            kind(agent.cancel_task(&ctx(), unknown).await),
            ErrorKind::TaskNotFound
        );
    }

    #[tokio::test]
    async fn past_its_retention_the_oldest_finished_tasks_are_forgotten_and_running_ones_kept() {
        let agent = agent();
        let running = send_task(&agent, immediately("wait")).await;
        let first = send_task(&agent, send("echo first")).await;
        for i in 0..EchoAgent::RETAINED_TASKS {
            send_task(&agent, send(&format!("echo {i}"))).await;
        }
        let newest = send_task(&agent, send("echo newest")).await;
        assert_eq!(agent.task_count(), EchoAgent::RETAINED_TASKS);
        assert_eq!(newest.status.state, TaskState::Completed);
        assert_eq!(get(&agent, &newest.id).await.id, newest.id);
        let forgotten = agent
            .get_task(
                &ctx(),
                GetTaskRequest {
                    id: first.id.clone(),
                    ..GetTaskRequest::default()
                },
            )
            .await;
        assert_eq!(kind(forgotten), ErrorKind::TaskNotFound);
        // The oldest task of all still runs: it is kept, and can still be canceled.
        let cancel = CancelTaskRequest {
            id: running.id.clone(),
            ..CancelTaskRequest::default()
        };
        let canceled = agent.cancel_task(&ctx(), cancel).await.unwrap();
        assert_eq!(canceled.status.state, TaskState::Canceled);
    }

    #[tokio::test]
    async fn fail_ends_failed_with_a_message() {
        let agent = agent();
        let task = send_task(&agent, send("fail")).await;
        assert_eq!(task.status.state, TaskState::Failed);
        let message = task.status.message.as_ref().unwrap();
        assert_eq!(message.role, Role::Agent);
        assert_eq!(message.text(), "failed on purpose");
        assert!(task.artifacts.is_empty());
        assert_eq!(task.history.len(), 2);
        assert_eq!(task.history[1].message_id, message.message_id);
    }

    #[tokio::test]
    async fn message_answers_directly_without_a_task() {
        let agent = agent();
        let response = agent
            .send_message(&ctx(), send("message hi there"))
            .await
            .unwrap();
        let SendMessageResponse::Message(reply) = response else {
            panic!("expected a message, got {response:?}");
        };
        assert_eq!(reply.role, Role::Agent);
        assert_eq!(reply.text(), "hi there");
        assert_eq!(reply.task_id, None);
        assert!(is_uuid_v7(reply.context_id.as_ref().unwrap().as_str()));
        assert_eq!(agent.task_count(), 0);

        let mut message = Message::user_text("message again");
        message.context_id = Some(ContextId::from("ctx-9"));
        let stream = agent
            .send_streaming_message(&ctx(), SendMessageRequest::new(message))
            .await
            .unwrap();
        let items = collect(stream).await;
        assert_eq!(items.len(), 1);
        let StreamResponse::Message(reply) = &items[0] else {
            panic!("expected a message, got {items:?}");
        };
        assert_eq!(
            reply.context_id.as_ref().map(ContextId::as_str),
            Some("ctx-9")
        );
        assert_eq!(reply.text(), "again");
    }

    #[tokio::test]
    async fn invalid_messages_are_invalid_params() {
        let agent = agent();
        let mut no_parts = Message::user_text("echo x");
        no_parts.parts.clear();
        let mut no_id = Message::user_text("echo x");
        no_id.message_id = MessageId::from("");
        let from_agent = Message::agent_text("echo x");
        for message in [no_parts, no_id, from_agent] {
            let result = agent
                .send_message(&ctx(), SendMessageRequest::new(message))
                .await;
            assert_eq!(kind(result), ErrorKind::InvalidParams);
        }
        let bad_count = agent.send_message(&ctx(), send("stream lots")).await;
        assert_eq!(kind(bad_count), ErrorKind::InvalidParams);
        assert_eq!(agent.task_count(), 0);
    }

    #[tokio::test]
    async fn terminal_task_refuses_follow_ups() {
        let agent = agent();
        let task = send_task(&agent, send("echo done")).await;
        let result = agent.send_message(&ctx(), follow_up(&task, "more")).await;
        let error = result.unwrap_err().into_a2a();
        assert_eq!(error.kind, ErrorKind::UnsupportedOperation);
        assert!(
            error
                .message
                .contains("terminal state TASK_STATE_COMPLETED"),
            "{}",
            error.message
        );
        let mut unknown = Message::user_text("hello");
        unknown.task_id = Some(TaskId::from("no-such-task"));
        let result = agent
            .send_message(&ctx(), SendMessageRequest::new(unknown))
            .await;
        assert_eq!(kind(result), ErrorKind::TaskNotFound);
    }

    #[tokio::test]
    async fn list_pages_newest_first() {
        let agent = agent();
        let context = ContextId::from("list-ctx");
        let mut created = Vec::new();
        for i in 0..7 {
            let mut message = Message::user_text(format!("echo {i}"));
            message.context_id = Some(context.clone());
            created.push(send_task(&agent, SendMessageRequest::new(message)).await.id);
        }
        send_task(&agent, send("echo elsewhere")).await;
        created.reverse();

        let mut request = ListTasksRequest {
            context_id: context.clone(),
            page_size: Some(3),
            ..ListTasksRequest::default()
        };
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let page = agent.list_tasks(&ctx(), request.clone()).await.unwrap();
            assert_eq!(page.total_size, 7);
            assert_eq!(page.page_size, 3);
            assert!(page.tasks.iter().all(|t| t.artifacts.is_empty()));
            assert!(page.tasks.iter().all(|t| t.context_id == context));
            sizes.push(page.tasks.len());
            seen.extend(page.tasks.into_iter().map(|t| t.id));
            if page.next_page_token.is_empty() {
                break;
            }
            request.page_token = page.next_page_token;
        }
        assert_eq!(sizes, [3, 3, 1]);
        assert_eq!(seen, created);

        let all = agent
            .list_tasks(
                &ctx(),
                ListTasksRequest {
                    include_artifacts: Some(true),
                    status: TaskState::Completed,
                    history_length: Some(0),
                    ..ListTasksRequest::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(all.total_size, 8);
        assert_eq!(all.page_size, DEFAULT_PAGE_SIZE);
        assert_eq!(all.next_page_token, "");
        assert!(
            all.tasks
                .iter()
                .all(|t| t.artifacts.len() == 1 && t.history.is_empty())
        );
        assert_eq!(all.tasks[1].id, created[0]);

        let failed = ListTasksRequest {
            status: TaskState::Failed,
            ..ListTasksRequest::default()
        };
        assert_eq!(
            agent.list_tasks(&ctx(), failed).await.unwrap().total_size,
            0
        );
        let later = ListTasksRequest {
            status_timestamp_after: Some(mew_cards::Timestamp::from_unix(i64::MAX / 2, 0)),
            ..ListTasksRequest::default()
        };
        assert_eq!(agent.list_tasks(&ctx(), later).await.unwrap().total_size, 0);
    }

    #[tokio::test]
    async fn list_rejects_bad_page_sizes_and_tokens() {
        let agent = agent();
        for page_size in [0, -1, 101] {
            let request = ListTasksRequest {
                page_size: Some(page_size),
                ..ListTasksRequest::default()
            };
            assert_eq!(
                kind(agent.list_tasks(&ctx(), request).await),
                ErrorKind::InvalidParams
            );
        }
        for token in ["garbage", "12:", "x:y"] {
            let request = ListTasksRequest {
                page_token: token.to_owned(),
                ..ListTasksRequest::default()
            };
            assert_eq!(
                kind(agent.list_tasks(&ctx(), request).await),
                ErrorKind::InvalidParams
            );
        }
        let max = ListTasksRequest {
            page_size: Some(100),
            ..ListTasksRequest::default()
        };
        let page = agent.list_tasks(&ctx(), max).await.unwrap();
        assert_eq!(
            (page.page_size, page.total_size, page.tasks.len()),
            (100, 0, 0)
        );
    }

    #[tokio::test]
    async fn subscribe_sends_the_task_first_then_live_events() {
        let agent = agent();
        let task = send_task(&agent, immediately("wait")).await;
        wait_for(&agent, &task.id, TaskState::Working).await;
        let request = SubscribeToTaskRequest {
            id: task.id.clone(),
            ..SubscribeToTaskRequest::default()
        };
        let mut stream = agent
            .subscribe_to_task(&ctx(), request.clone())
            .await
            .unwrap();
        let first = stream.next().await.unwrap().unwrap();
        let StreamResponse::Task(snapshot) = first else {
            panic!("first item is not the task: {first:?}");
        };
        assert_eq!(snapshot.id, task.id);
        assert_eq!(snapshot.status.state, TaskState::Working);

        let cancel = CancelTaskRequest {
            id: task.id.clone(),
            ..CancelTaskRequest::default()
        };
        agent.cancel_task(&ctx(), cancel).await.unwrap();
        let rest = collect(stream).await;
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert!(
            matches!(&rest[0], StreamResponse::StatusUpdate(u) if u.status.state == TaskState::Canceled)
        );

        assert_eq!(
            kind(agent.subscribe_to_task(&ctx(), request).await),
            ErrorKind::UnsupportedOperation
        );
        let unknown = SubscribeToTaskRequest {
            id: TaskId::from("no-such-task"),
            ..SubscribeToTaskRequest::default()
        };
        assert_eq!(
            kind(agent.subscribe_to_task(&ctx(), unknown).await),
            ErrorKind::TaskNotFound
        );
    }

    #[tokio::test]
    async fn lagging_subscriber_still_gets_the_final_state() {
        let agent = EchoAgent::with_capacity(EchoAgent::default_card("http://x/"), 1);
        let mut stream = agent
            .send_streaming_message(&ctx(), send("stream 20"))
            .await
            .unwrap();
        let first = stream.next().await.unwrap().unwrap();
        let StreamResponse::Task(task) = first else {
            panic!("first item is not the task: {first:?}");
        };
        // Do not read the stream while the work runs: it lags far behind.
        wait_for(&agent, &task.id, TaskState::Completed).await;
        let rest = collect(stream).await;
        let last = rest.last().unwrap();
        let StreamResponse::Task(last) = last else {
            panic!("expected a snapshot after the lag, got {rest:?}");
        };
        assert_eq!(last.status.state, TaskState::Completed);
        assert_eq!(last.artifacts.len(), 1);
        assert_eq!(last.artifacts[0].parts.len(), 20);
        assert_eq!(rest.len(), 1, "{rest:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_streams_and_subscribers_all_see_the_final_state() {
        let agent = EchoAgent::with_capacity(EchoAgent::default_card("http://x/"), 2);
        let mut runs = Vec::new();
        for _ in 0..32 {
            let agent = agent.clone();
            runs.push(tokio::spawn(async move {
                let stream = agent
                    .send_streaming_message(&ctx(), send("stream 20"))
                    .await
                    .unwrap();
                let items = collect(stream).await;
                let Some(StreamResponse::Task(first)) = items.first() else {
                    panic!("first item is not the task: {items:?}");
                };
                let mut folded = first.clone();
                for item in &items[1..] {
                    folded.apply(item);
                }
                folded
            }));
        }
        for run in runs {
            let task = run.await.unwrap();
            assert_eq!(task.status.state, TaskState::Completed);
            assert_eq!(task.artifacts.len(), 1);
            assert_eq!(task.artifacts[0].parts.len(), 20);
        }
        assert_eq!(agent.task_count(), 32);
    }

    #[tokio::test]
    async fn dropped_stream_does_not_stop_the_work() {
        let agent = agent();
        let mut stream = agent
            .send_streaming_message(&ctx(), send("stream 50"))
            .await
            .unwrap();
        let Some(Ok(StreamResponse::Task(task))) = stream.next().await else {
            panic!("first item is not the task");
        };
        drop(stream);
        let done = wait_for(&agent, &task.id, TaskState::Completed).await;
        assert_eq!(done.artifacts[0].parts.len(), 50);
    }

    #[tokio::test]
    async fn push_configs_are_stored_listed_and_deleted() {
        let agent = agent();
        let task = send_task(&agent, immediately("wait")).await;
        let create = TaskPushNotificationConfig {
            task_id: task.id.clone(),
            url: "https://hooks.example/a".to_owned(),
            token: "tok".to_owned(),
            ..TaskPushNotificationConfig::default()
        };
        let created = agent
            .create_task_push_notification_config(&ctx(), create.clone())
            .await
            .unwrap();
        assert!(is_uuid_v7(&created.id), "{}", created.id);
        assert_eq!(created.task_id, task.id);
        assert_eq!(created.token, "tok");
        let named = TaskPushNotificationConfig {
            id: "b".to_owned(),
            ..create.clone()
        };
        agent
            .create_task_push_notification_config(&ctx(), named)
            .await
            .unwrap();

        let get = GetTaskPushNotificationConfigRequest {
            task_id: task.id.clone(),
            id: created.id.clone(),
            ..GetTaskPushNotificationConfigRequest::default()
        };
        let fetched = agent
            .get_task_push_notification_config(&ctx(), get.clone())
            .await
            .unwrap();
        assert_eq!(fetched, created);

        let list = ListTaskPushNotificationConfigsRequest {
            task_id: task.id.clone(),
            page_size: 1,
            ..ListTaskPushNotificationConfigsRequest::default()
        };
        let page = agent
            .list_task_push_notification_configs(&ctx(), list.clone())
            .await
            .unwrap();
        assert_eq!(page.configs, std::slice::from_ref(&created));
        assert_eq!(page.next_page_token, "1");
        let page = agent
            .list_task_push_notification_configs(
                &ctx(),
                ListTaskPushNotificationConfigsRequest {
                    page_token: page.next_page_token,
                    ..list
                },
            )
            .await
            .unwrap();
        assert_eq!(page.configs.len(), 1);
        assert_eq!(page.configs[0].id, "b");
        assert_eq!(page.next_page_token, "");

        agent
            .delete_task_push_notification_config(&ctx(), get.clone())
            .await
            .unwrap();
        agent
            .delete_task_push_notification_config(&ctx(), get.clone())
            .await
            .unwrap();
        let gone = agent.get_task_push_notification_config(&ctx(), get).await;
        assert_eq!(kind(gone), ErrorKind::TaskNotFound);

        let no_url = TaskPushNotificationConfig {
            url: String::new(),
            ..create.clone()
        };
        let result = agent
            .create_task_push_notification_config(&ctx(), no_url)
            .await;
        assert_eq!(kind(result), ErrorKind::InvalidParams);
        let no_task = TaskPushNotificationConfig {
            task_id: TaskId::from("no-such-task"),
            ..create
        };
        let result = agent
            .create_task_push_notification_config(&ctx(), no_task)
            .await;
        assert_eq!(kind(result), ErrorKind::TaskNotFound);
        let delete_unknown = GetTaskPushNotificationConfigRequest {
            task_id: TaskId::from("no-such-task"),
            id: "b".to_owned(),
            ..GetTaskPushNotificationConfigRequest::default()
        };
        let result = agent
            .delete_task_push_notification_config(&ctx(), delete_unknown)
            .await;
        assert_eq!(kind(result), ErrorKind::TaskNotFound);
    }

    #[tokio::test]
    async fn cards_describe_the_echo_agent() {
        let agent = EchoAgent::new("http://127.0.0.1:8080");
        let card = agent.card().await.unwrap();
        assert_eq!(card.name, "echo");
        assert_eq!(card.version, "1.0.0");
        assert_eq!(card.capabilities.streaming, Some(true));
        assert_eq!(card.capabilities.push_notifications, Some(true));
        assert_eq!(card.default_input_modes, ["text/plain"]);
        assert_eq!(card.default_output_modes, ["text/plain"]);
        assert_eq!(card.skills.len(), 1);
        assert_eq!(card.skills[0].id, "echo");
        assert_eq!(card.skills[0].tags, ["test"]);
        let interfaces: Vec<(&str, &str, &str)> = card
            .supported_interfaces
            .iter()
            .map(|i| {
                (
                    i.url.as_str(),
                    i.protocol_binding.as_str(),
                    i.protocol_version.as_str(),
                )
            })
            .collect();
        assert_eq!(
            interfaces,
            [
                ("http://127.0.0.1:8080", "JSONRPC", "1.0"),
                ("http://127.0.0.1:8080", "HTTP+JSON", "1.0"),
            ]
        );
        let extended = agent
            .get_extended_agent_card(&ctx(), GetExtendedAgentCardRequest::default())
            .await
            .unwrap();
        assert_eq!(
            extended.description,
            format!("{} (extended)", card.description)
        );
    }
}
