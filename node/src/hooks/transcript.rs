//! The conversation of a session as a JSON Lines file, for hooks: Claude Code hands every hook
//! a `transcript_path`, and scripts written for it read the conversation from there.
//!
//! One line per message, in Claude Code's shape: `{"type": "user"|"assistant", "sessionId",
//! "message": {"role", "content": [..]}}`, the content as Anthropic content blocks (`text`,
//! `image`, `tool_use`, `tool_result`). The file is rewritten whole (into a temporary file,
//! then renamed, so a hook never reads half of it) before the hooks of a model turn run, and
//! only when some hook is loaded. It is named by a hash of the session id, which callers
//! choose, so no id can name a path.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::conversation::{Block, ChatMessage, ResultPart, Speaker};

/// The file of `session` under `dir`.
pub(crate) fn path(dir: &Path, session: &str) -> PathBuf {
    let hash = super::trust::sha256_hex(session.as_bytes());
    dir.join(format!("{}.jsonl", &hash[..32]))
}

/// The JSON Lines text of `messages`.
pub(crate) fn render(session: &str, messages: &[ChatMessage]) -> String {
    let mut text = String::new();
    for message in messages {
        let role = match message.speaker {
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
        };
        let content: Vec<Value> = message.content.iter().map(block).collect();
        let line = json!({
            "type": role,
            "sessionId": session,
            "message": {"role": role, "content": content},
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text
}

/// Writes the transcript of `session` to `path`, through a temporary file renamed over it.
pub(crate) async fn write(path: &Path, session: &str, messages: &[ChatMessage]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    // A name of its own, so two runs of one session never write the same temporary file.
    let temp = path.with_extension(format!("tmp-{}", crate::skills::unique_suffix()));
    let written = match tokio::fs::write(&temp, render(session, messages)).await {
        Ok(()) => tokio::fs::rename(&temp, path).await,
        Err(err) => Err(err),
    };
    if written.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    written
}

fn block(block: &Block) -> Value {
    match block {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::Image { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        Block::ToolUse { id, name, input } => json!({
            "type": "tool_use",
            "id": id,
            "name": super::condition::claude_code_tool_name(name),
            "input": input,
        }),
        Block::ToolResult {
            id,
            content,
            is_error,
        } => {
            let content: Vec<Value> = content
                .iter()
                .map(|part| match part {
                    ResultPart::Text { text } => json!({"type": "text", "text": text}),
                    ResultPart::Image { media_type, data } => json!({
                        "type": "image",
                        "source": {"type": "base64", "media_type": media_type, "data": data},
                    }),
                })
                .collect();
            json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_become_claude_code_lines_under_a_hashed_name() {
        let messages = vec![
            ChatMessage {
                speaker: Speaker::User,
                content: vec![Block::Text {
                    text: "list files".to_owned(),
                }],
            },
            ChatMessage {
                speaker: Speaker::Assistant,
                content: vec![Block::ToolUse {
                    id: "c1".to_owned(),
                    name: "bash".to_owned(),
                    input: json!({"command": "ls"}),
                }],
            },
            ChatMessage {
                speaker: Speaker::User,
                content: vec![Block::ToolResult {
                    id: "c1".to_owned(),
                    content: vec![ResultPart::Text {
                        text: "a.txt".to_owned(),
                    }],
                    is_error: false,
                }],
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "../../etc/passwd");
        assert_eq!(file.parent(), Some(dir.path()));
        write(&file, "s-1", &messages).await.unwrap();
        let lines: Vec<Value> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["type"], "user");
        assert_eq!(lines[0]["sessionId"], "s-1");
        assert_eq!(lines[0]["message"]["content"][0]["text"], "list files");
        assert_eq!(lines[1]["message"]["role"], "assistant");
        assert_eq!(lines[1]["message"]["content"][0]["name"], "Bash");
        assert_eq!(lines[2]["message"]["content"][0]["tool_use_id"], "c1");
        assert_eq!(
            lines[2]["message"]["content"][0]["content"][0]["text"],
            "a.txt"
        );
        // Only the transcript is left: no temporary file.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
