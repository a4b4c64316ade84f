//! The `mcp_servers:` section (and the project's `.mcp.json`): the MCP servers whose tools every
//! model-driven role may use.
//!
//! ```yaml
//! mcp_servers:
//!   github:                        # the server's name: letters, digits, `_`, `-`, but not
//!                                  # `__`; its tools are mcp__github__<tool>
//!     type: stdio                  # stdio | http; may be left out when only one of
//!                                  # command (stdio) and url (http) is given
//!     command: npx                 # stdio: required; not expanded here
//!     args: [-y, "@modelcontextprotocol/server-github"]   # not expanded here
//!     env: {GITHUB_TOKEN: "${GITHUB_TOKEN}"}              # ${VAR} and ${VAR:-default} expanded
//!     cwd: tools/github            # relative to the project directory; default: the project
//!     connect_timeout: 30s         # connecting and listing the tools
//!     call_timeout: 60s            # one tool call
//!     max_restarts: 5              # a stdio server that keeps dying is given up after these
//!     allow_tools: []              # empty: every tool
//!     deny_tools: [delete_repo]
//!   search:
//!     type: http
//!     url: https://mcp.example.com/mcp                    # http: required; not expanded here
//!     headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}  # expanded
//!   docs:
//!     enabled: false               # switches off a server a lower layer defines
//! ```
//!
//! The layers, lowest first: `~/.mew/config.yaml`, the project's `.mcp.json` (Claude Code's
//! `{"mcpServers": {NAME: {type, command, args, env, url, headers}}}`; an entry without `type`
//! is stdio when it has a `command`), the project's `.mew/config.yaml`, `--config`. A server in
//! a higher layer replaces a same-named one of a lower layer whole: no field of the lower entry
//! is kept, and the entry is read by the rules of the file it is written in.
//!
//! # Variables
//!
//! `${VAR}` and `${VAR:-default}` (the default also stands in for an empty value) are
//! expanded from [`Sources::env`](super::Sources::env); `$VAR`, nesting and any other shell
//! syntax are left as written, and an expanded value is not expanded again. Where, and what an
//! unset variable does, depends on the file:
//!
//! - Mew's own files (`~/.mew/config.yaml`, `.mew/config.yaml`, `--config`) keep the seed's
//!   stricter rule: only the values of `env` and `headers` are expanded, so a program and its
//!   arguments are never chosen by the environment. `command` and `args` are used as written
//!   (a `${VAR}` in them is a warning), a `${` in a `url` is a problem, and `cwd` may start
//!   with `~`. A variable that is not set expands to empty text and is listed in
//!   [`McpServerConfig::undefined_vars`]; [`Config::log_mcp_warnings`] warns once per server.
//! - The project's `.mcp.json` is Claude Code's file and follows Claude Code's rules:
//!   `command`, `args`, `url`, and the values of `env` and `headers` are expanded, and a
//!   variable that is not set and has no default makes the entry a problem (Claude Code does
//!   not start that server either), skipped with a message that names the variable.
//!
//! # Problems and warnings
//!
//! `enabled: false` drops the server without requiring the rest of a server (its keys must
//! still be known ones); `enabled: true` is the default.
//!
//! A bad entry (a missing `command` or `url`, `type: sse`, a bad name or value) is reported in
//! [`Config::mcp_problems`](super::Config) and skipped, as is a `.mcp.json` that cannot be read
//! or parsed; none of them stops the node. An unknown key skips the entry in Mew's files, where
//! it is most likely a misspelt setting; in a `.mcp.json` (where other tools write keys such as
//! `description`) it is ignored with a warning, kept in [`McpServerConfig::warnings`].
//!
//! Secrets: the values of `env` and `headers` are shown as `***` by `mew config show` (and in
//! debug output), whether they were written literally or came from `${VAR}`, since both are
//! where tokens go; the names are shown, and an empty value is shown as empty.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::Config;
use crate::duration;

/// The default limit on connecting to a server and listing its tools.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default limit on one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The default number of restarts of a stdio server that keeps dying.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;

