//! A conformance kit that anyone can point at any LDP implementation.
//!
//! A tour:
//! - [`catalogue`]: the requirement catalogue, frozen per spec version (LDP RFC 0.1 plus the provenance-paradox
//!   paper's extensions). Each [`Requirement`] has an id such as `LDP-IDENT-001`, the section and sentence it comes
//!   from, a [`Level`] (MUST, SHOULD, MAY, EXTENSION), the [`Feature`] it depends on, and the checks that exercise it.
//! - [`checks`]: each [`Check`] sends real messages through a raw probe (HTTP with `reqwest`, WebSocket with
//!   `tokio-tungstenite`) that can send malformed bytes, wrong content types and oversize bodies, and records every
//!   request and response as evidence. Every reply is validated against the JSON schemas of `ldp-types`; a
//!   violation is reported with its instance path.
//! - [`run`] / [`run_with_progress`]: runs the checks per transport with a timeout per request and per check and a
//!   deadline for the whole run ([`Config::deadline`]: a hung implementation costs that, not a timeout per check),
//!   then aggregates (a requirement passes only if it passes on every transport) and scores.
//! - Checks come in families, one module per requirement family (`checks/signing.rs`, `session.rs`,
//!   `correlation.rs`, `negotiation.rs`, `trust.rs`), each probing every variant an implementation guarding only
//!   the obvious case would let through: replays of every signed type, stale and future timestamps, empty, malformed,
//!   other-algorithm and tampered signatures, every way to name no session, look-alike trust domains, the
//!   initiator's preference order, unnegotiated modes. Media types are compared as RFC 9110 does (case-insensitive,
//!   parameters ignored).
//! - [`Report`]: per requirement, the verdict, how it counts, the explanations and the evidence; rendered as a table,
//!   JSON, JUnit or Markdown. It names the adoption profiles of RFC Appendix B the implementation meets
//!   ([`profiles`]).
//! - [`Baseline`]: an expected-failures file for CI, compared strictly both ways.
//! - TLS: `https://` and `wss://` endpoints are probed with the web PKI roots plus whatever [`Config::tls`] adds (a
//!   private CA, a client certificate for mutual TLS: `--ca-cert`, `--client-cert`, `--client-key` on the CLI). An
//!   endpoint whose certificate the kit does not trust is a connection error, not a report of failures.
//!
//! Scoring:
//! - a failed MUST or EXTENSION requirement is a **failure** (the run fails); a failed SHOULD is a **warning**; a
//!   failed MAY is informational;
//! - a requirement the kit cannot exercise is **NOT TESTABLE** and is scored exactly as a failure at its level,
//!   never silently skipped;
//! - **BLOCKED** is a requirement the kit could not exercise because another it depends on failed (no session could
//!   be established: LDP-SESS-001); the failure is counted once, on that cause. A requirement blocked by a cause
//!   that did not fail (or failed only at a lower level) is NOT TESTABLE instead;
//! - **SKIPPED** is only for a requirement that depends on a [`Feature`] the implementation does not claim; once it
//!   claims the feature (in its card or by its behaviour), the requirement is tested, and if the kit cannot test it
//!   (e.g. signing claimed but no `--secret` given) it is NOT TESTABLE.
//!
//! ```
//! use ldp_conformance::{CATALOGUE, Config, Format, Level, LevelFilter, TransportKind};
//!
//! let musts = CATALOGUE.iter().filter(|r| r.level == Level::Must).count();
//! assert!(musts >= 5);
//! let mut config = Config::new("http://127.0.0.1:8090");
//! config.transports = vec![TransportKind::Http, TransportKind::Ws];
//! config.level = LevelFilter::Should;
//! config.ttl_hint = Some(2);
//! # async fn example(config: Config) -> Result<(), ldp_conformance::RunError> {
//! let report = ldp_conformance::run(config).await?;
//! println!("{}", report.render(Format::Table));
//! std::process::exit(if report.passed() { 0 } else { 1 });
//! # }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

pub mod baseline;
pub mod catalogue;
pub mod checks;
mod ctx;
mod media;
mod probe;
pub mod profiles;
pub mod report;
mod rfc_schema;
mod runner;

pub use baseline::{Baseline, BaselineComparison, BaselineError, ExpectedFailure};
pub use catalogue::{CATALOGUE, Feature, Level, Requirement, SPEC_VERSION};
pub use checks::{CHECKS, Check};
pub use ctx::{Claims, Ctx, Finding, KIT_DELEGATE_ID, Status, UNTRUSTED_DOMAIN};
/// The TLS settings of [`Config::tls`] (the type the HTTP and WebSocket transports take too).
pub use ldp_transport_http::ClientTls;
pub use probe::{Exchange, ProbeError, RequestRecord, ResponseRecord, TransportKind};
pub use profiles::{PROFILES, Profile, ProfileResult};
pub use report::{Format, Report, RequirementResult, Summary, Verdict};
pub use runner::{
    Config, DEFAULT_DEADLINE, DEFAULT_OVERSIZE_BYTES, DEFAULT_TTL_PROBE_SECS, LevelFilter, ProgressEvent, RunError,
    base_url, run, run_with_progress,
};
