#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! RFC 7.2 trust checks at session establishment, and how the initiator's domain is established
//! ([`TrustPolicy`]: authenticated, declared, unidentified).

use crate::support::*;
use ldp_session::{
    AuthenticatedPeer, DeclaredDomains, InitiatorEvent, Outcome, PeerContext, ResponderEvent, SessionState, TrustPolicy,
};
use ldp_types::{Body, ErrorCategory, PayloadMode, SessionConfig, SessionPropose, TaskSubmit, TrustDomain, codes};

const PARTNER: &str = "partner.org";
const EVIL: &str = "evil.org";

struct Row {
    what: &'static str,
    policy: TrustPolicy,
    /// The responder's own domain settings.
    responder: TrustDomain,
    /// The domain the transport authenticated.
    authenticated: Option<&'static str>,
    /// The domain the proposal declares.
    declared: Option<&'static str>,
    required: Option<&'static str>,
    /// The established initiator domain, or the refusal's code.
    expect: Result<&'static str, &'static str>,
}

fn permissive() -> TrustPolicy {
    TrustPolicy::permissive(DOMAIN)
}

fn allow(list: &[&str], unidentified: Option<&str>) -> TrustPolicy {
    TrustPolicy {
        declared_domains: DeclaredDomains::Allow(list.iter().map(|s| s.to_string()).collect()),
        unidentified_domain: unidentified.map(str::to_owned),
    }
}

fn ignore(unidentified: Option<&str>) -> TrustPolicy {
    TrustPolicy { declared_domains: DeclaredDomains::Ignore, unidentified_domain: unidentified.map(str::to_owned) }
}

