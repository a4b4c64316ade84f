//! `SqliteStore`: the durable `TaskStore`, one SQLite file in WAL mode with a group-committing writer thread.
//!
//! Every write (a `put`, a push config) travels as a command over a bounded
//! channel to the writer thread, which owns the only write connection. The
//! thread takes whatever is queued, applies it in one transaction, commits, and
//! only then acknowledges each command: a caller that awaited `put` knows its
//! task is on disk, and many concurrent writers share one commit. Reads run on
//! the blocking pool with their own connections, which WAL lets run beside the
//! writer. Checkpoints, which copy the WAL back into the database file, run on a
//! thread of their own when the writer asks ([`WalLimits`]), so that no write
//! waits for one.
//!
//! Durability: `synchronous=NORMAL`. In WAL mode a commit then survives a crash
//! of the process at once, and a crash of the machine once the WAL is synced
//! (at the next checkpoint); `FULL` would sync every group commit instead.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use mew_cards::{
    ContextId, StreamResponse, TaskId, TaskPushNotificationConfig, TaskState, Timestamp,
};
use rusqlite::config::DbConfig;
use rusqlite::types::Value as SqlValue;
use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, ErrorCode, OpenFlags, params, params_from_iter};
use tokio::sync::{mpsc, oneshot};

use super::rows::{ConfigRow, Row, assemble, bound_nanos, decode_config, decode_event};
use super::store::{
    Cursor, OutboxRow, PendingPush, StoreError, StoredTask, TaskPage, TaskQuery, TaskStore,
};

/// Schema migrations, in order: `MIGRATIONS[n]` moves a file from version `n`
/// to `n + 1` (`PRAGMA user_version` holds the file's version). Append only.
const MIGRATIONS: &[&str] = &[
    // 1: tasks, with the columns that listing filters and orders on.
    "CREATE TABLE tasks (
        id          TEXT PRIMARY KEY NOT NULL,
        context_id  TEXT NOT NULL,
        role        TEXT NOT NULL,
        owner       TEXT,
        parent      TEXT,
        state       INTEGER NOT NULL,
        status_time INTEGER NOT NULL,
        created     INTEGER NOT NULL,
        task        TEXT NOT NULL,
        private     TEXT NOT NULL
    ) STRICT;
    CREATE INDEX tasks_by_time    ON tasks (status_time DESC, id DESC);
    CREATE INDEX tasks_by_role    ON tasks (role, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner   ON tasks (owner, status_time DESC, id DESC);
    CREATE INDEX tasks_by_context ON tasks (context_id, created, id);
    CREATE INDEX tasks_by_state   ON tasks (state);",
    // 2: push notification configs, and the outbox of notifications not yet delivered.
    "CREATE TABLE push_configs (
        task_id TEXT NOT NULL,
        id      TEXT NOT NULL,
        config  TEXT NOT NULL,
        PRIMARY KEY (task_id, id)
    ) STRICT;
    CREATE TABLE push_outbox (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id    TEXT NOT NULL,
        config_id  TEXT NOT NULL,
        body       TEXT NOT NULL,
        attempts   INTEGER NOT NULL DEFAULT 0,
        next_at    INTEGER NOT NULL DEFAULT 0,
        last_error TEXT
    ) STRICT;
    CREATE INDEX push_outbox_by_target ON push_outbox (task_id, config_id, seq);",
    // 3: how often a task's turn was started over after its node was lost.
    "ALTER TABLE tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;",
    // 4: the number of a task's last event, and the log of its events under their numbers.
    "ALTER TABLE tasks ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE task_events (
        task_id    TEXT NOT NULL,
        generation INTEGER NOT NULL,
        event      TEXT NOT NULL,
        PRIMARY KEY (task_id, generation)
    ) STRICT, WITHOUT ROWID;",
    // 5: how many tasks each owner (`owned` 0: none, `owner` ''), role and state has, kept
    // by triggers in the transaction of every task write, so a listing's total is a sum of a
    // few rows; and indexes that end in (state, status time, id) after each scope a listing
    // has (every task, a role, an owner, an owner's role): a page is a range of one of them
    // per state. They replace the indexes by time, role, owner and state.
    "CREATE TABLE task_counts (
        owner TEXT NOT NULL,
        owned INTEGER NOT NULL,
        role  TEXT NOT NULL,
        state INTEGER NOT NULL,
        n     INTEGER NOT NULL,
        PRIMARY KEY (owner, owned, role, state)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO task_counts (owner, owned, role, state, n)
        SELECT coalesce(owner, ''), owner IS NOT NULL, role, state, count(*) FROM tasks
        GROUP BY 1, 2, 3, 4;
    CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO task_counts (owner, owned, role, state, n)
        VALUES (coalesce(new.owner, ''), new.owner IS NOT NULL, new.role, new.state, 1)
        ON CONFLICT (owner, owned, role, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER task_counts_update AFTER UPDATE OF owner, role, state ON tasks
    WHEN new.owner IS NOT old.owner OR new.role IS NOT old.role OR new.state IS NOT old.state
    BEGIN
        UPDATE task_counts SET n = n - 1
        WHERE owner = coalesce(old.owner, '') AND owned = (old.owner IS NOT NULL)
          AND role = old.role AND state = old.state;
        INSERT INTO task_counts (owner, owned, role, state, n)
        VALUES (coalesce(new.owner, ''), new.owner IS NOT NULL, new.role, new.state, 1)
        ON CONFLICT (owner, owned, role, state) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1
        WHERE owner = coalesce(old.owner, '') AND owned = (old.owner IS NOT NULL)
          AND role = old.role AND state = old.state;
    END;
    DROP INDEX tasks_by_time;
    DROP INDEX tasks_by_role;
    DROP INDEX tasks_by_owner;
    DROP INDEX tasks_by_state;
    CREATE INDEX tasks_by_state      ON tasks (state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_role       ON tasks (role, state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner      ON tasks (owner, state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner_role ON tasks (owner, role, state, status_time DESC, id DESC);",
    // 6: the owner's indexes hold owned tasks only. A listing by owner always names one
    // (`owner = ?`, which implies the indexes' condition), and a task without an owner (every
    // task of a node without `auth:`) then changes two indexes fewer at each write.
    "DROP INDEX tasks_by_owner;
    DROP INDEX tasks_by_owner_role;
    CREATE INDEX tasks_by_owner      ON tasks (owner, state, status_time DESC, id DESC)
        WHERE owner IS NOT NULL;
    CREATE INDEX tasks_by_owner_role ON tasks (owner, role, state, status_time DESC, id DESC)
        WHERE owner IS NOT NULL;",
];

/// The schema version this build writes.
const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// When the task store copies its WAL back into the database file (a checkpoint), in WAL
/// frames (pages, 4 KiB each).
///
/// SQLite's own automatic checkpoint runs inside the commit that crosses its threshold: the
/// writer copies the WAL back and syncs both files while every write waits behind it. At 32
/// sends in flight that wait was most of the node's p99 (18 to 20 ms, against 6.5 ms with no
/// checkpoint at all). So the writer hands checkpoints to a thread of its own (see
/// [`run_checkpointer`]), which copies while the writer goes on appending. A WAL is only
/// written from its start again (restarted) once all of it has been copied, when no commit
/// came in between; the writer arranges that itself by copying the few frames committed during
/// the background checkpoint, then the next commit restarts the WAL.
#[derive(Debug, Clone, Copy)]
struct WalLimits {
    /// The WAL's size that asks the checkpointer for a checkpoint (16 MiB). A page that many
    /// commits change (the newest leaf of each index) is copied once per checkpoint, so a
    /// larger WAL copies fewer pages per task; SQLite's default is 1 000.
    checkpoint: i32,
    /// At most this many frames left by a background checkpoint are copied by the writer
    /// itself; with more, the checkpointer runs again first.
    catch_up: i32,
    /// The WAL's size at which the writer copies it itself whenever the checkpointer is not
    /// at it (64 MiB), for when the checkpointer cannot keep up or failed.
    limit: i32,
}

impl WalLimits {
    const DEFAULT: Self = Self {
        checkpoint: 4096,
        catch_up: 1024,
        limit: 16_384,
    };
}

/// How long a connection waits for a lock held by another connection or process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands that may wait for the writer before senders wait for room.
const QUEUE_CAPACITY: usize = 1024;

/// The most commands the writer commits in one transaction.
const MAX_BATCH: usize = 256;

/// Read connections kept open between reads.
const MAX_IDLE_READERS: usize = 4;

/// The columns `decode` reads, in its order.
const COLUMNS: &str =
    "id, role, owner, parent, created, status_time, task, private, attempts, generation";

/// [`COLUMNS`] as a listing reads them: the private state left out (read as `null`), as
/// [`TaskStore::list`] says.
const LIST_COLUMNS: &str =
    "id, role, owner, parent, created, status_time, task, 'null', attempts, generation";

/// The tasks of one context (`?1`) and one owner (`?2`, `NULL` for none), oldest first.
const CONTEXT_SQL: &str = "SELECT id, role, owner, parent, created, status_time, task, private, \
     attempts, generation \
     FROM tasks WHERE context_id = ?1 AND owner IS ?2 ORDER BY created, id";

/// Whether the context `?1` holds a task of an owner other than `?2` (`NULL` for none).
const FOREIGN_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM tasks WHERE context_id = ?1 AND owner IS NOT ?2)";

/// The durable task store: one SQLite database file.
///
/// A cheap handle: clones share the file, the writer thread and the read
/// connections. Dropping the last handle lets the writer commit what is still
/// queued and waits for it to stop; async code should prefer
/// [`SqliteStore::close`], which waits without blocking the runtime.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.readers.path)
            .finish_non_exhaustive()
    }
}

/// What the handles share.
struct Inner {
    /// Feeds the writer; `None` once stopping.
    sender: Option<mpsc::Sender<Command>>,
    /// The writer thread; it returns how many batches it handled.
    writer: Option<JoinHandle<u64>>,
    /// The checkpoint thread; it ends when the writer has.
    checkpointer: Option<JoinHandle<()>>,
    /// The writer's WAL size and the checkpoints' state, for tests.
    #[cfg(test)]
    wal: (Arc<AtomicI32>, Arc<Checkpoints>),
    /// Idle read connections.
    readers: Arc<ReadPool>,
    /// Why the writer stopped early, set before it drops its queue.
    stopped: Arc<Mutex<Option<String>>>,
}

