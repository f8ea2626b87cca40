//! Delegation contracts (paper section 3.1) and their validation against a result's provenance.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::criteria::CheckableCriteria;
use crate::identity::{null_as_default, object_or_default, optional_object};
use crate::provenance::Provenance;
use crate::raw::RawJson;
use crate::time::parse_timestamp;
use crate::{Code, Error, LdpError};

/// What happens when a result violates its contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Reject: the result becomes a `policy` / `CONTRACT_VIOLATED` error with the output as `partial_output`.
    FailClosed,
    /// Accept, recording `contract_satisfied = false` and the violations in provenance (the reference default).
    #[default]
    FailOpen,
}

/// Budget limits of a contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Maximum tokens the delegate may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Maximum cost in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// The policy part of a contract.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContractPolicy {
    /// Fail closed or open.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<FailurePolicy>")]
    pub failure_policy: FailurePolicy,
    /// Budget limits.
    #[serde(default, deserialize_with = "optional_object", skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Free-form safety constraints.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub safety_constraints: Vec<String>,
    /// How many times the task may be re-delegated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delegation_depth: Option<u32>,
}

/// A delegation contract carried by TASK_SUBMIT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DelegationContract {
    /// Contract id.
    pub contract_id: String,
    /// What the task should achieve.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<String>")]
    pub objective: String,
    /// Free-form success criteria.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<Vec<String>>")]
    pub success_criteria: Vec<String>,
    /// Failure policy, budget, constraints.
    #[serde(default, deserialize_with = "object_or_default")]
    #[schemars(with = "Option<ContractPolicy>")]
    pub policy: ContractPolicy,
    /// Deadline (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Creation time (ISO 8601); the Rust reference SDK requires it, the paper's example omits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

impl DelegationContract {
    /// A fail-open contract with no limits.
    pub fn new(contract_id: impl Into<String>, objective: impl Into<String>) -> Self {
        Self {
            contract_id: contract_id.into(),
            objective: objective.into(),
            success_criteria: Vec::new(),
            policy: ContractPolicy::default(),
            deadline: None,
            created_at: None,
        }
    }

    /// Sets the failure policy.
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy.failure_policy = policy;
        self
    }

    /// Sets the budget.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.policy.budget = Some(budget);
        self
    }

    /// Sets the deadline.
    pub fn with_deadline(mut self, deadline: impl Into<String>) -> Self {
        self.deadline = Some(deadline.into());
        self
    }

    /// Sets the maximum delegation depth.
    pub fn with_max_delegation_depth(mut self, depth: u32) -> Self {
        self.policy.max_delegation_depth = Some(depth);
        self
    }

    /// Parses the deadline once, so results can be checked cheaply ([`ContractLimits::check`]), and checks that every
    /// `check:` predicate of the criteria and constraints parses ([`crate::criteria`]): a contract that cannot be
    /// checked is refused before any work, by the initiator and by the responder.
    pub fn limits(&self) -> Result<ContractLimits, Error> {
        self.checkable_criteria()?;
        Ok(ContractLimits {
            deadline: self.deadline.as_deref().map(parse_timestamp).transpose()?,
            budget: self.policy.budget.unwrap_or_default(),
            max_delegation_depth: self.policy.max_delegation_depth,
            failure_policy: self.policy.failure_policy,
        })
    }
}

impl DelegationContract {
    /// The machine-checkable (`check:`) entries of `success_criteria` and `policy.safety_constraints`, parsed.
    pub fn checkable_criteria(&self) -> Result<CheckableCriteria, Error> {
        CheckableCriteria::parse(&self.success_criteria, &self.policy.safety_constraints)
    }
}

