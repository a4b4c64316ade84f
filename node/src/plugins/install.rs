//! Installing a plugin from a local folder or a git repository, and removing one.
//!
//! # Sources
//!
//! A source that names an existing folder is copied from there. Anything else that looks like
//! a git URL (`https://`, `ssh://`, `git://`, `file://`, `git@host:path`, or ending in `.git`)
//! is cloned with the system's `git` (`git clone --depth 1`, a `#REF` suffix naming a branch
//! or tag), and the commit installed is recorded. `git` runs with the node's base environment
//! and no terminal prompts, within [`InstallOptions::timeout`].
//!
//! # Checks
//!
//! The plugin must have a manifest that parses ([`super::manifest`]); it is installed under
//! its `name`. Each limit of [`InstallOptions`] has its own error: more than `max_files`
//! files, a file over `max_file_bytes`, more than `max_total_bytes` in all, a folder nested
//! deeper than `max_depth`. `.git` is not copied; symlinks and other special files are skipped
//! with a warning: nothing installed is ever a link.
//!
//! # Layout and atomicity
//!
//! The plugin ends up in `<root>/<name>/`, recorded in `<root>/plugins-lock.json`. It is
//! copied to a hidden staging folder in the root first, so the final `rename` is atomic; an
//! existing version is renamed aside and put back if the new one cannot be moved in or the
//! lock file cannot be written, and deleted only once both succeeded. A failure at any step
//! leaves the previous version and the lock file as they were, and no staging folder behind.
//! Installs and removals in one process are serialized.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mew_cards::Timestamp;

use super::manifest::{self, ManifestError};
use super::{LOCK_FILE, LockEntry, LockError, read_lock};
use crate::skills::unique_suffix;

/// Serializes installs and removals within this process.
static INSTALLS: Mutex<()> = Mutex::new(());

/// Limits of one install.
#[derive(Debug, Clone)]
pub(crate) struct InstallOptions {
    /// Most files in one plugin.
    pub(crate) max_files: usize,
    /// Largest file, in bytes.
    pub(crate) max_file_bytes: u64,
    /// All files together, in bytes.
    pub(crate) max_total_bytes: u64,
    /// Deepest folder nesting.
    pub(crate) max_depth: usize,
    /// Longest a `git clone` may take.
    pub(crate) timeout: Duration,
}

impl Default for InstallOptions {
    fn default() -> Self {
        Self {
            max_files: 2000,
            max_file_bytes: 16 << 20,
            max_total_bytes: 64 << 20,
            max_depth: 12,
            timeout: Duration::from_secs(120),
        }
    }
}

/// Why an install or removal failed; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    /// The source is neither a folder nor a git URL.
    #[error("{0} is neither a folder nor a git URL")]
    Source(String),
    /// `git` failed or could not run.
    #[error("git clone of {url} failed: {message}")]
    Git {
        /// The URL.
        url: String,
        /// What git said.
        message: String,
    },
    /// The plugin's manifest cannot be used.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Over a limit.
    #[error("the plugin is too large: {0}")]
    TooLarge(String),
    /// The lock file cannot be used.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// No such installed plugin.
    #[error("no plugin named {0} is installed here")]
    NotInstalled(String),
    /// A file operation failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InstallError + use<> {
    let path = path.to_owned();
    move |source| InstallError::Io {
        action,
        path,
        source,
    }
}

/// What an install did.
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    /// The plugin's name.
    pub(crate) name: String,
    /// Its folder.
    pub(crate) dir: PathBuf,
    /// What the lock file now records.
    pub(crate) entry: LockEntry,
    /// True when it replaced an installed version.
    pub(crate) replaced: bool,
    /// What was skipped, and the manifest's warnings.
    pub(crate) warnings: Vec<String>,
}

/// A source as given.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A local folder.
    Dir(PathBuf),
    /// A git URL and a branch or tag.
    Git {
        url: String,
        git_ref: Option<String>,
    },
}

fn parse_source(input: &str) -> Result<Source, InstallError> {
    let path = Path::new(input);
    if path.is_dir() {
        return Ok(Source::Dir(path.to_owned()));
    }
    let (url, git_ref) = match input.rsplit_once('#') {
        Some((url, git_ref)) if !git_ref.is_empty() => (url, Some(git_ref.to_owned())),
        _ => (input, None),
    };
    let looks_git = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
        || (url.starts_with("git@") && url.contains(':'))
        || url.ends_with(".git");
    // A ref or URL starting with `-` would be read by git as an option.
    if !looks_git || url.starts_with('-') || git_ref.as_deref().is_some_and(|r| r.starts_with('-'))
    {
        return Err(InstallError::Source(input.to_owned()));
    }
    Ok(Source::Git {
        url: url.to_owned(),
        git_ref,
    })
}

