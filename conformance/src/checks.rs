//! The checks. Each exercises one behaviour, records a verdict on every requirement it lists, and leaves its
//! requests and responses as evidence. Checks build envelopes the RFC way and accept any legal answer (reference-SDK
//! shapes, `null` members, responder-assigned session ids).

use std::time::Duration;

use futures::future::BoxFuture;
use ldp_types::{
    Attestation, Body, Budget, DelegationContract, ErrorCategory, FailurePolicy, PayloadMode, Provenance, TaskCancel,
    TaskResult, TaskSubmit, UnknownBody,
};
use serde_json::{Map, Value, json};

mod correlation;
mod negotiation;
mod session;
mod signing;
mod trust;

use crate::catalogue::Feature;
use crate::ctx::{Answer, Ctx, Observed, Session, UNTRUSTED_DOMAIN, category_in, session_from, summarise};
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
        "Unsigned SESSION_PROPOSE, TASK_CANCEL, ATTESTATION and SESSION_CLOSE",
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

// ---- identity --------------------------------------------------------------------------------------------------

async fn identity_discovery(ctx: &mut Ctx) {
    const WELL_KNOWN: &str = "/.well-known/ldp-identity";
    let (reply, result, _) = ctx.get(WELL_KNOWN).await;
    let mut card_json: Option<Value> = None;
    match (&reply, result) {
        (_, Err(e)) => ctx.fail("LDP-IDENT-001", format!("GET {WELL_KNOWN} failed: {e}")),
        (Some(r), Ok(())) => {
            let json = serde_json::from_slice::<Value>(&r.body).ok().filter(Value::is_object);
            let json_ct = is_media_type(r.content_type.as_deref(), "application/json");
            match (r.status, &json) {
                (Some(200), Some(_)) if json_ct => {
                    ctx.pass("LDP-IDENT-001", format!("GET {WELL_KNOWN}: 200 application/json"));
                }
                (Some(200), Some(_)) => ctx.fail(
                    "LDP-IDENT-001",
                    format!("GET {WELL_KNOWN}: 200 but Content-Type {:?}, not application/json", r.content_type),
                ),
                (status, _) => ctx.fail(
                    "LDP-IDENT-001",
                    format!("GET {WELL_KNOWN}: status {status:?}, body is not a JSON object card"),
                ),
            }
            if r.status == Some(200) {
                card_json = json;
            }
        }
        (None, Ok(())) => ctx.fail("LDP-IDENT-001", format!("GET {WELL_KNOWN}: no response")),
    }

    // The reference clients' path.
    let (alias, alias_result, _) = ctx.get("/ldp/identity").await;
    let alias_json = alias
        .filter(|r| r.status == Some(200) && alias_result.is_ok())
        .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(Value::is_object);
    match (&alias_json, &card_json) {
        (Some(a), Some(c)) if a == c => ctx.pass("LDP-IDENT-005", "GET /ldp/identity serves the same card"),
        (Some(_), Some(_)) => ctx.fail("LDP-IDENT-005", "GET /ldp/identity serves a different card"),
        (Some(_), None) => ctx.pass("LDP-IDENT-005", "GET /ldp/identity serves a card"),
        (None, _) => ctx.fail("LDP-IDENT-005", "GET /ldp/identity does not serve a card"),
    }

    let Some(card) = card_json else {
        blocked(
            ctx,
            &["LDP-IDENT-002", "LDP-IDENT-003", "LDP-IDENT-004", "LDP-SCHEMA-001", "LDP-PAYLOAD-001"],
            "LDP-IDENT-001",
            "no identity card was served at /.well-known/ldp-identity",
        );
        ctx.skip("LDP-EXT-CLAIM-001", "no identity card");
        return;
    };

    let violations = ctx.validators.card(&card);
    if violations.is_empty() {
        ctx.pass("LDP-SCHEMA-001", "the identity card validates against the identity_card schema");
    } else {
        ctx.fail("LDP-SCHEMA-001", violations.join("; "));
    }

    const REQUIRED: [&str; 9] = [
        "delegate_id",
        "name",
        "model_family",
        "model_version",
        "trust_domain",
        "context_window",
        "capabilities",
        "supported_payload_modes",
        "endpoint",
    ];
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|f| card.get(*f).is_none_or(Value::is_null)).collect();
    // Judged with the strict RFC schema, not with the project's liberal decoder (which reads what the reference
    // SDKs send, a bare string for a trust domain included).
    let typed = serde_json::from_value::<ldp_types::IdentityCard>(card.clone());
    let strict = ctx.validators.rfc_card(&card);
    match (&missing[..], &strict[..]) {
        ([], []) => ctx.pass("LDP-IDENT-002", "every required field is present with the RFC 2.1 type"),
        ([], v) => ctx.fail("LDP-IDENT-002", v.join("; ")),
        (m, _) => ctx.fail("LDP-IDENT-002", format!("required fields missing or null: {}", m.join(", "))),
    }

    match card.get("delegate_id").and_then(Value::as_str) {
        Some(id) if ldp_types::DelegateId::new(id).is_ok() => ctx.pass("LDP-IDENT-003", format!("delegate_id {id}")),
        Some(id) => ctx.fail("LDP-IDENT-003", format!("delegate_id {id:?} is not ldp:delegate:<name>")),
        None => ctx.fail("LDP-IDENT-003", "no delegate_id string"),
    }

    let caps = card.get("capabilities").and_then(Value::as_array).cloned().unwrap_or_default();
    let without: Vec<String> = caps
        .iter()
        .filter(|c| {
            let score = c.pointer("/quality/quality_score").or_else(|| c.get("quality_hint")).and_then(Value::as_f64);
            !score.is_some_and(|s| (0.0..=1.0).contains(&s))
        })
        .map(|c| c.get("name").and_then(Value::as_str).unwrap_or("<unnamed>").to_owned())
        .collect();
    if caps.is_empty() {
        ctx.fail("LDP-IDENT-004", "the card declares no capabilities");
    } else if without.is_empty() {
        ctx.pass("LDP-IDENT-004", format!("{} capabilities carry a quality score", caps.len()));
    } else {
        ctx.fail("LDP-IDENT-004", format!("capabilities without a quality score in 0.0-1.0: {}", without.join(", ")));
    }

    let modes: Vec<&str> = card
        .get("supported_payload_modes")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if modes.contains(&"text") {
        ctx.pass("LDP-PAYLOAD-001", "the card lists text");
    } else {
        ctx.fail("LDP-PAYLOAD-001", format!("supported_payload_modes {modes:?} does not list text"));
    }
    if modes.contains(&"semantic_frame") {
        ctx.claims.claim(Feature::SemanticFrame, "the card lists semantic_frame");
    }

    // Claimed-vs-attested identity.
    let mut claim_problems = Vec::new();
    let mut claimed = 0;
    for c in &caps {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("<unnamed>");
        let quality = c.get("quality").filter(|q| q.is_object());
        let claim = quality.and_then(|q| q.get("claim_type")).or_else(|| c.get("claim_type")).filter(|v| !v.is_null());
        let Some(claim) = claim else { continue };
        claimed += 1;
        match claim.as_str() {
            Some("self_claimed") | Some("runtime_observed") => {}
            Some(t @ ("issuer_attested" | "externally_benchmarked")) => {
                for field in ["issuer_id", "attested_at"] {
                    let present = quality.and_then(|q| q.get(field)).is_some_and(|v| v.as_str().is_some());
                    if !present {
                        claim_problems.push(format!("{name}: {t} claim without {field}"));
                    }
                }
            }
            _ => claim_problems.push(format!("{name}: claim_type {claim} is not one of the paper's four")),
        }
    }
    if claimed > 0 {
        ctx.claims.claim(Feature::ClaimTypes, "a capability carries claim_type");
        if claim_problems.is_empty() {
            ctx.pass("LDP-EXT-CLAIM-001", format!("{claimed} claims carry a valid claim_type"));
        } else {
            ctx.fail("LDP-EXT-CLAIM-001", claim_problems.join("; "));
        }
    } else {
        ctx.skip("LDP-EXT-CLAIM-001", "no capability carries claim_type");
    }

    // Streaming (RFC 8.1): the reference SDK's capability shape declares it per capability.
    let streaming = caps.iter().find(|c| {
        let declared = |v: Option<&Value>| v.and_then(|v| v.get("supports_streaming")).and_then(Value::as_bool);
        declared(c.get("quality")).or_else(|| declared(Some(c))) == Some(true)
    });
    if let Some(c) = streaming {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("<unnamed>");
        ctx.claims.claim(Feature::Streaming, format!("capability {name} declares supports_streaming"));
    }

    // Capability claims in metadata or extension members.
    let mut keys: Vec<String> = card.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    if let Some(meta) = card.get("metadata").and_then(Value::as_object) {
        keys.extend(meta.iter().map(|(k, v)| format!("metadata.{k}={}", v.as_str().unwrap_or_default())));
    }
    for k in &keys {
        let lower = k.to_ascii_lowercase();
        if lower.contains("sign") {
            ctx.claims.claim(Feature::Signing, format!("card member {k}"));
        }
        if lower.contains("contract") {
            ctx.claims.claim(Feature::Contracts, format!("card member {k}"));
        }
    }

    if let Ok(card) = typed {
        ctx.card = Some(card);
    }
}

