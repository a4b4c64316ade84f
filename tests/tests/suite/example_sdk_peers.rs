//! `examples/sdk-peers` run as its README says: the a2a-sdk (Python) and @a2a-js/sdk agents
//! as peers of a node whose model role (on the scripted model) delegates to both.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, ensure};
use mew_cards::TaskState;
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, scripted_model_config, send_text, status_text};
use mew_tests::process::{ChildProcess, command, workspace_root};
use mew_tests::python::python;
use serde_json::json;

const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn example_dir() -> PathBuf {
    workspace_root().join("examples/sdk-peers")
}

/// `python python_agent.py --port 0`, as the README starts it (on a free port).
async fn start_python_agent() -> anyhow::Result<(ChildProcess, String)> {
    let mut cmd = command(python()?);
    cmd.arg(example_dir().join("python_agent.py"))
        .args(["--port", "0"]);
    ChildProcess::spawn_ready("python_agent.py", cmd, READY_TIMEOUT).await
}

/// `node js_agent.mjs --port 0` in a copy of the example whose `node_modules` is the test
/// peers' (`scripts/install-peers` installs @a2a-js/sdk and express there, at the example's
/// pins), so the test needs no `npm ci` of its own.
async fn start_js_agent(dir: &Path) -> anyhow::Result<(ChildProcess, String)> {
    fs::copy(example_dir().join("js_agent.mjs"), dir.join("js_agent.mjs"))
        .context("cannot copy js_agent.mjs")?;
    let modules = workspace_root().join("tests/peers/node_modules");
    ensure!(
        modules.join("@a2a-js/sdk").exists(),
        "@a2a-js/sdk is not installed: run scripts/install-peers"
    );
    std::os::unix::fs::symlink(&modules, dir.join("node_modules"))
        .context("cannot link node_modules")?;
    let mut cmd = command("node");
    cmd.current_dir(dir).args(["js_agent.mjs", "--port", "0"]);
    ChildProcess::spawn_ready("js_agent.mjs", cmd, READY_TIMEOUT).await
}

/// The lines of `mew peers` about `peer`: its name line and the indented ones under it.
fn peer_block<'a>(out: &'a str, peer: &str) -> Option<Vec<&'a str>> {
    let mut lines = out.lines().skip_while(|l| *l != peer);
    lines.next()?;
    Some(lines.take_while(|l| l.starts_with(' ')).collect())
}

#[tokio::test]
async fn example_sdk_peers_model_role_delegates_to_the_python_and_js_agents() -> anyhow::Result<()>
{
    let js_dir = tempfile::tempdir()?;
    let (_python, python_url) = start_python_agent().await?;
    let (_js, js_url) = start_js_agent(js_dir.path()).await?;

    let text = "hello wide world";
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_py",
            "Agent",
            json!({"prompt": text, "description": "reverse", "subagent_type": "python/reverse"}),
        )
        .expect_tools_include(["Agent"])
        .expect_system("python/reverse"),
        Step::tool_call(
            "call_js",
            "Agent",
            json!({"prompt": text, "description": "title case", "subagent_type": "js/titlecase"}),
        )
        .expect_tool_results(["call_py"]),
        Step::text("reversed: dlrow ediw olleh\ntitle case: Hello Wide World")
            .expect_tool_results(["call_py", "call_js"]),
    ])?;

    // The example's own project files, unchanged; a `--config` layer points its peers at
    // the agents' ports and its provider at the scripted model (README: "Other ports").
    let mut node = MewNode::new()?;
    let mew = example_dir().join(".mew");
    node.write_config(&fs::read_to_string(mew.join("config.yaml"))?)?;
    node.write_role(
        "writer.md",
        &fs::read_to_string(mew.join("agents/writer.md"))?,
    )?;
    let layer = node.dir().join("ports.yaml");
    fs::write(
        &layer,
        format!(
            "{}peers:\n  python: {{url: \"{python_url}\"}}\n  js: {{url: \"{js_url}\"}}\n",
            scripted_model_config(&model)
        ),
    )?;
    node.set_config_file(&layer);
    node.launch().await?;

    let (code, out, err) = node.client(&["peers"]).await?;
    ensure!(code == 0, "mew peers failed ({code}): {out}{err}");
    for (peer, skill) in [("python", "reverse"), ("js", "titlecase")] {
        let block = peer_block(&out, peer)
            .with_context(|| format!("mew peers does not list {peer}:\n{out}"))?;
        ensure!(
            block
                .iter()
                .any(|l| l.split_whitespace().eq(["state:", "ok"])),
            "{peer} is not reachable:\n{out}"
        );
        ensure!(
            block
                .iter()
                .any(|l| l.split_whitespace().next() == Some(skill)),
            "{peer} does not offer the role {skill}:\n{out}"
        );
    }

    let task = send_text(&node, "writer", text).await?;
    ensure!(
        task.status.state == TaskState::Completed,
        "{:?}: {}\n{}",
        task.status.state,
        status_text(&task),
        node.log()
    );
    model.assert_done();

    // What the model got back from each Agent call is that peer's real answer: the request
    // after a call carries its result.
    let requests = model.requests();
    for (step, peer, answer) in [
        (1, "python/reverse", "dlrow ediw olleh"),
        (2, "js/titlecase", "Hello Wide World"),
    ] {
        let request = requests
            .iter()
            .rfind(|r| r.step == Some(step))
            .with_context(|| format!("the model never got the request after {peer}"))?;
        let result = request.last_user_text();
        ensure!(
            result.contains(answer),
            "the result of {peer} lacks {answer:?}: {result}"
        );
    }
    Ok(())
}
