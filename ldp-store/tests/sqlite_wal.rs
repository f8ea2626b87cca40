//! The SQLite store's WAL file stays bounded while its writer commits without a pause. Checkpoints run on a thread of
//! their own, and a checkpoint there never catches up with a writer that keeps committing: without the writer's own
//! checkpoint past a threshold the WAL never starts over (a first version grew it to 445 MB in an 8-second bench).
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::TaskKey;
use ldp_session::shared::{SharedTask, SharedTaskStatus, TaskClaim, TaskFinish};
use ldp_session::store::Store;
use ldp_store::{SqliteStore, StoreConfig};
use ldp_types::PayloadMode;

/// Tasks claimed and finished by each of the concurrent writers: with 2 kB results, about 6 MB through a WAL of 1 MiB.
const TASKS_PER_WRITER: usize = 750;
const WRITERS: usize = 4;
/// The WAL's limit in this test (1 MiB), small so that the test writes it over many times.
const WAL_PAGES: u32 = 256;

/// A store in a directory of its own whose WAL is limited to `pages`, with the running and the finished record of
/// a task (a big result, so that every commit writes several pages).
struct Setup {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    wal: std::path::PathBuf,
    limit: u64,
    store: SqliteStore,
    running: SharedTask,
    done: SharedTask,
}

fn setup(name: &str, pages: u32) -> Setup {
    let dir = std::env::temp_dir().join(format!("ldp-store-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (path, wal) = (dir.join("state.db"), dir.join("state.db-wal"));
    let mut cfg = StoreConfig::new("ldp:delegate:wal");
    cfg.sqlite_wal_pages = pages;
    let store = SqliteStore::open(&path, cfg).unwrap();
    let running = SharedTask::running("replica-a", PayloadMode::Text);
    let mut done = running.clone();
    done.status = SharedTaskStatus::Completed;
    done.output = Some(format!("\"{}\"", "x".repeat(2000)));
    Setup { dir, path, wal, limit: u64::from(pages) * 4096, store, running, done }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_continuous_writes() {
    let Setup { dir, path, wal, limit, store, running, done } = setup("wal", WAL_PAGES);
    let store: Arc<dyn Store> = Arc::new(store);
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (store, running, done) = (store.clone(), running.clone(), done.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..TASKS_PER_WRITER {
                let key = TaskKey { session_id: format!("s{w}"), task_id: format!("t{i}") };
                let claim = store.claim_task(&key, &running, Duration::from_secs(30)).await.unwrap();
                assert_eq!(claim, TaskClaim::Claimed);
                assert_eq!(store.finish_task(&key, &done).await.unwrap(), TaskFinish::Recorded);
            }
        }));
    }
    let mut largest = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for w in writers {
        w.await.unwrap();
    }
    largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    let written = std::fs::metadata(&path).unwrap().len();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    // The WAL passes its limit by the commits that follow the one that crossed it until the writer's checkpoint
    // completes (it yields to one the checkpoint thread is running): a few commits of at most one operation per writer
    // each. Without the writer's checkpoint it grows with everything written (some 70 MB here).
    let bound = limit + 4096 * 64 * WRITERS as u64;
    assert!(
        largest <= bound,
        "the WAL grew to {largest} bytes (bound {bound}) in {:?}; the database file is {written} bytes",
        started.elapsed()
    );
    assert!(written > 4 * limit, "the test wrote too little ({written} bytes) to show the bound");
}

/// Another connection reading an old snapshot keeps every checkpoint from completing, so the WAL must grow while it
/// reads (nothing committed is dropped to stay small); once it ends, the writer's next checkpoint completes and the
/// WAL is truncated back to its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_pins_the_wal_until_it_ends_then_the_wal_starts_over() {
    let Setup { dir, path, wal, limit, store, running, done } = setup("wal-reader", 64);
    let write = |from: usize, to: usize| {
        let (store, running, done) = (&store, &running, &done);
        async move {
            for i in from..to {
                let key = TaskKey { session_id: "s".to_owned(), task_id: format!("t{i}") };
                let claim = store.claim_task(&key, running, Duration::from_secs(30)).await.unwrap();
                assert_eq!(claim, TaskClaim::Claimed);
                assert_eq!(store.finish_task(&key, done).await.unwrap(), TaskFinish::Recorded);
            }
        }
    };
    write(0, 10).await;
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let seen: i64 = reader.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
    assert!(seen > 0);
    write(10, 400).await;
    let pinned = std::fs::metadata(&wal).unwrap().len();
    assert!(pinned > 4 * limit, "the WAL is {pinned} bytes with a reader on an old snapshot: checkpoints skipped it");
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    // The writer tries again once the WAL has doubled: at most as many tasks again as the reader saw written.
    let mut written = 400;
    let mut after = pinned;
    while after > pinned / 2 && written < 800 {
        write(written, written + 10).await;
        written += 10;
        after = std::fs::metadata(&wal).unwrap().len();
    }
    for i in 0..written {
        let key = TaskKey { session_id: "s".to_owned(), task_id: format!("t{i}") };
        assert!(store.task(&key).await.unwrap().is_some(), "task {i} was lost");
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    // Truncated to the limit when it starts over (and written up to it again at most).
    assert!(after <= limit + 4096 * 64, "the WAL is still {after} bytes after the reader ended (limit {limit})");
}
