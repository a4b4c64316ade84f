//! The dispatcher: delivers the outbox, one notification per webhook at a time, in order.
//!
//! Each pass reads the oldest notification of every webhook (task and config). Those that
//! are due go out concurrently (at most [`MAX_CONCURRENT`]); one still waiting for a retry
//! holds back the later notifications of its webhook, so a webhook sees every event in order.
//! A 2xx answer removes the notification; anything else is retried with exponential backoff
//! until `push.max_attempts`, then dropped with a warning. The request carries the event as
//! its body, the config's token in `X-A2A-Notification-Token`, and in `Authorization` the
//! config's own credentials or, when it has none, a short-lived JWT signed by the node key.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use mew_cards::{TaskId, TaskPushNotificationConfig};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::new_id;
use crate::identity::{JWKS_PATH, NodeKey};
use crate::ssrf::{Guard, GuardError, Target, pinned_client};
use crate::tasks::store::{PendingPush, TaskStore};

/// Deliveries in flight at once, each to a different webhook.
pub(crate) const MAX_CONCURRENT: usize = 16;

/// The most webhooks one pass looks at.
const HEADS_PER_PASS: usize = 1024;

/// The first retry's delay; each further one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest delay between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);

/// How long the JWT on a notification is valid.
const JWT_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// How long to wait after the outbox could not be read.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// The longest the dispatcher sleeps without looking at the outbox.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// The media type of A2A bodies.
const A2A_JSON: &str = "application/a2a+json";

/// The header that carries the config's token.
pub(crate) const TOKEN_HEADER: &str = "X-A2A-Notification-Token";

/// A webhook: the task and the config's id.
type Key = (TaskId, String);

/// The dispatcher and what it needs.
pub(crate) struct Dispatcher {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) wake: Arc<Notify>,
    pub(crate) guard: Guard,
    pub(crate) key: Arc<NodeKey>,
    /// The node's base URL: the JWT's issuer, and where its JWKS is.
    pub(crate) public_url: String,
    pub(crate) max_attempts: u32,
    pub(crate) timeout: Duration,
    /// Clients by the addresses they are pinned to, so deliveries reuse connections.
    pub(crate) clients: Clients,
}

/// HTTP clients, each pinned to one checked target (host and addresses).
#[derive(Default)]
pub(crate) struct Clients {
    /// The roots trusted besides the system's and the client certificate (`tls:`), for
    /// webhooks behind a private CA.
    tls: mew_transport::TlsOptions,
    cache: std::sync::Mutex<HashMap<Pinned, reqwest::Client>>,
}

/// A checked target: its host name (if it has one) and its addresses.
type Pinned = (Option<String>, Vec<SocketAddr>);

/// The most clients kept; beyond this the cache starts over.
const MAX_CLIENTS: usize = 64;

impl Clients {
    /// Clients that trust what `tls` adds to the system roots.
    pub(crate) fn new(tls: mew_transport::TlsOptions) -> Self {
        Self {
            tls,
            cache: std::sync::Mutex::default(),
        }
    }

    /// The client for `target`, made when there is none.
    fn get(&self, target: &Target, timeout: Duration) -> reqwest::Result<reqwest::Client> {
        let key = (target.host.clone(), target.addrs.clone());
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = cache.get(&key) {
            return Ok(client.clone());
        }
        let client = pinned_client(target, timeout, &self.tls)?;
        if cache.len() >= MAX_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
        Ok(client)
    }
}

/// What became of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The webhook took it.
    Delivered,
    /// Worth another attempt.
    Failed(String),
    /// Never deliverable: dropped at once.
    Refused(String),
}

