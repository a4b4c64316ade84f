//! `examples/two-nodes` runs as its README says: the two nodes on the example's projects, then
//! the README's own commands, with the answers and the tree the README promises.

use anyhow::{Context, ensure};
use mew_tests::example::{copy_dir, example_dir, sh_blocks};
use mew_tests::node::{MewNode, mew_bin};

/// Runs one shell block of the README from the repository root as a user with `mew`
/// installed would: the example's projects are the nodes' copies, node a is at `a`'s address
/// (`MEW_PORT`), and `mew` is the built binary. Its exit code, stdout and stderr.
async fn run_block(block: &str, a: &MewNode, path: &str) -> anyhow::Result<(i32, String, String)> {
    let block = block.replace(
        "examples/two-nodes/a",
        &a.project_dir().display().to_string(),
    );
    let port = a.url().rsplit(':').next().context("a's port")?;
    let output = mew_tests::process::command("sh")
        .args(["-c", &block])
        .env_clear()
        .env("PATH", path)
        .env("HOME", a.home_dir())
        .env("MEW_PORT", port)
        .output()
        .await?;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn the_two_nodes_example_runs_as_its_readme_says() -> anyhow::Result<()> {
    let example = example_dir("two-nodes");
    let blocks = sh_blocks(&example.join("README.md"))?;
    let [install, up_b, up_a, shout, relay, direct, tree] = blocks.as_slice() else {
        anyhow::bail!("the README has seven shell blocks: {blocks:?}");
    };
    // What the README runs is what this test runs, with the built binary for the installed one.
    ensure!(install.trim() == "cargo install --path node", "{install}");
    ensure!(
        up_b.trim() == "mew up --project examples/two-nodes/b",
        "{up_b}"
    );
    ensure!(
        up_a.trim() == "mew up --project examples/two-nodes/a",
        "{up_a}"
    );
    let bin = mew_bin()?;
    let path = format!(
        "{}:{}",
        bin.parent().context("the binary's directory")?.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut b = MewNode::new()?;
    copy_dir(&example.join("b"), &b.project_dir())?;
    b.use_default_data_dir();
    b.launch().await?;
    let mut a = MewNode::new()?;
    copy_dir(&example.join("a"), &a.project_dir())?;
    // The nodes listen where the test's free ports are, not on 7801 and 7802.
    let config = a.project_dir().join(".mew/config.yaml");
    let text = std::fs::read_to_string(&config)?;
    ensure!(text.contains("http://127.0.0.1:7802"), "{text}");
    std::fs::write(&config, text.replace("http://127.0.0.1:7802", b.url()))?;
    a.set_env("PATH", &path);
    a.use_default_data_dir();
    a.launch().await?;

    let (code, out, err) = run_block(shout, &a, &path).await?;
    ensure!(
        code == 0 && out.contains("HELLO FROM A"),
        "shout: exit {code}\n{out}{err}"
    );
    let (code, out, err) = run_block(relay, &a, &path).await?;
    ensure!(
        code == 0 && out.contains("b says: PASS IT ON"),
        "relay: exit {code}\n{out}{err}"
    );
    let relay_id = mew_tests::node::printed_task_ids(&out)
        .into_iter()
        .next()
        .context("relay's task id")?;
    let (code, out, err) = run_block(direct, &a, &path).await?;
    ensure!(
        code == 0 && out.contains("STRAIGHT TO B"),
        "b/upper: exit {code}\n{out}{err}"
    );

    ensure!(tree.contains("TASK_ID"), "{tree}");
    let (code, out, err) = run_block(&tree.replace("TASK_ID", &relay_id), &a, &path).await?;
    ensure!(code == 0, "tree: exit {code}\n{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    ensure!(
        lines.first().is_some_and(|l| l.starts_with(&relay_id))
            && lines
                .iter()
                .any(|l| l.starts_with("└─ ") && l.contains("completed")),
        "the tree shows the relay's task and its child on b:\n{out}"
    );

    // b ran one task for each of the three sends.
    let (code, out, err) = b
        .client(&["tasks", "list", "--json", "--node", b.url()])
        .await?;
    let listed: serde_json::Value = serde_json::from_str(&out).with_context(|| err.clone())?;
    let on_b = listed["tasks"].as_array().map_or(0, Vec::len);
    ensure!(code == 0 && on_b == 3, "b ran {on_b} tasks: {listed}");
    Ok(())
}
