//! Dispatcher tests with real `sh` processes, a local http server and a fake subagent runner.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use rustix::process::{Pid, test_kill_process};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::action::SubagentRunner;
use super::dispatcher::{EmptySessionId, HookContext, HookDispatcher, HookSettings};
use super::event::Payload;
use super::output::{HookOutcome, PermissionDecision};
use super::rules::{Format, RuleSource, Scope, load, parse_mew, project_files};
use super::trust::{TrustStore, trust_project};

const SESSION: &str = "session-1";

/// The snapshot hooks get their environment from: the test's PATH (read, never changed) and
/// variables that must not reach a hook unless allowlisted.
fn snapshot() -> HashMap<String, String> {
    HashMap::from([
        (
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
        ),
        ("HOME".to_owned(), "/home/hooktest".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("SECRET_TOKEN".to_owned(), "s3cret".to_owned()),
        ("EXTRA_ONE".to_owned(), "extra".to_owned()),
    ])
}

fn settings(dir: &Path) -> HookSettings {
    HookSettings {
        env: Arc::new(snapshot()),
        extra_env: Vec::new(),
        project_dir: dir.to_owned(),
        ledger_dir: None,
        transcript_dir: None,
    }
}

/// An dispatcher for `rules` (a JSON list of `hooks.yaml` rules; JSON is YAML), in `dir`.
fn dispatcher_with(rules: Value, settings: HookSettings) -> HookDispatcher {
    let source = Arc::new(RuleSource {
        path: settings.project_dir.join("hooks.yaml"),
        scope: Scope::User,
        format: Format::Mew,
        hash: String::new(),
        plugin_root: None,
    });
    let (rules, problems) = parse_mew(&json!({ "hooks": rules }).to_string(), &source);
    assert_eq!(problems, [], "the test's rules must compile");
    HookDispatcher::new(rules, settings).unwrap()
}

fn dispatcher(dir: &Path, rules: Value) -> HookDispatcher {
    dispatcher_with(rules, settings(dir))
}

fn ctx(dir: &Path) -> HookContext {
    HookContext::new(SESSION, dir).unwrap()
}

fn shell(name: &str, event: &str, command: &str) -> Value {
    json!({"name": name, "event": event, "action": {"type": "shell", "command": command}})
}

fn bash_call(command: &str) -> Payload {
    Payload::pre_tool_use("bash", &json!({"command": command}), "call-1")
}

/// Waits (at most 10 s) for `path` to exist, and returns its content.
async fn wait_for_file(path: &Path) -> String {
    for _ in 0..1000 {
        if let Ok(text) = fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} did not appear within 10 s", path.display());
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet: it runs no more).
fn gone(pid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pid) else {
        return true;
    };
    if test_kill_process(pid).is_err() {
        return true;
    }
    fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Waits (at most 10 s) for every pid in `pids` (one per line) to be gone.
async fn all_gone(pids: &str) {
    let pids: Vec<i32> = pids
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect();
    assert!(!pids.is_empty());
    for _ in 0..1000 {
        if pids.iter().all(|pid| gone(*pid)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("processes {pids:?} still run 10 s after their hook ended");
}

#[test]
fn a_context_needs_a_session_id() {
    assert_eq!(HookContext::new("", "/").unwrap_err(), EmptySessionId);
    assert_eq!(HookContext::new("  ", "/").unwrap_err(), EmptySessionId);
    assert_eq!(HookContext::new("s", "/").unwrap().session_id(), "s");
}

#[tokio::test]
async fn exit_2_blocks_a_matching_tool_call_and_ends_the_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("second-ran");
    let dispatcher = dispatcher(
        dir.path(),
        json!([
            {
                "name": "no-rm",
                "event": "PreToolUse",
                "if": {"all_of": [
                    {"field": "tool_name", "match": {"type": "exact", "value": "bash"}},
                    {"field": "tool_input.command", "match": {"type": "regex", "value": "^rm -rf"}}
                ]},
                "action": {"type": "shell", "command": "echo 'rm -rf is not allowed' >&2; exit 2"}
            },
            shell("after", "PreToolUse", &format!("touch '{}'", marker.display())),
        ]),
    );
    let outcome = dispatcher
        .dispatch(bash_call("rm -rf /"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.refusal(), Some(("no-rm", "rm -rf is not allowed")));
    assert!(!marker.exists(), "no rule runs after a block");
    // What ran, as a task's progress notes tell it.
    let runs: Vec<_> = outcome
        .runs
        .iter()
        .map(|run| {
            (
                run.hook.as_str(),
                run.event,
                run.outcome,
                run.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [(
            "no-rm",
            "PreToolUse",
            "blocked",
            Some("rm -rf is not allowed")
        )]
    );

    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    let ran: Vec<_> = outcome
        .runs
        .iter()
        .map(|run| (run.hook.as_str(), run.outcome))
        .collect();
    // `no-rm`'s condition does not hold for `ls`: it does not run.
    assert_eq!(ran, [("after", "ok")]);
    assert_eq!(without_runs(outcome), HookOutcome::default());
    assert!(marker.exists(), "the second rule runs when nothing blocks");
}

#[tokio::test]
async fn the_payload_on_stdin_has_the_common_fields() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher(
        dir.path(),
        json!([shell(
            "capture",
            "PreToolUse",
            "cat > \"$MEW_PROJECT_DIR/payload.json\""
        )]),
    );
    let ctx = ctx(dir.path()).with_mode("acceptEdits");
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx).await;
    assert_eq!(outcome.errors, Vec::<String>::new());
    let payload: Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("payload.json")).unwrap())
            .unwrap();
    assert_eq!(
        payload,
        json!({
            "event": "PreToolUse",
            "hook_event_name": "PreToolUse",
            "session_id": SESSION,
            "cwd": dir.path().display().to_string(),
            "mode": "acceptEdits",
            "permission_mode": "acceptEdits",
            "tool_name": "bash",
            "tool_input": {"command": "ls"},
            "tool_use_id": "call-1",
        })
    );
}

#[tokio::test]
async fn json_output_allow_ask_deny_and_updated_input_chain() {
    let dir = tempfile::tempdir().unwrap();
    let print = |json: &str| format!("printf '%s' '{json}'");
    let dispatcher = dispatcher(
        dir.path(),
        json!([
            {
                "name": "rewrite",
                "event": "PreToolUse",
                "if": {"any_of": [{"field": "tool_input.command", "match": "ls"}]},
                "action": {"type": "shell", "command": print(r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "ls -a"}}}"#)}
            },
            shell(
                "sees-update",
                "PreToolUse",
                r#"input=$(cat); case "$input" in *'"command":"ls -a"'*) echo '{"hookSpecificOutput": {"additionalContext": "saw ls -a"}}';; esac"#,
            ),
            {
                "name": "ask-for-git",
                "event": "PreToolUse",
                "if": {"any_of": [{"field": "tool_input.command", "match": "re:^git "}]},
                "action": {"type": "shell", "command": print(r#"{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "git needs a look"}}"#)}
            },
            {
                "name": "deny-push",
                "event": "PreToolUse",
                "if": {"any_of": [{"field": "tool_input.command", "match": "re:^git push"}]},
                "action": {"type": "shell", "command": print(r#"{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no pushing"}}"#)}
            },
        ]),
    );
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    let permission = outcome.permission.clone().unwrap();
    assert_eq!(
        (permission.decision, permission.hook.as_str()),
        (PermissionDecision::Allow, "rewrite")
    );
    assert_eq!(outcome.updated_input, Some(json!({"command": "ls -a"})));
    assert_eq!(outcome.additional_context, ["saw ls -a"]);
    assert_eq!(outcome.refusal(), None);

    let outcome = dispatcher
        .dispatch(bash_call("git status"), &ctx(dir.path()))
        .await;
    let permission = outcome.permission.clone().unwrap();
    assert_eq!(
        (permission.decision, permission.reason.as_str()),
        (PermissionDecision::Ask, "git needs a look")
    );
    assert_eq!(outcome.updated_input, None);

    let outcome = dispatcher
        .dispatch(bash_call("git push"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.refusal(), Some(("deny-push", "no pushing")));
}

#[tokio::test]
async fn json_output_continue_system_message_and_suppress_output() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher(
        dir.path(),
        json!([
            shell("visible", "UserPromptSubmit", "echo 'Today is a holiday.'"),
            shell(
                "quiet",
                "UserPromptSubmit",
                r#"echo '{"suppressOutput": true, "systemMessage": "prompt logged", "hookSpecificOutput": {"additionalContext": "ctx"}}'"#
            ),
            shell(
                "stopper",
                "UserPromptSubmit",
                r#"echo '{"continue": false, "stopReason": "quota used up"}'"#
            ),
            shell("never", "UserPromptSubmit", "echo never"),
        ]),
    );
    let outcome = dispatcher
        .dispatch(Payload::user_prompt_submit("hello"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.additional_context, ["Today is a holiday.", "ctx"]);
    assert_eq!(outcome.system_messages, ["prompt logged"]);
    assert_eq!(outcome.stop.as_deref(), Some("quota used up"));
    let hooks: Vec<&str> = outcome
        .outputs
        .iter()
        .map(|output| output.hook.as_str())
        .collect();
    assert_eq!(
        hooks,
        ["visible", "stopper"],
        "quiet suppressed its output; never did not run"
    );
    assert_eq!(outcome.blocked, None);
}

#[tokio::test]
async fn a_hook_that_times_out_is_killed_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut rule = shell(
        "slow",
        "PreToolUse",
        &format!(
            "echo $$ > '{p}.tmp'; sleep 1000 & echo $! >> '{p}.tmp'; mv '{p}.tmp' '{p}'; wait",
            p = pids.display()
        ),
    );
    // Long enough for the script to record its pids first; the test does not time anything.
    rule["timeout"] = json!("2s");
    let dispatcher = dispatcher(dir.path(), json!([rule]));
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    assert_eq!(outcome.errors, ["hook `slow`: timed out after 2s"]);
    assert_eq!(outcome.blocked, None, "a timeout fails open by default");
    all_gone(&wait_for_file(&pids).await).await;
}

#[tokio::test]
async fn hook_processes_are_in_the_process_ledger_while_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("processes");
    let mut settings = settings(dir.path());
    settings.ledger_dir = Some(ledger.clone());
    let dispatcher = dispatcher_with(
        // From its first command the hook is in the ledger: pending under its token, or under
        // its group id (written before the pending entry goes, so checked second). Then it
        // waits for its own entry, and shows it.
        json!([shell(
            "show",
            "UserPromptSubmit",
            &format!(
                "d='{}'; if [ -e \"$d/pending-$MEW_LEDGER_TOKEN\" ] || [ -e \"$d/$$\" ]; \
                 then :; else echo unrecorded; exit 1; fi; \
                 while [ ! -e \"$d/$$\" ]; do sleep 0.01; done; echo $$; cat \"$d/$$\"",
                ledger.display()
            )
        )]),
        settings,
    );
    let outcome = dispatcher
        .dispatch(Payload::user_prompt_submit("hi"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.errors, Vec::<String>::new());
    let (pid, entry) = outcome.additional_context[0].split_once('\n').unwrap();
    let entry: Value = serde_json::from_str(entry).unwrap();
    assert_eq!(entry["pgid"].to_string(), pid);
    assert_eq!(entry["task"], SESSION);
    assert_eq!(entry["role"], "hook show");
    assert_eq!(
        fs::read_dir(&ledger).unwrap().count(),
        0,
        "the entry goes with the group"
    );
}

#[tokio::test]
async fn cancelling_the_run_kills_a_running_hook() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let dispatcher = dispatcher(
        dir.path(),
        json!([shell(
            "slow",
            "PreToolUse",
            &format!(
                "echo $$ > '{p}.tmp'; mv '{p}.tmp' '{p}'; exec sleep 1000",
                p = pid_file.display()
            )
        )]),
    );
    let cancel = CancellationToken::new();
    let ctx = ctx(dir.path()).with_cancel(cancel.clone());
    let canceller = {
        let pid_file = pid_file.clone();
        tokio::spawn(async move {
            wait_for_file(&pid_file).await;
            cancel.cancel();
        })
    };
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx).await;
    canceller.await.unwrap();
    assert_eq!(outcome.errors, ["hook `slow`: canceled"]);
    all_gone(&fs::read_to_string(&pid_file).unwrap()).await;
}

#[tokio::test]
async fn fail_closed_turns_a_hook_error_into_a_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut closed = shell(
        "policy",
        "PreToolUse",
        "echo 'policy server down' >&2; exit 1",
    );
    closed["fail"] = json!("closed");
    let open = shell("lenient", "PreToolUse", "exit 1");
    let dispatcher = dispatcher(dir.path(), json!([open, closed]));
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    assert_eq!(
        outcome.errors,
        [
            "hook `lenient`: exit code 1",
            "hook `policy`: exit code 1: policy server down"
        ]
    );
    assert_eq!(
        outcome.refusal(),
        Some((
            "policy",
            "hook `policy` failed and fails closed: exit code 1: policy server down"
        ))
    );

    // Invalid JSON is an error too, so a broken policy script blocks when it fails closed.
    let mut broken = shell("broken", "PreToolUse", "echo '{\"decision\": '");
    broken["fail"] = json!("closed");
    let dispatcher = dispatcher_with(json!([broken]), settings(dir.path()));
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    assert!(
        outcome
            .blocked
            .unwrap()
            .reason
            .contains("invalid JSON output")
    );
}

#[tokio::test]
async fn only_once_runs_once_per_session_until_reset() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher(
        dir.path(),
        json!([{
            "name": "welcome",
            "event": "SessionStart",
            "only_once": true,
            "action": {"type": "prompt", "text": "read CONTRIBUTING.md first"}
        }]),
    );
    let first = HookContext::new("a", dir.path()).unwrap();
    let second = HookContext::new("b", dir.path()).unwrap();
    let start = || Payload::session_start("startup");
    assert_eq!(
        dispatcher
            .dispatch(start(), &first)
            .await
            .additional_context,
        ["read CONTRIBUTING.md first"]
    );
    assert!(
        dispatcher
            .dispatch(start(), &first)
            .await
            .additional_context
            .is_empty()
    );
    assert_eq!(
        dispatcher
            .dispatch(start(), &second)
            .await
            .additional_context
            .len(),
        1
    );
    dispatcher.reset_session("a");
    assert_eq!(
        dispatcher
            .dispatch(start(), &first)
            .await
            .additional_context
            .len(),
        1
    );
    assert!(
        dispatcher
            .dispatch(start(), &second)
            .await
            .additional_context
            .is_empty()
    );
}

