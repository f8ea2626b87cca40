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
#[non_exhaustive]
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
#[allow(
    clippy::exhaustive_enums,
    reason = "an ordered scale whose ends are fixed: warning, error, fatal (paper section 3.3)"
)]
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

/// Declares the code catalogue once: the [`Code`] variants, their wire names, the [`codes`] constants and each
/// code's category and retry advice.
macro_rules! code_catalogue {
    ($($(#[$doc:meta])* $variant:ident = $name:ident, $category:ident, $retry:tt;)*) => {
        /// A machine-readable error code ([`LdpError::code`]).
        ///
        /// Codes are open strings on the wire: the variants are the codes this implementation emits and
        /// recognises, and a code from another implementation is kept as [`Code::Other`]. Each (de)serialises as its
        /// wire name (`CONTRACT_VIOLATED`), so the wire is what it was when the code was a string.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Code {
            $($(#[$doc])* $variant,)*
            /// A code this implementation does not know, as received. [`Code::from`] never puts a known wire name
            /// here; construct known codes by their variant.
            Other(String),
        }

        impl Code {
            /// Every known code, in catalogue order ([`Code::Other`] excluded).
            pub const KNOWN: &'static [Code] = &[$(Code::$variant,)*];

            /// The wire name, e.g. `CONTRACT_VIOLATED`.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => codes::$name,)*
                    Self::Other(s) => s,
                }
            }

            /// The known code with this wire name, if any (case-sensitive, as on the wire).
            pub fn known(name: &str) -> Option<Code> {
                match name {
                    $(codes::$name => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The category this implementation sends the code with (`None` for [`Code::Other`]). A peer may send
            /// another; the [`LdpError::category`] received is what counts.
            pub const fn category(&self) -> Option<ErrorCategory> {
                match self {
                    $(Self::$variant => Some(ErrorCategory::$category),)*
                    Self::Other(_) => None,
                }
            }

            /// The retry advice this implementation sends the code with: the category's default
            /// ([`ErrorCategory::default_retryable`]) unless the code says otherwise (a full table is worth a retry
            /// whatever its category; a malformed or cancelled message is not). `None` for [`Code::Other`].
            pub const fn retryable(&self) -> Option<bool> {
                match self {
                    $(Self::$variant => Some(code_catalogue!(@retry $category, $retry)),)*
                    Self::Other(_) => None,
                }
            }
        }

        /// The wire names of the known codes, for comparing with [`LdpError::code`] (`error.code == codes::X`) and
        /// for building errors (`LdpError::session(codes::X, ...)`); [`Code`] is the typed form of each.
        pub mod codes {
            $($(#[$doc])* pub const $name: &str = stringify!($name);)*
        }
    };
    (@retry $category:ident, _) => { ErrorCategory::$category.default_retryable() };
    (@retry $category:ident, $retry:literal) => { $retry };
}

code_catalogue! {
    /// A `fail_closed` contract was violated; the output travels as `partial_output`.
    ContractViolated = CONTRACT_VIOLATED, Policy, _;
    /// The session expired through inactivity; re-establish it.
    SessionExpired = SESSION_EXPIRED, Session, _;
    /// The session id is not known to the receiver.
    SessionNotFound = SESSION_NOT_FOUND, Session, _;
    /// The session was closed.
    SessionClosed = SESSION_CLOSED, Session, false;
    /// The message is not legal in the session's current state.
    InvalidState = INVALID_STATE, Session, false;
    /// The sender is not the session's peer.
    NotSessionPeer = NOT_SESSION_PEER, Session, false;
    /// The session proposal was rejected.
    SessionRejected = SESSION_REJECTED, Policy, _;
    /// The `(message_id, nonce)` pair was seen before within the window.
    ReplayDetected = REPLAY_DETECTED, Security, _;
    /// The signature does not verify.
    SignatureInvalid = SIGNATURE_INVALID, Security, _;
    /// A signature was required but absent.
    SignatureRequired = SIGNATURE_REQUIRED, Security, _;
    /// The timestamp is unparseable or outside the accepted window.
    TimestampOutOfWindow = TIMESTAMP_OUT_OF_WINDOW, Security, _;
    /// The trust domains are incompatible.
    TrustViolation = TRUST_VIOLATION, Policy, _;
    /// The peer is not authenticated.
    Unauthenticated = UNAUTHENTICATED, Identity, _;
    /// The body `type` is not one of the twelve LDP message types.
    UnknownMessageType = UNKNOWN_MESSAGE_TYPE, Capability, _;
    /// The message is not valid JSON or not a valid envelope.
    MalformedMessage = MALFORMED_MESSAGE, Runtime, false;
    /// The message is larger than the receiver accepts.
    MessageTooLarge = MESSAGE_TOO_LARGE, Runtime, false;
    /// The skill is not declared by the delegate.
    SkillNotFound = SKILL_NOT_FOUND, Capability, _;
    /// The payload mode is not supported or its payload is invalid.
    PayloadModeFailed = PAYLOAD_MODE_FAILED, Capability, _;
    /// The delegate has no free task slot; retry later.
    CapacityExceeded = CAPACITY_EXCEEDED, Runtime, true;
    /// The session's budget is exhausted.
    BudgetExceeded = BUDGET_EXCEEDED, Policy, _;
    /// The delegation would exceed the contract's `max_delegation_depth`.
    DelegationDepthExceeded = DELEGATION_DEPTH_EXCEEDED, Policy, _;
    /// The task was cancelled.
    Cancelled = CANCELLED, Runtime, false;
    /// The task id is not known.
    TaskNotFound = TASK_NOT_FOUND, Session, false;
    /// The task id is already in use in this session.
    DuplicateTask = DUPLICATE_TASK, Session, false;
    /// The delegate failed while executing.
    ExecutionFailed = EXECUTION_FAILED, Runtime, _;
    /// The operation timed out.
    Timeout = TIMEOUT, Transport, _;
    /// The task completed while its session was disconnected, but its result was not kept for the resume (the
    /// receiver's limit on held results was reached, or they expired). Sent as a TASK_FAILED for that task id, so
    /// the initiator knows the outcome is lost rather than waiting for it; re-running the task repeats its effects.
    ResultNotKept = RESULT_NOT_KEPT, Runtime, false;
    /// The state store the delegate's replicas share (sessions, replay window, tasks) did not answer in time or is
    /// down; nothing was done with the message, which may be sent again.
    StoreUnavailable = STORE_UNAVAILABLE, Runtime, true;
    /// The replica running the task stopped renewing its lease (it died or lost the store) before the task ended: the
    /// task is failed, and may be submitted again (its effects may have happened once already).
    TaskLeaseExpired = TASK_LEASE_EXPIRED, Runtime, true;
    /// The transport failed.
    TransportError = TRANSPORT_ERROR, Transport, _;
    /// A bare-string error from a peer that does not send typed errors.
    UntypedError = UNTYPED_ERROR, Runtime, _;
}

impl Code {
    /// Whether this is one of the codes this implementation knows (not [`Code::Other`]).
    pub const fn is_known(&self) -> bool {
        !matches!(self, Self::Other(_))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Code {
    /// The known code with this wire name, else [`Code::Other`].
    fn from(name: &str) -> Self {
        Code::known(name).unwrap_or_else(|| Code::Other(name.to_owned()))
    }
}

impl From<String> for Code {
    /// The known code with this wire name, else [`Code::Other`] (keeping the string).
    fn from(name: String) -> Self {
        Code::known(&name).unwrap_or(Code::Other(name))
    }
}

impl From<&String> for Code {
    fn from(name: &String) -> Self {
        Code::from(name.as_str())
    }
}

impl std::str::FromStr for Code {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Code::from(s))
    }
}

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Code {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Code> for str {
    fn eq(&self, other: &Code) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Code> for &str {
    fn eq(&self, other: &Code) -> bool {
        *self == other.as_str()
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Reads the wire name; a known name allocates nothing.
impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CodeVisitor;
        impl Visitor<'_> for CodeVisitor {
            type Value = Code;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error code string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Code, E> {
                Ok(Code::from(v))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Code, E> {
                Ok(Code::from(v))
            }
        }
        deserializer.deserialize_str(CodeVisitor)
    }
}

/// A typed failure as it travels on the wire (paper section 3.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LdpError {
    /// Machine-readable code, e.g. [`Code::ContractViolated`].
    pub code: Code,
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
    pub fn new(category: ErrorCategory, code: impl Into<Code>, message: impl Into<String>) -> Self {
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
    pub fn identity(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Identity, code, message)
    }
    /// A `capability` failure.
    pub fn capability(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Capability, code, message)
    }
    /// A `policy` failure.
    pub fn policy(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Policy, code, message)
    }
    /// A `runtime` failure.
    pub fn runtime(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Runtime, code, message)
    }
    /// A `quality` failure.
    pub fn quality(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Quality, code, message)
    }
    /// A `session` failure.
    pub fn session(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Session, code, message)
    }
    /// A `transport` failure.
    pub fn transport(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self::new(ErrorCategory::Transport, code, message)
    }
    /// A `security` failure.
    pub fn security(code: impl Into<Code>, message: impl Into<String>) -> Self {
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
                Ok(LdpError::runtime(Code::UntypedError, v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LdpError, A::Error> {
                let mut code: Option<Code> = None;
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
    /// A claim-type wire name is unknown.
    #[error("unknown claim type {0:?}")]
    UnknownClaimType(String),
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
    /// A usage receipt's signature verifies but it does not belong to the result it came with: another session or
    /// task, another producer, or token and cost figures other than the provenance reports ([`crate::receipt`]).
    #[error("usage receipt does not match the result: {member} differs")]
    ReceiptMismatch {
        /// The member that differs.
        member: &'static str,
    },
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
            | Error::UnknownClaimType(_)
            | Error::ScoreOutOfRange(_) => {
                LdpError::runtime(Code::MalformedMessage, err.to_string()).with_retryable(false)
            }
            Error::UnknownPayloadMode(_) | Error::InvalidSemanticFrame(_) => {
                LdpError::capability(Code::PayloadModeFailed, err.to_string())
            }
            Error::InvalidTimestamp(_) => LdpError::security(Code::TimestampOutOfWindow, err.to_string()),
            Error::MissingSignature => LdpError::security(Code::SignatureRequired, err.to_string()),
            Error::UnknownSignatureAlgorithm(_)
            | Error::SignatureAlgorithmMismatch { .. }
            | Error::BadSignature
            | Error::InvalidKey(_)
            | Error::ReceiptMismatch { .. } => LdpError::security(Code::SignatureInvalid, err.to_string()),
            Error::Serialize(_) => LdpError::runtime(Code::ExecutionFailed, err.to_string()),
            Error::InvalidCriterion { .. } => {
                LdpError::policy(Code::ContractViolated, err.to_string()).with_retryable(false)
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
    fn every_known_code_travels_as_its_wire_name() {
        assert_eq!(Code::KNOWN.len(), 31);
        for code in Code::KNOWN {
            let wire = serde_json::to_value(code).unwrap();
            assert_eq!(wire, serde_json::Value::String(code.to_string()));
            let back: Code = serde_json::from_value(wire).unwrap();
            assert_eq!(&back, code);
            assert!(back.is_known(), "{code}");
            assert_eq!(Code::from(code.as_str().to_owned()), *code);
            assert!(code.category().is_some() && code.retryable().is_some(), "{code}");
        }
    }

    #[test]
    fn a_foreign_code_is_kept_as_received() {
        let e: LdpError = serde_json::from_str(r#"{"code":"RATE_LIMITED","category":"transport"}"#).unwrap();
        assert_eq!(e.code, Code::Other("RATE_LIMITED".into()));
        assert!(!e.code.is_known() && e.code.category().is_none());
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.starts_with(r#"{"code":"RATE_LIMITED","#), "{text}");
        // Case matters on the wire: a near miss is another implementation's code, not ours.
        assert_eq!(Code::from("cancelled"), Code::Other("cancelled".into()));
    }

    #[test]
    fn a_known_code_decodes_to_its_variant_and_compares_with_its_name() {
        let e: LdpError = serde_json::from_str(r#"{"code":"CONTRACT_VIOLATED","category":"policy"}"#).unwrap();
        assert_eq!(e.code, Code::ContractViolated);
        assert!(e.code == codes::CONTRACT_VIOLATED && e.code != codes::CANCELLED);
        assert_eq!(e.code.category(), Some(e.category));
    }

    #[test]
    fn code_defaults_are_what_the_local_error_mapping_sends() {
        let samples = [
            Error::MalformedJson(serde_json::from_str::<Value>("{").unwrap_err()),
            Error::UnknownPayloadMode("x".into()),
            Error::InvalidTimestamp("x".into()),
            Error::MissingSignature,
            Error::BadSignature,
        ];
        for err in &samples {
            let wire = LdpError::from(err);
            assert_eq!(wire.code.category(), Some(wire.category), "{err}");
            assert_eq!(wire.code.retryable(), Some(wire.retryable), "{err}");
        }
    }

    #[test]
    fn unknown_category_is_rejected() {
        assert!(serde_json::from_str::<LdpError>(r#"{"code":"X","category":"weird"}"#).is_err());
    }
}
