//! `mew mcp list`, `tools`, `call`, `skills`, `skill`: connect to the configured MCP servers
//! now and show what they offer, call one tool or read one skill; `mew mcp login` and `logout`: the node's OAuth tokens for a
//! server.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

use super::Context;
use crate::config::mcp::McpProblem;
use crate::mcp::oauth::Vault;
use crate::mcp::{McpContext, McpManager, ServerState, ServerStatus};
use crate::peers::one_line;
use crate::tools::{Category, Tool};

/// The most sign-ins of one `--login` command.
const MAX_SIGN_INS: u32 = 2;

/// The most questions `mew mcp call --answer` answers in one call.
const MAX_ANSWERS: u32 = 8;

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
        /// Sign in (as `mew mcp login` does) when SERVER asks for authorization, then list
        #[arg(long, requires = "server")]
        login: bool,
    },
    /// Call one tool of SERVER with ARGUMENTS (a JSON object) and print its result; exit 1
    /// if the call fails or the tool says it failed
    Call {
        /// The server, as configured
        server: String,
        /// The tool's name on the server
        tool: String,
        /// The tool's arguments, a JSON object
        #[arg(default_value = "{}")]
        arguments: String,
        /// Sign in (as `mew mcp login` does) when the server asks for authorization, or for
        /// more scopes, then call again
        #[arg(long)]
        login: bool,
        /// The answer to every question the tool's server asks: a JSON object of the fields
        /// it asks for (fields left out take the defaults of its form), or decline or cancel;
        /// without it, questions are asked at the terminal
        #[arg(long, value_name = "REPLY")]
        answer: Option<String>,
    },
    /// Connect and list the skills every server (or SERVER) offers (MCP's skills extension):
    /// the name a role loads (SERVER:NAME), its description and its files; nothing is read
    Skills {
        /// Only this server's skills
        server: Option<String>,
    },
    /// Read the skill NAME of SERVER and print its SKILL.md, or one of its files, after
    /// verifying it against the server's listing (size, digest, and SKILL.md's frontmatter);
    /// exit 1 if it does not match
    Skill {
        /// The server, as configured
        server: String,
        /// The skill's name on the server
        name: String,
        /// One of the skill's other files, by its path in the skill (references/FORMS.md)
        #[arg(long, value_name = "PATH")]
        file: Option<String>,
    },
    /// Sign in to SERVER with OAuth: open its authorization page (with $BROWSER, else print
    /// its address), wait for the redirect to a loopback address, and keep the tokens,
    /// encrypted, in the data directory; the node uses them for every task
    Login {
        /// The server, as configured (an http server)
        server: String,
        /// How long to wait for the authorization in the browser
        #[arg(long, default_value = "5m", value_parser = crate::duration::parse)]
        timeout: Duration,
    },
    /// Forget the node's OAuth tokens for SERVER
    Logout {
        /// The server, as configured
        server: String,
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
    let named = match command {
        McpCommand::List
        | McpCommand::Tools { server: None, .. }
        | McpCommand::Skills { server: None } => None,
        McpCommand::Tools {
            server: Some(server),
            ..
        }
        | McpCommand::Skills {
            server: Some(server),
        }
        | McpCommand::Skill { server, .. }
        | McpCommand::Call { server, .. }
        | McpCommand::Login { server, .. }
        | McpCommand::Logout { server } => Some(server),
    };
    if let Some(server) = named
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
    let vault = Arc::new(Vault::new(&config.node.data_dir));
    match command {
        McpCommand::Login { server, timeout } => {
            return login(server, *timeout, &vault, context, out).await;
        }
        McpCommand::Logout { server } => return logout(server, &vault, context, out).await,
        _ => {}
    }
    // `call`, and `tools` for one server, connect to that server only.
    let only = match command {
        McpCommand::Call { server, .. }
        | McpCommand::Skill { server, .. }
        | McpCommand::Skills {
            server: Some(server),
        }
        | McpCommand::Tools {
            server: Some(server),
            ..
        } => Some(server.as_str()),
        _ => None,
    };
    let login_allowed = matches!(
        command,
        McpCommand::Call { login: true, .. } | McpCommand::Tools { login: true, .. }
    );
    let mut sign_ins = 0;
    loop {
        let manager = start(context, only, &vault).await;
        // Held back until it is known that the command does not run again.
        let mut answer_text = Vec::new();
        let buffer: &mut dyn Write = &mut answer_text;
        let result = match command {
            McpCommand::List => list(&manager, context, buffer),
            McpCommand::Tools { server, .. } => tools(&manager, server.as_deref(), context, buffer),
            McpCommand::Call {
                server,
                tool,
                arguments,
                answer,
                ..
            } => {
                let answer = answer.as_deref();
                call(&manager, server, tool, arguments, answer, context, buffer).await
            }
            McpCommand::Skills { server } => skills(&manager, server.as_deref(), context, buffer),
            McpCommand::Skill { server, name, file } => {
                skill(&manager, server, name, file.as_deref(), buffer).await
            }
            McpCommand::Login { .. } | McpCommand::Logout { .. } => Ok(()),
        };
        let challenge = only.and_then(|server| manager.challenge(server));
        manager.shutdown(CLOSE_DEADLINE).await;
        // Signs in when the server asked for it, then runs the command again; a server may
        // ask once more after that (for more scopes, or from a new authorization server).
        match (result, only, challenge) {
            (Err(err), Some(server), Some(challenge))
                if login_allowed
                    && sign_ins < MAX_SIGN_INS
                    && format!("{err:#}").contains(crate::mcp::ASKS_FOR_AUTHORIZATION) =>
            {
                // What the command prints is its own answer: the sign-in is told on stderr.
                let timeout = Duration::from_secs(300);
                let mut stderr = std::io::stderr();
                let challenge = Some(challenge.as_str());
                sign_in(
                    server,
                    challenge,
                    timeout,
                    &vault,
                    context,
                    false,
                    &mut stderr,
                )
                .await?;
                sign_ins += 1;
            }
            (result, _, _) => {
                out.write_all(&answer_text)?;
                out.flush()?;
                return result;
            }
        }
    }
}

