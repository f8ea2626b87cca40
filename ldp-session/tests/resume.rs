#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! WebSocket-style disconnect and resume between the two machines alone (issue 15): no sockets. The connection
//! drops with tasks in flight; the initiator resumes them with status queries ([`Initiator::handle_reconnect`]),
//! submits again what the responder never received, never runs a task twice on `DUPLICATE_TASK`, and every result
//! reaches the initiator exactly once. The test plays the binding: it moves envelopes, suspends the responder's
//! sessions when "the connection" drops, and sends the results the responder held before the answer to the message
//! that resumed their session (as the WebSocket server does).

use std::time::Duration;

use crate::support::*;
use ldp_session::{
    DEFAULT_RESUME_GRACE, Delivery, Expired, InitiatorEvent, Outcome, PeerMisbehaved, Refusal, ResumeVerdict,
    SessionError, SessionState, TaskKey, TaskOutput, Transmit,
};
use ldp_types::{Body, Envelope, LdpError, SessionConfig, codes};
use serde_json::json;

/// The answer the responder's binding sends for one inbound message: the reply, or the refusal's reply.
fn answer_of(outcome: &Result<Outcome, Refusal>) -> Option<Envelope> {
    match outcome {
        Ok(Outcome::Reply(r)) | Ok(Outcome::Cancel { reply: r, .. }) => Some(r.clone()),
        Err(Refusal { reply: Some(r), .. }) => Some(r.clone()),
        _ => None,
    }
}

/// The connection drops: the responder suspends the sessions on it, the initiator learns which tasks were in flight.
fn drop_connection(sim: &mut Sim, in_flight: &[TaskKey]) {
    let old = sim.peer.connection.unwrap();
    sim.responder.suspend_connection(old);
    let now = sim.now();
    sim.initiator.handle_disconnect(now, in_flight.iter().cloned());
}

/// A new connection is up: the initiator's status queries, in order.
fn reconnect(sim: &mut Sim) -> Vec<Transmit> {
    sim.peer.connection = Some(sim.peer.connection.unwrap() + 1);
    let now = sim.now();
    sim.initiator.handle_reconnect(now);
    std::iter::from_fn(|| sim.initiator.poll_transmit()).collect()
}

/// Sends one of the initiator's own messages to the responder. Results held for its session go to the initiator
/// first (as the binding flushes them); then the answer is judged by the initiator, and delivered when it is the
/// task's answer. Returns the verdict.
fn send_transmit(sim: &mut Sim, t: &Transmit) -> ResumeVerdict {
    let env = t.envelope().clone();
    let outcome = sim.send_responder(&env);
    for held in sim.responder.take_held(&env.session_id) {
        sim.send_initiator(&held.envelope().unwrap()).unwrap();
    }
    let Some(answer) = answer_of(&outcome) else { return ResumeVerdict::Wait };
    judge(sim, &env.message_id, &answer)
}

/// The initiator judges an answer to its message `in_reply_to`; a delivered answer goes through `handle`.
fn judge(sim: &mut Sim, in_reply_to: &str, answer: &Envelope) -> ResumeVerdict {
    let now = sim.now();
    let verdict = sim.initiator.handle_resume_answer(now, in_reply_to, Ok(answer));
    if let ResumeVerdict::Deliver(_) = &verdict {
        sim.send_initiator(answer).unwrap();
    }
    verdict
}

/// How many times each task completed at the initiator, among the events drained now.
fn completions(sim: &mut Sim) -> Vec<(TaskKey, serde_json::Value)> {
    sim.initiator_events()
        .into_iter()
        .filter_map(|e| match e {
            InitiatorEvent::TaskCompleted { key, output, .. } => Some((key, output.to_value().unwrap())),
            _ => None,
        })
        .collect()
}

fn submit_only(sim: &mut Sim, sid: &str, input: &str) -> Envelope {
    sim.initiator.submit(sid, "echo", json!(input), None, None).unwrap()
}

fn key_of(env: &Envelope) -> TaskKey {
    TaskKey { session_id: env.session_id.clone(), task_id: env.body.task_id().unwrap().to_owned() }
}

