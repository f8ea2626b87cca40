#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Run with: `cargo run --release -p ldp-session --example idle_sessions -- 1000000`
//!
//! Memory per idle session of the responder machine: establishes N sessions through the real `Responder::handle`
//! path (one SESSION_PROPOSE as JSON bytes per session, each from its own initiator, with an assigned session id),
//! drains events as a driver would, and reports the growth of resident memory (`VmRSS` from `/proc/self/status`)
//! per session and projected to 1,000,000 sessions.

use std::sync::Arc;
use std::time::Instant;

use ldp_session::{ManualClock, Outcome, PeerContext, Responder, ResponderConfig, SeededIds, WallClock};
use ldp_types::{Capability, DelegateId, Envelope, IdentityCard, PayloadMode, SessionConfig, SessionPropose};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux only)");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmRSS value");
    kib * 1024
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(100_000, |a| a.parse().expect("session count"));
    let clock = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "echo", "1");
    card.capabilities.push(Capability::new("echo"));
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_sessions = n;
    let mut responder = Responder::new(cfg, Arc::new(clock.clone()), Box::new(SeededIds::new(1)));
    let peer = PeerContext::default();
    let now = Instant::now();
    let timestamp = ldp_types::time::format_timestamp(clock.now_utc());
    let propose = |i: usize| {
        Envelope::new(
            format!("msg-{i}"),
            timestamp.as_str(),
            "",
            format!("ldp:delegate:client-{i}"),
            "ldp:delegate:echo",
            SessionPropose::new(SessionConfig {
                preferred_payload_modes: Some(vec![PayloadMode::SemanticFrame, PayloadMode::Text]),
                ttl_secs: Some(3600),
                ..SessionConfig::default()
            }),
        )
        .to_vec()
        .unwrap()
    };
    // Warm up the allocator and the code paths, then measure from a settled baseline.
    drop((0..1000).map(propose).collect::<Vec<_>>());
    let before = rss_bytes();
    let started = Instant::now();
    for i in 0..n {
        match responder.handle(now, &peer, &propose(i)) {
            Ok(Outcome::Reply(_)) => {}
            other => panic!("session {i} not established: {other:?}"),
        }
        while responder.poll_event().is_some() {}
    }
    let elapsed = started.elapsed();
    let after = rss_bytes();
    assert_eq!(responder.session_count(), n);
    let growth = after.saturating_sub(before);
    let per_session = growth as f64 / n as f64;
    let projected = per_session * 1_000_000.0;
    let gib = 1024.0 * 1024.0 * 1024.0;
    println!("sessions:             {n}");
    println!(
        "established in:       {:.2} s ({:.2} us per SESSION_PROPOSE)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
    println!("resident before:      {:.1} MiB", before as f64 / (1024.0 * 1024.0));
    println!("resident after:       {:.1} MiB", after as f64 / (1024.0 * 1024.0));
    println!("bytes per session:    {per_session:.0}");
    println!(
        "projected 1,000,000:  {:.3} GiB (target <= 1 GiB: {})",
        projected / gib,
        if projected <= gib { "met" } else { "missed" }
    );
    // Reaping returns the sessions.
    let _reaped = responder.handle_timeout(now + std::time::Duration::from_secs(3600));
    assert_eq!(responder.session_count(), 0);
}
