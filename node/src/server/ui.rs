//! The dashboard at `/ui`: a page and its script, embedded in the binary, that show the node
//! through its own API (the A2A operations over HTTP+JSON, `/agents`, `/status`), plus what
//! that API lacks: a node-wide feed of task changes (SSE), a task's event log, a view of the
//! node's parts (peers, MCP servers, skills, hooks, replicas), and the sign-in that gives a
//! browser a session cookie (see [`super::session`]).
//!
//! The files are written by hand and served as they are in the repository: no build step, no
//! JavaScript toolchain, nothing fetched from elsewhere. Every answer of `/ui` carries a strict
//! Content-Security-Policy (scripts and styles only from the node, no inline script, no
//! frames): whatever a task's content holds, the page renders it as text and runs none of it.

use std::collections::hash_map::DefaultHasher;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json};
use futures_util::Stream;
use mew_cards::mew::MewMetadata;
use mew_cards::{TaskId, Timestamp};
use mew_transport::Principal;
use serde::Deserialize;
use serde_json::{Value, json};

use super::StatusSource;
use super::auth::Authenticator;
use crate::peers::Peers;
use crate::tasks::manager::{Scope, TaskManager};
use crate::tasks::store::{Cursor, StoredTask, TaskQuery, TaskStore};
use crate::tree::{Place, TreeNode, Walk, build_tree};

/// Where the dashboard is served.
pub(crate) const PATH: &str = "/ui";

/// How often the feed asks the task store what changed. The store is the one place every
/// replica's changes meet, so a feed served by one replica sees the tasks of all of them.
const FEED_INTERVAL: Duration = Duration::from_millis(500);
/// The most changes one read of the feed takes; more than that since the last read, and the
/// browser is told to read its list again (`reset`).
const FEED_BATCH: usize = 100;
/// How deep a delegation tree is followed.
const TREE_DEPTH: u32 = 8;
/// The most events of a task's log one request returns.
const LOG_PAGE: usize = 500;
/// The longest text of a status message a feed entry carries.
const SUMMARY_CHARS: usize = 240;

/// What every answer of `/ui` says about where its content may come from.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One file of the dashboard.
struct Asset {
    name: &'static str,
    media: &'static str,
    body: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        media: "text/html; charset=utf-8",
        body: include_bytes!("ui/index.html"),
    },
    Asset {
        name: "app.js",
        media: "text/javascript; charset=utf-8",
        body: include_bytes!("ui/app.js"),
    },
    Asset {
        name: "app.css",
        media: "text/css; charset=utf-8",
        body: include_bytes!("ui/app.css"),
    },
    Asset {
        name: "icon.svg",
        media: "image/svg+xml",
        body: include_bytes!("ui/icon.svg"),
    },
];

/// Each file's ETag: a hash of its bytes, made once (the files are in the binary).
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|asset| {
            let mut hasher = DefaultHasher::new();
            asset.body.hash(&mut hasher);
            format!("\"{:016x}\"", hasher.finish())
        })
        .collect()
});

/// What the dashboard's own routes need of the node.
#[derive(Clone)]
pub(crate) struct Dashboard {
    /// The node's `auth:`, if any: sign-in checks credentials with it.
    pub(crate) auth: Option<Arc<Authenticator>>,
    /// Whether the node serves TLS (session cookies are then `Secure`).
    pub(crate) secure: bool,
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) manager: Arc<TaskManager>,
    /// The node's parts as the overview shows them.
    pub(crate) overview: StatusSource,
    /// The node's peers: a delegation tree's tasks on them are fetched with their credentials.
    pub(crate) peers: Arc<Peers>,
    /// The node's own base URL (`node.public_url`), where its children by role name run.
    pub(crate) node_url: String,
}

/// The dashboard's routes: the page and its files, the session, and its API under
/// `/ui/api/`. They sit behind the node's authentication, which lets the page, its files and
/// the sign-in through.
pub(crate) fn router(dashboard: Dashboard) -> Router {
    Router::new()
        .route(PATH, get(|headers: HeaderMap| async move { asset("index.html", &headers) }))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move {
                asset(&file, &headers)
            }),
        )
        .route(
            "/ui/session",
            get(session).post(sign_in).delete(sign_out),
        )
        .route("/ui/api/node", get(overview))
        .route("/ui/api/events", get(feed))
        .route("/ui/api/tasks/{id}/events", get(task_log))
        .route("/ui/api/tasks/{id}/tree", get(task_tree))
        .with_state(dashboard)
}

