//! The skill catalog: every skill found in the skill roots, later roots overriding earlier ones.
//!
//! # Roots
//!
//! [`standard_roots`] lists them lowest first; a skill in a later root replaces the skill of the
//! same name from an earlier one, so the project overrides the user:
//!
//! 0. plugins: the commands, then the skills, of installed Claude Code plugins (see
//!    [`crate::plugins`]), before every standard root;
//! 1. commands: `~/.claude/commands/`, then `<project>/.claude/commands/` (Claude Code's custom
//!    slash commands, see below);
//! 2. user: `~/.claude/skills/` (Claude Code's personal skills, read unchanged), then
//!    `~/.mew/skills/`;
//! 3. project: `<project>/.agents/skills/` (the cross-tool convention), then
//!    `<project>/.claude/skills/`, then `<project>/.mew/skills/`;
//! 4. configured roots, in the order given.
//!
//! So a project's command replaces the user's command of the same name, and a skill of any root
//! replaces a command of the same name, as in Claude Code, where a skill wins over a command.
//!
//! A root that is the same directory as an earlier one (the project is the home directory, or
//! `.claude/skills` is a symlink to `.agents/skills`) is read once, at its first place.
//!
//! # Skills
//!
//! A skill is a directory of a root holding a file `SKILL.md`; directories whose names start
//! with `.` (such as an installation's staging directory) are skipped, as are plain files.
//! Symlinks made by the user are followed. Directories are read in file-name order; when two of
//! one root give the same name, the first wins and the second is a problem.
//!
//! # Commands
//!
//! A command root holds Claude Code's custom commands: every `NAME.md` file, in subdirectories
//! too (at most [`MAX_COMMAND_DEPTH`] levels down, skipping names that start with `.`). A
//! command is a skill of kind [`SkillKind::Command`] named by its path as Claude Code names
//! it: `review.md` is `/review`, `frontend/component.md` is `/frontend:component` (lowercase;
//! see [`is_valid_command_name`]). It is parsed by [`parse_command`], and runs as a skill does,
//! by `/name args` or, unless it says `disable-model-invocation`, by the model's `LoadSkill`.
//!
//! Nothing in a skill can stop the node: a `SKILL.md` that cannot be read or parsed is a
//! [`Problem`] and is skipped, the earlier roots' skill of that name, if any, staying.
//!
//! # Sharing and activation
//!
//! The loaded skills form an immutable snapshot; [`SkillCatalog::reload`] builds a new one and swaps
//! it in whole, so readers see either the old or the new catalog, never a mix. Skills handed
//! out are shared read-only (`Arc`) or, by [`SkillCatalog::activate`], freshly read owned copies:
//! nothing a caller holds is ever written by the catalog.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use super::parse::{SkillMeta, is_valid_command_name, parse_command, parse_skill};
use crate::roles::catalog::{Problem, Severity};

/// The file that makes a directory a skill.
pub(crate) const SKILL_FILE: &str = "SKILL.md";

/// Largest `SKILL.md` read, in bytes; a larger one is a problem, not a skill.
pub(crate) const MAX_SKILL_FILE_BYTES: u64 = crate::user_file::MAX_USER_FILE_BYTES;

/// How many levels of subdirectories of a command root are read.
pub(crate) const MAX_COMMAND_DEPTH: u32 = 4;

/// The ending of a command file's name.
const COMMAND_FILE_SUFFIX: &str = ".md";

/// How many times activation reads `SKILL.md` looking for two identical reads in a row.
const STABLE_READ_ATTEMPTS: usize = 4;

/// Where a skill was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SkillSource {
    /// A root in the user's home directory.
    User,
    /// A root in the project.
    Project,
    /// A root named in the configuration.
    Configured,
    /// An installed Claude Code plugin's `skills`.
    Plugin,
    /// An MCP server (its skills extension): the files are the server's, read through it.
    Mcp,
}

impl SkillSource {
    /// Lowercase name, as shown to users.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Project => "project",
            Self::Configured => "configured",
            Self::Plugin => "plugin",
            Self::Mcp => "mcp",
        }
    }
}

impl fmt::Display for SkillSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a skill is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SkillKind {
    /// A directory with a `SKILL.md`.
    Skill,
    /// A Claude Code custom command: one Markdown file of a commands directory.
    Command,
}

impl SkillKind {
    /// Lowercase name, as shown to users.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Skill => "skill",
            Self::Command => "command",
        }
    }
}

/// A directory that holds skill directories, or command files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillRoot {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// What kind of root it is.
    pub(crate) source: SkillSource,
    /// What it holds.
    pub(crate) kind: SkillKind,
    /// The installed plugin it belongs to: its skills and commands also answer to
    /// `PLUGIN:NAME`, as Claude Code names a plugin's (see [`Snapshot::get`]).
    pub(crate) plugin: Option<String>,
}

impl SkillRoot {
    /// A root of skill directories.
    pub(crate) fn new(dir: impl Into<PathBuf>, source: SkillSource) -> Self {
        Self {
            dir: dir.into(),
            source,
            kind: SkillKind::Skill,
            plugin: None,
        }
    }

    /// A root of Claude Code command files.
    pub(crate) fn commands(dir: impl Into<PathBuf>, source: SkillSource) -> Self {
        Self {
            dir: dir.into(),
            source,
            kind: SkillKind::Command,
            plugin: None,
        }
    }

    /// This root, as one of the installed plugin `name`'s.
    pub(crate) fn of_plugin(mut self, name: &str) -> Self {
        self.plugin = Some(name.to_owned());
        self
    }

    /// How many levels below the root its files are: what a [`Stamp`] of it looks at.
    ///
    /// [`Stamp`]: crate::user_file::Stamp
    pub(crate) fn depth(&self) -> u32 {
        match self.kind {
            SkillKind::Skill => 1,
            SkillKind::Command => MAX_COMMAND_DEPTH,
        }
    }
}

