//! The hand-written LLMX parser: text to [`Message`]s.
//!
//! One pass over the bytes, no backtracking, recursion bounded by [`Parser::max_depth`] so that hostile input ends in a
//! typed error instead of a stack overflow. Line and column are computed only when an error is reported, which keeps
//! the hot path to byte comparisons.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::{LlmxError, ParseErrorKind, Position};
use crate::message::{self, Message};
use crate::value::{Number, Object, Value};

/// The nesting limit [`parse`] uses (same as `serde_json`'s default recursion limit).
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// Parses exactly one LLMX message (a HEADER and its blocks) with the default limits.
///
/// ```
/// let m = ldp_llmx::parse("HEADER:{f:Claude,t:Gemini,s:1}\nRES:{o:ACK}")?;
/// assert_eq!(m.header.from, "Claude");
/// # Ok::<(), ldp_llmx::LlmxError>(())
/// ```
pub fn parse(text: &str) -> Result<Message, LlmxError> {
    Parser::new().parse(text)
}

/// Parses a sequence of LLMX messages, each starting at its HEADER, with the default limits.
pub fn parse_all(text: &str) -> Result<Vec<Message>, LlmxError> {
    Parser::new().parse_all(text)
}

/// A configured parser.
#[derive(Debug, Clone, Copy)]
pub struct Parser {
    max_depth: usize,
    max_message_bytes: usize,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new()
    }
}

impl Parser {
    /// A parser with [`DEFAULT_MAX_DEPTH`] and [`crate::DEFAULT_MAX_MESSAGE_BYTES`].
    pub fn new() -> Self {
        Parser { max_depth: DEFAULT_MAX_DEPTH, max_message_bytes: crate::stream::DEFAULT_MAX_MESSAGE_BYTES }
    }

    /// Sets the longest message, in bytes, that [`Parser::reader`] holds before refusing it with
    /// [`ParseErrorKind::MessageTooLarge`] (default [`crate::DEFAULT_MAX_MESSAGE_BYTES`]).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    pub(crate) fn message_limit(&self) -> usize {
        self.max_message_bytes
    }

    /// Sets the deepest nesting of objects, arrays and tuples accepted (a block body counts as one level).
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }

    /// Parses exactly one message.
    pub fn parse(&self, text: &str) -> Result<Message, LlmxError> {
        let text = strip_bom(text);
        let mut c = Cursor::new(text, self.max_depth);
        let mut run = || -> Result<Message, PErr> {
            c.ws();
            let m = c.message()?;
            c.ws();
            if c.at_eof() { Ok(m) } else { Err(PErr::new(c.i, ParseErrorKind::ExtraHeader)) }
        };
        run().map_err(|e| e.locate(text))
    }

    /// Parses zero or more messages, each starting at its HEADER.
    pub fn parse_all(&self, text: &str) -> Result<Vec<Message>, LlmxError> {
        let text = strip_bom(text);
        let mut c = Cursor::new(text, self.max_depth);
        let mut out = Vec::new();
        let mut run = || -> Result<(), PErr> {
            c.ws();
            while !c.at_eof() {
                out.push(c.message()?);
                c.ws();
            }
            Ok(())
        };
        run().map_err(|e| e.locate(text))?;
        Ok(out)
    }

    /// Like [`Parser::parse_all`] on raw bytes; invalid UTF-8 is reported at its position.
    pub fn parse_bytes(&self, bytes: &[u8]) -> Result<Vec<Message>, LlmxError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.parse_all(text),
            Err(e) => {
                let valid = &bytes[..e.valid_up_to()];
                // The prefix up to valid_up_to is UTF-8 by definition, so this cannot fail; fall back to 1:1 anyway.
                let position = std::str::from_utf8(valid)
                    .map(|t| Position::of_offset(t, t.len()))
                    .unwrap_or(Position { line: 1, column: 1 });
                Err(LlmxError::Parse { position, kind: ParseErrorKind::InvalidUtf8 })
            }
        }
    }
}

