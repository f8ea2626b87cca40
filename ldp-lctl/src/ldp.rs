//! LCTL and LDP: an LCTL document from a task's provenance lineage and delegation contract,
//! and LCTL carried inside a `TASK_SUBMIT` semantic frame.
//!
//! The mapping from LDP to LCTL:
//!
//! | LDP | LCTL |
//! |-----|------|
//! | each `provenance.lineage` entry | a trace step (`agent` = `delegate_id`, `action` = its `step` and `skill`, `confidence`, `duration_ms` = `latency_ms`), with `model_version`, `timestamp`, `verification_status`, `skill`, `tokens_used` and `cost_usd` kept as extra keys |
//! | a lineage entry with a confidence | a fact `H<n>` (n = its step) at that confidence, what the hop answered and how, added by its step and handed off as a context fact |
//! | `provenance.produced_by` / `confidence` | the last trace step's agent and confidence, and `chain.source` |
//! | `contract.objective` | `instruction` |
//! | `contract.success_criteria` | facts `C1`, `C2`, ... at confidence 1.0, all critical (a requirement must survive every hop) |
//! | `contract.policy` (safety constraints, budget, deadline, failure policy) | `handoff.warnings` |
//! | lineage longer than `max_delegation_depth` | one more warning |
//! | the contract itself | top-level `ldp_contract`, so the document round-trips it |
//!
//! In a semantic frame the document travels as a JSON object under [`FRAME_KEY`], next to the
//! frame's required `task_type` and `instruction`.

use ldp_types::{
    Body, DelegationContract, Envelope, FailurePolicy, LineageEntry, Provenance, SemanticFrame, TaskSubmit,
};
use std::fmt::Write as _;

use serde::Deserialize;

use crate::model::{Chain, EndpointKeys, Fact, FactId, FactRegistry, Handoff, LctlDocument, Purpose, TraceStep};
use crate::{Confidence, LctlError, Mapping, Reception, Value, receive_document};

/// The semantic-frame key under which LCTL travels.
pub const FRAME_KEY: &str = "lctl";

/// The top-level LCTL key that keeps the originating delegation contract.
pub const CONTRACT_KEY: &str = "ldp_contract";

/// Builds an LCTL document describing how a task travelled through LDP delegates.
///
/// `chain_id` names the workflow (a task id or contract id works well). Either source may be
/// absent: a submitted task has a contract but no provenance yet; a result has provenance.
pub fn document_from_ldp(
    chain_id: impl Into<String>,
    provenance: Option<&Provenance>,
    contract: Option<&DelegationContract>,
) -> Result<LctlDocument, LctlError> {
    let mut trace: Vec<TraceStep> = Vec::new();
    let mut facts = FactRegistry::new();
    let mut hop_facts = Vec::new();
    if let Some(provenance) = provenance {
        for entry in &provenance.lineage {
            let number = step_number(trace.len())?;
            let step = hop_step(number, entry, &mut facts)?;
            hop_facts.extend(step.facts_added.iter().cloned());
            trace.push(step);
        }
        let producer_is_last = trace.last().is_some_and(|step| step.agent == provenance.produced_by);
        if !producer_is_last {
            let mut step = TraceStep::new(step_number(trace.len())?, provenance.produced_by.clone());
            step.action = Some("produced the result".to_owned());
            step.extra.insert("model_version", Value::String(provenance.model_version.clone()));
            trace.push(step);
        }
        if let Some(last) = trace.last_mut() {
            if let Some(score) = provenance.confidence {
                last.confidence = Some(Confidence::new(score.get())?);
            }
            last.extra.insert("verification_status", Value::String(wire_name(&provenance.verification_status())?));
        }
    }

    let mut critical = Vec::new();
    let mut warnings = Vec::new();
    if let Some(contract) = contract {
        for (index, criterion) in contract.success_criteria.iter().enumerate() {
            let id = FactId::new(format!("C{}", index + 1))?;
            facts.insert(id.clone(), Fact::new(format!("Success criterion: {criterion}"), Confidence::CERTAIN));
            critical.push(id);
        }
        let policy = &contract.policy;
        warnings.extend(policy.safety_constraints.iter().map(|constraint| format!("Safety constraint: {constraint}")));
        if let Some(budget) = &policy.budget {
            if let Some(tokens) = budget.max_tokens {
                warnings.push(format!("Budget: at most {tokens} tokens"));
            }
            if let Some(cost) = budget.max_cost_usd {
                warnings.push(format!("Budget: at most ${cost} USD"));
            }
        }
        if let Some(deadline) = &contract.deadline {
            warnings.push(format!("Deadline: {deadline}"));
        }
        if policy.failure_policy == FailurePolicy::FailClosed {
            warnings.push("Failure policy: fail_closed (a violation rejects the result)".to_owned());
        }
        if let (Some(max), Some(provenance)) = (policy.max_delegation_depth, provenance)
            && provenance.delegation_depth() > max as usize
        {
            warnings.push(format!(
                "Delegation depth {} exceeds the contract's maximum of {max}",
                provenance.delegation_depth()
            ));
        }
    }

    let mut extra = Mapping::new();
    if let Some(contract) = contract {
        extra.insert(CONTRACT_KEY, to_lctl_value(contract)?);
    }
    let chain = Chain {
        id: chain_id.into(),
        step: trace.last().map(|step| step.step),
        source: provenance.map(|p| p.produced_by.clone()),
        target: None,
        status: None,
        failed_at_step: None,
        parallel_merge: None,
        endpoint_keys: EndpointKeys::SourceTarget,
        extra: Mapping::new(),
    };
    let handoff = (!critical.is_empty() || !warnings.is_empty() || !hop_facts.is_empty()).then(|| Handoff {
        critical_facts: critical,
        context_facts: hop_facts,
        warnings,
        extra: Mapping::new(),
    });
    Ok(LctlDocument {
        purpose: Some(Purpose::Observability),
        chain: Some(chain),
        trace,
        facts,
        handoff,
        instruction: contract.map(|c| c.objective.clone()).filter(|objective| !objective.is_empty()),
        analysis: None,
        ack: None,
        extra,
    })
}

