//! End-to-end tests of push notifications: a real `mew up` delivering a task's events to a
//! webhook on loopback (allowed by `push.allow`), with the config's token and a JWT that
//! verifies against the node's JWKS; the push config operations on both bindings; the SSRF
//! guard refusing loopback webhooks without the allowlist; and notifications pending when the
//! node is killed, delivered after it restarts.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use futures_util::StreamExt;
use mew_cards::{
    AuthenticationInfo, ErrorKind, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTaskPushNotificationConfigsRequest, Message, SendMessageConfiguration, SendMessageRequest,
    StreamResponse, Task, TaskId, TaskPushNotificationConfig, TaskState,
};
use mew_tests::node::{MewNode, command_role, poll_until};
use mew_transport::{AgentTransport, Binding, CallContext, Error};

const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::HttpJson];

/// The bound on any single call in these tests.
const WAIT: Duration = Duration::from_secs(30);

/// The bound on waiting for deliveries: retries back off, so this is generous.
const DELIVERY_WAIT: Duration = Duration::from_secs(180);

/// The project config that lets webhooks reach the test's receiver on loopback.
const ALLOW_LOOPBACK: &str = "push:\n  allow: [\"127.0.0.1\"]\n";

fn ctx() -> CallContext {
    CallContext::anonymous()
}

/// The `upper` role: `tr a-z A-Z` on the message text.
fn upper_role() -> String {
    command_role("upper", "sh -c 'tr a-z A-Z'")
}

/// One request the webhook received.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: String,
    /// The status it was answered with.
    status: u16,
}

/// A webhook receiver on loopback that records every request and answers with `status`.
#[derive(Clone)]
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
    status: Arc<AtomicU16>,
}

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let receiver = Self {
            url,
            received: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
        };
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(record))
            .with_state(receiver.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(receiver)
    }

    /// The deliveries to `path` that were answered 2xx, in the order they came.
    fn accepted(&self, path: &str) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|r| r.path == path && (200..300).contains(&r.status))
            .cloned()
            .collect()
    }

    fn attempts(&self, path: &str) -> usize {
        self.received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// Waits until `path` accepted a final status; returns its accepted events.
    async fn wait_for_final(&self, path: &str) -> anyhow::Result<Vec<(Received, StreamResponse)>> {
        poll_until(
            &format!("a final event delivered to {path}"),
            DELIVERY_WAIT,
            || async {
                let events = events(&self.accepted(path))?;
                let done = events.iter().any(|(_, event)| match event {
                    StreamResponse::StatusUpdate(update) => update.status.state.is_terminal(),
                    StreamResponse::Task(task) => task.status.state.is_terminal(),
                    _ => false,
                });
                Ok(done.then_some(events))
            },
        )
        .await
    }
}

async fn record(
    State(receiver): State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let status = receiver.status.load(Ordering::SeqCst);
    receiver
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Received {
            path: uri.path().to_owned(),
            headers,
            body,
            status,
        });
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Each delivery with its body parsed as a StreamResponse.
fn events(received: &[Received]) -> anyhow::Result<Vec<(Received, StreamResponse)>> {
    received
        .iter()
        .map(|r| {
            let event: StreamResponse = serde_json::from_str(&r.body)
                .with_context(|| format!("a webhook body is not a StreamResponse: {}", r.body))?;
            Ok((r.clone(), event))
        })
        .collect()
}

/// The task state an event reports, if any.
fn state_of(event: &StreamResponse) -> Option<TaskState> {
    match event {
        StreamResponse::Task(task) => Some(task.status.state),
        StreamResponse::StatusUpdate(update) => Some(update.status.state),
        _ => None,
    }
}

/// A request with an inline push config to `url`.
fn with_push(text: &str, url: &str, token: &str) -> SendMessageRequest {
    SendMessageRequest {
        configuration: Some(SendMessageConfiguration {
            task_push_notification_config: Some(TaskPushNotificationConfig {
                url: url.to_owned(),
                token: token.to_owned(),
                ..TaskPushNotificationConfig::default()
            }),
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text(text))
    }
}

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, future)
        .await
        .with_context(|| format!("{what}: no answer within {WAIT:?}"))
}

fn error_kind<T: std::fmt::Debug>(result: Result<T, Error>) -> anyhow::Result<(ErrorKind, String)> {
    match result {
        Err(Error::Protocol(e)) => Ok((e.kind, e.message)),
        other => bail!("expected an A2A error, got {other:?}"),
    }
}

