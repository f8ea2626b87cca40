//! The crate's single error type.

/// Everything that can go wrong while reading, writing or transforming LCTL documents.
///
/// Rule violations are not errors: they are [`Finding`](crate::Finding)s in a
/// [`Report`](crate::Report), because a trace that breaks a rule is still worth reading.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LctlError {
    /// The input is not well-formed YAML (or uses YAML the codec rejects, such as duplicate keys).
    #[error("yaml syntax{}: {message}", location_suffix(*.line, *.column))]
    Syntax {
        /// The parser's message.
        message: String,
        /// 1-based line, when the parser knows it.
        line: Option<u64>,
        /// 1-based column, when the parser knows it.
        column: Option<u64>,
    },
    /// The YAML is well-formed but a field has the wrong shape or value.
    #[error("{path}: expected {expected}")]
    Schema {
        /// Dotted path to the offending value, e.g. `facts.F2.confidence`.
        path: String,
        /// What the field should have held.
        expected: String,
    },
    /// A confidence outside 0.0-1.0 (or not finite) was given to [`Confidence::new`](crate::Confidence::new).
    #[error("confidence {0} is outside 0.0-1.0")]
    ConfidenceOutOfRange(f64),
    /// A fact id that is empty or contains whitespace or flow-syntax characters.
    #[error("invalid fact id {0:?}")]
    InvalidFactId(String),
    /// The document could not be written out.
    #[error("cannot serialize: {0}")]
    Serialize(String),
    /// A caller asked for something the document cannot provide (e.g. an ack without a chain id).
    #[error("{0}")]
    InvalidRequest(String),
}

fn location_suffix(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line} column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

impl LctlError {
    pub(crate) fn schema(path: &str, expected: impl Into<String>) -> Self {
        LctlError::Schema {
            path: if path.is_empty() { "(document)".to_owned() } else { path.to_owned() },
            expected: expected.into(),
        }
    }
}
