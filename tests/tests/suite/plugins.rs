//! A Claude Code plugin installed from a git repository with `mew plugins install` and run on a
//! node: its agent is a role, its skill and commands reach the model, its hook (found through
//! `CLAUDE_PLUGIN_ROOT`) refuses a call, and its MCP server (started from the plugin's folder)
//! answers; once a file of it changes, none of it loads. The same plugin from a folder, into
//! the project, with `mew run`.

use std::path::Path;

use anyhow::{Context, ensure};
use mew_cards::TaskState;
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, send_text, status_text};
use serde_json::json;

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A plugin as Claude Code's documentation lays one out, in `dir`; its MCP server runs the
/// test server `server` through a script in the plugin's `bin/`.
fn make_plugin(dir: &Path, server: &Path) -> anyhow::Result<()> {
    write(
        &dir.join(".claude-plugin/plugin.json"),
        r#"{"name": "review-kit", "version": "1.0.0", "description": "Reviews, the house way",
            "author": {"name": "Mew tests"}, "commands": ["./extra/shout.md"]}"#,
    )?;
    // A Claude Code agent: filed by topic, an unquoted colon in its description.
    write(
        &dir.join("agents/review/kit-reviewer.md"),
        "---\nname: kit-reviewer\ndescription: Reviews changes: carefully, the house way\n---\n\
         You review changes.\n",
    )?;
    write(
        &dir.join("skills/house-style/SKILL.md"),
        "---\nname: house-style\ndescription: The house style for reviews.\n---\nBe kind.\n",
    )?;
    write(
        &dir.join("commands/greet.md"),
        "---\ndescription: Greets someone\nargument-hint: NAME\n---\nGreet $ARGUMENTS in the \
         house style.\n",
    )?;
    write(&dir.join("extra/shout.md"), "Shout $ARGUMENTS.\n")?;
    write(
        &dir.join("hooks/hooks.json"),
        r#"{"description": "The kit's guard",
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
              {"type": "command", "command": "sh \"${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh\""}]}]}}"#,
    )?;
    write(
        &dir.join("hooks/guard.sh"),
        "input=$(cat)\ncase \"$input\" in\n  *'rm -rf'*) echo \"the kit's guard refuses rm \
         ($(basename \"$CLAUDE_PLUGIN_ROOT\"))\" >&2; exit 2 ;;\nesac\nexit 0\n",
    )?;
    write(
        &dir.join("bin/server"),
        &format!("#!/bin/sh\nexec '{}' \"$@\"\n", server.display()),
    )?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.join("bin/server"),
        std::fs::Permissions::from_mode(0o755),
    )?;
    write(
        &dir.join(".mcp.json"),
        r#"{"mcpServers": {"kit": {"command": "${CLAUDE_PLUGIN_ROOT}/bin/server"}}}"#,
    )?;
    Ok(())
}

/// Runs `git` in `dir`; fails unless it exits 0.
fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    #[allow(clippy::disallowed_methods)] // a test's own tool, not a node's child
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Mew",
            "-c",
            "user.email=mew@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .context("running git")?;
    ensure!(status.success(), "git {args:?}: {status}");
    Ok(())
}

