//! The LDP wire model: everything needed to read, write, validate and sign LLM Delegate Protocol messages, with no
//! IO and no async runtime.
//!
//! A tour:
//! - [`Envelope`] wraps every message; its [`Body`] is one of the twelve message types of RFC 3.2 (or
//!   [`Body::Unknown`], so a receiver can answer an unknown type with a typed error instead of failing to parse).
//! - [`IdentityCard`] (RFC 2.1) describes a delegate; its [`Capability`]s carry quality claims tagged with a
//!   [`ClaimType`] (self-claimed vs attested, paper 3.2). [`TrustDomain`] implements the RFC 7.2 check.
//! - [`PayloadMode`] and [`negotiate`] implement RFC 4; [`SemanticFrame`] is mode 1. A task's payload
//!   (`TaskSubmit::input`, `TaskResult::output`) is a [`RawJson`]: the text as received, parsed by whoever reads it.
//! - [`Provenance`] travels with every result; [`DelegationContract`] bounds a task; [`LdpError`] is the typed failure
//!   of paper 3.3, with the category defaults of its table and a catalogue of [`codes`].
//! - [`signing`] signs and verifies envelopes with `hmac-sha256` (reference-SDK compatible), `hmac-sha256-jcs` and
//!   `ed25519-jcs` (both covering the whole envelope).
//!
//! Decoding is liberal about shapes (reference-SDK shapes, `null`s, unknown members are all accepted and kept) and
//! strict about JSON: a message read from text ([`Envelope::from_json`], [`Envelope::from_slice`], serde_json's
//! `Deserialize`, [`IdentityCard::from_json`], [`RawJson::from_json`]) must be one that a `serde_json::Value` can
//! hold, and no object in it, payloads and unknown members included, may name a member twice. The limits:
//! - numbers within the range of an `f64` (`1e400` and a 400-digit integer are refused), no lone surrogate escape
//!   (`"\ud800"`): [`Error::MalformedJson`];
//! - at most 127 levels of arrays and objects, counted from the outermost value of the text (a payload starts two
//!   levels down in its envelope, so it may nest 125 deep): [`Error::MalformedJson`], never a stack overflow;
//! - no repeated member name anywhere: [`Error::DuplicateMember`], since parsers disagree on which occurrence counts
//!   and a signature must cover one reading only.
//!
//! All of these map to the wire error `MALFORMED_MESSAGE` and are found before any signature is checked. Sizes
//! (message bytes, identifier lengths) are limited by the session layer and the transports. Encoding follows the
//! RFC.
//!
//! ```
//! use ldp_types::{Body, Envelope, PayloadMode, TaskSubmit};
//!
//! let json = r#"{
//!   "message_id": "msg-005", "session_id": "s-1",
//!   "from": "ldp:delegate:router-alpha", "to": "ldp:delegate:qwen3-8b",
//!   "body": {"type": "TASK_SUBMIT", "task_id": "task-001", "skill": "reasoning",
//!            "input": {"task_type": "analysis", "instruction": "Compare two designs"}},
//!   "payload_mode": "semantic_frame", "timestamp": "2026-03-09T10:00:04Z", "provenance": null
//! }"#;
//! let envelope = Envelope::from_json(json)?;
//! let Body::TaskSubmit(TaskSubmit { skill, input, .. }) = &envelope.body else { unreachable!() };
//! assert_eq!(skill, "reasoning");
//! // The payload is read into whatever type its reader wants.
//! #[derive(serde::Deserialize)]
//! struct Analysis<'a> { instruction: &'a str }
//! assert_eq!(input.parse::<Analysis>()?.instruction, "Compare two designs");
//! assert_eq!(envelope.payload_mode, PayloadMode::SemanticFrame);
//! let again = Envelope::from_json(&envelope.to_json()?)?;
//! assert_eq!(again, envelope);
//! # Ok::<(), ldp_types::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

mod check;
mod contract;
pub mod criteria;
mod envelope;
mod error;
mod identity;
mod jcs;
mod json;
mod messages;
mod payload;
mod provenance;
mod raw;
pub mod receipt;
pub mod schema;
mod score;
pub mod signing;
pub mod time;
pub mod trace_context;

pub use check::MAX_DEPTH as MAX_JSON_DEPTH;
pub use contract::{
    Budget, ContractCheck, ContractLimits, ContractOutcome, ContractPolicy, ContractViolation, DelegationContract,
    FailurePolicy, apply_contract, check_output,
};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use envelope::{_scanner_decodes, _serde_decodes};
pub use envelope::{Body, Envelope};
pub use error::{Code, Error, ErrorCategory, ErrorSeverity, LdpError, codes};
pub use identity::{
    AgentCardLabels, Capability, ClaimType, CostTier, DelegateId, IdentityCard, QualityMetrics, TrustDomain,
    TrustViolation,
};
pub use messages::{
    Attestation, CapabilityManifest, Hello, Manifest, MessageType, SessionAccept, SessionClose, SessionConfig,
    SessionPropose, SessionReject, TaskCancel, TaskFailed, TaskResult, TaskSubmit, TaskUpdate, UnknownBody,
};
pub use payload::{IMPLEMENTED_MODES, Negotiated, PayloadMode, SemanticFrame, negotiate, validate_payload};
pub use provenance::{EvidenceRef, LineageEntry, Provenance, VerificationStatus};
pub use raw::RawJson;
pub use receipt::UsageReceipt;
pub use score::Score;

/// The LDP RFC version this crate implements.
pub const PROTOCOL_VERSION: &str = "0.1";

/// The README's example, compiled and run with the doc tests so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
