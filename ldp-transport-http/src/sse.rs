//! A minimal server-sent-events reader (the subset of the WHATWG event-stream format a server sends): `event:`,
//! `data:` (joined with newlines), `id:` and comment lines, events ended by a blank line, `\n`, `\r\n` or `\r`
//! line ends, split across chunks anywhere.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The event type (`message` when the server named none).
    pub event: String,
    /// The data lines, joined with `\n`.
    pub data: String,
}

/// An incremental parser: feed chunks, collect complete events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    last_was_cr: bool,
}

impl SseParser {
    /// Feeds one chunk and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
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
        }
        out
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
    use super::*;

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let text = b": keep-alive\n\nevent: envelope\nid: 1\ndata: {\"a\":\ndata: 1}\n\r\ndata: x\r\rdata:y\n\n";
        for split in 0..text.len() {
            let mut p = SseParser::default();
            let mut events = p.push(&text[..split]);
            events.extend(p.push(&text[split..]));
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
}
