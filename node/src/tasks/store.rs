//! `TaskStore`: where tasks live between and across runs of the node.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mew_cards::{
    ContextId, StreamResponse, Task, TaskId, TaskPushNotificationConfig, TaskState, Timestamp,
};

/// A task as the node keeps it: the A2A view plus what only the node needs.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    /// The A2A view: id, context, status, history, artifacts, metadata.
    pub task: Task,
    /// The role that runs it.
    pub role: String,
    /// The principal that created it (`None` without authentication).
    pub owner: Option<String>,
    /// The task that delegated this one, if any.
    pub parent: Option<TaskId>,
    /// When it was created.
    pub created: Timestamp,
    /// State private to the role's runner (conversation, usage, ...); `Null` when none.
    pub private: serde_json::Value,
    /// How many times the current turn was started over because the node running it was
    /// lost (0 when it never was), less one for each time a stopping node handed it back
    /// (that is no loss: it may be -1 until the turn starts again); a turn that ends resets
    /// it.
    pub attempts: i32,
    /// The number of the task's last event: 1 for the snapshot it was created with, one
    /// more for each event after it. Events are stored under their number, with the
    /// snapshot they bring the task to, so the log has no gaps.
    pub generation: u64,
}

impl StoredTask {
    /// The time of the task's current status (its creation time if unset).
    pub fn status_time(&self) -> Timestamp {
        self.task.status.timestamp.unwrap_or(self.created)
    }
}

/// A position in the newest-first order of tasks: status time, then id, both descending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// Status time of the last task already returned.
    pub status_time: Timestamp,
    /// Id of the last task already returned.
    pub id: TaskId,
}

/// Which tasks to list, newest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskQuery {
    /// Only this role's tasks.
    pub role: Option<String>,
    /// Only this principal's tasks.
    pub owner: Option<String>,
    /// Only this context's tasks.
    pub context_id: Option<ContextId>,
    /// Only tasks in this state.
    pub state: Option<TaskState>,
    /// Only tasks whose status time is at or after this.
    pub status_after: Option<Timestamp>,
    /// Start after this position.
    pub after: Option<Cursor>,
    /// At most this many tasks.
    pub limit: usize,
    /// End the page early, after the task whose stored JSON brings the page to this many
    /// bytes (a page always holds a task): a listing of big tasks costs no more than this,
    /// whatever the page size (`None`: no such bound).
    pub max_bytes: Option<usize>,
    /// The total an earlier page of this listing counted: the store gives it back as the
    /// page's `total` and counts nothing. What a listing with `status_after` carries from
    /// its first page to the next ones, since only that filter is counted by walking the
    /// matching tasks (see [`TaskStore::list`]).
    pub known_total: Option<usize>,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskPage {
    /// The tasks, newest first.
    pub tasks: Vec<StoredTask>,
    /// How many tasks match the query's filters in all (ignoring `after` and `limit`), or the
    /// query's `known_total`.
    pub total: usize,
    /// Where the next page starts, if there is one.
    pub next: Option<Cursor>,
}

/// A notification to enqueue with a task's change: one event for one of its push configs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    /// The task.
    pub task_id: TaskId,
    /// The push config (its `id`) the event goes to.
    pub config_id: String,
    /// The event: one `StreamResponse` as JSON.
    pub body: String,
}

/// A notification waiting in the outbox: the oldest undelivered one of its target (task and
/// config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingPush {
    /// Its place in the outbox; a target's notifications go out in this order.
    pub seq: i64,
    /// The task.
    pub task_id: TaskId,
    /// The push config's id.
    pub config_id: String,
    /// The config, `None` when it is gone or cannot be read (the notification is then dropped).
    pub config: Option<TaskPushNotificationConfig>,
    /// The event: one `StreamResponse` as JSON.
    pub body: String,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// When it is due, in milliseconds since the epoch.
    pub next_at: i64,
}

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("task store: {0}")]
    Backend(String),
    /// A new task names a context that belongs to another principal (it holds a task
    /// of another owner).
    #[error("context {0} not found")]
    ForeignContext(ContextId),
    /// Another replica runs the task now (it took the task over when this one's lease
    /// lapsed): nothing was written, and this replica must stop running it.
    #[error("task {0} is run by another replica now; this one's write was refused")]
    Fenced(TaskId),
    /// A stored record cannot be read back.
    #[error("task store: task {id} is corrupt: {reason}")]
    Corrupt {
        /// The task.
        id: String,
        /// What is wrong.
        reason: String,
    },
}