/// The trace step of one lineage entry: the delegate as its agent, its step and skill as the action, its confidence
/// and latency as the step's, and the entry's other facts (model, time, verification status, tokens, cost) as extra
/// keys. A hop that reported a confidence also adds a fact `H<n>` at that confidence, saying what it answered and
/// how (registered in `facts`): the chain then carries each hop's result, checked by the LCTL confidence rules.
fn hop_step(number: u32, entry: &LineageEntry, facts: &mut FactRegistry) -> Result<TraceStep, LctlError> {
    let mut step = TraceStep::new(number, entry.delegate_id.clone());
    step.action = Some(match &entry.skill {
        Some(skill) => format!("{} {skill}", entry.step),
        None => entry.step.clone(),
    });
    step.confidence = entry.confidence.map(|score| Confidence::new(score.get())).transpose()?;
    step.duration_ms = entry.latency_ms;
    step.extra.insert("model_version", Value::String(entry.model_version.clone()));
    if let Some(timestamp) = &entry.timestamp {
        step.extra.insert("timestamp", Value::String(timestamp.clone()));
    }
    let status = wire_name(&entry.verification_status)?;
    step.extra.insert("verification_status", Value::String(status.clone()));
    if let Some(skill) = &entry.skill {
        step.extra.insert("skill", Value::String(skill.clone()));
    }
    if let Some(tokens) = entry.tokens_used {
        step.extra.insert("tokens_used", i64::try_from(tokens).map_or(Value::Float(tokens as f64), Value::Integer));
    }
    if let Some(cost) = entry.cost_usd {
        step.extra.insert("cost_usd", Value::Float(cost));
    }
    if let Some(confidence) = step.confidence {
        let id = FactId::new(format!("H{number}"))?;
        let mut text =
            format!("{} answered {}: {status}", entry.delegate_id, entry.skill.as_deref().unwrap_or(&entry.step));
        if let Some(tokens) = entry.tokens_used {
            let _ = write!(text, ", {tokens} tokens");
        }
        if let Some(cost) = entry.cost_usd {
            let _ = write!(text, ", ${cost} USD");
        }
        if let Some(ms) = entry.latency_ms {
            let _ = write!(text, ", {ms} ms");
        }
        let mut fact = Fact::new(text, confidence);
        fact.source = Some(entry.delegate_id.clone());
        fact.step = Some(number);
        facts.insert(id.clone(), fact);
        step.facts_added.push(id);
    }
    Ok(step)
}

