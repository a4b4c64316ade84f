//! Hooks on a real node: a `TaskReceived` hook of the project that rejects tasks once trusted
//! (and stops when its file changes), a Claude Code `PreToolUse` hook script that refuses a
//! command, and a `DelegationStart` hook that keeps a model from delegating to another node.

use std::path::Path;

use anyhow::{Context, ensure};
use mew_cards::{ListTasksRequest, Task, TaskState};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, scripted_model_config, send_text, status_text};
use mew_transport::{AgentTransport, Binding, CallContext};
use serde_json::json;

/// A `hooks.yaml` whose `TaskReceived` rule rejects messages that mention "forbidden",
/// naming the task it refuses (the payload's `task_id`).
const NO_FORBIDDEN: &str = r#"
hooks:
  - name: no-forbidden
    event: TaskReceived
    if:
      all_of:
        - field: prompt
          match: "re:forbidden"
    action:
      type: shell
      command: 'id=$(sed -n ''s/.*"task_id":"\([^"]*\)".*/\1/p''); echo "forbidden topics are not accepted here (task $id)" >&2; exit 2'
"#;

/// A Claude Code hook script: refuses a `Bash` call whose command holds `rm -rf`.
const NO_RM_SCRIPT: &str = "\
#!/bin/sh
input=$(cat)
case \"$input\" in
  *'\"command\":'*'rm -rf'*)
    echo 'rm -rf is not allowed' >&2
    exit 2
    ;;
esac
exit 0
";

/// `.claude/settings.json` running the script before every `Bash` call.
const CLAUDE_SETTINGS: &str = r#"{
  "permissions": {"allow": []},
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {"type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR/.claude/hooks/no-rm.sh\""}
        ]
      }
    ]
  }
}
"#;

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A node (not launched) whose model roles run on `model`, over the OpenAI-compatible API.
fn model_node(model: &ScriptedModel, roles: &[(&str, &str)]) -> anyhow::Result<MewNode> {
    let node = MewNode::new()?;
    node.write_config(&scripted_model_config(model))?;
    for (file, text) in roles {
        node.write_role(file, text)?;
    }
    Ok(node)
}

fn command_role(name: &str, command: &str) -> String {
    format!("---\nname: {name}\ndescription: Runs {command}.\ncommand: {command}\n---\n")
}

fn role(name: &str, frontmatter: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: A test role.\n{frontmatter}---\nYou help with tests.\n"
    )
}

/// Runs `mew` with `args` against the node's home and project; fails unless it exits 0.
async fn mew(node: &MewNode, args: &[&str]) -> anyhow::Result<String> {
    let (code, stdout, stderr) = node.client(args).await?;
    ensure!(
        code == 0,
        "mew {} exited {code}: {stdout}{stderr}",
        args.join(" ")
    );
    Ok(stdout)
}

/// The tasks of a node, through its front agent.
async fn tasks_of(node: &MewNode) -> anyhow::Result<Vec<Task>> {
    let agent = node.agent("", Binding::JsonRpc).await?;
    Ok(agent
        .list_tasks(&CallContext::default(), ListTasksRequest::default())
        .await?
        .tasks)
}

