//! Delegation without a model: a `remote:` role forwards each turn to another node's role,
//! through the configured peer, as a child task the tree shows (and `mew tasks list` names the
//! role of each task).

use std::time::Duration;

use anyhow::{Context, ensure};
use mew_cards::TaskState;
use mew_tests::node::{MewNode, command_role, mew_bin, poll_until, send_text, status_text};

/// Node B: role `upper`, open only to the principal `node-a`, whose key is `key-of-node-a`.
async fn keyed_peer() -> anyhow::Result<MewNode> {
    let mut b = MewNode::new()?;
    b.set_env("B_KEY_FOR_A", "key-of-node-a");
    b.write_config("auth:\n  api_keys:\n    - name: node-a\n      key_env: B_KEY_FOR_A\n")?;
    b.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    b.launch().await?;
    Ok(b)
}

/// Makes `b` a peer of node `a`'s project, with the key for it in `a`'s environment only.
fn with_key_for(a: &mut MewNode, b: &MewNode) -> anyhow::Result<()> {
    a.set_env("KEY_FOR_B", "key-of-node-a");
    a.write_config(&format!(
        "peers:\n  b:\n    url: {}\n    auth:\n      api_key_env: KEY_FOR_B\n",
        b.url()
    ))
}

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

#[tokio::test]
async fn mew_send_reaches_a_peers_role_with_the_peers_credentials() -> anyhow::Result<()> {
    let b = keyed_peer().await?;

    // A's project names B as a peer whose key is in the environment; no node of A runs.
    let mut a = MewNode::new()?;
    with_key_for(&mut a, &b)?;

    let (code, out, err) = a.client(&["send", "b/upper", "hello", "there"]).await?;
    ensure!(
        code == 0 && out.contains("HELLO THERE"),
        "exit {code}\nstdout: {out}\nstderr: {err}"
    );

    // The same role by URL, without the peer's credentials, is refused by B.
    let (code, out, err) = a.client(&["send", &b.role_url("upper"), "hello"]).await?;
    ensure!(
        code != 0 && !out.contains("HELLO"),
        "without the key: exit {code}\nstdout: {out}\nstderr: {err}"
    );

    let (code, _, err) = a.client(&["send", "c/upper", "hello"]).await?;
    ensure!(
        code == 1 && err.contains("no peer named c is configured (peers: b)"),
        "an unknown peer: exit {code}: {err}"
    );
    let (code, _, err) = a.client(&["send", "b/lower", "hello"]).await?;
    ensure!(
        code == 1 && err.contains("lower") && err.contains("upper"),
        "an unknown role names the known ones: exit {code}: {err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_command_role_delegates_with_mew_send_and_the_tree_shows_both_tasks() -> anyhow::Result<()>
{
    let mut b = MewNode::new()?;
    b.write_role("upper.md", &command_role("upper", "tr a-z A-Z"))?;
    b.launch().await?;

    // `relay` sends what it is given to b's upper with `mew send`, keeping its token where
    // the test can try it once the turn is over.
    let mut a = MewNode::new()?;
    a.write_config(&format!("peers:\n  b:\n    url: {}\n", b.url()))?;
    let kept = a.dir().join("token");
    let script = a.project_dir().join("relay.sh");
    std::fs::write(
        &script,
        format!(
            "printf %s \"$MEW_TASK_TOKEN\" > '{kept}'\nexec '{mew}' send b/upper \"$(cat)\"\n",
            kept = kept.display(),
            mew = mew_bin()?.display(),
        ),
    )?;
    a.write_role(
        "relay.md",
        &command_role("relay", &format!("sh '{}'", script.display())),
    )?;
    a.launch().await?;

    let parent = send_text(&a, "relay", "shout this").await?;
    ensure!(
        parent.status.state == TaskState::Completed,
        "{:?}: {}",
        parent.status.state,
        status_text(&parent)
    );
    let output = serde_json::to_string(&parent.artifacts)?;
    ensure!(
        output.contains("SHOUT THIS"),
        "the relay's output: {output}"
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
        child["task"]["parentTask"] == parent.id.as_str()
            && child["url"] == b.role_url("upper")
            && child["task"]["state"] == "TASK_STATE_COMPLETED",
        "the child in the tree: {tree:#}"
    );

    // The token was good only while the turn ran; none, or a made-up one, never is.
    let token = std::fs::read_to_string(&kept)?;
    ensure!(token.len() >= 40, "the token: {token:?}");
    let callback = format!("{}/mew/v1/delegations", a.url());
    let body = serde_json::json!({"target": "b/upper", "text": "again"});
    let http = reqwest::Client::new();
    for token in [Some(token.as_str()), Some("made-up"), None] {
        let mut request = http.post(&callback).json(&body);
        if let Some(token) = token {
            request = request.header("x-mew-task-token", token);
        }
        let response = request.send().await?;
        ensure!(
            response.status() == 401,
            "with {token:?}: {} {}",
            response.status(),
            response.text().await?
        );
    }
    let on_b = tasks_of(&b).await?;
    ensure!(on_b.len() == 1, "b ran {} tasks: {on_b:?}", on_b.len());
    Ok(())
}

#[tokio::test]
async fn the_tree_asks_a_peer_for_its_tasks_with_the_peers_credentials() -> anyhow::Result<()> {
    let b = keyed_peer().await?;

    let mut a = MewNode::new()?;
    with_key_for(&mut a, &b)?;
    a.write_role(
        "fwd.md",
        "---\nname: fwd\ndescription: Forwards to b's upper.\nremote: b/upper\n---\n",
    )?;
    a.launch().await?;
    let parent = send_text(&a, "fwd", "guarded").await?;
    ensure!(
        parent.status.state == TaskState::Completed,
        "{:?}: {}",
        parent.status.state,
        status_text(&parent)
    );

    // No --token for b: the child on b is asked for with the key a's configuration names.
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
    let child = &tree["children"][0];
    ensure!(
        tree["partial"] == false
            && child["error"].is_null()
            && child["task"]["state"] == "TASK_STATE_COMPLETED",
        "the child on b, fetched with the peer's key: {tree:#}"
    );
    Ok(())
}

/// The tasks `node` lists, as JSON.
async fn tasks_of(node: &MewNode) -> anyhow::Result<Vec<serde_json::Value>> {
    let (code, out, err) = node
        .client(&["tasks", "list", "--json", "--node", node.url()])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).context("list JSON")?;
    Ok(listed["tasks"].as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn cancelling_a_remote_roles_task_cancels_its_child_on_the_peer() -> anyhow::Result<()> {
    let mut b = MewNode::new()?;
    b.write_role("slow.md", &command_role("slow", "sleep 600"))?;
    b.launch().await?;
    let mut a = MewNode::new()?;
    a.write_config(&format!("peers:\n  b:\n    url: {}\n", b.url()))?;
    a.write_role(
        "fwd.md",
        "---\nname: fwd\ndescription: Forwards to b's slow.\nremote: b/slow\n---\n",
    )?;
    a.launch().await?;

    let (code, out, err) = a
        .client(&[
            "send",
            "fwd",
            "take your time",
            "--return-immediately",
            "--node",
            a.url(),
        ])
        .await?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let parent = mew_tests::node::printed_task_ids(&out)
        .into_iter()
        .next()
        .context("the parent's id")?;
    let working = |task: &serde_json::Value| task["status"]["state"] == "TASK_STATE_WORKING";
    poll_until("b runs the child", Duration::from_secs(60), || async {
        Ok(tasks_of(&b).await?.iter().any(working).then_some(()))
    })
    .await?;

    let (code, out, err) = a
        .client(&["tasks", "cancel", &parent, "--node", a.url()])
        .await?;
    ensure!(code == 0, "cancel: exit {code}: {out}{err}");
    let child = poll_until(
        "the child on b is canceled",
        Duration::from_secs(60),
        || async {
            let tasks = tasks_of(&b).await?;
            Ok(tasks
                .iter()
                .find(|task| task["status"]["state"] == "TASK_STATE_CANCELED")
                .cloned())
        },
    )
    .await?;
    ensure!(
        child["metadata"]["mew"]["parentTask"] == parent.as_str(),
        "the canceled task on b is the parent's child: {child:#}"
    );
    Ok(())
}
