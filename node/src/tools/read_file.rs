//! The `read_file` tool: a text file with `cat -n` line numbers, or an image for the model to see.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read as _};
use std::path::Path;

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::{self, SNIFF_LEN};
use super::{Category, Tool, ToolContext, ToolOutput, parse_input, run_blocking};
use crate::conversation::ResultPart;

/// Lines shown when the call gives no `limit`.
const DEFAULT_LIMIT: usize = 2000;

/// The largest image sent to the model, in bytes (providers refuse larger ones).
const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// Bytes kept of one line while reading; enough for [`files::MAX_LINE_CHARS`] characters of
/// any UTF-8 text, the rest is dropped before it reaches memory.
const MAX_LINE_BYTES: usize = files::MAX_LINE_CHARS * 4;

/// Reads a file from disk.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadFile;

/// The input of `read_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    file_path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> String {
        format!(
            "Reads a file from the local file system.\n\
             - file_path is absolute, or relative to the working directory.\n\
             - Text comes back like `cat -n`: each line prefixed with its 1-based line number \
             and a tab. The number and tab are not part of the file; leave them out of \
             edit_file's old_string.\n\
             - By default up to {DEFAULT_LIMIT} lines from the start; for longer files give \
             offset (the line number to start at) and limit (how many lines).\n\
             - Lines longer than {max} characters are cut.\n\
             - PNG, JPEG, GIF and WebP images come back as images you can see.\n\
             - Other binary files and directories are errors: list directories with glob or \
             bash.",
            max = files::MAX_LINE_CHARS
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The file to read: absolute, or relative to the working directory."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The line number to start reading at (1 is the first line). Only for files too long to read at once."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": format!("How many lines to read (default {DEFAULT_LIMIT}).")
                }
            },
            "required": ["file_path"],
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
        let path = match files::resolve(ctx, "file_path", &input.file_path) {
            Ok(path) => path,
            Err(err) => return err,
        };
        // Offset 0 is read as "from the start", like offset 1.
        let first = usize::try_from(input.offset.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
        let limit = match input.limit {
            Some(0) => return ToolOutput::error("limit must be at least 1"),
            Some(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
            None => DEFAULT_LIMIT,
        };
        run_blocking(move || read(&path, first, limit)).await
    }
}

/// Reads `path`: lines `first..first + limit` of a text file, or the whole of an image.
fn read(path: &Path, first: usize, limit: usize) -> ToolOutput {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("file not found: {shown}"));
        }
        Err(err) => return ToolOutput::error(format!("cannot read {shown}: {err}")),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!(
            "{shown} is a directory, not a file; list it with glob or bash"
        ));
    }
    read_contents(path, meta.len(), first, limit)
        .unwrap_or_else(|err| ToolOutput::error(format!("cannot read {shown}: {err}")))
}

/// Reads the file at `path`, `len` bytes long, once it is known to be a file.
fn read_contents(path: &Path, len: u64, first: usize, limit: usize) -> io::Result<ToolOutput> {
    let mut file = File::open(path)?;
    let mut prefix = Vec::with_capacity(SNIFF_LEN);
    (&mut file)
        .take(SNIFF_LEN as u64)
        .read_to_end(&mut prefix)?;
    if let Some(media_type) = image_type(path, &prefix) {
        return read_image(path, file, prefix, media_type, len);
    }
    if files::looks_binary(&prefix) {
        return Ok(ToolOutput::error(format!(
            "{} is a binary file; read_file shows text and PNG, JPEG, GIF or WebP images",
            path.display()
        )));
    }
    let reader = BufReader::new(Cursor::new(prefix).chain(file));
    number_lines(path, reader, first, limit)
}

/// The media type of an image the model can see, when both the extension and the magic bytes
/// say so.
fn image_type(path: &Path, prefix: &[u8]) -> Option<&'static str> {
    let extension = path.extension()?.to_str()?.to_ascii_lowercase();
    let (media_type, magic_matches) = match extension.as_str() {
        "png" => ("image/png", prefix.starts_with(b"\x89PNG\r\n\x1a\n")),
        "jpg" | "jpeg" => ("image/jpeg", prefix.starts_with(b"\xff\xd8\xff")),
        "gif" => (
            "image/gif",
            prefix.starts_with(b"GIF87a") || prefix.starts_with(b"GIF89a"),
        ),
        "webp" => (
            "image/webp",
            prefix.len() >= 12 && prefix.starts_with(b"RIFF") && &prefix[8..12] == b"WEBP",
        ),
        _ => return None,
    };
    magic_matches.then_some(media_type)
}