/// Drops a UTF-8 byte-order mark, which some editors write and which is invisible in the text (positions are
/// counted without it).
fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// An error at a byte offset; turned into line:column only once, at the top.
#[derive(Debug)]
pub(crate) struct PErr {
    offset: usize,
    // Boxed so that the parser's many `Result`s stay as small as the values they carry.
    kind: Box<ParseErrorKind>,
}

impl PErr {
    pub(crate) fn new(offset: usize, kind: ParseErrorKind) -> Self {
        PErr { offset, kind: Box::new(kind) }
    }

    fn locate(self, text: &str) -> LlmxError {
        LlmxError::Parse { position: Position::of_offset(text, self.offset), kind: *self.kind }
    }
}

/// A top-level field of a block body, with where its value starts (for error positions).
pub(crate) struct RawField<'a> {
    pub(crate) key: Cow<'a, str>,
    pub(crate) value: Value,
    pub(crate) offset: usize,
    /// Set once the typed reader has consumed the field.
    pub(crate) taken: bool,
}

impl<'a> RawField<'a> {
    pub(crate) fn new(key: Cow<'a, str>, value: Value, offset: usize) -> Self {
        RawField { key, value, offset, taken: false }
    }
}

/// Something `pairs` can collect: a block's top-level field, or an entry of a generic object.
trait Pair<'a> {
    fn make(key: Cow<'a, str>, value: Value, offset: usize) -> Self;
    fn key(&self) -> &str;
}

impl<'a> Pair<'a> for RawField<'a> {
    fn make(key: Cow<'a, str>, value: Value, offset: usize) -> Self {
        RawField::new(key, value, offset)
    }
    fn key(&self) -> &str {
        &self.key
    }
}

impl<'a> Pair<'a> for (String, Value) {
    fn make(key: Cow<'a, str>, value: Value, _: usize) -> Self {
        (key.into_owned(), value)
    }
    fn key(&self) -> &str {
        &self.0
    }
}

/// A block body before typing.
pub(crate) enum RawBody {
    /// The fields are in the vector handed to [`Cursor::block`], reused from block to block to save allocations.
    Object,
    /// PLAN steps: each a range of that vector, and where the step starts.
    Steps(Vec<(std::ops::Range<usize>, usize)>),
    Array(Vec<(Value, usize)>),
}

/// A block before typing.
pub(crate) struct RawBlock<'a> {
    pub(crate) name: &'a str,
    pub(crate) offset: usize,
    pub(crate) body: RawBody,
}

// Byte classes, looked up in one table: the scanning loops are the parser's hot path.
const KEY_START: u8 = 1;
const KEY: u8 = 2;
/// Bare identifier values may also hold `-` and `.` (`f:gpt-4o`, `p:my.app`), which no other value can start with.
const IDENT: u8 = 4;
/// Bytes that end the plain run of a quoted string: `"`, `\` and control characters.
const STR_STOP: u8 = 8;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut c = 0;
        if b.is_ascii_alphabetic() || b == b'_' {
            c |= KEY_START | KEY | IDENT;
        }
        if b.is_ascii_digit() {
            c |= KEY | IDENT;
        }
        if b == b'-' || b == b'.' {
            c |= IDENT;
        }
        if b == b'"' || b == b'\\' || b < 0x20 {
            c |= STR_STOP;
        }
        t[i] = c;
        i += 1;
    }
    t
};

fn class(b: u8, c: u8) -> bool {
    CLASS[usize::from(b)] & c != 0
}

fn is_key_start(b: u8) -> bool {
    class(b, KEY_START)
}

fn is_key_char(b: u8) -> bool {
    class(b, KEY)
}

fn is_ident_char(b: u8) -> bool {
    class(b, IDENT)
}

