//! Bounded task records, in an SQLite file (`StoreConfig::sqlite_max_bytes`) and in the in-process store
//! (`StoreConfig::memory_max_bytes`): tasks submitted past the bound still run, and the records stay within it,
//! because the oldest ended tasks' records go before their TTL — never a running task's, and never the dedupe entry
//! an unsigned message's record kept. With nothing it may drop, a claim at the bound is refused, retryably, and
//! accepted again once tasks end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::records::{now_ms, session};

use std::sync::Arc;
use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, ReplayClaim, ReplayVerdict, SharedTask, SharedTaskStatus, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::{Store, StoreError};
use ldp_store::{MemoryStore, StoreConfig};
use ldp_types::PayloadMode;

const MIB: u64 = 1 << 20;

/// A store whose records are bounded, and how much of its bound it uses.
struct Bounded {
    store: Arc<dyn Store>,
    held: Box<dyn Fn() -> u64>,
    /// Removed at the end (an SQLite file's directory).
    scratch: Option<std::path::PathBuf>,
}

impl Bounded {
    /// A store of `backend` (`memory` or `sqlite`) bounded to `max_bytes`.
    fn open(backend: &str, max_bytes: u64) -> Self {
        let mut cfg = StoreConfig::new("ldp:delegate:bound");
        match backend {
            "memory" => {
                cfg.memory_max_bytes = max_bytes;
                let store = Arc::new(MemoryStore::new(cfg));
                let held = store.clone();
                Self { store, held: Box::new(move || held.task_record_bytes()), scratch: None }
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let (dir, path) = crate::scratch::scratch(&format!("bound-{max_bytes}"));
                cfg.sqlite_max_bytes = max_bytes;
                let store = Arc::new(ldp_store::SqliteStore::open(&path, cfg).unwrap());
                Self { store, held: Box::new(move || file_bytes(&path)), scratch: Some(dir) }
            }
            other => panic!("no bounded backend {other}"),
        }
    }

