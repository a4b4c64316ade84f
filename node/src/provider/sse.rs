//! An incremental decoder of server-sent events (the `text/event-stream` wire form both model APIs stream in).

/// One dispatched event: its `event:` name (if any) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event:` field; `None` for the default event type (`message`).
    pub(crate) event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
}

/// The stream is not UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event stream is not valid UTF-8")]
pub(crate) struct NotUtf8;

/// Decodes an event stream fed in arbitrary byte chunks (a line or a UTF-8 character may be
/// split across chunks).
///
/// Follows the WHATWG rules: lines end in `\n`, `\r\n` or `\r`; a blank line dispatches the
/// event; `:` lines are comments; one space after the colon is dropped; `id` and `retry` are
/// ignored (model APIs do not resume streams). An event still open when the stream ends is
/// dispatched by [`SseDecoder::finish`] rather than dropped, to tolerate servers that omit
/// the last blank line.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buffer: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
}

impl SseDecoder {
    /// Takes the next chunk of bytes; returns the events it completes, in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, NotUtf8> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        let mut index = 0;
        while index < self.buffer.len() {
            let end = match self.buffer[index] {
                b'\n' => index + 1,
                b'\r' => match self.buffer.get(index + 1) {
                    Some(b'\n') => index + 2,
                    Some(_) => index + 1,
                    // A `\r` at the end of the buffer may be the first half of `\r\n`.
                    None => break,
                },
                _ => {
                    index += 1;
                    continue;
                }
            };
            let line = std::str::from_utf8(&self.buffer[start..index]).map_err(|_| NotUtf8)?;
            let line = line.to_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = end;
            index = end;
        }
        self.buffer.drain(..start);
        Ok(events)
    }

    /// The stream ended: returns the event still being read, if it has data.
    pub(crate) fn finish(&mut self) -> Result<Option<SseEvent>, NotUtf8> {
        let rest = std::mem::take(&mut self.buffer);
        let mut event = None;
        if !rest.is_empty() {
            let text = std::str::from_utf8(&rest).map_err(|_| NotUtf8)?;
            let text = text.trim_end_matches(['\r', '\n']).to_owned();
            event = self.line(&text);
        }
        Ok(event.or_else(|| self.dispatch()))
    }

    /// Handles one line (without its ending); a blank line dispatches.
    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push(value.to_owned());
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let data = std::mem::take(&mut self.data);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent {
            event: event.filter(|name| !name.is_empty()),
            data: data.join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn decodes_events_split_at_every_byte() {
        let wire =
            "event: ping\ndata: {}\n\n: comment\ndata: a\ndata:b\r\n\r\nevent: x\rdata: é\r\r";
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for byte in wire.as_bytes() {
            events.extend(decoder.push(std::slice::from_ref(byte)).unwrap());
        }
        events.extend(decoder.finish().unwrap());
        assert_eq!(
            events,
            [
                event(Some("ping"), "{}"),
                event(None, "a\nb"),
                event(Some("x"), "é")
            ]
        );
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_the_last_one_is_flushed() {
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"event: only\n\ndata: [DONE]").unwrap(), []);
        assert_eq!(decoder.finish().unwrap(), Some(event(None, "[DONE]")));
        assert_eq!(decoder.finish().unwrap(), None);
    }

    #[test]
    fn rejects_invalid_utf8() {
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"data: \xff\n"), Err(NotUtf8));
    }
}
