//! Reading a stream of messages in memory bounded by the largest message, and checking their sequence numbers.
//!
//! [`MessageReader`] cuts its input at each top-level `HEADER` (outside any string or bracket, where the parser would
//! start a new message) and parses one message at a time, so that a file of any length is read with one message in
//! memory. Errors carry positions in the whole input, as [`Parser::parse_all`] gives them.

use std::collections::HashMap;
use std::io::Read;

use crate::error::{LlmxError, ParseErrorKind, Position};
use crate::message::{Header, Message, Res};
use crate::parser::Parser;

/// The default [`Parser::max_message_bytes`]: far above any message an agent writes, far below a machine's memory.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How much is read from the input at a time.
const READ_CHUNK: usize = 64 * 1024;

/// An iterator over the messages of a byte stream; see the module documentation.
///
/// After the first error the iterator ends. A message (from its HEADER to the next top-level HEADER) longer than
/// [`Parser::max_message_bytes`] is refused with [`ParseErrorKind::MessageTooLarge`] before it is held whole.
///
/// ```
/// let text = "HEADER:{f:A,t:B,s:1}\nREQ:{o:\"x\",pr:1}\nHEADER:{f:B,t:A,s:2}\nRES:{o:\"ACK\"}\n";
/// let messages: Vec<_> = ldp_llmx::Parser::new().reader(text.as_bytes()).collect::<Result<_, _>>()?;
/// assert_eq!(messages.len(), 2);
/// # Ok::<(), ldp_llmx::LlmxError>(())
/// ```
#[derive(Debug)]
pub struct MessageReader<R> {
    input: R,
    parser: Parser,
    /// Bytes read; `buf[start..]` is not yet parsed, and a message starts at `start` (or whitespace before the first).
    buf: Vec<u8>,
    start: usize,
    /// Where reads land before they join `buf`.
    read_buf: Vec<u8>,
    /// How far `buf` has been scanned for a boundary.
    scanned: usize,
    scan: Scan,
    /// Where `buf[start]` is in the whole input.
    line: u32,
    column: u32,
    eof: bool,
    /// At the very start of the input, where a byte-order mark is dropped.
    at_start: bool,
    done: bool,
    /// Messages parsed and not yet returned (a chunk normally holds one).
    pending: std::vec::IntoIter<Message>,
}

/// The lexical state the boundary scan keeps across reads.
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Parser {
    /// Reads messages from `input` one at a time (see [`MessageReader`]).
    pub fn reader<R: Read>(self, input: R) -> MessageReader<R> {
        MessageReader {
            input,
            parser: self,
            buf: Vec::new(),
            start: 0,
            read_buf: Vec::new(),
            scanned: 0,
            scan: Scan::default(),
            line: 1,
            column: 1,
            eof: false,
            at_start: true,
            done: false,
            pending: Vec::new().into_iter(),
        }
    }
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<R: Read> MessageReader<R> {
    /// Scans `buf` from `scanned` for the start of the next top-level HEADER after the one at the front; returns its
    /// offset.
    fn find_boundary(&mut self) -> Option<usize> {
        let b = &self.buf;
        while self.scanned < b.len() {
            let i = self.scanned;
            let c = b[i];
            let s = &mut self.scan;
            if s.in_string {
                if s.escaped {
                    s.escaped = false;
                } else if c == b'\\' {
                    s.escaped = true;
                } else if c == b'"' {
                    s.in_string = false;
                }
            } else {
                match c {
                    b'"' => s.in_string = true,
                    b'{' | b'[' | b'(' => s.depth += 1,
                    b'}' | b']' | b')' => s.depth = s.depth.saturating_sub(1),
                    b'H' if s.depth == 0 && (i == 0 || !is_key_char(b[i - 1])) => {
                        // "HEADER" and the byte after it decide; wait for them unless the input has ended.
                        if b.len() < i + 7 && !self.eof {
                            return None;
                        }
                        let is_header =
                            b[i..].starts_with(b"HEADER") && !b.get(i + 6).copied().is_some_and(is_key_char);
                        if is_header && b[self.start..i].iter().any(|c| !c.is_ascii_whitespace()) {
                            return Some(i);
                        }
                    }
                    _ => {}
                }
            }
            self.scanned += 1;
        }
        None
    }

    /// Reads more input; false at the end.
    fn fill(&mut self) -> Result<bool, LlmxError> {
        // What was parsed goes now, once per read rather than once per message.
        self.buf.drain(..self.start);
        self.scanned -= self.start;
        self.start = 0;
        if self.read_buf.is_empty() {
            self.read_buf = vec![0; READ_CHUNK];
        }
        let n = loop {
            match self.input.read(&mut self.read_buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LlmxError::Read { kind: e.kind(), message: e.to_string() }),
            }
        };
        self.buf.extend_from_slice(&self.read_buf[..n]);
        if self.at_start && self.buf.len() >= 3 {
            if self.buf.starts_with("\u{feff}".as_bytes()) {
                self.buf.drain(..3);
                self.scanned = 0;
            }
            self.at_start = false;
        }
        Ok(n > 0)
    }

    /// The next chunk, as a range of `buf`: one message and the whitespace after it (or, at the start, whitespace and
    /// junk before it).
    fn next_chunk(&mut self) -> Result<Option<std::ops::Range<usize>>, LlmxError> {
        loop {
            if let Some(at) = self.find_boundary() {
                // The boundary is outside strings and brackets, so the scan goes on from a clean state.
                self.scan = Scan::default();
                let chunk = self.start..at;
                self.start = at;
                return Ok(Some(chunk));
            }
            if self.eof {
                if self.start == self.buf.len() {
                    return Ok(None);
                }
                let chunk = self.start..self.buf.len();
                self.start = self.buf.len();
                self.scanned = self.start;
                return Ok(Some(chunk));
            }
            let limit = self.parser.message_limit();
            if self.buf.len() - self.start > limit {
                let kind = ParseErrorKind::MessageTooLarge { limit };
                return Err(LlmxError::Parse { position: Position { line: self.line, column: self.column }, kind });
            }
            if !self.fill()? {
                self.eof = true;
                // A BOM-only or shorter input never reached the check in `fill`.
                if self.at_start && self.buf.starts_with("\u{feff}".as_bytes()) {
                    self.buf.drain(..3);
                    self.scanned = 0;
                }
                self.at_start = false;
            }
        }
    }

    /// Moves a position within a chunk to the whole input.
    fn relocate(&self, e: LlmxError) -> LlmxError {
        match e {
            LlmxError::Parse { position, kind } => {
                let position = if position.line == 1 {
                    Position { line: self.line, column: position.column.saturating_add(self.column - 1) }
                } else {
                    Position { line: position.line.saturating_add(self.line - 1), column: position.column }
                };
                LlmxError::Parse { position, kind }
            }
            other => other,
        }
    }

    fn step(&mut self) -> Result<Option<Message>, LlmxError> {
        loop {
            if let Some(m) = self.pending.next() {
                return Ok(Some(m));
            }
            let Some(range) = self.next_chunk()? else {
                return Ok(None);
            };
            let chunk = &self.buf[range];
            let parsed = self.parser.parse_bytes(chunk).map_err(|e| self.relocate(e));
            let (line, column) = advance(self.line, self.column, chunk);
            (self.line, self.column) = (line, column);
            // A chunk holds one message, or none when it is only the whitespace before the first.
            self.pending = parsed?.into_iter();
        }
    }
}

