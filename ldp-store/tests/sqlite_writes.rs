//! What the SQLite store writes less of, without changing what it answers: unsigned traffic's dedupe entries live in
//! two generation tables emptied a generation at a time (never deleted one by one), and a live session's TTL restart
//! is written ahead, about once a second, instead of by every message. Both hold their promise: an entry is seen
//! until it expires, a session lives at least its TTL after its last message.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ldp_session::shared::{Admission, ReplayClaim, ReplayVerdict, SessionLookup, SharedSession};
use ldp_session::store::Store;
use ldp_store::{SqliteStore, StoreConfig};

fn now_ms() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ldp-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    (dir, path)
}

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

fn session(id: &str, ttl_secs: u64) -> SharedSession {
    serde_json::from_value(serde_json::json!({
        "session_id": id, "peer": "ldp:delegate:client", "owner": null, "peer_delegate": null,
        "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": ttl_secs,
    }))
    .unwrap()
}

async fn touch(store: &SqliteStore, id: &str) -> SessionLookup {
    let mut admission = Admission::default();
    admission.session_id = Some(id.to_owned());
    store.admit(&admission).await.unwrap().session.expect("a session step")
}

fn stored_expiry(path: &Path, id: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT expires_ms FROM sessions WHERE id = ?1", [id], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_session_ttl_restart_is_written_ahead_and_never_shortens_the_session() {
    let (dir, path) = scratch("session-ttl");
    let store = SqliteStore::open(&path, StoreConfig::new("ldp:delegate:ttl")).unwrap();

    // A long TTL: written a second ahead, so the messages right after do not rewrite the row.
    assert!(store.create_session(&session("s-long", 3600)).await.unwrap());
    let before = now_ms();
    assert!(matches!(touch(&store, "s-long").await, SessionLookup::Live(_)));
    let written = stored_expiry(&path, "s-long");
    assert!(written >= before + 3_600_000, "the TTL restarts from the message");
    assert!(written <= now_ms() + 3_600_000 + 1_000, "at most a second ahead");
    // Messages in a row rewrite it about once a second, each time at least a TTL past the message: over 40
    // messages (or 10 s on a slow machine), the row takes at most one value per second begun.
    let (started, mut values, mut messages) = (Instant::now(), vec![written], 0);
    while messages < 40 && started.elapsed() < Duration::from_secs(10) {
        let sent = now_ms();
        assert!(matches!(touch(&store, "s-long").await, SessionLookup::Live(_)));
        let expiry = stored_expiry(&path, "s-long");
        assert!(expiry >= sent + 3_600_000, "never shorter than the TTL");
        if values.last() != Some(&expiry) {
            values.push(expiry);
        }
        messages += 1;
    }
    let seconds = started.elapsed().as_secs() + 1;
    assert!(
        u64::try_from(values.len()).unwrap() <= seconds + 1,
        "{messages} messages in {seconds} s wrote {} expiries",
        values.len()
    );

    // A one-second TTL (ahead by a tenth of it): every message keeps the session alive for a full TTL after it.
    assert!(store.create_session(&session("s-short", 1)).await.unwrap());
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let sent = now_ms();
        assert!(matches!(touch(&store, "s-short").await, SessionLookup::Live(_)), "live 600 ms after a message");
        assert!(stored_expiry(&path, "s-short") >= sent + 1_000, "never shorter than the TTL");
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert!(matches!(touch(&store, "s-short").await, SessionLookup::Expired), "expired 1.3 s after its last message");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