#[tokio::test]
async fn async_hooks_run_in_the_background_and_die_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let pid_file = dir.path().join("pid");
    let mut logger = shell(
        "logger",
        "PostToolUse",
        &format!(
            "cat > '{d}.tmp'; echo >> '{d}.tmp'; mv '{d}.tmp' '{d}'; echo ignored",
            d = done.display()
        ),
    );
    logger["async"] = json!(true);
    let mut sleeper = shell(
        "sleeper",
        "PostToolUse",
        &format!(
            "echo $$ > '{p}.tmp'; mv '{p}.tmp' '{p}'; exec sleep 1000",
            p = pid_file.display()
        ),
    );
    sleeper["async"] = json!(true);
    sleeper["timeout"] = json!("10m");
    let dispatcher = dispatcher(dir.path(), json!([logger, sleeper]));
    let payload =
        Payload::post_tool_use("bash", &json!({"command": "ls"}), "c", "a b", None, false);
    // The dispatch does not wait for them, and their answers do not count.
    let outcome = dispatcher.dispatch(payload, &ctx(dir.path())).await;
    assert_eq!(outcome, HookOutcome::default());
    let logged: Value = serde_json::from_str(&wait_for_file(&done).await).unwrap();
    assert_eq!(logged["tool_response"], "a b");

    let pid = wait_for_file(&pid_file).await;
    tokio::time::timeout(Duration::from_secs(10), dispatcher.shutdown())
        .await
        .expect("shutdown waits for the async hooks it kills, not for their timeout");
    all_gone(&pid).await;
}