async fn transport_auth(ctx: &mut Ctx) {
    if ctx.probe.base().starts_with("https://") {
        ctx.pass("LDP-AUTH-001", "the endpoint uses TLS");
        return;
    }
    if ctx.cfg.token.is_none() {
        ctx.fail(
            "LDP-AUTH-001",
            "plain HTTP and no --token given: the kit could not see any transport-level authentication",
        );
        return;
    }
    let env = ctx.envelope(
        "",
        ldp_types::Hello::new(crate::ctx::KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::Text]),
        PayloadMode::Text,
    );
    let mut out = Outgoing::json(env.to_vec().unwrap_or_default());
    out.token = Some(None);
    let answer = ctx.send(out, Some(&env)).await;
    if answer.is_refusal() || answer.close_code().is_some() || answer.transport_error.is_some() {
        ctx.pass("LDP-AUTH-001", format!("a HELLO without the bearer token is refused: {}", answer.describe()));
    } else {
        ctx.fail("LDP-AUTH-001", format!("a HELLO without the bearer token is answered: {}", answer.describe()));
    }
}

// ---- handshake and lifecycle -----------------------------------------------------------------------------------

async fn handshake_hello(ctx: &mut Ctx) {
    let answer = ctx.hello().await;
    let has_caps = answer.body().and_then(|b| b.get("capabilities")).is_some_and(|c| !c.is_null());
    if answer.is_type("CAPABILITY_MANIFEST") && has_caps {
        ctx.pass("LDP-MSG-001", "HELLO → CAPABILITY_MANIFEST");
    } else if answer.is_type("CAPABILITY_MANIFEST") {
        ctx.fail("LDP-MSG-001", "CAPABILITY_MANIFEST without capabilities");
    } else {
        ctx.fail("LDP-MSG-001", format!("HELLO → {}", answer.describe()));
    }
}

async fn session_lifecycle(ctx: &mut Ctx) {
    let later = ["LDP-MSG-003", "LDP-MSG-005", "LDP-PAYLOAD-001"];
    let hello = ctx.hello().await;
    if !hello.is_type("CAPABILITY_MANIFEST") {
        ctx.fail("LDP-SESS-001", format!("HELLO → {}", hello.describe()));
    }
    let config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
    let proposal = ctx.propose(config).await;
    if proposal.is_type("SESSION_ACCEPT") || proposal.is_type("SESSION_REJECT") {
        ctx.pass("LDP-MSG-002", format!("SESSION_PROPOSE → {}", proposal.body_type().unwrap_or_default()));
    } else {
        ctx.fail("LDP-MSG-002", format!("SESSION_PROPOSE → {}", proposal.describe()));
    }
    let session = match session_from(&proposal) {
        Ok(s) => s,
        Err(e) => {
            ctx.fail("LDP-SESS-001", e.clone());
            blocked(ctx, &later, NO_SESSION, &format!("no session: {e}"));
            return;
        }
    };
    let (_, result) =
        ctx.submit(&session.id, session.mode, &ctx.skill(), Ctx::input_for(PayloadMode::Text), None).await;
    let mut lifecycle_ok = hello.is_type("CAPABILITY_MANIFEST");
    if result.is_type("TASK_RESULT") || result.is_type("TASK_FAILED") {
        ctx.pass("LDP-MSG-003", format!("TASK_SUBMIT → {}", result.body_type().unwrap_or_default()));
    } else {
        ctx.fail("LDP-MSG-003", format!("TASK_SUBMIT → {}", result.describe()));
    }
    if result.is_type("TASK_RESULT") {
        ctx.pass("LDP-PAYLOAD-001", "a text-mode task completed");
        let in_session = result.json.as_ref().and_then(|j| j.get("session_id")).and_then(Value::as_str);
        if in_session != Some(session.id.as_str()) {
            lifecycle_ok = false;
            ctx.fail(
                "LDP-SESS-001",
                format!("TASK_RESULT session_id {in_session:?} is not the accepted session {:?}", session.id),
            );
        }
    } else {
        lifecycle_ok = false;
        ctx.fail("LDP-PAYLOAD-001", format!("a text-mode task did not complete: {}", result.describe()));
        ctx.fail("LDP-SESS-001", format!("TASK_SUBMIT → {}", result.describe()));
    }
    let close = ctx.close(&session.id).await;
    let acknowledged = close.is_type("SESSION_CLOSE") || close.is_ack();
    if acknowledged {
        ctx.pass("LDP-MSG-005", format!("SESSION_CLOSE → {}", close.describe()));
    } else {
        lifecycle_ok = false;
        ctx.fail("LDP-MSG-005", format!("SESSION_CLOSE → {}", close.describe()));
        ctx.fail("LDP-SESS-001", format!("SESSION_CLOSE → {}", close.describe()));
    }
    if lifecycle_ok {
        ctx.pass(
            "LDP-SESS-001",
            format!("HELLO, SESSION_PROPOSE/ACCEPT ({}), TASK_SUBMIT/RESULT, SESSION_CLOSE", session.id),
        );
    }
}

