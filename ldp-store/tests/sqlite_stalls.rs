//! A stalled SQLite writer (here: another process's connection holding the file's write lock) neither applies
//! operations its callers gave up on nor queues without bound:
//!
//! - an admission whose caller timed out (the runtime then refuses the message, retryably) is not applied once the
//!   writer gets to it, so the peer's retry is fresh: not refused `REPLAY_DETECTED`, its task not `DUPLICATE_TASK`;
//! - a result (`finish_task`) whose caller timed out is still recorded: what the delegate produced is not lost;
//! - past `MAX_QUEUED` waiting operations, a call is refused at once, typed and retryable, instead of queueing.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, ReplayClaim, ReplayVerdict, SessionLookup, SharedTask, SharedTaskStatus, TaskAnswer, TaskClaim, TaskStep,
};
use ldp_session::store::{Store, StoreError};
use ldp_store::{MAX_QUEUED, SqliteStore, StoreConfig};
use ldp_types::PayloadMode;

use crate::records::{now_ms, session};

fn key(task_id: &str) -> TaskKey {
    TaskKey { session_id: "s".to_owned(), task_id: task_id.to_owned() }
}

/// A TASK_SUBMIT's admission in session `s`: its dedupe entry `message`, and the claim of `task_id`.
fn submit(message: &str, task_id: &str) -> Admission {
    let mut admission = Admission::default();
    admission.replay = Some(ReplayClaim::new("peer", message, now_ms() + 60_000));
    admission.session_id = Some("s".to_owned());
    admission.task = Some(TaskStep::Claim {
        key: key(task_id),
        task: SharedTask::running("replica-a", PayloadMode::Text),
        lease: Duration::from_secs(30),
        max_tasks: None,
        usage: false,
        dedupe: None,
    });
    admission
}

/// A store on a fresh file with session `s`, and a second connection to the file that can hold its write lock.
fn scratch(name: &str) -> (std::path::PathBuf, SqliteStore, rusqlite::Connection) {
    let dir = std::env::temp_dir().join(format!("ldp-store-stalls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:stalls")).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    (dir, store, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_caller_gave_up_on_is_not_applied_later_but_results_are() {
    let (dir, store, lock) = scratch("abandoned");
    assert!(store.create_session(&session("s")).await.unwrap());
    let running = SharedTask::running("replica-a", PayloadMode::Text);
    assert_eq!(store.claim_task(&key("done"), &running, Duration::from_secs(30)).await.unwrap(), TaskClaim::Claimed);

    // The writer stalls behind another connection's write transaction (its busy timeout is 5 s).
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(300), store.admit(&submit("m-1", "t-1"))).await;
    assert!(gave_up.is_err(), "the admission was answered while the file was locked");
    let mut finished = SharedTask::running("replica-a", PayloadMode::Text);
    finished.status = SharedTaskStatus::Completed;
    finished.output = Some("{\"ok\":true}".to_owned());
    let result = tokio::time::timeout(Duration::from_millis(300), store.finish_task(&key("done"), &finished)).await;
    assert!(result.is_err(), "the result was answered while the file was locked");
    tokio::time::sleep(Duration::from_millis(500)).await;
    lock.execute_batch("COMMIT").unwrap();

    // The retry of the refused message is fresh, and its task is claimed by it.
    let retried = store.admit(&submit("m-1", "t-1")).await.unwrap();
    assert_eq!(retried.replay, ReplayVerdict::Fresh, "the abandoned admission was applied after its caller gave up");
    assert!(matches!(retried.session, Some(SessionLookup::Live(_))));
    assert_eq!(retried.task, Some(TaskAnswer::Claim(TaskClaim::Claimed)));
    // The result its caller stopped waiting for was recorded all the same.
    let done = store.task(&key("done")).await.unwrap().unwrap();
    assert_eq!((done.status, done.output.as_deref()), (SharedTaskStatus::Completed, Some("{\"ok\":true}")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_writer_refuses_calls_past_its_queue_at_once() {
    let (dir, store, lock) = scratch("queue");
    assert!(store.create_session(&session("s")).await.unwrap());
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    // The writer holds at most one batch while it waits for the lock; the queue holds `MAX_QUEUED` more.
    for i in 0..MAX_QUEUED + 2 * ldp_store::MAX_BATCH {
        let store = store.clone();
        calls.spawn(async move {
            let admission = submit(&format!("q-{i}"), &format!("t-{i}"));
            tokio::time::timeout(Duration::from_millis(1500), store.admit(&admission)).await
        });
    }
    let mut refused = 0;
    while let Some(outcome) = calls.join_next().await {
        match outcome.unwrap() {
            Ok(Err(StoreError::Unavailable { reason, .. })) => {
                assert!(reason.contains("waiting for the SQLite writer"), "{reason}");
                refused += 1;
            }
            Ok(other) => panic!("answered while the file was locked: {other:?}"),
            Err(_) => {}
        }
    }
    assert!(refused >= ldp_store::MAX_BATCH, "only {refused} calls were refused past the queue's bound");
    assert!(started.elapsed() < Duration::from_secs(4), "the calls waited for the writer: {:?}", started.elapsed());
    let refusal = StoreError::Unavailable { backend: "sqlite", reason: String::new() }.to_ldp();
    assert!(refusal.retryable);
    lock.execute_batch("COMMIT").unwrap();
    // The writer comes back, skips what its callers gave up on, and serves new calls (retried while the queue
    // drains, as a peer retries a retryable refusal).
    let deadline = Instant::now() + Duration::from_secs(5);
    let fresh = loop {
        match store.admit(&submit("after", "t-after")).await {
            Ok(admitted) => break admitted,
            Err(e) => assert!(Instant::now() < deadline, "not served after the lock went: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(fresh.replay, ReplayVerdict::Fresh);
    let _ = std::fs::remove_dir_all(&dir);
}
