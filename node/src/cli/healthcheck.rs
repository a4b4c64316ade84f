//! `mew healthcheck [URL]`: exit 0 when the node answers that it is ready, for container
//! health checks and scripts; the image has no shell or curl, so the binary asks itself.

use std::time::Duration;

use anyhow::{bail, ensure};
use clap::Args;

use super::remote::http_url;
use crate::config::Config;

/// How long the node has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The most of an answer read, in bytes: a probe's answer is a line of JSON.
const MAX_ANSWER: usize = 64 << 10;

/// `mew healthcheck`.
#[derive(Debug, Args)]
pub(crate) struct HealthcheckArgs {
    /// The node's base URL [default: this machine's loopback address at the configured
    /// node.port, over https when tls: serves]
    #[arg(value_parser = http_url)]
    pub(crate) url: Option<String>,
    /// Ask whether the process answers at all (`/healthz`, liveness) instead of whether it
    /// takes work (`/readyz`: its task store answers and it is not stopping)
    #[arg(long)]
    pub(crate) live: bool,
}

/// Asks the node's `/readyz` (or `/healthz` with `--live`): succeeds on 200, fails with the
/// node's reason (or why it could not be asked) otherwise.
pub(crate) async fn healthcheck(args: &HealthcheckArgs, config: &Config) -> anyhow::Result<()> {
    let base = args.url.clone().unwrap_or_else(|| local_url(config));
    let url = format!("{base}/{}", if args.live { "healthz" } else { "readyz" });
    let tls = config.tls.client_options().map_err(anyhow::Error::msg)?;
    let client = tls
        .configure(
            reqwest::Client::builder()
                .timeout(TIMEOUT)
                .redirect(reqwest::redirect::Policy::none()),
        )
        .and_then(reqwest::ClientBuilder::build)?;
    let response = match client.get(&url).send().await {
        Ok(response) => response,
        Err(error) => bail!("{url}: {:#}", anyhow::Error::from(error)),
    };
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    let body = String::from_utf8_lossy(&body[..body.len().min(MAX_ANSWER)]).into_owned();
    ensure!(
        status.is_success(),
        "{url} answered {status}: {}",
        body.trim()
    );
    Ok(())
}

/// The node of `config` on this machine: loopback (or the one address it listens on) at its
/// port.
fn local_url(config: &Config) -> String {
    let scheme = if config.tls.cert_file.is_some() {
        "https"
    } else {
        "http"
    };
    let host = match config.node.host.as_str() {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" | "[::]" => "[::1]",
        host if host.contains(':') && !host.starts_with('[') => {
            return format!("{scheme}://[{host}]:{}", config.node.port);
        }
        host => host,
    };
    format!("{scheme}://{host}:{}", config.node.port)
}