impl Dispatcher {
    /// Delivers until `stop` is canceled.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut in_flight: HashSet<Key> = HashSet::new();
        let mut workers: JoinSet<Key> = JoinSet::new();
        loop {
            let mut wait = None;
            match self.store.push_heads(HEADS_PER_PASS).await {
                Ok(heads) => {
                    let now = now_ms();
                    for head in heads {
                        let key = (head.task_id.clone(), head.config_id.clone());
                        if in_flight.contains(&key) {
                            continue;
                        }
                        if head.next_at > now {
                            let due_in = Duration::from_millis(
                                u64::try_from(head.next_at.saturating_sub(now)).unwrap_or(0),
                            );
                            wait = Some(wait.map_or(due_in, |w: Duration| w.min(due_in)));
                            continue;
                        }
                        if workers.len() >= MAX_CONCURRENT {
                            continue;
                        }
                        in_flight.insert(key.clone());
                        let dispatcher = self.clone();
                        workers.spawn(async move {
                            let seq = head.seq;
                            if std::panic::AssertUnwindSafe(dispatcher.deliver(head))
                                .catch_unwind()
                                .await
                                .is_err()
                            {
                                warn!(seq, "a push delivery panicked; it is retried later");
                            }
                            key
                        });
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot read the push outbox");
                    wait = Some(STORE_RETRY);
                }
            }
            let sleep = tokio::time::sleep(wait.unwrap_or(IDLE_WAIT).min(IDLE_WAIT));
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.wake.notified() => {}
                () = sleep => {}
                Some(done) = workers.join_next(), if !workers.is_empty() => {
                    if let Ok(key) = done {
                        in_flight.remove(&key);
                    }
                }
            }
        }
        workers.abort_all();
    }

    /// The span of a delivery: a client span in the trace of the task it tells of.
    async fn span(&self, head: &PendingPush) -> tracing::Span {
        let span = crate::telemetry::span!(
            "push.deliver",
            otel.name = "push notification",
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            mew.task_id = %head.task_id,
            mew.push.config_id = %head.config_id,
            mew.push.attempt = i64::from(head.attempts.saturating_add(1)),
            mew.push.outcome = tracing::field::Empty,
        );
        if span.is_disabled() {
            return span;
        }
        if let Ok(Some(task)) = self.store.get(&head.task_id).await
            && let Some(traceparent) =
                mew_cards::mew::MewMetadata::read(task.task.metadata.as_ref()).traceparent
        {
            let trace = crate::telemetry::TraceParent {
                traceparent,
                tracestate: None,
            };
            crate::telemetry::set_parent(&span, trace.context());
        }
        span
    }

    /// One attempt at `head`, and its bookkeeping in the outbox.
    async fn deliver(&self, head: PendingPush) {
        let span = self.span(&head).await;
        let outcome = match &head.config {
            None => Outcome::Refused("its push config is gone".to_owned()),
            Some(config) => {
                tracing::Instrument::instrument(self.attempt(config, &head), span.clone()).await
            }
        };
        let (name, failed) = match &outcome {
            Outcome::Delivered => ("delivered", false),
            Outcome::Refused(_) => ("refused", true),
            Outcome::Failed(_) => ("failed", true),
        };
        span.record("mew.push.outcome", name);
        if failed {
            span.record("otel.status_code", "error");
        }
        drop(span);
        let url = head.config.as_ref().map_or("", |c| c.url.as_str());
        let written = match outcome {
            Outcome::Delivered => {
                crate::metrics::push_delivery("delivered");
                debug!(task = %head.task_id, config = %head.config_id, url, "push notification delivered");
                self.store.push_done(head.seq).await
            }
            Outcome::Refused(why) => {
                crate::metrics::push_delivery("refused");
                warn!(task = %head.task_id, config = %head.config_id, url, "dropping a push notification: {why}");
                self.store.push_done(head.seq).await
            }
            Outcome::Failed(why) => {
                let attempts = head.attempts.saturating_add(1);
                if attempts >= self.max_attempts {
                    crate::metrics::push_delivery("dropped");
                    warn!(
                        task = %head.task_id,
                        config = %head.config_id,
                        url,
                        attempts,
                        "dropping a push notification after {attempts} failed attempts; the last: {why}"
                    );
                    self.store.push_done(head.seq).await
                } else {
                    crate::metrics::push_delivery("failed");
                    let delay = backoff(attempts, random_unit());
                    debug!(task = %head.task_id, config = %head.config_id, url, attempts, "push delivery failed: {why}");
                    let next_at = now_ms()
                        .saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
                    self.store.push_retry(head.seq, next_at, &why).await
                }
            }
        };
        if let Err(e) = written {
            warn!(error = %e, task = %head.task_id, "cannot update the push outbox");
        }
    }

    /// Checks the webhook again, then POSTs the notification to exactly the checked addresses.
    async fn attempt(&self, config: &TaskPushNotificationConfig, head: &PendingPush) -> Outcome {
        let target = match self.guard.check(&config.url).await {
            Ok(target) => target,
            Err(GuardError::Unresolved(why)) => return Outcome::Failed(why),
            Err(GuardError::Invalid(why) | GuardError::Refused(why)) => {
                return Outcome::Refused(why);
            }
        };
        let authorization = match &config.authentication {
            Some(auth) if !auth.scheme.is_empty() && !auth.credentials.is_empty() => {
                format!("{} {}", auth.scheme, auth.credentials)
            }
            _ => match self.jwt(&config.url, &head.task_id) {
                Ok(token) => format!("Bearer {token}"),
                Err(e) => {
                    return Outcome::Failed(format!("cannot sign the notification's JWT: {e}"));
                }
            },
        };
        let client = match self.clients.get(&target, self.timeout) {
            Ok(client) => client,
            Err(e) => return Outcome::Failed(format!("cannot build an HTTP client: {e}")),
        };
        let mut request = client
            .post(target.url.clone())
            .header(reqwest::header::CONTENT_TYPE, A2A_JSON)
            .header(reqwest::header::AUTHORIZATION, authorization)
            .body(head.body.clone());
        if !config.token.is_empty() {
            request = request.header(TOKEN_HEADER, &config.token);
        }
        let mut trace = reqwest::header::HeaderMap::new();
        crate::telemetry::inject(&mut trace);
        request = request.headers(trace);
        match request.send().await {
            Ok(response) if response.status().is_success() => Outcome::Delivered,
            Ok(response) => Outcome::Failed(format!("the webhook answered {}", response.status())),
            Err(e) => Outcome::Failed(format!("cannot reach the webhook: {}", error_chain(&e))),
        }
    }

    /// A JWT for one notification to `url` about `task`.
    fn jwt(&self, url: &str, task: &TaskId) -> anyhow::Result<String> {
        let iat = now_ms() / 1000;
        let claims = Claims {
            iss: &self.public_url,
            aud: url,
            iat,
            exp: iat.saturating_add(i64::try_from(JWT_LIFETIME.as_secs()).unwrap_or(300)),
            jti: new_id(),
            task_id: task.as_str(),
        };
        let jku = format!("{}{JWKS_PATH}", self.public_url);
        self.key.sign_jwt(&claims, Some(&jku))
    }
}

