//! The crate's error type.

use std::fmt;

/// A 1-based line and column (columns count characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub column: u32,
}

impl Position {
    /// The position of byte `offset` in `text` (clamped to the text's end and to a character boundary).
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let column = text[line_start..offset].chars().count() + 1;
        Position { line: u32::try_from(line).unwrap_or(u32::MAX), column: u32::try_from(column).unwrap_or(u32::MAX) }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// What was wrong with malformed LLMX text; [`LlmxError::Parse`] adds where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The input is not UTF-8.
    InvalidUtf8,
    /// A token other than the grammar allows here.
    Unexpected {
        /// What the grammar allows at this point.
        expected: &'static str,
        /// What was there instead (a short quote, or "end of input").
        found: String,
    },
    /// A backslash escape that is not one of `\" \\ \/ \b \f \n \r \t \uXXXX`, or a lone surrogate.
    InvalidEscape,
    /// A raw control character inside a string; it must be escaped.
    ControlCharacter,
    /// The text does not start with a HEADER block.
    MissingHeader,
    /// A second HEADER where one message was expected.
    ExtraHeader,
    /// Objects, arrays and tuples nested deeper than the limit.
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// A message (from its HEADER to the next) longer than the reader's limit
    /// ([`crate::Parser::max_message_bytes`]).
    MessageTooLarge {
        /// The limit in force, in bytes.
        limit: usize,
    },
    /// A key appears twice in one object or tuple.
    DuplicateField {
        /// The repeated key.
        field: String,
    },
    /// A required field of a standard block is absent.
    MissingField {
        /// The block type (`REQ`, ...).
        block: &'static str,
        /// The field's LLMX key.
        field: &'static str,
    },
    /// A field of a standard block has the wrong type or an out-of-range value.
    InvalidField {
        /// The block type.
        block: &'static str,
        /// The field's LLMX key.
        field: &'static str,
        /// What the field must hold.
        expected: &'static str,
    },
    /// A field that is neither standard nor an `x_` custom field.
    UnknownField {
        /// The block type.
        block: &'static str,
        /// The offending key.
        field: String,
    },
    /// A standard block written with the wrong body shape (object vs array).
    InvalidBody {
        /// The block type.
        block: &'static str,
        /// The shape it takes.
        expected: &'static str,
    },
}

impl fmt::Display for ParseErrorKind {
    // The wording of MissingField follows the spec's own NACK example (section 7.2).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseErrorKind::InvalidUtf8 => f.write_str("invalid UTF-8"),
            ParseErrorKind::Unexpected { expected, found } => write!(f, "expected {expected}, found {found}"),
            ParseErrorKind::InvalidEscape => f.write_str("invalid escape sequence in string"),
            ParseErrorKind::ControlCharacter => f.write_str("control character in string must be escaped"),
            ParseErrorKind::MissingHeader => f.write_str("expected HEADER: every message starts with a HEADER block"),
            ParseErrorKind::MessageTooLarge { limit } => write!(f, "message larger than {limit} bytes"),
            ParseErrorKind::ExtraHeader => f.write_str("unexpected second HEADER (one message expected)"),
            ParseErrorKind::TooDeep { limit } => write!(f, "nesting deeper than {limit} levels"),
            ParseErrorKind::DuplicateField { field } => write!(f, "duplicate field '{field}'"),
            ParseErrorKind::MissingField { block, field } => write!(f, "missing required field '{field}' in {block}"),
            ParseErrorKind::InvalidField { block, field, expected } => {
                write!(f, "invalid field '{field}' in {block}: expected {expected}")
            }
            ParseErrorKind::UnknownField { block, field } => {
                write!(f, "unknown field '{field}' in {block} (custom fields need the x_ prefix)")
            }
            ParseErrorKind::InvalidBody { block, expected } => write!(f, "{block} body must be {expected}"),
        }
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmxError {
    /// Malformed LLMX text (a peer's fault: answer it with [`crate::Res::nack`]).
    #[error("{position}: {kind}")]
    Parse {
        /// Where the problem is.
        position: Position,
        /// What the problem is.
        kind: ParseErrorKind,
    },
    /// A path that would leave the allowed root (spec section 9.2).
    #[error("path escapes its root: {path}")]
    PathEscapesRoot {
        /// The rejected path, as given.
        path: String,
    },
    /// A path that could not be resolved on the file system.
    #[error("cannot resolve path {path}: {reason}")]
    PathUnresolvable {
        /// The path, as given.
        path: String,
        /// The file system's answer.
        reason: String,
    },
    /// A name that is not valid where it was used (custom field without `x_`, custom type without `X_`, ...).
    #[error("invalid name '{name}': {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// A value outside what its LLMX field allows (for example a priority outside 1..=5).
    #[error("value out of range: {0}")]
    OutOfRange(&'static str),
    /// A batch whose ACTs or OBS blocks cannot be matched (missing or duplicate ids, another batch's response).
    #[error("batch: {0}")]
    Batch(String),
    /// The input could not be read (see [`crate::MessageReader`]).
    #[error("read error: {message}")]
    Read {
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's text.
        message: String,
    },
    /// An LLMX message with no LDP counterpart, or an LDP envelope with no LLMX counterpart.
    #[error("cannot bridge: {0}")]
    Bridge(String),
}

impl LlmxError {
    /// Where in the text the error is, for parse errors.
    pub fn position(&self) -> Option<Position> {
        match self {
            LlmxError::Parse { position, .. } => Some(*position),
            _ => None,
        }
    }

    /// The parse error's kind, for parse errors.
    pub fn parse_kind(&self) -> Option<&ParseErrorKind> {
        match self {
            LlmxError::Parse { kind, .. } => Some(kind),
            _ => None,
        }
    }
}