/// A browser asking for the node's root gets the dashboard; every other client gets the front
/// agent, as before.
pub(crate) async fn browser_root(request: Request, next: Next) -> Response {
    let wants_html = request.method() == Method::GET
        && request.uri().path() == "/"
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|accept| {
                accept
                    .split(',')
                    .next()
                    .is_some_and(|first| first.trim().starts_with("text/html"))
            });
    if wants_html {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, PATH)]).into_response();
    }
    next.run(request).await
}

/// The headers of every answer of `/ui`.
fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn asset(name: &str, headers: &HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|asset| asset.name == name) else {
        return guarded(
            (
                StatusCode::NOT_FOUND,
                format!("the dashboard has no file {name:?}\n"),
            )
                .into_response(),
        );
    };
    let (asset, etag) = (&ASSETS[index], &ETAGS[index]);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.media)], asset.body).into_response()
    };
    let out = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(etag) {
        out.insert(header::ETAG, etag);
    }
    // Checked on every load: a new binary's files are used at once.
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    guarded(response)
}

/// A JSON answer of the dashboard's API, never cached.
fn api(status: StatusCode, body: Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    guarded(response)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    api(
        status,
        json!({ "error": { "code": status.as_u16(), "message": message.into() } }),
    )
}

/// `GET /ui/session`: whether the node wants a sign-in, and who this browser is.
async fn session(State(dashboard): State<Dashboard>, headers: HeaderMap) -> Response {
    let Some(auth) = &dashboard.auth else {
        return api(StatusCode::OK, json!({ "auth": false }));
    };
    match auth.sessions().of(&headers) {
        Some(Ok(session)) => api(
            StatusCode::OK,
            json!({
                "auth": true,
                "principal": session.principal,
                "csrf": session.csrf,
                "expires": session.expires,
            }),
        ),
        _ => api(StatusCode::OK, json!({ "auth": true, "principal": null })),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    credential: String,
}

/// `POST /ui/session` with `{"credential": "..."}`: an API key or a JWT of the node's `auth:`
/// gives a session cookie.
async fn sign_in(
    State(dashboard): State<Dashboard>,
    body: Result<Json<SignIn>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(auth) = &dashboard.auth else {
        return error(
            StatusCode::BAD_REQUEST,
            "this node has no auth: configured; the dashboard needs no sign-in",
        );
    };
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("a sign-in is {{\"credential\": \"an API key or a JWT\"}}: {rejection}"),
            );
        }
    };
    let principal = match auth.sign_in(&body.credential).await {
        Ok(principal) => principal,
        Err(reason) => {
            return error(
                StatusCode::UNAUTHORIZED,
                format!("unauthenticated: {reason}"),
            );
        }
    };
    let (session, token) = match auth.sessions().issue(&principal) {
        Ok(issued) => issued,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut response = api(
        StatusCode::OK,
        json!({
            "auth": true,
            "principal": session.principal,
            "csrf": session.csrf,
            "expires": session.expires,
        }),
    );
    response.headers_mut().insert(
        header::SET_COOKIE,
        super::session::set_cookie(Some(&token), dashboard.secure),
    );
    response
}

/// `DELETE /ui/session`: forgets the cookie.
async fn sign_out(State(dashboard): State<Dashboard>) -> Response {
    let mut response = api(StatusCode::OK, json!({}));
    response.headers_mut().insert(
        header::SET_COOKIE,
        super::session::set_cookie(None, dashboard.secure),
    );
    response
}

/// `GET /ui/api/node`: roles, peers, MCP servers, skills, hooks, replicas.
async fn overview(State(dashboard): State<Dashboard>) -> Response {
    api(StatusCode::OK, (dashboard.overview)().await)
}

/// The tasks a request may see: its principal's, or all of them on a node without `auth:`.
fn owner(principal: Option<Extension<Principal>>) -> Option<String> {
    principal.map(|Extension(Principal(name))| name)
}

#[derive(Deserialize, Default)]
struct LogQuery {
    after: Option<u64>,
}

