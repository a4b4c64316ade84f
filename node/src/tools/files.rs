//! File helpers the file tools share: path resolution, binary sniffing, atomic writes, line cuts.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ToolContext, ToolOutput};

/// How many leading bytes decide whether a file is binary (as git and ripgrep do).
pub(crate) const SNIFF_LEN: usize = 8192;

/// The most characters of one line the tools show; the rest is cut.
pub(crate) const MAX_LINE_CHARS: usize = 2000;

/// Resolves an optional directory argument `path` as [`resolve`] does; without one, the
/// context's cwd.
pub(crate) fn resolve_or_cwd(ctx: &ToolContext, path: Option<&str>) -> Result<PathBuf, ToolOutput> {
    match path {
        None => Ok(ctx.cwd.clone()),
        Some(path) => resolve(ctx, "path", path),
    }
}

/// Resolves a path argument: absolute paths stay, relative ones join the context's cwd.
/// An empty argument is an error answer naming `field`.
pub(crate) fn resolve(ctx: &ToolContext, field: &str, path: &str) -> Result<PathBuf, ToolOutput> {
    if path.is_empty() {
        return Err(ToolOutput::error(format!("{field} is empty")));
    }
    let path = Path::new(path);
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        ctx.cwd.join(path)
    })
}

/// True when `prefix` (a file's first bytes) looks binary: it holds a NUL byte.
pub(crate) fn looks_binary(prefix: &[u8]) -> bool {
    prefix.iter().take(SNIFF_LEN).any(|&byte| byte == 0)
}

/// `text` cut to at most [`MAX_LINE_CHARS`] characters, with a marker when cut.
pub(crate) fn cut_line(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!(
            "{}… [line cut at {MAX_LINE_CHARS} characters]",
            &text[..end]
        ),
    }
}

/// A walker over `root` that skips what `.gitignore` and `.ignore` files exclude (in or out of
/// a git repository, but not the user's global excludes, which depend on the node's home) and
/// the `.git` directory, and visits siblings in name order. Hidden files are included.
pub(crate) fn walker(root: &Path) -> ignore::Walk {
    ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .git_global(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git")
        .build()
}

/// True when a walked entry is a file, or a symbolic link to one.
pub(crate) fn is_file(entry: &ignore::DirEntry) -> bool {
    match entry.file_type() {
        Some(kind) if kind.is_file() => true,
        Some(kind) if kind.is_symlink() => entry.path().is_file(),
        _ => false,
    }
}

/// Distinguishes the temporary files of concurrent writes within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: into a new temporary file in the same directory, flushed
/// to disk, then renamed over `path`. Readers see the old content or the new, never a mix, and
/// a failed write leaves no temporary file behind. An existing file keeps its permissions; a
/// symbolic link is followed, so the link stays and its target changes.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => fs::canonicalize(path)?,
        _ => path.to_path_buf(),
    };
    let file_name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let permissions = fs::metadata(&target).ok().map(|meta| meta.permissions());

    let (temp_path, file) = create_temp(&dir, &file_name.to_string_lossy())?;
    let written = fill_and_rename(file, bytes, permissions, &temp_path, &target);
    if written.is_err() {
        let _ = fs::remove_file(&temp_path);
    }
    written
}

/// Writes `bytes` into the temporary `file`, flushes it to disk and renames it to `target`.
fn fill_and_rename(
    mut file: File,
    bytes: &[u8],
    permissions: Option<fs::Permissions>,
    temp_path: &Path,
    target: &Path,
) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)?;
    }
    file.sync_all()?;
    drop(file);
    fs::rename(temp_path, target)
}

/// Creates a fresh temporary file beside `name` in `dir`, never reusing an existing path.
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".{name}.{pid}.{n}.mew-tmp"));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

/// The names of the entries of `dir`, sorted (for tests that check no temporary file is left).
#[cfg(test)]
pub(crate) fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::context;

    #[test]
    fn relative_paths_join_the_cwd_and_absolute_paths_stay() {
        let ctx = context(Path::new("/srv/here"));
        assert_eq!(
            resolve(&ctx, "file_path", "a/b.txt").unwrap(),
            Path::new("/srv/here/a/b.txt")
        );
        assert_eq!(
            resolve(&ctx, "file_path", "/etc/hosts").unwrap(),
            Path::new("/etc/hosts")
        );
        let err = resolve(&ctx, "file_path", "").unwrap_err();
        assert_eq!(err, ToolOutput::error("file_path is empty"));
    }

    #[test]
    fn nul_bytes_mean_binary() {
        assert!(looks_binary(b"abc\0def"));
        assert!(!looks_binary("plain text, ünïcode\n".as_bytes()));
        let mut late = vec![b'a'; SNIFF_LEN];
        late.push(0);
        assert!(!looks_binary(&late));
    }

    #[test]
    fn long_lines_are_cut_at_a_char_boundary() {
        assert_eq!(cut_line("short"), "short");
        let long = "é".repeat(MAX_LINE_CHARS + 5);
        let cut = cut_line(&long);
        assert_eq!(
            cut,
            format!(
                "{}… [line cut at 2000 characters]",
                "é".repeat(MAX_LINE_CHARS)
            )
        );
    }

    #[test]
    fn atomic_write_replaces_content_keeps_mode_and_leaves_no_temp_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.sh");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o751)).unwrap();
        write_atomic(&path, b"new content").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new content");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o751
        );
        assert_eq!(dir_names(dir.path()), ["script.sh"]);
    }

    #[test]
    fn atomic_write_through_a_symlink_changes_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        let link = dir.path().join("link.txt");
        fs::write(&target, "old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(dir_names(dir.path()), ["link.txt", "target.txt"]);
    }

    #[test]
    fn failed_atomic_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a non-empty directory: the rename fails after the temp file was written.
        let target = dir.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), "x").unwrap();
        assert!(write_atomic(&target, b"data").is_err());
        assert_eq!(dir_names(dir.path()), ["taken"]);
    }
}
