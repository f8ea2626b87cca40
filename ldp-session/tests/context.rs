#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What a delegate sees and does beyond one task (issue 16): the session's context (RFC 5.3), partial output as
//! TASK_UPDATE, the cancellation signal, and the result of a finished task fetched by a status query.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::{Sim, frame, initiator_config, responder_config};
use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, MemoryTransport, Submission, TaskContext};
use ldp_session::*;
use ldp_types::*;
use serde_json::json;

/// The inputs and outputs of a history, as JSON text, oldest first.
fn turns(history: &History) -> Vec<(String, Option<String>)> {
    history.iter().map(|t| (t.input.json().to_owned(), t.output.as_ref().map(|o| o.json().to_owned()))).collect()
}

/// Runs one task to completion in the machine, answering `output`; returns the request the delegate got.
fn run(sim: &mut Sim, sid: &str, instruction: &str, output: serde_json::Value) -> TaskRequest {
    let task = sim.submit(sid, "echo", frame(instruction)).task();
    sim.complete(&task.key, TaskOutput::new(output));
    task
}

#[test]
fn later_tasks_see_the_earlier_turns_of_their_session_only() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let other = sim.session();
    let first = run(&mut sim, &sid, "one", json!("1"));
    assert!(first.history.is_empty(), "a session's first task has no context");
    let failed = sim.submit(&sid, "echo", frame("two")).task();
    sim.responder.fail_task(sim.now(), &failed.key, LdpError::runtime(codes::EXECUTION_FAILED, "no")).unwrap();
    run(&mut sim, &sid, "three", json!({ "n": 3 }));
    let fourth = sim.submit(&sid, "echo", frame("four")).task();
    let want = |i: &str| serde_json::to_string(&frame(i)).unwrap();
    assert_eq!(
        turns(&fourth.history),
        vec![
            (want("one"), Some("\"1\"".to_owned())),
            (want("two"), None),
            (want("three"), Some(r#"{"n":3}"#.to_owned())),
        ]
    );
    let ids: Vec<&str> = fourth.history.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, [first.key.task_id.as_str(), failed.key.task_id.as_str(), ids[2]]);
    assert!(fourth.history.iter().all(|t| t.skill == "echo"));
    // Another session of the same peer starts empty.
    assert!(sim.submit(&other, "echo", frame("x")).task().history.is_empty());
}

#[test]
fn the_context_is_bounded_by_turns_and_bytes_oldest_first() {
    let mut cfg = responder_config();
    cfg.limits.context_turns = 2;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    for i in 0..5 {
        run(&mut sim, &sid, &format!("{i}"), json!(i));
    }
    let next = sim.submit(&sid, "echo", frame("next")).task();
    let outputs: Vec<_> = turns(&next.history).into_iter().map(|(_, o)| o.unwrap()).collect();
    assert_eq!(outputs, ["3", "4"], "the two latest turns");

    // Bytes: each turn here counts about 550 bytes (its strings, a fixed overhead, its provenance); 1400 keeps two.
    let mut cfg = responder_config();
    cfg.limits.context_bytes = 1400;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let pad = "x".repeat(150);
    for i in 0..4 {
        run(&mut sim, &sid, &format!("{i}{pad}"), json!(i));
    }
    let next = sim.submit(&sid, "echo", frame("next")).task();
    let outputs: Vec<_> = turns(&next.history).into_iter().map(|(_, o)| o.unwrap()).collect();
    assert_eq!(outputs, ["2", "3"]);
    // One turn larger than the bound empties the context rather than leaving a gap.
    run(&mut sim, &sid, &"y".repeat(2000), json!("big"));
    assert!(sim.submit(&sid, "echo", frame("after")).task().history.is_empty());

    // Turned off: nothing is kept, and a status query falls back to the bare status.
    let mut cfg = responder_config();
    cfg.limits.context_turns = 0;
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let done = run(&mut sim, &sid, "a", json!("a"));
    assert!(sim.submit(&sid, "echo", frame("b")).task().history.is_empty());
    let query = sim.forge(&sid, TaskUpdate::new(done.key.task_id.clone(), None, None), PayloadMode::Text);
    let Ok(Outcome::Reply(reply)) = sim.send_responder(&query) else { panic!() };
    assert!(matches!(&reply.body, Body::TaskUpdate(u) if u.message.as_deref() == Some("completed")));
}

