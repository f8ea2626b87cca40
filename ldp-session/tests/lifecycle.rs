#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! RFC 5.1 lifecycle, the handshake messages (RFC 3.3, 5.2, 5.4) and the typed answers to messages that are not
//! legal in the session's current state.

use crate::support::*;
use ldp_session::{InitiatorEvent, Limits, Outcome, ResponderEvent, SessionState, TaskOutput};
use ldp_types::{
    Attestation, Body, Capability, CapabilityManifest, Envelope, ErrorCategory, Manifest, PayloadMode, SessionAccept,
    SessionClose, SessionConfig, SessionPropose, SessionReject, TaskCancel, TaskFailed, TaskResult, TaskSubmit,
    TaskUpdate, codes,
};
use serde_json::json;

fn manifest_of(env: &Envelope) -> Manifest {
    match &env.body {
        Body::CapabilityManifest(m) => Manifest::from_value(&m.capabilities),
        other => panic!("expected CAPABILITY_MANIFEST, got {other:?}"),
    }
}

#[test]
fn hello_is_answered_with_the_capability_manifest() {
    let mut sim = Sim::new();
    let hello = sim.initiator.hello();
    assert!(matches!(&hello.body, Body::Hello(h) if h.delegate_id == INITIATOR));
    let step = sim.step(hello.clone());
    let reply = step.reply();
    assert_eq!((reply.from.as_str(), reply.to.as_str()), (RESPONDER, INITIATOR));
    let manifest = manifest_of(&reply);
    let expected_skills: Vec<String> = SKILLS.iter().map(|s| s.to_string()).collect();
    assert_eq!(manifest.skills, expected_skills);
    assert_eq!(manifest.supported_modes, vec![PayloadMode::SemanticFrame, PayloadMode::Text]);
    let limits = Limits::default();
    assert_eq!(manifest.max_concurrent_tasks, Some(u32::try_from(limits.max_concurrent_tasks).unwrap()));
    assert_eq!(manifest.capabilities.iter().map(|c| c.name.clone()).collect::<Vec<_>>(), expected_skills);
    // The initiator read the same manifest (object shape) and reports it.
    assert!(step.reply.as_ref().unwrap().1.is_ok());
    assert_eq!(sim.initiator_events(), vec![InitiatorEvent::Manifest(manifest.clone())]);
    assert_eq!(sim.initiator.manifest(), Some(&manifest));
    // HELLO opens no session.
    assert_eq!(sim.responder.session_count(), 0);
}

#[test]
fn the_manifest_advertises_only_modes_the_responder_implements_and_its_own_concurrency() {
    let mut cfg = responder_config();
    cfg.card.supported_payload_modes = vec![PayloadMode::SemanticGraph, PayloadMode::SemanticFrame, PayloadMode::Text];
    cfg.limits.max_concurrent_tasks = 3;
    let mut sim = Sim::with(cfg, initiator_config());
    let hello = sim.initiator.hello();
    let manifest = manifest_of(&sim.step(hello).reply());
    assert_eq!(manifest.supported_modes, vec![PayloadMode::SemanticFrame, PayloadMode::Text]);
    assert_eq!(manifest.max_concurrent_tasks, Some(3));
}

#[test]
fn the_initiator_reads_the_python_list_shaped_manifest() {
    let mut sim = Sim::new();
    let list = json!([
        {"name": "echo", "description": "echoes", "quality": null},
        {"name": "translate", "description": null}
    ]);
    let env = Envelope::new("m1", "2026-03-09T10:00:00+00:00", "", RESPONDER, INITIATOR, CapabilityManifest::new(list));
    sim.send_initiator(&env).unwrap();
    let Some(InitiatorEvent::Manifest(m)) = sim.initiator.poll_event() else { panic!("no manifest event") };
    assert_eq!(m.skills, vec!["echo".to_owned(), "translate".to_owned()]);
    assert!(m.supported_modes.is_empty(), "a list manifest says nothing about modes");
    assert_eq!(sim.initiator.manifest().map(|m| m.capabilities.len()), Some(2));
}

