//! Both providers' real HTTP code against the scripted model server (and, for broken streams, a tiny server that replays literal bytes), and the provider-neutral helpers.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use mew_cards::ModelChoice;
use mew_tests::model::{ErrorKind, ScriptedModel, Step, ToolCall, Usage as ScriptedUsage};
use serde_json::json;
use tempfile::TempDir;

use super::anthropic::AnthropicProvider;
use super::openai::OpenAiProvider;
use super::{
    HttpSettings, KeySource, Provider, ProviderConfigError, ProviderDescription, ProviderError,
    ProviderSetup, Providers, resolve_alias,
};
use crate::config::{Config, Sources};
use crate::conversation::{
    Block, ChatMessage, Delta, ModelRequest, ModelResponse, ResultPart, Speaker, StopReason,
    ToolSpec, Usage,
};

/// The two APIs, each test runs against both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Anthropic,
    OpenAi,
}

const KINDS: [Kind; 2] = [Kind::Anthropic, Kind::OpenAi];

/// Fast retries, generous timeouts.
fn settings() -> HttpSettings {
    HttpSettings {
        timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        max_retries: 4,
        retry_backoff: Duration::from_millis(10),
    }
}

/// A provider of `kind` for a server at `base` (no `/v1`), with `key`.
fn provider(kind: Kind, base: &str, key: Option<&str>, http: HttpSettings) -> Arc<dyn Provider> {
    let (var, base_url) = match kind {
        Kind::Anthropic => ("ANTHROPIC_API_KEY", base.to_owned()),
        Kind::OpenAi => ("OPENAI_API_KEY", format!("{base}/v1")),
    };
    let setup = ProviderSetup {
        name: "test".into(),
        base_url,
        api_key: key.map(str::to_owned),
        key_source: KeySource::Env {
            var: var.into(),
            named_by: None,
        },
        models: BTreeMap::new(),
        http,
    };
    match kind {
        Kind::Anthropic => Arc::new(AnthropicProvider::new(setup).unwrap()),
        Kind::OpenAi => Arc::new(OpenAiProvider::new(setup).unwrap()),
    }
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: "You are a test.".into(),
        messages: vec![ChatMessage::user("hello")],
        tools: vec![ToolSpec {
            name: "Read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_tokens: 100,
    }
}

/// Runs one call, collecting the deltas.
async fn call(
    provider: &dyn Provider,
    request: &ModelRequest,
) -> (Result<ModelResponse, ProviderError>, Vec<Delta>) {
    let deltas = Mutex::new(Vec::new());
    let on_delta = |delta: Delta| deltas.lock().unwrap().push(delta);
    let result = provider.complete(request, &on_delta).await;
    (result, deltas.into_inner().unwrap())
}

#[tokio::test]
async fn streams_text_with_deltas_and_usage() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![
            Step::text("Hello, streaming world")
                .with_chunks(3)
                .with_usage(ScriptedUsage::new(10, 5).with_cache(300, 20)),
        ])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("key-1"), settings());
        let (response, deltas) = call(provider.as_ref(), &request()).await;
        let response = response.unwrap();
        assert_eq!(
            response.content,
            [Block::Text {
                text: "Hello, streaming world".into()
            }]
        );
        assert_eq!(response.stop, StopReason::EndTurn);
        let expected = match kind {
            Kind::Anthropic => Usage {
                input: 10,
                output: 5,
                cache_read: 300,
                cache_write: 20,
            },
            // Chat Completions reports no cache writes: they count as input.
            Kind::OpenAi => Usage {
                input: 30,
                output: 5,
                cache_read: 300,
                cache_write: 0,
            },
        };
        assert_eq!(response.usage, Some(expected), "{kind:?}");
        assert_eq!(deltas.len(), 3, "{kind:?}: {deltas:?}");
        let streamed: String = deltas
            .iter()
            .map(|delta| match delta {
                Delta::Text(text) => text.as_str(),
                Delta::ToolUse { .. } => panic!("unexpected {delta:?}"),
            })
            .collect();
        assert_eq!(streamed, "Hello, streaming world");

        let requests = model.requests();
        assert_eq!(requests.len(), 1);
        let sent = &requests[0];
        assert_eq!(sent.body["stream"], true);
        assert_eq!(sent.header("content-type"), Some("application/json"));
        match kind {
            Kind::Anthropic => {
                assert_eq!(sent.header("x-api-key"), Some("key-1"));
                assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(sent.header("authorization"), None);
                assert_eq!(sent.body["system"][0]["cache_control"]["type"], "ephemeral");
            }
            Kind::OpenAi => {
                assert_eq!(sent.header("authorization"), Some("Bearer key-1"));
                assert_eq!(sent.body["stream_options"]["include_usage"], true);
                assert_eq!(sent.body["messages"][0]["role"], "system");
            }
        }
        assert_eq!(sent.system_text(), "You are a test.");
        assert_eq!(sent.tool_names(), ["Read"]);
        model.assert_done();
    }
}

