//! Role definitions: parsing a role file (Markdown with YAML frontmatter) into a `RoleDefinition`.
//!
//! The frontmatter holds the role's settings, the Markdown body is its system prompt. Files written
//! for Claude Code agents read unchanged: keys Mew does not use are kept in `extra`. Problems that
//! make a role unusable are a `RoleError`; values that fall back to a default are `RoleWarning`s
//! returned next to the definition. Nothing here reads files or prints.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

/// Turns a role runs when its `maxTurns` is 0 (unset).
pub const DEFAULT_MAX_TURNS: u32 = 25;

/// Longest accepted role name, in characters. Claude Code has no limit; a role name is a path
/// segment, a gRPC tenant and a metric label, so it has one, far above the names people write.
const MAX_NAME_LEN: usize = 128;

/// Longest accepted concrete model id, in characters.
const MAX_MODEL_LEN: usize = 128;

/// Frontmatter keys this parser reads; every other key goes to `RoleDefinition::extra`.
const KNOWN_KEYS: [&str; 20] = [
    "name",
    "description",
    "tools",
    "disallowedTools",
    "model",
    "maxTurns",
    "maxRunning",
    "permissionMode",
    "elicitation",
    "background",
    "tags",
    "examples",
    "publish",
    "command",
    "cwd",
    "env",
    "timeout",
    "input",
    "resumable",
    "remote",
];

/// Keys that only mean something next to `command`.
const COMMAND_KEYS: [&str; 5] = ["cwd", "env", "timeout", "input", "resumable"];

/// A parsed role: its settings and system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleDefinition {
    /// Unique role name, checked by [`is_valid_role_name`].
    pub name: String,
    /// What the role is for (trimmed, never empty).
    pub description: String,
    /// Tool allowlist; empty means no narrowing.
    pub tools: Vec<String>,
    /// Tool denylist (`disallowedTools`).
    pub disallowed_tools: Vec<String>,
    /// Model to run the role with.
    pub model: ModelChoice,
    /// Turn limit; 0 means [`DEFAULT_MAX_TURNS`].
    pub max_turns: u32,
    /// Tasks of this role running at once on a node (Mew); 0 means the node's
    /// `limits.max_running_per_role`. Never more than the node's own limit.
    pub max_running: u32,
    /// Permission mode the role runs in.
    pub permission_mode: PermissionMode,
    /// Whether an MCP server's questions to the user during the role's calls are declined at
    /// once instead of put to the task's caller (`elicitation: decline`; Mew).
    pub declines_questions: bool,
    /// Whether the role runs in the background.
    pub background: bool,
    /// Free-form tags (Mew).
    pub tags: Vec<String>,
    /// Example requests (Mew).
    pub examples: Vec<String>,
    /// Whether the role is advertised to peers (Mew, default true).
    pub publish: bool,
    /// Program that serves the role instead of a model (Mew).
    pub command: Option<CommandSpec>,
    /// Agent that serves the role by forwarding each turn to it, instead of a model (Mew).
    pub remote: Option<RemoteTarget>,
    /// The Markdown body, trimmed, with CRLF turned into LF.
    pub system_prompt: String,
    /// Where the role was found.
    pub source: RoleSource,
    /// Display path of the role file.
    pub path: String,
    /// Frontmatter keys Mew does not read (`color`, `skills`, `hooks`...), as JSON.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RoleDefinition {
    /// True when a program, not a model, serves this role.
    pub fn is_command(&self) -> bool {
        self.command.is_some()
    }

    /// True when another agent, reached through the node, serves this role.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// The turn limit to enforce: `max_turns`, or [`DEFAULT_MAX_TURNS`] when it is 0.
    pub fn effective_max_turns(&self) -> u32 {
        if self.max_turns == 0 {
            DEFAULT_MAX_TURNS
        } else {
            self.max_turns
        }
    }
}

/// Where a role definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoleSource {
    /// Compiled into Mew.
    Builtin,
    /// The user's Mew roles directory.
    User,
    /// The project's Mew roles directory.
    Project,
    /// The project's `.claude/agents`.
    ClaudeProject,
    /// The user's `~/.claude/agents`.
    ClaudeUser,
    /// An installed Claude Code plugin's `agents`.
    Plugin,
    /// Published by a peer node.
    Peer,
}