/// Who this process is among the replicas that share a store, and how long its hold on a
/// task lasts without a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// Unique among the replicas; the same across restarts of one data directory, so a
    /// replica that restarts takes its own unfinished tasks back at once.
    pub id: String,
    /// Where it serves, for `/status`.
    pub address: String,
    /// How long a lease lasts without a heartbeat (the database's clock judges it).
    pub lease: Duration,
}

/// What a heartbeat found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// Tasks this replica held and holds no more: another replica took them over. Whatever
    /// still runs them must stop, without writing, and then [`TaskStore::release`] them:
    /// until then the store keeps the lost epoch, so that a late write of the old run is
    /// refused.
    pub lost: Vec<TaskId>,
    /// Tasks this replica holds whose cancellation another replica asked for.
    pub cancel: Vec<TaskId>,
    /// How many other replicas are alive (as [`ReplicaStatus::alive`]): whether waiting work is
    /// worth offering.
    pub others: usize,
}

/// A replica as the shared store knows it (`/status`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaStatus {
    /// Its id.
    pub id: String,
    /// Where it serves.
    pub address: String,
    /// When it started.
    pub started: Timestamp,
    /// Its last heartbeat, by the database's clock.
    pub heartbeat: Timestamp,
    /// The tasks it held at that heartbeat.
    pub running: u32,
    /// Whether its heartbeat is recent (within two leases).
    pub alive: bool,
}

/// A wake-up from the shared store: another replica changed something (the change itself is
/// read from the store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A task has a new event.
    Event(TaskId),
    /// Someone asked to cancel a task.
    Cancel(TaskId),
    /// A task was let go of, unfinished: a replica with room may take it.
    Work,
    /// A task's push configs changed.
    PushConfigs(TaskId),
    /// Wake-ups may have been lost (the listening connection was down): read again
    /// whatever is being watched.
    Missed,
}