/// Installs the plugin at `source` into `root`. `env` is the node's environment snapshot, of
/// which `git` gets the base variables.
pub(crate) async fn install(
    source: &str,
    root: &Path,
    env: &HashMap<String, String>,
    options: &InstallOptions,
) -> Result<Installed, InstallError> {
    let parsed = parse_source(source)?;
    fs::create_dir_all(root).map_err(io_error("create", root))?;
    let staging = root.join(format!(".install-{}", unique_suffix()));
    let result = stage_and_swap(source, &parsed, root, &staging, env, options).await;
    let _ = fs::remove_dir_all(&staging);
    result
}

async fn stage_and_swap(
    source: &str,
    parsed: &Source,
    root: &Path,
    staging: &Path,
    env: &HashMap<String, String>,
    options: &InstallOptions,
) -> Result<Installed, InstallError> {
    let plugin_dir = staging.join("plugin");
    let mut warnings = Vec::new();
    let commit = match parsed {
        Source::Dir(dir) => {
            copy_tree(dir, &plugin_dir, options, &mut warnings)?;
            None
        }
        Source::Git { url, git_ref } => {
            let clone = staging.join("clone");
            let commit = git_clone(url, git_ref.as_deref(), &clone, env, options).await?;
            copy_tree(&clone, &plugin_dir, options, &mut warnings)?;
            Some(commit)
        }
    };
    let (manifest, manifest_warnings) = manifest::read(&plugin_dir)?;
    warnings.extend(manifest_warnings);
    let files =
        crate::skills::lock::hash_dir(&plugin_dir).map_err(io_error("read", &plugin_dir))?;
    let entry = LockEntry {
        source: source.to_owned(),
        commit,
        version: manifest.version.clone(),
        installed_at: Timestamp::now(),
        files,
    };
    let _guard = INSTALLS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut lock = read_lock(root)?;
    let target = root.join(&manifest.name);
    let aside = root.join(format!(".replaced-{}", unique_suffix()));
    let replaced = target.exists();
    if replaced {
        fs::rename(&target, &aside).map_err(io_error("move aside", &target))?;
    }
    let restore = |error: InstallError| {
        if replaced {
            let _ = fs::remove_dir_all(&target);
            let _ = fs::rename(&aside, &target);
        }
        error
    };
    fs::rename(&plugin_dir, &target)
        .map_err(io_error("move into place", &target))
        .map_err(restore)?;
    lock.plugins.insert(manifest.name.clone(), entry.clone());
    crate::skills::lock::write_json(&root.join(LOCK_FILE), &lock, |from, to| {
        fs::rename(from, to)
    })
    .map_err(io_error("write", &root.join(LOCK_FILE)))
    .map_err(restore)?;
    if replaced {
        let _ = fs::remove_dir_all(&aside);
    }
    Ok(Installed {
        name: manifest.name,
        dir: target,
        entry,
        replaced,
        warnings,
    })
}

/// Clones `url` (at `git_ref`) into `into`, and returns the commit checked out.
async fn git_clone(
    url: &str,
    git_ref: Option<&str>,
    into: &Path,
    env: &HashMap<String, String>,
    options: &InstallOptions,
) -> Result<String, InstallError> {
    let failed = |message: String| InstallError::Git {
        url: url.to_owned(),
        message,
    };
    let mut args: Vec<OsString> = [
        "clone",
        "--depth",
        "1",
        "--quiet",
        "--no-recurse-submodules",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if let Some(git_ref) = git_ref {
        args.extend(["--branch", git_ref].map(OsString::from));
    }
    args.extend(["--", url].map(OsString::from));
    args.push(into.as_os_str().to_owned());
    run_git(&args, env, options.timeout).await.map_err(failed)?;
    let rev_parse = [
        OsString::from("-C"),
        into.as_os_str().to_owned(),
        OsString::from("rev-parse"),
        OsString::from("HEAD"),
    ];
    let head = run_git(&rev_parse, env, options.timeout)
        .await
        .map_err(failed)?;
    Ok(head.trim().to_owned())
}

/// Runs `git` with `args`; its stdout, or what went wrong.
async fn run_git(
    args: &[OsString],
    env: &HashMap<String, String>,
    timeout: Duration,
) -> Result<String, String> {
    let mut command = crate::process::command("git", args);
    crate::process::pass_env(&mut command, env, crate::process::BASE_ENV.iter().copied());
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut group = crate::process::ProcessGroup::spawn(&mut command)
        .map_err(|err| format!("cannot run git (is it installed?): {err}"))?;
    let stdout = group.child_mut().stdout.take();
    let stderr = group.child_mut().stderr.take();
    let run = async {
        // git prints little: a commit id, or an error. Reading is bounded all the same.
        let (out, err, status) = tokio::join!(read_some(stdout), read_some(stderr), group.wait());
        (out, err, status)
    };
    let (stdout, stderr, status) = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| format!("no answer within {}s", timeout.as_secs()))?;
    match status {
        Ok(status) if status.success() => Ok(stdout),
        Ok(status) => Err(format!("{status}: {}", stderr.trim())),
        Err(err) => Err(err.to_string()),
    }
}

