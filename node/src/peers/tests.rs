//! Tests of `Peers` against real HTTP servers on loopback: Mew-style peers with `/agents`, plain
//! A2A agents, closed ports and peers that never answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use mew_cards::{
    AgentCard, AgentSkill, Message, SendMessageRequest, SendMessageResponse, TaskState, join_text,
};
use mew_tests::EchoAgent;
use mew_transport::{AgentTransport, CallContext, ClientOptions, router};
use serde_json::json;
use tokio::net::TcpListener;

use super::*;

/// Serves `app` (built from the server's base URL) on a free loopback port.
async fn serve(app: impl FnOnce(&str) -> Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = app(&base);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// A card for role `name` of the node at `base`, served under `{base}/agents/{name}`.
fn role_card(base: &str, name: &str, description: &str) -> AgentCard {
    AgentCard {
        name: name.to_owned(),
        description: description.to_owned(),
        skills: vec![AgentSkill {
            id: name.to_owned(),
            name: name.to_owned(),
            description: description.to_owned(),
            ..AgentSkill::default()
        }],
        ..EchoAgent::default_card(&format!("{base}/agents/{name}"))
    }
}

/// A Mew-style peer: the front agent at the root, role `echo` under `/agents/echo` and, with
/// `list`, the role list at `/agents`. Returns the base URL and the two agents.
async fn mew_peer(list: bool) -> (String, EchoAgent, EchoAgent) {
    let agents = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&agents);
    let base = serve(move |base| {
        let front = EchoAgent::new(base);
        let role = EchoAgent::with_card(role_card(base, "echo", "Echoes, as a role."));
        *slot.lock().unwrap() = Some((front.clone(), role.clone()));
        let card = role_card(base, "echo", "Echoes, as a role.");
        let mut app = Router::new();
        if list {
            let body = json!({ "agents": [card] });
            app = app.route(
                "/agents",
                get(move || async move { axum::Json(body.clone()) }),
            );
        }
        app.nest("/agents/echo", router(Arc::new(role)))
            .merge(router(Arc::new(front)))
    })
    .await;
    let (front, role) = agents.lock().unwrap().take().unwrap();
    (base, front, role)
}

/// A plain A2A agent: `EchoAgent` at the root and nothing else (`/agents` answers 404).
async fn plain_peer() -> (String, EchoAgent) {
    let agent = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&agent);
    let base = serve(move |base| {
        let echo = EchoAgent::new(base);
        *slot.lock().unwrap() = Some(echo.clone());
        router(Arc::new(echo))
    })
    .await;
    let echo = agent.lock().unwrap().take().unwrap();
    (base, echo)
}

/// A loopback URL where nothing listens.
async fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// A loopback URL that accepts connections and never answers.
async fn silent_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

fn peer(url: &str) -> PeerConfig {
    PeerConfig {
        url: url.to_owned(),
        binding: None,
        timeout: Duration::from_secs(10),
        refresh: Duration::from_secs(300),
        auth: None,
    }
}

fn config(peers: &[(&str, PeerConfig)]) -> BTreeMap<String, PeerConfig> {
    peers
        .iter()
        .map(|(name, config)| ((*name).to_owned(), config.clone()))
        .collect()
}

fn status<'a>(statuses: &'a [PeerStatus], name: &str) -> &'a PeerStatus {
    statuses.iter().find(|status| status.name == name).unwrap()
}

fn roles(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, description)| ((*name).to_owned(), (*description).to_owned()))
        .collect()
}

/// Sends `echo <text>` and returns the completed task's state and artifact text.
async fn echo(agent: &Arc<dyn AgentTransport>, text: &str) -> (TaskState, String) {
    let request = SendMessageRequest::new(Message::user_text(format!("echo {text}")));
    let response = agent
        .send_message(&CallContext::anonymous(), request)
        .await
        .unwrap();
    let SendMessageResponse::Task(task) = response else {
        panic!("expected a task, got {response:?}");
    };
    let artifact = task.artifacts.first().map(|a| join_text(&a.parts));
    (task.status.state, artifact.unwrap_or_default())
}

const ECHO_SKILL: &str = "Echoes text; scripted commands drive task states.";

