//! Parsing `SKILL.md`, and Claude Code's custom commands (`.claude/commands/NAME.md`): YAML
//! frontmatter (the settings) and a Markdown body (the instructions).
//!
//! # Fields
//!
//! Both Mew's fields and those of the open Agent Skills format are read. Keys are matched
//! ignoring case, `-` and `_`, so `allowed-tools`, `allowed_tools` and `allowedTools` are one
//! field; when two spellings of one field are given, the first wins and the other is a warning.
//!
//! | Field           | Type                                  | When absent or unusable           |
//! |-----------------|---------------------------------------|-----------------------------------|
//! | `name`          | string, see [the name rule](#name)    | the directory name, with a warning|
//! | `description`   | string, at most 1024 characters       | the body's first paragraph, with a warning; cut longer |
//! | `allowed-tools` | list of strings, or one string split on commas and spaces outside parentheses | no list |
//! | `mode`          | `inline` or `fork`                    | `inline` (a warning if unusable)  |
//! | `fork-context`  | `none`, `recent` or `full`            | `none` (a warning if unusable)    |
//! | `model`         | string                                | none                              |
//! | `argument-hint` | string (or a flow list, shown as written) | none                          |
//! | `disable-model-invocation` | boolean                    | `false`                           |
//! | `license`       | string                                | none                              |
//! | `compatibility` | string (at most 500 characters)       | none; longer kept, with a warning |
//! | `metadata`      | mapping                               | empty                             |
//!
//! Claude Code's `context: fork` means `mode: fork` when `mode` is not given; its
//! `argument-hint` is shown to the model beside the name, and `disable-model-invocation: true`
//! keeps a skill from the model (only a user's `/name` runs it). Its other skill keys
//! (`user-invocable`, `agent`, `hooks`, `version`, `when_to_use`) are kept in
//! [`SkillMeta::extra`] silently. Three more change what
//! Claude Code does and Mew does not do, so each is kept with a warning that says what is not
//! honoured: `effort` (the model's reasoning effort while the skill is active: Mew runs the
//! role's model settings), `paths` (file patterns that limit when Claude Code offers the skill
//! on its own: Mew lists it always) and `shell` (the shell of Claude Code's `` !`command` ``
//! preprocessing, which Mew does not run: such text reaches the model as written). Any other
//! unknown key is kept there too, with a warning, since it is most likely a misspelt field.
//! Values of the wrong type are ignored with a warning, except for `name`, which is required
//! to be a string.
//!
//! # Name
//!
//! The name is the frontmatter's `name`, trimmed and lowercased (a warning says so when
//! lowercasing changed it), or, when it is absent or empty, the skill's directory name (with a
//! warning). It must then follow the open format's rule: 1 to 64 characters of `a-z`, `0-9` and
//! `-`, neither starting nor ending with `-` and without `--`. Anything else (spaces, `/`, `_`,
//! dots...). A written name that breaks it is a display name (Claude Code's own plugins write
//! `name: Agent Development`, and Claude Code loads them): the directory name is used
//! instead, with a warning, when it follows the rule; otherwise the skill is unusable. A
//! valid name that differs from the directory name is a warning: the open format requires
//! them to match, and the frontmatter's name is used.
//!
//! # Description
//!
//! Without a `description`, Claude Code describes the skill by the first paragraph of its
//! body; so does Mew (headings skipped, the paragraph on one line), with a warning.
//!
//! # Commands
//!
//! [`parse_command`] reads a Claude Code command file with the same fields. A command is named
//! by its path, not by a `name` (one is ignored with a warning), and a file without
//! frontmatter is simply all body. Without a `description`, Claude Code describes a command by
//! the first line of its body, and so does Mew. Two things of Claude Code's command bodies are
//! not honoured, each with a warning that names it: `` !`command` `` lines, which Claude Code
//! runs before the model reads the command (Mew does not run them: the model sees them as
//! written), and `@path` references, which Claude Code replaces with the file's contents (Mew
//! leaves them as written: the model can read the file). A `model` is honoured by a command
//! that runs in a fork (`context: fork`); an inline command runs with the role's model, with a
//! warning. `allowed-tools` asks the model to prefer those tools (and limits a fork to them)
//! but, unlike Claude Code, does not let their calls skip the permission rules, with a
//! warning: a file of the project never grants itself permissions (project hooks need
//! `mew hooks trust` for the same reason).
//!
//! # Frontmatter
//!
//! Split by [`mew_cards::split_frontmatter`], after skipping blank lines before the opening
//! `---` (a BOM is skipped too). A file that does not start with `---` has no frontmatter: the
//! whole file is the body and the name comes from the directory, with a warning. An opening
//! `---` without a closing one is an error. A line `---` inside a YAML block scalar is always
//! indented (block scalar content is), so it never closes the frontmatter. The body is trimmed,
//! with CRLF turned into LF; it may be empty.

use std::fmt;

use mew_cards::{FrontmatterError, split_frontmatter};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

/// Longest accepted name, in characters (the open format's limit).
pub(crate) const MAX_NAME_LEN: usize = 64;

/// Longest description kept, in characters; longer ones are cut.
pub(crate) const MAX_DESCRIPTION_LEN: usize = 1024;

/// Longest `compatibility` the open format allows, in characters.
const MAX_COMPATIBILITY_LEN: usize = 500;

/// Frontmatter keys read by this parser, normalized (see [`normalize_key`]), with the spelling
/// used in messages.
const KNOWN_FIELDS: [(&str, &str); 12] = [
    ("name", "name"),
    ("description", "description"),
    ("allowedtools", "allowed-tools"),
    ("mode", "mode"),
    ("forkcontext", "fork-context"),
    ("model", "model"),
    ("license", "license"),
    ("compatibility", "compatibility"),
    ("metadata", "metadata"),
    ("context", "context"),
    ("argumenthint", "argument-hint"),
    ("disablemodelinvocation", "disable-model-invocation"),
];

/// Claude Code's skill keys that Mew does not use, normalized: kept in `extra` without a warning.
const TOLERATED_FIELDS: [&str; 5] = ["userinvocable", "agent", "hooks", "version", "whentouse"];

/// Claude Code's skill keys that change what it does, normalized, with what Mew does not do
/// about them (the warning's text).
const UNHONOURED_FIELDS: [(&str, &str); 3] = [
    (
        "effort",
        "effort is not honoured: the skill runs with the role's model settings",
    ),
    (
        "paths",
        "paths is not honoured: the skill is offered whatever files the task works on",
    ),
    (
        "shell",
        "shell is not honoured: Mew does not run a skill's !`command` lines; they reach the \
         model as written",
    ),
];

/// How an activated skill runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SkillMode {
    /// Its instructions join the current conversation.
    #[default]
    Inline,
    /// It runs as a sub-agent with its own conversation.
    Fork,
}

impl SkillMode {
    /// The name used in `SKILL.md`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Fork => "fork",
        }
    }
}