#[tokio::test]
async fn an_async_hook_dies_with_the_run_that_started_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut sleeper = shell(
        "sleeper",
        "Notification",
        &format!(
            "echo $$ > '{p}.tmp'; mv '{p}.tmp' '{p}'; exec sleep 1000",
            p = pid_file.display()
        ),
    );
    sleeper["async"] = json!(true);
    let dispatcher = dispatcher(dir.path(), json!([sleeper]));
    let cancel = CancellationToken::new();
    let ctx = ctx(dir.path()).with_cancel(cancel.clone());
    dispatcher
        .dispatch(Payload::notification("permission_prompt", "run ls?"), &ctx)
        .await;
    let pid = wait_for_file(&pid_file).await;
    cancel.cancel();
    all_gone(&pid).await;
}

#[tokio::test]
async fn a_shell_hook_sees_only_the_allowlisted_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings(dir.path());
    settings.extra_env = vec!["EXTRA_ONE".to_owned(), "NOT_IN_SNAPSHOT".to_owned()];
    let dispatcher = dispatcher_with(json!([shell("env", "UserPromptSubmit", "env")]), settings);
    let outcome = dispatcher
        .dispatch(Payload::user_prompt_submit("hi"), &ctx(dir.path()))
        .await;
    let env = &outcome.additional_context[0];
    let mut names: Vec<&str> = env
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        // What sh itself sets.
        .filter(|name| !matches!(*name, "PWD" | "OLDPWD" | "SHLVL" | "_"))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "CLAUDE_PROJECT_DIR",
            "EXTRA_ONE",
            "HOME",
            "LANG",
            "MEW_PROJECT_DIR",
            "PATH"
        ]
    );
    assert!(!env.contains("s3cret"));
    assert!(env.contains(&format!("MEW_PROJECT_DIR={}", dir.path().display())));
    assert!(env.contains("HOME=/home/hooktest"));
}

