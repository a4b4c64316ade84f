//! `mew mcp list` and `mew mcp tools [SERVER]`: connect to the configured MCP servers now and
//! show what they offer.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

use super::Context;
use crate::config::mcp::McpProblem;
use crate::mcp::{McpContext, McpManager, ServerState, ServerStatus};
use crate::peers::one_line;
use crate::tools::{Category, Tool};

/// How long servers get to close when the command ends.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// `mew mcp ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Connect to every configured MCP server and list its transport, state, tool count and
    /// last error, then the entries skipped for configuration problems; exit 1 if a server is
    /// not connected or an entry was skipped
    List,
    /// Connect and list the tools of every server (or of SERVER): the name a model calls,
    /// its category (read or exec) and its description
    Tools {
        /// Only this server's tools
        server: Option<String>,
    },
}

/// Runs `command` against the configuration's servers (connected in parallel, each within its
/// connect timeout), then closes them.
pub(crate) async fn run(
    command: &McpCommand,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let config = &context.config;
    if let McpCommand::Tools {
        server: Some(server),
    } = command
        && !config.mcp_servers.contains_key(server)
    {
        let known: Vec<&str> = config.mcp_servers.keys().map(String::as_str).collect();
        bail!(
            "there is no MCP server {server:?} in the configuration; configured: {}",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    }
    let manager = McpManager::start(
        &config.mcp_servers,
        McpContext {
            env: Arc::new(std::env::vars().collect()),
            project_dir: config.project_dir.clone(),
            ledger: None,
        },
    )
    .await;
    let result = match command {
        McpCommand::List => list(&manager, context, out),
        McpCommand::Tools { server } => tools(&manager, server.as_deref(), context, out),
    };
    manager.shutdown(CLOSE_DEADLINE).await;
    result
}

fn list(manager: &McpManager, context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let statuses = manager.status();
    let problems = &context.config.mcp_problems;
    if context.json {
        let problems: Vec<_> = problems
            .iter()
            .map(|p| json!({"server": p.server, "origin": p.origin, "message": p.message}))
            .collect();
        serde_json::to_writer_pretty(
            &mut *out,
            &json!({ "servers": statuses, "problems": problems }),
        )?;
        writeln!(out)?;
    } else {
        out.write_all(render_list(&statuses).as_bytes())?;
        for problem in problems {
            writeln!(out, "skipped: {problem}")?;
        }
    }
    out.flush()?;
    let down: Vec<&str> = statuses
        .iter()
        .filter(|s| s.state != ServerState::Connected)
        .map(|s| s.name.as_str())
        .collect();
    let mut failures = Vec::new();
    if !down.is_empty() {
        failures.push(format!(
            "{} of {} MCP servers not connected: {}",
            down.len(),
            statuses.len(),
            down.join(", ")
        ));
    }
    if let Some(skipped) = skipped_summary(problems) {
        failures.push(skipped);
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// What was skipped for configuration problems, on one line (server names, or the files that
/// could not be read), or `None` when nothing was.
fn skipped_summary(problems: &[McpProblem]) -> Option<String> {
    if problems.is_empty() {
        return None;
    }
    let what: Vec<&str> = problems
        .iter()
        .map(|problem| {
            if problem.server.is_empty() {
                problem.origin.as_str()
            } else {
                problem.server.as_str()
            }
        })
        .collect();
    Some(format!(
        "{} MCP server {} skipped for configuration problems: {}",
        what.len(),
        if what.len() == 1 { "entry" } else { "entries" },
        what.join(", ")
    ))
}

/// Each server as a block: its name, then `transport:`, `state:`, `tools:`, and `error:`,
/// `undefined:` and `skipped tools:` when there are any.
pub(crate) fn render_list(statuses: &[ServerStatus]) -> String {
    if statuses.is_empty() {
        return "no MCP servers configured (add mcp_servers: to .mew/config.yaml, or a \
                .mcp.json to the project)\n"
            .to_owned();
    }
    let mut out = String::new();
    for status in statuses {
        out.push_str(&status.name);
        out.push('\n');
        out.push_str(&format!("  transport: {}\n", status.transport));
        let state = match &status.protocol_version {
            Some(version) => format!("{} (protocol {version})", status.state.as_str()),
            None => status.state.as_str().to_owned(),
        };
        out.push_str(&format!("  state:     {state}\n"));
        out.push_str(&format!("  tools:     {}\n", status.tools));
        if status.restarts > 0 {
            out.push_str(&format!("  restarts:  {}\n", status.restarts));
        }
        if let Some(error) = &status.last_error {
            out.push_str(&format!("  error:     {}\n", one_line(error)));
        }
        if !status.undefined_vars.is_empty() {
            out.push_str(&format!(
                "  undefined: {} (expanded to empty text)\n",
                status.undefined_vars.join(", ")
            ));
        }
        if !status.skipped_tools.is_empty() {
            out.push_str(&format!(
                "  skipped tools (bad names): {}\n",
                status.skipped_tools.join(", ")
            ));
        }
    }
    out
}

fn tools(
    manager: &McpManager,
    server: Option<&str>,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let tools: Vec<Arc<dyn Tool>> = manager
        .tools()
        .into_iter()
        .filter(|tool| server.is_none_or(|s| tool.name().starts_with(&format!("mcp__{s}__"))))
        .collect();
    if context.json {
        let list: Vec<_> = tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name(),
                    "category": category_name(tool.category()),
                    "description": tool.description(),
                    "inputSchema": tool.input_schema(),
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &json!({ "tools": list }))?;
        writeln!(out)?;
    } else {
        out.write_all(render_tools(&tools).as_bytes())?;
    }
    out.flush()?;
    let down: Vec<String> = manager
        .status()
        .into_iter()
        .filter(|s| server.is_none_or(|name| s.name == name) && s.state != ServerState::Connected)
        .map(|s| match s.last_error {
            Some(error) => format!("{} ({})", s.name, one_line(&error)),
            None => s.name,
        })
        .collect();
    if !down.is_empty() {
        bail!("not connected: {}", down.join("; "));
    }
    Ok(())
}

fn category_name(category: Category) -> &'static str {
    match category {
        Category::Read => "read",
        Category::Edit => "edit",
        Category::Exec => "exec",
        Category::Delegate => "delegate",
    }
}

/// One tool a line: name, category, the first line of its description.
pub(crate) fn render_tools(tools: &[Arc<dyn Tool>]) -> String {
    if tools.is_empty() {
        return "no tools\n".to_owned();
    }
    let width = tools
        .iter()
        .map(|t| t.name().chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for tool in tools {
        let line = format!(
            "{:<width$}  {:<4}  {}",
            tool.name(),
            category_name(tool.category()),
            one_line(&tool.description())
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(name: &str, state: ServerState, error: Option<&str>) -> ServerStatus {
        ServerStatus {
            name: name.to_owned(),
            transport: "stdio",
            state,
            tools: 3,
            protocol_version: (state == ServerState::Connected).then(|| "2025-11-25".to_owned()),
            last_error: error.map(str::to_owned),
            restarts: 0,
            skipped_tools: Vec::new(),
            undefined_vars: if error.is_some() {
                vec!["TOKEN".to_owned()]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn state_names_are_the_json_names() {
        for state in [
            ServerState::Connecting,
            ServerState::Connected,
            ServerState::Failed,
            ServerState::Restarting,
            ServerState::Stopped,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    #[test]
    fn the_list_shows_state_errors_and_undefined_variables() {
        let text = render_list(&[
            status("good", ServerState::Connected, None),
            status("bad", ServerState::Failed, Some("spawn failed\nmore")),
        ]);
        assert_eq!(
            text,
            "good\n  transport: stdio\n  state:     connected (protocol 2025-11-25)\n  tools:     3\n\
             bad\n  transport: stdio\n  state:     failed\n  tools:     3\n  error:     spawn failed more\n\
             \x20 undefined: TOKEN (expanded to empty text)\n"
        );
        assert!(render_list(&[]).starts_with("no MCP servers configured"));
    }

    #[test]
    fn skipped_entries_are_summed_up_by_server_or_file() {
        let problem = |server: &str, origin: &str| McpProblem {
            server: server.to_owned(),
            origin: origin.to_owned(),
            message: "bad".to_owned(),
        };
        assert_eq!(skipped_summary(&[]), None);
        assert_eq!(
            skipped_summary(&[problem("api", ".mcp.json:3")]).as_deref(),
            Some("1 MCP server entry skipped for configuration problems: api")
        );
        assert_eq!(
            skipped_summary(&[
                problem("api", ".mcp.json:3"),
                problem("", "broken/.mcp.json")
            ])
            .as_deref(),
            Some(
                "2 MCP server entries skipped for configuration problems: api, \
                 broken/.mcp.json"
            )
        );
    }
}