/// One way a result broke its contract.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ContractViolation {
    /// The result arrived after the deadline.
    DeadlineExceeded,
    /// More tokens were used than allowed.
    TokenBudgetExceeded {
        /// Tokens used.
        used: u64,
        /// The limit.
        max: u64,
    },
    /// More money was spent than allowed.
    CostBudgetExceeded {
        /// Cost reported.
        used: f64,
        /// The limit.
        max: f64,
    },
    /// The lineage is deeper than allowed.
    DelegationDepthExceeded {
        /// Hops recorded.
        depth: usize,
        /// The limit.
        max: u32,
    },
    /// A `check:` success criterion does not hold for the output.
    CriterionFailed {
        /// The criterion, as written in the contract.
        criterion: String,
        /// Why it does not hold.
        reason: String,
    },
    /// A `check:` safety constraint does not hold for the output.
    SafetyConstraintViolated {
        /// The constraint, as written in the contract.
        constraint: String,
        /// Why it does not hold.
        reason: String,
    },
}

impl ContractViolation {
    /// The code recorded in `contract_violations`.
    pub const fn code(&self) -> &'static str {
        match self {
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::TokenBudgetExceeded { .. } => "BUDGET_TOKENS_EXCEEDED",
            Self::CostBudgetExceeded { .. } => "BUDGET_COST_EXCEEDED",
            Self::DelegationDepthExceeded { .. } => "DELEGATION_DEPTH_EXCEEDED",
            Self::CriterionFailed { .. } => "SUCCESS_CRITERION_FAILED",
            Self::SafetyConstraintViolated { .. } => "SAFETY_CONSTRAINT_VIOLATED",
        }
    }
}

impl std::fmt::Display for ContractViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeadlineExceeded => f.write_str("deadline exceeded"),
            Self::TokenBudgetExceeded { used, max } => write!(f, "used {used} tokens, budget {max}"),
            Self::CostBudgetExceeded { used, max } => write!(f, "cost {used} USD, budget {max} USD"),
            Self::DelegationDepthExceeded { depth, max } => write!(f, "delegation depth {depth}, maximum {max}"),
            Self::CriterionFailed { criterion, reason } => {
                write!(f, "success criterion {criterion:?} failed: {reason}")
            }
            Self::SafetyConstraintViolated { constraint, reason } => {
                write!(f, "safety constraint {constraint:?} violated: {reason}")
            }
        }
    }
}

/// A contract's checkable limits with the deadline already parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContractLimits {
    /// Parsed deadline.
    pub deadline: Option<OffsetDateTime>,
    /// Budget limits.
    pub budget: Budget,
    /// Maximum delegation depth.
    pub max_delegation_depth: Option<u32>,
    /// What to do on violation.
    pub failure_policy: FailurePolicy,
}

/// The result of checking a result against its contract.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContractCheck {
    /// Every violation found (empty when satisfied).
    pub violations: Vec<ContractViolation>,
}

impl ContractCheck {
    /// Whether the contract holds.
    pub fn satisfied(&self) -> bool {
        self.violations.is_empty()
    }
}

impl ContractLimits {
    /// Checks a result received at `received_at` against the deadline, budget and delegation depth.
    ///
    /// Usage the delegate did not report is not counted as a violation: the paper's validation is best-effort and
    /// client-side.
    pub fn check(&self, provenance: &Provenance, received_at: OffsetDateTime) -> ContractCheck {
        let mut violations = Vec::new();
        if self.deadline.is_some_and(|d| received_at > d) {
            violations.push(ContractViolation::DeadlineExceeded);
        }
        if let (Some(used), Some(max)) = (provenance.tokens_used, self.budget.max_tokens)
            && used > max
        {
            violations.push(ContractViolation::TokenBudgetExceeded { used, max });
        }
        if let (Some(used), Some(max)) = (provenance.cost_usd, self.budget.max_cost_usd)
            && used > max
        {
            violations.push(ContractViolation::CostBudgetExceeded { used, max });
        }
        if let Some(max) = self.max_delegation_depth
            && provenance.lineage.len() > max as usize
        {
            violations.push(ContractViolation::DelegationDepthExceeded { depth: provenance.lineage.len(), max });
        }
        ContractCheck { violations }
    }
}

/// What a receiver does with a checked result under the contract's failure policy.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums, reason = "a checked result either stands or is rejected; there is no third answer")]
pub enum ContractOutcome {
    /// The result stands; provenance records whether the contract was satisfied and any violations.
    Accepted(Provenance),
    /// `fail_closed` and violated: the typed error to surface, with the output as `partial_output`.
    Rejected(LdpError),
}

