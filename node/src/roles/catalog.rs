//! The role catalog: builtin, user, project and Claude Code agent files, later layers overriding earlier ones.
//!
//! [`RoleCatalog::load`] reads the layers in this order, a role in a later layer replacing the role of
//! the same name from an earlier one:
//!
//! 1. builtin: `Explore`, `Plan` and `general-purpose`, compiled in from `builtin/*.md`;
//! 2. plugin: the `agents` of installed Claude Code plugins (see [`crate::plugins`]), each
//!    a layer, so the user's and the project's own roles win over a plugin's;
//! 3. claude-user: `~/.claude/agents/`, the user's Claude Code agents;
//! 4. user: `~/.mew/agents/`, which wins over the user's Claude Code agent of that name;
//! 5. claude-project: `<project>/.claude/agents/`, so Claude Code agent files work unchanged;
//! 6. project: `<project>/.mew/agents/`, which wins over `.claude/agents/` of the same project;
//! 7. extra directories, in the order given, each a layer of its own.
//!
//! The Claude Code layers (plugins' too) are read with their subdirectories, as Claude Code reads them
//! (collections are filed by topic: `.claude/agents/review/security.md`), at most
//! [`MAX_CLAUDE_DEPTH`] levels down, skipping directories whose names start with `.`; a
//! role's name is its `name`, wherever the file is. Mew's own directories are flat: a
//! subdirectory there may hold a command role's scripts.
//!
//! Nothing in a role file can stop the node: a file that cannot be read or parsed becomes a
//! [`Problem`] and is skipped, and the earlier layers' role of that name, if any, stays.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mew_cards::{RoleDefinition, RoleSource, RoleWarning, parse_role};
use serde::{Deserialize, Serialize};

/// The builtin role files, as (display path, text). Their display paths are not file paths.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
const BUILTIN_ROLES: [(&str, &str); 3] = [
    ("builtin/explore.md", include_str!("builtin/explore.md")),
    ("builtin/plan.md", include_str!("builtin/plan.md")),
    (
        "builtin/general-purpose.md",
        include_str!("builtin/general-purpose.md"),
    ),
];

/// Largest role file read, in bytes; a larger one is a problem, not a role.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
const MAX_ROLE_FILE_BYTES: u64 = crate::user_file::MAX_USER_FILE_BYTES;

/// How many levels of subdirectories of a Claude Code agents directory are read.
const MAX_CLAUDE_DEPTH: u32 = 4;

/// The directories roles are loaded from, besides the builtin ones. `None` skips a layer.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RoleDirs {
    /// The user's Claude Code agents, `~/.claude/agents`.
    pub(crate) claude_user: Option<PathBuf>,
    /// The user's roles, `~/.mew/agents`.
    pub(crate) user: Option<PathBuf>,
    /// The project's roles, `<project>/.mew/agents`.
    pub(crate) project: Option<PathBuf>,
    /// The project's Claude Code agents, `<project>/.claude/agents`.
    pub(crate) claude_project: Option<PathBuf>,
    /// Further directories (from configuration or the command line), loaded last, in order, as
    /// [`RoleSource::User`]: the user named them.
    pub(crate) extra: Vec<PathBuf>,
    /// The agent folders of installed plugins, loaded first after the builtin roles, as
    /// Claude Code agent files ([`RoleSource::Plugin`]).
    pub(crate) plugins: Vec<PathBuf>,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the node
impl RoleDirs {
    /// The standard directories for a home directory (if known) and a project root.
    ///
    /// When the project is the home directory, its `.mew/agents` and `.claude/agents` are the
    /// user layers only, so the same files are not loaded twice.
    pub(crate) fn standard(home: Option<&Path>, project: &Path) -> Self {
        let user = home.map(|home| home.join(".mew").join("agents"));
        let claude_user = home.map(|home| home.join(".claude").join("agents"));
        let project_dir = project.join(".mew").join("agents");
        let claude_project = project.join(".claude").join("agents");
        Self {
            project: (user.as_ref() != Some(&project_dir)).then_some(project_dir),
            claude_project: (claude_user.as_ref() != Some(&claude_project))
                .then_some(claude_project),
            user,
            claude_user,
            extra: Vec::new(),
            plugins: Vec::new(),
        }
    }
}

impl RoleDirs {
    /// What the role files of these directories look like now: a new stamp means a role file
    /// was added, changed or removed.
    pub(crate) fn stamp(&self) -> crate::user_file::Stamp {
        let mut stamp = crate::user_file::Stamp::default();
        for dir in [&self.claude_user, &self.claude_project]
            .into_iter()
            .flatten()
            .chain(&self.plugins)
        {
            stamp.add_dir(dir, MAX_CLAUDE_DEPTH);
        }
        for dir in [&self.user, &self.project]
            .into_iter()
            .flatten()
            .chain(&self.extra)
        {
            stamp.add_dir(dir, 0);
        }
        stamp
    }
}

/// How bad a [`Problem`] is.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
    /// The role loaded, with a value replaced by a default or ignored.
    Warning,
    /// The file, or the directory, was skipped.
    Error,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the node
impl Severity {
    /// Lowercase name, as shown to users.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something wrong with a role file or directory, met while loading the catalog.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Problem {
    /// Display path of the file or directory.
    pub(crate) path: String,
    /// Whether the file was skipped.
    pub(crate) severity: Severity,
    /// What is wrong.
    pub(crate) message: String,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the node
impl Problem {
    fn error(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            severity: Severity::Error,
            message: message.into(),
        }
    }
}

impl From<RoleWarning> for Problem {
    fn from(warning: RoleWarning) -> Self {
        Self {
            path: warning.path,
            severity: Severity::Warning,
            message: warning.message,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.severity, self.path, self.message)
    }
}

