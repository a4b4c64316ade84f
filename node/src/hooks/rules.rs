//! Hook rules: Mew's `hooks.yaml` and the `hooks` section of Claude Code settings files,
//! compiled up front; a bad rule is a reported problem, never fatal.
//!
//! # Files, in the order they apply
//!
//! 1. `~/.mew/hooks.yaml` (user)
//! 2. `~/.claude/settings.json` (user)
//! 3. `<project>/.mew/hooks.yaml` (project)
//! 4. `<project>/.claude/settings.json` (project)
//! 5. `<project>/.claude/settings.local.json` (project)
//!
//! Every file applies; rules run in this order, each file's in its own order. A rule whose
//! name an earlier rule already has is skipped with a problem, so a project can never replace
//! a user's rule by naming its own alike. Project files run only once trusted (see
//! [`super::trust`]). When the project directory is the home directory, the user files are
//! read once.
//!
//! # `hooks.yaml`
//!
//! ```yaml
//! hooks:
//!   - name: no-force-push            # required; unique; the key of only_once
//!     event: PreToolUse              # required; see super::event
//!     if:                            # optional; without it the rule always fires
//!       all_of:                      # or any_of; exactly one of them, not empty
//!         - field: tool_input.command
//!           match: {type: regex, value: 'git push .*--force'}
//!     action:
//!       type: shell                  # shell | http | prompt | subagent
//!       command: "echo no >&2; exit 2"
//!     only_once: false               # once per session
//!     async: false                   # run in the background; it cannot block
//!     timeout: 30s                   # default 30s; 500ms, 2m, or an integer of seconds
//!     fail: open                     # open (default) | closed: a failing hook blocks
//! ```
//!
//! Actions: `shell` needs `command`; `prompt` needs `text`; `http` needs `url` and takes
//! `method` (default POST), `headers` and `body` (a template, see [`super::action`]);
//! `subagent` needs `agent_name` and `prompt`. Unknown keys are errors, so a typo never
//! silently disables a check.
//!
//! Checks, each skipping only its rule: name empty; event unknown; action missing, of unknown
//! type, missing a required field or holding a field of another type; `if` with both or
//! neither of `all_of` and `any_of`, or an empty list; an atom without `field` or `match`; a
//! matcher that does not compile or has no value; `not` without `inner`; a bad timeout (zero,
//! over 10 minutes, or unparsable); `async` with `fail: closed`; an `async` prompt (its text
//! would go nowhere); `fail: closed` on an event where a block prevents nothing. An `async`
//! rule may listen to a blocking event (`Stop`, `PreToolUse`): it runs, but the caller goes
//! on without its answer.
//!
//! # Claude Code settings files
//!
//! The `hooks` section is read unchanged:
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
//!   "hooks": [{"type": "command", "command": "./check.sh", "timeout": 60}]}]}}
//! ```
//!
//! `matcher` uses Claude Code's syntax ([`super::condition::NameMatcher`]) and Claude Code's
//! tool names; it is tested against the event's [matcher field](HookEvent::matcher_field) and
//! ignored on events without one. Entries of `type: "command"` (with `timeout` in seconds,
//! default 60, and the optional `async` and `once`) and `type: "http"` (`url`, `headers`) are
//! supported; other types (`prompt`, `agent`, ...) and events Mew does not have are reported
//! and skipped. Such hooks are named `<file>#<Event>[i][j]`.
//!
//! A hook's `if` is a permission rule in Claude Code's syntax (`Bash(git commit:*)`,
//! `Edit(src/**)`, see [`crate::permission::rules`]): the hook runs only for tool calls the
//! rule matches, a chained command matching when any of its commands does. It is tested on the
//! tool events alone; on another event it is a reported problem, since Claude Code never runs
//! such a hook.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

use super::action::{Action, HttpAction};
use super::condition::{Atom, Combine, Condition, NameMatcher, compile_match};
use super::event::{BlockEffect, HookEvent, missing_claude_code_event};
use super::trust::{TrustStore, content_hash};
use crate::permission::rules::{Rule, from_claude_settings};

/// The timeout of a `hooks.yaml` rule that names none (the seed's).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The timeout of a settings-file hook that names none (Claude Code's).
pub(crate) const DEFAULT_SETTINGS_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest timeout a rule may ask for.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Whose file it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The user's own: always trusted.
    User,
    /// The project's: runs only once trusted.
    Project,
}

/// How the file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `hooks.yaml`.
    Mew,
    /// A Claude Code settings file (JSON); only its `hooks` section is read.
    ClaudeSettings,
}

/// A file that may hold hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookFile {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// Whose it is.
    pub(crate) scope: Scope,
    /// How it is written.
    pub(crate) format: Format,
    /// The folder of the plugin it belongs to: `CLAUDE_PLUGIN_ROOT` for its hooks.
    pub(crate) plugin_root: Option<PathBuf>,
}

impl HookFile {
    fn new(path: PathBuf, scope: Scope, format: Format) -> Self {
        Self {
            path,
            scope,
            format,
            plugin_root: None,
        }
    }

    /// The hooks file of a plugin in `root` (a settings file's `{"hooks": ..}` shape). A
    /// project's plugin is project scope: its hooks run once trusted.
    pub(crate) fn plugin(path: PathBuf, scope: Scope, root: PathBuf) -> Self {
        Self {
            path,
            scope,
            format: Format::ClaudeSettings,
            plugin_root: Some(root),
        }
    }
}

/// The hook files of `project` inside it, in order (`.mew/hooks.yaml`, then Claude Code's
/// settings and local settings). `project` should be absolute; [`standard_files`] and
/// [`super::trust`] both name files through this function so their paths agree.
pub(crate) fn project_files(project: &Path) -> Vec<HookFile> {
    let project = normalize_dir(project);
    vec![
        HookFile::new(
            project.join(".mew").join("hooks.yaml"),
            Scope::Project,
            Format::Mew,
        ),
        HookFile::new(
            project.join(".claude").join("settings.json"),
            Scope::Project,
            Format::ClaudeSettings,
        ),
        HookFile::new(
            project.join(".claude").join("settings.local.json"),
            Scope::Project,
            Format::ClaudeSettings,
        ),
    ]
}

