#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::result_large_err)]
//! The machine's side of state shared between replicas (issue 17), without any store: what one machine hands out
//! (a session's record, a message's replay claim, a task's end) another takes back, with the same rules.

use std::sync::Arc;

use crate::support::*;
use ldp_session::shared::{ReplayClaim, SharedTask, SharedTaskStatus};
use ldp_session::{Outcome, PeerContext, Responder, SeededIds, SharedEnd, TaskOutput};
use ldp_types::{Body, Envelope, PayloadMode, TaskUpdate, codes};
use serde_json::json;

/// A second machine with the same configuration and clocks as the simulation's responder: another replica.
fn other_replica(sim: &Sim) -> Responder {
    Responder::new(responder_config(), Arc::new(sim.clock.clone()), Box::new(SeededIds::new(99)))
}

fn submit(sim: &mut Sim, sid: &str, input: &str) -> Envelope {
    sim.initiator.submit(sid, "echo", frame(input), None, None).unwrap()
}

fn on(r: &mut Responder, sim: &Sim, env: &Envelope) -> Result<Outcome, ldp_session::Refusal> {
    r.handle(sim.now(), &sim.peer, &env.to_vec().unwrap())
}

fn refused_code(out: Result<Outcome, ldp_session::Refusal>) -> String {
    match out {
        Err(r) => r.error.code.as_str().to_owned(),
        Ok(o) => panic!("not refused: {o:?}"),
    }
}

#[test]
fn a_session_adopted_from_its_record_continues_on_another_machine_for_its_peer_only() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let record = sim.responder.shared_session(&sid).unwrap();
    assert_eq!((record.session_id.as_str(), record.mode), (sid.as_str(), PayloadMode::SemanticFrame));
    let mut b = other_replica(&sim);
    let env = submit(&mut sim, &sid, "on b");
    // Unknown to B until adopted.
    assert_eq!(refused_code(on(&mut b, &sim, &env)), codes::SESSION_NOT_FOUND);
    b.adopt_session(sim.now(), &record).unwrap();
    let env = submit(&mut sim, &sid, "on b");
    assert!(matches!(on(&mut b, &sim, &env), Ok(Outcome::Execute(_))));
    // The owner principal travels with the record: another credential may not use it on B either.
    let intruder = PeerContext { principal: Some("someone-else".into()), ..sim.peer.clone() };
    let env = submit(&mut sim, &sid, "intruder");
    let out = b.handle(sim.now(), &intruder, &env.to_vec().unwrap());
    assert_eq!(refused_code(out), codes::NOT_SESSION_PEER);
}

#[test]
fn every_machine_claims_a_message_under_the_same_key_and_principal() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let b = other_replica(&sim);
    let env = submit(&mut sim, &sid, "x");
    let claim: ReplayClaim = sim.responder.replay_claim(&sim.peer, &env).unwrap();
    assert_eq!(b.replay_claim(&sim.peer, &env), Some(claim.clone()));
    // Another message: another key; another credential: another principal.
    let other = submit(&mut sim, &sid, "y");
    assert_ne!(sim.responder.replay_claim(&sim.peer, &other).unwrap().key, claim.key);
    let peer = PeerContext { principal: Some("token-digest".into()), ..sim.peer.clone() };
    assert_ne!(sim.responder.replay_claim(&peer, &env).unwrap().principal, claim.principal);
    // Unsigned: no share to fill, kept for the dedupe window from now.
    assert_eq!(claim.max_per_principal, None);
    let now_ms = (ldp_session::WallClock::now_utc(&sim.clock).unix_timestamp_nanos() / 1_000_000) as i64;
    assert_eq!(claim.expires_at_ms - now_ms, 300_000);
    // A timestamp no machine would accept claims nothing (the machine refuses the message itself).
    let mut garbled = env.clone();
    garbled.timestamp = "yesterday".into();
    assert_eq!(sim.responder.replay_claim(&sim.peer, &garbled), None);
    // A store's verdicts are answered with the machine's own errors.
    let seen = sim.responder.refuse_shared_replay(&env, ldp_session::shared::ReplayVerdict::Seen).unwrap();
    assert_eq!(seen.error.code, codes::REPLAY_DETECTED);
    let full = sim.responder.refuse_shared_replay(&env, ldp_session::shared::ReplayVerdict::Full).unwrap();
    assert!(full.error.retryable);
    assert!(sim.responder.refuse_shared_replay(&env, ldp_session::shared::ReplayVerdict::Fresh).is_none());
}

