//! `PostgresStore`: the `TaskStore` on a PostgreSQL server, chosen with `store.url`, shared by
//! every replica that points at it.
//!
//! The same tables and the same encoding as the SQLite store (`rows.rs`), in a pool of
//! connections, and one more: `contexts`, the owner of each context. Every write that touches
//! several rows is one statement or one transaction. A new task claims its context in the
//! statement that writes it, so two principals naming one new context at once cannot both get
//! it, and a new task is one round trip.
//!
//! Migrations are versioned (`mew_schema`) and applied in one transaction under an advisory
//! lock, so several replicas starting at once against one database migrate it once.
//!
//! **Leases.** A task row names the replica (and process: `owner`) that runs it
//! (`lease_owner`), until when
//! (`lease_expires`, by the database's clock) and under which epoch (`epoch`, from the
//! sequence `lease_epochs`: every new holder gets a new one). The store remembers the epoch of
//! each task this replica holds (`held`), and every write of a task is conditional on it in
//! the same statement: a replica that was paused past its lease and taken over writes nothing
//! (`StoreError::Fenced`). A write that brings the task out of SUBMITTED and WORKING clears the
//! lease. Heartbeats extend this replica's leases; `take_over` claims the unfinished tasks
//! whose lease lapsed, with `FOR UPDATE SKIP LOCKED`, so replicas never take the same one.
//!
//! **Wake-ups.** A write with an event of a task another replica follows (`follow` set
//! `followed`) runs `pg_notify('mew_events', task id)` in the same statement; a cancel asked for on another replica `mew_cancel`; a task let go of
//! `mew_work`; a push config saved or deleted `mew_push` (the replica running the task
//! enqueues its events for the configs it knows). One connection per replica listens (`listen`) and turns them into
//! [`Change`]s. A notification is only a hint: what changed is read from the tables, and when
//! the listening connection drops, `Change::Missed` says to read again.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use mew_cards::{
    ContextId, StreamResponse, TaskId, TaskPushNotificationConfig, TaskState, Timestamp,
};
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Config, Row as PgRow};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use super::rows::{ConfigRow, Row, assemble, bound_nanos, decode_config, decode_event};
use super::store::{
    Change, Cursor, Heartbeat, OutboxRow, PendingPush, Replica, ReplicaStatus, StoreError,
    StoredTask, TaskPage, TaskQuery, TaskStore,
};

