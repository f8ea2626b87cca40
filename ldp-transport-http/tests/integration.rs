//! `ldp-transport-http`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/prometheus.rs"]
mod prometheus;

mod hardening;
mod hostile_delegate;
mod interop_python;
mod interop_rust_ref;
mod long_task;
mod metrics;
mod oversize;
mod protocol_limits;
mod server;
mod socket;
mod tls;