/// A server that sends no usage (some local ones ignore `stream_options`): the answer says
/// the usage is unknown, never zero.
#[tokio::test]
async fn a_server_that_reports_no_usage_gives_none() {
    let model = ScriptedModel::start(vec![Step::text("no counts").without_usage()]).unwrap();
    let provider = provider(Kind::OpenAi, model.base_url(), Some("k"), settings());
    let (response, _) = call(provider.as_ref(), &request()).await;
    assert_eq!(response.unwrap().usage, None);
    model.assert_done();
}

#[tokio::test]
async fn parallel_tool_calls_come_back_in_order_and_are_announced() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![
            Step::tool_calls(vec![
                ToolCall::new("call_1", "Read", json!({"path": "a.txt"})),
                ToolCall::new("call_2", "Read", json!({"path": "b.txt", "lines": [1, 2]})),
            ])
            .with_text("Reading both.")
            .with_chunks(4),
        ])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("k"), settings());
        let (response, deltas) = call(provider.as_ref(), &request()).await;
        let response = response.unwrap();
        assert_eq!(
            response.content,
            [
                Block::Text {
                    text: "Reading both.".into()
                },
                Block::ToolUse {
                    id: "call_1".into(),
                    name: "Read".into(),
                    input: json!({"path": "a.txt"}),
                },
                Block::ToolUse {
                    id: "call_2".into(),
                    name: "Read".into(),
                    input: json!({"path": "b.txt", "lines": [1, 2]}),
                },
            ],
            "{kind:?}"
        );
        assert_eq!(response.stop, StopReason::ToolUse);
        let announced: Vec<&Delta> = deltas
            .iter()
            .filter(|delta| matches!(delta, Delta::ToolUse { .. }))
            .collect();
        assert_eq!(
            announced,
            [
                &Delta::ToolUse {
                    id: "call_1".into(),
                    name: "Read".into()
                },
                &Delta::ToolUse {
                    id: "call_2".into(),
                    name: "Read".into()
                },
            ]
        );
        model.assert_done();
    }
}

#[tokio::test]
async fn a_tool_round_trip_is_accepted_by_the_api() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_9", "Read", json!({"path": "x"})),
            Step::text("It says hi.").expect_tool_results(["call_9"]),
        ])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("k"), settings());
        let mut request = request();
        let (first, _) = call(provider.as_ref(), &request).await;
        let first = first.unwrap();
        request.messages.push(ChatMessage {
            speaker: Speaker::Assistant,
            content: first.content,
        });
        request.messages.push(ChatMessage {
            speaker: Speaker::User,
            content: vec![Block::ToolResult {
                id: "call_9".into(),
                content: vec![ResultPart::Text { text: "hi".into() }],
                is_error: false,
            }],
        });
        let (second, _) = call(provider.as_ref(), &request).await;
        assert_eq!(
            second.unwrap().content,
            [Block::Text {
                text: "It says hi.".into()
            }]
        );
        model.assert_done();
    }
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_then_succeed() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![
            Step::error(429, ErrorKind::RateLimitError, "slow down").with_retry_after(0),
            Step::new(mew_tests::model::Reply {
                error: Some(mew_tests::model::ScriptedError {
                    kind: Some(ErrorKind::OverloadedError),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Step::error(503, ErrorKind::OverloadedError, "busy"),
            Step::text("finally"),
        ])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("k"), settings());
        let (response, _) = call(provider.as_ref(), &request()).await;
        assert_eq!(
            response.unwrap().content,
            [Block::Text {
                text: "finally".into()
            }]
        );
        let statuses: Vec<u16> = model.requests().iter().map(|r| r.status).collect();
        let overloaded = match kind {
            Kind::Anthropic => 529,
            Kind::OpenAi => 503,
        };
        assert_eq!(statuses, [429, overloaded, 503, 200], "{kind:?}");
        model.assert_done();
    }
}