/// Every role the node knows, by name, with what was shadowed and what went wrong on the way.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RoleCatalog {
    roles: BTreeMap<String, Arc<RoleDefinition>>,
    /// Per name, the (source, path) of each definition a later layer replaced, earliest first.
    shadowed: BTreeMap<String, Vec<(RoleSource, String)>>,
    problems: Vec<Problem>,
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the node
impl RoleCatalog {
    /// Loads the builtin roles, then each directory of `dirs` (see the module docs for the
    /// order). Never fails: what goes wrong is in [`RoleCatalog::problems`].
    ///
    /// In each directory only `*.md` regular files (or symlinks to them) are read, in sorted
    /// file-name order; dot-files and subdirectories are skipped, and a missing directory is
    /// not a problem. When two files of one directory define the same name, the first wins.
    pub(crate) fn load(dirs: &RoleDirs) -> Self {
        let mut catalog = Self::default();
        let builtin = BUILTIN_ROLES
            .iter()
            .map(|&(path, text)| (path.to_owned(), Ok(text.to_owned())))
            .collect();
        catalog.add_layer(RoleSource::Builtin, builtin);
        let plugins = dirs
            .plugins
            .iter()
            .map(|dir| (RoleSource::Plugin, dir.as_path()));
        let layers = plugins.chain(
            [
                (RoleSource::ClaudeUser, dirs.claude_user.as_deref()),
                (RoleSource::User, dirs.user.as_deref()),
                (RoleSource::ClaudeProject, dirs.claude_project.as_deref()),
                (RoleSource::Project, dirs.project.as_deref()),
            ]
            .into_iter()
            .filter_map(|(source, dir)| dir.map(|dir| (source, dir)))
            .chain(
                dirs.extra
                    .iter()
                    .map(|dir| (RoleSource::User, dir.as_path())),
            ),
        );
        for (source, dir) in layers {
            let depth = match source {
                RoleSource::ClaudeUser | RoleSource::ClaudeProject | RoleSource::Plugin => {
                    MAX_CLAUDE_DEPTH
                }
                _ => 0,
            };
            // A plugin's manifest may name its agent files one by one.
            let files = if source == RoleSource::Plugin && dir.is_file() {
                vec![(dir.display().to_string(), read_role_file(dir))]
            } else {
                catalog.read_dir(dir, depth)
            };
            catalog.add_layer(source, files);
        }
        catalog
    }

    /// This catalog, read again after a change, with what could not be read taken from
    /// `previous`: a role whose file is now broken (or unreadable) stays as it last loaded, and
    /// its problem says so, rather than disappearing or falling back to a role it had
    /// replaced. A file that was removed takes its role with it.
    pub(crate) fn keeping_last_good(mut self, previous: &RoleCatalog) -> Self {
        for problem in &mut self.problems {
            if problem.severity != Severity::Error {
                continue;
            }
            let Some(good) = previous.roles().find(|role| role.path == problem.path) else {
                continue;
            };
            // Only where the broken file's role would have won: not gone to another file of a
            // higher layer, not renamed in a file that loads.
            let surfaced = self.roles.get(&good.name);
            let fell_back = surfaced.is_none_or(|now| {
                previous
                    .shadowed(&good.name)
                    .iter()
                    .any(|(_, path)| *path == now.path)
            });
            if !fell_back {
                continue;
            }
            if let Some(replaced) = self.roles.insert(good.name.clone(), good.clone()) {
                self.shadowed
                    .entry(good.name.clone())
                    .or_default()
                    .push((replaced.source, replaced.path.clone()));
            }
            problem.message = format!(
                "{}; role {:?} keeps its last good version",
                problem.message, good.name
            );
        }
        self
    }

