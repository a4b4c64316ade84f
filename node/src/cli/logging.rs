//! Logging: a `tracing` subscriber writing text or JSON lines to stderr; the node's JSON lines
//! go to stdout (what a container's log collector reads; `mew up`'s banner is then logged too).

use std::io::IsTerminal;

use anyhow::Context as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::LogFormat;
use crate::telemetry::{TelemetryConfig, WithTraceIds};

/// Installs the global `tracing` subscriber: lines on stderr in `format` (JSON lines on stdout
/// for the `node`), filtered by the `EnvFilter` directive `level` (such as `info` or
/// `info,mew_node=debug`), each written inside a traced span with its `trace_id` and `span_id`.
/// With `traces` (a node's telemetry and its name), spans are exported when the telemetry
/// says where to (see [`crate::telemetry::layer`]).
///
/// Fails if the directive does not parse (the error names it), the exporter cannot be built,
/// or a subscriber is already installed.
/// The filter's directives for the user's `level`. The trace spans are for the exporter, not
/// for log lines: a log line names the spans it is written in, and these would drown it. The
/// MCP SDK logs each handshake at INFO with the whole of the server's description (kilobytes
/// a server): it says only warnings unless `level` names `rmcp` itself.
fn directives(level: &str) -> String {
    let mut directives = format!("{level},{}=off", crate::telemetry::TARGET);
    if !level.contains("rmcp") {
        directives.push_str(",rmcp=warn");
    }
    directives
}

pub fn init_logging(
    level: &str,
    format: LogFormat,
    node: bool,
    traces: Option<(&TelemetryConfig, &str)>,
) -> anyhow::Result<()> {
    let otel = match traces {
        Some((telemetry, name)) => crate::telemetry::layer(telemetry, name)?,
        None => None,
    };
    let directives = directives(level);
    let filter = EnvFilter::builder()
        .parse(&directives)
        .with_context(|| format!("bad log level directive `{level}`"))?;
    let fmt = tracing_subscriber::fmt::layer();
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => fmt
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .event_format(WithTraceIds::new(tracing_subscriber::fmt::format(), false))
            .boxed(),
        LogFormat::Json => {
            let json = fmt.json().event_format(WithTraceIds::new(
                tracing_subscriber::fmt::format().json(),
                true,
            ));
            if node {
                json.with_writer(std::io::stdout).boxed()
            } else {
                json.with_writer(std::io::stderr).boxed()
            }
        }
    };
    // Without traces the filter is the subscriber's own: callsites it turns off cost nothing.
    // With them it filters the log lines alone, and the exporter's layer has its own.
    let Some(otel) = otel else {
        return tracing_subscriber::registry()
            .with(lines)
            .with(filter)
            .try_init()
            .map_err(|error| anyhow::anyhow!("installing the log subscriber: {error}"));
    };
    let lines = lines.with_filter(filter).boxed();
    tracing_subscriber::registry()
        .with(lines)
        .with(otel)
        .try_init()
        .map_err(|error| anyhow::anyhow!("installing the log subscriber: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_sdk_says_only_warnings_unless_named() {
        assert_eq!(
            directives("info"),
            format!("info,{}=off,rmcp=warn", crate::telemetry::TARGET)
        );
        assert_eq!(
            directives("info,rmcp=debug"),
            format!("info,rmcp=debug,{}=off", crate::telemetry::TARGET)
        );
    }

    #[test]
    fn a_bad_directive_is_an_error_that_names_it() {
        let error = init_logging("mew=loud", LogFormat::Text, false, None).unwrap_err();
        assert!(format!("{error:#}").contains("`mew=loud`"), "{error:#}");
    }
}
