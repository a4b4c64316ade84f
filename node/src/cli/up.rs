//! `mew up`: run the node.

use clap::Args;

use super::NodeArgs;
use crate::config::Config;

/// `mew up`: its flags override the `node:` settings.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
}

/// Runs the node with `config` until it is told to stop.
pub(crate) async fn up(config: Config) -> anyhow::Result<()> {
    crate::node::run(config).await
}
