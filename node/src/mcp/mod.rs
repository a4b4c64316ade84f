//! The MCP client: the tools of the configured MCP servers, as Mew tools.
//!
//! [`McpManager::start`] connects to every server of `mcp_servers:` at once, each bounded by
//! its own `connect_timeout`; a server that fails is reported in [`McpManager::status`] and
//! affects no other. Each server's tools become [`Tool`](crate::tools::Tool)s named
//! `mcp__<server>__<tool>` ([`McpManager::tools`]). Nothing outside this module names the SDK
//! (`rmcp`): its types stay behind these files.
//!
//! # Transports
//!
//! - `stdio`: the program starts through [`crate::process`]: its own process group, an empty
//!   environment plus [`BASE_ENV`](crate::process::BASE_ENV) from the node's snapshot plus the
//!   configured `env`, the configured `cwd` or else the project directory. Its stderr goes to
//!   a bounded buffer (the last [`stderr::MAX_TAIL_BYTES`] bytes), never to the node's
//!   terminal; its tail explains a failure in `last_error`. The group is recorded in the
//!   process ledger, and killed on shutdown.
//! - `http`: Streamable HTTP, with the configured headers on every request (the transport's
//!   own headers, such as `Mcp-Session-Id`, cannot be configured). Only same-origin 307 and 308
//!   redirects are followed, so headers never travel to another host. A server that answers a
//!   request with a JSON-RPC error without an `id` (as some do for a session they forgot) is
//!   handled by [`http`], so the call does not wait out its timeout.
//!
//! # Protocol versions
//!
//! The SDK (rmcp 3.11) knows 2024-11-05 through 2026-07-28. From 2026-07-28 on there is no
//! `initialize` handshake: a client probes with `server/discover` and sends its version,
//! identity and capabilities in every request's `_meta`. Mew connects in the SDK's `Auto`
//! mode: it probes with `server/discover` asking for 2026-07-28; a server that answers it is
//! used at 2026-07-28; a server that rejects the probe (an unknown method, or a plain 4xx on
//! HTTP), or says nothing for 10 s, gets the `initialize` handshake at 2025-11-25 on the same
//! connection, and may answer with an older version it speaks. A server that answers the probe
//! but supports no version Mew asked for is connected again from scratch with `initialize`.
//! [`ServerStatus::protocol_version`] shows what was agreed. (The 10 s wait is the SDK's; a
//! `connect_timeout` below it cuts it short.) On 2025-11-25 and before, an HTTP server keeps a
//! session (`Mcp-Session-Id`) and may send notifications at any time; on 2026-07-28 every
//! request stands alone and notifications come only through a `subscriptions/listen`
//! subscription.
//!
//! # Calls
//!
//! A call is bounded by the server's `call_timeout`. When it runs out, or the task is
//! cancelled, the server gets `notifications/cancelled` for the request and the model gets an
//! error result saying so. Every kind of content survives (see [`content`]); `isError` results
//! are error results with their content; transport failures are error results, never panics.
//!
//! # Restarts
//!
//! A server whose connection ended (a stdio program that exited, an HTTP session the SDK could
//! not recover) is connected again on the next call of one of its tools, after a backoff:
//! restart `n` in a row starts no sooner than `250 ms × 2^(n-1)` (at most 8 s) after the
//! previous start. After `max_restarts` restarts in a row the server is `failed` and its tools
//! go away; the count starts again once a call on the restarted server gets an answer. An
//! HTTP session the server expired (404 on its session id) is re-established by the SDK
//! itself, once per request, without a restart. A server that fails its first connection
//! stays `failed` (it has no tools to call).
//!
//! # Tool lists
//!
//! Server and tool names must match `^[A-Za-z0-9_-]+$`; a server name must not hold `__`
//! (it would make `mcp__a__b__c` ambiguous), and a full tool name must fit the 64 characters
//! providers accept. Tools that break these rules are skipped with a warning (and listed in
//! [`ServerStatus::skipped_tools`]). `allow_tools` and `deny_tools` apply to the names on
//! the server. `readOnlyHint: true` makes a tool [`Category::Read`](crate::tools::Category);
//! every other tool is `Exec`. `notifications/tools/list_changed` (on 2026-07-28, through a
//! `subscriptions/listen` subscription) reloads that server's tools.

mod client;
mod connect;
mod content;
mod dpop;
mod grants;
mod http;
pub(crate) mod memory;
mod news;
pub(crate) mod oauth;
mod skills;
mod stderr;
mod tool;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod third_party_tests;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::config::mcp::McpServerConfig;
use crate::tools::Tool;

use client::McpClient;

/// What a connection's or a call's failure says when the server answered 401 or 403 with an
/// authorization challenge (see [`McpManager::challenge`]).
pub(crate) const ASKS_FOR_AUTHORIZATION: &str = "the server asks for authorization";