impl fmt::Display for SkillMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much of the parent conversation a forked skill starts with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ForkContext {
    /// Only the skill's instructions.
    #[default]
    None,
    /// The recent part of the parent conversation.
    Recent,
    /// The whole parent conversation.
    Full,
}

impl ForkContext {
    /// The name used in `SKILL.md`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Recent => "recent",
            Self::Full => "full",
        }
    }
}

impl fmt::Display for ForkContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A skill's settings, from its frontmatter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SkillMeta {
    /// The name: lowercase, checked by [`is_valid_skill_name`].
    pub(crate) name: String,
    /// When to use the skill, for the model (trimmed, may be empty).
    pub(crate) description: String,
    /// Tools the skill is meant to use; empty means no preference.
    pub(crate) allowed_tools: Vec<String>,
    /// How it runs.
    pub(crate) mode: SkillMode,
    /// What a fork starts with.
    pub(crate) fork_context: ForkContext,
    /// The model a fork runs with, as written.
    pub(crate) model: Option<String>,
    /// What arguments it takes, as Claude Code's `argument-hint` shows them (`[issue-number]`).
    pub(crate) argument_hint: Option<String>,
    /// Claude Code's `disable-model-invocation`: only a user's `/name` runs it; the model is
    /// not told of it and cannot load it.
    pub(crate) disable_model_invocation: bool,
    /// The open format's `license`.
    pub(crate) license: Option<String>,
    /// The open format's `compatibility`.
    pub(crate) compatibility: Option<String>,
    /// The open format's `metadata` mapping, as JSON.
    pub(crate) metadata: serde_json::Map<String, serde_json::Value>,
    /// Keys not read by Mew, as written, with their values as JSON.
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
}

/// A parsed `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedSkill {
    /// The settings.
    pub(crate) meta: SkillMeta,
    /// The instructions: the body, trimmed, CRLF turned into LF.
    pub(crate) body: String,
    /// False when the file has no frontmatter at all.
    pub(crate) has_frontmatter: bool,
    /// True when the name was taken from the directory, not from `name`.
    pub(crate) name_from_dir: bool,
    /// The written `name` when it is a display name (breaks the name rule) and the directory
    /// name was used instead.
    pub(crate) display_name: Option<String>,
    /// Values replaced by defaults or ignored, one sentence each.
    pub(crate) warnings: Vec<String>,
}

/// Why a `SKILL.md` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    /// The opening `---` has no closing one.
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
    /// The frontmatter is not valid YAML; `line` counts in the whole file, from 1.
    #[error("invalid YAML in frontmatter: {message}")]
    Yaml {
        /// The YAML parser's message.
        message: String,
        /// Line of the error in the file.
        line: Option<usize>,
    },
    /// The frontmatter is YAML but not a mapping.
    #[error("frontmatter must be a YAML mapping of keys to values, got {0}")]
    NotAMapping(String),
    /// No `name`, and no directory name to use instead.
    #[error("name is required")]
    MissingName,
    /// `name` is not a string.
    #[error("name must be a string, got {0}")]
    NameNotAString(String),
    /// The name breaks the rule.
    #[error(
        "name {0:?} is invalid: use 1 to 64 lowercase letters, digits and single hyphens, \
         not starting or ending with a hyphen"
    )]
    InvalidName(String),
}

/// True when `name` follows the rule: 1 to 64 of `a-z`, `0-9`, `-`, no leading, trailing or
/// doubled `-`.
pub(crate) fn is_valid_skill_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Longest command name, in characters, namespaces included.
pub(crate) const MAX_COMMAND_NAME_LEN: usize = 128;

/// True when `name` can name a command: `:`-separated parts (its directories, then its file's
/// name without `.md`), each of `a-z`, `0-9`, `-`, `_` and `.`, not starting with `.`; at most
/// [`MAX_COMMAND_NAME_LEN`] characters. Every skill name is one.
pub(crate) fn is_valid_command_name(name: &str) -> bool {
    name.len() <= MAX_COMMAND_NAME_LEN
        && name.split(':').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
                })
        })
}

/// Parses the text of a `SKILL.md`. `dir_name` is the name of the directory holding it, used
/// when the frontmatter has no name and compared with the name otherwise.
pub(crate) fn parse_skill(text: &str, dir_name: Option<&str>) -> Result<ParsedSkill, ParseError> {
    parse(text, Named::Skill { dir_name })
}

/// Parses the text of a Claude Code command file, whose name (`frontend:component` for
/// `frontend/component.md`) its path gave (see the module docs).
pub(crate) fn parse_command(text: &str, name: &str) -> Result<ParsedSkill, ParseError> {
    parse(text, Named::Command { name })
}

/// The frontmatter of a `SKILL.md` as written, as JSON: no defaults, no normalizing (the
/// skills extension of MCP compares it with a server's listing of the skill). A file without
/// frontmatter has an empty one.
pub(crate) fn frontmatter_as_json(
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let after_blank_lines = skip_blank_lines(text);
    let blank_lines = text[..text.len() - after_blank_lines.len()]
        .matches('\n')
        .count();
    let map = match split_frontmatter(after_blank_lines) {
        Ok((yaml, _)) => parse_mapping(yaml, blank_lines, &mut Vec::new())?,
        Err(FrontmatterError::Missing) => Mapping::new(),
        Err(err) => return Err(err.into()),
    };
    match serde_json::to_value(&map) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(ParseError::NotAMapping(
            "a mapping whose keys are not all text".to_owned(),
        )),
    }
}

