//! The `glob` tool: files whose path matches a glob pattern, newest first, `.gitignore` respected.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use globset::GlobBuilder;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// The most paths one answer lists.
const MAX_RESULTS: usize = 1000;

/// Finds files by glob pattern.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Glob;

/// The input of `glob`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl Tool for Glob {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> String {
        format!(
            "Finds files by name with a glob pattern, such as \"**/*.rs\" or \
             \"src/**/*.{{ts,tsx}}\".\n\
             - The pattern matches paths relative to path (default: the working directory). \
             `*` and `?` stay within one directory, `**` crosses directories, `{{a,b}}` is \
             either. So \"*.rs\" finds only the top level; use \"**/*.rs\" for every depth.\n\
             - Files that .gitignore or .ignore exclude, and the .git directory, are skipped; \
             hidden files are included.\n\
             - Returns absolute paths, the most recently modified first, at most {MAX_RESULTS}.\n\
             - To search file contents, use grep."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The glob pattern, relative to path, e.g. \"**/*.rs\"."
                },
                "path": {
                    "type": "string",
                    "description": "The directory to search: absolute, or relative to the working directory. Default: the working directory."
                }
            },
            "required": ["pattern"],
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
        let base = match files::resolve_or_cwd(ctx, input.path.as_deref()) {
            Ok(path) => path,
            Err(err) => return err,
        };
        let cancel = ctx.cancel.clone();
        run_blocking(move || find(&base, &input.pattern, &cancel)).await
    }
}

/// Lists the files under `base` that match `pattern`.
fn find(base: &Path, pattern: &str, cancel: &CancellationToken) -> ToolOutput {
    if !base.is_dir() {
        return ToolOutput::error(if base.exists() {
            format!("{} is not a directory", base.display())
        } else {
            format!("directory not found: {}", base.display())
        });
    }
    let relative = pattern.strip_prefix("./").unwrap_or(pattern);
    let matcher = match GlobBuilder::new(relative).literal_separator(true).build() {
        Ok(glob) => glob.compile_matcher(),
        Err(err) => return ToolOutput::error(format!("invalid glob pattern {pattern:?}: {err}")),
    };
    let absolute = Path::new(relative).is_absolute();
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in files::walker(base) {
        if cancel.is_cancelled() {
            return ToolOutput::error("canceled");
        }
        // Entries the walker cannot read (permissions, races) are skipped.
        let Ok(entry) = entry else { continue };
        if !files::is_file(&entry) {
            continue;
        }
        let path = entry.path();
        let candidate = if absolute {
            path
        } else {
            path.strip_prefix(base).unwrap_or(path)
        };
        if matcher.is_match(candidate) {
            let modified = path
                .metadata()
                .and_then(|meta| meta.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, path.to_path_buf()));
        }
    }
    if found.is_empty() {
        return ToolOutput::text(format!(
            "No files match {pattern:?} under {}",
            base.display()
        ));
    }
    // Newest first; equal times by path, so the answer is deterministic.
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(MAX_RESULTS)
        .map(|(_, path)| format!("{}\n", path.display()))
        .collect();
    if total > MAX_RESULTS {
        out.push_str(&format!(
            "[showing the {MAX_RESULTS} most recently modified of {total} matching files; \
             narrow the pattern or path]\n"
        ));
    }
    ToolOutput::text(out)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use super::*;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        Glob.call(input, &context(dir)).await
    }

    /// Writes `name` under `dir` with a modification time `age` seconds in the past.
    fn touch(dir: &Path, name: &str, age: u64) {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, name).unwrap();
        let time = SystemTime::now() - Duration::from_secs(age);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }

    fn lines(dir: &Path, names: &[&str]) -> String {
        names
            .iter()
            .map(|name| format!("{}\n", dir.join(name).display()))
            .collect()
    }

    #[tokio::test]
    async fn finds_files_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "old.rs", 300);
        touch(root, "src/new.rs", 10);
        touch(root, "src/deep/mid.rs", 100);
        touch(root, "src/notes.md", 1);
        let out = call(root, json!({"pattern": "**/*.rs"})).await;
        assert_eq!(
            out,
            ToolOutput::text(lines(root, &["src/new.rs", "src/deep/mid.rs", "old.rs"]))
        );
    }

    #[tokio::test]
    async fn star_stays_in_one_directory_and_path_narrows() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "top.rs", 2);
        touch(root, "src/inner.rs", 1);
        let out = call(root, json!({"pattern": "*.rs"})).await;
        assert_eq!(out, ToolOutput::text(lines(root, &["top.rs"])));
        let out = call(root, json!({"pattern": "*.rs", "path": "src"})).await;
        assert_eq!(out, ToolOutput::text(lines(root, &["src/inner.rs"])));
        let out = call(root, json!({"pattern": "./src/*.{rs,md}"})).await;
        assert_eq!(out, ToolOutput::text(lines(root, &["src/inner.rs"])));
    }

    #[tokio::test]
    async fn gitignored_files_and_the_git_directory_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        touch(root, "target/debug/out.txt", 1);
        touch(root, "app.log", 1);
        touch(root, ".git/config.txt", 1);
        touch(root, ".github/ci.txt", 2);
        touch(root, "keep.txt", 3);
        let out = call(root, json!({"pattern": "**/*.{txt,log}"})).await;
        assert_eq!(
            out,
            ToolOutput::text(lines(root, &[".github/ci.txt", "keep.txt"]))
        );
    }

    #[tokio::test]
    async fn many_matches_are_capped_and_say_so() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..1005 {
            fs::write(dir.path().join(format!("f{n:04}.txt")), "").unwrap();
        }
        let out = call(dir.path(), json!({"pattern": "*.txt"})).await;
        let text = out.text_content();
        assert_eq!(text.lines().count(), 1001);
        assert!(text.ends_with(
            "[showing the 1000 most recently modified of 1005 matching files; narrow the pattern or path]\n"
        ));
    }

    #[tokio::test]
    async fn no_match_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"pattern": "**/*.zig"})).await;
        let expected = format!("No files match \"**/*.zig\" under {}", dir.path().display());
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn bad_patterns_and_paths_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"pattern": "a[b"})).await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with("invalid glob pattern \"a[b\": ")
        );
        let out = call(dir.path(), json!({"pattern": "*", "path": "missing"})).await;
        let expected = format!(
            "directory not found: {}",
            dir.path().join("missing").display()
        );
        assert_eq!(out, ToolOutput::error(expected));
        fs::write(dir.path().join("file"), "").unwrap();
        let out = call(dir.path(), json!({"pattern": "*", "path": "file"})).await;
        let expected = format!("{} is not a directory", dir.path().join("file").display());
        assert_eq!(out, ToolOutput::error(expected));
    }

    #[tokio::test]
    async fn a_canceled_call_stops() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "a.txt", 1);
        let ctx = context(dir.path());
        ctx.cancel.cancel();
        let out = Glob.call(json!({"pattern": "*"}), &ctx).await;
        assert_eq!(out, ToolOutput::error("canceled"));
    }
}
