//! The direct encoder of envelopes (the same bytes as their `Serialize`, property-tested) and the estimate of an
//! encoded envelope's size, for its output buffer.

use std::ops::Range;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Body, Envelope};
use crate::contract::{DelegationContract, FailurePolicy};
use crate::json::{Compact, Error as JsonError, Writer, write_str};
use crate::provenance::Provenance;

/// Bytes of an encoded envelope beyond its strings and payload: member names, quotes, punctuation (about 170 for a
/// TASK_SUBMIT), and room for a few escapes.
pub(super) const ENCODE_OVERHEAD: usize = 224;

/// The same for a contract: its member names, punctuation and the longest numbers it can hold (about 230 with every
/// member present).
pub(super) const CONTRACT_OVERHEAD: usize = 280;

/// The bytes a member adds besides its value: `,"` + name + `":`.
pub(super) const fn member_len(name: &str) -> usize {
    name.len() + 4
}

/// The longest number an optional numeric member can hold (`u64::MAX` has 20 digits; an `f64` up to 24 characters).
pub(super) const NUMBER: usize = 24;

/// An upper bound of the encoded length of a provenance record whose strings need no escapes.
pub(super) fn provenance_estimate(p: &Provenance) -> usize {
    // An optional string member: its name, its value and the value's quotes.
    let string = |name: usize, value: &Option<String>| value.as_ref().map_or(0, |v| name + v.len() + 2);
    let number = |name: usize, present: bool| if present { name + NUMBER } else { 0 };
    let list = |name: usize, entries: usize| if entries == 0 { 0 } else { name + 2 + entries - 1 };
    let evidence = p.evidence.iter().map(|e| {
        const FIXED: usize = member_len("source") + member_len("kind") + 4 + 2;
        FIXED
            + e.source.len()
            + e.kind.len()
            + string(const { member_len("uri") }, &e.uri)
            + string(const { member_len("summary") }, &e.summary)
    });
    let lineage = p.lineage.iter().map(|l| {
        const FIXED: usize = member_len("delegate_id") + member_len("model_version") + member_len("step") + 6 + 2;
        const STATUS: usize = member_len("verification_status") + "\"human_verified\"".len();
        FIXED
            + STATUS
            + l.delegate_id.len()
            + l.model_version.len()
            + l.step.len()
            + string(const { member_len("timestamp") }, &l.timestamp)
            + string(const { member_len("skill") }, &l.skill)
            + number(const { member_len("confidence") }, l.confidence.is_some())
            + number(const { member_len("tokens_used") }, l.tokens_used.is_some())
            + number(const { member_len("cost_usd") }, l.cost_usd.is_some())
            + number(const { member_len("latency_ms") }, l.latency_ms.is_some())
    });
    const FIXED: usize = member_len("produced_by")
        + member_len("model_version")
        + 4
        + member_len("payload_mode_used")
        + "\"embedding_hints\"".len()
        + member_len("verified")
        + "false".len()
        + 2;
    FIXED
        + p.produced_by.len()
        + p.model_version.len()
        + number(const { member_len("confidence") }, p.confidence.is_some())
        + string(const { member_len("session_id") }, &p.session_id)
        + string(const { member_len("timestamp") }, &p.timestamp)
        + p.verification_status.map_or(0, |_| const { member_len("verification_status") + "\"human_verified\"".len() })
        + list(const { member_len("evidence") }, p.evidence.len())
        + evidence.sum::<usize>()
        + list(const { member_len("lineage") }, p.lineage.len())
        + lineage.sum::<usize>()
        + number(const { member_len("tokens_used") }, p.tokens_used.is_some())
        + number(const { member_len("cost_usd") }, p.cost_usd.is_some())
        + string(const { member_len("contract_id") }, &p.contract_id)
        + p.contract_satisfied.map_or(0, |_| const { member_len("contract_satisfied") + "false".len() })
        + list(const { member_len("contract_violations") }, p.contract_violations.len())
        + p.contract_violations.iter().map(|v| v.len() + 3).sum::<usize>()
        + p.usage_receipt.as_deref().map_or(0, receipt_len)
}

/// The encoded length of a usage receipt whose strings need no escapes (members of later versions estimated).
pub(super) fn receipt_len(r: &crate::UsageReceipt) -> usize {
    // Member names, quotes and punctuation of every known member, and the longest numbers they can hold.
    const FIXED: usize = member_len("usage_receipt") + 220 + 6 * NUMBER;
    let strings = [&r.delegate_id, &r.session_id, &r.task_id, &r.issued_at]
        .into_iter()
        .chain([&r.model, &r.signature_algorithm, &r.signature].into_iter().flatten())
        .map(String::len)
        .sum::<usize>();
    FIXED + strings + r.extra.keys().map(|k| k.len() + 64).sum::<usize>()
}

