//! The `grep` tool: a regex search over file contents, `.gitignore` respected, binary files skipped.

use std::fs;
use std::path::Path;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// The most characters one answer holds; the search stops there and says so.
const MAX_OUTPUT_CHARS: usize = 30_000;

/// Files larger than this are not searched (they are logs or data, and would fill memory).
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// The most context lines before and after a match.
const MAX_CONTEXT: u64 = 100;

/// Searches file contents.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Grep;

/// What `grep` answers with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    /// Matching lines, with context.
    Content,
    /// The paths of files that match.
    #[default]
    FilesWithMatches,
    /// How many lines match, per file.
    Count,
}

/// The input of `grep`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    output_mode: OutputMode,
    #[serde(rename = "-i", default)]
    case_insensitive: bool,
    #[serde(rename = "-n", default)]
    line_numbers: Option<bool>,
    #[serde(default)]
    context: Option<u64>,
    #[serde(default)]
    head_limit: Option<u64>,
}

/// A compiled search.
struct Search {
    regex: Regex,
    /// Only files whose name (or, for a pattern with `/`, relative path) matches.
    glob: Option<(GlobMatcher, bool)>,
    mode: OutputMode,
    line_numbers: bool,
    context: usize,
}

#[async_trait]
impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> String {
        format!(
            "Searches file contents with a regular expression (Rust regex syntax, like \
             ripgrep: \"fn\\s+\\w+\", \"log.*Error\"; escape literal braces and dots).\n\
             - Searches the files under path (default: the working directory), or path itself \
             if it is a file. Files that .gitignore or .ignore exclude, the .git directory, \
             binary files and files over 20 MiB are skipped.\n\
             - glob keeps only files whose name matches, e.g. \"*.rs\" or \"*.{{ts,tsx}}\"; a \
             glob with a slash matches the path relative to path, e.g. \"src/**/*.rs\".\n\
             - output_mode: \"files_with_matches\" (default) lists matching files; \"content\" \
             shows matching lines as path:line:text (context lines as path-line-text, groups \
             separated by --); \"count\" shows path:count of matching lines.\n\
             - Matching is per line and case-sensitive; set -i to ignore case.\n\
             - head_limit keeps the first N lines or entries. Output stops at \
             {MAX_OUTPUT_CHARS} characters and says so; narrow the search then."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "The file or directory to search: absolute, or relative to the working directory. Default: the working directory."
                },
                "glob": {
                    "type": "string",
                    "description": "Only search files matching this glob, e.g. \"*.rs\" or \"src/**/*.{ts,tsx}\"."
                },
                "output_mode": {
                    "type": "string",
                    "enum": ["content", "files_with_matches", "count"],
                    "default": "files_with_matches",
                    "description": "content: matching lines; files_with_matches: file paths; count: matches per file."
                },
                "-i": {
                    "type": "boolean",
                    "default": false,
                    "description": "Ignore case."
                },
                "-n": {
                    "type": "boolean",
                    "default": true,
                    "description": "Show line numbers (content mode only)."
                },
                "context": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_CONTEXT,
                    "description": "Lines to show before and after each match (content mode only)."
                },
                "head_limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Keep only the first N output lines or entries."
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
        let regex = match RegexBuilder::new(&input.pattern)
            .case_insensitive(input.case_insensitive)
            .build()
        {
            Ok(regex) => regex,
            Err(err) => return ToolOutput::error(format!("invalid regex: {err}")),
        };
        let glob = match input.glob.as_deref() {
            None => None,
            Some(pattern) => match GlobBuilder::new(pattern).literal_separator(true).build() {
                Ok(glob) => Some((glob.compile_matcher(), pattern.contains('/'))),
                Err(err) => {
                    return ToolOutput::error(format!("invalid glob {pattern:?}: {err}"));
                }
            },
        };
        let head_limit = match input.head_limit {
            Some(0) => return ToolOutput::error("head_limit must be at least 1"),
            Some(limit) => Some(usize::try_from(limit).unwrap_or(usize::MAX)),
            None => None,
        };
        let context = input.context.unwrap_or(0).min(MAX_CONTEXT);
        let search = Search {
            regex,
            glob,
            mode: input.output_mode,
            line_numbers: input.line_numbers.unwrap_or(true),
            context: usize::try_from(context).unwrap_or(0),
        };
        let cancel = ctx.cancel.clone();
        let pattern = input.pattern;
        run_blocking(move || search.run(&base, &pattern, head_limit, &cancel)).await
    }
}

