//! The behaviour every `TaskStore` shares, run on each implementation: SQLite in a temporary
//! directory, and PostgreSQL in a fresh database of the server `MEW_TEST_POSTGRES_URL` names
//! (`scripts/test` starts a throwaway one). The helpers are shared with each store's own tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mew_cards::{
    Artifact, Message, Part, PartContent, StreamResponse, Task, TaskPushNotificationConfig,
    TaskState, TaskStatus, Timestamp,
};
use serde_json::{Value, json};

use super::store::{Cursor, OutboxRow, PendingPush, StoreError, StoredTask, TaskQuery, TaskStore};

/// Every contract test, once per store.
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    let dir = tempfile::TempDir::new().unwrap();
                    let store = super::super::sqlite::SqliteStore::open(&dir.path().join("tasks.db"))
                        .unwrap();
                    super::$test(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let store = super::postgres_store().await;
                    super::$test(store).await;
                }
            )*
        }
    };
}

on_every_store!(
    put_replaces_the_task_with_the_same_id,
    list_pages_through_equal_times_by_id,
    list_orders_by_status_time_then_id_across_pages,
    list_filters_and_counts,
    list_leaves_the_private_state_out,
    list_pages_correctly_at_any_size,
    list_totals_stay_exact_through_creates_and_changes,
    context_lists_a_context_oldest_first,
    context_reads_only_the_owners_tasks,
    a_new_task_in_another_owners_context_is_refused_and_not_written,
    principals_racing_for_one_new_context_get_it_once,
    configs_without_ids_are_refused_before_the_writer,
    unfinished_tasks_are_the_submitted_and_working_ones_oldest_first,
    attempts_are_kept,
    events_are_logged_with_their_snapshot_and_read_back_in_order,
    an_event_number_is_logged_once,
    several_events_are_logged_in_one_write_under_consecutive_numbers,
    a_task_created_with_its_events_logs_them_from_number_one,
    tasks_that_cannot_be_stored_are_refused_before_the_writer,
    the_push_outbox_depth_is_counted_up_to_its_limit,
);

/// The URL of the test server, whose user may create databases.
pub(crate) fn postgres_server() -> String {
    std::env::var("MEW_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "MEW_TEST_POSTGRES_URL is not set: run the suite with scripts/test, which starts a \
             throwaway PostgreSQL, or point it at a server whose user may create databases"
        )
    })
}

/// A new, empty database on the test server; its URL.
pub(crate) async fn postgres_database() -> String {
    let server = postgres_server();
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {server}: {e}"));
    tokio::spawn(connection);
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// A PostgreSQL store on a new database.
pub(crate) async fn postgres_store() -> Arc<dyn TaskStore> {
    let url = postgres_database().await;
    Arc::new(
        super::postgres::PostgresStore::open(&url, None, replica("r1"))
            .await
            .unwrap(),
    )
}

/// A replica named `id`, with a lease of a minute.
pub(crate) fn replica(id: &str) -> super::store::Replica {
    super::store::Replica {
        id: id.to_owned(),
        address: format!("http://{id}.test"),
        lease: std::time::Duration::from_secs(60),
    }
}

/// 2023-11-14T22:13:20Z, safely in the past.
pub(crate) const T0: i128 = 1_700_000_000_000_000_000;

pub(crate) fn at(nanos: i128) -> Timestamp {
    Timestamp::from_unix_nanos(nanos)
}

pub(crate) fn stored(
    id: &str,
    context: &str,
    role: &str,
    state: TaskState,
    time: i128,
) -> StoredTask {
    StoredTask {
        task: Task {
            id: id.into(),
            context_id: context.into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: Some(at(time)),
            },
            ..Task::default()
        },
        role: role.to_owned(),
        owner: None,
        parent: None,
        created: at(time),
        private: Value::Null,
        attempts: 0,
        generation: 0,
    }
}

pub(crate) fn owned(mut task: StoredTask, owner: &str) -> StoredTask {
    task.owner = Some(owner.to_owned());
    task
}

pub(crate) fn ids(tasks: &[StoredTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.task.id.as_str()).collect()
}

pub(crate) fn query(limit: usize) -> TaskQuery {
    TaskQuery {
        limit,
        ..TaskQuery::default()
    }
}

pub(crate) fn error_text(result: Result<impl std::fmt::Debug, StoreError>) -> String {
    result.unwrap_err().to_string()
}

/// Follows `next` from the first page to the last; returns every page's ids.
pub(crate) async fn all_pages(store: &dyn TaskStore, mut q: TaskQuery) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    loop {
        let page = store.list(&q).await.unwrap();
        pages.push(ids(&page.tasks).into_iter().map(str::to_owned).collect());
        match page.next {
            Some(next) => q.after = Some(next),
            None => return pages,
        }
    }
}