/// Where a file's name comes from.
#[derive(Clone, Copy)]
enum Named<'a> {
    /// A `SKILL.md`: its `name`, else its directory's.
    Skill { dir_name: Option<&'a str> },
    /// A command: its path.
    Command { name: &'a str },
}

fn parse(text: &str, named: Named<'_>) -> Result<ParsedSkill, ParseError> {
    let mut warnings = Vec::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let after_blank_lines = skip_blank_lines(text);
    let blank_lines = text[..text.len() - after_blank_lines.len()]
        .matches('\n')
        .count();
    let text = after_blank_lines;
    let (map, body, has_frontmatter) = match split_frontmatter(text) {
        Ok((yaml, body)) => (parse_mapping(yaml, blank_lines, &mut warnings)?, body, true),
        Err(FrontmatterError::Missing) => {
            // Commands often have none: Claude Code's documentation starts with such files.
            if let Named::Skill { .. } = named {
                warnings.push(
                    "SKILL.md has no frontmatter (a first line `---`); the whole file is the body"
                        .to_owned(),
                );
            }
            (Mapping::new(), text, false)
        }
        Err(err @ FrontmatterError::Unclosed) => return Err(err.into()),
    };
    let fields = Fields::new(&map, &mut warnings);

    let (name, display_name, name_from_dir) = match named {
        Named::Skill { dir_name } => {
            let (name, display_name) = name(fields.get("name"), dir_name, &mut warnings)?;
            let from_dir = display_name.is_some() || written_name(fields.get("name"))?.is_none();
            (name, display_name, from_dir)
        }
        Named::Command { name } => {
            if let Some(written) = fields.get("name") {
                warnings.push(format!(
                    "name {} is not used: a command is named by its path, /{name}",
                    describe(written)
                ));
            }
            (name.to_owned(), None, false)
        }
    };
    let body = body.replace("\r\n", "\n").trim().to_owned();
    let description = match named {
        Named::Skill { .. } => description(fields.get("description"), &body, &mut warnings),
        Named::Command { .. } => {
            command_description(fields.get("description"), &body, &mut warnings)
        }
    };
    let allowed_tools = allowed_tools(fields.get("allowedtools"), &mut warnings);
    let mode = mode(fields.get("mode"), fields.get("context"), &mut warnings);
    let fork_context = fork_context(fields.get("forkcontext"), mode, &mut warnings);
    let model = optional_string(fields.get("model"), "model", &mut warnings);
    let license = optional_string(fields.get("license"), "license", &mut warnings);
    let compatibility =
        optional_string(fields.get("compatibility"), "compatibility", &mut warnings);
    if let Some(text) = &compatibility
        && text.chars().count() > MAX_COMPATIBILITY_LEN
    {
        warnings.push(format!(
            "compatibility is longer than {MAX_COMPATIBILITY_LEN} characters"
        ));
    }
    let argument_hint = argument_hint(fields.get("argumenthint"), &mut warnings);
    let disable_model_invocation = flag(
        fields.get("disablemodelinvocation"),
        "disable-model-invocation",
        &mut warnings,
    );
    let metadata = metadata(fields.get("metadata"), &mut warnings);
    let extra = fields.extra(&mut warnings);
    if let Named::Command { .. } = named {
        if model.is_some() && mode == SkillMode::Inline {
            warnings.push(
                "model is not honoured: an inline command runs with the role's model (a command \
                 with `context: fork` runs on its model)"
                    .to_owned(),
            );
        }
        if !allowed_tools.is_empty() {
            warnings.push(
                "allowed-tools does not pre-approve these tools as it does in Claude Code: \
                 their calls follow the permission rules (permissions.allow grants them), and \
                 the command asks the model to prefer them"
                    .to_owned(),
            );
        }
        warnings.extend(unhonoured_in_body(&body));
    }

    Ok(ParsedSkill {
        meta: SkillMeta {
            name,
            description,
            allowed_tools,
            mode,
            fork_context,
            model,
            argument_hint,
            disable_model_invocation,
            license,
            compatibility,
            metadata,
            extra,
        },
        body,
        has_frontmatter,
        name_from_dir,
        display_name,
        warnings,
    })
}

/// The warnings about what Claude Code does with a command's body and Mew does not: run its
/// `` !`command` `` lines and read in the files of its `@path` references. Each names the
/// first one found.
fn unhonoured_in_body(body: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(start) = body.find("!`") {
        let rest = &body[start + 2..];
        let command = rest.split(['`', '\n']).next().unwrap_or_default();
        warnings.push(format!(
            "!`{command}` is not run: Mew does not run a command's !`...` lines before the \
             model reads it; the model sees them as written"
        ));
    }
    if let Some(reference) = file_references(body).next() {
        warnings.push(format!(
            "{reference} is not read in: Mew does not replace @path references with the file's \
             contents; the model sees the path and can read the file"
        ));
    }
    warnings
}

/// The `@path` references of a body: words that start with `@` and name a path (they hold a
/// `/` or a `.`), not an e-mail address or an `@mention`.
fn file_references(body: &str) -> impl Iterator<Item = &str> {
    body.split(|c: char| c.is_whitespace() || matches!(c, '(' | '[' | '"' | '\'' | '`'))
        .map(|word| word.trim_end_matches([',', ';', ':', ')', ']', '"', '\'', '`', '.']))
        .filter(|word| {
            word.strip_prefix('@')
                .is_some_and(|path| path.contains(['/', '.']) && !path.starts_with('@'))
        })
}

/// A command's description: its `description`, else the first line of its body (headings'
/// `#` taken off), as Claude Code describes it.
fn command_description(value: Option<&Value>, body: &str, warnings: &mut Vec<String>) -> String {
    let written = match value {
        None => None,
        Some(Value::String(text)) => Some(text.trim().to_owned()).filter(|text| !text.is_empty()),
        Some(other) => {
            warnings.push(format!(
                "description must be a string, got {}; it is ignored",
                describe(other)
            ));
            None
        }
    };
    let text = written.unwrap_or_else(|| {
        body.lines()
            .map(|line| line.trim().trim_start_matches('#').trim())
            .find(|line| !line.is_empty())
            .unwrap_or_default()
            .to_owned()
    });
    if text.is_empty() {
        warnings.push(
            "description is missing and the body is empty; the model is shown only the name"
                .to_owned(),
        );
    }
    cut_description(text, warnings)
}

/// `text` cut to [`MAX_DESCRIPTION_LEN`] characters, with a warning when it was longer.
fn cut_description(text: String, warnings: &mut Vec<String>) -> String {
    if text.chars().count() <= MAX_DESCRIPTION_LEN {
        return text;
    }
    warnings.push(format!(
        "description is longer than {MAX_DESCRIPTION_LEN} characters; it is cut"
    ));
    text.chars()
        .take(MAX_DESCRIPTION_LEN)
        .collect::<String>()
        .trim_end()
        .to_owned()
}

/// `text` without the blank (whitespace-only) lines it starts with.
fn skip_blank_lines(mut text: &str) -> &str {
    loop {
        let line_end = text.find('\n').map_or(text.len(), |i| i + 1);
        let line = &text[..line_end];
        if line.is_empty() || !line.trim().is_empty() {
            return text;
        }
        text = &text[line_end..];
    }
}

/// Parses the frontmatter YAML into a mapping; an empty frontmatter is an empty mapping.
/// `blank_lines` is the number of lines skipped before the opening `---`.
fn parse_mapping(
    yaml: &str,
    blank_lines: usize,
    warnings: &mut Vec<String>,
) -> Result<Mapping, ParseError> {
    // The YAML starts after the opening line; leading newlines keep the parser's line numbers
    // those of the file (the opening line, plus the blank lines skipped before it).
    let padded = format!("{}{yaml}", "\n".repeat(blank_lines + 1));
    mew_cards::check_nesting(&padded, mew_cards::MAX_NESTING).map_err(|deep| ParseError::Yaml {
        message: deep.to_string(),
        line: Some(deep.line),
    })?;
    // Claude Code's reading: a top-level value that is not YAML as written is plain text.
    let read = mew_cards::parse_frontmatter_yaml(&padded).map_err(|err| ParseError::Yaml {
        message: err.to_string(),
        line: err.location().map(|at| at.line()),
    })?;
    // Claude Code's documentation writes `argument-hint: [pr-number] [priority]` unquoted:
    // that one is text without a word.
    for key in read
        .quoted
        .iter()
        .filter(|key| normalize_key(key) != "argumenthint")
    {
        warnings.push(format!(
            "{key} is not valid YAML as written (quote it); read as plain text, as Claude Code does"
        ));
    }
    match read.value {
        Value::Mapping(map) => Ok(map),
        Value::Null => Ok(Mapping::new()),
        other => Err(ParseError::NotAMapping(describe(&other))),
    }
}

/// The frontmatter's entries by normalized key, the first spelling of each winning.
struct Fields<'a> {
    /// (normalized key, key as written, value).
    entries: Vec<(String, String, &'a Value)>,
}

impl<'a> Fields<'a> {
    fn new(map: &'a Mapping, warnings: &mut Vec<String>) -> Self {
        let mut entries: Vec<(String, String, &Value)> = Vec::new();
        for (key, value) in map {
            let Some(key) = key.as_str() else {
                warnings.push(format!(
                    "key {} is ignored: keys must be strings",
                    describe(key)
                ));
                continue;
            };
            let normalized = normalize_key(key);
            if let Some((_, first, _)) = entries.iter().find(|(n, _, _)| *n == normalized) {
                warnings.push(format!(
                    "{key} is ignored: {first} gives the same field and comes first"
                ));
                continue;
            }
            entries.push((normalized, key.to_owned(), value));
        }
        Self { entries }
    }

    /// The value of a known field (by normalized key), unless it is null.
    fn get(&self, normalized: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(n, _, _)| n == normalized)
            .map(|(_, _, value)| *value)
            .filter(|value| !value.is_null())
    }

    /// Every unknown key, as JSON; a warning for each that is not a tolerated one.
    fn extra(&self, warnings: &mut Vec<String>) -> serde_json::Map<String, serde_json::Value> {
        let mut extra = serde_json::Map::new();
        for (normalized, key, value) in &self.entries {
            if KNOWN_FIELDS.iter().any(|(known, _)| known == normalized) {
                continue;
            }
            match serde_json::to_value(value) {
                Ok(json) => {
                    if let Some((_, unhonoured)) = UNHONOURED_FIELDS
                        .iter()
                        .find(|(field, _)| field == normalized)
                    {
                        warnings.push((*unhonoured).to_owned());
                    } else if !TOLERATED_FIELDS.contains(&normalized.as_str()) {
                        warnings.push(format!("unknown field {key} is not used"));
                    }
                    extra.insert(key.clone(), json);
                }
                Err(err) => warnings.push(format!("{key} is ignored: {err}")),
            }
        }
        extra
    }
}

