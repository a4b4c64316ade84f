//! The `edit_file` tool: replaces an exact string in a file, atomically.

use std::fs;
use std::io;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// Replaces exact text in a file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EditFile;

/// The input of `edit_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> String {
        "Replaces exact text in an existing file.\n\
         - old_string must match the file exactly, whitespace and indentation included. When \
         copying from read_file output, leave out the line-number prefix (the number and tab).\n\
         - old_string must occur exactly once, or the edit fails and says how often it occurs: \
         add surrounding lines to make it unique, or set replace_all to replace every \
         occurrence (for example to rename a variable).\n\
         - new_string must differ from old_string.\n\
         - The write is atomic. To create a file, use write_file."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The file to change: absolute, or relative to the working directory."
                },
                "old_string": {
                    "type": "string",
                    "description": "The exact text to replace."
                },
                "new_string": {
                    "type": "string",
                    "description": "The text to put in its place (must differ from old_string)."
                },
                "replace_all": {
                    "type": "boolean",
                    "default": false,
                    "description": "Replace every occurrence of old_string instead of requiring exactly one."
                }
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Edit
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: Input = match parse_input(self.name(), input) {
            Ok(input) => input,
            Err(err) => return err,
        };
        let path = match files::resolve(ctx, "file_path", &input.file_path) {
            Ok(path) => path,
            Err(err) => return err,
        };
        let replacement = Replacement {
            old_string: input.old_string,
            new_string: input.new_string,
            replace_all: input.replace_all,
        };
        if let Err(err) = replacement.check() {
            return ToolOutput::error(err);
        }
        run_blocking(move || edit(&path, &replacement)).await
    }
}

/// One replacement of exact text, as `edit_file` makes it and `multi_edit` makes several.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Replacement {
    pub(super) old_string: String,
    pub(super) new_string: String,
    #[serde(default)]
    pub(super) replace_all: bool,
}

impl Replacement {
    /// Why the replacement can never be made, whatever the file holds.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.old_string.is_empty() {
            return Err("old_string is empty; to create a file, use write_file".to_owned());
        }
        if self.old_string == self.new_string {
            return Err("old_string and new_string are identical; nothing to change".to_owned());
        }
        Ok(())
    }

    /// `text` (the content of the file `shown`) with the replacement made, and how many
    /// occurrences it replaced. Fails when old_string is not in `text`, or is there more than
    /// once without `replace_all`.
    pub(super) fn apply(&self, text: &str, shown: &str) -> Result<(String, usize), String> {
        let count = text.matches(&self.old_string).count();
        match count {
            0 => Err(format!(
                "old_string was not found in {shown}; it must match exactly, whitespace \
                 included (read the file again to see its current text)"
            )),
            1 => Ok((text.replacen(&self.old_string, &self.new_string, 1), 1)),
            _ if self.replace_all => Ok((text.replace(&self.old_string, &self.new_string), count)),
            _ => Err(format!(
                "old_string occurs {count} times in {shown}; add surrounding lines to make it \
                 unique, or set replace_all to replace all {count}"
            )),
        }
    }
}

/// The text of the existing file `path`, which `tool` is to change: an error answer when it is
/// missing, a directory, binary or not UTF-8.
pub(super) fn read_text(path: &Path, tool: &str) -> Result<String, ToolOutput> {
    let shown = path.display();
    if path.is_dir() {
        return Err(ToolOutput::error(format!(
            "{shown} is a directory, not a file"
        )));
    }
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(ToolOutput::error(format!("file not found: {shown}")));
        }
        Err(err) => return Err(ToolOutput::error(format!("cannot read {shown}: {err}"))),
    };
    if files::looks_binary(&bytes) {
        return Err(ToolOutput::error(format!(
            "{shown} is a binary file; {tool} changes text only"
        )));
    }
    String::from_utf8(bytes).map_err(|_| {
        ToolOutput::error(format!(
            "{shown} is not UTF-8 text; {tool} changes text only"
        ))
    })
}

/// How many occurrences, in words.
pub(super) fn occurrences(count: usize) -> String {
    if count == 1 {
        "1 occurrence".to_owned()
    } else {
        format!("{count} occurrences")
    }
}

