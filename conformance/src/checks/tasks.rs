//! Session and task checks, one probe per rule: unknown, closed and expired sessions, undeclared skills,
//! cancellation, attestations, messages sent the wrong way, contracts (RFC 5, 6).

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

/// Judges a task that must be refused with a typed error of one of `categories`.
pub(super) fn judge_task_refusal(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer, categories: &[ErrorCategory]) {
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

pub(super) async fn session_unknown(ctx: &mut Ctx) {
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

/// A text session of `ttl` seconds in which one task completed; `None`, with `reqs` blocked, when either failed.
async fn session_that_ran(ctx: &mut Ctx, reqs: &[&str], ttl: u64) -> Option<Session> {
    let session = match ctx.open_session(&[PayloadMode::Text], ttl).await {
        Ok(s) => s,
        Err(e) => {
            blocked(ctx, reqs, NO_SESSION, &format!("no session with ttl_secs {ttl}: {e}"));
            return None;
        }
    };
    let (_, first) = ctx.submit_default(&session).await;
    if !first.is_type("TASK_RESULT") {
        blocked(ctx, reqs, NO_SESSION, &format!("a task in the new session did not complete: {}", first.describe()));
        return None;
    }
    Some(session)
}

pub(super) async fn session_closed(ctx: &mut Ctx) {
    let reqs = ["LDP-SESS-003", "LDP-ERR-002"];
    let Some(session) = session_that_ran(ctx, &reqs, SESSION_TTL).await else { return };
    let _ = ctx.close(&session.id).await;
    let (_, answer) = ctx.submit_default(&session).await;
    judge_task_refusal(ctx, "LDP-SESS-003", "TASK_SUBMIT after SESSION_CLOSE", &answer, &[ErrorCategory::Session]);
}

pub(super) async fn session_ttl(ctx: &mut Ctx) {
    let reqs = ["LDP-SESS-004", "LDP-ERR-002"];
    let ttl = ctx.cfg.ttl_hint.unwrap_or(crate::runner::DEFAULT_TTL_PROBE_SECS).max(1);
    let Some(session) = session_that_ran(ctx, &reqs, ttl).await else { return };
    tokio::time::sleep(Duration::from_secs(ttl) + Duration::from_millis(1500)).await;
    let (_, answer) = ctx.submit_default(&session).await;
    let what =
        format!("TASK_SUBMIT {:.1} s after the last activity of a session with ttl_secs {ttl}", ttl as f64 + 1.5);
    judge_task_refusal(ctx, "LDP-SESS-004", &what, &answer, &[ErrorCategory::Session]);
}

pub(super) async fn task_undeclared_skill(ctx: &mut Ctx) {
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

pub(super) async fn task_cancel(ctx: &mut Ctx) {
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

pub(super) async fn message_attestation(ctx: &mut Ctx) {
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

pub(super) async fn message_wrong_direction(ctx: &mut Ctx) {
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

pub(super) async fn contract_tolerated(ctx: &mut Ctx) {
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
