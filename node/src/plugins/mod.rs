//! Claude Code plugins: one folder that brings agents, skills, commands, hooks and MCP servers,
//! installed and loaded as a unit.
//!
//! # A plugin
//!
//! A folder with a manifest, `.claude-plugin/plugin.json` ([`manifest`]), and any of:
//!
//! | part | where (default) | extra places the manifest may name | loaded as |
//! |---|---|---|---|
//! | agents | `agents/` | `agents` | roles, read as Claude Code agent files |
//! | skills | `skills/` | `skills` | skills (a `SKILL.md` per directory) |
//! | commands | `commands/` | `commands` | commands, as `.claude/commands` |
//! | hooks | `hooks/hooks.json` | `hooks` (a file, or the hooks inline) | hooks, as a settings file's |
//! | MCP servers | `.mcp.json` | `mcpServers` (a file, or the servers inline) | MCP servers, as `.mcp.json` |
//!
//! Hooks and MCP servers get `CLAUDE_PLUGIN_ROOT`, the plugin's folder, as Claude Code gives
//! it: in the environment of hook commands, and expanded as `${CLAUDE_PLUGIN_ROOT}` in the
//! plugin's MCP server entries.
//!
//! # Installed, locked, verified
//!
//! `mew plugins install SOURCE` ([`install`]) copies a plugin from a local folder or a git
//! repository into an install root, `~/.mew/plugins` or the project's `.mew/plugins`, and
//! records the SHA-256 of every file in the root's `plugins-lock.json`, as skills are
//! locked. [`load`] reads only what the lock file names, and only while every file is as it was
//! installed: a plugin whose files changed, or a folder nobody installed, is a reported problem
//! and none of its parts load. A project's plugins run their hooks only once the project's
//! hooks are trusted, like the project's own hook files (`mew hooks trust`).

pub(crate) mod install;
pub(crate) mod manifest;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use mew_cards::Timestamp;
use serde::{Deserialize, Serialize};

use crate::skills::lock::FileHash;
use manifest::{Component, Manifest};

/// The lock file's name, in an install root.
pub(crate) const LOCK_FILE: &str = "plugins-lock.json";

/// The format version written.
pub(crate) const LOCK_VERSION: u32 = 1;

/// Whose install root a plugin is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PluginScope {
    /// `~/.mew/plugins`: every project sees it.
    User,
    /// `<project>/.mew/plugins`: this project only; its hooks wait for the project's trust.
    Project,
}

impl PluginScope {
    /// Lowercase name, as shown to users.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Project => "project",
        }
    }
}

/// The install roots for a home directory (if known) and a project, user first.
pub(crate) fn standard_roots(home: Option<&Path>, project: &Path) -> Vec<(PathBuf, PluginScope)> {
    let mut roots = Vec::new();
    let user = home.map(|home| home.join(".mew").join("plugins"));
    if let Some(user) = &user {
        roots.push((user.clone(), PluginScope::User));
    }
    let project = project.join(".mew").join("plugins");
    if user.as_ref() != Some(&project) {
        roots.push((project, PluginScope::Project));
    }
    roots
}

/// A whole lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockFile {
    /// [`LOCK_VERSION`].
    pub(crate) version: u32,
    /// By plugin name.
    #[serde(default)]
    pub(crate) plugins: BTreeMap<String, LockEntry>,
}

impl Default for LockFile {
    fn default() -> Self {
        Self {
            version: LOCK_VERSION,
            plugins: BTreeMap::new(),
        }
    }
}

/// One installed plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LockEntry {
    /// The folder or git URL it was installed from, as given.
    pub(crate) source: String,
    /// The commit installed, for a git source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) commit: Option<String>,
    /// The manifest's `version`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<String>,
    /// When it was installed.
    pub(crate) installed_at: Timestamp,
    /// Every file, by relative path.
    pub(crate) files: BTreeMap<String, FileHash>,
}

/// The lock file of `root` could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Reading failed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a lock file, or written by a newer Mew; it is left alone.
    #[error("{} is not a plugins lock file this Mew reads ({message}); fix or delete it", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Reads the lock file of `root`; a missing one is empty.
pub(crate) fn read_lock(root: &Path) -> Result<LockFile, LockError> {
    let path = root.join(LOCK_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(LockFile::default()),
        Err(source) => return Err(LockError::Io { path, source }),
    };
    let lock: LockFile = serde_json::from_str(&text).map_err(|err| LockError::Corrupt {
        path: path.clone(),
        message: err.to_string(),
    })?;
    if lock.version > LOCK_VERSION {
        return Err(LockError::Corrupt {
            path,
            message: format!("version {}, this Mew reads {LOCK_VERSION}", lock.version),
        });
    }
    Ok(lock)
}

/// A plugin that loaded: its folder, its manifest, and where its parts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plugin {
    /// The manifest's name.
    pub(crate) name: String,
    /// Its folder: `CLAUDE_PLUGIN_ROOT`.
    pub(crate) root: PathBuf,
    /// Whose root it was installed in.
    pub(crate) scope: PluginScope,
    /// Its manifest.
    pub(crate) manifest: Manifest,
}

