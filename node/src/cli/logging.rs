//! Logging: a `tracing` subscriber writing text or JSON lines to stderr; the node's JSON lines
//! go to stdout (what a container's log collector reads; `mew up`'s banner is then logged too).

use std::io::IsTerminal;

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global `tracing` subscriber: lines on stderr in `format` (JSON lines on stdout
/// for the `node`), filtered by the `EnvFilter` directive `level` (such as `info` or
/// `info,mew_node=debug`).
///
/// Fails if the directive does not parse (the error names it) or a subscriber is already
/// installed.
pub fn init_logging(level: &str, format: LogFormat, node: bool) -> anyhow::Result<()> {
    let filter = EnvFilter::builder()
        .parse(level)
        .with_context(|| format!("bad log level directive `{level}`"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json if node => builder.json().with_writer(std::io::stdout).try_init(),
        LogFormat::Json => builder.json().with_writer(std::io::stderr).try_init(),
    };
    installed.map_err(|error| anyhow::anyhow!("installing the log subscriber: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_directive_is_an_error_that_names_it() {
        let error = init_logging("mew=loud", LogFormat::Text, false).unwrap_err();
        assert!(format!("{error:#}").contains("`mew=loud`"), "{error:#}");
    }
}
