//! The three backends are one store to the runtime: random sequences of store operations (sessions created, closed
//! and looked up; replay entries, bounded and not; tasks claimed, released, read, cancelled, finished, their leases
//! renewed; sessions looked up as ended; sessions' usage: tasks counted under a limit, what finished tasks spent) get
//! the same answers from `MemoryStore` (the reference), `SqliteStore` and `RedisStore` (a real `redis-server`). In
//! [`memory_sqlite_and_redis_answer_alike`] nothing expires within a case (TTLs and leases of an hour), so the answers
//! do not depend on when each backend ran; [`expiries_and_lapsed_leases_agree`] runs the same operations in phases
//! with short TTLs and leases and a wait past them between phases, so that sessions expire and leases lapse (a task
//! then resubmitted to the other replica) at the same point of the sequence in every backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, SessionLookup, SharedSession, SharedTask, SharedTaskStatus, TaskAnswer,
    TaskClaim, TaskCost, TaskFinish, TaskStep,
};
use ldp_session::store::Store;
use ldp_store::StoreConfig;
use ldp_types::{LdpError, PayloadMode, codes};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::backends::{Backends, run_cases};

use crate::records::now_ms;

const HOUR: Duration = Duration::from_secs(3600);
/// The session TTL and lease of [`expiries_and_lapsed_leases_agree`]: a phase's operations take far less, in every
/// backend.
const SHORT: Duration = Duration::from_secs(2);
/// The wait between its phases: past a short TTL restarted at the end of a phase, written ahead by a tenth of it.
const PAST_SHORT: Duration = Duration::from_millis(2_600);
/// Session and task ids, two of them crafted to spell another's key as Redis once wrote them (session `x`'s task
/// `y}:session` and session `x}:task:y`'s record).
const SESSIONS: [&str; 3] = ["x", "x}:task:y", "s2"];
const TASKS: [&str; 3] = ["t0", "y}:session", "t2"];
const OWNERS: [&str; 2] = ["replica-a", "replica-b"];
const PRINCIPALS: [&str; 2] = ["p0", "p1"];
/// The session of each replay key's message (`None`: a message outside a session, such as HELLO).
const KEY_SESSION: [Option<usize>; 6] = [None, Some(0), Some(1), None, Some(0), Some(2)];

/// One store operation, over a small universe of ids so that operations meet each other.
#[derive(Debug, Clone)]
enum Op {
    CreateSession(usize),
    CloseSession(usize),
    /// A replay entry (principal, key), the session looked up, a task step. As the runtime's keys are, each key is
    /// one message's: of one kind (keys 0-2 unsigned traffic's dedupe entries, no bounds; keys 3-5 signed traffic's,
    /// bounded: a signed message's key is a 64-digit digest, a dedupe key 32 digits, and replicas are configured
    /// alike), and always in the same session ([`KEY_SESSION`]: the session id is part of a dedupe key, and under a
    /// message's signature).
    Admit {
        replay: Option<(usize, usize)>,
        session: Option<usize>,
        step: Option<Step>,
    },
    ClaimTask(Key, usize),
    /// Key, owner, and whether the release writes the dedupe entry of an unsigned message of the task's session
    /// (as the runtime's does for a claim that stood in for it).
    ReleaseTask(Key, usize, bool),
    /// Owner, and the end: completed with an output, or failed (retryable or not).
    FinishTask(Key, usize, End),
    RenewLeases(usize, Vec<Key>),
    ReadTask(Key),
    /// Which sessions the store holds as ended.
    EndedSessions,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Task, owner, the session's task limit, whether the usage is asked for, whether the claim stands in for the
    /// admission's replay entry when that is an unsigned message's (`TaskStep::Claim::dedupe`, as the runtime sends
    /// an unsigned TASK_SUBMIT).
    Claim(usize, usize, Option<u64>, bool, bool),
    Read(usize),
    Cancel(usize),
}

#[derive(Debug, Clone, Copy)]
enum End {
    Completed(u8),
    Failed(bool),
}

/// (session, task) indices.
type Key = (usize, usize);

