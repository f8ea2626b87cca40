#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tasks inside a session: provenance of results (RFC 6.1), session context (RFC 5.3: history, task count, budget),
//! progress and cancellation, capacity.

use crate::support::*;
use ldp_session::{
    Delivery, HistoryItem, InitiatorEvent, Limits, Misuse, Outcome, SessionError, TaskOutput, TaskStatus,
};
use ldp_types::{
    Body, Budget, ErrorCategory, EvidenceRef, LdpError, LineageEntry, PayloadMode, Provenance, Score, TaskSubmit,
    TaskUpdate, VerificationStatus, codes,
};
use serde_json::json;

fn result_provenance(delivery: &Delivery) -> Provenance {
    match delivery {
        Delivery::Send(env) => match &env.body {
            Body::TaskResult(r) => (*r.provenance).clone(),
            other => panic!("expected TASK_RESULT, got {other:?}"),
        },
        Delivery::Held => panic!("held"),
    }
}

#[test]
fn every_result_carries_full_provenance() {
    // (verification status, payload mode of the session)
    for (status, mode) in [
        (VerificationStatus::Unverified, PayloadMode::SemanticFrame),
        (VerificationStatus::SelfVerified, PayloadMode::Text),
        (VerificationStatus::ToolVerified, PayloadMode::SemanticFrame),
        (VerificationStatus::HumanVerified, PayloadMode::Text),
    ] {
        let mut sim = Sim::new();
        let sid = sim.establish(ldp_types::SessionConfig { payload_mode: Some(mode), ..Default::default() });
        let task = sim.submit(&sid, "echo", frame("x")).task();
        sim.advance(std::time::Duration::from_millis(1500));
        let evidence = EvidenceRef {
            source: "unit-tests".into(),
            kind: "tool".into(),
            uri: Some("file:///report".into()),
            summary: None,
        };
        let out = TaskOutput {
            confidence: Some(Score::new(0.8).unwrap()),
            tokens_used: Some(42),
            cost_usd: Some(0.001),
            verification_status: status,
            evidence: vec![evidence.clone()],
            ..TaskOutput::new(json!({ "echo": "x" }))
        };
        let delivery = sim.complete(&task.key, out);
        let p = result_provenance(&delivery);
        assert_eq!(p.produced_by, RESPONDER);
        assert_eq!(p.model_version, MODEL_VERSION);
        assert_eq!(p.payload_mode_used, mode);
        assert_eq!(p.session_id.as_deref(), Some(sid.as_str()));
        let ts = ldp_types::time::parse_timestamp(p.timestamp.as_deref().unwrap()).unwrap();
        assert_eq!(ts, START + std::time::Duration::from_millis(1500), "stamped from the injected clock");
        assert_eq!(p.verification_status, Some(status));
        assert_eq!(p.verified, status != VerificationStatus::Unverified, "verified is consistent with the status");
        assert_eq!((p.tokens_used, p.cost_usd), (Some(42), Some(0.001)));
        assert_eq!(p.confidence.map(Score::get), Some(0.8));
        assert_eq!(p.evidence, vec![evidence]);
        assert!(p.lineage.is_empty());
        let Delivery::Send(env) = &delivery else { unreachable!() };
        assert_eq!((env.payload_mode, env.to.as_str(), env.session_id.as_str()), (mode, INITIATOR, sid.as_str()));
        // The initiator reports the same provenance.
        assert!(matches!(sim.initiator_events().as_slice(),
            [InitiatorEvent::TaskCompleted { provenance, .. }] if *provenance == p));
    }
}

