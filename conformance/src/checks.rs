//! The checks. Each exercises one behaviour, records a verdict on every requirement it lists, and leaves its
//! requests and responses as evidence. Checks build envelopes the RFC way and accept any legal answer (reference-SDK
//! shapes, `null` members, responder-assigned session ids).

use std::time::Duration;

use futures::future::BoxFuture;
use ldp_types::{
    Attestation, Body, Budget, DelegationContract, ErrorCategory, FailurePolicy, PayloadMode, Provenance, TaskCancel,
    TaskResult, UnknownBody,
};
use serde_json::{Map, Value, json};

mod correlation;
mod identity;
mod lifecycle;
mod negotiation;
mod robustness;
mod security;
mod session;
mod signing;
mod tasks;
mod trust;
mod wire;

use self::identity::{identity_discovery, transport_auth};
use self::lifecycle::{handshake_hello, negotiation_modes, payload_fallback, session_lifecycle};
use self::robustness::{
    robust_malformed_json, robust_not_an_envelope, robust_oversize, robust_unknown_type, robust_wrong_content_type,
};
use self::security::{no_key, security_bad_signature, security_replay, security_signed_exchange, security_unsigned};
use self::tasks::{
    contract_tolerated, judge_task_refusal, message_attestation, message_wrong_direction, session_closed, session_ttl,
    session_unknown, task_cancel, task_undeclared_skill,
};
use self::trust::{trust_foreign_domain, trust_required_domain};
use self::wire::{
    http_stream, judge_observed, wire_content_type, wire_envelopes, wire_errors, wire_provenance, wire_schema,
};
use crate::catalogue::Feature;
use crate::ctx::{Answer, Ctx, Session, UNTRUSTED_DOMAIN, category_in, session_from};
use crate::media::is_media_type;
use crate::probe::{Outgoing, TransportKind};

/// One check: what it is called, the requirements it gives verdicts on, and how it runs.
#[derive(Clone, Copy)]
pub struct Check {
    /// Stable id, e.g. `session.lifecycle`.
    pub id: &'static str,
    /// What it does.
    pub title: &'static str,
    /// The requirement ids it gives verdicts on.
    pub requirements: &'static [&'static str],
    pub(crate) run: for<'a> fn(&'a mut Ctx) -> BoxFuture<'a, ()>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("id", &self.id).field("requirements", &self.requirements).finish()
    }
}

macro_rules! check {
    ($id:literal, $title:literal, [$($req:literal),+ $(,)?], $f:path) => {
        Check { id: $id, title: $title, requirements: &[$($req),+], run: |ctx| Box::pin($f(ctx)) }
    };
}