/// A long task over HTTP outlives its request: a status query afterwards returns its result with provenance.
#[test]
fn a_status_query_for_a_finished_task_returns_its_result() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("long")).task();
    let mut out = TaskOutput::new(json!({ "answer": 42 }));
    out.tokens_used = Some(17);
    let Delivery::Send(first) = sim.complete(&task.key, out) else { panic!() };
    let query = sim.forge(&sid, TaskUpdate::new(task.key.task_id.clone(), None, None), PayloadMode::Text);
    let Ok(Outcome::Reply(reply)) = sim.send_responder(&query) else { panic!() };
    let Body::TaskResult(result) = &reply.body else { panic!("{reply:?}") };
    assert_eq!(result.output, json!({ "answer": 42 }));
    assert_eq!(result.provenance.tokens_used, Some(17));
    assert_eq!(result.provenance.session_id.as_deref(), Some(sid.as_str()));
    assert_eq!(reply.provenance.as_deref(), Some(&*result.provenance), "the envelope carries it too");
    // A fresh message, not the first answer replayed: its own id.
    assert_ne!(reply.message_id, first.message_id);
}

#[test]
fn partial_output_is_a_task_update_that_round_trips() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "echo", frame("stream")).task();
    let env = sim.responder.partial_output(sim.now(), &task.key, RawJson::from("Hel")).unwrap();
    let bytes = env.to_vec().unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.contains(r#""partial_output":"Hel""#), "{text}");
    let back = Envelope::from_slice(&bytes).unwrap();
    let Body::TaskUpdate(u) = &back.body else { panic!() };
    assert_eq!(u.partial_output.as_ref().map(RawJson::json), Some("\"Hel\""));
    assert_eq!((u.progress, u.message.as_deref()), (None, None));
    // Older peers send no such member, or null: both read as no chunk.
    let null = text.replace(r#""partial_output":"Hel""#, r#""partial_output":null"#);
    let Body::TaskUpdate(u) = Envelope::from_slice(null.as_bytes()).unwrap().body else { panic!() };
    assert_eq!(u.partial_output, None);
    // Only for a running task.
    sim.complete(&task.key, TaskOutput::new(json!("Hello")));
    assert!(sim.responder.partial_output(sim.now(), &task.key, RawJson::from("lo")).is_err());
}

// ---------------------------------------------------------------------------------------------------------------
// The runtime: the context, partial output and cancellation as a delegate sees them.

fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:test").unwrap(), "Test", "none", "1.0");
    card.capabilities = vec![Capability::new("chat"), Capability::new("slow"), Capability::new("stream")];
    card
}

fn runtime(delegate: Arc<dyn Delegate>) -> DelegateRuntime {
    let responder = Responder::new(ResponderConfig::new(card()), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    DelegateRuntime::new(responder, delegate)
}

async fn client(rt: &DelegateRuntime) -> Client<MemoryTransport> {
    let transport = MemoryTransport::new(rt.clone(), PeerContext::default());
    let cfg = InitiatorConfig::new("ldp:delegate:client");
    Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::new(8))).await.unwrap()
}

/// `chat` answers with how many turns it saw and the last output; `stream` sends three chunks; `slow` waits for its
/// cancellation signal and records that it saw it.
#[derive(Default)]
struct Recorder {
    saw_cancel: Arc<AtomicBool>,
    started: Arc<std::sync::Mutex<Option<TaskKey>>>,
}

#[async_trait]
impl Delegate for Recorder {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        match task.skill.as_str() {
            "chat" => {
                let last: Option<serde_json::Value> =
                    ctx.history().last().and_then(|t| t.output.as_ref()).map(|o| o.parse().unwrap());
                assert_eq!(ctx.history(), &task.history);
                Ok(TaskOutput::new(json!({ "turns": ctx.history().len(), "last": last, "input": task.input })))
            }
            "stream" => {
                for chunk in ["a", "b", "c"] {
                    ctx.partial(chunk);
                }
                Ok(TaskOutput::new(json!("abc")))
            }
            _ => {
                *self.started.lock().unwrap() = Some(task.key.clone());
                assert!(!ctx.is_cancelled());
                tokio::select! {
                    () = ctx.cancelled() => {
                        assert!(ctx.is_cancelled());
                        self.saw_cancel.store(true, Ordering::SeqCst);
                        Err(LdpError::runtime(codes::CANCELLED, "stopped"))
                    }
                    () = tokio::time::sleep(Duration::from_secs(3600)) => Ok(TaskOutput::new(json!("late"))),
                }
            }
        }
    }
}

