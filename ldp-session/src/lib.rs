//! The LDP session layer: a transport-agnostic, sans-IO state machine for both sides of a session, and (with the
//! opt-in `runtime` feature) the async glue that joins it to a delegate and a transport. Without `runtime` the crate
//! depends on no async runtime or IO crate (`scripts/check-sans-io` enforces it in CI).
//!
//! ```text
//!   transport (HTTP, WebSocket, in-memory)          application
//!        │ bytes + PeerContext                        ▲ events
//!        ▼                                            │
//!   Responder::handle ──► Outcome::{Reply, Execute, Cancel, Accepted}
//!                               │ Execute(TaskRequest) ──► Delegate ──► complete_task / fail_task ──► TASK_RESULT
//!   Initiator::{hello, propose, submit, close} ──► Envelope ──► transport ──► Initiator::handle ──► InitiatorEvent
//! ```
//!
//! The machines never read a clock or do IO: monotonic time is passed in (`now: Instant`), wall-clock time and ids
//! come from the injected [`WallClock`] and [`IdSource`]. Every rule (trust at establishment, TTL expiry, payload
//! fallback, contracts, delegation depth, signatures and replay, capacity) is therefore testable deterministically.
//!
//! A full exchange between the two machines, with no transport at all:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Instant;
//! use ldp_session::*;
//! use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, SessionConfig};
//!
//! let clock = Arc::new(ManualClock::new(time::OffsetDateTime::UNIX_EPOCH));
//! let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "none", "1");
//! card.capabilities.push(Capability::new("echo"));
//! let mut responder = Responder::new(ResponderConfig::new(card), clock.clone(), Box::new(SeededIds::new(1)));
//! let mut initiator = Initiator::new(
//!     InitiatorConfig::new("ldp:delegate:client"), "ldp:delegate:echo", clock, Box::new(SeededIds::new(2)));
//! let now = Instant::now();
//! let peer = PeerContext::default();
//!
//! // Propose, accept.
//! let propose = initiator.propose(SessionConfig::default());
//! let Ok(Outcome::Reply(accept)) = responder.handle_envelope(now, &peer, propose, None) else { panic!() };
//! initiator.handle_envelope(accept, None).unwrap();
//! let Some(InitiatorEvent::SessionEstablished { session_id, .. }) = initiator.poll_event() else { panic!() };
//!
//! // Submit; the delegate runs; the result comes back with provenance.
//! let submit = initiator.submit(&session_id, "echo", serde_json::json!("hi"), None, None).unwrap();
//! let Ok(Outcome::Execute(task)) = responder.handle_envelope(now, &peer, submit, None) else { panic!() };
//! let output = TaskOutput::new(serde_json::json!({ "echo": task.input }));
//! let Ok(Delivery::Send(result)) = responder.complete_task(now, &task.key, output) else { panic!() };
//! initiator.handle_envelope(result, None).unwrap();
//! let Some(InitiatorEvent::TaskCompleted { provenance, .. }) = initiator.poll_event() else { panic!() };
//! assert_eq!(provenance.produced_by, "ldp:delegate:echo");
//! assert_eq!(provenance.session_id.as_deref(), Some(session_id.as_str()));
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]
// Envelopes are large (a TASK_RESULT carries its provenance inline) and are moved once per message; boxing them
// would add an allocation per message for no measurable gain.
#![allow(clippy::result_large_err, clippy::large_enum_variant)]

mod backoff;
mod clock;
mod config;
mod error;
mod held;
mod initiator;
mod keyed;
mod refusals;
mod responder;
mod security;
// Its rules link to the `Store` methods that run them, which exist only with the `runtime` feature.
#[cfg_attr(not(feature = "runtime"), allow(rustdoc::broken_intra_doc_links))]
pub mod shared;
pub mod spans;

#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "runtime")]
pub mod store;

pub use backoff::Backoff;
pub use clock::{IdSource, ManualClock, SeededIds, SystemClock, WallClock};
pub use config::{DeclaredDomains, FallbackStyle, InitiatorConfig, Limits, ResponderConfig, TrustPolicy};
pub use error::{Misuse, PeerMisbehaved, Refusal, SessionError};
pub use held::{HeldAnswer, HeldLimits, HeldStats};
pub use initiator::{
    DEFAULT_MAX_RESUMES, DEFAULT_RESUME_GRACE, Expired, Initiator, InitiatorEvent, ResumeVerdict, Transmit,
    delegated_contract, fit_payload,
};
pub use refusals::{REFUSAL_LINE_EVERY, REFUSAL_QUIET_AFTER, RefusalLine, RefusalLog};
pub use responder::{
    Aborted, AuthenticatedPeer, Checked, DelegatedHop, Delivery, History, HistoryItem, InboundCheck, Outcome,
    PeerContext, Responder, ResponderEvent, SharedEnd, TaskOutput, TaskRequest, TaskStatus, Turn, Turns, source_of,
};
pub use security::{ReplayConfig, ReplayGuard, SecurityConfig, SignaturePolicy, replay_room};

/// The RFC 5.1 session lifecycle states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::exhaustive_enums)] // Closed by definition: the RFC 5.1 lifecycle states.
pub enum SessionState {
    /// HELLO sent, nothing proposed yet.
    Initiating,
    /// SESSION_PROPOSE sent, no answer yet.
    Proposed,
    /// Accepted; tasks may be submitted.
    Active,
    /// The transport dropped; resumes on the peer's next message within the TTL.
    Suspended,
    /// Closed by either side (or expired).
    Closed,
    /// Rejected.
    Failed,
}

/// Identifies a task: its session and its id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey {
    /// The session.
    pub session_id: String,
    /// The task id.
    pub task_id: String,
}