struct Cursor<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    depth: usize,
    max_depth: usize,
    scratch: Vec<RawField<'a>>,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str, max_depth: usize) -> Self {
        Cursor { text, b: text.as_bytes(), i: 0, depth: 0, max_depth, scratch: Vec::new() }
    }

    fn at_eof(&self) -> bool {
        self.i >= self.b.len()
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// A short quote of what is at the cursor, for "found ..." in messages.
    fn found(&self) -> String {
        let rest = &self.text[self.i.min(self.text.len())..];
        let Some(first) = rest.chars().next() else {
            return "end of input".to_owned();
        };
        let len = if first.is_ascii() && is_ident_char(first as u8) {
            rest.bytes().take(24).take_while(|&b| is_ident_char(b)).count()
        } else {
            first.len_utf8()
        };
        format!("{:?}", &rest[..len])
    }

    /// After an item of a `[...]` list: `,` (true: another item follows) or `]` (false: the list ended).
    fn list_continues(&mut self) -> Result<bool, PErr> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(b']') => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(self.unexpected("',' or ']'")),
        }
    }

    /// Runs `inner` one nesting level deeper, past the opening bracket at the cursor.
    #[inline]
    fn nested<T>(&mut self, inner: impl FnOnce(&mut Self) -> Result<T, PErr>) -> Result<T, PErr> {
        self.enter()?;
        self.i += 1;
        let value = inner(self)?;
        self.depth -= 1;
        Ok(value)
    }

    /// A list's items up to and past its `]` (the `[` already consumed), each read by `item` from its offset.
    #[inline]
    fn list_items(&mut self, mut item: impl FnMut(&mut Self, usize) -> Result<(), PErr>) -> Result<(), PErr> {
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let at = self.i;
            item(self, at)?;
            if !self.list_continues()? {
                return Ok(());
            }
        }
    }

    /// The pairs of an object or a tuple, up to and past `close`.
    fn object(&mut self, close: u8, sep_expected: &'static str) -> Result<Object, PErr> {
        let mut pairs = Vec::new();
        self.pairs(close, sep_expected, &mut pairs)?;
        Ok(Object::from_unique(pairs))
    }

    fn unexpected(&self, expected: &'static str) -> PErr {
        PErr::new(self.i, ParseErrorKind::Unexpected { expected, found: self.found() })
    }

    fn expect(&mut self, byte: u8, expected: &'static str) -> Result<(), PErr> {
        if self.peek() == Some(byte) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn enter(&mut self) -> Result<(), PErr> {
        if self.depth >= self.max_depth {
            return Err(PErr::new(self.i, ParseErrorKind::TooDeep { limit: self.max_depth }));
        }
        self.depth += 1;
        Ok(())
    }

    fn word(&mut self, class_bits: u8) -> &'a str {
        let start = self.i;
        let n = self.b[start..].iter().take_while(|&&b| class(b, class_bits)).count();
        self.i += n;
        &self.text[start..self.i]
    }

    /// Skips to the next byte that ends a string's plain run, or to the end.
    fn skip_plain(&mut self) {
        self.i += self.b[self.i..].iter().take_while(|&&b| !class(b, STR_STOP)).count();
    }

    fn at_header(&self) -> bool {
        self.b[self.i..].starts_with(b"HEADER") && !self.b.get(self.i + 6).is_some_and(|&b| is_key_char(b))
    }

    fn message(&mut self) -> Result<Message, PErr> {
        if !self.at_header() {
            return Err(PErr::new(self.i, ParseErrorKind::MissingHeader));
        }
        let mut fields = std::mem::take(&mut self.scratch);
        let raw = self.block(&mut fields)?;
        let header = message::header_from_raw(raw, &mut fields)?;
        let mut blocks = Vec::new();
        loop {
            self.ws();
            if self.at_eof() || self.at_header() {
                break;
            }
            let raw = self.block(&mut fields)?;
            blocks.push(message::block_from_raw(raw, &mut fields)?);
        }
        self.scratch = fields;
        // Zero blocks is a message: Appendix A says `message = header , { block }`, and section 3.1's examples are
        // HEADERs on their own.
        Ok(Message { header, blocks })
    }

    /// A block; an object body's fields go to `fields` (cleared first).
    fn block(&mut self, fields: &mut Vec<RawField<'a>>) -> Result<RawBlock<'a>, PErr> {
        let offset = self.i;
        if !self.peek().is_some_and(|b| b.is_ascii_alphabetic()) {
            return Err(self.unexpected("a block type such as REQ"));
        }
        let name = self.word(KEY);
        self.expect(b':', "':' after the block type")?;
        self.ws();
        let body = match self.peek() {
            Some(b'{') => {
                fields.clear();
                self.nested(|p| p.pairs(b'}', "',' or '}'", fields))?;
                RawBody::Object
            }
            // PLAN steps are parsed straight into the field buffer, so that their keys stay borrowed.
            Some(b'[') if name == "PLAN" => {
                fields.clear();
                let mut steps = Vec::new();
                self.nested(|p| {
                    p.list_items(|p, at| {
                        // Tuples are what the examples write; objects are what the appendix grammar allows.
                        let (close, expected) = match p.peek() {
                            Some(b'(') => (b')', "',' or ')'"),
                            Some(b'{') => (b'}', "',' or '}'"),
                            _ => {
                                return Err(PErr::new(
                                    at,
                                    ParseErrorKind::InvalidField {
                                        block: "PLAN",
                                        field: "step",
                                        expected: "a (i,t,s) tuple",
                                    },
                                ));
                            }
                        };
                        let start = fields.len();
                        p.nested(|p| p.pairs(close, expected, fields))?;
                        steps.push((start..fields.len(), at));
                        Ok(())
                    })
                })?;
                RawBody::Steps(steps)
            }
            Some(b'[') => {
                let mut items = Vec::new();
                self.nested(|p| {
                    p.list_items(|p, at| {
                        items.push((p.value()?, at));
                        Ok(())
                    })
                })?;
                RawBody::Array(items)
            }
            _ => return Err(self.unexpected("'{' or '[' after the block type")),
        };
        Ok(RawBlock { name, offset, body })
    }

    /// `key:value` pairs up to `close`, appended to `out`; the opening bracket is already consumed.
    fn pairs<P: Pair<'a>>(&mut self, close: u8, sep_expected: &'static str, out: &mut Vec<P>) -> Result<(), PErr> {
        let from = out.len();
        // Keys stay borrowed from the input until stored: typed blocks only compare them.
        // Linear duplicate search is fastest for the small objects LLMX carries; a set takes over for big ones so
        // that hostile input stays linear.
        let mut seen: Option<HashSet<Cow<'a, str>>> = None;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key_at = self.i;
            let key = match self.peek() {
                Some(b'"') => self.string_cow()?,
                Some(b) if is_key_start(b) => Cow::Borrowed(self.word(KEY)),
                _ => return Err(self.unexpected("a field name")),
            };
            let dup = match &mut seen {
                Some(set) => !set.insert(key.clone()),
                None => {
                    let dup = out[from..].iter().any(|p| p.key() == key);
                    if out.len() - from >= 16 {
                        let mut set: HashSet<Cow<'a, str>> =
                            out[from..].iter().map(|p| Cow::Owned(p.key().to_owned())).collect();
                        set.insert(key.clone());
                        seen = Some(set);
                    }
                    dup
                }
            };
            if dup {
                return Err(PErr::new(key_at, ParseErrorKind::DuplicateField { field: key.into_owned() }));
            }
            self.ws();
            self.expect(b':', "':' after the field name")?;
            self.ws();
            let at = self.i;
            let value = self.value()?;
            out.push(P::make(key, value, at));
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b) if b == close => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected(sep_expected)),
            }
        }
    }

    fn value(&mut self) -> Result<Value, PErr> {
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => Ok(Value::Number(self.number()?)),
            Some(b'{') => self.nested(|p| p.object(b'}', "',' or '}'")).map(Value::Object),
            Some(b'(') => self.nested(|p| p.object(b')', "',' or ')'")).map(Value::Tuple),
            Some(b'[') => {
                let mut items = Vec::new();
                self.nested(|p| {
                    p.list_items(|p, _| {
                        items.push(p.value()?);
                        Ok(())
                    })
                })?;
                Ok(Value::Array(items))
            }
            Some(b) if is_key_start(b) => {
                let w = self.word(IDENT);
                Ok(match w {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    _ => Value::Str(w.to_owned()),
                })
            }
            _ => Err(self.unexpected("a value (string, number, boolean, identifier, array, object or tuple)")),
        }
    }

    fn number(&mut self) -> Result<Number, PErr> {
        let start = self.i;
        let neg = self.peek() == Some(b'-');
        if neg {
            self.i += 1;
        }
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Err(self.unexpected("a digit"));
        }
        let mut magnitude: Option<u64> = Some(0);
        while let Some(d @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude.and_then(|a| a.checked_mul(10)).and_then(|a| a.checked_add(u64::from(d - b'0')));
            self.i += 1;
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                return Err(self.unexpected("a digit after '.'"));
            }
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.i += 1;
            }
            float = true;
        }
        if !float && let Some(m) = magnitude {
            if !neg {
                return Ok(Number::from_u64(m));
            }
            // i64::MIN has no positive counterpart in i64, hence the detour through i128.
            if let Ok(i) = i64::try_from(-i128::from(m)) {
                return Ok(Number::from_i64(i));
            }
        }
        // Decimals, and integers too large for i64, go through the standard library's correctly rounded parser.
        let lexeme = &self.text[start..self.i];
        lexeme.parse::<f64>().ok().and_then(Number::from_f64).ok_or_else(|| {
            PErr::new(
                start,
                ParseErrorKind::Unexpected {
                    expected: "a number within the range of f64",
                    found: format!("{lexeme:?}"),
                },
            )
        })
    }

    /// A quoted string; the cursor is on the opening quote.
    fn string(&mut self) -> Result<String, PErr> {
        self.string_cow().map(Cow::into_owned)
    }

    /// A quoted string, borrowed from the input when it has no escapes.
    fn string_cow(&mut self) -> Result<Cow<'a, str>, PErr> {
        self.i += 1;
        let start = self.i;
        // Fast path: no escapes, borrowed.
        self.skip_plain();
        match self.peek() {
            None => return Err(self.unexpected("'\"' to close the string")),
            Some(b'"') => {
                let s = &self.text[start..self.i];
                self.i += 1;
                return Ok(Cow::Borrowed(s));
            }
            Some(b'\\') => {}
            Some(_) => return Err(PErr::new(self.i, ParseErrorKind::ControlCharacter)),
        }
        let mut out = String::with_capacity(self.i - start + 16);
        out.push_str(&self.text[start..self.i]);
        loop {
            let run = self.i;
            self.skip_plain();
            out.push_str(&self.text[run..self.i]);
            match self.peek() {
                None => return Err(self.unexpected("'\"' to close the string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let esc_at = self.i;
                    self.i += 1;
                    let bad = || PErr::new(esc_at, ParseErrorKind::InvalidEscape);
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.i += 1;
                            let hi = self.hex4().ok_or_else(bad)?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if !self.b[self.i..].starts_with(b"\\u") {
                                    return Err(bad());
                                }
                                self.i += 2;
                                let lo = self.hex4().ok_or_else(bad)?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(bad());
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(code).ok_or_else(bad)?);
                            continue;
                        }
                        _ => return Err(bad()),
                    };
                    self.i += 1;
                    out.push(c);
                }
                Some(_) => return Err(PErr::new(self.i, ParseErrorKind::ControlCharacter)),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u32;
        for &d in digits {
            v = v * 16 + char::from(d).to_digit(16)?;
        }
        self.i += 4;
        Some(v)
    }
}
