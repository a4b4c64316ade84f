//! The workspace's one Server-Sent Events decoder (`text/event-stream`): bytes in, events out.
//!
//! [`RemoteAgent`](crate::RemoteAgent) reads A2A streams with it, and the node's model
//! providers read model streams with it, so both follow the same line rules and the same
//! size limit.
//!
//! Why not `sse-stream` (in the tree already, for rmcp): its parser makes errors of what the
//! WHATWG rules say to ignore (a line without a colon, an unknown field, a second `event:`
//! line); it has no bound on an event's size (rmcp puts a byte counter of its own in front of
//! it to get one); and it drops the event still open when the stream ends, which the
//! providers deliver. Working around all three would take more code than this decoder.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default type (`message`), which an empty field
    /// also means.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, when the event has one.
    pub id: Option<String>,
}

/// Why the stream cannot be decoded. The decoder is not meant to be used after one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event (its lines and their endings) outgrew [`SseDecoder::MAX_EVENT`].
    #[error("an event is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// An event is not UTF-8 text.
    #[error("the event stream is not valid UTF-8")]
    NotUtf8,
}

/// Decodes an event stream fed in chunks of any size: a line, or a UTF-8 character, may be
/// split across chunks, and the events come out the same however the bytes were cut.
///
/// Follows the WHATWG rules: lines end in `\n`, `\r\n` or `\r`; a blank line dispatches the
/// event, if it has data; `:` lines are comments; one space after the colon is dropped; a
/// line without a colon is a field with an empty value; unknown fields, `id` and `retry` are
/// ignored (neither A2A clients nor model APIs resume streams here).
///
/// Feed it with [`push`](Self::push) and take events with [`next_event`](Self::next_event)
/// until it returns `None`. When the stream ends, the event still open is dropped, as the
/// rules say, unless the caller asks for it with [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes not yet taken as events: the start of the current event, then whatever follows.
    buffer: Vec<u8>,
    /// Where the search for a blank line resumes: the start of the first line of `buffer`
    /// not yet known to be complete, so that each byte is scanned once.
    scanned: usize,
}

impl SseDecoder {
    /// The largest event accepted, in bytes: enough for any A2A event or model chunk, and a
    /// bound on what a peer that never ends its event can make us hold.
    pub const MAX_EVENT: usize = 16 * 1024 * 1024;

    /// Adds bytes from the wire.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete event, if one has arrived.
    ///
    /// # Errors
    ///
    /// [`SseError::TooLarge`] when the current event outgrows [`Self::MAX_EVENT`], whether
    /// or not its end has arrived; [`SseError::NotUtf8`] when it is not UTF-8.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        while let Some((end, next)) = self.find_blank_line() {
            if end > Self::MAX_EVENT {
                return Err(SseError::TooLarge {
                    limit: Self::MAX_EVENT,
                });
            }
            let block: Vec<u8> = self.buffer.drain(..next).take(end).collect();
            self.scanned = 0;
            let text = std::str::from_utf8(&block).map_err(|_| SseError::NotUtf8)?;
            if let Some(event) = parse_block(text) {
                return Ok(Some(event));
            }
        }
        if self.buffer.len() > Self::MAX_EVENT {
            return Err(SseError::TooLarge {
                limit: Self::MAX_EVENT,
            });
        }
        Ok(None)
    }

    /// The stream ended: the event still open, if it has data, for callers that tolerate
    /// servers omitting the last blank line. Call it once [`Self::next_event`] has returned
    /// `None`.
    ///
    /// # Errors
    ///
    /// As [`Self::next_event`].
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        // The end of the stream ends the open line and the open event, as a blank line
        // would; after a lone `\r` the first `\n` completes its `\r\n`, the second is blank.
        self.push(b"\n\n");
        self.next_event()
    }

    /// Finds the first blank line: `(end of the block before it, start of what follows)`.
    fn find_blank_line(&mut self) -> Option<(usize, usize)> {
        let bytes = &self.buffer;
        let mut line_start = self.scanned;
        let mut i = line_start;
        while i < bytes.len() {
            let terminator = match bytes[i] {
                b'\n' => 1,
                b'\r' => match bytes.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A `\r` at the end of the buffer may be the first half of `\r\n`.
                    None => break,
                },
                _ => {
                    i += 1;
                    continue;
                }
            };
            if i == line_start {
                return Some((line_start, i + terminator));
            }
            i += terminator;
            line_start = i;
        }
        self.scanned = line_start;
        None
    }
}