#[tokio::test]
async fn a_trusted_task_received_hook_rejects_tasks_and_an_edited_one_is_skipped()
-> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.write_role("greeter.md", &command_role("greeter", "[echo, accepted]"))?;
    let hooks_file = node.project_dir().join(".mew/hooks.yaml");
    write(&hooks_file, NO_FORBIDDEN)?;

    // Not trusted yet: listed, marked, and the way to trust it named.
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("no-forbidden")
            && listed.contains("TaskReceived")
            && listed.contains("run `mew hooks trust`"),
        "hooks list before trust:\n{listed}"
    );
    let trusted = mew(&node, &["hooks", "trust"]).await?;
    ensure!(
        trusted.contains("hooks.yaml"),
        "hooks trust said:\n{trusted}"
    );
    let listed = mew(&node, &["--json", "hooks", "list"]).await?;
    let listing: serde_json::Value = serde_json::from_str(&listed).context("hooks list --json")?;
    let rule = &listing["rules"][0];
    ensure!(
        rule["name"] == "no-forbidden"
            && rule["event"] == "TaskReceived"
            && rule["scope"] == "project"
            && rule["trusted"] == true,
        "hooks list --json after trust:\n{listed}"
    );

    node.launch().await?;
    let rejected = send_text(&node, "greeter", "tell me about the forbidden room").await?;
    ensure!(
        rejected.status.state == TaskState::Rejected,
        "state {:?}: {}",
        rejected.status.state,
        status_text(&rejected)
    );
    ensure!(
        status_text(&rejected).contains("forbidden topics are not accepted here"),
        "reason {:?}",
        status_text(&rejected)
    );
    // The hook was told the id the task got.
    ensure!(
        status_text(&rejected).contains(&format!("(task {})", rejected.id)),
        "reason {:?} does not name task {}",
        status_text(&rejected),
        rejected.id
    );
    let accepted = send_text(&node, "greeter", "hello there").await?;
    ensure!(
        accepted.status.state == TaskState::Completed,
        "state {:?}: {}",
        accepted.status.state,
        status_text(&accepted)
    );
    // The rejected task is stored like any other, and says why over `GetTask` too.
    let tasks = tasks_of(&node).await?;
    let stored = tasks
        .iter()
        .find(|task| task.id == rejected.id)
        .context("the rejected task is not listed")?;
    ensure!(
        stored.status.state == TaskState::Rejected
            && status_text(stored).contains("forbidden topics"),
        "stored {:?}: {}",
        stored.status.state,
        status_text(stored)
    );

    // An edit revokes the trust: after a restart the hook is skipped.
    let edited = format!("{NO_FORBIDDEN}# edited after it was trusted\n");
    write(&hooks_file, &edited)?;
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("run `mew hooks trust`"),
        "hooks list after the edit:\n{listed}"
    );
    node.restart().await?;
    let passed = send_text(&node, "greeter", "tell me about the forbidden room").await?;
    ensure!(
        passed.status.state == TaskState::Completed,
        "an untrusted hook ran: {:?}: {}",
        passed.status.state,
        status_text(&passed)
    );
    ensure!(
        node.log().contains("trusted again"),
        "the skipped file is not logged:\n{}",
        node.log()
    );

    // `untrust` forgets the file.
    write(&hooks_file, NO_FORBIDDEN)?;
    mew(&node, &["hooks", "trust"]).await?;
    let untrusted = mew(&node, &["hooks", "untrust"]).await?;
    ensure!(
        untrusted.contains("hooks.yaml"),
        "hooks untrust said:\n{untrusted}"
    );
    let listed = mew(&node, &["--json", "hooks", "list"]).await?;
    ensure!(
        listed.contains("\"trusted\": false"),
        "hooks list after untrust:\n{listed}"
    );
    Ok(())
}

