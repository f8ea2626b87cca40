//! Signatures and replay (adoption profile A) beyond one probe per rule: HELLO, TASK_SUBMIT, TASK_CANCEL and
//! ATTESTATION replayed (SESSION_PROPOSE is `security.replay`), a task
//! replayed (it must not run twice), stale and future timestamps, every way a signature can be wrong (empty,
//! malformed, another or weaker algorithm than the configured one, a covered field changed after signing), and
//! unsigned messages of every session type.

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{Attestation, Envelope, PayloadMode, SessionClose, TaskCancel, TaskSubmit};
use serde_json::{Value, json};

use super::{SESSION_TTL, no_key, tidy};
use crate::ctx::{Answer, Ctx, Session};

/// The signed session every probe here needs; `None` after recording why there is none.
async fn signed_session(ctx: &mut Ctx, req: &str) -> Option<Session> {
    match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => Some(s),
        Err(e) => {
            ctx.blocked(req, "LDP-SEC-001", format!("no signed session: {e}"));
            None
        }
    }
}

fn task(ctx: &Ctx, session: &Session) -> TaskSubmit {
    TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), ctx.skill(), Ctx::input_for(session.mode), None)
}

/// A message that must not be acted on: a typed refusal passes; an answer that acts on it (`acted`) or no typed
/// refusal fails.
fn judge_not_acted(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer, acted: bool) {
    if acted {
        return ctx.fail(req, format!("{what} was acted on: {}", answer.describe()));
    }
    match answer.typed_refusal() {
        Ok(e) => ctx.pass(req, format!("{what} → {}", e.describe())),
        Err(e) => ctx.fail(req, format!("{what}: {e}")),
    }
}

// ---- replay ----------------------------------------------------------------------------------------------------

pub(super) async fn security_replay_all(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-003";
    if no_key(ctx, REQ) {
        return;
    }
    // HELLO: the copy must not be answered as a fresh handshake.
    let hello = ctx.envelope(
        "",
        ldp_types::Hello::new(crate::ctx::KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::Text]),
        PayloadMode::Text,
    );
    let first = ctx.send_envelope(&hello).await;
    if first.is_type("CAPABILITY_MANIFEST") {
        let copy = ctx.send_envelope(&hello).await;
        let acted = copy.is_type("CAPABILITY_MANIFEST");
        judge_not_acted(ctx, REQ, "a replayed HELLO (identical bytes)", &copy, acted);
    }
    let Some(session) = signed_session(ctx, REQ).await else { return };

    // A task must not run twice: the copy of a TASK_SUBMIT that ran gets no second TASK_RESULT.
    let submit = ctx.envelope(&session.id, task(ctx, &session), session.mode);
    let first = ctx.send_envelope(&submit).await;
    if first.is_type("TASK_RESULT") {
        let copy = ctx.send_envelope(&submit).await;
        let acted = copy.is_type("TASK_RESULT");
        judge_not_acted(ctx, REQ, "a replayed TASK_SUBMIT (the task had already run)", &copy, acted);
    } else {
        ctx.not_testable(REQ, format!("a signed TASK_SUBMIT did not complete: {}", first.describe()));
    }

    // TASK_CANCEL: whatever the first answer, the identical copy is a replay.
    let cancel = ctx.envelope(&session.id, TaskCancel::new(format!("task-{}", uuid::Uuid::new_v4())), session.mode);
    let _ = ctx.send_envelope(&cancel).await;
    let copy = ctx.send_envelope(&cancel).await;
    let acted = copy.is_processed() || copy.is_ack();
    judge_not_acted(ctx, REQ, "a replayed TASK_CANCEL", &copy, acted);

    // ATTESTATION: the copy of an attestation must not count twice.
    let claim = json!({ "subject": crate::ctx::KIT_DELEGATE_ID, "statement": "conformance replay probe" });
    let attestation = ctx.envelope(&session.id, Attestation::new(claim, json!({ "kind": "none" })), session.mode);
    let first = ctx.send_envelope(&attestation).await;
    if first.is_processed() || first.is_ack() {
        let copy = ctx.send_envelope(&attestation).await;
        // A WebSocket delegate that answers nothing to either cannot be told apart here: no reply is no verdict.
        if !copy.no_reply() {
            let acted = copy.is_processed() || copy.is_ack();
            judge_not_acted(ctx, REQ, "a replayed ATTESTATION", &copy, acted);
        }
    }

    // A fresh message with a stale or a future timestamp is a replay the message-id cache cannot see.
    for (what, offset) in [("an hour old", -3600), ("an hour in the future", 3600)] {
        let mut env = ctx.envelope(&session.id, task(ctx, &session), session.mode);
        let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(offset);
        env.timestamp = ldp_types::time::format_timestamp(at);
        ctx.resign(&mut env);
        let answer = ctx.send_envelope(&env).await;
        let acted = answer.is_type("TASK_RESULT");
        judge_not_acted(ctx, REQ, &format!("a signed TASK_SUBMIT timestamped {what}"), &answer, acted);
    }
    tidy(ctx, &session).await;
}

