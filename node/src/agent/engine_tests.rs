//! Tests of the agent loop: the real OpenAI-compatible provider against the scripted model server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mew_cards::PermissionMode;
use mew_tests::model::{ScriptedModel, Step, ToolCall};
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use super::conversation::{Block, ChatMessage, Speaker};
use super::engine::{
    Agent, AgentError, AgentSettings, Observer, Outcome, Resume, Session, close_dangling_calls,
};
use crate::config::PermissionsConfig;
use crate::permission::PermissionEngine;
use crate::provider::openai::OpenAiProvider;
use crate::provider::{HttpSettings, KeySource, Provider, ProviderSetup};
use crate::tools::registry::ToolRegistry;
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// A read-only tool whose calls meet at a barrier: two calls only finish if they run at once.
struct Rendezvous(Arc<Barrier>);

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> String {
        "meets another call".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, _: Value, _: &ToolContext) -> ToolOutput {
        match tokio::time::timeout(Duration::from_secs(10), self.0.wait()).await {
            Ok(_) => ToolOutput::text("met"),
            Err(_) => ToolOutput::error("ran alone: the other call never came"),
        }
    }
}

/// An exec tool that records the order of its calls.
struct Recorder(Arc<Mutex<Vec<i64>>>);

#[async_trait]
impl Tool for Recorder {
    fn name(&self) -> &str {
        "record"
    }
    fn description(&self) -> String {
        "records n".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    }
    fn category(&self) -> Category {
        Category::Exec
    }
    async fn call(&self, input: Value, _: &ToolContext) -> ToolOutput {
        let n = input["n"].as_i64().unwrap_or(-1);
        self.0.lock().unwrap().push(n);
        ToolOutput::text(format!("recorded {n}"))
    }
}

struct Quiet;

impl Observer for Quiet {
    fn text(&self, _: &str) {}
    fn tool_started(&self, _: &str, _: &str, _: &Value) {}
    fn tool_finished(&self, _: &str, _: &str, _: &ToolOutput) {}
}

fn provider(model: &ScriptedModel) -> Arc<dyn Provider> {
    let setup = ProviderSetup {
        name: "scripted".into(),
        base_url: format!("{}/v1", model.base_url()),
        api_key: None,
        key_source: KeySource::Env {
            var: "OPENAI_API_KEY".into(),
            named_by: None,
        },
        models: BTreeMap::new(),
        http: HttpSettings {
            max_retries: 0,
            ..HttpSettings::default()
        },
    };
    Arc::new(OpenAiProvider::new(setup).unwrap())
}

fn agent(model: &ScriptedModel, tools: ToolRegistry, unknown_tool_limit: u32) -> Agent {
    let dir = std::env::temp_dir();
    let permissions = PermissionEngine::new(&PermissionsConfig::default(), &dir, None).unwrap();
    Agent {
        provider: provider(model),
        tools,
        permissions: Arc::new(permissions),
        settings: AgentSettings {
            system: "You are a test agent.".into(),
            model: "test-model".into(),
            max_turns: 10,
            max_tokens: 1024,
            context_window: 200_000,
            compact_at: 0.8,
            unknown_tool_limit,
            mode: PermissionMode::BypassPermissions,
        },
        context: ToolContext {
            cwd: dir,
            env: Arc::default(),
            cancel: CancellationToken::new(),
            task_id: None,
            depth: 0,
            children: None,
            skills: None,
        },
    }
}

fn session(text: &str) -> Session {
    Session {
        messages: vec![ChatMessage::user(text)],
        ..Session::default()
    }
}

fn call(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: Some(id.into()),
        name: name.into(),
        input,
    }
}

/// The tool results of the message at `index`, as (id, is_error).
fn results(session: &Session, index: usize) -> Vec<(String, bool)> {
    session.messages[index]
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult { id, is_error, .. } => Some((id.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn read_only_calls_of_one_answer_run_concurrently() {
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![
            call("a", "rendezvous", json!({})),
            call("b", "rendezvous", json!({})),
        ]),
        Step::text("both met").expect_tool_results(["a", "b"]),
    ])
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Rendezvous(Arc::new(Barrier::new(2)))));
    let agent = agent(&model, tools, 3);
    let mut s = session("meet");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("both met".into()));
    assert_eq!(
        results(&s, 2),
        [("a".to_owned(), false), ("b".to_owned(), false)]
    );
    model.assert_done();
}

#[tokio::test]
async fn other_calls_run_in_order_and_every_call_gets_one_result() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![
            call("c1", "record", json!({"n": 1})),
            call("c2", "missing_tool", json!({})),
            call("c3", "record", json!({"n": 3})),
            call("c4", "record", json!({"n": 4})),
        ]),
        Step::text("done").expect_tool_results(["c1", "c2", "c3", "c4"]),
    ])
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Recorder(order.clone())));
    let agent = agent(&model, tools, 3);
    let mut s = session("record");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(*order.lock().unwrap(), [1, 3, 4]);
    let ids: Vec<(String, bool)> = results(&s, 2);
    assert_eq!(
        ids,
        [
            ("c1".into(), false),
            ("c2".into(), true),
            ("c3".into(), false),
            ("c4".into(), false)
        ],
        "results pair with calls, in call order; the unknown tool gets an error result"
    );
    assert_eq!(s.tool_calls, 4);
    model.assert_done();
}