/// What the servers run with.
#[derive(Debug, Clone)]
pub(crate) struct McpContext {
    /// The node's environment snapshot: stdio servers get [`crate::process::BASE_ENV`] from it.
    pub(crate) env: Arc<HashMap<String, String>>,
    /// The working directory of a stdio server that configures none.
    pub(crate) project_dir: PathBuf,
    /// The process ledger directory (see [`crate::process::ledger_dir`]); `None` records
    /// nothing.
    pub(crate) ledger: Option<PathBuf>,
    /// Where OAuth tokens are kept (see [`oauth`]); `None`: nowhere, so servers that ask for
    /// authorization cannot be used.
    pub(crate) vault: Option<Arc<oauth::Vault>>,
    /// The sign-ins tasks ask their callers for (see [`oauth::SignIns`]); `None`: none, a
    /// server that asks for authorization is signed in to with `mew mcp login`.
    pub(crate) sign_ins: Option<Arc<oauth::SignIns>>,
    /// What servers spoke, remembered across processes (see [`memory`]); `None`: nothing is
    /// remembered beyond this process.
    pub(crate) memory: Option<Arc<memory::ProtocolMemory>>,
}

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ServerState {
    /// The first connection is being made.
    Connecting,
    /// Connected; its tools are listed.
    Connected,
    /// It gave up: the first connection failed, or it died more than `max_restarts` times in
    /// a row. Its tools are gone.
    Failed,
    /// Its connection ended; it is connected again on the next call (or is being connected).
    Restarting,
    /// Shut down.
    Stopped,
}

impl ServerState {
    /// The state's name, as `--json` writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Failed => "failed",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
        }
    }
}

/// One configured server, for `--json` and the status view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ServerStatus {
    /// The server's name (`mcp__<name>__…`).
    pub(crate) name: String,
    /// `stdio` or `http`.
    pub(crate) transport: &'static str,
    /// Where it is in its life.
    pub(crate) state: ServerState,
    /// How many of its tools the model sees.
    pub(crate) tools: usize,
    /// The protocol version agreed with it, once connected.
    pub(crate) protocol_version: Option<String>,
    /// What went wrong last, with the tail of a stdio server's stderr.
    pub(crate) last_error: Option<String>,
    /// How many times it was connected again after its connection ended.
    pub(crate) restarts: u32,
    /// Its tools that were skipped for their names.
    pub(crate) skipped_tools: Vec<String>,
    /// `${VAR}`s its configuration refers to that are not set.
    pub(crate) undefined_vars: Vec<String>,
}

/// A skill an MCP server lists.
#[derive(Debug, Clone)]
pub(crate) struct McpSkill {
    /// The server.
    pub(crate) server: String,
    /// Its listing.
    skill: rmcp::model::Skill,
}

impl McpSkill {
    /// The URI of its `SKILL.md`.
    pub(crate) fn uri(&self) -> &str {
        &self.skill.uri
    }

    /// The URI its files are under (its `SKILL.md`'s, without the file name).
    pub(crate) fn base(&self) -> &str {
        skills::base(&self.skill)
    }

    /// Its frontmatter as listed, every field.
    pub(crate) fn frontmatter(&self) -> serde_json::Value {
        serde_json::to_value(&self.skill.frontmatter).unwrap_or_default()
    }

    /// Its name among a role's skills: `SERVER:NAME`.
    pub(crate) fn name(&self) -> String {
        format!("{}:{}", self.server, self.skill.name())
    }

    /// Its description, as listed.
    pub(crate) fn description(&self) -> &str {
        &self.skill.frontmatter.description
    }