fn key((session, task): Key) -> TaskKey {
    TaskKey { session_id: SESSIONS[session].into(), task_id: TASKS[task].into() }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let session = 0..SESSIONS.len();
    let task_key = (0..SESSIONS.len(), 0..TASKS.len());
    let owner = 0..OWNERS.len();
    let step = prop_oneof![
        (0..TASKS.len(), 0..OWNERS.len(), proptest::option::of(1..3_u64), any::<bool>(), any::<bool>())
            .prop_map(|(t, o, limit, usage, defer)| Step::Claim(t, o, limit, usage, defer)),
        (0..TASKS.len()).prop_map(Step::Read),
        (0..TASKS.len()).prop_map(Step::Cancel),
    ];
    let end = prop_oneof![any::<u8>().prop_map(End::Completed), any::<bool>().prop_map(End::Failed)];
    let op = prop_oneof![
        2 => session.clone().prop_map(Op::CreateSession),
        1 => session.clone().prop_map(Op::CloseSession),
        5 => (
            proptest::option::of((0..PRINCIPALS.len(), 0..KEY_SESSION.len())),
            proptest::option::of(session),
            proptest::option::of(step),
        )
            .prop_map(|(replay, session, step)| {
                let session = replay.map_or(session, |(_, k)| KEY_SESSION[k]);
                Op::Admit { replay, session, step }
            }),
        1 => (task_key.clone(), owner.clone()).prop_map(|(k, o)| Op::ClaimTask(k, o)),
        1 => (task_key.clone(), owner.clone(), any::<bool>()).prop_map(|(k, o, m)| Op::ReleaseTask(k, o, m)),
        3 => (task_key.clone(), owner.clone(), end).prop_map(|(k, o, e)| Op::FinishTask(k, o, e)),
        1 => (owner, proptest::collection::vec(task_key.clone(), 0..4)).prop_map(|(o, k)| Op::RenewLeases(o, k)),
        1 => task_key.prop_map(Op::ReadTask),
        1 => Just(Op::EndedSessions),
    ];
    proptest::collection::vec(op, 1..40)
}

/// Operations of [`expiries_and_lapsed_leases_agree`]: on two sessions' first two tasks, those that meet a session's
/// expiry or a task's lapsed lease most often (claims from either replica, reads, cancels, renewals, ends, lookups).
fn timed_ops() -> impl Strategy<Value = Vec<Op>> {
    let task_key = (0..2_usize, 0..2_usize);
    let owner = 0..OWNERS.len();
    let step = prop_oneof![
        (0..2_usize, 0..OWNERS.len(), proptest::option::of(1..3_u64), any::<bool>())
            .prop_map(|(t, o, limit, usage)| Step::Claim(t, o, limit, usage, false)),
        (0..2_usize).prop_map(Step::Read),
        (0..2_usize).prop_map(Step::Cancel),
    ];
    let end = prop_oneof![any::<u8>().prop_map(End::Completed), any::<bool>().prop_map(End::Failed)];
    let op = prop_oneof![
        2 => (0..2_usize).prop_map(Op::CreateSession),
        1 => (0..2_usize).prop_map(Op::CloseSession),
        3 => ((0..2_usize), step).prop_map(|(s, step)| Op::Admit { replay: None, session: Some(s), step: Some(step) }),
        3 => (task_key.clone(), owner.clone()).prop_map(|(k, o)| Op::ClaimTask(k, o)),
        2 => (task_key.clone(), owner.clone(), end).prop_map(|(k, o, e)| Op::FinishTask(k, o, e)),
        1 => (owner, proptest::collection::vec(task_key.clone(), 0..3)).prop_map(|(o, k)| Op::RenewLeases(o, k)),
        3 => task_key.prop_map(Op::ReadTask),
        1 => Just(Op::EndedSessions),
    ];
    proptest::collection::vec(op, 1..12)
}