#[tokio::test]
async fn the_unknown_tool_guard_stops_the_run() {
    for limit in [3, 2] {
        let steps = (0..limit)
            .map(|i| Step::tool_call(format!("u{i}"), "no_such_tool", json!({})))
            .collect();
        let model = ScriptedModel::start(steps).unwrap();
        let agent = agent(&model, ToolRegistry::new(), limit);
        let mut s = session("go");
        match agent.run(&mut s, Resume::Fresh, "", &Quiet).await {
            Err(AgentError::UnknownTools(count, names)) => {
                assert_eq!(count, limit);
                assert_eq!(names, "no_such_tool");
            }
            other => panic!("expected the unknown-tool guard, got {other:?}"),
        }
        // The conversation stays well-formed: the last call has a result.
        let last = s.messages.last().unwrap();
        assert_eq!(last.speaker, Speaker::User);
        assert!(matches!(
            last.content.last(),
            Some(Block::ToolResult { .. })
        ));
        model.assert_done();
    }
}

#[tokio::test]
async fn the_environment_block_rides_on_the_newest_user_message() {
    let model =
        ScriptedModel::start(vec![Step::text("hi").expect_last_user("<env>here</env>")]).unwrap();
    let agent = agent(&model, ToolRegistry::new(), 3);
    let mut s = session("hello");
    agent
        .run(&mut s, Resume::Fresh, "<env>here</env>", &Quiet)
        .await
        .unwrap();
    assert_eq!(
        s.messages[0].text(),
        "hello",
        "the block is not stored in the conversation"
    );
    let first = model.requests();
    assert_eq!(first[0].system_text(), "You are a test agent.");
    model.assert_done();
}

#[test]
fn dangling_calls_are_closed_for_a_fork() {
    let mut s = Session {
        messages: vec![
            ChatMessage::user("start"),
            ChatMessage {
                speaker: Speaker::Assistant,
                content: vec![
                    Block::ToolUse {
                        id: "done".into(),
                        name: "record".into(),
                        input: json!({}),
                    },
                    Block::ToolUse {
                        id: "open".into(),
                        name: "record".into(),
                        input: json!({}),
                    },
                ],
            },
            ChatMessage {
                speaker: Speaker::User,
                content: vec![Block::ToolResult {
                    id: "done".into(),
                    content: vec![],
                    is_error: false,
                }],
            },
        ],
        ..Session::default()
    };
    close_dangling_calls(&mut s);
    assert_eq!(s.messages.len(), 3);
    assert_eq!(
        results(&s, 2),
        [("done".to_owned(), false), ("open".to_owned(), true)]
    );
}

#[tokio::test]
async fn a_long_run_compacts_its_conversation_and_finishes() {
    use mew_tests::model::Usage as Tokens;
    let order = Arc::new(Mutex::new(Vec::new()));
    let record = |n: i64, input: u64| {
        Step::tool_call(format!("r{n}"), "record", json!({"n": n}))
            .with_usage(Tokens::new(input, 10))
    };
    let model = ScriptedModel::start(vec![
        record(1, 500),
        record(2, 900),
        record(3, 1300),
        // 1610 tokens: the next request would pass 80% of the 2000-token window.
        record(4, 1600),
        Step::text("Summary: the user wants 1 to 5 recorded; 1 is done.")
            .expect_tools_exclude(["record"])
            .with_usage(Tokens::new(300, 40)),
        record(5, 400).expect_tool_results(["r2", "r3", "r4"]),
        Step::text("all recorded").expect_tool_results(["r5"]),
    ])
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Recorder(order.clone())));
    let mut agent = agent(&model, tools, 3);
    agent.settings.context_window = 2_000;
    // Six model calls: the summary call is not a turn.
    agent.settings.max_turns = 6;
    let mut s = session("record 1 to 5");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("all recorded".into()));
    model.assert_done();
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5]);
    let requests = model.requests();
    assert!(
        requests[4].tool_names().is_empty(),
        "no tools for the summary"
    );
    assert_eq!(requests[5].tool_result_ids(), ["r2", "r3", "r4"]);
    assert_eq!(s.window.compactions, 1);
    assert_eq!(s.model_calls, 6);
    assert_eq!(s.usage.input, 500 + 900 + 1300 + 1600 + 300 + 400 + 10);
    assert_eq!(s.messages[0].speaker, Speaker::User);
    assert!(
        s.messages[0]
            .text()
            .contains("Summary: the user wants 1 to 5 recorded")
    );
    assert!(!s.messages[0].text().contains("record 1 to 5"));
}
