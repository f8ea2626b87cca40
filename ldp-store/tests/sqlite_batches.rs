//! The SQLite writer commits the operations waiting together, without a savepoint each; one that fails sends the
//! batch round again with a savepoint per operation. Whatever the batching, a failed operation must leave nothing
//! behind (not even the writes it made before failing) and must not take the others with it.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, ReplayClaim, ReplayVerdict, SessionLookup, SharedTask, TaskAnswer, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::Store;
use ldp_store::{SqliteStore, StoreConfig};
use ldp_types::PayloadMode;

use crate::records::{now_ms, session};

/// A TASK_SUBMIT's admission: its dedupe entry, its session, its task's claim.
fn submit(session_id: &str, message: &str, task_id: &str) -> Admission {
    let mut admission = Admission::default();
    admission.replay = Some(ReplayClaim::new("peer", message, now_ms() + 60_000));
    admission.session_id = Some(session_id.to_owned());
    admission.task = Some(TaskStep::Claim {
        key: key(session_id, task_id),
        task: SharedTask::running("replica-a", PayloadMode::Text),
        lease: Duration::from_secs(30),
        max_tasks: None,
        usage: false,
        dedupe: None,
    });
    admission
}

fn key(session_id: &str, task_id: &str) -> TaskKey {
    TaskKey { session_id: session_id.to_owned(), task_id: task_id.to_owned() }
}

/// A fresh store in a directory of its own, and a connection of the test's own to the same file.
fn scratch(name: &str) -> (std::path::PathBuf, SqliteStore, rusqlite::Connection) {
    let dir = std::env::temp_dir().join(format!("ldp-store-batches-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:batches")).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    (dir, store, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_operation_leaves_nothing_and_takes_no_other_with_it() {
    let (dir, store, conn) = scratch("failed");
    assert!(store.create_session(&session("good")).await.unwrap());
    // A session whose record cannot be read: an admission on it fails after it has written its dedupe entry.
    conn.execute(
        "INSERT INTO sessions (id, record, expires_ms) VALUES ('broken', 'not a record', ?1)",
        [now_ms() + 600_000],
    )
    .unwrap();

    for round in 0..20 {
        // Many admissions at once, the failing one among them, so that batches mix them.
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..40 {
            let (store, broken) = (store.clone(), i == 20);
            calls.spawn(async move {
                let admission = if broken {
                    submit("broken", &format!("{round:02}{:030x}", 0xbad), &format!("t-broken-{round}"))
                } else {
                    submit("good", &format!("{round:02}{i:030x}"), &format!("t-{round}-{i}"))
                };
                (broken, store.admit(&admission).await)
            });
        }
        while let Some(joined) = calls.join_next().await {
            match joined.unwrap() {
                (true, outcome) => assert!(outcome.is_err(), "an unreadable session record is an error: {outcome:?}"),
                (false, outcome) => {
                    let admitted = outcome.unwrap();
                    assert_eq!(admitted.replay, ReplayVerdict::Fresh);
                    assert!(matches!(admitted.session, Some(SessionLookup::Live(_))));
                    assert_eq!(admitted.task, Some(TaskAnswer::Claim(TaskClaim::Claimed)));
                }
            }
        }
        // The failed admission's dedupe entry and claim are gone with it: the same message is new, its task unknown.
        assert_eq!(store.task(&key("broken", &format!("t-broken-{round}"))).await.unwrap(), None);
        let mut again = Admission::default();
        again.replay = Some(ReplayClaim::new("peer", format!("{round:02}{:030x}", 0xbad), now_ms() + 60_000));
        assert_eq!(store.admit(&again).await.unwrap().replay, ReplayVerdict::Fresh, "round {round}");
        // Every other one committed.
        for i in (0..40).filter(|i| *i != 20) {
            let task = store.task(&key("good", &format!("t-{round}-{i}"))).await.unwrap();
            assert!(task.is_some(), "round {round}: task {i} was claimed, so it is stored");
        }
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A task record that cannot be read is answered as such (`Corrupt`, not a store failure), by a result's one-statement
/// path too, and is left as it was.
#[tokio::test]
async fn a_result_for_an_unreadable_task_record_is_corrupt() {
    let (dir, store, conn) = scratch("corrupt");
    for (task_id, record) in [("t-text", "not json"), ("t-json", "{\"status\":\"running\"}")] {
        conn.execute(
            "INSERT INTO task_rows (session_id, task_id, record, expires_ms) VALUES ('s', ?1, ?2, ?3)",
            rusqlite::params![task_id, record, now_ms() + 600_000],
        )
        .unwrap();
        let result = SharedTask::running("replica-a", PayloadMode::Text).cancelled();
        let outcome = store.finish_task(&key("s", task_id), &result).await;
        assert!(matches!(outcome, Err(ldp_session::store::StoreError::Corrupt { .. })), "{task_id}: {outcome:?}");
        let kept: String =
            conn.query_row("SELECT record FROM task_rows WHERE task_id = ?1", [task_id], |r| r.get(0)).unwrap();
        assert_eq!(kept, record);
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the memory map off (`sqlite_mmap_bytes = 0`, the 64 MiB page cache) or on, a claimed and finished task is
/// read back, after a reopen too.
#[tokio::test]
async fn tasks_are_read_back_with_and_without_the_memory_map() {
    for mmap in [0, 1 << 30] {
        let (dir, store, _conn) = scratch(&format!("mmap-{mmap}"));
        let path = dir.join("state.db");
        let mut cfg = StoreConfig::new("ldp:delegate:batches");
        cfg.sqlite_mmap_bytes = mmap;
        drop(store);
        let store = SqliteStore::open(&path, cfg.clone()).unwrap();
        let task = SharedTask::running("replica-a", PayloadMode::Text);
        let claimed = store.claim_task(&key("s", "t"), &task, Duration::from_secs(30)).await.unwrap();
        assert_eq!(claimed, TaskClaim::Claimed);
        let ended = task.cancelled();
        assert_eq!(store.finish_task(&key("s", "t"), &ended).await.unwrap(), TaskFinish::Recorded);
        drop(store);
        let store = SqliteStore::open(&path, cfg).unwrap();
        assert_eq!(store.task(&key("s", "t")).await.unwrap(), Some(ended), "mmap {mmap}");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