#[test]
fn results_obtained_by_re_delegating_become_lineage() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "summarize", frame("x")).task();
    let mut a = Provenance::new("ldp:delegate:a", "a-1", PayloadMode::Text);
    a.timestamp = Some("2026-03-09T09:59:00Z".into());
    a.set_verification_status(VerificationStatus::PeerVerified);
    a.confidence = Some(ldp_types::Score::new(0.75).unwrap());
    a.tokens_used = Some(42);
    a.cost_usd = Some(0.0125);
    let deep = LineageEntry::new("ldp:delegate:c", "c-1", "delegated");
    let mut b = Provenance::new("ldp:delegate:b", "b-1", PayloadMode::SemanticFrame);
    b.lineage = vec![deep.clone()];
    let first = ldp_session::DelegatedHop::new(a.clone(), |e| e.with_skill("summarize").with_latency_ms(17));
    let out = TaskOutput { delegated: vec![first, b.into()], ..TaskOutput::new(json!("summary")) };
    let p = result_provenance(&sim.complete(&task.key, out));
    let hops: Vec<(&str, &str, VerificationStatus)> =
        p.lineage.iter().map(|l| (l.delegate_id.as_str(), l.model_version.as_str(), l.verification_status)).collect();
    assert_eq!(
        hops,
        vec![
            ("ldp:delegate:a", "a-1", VerificationStatus::PeerVerified),
            ("ldp:delegate:b", "b-1", VerificationStatus::Unverified),
            ("ldp:delegate:c", "c-1", VerificationStatus::Unverified),
        ]
    );
    assert_eq!(p.lineage[0].timestamp.as_deref(), Some("2026-03-09T09:59:00Z"));
    // The facts the hop reported, and those the delegating side knew of it, are the entry's.
    let first = &p.lineage[0];
    assert_eq!((first.confidence, first.tokens_used, first.cost_usd), (a.confidence, a.tokens_used, a.cost_usd));
    assert_eq!((first.skill.as_deref(), first.latency_ms), (Some("summarize"), Some(17)));
    // A hop that reported none has none: nothing is invented.
    let second = &p.lineage[1];
    assert_eq!(
        (second.confidence, second.tokens_used, second.cost_usd, second.skill.as_ref()),
        (None, None, None, None)
    );
    assert_eq!(p.lineage[2], deep);
    assert_eq!(p.delegation_depth(), 3);
}

#[test]
fn the_session_keeps_a_bounded_history() {
    let mut cfg = responder_config();
    cfg.limits.history_len = 2;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let t1 = sim.submit(&sid, "echo", frame("1")).task();
    sim.complete(&t1.key, TaskOutput::new(json!(1)));
    let t2 = sim.submit(&sid, "summarize", frame("2")).task();
    sim.fail(&t2.key, LdpError::runtime(codes::EXECUTION_FAILED, "boom"));
    let t3 = sim.submit(&sid, "echo", frame("3")).task();
    let cancel = sim.initiator.cancel(&t3.key).unwrap();
    sim.step(cancel);
    let item = |t: &ldp_session::TaskRequest, status| HistoryItem {
        task_id: t.key.task_id.clone(),
        skill: t.skill.clone(),
        status,
    };
    assert_eq!(
        sim.responder.session_history(&sid),
        vec![item(&t2, TaskStatus::Failed), item(&t3, TaskStatus::Cancelled)],
        "oldest first, at most history_len"
    );
    assert!(sim.responder.session_history("unknown").is_empty());
}

#[test]
fn the_task_limit_per_session_refuses_further_tasks() {
    let mut cfg = responder_config();
    cfg.limits.max_tasks_per_session = Some(2);
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    for i in 0..2 {
        let t = sim.submit(&sid, "echo", frame(&format!("{i}"))).task();
        sim.complete(&t.key, TaskOutput::new(json!(i)));
    }
    let err = sim.submit(&sid, "echo", frame("3")).error();
    assert_eq!(
        (err.category, err.code.as_str(), err.retryable),
        (ErrorCategory::Policy, codes::BUDGET_EXCEEDED, false)
    );
    // The limit is per session.
    let other = sim.session();
    sim.submit(&other, "echo", frame("fresh")).task();
}

