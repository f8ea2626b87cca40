//! What several store tests build their records from: the wall clock in milliseconds, as the stores keep expiries,
//! and a session's shared record.

use ldp_session::shared::SharedSession;

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// A live session's record: id `id`, a text session of a client, a TTL of ten minutes.
pub fn session(id: &str) -> SharedSession {
    serde_json::from_value(serde_json::json!({
        "session_id": id, "peer": "ldp:delegate:client", "owner": null, "peer_delegate": null,
        "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": 600,
    }))
    .unwrap()
}
