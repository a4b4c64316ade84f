//! `mew agents`: list the roles, where each comes from, and what is wrong: those the project's
//! running node serves, or else those the node would load from the files.

use std::io::Write;
use std::time::Duration;

use super::Context;
use crate::config::Config;
use crate::identity::signing;
use crate::node::{load_catalog, running_node};
use crate::roles::catalog::Listing;

/// How long the running node has to answer.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest `/status` answer read, in bytes.
const STATUS_MAX: usize = 16 << 20;

/// Prints the roles (JSON with `--json`) of the project's running node, as its `/status`
/// reports them, or else of the role files as a node would load them; a note on stderr says
/// which.
pub(crate) async fn agents(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let listing = match running_node(&context.config.node.data_dir) {
        Some(url) => match from_node(&context.config, &url).await {
            Ok(listing) => {
                eprintln!("mew: the roles the node at {url} serves");
                listing
            }
            Err(error) => {
                eprintln!(
                    "mew: the node at {url} did not say what it serves ({error:#}); these are the \
                     role files as a node would load them"
                );
                Listing::of(&load_catalog(&context.config))
            }
        },
        None => {
            eprintln!(
                "mew: no node runs for this project; these are the role files as a node would load \
                 them"
            );
            Listing::of(&load_catalog(&context.config))
        }
    };
    out.write_all(listing.render(context.json).as_bytes())?;
    Ok(())
}

/// The catalog the node at `url` reports in its `/status` (with `MEW_TOKEN` as a bearer token
/// when set).
async fn from_node(config: &Config, url: &str) -> anyhow::Result<Listing> {
    let tls = config.tls.client_options().map_err(anyhow::Error::msg)?;
    let client = signing::http_client(&tls)?;
    let status_url = format!("{url}/status");
    let mut request = client.get(&status_url).timeout(STATUS_TIMEOUT);
    if let Some(token) = std::env::var("MEW_TOKEN").ok().filter(|t| !t.is_empty()) {
        request = request.bearer_auth(token);
    }
    let body = signing::fetch_with(request, &status_url, STATUS_MAX).await?;
    let mut status: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(serde_json::from_value(status["catalog"].take())?)
}