/// The position just past `chunk`, which starts at `line`:`column`.
fn advance(line: u32, column: u32, chunk: &[u8]) -> (u32, u32) {
    let newlines = chunk.iter().filter(|&&b| b == b'\n').count();
    let tail = chunk.iter().rposition(|&b| b == b'\n').map_or(chunk, |i| &chunk[i + 1..]);
    // Columns count characters: every byte that does not continue a UTF-8 sequence.
    let chars = u32::try_from(tail.iter().filter(|&&b| b & 0xC0 != 0x80).count()).unwrap_or(u32::MAX);
    if newlines == 0 {
        (line, column.saturating_add(chars))
    } else {
        (line.saturating_add(u32::try_from(newlines).unwrap_or(u32::MAX)), chars.saturating_add(1))
    }
}

impl<R: Read> Iterator for MessageReader<R> {
    type Item = Result<Message, LlmxError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(m)) => Some(Ok(m)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The most senders a [`SequenceTracker`] remembers; past it, new senders are not tracked (their order is not
/// checked), so that a hostile stream of distinct senders cannot grow it without bound.
pub const MAX_TRACKED_SENDERS: usize = 4096;

/// Checks the HEADER `s` of a stream of messages: section 3.1 describes it as "Sequence number (monotonic)".
///
/// The spec states no MUST and no error answer, so a sequence number that does not increase is reported as a warning
/// (a section 7.3 style `RES:{o:"WARN",...}`), not refused. The order is tracked per sender (`f`): each agent counts
/// its own messages.
///
/// ```
/// use ldp_llmx::{SequenceTracker, parse};
/// let mut seq = SequenceTracker::new();
/// assert!(seq.observe(&parse("HEADER:{f:A,t:B,s:2}")?.header).is_none());
/// let warn = seq.observe(&parse("HEADER:{f:A,t:B,s:1}")?.header).unwrap();
/// assert_eq!(warn.option, "WARN");
/// # Ok::<(), ldp_llmx::LlmxError>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct SequenceTracker {
    last: HashMap<String, u64>,
}

impl SequenceTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        SequenceTracker::default()
    }

    /// Records `header`; returns a warning when its `s` is not above the previous `s` of the same sender.
    pub fn observe(&mut self, header: &Header) -> Option<Res> {
        match self.last.get_mut(&header.from) {
            Some(prev) => {
                let previous = *prev;
                *prev = previous.max(header.seq);
                (header.seq <= previous).then(|| Res::warn_sequence(&header.from, header.seq, previous))
            }
            None => {
                if self.last.len() < MAX_TRACKED_SENDERS {
                    self.last.insert(header.from.clone(), header.seq);
                }
                None
            }
        }
    }
}

/// The warnings [`SequenceTracker`] gives for `messages` in order.
pub fn sequence_warnings(messages: &[Message]) -> Vec<Res> {
    let mut t = SequenceTracker::new();
    messages.iter().filter_map(|m| t.observe(&m.header)).collect()
}
