//! Permissions: modes and allow/deny/ask rules that decide whether a tool call may run.
//!
//! [`PermissionPolicy::check`] decides one call, in this order:
//!
//! 1. a matching **deny** rule: [`Decision::Deny`], in every mode, `bypassPermissions` included;
//! 2. `plan` mode and an [`Category::Edit`] tool: `Deny` ("plan mode: no edits"), whatever the
//!    ask and allow rules say, so that a planning role cannot change files;
//! 3. a matching **ask** rule: [`Decision::Ask`]; `bypassPermissions` and `dontAsk` never ask,
//!    so there it is `Allow`;
//! 4. a matching **allow** rule: `Allow`;
//! 5. the mode's default for the tool's [`Category`]:
//!
//! | mode | Read | Edit | Exec |
//! |---|---|---|---|
//! | `default` | Allow | Ask | Ask |
//! | `acceptEdits` | Allow | Allow | Ask |
//! | `plan` | Allow | Deny | Deny |
//! | `bypassPermissions` | Allow | Allow | Allow |
//! | `dontAsk` | Allow | Allow | Allow |
//!
//! `dontAsk` is the seed's sub-agent switch: it approves every call that no deny rule refuses
//! (ask rules included). Note that Claude Code's `dontAsk` means the opposite (refuse what is
//! not pre-approved); the configuration loader therefore refuses `defaultMode: dontAsk` in
//! `.claude/settings.json`.
//!
//! Rules are written as in Claude Code (`bash(git *)`, `Bash(npm run test:*)`,
//! `edit_file(src/**)`, `mcp__github`); see [`rules`] for the syntax and how arguments match,
//! and [`crate::matcher`] for the string conditions that hooks share with the rules.
//!
//! The rules are parsed once, when the configuration is loaded ([`PermissionsConfig`] holds
//! them compiled), so a bad rule is an error of the file that holds it, never of a call.

pub(crate) mod rules;

#[cfg(test)]
mod tests;

use std::path::Path;

use mew_cards::PermissionMode;
use serde::Serialize;
use serde_json::Value;

use self::rules::{Call, Dirs, Rule, Subject, canonical_tool};
use crate::tools::Category;

/// `permissions:` — the default permission mode and the rules that allow, deny or ask about
/// tool calls (syntax and order: this module's docs).
///
/// The rule lists of every layer apply together: unlike other lists, which the higher layer
/// replaces, `allow`, `deny` and `ask` are the union of the user file, the project's
/// `.claude/settings.json` (its `permissions` object, if the file exists), the project file and
/// `--config`, lowest first, without duplicates. `mode` is replaced as usual. A bad rule is an
/// error that names the file, the line of the list and the rule.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PermissionsConfig {
    /// The mode for roles that do not set `permissionMode`.
    pub mode: PermissionMode,
    /// Rules whose calls run without asking.
    pub allow: Vec<Rule>,
    /// Rules whose calls are refused, in every mode.
    pub deny: Vec<Rule>,
    /// Rules whose calls are asked about even when an allow rule matches.
    pub ask: Vec<Rule>,
}

/// What to do with a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) enum Decision {
    /// Run it.
    Allow,
    /// Refuse it; the model is told the reason.
    Deny {
        /// Why, naming the rule or the mode.
        reason: String,
    },
    /// Ask the user (over A2A: the task becomes INPUT_REQUIRED with the question).
    Ask {
        /// What the tool wants to do, in one line.
        question: String,
    },
}

/// The permission rules cannot be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) enum PermissionError {
    /// A `~/` path pattern with no home directory to anchor it.
    #[error("permissions.{list}: rule `{rule}` starts with ~ but no home directory is known")]
    NoHome {
        /// `allow`, `deny` or `ask`.
        list: &'static str,
        /// The rule as written.
        rule: String,
    },
}

/// Decides tool calls from the configured rules and the caller's mode. Cheap to share: it holds
/// compiled rules and no state.
#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) struct PermissionPolicy {
    mode: PermissionMode,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
    dirs: Dirs,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
impl PermissionPolicy {
    /// The policy for the rules of `config`. Relative tool paths and relative path patterns resolve
    /// against `project_dir` (absolute; the directory the file tools resolve relative paths
    /// against); `~/` patterns against `home_dir`.
    pub(crate) fn new(
        config: &PermissionsConfig,
        project_dir: &Path,
        home_dir: Option<&Path>,
    ) -> Result<Self, PermissionError> {
        let dirs = Dirs {
            project: rules::resolve_path(Path::new("/"), project_dir),
            home: home_dir.map(|home| rules::resolve_path(Path::new("/"), home)),
        };
        let anchored = |list: &'static str, rules: &[Rule]| match rules
            .iter()
            .find(|rule| rule.needs_home() && dirs.home.is_none())
        {
            Some(rule) => Err(PermissionError::NoHome {
                list,
                rule: rule.to_string(),
            }),
            None => Ok(rules.to_vec()),
        };
        Ok(Self {
            mode: config.mode,
            deny: anchored("deny", &config.deny)?,
            ask: anchored("ask", &config.ask)?,
            allow: anchored("allow", &config.allow)?,
            dirs,
        })
    }

    /// The configured default mode (`permissions.mode`), for roles that do not set one.
    pub(crate) fn default_mode(&self) -> PermissionMode {
        self.mode
    }