/// The standard roots for a home directory (if known) and a project, then `extra` (configured
/// roots), lowest first (see the module docs).
pub(crate) fn standard_roots(
    home: Option<&Path>,
    project: &Path,
    extra: &[PathBuf],
) -> Vec<SkillRoot> {
    let mut roots = Vec::new();
    if let Some(home) = home {
        roots.push(SkillRoot::commands(
            home.join(".claude").join("commands"),
            SkillSource::User,
        ));
    }
    roots.push(SkillRoot::commands(
        project.join(".claude").join("commands"),
        SkillSource::Project,
    ));
    if let Some(home) = home {
        for tool in [".claude", ".mew"] {
            roots.push(SkillRoot::new(
                home.join(tool).join("skills"),
                SkillSource::User,
            ));
        }
    }
    for tool in [".agents", ".claude", ".mew"] {
        roots.push(SkillRoot::new(
            project.join(tool).join("skills"),
            SkillSource::Project,
        ));
    }
    roots.extend(
        extra
            .iter()
            .map(|dir| SkillRoot::new(dir.clone(), SkillSource::Configured)),
    );
    roots
}

/// A loaded skill, or command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Skill {
    /// Its settings.
    pub(crate) meta: SkillMeta,
    /// Its instructions (the file's body, trimmed, LF line ends).
    pub(crate) body: String,
    /// The skill's directory; a command's: the directory of its file.
    pub(crate) dir: PathBuf,
    /// Its file: the `SKILL.md`, or the command's.
    pub(crate) file: PathBuf,
    /// The kind of root it was found in.
    pub(crate) source: SkillSource,
    /// What it is written as.
    pub(crate) kind: SkillKind,
}

impl Skill {
    /// The name (lowercase).
    pub(crate) fn name(&self) -> &str {
        &self.meta.name
    }

    /// The path of its file: its `SKILL.md`, or the command's file.
    pub(crate) fn path(&self) -> PathBuf {
        self.file.clone()
    }

    /// Where it is, as users are shown: a skill's directory, a command's file.
    pub(crate) fn location(&self) -> &Path {
        match self.kind {
            SkillKind::Skill => &self.dir,
            SkillKind::Command => &self.file,
        }
    }
}

/// What [`SkillCatalog::activate`] hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Activation {
    /// A fresh copy of the skill, owned by the caller.
    pub(crate) skill: Skill,
    /// Set when `SKILL.md` could not be read again and the copy loaded earlier is used.
    pub(crate) warning: Option<String>,
}

/// Why a skill cannot be activated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ActivateError {
    /// No skill has that name.
    #[error("no skill named {name:?}{}", available_list(.available))]
    NotFound {
        /// The name asked for.
        name: String,
        /// Every skill's name, sorted.
        available: Vec<String>,
    },
}

fn available_list(available: &[String]) -> String {
    if available.is_empty() {
        "; there are no skills".to_owned()
    } else {
        format!("; the skills are: {}", available.join(", "))
    }
}

/// One consistent state of the catalog.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// By name (lowercase).
    skills: BTreeMap<String, Arc<Skill>>,
    /// Per name, the (source, [location](Skill::location)) of each skill a later root
    /// replaced, earliest first.
    shadowed: BTreeMap<String, Vec<(SkillSource, PathBuf)>>,
    /// The skills and commands of installed plugins by `PLUGIN:NAME` (lowercase), shadowed
    /// ones too: Claude Code's name for them, which reaches them whatever else has their name.
    of_plugins: BTreeMap<String, Arc<Skill>>,
    problems: Vec<Problem>,
}

impl Snapshot {
    /// Reads every root (see the module docs). Never fails: what goes wrong is in
    /// [`Snapshot::problems`].
    pub(crate) fn load(roots: &[SkillRoot]) -> Self {
        let mut snapshot = Self::default();
        let mut seen: HashSet<PathBuf> = HashSet::new();
        for root in roots {
            let key = fs::canonicalize(&root.dir).unwrap_or_else(|_| root.dir.clone());
            if !seen.insert(key) {
                continue;
            }
            snapshot.load_root(root);
        }
        snapshot
    }

