//! The Redis store restarts a live session's TTL as the SQLite store does: written ahead by a tenth of the TTL (at most
//! a second), so a busy session's value is rewritten about once a second instead of by every message, and the
//! session still lives at least its TTL after its last message. Redis is a real `redis-server` (installed by
//! `scripts/redis-server.sh` when missing; never skipped).
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use ldp_session::shared::{Admission, SessionLookup, SharedSession};
use ldp_session::store::Store;
use ldp_store::{RedisStore, StoreConfig};

const DELEGATE: &str = "ldp:delegate:ttl";

fn now_ms() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn session(id: &str, ttl_secs: u64) -> SharedSession {
    serde_json::from_value(serde_json::json!({
        "session_id": id, "peer": "ldp:delegate:client", "owner": null, "peer_delegate": null,
        "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": ttl_secs,
    }))
    .unwrap()
}

async fn touch(store: &RedisStore, id: &str) -> SessionLookup {
    let mut admission = Admission::default();
    admission.session_id = Some(id.to_owned());
    store.admit(&admission).await.unwrap().session.expect("a session step")
}

/// The session's expiry as its value holds it (`<expiry ms>|<TTL ms>|<record>`), read with a client of the test's own,
/// and the key's own remaining lifetime in ms.
async fn stored_expiry(redis: &mut redis::aio::MultiplexedConnection, id: &str) -> (i64, i64) {
    let key = format!("ldp:{DELEGATE}:{{{id}}}:session");
    let value: String = redis::cmd("GET").arg(&key).query_async(redis).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(redis).await.unwrap();
    (value.split('|').next().unwrap().parse().unwrap(), pttl)
}

#[tokio::test]
async fn a_session_ttl_restart_is_written_ahead_and_never_shortens_the_session() {
    let server = ldp_store::test_redis::RedisServer::start().unwrap();
    let store = RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap();
    let mut redis = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();

    // A long TTL: written a second ahead, so the messages right after do not rewrite the value.
    assert!(store.create_session(&session("s-long", 3600)).await.unwrap());
    let before = now_ms();
    assert!(matches!(touch(&store, "s-long").await, SessionLookup::Live(_)));
    let (written, pttl) = stored_expiry(&mut redis, "s-long").await;
    assert!(written >= before + 3_600_000, "the TTL restarts from the message");
    assert!(written <= now_ms() + 3_600_000 + 1_000, "at most a second ahead");
    assert!(pttl >= written - now_ms(), "the key outlives the session's expiry (as its marker)");
    // Messages in a row rewrite it about once a second, each time at least a TTL past the message: over 40
    // messages (or 10 s on a slow machine), the value takes at most one expiry per second begun.
    let (started, mut values, mut messages) = (Instant::now(), vec![written], 0);
    while messages < 40 && started.elapsed() < Duration::from_secs(10) {
        let sent = now_ms();
        assert!(matches!(touch(&store, "s-long").await, SessionLookup::Live(_)));
        let (expiry, _) = stored_expiry(&mut redis, "s-long").await;
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

    // A one-second TTL (ahead by a tenth of it): every message keeps the session alive for a full TTL after it, and
    // its key lives on past the expiry, so every replica then answers SESSION_EXPIRED rather than unknown.
    assert!(store.create_session(&session("s-short", 1)).await.unwrap());
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let sent = now_ms();
        assert!(matches!(touch(&store, "s-short").await, SessionLookup::Live(_)), "live 600 ms after a message");
        assert!(stored_expiry(&mut redis, "s-short").await.0 >= sent + 1_000, "never shorter than the TTL");
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert!(matches!(touch(&store, "s-short").await, SessionLookup::Expired), "expired 1.3 s after its last message");
}
