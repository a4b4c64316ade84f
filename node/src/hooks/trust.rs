//! Trust for project hooks: a project's hook files run only after the user trusted their
//! current content.
//!
//! A project directory can come from anyone (a cloned repository), and its hooks run commands
//! on the user's machine, so they are held back until [`trust_project`] records the SHA-256 of
//! each of its hook files in the user's trust file (`~/.mew/trusted-hooks.json`, see
//! [`default_trust_file`]):
//!
//! ```json
//! {"version": 1, "files": {"/abs/project/.mew/hooks.yaml": "…64 hex digits…"}}
//! ```
//!
//! A project file that is new, or whose content changed since, is skipped with a warning until
//! it is trusted again. User files (`~/.mew/hooks.yaml`, `~/.claude/settings.json`) are always
//! trusted.
//!
//! What is hashed ([`content_hash`]): the whole text of a `hooks.yaml`; for a Claude Code
//! settings file only its `hooks` section (as compact JSON with sorted keys), because Claude
//! Code itself rewrites those files (permission grants) and that must not revoke the trust of
//! unchanged hooks. A file without hooks needs no trust.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::rules::{Format, HookFile, project_files, settings_hooks};

/// The trust file's name in the user's `~/.mew`.
pub(crate) const TRUST_FILE_NAME: &str = "trusted-hooks.json";

/// The trust file for a user whose home directory is `home`: `~/.mew/trusted-hooks.json`.
pub(crate) fn default_trust_file(home: &Path) -> PathBuf {
    home.join(".mew").join(TRUST_FILE_NAME)
}

/// The SHA-256 (hex) of the hook content of a file's `text`; `None` when it holds no hooks.
/// An error when a settings file is not valid JSON.
pub(crate) fn content_hash(text: &str, format: Format) -> Result<Option<String>, String> {
    let content = match format {
        Format::Mew if text.trim().is_empty() => return Ok(None),
        Format::Mew => text.to_owned(),
        Format::ClaudeSettings => match settings_hooks(text)? {
            None => return Ok(None),
            Some(hooks) => hooks.to_string(),
        },
    };
    Ok(Some(sha256_hex(content.as_bytes())))
}

/// SHA-256 of `data`, lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    crate::skills::lock::FileHash::of(data).sha256
}

/// The trust file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrustError {
    /// Reading or writing failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file is not a trust file.
    #[error("{} is not a valid trust file: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The trusted hashes, by file path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustStore {
    /// Format version: 1.
    #[serde(default = "version")]
    version: u32,
    /// Absolute path of a hook file → SHA-256 of its hook content.
    #[serde(default)]
    files: BTreeMap<String, String>,
}

fn version() -> u32 {
    1
}

impl Default for TrustStore {
    fn default() -> Self {
        Self {
            version: version(),
            files: BTreeMap::new(),
        }
    }
}