async fn negotiation_modes(ctx: &mut Ctx) {
    use PayloadMode::{SemanticFrame, SemanticGraph, Text};
    let card_modes = ctx.card_modes();
    let mut neg_problems = Vec::new();
    let mut neg_ok = Vec::new();

    // Text only.
    match ctx.open_session(&[Text], SESSION_TTL).await {
        Ok(s) => {
            if s.mode == Text {
                neg_ok.push("[text] → text".to_owned());
                ctx.pass("LDP-PAYLOAD-001", "a text-only proposal negotiates text");
            } else {
                neg_problems.push(format!("[text] → {}", s.mode));
                ctx.fail("LDP-PAYLOAD-001", format!("a text-only proposal negotiated {}", s.mode));
            }
            tidy(ctx, &s).await;
        }
        Err(e) => {
            ctx.fail("LDP-PAYLOAD-001", format!("a text-only proposal: {e}"));
            blocked(ctx, &["LDP-NEG-001"], NO_SESSION, &format!("no session could be established: {e}"));
        }
    }

    // Semantic frame preferred.
    let frame_claimed = card_modes.contains(&SemanticFrame);
    match ctx.open_session(&[SemanticFrame, Text], SESSION_TTL).await {
        Ok(s) => {
            let expected = if frame_claimed { SemanticFrame } else { Text };
            if s.mode == expected {
                neg_ok.push(format!("[semantic_frame, text] → {}", s.mode));
            } else {
                neg_problems
                    .push(format!("[semantic_frame, text] → {} although the card lists {card_modes:?}", s.mode));
            }
            let want = ldp_types::negotiate(&[SemanticFrame, Text], &card_modes, &[SemanticFrame, Text]);
            match &s.fallback_chain {
                Some(chain) if *chain == want.fallback_chain => {
                    ctx.pass("LDP-NEG-002", format!("fallback_chain {chain:?}"));
                }
                Some(chain) => ctx.fail(
                    "LDP-NEG-002",
                    format!("fallback_chain {chain:?}, expected {:?} for mode {}", want.fallback_chain, s.mode),
                ),
                None if s.mode == Text => ctx.pass("LDP-NEG-002", "text negotiated: the fallback chain is empty"),
                None => ctx.fail("LDP-NEG-002", format!("SESSION_ACCEPT for {} carries no fallback_chain", s.mode)),
            }
            if s.mode == SemanticFrame {
                let skill = ctx.skill();
                let (_, r) = ctx.submit(&s.id, SemanticFrame, &skill, Ctx::input_for(SemanticFrame), None).await;
                if r.is_type("TASK_RESULT") {
                    ctx.pass("LDP-PAYLOAD-002", "semantic_frame negotiated and a frame task completed");
                    ctx.pass("LDP-PAYLOAD-003", "semantic_frame negotiated and a frame task completed");
                } else {
                    let d = format!("a valid semantic frame task → {}", r.describe());
                    ctx.fail("LDP-PAYLOAD-002", d.clone());
                    ctx.fail("LDP-PAYLOAD-003", d);
                }
            } else if frame_claimed {
                let d = format!("the card lists semantic_frame but {} was negotiated", s.mode);
                ctx.fail("LDP-PAYLOAD-002", d.clone());
                ctx.fail("LDP-PAYLOAD-003", d);
            } else {
                ctx.fail("LDP-PAYLOAD-002", format!("the card lists {card_modes:?}, not semantic_frame"));
                ctx.skip("LDP-PAYLOAD-003", "semantic_frame is not claimed");
            }
            tidy(ctx, &s).await;
        }
        Err(e) => {
            blocked(
                ctx,
                &["LDP-NEG-002", "LDP-PAYLOAD-002", "LDP-PAYLOAD-003"],
                NO_SESSION,
                &format!("no session: {e}"),
            );
            neg_problems.push(format!("[semantic_frame, text]: {e}"));
        }
    }

    // No common mode: text.
    match ctx.open_session(&[SemanticGraph], SESSION_TTL).await {
        Ok(s) => {
            let ok = s.mode == Text || (s.mode == SemanticGraph && card_modes.contains(&SemanticGraph));
            if ok {
                neg_ok.push(format!("[semantic_graph] → {}", s.mode));
            } else {
                neg_problems.push(format!("[semantic_graph] → {} (expected text)", s.mode));
            }
            tidy(ctx, &s).await;
        }
        Err(e) => neg_problems.push(format!("[semantic_graph] must fall back to text, not fail: {e}")),
    }
    if neg_problems.is_empty() {
        ctx.pass("LDP-NEG-001", neg_ok.join("; "));
    } else {
        ctx.fail("LDP-NEG-001", neg_problems.join("; "));
    }
}

