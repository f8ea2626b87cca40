//! A store shares state; it must not change what a delegate answers. Random conversations (sessions proposed and
//! closed, tasks submitted, status queries, cancels, unknown skills and sessions, messages resent verbatim, task ids
//! submitted again under new message ids), unsigned and signed, get the same answers, message by message, from one
//! `DelegateRuntime` without a store as from one with each backend attached (`MemoryStore`, `SqliteStore`,
//! `RedisStore` on a real `redis-server`), and from two replicas over each backend with the messages dealt to them in
//! turn, as a round-robin balancer would: replicas behind a balancer are one delegate to their peers. Ids are seeded
//! alike on every run, so the conversations are the same ones. Message ids are never reused for another message:
//! across replicas an unsigned TASK_SUBMIT's id is found through its task (ARCHITECTURE, "admission: replay claim"),
//! the one answer a store changes, for a peer that breaks the RFC's unique ids.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use ldp_session::runtime::{DelegateRuntime, EchoDelegate, Response};
use ldp_session::store::{Store, StoreOptions};
use ldp_session::{
    Initiator, InitiatorConfig, PeerContext, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock,
};
use ldp_store::{MemoryStore, StoreConfig};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{
    Body, Capability, DelegateId, Envelope, IdentityCard, SessionConfig, TaskCancel, TaskSubmit, TaskUpdate,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::backends::{Backends, run_cases};

const DELEGATE: &str = "ldp:delegate:same";
const CLIENT: &str = "ldp:delegate:client";

#[derive(Debug, Clone, Copy)]
enum Op {
    Propose,
    /// In the n-th session accepted so far (modulo).
    Submit(usize),
    /// Of the n-th task submitted so far.
    Status(usize),
    Close(usize),
    /// The n-th message sent so far, again, byte for byte.
    Resend(usize),
    /// The n-th TASK_SUBMIT sent so far, under a new message id (the same task id).
    SubmitAgain(usize),
    /// A TASK_CANCEL for the n-th task submitted so far.
    Cancel(usize),
    /// A task for a skill the delegate does not have, in the n-th session.
    UnknownSkill(usize),
    /// A task in a session no one established.
    NoSession,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        2 => Just(Op::Propose),
        4 => any::<usize>().prop_map(Op::Submit),
        2 => any::<usize>().prop_map(Op::Status),
        1 => any::<usize>().prop_map(Op::Close),
        2 => any::<usize>().prop_map(Op::Resend),
        2 => any::<usize>().prop_map(Op::SubmitAgain),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => any::<usize>().prop_map(Op::UnknownSkill),
        1 => Just(Op::NoSession),
    ];
    proptest::collection::vec(op, 1..30)
}

fn key() -> SigningKey {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "same-secret").unwrap()
}

/// Signed traffic (HMAC, replay protection with its bounded window) or unsigned (the dedupe window).
fn security(signed: bool) -> SecurityConfig {
    if signed { SecurityConfig::symmetric(key()) } else { SecurityConfig::default() }
}

/// A runtime whose ids come from `seed` (each replica its own, as separate processes would draw them).
fn runtime(store: Option<Arc<dyn Store>>, signed: bool, seed: u64) -> DelegateRuntime {
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Same", "none", "1");
    card.capabilities.push(Capability::new("echo"));
    let mut cfg = ResponderConfig::new(card);
    cfg.security = security(signed);
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::new(seed)));
    let rt = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    if let Some(store) = store {
        rt.attach_store(store, StoreOptions::default()).unwrap();
    }
    rt
}

/// What a peer sees of an answer: its type and, for a failure, its code.
fn view(response: Response) -> (String, Option<Vec<u8>>) {
    let env = match response {
        Response::Reply(env) => *env,
        Response::Refused(refusal) => match refusal.reply {
            Some(env) => env,
            None => return (format!("refused {}", refusal.error.code.as_str()), None),
        },
        Response::Accepted => return ("accepted".into(), None),
    };
    let code = match &env.body {
        Body::TaskFailed(f) => Some(f.error.code.as_str().to_owned()),
        Body::SessionReject(r) => r.error.as_ref().map(|e| e.code.as_str().to_owned()),
        _ => None,
    };
    let text = match code {
        Some(code) => format!("{} {code}", env.body.type_name()),
        None => env.body.type_name().to_owned(),
    };
    (text, Some(env.to_vec().unwrap()))
}

/// A message built by hand (the initiator builds only its own conversation's), signed when the traffic is.
fn by_hand(step: usize, session_id: &str, body: impl Into<Body>, signed: bool) -> Envelope {
    let now = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
    let mut env = Envelope::new(format!("hand-{step}"), now, session_id, CLIENT, DELEGATE, body);
    if signed {
        env = env.with_nonce(format!("nonce-{step}"));
        ldp_types::signing::sign(&mut env, &key()).unwrap();
    }
    env
}