/// Durable task storage. Writes are durable when they return.
///
/// Implementations: SQLite (`super::sqlite`, one file in the data directory, one process),
/// and PostgreSQL (`super::postgres`, shared by replicas). A new one is a file beside them and
/// one line in [`super::open_store`].
///
/// **Leases.** On a shared store a replica writes a task only while it holds the task's
/// lease: [`TaskStore::create`] takes it, [`TaskStore::claim`] and [`TaskStore::take_over`]
/// take it from nobody or from a replica whose lease lapsed (with a new epoch), heartbeats
/// keep it, and a write that brings the task out of SUBMITTED and WORKING lets go of it.
/// Every write checks the epoch: one from a replica that lost the task is refused with
/// [`StoreError::Fenced`]. A store of one process holds every task; the lease methods'
/// defaults say so.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Where the tasks are, for the node's start-up lines and its errors: a file, a server.
    fn location(&self) -> String;

    /// Checks that the store answers now (what `/readyz` reports).
    async fn ping(&self) -> Result<(), StoreError>;

    /// Lets go of this handle. The last one waits until every write it accepted is durable
    /// and the store is closed, and fails if the store had stopped early; any other only
    /// drops itself.
    async fn close(self: Arc<Self>) -> Result<(), StoreError>;

    /// Inserts the task, or replaces the stored one with the same id.
    async fn put(&self, task: &StoredTask) -> Result<(), StoreError>;

    /// Stores a new task with its push `configs` and the notifications of its first
    /// events (`outbox`), and logs `events` (what made the task, in order: its first snapshot,
    /// then, for a task that started at once, WORKING) as its event numbers up to
    /// `task.generation`, or, when `events` is empty, the task as it is as its event number
    /// `task.generation`; in one transaction, unless its context belongs to someone else:
    /// a context belongs to the owner of its tasks, so when the context holds a task of
    /// another owner nothing is written and the answer is [`StoreError::ForeignContext`].
    /// The check and the write are atomic: two principals naming one new context at once
    /// cannot both get it.
    async fn create(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError>;

    /// Whether `owner` may use the context: it holds no task of another owner (a context
    /// nobody has used yet is free).
    async fn context_admits(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// [`TaskStore::put`], and in the same transaction logs `events` (the changes that made
    /// this snapshot, in order) as the task's last event numbers, the last one
    /// `task.generation`, saves `configs` (push configs of the task, replacing those with the
    /// same id) and enqueues `outbox`: either all of it is durable or none. An event number
    /// already logged is refused, and nothing is written.
    async fn put_with_events(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError>;

    /// The logged events of a task after number `after`, in order, at most `limit`.
    async fn events(
        &self,
        task: &TaskId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, StreamResponse)>, StoreError>;

    /// The push configs of a task, by id.
    async fn push_configs(
        &self,
        task: &TaskId,
    ) -> Result<Vec<TaskPushNotificationConfig>, StoreError>;

    /// Saves a push config, replacing the one with the same task and id.
    async fn put_push_config(&self, config: &TaskPushNotificationConfig) -> Result<(), StoreError>;

    /// Deletes a push config and the notifications still waiting for it; deleting one that
    /// does not exist is not an error.
    async fn delete_push_config(&self, task: &TaskId, id: &str) -> Result<(), StoreError>;

    /// The oldest waiting notification of each target (task and config), due or not, by
    /// `seq`, at most `limit`.
    async fn push_heads(&self, limit: usize) -> Result<Vec<PendingPush>, StoreError>;

    /// Removes a notification from the outbox: delivered, or given up.
    async fn push_done(&self, seq: i64) -> Result<(), StoreError>;

    /// How many notifications wait in the outbox, counted up to `limit` (a bounded read for
    /// `/metrics`, however long the outbox grows).
    async fn push_depth(&self, limit: u64) -> Result<u64, StoreError>;

    /// Records a failed attempt: one more attempt, due again at `next_at` (milliseconds
    /// since the epoch), with `error` as the last error.
    async fn push_retry(&self, seq: i64, next_at: i64, error: &str) -> Result<(), StoreError>;

    /// The task with this id.
    async fn get(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError>;

    /// A page of tasks matching `query`, newest first, and how many match in all.
    ///
    /// What it costs must not grow with the store: a page is a range of an index (one per
    /// task state, merged, when no state is asked for), and the total is exact, read from
    /// counts the store keeps per owner, role and state in the same transaction as every
    /// task write. Two filters are counted over the tasks they match instead: a context
    /// (few tasks) and `status_after` (a range of the same indexes, as long as the range).
    ///
    /// Each task comes without its private state (`private` is `null`): a listing shows
    /// tasks, and the private state (a model role's whole conversation) can be most of a row.
    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError>;

    /// The tasks of a context that belong to `owner` (`None`: the tasks without an owner),
    /// oldest first (by creation time). What a turn reads of its conversation: never
    /// another principal's tasks, whatever the context holds.
    async fn context(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<Vec<StoredTask>, StoreError>;

    /// Takes at most `limit` tasks still SUBMITTED or WORKING that no live replica holds,
    /// oldest first: what a replica (or the last run of this one) left unfinished when it was
    /// lost or stopped, to run them. A store of one process gives every unfinished task.
    async fn take_over(&self, limit: usize) -> Result<Vec<StoredTask>, StoreError>;

    /// Whether other processes share this store (replicas): tasks change without this one
    /// writing them.
    fn shared(&self) -> bool {
        false
    }

    /// Takes the lease of a task that is not over and that no live replica holds (it waits
    /// for input, or its replica was lost), and reads it: what a replica does before it
    /// continues or cancels a task. `None`: no such task, it is over, or a live replica
    /// (this one included) holds it.
    async fn claim(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.get(id).await
    }

    /// Lets go of a task's lease, leaving the task as it is stored (another replica may take
    /// it), and follows it (see [`TaskStore::follow`]): whoever takes it wakes this replica.
    async fn release(&self, _id: &TaskId) -> Result<(), StoreError> {
        Ok(())
    }

    /// Offers a new task waiting for a slot here to the other replicas: [`TaskStore::release`],
    /// except that this process's own `take_over` leaves the task to the turn waiting for it
    /// here, which claims it back when its slot comes.
    async fn offer(&self, id: &TaskId) -> Result<(), StoreError> {
        self.release(id).await
    }

    /// Keeps this replica's leases alive, and says which it lost and which tasks others want
    /// canceled.
    async fn heartbeat(&self) -> Result<Heartbeat, StoreError> {
        Ok(Heartbeat::default())
    }

    /// Asks the replica that holds a task to cancel it.
    async fn request_cancel(&self, _id: &TaskId) -> Result<(), StoreError> {
        Ok(())
    }

    /// Asks for a wake-up ([`Change::Event`]) at every later event of a task: a replica
    /// follows a task another one runs. Before it, the task's events wake nobody; after it,
    /// the follower reads the task once to see what came between.
    async fn follow(&self, _id: &TaskId) -> Result<(), StoreError> {
        Ok(())
    }

    /// Wake-ups for what other replicas change; `None` when nothing else writes.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }

    /// The replicas sharing the store, by id (none for a store of one process).
    async fn replicas(&self) -> Result<Vec<ReplicaStatus>, StoreError> {
        Ok(Vec::new())
    }

    /// How many task leases this replica holds; `None` for a store of one process, which has
    /// no leases.
    async fn leases_held(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }
}
