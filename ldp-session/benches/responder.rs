#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The responder machine's handling cost of one TASK_SUBMIT: bytes in through `Responder::handle` (decode, checks,
//! payload validation) and the TASK_RESULT out through `complete_task` (provenance, envelope, signature), with the
//! delegate's own work reduced to nothing. Unsigned, and with `hmac-sha256-jcs` signatures and replay protection.
//!
//! And the check a driver with a store makes before each message for a session not held here
//! (`Responder::room_for_session`), for a principal at its session limit with every session busy, on a replica
//! holding 10,000 sessions of other principals: the worst case, where the check must find that none of the
//! principal's sessions could give way.
//!
//! And the same replica at its own cap (`max_sessions`, 10,000 sessions of as many principals): adopting a session
//! from the store, which drops this replica's copy of the least recently used idle session; and the check before
//! a message when no session is idle (every one suspended), which must refuse. And a WebSocket connection's drop
//! there (`Responder::suspend_connection`), the connection carrying one of the 10,000 sessions.
//!
//! Run with: `cargo bench -p ldp-session --bench responder`

mod round;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ldp_session::shared::SharedSession;
use ldp_session::{ManualClock, Outcome, PeerContext, Responder, ResponderConfig, SeededIds, WallClock};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Body, Capability, DelegateId, Envelope, IdentityCard, TaskSubmit};
use round::setup;
use serde_json::json;

fn task_submit(c: &mut Criterion) {
    let mut group = c.benchmark_group("responder_task_submit");
    let variants = [
        ("unsigned", None),
        ("hmac-sha256-jcs+replay", Some(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap())),
    ];
    for (name, key) in variants {
        let (mut peer, mut server) = setup(key);
        // Sanity: a full round produces a (signed, when keyed) TASK_RESULT.
        let bytes = peer.submit();
        let result = server.round(&bytes);
        assert!(matches!(result.body, Body::TaskResult(_)));
        assert_eq!(result.signature.is_some(), peer.key.is_some());
        group.bench_function(name, |b| {
            b.iter_batched(|| peer.submit(), |bytes| black_box(server.round(&bytes)), BatchSize::SmallInput)
        });
    }
    group.finish();
}

fn room_for_session_at_the_principal_limit(c: &mut Criterion) {
    const RESPONDER: &str = "ldp:delegate:bench-responder";
    const BUSY: &str = "ldp:delegate:busy";
    let mut card = IdentityCard::new(DelegateId::new(RESPONDER).unwrap(), "bench", "sim", "1");
    card.capabilities = vec![Capability::new("echo")];
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_sessions = 20_000;
    cfg.limits.max_concurrent_tasks = 1_000;
    let per_principal = cfg.limits.max_sessions_per_principal;
    let clock = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
    let mut responder = Responder::new(cfg, Arc::new(clock.clone()), Box::new(SeededIds::new(7)));
    let now = Instant::now();
    let shared = |id: &str, peer: &str| -> SharedSession {
        serde_json::from_value(json!({
            "session_id": id, "peer": peer, "owner": null, "peer_delegate": null, "peer_domain": "default",
            "mode": "text", "fallback": ["text"], "ttl_secs": 3600,
        }))
        .unwrap()
    };
    for i in 0..10_000 {
        responder.adopt_session(now, &shared(&format!("other-{i}"), &format!("ldp:delegate:other-{i}"))).unwrap();
    }
    let message = |n: usize, session: &str, body: Body| {
        let stamp = ldp_types::time::format_timestamp(clock.now_utc());
        let id = format!("00000000-0000-4000-8000-{n:012x}");
        Envelope::new(id, stamp, session, BUSY, RESPONDER, body)
    };
    // The principal's sessions, each running a task: none may give way to another.
    for i in 0..per_principal {
        let session = format!("busy-{i}");
        responder.adopt_session(now, &shared(&session, BUSY)).unwrap();
        let submit = message(i, &session, TaskSubmit::new(format!("t-{i}"), "echo".into(), json!(i), None).into());
        let outcome = responder.handle(now, &PeerContext::default(), &submit.to_vec().unwrap()).unwrap();
        assert!(matches!(outcome, Outcome::Execute(_)), "{outcome:?}");
    }
    let unknown =
        message(per_principal, "busy-unknown", TaskSubmit::new("t".into(), "echo".into(), json!(0), None).into());
    assert!(responder.room_for_session(&PeerContext::default(), &unknown).is_err(), "the principal is at its limit");
    c.bench_function("responder_room_for_session_at_the_principal_limit", |b| {
        b.iter(|| black_box(responder.room_for_session(&PeerContext::default(), black_box(&unknown)).is_err()))
    });
}