#[test]
fn an_admitted_task_held_elsewhere_is_withdrawn_as_a_duplicate() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("twice")).task();
    assert_eq!(sim.responder.running_tasks(), 1);
    let refusal = sim.responder.refuse_claimed(&task.key).unwrap();
    assert_eq!(refusal.error.code, codes::DUPLICATE_TASK);
    let Some(Envelope { body: Body::TaskFailed(failed), .. }) = &refusal.reply else { panic!("{refusal:?}") };
    assert_eq!(failed.task_id, task.key.task_id);
    assert_eq!(sim.responder.running_tasks(), 0, "the slot is free again");
    // Withdrawn, not run: it is no longer running, and it left no history.
    assert!(sim.responder.refuse_claimed(&task.key).is_none());
    assert!(sim.responder.session_history(&sid).is_empty());
}

#[test]
fn a_status_query_for_a_task_that_ran_elsewhere_is_answered_from_its_record() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("far")).task();
    let ldp_session::Delivery::Send(result) =
        sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!({"answer": 42}))).unwrap()
    else {
        panic!("held")
    };
    let record = SharedTask::ended("replica-a", &result).unwrap();
    assert_eq!(record.status, SharedTaskStatus::Completed);
    let mut b = other_replica(&sim);
    b.adopt_session(sim.now(), &sim.responder.shared_session(&sid).unwrap()).unwrap();
    let query =
        |sim: &mut Sim| sim.forge(&sid, TaskUpdate::new(task.key.task_id.clone(), None, None), PayloadMode::Text);
    let ask = |b: &mut Responder, sim: &Sim, env: &Envelope, remote: Option<&SharedTask>| {
        let checked = b.inbound_check().check(&env.to_vec().unwrap()).unwrap();
        b.handle_checked_shared(sim.now(), &sim.peer, checked, remote)
    };
    // Without the record B does not know the task.
    let env = query(&mut sim);
    assert_eq!(refused_code(ask(&mut b, &sim, &env, None)), codes::TASK_NOT_FOUND);
    let env = query(&mut sim);
    let Ok(Outcome::Reply(answer)) = ask(&mut b, &sim, &env, Some(&record)) else { panic!() };
    let Body::TaskResult(r) = &answer.body else { panic!("{answer:?}") };
    assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), json!({"answer": 42}));
    assert_eq!(r.provenance.session_id.as_deref(), Some(sid.as_str()));

    // Running elsewhere: `running`; its owner gone past the lease: the typed, retryable failure.
    let running = SharedTask::running("replica-a", PayloadMode::Text);
    assert!(!running.claimable(true) && running.claimable(false));
    let env = query(&mut sim);
    let Ok(Outcome::Reply(answer)) = ask(&mut b, &sim, &env, Some(&running)) else { panic!() };
    assert!(matches!(&answer.body, Body::TaskUpdate(u) if u.message.as_deref() == Some("running")));
    let lapsed = running.lease_expired();
    assert!(lapsed.claimable(true), "a failed task may be submitted again");
    let env = query(&mut sim);
    let Ok(Outcome::Reply(answer)) = ask(&mut b, &sim, &env, Some(&lapsed)) else { panic!() };
    let Body::TaskFailed(f) = &answer.body else { panic!("{answer:?}") };
    assert_eq!(f.error.code, codes::TASK_LEASE_EXPIRED);
    assert!(f.error.retryable);
    assert!(!record.claimable(false), "a completed task is never claimed again");
}