impl RoleSource {
    /// Lowercase name, as shown to users (`claude-project`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::User => "user",
            Self::Project => "project",
            Self::ClaudeProject => "claude-project",
            Self::ClaudeUser => "claude-user",
            Self::Plugin => "plugin",
            Self::Peer => "peer",
        }
    }
}

impl fmt::Display for RoleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `model` field: an alias, or a concrete model id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelChoice {
    /// Use the caller's model (`inherit`, empty or absent).
    Inherit,
    /// The `haiku` alias.
    Haiku,
    /// The `sonnet` alias.
    Sonnet,
    /// The `opus` alias.
    Opus,
    /// Any other model id, e.g. `claude-sonnet-4-5` or `gpt-4o`.
    Id(String),
}

impl ModelChoice {
    /// The choice `text` names: an alias (any letter case), `inherit` or empty, or a model id.
    pub fn named(text: &str) -> Self {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "" | "inherit" => Self::Inherit,
            "haiku" => Self::Haiku,
            "sonnet" => Self::Sonnet,
            "opus" => Self::Opus,
            _ => Self::Id(text.to_owned()),
        }
    }
}

impl fmt::Display for ModelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Inherit => "inherit",
            Self::Haiku => "haiku",
            Self::Sonnet => "sonnet",
            Self::Opus => "opus",
            Self::Id(id) => id,
        })
    }
}

/// The `permissionMode` field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// `default`: ask as usual.
    #[default]
    Default,
    /// `acceptEdits`: file edits need no approval.
    AcceptEdits,
    /// `plan`: read-only planning.
    Plan,
    /// `bypassPermissions`: nothing needs approval.
    BypassPermissions,
    /// `dontAsk`: never ask; a call that no permission rule denies is approved (for unattended children).
    DontAsk,
}

impl PermissionMode {
    /// The name used in role files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::Plan => "plan",
            Self::BypassPermissions => "bypassPermissions",
            Self::DontAsk => "dontAsk",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [
            Self::Default,
            Self::AcceptEdits,
            Self::Plan,
            Self::BypassPermissions,
            Self::DontAsk,
        ]
        .into_iter()
        .find(|mode| mode.as_str() == name)
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The agent a `remote:` role forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteTarget {
    /// `peer/role`: a role of a peer named in the node's `peers:` configuration.
    PeerRole {
        /// The peer's name in the configuration.
        peer: String,
        /// The role on that peer.
        role: String,
    },
    /// An `http://` or `https://` URL of an agent.
    Url(String),
}

impl fmt::Display for RemoteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PeerRole { peer, role } => write!(f, "{peer}/{role}"),
            Self::Url(url) => f.write_str(url),
        }
    }
}

/// How a command-driven role runs its program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Program to run (first word of `command`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory (`cwd`), as written.
    pub cwd: Option<String>,
    /// Names of environment variables passed through to the program (`env`).
    pub env: Vec<String>,
    /// Time limit for one run (`timeout`).
    pub timeout: Option<Duration>,
    /// What the program gets on stdin (`input`).
    pub input: CommandInput,
    /// Whether running the program again with the same input is safe (`resumable`): a turn
    /// whose node was lost while it ran is then run again; otherwise it fails.
    pub resumable: bool,
}

/// What a command-driven role's program reads on stdin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandInput {
    /// `text`: the request's text.
    #[default]
    Text,
    /// `message`: the full A2A Message as JSON.
    Message,
}

/// A parsed role with the warnings met on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRole {
    /// The role.
    pub definition: RoleDefinition,
    /// Values that were replaced by defaults, or ignored.
    pub warnings: Vec<RoleWarning>,
}

/// A problem that did not stop the role from loading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct RoleWarning {
    /// Display path of the role file.
    pub path: String,
    /// What was wrong and what was used instead.
    pub message: String,
}

/// A role file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {kind}")]
pub struct RoleError {
    /// Display path of the role file.
    pub path: String,
    /// What is wrong.
    pub kind: RoleErrorKind,
}

