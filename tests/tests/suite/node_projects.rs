//! Each project keeps its own tasks: two nodes of one user, on two projects, with no data
//! directory configured, run side by side and list only their own tasks.

use anyhow::{Context, ensure};
use mew_cards::TaskState;
use std::time::Duration;

use mew_tests::node::{MewNode, command_role, poll_until, send_text};

/// The number of tasks `mew tasks list` shows for `node`.
async fn listed(node: &MewNode) -> anyhow::Result<usize> {
    let (code, out, err) = node
        .client(&["tasks", "list", "--json", "--node", node.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).context("list JSON")?;
    Ok(listed["tasks"].as_array().map_or(0, Vec::len))
}

#[tokio::test]
async fn two_projects_of_one_user_keep_separate_tasks_by_default() -> anyhow::Result<()> {
    let mut first = MewNode::new()?;
    first.use_default_data_dir();
    first.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    let mut second = MewNode::new()?;
    second.set_home(first.home_dir());
    second.use_default_data_dir();
    second.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    // Both at once: they do not share a data directory, so neither waits for the other's lock.
    first.launch().await?;
    second.launch().await?;

    let task = send_text(&first, "upper", "only here").await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    ensure!(listed(&first).await? == 1, "the first project's tasks");
    ensure!(
        listed(&second).await? == 0,
        "the second project lists the first's tasks"
    );

    for node in [&first, &second] {
        let data = node.project_dir().join(".mew/data");
        ensure!(
            data.join("tasks.db").is_file(),
            "no tasks.db in {}",
            data.display()
        );
        let ignore = std::fs::read_to_string(data.join(".gitignore"))?;
        ensure!(
            ignore.lines().any(|line| line == "*"),
            "the data directory is not kept out of git: {ignore:?}"
        );
        let banner = format!(
            "tasks in {} (this project's own",
            data.join("tasks.db").display()
        );
        poll_until(
            "the banner names the project's data",
            Duration::from_secs(60),
            || {
                let found = node.output().contains(&banner);
                async move { Ok(found.then_some(())) }
            },
        )
        .await
        .with_context(|| node.output())?;
    }
    Ok(())
}
