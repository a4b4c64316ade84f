//! The lock file of an install root: where each installed skill came from and the SHA-256 of
//! every file it had, so that drift can be found later.
//!
//! # Format
//!
//! `skills-lock.json` in the install root, written whole (to a temporary file next to it, then
//! renamed over it), keys sorted:
//!
//! ```json
//! {
//!   "version": 1,
//!   "skills": {
//!     "pdf": {
//!       "source": "https://github.com/owner/repo/tree/main/skills/pdf",
//!       "repository": "owner/repo",
//!       "path": "skills/pdf",
//!       "ref": "main",
//!       "resolvedRef": "0123456789abcdef0123456789abcdef01234567",
//!       "installedAt": "2026-01-31T12:00:00Z",
//!       "files": {
//!         "SKILL.md": { "sha256": "…64 hex digits…", "size": 1234 },
//!         "scripts/fill.py": { "sha256": "…", "size": 567 }
//!       }
//!     }
//!   }
//! }
//! ```
//!
//! `ref` is the ref the URL named (absent: the default branch); `resolvedRef` is the commit it
//! pointed to when GitHub said so, else the ref itself (or `HEAD`). File paths are relative to
//! the skill's directory, with `/` separators. A missing lock file is an empty one; a lock file
//! that cannot be parsed is an error, never overwritten.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use aws_lc_rs::digest::{self, SHA256};
use mew_cards::Timestamp;
use serde::{Deserialize, Serialize};

/// The lock file's name, in the install root.
pub(crate) const LOCK_FILE: &str = "skills-lock.json";

/// The format version written.
pub(crate) const LOCK_VERSION: u32 = 1;

/// A whole lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockFile {
    /// [`LOCK_VERSION`].
    pub(crate) version: u32,
    /// By skill name.
    #[serde(default)]
    pub(crate) skills: BTreeMap<String, LockEntry>,
}

impl Default for LockFile {
    fn default() -> Self {
        Self {
            version: LOCK_VERSION,
            skills: BTreeMap::new(),
        }
    }
}

/// One installed skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LockEntry {
    /// The URL it was installed from, as given.
    pub(crate) source: String,
    /// `owner/repo` on GitHub.
    pub(crate) repository: String,
    /// The skill directory's path in the repository (empty: the repository root).
    pub(crate) path: String,
    /// The ref the URL named; `None` for the default branch.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub(crate) git_ref: Option<String>,
    /// The commit installed, or the ref when the commit is unknown.
    pub(crate) resolved_ref: String,
    /// When it was installed.
    pub(crate) installed_at: Timestamp,
    /// Every file, by relative path.
    pub(crate) files: BTreeMap<String, FileHash>,
}

/// One installed file's hash and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileHash {
    /// SHA-256, lowercase hex.
    pub(crate) sha256: String,
    /// Size in bytes.
    pub(crate) size: u64,
}

impl FileHash {
    /// The hash of `data`.
    pub(crate) fn of(data: &[u8]) -> Self {
        Self {
            sha256: hex(digest::digest(&SHA256, data).as_ref()),
            size: data.len() as u64,
        }
    }
}

/// Lowercase hex of `bytes`: the lock file's spelling of a digest. Written here because
/// aws-lc-rs computes digests but does not encode them, and a crate for twelve lines of
/// encoding is not worth a dependency.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// Why the lock file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Reading or writing failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is not a lock file; it is left alone.
    #[error("{} is not a valid skills lock file ({message}); fix or delete it", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// Written by a newer Mew.
    #[error("{} has version {version}; this Mew reads version {LOCK_VERSION}", .path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u32,
    },
}

/// The lock file path of `root`.
pub(crate) fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// Reads the lock file of `root`; a missing one is empty.
pub(crate) fn read_lock(root: &Path) -> Result<LockFile, LockError> {
    let path = lock_path(root);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(LockFile::default()),
        Err(source) => {
            return Err(LockError::Io {
                action: "read",
                path,
                source,
            });
        }
    };
    let lock: LockFile = serde_json::from_str(&text).map_err(|err| LockError::Corrupt {
        path: path.clone(),
        message: err.to_string(),
    })?;
    if lock.version > LOCK_VERSION {
        return Err(LockError::UnsupportedVersion {
            path,
            version: lock.version,
        });
    }
    Ok(lock)
}

/// Writes the lock file of `root` whole: to a temporary file next to it, synced, then moved
/// over it with `rename`.
pub(crate) fn write_lock(
    root: &Path,
    lock: &LockFile,
    rename: fn(&Path, &Path) -> io::Result<()>,
) -> Result<(), LockError> {
    let path = lock_path(root);
    write_json(&path, lock, rename).map_err(|source| LockError::Io {
        action: "write",
        path,
        source,
    })
}