#[test]
fn establishment_walks_proposed_active_closed_on_both_sides() {
    let mut sim = Sim::new();
    let hello = sim.initiator.hello();
    sim.step(hello);
    let propose = sim.initiator.propose(SessionConfig::default());
    let proposed = propose.session_id.clone();
    assert_eq!(sim.initiator.session_state(&proposed), Some(SessionState::Proposed));
    // Before the answer nothing can be submitted on the initiator side.
    assert!(sim.initiator.submit(&proposed, "echo", json!("x"), None, None).is_err());
    let step = sim.step(propose);
    let Ok(Outcome::Reply(accept)) = &step.outcome else { panic!("{step:?}") };
    let Body::SessionAccept(a) = &accept.body else { panic!("{accept:?}") };
    // A fresh proposed id is kept (the Rust SDK relies on it).
    assert_eq!(a.session_id, proposed);
    assert_eq!(accept.session_id, proposed);
    let sid = a.session_id.clone();
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder.session_count(), 1);
    assert!(matches!(
        sim.responder_events().as_slice(),
        [ResponderEvent::SessionEstablished { session_id, peer, peer_domain, mode: PayloadMode::SemanticFrame }]
            if *session_id == sid && peer == INITIATOR && peer_domain == DOMAIN
    ));

    // Close from the initiator: closed locally at once, acknowledged by the responder, forgotten there.
    let close = sim.initiator.close(&sid, Some("done".into())).unwrap();
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Closed));
    let step = sim.step(close);
    let Ok(Outcome::Cancel { reply, cancelled }) = &step.outcome else { panic!("{step:?}") };
    assert!(cancelled.is_empty());
    assert!(matches!(&reply.body, Body::SessionClose(_)));
    assert_eq!(sim.responder.session_state(&sid), None);
    assert_eq!(sim.responder.session_count(), 0);
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::SessionClosed { session_id: sid.clone(), aborted: vec![] }]
    );
    assert!(sim.initiator_events().contains(&InitiatorEvent::SessionClosed { session_id: sid.clone() }));

    // A closed session takes no tasks: typed, not retryable.
    let late =
        sim.forge(&sid, TaskSubmit::new("t".into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame);
    let err = sim.step(late).error();
    assert_eq!(
        (err.category, err.code.as_str(), err.retryable),
        (ErrorCategory::Session, codes::SESSION_CLOSED, false)
    );
}

#[test]
fn a_rejected_proposal_fails_the_session_with_a_typed_error() {
    let mut sim = Sim::new();
    let config = SessionConfig { required_trust_domain: Some("elsewhere.internal".into()), ..SessionConfig::default() };
    let propose = sim.initiator.propose(config);
    let proposed = propose.session_id.clone();
    let step = sim.step(propose);
    let refusal = step.refusal();
    assert_eq!((refusal.error.category, refusal.error.code.as_str()), (ErrorCategory::Policy, codes::TRUST_VIOLATION));
    let reply = refusal.reply.unwrap();
    assert_eq!(reply.to, INITIATOR);
    let Body::SessionReject(r) = &reply.body else { panic!("{reply:?}") };
    assert_eq!(r.error.as_ref(), Some(&refusal.error));
    assert_eq!(sim.initiator_events(), vec![InitiatorEvent::SessionRejected { error: refusal.error.clone() }]);
    assert_eq!(sim.initiator.session_state(&proposed), Some(SessionState::Failed));
    assert_eq!(sim.responder.session_count(), 0);
    assert!(
        matches!(sim.responder_events().as_slice(), [ResponderEvent::SessionRejected { peer, .. }] if peer == INITIATOR)
    );
}

