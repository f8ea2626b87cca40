#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::result_large_err)]
//! `Responder::inbound_check` + `Responder::handle_checked` (decoding and signature checks outside the machine, as
//! `DelegateRuntime` runs them before taking its lock) answer every message exactly as `Responder::handle` does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::{ManualClock, PeerContext, Responder, ResponderConfig, SecurityConfig, SeededIds, WallClock};
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{
    Body, Capability, DelegateId, Envelope, Hello, IdentityCard, PayloadMode, SessionConfig, SessionPropose, TaskSubmit,
};
use serde_json::json;

const RESPONDER: &str = "ldp:delegate:r";
const INITIATOR: &str = "ldp:delegate:i";

fn responder(clock: &ManualClock, security: SecurityConfig) -> Responder {
    let mut card = IdentityCard::new(DelegateId::new(RESPONDER).unwrap(), "R", "r", "1");
    card.capabilities = vec![Capability::new("echo")];
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    let mut cfg = ResponderConfig::new(card);
    cfg.security = security;
    Responder::new(cfg, Arc::new(clock.clone()), Box::new(SeededIds::new(3)))
}

#[test]
fn checked_handling_answers_as_handle_does() {
    let algorithms = [None, Some(SignatureAlgorithm::HmacSha256), Some(SignatureAlgorithm::HmacSha256Jcs)];
    for alg in algorithms {
        let key = alg.map(|a| SigningKey::shared_secret(a, "secret").unwrap());
        let security = key.clone().map(SecurityConfig::symmetric).unwrap_or_default();
        let clock = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
        let (mut direct, mut checked) = (responder(&clock, security.clone()), responder(&clock, security));
        let check = checked.inbound_check();
        let now = Instant::now();
        let peer = PeerContext::default();
        let mut seq = 0;
        let mut message = |session: &str, body: Body, sign: bool| {
            seq += 1;
            clock.advance(Duration::from_millis(1));
            let mut env = Envelope::new(
                format!("m-{seq}"),
                ldp_types::time::format_timestamp(clock.now_utc()),
                session,
                INITIATOR,
                RESPONDER,
                body,
            );
            env.nonce = Some(format!("{seq:032x}"));
            if let (Some(k), true) = (&key, sign) {
                signing::sign(&mut env, k).unwrap();
            }
            env.to_vec().unwrap()
        };
        let propose = message("", SessionPropose::new(SessionConfig::default()).into(), true);
        let handled = direct.handle(now, &peer, &propose);
        let via_check = check.check(&propose).and_then(|c| checked.handle_checked(now, &peer, c));
        assert_eq!(format!("{handled:?}"), format!("{via_check:?}"));
        let handled = handled.unwrap();
        let ldp_session::Outcome::Reply(accept) = handled else { panic!("{handled:?}") };
        let Body::SessionAccept(a) = accept.body else { panic!() };
        let sid = a.session_id;
        let submit = |id: &str| Body::from(TaskSubmit::new(id.into(), "echo".into(), json!("hi"), None));
        let good = message(&sid, submit("t1"), true);
        let mut inputs = vec![
            good.clone(),
            good,                               // a replay (refused when replay protection is on)
            message(&sid, submit("t2"), false), // unsigned
            message(&sid, submit("t3"), true),
            message(&sid, Hello::new(INITIATOR.into(), vec![]).into(), true),
            message("no-such-session", submit("t4"), true),
            b"{\"message_id\":".to_vec(), // malformed
            b"[1, 2]".to_vec(),           // not an envelope
        ];
        let mut tampered = String::from_utf8(message(&sid, submit("t5"), true)).unwrap();
        tampered = tampered.replace("\"hi\"", "\"ho\"");
        inputs.push(tampered.into_bytes());
        let mut unknown: serde_json::Value = serde_json::from_slice(&message(&sid, submit("t6"), true)).unwrap();
        unknown["body"]["type"] = json!("GOSSIP");
        inputs.push(serde_json::to_vec(&unknown).unwrap());
        for bytes in &inputs {
            let expected = direct.handle(now, &peer, bytes);
            let got = check.check(bytes).and_then(|c| checked.handle_checked(now, &peer, c));
            assert_eq!(format!("{got:?}"), format!("{expected:?}"), "{alg:?}: {}", String::from_utf8_lossy(bytes));
        }
    }
}
