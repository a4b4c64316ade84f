//! The `mcp_servers:` entries from the files to [`McpServerConfig`]s: reading `.mcp.json`,
//! remembering where each entry was written and so by whose rules it is read ([`Dialect`]),
//! checking each entry on its own (a bad one is a [`McpProblem`], never an error), and
//! expanding `${VAR}`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::check::{edit_distance, line_of};
use super::mcp::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESTARTS, McpElicitation, McpIdp,
    McpOAuth, McpOAuthGrant, McpProblem, McpProtocol, McpSampling, McpSecretSource,
    McpServerConfig, McpTransport,
};
use super::merge::{key_name, singleton};
use super::{ConfigError, LoadedConfig, Origin};
use crate::duration;

/// The keys an `mcp_servers` entry may have.
const KEYS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "connect_timeout",
    "call_timeout",
    "allow_tools",
    "deny_tools",
    "max_restarts",
    "protocol",
    "sampling",
    "elicitation",
    "oauth",
    "enabled",
];

/// Keys of Claude Code's `.mcp.json` entries that Mew reads but does not act on, with what that
/// means; the entry is kept, with a warning.
const CLAUDE_CODE_KEYS_NOT_HONOURED: &[(&str, &str)] = &[(
    "headersHelper",
    "Mew does not run it; only the `headers` written here are sent",
)];

/// The keys that only a stdio server has, and those that only an http server has.
const STDIO_KEYS: &[&str] = &["command", "args", "env", "cwd"];
const HTTP_KEYS: &[&str] = &["url", "headers", "oauth"];

/// The environment `${VAR}` expands from. Debug-prints the names only: the values may be
/// secrets.
#[derive(Clone, Default)]
pub(crate) struct Environment(HashMap<String, String>);

impl Environment {
    pub(crate) fn new(vars: HashMap<String, String>) -> Self {
        Self(vars)
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        f.debug_set().entries(names).finish()
    }
}

/// Whose rules an entry is read by, which depends on the file it was written in.
///
/// | | Mew's files (the seed's rule) | `.mcp.json` (Claude Code's rules) |
/// |---|---|---|
/// | `${VAR}` expanded in | `env` and `headers` values | `command`, `args`, `env`, `url`, `headers` |
/// | `${VAR}` unset, no default | empty text, with a warning | the entry is skipped |
/// | an unknown key | the entry is skipped | ignored, with a warning |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// `~/.mew/config.yaml`, the project's `.mew/config.yaml`, `--config`.
    Mew,
    /// The project's `.mcp.json`: Claude Code's file, read as Claude Code reads it.
    ClaudeCode,
}

impl Dialect {
    /// The key of the section that holds the entries in this dialect's files.
    fn section(self) -> &'static str {
        match self {
            Self::Mew => "mcp_servers",
            Self::ClaudeCode => "mcpServers",
        }
    }
}

/// What loading learned about MCP server entries besides their values: where each was last
/// written (`path:line`) and in which dialect, and the problems of `.mcp.json` files as a
/// whole.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpSources {
    places: BTreeMap<String, (String, Dialect)>,
    problems: Vec<McpProblem>,
}

impl McpSources {
    /// Remembers where the entries of `layer`'s `mcp_servers` are: in `path`, a file of
    /// `dialect` whose `text` holds them. A higher layer's entry replaces a lower one whole, so
    /// the last place recorded for a name is where its entry comes from, and its file's
    /// dialect is the one it is read by.
    pub(crate) fn record(&mut self, layer: &Value, dialect: Dialect, path: &Path, text: &str) {
        let Some(Value::Mapping(servers)) = layer.get("mcp_servers") else {
            return;
        };
        for key in servers.keys() {
            let name = key_name(key);
            let line = line_of(text, &[dialect.section().to_owned(), name.clone()]);
            self.places.insert(name, (place(path, line), dialect));
        }
    }

    fn file_problem(&mut self, path: &Path, line: Option<usize>, message: String) {
        self.problems.push(McpProblem {
            server: String::new(),
            origin: place(path, line),
            message,
        });
    }
}

/// `path:line`, or `path` when the line is not known.
fn place(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}