/// Plays `ops` against the replicas `rts`, each message to the next replica in turn; one line per operation.
async fn converse(rts: &[DelegateRuntime], ops: &[Op], signed: bool) -> Vec<String> {
    let mut cfg = InitiatorConfig::new(CLIENT);
    cfg.security = security(signed);
    let mut init = Initiator::new(cfg, DELEGATE, Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let mut sent: Vec<Envelope> = Vec::new();
    let mut submits: Vec<Envelope> = Vec::new();
    let mut sessions: Vec<String> = Vec::new();
    let mut lines = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let env = match *op {
            Op::Propose => Some(init.propose(SessionConfig::default())),
            Op::Submit(n) if !sessions.is_empty() => {
                let session = &sessions[n % sessions.len()];
                init.submit(session, "echo", serde_json::json!({ "step": step }), None, None).ok()
            }
            Op::Status(n) if !submits.is_empty() => {
                let submit = &submits[n % submits.len()];
                let task_id = submit.body.task_id().unwrap_or_default().to_owned();
                Some(by_hand(step, &submit.session_id, TaskUpdate::new(task_id, None, None), signed))
            }
            Op::Cancel(n) if !submits.is_empty() => {
                let submit = &submits[n % submits.len()];
                let task_id = submit.body.task_id().unwrap_or_default().to_owned();
                Some(by_hand(step, &submit.session_id, TaskCancel::new(task_id), signed))
            }
            Op::UnknownSkill(n) if !sessions.is_empty() => {
                let session = &sessions[n % sessions.len()];
                init.submit(session, "no-such-skill", serde_json::json!({ "step": step }), None, None).ok()
            }
            Op::NoSession => {
                let body =
                    TaskSubmit::new(format!("task-{step}"), "echo".into(), serde_json::json!({ "step": step }), None);
                Some(by_hand(step, "no-such-session", body, signed))
            }
            Op::Close(n) if !sessions.is_empty() => init.close(&sessions[n % sessions.len()], None).ok(),
            Op::Resend(n) if !sent.is_empty() => Some(sent[n % sent.len()].clone()),
            Op::SubmitAgain(n) if !submits.is_empty() => {
                let mut again = submits[n % submits.len()].clone();
                again.message_id = format!("again-{step}");
                again.timestamp = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
                if signed {
                    again.nonce = Some(format!("again-nonce-{step}"));
                    ldp_types::signing::sign(&mut again, &key()).unwrap();
                }
                Some(again)
            }
            _ => None,
        };
        let Some(env) = env else {
            lines.push(format!("{op:?}: nothing to send"));
            continue;
        };
        let rt = &rts[sent.len() % rts.len()];
        let (text, reply) = view(rt.handle(&PeerContext::default(), &env.to_vec().unwrap(), None).await);
        // The initiator takes its own messages' answers (a resent or hand-built message's would confuse it).
        let own = matches!(op, Op::Propose | Op::Submit(_) | Op::Close(_) | Op::UnknownSkill(_));
        let taken = match (own, &reply) {
            (true, Some(bytes)) => match init.handle(bytes) {
                Ok(()) => String::new(),
                Err(e) => format!(" (initiator: {e})"),
            },
            _ => String::new(),
        };
        if let (true, Some(bytes)) = (matches!(op, Op::Propose), &reply) {
            let reply = Envelope::from_slice(bytes).unwrap();
            if let Body::SessionAccept(accept) = &reply.body {
                sessions.push(accept.session_id.clone());
            }
        }
        if matches!(env.body, Body::TaskSubmit(_)) && matches!(op, Op::Submit(_) | Op::UnknownSkill(_)) {
            submits.push(env.clone());
        }
        lines.push(format!("{op:?}: {text}{taken}"));
        sent.push(env);
    }
    lines
}

#[test]
fn a_store_changes_no_answer_to_unsigned_traffic() {
    same_answers(false);
}

#[test]
fn a_store_changes_no_answer_to_signed_traffic() {
    same_answers(true);
}

fn same_answers(signed: bool) {
    let backends = Backends::start(&format!("same-{signed}"));
    run_cases(64, ops(), |n, ops| {
        let cfg = StoreConfig::new(format!("ldp:delegate:same-{signed}-{n}"));
        backends.rt.block_on(async {
            let sqlite = |name: &str| backends.sqlite(&cfg, &format!("case-{n}-{name}.db"));
            let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(cfg.clone()));
            let shared_memory: Arc<dyn Store> = Arc::new(MemoryStore::new(cfg.clone()));
            // Replicas over SQLite open one file twice, as two processes would; over Redis, a client each.
            let (file_a, file_b) = (sqlite("replicas"), sqlite("replicas"));
            let setups: Vec<(&str, Vec<DelegateRuntime>)> = vec![
                ("no store", vec![runtime(None, signed, 42)]),
                ("memory", vec![runtime(Some(memory), signed, 42)]),
                ("sqlite", vec![runtime(Some(sqlite("one")), signed, 42)]),
                ("redis", vec![runtime(Some(backends.redis(&cfg).await), signed, 42)]),
                (
                    "two replicas on memory",
                    vec![runtime(Some(shared_memory.clone()), signed, 42), runtime(Some(shared_memory), signed, 43)],
                ),
                ("two replicas on sqlite", vec![runtime(Some(file_a), signed, 42), runtime(Some(file_b), signed, 43)]),
            ];
            let mut transcripts = Vec::new();
            for (name, rts) in setups {
                transcripts.push((name, converse(&rts, &ops, signed).await));
            }
            // Redis last: the single runtime above and these two replicas use one namespace each.
            let replicas = StoreConfig::new(format!("ldp:delegate:same-{signed}-{n}-replicas"));
            let (a, b) = (backends.redis(&replicas).await, backends.redis(&replicas).await);
            let rts = vec![runtime(Some(a), signed, 42), runtime(Some(b), signed, 43)];
            transcripts.push(("two replicas on redis", converse(&rts, &ops, signed).await));
            let (_, reference) = &transcripts[0];
            for (name, lines) in &transcripts[1..] {
                if let Some(i) = (0..reference.len()).find(|&i| lines.get(i) != reference.get(i)) {
                    return Err(TestCaseError::fail(format!(
                        "step {i}: without a store {:?}, with {name} {:?}\nwithout: {reference:#?}",
                        reference[i],
                        lines.get(i)
                    )));
                }
            }
            Ok(())
        })
    });
}