/// The whole image as a text note and an image part.
fn read_image(
    path: &Path,
    mut file: File,
    mut bytes: Vec<u8>,
    media_type: &str,
    len: u64,
) -> io::Result<ToolOutput> {
    if len > MAX_IMAGE_BYTES {
        return Ok(ToolOutput::error(format!(
            "{} is an image of {len} bytes, more than the {MAX_IMAGE_BYTES} bytes a model accepts",
            path.display()
        )));
    }
    file.read_to_end(&mut bytes)?;
    let note = format!(
        "Image {} ({media_type}, {} bytes)",
        path.display(),
        bytes.len()
    );
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(ToolOutput {
        content: vec![
            ResultPart::Text { text: note },
            ResultPart::Image {
                media_type: media_type.to_owned(),
                data,
            },
        ],
        is_error: false,
        response: None,
        relay: None,
        ask: None,
    })
}

/// Lines `first..first + limit` of `reader`, numbered like `cat -n`, with a note when more
/// lines follow.
fn number_lines(
    path: &Path,
    mut reader: impl BufRead,
    first: usize,
    limit: usize,
) -> io::Result<ToolOutput> {
    let last = first.saturating_add(limit - 1);
    let mut out = String::new();
    let mut line = Vec::new();
    let mut total = 0usize;
    while read_line(&mut reader, &mut line)? {
        total += 1;
        if (first..=last).contains(&total) {
            let text = String::from_utf8_lossy(&line);
            let text = text.strip_suffix('\r').unwrap_or(&text);
            out.push_str(&format!("{total:>6}\t{}\n", files::cut_line(text)));
        }
    }
    if total == 0 {
        return Ok(ToolOutput::text(format!("{} is empty", path.display())));
    }
    if first > total {
        return Ok(ToolOutput::error(format!(
            "offset {first} is past the end of {}, which has {total} lines",
            path.display()
        )));
    }
    if last < total {
        out.push_str(&format!(
            "\n[showing lines {first}-{last} of {total}; read on with offset {}]\n",
            last + 1
        ));
    }
    Ok(ToolOutput::text(out))
}