impl Inner {
    /// Closes the queue; the writer commits what is in it, then ends.
    fn stop(&mut self) -> Option<JoinHandle<u64>> {
        self.sender = None;
        self.writer.take()
    }

    /// The error for a call that found the writer gone.
    fn writer_stopped(&self) -> StoreError {
        let reason = self
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "it ended unexpectedly".to_owned());
        StoreError::Backend(format!("the task store's writer stopped: {reason}"))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(writer) = self.stop()
            && writer.join().is_err()
        {
            tracing::error!("the task store's writer thread panicked");
        }
        if let Some(checkpointer) = self.checkpointer.take()
            && checkpointer.join().is_err()
        {
            tracing::error!("the task store's checkpoint thread panicked");
        }
    }
}

impl SqliteStore {
    /// Opens the database at `path`, creating the file and its directory if
    /// needed, and brings its schema up to date.
    ///
    /// Fails with a clear error when the file is not a SQLite database or was
    /// written by a newer version of Mew. Does blocking file I/O: call it at
    /// start, or from a blocking context.
    pub(crate) fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, WalLimits::DEFAULT)
    }

    /// [`SqliteStore::open`], checkpointing by `limits`.
    fn open_with(path: &Path, limits: WalLimits) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Backend(format!(
                    "cannot create the directory {} for the task store: {e}",
                    dir.display()
                ))
            })?;
        }
        let mut writer = open_connection(path, Access::Write)?;
        migrate(&mut writer, path)?;
        let readers = Arc::new(ReadPool {
            path: path.to_owned(),
            idle: Mutex::new(Vec::with_capacity(MAX_IDLE_READERS)),
        });
        // One reader now, so that a problem shows at start rather than at the first read.
        readers.give_back(open_connection(path, Access::Read)?);

        let checkpoints = Arc::new(Checkpoints::default());
        let frames = Arc::new(AtomicI32::new(0));
        writer
            .wal_hook(Some({
                let frames = Arc::clone(&frames);
                move |_: &mut rusqlite::hooks::Wal, pages| {
                    frames.store(pages, Ordering::Relaxed);
                    Ok(())
                }
            }))
            .map_err(|e| sql_error(path, "cannot watch the task store's WAL", e))?;
        let checkpoint_conn = open_connection(path, Access::Write)?;
        let checkpointer = std::thread::Builder::new()
            .name("mew-checkpoint".to_owned())
            .spawn({
                let checkpoints = Arc::clone(&checkpoints);
                move || run_checkpointer(&checkpoint_conn, &checkpoints)
            })
            .map_err(|e| {
                StoreError::Backend(format!(
                    "cannot start the checkpoint thread for the task store {}: {e}",
                    path.display()
                ))
            })?;
        #[cfg(test)]
        let watched = (Arc::clone(&frames), Arc::clone(&checkpoints));
        let wal = Checkpointing {
            limits,
            frames,
            checkpoints: Arc::clone(&checkpoints),
        };
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let stopped = Arc::new(Mutex::new(None));
        let spawned = std::thread::Builder::new()
            .name("mew-task-store".to_owned())
            .spawn({
                let stopped = Arc::clone(&stopped);
                move || {
                    // The checkpointer ends with the writer, however it ends; the database
                    // closes when both have.
                    let _closing = CloseOnDrop(Arc::clone(&wal.checkpoints));
                    let batches = run_writer(writer, receiver, &stopped, &wal);
                    tracing::debug!(batches, "the task store's writer stopped");
                    batches
                }
            });
        let thread = match spawned {
            Ok(thread) => thread,
            Err(e) => {
                checkpoints.close();
                if checkpointer.join().is_err() {
                    tracing::error!("the task store's checkpoint thread panicked");
                }
                return Err(StoreError::Backend(format!(
                    "cannot start the writer thread for the task store {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                sender: Some(sender),
                writer: Some(thread),
                checkpointer: Some(checkpointer),
                #[cfg(test)]
                wal: watched,
                readers,
                stopped,
            }),
        })
    }

    /// Releases this handle; if it is the last one, waits until the writer has
    /// committed every queued write and closed the database.
    ///
    /// Returns an error if the writer had stopped early (it panicked), so that
    /// shutdown can report it. With other handles alive this only drops this one.
    pub(crate) async fn close(self) -> Result<(), StoreError> {
        let Some(mut inner) = Arc::into_inner(self.inner) else {
            return Ok(());
        };
        if let Some(writer) = inner.stop() {
            let checkpointer = inner.checkpointer.take();
            let joined = tokio::task::spawn_blocking(move || {
                let writer = writer.join();
                // The writer ended the checkpointer as it stopped.
                let checkpointer = checkpointer.map(JoinHandle::join);
                (writer, checkpointer)
            })
            .await
            .map_err(|e| {
                StoreError::Backend(format!("cannot wait for the task store's writer: {e}"))
            })?;
            match joined {
                (Err(_), _) => {
                    return Err(StoreError::Backend(
                        "the task store's writer thread panicked".to_owned(),
                    ));
                }
                (_, Some(Err(_))) => {
                    return Err(StoreError::Backend(
                        "the task store's checkpoint thread panicked".to_owned(),
                    ));
                }
                _ => {}
            }
        }
        if inner
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return Err(inner.writer_stopped());
        }
        Ok(())
    }

    /// Hands `op` to the writer and waits until it is committed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the wait, not the write: a command already
    /// queued is still committed.
    async fn write(&self, op: Op) -> Result<Vec<TaskId>, StoreError> {
        let sender = self
            .inner
            .sender
            .as_ref()
            .ok_or_else(|| self.inner.writer_stopped())?;
        let (ack, done) = oneshot::channel();
        sender
            .send(Command { op, ack })
            .await
            .map_err(|_| self.inner.writer_stopped())?;
        done.await.map_err(|_| self.inner.writer_stopped())?
    }

    /// Runs `read` on a pooled read connection, off the async runtime.
    async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let readers = Arc::clone(&self.inner.readers);
        tokio::task::spawn_blocking(move || readers.with(read))
            .await
            .map_err(|e| StoreError::Backend(format!("a task store read did not finish: {e}")))?
    }
}

#[async_trait]
impl TaskStore for SqliteStore {
    fn location(&self) -> String {
        self.inner.readers.path.display().to_string()
    }

    async fn close(self: Arc<Self>) -> Result<(), StoreError> {
        match Arc::try_unwrap(self) {
            Ok(store) => SqliteStore::close(store).await,
            Err(_) => Ok(()),
        }
    }

    async fn put(&self, task: &StoredTask) -> Result<(), StoreError> {
        let row = Row::encode(task)?;
        self.write(Op::Put(row)).await.map(drop)
    }

    async fn create(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        let row = if events.is_empty() {
            Row::with_snapshot(task)?
        } else {
            Row::with_events(task, events)?
        };
        let configs = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        self.write(Op::Create {
            row,
            configs,
            outbox: outbox.to_vec(),
        })
        .await
        .map(drop)
    }

    async fn context_admits(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<bool, StoreError> {
        let context_id = context_id.as_str().to_owned();
        let owner = owner.map(str::to_owned);
        self.read(move |conn| {
            foreign_owner(conn, &context_id, owner.as_deref())
                .map(|foreign| !foreign)
                .map_err(|e| read_error("a context", e))
        })
        .await
    }

    async fn put_with_events(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        let row = Row::with_events(task, events)?;
        let configs = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        self.write(Op::PutWithEvents {
            row,
            configs,
            outbox: outbox.to_vec(),
        })
        .await
        .map(drop)
    }

    async fn push_configs(
        &self,
        task: &TaskId,
    ) -> Result<Vec<TaskPushNotificationConfig>, StoreError> {
        let task = task.as_str().to_owned();
        self.read(move |conn| {
            let fail = |e| read_error("push configs", e);
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, config FROM push_configs WHERE task_id = ?1 ORDER BY id",
                )
                .map_err(fail)?;
            let rows = stmt
                .query_map([&task], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(fail)?;
            let mut configs = Vec::new();
            for row in rows {
                let (id, json) = row.map_err(fail)?;
                configs.push(decode_config(&task, &id, &json)?);
            }
            Ok(configs)
        })
        .await
    }

    async fn put_push_config(&self, config: &TaskPushNotificationConfig) -> Result<(), StoreError> {
        let row = ConfigRow::encode(config)?;
        self.write(Op::PutConfig(row)).await.map(drop)
    }

    async fn delete_push_config(&self, task: &TaskId, id: &str) -> Result<(), StoreError> {
        self.write(Op::DeleteConfig {
            task_id: task.as_str().to_owned(),
            id: id.to_owned(),
        })
        .await
        .map(drop)
    }

    async fn push_heads(&self, limit: usize) -> Result<Vec<PendingPush>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| push_heads(conn, limit)).await
    }

    async fn push_done(&self, seq: i64) -> Result<(), StoreError> {
        self.write(Op::PushDone(seq)).await.map(drop)
    }

    async fn push_depth(&self, limit: u64) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            conn.prepare_cached("SELECT count(*) FROM (SELECT 1 FROM push_outbox LIMIT ?1)")
                .and_then(|mut stmt| stmt.query_row([limit], |row| row.get::<_, i64>(0)))
                .map(|count| u64::try_from(count).unwrap_or(0))
                .map_err(|e| read_error("the push outbox", e))
        })
        .await
    }

    async fn push_retry(&self, seq: i64, next_at: i64, error: &str) -> Result<(), StoreError> {
        self.write(Op::PushRetry {
            seq,
            next_at,
            error: error.to_owned(),
        })
        .await
        .map(drop)
    }

    async fn get(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError> {
        let id = id.as_str().to_owned();
        self.read(move |conn| {
            let sql = format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1");
            let mut stmt = conn
                .prepare_cached(&sql)
                .map_err(|e| read_error("a task", e))?;
            let mut rows = stmt.query([&id]).map_err(|e| read_error("a task", e))?;
            match rows.next().map_err(|e| read_error("a task", e))? {
                Some(row) => decode(row).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let listing = Listing::new(query);
        self.read(move |conn| listing.run(conn)).await
    }

    async fn context(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<Vec<StoredTask>, StoreError> {
        let context_id = context_id.as_str().to_owned();
        let owner = owner.map(str::to_owned);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(CONTEXT_SQL)
                .map_err(|e| read_error("a context", e))?;
            let rows = stmt
                .query(params![context_id, owner])
                .map_err(|e| read_error("a context", e))?;
            decode_all(rows, "a context")
        })
        .await
    }

    async fn events(
        &self,
        task: &TaskId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, StreamResponse)>, StoreError> {
        let task = task.as_str().to_owned();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let fail = |e| read_error("the events of a task", e);
            let mut stmt = conn
                .prepare_cached(
                    "SELECT generation, event FROM task_events \
                     WHERE task_id = ?1 AND generation > ?2 ORDER BY generation LIMIT ?3",
                )
                .map_err(fail)?;
            let mut rows = stmt.query(params![task, after, limit]).map_err(fail)?;
            let mut events = Vec::new();
            while let Some(row) = rows.next().map_err(fail)? {
                let generation: i64 = row.get(0).map_err(fail)?;
                let json: String = row.get(1).map_err(fail)?;
                events.push(decode_event(&task, generation, &json)?);
            }
            Ok(events)
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // The file is local: it answers as long as the writer runs.
        self.write(Op::Ping).await.map(drop)
    }

    async fn take_over(&self, limit: usize) -> Result<Vec<StoredTask>, StoreError> {
        // One process uses the file (the data directory is locked): it holds every task.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let sql = format!(
                "SELECT {COLUMNS} FROM tasks WHERE state IN (?1, ?2) ORDER BY created, id LIMIT ?3"
            );
            let mut stmt = conn
                .prepare_cached(&sql)
                .map_err(|e| read_error("the unfinished tasks", e))?;
            let rows = stmt
                .query(rusqlite::params![
                    TaskState::Submitted.number(),
                    TaskState::Working.number(),
                    limit
                ])
                .map_err(|e| read_error("the unfinished tasks", e))?;
            decode_all(rows, "the unfinished tasks")
        })
        .await
    }
}