/// Schema migrations, in order: `MIGRATIONS[n]` moves a database from version `n` to `n + 1`
/// (`mew_schema` holds its version). Append only.
const MIGRATIONS: &[&str] = &[
    // 1: the tables of the SQLite store's version 2.
    "CREATE TABLE tasks (
        id          text PRIMARY KEY,
        context_id  text NOT NULL,
        role        text NOT NULL,
        owner       text,
        parent      text,
        state       integer NOT NULL,
        status_time bigint NOT NULL,
        created     bigint NOT NULL,
        task        text NOT NULL,
        private     text NOT NULL
    );
    CREATE INDEX tasks_by_time    ON tasks (status_time DESC, id DESC);
    CREATE INDEX tasks_by_role    ON tasks (role, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner   ON tasks (owner, status_time DESC, id DESC);
    CREATE INDEX tasks_by_context ON tasks (context_id, created, id);
    CREATE INDEX tasks_by_state   ON tasks (state);
    CREATE TABLE push_configs (
        task_id text NOT NULL,
        id      text NOT NULL,
        config  text NOT NULL,
        PRIMARY KEY (task_id, id)
    );
    CREATE TABLE push_outbox (
        seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        task_id    text NOT NULL,
        config_id  text NOT NULL,
        body       text NOT NULL,
        attempts   integer NOT NULL DEFAULT 0,
        next_at    bigint NOT NULL DEFAULT 0,
        last_error text
    );
    CREATE INDEX push_outbox_by_target ON push_outbox (task_id, config_id, seq);",
    // 2: how often a task's turn was started over after its node was lost.
    "ALTER TABLE tasks ADD COLUMN attempts integer NOT NULL DEFAULT 0;",
    // 3: the number of a task's last event, and the log of its events under their numbers.
    "ALTER TABLE tasks ADD COLUMN generation bigint NOT NULL DEFAULT 0;
    CREATE TABLE task_events (
        task_id    text NOT NULL,
        generation bigint NOT NULL,
        event      text NOT NULL,
        PRIMARY KEY (task_id, generation)
    );",
    // 4: leases (which replica runs a task, until when, under which epoch), the replicas, and
    // claims on push notifications. States 1 and 2 are SUBMITTED and WORKING.
    "CREATE SEQUENCE lease_epochs;
    ALTER TABLE tasks
        ADD COLUMN epoch bigint NOT NULL DEFAULT 0,
        ADD COLUMN lease_owner text,
        ADD COLUMN lease_expires timestamptz,
        ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
    CREATE INDEX tasks_unfinished ON tasks (created, id) WHERE state IN (1, 2);
    CREATE INDEX tasks_by_lease_owner ON tasks (lease_owner) WHERE lease_owner IS NOT NULL;
    CREATE TABLE replicas (
        id        text PRIMARY KEY,
        address   text NOT NULL,
        started   bigint NOT NULL,
        heartbeat timestamptz NOT NULL,
        running   integer NOT NULL DEFAULT 0
    );
    ALTER TABLE push_outbox
        ADD COLUMN locked_by text,
        ADD COLUMN locked_until timestamptz;",
    // 5: the owner of each context, claimed by its first task: a new task checks and claims
    // its context in the statement that writes it (`CREATE`).
    "CREATE TABLE contexts (
        id    text PRIMARY KEY,
        owner text
    );
    INSERT INTO contexts (id, owner)
        SELECT DISTINCT ON (context_id) context_id, owner FROM tasks
        ORDER BY context_id, created, id;",
    // 6: whether a replica follows the task (see `follow`): only then do its events wake the
    // replicas.
    "ALTER TABLE tasks ADD COLUMN followed boolean NOT NULL DEFAULT false;",
    // 7: which process offered a task waiting for a slot (see `offer`).
    "ALTER TABLE tasks ADD COLUMN offered_by text;",
    // 8: the SQLite store's version 5: how many tasks each owner (`owned` false: none, `owner`
    // ''), role and state has, kept by triggers in the statement of every task write, and
    // indexes that end in (state, status time, id) after each scope a listing has, in place
    // of those by time, role, owner and state. A count is split over 16 rows (`slot`, from the
    // task's id) so that concurrent writes of one owner's tasks seldom wait for one row until
    // the other's commit; the two rows a state change touches are taken in key order, so two
    // such writes never deadlock. Task writes wait until the counts are filled in.
    "LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
    CREATE TABLE task_counts (
        owner text NOT NULL,
        owned boolean NOT NULL,
        role  text NOT NULL,
        state integer NOT NULL,
        slot  smallint NOT NULL,
        n     bigint NOT NULL,
        PRIMARY KEY (owner, owned, role, state, slot)
    );
    INSERT INTO task_counts (owner, owned, role, state, slot, n)
        SELECT coalesce(owner, ''), owner IS NOT NULL, role, state, hashtext(id) & 15, count(*)
        FROM tasks GROUP BY 1, 2, 3, 4, 5;
    CREATE FUNCTION task_counts_add(text, text, integer, text, bigint)
    RETURNS void LANGUAGE sql AS $$
        INSERT INTO task_counts (owner, owned, role, state, slot, n)
        VALUES (coalesce($1, ''), $1 IS NOT NULL, $2, $3, hashtext($4) & 15, $5)
        ON CONFLICT (owner, owned, role, state, slot)
        DO UPDATE SET n = task_counts.n + excluded.n
    $$;
    CREATE FUNCTION task_counts_follow() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            PERFORM task_counts_add(NEW.owner, NEW.role, NEW.state, NEW.id, 1);
        ELSIF TG_OP = 'DELETE' THEN
            PERFORM task_counts_add(OLD.owner, OLD.role, OLD.state, OLD.id, -1);
        ELSIF (coalesce(OLD.owner, ''), OLD.owner IS NOT NULL, OLD.role, OLD.state)
            < (coalesce(NEW.owner, ''), NEW.owner IS NOT NULL, NEW.role, NEW.state) THEN
            PERFORM task_counts_add(OLD.owner, OLD.role, OLD.state, OLD.id, -1);
            PERFORM task_counts_add(NEW.owner, NEW.role, NEW.state, NEW.id, 1);
        ELSE
            PERFORM task_counts_add(NEW.owner, NEW.role, NEW.state, NEW.id, 1);
            PERFORM task_counts_add(OLD.owner, OLD.role, OLD.state, OLD.id, -1);
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER task_counts_insert_delete AFTER INSERT OR DELETE ON tasks
        FOR EACH ROW EXECUTE FUNCTION task_counts_follow();
    CREATE TRIGGER task_counts_update AFTER UPDATE OF owner, role, state ON tasks
        FOR EACH ROW
        WHEN (OLD.owner IS DISTINCT FROM NEW.owner OR OLD.role IS DISTINCT FROM NEW.role
              OR OLD.state IS DISTINCT FROM NEW.state)
        EXECUTE FUNCTION task_counts_follow();
    DROP INDEX tasks_by_time;
    DROP INDEX tasks_by_role;
    DROP INDEX tasks_by_owner;
    DROP INDEX tasks_by_state;
    CREATE INDEX tasks_by_state      ON tasks (state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_role       ON tasks (role, state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner      ON tasks (owner, state, status_time DESC, id DESC);
    CREATE INDEX tasks_by_owner_role ON tasks (owner, role, state, status_time DESC, id DESC);",
    // 9: the SQLite store's version 6: the owner's indexes hold owned tasks only (a listing by
    // owner names one), so a write of a task without an owner adds no entry to them.
    "DROP INDEX tasks_by_owner;
    DROP INDEX tasks_by_owner_role;
    CREATE INDEX tasks_by_owner      ON tasks (owner, state, status_time DESC, id DESC)
        WHERE owner IS NOT NULL;
    CREATE INDEX tasks_by_owner_role ON tasks (owner, role, state, status_time DESC, id DESC)
        WHERE owner IS NOT NULL;",
];

/// The advisory lock key migrations run under ("mew" + "migr" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d65_775f_6d69_6772;

/// How long a replica's claim on a push notification lasts: another replica delivers it
/// after that if this one is lost mid-delivery.
const PUSH_CLAIM: &str = "30 seconds";

/// How long the listening connection waits before it connects again.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Wake-ups buffered for the manager; one that lags reads everything again.
const CHANGES_BUFFER: usize = 1024;

/// Connections kept in the pool.
const POOL_SIZE: usize = 16;

/// How long a caller waits for a connection, and a connection for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The columns `decode` reads, in its order.
const COLUMNS: &str =
    "id, role, owner, parent, created, status_time, task, private, attempts, generation";

/// [`COLUMNS`] as a listing reads them: the private state left out (read as `null`), as
/// [`TaskStore::list`] says.
const LIST_COLUMNS: &str =
    "id, role, owner, parent, created, status_time, task, 'null'::text, attempts, generation";

/// How many columns [`COLUMNS`] names.
const COLUMN_COUNT: usize = 10;

/// The durable task store on a PostgreSQL server.
pub(crate) struct PostgresStore {
    pool: Pool,
    /// Where it is, without the password.
    location: String,
    /// This replica.
    replica: Replica,
    /// The epoch of each task this replica holds the lease of, by id.
    held: SyncMutex<HashMap<String, i64>>,
    /// Names this process in the tasks it offers (`offered_by`, see [`TaskStore::offer`]):
    /// its own `take_over` leaves them to the turn that waits for them here, which claims
    /// them back; a later run of the replica (another token) takes them like any.
    token: String,
    /// What the leases this process holds name as their owner (`lease_owner`): the replica's
    /// id and this process's token, so that the tasks a replica's last run held are told
    /// from those this run is taking at the same moment.
    owner: String,
    /// Wake-ups from the listening connection.
    changes: broadcast::Sender<Change>,
    /// Stops the listening connection.
    stop: CancellationToken,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL or a libpq key-value string),
    /// with `password` if the URL has none, brings its schema up to date, registers `replica`
    /// and starts listening for what other replicas change.
    ///
    /// Fails with a clear error when the server cannot be reached, refuses the credentials, or
    /// holds a schema of a newer Mew.
    pub(crate) async fn open(
        url: &str,
        password: Option<&str>,
        replica: Replica,
    ) -> Result<Self, StoreError> {
        let mut config = Config::from_str(url).map_err(|e| {
            StoreError::Backend(format!("the store URL is not a PostgreSQL URL: {e}"))
        })?;
        if config.get_password().is_none()
            && let Some(password) = password
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let location = describe(&config);
        let tls = tls()?;
        let (mut setup, connection) = config.connect(tls.clone()).await.map_err(|e| {
            StoreError::Backend(format!(
                "cannot connect to the task store {location}: {}",
                full(&e)
            ))
        })?;
        let driver = tokio::spawn(connection);
        migrate(&mut setup, &location).await?;
        drop(setup);
        let _ = driver.await;

        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot make a connection pool: {e}")))?;
        let (changes, _) = broadcast::channel(CHANGES_BUFFER);
        let stop = CancellationToken::new();
        tokio::spawn(listen(config, tls, changes.clone(), stop.clone()));
        let token = uuid::Uuid::now_v7().to_string();
        let owner = format!("{}#{token}", replica.id);
        let store = Self {
            owner,
            pool,
            location,
            replica,
            held: SyncMutex::new(HashMap::new()),
            token,
            changes,
            stop,
        };
        store.beat(0).await?;
        Ok(store)
    }

    /// Lets go of the lease of task `id` and follows the task; `offered_by` names the
    /// process that offers it (see [`TaskStore::offer`]), `None` when it is handed back.
    async fn let_go(&self, id: &TaskId, offered_by: Option<&str>) -> Result<(), StoreError> {
        let Some(epoch) = self.held().remove(id.as_str()) else {
            return Ok(());
        };
        self.client()
            .await?
            .cached_query(
                "WITH released AS (
                     UPDATE tasks SET lease_owner = NULL, lease_expires = NULL, followed = true,
                         offered_by = $4
                     WHERE id = $1 AND lease_owner = $2 AND epoch = $3
                     RETURNING id)
                 SELECT pg_notify('mew_work', id) FROM released",
                &[&id.as_str(), &self.owner, &epoch, &offered_by],
            )
            .await
            .map(drop)
            .map_err(|e| db_error(&format!("let go of task {id}"), e))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease in milliseconds, as SQL takes it.
    fn lease_ms(&self) -> f64 {
        self.replica.lease.as_secs_f64() * 1000.0
    }

    /// Records this replica's heartbeat in `replicas`: how many other replicas are alive
    /// (beat within two leases, as `replicas` says).
    async fn beat(&self, running: usize) -> Result<usize, StoreError> {
        let started = i64::try_from(Timestamp::now().unix_nanos() / 1_000_000).unwrap_or(0);
        let running = i32::try_from(running).unwrap_or(i32::MAX);
        let others: i64 = self
            .client()
            .await?
            .cached_query_one(
                "WITH beat AS (
                     INSERT INTO replicas (id, address, started, heartbeat, running)
                     VALUES ($1, $2, $3, now(), $4)
                     ON CONFLICT (id) DO UPDATE SET
                         address = excluded.address, heartbeat = now(),
                         running = excluded.running)
                 SELECT count(*) FROM replicas
                 WHERE id <> $1 AND heartbeat > now() - 2 * $5::float8 * interval '1 millisecond'",
                &[
                    &self.replica.id,
                    &self.replica.address,
                    &started,
                    &running,
                    &self.lease_ms(),
                ],
            )
            .await
            .map_err(|e| db_error("record this replica's heartbeat", e))?
            .get(0);
        Ok(usize::try_from(others).unwrap_or(0))
    }

    /// Writes a task row, under its lease (see [`UPSERT`]), and keeps `held` in step.
    async fn write(&self, client: &impl GenericClient, row: &Row) -> Result<(), StoreError> {
        let lease = self.lease_for(row);
        let written = put(client, row, &lease).await?;
        self.written(row, lease.keeps, written)
    }

    /// Writes a new task row (see [`CREATE`]) and holds it; `ForeignContext` when its
    /// context is another owner's (nothing was written).
    async fn write_new(&self, client: &impl GenericClient, row: &Row) -> Result<(), StoreError> {
        let lease = self.lease_for(row);
        let (admitted, written) = insert_new(client, row, &lease).await?;
        if !admitted {
            self.held().remove(&row.id);
            return Err(StoreError::ForeignContext(ContextId::from(
                row.context_id.as_str(),
            )));
        }
        self.written(row, lease.keeps, written)
    }

    /// The lease arguments of a write of `row` by this replica.
    fn lease_for<'a>(&'a self, row: &Row) -> Lease<'a> {
        Lease {
            owner: &self.owner,
            lease_ms: self.lease_ms(),
            keeps: row.state == TaskState::Submitted.number()
                || row.state == TaskState::Working.number(),
            epoch: self.held().get(&row.id).copied().unwrap_or(-1),
        }
    }

    /// Keeps `held` in step with a write of `row` that returned `written` (the epoch, or
    /// `None` when the lease refused it).
    fn written(&self, row: &Row, keeps: bool, written: Option<i64>) -> Result<(), StoreError> {
        match written {
            Some(epoch) if keeps => {
                self.held().insert(row.id.clone(), epoch);
                Ok(())
            }
            Some(_) => {
                self.held().remove(&row.id);
                Ok(())
            }
            None => {
                self.held().remove(&row.id);
                Err(StoreError::Fenced(TaskId::from(row.id.as_str())))
            }
        }
    }

    /// Reads the rows of a lease-taking statement (`COLUMNS` then `epoch`) and holds them.
    fn hold(&self, rows: &[PgRow]) -> Result<Vec<StoredTask>, StoreError> {
        let mut tasks = Vec::with_capacity(rows.len());
        for row in rows {
            let task = decode(row)?;
            let epoch: i64 = row
                .try_get(COLUMN_COUNT)
                .map_err(|e| db_error("read a lease", e))?;
            self.held().insert(task.task.id.as_str().to_owned(), epoch);
            tasks.push(task);
        }
        tasks.sort_by(|a, b| (a.created, a.task.id.as_str()).cmp(&(b.created, b.task.id.as_str())));
        Ok(tasks)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| {
            StoreError::Backend(format!(
                "cannot reach the task store {}: {e}",
                self.location
            ))
        })
    }

    /// Runs `write` in a transaction, committed only if it succeeds.
    async fn in_transaction<T>(
        &self,
        what: &str,
        write: impl AsyncFnOnce(&deadpool_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| db_error(what, e))?;
        let value = write(&tx).await?;
        tx.commit().await.map_err(|e| db_error(what, e))?;
        Ok(value)
    }
}