#[tokio::test]
async fn exhausted_retries_are_unavailable() {
    for kind in KINDS {
        let steps = (0..3)
            .map(|_| Step::error(500, ErrorKind::ApiError, "boom"))
            .collect();
        let model = ScriptedModel::start(steps).unwrap();
        let http = HttpSettings {
            max_retries: 2,
            ..settings()
        };
        let provider = provider(kind, model.base_url(), Some("k"), http);
        let (response, _) = call(provider.as_ref(), &request()).await;
        match response.unwrap_err() {
            ProviderError::Unavailable {
                attempts, message, ..
            } => {
                assert_eq!(attempts, 3);
                assert!(message.contains("boom"), "{message}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(model.requests().len(), 3);
        model.assert_done();
    }
}

#[tokio::test]
async fn a_bad_request_is_not_retried() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![Step::error(
            400,
            ErrorKind::InvalidRequestError,
            "max_tokens: too large",
        )])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("k"), settings());
        let (response, _) = call(provider.as_ref(), &request()).await;
        match response.unwrap_err() {
            ProviderError::BadRequest { message, .. } => {
                assert!(message.contains("max_tokens: too large"), "{message}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(model.requests().len(), 1);
        model.assert_done();
    }
}

#[tokio::test]
async fn a_refused_key_is_an_auth_error_naming_the_variable() {
    for kind in KINDS {
        let model = ScriptedModel::with_key(Vec::new(), "right").unwrap();
        let provider = provider(kind, model.base_url(), Some("wrong"), settings());
        let (response, deltas) = call(provider.as_ref(), &request()).await;
        match response.unwrap_err() {
            ProviderError::Auth { message, .. } => {
                let var = match kind {
                    Kind::Anthropic => "ANTHROPIC_API_KEY",
                    Kind::OpenAi => "OPENAI_API_KEY",
                };
                assert!(message.contains(var), "{message}");
                assert!(message.contains("401"), "{message}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert!(deltas.is_empty());
        assert_eq!(model.requests().len(), 1);
        model.assert_done();
    }
}

#[tokio::test]
async fn an_unknown_model_is_reported_with_its_id() {
    for kind in KINDS {
        let model = ScriptedModel::start(vec![
            Step::error(404, ErrorKind::NotFoundError, "model: test-model"),
            // OpenAI-style `model_not_found` code with an unusual status still classifies.
            Step::new(mew_tests::model::Reply {
                error: Some(mew_tests::model::ScriptedError {
                    status: Some(400),
                    kind: Some(ErrorKind::NotFoundError),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        ])
        .unwrap();
        let provider = provider(kind, model.base_url(), Some("k"), settings());
        for _ in 0..2 {
            let (response, _) = call(provider.as_ref(), &request()).await;
            match response.unwrap_err() {
                ProviderError::UnknownModel { model, .. } => assert_eq!(model, "test-model"),
                other => panic!("{kind:?}: {other:?}"),
            }
        }
        assert_eq!(model.requests().len(), 2);
        model.assert_done();
    }
}

#[tokio::test]
async fn a_slow_answer_times_out_without_retrying() {
    for kind in KINDS {
        let model =
            ScriptedModel::start(vec![Step::text("too late").with_delay_ms(30_000)]).unwrap();
        let http = HttpSettings {
            timeout: Duration::from_millis(300),
            ..settings()
        };
        let provider = provider(kind, model.base_url(), Some("k"), http);
        let (response, _) = call(provider.as_ref(), &request()).await;
        assert!(
            matches!(response, Err(ProviderError::Timeout { .. })),
            "{kind:?}: {response:?}"
        );
        assert_eq!(model.requests().len(), 1);
        model.assert_done();
    }
}

#[tokio::test]
async fn a_local_server_gets_no_key() {
    let model = ScriptedModel::start(vec![Step::text("hi")]).unwrap();
    let provider = provider(Kind::OpenAi, model.base_url(), None, settings());
    let (response, _) = call(provider.as_ref(), &request()).await;
    assert_eq!(
        response.unwrap().content,
        [Block::Text { text: "hi".into() }]
    );
    assert_eq!(model.requests()[0].header("authorization"), None);
    model.assert_done();
}

#[tokio::test]
async fn a_connection_refused_is_retried_then_reported() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for kind in KINDS {
        let http = HttpSettings {
            max_retries: 1,
            ..settings()
        };
        let provider = provider(kind, &format!("http://127.0.0.1:{port}"), Some("k"), http);
        let (response, _) = call(provider.as_ref(), &request()).await;
        assert!(
            matches!(response, Err(ProviderError::Connect { .. })),
            "{kind:?}: {response:?}"
        );
    }
}

#[tokio::test]
async fn providers_from_config_call_the_configured_service() {
    let model = ScriptedModel::start(vec![
        Step::text("from config").expect_model("claude-haiku-4-5"),
        Step::text("local").expect_model("qwen3"),
    ])
    .unwrap();
    let dir = TempDir::new().unwrap();
    let file = dir.path().join(".mew/config.yaml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let base = model.base_url();
    std::fs::write(
        &file,
        format!(
            "agent:\n  provider: claude\n  model: haiku\n\
             providers:\n\
             \x20 claude:\n    kind: anthropic\n    base_url: {base}\n    retry_backoff: 10ms\n\
             \x20 local:\n    kind: openai\n    base_url: {base}/v1\n    models: {{sonnet: qwen3}}\n"
        ),
    )
    .unwrap();
    let sources = Sources {
        home: Some(dir.path().to_owned()),
        ..Sources::new(dir.path())
    };
    let config: Config = Config::load(&sources).unwrap().resolve().unwrap();
    let env: HashMap<String, String> = [("ANTHROPIC_API_KEY".to_owned(), "k".to_owned())]
        .into_iter()
        .collect();
    let providers = Providers::from_config(&config, &env).unwrap();

    let mut request = request();
    request.model = providers.resolve_model(&ModelChoice::Inherit, &config.agent.model);
    let (response, _) = call(providers.default().unwrap().as_ref(), &request).await;
    assert_eq!(
        response.unwrap().content,
        [Block::Text {
            text: "from config".into()
        }]
    );

    let local = providers.get("local").unwrap();
    request.model = local.resolve_model("sonnet");
    let (response, _) = call(local.as_ref(), &request).await;
    assert_eq!(
        response.unwrap().content,
        [Block::Text {
            text: "local".into()
        }]
    );
    assert_eq!(model.requests()[1].header("authorization"), None);
    model.assert_done();

    let descriptions: Vec<ProviderDescription> = providers.describe();
    let described: Vec<String> = descriptions.iter().map(ToString::to_string).collect();
    assert_eq!(described.len(), 2);
    assert!(described[0].ends_with("[default]"), "{described:?}");
    let missing = Providers::from_config(&config, &HashMap::new()).unwrap_err();
    assert!(
        matches!(missing, ProviderConfigError::MissingKey { .. }),
        "{missing}"
    );
}

#[test]
fn only_transient_failures_are_retryable() {
    let provider = || "p".to_owned();
    let message = || "m".to_owned();
    let retryable = [
        ProviderError::Unavailable {
            provider: provider(),
            attempts: 5,
            message: message(),
        },
        ProviderError::Timeout {
            provider: provider(),
            seconds: 300,
        },
        ProviderError::Connect {
            provider: provider(),
            url: "u".into(),
            message: message(),
        },
    ];
    let final_ = [
        ProviderError::Auth {
            provider: provider(),
            message: message(),
        },
        ProviderError::UnknownModel {
            provider: provider(),
            model: "x".into(),
            message: message(),
        },
        ProviderError::BadRequest {
            provider: provider(),
            message: message(),
        },
        ProviderError::Protocol {
            provider: provider(),
            message: message(),
        },
        ProviderError::Canceled,
    ];
    assert!(retryable.iter().all(ProviderError::is_retryable));
    assert!(!final_.iter().any(ProviderError::is_retryable));
}

#[test]
fn aliases_resolve_exactly_then_ignoring_case() {
    let table: BTreeMap<String, String> = [
        ("sonnet".to_owned(), "s-1".to_owned()),
        ("Fast".to_owned(), "f-1".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(resolve_alias(&table, "sonnet"), "s-1");
    assert_eq!(resolve_alias(&table, "SONNET"), "s-1");
    assert_eq!(resolve_alias(&table, "fast"), "f-1");
    assert_eq!(resolve_alias(&table, "claude-x"), "claude-x");
}

// ---- Broken streams, from a server that replays literal bytes ----

/// One scripted answer of the replay server: status, body chunks, and whether the connection
/// breaks after them (instead of the body ending).
struct Replay {
    status: u16,
    chunks: Vec<&'static str>,
    breaks: bool,
}

/// Serves `answers` in order on `127.0.0.1`; returns the base URL and the request counter.
async fn replay_server(answers: Vec<Replay>) -> (String, Arc<AtomicUsize>) {
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let handler = move || {
        let answers = answers.clone();
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            let Some(answer) = answers.lock().unwrap().next() else {
                return Response::builder()
                    .status(500)
                    .body(Body::from("script exhausted"))
                    .unwrap();
            };
            let mut items: Vec<Result<Bytes, std::io::Error>> = answer
                .chunks
                .into_iter()
                .map(|chunk| Ok(Bytes::from(chunk)))
                .collect();
            if answer.breaks {
                items.push(Err(std::io::Error::other("connection broken on purpose")));
            }
            Response::builder()
                .status(answer.status)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::iter(items)))
                .unwrap()
        }
    };
    let router = axum::Router::new().fallback(axum::routing::any(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (base, count)
}

const ANTHROPIC_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
const ANTHROPIC_DELTA: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"partial\"}}\n\n";
const ANTHROPIC_END: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
const OPENAI_START: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
const OPENAI_DELTA: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"},\"finish_reason\":null}]}\n\n";
const OPENAI_END: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

fn pieces(kind: Kind) -> (&'static str, &'static str, &'static str) {
    match kind {
        Kind::Anthropic => (ANTHROPIC_START, ANTHROPIC_DELTA, ANTHROPIC_END),
        Kind::OpenAi => (OPENAI_START, OPENAI_DELTA, OPENAI_END),
    }
}

#[tokio::test]
async fn a_stream_cut_short_after_a_delta_is_not_retried() {
    for kind in KINDS {
        let (start, delta, end) = pieces(kind);
        // The body ends cleanly (so every byte arrives) but before the answer is complete.
        let (base, count) = replay_server(vec![
            Replay {
                status: 200,
                chunks: vec![start, delta],
                breaks: false,
            },
            Replay {
                status: 200,
                chunks: vec![start, delta, end],
                breaks: false,
            },
        ])
        .await;
        let provider = provider(kind, &base, Some("k"), settings());
        let (response, deltas) = call(provider.as_ref(), &request()).await;
        let bytes = start.len() + delta.len();
        assert!(
            matches!(&response, Err(ProviderError::Incomplete { message, .. })
                if message.contains(&format!("stopped after {bytes} bytes"))),
            "{kind:?}: {response:?}"
        );
        assert_eq!(deltas, [Delta::Text("partial".into())]);
        assert_eq!(count.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn a_stream_broken_before_any_delta_is_retried() {
    for kind in KINDS {
        let (start, delta, end) = pieces(kind);
        let (base, count) = replay_server(vec![
            Replay {
                status: 200,
                chunks: vec![start],
                breaks: true,
            },
            Replay {
                status: 200,
                chunks: vec![],
                breaks: true,
            },
            Replay {
                status: 200,
                chunks: vec![start, delta, end],
                breaks: false,
            },
        ])
        .await;
        let provider = provider(kind, &base, Some("k"), settings());
        let (response, deltas) = call(provider.as_ref(), &request()).await;
        assert_eq!(
            response.unwrap().content,
            [Block::Text {
                text: "partial".into()
            }]
        );
        assert_eq!(deltas, [Delta::Text("partial".into())]);
        assert_eq!(count.load(Ordering::SeqCst), 3, "{kind:?}");
    }
}

/// A server that answers 200 and then ends its answer short (llama.cpp's does, for some
/// requests) was reached: the error says what arrived, names the URL, and the call is not
/// tried again, since the same request ends the same way.
#[tokio::test]
async fn an_empty_or_short_answer_is_reported_as_such_and_not_retried() {
    for kind in KINDS {
        let (start, _, _) = pieces(kind);
        for (chunks, says) in [
            (vec![], "the answer was empty".to_owned()),
            (
                vec!["not an event stream at all"],
                "held no event".to_owned(),
            ),
            (vec![start], format!("stopped after {} bytes", start.len())),
        ] {
            let (base, count) = replay_server(vec![Replay {
                status: 200,
                chunks,
                breaks: false,
            }])
            .await;
            let provider = provider(kind, &base, Some("k"), settings());
            let (response, _) = call(provider.as_ref(), &request()).await;
            let error = response.unwrap_err();
            let text = error.to_string();
            assert!(
                matches!(error, ProviderError::Incomplete { .. })
                    && text.contains(&says)
                    && text.contains(&base),
                "{kind:?}: {text}"
            );
            assert!(!error.is_retryable());
            assert_eq!(count.load(Ordering::SeqCst), 1, "{kind:?}: {text}");
        }
    }
}

/// A 404 that is not the API's own error means the URL is wrong, not the model: the error
/// names the URL and, for OpenAI-compatible servers, suggests the `/v1` the base URL lacks.
#[tokio::test]
async fn a_404_from_a_wrong_path_names_the_url_and_suggests_v1() {
    let (base, count) = replay_server(vec![Replay {
        status: 404,
        chunks: vec!["404 page not found"],
        breaks: false,
    }])
    .await;
    // Configured without /v1, as users do.
    let setup = ProviderSetup {
        name: "local".into(),
        base_url: base.clone(),
        api_key: None,
        key_source: KeySource::Unset {
            config_key: "providers.local.api_key_env".into(),
        },
        models: BTreeMap::new(),
        http: settings(),
    };
    let provider = OpenAiProvider::new(setup).unwrap();
    let (response, _) = call(&provider, &request()).await;
    let error = response.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, ProviderError::NoEndpoint { .. })
            && text.contains(&format!("{base}/chat/completions"))
            && text.contains(&format!("try base_url: {base}/v1")),
        "{text}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_overloaded_error_event_before_any_delta_is_retried() {
    let (base, count) = replay_server(vec![
        Replay {
            status: 200,
            chunks: vec![
                ANTHROPIC_START,
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            ],
            breaks: false,
        },
        Replay { status: 200, chunks: vec![ANTHROPIC_START, ANTHROPIC_DELTA, ANTHROPIC_END], breaks: false },
    ])
    .await;
    let provider = provider(Kind::Anthropic, &base, Some("k"), settings());
    let (response, _) = call(provider.as_ref(), &request()).await;
    let response = response.unwrap();
    assert_eq!(
        response.usage,
        Some(Usage {
            input: 3,
            output: 2,
            ..Usage::default()
        })
    );
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_silent_stream_hits_the_idle_timeout() {
    for kind in KINDS {
        let (start, _, _) = pieces(kind);
        // Headers and a first event, then nothing: the body never ends.
        let pending = pending_server(start).await;
        let http = HttpSettings {
            idle_timeout: Duration::from_millis(200),
            ..settings()
        };
        let provider = provider(kind, &pending, Some("k"), http);
        let (response, _) = call(provider.as_ref(), &request()).await;
        assert!(
            matches!(response, Err(ProviderError::Timeout { .. })),
            "{kind:?}: {response:?}"
        );
    }
}

/// A server whose answer sends `first` and then never finishes.
async fn pending_server(first: &'static str) -> String {
    let handler = move || async move {
        let head = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(first))]);
        let body = futures_util::StreamExt::chain(head, futures_util::stream::pending());
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(body))
            .unwrap()
    };
    let router = axum::Router::new().fallback(axum::routing::any(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

#[tokio::test]
async fn an_answer_that_is_not_an_event_stream_is_a_protocol_error() {
    let handler = || async {
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(r#"{"id":"msg_1","content":[]}"#))
            .unwrap()
    };
    let router = axum::Router::new().fallback(axum::routing::any(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    for kind in KINDS {
        let provider = provider(kind, &base, Some("k"), settings());
        let (response, _) = call(provider.as_ref(), &request()).await;
        match response.unwrap_err() {
            ProviderError::Protocol { message, .. } => {
                assert!(message.contains("application/json"), "{message}");
                assert!(message.contains("msg_1"), "{message}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
}

#[test]
fn a_setup_never_shows_its_key() {
    let setup = ProviderSetup {
        name: "p".into(),
        base_url: "http://h".into(),
        api_key: Some("sk-very-secret".into()),
        key_source: KeySource::Env {
            var: "K".into(),
            named_by: None,
        },
        models: BTreeMap::new(),
        http: HttpSettings::default(),
    };
    let shown = format!(
        "{setup:?} {:?}",
        AnthropicProvider::new(setup.clone()).unwrap()
    );
    assert!(!shown.contains("very-secret"), "{shown}");
}