async fn payload_fallback(ctx: &mut Ctx) {
    use PayloadMode::{SemanticFrame, Text};
    let reqs = ["LDP-FALLBACK-001", "LDP-FALLBACK-002"];
    if !ctx.card_modes().contains(&SemanticFrame) {
        untestable(ctx, &["LDP-FALLBACK-001"], "only text is supported: there is no mode to fall back from");
        ctx.skip("LDP-FALLBACK-002", "semantic_frame is not claimed");
        return;
    }
    let session = match ctx.open_session(&[SemanticFrame, Text], SESSION_TTL).await {
        Ok(s) if s.mode == SemanticFrame => s,
        Ok(s) => {
            untestable(ctx, &reqs, &format!("semantic_frame was not negotiated ({})", s.mode));
            tidy(ctx, &s).await;
            return;
        }
        Err(e) => {
            blocked(ctx, &reqs, NO_SESSION, &format!("no session: {e}"));
            return;
        }
    };
    let skill = ctx.skill();
    let invalid = json!({ "task_type": "echo" });
    let (_, bad) = ctx.submit(&session.id, SemanticFrame, &skill, invalid, None).await;
    let (_, text) = ctx.submit(&session.id, Text, &skill, Ctx::input_for(Text), None).await;
    if text.is_type("TASK_RESULT") {
        ctx.pass("LDP-FALLBACK-002", "after the payload-mode failure the session completed a text task");
    } else {
        ctx.fail(
            "LDP-FALLBACK-002",
            format!("after a semantic_frame failure, a text task in the same session → {}", text.describe()),
        );
    }
    match (bad.typed_refusal(), text.is_type("TASK_RESULT")) {
        (Ok(e), true) => {
            ctx.pass("LDP-FALLBACK-001", format!("invalid frame → {}; the text resubmission completed", e.describe()))
        }
        (Ok(e), false) => ctx.fail(
            "LDP-FALLBACK-001",
            format!("invalid frame → {}, but the text resubmission → {}", e.describe(), text.describe()),
        ),
        (Err(_), text_ok) if bad.is_type("TASK_RESULT") => {
            // Transparent fallback (RFC 4.3: "Fallback is automatic and transparent"): the task ran in a lower mode
            // and provenance says which.
            let used = bad
                .json
                .as_ref()
                .and_then(|j| j.pointer("/body/provenance/payload_mode_used"))
                .and_then(|m| serde_json::from_value::<PayloadMode>(m.clone()).ok());
            match used {
                Some(m) if m.number() < SemanticFrame.number() && text_ok => ctx.pass(
                    "LDP-FALLBACK-001",
                    format!("invalid frame ran transparently in {m} (payload_mode_used); the session continued"),
                ),
                Some(m) if m.number() < SemanticFrame.number() => ctx.fail(
                    "LDP-FALLBACK-001",
                    format!("invalid frame ran in {m}, but a text task then → {}", text.describe()),
                ),
                other => ctx.fail(
                    "LDP-FALLBACK-001",
                    format!(
                        "a semantic frame without the required `instruction` was processed as {}: neither a \
                         payload-mode failure nor a transparent fallback to a lower mode",
                        other.map_or("an unknown mode".to_owned(), |m| m.to_string())
                    ),
                ),
            }
        }
        (Err(e), _) => ctx.fail("LDP-FALLBACK-001", format!("invalid frame: {e}")),
    }
    tidy(ctx, &session).await;
}

// ---- trust -----------------------------------------------------------------------------------------------------

/// Judges a proposal that must be rejected; returns whether it was.
fn judge_rejection(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer) -> bool {
    if answer.is_type("SESSION_ACCEPT") {
        ctx.fail(req, format!("{what} was accepted"));
        return false;
    }
    let refused = answer.is_refusal() || answer.close_code().is_some();
    if !refused {
        ctx.fail(req, format!("{what} → {}", answer.describe()));
        return false;
    }
    ctx.pass(req, format!("{what} → {}", answer.describe()));
    match answer.typed_refusal() {
        Ok(e)
            if category_in(&e, &[ErrorCategory::Policy, ErrorCategory::Identity, ErrorCategory::Security])
                || e.code.starts_with("websocket") =>
        {
            ctx.pass("LDP-TRUST-003", format!("{what}: {}", e.describe()));
            ctx.pass("LDP-ERR-002", format!("trust refusal is {}", e.category));
        }
        Ok(e) => {
            ctx.pass("LDP-TRUST-003", format!("{what}: {}", e.describe()));
            ctx.fail("LDP-ERR-002", format!("trust refusal has category {}, not policy or identity", e.category));
        }
        Err(e) => {
            ctx.fail("LDP-TRUST-003", format!("{what}: {e}"));
        }
    }
    true
}

async fn trust_required_domain(ctx: &mut Ctx) {
    let reqs = ["LDP-TRUST-001", "LDP-TRUST-003", "LDP-ERR-002"];
    let Some(own) = ctx.card_domain() else {
        blocked(ctx, &reqs, "LDP-IDENT-001", "the server's trust domain is unknown (no identity card)");
        return;
    };
    if own == UNTRUSTED_DOMAIN {
        untestable(ctx, &reqs, "the server's own domain is the kit's foreign domain");
        return;
    }
    // Control: requiring the server's own domain is accepted.
    let hello = ctx.hello().await;
    let mut config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
    config.required_trust_domain = Some(own.clone());
    let control = ctx.propose(config.clone()).await;
    match session_from(&control) {
        Ok(s) => tidy(ctx, &s).await,
        Err(e) => {
            let _ = hello;
            ctx.fail("LDP-TRUST-001", format!("requiring the server's own domain {own:?}: {e}"));
        }
    }
    config.required_trust_domain = Some(UNTRUSTED_DOMAIN.to_owned());
    let answer = ctx.propose(config).await;
    let what = format!("a proposal with required_trust_domain {UNTRUSTED_DOMAIN:?} (server: {own:?})");
    if !judge_rejection(ctx, "LDP-TRUST-001", &what, &answer)
        && let Ok(s) = session_from(&answer)
    {
        tidy(ctx, &s).await;
    }
}

async fn trust_foreign_domain(ctx: &mut Ctx) {
    let reqs = ["LDP-TRUST-002", "LDP-TRUST-003", "LDP-ERR-002"];
    if let Some(card) = &ctx.card
        && card.trust_domain.allow_cross_domain
        && card.trust_domain.trusted_peers.iter().any(|p| p == UNTRUSTED_DOMAIN)
    {
        untestable(ctx, &reqs, "the server's card trusts the kit's foreign domain");
        return;
    }
    // Control: the kit's normal proposal is accepted, so a rejection means something.
    match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => tidy(ctx, &s).await,
        Err(e) => {
            blocked(ctx, &reqs, NO_SESSION, &format!("no session can be established at all: {e}"));
            return;
        }
    }
    let mut config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
    config.trust_domain = Some(UNTRUSTED_DOMAIN.to_owned());
    let answer = ctx.propose(config).await;
    let what = format!("a proposal declaring trust_domain {UNTRUSTED_DOMAIN:?}");
    let mut all_rejected = judge_rejection(ctx, "LDP-TRUST-002", &what, &answer);
    if !all_rejected && let Ok(s) = session_from(&answer) {
        tidy(ctx, &s).await;
    }
    if let Some(token) = ctx.cfg.untrusted_token.clone() {
        let config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
        let env = ctx.envelope("", ldp_types::SessionPropose::new(config), PayloadMode::Text);
        let mut out = Outgoing::json(env.to_vec().unwrap_or_default());
        out.token = Some(Some(token));
        let answer = ctx.send(out, Some(&env)).await;
        all_rejected &=
            judge_rejection(ctx, "LDP-TRUST-002", "a proposal authenticated with --untrusted-token", &answer);
    }
    let _ = all_rejected;
}

// ---- sessions and tasks ----------------------------------------------------------------------------------------

