#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Random message sequences from both sides never panic, never leave the machines in an undefined state, and are
//! always answered with a legal message.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::*;
use ldp_session::{Limits, Outcome, ResponderEvent, TaskKey, TaskOutput};
use ldp_types::{
    Attestation, Body, Budget, CapabilityManifest, Envelope, ErrorCategory, Hello, LdpError, MessageType, PayloadMode,
    Provenance, SessionAccept, SessionClose, SessionConfig, SessionPropose, SessionReject, TaskCancel, TaskFailed,
    TaskResult, TaskSubmit, TaskUpdate, codes,
};
use proptest::prelude::*;
use serde_json::json;

const MAX_TASKS: usize = 3;
const MAX_SESSIONS: usize = 4;

/// Which session a message names.
#[derive(Debug, Clone)]
enum Sess {
    /// One the responder accepted at some point (index modulo their number).
    Known(usize),
    /// Never heard of.
    Random(String),
    /// None yet.
    Empty,
}

/// Which task a message names.
#[derive(Debug, Clone)]
enum Task {
    /// One the responder is running (index modulo their number).
    Running(usize),
    /// A fresh id.
    Fresh,
    /// Anything.
    Random(String),
}

#[derive(Debug, Clone)]
struct Msg {
    kind: MessageType,
    session: Sess,
    task: Task,
    known_skill: bool,
    mode: PayloadMode,
    from_peer: bool,
    valid_frame: bool,
    ttl: u64,
    prefs: Vec<PayloadMode>,
}

#[derive(Debug, Clone)]
enum Action {
    /// A message to the responder.
    ToResponder(Msg),
    /// Arbitrary bytes to the responder.
    Garbage(Vec<u8>),
    /// The delegate finishes a running task (index), with tokens used.
    Complete(usize, u64),
    /// The delegate fails a running task, with a payload-mode failure or not.
    Fail(usize, bool),
    /// The delegate reports progress.
    Progress(usize, f64),
    /// Time passes.
    Advance(u64),
    /// Connection 1 drops.
    Suspend,
    /// The driver's timer fires.
    Timeout,
    /// A message (of any type, from the responder's id) to the initiator.
    ToInitiator(Msg),
    /// Arbitrary bytes to the initiator.
    InitiatorGarbage(Vec<u8>),
    /// The initiator proposes, and the exchange runs through the responder.
    Propose,
    /// The initiator submits in one of its sessions, through the responder.
    InitiatorSubmit(usize),
}

fn mode() -> impl Strategy<Value = PayloadMode> {
    prop::sample::select(PayloadMode::ALL.to_vec())
}

fn msg() -> impl Strategy<Value = Msg> {
    let session = prop_oneof![
        4 => any::<usize>().prop_map(Sess::Known),
        1 => "[a-z0-9-]{0,12}".prop_map(Sess::Random),
        1 => Just(Sess::Empty),
    ];
    let task = prop_oneof![
        2 => any::<usize>().prop_map(Task::Running),
        2 => Just(Task::Fresh),
        1 => "[a-z0-9]{0,6}".prop_map(Task::Random),
    ];
    (
        prop::sample::select(MessageType::ALL.to_vec()),
        session,
        task,
        prop::bool::weighted(0.8),
        mode(),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.8),
        0u64..120,
        prop::collection::vec(mode(), 0..4),
    )
        .prop_map(|(kind, session, task, known_skill, mode, from_peer, valid_frame, ttl, prefs)| Msg {
            kind,
            session,
            task,
            known_skill,
            mode,
            from_peer,
            valid_frame,
            ttl,
            prefs,
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        10 => msg().prop_map(Action::ToResponder),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Action::Garbage),
        3 => (any::<usize>(), 0u64..40).prop_map(|(i, t)| Action::Complete(i, t)),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(i, p)| Action::Fail(i, p)),
        1 => (any::<usize>(), -1.0f64..2.0).prop_map(|(i, p)| Action::Progress(i, p)),
        2 => (0u64..90).prop_map(Action::Advance),
        1 => Just(Action::Suspend),
        1 => Just(Action::Timeout),
        3 => msg().prop_map(Action::ToInitiator),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Action::InitiatorGarbage),
        2 => Just(Action::Propose),
        3 => any::<usize>().prop_map(Action::InitiatorSubmit),
    ]
}

/// A running task's completion, failure or progress was refused: only because its session's TTL had run out (the
/// call reaped it).
fn expired_under(sim: &Sim, k: &TaskKey, e: &ldp_session::SessionError) {
    assert!(
        matches!(e, ldp_session::SessionError::Misuse(ldp_session::Misuse::UnknownSession(_))),
        "a running task was refused: {e}"
    );
    assert_eq!(sim.responder.session_state(&k.session_id), None, "{e} but the session is live");
}