/// The user's hook files under `home`.
pub(crate) fn user_files(home: &Path) -> Vec<HookFile> {
    let home = normalize_dir(home);
    vec![
        HookFile::new(
            home.join(".mew").join("hooks.yaml"),
            Scope::User,
            Format::Mew,
        ),
        HookFile::new(
            home.join(".claude").join("settings.json"),
            Scope::User,
            Format::ClaudeSettings,
        ),
    ]
}

/// Every hook file, in the order they apply: the user's (when a home is known), then the
/// project's, leaving out a project file that is a user file (the project is the home).
pub(crate) fn standard_files(home: Option<&Path>, project: &Path) -> Vec<HookFile> {
    let mut files = home.map(user_files).unwrap_or_default();
    let user: HashSet<PathBuf> = files.iter().map(|file| file.path.clone()).collect();
    files.extend(
        project_files(project)
            .into_iter()
            .filter(|file| !user.contains(&file.path)),
    );
    files
}

/// `dir` with symbolic links resolved when it exists, else as given.
pub(crate) fn normalize_dir(dir: &Path) -> PathBuf {
    fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned())
}

/// Where a rule came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleSource {
    /// The file.
    pub(crate) path: PathBuf,
    /// Whose it is.
    pub(crate) scope: Scope,
    /// How it is written.
    pub(crate) format: Format,
    /// SHA-256 (hex) of its hook content: the whole `hooks.yaml`, or the `hooks` section of a
    /// settings file (see [`super::trust::content_hash`]).
    pub(crate) hash: String,
    /// The plugin's folder, for a plugin's hooks file.
    pub(crate) plugin_root: Option<PathBuf>,
}

/// What a failing hook means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FailMode {
    /// The error is reported; the run goes on (the default).
    #[default]
    Open,
    /// The error blocks, as a refusing hook would.
    Closed,
}

/// One compiled hook.
#[derive(Debug, Clone)]
pub(crate) struct HookRule {
    /// Unique among the loaded rules.
    pub(crate) name: String,
    /// The event it listens to.
    pub(crate) event: HookEvent,
    /// `if:`; `None` = always.
    pub(crate) condition: Option<Condition>,
    /// A Claude Code `matcher`, for settings-file hooks.
    pub(crate) matcher: Option<NameMatcher>,
    /// A settings-file hook's `if`: a permission rule the event's tool call must match
    /// (`Bash(git commit:*)`), tested as a deny rule tests a call, so a chained command
    /// matches when one of its commands does.
    pub(crate) tool_if: Option<Rule>,
    /// What it does.
    pub(crate) action: Action,
    /// Once per session.
    pub(crate) only_once: bool,
    /// In the background: the caller does not wait, and its answer is only logged.
    pub(crate) run_async: bool,
    /// How long the action may take.
    pub(crate) timeout: Duration,
    /// What an error means.
    pub(crate) fail: FailMode,
    /// Its file.
    pub(crate) source: Arc<RuleSource>,
}

impl HookRule {
    /// Whether the hook expects Claude Code's tool names in the payload.
    pub(crate) fn wants_claude_code_names(&self) -> bool {
        self.source.format == Format::ClaudeSettings
    }
}

/// A rule or file that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct HookProblem {
    /// The file, for display.
    pub(crate) path: String,
    /// The rule, when the problem is with one rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rule: Option<String>,
    /// What is wrong.
    pub(crate) message: String,
}

impl HookProblem {
    fn file(path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.display().to_string(),
            rule: None,
            message: message.into(),
        }
    }

    fn rule(path: &Path, rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.display().to_string(),
            rule: Some(rule.into()),
            message: message.into(),
        }
    }
}

/// `path: hook `name` skipped: message`, or `path: message`.
impl fmt::Display for HookProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Some(rule) => write!(f, "{}: hook `{rule}` skipped: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// What became of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceStatus {
    /// Its rules were compiled (some may have been skipped as problems).
    Loaded {
        /// How many rules it gave.
        rules: usize,
    },
    /// A project file whose content is not trusted: none of its rules run.
    Untrusted,
    /// It could not be read or parsed as a whole.
    Broken,
}

/// One file that exists and holds hooks, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceReport {
    /// The file and its hash.
    pub(crate) source: Arc<RuleSource>,
    /// What became of it.
    pub(crate) status: SourceStatus,
}

/// Everything [`load`] found.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadedHooks {
    /// The rules that run, in order.
    pub(crate) rules: Vec<HookRule>,
    /// What was skipped, and why.
    pub(crate) problems: Vec<HookProblem>,
    /// The files that exist and hold hooks.
    pub(crate) sources: Vec<SourceReport>,
}

/// Reads and compiles `files` in order. Missing files are skipped quietly; project files run
/// only when `trust` has their current hash. Never fails: everything wrong is a problem.
///
/// Does blocking file I/O.
pub(crate) fn load(files: &[HookFile], trust: &TrustStore) -> LoadedHooks {
    let mut loaded = LoadedHooks::default();
    let mut names = HashSet::new();
    for file in files {
        let text =
            match crate::user_file::read_text(&file.path, crate::user_file::MAX_USER_FILE_BYTES) {
                Ok(text) => text,
                Err(crate::user_file::ReadError::NotFound) => continue,
                Err(err) => {
                    loaded
                        .problems
                        .push(HookProblem::file(&file.path, format!("cannot read: {err}")));
                    continue;
                }
            };
        let (rules, problems, report) = parse_file(&text, file, trust);
        loaded.problems.extend(problems);
        if let Some(report) = report {
            loaded.sources.push(report);
        }
        for rule in rules {
            if names.insert(rule.name.clone()) {
                loaded.rules.push(rule);
            } else {
                loaded.problems.push(HookProblem::rule(
                    &file.path,
                    &rule.name,
                    "name conflict with an earlier hook of the same name",
                ));
            }
        }
    }
    loaded
}