#[test]
fn a_result_held_while_disconnected_arrives_once_and_the_status_answer_adds_nothing() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let submit = submit_only(&mut sim, &sid, "one");
    let task = match sim.send_responder(&submit) {
        Ok(Outcome::Execute(t)) => t,
        other => panic!("{other:?}"),
    };
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    // The task ends while the connection is down: the responder holds its result.
    let delivery = sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("one"))).unwrap();
    assert!(matches!(delivery, Delivery::Held), "{delivery:?}");
    sim.tasks.clear();

    let queries = reconnect(&mut sim);
    assert_eq!(queries.len(), 1);
    let Transmit::StatusQuery { key, envelope } = &queries[0] else { panic!("{:?}", queries[0]) };
    assert_eq!(key, &task.key);
    assert!(matches!(&envelope.body, Body::TaskUpdate(u) if u.task_id == task.key.task_id), "{envelope:?}");
    // The answer comes after the held result: nothing more for the caller, whatever the answer says.
    let verdict = send_transmit(&mut sim, &queries[0]);
    assert_eq!(verdict, ResumeVerdict::Wait);
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(completions(&mut sim), vec![(task.key.clone(), json!("one"))]);
    // The grace passes with the task done: no timeout fails it afterwards.
    sim.advance(DEFAULT_RESUME_GRACE * 2);
    assert_eq!(sim.initiator.handle_timeout(sim.now()), vec![]);
    assert!(sim.initiator.poll_transmit().is_none());
}

#[test]
fn a_task_still_running_at_resume_answers_once_on_the_new_connection() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let keys: Vec<TaskKey> = (0..3).map(|i| sim.submit(&sid, "echo", json!(i)).task().key).collect();
    drop_connection(&mut sim, &keys);
    let queries = reconnect(&mut sim);
    assert_eq!(queries.iter().map(|q| q.key().clone()).collect::<Vec<_>>(), sorted(&keys));
    for q in &queries {
        let answer = answer_of(&sim.send_responder(q.envelope())).unwrap();
        let Body::TaskUpdate(u) = &answer.body else { panic!("{answer:?}") };
        assert_eq!(u.message.as_deref(), Some("running"));
        assert_eq!(judge(&mut sim, &q.envelope().message_id, &answer), ResumeVerdict::Wait);
    }
    // Running tasks set no deadline: they may take as long as they take.
    assert_eq!(sim.initiator.poll_timeout(), None);
    for (i, key) in keys.iter().enumerate() {
        let delivery = sim.complete(key, TaskOutput::new(json!(i)));
        assert!(matches!(delivery, Delivery::Send(_)), "{delivery:?}");
    }
    let mut got = completions(&mut sim);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(TaskKey, serde_json::Value)> =
        keys.iter().enumerate().map(|(i, k)| (k.clone(), json!(i))).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want);
}

fn sorted(keys: &[TaskKey]) -> Vec<TaskKey> {
    let mut k = keys.to_vec();
    k.sort();
    k
}

#[test]
fn a_task_the_responder_never_received_is_submitted_again_once_and_runs_once() {
    let mut sim = Sim::new();
    let sid = sim.session();
    // Written on the connection, lost with it: the responder never sees this copy.
    let lost = submit_only(&mut sim, &sid, "lost");
    let key = key_of(&lost);
    drop_connection(&mut sim, std::slice::from_ref(&key));
    let queries = reconnect(&mut sim);
    assert_eq!(queries.len(), 1);
    let answer = answer_of(&sim.send_responder(queries[0].envelope())).unwrap();
    assert!(matches!(&answer.body, Body::TaskFailed(f) if f.error.code == codes::TASK_NOT_FOUND), "{answer:?}");
    assert_eq!(judge(&mut sim, &queries[0].envelope().message_id, &answer), ResumeVerdict::Wait);
    // The failure is not the task's: the initiator submits it again, same task id, new message.
    let again: Vec<Transmit> = std::iter::from_fn(|| sim.initiator.poll_transmit()).collect();
    assert_eq!(again.len(), 1, "one resubmission: {again:?}");
    let Transmit::Resubmit { key: k, envelope } = &again[0] else { panic!("{again:?}") };
    assert_eq!(k, &key);
    assert_ne!(envelope.message_id, lost.message_id);
    assert!(matches!(&envelope.body, Body::TaskSubmit(t) if t.task_id == key.task_id && t.input == json!("lost")));
    assert!(sim.initiator_events().is_empty(), "no failure surfaced");

    let outcome = sim.send_responder(envelope);
    let Ok(Outcome::Execute(task)) = outcome else { panic!("{outcome:?}") };
    assert_eq!(sim.tasks.len(), 1, "the responder runs the task once");
    let Delivery::Send(result) =
        sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("ran"))).unwrap()
    else {
        panic!()
    };
    sim.tasks.clear();
    assert_eq!(judge(&mut sim, &envelope.message_id, &result), ResumeVerdict::Deliver(key.clone()));
    assert_eq!(completions(&mut sim), vec![(key, json!("ran"))]);
}