/// `GET /ui/api/tasks/{id}/events?after=N`: the task's logged events (every status update,
/// tool call note and artifact chunk, as its stream sent them), at most [`LOG_PAGE`] at a time.
async fn task_log(
    State(dashboard): State<Dashboard>,
    principal: Option<Extension<Principal>>,
    Path(id): Path<String>,
    Query(query): Query<LogQuery>,
) -> Response {
    let id = TaskId::from(id.as_str());
    let scope = Scope {
        role: None,
        owner: owner(principal),
    };
    if let Err(e) = dashboard.manager.get(&id, &scope).await {
        return error(StatusCode::NOT_FOUND, e.to_string());
    }
    let after = query.after.unwrap_or(0);
    match dashboard.store.events(&id, after, LOG_PAGE).await {
        Ok(events) => {
            let next = events.last().map(|(n, _)| *n);
            let more = events.len() == LOG_PAGE;
            let events: Vec<Value> = events
                .into_iter()
                .map(|(number, event)| json!({ "number": number, "event": event }))
                .collect();
            api(
                StatusCode::OK,
                json!({ "events": events, "next": if more { next } else { None } }),
            )
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `GET /ui/api/tasks/{id}/tree`: the task and every task it delegated to, on this node and
/// on peers (fetched with the peer's credentials), with usage rolled up. Only a task the
/// caller may read is a root; the tasks below it are those its node-written links name.
async fn task_tree(
    State(dashboard): State<Dashboard>,
    principal: Option<Extension<Principal>>,
    Path(id): Path<String>,
) -> Response {
    let scope = Scope {
        role: None,
        owner: owner(principal),
    };
    if let Err(e) = dashboard
        .manager
        .get(&TaskId::from(id.as_str()), &scope)
        .await
    {
        return error(StatusCode::NOT_FOUND, e.to_string());
    }
    let node = dashboard.node_url.trim_end_matches('/').to_owned();
    let walk = Walk {
        max_depth: TREE_DEPTH,
        peers: dashboard
            .peers
            .list()
            .into_iter()
            .map(|peer| (peer.name, peer.url))
            .collect(),
    };
    let (manager, peers, here) = (&dashboard.manager, &dashboard.peers, node.as_str());
    let root = build_tree(
        &id,
        here,
        here,
        &walk,
        |place: Place, id: String| async move {
            if place.node.trim_end_matches('/') == here {
                let everyone = Scope {
                    role: None,
                    owner: None,
                };
                return manager
                    .get(&TaskId::from(id.as_str()), &everyone)
                    .await
                    .map(|stored| stored.task)
                    .map_err(|e| e.to_string());
            }
            let agent = peers.resolve_url(&place.url).await?;
            let request = mew_cards::GetTaskRequest {
                id: TaskId::from(id.as_str()),
                history_length: Some(0),
                ..mew_cards::GetTaskRequest::default()
            };
            use mew_transport::AgentTransport as _;
            agent
                .get_task(&mew_transport::CallContext::anonymous(), request)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    api(StatusCode::OK, tree_json(&root, here))
}

/// A tree node as the page shows it; `here` is this node's base URL (its tasks are `local`,
/// and the page links them).
fn tree_json(node: &TreeNode, here: &str) -> Value {
    let task = node.task.as_ref();
    json!({
        "taskId": node.task_id,
        "agent": node.agent,
        "node": node.node,
        "local": node.node.trim_end_matches('/') == here,
        "role": node.role,
        "description": node.link.as_ref().map(|link| link.description.clone()),
        "state": task.map(|t| t.status.state),
        "text": task
            .and_then(|t| t.status.message.as_ref())
            .map(|m| m.text().chars().take(SUMMARY_CHARS).collect::<String>()),
        "error": node.error,
        "repeated": node.repeated,
        "own": node.own,
        "total": node.total,
        "tasks": node.tasks,
        "missing": node.missing,
        "children": node
            .children
            .iter()
            .map(|child| tree_json(child, here))
            .collect::<Vec<_>>(),
    })
}

#[derive(Deserialize, Default)]
struct FeedQuery {
    /// Where to start when the browser has no `Last-Event-ID` yet: an event id it was given.
    since: Option<String>,
}

/// A position of the feed: a task's status time and id, the order the store lists in.
fn parse_position(text: &str) -> Option<Cursor> {
    let (nanos, id) = text.split_once(':')?;
    let nanos: i128 = nanos.parse().ok()?;
    (!id.is_empty()).then(|| Cursor {
        status_time: Timestamp::from_unix_nanos(nanos),
        id: TaskId::from(id),
    })
}

fn position_of(task: &StoredTask) -> Cursor {
    Cursor {
        status_time: task.status_time(),
        id: task.task.id.clone(),
    }
}

fn after(task: &Cursor, position: &Cursor) -> bool {
    (task.status_time.unix_nanos(), task.id.as_str())
        > (position.status_time.unix_nanos(), position.id.as_str())
}

/// What the feed says of a task: enough for a row of the task list.
fn summary(stored: &StoredTask) -> Value {
    let task = &stored.task;
    let mew = MewMetadata::read(task.metadata.as_ref());
    let status_mew = task
        .status
        .message
        .as_ref()
        .map(|message| MewMetadata::read(message.metadata.as_ref()));
    let text: String = task
        .status
        .message
        .as_ref()
        .map(|message| message.text())
        .unwrap_or_default()
        .chars()
        .take(SUMMARY_CHARS)
        .collect();
    json!({
        "id": task.id,
        "contextId": task.context_id,
        "role": stored.role,
        "state": task.status.state,
        "timestamp": stored.status_time(),
        "text": text,
        "ask": status_mew.and_then(|m| m.ask),
        "parentTask": mew.parent_task,
        "usage": mew.usage,
    })
}

/// `GET /ui/api/events`: an SSE stream of the tasks the caller may see as they change, each
/// event a task's summary with the task's position as its id, so a browser that reconnects
/// (`Last-Event-ID`) misses nothing; `reset` when more changed than one read takes.
async fn feed(
    State(dashboard): State<Dashboard>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
    Query(query): Query<FeedQuery>,
) -> Response {
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or(query.since);
    let start = resume
        .as_deref()
        .and_then(parse_position)
        .unwrap_or_else(|| Cursor {
            status_time: Timestamp::now(),
            id: TaskId::from(""),
        });
    let stream = changes(dashboard.store.clone(), owner(principal), start);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    guarded(response)
}

/// The feed's events from `start` on: one store read every [`FEED_INTERVAL`].
fn changes(
    store: Arc<dyn TaskStore>,
    owner: Option<String>,
    start: Cursor,
) -> impl Stream<Item = Result<Event, Infallible>> {
    use futures_util::StreamExt as _;
    let ready = Event::default().event("ready").data("{}");
    let reads = futures_util::stream::unfold(
        (store, owner, start, true),
        |(store, owner, mut position, first)| async move {
            if !first {
                tokio::time::sleep(FEED_INTERVAL).await;
            }
            let query = TaskQuery {
                owner: owner.clone(),
                status_after: Some(position.status_time),
                limit: FEED_BATCH,
                max_bytes: Some(4 << 20),
                ..TaskQuery::default()
            };
            let events = match store.list(&query).await {
                Ok(page) => {
                    let full = page.tasks.len() >= FEED_BATCH || page.next.is_some();
                    let mut fresh: Vec<&StoredTask> = page
                        .tasks
                        .iter()
                        .filter(|task| after(&position_of(task), &position))
                        .collect();
                    fresh.reverse();
                    let mut events = Vec::with_capacity(fresh.len() + 1);
                    if full {
                        events.push(Event::default().event("reset").data("{}"));
                    }
                    for task in fresh {
                        let at = position_of(task);
                        events.push(
                            Event::default()
                                .event("task")
                                .id(format!("{}:{}", at.status_time.unix_nanos(), at.id))
                                .data(summary(task).to_string()),
                        );
                        position = at;
                    }
                    events
                }
                Err(e) => vec![
                    Event::default()
                        .event("problem")
                        .data(json!({ "message": e.to_string() }).to_string()),
                ],
            };
            Some((events, (store, owner, position, false)))
        },
    );
    futures_util::stream::once(async move { ready })
        .chain(reads.flat_map(futures_util::stream::iter))
        .map(Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_position_reads_back_and_orders_as_the_store_lists() {
        let position = parse_position("1700000000000000000:task-b").unwrap_or_else(|| {
            panic!("a position the feed gave does not parse");
        });
        assert_eq!(position.id.as_str(), "task-b");
        let later_id = Cursor {
            id: TaskId::from("task-c"),
            ..position.clone()
        };
        assert!(after(&later_id, &position));
        assert!(!after(&position, &position));
        for bad in ["", "12", "x:task", "12:"] {
            assert!(parse_position(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_script_never_turns_text_into_markup_or_code() {
        let script = std::str::from_utf8(include_bytes!("ui/app.js")).unwrap_or_default();
        assert!(script.len() > 1000, "app.js is not there");
        for (number, line) in script.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") || code.starts_with('*') || code.starts_with("/*") {
                continue;
            }
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
                "javascript:",
            ] {
                assert!(
                    !code.contains(sink),
                    "app.js line {}: {sink} in {line:?}",
                    number + 1
                );
            }
        }
    }

    #[test]
    fn every_file_is_served_with_the_policy_and_an_unknown_one_is_not() {
        let response = asset("app.js", &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_SECURITY_POLICY)
                .and_then(|v| v.to_str().ok()),
            Some(CSP)
        );
        let etag = response.headers().get(header::ETAG).cloned();
        let mut again = HeaderMap::new();
        if let Some(etag) = etag {
            again.insert(header::IF_NONE_MATCH, etag);
        }
        assert_eq!(asset("app.js", &again).status(), StatusCode::NOT_MODIFIED);
        assert_eq!(
            asset("../Cargo.toml", &HeaderMap::new()).status(),
            StatusCode::NOT_FOUND
        );
        assert!(!CSP.contains("unsafe-inline") && !CSP.contains("unsafe-eval"));
    }
}