#[test]
fn the_responder_can_close_a_session_and_the_initiator_fails_its_pending_tasks() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("x")).task();
    sim.responder_events();
    let (close, cancelled) = sim.responder.close_session(&sid, Some("shutting down".into())).unwrap();
    assert_eq!(cancelled, vec![task.key.clone()]);
    assert_eq!(sim.responder.running_tasks(), 0);
    assert_eq!(sim.responder.session_state(&sid), None);
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::SessionClosed { session_id: sid.clone(), aborted: vec![task.key.clone()] }]
    );
    // The task's submitter gets a definite answer, built by the machine, and nothing else is left to abort.
    let aborted = sim.responder.poll_aborted().unwrap();
    assert_eq!(aborted.key, task.key);
    assert_eq!(aborted.reply.to, INITIATOR);
    assert!(matches!(&aborted.reply.body, Body::TaskFailed(f) if f.task_id == task.key.task_id
        && f.error.code == codes::CANCELLED && f.error.message.contains("closed")));
    assert_eq!(sim.responder.poll_aborted(), None);
    assert!(matches!(&close.body, Body::SessionClose(c) if c.reason.as_deref() == Some("shutting down")));
    assert_eq!(close.to, INITIATOR);
    sim.send_initiator(&close).unwrap();
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Closed));
    let events = sim.initiator_events();
    assert!(events.contains(&InitiatorEvent::SessionClosed { session_id: sid.clone() }), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(e, InitiatorEvent::TaskFailed { key, error }
            if *key == task.key && error.code == codes::SESSION_CLOSED)),
        "the pending task must end definitely: {events:?}"
    );
    // The delegate's late completion is a caller error, not a message.
    assert!(sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!(1))).is_err());
    assert!(sim.responder.close_session(&sid, None).is_err());
}

#[test]
fn proposal_session_ids_are_kept_when_fresh_and_replaced_otherwise() {
    let mut sim = Sim::new();
    let first = sim.session();
    let long = "x".repeat(129);
    for (proposed, keep) in [("", false), (first.as_str(), false), (long.as_str(), false), ("my-session", true)] {
        let env = sim.forge(proposed, SessionPropose::new(SessionConfig::default()), PayloadMode::Text);
        let Ok(Outcome::Reply(reply)) = sim.send_responder(&env) else { panic!("{proposed:?} refused") };
        let Body::SessionAccept(a) = &reply.body else { panic!("{reply:?}") };
        assert_eq!(a.session_id == proposed, keep, "proposed {proposed:?}, got {:?}", a.session_id);
        assert!(!a.session_id.is_empty());
        assert_eq!(reply.session_id, a.session_id);
        assert_eq!(sim.responder.session_state(&a.session_id), Some(SessionState::Active));
    }
    assert_eq!(sim.responder.session_count(), 5);
}

#[test]
fn negotiation_reads_the_rfc_list_and_the_rust_sdk_single_mode() {
    use PayloadMode::{SemanticFrame as Sf, SemanticGraph as Sg, Text};
    type Row = (Option<Vec<PayloadMode>>, Option<PayloadMode>, PayloadMode, Vec<PayloadMode>);
    // (preferred_payload_modes, payload_mode, negotiated, fallback_chain)
    let table: [Row; 7] = [
        (Some(vec![Sf, Text]), None, Sf, vec![Text]),
        (Some(vec![Sg, Sf, Text]), None, Sf, vec![Text]),
        (Some(vec![Text, Sf]), None, Text, vec![]),
        (Some(vec![Sg]), None, Text, vec![]),
        (None, Some(Sf), Sf, vec![Text]),
        (None, Some(Text), Text, vec![]),
        (None, None, Sf, vec![Text]),
    ];
    for (preferred, single, mode, chain) in table {
        let mut sim = Sim::new();
        let config =
            SessionConfig { preferred_payload_modes: preferred.clone(), payload_mode: single, ..Default::default() };
        let env = sim.initiator.propose(config);
        let step = sim.step(env);
        let Body::SessionAccept(a) = &step.reply().body else { panic!("{step:?}") };
        assert_eq!(
            (a.negotiated_mode, a.fallback_chain.clone()),
            (mode, Some(chain.clone())),
            "{preferred:?}/{single:?}"
        );
        assert_eq!(sim.responder.session_mode(&a.session_id), Some(mode));
        assert!(sim.initiator_events().contains(&InitiatorEvent::SessionEstablished {
            session_id: a.session_id.clone(),
            mode,
            fallback_chain: chain,
        }));
        assert_eq!(sim.initiator.session_mode(&a.session_id), Some(mode));
    }
}

