//! The responder's public vocabulary: what a transport tells it about the peer, what it asks the driver to do,
//! and what it reports.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use ldp_types::{
    DelegationContract, Envelope, EvidenceRef, LdpError, PayloadMode, Provenance, RawJson, Score, VerificationStatus,
};

use crate::TaskKey;

use super::History;

/// What the transport learned about the peer, independent of what the peer's messages claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerContext {
    /// The authenticated identity, when the transport authenticated the peer (bearer token, mTLS).
    pub authenticated: Option<AuthenticatedPeer>,
    /// The connection the message arrived on (WebSocket), for suspend and resume.
    pub connection: Option<u64>,
    /// A non-secret label of the credential that authenticated the peer (e.g. a digest of its bearer token, the
    /// fingerprint of its client certificate), set by the transport's authentication layer. Two credentials have
    /// two labels even when they map to the same trust domain: sessions and quotas are bound to it (see
    /// [`PeerContext::principal`]). Never the credential itself.
    pub principal: Option<Arc<str>>,
    /// The network address the peer connects from, as the transport determined it (the socket's peer, or the
    /// client a trusted proxy names). An unauthenticated peer's quotas are keyed on it ([`PeerContext::source`]),
    /// never on the `from` it declares alone. `None` for in-process transports.
    pub address: Option<IpAddr>,
    /// The scopes the credential grants (an OAuth access token's `scope` or `scp` claim), or `None` for a
    /// credential that carries none (a static token, a client certificate, no credential). A skill that requires a
    /// scope ([`ResponderConfig::skill_scopes`](crate::ResponderConfig::skill_scopes)) refuses a peer without it.
    pub scopes: Option<Arc<[String]>>,
}

impl PeerContext {
    /// Whether the credential grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.as_deref().is_some_and(|granted| granted.iter().any(|s| s == scope))
    }

    /// The source an unauthenticated peer's quotas count against: its address, an IPv6 one by its /64 prefix (which
    /// one host usually controls whole), an IPv4-mapped one as the IPv4 address.
    pub fn source(&self) -> Option<IpAddr> {
        self.address.map(source_of)
    }

    /// The principal sessions, session caps and replay quotas are bound to when the peer is authenticated: the
    /// transport's credential label, or else the authenticated delegate id and trust domain. `None` for an
    /// unauthenticated peer, which the machine knows only by the `from` it declares.
    pub fn principal(&self) -> Option<Cow<'_, str>> {
        if let Some(label) = &self.principal {
            return Some(Cow::Borrowed(label));
        }
        self.authenticated.as_ref().map(|a| {
            Cow::Owned(format!("domain:{}/delegate:{}", a.trust_domain, a.delegate_id.as_deref().unwrap_or("")))
        })
    }
}

/// The quota source of `address`: IPv6 addresses by their /64 prefix, IPv4-mapped ones as IPv4, IPv4 as they are.
/// Every limit keyed on a network address uses it, so that they agree on who one source is.
pub fn source_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// An identity established by the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedPeer {
    /// The delegate id the credential belongs to, if the credential names one.
    pub delegate_id: Option<String>,
    /// The trust domain the credential belongs to.
    pub trust_domain: String,
}

/// A task the delegate must run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRequest {
    /// Session and task id.
    pub key: TaskKey,
    /// The declared skill.
    pub skill: String,
    /// The input, valid for `payload_mode`, as received ([`RawJson::parse`] reads it).
    pub input: RawJson,
    /// The mode the input is in.
    pub payload_mode: PayloadMode,
    /// The delegation contract, if any.
    pub contract: Option<DelegationContract>,
    /// The initiator's id.
    pub peer: String,
    /// The session's earlier tasks, oldest first (RFC 5.3 session context), as they stood when this task was
    /// accepted; bounded by [`Limits::context_turns`](crate::Limits::context_turns) and
    /// [`Limits::context_bytes`](crate::Limits::context_bytes).
    pub history: History,
}

/// What a delegate produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskOutput {
    /// The output.
    pub output: RawJson,
    /// Self-reported confidence.
    pub confidence: Option<Score>,
    /// Tokens used.
    pub tokens_used: Option<u64>,
    /// Cost in USD.
    pub cost_usd: Option<f64>,
    /// How the output was verified.
    pub verification_status: VerificationStatus,
    /// Evidence references.
    pub evidence: Vec<EvidenceRef>,
    /// Results obtained by re-delegating, in the order they came; each becomes a lineage entry followed by its own
    /// lineage.
    pub delegated: Vec<DelegatedHop>,
    /// Prompt (input) tokens, for the usage receipt ([`ResponderConfig::receipt_key`](crate::ResponderConfig)).
    pub tokens_in: Option<u64>,
    /// Completion (output) tokens, for the usage receipt.
    pub tokens_out: Option<u64>,
    /// The model that produced the output as its provider named it: the provenance's `model_version` and the usage
    /// receipt's `model` (the card's `model_version` when unset).
    pub model: Option<String>,
}

