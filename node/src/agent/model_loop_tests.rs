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

use super::model_loop::{Agent, Observer, Outcome, Resume};
use super::session::{AgentError, AgentSettings, Session, close_dangling_calls};
use crate::config::PermissionsConfig;
use crate::conversation::{Block, ChatMessage, Speaker};
use crate::permission::PermissionPolicy;
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
    let permissions = PermissionPolicy::new(&PermissionsConfig::default(), &dir, None).unwrap();
    Agent {
        provider: provider(model),
        tools,
        tool_source: None,
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
            scope: None,
            call_id: None,
            news: None,
            sampler: None,
            can_ask_user: false,
            principal: None,
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
    let mut agent = agent(&model, tools, 3);
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
    let mut agent = agent(&model, tools, 3);
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
        let mut agent = agent(&model, ToolRegistry::new(), limit);
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
    let mut agent = agent(&model, ToolRegistry::new(), 3);
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

// Hooks at the dispatch points of the loop: real `sh` scripts, as a user would write them.

/// The hooks of a run from `rules` (a JSON list of `hooks.yaml` rules), working in `dir`.
fn run_hooks(dir: &std::path::Path, rules: Value) -> Arc<crate::hooks::RunHooks> {
    use crate::hooks::rules::{Format, RuleSource, Scope, parse_mew};
    let source = Arc::new(RuleSource {
        path: dir.join("hooks.yaml"),
        scope: Scope::User,
        format: Format::Mew,
        hash: String::new(),
        plugin_root: None,
    });
    let (rules, problems) = parse_mew(&json!({ "hooks": rules }).to_string(), &source);
    assert_eq!(problems, [], "the test's rules must compile");
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
    let settings = crate::hooks::HookSettings {
        env: Arc::new(std::collections::HashMap::from([("PATH".to_owned(), path)])),
        extra_env: Vec::new(),
        project_dir: dir.to_owned(),
        ledger_dir: None,
        transcript_dir: None,
    };
    let dispatcher = crate::hooks::HookDispatcher::new(rules, settings).unwrap();
    Arc::new(crate::hooks::RunHooks {
        dispatcher: Arc::new(dispatcher),
        ctx: crate::hooks::HookContext::new("context-1", dir).unwrap(),
        report: None,
    })
}

fn shell_hook(name: &str, event: &str, command: &str) -> Value {
    json!({"name": name, "event": event, "action": {"type": "shell", "command": command}})
}

/// A hook that prints `output` (a JSON object) on stdout.
fn json_hook(name: &str, event: &str, output: &Value) -> Value {
    shell_hook(name, event, &format!("printf '%s\\n' '{output}'"))
}

/// An agent with the `record` tool and `rules` as its hooks.
fn hooked_agent(
    model: &ScriptedModel,
    dir: &std::path::Path,
    rules: Value,
) -> (Agent, Arc<Mutex<Vec<i64>>>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Recorder(order.clone())));
    let mut agent = agent(model, tools, 3);
    agent.context.scope = crate::agent::scope::RunScope {
        hooks: Some(run_hooks(dir, rules)),
        ..Default::default()
    }
    .into_context();
    (agent, order)
}

#[tokio::test]
async fn a_pre_tool_use_block_refuses_the_call_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("refused").expect_last_user("[hook guard] no recording today"),
    ])
    .unwrap();
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook(
            "guard",
            "PreToolUse",
            "echo 'no recording today' >&2; exit 2"
        )]),
    );
    let mut s = session("record 1");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("refused".into()));
    assert!(order.lock().unwrap().is_empty(), "the tool must not run");
    assert_eq!(results(&s, 2), [("c1".to_owned(), true)]);
    model.assert_done();
}

#[tokio::test]
async fn a_pre_tool_use_hook_rewrites_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("done").expect_last_user("recorded 7"),
    ])
    .unwrap();
    let output =
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"n": 7}}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("rewrite", "PreToolUse", &output)]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(*order.lock().unwrap(), [7]);
    model.assert_done();
}

#[tokio::test]
async fn a_pre_tool_use_ask_asks_even_where_the_mode_allows() {
    let dir = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start(vec![Step::tool_call("c1", "record", json!({"n": 1}))]).unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "ask", "permissionDecisionReason": "check with a human"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("asker", "PreToolUse", &output)]),
    );
    assert_eq!(agent.settings.mode, PermissionMode::BypassPermissions);
    let mut s = session("record 1");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    let Outcome::NeedsApproval(pending) = outcome else {
        panic!("expected a question, got {outcome:?}");
    };
    assert_eq!(pending.id, "c1");
    assert!(
        pending.question.contains("check with a human"),
        "{}",
        pending.question
    );
    assert!(order.lock().unwrap().is_empty());
    model.assert_done();
}

