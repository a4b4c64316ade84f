//! The tail of a stdio server's stderr: kept in a bounded buffer, never printed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio_util::sync::CancellationToken;

/// The most of a server's stderr that is kept: its last lines, up to this many bytes.
pub(crate) const MAX_TAIL_BYTES: usize = 4096;
/// The most of one line that is kept.
const MAX_LINE_BYTES: usize = 1024;

/// The last lines a server wrote to stderr.
#[derive(Debug, Default)]
pub(super) struct StderrTail {
    lines: Mutex<Lines>,
    /// Cancelled once the pipe reached its end (every writer exited).
    closed: CancellationToken,
}

#[derive(Debug, Default)]
struct Lines {
    lines: VecDeque<String>,
    bytes: usize,
}

impl StderrTail {
    /// Reads `stderr` to its end in a task of its own, keeping the tail; each line is also
    /// logged at debug level.
    pub(super) fn capture(
        server: &str,
        stderr: impl AsyncRead + Unpin + Send + 'static,
    ) -> Arc<Self> {
        let tail = Arc::new(Self::default());
        let keep = tail.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end();
                        tracing::debug!(server = %server, "MCP server stderr: {text}");
                        keep.push(text);
                    }
                }
            }
            keep.closed.cancel();
        });
        tail
    }

    fn push(&self, line: &str) {
        let line = truncate(line, MAX_LINE_BYTES);
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.bytes += line.len() + 1;
        lines.lines.push_back(line);
        while lines.bytes > MAX_TAIL_BYTES {
            match lines.lines.pop_front() {
                Some(old) => lines.bytes -= old.len() + 1,
                None => break,
            }
        }
    }

    /// The kept lines, joined by newlines; empty when the server wrote nothing.
    pub(super) fn tail(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Waits (at most `limit`) until the pipe reached its end, so the tail is complete.
    pub(super) async fn settle(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.closed.cancelled()).await;
    }
}

/// `text` cut to at most `max` bytes, on a character boundary, marked when cut.
pub(super) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_last_lines() {
        let tail = StderrTail::default();
        for i in 0..1000 {
            tail.push(&format!("line {i}"));
        }
        let text = tail.tail();
        assert!(text.len() <= MAX_TAIL_BYTES, "{}", text.len());
        assert!(text.ends_with("line 999"), "{text}");
        assert!(!text.contains("line 1\n"), "{text}");
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        let tail = StderrTail::default();
        tail.push(&"é".repeat(MAX_LINE_BYTES));
        let text = tail.tail();
        assert!(text.len() <= MAX_LINE_BYTES + "…".len(), "{}", text.len());
        assert!(text.ends_with('…'));
        assert_eq!(truncate("short", 10), "short");
    }

    #[tokio::test]
    async fn capture_reads_to_the_end() {
        let tail = StderrTail::capture("test", &b"first\nsecond\n"[..]);
        tail.settle(Duration::from_secs(10)).await;
        assert_eq!(tail.tail(), "first\nsecond");
    }
}