/// A key lowercased, without `-` and `_`: `allowed-tools`, `allowed_tools` and
/// `allowedTools` are all `allowedtools`.
fn normalize_key(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
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

/// The `name` as written (trimmed), `None` when absent or empty.
fn written_name(value: Option<&Value>) -> Result<Option<&str>, ParseError> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim()).filter(|s| !s.is_empty())),
        Some(other) => Err(ParseError::NameNotAString(describe(other))),
    }
}

/// The name (see the module docs), and the written display name when the directory's name
/// replaced it.
fn name(
    value: Option<&Value>,
    dir_name: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<(String, Option<String>), ParseError> {
    let written = written_name(value)?;
    let (raw, from_dir) = match (written, dir_name) {
        (Some(name), _) => (name, false),
        (None, Some(dir)) => {
            warnings.push(format!("name is missing; using the directory name {dir:?}"));
            (dir, true)
        }
        (None, None) => return Err(ParseError::MissingName),
    };
    let name = raw.to_lowercase();
    if !is_valid_skill_name(&name) {
        // A display name: the directory's name stands in, as Claude Code does.
        if !from_dir
            && let Some(dir) = dir_name
            && is_valid_skill_name(&dir.to_lowercase())
        {
            let dir_lower = dir.to_lowercase();
            warnings.push(format!(
                "name {raw:?} is not a skill name (1 to 64 lowercase letters, digits and \
                 single hyphens); using the directory name {dir_lower:?}"
            ));
            return Ok((dir_lower, Some(raw.to_owned())));
        }
        return Err(ParseError::InvalidName(raw.to_owned()));
    }
    if name != raw {
        warnings.push(format!("name {raw:?} is not lowercase; using {name:?}"));
    }
    if !from_dir
        && let Some(dir) = dir_name
        && dir.to_lowercase() != name
    {
        warnings.push(format!(
            "name {name:?} differs from the directory name {dir:?}; using {name:?}"
        ));
    }
    Ok((name, None))
}

/// The first paragraph of `body` that is not a heading, on one line.
fn first_paragraph(body: &str) -> String {
    body.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .filter(|line| !line.trim_start().starts_with('#'))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|paragraph| !paragraph.is_empty())
        .unwrap_or_default()
}

fn description(value: Option<&Value>, body: &str, warnings: &mut Vec<String>) -> String {
    let text = match value {
        None => String::new(),
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(other) => {
            warnings.push(format!(
                "description must be a string, got {}; it is ignored",
                describe(other)
            ));
            String::new()
        }
    };
    let text = if text.is_empty() {
        let paragraph = first_paragraph(body);
        if paragraph.is_empty() {
            warnings.push(
                "description is missing; the model is shown only the name and cannot tell \
                 when to use the skill"
                    .to_owned(),
            );
            return paragraph;
        }
        warnings.push(
            "description is missing; the model is shown the body's first paragraph".to_owned(),
        );
        paragraph
    } else {
        text
    };
    cut_description(text, warnings)
}

/// `allowed-tools`: a list of strings, or one string split on commas and whitespace outside
/// parentheses (so `Bash(git add:*)` stays one entry).
fn allowed_tools(value: Option<&Value>, warnings: &mut Vec<String>) -> Vec<String> {
    let items: Vec<String> = match value {
        None => Vec::new(),
        Some(Value::String(s)) => split_tool_list(s),
        Some(Value::Sequence(items)) => {
            let mut list = Vec::new();
            for item in items {
                match item.as_str() {
                    Some(s) => list.push(s.to_owned()),
                    None => warnings.push(format!(
                        "allowed-tools entry {} is ignored: entries must be strings",
                        describe(item)
                    )),
                }
            }
            list
        }
        Some(other) => {
            warnings.push(format!(
                "allowed-tools must be a list or a string, got {}; it is ignored",
                describe(other)
            ));
            Vec::new()
        }
    };
    items
        .iter()
        .map(|item| item.trim())
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Splits on commas and whitespace outside parentheses.
fn split_tool_list(s: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !current.is_empty() {
                    items.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        items.push(current);
    }
    items
}

/// `mode`, or Claude Code's `context: fork` when `mode` is absent.
fn mode(value: Option<&Value>, context: Option<&Value>, warnings: &mut Vec<String>) -> SkillMode {
    let Some(value) = value else {
        return match context.and_then(Value::as_str).map(str::trim) {
            Some(text) if text.eq_ignore_ascii_case("fork") => SkillMode::Fork,
            _ => SkillMode::Inline,
        };
    };
    match value
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("" | "inline") => SkillMode::Inline,
        Some("fork") => SkillMode::Fork,
        _ => {
            warnings.push(format!(
                "mode {} is invalid (expected inline or fork); using inline",
                describe(value)
            ));
            SkillMode::Inline
        }
    }
}