/// Judges a task that must be refused with a typed error of one of `categories`.
fn judge_task_refusal(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer, categories: &[ErrorCategory]) {
    if answer.is_type("TASK_RESULT") {
        ctx.fail(req, format!("{what} was executed (TASK_RESULT)"));
        return;
    }
    match answer.typed_refusal() {
        Ok(e) => {
            ctx.pass(req, format!("{what} → {}", e.describe()));
            let names: Vec<&str> = categories.iter().map(|c| c.as_str()).collect();
            if category_in(&e, categories) || e.code.starts_with("websocket") {
                ctx.pass("LDP-ERR-002", format!("{what}: category {}", e.category));
            } else {
                ctx.fail("LDP-ERR-002", format!("{what}: category {}, expected one of {names:?}", e.category));
            }
        }
        Err(e) => {
            ctx.fail(req, format!("{what}: {e}"));
        }
    }
}

async fn session_unknown(ctx: &mut Ctx) {
    let _ = ctx.hello().await;
    let sid = format!("conformance-unknown-{}", uuid::Uuid::new_v4());
    let skill = ctx.skill();
    let (_, answer) = ctx.submit(&sid, PayloadMode::Text, &skill, Ctx::input_for(PayloadMode::Text), None).await;
    judge_task_refusal(
        ctx,
        "LDP-SESS-002",
        "TASK_SUBMIT to a never-established session",
        &answer,
        &[ErrorCategory::Session],
    );
}

async fn session_closed(ctx: &mut Ctx) {
    let reqs = ["LDP-SESS-003", "LDP-ERR-002"];
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &reqs, NO_SESSION, &format!("no session: {e}")),
    };
    let (_, first) = ctx.submit_default(&session).await;
    if !first.is_type("TASK_RESULT") {
        return blocked(
            ctx,
            &reqs,
            NO_SESSION,
            &format!("a task in the open session did not complete: {}", first.describe()),
        );
    }
    let _ = ctx.close(&session.id).await;
    let (_, answer) = ctx.submit_default(&session).await;
    judge_task_refusal(ctx, "LDP-SESS-003", "TASK_SUBMIT after SESSION_CLOSE", &answer, &[ErrorCategory::Session]);
}

async fn session_ttl(ctx: &mut Ctx) {
    let reqs = ["LDP-SESS-004", "LDP-ERR-002"];
    let ttl = ctx.cfg.ttl_hint.unwrap_or(crate::runner::DEFAULT_TTL_PROBE_SECS).max(1);
    let session = match ctx.open_session(&[PayloadMode::Text], ttl).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &reqs, NO_SESSION, &format!("no session with ttl_secs {ttl}: {e}")),
    };
    let (_, first) = ctx.submit_default(&session).await;
    if !first.is_type("TASK_RESULT") {
        return blocked(
            ctx,
            &reqs,
            NO_SESSION,
            &format!("a task within the TTL did not complete: {}", first.describe()),
        );
    }
    tokio::time::sleep(Duration::from_secs(ttl) + Duration::from_millis(1500)).await;
    let (_, answer) = ctx.submit_default(&session).await;
    let what =
        format!("TASK_SUBMIT {:.1} s after the last activity of a session with ttl_secs {ttl}", ttl as f64 + 1.5);
    judge_task_refusal(ctx, "LDP-SESS-004", &what, &answer, &[ErrorCategory::Session]);
}

async fn task_undeclared_skill(ctx: &mut Ctx) {
    let reqs = ["LDP-POLICY-001", "LDP-ERR-002"];
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &reqs, NO_SESSION, &format!("no session: {e}")),
    };
    let skill = "conformance-undeclared-skill";
    let (_, answer) = ctx.submit(&session.id, session.mode, skill, Ctx::input_for(session.mode), None).await;
    judge_task_refusal(
        ctx,
        "LDP-POLICY-001",
        &format!("TASK_SUBMIT for skill {skill:?}"),
        &answer,
        &[ErrorCategory::Capability],
    );
    tidy(ctx, &session).await;
}

async fn task_cancel(ctx: &mut Ctx) {
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked("LDP-MSG-004", NO_SESSION, format!("no session: {e}")),
    };
    let task_id = format!("task-not-running-{}", uuid::Uuid::new_v4());
    let env = ctx.envelope(&session.id, TaskCancel::new(task_id), session.mode);
    let answer = ctx.send_envelope(&env).await;
    if let Ok(e) = answer.typed_refusal() {
        ctx.pass("LDP-MSG-004", format!("TASK_CANCEL of a task that is not running → {}", e.describe()));
    } else if answer.is_processed() || answer.is_ack() {
        ctx.pass("LDP-MSG-004", format!("TASK_CANCEL acknowledged: {}", answer.describe()));
    } else {
        ctx.fail("LDP-MSG-004", format!("TASK_CANCEL → {}", answer.describe()));
    }
    tidy(ctx, &session).await;
}

async fn message_attestation(ctx: &mut Ctx) {
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked("LDP-MSG-006", NO_SESSION, format!("no session: {e}")),
    };
    let claim = json!({ "subject": crate::ctx::KIT_DELEGATE_ID, "statement": "conformance probe attestation" });
    let env = ctx.envelope(&session.id, Attestation::new(claim, json!({ "kind": "none" })), session.mode);
    let answer = ctx.send_envelope(&env).await;
    if answer.is_processed() || answer.is_ack() {
        ctx.pass("LDP-MSG-006", format!("ATTESTATION → {}", answer.describe()));
    } else {
        ctx.fail("LDP-MSG-006", format!("ATTESTATION → {}", answer.describe()));
    }
    tidy(ctx, &session).await;
}

async fn message_wrong_direction(ctx: &mut Ctx) {
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked("LDP-MSG-007", NO_SESSION, format!("no session: {e}")),
    };
    let mut provenance = Provenance::new(crate::ctx::KIT_DELEGATE_ID, "0", PayloadMode::Text);
    provenance.session_id = Some(session.id.clone());
    let body = TaskResult::new(format!("task-{}", uuid::Uuid::new_v4()), json!("unsolicited"), provenance);
    let env = ctx.envelope(&session.id, body, session.mode);
    let answer = ctx.send_envelope(&env).await;
    match answer.typed_refusal() {
        Ok(e) => ctx.pass("LDP-MSG-007", format!("TASK_RESULT sent to the responder → {}", e.describe())),
        Err(e) => ctx.fail("LDP-MSG-007", format!("TASK_RESULT sent to the responder: {e}")),
    }
    tidy(ctx, &session).await;
}