/// Connects to the configured servers (or to `only`).
async fn start(context: &Context, only: Option<&str>, vault: &Arc<Vault>) -> Arc<McpManager> {
    let config = &context.config;
    let servers = config
        .mcp_servers
        .iter()
        .filter(|(name, _)| only.is_none_or(|only| *name == only))
        .map(|(name, entry)| (name.clone(), entry.clone()))
        .collect();
    McpManager::start(
        &servers,
        McpContext {
            env: Arc::new(std::env::vars().collect()),
            project_dir: config.project_dir.clone(),
            ledger: None,
            vault: Some(vault.clone()),
            sign_ins: None,
            memory: Some(Arc::new(crate::mcp::memory::ProtocolMemory::new(
                &config.node.data_dir,
            ))),
        },
    )
    .await
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

/// `mew mcp skills`: what the servers list, nothing read.
fn skills(
    manager: &McpManager,
    server: Option<&str>,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let skills: Vec<crate::mcp::McpSkill> = manager
        .skills_for(None)
        .into_iter()
        .filter(|skill| server.is_none_or(|name| skill.server == name))
        .collect();
    if context.json {
        let list: Vec<_> = skills
            .iter()
            .map(|skill| {
                json!({
                    "name": skill.name(),
                    "server": skill.server,
                    "uri": skill.uri(),
                    "description": skill.description(),
                    "files": skill.files().map(|files| files
                        .into_iter()
                        .map(|(path, size)| json!({"path": path, "size": size}))
                        .collect::<Vec<_>>()),
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &json!({ "skills": list }))?;
        writeln!(out)?;
    } else if skills.is_empty() {
        writeln!(out, "no MCP server offers skills")?;
    } else {
        for skill in &skills {
            writeln!(out, "{}  {}", skill.name(), one_line(skill.description()))?;
            match skill.files() {
                Some(files) if !files.is_empty() => {
                    let files: Vec<String> = files
                        .into_iter()
                        .map(|(path, size)| format!("{path} ({size} B)"))
                        .collect();
                    writeln!(out, "  files: {}", files.join(", "))?;
                }
                Some(_) => {}
                None => writeln!(out, "  files: dynamic (not listed)")?,
            }
        }
    }
    out.flush()?;
    let down: Vec<String> = manager
        .status()
        .into_iter()
        .filter(|s| server.is_none_or(|name| s.name == name) && s.state != ServerState::Connected)
        .map(|s| s.name)
        .collect();
    if !down.is_empty() {
        bail!("not connected: {}", down.join(", "));
    }
    Ok(())
}

/// `mew mcp skill`: one skill's `SKILL.md` or file, verified.
async fn skill(
    manager: &McpManager,
    server: &str,
    name: &str,
    file: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let (_, bytes) = manager
        .skill_file(server, name, file, None, &cancel)
        .await
        .map_err(|why| anyhow::anyhow!(why))?;
    out.write_all(&bytes)?;
    if !bytes.ends_with(b"\n") {
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// `mew mcp call`.
async fn call(
    manager: &McpManager,
    server: &str,
    tool: &str,
    arguments: &str,
    answer: Option<&str>,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let arguments: serde_json::Value = serde_json::from_str(arguments)
        .map_err(|err| anyhow::anyhow!("the arguments are not JSON: {err}"))?;
    if !arguments.is_object() {
        bail!("the arguments must be a JSON object, such as '{{\"path\": \"README.md\"}}'");
    }
    let name = format!("mcp__{server}__{tool}");
    let Some(found) = manager.tools().into_iter().find(|t| t.name() == name) else {
        if let Some(status) = manager.status().into_iter().find(|s| s.name == server)
            && status.state != ServerState::Connected
        {
            bail!(
                "{server} is not connected: {}",
                status
                    .last_error
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_default()
            );
        }
        bail!("{server} has no tool {tool:?} (see `mew mcp tools {server}`)");
    };
    let ctx = crate::tools::ToolContext {
        cwd: context.config.project_dir.clone(),
        env: Arc::new(std::env::vars().collect()),
        cancel: tokio_util::sync::CancellationToken::new(),
        task_id: None,
        depth: 0,
        scope: None,
        call_id: None,
        news: None,
        sampler: None,
        can_ask_user: true,
        principal: None,
    };
    let mut output = found.call(arguments, &ctx).await;
    // A server's questions (each round of a multi-round call): answered with `--answer`, else
    // put to the user at a terminal.
    let at_terminal = answer.is_none() && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut rounds = 0;
    while let (Some(relay), Some(ask)) = (output.relay.clone(), output.ask.as_deref()) {
        if rounds >= MAX_ANSWERS {
            break;
        }
        let reply = match answer {
            Some(reply) => reply.to_owned(),
            None if at_terminal => {
                let mut stderr = std::io::stderr();
                put_question(&output.text_content(), &ask.data, &mut stderr)?;
                read_reply().await?
            }
            None => break,
        };
        rounds += 1;
        output = found.answer(&relay, &reply, &ctx).await;
    }
    if context.json {
        let result = output
            .response
            .clone()
            .unwrap_or_else(|| json!({"content": output.content, "isError": output.is_error}));
        serde_json::to_writer_pretty(&mut *out, &result)?;
        writeln!(out)?;
    } else {
        for part in &output.content {
            match part {
                crate::conversation::ResultPart::Text { text } => writeln!(out, "{text}")?,
                other => writeln!(out, "{}", serde_json::to_string(other)?)?,
            }
        }
    }
    out.flush()?;
    if output.ask.is_some() {
        bail!("{name} asks a question: give the answer with --answer (or run it at a terminal)");
    }
    if output.is_error {
        let why = output
            .content
            .iter()
            .find_map(|part| match part {
                crate::conversation::ResultPart::Text { text } => Some(one_line(text)),
                _ => None,
            })
            .unwrap_or_default();
        bail!("{name} failed: {}", crate::tools::cut_chars(&why, 500));
    }
    Ok(())
}

/// Shows a server's question (`text`, with the form in `data`: each field's name, type,
/// description and default) as `mew run` shows a task's, ending with the prompt.
fn put_question(text: &str, data: &serde_json::Value, out: &mut dyn Write) -> anyhow::Result<()> {
    for (i, line) in text.lines().enumerate() {
        writeln!(out, "{}{line}", if i == 0 { "? " } else { "  " })?;
    }
    let schema = &data["requestedSchema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(|name| name.as_str()).collect())
        .unwrap_or_default();
    if let Some(fields) = schema["properties"].as_object() {
        for (field, spec) in fields {
            let mut line = format!("  - {field}");
            if let Some(kind) = spec["type"].as_str() {
                line.push_str(&format!(" ({kind})"));
            }
            if required.contains(&field.as_str()) {
                line.push_str(", required");
            }
            if let Some(description) = spec["description"].as_str() {
                line.push_str(&format!(": {}", one_line(description)));
            }
            if let Some(options) = spec["enum"].as_array() {
                let options: Vec<String> =
                    options.iter().map(|option| option.to_string()).collect();
                line.push_str(&format!(" [{}]", options.join(", ")));
            }
            if !spec["default"].is_null() {
                line.push_str(&format!(" (default {})", spec["default"]));
            }
            writeln!(out, "{}", crate::tools::cut_chars(&line, 300))?;
        }
    }
    write!(out, "> ")?;
    out.flush()?;
    Ok(())
}

/// One line the user types, trimmed; the end of the input is `cancel`.
async fn read_reply() -> anyhow::Result<String> {
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map(|read| (read, line))
    })
    .await??;
    Ok(match line {
        (0, _) => "cancel".to_owned(),
        (_, line) => line.trim().to_owned(),
    })
}

/// Opens the authorization page: with `$BROWSER` (a command, given the address as its last
/// argument) when it is set; the address is printed either way.
struct Terminal;

impl crate::mcp::oauth::Browser for Terminal {
    fn open(&self, url: &str) {
        eprintln!("Open this address to sign in:\n  {url}");
        let Some(browser) = std::env::var_os("BROWSER").filter(|b| !b.is_empty()) else {
            return;
        };
        let mut script = browser;
        script.push(" \"$1\"");
        // Not through the process helper: a browser is the user's own program, keeps the
        // user's whole environment (display, session bus) and outlives this command, where the
        // helper clears the environment and kills its group when the command ends.
        #[allow(clippy::disallowed_methods)]
        let started = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn();
        match started {
            // Reaped in the background: a browser may run long after this command.
            Ok(mut child) => {
                std::thread::spawn(move || child.wait());
            }
            Err(err) => eprintln!("cannot start $BROWSER: {err}"),
        }
    }
}

/// `mew mcp login`: signs in from the server's answer to a request without a token.
async fn login(
    server: &str,
    timeout: Duration,
    vault: &Arc<Vault>,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let url = http_url(server, context)?;
    let connect_timeout = context
        .config
        .mcp_servers
        .get(server)
        .map_or(Duration::from_secs(30), |entry| entry.connect_timeout);
    let challenge = crate::mcp::oauth::challenge(url, connect_timeout)
        .await
        .map_err(anyhow::Error::msg)?;
    sign_in(
        server,
        challenge.as_deref(),
        timeout,
        vault,
        context,
        context.json,
        out,
    )
    .await
}

/// The URL of the http server `server`.
fn http_url<'a>(server: &str, context: &'a Context) -> anyhow::Result<&'a str> {
    let Some(entry) = context.config.mcp_servers.get(server) else {
        bail!("there is no MCP server {server:?} in the configuration");
    };
    let crate::config::mcp::McpTransport::Http { url, .. } = &entry.transport else {
        bail!("{server} is a stdio server: OAuth is for http servers");
    };
    Ok(url)
}

/// Signs in to `server` from its `challenge` (see [`crate::mcp::oauth::login`]) and says so.
async fn sign_in(
    server: &str,
    challenge: Option<&str>,
    timeout: Duration,
    vault: &Arc<Vault>,
    context: &Context,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let url = http_url(server, context)?;
    let Some(entry) = context.config.mcp_servers.get(server) else {
        bail!("there is no MCP server {server:?} in the configuration");
    };
    let tokens = vault.entry(server, url, crate::mcp::oauth::NODE_PRINCIPAL);
    let granted =
        crate::mcp::oauth::login(url, tokens, &entry.oauth, challenge, &Terminal, timeout)
            .await
            .map_err(|why| anyhow::anyhow!("cannot sign in to {server}: {why}"))?;
    if json {
        serde_json::to_writer_pretty(
            &mut *out,
            &json!({"server": server, "scopes": granted.scopes, "refreshable": granted.refreshable}),
        )?;
        writeln!(out)?;
    } else {
        let scopes = if granted.scopes.is_empty() {
            String::new()
        } else {
            format!(" (scopes: {})", granted.scopes.join(" "))
        };
        writeln!(out, "signed in to {server}{scopes}")?;
    }
    Ok(())
}

/// `mew mcp logout`.
/// `mew mcp logout`: revokes the grant at the authorization server where it offers that
/// (RFC 7009), and removes the tokens kept here either way (a revocation that fails is said,
/// and does not keep the tokens).
async fn logout(
    server: &str,
    vault: &Vault,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    use crate::mcp::oauth::{NODE_PRINCIPAL, Revoked, revoke};
    let url = http_url(server, context)?;
    let entry = &context.config.mcp_servers[server];
    let kept = vault
        .load(server, url, NODE_PRINCIPAL)
        .map_err(|err| anyhow::anyhow!("cannot read the tokens of {server}: {err}"))?;
    let revoked = match &kept {
        Some(credentials) => {
            Some(revoke(url, credentials, &entry.oauth, entry.connect_timeout).await)
        }
        None => None,
    };
    let removed = vault
        .remove(server, NODE_PRINCIPAL)
        .map_err(|err| anyhow::anyhow!("cannot remove the tokens of {server}: {err}"))?;
    let said = match revoked {
        Some(Ok(Revoked::Done)) => "; the authorization server revoked the grant",
        Some(Ok(Revoked::NotOffered)) => "; its authorization server offers no revocation",
        Some(Ok(Revoked::NoToken)) | None => "",
        Some(Err(why)) => {
            writeln!(
                out,
                "the grant was not revoked at the authorization server: {why}"
            )?;
            ""
        }
    };
    if removed {
        writeln!(out, "signed out of {server}: its tokens are gone{said}")?;
    } else {
        writeln!(out, "no tokens kept for {server}")?;
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