#[tokio::test]
async fn claude_code_settings_hook_blocks_rm_rf_through_a_real_script() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    fs::create_dir_all(project.join(".claude/hooks")).unwrap();
    // A script as written for Claude Code: the JSON on stdin, exit 2 with a reason to block.
    fs::write(
        project.join(".claude/hooks/guard.sh"),
        r#"#!/bin/sh
input=$(cat)
case "$input" in
  *'"tool_name":"Bash"'*) ;;
  *) echo "expected Claude Code's tool name, got: $input" >&2; exit 1 ;;
esac
case "$input" in
  *'"command":"rm -rf'*) echo "Blocked: rm -rf is not allowed" >&2; exit 2 ;;
esac
exit 0
"#,
    )
    .unwrap();
    fs::write(
        project.join(".claude/settings.json"),
        r#"{
          "permissions": {"allow": ["Bash(ls:*)"]},
          "hooks": {
            "PreToolUse": [
              {"matcher": "Bash", "hooks": [
                {"type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh", "timeout": 10}
              ]}
            ]
          }
        }"#,
    )
    .unwrap();
    let trust_file = dir.path().join("trusted-hooks.json");
    trust_project(&trust_file, &project, &[]).unwrap();
    let loaded = load(
        &project_files(&project),
        &TrustStore::load(&trust_file).unwrap(),
    );
    assert_eq!(loaded.problems, []);
    assert_eq!(loaded.rules.len(), 1);
    let mut settings = settings(&project);
    settings.project_dir = super::rules::normalize_dir(&project);
    let dispatcher = HookDispatcher::new(loaded.rules, settings).unwrap();
    assert_eq!(dispatcher.rules().count(), 1);
    let ctx = ctx(&project);

    let outcome = dispatcher.dispatch(bash_call("rm -rf /"), &ctx).await;
    let (hook, reason) = outcome.refusal().unwrap();
    assert_eq!(reason, "Blocked: rm -rf is not allowed");
    assert_eq!(hook, ".claude/settings.json#PreToolUse[0][0]");

    let outcome = dispatcher.dispatch(bash_call("ls -la"), &ctx).await;
    assert_eq!(without_runs(outcome), HookOutcome::default());

    // The `Bash` matcher does not select write_file (the script would fail on its name).
    let write = Payload::pre_tool_use(
        "write_file",
        &json!({"file_path": "a", "content": "rm -rf"}),
        "c",
    );
    assert_eq!(
        dispatcher.dispatch(write, &ctx).await,
        HookOutcome::default()
    );
}

