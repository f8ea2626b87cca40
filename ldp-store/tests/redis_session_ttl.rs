//! The Redis store restarts a live session's TTL as the SQLite store does: written ahead by a tenth of the TTL (at most
//! a second), so a busy session's value is rewritten about once a second instead of by every message, and the
//! session still lives at least its TTL after its last message. Redis is a real `redis-server` (installed by
//! `scripts/redis-server.sh` when missing; never skipped).
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::session_ttl;

use ldp_store::{RedisStore, StoreConfig};
use session_ttl::{StoredExpiry, now_ms};

const DELEGATE: &str = "ldp:delegate:ttl";

/// The session's key, read with a client of the test's own.
struct RedisExpiry(redis::aio::MultiplexedConnection);

impl RedisExpiry {
    fn key(id: &str) -> String {
        format!("ldp:{DELEGATE}:{{{id}}}:session")
    }
}

#[async_trait::async_trait]
impl StoredExpiry for RedisExpiry {
    /// The expiry the session's value holds (`<expiry ms>|<TTL ms>|<record>`).
    async fn expiry(&mut self, id: &str) -> i64 {
        let value: String = redis::cmd("GET").arg(Self::key(id)).query_async(&mut self.0).await.unwrap();
        value.split('|').next().unwrap().parse().unwrap()
    }
}

#[tokio::test]
async fn a_session_ttl_restart_is_written_ahead_and_never_shortens_the_session() {
    let server = ldp_store::test_redis::RedisServer::start().unwrap();
    let store = RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap();
    let conn = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut stored = RedisExpiry(conn);
    session_ttl::ttl_restart_is_written_ahead(&store, &mut stored).await;

    // The key outlives the expiry it holds, as the marker that makes every replica answer SESSION_EXPIRED.
    let expiry = stored.expiry("s-long").await;
    let pttl: i64 = redis::cmd("PTTL").arg(RedisExpiry::key("s-long")).query_async(&mut stored.0).await.unwrap();
    assert!(now_ms() + pttl > expiry, "the key goes before the session's expiry");
}

/// A session value of neither known form (not `<expiry ms>|...`, not `closed`: written by something else, or
/// damaged) is answered `Corrupt`, which the peer is told is not retryable, as the other backends answer a record
/// they cannot read; before, the admission script failed on it after writing the message's replay entry, answered
/// `Unavailable` (retryable), and the retry was then refused as a replay.
#[tokio::test]
async fn a_session_value_that_cannot_be_read_is_corrupt() {
    let server = ldp_store::test_redis::RedisServer::start().unwrap();
    let store = RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap();
    let mut conn = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    for (id, value) in [("s-garbage", "garbage|x"), ("s-nobar", "{\"session_id\":\"s-nobar\"}")] {
        let _: () = redis::cmd("SET").arg(RedisExpiry::key(id)).arg(value).query_async(&mut conn).await.unwrap();
        let mut admission = ldp_session::shared::Admission::default();
        admission.replay = Some(ldp_session::shared::ReplayClaim::new("p", format!("m-{id}"), now_ms() + 60_000));
        admission.session_id = Some(id.to_owned());
        let refused = ldp_session::store::Store::admit(&store, &admission).await.unwrap_err();
        assert!(matches!(refused, ldp_session::store::StoreError::Corrupt { .. }), "{id}: {refused:?}");
        assert!(!refused.to_ldp().retryable);
    }
}
