//! A full Redis (`maxmemory`, `noeviction`) makes room as the other bounded backends do: the oldest ended tasks'
//! records go before their TTL, never a running task's, and an unsigned message's dedupe entry kept in a dropped
//! record is written on its own. A write Redis refuses for memory is `Unavailable` (retryable) and starts a pass at
//! once, so that the retry finds room; a result is always recorded. Redis is a real `redis-server` (installed by
//! `scripts/redis-server.sh` when missing; never skipped).
#![cfg(feature = "redis")]

use crate::records::session;
use crate::store_bound::{completed, key, oldest_and_running, running, the_oldest_went_first};

use std::time::Duration;

use ldp_session::shared::{SessionLookup, SharedTaskStatus, TaskClaim, TaskFinish};
use ldp_session::store::{Store, StoreError};
use ldp_store::test_redis::{RedisServer, RedisServerOptions};
use ldp_store::{RedisStore, StoreConfig};

const DELEGATE: &str = "ldp:delegate:room";

/// A `redis-server` holding at most `max` bytes, refusing writes when full, and a store on it.
async fn full_at(max: &str) -> (RedisServer, RedisStore, redis::aio::MultiplexedConnection) {
    let options = RedisServerOptions::default().config("maxmemory", max).config("maxmemory-policy", "noeviction");
    let server = RedisServer::start_with(options).unwrap();
    let store = RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap();
    let conn = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    (server, store, conn)
}

/// Used memory and `maxmemory`, as Redis reports them.
async fn memory(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await.unwrap();
    let field = |name: &str| -> u64 {
        info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap()
    };
    (field("used_memory"), field("maxmemory"))
}