#[tokio::test]
async fn prompt_actions_add_context() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher(
        dir.path(),
        json!([{
            "name": "style",
            "event": "PreUserMessage",
            "action": {"type": "prompt", "text": "Answer in English."}
        }]),
    );
    let outcome = dispatcher
        .dispatch(Payload::pre_user_message(3), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.additional_context, ["Answer in English."]);
    // Other events do not run it.
    assert_eq!(
        dispatcher
            .dispatch(Payload::pre_user_message(3).with("x", 1), &ctx(dir.path()))
            .await
            .additional_context
            .len(),
        1
    );
    assert_eq!(
        dispatcher
            .dispatch(Payload::session_start("startup"), &ctx(dir.path()))
            .await,
        HookOutcome::default()
    );
}

// ---------------------------------------------------------------------------------------------
// http

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(HeaderMap, String)>>>);

async fn hook_endpoint(
    State(received): State<Received>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = String::from_utf8_lossy(&body).into_owned();
    let block = body.contains("rm -rf");
    received.0.lock().unwrap().push((headers, body));
    if block {
        axum::Json(json!({"decision": "block", "reason": "remote says no"})).into_response()
    } else {
        axum::Json(json!({"hookSpecificOutput": {"additionalContext": "remote ok"}}))
            .into_response()
    }
}

/// A server on 127.0.0.1 with `/hook`, `/fail`, a same-origin redirect and a redirect to
/// `localhost` (another origin).
async fn http_server(received: Received) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/hook", post(hook_endpoint))
        .route(
            "/fail",
            any(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "db down") }),
        )
        .route(
            "/same",
            any(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/hook")],
                )
            }),
        )
        .route(
            "/other",
            any(move || async move {
                let location = format!("http://localhost:{port}/hook");
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, location)],
                )
                    .into_response()
            }),
        )
        .with_state(received);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://127.0.0.1:{port}")
}

fn http_rule(name: &str, url: &str) -> Value {
    json!({"name": name, "event": "PreToolUse", "action": {"type": "http", "url": url}})
}

