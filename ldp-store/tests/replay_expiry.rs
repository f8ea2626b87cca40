//! The replay window's bounds count live entries only, on every backend: a principal at its share (or at the room
//! the window has left, `ldp_session::replay_room`), or a window at its total, is refused until entries expire, and
//! admitted after, without any sweep having run in between; an
//! expired key is fresh again and counted once. (The SQLite store keeps these counts as entries come and go rather
//! than counting a principal's entries on every signed message.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_session::shared::{Admission, ReplayClaim, ReplayVerdict};
use ldp_store::StoreConfig;

use crate::backends::Backends;

use crate::records::now_ms;

/// A signed message's replay entry, outside a session: `principal`'s, kept until `expires`, with a share of 2 and a
/// total of 4.
fn signed(principal: &str, key: &str, expires: i64) -> Admission {
    let mut claim = ReplayClaim::new(principal, key, expires);
    (claim.max_per_principal, claim.max_total) = (Some(2), Some(4));
    let mut admission = Admission::default();
    admission.replay = Some(claim);
    admission
}

#[test]
fn expired_entries_leave_the_bounds() {
    let backends = Backends::start("replay-expiry");
    let cfg = StoreConfig::new("ldp:delegate:replay-expiry");
    backends.rt.block_on(async {
        for (name, store) in backends.open(&cfg, "replay.db").await {
            let verdict = |admission: Admission| {
                let store = store.clone();
                async move { store.admit(&admission).await.unwrap().replay }
            };
            let soon = now_ms() + 400;
            assert_eq!(verdict(signed("p", "a", soon)).await, ReplayVerdict::Fresh, "{name}");
            assert_eq!(verdict(signed("p", "b", soon)).await, ReplayVerdict::Fresh, "{name}");
            assert_eq!(verdict(signed("p", "a", soon)).await, ReplayVerdict::Seen, "{name}");
            let later = now_ms() + 60_000;
            assert_eq!(verdict(signed("p", "c", later)).await, ReplayVerdict::Full, "{name}: p's share is 2");
            assert_eq!(verdict(signed("q", "d", later)).await, ReplayVerdict::Fresh, "{name}");
            assert_eq!(verdict(signed("r", "e", later)).await, ReplayVerdict::Fresh, "{name}");
            assert_eq!(verdict(signed("r", "g", later)).await, ReplayVerdict::TableFull, "{name}: the total is 4");

            tokio::time::sleep(Duration::from_millis(600)).await;
            // a and b expired: a's key is fresh again and counted once; p then holds as many entries as the window
            // has room left (d, e and a leave one), so that place goes to a source holding none.
            assert_eq!(verdict(signed("p", "a", later)).await, ReplayVerdict::Fresh, "{name}");
            assert_eq!(verdict(signed("p", "c", later)).await, ReplayVerdict::Full, "{name}: p holds the room left");
            assert_eq!(verdict(signed("s", "i", later)).await, ReplayVerdict::Fresh, "{name}");
            // a, d, e, i: the window is full again.
            assert_eq!(verdict(signed("q", "f", later)).await, ReplayVerdict::TableFull, "{name}");
            assert_eq!(verdict(signed("p", "a", later)).await, ReplayVerdict::Seen, "{name}");
        }
    });
}