/// Reads the `mcpServers` object of Claude Code's `.mcp.json` as a layer with only an
/// `mcp_servers:` section; `None` if the file or the object is missing, or if the file cannot
/// be read or parsed (then a problem is recorded in `sources`, naming the file and the line).
/// A plugin's file (`plugin_root` given) has `${CLAUDE_PLUGIN_ROOT}` replaced by the plugin's
/// folder first, as Claude Code does, so its servers find their own files.
pub(crate) fn read_mcp_json(
    path: &Path,
    plugin_root: Option<&Path>,
    sources: &mut McpSources,
) -> Option<Value> {
    let text = match crate::user_file::read_text(path, crate::user_file::MAX_USER_FILE_BYTES) {
        Ok(text) => match plugin_root {
            // In the JSON text, so the folder is escaped as a JSON string's content.
            Some(root) => {
                let quoted = serde_json::Value::from(root.display().to_string()).to_string();
                let escaped = quoted
                    .strip_prefix('"')
                    .and_then(|inner| inner.strip_suffix('"'))
                    .unwrap_or_default();
                text.replace("${CLAUDE_PLUGIN_ROOT}", escaped)
            }
            None => text,
        },
        Err(crate::user_file::ReadError::NotFound) => return None,
        Err(error) => {
            sources.file_problem(path, None, format!("cannot be read: {error}"));
            return None;
        }
    };
    if let Err(deep) = mew_cards::check_nesting(&text, mew_cards::MAX_NESTING) {
        sources.file_problem(path, Some(deep.line), format!("invalid JSON: {deep}"));
        return None;
    }
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(json) => json,
        Err(error) => {
            sources.file_problem(path, Some(error.line()), format!("invalid JSON: {error}"));
            return None;
        }
    };
    let Some(object) = json.as_object() else {
        sources.file_problem(path, None, "expected an object at the top level".to_owned());
        return None;
    };
    let servers = object.get("mcpServers")?;
    let Some(servers) = servers.as_object() else {
        let line = line_of(&text, &["mcpServers".to_owned()]);
        sources.file_problem(path, line, "`mcpServers` is not an object".to_owned());
        return None;
    };
    let mut section = Mapping::new();
    for (name, entry) in servers {
        let entry = match serde_yaml_ng::to_value(entry) {
            Ok(entry) => entry,
            Err(error) => Value::String(format!("<unreadable: {error}>")),
        };
        section.insert(Value::String(name.clone()), entry);
    }
    if section.is_empty() {
        return None;
    }
    let layer = singleton(&["mcp_servers".to_owned()], Value::Mapping(section));
    sources.record(&layer, Dialect::ClaudeCode, path, &text);
    Some(layer)
}

impl LoadedConfig {
    /// `mcp_servers:`: every enabled, valid entry resolved; every bad one (and every problem
    /// of a `.mcp.json` file) in the list of problems, in order of name.
    pub(super) fn resolve_mcp(
        &self,
        project: &Path,
    ) -> (BTreeMap<String, McpServerConfig>, Vec<McpProblem>) {
        let mut servers = BTreeMap::new();
        let mut problems = self.mcp.problems.clone();
        for (name, entry) in &self.settings.mcp_servers {
            let (origin, dialect) = self
                .mcp
                .places
                .get(name)
                .cloned()
                .unwrap_or_else(|| (Origin::Default.to_string(), Dialect::Mew));
            let path = |key: &str, path: &Path| {
                self.path(
                    &format!("mcp_servers.{name}.{key}"),
                    path,
                    self.home.as_deref(),
                    project,
                )
                .map_err(|error| match error {
                    ConfigError::Resolve { message, .. } => format!("`{key}`: {message}"),
                    other => format!("`{key}`: {other}"),
                })
            };
            match resolve_entry(name, entry, dialect, &self.env.0, &path) {
                Ok(Some(mut server)) => {
                    server.origin = origin;
                    servers.insert(name.clone(), server);
                }
                Ok(None) => {}
                Err(message) => problems.push(McpProblem {
                    server: name.clone(),
                    origin,
                    message,
                }),
            }
        }
        (servers, problems)
    }
}