/// `mcp_servers.NAME:` — one MCP server, resolved: variables expanded, defaults filled in.
///
/// Serialized (as `mew config show` prints it) and debug-printed with `command`, `args` and
/// `url` as written when variables were expanded in them (see [`as_written`](Self::as_written)),
/// and with the values of `env` and `headers` masked.
#[derive(Clone, PartialEq)]
pub struct McpServerConfig {
    /// How to reach it.
    pub transport: McpTransport,
    /// The limit on connecting (the initialize handshake) and listing its tools.
    pub connect_timeout: Duration,
    /// The limit on one tool call.
    pub call_timeout: Duration,
    /// Only these tools (their names on the server); empty: all of them.
    pub allow_tools: Vec<String>,
    /// Never these tools (their names on the server).
    pub deny_tools: Vec<String>,
    /// How many times a stdio server that died is restarted before it is given up.
    pub max_restarts: u32,
    /// The handshake: probe with `server/discover` and fall back to `initialize` (the
    /// default), or one of them only.
    pub protocol: McpProtocol,
    /// Whether the server may ask the task's model for a completion (MCP sampling): the
    /// task's caller is asked each time unless the entry trusts the server (`sampling: true`)
    /// or forbids it (`sampling: false`).
    pub sampling: McpSampling,
    /// Whether the server's questions (elicitation) go to the user or are declined.
    pub elicitation: McpElicitation,
    /// How Mew signs in to it when it asks for authorization (an http server).
    pub oauth: McpOAuth,
    /// Where it was defined: a file, with the line when known.
    pub origin: String,
    /// `${VAR}`s it refers to that are not set (each once); they expanded to empty text.
    pub undefined_vars: Vec<String>,
    /// What its user should know about the entry though it is used: keys ignored, values
    /// passed as written. One sentence each, without the origin.
    pub warnings: Vec<String>,
    /// [`transport`](Self::transport) with `command`, `args` and `url` as written, when
    /// expanding variables changed them (a `.mcp.json` expands them): what is shown, since the
    /// values of variables may be secrets.
    pub as_written: Option<McpTransport>,
}

impl McpServerConfig {
    /// The transport as shown: with `command`, `args` and `url` as written.
    fn shown_transport(&self) -> &McpTransport {
        self.as_written.as_ref().unwrap_or(&self.transport)
    }
}

impl Serialize for McpServerConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The settings as `mew config show` prints them.
        #[derive(Serialize)]
        struct Shown<'a> {
            #[serde(flatten)]
            transport: &'a McpTransport,
            #[serde(serialize_with = "duration::serialize")]
            connect_timeout: Duration,
            #[serde(serialize_with = "duration::serialize")]
            call_timeout: Duration,
            allow_tools: &'a [String],
            deny_tools: &'a [String],
            max_restarts: u32,
            protocol: McpProtocol,
            sampling: McpSampling,
            elicitation: McpElicitation,
            #[serde(skip_serializing_if = "McpOAuth::is_default")]
            oauth: &'a McpOAuth,
        }
        Shown {
            transport: self.shown_transport(),
            connect_timeout: self.connect_timeout,
            call_timeout: self.call_timeout,
            allow_tools: &self.allow_tools,
            deny_tools: &self.deny_tools,
            max_restarts: self.max_restarts,
            protocol: self.protocol,
            sampling: self.sampling,
            elicitation: self.elicitation,
            oauth: &self.oauth,
        }
        .serialize(serializer)
    }
}

impl fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("transport", self.shown_transport())
            .field("connect_timeout", &self.connect_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("allow_tools", &self.allow_tools)
            .field("deny_tools", &self.deny_tools)
            .field("max_restarts", &self.max_restarts)
            .field("protocol", &self.protocol)
            .field("sampling", &self.sampling)
            .field("elicitation", &self.elicitation)
            .field("oauth", &self.oauth)
            .field("origin", &self.origin)
            .field("undefined_vars", &self.undefined_vars)
            .field("warnings", &self.warnings)
            .field("expanded", &self.as_written.is_some())
            .finish()
    }
}

/// `oauth:` of an http server's entry: how Mew signs in when the server answers 401. Every
/// field is optional: with none, the client registers itself dynamically (or by the
/// configured client ID metadata document) and asks for the scopes the server names.
#[derive(Clone, Default, PartialEq, Serialize)]
pub struct McpOAuth {
    /// A client registered with the authorization server beforehand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret (a confidential client); shown masked.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "masked_secret"
    )]
    pub client_secret: Option<String>,
    /// The https URL of Mew's client ID metadata document, for authorization servers that
    /// accept one instead of registration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; empty: those the server's challenge or metadata name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The loopback port of `mew mcp login`'s callback (`http://127.0.0.1:PORT/callback`),
    /// for a client registered with that redirect URI; default: any free port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_port: Option<u16>,
    /// How tokens are got: a user signs in (the default), or the client's own credentials.
    #[serde(skip_serializing_if = "McpOAuthGrant::is_default")]
    pub grant: McpOAuthGrant,
    /// Each caller of a node with `auth:` signs in for themselves: a task's calls use the
    /// tokens of the principal it belongs to, on a session of its own, instead of the node's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_caller: bool,
    /// The client's private key (PEM), for `grant: client_credentials` authenticated by a
    /// signed assertion (`private_key_jwt`) instead of a secret; shown masked.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "masked_secret"
    )]
    pub private_key: Option<String>,
    /// The algorithm of `private_key`'s assertions (ES256 when not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_algorithm: Option<String>,
    /// The workload's identity token for `grant: jwt_bearer`: the token itself (shown masked)
    /// or the file it is read from at each grant (platforms rotate it there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assertion: Option<McpSecretSource>,
    /// The enterprise identity provider of `grant: enterprise`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idp: Option<McpIdp>,
    /// Proof of possession (DPoP, RFC 9449): tokens bound to a key of Mew's, each request
    /// signed with it. Also used, without this, for a server whose challenge asks for DPoP.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dpop: bool,
}