/// Why a role file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleErrorKind {
    /// Missing or unclosed frontmatter.
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
    /// The frontmatter is not valid YAML; `line` and `column` count in the whole file, from 1.
    #[error("invalid YAML in frontmatter: {message}")]
    Yaml {
        /// The YAML parser's message, with file positions.
        message: String,
        /// Line of the error in the file.
        line: Option<usize>,
        /// Column of the error.
        column: Option<usize>,
    },
    /// The frontmatter is YAML but not a mapping.
    #[error("frontmatter must be a YAML mapping of keys to values, got {0}")]
    NotAMapping(String),
    /// A required field is absent or empty.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A field has the wrong YAML type.
    #[error("{field} must be {expected}, got {found}")]
    WrongType {
        /// The frontmatter key.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        found: String,
    },
    /// The name breaks the naming rule.
    #[error(
        "name {0:?} is invalid: must start with a letter and contain only letters, digits, \
         '-', '_' or '.', not end with '.' (at most 128 characters)"
    )]
    InvalidName(String),
    /// A field has the right type but an unusable value.
    #[error("{field} is invalid: {reason}")]
    Invalid {
        /// The frontmatter key.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// Why a file's frontmatter could not be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    /// The first line is not `---`.
    #[error("no YAML frontmatter: the file must start with a line `---`")]
    Missing,
    /// No `---` line closes the frontmatter.
    #[error("frontmatter is not closed: no line `---` after the opening one")]
    Unclosed,
}

/// Splits a Markdown file into its YAML frontmatter and its body.
///
/// Shared by role files and skill files (`SKILL.md`). A leading UTF-8 BOM is skipped. The first
/// line must be `---` (no leading whitespace; trailing spaces, tabs and `\r` are allowed); the
/// next such line closes the frontmatter, and may end the file without a newline. The returned
/// YAML starts on line 2 of the file; the body is everything after the closing line, untouched.
///
/// Known limitation: a YAML multi-line string containing a line `---` closes the frontmatter
/// early, as in the system Mew grows from.
pub fn split_frontmatter(text: &str) -> Result<(&str, &str), FrontmatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if is_delimiter(first) => {
            let start = first.len();
            let mut end = start;
            for line in lines {
                if is_delimiter(line) {
                    return Ok((&text[start..end], &text[end + line.len()..]));
                }
                end += line.len();
            }
            Err(FrontmatterError::Unclosed)
        }
        _ => Err(FrontmatterError::Missing),
    }
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end_matches(['\n', '\r', ' ', '\t']) == "---"
}

/// True when `name` matches `^[A-Za-z][A-Za-z0-9._-]{0,127}$` and does not end with `.`
/// (Claude Code agents are named `python.pro` or `api-documenter-v2.1`).
pub fn is_valid_role_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_NAME_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.ends_with('.')
}

/// Parses a role file's text; `path` is only used in messages and kept in the definition.
pub fn parse_role(text: &str, path: &str, source: RoleSource) -> Result<ParsedRole, RoleError> {
    let mut warnings = Vec::new();
    let definition = parse(text, path, source, &mut warnings).map_err(|kind| RoleError {
        path: path.to_owned(),
        kind,
    })?;
    let warnings = warnings
        .into_iter()
        .map(|message| RoleWarning {
            path: path.to_owned(),
            message,
        })
        .collect();
    Ok(ParsedRole {
        definition,
        warnings,
    })
}

fn parse(
    text: &str,
    path: &str,
    source: RoleSource,
    warnings: &mut Vec<String>,
) -> Result<RoleDefinition, RoleErrorKind> {
    let (yaml, body) = split_frontmatter(text)?;
    let map = parse_mapping(yaml, warnings)?;
    let get = |key: &str| map.get(key).filter(|value| !value.is_null());

    let name = required_string(get("name"), "name")?;
    if !is_valid_role_name(&name) {
        return Err(RoleErrorKind::InvalidName(name));
    }
    let description = required_string(get("description"), "description")?
        .trim()
        .to_owned();
    if description.is_empty() {
        return Err(RoleErrorKind::Missing("description"));
    }

    let command = match get("command") {
        Some(value) => Some(command_spec(value, &get)?),
        None => {
            for key in COMMAND_KEYS.iter().filter(|key| get(key).is_some()) {
                warnings.push(format!("{key} is ignored: the role has no command"));
            }
            None
        }
    };
    let remote = get("remote").map(remote_target).transpose()?;
    if command.is_some() && remote.is_some() {
        return Err(RoleErrorKind::Invalid {
            field: "remote",
            reason: "a role has either `command` or `remote`, not both".to_owned(),
        });
    }

    Ok(RoleDefinition {
        name,
        description,
        tools: string_list(get("tools"), "tools")?,
        disallowed_tools: string_list(get("disallowedTools"), "disallowedTools")?,
        model: model(get("model"), warnings),
        max_turns: count(get("maxTurns"), "maxTurns", warnings),
        max_running: count(get("maxRunning"), "maxRunning", warnings),
        permission_mode: permission_mode(get("permissionMode"), warnings),
        declines_questions: elicitation(get("elicitation"), warnings),
        background: bool_field(get("background"), "background", false)?,
        tags: string_list(get("tags"), "tags")?,
        examples: examples(get("examples"))?,
        publish: bool_field(get("publish"), "publish", true)?,
        command,
        remote,
        system_prompt: body.trim().replace("\r\n", "\n"),
        source,
        path: path.to_owned(),
        extra: extra(&map, warnings),
    })
}

