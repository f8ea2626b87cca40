#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Session TTL (RFC 5.4: seconds of inactivity) with the injected monotonic clock.

use std::time::Duration;

use crate::support::*;
use ldp_session::{InitiatorEvent, Limits, ResponderEvent, SessionState, TaskKey, TaskOutput};
use ldp_types::{Body, ErrorCategory, PayloadMode, SessionConfig, SessionPropose, TaskUpdate, codes};
use serde_json::json;

fn ttl(secs: u64) -> SessionConfig {
    SessionConfig { ttl_secs: Some(secs), ..SessionConfig::default() }
}

#[test]
fn an_idle_session_expires_and_late_messages_get_session_expired() {
    let mut sim = Sim::new();
    let sid = sim.establish(ttl(60));
    assert_eq!(sim.responder.poll_timeout(), Some(sim.now() + Duration::from_secs(60)));
    sim.advance(Duration::from_secs(60));
    // Exactly at the deadline the session is gone, even before the driver calls `handle_timeout`.
    let step = sim.submit(&sid, "echo", frame("late"));
    let err = step.error();
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Session, codes::SESSION_EXPIRED));
    assert!(err.retryable, "establishing a new session and retrying is the remedy");
    assert_eq!(sim.responder.session_count(), 0);
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::SessionExpired { session_id: sid.clone(), aborted: vec![] }]
    );
    // The initiator learns the session is gone.
    assert!(sim.initiator_events().iter().any(|e| matches!(e, InitiatorEvent::TaskFailed { error, .. }
        if error.code == codes::SESSION_EXPIRED)));
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Closed));
}

#[test]
fn activity_extends_the_deadline() {
    let mut sim = Sim::new();
    let sid = sim.establish(ttl(60));
    let first_deadline = sim.responder.poll_timeout().unwrap();
    for _ in 0..5 {
        sim.advance(Duration::from_secs(59));
        let task = sim.submit(&sid, "echo", frame("keepalive")).task();
        sim.complete(&task.key, TaskOutput::new(json!("ok")));
    }
    // 295 s after establishment, far beyond the TTL, and still alive.
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    // A timer armed at the first deadline finds the session alive and re-arms at the real one.
    let _reaped = sim.responder.handle_timeout(first_deadline);
    assert_eq!(sim.responder.session_count(), 1);
    let last_activity = sim.now();
    let real = last_activity + Duration::from_secs(60);
    // `poll_timeout` may report an earlier (stale) deadline, never a later one; a driver that follows it reaches
    // the real deadline without reaping the session early.
    let mut wakeups = 0;
    while let Some(t) = sim.responder.poll_timeout().filter(|t| *t < real) {
        let _reaped = sim.responder.handle_timeout(t);
        assert_eq!(sim.responder.session_count(), 1);
        wakeups += 1;
        assert!(wakeups < 10, "the timer never reaches the real deadline");
    }
    assert_eq!(sim.responder.poll_timeout(), Some(real));
    let _reaped = sim.responder.handle_timeout(last_activity + Duration::from_secs(59));
    assert_eq!(sim.responder.session_count(), 1);
    let _reaped = sim.responder.handle_timeout(last_activity + Duration::from_secs(60));
    assert_eq!(sim.responder.session_count(), 0);
}

#[test]
fn handle_timeout_reaps_expired_sessions_in_deadline_order() {
    let mut sim = Sim::new();
    let start = sim.now();
    let ids: Vec<String> = [30, 10, 20].into_iter().map(|s| sim.establish(ttl(s))).collect();
    assert_eq!(sim.responder.session_count(), 3);
    assert_eq!(sim.responder.poll_timeout(), Some(start + Duration::from_secs(10)));
    let _reaped = sim.responder.handle_timeout(start + Duration::from_secs(15));
    assert_eq!(sim.responder.session_count(), 2);
    assert_eq!(sim.responder.session_state(&ids[1]), None);
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::SessionExpired { session_id: ids[1].clone(), aborted: vec![] }]
    );
    assert_eq!(sim.responder.poll_timeout(), Some(start + Duration::from_secs(20)));
    let _reaped = sim.responder.handle_timeout(start + Duration::from_secs(3600));
    assert_eq!(sim.responder.session_count(), 0);
    assert_eq!(sim.responder.poll_timeout(), None);
    assert_eq!(sim.responder_events().len(), 2);
}

#[test]
fn expiry_drops_running_tasks_and_their_slots() {
    let mut cfg = responder_config();
    cfg.limits.max_concurrent_tasks = 1;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.establish(ttl(5));
    let task = sim.submit(&sid, "echo", frame("slow")).task();
    assert_eq!(sim.responder.running_tasks(), 1);
    sim.advance(Duration::from_secs(5));
    let _reaped = sim.responder.handle_timeout(sim.now());
    assert_eq!(sim.responder.running_tasks(), 0);
    assert!(sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!(1))).is_err());
    // The slot is free for another session.
    let other = sim.session();
    sim.submit(&other, "echo", frame("next")).task();
}