#[test]
fn duplicate_task_for_the_resubmission_waits_for_the_first_copy_and_never_runs_it_twice() {
    let mut sim = Sim::new();
    let sid = sim.session();
    // The first copy is delayed in the network: the query overtakes it.
    let first = submit_only(&mut sim, &sid, "slow");
    let key = key_of(&first);
    drop_connection(&mut sim, std::slice::from_ref(&key));
    let queries = reconnect(&mut sim);
    assert_eq!(send_transmit(&mut sim, &queries[0]), ResumeVerdict::Wait);
    let Some(Transmit::Resubmit { envelope: resubmission, .. }) = sim.initiator.poll_transmit() else { panic!() };
    // Now the first copy arrives and runs; then the resubmission, which the responder refuses as a duplicate.
    let Ok(Outcome::Execute(task)) = sim.send_responder(&first) else { panic!() };
    let refused = answer_of(&sim.send_responder(&resubmission)).unwrap();
    assert!(matches!(&refused.body, Body::TaskFailed(f) if f.error.code == codes::DUPLICATE_TASK), "{refused:?}");
    assert_eq!(judge(&mut sim, &resubmission.message_id, &refused), ResumeVerdict::Wait, "not the task's answer");
    assert!(sim.initiator.poll_transmit().is_none(), "no third copy");
    assert!(sim.initiator_events().is_empty(), "the duplicate is not a failure of the task");
    assert_eq!(sim.responder.running_tasks(), 1, "one copy runs");
    // The first copy's result (the answer to the first submit) completes the task, once.
    sim.complete(&task.key, TaskOutput::new(json!("slow")));
    assert_eq!(completions(&mut sim), vec![(key.clone(), json!("slow"))]);
    // A copy of the result arriving again is refused: never delivered twice.
    let again = sim.wire.iter().rev().find(|(d, e)| *d == Dir::ToInitiator && matches!(e.body, Body::TaskResult(_)));
    let again = again.unwrap().1.clone();
    assert!(matches!(
        sim.send_initiator(&again),
        Err(SessionError::PeerMisbehaved(PeerMisbehaved::UnknownTaskResult { .. }))
    ));
}

#[test]
fn a_result_lost_with_the_connection_fails_the_task_after_the_grace() {
    // The session keeps no results as context, so the status query cannot fetch it.
    let mut cfg = responder_config();
    cfg.limits.context_turns = 0;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", json!("gone")).task();
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("gone"))).unwrap();
    sim.tasks.clear();
    // The binding lost what it held (e.g. the server restarted its connection hub).
    drop(sim.responder.take_held(&sid));
    let grace = Duration::from_secs(2);
    sim.initiator.set_resume_grace(grace);
    let queries = reconnect(&mut sim);
    let answer = answer_of(&sim.send_responder(queries[0].envelope())).unwrap();
    let Body::TaskUpdate(u) = &answer.body else { panic!("{answer:?}") };
    assert_eq!(u.message.as_deref(), Some("completed"));
    let verdict = judge(&mut sim, &queries[0].envelope().message_id, &answer);
    assert_eq!(verdict, ResumeVerdict::Wait);
    let deadline = sim.initiator.poll_timeout().expect("a deadline for the result");
    assert_eq!(deadline, sim.now() + grace);
    sim.advance(grace - Duration::from_millis(1));
    assert_eq!(sim.initiator.handle_timeout(sim.now()), vec![]);
    sim.advance(Duration::from_millis(1));
    let expired = sim.initiator.handle_timeout(sim.now());
    let [Expired::ResultLost { key, error }] = expired.as_slice() else { panic!("{expired:?}") };
    assert_eq!(key, &task.key);
    assert_eq!(error.code, codes::TRANSPORT_ERROR);
    assert!(!error.retryable, "the task ran: running it again repeats its effects");
    assert_eq!(sim.initiator.poll_timeout(), None);
}

