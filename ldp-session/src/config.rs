//! Configuration of the two machines.

use std::collections::HashMap;
use std::time::Duration;

use ldp_types::{Budget, IMPLEMENTED_MODES, IdentityCard, PayloadMode};

use ldp_types::signing::SigningKey;

use crate::held::HeldLimits;
use crate::security::SecurityConfig;

/// Where a responder takes the initiator's trust domain from when the transport has not authenticated one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeclaredDomains {
    /// Believe the `trust_domain` a peer declares in SESSION_PROPOSE (the reference SDKs' behaviour; for
    /// development only).
    TakeAtWord,
    /// Believe a declared domain only if it is in this list.
    Allow(Vec<String>),
    /// Never believe declarations.
    Ignore,
}

/// How a responder establishes the initiator's trust domain (RFC 7.2).
///
/// An authenticated domain (from a bearer token or a client certificate, supplied by the transport) always wins, and
/// a declaration that contradicts it is refused. Without one, a declared domain is used as `declared_domains` says;
/// without a usable declaration, `unidentified_domain` is assumed, or the session is refused when it is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// What to do with declared domains.
    pub declared_domains: DeclaredDomains,
    /// The domain assumed for an initiator that is neither authenticated nor (acceptably) declared.
    pub unidentified_domain: Option<String>,
}

impl TrustPolicy {
    /// Development defaults, as the reference SDKs behave: declared domains are believed, and a peer that declares
    /// none is taken to be in `own_domain`.
    pub fn permissive(own_domain: &str) -> Self {
        Self { declared_domains: DeclaredDomains::TakeAtWord, unidentified_domain: Some(own_domain.to_owned()) }
    }

    /// Production defaults: only authenticated domains count.
    pub fn strict() -> Self {
        Self { declared_domains: DeclaredDomains::Ignore, unidentified_domain: None }
    }
}

/// Resource limits of a responder.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Most sessions held at once (default 10,000); beyond it proposals get a retryable `CAPACITY_EXCEEDED`.
    pub max_sessions: usize,
    /// Most sessions one principal holds at once (default 100): an authenticated credential
    /// ([`PeerContext::principal`](crate::PeerContext::principal)), else the declared `from`. An unauthenticated peer
    /// can declare many `from` values; `max_sessions` still bounds them all.
    pub max_sessions_per_principal: usize,
    /// Most tasks running at once across all sessions (advertised as `max_concurrent_tasks`).
    pub max_concurrent_tasks: usize,
    /// Finished tasks remembered per session by id and status (for status queries and duplicate task ids).
    pub history_len: usize,
    /// Most earlier tasks a session keeps as its context (RFC 5.3: "no need to re-send prior context"): each one's
    /// skill, input and output, handed to later tasks as [`TaskRequest::history`](crate::TaskRequest::history), and
    /// answered to a status query for a finished task (its output and provenance). Oldest dropped first; 0 keeps
    /// none (default 32).
    pub context_turns: usize,
    /// Most bytes of context a session keeps (inputs, outputs, ids and provenance, approximately; default 256 KiB).
    /// Oldest turns are dropped first; one turn larger than this empties the context, so that what is kept is always
    /// the session's latest turns without gaps. Across sessions the context holds at most `max_sessions` times this.
    pub context_bytes: usize,
    /// Upper bound on a proposed TTL.
    pub max_ttl: Duration,
    /// Per-session budget across all its tasks (tokens and USD, from provenance).
    pub session_budget: Budget,
    /// Most tasks per session.
    pub max_tasks_per_session: Option<u64>,
    /// Ids of expired and closed sessions remembered (so late messages get `SESSION_EXPIRED`/`SESSION_CLOSED`
    /// rather than `SESSION_NOT_FOUND`).
    pub tombstones: usize,
    /// Longest peer-controlled identifier accepted, in bytes: `from`, `to`, `message_id`, `session_id`, `nonce`,
    /// `signature_algorithm`, `task_id`, skill names, contract ids and declared trust domains. Longer ones are
    /// refused (`MALFORMED_MESSAGE`, no reply) before anything is stored.
    pub max_identifier_len: usize,
    /// Without replay protection (unsigned mode), how long a message id is remembered per session so that a
    /// duplicate (same `session_id` and `message_id`, e.g. a resent SESSION_PROPOSE) is refused with
    /// `REPLAY_DETECTED` instead of acting twice (default 5 minutes).
    pub unsigned_dedupe_window: Duration,
    /// Most message ids remembered for that (default 100,000, a 16-byte digest each); beyond it the oldest is
    /// forgotten, never a message refused. 0 turns the deduplication off.
    pub unsigned_dedupe_entries: usize,
    /// Task answers kept for suspended sessions' resume, per session and in total, by count and bytes, and for how
    /// long ([`Responder::take_held`](crate::Responder::take_held)). What does not fit is dropped oldest first, and
    /// the resuming peer gets a TASK_FAILED `RESULT_NOT_KEPT` for each dropped task.
    pub held: HeldLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: 10_000,
            max_sessions_per_principal: 100,
            max_concurrent_tasks: 64,
            history_len: 32,
            context_turns: 32,
            context_bytes: 256 * 1024,
            max_ttl: Duration::from_secs(24 * 3600),
            session_budget: Budget::default(),
            max_tasks_per_session: None,
            tombstones: 65_536,
            max_identifier_len: 256,
            unsigned_dedupe_window: Duration::from_secs(300),
            unsigned_dedupe_entries: 100_000,
            held: HeldLimits::default(),
        }
    }
}