/// Collects output lines up to the head limit and the character cap.
struct Listing {
    text: String,
    /// Characters in `text`.
    chars: usize,
    entries: usize,
    head_limit: Option<usize>,
    /// Why the listing stopped early, once it did.
    stopped: Option<String>,
}

impl Listing {
    /// Adds a line; false once the listing is full.
    fn push(&mut self, line: &str) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        if let Some(limit) = self.head_limit
            && self.entries >= limit
        {
            self.stopped = Some(format!("[stopped at head_limit {limit}]"));
            return false;
        }
        let chars = line.chars().count() + 1;
        if self.chars + chars > MAX_OUTPUT_CHARS {
            self.stopped = Some(format!(
                "[output stopped at {MAX_OUTPUT_CHARS} characters; narrow the pattern, path or \
                 glob, or use head_limit]"
            ));
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.chars += chars;
        self.entries += 1;
        true
    }
}

impl Search {
    /// Searches `base` and renders the answer.
    fn run(
        &self,
        base: &Path,
        pattern: &str,
        head_limit: Option<usize>,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        if !base.exists() {
            return ToolOutput::error(format!("path not found: {}", base.display()));
        }
        let single_file = base.is_file();
        let mut listing = Listing {
            text: String::new(),
            chars: 0,
            entries: 0,
            head_limit,
            stopped: None,
        };
        let mut any_match = false;
        let mut skipped_large = 0usize;
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
            if !single_file && !self.glob_matches(base, path) {
                continue;
            }
            if path
                .metadata()
                .is_ok_and(|meta| meta.len() > MAX_FILE_BYTES)
            {
                skipped_large += 1;
                continue;
            }
            let Ok(bytes) = fs::read(path) else { continue };
            if bytes.contains(&0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            if self.search_file(path, &text, &mut listing, any_match) {
                any_match = true;
            }
            if listing.stopped.is_some() {
                break;
            }
        }
        if !any_match {
            let mut out = format!("No matches for {pattern:?} under {}", base.display());
            if skipped_large > 0 {
                out.push_str(&format!(
                    " ({skipped_large} files over 20 MiB were not searched)"
                ));
            }
            return ToolOutput::text(out);
        }
        let mut out = listing.text;
        if let Some(stopped) = listing.stopped {
            out.push_str(&stopped);
            out.push('\n');
        }
        if skipped_large > 0 {
            out.push_str(&format!(
                "[{skipped_large} files over 20 MiB were not searched]\n"
            ));
        }
        ToolOutput::text(out)
    }

    /// True when the file passes the `glob` filter.
    fn glob_matches(&self, base: &Path, path: &Path) -> bool {
        match &self.glob {
            None => true,
            Some((glob, true)) => glob.is_match(path.strip_prefix(base).unwrap_or(path)),
            Some((glob, false)) => path.file_name().is_some_and(|name| glob.is_match(name)),
        }
    }

