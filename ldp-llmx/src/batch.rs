//! Batches (spec section 5): ACTs sent together under a HEADER `b` id, answered by OBS blocks in any order.

use crate::error::LlmxError;
use crate::message::{Act, Block, Message, Obs};

/// Tracks one batch of ACTs and matches OBS `ai` to ACT `i` as responses arrive, in any order and across messages.
///
/// ```
/// let req = ldp_llmx::parse(
///     "HEADER:{f:Claude,t:ALL,s:1,b:B1}\nACT:{i:A1,op:read,tgt:\"p:a.ts\"}\nACT:{i:A2,op:read,tgt:\"p:b.ts\"}",
/// )?;
/// let mut batch = ldp_llmx::BatchTracker::new(&req)?;
/// let resp = ldp_llmx::parse("HEADER:{f:Gemini,t:Claude,s:2,b:B1}\nOBS:{ai:A2,s:OK,c:{lines:50}}")?;
/// let report = batch.observe(&resp)?;
/// assert_eq!(report.matched, vec!["A2".to_owned()]);
/// assert_eq!(batch.missing(), vec!["A1"]);
/// # Ok::<(), ldp_llmx::LlmxError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BatchTracker {
    batch: Option<String>,
    actions: Vec<(Act, Option<Obs>)>,
}

/// What one call to [`BatchTracker::observe`] found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObserveReport {
    /// Action ids answered for the first time, in the order their OBS appeared.
    pub matched: Vec<String>,
    /// `ai` values that name no ACT of the batch.
    pub unknown: Vec<String>,
    /// Action ids answered again (the first answer is kept).
    pub duplicates: Vec<String>,
    /// OBS blocks with no `ai`, which cannot be attributed in a batch.
    pub unattributed: usize,
}

impl BatchTracker {
    /// Starts tracking the ACTs of `request`. Every ACT in a batch needs a unique `i`, or responses could not be told
    /// apart.
    pub fn new(request: &Message) -> Result<Self, LlmxError> {
        let mut actions: Vec<(Act, Option<Obs>)> = Vec::new();
        for block in &request.blocks {
            if let Block::Act(act) = block {
                let Some(id) = &act.id else {
                    return Err(LlmxError::Batch("every ACT in a batch needs an id (i)".to_owned()));
                };
                if actions.iter().any(|(a, _)| a.id.as_ref() == Some(id)) {
                    return Err(LlmxError::Batch(format!("duplicate action id '{id}' in batch")));
                }
                actions.push((act.clone(), None));
            }
        }
        Ok(BatchTracker { batch: request.header.batch.clone(), actions })
    }

    /// The batch id (HEADER `b`) of the request, if any.
    pub fn batch_id(&self) -> Option<&str> {
        self.batch.as_deref()
    }

    /// Matches the OBS blocks of a response. A response whose HEADER `b` differs from the request's is refused whole.
    pub fn observe(&mut self, response: &Message) -> Result<ObserveReport, LlmxError> {
        if response.header.batch != self.batch {
            return Err(LlmxError::Batch(format!(
                "response batch {:?} does not match request batch {:?}",
                response.header.batch, self.batch
            )));
        }
        let mut report = ObserveReport::default();
        for block in &response.blocks {
            let Block::Obs(obs) = block else { continue };
            let Some(ai) = &obs.action_id else {
                report.unattributed += 1;
                continue;
            };
            match self.actions.iter_mut().find(|(a, _)| a.id.as_ref() == Some(ai)) {
                None => report.unknown.push(ai.clone()),
                Some((_, slot @ None)) => {
                    *slot = Some(obs.clone());
                    report.matched.push(ai.clone());
                }
                Some((_, Some(_))) => report.duplicates.push(ai.clone()),
            }
        }
        Ok(report)
    }

    /// Ids of the ACTs not answered yet, in request order.
    pub fn missing(&self) -> Vec<&str> {
        self.actions.iter().filter(|(_, o)| o.is_none()).filter_map(|(a, _)| a.id.as_deref()).collect()
    }

    /// Whether every ACT has its OBS.
    pub fn is_complete(&self) -> bool {
        self.actions.iter().all(|(_, o)| o.is_some())
    }

    /// Each ACT with its OBS, in request order (not arrival order).
    pub fn pairs(&self) -> impl Iterator<Item = (&Act, Option<&Obs>)> {
        self.actions.iter().map(|(a, o)| (a, o.as_ref()))
    }
}
