//! The `multi_edit` tool: several exact replacements in one file, made in order, all or none.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::edit_file::{Replacement, occurrences, read_text};
use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// The most replacements one call makes.
const MAX_EDITS: usize = 100;

/// Makes several replacements in one file at once.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MultiEdit;

/// The input of `multi_edit`: Claude Code's `MultiEdit` input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    file_path: String,
    edits: Vec<Replacement>,
}

#[async_trait]
impl Tool for MultiEdit {
    fn name(&self) -> &str {
        "multi_edit"
    }

    fn description(&self) -> String {
        format!(
            "Makes several replacements of exact text in one existing file, in one atomic \
             write. Prefer it to several edit_file calls on the same file.\n\
             - Each edit is as in edit_file: old_string must match exactly, whitespace and \
             indentation included (leave out read_file's line-number prefix), and occur \
             exactly once unless replace_all is set; new_string must differ from it.\n\
             - The edits apply in order, each to the text the previous ones left: an edit \
             must match the file as the earlier edits changed it.\n\
             - All or nothing: if any edit fails, none is written and the answer says which \
             failed.\n\
             - At most {MAX_EDITS} edits a call. To create a file, use write_file."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The file to change: absolute, or relative to the working directory."
                },
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_EDITS,
                    "description": "The replacements, made in this order.",
                    "items": {
                        "type": "object",
                        "properties": {
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
                        "required": ["old_string", "new_string"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["file_path", "edits"],
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
        match input.edits.len() {
            0 => return ToolOutput::error("edits is empty; give at least one edit"),
            n if n > MAX_EDITS => {
                return ToolOutput::error(format!(
                    "{n} edits is more than {MAX_EDITS}; split them over several calls"
                ));
            }
            _ => {}
        }
        for (n, edit) in input.edits.iter().enumerate() {
            if let Err(err) = edit.check() {
                return ToolOutput::error(format!("edit {}: {err}; nothing was written", n + 1));
            }
        }
        run_blocking(move || edit_all(&path, &input.edits)).await
    }
}

/// Makes `edits` in order on the text of `path` and writes the result once, or nothing.
fn edit_all(path: &Path, edits: &[Replacement]) -> ToolOutput {
    let mut text = match read_text(path, "multi_edit") {
        Ok(text) => text,
        Err(err) => return err,
    };
    let shown = path.display().to_string();
    let mut counts = Vec::with_capacity(edits.len());
    for (n, edit) in edits.iter().enumerate() {
        match edit.apply(&text, &shown) {
            Ok((edited, count)) => {
                text = edited;
                counts.push(occurrences(count));
            }
            Err(err) => {
                let after = match n {
                    0 => String::new(),
                    1 => " (in the text as the edit before it left it)".to_owned(),
                    n => format!(" (in the text as the {n} edits before it left it)"),
                };
                return ToolOutput::error(format!(
                    "edit {}: {err}{after}; nothing was written",
                    n + 1
                ));
            }
        }
    }
    if let Err(err) = files::write_atomic(path, text.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {err}"));
    }
    let made = if counts.len() == 1 {
        "1 edit".to_owned()
    } else {
        format!("{} edits", counts.len())
    };
    let response = serde_json::json!({
        "filePath": shown,
        "edits": edits_json(edits),
        "userModified": false,
        "success": true,
    });
    ToolOutput::text(format!(
        "Edited {shown}: made {made}, replacing {}",
        counts.join(", ")
    ))
    .with_response(response)
}

/// The edits as Claude Code's MultiEdit result lists them, for hooks.
fn edits_json(edits: &[Replacement]) -> Vec<serde_json::Value> {
    edits
        .iter()
        .map(|edit| {
            serde_json::json!({
                "old_string": edit.old_string,
                "new_string": edit.new_string,
                "replace_all": edit.replace_all,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::tools::files::dir_names;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        MultiEdit.call(input, &context(dir)).await
    }

    fn setup(content: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("code.rs");
        fs::write(&path, content).unwrap();
        (dir, path)
    }

    #[tokio::test]
    async fn edits_apply_in_order_in_one_write() {
        let (dir, path) = setup("let a = 1;\nlet b = a + a;\n");
        let out = call(
            dir.path(),
            json!({"file_path": "code.rs", "edits": [
                {"old_string": "let a = 1;", "new_string": "let count = 1;"},
                {"old_string": "a + a", "new_string": "count + count"},
                // Sees the text the first two edits left.
                {"old_string": "count", "new_string": "total", "replace_all": true},
            ]}),
        )
        .await;
        assert_eq!(
            out.text_content(),
            format!(
                "Edited {}: made 3 edits, replacing 1 occurrence, 1 occurrence, 3 occurrences",
                path.display()
            )
        );
        assert!(!out.is_error);
        let response = out.response.unwrap();
        assert_eq!(response["filePath"], path.display().to_string());
        assert_eq!(response["edits"][2]["replace_all"], true);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "let total = 1;\nlet b = total + total;\n"
        );
        assert_eq!(dir_names(dir.path()), ["code.rs"]);
    }

    #[tokio::test]
    async fn a_failing_edit_writes_nothing_and_is_named() {
        let original = "one two two three\n";
        let (dir, path) = setup(original);
        let out = call(
            dir.path(),
            json!({"file_path": "code.rs", "edits": [
                {"old_string": "one", "new_string": "1"},
                {"old_string": "two", "new_string": "2"},
            ]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error(format!(
                "edit 2: old_string occurs 2 times in {}; add surrounding lines to make it \
                 unique, or set replace_all to replace all 2 (in the text as the edit before \
                 it left it); nothing was written",
                path.display()
            ))
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), original);

        // An edit whose text an earlier edit replaced is not found.
        let out = call(
            dir.path(),
            json!({"file_path": "code.rs", "edits": [
                {"old_string": "three", "new_string": "3"},
                {"old_string": "three", "new_string": "drei"},
            ]}),
        )
        .await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with("edit 2: old_string was not found in"),
            "{}",
            out.text_content()
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), original);
        assert_eq!(dir_names(dir.path()), ["code.rs"]);
    }

    #[tokio::test]
    async fn bad_inputs_are_errors_before_the_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"file_path": "x.rs", "edits": []})).await;
        assert_eq!(
            out,
            ToolOutput::error("edits is empty; give at least one edit")
        );
        let out = call(
            dir.path(),
            json!({"file_path": "x.rs", "edits": [
                {"old_string": "a", "new_string": "b"},
                {"old_string": "same", "new_string": "same"},
            ]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error(
                "edit 2: old_string and new_string are identical; nothing to change; nothing \
                 was written"
            )
        );
        let edits: Vec<Value> = (0..=MAX_EDITS)
            .map(|n| json!({"old_string": format!("a{n}"), "new_string": "b"}))
            .collect();
        let out = call(dir.path(), json!({"file_path": "x.rs", "edits": edits})).await;
        assert_eq!(
            out,
            ToolOutput::error("101 edits is more than 100; split them over several calls")
        );
        let out = call(
            dir.path(),
            json!({"file_path": "x.rs", "edits": [{"old_string": "a", "new_string": "b", "extra": 1}]}),
        )
        .await;
        assert!(
            out.text_content()
                .starts_with("invalid input for multi_edit: unknown field `extra`"),
            "{}",
            out.text_content()
        );
        let out = call(
            dir.path(),
            json!({"file_path": "gone.rs", "edits": [{"old_string": "a", "new_string": "b"}]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error(format!(
                "file not found: {}",
                dir.path().join("gone.rs").display()
            ))
        );
    }
}