pub(crate) fn rich_task() -> StoredTask {
    let mut question = Message::user_text("summarise this");
    question.context_id = Some("ctx-1".into());
    question.task_id = Some("task-1".into());
    question
        .parts
        .push(Part::new(PartContent::Raw(vec![0, 1, 2, 254, 255])));
    question.parts.push(Part::data(json!({"rows": [1, 2, 3]})));
    let mut answer = Message::agent_text("which part?");
    answer.context_id = Some("ctx-1".into());
    answer.task_id = Some("task-1".into());
    let mut artifact = Artifact::new("summary", vec![Part::text("short")]);
    artifact.metadata = json!({"score": 0.5}).as_object().cloned();
    StoredTask {
        task: Task {
            id: "task-1".into(),
            context_id: "ctx-1".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(answer.clone()),
                timestamp: Some(at(T0 + 5_123)),
            },
            artifacts: vec![artifact],
            history: vec![question, answer],
            metadata: json!({"origin": "test"}).as_object().cloned(),
        },
        role: "summariser".to_owned(),
        owner: Some("alice".to_owned()),
        parent: Some("task-0".into()),
        created: at(T0),
        private: json!({"conversation": [{"role": "user", "text": "summarise this"}], "usage": {"tokens": 12}}),
        attempts: 1,
        generation: 0,
    }
}

pub(crate) fn hook(task: &str, id: &str) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        id: id.to_owned(),
        task_id: task.into(),
        url: format!("https://hooks.example/{id}"),
        token: "secret".to_owned(),
        ..TaskPushNotificationConfig::default()
    }
}

pub(crate) fn event(task: &str, n: usize) -> OutboxRow {
    OutboxRow {
        task_id: task.into(),
        config_id: String::new(),
        body: format!("{{\"n\": {n}}}"),
    }
}

pub(crate) fn for_config(row: OutboxRow, config: &str) -> OutboxRow {
    OutboxRow {
        config_id: config.to_owned(),
        ..row
    }
}

/// (task, config, body) of each head.
pub(crate) fn heads(heads: &[PendingPush]) -> Vec<(String, String, String)> {
    heads
        .iter()
        .map(|h| (h.task_id.to_string(), h.config_id.clone(), h.body.clone()))
        .collect()
}

pub(crate) fn head(task: &str, config: &str, n: usize) -> (String, String, String) {
    (
        task.to_owned(),
        config.to_owned(),
        format!("{{\"n\": {n}}}"),
    )
}

async fn put_replaces_the_task_with_the_same_id(store: Arc<dyn TaskStore>) {
    store.put(&rich_task()).await.unwrap();

    let mut replaced = rich_task();
    replaced.task.status = TaskStatus {
        state: TaskState::Completed,
        message: Some(Message::agent_text("done")),
        timestamp: Some(at(T0 + 9_000)),
    };
    replaced.task.history.truncate(1);
    replaced.role = "writer".to_owned();
    replaced.owner = None;
    replaced.private = json!({"usage": {"tokens": 40}});
    store.put(&replaced).await.unwrap();

    assert_eq!(
        store.get(&"task-1".into()).await.unwrap(),
        Some(replaced.clone())
    );
    let all = store.list(&query(10)).await.unwrap();
    assert_eq!((ids(&all.tasks), all.total), (vec!["task-1"], 1));
    let old_role = TaskQuery {
        role: Some("summariser".to_owned()),
        ..query(10)
    };
    assert_eq!(store.list(&old_role).await.unwrap().total, 0);
    let old_owner = TaskQuery {
        owner: Some("alice".to_owned()),
        ..query(10)
    };
    assert_eq!(store.list(&old_owner).await.unwrap().total, 0);
    let completed = TaskQuery {
        state: Some(TaskState::Completed),
        ..query(10)
    };
    assert_eq!(store.list(&completed).await.unwrap().total, 1);
}