/// Writes `env` as its `Serialize` implementation would (the same bytes, property-tested), with the envelope's and
/// the common bodies' member names written as constants rather than escaped one by one through serde: that was
/// most of the cost of encoding a message whose payload is already text.
pub(super) fn write_envelope(w: &mut Writer<'_, Compact>, env: &Envelope) -> Result<(), JsonError> {
    str_member(w.out, b"{\"message_id\":", &env.message_id);
    str_member(w.out, b",\"session_id\":", &env.session_id);
    str_member(w.out, b",\"from\":", &env.from);
    str_member(w.out, b",\"to\":", &env.to);
    w.out.extend_from_slice(b",\"body\":");
    let result_provenance = write_body(w, &env.body)?;
    w.out.extend_from_slice(b",\"payload_mode\":\"");
    // Mode names are plain ASCII.
    w.out.extend_from_slice(env.payload_mode.as_str().as_bytes());
    str_member(w.out, b"\",\"timestamp\":", &env.timestamp);
    w.out.extend_from_slice(b",\"provenance\":");
    match (&env.provenance, &env.body, result_provenance) {
        (None, _, _) => w.out.extend_from_slice(b"null"),
        // A TASK_RESULT carries its provenance twice (the reference transcript, step 6): the body's bytes, copied.
        (Some(p), Body::TaskResult(r), Some(written)) if r.provenance == *p => w.out.extend_from_within(written),
        (Some(p), _, _) => write_provenance(w, p)?,
    }
    for (name, value) in [("signature", &env.signature), ("signature_algorithm", &env.signature_algorithm)] {
        if let Some(value) = value {
            member(w, name);
            write_str(w.out, value);
        }
    }
    if let Some(nonce) = &env.nonce {
        str_member(w.out, b",\"nonce\":", nonce);
    }
    write_members(w, &env.extensions)?;
    w.out.push(b'}');
    Ok(())
}

/// Writes `prefix` (the punctuation and the quoted name of a member, such as `,"objective":`) and a string value.
fn str_member(out: &mut Vec<u8>, prefix: &[u8], value: &str) {
    out.extend_from_slice(prefix);
    write_str(out, value);
}

/// Writes a provenance record as its `Serialize` does (the same members, order and omissions); evidence and lineage
/// entries, rare, go through `Serialize`.
pub(super) fn write_provenance(w: &mut Writer<'_, Compact>, p: &Provenance) -> Result<(), JsonError> {
    str_member(w.out, b"{\"produced_by\":", &p.produced_by);
    str_member(w.out, b",\"model_version\":", &p.model_version);
    w.out.extend_from_slice(b",\"payload_mode_used\":\"");
    // Mode names are plain ASCII.
    w.out.extend_from_slice(p.payload_mode_used.as_str().as_bytes());
    w.out.push(b'"');
    if let Some(confidence) = p.confidence {
        w.out.extend_from_slice(b",\"confidence\":");
        confidence.serialize(&mut *w)?;
    }
    w.out.extend_from_slice(if p.verified { b",\"verified\":true" } else { b",\"verified\":false" });
    for (name, value) in [("session_id", &p.session_id), ("timestamp", &p.timestamp)] {
        if let Some(value) = value {
            member(w, name);
            write_str(w.out, value);
        }
    }
    if let Some(status) = p.verification_status {
        w.out.extend_from_slice(b",\"verification_status\":\"");
        // Status names are plain ASCII.
        w.out.extend_from_slice(status.as_str().as_bytes());
        w.out.push(b'"');
    }
    if !p.evidence.is_empty() {
        w.out.extend_from_slice(b",\"evidence\":");
        p.evidence.serialize(&mut *w)?;
    }
    if !p.lineage.is_empty() {
        w.out.extend_from_slice(b",\"lineage\":");
        p.lineage.serialize(&mut *w)?;
    }
    if let Some(tokens) = p.tokens_used {
        w.out.extend_from_slice(b",\"tokens_used\":");
        tokens.serialize(&mut *w)?;
    }
    if let Some(cost) = p.cost_usd {
        w.out.extend_from_slice(b",\"cost_usd\":");
        cost.serialize(&mut *w)?;
    }
    if let Some(contract_id) = &p.contract_id {
        str_member(w.out, b",\"contract_id\":", contract_id);
    }
    if let Some(satisfied) = p.contract_satisfied {
        w.out.extend_from_slice(if satisfied {
            b",\"contract_satisfied\":true"
        } else {
            b",\"contract_satisfied\":false"
        });
    }
    if !p.contract_violations.is_empty() {
        w.out.extend_from_slice(b",\"contract_violations\":");
        write_strings(w, &p.contract_violations);
    }
    if let Some(receipt) = &p.usage_receipt {
        w.out.extend_from_slice(b",\"usage_receipt\":");
        receipt.serialize(&mut *w)?;
    }
    w.out.push(b'}');
    Ok(())
}