    /// Searches one file's text and adds what it found to `listing`; true when it matched.
    /// `after_match` says an earlier file matched (for the `--` between context groups).
    fn search_file(
        &self,
        path: &Path,
        text: &str,
        listing: &mut Listing,
        after_match: bool,
    ) -> bool {
        let lines: Vec<&str> = text.lines().collect();
        let matched: Vec<usize> = (0..lines.len())
            .filter(|&i| self.regex.is_match(lines[i]))
            .collect();
        if matched.is_empty() {
            return false;
        }
        let shown = path.display();
        match self.mode {
            OutputMode::FilesWithMatches => {
                listing.push(&shown.to_string());
            }
            OutputMode::Count => {
                listing.push(&format!("{shown}:{}", matched.len()));
            }
            OutputMode::Content => {
                let mut previous_end: Option<usize> = None;
                for group in groups(&matched, self.context, lines.len()) {
                    let separate = match previous_end {
                        Some(end) => group.0 > end + 1,
                        None => after_match,
                    };
                    if self.context > 0 && separate && !listing.push("--") {
                        return true;
                    }
                    for (i, line) in lines.iter().enumerate().take(group.1 + 1).skip(group.0) {
                        let is_match = matched.binary_search(&i).is_ok();
                        let mark = if is_match { ':' } else { '-' };
                        let line = files::cut_line(line);
                        let rendered = if self.line_numbers {
                            format!("{shown}{mark}{}{mark}{line}", i + 1)
                        } else {
                            format!("{shown}{mark}{line}")
                        };
                        if !listing.push(&rendered) {
                            return true;
                        }
                    }
                    previous_end = Some(group.1);
                }
            }
        }
        true
    }
}