#[tokio::test]
async fn resolves_a_listed_role_and_its_echo_completes() {
    let (base, front, role) = mew_peer(true).await;
    let peers = Peers::start(&config(&[("box", peer(&base))]), &ClientOptions::default()).await;

    let statuses = peers.list();
    assert_eq!(statuses.len(), 1);
    let status = &statuses[0];
    assert_eq!(status.name, "box");
    assert_eq!(status.url, base);
    assert_eq!(status.state, PeerState::Ok);
    assert_eq!(status.error, None);
    assert_eq!(status.roles, roles(&[("echo", "Echoes, as a role.")]));
    assert_eq!(peers.describe_for_model(), "box/echo: Echoes, as a role.");

    let agent = peers.resolve("box/echo").await.unwrap();
    let card = agent.card().await.unwrap();
    assert_eq!(
        card.supported_interfaces[0].url,
        format!("{base}/agents/echo")
    );
    assert_eq!(
        echo(&agent, "over the wire").await,
        (TaskState::Completed, "over the wire".to_owned())
    );
    // The role's agent ran it, not the front agent.
    assert_eq!((role.task_count(), front.task_count()), (1, 0));

    // The client is built once and reused.
    let again = peers.resolve("box/echo").await.unwrap();
    assert!(Arc::ptr_eq(&agent, &again));
}

#[tokio::test]
async fn without_agents_the_front_cards_skills_are_the_roles_and_cards_are_fetched_lazily() {
    let (base, front, role) = mew_peer(false).await;
    let peers = Peers::start(&config(&[("box", peer(&base))]), &ClientOptions::default()).await;
    let status = &peers.list()[0];
    assert_eq!(status.state, PeerState::Ok);
    // The front agent's skill (EchoAgent's card), not the role card's description.
    assert_eq!(status.roles, roles(&[("echo", ECHO_SKILL)]));

    let agent = peers.resolve("box/echo").await.unwrap();
    let card = agent.card().await.unwrap();
    assert_eq!(card.description, "Echoes, as a role.");
    assert_eq!(
        echo(&agent, "lazy").await,
        (TaskState::Completed, "lazy".to_owned())
    );
    assert_eq!((role.task_count(), front.task_count()), (1, 0));
}

#[tokio::test]
async fn a_plain_a2a_agent_whose_agents_404s_is_reached_through_its_front_card() {
    let (base, echo_agent) = plain_peer().await;
    let peers = Peers::start(
        &config(&[("plain", peer(&base))]),
        &ClientOptions::default(),
    )
    .await;
    let status = &peers.list()[0];
    assert_eq!(status.state, PeerState::Ok);
    assert_eq!(status.error, None);
    assert_eq!(status.roles, roles(&[("echo", ECHO_SKILL)]));
    assert_eq!(
        peers.describe_for_model(),
        format!("plain/echo: {ECHO_SKILL}")
    );

    // No card at /agents/echo: the skill is served by the front agent.
    let agent = peers.resolve("plain/echo").await.unwrap();
    assert_eq!(agent.card().await.unwrap().name, "echo");
    assert_eq!(
        agent.card().await.unwrap().supported_interfaces[0].url,
        base
    );
    assert_eq!(
        echo(&agent, "hi").await,
        (TaskState::Completed, "hi".to_owned())
    );
    assert_eq!(echo_agent.task_count(), 1);
}

