//! Typed failures: the wire-level [`LdpError`] of the paper (section 3.3) and this crate's Rust [`Error`].

use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What kind of thing went wrong, as the paper's failure table classifies it.
///
/// `security` is not in the paper's table; this implementation adds it for signature and replay failures (the Rust
/// reference SDK does the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// Authentication or identity mismatch.
    Identity,
    /// The delegate cannot perform the requested skill.
    Capability,
    /// A policy (trust, contract) forbids the operation.
    Policy,
    /// The delegate failed while executing.
    Runtime,
    /// The result is below an expected quality bar.
    Quality,
    /// The session is missing, expired, closed or in the wrong state.
    Session,
    /// The transport failed (connection, timeout).
    Transport,
    /// Signature, replay or timestamp-window failure.
    Security,
}

/// How serious a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSeverity {
    /// The operation may still be usable.
    Warning,
    /// The operation failed.
    Error,
    /// The operation failed and must not be retried as is.
    Fatal,
}

impl ErrorSeverity {
    /// The wire name, e.g. `fatal`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Fatal => "fatal",
        }
    }
}

impl fmt::Display for ErrorSeverity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ErrorCategory {
    /// All categories, in declaration order.
    pub const ALL: [ErrorCategory; 8] = [
        Self::Identity,
        Self::Capability,
        Self::Policy,
        Self::Runtime,
        Self::Quality,
        Self::Session,
        Self::Transport,
        Self::Security,
    ];

    /// The paper's default severity for this category.
    pub const fn default_severity(self) -> ErrorSeverity {
        match self {
            Self::Runtime | Self::Capability | Self::Identity | Self::Session => ErrorSeverity::Error,
            Self::Transport | Self::Quality => ErrorSeverity::Warning,
            Self::Policy | Self::Security => ErrorSeverity::Fatal,
        }
    }

    /// The paper's default retry advice for this category.
    pub const fn default_retryable(self) -> bool {
        matches!(self, Self::Runtime | Self::Transport | Self::Session)
    }

    /// The wire name of this category.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Capability => "capability",
            Self::Policy => "policy",
            Self::Runtime => "runtime",
            Self::Quality => "quality",
            Self::Session => "session",
            Self::Transport => "transport",
            Self::Security => "security",
        }
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The catalogue of standard error codes. Codes are open strings on the wire; these are the ones this
/// implementation emits and recognises.
pub mod codes {
    /// A `fail_closed` contract was violated; the output travels as `partial_output`.
    pub const CONTRACT_VIOLATED: &str = "CONTRACT_VIOLATED";
    /// The session expired through inactivity; re-establish it.
    pub const SESSION_EXPIRED: &str = "SESSION_EXPIRED";
    /// The session id is not known to the receiver.
    pub const SESSION_NOT_FOUND: &str = "SESSION_NOT_FOUND";
    /// The session was closed.
    pub const SESSION_CLOSED: &str = "SESSION_CLOSED";
    /// The message is not legal in the session's current state.
    pub const INVALID_STATE: &str = "INVALID_STATE";
    /// The sender is not the session's peer.
    pub const NOT_SESSION_PEER: &str = "NOT_SESSION_PEER";
    /// The session proposal was rejected.
    pub const SESSION_REJECTED: &str = "SESSION_REJECTED";
    /// The `(message_id, nonce)` pair was seen before within the window.
    pub const REPLAY_DETECTED: &str = "REPLAY_DETECTED";
    /// The signature does not verify.
    pub const SIGNATURE_INVALID: &str = "SIGNATURE_INVALID";
    /// A signature was required but absent.
    pub const SIGNATURE_REQUIRED: &str = "SIGNATURE_REQUIRED";
    /// The timestamp is unparseable or outside the accepted window.
    pub const TIMESTAMP_OUT_OF_WINDOW: &str = "TIMESTAMP_OUT_OF_WINDOW";
    /// The trust domains are incompatible.
    pub const TRUST_VIOLATION: &str = "TRUST_VIOLATION";
    /// The peer is not authenticated.
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    /// The body `type` is not one of the twelve LDP message types.
    pub const UNKNOWN_MESSAGE_TYPE: &str = "UNKNOWN_MESSAGE_TYPE";
    /// The message is not valid JSON or not a valid envelope.
    pub const MALFORMED_MESSAGE: &str = "MALFORMED_MESSAGE";
    /// The message is larger than the receiver accepts.
    pub const MESSAGE_TOO_LARGE: &str = "MESSAGE_TOO_LARGE";
    /// The skill is not declared by the delegate.
    pub const SKILL_NOT_FOUND: &str = "SKILL_NOT_FOUND";
    /// The payload mode is not supported or its payload is invalid.
    pub const PAYLOAD_MODE_FAILED: &str = "PAYLOAD_MODE_FAILED";
    /// The delegate has no free task slot; retry later.
    pub const CAPACITY_EXCEEDED: &str = "CAPACITY_EXCEEDED";
    /// The session's budget is exhausted.
    pub const BUDGET_EXCEEDED: &str = "BUDGET_EXCEEDED";
    /// The delegation would exceed the contract's `max_delegation_depth`.
    pub const DELEGATION_DEPTH_EXCEEDED: &str = "DELEGATION_DEPTH_EXCEEDED";
    /// The task was cancelled.
    pub const CANCELLED: &str = "CANCELLED";
    /// The task id is not known.
    pub const TASK_NOT_FOUND: &str = "TASK_NOT_FOUND";
    /// The task id is already in use in this session.
    pub const DUPLICATE_TASK: &str = "DUPLICATE_TASK";
    /// The delegate failed while executing.
    pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
    /// The operation timed out.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// The task completed while its session was disconnected, but its result was not kept for the resume (the
    /// receiver's limit on held results was reached, or they expired). Sent as a TASK_FAILED for that task id, so
    /// the initiator knows the outcome is lost rather than waiting for it; re-running the task repeats its effects.
    pub const RESULT_NOT_KEPT: &str = "RESULT_NOT_KEPT";
    /// The transport failed.
    pub const TRANSPORT_ERROR: &str = "TRANSPORT_ERROR";
    /// A bare-string error from a peer that does not send typed errors.
    pub const UNTYPED_ERROR: &str = "UNTYPED_ERROR";
}

