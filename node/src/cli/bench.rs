//! `mew bench <URL>`: load any A2A agent and report requests per second and latency percentiles.

use std::io::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};
use mew_transport::Binding;

use super::Context;
use super::remote::remote_error;
use crate::bench::{BenchOptions, run};

/// A protocol binding, as the command line names it.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum BindingArg {
    /// JSON-RPC 2.0.
    Jsonrpc,
    /// HTTP+JSON.
    Rest,
    /// gRPC (the card's `GRPC` interface).
    Grpc,
}

impl From<BindingArg> for Binding {
    fn from(value: BindingArg) -> Self {
        match value {
            BindingArg::Jsonrpc => Binding::JsonRpc,
            BindingArg::Rest => Binding::HttpJson,
            BindingArg::Grpc => Binding::Grpc,
        }
    }
}

/// `mew bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The agent's base URL (where /.well-known/agent-card.json is)
    pub(crate) url: String,
    /// Requests in flight at once
    #[arg(short, long, default_value_t = 32, value_parser = at_least_one)]
    pub(crate) concurrency: usize,
    /// How long to run, like 10s or 1m (the default when --count is not given: 10s)
    #[arg(short, long, value_parser = duration)]
    pub(crate) duration: Option<Duration>,
    /// Stop after this many requests
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
    /// Streaming sends instead of blocking ones
    #[arg(long)]
    pub(crate) stream: bool,
    /// ListTasks instead of sends: the first page, every request
    #[arg(long, conflicts_with = "stream")]
    pub(crate) list: bool,
    /// The page size of --list
    #[arg(long, default_value_t = 50, requires = "list")]
    pub(crate) page_size: i32,
    /// The binding to use [default: the card's first HTTP binding]
    #[arg(long, value_enum)]
    pub(crate) binding: Option<BindingArg>,
    /// The text of every message
    #[arg(long, default_value = "echo hello")]
    pub(crate) text: String,
    /// Requests sent first and not measured
    #[arg(long, default_value_t = 100)]
    pub(crate) warmup: u64,
}

fn duration(text: &str) -> Result<Duration, String> {
    match crate::duration::parse(text)? {
        Duration::ZERO => Err("a run must last longer than 0s".to_owned()),
        duration => Ok(duration),
    }
}

fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("at least 1 request must be in flight".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the benchmark and prints the report (JSON with `--json`).
pub(crate) async fn bench(args: BenchArgs, context: &Context) -> anyhow::Result<()> {
    let duration = match (args.duration, args.count) {
        (None, None) => Some(Duration::from_secs(10)),
        (duration, _) => duration,
    };
    let options = BenchOptions {
        url: args.url,
        binding: args.binding.map(Binding::from),
        concurrency: args.concurrency,
        duration,
        count: args.count,
        streaming: args.stream,
        list: args.list.then_some(args.page_size),
        text: args.text,
        warmup: args.warmup,
        tls: (context.config.tls.client_options()).map_err(anyhow::Error::msg)?,
    };
    let report = run(&options, |elapsed, done, failed| {
        let rate = done as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
        eprintln!(
            "  {:>5.1}s  {done} requests  {rate:.0} req/s  {failed} errors",
            elapsed.as_secs_f64()
        );
    })
    .await
    // An agent that cannot be reached or resolved: said as the other client commands say it.
    .map_err(|error| match error.downcast::<mew_transport::Error>() {
        Ok(error) => remote_error(error),
        Err(error) => error,
    })?;
    let mut out = std::io::stdout().lock();
    if context.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{report}")?;
    }
    if report.requests == 0 {
        anyhow::bail!("no request succeeded");
    }
    Ok(())
}