/// The test's model of what the responder holds.
#[derive(Default)]
struct Model {
    /// Every session id the responder ever accepted.
    accepted: Vec<String>,
    /// Sessions live now.
    live: BTreeSet<String>,
    /// Tasks running now.
    running: Vec<TaskKey>,
    fresh: u64,
}

impl Model {
    fn session(&self, s: &Sess) -> String {
        match s {
            Sess::Known(i) if !self.accepted.is_empty() => self.accepted[i % self.accepted.len()].clone(),
            Sess::Known(_) | Sess::Empty => String::new(),
            Sess::Random(r) => format!("rnd-{r}"),
        }
    }

    fn task(&mut self, t: &Task) -> String {
        match t {
            Task::Running(i) if !self.running.is_empty() => self.running[i % self.running.len()].task_id.clone(),
            Task::Running(_) | Task::Fresh => {
                self.fresh += 1;
                format!("fresh-{}", self.fresh)
            }
            Task::Random(r) => r.clone(),
        }
    }

    fn pick(&self, i: usize) -> Option<TaskKey> {
        (!self.running.is_empty()).then(|| self.running[i % self.running.len()].clone())
    }
}

fn body(m: &Msg, model: &mut Model) -> Body {
    let task_id = model.task(&m.task);
    let skill = if m.known_skill { "echo" } else { "launch-rockets" }.to_owned();
    let input = if m.valid_frame { frame("go") } else { json!("plain") };
    let prov = Provenance::new(RESPONDER, MODEL_VERSION, m.mode);
    match m.kind {
        MessageType::Hello => Hello::new(INITIATOR.into(), m.prefs.clone()).into(),
        MessageType::CapabilityManifest => CapabilityManifest::new(json!({"skills": ["echo"]})).into(),
        MessageType::SessionPropose => SessionPropose::new(SessionConfig {
            preferred_payload_modes: Some(m.prefs.clone()),
            ttl_secs: Some(m.ttl),
            ..SessionConfig::default()
        })
        .into(),
        MessageType::SessionAccept => {
            SessionAccept::new(model.session(&m.session), m.mode, Some(vec![PayloadMode::Text])).into()
        }
        MessageType::SessionReject => {
            SessionReject::new("no".into(), Some(LdpError::policy(codes::SESSION_REJECTED, "no"))).into()
        }
        MessageType::TaskSubmit => TaskSubmit::new(task_id, skill, input, None).into(),
        MessageType::TaskUpdate => TaskUpdate::new(task_id, Some(0.5), None).into(),
        MessageType::TaskResult => TaskResult::new(task_id, json!("out"), prov).into(),
        MessageType::TaskFailed => {
            let code = if m.valid_frame { codes::PAYLOAD_MODE_FAILED } else { codes::SESSION_EXPIRED };
            TaskFailed::new(task_id, LdpError::capability(code, "x")).into()
        }
        MessageType::TaskCancel => TaskCancel::new(task_id).into(),
        MessageType::Attestation => Attestation::new(json!({"q": 1}), json!(null)).into(),
        MessageType::SessionClose => SessionClose::new(None).into(),
    }
}

/// The replies a responder may give to each request type when it accepts it.
fn legal_reply(request: MessageType, outcome: &Outcome) -> bool {
    use MessageType as M;
    match (request, outcome) {
        (M::Hello, Outcome::Reply(r)) => matches!(r.body, Body::CapabilityManifest(_)),
        (M::SessionPropose, Outcome::Reply(r)) => matches!(r.body, Body::SessionAccept(_)),
        (M::TaskUpdate, Outcome::Reply(r)) => matches!(r.body, Body::TaskUpdate(_)),
        (M::TaskSubmit, Outcome::Execute(_)) => true,
        (M::TaskCancel, Outcome::Cancel { reply, cancelled }) => {
            cancelled.len() == 1 && matches!(&reply.body, Body::TaskFailed(f) if f.error.code == codes::CANCELLED)
        }
        (M::SessionClose, Outcome::Cancel { reply, .. }) => matches!(reply.body, Body::SessionClose(_)),
        (M::Attestation, Outcome::Accepted) => true,
        _ => false,
    }
}

fn check_reply_to(env: &Envelope, sender: &str) {
    assert_eq!((env.from.as_str(), env.to.as_str()), (RESPONDER, sender), "reply misaddressed: {env:?}");
}

