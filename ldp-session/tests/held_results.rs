#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `Responder::result_not_kept`: the TASK_FAILED a binding sends in place of a result it could not keep for a
//! suspended session's resume (issue 14, finding 2), addressed like the result and accepted by the initiator.

use std::time::Duration;

use crate::support::*;
use ldp_session::{SessionState, TaskOutput};
use ldp_types::{Body, codes};
use serde_json::json;

#[test]
fn a_result_not_kept_is_a_typed_task_failed_the_initiator_accepts() {
    let mut sim = Sim::new();
    let sid = sim.session();
    sim.peer.connection = Some(1);
    let task = sim.submit(&sid, "echo", frame("one")).task();
    sim.responder.suspend_connection(1);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Suspended));
    sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("one"))).unwrap();
    // The binding dropped the held result; the client is told which task, with a clear code.
    drop(sim.responder.take_held(&sid));
    let env = sim.responder.result_not_kept(&sid, &task.key.task_id, "held-result limit").unwrap();
    let Body::TaskFailed(failed) = &env.body else { panic!("{env:?}") };
    assert_eq!(failed.task_id, task.key.task_id);
    assert_eq!(failed.error.code, codes::RESULT_NOT_KEPT);
    assert!(!failed.error.retryable, "the task ran; re-running it repeats its effects");
    assert!(failed.error.message.contains(&task.key.task_id));
    assert_eq!(env.session_id, sid);
    sim.send_initiator(&env).unwrap();
    assert!(sim.responder.result_not_kept("no-such-session", "t", "x").is_none());
}

/// The machine's held answers are bounded (oldest dropped to a tombstone), reported task by task on resume, share
/// their bound with answers a transport hands back, and go with their session.
#[test]
fn held_answers_are_bounded_reported_on_resume_and_end_with_their_session() {
    let mut cfg = responder_config();
    cfg.limits.held = ldp_session::HeldLimits { per_session_results: 2, ..ldp_session::HeldLimits::default() };
    let mut sim = Sim::with(cfg, initiator_config());
    sim.peer.connection = Some(1);
    let sid = sim.session();
    assert_eq!(sim.responder.connection_of(&sid), Some(1));
    let tasks: Vec<_> = (0..3).map(|i| sim.submit(&sid, "echo", frame(&format!("t{i}"))).task()).collect();
    sim.responder.suspend_connection(1);
    assert_eq!(sim.responder.connection_of(&sid), None, "a suspended session has no connection to write to");
    for (i, task) in tasks.iter().enumerate() {
        let delivery = sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!(i))).unwrap();
        assert_eq!(delivery, ldp_session::Delivery::Held);
    }
    // A transport's undelivered answer counts against the same bound: it pushes out the oldest kept one.
    sim.responder.hold(sim.now(), &sid, "late", "{\"answer\":\"late\"}".to_owned());
    let stats = sim.responder.held_stats();
    assert_eq!((stats.results, stats.tombstones, stats.dropped), (2, 2, 2), "{stats:?}");

    let held = sim.responder.take_held(&sid);
    let order: Vec<&str> = held.iter().map(|h| h.task_id()).collect();
    assert_eq!(
        order,
        [tasks[0].key.task_id.as_str(), tasks[1].key.task_id.as_str(), tasks[2].key.task_id.as_str(), "late"]
    );
    for dropped in &held[..2] {
        let env = dropped.envelope().unwrap();
        let Body::TaskFailed(failed) = &env.body else { panic!("{env:?}") };
        assert_eq!(failed.error.code, codes::RESULT_NOT_KEPT);
        sim.send_initiator(&env).unwrap();
    }
    let kept = held[2].envelope().unwrap();
    assert!(matches!(&kept.body, Body::TaskResult(r) if r.output.json() == "2"), "{kept:?}");
    assert_eq!(held[3].json(), "{\"answer\":\"late\"}");
    assert!(sim.responder.take_held(&sid).is_empty(), "each answer is handed out once");
    assert_eq!(sim.responder.held_stats().tombstones, 0);

    // Held answers of a session that ends are forgotten; a transport's answer for it is not kept.
    let task = sim.submit(&sid, "echo", frame("again")).task();
    sim.responder.suspend_connection(1);
    sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("again"))).unwrap();
    assert_eq!(sim.responder.held_stats().results, 1);
    sim.responder.close_session(&sid, None).unwrap();
    assert_eq!(sim.responder.held_stats().results, 0);
    sim.responder.hold(sim.now(), &sid, "gone", "{}".to_owned());
    assert_eq!(sim.responder.held_stats().results, 0);
}

/// Held answers older than their TTL are dropped to tombstones by `handle_timeout`, and the tombstones later too.
#[test]
fn held_answers_expire_after_their_ttl() {
    let mut cfg = responder_config();
    cfg.limits.held = ldp_session::HeldLimits { ttl: Duration::from_secs(10), ..ldp_session::HeldLimits::default() };
    let mut sim = Sim::with(cfg, initiator_config());
    sim.peer.connection = Some(1);
    let sid = sim.establish(ldp_types::SessionConfig { ttl_secs: Some(3600), ..Default::default() });
    let task = sim.submit(&sid, "echo", frame("one")).task();
    sim.responder.suspend_connection(1);
    sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("one"))).unwrap();
    sim.advance(Duration::from_secs(9));
    assert!(sim.responder.handle_timeout(sim.now()).is_empty());
    assert_eq!(sim.responder.held_stats().results, 1);
    sim.advance(Duration::from_secs(2));
    assert!(sim.responder.handle_timeout(sim.now()).is_empty());
    let stats = sim.responder.held_stats();
    assert_eq!((stats.results, stats.tombstones), (0, 1), "{stats:?}");
    sim.advance(Duration::from_secs(11));
    assert!(sim.responder.handle_timeout(sim.now()).is_empty());
    assert_eq!(sim.responder.held_stats().tombstones, 0);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Suspended));
}