#[tokio::test]
async fn an_unreachable_peer_is_reported_with_its_error_while_another_works() {
    let (base, _echo) = plain_peer().await;
    let gone = closed_port().await;
    let peers = Peers::start(
        &config(&[("gone", peer(&gone)), ("up", peer(&base))]),
        &ClientOptions::default(),
    )
    .await;
    let statuses = peers.list();
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["gone", "up"]);

    let down = status(&statuses, "gone");
    assert_eq!(down.state, PeerState::Unreachable);
    assert_eq!(down.url, gone);
    assert!(down.roles.is_empty());
    let error = down.error.clone().unwrap();
    assert!(
        error.contains(&format!(
            "cannot fetch the card at {gone}/.well-known/agent-card.json"
        )),
        "{error}"
    );
    assert!(
        error.to_lowercase().contains("connection refused"),
        "{error}"
    );
    assert_eq!(status(&statuses, "up").state, PeerState::Ok);
    // Only reachable peers' roles are offered to the model.
    assert_eq!(peers.describe_for_model(), format!("up/echo: {ECHO_SKILL}"));

    // Resolving a role of the unreachable peer tries it again and reports the error.
    match peers.resolve("gone/echo").await {
        Err(PeerError::Unreachable { peer, error }) => {
            assert_eq!(peer, "gone");
            assert!(
                error.to_lowercase().contains("connection refused"),
                "{error}"
            );
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    assert!(peers.resolve("up/echo").await.is_ok());
}

#[tokio::test]
async fn a_peer_that_never_answers_times_out_while_the_other_is_ok() {
    let (base, _echo) = plain_peer().await;
    let silent = silent_port().await;
    let peers = Peers::start(
        &config(&[
            (
                "silent",
                PeerConfig {
                    timeout: Duration::from_millis(300),
                    ..peer(&silent)
                },
            ),
            ("up", peer(&base)),
        ]),
        &ClientOptions::default(),
    )
    .await;
    let statuses = peers.list();
    let silent_status = status(&statuses, "silent");
    assert_eq!(silent_status.state, PeerState::Unreachable);
    assert_eq!(
        silent_status.error.as_deref(),
        Some(format!("transport error: fetching the card under {silent} timed out").as_str())
    );
    let up = status(&statuses, "up");
    assert_eq!(up.state, PeerState::Ok);
    assert_eq!(up.roles, roles(&[("echo", ECHO_SKILL)]));
}

/// A peer whose front card and role list are switched by the test.
struct Switchable {
    up: Arc<Mutex<bool>>,
    cards: Arc<Mutex<Vec<AgentCard>>>,
}

async fn switchable_peer() -> (String, Switchable) {
    let up = Arc::new(Mutex::new(true));
    let cards = Arc::new(Mutex::new(Vec::new()));
    let (front_up, list) = (Arc::clone(&up), Arc::clone(&cards));
    let base = serve(move |base| {
        let front = EchoAgent::default_card(base);
        Router::new()
            .route(
                "/.well-known/agent-card.json",
                get(move || {
                    let up = *front_up.lock().unwrap();
                    let front = front.clone();
                    async move {
                        if up {
                            axum::Json(front).into_response()
                        } else {
                            StatusCode::SERVICE_UNAVAILABLE.into_response()
                        }
                    }
                }),
            )
            .route(
                "/agents",
                get(move || {
                    let agents = list.lock().unwrap().clone();
                    async move { axum::Json(json!({ "agents": agents })) }
                }),
            )
    })
    .await;
    (base, Switchable { up, cards })
}

impl Switchable {
    fn set(&self, up: bool, cards: Vec<AgentCard>) {
        *self.up.lock().unwrap() = up;
        *self.cards.lock().unwrap() = cards;
    }
}

#[tokio::test]
async fn refresh_fetches_again_and_refresh_if_stale_only_when_stale() {
    let (base, switch) = switchable_peer().await;
    switch.set(true, vec![role_card(&base, "Plan", "Plans.")]);
    let peers = Peers::start(
        &config(&[
            ("fresh", peer(&base)),
            (
                "stale",
                PeerConfig {
                    refresh: Duration::ZERO,
                    ..peer(&base)
                },
            ),
        ]),
        &ClientOptions::default(),
    )
    .await;
    let first = peers.list();
    assert_eq!(status(&first, "fresh").roles, roles(&[("Plan", "Plans.")]));

    switch.set(
        true,
        vec![
            role_card(&base, "Plan", "Plans."),
            role_card(&base, "Explore", "Explores\n  the code."),
        ],
    );
    peers.refresh_if_stale().await;
    let both = roles(&[("Explore", "Explores\n  the code."), ("Plan", "Plans.")]);
    let second = peers.list();
    // `fresh` keeps its cards for 5 minutes; `stale` is fetched on every call.
    assert_eq!(status(&second, "fresh").roles, roles(&[("Plan", "Plans.")]));
    assert_eq!(
        status(&second, "fresh").fetched_at,
        status(&first, "fresh").fetched_at
    );
    assert_eq!(status(&second, "stale").roles, both);

    peers.refresh("fresh").await.unwrap();
    assert_eq!(status(&peers.list(), "fresh").roles, both);
    assert_eq!(
        peers.describe_for_model(),
        "fresh/Explore: Explores the code.\nfresh/Plan: Plans.\n\
         stale/Explore: Explores the code.\nstale/Plan: Plans."
    );

    // Down: unreachable with the status; up again: ok after a refresh.
    switch.set(false, Vec::new());
    peers.refresh("fresh").await.unwrap();
    let down = peers.list();
    assert_eq!(status(&down, "fresh").state, PeerState::Unreachable);
    assert_eq!(
        status(&down, "fresh").error.as_deref(),
        Some(
            format!(
                "transport error: fetching the card at {base}/.well-known/agent-card.json \
                 answered HTTP 503 Service Unavailable"
            )
            .as_str()
        )
    );
    switch.set(true, vec![role_card(&base, "Plan", "Plans.")]);
    peers.refresh("fresh").await.unwrap();
    assert_eq!(status(&peers.list(), "fresh").state, PeerState::Ok);

    assert_eq!(
        peers.refresh("nobody").await,
        Err(PeerError::UnknownPeer {
            peer: "nobody".into(),
            known: vec!["fresh".into(), "stale".into()],
        })
    );
}

#[tokio::test]
async fn resolve_names_what_is_wrong() {
    let (base, _echo) = plain_peer().await;
    let peers = Peers::start(&config(&[("up", peer(&base))]), &ClientOptions::default()).await;
    // Spawned, so this also checks that resolving can run on any worker thread.
    let error = |target: &'static str| {
        let peers = Arc::clone(&peers);
        async move {
            tokio::spawn(async move { peers.resolve(target).await.map(|_| ()) })
                .await
                .unwrap()
                .unwrap_err()
        }
    };
    for target in ["up", "up/", "/echo", "up/echo/x"] {
        assert_eq!(
            error(target).await,
            PeerError::BadTarget {
                target: target.into()
            }
        );
    }
    let unknown_peer = error("down/echo").await;
    assert_eq!(
        unknown_peer.to_string(),
        "unknown peer `down`; configured peers: up"
    );
    let unknown_role = error("up/Plan").await;
    assert_eq!(
        unknown_role,
        PeerError::UnknownRole {
            peer: "up".into(),
            role: "Plan".into(),
            known: vec!["echo".into()],
        }
    );
    assert_eq!(
        unknown_role.to_string(),
        "peer `up` has no role `Plan`; its roles: echo"
    );
}

