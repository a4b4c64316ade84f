//! Delegation without a model: a `remote:` role forwards each turn to another node's role,
//! through the configured peer, as a child task the tree shows (and `mew tasks list` names the
//! role of each task).

use anyhow::{Context, ensure};
use mew_cards::TaskState;
use mew_tests::node::{MewNode, command_role, send_text, status_text};

#[tokio::test]
async fn a_remote_role_forwards_to_a_peer_role_and_the_tree_shows_both_tasks() -> anyhow::Result<()>
{
    let mut b = MewNode::new()?;
    b.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    b.launch().await?;

    let mut a = MewNode::new()?;
    a.write_config(&format!("peers:\n  b:\n    url: {}\n", b.url()))?;
    a.write_role(
        "fwd.md",
        "---\nname: fwd\ndescription: Forwards to b's upper.\nremote: b/upper\n---\n",
    )?;
    a.write_role(
        "broken.md",
        &command_role("broken", "sh -c 'echo disk full >&2; exit 3'"),
    )?;
    a.launch().await?;

    let parent = send_text(&a, "fwd", "shout this").await?;
    ensure!(
        parent.status.state == TaskState::Completed,
        "{:?}: {}",
        parent.status.state,
        status_text(&parent)
    );
    ensure!(
        status_text(&parent).contains("SHOUT THIS"),
        "the parent's answer: {}",
        status_text(&parent)
    );

    let (code, out, err) = a
        .client(&[
            "tasks",
            "tree",
            parent.id.as_str(),
            "--json",
            "--node",
            a.url(),
        ])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let tree: serde_json::Value = serde_json::from_str(&out).context("tree JSON")?;
    ensure!(tree["tasks"] == 2, "the tree: {tree:#}");
    let child = &tree["children"][0];
    ensure!(
        child["task"]["parentTask"] == parent.id.as_str() && child["url"] == b.role_url("upper"),
        "the child in the tree: {tree:#}"
    );
    let child_id = child["task"]["id"].as_str().context("child id")?;

    // The terminal view names each task's role; the child's runs on b, which the line says.
    let (code, out, err) = a
        .client(&["tasks", "tree", parent.id.as_str(), "--node", a.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let b_host = b.url().trim_start_matches("http://");
    ensure!(
        out.lines()
            .next()
            .is_some_and(|l| l.starts_with(&format!("{}  fwd  completed", parent.id)))
            && out.lines().any(|l| {
                l.starts_with(&format!("└─ {child_id}  upper @ {b_host}  completed"))
            })
            && !out.contains(a.url()),
        "{out}"
    );

    // The task list names the role of each task and says why the failed one failed.
    let failed = send_text(&a, "broken", "anything").await?;
    ensure!(
        failed.status.state == TaskState::Failed,
        "{:?}: {}",
        failed.status.state,
        status_text(&failed)
    );
    let (code, out, err) = a.client(&["tasks", "list", "--node", a.url()]).await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let row = |id: &str| {
        out.lines()
            .find(|l| l.starts_with(id))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    ensure!(
        out.lines().next().is_some_and(|l| {
            l.split_whitespace().collect::<Vec<_>>()
                == [
                    "ID", "ROLE", "STATE", "CONTEXT", "UPDATED", "MESSAGE", "REASON",
                ]
        }),
        "the header: {out}"
    );
    ensure!(
        row(parent.id.as_str()).get(1..3) == Some(&["fwd", "completed"][..]),
        "the forwarding task's row: {out}"
    );
    let broken = row(failed.id.as_str());
    ensure!(
        broken.get(1..3) == Some(&["broken", "failed"][..])
            && broken
                .join(" ")
                .ends_with("anything sh exited with status 3: disk full"),
        "the failed task's row: {out}"
    );
    Ok(())
}