/// Checks the JWT in `authorization` against the node's JWKS: signature, `iss`, `aud`,
/// `taskId`, a short life, and the header's `kid` and `jku`.
async fn verify_jwt(
    node: &MewNode,
    authorization: &str,
    audience: &str,
    task: &TaskId,
) -> anyhow::Result<()> {
    let token = authorization
        .strip_prefix("Bearer ")
        .with_context(|| format!("Authorization is not a bearer token: {authorization}"))?;
    let header = jsonwebtoken::decode_header(token)?;
    let jku = format!("{}/.well-known/jwks.json", node.url());
    ensure!(
        header.jku.as_deref() == Some(jku.as_str()),
        "jku {:?}",
        header.jku
    );
    let kid = header.kid.context("the JWT names no kid")?;
    let (status, jwks) = node.get_json("/.well-known/jwks.json").await?;
    ensure!(status == 200, "GET the JWKS: {status} {jwks}");
    let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks)?;
    let jwk = jwks
        .find(&kid)
        .context("the JWKS has no key with the JWT's kid")?;
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk)?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[node.url()]);
    validation.set_required_spec_claims(&["exp", "iat", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)?.claims;
    ensure!(claims["taskId"] == task.as_str(), "claims {claims}");
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    ensure!((1..=300).contains(&lifetime), "the JWT lives {lifetime} s");
    ensure!(
        claims["jti"].as_str().is_some_and(|j| !j.is_empty()),
        "claims {claims}"
    );
    Ok(())
}