async fn list_pages_through_equal_times_by_id(store: Arc<dyn TaskStore>) {
    for i in 0..25 {
        let task = stored(&format!("task-{i:02}"), "c", "r", TaskState::Working, T0);
        store.put(&task).await.unwrap();
    }

    let first = store.list(&query(10)).await.unwrap();
    assert_eq!(
        ids(&first.tasks),
        [
            "task-24", "task-23", "task-22", "task-21", "task-20", "task-19", "task-18", "task-17",
            "task-16", "task-15"
        ]
    );
    assert_eq!(first.total, 25);
    assert_eq!(
        first.next,
        Some(Cursor {
            status_time: at(T0),
            id: "task-15".into()
        })
    );

    let second = store
        .list(&TaskQuery {
            after: first.next,
            ..query(10)
        })
        .await
        .unwrap();
    assert_eq!(ids(&second.tasks)[0], "task-14");
    assert_eq!(ids(&second.tasks)[9], "task-05");
    assert_eq!(second.total, 25);
    let third = store
        .list(&TaskQuery {
            after: second.next,
            ..query(10)
        })
        .await
        .unwrap();
    assert_eq!(
        ids(&third.tasks),
        ["task-04", "task-03", "task-02", "task-01", "task-00"]
    );
    assert_eq!((third.total, third.next), (25, None));

    // A page that ends exactly at the last task has no next page.
    let pages = all_pages(&*store, query(5)).await;
    assert_eq!(pages.len(), 5);
    assert_eq!(
        pages[4],
        ["task-04", "task-03", "task-02", "task-01", "task-00"]
    );
    let everything = store.list(&query(25)).await.unwrap();
    assert_eq!((everything.tasks.len(), everything.next), (25, None));
    let all_but_one = store.list(&query(24)).await.unwrap();
    assert_eq!(all_but_one.next.map(|c| c.id), Some("task-01".into()));
    let none = store.list(&query(0)).await.unwrap();
    assert_eq!((none.tasks.len(), none.total, none.next), (0, 25, None));
}

async fn list_orders_by_status_time_then_id_across_pages(store: Arc<dyn TaskStore>) {
    // Ids in a different order than times; tasks 20..25 share one time.
    for i in 0..25i128 {
        let id = format!("task-{:02}", (i * 7) % 25);
        let time = T0 + i.min(20) * 1_000;
        store
            .put(&stored(&id, "c", "r", TaskState::Completed, time))
            .await
            .unwrap();
    }
    let pages = all_pages(&*store, query(7)).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [7, 7, 7, 4]);
    let listed: Vec<String> = pages.concat();
    // i = 20..24 share the newest time: ids 15, 22, 04, 11, 18, descending by id.
    let mut expected: Vec<String> = [22, 18, 15, 11, 4]
        .iter()
        .map(|n| format!("task-{n:02}"))
        .collect();
    expected.extend((0..20).rev().map(|i| format!("task-{:02}", (i * 7) % 25)));
    assert_eq!(listed, expected);
}

async fn list_leaves_the_private_state_out(store: Arc<dyn TaskStore>) {
    let mut task = stored("a", "c1", "coder", TaskState::Working, T0 + 1);
    task.private = serde_json::json!({"session": {"messages": ["a long conversation"]}});
    store.put(&task).await.unwrap();
    for query in [
        query(10),
        TaskQuery {
            context_id: Some("c1".into()),
            ..query(10)
        },
        TaskQuery {
            state: Some(TaskState::Working),
            ..query(10)
        },
    ] {
        let page = store.list(&query).await.unwrap();
        assert_eq!(ids(&page.tasks), ["a"]);
        assert_eq!(page.tasks[0].private, Value::Null, "{query:?}");
        assert_eq!(page.tasks[0].task, task.task);
    }
    // Reading the task itself gives its private state.
    let read = store.get(&"a".into()).await.unwrap().unwrap();
    assert_eq!(read.private, task.private);
}