async fn contract_tolerated(ctx: &mut Ctx) {
    let reqs = ["LDP-EXT-CONTRACT-001", "LDP-EXT-CONTRACT-002"];
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &reqs, NO_SESSION, &format!("no session: {e}")),
    };
    let skill = ctx.skill();
    let contract_id = format!("ctr-conformance-{}", uuid::Uuid::new_v4());
    let deadline = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc() + time::Duration::hours(1));
    let contract = DelegationContract::new(contract_id.clone(), "Echo the input")
        .with_failure_policy(FailurePolicy::FailOpen)
        .with_budget(Budget { max_tokens: Some(1_000_000), max_cost_usd: Some(100.0) })
        .with_deadline(deadline);
    let (_, answer) = ctx.submit(&session.id, session.mode, &skill, Ctx::input_for(session.mode), Some(contract)).await;
    if !answer.is_type("TASK_RESULT") {
        ctx.fail("LDP-EXT-CONTRACT-001", format!("a task with a generous contract → {}", answer.describe()));
        ctx.not_testable("LDP-EXT-CONTRACT-002", "the contract task did not complete");
        return tidy(ctx, &session).await;
    }
    ctx.pass("LDP-EXT-CONTRACT-001", "a task with a fail_open contract completed");
    let reported = answer.json.as_ref().and_then(|j| j.pointer("/body/provenance/contract_id")).and_then(Value::as_str);
    if !ctx.claims.has(Feature::Contracts) {
        ctx.skip("LDP-EXT-CONTRACT-002", "contracts are not claimed (no contract_id in provenance, none on the card)");
        return tidy(ctx, &session).await;
    }
    if reported != Some(contract_id.as_str()) {
        ctx.fail("LDP-EXT-CONTRACT-002", format!("provenance contract_id {reported:?}, expected {contract_id:?}"));
        return tidy(ctx, &session).await;
    }
    let expired_id = format!("ctr-conformance-expired-{}", uuid::Uuid::new_v4());
    let expired = DelegationContract::new(expired_id, "Echo the input before a deadline that has passed")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_deadline("2000-01-01T00:00:00Z");
    let (_, late) = ctx.submit(&session.id, session.mode, &skill, Ctx::input_for(session.mode), Some(expired)).await;
    let satisfied =
        late.json.as_ref().and_then(|j| j.pointer("/body/provenance/contract_satisfied")).and_then(Value::as_bool);
    if satisfied == Some(true) {
        ctx.fail("LDP-EXT-CONTRACT-002", "a contract whose deadline had passed is reported as satisfied");
    } else {
        ctx.pass(
            "LDP-EXT-CONTRACT-002",
            format!("contract_id reported; an expired contract → {} (not reported satisfied)", late.describe()),
        );
    }
    tidy(ctx, &session).await;
}

// ---- robustness ------------------------------------------------------------------------------------------------

/// Judges a bad message that must get a typed refusal (or, with `processing_ok`, may be processed), then checks
/// the server still answers.
async fn robust(ctx: &mut Ctx, req: &str, what: &str, out: Outgoing, processing_ok: bool) -> bool {
    let answer = ctx.send(out, None).await;
    let verdict = match answer.typed_refusal() {
        Ok(e) => Ok(format!("{what} → {}", e.describe())),
        Err(_) if processing_ok && answer.is_processed() => Ok(format!("{what} was processed: {}", answer.describe())),
        Err(e) => Err(format!("{what}: {e}")),
    };
    let alive = ctx.alive().await;
    match (verdict, alive) {
        (Ok(d), Ok(())) => {
            ctx.pass(req, format!("{d}; the server still answers"));
            true
        }
        (Err(d), Ok(())) => {
            ctx.fail(req, d);
            false
        }
        (Ok(d), Err(a)) | (Err(d), Err(a)) => {
            ctx.fail(req, format!("{d}; {a}"));
            false
        }
    }
}

async fn robust_malformed_json(ctx: &mut Ctx) {
    let body = br#"{"message_id": "conformance-malformed", "body": {"type": "HELLO", "delegate_id": "#.to_vec();
    robust(ctx, "LDP-ROBUST-001", "a truncated JSON body", Outgoing::json(body), false).await;
}

async fn robust_not_an_envelope(ctx: &mut Ctx) {
    let first = robust(
        ctx,
        "LDP-ROBUST-002",
        "the JSON object {\"hello\": \"world\"}",
        Outgoing::json(br#"{"hello": "world"}"#.to_vec()),
        false,
    )
    .await;
    if !first {
        return;
    }
    let mut env =
        ctx.envelope("", ldp_types::SessionClose::new(None), PayloadMode::Text).to_value().unwrap_or_default();
    if let Some(body) = env.get_mut("body") {
        *body = json!({ "task_id": "conformance-no-type" });
    }
    let bytes = serde_json::to_vec(&env).unwrap_or_default();
    robust(ctx, "LDP-ROBUST-002", "an envelope whose body has no `type`", Outgoing::json(bytes), false).await;
}

async fn robust_wrong_content_type(ctx: &mut Ctx) {
    let env = ctx.envelope(
        "",
        ldp_types::Hello::new(crate::ctx::KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::Text]),
        PayloadMode::Text,
    );
    let mut out = Outgoing::json(env.to_vec().unwrap_or_default());
    out.content_type = "text/plain";
    let what = match ctx.transport() {
        TransportKind::Http => "a HELLO sent as Content-Type: text/plain",
        TransportKind::Ws => "a HELLO sent as a binary frame",
    };
    robust(ctx, "LDP-ROBUST-003", what, out, true).await;
}

async fn robust_unknown_type(ctx: &mut Ctx) {
    let body = Body::Unknown(UnknownBody {
        type_name: "CONFORMANCE_UNKNOWN_TYPE".into(),
        fields: Map::from_iter([("note".to_owned(), json!("not an LDP message type"))]),
    });
    let env = ctx.envelope("", body, PayloadMode::Text);
    let out = Outgoing::json(env.to_vec().unwrap_or_default());
    robust(ctx, "LDP-ROBUST-004", "a message of type CONFORMANCE_UNKNOWN_TYPE", out, false).await;
}

async fn robust_oversize(ctx: &mut Ctx) {
    let size = ctx.cfg.oversize_bytes;
    let mut env = ctx.envelope(
        "",
        ldp_types::Hello::new(crate::ctx::KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::Text]),
        PayloadMode::Text,
    );
    env.extensions.insert("x_conformance_padding".into(), Value::String("a".repeat(size)));
    if let Some(key) = ctx.signing.clone() {
        let _ = ldp_types::signing::sign(&mut env, &key);
    }
    let out = Outgoing::json(env.to_vec().unwrap_or_default());
    robust(ctx, "LDP-ROBUST-005", &format!("a {} MiB HELLO", size / (1024 * 1024)), out, true).await;
}

// ---- signatures and replay -------------------------------------------------------------------------------------

fn no_key(ctx: &mut Ctx, req: &str) -> bool {
    if ctx.signing.is_some() {
        return false;
    }
    ctx.skip(req, "no --sign/--secret given");
    true
}