/// Writes `,"name":`.
pub(super) fn member(w: &mut Writer<'_, Compact>, name: &str) {
    w.out.push(b',');
    write_str(w.out, name);
    w.out.push(b':');
}

/// Writes each member of `map` after a `,`.
pub(super) fn write_members(w: &mut Writer<'_, Compact>, map: &Map<String, Value>) -> Result<(), JsonError> {
    for (name, value) in map {
        member(w, name);
        value.serialize(&mut *w)?;
    }
    Ok(())
}

/// Writes a body; for a TASK_RESULT, returns where its provenance's bytes are in the output.
pub(super) fn write_body(w: &mut Writer<'_, Compact>, body: &Body) -> Result<Option<Range<usize>>, JsonError> {
    let mut provenance = None;
    match body {
        Body::TaskSubmit(b) => {
            str_member(w.out, b"{\"type\":\"TASK_SUBMIT\",\"task_id\":", &b.task_id);
            str_member(w.out, b",\"skill\":", &b.skill);
            w.out.extend_from_slice(b",\"input\":");
            w.out.extend_from_slice(b.input.json().as_bytes());
            if let Some(contract) = &b.contract {
                w.out.extend_from_slice(b",\"contract\":");
                write_contract(w, contract)?;
            }
            write_members(w, &b.extra)?;
        }
        Body::TaskResult(b) => {
            str_member(w.out, b"{\"type\":\"TASK_RESULT\",\"task_id\":", &b.task_id);
            w.out.extend_from_slice(b",\"output\":");
            w.out.extend_from_slice(b.output.json().as_bytes());
            w.out.extend_from_slice(b",\"provenance\":");
            let start = w.out.len();
            write_provenance(w, &b.provenance)?;
            provenance = Some(start..w.out.len());
            write_members(w, &b.extra)?;
        }
        other => return other.serialize(&mut *w).map(|()| None),
    }
    w.out.push(b'}');
    Ok(provenance)
}

/// Writes the contract as its derived `Serialize` does.
pub(super) fn write_contract(w: &mut Writer<'_, Compact>, c: &DelegationContract) -> Result<(), JsonError> {
    str_member(w.out, b"{\"contract_id\":", &c.contract_id);
    str_member(w.out, b",\"objective\":", &c.objective);
    w.out.extend_from_slice(b",\"success_criteria\":");
    write_strings(w, &c.success_criteria);
    w.out.extend_from_slice(b",\"policy\":{\"failure_policy\":");
    let policy = &c.policy;
    w.out.extend_from_slice(match policy.failure_policy {
        FailurePolicy::FailClosed => b"\"fail_closed\"",
        FailurePolicy::FailOpen => b"\"fail_open\"",
    });
    if let Some(budget) = &policy.budget {
        w.out.extend_from_slice(b",\"budget\":{");
        if let Some(tokens) = budget.max_tokens {
            w.out.extend_from_slice(b"\"max_tokens\":");
            tokens.serialize(&mut *w)?;
        }
        if let Some(cost) = budget.max_cost_usd {
            if budget.max_tokens.is_some() {
                w.out.push(b',');
            }
            w.out.extend_from_slice(b"\"max_cost_usd\":");
            cost.serialize(&mut *w)?;
        }
        w.out.push(b'}');
    }
    if !policy.safety_constraints.is_empty() {
        w.out.extend_from_slice(b",\"safety_constraints\":");
        write_strings(w, &policy.safety_constraints);
    }
    if let Some(depth) = policy.max_delegation_depth {
        w.out.extend_from_slice(b",\"max_delegation_depth\":");
        depth.serialize(&mut *w)?;
    }
    w.out.push(b'}');
    if let Some(deadline) = &c.deadline {
        str_member(w.out, b",\"deadline\":", deadline);
    }
    if let Some(created_at) = &c.created_at {
        str_member(w.out, b",\"created_at\":", created_at);
    }
    w.out.push(b'}');
    Ok(())
}

pub(super) fn write_strings(w: &mut Writer<'_, Compact>, strings: &[String]) {
    w.out.push(b'[');
    for (i, s) in strings.iter().enumerate() {
        if i > 0 {
            w.out.push(b',');
        }
        write_str(w.out, s);
    }
    w.out.push(b']');
}