async fn list_filters_and_counts(store: Arc<dyn TaskStore>) {
    for task in [
        owned(
            stored("a", "c1", "coder", TaskState::Working, T0 + 1),
            "alice",
        ),
        owned(
            stored("b", "c2", "coder", TaskState::Completed, T0 + 2),
            "bob",
        ),
        owned(
            stored("c", "c1", "planner", TaskState::Completed, T0 + 3),
            "alice",
        ),
        stored("d", "c3", "planner", TaskState::Failed, T0 + 4),
        owned(
            stored("e", "c1", "coder", TaskState::Completed, T0 + 5),
            "alice",
        ),
    ] {
        store.put(&task).await.unwrap();
    }
    let cases = [
        (query(10), vec!["e", "d", "c", "b", "a"]),
        (
            TaskQuery {
                role: Some("coder".to_owned()),
                ..query(10)
            },
            vec!["e", "b", "a"],
        ),
        (
            TaskQuery {
                owner: Some("alice".to_owned()),
                ..query(10)
            },
            vec!["e", "c", "a"],
        ),
        (
            TaskQuery {
                context_id: Some("c1".into()),
                ..query(10)
            },
            vec!["e", "c", "a"],
        ),
        (
            TaskQuery {
                state: Some(TaskState::Completed),
                ..query(10)
            },
            vec!["e", "c", "b"],
        ),
        (
            TaskQuery {
                status_after: Some(at(T0 + 3)),
                ..query(10)
            },
            vec!["e", "d", "c"],
        ),
        (
            TaskQuery {
                role: Some("coder".to_owned()),
                owner: Some("alice".to_owned()),
                context_id: Some("c1".into()),
                state: Some(TaskState::Completed),
                status_after: Some(at(T0 + 2)),
                ..query(10)
            },
            vec!["e"],
        ),
        (
            TaskQuery {
                role: Some("nobody".to_owned()),
                ..query(10)
            },
            vec![],
        ),
    ];
    for (q, expected) in cases {
        let page = store.list(&q).await.unwrap();
        assert_eq!(ids(&page.tasks), expected, "{q:?}");
        assert_eq!(page.total, expected.len(), "{q:?}");
        assert_eq!(page.next, None, "{q:?}");
    }

    // The total ignores the cursor; the cursor composes with the filters.
    let coder = TaskQuery {
        role: Some("coder".to_owned()),
        ..query(1)
    };
    let first = store.list(&coder).await.unwrap();
    assert_eq!((ids(&first.tasks), first.total), (vec!["e"], 3));
    let second = store
        .list(&TaskQuery {
            after: first.next.clone(),
            ..coder.clone()
        })
        .await
        .unwrap();
    assert_eq!((ids(&second.tasks), second.total), (vec!["b"], 3));
    let third = store
        .list(&TaskQuery {
            after: second.next.clone(),
            ..coder.clone()
        })
        .await
        .unwrap();
    assert_eq!(
        (ids(&third.tasks), third.total, third.next),
        (vec!["a"], 3, None)
    );
}

/// Whether `task` is one `q` lists (its filters, not its cursor or limit).
fn matches(q: &TaskQuery, task: &StoredTask) -> bool {
    q.owner
        .as_ref()
        .is_none_or(|o| task.owner.as_ref() == Some(o))
        && q.role.as_ref().is_none_or(|r| *r == task.role)
        && q.context_id
            .as_ref()
            .is_none_or(|c| *c == task.task.context_id)
        && q.state.is_none_or(|s| s == task.task.status.state)
        && q.status_after.is_none_or(|t| task.status_time() >= t)
}

/// The ids `q` lists from `tasks`, newest first, as a count of every task would find them.
fn brute_force(q: &TaskQuery, tasks: &[StoredTask]) -> Vec<String> {
    let mut found: Vec<&StoredTask> = tasks.iter().filter(|t| matches(q, t)).collect();
    found.sort_by(|a, b| {
        (b.status_time(), b.task.id.as_str()).cmp(&(a.status_time(), a.task.id.as_str()))
    });
    found.iter().map(|t| t.task.id.to_string()).collect()
}

const STATES: [TaskState; 9] = [
    TaskState::Completed,
    TaskState::Working,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::InputRequired,
    TaskState::Completed,
    TaskState::Canceled,
    TaskState::Submitted,
    TaskState::Completed,
];

/// `n` tasks of three owners (none, ann, bob: a context's five tasks share one), three roles
/// and six states, three a status time (so ties go by id), their ids in another order.
pub(crate) fn population(n: usize) -> Vec<StoredTask> {
    let owners = [None, Some("ann"), Some("bob")];
    (0..n)
        .map(|i| {
            let id = format!("t{:05}", (i * 7919) % n);
            let context = i / 5;
            let time = T0 + i128::try_from(i / 3).unwrap() * 1000;
            let role = format!("r{}", (i * 7 / 3) % 3 + 1);
            let mut task = stored(&id, &format!("c{context}"), &role, STATES[i % 9], time);
            task.owner = owners[context % 3].map(str::to_owned);
            task
        })
        .collect()
}

/// Every combination of the filters over `tasks`: owners (one with no task), roles, states,
/// ann's first context, the status time of the task halfway.
fn every_filter(tasks: &[StoredTask]) -> Vec<TaskQuery> {
    let halfway = tasks[tasks.len() / 2].status_time();
    let anns = tasks
        .iter()
        .find(|t| t.owner.as_deref() == Some("ann"))
        .map(|t| t.task.context_id.clone());
    let mut queries = Vec::new();
    for owner in [None, Some("ann"), Some("bob"), Some("nobody")] {
        for role in [None, Some("r1"), Some("r2")] {
            for state in [
                None,
                Some(TaskState::Completed),
                Some(TaskState::Working),
                Some(TaskState::InputRequired),
            ] {
                for context_id in [None, anns.clone()] {
                    for status_after in [None, Some(halfway)] {
                        queries.push(TaskQuery {
                            owner: owner.map(str::to_owned),
                            role: role.map(str::to_owned),
                            state,
                            context_id: context_id.clone(),
                            status_after,
                            ..TaskQuery::default()
                        });
                    }
                }
            }
        }
    }
    queries
}