/// The host, port and database of `config`, never its password.
fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("postgres://{host}:{port}/{database}")
}

/// TLS as the node's other clients do it: rustls with aws-lc-rs, trusting the system's roots.
/// Used when the URL's `sslmode` asks for it (`prefer`, the default, tries it first).
fn tls() -> Result<MakeRustlsConnect, StoreError> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| StoreError::Backend(format!("cannot set up TLS for the task store: {e}")))?
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn db_error(what: &str, e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(format!("cannot {what}: {}", full(&e)))
}

/// `e` with its causes: tokio-postgres says "error connecting to server" and keeps the why
/// (connection refused, a bad password) in its source.
fn full(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Brings the schema to the version this build writes, under the migration lock.
async fn migrate(client: &mut Client, location: &str) -> Result<(), StoreError> {
    let fail = |e| db_error(&format!("migrate the task store {location}"), e);
    let tx = client.transaction().await.map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(fail)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS mew_schema (version integer NOT NULL)")
        .await
        .map_err(fail)?;
    let version: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM mew_schema", &[])
        .await
        .map_err(fail)?
        .get(0);
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if version > known {
        return Err(StoreError::Backend(format!(
            "the task store {location} has schema version {version}, written by a newer Mew; \
             this one knows up to {known}"
        )));
    }
    let pending = MIGRATIONS
        .iter()
        .skip(usize::try_from(version).unwrap_or(0));
    for (n, sql) in (version + 1..).zip(pending) {
        tx.batch_execute(sql).await.map_err(fail)?;
        tx.execute("DELETE FROM mew_schema", &[])
            .await
            .map_err(fail)?;
        tx.execute("INSERT INTO mew_schema (version) VALUES ($1)", &[&n])
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

/// Reads one row selected with [`COLUMNS`].
fn decode(row: &PgRow) -> Result<StoredTask, StoreError> {
    let id: String = row
        .try_get(0)
        .map_err(|e| StoreError::Backend(format!("cannot read a task id: {e}")))?;
    let column = |e: tokio_postgres::Error| StoreError::Corrupt {
        id: id.clone(),
        reason: format!("a column cannot be read: {e}"),
    };
    let role: String = row.try_get(1).map_err(column)?;
    let owner: Option<String> = row.try_get(2).map_err(column)?;
    let parent: Option<String> = row.try_get(3).map_err(column)?;
    let created: i64 = row.try_get(4).map_err(column)?;
    let task: String = row.try_get(6).map_err(column)?;
    let private: String = row.try_get(7).map_err(column)?;
    let attempts: i32 = row.try_get(8).map_err(column)?;
    let generation: i64 = row.try_get(9).map_err(column)?;
    let mut stored = assemble(id, role, owner, parent, created, &task, &private)?;
    stored.attempts = attempts;
    stored.generation = u64::try_from(generation).unwrap_or(0);
    Ok(stored)
}

/// Statements prepared once per connection and kept (deadpool's statement cache): given
/// text, tokio-postgres prepares a statement anew on every call, a round trip of its own
/// and a fresh parse and plan in the server, before it runs it.
trait Cached: GenericClient + Sized {
    fn cached_query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<PgRow>, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query(&statement, params).await
        }
    }

    fn cached_execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.execute(&statement, params).await
        }
    }

    fn cached_query_one<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<PgRow, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_one(&statement, params).await
        }
    }

    fn cached_query_opt<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<PgRow>, tokio_postgres::Error>> + Send + 'a {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_opt(&statement, params).await
        }
    }
}

impl<T: GenericClient> Cached for T {}

/// The upsert of a task row under its lease: `$1`..`$12` are the columns of [`Row`]; `$13` this
/// replica, `$14` the lease in milliseconds, `$15` whether the task keeps a lease (it is
/// SUBMITTED or WORKING), `$16` the epoch this replica holds it under (-1: none).
///
/// A new row is held by this replica under a new epoch (when it keeps a lease). An existing
/// one is written only by the holder of its epoch, or, when nobody holds it and it waits for
/// input (a SUBMITTED or WORKING task without a lease is one handed back or offered: it is
/// claimed before it is written), by a replica that does not think it does; a write that
/// ends the lease clears it. `RETURNING epoch` gives no
/// row when the write was refused.
const UPSERT: &str = concat!(
    task_insert!(),
    " VALUES (",
    task_values!(),
    ") ",
    task_conflict!()
);

/// The columns of a task row's insert.
macro_rules! task_insert {
    () => {
        "INSERT INTO tasks
         (id, context_id, role, owner, parent, state, status_time, created, task, private,
          attempts, generation, epoch, lease_owner, lease_expires)"
    };
}
use task_insert;

/// The values of [`task_insert`], from the arguments of [`UPSERT`] (typed: they are also
/// selected, where nothing else gives their types).
macro_rules! task_values {
    () => {
        "$1::text, $2::text, $3::text, $4::text, $5::text, $6::integer, $7::bigint, $8::bigint,
         $9::text, $10::text, $11::integer, $12::bigint, nextval('lease_epochs'),
         CASE WHEN $15::bool THEN $13::text END,
         CASE WHEN $15::bool THEN now() + $14::float8 * interval '1 millisecond' END"
    };
}
use task_values;

/// What [`UPSERT`] does to a row that exists.
macro_rules! task_conflict {
    () => {
        "ON CONFLICT (id) DO UPDATE SET
         context_id = excluded.context_id,
         role = excluded.role,
         owner = excluded.owner,
         parent = excluded.parent,
         state = excluded.state,
         status_time = excluded.status_time,
         created = excluded.created,
         task = excluded.task,
         private = excluded.private,
         attempts = excluded.attempts,
         generation = excluded.generation,
         epoch = CASE WHEN tasks.lease_owner IS NULL AND $15::bool
             THEN nextval('lease_epochs') ELSE tasks.epoch END,
         lease_owner = excluded.lease_owner,
         lease_expires = CASE
             WHEN NOT $15::bool THEN NULL
             WHEN tasks.lease_owner IS NULL THEN excluded.lease_expires
             ELSE tasks.lease_expires END,
         cancel_requested = $15::bool AND tasks.cancel_requested
     WHERE (tasks.lease_owner = $13::text AND tasks.epoch = $16::bigint)
        OR (tasks.lease_owner IS NULL AND $16::bigint < 0 AND tasks.state NOT IN (1, 2))
     RETURNING id, epoch, followed"
    };
}
use task_conflict;

/// [`UPSERT`] with the task's events (numbers `$17`, events `$18`) logged and the replicas that
/// follow the task woken
/// (when one does: `followed`), in the same statement.
const UPSERT_LOGGED: &str = concat!(
    "WITH written AS (",
    task_insert!(),
    " VALUES (",
    task_values!(),
    ") ",
    task_conflict!(),
    "), logged AS (
         INSERT INTO task_events (task_id, generation, event)
         SELECT id, n, e FROM written, unnest($17::bigint[], $18::text[]) AS logged(n, e))
     SELECT id, epoch, CASE WHEN followed THEN pg_notify('mew_events', id) END FROM written"
);

/// A new task with its first event, in one statement: the context is claimed for the task's
/// owner (`contexts`; a context that exists is locked, and read as committed, by the
/// `ON CONFLICT` update), and the task is written only when the context is its owner's. One
/// row: whether the context admitted the task, and the task's epoch (NULL when it did not).
/// Nobody follows a new task yet: it wakes nobody.
/// Two principals naming one new context at once: the second waits for the first's insert
/// into `contexts`, then finds the first's owner.
const CREATE: &str = concat!(
    "WITH context AS (
         INSERT INTO contexts (id, owner) VALUES ($2::text, $4::text)
         ON CONFLICT (id) DO UPDATE SET owner = contexts.owner
         RETURNING owner),
     written AS (",
    task_insert!(),
    " SELECT ",
    task_values!(),
    " FROM context WHERE context.owner IS NOT DISTINCT FROM $4::text ",
    task_conflict!(),
    "), logged AS (
         INSERT INTO task_events (task_id, generation, event)
         SELECT id, n, e FROM written, unnest($17::bigint[], $18::text[]) AS logged(n, e))
     SELECT context.owner IS NOT DISTINCT FROM $4::text, written.epoch
     FROM context LEFT JOIN written ON true"
);

/// A write's lease arguments (`$13`..`$16` of [`UPSERT`]).
struct Lease<'a> {
    owner: &'a str,
    lease_ms: f64,
    keeps: bool,
    epoch: i64,
}