#[tokio::test]
async fn a_delegate_continues_a_conversation_without_resent_context() {
    let rt = runtime(Arc::new(Recorder::default()));
    let c = client(&rt).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let one = c.submit(&s.session_id, "chat", json!("hello"), None).await.unwrap();
    assert_eq!(one.output, json!({ "turns": 0, "last": null, "input": "hello" }));
    let two = c.submit(&s.session_id, "chat", json!("again"), None).await.unwrap();
    assert_eq!(
        two.output,
        json!({ "turns": 1, "last": { "turns": 0, "last": null, "input": "hello" }, "input": "again" })
    );
}

#[tokio::test]
async fn partial_output_reaches_a_streaming_submitter_in_order() {
    let rt = runtime(Arc::new(Recorder::default()));
    let c = client(&rt).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let out = c.submit_task(Submission::new(&s.session_id, "stream", json!("go")).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!("abc"));
    let mut chunks = String::new();
    while let Ok(Some(p)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
        chunks.push_str(&p.partial.unwrap().parse::<String>().unwrap());
        if chunks.len() == 3 {
            break;
        }
    }
    assert_eq!(chunks, "abc");
}

/// TASK_CANCEL, SESSION_CLOSE and expiry reach a slow delegate as its cancellation signal, before its work is
/// dropped, on both ways the runtime runs delegates.
#[tokio::test(start_paused = true)]
async fn cancellation_reaches_the_delegate_as_a_signal() {
    for how in ["cancel", "close", "expire"] {
        let recorder = Recorder::default();
        let (saw_cancel, started) = (recorder.saw_cancel.clone(), recorder.started.clone());
        let rt = runtime(Arc::new(recorder));
        let reaper = rt.spawn_reaper();
        let c = Arc::new(client(&rt).await);
        let s = c.propose(SessionConfig { ttl_secs: Some(60), ..Default::default() }).await.unwrap();
        let (c2, sid) = (c.clone(), s.session_id.clone());
        let submitter = tokio::spawn(async move { c2.submit(&sid, "slow", json!("x"), None).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(rt.running_tasks(), 1);
        match how {
            "cancel" => {
                let key = started.lock().unwrap().clone().unwrap();
                c.cancel(&key).await.unwrap();
            }
            "close" => c.close(&s.session_id).await.unwrap(),
            _ => tokio::time::sleep(Duration::from_secs(61)).await,
        }
        let SessionError::Peer(e) = submitter.await.unwrap().unwrap_err() else { panic!() };
        assert_eq!(e.code, codes::CANCELLED, "{how}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(saw_cancel.load(Ordering::SeqCst), "{how}: the delegate did not see its cancellation");
        reaper.abort();
    }
}

#[tokio::test]
async fn a_detached_context_serves_tests_of_a_delegate() {
    let history = History::from_turns([Turn::new("t1", "chat", "hi", Some(RawJson::from("hello")))]);
    let (ctx, mut handle) = TaskContext::detached(history);
    assert_eq!(ctx.history().len(), 1);
    ctx.partial("x");
    assert_eq!(handle.next().await.unwrap().partial.unwrap().json(), "\"x\"");
    assert!(!ctx.is_cancelled());
    handle.cancel();
    tokio::time::timeout(Duration::from_secs(1), ctx.cancelled()).await.unwrap();
}

/// The signal reaches every copy of a context, whether it waits already or starts waiting later, and a context
/// whose task is never cancelled never sees it.
#[tokio::test]
async fn every_copy_of_a_context_sees_one_cancellation() {
    let (ctx, handle) = TaskContext::detached(History::default());
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let ctx = ctx.clone();
            tokio::spawn(async move { ctx.cancelled().await })
        })
        .collect();
    tokio::task::yield_now().await;
    let (other, _other_handle) = TaskContext::detached(History::default());
    handle.cancel();
    for waiter in waiting {
        tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    }
    let late = ctx.clone();
    tokio::time::timeout(Duration::from_secs(1), late.cancelled()).await.unwrap();
    assert!(late.is_cancelled());
    assert!(!other.is_cancelled());
    assert!(tokio::time::timeout(Duration::from_millis(50), other.cancelled()).await.is_err());
}