/// Applies one action, checking every answer; keeps the model in step with the responder.
fn apply(sim: &mut Sim, model: &mut Model, action: &Action) {
    match action {
        Action::ToResponder(m) => {
            let session = model.session(&m.session);
            let b = body(m, model);
            let mut env = sim.forge(&session, b, m.mode);
            if !m.from_peer {
                env.from = STRANGER.into();
            }
            let sender = env.from.clone();
            let outcome = sim.send_responder(&env);
            match &outcome {
                Ok(o) => {
                    assert!(legal_reply(m.kind, o), "{:?} answered with {o:?}", m.kind);
                    match o {
                        Outcome::Reply(r) => check_reply_to(r, &sender),
                        Outcome::Cancel { reply, cancelled } => {
                            check_reply_to(reply, &sender);
                            for k in cancelled {
                                let at = model.running.iter().position(|r| r == k);
                                assert!(at.is_some(), "cancelled a task that was not running: {k:?}");
                                model.running.remove(at.unwrap());
                            }
                        }
                        Outcome::Execute(t) => {
                            assert_eq!(t.key.session_id, session);
                            assert!(!model.running.contains(&t.key), "{t:?} executes twice");
                            model.running.push(t.key.clone());
                        }
                        Outcome::Accepted => {}
                    }
                    if let Outcome::Reply(Envelope { body: Body::SessionAccept(a), .. }) = o {
                        model.accepted.push(a.session_id.clone());
                    }
                }
                Err(refusal) => {
                    assert!(ErrorCategory::ALL.contains(&refusal.error.category));
                    assert!(!refusal.error.code.as_str().is_empty());
                    let reply = refusal.reply.as_ref().expect("a decodable message is answered in-protocol");
                    check_reply_to(reply, &sender);
                    match (&reply.body, m.kind) {
                        (Body::SessionReject(r), MessageType::SessionPropose) => {
                            assert_eq!(r.error.as_ref(), Some(&refusal.error))
                        }
                        (Body::TaskFailed(f), kind) if kind != MessageType::SessionPropose => {
                            assert_eq!(f.error, refusal.error)
                        }
                        (other, kind) => panic!("{kind:?} refused with {other:?}"),
                    }
                }
            }
            // Whatever the responder says, the initiator must cope.
            let answer = match &outcome {
                Ok(Outcome::Reply(r)) | Ok(Outcome::Cancel { reply: r, .. }) => Some(r.clone()),
                Err(r) => r.reply.clone(),
                _ => None,
            };
            if let Some(r) = answer {
                let _ = sim.send_initiator(&r);
            }
        }
        Action::Garbage(bytes) => {
            if let Err(r) = sim.send_responder_bytes(bytes) {
                assert!(r.reply.is_none(), "garbage has no sender to answer: {r:?}");
            }
        }
        Action::Complete(i, tokens) => {
            if let Some(k) = model.pick(*i) {
                let out = TaskOutput { tokens_used: Some(*tokens), ..TaskOutput::new(json!("done")) };
                // A task whose session's TTL ran out by `now` is reaped instead (its events below take it off the
                // model); any other running task completes.
                match sim.responder.complete_task(sim.now(), &k, out) {
                    Ok(delivery) => {
                        if let ldp_session::Delivery::Send(env) = delivery {
                            assert!(matches!(env.body, Body::TaskResult(_)));
                            let _ = sim.send_initiator(&env);
                        }
                        model.running.retain(|r| *r != k);
                    }
                    Err(e) => expired_under(sim, &k, &e),
                }
            }
        }
        Action::Fail(i, payload) => {
            if let Some(k) = model.pick(*i) {
                let code = if *payload { codes::PAYLOAD_MODE_FAILED } else { codes::EXECUTION_FAILED };
                match sim.responder.fail_task(sim.now(), &k, LdpError::runtime(code, "x")) {
                    Ok(delivery) => {
                        if let ldp_session::Delivery::Send(env) = delivery {
                            let _ = sim.send_initiator(&env);
                        }
                        model.running.retain(|r| *r != k);
                    }
                    Err(e) => expired_under(sim, &k, &e),
                }
            }
        }
        Action::Progress(i, p) => {
            if let Some(k) = model.pick(*i) {
                match sim.responder.progress(sim.now(), &k, Some(*p), None) {
                    Ok(env) => {
                        let _ = sim.send_initiator(&env);
                    }
                    Err(e) => expired_under(sim, &k, &e),
                }
            }
        }
        Action::Advance(secs) => sim.advance(Duration::from_secs(*secs)),
        Action::Suspend => sim.responder.suspend_connection(1),
        Action::Timeout => {
            let now = sim.now();
            let _reaped = sim.responder.handle_timeout(now);
        }
        Action::ToInitiator(m) => {
            let session = model.session(&m.session);
            let b = body(m, model);
            let mut env = sim.forge(&session, b, m.mode);
            env.from = RESPONDER.into();
            env.to = INITIATOR.into();
            let _ = sim.send_initiator(&env);
        }
        Action::InitiatorGarbage(bytes) => {
            assert!(sim.initiator.handle(bytes).is_err() || serde_json::from_slice::<Envelope>(bytes).is_ok());
        }
        Action::Propose => {
            let propose = sim.initiator.propose(SessionConfig { ttl_secs: Some(60), ..SessionConfig::default() });
            let step = sim.step(propose);
            match step.outcome {
                Ok(Outcome::Reply(Envelope { body: Body::SessionAccept(a), .. })) => model.accepted.push(a.session_id),
                Ok(other) => panic!("SESSION_PROPOSE answered with {other:?}"),
                Err(r) => assert!(matches!(r.reply.map(|e| e.body), Some(Body::SessionReject(_)))),
            }
        }
        Action::InitiatorSubmit(i) => {
            if model.accepted.is_empty() {
                return;
            }
            let sid = model.accepted[i % model.accepted.len()].clone();
            if let Ok(env) = sim.initiator.submit(&sid, "echo", frame("x"), None, None) {
                let step = sim.step(env);
                if let Ok(Outcome::Execute(t)) = &step.outcome {
                    model.running.push(t.key.clone());
                }
            }
            // Resubmissions after fallback go out too.
            while let Some(env) = sim.initiator.poll_outbound() {
                if let Ok(Outcome::Execute(t)) = sim.step(env).outcome {
                    model.running.push(t.key.clone());
                }
            }
        }
    }
    // Sessions that ended take their running tasks with them.
    for e in sim.responder_events() {
        match e {
            ResponderEvent::SessionEstablished { session_id, .. } => {
                assert!(model.live.insert(session_id));
            }
            ResponderEvent::SessionClosed { session_id, aborted }
            | ResponderEvent::SessionExpired { session_id, aborted } => {
                assert!(model.live.remove(&session_id), "ended a session that was not live");
                // The session's running tasks are all handed back for their work to be stopped (a SESSION_CLOSE's
                // were taken off the model already, from its `Outcome::Cancel`).
                for k in model.running.iter().filter(|k| k.session_id == session_id) {
                    assert!(aborted.contains(k), "{k:?} ended with its session but was not aborted");
                }
                assert!(aborted.iter().all(|k| k.session_id == session_id));
                model.running.retain(|k| k.session_id != session_id);
            }
            _ => {}
        }
    }
    sim.initiator_events();
    // The machine's books match the model.
    let r = &sim.responder;
    assert_eq!(r.running_tasks(), model.running.len(), "running tasks drifted from the model");
    assert!(r.running_tasks() <= MAX_TASKS);
    assert_eq!(r.session_count(), model.live.len());
    assert!(r.session_count() <= MAX_SESSIONS);
    for sid in &model.live {
        assert!(r.session_state(sid).is_some(), "live session {sid} has no state");
    }
    for k in &model.running {
        assert!(model.live.contains(&k.session_id), "task {k:?} runs in a dead session");
    }
}