/// Reads the next line into `line` without its `\n`, keeping at most [`MAX_LINE_BYTES`] bytes
/// of it. Returns false at the end of the input.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<bool> {
    line.clear();
    let mut any = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (taken, done) = match chunk.iter().position(|&byte| byte == b'\n') {
            Some(newline) => (newline, true),
            None => (chunk.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..taken.min(room)]);
        reader.consume(if done { taken + 1 } else { taken });
        if done {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::tools::test_support::context;

    async fn call(dir: &Path, input: Value) -> ToolOutput {
        ReadFile.call(input, &context(dir)).await
    }

    fn text(output: &ToolOutput) -> String {
        output.text_content()
    }

    #[tokio::test]
    async fn numbers_lines_like_cat_n() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "alpha\r\nbeta\n\ngamma").unwrap();
        let out = call(dir.path(), json!({"file_path": "a.txt"})).await;
        assert!(!out.is_error);
        assert_eq!(
            text(&out),
            "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma\n"
        );
    }

    #[tokio::test]
    async fn offset_and_limit_select_lines_and_say_what_follows() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        fs::write(dir.path().join("ten.txt"), body).unwrap();
        let out = call(
            dir.path(),
            json!({"file_path": "ten.txt", "offset": 3, "limit": 2}),
        )
        .await;
        assert_eq!(
            text(&out),
            "     3\tline 3\n     4\tline 4\n\n[showing lines 3-4 of 10; read on with offset 5]\n"
        );
        let out = call(dir.path(), json!({"file_path": "ten.txt", "offset": 9})).await;
        assert_eq!(text(&out), "     9\tline 9\n    10\tline 10\n");
        let out = call(
            dir.path(),
            json!({"file_path": "ten.txt", "offset": 0, "limit": 1}),
        )
        .await;
        assert_eq!(
            text(&out),
            "     1\tline 1\n\n[showing lines 1-1 of 10; read on with offset 2]\n"
        );
    }

    #[tokio::test]
    async fn default_limit_is_2000_lines() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (1..=2500).map(|n| format!("{n}\n")).collect();
        fs::write(dir.path().join("long.txt"), body).unwrap();
        let out = call(dir.path(), json!({"file_path": "long.txt"})).await;
        let text = text(&out);
        assert_eq!(text.lines().filter(|l| l.contains('\t')).count(), 2000);
        assert!(text.contains("  2000\t2000\n"));
        assert!(!text.contains("\t2001\n"));
        assert!(text.ends_with("[showing lines 1-2000 of 2500; read on with offset 2001]\n"));
    }

    #[tokio::test]
    async fn long_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("wide.txt"),
            format!("{}\nnext\n", "x".repeat(50_000)),
        )
        .unwrap();
        let out = call(dir.path(), json!({"file_path": "wide.txt"})).await;
        let expected = format!(
            "     1\t{}… [line cut at 2000 characters]\n     2\tnext\n",
            "x".repeat(2000)
        );
        assert_eq!(text(&out), expected);
    }

    #[tokio::test]
    async fn offset_past_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("two.txt"), "a\nb\n").unwrap();
        let out = call(dir.path(), json!({"file_path": "two.txt", "offset": 5})).await;
        assert!(out.is_error);
        let expected = format!(
            "offset 5 is past the end of {}, which has 2 lines",
            dir.path().join("two.txt").display()
        );
        assert_eq!(text(&out), expected);
    }

    #[tokio::test]
    async fn empty_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("empty.txt"), "").unwrap();
        let out = call(dir.path(), json!({"file_path": "empty.txt"})).await;
        assert!(!out.is_error);
        assert_eq!(
            text(&out),
            format!("{} is empty", dir.path().join("empty.txt").display())
        );
    }

    #[tokio::test]
    async fn images_come_back_as_image_parts() {
        let dir = tempfile::tempdir().unwrap();
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRfake-image-bytes".to_vec();
        fs::write(dir.path().join("pic.PNG"), &png).unwrap();
        let out = call(dir.path(), json!({"file_path": "pic.PNG"})).await;
        assert!(!out.is_error);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
        assert_eq!(
            out.content[1],
            ResultPart::Image {
                media_type: "image/png".to_owned(),
                data: encoded
            }
        );
        let note = format!(
            "Image {} (image/png, 32 bytes)",
            dir.path().join("pic.PNG").display()
        );
        assert_eq!(png.len(), 32);
        assert_eq!(out.content[0], ResultPart::Text { text: note });
    }

    #[test]
    fn image_types_need_extension_and_magic() {
        let gif = Path::new("a.gif");
        assert_eq!(image_type(gif, b"GIF89a..."), Some("image/gif"));
        assert_eq!(
            image_type(Path::new("a.jpeg"), b"\xff\xd8\xff\xe0"),
            Some("image/jpeg")
        );
        assert_eq!(
            image_type(Path::new("a.webp"), b"RIFF\x10\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(image_type(Path::new("a.png"), b"GIF89a..."), None);
        assert_eq!(image_type(Path::new("a.bin"), b"\x89PNG\r\n\x1a\n"), None);
    }

    #[tokio::test]
    async fn binary_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("blob.bin"), b"ELF\0\x01\x02").unwrap();
        // An extension that promises an image does not help bytes that are not one.
        fs::write(dir.path().join("fake.png"), b"not\0png").unwrap();
        for name in ["blob.bin", "fake.png"] {
            let out = call(dir.path(), json!({"file_path": name})).await;
            assert!(out.is_error);
            assert_eq!(
                text(&out),
                format!(
                    "{} is a binary file; read_file shows text and PNG, JPEG, GIF or WebP images",
                    dir.path().join(name).display()
                )
            );
        }
    }

    #[tokio::test]
    async fn missing_files_and_directories_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"file_path": "nope.txt"})).await;
        assert!(out.is_error);
        assert_eq!(
            text(&out),
            format!("file not found: {}", dir.path().join("nope.txt").display())
        );
        let out = call(
            dir.path(),
            json!({"file_path": dir.path().to_str().unwrap()}),
        )
        .await;
        assert!(out.is_error);
        assert_eq!(
            text(&out),
            format!(
                "{} is a directory, not a file; list it with glob or bash",
                dir.path().display()
            )
        );
    }

    #[tokio::test]
    async fn bad_input_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({"path": "x"})).await;
        assert!(out.is_error);
        assert!(text(&out).starts_with("invalid input for read_file: unknown field `path`"));
        let out = call(dir.path(), json!({"file_path": "x", "limit": 0})).await;
        assert_eq!(out, ToolOutput::error("limit must be at least 1"));
        let out = call(dir.path(), json!({"file_path": ""})).await;
        assert_eq!(out, ToolOutput::error("file_path is empty"));
    }
}
