//! The `write_file` tool: creates or replaces a whole file, atomically.

use std::fs;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::files;
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};

/// Writes a whole file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriteFile;

/// The input of `write_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    file_path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> String {
        "Writes a file to the local file system, replacing it if it exists.\n\
         - file_path is absolute, or relative to the working directory; missing parent \
         directories are created.\n\
         - content is the complete new content of the file.\n\
         - The write is atomic: the file has the old content or the new, never a mix.\n\
         - To change part of an existing file, prefer edit_file: it sends only the change."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The file to write: absolute, or relative to the working directory."
                },
                "content": {
                    "type": "string",
                    "description": "The complete content to write."
                }
            },
            "required": ["file_path", "content"],
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
        run_blocking(move || write(&path, &input.content)).await
    }
}

/// Writes `content` to `path`, creating parent directories.
fn write(path: &Path, content: &str) -> ToolOutput {
    let shown = path.display();
    if path.is_dir() {
        return ToolOutput::error(format!("{shown} is a directory, not a file"));
    }
    let existed = path.exists();
    if let Some(parent) = path.parent()
        && let Err(err) = fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "cannot create the directory {}: {err}",
            parent.display()
        ));
    }
    match files::write_atomic(path, content.as_bytes()) {
        Ok(()) => {
            let verb = if existed { "Overwrote" } else { "Created" };
            ToolOutput::text(format!("{verb} {shown}: wrote {} bytes", content.len()))
                .with_response(serde_json::json!({
                    "type": if existed { "update" } else { "create" },
                    "filePath": path.display().to_string(),
                    "success": true,
                }))
        }
        Err(err) => ToolOutput::error(format!("cannot write {shown}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::files::dir_names;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        WriteFile.call(input, &context(dir)).await
    }

    #[tokio::test]
    async fn creates_parent_directories_and_reports_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(
            dir.path(),
            json!({"file_path": "a/b/c.txt", "content": "héllo\n"}),
        )
        .await;
        let path = dir.path().join("a/b/c.txt");
        assert_eq!(
            out,
            ToolOutput::text(format!("Created {}: wrote 7 bytes", path.display())).with_response(
                json!({"type": "create", "filePath": path.display().to_string(), "success": true})
            )
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "héllo\n");
        assert_eq!(dir_names(&dir.path().join("a/b")), ["c.txt"]);
    }

    #[tokio::test]
    async fn overwrites_atomically_without_leaving_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        fs::write(&path, "old content that is longer").unwrap();
        let absolute = path.to_str().unwrap();
        let out = call(dir.path(), json!({"file_path": absolute, "content": "new"})).await;
        assert_eq!(
            out,
            ToolOutput::text(format!("Overwrote {absolute}: wrote 3 bytes"))
                .with_response(json!({"type": "update", "filePath": absolute, "success": true}))
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(dir_names(dir.path()), ["f.txt"]);
    }

    #[tokio::test]
    async fn empty_content_makes_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"file_path": "e.txt", "content": ""})).await;
        assert!(!out.is_error);
        assert_eq!(fs::read(dir.path().join("e.txt")).unwrap(), b"");
    }

    #[tokio::test]
    async fn a_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let out = call(dir.path(), json!({"file_path": "sub", "content": "x"})).await;
        let expected = format!(
            "{} is a directory, not a file",
            dir.path().join("sub").display()
        );
        assert_eq!(out, ToolOutput::error(expected));
    }

    #[tokio::test]
    async fn a_file_in_the_way_of_the_parent_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("plain"), "x").unwrap();
        let out = call(
            dir.path(),
            json!({"file_path": "plain/inner.txt", "content": "x"}),
        )
        .await;
        assert!(out.is_error);
        let expected = format!(
            "cannot create the directory {}: ",
            dir.path().join("plain").display()
        );
        assert!(
            out.text_content().starts_with(&expected),
            "{}",
            out.text_content()
        );
    }

    #[tokio::test]
    async fn missing_content_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"file_path": "x.txt"})).await;
        assert!(out.is_error);
        assert!(
            out.text_content()
                .starts_with("invalid input for write_file: missing field `content`")
        );
        assert!(!dir.path().join("x.txt").exists());
    }
}
