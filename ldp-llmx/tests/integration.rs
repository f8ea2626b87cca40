//! `ldp-llmx`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../benches/corpus.rs"]
mod corpus;

mod bridge;
mod errors;
mod golden;
mod properties;
mod spec_examples;
mod spec_fidelity;