    /// The role called `name` (case-sensitive).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<RoleDefinition>> {
        self.roles.get(name).cloned()
    }

    /// Every role, sorted by name.
    pub(crate) fn roles(&self) -> impl Iterator<Item = &Arc<RoleDefinition>> {
        self.roles.values()
    }

    /// The roles advertised to peers (`publish: true`, the default), sorted by name.
    pub(crate) fn published(&self) -> impl Iterator<Item = &Arc<RoleDefinition>> {
        self.roles().filter(|role| role.publish)
    }

    /// What went wrong while loading, in the order met.
    pub(crate) fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The (source, path) of each definition of `name` that a later layer replaced, earliest
    /// first; empty when nothing was shadowed.
    pub(crate) fn shadowed(&self, name: &str) -> &[(RoleSource, String)] {
        self.shadowed.get(name).map_or(&[], Vec::as_slice)
    }

    /// How many roles there are.
    pub(crate) fn len(&self) -> usize {
        self.roles.len()
    }

    /// Parses one layer's files, given as (display path, text or read error), into the catalog.
    fn add_layer(&mut self, source: RoleSource, files: Vec<(String, Result<String, String>)>) {
        // Name -> path of the file that defined it in this layer.
        let mut in_layer: HashMap<String, String> = HashMap::new();
        for (path, text) in files {
            let text = match text {
                Ok(text) => text,
                Err(message) => {
                    self.problems.push(Problem::error(path, message));
                    continue;
                }
            };
            let parsed = match parse_role(&text, &path, source) {
                Ok(parsed) => parsed,
                Err(err) => {
                    self.problems
                        .push(Problem::error(path, err.kind.to_string()));
                    continue;
                }
            };
            let role = parsed.definition;
            if let Some(first) = in_layer.get(&role.name) {
                self.problems.push(Problem::error(
                    path,
                    format!(
                        "role {:?} is already defined by {first} in the same directory; \
                         this file is skipped",
                        role.name
                    ),
                ));
                continue;
            }
            self.problems
                .extend(parsed.warnings.into_iter().map(Problem::from));
            if let Some(message) = missing_tools(&role) {
                self.problems.push(Problem {
                    path: path.clone(),
                    severity: Severity::Warning,
                    message,
                });
            }
            in_layer.insert(role.name.clone(), path);
            let name = role.name.clone();
            if let Some(previous) = self.roles.insert(name.clone(), Arc::new(role)) {
                self.shadowed
                    .entry(name)
                    .or_default()
                    .push((previous.source, previous.path.clone()));
            }
        }
    }

    /// The role files of `dir`, in file-name order, then those of its subdirectories (in name
    /// order, `depth` levels down, not those starting with `.`), as (display path, text or
    /// read error). Problems with the directories themselves are recorded here.
    fn read_dir(&mut self, dir: &Path, depth: u32) -> Vec<(String, Result<String, String>)> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(err) => {
                self.problems.push(Problem::error(
                    dir.display().to_string(),
                    format!("cannot read the directory: {err}"),
                ));
                return Vec::new();
            }
        };
        let mut names: Vec<OsString> = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => names.push(entry.file_name()),
                Err(err) => self.problems.push(Problem::error(
                    dir.display().to_string(),
                    format!("cannot list the directory: {err}"),
                )),
            }
        }
        names.sort();
        // Directories (even one called `x.md`) hold no role; anything else that is not a
        // regular file (a FIFO, a device) is reported when it is read.
        let (subdirs, names): (Vec<OsString>, Vec<OsString>) = names
            .into_iter()
            .partition(|name| fs::metadata(dir.join(name)).is_ok_and(|m| m.is_dir()));
        let mut files: Vec<_> = names
            .into_iter()
            .filter(|name| is_role_file_name(name))
            .map(|name| {
                let path = dir.join(name);
                let text = read_role_file(&path);
                (path.display().to_string(), text)
            })
            .collect();
        if depth > 0 {
            for subdir in subdirs {
                if !subdir.as_encoded_bytes().starts_with(b".") {
                    files.extend(self.read_dir(&dir.join(subdir), depth - 1));
                }
            }
        }
        files
    }
}

/// The warning for a model role whose `tools` name tools Mew does not provide (Claude Code's
/// `NotebookEdit`, `ExitPlanMode`...): the role runs without them, and may be left with no
/// useful tool, so the user is told which.
fn missing_tools(role: &RoleDefinition) -> Option<String> {
    if role.is_command() || role.is_remote() {
        return None;
    }
    let unknown = crate::tools::registry::unknown_tools(&role.tools);
    if unknown.is_empty() {
        return None;
    }
    let left = role.tools.len() - unknown.len();
    let (noun, verb) = if unknown.len() == 1 {
        ("tool", "is")
    } else {
        ("tools", "are")
    };
    Some(format!(
        "{noun} {} {verb} not provided by Mew; the role runs without {}{}",
        unknown.join(", "),
        if unknown.len() == 1 { "it" } else { "them" },
        if left == 0 {
            ", with none of the tools it lists"
        } else {
            ""
        }
    ))
}

/// True for `*.md` names that do not start with a dot.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
fn is_role_file_name(name: &OsStr) -> bool {
    !name.as_encoded_bytes().starts_with(b".")
        && Path::new(name).extension().is_some_and(|ext| ext == "md")
}

/// Reads a role file; the message says what is wrong with one that cannot be read (a FIFO
/// or device is reported, never opened).
fn read_role_file(path: &Path) -> Result<String, String> {
    crate::user_file::read_text(path, MAX_ROLE_FILE_BYTES).map_err(|err| match err {
        // Listed a moment ago: a symlink that points nowhere.
        crate::user_file::ReadError::NotFound => {
            "cannot read the file: it is a link to nothing".to_owned()
        }
        err => err.to_string(),
    })
}

/// `llm` or `command`: what serves the role.
#[cfg_attr(not(test), allow(dead_code))] // wired by the node
fn kind(role: &RoleDefinition) -> &'static str {
    if role.is_command() {
        "command"
    } else if role.is_remote() {
        "remote"
    } else {
        "llm"
    }
}

/// The catalog as `mew agents` shows it and a running node's `/status` reports it (under
/// `catalog`): one form, rendered the same whether it was read from files or from a node.
///
/// As JSON: `{"roles": [{"name", "kind", "source", "path", "published", "description",
/// "shadowed": [{"source", "path"}]}], "problems": [{"path", "severity", "message"}]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Listing {
    /// Every role, by name.
    pub(crate) roles: Vec<ListedRole>,
    /// What went wrong loading them.
    pub(crate) problems: Vec<Problem>,
}

/// One role of a [`Listing`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ListedRole {
    /// Its name.
    pub(crate) name: String,
    /// `command`, `remote` or `llm`.
    pub(crate) kind: String,
    /// The layer it was loaded from.
    pub(crate) source: String,
    /// Its file.
    pub(crate) path: String,
    /// Whether the node publishes it.
    pub(crate) published: bool,
    /// Its description.
    pub(crate) description: String,
    /// The definitions it replaced, earliest first.
    pub(crate) shadowed: Vec<ShadowedFile>,
}

/// A definition a later layer replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ShadowedFile {
    /// Its layer.
    pub(crate) source: String,
    /// Its file.
    pub(crate) path: String,
}

impl Listing {
    /// The listing of `catalog`.
    pub(crate) fn of(catalog: &RoleCatalog) -> Self {
        Self {
            roles: catalog
                .roles()
                .map(|role| ListedRole {
                    name: role.name.clone(),
                    kind: kind(role).to_owned(),
                    source: role.source.as_str().to_owned(),
                    path: role.path.clone(),
                    published: role.publish,
                    description: role.description.clone(),
                    shadowed: catalog
                        .shadowed(&role.name)
                        .iter()
                        .map(|(source, path)| ShadowedFile {
                            source: source.as_str().to_owned(),
                            path: path.clone(),
                        })
                        .collect(),
                })
                .collect(),
            problems: catalog.problems().to_vec(),
        }
    }