/// What a connection is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The writer's connection: creates the file, sets the journal mode.
    Write,
    /// A reader: refuses writes.
    Read,
}

fn open_connection(path: &Path, access: Access) -> Result<Connection, StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if access == Access::Write {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| sql_error(path, "cannot open the task store", e))?;
    let setup = |conn: &Connection| -> rusqlite::Result<Option<String>> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // The first statement that reads the file: one that is not a database fails here.
        let mode: String = if access == Access::Write {
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?
        } else {
            conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?
        };
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        // Statement and savepoint journals in memory: every write of a batch runs in a
        // savepoint, and a sub-journal past 64 KiB otherwise spills to a temporary file that
        // is written, opened and closed at every commit (a fifth of the writer's time).
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        if access == Access::Write {
            // Checkpoints are the checkpointer's (WalLimits); the writer's WAL hook replaces
            // this, and a connection that only checkpoints commits nothing.
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        }
        // One plan per statement, whatever is bound to it. Without this, SQLite notes that
        // the plan of the context query (for its ORDER BY) may depend on the bound value,
        // and expires such a statement when its bindings are cleared, which the statement
        // cache does each time it takes one back: it was parsed and planned on every call.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        if access == Access::Read {
            conn.pragma_update(None, "query_only", true)?;
        }
        Ok((!mode.eq_ignore_ascii_case("wal")).then_some(mode))
    };
    match setup(&conn) {
        Ok(None) => {}
        Ok(Some(mode)) => {
            return Err(StoreError::Backend(format!(
                "cannot put the task store {} in WAL mode: it stays in {mode} mode",
                path.display()
            )));
        }
        Err(e) => return Err(sql_error(path, "cannot set up the task store", e)),
    }
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Brings the file's schema up to [`SCHEMA_VERSION`], or refuses a newer one.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let fail = |e| sql_error(path, "cannot migrate the task store", e);
    if schema_version(conn, path)? == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(fail)?;
    // Read again under the write lock: another process may have migrated meanwhile.
    let found = schema_version(&tx, path)?;
    let applied = usize::try_from(found).unwrap_or(0);
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.execute_batch(sql).map_err(|e| {
            sql_error(
                path,
                &format!(
                    "cannot migrate the task store from schema version {from} to {}",
                    from + 1
                ),
                e,
            )
        })?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(fail)?;
    tx.commit().map_err(fail)?;
    if found < SCHEMA_VERSION {
        tracing::info!(
            path = %path.display(),
            from = found,
            to = SCHEMA_VERSION,
            "migrated the task store"
        );
    }
    Ok(())
}

/// The file's schema version; an error if this build cannot read it.
fn schema_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| sql_error(path, "cannot read the task store's schema version", e))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Backend(format!(
            "the task store {} was written by a newer version of Mew \
             (schema version {version}; this build reads up to {SCHEMA_VERSION})",
            path.display()
        )));
    }
    if version < 0 {
        return Err(StoreError::Backend(format!(
            "the task store {} has an unknown schema version {version}",
            path.display()
        )));
    }
    Ok(version)
}

/// An error about the database file, naming it.
fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => {
            StoreError::Backend(format!("{} is not a SQLite database: {e}", path.display()))
        }
        _ => StoreError::Backend(format!("{what} {}: {e}", path.display())),
    }
}

fn read_error(what: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("cannot read {what} from the task store: {e}"))
}

fn write_error(what: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("cannot {what}: {e}"))
}

/// Idle read connections, opened on demand.
struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    /// Runs `read` on an idle connection, or a new one if none is idle.
    fn with<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_connection(&self.path, Access::Read)?,
        };
        let result = read(&conn);
        self.give_back(conn);
        result
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
    }
}

/// Reads one row selected with [`COLUMNS`].
fn decode(row: &rusqlite::Row<'_>) -> Result<StoredTask, StoreError> {
    let id: String = row
        .get(0)
        .map_err(|e| StoreError::Backend(format!("cannot read a task id: {e}")))?;
    let column = |e: rusqlite::Error| StoreError::Corrupt {
        id: id.clone(),
        reason: format!("a column cannot be read: {e}"),
    };
    let role: String = row.get(1).map_err(column)?;
    let owner: Option<String> = row.get(2).map_err(column)?;
    let parent: Option<String> = row.get(3).map_err(column)?;
    let created: i64 = row.get(4).map_err(column)?;
    let task: String = row.get(6).map_err(column)?;
    let private: String = row.get(7).map_err(column)?;
    let attempts: i32 = row.get(8).map_err(column)?;
    let generation: i64 = row.get(9).map_err(column)?;
    let mut stored = assemble(id, role, owner, parent, created, &task, &private)?;
    stored.attempts = attempts;
    stored.generation = u64::try_from(generation).unwrap_or(0);
    Ok(stored)
}

fn decode_all(mut rows: rusqlite::Rows<'_>, what: &str) -> Result<Vec<StoredTask>, StoreError> {
    let mut tasks = Vec::new();
    while let Some(row) = rows.next().map_err(|e| read_error(what, e))? {
        tasks.push(decode(row)?);
    }
    Ok(tasks)
}

/// A `list` query as SQL, read in one transaction: the total, then the page.
///
/// Without a context, `task_counts` gives how many tasks of the query's scope (owner, role)
/// each state holds: their sum is the total, and the page is one range per state that holds
/// any, of the index that starts with the scope (`tasks_by_owner_role`, `tasks_by_owner`,
/// `tasks_by_role`, `tasks_by_state`: scope, state, status time, id), merged; the index is
/// named (`INDEXED BY`), so the plan does not depend on statistics. `status_after` bounds
/// each range, and is counted over those ranges (unless the query knows its total). A
/// context holds few tasks: they are found through its index, counted and sorted.
struct Listing {
    query: TaskQuery,
}

/// The order of every listing, and of the ranges merged into one.
const NEWEST_FIRST: &str = " ORDER BY status_time DESC, id DESC";

impl Listing {
    fn new(query: &TaskQuery) -> Self {
        Self {
            query: query.clone(),
        }
    }