/// Parses the frontmatter YAML into a mapping, as Claude Code reads it (see
/// [`crate::frontmatter`]); an empty frontmatter is an empty mapping.
fn parse_mapping(yaml: &str, warnings: &mut Vec<String>) -> Result<Mapping, RoleErrorKind> {
    // The leading newline stands for the opening `---` line, so that the parser's line numbers,
    // in `location()` and in its message, are line numbers in the file.
    let padded = format!("\n{yaml}");
    crate::nesting::check_nesting(&padded, crate::nesting::MAX_NESTING).map_err(|deep| {
        RoleErrorKind::Yaml {
            message: deep.to_string(),
            line: Some(deep.line),
            column: Some(deep.column),
        }
    })?;
    let read = crate::frontmatter::parse_yaml(&padded).map_err(|err| RoleErrorKind::Yaml {
        message: err.to_string(),
        line: err.location().map(|at| at.line()),
        column: err.location().map(|at| at.column()),
    })?;
    for key in &read.quoted {
        warnings.push(format!(
            "{key} is not valid YAML as written (quote it); read as plain text, as Claude Code does"
        ));
    }
    let mut value = read.value;
    match value {
        Value::Mapping(ref mut map) => Ok(std::mem::take(map)),
        Value::Null => Ok(Mapping::new()),
        other => Err(RoleErrorKind::NotAMapping(describe(&other))),
    }
}

/// Short description of a YAML value for messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > 40 => {
            format!("{:?}...", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".to_owned(),
        Value::Mapping(_) => "a mapping".to_owned(),
        Value::Tagged(tagged) => format!("a value tagged {}", tagged.tag),
    }
}

fn wrong_type(field: &'static str, expected: &'static str, found: &Value) -> RoleErrorKind {
    RoleErrorKind::WrongType {
        field,
        expected,
        found: describe(found),
    }
}

fn required_string(value: Option<&Value>, field: &'static str) -> Result<String, RoleErrorKind> {
    match value {
        None => Err(RoleErrorKind::Missing(field)),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong_type(field, "a string", other)),
    }
}

fn optional_string(
    value: Option<&Value>,
    field: &'static str,
) -> Result<Option<String>, RoleErrorKind> {
    value.map(|v| required_string(Some(v), field)).transpose()
}

fn bool_field(
    value: Option<&Value>,
    field: &'static str,
    default: bool,
) -> Result<bool, RoleErrorKind> {
    match value {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(wrong_type(field, "true or false", other)),
    }
}

/// A YAML list of strings, or one comma-separated string; items trimmed, empty ones dropped.
/// Commas inside parentheses do not split, so `Bash(a, b)` stays one tool pattern.
fn string_list(value: Option<&Value>, field: &'static str) -> Result<Vec<String>, RoleErrorKind> {
    const EXPECTED: &str = "a list of strings or a comma-separated string";
    let items: Vec<&str> = match value {
        None => Vec::new(),
        Some(Value::String(s)) => split_commas(s),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| wrong_type(field, EXPECTED, item))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(wrong_type(field, EXPECTED, other)),
    };
    Ok(items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect())
}

fn split_commas(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

/// `examples`: a list of strings, or a single string as one example.
fn examples(value: Option<&Value>) -> Result<Vec<String>, RoleErrorKind> {
    const EXPECTED: &str = "a list of strings";
    let items: Vec<&str> = match value {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| wrong_type("examples", EXPECTED, item))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(wrong_type("examples", EXPECTED, other)),
    };
    Ok(items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect())
}