/// True when `name` can name an MCP server: `^[A-Za-z0-9_-]+$` without `__` (tool names are
/// `mcp__SERVER__TOOL`, split at `__`).
pub(crate) fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One entry, checked and resolved by `dialect`'s rules: `Ok(None)` if it is switched off
/// (`enabled: false`), `Err` with what is wrong if it is bad. `origin` is left empty for the
/// caller to fill in.
fn resolve_entry(
    name: &str,
    entry: &Value,
    dialect: Dialect,
    env: &HashMap<String, String>,
    path: &dyn Fn(&str, &Path) -> Result<PathBuf, String>,
) -> Result<Option<McpServerConfig>, String> {
    if !is_valid_server_name(name) {
        return Err(format!(
            "`{name}` cannot name an MCP server: use letters, digits, `_` and `-`, without \
             `__` (tools are named mcp__SERVER__TOOL)"
        ));
    }
    let empty = Mapping::new();
    let entry = match entry {
        Value::Mapping(entry) => entry,
        Value::Null => &empty,
        _ => {
            return Err("expected a mapping of settings (type, command, url, ...)".to_owned());
        }
    };
    let mut expansion = Expansion {
        dialect,
        env,
        undefined: Vec::new(),
        warnings: Vec::new(),
    };
    for key in entry.keys() {
        let key = key_name(key);
        if !KEYS.contains(&key.as_str()) {
            match dialect {
                Dialect::Mew => return Err(unknown_key(&key)),
                Dialect::ClaudeCode => expansion.warnings.push(ignored_key(&key)),
            }
        }
    }
    let field = |key: &str| entry.get(key).filter(|value| !value.is_null());

    if let Some(enabled) = field("enabled") {
        match enabled {
            Value::Bool(true) => {}
            Value::Bool(false) => return Ok(None),
            _ => return Err("`enabled`: expected true or false".to_owned()),
        }
    }
    let kind = field("type").map(|kind| text("type", kind)).transpose()?;
    let command = field("command")
        .map(|value| text("command", value))
        .transpose()?;
    let url = field("url").map(|value| text("url", value)).transpose()?;
    let is_stdio = match (kind.as_deref(), &command, &url) {
        (Some("stdio"), _, _) => true,
        (Some("http"), _, _) => false,
        (Some("sse"), _, _) => {
            return Err(
                "type `sse` (the legacy HTTP+SSE transport) is not supported: use \
                        `type: http` (Streamable HTTP) if the server offers it"
                    .to_owned(),
            );
        }
        (Some(other), _, _) => {
            return Err(format!("unknown type `{other}`: expected stdio or http"));
        }
        (None, Some(_), None) => true,
        (None, None, Some(_)) => false,
        (None, Some(_), Some(_)) => {
            return Err("both `command` and `url` are given: say which to use with \
                        `type: stdio` or `type: http`"
                .to_owned());
        }
        (None, None, None) => {
            return Err("missing `type`: give a `command` (stdio) or a `url` (http)".to_owned());
        }
    };
    let (kind, others) = if is_stdio {
        ("a stdio", HTTP_KEYS)
    } else {
        ("an http", STDIO_KEYS)
    };
    if let Some(key) = others.iter().find(|key| field(key).is_some()) {
        return Err(format!("`{key}` does not apply to {kind} server"));
    }

    // What was written, where expansion changed it: shown instead of the expanded values,
    // which may hold secrets from the environment (`--api-key ${KEY}`).
    let (transport, as_written) = if is_stdio {
        let Some(written_command) = command.filter(|command| !command.trim().is_empty()) else {
            return Err("a stdio server needs a `command`".to_owned());
        };
        let command = expansion.apply("command", "`command`", written_command.clone())?;
        if command.trim().is_empty() {
            return Err(format!(
                "`command` `{written_command}` is empty once expanded; a stdio server needs \
                 a `command`"
            ));
        }
        let mut written_args = Vec::new();
        let args: Vec<String> = match field("args") {
            None => Vec::new(),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|item| {
                    let arg =
                        scalar(item).ok_or_else(|| "`args`: expected a list of text".to_owned())?;
                    written_args.push(arg.clone());
                    expansion.apply("args", "`args`", arg)
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`args`: expected a list of text".to_owned()),
        };
        let env = table("env", field("env"), &mut expansion, |name| {
            !name.is_empty() && !name.contains(['=', '\0'])
        })?;
        let cwd = field("cwd")
            .map(|value| text("cwd", value))
            .transpose()?
            .map(|dir| path("cwd", Path::new(&dir)))
            .transpose()?;
        let as_written =
            (written_command != command || written_args != args).then(|| McpTransport::Stdio {
                command: written_command,
                args: written_args,
                env: env.clone(),
                cwd: cwd.clone(),
            });
        let transport = McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        };
        (transport, as_written)
    } else {
        let Some(written_url) = url else {
            return Err("an http server needs a `url`".to_owned());
        };
        if dialect == Dialect::Mew && written_url.contains("${") {
            return Err(format!(
                "`url`: `{written_url}` contains `${{`, which is not expanded in a url in \
                 Mew's configuration (only in the values of env and headers; a `.mcp.json` \
                 expands it)"
            ));
        }
        let url = expansion.apply("url", "`url`", written_url.clone())?;
        if !is_http_url(&url) {
            return Err(if url == written_url {
                format!("`url`: `{url}` is not an http:// or https:// URL with a host")
            } else {
                format!(
                    "`url`: `{written_url}` is not an http:// or https:// URL with a host once \
                     expanded"
                )
            });
        }
        let headers = table("headers", field("headers"), &mut expansion, |name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
        })?;
        if let Some(name) = headers
            .iter()
            .find(|(_, value)| value.contains(['\r', '\n']))
            .map(|(name, _)| name)
        {
            return Err(format!(
                "`headers`: the value of `{name}` contains a line break once expanded"
            ));
        }
        let as_written = (written_url != url).then(|| McpTransport::Http {
            url: written_url,
            headers: headers.clone(),
        });
        (McpTransport::Http { url, headers }, as_written)
    };
    let max_restarts = match field("max_restarts") {
        None => DEFAULT_MAX_RESTARTS,
        Some(value) => value
            .as_u64()
            .and_then(|count| u32::try_from(count).ok())
            .ok_or_else(|| "`max_restarts`: expected a whole number, 0 or more".to_owned())?,
    };
    let protocol = match field("protocol") {
        None => McpProtocol::Auto,
        Some(value) => match value.as_str() {
            Some("auto") => McpProtocol::Auto,
            Some("2025-11-25") => McpProtocol::Initialize,
            Some("2026-07-28") => McpProtocol::Discover,
            _ => {
                return Err(
                    "`protocol`: expected auto, 2025-11-25 (initialize) or 2026-07-28 \
                     (server/discover)"
                        .to_owned(),
                );
            }
        },
    };
    let sampling = match field("sampling") {
        None => McpSampling::Ask,
        Some(Value::Bool(true)) => McpSampling::Allow,
        Some(Value::Bool(false)) => McpSampling::Deny,
        Some(value) if value.as_str() == Some("ask") => McpSampling::Ask,
        Some(_) => {
            return Err(
                "`sampling`: expected true (trusted), false (never) or ask (the caller decides)"
                    .to_owned(),
            );
        }
    };
    let elicitation = match field("elicitation").map(|value| value.as_str()) {
        None => McpElicitation::Ask,
        Some(Some("ask")) => McpElicitation::Ask,
        Some(Some("decline")) => McpElicitation::Decline,
        Some(_) => return Err("`elicitation`: expected ask or decline".to_owned()),
    };
    let oauth = match field("oauth") {
        None => McpOAuth::default(),
        Some(value) => oauth(value, dialect, &mut expansion, path)?,
    };
    Ok(Some(McpServerConfig {
        transport,
        connect_timeout: timeout("connect_timeout", field("connect_timeout"))?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        call_timeout: timeout("call_timeout", field("call_timeout"))?
            .unwrap_or(DEFAULT_CALL_TIMEOUT),
        allow_tools: tools("allow_tools", field("allow_tools"))?,
        deny_tools: tools("deny_tools", field("deny_tools"))?,
        max_restarts,
        protocol,
        sampling,
        elicitation,
        oauth,
        origin: String::new(),
        undefined_vars: expansion.undefined,
        warnings: expansion.warnings,
        as_written,
    }))
}