    /// The index whose ranges hold the query's scope, one per state.
    fn index(&self) -> &'static str {
        match (&self.query.owner, &self.query.role) {
            (Some(_), Some(_)) => "tasks_by_owner_role",
            (Some(_), None) => "tasks_by_owner",
            (None, Some(_)) => "tasks_by_role",
            (None, None) => "tasks_by_state",
        }
    }

    /// The scope's conditions (owner, role), in the order of the index's columns.
    fn scope(&self) -> (Vec<&'static str>, Vec<SqlValue>) {
        let mut filters = Vec::new();
        let mut args = Vec::new();
        if let Some(owner) = &self.query.owner {
            filters.push("owner = ?");
            args.push(SqlValue::Text(owner.clone()));
        }
        if let Some(role) = &self.query.role {
            filters.push("role = ?");
            args.push(SqlValue::Text(role.clone()));
        }
        (filters, args)
    }

    /// Adds the time bound and the cursor.
    fn bound(&self, filters: &mut Vec<&str>, args: &mut Vec<SqlValue>, cursor: bool) {
        if let Some(after) = self.query.status_after {
            filters.push("status_time >= ?");
            args.push(SqlValue::Integer(bound_nanos(after)));
        }
        if let Some(cursor) = self.query.after.as_ref().filter(|_| cursor) {
            filters.push("(status_time, id) < (?, ?)");
            args.push(SqlValue::Integer(bound_nanos(cursor.status_time)));
            args.push(SqlValue::Text(cursor.id.as_str().to_owned()));
        }
    }

    /// One row more than the page: whether another page follows.
    fn fetch(&self) -> SqlValue {
        SqlValue::Integer(i64::try_from(self.query.limit.saturating_add(1)).unwrap_or(i64::MAX))
    }

    /// How many tasks of the scope (and state, when asked for) each state holds, for the
    /// states that hold any, in order: a sum over `task_counts`.
    fn counts(&self) -> (String, Vec<SqlValue>) {
        let mut filters = Vec::new();
        let mut args = Vec::new();
        if let Some(owner) = &self.query.owner {
            filters.push("owner = ? AND owned = 1");
            args.push(SqlValue::Text(owner.clone()));
        }
        if let Some(role) = &self.query.role {
            filters.push("role = ?");
            args.push(SqlValue::Text(role.clone()));
        }
        if let Some(state) = self.query.state {
            filters.push("state = ?");
            args.push(SqlValue::Integer(i64::from(state.number())));
        }
        let sql = format!(
            "SELECT state, sum(n) FROM task_counts{} GROUP BY state HAVING sum(n) > 0 \
             ORDER BY state",
            where_clause(&filters)
        );
        (sql, args)
    }

    /// The count of the scope's tasks in `states` from `status_after` on: the ranges the
    /// page reads, counted in the index.
    fn timed_count(&self, states: &[i64]) -> (String, Vec<SqlValue>) {
        let (filters, mut args) = self.scope();
        let mut filters: Vec<&str> = filters;
        let marks = vec!["?"; states.len()].join(", ");
        let in_states = format!("state IN ({marks})");
        args.extend(states.iter().copied().map(SqlValue::Integer));
        filters.push(&in_states);
        self.bound(&mut filters, &mut args, false);
        let sql = format!(
            "SELECT count(*) FROM tasks INDEXED BY {}{}",
            self.index(),
            where_clause(&filters)
        );
        (sql, args)
    }

    /// The page: one range per state in `states` (which holds at least one), merged.
    fn page(&self, states: &[i64]) -> (String, Vec<SqlValue>) {
        let index = self.index();
        let mut args = Vec::new();
        let mut arms = Vec::with_capacity(states.len());
        for &state in states {
            let (mut filters, scope_args) = self.scope();
            args.extend(scope_args);
            filters.push("state = ?");
            args.push(SqlValue::Integer(state));
            self.bound(&mut filters, &mut args, true);
            let columns = if states.len() == 1 {
                LIST_COLUMNS
            } else {
                "rowid AS r, status_time, id"
            };
            arms.push(format!(
                "SELECT {columns} FROM tasks INDEXED BY {index}{}",
                where_clause(&filters)
            ));
        }
        args.push(self.fetch());
        if arms.len() == 1 {
            return (format!("{}{NEWEST_FIRST} LIMIT ?", arms.remove(0)), args);
        }
        // The ranges' keys, merged as each range is read in the index's order, up to the
        // page's end (SQLite reads no further into any range); then the page's rows.
        let merged = arms.join(" UNION ALL ");
        let sql = format!(
            "SELECT {LIST_COLUMNS} FROM tasks WHERE rowid IN \
             (SELECT r FROM ({merged}{NEWEST_FIRST} LIMIT ?)){NEWEST_FIRST}"
        );
        (sql, args)
    }

    /// The count and the page of a context's tasks.
    fn context(
        &self,
        context_id: &ContextId,
    ) -> ((String, Vec<SqlValue>), (String, Vec<SqlValue>)) {
        let mut filters = vec!["context_id = ?"];
        let mut args = vec![SqlValue::Text(context_id.as_str().to_owned())];
        let (scope, scope_args) = self.scope();
        filters.extend(scope);
        args.extend(scope_args);
        if let Some(state) = self.query.state {
            filters.push("state = ?");
            args.push(SqlValue::Integer(i64::from(state.number())));
        }
        let (mut page_filters, mut page_args) = (filters.clone(), args.clone());
        self.bound(&mut filters, &mut args, false);
        self.bound(&mut page_filters, &mut page_args, true);
        page_args.push(self.fetch());
        let count = format!(
            "SELECT count(*) FROM tasks INDEXED BY tasks_by_context{}",
            where_clause(&filters)
        );
        let page = format!(
            "SELECT {LIST_COLUMNS} FROM tasks INDEXED BY tasks_by_context{}{NEWEST_FIRST} LIMIT ?",
            where_clause(&page_filters)
        );
        ((count, args), (page, page_args))
    }

    fn run(&self, conn: &Connection) -> Result<TaskPage, StoreError> {
        let fail = |e| read_error("a task list", e);
        let count = |conn: &Connection, (sql, args): &(String, Vec<SqlValue>)| {
            conn.prepare_cached(sql)
                .and_then(|mut stmt| stmt.query_row(params_from_iter(args), |row| row.get(0)))
                .map_err(fail)
        };
        // One snapshot for the count and the page.
        let tx = conn.unchecked_transaction().map_err(fail)?;
        let known = self
            .query
            .known_total
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let (total, page): (i64, Option<(String, Vec<SqlValue>)>) = match &self.query.context_id {
            Some(context_id) => {
                let (counted, page) = self.context(context_id);
                let total = match known {
                    Some(total) => total,
                    None => count(&tx, &counted)?,
                };
                (total, Some(page))
            }
            None => {
                let (sql, args) = self.counts();
                let mut stmt = tx.prepare_cached(&sql).map_err(fail)?;
                let counts: Vec<(i64, i64)> = stmt
                    .query_map(params_from_iter(&args), |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .map_err(fail)?
                    .collect::<Result<_, _>>()
                    .map_err(fail)?;
                drop(stmt);
                let states: Vec<i64> = counts.iter().map(|&(state, _)| state).collect();
                let total = match (known, self.query.status_after) {
                    (Some(total), _) => total,
                    (None, _) if states.is_empty() => 0,
                    (None, Some(_)) => count(&tx, &self.timed_count(&states))?,
                    (None, None) => counts.iter().map(|&(_, n)| n).sum(),
                };
                (total, (!states.is_empty()).then(|| self.page(&states)))
            }
        };
        let mut tasks: Vec<StoredTask> = Vec::with_capacity(self.query.limit.min(MAX_BATCH));
        let mut next = None;
        if let Some((sql, args)) = page {
            let mut last_time: i64 = 0;
            let mut bytes = 0usize;
            let mut stmt = tx.prepare_cached(&sql).map_err(fail)?;
            let mut rows = stmt.query(params_from_iter(&args)).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let full = self.query.max_bytes.is_some_and(|max| bytes >= max);
                if tasks.len() == self.query.limit || full {
                    // The extra row: a next page follows, after the last task kept.
                    next = tasks.last().map(|task| Cursor {
                        status_time: Timestamp::from_unix_nanos(i128::from(last_time)),
                        id: task.task.id.clone(),
                    });
                    break;
                }
                last_time = row.get(5).map_err(fail)?;
                bytes = bytes.saturating_add(
                    row.get_ref(6)
                        .map_err(fail)?
                        .as_bytes()
                        .map_or(0, <[u8]>::len),
                );
                tasks.push(decode(row)?);
            }
        }
        Ok(TaskPage {
            tasks,
            total: usize::try_from(total).unwrap_or(0),
            next,
        })
    }
}

fn where_clause(filters: &[&str]) -> String {
    if filters.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", filters.join(" AND "))
    }
}

/// One write for the writer thread, and where to send its outcome: the ids
/// of the tasks it wrote.
struct Command {
    op: Op,
    ack: oneshot::Sender<Result<Vec<TaskId>, StoreError>>,
}

enum Op {
    Put(Row),
    /// A new task, unless its context holds another owner's task; its push configs and
    /// the notifications of its first snapshot.
    Create {
        row: Row,
        configs: Vec<ConfigRow>,
        outbox: Vec<OutboxRow>,
    },
    /// A task, push configs saved with it and notifications of its change.
    PutWithEvents {
        row: Row,
        configs: Vec<ConfigRow>,
        outbox: Vec<OutboxRow>,
    },
    PutConfig(ConfigRow),
    DeleteConfig {
        task_id: String,
        id: String,
    },
    PushDone(i64),
    PushRetry {
        seq: i64,
        next_at: i64,
        error: String,
    },
    /// Does nothing: answers whether the writer is alive.
    Ping,
    /// Makes the writer panic, to test how callers learn that it died.
    #[cfg(test)]
    Panic,
}

/// The writer thread: takes what is queued, commits it in one transaction,
/// acknowledges; until the queue is closed and empty. Returns the number of
/// batches (transactions) it handled.
fn run_writer(
    mut conn: Connection,
    mut receiver: mpsc::Receiver<Command>,
    stopped: &Mutex<Option<String>>,
    wal: &Checkpointing,
) -> u64 {
    let mut batches = 0;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = receiver.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(command) => batch.push(command),
                Err(_) => break,
            }
        }
        match catch_unwind(AssertUnwindSafe(|| commit(&mut conn, &batch))) {
            Ok(outcomes) => {
                batches += 1;
                for (command, outcome) in batch.drain(..).zip(outcomes) {
                    // The caller may have stopped waiting; the write stands.
                    let _ = command.ack.send(outcome);
                }
                wal.after_commit(&conn);
            }
            Err(panic) => {
                let reason = format!("it panicked: {}", panic_message(panic.as_ref()));
                tracing::error!(%reason, "the task store's writer stopped");
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                // Record why before the queue and the waiting acks are dropped,
                // so every caller that finds the writer gone can say why.
                *stopped.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
                return batches;
            }
        }
    }
    batches
}

/// What the writer knows of the WAL, and how it asks for checkpoints.
struct Checkpointing {
    limits: WalLimits,
    /// The WAL's size in frames after the last commit, from the writer's WAL hook.
    frames: Arc<AtomicI32>,
    checkpoints: Arc<Checkpoints>,
}

impl Checkpointing {
    /// After a commit: asks for a checkpoint when the WAL has grown past
    /// [`WalLimits::checkpoint`]; once one is done, copies what was committed meanwhile, so
    /// that the next commit writes the WAL from its start. Past [`WalLimits::limit`] it copies
    /// the WAL itself whenever the checkpointer is not at it.
    ///
    /// Every checkpoint is passive, as SQLite's automatic one is: it copies what no reader
    /// still needs and never waits for a lock. One that finds the checkpointer at work does
    /// nothing.
    fn after_commit(&self, conn: &Connection) {
        let frames = self.frames.load(Ordering::Relaxed);
        let mut state = self.checkpoints.lock();
        let copy = match *state {
            Checkpoint::Done { copied }
                if frames - copied <= self.limits.catch_up || frames >= self.limits.limit =>
            {
                *state = Checkpoint::Idle;
                true
            }
            Checkpoint::Idle if frames >= self.limits.limit => true,
            Checkpoint::Done { .. } | Checkpoint::Idle if frames >= self.limits.checkpoint => {
                *state = Checkpoint::Asked;
                self.checkpoints.wake.notify_all();
                false
            }
            Checkpoint::Done { .. } | Checkpoint::Idle | Checkpoint::Asked | Checkpoint::Closed => {
                false
            }
        };
        drop(state);
        if copy && let Err(e) = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
            tracing::warn!(error = %e, frames, "the task store's writer could not checkpoint");
        }
    }
}