fn limited_sim() -> Sim {
    let mut cfg = responder_config();
    cfg.limits = Limits {
        max_sessions: MAX_SESSIONS,
        max_concurrent_tasks: MAX_TASKS,
        history_len: 2,
        max_ttl: Duration::from_secs(120),
        session_budget: Budget { max_tokens: Some(60), max_cost_usd: None },
        max_tasks_per_session: Some(6),
        tombstones: 3,
        ..Limits::default()
    };
    Sim::with(cfg, initiator_config())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_from_both_sides(actions in prop::collection::vec(action(), 1..60)) {
        let mut sim = limited_sim();
        let mut model = Model::default();
        for a in &actions {
            apply(&mut sim, &mut model, a);
        }
        // Everything still drains: time runs out for every session, and nothing is left behind.
        sim.advance(Duration::from_secs(3600));
        let now = sim.now();
        let _reaped = sim.responder.handle_timeout(now);
        apply(&mut sim, &mut model, &Action::Timeout);
        prop_assert_eq!(sim.responder.session_count(), 0);
        prop_assert_eq!(sim.responder.running_tasks(), 0);
        prop_assert_eq!(sim.responder.poll_timeout().filter(|t| *t > now), None);
    }

    #[test]
    fn the_initiator_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut sim = Sim::new();
        let _ = sim.initiator.handle(&bytes);
        let _ = sim.responder.handle(sim.now(), &sim.peer.clone(), &bytes);
    }
}
