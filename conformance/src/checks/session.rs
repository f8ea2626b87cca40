//! Session enforcement beyond the one probe per rule: a task names its session by id, and every way of naming no
//! established session (empty, missing, a well-formed UUID nobody accepted, garbage) is refused, on `/ldp/messages`,
//! on `/ldp/stream` and over WebSocket alike (the runner runs every check on every transport); a session serves only
//! the peer that established it.

use ldp_types::{ErrorCategory, PayloadMode, TaskSubmit};
use serde_json::Value;

use super::{NO_SESSION, SESSION_TTL, blocked, judge_task_refusal, tidy};
use crate::ctx::{Answer, Ctx, KIT_DELEGATE_ID};
use crate::probe::TransportKind;

/// The `from` of the stranger who tries to use the kit's session.
pub(crate) const STRANGER_ID: &str = "ldp:delegate:conformance-stranger";

/// The ways a TASK_SUBMIT can name a session nobody established: `Some(id)` sends that id, `None` leaves the
/// `session_id` member out.
fn unknown_session_ids() -> Vec<(&'static str, Option<String>)> {
    vec![
        ("an empty session_id", Some(String::new())),
        ("a well-formed UUID session_id nobody established", Some(uuid::Uuid::new_v4().to_string())),
        ("a session_id that is not a UUID", Some(format!("../conformance/not-a-session-{}", uuid::Uuid::new_v4()))),
        ("no session_id member", None),
    ]
}

pub(super) async fn session_unknown_ids(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SESS-002";
    let _ = ctx.hello().await;
    let skill = ctx.skill();
    for (what, sid) in unknown_session_ids() {
        let body = TaskSubmit::new(
            format!("task-{}", uuid::Uuid::new_v4()),
            skill.clone(),
            Ctx::input_for(PayloadMode::Text),
            None,
        );
        let what = format!("TASK_SUBMIT with {what}");
        match sid {
            Some(id) => {
                let env = ctx.envelope(&id, body, PayloadMode::Text);
                let answer = ctx.send_envelope(&env).await;
                judge_task_refusal(ctx, REQ, &what, &answer, &[ErrorCategory::Session]);
            }
            None => {
                let env = ctx.envelope("", body, PayloadMode::Text);
                let mut value = env.to_value().unwrap_or_default();
                if let Some(obj) = value.as_object_mut() {
                    obj.remove("session_id");
                }
                let answer = ctx.send_value(&value, &env).await;
                // Without a session id the message is not a valid envelope either: any typed refusal is right,
                // so only whether it was refused is judged.
                judge_refused(ctx, REQ, &what, &answer);
            }
        }
    }
    if ctx.transport() == TransportKind::Http {
        stream_unknown_session(ctx, &skill).await;
    }
}

/// The same rule on `POST /ldp/stream`: a task for a session nobody established produces no TASK_RESULT there
/// either. An implementation without the streaming endpoint (an HTTP 404 or 405) is not judged here.
async fn stream_unknown_session(ctx: &mut Ctx, skill: &str) {
    const REQ: &str = "LDP-SESS-002";
    let sid = uuid::Uuid::new_v4().to_string();
    let task_id = format!("task-{}", uuid::Uuid::new_v4());
    let body = TaskSubmit::new(task_id, skill.to_owned(), Ctx::input_for(PayloadMode::Text), None);
    let env = ctx.envelope(&sid, body, PayloadMode::Text);
    let streamed = ctx.send_stream(&env).await;
    let what = "POST /ldp/stream: TASK_SUBMIT with a well-formed UUID session_id nobody established";
    judge_streamed_refusal(ctx, REQ, what, &streamed);
}

/// A task that must not run: a typed refusal passes, anything else fails.
fn judge_refused(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer) {
    if answer.is_type("TASK_RESULT") {
        return ctx.fail(req, format!("{what} was executed (TASK_RESULT)"));
    }
    match answer.typed_refusal() {
        Ok(e) => ctx.pass(req, format!("{what} → {}", e.describe())),
        Err(e) => ctx.fail(req, format!("{what}: {e}")),
    }
}

pub(super) async fn session_foreign_peer(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SESS-005";
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &[REQ], NO_SESSION, &format!("no session: {e}")),
    };
    let skill = ctx.skill();
    let body =
        TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), skill.clone(), Ctx::input_for(session.mode), None);
    let mut env = ctx.envelope(&session.id, body, session.mode);
    env.from = STRANGER_ID.into();
    ctx.resign(&mut env);
    let answer = ctx.send_envelope(&env).await;
    judge_refused(
        ctx,
        REQ,
        &format!("TASK_SUBMIT from {STRANGER_ID} in a session {KIT_DELEGATE_ID} established"),
        &answer,
    );

    if let Some(token) = ctx.cfg.untrusted_token.clone() {
        let body = TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), skill, Ctx::input_for(session.mode), None);
        let env = ctx.envelope(&session.id, body, session.mode);
        let mut out = crate::probe::Outgoing::json(env.to_vec().unwrap_or_default());
        out.token = Some(Some(token));
        out.task_id = env.body.task_id().map(str::to_owned);
        out.message_id = Some(env.message_id.clone());
        let answer = ctx.send(out, Some(&env)).await;
        judge_refused(
            ctx,
            REQ,
            "TASK_SUBMIT authenticated with --untrusted-token in a session the kit established",
            &answer,
        );
    }
    tidy(ctx, &session).await;
}

pub(super) async fn session_closed_stream(ctx: &mut Ctx) {
    const REQ: &str = "LDP-SESS-003";
    if ctx.transport() != TransportKind::Http {
        // The WebSocket binding has no separate streaming endpoint; `session.closed` judges it.
        return;
    }
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &[REQ], NO_SESSION, &format!("no session: {e}")),
    };
    let _ = ctx.close(&session.id).await;
    let task_id = format!("task-{}", uuid::Uuid::new_v4());
    let body = TaskSubmit::new(task_id, ctx.skill(), Ctx::input_for(session.mode), None);
    let env = ctx.envelope(&session.id, body, session.mode);
    let streamed = ctx.send_stream(&env).await;
    judge_streamed_refusal(ctx, REQ, "POST /ldp/stream: TASK_SUBMIT after SESSION_CLOSE", &streamed);
}

/// A task sent to `/ldp/stream` that must not run: no TASK_RESULT event; a typed refusal (as a JSON answer or an
/// error event) passes. An implementation without the endpoint (404 or 405, nothing streamed) is not judged.
fn judge_streamed_refusal(ctx: &mut Ctx, req: &str, what: &str, streamed: &crate::ctx::StreamAnswer) {
    let executed = streamed.events.iter().any(|e| {
        serde_json::from_str::<Value>(&e.data)
            .ok()
            .and_then(|j| j.pointer("/body/type").and_then(Value::as_str).map(|t| t == "TASK_RESULT"))
            .unwrap_or(false)
    });
    if executed {
        return ctx.fail(req, format!("{what} was executed (a TASK_RESULT event)"));
    }
    let answer = &streamed.answer;
    match answer.status() {
        Some(404 | 405) if streamed.events.is_empty() => {}
        _ if streamed.events.iter().any(|e| e.event == "error" || e.data.contains("TASK_FAILED")) => {
            ctx.pass(req, format!("{what} → an error event"));
        }
        _ => match answer.typed_refusal() {
            Ok(e) => ctx.pass(req, format!("{what} → {}", e.describe())),
            Err(e) => ctx.fail(req, format!("{what}: {e}")),
        },
    }
}