/// A typed failure as it travels on the wire (paper section 3.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LdpError {
    /// Machine-readable code, e.g. [`codes::CONTRACT_VIOLATED`].
    pub code: String,
    /// The failure category.
    pub category: ErrorCategory,
    /// Human-readable explanation.
    pub message: String,
    /// How serious the failure is.
    pub severity: ErrorSeverity,
    /// Whether the same request may succeed if retried.
    pub retryable: bool,
    /// Output produced before the failure (e.g. a `fail_closed` contract violation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_output: Option<Value>,
}

impl LdpError {
    /// A failure with the category's default severity and retry advice.
    pub fn new(category: ErrorCategory, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            category,
            message: message.into(),
            severity: category.default_severity(),
            retryable: category.default_retryable(),
            partial_output: None,
        }
    }

    /// An `identity` failure.
    pub fn identity(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Identity, code, message)
    }
    /// A `capability` failure.
    pub fn capability(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Capability, code, message)
    }
    /// A `policy` failure.
    pub fn policy(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Policy, code, message)
    }
    /// A `runtime` failure.
    pub fn runtime(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Runtime, code, message)
    }
    /// A `quality` failure.
    pub fn quality(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Quality, code, message)
    }
    /// A `session` failure.
    pub fn session(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Session, code, message)
    }
    /// A `transport` failure.
    pub fn transport(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Transport, code, message)
    }
    /// A `security` failure.
    pub fn security(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Security, code, message)
    }

    /// Attaches the output produced before the failure.
    pub fn with_partial_output(mut self, output: Value) -> Self {
        self.partial_output = Some(output);
        self
    }

    /// Overrides the retry advice.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Overrides the severity.
    pub fn with_severity(mut self, severity: ErrorSeverity) -> Self {
        self.severity = severity;
        self
    }
}

impl fmt::Display for LdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.category, self.code, self.message)
    }
}

impl std::error::Error for LdpError {}

/// The members of an [`LdpError`] object, identified without allocating.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ErrorKey {
    Code,
    Category,
    Message,
    Severity,
    Retryable,
    PartialOutput,
    #[serde(other)]
    Other,
}