/// How a responder handles a TASK_SUBMIT whose input is invalid in its payload mode while a lower fallback mode
/// remains (RFC 4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FallbackStyle {
    /// Run the task in the first lower mode that accepts the input and move the session there; the result's
    /// `payload_mode_used` says which mode was used. Serves initiators that never resubmit (the reference SDKs).
    #[default]
    Transparent,
    /// Answer TASK_FAILED `PAYLOAD_MODE_FAILED` and move the session down, so the initiator resubmits in the next
    /// mode, as the RFC's sequence diagram (section 4.2) shows.
    Explicit,
}

/// A responder's configuration.
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    /// The identity card it serves; its capabilities are the skills it accepts and its trust domain is checked.
    pub card: IdentityCard,
    /// How initiator domains are established.
    pub trust: TrustPolicy,
    /// Signatures and replay protection.
    pub security: SecurityConfig,
    /// Resource limits.
    pub limits: Limits,
    /// Payload modes this responder can process.
    pub implemented_modes: Vec<PayloadMode>,
    /// Whether messages signed with `hmac-sha256` carry a nonce (default true). The PyPI reference SDK signs and
    /// verifies that scheme without one, so a nonce makes every message fail verification there: set it to false
    /// to talk to Python peers (replay protection then keys on the message id alone). Other algorithms always
    /// carry a nonce.
    pub hmac_sha256_nonce: bool,
    /// Transparent or explicit payload fallback.
    pub fallback: FallbackStyle,
    /// The delegate's Ed25519 identity key: when set, every TASK_RESULT's provenance carries a usage receipt signed
    /// with it ([`ldp_types::receipt`]). Set it with [`ResponderConfig::set_receipt_key`], which also publishes the
    /// public half in the card.
    pub receipt_key: Option<SigningKey>,
    /// Scopes a skill requires, by skill (default none): a TASK_SUBMIT for the skill from a peer whose credential
    /// does not grant every listed scope ([`PeerContext::has_scope`](crate::PeerContext::has_scope)) is refused
    /// TRUST_VIOLATION, naming the missing scope. Credentials without scopes (static tokens, certificates) never
    /// grant one.
    pub skill_scopes: HashMap<String, Vec<String>>,
}

impl ResponderConfig {
    /// Defaults around a card: permissive trust, no signatures, default limits.
    pub fn new(card: IdentityCard) -> Self {
        let trust = TrustPolicy::permissive(&card.trust_domain.name);
        Self {
            card,
            trust,
            security: SecurityConfig::default(),
            limits: Limits::default(),
            implemented_modes: IMPLEMENTED_MODES.to_vec(),
            hmac_sha256_nonce: true,
            fallback: FallbackStyle::default(),
            receipt_key: None,
            skill_scopes: HashMap::new(),
        }
    }

    /// Signs a usage receipt into every result's provenance with `key` and publishes its public half in the card
    /// (as [`ldp_types::receipt::RECEIPT_KEY_MEMBER`]), so that clients can check what the delegate reports it
    /// consumed. Only an Ed25519 key can sign receipts: another key is refused with [`ldp_types::Error::InvalidKey`].
    pub fn set_receipt_key(&mut self, key: SigningKey) -> Result<(), ldp_types::Error> {
        if !ldp_types::receipt::publish_receipt_key(&mut self.card, &key) {
            return Err(ldp_types::Error::InvalidKey("usage receipts are signed with an ed25519 key"));
        }
        self.receipt_key = Some(key);
        Ok(())
    }
}

/// An initiator's configuration.
#[derive(Debug, Clone)]
pub struct InitiatorConfig {
    /// Our delegate id (the `from` of everything we send).
    pub delegate_id: String,
    /// Our trust domain, declared in proposals for peers that read it.
    pub trust_domain: Option<String>,
    /// Modes we can produce, most preferred first.
    pub supported_modes: Vec<PayloadMode>,
    /// Signatures and replay protection of replies.
    pub security: SecurityConfig,
    /// Whether messages signed with `hmac-sha256` carry a nonce (default true). The PyPI reference SDK signs and
    /// verifies that scheme without one, so a nonce makes every message fail verification there: set it to false
    /// to talk to Python peers (replay protection then keys on the message id alone). Other algorithms always
    /// carry a nonce.
    pub hmac_sha256_nonce: bool,
}

impl InitiatorConfig {
    /// Defaults: semantic frame then text, no signatures.
    pub fn new(delegate_id: impl Into<String>) -> Self {
        Self {
            delegate_id: delegate_id.into(),
            trust_domain: None,
            supported_modes: IMPLEMENTED_MODES.to_vec(),
            security: SecurityConfig::default(),
            hmac_sha256_nonce: true,
        }
    }
}