fn header<'a>(received: &'a Received, name: &str) -> &'a str {
    received
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn a_webhook_receives_every_event_in_order_with_token_and_jwt() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let upper = upper_role();
    let node = MewNode::start_with_config(ALLOW_LOOPBACK, &[("upper.md", &upper)]).await?;
    for binding in BINDINGS {
        let agent = node.agent("/agents/upper", binding).await?;
        let card = agent.card().await?;
        ensure!(
            card.capabilities.push_notifications == Some(true),
            "capabilities {:?}",
            card.capabilities
        );

        // Inline on send: the webhook gets what the stream shows, from the first snapshot.
        let path = format!("/hook/{binding:?}");
        let url = format!("{}{path}", receiver.url);
        let stream = bounded(
            "SendStreamingMessage",
            agent.send_streaming_message(&ctx(), with_push("hello push", &url, "tok-1")),
        )
        .await??;
        let streamed: Vec<StreamResponse> = bounded("the stream", stream.collect::<Vec<_>>())
            .await?
            .into_iter()
            .collect::<Result<_, _>>()?;
        let delivered = receiver.wait_for_final(&path).await?;
        let pushed: Vec<StreamResponse> = delivered.iter().map(|(_, e)| e.clone()).collect();
        ensure!(
            pushed == streamed,
            "{binding:?}: the webhook got\n{pushed:#?}\nthe stream showed\n{streamed:#?}"
        );
        let states: Vec<TaskState> = pushed.iter().filter_map(state_of).collect();
        ensure!(
            states
                == [
                    TaskState::Submitted,
                    TaskState::Working,
                    TaskState::Completed
                ],
            "states {states:?}"
        );
        ensure!(
            pushed
                .iter()
                .any(|e| matches!(e, StreamResponse::ArtifactUpdate(a) if a.artifact.parts[0].as_text() == Some("HELLO PUSH"))),
            "no artifact in {pushed:#?}"
        );
        let StreamResponse::Task(first) = &pushed[0] else {
            bail!("the first notification is not the task: {:?}", pushed[0]);
        };
        let task_id = first.id.clone();
        for (received, _) in &delivered {
            ensure!(header(received, "content-type") == "application/a2a+json");
            ensure!(header(received, "x-a2a-notification-token") == "tok-1");
            verify_jwt(&node, header(received, "authorization"), &url, &task_id).await?;
        }
        // What the webhook got folds into the stored task.
        let stored = bounded(
            "GetTask",
            agent.get_task(
                &ctx(),
                GetTaskRequest {
                    id: task_id.clone(),
                    ..GetTaskRequest::default()
                },
            ),
        )
        .await??;
        let mut folded = first.clone();
        for event in &pushed[1..] {
            folded.apply(event);
        }
        ensure!(folded == stored, "folded {folded:#?}\nstored {stored:#?}");

        // The config operations.
        let configs = agent
            .list_task_push_notification_configs(
                &ctx(),
                ListTaskPushNotificationConfigsRequest {
                    task_id: task_id.clone(),
                    ..Default::default()
                },
            )
            .await?;
        ensure!(configs.configs.len() == 1, "{configs:?}");
        let inline = &configs.configs[0];
        ensure!(
            inline.url == url && inline.token == "tok-1" && inline.task_id == task_id,
            "{inline:?}"
        );
        ensure!(!inline.id.is_empty(), "the inline config got no id");

        let created = agent
            .create_task_push_notification_config(
                &ctx(),
                TaskPushNotificationConfig {
                    task_id: task_id.clone(),
                    url: format!("{}/other", receiver.url),
                    authentication: Some(AuthenticationInfo {
                        scheme: "Basic".to_owned(),
                        credentials: "dXNlcjpwdw==".to_owned(),
                    }),
                    ..Default::default()
                },
            )
            .await?;
        ensure!(
            !created.id.is_empty() && created.id != inline.id,
            "{created:?}"
        );
        let get = |id: &str| GetTaskPushNotificationConfigRequest {
            task_id: task_id.clone(),
            id: id.to_owned(),
            ..Default::default()
        };
        let got = agent
            .get_task_push_notification_config(&ctx(), get(&created.id))
            .await?;
        ensure!(got == created, "got {got:?}, created {created:?}");
        let listed = agent
            .list_task_push_notification_configs(
                &ctx(),
                ListTaskPushNotificationConfigsRequest {
                    task_id: task_id.clone(),
                    page_size: 1,
                    ..Default::default()
                },
            )
            .await?;
        ensure!(
            listed.configs.len() == 1 && !listed.next_page_token.is_empty(),
            "{listed:?}"
        );
        let rest = agent
            .list_task_push_notification_configs(
                &ctx(),
                ListTaskPushNotificationConfigsRequest {
                    task_id: task_id.clone(),
                    page_size: 1,
                    page_token: listed.next_page_token.clone(),
                    ..Default::default()
                },
            )
            .await?;
        ensure!(
            rest.configs.len() == 1
                && rest.next_page_token.is_empty()
                && rest.configs[0].id != listed.configs[0].id,
            "{rest:?}"
        );
        agent
            .delete_task_push_notification_config(&ctx(), get(&created.id))
            .await?;
        agent
            .delete_task_push_notification_config(&ctx(), get(&created.id))
            .await?;
        let (kind, _) = error_kind(
            agent
                .get_task_push_notification_config(&ctx(), get(&created.id))
                .await,
        )?;
        ensure!(kind == ErrorKind::TaskNotFound, "{kind:?}");
        let unknown = GetTaskPushNotificationConfigRequest {
            task_id: TaskId::from("no-such-task"),
            id: inline.id.clone(),
            ..Default::default()
        };
        let (kind, _) = error_kind(
            agent
                .get_task_push_notification_config(&ctx(), unknown)
                .await,
        )?;
        ensure!(kind == ErrorKind::TaskNotFound, "{kind:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_webhook_with_its_own_credentials_gets_them_instead_of_a_jwt() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let upper = upper_role();
    let node = MewNode::start_with_config(ALLOW_LOOPBACK, &[("upper.md", &upper)]).await?;
    let agent = node.agent("/agents/upper", Binding::JsonRpc).await?;
    let url = format!("{}/basic", receiver.url);
    let mut request = with_push("creds", &url, "");
    if let Some(config) = request
        .configuration
        .as_mut()
        .and_then(|c| c.task_push_notification_config.as_mut())
    {
        config.authentication = Some(AuthenticationInfo {
            scheme: "Basic".to_owned(),
            credentials: "dXNlcjpwdw==".to_owned(),
        });
    }
    bounded("SendMessage", agent.send_message(&ctx(), request)).await??;
    let delivered = receiver.wait_for_final("/basic").await?;
    for (received, _) in &delivered {
        ensure!(header(received, "authorization") == "Basic dXNlcjpwdw==");
        ensure!(received.headers.get("x-a2a-notification-token").is_none());
    }
    Ok(())
}

#[tokio::test]
async fn loopback_and_private_webhooks_are_refused_without_the_allowlist() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let upper = upper_role();
    let node = MewNode::start_with_config("", &[("upper.md", &upper)]).await?;
    for binding in BINDINGS {
        let agent = node.agent("/agents/upper", binding).await?;
        for url in [
            format!("{}/hook", receiver.url),
            "http://localhost:9/hook".to_owned(),
            "http://10.1.2.3/hook".to_owned(),
            "http://169.254.169.254/latest/meta-data".to_owned(),
            "http://[::1]:9/hook".to_owned(),
            "not a url".to_owned(),
        ] {
            let (kind, message) = error_kind(
                bounded(
                    "SendMessage",
                    agent.send_message(&ctx(), with_push("refused", &url, "")),
                )
                .await?,
            )?;
            ensure!(
                kind == ErrorKind::InvalidParams,
                "{url}: {kind:?} {message}"
            );
            ensure!(message.contains("url"), "{url}: {message}");
        }
        // Nothing was started for the refused messages; a plain one runs.
        let task = match bounded(
            "SendMessage",
            agent.send_message(&ctx(), SendMessageRequest::new(Message::user_text("plain"))),
        )
        .await??
        {
            mew_cards::SendMessageResponse::Task(task) => task,
            other => bail!("expected a task, got {other:?}"),
        };
        let listed = agent
            .list_tasks(&ctx(), mew_cards::ListTasksRequest::default())
            .await?;
        ensure!(
            listed
                .tasks
                .iter()
                .all(|t| t.history[0].text() != "refused"),
            "a refused message started a task"
        );
        let (kind, message) = error_kind(
            agent
                .create_task_push_notification_config(
                    &ctx(),
                    TaskPushNotificationConfig {
                        task_id: task.id.clone(),
                        url: format!("{}/hook", receiver.url),
                        ..Default::default()
                    },
                )
                .await,
        )?;
        ensure!(
            kind == ErrorKind::InvalidParams && message.contains("loopback"),
            "{kind:?} {message}"
        );
    }
    ensure!(
        receiver.attempts("/hook") == 0,
        "the refused webhook was called"
    );
    Ok(())
}