/// A secret given in the configuration (expanded from `${VAR}`) or read from a file when it
/// is needed.
#[derive(Clone, PartialEq, Eq)]
pub enum McpSecretSource {
    /// The value itself.
    Value(String),
    /// The path of the file holding it.
    File(std::path::PathBuf),
}

impl McpSecretSource {
    /// The secret, read from its file when it is in one (surrounding whitespace trimmed).
    pub fn read(&self) -> Result<String, String> {
        match self {
            Self::Value(value) => Ok(value.clone()),
            Self::File(path) => {
                // A token file is small; a larger one is not a token.
                const MAX: u64 = 64 * 1024;
                let file = std::fs::File::open(path)
                    .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX + 1), &mut text)
                    .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
                if text.len() as u64 > MAX {
                    return Err(format!("{} is larger than {MAX} bytes", path.display()));
                }
                let text = text.trim();
                if text.is_empty() {
                    return Err(format!("{} is empty", path.display()));
                }
                Ok(text.to_owned())
            }
        }
    }
}

impl Serialize for McpSecretSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Value(value) => serializer.serialize_str(mask(value)),
            Self::File(path) => serializer.serialize_str(&format!("file {}", path.display())),
        }
    }
}

impl fmt::Debug for McpSecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Value(value) => write!(f, "Value({})", mask(value)),
            Self::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

/// `oauth.idp` of `grant: enterprise` (SEP-990): the identity provider that exchanges the
/// user's ID token for an identity assertion grant (ID-JAG) the server's authorization server
/// takes.
#[derive(Clone, PartialEq, Serialize)]
pub struct McpIdp {
    /// Its issuer (as in its metadata).
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// Mew's client there.
    pub client_id: String,
    /// That client's secret, when it is confidential; shown masked.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "masked_secret"
    )]
    pub client_secret: Option<String>,
    /// The user's ID token from the identity provider.
    pub id_token: McpSecretSource,
}

impl fmt::Debug for McpIdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpIdp")
            .field("issuer", &self.issuer)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_deref().map(mask))
            .field("id_token", &self.id_token)
            .finish()
    }
}

/// `oauth.grant`: how an http server's tokens are got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpOAuthGrant {
    /// A user signs in (`mew mcp login`, or a task's caller): the authorization code grant.
    #[default]
    AuthorizationCode,
    /// The client's own `client_id` and `client_secret`, no user: the client credentials
    /// grant (SEP-1046), for machine use. Tokens are got again when they run out.
    ClientCredentials,
    /// A workload's identity token from its platform, presented as the grant (RFC 7523,
    /// SEP-1933 workload identity federation): machine use, no secret kept by Mew.
    JwtBearer,
    /// The user's ID token from an enterprise identity provider, exchanged there for an
    /// identity assertion grant and that at the server's authorization server (SEP-990).
    Enterprise,
}

impl McpOAuthGrant {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether tokens come without a user signing in (and are got again when refused).
    pub fn is_unattended(self) -> bool {
        self != Self::AuthorizationCode
    }
}

impl McpOAuth {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOAuth")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_deref().map(mask))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("callback_port", &self.callback_port)
            .field("grant", &self.grant)
            .field("per_caller", &self.per_caller)
            .field("private_key", &self.private_key.as_deref().map(mask))
            .field("signing_algorithm", &self.signing_algorithm)
            .field("assertion", &self.assertion)
            .field("idp", &self.idp)
            .field("dpop", &self.dpop)
            .finish()
    }
}

/// Serializes a secret masked.
fn masked_secret<S: Serializer>(secret: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(secret.as_deref().map(mask).unwrap_or_default())
}

/// Whether an MCP server may ask the task's model for a completion (`sampling:` of its
/// entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McpSampling {
    /// `ask` (the default): each request is put to the task's caller, who allows it or not.
    #[default]
    Ask,
    /// `true`: a trusted server; its requests are answered without asking.
    Allow,
    /// `false`: its requests are refused.
    Deny,
}