    /// The skill called `name`, in any letter case; a plugin's also by `PLUGIN:NAME`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        let key = lookup_key(name);
        self.skills.get(&key).or_else(|| self.of_plugins.get(&key))
    }

    /// Every skill, sorted by name.
    pub(crate) fn skills(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills.values()
    }

    /// How many skills there are.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn len(&self) -> usize {
        self.skills.len()
    }

    /// True when there are no skills.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// What went wrong while loading, in the order met.
    pub(crate) fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The (source, [location](Skill::location)) of each skill called `name` that a later root
    /// replaced.
    pub(crate) fn shadowed(&self, name: &str) -> &[(SkillSource, PathBuf)] {
        self.shadowed
            .get(&lookup_key(name))
            .map_or(&[], Vec::as_slice)
    }

    fn error(&mut self, path: &Path, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.display().to_string(),
            severity: Severity::Error,
            message: message.into(),
        });
    }

    fn warning(&mut self, path: &Path, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.display().to_string(),
            severity: Severity::Warning,
            message: message.into(),
        });
    }

    fn load_root(&mut self, root: &SkillRoot) {
        match root.kind {
            SkillKind::Skill => self.load_skills(root),
            SkillKind::Command => self.load_commands(root),
        }
    }

    /// Adds `skill` of `root`, replacing the skill of that name from an earlier root.
    fn add(&mut self, skill: Skill, root: &SkillRoot) {
        let name = skill.name().to_owned();
        let skill = Arc::new(skill);
        if let Some(plugin) = &root.plugin {
            self.of_plugins
                .insert(format!("{}:{name}", plugin.to_lowercase()), skill.clone());
        }
        if let Some(previous) = self.skills.insert(name.clone(), skill) {
            self.shadowed
                .entry(name)
                .or_default()
                .push((previous.source, previous.location().to_owned()));
        }
    }

    fn load_commands(&mut self, root: &SkillRoot) {
        let mut files = Vec::new();
        self.command_files(&root.dir, &[], MAX_COMMAND_DEPTH, &mut files);
        let mut in_root: BTreeMap<String, PathBuf> = BTreeMap::new();
        for (parts, path) in files {
            let name = parts.join(":").to_lowercase();
            if !is_valid_command_name(&name) {
                self.error(
                    &path,
                    format!(
                        "{name:?} cannot name a command: the names of a command's file and \
                         directories may hold letters, digits, `-`, `_` and `.` (it is \
                         /DIRECTORY:FILE, at most {} characters)",
                        super::parse::MAX_COMMAND_NAME_LEN
                    ),
                );
                continue;
            }
            let text = match read_skill_file(&path) {
                Ok(Some(text)) => text,
                Ok(None) => continue,
                Err(message) => {
                    self.error(&path, message);
                    continue;
                }
            };
            let parsed = match parse_command(&text, &name) {
                Ok(parsed) => parsed,
                Err(err) => {
                    self.error(&path, err.to_string());
                    continue;
                }
            };
            if let Some(first) = in_root.get(&name) {
                let message = format!(
                    "command /{name} is already defined by {} in the same directory (names \
                     are not case-sensitive); this one is skipped",
                    first.display()
                );
                self.error(&path, message);
                continue;
            }
            for warning in parsed.warnings {
                self.warning(&path, warning);
            }
            in_root.insert(name, path.clone());
            self.add(
                Skill {
                    meta: parsed.meta,
                    body: parsed.body,
                    dir: path.parent().unwrap_or(&root.dir).to_owned(),
                    file: path,
                    source: root.source,
                    kind: SkillKind::Command,
                },
                root,
            );
        }
    }

    /// The command files of `dir` (whose path below the root is `parts`), in file-name order,
    /// then those of its subdirectories, `depth` levels down, as (name parts, path). Names
    /// starting with `.` are skipped.
    fn command_files(
        &mut self,
        dir: &Path,
        parts: &[String],
        depth: u32,
        files: &mut Vec<(Vec<String>, PathBuf)>,
    ) {
        // A plugin's manifest may name its command files one by one.
        if parts.is_empty()
            && fs::metadata(dir).is_ok_and(|meta| meta.is_file())
            && let Some(stem) = dir
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.strip_suffix(COMMAND_FILE_SUFFIX))
        {
            files.push((vec![stem.to_owned()], dir.to_owned()));
            return;
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return,
            Err(err) => {
                self.error(dir, format!("cannot read the directory: {err}"));
                return;
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => names.push(entry.file_name()),
                Err(err) => self.error(dir, format!("cannot list the directory: {err}")),
            }
        }
        names.retain(|name| !name.as_encoded_bytes().starts_with(b"."));
        names.sort();
        let (subdirs, names): (Vec<_>, Vec<_>) = names
            .into_iter()
            .partition(|name| fs::metadata(dir.join(name)).is_ok_and(|meta| meta.is_dir()));
        for name in names {
            let path = dir.join(&name);
            let Some(stem) = name
                .to_str()
                .and_then(|name| name.strip_suffix(COMMAND_FILE_SUFFIX))
            else {
                continue;
            };
            let mut name_parts = parts.to_vec();
            name_parts.push(stem.to_owned());
            files.push((name_parts, path));
        }
        if depth == 0 {
            return;
        }
        for subdir in subdirs {
            let mut sub_parts = parts.to_vec();
            sub_parts.push(subdir.to_string_lossy().into_owned());
            self.command_files(&dir.join(&subdir), &sub_parts, depth - 1, files);
        }
    }

    fn load_skills(&mut self, root: &SkillRoot) {
        let entries = match fs::read_dir(&root.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return,
            Err(err) => {
                self.error(&root.dir, format!("cannot read the directory: {err}"));
                return;
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => names.push(entry.file_name()),
                Err(err) => self.error(&root.dir, format!("cannot list the directory: {err}")),
            }
        }
        names.retain(|name| !name.as_encoded_bytes().starts_with(b"."));
        names.sort();
        let mut in_root: BTreeMap<String, PathBuf> = BTreeMap::new();
        for name in names {
            let dir = root.dir.join(&name);
            // Follows symlinks: a link to a skill directory is the user's choice. Plain files
            // beside the skills (a README) are not skills; a FIFO or a device is reported.
            match fs::metadata(&dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(meta) => {
                    if let Some(kind) = crate::user_file::special_kind(&meta.file_type())
                        .filter(|_| !meta.is_file())
                    {
                        self.error(&dir, format!("it is {kind}, not a skill directory"));
                    }
                    continue;
                }
                Err(_) => continue,
            }
            let path = dir.join(SKILL_FILE);
            let text = match read_skill_file(&path) {
                Ok(Some(text)) => text,
                Ok(None) => {
                    if dir.join("skill.md").is_file() && !has_exact_entry(&dir, SKILL_FILE) {
                        self.warning(
                            &dir,
                            "the directory has skill.md but no SKILL.md; the file must be \
                             called SKILL.md",
                        );
                    }
                    continue;
                }
                Err(message) => {
                    self.error(&path, message);
                    continue;
                }
            };
            let parsed = match parse_skill(&text, name.to_str()) {
                Ok(parsed) => parsed,
                Err(err) => {
                    self.error(&path, err.to_string());
                    continue;
                }
            };
            let skill_name = parsed.meta.name.clone();
            if let Some(first) = in_root.get(&skill_name) {
                let message = format!(
                    "skill {skill_name:?} is already defined by {} in the same root; this one \
                     is skipped",
                    first.display()
                );
                self.error(&path, message);
                continue;
            }
            for warning in parsed.warnings {
                self.warning(&path, warning);
            }
            in_root.insert(skill_name, path.clone());
            self.add(
                Skill {
                    meta: parsed.meta,
                    body: parsed.body,
                    dir,
                    file: path,
                    source: root.source,
                    kind: SkillKind::Skill,
                },
                root,
            );
        }
    }
}

