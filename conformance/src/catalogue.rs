//! The requirement catalogue, frozen per spec version: LDP RFC 0.1 plus the provenance-paradox paper's extensions.
//!
//! Every requirement names the spec section and the sentence it comes from, its [`Level`], the [`Feature`] it
//! depends on (when it applies only to implementations that claim something) and the checks that exercise it. The
//! catalogue is also committed as `conformance/catalogue/ldp-0.1.json` and `.md`; a test fails when they are stale
//! (regenerate with `UPDATE_CATALOGUE=1 cargo test -p ldp-conformance --test integration catalogue::`).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::probe::TransportKind;

/// The spec version this catalogue is frozen for.
pub const SPEC_VERSION: &str = "LDP RFC 0.1 + provenance-paradox extensions (paper sections 3.1-3.4)";

/// How strongly the spec asks for a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum Level {
    /// RFC "MUST" (and the kit's liveness requirements derived from it): a failure fails the run.
    Must,
    /// RFC "SHOULD": a failure is a warning.
    Should,
    /// Optional behaviour: a failure is informational.
    May,
    /// The paper's backward-compatible extensions: a failure fails the run (conditional ones only when claimed).
    Extension,
}

impl Level {
    /// The upper-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Must => "MUST",
            Self::Should => "SHOULD",
            Self::May => "MAY",
            Self::Extension => "EXTENSION",
        }
    }

    /// Whether a failure at this level fails the run.
    pub const fn is_mandatory(self) -> bool {
        matches!(self, Self::Must | Self::Extension)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A capability an implementation may claim. Requirements that depend on one are SKIPPED when it is not claimed,
/// and tested (so mandatory at their level) when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Feature {
    /// Signed messages: the card's metadata mentions signing, replies carry signatures, or the operator passed
    /// `--sign`.
    Signing,
    /// Payload mode 1: the card lists `semantic_frame` in `supported_payload_modes`.
    SemanticFrame,
    /// Delegation contracts (paper 3.1): the card's metadata mentions contracts, or provenance reports a
    /// `contract_id`.
    Contracts,
    /// Claimed-vs-attested identity (paper 3.2): a capability carries a `claim_type`.
    ClaimTypes,
    /// Verification status (paper 3.4): a provenance record carries `verification_status`.
    VerificationStatus,
    /// The streaming endpoint (RFC 8.1 `POST /ldp/stream`): a capability declares `supports_streaming`, or the
    /// endpoint answers a task with `2xx`.
    Streaming,
}

impl Feature {
    /// The wire-style name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Signing => "signing",
            Self::SemanticFrame => "semantic_frame",
            Self::Contracts => "contracts",
            Self::ClaimTypes => "claim_types",
            Self::VerificationStatus => "verification_status",
            Self::Streaming => "streaming",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One requirement of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// Stable id, e.g. `LDP-IDENT-001`.
    pub id: &'static str,
    /// A short title.
    pub title: &'static str,
    /// The spec section(s), e.g. `RFC 2.3, 10.1.1`.
    pub section: &'static str,
    /// The sentence of the spec it comes from (quoted), with the kit's reading where one is needed.
    pub source: &'static str,
    /// How strongly it is required.
    pub level: Level,
    /// The capability it depends on, if any.
    pub applies_when: Option<Feature>,
    /// The ids of the checks that exercise it.
    pub checks: &'static [&'static str],
}

impl Requirement {
    /// The binding a requirement belongs to, if only one: the `LDP-HTTP-*` requirements are about the HTTP binding
    /// (RFC 8), and a run without HTTP reports them as not applicable rather than judging them.
    pub fn binding(&self) -> Option<TransportKind> {
        self.id.starts_with("LDP-HTTP-").then_some(TransportKind::Http)
    }
}

macro_rules! req {
    ($id:literal, $level:ident, $when:expr, $section:literal, $title:literal, $source:literal, [$($check:literal),+ $(,)?]) => {
        Requirement {
            id: $id,
            title: $title,
            section: $section,
            source: $source,
            level: Level::$level,
            applies_when: $when,
            checks: &[$($check),+],
        }
    };
}

use Feature::*;