    /// What the store holds against its bound: the task records' bytes, or the database file's.
    fn held(&self) -> u64 {
        (self.held)()
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub(crate) fn key(task: &str) -> TaskKey {
    TaskKey { session_id: "s".into(), task_id: task.into() }
}

pub(crate) fn running() -> SharedTask {
    SharedTask::running("replica-a", PayloadMode::Text)
}

/// `task`'s record once it completed with `output`.
pub(crate) fn completed(output: &str) -> SharedTask {
    let mut done = running();
    done.status = SharedTaskStatus::Completed;
    done.output = Some(serde_json::to_string(output).unwrap());
    done
}

/// Claims `task` and records it completed with `output`.
async fn run(store: &dyn Store, task: &str, output: &str) {
    let claim = store.claim_task(&key(task), &running(), Duration::from_secs(60)).await.unwrap();
    assert_eq!(claim, TaskClaim::Claimed, "{task}");
    assert_eq!(store.finish_task(&key(task), &completed(output)).await.unwrap(), TaskFinish::Recorded, "{task}");
}

/// The admission of an unsigned TASK_SUBMIT of `task` whose claim stands in for its dedupe entry `entry`.
pub(crate) fn unsigned_submit(task: &str, entry: &ReplayClaim) -> Admission {
    let mut admission = Admission::default();
    admission.session_id = Some("s".to_owned());
    admission.task = Some(TaskStep::Claim {
        key: key(task),
        task: running().with_message(Some(entry)),
        lease: Duration::from_secs(60),
        max_tasks: None,
        usage: false,
        dedupe: Some(entry.clone()),
    });
    admission
}

/// The database file's pages and their size, read on a connection of the test's own.
#[cfg(feature = "sqlite")]
fn file_bytes(path: &std::path::Path) -> u64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    let (pages, size): (i64, i64) = conn
        .query_row("SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    (pages * size).unsigned_abs()
}

#[tokio::test]
async fn memory_drops_the_oldest_results_first_and_keeps_running_tasks_and_dedupe_entries() {
    drops_the_oldest_results_first_and_keeps_running_tasks_and_dedupe_entries("memory").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_drops_the_oldest_results_first_and_keeps_running_tasks_and_dedupe_entries() {
    drops_the_oldest_results_first_and_keeps_running_tasks_and_dedupe_entries("sqlite").await;
}

#[tokio::test]
async fn memory_at_its_bound_with_nothing_to_drop_refuses_claims_retryably_until_tasks_end() {
    at_its_bound_with_nothing_to_drop_refuses_claims_retryably_until_tasks_end("memory").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_at_its_bound_with_nothing_to_drop_refuses_claims_retryably_until_tasks_end() {
    at_its_bound_with_nothing_to_drop_refuses_claims_retryably_until_tasks_end("sqlite").await;
}

async fn drops_the_oldest_results_first_and_keeps_running_tasks_and_dedupe_entries(backend: &str) {
    let bounded = Bounded::open(backend, 2 * MIB);
    let store = bounded.store.clone();
    let entry = oldest_and_running(&*store).await;

    // Four times the bound in results of 4 KiB, eight tasks at a time (so that they share commits).
    let output = "x".repeat(4096);
    for wave in 0..256 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (store, output) = (store.clone(), output.clone());
            tasks.spawn(async move { run(&*store, &format!("t-{}", wave * 8 + i), &output).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }

    assert!(bounded.held() <= 2 * MIB, "{backend} holds {} bytes, over its bound", bounded.held());
    the_oldest_went_first(&*store, "t-2047", &output, &entry).await;
}

/// Opens session `s` with its oldest record, an unsigned message's task (whose record keeps the message's dedupe
/// entry, returned), and a task `t-running` that keeps running through what follows.
pub(crate) async fn oldest_and_running(store: &dyn Store) -> ReplayClaim {
    assert!(store.create_session(&session("s")).await.unwrap());
    let entry = ReplayClaim::new("peer", format!("{:032x}", 7), now_ms() + 300_000);
    let admitted = store.admit(&unsigned_submit("t-unsigned", &entry)).await.unwrap();
    assert_eq!(admitted.replay, ReplayVerdict::Fresh);
    assert_eq!(store.finish_task(&key("t-unsigned"), &completed("first")).await.unwrap(), TaskFinish::Recorded);
    assert_eq!(
        store.claim_task(&key("t-running"), &running(), Duration::from_secs(600)).await.unwrap(),
        TaskClaim::Claimed
    );
    entry
}

/// After tasks `t-0`.. ended with `output`, the last of them `newest`, and the store made room: the newest result is
/// kept and the oldest went first, the unsigned message's record too, while its dedupe entry stayed (written on its
/// own before its record went), and the running task's record was never dropped.
pub(crate) async fn the_oldest_went_first(store: &dyn Store, newest: &str, output: &str, entry: &ReplayClaim) {
    let kept = store.task(&key(newest)).await.unwrap().expect("the newest result is kept");
    assert_eq!(kept.output.as_deref(), Some(serde_json::to_string(output).unwrap().as_str()));
    assert!(store.task(&key("t-0")).await.unwrap().is_none(), "the oldest result is dropped");
    assert!(store.task(&key("t-unsigned")).await.unwrap().is_none(), "the oldest record is dropped");
    let held = store.task(&key("t-running")).await.unwrap().expect("a running task is kept");
    assert_eq!(held.status, SharedTaskStatus::Running);
    assert_eq!(store.finish_task(&key("t-running"), &completed("late")).await.unwrap(), TaskFinish::Recorded);
    let resent = store.admit(&unsigned_submit("t-unsigned", entry)).await.unwrap();
    assert_eq!(resent.replay, ReplayVerdict::Seen, "the dropped record's dedupe entry is kept");
}

async fn at_its_bound_with_nothing_to_drop_refuses_claims_retryably_until_tasks_end(backend: &str) {
    let bounded = Bounded::open(backend, MIB);
    let store = bounded.store.clone();
    // Running tasks only, with long ids: nothing the store may drop, until the file is at its bound.
    let id = |n: usize| format!("{n:0>200}");
    let (mut claimed, mut refused) = (Vec::new(), Vec::new());
    let refusal = 'fill: {
        for wave in 0..1000 {
            let mut claims = tokio::task::JoinSet::new();
            for i in 0..8 {
                let (store, task) = (store.clone(), id(wave * 8 + i));
                claims.spawn(async move {
                    let claim = store.claim_task(&key(&task), &running(), Duration::from_secs(600)).await;
                    (task, claim)
                });
            }
            let mut refusal = None;
            while let Some(done) = claims.join_next().await {
                match done.unwrap() {
                    (task, Ok(TaskClaim::Claimed)) => claimed.push(task),
                    (task, Ok(other)) => panic!("{task}: {other:?}"),
                    (task, Err(e)) => {
                        refused.push(task);
                        refusal = Some(e);
                    }
                }
            }
            if let Some(e) = refusal {
                break 'fill e;
            }
        }
        panic!("8,000 claims of 200-byte ids fit in {backend} bounded to 1 MiB");
    };
    assert!(matches!(refusal, StoreError::Unavailable { .. }), "a write at the bound: {refusal:?}");
    assert!(refusal.to_string().contains("full"), "{refusal}");
    assert!(bounded.held() <= MIB, "{backend} holds {} bytes", bounded.held());
    // Every claim that was answered is there, and no refused one is (SQLite rolls a transaction back itself when the
    // file is full: a refused claim's batch keeps nothing, rather than committing what ran after the rollback).
    for task in claimed.iter().step_by(97) {
        assert_eq!(store.task(&key(task)).await.unwrap().map(|t| t.status), Some(SharedTaskStatus::Running), "{task}");
    }
    for task in &refused {
        assert_eq!(store.task(&key(task)).await.unwrap(), None, "{task} was refused, yet written");
    }

    // Half the tasks end: their records may now go early, and new claims fit again. At the bound a result may be
    // refused as well (a longer record needs room too): the runtime tries it again, as here, and each one recorded
    // is a record the next batch may drop.
    for task in claimed.iter().take(claimed.len() / 2) {
        let mut attempts = 0;
        loop {
            match store.finish_task(&key(task), &completed("done")).await {
                Ok(finish) => break assert_eq!(finish, TaskFinish::Recorded),
                Err(e) => {
                    attempts += 1;
                    assert!(matches!(e, StoreError::Unavailable { .. }) && attempts < 10, "{task}: {e:?}");
                }
            }
        }
    }
    for n in 0..64 {
        let task = format!("after-{n}");
        assert_eq!(
            store.claim_task(&key(&task), &running(), Duration::from_secs(600)).await.unwrap(),
            TaskClaim::Claimed
        );
    }
    // The tasks still running kept their records.
    let last = claimed.last().unwrap();
    assert_eq!(store.task(&key(last)).await.unwrap().map(|t| t.status), Some(SharedTaskStatus::Running));
}
