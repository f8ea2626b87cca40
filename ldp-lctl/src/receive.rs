//! The spec's receiving protocol: parse, load the trace, check critical facts, acknowledge,
//! and emit the next hop's document.

use crate::model::{AckStatus, Chain, Fact, FactId, Handoff, LctlAck, LctlDocument, TraceStep};
use crate::rules::{Report, check_document};
use crate::{Confidence, ConfidenceBand, LctlError, Mapping, PropagationAdvice, check_propagation};

/// A loaded fact whose confidence is below the receiving threshold (0.7).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfidenceConcern {
    /// The fact.
    pub fact: FactId,
    /// Its confidence.
    pub confidence: Confidence,
    /// What the confidence table advises for it.
    pub advice: PropagationAdvice,
}

/// Everything a receiving agent learns from an incoming document.
#[derive(Debug, Clone, PartialEq)]
pub struct Reception {
    /// The parsed document, trace included (step 2, "load trace").
    pub document: LctlDocument,
    /// Rule findings on the incoming document.
    pub report: Report,
    /// Loaded facts below 0.7 (step 3).
    pub concerns: Vec<ConfidenceConcern>,
    /// The acknowledgement to send back (step 4).
    pub ack: LctlAck,
}

/// Runs the receiving protocol on YAML text.
///
/// `receiver` names the receiving agent; `None` takes `chain.target`.
pub fn receive(yaml: &str, receiver: Option<&str>) -> Result<Reception, LctlError> {
    receive_document(crate::parse(yaml)?, receiver)
}

/// Runs the receiving protocol on an already-parsed document.
///
/// The receiver loads the handoff's critical facts (all registry facts when there is no
/// handoff); those below 0.7 become concerns, listed in the ack's `confidence_concerns`.
pub fn receive_document(document: LctlDocument, receiver: Option<&str>) -> Result<Reception, LctlError> {
    let chain = document
        .chain
        .as_ref()
        .ok_or_else(|| LctlError::InvalidRequest("cannot acknowledge: the document has no chain".into()))?;
    let agent = receiver.map(str::to_owned).or_else(|| chain.target.clone()).ok_or_else(|| {
        LctlError::InvalidRequest("cannot acknowledge: no receiver given and chain.target is not set".into())
    })?;
    let facts_loaded: Vec<FactId> = match &document.handoff {
        Some(handoff) if !handoff.critical_facts.is_empty() => {
            handoff.critical_facts.iter().filter(|id| document.facts.contains(id)).cloned().collect()
        }
        _ => document.facts.iter().map(|(id, _)| id.clone()).collect(),
    };
    let concerns: Vec<ConfidenceConcern> = facts_loaded
        .iter()
        .filter_map(|id| {
            let fact = document.facts.get(id)?;
            (fact.confidence < Confidence::RECEIVING_CONCERN_THRESHOLD).then(|| ConfidenceConcern {
                fact: id.clone(),
                confidence: fact.confidence,
                advice: fact.confidence.advice(),
            })
        })
        .collect();
    let ack = LctlAck {
        chain_id: chain.id.clone(),
        step: receiver_step(&document),
        agent,
        status: AckStatus::Received,
        facts_loaded,
        confidence_concerns: concerns.iter().map(|c| c.fact.clone()).collect(),
        extra: Mapping::new(),
    };
    let report = check_document(&document);
    Ok(Reception { document, report, concerns, ack })
}

/// The step number the receiver works at.
///
/// The spec uses `chain.step` both for the sender's step (Example 1: step 2 sent by the
/// step-2 agent, acknowledged as step 3) and for the receiver's (Example 2: the trace ends
/// at 3, `chain.step` is 4). The receiver's step is therefore the later of "one past the
/// trace" and `chain.step`; without a trace it is one past `chain.step`.
pub fn receiver_step(document: &LctlDocument) -> u32 {
    let chain_step = document.chain.as_ref().and_then(|c| c.step);
    match (document.last_trace_step(), chain_step) {
        (Some(last), Some(step)) => (last.saturating_add(1)).max(step),
        (Some(last), None) => last.saturating_add(1),
        (None, Some(step)) => step.saturating_add(1),
        (None, None) => 1,
    }
}

/// A fact the receiving agent establishes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    /// Its id.
    pub id: FactId,
    /// The fact; `source` and `step` are filled in when left empty.
    pub fact: Fact,
    /// Registry facts it was derived from; its confidence must respect the propagation rule
    /// against each of them and the step's own confidence.
    pub derived_from: Vec<FactId>,
}

