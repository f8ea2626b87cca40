//! Signature and replay checks, one probe per rule (adoption profile A); `signing` goes beyond one probe.

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

pub(super) fn no_key(ctx: &mut Ctx, req: &str) -> bool {
    if ctx.signing.is_some() {
        return false;
    }
    ctx.skip(req, "no --sign/--secret given");
    true
}

pub(super) async fn security_signed_exchange(ctx: &mut Ctx) {
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

pub(super) async fn security_bad_signature(ctx: &mut Ctx) {
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

pub(super) async fn security_replay(ctx: &mut Ctx) {
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

pub(super) async fn security_unsigned(ctx: &mut Ctx) {
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