/// The claims of a notification's JWT.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    aud: &'a str,
    iat: i64,
    exp: i64,
    jti: String,
    #[serde(rename = "taskId")]
    task_id: &'a str,
}

/// The error and its causes, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The delay before attempt `attempts + 1`, after `attempts` failures (at least 1): 1 s
/// doubling to 5 min, then jittered down by up to half with `unit` (in 0..1).
pub(crate) fn backoff(attempts: u32, unit: f64) -> Duration {
    let doublings = attempts.saturating_sub(1).min(20);
    let full = FIRST_BACKOFF
        .saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    full.mul_f64(1.0 - 0.5 * unit)
}

/// A random number in 0..1.
fn random_unit() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::http::{HeaderMap, StatusCode};
    use mew_cards::{AuthenticationInfo, Task, TaskState, TaskStatus, Timestamp};

    use super::*;
    use crate::config::PushConfig;
    use crate::tasks::sqlite::SqliteStore;
    use crate::tasks::store::{OutboxRow, StoredTask};

    /// What a test webhook saw: (path, headers, body), and the statuses it answers with.
    #[derive(Clone, Default)]
    struct Hook {
        seen: Arc<Mutex<Vec<(String, HeaderMap, String)>>>,
        answers: Arc<Mutex<Vec<u16>>>,
    }

    async fn serve(hook: Hook) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = webhook(hook);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    /// [`serve`] over HTTPS, with the test PKI's server certificate in `dir`.
    async fn serve_tls(hook: Hook, dir: &std::path::Path) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let tls = crate::server::tls::server_config(&crate::config::ServerTls {
            cert_file: dir.join("server.pem"),
            key_file: dir.join("server-key.pem"),
            client_ca_file: None,
        })
        .unwrap();
        crate::server::listen::spawn_for_test(listener, Some(tls), webhook(hook));
        url
    }

    fn webhook(hook: Hook) -> axum::Router {
        axum::Router::new().route(
            "/{*path}",
            axum::routing::post(
                move |uri: axum::http::Uri, headers: HeaderMap, body: String| {
                    let hook = hook.clone();
                    async move {
                        hook.seen
                            .lock()
                            .unwrap()
                            .push((uri.path().to_owned(), headers, body));
                        let status = hook.answers.lock().unwrap().pop().unwrap_or(200);
                        StatusCode::from_u16(status).unwrap()
                    }
                },
            ),
        )
    }

    struct Setup {
        _dir: tempfile::TempDir,
        store: Arc<SqliteStore>,
        key: Arc<NodeKey>,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("tasks.db")).unwrap());
        let key = Arc::new(NodeKey::load_or_create(dir.path()).unwrap());
        Setup {
            _dir: dir,
            store,
            key,
        }
    }

    /// Stores task `t` with `config` and `n` notifications `{"n": i}` for it.
    async fn enqueue(store: &SqliteStore, config: &TaskPushNotificationConfig, n: usize) {
        let task = StoredTask {
            task: Task {
                id: "t".into(),
                context_id: "c".into(),
                status: TaskStatus::new(TaskState::Working),
                ..Task::default()
            },
            role: "r".to_owned(),
            owner: None,
            parent: None,
            created: Timestamp::now(),
            private: serde_json::Value::Null,
            attempts: 0,
            generation: 0,
        };
        let rows: Vec<OutboxRow> = (0..n)
            .map(|i| OutboxRow {
                task_id: "t".into(),
                config_id: config.id.clone(),
                body: format!("{{\"n\": {i}}}"),
            })
            .collect();
        store
            .put_with_events(&task, &[], std::slice::from_ref(config), &rows)
            .await
            .unwrap();
    }

    /// Runs a dispatcher until the outbox is empty.
    async fn drain(setup: &Setup, allow: &[&str], max_attempts: u32) {
        drain_with(
            setup,
            allow,
            max_attempts,
            mew_transport::TlsOptions::default(),
        )
        .await;
    }

    /// [`drain`] with clients that trust what `tls` adds.
    async fn drain_with(
        setup: &Setup,
        allow: &[&str],
        max_attempts: u32,
        tls: mew_transport::TlsOptions,
    ) {
        let store: Arc<dyn TaskStore> = setup.store.clone();
        let dispatcher = Arc::new(Dispatcher {
            store: store.clone(),
            wake: Arc::new(Notify::new()),
            guard: crate::push::guard(&PushConfig {
                allow: allow.iter().map(|a| (*a).to_owned()).collect(),
                ..PushConfig::default()
            }),
            key: setup.key.clone(),
            public_url: "https://node.example".to_owned(),
            max_attempts,
            timeout: Duration::from_secs(30),
            clients: Clients::new(tls),
        });
        let stop = CancellationToken::new();
        let running = tokio::spawn(dispatcher.run(stop.clone()));
        for _ in 0..6000 {
            if store.push_heads(1).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
        running.await.unwrap();
        assert_eq!(
            store.push_heads(1).await.unwrap(),
            [],
            "the outbox did not drain"
        );
    }

    fn config(url: &str) -> TaskPushNotificationConfig {
        TaskPushNotificationConfig {
            id: "a".to_owned(),
            task_id: "t".into(),
            url: format!("{url}/hook"),
            token: "tok".to_owned(),
            ..TaskPushNotificationConfig::default()
        }
    }

    #[tokio::test]
    async fn notifications_go_out_in_order_with_token_and_credentials() {
        let hook = Hook::default();
        let url = serve(hook.clone()).await;
        let setup = setup();
        let mut with_credentials = config(&url);
        with_credentials.authentication = Some(AuthenticationInfo {
            scheme: "Basic".to_owned(),
            credentials: "abc".to_owned(),
        });
        enqueue(&setup.store, &with_credentials, 5).await;
        drain(&setup, &["127.0.0.1"], 10).await;
        let seen = hook.seen.lock().unwrap().clone();
        let bodies: Vec<&str> = seen.iter().map(|(_, _, body)| body.as_str()).collect();
        assert_eq!(
            bodies,
            [
                "{\"n\": 0}",
                "{\"n\": 1}",
                "{\"n\": 2}",
                "{\"n\": 3}",
                "{\"n\": 4}"
            ]
        );
        for (path, headers, _) in &seen {
            assert_eq!(path, "/hook");
            assert_eq!(headers["content-type"], A2A_JSON);
            assert_eq!(headers["x-a2a-notification-token"], "tok");
            assert_eq!(headers["authorization"], "Basic abc");
        }
    }

    #[tokio::test]
    async fn a_failing_notification_holds_back_the_later_ones() {
        let hook = Hook::default();
        // Answers are popped from the end: the first request fails.
        *hook.answers.lock().unwrap() = vec![200, 200, 200, 503];
        let url = serve(hook.clone()).await;
        let setup = setup();
        enqueue(&setup.store, &config(&url), 3).await;
        drain(&setup, &["127.0.0.1"], 2).await;
        let seen = hook.seen.lock().unwrap().clone();
        let bodies: Vec<&str> = seen.iter().map(|(_, _, body)| body.as_str()).collect();
        // n=0 is retried before n=1 and n=2 go out.
        assert_eq!(
            bodies,
            ["{\"n\": 0}", "{\"n\": 0}", "{\"n\": 1}", "{\"n\": 2}"]
        );
        // Without credentials of its own, the webhook gets the node's JWT.
        let authorization = seen[0].1["authorization"].to_str().unwrap();
        let token = authorization.strip_prefix("Bearer ").unwrap();
        let header = jsonwebtoken::decode_header(token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(setup.key.kid()));
        assert_eq!(
            header.jku.as_deref(),
            Some("https://node.example/.well-known/jwks.json")
        );
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.set_audience(&[format!("{url}/hook")]);
        validation.set_issuer(&["https://node.example"]);
        let key = jsonwebtoken::DecodingKey::from_jwk(setup.key.jwk()).unwrap();
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["taskId"], "t");
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            300
        );
    }

    #[tokio::test]
    async fn a_notification_is_dropped_after_its_last_attempt() {
        let hook = Hook::default();
        *hook.answers.lock().unwrap() = vec![200, 500, 503];
        let url = serve(hook.clone()).await;
        let setup = setup();
        enqueue(&setup.store, &config(&url), 3).await;
        // One attempt each: a failure drops the notification at once.
        drain(&setup, &["127.0.0.1"], 1).await;
        let seen = hook.seen.lock().unwrap().clone();
        let bodies: Vec<&str> = seen.iter().map(|(_, _, body)| body.as_str()).collect();
        assert_eq!(bodies, ["{\"n\": 0}", "{\"n\": 1}", "{\"n\": 2}"]);
    }

    #[tokio::test]
    async fn an_https_webhook_is_trusted_through_the_configured_ca() {
        let pki = mew_tests::tls::TestPki::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        pki.write(dir.path()).unwrap();
        let hook = Hook::default();
        let url = serve_tls(hook.clone(), dir.path()).await;
        let setup = setup();
        // The system roots alone do not know the test CA: the one attempt fails.
        enqueue(&setup.store, &config(&url), 1).await;
        drain(&setup, &["127.0.0.1"], 1).await;
        assert!(hook.seen.lock().unwrap().is_empty());
        // With `tls.ca_file`'s roots the webhook is reached.
        enqueue(&setup.store, &config(&url), 1).await;
        let tls = mew_transport::TlsOptions {
            extra_roots_pem: Some(pki.ca_pem().into_bytes()),
            ..mew_transport::TlsOptions::default()
        };
        drain_with(&setup, &["127.0.0.1"], 1, tls).await;
        let seen = hook.seen.lock().unwrap().clone();
        let bodies: Vec<&str> = seen.iter().map(|(_, _, body)| body.as_str()).collect();
        assert_eq!(bodies, ["{\"n\": 0}"]);
    }

    #[tokio::test]
    async fn a_webhook_the_guard_refuses_is_never_called() {
        let hook = Hook::default();
        let url = serve(hook.clone()).await;
        let setup = setup();
        enqueue(&setup.store, &config(&url), 2).await;
        drain(&setup, &[], 10).await;
        assert!(hook.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes_with_jitter() {
        let secs = |attempts| backoff(attempts, 0.0).as_secs();
        assert_eq!(
            [
                secs(1),
                secs(2),
                secs(3),
                secs(4),
                secs(9),
                secs(10),
                secs(30)
            ],
            [1, 2, 4, 8, 256, 300, 300]
        );
        assert_eq!(backoff(0, 0.0), Duration::from_secs(1));
        assert_eq!(backoff(3, 1.0), Duration::from_secs(2));
        assert_eq!(backoff(3, 0.5), Duration::from_secs(3));
        assert_eq!(backoff(u32::MAX, 2.0), Duration::from_secs(150));
        assert_eq!(backoff(1, f64::NAN), Duration::from_millis(750));
        for _ in 0..100 {
            let unit = random_unit();
            assert!((0.0..1.0).contains(&unit), "{unit}");
        }
    }
}