    /// The paths of its files other than `SKILL.md`, relative to the skill, with their sizes;
    /// `None` for a dynamic skill, whose files are not listed.
    pub(crate) fn files(&self) -> Option<Vec<(String, u64)>> {
        match &self.skill.resources {
            rmcp::model::SkillResources::Files(files) => Some(
                files
                    .iter()
                    .filter(|file| file.uri != self.skill.uri)
                    .map(|file| {
                        let path = file
                            .uri
                            .strip_prefix(skills::base(&self.skill))
                            .unwrap_or(&file.uri);
                        (path.to_owned(), file.size)
                    })
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// The MCP servers of the configuration, and their tools.
pub(crate) struct McpManager {
    /// By name.
    servers: Vec<Arc<McpClient>>,
    /// Bumped whenever a server's tool set changes.
    changes: watch::Sender<u64>,
    /// The sign-ins tasks ask their callers for.
    sign_ins: Option<Arc<oauth::SignIns>>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.servers.iter().map(|server| server.name()))
            .finish()
    }
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the runtime
impl McpManager {
    /// Connects to every server at once, each bounded by its own connect_timeout; one failing
    /// affects no other; never fails as a whole.
    pub(crate) async fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        ctx: McpContext,
    ) -> Arc<Self> {
        let ctx = Arc::new(ctx);
        let (changes, _) = watch::channel(0);
        let servers: Vec<Arc<McpClient>> = servers
            .iter()
            .map(|(name, config)| {
                McpClient::new(name, config.clone(), ctx.clone(), changes.clone())
            })
            .collect();
        futures_util::future::join_all(servers.iter().map(|server| server.start())).await;
        // Callers' own sessions left idle are closed now and then, while the servers live.
        let per_caller: Vec<std::sync::Weak<McpClient>> = servers
            .iter()
            .filter(|server| server.per_caller())
            .map(Arc::downgrade)
            .collect();
        if !per_caller.is_empty() {
            tokio::spawn(async move {
                let mut every = tokio::time::interval(client::CALLER_IDLE / 6);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let mut alive = false;
                    for server in per_caller.iter().filter_map(std::sync::Weak::upgrade) {
                        alive = true;
                        server.close_idle_callers(std::time::Instant::now());
                    }
                    if !alive {
                        return;
                    }
                }
            });
        }
        Arc::new(Self {
            servers,
            changes,
            sign_ins: ctx.sign_ins.clone(),
        })
    }

    /// The sign-ins tasks ask their callers for, if the servers take any.
    pub(crate) fn sign_ins(&self) -> Option<Arc<oauth::SignIns>> {
        self.sign_ins.clone()
    }

    /// The current tools of every connected server, `mcp__<server>__<tool>`, sorted by name.
    pub(crate) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = self
            .servers
            .iter()
            .flat_map(|server| server.tools())
            .collect();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// [`Self::tools`] as the tasks of `principal` see them: a server with `oauth.per_caller`
    /// offers the tools of the principal's own session once it is connected (before, the
    /// node's, or its sign-in tool).
    pub(crate) fn tools_for(&self, principal: Option<&str>) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = self
            .servers
            .iter()
            .flat_map(|server| {
                let own = principal
                    .and_then(|principal| server.caller(principal))
                    .filter(|client| client.is_connected());
                match own {
                    Some(client) => client.tools(),
                    None => server.tools(),
                }
            })
            .collect();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// The skills the connected servers list, as the tasks of `principal` see them (as
    /// [`Self::tools_for`]), sorted by server and name.
    pub(crate) fn skills_for(&self, principal: Option<&str>) -> Vec<McpSkill> {
        self.servers
            .iter()
            .flat_map(|server| {
                let own = principal
                    .and_then(|principal| server.caller(principal))
                    .filter(|client| client.is_connected());
                let skills = match own {
                    Some(client) => client.skills(),
                    None => server.skills(),
                };
                skills
                    .iter()
                    .map(|skill| McpSkill {
                        server: server.name().to_owned(),
                        skill: skill.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Reads `path` (`None`: `SKILL.md`, whose frontmatter is checked as well) of the skill
    /// `name` of `server`, through the session of `principal` when it has one; verified
    /// against the listing (see [`skills`]).
    pub(crate) async fn skill_file(
        &self,
        server: &str,
        name: &str,
        path: Option<&str>,
        principal: Option<&str>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<(McpSkill, Vec<u8>), String> {
        let client = self
            .servers
            .iter()
            .find(|client| client.name() == server)
            .ok_or_else(|| format!("there is no MCP server {server}"))?;
        let client = principal
            .and_then(|principal| client.caller(principal))
            .filter(|client| client.is_connected())
            .unwrap_or_else(|| client.clone());
        let (skill, bytes) = client.skill_file(name, path, cancel).await?;
        Ok((
            McpSkill {
                server: server.to_owned(),
                skill,
            },
            bytes,
        ))
    }

    /// The last authorization challenge (`WWW-Authenticate` of a 401 or 403) of the server
    /// `name`, if it answered with one.
    pub(crate) fn challenge(&self, name: &str) -> Option<String> {
        self.servers
            .iter()
            .find(|server| server.name() == name)
            .and_then(|server| server.challenge())
    }

    /// One line per configured server: name, transport kind, state (connecting, connected,
    /// failed, restarting, stopped), tool count, last error, undefined vars.
    pub(crate) fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|server| server.status()).collect()
    }

    /// A receiver that sees a new value whenever some server's tool set changed (a
    /// `list_changed` reload, a restart, a server that failed): read [`Self::tools`] again.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Closes every session and kills stdio servers with their process groups, waiting at most
    /// `deadline`.
    pub(crate) async fn shutdown(&self, deadline: Duration) {
        let all = futures_util::future::join_all(
            self.servers.iter().map(|server| server.shutdown(deadline)),
        );
        // A shutdown cut short drops its program's process group, which kills the group.
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("MCP servers did not stop within {deadline:?}; killed them");
        }
    }
}
