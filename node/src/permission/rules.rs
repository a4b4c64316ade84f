//! Permission rules as users write them, Claude Code's spellings included: `bash(git *)`, `Bash(npm run test:*)`, `edit_file(src/**)`, `mcp__github`.
//!
//! A rule is a tool pattern, optionally followed by an argument pattern in parentheses:
//!
//! | Rule | Matches |
//! |---|---|
//! | `read_file`, `Read` | every call of `read_file` |
//! | `mcp__github__create_issue` | that MCP tool |
//! | `mcp__github` | every tool of the `github` MCP server |
//! | `mcp__github__*`, `*` | every tool whose name starts with what comes before the `*` |
//! | `bash(git *)`, `Bash(git log:*)` | `bash` calls whose command matches |
//! | `edit_file(src/**)` | `edit_file` calls whose `file_path` is under `<project>/src` |
//! | `WebFetch(domain:docs.rs)`, `web_fetch(domain:*.example.com)` | `web_fetch` calls whose URL's host matches |
//!
//! Claude Code's tool names are aliases: `Read`, `Write`, `Edit`, `MultiEdit`, `LS`, `Glob`,
//! `Grep`, `Bash`, `WebFetch` and `WebSearch` mean `read_file`, `write_file`, `edit_file`,
//! `multi_edit`, `ls`, `glob`, `grep`, `bash`, `web_fetch` and `web_search`. Tool names are
//! otherwise case-sensitive. An argument pattern needs an exact tool name (or alias).
//!
//! The argument pattern is matched against the tool's primary input:
//!
//! - `bash`: `command`, with **command** semantics. `*` matches any text, spaces and slashes
//!   included, and the pattern must match the whole command: `git *` matches `git push origin`,
//!   not `legit x`. `\*` is a literal star. A pattern that ends in ` *` with no other `*` also
//!   matches without the tail (`ls *` matches `ls`). Claude Code's `prefix:*` matches the
//!   prefix alone or followed by whitespace and anything (`git log:*` matches `git log` and
//!   `git log -p`, not `git logx`).
//! - `read_file`, `write_file`, `edit_file`, `multi_edit`: `file_path`; `glob`, `grep`, `ls`:
//!   `path` (default `.`).
//!   **Path** semantics: the tool's path is made absolute against the project directory and
//!   normalized (`.` and `..` removed, without touching the file system), then matched with a
//!   glob where `*` stays within one path component and `**` crosses them. A relative pattern
//!   (`src/**`, `./src/**`, `**/.env`) is relative to the project directory and never matches a
//!   path outside it; `/abs/**` and Claude Code's `//abs/**` are absolute; `~/x` is under the
//!   home directory. A trailing `/` means everything below (`src/` is `src/**`). `..` is not
//!   allowed in path patterns.
//! - `web_fetch`: `url`. `domain:HOST` matches the URL's host, case-insensitively, where `*`
//!   matches any text (`domain:*.example.com` matches `docs.example.com`, not `example.com`),
//!   as Claude Code's `WebFetch(domain:...)` rules do; any other pattern matches the whole URL
//!   with command semantics (`web_fetch(https://docs.rs/*)`).
//! - any other tool (MCP tools included): the input as compact JSON, with command semantics
//!   (`mcp__db__query(*"table":"users"*)`).
//!
//! Every argument pattern can also be `re:<regex>` (searched in the command, the JSON, or the
//! absolute normalized path) or `!<pattern>` (the negation of the pattern after the `!`).
//!
//! A shell command can chain several commands (`git status && rm -rf x`). So that `bash(git *)`
//! does not approve the `rm`, commands are split at `;`, `&`, `&&`, `|`, `||`, newlines and
//! parentheses (outside quotes): a deny or ask rule matches when it matches the whole command
//! or any piece, and allow rules approve the command only when every piece is matched by some
//! allow rule. A command with `$(...)`, backquotes or `<(...)` is never approved by an allow rule
//! with an argument (a tool-wide rule such as `bash` still approves it). This splitting is
//! lexical and best-effort; a deny rule written as `re:` searches the whole command line.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use globset::GlobMatcher;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::matcher::{Matcher, MatcherError, compile_path_glob};

/// Claude Code's names for the built-in tools, with Mew's names.
const ALIASES: &[(&str, &str)] = &[
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "multi_edit"),
    ("LS", "ls"),
    ("Glob", "glob"),
    ("Grep", "grep"),
    ("Bash", "bash"),
    ("WebFetch", "web_fetch"),
    ("WebSearch", "web_search"),
];

/// Mew's name for a tool written with Claude Code's name (`Bash` is `bash`); other names are
/// returned unchanged.
pub(crate) fn canonical_tool(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, canonical)| canonical)
}