#[test]
fn usage_accumulates_across_tasks_against_the_session_budget() {
    // (budget, usage of each completed task as (tokens, usd), tasks accepted before the refusal)
    let table: [(Budget, Vec<(u64, f64)>); 2] = [
        (Budget { max_tokens: Some(100), max_cost_usd: None }, vec![(60, 0.0), (50, 0.0)]),
        (Budget { max_tokens: None, max_cost_usd: Some(0.01) }, vec![(1, 0.004), (1, 0.004), (1, 0.004)]),
    ];
    for (budget, usage) in table {
        let mut cfg = responder_config();
        cfg.limits = Limits { session_budget: budget, ..Limits::default() };
        let mut sim = Sim::with(cfg, initiator_config());
        let sid = sim.session();
        let (mut tokens, mut usd) = (0, 0.0);
        for (t, c) in &usage {
            let task = sim.submit(&sid, "echo", frame("work")).task();
            sim.complete(
                &task.key,
                TaskOutput { tokens_used: Some(*t), cost_usd: Some(*c), ..TaskOutput::new(json!(1)) },
            );
            tokens += t;
            usd += c;
            let (seen_tokens, seen_usd) = sim.responder.session_usage(&sid).unwrap();
            assert_eq!(seen_tokens, tokens);
            assert!((seen_usd - usd).abs() < 1e-12);
        }
        let err = sim.submit(&sid, "echo", frame("one more")).error();
        assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Policy, codes::BUDGET_EXCEEDED), "{budget:?}");
        // A session of its own has its own budget.
        let other = sim.session();
        assert_eq!(sim.responder.session_usage(&other), Some((0, 0.0)));
        sim.submit(&other, "echo", frame("fresh")).task();
    }
}

#[test]
fn progress_flows_to_the_initiator() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("long")).task();
    // (progress sent, progress received)
    for (sent, got) in [(Some(0.25), Some(0.25)), (Some(1.7), Some(1.0)), (Some(-3.0), Some(0.0)), (None, None)] {
        let update = sim.responder.progress(sim.now(), &task.key, sent, Some("working".into())).unwrap();
        assert!(matches!(&update.body, Body::TaskUpdate(_)));
        assert_eq!((update.to.as_str(), update.payload_mode), (INITIATOR, task.payload_mode));
        sim.send_initiator(&update).unwrap();
        assert_eq!(
            sim.initiator_events(),
            vec![InitiatorEvent::TaskProgress {
                key: task.key.clone(),
                progress: got,
                message: Some("working".into())
            }]
        );
    }
    sim.complete(&task.key, TaskOutput::new(json!("done")));
    assert!(matches!(
        sim.responder.progress(sim.now(), &task.key, Some(0.5), None),
        Err(SessionError::Misuse(Misuse::TaskEnded(_)))
    ));
}

#[test]
fn cancel_reaches_the_running_task_and_ends_it_definitely() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("slow")).task();
    let other = sim.submit(&sid, "echo", frame("other")).task();
    assert_eq!(sim.responder.running_tasks(), 2);
    let status = |sim: &mut Sim, task_id: &str| {
        let q = sim.forge(&sid, TaskUpdate::new(task_id.to_owned(), None, None), PayloadMode::Text);
        match sim.send_responder(&q) {
            Ok(Outcome::Reply(r)) => match r.body {
                Body::TaskUpdate(u) => u.message.unwrap(),
                // A finished task's result, kept as session context, answers the query.
                Body::TaskResult(r) => format!("result {}", r.output.json()),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(status(&mut sim, &task.key.task_id), "running");

    let cancel = sim.initiator.cancel(&task.key).unwrap();
    let step = sim.step(cancel);
    let Ok(Outcome::Cancel { reply, cancelled }) = &step.outcome else { panic!("{step:?}") };
    assert_eq!(cancelled, &vec![task.key.clone()]);
    let Body::TaskFailed(f) = &reply.body else { panic!("{reply:?}") };
    assert_eq!(
        (f.task_id.as_str(), f.error.code.as_str(), f.error.retryable),
        (task.key.task_id.as_str(), codes::CANCELLED, false)
    );
    assert_eq!(sim.responder.running_tasks(), 1);
    assert!(matches!(sim.initiator_events().as_slice(),
        [InitiatorEvent::TaskFailed { key, error }] if *key == task.key && error.code == codes::CANCELLED));

    // The delegate finishing afterwards is an error, not a second answer.
    assert!(matches!(
        sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!(1))),
        Err(SessionError::Misuse(Misuse::TaskEnded(_)))
    ));
    assert!(matches!(
        sim.responder.fail_task(sim.now(), &task.key, LdpError::runtime("X", "y")),
        Err(SessionError::Misuse(Misuse::TaskEnded(_)))
    ));
    assert_eq!(status(&mut sim, &task.key.task_id), "cancelled");
    // Cancelling again finds nothing running.
    let again = sim.forge(&sid, ldp_types::TaskCancel::new(task.key.task_id.clone()), PayloadMode::Text);
    assert_eq!(sim.send_responder(&again).unwrap_err().error.code, codes::TASK_NOT_FOUND);
    // Its id cannot be reused; the other task is untouched.
    let dup = sim.forge(
        &sid,
        TaskSubmit::new(task.key.task_id.clone(), "echo".into(), frame("x"), None),
        PayloadMode::SemanticFrame,
    );
    assert_eq!(sim.send_responder(&dup).unwrap_err().error.code, codes::DUPLICATE_TASK);
    sim.complete(&other.key, TaskOutput::new(json!(2)));
    assert_eq!(status(&mut sim, &other.key.task_id), "result 2");
}