/// Every check, in run order. The `wire.*` checks read observations of all earlier ones and run last.
pub const CHECKS: &[Check] = &[
    check!(
        "identity.discovery",
        "Fetch and validate the identity card",
        [
            "LDP-IDENT-001",
            "LDP-IDENT-002",
            "LDP-IDENT-003",
            "LDP-IDENT-004",
            "LDP-IDENT-005",
            "LDP-SCHEMA-001",
            "LDP-PAYLOAD-001",
            "LDP-EXT-CLAIM-001"
        ],
        identity_discovery
    ),
    check!("transport.auth", "Transport-level authentication", ["LDP-AUTH-001"], transport_auth),
    check!("handshake.hello", "HELLO gets a CAPABILITY_MANIFEST", ["LDP-MSG-001"], handshake_hello),
    check!(
        "handshake.manifest",
        "The CAPABILITY_MANIFEST declares what the card declares",
        ["LDP-MSG-008"],
        negotiation::handshake_manifest
    ),
    check!(
        "session.lifecycle",
        "HELLO through SESSION_CLOSE in text mode",
        ["LDP-SESS-001", "LDP-MSG-002", "LDP-MSG-003", "LDP-MSG-005", "LDP-PAYLOAD-001"],
        session_lifecycle
    ),
    check!(
        "negotiation.modes",
        "Payload-mode negotiation and the fallback chain",
        ["LDP-NEG-001", "LDP-NEG-002", "LDP-PAYLOAD-001", "LDP-PAYLOAD-002", "LDP-PAYLOAD-003"],
        negotiation_modes
    ),
    check!(
        "negotiation.preference",
        "The initiator's preference order decides the mode",
        ["LDP-NEG-001"],
        negotiation::negotiation_preference
    ),
    check!(
        "negotiation.unnegotiated_mode",
        "A task in a mode the session did not negotiate",
        ["LDP-NEG-003"],
        negotiation::negotiation_unnegotiated_mode
    ),
    check!(
        "payload.fallback",
        "An invalid semantic frame falls back to text",
        ["LDP-FALLBACK-001", "LDP-FALLBACK-002"],
        payload_fallback
    ),
    check!(
        "trust.required_domain",
        "required_trust_domain of another domain is rejected",
        ["LDP-TRUST-001", "LDP-TRUST-003", "LDP-ERR-002"],
        trust_required_domain
    ),
    check!(
        "trust.foreign_domain",
        "An initiator from an untrusted domain is rejected",
        ["LDP-TRUST-002", "LDP-TRUST-003", "LDP-ERR-002"],
        trust_foreign_domain
    ),
    check!(
        "trust.domain_variants",
        "Look-alike trust domains: suffix, prefix, substring, case and empty variants",
        ["LDP-TRUST-001", "LDP-TRUST-002", "LDP-TRUST-003", "LDP-ERR-002"],
        trust::trust_domain_variants
    ),
    check!("session.unknown", "TASK_SUBMIT to an unknown session", ["LDP-SESS-002", "LDP-ERR-002"], session_unknown),
    check!(
        "session.unknown_ids",
        "TASK_SUBMIT with an empty, missing, random-UUID and non-UUID session id, also on /ldp/stream",
        ["LDP-SESS-002", "LDP-ERR-002"],
        session::session_unknown_ids
    ),
    check!("session.closed", "TASK_SUBMIT to a closed session", ["LDP-SESS-003", "LDP-ERR-002"], session_closed),
    check!(
        "session.closed_stream",
        "POST /ldp/stream with a TASK_SUBMIT to a closed session",
        ["LDP-SESS-003"],
        session::session_closed_stream
    ),
    check!(
        "session.foreign_peer",
        "A session used by another sender than the one that established it",
        ["LDP-SESS-005"],
        session::session_foreign_peer
    ),
    check!(
        "task.undeclared_skill",
        "TASK_SUBMIT for an undeclared skill",
        ["LDP-POLICY-001", "LDP-ERR-002"],
        task_undeclared_skill
    ),
    check!("task.cancel", "TASK_CANCEL gets a defined answer", ["LDP-MSG-004"], task_cancel),
    check!("message.attestation", "ATTESTATION within a session", ["LDP-MSG-006"], message_attestation),
    check!("message.wrong_direction", "A TASK_RESULT sent to the responder", ["LDP-MSG-007"], message_wrong_direction),
    check!(
        "contract.tolerated",
        "TASK_SUBMIT with a delegation contract",
        ["LDP-EXT-CONTRACT-001", "LDP-EXT-CONTRACT-002"],
        contract_tolerated
    ),
    check!("robust.malformed_json", "Malformed JSON", ["LDP-ROBUST-001"], robust_malformed_json),
    check!("robust.not_an_envelope", "JSON that is not an envelope", ["LDP-ROBUST-002"], robust_not_an_envelope),
    check!(
        "robust.wrong_content_type",
        "An envelope with the wrong content type",
        ["LDP-ROBUST-003"],
        robust_wrong_content_type
    ),
    check!("robust.unknown_type", "An unknown message type", ["LDP-ROBUST-004"], robust_unknown_type),
    check!("robust.oversize", "An oversize message", ["LDP-ROBUST-005"], robust_oversize),
    check!(
        "security.signed_exchange",
        "A signed exchange with signed replies",
        ["LDP-SEC-001"],
        security_signed_exchange
    ),
    check!("security.bad_signature", "A TASK_SUBMIT with a bad signature", ["LDP-SEC-002"], security_bad_signature),
    check!("security.replay", "A replayed SESSION_PROPOSE", ["LDP-SEC-003"], security_replay),
    check!("security.unsigned", "An unsigned TASK_SUBMIT to a signing delegate", ["LDP-SEC-004"], security_unsigned),
    check!(
        "security.replay_all",
        "Replayed HELLO, TASK_SUBMIT and TASK_CANCEL; stale and future timestamps",
        ["LDP-SEC-003"],
        signing::security_replay_all
    ),
    check!(
        "security.bad_signatures",
        "Empty, malformed, other-algorithm and tampered signatures",
        ["LDP-SEC-002"],
        signing::security_bad_signatures
    ),
    check!(
        "security.unsigned_all",
        "Unsigned SESSION_PROPOSE, TASK_UPDATE (status query), TASK_CANCEL, ATTESTATION and SESSION_CLOSE",
        ["LDP-SEC-004"],
        signing::security_unsigned_all
    ),
    check!("session.ttl", "A session expires after its TTL", ["LDP-SESS-004", "LDP-ERR-002"], session_ttl),
    check!(
        "wire.envelopes",
        "Every reply envelope: fields, timestamps, ids, addressing",
        ["LDP-ENV-001", "LDP-ENV-002", "LDP-ENV-003", "LDP-ENV-004", "LDP-ENV-005"],
        wire_envelopes
    ),
    check!("http.stream", "POST /ldp/stream answers a task with server-sent events", ["LDP-HTTP-002"], http_stream),
    check!(
        "wire.correlation",
        "Every reply answers its request: task ids, fresh message ids, one session per SESSION_ACCEPT",
        ["LDP-CORR-001", "LDP-CORR-002", "LDP-CORR-003"],
        correlation::wire_correlation
    ),
    check!("wire.schema", "Every reply validates against the ldp-types schemas", ["LDP-SCHEMA-001"], wire_schema),
    check!("wire.content_type", "Every HTTP reply is application/json", ["LDP-HTTP-001"], wire_content_type),
    check!(
        "wire.provenance",
        "Provenance on every TASK_RESULT",
        ["LDP-PROV-001", "LDP-PROV-002", "LDP-PROV-003", "LDP-PROV-004", "LDP-PROV-005", "LDP-EXT-VERIFY-001"],
        wire_provenance
    ),
    check!("wire.errors", "Every error is a typed LdpError", ["LDP-ERR-001"], wire_errors),
];

