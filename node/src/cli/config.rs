//! `mew config`: inspect the configuration.

use std::io::Write;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_yaml_ng::Value;

use super::{Context, NodeArgs};

/// `mew config <command>`.
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the configuration the node runs with: every layer merged, paths and defaults
    /// resolved
    Show(ShowArgs),
}

/// `mew config show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// One line per key, with where its value came from (default, file, env or flag)
    #[arg(long)]
    pub(crate) origins: bool,
    #[command(flatten)]
    pub(crate) node: NodeArgs,
}

/// Runs a `mew config` subcommand, printing to `out`.
pub(crate) fn run(
    command: &ConfigCommand,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Show(args) => show(args, context, out),
    }
}

/// YAML (or JSON) of the resolved configuration; with `--origins`, `key = value  (origin)`
/// lines (or a JSON array of `{key, value, origin}`).
fn show(args: &ShowArgs, context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let text = if args.origins {
        let entries = context
            .loaded
            .entries(&context.config)
            .context("listing the configuration")?;
        if context.json {
            json(&entries)?
        } else {
            let mut text = String::new();
            for entry in &entries {
                let value = inline(&entry.value)
                    .with_context(|| format!("formatting the value of {}", entry.key))?;
                text.push_str(&format!("{} = {value}  ({})\n", entry.key, entry.origin));
            }
            text
        }
    } else if context.json {
        json(&context.config)?
    } else {
        serde_yaml_ng::to_string(&context.config).context("formatting the configuration")?
    };
    out.write_all(text.as_bytes())
        .context("writing the configuration to stdout")
}

fn json(value: &impl serde::Serialize) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value).context("formatting the configuration")?;
    text.push('\n');
    Ok(text)
}

/// A value on one line: strings as they are (an empty one as `""`), anything else as JSON.
fn inline(value: &Value) -> anyhow::Result<String> {
    Ok(match value {
        Value::String(text) if !text.is_empty() => text.clone(),
        other => serde_json::to_string(other)?,
    })
}