#[test]
fn a_resumed_task_whose_session_expired_gets_the_expiry_as_its_answer() {
    let mut sim = Sim::new();
    let sid = sim.establish(SessionConfig { ttl_secs: Some(60), ..Default::default() });
    let task = sim.submit(&sid, "echo", json!("late")).task();
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    sim.advance(Duration::from_secs(120));
    let now = sim.now();
    drop(sim.responder.handle_timeout(now));
    sim.responder_events();
    let queries = reconnect(&mut sim);
    let env = queries[0].envelope().clone();
    let answer = answer_of(&sim.send_responder(&env)).expect("the responder answers the query");
    let verdict = judge(&mut sim, &env.message_id, &answer);
    assert_eq!(verdict, ResumeVerdict::Deliver(task.key.clone()), "{answer:?}");
    let failed = sim.initiator_events().into_iter().find_map(|e| match e {
        InitiatorEvent::TaskFailed { key, error } if key == task.key => Some(error),
        _ => None,
    });
    let error = failed.expect("the task failed");
    assert!([codes::SESSION_EXPIRED, codes::SESSION_NOT_FOUND].iter().any(|c| error.code == *c), "{error:?}");
}

#[test]
fn a_refused_status_query_fails_its_task_and_the_initiator_forgets_it() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", json!("x")).task();
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    let queries = reconnect(&mut sim);
    let refusal = LdpError::identity(codes::UNAUTHENTICATED, "no token");
    let now = sim.now();
    let verdict = sim.initiator.handle_resume_answer(now, &queries[0].envelope().message_id, Err(&refusal));
    assert_eq!(verdict, ResumeVerdict::Fail { key: task.key.clone(), error: refusal });
    // Forgotten: a late result for it is refused, not delivered.
    let held = sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("x"))).unwrap();
    assert!(matches!(held, Delivery::Held), "{held:?}");
    let result = sim.responder.take_held(&sid).pop().unwrap().envelope().unwrap();
    assert!(matches!(
        sim.send_initiator(&result),
        Err(SessionError::PeerMisbehaved(PeerMisbehaved::UnknownTaskResult { .. }))
    ));
    assert!(completions(&mut sim).is_empty());
}

#[test]
fn a_second_drop_during_the_resume_queries_again() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", json!("twice")).task();
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    let first = reconnect(&mut sim);
    // The query is lost with the second connection.
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    let second = reconnect(&mut sim);
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].envelope().message_id, first[0].envelope().message_id);
    // A late answer to the lost query is ignored; the new one is judged.
    let now = sim.now();
    let running = answer_of(&sim.send_responder(second[0].envelope())).unwrap();
    assert_eq!(
        sim.initiator.handle_resume_answer(now, &first[0].envelope().message_id, Ok(&running)),
        ResumeVerdict::Wait
    );
    assert_eq!(judge(&mut sim, &second[0].envelope().message_id, &running), ResumeVerdict::Wait);
    sim.complete(&task.key, TaskOutput::new(json!("twice")));
    assert_eq!(completions(&mut sim), vec![(task.key, json!("twice"))]);
}

#[test]
fn tasks_not_in_flight_are_not_queried() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let in_flight = sim.submit(&sid, "echo", json!(1)).task().key;
    // Built but not yet written when the connection dropped: it goes out as it is, no query.
    let queued = key_of(&submit_only(&mut sim, &sid, "queued"));
    drop_connection(&mut sim, std::slice::from_ref(&in_flight));
    let queries = reconnect(&mut sim);
    assert_eq!(queries.iter().map(|q| q.key().clone()).collect::<Vec<_>>(), vec![in_flight]);
    assert!(queries.iter().all(|q| q.key() != &queued));
}