#[test]
fn a_suspended_session_keeps_its_ttl() {
    let mut sim = Sim::new();
    let sid = sim.establish(ttl(30));
    sim.responder.suspend_connection(1);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Suspended));
    sim.advance(Duration::from_secs(31));
    let _reaped = sim.responder.handle_timeout(sim.now());
    assert_eq!(sim.responder.session_state(&sid), None);
    let query = sim.forge(&sid, TaskUpdate::new("t".into(), None, None), PayloadMode::Text);
    assert_eq!(sim.step(query).error().code, codes::SESSION_EXPIRED);
}

#[test]
fn proposed_ttls_default_and_are_capped() {
    let day = Limits::default().max_ttl;
    let ten_min = Duration::from_secs(600);
    // (max_ttl, proposed ttl_secs, effective ttl in seconds)
    let table = [
        (day, None, 3600),
        (day, Some(0), 3600),
        (day, Some(1), 1),
        (ten_min, Some(599), 599),
        (ten_min, Some(601), 600),
        (ten_min, Some(u64::MAX), 600),
    ];
    for (max_ttl, proposed, effective) in table {
        let mut cfg = responder_config();
        cfg.limits.max_ttl = max_ttl;
        let mut sim = Sim::with(cfg, initiator_config());
        let config = SessionConfig { ttl_secs: proposed, ..Default::default() };
        let env = sim.forge("", SessionPropose::new(config), PayloadMode::Text);
        sim.send_responder(&env).unwrap();
        assert_eq!(sim.responder.poll_timeout(), Some(sim.now() + Duration::from_secs(effective)), "{proposed:?}");
    }
}

#[test]
fn an_unbounded_max_ttl_and_a_huge_proposed_ttl_do_not_overflow() {
    let mut cfg = responder_config();
    cfg.limits.max_ttl = Duration::MAX;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.establish(ttl(u64::MAX));
    sim.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    let _reaped = sim.responder.handle_timeout(sim.now());
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    sim.submit(&sid, "echo", frame("still here")).task();
}

#[test]
fn forgotten_sessions_answer_not_found_once_their_tombstone_is_evicted() {
    let mut cfg = responder_config();
    cfg.limits = Limits { tombstones: 1, ..Limits::default() };
    let mut sim = Sim::with(cfg, initiator_config());
    let a = sim.establish(ttl(1));
    let b = sim.establish(ttl(1));
    sim.advance(Duration::from_secs(2));
    let _reaped = sim.responder.handle_timeout(sim.now());
    let codes: Vec<String> = [&a, &b]
        .into_iter()
        .map(|sid| {
            let env = sim.forge(sid, TaskUpdate::new("t".into(), None, None), PayloadMode::Text);
            sim.send_responder(&env).unwrap_err().error.code.to_string()
        })
        .collect();
    // Only one tombstone is kept: one id is remembered as expired, the other is unknown.
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(sorted, vec![codes::SESSION_EXPIRED.to_owned(), codes::SESSION_NOT_FOUND.to_owned()], "{codes:?}");
}

/// Expiry hands back the running tasks of the reaped session (their work must stop), with the definite answer for
/// each one's submitter; a session that expires while a message is handled queues them the same way.
#[test]
fn expiry_hands_back_the_running_tasks_with_their_answers() {
    let mut sim = Sim::new();
    let sid = sim.establish(ttl(60));
    let task = sim.submit(&sid, "echo", frame("long")).task();
    let other = sim.establish(ttl(60));
    let other_task = sim.submit(&other, "echo", frame("long too")).task();
    sim.responder_events();
    sim.advance(Duration::from_secs(59));
    // Activity keeps `other` alive; `sid` expires at its deadline.
    sim.submit(&other, "echo", frame("keep alive")).task();
    sim.advance(Duration::from_secs(1));
    let reaped = sim.responder.handle_timeout(sim.now());
    assert_eq!(reaped, vec![task.key.clone()]);
    assert_eq!(sim.responder.running_tasks(), 2);
    let aborted = sim.responder.poll_aborted().unwrap();
    assert_eq!(aborted.key, task.key);
    assert!(matches!(&aborted.reply.body, Body::TaskFailed(f) if f.task_id == task.key.task_id
        && f.error.code == codes::CANCELLED && f.error.message.contains("expired")));
    assert_eq!(sim.responder.poll_aborted(), None);
    // Found expired while handling a message rather than by `handle_timeout`: queued all the same.
    sim.advance(Duration::from_secs(60));
    let step = sim.submit(&other, "echo", frame("late"));
    assert_eq!(step.error().code, codes::SESSION_EXPIRED);
    let mut keys: Vec<TaskKey> = std::iter::from_fn(|| sim.responder.poll_aborted()).map(|a| a.key).collect();
    keys.sort();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&other_task.key));
    assert_eq!(sim.responder.running_tasks(), 0);
}
