//! Trust-domain checks beyond one foreign domain: the names an implementation that compares domains loosely
//! (`ends_with`, `starts_with`, `contains`, case-folded, empty as "any") would confuse with the real one. RFC 7.2
//! says the domain "MUST match"; a name that merely resembles it does not.

#[allow(clippy::wildcard_imports, reason = "a family of the parent's checks, moved out of it as they were")]
use super::*;

/// Judges a proposal that must be rejected; returns whether it was.
pub(super) fn judge_rejection(ctx: &mut Ctx, req: &str, what: &str, answer: &Answer) -> bool {
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

pub(super) async fn trust_required_domain(ctx: &mut Ctx) {
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

pub(super) async fn trust_foreign_domain(ctx: &mut Ctx) {
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

/// Names resembling `own` that are other domains: suffix, prefix, substring, case and empty variants.
pub(crate) fn look_alikes(own: &str) -> Vec<(&'static str, String)> {
    let mut names = vec![
        ("a name ending in the domain", format!("evil-{own}")),
        ("a name starting with the domain", format!("{own}.evil.invalid")),
        ("the domain with another case", own.to_uppercase()),
        ("the empty name", String::new()),
    ];
    if own.chars().count() > 2 {
        let inner: String = own.chars().skip(1).take(own.chars().count() - 2).collect();
        names.push(("a name inside the domain", inner));
    }
    if own.to_uppercase() == own {
        names.retain(|(what, _)| *what != "the domain with another case");
        names.push(("the domain with another case", own.to_lowercase()));
    }
    names.retain(|(_, n)| n != own);
    names
}

pub(super) async fn trust_domain_variants(ctx: &mut Ctx) {
    let reqs = ["LDP-TRUST-001", "LDP-TRUST-002", "LDP-TRUST-003", "LDP-ERR-002"];
    let Some(own) = ctx.card_domain() else {
        return blocked(ctx, &reqs, "LDP-IDENT-001", "the server's trust domain is unknown (no identity card)");
    };
    if ctx.hello().await.is_processed() {
        // Control: the kit's normal proposal is accepted, so a rejection below means something.
        match ctx.open_session(&[PayloadMode::Text], SESSION_TTL).await {
            Ok(s) => tidy(ctx, &s).await,
            Err(e) => return untestable(ctx, &reqs, &format!("no session can be established at all: {e}")),
        }
    }
    let trusted: Vec<String> = ctx
        .card
        .as_ref()
        .filter(|c| c.trust_domain.allow_cross_domain)
        .map(|c| c.trust_domain.trusted_peers.clone())
        .unwrap_or_default();
    for (what, name) in look_alikes(&own) {
        // RFC 7.2.1: the responder's domain must match what the initiator requires.
        let mut config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
        config.required_trust_domain = Some(name.clone());
        let answer = ctx.propose(config).await;
        let label = format!("required_trust_domain {name:?} ({what}; the server is {own:?})");
        if !judge_rejection(ctx, "LDP-TRUST-001", &label, &answer)
            && let Ok(s) = session_from(&answer)
        {
            tidy(ctx, &s).await;
        }
        // RFC 7.2.2-3: an initiator of another domain is rejected unless that domain is a trusted peer.
        if trusted.contains(&name) {
            continue;
        }
        let mut config = ctx.session_config(&[PayloadMode::Text], SESSION_TTL);
        config.trust_domain = Some(name.clone());
        let answer = ctx.propose(config).await;
        let label = format!("an initiator declaring trust_domain {name:?} ({what}; the server is {own:?})");
        if !judge_rejection(ctx, "LDP-TRUST-002", &label, &answer)
            && let Ok(s) = session_from(&answer)
        {
            tidy(ctx, &s).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alikes_are_never_the_domain_itself() {
        for own in ["conformance.test", "A", "ab", "UPPER.DOMAIN", "research.internal"] {
            let names = look_alikes(own);
            assert!(names.iter().all(|(_, n)| n != own), "{own}: {names:?}");
            assert!(names.iter().any(|(_, n)| n.is_empty()), "{own}");
            assert!(names.iter().any(|(_, n)| n.eq_ignore_ascii_case(own)), "{own}: a case variant");
        }
        let names = look_alikes("research.internal");
        assert!(names.iter().any(|(_, n)| n == "esearch.interna"), "{names:?}");
    }
}
