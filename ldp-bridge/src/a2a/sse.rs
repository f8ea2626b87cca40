//! A bounded reader of a server-sent event stream (the `data` of each event; comments, ids and retries ignored).

/// Why an event stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event (or one line) was larger than allowed.
    #[error("an event is over {0} bytes")]
    EventTooLarge(usize),
}

/// Splits a byte stream into event data, holding at most `max_event` bytes of one unfinished event.
#[derive(Debug)]
pub struct SseReader {
    buf: Vec<u8>,
    data: Vec<String>,
    data_len: usize,
    max_event: usize,
}

impl SseReader {
    /// A reader of events of at most `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        Self { buf: Vec::new(), data: Vec::new(), data_len: 0, max_event }
    }

    /// Feeds `chunk` and returns the data of every event it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<String>, SseError> {
        self.buf.extend_from_slice(chunk);
        let mut done = Vec::new();
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    done.push(self.data.join("\n"));
                    self.data.clear();
                    self.data_len = 0;
                }
                continue;
            }
            if let Some(value) = line.strip_prefix("data:") {
                let value = value.strip_prefix(' ').unwrap_or(value);
                self.data_len += value.len() + 1;
                if self.data_len > self.max_event {
                    return Err(SseError::EventTooLarge(self.max_event));
                }
                self.data.push(value.to_owned());
            }
        }
        if self.buf.len() > self.max_event {
            return Err(SseError::EventTooLarge(self.max_event));
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks() {
        let mut reader = SseReader::new(64);
        assert_eq!(reader.feed(b": ping\r\n\r\ndata: {\"a\"").unwrap(), Vec::<String>::new());
        assert_eq!(reader.feed(b":1}\r\n\r\ndata: x\ndata: y\n\nevent: e\n").unwrap(), ["{\"a\":1}", "x\ny"]);
        assert_eq!(SseReader::new(8).feed(b"data: 0123456789\n"), Err(SseError::EventTooLarge(8)));
        assert_eq!(SseReader::new(8).feed(b"data: 0123456789"), Err(SseError::EventTooLarge(8)));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_in_any_chunks_stay_within_the_bound(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..16)
        ) {
            let mut reader = SseReader::new(32);
            for chunk in chunks {
                match reader.feed(&chunk) {
                    Ok(events) => proptest::prop_assert!(events.iter().all(|e| e.len() <= 32)),
                    Err(SseError::EventTooLarge(n)) => {
                        proptest::prop_assert_eq!(n, 32);
                        break;
                    }
                }
                proptest::prop_assert!(reader.buf.len() <= 32 && reader.data_len <= 32);
            }
        }
    }
}
