//! A minimal server-sent-events reader (the subset of the WHATWG event-stream format a server sends): `event:`,
//! `data:` (joined with newlines), `id:` and comment lines, events ended by a blank line, `\n`, `\r\n` or `\r`
//! line ends, split across chunks anywhere. Public for other clients of `/ldp/stream` (the conformance kit reads
//! the stream with it).
//!
//! ```
//! use ldp_transport_http::sse::{SseEvent, SseParser};
//!
//! let mut parser = SseParser::default();
//! assert!(parser.push(b"event: envelope\ndata: {\"a\":")?.is_empty());
//! let events = parser.push(b"1}\n\n")?;
//! assert_eq!(events, vec![SseEvent { event: "envelope".into(), data: "{\"a\":1}".into() }]);
//! # Ok::<(), ldp_transport_http::sse::SseError>(())
//! ```
//!
//! The server is a peer: an event (its data, event name and the line being read) larger than the parser's limit
//! ([`DEFAULT_MAX_EVENT_BYTES`] unless [`SseParser::with_max_event_bytes`] says otherwise) is an [`SseError`], so a
//! stream that never ends an event cannot grow the reader's memory.

/// The default bound on one event's size: the bytes of its pending line, name and data together.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// What a server did wrong in its event stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// An event grew beyond the parser's limit before it ended; the stream cannot be read further.
    #[error("server-sent event larger than {limit} bytes")]
    EventTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The event type (`message` when the server named none).
    pub event: String,
    /// The data lines, joined with `\n`.
    pub data: String,
}

/// An incremental parser: feed chunks, collect complete events.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    last_was_cr: bool,
    max_event_bytes: usize,
    failed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser that refuses events larger than `limit` bytes.
    pub fn with_max_event_bytes(limit: usize) -> Self {
        Self { line: Vec::new(), event: None, data: None, last_was_cr: false, max_event_bytes: limit, failed: false }
    }

    /// Feeds one chunk and returns the events it completed. After an error every later call fails too: the
    /// stream's framing is lost.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let too_large = SseError::EventTooLarge { limit: self.max_event_bytes };
        if self.failed {
            return Err(too_large);
        }
        let mut out = Vec::new();
        for &b in chunk {
            match b {
                b'\n' if self.last_was_cr => self.last_was_cr = false,
                b'\n' | b'\r' => {
                    self.last_was_cr = b == b'\r';
                    self.end_line(&mut out);
                }
                _ => {
                    self.last_was_cr = false;
                    self.line.push(b);
                }
            }
            if self.pending_bytes() > self.max_event_bytes {
                // Drop what was held: the limit exists to bound memory.
                *self = Self { failed: true, ..Self::with_max_event_bytes(self.max_event_bytes) };
                return Err(too_large);
            }
        }
        Ok(out)
    }

    /// Bytes held for the event being read.
    fn pending_bytes(&self) -> usize {
        self.line.len() + self.event.as_ref().map_or(0, String::len) + self.data.as_ref().map_or(0, String::len)
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent { event: self.event.take().unwrap_or_else(|| "message".to_owned()), data });
            }
            self.event = None;
            return;
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Writes `events` as a server would, with `ends` choosing each line end.
    fn write(events: &[SseEvent], ends: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut end = ends.iter().cycle();
        let mut line = |out: &mut Vec<u8>, text: &str| {
            // After a bare `\r`, an empty line ended by `\n` would read as one `\r\n`: no server can mean that.
            let after_cr = out.last() == Some(&b'\r') && text.is_empty();
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(match end.next().copied().unwrap_or(0) % 3 {
                0 if after_cr => b"\r\n".as_slice(),
                0 => b"\n",
                1 => b"\r\n",
                _ => b"\r",
            });
        };
        for e in events {
            line(&mut out, ": comment");
            if e.event != "message" {
                line(&mut out, &format!("event: {}", e.event));
            }
            for d in e.data.split('\n') {
                line(&mut out, &format!("data: {d}"));
            }
            line(&mut out, "");
        }
        out
    }

    proptest! {
        #[test]
        fn any_events_split_anywhere_read_back_equal(
            events in proptest::collection::vec(
                ("[a-z]{1,8}", "[^\r\n]{0,12}(\n[^\r\n]{0,12}){0,3}")
                    .prop_map(|(event, data)| SseEvent { event, data }),
                0..6,
            ),
            ends in proptest::collection::vec(any::<u8>(), 1..8),
            splits in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let bytes = write(&events, &ends);
            let mut cuts: Vec<usize> = splits.iter().map(|s| s % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut parser = SseParser::default();
            let mut read = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                read.extend(parser.push(&bytes[from..cut]).unwrap());
                from = cut;
            }
            prop_assert_eq!(read, events);
        }
    }

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let text = b": keep-alive\n\nevent: envelope\nid: 1\ndata: {\"a\":\ndata: 1}\n\r\ndata: x\r\rdata:y\n\n";
        for split in 0..text.len() {
            let mut p = SseParser::default();
            let mut events = p.push(&text[..split]).unwrap();
            events.extend(p.push(&text[split..]).unwrap());
            assert_eq!(
                events,
                vec![
                    SseEvent { event: "envelope".into(), data: "{\"a\":\n1}".into() },
                    SseEvent { event: "message".into(), data: "x".into() },
                    SseEvent { event: "message".into(), data: "y".into() },
                ],
                "split at {split}"
            );
        }
    }

    /// A malicious server: one event that never ends, fed in small chunks, is refused at the limit (not held in
    /// memory without bound), and the parser stays failed.
    #[test]
    fn an_event_that_never_ends_is_refused_at_the_limit() {
        let mut p = SseParser::with_max_event_bytes(1024);
        assert_eq!(p.push(b"event: envelope\ndata: ").unwrap(), vec![]);
        let mut fed = 0;
        let err = loop {
            match p.push(&[b'x'; 100]) {
                Ok(events) => {
                    assert!(events.is_empty());
                    fed += 100;
                    assert!(fed <= 1024, "more than the limit was accepted");
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err, SseError::EventTooLarge { limit: 1024 });
        assert!(p.pending_bytes() == 0, "the held bytes are released");
        assert!(p.push(b"\n\n").is_err(), "a failed stream stays failed");
        // Many data lines of one event count together, and a long line without an end counts too.
        let mut p = SseParser::with_max_event_bytes(64);
        assert!(p.push(&b"data: 0123456789\n".repeat(8)).is_err());
        let mut p = SseParser::with_max_event_bytes(64);
        assert!(p.push(&[b':'; 65]).is_err());
        // Events within the limit still pass.
        let mut p = SseParser::with_max_event_bytes(64);
        assert_eq!(p.push(b"data: ok\n\n").unwrap().len(), 1);
    }
}