/// Walks every listing of [`every_filter`] at several page sizes, checking each page against a
/// count of `tasks`: every task once, in order, the total on every page, no token after the
/// last.
async fn check_every_listing(store: &dyn TaskStore, tasks: &[StoredTask]) {
    for q in every_filter(tasks) {
        let expected = brute_force(&q, tasks);
        let mut sizes = vec![7, 100, expected.len().max(1), expected.len() + 1];
        if expected.len() <= 30 {
            sizes.push(1);
        }
        for limit in sizes {
            let mut q = TaskQuery { limit, ..q.clone() };
            let mut listed = Vec::new();
            let mut pages = 0;
            loop {
                let page = store.list(&q).await.unwrap();
                pages += 1;
                assert_eq!(page.total, expected.len(), "total of {q:?}");
                assert!(page.tasks.len() <= limit, "{q:?}");
                listed.extend(page.tasks.iter().map(|t| t.task.id.to_string()));
                match page.next {
                    Some(next) => {
                        assert_eq!(
                            page.tasks.len(),
                            limit,
                            "a short page before the end: {q:?}"
                        );
                        q.after = Some(next);
                    }
                    None => break,
                }
            }
            assert_eq!(listed, expected, "{q:?}");
            assert_eq!(pages, expected.len().div_ceil(limit).max(1), "{q:?}");
        }
    }
}

/// Stores `tasks` many at a time.
async fn put_all(store: &Arc<dyn TaskStore>, tasks: &[StoredTask]) {
    for chunk in tasks.chunks(64) {
        let writes = chunk.iter().map(|task| store.put(task));
        for written in futures_util::future::join_all(writes).await {
            written.unwrap();
        }
    }
}

async fn list_pages_correctly_at_any_size(store: Arc<dyn TaskStore>) {
    let mut tasks = population(1500);
    put_all(&store, &tasks).await;
    check_every_listing(store.as_ref(), &tasks).await;

    // A quarter change state and move ahead in time, some change role: the listings follow.
    let latest = tasks.iter().map(StoredTask::status_time).max().unwrap();
    for (i, task) in tasks.iter_mut().enumerate() {
        if i % 4 == 0 {
            task.task.status.state = STATES[(i / 4) % 9];
            task.task.status.timestamp =
                Some(at(latest.unix_nanos() + i128::try_from(i).unwrap() * 7));
        }
        if i % 10 == 1 {
            task.role = "r2".to_owned();
        }
    }
    let changed: Vec<StoredTask> = tasks
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 == 0 || i % 10 == 1)
        .map(|(_, task)| task.clone())
        .collect();
    put_all(&store, &changed).await;
    check_every_listing(store.as_ref(), &tasks).await;

    // A total the listing knows (carried from its first page) is given back, not counted.
    let known = TaskQuery {
        known_total: Some(12_345),
        ..query(10)
    };
    assert_eq!(store.list(&known).await.unwrap().total, 12_345);
}

/// Checks the total of every listing of [`every_filter`] against a count of `tasks`.
pub(crate) async fn check_totals(store: &dyn TaskStore, tasks: &[StoredTask]) {
    for q in every_filter(tasks) {
        let q = TaskQuery { limit: 0, ..q };
        let total = store.list(&q).await.unwrap().total;
        assert_eq!(total, brute_force(&q, tasks).len(), "{q:?}");
    }
}

async fn list_totals_stay_exact_through_creates_and_changes(store: Arc<dyn TaskStore>) {
    let owners = [None, Some("ann"), Some("bob")];
    let mut tasks = Vec::new();
    let check = async |tasks: &[StoredTask]| check_totals(store.as_ref(), tasks).await;
    // New tasks with their first event, each state change logged as an event, one write each:
    // the writes a turn makes.
    for i in 0..40usize {
        let mut task = stored(
            &format!("n{i:02}"),
            &format!("c{}", i / 4),
            &format!("r{}", i % 3 + 1),
            TaskState::Submitted,
            T0 + i128::try_from(i).unwrap(),
        );
        task.owner = owners[(i / 4) % 3].map(str::to_owned);
        task.generation = 1;
        store.create(&task, &[], &[], &[]).await.unwrap();
        tasks.push(task);
    }
    check(&tasks).await;
    for (step, state) in [
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
    ]
    .into_iter()
    .enumerate()
    {
        for (i, task) in tasks.iter_mut().enumerate() {
            if i % (step + 2) != 0 {
                continue;
            }
            task.task.status.state = state;
            task.task.status.timestamp = Some(at(T0 + 1000 * i128::try_from(step + 1).unwrap()));
            task.generation += 1;
            let event = StreamResponse::Task(task.task.clone());
            store
                .put_with_events(task, &[event], &[], &[])
                .await
                .unwrap();
        }
        check(&tasks).await;
    }
}