    /// Decides a call of `tool` (its Mew name; Claude Code's names are accepted too) with
    /// `input`, in `mode`. `category` is the tool's own (see [`category_for`] for MCP tools).
    pub(crate) fn check(
        &self,
        mode: PermissionMode,
        tool: &str,
        category: Category,
        input: &Value,
    ) -> Decision {
        let call = Call::new(canonical_tool(tool), input, &self.dirs);
        if let Some(rule) = self
            .deny
            .iter()
            .find(|rule| rule.matches(&call, &self.dirs))
        {
            return Decision::Deny {
                reason: format!("denied by permission rule `{rule}`"),
            };
        }
        if mode == PermissionMode::Plan && category == Category::Edit {
            return plan_denial(category);
        }
        if self.ask.iter().any(|rule| rule.matches(&call, &self.dirs)) {
            return match mode {
                PermissionMode::BypassPermissions | PermissionMode::DontAsk => Decision::Allow,
                _ => self.ask_about(&call, input),
            };
        }
        if self.allowed(&call) {
            return Decision::Allow;
        }
        match (mode, category) {
            (_, Category::Read | Category::Delegate)
            | (PermissionMode::BypassPermissions | PermissionMode::DontAsk, _)
            | (PermissionMode::AcceptEdits, Category::Edit) => Decision::Allow,
            (PermissionMode::Plan, _) => plan_denial(category),
            (PermissionMode::Default | PermissionMode::AcceptEdits, _) => {
                self.ask_about(&call, input)
            }
        }
    }

    /// The ask rule that matches a call, if one does (what a question names as its cause;
    /// without one, the mode's default asked).
    pub(crate) fn ask_rule(&self, tool: &str, input: &Value) -> Option<String> {
        let call = Call::new(canonical_tool(tool), input, &self.dirs);
        self.ask
            .iter()
            .find(|rule| rule.matches(&call, &self.dirs))
            .map(ToString::to_string)
    }

    /// Whether allow rules approve the call. A command is approved by a tool-wide rule
    /// (`bash`), or piece by piece: every simple command in it matched by some allow rule, and
    /// no substitutions.
    fn allowed(&self, call: &Call) -> bool {
        match &call.subject {
            Subject::Command { pieces, opaque, .. } => {
                let tool_wide = self
                    .allow
                    .iter()
                    .any(|rule| rule.is_tool_wide() && rule.matches_tool(&call.tool));
                tool_wide
                    || (!*opaque
                        && !pieces.is_empty()
                        && pieces.iter().all(|piece| {
                            self.allow
                                .iter()
                                .any(|rule| rule.matches_piece(&call.tool, piece))
                        }))
            }
            Subject::Path(_) | Subject::Json(_) | Subject::Url { .. } => {
                self.allow.iter().any(|rule| rule.matches(call, &self.dirs))
            }
        }
    }

    /// The question for a call: what the tool wants to do, in one line.
    fn ask_about(&self, call: &Call, input: &Value) -> Decision {
        let tool = &call.tool;
        let text = |field: &str| input.get(field).and_then(Value::as_str).unwrap_or("");
        let question = match &call.subject {
            Subject::Command { whole, .. } => format!("{tool} wants to run: {whole}"),
            Subject::Path(path) => {
                let shown = match path.strip_prefix(&self.dirs.project) {
                    Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
                    Ok(relative) => relative.display().to_string(),
                    Err(_) => path.display().to_string(),
                };
                match tool.as_str() {
                    "edit_file" | "multi_edit" => format!("{tool} wants to change {shown}"),
                    "write_file" => format!("{tool} wants to write {shown}"),
                    "read_file" => format!("{tool} wants to read {shown}"),
                    "grep" => format!("{tool} wants to search {shown} for `{}`", text("pattern")),
                    "ls" => format!("{tool} wants to list {shown}"),
                    _ => format!(
                        "{tool} wants to list files matching `{}` in {shown}",
                        text("pattern")
                    ),
                }
            }
            Subject::Url { url, .. } => format!("{tool} wants to fetch {}", shorten(url, 200)),
            Subject::Json(_) if tool == "web_search" => format!(
                "{tool} wants to search the web for `{}`",
                shorten(text("query"), 200)
            ),
            Subject::Json(json) => format!("{tool} wants to run with {}", shorten(json, 200)),
        };
        Decision::Ask { question }
    }
}

/// The refusal of `plan` mode.
fn plan_denial(category: Category) -> Decision {
    let what = match category {
        Category::Edit => "no edits",
        Category::Read | Category::Exec | Category::Delegate => "no commands",
    };
    Decision::Deny {
        reason: format!("plan mode: {what}"),
    }
}

/// At most `limit` characters of `text`, with `…` when cut.
fn shorten(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The category of a tool that does not state one, such as an MCP tool (the seed's
/// `categorize(name, readOnly)`): a read-only hint makes it [`Category::Read`], the file-editing
/// tools (`edit_file`, `multi_edit`, `write_file`) are [`Category::Edit`], and everything else is
/// [`Category::Exec`], the strictest. An MCP tool is read-only only when the server says so
/// (`readOnlyHint`); nothing is guessed from names.
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) fn category_for(tool: &str, read_only_hint: bool) -> Category {
    match canonical_tool(tool) {
        "edit_file" | "multi_edit" | "write_file" => Category::Edit,
        _ if read_only_hint => Category::Read,
        _ => Category::Exec,
    }
}