/// What a tool's argument pattern is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgumentKind {
    /// `bash`: the `command` field, command semantics.
    Command,
    /// File tools: a path field, path semantics.
    Path {
        /// The input field that holds the path.
        field: &'static str,
        /// The path used when the field is missing.
        default: Option<&'static str>,
    },
    /// `web_fetch`: the URL in this field, matched by host (`domain:`) or whole.
    Url {
        /// The input field that holds the URL.
        field: &'static str,
    },
    /// Any other tool: the compact JSON of the input, command semantics.
    Json,
}

impl ArgumentKind {
    /// The kind for a tool, by its Mew name.
    pub(crate) fn of(tool: &str) -> Self {
        match tool {
            "bash" => Self::Command,
            "read_file" | "write_file" | "edit_file" | "multi_edit" => Self::Path {
                field: "file_path",
                default: None,
            },
            "glob" | "grep" | "ls" => Self::Path {
                field: "path",
                default: Some("."),
            },
            "web_fetch" => Self::Url { field: "url" },
            _ => Self::Json,
        }
    }
}

/// A rule that cannot be used; the message says why (the caller adds the rule and where it was
/// written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RuleError {
    /// An empty rule.
    #[error("a rule needs a tool name")]
    Empty,
    /// A tool name with characters tools cannot have.
    #[error(
        "`{name}` is not a tool name or pattern (letters, digits, `_` and `-`, \
         optionally ending in `*`)"
    )]
    ToolName {
        /// The tool part as written.
        name: String,
    },
    /// `(` without a closing `)` at the end, or text after it.
    #[error("the argument pattern must be in parentheses at the end: `tool(pattern)`")]
    Parentheses,
    /// `tool()`.
    #[error("the argument pattern in parentheses is empty")]
    EmptyArgument,
    /// `mcp__x__*(...)`.
    #[error("an argument pattern needs an exact tool name, not `{pattern}`")]
    ArgumentNeedsExactTool {
        /// The tool pattern as written.
        pattern: String,
    },
    /// `edit_file(../x)`.
    #[error("`..` is not allowed in a path pattern (`{pattern}`); write an absolute path")]
    ParentInPath {
        /// The path pattern as written.
        pattern: String,
    },
    /// A regex or glob that does not compile.
    #[error(transparent)]
    Matcher(#[from] MatcherError),
}

/// The directories path patterns and relative tool paths are anchored at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirs {
    /// The project directory, absolute: relative patterns and relative tool paths resolve
    /// against it.
    pub(crate) project: PathBuf,
    /// The home directory, for `~/` patterns.
    pub(crate) home: Option<PathBuf>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    text: String,
    tool: ToolPattern,
    argument: Option<ArgumentPattern>,
}

/// Which tools a rule is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ToolPattern {
    /// One tool, by its Mew name.
    Exact(String),
    /// Every tool whose name starts with this (`mcp__github__*`, `*`).
    Prefix(String),
    /// Every tool of an MCP server: `mcp__server` matches `mcp__server__*`.
    Server(String),
}

impl ToolPattern {
    fn matches(&self, tool: &str) -> bool {
        match self {
            Self::Exact(name) => name == tool,
            Self::Prefix(prefix) => tool.starts_with(prefix.as_str()),
            Self::Server(server) => tool
                .strip_prefix(server.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("__")),
        }
    }
}

/// A compiled argument pattern.
#[derive(Debug, Clone)]
enum ArgumentPattern {
    /// Matched against the command, the JSON, or the absolute path as text.
    Text(Matcher),
    /// A path glob, matched against the tool's path relative to `anchor`.
    Path { anchor: Anchor, glob: GlobMatcher },
    /// A host pattern (`domain:`), matched against a URL's host.
    Domain(Matcher),
    /// The inner pattern does not match.
    Not(Box<ArgumentPattern>),
}

/// Where a path pattern starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    /// The file system root: the glob is absolute.
    Root,
    /// The project directory.
    Project,
    /// The home directory.
    Home,
}

impl Rule {
    /// Parses and compiles a rule. Nothing about the machine is needed: relative and `~/`
    /// path patterns are anchored when a call is matched.
    pub(crate) fn parse(text: &str) -> Result<Self, RuleError> {
        let trimmed = text.trim();
        let (tool_text, argument_text) = match trimmed.find('(') {
            Some(open) => {
                let argument = trimmed[open + 1..]
                    .strip_suffix(')')
                    .ok_or(RuleError::Parentheses)?;
                (&trimmed[..open], Some(argument))
            }
            None if trimmed.contains(')') => return Err(RuleError::Parentheses),
            None => (trimmed, None),
        };
        let tool = parse_tool(tool_text)?;
        let argument = match argument_text {
            None => None,
            Some("") => return Err(RuleError::EmptyArgument),
            Some(argument) => {
                let ToolPattern::Exact(name) = &tool else {
                    return Err(RuleError::ArgumentNeedsExactTool {
                        pattern: tool_text.to_owned(),
                    });
                };
                Some(parse_argument(ArgumentKind::of(name), argument)?)
            }
        };
        Ok(Self {
            text: trimmed.to_owned(),
            tool,
            argument,
        })
    }