/// `oauth:` of an http entry. Mew's files write `client_id`, `client_secret` (expanded, like
/// the values of `headers`), `client_metadata_url`, `scopes`, `callback_port`, `grant`,
/// `per_caller`, `private_key` and `signing_algorithm`, `assertion` or `assertion_file`,
/// `idp` and `dpop`; a `.mcp.json` writes Claude Code's `clientId` and `callbackPort`.
fn oauth(
    value: &Value,
    dialect: Dialect,
    expansion: &mut Expansion,
    path: &dyn Fn(&str, &Path) -> Result<PathBuf, String>,
) -> Result<McpOAuth, String> {
    let Value::Mapping(map) = value else {
        return Err(
            "`oauth`: expected a mapping (client_id, client_secret, scopes, ...)".to_owned(),
        );
    };
    let (id_key, port_key, known): (&str, &str, &[&str]) = match dialect {
        Dialect::Mew => (
            "client_id",
            "callback_port",
            &[
                "client_id",
                "client_secret",
                "client_metadata_url",
                "scopes",
                "callback_port",
                "grant",
                "per_caller",
                "private_key",
                "signing_algorithm",
                "assertion",
                "assertion_file",
                "idp",
                "dpop",
            ],
        ),
        Dialect::ClaudeCode => ("clientId", "callbackPort", &["clientId", "callbackPort"]),
    };
    let mut oauth = McpOAuth::default();
    for (key, value) in map {
        let key = key_name(key);
        if !known.contains(&key.as_str()) {
            match dialect {
                Dialect::Mew => {
                    return Err(format!(
                        "`oauth.{key}` is not a setting (known: {})",
                        known.join(", ")
                    ));
                }
                Dialect::ClaudeCode => {
                    expansion
                        .warnings
                        .push(format!("`oauth.{key}` is ignored: Mew does not know it"));
                    continue;
                }
            }
        }
        if value.is_null() {
            continue;
        }
        let name = format!("oauth.{key}");
        let what = format!("`{name}`");
        let flag = |value: &Value| {
            value
                .as_bool()
                .ok_or_else(|| format!("{what}: expected true or false"))
        };
        if key == id_key {
            oauth.client_id = Some(text(&name, value)?);
        } else if key == port_key {
            oauth.callback_port = Some(
                value
                    .as_u64()
                    .and_then(|port| u16::try_from(port).ok())
                    .filter(|port| *port > 0)
                    .ok_or_else(|| format!("{what}: expected a port number, 1 to 65535"))?,
            );
        } else if key == "client_secret" {
            let secret = expansion.apply("headers", &what, text(&name, value)?)?;
            oauth.client_secret = Some(secret);
        } else if key == "client_metadata_url" {
            let url = text(&name, value)?;
            if !url.starts_with("https://") {
                return Err(format!(
                    "{what}: a client ID metadata document must be at an https:// URL"
                ));
            }
            oauth.client_metadata_url = Some(url);
        } else if key == "scopes" {
            let scopes = value.as_sequence().and_then(|items| {
                items
                    .iter()
                    .map(|item| item.as_str().filter(|scope| !scope.contains(' ')))
                    .map(|scope| scope.filter(|scope| !scope.is_empty()).map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
            });
            oauth.scopes =
                scopes.ok_or_else(|| format!("{what}: expected a list of scope names"))?;
        } else if key == "per_caller" {
            oauth.per_caller = flag(value)?;
        } else if key == "dpop" {
            oauth.dpop = flag(value)?;
        } else if key == "grant" {
            oauth.grant = match value.as_str() {
                Some("authorization_code") => McpOAuthGrant::AuthorizationCode,
                Some("client_credentials") => McpOAuthGrant::ClientCredentials,
                Some("jwt_bearer") => McpOAuthGrant::JwtBearer,
                Some("enterprise") => McpOAuthGrant::Enterprise,
                _ => {
                    return Err(format!(
                        "{what}: expected authorization_code, client_credentials, jwt_bearer \
                         or enterprise"
                    ));
                }
            };
        } else if key == "private_key" {
            let pem = expansion.apply("headers", &what, text(&name, value)?)?;
            if !pem.contains("-----BEGIN ") {
                return Err(format!("{what}: expected a PEM private key"));
            }
            oauth.private_key = Some(pem);
        } else if key == "signing_algorithm" {
            let algorithm = text(&name, value)?;
            if !SIGNING_ALGORITHMS.contains(&algorithm.as_str()) {
                return Err(format!(
                    "{what}: expected one of {}",
                    SIGNING_ALGORITHMS.join(", ")
                ));
            }
            oauth.signing_algorithm = Some(algorithm);
        } else if key == "assertion" {
            let token = expansion.apply("headers", &what, text(&name, value)?)?;
            oauth.assertion = Some(McpSecretSource::Value(token));
        } else if key == "assertion_file" {
            let file = path(&name, Path::new(&text(&name, value)?))?;
            oauth.assertion = Some(McpSecretSource::File(file));
        } else if key == "idp" {
            oauth.idp = Some(idp(value, expansion, path)?);
        }
    }
    if map.contains_key("assertion") && map.contains_key("assertion_file") {
        return Err("`oauth`: give `assertion` or `assertion_file`, not both".to_owned());
    }
    if oauth.client_secret.is_some() && oauth.client_id.is_none() {
        return Err("`oauth.client_secret` needs the `client_id` it belongs to".to_owned());
    }
    if oauth.per_caller && oauth.grant.is_unattended() {
        return Err(
            "`oauth.per_caller` is for users who sign in; this `grant` has no user".to_owned(),
        );
    }
    let needs = |what: &str| Err(format!("`oauth.grant: {what}"));
    match oauth.grant {
        McpOAuthGrant::ClientCredentials
            if oauth.client_id.is_none()
                || oauth.client_secret.is_some() == oauth.private_key.is_some() =>
        {
            needs(
                "client_credentials` needs the client's `client_id` and either its \
                 `client_secret` or its `private_key`",
            )
        }
        McpOAuthGrant::JwtBearer if oauth.assertion.is_none() => {
            needs("jwt_bearer` needs the workload's token: `assertion` or `assertion_file`")
        }
        McpOAuthGrant::Enterprise if oauth.idp.is_none() || oauth.client_id.is_none() => needs(
            "enterprise` needs `idp` and the `client_id` at the server's authorization server",
        ),
        _ => Ok(()),
    }?;
    if oauth.private_key.is_some() && oauth.grant != McpOAuthGrant::ClientCredentials {
        return Err("`oauth.private_key` is for `grant: client_credentials`".to_owned());
    }
    Ok(oauth)
}

/// The algorithms of `oauth.signing_algorithm`.
const SIGNING_ALGORITHMS: &[&str] = &[
    "ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "EdDSA",
];

/// `oauth.idp` (see [`McpIdp`]).
fn idp(
    value: &Value,
    expansion: &mut Expansion,
    path: &dyn Fn(&str, &Path) -> Result<PathBuf, String>,
) -> Result<McpIdp, String> {
    const KNOWN: &[&str] = &[
        "issuer",
        "token_endpoint",
        "client_id",
        "client_secret",
        "id_token",
        "id_token_file",
    ];
    let Value::Mapping(map) = value else {
        return Err("`oauth.idp`: expected a mapping (issuer, token_endpoint, ...)".to_owned());
    };
    let mut fields = HashMap::new();
    for (key, value) in map {
        let key = key_name(key);
        if !KNOWN.contains(&key.as_str()) {
            return Err(format!(
                "`oauth.idp.{key}` is not a setting (known: {})",
                KNOWN.join(", ")
            ));
        }
        fields.insert(key.clone(), text(&format!("oauth.idp.{key}"), value)?);
    }
    let mut take = |key: &str| fields.remove(key);
    let required = |key: &str, value: Option<String>| {
        value.ok_or_else(|| format!("`oauth.idp` needs `{key}`"))
    };
    let issuer = required("issuer", take("issuer"))?;
    let token_endpoint = required("token_endpoint", take("token_endpoint"))?;
    let url = reqwest::Url::parse(&token_endpoint)
        .map_err(|err| format!("`oauth.idp.token_endpoint`: not a URL: {err}"))?;
    let loopback = url
        .host_str()
        .is_some_and(|host| matches!(host, "localhost" | "127.0.0.1" | "[::1]"));
    if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
        return Err("`oauth.idp.token_endpoint`: expected an https URL".to_owned());
    }
    let client_id = required("client_id", take("client_id"))?;
    let client_secret = take("client_secret")
        .map(|secret| expansion.apply("headers", "`oauth.idp.client_secret`", secret))
        .transpose()?;
    let id_token = match (take("id_token"), take("id_token_file")) {
        (Some(token), None) => {
            McpSecretSource::Value(expansion.apply("headers", "`oauth.idp.id_token`", token)?)
        }
        (None, Some(file)) => {
            McpSecretSource::File(path("oauth.idp.id_token_file", Path::new(&file))?)
        }
        _ => return Err("`oauth.idp` needs `id_token` or `id_token_file`".to_owned()),
    };
    Ok(McpIdp {
        issuer,
        token_endpoint,
        client_id,
        client_secret,
        id_token,
    })
}

