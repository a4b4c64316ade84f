//! A small Server-Sent Events decoder: bytes in, `event`/`data` frames out.

/// One SSE event.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty means `message`.
    pub(crate) event: String,
    /// The `data:` lines joined by `\n`.
    pub(crate) data: String,
}

/// Splits a byte stream into events. Comments, `id:` and `retry:` are ignored.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buffer: Vec<u8>,
    scanned: usize,
}

/// Why the stream cannot be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SseError {
    /// An event grew past the size limit.
    TooLarge(usize),
    /// An event is not UTF-8.
    NotUtf8,
}

impl SseDecoder {
    /// Largest event accepted, in bytes.
    pub(crate) const MAX_EVENT: usize = 16 * 1024 * 1024;

    /// Adds bytes from the wire.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete event, if one has arrived.
    pub(crate) fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            let Some((end, next)) = self.find_blank_line() else {
                if self.buffer.len() > Self::MAX_EVENT {
                    return Err(SseError::TooLarge(Self::MAX_EVENT));
                }
                return Ok(None);
            };
            let block: Vec<u8> = self.buffer.drain(..next).take(end).collect();
            self.scanned = 0;
            let text = std::str::from_utf8(&block).map_err(|_| SseError::NotUtf8)?;
            if let Some(event) = parse_block(text) {
                return Ok(Some(event));
            }
        }
    }

    /// Finds the first blank line: `(end of the block before it, start of what follows)`.
    ///
    /// Resumes where the previous call stopped, at the start of the last incomplete line.
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
                    None => break, // may be the first half of \r\n
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

fn parse_block(text: &str) -> Option<SseEvent> {
    let mut event = SseEvent::default();
    let mut has_data = false;
    for line in text.split(['\n', '\r']) {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event.event = value.to_owned(),
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

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(event) = decoder.next_event().unwrap() {
                events.push(event);
            }
        }
        events
    }

    #[test]
    fn splits_events_across_chunk_boundaries_and_line_endings() {
        let events = decode_all(&[
            b"data: {\"a\"",
            b":1}\n\n: keep-alive\n\nevent: error\r\nda",
            b"ta: x\r\ndata: y\r\n\r\n",
        ]);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: String::new(),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: "error".into(),
                    data: "x\ny".into()
                },
            ]
        );
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
    fn byte_by_byte_gives_the_same_events() {
        let wire = b"id: 1\ndata: one\n\nretry: 5\ndata: two\n\n";
        let chunks: Vec<&[u8]> = wire.chunks(1).collect();
        let data: Vec<String> = decode_all(&chunks).into_iter().map(|e| e.data).collect();
        assert_eq!(data, ["one", "two"]);
    }
}
