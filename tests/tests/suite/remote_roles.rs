//! Delegation without a model: a `remote:` role forwards each turn to another node's role,
//! through the configured peer, as a child task the tree shows.

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

    let (code, out, err) = a
        .client(&["tasks", "tree", parent.id.as_str(), "--node", a.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        out.lines()
            .next()
            .is_some_and(|l| l.starts_with(parent.id.as_str()))
            && out
                .lines()
                .any(|l| l.starts_with(&format!("└─ {child_id}"))),
        "{out}"
    );
    Ok(())
}