#[test]
fn unanswered_proposals_and_submits_time_out_only_under_an_answer_timeout() {
    let mut sim = Sim::new();
    let sid = sim.session();
    // Without an answer timeout nothing expires, however long it takes.
    let slow = sim.initiator.submit(&sid, "echo", json!("slow"), None, None).unwrap();
    let now = sim.now();
    assert!(!sim.initiator.handle_sent(now, &slow), "no deadline kept");
    assert_eq!(sim.initiator.poll_timeout(), None);

    let limit = Duration::from_secs(30);
    sim.initiator.set_answer_timeout(Some(limit));
    let propose = sim.initiator.propose(SessionConfig::default());
    let submit = sim.initiator.submit(&sid, "echo", json!("x"), None, None).unwrap();
    let answered = sim.initiator.submit(&sid, "echo", json!("y"), None, None).unwrap();
    let now = sim.now();
    for env in [&propose, &submit, &answered] {
        assert!(sim.initiator.handle_sent(now, env));
    }
    let hello = sim.initiator.hello();
    assert!(!sim.initiator.handle_sent(now, &hello), "only proposals and tasks have deadlines");
    assert_eq!(sim.initiator.poll_timeout(), Some(now + limit));
    // One is answered in time.
    let Ok(Outcome::Execute(task)) = sim.send_responder(&answered) else { panic!() };
    sim.complete(&task.key, TaskOutput::new(json!("y")));
    sim.advance(limit);
    let mut expired = sim.initiator.handle_timeout(sim.now());
    expired.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(expired.len(), 2, "{expired:?}");
    let proposal = expired.iter().find_map(|e| match e {
        Expired::ProposalUnanswered { session_id, error } => Some((session_id.clone(), error.clone())),
        _ => None,
    });
    let (proposed, error) = proposal.expect("the proposal expired");
    assert_eq!(proposed, propose.session_id);
    assert_eq!(error.code, codes::TIMEOUT);
    assert_eq!(sim.initiator.session_state(&proposed), Some(SessionState::Failed));
    assert!(expired.iter().any(|e| matches!(e, Expired::TaskUnanswered { key, .. } if *key == key_of(&submit))));
    assert_eq!(sim.initiator.poll_timeout(), None);
    // Both are forgotten: a late accept answers no proposal, a late result no task.
    let Ok(Outcome::Execute(late)) = sim.send_responder(&submit) else { panic!() };
    let Delivery::Send(result) =
        sim.responder.complete_task(sim.now(), &late.key, TaskOutput::new(json!("x"))).unwrap()
    else {
        panic!()
    };
    assert!(sim.send_initiator(&result).is_err());
    assert!(completions(&mut sim).iter().all(|(k, _)| *k != key_of(&submit)));
}

#[test]
fn a_result_the_session_kept_is_fetched_by_the_status_query_once() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", json!("kept")).task();
    drop_connection(&mut sim, std::slice::from_ref(&task.key));
    sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("kept"))).unwrap();
    sim.tasks.clear();
    drop(sim.responder.take_held(&sid));
    let queries = reconnect(&mut sim);
    let answer = answer_of(&sim.send_responder(queries[0].envelope())).unwrap();
    assert!(matches!(answer.body, Body::TaskResult(_)), "{answer:?}");
    assert_eq!(judge(&mut sim, &queries[0].envelope().message_id, &answer), ResumeVerdict::Deliver(task.key.clone()));
    assert_eq!(completions(&mut sim), vec![(task.key, json!("kept"))]);
    assert_eq!(sim.initiator.poll_timeout(), None);
}