/// The event of one block of lines (no blank line inside); `None` when it has no data.
fn parse_block(text: &str) -> Option<SseEvent> {
    let mut event = SseEvent::default();
    let mut has_data = false;
    // Splitting on both characters leaves an empty piece inside each `\r\n`: skipped, as
    // the block holds no blank line.
    for line in text.split(['\n', '\r']) {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event.event = Some(value.to_owned()).filter(|name| !name.is_empty()),
            // An id holding NULL is ignored, as the SSE specification says.
            "id" if !value.contains('\0') => event.id = Some(value.to_owned()),
            "data" => {
                if has_data {
                    event.data.push('\n');
                }
                event.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    has_data.then_some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
            id: None,
        }
    }

    /// Every event of `chunks`, fed one after the other; with `finish`, the open one too.
    fn decode_all(chunks: &[&[u8]], finish: bool) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(event) = decoder.next_event().unwrap() {
                events.push(event);
            }
        }
        if finish {
            events.extend(decoder.finish().unwrap());
        }
        events
    }

    #[test]
    fn splits_events_across_chunk_boundaries_and_line_endings() {
        let events = decode_all(
            &[
                b"data: {\"a\"",
                b":1}\n\n: keep-alive\n\nevent: error\r\nda",
                b"ta: x\r\ndata: y\r\n\r\n",
            ],
            false,
        );
        assert_eq!(
            events,
            vec![event(None, "{\"a\":1}"), event(Some("error"), "x\ny")]
        );
    }

    #[test]
    fn decodes_events_split_at_every_byte() {
        let wire =
            "event: ping\ndata: {}\n\n: comment\ndata: a\ndata:b\r\n\r\nevent: x\rdata: é\r\r";
        let chunks: Vec<&[u8]> = wire.as_bytes().chunks(1).collect();
        assert_eq!(
            decode_all(&chunks, true),
            [
                event(Some("ping"), "{}"),
                event(None, "a\nb"),
                event(Some("x"), "é")
            ]
        );
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let wire = b"id: 1\ndata: one\n\nretry: 5\ndata: two\n\n";
        let chunks: Vec<&[u8]> = wire.chunks(1).collect();
        let data: Vec<String> = decode_all(&chunks, false)
            .into_iter()
            .map(|e| e.data)
            .collect();
        assert_eq!(data, ["one", "two"]);
    }

    #[test]
    fn keeps_each_events_id() {
        let events = decode_all(
            &[b"id: 7\ndata: a\n\ndata: b\n\nid: 8\0\ndata: c\n\n"],
            false,
        );
        let ids: Vec<Option<&str>> = events.iter().map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, [Some("7"), None, None]);
    }

    #[test]
    fn waits_for_the_blank_line() {
        let mut decoder = SseDecoder::default();
        decoder.push(b"data: partial\n");
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.push(b"\n");
        assert_eq!(decoder.next_event().unwrap().unwrap().data, "partial");
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_the_last_one_is_flushed() {
        let mut decoder = SseDecoder::default();
        decoder.push(b"event: only\n\ndata: [DONE]");
        assert_eq!(decoder.next_event(), Ok(None));
        assert_eq!(decoder.finish().unwrap(), Some(event(None, "[DONE]")));
        assert_eq!(decoder.finish().unwrap(), None);
    }

    #[test]
    fn unknown_fields_lines_without_a_colon_and_empty_names_are_ignored() {
        let events = decode_all(
            &[b"ping\nfoo: bar\nevent: a\nevent:\ndata\ndata: x\n\n"],
            false,
        );
        assert_eq!(events, [event(None, "\nx")]);
    }

    #[test]
    fn rejects_invalid_utf8() {
        let mut decoder = SseDecoder::default();
        decoder.push(b"data: \xff\n\n");
        assert_eq!(decoder.next_event(), Err(SseError::NotUtf8));
    }

    #[test]
    fn an_event_over_the_limit_is_refused_however_it_arrives() {
        let too_long = format!("data: {}", "a".repeat(SseDecoder::MAX_EVENT));
        let too_large = Err(SseError::TooLarge {
            limit: SseDecoder::MAX_EVENT,
        });
        // Its end not yet arrived.
        let mut decoder = SseDecoder::default();
        decoder.push(too_long.as_bytes());
        assert_eq!(decoder.next_event(), too_large);
        // Complete, in one chunk.
        let mut decoder = SseDecoder::default();
        decoder.push(format!("{too_long}\n\n").as_bytes());
        assert_eq!(decoder.next_event(), too_large);
        // Left open at the end of the stream.
        let mut decoder = SseDecoder::default();
        decoder.push(&too_long.as_bytes()[..SseDecoder::MAX_EVENT]);
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.push(&too_long.as_bytes()[SseDecoder::MAX_EVENT..]);
        assert_eq!(decoder.finish(), too_large);
    }

    #[test]
    fn the_limit_is_per_event() {
        // Events (and comment blocks) that together outgrow the limit are each within it.
        let block = format!(": {}\n\ndata: {}\n\n", "c".repeat(1000), "d".repeat(1000));
        let mut decoder = SseDecoder::default();
        let mut count = 0;
        while count * block.len() <= SseDecoder::MAX_EVENT {
            decoder.push(block.as_bytes());
            assert_eq!(decoder.next_event().unwrap().unwrap().data.len(), 1000);
            assert_eq!(decoder.next_event(), Ok(None));
            count += 1;
        }
    }
}