/// `${VAR}` in the values of one entry, expanded by its dialect's rules (see [`Dialect`]).
struct Expansion<'a> {
    dialect: Dialect,
    env: &'a HashMap<String, String>,
    /// Variables that were not set and expanded to empty text (each once; Mew's files only).
    undefined: Vec<String>,
    /// What the entry's user should know: values left as written, keys ignored.
    warnings: Vec<String>,
}

impl Expansion<'_> {
    /// `text`, a value of the entry's `field` (`command`, `args`, `url`, `env` or `headers`),
    /// described in messages as `what`: expanded if the dialect expands that field. In a
    /// `.mcp.json`, a variable that is not set and has no default is an error, as in Claude
    /// Code; in Mew's files it expands to empty text and is listed in `undefined`, and a
    /// reference in `command` or `args`, which are never expanded there, is a warning.
    fn apply(&mut self, field: &str, what: &str, text: String) -> Result<String, String> {
        let expanded_here = matches!(field, "env" | "headers");
        match self.dialect {
            Dialect::Mew if expanded_here => Ok(expand(&text, self.env, &mut self.undefined)),
            Dialect::Mew => {
                if has_reference(&text) {
                    self.warnings.push(format!(
                        "{what} `{text}` is passed as written: Mew's configuration expands \
                         `${{VAR}}` only in the values of env and headers (a `.mcp.json` \
                         expands it everywhere)"
                    ));
                }
                Ok(text)
            }
            Dialect::ClaudeCode => {
                let mut unset = Vec::new();
                let expanded = expand(&text, self.env, &mut unset);
                if unset.is_empty() {
                    return Ok(expanded);
                }
                let names: Vec<String> = unset.iter().map(|var| format!("${{{var}}}")).collect();
                Err(format!(
                    "{what} refers to {} {}, which {} not set and {} no default (write \
                     `${{VAR:-default}}` for a value that may be missing)",
                    if unset.len() == 1 {
                        "variable"
                    } else {
                        "variables"
                    },
                    names.join(", "),
                    if unset.len() == 1 { "is" } else { "are" },
                    if unset.len() == 1 { "has" } else { "have" },
                ))
            }
        }
    }
}