/// The arguments of [`UPSERT`] (and, with the events' numbers and the events, of
/// [`UPSERT_LOGGED`] and [`CREATE`]).
fn task_params<'a>(
    row: &'a Row,
    lease: &'a Lease<'_>,
    numbers: &'a Vec<i64>,
) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &row.id,
        &row.context_id,
        &row.role,
        &row.owner,
        &row.parent,
        &row.state,
        &row.status_time,
        &row.created,
        &row.task,
        &row.private,
        &row.attempts,
        &row.generation,
        &lease.owner,
        &lease.lease_ms,
        &lease.keeps,
        &lease.epoch,
    ];
    if !row.events.is_empty() {
        params.push(numbers);
        params.push(&row.events);
    }
    params
}

/// Writes a task row and, when it has one, logs its event and wakes the replicas that follow
/// the task: one statement either way, so a write is one round trip and atomic without a
/// transaction of its own. The epoch the task is held under now, or `None` when the lease
/// refused the write (nothing was written).
async fn put(
    client: &impl GenericClient,
    row: &Row,
    lease: &Lease<'_>,
) -> Result<Option<i64>, StoreError> {
    let sql = if row.events.is_empty() {
        UPSERT
    } else {
        UPSERT_LOGGED
    };
    let numbers = row.event_numbers();
    let rows = client
        .cached_query(sql, &task_params(row, lease, &numbers))
        .await
        .map_err(|e| {
            db_error(
                &format!("store task {} (event {})", row.id, row.generation),
                e,
            )
        })?;
    Ok(rows.first().map(|r| r.get(1)))
}

/// Writes a new task row with its first event, in one statement ([`CREATE`]): whether its
/// context admitted it, and the epoch it is held under (`None` when the lease refused the
/// write of a row that existed).
async fn insert_new(
    client: &impl GenericClient,
    row: &Row,
    lease: &Lease<'_>,
) -> Result<(bool, Option<i64>), StoreError> {
    let fail = |e| db_error(&format!("store the new task {}", row.id), e);
    if row.events.is_empty() {
        return Err(StoreError::Backend(format!(
            "the new task {} has no first event",
            row.id
        )));
    }
    let numbers = row.event_numbers();
    let written = client
        .cached_query_one(CREATE, &task_params(row, lease, &numbers))
        .await
        .map_err(fail)?;
    let admitted: bool = written.try_get(0).map_err(fail)?;
    let epoch: Option<i64> = written.try_get(1).map_err(fail)?;
    Ok((admitted, epoch))
}

async fn put_with_events(
    store: &PostgresStore,
    tx: &impl GenericClient,
    row: &Row,
    configs: &[ConfigRow],
    outbox: &[OutboxRow],
) -> Result<(), StoreError> {
    store.write(tx, row).await?;
    for config in configs {
        put_config(tx, config).await?;
    }
    for event in outbox {
        enqueue(tx, event).await?;
    }
    Ok(())
}

async fn put_config(client: &impl GenericClient, row: &ConfigRow) -> Result<(), StoreError> {
    client
        .cached_execute(
            "INSERT INTO push_configs (task_id, id, config) VALUES ($1, $2, $3)
             ON CONFLICT (task_id, id) DO UPDATE SET config = excluded.config",
            &[&row.task_id, &row.id, &row.config],
        )
        .await
        .map_err(|e| {
            db_error(
                &format!("store push config {} of task {}", row.id, row.task_id),
                e,
            )
        })?;
    Ok(())
}

/// Tells the replica running `task_id` that its push configs changed.
async fn notify_push(client: &impl GenericClient, task_id: &str) -> Result<(), StoreError> {
    client
        .cached_execute("SELECT pg_notify('mew_push', $1)", &[&task_id])
        .await
        .map(drop)
        .map_err(|e| db_error("announce a push config", e))
}

async fn enqueue(client: &impl GenericClient, row: &OutboxRow) -> Result<(), StoreError> {
    client
        .cached_execute(
            "INSERT INTO push_outbox (task_id, config_id, body) VALUES ($1, $2, $3)",
            &[&row.task_id.as_str(), &row.config_id, &row.body],
        )
        .await
        .map_err(|e| {
            db_error(
                &format!("enqueue a push notification for task {}", row.task_id),
                e,
            )
        })?;
    Ok(())
}

/// Whether `context_id` belongs to another owner than `owner`.
async fn foreign_owner(
    client: &impl GenericClient,
    context_id: &str,
    owner: Option<&str>,
) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .cached_query_one(
            "SELECT EXISTS (SELECT 1 FROM contexts WHERE id = $1 AND owner IS DISTINCT FROM $2)",
            &[&context_id, &owner],
        )
        .await?
        .get(0))
}

/// The arguments of a query, in `$n` order.
type Args = Vec<Box<dyn ToSql + Sync + Send>>;

fn refs(args: &Args) -> Vec<&(dyn ToSql + Sync)> {
    args.iter()
        .map(|arg| arg.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// A `list` query as SQL, as the SQLite store reads it (see its `Listing`): without a context,
/// the counts of the scope (owner, role) per state from `task_counts`, then one range per state
/// that holds any of the index that starts with the scope, merged (`LATERAL` over the states,
/// so the statement is the same whatever their number); with a context, its tasks through its
/// index, counted and sorted.
struct Listing<'a> {
    query: &'a TaskQuery,
}

/// The order of every listing, and of the ranges merged into one.
const NEWEST_FIRST: &str = " ORDER BY status_time DESC, id DESC";

/// Numbered SQL conditions and their arguments.
#[derive(Default)]
struct Conditions {
    filters: Vec<String>,
    args: Args,
}

impl Conditions {
    /// Adds `sql` with its `?`s numbered as the next arguments, `args`.
    fn add(&mut self, sql: &str, args: Vec<Box<dyn ToSql + Sync + Send>>) {
        let mut numbered = String::with_capacity(sql.len() + 4);
        for (i, piece) in sql.split('?').enumerate() {
            if i > 0 {
                numbered.push_str(&format!("${}", self.args.len() + i));
            }
            numbered.push_str(piece);
        }
        self.args.extend(args);
        self.filters.push(numbered);
    }

    /// The next argument's `$n`, for a statement's tail.
    fn push(&mut self, arg: Box<dyn ToSql + Sync + Send>) -> String {
        self.args.push(arg);
        format!("${}", self.args.len())
    }

    fn clause(&self) -> String {
        where_clause(&self.filters)
    }
}

impl Listing<'_> {
    /// The scope's conditions (owner, role), on the columns of `tasks` as `table`.
    fn scope(&self, on: &mut Conditions, table: &str) {
        if let Some(owner) = &self.query.owner {
            on.add(&format!("{table}owner = ?"), vec![Box::new(owner.clone())]);
        }
        if let Some(role) = &self.query.role {
            on.add(&format!("{table}role = ?"), vec![Box::new(role.clone())]);
        }
    }

    /// Adds the time bound, and the cursor when `cursor`.
    fn bound(&self, on: &mut Conditions, table: &str, cursor: bool) {
        if let Some(after) = self.query.status_after {
            on.add(
                &format!("{table}status_time >= ?"),
                vec![Box::new(bound_nanos(after))],
            );
        }
        if let Some(at) = self.query.after.as_ref().filter(|_| cursor) {
            on.add(
                &format!("({table}status_time, {table}id) < (?, ?)"),
                vec![
                    Box::new(bound_nanos(at.status_time)),
                    Box::new(at.id.as_str().to_owned()),
                ],
            );
        }
    }

    /// One row more than the page: whether another page follows.
    fn fetch(&self) -> Box<dyn ToSql + Sync + Send> {
        Box::new(i64::try_from(self.query.limit.saturating_add(1)).unwrap_or(i64::MAX))
    }

    /// How many tasks of the scope (and state, when asked for) each state that holds any
    /// has, in order.
    fn counts(&self) -> (String, Args) {
        let mut on = Conditions::default();
        if let Some(owner) = &self.query.owner {
            on.add("owner = ? AND owned", vec![Box::new(owner.clone())]);
        }
        if let Some(role) = &self.query.role {
            on.add("role = ?", vec![Box::new(role.clone())]);
        }
        if let Some(state) = self.query.state {
            on.add("state = ?", vec![Box::new(state.number())]);
        }
        let sql = format!(
            "SELECT state, sum(n)::bigint FROM task_counts{} GROUP BY state \
             HAVING sum(n) > 0 ORDER BY state",
            on.clause()
        );
        (sql, on.args)
    }

    /// The count of the scope's tasks in `states` from `status_after` on.
    fn timed_count(&self, states: &[i32]) -> (String, Args) {
        let mut on = Conditions::default();
        self.scope(&mut on, "");
        on.add("state = ANY(?::integer[])", vec![Box::new(states.to_vec())]);
        self.bound(&mut on, "", false);
        (
            format!("SELECT count(*) FROM tasks{}", on.clause()),
            on.args,
        )
    }

    /// The page: one range per state in `states`, merged.
    fn page(&self, states: &[i32]) -> (String, Args) {
        let mut on = Conditions::default();
        self.scope(&mut on, "t.");
        on.filters.push("t.state = states.state".to_owned());
        self.bound(&mut on, "t.", true);
        let clause = on.clause();
        let states = on.push(Box::new(states.to_vec()));
        let fetch = on.push(self.fetch());
        let sql = format!(
            "SELECT {LIST_COLUMNS} FROM tasks WHERE id IN (
                 SELECT arm.id FROM unnest({states}::integer[]) AS states (state),
                 LATERAL (SELECT t.status_time, t.id FROM tasks AS t{clause}
                          ORDER BY t.status_time DESC, t.id DESC LIMIT {fetch}) AS arm
                 ORDER BY arm.status_time DESC, arm.id DESC LIMIT {fetch}){NEWEST_FIRST}"
        );
        (sql, on.args)
    }

    /// The count and the page of a context's tasks.
    fn context(&self, context_id: &ContextId) -> ((String, Args), (String, Args)) {
        let conditions = |cursor: bool| {
            let mut on = Conditions::default();
            on.add(
                "context_id = ?",
                vec![Box::new(context_id.as_str().to_owned())],
            );
            self.scope(&mut on, "");
            if let Some(state) = self.query.state {
                on.add("state = ?", vec![Box::new(state.number())]);
            }
            self.bound(&mut on, "", cursor);
            on
        };
        let count = conditions(false);
        let count = (
            format!("SELECT count(*) FROM tasks{}", count.clause()),
            count.args,
        );
        let mut page = conditions(true);
        let clause = page.clause();
        let fetch = page.push(self.fetch());
        let page = (
            format!("SELECT {LIST_COLUMNS} FROM tasks{clause}{NEWEST_FIRST} LIMIT {fetch}"),
            page.args,
        );
        (count, page)
    }

    /// The total and the page's rows, in one snapshot.
    async fn read(
        &self,
        tx: &impl GenericClient,
    ) -> Result<(i64, Vec<PgRow>), tokio_postgres::Error> {
        let count = |(sql, args): (String, Args)| async move {
            Ok::<i64, tokio_postgres::Error>(tx.cached_query_one(&sql, &refs(&args)).await?.get(0))
        };
        let known = self
            .query
            .known_total
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let (total, page) = match &self.query.context_id {
            Some(context_id) => {
                let (counted, page) = self.context(context_id);
                let total = match known {
                    Some(total) => total,
                    None => count(counted).await?,
                };
                (total, Some(page))
            }
            None => {
                let (sql, args) = self.counts();
                let counts: Vec<(i32, i64)> = tx
                    .cached_query(&sql, &refs(&args))
                    .await?
                    .iter()
                    .map(|row| (row.get(0), row.get(1)))
                    .collect();
                let states: Vec<i32> = counts.iter().map(|&(state, _)| state).collect();
                let total = match (known, self.query.status_after) {
                    (Some(total), _) => total,
                    (None, _) if states.is_empty() => 0,
                    (None, Some(_)) => count(self.timed_count(&states)).await?,
                    (None, None) => counts.iter().map(|&(_, n)| n).sum(),
                };
                (total, (!states.is_empty()).then(|| self.page(&states)))
            }
        };
        let rows = match page {
            Some((sql, args)) => tx.cached_query(&sql, &refs(&args)).await?,
            None => Vec::new(),
        };
        Ok((total, rows))
    }
}