/// Where the background checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checkpoint {
    /// None asked for.
    Idle,
    /// Asked for, or running.
    Asked,
    /// Finished, having copied the WAL's first `copied` frames.
    Done { copied: i32 },
    /// The store is closing.
    Closed,
}

/// The background checkpoint's state, shared by the writer and the checkpointer.
#[derive(Debug)]
struct Checkpoints {
    state: Mutex<Checkpoint>,
    wake: Condvar,
    /// Background checkpoints finished, for tests.
    finished: AtomicU64,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Self {
            state: Mutex::new(Checkpoint::Idle),
            wake: Condvar::new(),
            finished: AtomicU64::new(0),
        }
    }
}

impl Checkpoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, Checkpoint> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the checkpointer (after the checkpoint it is running, if any).
    fn close(&self) {
        *self.lock() = Checkpoint::Closed;
        self.wake.notify_all();
    }
}

/// Closes [`Checkpoints`] when dropped.
struct CloseOnDrop(Arc<Checkpoints>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The checkpoint thread: runs a passive checkpoint (one that never waits for a lock) each
/// time the writer asks, until the store closes. The writer goes on committing meanwhile.
fn run_checkpointer(conn: &Connection, checkpoints: &Checkpoints) {
    loop {
        let mut state = checkpoints.lock();
        while matches!(*state, Checkpoint::Idle | Checkpoint::Done { .. }) {
            state = checkpoints
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if *state == Checkpoint::Closed {
            return;
        }
        drop(state);
        let outcome = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE);
        let mut state = checkpoints.lock();
        if *state == Checkpoint::Closed {
            return;
        }
        *state = match outcome {
            Ok((frames, copied)) => {
                checkpoints.finished.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(frames, copied, "checkpointed the task store");
                Checkpoint::Done { copied }
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "a checkpoint of the task store failed; the writer checkpoints the WAL \
                     when it reaches its limit"
                );
                Checkpoint::Idle
            }
        };
        // Only tests wait for a checkpoint to finish.
        checkpoints.wake.notify_all();
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// Commits `batch` in one transaction: the outcome of each of its writes, in order.
///
/// A batch is first written with no savepoint around its writes. A savepoint makes SQLite copy
/// every page a write touches into its sub-journal first, so that the write alone can be undone
/// if it fails, which almost never happens. When one does fail, the whole transaction is rolled
/// back and the batch written again with each write in a savepoint of its own, so that only the
/// failing write is refused and the rest of the batch stands.
fn commit(conn: &mut Connection, batch: &[Command]) -> Vec<Result<Vec<TaskId>, StoreError>> {
    write_batch(conn, batch, Undo::Transaction)
        .or_else(|Retry| write_batch(conn, batch, Undo::Savepoint))
        // Written with savepoints, a batch never asks to be written again.
        .unwrap_or_else(|Retry| fail_all(batch, "a write failed twice".to_owned()))
}

/// How a write that fails half-way is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Undo {
    /// By rolling back the whole transaction: the batch is then written again.
    Transaction,
    /// By a savepoint around each write: only the failing write is undone.
    Savepoint,
}

/// A batch written with [`Undo::Transaction`] had a write fail: nothing of it stands.
#[derive(Debug)]
struct Retry;

fn fail_all(batch: &[Command], reason: String) -> Vec<Result<Vec<TaskId>, StoreError>> {
    batch
        .iter()
        .map(|_| Err(StoreError::Backend(reason.clone())))
        .collect()
}

fn write_batch(
    conn: &mut Connection,
    batch: &[Command],
    undo: Undo,
) -> Result<Vec<Result<Vec<TaskId>, StoreError>>, Retry> {
    if let Err(e) = run(conn, "BEGIN IMMEDIATE") {
        return Ok(fail_all(
            batch,
            format!("cannot start a write transaction: {e}"),
        ));
    }
    let mut outcomes = Vec::with_capacity(batch.len());
    for command in batch {
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (disk full, I/O error):
            // nothing of this batch stands.
            let _ = run(conn, "ROLLBACK");
            return Ok(fail_all(
                batch,
                "a write failed and SQLite rolled back the whole transaction".to_owned(),
            ));
        }
        let outcome = apply(conn, &command.op, undo);
        if outcome.is_err() && undo == Undo::Transaction {
            if !conn.is_autocommit() {
                let _ = run(conn, "ROLLBACK");
            }
            return Err(Retry);
        }
        outcomes.push(outcome);
    }
    if let Err(e) = run(conn, "COMMIT") {
        if !conn.is_autocommit() {
            let _ = run(conn, "ROLLBACK");
        }
        return Ok(fail_all(batch, format!("cannot commit: {e}")));
    }
    Ok(outcomes)
}

fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

fn apply(conn: &Connection, op: &Op, undo: Undo) -> Result<Vec<TaskId>, StoreError> {
    match op {
        // One statement: if it fails, SQLite undoes just it.
        Op::Put(row) => put(conn, row).map(|()| vec![TaskId::from(row.id.as_str())]),
        Op::Create {
            row,
            configs,
            outbox,
        } => undoable(conn, undo, "store a new task", || {
            let foreign = foreign_owner(conn, &row.context_id, row.owner.as_deref())
                .map_err(|e| write_error(&format!("check the context of task {}", row.id), e))?;
            if foreign {
                return Err(StoreError::ForeignContext(ContextId::from(
                    row.context_id.as_str(),
                )));
            }
            put(conn, row)?;
            for config in configs {
                put_config(conn, config)?;
            }
            for event in outbox {
                enqueue(conn, event)?;
            }
            Ok(vec![TaskId::from(row.id.as_str())])
        }),
        Op::PutWithEvents {
            row,
            configs,
            outbox,
        } => undoable(conn, undo, "store a task", || {
            put(conn, row)?;
            for config in configs {
                put_config(conn, config)?;
            }
            for event in outbox {
                enqueue(conn, event)?;
            }
            Ok(vec![TaskId::from(row.id.as_str())])
        }),
        Op::PutConfig(config) => put_config(conn, config).map(|()| Vec::new()),
        Op::Ping => Ok(Vec::new()),
        Op::DeleteConfig { task_id, id } => undoable(conn, undo, "delete a push config", || {
            let fail = |e| write_error(&format!("delete push config {id} of task {task_id}"), e);
            conn.prepare_cached("DELETE FROM push_configs WHERE task_id = ?1 AND id = ?2")
                .and_then(|mut stmt| stmt.execute(params![task_id, id]))
                .map_err(fail)?;
            conn.prepare_cached("DELETE FROM push_outbox WHERE task_id = ?1 AND config_id = ?2")
                .and_then(|mut stmt| stmt.execute(params![task_id, id]))
                .map_err(fail)?;
            Ok(Vec::new())
        }),
        Op::PushDone(seq) => conn
            .prepare_cached("DELETE FROM push_outbox WHERE seq = ?1")
            .and_then(|mut stmt| stmt.execute([seq]))
            .map(|_| Vec::new())
            .map_err(|e| write_error("remove a push notification", e)),
        Op::PushRetry {
            seq,
            next_at,
            error,
        } => conn
            .prepare_cached(
                "UPDATE push_outbox SET attempts = attempts + 1, next_at = ?2, last_error = ?3 \
                 WHERE seq = ?1",
            )
            .and_then(|mut stmt| stmt.execute(params![seq, next_at, error]))
            .map(|_| Vec::new())
            .map_err(|e| write_error("reschedule a push notification", e)),
        #[cfg(test)]
        Op::Panic => panic!("injected by a test"),
    }
}

/// Runs `write`, which may fail after some of its statements: with [`Undo::Savepoint`] inside
/// a savepoint, so that if it fails everything it did is undone and the rest of the batch
/// stands; with [`Undo::Transaction`] as it is, the caller rolling back if it fails.
fn undoable(
    conn: &Connection,
    undo: Undo,
    what: &str,
    write: impl FnOnce() -> Result<Vec<TaskId>, StoreError>,
) -> Result<Vec<TaskId>, StoreError> {
    if undo == Undo::Transaction {
        return write();
    }
    let fail = |e| write_error(what, e);
    run(conn, "SAVEPOINT write").map_err(fail)?;
    let outcome = write();
    let end = match outcome {
        Ok(_) => run(conn, "RELEASE write"),
        Err(_) => run(conn, "ROLLBACK TO write").and_then(|()| run(conn, "RELEASE write")),
    };
    let ids = outcome?;
    end.map_err(fail)?;
    Ok(ids)
}

fn put_config(conn: &Connection, row: &ConfigRow) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO push_configs (task_id, id, config) VALUES (?1, ?2, ?3)
         ON CONFLICT (task_id, id) DO UPDATE SET config = excluded.config",
    )
    .and_then(|mut stmt| stmt.execute(params![row.task_id, row.id, row.config]))
    .map_err(|e| {
        write_error(
            &format!("store push config {} of task {}", row.id, row.task_id),
            e,
        )
    })?;
    Ok(())
}

fn enqueue(conn: &Connection, row: &OutboxRow) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO push_outbox (task_id, config_id, body, attempts, next_at) \
         VALUES (?1, ?2, ?3, 0, 0)",
    )
    .and_then(|mut stmt| stmt.execute(params![row.task_id.as_str(), row.config_id, row.body]))
    .map_err(|e| {
        write_error(
            &format!("enqueue a push notification for task {}", row.task_id),
            e,
        )
    })?;
    Ok(())
}

/// The oldest notification of each target, by `seq`, with its config.
fn push_heads(conn: &Connection, limit: i64) -> Result<Vec<PendingPush>, StoreError> {
    let fail = |e| read_error("the push outbox", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT o.seq, o.task_id, o.config_id, o.body, o.attempts, o.next_at, c.config
             FROM push_outbox o
             LEFT JOIN push_configs c ON c.task_id = o.task_id AND c.id = o.config_id
             WHERE o.seq IN (SELECT MIN(seq) FROM push_outbox GROUP BY task_id, config_id)
             ORDER BY o.seq LIMIT ?1",
        )
        .map_err(fail)?;
    let mut rows = stmt.query([limit]).map_err(fail)?;
    let mut heads = Vec::new();
    while let Some(row) = rows.next().map_err(fail)? {
        let task_id: String = row.get(1).map_err(fail)?;
        let config_id: String = row.get(2).map_err(fail)?;
        let config: Option<String> = row.get(6).map_err(fail)?;
        let config = match config {
            Some(json) => match decode_config(&task_id, &config_id, &json) {
                Ok(config) => Some(config),
                Err(e) => {
                    tracing::warn!(error = %e, "a push config cannot be read");
                    None
                }
            },
            None => None,
        };
        let attempts: i64 = row.get(4).map_err(fail)?;
        heads.push(PendingPush {
            seq: row.get(0).map_err(fail)?,
            task_id: TaskId::from(task_id),
            config_id,
            config,
            body: row.get(3).map_err(fail)?,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            next_at: row.get(5).map_err(fail)?,
        });
    }
    Ok(heads)
}