/// What a child wrote to `pipe`, at most 64 KiB of it.
async fn read_some(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    use tokio::io::AsyncReadExt as _;
    let Some(pipe) = pipe else {
        return String::new();
    };
    let mut bytes = Vec::new();
    let _ = pipe.take(64 * 1024).read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies the regular files of `from` into `to` (created), within the limits; `.git` is left
/// out, and symlinks and special files are skipped with a warning.
fn copy_tree(
    from: &Path,
    to: &Path,
    options: &InstallOptions,
    warnings: &mut Vec<String>,
) -> Result<(), InstallError> {
    let mut files = 0usize;
    let mut total = 0u64;
    let mut stack = vec![(from.to_owned(), to.to_owned(), 0usize)];
    while let Some((dir, target, depth)) = stack.pop() {
        if depth > options.max_depth {
            return Err(InstallError::TooLarge(format!(
                "{} is nested more than {} folders deep",
                dir.display(),
                options.max_depth
            )));
        }
        fs::create_dir_all(&target).map_err(io_error("create", &target))?;
        let mut entries: Vec<fs::DirEntry> = fs::read_dir(&dir)
            .map_err(io_error("read", &dir))?
            .collect::<Result<_, _>>()
            .map_err(io_error("read", &dir))?;
        entries.sort_by_key(fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name();
            let path = entry.path();
            let kind = entry.file_type().map_err(io_error("read", &path))?;
            if kind.is_dir() {
                if name != ".git" {
                    stack.push((path, target.join(&name), depth + 1));
                }
            } else if kind.is_file() {
                let size = entry.metadata().map_err(io_error("read", &path))?.len();
                files += 1;
                total += size;
                if files > options.max_files {
                    return Err(InstallError::TooLarge(format!(
                        "more than {} files",
                        options.max_files
                    )));
                }
                if size > options.max_file_bytes {
                    return Err(InstallError::TooLarge(format!(
                        "{} has {size} bytes, over the limit of {}",
                        path.display(),
                        options.max_file_bytes
                    )));
                }
                if total > options.max_total_bytes {
                    return Err(InstallError::TooLarge(format!(
                        "over {} bytes in all",
                        options.max_total_bytes
                    )));
                }
                let copy = target.join(&name);
                fs::copy(&path, &copy).map_err(io_error("copy", &path))?;
            } else {
                warnings.push(format!(
                    "{} skipped: only regular files are installed, never links",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// Removes the plugin `name` from `root`: its folder and its lock entry.
pub(crate) fn remove(root: &Path, name: &str) -> Result<LockEntry, InstallError> {
    let _guard = INSTALLS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut lock = read_lock(root)?;
    let Some(entry) = lock.plugins.remove(name) else {
        return Err(InstallError::NotInstalled(name.to_owned()));
    };
    let dir = root.join(name);
    let aside = root.join(format!(".removed-{}", unique_suffix()));
    let moved = dir.exists();
    if moved {
        fs::rename(&dir, &aside).map_err(io_error("move aside", &dir))?;
    }
    if let Err(err) = crate::skills::lock::write_json(&root.join(LOCK_FILE), &lock, |from, to| {
        fs::rename(from, to)
    }) {
        if moved {
            let _ = fs::rename(&aside, &dir);
        }
        return Err(io_error("write", &root.join(LOCK_FILE))(err));
    }
    if moved {
        let _ = fs::remove_dir_all(&aside);
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_folders_or_git_urls() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            parse_source(dir.path().to_str().unwrap()).unwrap(),
            Source::Dir(dir.path().to_owned())
        );
        assert_eq!(
            parse_source("https://example.com/o/kit.git#v1").unwrap(),
            Source::Git {
                url: "https://example.com/o/kit.git".to_owned(),
                git_ref: Some("v1".to_owned())
            }
        );
        assert!(matches!(
            parse_source("git@example.com:o/kit"),
            Ok(Source::Git { git_ref: None, .. })
        ));
        for bad in [
            "./no-such-folder",
            "kit",
            "file://x#--upload-pack=x",
            "-oops.git",
        ] {
            assert!(
                matches!(parse_source(bad), Err(InstallError::Source(_))),
                "{bad}"
            );
        }
    }

    fn plugin(dir: &Path, name: &str) {
        fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
        fs::write(
            dir.join(manifest::MANIFEST),
            format!(r#"{{"name": "{name}", "version": "1.0.0"}}"#),
        )
        .unwrap();
        fs::create_dir_all(dir.join("agents")).unwrap();
        fs::write(dir.join("agents/a.md"), "---\nname: a\n---\nhi\n").unwrap();
    }

    #[tokio::test]
    async fn a_folder_installs_locked_replaces_and_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("src");
        plugin(&source, "kit");
        fs::create_dir_all(source.join(".git")).unwrap();
        fs::write(source.join(".git/HEAD"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", source.join("agents/link.md")).unwrap();
        let root = tmp.path().join("root");
        let env = HashMap::new();
        let options = InstallOptions::default();
        let installed = install(source.to_str().unwrap(), &root, &env, &options)
            .await
            .unwrap();
        assert_eq!(installed.name, "kit");
        assert!(!installed.replaced);
        assert_eq!(
            installed.entry.files.keys().collect::<Vec<_>>(),
            [".claude-plugin/plugin.json", "agents/a.md"]
        );
        assert_eq!(installed.warnings.len(), 1, "{:?}", installed.warnings);
        let loaded = super::super::load(&[(root.clone(), super::super::PluginScope::User)]);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        assert_eq!(loaded.plugins[0].agent_paths(), [root.join("kit/agents")]);

        fs::write(source.join("agents/a.md"), "---\nname: a\n---\nnew\n").unwrap();
        let again = install(source.to_str().unwrap(), &root, &env, &options)
            .await
            .unwrap();
        assert!(again.replaced);
        assert_eq!(
            fs::read_to_string(root.join("kit/agents/a.md")).unwrap(),
            "---\nname: a\n---\nnew\n"
        );
        // Nothing but the plugin and the lock file is left in the root.
        let mut names: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["kit", LOCK_FILE]);

        remove(&root, "kit").unwrap();
        assert!(!root.join("kit").exists());
        assert!(read_lock(&root).unwrap().plugins.is_empty());
        assert!(matches!(
            remove(&root, "kit"),
            Err(InstallError::NotInstalled(_))
        ));
    }

    #[tokio::test]
    async fn limits_and_bad_manifests_install_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("src");
        plugin(&source, "kit");
        let root = tmp.path().join("root");
        let env = HashMap::new();
        let small = InstallOptions {
            max_files: 1,
            ..InstallOptions::default()
        };
        let err = install(source.to_str().unwrap(), &root, &env, &small)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the plugin is too large: more than 1 files"
        );
        fs::write(source.join(manifest::MANIFEST), r#"{"name": "Kit!"}"#).unwrap();
        let err = install(
            source.to_str().unwrap(),
            &root,
            &env,
            &InstallOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("is not a plugin name"), "{err}");
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_changed_file_or_an_unlocked_folder_does_not_load() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("src");
        plugin(&source, "kit");
        let root = tmp.path().join("root");
        install(
            source.to_str().unwrap(),
            &root,
            &HashMap::new(),
            &InstallOptions::default(),
        )
        .await
        .unwrap();
        fs::write(root.join("kit/agents/a.md"), "tampered").unwrap();
        plugin(&root.join("copied"), "copied");
        let loaded = super::super::load(&[(root.clone(), super::super::PluginScope::User)]);
        assert!(loaded.plugins.is_empty());
        let problems: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("files changed since it was installed (agents/a.md)"));
        assert!(problems[1].contains("copied: not in the plugins lock file"));
    }
}