#[test]
fn under_a_status_poll_a_running_task_is_queried_again_until_its_kept_result_answers() {
    // A carrier without pushed answers (HTTP): the result of a task reported running would never come.
    let mut sim = Sim::new();
    let poll = Duration::from_millis(500);
    sim.initiator.set_status_poll(Some(poll));
    let sid = sim.session();
    let key = sim.submit(&sid, "echo", json!("polled")).task().key;
    let now = sim.now();
    sim.initiator.handle_disconnect(now, [key.clone()]);
    sim.initiator.handle_reconnect(now);
    let first = sim.initiator.poll_transmit().unwrap();
    // Over HTTP nothing suspends the session: the task runs on, and the query finds it running.
    let answer = answer_of(&sim.send_responder(first.envelope())).unwrap();
    assert_eq!(judge(&mut sim, &first.envelope().message_id, &answer), ResumeVerdict::Wait);
    assert_eq!(sim.initiator.poll_timeout(), Some(sim.now() + poll));
    // Not before the interval.
    sim.advance(poll / 2);
    assert_eq!(sim.initiator.handle_timeout(sim.now()), vec![]);
    assert!(sim.initiator.poll_transmit().is_none());
    // The task ends while nobody listens for it (its request is gone, the answer lost), and the session keeps the
    // result.
    let delivery = sim.responder.complete_task(sim.now(), &key, TaskOutput::new(json!("done"))).unwrap();
    assert!(matches!(delivery, Delivery::Send(_)), "{delivery:?}");
    sim.tasks.clear();
    sim.advance(poll);
    assert_eq!(sim.initiator.handle_timeout(sim.now()), vec![]);
    let second = sim.initiator.poll_transmit().expect("the poll's status query");
    assert_eq!(second.key(), &key);
    assert!(matches!(second, Transmit::StatusQuery { .. }), "{second:?}");
    assert_ne!(second.envelope().message_id, first.envelope().message_id);
    // The kept result answers the query: it is the task's answer, delivered once.
    let answer = answer_of(&sim.send_responder(second.envelope())).unwrap();
    assert_eq!(judge(&mut sim, &second.envelope().message_id, &answer), ResumeVerdict::Deliver(key.clone()));
    assert_eq!(completions(&mut sim), vec![(key, json!("done"))]);
    assert_eq!(sim.initiator.pending_tasks(), 0);
    assert_eq!(sim.initiator.poll_timeout(), None);
}

#[test]
fn a_task_whose_answer_is_lost_more_than_the_bound_fails_with_not_resumed() {
    let mut sim = Sim::new();
    sim.initiator.set_max_resumes(2);
    let sid = sim.session();
    let key = sim.submit(&sid, "echo", json!("x")).task().key;
    for loss in 1..=2 {
        let now = sim.now();
        sim.initiator.handle_disconnect(now, [key.clone()]);
        sim.initiator.handle_reconnect(now);
        assert!(sim.initiator.poll_transmit().is_some(), "loss {loss} is resumed");
        assert_eq!(sim.initiator.handle_timeout(now), vec![]);
    }
    // One loss more than allowed: no query, and the task fails at once.
    let now = sim.now();
    sim.initiator.handle_disconnect(now, [key.clone()]);
    sim.initiator.handle_reconnect(now);
    assert!(sim.initiator.poll_transmit().is_none());
    assert_eq!(sim.initiator.poll_timeout(), Some(now));
    let expired = sim.initiator.handle_timeout(now);
    let [Expired::NotResumed { key: k, error }] = expired.as_slice() else { panic!("{expired:?}") };
    assert_eq!(k, &key);
    assert_eq!(error.code, codes::TRANSPORT_ERROR);
    assert!(!error.retryable);
    assert_eq!(error.message, "the task's answer was lost 3 times; it is not resumed again");
    assert_eq!(sim.initiator.pending_tasks(), 0);
}

#[test]
fn a_lost_status_query_is_asked_again_after_the_poll_interval_and_counts_as_a_loss() {
    let mut sim = Sim::new();
    let poll = Duration::from_millis(200);
    sim.initiator.set_status_poll(Some(poll));
    sim.initiator.set_max_resumes(2);
    let sid = sim.session();
    let key = sim.submit(&sid, "echo", json!("y")).task().key;
    let now = sim.now();
    sim.initiator.handle_disconnect(now, [key.clone()]);
    sim.initiator.handle_reconnect(now);
    assert!(sim.initiator.poll_transmit().is_some());
    // The query itself never got through (the second loss): asked again, not at once but after the interval.
    sim.initiator.handle_query_lost(now, &key);
    assert!(sim.initiator.poll_transmit().is_none());
    assert_eq!(sim.initiator.poll_timeout(), Some(now + poll));
    assert_eq!(sim.initiator.handle_timeout(now + poll), vec![]);
    let again = sim.initiator.poll_transmit().expect("the query asked again");
    assert!(matches!(again, Transmit::StatusQuery { .. }), "{again:?}");
    // A third loss with a bound of two: the task fails instead of being queried again.
    sim.initiator.handle_query_lost(now + poll, &key);
    let expired = sim.initiator.handle_timeout(now + poll);
    assert!(matches!(expired.as_slice(), [Expired::NotResumed { key: k, .. }] if *k == key), "{expired:?}");
    assert!(sim.initiator.poll_transmit().is_none());
    assert_eq!(sim.initiator.pending_tasks(), 0);
}