/// A task record as every backend must agree on it: where the lease ends depends on each one's clock.
fn task_view(task: &SharedTask) -> String {
    let error = task.error.as_ref().map(|e| (e.code.as_str().to_owned(), e.retryable));
    let message = (&task.message_key, task.message_until_ms);
    format!("{:?} {} {:?} {:?} {:?} {message:?}", task.status, task.owner, task.mode, task.output, error)
}

fn admitted_view(admitted: &Admitted) -> String {
    let session = admitted.session.as_ref().map(|s| match s {
        SessionLookup::Live(s) => format!("live {}", s.session_id),
        other => format!("{other:?}"),
    });
    let task = admitted.task.as_ref().map(|t| match t {
        TaskAnswer::Claim(c) => format!("claim {c:?}"),
        TaskAnswer::Read(t) => format!("read {:?}", t.as_ref().map(task_view)),
        TaskAnswer::Cancel(t) => format!("cancel {:?}", t.as_ref().map(task_view)),
        other => format!("{other:?}"),
    });
    // Costs are quarters (exact in binary), so every backend's sum is the same number.
    let usage = admitted.usage.map(|u| format!("usage {} {} {:.2}", u.tasks, u.tokens, u.cost_usd));
    format!("{:?} {session:?} {task:?} {usage:?}", admitted.replay)
}

fn session(index: usize) -> SharedSession {
    session_lasting(index, HOUR)
}

/// Session `index`'s record, with a TTL of `ttl`.
fn session_lasting(index: usize, ttl: Duration) -> SharedSession {
    let mut s = serde_json::from_value::<SharedSession>(serde_json::json!({
        "session_id": SESSIONS[index], "peer": "ldp:delegate:peer", "owner": "p0", "peer_delegate": null,
        "peer_domain": "default", "mode": "text", "fallback": [], "ttl_secs": 3600,
    }))
    .unwrap();
    s.ttl_secs = ttl.as_secs();
    s
}

fn ended(owner: usize, end: End) -> SharedTask {
    let mut task = SharedTask::running(OWNERS[owner], PayloadMode::Text);
    match end {
        End::Completed(n) => {
            task.status = SharedTaskStatus::Completed;
            task.output = Some(format!("{{\"n\":{n}}}"));
            task.cost = TaskCost::new(u64::from(n), f64::from(n) * 0.25);
        }
        End::Failed(retryable) => {
            task.status = SharedTaskStatus::Failed;
            let error = LdpError::runtime(codes::EXECUTION_FAILED, "failed").with_retryable(retryable);
            task.error = Some(Box::new(error));
        }
    }
    task
}