/// `model`: an alias (any letter case), or a concrete id; unusable values fall back to inherit.
fn model(value: Option<&Value>, warnings: &mut Vec<String>) -> ModelChoice {
    let Some(value) = value else {
        return ModelChoice::Inherit;
    };
    let Some(text) = value.as_str().map(str::trim) else {
        warnings.push(format!(
            "model must be a string, got {}; using inherit",
            describe(value)
        ));
        return ModelChoice::Inherit;
    };
    match text.to_ascii_lowercase().as_str() {
        "" | "inherit" => return ModelChoice::Inherit,
        "haiku" => return ModelChoice::Haiku,
        "sonnet" => return ModelChoice::Sonnet,
        "opus" => return ModelChoice::Opus,
        _ => {}
    }
    let problem = if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("contains whitespace or control characters")
    } else if text.chars().count() > MAX_MODEL_LEN {
        Some("is longer than 128 characters")
    } else {
        None
    };
    match problem {
        Some(problem) => {
            warnings.push(format!(
                "model {} is invalid ({problem}); using inherit",
                describe(value)
            ));
            ModelChoice::Inherit
        }
        None => ModelChoice::Id(text.to_owned()),
    }
}

/// `maxTurns`, `maxRunning`: a whole number, where 0 stands for the default; anything else
/// is 0 with a warning.
fn count(value: Option<&Value>, key: &str, warnings: &mut Vec<String>) -> u32 {
    let Some(value) = value else {
        return 0;
    };
    if let Some(n) = value.as_u64() {
        return u32::try_from(n).unwrap_or(u32::MAX);
    }
    let default = if key == "maxTurns" {
        format!("the default ({DEFAULT_MAX_TURNS})")
    } else {
        "the default".to_owned()
    };
    if value.as_i64().is_some() {
        warnings.push(format!(
            "{key} {} is negative; using {default}",
            describe(value)
        ));
    } else {
        warnings.push(format!(
            "{key} must be an integer, got {}; using {default}",
            describe(value)
        ));
    }
    0
}

fn permission_mode(value: Option<&Value>, warnings: &mut Vec<String>) -> PermissionMode {
    let Some(value) = value else {
        return PermissionMode::Default;
    };
    value
        .as_str()
        .and_then(|name| PermissionMode::from_name(name.trim()))
        .unwrap_or_else(|| {
            warnings.push(format!(
                "permissionMode {} is invalid (expected default, acceptEdits, plan, \
                 bypassPermissions or dontAsk); using default",
                describe(value)
            ));
            PermissionMode::Default
        })
}

/// `elicitation`: `ask` (the default) or `decline`; whether the role declines MCP servers'
/// questions.
fn elicitation(value: Option<&Value>, warnings: &mut Vec<String>) -> bool {
    match value.and_then(Value::as_str).map(str::trim) {
        None if value.is_none() => false,
        Some("ask") => false,
        Some("decline") => true,
        _ => {
            warnings.push(format!(
                "elicitation {} is invalid (expected ask or decline); using ask",
                value.map(describe).unwrap_or_default()
            ));
            false
        }
    }
}

/// `remote`: `peer/role` (both valid role-style names) or an `http(s)://` URL.
fn remote_target(value: &Value) -> Result<RemoteTarget, RoleErrorKind> {
    let Some(text) = value.as_str() else {
        return Err(wrong_type("remote", "text", value));
    };
    let text = text.trim();
    let invalid = |reason: &str| RoleErrorKind::Invalid {
        field: "remote",
        reason: format!("{text:?}: {reason}"),
    };
    if let Some(rest) = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
    {
        if rest.is_empty() || rest.starts_with('/') || text.chars().any(char::is_whitespace) {
            return Err(invalid("expected a URL with a host"));
        }
        return Ok(RemoteTarget::Url(text.to_owned()));
    }
    match text.split_once('/') {
        Some((peer, role)) if is_valid_role_name(peer) && is_valid_role_name(role) => {
            Ok(RemoteTarget::PeerRole {
                peer: peer.to_owned(),
                role: role.to_owned(),
            })
        }
        _ => Err(invalid("expected `peer/role` or an http(s) URL")),
    }
}

