//! Handshake and lifecycle checks: HELLO, a session from proposal to close, mode negotiation and payload
//! fallback (RFC 3.2, 4, 5).

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

pub(super) async fn handshake_hello(ctx: &mut Ctx) {
    let answer = ctx.hello().await;
    let declared = answer.body().and_then(super::negotiation::manifest_capabilities);
    if answer.is_type("CAPABILITY_MANIFEST") && declared.as_ref().is_some_and(|d| !d.is_empty()) {
        ctx.pass("LDP-MSG-001", format!("HELLO → CAPABILITY_MANIFEST of {:?}", declared.unwrap_or_default()));
    } else if answer.is_type("CAPABILITY_MANIFEST") {
        ctx.fail("LDP-MSG-001", "a CAPABILITY_MANIFEST that declares no capabilities");
    } else {
        ctx.fail("LDP-MSG-001", format!("HELLO → {}", answer.describe()));
    }
}

pub(super) async fn session_lifecycle(ctx: &mut Ctx) {
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

pub(super) async fn negotiation_modes(ctx: &mut Ctx) {
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

pub(super) async fn payload_fallback(ctx: &mut Ctx) {
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