#[tokio::test]
async fn notifications_pending_at_a_crash_are_delivered_after_the_restart() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.status.store(503, Ordering::SeqCst);
    let upper = upper_role();
    let mut node = MewNode::start_with_config(ALLOW_LOOPBACK, &[("upper.md", &upper)]).await?;
    let agent = node.agent("/agents/upper", Binding::JsonRpc).await?;
    let url = format!("{}/down", receiver.url);
    let task: Task = match bounded(
        "SendMessage",
        agent.send_message(&ctx(), with_push("while down", &url, "tok")),
    )
    .await??
    {
        mew_cards::SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}",
        task.status
    );
    // The webhook was tried and refused the first notification: nothing went through.
    poll_until("a refused delivery", DELIVERY_WAIT, || async {
        Ok((receiver.attempts("/down") > 0).then_some(()))
    })
    .await?;
    node.kill_hard().await?;
    ensure!(receiver.accepted("/down").is_empty());

    receiver.status.store(200, Ordering::SeqCst);
    node.launch().await?;
    let delivered = receiver.wait_for_final("/down").await?;
    let pushed: Vec<StreamResponse> = delivered.iter().map(|(_, e)| e.clone()).collect();
    let states: Vec<TaskState> = pushed.iter().filter_map(state_of).collect();
    ensure!(
        states
            == [
                TaskState::Submitted,
                TaskState::Working,
                TaskState::Completed
            ],
        "states {states:?} in {pushed:#?}"
    );
    let StreamResponse::Task(first) = &pushed[0] else {
        bail!("the first notification is not the task: {:?}", pushed[0]);
    };
    ensure!(first.id == task.id);
    let mut folded = first.clone();
    for event in &pushed[1..] {
        folded.apply(event);
    }
    ensure!(folded == task, "folded {folded:#?}\nanswered {task:#?}");
    for (received, _) in &delivered {
        verify_jwt(&node, header(received, "authorization"), &url, &task.id).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_task_running_at_a_crash_tells_its_webhook_it_failed() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let sleeper = command_role("sleeper", "sh -c 'sleep 600'");
    let mut node = MewNode::start_with_config(ALLOW_LOOPBACK, &[("sleeper.md", &sleeper)]).await?;
    let agent = node.agent("/agents/sleeper", Binding::HttpJson).await?;
    let url = format!("{}/crash", receiver.url);
    let mut request = with_push("sleep", &url, "tok");
    if let Some(configuration) = request.configuration.as_mut() {
        configuration.return_immediately = true;
    }
    let task = match bounded("SendMessage", agent.send_message(&ctx(), request)).await?? {
        mew_cards::SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };
    poll_until("WORKING delivered", DELIVERY_WAIT, || async {
        let events = events(&receiver.accepted("/crash"))?;
        Ok(events
            .iter()
            .any(|(_, e)| state_of(e) == Some(TaskState::Working))
            .then_some(()))
    })
    .await?;
    node.kill_hard().await?;
    node.launch().await?;
    let delivered = receiver.wait_for_final("/crash").await?;
    let states: Vec<TaskState> = delivered.iter().filter_map(|(_, e)| state_of(e)).collect();
    ensure!(
        states == [TaskState::Submitted, TaskState::Working, TaskState::Failed],
        "states {states:?}"
    );
    let Some((_, StreamResponse::StatusUpdate(failed))) = delivered.last() else {
        bail!("the last notification is not a status update: {delivered:?}");
    };
    ensure!(failed.task_id == task.id);
    let reason = failed
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    ensure!(reason.contains("restarted"), "reason {reason:?}");
    Ok(())
}

