//! `mew init` in a fresh project: the files it writes, its refusal to overwrite them, and a
//! node that serves the example role as written.

use std::fs;

use anyhow::{Context, ensure};
use mew_tests::node::MewNode;

#[tokio::test]
async fn init_writes_a_project_whose_example_role_answers_and_never_overwrites()
-> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let config = node.project_dir().join(".mew/config.yaml");
    let role = node.roles_dir().join("hello.md");

    let (code, out, err) = node.client(&["init"]).await?;
    ensure!(code == 0, "mew init: exit {code}: {out}{err}");
    let config_text = fs::read_to_string(&config).context("the written config")?;
    let role_text = fs::read_to_string(&role).context("the written role")?;
    ensure!(
        out.contains(&config.display().to_string()) && out.contains(&role.display().to_string()),
        "mew init does not say what it wrote: {out}"
    );
    // The client ran with `--project`, so the suggested commands carry it too.
    let mew = format!("mew --project {}", node.project_dir().display());
    ensure!(
        out.contains(&format!("`{mew} up`")) && out.contains(&format!("{mew} send hello world")),
        "mew init does not say what to do next: {out}"
    );
    ensure!(
        config_text
            .lines()
            .all(|line| line.is_empty() || line.starts_with('#')),
        "the config has active lines:\n{config_text}"
    );
    ensure!(
        role_text.starts_with("---\nname: hello\n") && role_text.contains("\ncommand: "),
        "the role:\n{role_text}"
    );

    // The node loads the written config as it is.
    let (code, out, err) = node.client(&["config", "show"]).await?;
    ensure!(code == 0, "mew config show: exit {code}: {out}{err}");

    // A second run refuses, names the files, and leaves them as they are (an edit included).
    let edited = format!("{role_text}\nEdited by hand.\n");
    fs::write(&role, &edited)?;
    let (code, out, err) = node.client(&["init"]).await?;
    ensure!(code == 1, "a second mew init: exit {code}: {out}{err}");
    ensure!(
        err.contains(&config.display().to_string())
            && err.contains(&role.display().to_string())
            && err.contains("--force"),
        "the refusal: {err}"
    );
    ensure!(
        fs::read_to_string(&config)? == config_text,
        "the config changed"
    );
    ensure!(fs::read_to_string(&role)? == edited, "the role changed");

    // `--force` puts both back, even over a configuration that does not load.
    fs::write(&config, "no_such_section: 1\n")?;
    let (code, out, err) = node.client(&["init", "--force"]).await?;
    ensure!(code == 0, "mew init --force: exit {code}: {out}{err}");
    ensure!(
        fs::read_to_string(&role)? == role_text,
        "--force did not replace the role"
    );
    ensure!(
        fs::read_to_string(&config)? == config_text,
        "--force did not replace the config"
    );

    node.launch().await?;
    let (code, out, err) = node
        .client(&[
            "send",
            "hello",
            "brave",
            "new",
            "world",
            "--node",
            node.url(),
        ])
        .await?;
    ensure!(code == 0, "mew send hello: exit {code}: {out}{err}");
    ensure!(
        out.lines()
            .any(|line| line.starts_with("state:") && line.trim_end().ends_with(" completed")),
        "the task: {out}"
    );
    ensure!(out.contains("Hello, brave new world!"), "the answer: {out}");
    Ok(())
}