/// True when `text` holds a `${VAR}` or `${VAR:-default}` reference.
fn has_reference(text: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        rest = &rest[start + 2..];
        if reference(rest).is_some() {
            return true;
        }
    }
    false
}

/// The warning about a key of a `.mcp.json` entry that Mew does not read.
fn ignored_key(key: &str) -> String {
    match CLAUDE_CODE_KEYS_NOT_HONOURED
        .iter()
        .find(|(known, _)| *known == key)
    {
        Some((_, why)) => format!("`{key}` is not honoured: {why}"),
        None => format!("{}; it is ignored", unknown_key(key)),
    }
}

/// The problem of an unknown key, with the known key it probably meant.
fn unknown_key(key: &str) -> String {
    let limit = 2.max(key.chars().count() / 3);
    let suggestion = KEYS
        .iter()
        .map(|known| (edit_distance(key, known), known))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance);
    match suggestion {
        Some((_, known)) => format!("unknown key `{key}` (did you mean `{known}`?)"),
        None => format!("unknown key `{key}` (the keys are {})", KEYS.join(", ")),
    }
}

/// A text value.
fn text(key: &str, value: &Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        _ => Err(format!("`{key}`: expected text")),
    }
}

/// A scalar as text: `8080` and `true` are as good as `"8080"` and `"true"` in `args`, `env`
/// and `headers`.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// `env` or `headers`: a mapping of names (each passing `valid_name`) to scalars, with
/// `${VAR}` expanded in the values as `expansion`'s dialect says.
fn table(
    key: &str,
    value: Option<&Value>,
    expansion: &mut Expansion<'_>,
    valid_name: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, String>, String> {
    let Some(value) = value else {
        return Ok(BTreeMap::new());
    };
    let Value::Mapping(entries) = value else {
        return Err(format!("`{key}`: expected a mapping of names to values"));
    };
    let mut table = BTreeMap::new();
    for (name, value) in entries {
        let name = key_name(name);
        if !valid_name(&name) {
            return Err(format!("`{key}`: `{name}` is not a valid name"));
        }
        let Some(value) = scalar(value) else {
            return Err(format!("`{key}`: the value of `{name}` is not text"));
        };
        let value = expansion.apply(key, &format!("`{key}`: the value of `{name}`"), value)?;
        table.insert(name, value);
    }
    Ok(table)
}

/// A duration longer than zero, if given.
fn timeout(key: &str, value: Option<&Value>) -> Result<Option<Duration>, String> {
    let duration = match value {
        None => return Ok(None),
        Some(Value::String(text)) => {
            duration::parse(text).map_err(|error| format!("`{key}`: {error}"))?
        }
        Some(Value::Number(number)) => match number.as_u64() {
            Some(seconds) => Duration::from_secs(seconds),
            None => return Err(format!("`{key}`: expected a duration such as 30s")),
        },
        Some(_) => return Err(format!("`{key}`: expected a duration such as 30s")),
    };
    if duration.is_zero() {
        return Err(format!("`{key}`: must be longer than zero"));
    }
    Ok(Some(duration))
}

/// `allow_tools` or `deny_tools`: a list of tool names.
fn tools(key: &str, value: Option<&Value>) -> Result<Vec<String>, String> {
    let bad = || format!("`{key}`: expected a list of tool names");
    match value {
        None => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(name) if !name.trim().is_empty() => Ok(name.clone()),
                _ => Err(bad()),
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// True for an `http://` or `https://` URL with a host.
fn is_http_url(url: &str) -> bool {
    url.strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
}

/// Expands `${VAR}` and `${VAR:-default}` in `text` from `env`. A variable that is not set
/// expands to empty text and is added to `undefined` (once); with `:-`, the default stands in
/// for a variable that is not set or empty. Anything else (`$VAR`, `${1}`, `${VAR:?x}`, an
/// unclosed `${`) is left as written; the expanded text is not expanded again.
pub(crate) fn expand(
    text: &str,
    env: &HashMap<String, String>,
    undefined: &mut Vec<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some((name, default, used)) = reference(after) else {
            out.push_str("${");
            rest = after;
            continue;
        };
        match (env.get(name), default) {
            (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
            (Some(value), _) => out.push_str(value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                if !undefined.iter().any(|known| known == name) {
                    undefined.push(name.to_owned());
                }
            }
        }
        rest = &after[used..];
    }
    out.push_str(rest);
    out
}

/// The reference at the start of `text` (just after `${`): `NAME}` or `NAME:-default}`, with
/// `NAME` a letter or `_` then letters, digits or `_`. Returns the name, the default and the
/// length up to and including the `}`.
fn reference(text: &str) -> Option<(&str, Option<&str>, usize)> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let name = &text[..end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let rest = &text[end..];
    if rest.starts_with('}') {
        return Some((name, None, end + 1));
    }
    let default = rest.strip_prefix(":-")?;
    let close = default.find('}')?;
    Some((name, Some(&default[..close]), end + 2 + close + 1))
}
