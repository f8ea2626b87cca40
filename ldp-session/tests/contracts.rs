#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Delegation contracts (paper 3.1): client-side validation of results against deadline, budget and delegation
//! depth, under `fail_closed` and `fail_open`; depth propagation through re-delegation.

use std::time::Duration;

use crate::support::*;
use ldp_session::{InitiatorEvent, Misuse, PeerMisbehaved, SessionError, TaskOutput, TaskRequest};
use ldp_types::{
    Budget, DelegationContract, ErrorCategory, FailurePolicy, LineageEntry, PayloadMode, Provenance, TaskResult,
    TaskSubmit, codes,
};
use serde_json::json;

fn contract(policy: FailurePolicy) -> DelegationContract {
    DelegationContract::new("ctr-1", "summarise the report").with_failure_policy(policy)
}

/// Submits `contract` through the initiator, runs the task and completes it with `out`; returns the initiator's
/// verdict.
fn run(sim: &mut Sim, sid: &str, contract: DelegationContract, out: TaskOutput) -> (TaskRequest, InitiatorEvent) {
    let env = sim.initiator.submit(sid, "summarize", frame("summarise"), Some(contract), None).unwrap();
    let task = sim.step(env).task();
    sim.complete(&task.key, out);
    let mut events = sim.initiator_events();
    assert_eq!(events.len(), 1, "{events:?}");
    (task, events.remove(0))
}

fn with_tokens(tokens: u64) -> TaskOutput {
    TaskOutput { tokens_used: Some(tokens), ..TaskOutput::new(json!({ "summary": "revenue grew" })) }
}