    /// Whether the rule has a path pattern anchored at the home directory.
    pub(crate) fn needs_home(&self) -> bool {
        self.argument
            .as_ref()
            .is_some_and(ArgumentPattern::needs_home)
    }

    /// Whether the rule names the tool (ignoring any argument pattern).
    pub(crate) fn matches_tool(&self, tool: &str) -> bool {
        self.tool.matches(tool)
    }

    /// Whether the rule applies to every call of the tools it names (no argument pattern).
    pub(crate) fn is_tool_wide(&self) -> bool {
        self.argument.is_none()
    }

    /// Whether the rule matches the call, for deny and ask rules: the tool matches and the
    /// argument pattern (if any) matches the whole subject or any piece of a command.
    pub(crate) fn matches(&self, call: &Call, dirs: &Dirs) -> bool {
        if !self.matches_tool(&call.tool) {
            return false;
        }
        let Some(argument) = &self.argument else {
            return true;
        };
        match &call.subject {
            Subject::Command { whole, pieces, .. } => {
                argument.matches_text(whole)
                    || pieces.iter().any(|piece| argument.matches_text(piece))
            }
            Subject::Json(json) => argument.matches_text(json),
            Subject::Path(path) => argument.matches_path(path, dirs),
            Subject::Url { url, host } => argument.matches_url(url, host),
        }
    }

    /// Whether the rule's argument pattern matches one piece of a command (for allow rules);
    /// false for tool-wide rules and other tools.
    pub(crate) fn matches_piece(&self, tool: &str, piece: &str) -> bool {
        self.matches_tool(tool)
            && self
                .argument
                .as_ref()
                .is_some_and(|argument| argument.matches_text(piece))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Two rules are the same rule when they are written the same (their compiled patterns follow
/// from the text).
impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// A rule is written, and shown (`mew config show`), as its text.
impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// A rule is read from its text, and compiled then: a bad rule is an error of the file that
/// holds it.
impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Rule::parse(&text)
            .map_err(|error| serde::de::Error::custom(format!("bad rule `{text}`: {error}")))
    }
}

fn parse_tool(text: &str) -> Result<ToolPattern, RuleError> {
    if text.is_empty() {
        return Err(RuleError::Empty);
    }
    let (name, wildcard) = match text.strip_suffix('*') {
        Some(prefix) => (prefix, true),
        None => (text, false),
    };
    let valid = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid || (!wildcard && name.is_empty()) {
        return Err(RuleError::ToolName {
            name: text.to_owned(),
        });
    }
    if wildcard {
        return Ok(ToolPattern::Prefix(name.to_owned()));
    }
    if let Some(rest) = name.strip_prefix("mcp__")
        && !rest.is_empty()
        && !rest.contains("__")
    {
        return Ok(ToolPattern::Server(name.to_owned()));
    }
    Ok(ToolPattern::Exact(canonical_tool(name).to_owned()))
}

fn parse_argument(kind: ArgumentKind, text: &str) -> Result<ArgumentPattern, RuleError> {
    if let Some(inner) = text.strip_prefix('!') {
        if inner.is_empty() {
            return Err(MatcherError::EmptyNot.into());
        }
        return Ok(ArgumentPattern::Not(Box::new(parse_argument(kind, inner)?)));
    }
    if let Some(regex) = text.strip_prefix("re:") {
        return Ok(ArgumentPattern::Text(Matcher::regex(regex)?));
    }
    match kind {
        ArgumentKind::Command | ArgumentKind::Json => {
            Ok(ArgumentPattern::Text(command_pattern(text)?))
        }
        ArgumentKind::Path { .. } => path_pattern(text.strip_prefix("glob:").unwrap_or(text)),
        ArgumentKind::Url { .. } => match text.strip_prefix("domain:") {
            Some(domain) => {
                let (host, _) = wildcard_regex(&domain.trim().to_ascii_lowercase());
                Ok(ArgumentPattern::Domain(Matcher::regex(&format!(
                    r"\A{host}\z"
                ))?))
            }
            None => Ok(ArgumentPattern::Text(command_pattern(text)?)),
        },
    }
}

/// Compiles a command pattern (`git *`, `npm run test:*`) into an anchored regex.
fn command_pattern(text: &str) -> Result<Matcher, RuleError> {
    let regex = if let Some(prefix) = text.strip_suffix(":*") {
        format!(r"(?s)\A{}(?:\s.*)?\z", wildcard_regex(prefix).0)
    } else if let Some(head) = text.strip_suffix(" *")
        && let (head, 0) = wildcard_regex(head)
    {
        format!(r"(?s)\A{head}(?: .*)?\z")
    } else {
        format!(r"(?s)\A{}\z", wildcard_regex(text).0)
    };
    Ok(Matcher::regex(&regex)?)
}

/// The regex for a wildcard text: `*` is `.*`, `\*` a literal star, `\\` a literal backslash,
/// everything else literal. Also returns the number of wildcards.
fn wildcard_regex(text: &str) -> (String, usize) {
    let mut regex = String::new();
    let mut wildcards = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some('*' | '\\')) => {
                if let Some(escaped) = chars.next() {
                    regex.push_str(&regex::escape(&escaped.to_string()));
                }
            }
            '*' => {
                wildcards += 1;
                regex.push_str(".*");
            }
            _ => regex.push_str(&regex::escape(&c.to_string())),
        }
    }
    (regex, wildcards)
}

