//! Reading the files a user gives the node (roles, skills, configuration, hooks, `.mcp.json`,
//! settings): regular files only, of bounded size, UTF-8, with errors that say what is wrong.

use std::fs;
use std::io::{self, Read as _};
use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;

/// The largest user file read: configuration, role, skill and hook files are small.
pub(crate) const MAX_USER_FILE_BYTES: u64 = 1024 * 1024;

/// Why a user file could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// There is no such file (or a symlink points nowhere).
    #[error("the file does not exist")]
    NotFound,
    /// The path is something other than a regular file: reading a FIFO would block, reading a
    /// device could never end.
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    /// The file is larger than the limit.
    #[error("the file is larger than {0} bytes")]
    TooLarge(u64),
    /// The file holds bytes that are not UTF-8.
    #[error("the file is not UTF-8 text: {0}")]
    NotUtf8(std::str::Utf8Error),
    /// Reading failed.
    #[error("cannot read the file: {0}")]
    Io(io::Error),
}

impl From<ReadError> for io::Error {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Io(error) => error,
            ReadError::NotFound => io::ErrorKind::NotFound.into(),
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// The most entries of one directory a [`Stamp`] looks at; a directory with more is stamped by
/// its first ones only (role and skill directories hold a few dozen).
const MAX_STAMPED_ENTRIES: usize = 4096;

/// What the files under some directories look like now: every entry's path, and the size,
/// modification time and inode of what it points to. Two stamps differ when a file was
/// added, removed, renamed, rewritten or replaced through a symlink (as mounted config volumes
/// do), so a running node polls this instead of reading the files again.
///
/// Polling, rather than the kernel's file events (the `notify` crate): the directories may
/// not exist yet when the node starts, a symlink swapped above them is not an event on them,
/// and a few `stat` calls a second over a few small directories cost nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Stamp(Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>, u64)>);

impl Stamp {
    /// Adds the entries of `dir` (none if it does not exist) and, `depth` levels down, the
    /// entries of its subdirectories.
    pub(crate) fn add_dir(&mut self, dir: &Path, depth: u32) {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<_> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .take(MAX_STAMPED_ENTRIES)
            .collect();
        paths.sort();
        for path in paths {
            // Following symlinks: what a link points to is what is read.
            let metadata = fs::metadata(&path).ok();
            let is_dir = metadata.as_ref().is_some_and(fs::Metadata::is_dir);
            self.0.push((
                path.clone(),
                metadata.as_ref().map_or(0, fs::Metadata::len),
                metadata.as_ref().and_then(|m| m.modified().ok()),
                metadata.as_ref().map_or(0, |m| m.ino()),
            ));
            if is_dir && depth > 0 {
                self.add_dir(&path, depth - 1);
            }
        }
    }
}

/// Reads `path` (following symlinks) as UTF-8 text of at most `max_bytes`.
pub(crate) fn read_text(path: &Path, max_bytes: u64) -> Result<String, ReadError> {
    // Checked before opening: opening a FIFO would block.
    let metadata = fs::metadata(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound,
        _ => ReadError::Io(err),
    })?;
    if let Some(kind) = special_kind(&metadata.file_type()) {
        return Err(ReadError::NotRegular(kind));
    }
    if metadata.len() > max_bytes {
        return Err(ReadError::TooLarge(max_bytes));
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|file| file.take(max_bytes + 1).read_to_end(&mut bytes))
        .map_err(ReadError::Io)?;
    // The file may have grown since it was measured.
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge(max_bytes));
    }
    String::from_utf8(bytes).map_err(|err| ReadError::NotUtf8(err.utf8_error()))
}

/// What a file that is not a regular file is, for messages; `None` for a regular file.
pub(crate) fn special_kind(file_type: &fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_and_others_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        fs::write(&file, "a: 1\n").unwrap();
        assert_eq!(read_text(&file, 100).unwrap(), "a: 1\n");
        assert!(matches!(
            read_text(&dir.path().join("gone"), 100),
            Err(ReadError::NotFound)
        ));
        assert!(matches!(read_text(&file, 3), Err(ReadError::TooLarge(3))));
        assert_eq!(
            read_text(dir.path(), 100).unwrap_err().to_string(),
            "it is a directory, not a regular file"
        );
        let fifo = dir.path().join("fifo.md");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        // Never opened: this returns at once instead of blocking.
        assert_eq!(
            read_text(&fifo, 100).unwrap_err().to_string(),
            "it is a FIFO, not a regular file"
        );
        assert_eq!(
            read_text(Path::new("/dev/zero"), 100)
                .unwrap_err()
                .to_string(),
            "it is a character device, not a regular file"
        );
        fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text(&file, 100), Err(ReadError::NotUtf8(_))));
    }
}
