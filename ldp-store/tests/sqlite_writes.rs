//! What the SQLite store writes less of, without changing what it answers: unsigned traffic's dedupe entries live in
//! two generation tables emptied a generation at a time (never deleted one by one), and a live session's TTL restart
//! is written ahead, about once a second, instead of by every message. Both hold their promise: an entry is seen
//! until it expires, a session lives at least its TTL after its last message. And what it deletes: expired tasks and
//! sessions go (an expired session's marker only once its time is up), live ones stay.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::scratch::scratch;
use crate::session_ttl;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ldp_session::TaskKey;
use ldp_session::shared::{Admission, ReplayClaim, ReplayVerdict, SharedTask, SharedTaskStatus, TaskClaim, TaskFinish};
use ldp_session::store::Store;
use ldp_store::{SqliteStore, StoreConfig};
use session_ttl::now_ms;

/// An unsigned message's dedupe claim for `key`, kept for `keep`.
async fn claim(store: &SqliteStore, key: &str, keep: Duration) -> ReplayVerdict {
    let mut admission = Admission::default();
    admission.replay = Some(ReplayClaim::new("peer", key, now_ms() + i64::try_from(keep.as_millis()).unwrap()));
    store.admit(&admission).await.unwrap().replay
}

/// (rows, of which blobs of 16 bytes) in a dedupe generation table, read on a connection of the test's own.
fn rows(path: &Path, table: &str) -> (i64, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        &format!("SELECT COUNT(*), COALESCE(SUM(typeof(key) = 'blob' AND length(key) = 16), 0) FROM {table}"),
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// Sleeps until `at` (at once if it has passed).
async fn until(at: Instant) {
    tokio::time::sleep(at.saturating_duration_since(Instant::now())).await;
}

#[tokio::test]
async fn dedupe_generations_forget_only_expired_entries() {
    let (dir, path) = scratch("dedupe-generations");
    let mut cfg = StoreConfig::new("ldp:delegate:dedupe");
    cfg.sqlite_dedupe_generation = Duration::from_millis(500);
    let store = SqliteStore::open(&path, cfg).unwrap();
    let start = Instant::now();
    let (short, long) = ("a1".repeat(16), "b2".repeat(16));

    // The first claim finds the first generation old enough and moves to the second one (empty).
    assert_eq!(claim(&store, &short, Duration::from_secs(3)).await, ReplayVerdict::Fresh);
    // When the generation says its entries have all expired (3 s, plus the second it is written ahead by), at most.
    let short_generation_until = now_ms() + 4_000;
    assert_eq!(claim(&store, &short, Duration::from_secs(3)).await, ReplayVerdict::Seen);
    assert_eq!(rows(&path, "dedupe_1"), (1, 1), "the machine's hex keys are kept as their 16 bytes");

    // A generation later the other (empty, so expired) takes over; the first entry is still seen from the older one.
    until(start + Duration::from_millis(700)).await;
    assert_eq!(claim(&store, &long, Duration::from_secs(30)).await, ReplayVerdict::Fresh);
    assert_eq!(rows(&path, "dedupe_0"), (1, 1));
    assert_eq!(
        claim(&store, &short, Duration::from_secs(3)).await,
        ReplayVerdict::Seen,
        "the older generation is read"
    );
    assert_eq!(claim(&store, &long, Duration::from_secs(30)).await, ReplayVerdict::Seen);

    // A key that is not the machine's hex is kept as its text, and cannot collide with a blob.
    assert_eq!(claim(&store, "not hex at all", Duration::from_secs(30)).await, ReplayVerdict::Fresh);
    assert_eq!(claim(&store, "not hex at all", Duration::from_secs(30)).await, ReplayVerdict::Seen);

    // The older generation is not emptied while any of its entries lives: its last entry expires 3 s after the
    // start (the table says so a second later, as it is written about once a second). Once past, the next claim
    // empties it in one statement and it takes new entries; the long-lived entry of the other is still seen.
    tokio::time::sleep(Duration::from_millis(u64::try_from(short_generation_until + 300 - now_ms()).unwrap_or(0)))
        .await;
    assert_eq!(claim(&store, &"c3".repeat(16), Duration::from_secs(30)).await, ReplayVerdict::Fresh);
    assert_eq!(rows(&path, "dedupe_1").0, 1, "the expired generation was emptied before the new entry went in");
    assert_eq!(claim(&store, &short, Duration::from_secs(3)).await, ReplayVerdict::Fresh, "expired, so forgotten");
    assert_eq!(claim(&store, &long, Duration::from_secs(30)).await, ReplayVerdict::Seen, "live entries are kept");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The session's row, read on a connection of the test's own.
struct SqliteExpiry(PathBuf);

#[async_trait::async_trait]
impl session_ttl::StoredExpiry for SqliteExpiry {
    async fn expiry(&mut self, id: &str) -> i64 {
        let conn = rusqlite::Connection::open(&self.0).unwrap();
        conn.query_row("SELECT expires_ms FROM sessions WHERE id = ?1", [id], |r| r.get(0)).unwrap()
    }
}

#[tokio::test]
async fn a_session_ttl_restart_is_written_ahead_and_never_shortens_the_session() {
    let (dir, path) = scratch("session-ttl");
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:ttl")).unwrap();
    session_ttl::ttl_restart_is_written_ahead(&store, &mut SqliteExpiry(path.clone())).await;
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rows of `table` whose key column `column` is `value`, on a connection of the test's own.
fn count(path: &Path, table: &str, column: &str, value: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?1"), [value], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn the_sweep_deletes_expired_tasks_and_sessions_and_keeps_live_ones() {
    let (dir, path) = scratch("sweep");
    let mut cfg = StoreConfig::new("ldp:delegate:sweep");
    // Wall-clock expiries: each check below holds with at least 3.8 s to spare on a slow machine (what must have
    // expired is past its time by the sleeps alone; what must be kept is 3.8 s or more from its end when the sweep
    // starts).
    cfg.result_ttl = Duration::from_secs(4);
    cfg.closed_ttl = Duration::from_secs(4);
    let store = std::sync::Arc::new(SqliteStore::open(&path, cfg).unwrap());
    let key = |session: &str, task: &str| TaskKey { session_id: session.into(), task_id: task.into() };
    let running = SharedTask::running("replica-a", ldp_types::PayloadMode::Text);
    let mut done = running.clone();
    done.status = SharedTaskStatus::Completed;
    done.output = Some("\"ok\"".into());
    let finish = |task: &'static str| {
        let (store, running, done) = (store.clone(), running.clone(), done.clone());
        async move {
            let claim = store.claim_task(&key("s", task), &running, Duration::from_secs(30)).await.unwrap();
            assert_eq!(claim, TaskClaim::Claimed);
            assert_eq!(store.finish_task(&key("s", task), &done).await.unwrap(), TaskFinish::Recorded);
        }
    };
    finish("t-old").await;
    // Ends 1 s from now; its marker is kept 4 s more.
    assert!(store.create_session(&session_ttl::session("s-gone", 1)).await.unwrap());
    // Closed: its marker goes with the closed TTL, 4 s from now.
    assert!(store.create_session(&session_ttl::session("s-closed", 3600)).await.unwrap());
    store.close_session("s-closed").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    // Expired when the sweep runs, but within its marker's time.
    assert!(store.create_session(&session_ttl::session("s-marked", 1)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    finish("t-new").await;
    assert!(store.create_session(&session_ttl::session("s-live", 3600)).await.unwrap());

    // The sweep runs every 1,024 operations: these are dedupe claims, made together so they share commits.
    let mut claims = tokio::task::JoinSet::new();
    for i in 0..1100 {
        let store = store.clone();
        claims.spawn(async move { claim(&store, &format!("{i:032x}"), Duration::from_secs(30)).await });
    }
    while let Some(verdict) = claims.join_next().await {
        assert_eq!(verdict.unwrap(), ReplayVerdict::Fresh);
    }
    assert_eq!(count(&path, "task_rows", "task_id", "t-old"), 0, "an expired result is deleted");
    assert_eq!(count(&path, "task_rows", "task_id", "t-new"), 1, "a live one is kept");
    assert_eq!(count(&path, "sessions", "id", "s-gone"), 0, "an expired session goes once its marker's time is up");
    assert_eq!(count(&path, "sessions", "id", "s-marked"), 1, "an expired session's marker is kept until then");
    assert_eq!(count(&path, "sessions", "id", "s-closed"), 0, "a closed session's marker goes at its expiry");
    assert_eq!(count(&path, "sessions", "id", "s-live"), 1, "a live session is kept");
    let held = store.task(&key("s", "t-new")).await.unwrap().unwrap();
    assert_eq!(held.status, SharedTaskStatus::Completed);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `close` commits what was queued before it, then closes both connections and joins the store's threads: the file
/// is settled (no WAL or shared-memory file left) when it returns, a later call is refused as unavailable, and a
/// second close does nothing. Reopened, the file holds what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_commits_what_was_queued_and_leaves_one_settled_file() {
    let (dir, path) = scratch("close");
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:close")).unwrap();
    let running = SharedTask::running("replica-a", ldp_types::PayloadMode::Text);
    let key = |i: usize| TaskKey { session_id: "s".into(), task_id: format!("t{i}") };
    for i in 0..20 {
        assert_eq!(store.claim_task(&key(i), &running, Duration::from_secs(30)).await.unwrap(), TaskClaim::Claimed);
    }
    // Polled first, the claim is queued before the close.
    let last = key(20);
    let (claimed, closed) = tokio::join!(store.claim_task(&last, &running, Duration::from_secs(30)), store.close());
    assert_eq!(claimed.unwrap(), TaskClaim::Claimed);
    closed.unwrap();
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["state.db"], "the WAL outlived the close");
    let refused = store.task(&key(0)).await.unwrap_err();
    assert!(
        matches!(&refused, ldp_session::store::StoreError::Unavailable { reason, .. } if reason.contains("closed"))
    );
    store.close().await.unwrap();
    let again = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:close")).unwrap();
    for i in 0..=20 {
        assert!(again.task(&key(i)).await.unwrap().is_some(), "task {i} was lost");
    }
    again.close().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