#[tokio::test]
async fn a_pre_tool_use_deny_refuses_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("denied").expect_last_user("[hook denier] not this one"),
    ])
    .unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "not this one"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("denier", "PreToolUse", &output)]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert!(order.lock().unwrap().is_empty());
    assert_eq!(results(&s, 2), [("c1".to_owned(), true)]);
    model.assert_done();
}

#[tokio::test]
async fn a_pre_tool_use_allow_skips_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("done").expect_tool_results(["c1"]),
    ])
    .unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("allower", "PreToolUse", &output)]),
    );
    // In the default mode an exec call needs approval; the hook's allow skips it.
    agent.settings.mode = PermissionMode::Default;
    let mut s = session("record 1");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("done".into()));
    assert_eq!(*order.lock().unwrap(), [1]);
    model.assert_done();
}

#[tokio::test]
async fn without_hooks_the_default_mode_asks_for_an_exec_call() {
    // The counterpart of the test above: the question the hook's allow skips.
    let model =
        ScriptedModel::start(vec![Step::tool_call("c1", "record", json!({"n": 1}))]).unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Recorder(Arc::default())));
    let mut agent = agent(&model, tools, 3);
    agent.settings.mode = PermissionMode::Default;
    let mut s = session("record 1");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert!(matches!(outcome, Outcome::NeedsApproval(_)), "{outcome:?}");
}

#[tokio::test]
async fn post_tool_use_context_and_blocks_reach_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("noted")
            .expect_last_user("remember the milk")
            .expect_last_user("that was too small"),
    ])
    .unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
        "additionalContext": "remember the milk"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([
            json_hook("context", "PostToolUse", &output),
            shell_hook(
                "critic",
                "PostToolUse",
                "echo 'that was too small' >&2; exit 2"
            ),
        ]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(*order.lock().unwrap(), [1]);
    let text = s.messages[2]
        .content
        .iter()
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => Some(format!("{content:?}")),
            _ => None,
        })
        .unwrap();
    assert!(text.contains("recorded 1"), "{text}");
    assert!(text.contains("remember the milk"), "{text}");
    // A block after the call is feedback: its reason rides with the result.
    assert!(text.contains("that was too small"), "{text}");
    model.assert_done();
}

#[tokio::test]
async fn a_stop_block_makes_the_run_go_on_once() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("blocked-once");
    let script = format!(
        "if [ -e '{0}' ]; then exit 0; fi; touch '{0}'; echo 'check the tests first' >&2; exit 2",
        marker.display()
    );
    let model = ScriptedModel::start(vec![
        Step::text("finished"),
        Step::text("tests pass").expect_last_user("check the tests first"),
    ])
    .unwrap();
    let (mut agent, _) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook("gate", "Stop", &script)]),
    );
    let mut s = session("do it");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("tests pass".into()));
    assert_eq!(s.model_calls, 2);
    model.assert_done();
}

#[tokio::test]
async fn stop_blocks_in_a_row_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = crate::hooks::MAX_STOP_BLOCKS;
    let steps = (0..=blocks)
        .map(|i| Step::text(format!("answer {i}")))
        .collect();
    let model = ScriptedModel::start(steps).unwrap();
    let (mut agent, _) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook("never", "Stop", "echo 'not yet' >&2; exit 2")]),
    );
    agent.settings.max_turns = blocks + 5;
    let mut s = session("do it");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered(format!("answer {blocks}")));
    assert_eq!(s.model_calls, u64::from(blocks) + 1);
    model.assert_done();
}

#[tokio::test]
async fn continue_false_from_a_pre_tool_use_hook_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start(vec![Step::tool_call("c1", "record", json!({"n": 1}))]).unwrap();
    let output = json!({"continue": false, "stopReason": "budget exhausted"});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("budget", "PreToolUse", &output)]),
    );
    let mut s = session("record 1");
    let error = agent
        .run(&mut s, Resume::Fresh, "", &Quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, AgentError::HookStopped(reason) if reason == "budget exhausted"),
        "{error:?}"
    );
    assert!(order.lock().unwrap().is_empty());
    assert_eq!(results(&s, 2), [("c1".to_owned(), true)]);
    model.assert_done();
}

#[tokio::test]
async fn pre_tool_use_context_rides_with_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("done").expect_last_user("the record is shared"),
    ])
    .unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "additionalContext": "the record is shared"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("note", "PreToolUse", &output)]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(*order.lock().unwrap(), [1]);
    model.assert_done();
}