/// The delegation contract an LCTL document carries under [`CONTRACT_KEY`], if any.
pub fn contract_of(document: &LctlDocument) -> Result<Option<DelegationContract>, LctlError> {
    let Some(value) = document.extra.get(CONTRACT_KEY) else {
        return Ok(None);
    };
    let json = serde_json::to_value(value).map_err(|e| LctlError::Serialize(e.to_string()))?;
    serde_json::from_value(json)
        .map(Some)
        .map_err(|e| LctlError::schema(CONTRACT_KEY, format!("a delegation contract ({e})")))
}

/// Puts `document` into a semantic frame under [`FRAME_KEY`].
pub fn attach_to_frame(frame: &mut SemanticFrame, document: &LctlDocument) -> Result<(), LctlError> {
    let json = serde_json::to_value(document.to_value()).map_err(|e| LctlError::Serialize(e.to_string()))?;
    frame.fields.insert(FRAME_KEY.to_owned(), json);
    Ok(())
}

/// Reads the LCTL document of a semantic frame; `Ok(None)` when the frame carries none.
///
/// The document may be a JSON object or a YAML string. Error paths are prefixed with
/// `lctl.` so they point into the frame.
pub fn read_from_frame(frame: &SemanticFrame) -> Result<Option<LctlDocument>, LctlError> {
    let Some(json) = frame.fields.get(FRAME_KEY) else {
        return Ok(None);
    };
    let decoded = match json {
        serde_json::Value::String(yaml) => crate::parse(yaml),
        other => Value::deserialize(other)
            .map_err(|e| LctlError::schema("", e.to_string()))
            .and_then(LctlDocument::from_value),
    };
    decoded.map(Some).map_err(|err| prefix_path(err, FRAME_KEY))
}

/// Puts `document` into a `TASK_SUBMIT` whose input is a semantic frame.
///
/// Fails when the input is not a valid semantic frame (an object with non-empty `task_type`
/// and `instruction`): text-mode input has nowhere to carry metadata.
pub fn attach_to_task(submit: &mut TaskSubmit, document: &LctlDocument) -> Result<(), LctlError> {
    let mut frame = SemanticFrame::from_input(&submit.input)
        .map_err(|e| LctlError::schema("input", format!("a semantic frame ({e})")))?;
    attach_to_frame(&mut frame, document)?;
    submit.input = frame.to_input().into();
    Ok(())
}

/// Reads the LCTL document a `TASK_SUBMIT` carries; `Ok(None)` when its input has none.
pub fn read_from_task(submit: &TaskSubmit) -> Result<Option<LctlDocument>, LctlError> {
    if !submit.input.to_value().is_ok_and(|input| input.get(FRAME_KEY).is_some()) {
        return Ok(None);
    }
    let frame = SemanticFrame::from_input(&submit.input)
        .map_err(|e| LctlError::schema("input", format!("a semantic frame ({e})")))?;
    read_from_frame(&frame).map_err(|err| prefix_path(err, "input"))
}

/// Reads the LCTL document of an envelope whose body is a `TASK_SUBMIT`.
pub fn read_from_envelope(envelope: &Envelope) -> Result<Option<LctlDocument>, LctlError> {
    match &envelope.body {
        Body::TaskSubmit(submit) => read_from_task(submit),
        _ => Ok(None),
    }
}

/// The delegate side: reads a task's LCTL and runs the receiving protocol as `receiver`
/// (usually the delegate's own id).
pub fn receive_task(submit: &TaskSubmit, receiver: &str) -> Result<Option<Reception>, LctlError> {
    read_from_task(submit)?.map(|document| receive_document(document, Some(receiver))).transpose()
}

fn prefix_path(err: LctlError, prefix: &str) -> LctlError {
    match err {
        LctlError::Schema { path, expected } => {
            let path = if path == "(document)" { prefix.to_owned() } else { format!("{prefix}.{path}") };
            LctlError::Schema { path, expected }
        }
        other => other,
    }
}

fn step_number(existing_steps: usize) -> Result<u32, LctlError> {
    u32::try_from(existing_steps + 1).map_err(|_| LctlError::InvalidRequest("lineage is too long to number".into()))
}

fn wire_name<T: serde::Serialize>(value: &T) -> Result<String, LctlError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => Ok(name),
        Ok(other) => Ok(other.to_string()),
        Err(e) => Err(LctlError::Serialize(e.to_string())),
    }
}

fn to_lctl_value<T: serde::Serialize>(value: &T) -> Result<Value, LctlError> {
    let json = serde_json::to_value(value).map_err(|e| LctlError::Serialize(e.to_string()))?;
    Value::deserialize(json).map_err(|e| LctlError::Serialize(e.to_string()))
}