/// Accepts the typed object (missing `severity`/`retryable` take the category's defaults) and, for peers that send
/// untyped errors, a bare string, which becomes a `runtime` [`codes::UNTYPED_ERROR`].
impl<'de> Deserialize<'de> for LdpError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ErrorVisitor;
        impl<'de> Visitor<'de> for ErrorVisitor {
            type Value = LdpError;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an LdpError object or an error string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LdpError, E> {
                Ok(LdpError::runtime(codes::UNTYPED_ERROR, v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LdpError, A::Error> {
                let mut code: Option<String> = None;
                let mut category: Option<ErrorCategory> = None;
                let mut message: Option<String> = None;
                let mut severity: Option<ErrorSeverity> = None;
                let mut retryable: Option<bool> = None;
                let mut partial_output: Option<Value> = None;
                while let Some(key) = map.next_key::<ErrorKey>()? {
                    match key {
                        ErrorKey::Code => code = map.next_value()?,
                        ErrorKey::Category => category = map.next_value()?,
                        ErrorKey::Message => message = map.next_value()?,
                        ErrorKey::Severity => severity = map.next_value()?,
                        ErrorKey::Retryable => retryable = map.next_value()?,
                        ErrorKey::PartialOutput => partial_output = map.next_value()?,
                        ErrorKey::Other => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                let category = category.ok_or_else(|| de::Error::missing_field("category"))?;
                Ok(LdpError {
                    code: code.ok_or_else(|| de::Error::missing_field("code"))?,
                    category,
                    message: message.unwrap_or_default(),
                    severity: severity.unwrap_or(category.default_severity()),
                    retryable: retryable.unwrap_or(category.default_retryable()),
                    partial_output: partial_output.filter(|v| !v.is_null()),
                })
            }
        }
        deserializer.deserialize_any(ErrorVisitor)
    }
}

/// Errors of this crate's API: decoding, validation and signing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input is not syntactically valid JSON, or is JSON that no `serde_json::Value` can hold: a number out of
    /// the range of an `f64` (`1e400`, a 400-digit integer), a lone surrogate escape (`"\ud800"`), or arrays and
    /// objects nested deeper than 127 levels (counted from the outermost value of the text, e.g. the envelope).
    #[error("malformed json: {0}")]
    MalformedJson(#[source] serde_json::Error),
    /// The input is JSON but not a valid LDP value (missing or mistyped field, out-of-range value).
    #[error("invalid message: {0}")]
    InvalidMessage(#[source] serde_json::Error),
    /// An object in the input names the same member twice (the name, cut at 64 bytes). Refused wherever it occurs,
    /// payloads included, because parsers disagree on which occurrence counts.
    #[error("duplicate member name {0:?}")]
    DuplicateMember(String),
    /// A delegate id does not have the form `ldp:delegate:<name>`.
    #[error("invalid delegate id {0:?}: expected ldp:delegate:<name>")]
    InvalidDelegateId(String),
    /// A score (quality, confidence) is not a finite number in 0.0..=1.0.
    #[error("score {0} out of range: expected 0.0-1.0")]
    ScoreOutOfRange(f64),
    /// A timestamp is not ISO 8601 / RFC 3339.
    #[error("invalid timestamp {0:?}: expected ISO 8601 (RFC 3339)")]
    InvalidTimestamp(String),
    /// A payload-mode wire name is unknown.
    #[error("unknown payload mode {0:?}")]
    UnknownPayloadMode(String),
    /// A semantic frame lacks a required field.
    #[error("semantic frame invalid: {0}")]
    InvalidSemanticFrame(&'static str),
    /// A signature algorithm name is unknown.
    #[error("unknown signature algorithm {0:?}")]
    UnknownSignatureAlgorithm(String),
    /// The message carries no signature but one is required.
    #[error("message is not signed")]
    MissingSignature,
    /// The signature was made with another algorithm than the key's.
    #[error("signature algorithm mismatch: expected {expected}, got {actual}")]
    SignatureAlgorithmMismatch {
        /// The algorithm of the verifying key.
        expected: &'static str,
        /// The algorithm the message names.
        actual: String,
    },
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// A key has the wrong length or encoding.
    #[error("invalid key: {0}")]
    InvalidKey(&'static str),
    /// JSON serialisation failed (only non-JSON-representable values, e.g. non-finite floats in `Value`, can cause it).
    #[error("serialisation failed: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A `check:` entry of a contract's success criteria or safety constraints does not parse or exceeds a bound
    /// ([`crate::criteria`]).
    #[error("invalid criterion {criterion:?}: {reason}")]
    InvalidCriterion {
        /// The entry (shortened if long).
        criterion: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// Classifies a `serde_json` decoding error as malformed JSON or an invalid message.
    pub(crate) fn from_decode(err: serde_json::Error) -> Self {
        match err.classify() {
            serde_json::error::Category::Syntax
            | serde_json::error::Category::Eof
            | serde_json::error::Category::Io => Self::MalformedJson(err),
            serde_json::error::Category::Data => Self::InvalidMessage(err),
        }
    }
}

/// The one place where a local error becomes a wire error.
impl From<&Error> for LdpError {
    fn from(err: &Error) -> Self {
        match err {
            Error::MalformedJson(_)
            | Error::InvalidMessage(_)
            | Error::DuplicateMember(_)
            | Error::InvalidDelegateId(_)
            | Error::ScoreOutOfRange(_) => {
                LdpError::runtime(codes::MALFORMED_MESSAGE, err.to_string()).with_retryable(false)
            }
            Error::UnknownPayloadMode(_) | Error::InvalidSemanticFrame(_) => {
                LdpError::capability(codes::PAYLOAD_MODE_FAILED, err.to_string())
            }
            Error::InvalidTimestamp(_) => LdpError::security(codes::TIMESTAMP_OUT_OF_WINDOW, err.to_string()),
            Error::MissingSignature => LdpError::security(codes::SIGNATURE_REQUIRED, err.to_string()),
            Error::UnknownSignatureAlgorithm(_)
            | Error::SignatureAlgorithmMismatch { .. }
            | Error::BadSignature
            | Error::InvalidKey(_) => LdpError::security(codes::SIGNATURE_INVALID, err.to_string()),
            Error::Serialize(_) => LdpError::runtime(codes::EXECUTION_FAILED, err.to_string()),
            Error::InvalidCriterion { .. } => {
                LdpError::policy(codes::CONTRACT_VIOLATED, err.to_string()).with_retryable(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_defaults_follow_the_paper_table() {
        let table = [
            (ErrorCategory::Runtime, true, ErrorSeverity::Error),
            (ErrorCategory::Transport, true, ErrorSeverity::Warning),
            (ErrorCategory::Policy, false, ErrorSeverity::Fatal),
            (ErrorCategory::Capability, false, ErrorSeverity::Error),
            (ErrorCategory::Quality, false, ErrorSeverity::Warning),
            (ErrorCategory::Identity, false, ErrorSeverity::Error),
            (ErrorCategory::Session, true, ErrorSeverity::Error),
        ];
        for (cat, retry, sev) in table {
            let e = LdpError::new(cat, "X", "y");
            assert_eq!((e.retryable, e.severity), (retry, sev), "{cat}");
        }
    }

    #[test]
    fn missing_severity_and_retryable_take_category_defaults() {
        let e: LdpError = serde_json::from_str(r#"{"code":"X","category":"session","message":"m"}"#).unwrap();
        assert!(e.retryable);
        assert_eq!(e.severity, ErrorSeverity::Error);
    }

    #[test]
    fn display_names_are_the_wire_names() {
        for c in ErrorCategory::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.to_string());
        }
        for s in [ErrorSeverity::Warning, ErrorSeverity::Error, ErrorSeverity::Fatal] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.to_string());
        }
    }

    #[test]
    fn bare_string_error_is_accepted_as_runtime() {
        let e: LdpError = serde_json::from_str(r#""boom""#).unwrap();
        assert_eq!(e.category, ErrorCategory::Runtime);
        assert_eq!(e.code, codes::UNTYPED_ERROR);
        assert_eq!(e.message, "boom");
    }

    #[test]
    fn unknown_category_is_rejected() {
        assert!(serde_json::from_str::<LdpError>(r#"{"code":"X","category":"weird"}"#).is_err());
    }
}