#[tokio::test]
async fn pre_user_message_context_reaches_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})).expect_last_user("turn 1 of the run"),
        Step::text("done").expect_last_user("turn 2 of the run"),
    ])
    .unwrap();
    let script = r#"iter=$(sed -n 's/.*"iter":\([0-9]*\).*/\1/p'); printf '{"hookSpecificOutput": {"hookEventName": "PreUserMessage", "additionalContext": "turn %s of the run"}}\n' "$iter""#;
    let (mut agent, _) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook("turns", "PreUserMessage", script)]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    model.assert_done();
}

#[tokio::test]
async fn a_permission_question_is_a_notification() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notifications");
    let model =
        ScriptedModel::start(vec![Step::tool_call("c1", "record", json!({"n": 1}))]).unwrap();
    let (mut agent, _) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook(
            "notify",
            "Notification",
            &format!("cat >> '{}'", log.display())
        )]),
    );
    agent.settings.mode = PermissionMode::Default;
    let mut s = session("record 1");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert!(matches!(outcome, Outcome::NeedsApproval(_)), "{outcome:?}");
    let logged: Value = serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(logged["notification_type"], "permission_prompt");
    assert!(
        logged["message"].as_str().unwrap().contains("record"),
        "{logged}"
    );
    model.assert_done();
}

#[tokio::test]
async fn a_pre_tool_use_allow_does_not_lift_a_deny_rule() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("refused").expect_last_user("permission denied"),
    ])
    .unwrap();
    let output = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow"}});
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([json_hook("allower", "PreToolUse", &output)]),
    );
    let config = PermissionsConfig {
        deny: vec![crate::permission::rules::Rule::parse("record").unwrap()],
        ..PermissionsConfig::default()
    };
    agent.permissions = Arc::new(PermissionPolicy::new(&config, dir.path(), None).unwrap());
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert!(order.lock().unwrap().is_empty());
    assert_eq!(results(&s, 2), [("c1".to_owned(), true)]);
    model.assert_done();
}

#[tokio::test]
async fn compaction_hooks_see_it_and_pre_compact_guides_the_summary() {
    use mew_tests::model::Usage as Tokens;
    let dir = tempfile::tempdir().unwrap();
    let pre = dir.path().join("pre-compact.json");
    let post = dir.path().join("post-compact.json");
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
        Step::text("Summary: 1 to 4 recorded.")
            .expect_tools_exclude(["record"])
            .expect_last_user("Additional guidance for this summary:\nkeep every number")
            .with_usage(Tokens::new(300, 40)),
        Step::text("all recorded").expect_tool_results(["r2", "r3", "r4"]),
    ])
    .unwrap();
    let guidance = r#"{"hookSpecificOutput": {"hookEventName": "PreCompact", "additionalContext": "keep every number"}}"#;
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([
            shell_hook(
                "before",
                "PreCompact",
                &format!("cat > '{}'; printf '%s\\n' '{guidance}'", pre.display())
            ),
            shell_hook(
                "after",
                "PostCompact",
                &format!("cat > '{}'", post.display())
            ),
        ]),
    );
    agent.settings.context_window = 2_000;
    let mut s = session("record 1 to 4");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("all recorded".into()));
    model.assert_done();
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4]);
    assert_eq!(s.window.compactions, 1);

    let pre: Value = serde_json::from_str(&std::fs::read_to_string(&pre).unwrap()).unwrap();
    assert_eq!(pre["hook_event_name"], "PreCompact");
    assert_eq!(pre["trigger"], "auto");
    assert_eq!(pre["session_id"], "context-1");
    let before = pre["before_tokens"].as_u64().unwrap();
    assert!(before >= 1_600, "{pre}");

    let post: Value = serde_json::from_str(&std::fs::read_to_string(&post).unwrap()).unwrap();
    assert_eq!(post["hook_event_name"], "PostCompact");
    assert_eq!(post["trigger"], "auto");
    assert_eq!(post["before_tokens"].as_u64(), Some(before));
    let after = post["after_tokens"].as_u64().unwrap();
    assert!(0 < after && after < before, "{post}");
}

#[tokio::test]
async fn without_compaction_the_compaction_hooks_do_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("compactions");
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("done"),
    ])
    .unwrap();
    let (mut agent, _) = hooked_agent(
        &model,
        dir.path(),
        json!([
            shell_hook(
                "before",
                "PreCompact",
                &format!("cat >> '{}'", log.display())
            ),
            shell_hook(
                "after",
                "PostCompact",
                &format!("cat >> '{}'", log.display())
            ),
        ]),
    );
    let mut s = session("record 1");
    agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    model.assert_done();
    assert_eq!(s.window.compactions, 0);
    assert!(!log.exists(), "no compaction, no compaction hooks");
}