fn fork_context(value: Option<&Value>, mode: SkillMode, warnings: &mut Vec<String>) -> ForkContext {
    let Some(value) = value else {
        return ForkContext::None;
    };
    let context = match value
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("" | "none") => ForkContext::None,
        Some("recent") => ForkContext::Recent,
        Some("full") => ForkContext::Full,
        _ => {
            warnings.push(format!(
                "fork-context {} is invalid (expected none, recent or full); using none",
                describe(value)
            ));
            return ForkContext::None;
        }
    };
    if mode == SkillMode::Inline && context != ForkContext::None {
        warnings.push(format!(
            "fork-context {context} is ignored: the skill runs inline"
        ));
    }
    context
}

/// A trimmed string field; empty is absent, another type is ignored with a warning.
fn optional_string(
    value: Option<&Value>,
    field: &str,
    warnings: &mut Vec<String>,
) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        // Numbers and booleans are common in hand-written YAML (`license: 2.0`).
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        other => {
            warnings.push(format!(
                "{field} must be a string, got {}; it is ignored",
                describe(other)
            ));
            None
        }
    }
}

/// `argument-hint`: text, or a flow list as Claude Code's examples write it
/// (`argument-hint: [message]` is YAML for a list), shown as written: `[message]`.
fn argument_hint(value: Option<&Value>, warnings: &mut Vec<String>) -> Option<String> {
    let Some(Value::Sequence(items)) = value else {
        return optional_string(value, "argument-hint", warnings);
    };
    let items: Option<Vec<String>> = items
        .iter()
        .map(|item| match item {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            Value::Bool(flag) => Some(flag.to_string()),
            _ => None,
        })
        .collect();
    match items {
        Some(items) => Some(format!("[{}]", items.join(", "))),
        None => {
            warnings.push("argument-hint must be text; it is ignored".to_owned());
            None
        }
    }
}

/// A boolean field; `"true"` and `"false"` as text count too, anything else is ignored with
/// a warning.
fn flag(value: Option<&Value>, field: &str, warnings: &mut Vec<String>) -> bool {
    match value {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(Value::String(text)) if text.trim().eq_ignore_ascii_case("true") => true,
        Some(Value::String(text)) if text.trim().eq_ignore_ascii_case("false") => false,
        Some(other) => {
            warnings.push(format!(
                "{field} must be true or false, got {}; it is ignored",
                describe(other)
            ));
            false
        }
    }
}

