//! `ldp-transport-ws`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../ldp-transport-http/tests/support/prometheus.rs"]
mod prometheus;
mod support;

mod bad_input;
mod flow;
mod hardening;
mod metrics;
mod replicas;
mod resume;
mod scenarios;
mod tls;