#[tokio::test]
async fn each_call_meets_its_pre_tool_use_hooks_once_across_an_approval() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![
            call("c1", "record", json!({"n": 1})),
            call("c2", "record", json!({"n": 2})),
        ]),
        Step::text("both recorded")
            .expect_tool_results(["c1", "c2"])
            .expect_last_user("first call checked")
            .expect_last_user("recorded 20"),
    ])
    .unwrap();
    // The hook logs each call it sees; it asks about n=1 and rewrites n=2 to 20.
    let ask = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "ask", "permissionDecisionReason": "check n=1",
        "additionalContext": "first call checked"}});
    let rewrite = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "updatedInput": {"n": 20}}});
    let command = format!(
        "input=$(cat); printf '%s\\n' \"$input\" | sed -n 's/.*\"tool_use_id\":\"\\([^\"]*\\)\".*/\\1/p' >> {log}; \
         case \"$input\" in *'\"n\":1'*) printf '%s\\n' '{ask}';; *) printf '%s\\n' '{rewrite}';; esac",
        log = log.display()
    );
    let (mut agent, order) = hooked_agent(
        &model,
        dir.path(),
        json!([shell_hook("checker", "PreToolUse", &command)]),
    );
    agent.settings.mode = PermissionMode::BypassPermissions;
    let mut s = session("record both");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    let Outcome::NeedsApproval(pending) = outcome else {
        panic!("expected a question, got {outcome:?}");
    };
    assert_eq!(pending.id, "c1");
    // What the hooks said travels with the task's state (it is serialized there).
    let pending: super::model_loop::PendingCall =
        serde_json::from_value(serde_json::to_value(&pending).unwrap()).unwrap();
    let resume = Resume::Approval {
        pending: Box::new(pending),
        approved: true,
        reason: String::new(),
    };
    let outcome = agent.run(&mut s, resume, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("both recorded".into()));
    assert_eq!(*order.lock().unwrap(), [1, 20]);
    // The hooks of one answer's calls run concurrently: their lines come in any order.
    let logged = std::fs::read_to_string(&log).unwrap();
    let mut seen: Vec<&str> = logged.lines().collect();
    seen.sort_unstable();
    assert_eq!(seen, ["c1", "c2"], "{logged}");
    model.assert_done();
}

/// A read-only tool that counts its calls.
struct Look(Arc<Mutex<u32>>);

#[async_trait]
impl Tool for Look {
    fn name(&self) -> &str {
        "look"
    }
    fn description(&self) -> String {
        "looks".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, _: Value, _: &ToolContext) -> ToolOutput {
        *self.0.lock().unwrap() += 1;
        ToolOutput::text("seen")
    }
}