impl McpSampling {
    /// Whether the server may ask at all (the capability is declared).
    pub fn offered(self) -> bool {
        self != Self::Deny
    }
}

impl Serialize for McpSampling {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Ask => serializer.serialize_str("ask"),
            Self::Allow => serializer.serialize_bool(true),
            Self::Deny => serializer.serialize_bool(false),
        }
    }
}

/// What becomes of an MCP server's questions to the user (`elicitation:` of its entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum McpElicitation {
    /// `ask`: a task's call puts the question to the caller (INPUT_REQUIRED).
    #[default]
    Ask,
    /// `decline`: every question is declined at once.
    Decline,
}

/// Which handshake Mew makes with an MCP server (`protocol:` of its entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum McpProtocol {
    /// `auto`: `server/discover` (2026-07-28), falling back to `initialize`; once a server
    /// spoke an earlier version, its later connections start with `initialize`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// `2025-11-25`: `initialize` only, for a server that mishandles the probe.
    #[serde(rename = "2025-11-25")]
    Initialize,
    /// `2026-07-28`: `server/discover` only, never falling back.
    #[serde(rename = "2026-07-28")]
    Discover,
}

/// How an MCP server is reached. Serialized and debug-printed with the values of `env` and
/// `headers` masked (see [`MASK`]).
#[derive(Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum McpTransport {
    /// A program speaking MCP on its stdin and stdout.
    Stdio {
        /// The program (looked up on `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables for it, on top of the node's allowlist.
        #[serde(serialize_with = "masked")]
        env: BTreeMap<String, String>,
        /// Its working directory; `None`: the project directory.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request.
        #[serde(serialize_with = "masked")]
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
        }
    }
}

impl fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &Masked(env))
                .field("cwd", cwd)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &Masked(headers))
                .finish(),
        }
    }
}

/// What the value of an `env` variable or a header is shown as.
pub const MASK: &str = "***";

/// A value as shown: [`MASK`], or empty if it is empty.
fn mask(value: &str) -> &'static str {
    if value.is_empty() { "" } else { MASK }
}

/// Serializes a map of secrets-to-be with its values masked.
fn masked<S: Serializer>(map: &BTreeMap<String, String>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(map.iter().map(|(key, value)| (key, mask(value))))
}

/// Debug-prints a map with its values masked.
struct Masked<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Masked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(key, value)| (key, mask(value))))
            .finish()
    }
}

/// A server entry that was skipped, and why; or a `.mcp.json` that could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpProblem {
    /// The server's name; empty when the problem is with a whole file (a `.mcp.json` that
    /// cannot be read or is not valid JSON).
    pub server: String,
    /// Where it was defined: a file, with the line when known (`path:line`).
    pub origin: String,
    /// What is wrong.
    pub message: String,
}

/// `path:line: MCP server `NAME` skipped: MESSAGE`, or `path:line: MESSAGE` for a file.
impl fmt::Display for McpProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.server.is_empty() {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(
                f,
                "{}: MCP server `{}` skipped: {}",
                self.origin, self.server, self.message
            )
        }
    }
}

impl McpServerConfig {
    /// The warning about [`undefined_vars`](Self::undefined_vars), if there are any.
    pub fn undefined_vars_warning(&self, name: &str) -> Option<String> {
        if self.undefined_vars.is_empty() {
            return None;
        }
        let names: Vec<String> = self
            .undefined_vars
            .iter()
            .map(|var| format!("${{{var}}}"))
            .collect();
        Some(format!(
            "{}: MCP server `{name}` refers to {} {}, which {} not set: expanded to empty text",
            self.origin,
            if names.len() == 1 {
                "variable"
            } else {
                "variables"
            },
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
        ))
    }
}

impl Config {
    /// Logs one warning for each skipped MCP server entry (or unreadable `.mcp.json`), each
    /// of a server's [`warnings`](McpServerConfig::warnings), and one for each server that
    /// refers to variables that are not set. Resolving does not log
    /// (logging is set up from the resolved configuration), so call this once logging is up.
    pub fn log_mcp_warnings(&self) {
        for problem in &self.mcp_problems {
            tracing::warn!("{problem}");
        }
        for (name, server) in &self.mcp_servers {
            for warning in &server.warnings {
                tracing::warn!("{}: MCP server `{name}`: {warning}", server.origin);
            }
            if let Some(warning) = server.undefined_vars_warning(name) {
                tracing::warn!("{warning}");
            }
        }
    }
}