fn where_clause(filters: &[String]) -> String {
    if filters.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", filters.join(" AND "))
    }
}

#[async_trait]
impl TaskStore for PostgresStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    async fn close(self: Arc<Self>) -> Result<(), StoreError> {
        // Every write is committed when it returns. A replica that stops leaves the list;
        // the leases it still holds lapse (or were handed back).
        self.stop.cancel();
        if let Ok(client) = self.client().await
            && let Err(e) = client
                .cached_execute("DELETE FROM replicas WHERE id = $1", &[&self.replica.id])
                .await
        {
            tracing::warn!(error = %e, "cannot take this replica off the list");
        }
        self.pool.close();
        Ok(())
    }

    async fn put(&self, task: &StoredTask) -> Result<(), StoreError> {
        let row = Row::encode(task)?;
        self.write(&self.client().await?, &row).await
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
        let configs: Vec<ConfigRow> = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        if configs.is_empty() && outbox.is_empty() {
            // One statement: atomic as it is.
            return self.write_new(&self.client().await?, &row).await;
        }
        self.in_transaction("store a new task", async |tx| {
            self.write_new(tx, &row).await?;
            for config in &configs {
                put_config(tx, config).await?;
            }
            for event in outbox {
                enqueue(tx, event).await?;
            }
            Ok(())
        })
        .await
    }

    async fn context_admits(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<bool, StoreError> {
        foreign_owner(&self.client().await?, context_id.as_str(), owner)
            .await
            .map(|foreign| !foreign)
            .map_err(|e| db_error("read a context", e))
    }

    async fn put_with_events(
        &self,
        task: &StoredTask,
        events: &[StreamResponse],
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        let row = Row::with_events(task, events)?;
        let configs: Vec<ConfigRow> = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        if configs.is_empty() && outbox.is_empty() {
            // One statement: atomic as it is.
            return self.write(&self.client().await?, &row).await;
        }
        self.in_transaction("store a task", async |tx| {
            put_with_events(self, tx, &row, &configs, outbox).await
        })
        .await
    }

    async fn push_configs(
        &self,
        task: &TaskId,
    ) -> Result<Vec<TaskPushNotificationConfig>, StoreError> {
        let rows = self
            .client()
            .await?
            .cached_query(
                "SELECT id, config FROM push_configs WHERE task_id = $1 ORDER BY id",
                &[&task.as_str()],
            )
            .await
            .map_err(|e| db_error("read push configs", e))?;
        rows.iter()
            .map(|row| decode_config(task.as_str(), row.get(0), row.get(1)))
            .collect()
    }

    async fn put_push_config(&self, config: &TaskPushNotificationConfig) -> Result<(), StoreError> {
        let row = ConfigRow::encode(config)?;
        let client = self.client().await?;
        put_config(&client, &row).await?;
        notify_push(&client, &row.task_id).await
    }

    async fn delete_push_config(&self, task: &TaskId, id: &str) -> Result<(), StoreError> {
        let task_id = task.as_str();
        self.in_transaction("delete a push config", async |tx| {
            let fail = |e| db_error(&format!("delete push config {id} of task {task_id}"), e);
            tx.cached_execute(
                "DELETE FROM push_configs WHERE task_id = $1 AND id = $2",
                &[&task_id, &id],
            )
            .await
            .map_err(fail)?;
            tx.cached_execute(
                "DELETE FROM push_outbox WHERE task_id = $1 AND config_id = $2",
                &[&task_id, &id],
            )
            .await
            .map_err(fail)?;
            notify_push(tx, task_id).await
        })
        .await
    }

    async fn push_heads(&self, limit: usize) -> Result<Vec<PendingPush>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let now_ms = i64::try_from(Timestamp::now().unix_nanos() / 1_000_000).unwrap_or(i64::MAX);
        // The due heads are claimed by this replica for a while, so that one replica delivers
        // each; the others come along unclaimed, to say when to look again: a head not due
        // yet at its `next_at`, a head another replica holds when its claim ends (that replica
        // may be gone: then this one delivers it once the claim has lapsed).
        let rows = self
            .client()
            .await?
            .cached_query(
                &format!(
                    "WITH heads AS (
                         SELECT min(seq) AS seq FROM push_outbox
                         GROUP BY task_id, config_id ORDER BY 1 LIMIT $1),
                     claimed AS (
                         UPDATE push_outbox SET locked_by = $2,
                             locked_until = now() + interval '{PUSH_CLAIM}'
                         WHERE seq IN (SELECT seq FROM heads) AND next_at <= $3
                           AND (locked_until IS NULL OR locked_until < now() OR locked_by = $2)
                         RETURNING seq)
                     SELECT o.seq, o.task_id, o.config_id, o.body, o.attempts,
                         CASE WHEN o.seq IN (SELECT seq FROM claimed) THEN o.next_at
                              ELSE GREATEST(o.next_at, $3 + 1,
                                  (extract(epoch FROM o.locked_until) * 1000)::bigint + 1)
                         END,
                         c.config
                     FROM push_outbox o
                     LEFT JOIN push_configs c ON c.task_id = o.task_id AND c.id = o.config_id
                     WHERE o.seq IN (SELECT seq FROM heads)
                     ORDER BY o.seq"
                ),
                &[&limit, &self.replica.id, &now_ms],
            )
            .await
            .map_err(|e| db_error("read the push outbox", e))?;
        Ok(rows
            .iter()
            .map(|row| {
                let task_id: String = row.get(1);
                let config_id: String = row.get(2);
                let config = row.get::<_, Option<&str>>(6).and_then(|json| {
                    decode_config(&task_id, &config_id, json)
                        .inspect_err(|e| tracing::warn!(error = %e, "a push config cannot be read"))
                        .ok()
                });
                let attempts: i32 = row.get(4);
                PendingPush {
                    seq: row.get(0),
                    task_id: TaskId::from(task_id),
                    config_id,
                    config,
                    body: row.get(3),
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    next_at: row.get(5),
                }
            })
            .collect())
    }

    async fn push_done(&self, seq: i64) -> Result<(), StoreError> {
        self.client()
            .await?
            .cached_execute("DELETE FROM push_outbox WHERE seq = $1", &[&seq])
            .await
            .map(drop)
            .map_err(|e| db_error("remove a push notification", e))
    }

    async fn push_depth(&self, limit: u64) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let row = self
            .client()
            .await?
            .cached_query_one(
                "SELECT count(*) FROM (SELECT 1 FROM push_outbox LIMIT $1) AS waiting",
                &[&limit],
            )
            .await
            .map_err(|e| db_error("count the push outbox", e))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn push_retry(&self, seq: i64, next_at: i64, error: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .cached_execute(
                "UPDATE push_outbox SET attempts = attempts + 1, next_at = $2, last_error = $3, \
                 locked_by = NULL, locked_until = NULL WHERE seq = $1",
                &[&seq, &next_at, &error],
            )
            .await
            .map(drop)
            .map_err(|e| db_error("reschedule a push notification", e))
    }

    async fn get(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError> {
        let row = self
            .client()
            .await?
            .cached_query_opt(
                &format!("SELECT {COLUMNS} FROM tasks WHERE id = $1"),
                &[&id.as_str()],
            )
            .await
            .map_err(|e| db_error("read a task", e))?;
        row.as_ref().map(decode).transpose()
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let mut client = self.client().await?;
        let fail = |e| db_error("read a task list", e);
        // One snapshot for the count and the page.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(fail)?;
        let (total, rows) = Listing { query }.read(&tx).await.map_err(fail)?;
        tx.commit().await.map_err(fail)?;

        let mut tasks: Vec<StoredTask> = Vec::with_capacity(query.limit.min(rows.len()));
        let mut last_time: i64 = 0;
        let mut next = None;
        let mut bytes = 0usize;
        for row in &rows {
            let full = query.max_bytes.is_some_and(|max| bytes >= max);
            if tasks.len() == query.limit || full {
                // The extra row: a next page follows, after the last task kept.
                next = tasks.last().map(|task| Cursor {
                    status_time: Timestamp::from_unix_nanos(i128::from(last_time)),
                    id: task.task.id.clone(),
                });
                break;
            }
            last_time = row.get(5);
            bytes = bytes.saturating_add(row.get::<_, &str>(6).len());
            tasks.push(decode(row)?);
        }
        Ok(TaskPage {
            tasks,
            total: usize::try_from(total).unwrap_or(0),
            next,
        })
    }

    async fn context(
        &self,
        context_id: &ContextId,
        owner: Option<&str>,
    ) -> Result<Vec<StoredTask>, StoreError> {
        let rows = self
            .client()
            .await?
            .cached_query(
                &format!(
                    "SELECT {COLUMNS} FROM tasks \
                     WHERE context_id = $1 AND owner IS NOT DISTINCT FROM $2 \
                     ORDER BY created, id"
                ),
                &[&context_id.as_str(), &owner],
            )
            .await
            .map_err(|e| db_error("read a context", e))?;
        rows.iter().map(decode).collect()
    }

    async fn events(
        &self,
        task: &TaskId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, StreamResponse)>, StoreError> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .await?
            .cached_query(
                "SELECT generation, event FROM task_events \
                 WHERE task_id = $1 AND generation > $2 ORDER BY generation LIMIT $3",
                &[&task.as_str(), &after, &limit],
            )
            .await
            .map_err(|e| db_error("read the events of a task", e))?;
        rows.iter()
            .map(|row| decode_event(task.as_str(), row.get(0), row.get(1)))
            .collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.client()
            .await?
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| db_error("answer a probe", e))
    }

    async fn take_over(&self, limit: usize) -> Result<Vec<StoredTask>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let held: Vec<String> = self.held().keys().cloned().collect();
        // A lapsed lease, none, or one this replica's last run left (not this run's: a lease it
        // is taking right now is not in `held` yet): what no live replica runs.
        let rows = self
            .client()
            .await?
            .cached_query(
                &format!(
                    "UPDATE tasks SET epoch = nextval('lease_epochs'), lease_owner = $1,
                         lease_expires = now() + $2::float8 * interval '1 millisecond',
                         cancel_requested = false, offered_by = NULL
                     WHERE id IN (
                         SELECT id FROM tasks
                         WHERE state IN (1, 2)
                           AND (lease_owner IS NULL OR lease_expires < now()
                                OR (starts_with(lease_owner, $6) AND lease_owner <> $1))
                           AND NOT (id = ANY($3::text[]))
                           AND offered_by IS DISTINCT FROM $5
                         ORDER BY created, id LIMIT $4
                         FOR UPDATE SKIP LOCKED)
                     RETURNING {COLUMNS}, epoch"
                ),
                &[
                    &self.owner,
                    &self.lease_ms(),
                    &held,
                    &limit,
                    &self.token,
                    &format!("{}#", self.replica.id),
                ],
            )
            .await
            .map_err(|e| db_error("take over unfinished tasks", e))?;
        self.hold(&rows)
    }

    fn shared(&self) -> bool {
        true
    }

    async fn claim(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError> {
        if self.held().contains_key(id.as_str()) {
            return Ok(None);
        }
        let unfinished = [
            TaskState::Submitted.number(),
            TaskState::Working.number(),
            TaskState::InputRequired.number(),
            TaskState::AuthRequired.number(),
        ];
        let rows = self
            .client()
            .await?
            .cached_query(
                &format!(
                    "UPDATE tasks SET epoch = nextval('lease_epochs'), lease_owner = $1,
                         lease_expires = now() + $2::float8 * interval '1 millisecond',
                         offered_by = NULL
                     WHERE id = $3 AND state = ANY($4::integer[])
                       AND (lease_owner IS NULL OR lease_expires < now()
                            OR (starts_with(lease_owner, $5) AND lease_owner <> $1))
                     RETURNING {COLUMNS}, epoch"
                ),
                &[
                    &self.owner,
                    &self.lease_ms(),
                    &id.as_str(),
                    &unfinished.as_slice(),
                    &format!("{}#", self.replica.id),
                ],
            )
            .await
            .map_err(|e| db_error(&format!("claim task {id}"), e))?;
        Ok(self.hold(&rows)?.pop())
    }

    async fn release(&self, id: &TaskId) -> Result<(), StoreError> {
        self.let_go(id, None).await
    }

    async fn offer(&self, id: &TaskId) -> Result<(), StoreError> {
        self.let_go(id, Some(&self.token)).await
    }

    async fn heartbeat(&self) -> Result<Heartbeat, StoreError> {
        let before: HashMap<String, i64> = self.held().clone();
        let ids: Vec<&String> = before.keys().collect();
        let rows = self
            .client()
            .await?
            .cached_query(
                "UPDATE tasks SET lease_expires = now() + $2::float8 * interval '1 millisecond'
                 WHERE lease_owner = $1 AND id = ANY($3::text[])
                 RETURNING id, epoch, cancel_requested",
                &[&self.owner, &self.lease_ms(), &ids],
            )
            .await
            .map_err(|e| db_error("renew this replica's leases", e))?;
        let mut kept: HashMap<String, i64> = HashMap::with_capacity(rows.len());
        let mut cancel = Vec::new();
        for row in &rows {
            let id: String = row.get(0);
            if row.get::<_, bool>(2) {
                cancel.push(TaskId::from(id.as_str()));
            }
            kept.insert(id, row.get(1));
        }
        // Lost: held before and still (a write that ended a lease meanwhile is no loss), and
        // not renewed under the same epoch. The lost epoch stays held until the caller has
        // stopped what runs the task and releases it: a write of the old run in between is
        // still refused (without an epoch it would pass as that of a replica that does not
        // think it holds the task).
        let lost = {
            let held = self.held();
            before
                .iter()
                .filter(|(id, epoch)| {
                    kept.get(*id) != Some(*epoch) && held.get(*id) == Some(*epoch)
                })
                .map(|(id, _)| TaskId::from(id.as_str()))
                .collect()
        };
        let others = self.beat(kept.len()).await?;
        Ok(Heartbeat {
            lost,
            cancel,
            others,
        })
    }

    async fn follow(&self, id: &TaskId) -> Result<(), StoreError> {
        self.client()
            .await?
            .cached_execute(
                "UPDATE tasks SET followed = true WHERE id = $1 AND NOT followed",
                &[&id.as_str()],
            )
            .await
            .map(drop)
            .map_err(|e| db_error("follow a task", e))
    }

    async fn request_cancel(&self, id: &TaskId) -> Result<(), StoreError> {
        self.client()
            .await?
            .cached_query(
                "WITH asked AS (
                     UPDATE tasks SET cancel_requested = true
                     WHERE id = $1 AND lease_owner IS NOT NULL
                     RETURNING id)
                 SELECT pg_notify('mew_cancel', id) FROM asked",
                &[&id.as_str()],
            )
            .await
            .map(drop)
            .map_err(|e| db_error(&format!("ask to cancel task {id}"), e))
    }

    fn changes(&self) -> Option<broadcast::Receiver<Change>> {
        Some(self.changes.subscribe())
    }

    async fn leases_held(&self) -> Result<Option<u64>, StoreError> {
        // What this process holds, as its writes and heartbeats keep it: no query.
        Ok(Some(u64::try_from(self.held().len()).unwrap_or(u64::MAX)))
    }

    async fn replicas(&self) -> Result<Vec<ReplicaStatus>, StoreError> {
        let rows = self
            .client()
            .await?
            .cached_query(
                "SELECT id, address, started,
                     (extract(epoch FROM heartbeat) * 1000)::bigint, running,
                     heartbeat > now() - 2 * $1::float8 * interval '1 millisecond'
                 FROM replicas ORDER BY id",
                &[&self.lease_ms()],
            )
            .await
            .map_err(|e| db_error("read the replicas", e))?;
        let millis = |ms: i64| Timestamp::from_unix_nanos(i128::from(ms) * 1_000_000);
        Ok(rows
            .iter()
            .map(|row| ReplicaStatus {
                id: row.get(0),
                address: row.get(1),
                started: millis(row.get(2)),
                heartbeat: millis(row.get(3)),
                running: u32::try_from(row.get::<_, i32>(4)).unwrap_or(0),
                alive: row.get(5),
            })
            .collect())
    }
}