async fn security_signed_exchange(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-001";
    if no_key(ctx, REQ) {
        return;
    }
    let Some(key) = ctx.signing.as_ref().map(|k| k.verifying_key()) else { return };
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.fail(REQ, format!("a signed session could not be established: {e}")),
    };
    let (_, result) = ctx.submit_default(&session).await;
    if !result.is_type("TASK_RESULT") {
        return ctx.fail(REQ, format!("a signed TASK_SUBMIT → {}", result.describe()));
    }
    let mut problems = Vec::new();
    let replies: Vec<Value> = ctx
        .evidence
        .iter()
        .filter_map(|e| e.response.as_ref()?.body.as_ref())
        .filter_map(|b| serde_json::from_str::<Value>(b).ok())
        .filter(|v| v.get("body").is_some())
        .collect();
    for reply in &replies {
        let ty = reply.pointer("/body/type").and_then(Value::as_str).unwrap_or("?");
        // A correlation member added by the transport after signing (`in_reply_to`) is not part of the envelope.
        let mut reply = reply.clone();
        if let Some(obj) = reply.as_object_mut() {
            obj.remove("in_reply_to");
        }
        if let Err(e) = ldp_types::signing::verify_value(&reply, &key) {
            problems.push(format!("{ty} reply: {e}"));
        }
    }
    if problems.is_empty() {
        ctx.pass(
            REQ,
            format!("signed HELLO, SESSION_PROPOSE and TASK_SUBMIT accepted; {} replies verify", replies.len()),
        );
    } else {
        ctx.fail(REQ, problems.join("; "));
    }
    tidy(ctx, &session).await;
}

async fn security_bad_signature(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-002";
    if no_key(ctx, REQ) {
        return;
    }
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked(REQ, "LDP-SEC-001", format!("no signed session: {e}")),
    };
    let skill = ctx.skill();
    let body =
        ldp_types::TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), skill, Ctx::input_for(session.mode), None);
    let mut env = ctx.envelope(&session.id, body, session.mode);
    let Some(sig) = env.signature.as_mut() else { return ctx.not_testable(REQ, "the kit could not sign") };
    // Flip the first hex digit: same length, same algorithm, wrong value.
    let flipped = match sig.chars().next() {
        Some('0') => '1',
        _ => '0',
    };
    sig.replace_range(..1, &flipped.to_string());
    let answer = ctx.send_envelope(&env).await;
    if answer.is_type("TASK_RESULT") {
        ctx.fail(REQ, "a TASK_SUBMIT with a bad signature was executed");
    } else {
        match answer.typed_refusal() {
            Ok(e) => ctx.pass(REQ, format!("bad signature → {}", e.describe())),
            Err(e) => ctx.fail(REQ, format!("bad signature: {e}")),
        }
    }
    tidy(ctx, &session).await;
}

async fn security_replay(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-003";
    if no_key(ctx, REQ) {
        return;
    }
    let _ = ctx.hello().await;
    let config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
    let env = ctx.envelope("", ldp_types::SessionPropose::new(config), PayloadMode::Text);
    let first = ctx.send_envelope(&env).await;
    let session = match session_from(&first) {
        Ok(s) => s,
        Err(e) => return ctx.not_testable(REQ, format!("the original signed proposal: {e}")),
    };
    let replay = ctx.send_envelope(&env).await;
    if let Ok(second) = session_from(&replay) {
        ctx.fail(REQ, "the replayed SESSION_PROPOSE (identical bytes) established a second session");
        tidy(ctx, &second).await;
    } else {
        match replay.typed_refusal() {
            Ok(e) => ctx.pass(REQ, format!("replayed SESSION_PROPOSE → {}", e.describe())),
            Err(e) => ctx.fail(REQ, format!("replayed SESSION_PROPOSE: {e}")),
        }
    }
    tidy(ctx, &session).await;
}

async fn security_unsigned(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-004";
    if no_key(ctx, REQ) {
        return;
    }
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked(REQ, "LDP-SEC-001", format!("no signed session: {e}")),
    };
    ctx.sign_outgoing = false;
    let (_, answer) = ctx.submit_default(&session).await;
    ctx.sign_outgoing = true;
    if answer.is_type("TASK_RESULT") {
        ctx.fail(REQ, "an unsigned TASK_SUBMIT was executed");
    } else {
        match answer.typed_refusal() {
            Ok(e) => ctx.pass(REQ, format!("unsigned TASK_SUBMIT → {}", e.describe())),
            Err(e) => ctx.fail(REQ, format!("unsigned TASK_SUBMIT: {e}")),
        }
    }
    tidy(ctx, &session).await;
}

// ---- wire observations -----------------------------------------------------------------------------------------

/// Pass when `list` is empty, else fail with a summary; attaches the offending exchanges as evidence.
fn judge_observed(ctx: &mut Ctx, req: &str, list: &[Observed], ok: String) {
    if list.is_empty() {
        ctx.pass(req, ok);
        return;
    }
    ctx.fail(req, summarise(list));
    for o in list.iter().take(5) {
        ctx.evidence.push(o.exchange.clone());
    }
}

async fn wire_envelopes(ctx: &mut Ctx) {
    let n = ctx.obs.envelopes_seen;
    if n == 0 {
        return untestable(
            ctx,
            &["LDP-ENV-001", "LDP-ENV-002", "LDP-ENV-003", "LDP-ENV-004", "LDP-ENV-005"],
            "no reply envelope was received",
        );
    }
    let lists = [
        ("LDP-ENV-001", std::mem::take(&mut ctx.obs.envelope_fields), format!("{n} reply envelopes carry every field")),
        ("LDP-ENV-002", std::mem::take(&mut ctx.obs.timestamps), format!("{n} timestamps are RFC 3339")),
        ("LDP-ENV-003", std::mem::take(&mut ctx.obs.duplicate_ids), format!("{n} message ids are distinct")),
        ("LDP-ENV-004", std::mem::take(&mut ctx.obs.non_uuid_ids), format!("{n} message ids are UUIDs")),
        ("LDP-ENV-005", std::mem::take(&mut ctx.obs.addressing), format!("{n} replies from the card's id to the kit")),
    ];
    for (req, list, ok) in lists {
        judge_observed(ctx, req, &list, ok);
    }
}

async fn wire_schema(ctx: &mut Ctx) {
    let list = std::mem::take(&mut ctx.obs.schema);
    let ok = format!("{} reply envelopes and the error objects validate", ctx.obs.envelopes_seen);
    judge_observed(ctx, "LDP-SCHEMA-001", &list, ok);
}