/// The check with this id.
pub fn check(id: &str) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.id == id)
}

const SESSION_TTL: u64 = 300;

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Records `NotTestable` on every requirement in `reqs`.
fn untestable(ctx: &mut Ctx, reqs: &[&str], why: &str) {
    for r in ids(reqs) {
        ctx.not_testable(&r, why);
    }
}

/// Records `Blocked` by `cause` on every requirement in `reqs`: the kit could not exercise them because `cause`
/// (judged by another check) failed. If `cause` did not fail, the runner scores them NOT TESTABLE instead.
fn blocked(ctx: &mut Ctx, reqs: &[&str], cause: &str, why: &str) {
    for r in ids(reqs) {
        ctx.blocked(&r, cause, why);
    }
}

/// What a check could not do without an established session (LDP-SESS-001 judges establishment).
const NO_SESSION: &str = "LDP-SESS-001";

/// Closes a session the check no longer needs (the answer is not judged here).
async fn tidy(ctx: &mut Ctx, session: &Session) {
    let _ = ctx.close(&session.id).await;
}

#[cfg(test)]
mod tests {
    use ldp_transport_http::sse::SseEvent;

    use super::*;
    use crate::ctx::StreamAnswer;
    use crate::probe::RawReply;

    fn envelope_event(ty: &str, task: &str) -> SseEvent {
        let data = json!({ "message_id": "m", "body": { "type": ty, "task_id": task } }).to_string();
        SseEvent { event: "envelope".into(), data }
    }

    fn stream(events: Vec<SseEvent>, content_type: &str, timed_out: bool) -> StreamAnswer {
        let reply = RawReply { status: Some(200), content_type: Some(content_type.into()), ..RawReply::default() };
        StreamAnswer { answer: Answer { reply: Some(reply), ..Answer::default() }, events, timed_out }
    }

    #[test]
    fn a_stream_of_updates_then_the_result_passes() {
        let events = vec![
            envelope_event("TASK_UPDATE", "t"),
            envelope_event("TASK_UPDATE", "t"),
            envelope_event("TASK_RESULT", "t"),
        ];
        let verdict = wire::judge_stream(&stream(events, "text/event-stream; charset=utf-8", false), "t");
        assert_eq!(verdict, Ok("2 TASK_UPDATE event(s), then the TASK_RESULT".to_owned()));
        let failed =
            wire::judge_stream(&stream(vec![envelope_event("TASK_FAILED", "t")], "text/event-stream", false), "t");
        assert!(failed.is_ok(), "{failed:?}");
    }

    #[test]
    fn every_way_a_stream_can_be_wrong_is_named() {
        let sse = "text/event-stream";
        let cases = [
            (stream(vec![envelope_event("TASK_RESULT", "t")], "application/json", false), "not text/event-stream"),
            (stream(vec![], sse, false), "no event"),
            (
                stream(vec![envelope_event("TASK_UPDATE", "u"), envelope_event("TASK_RESULT", "t")], sse, false),
                "event 0",
            ),
            (
                stream(
                    vec![SseEvent { event: "envelope".into(), data: "{".into() }, envelope_event("TASK_RESULT", "t")],
                    sse,
                    false,
                ),
                "not JSON",
            ),
            (
                stream(vec![SseEvent { event: "error".into(), data: "{\"code\":\"X\"}".into() }], sse, false),
                "error event",
            ),
            (stream(vec![envelope_event("TASK_UPDATE", "t")], sse, true), "before the request timeout"),
            (stream(vec![envelope_event("TASK_UPDATE", "t")], sse, false), "not the result"),
            (stream(vec![envelope_event("TASK_RESULT", "other")], sse, false), "not the result"),
        ];
        for (streamed, expected) in cases {
            let verdict = wire::judge_stream(&streamed, "t");
            assert!(matches!(&verdict, Err(why) if why.contains(expected)), "{expected}: {verdict:?}");
        }
    }
}
