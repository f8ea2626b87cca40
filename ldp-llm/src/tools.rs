//! Delegates as the model's tools: the [`Toolbox`] an [`LlmDelegate`](crate::LlmDelegate) hands its model, and the
//! bounds of the loop that runs the model's calls as sub-tasks.
//!
//! A toolbox offers tools (a name, a description and an input schema each, from the skills of other delegates)
//! and runs a call as a sub-task under the contract the loop gives it: the budget the parent has left, the
//! delegation depth minus one ([`ldp_session::delegated_contract`], the rule the initiator applies too), the
//! parent's failure policy and deadline. How the sub-task travels (a router choosing by verified quality, cost and
//! trust with failover; a fixed URL; a bridge) is the toolbox's business.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskRequest;
use ldp_types::{Budget, DelegationContract, LdpError, Provenance, RawJson, codes};
use serde_json::Value;

use crate::backend::{ToolCall, ToolSpec};

/// The model's tools and how to run a call of one.
#[async_trait]
pub trait Toolbox: Send + Sync + fmt::Debug {
    /// The tools offered to the model (names unique, as providers require).
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs `call` as a sub-task of `call.parent`; its answer goes back to the model. A refusal or failure is
    /// typed: the model sees it too and may try otherwise.
    async fn run(&self, call: ToolRun<'_>) -> Result<ToolOutcome, LdpError>;
}

/// One call of a tool, as the loop hands it to the [`Toolbox`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolRun<'a> {
    /// The tool called.
    pub tool: &'a str,
    /// Its arguments, parsed (a JSON object, as the tool's input schema says).
    pub arguments: Value,
    /// The sub-task's contract: the parent's budget left, depth minus one, its failure policy and deadline.
    pub contract: Option<DelegationContract>,
    /// The task this call is part of.
    pub parent: &'a TaskRequest,
}

impl<'a> ToolRun<'a> {
    /// A call of `tool` with `arguments` under `contract`, as part of `parent` (for toolboxes' own tests and
    /// benchmarks; the loop builds these itself).
    pub fn new(tool: &'a str, arguments: Value, contract: Option<DelegationContract>, parent: &'a TaskRequest) -> Self {
        Self { tool, arguments, contract, parent }
    }
}

/// What a sub-task answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// Its output.
    pub output: RawJson,
    /// Its provenance, which becomes a lineage entry of the parent's result; `None` when the hop gave none.
    pub provenance: Option<Provenance>,
    /// The skill the sub-task ran, for the lineage entry; the tool's name when `None`.
    pub skill: Option<String>,
}

impl ToolOutcome {
    /// An outcome of `output` with `provenance`.
    pub fn new(output: RawJson, provenance: Option<Provenance>) -> Self {
        Self { output, provenance, skill: None }
    }

    /// Names the skill the sub-task ran (when the tool's name is not the skill's).
    #[must_use]
    pub fn with_skill(mut self, skill: impl Into<String>) -> Self {
        self.skill = Some(skill.into());
        self
    }
}

/// The bounds of the tool loop besides the contract's budget and depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolLoopLimits {
    /// Rounds of tool calls before the model must answer (default 8); a model that keeps calling is stopped with
    /// `BUDGET_EXCEEDED` and its text so far.
    pub max_rounds: u32,
    /// Calls in one round (default 16); more are answered with an error, not run.
    pub max_calls_per_round: usize,
    /// The longest one sub-task may take when the contract sets no deadline (default 120 s).
    pub call_timeout: Duration,
}

impl Default for ToolLoopLimits {
    fn default() -> Self {
        Self { max_rounds: 8, max_calls_per_round: 16, call_timeout: Duration::from_secs(120) }
    }
}

/// What the loop has spent so far, the model's answers and the sub-tasks together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spent {
    pub(crate) tokens: u64,
    pub(crate) cost_usd: f64,
    /// Whether any cost was known (a provider without a price, or a sub-task without one, adds none).
    pub(crate) costed: bool,
}

impl Spent {
    pub(crate) fn add(&mut self, tokens: Option<u64>, cost_usd: Option<f64>) {
        self.tokens = self.tokens.saturating_add(tokens.unwrap_or(0));
        if let Some(cost) = cost_usd {
            self.cost_usd += cost;
            self.costed = true;
        }
    }

    /// What `budget` has left after this, or `None` when it has run out.
    pub(crate) fn left(&self, budget: &Budget) -> Option<Budget> {
        let tokens = match budget.max_tokens {
            Some(max) if self.tokens >= max => return None,
            Some(max) => Some(max - self.tokens),
            None => None,
        };
        let cost = match budget.max_cost_usd {
            Some(max) if self.cost_usd >= max => return None,
            Some(max) => Some(max - self.cost_usd),
            None => None,
        };
        Some(Budget { max_tokens: tokens, max_cost_usd: cost })
    }
}

/// The contract of the sub-task for `call`: the parent's failure policy, deadline and success criteria left aside
/// (they are the parent's), `left` as its budget, and the depth the parent has left.
pub(crate) fn child_contract(
    parent: &TaskRequest,
    call: &ToolCall,
    left: Option<Budget>,
) -> Result<Option<DelegationContract>, LdpError> {
    let Some(own) = parent.contract.as_ref() else { return Ok(None) };
    let mut child = DelegationContract::new(format!("{}/{}", own.contract_id, call.id), format!("tool {}", call.name))
        .with_failure_policy(own.policy.failure_policy);
    child.policy.budget = left;
    child.deadline.clone_from(&own.deadline);
    ldp_session::delegated_contract(Some(child), Some(parent)).map_err(|e| {
        LdpError::policy(codes::DELEGATION_DEPTH_EXCEEDED, format!("tool {} cannot be delegated: {e}", call.name))
    })
}

/// A call's answer as the model reads it: the output's JSON text, or `{"error": ...}` for a refusal.
pub(crate) fn result_text(outcome: &Result<ToolOutcome, LdpError>) -> String {
    match outcome {
        Ok(out) => out.output.json().to_owned(),
        Err(e) => serde_json::json!({"error": {"code": e.code, "message": e.message}}).to_string(),
    }
}