/// Applies the replacement to `path`.
fn edit(path: &Path, replacement: &Replacement) -> ToolOutput {
    let text = match read_text(path, "edit_file") {
        Ok(text) => text,
        Err(err) => return err,
    };
    let shown = path.display().to_string();
    let (edited, count) = match replacement.apply(&text, &shown) {
        Ok(edited) => edited,
        Err(err) => return ToolOutput::error(err),
    };
    if let Err(err) = files::write_atomic(path, edited.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {err}"));
    }
    ToolOutput::text(format!("Edited {shown}: replaced {}", occurrences(count))).with_response(
        serde_json::json!({
            "filePath": shown,
            "oldString": replacement.old_string,
            "newString": replacement.new_string,
            "replaceAll": replacement.replace_all,
            "userModified": false,
            "success": true,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::files::dir_names;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        EditFile.call(input, &context(dir)).await
    }

    fn setup(content: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("code.rs");
        fs::write(&path, content).unwrap();
        (dir, path)
    }

    #[tokio::test]
    async fn replaces_a_unique_match_atomically() {
        let (dir, path) = setup("fn main() {\n    let x = 1;\n}\n");
        let out = call(
            dir.path(),
            json!({"file_path": "code.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text(format!("Edited {}: replaced 1 occurrence", path.display()))
                .with_response(json!({
                    "filePath": path.display().to_string(),
                    "oldString": "let x = 1;",
                    "newString": "let x = 2;",
                    "replaceAll": false,
                    "userModified": false,
                    "success": true,
                }))
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "fn main() {\n    let x = 2;\n}\n"
        );
        assert_eq!(dir_names(dir.path()), ["code.rs"]);
    }

    #[tokio::test]
    async fn several_matches_need_replace_all() {
        let (dir, path) = setup("a = foo; b = foo; c = foo;");
        let input = json!({"file_path": "code.rs", "old_string": "foo", "new_string": "bar"});
        let out = call(dir.path(), input).await;
        let expected = format!(
            "old_string occurs 3 times in {}; add surrounding lines to make it unique, or set \
             replace_all to replace all 3",
            path.display()
        );
        assert_eq!(out, ToolOutput::error(expected));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "a = foo; b = foo; c = foo;"
        );

        let input = json!({"file_path": "code.rs", "old_string": "foo", "new_string": "bar", "replace_all": true});
        let out = call(dir.path(), input).await;
        assert_eq!(
            out.text_content(),
            format!("Edited {}: replaced 3 occurrences", path.display())
        );
        assert!(!out.is_error);
        assert_eq!(out.response.unwrap()["replaceAll"], true);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "a = bar; b = bar; c = bar;"
        );
    }

    #[tokio::test]
    async fn replace_all_with_one_match_is_fine() {
        let (dir, path) = setup("only one here");
        let input = json!({"file_path": "code.rs", "old_string": "one", "new_string": "1", "replace_all": true});
        let out = call(dir.path(), input).await;
        assert!(!out.is_error);
        assert_eq!(fs::read_to_string(&path).unwrap(), "only 1 here");
    }

    #[tokio::test]
    async fn no_match_is_an_error() {
        let (dir, path) = setup("hello");
        let input = json!({"file_path": "code.rs", "old_string": "bye", "new_string": "ciao"});
        let out = call(dir.path(), input).await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with(&format!("old_string was not found in {}", path.display()))
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello");
    }

    #[tokio::test]
    async fn identical_and_empty_strings_are_errors() {
        let (dir, _path) = setup("hello");
        let input = json!({"file_path": "code.rs", "old_string": "hello", "new_string": "hello"});
        let out = call(dir.path(), input).await;
        assert_eq!(
            out,
            ToolOutput::error("old_string and new_string are identical; nothing to change")
        );
        let input = json!({"file_path": "code.rs", "old_string": "", "new_string": "x"});
        let out = call(dir.path(), input).await;
        assert_eq!(
            out,
            ToolOutput::error("old_string is empty; to create a file, use write_file")
        );
    }

    #[tokio::test]
    async fn missing_and_binary_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let input = json!({"file_path": "gone.txt", "old_string": "a", "new_string": "b"});
        let out = call(dir.path(), input).await;
        let expected = format!("file not found: {}", dir.path().join("gone.txt").display());
        assert_eq!(out, ToolOutput::error(expected));

        fs::write(dir.path().join("bin"), b"a\0b").unwrap();
        let input = json!({"file_path": "bin", "old_string": "a", "new_string": "b"});
        let out = call(dir.path(), input).await;
        let expected = format!(
            "{} is a binary file; edit_file changes text only",
            dir.path().join("bin").display()
        );
        assert_eq!(out, ToolOutput::error(expected));
        assert_eq!(fs::read(dir.path().join("bin")).unwrap(), b"a\0b");
    }
}