/// True when `dir` has an entry called exactly `name` (on a case-insensitive file system,
/// `skill.md` and `SKILL.md` are the same file, found under its real name).
fn has_exact_entry(dir: &Path, name: &str) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| entry.file_name() == name)
    })
}

/// The key a name is looked up by: trimmed, without a leading `/`, lowercase.
fn lookup_key(name: &str) -> String {
    let name = name.trim();
    name.strip_prefix('/').unwrap_or(name).to_lowercase()
}

/// Reads a `SKILL.md`: `Ok(None)` when there is none, an error message when it cannot be read
/// (it is a FIFO or a device, too large, not UTF-8).
fn read_skill_file(path: &Path) -> Result<Option<String>, String> {
    match crate::user_file::read_text(path, MAX_SKILL_FILE_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(crate::user_file::ReadError::NotFound) => Ok(None),
        Err(err) => Err(err.to_string()),
    }
}

/// Reads `path` until two reads in a row agree, so that a file being rewritten in place is not
/// taken half-written.
fn read_stable(path: &Path) -> Result<String, String> {
    let mut previous = read_skill_file(path)?.ok_or("the file is gone")?;
    for _ in 1..STABLE_READ_ATTEMPTS {
        let current = read_skill_file(path)?.ok_or("the file is gone")?;
        if current == previous {
            return Ok(current);
        }
        previous = current;
    }
    Err("the file kept changing while it was read".to_owned())
}

/// Every skill of the skill roots, shared by the node's tasks.
///
/// Cheap to share behind an `Arc`: readers clone the current snapshot's `Arc` and never block
/// each other; [`SkillCatalog::reload`] swaps in a whole new snapshot.
#[derive(Debug)]
pub(crate) struct SkillCatalog {
    roots: Vec<SkillRoot>,
    current: RwLock<Arc<Snapshot>>,
}

impl SkillCatalog {
    /// Loads the skills of `roots`, lowest first.
    pub(crate) fn load(roots: Vec<SkillRoot>) -> Self {
        let snapshot = Arc::new(Snapshot::load(&roots));
        Self {
            roots,
            current: RwLock::new(snapshot),
        }
    }

    /// The roots, lowest first.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn roots(&self) -> &[SkillRoot] {
        &self.roots
    }

    /// The current snapshot: one consistent state, however many reloads follow.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads the roots again and replaces the whole snapshot at once; returns the new one.
    pub(crate) fn reload(&self) -> Arc<Snapshot> {
        let snapshot = Arc::new(Snapshot::load(&self.roots));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&snapshot);
        snapshot
    }

    /// The skill called `name` (any letter case, a leading `/` allowed), as loaded.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Skill>> {
        self.snapshot().get(name).cloned()
    }

    /// Every skill, sorted by name: the stable order of the disclosure.
    pub(crate) fn list(&self) -> Vec<Arc<Skill>> {
        self.snapshot().skills().cloned().collect()
    }

    /// The system prompt section listing the skills (see [`render_disclosure`]), or `None`
    /// when there are none.
    ///
    /// [`render_disclosure`]: super::render::render_disclosure
    #[cfg(test)] // the runner lists the MCP servers' skills with these
    pub(crate) fn disclosure(&self) -> Option<String> {
        super::render::render_disclosure(self.snapshot().skills().map(Arc::as_ref))
    }

    /// What went wrong while loading.
    pub(crate) fn problems(&self) -> Vec<Problem> {
        self.snapshot().problems().to_vec()
    }

    /// The skill called `name`, its `SKILL.md` read again from disk so that edits take effect
    /// without a reload, as an owned copy. When the file cannot be read or parsed again, or now
    /// gives another name, the copy loaded earlier is used and [`Activation::warning`] says why.
    ///
    /// Reads a file: call it off the async runtime when that matters.
    pub(crate) fn activate(&self, name: &str) -> Result<Activation, ActivateError> {
        let snapshot = self.snapshot();
        let Some(cached) = snapshot.get(name) else {
            return Err(ActivateError::NotFound {
                name: name.to_owned(),
                available: snapshot.skills.keys().cloned().collect(),
            });
        };
        Ok(match reread(cached) {
            Ok(skill) => Activation {
                skill,
                warning: None,
            },
            Err(reason) => Activation {
                skill: Skill::clone(cached),
                warning: Some(format!(
                    "cannot read {} again ({reason}); using the copy loaded earlier",
                    cached.path().display()
                )),
            },
        })
    }

    /// A warning for each `allowed-tools` entry that names no tool `exists` knows. Entries are
    /// looked up by tool name (the part before any `(`), with the registry's aliases applied
    /// (`Read` is `read_file`); entries ending in `*` are patterns and not checked.
    pub(crate) fn validate_tools(&self, exists: impl Fn(&str) -> bool) -> Vec<Problem> {
        let mut problems = Vec::new();
        for skill in self.snapshot().skills() {
            for entry in &skill.meta.allowed_tools {
                let tool = entry.split('(').next().unwrap_or(entry).trim();
                if tool.ends_with('*') || tool.is_empty() {
                    continue;
                }
                let canonical = crate::tools::registry::canonical_name(tool);
                if !exists(canonical) {
                    problems.push(Problem {
                        path: skill.path().display().to_string(),
                        severity: Severity::Warning,
                        message: format!(
                            "{} {:?} names the tool {entry:?}, which does not exist",
                            skill.kind.as_str(),
                            skill.name()
                        ),
                    });
                }
            }
        }
        problems
    }
}