async fn context_lists_a_context_oldest_first(store: Arc<dyn TaskStore>) {
    for (id, context, created) in [
        ("x", "c", T0 + 30),
        ("y", "c", T0 + 10),
        ("z", "c", T0 + 20),
        ("w", "c", T0 + 10),
        ("other", "d", T0 + 15),
    ] {
        let mut task = stored(id, context, "r", TaskState::Completed, T0 + 100);
        task.created = at(created);
        store.put(&task).await.unwrap();
    }
    let tasks = store.context(&"c".into(), None).await.unwrap();
    assert_eq!(ids(&tasks), ["w", "y", "z", "x"]);
    assert_eq!(tasks[3].created, at(T0 + 30));
    assert_eq!(store.context(&"none".into(), None).await.unwrap(), []);
}

async fn context_reads_only_the_owners_tasks(store: Arc<dyn TaskStore>) {
    for (id, owner) in [("a1", Some("alice")), ("b1", Some("bob")), ("n1", None)] {
        let mut task = stored(id, "c", "r", TaskState::Completed, T0);
        task.owner = owner.map(str::to_owned);
        store.put(&task).await.unwrap();
    }
    let of = |owner: Option<&'static str>| {
        let store = store.clone();
        async move { ids(&store.context(&"c".into(), owner).await.unwrap()).join(",") }
    };
    assert_eq!(of(Some("alice")).await, "a1");
    assert_eq!(of(Some("bob")).await, "b1");
    assert_eq!(of(None).await, "n1");
    assert_eq!(of(Some("carol")).await, "");
}

