//! `PostgresStore`: the `TaskStore` on a PostgreSQL server, chosen with `store.url`.
//!
//! The same tables and the same encoding as the SQLite store (`rows.rs`), in a pool of
//! connections. Every write that touches several rows is one transaction; a new task takes a
//! transaction-scoped advisory lock on its context first, so two principals naming one new
//! context at once cannot both get it.
//!
//! Migrations are versioned (`mew_schema`) and applied in one transaction under an advisory
//! lock, so several nodes starting at once against one database migrate it once. A node
//! holds a session advisory lock on the database for as long as it runs: a second node on
//! the same database is refused at start, as a second node on one data directory is (a task
//! still WORKING at start is failed, which is right only when no other node can be running
//! it).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use mew_cards::{
    ContextId, StreamResponse, TaskId, TaskPushNotificationConfig, TaskState, Timestamp,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row as PgRow};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::rows::{ConfigRow, Row, assemble, bound_nanos, decode_config, decode_event};
use super::store::{
    Cursor, OutboxRow, PendingPush, StoreError, StoredTask, TaskPage, TaskQuery, TaskStore,
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
];

/// The advisory lock key migrations run under ("mew" + "migr" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d65_775f_6d69_6772;

/// The advisory lock key a running node holds ("mew" + "node").
const NODE_LOCK: i64 = 0x6d65_775f_6e6f_6465;

/// Connections kept in the pool.
const POOL_SIZE: usize = 16;

/// How long a caller waits for a connection, and a connection for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The columns `decode` reads, in its order.
const COLUMNS: &str =
    "id, role, owner, parent, created, status_time, task, private, attempts, generation";

/// The durable task store on a PostgreSQL server.
pub(crate) struct PostgresStore {
    pool: Pool,
    /// Where it is, without the password.
    location: String,
    /// The connection that holds the node's lock on the database; dropping it lets go.
    _lock: Client,
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
    /// with `password` if the URL has none, brings its schema up to date and takes the node's
    /// lock on it.
    ///
    /// Fails with a clear error when the server cannot be reached, refuses the credentials,
    /// holds a schema of a newer Mew, or is in use by another node.
    pub(crate) async fn open(url: &str, password: Option<&str>) -> Result<Self, StoreError> {
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
        let fail = |what: &str, e: tokio_postgres::Error| {
            StoreError::Backend(format!(
                "cannot {what} the task store {location}: {}",
                full(&e)
            ))
        };

        let (mut lock, connection) = config
            .connect(tls.clone())
            .await
            .map_err(|e| fail("connect to", e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the task store's lock connection ended");
            }
        });
        migrate(&mut lock, &location).await?;
        let locked: bool = lock
            .query_one("SELECT pg_try_advisory_lock($1)", &[&NODE_LOCK])
            .await
            .map_err(|e| fail("lock", e))?
            .get(0);
        if !locked {
            return Err(StoreError::Backend(format!(
                "the task store {location} is in use by another Mew node: one node per \
                 database (stop the other node, or give this one its own database)"
            )));
        }