/// A result obtained by re-delegating: its provenance, and its lineage entry (step `delegated`), which adds what the
/// delegating side knows of the hop and the result does not carry (the skill it ran, its latency).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DelegatedHop {
    /// The sub-task's provenance; its own lineage follows the hop's entry.
    pub provenance: Provenance,
    /// The hop's lineage entry.
    pub entry: ldp_types::LineageEntry,
}

impl DelegatedHop {
    /// A hop whose result carried `provenance`, its entry [`ldp_types::LineageEntry::of_result`] with step
    /// `delegated`, refined by `describe` (e.g. `|entry| entry.with_skill("summarize").with_latency_ms(17)`).
    pub fn new(
        provenance: Provenance,
        describe: impl FnOnce(ldp_types::LineageEntry) -> ldp_types::LineageEntry,
    ) -> Self {
        let entry = describe(ldp_types::LineageEntry::of_result(&provenance, "delegated"));
        Self { provenance, entry }
    }
}

impl From<Provenance> for DelegatedHop {
    fn from(provenance: Provenance) -> Self {
        Self::new(provenance, |entry| entry)
    }
}

impl TaskOutput {
    /// An unverified output with no usage figures; `output` may be a `serde_json::Value`, a [`RawJson`] or a `&str`.
    pub fn new(output: impl Into<RawJson>) -> Self {
        Self { output: output.into(), ..Self::default() }
    }
}

/// What to do with an inbound message that was accepted.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed on purpose: a driver must act on every outcome, so a new one breaks its build.
pub enum Outcome {
    /// Send this reply.
    Reply(Envelope),
    /// Run this task, then report with `complete_task` or `fail_task`.
    Execute(TaskRequest),
    /// Stop these running tasks and send the reply (TASK_CANCEL, SESSION_CLOSE). The same tasks are queued for
    /// [`Responder::poll_aborted`](crate::Responder::poll_aborted), with the definite answer for each one's submitter.
    Cancel {
        /// The reply to send.
        reply: Envelope,
        /// Tasks to abort.
        cancelled: Vec<TaskKey>,
    },
    /// Accepted; nothing to send (ATTESTATION).
    Accepted,
}

/// Whether a finished task's reply can go out now.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed on purpose: a reply is sent or held; a driver must handle both.
pub enum Delivery {
    /// Send it.
    Send(Envelope),
    /// The session is suspended; the reply is held (within [`Limits::held`](crate::Limits::held)) and returned by
    /// [`Responder::take_held`](crate::Responder::take_held) after resume.
    Held,
}

/// A running task the machine ended on its own account (TASK_CANCEL, SESSION_CLOSE from either side, session
/// expiry): the driver must stop the delegate's work for `key` and answer whoever awaits its result with `reply`.
#[derive(Debug, Clone, PartialEq)]
pub struct Aborted {
    /// The task.
    pub key: TaskKey,
    /// The definite TASK_FAILED (`CANCELLED`, saying why) for the task's submitter, built and signed by the machine.
    pub reply: Envelope,
}

/// Something that happened, for the application to observe.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResponderEvent {
    /// A session became active.
    SessionEstablished {
        /// The session.
        session_id: String,
        /// The initiator.
        peer: String,
        /// The initiator's trust domain as established.
        peer_domain: String,
        /// The negotiated mode.
        mode: PayloadMode,
    },
    /// A proposal was rejected.
    SessionRejected {
        /// The proposing peer.
        peer: String,
        /// Why.
        error: LdpError,
    },
    /// A session ended by SESSION_CLOSE.
    SessionClosed {
        /// The session.
        session_id: String,
        /// Its tasks that were still running and were aborted (also queued for
        /// [`Responder::poll_aborted`](crate::Responder::poll_aborted)).
        aborted: Vec<TaskKey>,
    },
    /// A session expired through inactivity and was reaped.
    SessionExpired {
        /// The session.
        session_id: String,
        /// Its tasks that were still running and were aborted (also queued for
        /// [`Responder::poll_aborted`](crate::Responder::poll_aborted)).
        aborted: Vec<TaskKey>,
    },
    /// A session was suspended (its connection dropped).
    SessionSuspended {
        /// The session.
        session_id: String,
    },
    /// A suspended session resumed.
    SessionResumed {
        /// The session.
        session_id: String,
    },
    /// The payload mode of a session fell back.
    ModeFellBack {
        /// The session.
        session_id: String,
        /// The failed mode.
        from: PayloadMode,
        /// The new mode.
        to: PayloadMode,
    },
    /// An ATTESTATION arrived in an active session.
    AttestationReceived {
        /// The session.
        session_id: String,
        /// The sender.
        from: String,
        /// The attestation.
        attestation: ldp_types::Attestation,
    },
}

/// How a task ended, as recorded in the session history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::exhaustive_enums)] // Closed by definition: the three ways a task ends (RFC 3.2: result, failure, cancel).
pub enum TaskStatus {
    /// It produced a TASK_RESULT.
    Completed,
    /// It produced a TASK_FAILED.
    Failed,
    /// It was cancelled.
    Cancelled,
}

/// One entry of a session's bounded history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryItem {
    /// The task.
    pub task_id: String,
    /// Its skill.
    pub skill: String,
    /// How it ended.
    pub status: TaskStatus,
}
