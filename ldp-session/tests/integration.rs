//! `ldp-session`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod bad_input;
mod checked;
mod context;
mod contracts;
mod fallback;
mod hardening;
mod held_results;
mod lifecycle;
mod random_sequences;
mod receipts;
mod resume;
mod runtime;
mod security;
mod shared_state;
mod tasks;
mod trust;
mod ttl;