#[tokio::test]
async fn a_configured_binding_that_the_card_lacks_makes_the_role_unusable() {
    let (base, switch) = switchable_peer().await;
    let mut card = role_card(&base, "Plan", "Plans.");
    card.supported_interfaces
        .retain(|i| i.protocol_binding == mew_cards::binding::JSONRPC);
    switch.set(true, vec![card]);
    let peers = Peers::start(
        &config(&[(
            "box",
            PeerConfig {
                binding: Some(PeerBinding::Rest),
                ..peer(&base)
            },
        )]),
        &ClientOptions::default(),
    )
    .await;
    match peers.resolve("box/Plan").await {
        Err(PeerError::Unusable { peer, role, error }) => {
            assert_eq!((peer.as_str(), role.as_str()), ("box", "Plan"));
            assert!(error.contains("offers no HTTP+JSON interface"), "{error}");
        }
        other => panic!("expected unusable, got {other:?}"),
    }
}

#[tokio::test]
async fn status_json_lists_each_peer() {
    let (base, _echo) = plain_peer().await;
    let gone = closed_port().await;
    let peers = Peers::start(
        &config(&[("up", peer(&base)), ("gone", peer(&gone))]),
        &ClientOptions::default(),
    )
    .await;
    let mut json = peers.status_json();
    for entry in json.as_array_mut().unwrap() {
        let fetched_at = entry["fetched_at"].take();
        assert!(fetched_at.as_str().unwrap().ends_with('Z'), "{fetched_at}");
    }
    let error = peers.list()[0].error.clone().unwrap();
    assert_eq!(
        json,
        json!([
            {
                "name": "gone",
                "url": gone,
                "state": "unreachable",
                "error": error,
                "roles": [],
                "fetched_at": null,
            },
            {
                "name": "up",
                "url": base,
                "state": "ok",
                "error": null,
                "roles": [{ "name": "echo", "description": ECHO_SKILL }],
                "fetched_at": null,
            },
        ])
    );
}

#[tokio::test]
async fn no_peers_is_an_empty_list() {
    let peers = Peers::start(&BTreeMap::new(), &ClientOptions::default()).await;
    assert!(peers.list().is_empty());
    assert_eq!(peers.describe_for_model(), "");
    assert_eq!(peers.status_json(), json!([]));
}

#[test]
fn one_line_collapses_whitespace() {
    assert_eq!(one_line("  Plans\n\tthe  work. "), "Plans the work.");
    assert_eq!(one_line(""), "");
}
