#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `Responder::result_not_kept`: the TASK_FAILED a binding sends in place of a result it could not keep for a
//! suspended session's resume (issue 14, finding 2), addressed like the result and accepted by the initiator.

mod support;

use ldp_session::{SessionState, TaskOutput};
use ldp_types::{Body, codes};
use serde_json::json;
use support::*;

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
