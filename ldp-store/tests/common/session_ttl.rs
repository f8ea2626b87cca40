//! The promise every persistent store keeps when it writes a session's TTL restart ahead (SQLite, Redis): a busy
//! session's stored expiry changes about once a second rather than with every message, and a session still lives at
//! least its TTL after its last message (at most a tenth of its TTL, or a second, longer).

use std::time::{Duration, Instant};

use ldp_session::shared::{Admission, SessionLookup, SharedSession};
use ldp_session::store::Store;

/// Reads a session's expiry (ms since the epoch) as the store holds it, bypassing the store's own code.
#[async_trait::async_trait]
pub trait StoredExpiry {
    /// The stored expiry of session `id`.
    async fn expiry(&mut self, id: &str) -> i64;
}

pub fn now_ms() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

pub fn session(id: &str, ttl_secs: u64) -> SharedSession {
    serde_json::from_value(serde_json::json!({
        "session_id": id, "peer": "ldp:delegate:client", "owner": null, "peer_delegate": null,
        "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": ttl_secs,
    }))
    .unwrap()
}

async fn touch(store: &dyn Store, id: &str) -> SessionLookup {
    let mut admission = Admission::default();
    admission.session_id = Some(id.to_owned());
    store.admit(&admission).await.unwrap().session.expect("a session step")
}

/// Runs the check on sessions `s-long` (an hour's TTL) and `s-short` (a second's), which it creates.
pub async fn ttl_restart_is_written_ahead(store: &dyn Store, stored: &mut dyn StoredExpiry) {
    // A long TTL: written a second ahead, so the messages right after do not rewrite it.
    assert!(store.create_session(&session("s-long", 3600)).await.unwrap());
    let before = now_ms();
    assert!(matches!(touch(store, "s-long").await, SessionLookup::Live(_)));
    let written = stored.expiry("s-long").await;
    assert!(written >= before + 3_600_000, "the TTL restarts from the message");
    assert!(written <= now_ms() + 3_600_000 + 1_000, "at most a second ahead");
    // Messages in a row rewrite it about once a second, each time at least a TTL past the message: over 40
    // messages, 50 ms apart (or 10 s on a slow machine), it takes at most one value per second begun.
    let (started, mut values, mut messages) = (Instant::now(), vec![written], 0);
    while messages < 40 && started.elapsed() < Duration::from_secs(10) {
        let sent = now_ms();
        assert!(matches!(touch(store, "s-long").await, SessionLookup::Live(_)));
        let expiry = stored.expiry("s-long").await;
        assert!(expiry >= sent + 3_600_000, "never shorter than the TTL");
        if values.last() != Some(&expiry) {
            values.push(expiry);
        }
        messages += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs() + 1;
    assert!(messages >= 10, "only {messages} messages in {seconds} s");
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
        assert!(matches!(touch(store, "s-short").await, SessionLookup::Live(_)), "live 600 ms after a message");
        assert!(stored.expiry("s-short").await >= sent + 1_000, "never shorter than the TTL");
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert!(matches!(touch(store, "s-short").await, SessionLookup::Expired), "expired 1.3 s after its last message");
}
