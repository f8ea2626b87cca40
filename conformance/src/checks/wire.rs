//! Wire observations, judged over every exchange the earlier checks made: envelopes, schemas, the stream
//! endpoint, content types, provenance and typed errors. These checks run last.

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;
use crate::ctx::{Observed, summarise};
use ldp_types::TaskSubmit;

/// Pass when `list` is empty, else fail with a summary; attaches the offending exchanges as evidence.
pub(super) fn judge_observed(ctx: &mut Ctx, req: &str, list: &[Observed], ok: String) {
    if list.is_empty() {
        ctx.pass(req, ok);
        return;
    }
    ctx.fail(req, summarise(list));
    for o in list.iter().take(5) {
        ctx.evidence.push(o.exchange.clone());
    }
}

pub(super) async fn wire_envelopes(ctx: &mut Ctx) {
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

pub(super) async fn wire_schema(ctx: &mut Ctx) {
    let list = std::mem::take(&mut ctx.obs.schema);
    let ok = format!("{} reply envelopes and the error objects validate", ctx.obs.envelopes_seen);
    judge_observed(ctx, "LDP-SCHEMA-001", &list, ok);
}

pub(super) async fn http_stream(ctx: &mut Ctx) {
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
pub(super) fn judge_stream(streamed: &crate::ctx::StreamAnswer, task_id: &str) -> Result<String, String> {
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

pub(super) async fn wire_content_type(ctx: &mut Ctx) {
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

pub(super) async fn wire_provenance(ctx: &mut Ctx) {
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

pub(super) async fn wire_errors(ctx: &mut Ctx) {
    if ctx.obs.errors_seen == 0 {
        return ctx.not_testable("LDP-ERR-001", "no error was received");
    }
    let list = std::mem::take(&mut ctx.obs.untyped_errors);
    let ok = format!("{} errors are typed", ctx.obs.errors_seen);
    judge_observed(ctx, "LDP-ERR-001", &list, ok);
}