/// Compiles the text of one file; checks trust for a project file. Returns the rules, the
/// problems, and a report when the file holds hooks.
pub(crate) fn parse_file(
    text: &str,
    file: &HookFile,
    trust: &TrustStore,
) -> (Vec<HookRule>, Vec<HookProblem>, Option<SourceReport>) {
    let hash = match content_hash(text, file.format) {
        Ok(Some(hash)) => hash,
        Ok(None) => return (Vec::new(), Vec::new(), None),
        Err(message) => {
            let source = Arc::new(RuleSource {
                path: file.path.clone(),
                scope: file.scope,
                format: file.format,
                hash: String::new(),
                plugin_root: file.plugin_root.clone(),
            });
            let report = SourceReport {
                source,
                status: SourceStatus::Broken,
            };
            return (
                Vec::new(),
                vec![HookProblem::file(&file.path, message)],
                Some(report),
            );
        }
    };
    let source = Arc::new(RuleSource {
        path: file.path.clone(),
        scope: file.scope,
        format: file.format,
        hash,
        plugin_root: file.plugin_root.clone(),
    });
    if file.scope == Scope::Project && !trust.is_trusted(&file.path, &source.hash) {
        let problem = HookProblem::file(
            &file.path,
            "project hooks are new or changed since they were last trusted; skipped until \
             trusted again (`mew hooks trust`)",
        );
        let report = SourceReport {
            source,
            status: SourceStatus::Untrusted,
        };
        return (Vec::new(), vec![problem], Some(report));
    }
    let (rules, problems) = match file.format {
        Format::Mew => parse_mew(text, &source),
        Format::ClaudeSettings => parse_settings(text, &source),
    };
    let status = if rules.is_empty() && problems.iter().any(|p| p.rule.is_none()) {
        SourceStatus::Broken
    } else {
        SourceStatus::Loaded { rules: rules.len() }
    };
    (rules, problems, Some(SourceReport { source, status }))
}

// ---------------------------------------------------------------------------------------------
// hooks.yaml

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default, rename = "if")]
    condition: Option<RawIf>,
    #[serde(default)]
    action: Option<RawAction>,
    #[serde(default)]
    only_once: bool,
    #[serde(default, rename = "async")]
    run_async: bool,
    #[serde(default)]
    timeout: Option<Yaml>,
    #[serde(default)]
    fail: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIf {
    #[serde(default)]
    all_of: Option<Vec<RawAtom>>,
    #[serde(default)]
    any_of: Option<Vec<RawAtom>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAtom {
    #[serde(default)]
    field: Option<String>,
    #[serde(default, rename = "match")]
    matcher: Option<Yaml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAction {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    text: Option<String>,
    url: Option<String>,
    method: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
    agent_name: Option<String>,
    prompt: Option<String>,
}

/// Compiles a `hooks.yaml` text: a mapping with a `hooks:` list. An empty file holds no hooks.
pub(crate) fn parse_mew(text: &str, source: &Arc<RuleSource>) -> (Vec<HookRule>, Vec<HookProblem>) {
    let path = &source.path;
    if let Err(deep) = mew_cards::check_nesting(text, mew_cards::MAX_NESTING) {
        return (
            Vec::new(),
            vec![HookProblem::file(path, format!("invalid YAML: {deep}"))],
        );
    }
    let document: Yaml = match serde_yaml_ng::from_str(text) {
        Ok(document) => document,
        Err(err) => {
            return (
                Vec::new(),
                vec![HookProblem::file(path, format!("invalid YAML: {err}"))],
            );
        }
    };
    let items = match document {
        Yaml::Null => return (Vec::new(), Vec::new()),
        Yaml::Mapping(mut map) => {
            let hooks = map.remove("hooks");
            if let Some(key) = map.keys().next() {
                let key = key.as_str().unwrap_or("?").to_owned();
                return (
                    Vec::new(),
                    vec![HookProblem::file(
                        path,
                        format!("unknown top-level key `{key}` (the file holds one key, `hooks`)"),
                    )],
                );
            }
            match hooks {
                None | Some(Yaml::Null) => return (Vec::new(), Vec::new()),
                Some(Yaml::Sequence(items)) => items,
                Some(_) => {
                    return (
                        Vec::new(),
                        vec![HookProblem::file(path, "`hooks` must be a list of rules")],
                    );
                }
            }
        }
        _ => {
            return (
                Vec::new(),
                vec![HookProblem::file(
                    path,
                    "the file must be a mapping with a `hooks:` list",
                )],
            );
        }
    };
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let label = item
            .get("name")
            .and_then(Yaml::as_str)
            .filter(|name| !name.trim().is_empty())
            .map_or_else(|| format!("#{}", index + 1), str::to_owned);
        let compiled = serde_yaml_ng::from_value::<RawRule>(item)
            .map_err(|err| err.to_string())
            .and_then(|raw| compile_rule(raw, source));
        match compiled {
            Ok(rule) => rules.push(rule),
            Err(message) => problems.push(HookProblem::rule(path, label, message)),
        }
    }
    (rules, problems)
}

fn compile_rule(raw: RawRule, source: &Arc<RuleSource>) -> Result<HookRule, String> {
    let name = raw.name.unwrap_or_default();
    if name.trim().is_empty() {
        return Err("`name` is required".to_owned());
    }
    let event_name = raw.event.ok_or("`event` is required")?;
    let event = parse_event(&event_name)?;
    let condition = raw.condition.map(compile_if).transpose()?;
    let action = compile_action(raw.action.ok_or("`action` is required")?)?;
    let timeout = match raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(value) => parse_timeout(&value)?,
    };
    let fail = match raw.fail.as_deref() {
        None | Some("open") => FailMode::Open,
        Some("closed") => FailMode::Closed,
        Some(other) => return Err(format!("`fail: {other}` (expected open or closed)")),
    };
    check_modes(event, raw.run_async, fail)?;
    if raw.run_async && matches!(action, Action::Prompt { .. }) {
        return Err("a prompt action cannot be async: its text would reach no one".to_owned());
    }
    Ok(HookRule {
        name,
        event,
        condition,
        matcher: None,
        tool_if: None,
        action,
        only_once: raw.only_once,
        run_async: raw.run_async,
        timeout,
        fail,
        source: Arc::clone(source),
    })
}

