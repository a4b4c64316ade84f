//! Each project keeps its own tasks: two nodes of one user, on two projects, with no data
//! directory configured, run side by side and list only their own tasks; `mew run` uses the
//! project's running node, and runs in-process when none runs.

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

#[tokio::test]
async fn mew_run_uses_the_projects_running_node_and_runs_alone_when_none_runs() -> anyhow::Result<()>
{
    let mut node = MewNode::new()?;
    node.use_default_data_dir();
    node.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    node.launch().await?;
    let node_file = node.data_dir().join("node.json");
    ensure!(
        node_file.is_file(),
        "mew up wrote no {}",
        node_file.display()
    );

    let (code, out, err) = node
        .client(&["run", "--role", "upper", "beside", "the", "node"])
        .await?;
    ensure!(
        code == 0 && out.contains("BESIDE THE NODE") && err.contains(node.url()),
        "mew run beside mew up: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    // The task is the node's: its clients see it.
    ensure!(
        listed(&node).await? == 1,
        "the node does not list mew run's task"
    );

    // A role the node does not serve is named as such, not run elsewhere.
    let (code, _, err) = node.client(&["run", "--role", "lower", "hi"]).await?;
    ensure!(
        code != 0 && err.contains("lower") && err.contains(node.url()),
        "an unknown role: exit {code}: {err}"
    );
    ensure!(listed(&node).await? == 1, "a task for the unknown role");

    // `mew chat` too: each line a task of one context, on the node.
    let (code, out, err) = node
        .client_with_input(
            &["chat", "--role", "upper"],
            "first line\nsecond line\n/tasks\n",
        )
        .await?;
    ensure!(
        code == 0
            && out.contains("FIRST LINE")
            && out.contains("SECOND LINE")
            && err.contains(node.url()),
        "mew chat beside mew up: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    ensure!(
        listed(&node).await? == 3,
        "the node does not list mew chat's tasks"
    );

    // A node that stopped leaves no file; one killed hard leaves a file nobody holds the lock
    // of. Either way `mew run` runs the role in-process.
    node.stop().await?;
    ensure!(
        !node_file.exists(),
        "mew up left {} behind",
        node_file.display()
    );
    node.launch().await?;
    node.kill_hard().await?;
    ensure!(node_file.is_file(), "the killed node's file is gone");
    let (code, out, err) = node.client(&["run", "--role", "upper", "alone"]).await?;
    ensure!(
        code == 0 && out.contains("ALONE") && !err.contains("on the node at"),
        "mew run without a node: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    Ok(())
}

#[tokio::test]
async fn mew_agents_asks_the_running_node_and_says_when_it_reads_the_files() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.use_default_data_dir();
    // The node does not look at its role files again: what it serves stays as it started.
    node.write_config("roles:\n  watch: 0\n")?;
    node.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    node.launch().await?;
    node.write_role("lower.md", &command_role("lower", "tr A-Z a-z"))?;

    let names = |out: &str| -> anyhow::Result<Vec<String>> {
        let listing: serde_json::Value = serde_json::from_str(out).context("agents JSON")?;
        Ok(listing["roles"]
            .as_array()
            .context("roles")?
            .iter()
            .filter_map(|role| role["name"].as_str().map(str::to_owned))
            .collect())
    };
    let (code, out, err) = node.client(&["agents", "--json"]).await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let served = names(&out)?;
    ensure!(
        err.contains(&format!("the roles the node at {} serves", node.url()))
            && served.contains(&"upper".to_owned())
            && !served.contains(&"lower".to_owned()),
        "from the node: {served:?}\n{err}"
    );

    node.stop().await?;
    let (code, out, err) = node.client(&["agents", "--json"]).await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let files = names(&out)?;
    ensure!(
        err.contains("no node runs for this project")
            && files.contains(&"upper".to_owned())
            && files.contains(&"lower".to_owned()),
        "from the files: {files:?}\n{err}"
    );
    Ok(())
}