#[tokio::test]
async fn http_hooks_post_the_payload_and_read_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let received = Received::default();
    let base = http_server(received.clone()).await;
    let dispatcher = dispatcher(
        dir.path(),
        json!([http_rule("remote", &format!("{base}/hook"))]),
    );

    let outcome = dispatcher
        .dispatch(bash_call("rm -rf /"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.refusal(), Some(("remote", "remote says no")));
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    assert_eq!(outcome.additional_context, ["remote ok"]);
    assert_eq!(outcome.errors, Vec::<String>::new());

    let requests = received.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].0[header::CONTENT_TYPE], "application/json");
    let payload: Value = serde_json::from_str(&requests[1].1).unwrap();
    assert_eq!(payload["tool_input"]["command"], "ls");
    assert_eq!(payload["session_id"], SESSION);
}

#[tokio::test]
async fn http_body_templates_substitute_fields_only_and_stay_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let received = Received::default();
    let base = http_server(received.clone()).await;
    let dispatcher = dispatcher(
        dir.path(),
        json!([{
            "name": "templated",
            "event": "PreToolUse",
            "action": {
                "type": "http",
                "url": format!("{base}/hook"),
                "headers": {"X-Token": "abc"},
                "body": "{\"cmd\": \"{{ tool_input.command }}\", \"tool\": \"{{.tool_name}}\", \"missing\": \"{{nope.x}}\"}"
            }
        }]),
    );
    let outcome = dispatcher
        .dispatch(bash_call("echo \"quoted\" \\ back"), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.errors, Vec::<String>::new());
    let (headers, body) = received.0.lock().unwrap()[0].clone();
    assert_eq!(headers["x-token"], "abc");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        json!({"cmd": "echo \"quoted\" \\ back", "tool": "bash", "missing": ""})
    );

    // Anything but a field path is refused when the rule is loaded.
    let source = Arc::new(RuleSource {
        path: PathBuf::from("h.yaml"),
        scope: Scope::User,
        format: Format::Mew,
        hash: String::new(),
        plugin_root: None,
    });
    for body in [
        "{{ printf \"%s\" .x }}",
        "{{.x | html}}",
        "{{ }}",
        "{{ index .a 1 }}",
        "{{x",
    ] {
        let rule = json!({"hooks": [{"name": "t", "event": "Stop", "action": {"type": "http", "url": "http://127.0.0.1:1/", "body": body}}]});
        let (rules, problems) = parse_mew(&rule.to_string(), &source);
        assert!(rules.is_empty(), "{body}");
        assert!(
            problems[0].message.starts_with("`body`: "),
            "{body}: {}",
            problems[0].message
        );
    }
}

#[tokio::test]
async fn http_failures_and_redirects() {
    let dir = tempfile::tempdir().unwrap();
    let received = Received::default();
    let base = http_server(received.clone()).await;
    let dispatcher = dispatcher(
        dir.path(),
        json!([
            http_rule("fails", &format!("{base}/fail")),
            http_rule("same-origin", &format!("{base}/same")),
            http_rule("other-origin", &format!("{base}/other")),
        ]),
    );
    let outcome = dispatcher.dispatch(bash_call("ls"), &ctx(dir.path())).await;
    assert_eq!(outcome.errors.len(), 2, "{:?}", outcome.errors);
    assert_eq!(outcome.errors[0], "hook `fails`: HTTP status 500: db down");
    assert!(
        outcome.errors[1].starts_with("hook `other-origin`: ")
            && outcome.errors[1].contains("redirect to another origin refused: http://localhost:"),
        "{}",
        outcome.errors[1]
    );
    // The same-origin redirect reached /hook once; the other never did.
    assert_eq!(outcome.additional_context, ["remote ok"]);
    assert_eq!(received.0.lock().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// subagent

#[derive(Default)]
struct FakeRunner {
    answer: Option<Result<String, String>>,
    calls: Mutex<Vec<(String, String, Value)>>,
}

#[async_trait]
impl SubagentRunner for FakeRunner {
    async fn run_subagent(
        &self,
        role: &str,
        prompt: &str,
        payload: &Value,
    ) -> Result<String, String> {
        self.calls
            .lock()
            .unwrap()
            .push((role.to_owned(), prompt.to_owned(), payload.clone()));
        match &self.answer {
            Some(answer) => answer.clone(),
            None => std::future::pending().await,
        }
    }
}

fn subagent_rule(timeout: &str) -> Value {
    json!([{
        "name": "reviewer",
        "event": "DelegationStart",
        "timeout": timeout,
        "action": {"type": "subagent", "agent_name": "security-reviewer", "prompt": "Is this delegation safe?"}
    }])
}

fn delegation() -> Payload {
    Payload::delegation_start("task-1", "peer/deployer", "deploy to production", false)
}

#[tokio::test]
async fn subagent_answers_are_context_and_can_block() {
    let dir = tempfile::tempdir().unwrap();
    let runner = Arc::new(FakeRunner {
        answer: Some(Ok("Deploying needs approval.\n```json\n{\"decision\": \"block\", \"reason\": \"needs a human\"}\n```".to_owned())),
        ..FakeRunner::default()
    });
    let hooks = dispatcher(dir.path(), subagent_rule("30s")).with_subagents(runner.clone());
    let outcome = hooks.dispatch(delegation(), &ctx(dir.path())).await;
    assert_eq!(outcome.refusal(), Some(("reviewer", "needs a human")));
    assert!(outcome.additional_context[0].starts_with("Deploying needs approval."));
    let calls = runner.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].0.as_str(), calls[0].1.as_str()),
        ("security-reviewer", "Is this delegation safe?")
    );
    assert_eq!(calls[0].2["target"], "peer/deployer");
    assert_eq!(calls[0].2["session_id"], SESSION);

    let fine = Arc::new(FakeRunner {
        answer: Some(Ok("Looks safe.".to_owned())),
        ..FakeRunner::default()
    });
    let hooks = dispatcher(dir.path(), subagent_rule("30s")).with_subagents(fine);
    let outcome = hooks.dispatch(delegation(), &ctx(dir.path())).await;
    assert_eq!(outcome.refusal(), None);
    assert_eq!(outcome.additional_context, ["Looks safe."]);
}

