//! What the binary offers deployments: `mew healthcheck` for images without a shell, and the
//! configuration file named by `MEW_CONFIG`.

use anyhow::ensure;
use mew_tests::node::{MewNode, command_role};

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