/// The catalogue, in report order.
pub const CATALOGUE: &[Requirement] = &[
    req!(
        "LDP-IDENT-001",
        Must,
        None,
        "RFC 2.3, 10.1.1",
        "Identity card at /.well-known/ldp-identity",
        "\"Delegates MUST serve their identity card at `GET <endpoint>/.well-known/ldp-identity`.\" \"Response: `200 OK` with `Content-Type: application/json`\"; 10.1: \"Publish an identity card at `/.well-known/ldp-identity`\".",
        ["identity.discovery"]
    ),
    req!(
        "LDP-IDENT-002",
        Must,
        None,
        "RFC 2.1",
        "Identity card carries every required field",
        "\"Every LDP delegate MUST publish an identity card containing the following fields\": delegate_id, name, model_family, model_version, trust_domain, context_window, capabilities, supported_payload_modes, endpoint, with their types. Judged with a strict schema of RFC 2.1/2.2 (not the liberal decoder): `trust_domain` a TrustDomain object (7.1), capabilities objects with a `name`, payload modes and cost tiers from the RFC's enums, `endpoint` a URL (\"URL endpoint for the delegate\"); members the RFC does not name are allowed.",
        ["identity.discovery"]
    ),
    req!(
        "LDP-IDENT-003",
        Must,
        None,
        "RFC 2.1",
        "delegate_id has the form ldp:delegate:<name>",
        "\"`delegate_id` | string | Unique identifier (format: `ldp:delegate:<name>`)\".",
        ["identity.discovery"]
    ),
    req!(
        "LDP-IDENT-004",
        Should,
        None,
        "RFC 2.2",
        "Capabilities carry quality metadata",
        "\"Each capability entry carries quality and cost metadata\" (either the RFC's `quality_hint` shape or the reference SDKs' `quality` block, scores in 0.0-1.0).",
        ["identity.discovery"]
    ),
    req!(
        "LDP-IDENT-005",
        May,
        None,
        "RFC 2.3 (reference-SDK practice)",
        "Identity card also at /ldp/identity",
        "Both reference clients discover at `GET /ldp/identity`; serving the same card there lets them connect. Not required by the RFC.",
        ["identity.discovery"]
    ),
    req!(
        "LDP-ENV-001",
        Must,
        None,
        "RFC 3.1",
        "Replies are complete envelopes",
        "\"All LDP messages are wrapped in an envelope\" with `message_id`, `session_id`, `from`, `to`, `body` (with `type`), `payload_mode` and `timestamp`.",
        ["wire.envelopes"]
    ),
    req!(
        "LDP-ENV-002",
        Must,
        None,
        "RFC 3.1",
        "Envelope timestamps are RFC 3339 date-times",
        "\"timestamp\": \"<ISO 8601>\" (read as RFC 3339, the ISO 8601 profile both reference SDKs write).",
        ["wire.envelopes"]
    ),
    req!(
        "LDP-ENV-003",
        Must,
        None,
        "RFC 3.1, 7.3",
        "Message ids are unique",
        "\"Message | Envelope fields | Message ID, session ID, timestamp for replay detection\": a message id that repeats defeats replay detection, so no two replies share one.",
        ["wire.envelopes"]
    ),
    req!(
        "LDP-ENV-004",
        Should,
        None,
        "RFC 3.1",
        "Message ids are UUIDs",
        "\"message_id\": \"<uuid>\".",
        ["wire.envelopes"]
    ),
    req!(
        "LDP-ENV-005",
        Must,
        None,
        "RFC 3.1",
        "Replies come from the card's delegate id, to the sender",
        "\"from\": \"<delegate_id>\", \"to\": \"<delegate_id>\": a reply's `from` is the responder's `delegate_id` (as on its card) and its `to` is the requester's id.",
        ["wire.envelopes"]
    ),
    req!(
        "LDP-CORR-001",
        Must,
        None,
        "RFC 3.2, 3.3, 10.1.5",
        "A task's replies name the submitted task",
        "3.3: TASK_SUBMIT `\"task_id\": \"task-001\"` is answered by TASK_RESULT `\"task_id\": \"task-001\"`; 3.2: TASK_UPDATE is the \"Task progress update\" and TASK_RESULT the \"Task completion\" of that task. A TASK_UPDATE or TASK_RESULT (and a TASK_FAILED that names a task) carries the submitted `task_id`, on every transport and on the stream; otherwise the initiator cannot tell which task completed (MUST: 10.1 requires the lifecycle \"HELLO through SESSION_CLOSE\", which a result for no known task does not complete).",
        ["wire.correlation"]
    ),
    req!(
        "LDP-CORR-002",
        Must,
        None,
        "RFC 3.1, 7.3",
        "A reply has a message id of its own",
        "3.1: every message's envelope carries its own `message_id`; 7.3: \"Message ID, session ID, timestamp for replay detection\". A reply that reuses the request's `message_id` is indistinguishable from a replay of it to any replay cache.",
        ["wire.correlation"]
    ),
    req!(
        "LDP-CORR-003",
        Should,
        None,
        "RFC 3.1, 3.3",
        "SESSION_ACCEPT names one session",
        "3.3: SESSION_ACCEPT carries the established `session_id` in its body; 3.1: the envelope's `session_id` is the session of the message. When both are present they agree. SHOULD: the RFC shows the two members but states no rule between them.",
        ["wire.correlation"]
    ),
    req!(
        "LDP-SCHEMA-001",
        Must,
        None,
        "RFC Appendix A",
        "Every wire message validates against the LDP JSON schemas",
        "\"Full JSON schemas for all LDP types are available in the reference implementation\": the identity card, every reply envelope and every error object validate against the schemas of `ldp-types` (which accept every shape the reference SDKs send).",
        ["identity.discovery", "wire.schema"]
    ),
    req!(
        "LDP-HTTP-001",
        Must,
        None,
        "RFC 8.2",
        "Replies are application/json",
        "\"All LDP messages use `Content-Type: application/json`.\" (HTTP binding only; WebSocket text frames carry JSON by definition.)",
        ["wire.content_type"]
    ),
    req!(
        "LDP-HTTP-002",
        Must,
        Some(Streaming),
        "RFC 8.1",
        "Streaming endpoint answers with server-sent events",
        "\"**Streaming:** `POST <endpoint>/ldp/stream` → Server-sent events (SSE) for TASK_UPDATE\". A TASK_SUBMIT posted there is answered `2xx` with `Content-Type: text/event-stream`; each event's data is one LDP envelope: TASK_UPDATEs for the task, then its TASK_RESULT or TASK_FAILED, within the request timeout.",
        ["http.stream"]
    ),
    req!(
        "LDP-MSG-001",
        Must,
        None,
        "RFC 3.2, 5.2",
        "HELLO is answered with CAPABILITY_MANIFEST",
        "\"`HELLO` | Initiator → Responder | Initial handshake\"; \"`CAPABILITY_MANIFEST` | Responder → Initiator | Capability declaration\"; 5.2: HELLO → CAPABILITY_MANIFEST, declaring at least one capability (a manifest of nothing declares nothing to delegate to).",
        ["handshake.hello"]
    ),
    req!(
        "LDP-MSG-008",
        Should,
        None,
        "RFC 3.2, 7.3, 2.2",
        "The CAPABILITY_MANIFEST declares what the card declares",
        "3.2: \"`CAPABILITY_MANIFEST` | Responder → Initiator | Capability declaration\"; 7.3: \"Policy | Capability manifest | Task validated against declared capabilities\". The manifest names the card's capabilities (and, when it lists payload modes, the card's modes), so an initiator routing on either sees one delegate. SHOULD: the RFC defines no field-by-field rule between the two documents.",
        ["handshake.manifest"]
    ),
    req!(
        "LDP-MSG-002",
        Must,
        None,
        "RFC 3.2, 5.2",
        "SESSION_PROPOSE is answered with SESSION_ACCEPT or SESSION_REJECT",
        "\"`SESSION_ACCEPT` | Responder → Initiator | Accept session, confirm negotiated mode\"; \"`SESSION_REJECT` | Responder → Initiator | Reject session with reason\".",
        ["session.lifecycle"]
    ),
    req!(
        "LDP-MSG-003",
        Must,
        None,
        "RFC 3.2, 5.2",
        "TASK_SUBMIT is answered with TASK_RESULT or TASK_FAILED",
        "\"`TASK_RESULT` | Responder → Initiator | Task completion with provenance\"; \"`TASK_FAILED` | Responder → Initiator | Task failure with error\".",
        ["session.lifecycle"]
    ),
    req!(
        "LDP-MSG-004",
        Must,
        None,
        "RFC 3.2",
        "TASK_CANCEL gets a defined answer",
        "\"`TASK_CANCEL` | Initiator → Responder | Cancel a running task\": answered with an acknowledgement (TASK_UPDATE/TASK_FAILED `CANCELLED`) or a typed error for a task that is not running.",
        ["task.cancel"]
    ),
    req!(
        "LDP-MSG-005",
        Must,
        None,
        "RFC 3.2, 5.2",
        "SESSION_CLOSE is acknowledged",
        "\"`SESSION_CLOSE` | Either | Terminate session\"; 5.2 ends the lifecycle with SESSION_CLOSE.",
        ["session.lifecycle"]
    ),
    req!(
        "LDP-MSG-006",
        Should,
        None,
        "RFC 3.2",
        "ATTESTATION is accepted",
        "\"`ATTESTATION` | Either | Trust attestation signal\": a responder accepts one within a session rather than failing it.",
        ["message.attestation"]
    ),
    req!(
        "LDP-MSG-007",
        Should,
        None,
        "RFC 3.2",
        "Responder-only message types sent to a responder get a typed error",
        "The direction column of RFC 3.2: a TASK_RESULT sent to a responder is answered with a typed error, not processed. TASK_UPDATE is \"Responder → Initiator | Task progress update\" too, and the RFC gives no meaning to one a responder receives: a responder refuses it with a typed error or answers it in the RFC's direction (a TASK_UPDATE carrying the task's status: the status query of the Rust reference crate and of ldp-rs); it never takes it as progress of a task.",
        ["message.wrong_direction"]
    ),
    req!(
        "LDP-PAYLOAD-001",
        Must,
        None,
        "RFC 4.1, 10.1.2",
        "Mode 0 (text) is supported",
        "\"Every delegate MUST support Mode 0 (Text).\"; 10.1: \"Support Mode 0 (Text) payload\". The card lists `text` and a text-mode task completes.",
        ["identity.discovery", "session.lifecycle", "negotiation.modes"]
    ),
    req!(
        "LDP-PAYLOAD-002",
        Should,
        None,
        "RFC 10.2.1, 4.1",
        "Mode 1 (semantic frame) is supported",
        "10.2: \"Support Mode 1 (Semantic Frame) payload\": the card lists `semantic_frame`, it is negotiated when preferred, and a frame task completes.",
        ["negotiation.modes"]
    ),
    req!(
        "LDP-PAYLOAD-003",
        Must,
        Some(SemanticFrame),
        "RFC 4.2, 4.4",
        "A claimed semantic_frame mode works",
        "A card that lists `semantic_frame` claims it: it is negotiated when the initiator prefers it, and a frame with the \"Required fields: `task_type`, `instruction`\" completes.",
        ["negotiation.modes"]
    ),
    req!(
        "LDP-NEG-001",
        Must,
        None,
        "RFC 4.2",
        "Negotiation selects the best common mode, else text",
        "\"The negotiation algorithm selects the highest-preference implemented mode supported by both parties\"; \"If no common implemented mode found → fall back to Mode 0 (Text)\".",
        ["negotiation.modes", "negotiation.preference"]
    ),
    req!(
        "LDP-NEG-002",
        Should,
        None,
        "RFC 4.2",
        "SESSION_ACCEPT carries the fallback chain",
        "\"Build fallback chain from remaining common modes with lower mode numbers\"; the RFC's diagram shows `fallback_chain` in SESSION_ACCEPT.",
        ["negotiation.modes"]
    ),
    req!(
        "LDP-NEG-003",
        Should,
        None,
        "RFC 5.3, 4.2",
        "A task in a mode the session did not negotiate is refused",
        "5.3: \"Within an active session: ... Payload mode is fixed (unless fallback occurs)\"; 4.2: the mode is the one negotiated. A task sent in a mode the card does not list, or in a listed mode richer than the session's, is refused with a typed error or run in the negotiated mode with `payload_mode_used` saying so; it is never processed as that mode. SHOULD: the RFC states the rule as a property of sessions, without MUST.",
        ["negotiation.unnegotiated_mode"]
    ),
    req!(
        "LDP-FALLBACK-001",
        Should,
        None,
        "RFC 10.2.2, 4.3",
        "Payload mode fallback is implemented",
        "10.2: \"Implement payload mode fallback\"; 4.3: \"If a payload mode fails mid-session (e.g., schema validation error), the protocol falls back through the negotiated fallback chain\". An invalid frame either fails with a typed error and the task then completes in text (the RFC's diagram), or runs transparently in a lower mode that provenance names (\"Fallback is automatic and transparent\").",
        ["payload.fallback"]
    ),
    req!(
        "LDP-FALLBACK-002",
        Must,
        Some(SemanticFrame),
        "RFC 4.3",
        "A payload-mode failure does not end the session",
        "\"Delegates MUST NOT terminate a session due to a payload mode failure if a fallback mode is available.\"",
        ["payload.fallback"]
    ),
    req!(
        "LDP-SESS-001",
        Must,
        None,
        "RFC 10.1.5, 5.2",
        "Full session lifecycle",
        "10.1: \"Implement the full session lifecycle (HELLO through SESSION_CLOSE)\": HELLO, SESSION_PROPOSE, SESSION_ACCEPT (its `session_id` used from then on), TASK_SUBMIT, TASK_RESULT, SESSION_CLOSE.",
        ["session.lifecycle"]
    ),
    req!(
        "LDP-SESS-002",
        Must,
        None,
        "RFC 5.2, 10.1.5",
        "A task for an unknown session is refused with a typed error",
        "\"`TASK_SUBMIT` | Initiator → Responder | Submit task within session\": a session the responder never accepted is not a session, whatever the id looks like (empty, missing, a fresh well-formed UUID, not a UUID), on every transport and on `/ldp/stream`.",
        ["session.unknown", "session.unknown_ids"]
    ),
    req!(
        "LDP-SESS-003",
        Must,
        None,
        "RFC 5.1, 10.1.5",
        "A task for a closed session is refused with a typed error",
        "The lifecycle \"INITIATING → PROPOSED → ACTIVE → CLOSED\": after SESSION_CLOSE the session no longer accepts tasks, on `/ldp/messages`, on `/ldp/stream` (no TASK_RESULT event) and over WebSocket.",
        ["session.closed", "session.closed_stream"]
    ),
    req!(
        "LDP-SESS-004",
        Should,
        None,
        "RFC 10.2.3, 5.4",
        "Sessions expire after their TTL",
        "10.2: \"Support session TTL and expiration\"; 5.4: \"`ttl_secs` | Session timeout (seconds of inactivity)\". A task after the TTL is refused with a typed error (the TTL is `--ttl-hint`, default 2 s).",
        ["session.ttl"]
    ),
    req!(
        "LDP-SESS-005",
        Should,
        None,
        "RFC 5.3, 7.2",
        "A session serves only the peer that established it",
        "5.3: \"Trust domain is validated once at establishment\"; 7.2: \"Trust domain compatibility is checked during session establishment (before SESSION_ACCEPT)\". The check is made for the peer that proposed the session, so a TASK_SUBMIT in it from another sender (another `from`; with `--untrusted-token`, a principal of a foreign domain) is refused with a typed error. SHOULD: the RFC says when trust is validated, not in so many words that a session is bound to its initiator.",
        ["session.foreign_peer"]
    ),
    req!(
        "LDP-TRUST-001",
        Must,
        None,
        "RFC 7.2.1, 10.1.4",
        "required_trust_domain is enforced",
        "\"If the initiator specifies `required_trust_domain`, the responder's domain MUST match\"; 10.1: \"Validate trust domain compatibility during session establishment\".",
        ["trust.required_domain", "trust.domain_variants"]
    ),
    req!(
        "LDP-TRUST-002",
        Must,
        None,
        "RFC 7.2.2-3, 10.1.4",
        "Initiators from untrusted domains are rejected",
        "\"If `allow_cross_domain` is false, cross-domain sessions are rejected\"; \"If `allow_cross_domain` is true, the initiator's domain MUST be in `trusted_peers`\". The kit presents as `conformance-untrusted.invalid` (declared in the proposal, or through `--untrusted-token`).",
        ["trust.foreign_domain", "trust.domain_variants"]
    ),
    req!(
        "LDP-TRUST-003",
        Should,
        None,
        "RFC 3.2; paper 3.3",
        "A rejection carries a typed policy error",
        "\"`SESSION_REJECT` | Reject session with reason\"; paper 3.3: failures carry a structured `LdpError` (trust failures: category `policy` or `identity`).",
        ["trust.required_domain", "trust.foreign_domain", "trust.domain_variants"]
    ),
    req!(
        "LDP-POLICY-001",
        Should,
        None,
        "RFC 7.3",
        "Tasks are validated against declared capabilities",
        "\"Policy | Capability manifest | Task validated against declared capabilities\": a task for an undeclared skill is refused with a typed error.",
        ["task.undeclared_skill"]
    ),
    req!(
        "LDP-PROV-001",
        Must,
        None,
        "RFC 6.1, 10.1.3",
        "Every TASK_RESULT carries provenance with its required fields",
        "\"Every TASK_RESULT message MUST include a provenance record\" with `produced_by`, `model_version`, `payload_mode_used` and `verified` (bool).",
        ["wire.provenance"]
    ),
    req!(
        "LDP-PROV-002",
        Should,
        None,
        "RFC 6.1",
        "Provenance names the producing delegate",
        "\"`produced_by` | Delegate ID that produced the result\": the card's `delegate_id`. SHOULD, not MUST: the kit cannot tell a false `produced_by` from a true one naming another delegate (a router's result is produced by the delegate it routed to), so a mismatch with the card is evidence, not proof. The mode half of this rule is LDP-PROV-005.",
        ["wire.provenance"]
    ),
    req!(
        "LDP-PROV-003",
        Should,
        None,
        "RFC 10.2.4, 6.1",
        "Provenance includes a confidence score",
        "10.2: \"Include confidence scores in provenance (when available)\".",
        ["wire.provenance"]
    ),
    req!(
        "LDP-PROV-004",
        Must,
        None,
        "RFC 6.1",
        "Optional provenance fields are well-formed",
        "\"`confidence` | float? | Self-reported confidence (0.0-1.0)\"; \"`timestamp` | string? | ISO 8601 timestamp of production\"; \"`session_id` | Session in which result was produced\".",
        ["wire.provenance"]
    ),
    req!(
        "LDP-PROV-005",
        Must,
        None,
        "RFC 6.1, 10.1.3, 4.2",
        "payload_mode_used names a mode of the exchange",
        "6.1: \"Every TASK_RESULT message MUST include a provenance record\" with \"`payload_mode_used` | PayloadMode | Yes | Payload mode for this exchange\"; the 4.2 diagram ends in \"TASK_RESULT payload_mode_used=text\", which is how an initiator learns a fallback happened. It is the request's mode or, after a transparent fallback (4.3), the reply's. MUST: unlike `produced_by` the initiator can check it (it knows both modes), and a record that names a mode used in neither is not the provenance record 6.1 requires but a false one.",
        ["wire.provenance"]
    ),
    req!(
        "LDP-ERR-001",
        Extension,
        None,
        "paper 3.3",
        "Failures are typed LdpErrors",
        "\"We replace error strings with a structured `LdpError` carrying category, severity, retryable flag, and optional partial output.\" Every TASK_FAILED and SESSION_REJECT error, and every error object, has `code`, a known `category`, `severity` and `retryable`.",
        ["wire.errors"]
    ),
    req!(
        "LDP-ERR-002",
        Should,
        None,
        "paper 3.3",
        "Error categories follow the paper's table",
        "The category table of paper 3.3: session problems are `session`, trust and contract refusals `policy` (or `identity`), undeclared skills and modes `capability`.",
        [
            "session.unknown",
            "session.closed",
            "session.ttl",
            "trust.required_domain",
            "trust.foreign_domain",
            "task.undeclared_skill",
            "session.unknown_ids",
            "trust.domain_variants"
        ]
    ),
    req!(
        "LDP-EXT-CONTRACT-001",
        Extension,
        None,
        "paper 3.1",
        "A delegation contract is tolerated",
        "\"The contract is an optional field on `TASK_SUBMIT`. Delegates that do not understand contracts process the task normally\".",
        ["contract.tolerated"]
    ),
    req!(
        "LDP-EXT-CONTRACT-002",
        Extension,
        Some(Contracts),
        "paper 3.1",
        "A claimed contract is honoured in provenance",
        "\"Contracts make delegation auditable and bounded\": an implementation that understands contracts reports the `contract_id` in provenance and never reports an expired contract as satisfied.",
        ["contract.tolerated"]
    ),
    req!(
        "LDP-EXT-CLAIM-001",
        Extension,
        Some(ClaimTypes),
        "paper 3.2",
        "Quality claims carry a valid claim_type",
        "\"We add a `claim_type` field to quality metrics\" (`self_claimed`, `runtime_observed`, `issuer_attested`, `externally_benchmarked`); attested claims \"require issuer identity and recency metadata\" (`issuer_id`, `attested_at`).",
        ["identity.discovery"]
    ),
    req!(
        "LDP-EXT-VERIFY-001",
        Extension,
        Some(VerificationStatus),
        "paper 3.4; RFC 6.2",
        "verification_status is valid and consistent",
        "\"We extend provenance with a granular `verification_status` enum (`unverified`, `self_verified`, `peer_verified`, `tool_verified`, `human_verified`)\"; `unverified` contradicts `verified: true`.",
        ["wire.provenance"]
    ),
    req!(
        "LDP-ROBUST-001",
        Must,
        None,
        "paper 3.3; RFC 10.1.5",
        "Malformed JSON gets a typed error; the server survives",
        "Kit requirement: failures are typed (paper 3.3), and a server that stops answering cannot implement the lifecycle (10.1.5). A syntactically invalid body gets a 4xx or in-protocol typed error, never a 5xx, a dropped connection or a hang, and a normal request works afterwards.",
        ["robust.malformed_json"]
    ),
    req!(
        "LDP-ROBUST-002",
        Must,
        None,
        "paper 3.3; RFC 10.1.5",
        "JSON that is not an envelope gets a typed error",
        "Kit requirement (as LDP-ROBUST-001): a JSON value that is not an LDP envelope (no `body`, or a body without `type`) gets a typed error and the server keeps answering.",
        ["robust.not_an_envelope"]
    ),
    req!(
        "LDP-ROBUST-003",
        Must,
        None,
        "RFC 8.2; paper 3.3",
        "A wrong content type gets a defined answer",
        "\"All LDP messages use `Content-Type: application/json`\": an envelope sent as `text/plain` (a binary frame on WebSocket) is either refused with a typed error (e.g. HTTP 415) or processed normally, and the server keeps answering.",
        ["robust.wrong_content_type"]
    ),
    req!(
        "LDP-ROBUST-004",
        Must,
        None,
        "RFC 3.2; paper 3.3",
        "An unknown message type gets a typed error",
        "Only the twelve types of RFC 3.2 exist: any other `type` is answered with a typed error and the server keeps answering.",
        ["robust.unknown_type"]
    ),
    req!(
        "LDP-ROBUST-005",
        Must,
        None,
        "paper 3.3; RFC 10.1.5",
        "An oversize message gets a defined answer",
        "Kit requirement: a message of several MiB is refused with a typed error (e.g. HTTP 413) or processed, never answered by a crash, a 5xx or a hang, and the server keeps answering.",
        ["robust.oversize"]
    ),
    req!(
        "LDP-SEC-001",
        Must,
        Some(Signing),
        "RFC Appendix B, 7.3",
        "Signed messages are accepted and replies are signed",
        "Profile A: \"Identity cards + text payloads + signed messages\". With `--sign ALG --secret S`, a signed exchange completes and each reply carries a signature that verifies.",
        ["security.signed_exchange"]
    ),
    req!(
        "LDP-SEC-002",
        Must,
        Some(Signing),
        "RFC 7.3; paper 3.3",
        "A bad signature is refused with a typed error",
        "\"Message | Envelope fields\" security level: a TASK_SUBMIT whose signature does not verify is refused with a typed error and not executed: a wrong value, an empty, malformed or null signature, an algorithm named `none`, a signature under another algorithm than the configured one (for `hmac-sha256-jcs` the weaker `hmac-sha256`; for `ed25519-jcs` an HMAC keyed with the public key), and a covered member changed after signing.",
        ["security.bad_signature", "security.bad_signatures"]
    ),
    req!(
        "LDP-SEC-003",
        Must,
        Some(Signing),
        "RFC 7.3",
        "A replayed message is refused",
        "\"Message ID, session ID, timestamp for replay detection\": the copy of a signed message (SESSION_PROPOSE, HELLO, TASK_SUBMIT, TASK_CANCEL) is refused with a typed error and not acted on (a task does not run twice; a proposal establishes at most one session); a signed message timestamped an hour in the past or the future is refused, since the timestamp is what detects a replay the message-id cache no longer holds.",
        ["security.replay", "security.replay_all"]
    ),
    req!(
        "LDP-SEC-004",
        Should,
        Some(Signing),
        "RFC 7.3",
        "Unsigned messages are refused by a signing delegate",
        "A delegate that signs requires signatures: an unsigned TASK_SUBMIT, SESSION_PROPOSE, TASK_UPDATE status query (for a task that ran), TASK_CANCEL, ATTESTATION or SESSION_CLOSE is refused with a typed error and not acted on (the session stays open). HELLO is not probed: its answer is the public manifest. SHOULD, not MUST: the RFC names signed messages only in profile A and never says an unsigned one must be refused.",
        ["security.unsigned", "security.unsigned_all"]
    ),
    req!(
        "LDP-AUTH-001",
        Should,
        None,
        "RFC 8.3",
        "Transport-level authentication",
        "\"LDP delegates SHOULD use mutual TLS or bearer tokens for transport-level authentication.\" Without `--token`: passes for an `https` endpoint. With it, every endpoint that takes messages must want it: a HELLO without a token and with an unknown one, a TASK_SUBMIT to `/ldp/stream` without one, and the WebSocket upgrade at `/ldp/ws` without one are each refused (an endpoint the delegate does not offer, 404, is left out); one left open fails.",
        ["transport.auth"]
    ),
];