#[tokio::test]
async fn subagent_failures_are_hook_errors() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = dispatcher(dir.path(), subagent_rule("30s"))
        .dispatch(delegation(), &ctx(dir.path()))
        .await;
    assert_eq!(
        outcome.errors,
        ["hook `reviewer`: subagent hooks are not available here (no runner)"]
    );

    let failing = Arc::new(FakeRunner {
        answer: Some(Err("role not found".to_owned())),
        ..FakeRunner::default()
    });
    let outcome = dispatcher(dir.path(), subagent_rule("30s"))
        .with_subagents(failing)
        .dispatch(delegation(), &ctx(dir.path()))
        .await;
    assert_eq!(
        outcome.errors,
        ["hook `reviewer`: subagent `security-reviewer` failed: role not found"]
    );

    let stuck = Arc::new(FakeRunner::default());
    let outcome = dispatcher(dir.path(), subagent_rule("100ms"))
        .with_subagents(stuck)
        .dispatch(delegation(), &ctx(dir.path()))
        .await;
    assert_eq!(outcome.errors, ["hook `reviewer`: timed out after 100ms"]);
    assert_eq!(outcome.blocked, None);
}

/// `outcome` without its record of the hooks that ran: what they decided, alone.
fn without_runs(mut outcome: HookOutcome) -> HookOutcome {
    outcome.runs.clear();
    outcome
}

/// A dispatcher for the `hooks` of a Claude Code settings file (a user file: trusted).
fn claude_dispatcher(dir: &Path, hooks: Value) -> HookDispatcher {
    let source = Arc::new(RuleSource {
        path: dir.join("settings.json"),
        scope: Scope::User,
        format: Format::ClaudeSettings,
        hash: String::new(),
        plugin_root: None,
    });
    let (rules, problems) =
        super::rules::parse_settings(&json!({ "hooks": hooks }).to_string(), &source);
    assert_eq!(problems, [], "the test's hooks must compile");
    HookDispatcher::new(rules, settings(dir)).unwrap()
}

#[tokio::test]
async fn a_settings_hooks_if_runs_it_only_for_the_calls_its_rule_matches() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let dispatcher = claude_dispatcher(
        dir.path(),
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "if": "Bash(git commit:*)",
             "command": format!("cat >> '{0}'; echo 'no commits' >&2; exit 2", log.display())},
        ]}, {"matcher": "Edit", "hooks": [
            {"type": "command", "if": "Edit(src/**)", "command": "echo 'src is frozen' >&2; exit 2"},
        ]}]}),
    );
    let ctx = ctx(dir.path());
    // Not a commit: the hook does not run at all (nothing reaches its log).
    let outcome = dispatcher.dispatch(bash_call("git status"), &ctx).await;
    assert_eq!(without_runs(outcome), HookOutcome::default());
    assert!(!log.exists());
    // A commit, alone or chained after another command, is refused.
    for command in ["git commit -m x", "cargo fmt && git commit -am wip"] {
        let outcome = dispatcher.dispatch(bash_call(command), &ctx).await;
        assert_eq!(outcome.refusal().map(|(_, why)| why), Some("no commits"));
    }
    assert_eq!(fs::read_to_string(&log).unwrap().lines().count(), 2);
    // Path rules anchor at the project, as permission rules do.
    let edit = |path: &str| {
        Payload::pre_tool_use(
            "edit_file",
            &json!({"file_path": path, "old_string": "a", "new_string": "b"}),
            "c",
        )
    };
    let outcome = dispatcher.dispatch(edit("src/lib.rs"), &ctx).await;
    assert_eq!(outcome.refusal().map(|(_, why)| why), Some("src is frozen"));
    let outcome = dispatcher.dispatch(edit("docs/a.md"), &ctx).await;
    assert_eq!(outcome.refusal(), None);
}