/// Checks an output against the contract's machine-checkable criteria and constraints (`check:` entries); free-form
/// entries are not checked. An output that is not JSON a `Value` can hold fails every predicate it is given.
pub fn check_output(criteria: &CheckableCriteria, output: &RawJson) -> Vec<ContractViolation> {
    if criteria.is_empty() {
        return Vec::new();
    }
    let value = output.to_value();
    let run = |criterion: &crate::criteria::Criterion| match &value {
        Ok(value) => criterion.evaluate(value),
        Err(e) => Err(format!("the output cannot be read: {e}")),
    };
    let success = criteria.success.iter().filter_map(|c| {
        run(c).err().map(|reason| ContractViolation::CriterionFailed { criterion: c.source().to_owned(), reason })
    });
    let safety = criteria.safety.iter().filter_map(|c| {
        run(c)
            .err()
            .map(|reason| ContractViolation::SafetyConstraintViolated { constraint: c.source().to_owned(), reason })
    });
    success.chain(safety).collect()
}

/// Applies a contract to a received result: records `contract_id`, `contract_satisfied` and `contract_violations`
/// in provenance, and under `fail_closed` turns a violation into `policy` / `CONTRACT_VIOLATED`. Besides the
/// limits (deadline, budget, delegation depth) it evaluates the `check:` predicates of the success criteria and
/// safety constraints on the output ([`check_output`]); the error of a `fail_closed` violation names each failed
/// predicate.
pub fn apply_contract(
    contract: &DelegationContract,
    limits: &ContractLimits,
    output: &RawJson,
    mut provenance: Provenance,
    received_at: OffsetDateTime,
) -> ContractOutcome {
    let mut check = limits.check(&provenance, received_at);
    // `limits` came from `contract.limits()`, which parsed these already; a contract that no longer parses counts
    // as violated rather than silently unchecked.
    match contract.checkable_criteria() {
        Ok(criteria) => check.violations.extend(check_output(&criteria, output)),
        Err(e) => check
            .violations
            .push(ContractViolation::CriterionFailed { criterion: "check:".to_owned(), reason: e.to_string() }),
    }
    provenance.contract_id = Some(contract.contract_id.clone());
    provenance.contract_satisfied = Some(check.satisfied());
    provenance.contract_violations = check.violations.iter().map(|v| v.code().to_owned()).collect();
    if check.satisfied() || limits.failure_policy == FailurePolicy::FailOpen {
        return ContractOutcome::Accepted(provenance);
    }
    let details: Vec<String> = check.violations.iter().map(|v| v.to_string()).collect();
    let error = LdpError::policy(
        Code::ContractViolated,
        format!("contract {} violated: {}", contract.contract_id, details.join("; ")),
    );
    // The output goes along as far as a `Value` can hold it (text with a number like 1e400 cannot be).
    ContractOutcome::Rejected(match output.to_value() {
        Ok(partial) => error.with_partial_output(partial),
        Err(_) => error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PayloadMode;
    use crate::time::parse_timestamp;

    fn prov(tokens: u64) -> Provenance {
        let mut p = Provenance::new("ldp:delegate:d", "v", PayloadMode::Text);
        p.tokens_used = Some(tokens);
        p
    }

    #[test]
    fn paper_example_parses() {
        let c: DelegationContract = serde_json::from_str(
            r#"{"contract_id":"ctr-7f3a","objective":"Summarize the quarterly report","success_criteria":["<=300 words","include revenue figures"],
            "policy":{"failure_policy":"fail_closed","budget":{"max_tokens":6000,"max_cost_usd":0.05},"safety_constraints":["no speculative projections"],"max_delegation_depth":2},
            "deadline":"2026-03-15T18:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(c.policy.failure_policy, FailurePolicy::FailClosed);
        assert_eq!(c.policy.budget.unwrap().max_tokens, Some(6000));
    }

    #[test]
    fn paper_trace_fail_closed_budget_violation() {
        let c = DelegationContract::new("c1", "summarise")
            .with_failure_policy(FailurePolicy::FailClosed)
            .with_budget(Budget { max_tokens: Some(6000), max_cost_usd: None });
        let limits = c.limits().unwrap();
        let now = parse_timestamp("2026-03-15T10:00:00Z").unwrap();
        let out = RawJson::from(serde_json::json!({"summary": "..."}));
        match apply_contract(&c, &limits, &out, prov(8200), now) {
            ContractOutcome::Rejected(e) => {
                assert_eq!(e.code, Code::ContractViolated);
                assert_eq!(e.category, crate::ErrorCategory::Policy);
                assert_eq!(e.partial_output, Some(out.to_value().unwrap()));
            }
            other => panic!("expected rejection, got {other:?}"),
        }
    }

    #[test]
    fn fail_open_records_violations() {
        let c = DelegationContract::new("c1", "s").with_deadline("2026-03-15T18:00:00Z");
        let limits = c.limits().unwrap();
        let late = parse_timestamp("2026-03-15T18:00:01Z").unwrap();
        match apply_contract(&c, &limits, &RawJson::null(), prov(1), late) {
            ContractOutcome::Accepted(p) => {
                assert_eq!(p.contract_satisfied, Some(false));
                assert_eq!(p.contract_violations, vec!["DEADLINE_EXCEEDED".to_owned()]);
                assert_eq!(p.contract_id.as_deref(), Some("c1"));
            }
            other => panic!("expected acceptance, got {other:?}"),
        }
    }

    #[test]
    fn bad_deadline_is_a_typed_error() {
        let c = DelegationContract::new("c", "o").with_deadline("tomorrow");
        assert!(matches!(c.limits(), Err(Error::InvalidTimestamp(_))));
    }

    #[test]
    fn checkable_criteria_are_evaluated_on_the_output() {
        let mut c = DelegationContract::new("c2", "summarise").with_failure_policy(FailurePolicy::FailClosed);
        c.success_criteria = vec![
            "include revenue figures".to_owned(), // free-form: not checked
            "check: has revenue".to_owned(),
            "check: words(summary) <= 3".to_owned(),
        ];
        c.policy.safety_constraints = vec!["check: not matches /(?i)guaranteed returns/".to_owned()];
        let limits = c.limits().unwrap();
        let now = parse_timestamp("2026-03-15T10:00:00Z").unwrap();

        let good = RawJson::from(serde_json::json!({"revenue": 4, "summary": "revenue rose"}));
        assert!(
            matches!(apply_contract(&c, &limits, &good, prov(1), now), ContractOutcome::Accepted(p) if p.contract_satisfied == Some(true))
        );

        // fail_closed: the error names each failed predicate and carries the output.
        let bad = RawJson::from(serde_json::json!({"summary": "guaranteed returns for everyone"}));
        match apply_contract(&c, &limits, &bad, prov(1), now) {
            ContractOutcome::Rejected(e) => {
                assert_eq!(e.code, Code::ContractViolated);
                for named in ["check: has revenue", "check: words(summary) <= 3", "guaranteed returns"] {
                    assert!(e.message.contains(named), "{named} not in {}", e.message);
                }
                assert_eq!(e.partial_output, Some(bad.to_value().unwrap()));
            }
            other => panic!("expected rejection, got {other:?}"),
        }

        // fail_open: recorded in provenance, the result stands.
        c.policy.failure_policy = FailurePolicy::FailOpen;
        let limits = c.limits().unwrap();
        match apply_contract(&c, &limits, &bad, prov(1), now) {
            ContractOutcome::Accepted(p) => {
                assert_eq!(p.contract_satisfied, Some(false));
                assert_eq!(
                    p.contract_violations,
                    ["SUCCESS_CRITERION_FAILED", "SUCCESS_CRITERION_FAILED", "SAFETY_CONSTRAINT_VIOLATED"]
                );
            }
            other => panic!("expected acceptance, got {other:?}"),
        }
    }

    #[test]
    fn an_unparseable_predicate_makes_the_contract_invalid() {
        let mut c = DelegationContract::new("c3", "o");
        c.success_criteria = vec!["check: words <=".to_owned()];
        let err = c.limits().unwrap_err();
        assert!(matches!(err, Error::InvalidCriterion { .. }), "{err}");
        assert_eq!(LdpError::from(&err).code, Code::ContractViolated);
    }
}