    /// The output of `mew agents`, ending with a newline: with `json`, the listing as JSON;
    /// else one line per role (name, kind, source, published, path), an indented line per
    /// definition it shadows, then a `problems:` section when there are any.
    pub(crate) fn render(&self, json: bool) -> String {
        if json {
            return format!(
                "{:#}\n",
                serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
            );
        }
        const HEADER: [&str; 5] = ["NAME", "KIND", "SOURCE", "PUBLISHED", "PATH"];
        let rows: Vec<[&str; 5]> = self
            .roles
            .iter()
            .map(|role| {
                [
                    role.name.as_str(),
                    role.kind.as_str(),
                    role.source.as_str(),
                    if role.published { "yes" } else { "no" },
                    role.path.as_str(),
                ]
            })
            .collect();
        let mut widths = HEADER.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &[&str; 5]| {
            let mut line = String::new();
            for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            line.push('\n');
            line
        };

        let mut out = String::new();
        if rows.is_empty() {
            out.push_str("no roles\n");
        } else {
            out.push_str(&line(&HEADER));
            for (row, role) in rows.iter().zip(&self.roles) {
                out.push_str(&line(row));
                for shadowed in &role.shadowed {
                    out.push_str(&format!(
                        "  shadows {} {}\n",
                        shadowed.source, shadowed.path
                    ));
                }
            }
        }
        if !self.problems.is_empty() {
            out.push_str("\nproblems:\n");
            for problem in &self.problems {
                out.push_str(&format!("  {problem}\n"));
            }
        }
        out
    }
}

/// The output of `mew agents` for `catalog` (see [`Listing::render`]).
pub(crate) fn render_agents(catalog: &RoleCatalog, json: bool) -> String {
    Listing::of(catalog).render(json)
}

