//! What the cross-backend tests share: a real `redis-server`, a runtime, a scratch directory for SQLite files
//! (removed on drop), the three backends opened empty, and a proptest run sized by `PROPTEST_CASES`.

use std::sync::Arc;

use ldp_session::store::Store;
use ldp_store::{MemoryStore, RedisStore, SqliteStore, StoreConfig};
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A `redis-server`, a two-worker runtime and a scratch directory, for one test.
pub struct Backends {
    pub redis: ldp_store::test_redis::RedisServer,
    pub rt: tokio::runtime::Runtime,
    pub dir: std::path::PathBuf,
}

impl Backends {
    /// Starts them; `name` tells this test's scratch directory from others'.
    pub fn start(name: &str) -> Self {
        let redis = ldp_store::test_redis::RedisServer::start().expect("a redis-server (scripts/redis-server.sh)");
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = std::env::temp_dir().join(format!("ldp-store-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { redis, rt, dir }
    }

    /// An SQLite store on the file `file` of the scratch directory.
    pub fn sqlite(&self, cfg: &StoreConfig, file: &str) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(&self.dir.join(file), cfg.clone()).unwrap())
    }

    /// A Redis store in `cfg`'s namespace.
    pub async fn redis(&self, cfg: &StoreConfig) -> Arc<dyn Store> {
        Arc::new(RedisStore::open(&self.redis.url(), cfg.clone()).await.unwrap())
    }

    /// The three backends, empty, for `cfg` (Redis: its namespace; SQLite: the file `file`).
    pub async fn open(&self, cfg: &StoreConfig, file: &str) -> Vec<(&'static str, Arc<dyn Store>)> {
        vec![
            ("memory", Arc::new(MemoryStore::new(cfg.clone()))),
            ("sqlite", self.sqlite(cfg, file)),
            ("redis", self.redis(cfg).await),
        ]
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `test` on `strategy`'s values, `PROPTEST_CASES` times (`default_cases` without it), with the case's number
/// (for a namespace or a file of its own); a failure panics with proptest's minimal case.
pub fn run_cases<S: Strategy>(
    default_cases: u32,
    strategy: S,
    test: impl Fn(usize, S::Value) -> Result<(), TestCaseError>,
) {
    let case = std::sync::atomic::AtomicUsize::new(0);
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default_cases);
    let mut runner = TestRunner::new(Config { cases, ..Config::default() });
    let outcome = runner.run(&strategy, |value| test(case.fetch_add(1, std::sync::atomic::Ordering::SeqCst), value));
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