/// The event named `name`, or a message listing the known ones.
fn parse_event(name: &str) -> Result<HookEvent, String> {
    HookEvent::parse(name).ok_or_else(|| {
        let known: Vec<&str> = HookEvent::ALL.iter().map(|event| event.as_str()).collect();
        format!(
            "unknown event `{name}` (expected one of {})",
            known.join(", ")
        )
    })
}

/// The checks that tie `async` and `fail` to the event. An `async` hook may listen to any
/// event, as in Claude Code, but cannot block: failing closed needs the caller to wait.
fn check_modes(event: HookEvent, run_async: bool, fail: FailMode) -> Result<(), String> {
    if run_async && fail == FailMode::Closed {
        return Err(
            "`async: true` and `fail: closed` do not go together: nothing waits for an async \
             hook, so its failure cannot block"
                .to_owned(),
        );
    }
    if fail == FailMode::Closed && event.block_effect() != BlockEffect::Prevent {
        return Err(format!(
            "`fail: closed` is only for events a hook can refuse (PreToolUse, \
             UserPromptSubmit, TaskReceived, DelegationStart), not {event}"
        ));
    }
    Ok(())
}

fn compile_if(raw: RawIf) -> Result<Condition, String> {
    let (combine, atoms) = match (raw.all_of, raw.any_of) {
        (Some(_), Some(_)) => return Err("`if` takes `all_of` or `any_of`, not both".to_owned()),
        (None, None) => return Err("`if` needs `all_of` or `any_of`".to_owned()),
        (Some(atoms), None) => (Combine::AllOf, atoms),
        (None, Some(atoms)) => (Combine::AnyOf, atoms),
    };
    let key = match combine {
        Combine::AllOf => "all_of",
        Combine::AnyOf => "any_of",
    };
    if atoms.is_empty() {
        return Err(format!("`if.{key}` is empty"));
    }
    let atoms = atoms
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            let at = format!("`if.{key}[{index}]`");
            let field = raw
                .field
                .ok_or_else(|| format!("{at}: `field` is required"))?;
            let spec = raw
                .matcher
                .ok_or_else(|| format!("{at}: `match` is required"))?;
            let matcher = compile_match(&spec).map_err(|err| format!("{at}: {err}"))?;
            Atom::new(&field, matcher).map_err(|err| format!("{at}: {err}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Condition { combine, atoms })
}

fn compile_action(raw: RawAction) -> Result<Action, String> {
    let kind = raw
        .kind
        .clone()
        .ok_or("`action.type` is required (shell, http, prompt or subagent)")?;
    let fields = [
        ("command", raw.command.is_some()),
        ("text", raw.text.is_some()),
        ("url", raw.url.is_some()),
        ("method", raw.method.is_some()),
        ("headers", raw.headers.is_some()),
        ("body", raw.body.is_some()),
        ("agent_name", raw.agent_name.is_some()),
        ("prompt", raw.prompt.is_some()),
    ];
    let allowed: &[&str] = match kind.as_str() {
        "shell" => &["command"],
        "prompt" => &["text"],
        "http" => &["url", "method", "headers", "body"],
        "subagent" => &["agent_name", "prompt"],
        other => {
            return Err(format!(
                "unknown `action.type: {other}` (expected shell, http, prompt or subagent)"
            ));
        }
    };
    if let Some((field, _)) = fields
        .iter()
        .find(|(field, present)| *present && !allowed.contains(field))
    {
        return Err(format!(
            "`action.{field}` is not a field of a {kind} action"
        ));
    }
    let required = |value: Option<String>, field: &str| {
        value
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| format!("a {kind} action needs `{field}`"))
    };
    Ok(match kind.as_str() {
        "shell" => Action::Shell {
            command: required(raw.command, "command")?,
        },
        "prompt" => Action::Prompt {
            text: required(raw.text, "text")?,
        },
        "http" => Action::Http(HttpAction::compile(
            &required(raw.url, "url")?,
            raw.method.as_deref(),
            raw.headers.unwrap_or_default(),
            raw.body.as_deref(),
        )?),
        _ => Action::Subagent {
            agent_name: required(raw.agent_name, "agent_name")?,
            prompt: required(raw.prompt, "prompt")?,
        },
    })
}

/// A `timeout:`: a duration string or an integer of seconds, above zero and at most
/// [`MAX_TIMEOUT`].
fn parse_timeout(value: &Yaml) -> Result<Duration, String> {
    let timeout = match value {
        Yaml::String(text) => {
            crate::duration::parse(text).map_err(|err| format!("`timeout`: {err}"))?
        }
        Yaml::Number(number) => Duration::from_secs(
            number
                .as_u64()
                .ok_or("`timeout` must be a whole number of seconds or a duration such as 30s")?,
        ),
        _ => return Err("`timeout` must be a duration such as 30s".to_owned()),
    };
    check_timeout(timeout)
}

fn check_timeout(timeout: Duration) -> Result<Duration, String> {
    if timeout.is_zero() {
        return Err("`timeout` must be above zero".to_owned());
    }
    if timeout > MAX_TIMEOUT {
        return Err(format!(
            "`timeout` is over the limit of {}s",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Ok(timeout)
}

// ---------------------------------------------------------------------------------------------
// Claude Code settings files

/// The `hooks` value of a settings file: `None` when it has none.
pub(crate) fn settings_hooks(text: &str) -> Result<Option<Value>, String> {
    mew_cards::check_nesting(text, mew_cards::MAX_NESTING)
        .map_err(|deep| format!("invalid JSON: {deep}"))?;
    let document: Value =
        serde_json::from_str(text).map_err(|err| format!("invalid JSON: {err}"))?;
    let Value::Object(mut map) = document else {
        return Err("a settings file must hold a JSON object".to_owned());
    };
    Ok(map.remove("hooks").filter(|hooks| !hooks.is_null()))
}

/// A short label for hook names: `~/.claude/settings.json` style, by scope; a plugin's file
/// as `plugin NAME/PATH`.
fn settings_label(source: &RuleSource) -> String {
    if let Some(root) = &source.plugin_root {
        let name = root
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
        let inside = source.path.strip_prefix(root).unwrap_or(&source.path);
        return format!("plugin {name}/{}", inside.display());
    }
    let file = source
        .path
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    match source.scope {
        Scope::User => format!("~/.claude/{file}"),
        Scope::Project => format!(".claude/{file}"),
    }
}

/// Compiles the `hooks` section of a Claude Code settings file.
pub(crate) fn parse_settings(
    text: &str,
    source: &Arc<RuleSource>,
) -> (Vec<HookRule>, Vec<HookProblem>) {
    let path = &source.path;
    let hooks = match settings_hooks(text) {
        Ok(Some(hooks)) => hooks,
        Ok(None) => return (Vec::new(), Vec::new()),
        Err(message) => return (Vec::new(), vec![HookProblem::file(path, message)]),
    };
    let Value::Object(events) = hooks else {
        return (
            Vec::new(),
            vec![HookProblem::file(
                path,
                "`hooks` must be an object of events",
            )],
        );
    };
    let label = settings_label(source);
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    for (event_name, entries) in &events {
        let Some(event) = HookEvent::parse(event_name) else {
            let why = missing_claude_code_event(event_name)
                .map_or_else(String::new, |why| format!(": {why}"));
            problems.push(HookProblem::file(
                path,
                format!("hooks for `{event_name}` skipped: Mew has no such event{why}"),
            ));
            continue;
        };
        let Value::Array(entries) = entries else {
            problems.push(HookProblem::file(
                path,
                format!("`hooks.{event_name}` must be a list of {{matcher, hooks}} entries"),
            ));
            continue;
        };
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("{label}#{event_name}[{i}]");
            let matcher = match entry.get("matcher") {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => match NameMatcher::parse(text) {
                    Ok(matcher) => Some(matcher),
                    Err(err) => {
                        problems.push(HookProblem::rule(path, &at, format!("bad matcher: {err}")));
                        continue;
                    }
                },
                Some(_) => {
                    problems.push(HookProblem::rule(path, &at, "`matcher` must be a string"));
                    continue;
                }
            };
            let Some(Value::Array(commands)) = entry.get("hooks") else {
                problems.push(HookProblem::rule(path, &at, "`hooks` must be a list"));
                continue;
            };
            for (j, hook) in commands.iter().enumerate() {
                let name = format!("{at}[{j}]");
                match compile_settings_hook(event, hook, matcher.clone(), source, &name) {
                    Ok(rule) => rules.push(rule),
                    Err(message) => problems.push(HookProblem::rule(path, name, message)),
                }
            }
        }
    }
    (rules, problems)
}

fn compile_settings_hook(
    event: HookEvent,
    hook: &Value,
    matcher: Option<NameMatcher>,
    source: &Arc<RuleSource>,
    name: &str,
) -> Result<HookRule, String> {
    let Value::Object(hook) = hook else {
        return Err(
            "a hook must be an object such as {\"type\": \"command\", \"command\": ..}".to_owned(),
        );
    };
    let string = |key: &str| -> Result<Option<String>, String> {
        match hook.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(format!("`{key}` must be a string")),
        }
    };
    let flag = |key: &str| -> Result<bool, String> {
        match hook.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(_) => Err(format!("`{key}` must be true or false")),
        }
    };
    let kind = string("type")?.ok_or("`type` is required")?;
    let action = match kind.as_str() {
        "command" => Action::Shell {
            command: string("command")?
                .filter(|command| !command.trim().is_empty())
                .ok_or("a command hook needs `command`")?,
        },
        "http" => {
            let headers = match hook.get("headers") {
                None | Some(Value::Null) => BTreeMap::new(),
                Some(Value::Object(map)) => map
                    .iter()
                    .map(|(key, value)| match value {
                        Value::String(text) => Ok((key.clone(), text.clone())),
                        _ => Err(format!("header `{key}` must be a string")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("`headers` must be an object of strings".to_owned()),
            };
            let url = string("url")?.ok_or("an http hook needs `url`")?;
            Action::Http(HttpAction::compile(&url, None, headers, None)?)
        }
        other => {
            return Err(format!(
                "hooks of type `{other}` are not supported from settings files (only command \
                 and http); write a subagent action in .mew/hooks.yaml instead"
            ));
        }
    };
    let timeout = match hook.get("timeout") {
        None | Some(Value::Null) => DEFAULT_SETTINGS_TIMEOUT,
        Some(Value::Number(number)) => {
            let seconds = number
                .as_f64()
                .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                .ok_or("`timeout` must be a positive number of seconds")?;
            check_timeout(Duration::from_secs_f64(
                seconds.min(MAX_TIMEOUT.as_secs_f64() + 1.0),
            ))?
        }
        Some(_) => return Err("`timeout` must be a number of seconds".to_owned()),
    };
    let run_async = flag("async")?;
    check_modes(event, run_async, FailMode::Open)?;
    let tool_if = match string("if")? {
        None => None,
        Some(_) if !event.is_tool_event() => {
            return Err(format!(
                "`if` is tested on tool events only (PreToolUse, PostToolUse, \
                 PostToolUseFailure, PermissionRequest); on {event} this hook would never run"
            ));
        }
        Some(text) => Some(
            Rule::parse(&from_claude_settings(&text))
                .map_err(|err| format!("`if: {text}` is not a permission rule: {err}"))?,
        ),
    };
    Ok(HookRule {
        name: name.to_owned(),
        event,
        condition: None,
        matcher: event.matcher_field().and(matcher),
        tool_if,
        action,
        only_once: flag("once")?,
        run_async,
        timeout,
        fail: FailMode::Open,
        source: Arc::clone(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(format: Format) -> Arc<RuleSource> {
        let path = match format {
            Format::Mew => "/p/.mew/hooks.yaml",
            Format::ClaudeSettings => "/home/u/.claude/settings.json",
        };
        Arc::new(RuleSource {
            path: PathBuf::from(path),
            scope: Scope::User,
            format,
            hash: "h".to_owned(),
            plugin_root: None,
        })
    }

    fn mew(text: &str) -> (Vec<HookRule>, Vec<HookProblem>) {
        parse_mew(text, &source(Format::Mew))
    }

    /// The one problem of a file with one rule.
    fn problem(rule_yaml: &str) -> String {
        let (rules, problems) = mew(&format!(
            "hooks:\n  - {}\n",
            rule_yaml.replace('\n', "\n    ")
        ));
        assert!(rules.is_empty(), "{rules:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        problems[0].message.clone()
    }

    const GOOD: &str = "name: r\nevent: PreToolUse\naction: {type: shell, command: 'true'}";

    #[test]
    fn a_full_rule_compiles() {
        let (rules, problems) = mew("hooks:\n\
             - name: block-force-push\n\
             \x20 event: PreToolUse\n\
             \x20 if:\n\
             \x20   all_of:\n\
             \x20     - field: tool_name\n\
             \x20       match: {type: exact, value: bash}\n\
             \x20     - field: tool_input.command\n\
             \x20       match: {type: not, inner: {type: regex, value: '^git status'}}\n\
             \x20 action: {type: shell, command: 'exit 2'}\n\
             \x20 only_once: true\n\
             \x20 timeout: 1m30s\n\
             \x20 fail: closed\n\
             - name: log\n\
             \x20 event: PostToolUse\n\
             \x20 action: {type: http, url: 'http://127.0.0.1:9/x', method: PUT, headers: {X-A: b}, body: '{{tool_name}}'}\n\
             \x20 async: true\n\
             \x20 timeout: 5\n\
             - name: remind\n\
             \x20 event: SessionStart\n\
             \x20 action: {type: prompt, text: be brief}\n\
             - name: review\n\
             \x20 event: DelegationStart\n\
             \x20 action: {type: subagent, agent_name: reviewer, prompt: check it}\n");
        assert_eq!(problems, []);
        assert_eq!(rules.len(), 4);
        let first = &rules[0];
        assert_eq!(first.name, "block-force-push");
        assert_eq!(first.event, HookEvent::PreToolUse);
        let atoms = &first.condition.as_ref().unwrap().atoms;
        let fields: Vec<&str> = atoms.iter().map(|atom| atom.field.as_str()).collect();
        assert_eq!(fields, ["tool_name", "tool_input.command"]);
        assert!(first.only_once && !first.run_async);
        assert_eq!(first.timeout, Duration::from_secs(90));
        assert_eq!(first.fail, FailMode::Closed);
        assert!(!first.wants_claude_code_names());
        assert!(rules[1].run_async);
        assert_eq!(rules[1].timeout, Duration::from_secs(5));
        assert_eq!(rules[2].timeout, DEFAULT_TIMEOUT);
        assert_eq!(rules[2].fail, FailMode::Open);
        assert!(
            matches!(&rules[3].action, Action::Subagent { agent_name, .. } if agent_name == "reviewer")
        );
    }

    #[test]
    fn every_compile_check_has_a_clear_message() {
        assert_eq!(
            problem("event: Stop\naction: {type: prompt, text: x}"),
            "`name` is required"
        );
        assert_eq!(
            problem("name: ' '\nevent: Stop\naction: {type: prompt, text: x}"),
            "`name` is required"
        );
        assert_eq!(
            problem("name: r\naction: {type: prompt, text: x}"),
            "`event` is required"
        );
        assert!(
            problem("name: r\nevent: BeforeTool\naction: {type: prompt, text: x}")
                .starts_with("unknown event `BeforeTool` (expected one of SessionStart, ")
        );
        assert_eq!(problem("name: r\nevent: Stop"), "`action` is required");
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: email}"),
            "unknown `action.type: email` (expected shell, http, prompt or subagent)"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {command: x}"),
            "`action.type` is required (shell, http, prompt or subagent)"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: shell}"),
            "a shell action needs `command`"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: prompt, text: ''}"),
            "a prompt action needs `text`"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: http}"),
            "a http action needs `url`"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: subagent, agent_name: a}"),
            "a subagent action needs `prompt`"
        );
        assert_eq!(
            problem("name: r\nevent: Stop\naction: {type: shell, command: x, text: y}"),
            "`action.text` is not a field of a shell action"
        );
        assert!(
            problem("name: r\nevent: Stop\naction: {type: shell, command: x, cmd: y}")
                .contains("unknown field `cmd`")
        );
        assert_eq!(
            problem(&format!(
                "{GOOD}\nif: {{all_of: [{{field: a, match: x}}], any_of: [{{field: a, match: x}}]}}"
            )),
            "`if` takes `all_of` or `any_of`, not both"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nif: {{}}")),
            "`if` needs `all_of` or `any_of`"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nif: {{any_of: []}}")),
            "`if.any_of` is empty"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nif: {{all_of: [{{match: x}}]}}")),
            "`if.all_of[0]`: `field` is required"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nif: {{all_of: [{{field: a}}]}}")),
            "`if.all_of[0]`: `match` is required"
        );
        assert_eq!(
            problem(&format!(
                "{GOOD}\nif: {{all_of: [{{field: '', match: x}}]}}"
            )),
            "`if.all_of[0]`: `field` is empty"
        );
        assert_eq!(
            problem(&format!(
                "{GOOD}\nif: {{all_of: [{{field: a, match: {{type: exact}}}}]}}"
            )),
            "`if.all_of[0]`: `match.value` is required for type exact"
        );
        assert_eq!(
            problem(&format!(
                "{GOOD}\nif: {{all_of: [{{field: a, match: {{type: not}}}}]}}"
            )),
            "`if.all_of[0]`: `match.type: not` needs `inner`, the matcher it negates"
        );
        assert!(
            problem(&format!(
                "{GOOD}\nif: {{all_of: [{{field: a, match: {{type: regex, value: '('}}}}]}}"
            ))
            .starts_with("`if.all_of[0]`: bad regex `(`")
        );
        assert!(
            problem(&format!("{GOOD}\ntimeout: soon"))
                .starts_with("`timeout`: invalid duration `soon`")
        );
        assert_eq!(
            problem(&format!("{GOOD}\ntimeout: 0s")),
            "`timeout` must be above zero"
        );
        assert_eq!(
            problem(&format!("{GOOD}\ntimeout: 2h")),
            "`timeout` is over the limit of 600s"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nasync: true\nfail: closed")),
            "`async: true` and `fail: closed` do not go together: nothing waits for an async \
             hook, so its failure cannot block"
        );
        assert_eq!(
            problem("name: r\nevent: PostToolUse\nasync: true\naction: {type: prompt, text: x}"),
            "a prompt action cannot be async: its text would reach no one"
        );
        assert_eq!(
            problem(&format!("{GOOD}\nfail: maybe")),
            "`fail: maybe` (expected open or closed)"
        );
        assert!(
            problem("name: r\nevent: PostToolUse\nfail: closed\naction: {type: shell, command: x}")
                .starts_with("`fail: closed` is only for events a hook can refuse")
        );
        assert!(
            problem("name: r\nevent: Stop\naction: {type: http, url: 'ftp://x'}")
                .contains("http or https")
        );
    }

    #[test]
    fn a_bad_rule_is_skipped_and_the_others_load() {
        let (rules, problems) = mew(&format!(
            "hooks:\n  - {}\n  - name: bad\n    event: Nope\n    action: {{type: shell, command: x}}\n  - {}\n",
            GOOD.replace('\n', "\n    "),
            GOOD.replace("name: r", "name: s").replace('\n', "\n    ")
        ));
        assert_eq!(
            rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["r", "s"]
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].rule.as_deref(), Some("bad"));
        assert!(
            problems[0]
                .to_string()
                .starts_with("/p/.mew/hooks.yaml: hook `bad` skipped: unknown event `Nope`")
        );
        // A rule without a name is labelled by its place.
        let (_, problems) = mew("hooks:\n  - event: Stop\n");
        assert_eq!(problems[0].rule.as_deref(), Some("#1"));
    }

    #[test]
    fn file_shapes() {
        for empty in ["", "hooks:\n", "hooks: []"] {
            let (rules, problems) = mew(empty);
            assert!(rules.is_empty() && problems.is_empty(), "{empty:?}");
        }
        assert_eq!(
            mew("hooks: 3").1[0].message,
            "`hooks` must be a list of rules"
        );
        assert!(mew("hooks: [").1[0].message.starts_with("invalid YAML"));
        assert_eq!(
            mew("- a").1[0].message,
            "the file must be a mapping with a `hooks:` list"
        );
        assert_eq!(
            mew("hooks: []\nhoks: []").1[0].message,
            "unknown top-level key `hoks` (the file holds one key, `hooks`)"
        );
    }

    fn settings(text: &str) -> (Vec<HookRule>, Vec<HookProblem>) {
        parse_settings(text, &source(Format::ClaudeSettings))
    }

    #[test]
    fn claude_code_settings_are_read_unchanged() {
        let (rules, problems) = settings(
            r#"{
              "permissions": {"allow": ["Bash(ls)"]},
              "hooks": {
                "PreToolUse": [
                  {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]},
                  {"matcher": "Write|Edit", "hooks": [
                    {"type": "command", "command": "a"},
                    {"type": "http", "url": "http://127.0.0.1:1/h", "headers": {"X-Key": "k"}}
                  ]}
                ],
                "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "date", "once": true}]}],
                "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "log", "async": true}]}]
              }
            }"#,
        );
        assert_eq!(problems, []);
        let names: Vec<&str> = rules.iter().map(|rule| rule.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "~/.claude/settings.json#PostToolUse[0][0]",
                "~/.claude/settings.json#PreToolUse[0][0]",
                "~/.claude/settings.json#PreToolUse[1][0]",
                "~/.claude/settings.json#PreToolUse[1][1]",
                "~/.claude/settings.json#UserPromptSubmit[0][0]",
            ]
        );
        let guard = &rules[1];
        assert_eq!(guard.event, HookEvent::PreToolUse);
        assert!(guard.matcher.as_ref().unwrap().is_match_tool("bash"));
        assert!(!guard.matcher.as_ref().unwrap().is_match_tool("write_file"));
        assert_eq!(guard.timeout, Duration::from_secs(5));
        assert!(guard.wants_claude_code_names());
        assert_eq!(rules[2].timeout, DEFAULT_SETTINGS_TIMEOUT);
        assert!(matches!(rules[3].action, Action::Http(_)));
        assert!(rules[4].only_once && rules[4].matcher.is_none());
        assert!(rules[0].run_async);
    }

    #[test]
    fn settings_problems_skip_only_what_is_wrong() {
        let (rules, problems) = settings(
            r#"{"hooks": {
                "InstructionsLoaded": [{"hooks": [{"type": "command", "command": "x"}]}],
                "NoSuchEvent": [{"hooks": [{"type": "command", "command": "x"}]}],
                "PreToolUse": [
                  {"matcher": "(", "hooks": [{"type": "command", "command": "x"}]},
                  {"matcher": "Bash", "hooks": [
                    {"type": "prompt", "prompt": "is it safe?"},
                    {"type": "command"},
                    {"type": "command", "command": "x", "if": "Bash(git"},
                    {"type": "command", "command": "x", "timeout": -1},
                    {"type": "command", "command": "ok"}
                  ]}
                ],
                "SessionStart": [{"hooks": [{"type": "command", "command": "x", "if": "Bash"}]}],
                "Stop": {"hooks": []}
            }}"#,
        );
        assert_eq!(rules.len(), 1);
        let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 9, "{messages:#?}");
        assert!(messages[0].ends_with(
            "hooks for `InstructionsLoaded` skipped: Mew has no such event: Mew loads no \
             CLAUDE.md or rules files into a role's context"
        ));
        assert!(messages[1].ends_with("hooks for `NoSuchEvent` skipped: Mew has no such event"));
        assert!(messages[2].contains(
            "hook `~/.claude/settings.json#PreToolUse[0]` skipped: bad matcher: bad regex `(`"
        ));
        assert!(messages[3].contains("hooks of type `prompt` are not supported"));
        assert!(messages[4].ends_with("a command hook needs `command`"));
        assert!(
            messages[5].contains("`if: Bash(git` is not a permission rule"),
            "{}",
            messages[5]
        );
        assert!(messages[6].ends_with("`timeout` must be a positive number of seconds"));
        assert!(messages[7].ends_with(
            "`if` is tested on tool events only (PreToolUse, PostToolUse, PostToolUseFailure, \
             PermissionRequest); on SessionStart this hook would never run"
        ));
        assert!(messages[8].ends_with("`hooks.Stop` must be a list of {matcher, hooks} entries"));

        // Claude Code allows `async` on any event: it runs, but cannot block.
        let (rules, problems) = settings(
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "async": true}]}],
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                  {"type": "command", "command": "x", "async": true, "if": "Bash(git commit:*)"}]}]}}"#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert!(rules.iter().all(|rule| rule.run_async));
        assert_eq!(
            rules[0]
                .tool_if
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("Bash(git commit:*)")
        );

        assert!(settings("{").1[0].message.starts_with("invalid JSON"));
        assert_eq!(
            settings("[]").1[0].message,
            "a settings file must hold a JSON object"
        );
        let (rules, problems) = settings(r#"{"model": "x"}"#);
        assert!(rules.is_empty() && problems.is_empty());
        assert_eq!(
            settings(r#"{"hooks": 1}"#).1[0].message,
            "`hooks` must be an object of events"
        );
    }

    #[test]
    fn a_matcher_on_an_event_without_a_matcher_field_is_ignored() {
        let (rules, _) = settings(
            r#"{"hooks": {"Stop": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "x"}]}]}}"#,
        );
        assert!(rules[0].matcher.is_none());
        let (rules, _) = settings(
            r#"{"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "x"}]}]}}"#,
        );
        assert!(rules[0].matcher.as_ref().unwrap().is_match("startup"));
    }

    #[test]
    fn standard_files_are_user_then_project_without_duplicates() {
        let files = standard_files(
            Some(Path::new("/nonexistent-home")),
            Path::new("/nonexistent-project"),
        );
        let paths: Vec<String> = files
            .iter()
            .map(|file| file.path.display().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "/nonexistent-home/.mew/hooks.yaml",
                "/nonexistent-home/.claude/settings.json",
                "/nonexistent-project/.mew/hooks.yaml",
                "/nonexistent-project/.claude/settings.json",
                "/nonexistent-project/.claude/settings.local.json",
            ]
        );
        assert_eq!(files[0].scope, Scope::User);
        assert_eq!(files[2].scope, Scope::Project);
        let same = standard_files(
            Some(Path::new("/nonexistent-home")),
            Path::new("/nonexistent-home"),
        );
        assert_eq!(same.len(), 3);
        assert_eq!(
            same[2].path,
            Path::new("/nonexistent-home/.claude/settings.local.json")
        );
        assert_eq!(standard_files(None, Path::new("/p")).len(), 3);
    }

    #[test]
    fn load_reads_files_in_order_and_skips_name_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        fs::create_dir_all(home.join(".mew")).unwrap();
        fs::write(
            home.join(".mew/hooks.yaml"),
            "hooks:\n  - name: a\n    event: Stop\n    action: {type: prompt, text: user}\n",
        )
        .unwrap();
        let other = dir.path().join("other.yaml");
        fs::write(
            &other,
            "hooks:\n  - name: a\n    event: Stop\n    action: {type: prompt, text: later}\n  - name: b\n    event: Stop\n    action: {type: prompt, text: b}\n",
        )
        .unwrap();
        let files = [
            HookFile::new(home.join(".mew/hooks.yaml"), Scope::User, Format::Mew),
            HookFile::new(
                home.join(".claude/settings.json"),
                Scope::User,
                Format::ClaudeSettings,
            ),
            HookFile::new(other.clone(), Scope::User, Format::Mew),
        ];
        let loaded = load(&files, &TrustStore::default());
        let names: Vec<&str> = loaded.rules.iter().map(|rule| rule.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(matches!(&loaded.rules[0].action, Action::Prompt { text } if text == "user"));
        assert_eq!(loaded.problems.len(), 1);
        assert_eq!(
            loaded.problems[0].to_string(),
            format!(
                "{}: hook `a` skipped: name conflict with an earlier hook of the same name",
                other.display()
            )
        );
        // The missing settings file is no source; the two others are.
        assert_eq!(loaded.sources.len(), 2);
        assert_eq!(loaded.sources[0].status, SourceStatus::Loaded { rules: 1 });
        assert_eq!(loaded.sources[0].source.hash.len(), 64);
    }
}