/// Does `step` until the store takes it, counting the refusals, each of which must be a full Redis's (retryable).
async fn retried<T, F, Fut>(what: &str, refusals: &mut usize, mut step: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    for _ in 0..500 {
        match step().await {
            Ok(done) => return done,
            Err(StoreError::Unavailable { reason, .. }) if reason.contains("full") => {
                *refusals += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
    panic!("{what}: still refused after 500 attempts over 5 s");
}

#[tokio::test]
async fn a_full_redis_drops_the_oldest_results_and_keeps_running_tasks_and_dedupe_entries() {
    let (_server, store, mut conn) = full_at("4mb").await;
    let entry = oldest_and_running(&store).await;
    let long = Duration::from_secs(600);

    // Four times maxmemory in results of 4 KiB, each task claimed and ended as the runtime would, retried when
    // Redis is full.
    let output = "x".repeat(4096);
    let mut refusals = 0;
    for n in 0..4096 {
        let task = format!("t-{n}");
        let (at, claim, done) = (key(&task), running(), completed(&output));
        let claim = retried(&task, &mut refusals, || store.claim_task(&at, &claim, long)).await;
        assert_eq!(claim, TaskClaim::Claimed, "{task}");
        let finish = retried(&task, &mut refusals, || store.finish_task(&at, &done)).await;
        assert_eq!(finish, TaskFinish::Recorded, "{task}");
    }

    let (used, max) = memory(&mut conn).await;
    assert!(used <= max + max / 8, "Redis holds {used} bytes of its {max}");
    the_oldest_went_first(&store, "t-4095", &output, &entry).await;
    // The session is untouched, and another one can still be opened (retried like any write while room is made).
    let second = session("s2");
    assert!(retried("s2", &mut refusals, || store.create_session(&second)).await);
    eprintln!("{refusals} writes refused for memory and retried, of 8,193");
}

#[tokio::test]
async fn a_full_redis_of_running_tasks_refuses_claims_retryably_and_records_every_result() {
    let (_server, store, mut conn) = full_at("3mb").await;
    assert!(store.create_session(&session("s-closed-when-full")).await.unwrap());
    // Running tasks only, with long ids: nothing the store may drop, until Redis is full.
    let id = |n: usize| format!("{n:0>400}");
    let long = Duration::from_secs(600);
    let mut claimed = Vec::new();
    let refusal = loop {
        let task = id(claimed.len());
        match store.claim_task(&key(&task), &running(), long).await {
            Ok(TaskClaim::Claimed) => claimed.push(task),
            Ok(other) => panic!("{task}: {other:?}"),
            Err(e) => break e,
        }
        assert!(claimed.len() < 20_000, "20,000 claims of 400-byte ids fit in 3 MB");
    };
    assert!(matches!(&refusal, StoreError::Unavailable { reason, .. } if reason.contains("full")), "{refusal:?}");
    // Full, a status query is answered and a close ends its session.
    store.close_session("s-closed-when-full").await.unwrap();
    let ended = store.ended_sessions(&["s-closed-when-full".to_owned()]).await.unwrap();
    assert!(matches!(ended.as_slice(), [(_, SessionLookup::Closed)]), "{ended:?}");
    // Every claim answered is there.
    for task in claimed.iter().step_by(97) {
        assert_eq!(store.task(&key(task)).await.unwrap().map(|t| t.status), Some(SharedTaskStatus::Running));
    }
    // Still full, a result is recorded (its lease is deleted first, which lets the script write).
    for task in claimed.iter().take(claimed.len() / 2) {
        assert_eq!(store.finish_task(&key(task), &completed("done")).await.unwrap(), TaskFinish::Recorded, "{task}");
    }
    // Those results may go early: claims are taken again, three for every four tasks that ended (their leases
    // alone, deleted, make room for about two).
    let mut refusals = 0;
    for n in 0..claimed.len() * 3 / 8 {
        let task = id(1_000_000 + n);
        let (at, claim) = (key(&task), running());
        let claim = retried(&task, &mut refusals, || store.claim_task(&at, &claim, long)).await;
        assert_eq!(claim, TaskClaim::Claimed);
    }
    let (used, max) = memory(&mut conn).await;
    assert!(used <= max + max / 8, "Redis holds {used} bytes of its {max}");
    // No running task's record went.
    for task in claimed.iter().skip(claimed.len() / 2).step_by(31) {
        assert_eq!(store.task(&key(task)).await.unwrap().map(|t| t.status), Some(SharedTaskStatus::Running));
    }
}

/// On Redis Cluster each primary is looked at and made room in: `SCAN` and `INFO` go to each node the cluster's
/// slots name, and each node's oldest ended records go.
#[tokio::test]
async fn on_a_cluster_each_primary_makes_room_from_its_oldest_results() {
    let cluster = ldp_store::test_redis::RedisCluster::start(3).unwrap();
    cluster.config_set("maxmemory", "256mb").unwrap();
    cluster.config_set("maxmemory-policy", "noeviction").unwrap();
    let store = RedisStore::open(&cluster.url(), StoreConfig::new(DELEGATE)).await.unwrap();
    // Sessions whose keys are spread over the three nodes' slots, tasks ended one after another across them.
    let sessions: Vec<String> = (0..24).map(|n| format!("s-{n}")).collect();
    for id in &sessions {
        assert!(store.create_session(&session(id)).await.unwrap());
    }
    let long = Duration::from_secs(600);
    let at = |n: usize| ldp_session::TaskKey { session_id: sessions[n % 24].clone(), task_id: format!("t-{n}") };
    for n in 0..480 {
        assert_eq!(store.claim_task(&at(n), &running(), long).await.unwrap(), TaskClaim::Claimed);
        assert_eq!(store.finish_task(&at(n), &completed("done")).await.unwrap(), TaskFinish::Recorded);
        // PTTL counts in milliseconds: one task's end per millisecond keeps their order.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for n in 480..504 {
        assert_eq!(store.claim_task(&at(n), &running(), long).await.unwrap(), TaskClaim::Claimed);
    }

    // Far below its high mark, a pass that follows a refusal still makes room, on every primary.
    let pass = store.make_room(true).await.unwrap();
    assert_eq!(pass.full, 3, "{pass:?}");
    let mut gone = Vec::new();
    for n in 0..504 {
        if store.task(&at(n)).await.unwrap().is_none() {
            gone.push(n);
        }
    }
    assert_eq!(gone.len(), pass.dropped, "{pass:?}");
    // A quarter of each node's sample (its running tasks counted): about a quarter of the ended tasks, the oldest.
    assert!((90..=160).contains(&gone.len()), "{} dropped", gone.len());
    assert!(gone.iter().all(|n| *n < 240), "only the oldest ended tasks go: {gone:?}");
}