#[test]
fn closing_a_session_cancels_its_running_tasks() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let keep = sim.session();
    let mut keys: Vec<_> = (0..3).map(|i| sim.submit(&sid, "echo", frame(&format!("{i}"))).task().key).collect();
    let survivor = sim.submit(&keep, "echo", frame("stay")).task();
    let close = sim.initiator.close(&sid, None).unwrap();
    let step = sim.step(close);
    let Ok(Outcome::Cancel { mut cancelled, .. }) = step.outcome else { panic!() };
    cancelled.sort();
    keys.sort();
    assert_eq!(cancelled, keys);
    assert_eq!(sim.responder.running_tasks(), 1);
    sim.complete(&survivor.key, TaskOutput::new(json!(1)));
}

#[test]
fn capacity_is_a_typed_retryable_refusal() {
    let mut cfg = responder_config();
    cfg.limits.max_concurrent_tasks = 2;
    let mut sim = Sim::with(cfg, initiator_config());
    let a = sim.session();
    let b = sim.session();
    let t1 = sim.submit(&a, "echo", frame("1")).task();
    sim.submit(&b, "echo", frame("2")).task();
    for sid in [&a, &b] {
        let step = sim.submit(sid, "echo", frame("3"));
        let err = step.error();
        assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Runtime, codes::CAPACITY_EXCEEDED));
        assert!(err.retryable);
        assert!(matches!(&step.reply().body, Body::TaskFailed(f) if f.error == err));
    }
    assert_eq!(sim.responder.running_tasks(), 2);
    sim.complete(&t1.key, TaskOutput::new(json!(1)));
    sim.submit(&a, "echo", frame("retry")).task();
    assert_eq!(sim.responder.running_tasks(), 2);
}

#[test]
fn duplicate_and_empty_task_ids_are_refused() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let t = sim.submit(&sid, "echo", frame("x")).task();
    // (task id, code)
    for (id, code) in [(t.key.task_id.as_str(), codes::DUPLICATE_TASK), ("", codes::MALFORMED_MESSAGE)] {
        let env =
            sim.forge(&sid, TaskSubmit::new(id.into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame);
        let refusal = sim.send_responder(&env).unwrap_err();
        assert_eq!(refusal.error.code, code);
        assert!(!refusal.error.retryable);
    }
    assert_eq!(sim.responder.running_tasks(), 1);
}