/// The ranges of line indices to show, inclusive: each match widened by `context` lines on
/// both sides, overlapping or touching ranges merged.
fn groups(matched: &[usize], context: usize, len: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &i in matched {
        let start = i.saturating_sub(context);
        let end = i.saturating_add(context).min(len.saturating_sub(1));
        match out.last_mut() {
            Some(last) if start <= last.1 + 1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        Grep.call(input, &context(dir)).await
    }

    /// A tree with matches in two source files, one ignored file, one binary file.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("src")).unwrap();
        fs::create_dir_all(root.join("target")).unwrap();
        fs::write(root.join(".gitignore"), "target/\n").unwrap();
        fs::write(
            root.join("src/a.rs"),
            "fn alpha() {}\nlet x = 1;\nfn beta() {}\n",
        )
        .unwrap();
        fs::write(root.join("src/b.txt"), "nothing here\nFN upper\n").unwrap();
        fs::write(
            root.join("main.rs"),
            "one\ntwo\nfn main() {}\nthree\nfour\nfive\nfn end() {}\n",
        )
        .unwrap();
        fs::write(root.join("target/gen.rs"), "fn generated() {}\n").unwrap();
        fs::write(root.join("blob.bin"), b"fn binary\0data").unwrap();
        dir
    }

    fn p(dir: &Path, name: &str) -> String {
        dir.join(name).display().to_string()
    }

    #[tokio::test]
    async fn lists_matching_files_by_default() {
        let dir = tree();
        let root = dir.path();
        let out = call(root, json!({"pattern": "fn \\w+"})).await;
        let expected = format!("{}\n{}\n", p(root, "main.rs"), p(root, "src/a.rs"));
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn ignore_case() {
        let dir = tree();
        let root = dir.path();
        let out = call(root, json!({"pattern": "^fn", "-i": true, "path": "src"})).await;
        let expected = format!("{}\n{}\n", p(root, "src/a.rs"), p(root, "src/b.txt"));
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn content_mode_shows_numbered_lines() {
        let dir = tree();
        let root = dir.path();
        let out = call(
            root,
            json!({"pattern": "fn", "output_mode": "content", "glob": "*.rs"}),
        )
        .await;
        let (m, a) = (p(root, "main.rs"), p(root, "src/a.rs"));
        let expected = format!(
            "{m}:3:fn main() {{}}\n{m}:7:fn end() {{}}\n{a}:1:fn alpha() {{}}\n{a}:3:fn beta() {{}}\n"
        );
        assert_eq!(out, ToolOutput::text(expected));
        let input = json!({"pattern": "beta", "output_mode": "content", "-n": false});
        let out = call(root, input).await;
        assert_eq!(out, ToolOutput::text(format!("{a}:fn beta() {{}}\n")));
    }

    #[tokio::test]
    async fn context_lines_merge_and_groups_are_separated() {
        let dir = tree();
        let root = dir.path();
        let input =
            json!({"pattern": "fn", "output_mode": "content", "context": 1, "glob": "*.rs"});
        let out = call(root, input).await;
        let (m, a) = (p(root, "main.rs"), p(root, "src/a.rs"));
        let expected = format!(
            "{m}-2-two\n{m}:3:fn main() {{}}\n{m}-4-three\n--\n{m}-6-five\n{m}:7:fn end() {{}}\n\
             --\n{a}:1:fn alpha() {{}}\n{a}-2-let x = 1;\n{a}:3:fn beta() {{}}\n"
        );
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn count_mode() {
        let dir = tree();
        let root = dir.path();
        let out = call(root, json!({"pattern": "fn", "output_mode": "count"})).await;
        let expected = format!("{}:2\n{}:2\n", p(root, "main.rs"), p(root, "src/a.rs"));
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn glob_with_a_slash_matches_the_relative_path() {
        let dir = tree();
        let root = dir.path();
        let out = call(root, json!({"pattern": "fn", "glob": "src/*.rs"})).await;
        assert_eq!(out, ToolOutput::text(format!("{}\n", p(root, "src/a.rs"))));
    }

    #[tokio::test]
    async fn a_file_path_searches_that_file() {
        let dir = tree();
        let root = dir.path();
        let input = json!({"pattern": "x =", "path": "src/a.rs", "output_mode": "content"});
        let out = call(root, input).await;
        assert_eq!(
            out,
            ToolOutput::text(format!("{}:2:let x = 1;\n", p(root, "src/a.rs")))
        );
    }

    #[tokio::test]
    async fn head_limit_keeps_the_first_entries() {
        let dir = tree();
        let root = dir.path();
        let input = json!({"pattern": "fn", "output_mode": "content", "head_limit": 3});
        let out = call(root, input).await;
        let (m, a) = (p(root, "main.rs"), p(root, "src/a.rs"));
        let expected = format!(
            "{m}:3:fn main() {{}}\n{m}:7:fn end() {{}}\n{a}:1:fn alpha() {{}}\n[stopped at head_limit 3]\n"
        );
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn output_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (0..5000)
            .map(|n| format!("match line number {n:05}\n"))
            .collect();
        fs::write(dir.path().join("big.txt"), body).unwrap();
        let out = call(
            dir.path(),
            json!({"pattern": "match", "output_mode": "content"}),
        )
        .await;
        let text = out.text_content();
        assert!(text.len() < MAX_OUTPUT_CHARS + 200, "{}", text.len());
        assert!(text.starts_with(&format!(
            "{}:1:match line number 00000\n",
            p(dir.path(), "big.txt")
        )));
        assert!(text.ends_with(
            "[output stopped at 30000 characters; narrow the pattern, path or glob, or use head_limit]\n"
        ));
    }

    #[tokio::test]
    async fn no_match_is_not_an_error() {
        let dir = tree();
        let out = call(dir.path(), json!({"pattern": "generated"})).await;
        let expected = format!(
            "No matches for \"generated\" under {}",
            dir.path().display()
        );
        assert_eq!(out, ToolOutput::text(expected));
    }

    #[tokio::test]
    async fn bad_input_is_an_error() {
        let dir = tree();
        let out = call(dir.path(), json!({"pattern": "(unclosed"})).await;
        assert!(out.is_error);
        assert!(out.text_content().starts_with("invalid regex: "));
        let out = call(dir.path(), json!({"pattern": "x", "path": "nowhere"})).await;
        let expected = format!("path not found: {}", dir.path().join("nowhere").display());
        assert_eq!(out, ToolOutput::error(expected));
        let out = call(dir.path(), json!({"pattern": "x", "output_mode": "lines"})).await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with("invalid input for grep: unknown variant `lines`")
        );
        let out = call(dir.path(), json!({"pattern": "x", "head_limit": 0})).await;
        assert_eq!(out, ToolOutput::error("head_limit must be at least 1"));
    }

    #[test]
    fn groups_merge_touching_ranges() {
        assert_eq!(groups(&[0, 5], 0, 10), [(0, 0), (5, 5)]);
        assert_eq!(groups(&[2, 5], 1, 10), [(1, 6)]);
        assert_eq!(groups(&[2, 6], 1, 10), [(1, 3), (5, 7)]);
        assert_eq!(groups(&[9], 3, 10), [(6, 9)]);
    }
}
