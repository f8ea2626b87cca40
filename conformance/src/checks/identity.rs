//! Identity checks: the card at the well-known path (RFC 2.1, 8) and the transport's authentication.

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

pub(super) async fn identity_discovery(ctx: &mut Ctx) {
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

pub(super) async fn transport_auth(ctx: &mut Ctx) {
    const REQ: &str = "LDP-AUTH-001";
    if ctx.cfg.token.is_none() {
        if ctx.probe.base().starts_with("https://") {
            ctx.pass(REQ, "the endpoint uses TLS");
        } else {
            ctx.fail(REQ, "plain HTTP and no --token given: the kit could not see any transport-level authentication");
        }
        return;
    }
    // With a token, every endpoint that takes messages must want it: one left open lets anyone in through it.
    let mut guarded: Vec<String> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let hello = || ldp_types::Hello::new(crate::ctx::KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::Text]);
    let transport = ctx.transport().as_str();
    for (credential, what) in [(None, "without the bearer token"), (Some(WRONG_TOKEN), "with an unknown bearer token")]
    {
        let env = ctx.envelope("", hello(), PayloadMode::Text);
        let mut out = Outgoing::json(env.to_vec().unwrap_or_default());
        out.token = Some(credential.map(str::to_owned));
        let answer = ctx.send(out, Some(&env)).await;
        let line = format!("a HELLO over {transport} {what}: {}", answer.describe());
        if answer.is_refusal() || answer.close_code().is_some() || answer.transport_error.is_some() {
            guarded.push(line);
        } else {
            open.push(line);
        }
    }
    // The stream endpoint, whatever transport the kit runs on.
    let submit =
        ldp_types::TaskSubmit::new(format!("task-{}", uuid::Uuid::new_v4()), ctx.skill(), json!("auth probe"), None);
    let env = ctx.envelope(&uuid::Uuid::new_v4().to_string(), submit, PayloadMode::Text);
    let stream = ctx.send_stream_as(&env, None).await;
    match stream.answer.status() {
        Some(404 | 405) => {}
        Some(401 | 403) => guarded.push("POST /ldp/stream without the bearer token: refused".into()),
        _ if stream.answer.transport_error.is_some() => {}
        status => open.push(format!(
            "POST /ldp/stream without the bearer token was taken: HTTP {status:?}, {} event(s)",
            stream.events.len()
        )),
    }
    // The WebSocket binding, when the delegate offers one.
    match ctx.ws_upgrade(None).await {
        Ok(101) => open.push("the WebSocket upgrade at /ldp/ws without the bearer token was accepted".into()),
        Ok(401 | 403) => guarded.push("the WebSocket upgrade without the bearer token: refused".into()),
        Ok(_) | Err(_) => {}
    }
    if open.is_empty() {
        ctx.pass(REQ, format!("every endpoint wants the bearer token: {}", guarded.join("; ")));
    } else {
        ctx.fail(REQ, format!("reachable without valid credentials: {}", open.join("; ")));
    }
}

/// A bearer token no delegate was given: the kit's probe of an unknown credential.
const WRONG_TOKEN: &str = "ldp-conformance-unknown-token";