#[test]
fn an_attestation_in_an_active_session_surfaces_as_an_event() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let att = Attestation::new(json!({"quality": 0.9}), json!({"issuer": "lab"}));
    let env = sim.forge(&sid, att.clone(), PayloadMode::Text);
    assert_eq!(sim.send_responder(&env), Ok(Outcome::Accepted));
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::AttestationReceived { session_id: sid.clone(), from: INITIATOR.into(), attestation: att }]
    );
    // Outside a session it is refused like any session-scoped message.
    let env = sim.forge("nope", Attestation::new(json!(1), json!(2)), PayloadMode::Text);
    let err = sim.send_responder(&env).unwrap_err();
    assert_eq!(err.error.code, codes::SESSION_NOT_FOUND);
}

/// Every message that is not legal where it arrives gets a typed `session` answer addressed to its sender.
#[test]
fn illegal_messages_get_typed_session_answers() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let closed = sim.session();
    let close = sim.initiator.close(&closed, None).unwrap();
    sim.step(close);
    let submit = |t: &str| TaskSubmit::new(t.into(), "echo".into(), frame("x"), None);
    let prov = ldp_types::Provenance::new(RESPONDER, "v", PayloadMode::Text);
    let err = ldp_types::LdpError::runtime("X", "y");
    // (what, session, from, body, expected code)
    let table: Vec<(&str, &str, &str, Body, &str)> = vec![
        ("submit before any session", "", INITIATOR, submit("a").into(), codes::SESSION_NOT_FOUND),
        ("submit to an unknown session", "no-such", INITIATOR, submit("b").into(), codes::SESSION_NOT_FOUND),
        ("submit to a closed session", &closed, INITIATOR, submit("c").into(), codes::SESSION_CLOSED),
        ("submit from a stranger", &sid, STRANGER, submit("d").into(), codes::NOT_SESSION_PEER),
        ("cancel from a stranger", &sid, STRANGER, TaskCancel::new("d".into()).into(), codes::NOT_SESSION_PEER),
        ("close from a stranger", &sid, STRANGER, SessionClose::new(None).into(), codes::NOT_SESSION_PEER),
        (
            "cancel in an unknown session",
            "no-such",
            INITIATOR,
            TaskCancel::new("t".into()).into(),
            codes::SESSION_NOT_FOUND,
        ),
        ("close of an unknown session", "no-such", INITIATOR, SessionClose::new(None).into(), codes::SESSION_NOT_FOUND),
        ("close of a closed session", &closed, INITIATOR, SessionClose::new(None).into(), codes::SESSION_CLOSED),
        (
            "status query in an unknown session",
            "no-such",
            INITIATOR,
            TaskUpdate::new("t".into(), None, None).into(),
            codes::SESSION_NOT_FOUND,
        ),
        ("cancel of an unknown task", &sid, INITIATOR, TaskCancel::new("t".into()).into(), codes::TASK_NOT_FOUND),
        (
            "status of an unknown task",
            &sid,
            INITIATOR,
            TaskUpdate::new("t".into(), None, None).into(),
            codes::TASK_NOT_FOUND,
        ),
        (
            "CAPABILITY_MANIFEST sent to a responder",
            &sid,
            INITIATOR,
            CapabilityManifest::new(json!({})).into(),
            codes::INVALID_STATE,
        ),
        (
            "SESSION_ACCEPT sent to a responder",
            &sid,
            INITIATOR,
            SessionAccept::new(sid.clone(), PayloadMode::Text, None).into(),
            codes::INVALID_STATE,
        ),
        (
            "SESSION_REJECT sent to a responder",
            &sid,
            INITIATOR,
            SessionReject::new("no".into(), None).into(),
            codes::INVALID_STATE,
        ),
        (
            "TASK_RESULT sent to a responder",
            &sid,
            INITIATOR,
            TaskResult::new("t".into(), json!(1), prov).into(),
            codes::INVALID_STATE,
        ),
        (
            "TASK_FAILED sent to a responder",
            &sid,
            INITIATOR,
            TaskFailed::new("t".into(), err).into(),
            codes::INVALID_STATE,
        ),
    ];
    for (what, session, from, body, code) in table {
        let task_id = body.task_id().unwrap_or_default().to_owned();
        let mut env = sim.forge(session, body, PayloadMode::SemanticFrame);
        env.from = from.to_owned();
        let refusal = sim.send_responder(&env).expect_err(what);
        assert_eq!(refusal.error.category, ErrorCategory::Session, "{what}: {:?}", refusal.error);
        assert_eq!(refusal.error.code, code, "{what}");
        let reply = refusal.reply.unwrap_or_else(|| panic!("{what}: no reply"));
        assert_eq!(
            (reply.to.as_str(), reply.from.as_str(), reply.session_id.as_str()),
            (from, RESPONDER, session),
            "{what}"
        );
        let Body::TaskFailed(f) = &reply.body else { panic!("{what}: {reply:?}") };
        assert_eq!((f.task_id.as_str(), &f.error), (task_id.as_str(), &refusal.error), "{what}");
    }
    // None of that disturbed the live session.
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder.running_tasks(), 0);
}