// ---- bad signatures --------------------------------------------------------------------------------------------

/// A key of another algorithm than `key`'s that an attacker could hold: the same shared secret under the other
/// HMAC construction (for `hmac-sha256-jcs` the weaker `hmac-sha256`, which does not cover the body), or, for
/// `ed25519-jcs`, an HMAC keyed with the public key (the classic algorithm confusion).
fn other_algorithm_key(key: &SigningKey) -> Option<SigningKey> {
    match key {
        SigningKey::HmacSha256Jcs(secret) => SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, secret).ok(),
        SigningKey::HmacSha256(secret) => SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, secret).ok(),
        SigningKey::Ed25519(_) => {
            let public = key.verifying_key().public_hex().unwrap_or_default();
            SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, public).ok()
        }
        // An algorithm added later has no confusion pair named here yet.
        _ => None,
    }
}

/// Changes a member the algorithm covers, after signing: the input for the JCS algorithms (they cover the whole
/// envelope), the task id for `hmac-sha256` (it covers `task_id|skill`, not the input).
fn tamper(value: &mut Value, algorithm: SignatureAlgorithm) -> &'static str {
    match algorithm {
        SignatureAlgorithm::HmacSha256 => {
            if let Some(body) = value.get_mut("body").and_then(Value::as_object_mut) {
                body.insert("task_id".into(), json!(format!("task-tampered-{}", uuid::Uuid::new_v4())));
            }
            "its task_id changed after signing"
        }
        _ => {
            if let Some(body) = value.get_mut("body").and_then(Value::as_object_mut) {
                body.insert("input".into(), json!("tampered after signing: run something else"));
            }
            "its input changed after signing"
        }
    }
}

/// Spoils the signature members of an envelope object.
type Spoil = fn(&mut Value);