impl Plugin {
    /// The folders and files of its part `default` plus the `extra` paths its manifest names,
    /// those that exist.
    fn paths(&self, default: &str, extra: &[String]) -> Vec<PathBuf> {
        std::iter::once(default)
            .chain(extra.iter().map(String::as_str))
            .map(|path| self.root.join(path))
            .filter(|path| path.exists())
            .collect()
    }

    /// Its agents' folders (and files).
    pub(crate) fn agent_paths(&self) -> Vec<PathBuf> {
        self.paths("agents", &self.manifest.agents)
    }

    /// Its skills' folders.
    pub(crate) fn skill_paths(&self) -> Vec<PathBuf> {
        self.paths("skills", &self.manifest.skills)
    }

    /// Its commands' folders (and files).
    pub(crate) fn command_paths(&self) -> Vec<PathBuf> {
        self.paths("commands", &self.manifest.commands)
    }

    /// The file that holds its hooks (`{"hooks": {..}}`, a settings file's shape): the one its
    /// manifest names, the manifest itself when the hooks are inline, else `hooks/hooks.json`.
    pub(crate) fn hooks_file(&self) -> Option<PathBuf> {
        self.component_file(self.manifest.hooks.as_ref(), "hooks/hooks.json")
    }

    /// The file that holds its MCP servers (`{"mcpServers": {..}}`, `.mcp.json`'s shape), as
    /// [`Self::hooks_file`] finds it.
    pub(crate) fn mcp_file(&self) -> Option<PathBuf> {
        self.component_file(self.manifest.mcp_servers.as_ref(), ".mcp.json")
    }

    fn component_file(&self, component: Option<&Component>, default: &str) -> Option<PathBuf> {
        let path = match component {
            Some(Component::File(path)) => self.root.join(path),
            Some(Component::Inline) => self.root.join(manifest::MANIFEST),
            None => self.root.join(default),
        };
        path.is_file().then_some(path)
    }
}

/// A plugin (or an install root) that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PluginProblem {
    /// The plugin's folder, or the lock file.
    pub(crate) path: PathBuf,
    /// What is wrong.
    pub(crate) message: String,
}

impl fmt::Display for PluginProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// What [`load`] found.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadedPlugins {
    /// The plugins that load, user ones first, each root's in name order.
    pub(crate) plugins: Vec<Plugin>,
    /// What was skipped, and the warnings of those that loaded.
    pub(crate) problems: Vec<PluginProblem>,
}

/// The installed plugins of `roots`, each verified against its root's lock file. Never fails:
/// everything wrong is a problem. Blocking: it reads and hashes every file of every plugin.
pub(crate) fn load(roots: &[(PathBuf, PluginScope)]) -> LoadedPlugins {
    let mut loaded = LoadedPlugins::default();
    for (root, scope) in roots {
        let lock = match read_lock(root) {
            Ok(lock) => lock,
            Err(err) => {
                loaded.problems.push(PluginProblem {
                    path: root.join(LOCK_FILE),
                    message: format!("{err}; none of its plugins load"),
                });
                continue;
            }
        };
        for (name, entry) in &lock.plugins {
            let dir = root.join(name);
            let problem = |message: String| PluginProblem {
                path: dir.clone(),
                message,
            };
            let drift = crate::skills::lock::verify_files(&dir, name, &entry.files);
            if !drift.is_clean() {
                let mut changed: Vec<&str> = drift
                    .changed
                    .iter()
                    .chain(&drift.missing)
                    .chain(&drift.extra)
                    .map(String::as_str)
                    .collect();
                changed.extend(drift.unreadable.iter().map(|(path, _)| path.as_str()));
                loaded.problems.push(problem(format!(
                    "files changed since it was installed ({}); skipped: install it again \
                     (`mew plugins install`) to take the new files",
                    changed.join(", ")
                )));
                continue;
            }
            match manifest::read(&dir) {
                Ok((manifest, warnings)) => {
                    for warning in warnings {
                        loaded.problems.push(problem(warning));
                    }
                    loaded.plugins.push(Plugin {
                        name: name.clone(),
                        root: dir,
                        scope: *scope,
                        manifest,
                    });
                }
                Err(err) => loaded.problems.push(problem(format!("{err}; skipped"))),
            }
        }
        if let Ok(entries) = std::fs::read_dir(root) {
            let mut untracked: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                .filter_map(|entry| entry.file_name().into_string().ok())
                .filter(|name| !name.starts_with('.') && !lock.plugins.contains_key(name))
                .collect();
            untracked.sort();
            for name in untracked {
                loaded.problems.push(PluginProblem {
                    path: root.join(&name),
                    message: "not in the plugins lock file (not installed with `mew plugins \
                              install`); skipped"
                        .to_owned(),
                });
            }
        }
    }
    loaded
}