#[test]
fn a_task_for_an_undeclared_skill_is_a_capability_failure() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let step = sim.submit(&sid, "translate", frame("x"));
    let err = step.error();
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Capability, codes::SKILL_NOT_FOUND));
    assert!(matches!(&step.reply().body, Body::TaskFailed(f) if f.error == err));
    assert_eq!(sim.responder.running_tasks(), 0);
    // The initiator surfaces it as a failed task, and the session stays usable.
    let events = sim.initiator_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, InitiatorEvent::TaskFailed { error, .. } if error.code == codes::SKILL_NOT_FOUND))
    );
    sim.submit(&sid, "echo", frame("x")).task();
}

#[test]
fn a_suspended_session_holds_results_and_resumes_on_the_peers_next_message() {
    let mut sim = Sim::new();
    let sid = sim.session();
    // A second session on another connection is unaffected by the first connection dropping.
    sim.peer.connection = Some(2);
    let other = sim.session();
    sim.peer.connection = Some(1);
    let task = sim.submit(&sid, "echo", frame("one")).task();
    let second = sim.submit(&sid, "echo", frame("two")).task();

    sim.responder.suspend_connection(1);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Suspended));
    assert_eq!(sim.responder.session_state(&other), Some(SessionState::Active));
    assert_eq!(sim.responder_events(), vec![ResponderEvent::SessionSuspended { session_id: sid.clone() }]);

    let held = sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("one"))).unwrap();
    assert_eq!(held, ldp_session::Delivery::Held);
    let held = sim
        .responder
        .fail_task(sim.now(), &second.key, ldp_types::LdpError::runtime(codes::EXECUTION_FAILED, "x"))
        .unwrap();
    assert_eq!(held, ldp_session::Delivery::Held);

    // The peer comes back on a new connection with a status query: the session resumes, and the query for the
    // finished task is answered with its result (kept as session context).
    sim.peer.connection = Some(3);
    let query = sim.forge(&sid, TaskUpdate::new(task.task_id_owned(), None, None), PayloadMode::Text);
    let step = sim.step(query);
    assert!(
        matches!(&step.reply().body, Body::TaskResult(r) if r.task_id == task.key.task_id && r.output.json() == "\"one\""),
        "{:?}",
        step.reply().body
    );
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder_events(), vec![ResponderEvent::SessionResumed { session_id: sid.clone() }]);
    let held: Vec<ldp_types::Envelope> = sim.responder.take_held(&sid).iter().map(|h| h.envelope().unwrap()).collect();
    assert_eq!(held.len(), 2);
    assert!(matches!(&held[0].body, Body::TaskResult(r) if r.task_id == task.key.task_id));
    assert!(matches!(&held[1].body, Body::TaskFailed(f) if f.task_id == second.key.task_id));
    assert!(sim.responder.take_held(&sid).is_empty(), "held results are handed out exactly once");
    // The first task's result already came with the answer to the query; the second's did not.
    sim.send_initiator(&held[1]).unwrap();
    // Resumed on connection 3: dropping connection 1 again no longer suspends it.
    sim.responder.suspend_connection(1);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    // Results finished after resuming go out directly.
    let third = sim.submit(&sid, "echo", frame("three")).task();
    assert!(matches!(sim.complete(&third.key, TaskOutput::new(json!(3))), ldp_session::Delivery::Send(_)));
}