        let manager = Manager::from_config(
            config,
            tls,
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
        Ok(Self {
            pool,
            location,
            _lock: lock,
        })
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

/// The upsert of a task row (`$1`..`$12`: the columns of [`Row`]).
const UPSERT: &str = "INSERT INTO tasks
         (id, context_id, role, owner, parent, state, status_time, created, task, private,
          attempts, generation)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (id) DO UPDATE SET
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
         generation = excluded.generation";

/// Writes a task row and, when it has one, logs its event: one statement either way, so a
/// write is one round trip and atomic without a transaction of its own.
async fn put(client: &impl GenericClient, row: &Row) -> Result<(), StoreError> {
    let columns: [&(dyn ToSql + Sync); 12] = [
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
    ];
    let written = match &row.event {
        None => client.execute(UPSERT, &columns).await,
        Some(event) => {
            let sql = format!(
                "WITH written AS ({UPSERT} RETURNING id)
                 INSERT INTO task_events (task_id, generation, event)
                 SELECT id, $12, $13 FROM written"
            );
            let mut params = columns.to_vec();
            params.push(event);
            client.execute(&sql, &params).await
        }
    };
    written.map_err(|e| {
        db_error(
            &format!("store task {} (event {})", row.id, row.generation),
            e,
        )
    })?;
    Ok(())
}

async fn put_with_events(
    tx: &impl GenericClient,
    row: &Row,
    configs: &[ConfigRow],
    outbox: &[OutboxRow],
) -> Result<(), StoreError> {
    put(tx, row).await?;
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
        .execute(
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

async fn enqueue(client: &impl GenericClient, row: &OutboxRow) -> Result<(), StoreError> {
    client
        .execute(
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

/// Whether `context_id` holds a task whose owner is not `owner`.
async fn foreign_owner(
    client: &impl GenericClient,
    context_id: &str,
    owner: Option<&str>,
) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM tasks \
             WHERE context_id = $1 AND owner IS DISTINCT FROM $2)",
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

/// The filters of a `list` query, as SQL numbered from `$1`, and their arguments.
fn filters(query: &TaskQuery) -> (Vec<String>, Args) {
    let mut filters = Vec::new();
    let mut args: Args = Vec::new();
    let mut add = |column: &str, op: &str, arg: Box<dyn ToSql + Sync + Send>| {
        args.push(arg);
        filters.push(format!("{column} {op} ${}", args.len()));
    };
    if let Some(role) = &query.role {
        add("role", "=", Box::new(role.clone()));
    }
    if let Some(owner) = &query.owner {
        add("owner", "=", Box::new(owner.clone()));
    }
    if let Some(context_id) = &query.context_id {
        add("context_id", "=", Box::new(context_id.as_str().to_owned()));
    }
    if let Some(state) = query.state {
        add("state", "=", Box::new(state.number()));
    }
    if let Some(after) = query.status_after {
        add("status_time", ">=", Box::new(bound_nanos(after)));
    }
    (filters, args)
}

/// A `list` query as SQL, as the SQLite store builds it: the count, then the page (the
/// filters, the cursor, one row more than the page to tell whether another follows).
fn listing(query: &TaskQuery) -> (String, Args, String, Args) {
    let (mut page_filters, count_args) = filters(query);
    let count_sql = format!("SELECT count(*) FROM tasks{}", where_clause(&page_filters));
    let (_, mut page_args) = filters(query);
    if let Some(cursor) = &query.after {
        page_args.push(Box::new(bound_nanos(cursor.status_time)));
        page_args.push(Box::new(cursor.id.as_str().to_owned()));
        page_filters.push(format!(
            "(status_time, id) < (${}, ${})",
            page_args.len() - 1,
            page_args.len()
        ));
    }
    page_args.push(Box::new(
        i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX),
    ));
    let page_sql = format!(
        "SELECT {COLUMNS} FROM tasks{} ORDER BY status_time DESC, id DESC LIMIT ${}",
        where_clause(&page_filters),
        page_args.len()
    );
    (count_sql, count_args, page_sql, page_args)
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
        // Every write is committed when it returns; closing the pool and the lock connection
        // (on drop) is all that is left.
        self.pool.close();
        Ok(())
    }

    async fn put(&self, task: &StoredTask) -> Result<(), StoreError> {
        let row = Row::encode(task)?;
        put(&self.client().await?, &row).await
    }

    async fn create(
        &self,
        task: &StoredTask,
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        let row = Row::with_snapshot(task)?;
        let configs: Vec<ConfigRow> = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        self.in_transaction("store a new task", async |tx| {
            let fail = |e| db_error(&format!("check the context of task {}", row.id), e);
            // One new task of a context at a time: the check below and the insert are atomic.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                &[&row.context_id],
            )
            .await
            .map_err(fail)?;
            if foreign_owner(tx, &row.context_id, row.owner.as_deref())
                .await
                .map_err(fail)?
            {
                return Err(StoreError::ForeignContext(ContextId::from(
                    row.context_id.as_str(),
                )));
            }
            put_with_events(tx, &row, &configs, outbox).await
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
        event: Option<&StreamResponse>,
        configs: &[TaskPushNotificationConfig],
        outbox: &[OutboxRow],
    ) -> Result<(), StoreError> {
        let row = Row::with_event(task, event)?;
        let configs: Vec<ConfigRow> = configs
            .iter()
            .map(ConfigRow::encode)
            .collect::<Result<_, _>>()?;
        if configs.is_empty() && outbox.is_empty() {
            // One statement: atomic as it is.
            return put(&self.client().await?, &row).await;
        }
        self.in_transaction("store a task", async |tx| {
            put_with_events(tx, &row, &configs, outbox).await
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
            .query(
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
        put_config(&self.client().await?, &row).await
    }

    async fn delete_push_config(&self, task: &TaskId, id: &str) -> Result<(), StoreError> {
        let task_id = task.as_str();
        self.in_transaction("delete a push config", async |tx| {
            let fail = |e| db_error(&format!("delete push config {id} of task {task_id}"), e);
            tx.execute(
                "DELETE FROM push_configs WHERE task_id = $1 AND id = $2",
                &[&task_id, &id],
            )
            .await
            .map_err(fail)?;
            tx.execute(
                "DELETE FROM push_outbox WHERE task_id = $1 AND config_id = $2",
                &[&task_id, &id],
            )
            .await
            .map_err(fail)?;
            Ok(())
        })
        .await
    }

    async fn push_heads(&self, limit: usize) -> Result<Vec<PendingPush>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .await?
            .query(
                "SELECT o.seq, o.task_id, o.config_id, o.body, o.attempts, o.next_at, c.config
                 FROM push_outbox o
                 LEFT JOIN push_configs c ON c.task_id = o.task_id AND c.id = o.config_id
                 WHERE o.seq IN (SELECT min(seq) FROM push_outbox GROUP BY task_id, config_id)
                 ORDER BY o.seq LIMIT $1",
                &[&limit],
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
            .execute("DELETE FROM push_outbox WHERE seq = $1", &[&seq])
            .await
            .map(drop)
            .map_err(|e| db_error("remove a push notification", e))
    }

    async fn push_retry(&self, seq: i64, next_at: i64, error: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE push_outbox SET attempts = attempts + 1, next_at = $2, last_error = $3 \
                 WHERE seq = $1",
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
            .query_opt(
                &format!("SELECT {COLUMNS} FROM tasks WHERE id = $1"),
                &[&id.as_str()],
            )
            .await
            .map_err(|e| db_error("read a task", e))?;
        row.as_ref().map(decode).transpose()
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let (count_sql, count_args, page_sql, page_args) = listing(query);
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
        let total: i64 = tx
            .query_one(&count_sql, &refs(&count_args))
            .await
            .map_err(fail)?
            .get(0);
        let rows = tx.query(&page_sql, &refs(&page_args)).await.map_err(fail)?;
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
            .query(
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
            .query(
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

    async fn unfinished(&self) -> Result<Vec<StoredTask>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM tasks WHERE state IN ($1, $2) ORDER BY created, id"
                ),
                &[&TaskState::Submitted.number(), &TaskState::Working.number()],
            )
            .await
            .map_err(|e| db_error("read the unfinished tasks", e))?;
        rows.iter().map(decode).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::store_tests::{T0, postgres_database, stored};

    fn error_text<T>(result: Result<T, StoreError>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn nodes_starting_at_once_migrate_once_and_only_one_holds_the_database() {
        let url = postgres_database().await;
        let (a, b) = tokio::join!(
            PostgresStore::open(&url, None),
            PostgresStore::open(&url, None)
        );
        let (winner, refused) = match (a, b) {
            (Ok(store), Err(e)) | (Err(e), Ok(store)) => (store, e.to_string()),
            (Ok(_), Ok(_)) => panic!("both nodes got the database"),
            (Err(a), Err(b)) => panic!("neither node got the database: {a}; {b}"),
        };
        assert!(refused.contains("in use by another Mew node"), "{refused}");
        assert!(
            !refused.contains("migrate"),
            "the migration ran once: {refused}"
        );
        let task = stored("t1", "c1", "r", TaskState::Working, T0);
        winner.put(&task).await.unwrap();
        Arc::new(winner).close().await.unwrap();

        // The lock goes with the node; what it stored stays, and the schema is not applied
        // again.
        let next = PostgresStore::open(&url, None).await.unwrap();
        assert_eq!(next.get(&"t1".into()).await.unwrap(), Some(task));
        let version: i32 = next
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
    async fn a_newer_schema_is_refused() {
        let url = postgres_database().await;
        let store = PostgresStore::open(&url, None).await.unwrap();
        store
            .client()
            .await
            .unwrap()
            .execute("UPDATE mew_schema SET version = 99", &[])
            .await
            .unwrap();
        drop(store);
        let text = error_text(PostgresStore::open(&url, None).await);
        assert!(
            text.contains("schema version 99, written by a newer Mew"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_urls_and_unreachable_servers_are_named_without_the_password() {
        let text = error_text(PostgresStore::open("postgres://db:port/tasks", None).await);
        assert!(text.contains("not a PostgreSQL URL"), "{text}");

        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("postgres://mew:hunter2@127.0.0.1:{port}/tasks");
        let text = error_text(PostgresStore::open(&url, None).await);
        assert!(
            text.contains(&format!("postgres://127.0.0.1:{port}/tasks")),
            "{text}"
        );
        assert!(text.contains("refused"), "the cause is given: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
