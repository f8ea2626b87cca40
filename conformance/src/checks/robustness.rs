//! Robustness checks: malformed JSON, non-envelopes, the wrong content type, unknown message types, oversize
//! messages; every one refused without harm (RFC 8, 9).

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

/// Judges a bad message that must get a typed refusal (or, with `processing_ok`, may be processed), then checks
/// the server still answers.
pub(super) async fn robust(ctx: &mut Ctx, req: &str, what: &str, out: Outgoing, processing_ok: bool) -> bool {
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

pub(super) async fn robust_malformed_json(ctx: &mut Ctx) {
    let body = br#"{"message_id": "conformance-malformed", "body": {"type": "HELLO", "delegate_id": "#.to_vec();
    robust(ctx, "LDP-ROBUST-001", "a truncated JSON body", Outgoing::json(body), false).await;
}

pub(super) async fn robust_not_an_envelope(ctx: &mut Ctx) {
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

pub(super) async fn robust_wrong_content_type(ctx: &mut Ctx) {
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

pub(super) async fn robust_unknown_type(ctx: &mut Ctx) {
    let body = Body::Unknown(UnknownBody {
        type_name: "CONFORMANCE_UNKNOWN_TYPE".into(),
        fields: Map::from_iter([("note".to_owned(), json!("not an LDP message type"))]),
    });
    let env = ctx.envelope("", body, PayloadMode::Text);
    let out = Outgoing::json(env.to_vec().unwrap_or_default());
    robust(ctx, "LDP-ROBUST-004", "a message of type CONFORMANCE_UNKNOWN_TYPE", out, false).await;
}

pub(super) async fn robust_oversize(ctx: &mut Ctx) {
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
