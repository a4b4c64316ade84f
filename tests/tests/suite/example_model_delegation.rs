//! `examples/model-delegation` runs as its README says: node b of `examples/two-nodes`, the
//! example's node with its model role on the scripted model server, then the README's own
//! commands, with the model's delegation to b's role, b's exact answer and the tree.

use std::fs;

use anyhow::{Context, ensure};
use mew_tests::example::{copy_dir, example_dir, sh_blocks};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, mew_bin, scripted_model_config};
use serde_json::json;

#[tokio::test]
async fn the_model_delegation_example_runs_as_its_readme_says() -> anyhow::Result<()> {
    let example = example_dir("model-delegation");
    let blocks = sh_blocks(&example.join("README.md"))?;
    let [_model_server, up_b, up_a, send, tree] = blocks.as_slice() else {
        anyhow::bail!("the README has five shell blocks: {blocks:?}");
    };
    ensure!(
        up_b.trim() == "mew up --project examples/two-nodes/b",
        "{up_b}"
    );
    ensure!(
        up_a.trim() == "mew up --project examples/model-delegation",
        "{up_a}"
    );

    let mut b = MewNode::new()?;
    copy_dir(&example_dir("two-nodes").join("b"), &b.project_dir())?;
    b.use_default_data_dir();
    b.launch().await?;

    // The model does what the role's prompt asks: one Agent call to b/upper, then b's answer.
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "delegation works", "description": "shout", "subagent_type": "b/upper"}),
        )
        .expect_tools_include(["Agent"])
        .expect_system("b/upper"),
        Step::text("b says: DELEGATION WORKS")
            .expect_tool_results(["call_1"])
            .expect_last_user("DELEGATION WORKS"),
    ])?;
    // The example's own files, unchanged; a `--config` layer names the scripted model and b's
    // port (README: "a `--config` layer names it and the ports").
    let mut a = MewNode::new()?;
    copy_dir(&example, &a.project_dir())?;
    let layer = a.dir().join("test.yaml");
    fs::write(
        &layer,
        format!(
            "{}peers:\n  b: {{url: \"{}\"}}\n",
            scripted_model_config(&model),
            b.url()
        ),
    )?;
    a.set_config_file(&layer);
    a.use_default_data_dir();
    a.launch().await?;

    // The README's commands, with the built `mew`, the layer, and a's port.
    let bin = mew_bin()?;
    let port = a.url().rsplit(':').next().context("a's port")?.to_owned();
    let run = |block: &str| {
        let block = block.replace(
            "mew --project examples/model-delegation",
            &format!(
                "'{}' --config '{}' --project '{}'",
                bin.display(),
                layer.display(),
                a.project_dir().display()
            ),
        );
        let mut sh = mew_tests::process::command("sh");
        sh.args(["-c", &block])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", a.home_dir())
            .env("MEW_PORT", &port);
        async move {
            let output = sh.output().await?;
            anyhow::Ok((
                output.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ))
        }
    };
    let (code, out, err) = run(send).await?;
    ensure!(
        code == 0 && out.contains("b says: DELEGATION WORKS"),
        "send: exit {code}\n{out}{err}\n{}",
        a.log()
    );
    model.assert_done();
    let id = mew_tests::node::printed_task_ids(&out)
        .into_iter()
        .next()
        .context("the planner's task id")?;

    ensure!(tree.contains("TASK_ID"), "{tree}");
    let (code, out, err) = run(&tree.replace("TASK_ID", &id)).await?;
    ensure!(code == 0, "tree: exit {code}\n{out}{err}");
    let b_port = b.url().rsplit(':').next().context("b's port")?;
    ensure!(
        out.lines()
            .any(|line| line.starts_with(&id) && line.contains("planner"))
            && out.lines().any(|line| line.starts_with("└─ ")
                && line.contains(&format!("upper @ 127.0.0.1:{b_port}"))
                && line.contains("completed")),
        "the tree shows the planner's task and its child on b:\n{out}"
    );
    Ok(())
}