/// Runs one operation with sessions lasting and leases holding `ttl` (an hour, or [`SHORT`]); its answer as text
/// (errors included: no backend may fail where another answers).
async fn run(store: &dyn Store, op: &Op, replay_expiry: i64, ttl: Duration) -> String {
    let out = match op {
        Op::CreateSession(s) => store.create_session(&session_lasting(*s, ttl)).await.map(|v| format!("{v}")),
        Op::CloseSession(s) => store.close_session(SESSIONS[*s]).await.map(|()| "closed".into()),
        Op::Admit { replay, session, step } => {
            let mut admission = Admission::default();
            admission.replay = replay.map(|(principal, k)| {
                let mut claim = ReplayClaim::new(PRINCIPALS[principal], format!("key-{k}"), replay_expiry);
                if k >= 3 {
                    (claim.max_per_principal, claim.max_total) = (Some(2), Some(3));
                }
                claim
            });
            admission.session_id = session.map(|s| SESSIONS[s].to_owned());
            admission.task = match (*session, *step) {
                (Some(s), Some(Step::Claim(t, o, max_tasks, usage, defer))) => {
                    let unsigned = admission.replay.as_ref().is_some_and(|c| c.max_per_principal.is_none());
                    let dedupe = if defer && unsigned { admission.replay.take() } else { None };
                    Some(TaskStep::Claim {
                        key: key((s, t)),
                        task: SharedTask::running(OWNERS[o], PayloadMode::Text).with_message(dedupe.as_ref()),
                        lease: ttl,
                        max_tasks,
                        usage,
                        dedupe,
                    })
                }
                (Some(s), Some(Step::Read(t))) => Some(TaskStep::Read(key((s, t)))),
                (Some(s), Some(Step::Cancel(t))) => Some(TaskStep::Cancel(key((s, t)))),
                _ => None,
            };
            store.admit(&admission).await.map(|a| admitted_view(&a))
        }
        Op::ClaimTask(k, o) => store
            .claim_task(&key(*k), &SharedTask::running(OWNERS[*o], PayloadMode::Text), ttl)
            .await
            .map(|c| format!("{c:?}")),
        Op::ReleaseTask(k, o, m) => {
            // An unsigned message's key is of its session (keys 0-2 are unsigned traffic's).
            let unsigned = (0..3).find(|&n| KEY_SESSION[n] == Some(k.0)).filter(|_| *m);
            let entry = unsigned.map(|n| ReplayClaim::new(PRINCIPALS[0], format!("key-{n}"), replay_expiry));
            store.release_task(&key(*k), OWNERS[*o], entry.as_ref()).await.map(|()| "released".into())
        }
        Op::FinishTask(k, o, end) => store.finish_task(&key(*k), &ended(*o, *end)).await.map(|f| match f {
            ldp_session::shared::TaskFinish::Refused(held) => format!("refused {}", task_view(&held)),
            other => format!("{other:?}"),
        }),
        Op::RenewLeases(o, keys) => {
            // Each key once, in order: the backends answer in the order asked.
            let mut keys: Vec<TaskKey> = keys.iter().map(|k| key(*k)).collect();
            keys.dedup();
            store.renew_leases(OWNERS[*o], &keys, ttl).await.map(|lost| {
                let mut lost: Vec<String> =
                    lost.iter().map(|(k, t)| format!("{}/{} {}", k.session_id, k.task_id, task_view(t))).collect();
                lost.sort();
                format!("lost {lost:?}")
            })
        }
        Op::ReadTask(k) => store.task(&key(*k)).await.map(|t| format!("{:?}", t.as_ref().map(task_view))),
        Op::EndedSessions => {
            let ids: Vec<String> = SESSIONS.iter().map(|s| (*s).to_owned()).collect();
            store.ended_sessions(&ids).await.map(|ended| format!("ended {ended:?}"))
        }
    };
    out.unwrap_or_else(|e| format!("error {e}"))
}

/// What every test here needs: a real `redis-server`, a runtime, and a scratch directory (removed on drop).
#[test]
fn memory_sqlite_and_redis_answer_alike() {
    let backends = Backends::start("agree");
    run_cases(256, ops(), |n, ops| {
        // A namespace (Redis) and a file (SQLite) per case: each starts empty.
        let cfg = StoreConfig::new(format!("ldp:delegate:agree-{n}"));
        backends.rt.block_on(async {
            let stores = backends.open(&cfg, &format!("case-{n}.db")).await;
            agree(&stores, &ops, 0, HOUR).await
        })
    });
}

/// Runs `ops` on every store, each operation on all of them before the next; `Err` at the first answer that differs
/// from the memory store's (`first` numbers the operations in the message).
async fn agree(
    stores: &[(&'static str, std::sync::Arc<dyn Store>)],
    ops: &[Op],
    first: usize,
    ttl: Duration,
) -> Result<(), TestCaseError> {
    let replay_expiry = now_ms() + 3_600_000;
    for (i, op) in ops.iter().enumerate() {
        let mut answers = Vec::new();
        for (name, store) in stores {
            answers.push((*name, run(store.as_ref(), op, replay_expiry, ttl).await));
        }
        let reference = &answers[0].1;
        for (name, answer) in &answers[1..] {
            if answer != reference {
                return Err(TestCaseError::fail(format!(
                    "operation {} {op:?}: memory answered {reference}, {name} answered {answer}",
                    first + i
                )));
            }
        }
    }
    Ok(())
}

/// The same operations with sessions and leases of [`SHORT`], in two or three phases with a wait past them between:
/// sessions live in one phase are looked up as expired in the next (admissions, ended sessions, a new session under
/// their id refused), and tasks running in one have lapsed leases in the next (a read fails them
/// `TASK_LEASE_EXPIRED`, a claim from either replica takes them over, a renewal or an end from their owner still
/// finds them running), alike in every backend. Few cases: each waits.
#[test]
fn expiries_and_lapsed_leases_agree() {
    let backends = Backends::start("agree-timed");
    let phase = proptest::collection::vec(timed_ops(), 2..=3);
    run_cases(10, phase, |n, phases| {
        let cfg = StoreConfig::new(format!("ldp:delegate:agree-timed-{n}"));
        backends.rt.block_on(async {
            let stores = backends.open(&cfg, &format!("timed-{n}.db")).await;
            let mut first = 0;
            for (i, ops) in phases.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(PAST_SHORT).await;
                }
                agree(&stores, ops, first, SHORT).await?;
                first += ops.len();
            }
            Ok(())
        })
    });
}

