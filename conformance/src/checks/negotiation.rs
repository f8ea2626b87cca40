//! Negotiation beyond the responder's own preference order: the initiator's preference list decides (RFC 4.2),
//! a task in a mode the session did not negotiate is refused (5.3), and the CAPABILITY_MANIFEST says what the card
//! says.

use ldp_types::{PayloadMode, TaskSubmit};
use serde_json::Value;

use super::{NO_SESSION, SESSION_TTL, blocked, tidy};
use crate::ctx::Ctx;

pub(super) async fn negotiation_preference(ctx: &mut Ctx) {
    use PayloadMode::{SemanticFrame, SemanticGraph, Text};
    const REQ: &str = "LDP-NEG-001";
    let card = ctx.card_modes();
    // RFC 4.2: "For each mode in initiator's preference list (highest first): if ... responder supports it → select
    // this mode". An initiator that prefers text gets text even from a responder that would rather use frames.
    let proposals: [&[PayloadMode]; 2] = [&[Text, SemanticFrame], &[SemanticGraph, Text, SemanticFrame]];
    for prefs in proposals {
        let expected = ldp_types::negotiate(prefs, &card, &PayloadMode::ALL).mode;
        match ctx.open_session(prefs, SESSION_TTL).await {
            Ok(s) if s.mode == expected => {
                ctx.pass(REQ, format!("{prefs:?} → {} (the initiator's order decides)", s.mode));
                tidy(ctx, &s).await;
            }
            Ok(s) => {
                ctx.fail(
                    REQ,
                    format!(
                        "{prefs:?} → {}, but RFC 4.2 selects the first of the initiator's preferences the card \
                         supports ({card:?}): {expected}",
                        s.mode
                    ),
                );
                tidy(ctx, &s).await;
            }
            Err(e) => return blocked(ctx, &[REQ], NO_SESSION, &format!("no session for {prefs:?}: {e}")),
        }
    }
}

pub(super) async fn negotiation_unnegotiated_mode(ctx: &mut Ctx) {
    const REQ: &str = "LDP-NEG-003";
    let session = match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
        Ok(s) => s,
        Err(e) => return blocked(ctx, &[REQ], NO_SESSION, &format!("no session: {e}")),
    };
    if session.mode != PayloadMode::Text {
        ctx.fail(REQ, format!("a text-only proposal negotiated {}", session.mode));
        return tidy(ctx, &session).await;
    }
    let card = ctx.card_modes();
    // The richest mode the card does not list (never advertised), and a listed mode above text (advertised, not
    // negotiated for this session).
    let unadvertised = PayloadMode::ALL.into_iter().rev().find(|m| !card.contains(m));
    let unnegotiated = card.iter().copied().filter(|m| *m != PayloadMode::Text).max_by_key(|m| m.number());
    let skill = ctx.skill();
    for (what, mode) in [("not advertised on the card", unadvertised), ("advertised but not negotiated", unnegotiated)]
    {
        let Some(mode) = mode else { continue };
        let task = TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), skill.clone(), Ctx::input_for(mode), None);
        let env = ctx.envelope(&session.id, task, mode);
        let answer = ctx.send_envelope(&env).await;
        let label = format!("a {mode} task ({what}) in a session that negotiated text");
        if answer.is_type("TASK_RESULT") {
            let used = answer
                .json
                .as_ref()
                .and_then(|j| j.pointer("/body/provenance/payload_mode_used"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            // Running it as text (the negotiated mode) and saying so is the transparent fallback of RFC 4.3.
            if used == PayloadMode::Text.as_str() {
                ctx.pass(REQ, format!("{label} ran in text (payload_mode_used text)"));
            } else {
                ctx.fail(REQ, format!("{label} ran in {used}"));
            }
            continue;
        }
        match answer.typed_refusal() {
            Ok(e) => ctx.pass(REQ, format!("{label} → {}", e.describe())),
            Err(e) => ctx.fail(REQ, format!("{label}: {e}")),
        }
    }
    tidy(ctx, &session).await;
}

/// The capability names a CAPABILITY_MANIFEST declares, in either reference shape: a list of capabilities (Python)
/// or `{capabilities: [...], supported_modes: [...]}` (Rust).
pub(super) fn manifest_capabilities(body: &Value) -> Option<Vec<String>> {
    let caps = body.get("capabilities")?;
    let list = caps.as_array().or_else(|| caps.get("capabilities").and_then(Value::as_array))?;
    Some(list.iter().filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned)).collect())
}

pub(super) async fn handshake_manifest(ctx: &mut Ctx) {
    const REQ: &str = "LDP-MSG-008";
    let Some(card) = ctx.card.clone() else {
        return blocked(ctx, &[REQ], "LDP-IDENT-001", "no identity card to compare the manifest with");
    };
    let answer = ctx.hello().await;
    let Some(body) = answer.body().filter(|_| answer.is_type("CAPABILITY_MANIFEST")).cloned() else {
        return blocked(ctx, &[REQ], "LDP-MSG-001", &format!("HELLO → {}", answer.describe()));
    };
    let mut problems = Vec::new();
    let mut on_card: Vec<String> = card.capabilities.iter().map(|c| c.name.clone()).collect();
    on_card.sort();
    match manifest_capabilities(&body) {
        Some(declared) if declared.is_empty() => {
            problems.push(format!("the manifest declares no capabilities; the card declares {on_card:?}"));
        }
        Some(mut declared) => {
            declared.sort();
            if declared != on_card {
                problems.push(format!("the manifest declares capabilities {declared:?}, the card {on_card:?}"));
            }
        }
        None => problems.push("the manifest's capabilities are neither a list nor {capabilities: [...]}".into()),
    }
    let modes = body
        .pointer("/capabilities/supported_modes")
        .or_else(|| body.get("supported_modes"))
        .or_else(|| body.get("supported_payload_modes"));
    if let Some(modes) = modes.filter(|m| !m.is_null()) {
        let mut declared: Vec<String> = modes
            .as_array()
            .map(|m| m.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        let mut listed: Vec<String> = card.supported_payload_modes.iter().map(|m| m.as_str().to_owned()).collect();
        declared.sort();
        listed.sort();
        if declared != listed {
            problems.push(format!("the manifest declares modes {declared:?}, the card {listed:?}"));
        }
    }
    if problems.is_empty() {
        ctx.pass(REQ, format!("the manifest declares the card's {} capabilities", on_card.len()));
    } else {
        ctx.fail(REQ, problems.join("; "));
    }
}