trait TaskIdOwned {
    fn task_id_owned(&self) -> String;
}

impl TaskIdOwned for ldp_session::TaskRequest {
    fn task_id_owned(&self) -> String {
        self.key.task_id.clone()
    }
}

#[test]
fn capability_entries_in_the_manifest_carry_the_card_metadata() {
    let mut cfg = responder_config();
    cfg.card.capabilities = vec![Capability::new("echo").with_description("repeats its input")];
    let mut sim = Sim::with(cfg, initiator_config());
    let hello = sim.initiator.hello();
    let m = manifest_of(&sim.step(hello).reply());
    assert_eq!(m.capabilities[0].description.as_deref(), Some("repeats its input"));
}

/// Issue 50, graceful shutdown in the machine: once draining, a new session and a new task are refused (retryable),
/// while the running task's session still answers its messages; at the end of the grace, the task still running is
/// answered TASK_FAILED `CANCELLED`, retryable, and its work is to be stopped.
#[test]
fn draining_refuses_new_work_and_cancels_what_runs_at_the_end() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let running = sim.submit(&sid, "echo", frame("long")).task();
    sim.responder.start_draining();
    assert!(sim.responder.is_draining());
    let propose = sim.initiator.propose(SessionConfig::default());
    let refused = sim.step(propose).error();
    assert_eq!((refused.code.as_str(), refused.retryable), (codes::CAPACITY_EXCEEDED, true));
    let submit = sim.initiator.submit(&sid, "echo", frame("more"), None, None).unwrap();
    let refused = sim.step(submit).error();
    assert_eq!((refused.code.as_str(), refused.retryable), (codes::CAPACITY_EXCEEDED, true));
    // A status query of the running task is still answered.
    let query = sim.forge(&sid, TaskUpdate::new(running.key.task_id.clone(), None, None), PayloadMode::Text);
    assert!(sim.step(query).outcome.is_ok());
    let cancelled = sim.responder.cancel_running("because the delegate is shutting down");
    assert_eq!(cancelled, vec![running.key.clone()]);
    let aborted = sim.responder.poll_aborted().expect("the task's work is to be stopped");
    assert_eq!(aborted.key, running.key);
    match &aborted.reply.body {
        Body::TaskFailed(f) => {
            assert_eq!((f.error.code.as_str(), f.error.retryable), (codes::CANCELLED, true));
            assert!(f.error.message.contains("shutting down"), "{}", f.error.message);
        }
        other => panic!("expected TASK_FAILED, got {other:?}"),
    }
    assert_eq!(sim.responder.running_tasks(), 0);
    assert!(sim.responder.cancel_running("again").is_empty());
}
