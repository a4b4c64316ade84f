//! What an MCP tool result becomes for the model: every kind of content is kept.
//!
//! | MCP content                     | Tool output part                                          |
//! |---------------------------------|-----------------------------------------------------------|
//! | text                            | text                                                      |
//! | image                           | image (base64 data and media type)                        |
//! | audio                           | text: `[audio: <mime>, <n> bytes, not shown]`             |
//! | embedded text resource          | text: `[resource <uri> (<mime>)]` and the resource's text |
//! | embedded blob resource          | text: `[resource <uri> (<mime>): binary, <n> bytes, not shown]` |
//! | resource link                   | text: `[resource link: <name> <uri> (<mime>): <description>]` |
//! | `structuredContent`             | text: its JSON, unless a text part already holds the same JSON |
//! | a kind this SDK does not know   | text: the block's JSON                                    |
//! | nothing at all                  | text: `(no content)`                                      |
//!
//! `isError: true` makes the output an error (`is_error`) with the same content.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

use crate::conversation::ResultPart;
use crate::tools::ToolOutput;

/// The output the model sees for `result`.
pub(super) fn output(result: CallToolResult) -> ToolOutput {
    let mut parts = Vec::with_capacity(result.content.len() + 1);
    for block in &result.content {
        parts.push(part(block));
    }
    if let Some(structured) = &result.structured_content
        && !already_shown(&result.content, structured)
    {
        parts.push(text(structured.to_string()));
    }
    if parts.is_empty() {
        parts.push(text("(no content)".to_owned()));
    }
    // Claude Code hands hooks an MCP tool's structured content where it has one, else its
    // content blocks.
    let response = result
        .structured_content
        .clone()
        .or_else(|| serde_json::to_value(&result.content).ok());
    ToolOutput {
        content: parts,
        is_error: result.is_error == Some(true),
        relay: None,
        ask: None,
        response,
    }
}

fn text(text: String) -> ResultPart {
    ResultPart::Text { text }
}

/// One content block as a part.
fn part(block: &ContentBlock) -> ResultPart {
    match block {
        ContentBlock::Text(content) => text(content.text.clone()),
        ContentBlock::Image(image) => ResultPart::Image {
            media_type: image.mime_type.clone(),
            data: image.data.clone(),
        },
        ContentBlock::Audio(audio) => text(format!(
            "[audio: {}, {} bytes, not shown]",
            audio.mime_type,
            base64_len(&audio.data)
        )),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text: body,
                ..
            } => text(format!(
                "[resource {uri}{}]\n{body}",
                mime(mime_type.as_deref())
            )),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => text(format!(
                "[resource {uri}{}: binary, {} bytes, not shown]",
                mime(mime_type.as_deref()),
                base64_len(blob)
            )),
            other => as_json(other),
        },
        ContentBlock::ResourceLink(link) => {
            let mut line = format!("[resource link: {} {}", link.name, link.uri);
            line.push_str(&mime(link.mime_type.as_deref()));
            if let Some(description) = link.description.as_deref().filter(|d| !d.is_empty()) {
                line.push_str(": ");
                line.push_str(description);
            }
            line.push(']');
            text(line)
        }
        other => as_json(other),
    }
}

/// Content of a kind this SDK does not know, as its JSON.
fn as_json(content: &impl serde::Serialize) -> ResultPart {
    text(
        serde_json::to_string(content)
            .unwrap_or_else(|err| format!("[content that cannot be shown: {err}]")),
    )
}

/// ` (<mime>)`, or nothing.
fn mime(mime_type: Option<&str>) -> String {
    mime_type.map(|m| format!(" ({m})")).unwrap_or_default()
}

/// True when a text block holds `structured` as JSON (servers are asked to send both).
fn already_shown(content: &[ContentBlock], structured: &Value) -> bool {
    content.iter().any(|block| match block {
        ContentBlock::Text(content) => {
            serde_json::from_str::<Value>(content.text.trim()).is_ok_and(|v| v == *structured)
        }
        _ => false,
    })
}

/// How many bytes the base64 text `data` stands for.
fn base64_len(data: &str) -> usize {
    let digits = data.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    let padding = data
        .bytes()
        .rev()
        .filter(|b| !b.is_ascii_whitespace())
        .take_while(|b| *b == b'=')
        .count();
    let whole = (digits / 4) * 3
        + match digits % 4 {
            2 => 1,
            3 => 2,
            _ => 0,
        };
    whole.saturating_sub(padding.min(2))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{AudioContent, Resource};
    use serde_json::json;

    use super::*;

    fn texts(output: &ToolOutput) -> Vec<&str> {
        output
            .content
            .iter()
            .filter_map(|part| match part {
                ResultPart::Text { text } => Some(text.as_str()),
                ResultPart::Image { .. } => None,
            })
            .collect()
    }

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_len(""), 0);
        assert_eq!(base64_len("QQ=="), 1);
        assert_eq!(base64_len("QUI="), 2);
        assert_eq!(base64_len("QUJD"), 3);
        assert_eq!(base64_len("QUJDRA"), 4);
        assert_eq!(base64_len("QUJD\nRA==\n"), 4);
    }

    #[test]
    fn every_kind_is_kept() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("AAAA", "image/png"),
            ContentBlock::Audio(AudioContent::new("QUJD", "audio/wav")),
            ContentBlock::embedded_text("file:///a.txt", "body"),
            ContentBlock::resource(ResourceContents::BlobResourceContents {
                uri: "file:///b.bin".to_owned(),
                mime_type: None,
                blob: "QQ==".to_owned(),
                meta: None,
            }),
            ContentBlock::resource_link(
                Resource::new("file:///c.pdf", "c.pdf").with_description("the report"),
            ),
        ]);
        let all = output(result);
        assert!(!all.is_error);
        assert_eq!(
            all.content[1],
            ResultPart::Image {
                media_type: "image/png".to_owned(),
                data: "AAAA".to_owned()
            }
        );
        assert_eq!(
            texts(&all),
            [
                "hello",
                "[audio: audio/wav, 3 bytes, not shown]",
                "[resource file:///a.txt (text/plain)]\nbody",
                "[resource file:///b.bin: binary, 1 bytes, not shown]",
                "[resource link: c.pdf file:///c.pdf: the report]",
            ]
        );
    }

    #[test]
    fn structured_content_is_shown_once() {
        let value = json!({"a": 1});
        // The SDK's helper also puts the JSON in a text part: it is not repeated.
        let shown = output(CallToolResult::structured(value.clone()));
        assert_eq!(texts(&shown), [r#"{"a":1}"#]);
        let mut result = CallToolResult::success(vec![ContentBlock::text("see the data")]);
        result.structured_content = Some(value);
        assert_eq!(texts(&output(result)), ["see the data", r#"{"a":1}"#]);
    }

    #[test]
    fn errors_keep_their_content_and_empty_results_say_so() {
        let failed = output(CallToolResult::error(vec![ContentBlock::text(
            "no such city",
        )]));
        assert!(failed.is_error);
        assert_eq!(texts(&failed), ["no such city"]);
        let empty = output(CallToolResult::success(Vec::new()));
        assert!(!empty.is_error);
        assert_eq!(texts(&empty), ["(no content)"]);
        assert_eq!(base64_len("="), 0);
    }
}