/// Compiles a path pattern, anchored at the root, the project or the home directory.
fn path_pattern(text: &str) -> Result<ArgumentPattern, RuleError> {
    let (anchor, glob) = if let Some(rest) = text.strip_prefix("//") {
        (Anchor::Root, format!("/{rest}"))
    } else if text.starts_with('/') {
        (Anchor::Root, text.to_owned())
    } else if text == "~" {
        (Anchor::Home, String::new())
    } else if let Some(rest) = text.strip_prefix("~/") {
        (Anchor::Home, rest.to_owned())
    } else if text == "." {
        (Anchor::Project, String::new())
    } else {
        (
            Anchor::Project,
            text.strip_prefix("./").unwrap_or(text).to_owned(),
        )
    };
    if glob.split('/').any(|component| component == "..") {
        return Err(RuleError::ParentInPath {
            pattern: text.to_owned(),
        });
    }
    let glob = match glob.strip_suffix('/') {
        Some(directory) if !directory.is_empty() => format!("{directory}/**"),
        _ => glob,
    };
    Ok(ArgumentPattern::Path {
        anchor,
        glob: compile_path_glob(&glob)?,
    })
}

impl ArgumentPattern {
    fn matches_text(&self, text: &str) -> bool {
        match self {
            Self::Text(matcher) => matcher.is_match(text),
            // Path and host patterns belong to the tools whose subjects are paths and URLs.
            Self::Path { .. } | Self::Domain(_) => false,
            Self::Not(inner) => !inner.matches_text(text),
        }
    }

    /// Matches a URL (`url`, whose host is `host`, lowercase): a host pattern the host, any
    /// other the whole URL.
    fn matches_url(&self, url: &str, host: &str) -> bool {
        match self {
            Self::Domain(matcher) => matcher.is_match(host),
            Self::Text(matcher) => matcher.is_match(url),
            Self::Path { .. } => false,
            Self::Not(inner) => !inner.matches_url(url, host),
        }
    }

    fn matches_path(&self, path: &Path, dirs: &Dirs) -> bool {
        match self {
            Self::Text(matcher) => matcher.is_match(&path.to_string_lossy()),
            Self::Path { anchor, glob } => {
                let base = match anchor {
                    Anchor::Root => return glob.is_match(path),
                    Anchor::Project => Some(dirs.project.as_path()),
                    Anchor::Home => dirs.home.as_deref(),
                };
                base.and_then(|base| path.strip_prefix(base).ok())
                    .is_some_and(|relative| glob.is_match(relative))
            }
            Self::Domain(_) => false,
            Self::Not(inner) => !inner.matches_path(path, dirs),
        }
    }

    fn needs_home(&self) -> bool {
        match self {
            Self::Text(_) | Self::Domain(_) => false,
            Self::Path { anchor, .. } => *anchor == Anchor::Home,
            Self::Not(inner) => inner.needs_home(),
        }
    }
}

/// A tool call as the rules see it: the tool's Mew name and what argument patterns match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The tool, by its Mew name.
    pub(crate) tool: String,
    /// What argument patterns are matched against.
    pub(crate) subject: Subject,
}

/// What a call's argument patterns are matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A shell command line.
    Command {
        /// The whole command, trimmed.
        whole: String,
        /// Its simple commands, trimmed, in order (see [`split_command`]).
        pieces: Vec<String>,
        /// True when it has command or process substitutions.
        opaque: bool,
    },
    /// A path, absolute and normalized.
    Path(PathBuf),
    /// A URL, trimmed, and its host in lowercase (empty when it has none).
    Url {
        /// The URL.
        url: String,
        /// Its host.
        host: String,
    },
    /// The compact JSON of the input.
    Json(String),
}