/// Writes `value` as pretty JSON to `path` whole: to a temporary file next to it, synced, then
/// moved over it with `rename`; a failure leaves `path` as it was and no temporary file.
pub(crate) fn write_json(
    path: &Path,
    value: &impl Serialize,
    rename: fn(&Path, &Path) -> io::Result<()>,
) -> io::Result<()> {
    let file_name = path
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    let temp = path.with_file_name(format!(".{file_name}.{}", super::unique_suffix()));
    let mut text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    text.push('\n');
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| rename(&temp, path));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// The installed skills of `root`, by name.
#[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
pub(crate) fn list(root: &Path) -> Result<Vec<(String, LockEntry)>, LockError> {
    Ok(read_lock(root)?.skills.into_iter().collect())
}

/// How one installed skill differs from its lock entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SkillDrift {
    /// The skill.
    pub(crate) name: String,
    /// True when its directory is gone (its files are then all missing).
    pub(crate) missing_dir: bool,
    /// Files whose content changed.
    pub(crate) changed: Vec<String>,
    /// Files of the lock entry that are gone.
    pub(crate) missing: Vec<String>,
    /// Files (or symlinks, or other non-regular entries) not in the lock entry.
    pub(crate) extra: Vec<String>,
    /// Files that could not be read, with why.
    pub(crate) unreadable: Vec<(String, String)>,
}

impl SkillDrift {
    /// True when the skill is exactly as installed.
    pub(crate) fn is_clean(&self) -> bool {
        !self.missing_dir
            && self.changed.is_empty()
            && self.missing.is_empty()
            && self.extra.is_empty()
            && self.unreadable.is_empty()
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct VerifyReport {
    /// Every locked skill, by name, clean ones included.
    pub(crate) skills: Vec<SkillDrift>,
    /// Skill directories of the root that the lock file does not know (not drift: skills
    /// written by hand).
    pub(crate) untracked: Vec<String>,
}

impl VerifyReport {
    /// True when every locked skill is exactly as installed.
    pub(crate) fn is_clean(&self) -> bool {
        self.skills.iter().all(SkillDrift::is_clean)
    }

    /// The skills that drifted.
    pub(crate) fn drifted(&self) -> impl Iterator<Item = &SkillDrift> {
        self.skills.iter().filter(|skill| !skill.is_clean())
    }
}

/// Compares every skill of `root`'s lock file with what is on disk. Symlinks are never
/// followed: one inside a skill is an extra entry. Blocking.
pub(crate) fn verify(root: &Path) -> Result<VerifyReport, LockError> {
    let lock = read_lock(root)?;
    let mut report = VerifyReport::default();
    for (name, entry) in &lock.skills {
        report
            .skills
            .push(verify_skill(&root.join(name), name, entry));
    }
    if let Ok(entries) = fs::read_dir(root) {
        let mut untracked: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.') && !lock.skills.contains_key(name))
            .collect();
        untracked.sort();
        report.untracked = untracked;
    }
    Ok(report)
}

fn verify_skill(dir: &Path, name: &str, entry: &LockEntry) -> SkillDrift {
    verify_files(dir, name, &entry.files)
}

/// Compares the directory `dir` (called `name` in the report) with the files and hashes it
/// had when it was installed. Symlinks are never followed. Blocking.
pub(crate) fn verify_files(
    dir: &Path,
    name: &str,
    files: &BTreeMap<String, FileHash>,
) -> SkillDrift {
    let entry_files = files;
    let mut drift = SkillDrift {
        name: name.to_owned(),
        ..SkillDrift::default()
    };
    if !fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()) {
        drift.missing_dir = true;
        drift.missing = entry_files.keys().cloned().collect();
        return drift;
    }
    let mut on_disk: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut others: Vec<String> = Vec::new();
    walk(dir, "", &mut on_disk, &mut others);
    for (path, expected) in entry_files {
        match on_disk.remove(path) {
            None => drift.missing.push(path.clone()),
            Some(file) => match hash_file(&file) {
                Ok(actual) if actual == *expected => {}
                Ok(_) => drift.changed.push(path.clone()),
                Err(err) => drift.unreadable.push((path.clone(), err.to_string())),
            },
        }
    }
    drift.extra = on_disk.into_keys().chain(others).collect();
    drift.extra.sort();
    drift
}

/// Collects the regular files under `dir` (relative paths with `/`) into `files`, and every
/// other non-directory entry (symlinks, sockets...) into `others`, without following symlinks.
fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, PathBuf>, others: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(&entry.path(), &rel, files, others),
            Ok(kind) if kind.is_file() => {
                files.insert(rel, entry.path());
            }
            _ => others.push(rel),
        }
    }
}

/// The hash of every regular file under `dir`, by relative path with `/` separators, without
/// following symlinks (what a lock entry records). Blocking.
pub(crate) fn hash_dir(dir: &Path) -> io::Result<BTreeMap<String, FileHash>> {
    let mut on_disk: BTreeMap<String, PathBuf> = BTreeMap::new();
    walk(dir, "", &mut on_disk, &mut Vec::new());
    on_disk
        .into_iter()
        .map(|(rel, path)| Ok((rel, hash_file(&path)?)))
        .collect()
}