#[tokio::test]
async fn settings_post_tool_use_sees_successes_and_post_tool_use_failure_the_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, failed) = (dir.path().join("ok"), dir.path().join("failed"));
    let dispatcher = claude_dispatcher(
        dir.path(),
        json!({
            "PostToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": format!("cat >> '{}'", ok.display())}]}],
            "PostToolUseFailure": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": format!("cat >> '{}'; echo 'try --force' >&2; exit 2", failed.display())}]}],
        }),
    );
    let ctx = ctx(dir.path());
    let input = json!({"command": "ls"});
    let response = json!({"stdout": "a\n", "stderr": "", "interrupted": false, "isImage": false});
    let success = Payload::post_tool_use("bash", &input, "c1", "a", Some(&response), false);
    dispatcher.dispatch(success, &ctx).await;
    let failure = Payload::post_tool_use("bash", &input, "c2", "exit code 1", None, true);
    assert!(dispatcher.dispatch(failure, &ctx).await.runs.is_empty());
    let failure = Payload::post_tool_use_failure("bash", &input, "c2", "exit code 1", false);
    let outcome = dispatcher.dispatch(failure, &ctx).await;
    // A block after the fact is feedback for the model.
    assert_eq!(outcome.additional_context, ["try --force"]);

    let seen: Value = serde_json::from_str(&fs::read_to_string(&ok).unwrap()).unwrap();
    assert_eq!(seen["tool_name"], "Bash");
    assert_eq!(seen["tool_response"], response);
    assert_eq!(seen["tool_use_id"], "c1");
    let seen: Value = serde_json::from_str(&fs::read_to_string(&failed).unwrap()).unwrap();
    assert_eq!(seen["hook_event_name"], "PostToolUseFailure");
    assert_eq!(seen["error"], "exit code 1");
    assert_eq!(seen["is_interrupt"], false);
    assert_eq!(seen["tool_use_id"], "c2");
}

#[tokio::test]
async fn a_permission_request_hook_allows_or_denies_for_the_user() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = claude_dispatcher(
        dir.path(),
        json!({"PermissionRequest": [
            {"matcher": "Bash", "hooks": [{"type": "command", "if": "Bash(npm test:*)", "command":
                r#"echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow", "updatedInput": {"command": "npm test --silent"}}}}'"#}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "if": "Bash(rm:*)", "command":
                r#"echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "never rm", "interrupt": true}}}'"#}]},
        ]}),
    );
    let ctx = ctx(dir.path());
    let request = |command: &str| {
        Payload::permission_request("bash", &json!({"command": command}), "c", "run it?")
    };
    let outcome = dispatcher.dispatch(request("npm test"), &ctx).await;
    assert_eq!(
        outcome.permission.as_ref().map(|p| p.decision),
        Some(PermissionDecision::Allow)
    );
    assert_eq!(
        outcome.updated_input,
        Some(json!({"command": "npm test --silent"}))
    );
    let outcome = dispatcher.dispatch(request("rm -rf x"), &ctx).await;
    assert_eq!(outcome.refusal().map(|(_, why)| why), Some("never rm"));
    assert_eq!(outcome.stop.as_deref(), Some("never rm"));
    // No hook decides: the user is asked.
    let outcome = dispatcher.dispatch(request("make"), &ctx).await;
    assert_eq!(without_runs(outcome), HookOutcome::default());
}

#[tokio::test]
async fn an_async_stop_hook_runs_but_cannot_block() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("stopped");
    let dispatcher = claude_dispatcher(
        dir.path(),
        json!({"Stop": [{"hooks": [{"type": "command", "async": true, "command":
            format!("cat > '{0}'; echo 'keep going' >&2; exit 2", marker.display())}]}]}),
    );
    let stop = Payload::stop(1, false, "done");
    let outcome = dispatcher.dispatch(stop, &ctx(dir.path())).await;
    assert_eq!(outcome.refusal(), None);
    let seen: Value = serde_json::from_str(&wait_for_file(&marker).await).unwrap();
    assert_eq!(seen["hook_event_name"], "Stop");
    dispatcher.shutdown().await;
}