fn tool_use(id: &str, name: &str, input: Value) -> Block {
    Block::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

fn tool_result(id: &str, text: &str) -> Block {
    Block::ToolResult {
        id: id.into(),
        content: vec![crate::conversation::ResultPart::Text { text: text.into() }],
        is_error: false,
    }
}

/// The text of the result of call `id` in the session.
fn result_text(session: &Session, id: &str) -> (String, bool) {
    session
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            Block::ToolResult {
                id: found,
                content,
                is_error,
            } if found == id => Some((
                content
                    .iter()
                    .map(|part| match part {
                        crate::conversation::ResultPart::Text { text } => text.clone(),
                        crate::conversation::ResultPart::Image { .. } => String::new(),
                    })
                    .collect(),
                *is_error,
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test]
async fn a_recovered_run_runs_interrupted_reads_again_and_tells_the_model_of_other_calls() {
    let looks = Arc::new(Mutex::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::start(vec![
        Step::text("carried on").expect_tool_results(["c1", "c2", "c3"]),
    ])
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Look(looks.clone())));
    tools.register(Arc::new(Recorder(order.clone())));
    let mut agent = agent(&model, tools, 3);
    // A checkpoint taken after the first call's result: the other two were under way.
    let mut s = Session {
        messages: vec![
            ChatMessage::user("go"),
            ChatMessage {
                speaker: Speaker::Assistant,
                content: vec![
                    tool_use("c1", "look", json!({})),
                    tool_use("c2", "record", json!({"n": 2})),
                    tool_use("c3", "look", json!({})),
                ],
            },
            ChatMessage {
                speaker: Speaker::User,
                content: vec![tool_result("c1", "seen before")],
            },
        ],
        model_calls: 1,
        ..Session::default()
    };
    let outcome = agent
        .run(&mut s, Resume::Recovered, "", &Quiet)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Answered("carried on".into()));
    assert_eq!(
        *looks.lock().unwrap(),
        1,
        "only the unanswered read runs again"
    );
    assert!(
        order.lock().unwrap().is_empty(),
        "the exec call is not run again"
    );
    assert_eq!(result_text(&s, "c1"), ("seen before".to_owned(), false));
    assert_eq!(
        result_text(&s, "c2"),
        (super::model_loop::INTERRUPTED.to_owned(), true)
    );
    assert_eq!(result_text(&s, "c3"), ("seen".to_owned(), false));
    // The model was asked again with all three results.
    model.assert_done();
}

/// Records what each checkpoint held: the messages, the results, and the exec calls run.
struct Checkpoints {
    order: Arc<Mutex<Vec<i64>>>,
    seen: Mutex<Vec<(usize, usize, usize)>>,
}

impl Observer for Checkpoints {
    fn text(&self, _: &str) {}
    fn tool_started(&self, _: &str, _: &str, _: &Value) {}
    fn tool_finished(&self, _: &str, _: &str, _: &ToolOutput) {}
    fn checkpoint<'a>(&'a self, session: &'a Session) -> futures_util::future::BoxFuture<'a, ()> {
        let results = super::session::answered_ids(session).len();
        let ran = self.order.lock().unwrap().len();
        self.seen
            .lock()
            .unwrap()
            .push((session.messages.len(), results, ran));
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn the_loop_checkpoints_before_a_call_runs_and_after_its_result() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::start(vec![
        Step::tool_call("c1", "record", json!({"n": 1})),
        Step::text("done").expect_tool_results(["c1"]),
    ])
    .unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Recorder(order.clone())));
    let mut agent = agent(&model, tools, 3);
    let observer = Checkpoints {
        order: order.clone(),
        seen: Mutex::default(),
    };
    let mut s = session("record");
    agent
        .run(&mut s, Resume::Fresh, "", &observer)
        .await
        .unwrap();
    // Before: the call is in the conversation and has not run; after: its result is.
    assert_eq!(*observer.seen.lock().unwrap(), [(3, 0, 0), (3, 1, 1)]);
    model.assert_done();
}

/// A tool whose call adds the tool `added` to the agent's source and says so.
struct AddTool {
    added: Arc<std::sync::atomic::AtomicBool>,
    changes: tokio::sync::watch::Sender<u64>,
}

#[async_trait]
impl Tool for AddTool {
    fn name(&self) -> &str {
        "add_tool"
    }
    fn description(&self) -> String {
        "adds a tool".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn category(&self) -> Category {
        Category::Exec
    }
    async fn call(&self, _: Value, _: &ToolContext) -> ToolOutput {
        self.added.store(true, std::sync::atomic::Ordering::SeqCst);
        self.changes.send_modify(|version| *version += 1);
        ToolOutput::text("added")
    }
}

#[tokio::test]
async fn a_tool_added_during_a_run_is_offered_at_the_next_model_call() {
    let model = ScriptedModel::start(vec![
        Step::tool_calls(vec![call("a", "add_tool", json!({}))])
            .expect_tools_include(["add_tool"])
            .expect_tools_exclude(["record"]),
        Step::tool_calls(vec![call("b", "record", json!({"n": 7}))])
            .expect_tool_results(["a"])
            .expect_tools_include(["add_tool", "record"]),
        Step::text("done").expect_tool_results(["b"]),
    ])
    .unwrap();
    let added = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (changes, seen) = tokio::sync::watch::channel(0);
    let order = Arc::new(Mutex::new(Vec::new()));
    let build = {
        let tool: Arc<dyn Tool> = Arc::new(AddTool {
            added: added.clone(),
            changes,
        });
        let added = added.clone();
        let order = order.clone();
        move || {
            let mut tools = ToolRegistry::new();
            tools.register(tool.clone());
            if added.load(std::sync::atomic::Ordering::SeqCst) {
                tools.register(Arc::new(Recorder(order.clone())));
            }
            tools
        }
    };
    let mut agent = agent(&model, build(), 3);
    agent.tool_source = Some(super::model_loop::ToolSource {
        changes: seen,
        build: Box::new(build),
    });
    let mut s = session("add a tool, then use it");
    let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
    assert_eq!(outcome, Outcome::Answered("done".into()));
    assert_eq!(*order.lock().unwrap(), [7]);
    model.assert_done();
}
