//! An unsigned TASK_SUBMIT's claim stands in for its dedupe entry (`TaskStep::Claim`'s `dedupe`), on every backend:
//! a claim made writes no entry, since the task's record keeps the message's key; the same message is then `Seen`
//! before anything else runs while its window lasts (also once the task has ended and its session is closed), and
//! not after; an admission that makes no claim writes the entry. SQLite's dedupe tables and Redis's keyspace show
//! what was written.
#![cfg(all(feature = "sqlite", feature = "redis"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SharedTask, SharedTaskStatus, TaskAnswer,
    TaskClaim, TaskStep,
};
use ldp_session::store::Store;
use ldp_store::StoreConfig;
use ldp_types::PayloadMode;

use crate::backends::Backends;

use crate::records::{now_ms, session};

/// An unsigned message's dedupe entry, as the machine makes it: 32 hex digits, kept `window` from now.
fn entry(n: u8, window: Duration) -> ReplayClaim {
    ReplayClaim::new("peer", format!("{n:032x}"), now_ms() + i64::try_from(window.as_millis()).unwrap())
}

/// The admission of a TASK_SUBMIT of task `task` in session `sid` whose claim stands in for its `dedupe` entry.
fn submit(sid: &str, task: &str, owner: &str, dedupe: &ReplayClaim) -> Admission {
    let mut admission = Admission::default();
    admission.session_id = Some(sid.to_owned());
    admission.task = Some(TaskStep::Claim {
        key: TaskKey { session_id: sid.to_owned(), task_id: task.to_owned() },
        task: SharedTask::running(owner, PayloadMode::Text).with_message(Some(dedupe)),
        lease: Duration::from_secs(60),
        max_tasks: None,
        usage: false,
        dedupe: Some(dedupe.clone()),
    });
    admission
}

fn claim(admitted: &Admitted) -> Option<&TaskClaim> {
    match &admitted.task {
        Some(TaskAnswer::Claim(claim)) => Some(claim),
        _ => None,
    }
}

/// How many dedupe entries each backend holds, where it can be read from outside: SQLite's two generation tables,
/// Redis's replay keys of the namespace. `None` for the memory store.
async fn entries(name: &str, backends: &Backends, file: &str, namespace: &str) -> Option<i64> {
    match name {
        "sqlite" => {
            let conn = rusqlite::Connection::open(backends.dir.join(file)).unwrap();
            let count = |table: &str| -> i64 {
                conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).unwrap()
            };
            Some(count("dedupe_0") + count("dedupe_1"))
        }
        "redis" => {
            let client = redis::Client::open(backends.redis.url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> =
                redis::cmd("KEYS").arg(format!("ldp:{namespace}:*replay*")).query_async(&mut conn).await.unwrap();
            Some(i64::try_from(keys.len()).unwrap())
        }
        _ => None,
    }
}

#[test]
fn a_claim_made_stands_for_the_dedupe_entry_and_one_not_made_writes_it() {
    let backends = Backends::start("unsigned-dedupe");
    backends.rt.block_on(async {
        let namespace = "ldp:delegate:dedupe";
        let cfg = StoreConfig::new(namespace);
        for (name, store) in backends.open(&cfg, "dedupe.db").await {
            let sid = format!("s-{name}");
            assert!(store.create_session(&session(&sid)).await.unwrap());
            let first = entry(1, Duration::from_secs(600));

            // Claimed: no entry written, and the same message is a replay on any replica.
            let admitted = store.admit(&submit(&sid, "t1", "replica-a", &first)).await.unwrap();
            assert_eq!(
                (admitted.replay, claim(&admitted)),
                (ReplayVerdict::Fresh, Some(&TaskClaim::Claimed)),
                "{name}"
            );
            assert_eq!(entries(name, &backends, "dedupe.db", namespace).await.unwrap_or(0), 0, "{name}: an entry");
            let again = store.admit(&submit(&sid, "t1", "replica-b", &first)).await.unwrap();
            assert_eq!((again.replay, again.session.is_none()), (ReplayVerdict::Seen, true), "{name}");

            // Another message for the same task: not a replay, the task is taken.
            let other = entry(2, Duration::from_secs(600));
            let taken = store.admit(&submit(&sid, "t1", "replica-b", &other)).await.unwrap();
            assert_eq!((taken.replay, claim(&taken)), (ReplayVerdict::Fresh, Some(&TaskClaim::Taken)), "{name}");
            // No claim made: that message's entry is written, and it is a replay from then on.
            assert_eq!(entries(name, &backends, "dedupe.db", namespace).await.unwrap_or(1), 1, "{name}");
            let taken_again = store.admit(&submit(&sid, "t1", "replica-a", &other)).await.unwrap();
            assert_eq!(taken_again.replay, ReplayVerdict::Seen, "{name}");

            // The task ends, its session closes: the record still stands for the first message's entry.
            let key = TaskKey { session_id: sid.clone(), task_id: "t1".into() };
            let mut done = SharedTask::running("replica-a", PayloadMode::Text);
            done.status = SharedTaskStatus::Completed;
            done.output = Some("{}".into());
            store.finish_task(&key, &done).await.unwrap();
            let ended = store.task(&key).await.unwrap().unwrap();
            assert_eq!(ended.message_key.as_deref(), Some(first.key.as_str()), "{name}: the end lost the key");
            store.close_session(&sid).await.unwrap();
            let after_close = store.admit(&submit(&sid, "t1", "replica-b", &first)).await.unwrap();
            assert_eq!(after_close.replay, ReplayVerdict::Seen, "{name}");

            // A message whose session is closed makes no claim: its entry is written.
            let late = entry(3, Duration::from_secs(600));
            let closed = store.admit(&submit(&sid, "t3", "replica-a", &late)).await.unwrap();
            assert_eq!(closed.session, Some(SessionLookup::Closed), "{name}");
            assert_eq!(store.admit(&submit(&sid, "t3", "replica-b", &late)).await.unwrap().replay, ReplayVerdict::Seen);
        }
    });
}