/// `command` and its sibling keys `cwd`, `env`, `timeout` and `input`.
fn command_spec<'a>(
    value: &Value,
    get: &impl Fn(&str) -> Option<&'a Value>,
) -> Result<CommandSpec, RoleErrorKind> {
    const EXPECTED: &str = "a command line or a list of strings";
    let words = match value {
        Value::String(line) => {
            split_command_line(line).map_err(|reason| RoleErrorKind::Invalid {
                field: "command",
                reason,
            })?
        }
        Value::Sequence(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                other => Err(wrong_type("command", EXPECTED, other)),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(wrong_type("command", EXPECTED, other)),
    };
    let mut words = words.into_iter();
    let program = words
        .next()
        .filter(|program| !program.is_empty())
        .ok_or_else(|| RoleErrorKind::Invalid {
            field: "command",
            reason: "no program to run".to_owned(),
        })?;

    let env = string_list(get("env"), "env")?;
    if let Some(bad) = env.iter().find(|name| !is_env_name(name)) {
        return Err(RoleErrorKind::Invalid {
            field: "env",
            reason: format!("{bad:?} is not an environment variable name"),
        });
    }
    let input = match get("input") {
        None => CommandInput::Text,
        Some(Value::String(s)) if s == "text" => CommandInput::Text,
        Some(Value::String(s)) if s == "message" => CommandInput::Message,
        Some(other) => return Err(wrong_type("input", "\"text\" or \"message\"", other)),
    };
    Ok(CommandSpec {
        program,
        args: words.collect(),
        cwd: optional_string(get("cwd"), "cwd")?,
        env,
        timeout: get("timeout").map(timeout).transpose()?,
        input,
        resumable: match get("resumable") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(wrong_type("resumable", "true or false", other)),
        },
    })
}

/// Splits a program line on whitespace. Single and double quotes group words (and may be empty);
/// nothing else is special: no escapes, no variables, no globbing.
fn split_command_line(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("unclosed {q} quote in {line:?}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `timeout`: whole seconds, or a string like `500ms`, `30s`, `5m`, `1h` (a bare number is
/// seconds). Zero is refused.
fn timeout(value: &Value) -> Result<Duration, RoleErrorKind> {
    let duration = match value {
        Value::Number(n) => n.as_u64().map(Duration::from_secs),
        Value::String(s) => parse_duration(s.trim()),
        _ => None,
    };
    duration.filter(|d| !d.is_zero()).ok_or_else(|| {
        wrong_type(
            "timeout",
            "a positive duration like 500ms, 30s, 5m, 1h or a number of seconds",
            value,
        )
    })
}

fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// Claude Code's subagent keys that change what an agent does and that Mew does not act on,
/// with what it does instead (the warning's text). Cosmetic keys (`color`) say nothing.
const UNHONOURED_KEYS: [(&str, &str); 7] = [
    (
        "skills",
        "skills is not honoured: the listed skills are not preloaded; the role is offered every \
         skill and loads one when it needs it",
    ),
    (
        "mcpServers",
        "mcpServers is not honoured: the role uses the node's MCP servers (.mcp.json, \
         mcp_servers)",
    ),
    (
        "hooks",
        "hooks is not honoured: hooks come from the settings files and hooks.yaml",
    ),
    (
        "memory",
        "memory is not honoured: Mew keeps no memory directory for a role",
    ),
    (
        "isolation",
        "isolation is not honoured: the role works in the project directory",
    ),
    (
        "effort",
        "effort is not honoured: the role runs with its model's settings",
    ),
    (
        "initialPrompt",
        "initialPrompt is not honoured: a task starts with the caller's message",
    ),
];

/// Frontmatter keys Mew does not read, converted to JSON; those of [`UNHONOURED_KEYS`] with
/// their warning.
fn extra(map: &Mapping, warnings: &mut Vec<String>) -> serde_json::Map<String, serde_json::Value> {
    let mut extra = serde_json::Map::new();
    for (key, value) in map {
        let Some(key) = key.as_str() else {
            warnings.push(format!(
                "key {} is ignored: keys must be strings",
                describe(key)
            ));
            continue;
        };
        if KNOWN_KEYS.contains(&key) {
            continue;
        }
        if let Some((_, why)) = UNHONOURED_KEYS.iter().find(|(known, _)| *known == key) {
            warnings.push((*why).to_owned());
        }
        match serde_json::to_value(value) {
            Ok(json) => {
                extra.insert(key.to_owned(), json);
            }
            Err(err) => warnings.push(format!("{key} is ignored: {err}")),
        }
    }
    extra
}