/// Listens for the replicas' wake-ups on a connection of its own, and turns them into
/// [`Change`]s until `stop`; when the connection is lost it says so (`Change::Missed`) and
/// connects again.
async fn listen(
    config: Config,
    tls: MakeRustlsConnect,
    changes: broadcast::Sender<Change>,
    stop: CancellationToken,
) {
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                // Polling the connection for its messages also drives the client's queries.
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = futures_util::StreamExt::next(&mut messages).await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "the task store's listening connection failed");
                                break;
                            }
                        }
                    }
                });
                let listening = tokio::select! {
                    listening = client.batch_execute(
                        "LISTEN mew_events; LISTEN mew_cancel; LISTEN mew_work; LISTEN mew_push",
                    ) => listening,
                    () = stop.cancelled() => return,
                };
                match listening {
                    Ok(()) => {
                        // What changed while nobody listened is read again.
                        let _ = changes.send(Change::Missed);
                        loop {
                            let notification = tokio::select! {
                                n = rx.recv() => n,
                                () = stop.cancelled() => return,
                            };
                            let Some(n) = notification else { break };
                            let id = TaskId::from(n.payload());
                            let change = match n.channel() {
                                "mew_events" => Change::Event(id),
                                "mew_cancel" => Change::Cancel(id),
                                "mew_push" => Change::PushConfigs(id),
                                _ => Change::Work,
                            };
                            let _ = changes.send(change);
                        }
                    }
                    Err(e) => tracing::warn!(error = %full(&e), "cannot listen to the task store"),
                }
                driver.abort();
                drop(client);
            }
            Err(e) => {
                tracing::warn!(error = %full(&e), "cannot connect to the task store to listen")
            }
        }
        let _ = changes.send(Change::Missed);
        tokio::select! {
            () = tokio::time::sleep(LISTEN_RETRY) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::store_tests::{T0, at, ids, postgres_database, replica, stored};

    fn error_text<T>(result: Result<T, StoreError>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn replicas_starting_at_once_migrate_once_and_share_the_database() {
        let url = postgres_database().await;
        let (a, b) = tokio::join!(
            PostgresStore::open(&url, None, replica("a")),
            PostgresStore::open(&url, None, replica("b"))
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let task = stored("t1", "c1", "r", TaskState::Working, T0);
        a.put(&task).await.unwrap();
        assert_eq!(b.get(&"t1".into()).await.unwrap(), Some(task));
        let ids = async || -> Vec<String> {
            let replicas = b.replicas().await.unwrap();
            replicas.into_iter().map(|r| r.id).collect()
        };
        assert_eq!(ids().await, ["a", "b"]);
        Arc::new(a).close().await.unwrap();
        assert_eq!(ids().await, ["b"], "a replica that stops leaves the list");
        let version: i32 = b
            .client()
            .await
            .unwrap()
            .query_one("SELECT version FROM mew_schema", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, i32::try_from(MIGRATIONS.len()).unwrap());
    }

    #[tokio::test]
    async fn a_version_7_database_gets_the_counts_of_its_tasks_and_deletes_keep_them() {
        use crate::tasks::store_tests::{check_totals, population};
        let url = postgres_database().await;
        let mut tasks = population(300);
        {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            for sql in &MIGRATIONS[..7] {
                client.batch_execute(sql).await.unwrap();
            }
            client
                .batch_execute(
                    "CREATE TABLE mew_schema (version integer NOT NULL);
                     INSERT INTO mew_schema VALUES (7);",
                )
                .await
                .unwrap();
            for task in &tasks {
                let row = Row::encode(task).unwrap();
                client
                    .execute(
                        "INSERT INTO tasks (id, context_id, role, owner, parent, state, \
                         status_time, created, task, private) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                        &[
                            &row.id,
                            &row.context_id,
                            &row.role,
                            &row.owner,
                            &row.parent,
                            &row.state,
                            &row.status_time,
                            &row.created,
                            &row.task,
                            &row.private,
                        ],
                    )
                    .await
                    .unwrap();
            }
        }
        let store = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        check_totals(&store, &tasks).await;
        // No store call deletes a task; a delete in SQL still leaves the counts right.
        store
            .client()
            .await
            .unwrap()
            .execute("DELETE FROM tasks WHERE id LIKE '%3'", &[])
            .await
            .unwrap();
        tasks.retain(|task| !task.task.id.as_str().ends_with('3'));
        check_totals(&store, &tasks).await;
    }

    #[tokio::test]
    async fn concurrent_writes_on_two_replicas_keep_the_counts_exact() {
        use crate::tasks::store_tests::{check_totals, population};
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let b = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        let mut tasks = population(400);
        let both = [TaskState::Working, TaskState::InputRequired];
        for (i, task) in tasks.iter_mut().enumerate() {
            task.task.status.state = both[i % 2];
        }
        let by = |i: usize| if i % 4 < 2 { &a } else { &b };
        let write_all = async |tasks: &[StoredTask]| {
            let writes = tasks.iter().enumerate().map(|(i, task)| by(i).put(task));
            for written in futures_util::future::join_all(writes).await {
                written.unwrap();
            }
        };
        write_all(&tasks).await;
        // All at once, half the tasks go from WORKING to INPUT_REQUIRED and half back: writes
        // that take the same two count rows, in both directions.
        for _ in 0..3 {
            for task in &mut tasks {
                let state = task.task.status.state;
                task.task.status.state = if state == both[0] { both[1] } else { both[0] };
            }
            write_all(&tasks).await;
            check_totals(&a, &tasks).await;
        }
    }

    /// Makes every lease of the database lapse, as if its holder stopped beating.
    async fn lapse(store: &PostgresStore) {
        store
            .client()
            .await
            .unwrap()
            .execute(
                "UPDATE tasks SET lease_expires = now() - interval '1 second' \
                 WHERE lease_owner IS NOT NULL",
                &[],
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_push_another_replica_holds_says_when_to_look_again_and_is_taken_once_it_lapses() {
        use crate::tasks::store_tests::{event, for_config, hook};
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let b = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        let task = stored("p1", "c", "r", TaskState::Working, T0);
        a.create(
            &task,
            &[],
            &[hook("p1", "h")],
            &[for_config(event("p1", 0), "h")],
        )
        .await
        .unwrap();
        let now = || i64::try_from(Timestamp::now().unix_nanos() / 1_000_000).unwrap();
        let held = a.push_heads(10).await.unwrap();
        assert_eq!(held.len(), 1);
        assert!(held[0].next_at <= now(), "a claims a due head: {held:?}");
        // b sees the head a holds, not due before a's claim ends: b waits for it instead of
        // sleeping as if the outbox were empty (a may have died holding it).
        let waiting = b.push_heads(10).await.unwrap();
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert_eq!(waiting[0].seq, held[0].seq);
        assert!(
            waiting[0].next_at > now() + 20_000,
            "due at {} while a holds it",
            waiting[0].next_at
        );
        // Once the claim has lapsed, b takes the head.
        b.client()
            .await
            .unwrap()
            .execute(
                "UPDATE push_outbox SET locked_until = now() - interval '1 second'",
                &[],
            )
            .await
            .unwrap();
        let taken = b.push_heads(10).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert!(taken[0].next_at <= now(), "{taken:?}");
        // And now a waits for b.
        assert!(a.push_heads(10).await.unwrap()[0].next_at > now());
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_once_and_its_old_holder_is_fenced() {
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let b = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        let c = PostgresStore::open(&url, None, replica("c")).await.unwrap();
        let mut task = stored("t1", "c1", "r", TaskState::Working, T0);
        task.generation = 1;
        a.create(&task, &[], &[], &[]).await.unwrap();

        // Held and beating: nobody else gets it.
        assert!(b.take_over(10).await.unwrap().is_empty());
        assert_eq!(b.claim(&"t1".into()).await.unwrap(), None);
        let beat = a.heartbeat().await.unwrap();
        assert_eq!((beat.lost, beat.cancel, beat.others), (vec![], vec![], 2));

        lapse(&a).await;
        let before_a = a.held().clone();
        let (got_b, got_c) = tokio::join!(b.take_over(10), c.take_over(10));
        let (got_b, got_c) = (got_b.unwrap(), got_c.unwrap());
        assert_eq!(got_b.len() + got_c.len(), 1, "{got_b:?} {got_c:?}");
        let (winner, loser) = if got_b.is_empty() { (&c, &b) } else { (&b, &c) };
        assert_eq!(a.heartbeat().await.unwrap().lost, [TaskId::from("t1")]);
        assert_eq!(*a.held(), before_a, "the lost epoch is kept until released");

        // The old holder's write is refused, and its heartbeat says it lost the task.
        task.generation = 2;
        let refused = a.put_with_events(&task, &[], &[], &[]).await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        assert_eq!(a.get(&"t1".into()).await.unwrap().unwrap().generation, 1);
        assert!(matches!(a.put(&task).await, Err(StoreError::Fenced(_))));
        assert!(a.held().is_empty());
        assert!(loser.take_over(10).await.unwrap().is_empty());

        // The new holder writes; the end of the task lets go of the lease.
        winner.put_with_events(&task, &[], &[], &[]).await.unwrap();
        task.task.status.state = TaskState::Completed;
        task.generation = 3;
        winner.put_with_events(&task, &[], &[], &[]).await.unwrap();
        assert!(winner.held().is_empty());
        assert_eq!(
            winner.claim(&"t1".into()).await.unwrap(),
            None,
            "it is over"
        );
    }

    #[tokio::test]
    async fn a_task_waiting_for_input_is_claimed_by_one_replica_and_cancels_are_passed_on() {
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let b = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        let mut changes = a.changes().unwrap();
        let mut task = stored("t1", "c1", "r", TaskState::Working, T0);
        a.create(&task, &[], &[], &[]).await.unwrap();
        task.task.status.state = TaskState::InputRequired;
        task.generation = 2;
        let event = StreamResponse::Task(task.task.clone());
        a.put_with_events(&task, std::slice::from_ref(&event), &[], &[])
            .await
            .unwrap();
        assert!(a.held().is_empty(), "waiting for input, nobody holds it");

        let id = TaskId::from("t1");
        let (got_a, got_b) = tokio::join!(a.claim(&id), b.claim(&id));
        let (got_a, got_b) = (got_a.unwrap(), got_b.unwrap());
        assert!(got_a.is_some() != got_b.is_some(), "{got_a:?} {got_b:?}");
        let (holder, other) = if got_a.is_some() { (&a, &b) } else { (&b, &a) };
        // Followed from now on: the holder's next event wakes the replicas, the earlier did not.
        other.follow(&id).await.unwrap();
        task.task.status.state = TaskState::Working;
        task.generation = 3;
        let event = StreamResponse::Task(task.task.clone());
        holder
            .put_with_events(&task, std::slice::from_ref(&event), &[], &[])
            .await
            .unwrap();
        other.request_cancel(&"t1".into()).await.unwrap();
        assert_eq!(
            holder.heartbeat().await.unwrap().cancel,
            [TaskId::from("t1")]
        );
        // The wake-ups reach the listening replica: the followed event, and the cancel.
        let mut seen = Vec::new();
        while !seen.contains(&Change::Cancel("t1".into())) {
            match changes.recv().await.unwrap() {
                Change::Missed => {}
                change => seen.push(change),
            }
        }
        let events = seen.iter().filter(|c| **c == Change::Event(id.clone()));
        assert_eq!(events.count(), 1, "{seen:?}");
    }

    #[tokio::test]
    async fn an_offered_task_is_left_to_its_waiting_turn_here_and_taken_by_others() {
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let b = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        let id = TaskId::from("t1");
        let task = stored("t1", "c1", "r", TaskState::Submitted, T0);
        a.create(&task, &[], &[], &[]).await.unwrap();

        // Offered: this process's own take-over leaves it (its turn waits for it here)...
        a.offer(&id).await.unwrap();
        assert!(a.take_over(10).await.unwrap().is_empty());
        // ... and claims it back; offered again, another replica takes it.
        assert!(a.claim(&id).await.unwrap().is_some());
        a.offer(&id).await.unwrap();
        let taken = b.take_over(10).await.unwrap();
        assert_eq!(ids(&taken), ["t1"]);
        assert_eq!(a.claim(&id).await.unwrap(), None);

        // A later run of the offering replica takes what the last one offered.
        b.offer(&id).await.unwrap();
        let again = PostgresStore::open(&url, None, replica("b")).await.unwrap();
        assert_eq!(ids(&again.take_over(10).await.unwrap()), ["t1"]);
    }

    #[tokio::test]
    async fn a_process_never_takes_over_its_own_leases_only_its_last_runs() {
        let url = postgres_database().await;
        let a = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let task = stored("t1", "c1", "r", TaskState::Working, T0);
        a.create(&task, &[], &[], &[]).await.unwrap();
        // As while a lease is being taken: written, not yet among those it holds.
        let held = std::mem::take(&mut *a.held());
        assert!(a.take_over(10).await.unwrap().is_empty());
        assert_eq!(a.claim(&"t1".into()).await.unwrap(), None);
        a.held().extend(held);
        // The replica's next run takes what this one left at once.
        let next = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        assert_eq!(ids(&next.take_over(10).await.unwrap()), ["t1"]);
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused() {
        let url = postgres_database().await;
        let store = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        store
            .client()
            .await
            .unwrap()
            .execute("UPDATE mew_schema SET version = 99", &[])
            .await
            .unwrap();
        drop(store);
        let text = error_text(PostgresStore::open(&url, None, replica("a")).await);
        assert!(
            text.contains("schema version 99, written by a newer Mew"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_urls_and_unreachable_servers_are_named_without_the_password() {
        let text =
            error_text(PostgresStore::open("postgres://db:port/tasks", None, replica("a")).await);
        assert!(text.contains("not a PostgreSQL URL"), "{text}");

        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("postgres://mew:hunter2@127.0.0.1:{port}/tasks");
        let text = error_text(PostgresStore::open(&url, None, replica("a")).await);
        assert!(
            text.contains(&format!("postgres://127.0.0.1:{port}/tasks")),
            "{text}"
        );
        assert!(text.contains("refused"), "the cause is given: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[tokio::test]
    async fn every_listing_reads_ranges_of_an_index() {
        let url = postgres_database().await;
        let store = PostgresStore::open(&url, None, replica("a")).await.unwrap();
        let client = store.client().await.unwrap();
        // 20 000 tasks (ANALYZE reads them all: the statistics are the same every run) of 5
        // owners, 3 roles and 6 states, 4 a context.
        client
            .batch_execute(
                "INSERT INTO tasks
                     (id, context_id, role, owner, state, status_time, created, task, private)
                 SELECT 'task-' || g, 'ctx-' || (g / 4), 'r' || (g % 3), 'o' || (g % 5),
                     (ARRAY[3, 3, 3, 3, 3, 3, 3, 4, 5, 6, 2, 1])[1 + g % 12],
                     1700000000000000000 + g * 1000, 1700000000000000000 + g * 1000, '{}', 'null'
                 FROM generate_series(1, 20000) AS g;
                 ANALYZE tasks, task_counts;",
            )
            .await
            .unwrap();
        let explain = async |(sql, args): (String, Args)| -> String {
            let rows = client
                .query(&format!("EXPLAIN (COSTS OFF) {sql}"), &refs(&args))
                .await
                .unwrap();
            let lines: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
            lines.join("\n")
        };
        for bits in 0..64u32 {
            let on = |bit: u32| bits & (1 << bit) != 0;
            let q = TaskQuery {
                owner: on(0).then(|| "o1".to_owned()),
                role: on(1).then(|| "r1".to_owned()),
                state: on(2).then_some(TaskState::Working),
                context_id: on(3).then(|| "ctx-77".into()),
                status_after: on(4).then(|| at(T0 + 19_000_000)),
                after: on(5).then(|| Cursor {
                    status_time: at(T0 + 19_500_000),
                    id: "task-19500".into(),
                }),
                limit: 50,
                ..TaskQuery::default()
            };
            let listing = Listing { query: &q };
            if let Some(context) = &q.context_id {
                // A context holds few tasks: found through its index, then sorted.
                let (count, page) = listing.context(context);
                for plan in [explain(count).await, explain(page).await] {
                    assert!(
                        plan.contains("Index Scan on tasks_by_context")
                            && !plan.contains("Seq Scan"),
                        "{q:?}\n{plan}"
                    );
                }
                continue;
            }
            let index = match (&q.owner, &q.role) {
                (Some(_), Some(_)) => "tasks_by_owner_role",
                (Some(_), None) => "tasks_by_owner",
                (None, Some(_)) => "tasks_by_role",
                (None, None) => "tasks_by_state",
            };
            // Each state a range of the scope's index, up to the page's size: read in the
            // index's order, or (a short time range) read whole and sorted.
            for states in [&[2][..], &[1, 2, 3, 4, 5, 6]] {
                let plan = explain(listing.page(states)).await;
                let range = [
                    format!("Scan using {index} on tasks t\n"),
                    format!("Bitmap Index Scan on {index}\n"),
                ];
                assert!(
                    range.iter().any(|range| plan.contains(range))
                        && plan.contains("(state = states.state)")
                        && !plan.contains("Seq Scan"),
                    "{q:?}\n{plan}"
                );
            }
            // The counts: rows of task_counts (here a few: read whole).
            let counts = explain(listing.counts()).await;
            assert!(counts.contains(" on task_counts"), "{q:?}\n{counts}");
            // A short time range is counted in the scope's index.
            if q.status_after.is_some() {
                let plan = explain(listing.timed_count(&[1, 2, 3, 4, 5, 6])).await;
                assert!(
                    plan.contains(&format!(" on {index}")) && !plan.contains("Seq Scan"),
                    "{q:?}\n{plan}"
                );
            }
        }
    }
}