async fn a_new_task_in_another_owners_context_is_refused_and_not_written(
    store: Arc<dyn TaskStore>,
) {
    let first = owned(stored("a1", "c", "r", TaskState::Completed, T0), "alice");
    store.create(&first, &[], &[], &[]).await.unwrap();
    assert!(
        store
            .context_admits(&"c".into(), Some("alice"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .context_admits(&"c".into(), Some("bob"))
            .await
            .unwrap()
    );
    assert!(!store.context_admits(&"c".into(), None).await.unwrap());
    assert!(
        store
            .context_admits(&"new".into(), Some("bob"))
            .await
            .unwrap()
    );

    // Bob's task naming Alice's context: refused, with its push config and notification.
    let intruder = owned(stored("b1", "c", "r", TaskState::Submitted, T0 + 1), "bob");
    let refused = store
        .create(
            &intruder,
            &[],
            &[hook("b1", "h")],
            &[for_config(event("b1", 0), "h")],
        )
        .await;
    assert!(
        matches!(&refused, Err(StoreError::ForeignContext(c)) if c.as_str() == "c"),
        "{refused:?}"
    );
    assert_eq!(store.get(&"b1".into()).await.unwrap(), None);
    assert_eq!(store.push_configs(&"b1".into()).await.unwrap(), []);
    assert_eq!(store.push_heads(10).await.unwrap(), []);
    // An anonymous task too; Alice's own second task is welcome.
    let anonymous = stored("n1", "c", "r", TaskState::Submitted, T0 + 2);
    assert!(store.create(&anonymous, &[], &[], &[]).await.is_err());
    let second = owned(
        stored("a2", "c", "r", TaskState::Submitted, T0 + 3),
        "alice",
    );
    store.create(&second, &[], &[], &[]).await.unwrap();
    let tasks = store.context(&"c".into(), Some("alice")).await.unwrap();
    assert_eq!(ids(&tasks), ["a1", "a2"]);
}

async fn principals_racing_for_one_new_context_get_it_once(store: Arc<dyn TaskStore>) {
    let creates = (0..8_i128).map(|i| {
        let owner = if i % 2 == 0 { "alice" } else { "bob" };
        let task = owned(
            stored(&format!("t{i}"), "race", "r", TaskState::Submitted, T0 + i),
            owner,
        );
        let store = store.clone();
        async move { (owner, store.create(&task, &[], &[], &[]).await) }
    });
    let results = futures_util::future::join_all(creates).await;
    let admitted: std::collections::HashSet<&str> = results
        .iter()
        .filter(|(_, result)| result.is_ok())
        .map(|(owner, _)| *owner)
        .collect();
    assert_eq!(admitted.len(), 1, "{results:?}");
    let winner = admitted.into_iter().next().unwrap();
    for (owner, result) in &results {
        if *owner != winner {
            assert!(
                matches!(result, Err(StoreError::ForeignContext(c)) if c.as_str() == "race"),
                "{result:?}"
            );
        }
    }
    let loser = if winner == "alice" { "bob" } else { "alice" };
    let theirs = |owner| {
        let store = store.clone();
        async move {
            store
                .context(&"race".into(), Some(owner))
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(theirs(winner).await, 4);
    assert_eq!(theirs(loser).await, 0);
}

async fn configs_without_ids_are_refused_before_the_writer(store: Arc<dyn TaskStore>) {
    assert_eq!(
        error_text(store.put_push_config(&hook("t", "")).await),
        "task store: cannot store a push config without a task id and an id"
    );
    let task = stored("t", "c", "r", TaskState::Working, T0);
    assert!(
        store
            .put_with_events(&task, &[], &[hook("", "a")], &[])
            .await
            .is_err()
    );
    assert_eq!(store.get(&"t".into()).await.unwrap(), None);
}

async fn unfinished_tasks_are_the_submitted_and_working_ones_oldest_first(
    store: Arc<dyn TaskStore>,
) {
    let states = [
        ("w", TaskState::Working),
        ("i", TaskState::InputRequired),
        ("a", TaskState::AuthRequired),
        ("c", TaskState::Completed),
        ("f", TaskState::Failed),
        ("x", TaskState::Canceled),
        ("r", TaskState::Rejected),
        ("s", TaskState::Submitted),
    ];
    // Created in this order; status times the other way round.
    for (n, (id, state)) in (0..).zip(states) {
        let mut task = stored(id, "c", "r", state, T0 + 100 - n);
        task.created = at(T0 + n);
        store.put(&task).await.unwrap();
        // As a replica that stops hands its tasks back.
        store.release(&task.task.id).await.unwrap();
    }
    let unfinished = store.take_over(usize::MAX).await.unwrap();
    assert_eq!(ids(&unfinished), ["w", "s"]);
    assert_eq!(
        unfinished[0],
        store.get(&"w".into()).await.unwrap().unwrap()
    );
}

async fn attempts_are_kept(store: Arc<dyn TaskStore>) {
    let mut task = stored("t", "c", "r", TaskState::Working, T0);
    task.attempts = 2;
    store.put(&task).await.unwrap();
    assert_eq!(store.get(&"t".into()).await.unwrap().unwrap().attempts, 2);
    store.release(&task.task.id).await.unwrap();
    assert_eq!(store.take_over(usize::MAX).await.unwrap()[0].attempts, 2);
    task.attempts = 0;
    store.put(&task).await.unwrap();
    assert_eq!(store.get(&"t".into()).await.unwrap().unwrap().attempts, 0);
}

async fn tasks_that_cannot_be_stored_are_refused_before_the_writer(store: Arc<dyn TaskStore>) {
    let no_id = stored("", "c", "r", TaskState::Working, T0);
    assert_eq!(
        error_text(store.put(&no_id).await),
        "task store: cannot store a task without an id"
    );
    let far = stored("far", "c", "r", TaskState::Working, T0);
    let far = StoredTask {
        created: Timestamp::from_unix(10_000_000_000, 0),
        ..far
    };
    assert_eq!(
        error_text(store.put(&far).await),
        "task store: cannot store task far: its creation time 2286-11-20T17:46:40Z \
         is outside the years 1677 to 2262"
    );
    assert_eq!(store.list(&query(10)).await.unwrap().total, 0);
}

/// A WORKING status event of task `id`.
fn working(id: &str) -> StreamResponse {
    StreamResponse::StatusUpdate(mew_cards::TaskStatusUpdateEvent {
        task_id: id.into(),
        context_id: "c".into(),
        status: TaskStatus::new(TaskState::Working),
        metadata: None,
    })
}

async fn events_are_logged_with_their_snapshot_and_read_back_in_order(store: Arc<dyn TaskStore>) {
    let mut task = stored("t", "c", "r", TaskState::Submitted, T0);
    task.generation = 1;
    store.create(&task, &[], &[], &[]).await.unwrap();
    let first = store.events(&"t".into(), 0, 10).await.unwrap();
    assert_eq!(first, [(1, StreamResponse::Task(task.task.clone()))]);

    let mut changes = Vec::new();
    for n in 2..=4 {
        task.generation = n;
        task.task.status = TaskStatus::new(TaskState::Working);
        let change = working("t");
        store
            .put_with_events(&task, std::slice::from_ref(&change), &[], &[])
            .await
            .unwrap();
        changes.push((n, change));
    }
    // A write without an event (a checkpoint) logs nothing.
    store.put(&task).await.unwrap();
    assert_eq!(store.get(&"t".into()).await.unwrap().unwrap().generation, 4);
    let all = store.events(&"t".into(), 1, 10).await.unwrap();
    assert_eq!(all, changes);
    assert_eq!(
        store.events(&"t".into(), 2, 1).await.unwrap(),
        changes[1..2]
    );
    assert_eq!(store.events(&"t".into(), 4, 10).await.unwrap(), []);
    assert_eq!(store.events(&"other".into(), 0, 10).await.unwrap(), []);
}

async fn several_events_are_logged_in_one_write_under_consecutive_numbers(
    store: Arc<dyn TaskStore>,
) {
    let mut task = stored("t", "c", "r", TaskState::Working, T0);
    task.generation = 1;
    store.create(&task, &[], &[], &[]).await.unwrap();
    let (first, second) = (working("t"), working("t"));
    task.generation = 3;
    store
        .put_with_events(&task, &[first.clone(), second.clone()], &[], &[])
        .await
        .unwrap();
    assert_eq!(
        store.events(&"t".into(), 1, 10).await.unwrap(),
        [(2, first), (3, second)]
    );
    // More events than numbers up to the task's: refused, nothing written.
    task.generation = 4;
    let refused = store
        .put_with_events(&task, &vec![working("t"); 5], &[], &[])
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(store.get(&"t".into()).await.unwrap().unwrap().generation, 3);
}

/// A task that starts at once is created WORKING, with its SUBMITTED snapshot and its WORKING
/// event logged under numbers 1 and 2; more events than numbers are refused.
async fn a_task_created_with_its_events_logs_them_from_number_one(store: Arc<dyn TaskStore>) {
    let submitted = stored("t", "c", "r", TaskState::Submitted, T0);
    let mut task = submitted.clone();
    task.task.status = TaskStatus::new(TaskState::Working);
    task.generation = 2;
    let opening = [StreamResponse::Task(submitted.task.clone()), working("t")];
    store.create(&task, &opening, &[], &[]).await.unwrap();
    assert_eq!(
        store.events(&"t".into(), 0, 10).await.unwrap(),
        [(1, opening[0].clone()), (2, opening[1].clone())]
    );
    let again = store.get(&"t".into()).await.unwrap().unwrap();
    assert_eq!(
        (again.task.status.state, again.generation),
        (TaskState::Working, 2)
    );

    let mut other = stored("u", "c", "r", TaskState::Working, T0);
    other.generation = 1;
    let refused = store.create(&other, &opening, &[], &[]).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(store.get(&"u".into()).await.unwrap(), None);
}

async fn an_event_number_is_logged_once(store: Arc<dyn TaskStore>) {
    let mut task = stored("t", "c", "r", TaskState::Submitted, T0);
    task.generation = 1;
    store
        .create(&task, &[], &[hook("t", "a")], &[])
        .await
        .unwrap();
    task.generation = 2;
    task.task.status = TaskStatus::new(TaskState::Working);
    let first = working("t");
    store
        .put_with_events(&task, std::slice::from_ref(&first), &[], &[])
        .await
        .unwrap();
    // A second writer with the same number (one that lost the task, say) writes nothing.
    let mut rival = task.clone();
    rival.task.status = TaskStatus::new(TaskState::Completed);
    let done = StreamResponse::StatusUpdate(mew_cards::TaskStatusUpdateEvent {
        task_id: "t".into(),
        context_id: "c".into(),
        status: TaskStatus::new(TaskState::Completed),
        metadata: None,
    });
    let refused = store
        .put_with_events(
            &rival,
            std::slice::from_ref(&done),
            &[],
            &[for_config(event("t", 9), "a")],
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(store.get(&"t".into()).await.unwrap(), Some(task));
    assert_eq!(
        store.events(&"t".into(), 1, 10).await.unwrap(),
        [(2, first)]
    );
    assert_eq!(store.push_heads(10).await.unwrap(), []);
}

async fn the_push_outbox_depth_is_counted_up_to_its_limit(store: Arc<dyn TaskStore>) {
    assert_eq!(store.push_depth(10).await.unwrap(), 0);
    let task = stored("p1", "c", "r", TaskState::Working, T0);
    let waiting: Vec<OutboxRow> = (0..3).map(|n| for_config(event("p1", n), "h")).collect();
    store
        .create(&task, &[], &[hook("p1", "h")], &waiting)
        .await
        .unwrap();
    assert_eq!(store.push_depth(10).await.unwrap(), 3);
    // The count stops at its limit.
    assert_eq!(store.push_depth(2).await.unwrap(), 2);
    let heads = store.push_heads(10).await.unwrap();
    store.push_done(heads[0].seq).await.unwrap();
    assert_eq!(store.push_depth(10).await.unwrap(), 2);
}