#[tokio::test]
async fn a_claude_code_pre_tool_use_script_refuses_a_bash_command() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
        Step::text("I will leave the build directory alone.")
            .expect_tool_results(["call_1"])
            .expect_last_user("rm -rf is not allowed"),
    ])?;
    let mut node = model_node(
        &model,
        &[("cleaner.md", &role("cleaner", "tools: [bash]\n"))],
    )?;
    let project = node.project_dir();
    write(&project.join(".claude/hooks/no-rm.sh"), NO_RM_SCRIPT)?;
    write(&project.join(".claude/settings.json"), CLAUDE_SETTINGS)?;
    let marker = project.join("build/marker.txt");
    write(&marker, "still here\n")?;
    mew(&node, &["hooks", "trust"]).await?;
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("PreToolUse") && listed.contains("settings.json"),
        "hooks list:\n{listed}"
    );

    node.launch().await?;
    let task = send_text(&node, "cleaner", "clean up the build").await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    ensure!(
        status_text(&task) == "I will leave the build directory alone.",
        "answer {:?}",
        status_text(&task)
    );
    ensure!(marker.exists(), "the refused command ran");
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_delegation_start_hook_blocks_a_delegation_to_another_node() -> anyhow::Result<()> {
    let peer = MewNode::start(&[("upper.md", &command_role("upper", "[tr, a-z, A-Z]"))]).await?;
    let upper_url = peer.role_url("upper");
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": upper_url}),
        ),
        Step::text("The other node is off limits.")
            .expect_tool_results(["call_1"])
            .expect_last_user("delegating to other nodes is not allowed"),
    ])?;
    let mut node = model_node(&model, &[("boss.md", &role("boss", "tools: [Agent]\n"))])?;
    // A user hook: always trusted.
    write(
        &node.home_dir().join(".mew/hooks.yaml"),
        "hooks:\n\
         \x20 - name: local-only\n\
         \x20   event: DelegationStart\n\
         \x20   if:\n\
         \x20     all_of:\n\
         \x20       - field: target\n\
         \x20         match: \"re:^https?://\"\n\
         \x20   action:\n\
         \x20     type: shell\n\
         \x20     command: \"echo 'delegating to other nodes is not allowed' >&2; exit 2\"\n",
    )?;
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("local-only") && listed.contains("user"),
        "hooks list:\n{listed}"
    );

    node.launch().await?;
    let task = send_text(&node, "boss", "have the other node shout").await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    ensure!(
        status_text(&task) == "The other node is off limits.",
        "answer {:?}",
        status_text(&task)
    );
    let delegated = tasks_of(&peer).await?;
    ensure!(
        delegated.is_empty(),
        "the peer got {} task(s)",
        delegated.len()
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_subagent_hook_asks_a_guard_role_whose_json_decision_blocks_a_tool_call()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
        // The guard: the hook's prompt, then the payload; a child gets no Agent tool.
        Step::text(
            "That deletes the build.\n{\"decision\": \"block\", \"reason\": \"guard says no\"}",
        )
        .expect_last_user("Is this tool call safe?\n\n```json\n{")
        .expect_tools_exclude(["Agent"]),
        Step::text("The guard refused; I left the build alone.")
            .expect_tool_results(["call_1"])
            .expect_last_user("guard says no"),
    ])?;
    let mut node = model_node(
        &model,
        &[
            ("cleaner.md", &role("cleaner", "tools: [bash]\n")),
            ("guard.md", &role("guard", "")),
        ],
    )?;
    let marker = node.project_dir().join("build/marker.txt");
    write(&marker, "still here\n")?;
    // A user hook: always trusted.
    write(
        &node.home_dir().join(".mew/hooks.yaml"),
        "hooks:\n\
         \x20 - name: guard-check\n\
         \x20   event: PreToolUse\n\
         \x20   if:\n\
         \x20     all_of:\n\
         \x20       - field: tool_name\n\
         \x20         match: \"re:(?i)^bash$\"\n\
         \x20   action:\n\
         \x20     type: subagent\n\
         \x20     agent_name: guard\n\
         \x20     prompt: Is this tool call safe?\n",
    )?;
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("guard-check") && listed.contains("user"),
        "hooks list:\n{listed}"
    );

    node.launch().await?;
    let task = send_text(&node, "cleaner", "clean up the build").await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    ensure!(
        status_text(&task) == "The guard refused; I left the build alone.",
        "answer {:?}",
        status_text(&task)
    );
    ensure!(marker.exists(), "the blocked command ran");
    // The guard ran as a task of its own, and ended.
    let tasks = tasks_of(&node).await?;
    ensure!(
        tasks.len() == 2
            && tasks
                .iter()
                .all(|task| task.status.state == TaskState::Completed),
        "tasks: {:?}",
        tasks
            .iter()
            .map(|task| (task.id.to_string(), task.status.state))
            .collect::<Vec<_>>()
    );
    let asked = model
        .requests()
        .iter()
        .map(|request| request.last_user_text())
        .find(|text| text.starts_with("Is this tool call safe?"))
        .context("the guard was not asked")?;
    ensure!(
        asked.contains("\"command\": \"rm -rf build\"\n  },\n  \"tool_name\": \"bash\""),
        "the guard was asked:\n{asked}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn prompt_completion_and_subagent_hooks_fire_on_a_running_node() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": "upper"}),
        ),
        Step::text("Shouted.")
            .expect_tool_results(["call_1"])
            .expect_last_user("SHOUT THIS"),
    ])?;
    let mut node = model_node(
        &model,
        &[
            ("boss.md", &role("boss", "tools: [Agent]\n")),
            ("upper.md", &command_role("upper", "[tr, a-z, A-Z]")),
        ],
    )?;
    // User hooks (always trusted): each logs the event's payload, one JSON line each; the
    // prompt hook refuses prompts about secrets.
    let log = |event: &str, file: &str| {
        format!(
            "  - name: log-{event}\n    event: {event}\n    action:\n      type: shell\n      \
             command: \"cat >> \\\"$MEW_PROJECT_DIR/{file}\\\"; echo >> \\\"$MEW_PROJECT_DIR/{file}\\\"\"\n"
        )
    };
    let hooks = format!(
        "hooks:\n\
         \x20 - name: no-secrets\n\
         \x20   event: UserPromptSubmit\n\
         \x20   if:\n\
         \x20     all_of:\n\
         \x20       - field: prompt\n\
         \x20         match: \"re:secret\"\n\
         \x20   action:\n\
         \x20     type: shell\n\
         \x20     command: \"echo 'no secrets here' >&2; exit 2\"\n\
         {}{}{}",
        log("TaskCompleted", "completed.log"),
        log("SubagentStart", "subagents.log"),
        log("SubagentStop", "subagents.log"),
    );
    write(&node.home_dir().join(".mew/hooks.yaml"), &hooks)?;
    node.launch().await?;

    let boss = send_text(&node, "boss", "shout it").await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}",
        boss.status.state,
        status_text(&boss)
    );
    let refused = send_text(&node, "boss", "tell me the secret").await?;
    ensure!(
        refused.status.state == TaskState::Failed
            && status_text(&refused).contains("blocked by hook no-secrets")
            && status_text(&refused).contains("no secrets here"),
        "{:?}: {}",
        refused.status.state,
        status_text(&refused)
    );

    let lines = |file: &str| -> anyhow::Result<Vec<serde_json::Value>> {
        let text = std::fs::read_to_string(node.project_dir().join(file))
            .with_context(|| format!("{file} was not written"))?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("a line of {file}: {l}")))
            .collect()
    };
    let completed = lines("completed.log")?;
    let states: Vec<(&str, &str)> = completed
        .iter()
        .filter_map(|p| Some((p["task_id"].as_str()?, p["state"].as_str()?)))
        .collect();
    ensure!(
        states.contains(&(boss.id.as_str(), "TASK_STATE_COMPLETED"))
            && states.contains(&(refused.id.as_str(), "TASK_STATE_FAILED")),
        "TaskCompleted payloads: {completed:?}"
    );
    let subagents = lines("subagents.log")?;
    let events: Vec<&str> = subagents
        .iter()
        .filter(|p| p["agent_type"] == "upper")
        .filter_map(|p| p["hook_event_name"].as_str().or(p["event"].as_str()))
        .collect();
    ensure!(
        events == ["SubagentStart", "SubagentStop"],
        "Subagent payloads: {subagents:?}"
    );
    model.assert_done();
    Ok(())
}