/// The requirement with this id.
pub fn requirement(id: &str) -> Option<&'static Requirement> {
    CATALOGUE.iter().find(|r| r.id == id)
}

/// The catalogue as JSON (the committed `catalogue/ldp-0.1.json`).
pub fn catalogue_json() -> Value {
    let requirements: Vec<Value> = CATALOGUE
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "title": r.title,
                "level": r.level,
                "section": r.section,
                "source": r.source,
                "applies_when": r.applies_when,
                "binding": r.binding(),
                "checks": r.checks,
            })
        })
        .collect();
    json!({
        "spec": SPEC_VERSION,
        "counts": level_counts(),
        "requirements": requirements,
    })
}

fn level_counts() -> Value {
    let count = |l: Level| CATALOGUE.iter().filter(|r| r.level == l).count();
    json!({
        "MUST": count(Level::Must),
        "SHOULD": count(Level::Should),
        "MAY": count(Level::May),
        "EXTENSION": count(Level::Extension),
        "total": CATALOGUE.len(),
    })
}

/// The catalogue as a Markdown table (the committed `catalogue/ldp-0.1.md`).
pub fn catalogue_markdown() -> String {
    let mut out = format!("# LDP conformance catalogue\n\nSpec: {SPEC_VERSION}.\n\n");
    let count = |l: Level| CATALOGUE.iter().filter(|r| r.level == l).count();
    out.push_str(&format!(
        "{} requirements: {} MUST, {} SHOULD, {} MAY, {} EXTENSION. Generated from `conformance/src/catalogue.rs`; \
         do not edit.\n\n",
        CATALOGUE.len(),
        count(Level::Must),
        count(Level::Should),
        count(Level::May),
        count(Level::Extension)
    ));
    out.push_str("| id | level | applies when | section | requirement | source | checks |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for r in CATALOGUE {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.id,
            r.level,
            r.applies_when.map_or("always", Feature::as_str),
            r.section,
            r.title,
            r.source.replace('|', "\\|"),
            r.checks.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for r in CATALOGUE {
            assert!(r.id.starts_with("LDP-"), "{}", r.id);
            assert!(seen.insert(r.id), "duplicate {}", r.id);
            assert!(!r.checks.is_empty(), "{} has no check", r.id);
        }
    }

    #[test]
    fn rfc_10_is_covered() {
        // 10.1's five MUSTs and 10.2's four SHOULDs.
        for id in ["LDP-IDENT-001", "LDP-PAYLOAD-001", "LDP-PROV-001", "LDP-TRUST-001", "LDP-SESS-001"] {
            assert_eq!(requirement(id).map(|r| r.level), Some(Level::Must), "{id}");
        }
        for id in ["LDP-PAYLOAD-002", "LDP-FALLBACK-001", "LDP-SESS-004", "LDP-PROV-003"] {
            assert_eq!(requirement(id).map(|r| r.level), Some(Level::Should), "{id}");
        }
    }
}