/// A finished task's id stays taken while its session remembers it, whatever ids it sits among (ids that count up
/// and share their start, or their end); a failed task's id may be submitted again (a retry).
#[test]
fn ids_of_finished_tasks_stay_taken_and_failed_ones_are_free() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let ids = ["t-1", "t-2", "t-10", "u-10", "t-100", "x"];
    for (i, id) in ids.iter().enumerate() {
        let env =
            sim.forge(&sid, TaskSubmit::new((*id).into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame);
        let key = sim.step(env).task().key;
        if i == 2 {
            sim.responder.fail_task(sim.now(), &key, LdpError::runtime("X", "y")).unwrap();
        } else {
            sim.responder.complete_task(sim.now(), &key, TaskOutput::new(json!(1))).unwrap();
        }
    }
    for id in ids {
        let env =
            sim.forge(&sid, TaskSubmit::new(id.into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame);
        let answer = sim.send_responder(&env);
        if id == "t-10" {
            assert!(matches!(answer, Ok(Outcome::Execute(_))), "{id}: {answer:?}");
        } else {
            assert_eq!(answer.unwrap_err().error.code, codes::DUPLICATE_TASK, "{id}");
        }
    }
}

/// Whatever the delegate, an output nested so deeply that its TASK_RESULT would be a message no JSON reader holds
/// (more than 127 levels counted from the envelope) fails the task with a typed, final EXECUTION_FAILED; the
/// deepest output that fits goes out as a result the peer reads back.
#[test]
fn an_output_too_deep_for_its_reply_fails_the_task() {
    let nested = |depth: usize| ldp_types::RawJson::from_json(format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
    for depth in [ldp_types::MAX_JSON_DEPTH - 2, ldp_types::MAX_JSON_DEPTH - 1, ldp_types::MAX_JSON_DEPTH] {
        let mut sim = Sim::new();
        let sid = sim.session();
        let task = sim.submit(&sid, "echo", frame("x")).task();
        let delivery = sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(nested(depth).unwrap()));
        let Ok(Delivery::Send(env)) = delivery else { panic!("{depth}: {delivery:?}") };
        let wire = env.to_vec().unwrap();
        let received = ldp_types::Envelope::from_slice(&wire).unwrap();
        match received.body {
            Body::TaskResult(result) if depth + 2 <= ldp_types::MAX_JSON_DEPTH => {
                assert_eq!(result.output, nested(depth).unwrap().to_value().unwrap());
            }
            Body::TaskFailed(failed) if depth + 2 > ldp_types::MAX_JSON_DEPTH => {
                assert_eq!(failed.error.code, codes::EXECUTION_FAILED);
                assert!(!failed.error.retryable);
            }
            other => panic!("{depth}: {other:?}"),
        }
        let status = if depth + 2 <= ldp_types::MAX_JSON_DEPTH { TaskStatus::Completed } else { TaskStatus::Failed };
        let history = sim.responder.session_history(&sid);
        assert_eq!(history.iter().map(|h| h.status).collect::<Vec<_>>(), vec![status], "{depth}");
    }
}

/// RFC 3.2: "`TASK_UPDATE` | Responder → Initiator | Task progress update". The RFC gives no meaning to a TASK_UPDATE
/// a responder receives; ldp-rs answers it in the RFC's direction, with a TASK_UPDATE carrying the task's status (the
/// status query its WebSocket resume and the Rust reference crate send), and never takes it as progress: the
/// initiator's `progress` and `message` change nothing (docs/interop.md, conformance LDP-MSG-007).
#[test]
fn task_update_sent_to_a_responder_is_a_status_query_never_progress() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("slow")).task();
    let q = sim.forge(
        &sid,
        TaskUpdate::new(task.key.task_id.clone(), Some(1.0), Some("completed".into())),
        PayloadMode::Text,
    );
    let Ok(Outcome::Reply(reply)) = sim.send_responder(&q) else { panic!() };
    let Body::TaskUpdate(u) = &reply.body else { panic!("{reply:?}") };
    assert_eq!((u.progress, u.message.as_deref()), (None, Some("running")));
    // The task is still running: the initiator's claim of completion was not taken as progress.
    assert_eq!(sim.responder.running_tasks(), 1);
    assert!(sim.initiator_events().is_empty());
}