#[test]
fn contract_outcomes_per_failure_policy() {
    let deadline = ldp_types::time::format_timestamp(START + Duration::from_secs(60));
    let budget = Budget { max_tokens: Some(6000), max_cost_usd: Some(0.05) };
    // (what, contract, output, seconds before completing, violations; empty = satisfied)
    let table: Vec<(&str, DelegationContract, TaskOutput, u64, Vec<&str>)> = vec![
        ("within budget", contract(FailurePolicy::FailClosed).with_budget(budget), with_tokens(5000), 0, vec![]),
        (
            "paper trace: 8200 tokens of 6000",
            contract(FailurePolicy::FailClosed).with_budget(budget),
            with_tokens(8200),
            0,
            vec!["BUDGET_TOKENS_EXCEEDED"],
        ),
        (
            "cost over budget",
            contract(FailurePolicy::FailClosed).with_budget(budget),
            TaskOutput { cost_usd: Some(0.07), ..with_tokens(10) },
            0,
            vec!["BUDGET_COST_EXCEEDED"],
        ),
        (
            "before the deadline",
            contract(FailurePolicy::FailClosed).with_deadline(&deadline),
            with_tokens(1),
            59,
            vec![],
        ),
        (
            "fail_open: late and over budget",
            contract(FailurePolicy::FailOpen).with_deadline(&deadline).with_budget(budget),
            with_tokens(9000),
            61,
            vec!["DEADLINE_EXCEEDED", "BUDGET_TOKENS_EXCEEDED"],
        ),
    ];
    for (what, contract, out, delay, violations) in table {
        let mut sim = Sim::new();
        let sid = sim.session();
        let policy = contract.policy.failure_policy;
        let env = sim.initiator.submit(&sid, "summarize", frame("summarise"), Some(contract.clone()), None).unwrap();
        let task = sim.step(env).task();
        assert_eq!(task.contract.as_ref(), Some(&contract), "{what}: the contract travels with the task");
        sim.advance(Duration::from_secs(delay));
        let output = out.output.clone();
        sim.complete(&task.key, out);
        let events = sim.initiator_events();
        match (violations.is_empty(), policy, events.as_slice()) {
            (true, _, [InitiatorEvent::TaskCompleted { provenance, .. }])
            | (false, FailurePolicy::FailOpen, [InitiatorEvent::TaskCompleted { provenance, .. }]) => {
                assert_eq!(provenance.contract_id.as_deref(), Some("ctr-1"), "{what}");
                assert_eq!(provenance.contract_satisfied, Some(violations.is_empty()), "{what}");
                assert_eq!(provenance.contract_violations, violations, "{what}");
            }
            (false, FailurePolicy::FailClosed, [InitiatorEvent::TaskFailed { key, error }]) => {
                assert_eq!(*key, task.key);
                assert_eq!((error.category, error.code.as_str()), (ErrorCategory::Policy, codes::CONTRACT_VIOLATED));
                assert_eq!(
                    error.partial_output.as_ref(),
                    Some(&output.to_value().unwrap()),
                    "{what}: the output is preserved"
                );
                assert!(!error.retryable);
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// Past a `fail_closed` contract's deadline the responder does not wait for the delegate (issue 22): its next
/// timeout is the deadline, and `handle_timeout` then ends the task, hands its key back for the work to be stopped
/// and answers the submitter `CONTRACT_VIOLATED` (`DEADLINE_EXCEEDED`). A result that comes later is refused.
#[test]
fn a_fail_closed_deadline_is_enforced_by_the_responder_while_the_task_runs() {
    let deadline = ldp_types::time::format_timestamp(START + Duration::from_secs(60));
    let mut sim = Sim::new();
    let sid = sim.session();
    let contract = contract(FailurePolicy::FailClosed).with_deadline(&deadline);
    let env = sim.initiator.submit(&sid, "summarize", frame("summarise"), Some(contract), None).unwrap();
    let task = sim.step(env).task();
    assert_eq!(sim.responder.poll_timeout(), Some(sim.now() + Duration::from_secs(60)), "the deadline is armed");
    sim.advance(Duration::from_secs(59));
    assert!(sim.responder.handle_timeout(sim.now()).is_empty(), "not before the deadline");
    sim.advance(Duration::from_secs(2));
    assert_eq!(sim.responder.handle_timeout(sim.now()), vec![task.key.clone()]);
    let aborted = sim.responder.poll_aborted().expect("the submitter's answer");
    assert_eq!(aborted.key, task.key);
    sim.send_initiator(&aborted.reply).unwrap();
    match sim.initiator_events().as_slice() {
        [InitiatorEvent::TaskFailed { key, error }] => {
            assert_eq!(*key, task.key);
            assert_eq!((error.category, error.code.as_str()), (ErrorCategory::Policy, codes::CONTRACT_VIOLATED));
            assert!(error.message.contains("DEADLINE_EXCEEDED") && !error.retryable, "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.responder.running_tasks(), 0);
    let late = sim.responder.complete_task(sim.now(), &task.key, with_tokens(1));
    assert!(matches!(late, Err(SessionError::Misuse(Misuse::TaskEnded(_)))), "{late:?}");
    // The ended task's deadline is no timeout any more.
    assert!(sim.responder.poll_timeout().is_none_or(|t| t > sim.now()), "a past deadline is still armed");
}

#[test]
fn a_result_for_no_pending_task_does_not_escape_the_contract() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let strict = contract(FailurePolicy::FailClosed).with_budget(Budget { max_tokens: Some(10), max_cost_usd: None });
    let (task, event) = run(&mut sim, &sid, strict, with_tokens(500));
    assert!(matches!(event, InitiatorEvent::TaskFailed { ref error, .. } if error.code == codes::CONTRACT_VIOLATED));
    // A second TASK_RESULT for the same task (a buggy or hostile peer) is a protocol error, not a completion.
    let mut prov = Provenance::new(RESPONDER, MODEL_VERSION, PayloadMode::SemanticFrame);
    prov.tokens_used = Some(500);
    let again = ldp_types::Envelope::new(
        "dup",
        ldp_types::time::format_timestamp(START),
        &sid,
        RESPONDER,
        INITIATOR,
        TaskResult::new(task.key.task_id.clone(), json!("x"), prov.clone()),
    );
    assert!(matches!(
        sim.send_initiator(&again),
        Err(SessionError::PeerMisbehaved(PeerMisbehaved::UnknownTaskResult { .. }))
    ));
    // So is a result for a task that was never submitted.
    let mut stray = again.clone();
    stray.body = TaskResult::new("never-submitted".into(), json!("x"), prov).into();
    assert!(matches!(
        sim.send_initiator(&stray),
        Err(SessionError::PeerMisbehaved(PeerMisbehaved::UnknownTaskResult { .. }))
    ));
    assert!(sim.initiator_events().is_empty());
}

#[test]
fn max_delegation_depth_passes_down_and_stops_re_delegation() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let root = contract(FailurePolicy::FailClosed).with_max_delegation_depth(2);
    let env = sim.initiator.submit(&sid, "echo", frame("root"), Some(root), None).unwrap();
    let t0 = sim.step(env).task();
    // Each re-delegation (the delegate submitting a sub-task on behalf of its task) passes on one less.
    let mut parent = t0;
    for expected in [1, 0] {
        let env = sim.initiator.submit(&sid, "echo", frame("sub"), None, Some(&parent)).unwrap();
        let child = sim.step(env).task();
        let depth = child.contract.as_ref().and_then(|c| c.policy.max_delegation_depth);
        assert_eq!(depth, Some(expected));
        parent = child;
    }
    // Depth 0 forbids re-delegation.
    let err = sim.initiator.submit(&sid, "echo", frame("too deep"), None, Some(&parent)).unwrap_err();
    assert!(matches!(err, SessionError::Misuse(Misuse::DelegationDepthExceeded { depth: 1, max: 0 })), "{err:?}");
    assert_eq!(err.to_ldp_error().code, codes::DELEGATION_DEPTH_EXCEEDED);
    assert_eq!(err.to_ldp_error().category, ErrorCategory::Policy);
}

#[test]
fn a_sub_task_contract_keeps_the_tighter_depth() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let env = sim
        .initiator
        .submit(&sid, "echo", frame("root"), Some(contract(FailurePolicy::FailOpen).with_max_delegation_depth(3)), None)
        .unwrap();
    let parent = sim.step(env).task();
    // (child's own depth, depth passed on)
    for (own, expected) in [(Some(10), 2), (Some(1), 1), (None, 2)] {
        let mut child = DelegationContract::new("ctr-child", "part");
        child.policy.max_delegation_depth = own;
        let env = sim.initiator.submit(&sid, "echo", frame("sub"), Some(child), Some(&parent)).unwrap();
        let task = sim.step(env).task();
        let c = task.contract.unwrap();
        assert_eq!((c.contract_id.as_str(), c.policy.max_delegation_depth), ("ctr-child", Some(expected)), "{own:?}");
    }
    // A parent without a depth limit imposes none.
    let env = sim.initiator.submit(&sid, "echo", frame("free"), None, None).unwrap();
    let free = sim.step(env).task();
    let env = sim.initiator.submit(&sid, "echo", frame("sub"), None, Some(&free)).unwrap();
    assert_eq!(sim.step(env).task().contract, None);
}

#[test]
fn lineage_deeper_than_the_contract_allows_is_a_violation() {
    let sub = |id: &str, lineage: usize| {
        let mut p = Provenance::new(format!("ldp:delegate:{id}"), "v1", PayloadMode::Text);
        p.lineage =
            (0..lineage).map(|i| LineageEntry::new(format!("ldp:delegate:{id}-{i}"), "v0", "delegated")).collect();
        p
    };
    // (max depth, delegated results, violated)
    for (max, delegated, violated) in
        [(1, vec![sub("a", 0)], false), (1, vec![sub("a", 1)], true), (2, vec![sub("a", 0), sub("b", 0)], false)]
    {
        let mut sim = Sim::new();
        let sid = sim.session();
        let c = contract(FailurePolicy::FailOpen).with_max_delegation_depth(max);
        let out =
            TaskOutput { delegated: delegated.into_iter().map(Into::into).collect(), ..TaskOutput::new(json!("r")) };
        let (_, event) = run(&mut sim, &sid, c, out);
        let InitiatorEvent::TaskCompleted { provenance, .. } = event else { panic!("{event:?}") };
        assert_eq!(provenance.contract_satisfied, Some(!violated), "max {max}: lineage {:?}", provenance.lineage);
        assert_eq!(provenance.contract_violations.contains(&"DELEGATION_DEPTH_EXCEEDED".to_owned()), violated);
    }
}

#[test]
fn contracts_the_initiator_cannot_check_are_refused_before_sending() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let bad = DelegationContract::new("c", "o").with_deadline("tomorrow");
    let err = sim.initiator.submit(&sid, "echo", frame("x"), Some(bad.clone()), None).unwrap_err();
    assert!(matches!(err, SessionError::Misuse(Misuse::InvalidContract(_))), "{err:?}");
    // A peer that sends one anyway is answered with a typed policy failure.
    let env =
        sim.forge(&sid, TaskSubmit::new("t".into(), "echo".into(), frame("x"), Some(bad)), PayloadMode::SemanticFrame);
    let err = sim.send_responder(&env).unwrap_err().error;
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Policy, codes::CONTRACT_VIOLATED));
    assert_eq!(sim.responder.running_tasks(), 0);
}

/// The responder checks its own output against the contract's `check:` predicates (paper 7) before answering.
#[test]
fn the_responder_checks_machine_checkable_criteria_on_its_own_output() {
    let with_checks = |policy| {
        let mut c = contract(policy);
        c.success_criteria = vec!["state the revenue".into(), "check: has revenue".into()];
        c.policy.safety_constraints = vec!["check: not matches /(?i)guaranteed/".into()];
        c
    };
    let bad = || TaskOutput::new(json!({ "summary": "guaranteed growth" }));

    // fail_closed: TASK_FAILED CONTRACT_VIOLATED naming both predicates, the output kept as partial_output.
    let mut sim = Sim::new();
    let sid = sim.session();
    let env = sim
        .initiator
        .submit(&sid, "summarize", frame("summarise"), Some(with_checks(FailurePolicy::FailClosed)), None)
        .unwrap();
    let task = sim.step(env).task();
    let ldp_session::Delivery::Send(answer) = sim.complete(&task.key, bad()) else { panic!("not sent") };
    let ldp_types::Body::TaskFailed(failed) = &answer.body else { panic!("expected TASK_FAILED, got {answer:?}") };
    assert_eq!(failed.error.code, codes::CONTRACT_VIOLATED);
    assert!(failed.error.message.contains("check: has revenue"), "{}", failed.error.message);
    assert!(failed.error.message.contains("guaranteed"), "{}", failed.error.message);
    assert_eq!(failed.error.partial_output, Some(json!({ "summary": "guaranteed growth" })));
    assert_eq!(sim.responder.running_tasks(), 0);

    // fail_open: the result goes out, its provenance saying which predicates failed.
    let mut sim = Sim::new();
    let sid = sim.session();
    let env = sim
        .initiator
        .submit(&sid, "summarize", frame("summarise"), Some(with_checks(FailurePolicy::FailOpen)), None)
        .unwrap();
    let task = sim.step(env).task();
    let ldp_session::Delivery::Send(answer) = sim.complete(&task.key, bad()) else { panic!("not sent") };
    let ldp_types::Body::TaskResult(result) = &answer.body else { panic!("expected TASK_RESULT, got {answer:?}") };
    assert_eq!(result.provenance.contract_satisfied, Some(false));
    assert_eq!(result.provenance.contract_violations, ["SUCCESS_CRITERION_FAILED", "SAFETY_CONSTRAINT_VIOLATED"]);

    // An output that meets them: satisfied.
    let env = sim
        .initiator
        .submit(&sid, "summarize", frame("summarise"), Some(with_checks(FailurePolicy::FailClosed)), None)
        .unwrap();
    let task = sim.step(env).task();
    let good = TaskOutput::new(json!({ "revenue": 12, "summary": "revenue grew" }));
    let ldp_session::Delivery::Send(answer) = sim.complete(&task.key, good) else { panic!("not sent") };
    let ldp_types::Body::TaskResult(result) = &answer.body else { panic!("expected TASK_RESULT, got {answer:?}") };
    assert_eq!(result.provenance.contract_satisfied, Some(true));
}
