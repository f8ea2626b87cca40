//! LCTL v3.0: chain tracing for multi-agent LLM workflows.
//!
//! LCTL is a YAML metadata block that travels with each agent-to-agent handoff and answers
//! "why did agent 3 do that?": who acted ([`TraceStep`]), which facts were known and how
//! surely ([`Fact`], [`Confidence`]), and what the receiver must keep ([`Handoff`]).
//!
//! ```text
//!  YAML ──parse──▶ LctlDocument ──check_document──▶ Report (findings, parallel groups, failures)
//!                      │   ▲
//!                      │   └── Reception::next_hop ◀── receive (ack, concerns)
//!                      ├──check_chain (several hops)──▶ Report
//!                      ├──render──▶ Mermaid | DOT | timeline
//!                      └──to_yaml / to_value──▶ YAML | JSON (LDP semantic frame)
//! ```
//!
//! - **Codec** ([`parse`], [`LctlDocument::to_yaml`]): the full and the minimal format; unknown
//!   keys are kept in order; errors name the path (`facts.F2.confidence: expected 0.0-1.0`).
//! - **Rules** ([`check_document`]): the confidence table as typed [`PropagationAdvice`], the
//!   propagation rule ([`propagate`], [`check_propagation`]; inside a document, facts against the
//!   step that produced them and against their `derived_from` parents), handoff references, step
//!   order, parallel groups and their merges.
//! - **Chain checker** ([`check_chain`]): lost critical facts, unverified confidence rises,
//!   unrecorded modifications, step gaps, across hops.
//! - **Receiving protocol** ([`receive`]): concerns below 0.7, the `lctl_ack`, the next hop.
//! - **Rendering** ([`render`]): every step with its facts and `duration_ms`; a minimal document
//!   (no trace) as its sending agent and facts.
//! - **LDP** ([`ldp`]): lineage and contract to LCTL, LCTL inside a TASK_SUBMIT semantic frame.
//!
//! ```
//! use ldp_lctl::{check_document, parse, receive, render, RenderFormat, Severity};
//!
//! let yaml = r#"
//! lctl: "3.0"
//! chain: {id: auth-001, step: 1, from: analyzer, to: fixer}
//! trace:
//!   - {step: 1, agent: analyzer, action: "Scanned code", confidence: 0.9, facts_added: [F1]}
//! facts:
//!   F1: {text: "SQL injection in UserController.py:45", confidence: 0.65, source: analyzer}
//! handoff: {critical_facts: [F1]}
//! instruction: Fix the SQL injection vulnerability
//! "#;
//! let doc = parse(yaml)?;
//! let report = check_document(&doc);
//! assert!(!report.has_errors());
//! // A critical fact at 0.65 is "moderate": the table says verify before acting.
//! assert_eq!(report.findings[0].severity, Severity::Note);
//!
//! let reception = receive(yaml, None)?;
//! assert_eq!(reception.ack.agent, "fixer");
//! assert_eq!(reception.ack.step, 2);
//! assert_eq!(reception.ack.confidence_concerns[0].as_str(), "F1");
//!
//! assert!(render(&doc, RenderFormat::Mermaid).starts_with("flowchart TD"));
//! assert_eq!(parse(&doc.to_yaml()?)?, doc);
//! # Ok::<(), ldp_lctl::LctlError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

mod chain;
mod codec;
mod confidence;
mod error;
pub mod ldp;
mod model;
#[cfg(feature = "otel")]
pub mod otel;
mod receive;
mod render;
mod rules;
mod value;

pub use chain::check_chain;
pub use codec::{parse, parse_yaml_value};
pub use confidence::{Confidence, ConfidenceBand, PropagationAdvice, check_propagation, propagate};
pub use error::LctlError;
pub use model::{
    AckStatus, Analysis, Chain, ChainStatus, EndpointKeys, Fact, FactId, FactRegistry, Handoff, LCTL_VERSION, LctlAck,
    LctlDocument, Purpose, TraceStep,
};
pub use receive::{ConfidenceConcern, NewFact, NextStep, Reception, receive, receive_document, receiver_step};
pub use render::{RenderFormat, render, render_dot, render_mermaid, render_timeline};
pub use rules::{
    FailureReport, Finding, MergePoint, ParallelBranch, ParallelGroup, Report, Rule, Severity, check_document,
    failure_report, parallel_groups,
};
pub use value::{Mapping, Value};