/// `cached`'s file, read and parsed again.
fn reread(cached: &Skill) -> Result<Skill, String> {
    let text = read_stable(&cached.path())?;
    let parsed = match cached.kind {
        SkillKind::Skill => {
            let dir_name = cached.dir.file_name().and_then(|name| name.to_str());
            parse_skill(&text, dir_name)
        }
        SkillKind::Command => parse_command(&text, cached.name()),
    }
    .map_err(|err| err.to_string())?;
    if parsed.meta.name != cached.meta.name {
        return Err(format!(
            "its name is now {:?}; reload the skills to use it",
            parsed.meta.name
        ));
    }
    Ok(Skill {
        meta: parsed.meta,
        body: parsed.body,
        dir: cached.dir.clone(),
        file: cached.file.clone(),
        source: cached.source,
        kind: cached.kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(root: &Path, dir: &str, text: &str) -> PathBuf {
        let dir = root.join(dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SKILL_FILE);
        fs::write(&path, text).unwrap();
        path
    }

    fn skill_text(name: &str, description: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    }

    fn names(catalog: &SkillCatalog) -> Vec<String> {
        catalog.list().iter().map(|s| s.name().to_owned()).collect()
    }

    #[test]
    fn standard_roots_order() {
        let roots = standard_roots(
            Some(Path::new("/home/u")),
            Path::new("/p"),
            &[PathBuf::from("/extra/one"), PathBuf::from("/extra/two")],
        );
        let listed: Vec<(String, SkillSource)> = roots
            .iter()
            .map(|root| (root.dir.display().to_string(), root.source))
            .collect();
        assert_eq!(
            listed,
            [
                ("/home/u/.claude/commands".to_owned(), SkillSource::User),
                ("/p/.claude/commands".to_owned(), SkillSource::Project),
                ("/home/u/.claude/skills".to_owned(), SkillSource::User),
                ("/home/u/.mew/skills".to_owned(), SkillSource::User),
                ("/p/.agents/skills".to_owned(), SkillSource::Project),
                ("/p/.claude/skills".to_owned(), SkillSource::Project),
                ("/p/.mew/skills".to_owned(), SkillSource::Project),
                ("/extra/one".to_owned(), SkillSource::Configured),
                ("/extra/two".to_owned(), SkillSource::Configured),
            ]
        );
        assert!(
            roots
                .iter()
                .all(|root| (root.kind == SkillKind::Command) == root.dir.ends_with("commands"))
        );
        assert_eq!(standard_roots(None, Path::new("/p"), &[]).len(), 4);
    }

    #[test]
    fn project_overrides_user_and_later_roots_win() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let project = tmp.path().join("project");
        let extra = tmp.path().join("extra");
        write_skill(
            &home.join(".claude/skills"),
            "review",
            &skill_text("review", "claude user", "c"),
        );
        write_skill(
            &home.join(".mew/skills"),
            "review",
            &skill_text("review", "mew user", "u"),
        );
        write_skill(
            &home.join(".mew/skills"),
            "only-user",
            &skill_text("only-user", "u", "u"),
        );
        write_skill(
            &project.join(".agents/skills"),
            "review",
            &skill_text("review", "agents", "a"),
        );
        write_skill(
            &project.join(".claude/skills"),
            "deploy",
            &skill_text("deploy", "claude", "d"),
        );
        write_skill(
            &project.join(".mew/skills"),
            "deploy",
            &skill_text("deploy", "mew", "m"),
        );
        write_skill(&extra, "deploy", &skill_text("deploy", "extra", "e"));
        let catalog = SkillCatalog::load(standard_roots(
            Some(&home),
            &project,
            std::slice::from_ref(&extra),
        ));
        assert_eq!(catalog.roots().len(), 8);
        assert_eq!(catalog.problems(), &[]);
        assert_eq!(catalog.snapshot().len(), 3);
        assert!(!catalog.snapshot().is_empty());
        assert_eq!(names(&catalog), ["deploy", "only-user", "review"]);
        let review = catalog.get("review").unwrap();
        assert_eq!(review.meta.description, "agents");
        assert_eq!(review.source, SkillSource::Project);
        assert_eq!(review.dir, project.join(".agents/skills/review"));
        let deploy = catalog.get("deploy").unwrap();
        assert_eq!(deploy.meta.description, "extra");
        assert_eq!(deploy.source, SkillSource::Configured);
        let snapshot = catalog.snapshot();
        assert_eq!(
            snapshot.shadowed("Deploy"),
            &[
                (SkillSource::Project, project.join(".claude/skills/deploy")),
                (SkillSource::Project, project.join(".mew/skills/deploy")),
            ]
        );
        assert_eq!(
            snapshot.shadowed("review"),
            &[
                (SkillSource::User, home.join(".claude/skills/review")),
                (SkillSource::User, home.join(".mew/skills/review")),
            ]
        );
        assert_eq!(catalog.get("only-user").unwrap().source, SkillSource::User);
    }

    #[test]
    fn lookup_is_case_insensitive() {
        let tmp = tempfile::tempdir().unwrap();
        write_skill(
            tmp.path(),
            "pdf-tools",
            &skill_text("PDF-Tools", "pdfs", "body"),
        );
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::User)]);
        for name in ["pdf-tools", "PDF-TOOLS", "Pdf-Tools", " /pdf-tools "] {
            assert_eq!(catalog.get(name).unwrap().name(), "pdf-tools", "{name}");
            assert_eq!(catalog.activate(name).unwrap().skill.name(), "pdf-tools");
        }
        assert!(catalog.get("pdf").is_none());
        // The lowercasing warning is reported.
        assert_eq!(catalog.problems().len(), 1);
        assert_eq!(catalog.problems()[0].severity, Severity::Warning);
    }

    #[test]
    fn broken_skills_are_problems_and_earlier_roots_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        let project = tmp.path().join("project");
        write_skill(&user, "lint", &skill_text("lint", "user lint", "u"));
        let unclosed = write_skill(&project, "lint", "---\nname: lint\ndescription: x\n");
        // A display name gives way to the directory's name, unless that breaks the rule too.
        let bad_name = write_skill(&project, "bad name", &skill_text("\"a b\"", "d", "b"));
        let bad_yaml = write_skill(&project, "yaml", "---\nname: [\n---\n");
        write_skill(&project, "good", &skill_text("good", "fine", "g"));
        fs::create_dir_all(project.join("no-skill-file")).unwrap();
        fs::write(project.join("stray.md"), "not a skill").unwrap();
        let catalog = SkillCatalog::load(vec![
            SkillRoot::new(&user, SkillSource::User),
            SkillRoot::new(&project, SkillSource::Project),
        ]);
        assert_eq!(names(&catalog), ["good", "lint"]);
        assert_eq!(catalog.get("lint").unwrap().meta.description, "user lint");
        let problems = catalog.problems();
        let summary: Vec<(String, Severity)> = problems
            .iter()
            .map(|p| (p.path.clone(), p.severity))
            .collect();
        assert_eq!(
            summary,
            [
                (bad_name.display().to_string(), Severity::Error),
                (unclosed.display().to_string(), Severity::Error),
                (bad_yaml.display().to_string(), Severity::Error),
            ]
        );
        assert!(problems[0].message.starts_with("name \"a b\" is invalid"));
        assert!(problems[1].message.starts_with("frontmatter is not closed"));
        assert!(
            problems[2]
                .message
                .starts_with("invalid YAML in frontmatter")
        );
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
    }

    #[test]
    fn fifos_and_devices_are_reported_and_never_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        write_skill(&root, "good", &skill_text("good", "d", "b"));
        let dir = root.join("piped");
        fs::create_dir_all(&dir).unwrap();
        mkfifo(&dir.join(SKILL_FILE));
        mkfifo(&root.join("stray"));
        fs::write(root.join("README.md"), "skills live here").unwrap();
        let catalog = SkillCatalog::load(vec![SkillRoot::new(&root, SkillSource::User)]);
        assert_eq!(catalog.list().len(), 1);
        let messages: Vec<(String, String)> = catalog
            .problems()
            .iter()
            .map(|p| (p.path.clone(), p.message.clone()))
            .collect();
        assert_eq!(
            messages,
            [
                (
                    dir.join(SKILL_FILE).display().to_string(),
                    "it is a FIFO, not a regular file".to_owned()
                ),
                (
                    root.join("stray").display().to_string(),
                    "it is a FIFO, not a skill directory".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn unreadable_files_and_roots_are_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let big = write_skill(&root, "big", &"x".repeat(MAX_SKILL_FILE_BYTES as usize + 1));
        let dir = root.join("binary");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(SKILL_FILE), [0xff, 0xfe, 0x00]).unwrap();
        let lower = root.join("lower");
        fs::create_dir_all(&lower).unwrap();
        fs::write(lower.join("skill.md"), skill_text("lower", "d", "b")).unwrap();
        let file_root = tmp.path().join("file-root");
        fs::write(&file_root, "not a directory").unwrap();
        let catalog = SkillCatalog::load(vec![
            SkillRoot::new(&root, SkillSource::User),
            SkillRoot::new(&file_root, SkillSource::User),
            SkillRoot::new(tmp.path().join("missing"), SkillSource::User),
        ]);
        let problems = catalog.problems();
        assert_eq!(catalog.list().len(), 0);
        let messages: Vec<(String, String)> = problems
            .iter()
            .map(|p| (p.path.clone(), p.message.clone()))
            .collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert_eq!(big.display().to_string(), messages[0].0);
        assert_eq!(messages[0].1, "the file is larger than 1048576 bytes");
        assert!(messages[1].1.starts_with("the file is not UTF-8 text"));
        assert_eq!(messages[2].0, lower.display().to_string());
        assert!(messages[2].1.contains("must be called SKILL.md"));
        assert_eq!(messages[3].0, file_root.display().to_string());
        assert!(messages[3].1.starts_with("cannot read the directory"));
    }

    #[test]
    fn duplicate_name_in_one_root_is_a_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let first = write_skill(tmp.path(), "a", &skill_text("twin", "first", "1"));
        let second = write_skill(tmp.path(), "b", &skill_text("twin", "second", "2"));
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::User)]);
        assert_eq!(catalog.get("twin").unwrap().meta.description, "first");
        let problems = catalog.problems();
        let errors: Vec<&Problem> = problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, second.display().to_string());
        assert_eq!(
            errors[0].message,
            format!(
                "skill \"twin\" is already defined by {} in the same root; this one is skipped",
                first.display()
            )
        );
    }

    #[test]
    fn hidden_directories_are_skipped_and_the_same_root_read_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("skills");
        write_skill(&root, ".install-x", &skill_text("staged", "no", "no"));
        write_skill(&root, "real", &skill_text("real", "yes", "yes"));
        let catalog = SkillCatalog::load(vec![
            SkillRoot::new(&root, SkillSource::User),
            SkillRoot::new(&root, SkillSource::Project),
        ]);
        assert_eq!(names(&catalog), ["real"]);
        assert_eq!(catalog.get("real").unwrap().source, SkillSource::User);
        assert_eq!(catalog.snapshot().shadowed("real"), &[]);
        // The home directory as the project: its .mew/skills is read as the user's only.
        let catalog = SkillCatalog::load(standard_roots(Some(tmp.path()), tmp.path(), &[]));
        assert_eq!(catalog.problems(), &[]);
    }

    #[test]
    fn activation_rereads_and_hands_out_fresh_copies() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write_skill(
            tmp.path(),
            "demo",
            &skill_text("demo", "first", "Version one."),
        );
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::Project)]);

        let mut first = catalog.activate("demo").unwrap();
        assert_eq!(first.warning, None);
        assert_eq!(first.skill.body, "Version one.");
        first.skill.body.push_str(" changed by the caller");
        first.skill.meta.allowed_tools.push("bash".to_owned());
        let again = catalog.activate("demo").unwrap().skill;
        assert_eq!(again.body, "Version one.");
        assert!(again.meta.allowed_tools.is_empty());

        // An edit takes effect at the next activation; the listing keeps the loaded copy.
        fs::write(&path, skill_text("demo", "second", "Version two.")).unwrap();
        let edited = catalog.activate("demo").unwrap();
        assert_eq!(edited.warning, None);
        assert_eq!(edited.skill.body, "Version two.");
        assert_eq!(edited.skill.meta.description, "second");
        assert_eq!(catalog.get("demo").unwrap().body, "Version one.");
        // A reload swaps the listing.
        catalog.reload();
        assert_eq!(catalog.get("demo").unwrap().body, "Version two.");
    }

    #[test]
    fn activation_falls_back_to_the_loaded_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write_skill(tmp.path(), "demo", &skill_text("demo", "d", "Loaded."));
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::Project)]);

        fs::write(&path, "---\nname: demo\n").unwrap();
        let broken = catalog.activate("demo").unwrap();
        assert_eq!(broken.skill.body, "Loaded.");
        let warning = broken.warning.unwrap();
        assert!(warning.starts_with(&format!(
            "cannot read {} again (frontmatter",
            path.display()
        )));
        assert!(warning.ends_with("; using the copy loaded earlier"));

        fs::write(&path, skill_text("renamed", "d", "Other.")).unwrap();
        let renamed = catalog.activate("demo").unwrap();
        assert_eq!(renamed.skill.body, "Loaded.");
        assert!(
            renamed
                .warning
                .unwrap()
                .contains("its name is now \"renamed\"")
        );

        fs::remove_file(&path).unwrap();
        let gone = catalog.activate("demo").unwrap();
        assert_eq!(gone.skill.body, "Loaded.");
        assert!(gone.warning.unwrap().contains("(the file is gone)"));
    }

    #[test]
    fn disclosure_follows_the_catalog() {
        let tmp = tempfile::tempdir().unwrap();
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::Project)]);
        assert_eq!(catalog.disclosure(), None);
        write_skill(tmp.path(), "zeta", &skill_text("zeta", "Last.", "z"));
        write_skill(tmp.path(), "alpha", &skill_text("alpha", "First.", "a"));
        catalog.reload();
        let text = catalog.disclosure().unwrap();
        assert!(
            text.ends_with("\n\n- **alpha**: First.\n- **zeta**: Last."),
            "{text}"
        );
    }

    #[test]
    fn activating_an_unknown_skill_names_the_skills() {
        let tmp = tempfile::tempdir().unwrap();
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::Project)]);
        assert_eq!(
            catalog.activate("nope").unwrap_err().to_string(),
            "no skill named \"nope\"; there are no skills"
        );
        write_skill(tmp.path(), "b", &skill_text("b", "d", "b"));
        write_skill(tmp.path(), "a", &skill_text("a", "d", "a"));
        catalog.reload();
        assert_eq!(
            catalog.activate("nope").unwrap_err().to_string(),
            "no skill named \"nope\"; the skills are: a, b"
        );
    }

    #[test]
    fn concurrent_activation_sees_whole_versions_only() {
        let tmp = tempfile::tempdir().unwrap();
        let versions: Vec<(String, String)> = (0..3)
            .map(|v| {
                (
                    format!("version {v}"),
                    format!("Body of version {v}.\n").repeat(200),
                )
            })
            .collect();
        let text = |v: usize| skill_text("demo", &versions[v].0, &versions[v].1);
        let path = write_skill(tmp.path(), "demo", &text(0));
        let catalog = Arc::new(SkillCatalog::load(vec![SkillRoot::new(
            tmp.path(),
            SkillSource::Project,
        )]));
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                for round in 0..300 {
                    let staged = tmp.path().join("demo").join(".SKILL.md.new");
                    fs::write(&staged, text(round % versions.len())).unwrap();
                    fs::rename(&staged, &path).unwrap();
                    if round % 50 == 0 {
                        catalog.reload();
                    }
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            let readers: Vec<_> = (0..8)
                .map(|_| {
                    let catalog = Arc::clone(&catalog);
                    let versions = &versions;
                    let done = &done;
                    scope.spawn(move || {
                        let mut seen = 0usize;
                        while !done.load(std::sync::atomic::Ordering::SeqCst) || seen < 20 {
                            // A reader that keeps meeting a rewrite falls back to the loaded
                            // copy, itself one of the versions.
                            let skill = catalog.activate("DEMO").unwrap().skill;
                            let version = versions
                                .iter()
                                .find(|(description, _)| *description == skill.meta.description)
                                .unwrap_or_else(|| panic!("torn description {skill:?}"));
                            assert_eq!(skill.body, version.1.trim(), "body of {}", version.0);
                            seen += 1;
                        }
                        seen
                    })
                })
                .collect();
            writer.join().unwrap();
            for reader in readers {
                assert!(reader.join().unwrap() >= 20);
            }
        });
    }

    #[test]
    fn validate_tools_reports_unknown_tools() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write_skill(
            tmp.path(),
            "demo",
            "---\nname: demo\ndescription: d\nallowed-tools: Read Bash(git:*) mcp__gh__* Frobnicate\n---\n",
        );
        let catalog = SkillCatalog::load(vec![SkillRoot::new(tmp.path(), SkillSource::Project)]);
        let problems = catalog.validate_tools(|name| ["read_file", "bash"].contains(&name));
        assert_eq!(
            problems,
            [Problem {
                path: path.display().to_string(),
                severity: Severity::Warning,
                message: "skill \"demo\" names the tool \"Frobnicate\", which does not exist"
                    .to_owned(),
            }]
        );
    }

    fn write_file(path: &Path, text: &str) -> PathBuf {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        path.to_owned()
    }

    #[test]
    fn a_plugins_skills_and_commands_also_answer_to_plugin_colon_name_even_when_shadowed() {
        let tmp = tempfile::tempdir().unwrap();
        let plugin = tmp.path().join("plugins/review-kit");
        write_file(&plugin.join("commands/greet.md"), "The kit's greeting.\n");
        write_skill(
            &plugin.join("skills"),
            "house-style",
            &skill_text("house-style", "the kit's style", "s"),
        );
        let project = tmp.path().join("project");
        write_file(
            &project.join(".claude/commands/greet.md"),
            "The project's.\n",
        );
        let mut roots = vec![
            SkillRoot::commands(plugin.join("commands"), SkillSource::Plugin)
                .of_plugin("review-kit"),
            SkillRoot::new(plugin.join("skills"), SkillSource::Plugin).of_plugin("review-kit"),
        ];
        roots.extend(standard_roots(None, &project, &[]));
        let catalog = SkillCatalog::load(roots);
        // The bare name is the project's command; the plugin's is still reachable.
        assert_eq!(catalog.get("/greet").unwrap().body, "The project's.");
        assert_eq!(
            catalog.get("/Review-Kit:greet").unwrap().body,
            "The kit's greeting."
        );
        assert_eq!(
            catalog
                .get("review-kit:house-style")
                .unwrap()
                .meta
                .description,
            "the kit's style"
        );
        assert!(catalog.get("other-kit:greet").is_none());
        // The catalog lists each name once.
        assert_eq!(names(&catalog), ["greet", "house-style"]);
    }

    #[test]
    fn commands_are_named_by_their_paths_and_give_way_to_skills() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let project = tmp.path().join("project");
        let user_commands = home.join(".claude/commands");
        let commands = project.join(".claude/commands");
        let user_review = write_file(&user_commands.join("review.md"), "Review the code.\n");
        write_file(&user_commands.join("deploy.md"), "Deploy from home.\n");
        write_file(&user_commands.join("mine.md"), "Only the user's.\n");
        let deploy = write_file(
            &commands.join("deploy.md"),
            "---\ndescription: Deploys the project\nargument-hint: \"[env]\"\n---\nDeploy to $0.\n",
        );
        let component = write_file(
            &commands.join("Frontend/component.md"),
            "Make a component called $ARGUMENTS.\n",
        );
        write_file(&commands.join("a/b/c/d/deep.md"), "Four levels down.\n");
        write_file(&commands.join("a/b/c/d/e/deeper.md"), "Five: too deep.\n");
        write_file(&commands.join(".drafts/hidden.md"), "Hidden.\n");
        write_file(&commands.join("notes.txt"), "Not a command.\n");
        let spaced = write_file(&commands.join("has space.md"), "Unusable.\n");
        write_file(&commands.join("Shout.md"), "Loud.\n");
        let quiet = write_file(&commands.join("shout.md"), "Quiet.\n");
        let tools = write_file(
            &commands.join("tools.md"),
            "---\nallowed-tools: Read\n---\nT.\n",
        );
        write_skill(
            &project.join(".claude/skills"),
            "review",
            &skill_text("review", "the skill", "s"),
        );
        let catalog = SkillCatalog::load(standard_roots(Some(&home), &project, &[]));
        assert_eq!(
            names(&catalog),
            [
                "a:b:c:d:deep",
                "deploy",
                "frontend:component",
                "mine",
                "review",
                "shout",
                "tools"
            ]
        );
        // A skill wins over a command of its name; the project's command over the user's.
        let review = catalog.get("review").unwrap();
        assert_eq!(
            (review.kind, review.meta.description.as_str()),
            (SkillKind::Skill, "the skill")
        );
        assert_eq!(
            catalog.snapshot().shadowed("review"),
            [(SkillSource::User, user_review)]
        );
        let deployed = catalog.get("deploy").unwrap();
        assert_eq!(deployed.kind, SkillKind::Command);
        assert_eq!(deployed.source, SkillSource::Project);
        assert_eq!(deployed.path(), deploy);
        assert_eq!(deployed.dir, commands);
        assert_eq!(deployed.meta.description, "Deploys the project");
        assert_eq!(deployed.meta.argument_hint.as_deref(), Some("[env]"));
        assert_eq!(deployed.body, "Deploy to $0.");
        let made = catalog.get("/Frontend:Component").unwrap();
        assert_eq!(made.path(), component);
        assert_eq!(made.meta.description, "Make a component called $ARGUMENTS.");
        let problems: Vec<(String, Severity)> = catalog
            .problems()
            .iter()
            .map(|p| (p.path.clone(), p.severity))
            .collect();
        assert_eq!(
            problems,
            [
                (spaced.display().to_string(), Severity::Error),
                (quiet.display().to_string(), Severity::Error),
                (tools.display().to_string(), Severity::Warning),
            ],
            "{:?}",
            catalog.problems()
        );
        assert!(
            catalog.problems()[0]
                .message
                .starts_with("\"has space\" cannot name a command")
        );

        // Activation reads the command's file again.
        write_file(&deploy, "---\ndescription: d\n---\nDeploy to $0 now.\n");
        let activated = catalog.activate("deploy").unwrap();
        assert_eq!(activated.warning, None);
        assert_eq!(activated.skill.body, "Deploy to $0 now.");
        assert_eq!(activated.skill.kind, SkillKind::Command);
        fs::remove_file(&deploy).unwrap();
        assert!(catalog.activate("deploy").unwrap().warning.is_some());
    }
}