impl Call {
    /// The call of `tool` (a Mew name) with `input`. A missing or non-string `command` is
    /// matched as the compact JSON of the input; a missing path as the empty string, which
    /// resolves to the project directory.
    pub(crate) fn new(tool: &str, input: &Value, dirs: &Dirs) -> Self {
        let subject = match ArgumentKind::of(tool) {
            ArgumentKind::Command => {
                let whole = match input.get("command").and_then(Value::as_str) {
                    Some(command) => command.trim().to_owned(),
                    None => input.to_string(),
                };
                let (pieces, opaque) = split_command(&whole);
                Subject::Command {
                    whole,
                    pieces,
                    opaque,
                }
            }
            ArgumentKind::Path { field, default } => {
                let path = input
                    .get(field)
                    .and_then(Value::as_str)
                    .or(default)
                    .unwrap_or("");
                Subject::Path(resolve_path(&dirs.project, Path::new(path)))
            }
            ArgumentKind::Url { field } => {
                let url = input
                    .get(field)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                let host = reqwest::Url::parse(&url)
                    .ok()
                    .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
                    .unwrap_or_default();
                Subject::Url { url, host }
            }
            ArgumentKind::Json => Subject::Json(input.to_string()),
        };
        Self {
            tool: tool.to_owned(),
            subject,
        }
    }
}

/// A rule from Claude Code's settings file in Mew's spelling. Claude Code anchors a file-tool
/// pattern `/path` at the project where Mew reads it as absolute, so `Read(/src/**)` becomes
/// `Read(src/**)` (and `Read(/)` becomes `Read(.)`); `//path` is absolute in both and every
/// other rule is returned unchanged.
pub(crate) fn from_claude_settings(text: &str) -> String {
    let trimmed = text.trim();
    if let Some(open) = trimmed.find('(')
        && let Some(argument) = trimmed[open + 1..].strip_suffix(')')
        && let ArgumentKind::Path { .. } = ArgumentKind::of(canonical_tool(&trimmed[..open]))
        && let Some(rest) = argument.strip_prefix('/')
        && !rest.starts_with('/')
    {
        let rest = if rest.is_empty() { "." } else { rest };
        return format!("{}({rest})", &trimmed[..open]);
    }
    text.to_owned()
}