#[tokio::test]
async fn a_plugin_from_git_brings_its_agent_skill_commands_hook_and_mcp_server()
-> anyhow::Result<()> {
    let source = tempfile::tempdir()?;
    make_plugin(source.path(), &mew_tests::mcp::server_bin()?)?;
    git(source.path(), &["init", "-q", "-b", "main"])?;
    git(source.path(), &["add", "-A"])?;
    git(source.path(), &["commit", "-q", "-m", "kit"])?;
    git(source.path(), &["tag", "v1"])?;

    let model = ScriptedModel::start(vec![
        // The plugin's skill and commands are offered; its MCP server's tools are there.
        Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"}))
            .expect_system("house-style")
            .expect_system("greet")
            .expect_tools_include(["mcp__kit__echo"]),
        Step::tool_call("call_2", "mcp__kit__echo", json!({"text": "meow"}))
            .expect_tool_results(["call_1"])
            .expect_last_user("the kit's guard refuses rm (review-kit)"),
        Step::text("Reviewed.")
            .expect_tool_results(["call_2"])
            .expect_last_user("meow"),
        // `/review-kit:greet Bob`: the plugin's command, its argument filled in.
        Step::text("Hello, Bob!").expect_last_user("Greet Bob in the house style."),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n\
         permissions:\n  allow: [mcp__kit__echo]\n",
        model.base_url()
    ))?;
    let url = format!("file://{}#v1", source.path().display());
    let (code, out, err) = node.client(&["plugins", "install", &url]).await?;
    ensure!(
        code == 0 && out.contains("installed plugin review-kit") && out.contains("commit "),
        "install ({code}):\n{out}{err}"
    );
    let (code, out, err) = node.client(&["plugins", "list"]).await?;
    ensure!(
        code == 0 && out.contains("review-kit  user  1.0.0  agents,skills,commands,hooks,mcp"),
        "list ({code}):\n{out}{err}"
    );

    node.launch().await?;
    let task = send_text(&node, "kit-reviewer", "review the change").await?;
    ensure!(
        task.status.state == TaskState::Completed && status_text(&task) == "Reviewed.",
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    // Claude Code's name for a plugin's command: PLUGIN:COMMAND.
    let task = send_text(&node, "kit-reviewer", "/review-kit:greet Bob").await?;
    ensure!(
        status_text(&task) == "Hello, Bob!",
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    let (status, card) = node
        .get_json("/agents/kit-reviewer/.well-known/agent-card.json")
        .await?;
    ensure!(
        status == 200,
        "the plugin's agent has no card: {status} {card}"
    );
    node.stop().await?;

    // A changed file: the plugin is refused whole, and `verify` says which file.
    let installed = node.home_dir().join(".mew/plugins/review-kit");
    std::fs::write(installed.join("hooks/guard.sh"), "exit 0\n")?;
    let (code, out, err) = node.client(&["plugins", "verify"]).await?;
    ensure!(
        code == 1 && out.contains("files changed since it was installed (hooks/guard.sh)"),
        "verify ({code}):\n{out}{err}"
    );
    let (_, out, _) = node.client(&["agents"]).await?;
    ensure!(!out.contains("kit-reviewer"), "agents:\n{out}");
    let (_, out, _) = node.client(&["hooks", "list"]).await?;
    ensure!(!out.contains("review-kit"), "hooks:\n{out}");
    Ok(())
}

#[tokio::test]
async fn a_plugin_from_a_folder_installs_into_the_project_and_mew_run_uses_its_command()
-> anyhow::Result<()> {
    let source = tempfile::tempdir()?;
    make_plugin(source.path(), &mew_tests::mcp::server_bin()?)?;
    let model = ScriptedModel::start(vec![
        // The manifest's extra command, `/shout`, its argument filled in.
        Step::text("HEY!").expect_last_user("Shout hey."),
    ])?;
    let node = MewNode::new()?;
    node.write_config(&format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n",
        model.base_url()
    ))?;
    let folder = source.path().display().to_string();
    let (code, out, err) = node
        .client(&["plugins", "install", &folder, "--scope", "project"])
        .await?;
    ensure!(
        code == 0 && out.contains("installed plugin review-kit"),
        "install ({code}):\n{out}{err}"
    );
    let installed = node.project_dir().join(".mew/plugins");
    ensure!(
        installed.join("review-kit/commands/greet.md").is_file()
            && std::fs::read_to_string(installed.join("plugins-lock.json"))?
                .contains("hooks/guard.sh"),
        "the plugin is not copied and locked under {}",
        installed.display()
    );
    let (code, out, err) = node.client(&["plugins", "list"]).await?;
    ensure!(
        code == 0 && out.contains("review-kit  project  1.0.0"),
        "list ({code}):\n{out}{err}"
    );
    let (code, out, err) = node
        .client(&["run", "--role", "kit-reviewer", "/shout hey"])
        .await?;
    ensure!(
        code == 0 && out.contains("HEY!"),
        "mew run ({code}):\n{out}{err}"
    );
    model.assert_done();
    Ok(())
}
