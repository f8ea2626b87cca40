//! A database file written before tasks moved to insertion order (`tasks`, keyed by session and task id) opens with
//! its tasks: their records are still read, claimed tasks still refuse a second claim, and the old table is gone. A
//! file written before unsigned dedupe entries moved to generations (`dedupe`, keyed by hex text) opens with its
//! entries: a message seen before the upgrade is still seen. A file from before sessions kept their usage and
//! principals their replay counts gets both. A file is one delegate's, its first opener's.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, ReplayClaim, ReplayVerdict, SharedTask, SharedTaskStatus, TaskAnswer, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::Store;
use ldp_store::{SqliteStore, StoreConfig};
use ldp_types::PayloadMode;

use crate::records;
use records::now_ms;

#[tokio::test]
async fn tasks_of_an_older_file_are_kept() {
    let dir = std::env::temp_dir().join(format!("ldp-store-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let mut done = SharedTask::running("replica-a", PayloadMode::Text);
    done.status = SharedTaskStatus::Completed;
    done.output = Some("\"the result\"".into());
    let running = SharedTask::running("replica-a", PayloadMode::Text);
    {
        // The table as the store first created it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE tasks (session_id TEXT NOT NULL, task_id TEXT NOT NULL, record TEXT NOT NULL,
                 expires_ms INTEGER NOT NULL, PRIMARY KEY (session_id, task_id)) WITHOUT ROWID;",
        )
        .unwrap();
        let expires = now_ms() + 3_600_000;
        for (task_id, task) in [("t-done", &done), ("t-running", &running)] {
            conn.execute(
                "INSERT INTO tasks (session_id, task_id, record, expires_ms) VALUES ('s1', ?1, ?2, ?3)",
                rusqlite::params![task_id, serde_json::to_string(task).unwrap(), expires],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    let key = |id: &str| TaskKey { session_id: "s1".into(), task_id: id.into() };
    let read = store.task(&key("t-done")).await.unwrap().expect("the completed task is kept");
    assert_eq!(read.status, SharedTaskStatus::Completed);
    assert_eq!(read.output.as_deref(), Some("\"the result\""));
    // A completed task is never claimed again.
    assert_eq!(store.claim_task(&key("t-done"), &running, Duration::from_secs(30)).await.unwrap(), TaskClaim::Taken);
    // The running one is found by its owner's finish.
    assert_eq!(store.finish_task(&key("t-running"), &done).await.unwrap(), TaskFinish::Recorded);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let old: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'tasks'", [], |r| r.get(0)).unwrap();
    assert_eq!(old, 0, "the old table is dropped once its rows are moved");
    // Opening again (nothing left to move) works.
    drop(conn);
    let again = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    assert!(again.task(&key("t-running")).await.unwrap().is_some());
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn dedupe_entries_of_an_older_file_are_kept() {
    let dir = std::env::temp_dir().join(format!("ldp-store-dedupe-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let (seen, other) = ("0123456789abcdef".repeat(2), "fedcba9876543210".repeat(2));
    let expires = now_ms() + 300_000;
    {
        // The table as the store first created it (with the tasks table of its time).
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE dedupe (key TEXT PRIMARY KEY NOT NULL, expires_ms INTEGER NOT NULL) WITHOUT ROWID;
             CREATE INDEX dedupe_expiry ON dedupe (expires_ms);
             CREATE TABLE tasks (session_id TEXT NOT NULL, task_id TEXT NOT NULL, record TEXT NOT NULL,
                 expires_ms INTEGER NOT NULL, PRIMARY KEY (session_id, task_id)) WITHOUT ROWID;",
        )
        .unwrap();
        conn.execute("INSERT INTO dedupe (key, expires_ms) VALUES (?1, ?2)", rusqlite::params![seen, expires]).unwrap();
    }
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    let claim = |key: &str| {
        let mut admission = Admission::default();
        admission.replay = Some(ReplayClaim::new("peer", key, now_ms() + 300_000));
        admission
    };
    assert_eq!(store.admit(&claim(&seen)).await.unwrap().replay, ReplayVerdict::Seen, "seen before the upgrade");
    assert_eq!(store.admit(&claim(&other)).await.unwrap().replay, ReplayVerdict::Fresh);
    assert_eq!(store.admit(&claim(&other)).await.unwrap().replay, ReplayVerdict::Seen);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let old: i64 =
        conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'dedupe'", [], |r| r.get(0)).unwrap();
    assert_eq!(old, 0, "the old table is dropped once its entries are moved");
    drop(conn);
    let again = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    assert_eq!(again.admit(&claim(&seen)).await.unwrap().replay, ReplayVerdict::Seen, "and after another open");
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file is one delegate's: its first opener's (a file from before this rule included), which every replica of
/// that delegate opens again; another delegate is refused at open, naming both, rather than sharing sessions, task
/// ids and the replay window with it (Redis keeps delegates apart by their keys' prefix instead).
#[tokio::test]
async fn a_file_is_one_delegates() {
    let dir = std::env::temp_dir().join(format!("ldp-store-delegate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    {
        // A file from before: the store's tables without the delegate's name.
        let older = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:alpha")).unwrap();
        drop(older);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE delegate;").unwrap();
    }
    let alpha = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:alpha")).unwrap();
    let again = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:alpha")).unwrap();
    let Err(refused) = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:beta")) else {
        panic!("another delegate opened the file");
    };
    let refused = refused.to_string();
    assert!(refused.contains("ldp:delegate:alpha") && refused.contains("ldp:delegate:beta"), "{refused}");
    // The replicas of alpha share the file as before.
    let key = TaskKey { session_id: "s".into(), task_id: "t".into() };
    let task = SharedTask::running("replica-a", PayloadMode::Text);
    assert_eq!(alpha.claim_task(&key, &task, Duration::from_secs(60)).await.unwrap(), TaskClaim::Claimed);
    assert_ne!(again.claim_task(&key, &task, Duration::from_secs(60)).await.unwrap(), TaskClaim::Claimed);
    drop((alpha, again));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of the layout before sessions kept their usage and principals their replay counts: its sessions get usage
/// columns (at 0) and its replay entries are counted per principal once, at open, so a principal holding entries
/// from before the upgrade is at its share after it, and a session's task limit counts from the upgrade.
#[tokio::test]
async fn sessions_and_replay_entries_of_the_previous_layout_are_counted() {
    let dir = std::env::temp_dir().join(format!("ldp-store-usage-migration-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let expires = now_ms() + 300_000;
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE replay (key TEXT PRIMARY KEY NOT NULL, principal TEXT NOT NULL, expires_ms INTEGER NOT NULL)
                 WITHOUT ROWID;
             CREATE INDEX replay_principal ON replay (principal, expires_ms);
             CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, record TEXT, expires_ms INTEGER NOT NULL)
                 WITHOUT ROWID;",
        )
        .unwrap();
        for key in ["k1", "k2"] {
            conn.execute("INSERT INTO replay VALUES (?1, 'p', ?2)", rusqlite::params![key, expires]).unwrap();
        }
        let record = serde_json::json!({
            "session_id": "s", "peer": "ldp:delegate:client", "owner": null, "peer_delegate": null,
            "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": 600,
        });
        conn.execute("INSERT INTO sessions VALUES ('s', ?1, ?2)", rusqlite::params![record.to_string(), expires])
            .unwrap();
    }
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    let key = |id: &str| TaskKey { session_id: "s".into(), task_id: id.into() };
    let signed = |key: &str| {
        let mut claim = ReplayClaim::new("p", key, now_ms() + 300_000);
        (claim.max_per_principal, claim.max_total) = (Some(2), Some(100));
        let mut admission = Admission::default();
        admission.replay = Some(claim);
        admission
    };
    assert_eq!(store.admit(&signed("k1")).await.unwrap().replay, ReplayVerdict::Seen);
    assert_eq!(store.admit(&signed("k3")).await.unwrap().replay, ReplayVerdict::Full, "p's two entries from before");
    let mut submit = Admission::default();
    submit.session_id = Some("s".to_owned());
    submit.task = Some(TaskStep::Claim {
        key: key("t-new"),
        task: SharedTask::running("replica-a", PayloadMode::Text),
        lease: Duration::from_secs(30),
        max_tasks: Some(1),
        usage: true,
        dedupe: None,
    });
    let admitted = store.admit(&submit).await.unwrap();
    assert_eq!(admitted.usage.map(|u| u.tasks), Some(0));
    assert_eq!(admitted.task, Some(TaskAnswer::Claim(TaskClaim::Claimed)));
    drop(store);
    // Opening again counts nothing twice.
    let again = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    assert_eq!(again.admit(&signed("k3")).await.unwrap().replay, ReplayVerdict::Full);
    submit.task = Some(TaskStep::Claim {
        key: key("t-other"),
        task: SharedTask::running("replica-a", PayloadMode::Text),
        lease: Duration::from_secs(30),
        max_tasks: Some(1),
        usage: true,
        dedupe: None,
    });
    assert_eq!(again.admit(&submit).await.unwrap().task, Some(TaskAnswer::Claim(TaskClaim::LimitReached)));
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file from before task rows kept their claiming message's dedupe entry (`message_key`, `message_until_ms`) gets
/// both columns, empty for the tasks it holds, which read as before; a new unsigned submission's claim then stands in
/// for its entry.
#[tokio::test]
async fn task_rows_of_the_previous_layout_get_the_claiming_message() {
    let dir = std::env::temp_dir().join(format!("ldp-store-message-migration-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let expires = now_ms() + 300_000;
    let mut done = SharedTask::running("replica-a", PayloadMode::Text);
    done.status = SharedTaskStatus::Completed;
    done.output = Some("{\"n\":1}".into());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE task_rows (row INTEGER PRIMARY KEY, session_id TEXT NOT NULL, task_id TEXT NOT NULL,
                 record TEXT NOT NULL, expires_ms INTEGER NOT NULL);
             CREATE UNIQUE INDEX task_rows_key ON task_rows (session_id, task_id);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO task_rows (session_id, task_id, record, expires_ms) VALUES ('s', 't-old', ?1, ?2)",
            rusqlite::params![serde_json::to_string(&done).unwrap(), expires],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:migration")).unwrap();
    let key = |id: &str| TaskKey { session_id: "s".into(), task_id: id.into() };
    let old = store.task(&key("t-old")).await.unwrap().unwrap();
    assert_eq!(
        (old.status, old.output.as_deref(), old.message_key),
        (SharedTaskStatus::Completed, Some("{\"n\":1}"), None)
    );
    assert!(store.create_session(&records::session("s")).await.unwrap());
    let entry = ReplayClaim::new("peer", format!("{:032x}", 9), expires);
    let mut submit = Admission::default();
    submit.session_id = Some("s".to_owned());
    submit.task = Some(TaskStep::Claim {
        key: key("t-new"),
        task: SharedTask::running("replica-a", PayloadMode::Text).with_message(Some(&entry)),
        lease: Duration::from_secs(30),
        max_tasks: None,
        usage: false,
        dedupe: Some(entry.clone()),
    });
    assert_eq!(store.admit(&submit).await.unwrap().task, Some(TaskAnswer::Claim(TaskClaim::Claimed)));
    assert_eq!(store.admit(&submit).await.unwrap().replay, ReplayVerdict::Seen);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