impl TrustStore {
    /// Reads the trust file at `path`; a missing file trusts nothing.
    pub(crate) fn load(path: &Path) -> Result<Self, TrustError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(TrustError::Io {
                    action: "read",
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let store: Self = serde_json::from_str(&text).map_err(|err| TrustError::Invalid {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
        if store.version != 1 {
            return Err(TrustError::Invalid {
                path: path.to_owned(),
                message: format!("unknown version {}", store.version),
            });
        }
        Ok(store)
    }

    /// Whether `file`'s hook content with hash `hash` is trusted.
    pub(crate) fn is_trusted(&self, file: &Path, hash: &str) -> bool {
        self.files
            .get(&file.to_string_lossy().into_owned())
            .is_some_and(|trusted| trusted == hash)
    }

    /// Records `hash` as trusted for `file`.
    pub(crate) fn insert(&mut self, file: &Path, hash: &str) {
        self.files
            .insert(file.to_string_lossy().into_owned(), hash.to_owned());
    }

    /// Forgets `file`; true when it was trusted.
    pub(crate) fn remove(&mut self, file: &Path) -> bool {
        self.files
            .remove(&file.to_string_lossy().into_owned())
            .is_some()
    }

    /// Writes the store to `path` (its directory created if missing) through a temporary file
    /// and a rename, so a reader never sees half of it.
    pub(crate) fn save(&self, path: &Path) -> Result<(), TrustError> {
        let io_error = |action, path: &Path| {
            let path = path.to_owned();
            move |source| TrustError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        }
        let json = serde_json::to_string_pretty(self).map_err(|err| TrustError::Invalid {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
        static UNIQUE: AtomicU64 = AtomicU64::new(0);
        let temp = path.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(source) = fs::write(&temp, json + "\n") {
            let _ = fs::remove_file(&temp);
            return Err(io_error("write", &temp)(source));
        }
        fs::rename(&temp, path).map_err(|source| {
            let _ = fs::remove_file(&temp);
            io_error("write", path)(source)
        })
    }
}

/// What [`trust_project`] did with one of the project's hook files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileTrust {
    /// Its content is now trusted.
    Trusted {
        /// The hash recorded.
        hash: String,
    },
    /// It does not exist, or holds no hooks: nothing to trust (an earlier entry is removed).
    NoHooks,
    /// It could not be read or parsed; nothing was recorded for it.
    Broken {
        /// Why.
        message: String,
    },
}

/// Trusts the current content of every hook file of `project` (`.mew/hooks.yaml`,
/// `.claude/settings.json`, `.claude/settings.local.json`) and of its plugins, recording it in the trust file at
/// `trust_file`. Returns what became of each file. This is what `mew hooks trust` runs.
///
/// Does blocking file I/O.
pub(crate) fn trust_project(
    trust_file: &Path,
    project: &Path,
    plugins: &[HookFile],
) -> Result<Vec<(PathBuf, FileTrust)>, TrustError> {
    let mut store = TrustStore::load(trust_file)?;
    let mut report = Vec::new();
    for file in project_files(project)
        .into_iter()
        .chain(plugins.iter().cloned())
    {
        let outcome =
            match crate::user_file::read_text(&file.path, crate::user_file::MAX_USER_FILE_BYTES) {
                Err(crate::user_file::ReadError::NotFound) => FileTrust::NoHooks,
                Err(err) => FileTrust::Broken {
                    message: format!("cannot read: {err}"),
                },
                Ok(text) => match content_hash(&text, file.format) {
                    Ok(Some(hash)) => FileTrust::Trusted { hash },
                    Ok(None) => FileTrust::NoHooks,
                    Err(message) => FileTrust::Broken { message },
                },
            };
        match &outcome {
            FileTrust::Trusted { hash } => store.insert(&file.path, hash),
            FileTrust::NoHooks => {
                store.remove(&file.path);
            }
            FileTrust::Broken { .. } => {}
        }
        report.push((file.path, outcome));
    }
    store.save(trust_file)?;
    Ok(report)
}

/// Forgets the trust of every hook file of `project` and of its plugins; returns the files that were trusted.
pub(crate) fn untrust_project(
    trust_file: &Path,
    project: &Path,
    plugins: &[HookFile],
) -> Result<Vec<PathBuf>, TrustError> {
    let mut store = TrustStore::load(trust_file)?;
    let removed: Vec<PathBuf> = project_files(project)
        .into_iter()
        .chain(plugins.iter().cloned())
        .filter(|file| store.remove(&file.path))
        .map(|file| file.path)
        .collect();
    if !removed.is_empty() {
        store.save(trust_file)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::rules::{SourceStatus, load, standard_files};

    const RULE: &str =
        "hooks:\n  - name: p\n    event: Stop\n    action: {type: prompt, text: hi}\n";

    #[test]
    fn hashes_cover_hooks_only_in_settings_files() {
        let a = content_hash(
            r#"{"model": "a", "hooks": {"Stop": []}}"#,
            Format::ClaudeSettings,
        );
        let b = content_hash(
            r#"{"model": "b", "hooks": {"Stop": []}}"#,
            Format::ClaudeSettings,
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            content_hash(r#"{"hooks": {"Stop": [{}]}}"#, Format::ClaudeSettings)
        );
        assert_eq!(
            content_hash(r#"{"model": "a"}"#, Format::ClaudeSettings),
            Ok(None)
        );
        assert!(content_hash("{", Format::ClaudeSettings).is_err());
        assert_eq!(content_hash("  \n", Format::Mew), Ok(None));
        assert_eq!(
            content_hash("abc", Format::Mew),
            Ok(Some(
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".to_owned()
            ))
        );
    }

    #[test]
    fn untrusted_project_hooks_are_skipped_trusted_run_edited_skipped_again() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        let home = dir.path().join("home");
        fs::create_dir_all(project.join(".mew")).unwrap();
        fs::create_dir_all(project.join(".claude")).unwrap();
        fs::create_dir_all(home.join(".mew")).unwrap();
        fs::write(project.join(".mew/hooks.yaml"), RULE).unwrap();
        fs::write(
            project.join(".claude/settings.json"),
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}"#,
        )
        .unwrap();
        fs::write(
            home.join(".mew/hooks.yaml"),
            RULE.replace("name: p", "name: u"),
        )
        .unwrap();
        let trust_file = default_trust_file(&home);
        let files = standard_files(Some(&home), &project);
        let names = |store: &TrustStore| -> Vec<String> {
            load(&files, store)
                .rules
                .iter()
                .map(|rule| rule.name.clone())
                .collect()
        };

        // Untrusted: only the user's hook runs; each project file is a problem.
        let store = TrustStore::load(&trust_file).unwrap();
        assert_eq!(store, TrustStore::default());
        let loaded = load(&files, &store);
        assert_eq!(names(&store), ["u"]);
        assert_eq!(loaded.problems.len(), 2);
        assert!(
            loaded.problems[0]
                .message
                .contains("skipped until trusted again")
        );
        assert_eq!(loaded.sources[1].status, SourceStatus::Untrusted);

        // Trusted: all run.
        let report = trust_project(&trust_file, &project, &[]).unwrap();
        assert!(matches!(report[0].1, FileTrust::Trusted { .. }));
        assert!(matches!(report[1].1, FileTrust::Trusted { .. }));
        assert_eq!(report[2].1, FileTrust::NoHooks);
        let store = TrustStore::load(&trust_file).unwrap();
        assert_eq!(
            names(&store),
            ["u", "p", ".claude/settings.json#Stop[0][0]"]
        );

        // Edited: skipped again; an edit outside `hooks` in a settings file keeps its trust.
        fs::write(
            project.join(".mew/hooks.yaml"),
            RULE.replace("hi", "changed"),
        )
        .unwrap();
        fs::write(
            project.join(".claude/settings.json"),
            r#"{"model": "x", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}"#,
        )
        .unwrap();
        assert_eq!(names(&store), ["u", ".claude/settings.json#Stop[0][0]"]);

        // Trusted again, then untrusted.
        trust_project(&trust_file, &project, &[]).unwrap();
        assert_eq!(names(&TrustStore::load(&trust_file).unwrap()).len(), 3);
        let removed = untrust_project(&trust_file, &project, &[]).unwrap();
        assert_eq!(removed.len(), 2);
        assert_eq!(names(&TrustStore::load(&trust_file).unwrap()), ["u"]);
    }

    #[test]
    fn a_broken_trust_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TRUST_FILE_NAME);
        fs::write(&path, "[").unwrap();
        let err = TrustStore::load(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{} is not a valid trust file: ", path.display())),
            "{err}"
        );
        fs::write(&path, r#"{"version": 2, "files": {}}"#).unwrap();
        assert!(
            TrustStore::load(&path)
                .unwrap_err()
                .to_string()
                .ends_with("unknown version 2")
        );
        // Trusting over a broken file fails instead of erasing it.
        assert!(trust_project(&path, dir.path(), &[]).is_err());
    }
}