fn rows() -> Vec<Row> {
    let own = || TrustDomain::new(DOMAIN);
    let trusting_partner = || TrustDomain::new(DOMAIN).trusting(PARTNER);
    let row = |what, policy, responder, authenticated, declared, required, expect| Row {
        what,
        policy,
        responder,
        authenticated,
        declared,
        required,
        expect,
    };
    vec![
        row("same domain, declared", permissive(), own(), None, Some(DOMAIN), None, Ok(DOMAIN)),
        row("nothing declared, permissive assumes own", permissive(), own(), None, None, None, Ok(DOMAIN)),
        row("required domain matches", permissive(), own(), None, None, Some(DOMAIN), Ok(DOMAIN)),
        row("required domain differs", permissive(), own(), None, None, Some(PARTNER), Err(codes::TRUST_VIOLATION)),
        row("cross-domain refused", permissive(), own(), None, Some(PARTNER), None, Err(codes::TRUST_VIOLATION)),
        row("cross-domain trusted peer", permissive(), trusting_partner(), None, Some(PARTNER), None, Ok(PARTNER)),
        row(
            "cross-domain untrusted peer",
            permissive(),
            trusting_partner(),
            None,
            Some(EVIL),
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "trusted peer but wrong required domain",
            permissive(),
            trusting_partner(),
            None,
            Some(PARTNER),
            Some(PARTNER),
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "strict: a declaration is not enough",
            TrustPolicy::strict(),
            own(),
            None,
            Some(DOMAIN),
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "strict: unidentified refused",
            TrustPolicy::strict(),
            own(),
            None,
            None,
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row("strict: authenticated", TrustPolicy::strict(), own(), Some(DOMAIN), None, None, Ok(DOMAIN)),
        row(
            "authenticated and consistent declaration",
            TrustPolicy::strict(),
            own(),
            Some(DOMAIN),
            Some(DOMAIN),
            None,
            Ok(DOMAIN),
        ),
        row(
            "authenticated wins over a conflicting declaration",
            permissive(),
            own(),
            Some(PARTNER),
            Some(DOMAIN),
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "authenticated cross-domain trusted",
            TrustPolicy::strict(),
            trusting_partner(),
            Some(PARTNER),
            None,
            None,
            Ok(PARTNER),
        ),
        row(
            "authenticated cross-domain refused",
            permissive(),
            own(),
            Some(PARTNER),
            None,
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row("allow list: listed", allow(&[DOMAIN], None), own(), None, Some(DOMAIN), None, Ok(DOMAIN)),
        row(
            "allow list: unlisted, no fallback",
            allow(&[DOMAIN], None),
            trusting_partner(),
            None,
            Some(PARTNER),
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "allow list: unlisted declaration counts as unidentified",
            allow(&[DOMAIN], Some(PARTNER)),
            trusting_partner(),
            None,
            Some(EVIL),
            None,
            Ok(PARTNER),
        ),
        row(
            "ignore: declaration disregarded",
            ignore(Some(PARTNER)),
            trusting_partner(),
            None,
            Some(DOMAIN),
            None,
            Ok(PARTNER),
        ),
        row("ignore: unidentified assumed", ignore(Some(DOMAIN)), own(), None, None, None, Ok(DOMAIN)),
        row(
            "ignore: assumed domain still checked",
            ignore(Some(EVIL)),
            trusting_partner(),
            None,
            None,
            None,
            Err(codes::TRUST_VIOLATION),
        ),
        row(
            "ignore without fallback refuses",
            ignore(None),
            own(),
            None,
            Some(DOMAIN),
            None,
            Err(codes::TRUST_VIOLATION),
        ),
    ]
}

#[test]
fn trust_is_checked_at_establishment_per_policy() {
    for r in rows() {
        let mut cfg = responder_config();
        cfg.trust = r.policy.clone();
        cfg.card.trust_domain = r.responder.clone();
        let mut icfg = initiator_config();
        icfg.trust_domain = r.declared.map(str::to_owned);
        let mut sim = Sim::with(cfg, icfg);
        sim.peer.authenticated =
            r.authenticated.map(|d| AuthenticatedPeer { delegate_id: None, trust_domain: d.to_owned() });
        let config = SessionConfig { required_trust_domain: r.required.map(str::to_owned), ..SessionConfig::default() };
        let propose = sim.initiator.propose(config);
        let step = sim.step(propose);
        match (r.expect, &step.outcome) {
            (Ok(domain), Ok(Outcome::Reply(reply))) => {
                let Body::SessionAccept(a) = &reply.body else { panic!("{}: {reply:?}", r.what) };
                assert_eq!(sim.responder.session_peer_domain(&a.session_id), Some(domain), "{}", r.what);
                assert!(
                    sim.responder_events().iter().any(|e| matches!(e,
                        ResponderEvent::SessionEstablished { peer_domain, .. } if peer_domain == domain)),
                    "{}",
                    r.what
                );
            }
            (Err(code), Err(refusal)) => {
                assert_eq!(refusal.error.code, code, "{}: {:?}", r.what, refusal.error);
                assert_eq!(refusal.error.category, ErrorCategory::Policy, "{}", r.what);
                assert!(!refusal.error.retryable, "{}", r.what);
                let reply = refusal.reply.as_ref().unwrap();
                assert!(matches!(&reply.body, Body::SessionReject(rj) if rj.error.as_ref() == Some(&refusal.error)));
                assert_eq!(reply.to, INITIATOR);
                assert_eq!(sim.responder.session_count(), 0, "{}", r.what);
                assert!(
                    sim.initiator_events().iter().any(|e| matches!(e, InitiatorEvent::SessionRejected { error }
                        if error.code == code)),
                    "{}",
                    r.what
                );
            }
            (expect, got) => panic!("{}: expected {expect:?}, got {got:?}", r.what),
        }
    }
}

#[test]
fn trust_is_validated_once_per_session() {
    let mut cfg = responder_config();
    cfg.trust = TrustPolicy::strict();
    let mut sim = Sim::with(cfg, initiator_config());
    sim.peer.authenticated = Some(AuthenticatedPeer { delegate_id: None, trust_domain: DOMAIN.into() });
    let sid = sim.session();
    // Later messages under the same credential are not re-checked against the trust policy (the session's domain
    // stands); messages with a different (or no) authenticated identity are not the session's peer (issue 14).
    for _ in 0..2 {
        let task = sim.submit(&sid, "echo", frame("x")).task();
        assert_eq!(task.key.session_id, sid);
        assert_eq!(sim.responder.session_peer_domain(&sid), Some(DOMAIN));
    }
    let owner = sim.peer.authenticated.clone();
    for auth in [None, Some(AuthenticatedPeer { delegate_id: None, trust_domain: EVIL.into() })] {
        sim.peer.authenticated = auth;
        assert_eq!(sim.submit(&sid, "echo", frame("x")).error().code, codes::NOT_SESSION_PEER);
    }
    sim.peer.authenticated = owner;
    sim.submit(&sid, "echo", frame("x")).task();
    // A new proposal under the strict policy without authentication is refused: the check runs at establishment.
    sim.peer.authenticated = None;
    let propose = sim.initiator.propose(SessionConfig::default());
    assert_eq!(sim.step(propose).error().code, codes::TRUST_VIOLATION);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
}

#[test]
fn an_authenticated_delegate_id_pins_the_sender() {
    let mut sim = Sim::new();
    let auth = |id: &str| Some(AuthenticatedPeer { delegate_id: Some(id.to_owned()), trust_domain: DOMAIN.to_owned() });
    // A sender that contradicts its credential is refused outright (identity).
    sim.peer.authenticated = auth(STRANGER);
    let propose = sim.initiator.propose(SessionConfig::default());
    let err = sim.step(propose).error();
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Identity, codes::UNAUTHENTICATED));

    sim.peer.authenticated = auth(INITIATOR);
    let sid = sim.session();
    sim.submit(&sid, "echo", frame("ok")).task();
    // The same `from` without the credential is not the session's peer any more.
    sim.peer = PeerContext { authenticated: None, connection: Some(1), principal: None, address: None, scopes: None };
    let env =
        sim.forge(&sid, TaskSubmit::new("t2".into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame);
    let err = sim.step(env).error();
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Session, codes::NOT_SESSION_PEER));
}

#[test]
fn a_python_style_proposal_without_config_fields_is_accepted_under_permissive_trust() {
    let mut sim = Sim::new();
    // Python sends `trust_domain`; an RFC-shaped proposal sends nothing or only `required_trust_domain`.
    for config in [
        SessionConfig::default(),
        SessionConfig { required_trust_domain: Some(DOMAIN.into()), ..SessionConfig::default() },
        SessionConfig { trust_domain: Some(DOMAIN.into()), ttl_secs: Some(3600), ..SessionConfig::default() },
    ] {
        let env = sim.forge("", SessionPropose::new(config.clone()), PayloadMode::Text);
        assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))), "{config:?}");
    }
}