/// Whether `context_id` holds a task whose owner is not `owner`.
fn foreign_owner(
    conn: &Connection,
    context_id: &str,
    owner: Option<&str>,
) -> rusqlite::Result<bool> {
    conn.prepare_cached(FOREIGN_SQL)?
        .query_row(params![context_id, owner], |row| row.get(0))
}

fn put(conn: &Connection, row: &Row) -> Result<(), StoreError> {
    let fail = |e| write_error(&format!("store task {}", row.id), e);
    let args = params![
        row.id,
        row.context_id,
        row.role,
        row.owner,
        row.parent,
        row.state,
        row.status_time,
        row.created,
        row.task,
        row.private,
        row.attempts,
        row.generation,
    ];
    // A task's context, role, owner, parent and creation time never change once it is
    // stored, so the usual write sets only what does. SQLite rewrites an index entry when its
    // statement sets one of the index's columns, whatever the value: setting them all moved
    // the task in its context's index, and checked the owner's, at every write.
    let written = conn
        .prepare_cached(
            "INSERT INTO tasks
                 (id, context_id, role, owner, parent, state, status_time, created, task, private,
                  attempts, generation)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT (id) DO UPDATE SET
                 state = excluded.state,
                 status_time = excluded.status_time,
                 task = excluded.task,
                 private = excluded.private,
                 attempts = excluded.attempts,
                 generation = excluded.generation
             WHERE context_id IS excluded.context_id AND role IS excluded.role
               AND owner IS excluded.owner AND parent IS excluded.parent
               AND created IS excluded.created",
        )
        .and_then(|mut stmt| stmt.execute(args))
        .map_err(fail)?;
    if written == 0 {
        // Stored before with another identity (a store's caller may replace a task whole).
        conn.prepare_cached(
            "UPDATE tasks SET context_id = ?2, role = ?3, owner = ?4, parent = ?5, state = ?6,
                 status_time = ?7, created = ?8, task = ?9, private = ?10, attempts = ?11,
                 generation = ?12
             WHERE id = ?1",
        )
        .and_then(|mut stmt| stmt.execute(args))
        .map_err(fail)?;
    }
    for (generation, event) in row.event_numbers().into_iter().zip(&row.events) {
        conn.prepare_cached(
            "INSERT INTO task_events (task_id, generation, event) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut stmt| stmt.execute(params![row.id, generation, event]))
        .map_err(|e| write_error(&format!("log event {generation} of task {}", row.id), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tempfile::TempDir;

    use super::*;
    use crate::tasks::store_tests::*;

    fn db_path(dir: &TempDir) -> PathBuf {
        dir.path().join("tasks.db")
    }

    fn open(dir: &TempDir) -> SqliteStore {
        SqliteStore::open(&db_path(dir)).unwrap()
    }

    #[tokio::test]
    async fn put_then_get_returns_the_same_task_and_fills_the_columns() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        let task = rich_task();
        store.put(&task).await.unwrap();

        assert_eq!(store.get(&"task-1".into()).await.unwrap(), Some(task));
        assert_eq!(store.get(&"task-2".into()).await.unwrap(), None);

        let raw = Connection::open(db_path(&dir)).unwrap();
        let columns: (
            String,
            String,
            Option<String>,
            Option<String>,
            i64,
            i64,
            i64,
        ) = raw
            .query_row(
                "SELECT context_id, role, owner, parent, state, status_time, created FROM tasks",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            columns,
            (
                "ctx-1".to_owned(),
                "summariser".to_owned(),
                Some("alice".to_owned()),
                Some("task-0".to_owned()),
                6,
                1_700_000_000_000_005_123,
                1_700_000_000_000_000_000,
            )
        );
    }

    #[tokio::test]
    async fn cached_reads_are_not_prepared_again_for_new_bindings() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        for (id, context) in [("a", "c1"), ("b", "c2"), ("c", "c3")] {
            store
                .put(&stored(id, context, "r", TaskState::Working, T0))
                .await
                .unwrap();
        }
        assert!(CONTEXT_SQL.starts_with(&format!("SELECT {COLUMNS} FROM")));
        // Reads one after the other share one pooled connection and its statement cache.
        for context in ["c1", "c2", "c3", "c1"] {
            assert_eq!(store.context(&context.into(), None).await.unwrap().len(), 1);
        }
        let (runs, reprepared) = store
            .inner
            .readers
            .with(|conn| {
                let stmt = conn.prepare_cached(CONTEXT_SQL).unwrap();
                Ok((
                    stmt.get_status(rusqlite::StatementStatus::Run),
                    stmt.get_status(rusqlite::StatementStatus::RePrepare),
                ))
            })
            .unwrap();
        assert_eq!(runs, 4, "the reads used the cached statement");
        assert_eq!(
            reprepared, 0,
            "the context query was parsed and planned again"
        );
    }

    #[tokio::test]
    async fn the_outbox_hands_out_the_oldest_notification_of_each_webhook() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        let task = stored("t", "c", "r", TaskState::Working, T0);
        let (a, b) = (hook("t", "a"), hook("t", "b"));
        store
            .put_with_events(
                &task,
                &[],
                &[a.clone(), b.clone()],
                &[
                    for_config(event("t", 1), "a"),
                    for_config(event("t", 1), "b"),
                ],
            )
            .await
            .unwrap();
        store
            .put_with_events(
                &task,
                &[],
                &[],
                &[
                    for_config(event("t", 2), "a"),
                    for_config(event("t", 2), "b"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(store.get(&"t".into()).await.unwrap(), Some(task.clone()));
        assert_eq!(
            store.push_configs(&"t".into()).await.unwrap(),
            [a.clone(), b.clone()]
        );
        assert_eq!(store.push_configs(&"other".into()).await.unwrap(), []);

        let first = store.push_heads(10).await.unwrap();
        assert_eq!(heads(&first), [head("t", "a", 1), head("t", "b", 1)]);
        assert_eq!(first[0].config.as_ref(), Some(&a));
        assert_eq!((first[0].attempts, first[0].next_at), (0, 0));
        assert_eq!(
            heads(&store.push_heads(1).await.unwrap()),
            [head("t", "a", 1)]
        );

        // A failed head stays the head, with its attempt counted and its new time.
        store.push_retry(first[0].seq, 5_000, "503").await.unwrap();
        let retried = store.push_heads(10).await.unwrap();
        assert_eq!(heads(&retried), [head("t", "a", 1), head("t", "b", 1)]);
        assert_eq!((retried[0].attempts, retried[0].next_at), (1, 5_000));
        let raw = Connection::open(db_path(&dir)).unwrap();
        let error: String = raw
            .query_row(
                "SELECT last_error FROM push_outbox WHERE seq = ?1",
                [first[0].seq],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(error, "503");

        // Delivered: the next one of that webhook comes up.
        store.push_done(first[1].seq).await.unwrap();
        assert_eq!(
            heads(&store.push_heads(10).await.unwrap()),
            [head("t", "a", 1), head("t", "b", 2)]
        );

        // Replacing a config keeps its notifications; deleting it drops them, and again is fine.
        let moved = TaskPushNotificationConfig {
            url: "https://hooks.example/moved".to_owned(),
            ..a.clone()
        };
        store.put_push_config(&moved).await.unwrap();
        assert_eq!(
            store.push_heads(10).await.unwrap()[0].config.as_ref(),
            Some(&moved)
        );
        store.delete_push_config(&"t".into(), "a").await.unwrap();
        store.delete_push_config(&"t".into(), "a").await.unwrap();
        assert_eq!(
            store.push_configs(&"t".into()).await.unwrap(),
            std::slice::from_ref(&b)
        );
        assert_eq!(
            heads(&store.push_heads(10).await.unwrap()),
            [head("t", "b", 2)]
        );

        // A notification whose config is gone is handed out without it, to be dropped.
        raw.execute("DELETE FROM push_configs", []).unwrap();
        let orphan = store.push_heads(10).await.unwrap();
        assert_eq!(orphan[0].config, None);

        // What is waiting survives a restart.
        drop(store);
        let store = open(&dir);
        assert_eq!(
            heads(&store.push_heads(10).await.unwrap()),
            [head("t", "b", 2)]
        );
        store.push_done(orphan[0].seq).await.unwrap();
        assert_eq!(store.push_heads(10).await.unwrap(), []);
    }

    #[tokio::test]
    async fn a_version_1_file_is_migrated_and_keeps_its_tasks() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        // Version 1 has no attempts column: they read back as 0.
        let task = StoredTask {
            attempts: 0,
            ..rich_task()
        };
        {
            let raw = Connection::open(&path).unwrap();
            raw.execute_batch(MIGRATIONS[0]).unwrap();
            raw.pragma_update(None, "user_version", 1).unwrap();
            let row = Row::encode(&task).unwrap();
            raw.execute(
                "INSERT INTO tasks (id, context_id, role, owner, parent, state, status_time, \
                 created, task, private) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    row.id,
                    row.context_id,
                    row.role,
                    row.owner,
                    row.parent,
                    row.state,
                    row.status_time,
                    row.created,
                    row.task,
                    row.private
                ],
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(&task.task.id).await.unwrap(), Some(task.clone()));
        assert_eq!(store.push_heads(10).await.unwrap(), []);
        store
            .put_with_events(
                &task,
                &[],
                &[hook("task-1", "a")],
                &[for_config(event("task-1", 1), "a")],
            )
            .await
            .unwrap();
        assert_eq!(store.push_heads(10).await.unwrap().len(), 1);
        store.close().await.unwrap();
        let raw = Connection::open(&path).unwrap();
        let version: i64 = raw
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn a_version_4_file_gets_the_counts_of_its_tasks_and_deletes_keep_them() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        let mut tasks = population(300);
        {
            let raw = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..4] {
                raw.execute_batch(sql).unwrap();
            }
            raw.pragma_update(None, "user_version", 4).unwrap();
            for task in &tasks {
                let row = Row::encode(task).unwrap();
                raw.execute(
                    "INSERT INTO tasks (id, context_id, role, owner, parent, state, status_time, \
                     created, task, private) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        row.id,
                        row.context_id,
                        row.role,
                        row.owner,
                        row.parent,
                        row.state,
                        row.status_time,
                        row.created,
                        row.task,
                        row.private
                    ],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(&path).unwrap();
        check_totals(&store, &tasks).await;
        // No store call deletes a task; a delete in SQL still leaves the counts right.
        let raw = Connection::open(&path).unwrap();
        raw.execute("DELETE FROM tasks WHERE id LIKE '%3'", [])
            .unwrap();
        tasks.retain(|task| !task.task.id.as_str().ends_with('3'));
        check_totals(&store, &tasks).await;
    }

    #[tokio::test]
    async fn everything_survives_drop_and_reopen() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        let mut tasks = vec![rich_task()];
        for i in 0..9 {
            tasks.push(stored(
                &format!("t{i}"),
                "c",
                "r",
                TaskState::Working,
                T0 + i,
            ));
        }
        for task in &tasks {
            store.put(task).await.unwrap();
        }
        drop(store);

        let store = open(&dir);
        for task in &tasks {
            assert_eq!(store.get(&task.task.id).await.unwrap().as_ref(), Some(task));
        }
        assert_eq!(store.list(&query(100)).await.unwrap().total, 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_all_land() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        let writers: Vec<_> = (0..50)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let task = stored(&format!("t{i:02}"), "c", "r", TaskState::Working, T0 + i);
                    store.put(&task).await
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        let page = store.list(&query(100)).await.unwrap();
        assert_eq!(page.total, 50);
        let listed: BTreeSet<&str> = ids(&page.tasks).into_iter().collect();
        let expected: BTreeSet<String> = (0..50).map(|i| format!("t{i:02}")).collect();
        assert_eq!(
            listed,
            expected.iter().map(String::as_str).collect::<BTreeSet<_>>()
        );
        assert_eq!(ids(&page.tasks)[0], "t49");
    }

    /// The WAL's size in frames, from its file (a 32-byte header, then frames of a 24-byte
    /// header and a page each).
    fn wal_frames(path: &Path) -> u64 {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let bytes = std::fs::metadata(&wal).map_or(0, |m| m.len());
        bytes.saturating_sub(32) / (24 + 4096)
    }

    /// The tasks a store opened again at `path` lists on one page, and its total.
    async fn tasks_after_reopen(path: &Path) -> (usize, usize) {
        let page = SqliteStore::open(path)
            .unwrap()
            .list(&TaskQuery {
                limit: 5000,
                ..TaskQuery::default()
            })
            .await
            .unwrap();
        (page.tasks.len(), page.total)
    }

    /// Writes `count` tasks one at a time, numbered from `first`; returns the most frames the
    /// WAL file held after any of them.
    async fn put_one_by_one(store: &SqliteStore, path: &Path, first: i128, count: i128) -> u64 {
        let mut most = 0;
        for i in first..first + count {
            let task = stored(&format!("t{i:05}"), "c", "r", TaskState::Working, T0 + i);
            store.put(&task).await.unwrap();
            most = most.max(wal_frames(path));
        }
        most
    }

    #[tokio::test]
    async fn a_checkpoint_runs_beside_the_writer_and_then_the_wal_starts_over() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        // No limit: only the checkpointer and the writer's catch-up keep the WAL short.
        let limits = WalLimits {
            checkpoint: 64,
            catch_up: 16,
            limit: i32::MAX,
        };
        let store = SqliteStore::open_with(&path, limits).unwrap();
        let (frames, checkpoints) = store.inner.wal.clone();
        put_one_by_one(&store, &path, 0, 200).await;
        // Past 64 frames the writer asked for a checkpoint. From here on, each write waits
        // until a checkpoint has finished and none is asked for: then the WAL is written from
        // its start again within a few writes. A write that finds it all copied restarts it;
        // one that finds a checkpoint done with a few frames left copies them after its
        // commit, one that finds more left asks for another; one that finds no checkpoint
        // asked for adds its frames (about 6) until the WAL reaches 64 and asks for one.
        let settled = |checkpoints: Arc<Checkpoints>| {
            tokio::task::spawn_blocking(move || {
                let mut state = checkpoints.lock();
                while *state == Checkpoint::Asked
                    || checkpoints.finished.load(Ordering::Relaxed) == 0
                {
                    state = checkpoints
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            })
        };
        let mut last = frames.load(Ordering::Relaxed);
        let mut written = 200;
        let restarted = loop {
            if written == 240 {
                break false;
            }
            settled(Arc::clone(&checkpoints)).await.unwrap();
            put_one_by_one(&store, &path, written, 1).await;
            written += 1;
            let now = frames.load(Ordering::Relaxed);
            if now < last {
                break true;
            }
            last = now;
        };
        assert!(
            restarted,
            "the WAL was not written from its start again: it holds {last} frames"
        );
        store.close().await.unwrap();

        assert_eq!(
            tasks_after_reopen(&path).await,
            (
                usize::try_from(written).unwrap(),
                usize::try_from(written).unwrap()
            )
        );
    }

    #[tokio::test]
    async fn past_its_limit_the_writer_checkpoints_the_wal_itself() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        // The checkpointer is never asked: the limit alone bounds the WAL.
        let limits = WalLimits {
            checkpoint: i32::MAX,
            catch_up: 16,
            limit: 256,
        };
        let store = SqliteStore::open_with(&path, limits).unwrap();
        // One write at a time adds a handful of frames: 3 000 of them write the WAL's limit
        // many times over.
        let most = put_one_by_one(&store, &path, 0, 3000).await;
        assert!(
            most <= 256 + 64,
            "the WAL grew to {most} frames, past its limit of 256 and one write"
        );
        assert_eq!(store.inner.wal.1.finished.load(Ordering::Relaxed), 0);
        store.close().await.unwrap();

        assert_eq!(tasks_after_reopen(&path).await, (3000, 3000));
    }

    /// Queues `ops` and runs the writer on `conn` until it has written them all, with no WAL
    /// hook and no checkpointer (the WAL is checkpointed when the file closes). Returns the
    /// number of batches and each write's outcome, in order.
    fn write_queued(
        conn: Connection,
        ops: impl IntoIterator<Item = Op>,
    ) -> (u64, Vec<Result<Vec<TaskId>, StoreError>>) {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let acks: Vec<_> = ops
            .into_iter()
            .map(|op| {
                let (ack, done) = oneshot::channel();
                sender
                    .try_send(Command { op, ack })
                    .unwrap_or_else(|_| panic!("queue full"));
                done
            })
            .collect();
        drop(sender);
        let stopped = Mutex::new(None);
        let wal = Checkpointing {
            limits: WalLimits::DEFAULT,
            frames: Arc::new(AtomicI32::new(0)),
            checkpoints: Arc::new(Checkpoints::default()),
        };
        let batches = run_writer(conn, receiver, &stopped, &wal);
        assert_eq!(*stopped.lock().unwrap(), None);
        let outcomes = acks
            .into_iter()
            .map(|mut done| done.try_recv().unwrap())
            .collect();
        (batches, outcomes)
    }

    #[test]
    fn the_writer_commits_what_is_queued_in_one_transaction_per_batch() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        drop(SqliteStore::open(&path).unwrap());
        let conn = open_connection(&path, Access::Write).unwrap();
        // More than one batch holds: 300 = 256 + 44.
        let ops = (0..300).map(|i| {
            let task = stored(&format!("t{i:03}"), "c", "r", TaskState::Working, T0);
            Op::Put(Row::encode(&task).unwrap())
        });
        let (batches, outcomes) = write_queued(conn, ops);
        assert_eq!(batches, 2);
        for (i, outcome) in outcomes.into_iter().enumerate() {
            assert_eq!(outcome.unwrap(), [TaskId::from(format!("t{i:03}"))]);
        }
        let raw = Connection::open(&path).unwrap();
        let count: i64 = raw
            .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 300);
    }

    #[test]
    fn a_write_that_fails_half_way_is_undone_and_the_rest_of_its_batch_stands() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        // Task `x` is WORKING, its events logged under 1 and 2.
        let mut x = stored("x", "c", "r", TaskState::Working, T0);
        x.generation = 2;
        let mut row = Row::with_snapshot(&x).unwrap();
        row.events.push(row.events[0].clone());
        drop(SqliteStore::open(&path).unwrap());
        let conn = open_connection(&path, Access::Write).unwrap();
        put(&conn, &row).unwrap();

        // A batch whose middle write updates `x` and then logs an event under a number it
        // already has: its second statement fails after its first one wrote.
        let mut done = x.clone();
        done.task.status.state = TaskState::Completed;
        let rival = Row::with_snapshot(&done).unwrap();
        let ops = [
            Op::Put(Row::encode(&stored("a", "c", "r", TaskState::Working, T0)).unwrap()),
            Op::PutWithEvents {
                row: rival,
                configs: Vec::new(),
                outbox: Vec::new(),
            },
            Op::Put(Row::encode(&stored("b", "c", "r", TaskState::Working, T0)).unwrap()),
        ];
        let (batches, outcomes) = write_queued(conn, ops);
        assert_eq!(batches, 1, "one batch");
        let outcomes: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
        assert_eq!(outcomes, [true, false, true]);

        let raw = Connection::open(&path).unwrap();
        let states: Vec<(String, i64, i64)> = raw
            .prepare("SELECT id, state, generation FROM tasks ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let working = i64::from(row.state);
        assert_eq!(
            states,
            [
                ("a".to_owned(), working, 0),
                ("b".to_owned(), working, 0),
                ("x".to_owned(), working, 2),
            ],
            "x is as it was; a and b are written"
        );
        let counted: Vec<(i64, i64)> = raw
            .prepare("SELECT state, n FROM task_counts WHERE n > 0 ORDER BY state")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(counted, [(working, 3)], "the counts did not see x complete");
    }

    #[tokio::test]
    async fn a_corrupt_row_is_reported_with_its_id() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        store
            .put(&stored("good", "c", "r", TaskState::Working, T0))
            .await
            .unwrap();
        store
            .put(&stored("bad", "c", "r", TaskState::Working, T0 + 1))
            .await
            .unwrap();
        store
            .put(&stored("odd", "d", "r", TaskState::Completed, T0 + 2))
            .await
            .unwrap();
        let raw = Connection::open(db_path(&dir)).unwrap();
        raw.execute("UPDATE tasks SET task = '{\"id\": ' WHERE id = 'bad'", [])
            .unwrap();
        raw.execute("UPDATE tasks SET private = 'nope' WHERE id = 'odd'", [])
            .unwrap();

        let corrupt_id = |result: Result<_, StoreError>| match result {
            Err(StoreError::Corrupt { id, reason }) => (id, reason),
            other => panic!("expected Corrupt, got {other:?}"),
        };
        let (id, reason) = corrupt_id(store.get(&"bad".into()).await.map(drop));
        assert_eq!(id, "bad");
        assert!(
            reason.starts_with("its task JSON does not parse"),
            "{reason}"
        );
        let (id, reason) = corrupt_id(store.get(&"odd".into()).await.map(drop));
        assert_eq!(id, "odd");
        assert!(
            reason.starts_with("its private state is not valid JSON"),
            "{reason}"
        );
        // A listing reads no private state: the damaged task JSON is what it reports.
        assert_eq!(corrupt_id(store.list(&query(10)).await.map(drop)).0, "bad");
        assert_eq!(
            corrupt_id(store.context(&"c".into(), None).await.map(drop)).0,
            "bad"
        );
        assert_eq!(
            corrupt_id(store.take_over(usize::MAX).await.map(drop)).0,
            "bad"
        );
        store
            .put(&stored("later", "e", "r", TaskState::Working, T0))
            .await
            .unwrap();
        assert_eq!(
            store
                .list(&TaskQuery {
                    context_id: Some("e".into()),
                    ..query(10)
                })
                .await
                .unwrap()
                .total,
            1
        );
        // A row whose JSON names another task is corrupt too.
        raw.execute(
            "UPDATE tasks SET task = '{\"id\": \"someone-else\"}' WHERE id = 'good'",
            [],
        )
        .unwrap();
        let (id, reason) = corrupt_id(store.get(&"good".into()).await.map(drop));
        assert_eq!(
            (id.as_str(), reason.as_str()),
            ("good", "its task JSON has the id \"someone-else\"")
        );
    }

    #[test]
    fn opening_a_file_that_is_not_a_database_names_it() {
        let dir = TempDir::new().unwrap();
        for (name, content) in [
            ("notes.txt", "not a database\n".repeat(300)),
            ("tiny.txt", "hello".to_owned()),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &content).unwrap();
            let text = error_text(SqliteStore::open(&path));
            assert!(
                text.contains(&format!("{} is not a SQLite database", path.display())),
                "{text}"
            );
            assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
        }
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = TempDir::new().unwrap();
        let path = db_path(&dir);
        let raw = Connection::open(&path).unwrap();
        raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(raw);

        let text = error_text(SqliteStore::open(&path));
        assert_eq!(
            text,
            format!(
                "task store: the task store {} was written by a newer version of Mew \
                 (schema version {}; this build reads up to {SCHEMA_VERSION})",
                path.display(),
                SCHEMA_VERSION + 1
            )
        );
        let raw = Connection::open(&path).unwrap();
        let version: i64 = raw
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION + 1);
        let tables: i64 = raw
            .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 0);
    }

    #[tokio::test]
    async fn open_creates_the_directory_and_a_wal_database_at_the_current_schema() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("data").join("mew").join("tasks.db");
        let store = SqliteStore::open(&path).unwrap();
        assert!(path.is_file());

        let raw = Connection::open(&path).unwrap();
        let mode: String = raw
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        let version: i64 = raw
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!((mode.as_str(), version), ("wal", SCHEMA_VERSION));
        let mut stmt = raw
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
            .unwrap();
        let indexes: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            indexes,
            [
                "push_outbox_by_target",
                "tasks_by_context",
                "tasks_by_owner",
                "tasks_by_owner_role",
                "tasks_by_role",
                "tasks_by_state"
            ]
        );

        // Readers: NORMAL sync, foreign keys on, and no writes.
        let (synchronous, foreign_keys, refused) = store
            .read(|conn| {
                let get = |name| {
                    conn.pragma_query_value(None, name, |r| r.get::<_, i64>(0))
                        .unwrap()
                };
                let refused = conn.execute("DELETE FROM tasks", []).is_err();
                Ok((get("synchronous"), get("foreign_keys"), refused))
            })
            .await
            .unwrap();
        assert_eq!((synchronous, foreign_keys, refused), (1, 1, true));

        // Opening again finds the schema current and migrates nothing.
        store.close().await.unwrap();
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.list(&query(1)).await.unwrap().total, 0);
    }

    /// The plan of `sql`: each step's detail, `; `-joined.
    fn plan(conn: &Connection, (sql, args): &(String, Vec<SqlValue>)) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let details: Vec<String> = stmt
            .query_map(params_from_iter(args), |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        details.join("; ")
    }

    /// Every combination of the filters a listing has, with and without a cursor.
    fn every_listing() -> Vec<TaskQuery> {
        let mut queries = Vec::new();
        for bits in 0..64u32 {
            let on = |bit: u32| bits & (1 << bit) != 0;
            queries.push(TaskQuery {
                owner: on(0).then(|| "o".to_owned()),
                role: on(1).then(|| "r".to_owned()),
                state: on(2).then_some(TaskState::Working),
                context_id: on(3).then(|| "c".into()),
                status_after: on(4).then(|| at(T0)),
                after: on(5).then(|| Cursor {
                    status_time: at(T0 + 1),
                    id: "t".into(),
                }),
                ..query(10)
            });
        }
        queries
    }

    #[tokio::test]
    async fn every_listing_reads_ranges_of_an_index() {
        let dir = TempDir::new().unwrap();
        drop(open(&dir));
        let conn = Connection::open(db_path(&dir)).unwrap();
        for q in every_listing() {
            let listing = Listing::new(&q);
            if let Some(context) = &q.context_id {
                // A context holds few tasks: found through its index, then sorted.
                let (count, page) = listing.context(context);
                let count = plan(&conn, &count);
                assert!(
                    count.starts_with("SEARCH tasks USING ")
                        && count.ends_with("INDEX tasks_by_context (context_id=?)"),
                    "{q:?}: {count}"
                );
                assert_eq!(
                    plan(&conn, &page),
                    "SEARCH tasks USING INDEX tasks_by_context (context_id=?); \
                     USE TEMP B-TREE FOR ORDER BY",
                    "{q:?}"
                );
                continue;
            }
            let index = listing.index();
            let mut range = Vec::new();
            range.extend(q.owner.as_ref().map(|_| "owner=?"));
            range.extend(q.role.as_ref().map(|_| "role=?"));
            range.push("state=?");
            let count_range = match q.status_after {
                Some(_) => format!("{} AND status_time>?", range.join(" AND ")),
                None => range.join(" AND "),
            };
            match (q.status_after, &q.after) {
                (Some(_), Some(_)) => range.push("status_time>? AND (status_time,id)<(?,?)"),
                (Some(_), None) => range.push("status_time>?"),
                (None, Some(_)) => range.push("(status_time,id)<(?,?)"),
                (None, None) => {}
            }
            let range = range.join(" AND ");
            // One state: the page is one range of the index, in its order.
            assert_eq!(
                plan(&conn, &listing.page(&[2])),
                format!("SEARCH tasks USING INDEX {index} ({range})"),
                "{q:?}"
            );
            // Several: one range each, read from the index alone in its order and merged
            // (no sort but of the page's rows); then the page's rows by rowid.
            let arm = format!("SEARCH tasks USING COVERING INDEX {index} ({range})");
            let merged = plan(&conn, &listing.page(&[2, 3, 6]));
            let numbered = (1..=7).fold(merged, |plan, n| {
                plan.replace(&format!("subquery-{n})"), "subquery-N)")
            });
            assert_eq!(
                numbered,
                format!(
                    "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?); LIST SUBQUERY 4; \
                     CO-ROUTINE (subquery-N); MERGE (UNION ALL); LEFT; MERGE (UNION ALL); \
                     LEFT; {arm}; RIGHT; {arm}; RIGHT; {arm}; SCAN (subquery-N); \
                     USE TEMP B-TREE FOR ORDER BY"
                ),
                "{q:?}"
            );
            if q.status_after.is_some() {
                assert_eq!(
                    plan(&conn, &listing.timed_count(&[2, 3])),
                    format!("SEARCH tasks USING COVERING INDEX {index} ({count_range})"),
                    "{q:?}"
                );
            }
            // The counts: the owner's rows (of the role), or all of them (a few per role and
            // state), grouped by state.
            let counts = plan(&conn, &listing.counts());
            let expected = match (&q.owner, &q.role) {
                (Some(_), Some(_)) => {
                    "SEARCH task_counts USING PRIMARY KEY (owner=? AND owned=? AND role=?"
                }
                (Some(_), None) => "SEARCH task_counts USING PRIMARY KEY (owner=? AND owned=?)",
                (None, _) => "SCAN task_counts",
            };
            assert!(counts.starts_with(expected), "{q:?}: {counts}");
        }
    }

    #[tokio::test]
    async fn callers_learn_that_the_writer_stopped() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        store
            .put(&stored("before", "c", "r", TaskState::Working, T0))
            .await
            .unwrap();

        let expected =
            "task store: the task store's writer stopped: it panicked: injected by a test";
        assert_eq!(error_text(store.write(Op::Panic).await), expected);
        let later = store
            .put(&stored("after", "c", "r", TaskState::Working, T0))
            .await;
        assert_eq!(error_text(later), expected);
        assert_eq!(
            error_text(store.delete_push_config(&"x".into(), "y").await),
            expected
        );
        // Reads still work, and show what was committed.
        assert_eq!(
            ids(&store.list(&query(10)).await.unwrap().tasks),
            ["before"]
        );
        assert_eq!(error_text(store.close().await), expected);
    }

    #[tokio::test]
    async fn close_waits_for_the_last_handle_only() {
        let dir = TempDir::new().unwrap();
        let store = open(&dir);
        let other = store.clone();
        store.close().await.unwrap();
        other
            .put(&stored("t", "c", "r", TaskState::Working, T0))
            .await
            .unwrap();
        other.close().await.unwrap();
        let store = open(&dir);
        assert_eq!(ids(&store.list(&query(10)).await.unwrap().tasks), ["t"]);
    }
}