/// A message its task's record stands for is a replay wherever the admission would otherwise end: at the session's
/// task limit (not `LimitReached`), and with its session closed (not a closed session's answer). A replay changes
/// nothing: SQLite's session row keeps its expiry, where the message, were it fresh, would restart the TTL.
#[test]
fn a_message_its_record_holds_is_a_replay_at_the_task_limit_and_changes_nothing() {
    let backends = Backends::start("unsigned-dedupe-limit");
    backends.rt.block_on(async {
        let cfg = StoreConfig::new("ldp:delegate:dedupe-limit");
        for (name, store) in backends.open(&cfg, "limit.db").await {
            let sid = format!("l-{name}");
            let mut record = session(&sid);
            // A TTL of a second: SQLite writes a live session's expiry a tenth of it ahead, so 150 ms on, a fresh
            // message would rewrite it.
            record.ttl_secs = 1;
            assert!(store.create_session(&record).await.unwrap());
            let limited = |dedupe: &ReplayClaim, task: &str| {
                let mut admission = submit(&sid, task, "replica-a", dedupe);
                if let Some(TaskStep::Claim { max_tasks, .. }) = &mut admission.task {
                    *max_tasks = Some(1);
                }
                admission
            };
            let message = entry(31, Duration::from_secs(600));
            let first = store.admit(&limited(&message, "t1")).await.unwrap();
            assert_eq!(claim(&first), Some(&TaskClaim::Claimed), "{name}");
            tokio::time::sleep(Duration::from_millis(150)).await;
            let expiry = || -> Option<i64> {
                (name == "sqlite").then(|| {
                    let conn = rusqlite::Connection::open(backends.dir.join("limit.db")).unwrap();
                    conn.query_row("SELECT expires_ms FROM sessions WHERE id = ?1", [&sid], |r| r.get(0)).unwrap()
                })
            };
            let before = expiry();
            let again = store.admit(&limited(&message, "t1")).await.unwrap();
            assert_eq!((again.replay, claim(&again)), (ReplayVerdict::Seen, None), "{name}: at the task limit");
            assert_eq!(expiry(), before, "{name}: a replay restarted the session's TTL");
            // Another message at the limit is refused so, and its entry written.
            let other = entry(32, Duration::from_secs(600));
            let over = store.admit(&limited(&other, "t2")).await.unwrap();
            assert_eq!((over.replay, claim(&over)), (ReplayVerdict::Fresh, Some(&TaskClaim::LimitReached)), "{name}");
            assert_eq!(store.admit(&limited(&other, "t2")).await.unwrap().replay, ReplayVerdict::Seen, "{name}");
            assert!(name != "sqlite" || expiry() > before, "{name}: a fresh message left the session's TTL as it was");
        }
    });
}