fn metadata(
    value: Option<&Value>,
    warnings: &mut Vec<String>,
) -> serde_json::Map<String, serde_json::Value> {
    let Some(value) = value else {
        return serde_json::Map::new();
    };
    if !value.is_mapping() {
        warnings.push(format!(
            "metadata must be a mapping, got {}; it is ignored",
            describe(value)
        ));
        return serde_json::Map::new();
    }
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => serde_json::Map::new(),
        Err(err) => {
            warnings.push(format!("metadata is ignored: {err}"));
            serde_json::Map::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(text: &str) -> ParsedSkill {
        parse_skill(text, Some("demo")).unwrap()
    }

    fn err(text: &str) -> ParseError {
        parse_skill(text, Some("demo")).unwrap_err()
    }

    #[test]
    fn full_seed_skill() {
        let parsed = parse(
            "---\nname: demo\ndescription: Does the demo\nallowed_tools: [read_file, bash]\n\
             mode: fork\nfork_context: recent\nmodel: haiku\n---\n\n# Demo\n\nSteps.\n",
        );
        assert_eq!(parsed.warnings, Vec::<String>::new());
        assert!(parsed.has_frontmatter);
        assert!(!parsed.name_from_dir);
        assert_eq!(
            parsed.meta,
            SkillMeta {
                name: "demo".to_owned(),
                description: "Does the demo".to_owned(),
                allowed_tools: vec!["read_file".to_owned(), "bash".to_owned()],
                mode: SkillMode::Fork,
                fork_context: ForkContext::Recent,
                model: Some("haiku".to_owned()),
                ..SkillMeta::default()
            }
        );
        assert_eq!(parsed.body, "# Demo\n\nSteps.");
    }

    #[test]
    fn open_spec_fields() {
        let parsed = parse(
            "---\nname: demo\ndescription: d\nlicense: Apache-2.0\n\
             compatibility: Requires git\nmetadata:\n  author: someone\n  version: \"1.0\"\n\
             allowed-tools: Bash(git add:*) Bash(git status:*) Read\n---\nbody\n",
        );
        assert_eq!(parsed.warnings, Vec::<String>::new());
        let meta = parsed.meta;
        assert_eq!(meta.license.as_deref(), Some("Apache-2.0"));
        assert_eq!(meta.compatibility.as_deref(), Some("Requires git"));
        assert_eq!(
            serde_json::Value::Object(meta.metadata),
            json!({"author": "someone", "version": "1.0"})
        );
        assert_eq!(
            meta.allowed_tools,
            ["Bash(git add:*)", "Bash(git status:*)", "Read"]
        );
    }

    #[test]
    fn spellings_of_one_field() {
        for key in [
            "allowed_tools",
            "allowed-tools",
            "allowedTools",
            "Allowed-Tools",
        ] {
            let parsed = parse(&format!(
                "---\nname: demo\ndescription: d\n{key}: Read, Grep\n---\n"
            ));
            assert_eq!(parsed.meta.allowed_tools, ["Read", "Grep"], "{key}");
            assert_eq!(parsed.warnings, Vec::<String>::new(), "{key}");
        }
        for key in ["fork_context", "fork-context", "forkContext"] {
            let parsed = parse(&format!(
                "---\nname: demo\ndescription: d\nmode: fork\n{key}: full\n---\n"
            ));
            assert_eq!(parsed.meta.fork_context, ForkContext::Full, "{key}");
        }
        let parsed =
            parse("---\nname: demo\ndescription: d\nallowed-tools: [a]\nallowed_tools: [b]\n---\n");
        assert_eq!(parsed.meta.allowed_tools, ["a"]);
        assert_eq!(
            parsed.warnings,
            ["allowed_tools is ignored: allowed-tools gives the same field and comes first"]
        );
    }

    #[test]
    fn name_is_lowercased_with_a_warning() {
        let parsed = parse_skill(
            "---\nname: PDF-Tools\ndescription: d\n---\n",
            Some("pdf-tools"),
        )
        .unwrap();
        assert_eq!(parsed.meta.name, "pdf-tools");
        assert_eq!(
            parsed.warnings,
            ["name \"PDF-Tools\" is not lowercase; using \"pdf-tools\""]
        );
    }

    #[test]
    fn missing_name_falls_back_to_the_directory() {
        for text in [
            "---\ndescription: d\n---\n",
            "---\nname:\ndescription: d\n---\n",
            "---\nname: \"  \"\ndescription: d\n---\n",
        ] {
            let parsed = parse_skill(text, Some("from-dir")).unwrap();
            assert_eq!(parsed.meta.name, "from-dir", "{text}");
            assert!(parsed.name_from_dir);
            assert_eq!(
                parsed.warnings,
                ["name is missing; using the directory name \"from-dir\""]
            );
        }
        assert_eq!(
            parse_skill("---\ndescription: d\n---\n", None).unwrap_err(),
            ParseError::MissingName
        );
        // A directory name that breaks the rule is no fallback.
        assert_eq!(
            parse_skill("---\ndescription: d\n---\n", Some("My Skill")).unwrap_err(),
            ParseError::InvalidName("My Skill".to_owned())
        );
    }

    #[test]
    fn name_rule() {
        for good in ["a", "pdf", "pdf-tools", "v2", "0day", &"x".repeat(64)] {
            assert!(is_valid_skill_name(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "a/b",
            "../x",
            "a_b",
            "a.b",
            "-a",
            "a-",
            "a--b",
            "Pdf",
            "é",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_skill_name(bad), "{bad}");
        }
        for bad in ["my skill", "a/b", "under_score", "x--y", "-x"] {
            // Without a directory name to fall back on.
            assert_eq!(
                parse_skill(
                    &format!("---\nname: \"{bad}\"\ndescription: d\n---\n"),
                    None
                )
                .unwrap_err(),
                ParseError::InvalidName(bad.to_owned()),
                "{bad}"
            );
        }
        assert_eq!(
            err("---\nname: [a]\ndescription: d\n---\n"),
            ParseError::NameNotAString("a list".to_owned())
        );
        assert_eq!(
            err("---\nname: 42\n---\n"),
            ParseError::NameNotAString("42".to_owned())
        );
    }

    #[test]
    fn a_display_name_gives_way_to_the_directory_name() {
        let parsed = parse_skill(
            "---\nname: Agent Development\ndescription: d\n---\n",
            Some("agent-development"),
        )
        .unwrap();
        assert_eq!(parsed.meta.name, "agent-development");
        assert!(parsed.name_from_dir);
        assert_eq!(parsed.display_name.as_deref(), Some("Agent Development"));
        assert_eq!(
            parsed.warnings,
            [
                "name \"Agent Development\" is not a skill name (1 to 64 lowercase letters, \
                 digits and single hyphens); using the directory name \"agent-development\""
            ]
        );
        // A directory name is lowercased as a written name is.
        let parsed = parse_skill("---\nname: Hook Dev\n---\n", Some("Hook-Dev")).unwrap();
        assert_eq!(parsed.meta.name, "hook-dev");
        // Neither usable: the skill is refused, naming what was written.
        assert_eq!(
            parse_skill("---\nname: Agent Dev\n---\n", Some("agent dev")).unwrap_err(),
            ParseError::InvalidName("Agent Dev".to_owned())
        );
        assert_eq!(
            parse_skill("---\nname: Agent Dev\n---\n", None).unwrap_err(),
            ParseError::InvalidName("Agent Dev".to_owned())
        );
    }

    #[test]
    fn a_missing_description_is_the_bodys_first_paragraph() {
        let parsed = parse(
            "---\nname: demo\n---\n# Demo\n\n## Use\nFills PDF forms\nwith data.\n\nSecond.\n",
        );
        assert_eq!(parsed.meta.description, "Fills PDF forms with data.");
        assert_eq!(
            parsed.warnings,
            ["description is missing; the model is shown the body's first paragraph"]
        );
        let parsed = parse("---\nname: demo\ndescription: \"\"\n---\n\n# Only a title\n");
        assert_eq!(parsed.meta.description, "");
    }

    #[test]
    fn claude_code_fields_mew_does_not_honour_say_so() {
        let parsed = parse(
            "---\nname: demo\ndescription: d\neffort: high\npaths: [\"src/**\"]\nshell: bash\n---\n",
        );
        assert_eq!(
            parsed.warnings,
            [
                "effort is not honoured: the skill runs with the role's model settings",
                "paths is not honoured: the skill is offered whatever files the task works on",
                "shell is not honoured: Mew does not run a skill's !`command` lines; they reach \
                 the model as written",
            ]
        );
        assert_eq!(parsed.meta.extra.get("effort"), Some(&json!("high")));
    }

    #[test]
    fn name_differing_from_directory_is_a_warning() {
        let parsed = parse_skill("---\nname: other\ndescription: d\n---\n", Some("demo")).unwrap();
        assert_eq!(parsed.meta.name, "other");
        assert_eq!(
            parsed.warnings,
            ["name \"other\" differs from the directory name \"demo\"; using \"other\""]
        );
        // Without a directory there is nothing to compare.
        let parsed = parse_skill("---\nname: other\ndescription: d\n---\n", None).unwrap();
        assert_eq!(parsed.warnings, Vec::<String>::new());
    }

    #[test]
    fn bad_mode_and_fork_context_fall_back() {
        let parsed = parse("---\nname: demo\ndescription: d\nmode: parallel\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Inline);
        assert_eq!(
            parsed.warnings,
            ["mode \"parallel\" is invalid (expected inline or fork); using inline"]
        );
        let parsed = parse("---\nname: demo\ndescription: d\nmode: 3\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Inline);
        assert_eq!(parsed.warnings.len(), 1);
        let parsed =
            parse("---\nname: demo\ndescription: d\nmode: FORK\nfork_context: everything\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Fork);
        assert_eq!(parsed.meta.fork_context, ForkContext::None);
        assert_eq!(
            parsed.warnings,
            ["fork-context \"everything\" is invalid (expected none, recent or full); using none"]
        );
        // Empty values are the defaults, without warnings.
        let parsed = parse("---\nname: demo\ndescription: d\nmode: \"\"\nfork_context:\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Inline);
        assert_eq!(parsed.warnings, Vec::<String>::new());
        // A fork context on an inline skill is kept, and said to be unused.
        let parsed = parse("---\nname: demo\ndescription: d\nfork_context: full\n---\n");
        assert_eq!(parsed.meta.fork_context, ForkContext::Full);
        assert_eq!(
            parsed.warnings,
            ["fork-context full is ignored: the skill runs inline"]
        );
    }

    #[test]
    fn claude_code_context_fork_means_fork_mode() {
        let parsed = parse("---\nname: demo\ndescription: d\ncontext: fork\nagent: Explore\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Fork);
        assert_eq!(parsed.meta.extra.get("agent"), Some(&json!("Explore")));
        assert_eq!(parsed.warnings, Vec::<String>::new());
        // An explicit mode wins.
        let parsed = parse("---\nname: demo\ndescription: d\nmode: inline\ncontext: fork\n---\n");
        assert_eq!(parsed.meta.mode, SkillMode::Inline);
    }

    #[test]
    fn description_rules() {
        let parsed = parse("---\nname: demo\n---\n");
        assert_eq!(parsed.meta.description, "");
        assert_eq!(
            parsed.warnings,
            [
                "description is missing; the model is shown only the name and cannot tell when \
              to use the skill"
            ]
        );
        let long = "é".repeat(MAX_DESCRIPTION_LEN + 10);
        let parsed = parse(&format!("---\nname: demo\ndescription: {long}\n---\n"));
        assert_eq!(parsed.meta.description.chars().count(), MAX_DESCRIPTION_LEN);
        assert_eq!(
            parsed.warnings,
            ["description is longer than 1024 characters; it is cut"]
        );
        let exact = "d".repeat(MAX_DESCRIPTION_LEN);
        let parsed = parse(&format!("---\nname: demo\ndescription: {exact}\n---\n"));
        assert_eq!(parsed.meta.description, exact);
        assert_eq!(parsed.warnings, Vec::<String>::new());
        let parsed = parse("---\nname: demo\ndescription: [a, b]\n---\n");
        assert_eq!(parsed.meta.description, "");
        assert_eq!(parsed.warnings.len(), 2);
        assert!(parsed.warnings[0].starts_with("description must be a string, got a list"));
    }

    #[test]
    fn wrong_types_of_optional_fields_are_warnings() {
        let parsed = parse(
            "---\nname: demo\ndescription: d\nallowed-tools: {a: 1}\nmodel: [x]\n\
             metadata: flat\nlicense: 2.0\n---\n",
        );
        assert_eq!(parsed.meta.allowed_tools, Vec::<String>::new());
        assert_eq!(parsed.meta.model, None);
        assert_eq!(parsed.meta.license.as_deref(), Some("2.0"));
        assert!(parsed.meta.metadata.is_empty());
        assert_eq!(
            parsed.warnings,
            [
                "allowed-tools must be a list or a string, got a mapping; it is ignored",
                "model must be a string, got a list; it is ignored",
                "metadata must be a mapping, got \"flat\"; it is ignored",
            ]
        );
        let parsed =
            parse("---\nname: demo\ndescription: d\nallowed-tools: [Read, 3, \" \"]\n---\n");
        assert_eq!(parsed.meta.allowed_tools, ["Read"]);
        assert_eq!(
            parsed.warnings,
            ["allowed-tools entry 3 is ignored: entries must be strings"]
        );
    }

    #[test]
    fn unknown_fields_are_kept_and_misspellings_warned() {
        let parsed = parse(
            "---\nname: demo\ndescription: d\nuser-invocable: false\nallowed_tool: [x]\n---\n",
        );
        assert_eq!(
            serde_json::Value::Object(parsed.meta.extra),
            json!({
                "user-invocable": false,
                "allowed_tool": ["x"],
            })
        );
        assert_eq!(parsed.warnings, ["unknown field allowed_tool is not used"]);
        let parsed = parse("---\nname: demo\ndescription: d\n1: one\n---\n");
        assert_eq!(parsed.warnings, ["key 1 is ignored: keys must be strings"]);
    }

    #[test]
    fn argument_hint_and_disable_model_invocation_are_read() {
        let parsed = parse(
            "---\nname: demo\ndescription: d\nargument-hint: \"[file] [mode]\"\n\
             disable-model-invocation: true\n---\n",
        );
        assert_eq!(parsed.warnings, Vec::<String>::new());
        assert_eq!(parsed.meta.argument_hint.as_deref(), Some("[file] [mode]"));
        assert!(parsed.meta.disable_model_invocation);
        assert!(parsed.meta.extra.is_empty());
        let parsed = parse("---\nname: demo\ndescription: d\ndisable-model-invocation: yes\n---\n");
        assert!(!parsed.meta.disable_model_invocation);
        assert_eq!(
            parsed.warnings,
            ["disable-model-invocation must be true or false, got \"yes\"; it is ignored"]
        );
        assert!(
            parse("---\nname: demo\ndisable-model-invocation: \"true\"\n---\nb\n")
                .meta
                .disable_model_invocation
        );
        // Claude Code's examples, unquoted: a YAML list, and text that is not YAML.
        for (hint, shown) in [
            ("[message]", "[message]"),
            (
                "[pr-number] [priority] [assignee]",
                "[pr-number] [priority] [assignee]",
            ),
            (
                "add [tagId] | remove [tagId] | list",
                "add [tagId] | remove [tagId] | list",
            ),
        ] {
            let parsed = parse(&format!(
                "---\nname: demo\ndescription: d\nargument-hint: {hint}\n---\n"
            ));
            assert_eq!(parsed.warnings, Vec::<String>::new(), "{hint}");
            assert_eq!(parsed.meta.argument_hint.as_deref(), Some(shown));
        }
    }

    #[test]
    fn a_command_without_frontmatter_is_described_by_its_first_line() {
        let parsed =
            parse_command("\n# Review the code\n\nLook for $ARGUMENTS.\n", "review").unwrap();
        assert_eq!(parsed.warnings, Vec::<String>::new());
        assert!(!parsed.has_frontmatter);
        assert_eq!(parsed.meta.name, "review");
        assert_eq!(parsed.meta.description, "Review the code");
        assert_eq!(parsed.body, "# Review the code\n\nLook for $ARGUMENTS.");
        let parsed = parse_command("Fix issue $0 with priority $1.\nThen test.", "fix").unwrap();
        assert_eq!(parsed.meta.description, "Fix issue $0 with priority $1.");
        let parsed = parse_command("", "empty").unwrap();
        assert_eq!(
            parsed.warnings,
            ["description is missing and the body is empty; the model is shown only the name"]
        );
    }

    #[test]
    fn a_command_reads_claude_code_fields_and_says_what_it_does_not_honour() {
        let parsed = parse_command(
            "---\nname: other\ndescription: Create a git commit\n\
             argument-hint: \"[message]\"\nallowed-tools: Bash(git add:*), Bash(git status:*)\n\
             model: haiku\ndisable-model-invocation: true\n---\n\
             ## Context\n\n- Status: !`git status`\n- Mail me at someone@example.com, @team\n\
             - Compare with @src/utils/helpers.js and @package.json.\n\nCommit: $ARGUMENTS\n",
            "git:commit",
        )
        .unwrap();
        assert_eq!(parsed.meta.name, "git:commit");
        assert_eq!(parsed.meta.description, "Create a git commit");
        assert_eq!(parsed.meta.argument_hint.as_deref(), Some("[message]"));
        assert_eq!(
            parsed.meta.allowed_tools,
            ["Bash(git add:*)", "Bash(git status:*)"]
        );
        assert_eq!(parsed.meta.model.as_deref(), Some("haiku"));
        assert!(parsed.meta.disable_model_invocation);
        assert_eq!(
            parsed.warnings,
            [
                "name \"other\" is not used: a command is named by its path, /git:commit",
                "model is not honoured: an inline command runs with the role's model (a command \
                 with `context: fork` runs on its model)",
                "allowed-tools does not pre-approve these tools as it does in Claude Code: their \
                 calls follow the permission rules (permissions.allow grants them), and the \
                 command asks the model to prefer them",
                "!`git status` is not run: Mew does not run a command's !`...` lines before the \
                 model reads it; the model sees them as written",
                "@src/utils/helpers.js is not read in: Mew does not replace @path references \
                 with the file's contents; the model sees the path and can read the file",
            ]
        );
        // A fork runs on the command's model.
        let parsed = parse_command(
            "---\ndescription: d\ncontext: fork\nmodel: haiku\n---\nCount.\n",
            "count",
        )
        .unwrap();
        assert_eq!(parsed.meta.mode, SkillMode::Fork);
        assert_eq!(parsed.warnings, Vec::<String>::new());
        // An e-mail address, a mention and a lone `@` are no file references.
        assert_eq!(
            file_references("a@b.com @claude @ (@x/y) `@z.md`, @./w").collect::<Vec<_>>(),
            ["@x/y", "@z.md", "@./w"]
        );
    }

    #[test]
    fn command_name_rule() {
        for name in [
            "review",
            "frontend:component",
            "speckit.plan",
            "fix_issue",
            "a:b:c-d",
        ] {
            assert!(is_valid_command_name(name), "{name}");
        }
        let long = "a".repeat(MAX_COMMAND_NAME_LEN + 1);
        for name in [
            "",
            "Review",
            "a:",
            ":a",
            "a::b",
            ".hidden",
            "a:.b",
            "has space",
            "a/b",
            &long,
        ] {
            assert!(!is_valid_command_name(name), "{name}");
        }
        assert!(is_valid_command_name(&"a".repeat(MAX_COMMAND_NAME_LEN)));
    }

    #[test]
    fn compatibility_over_the_limit_is_kept_with_a_warning() {
        let long = "c".repeat(501);
        let parsed = parse(&format!(
            "---\nname: demo\ndescription: d\ncompatibility: {long}\n---\n"
        ));
        assert_eq!(parsed.meta.compatibility.as_deref(), Some(long.as_str()));
        assert_eq!(
            parsed.warnings,
            ["compatibility is longer than 500 characters"]
        );
    }

    #[test]
    fn bom_crlf_and_leading_blank_lines() {
        let expected = parse("---\nname: demo\ndescription: d\n---\nline one\nline two\n");
        for text in [
            "\u{feff}---\nname: demo\ndescription: d\n---\nline one\nline two\n",
            "---\r\nname: demo\r\ndescription: d\r\n---\r\nline one\r\nline two\r\n",
            "\u{feff}---\r\nname: demo\r\ndescription: d\r\n---\r\n\r\nline one\r\nline two",
            "\n\n---\nname: demo\ndescription: d\n---\nline one\nline two\n",
            " \t\n\r\n---\nname: demo\ndescription: d\n---\nline one\nline two\n",
            "\u{feff}\n---\nname: demo\ndescription: d\n---   \nline one\nline two\n",
        ] {
            let parsed = parse(text);
            assert_eq!(parsed, expected, "{text:?}");
        }
        assert_eq!(expected.body, "line one\nline two");
    }

    #[test]
    fn no_frontmatter_is_all_body_with_the_directory_name() {
        let parsed = parse_skill("# Just text\n\nDo things.\n", Some("plain")).unwrap();
        assert!(!parsed.has_frontmatter);
        assert_eq!(parsed.meta.name, "plain");
        assert_eq!(parsed.body, "# Just text\n\nDo things.");
        assert_eq!(
            parsed.warnings,
            [
                "SKILL.md has no frontmatter (a first line `---`); the whole file is the body",
                "name is missing; using the directory name \"plain\"",
                "description is missing; the model is shown the body's first paragraph",
            ]
        );
        assert_eq!(parsed.meta.description, "Do things.");
        // An indented `---` is not a frontmatter opening.
        let parsed = parse_skill("  ---\nname: x\n---\n", Some("plain")).unwrap();
        assert!(!parsed.has_frontmatter);
        assert_eq!(parsed.meta.name, "plain");
        // An empty file is an empty skill.
        let parsed = parse_skill("", Some("plain")).unwrap();
        assert!(!parsed.has_frontmatter);
        assert_eq!(parsed.body, "");
    }

    #[test]
    fn closing_delimiter_at_end_of_file_and_empty_bodies() {
        for text in [
            "---\nname: demo\ndescription: d\n---",
            "---\nname: demo\ndescription: d\n---\n",
            "---\nname: demo\ndescription: d\n---\n\n  \n",
            "---\r\nname: demo\r\ndescription: d\r\n---\r\n",
        ] {
            let parsed = parse(text);
            assert_eq!(parsed.body, "", "{text:?}");
            assert_eq!(parsed.meta.description, "d");
            assert_eq!(parsed.warnings, Vec::<String>::new());
        }
        // An empty frontmatter is an empty mapping.
        let parsed = parse("---\n---\nbody");
        assert_eq!(parsed.meta.name, "demo");
        assert_eq!(parsed.body, "body");
    }

    #[test]
    fn dashes_inside_a_block_scalar_do_not_close_the_frontmatter() {
        let parsed = parse(
            "---\nname: demo\ndescription: |\n  first\n  ---\n  after the dashes\n\
             metadata:\n  note: >\n    a\n    ---\n---\nbody\n---\nmore body\n",
        );
        assert_eq!(parsed.meta.description, "first\n---\nafter the dashes");
        assert_eq!(parsed.meta.metadata.get("note"), Some(&json!("a ---\n")));
        // A `---` in the body is just Markdown.
        assert_eq!(parsed.body, "body\n---\nmore body");
    }

    #[test]
    fn broken_frontmatter_is_an_error() {
        assert_eq!(
            err("---\nname: demo\ndescription: d\n"),
            ParseError::Frontmatter(FrontmatterError::Unclosed)
        );
        match err("\n---\nname: demo\ndescription: [unclosed\n---\n") {
            ParseError::Yaml { line, .. } => assert_eq!(line, Some(5)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            err("---\n- a\n- b\n---\n"),
            ParseError::NotAMapping("a list".to_owned())
        );
        assert_eq!(
            err("---\njust text\n---\n"),
            ParseError::NotAMapping("\"just text\"".to_owned())
        );
    }
}