/// The catalog as `mew agents --json` prints it, and a running node's `/status` reports it
/// (under `catalog`).
pub(crate) fn catalog_json(catalog: &RoleCatalog) -> serde_json::Value {
    serde_json::to_value(Listing::of(catalog)).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mew_cards::{ModelChoice, PermissionMode};
    use serde_json::json;

    fn write(dir: &Path, file: &str, text: impl AsRef<[u8]>) -> PathBuf {
        fs::create_dir_all(dir).unwrap();
        let path = dir.join(file);
        fs::write(&path, text).unwrap();
        path
    }

    fn role(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nYou are {name}.\n")
    }

    fn display(path: &Path) -> String {
        path.display().to_string()
    }

    fn only(dir: &Path) -> RoleDirs {
        RoleDirs {
            project: Some(dir.to_path_buf()),
            ..RoleDirs::default()
        }
    }

    #[test]
    fn builtin_files_parse_without_warnings() {
        for (path, text) in BUILTIN_ROLES {
            let parsed = parse_role(text, path, RoleSource::Builtin).unwrap();
            assert_eq!(parsed.warnings, Vec::new(), "{path}");
            assert!(parsed.definition.extra.is_empty(), "{path}");
            assert!(!parsed.definition.tags.is_empty(), "{path}");
            assert!(
                (1..=2).contains(&parsed.definition.examples.len()),
                "{path}"
            );
        }
    }

    #[test]
    fn builtins_have_the_seed_fields() {
        let catalog = RoleCatalog::load(&RoleDirs::default());
        assert_eq!(catalog.problems(), &[]);
        assert_eq!(catalog.len(), 3);
        let names: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["Explore", "Plan", "general-purpose"]);

        let explore = catalog.get("Explore").unwrap();
        assert_eq!(explore.source, RoleSource::Builtin);
        assert_eq!(explore.path, "builtin/explore.md");
        assert_eq!(explore.model, ModelChoice::Haiku);
        assert_eq!(explore.max_turns, 30);
        assert_eq!(explore.disallowed_tools, ["write_file", "edit_file"]);
        assert!(explore.tools.is_empty());
        assert_eq!(explore.permission_mode, PermissionMode::Default);
        assert_eq!(explore.tags, ["explore", "read-only", "search"]);
        assert!(explore.system_prompt.contains("read-only task"));
        assert!(explore.publish);
        assert!(!explore.is_command());

        let plan = catalog.get("Plan").unwrap();
        assert_eq!(plan.max_turns, 15);
        assert_eq!(plan.permission_mode, PermissionMode::Plan);
        assert_eq!(plan.disallowed_tools, ["write_file", "edit_file", "Agent"]);
        assert_eq!(plan.model, ModelChoice::Inherit);
        assert_eq!(plan.tags, ["plan", "architecture", "read-only"]);
        assert!(plan.system_prompt.contains("3 to 5 file paths"));

        let general = catalog.get("general-purpose").unwrap();
        assert_eq!(general.max_turns, 30);
        assert!(general.tools.is_empty());
        assert!(general.disallowed_tools.is_empty());
        assert_eq!(general.permission_mode, PermissionMode::Default);
        assert_eq!(general.tags, ["general"]);
        assert_eq!(general.path, "builtin/general-purpose.md");
    }

    #[test]
    fn a_broken_edit_keeps_the_last_good_version_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "helper.md", role("helper", "first"));
        let good = RoleCatalog::load(&only(dir.path()));
        write(dir.path(), "helper.md", "---\nname: [unclosed\n---\nbody\n");
        let reloaded = RoleCatalog::load(&only(dir.path())).keeping_last_good(&good);
        assert_eq!(reloaded.get("helper").unwrap().description, "first");
        let problem = &reloaded.problems()[0];
        assert_eq!(problem.path, display(&file));
        assert!(
            problem
                .message
                .ends_with("role \"helper\" keeps its last good version"),
            "{problem}"
        );

        // Fixed: the new version; removed: gone.
        write(dir.path(), "helper.md", role("helper", "second"));
        let fixed = RoleCatalog::load(&only(dir.path())).keeping_last_good(&reloaded);
        assert_eq!(fixed.get("helper").unwrap().description, "second");
        assert_eq!(fixed.problems(), &[]);
        fs::remove_file(&file).unwrap();
        let removed = RoleCatalog::load(&only(dir.path())).keeping_last_good(&fixed);
        assert!(removed.get("helper").is_none());
    }

    #[test]
    fn a_broken_override_keeps_itself_not_the_role_it_replaced() {
        let (user, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(user.path(), "helper.md", role("helper", "user"));
        write(project.path(), "helper.md", role("helper", "project"));
        let dirs = RoleDirs {
            user: Some(user.path().to_path_buf()),
            project: Some(project.path().to_path_buf()),
            ..RoleDirs::default()
        };
        let good = RoleCatalog::load(&dirs);
        assert_eq!(good.get("helper").unwrap().description, "project");
        write(project.path(), "helper.md", "not a role file\n");
        let reloaded = RoleCatalog::load(&dirs).keeping_last_good(&good);
        assert_eq!(reloaded.get("helper").unwrap().description, "project");
    }

    #[test]
    fn the_stamp_changes_with_a_file_added_rewritten_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = only(&dir.path().join("agents"));
        let empty = dirs.stamp();
        assert_eq!(empty, dirs.stamp(), "nothing changed, the same stamp");
        let file = write(&dir.path().join("agents"), "a.md", role("a", "x"));
        let added = dirs.stamp();
        assert_ne!(added, empty);
        fs::write(&file, role("a", "a longer description")).unwrap();
        let rewritten = dirs.stamp();
        assert_ne!(rewritten, added);
        fs::remove_file(&file).unwrap();
        assert_eq!(dirs.stamp(), empty);
    }

    #[test]
    fn get_is_case_sensitive() {
        let catalog = RoleCatalog::load(&RoleDirs::default());
        assert!(catalog.get("Explore").is_some());
        assert!(catalog.get("explore").is_none());
        assert!(catalog.get("plan").is_none());
    }

    #[test]
    fn later_layers_override_earlier_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let project = tmp.path().join("project");
        let extra = tmp.path().join("extra");
        let user_dir = home.join(".mew/agents");
        let claude_dir = project.join(".claude/agents");
        let project_dir = project.join(".mew/agents");

        let user_explore = write(&user_dir, "explore.md", role("Explore", "user explore"));
        write(&user_dir, "mine.md", role("mine", "user only"));
        let user_plan = write(&user_dir, "plan.md", role("Plan", "user plan"));
        let claude_explore = write(&claude_dir, "explore.md", role("Explore", "claude"));
        let project_explore = write(&project_dir, "explore.md", role("Explore", "project"));
        let extra_general = write(&extra, "gp.md", role("general-purpose", "extra gp"));

        let mut dirs = RoleDirs::standard(Some(&home), &project);
        dirs.extra.push(extra.clone());
        let catalog = RoleCatalog::load(&dirs);
        assert_eq!(catalog.problems(), &[]);
        assert_eq!(catalog.len(), 4);

        let explore = catalog.get("Explore").unwrap();
        assert_eq!(explore.source, RoleSource::Project);
        assert_eq!(explore.description, "project");
        assert_eq!(explore.path, display(&project_explore));
        assert_eq!(
            catalog.shadowed("Explore"),
            &[
                (RoleSource::Builtin, "builtin/explore.md".to_owned()),
                (RoleSource::User, display(&user_explore)),
                (RoleSource::ClaudeProject, display(&claude_explore)),
            ]
        );

        let plan = catalog.get("Plan").unwrap();
        assert_eq!(plan.source, RoleSource::User);
        assert_eq!(plan.description, "user plan");
        assert_eq!(plan.path, display(&user_plan));
        assert_eq!(
            catalog.shadowed("Plan"),
            &[(RoleSource::Builtin, "builtin/plan.md".to_owned())]
        );

        let general = catalog.get("general-purpose").unwrap();
        assert_eq!(general.description, "extra gp");
        assert_eq!(general.source, RoleSource::User);
        assert_eq!(general.path, display(&extra_general));

        let mine = catalog.get("mine").unwrap();
        assert_eq!(mine.source, RoleSource::User);
        assert_eq!(catalog.shadowed("mine"), &[]);
    }

    #[test]
    fn tools_mew_does_not_provide_are_named_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let researcher = write(
            dir.path(),
            "researcher.md",
            "---\nname: researcher\ndescription: d\ntools: Read, WebFetch, WebSearch, \
             NotebookRead, mcp__search__query, Bash(git:*), ExitPlanMode\n---\nYou research.\n",
        );
        let writer = write(
            dir.path(),
            "writer.md",
            "---\nname: writer\ndescription: d\ntools: [NotebookEdit]\n---\nYou write.\n",
        );
        write(
            dir.path(),
            "fine.md",
            "---\nname: fine\ndescription: d\ntools: [Read, Task, Agent, LoadSkill, MultiEdit, LS, \
             WebFetch, WebSearch, TodoWrite]\n---\nOk.\n",
        );
        let catalog = RoleCatalog::load(&only(dir.path()));
        let problems: Vec<(String, Severity, String)> = catalog
            .problems()
            .iter()
            .map(|p| (p.path.clone(), p.severity, p.message.clone()))
            .collect();
        assert_eq!(
            problems,
            [
                (
                    display(&researcher),
                    Severity::Warning,
                    "tools NotebookRead, ExitPlanMode are not provided by Mew; the role runs \
                     without them"
                        .to_owned()
                ),
                (
                    display(&writer),
                    Severity::Warning,
                    "tool NotebookEdit is not provided by Mew; the role runs without it, with \
                     none of the tools it lists"
                        .to_owned()
                ),
            ]
        );
        assert_eq!(catalog.len(), BUILTIN_ROLES.len() + 3);
    }

    #[test]
    fn claude_code_agents_load_from_subdirectories_and_the_users_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let (home, project) = (tmp.path().join("home"), tmp.path().join("project"));
        let claude_user = home.join(".claude/agents");
        let claude_project = project.join(".claude/agents");
        write(&claude_user, "mine.md", role("mine", "user claude"));
        write(&claude_user, "shared.md", role("shared", "user claude"));
        write(
            &home.join(".mew/agents"),
            "shared.md",
            role("shared", "user mew"),
        );
        write(
            &claude_project.join("review"),
            "security.md",
            role("security", "nested"),
        );
        write(
            &claude_project.join("a/b/c/d"),
            "deep.md",
            role("deep", "four down"),
        );
        write(
            &claude_project.join("a/b/c/d/e"),
            "deeper.md",
            role("deeper", "five down"),
        );
        write(
            &claude_project.join(".hidden"),
            "hidden.md",
            role("hidden", "hidden"),
        );
        write(
            &project.join(".mew/agents/scripts"),
            "flat.md",
            role("flat", "not read"),
        );
        let catalog = RoleCatalog::load(&RoleDirs::standard(Some(&home), &project));
        let mine = catalog.get("mine").unwrap();
        assert_eq!(mine.source, RoleSource::ClaudeUser);
        // Mew's own user directory wins over the user's Claude Code agents.
        assert_eq!(catalog.get("shared").unwrap().description, "user mew");
        assert_eq!(
            catalog.shadowed("shared"),
            [(
                RoleSource::ClaudeUser,
                display(&claude_user.join("shared.md"))
            )]
        );
        let security = catalog.get("security").unwrap();
        assert_eq!(security.source, RoleSource::ClaudeProject);
        assert_eq!(
            security.path,
            display(&claude_project.join("review/security.md"))
        );
        assert!(catalog.get("deep").is_some());
        for skipped in ["deeper", "hidden", "flat"] {
            assert!(catalog.get(skipped).is_none(), "{skipped}");
        }
        // A change in a subdirectory is a change of the catalog.
        let dirs = RoleDirs::standard(Some(&home), &project);
        let before = dirs.stamp();
        write(
            &claude_project.join("review"),
            "style.md",
            role("style", "new"),
        );
        assert_ne!(dirs.stamp(), before);
        // The home as the project: its Claude Code agents are the user layer, read once.
        let dirs = RoleDirs::standard(Some(&home), &home);
        assert_eq!(dirs.claude_project, None);
        assert!(RoleCatalog::load(&dirs).problems().is_empty());
    }

    #[test]
    fn user_explore_overrides_the_builtin_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = RoleDirs {
            user: Some(tmp.path().to_path_buf()),
            ..RoleDirs::default()
        };
        write(
            tmp.path(),
            "Explore.md",
            "---\nname: Explore\ndescription: mine\nmaxTurns: 5\n---\nCustom.\n",
        );
        let catalog = RoleCatalog::load(&dirs);
        let explore = catalog.get("Explore").unwrap();
        assert_eq!(explore.source, RoleSource::User);
        assert_eq!(explore.max_turns, 5);
        assert_eq!(explore.model, ModelChoice::Inherit);
        assert_eq!(explore.system_prompt, "Custom.");
        assert_eq!(catalog.len(), 3);
    }

    #[test]
    fn mew_agents_beat_claude_agents_in_the_same_project() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path();
        // Written in the opposite order to the layers, so file times cannot decide.
        let mew = write(
            &project.join(".mew/agents"),
            "a.md",
            role("reviewer", "mew"),
        );
        let claude = write(
            &project.join(".claude/agents"),
            "a.md",
            role("reviewer", "cc"),
        );
        let catalog = RoleCatalog::load(&RoleDirs::standard(None, project));
        let reviewer = catalog.get("reviewer").unwrap();
        assert_eq!(reviewer.source, RoleSource::Project);
        assert_eq!(reviewer.description, "mew");
        assert_eq!(reviewer.path, display(&mew));
        assert_eq!(
            catalog.shadowed("reviewer"),
            &[(RoleSource::ClaudeProject, display(&claude))]
        );
    }

    #[test]
    fn standard_dirs() {
        let dirs = RoleDirs::standard(Some(Path::new("/home/u")), Path::new("/src/app"));
        assert_eq!(dirs.user, Some(PathBuf::from("/home/u/.mew/agents")));
        assert_eq!(dirs.project, Some(PathBuf::from("/src/app/.mew/agents")));
        assert_eq!(
            dirs.claude_project,
            Some(PathBuf::from("/src/app/.claude/agents"))
        );
        assert_eq!(
            dirs.claude_user,
            Some(PathBuf::from("/home/u/.claude/agents"))
        );
        assert!(dirs.extra.is_empty());

        let no_home = RoleDirs::standard(None, Path::new("/src/app"));
        assert_eq!(no_home.user, None);
        assert_eq!(no_home.project, Some(PathBuf::from("/src/app/.mew/agents")));

        let at_home = RoleDirs::standard(Some(Path::new("/home/u")), Path::new("/home/u"));
        assert_eq!(at_home.user, Some(PathBuf::from("/home/u/.mew/agents")));
        assert_eq!(at_home.project, None);
        assert_eq!(
            at_home.claude_user,
            Some(PathBuf::from("/home/u/.claude/agents"))
        );
        assert_eq!(at_home.claude_project, None);
    }

    #[test]
    fn broken_files_are_problems_and_the_rest_load() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let yaml = write(dir, "a.md", "---\nname: [unclosed\n---\nbody\n");
        let no_desc = write(dir, "b.md", "---\nname: nodesc\n---\nbody\n");
        let no_front = write(dir, "c.md", "just text\n");
        let binary = write(dir, "d.md", b"---\nname: bin\xff\xfe\n---\n");
        write(dir, "e.md", role("good", "works"));
        let catalog = RoleCatalog::load(&only(dir));

        let problems = catalog.problems();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().all(|p| p.severity == Severity::Error));
        assert_eq!(problems[0].path, display(&yaml));
        assert!(
            problems[0]
                .message
                .starts_with("invalid YAML in frontmatter"),
            "{}",
            problems[0].message
        );
        assert_eq!(problems[1].path, display(&no_desc));
        assert_eq!(problems[1].message, "description is required");
        assert_eq!(problems[2].path, display(&no_front));
        assert!(problems[2].message.contains("no YAML frontmatter"));
        assert_eq!(problems[3].path, display(&binary));
        assert!(
            problems[3]
                .message
                .starts_with("the file is not UTF-8 text"),
            "{}",
            problems[3].message
        );

        assert_eq!(catalog.get("good").unwrap().description, "works");
        assert!(catalog.get("nodesc").is_none());
        assert_eq!(catalog.len(), 4);
    }

    #[test]
    fn a_broken_override_keeps_the_earlier_role() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "plan.md",
            "---\nname: Plan\n---\nno description\n",
        );
        let catalog = RoleCatalog::load(&only(tmp.path()));
        let plan = catalog.get("Plan").unwrap();
        assert_eq!(plan.source, RoleSource::Builtin);
        assert_eq!(catalog.problems().len(), 1);
        assert_eq!(catalog.shadowed("Plan"), &[]);
    }

    #[test]
    fn duplicate_name_in_one_layer_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let first = write(tmp.path(), "a.md", role("twin", "first"));
        let second = write(tmp.path(), "b.md", role("twin", "second"));
        let catalog = RoleCatalog::load(&only(tmp.path()));
        assert_eq!(catalog.get("twin").unwrap().description, "first");
        assert_eq!(catalog.shadowed("twin"), &[]);
        assert_eq!(
            catalog.problems(),
            &[Problem {
                path: display(&second),
                severity: Severity::Error,
                message: format!(
                    "role \"twin\" is already defined by {} in the same directory; \
                     this file is skipped",
                    display(&first)
                ),
            }]
        );
    }

    #[test]
    fn bad_name_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let bad = write(tmp.path(), "bad.md", role("9lives", "cat"));
        let slash = write(tmp.path(), "slash.md", role("a/b", "path"));
        let catalog = RoleCatalog::load(&only(tmp.path()));
        assert_eq!(catalog.len(), 3);
        let problems = catalog.problems();
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].path, display(&bad));
        assert!(
            problems[0]
                .message
                .starts_with("name \"9lives\" is invalid")
        );
        assert_eq!(problems[1].path, display(&slash));
        assert!(problems[1].message.starts_with("name \"a/b\" is invalid"));
    }

    #[test]
    fn only_md_regular_files_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "good.md", role("good", "yes"));
        write(dir, ".hidden.md", role("hidden", "no"));
        write(dir, ".md", role("dotmd", "no"));
        write(dir, "notes.txt", role("txt", "no"));
        write(dir, "README", role("readme", "no"));
        write(dir, "good.md.bak", role("bak", "no"));
        write(dir, "upper.MD", role("upper", "no"));
        write(&dir.join("sub.md"), "inner.md", role("inner", "no"));
        write(&dir.join("nested"), "deep.md", role("deep", "no"));
        let catalog = RoleCatalog::load(&only(dir));
        assert_eq!(catalog.problems(), &[]);
        let names: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["Explore", "Plan", "general-purpose", "good"]);
    }

    #[test]
    fn a_fifo_or_a_device_named_like_a_role_is_reported_and_never_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "good.md", role("good", "yes"));
        let fifo = dir.join("pipe.md");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.md")).unwrap();
        // Loading returns (opening the FIFO would block forever) and says what each one is.
        let catalog = RoleCatalog::load(&only(dir));
        assert!(catalog.get("good").is_some());
        let problems: Vec<(&str, &str)> = catalog
            .problems()
            .iter()
            .map(|p| (p.path.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            problems,
            [
                (display(&fifo).as_str(), "it is a FIFO, not a regular file"),
                (
                    display(&dir.join("zero.md")).as_str(),
                    "it is a character device, not a regular file"
                ),
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_and_dangling_ones_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("agents");
        let target = write(tmp.path(), "elsewhere.txt", role("linked", "via link"));
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&target, dir.join("linked.md")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("gone"), dir.join("dangling.md")).unwrap();
        let catalog = RoleCatalog::load(&only(&dir));
        assert_eq!(catalog.get("linked").unwrap().description, "via link");
        let problems = catalog.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, display(&dir.join("dangling.md")));
        assert!(problems[0].message.starts_with("cannot read the file"));
    }

    #[test]
    fn oversized_file_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let mut text = role("big", "huge");
        text.push_str(&"x".repeat(1024 * 1024));
        let big = write(tmp.path(), "big.md", text);
        let catalog = RoleCatalog::load(&only(tmp.path()));
        assert!(catalog.get("big").is_none());
        assert_eq!(
            catalog.problems(),
            &[Problem::error(
                display(&big),
                "the file is larger than 1048576 bytes"
            )]
        );
    }

    #[test]
    fn missing_dirs_are_fine_and_a_file_as_dir_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = RoleDirs::standard(Some(&tmp.path().join("nohome")), tmp.path());
        let catalog = RoleCatalog::load(&missing);
        assert_eq!(catalog.problems(), &[]);
        assert_eq!(catalog.len(), 3);

        let file = write(tmp.path(), "agents", "not a directory");
        let catalog = RoleCatalog::load(&only(&file));
        assert_eq!(catalog.len(), 3);
        assert_eq!(catalog.problems().len(), 1);
        assert_eq!(catalog.problems()[0].path, display(&file));
        assert!(
            catalog.problems()[0]
                .message
                .starts_with("cannot read the directory")
        );
    }

    #[test]
    fn claude_code_agent_file_loads_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let claude_dir = tmp.path().join(".claude/agents");
        write(
            &claude_dir,
            "code-reviewer.md",
            "---\nname: code-reviewer\ndescription: Reviews code for quality\n\
             tools: Read, Grep\nmodel: sonnet\ncolor: blue\n---\n\
             You are a senior code reviewer.\n",
        );
        let catalog = RoleCatalog::load(&RoleDirs::standard(None, tmp.path()));
        assert_eq!(catalog.problems(), &[]);
        let reviewer = catalog.get("code-reviewer").unwrap();
        assert_eq!(reviewer.source, RoleSource::ClaudeProject);
        assert_eq!(reviewer.tools, ["Read", "Grep"]);
        assert_eq!(reviewer.model, ModelChoice::Sonnet);
        assert_eq!(reviewer.extra.get("color"), Some(&json!("blue")));
        assert_eq!(reviewer.system_prompt, "You are a senior code reviewer.");
        assert!(reviewer.publish);
    }

    #[test]
    fn parser_warnings_are_warning_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write(
            tmp.path(),
            "w.md",
            "---\nname: warned\ndescription: d\nmaxTurns: -3\n---\n",
        );
        let catalog = RoleCatalog::load(&only(tmp.path()));
        assert_eq!(catalog.get("warned").unwrap().max_turns, 0);
        assert_eq!(
            catalog.problems(),
            &[Problem {
                path: display(&path),
                severity: Severity::Warning,
                message: "maxTurns -3 is negative; using the default (25)".to_owned(),
            }]
        );
    }

    #[test]
    fn published_leaves_out_unpublished_roles() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "secret.md",
            "---\nname: secret\ndescription: local only\npublish: false\n---\n",
        );
        let catalog = RoleCatalog::load(&only(tmp.path()));
        assert_eq!(catalog.len(), 4);
        assert!(!catalog.get("secret").unwrap().publish);
        let published: Vec<&str> = catalog.published().map(|r| r.name.as_str()).collect();
        assert_eq!(published, ["Explore", "Plan", "general-purpose"]);
    }

    /// A project with an overridden Explore, an unpublished command role and a broken file.
    fn sample() -> (tempfile::TempDir, RoleCatalog) {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "explore.md", role("Explore", "project explore"));
        write(
            tmp.path(),
            "lint.md",
            "---\nname: lint\ndescription: Runs the linter\ncommand: cargo clippy\n\
             publish: false\n---\n",
        );
        write(tmp.path(), "zz.md", "---\nname: broken\n---\n");
        let catalog = RoleCatalog::load(&only(tmp.path()));
        (tmp, catalog)
    }

    #[test]
    fn render_agents_human() {
        let (tmp, catalog) = sample();
        let dir = tmp.path();
        let out = render_agents(&catalog, false);
        let explore = display(&dir.join("explore.md"));
        let lint = display(&dir.join("lint.md"));
        let broken = display(&dir.join("zz.md"));
        let expected = format!(
            "NAME             KIND     SOURCE   PUBLISHED  PATH\n\
             Explore          llm      project  yes        {explore}\n  \
             shadows builtin builtin/explore.md\n\
             Plan             llm      builtin  yes        builtin/plan.md\n\
             general-purpose  llm      builtin  yes        builtin/general-purpose.md\n\
             lint             command  project  no         {lint}\n\
             \n\
             problems:\n  \
             error: {broken}: description is required\n"
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn render_agents_human_without_problems_has_no_problem_section() {
        let out = render_agents(&RoleCatalog::load(&RoleDirs::default()), false);
        assert_eq!(out.lines().count(), 4);
        assert!(out.starts_with("NAME "));
        assert!(!out.contains("problems:"));
        assert!(out.contains("general-purpose  llm   builtin  yes        builtin/"));
    }

    #[test]
    fn render_agents_json() {
        let (tmp, catalog) = sample();
        let dir = tmp.path();
        let out = render_agents(&catalog, true);
        assert!(out.ends_with("}\n"));
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        let roles = value["roles"].as_array().unwrap();
        assert_eq!(roles.len(), 4);
        assert_eq!(
            roles[0],
            json!({
                "name": "Explore",
                "kind": "llm",
                "source": "project",
                "path": display(&dir.join("explore.md")),
                "published": true,
                "description": "project explore",
                "shadowed": [{"source": "builtin", "path": "builtin/explore.md"}],
            })
        );
        assert_eq!(roles[1]["name"], "Plan");
        assert_eq!(roles[1]["source"], "builtin");
        assert_eq!(roles[1]["shadowed"], json!([]));
        assert_eq!(roles[3]["name"], "lint");
        assert_eq!(roles[3]["kind"], "command");
        assert_eq!(roles[3]["published"], false);
        assert_eq!(roles[3]["description"], "Runs the linter");
        assert_eq!(
            value["problems"],
            json!([{
                "path": display(&dir.join("zz.md")),
                "severity": "error",
                "message": "description is required",
            }])
        );
    }
}