#[test]
fn the_record_stands_for_the_entry_only_while_its_window_lasts() {
    let backends = Backends::start("unsigned-dedupe-window");
    backends.rt.block_on(async {
        let cfg = StoreConfig::new("ldp:delegate:dedupe-window");
        let stores: Vec<(&str, Arc<dyn Store>)> = backends.open(&cfg, "window.db").await;
        for (name, store) in stores {
            let sid = format!("w-{name}");
            assert!(store.create_session(&session(&sid)).await.unwrap());
            let short = entry(7, Duration::from_millis(1_000));
            let admitted = store.admit(&submit(&sid, "t1", "replica-a", &short)).await.unwrap();
            assert_eq!(claim(&admitted), Some(&TaskClaim::Claimed), "{name}");
            assert_eq!(
                store.admit(&submit(&sid, "t1", "replica-b", &short)).await.unwrap().replay,
                ReplayVerdict::Seen
            );
            tokio::time::sleep(Duration::from_millis(1_200)).await;
            // Past the window the message is no replay, as its entry would have expired: the task is held, though.
            let late = store.admit(&submit(&sid, "t1", "replica-b", &short)).await.unwrap();
            assert_eq!((late.replay, claim(&late)), (ReplayVerdict::Fresh, Some(&TaskClaim::Taken)), "{name}");
        }
    });
}

/// A record stands for its message's entry only while the record lives: a failed task submitted again under a new
/// message keeps the first message a replay (its entry is written as the record is replaced), a result TTL shorter
/// than the dedupe window keeps the message a replay past the record (its entry is written with the claim), and a
/// claim given back writes the entry in the same step.
#[test]
fn the_entry_outlives_the_record_that_stood_for_it() {
    let backends = Backends::start("unsigned-dedupe-outlives");
    backends.rt.block_on(async {
        let mut cfg = StoreConfig::new("ldp:delegate:dedupe-outlives");
        for (name, store) in backends.open(&cfg, "outlives.db").await {
            let sid = format!("o-{name}");
            assert!(store.create_session(&session(&sid)).await.unwrap());
            let key = TaskKey { session_id: sid.clone(), task_id: "t1".into() };

            // Submitted, failed, submitted again under another message: the first is still a replay.
            let (first, second) = (entry(11, Duration::from_secs(600)), entry(12, Duration::from_secs(600)));
            assert_eq!(
                claim(&store.admit(&submit(&sid, "t1", "replica-a", &first)).await.unwrap()),
                Some(&TaskClaim::Claimed)
            );
            let mut failed = SharedTask::running("replica-a", PayloadMode::Text);
            failed.status = SharedTaskStatus::Failed;
            failed.error = Some(Box::new(ldp_types::LdpError::runtime("EXECUTION_FAILED", "failed")));
            store.finish_task(&key, &failed).await.unwrap();
            let again = store.admit(&submit(&sid, "t1", "replica-b", &second)).await.unwrap();
            assert_eq!(claim(&again), Some(&TaskClaim::Claimed), "{name}: a failed task is claimable");
            let stale = store.admit(&submit(&sid, "t1", "replica-a", &first)).await.unwrap();
            assert_eq!(stale.replay, ReplayVerdict::Seen, "{name}: the first message ran again");

            // A claim given back with its entry: the message stays a replay.
            let refused = entry(13, Duration::from_secs(600));
            let claimed = store.admit(&submit(&sid, "t2", "replica-a", &refused)).await.unwrap();
            assert_eq!(claim(&claimed), Some(&TaskClaim::Claimed));
            let t2 = TaskKey { session_id: sid.clone(), task_id: "t2".into() };
            store.release_task(&t2, "replica-a", Some(&refused)).await.unwrap();
            assert!(store.task(&t2).await.unwrap().is_none(), "{name}: the claim was not given back");
            let resent = store.admit(&submit(&sid, "t2", "replica-b", &refused)).await.unwrap();
            assert_eq!(resent.replay, ReplayVerdict::Seen, "{name}: a refused message ran on another replica");
        }

        // Results kept 300 ms, the dedupe window 10 s: the message stays a replay once its record is gone.
        cfg.namespace = "ldp:delegate:dedupe-short".into();
        cfg.result_ttl = Duration::from_millis(300);
        for (name, store) in backends.open(&cfg, "short.db").await {
            let sid = format!("short-{name}");
            assert!(store.create_session(&session(&sid)).await.unwrap());
            let message = entry(21, Duration::from_secs(10));
            assert_eq!(
                claim(&store.admit(&submit(&sid, "t1", "replica-a", &message)).await.unwrap()),
                Some(&TaskClaim::Claimed)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            let key = TaskKey { session_id: sid.clone(), task_id: "t1".into() };
            assert!(store.task(&key).await.unwrap().is_none(), "{name}: the record outlived its TTL");
            let late = store.admit(&submit(&sid, "t1", "replica-b", &message)).await.unwrap();
            assert_eq!(late.replay, ReplayVerdict::Seen, "{name}: the task ran twice");
        }
    });
}