#[tokio::test]
async fn a_webhook_gets_each_event_once_in_order_when_the_replica_running_the_task_is_killed()
-> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let url = format!("{}/replicas", receiver.url);
    let db = mew_tests::postgres::database().await?;
    let dir = tempfile::tempdir()?;
    let gate = dir.path().join("gate");
    // Runs again with the same input on the replica that takes it over.
    let role = format!(
        "---\nname: gated\ndescription: Waits for a file.\nresumable: true\n\
         command: \"sh -c 'echo started; while [ ! -f {} ]; do sleep 0.05; done; echo passed'\"\n\
         ---\nA resumable command role.\n",
        gate.display()
    );
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut node = MewNode::new()?;
        node.write_config(&format!("{ALLOW_LOOPBACK}store:\n  lease: 2s\n"))?;
        node.write_role("gated.md", &role)?;
        node.set_env("MEW_STORE_URL", &db);
        node.launch().await?;
        replicas.push(node);
    }
    let agent = replicas[0].agent("/agents/gated", Binding::JsonRpc).await?;
    let mut request = with_push("go", &url, "tok");
    if let Some(configuration) = request.configuration.as_mut() {
        configuration.return_immediately = true;
    }
    let task = match bounded("SendMessage", agent.send_message(&ctx(), request)).await?? {
        mew_cards::SendMessageResponse::Task(task) => task,
        other => bail!("expected a task, got {other:?}"),
    };

    // What the first replica logged is delivered before it dies.
    let (client, connection) = tokio_postgres::connect(&db, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let logged = async || -> anyhow::Result<Vec<StreamResponse>> {
        let rows = client
            .query(
                "SELECT event FROM task_events WHERE task_id = $1 ORDER BY generation",
                &[&task.id.as_str()],
            )
            .await?;
        rows.iter()
            .map(|row| Ok(serde_json::from_str(row.get::<_, &str>(0))?))
            .collect()
    };
    // Delivered and marked so (the outbox empty): a notification the receiver has but the
    // dying replica had not yet marked would be delivered again by the survivor, at least
    // once being all a crash between the two allows.
    let waiting = async || -> anyhow::Result<i64> {
        let row = client
            .query_one(
                "SELECT count(*) FROM push_outbox WHERE task_id = $1",
                &[&task.id.as_str()],
            )
            .await?;
        Ok(row.get(0))
    };
    poll_until(
        "the first replica's events are delivered",
        DELIVERY_WAIT,
        || async {
            let logged = logged().await?;
            let pushed = events(&receiver.accepted("/replicas"))?;
            let started = logged
                .iter()
                .any(|e| state_of(e) == Some(TaskState::Working));
            let done = started && pushed.len() == logged.len() && waiting().await? == 0;
            Ok(done.then_some(()))
        },
    )
    .await?;
    replicas[0].kill_hard().await?;
    std::fs::write(&gate, "")?;

    // The other replica finishes it, and the webhook has every logged event, once, in order.
    let delivered = match receiver.wait_for_final("/replicas").await {
        Ok(delivered) => delivered,
        // What the survivor did (took the task over, ran it, pushed), for a failure to show.
        Err(e) => bail!(
            "{e:#}\nlogged: {:?}\nthe surviving replica's log:\n{}",
            logged().await?.iter().map(state_of).collect::<Vec<_>>(),
            replicas[1].log()
        ),
    };
    let pushed: Vec<StreamResponse> = delivered.into_iter().map(|(_, e)| e).collect();
    let logged = logged().await?;
    ensure!(pushed == logged, "pushed {pushed:#?}\nlogged {logged:#?}");
    ensure!(
        state_of(pushed.last().context("nothing pushed")?) == Some(TaskState::Completed),
        "{pushed:#?}"
    );
    Ok(())
}