/// A signed message replayed under another principal's credential is refused `Seen` by every backend, and takes
/// nothing from the replaying principal's share: that principal's own messages are still admitted up to its bound,
/// and a replay stays `Seen` (not `Full`) once its share is full. (Redis used to count the refused replay against the
/// replayer's share.)
#[test]
fn a_replay_under_another_principal_takes_no_share() {
    let backends = Backends::start("replay-share");
    backends.rt.block_on(async {
        let stores = backends.open(&StoreConfig::new("ldp:delegate:replay-share"), "state.db").await;
        let expires = now_ms() + 3_600_000;
        for (name, store) in stores {
            let claim = |principal: &str, key: &str| {
                let mut claim = ReplayClaim::new(principal, key, expires);
                (claim.max_per_principal, claim.max_total) = (Some(1), Some(10));
                let mut admission = Admission::default();
                admission.replay = Some(claim);
                let store = store.clone();
                async move { store.admit(&admission).await.unwrap().replay }
            };
            use ldp_session::shared::ReplayVerdict::{Fresh, Full, Seen};
            assert_eq!(claim("p0", "k").await, Fresh, "{name}");
            assert_eq!(claim("p1", "k").await, Seen, "{name}: a replay under another credential");
            assert_eq!(claim("p1", "l").await, Fresh, "{name}: the replay took p1's share");
            assert_eq!(claim("p1", "m").await, Full, "{name}: p1's share is 1");
            assert_eq!(claim("p1", "k").await, Seen, "{name}: a replay is seen, whatever the share");
        }
    });
}

/// Session ids are the initiator's when fresh, so a peer may choose ids that spell other keys: with Redis keys
/// written `{<session>}:<kind>:<id>`, session `x}:task:y`'s record was the key of session `x`'s task `y}:session`. A
/// task finished under the one must leave the other session live and readable, in every backend.
#[test]
fn crafted_session_ids_do_not_meet_other_records() {
    let backends = Backends::start("crafted");
    backends.rt.block_on(async {
        let stores = backends.open(&StoreConfig::new("ldp:delegate:crafted"), "state.db").await;
        for (name, store) in stores {
            let mut victim = session(0);
            victim.session_id = "x}:task:y".into();
            assert!(store.create_session(&victim).await.unwrap(), "{name}");
            let crafted = TaskKey { session_id: "x".into(), task_id: "y}:session".into() };
            let running = SharedTask::running(OWNERS[0], PayloadMode::Text);
            assert_eq!(store.claim_task(&crafted, &running, HOUR).await.unwrap(), TaskClaim::Claimed, "{name}");
            let done = ended(0, End::Completed(1));
            assert_eq!(store.finish_task(&crafted, &done).await.unwrap(), TaskFinish::Recorded, "{name}");
            let mut admission = Admission::default();
            admission.session_id = Some(victim.session_id.clone());
            let looked_up = store.admit(&admission).await.unwrap().session;
            assert_eq!(looked_up, Some(SessionLookup::Live(victim)), "{name}: the session's record was overwritten");
            assert_eq!(store.task(&crafted).await.unwrap().map(|t| task_view(&t)), Some(task_view(&done)), "{name}");
        }
    });
}