/// What the receiving agent did, to be appended as the next hop's trace step.
#[derive(Debug, Clone, PartialEq)]
pub struct NextStep {
    /// The acting agent (usually the ack's agent).
    pub agent: String,
    /// What it did.
    pub action: String,
    /// Its own confidence in the step.
    pub confidence: Confidence,
    /// The next receiver.
    pub target: Option<String>,
    /// Facts it established.
    pub new_facts: Vec<NewFact>,
    /// Registry facts it re-examined, with their updated content.
    pub updated_facts: Vec<(FactId, Fact)>,
    /// Facts to add to the critical list (earlier critical facts always stay critical).
    pub critical_facts: Vec<FactId>,
    /// Facts to add to the context list.
    pub context_facts: Vec<FactId>,
    /// Warnings for the next receiver.
    pub warnings: Vec<String>,
    /// The next instruction.
    pub instruction: Option<String>,
    /// How long the step took.
    pub duration_ms: Option<u64>,
}

impl NextStep {
    /// A step with no facts, lists or instruction yet.
    pub fn new(agent: impl Into<String>, action: impl Into<String>, confidence: Confidence) -> Self {
        NextStep {
            agent: agent.into(),
            action: action.into(),
            confidence,
            target: None,
            new_facts: Vec::new(),
            updated_facts: Vec::new(),
            critical_facts: Vec::new(),
            context_facts: Vec::new(),
            warnings: Vec::new(),
            instruction: None,
            duration_ms: None,
        }
    }
}

impl Reception {
    /// Emits the document for the next hop: the trace extended by `next`, the registry updated,
    /// earlier critical facts kept critical, and facts below 0.40 that are not critical dropped
    /// (the table's "do not propagate").
    pub fn next_hop(&self, next: NextStep) -> Result<LctlDocument, LctlError> {
        let step_number = self.ack.step;
        let previous = &self.document;
        let mut facts = previous.facts.clone();
        for (id, mut fact) in next.updated_facts.iter().cloned() {
            if !facts.contains(&id) {
                return Err(LctlError::InvalidRequest(format!("cannot update {id}: it is not in the registry")));
            }
            fact.source.get_or_insert_with(|| next.agent.clone());
            fact.step.get_or_insert(step_number);
            facts.insert(id, fact);
        }
        for new in &next.new_facts {
            for parent_id in &new.derived_from {
                let parent = previous.facts.get(parent_id).ok_or_else(|| {
                    LctlError::InvalidRequest(format!(
                        "{} is derived from {parent_id}, which is not in the registry",
                        new.id
                    ))
                })?;
                check_propagation(parent.confidence, next.confidence, new.fact.confidence).map_err(|bound| {
                    LctlError::InvalidRequest(format!(
                        "{} claims {} but the propagation rule caps it at {bound} (parent {parent_id}, own {})",
                        new.id, new.fact.confidence, next.confidence
                    ))
                })?;
            }
            let mut fact = new.fact.clone();
            fact.source.get_or_insert_with(|| next.agent.clone());
            fact.step.get_or_insert(step_number);
            facts.insert(new.id.clone(), fact);
        }

        let mut critical: Vec<FactId> = previous.critical_facts().to_vec();
        for id in &next.critical_facts {
            if !critical.contains(id) {
                critical.push(id.clone());
            }
        }
        let mut context: Vec<FactId> = previous.handoff.as_ref().map(|h| h.context_facts.clone()).unwrap_or_default();
        for id in &next.context_facts {
            if !context.contains(id) {
                context.push(id.clone());
            }
        }
        context.retain(|id| !critical.contains(id));
        let uncertain: Vec<FactId> = facts
            .iter()
            .filter(|(id, fact)| fact.confidence.band() == ConfidenceBand::Uncertain && !critical.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &uncertain {
            facts.remove(id);
        }
        context.retain(|id| facts.contains(id));

        let mut step = TraceStep::new(step_number, next.agent.clone());
        step.action = Some(next.action);
        step.confidence = Some(next.confidence);
        step.facts_added = next.new_facts.iter().map(|n| n.id.clone()).collect();
        step.facts_modified = next.updated_facts.iter().map(|(id, _)| id.clone()).collect();
        step.duration_ms = next.duration_ms;
        let mut trace = previous.trace.clone();
        trace.push(step);

        let previous_chain = previous.chain.clone().unwrap_or_default();
        let chain = Chain {
            step: Some(step_number),
            source: Some(next.agent),
            target: next.target,
            parallel_merge: None,
            ..previous_chain
        };
        let handoff = Handoff {
            critical_facts: critical,
            context_facts: context,
            warnings: next.warnings,
            extra: previous.handoff.as_ref().map(|h| h.extra.clone()).unwrap_or_default(),
        };
        Ok(LctlDocument {
            purpose: previous.purpose.clone(),
            chain: Some(chain),
            trace,
            facts,
            handoff: Some(handoff),
            instruction: next.instruction,
            analysis: None,
            ack: None,
            extra: previous.extra.clone(),
        })
    }
}