#[test]
fn a_session_ended_elsewhere_ends_here_and_a_live_record_overrides_a_local_expiry() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let record = sim.responder.shared_session(&sid).unwrap();
    let task = sim.submit(&sid, "echo", frame("running")).task();
    let aborted = sim.responder.end_shared_session(&sid, SharedEnd::Closed);
    assert_eq!(aborted, vec![task.key.clone()], "its running task is aborted");
    let env = submit(&mut sim, &sid, "late");
    assert_eq!(refused_code(sim.send_responder(&env)), codes::SESSION_CLOSED);

    // Closed on another machine that never saw it: a tombstone there too.
    let mut b = other_replica(&sim);
    b.end_shared_session(&sid, SharedEnd::Closed);
    assert_eq!(refused_code(on(&mut b, &sim, &env)), codes::SESSION_CLOSED);

    // Expired here while others kept it alive: the store's live record wins.
    let mut sim = Sim::new();
    let sid = sim.session();
    let record2 = sim.responder.shared_session(&sid).unwrap();
    sim.advance(std::time::Duration::from_secs(record2.ttl_secs + 1));
    let env = submit(&mut sim, &sid, "after");
    assert_eq!(refused_code(sim.send_responder(&env)), codes::SESSION_EXPIRED);
    sim.responder.adopt_session(sim.now(), &record2).unwrap();
    let env = submit(&mut sim, &sid, "after");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Execute(_))));
    // Discarded (never committed): forgotten without a tombstone.
    sim.responder.end_shared_session(&sid, SharedEnd::Discarded);
    let env = submit(&mut sim, &sid, "gone");
    assert_eq!(refused_code(sim.send_responder(&env)), codes::SESSION_NOT_FOUND);
    let _ = record;
}

/// A replica at its session limit makes room for a session adopted from the store by dropping its copy of the least
/// recently used idle one. The store still holds that one: it is no tombstone here (unknown, not ended) and is adopted
/// again on its next message. With every session busy, the adoption is refused, retryably, and nothing is dropped.
#[test]
fn adopting_at_the_session_limit_drops_the_least_recently_used_idle_copy_or_refuses_when_all_are_busy() {
    let mut sim = Sim::new();
    let ids: Vec<String> = (0..3).map(|_| sim.session()).collect();
    let records: Vec<_> = ids.iter().map(|sid| sim.responder.shared_session(sid).unwrap()).collect();
    let mut cfg = responder_config();
    cfg.limits.max_sessions = 2;
    let mut b = Responder::new(cfg, Arc::new(sim.clock.clone()), Box::new(SeededIds::new(99)));
    b.adopt_session(sim.now(), &records[0]).unwrap();
    sim.advance(std::time::Duration::from_secs(1));
    b.adopt_session(sim.now(), &records[1]).unwrap();
    sim.advance(std::time::Duration::from_secs(1));
    // Touching the first makes the second the least recently used.
    b.adopt_session(sim.now(), &records[0]).unwrap();
    sim.advance(std::time::Duration::from_secs(1));
    b.adopt_session(sim.now(), &records[2]).unwrap();
    assert_eq!(b.session_count(), 2);
    assert!(b.session_state(&ids[0]).is_some() && b.session_state(&ids[2]).is_some());
    assert_eq!(b.session_state(&ids[1]), None);
    let env = submit(&mut sim, &ids[1], "dropped here");
    assert_eq!(refused_code(on(&mut b, &sim, &env)), codes::SESSION_NOT_FOUND, "a dropped copy is no tombstone");

    // Both sessions here run a task: none is idle, so the adoption is refused and neither is dropped.
    for sid in [&ids[0], &ids[2]] {
        let env = submit(&mut sim, sid, "busy");
        assert!(matches!(on(&mut b, &sim, &env), Ok(Outcome::Execute(_))));
    }
    let refused = b.adopt_session(sim.now(), &records[1]).unwrap_err();
    assert_eq!((refused.code.as_str(), refused.retryable), (codes::CAPACITY_EXCEEDED, true));
    assert_eq!(b.session_count(), 2);
    assert!(b.session_state(&ids[0]).is_some() && b.session_state(&ids[2]).is_some());
}