/// A responder at `max_sessions` (10,000), each session adopted from the store for a principal of its own.
fn at_the_session_cap() -> (Responder, ManualClock, Instant) {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:bench-responder").unwrap(), "bench", "sim", "1");
    card.capabilities = vec![Capability::new("echo")];
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_sessions = 10_000;
    let clock = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
    let mut responder = Responder::new(cfg, Arc::new(clock.clone()), Box::new(SeededIds::new(7)));
    let now = Instant::now();
    for i in 0..10_000 {
        // Each a microsecond after the last, so that the least recently used is one session.
        let at = now + Duration::from_micros(i);
        responder.adopt_session(at, &shared(&format!("s-{i}"), &format!("ldp:delegate:p-{i}"))).unwrap();
    }
    (responder, clock, now + Duration::from_secs(1))
}

fn shared(id: &str, peer: &str) -> SharedSession {
    serde_json::from_value(json!({
        "session_id": id, "peer": peer, "owner": null, "peer_delegate": null, "peer_domain": "default",
        "mode": "text", "fallback": ["text"], "ttl_secs": 3600,
    }))
    .unwrap()
}

fn at_the_session_cap_cases(c: &mut Criterion) {
    let (mut responder, _clock, now) = at_the_session_cap();
    let mut next = 0u64;
    c.bench_function("responder_adopt_at_the_session_cap", |b| {
        b.iter(|| {
            next += 1;
            // A new session each time: the least recently used idle one gives way.
            responder
                .adopt_session(
                    now + Duration::from_nanos(next),
                    &shared(&format!("new-{next}"), &format!("ldp:delegate:new-{next}")),
                )
                .unwrap()
        })
    });

    let (mut responder, clock, now) = at_the_session_cap();
    for i in 0..10_000u64 {
        let stamp = ldp_types::time::format_timestamp(clock.now_utc());
        let body = ldp_types::TaskUpdate::new("t".into(), None, None);
        let id = format!("00000000-0000-4000-8000-{i:012x}");
        let env = Envelope::new(
            id,
            stamp,
            format!("s-{i}"),
            format!("ldp:delegate:p-{i}"),
            "ldp:delegate:bench-responder",
            Body::from(body),
        );
        let peer = PeerContext { connection: Some(1), ..PeerContext::default() };
        let _ = responder.handle(now, &peer, &env.to_vec().unwrap());
    }
    responder.suspend_connection(1);
    let unknown = Envelope::new(
        "00000000-0000-4000-8000-ffffffffffff",
        ldp_types::time::format_timestamp(clock.now_utc()),
        "s-unknown",
        "ldp:delegate:new",
        "ldp:delegate:bench-responder",
        Body::from(TaskSubmit::new("t".into(), "echo".into(), json!(0), None)),
    );
    assert!(responder.room_for_session(&PeerContext::default(), &unknown).is_err(), "every session is suspended");
    c.bench_function("responder_room_for_session_at_the_session_cap", |b| {
        b.iter(|| black_box(responder.room_for_session(&PeerContext::default(), black_box(&unknown)).is_err()))
    });
}

/// A connection's drop on a replica holding 10,000 sessions, each over a connection of its own: the dropped
/// connection carries one session, which a message on it resumes before each drop.
fn suspend_a_connection(c: &mut Criterion) {
    let (mut responder, clock, now) = at_the_session_cap();
    let message = |n: u64, session: &str, peer: &str| {
        let stamp = ldp_types::time::format_timestamp(clock.now_utc());
        let body = Body::from(ldp_types::TaskUpdate::new("t".into(), None, None));
        let id = format!("00000000-0000-4000-8000-{n:012x}");
        Envelope::new(id, stamp, session, peer, "ldp:delegate:bench-responder", body).to_vec().unwrap()
    };
    for i in 0..10_000u64 {
        let peer = PeerContext { connection: Some(1_000 + i), ..PeerContext::default() };
        let _ = responder.handle(now, &peer, &message(i, &format!("s-{i}"), &format!("ldp:delegate:p-{i}")));
    }
    let on_one = PeerContext { connection: Some(1), ..PeerContext::default() };
    let mut next = 10_000u64;
    c.bench_function("responder_suspend_a_connection", |b| {
        b.iter(|| {
            next += 1;
            let _ = responder.handle(now, &on_one, &message(next, "s-0", "ldp:delegate:p-0"));
            responder.suspend_connection(1);
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5)).sample_size(50);
    targets = task_submit, room_for_session_at_the_principal_limit, at_the_session_cap_cases, suspend_a_connection
}
criterion_main!(benches);
