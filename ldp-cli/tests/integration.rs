//! `ldp-cli`'s integration tests, linked as one test binary: each file of `tests/` is a module of it (the
//! crate sets `autotests = false`), so the workspace builds and links one test binary per crate, not one per
//! file. A new test file is declared below; `scripts/check-test-modules` (run by `.ci/run`) fails until it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod a2a_bridge;
mod a2a_lifecycle;
mod attest_cli;
mod bridge_routing;
mod client_cli;
mod conformance_cli;
mod inspect_browser;
mod lctl_cli;
mod llmx_memory;
mod mcp_bridge;
mod otel_cli;
mod quotas;
mod serve;
mod serve_config;
mod serve_limits;
mod serve_llm;
mod serve_oauth;
mod serve_shutdown;
mod serve_store;
mod serve_store_conformance;
mod serve_tls;
