//! `ldp-store`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/backends.rs"]
mod backends;
#[path = "common/records.rs"]
mod records;
#[path = "common/runtimes.rs"]
mod runtimes;
#[cfg(feature = "sqlite")]
#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/session_ttl.rs"]
mod session_ttl;

mod backends_agree;
mod long_tasks;
mod redis_connections;
mod redis_room;
mod redis_round_trips;
mod redis_sentinel;
mod redis_session_ttl;
mod replay_expiry;
mod replicas;
mod session_usage;
mod sqlite_batches;
mod sqlite_migration;
mod sqlite_stalls;
mod sqlite_wal;
mod sqlite_writes;
mod store_bound;
mod store_changes_nothing;
mod unsigned_dedupe;
