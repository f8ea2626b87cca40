//! A task that runs longer than the result TTL keeps its record, and its id, while its owner renews the lease, on
//! every backend: a status query still finds it running, and another replica's claim of its id is refused. (The TTL
//! counts from a record's last write; a running task's record is rewritten, or its expiry pushed, at each renewal.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_session::TaskKey;
use ldp_session::shared::{SharedTask, SharedTaskStatus, TaskClaim};
use ldp_store::StoreConfig;
use ldp_types::PayloadMode;

use crate::backends::Backends;

#[test]
fn a_task_running_past_the_result_ttl_keeps_its_record() {
    let backends = Backends::start("long-tasks");
    let mut cfg = StoreConfig::new("ldp:delegate:long");
    cfg.result_ttl = Duration::from_millis(800);
    let lease = Duration::from_millis(600);
    let key = TaskKey { session_id: "s".into(), task_id: "long".into() };
    backends.rt.block_on(async {
        for (name, store) in backends.open(&cfg, "long.db").await {
            let running = SharedTask::running("replica-a", PayloadMode::Text);
            assert_eq!(store.claim_task(&key, &running, lease).await.unwrap(), TaskClaim::Claimed, "{name}");
            // Renewed every 200 ms for 2 s: two and a half result TTLs after the claim.
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let lost = store.renew_leases("replica-a", std::slice::from_ref(&key), lease).await.unwrap();
                assert!(lost.is_empty(), "{name}: the owner lost its task: {lost:?}");
            }
            let held = store.task(&key).await.unwrap();
            let held = held.unwrap_or_else(|| panic!("{name}: the running task's record expired"));
            assert_eq!((held.status, held.owner.as_str()), (SharedTaskStatus::Running, "replica-a"), "{name}");
            let other = SharedTask::running("replica-b", PayloadMode::Text);
            assert_eq!(
                store.claim_task(&key, &other, lease).await.unwrap(),
                TaskClaim::Taken,
                "{name}: another replica took over a task whose owner renews it"
            );
        }
    });
}
