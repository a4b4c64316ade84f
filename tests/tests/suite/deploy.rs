//! What the binary offers deployments: `mew healthcheck` for images without a shell, the
//! configuration file named by `MEW_CONFIG`, and a drain delay between unready and stopping.

use std::time::Duration;

use anyhow::ensure;
use mew_tests::node::{MewNode, command_role, poll_until, send_text, status_text};

#[tokio::test]
async fn healthcheck_passes_while_the_node_is_ready_and_fails_once_it_is_gone() -> anyhow::Result<()>
{
    let mut node = MewNode::start(&[("upper.md", &command_role("upper", "tr a-z A-Z"))]).await?;
    let url = node.url().to_owned();
    for args in [
        vec!["healthcheck", url.as_str()],
        vec!["healthcheck", "--live", url.as_str()],
    ] {
        let (code, out, err) = node.client(&args).await?;
        ensure!(
            code == 0,
            "{args:?} on a ready node: exit {code}\n{out}{err}"
        );
    }
    node.stop().await?;
    let (code, _, err) = node.client(&["healthcheck", &url]).await?;
    ensure!(
        code == 1 && err.contains(&format!("{url}/readyz")),
        "on a stopped node: exit {code}: {err}"
    );
    let (code, _, err) = node.client(&["healthcheck", "not a url"]).await?;
    ensure!(
        code == 2 && err.contains("not an absolute http"),
        "exit {code}: {err}"
    );
    Ok(())
}

#[tokio::test]
async fn mew_config_names_a_configuration_file_as_config_does() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let file = node.dir().join("mounted.yaml");
    std::fs::write(&file, "node:\n  name: from-the-mount\n")?;
    node.set_env("MEW_CONFIG", &file.display().to_string());
    let (code, out, err) = node.client(&["config", "show", "--origins"]).await?;
    ensure!(
        code == 0 && out.contains("from-the-mount") && out.contains("mounted.yaml"),
        "exit {code}\n{out}{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_stopping_node_is_unready_but_serves_through_its_drain_delay() -> anyhow::Result<()> {
    let node = MewNode::start_with_config(
        "node:\n  drain_delay: 10m\n",
        &[("upper.md", &command_role("upper", "tr a-z A-Z"))],
    )
    .await?;
    node.signal(rustix::process::Signal::TERM)?;
    poll_until(
        "the node turns unready",
        Duration::from_secs(60),
        || async {
            let (code, _) = node.get_json("/readyz").await?;
            Ok((code == 503).then_some(()))
        },
    )
    .await?;
    // Still serving: probes, and work a load balancer sent before it noticed.
    let (code, _) = node.get_json("/healthz").await?;
    ensure!(code == 200, "/healthz answered {code} while draining");
    let task = send_text(&node, "upper", "still here").await?;
    ensure!(
        task.status.state == mew_cards::TaskState::Completed
            && serde_json::to_string(&task.artifacts)?.contains("STILL HERE"),
        "a send while draining: {:?} {}",
        task.status.state,
        status_text(&task)
    );
    Ok(())
}

#[tokio::test]
async fn with_json_logs_the_nodes_stdout_is_json_lines_banner_included() -> anyhow::Result<()> {
    let project = tempfile::tempdir()?;
    let mut up = mew_tests::process::command(mew_tests::node::mew_bin()?);
    up.env_clear()
        .env("HOME", project.path())
        .env("MEW_LOG_FORMAT", "json")
        .args(["--project"])
        .arg(project.path())
        .args(["up", "--port", "0"]);
    let (node, _) =
        mew_tests::process::ChildProcess::spawn_until("mew up", up, "{", Duration::from_secs(60))
            .await?;
    let listening = poll_until(
        "the node says it listens",
        Duration::from_secs(60),
        || async {
            Ok(node
                .stdout_lines()
                .into_iter()
                .find(|line| line.contains("mew: listening on http://127.0.0.1:")))
        },
    )
    .await?;
    let event: serde_json::Value = serde_json::from_str(&listening)?;
    ensure!(
        event["level"] == "INFO" && event["fields"]["message"].is_string(),
        "{event}"
    );
    for line in node.stdout_lines() {
        ensure!(
            serde_json::from_str::<serde_json::Value>(&line).is_ok(),
            "a line of stdout is not JSON: {line}"
        );
    }
    Ok(())
}
