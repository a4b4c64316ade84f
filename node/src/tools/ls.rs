//! The `ls` tool: the entries of one directory, by name, with glob patterns to leave some out.

use std::collections::BinaryHeap;
use std::fs;
use std::io;
use std::path::Path;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// The most entries one answer lists.
const MAX_ENTRIES: usize = 1000;

/// Lists a directory.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ls;

/// The input of `ls`: Claude Code's `LS` input, with `path` optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    ignore: Vec<String>,
}

#[async_trait]
impl Tool for Ls {
    fn name(&self) -> &str {
        "ls"
    }

    fn description(&self) -> String {
        format!(
            "Lists the entries of one directory (not its subdirectories' contents), by name; \
             directories end with `/`.\n\
             - path is absolute, or relative to the working directory (default: the working \
             directory).\n\
             - ignore takes glob patterns matched against each entry's name, such as \
             \"*.log\" or \"node_modules\": matching entries are left out.\n\
             - Hidden entries are listed; .gitignore is not applied.\n\
             - At most {MAX_ENTRIES} entries, the first by name. To find files at any depth \
             by pattern, use glob; to search contents, grep."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to list: absolute, or relative to the working directory. Default: the working directory."
                },
                "ignore": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Glob patterns of entry names to leave out."
                }
            },
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Read
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: Input = match parse_input(self.name(), input) {
            Ok(input) => input,
            Err(err) => return err,
        };
        let dir = match files::resolve_or_cwd(ctx, input.path.as_deref()) {
            Ok(path) => path,
            Err(err) => return err,
        };
        let ignore = match ignore_set(&input.ignore) {
            Ok(ignore) => ignore,
            Err(err) => return err,
        };
        let cancel = ctx.cancel.clone();
        run_blocking(move || list(&dir, &ignore, &cancel)).await
    }
}

/// The patterns of `ignore`, compiled; a bad one is an error answer naming it.
fn ignore_set(patterns: &[String]) -> Result<GlobSet, ToolOutput> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let trimmed = pattern.trim().trim_end_matches('/');
        let glob = GlobBuilder::new(trimmed)
            .literal_separator(true)
            .build()
            .map_err(|err| {
                ToolOutput::error(format!("invalid ignore pattern {pattern:?}: {err}"))
            })?;
        set.add(glob);
    }
    set.build()
        .map_err(|err| ToolOutput::error(format!("invalid ignore patterns: {err}")))
}

/// Lists `dir`, leaving out the entries `ignore` matches.
fn list(dir: &Path, ignore: &GlobSet, cancel: &CancellationToken) -> ToolOutput {
    let shown = dir.display();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("directory not found: {shown}"));
        }
        Err(_) if dir.exists() && !dir.is_dir() => {
            return ToolOutput::error(format!("{shown} is not a directory"));
        }
        Err(err) => return ToolOutput::error(format!("cannot list {shown}: {err}")),
    };
    // The first names in order, kept in a heap of at most MAX_ENTRIES, so that a huge
    // directory costs no more memory than a full answer.
    let mut first: BinaryHeap<String> = BinaryHeap::new();
    let mut total = 0usize;
    for entry in entries {
        if cancel.is_cancelled() {
            return ToolOutput::error("canceled");
        }
        // Entries that vanish or cannot be read while listing are skipped.
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignore.is_match(&name) {
            continue;
        }
        let is_dir = match entry.file_type() {
            Ok(kind) if kind.is_symlink() => entry.path().is_dir(),
            Ok(kind) => kind.is_dir(),
            Err(_) => false,
        };
        total += 1;
        first.push(if is_dir { format!("{name}/") } else { name });
        if first.len() > MAX_ENTRIES {
            first.pop();
        }
    }
    let mut out = format!("- {}/\n", shown.to_string().trim_end_matches('/'));
    if total == 0 {
        out.push_str("  (empty)\n");
    }
    for name in first.into_sorted_vec() {
        out.push_str("  - ");
        out.push_str(&name);
        out.push('\n');
    }
    if total > MAX_ENTRIES {
        out.push_str(&format!(
            "[showing the first {MAX_ENTRIES} of {total} entries by name; list a \
             subdirectory, add ignore patterns or use glob]\n"
        ));
    }
    ToolOutput::text(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        Ls.call(input, &context(dir)).await
    }

    fn tree(root: &Path) {
        fs::create_dir_all(root.join("src/inner")).unwrap();
        fs::create_dir_all(root.join(".github")).unwrap();
        fs::create_dir_all(root.join("node_modules/x")).unwrap();
        fs::write(root.join("Cargo.toml"), "").unwrap();
        fs::write(root.join("build.log"), "").unwrap();
        fs::write(root.join("src/main.rs"), "").unwrap();
        std::os::unix::fs::symlink(root.join("src"), root.join("link")).unwrap();
    }

    #[tokio::test]
    async fn lists_one_level_by_name_with_directories_marked() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let out = call(dir.path(), json!({})).await;
        let expected = format!(
            "- {}/\n  - .github/\n  - Cargo.toml\n  - build.log\n  - link/\n  - \
             node_modules/\n  - src/\n",
            dir.path().display()
        );
        assert_eq!(out, ToolOutput::text(expected));
        let out = call(dir.path(), json!({"path": "src"})).await;
        let expected = format!(
            "- {}/\n  - inner/\n  - main.rs\n",
            dir.path().join("src").display()
        );
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn ignore_patterns_leave_entries_out() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let path = dir.path().display().to_string();
        let out = call(
            dir.path(),
            json!({"path": path, "ignore": ["*.log", "node_modules/", ".*"]}),
        )
        .await;
        let expected = format!("- {path}/\n  - Cargo.toml\n  - link/\n  - src/\n");
        assert_eq!(out, ToolOutput::text(expected));
        let out = call(dir.path(), json!({"ignore": ["a[b"]})).await;
        assert!(
            out.is_error
                && out
                    .text_content()
                    .starts_with("invalid ignore pattern \"a[b\": "),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn a_large_directory_shows_its_first_entries_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        for n in (0..MAX_ENTRIES + 5).rev() {
            fs::write(dir.path().join(format!("f{n:04}")), "").unwrap();
        }
        let text = call(dir.path(), json!({})).await.text_content();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_ENTRIES + 2);
        assert_eq!(lines[1], "  - f0000");
        assert_eq!(lines[MAX_ENTRIES], "  - f0999");
        assert_eq!(
            lines[MAX_ENTRIES + 1],
            "[showing the first 1000 of 1005 entries by name; list a subdirectory, add \
             ignore patterns or use glob]"
        );
    }

    #[tokio::test]
    async fn missing_paths_files_and_empty_directories() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"path": "gone"})).await;
        let expected = format!("directory not found: {}", dir.path().join("gone").display());
        assert_eq!(out, ToolOutput::error(expected));
        fs::write(dir.path().join("file"), "").unwrap();
        let out = call(dir.path(), json!({"path": "file"})).await;
        let expected = format!("{} is not a directory", dir.path().join("file").display());
        assert_eq!(out, ToolOutput::error(expected));
        fs::create_dir(dir.path().join("empty")).unwrap();
        let out = call(dir.path(), json!({"path": "empty"})).await;
        let expected = format!("- {}/\n  (empty)\n", dir.path().join("empty").display());
        assert_eq!(out, ToolOutput::text(expected));
        let out = call(dir.path(), json!({"path": ""})).await;
        assert_eq!(out, ToolOutput::error("path is empty"));
    }
}