/// However many sessions of other replicas a peer continues here, this replica holds at most `max_sessions`, and
/// each adopted session still works when its turn comes.
#[test]
fn churn_of_adopted_sessions_never_grows_a_replica_past_its_limit() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let record = sim.responder.shared_session(&sid).unwrap();
    let mut cfg = responder_config();
    cfg.limits.max_sessions = 3;
    let mut b = Responder::new(cfg, Arc::new(sim.clock.clone()), Box::new(SeededIds::new(99)));
    for i in 0..2_000 {
        let mut other = record.clone();
        other.session_id = format!("adopted-{i}");
        b.adopt_session(sim.now(), &other).unwrap();
        assert!(b.session_count() <= 3, "{} sessions after {i} adoptions", b.session_count());
        sim.advance(std::time::Duration::from_millis(1));
    }
    b.adopt_session(sim.now(), &record).unwrap();
    let env = submit(&mut sim, &sid, "still served");
    assert!(matches!(on(&mut b, &sim, &env), Ok(Outcome::Execute(_))));
}

/// Adopted sessions count against `max_sessions_per_principal` too: at a principal's limit, the copy that goes is the
/// least recently used idle one of that principal, never another's, even an older one; with every session of that
/// principal busy, its adoption is refused (retryably) and the pre-check says so first, while other principals'
/// sessions are still adopted. A proposal meets the same count.
#[test]
fn adopting_at_a_principals_limit_drops_only_that_principals_idle_copy_or_refuses() {
    let mut sim = Sim::new();
    let ids: Vec<String> = (0..3).map(|_| sim.session()).collect();
    let records: Vec<_> = ids.iter().map(|sid| sim.responder.shared_session(sid).unwrap()).collect();
    let of_other = |n: usize| {
        let mut other = records[0].clone();
        (other.session_id, other.peer, other.owner) = (format!("other-{n}"), "another-agent".into(), None);
        // The source it counts against is that of its own peer.
        other.quota = None;
        other
    };
    let mut cfg = responder_config();
    cfg.limits.max_sessions = 10;
    cfg.limits.max_sessions_per_principal = 2;
    let mut b = Responder::new(cfg, Arc::new(sim.clock.clone()), Box::new(SeededIds::new(99)));
    let step = std::time::Duration::from_secs(1);
    // Another principal's session is the least recently used of all.
    b.adopt_session(sim.now(), &of_other(0)).unwrap();
    sim.advance(step);
    b.adopt_session(sim.now(), &records[0]).unwrap();
    sim.advance(step);
    b.adopt_session(sim.now(), &records[1]).unwrap();
    sim.advance(step);
    b.adopt_session(sim.now(), &records[2]).unwrap();
    assert_eq!(b.session_count(), 3);
    assert_eq!(b.session_state(&ids[0]), None, "the principal's least recently used copy went");
    assert!(b.session_state("other-0").is_some(), "another principal's older session stays");
    assert!(b.session_state(&ids[1]).is_some() && b.session_state(&ids[2]).is_some());
    let back = submit(&mut sim, &ids[0], "back");
    assert_eq!(b.room_for_session(&sim.peer, &back), Ok(()), "an idle copy of the principal can go");

    // A proposal from the principal meets the same count.
    let propose = sim.initiator.propose(ldp_types::SessionConfig::default());
    assert_eq!(refused_code(on(&mut b, &sim, &propose)), codes::CAPACITY_EXCEEDED);

    // Both of the principal's sessions here run a task: its next adoption is refused, nothing is dropped, and
    // another principal is still served.
    for sid in [&ids[1], &ids[2]] {
        let env = submit(&mut sim, sid, "busy");
        assert!(matches!(on(&mut b, &sim, &env), Ok(Outcome::Execute(_))));
    }
    let early = b.room_for_session(&sim.peer, &back).unwrap_err();
    let refused = b.adopt_session(sim.now(), &records[0]).unwrap_err();
    for e in [&early, &refused] {
        assert_eq!((e.code.as_str(), e.retryable), (codes::CAPACITY_EXCEEDED, true));
    }
    assert_eq!(b.session_count(), 3);
    assert!(b.session_state("other-0").is_some());
    b.adopt_session(sim.now(), &of_other(1)).unwrap();
    assert_eq!(b.session_count(), 4);
    // A known session needs no room.
    let busy = submit(&mut sim, &ids[1], "known");
    assert_eq!(b.room_for_session(&sim.peer, &busy), Ok(()));
}