async fn http_stream(ctx: &mut Ctx) {
    const REQ: &str = "LDP-HTTP-002";
    if ctx.transport() != TransportKind::Http {
        return ctx.skip(REQ, "not applicable: the WebSocket binding pushes TASK_UPDATEs on its own connection");
    }
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return ctx.blocked(REQ, NO_SESSION, format!("no session: {e}")),
    };
    let task_id = format!("task-{}", uuid::Uuid::new_v4());
    let submit = TaskSubmit::new(task_id.clone(), ctx.skill(), Ctx::input_for(session.mode), None);
    let env = ctx.envelope(&session.id, submit, session.mode);
    let streamed = ctx.send_stream(&env).await;
    let answer = &streamed.answer;
    let claimed = ctx.claims.has(Feature::Streaming);
    match answer.status() {
        None => ctx.fail(REQ, format!("POST /ldp/stream: {}", answer.describe())),
        Some(status) if !(200..300).contains(&status) => {
            let what = format!("POST /ldp/stream with a TASK_SUBMIT → {}", answer.describe());
            if claimed {
                ctx.fail(REQ, what);
            } else {
                ctx.skip(REQ, format!("{what}: no streaming endpoint"));
            }
        }
        Some(status) => {
            ctx.claims.claim(Feature::Streaming, format!("POST /ldp/stream answered {status}"));
            match judge_stream(&streamed, &task_id) {
                Ok(summary) => ctx.pass(REQ, summary),
                Err(problem) => ctx.fail(REQ, problem),
            }
        }
    }
    tidy(ctx, &session).await;
}

/// Whether a task's event stream is what RFC 8.1 describes: envelopes, TASK_UPDATEs for the task, then its result.
fn judge_stream(streamed: &crate::ctx::StreamAnswer, task_id: &str) -> Result<String, String> {
    let content_type = streamed.answer.reply.as_ref().and_then(|r| r.content_type.clone()).unwrap_or_default();
    if !is_media_type(Some(&content_type), "text/event-stream") {
        return Err(format!("answered with content type {content_type:?}, not text/event-stream"));
    }
    let Some((last, updates)) = streamed.events.split_last() else {
        return Err("the event stream carried no event".to_owned());
    };
    for (i, event) in updates.iter().enumerate() {
        let json = serde_json::from_str::<Value>(&event.data).map_err(|e| format!("event {i} is not JSON: {e}"))?;
        let ty = json.pointer("/body/type").and_then(Value::as_str);
        let task = json.pointer("/body/task_id").and_then(Value::as_str);
        if ty != Some("TASK_UPDATE") || task != Some(task_id) {
            return Err(format!(
                "event {i} before the result is {ty:?} for task {task:?}, not a TASK_UPDATE for {task_id}"
            ));
        }
    }
    if last.event == "error" {
        return Err(format!("the stream ended with an error event: {}", last.data));
    }
    let json = serde_json::from_str::<Value>(&last.data).map_err(|e| format!("the last event is not JSON: {e}"))?;
    let ty = json.pointer("/body/type").and_then(Value::as_str);
    let task = json.pointer("/body/task_id").and_then(Value::as_str);
    match ty {
        Some("TASK_RESULT" | "TASK_FAILED") if task == Some(task_id) => {
            Ok(format!("{} TASK_UPDATE event(s), then the {}", updates.len(), ty.unwrap_or_default()))
        }
        _ if streamed.timed_out => Err(format!(
            "no TASK_RESULT or TASK_FAILED for {task_id} before the request timeout ({} event(s) read)",
            streamed.events.len()
        )),
        _ => Err(format!("the stream ended with {ty:?} for task {task:?}, not the result of {task_id}")),
    }
}

async fn wire_content_type(ctx: &mut Ctx) {
    if ctx.transport() != TransportKind::Http {
        return ctx.skip("LDP-HTTP-001", "not applicable: WebSocket text frames");
    }
    if ctx.obs.json_replies == 0 {
        return ctx.not_testable("LDP-HTTP-001", "no reply with a body was received");
    }
    let list = std::mem::take(&mut ctx.obs.content_type);
    let ok = format!("{} replies are application/json", ctx.obs.json_replies);
    judge_observed(ctx, "LDP-HTTP-001", &list, ok);
}

async fn wire_provenance(ctx: &mut Ctx) {
    let n = ctx.obs.results_seen;
    if n == 0 {
        blocked(
            ctx,
            &["LDP-PROV-001", "LDP-PROV-002", "LDP-PROV-003", "LDP-PROV-004", "LDP-PROV-005"],
            NO_SESSION,
            "no TASK_RESULT was received",
        );
        return ctx.skip("LDP-EXT-VERIFY-001", "no TASK_RESULT");
    }
    let lists = [
        (
            "LDP-PROV-001",
            std::mem::take(&mut ctx.obs.provenance_missing),
            format!("{n} TASK_RESULTs carry full provenance"),
        ),
        (
            "LDP-PROV-002",
            std::mem::take(&mut ctx.obs.provenance_attribution),
            format!("{n} provenance records name the card's delegate"),
        ),
        (
            "LDP-PROV-005",
            std::mem::take(&mut ctx.obs.mode_used),
            format!("{n} provenance records name a mode of their exchange"),
        ),
        (
            "LDP-PROV-003",
            std::mem::take(&mut ctx.obs.confidence_missing),
            format!("{n} provenance records carry confidence"),
        ),
        (
            "LDP-PROV-004",
            std::mem::take(&mut ctx.obs.provenance_fields),
            format!("{n} provenance records are well-formed"),
        ),
    ];
    for (req, list, ok) in lists {
        judge_observed(ctx, req, &list, ok);
    }
    if ctx.claims.has(Feature::VerificationStatus) {
        let list = std::mem::take(&mut ctx.obs.verification);
        judge_observed(ctx, "LDP-EXT-VERIFY-001", &list, "verification_status is valid and consistent".into());
    } else {
        ctx.skip("LDP-EXT-VERIFY-001", "no provenance carries verification_status");
    }
}

async fn wire_errors(ctx: &mut Ctx) {
    if ctx.obs.errors_seen == 0 {
        return ctx.not_testable("LDP-ERR-001", "no error was received");
    }
    let list = std::mem::take(&mut ctx.obs.untyped_errors);
    let ok = format!("{} errors are typed", ctx.obs.errors_seen);
    judge_observed(ctx, "LDP-ERR-001", &list, ok);
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
        let verdict = judge_stream(&stream(events, "text/event-stream; charset=utf-8", false), "t");
        assert_eq!(verdict, Ok("2 TASK_UPDATE event(s), then the TASK_RESULT".to_owned()));
        let failed = judge_stream(&stream(vec![envelope_event("TASK_FAILED", "t")], "text/event-stream", false), "t");
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
            let verdict = judge_stream(&streamed, "t");
            assert!(matches!(&verdict, Err(why) if why.contains(expected)), "{expected}: {verdict:?}");
        }
    }
}