/// `path` made absolute against `base` and normalized lexically: `.` dropped, `..` removes the
/// component before it (never going above the root). Symbolic links are not followed.
pub(crate) fn resolve_path(base: &Path, path: &Path) -> PathBuf {
    let joined = base.join(path);
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// Splits a shell command line into its simple commands, lexically: at `;`, `&`, `&&`, `|`,
/// `||`, `|&`, newlines, `(` and `)` outside quotes, and around command substitutions (`$(`,
/// backquotes) and process substitutions (`<(`, `>(`). Redirections such as `2>&1` and `&>`
/// do not split. Returns the non-empty pieces, trimmed, and whether there was a substitution.
pub(crate) fn split_command(command: &str) -> (Vec<String>, bool) {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut opaque = false;
    let mut in_single = false;
    let mut in_double = false;
    let mut substitutions_in_double = 0usize;
    let mut chars = command.chars().peekable();
    let mut cut = |current: &mut String| {
        let piece = current.trim();
        if !piece.is_empty() {
            pieces.push(piece.to_owned());
        }
        current.clear();
    };
    while let Some(c) = chars.next() {
        if in_single {
            current.push(c);
            in_single = c != '\'';
            continue;
        }
        match c {
            '\\' => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '\'' if !in_double => {
                in_single = true;
                current.push(c);
            }
            '"' => {
                in_double = !in_double;
                current.push(c);
            }
            '`' => {
                opaque = true;
                cut(&mut current);
            }
            // Inside double quotes only `$(` substitutes; `<(` and `>(` are text there.
            '$' | '<' | '>' if chars.peek() == Some(&'(') && (c == '$' || !in_double) => {
                chars.next();
                opaque = true;
                if in_double {
                    substitutions_in_double += 1;
                }
                cut(&mut current);
            }
            ')' if in_double && substitutions_in_double > 0 => {
                substitutions_in_double -= 1;
                cut(&mut current);
            }
            _ if in_double => current.push(c),
            ';' | '\n' | '(' | ')' => cut(&mut current),
            '|' => {
                if matches!(chars.peek(), Some('|' | '&')) {
                    chars.next();
                }
                cut(&mut current);
            }
            '&' if current.ends_with(['>', '<']) => current.push(c),
            '&' if chars.peek() == Some(&'>') => current.push(c),
            '&' => {
                if chars.peek() == Some(&'&') {
                    chars.next();
                }
                cut(&mut current);
            }
            _ => current.push(c),
        }
    }
    cut(&mut current);
    (pieces, opaque)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dirs() -> Dirs {
        Dirs {
            project: PathBuf::from("/srv/project"),
            home: Some(PathBuf::from("/home/me")),
        }
    }

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap()
    }

    fn matches(rule_text: &str, tool: &str, input: Value) -> bool {
        let dirs = dirs();
        rule(rule_text).matches(&Call::new(tool, &input, &dirs), &dirs)
    }

    fn bash(rule_text: &str, command: &str) -> bool {
        matches(rule_text, "bash", json!({ "command": command }))
    }

    fn edit(rule_text: &str, path: &str) -> bool {
        matches(rule_text, "edit_file", json!({ "file_path": path }))
    }

    #[test]
    fn tool_patterns_exact_alias_prefix_and_server() {
        assert_eq!(
            rule("read_file").tool,
            ToolPattern::Exact("read_file".into())
        );
        assert_eq!(rule("Read").tool, ToolPattern::Exact("read_file".into()));
        assert_eq!(rule("Write").tool, ToolPattern::Exact("write_file".into()));
        assert_eq!(rule("Edit").tool, ToolPattern::Exact("edit_file".into()));
        assert_eq!(
            rule("MultiEdit(src/**)").tool,
            ToolPattern::Exact("multi_edit".into())
        );
        assert_eq!(rule("LS").tool, ToolPattern::Exact("ls".into()));
        assert_eq!(rule("Glob").tool, ToolPattern::Exact("glob".into()));
        assert_eq!(rule("Grep").tool, ToolPattern::Exact("grep".into()));
        assert_eq!(rule("Bash(ls)").tool, ToolPattern::Exact("bash".into()));
        assert_eq!(rule("  bash  ").to_string(), "bash");

        let server = rule("mcp__github");
        assert_eq!(server.tool, ToolPattern::Server("mcp__github".into()));
        assert!(server.matches_tool("mcp__github__create_issue"));
        assert!(!server.matches_tool("mcp__githubx__create_issue"));
        assert!(!server.matches_tool("read_file"));

        let prefix = rule("mcp__github__*");
        assert_eq!(prefix.tool, ToolPattern::Prefix("mcp__github__".into()));
        assert!(prefix.matches_tool("mcp__github__list_prs"));
        assert!(!prefix.matches_tool("mcp__gitlab__list_prs"));
        assert!(rule("*").matches_tool("bash"));

        let one = rule("mcp__github__create_issue");
        assert!(one.matches_tool("mcp__github__create_issue"));
        assert!(!one.matches_tool("mcp__github__list_prs"));
        // Aliases are exact: lower-case `read` is a tool of its own.
        assert!(!rule("read").matches_tool("read_file"));
        assert!(rule("Read").matches(
            &Call::new("read_file", &json!({"file_path": "/etc/passwd"}), &dirs()),
            &dirs()
        ));
    }

    #[test]
    fn bad_rules_say_why() {
        assert_eq!(Rule::parse("").unwrap_err(), RuleError::Empty);
        assert_eq!(Rule::parse("(x)").unwrap_err(), RuleError::Empty);
        assert_eq!(Rule::parse("bash(git").unwrap_err(), RuleError::Parentheses);
        assert_eq!(
            Rule::parse("bash(x) y").unwrap_err(),
            RuleError::Parentheses
        );
        assert_eq!(Rule::parse("bash)").unwrap_err(), RuleError::Parentheses);
        assert_eq!(Rule::parse("bash()").unwrap_err(), RuleError::EmptyArgument);
        assert_eq!(
            Rule::parse("read file").unwrap_err(),
            RuleError::ToolName {
                name: "read file".into()
            }
        );
        assert_eq!(
            Rule::parse("mcp__*__x").unwrap_err(),
            RuleError::ToolName {
                name: "mcp__*__x".into()
            }
        );
        assert_eq!(
            Rule::parse("mcp__github__*(x)").unwrap_err(),
            RuleError::ArgumentNeedsExactTool {
                pattern: "mcp__github__*".into()
            }
        );
        assert_eq!(
            Rule::parse("Edit(../other/**)").unwrap_err(),
            RuleError::ParentInPath {
                pattern: "../other/**".into()
            }
        );
        let error = Rule::parse("bash(re:(x)").unwrap_err();
        assert!(error.to_string().starts_with("bad regex `(x`: "), "{error}");
        let error = Rule::parse("edit_file(src/[a)").unwrap_err();
        assert!(
            error.to_string().starts_with("bad glob `src/[a`: "),
            "{error}"
        );
        assert_eq!(
            Rule::parse("bash(!)").unwrap_err(),
            RuleError::Matcher(MatcherError::EmptyNot)
        );
    }

    #[test]
    fn command_star_matches_anything_including_spaces_and_slashes() {
        assert!(bash("bash(git *)", "git push origin main"));
        assert!(bash("bash(git *)", "git checkout src/lib.rs"));
        assert!(!bash("bash(git *)", "legit push"));
        assert!(!bash("bash(git *)", "gitk"));
        // A single trailing ` *` is optional.
        assert!(bash("bash(git *)", "git"));
        assert!(bash("bash(* --version)", "cargo --version"));
        assert!(!bash("bash(* --version)", "cargo --help"));
        assert!(bash("bash(npm * --save)", "npm install left-pad --save"));
        assert!(!bash("bash(npm * --save)", "npm install left-pad"));
        // No wildcard: the whole command, exactly.
        assert!(bash("Bash(npm run build)", "npm run build"));
        assert!(!bash("Bash(npm run build)", "npm run build --watch"));
        // An escaped star is literal.
        assert!(bash(r"bash(echo \*)", "echo *"));
        assert!(!bash(r"bash(echo \*)", "echo hi"));
        // Regex characters in the pattern are literal.
        assert!(bash("bash(ls a.b)", "ls a.b"));
        assert!(!bash("bash(ls a.b)", "ls axb"));
    }

    #[test]
    fn claude_colon_star_is_a_prefix_at_a_word_boundary() {
        assert!(bash("Bash(npm run test:*)", "npm run test"));
        assert!(bash("Bash(npm run test:*)", "npm run test -- --watch"));
        assert!(!bash("Bash(npm run test:*)", "npm run testing"));
        assert!(bash("Bash(git log:*)", "git log --oneline -5"));
        assert!(!bash("Bash(git log:*)", "git logs"));
        assert!(!bash("Bash(git log:*)", "git push"));
    }

    #[test]
    fn deny_style_matching_sees_every_piece_of_a_compound_command() {
        assert!(bash("bash(rm *)", "git status && rm -rf target"));
        assert!(bash("bash(rm *)", "ls; rm x"));
        assert!(bash("bash(rm *)", "echo $(rm -rf /)"));
        assert!(bash("bash(rm *)", "cat a | rm b"));
        assert!(!bash("bash(rm *)", "echo 'a; rm b'"));
        assert!(bash("bash(re:rm -rf)", "echo \"$(rm -rf /tmp/x)\""));
        assert!(!bash("bash(rm *)", "git rm --cached x"));
    }

    #[test]
    fn commands_split_outside_quotes_and_redirections() {
        let split = |text: &str| split_command(text);
        assert_eq!(
            split("git add . && git commit -m 'a; b' || echo \"x | y\""),
            (
                vec![
                    "git add .".to_owned(),
                    "git commit -m 'a; b'".to_owned(),
                    "echo \"x | y\"".to_owned()
                ],
                false
            )
        );
        assert_eq!(
            split("cargo test 2>&1 | tee log &> out & wait"),
            (
                vec![
                    "cargo test 2>&1".to_owned(),
                    "tee log &> out".to_owned(),
                    "wait".to_owned()
                ],
                false
            )
        );
        assert_eq!(
            split("(cd a; make)\nls"),
            (
                vec!["cd a".to_owned(), "make".to_owned(), "ls".to_owned()],
                false
            )
        );
        assert_eq!(
            split("echo `whoami` $(id) <(ls)"),
            (
                vec![
                    "echo".to_owned(),
                    "whoami".to_owned(),
                    "id".to_owned(),
                    "ls".to_owned()
                ],
                true
            )
        );
        assert_eq!(split(r"echo a\;b"), (vec![r"echo a\;b".to_owned()], false));
        assert_eq!(split("  "), (vec![], false));
    }

    #[test]
    fn path_patterns_are_relative_to_the_project_with_path_globs() {
        assert!(edit("edit_file(src/**)", "src/lib.rs"));
        assert!(edit("edit_file(src/**)", "/srv/project/src/a/b.rs"));
        assert!(edit("edit_file(src/**)", "./src/../src/lib.rs"));
        assert!(!edit("edit_file(src/**)", "src/../Cargo.toml"));
        assert!(!edit("edit_file(src/**)", "/elsewhere/src/lib.rs"));
        // `*` stays in one component, `**` crosses them.
        assert!(edit("Edit(src/*.rs)", "src/lib.rs"));
        assert!(!edit("Edit(src/*.rs)", "src/permission/mod.rs"));
        assert!(edit("Edit(**/.env)", ".env"));
        assert!(edit("Edit(**/.env)", "config/dev/.env"));
        assert!(!edit("Edit(.env)", "config/.env"));
        assert!(edit("Edit(./Cargo.toml)", "Cargo.toml"));
        // A trailing slash means everything below.
        assert!(edit("Edit(docs/)", "docs/a/b.md"));
        // Absolute, Claude's `//` absolute, and home.
        assert!(edit("Edit(/etc/**)", "/etc/hosts"));
        assert!(edit("Edit(//etc/**)", "/etc/ssh/sshd_config"));
        assert!(!edit("Edit(/etc/**)", "etc/hosts"));
        assert!(edit("Edit(~/.ssh/**)", "/home/me/.ssh/id_ed25519"));
        assert!(!edit("Edit(~/.ssh/**)", "/home/you/.ssh/id_ed25519"));
        assert!(rule("Read(~/.ssh/**)").needs_home());
        assert!(!rule("Read(src/**)").needs_home());
    }

    #[test]
    fn path_tools_take_regex_and_not_forms() {
        assert!(edit(r"edit_file(re:\.lock$)", "Cargo.lock"));
        assert!(!edit(r"edit_file(re:\.lock$)", "Cargo.toml"));
        assert!(edit("edit_file(re:^/srv/project/src/)", "src/x.rs"));
        assert!(edit("edit_file(!src/**)", "Cargo.toml"));
        assert!(!edit("edit_file(!src/**)", "src/lib.rs"));
        assert!(edit("edit_file(glob:src/*)", "src/lib.rs"));
        assert!(bash("bash(!git *)", "rm x"));
        assert!(!bash("bash(!git *)", "git status"));
    }

    #[test]
    fn glob_and_grep_match_their_path_with_a_default_of_the_project() {
        assert!(matches(
            "Grep(src/**)",
            "grep",
            json!({"pattern": "x", "path": "src/a"})
        ));
        assert!(!matches("Grep(src/**)", "grep", json!({"pattern": "x"})));
        assert!(matches("glob(.)", "glob", json!({"pattern": "*.rs"})));
        assert!(matches(
            "glob(/srv/project)",
            "glob",
            json!({"pattern": "*.rs"})
        ));
    }

    #[test]
    fn other_tools_match_compact_json_with_command_semantics() {
        let input = json!({"table": "users", "limit": 5});
        assert_eq!(
            Call::new("mcp__db__query", &input, &dirs()).subject,
            Subject::Json(r#"{"limit":5,"table":"users"}"#.to_owned())
        );
        assert!(matches(
            r#"mcp__db__query(*"table":"users"*)"#,
            "mcp__db__query",
            input.clone()
        ));
        assert!(!matches(
            r#"mcp__db__query(*"table":"orders"*)"#,
            "mcp__db__query",
            input.clone()
        ));
        assert!(matches("mcp__db__query(re:users)", "mcp__db__query", input));
    }

    #[test]
    fn web_fetch_rules_match_the_host_by_domain_or_the_whole_url() {
        let fetch =
            |rule_text: &str, url: &str| matches(rule_text, "web_fetch", json!({ "url": url }));
        assert!(fetch("WebFetch(domain:docs.rs)", "https://docs.rs/tokio"));
        assert!(fetch("WebFetch(domain:DOCS.rs)", "https://Docs.RS:443/x"));
        assert!(!fetch(
            "WebFetch(domain:docs.rs)",
            "https://docs.rs.evil.example/"
        ));
        assert!(!fetch(
            "WebFetch(domain:docs.rs)",
            "https://evil.example/?docs.rs"
        ));
        assert!(fetch(
            "web_fetch(domain:*.example.com)",
            "http://a.b.example.com/"
        ));
        assert!(!fetch(
            "web_fetch(domain:*.example.com)",
            "http://example.com/"
        ));
        assert!(fetch("WebFetch(domain:*)", "http://anything/"));
        assert!(fetch(
            "web_fetch(https://docs.rs/*)",
            "https://docs.rs/serde"
        ));
        assert!(!fetch(
            "web_fetch(https://docs.rs/*)",
            "http://docs.rs/serde"
        ));
        assert!(fetch("web_fetch(!domain:docs.rs)", "https://crates.io/"));
        assert!(fetch("web_fetch(re:^https://)", "https://crates.io/"));
        assert!(!fetch("WebFetch(domain:docs.rs)", "not a url"));
        // A host pattern names no other tool's subject.
        assert!(!matches(
            "mcp__x__y(domain:docs.rs)",
            "mcp__x__y",
            json!({"url": "https://docs.rs"})
        ));
        assert_eq!(
            rule("WebSearch").tool,
            ToolPattern::Exact("web_search".into())
        );
    }

    #[test]
    fn claude_settings_rules_anchor_single_slash_paths_at_the_project() {
        assert_eq!(from_claude_settings("Edit(/src/**)"), "Edit(src/**)");
        assert_eq!(from_claude_settings(" Read(/) "), "Read(.)");
        assert_eq!(from_claude_settings("Read(//etc/**)"), "Read(//etc/**)");
        assert_eq!(from_claude_settings("Read(~/.ssh/**)"), "Read(~/.ssh/**)");
        assert_eq!(from_claude_settings("Bash(/bin/ls:*)"), "Bash(/bin/ls:*)");
        assert_eq!(from_claude_settings("WebFetch"), "WebFetch");
    }

    #[test]
    fn calls_resolve_paths_and_split_commands() {
        let call = Call::new("read_file", &json!({"file_path": "a/./b/../c.rs"}), &dirs());
        assert_eq!(call.subject, Subject::Path("/srv/project/a/c.rs".into()));
        let call = Call::new("edit_file", &json!({}), &dirs());
        assert_eq!(call.subject, Subject::Path("/srv/project".into()));
        let call = Call::new("bash", &json!({"command": " ls && pwd \n"}), &dirs());
        assert_eq!(
            call.subject,
            Subject::Command {
                whole: "ls && pwd".into(),
                pieces: vec!["ls".into(), "pwd".into()],
                opaque: false,
            }
        );
        assert_eq!(
            resolve_path(Path::new("/a"), Path::new("../../..")),
            PathBuf::from("/")
        );
        assert_eq!(canonical_tool("Bash"), "bash");
        assert_eq!(canonical_tool("mcp__x__y"), "mcp__x__y");
    }
}