fn hash_file(path: &Path) -> io::Result<FileHash> {
    let mut file = fs::File::open(path)?;
    let mut hasher = digest::Context::new(&SHA256);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        size += read as u64;
        hasher.update(&buffer[..read]);
    }
    Ok(FileHash {
        sha256: hex(hasher.finish().as_ref()),
        size,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(files: &[(&str, &[u8])]) -> LockEntry {
        LockEntry {
            source: "https://github.com/o/r/tree/main/skills/demo".to_owned(),
            repository: "o/r".to_owned(),
            path: "skills/demo".to_owned(),
            git_ref: Some("main".to_owned()),
            resolved_ref: "main".to_owned(),
            installed_at: Timestamp::from_unix(1_769_860_800, 0),
            files: files
                .iter()
                .map(|(path, data)| ((*path).to_owned(), FileHash::of(data)))
                .collect(),
        }
    }

    #[test]
    fn lock_file_format() {
        let tmp = tempfile::tempdir().unwrap();
        let mut lock = LockFile::default();
        lock.skills
            .insert("demo".to_owned(), entry(&[("SKILL.md", b"abc")]));
        write_lock(tmp.path(), &lock, |from, to| fs::rename(from, to)).unwrap();
        let text = fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            json!({
                "version": 1,
                "skills": {
                    "demo": {
                        "source": "https://github.com/o/r/tree/main/skills/demo",
                        "repository": "o/r",
                        "path": "skills/demo",
                        "ref": "main",
                        "resolvedRef": "main",
                        "installedAt": "2026-01-31T12:00:00Z",
                        "files": {
                            "SKILL.md": {
                                "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                                "size": 3,
                            },
                        },
                    },
                },
            })
        );
        assert_eq!(read_lock(tmp.path()).unwrap(), lock);
        // No temporary file is left.
        let names: Vec<String> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [LOCK_FILE]);
    }

    #[test]
    fn a_file_hashed_in_chunks_matches_the_one_shot_hash() {
        // A million bytes span many reads of `hash_file`'s buffer, the last one partial; the
        // expected digest is the NIST vector for a million `a`s.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big");
        let data = vec![b'a'; 1_000_000];
        fs::write(&path, &data).unwrap();
        let expected = FileHash {
            sha256: "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0".to_owned(),
            size: 1_000_000,
        };
        assert_eq!(hash_file(&path).unwrap(), expected);
        assert_eq!(FileHash::of(&data), expected);
        assert_eq!(
            FileHash::of(b"").sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn missing_corrupt_and_future_lock_files() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read_lock(tmp.path()).unwrap(), LockFile::default());
        assert_eq!(list(tmp.path()).unwrap(), []);
        fs::write(tmp.path().join(LOCK_FILE), "{not json").unwrap();
        let err = read_lock(tmp.path()).unwrap_err();
        assert!(matches!(err, LockError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("fix or delete it"));
        fs::write(
            tmp.path().join(LOCK_FILE),
            r#"{"version": 2, "skills": {}}"#,
        )
        .unwrap();
        assert!(matches!(
            read_lock(tmp.path()).unwrap_err(),
            LockError::UnsupportedVersion { version: 2, .. }
        ));
    }

    #[test]
    fn verify_finds_changed_missing_and_extra_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let dir = root.join("demo");
        fs::create_dir_all(dir.join("scripts")).unwrap();
        fs::write(dir.join("SKILL.md"), "skill").unwrap();
        fs::write(dir.join("scripts/run.sh"), "run").unwrap();
        fs::write(dir.join("notes.md"), "notes").unwrap();
        let mut lock = LockFile::default();
        lock.skills.insert(
            "demo".to_owned(),
            entry(&[
                ("SKILL.md", b"skill"),
                ("scripts/run.sh", b"run"),
                ("notes.md", b"notes"),
            ]),
        );
        lock.skills
            .insert("gone".to_owned(), entry(&[("SKILL.md", b"x")]));
        write_lock(root, &lock, |from, to| fs::rename(from, to)).unwrap();
        fs::create_dir_all(root.join("handmade")).unwrap();

        let report = verify(root).unwrap();
        assert!(!report.is_clean());
        assert_eq!(report.untracked, ["handmade"]);
        assert!(report.skills[0].is_clean(), "{:?}", report.skills[0]);
        assert_eq!(
            report.skills[1],
            SkillDrift {
                name: "gone".to_owned(),
                missing_dir: true,
                missing: vec!["SKILL.md".to_owned()],
                ..SkillDrift::default()
            }
        );

        fs::write(dir.join("SKILL.md"), "edited").unwrap();
        fs::remove_file(dir.join("notes.md")).unwrap();
        fs::write(dir.join("scripts/extra.py"), "new").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let report = verify(root).unwrap();
        let mut expected_extra = vec!["scripts/extra.py".to_owned()];
        #[cfg(unix)]
        expected_extra.insert(0, "link".to_owned());
        assert_eq!(
            report.skills[0],
            SkillDrift {
                name: "demo".to_owned(),
                changed: vec!["SKILL.md".to_owned()],
                missing: vec!["notes.md".to_owned()],
                extra: expected_extra,
                ..SkillDrift::default()
            }
        );
        assert_eq!(
            report
                .drifted()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>(),
            ["demo", "gone"]
        );
    }
}