/// `.claude/settings.json` with the hook shapes Claude Code users write: a `PreToolUse` hook
/// narrowed by `if` to commits, a `PermissionRequest` hook that approves `false` for the
/// user, a `PostToolUse` logger of `echo` calls, a `PostToolUseFailure` logger and an `async`
/// `Stop` hook.
const CLAUDE_EVENTS_SETTINGS: &str = r#"{
  "permissions": {"allow": ["Bash(echo:*)"]},
  "hooks": {
    "PreToolUse": [{"matcher": "Bash", "hooks": [
      {"type": "command", "if": "Bash(git commit:*)",
       "command": "echo 'commits go through review' >&2; exit 2"}
    ]}],
    "PermissionRequest": [{"matcher": "Bash", "hooks": [
      {"type": "command", "if": "Bash(false)",
       "command": "echo '{\"hookSpecificOutput\": {\"hookEventName\": \"PermissionRequest\", \"decision\": {\"behavior\": \"allow\"}}}'"}
    ]}],
    "PostToolUse": [{"matcher": "Bash", "hooks": [
      {"type": "command", "if": "Bash(echo:*)",
       "command": "cat > \"$CLAUDE_PROJECT_DIR/post.json\""}
    ]}],
    "PostToolUseFailure": [{"matcher": "Bash", "hooks": [
      {"type": "command", "command": "cat > \"$CLAUDE_PROJECT_DIR/failure.json\""}
    ]}],
    "Stop": [{"hooks": [
      {"type": "command", "async": true,
       "command": "cat > \"$CLAUDE_PROJECT_DIR/stop.json\"; echo 'an async hook cannot keep the run going' >&2; exit 2"}
    ]}]
  }
}
"#;