pub(super) async fn security_bad_signatures(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-002";
    if no_key(ctx, REQ) {
        return;
    }
    let Some(key) = ctx.signing.clone() else { return };
    let Some(session) = signed_session(ctx, REQ).await else { return };

    let spoil: [(&str, Spoil); 4] = [
        ("an empty signature", |v| {
            v["signature"] = json!("");
        }),
        ("a signature that is not hex", |v| {
            v["signature"] = json!("zz-not-a-signature-zz");
        }),
        ("a signature that is JSON null with the algorithm still named", |v| {
            v["signature"] = Value::Null;
        }),
        ("signature_algorithm \"none\"", |v| {
            v["signature_algorithm"] = json!("none");
        }),
    ];
    for (what, spoil) in spoil {
        let env = ctx.envelope(&session.id, task(ctx, &session), session.mode);
        let mut value = env.to_value().unwrap_or_default();
        spoil(&mut value);
        let answer = ctx.send_value(&value, &env).await;
        let acted = answer.is_type("TASK_RESULT");
        judge_not_acted(ctx, REQ, &format!("a TASK_SUBMIT with {what}"), &answer, acted);
    }

    if let Some(other) = other_algorithm_key(&key) {
        let mut env = ctx.envelope(&session.id, task(ctx, &session), session.mode);
        env.signature = None;
        env.signature_algorithm = None;
        let _ = signing::sign(&mut env, &other);
        let answer = ctx.send_envelope(&env).await;
        let acted = answer.is_type("TASK_RESULT");
        let what = format!(
            "a TASK_SUBMIT signed with {} (the delegate is configured for {})",
            other.algorithm(),
            key.algorithm()
        );
        judge_not_acted(ctx, REQ, &what, &answer, acted);
    }

    let env = ctx.envelope(&session.id, task(ctx, &session), session.mode);
    let mut value = env.to_value().unwrap_or_default();
    let how = tamper(&mut value, key.algorithm());
    // Replies are judged against what was sent: a refusal may name the tampered task.
    let sent = Envelope::from_value(value.clone()).unwrap_or(env);
    let answer = ctx.send_value(&value, &sent).await;
    let acted = answer.is_type("TASK_RESULT");
    judge_not_acted(ctx, REQ, &format!("a signed TASK_SUBMIT with {how}"), &answer, acted);
    tidy(ctx, &session).await;
}

// ---- unsigned messages -----------------------------------------------------------------------------------------

pub(super) async fn security_unsigned_all(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SEC-004";
    if no_key(ctx, REQ) {
        return;
    }
    let Some(session) = signed_session(ctx, REQ).await else { return };
    // HELLO is left out: its answer is the public manifest, what the unauthenticated identity card says too.
    // A status query (TASK_UPDATE to the responder, RFC 3.2) names a task that ran, whose result it would give away.
    let (ran, _) = ctx.submit_default(&session).await;
    let ran = ran.body.task_id().unwrap_or_default().to_owned();
    let config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
    let unsigned: Vec<(&str, ldp_types::Body)> = vec![
        ("TASK_UPDATE", ldp_types::TaskUpdate::new(ran, None, Some("status?".into())).into()),
        ("SESSION_PROPOSE", ldp_types::SessionPropose::new(config).into()),
        ("TASK_CANCEL", TaskCancel::new(format!("task-{}", uuid::Uuid::new_v4())).into()),
        (
            "ATTESTATION",
            Attestation::new(json!({ "subject": crate::ctx::KIT_DELEGATE_ID, "statement": "unsigned" }), json!({}))
                .into(),
        ),
        ("SESSION_CLOSE", SessionClose::new(Some("unsigned close".into())).into()),
    ];
    ctx.sign_outgoing = false;
    let mut answers: Vec<(&str, Envelope, Answer)> = Vec::new();
    for (ty, body) in unsigned {
        let sid = if ty == "SESSION_PROPOSE" { String::new() } else { session.id.clone() };
        let env = ctx.envelope(&sid, body, session.mode);
        let answer = ctx.send_envelope(&env).await;
        answers.push((ty, env, answer));
    }
    ctx.sign_outgoing = true;
    for (ty, _, answer) in &answers {
        let acted = match *ty {
            "SESSION_PROPOSE" => answer.is_type("SESSION_ACCEPT"),
            _ => answer.is_processed() || answer.is_ack(),
        };
        judge_not_acted(ctx, REQ, &format!("an unsigned {ty}"), answer, acted);
    }
    // An unsigned SESSION_CLOSE that was refused must also have left the session open.
    let (_, after) = ctx.submit_default(&session).await;
    if !after.is_type("TASK_RESULT") {
        ctx.fail(
            REQ,
            format!("after the unsigned SESSION_CLOSE the session no longer runs tasks: {}", after.describe()),
        );
    }
    tidy(ctx, &session).await;
}