#[tokio::test]
async fn claude_code_if_permission_request_failure_and_async_stop_hooks_on_a_node()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "bash", json!({"command": "git commit -am wip"})),
        // The `if` hook refused the commit before it ran.
        Step::tool_call("call_2", "bash", json!({"command": "echo hi"}))
            .expect_tool_results(["call_1"])
            .expect_last_user("commits go through review"),
        // `echo` is allowed, and the commit hook's `if` does not match it.
        Step::tool_call("call_3", "bash", json!({"command": "false"}))
            .expect_tool_results(["call_2"])
            .expect_last_user("hi"),
        // `false` would ask the user; the PermissionRequest hook approved it, and it failed.
        Step::text("Done.")
            .expect_tool_results(["call_3"])
            .expect_last_user("exit code 1"),
    ])?;
    let mut node = model_node(
        &model,
        &[("committer.md", &role("committer", "tools: [bash]\n"))],
    )?;
    let project = node.project_dir();
    write(
        &project.join(".claude/settings.json"),
        CLAUDE_EVENTS_SETTINGS,
    )?;
    mew(&node, &["hooks", "trust"]).await?;
    let listed = mew(&node, &["hooks", "list"]).await?;
    ensure!(
        listed.contains("PermissionRequest") && listed.contains("PostToolUseFailure"),
        "hooks list:\n{listed}"
    );

    node.launch().await?;
    let task = send_text(&node, "committer", "commit and check").await?;
    ensure!(
        task.status.state == TaskState::Completed && status_text(&task) == "Done.",
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();

    // Claude Code's structured `tool_response` of a Bash call.
    let post: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("post.json"))?)?;
    ensure!(
        post["hook_event_name"] == "PostToolUse"
            && post["tool_input"]["command"] == "echo hi"
            && post["tool_response"]
                == json!({"stdout": "hi\n", "stderr": "", "interrupted": false, "isImage": false}),
        "PostToolUse payload: {post}"
    );
    let failure: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("failure.json"))?)?;
    ensure!(
        failure["hook_event_name"] == "PostToolUseFailure"
            && failure["tool_name"] == "Bash"
            && failure["tool_input"]["command"] == "false"
            && failure["error"]
                .as_str()
                .is_some_and(|error| error.contains("exit code 1")),
        "PostToolUseFailure payload: {failure}"
    );
    // The async Stop hook runs after the answer; its exit 2 could not keep the run going.
    let stop = project.join("stop.json");
    let seen = mew_tests::node::poll_until(
        "the async Stop hook's payload",
        std::time::Duration::from_secs(60),
        || async {
            Ok(std::fs::read_to_string(&stop)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok()))
        },
    )
    .await?;
    ensure!(seen["hook_event_name"] == "Stop", "Stop payload: {seen}");
    // Claude Code's transcript_path: the conversation as JSON Lines, the answer included.
    let transcript = seen["transcript_path"]
        .as_str()
        .context("the Stop payload has no transcript_path")?;
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(transcript)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let said = |role: &str, text: &str| {
        lines.iter().any(|line| {
            line["type"] == role
                && line["message"]["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["text"] == text))
        })
    };
    ensure!(
        said("user", "commit and check") && said("assistant", "Done."),
        "transcript: {lines:#?}"
    );
    ensure!(
        lines
            .iter()
            .any(|line| line["message"]["content"][0]["name"] == "Bash"),
        "the transcript names tools as Claude Code does: {lines:#?}"
    );
    Ok(())
}
