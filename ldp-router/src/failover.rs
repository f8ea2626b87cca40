//! Failover policy: what to do after a typed failure, as a pure function of the failure and the attempt so far.
//!
//! The decision table follows the paper's table of failure categories (section 3.3):
//!
//! | category     | first response                          | when that is used up          |
//! |--------------|-----------------------------------------|-------------------------------|
//! | `transport`  | retry the same delegate, with backoff   | reroute to another delegate   |
//! | `session`    | re-establish the session and retry      | reroute to another delegate   |
//! | `runtime`    | retry the same delegate, with backoff   | reroute to another delegate   |
//! | `capability` | reroute at once (no backoff)            | —                             |
//! | `quality`    | accept the result with a warning        | —                             |
//! | `policy`     | escalate to the caller                  | —                             |
//! | `identity`   | escalate to the caller                  | —                             |
//! | `security`   | escalate to the caller                  | —                             |
//!
//! A retry of the same delegate needs the error's `retryable` flag not to be `false` and the delegate to have had
//! fewer than `max_attempts_per_delegate` attempts; otherwise a retryable category is rerouted instead.
//!
//! Every retry or reroute is first checked against the task's contract: the attempt limit, the deadline (the
//! backoff must end before it) and the budget (what was spent plus the next attempt's estimate must fit); if one is
//! exhausted the answer is to give up with that reason.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use ldp_types::ErrorCategory;

use crate::RouterError;

/// A failure as reported: its category and the error's own `retryable` flag, which can veto a retry of the same
/// delegate (a transport failure the delegate marks non-retryable is rerouted instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The category, as the error carries it (`security` is decided like `identity`).
    pub category: ErrorCategory,
    /// The error's `retryable` flag, when it carries one.
    pub retryable: Option<bool>,
}

impl Failure {
    /// A failure of `category` without an explicit `retryable` flag.
    pub fn new(category: ErrorCategory) -> Self {
        Failure { category, retryable: None }
    }
}

/// Limits of retrying and rerouting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverPolicy {
    /// Attempts in all, counting the first.
    pub max_attempts: u32,
    /// Attempts on one delegate before a retryable failure is rerouted.
    pub max_attempts_per_delegate: u32,
    /// Backoff before the first retry.
    pub base_backoff: Duration,
    /// Ceiling of the exponential backoff.
    pub max_backoff: Duration,
}

impl Default for FailoverPolicy {
    fn default() -> Self {
        FailoverPolicy {
            max_attempts: 4,
            max_attempts_per_delegate: 2,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Where a task stands after a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptState {
    /// Attempts made so far, including the one that just failed (at least 1).
    pub attempts: u32,
    /// Of those, attempts on the delegate that just failed.
    pub attempts_on_delegate: u32,
    /// The contract's deadline.
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub deadline: Option<OffsetDateTime>,
    /// Spent so far, in US dollars.
    pub spent_usd: f64,
    /// The contract's `max_cost_usd`.
    pub budget_usd: Option<f64>,
    /// Estimated cost of one more attempt.
    pub next_attempt_cost_usd: f64,
}

impl AttemptState {
    /// The state after the first attempt failed, with no contract limits.
    pub fn first() -> Self {
        AttemptState {
            attempts: 1,
            attempts_on_delegate: 1,
            deadline: None,
            spent_usd: 0.0,
            budget_usd: None,
            next_attempt_cost_usd: 0.0,
        }
    }
}

/// Why a task is handed back instead of tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GiveUpReason {
    /// The category is never retried automatically (`policy`, `identity`): the caller must decide.
    NotRecoverable,
    /// The attempt limit is reached.
    AttemptsExhausted,
    /// The deadline has passed or would pass during the backoff.
    DeadlineExhausted,
    /// Another attempt would exceed the budget.
    BudgetExhausted,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
#[non_exhaustive]
pub enum FailoverAction {
    /// Try the same delegate again after `after`; `new_session` asks to re-establish the session first.
    Retry {
        /// The backoff.
        after: Duration,
        /// Whether to re-establish the session first.
        new_session: bool,
    },
    /// Select another delegate (excluding the one that failed) and submit there after `after`.
    Reroute {
        /// The backoff.
        after: Duration,
    },
    /// Keep the result but flag it as below the expected quality.
    AcceptWithWarning,
    /// Hand the failure back to the caller.
    Escalate {
        /// Why.
        reason: GiveUpReason,
    },
}

impl FailoverPolicy {
    /// Checks that the limits make sense.
    pub fn validate(&self) -> Result<(), RouterError> {
        if self.max_attempts == 0 || self.max_attempts_per_delegate == 0 {
            return Err(RouterError::InvalidConfig("attempt limits must be at least 1"));
        }
        Ok(())
    }

    /// The exponential backoff before attempt number `attempts + 1`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(31);
        self.base_backoff.saturating_mul(1_u32 << doublings).min(self.max_backoff)
    }

    /// Decides what follows `failure` in `state` at `now`.
    pub fn decide(&self, failure: Failure, state: &AttemptState, now: OffsetDateTime) -> FailoverAction {
        use ErrorCategory as C;
        let same_allowed =
            failure.retryable != Some(false) && state.attempts_on_delegate < self.max_attempts_per_delegate;
        let backoff = self.backoff(state.attempts);
        let wanted = match failure.category {
            C::Policy | C::Identity => return FailoverAction::Escalate { reason: GiveUpReason::NotRecoverable },
            C::Quality => return FailoverAction::AcceptWithWarning,
            C::Capability => FailoverAction::Reroute { after: Duration::ZERO },
            C::Runtime | C::Transport if same_allowed => FailoverAction::Retry { after: backoff, new_session: false },
            C::Session if same_allowed => FailoverAction::Retry { after: backoff, new_session: true },
            C::Runtime | C::Transport | C::Session => FailoverAction::Reroute { after: backoff },
            // `security` (a signature, replay or timestamp failure) is an identity failure to the router; a category
            // added later is not retried until a rule for it is written here.
            _ => return FailoverAction::Escalate { reason: GiveUpReason::NotRecoverable },
        };
        let after = match &wanted {
            FailoverAction::Retry { after, .. } | FailoverAction::Reroute { after } => *after,
            FailoverAction::AcceptWithWarning | FailoverAction::Escalate { .. } => Duration::ZERO,
        };
        if state.attempts >= self.max_attempts {
            return FailoverAction::Escalate { reason: GiveUpReason::AttemptsExhausted };
        }
        // An instant beyond the calendar's range is certainly past any deadline.
        let resume = time::Duration::try_from(after).ok().and_then(|d| now.checked_add(d));
        if let Some(deadline) = state.deadline
            && resume.is_none_or(|at| at >= deadline)
        {
            return FailoverAction::Escalate { reason: GiveUpReason::DeadlineExhausted };
        }
        if let Some(budget) = state.budget_usd
            && state.spent_usd + state.next_attempt_cost_usd > budget
        {
            return FailoverAction::Escalate { reason: GiveUpReason::BudgetExhausted };
        }
        wanted
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);

    fn decide(category: ErrorCategory, state: &AttemptState) -> FailoverAction {
        FailoverPolicy::default().decide(Failure::new(category), state, NOW)
    }

    #[test]
    fn decision_table_on_a_first_failure() {
        use ErrorCategory as C;
        use FailoverAction::*;
        let first = AttemptState::first();
        let backoff = Duration::from_millis(200);
        assert_eq!(decide(C::Transport, &first), Retry { after: backoff, new_session: false });
        assert_eq!(decide(C::Session, &first), Retry { after: backoff, new_session: true });
        assert_eq!(decide(C::Runtime, &first), Retry { after: backoff, new_session: false });
        assert_eq!(decide(C::Capability, &first), Reroute { after: Duration::ZERO });
        assert_eq!(decide(C::Quality, &first), AcceptWithWarning);
        assert_eq!(decide(C::Policy, &first), Escalate { reason: GiveUpReason::NotRecoverable });
        assert_eq!(decide(C::Identity, &first), Escalate { reason: GiveUpReason::NotRecoverable });
        assert_eq!(decide(C::Security, &first), Escalate { reason: GiveUpReason::NotRecoverable });
    }

    #[test]
    fn retryable_failures_reroute_once_the_delegate_has_had_its_attempts() {
        let state = AttemptState { attempts: 2, attempts_on_delegate: 2, ..AttemptState::first() };
        let after = Duration::from_millis(400);
        assert_eq!(decide(ErrorCategory::Transport, &state), FailoverAction::Reroute { after });
        assert_eq!(decide(ErrorCategory::Session, &state), FailoverAction::Reroute { after });
        assert_eq!(decide(ErrorCategory::Runtime, &state), FailoverAction::Reroute { after });
        let permanent = Failure { category: ErrorCategory::Runtime, retryable: Some(false) };
        let action = FailoverPolicy::default().decide(permanent, &AttemptState::first(), NOW);
        assert_eq!(action, FailoverAction::Reroute { after: Duration::from_millis(200) });
    }

    #[test]
    fn an_explicit_non_retryable_flag_reroutes_instead_of_retrying() {
        let failure = Failure { category: ErrorCategory::Transport, retryable: Some(false) };
        let action = FailoverPolicy::default().decide(failure, &AttemptState::first(), NOW);
        assert_eq!(action, FailoverAction::Reroute { after: Duration::from_millis(200) });
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let policy = FailoverPolicy::default();
        let steps: Vec<u128> = (1..=8).map(|a| policy.backoff(a).as_millis()).collect();
        assert_eq!(steps, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(policy.backoff(u32::MAX), policy.max_backoff);
    }

    #[test]
    fn attempt_limit_escalates() {
        let state = AttemptState { attempts: 4, attempts_on_delegate: 1, ..AttemptState::first() };
        assert_eq!(
            decide(ErrorCategory::Runtime, &state),
            FailoverAction::Escalate { reason: GiveUpReason::AttemptsExhausted }
        );
    }

    #[test]
    fn deadline_counts_the_backoff() {
        let state = AttemptState { deadline: Some(NOW + time::Duration::milliseconds(100)), ..AttemptState::first() };
        // The 200 ms backoff would end after the deadline...
        assert_eq!(
            decide(ErrorCategory::Transport, &state),
            FailoverAction::Escalate { reason: GiveUpReason::DeadlineExhausted }
        );
        // ...but a capability reroute needs no backoff.
        assert_eq!(decide(ErrorCategory::Capability, &state), FailoverAction::Reroute { after: Duration::ZERO });
        let passed = AttemptState { deadline: Some(NOW - time::Duration::seconds(1)), ..AttemptState::first() };
        assert_eq!(
            decide(ErrorCategory::Capability, &passed),
            FailoverAction::Escalate { reason: GiveUpReason::DeadlineExhausted }
        );
    }

    #[test]
    fn budget_must_cover_the_next_attempt() {
        let state = AttemptState {
            spent_usd: 0.04,
            budget_usd: Some(0.05),
            next_attempt_cost_usd: 0.02,
            ..AttemptState::first()
        };
        assert_eq!(
            decide(ErrorCategory::Runtime, &state),
            FailoverAction::Escalate { reason: GiveUpReason::BudgetExhausted }
        );
        let cheaper = AttemptState { next_attempt_cost_usd: 0.01, ..state };
        assert!(matches!(decide(ErrorCategory::Runtime, &cheaper), FailoverAction::Retry { .. }));
    }

    #[test]
    fn non_recoverable_categories_escalate_even_with_budget_left() {
        let state = AttemptState { budget_usd: Some(10.0), ..AttemptState::first() };
        assert_eq!(
            decide(ErrorCategory::Policy, &state),
            FailoverAction::Escalate { reason: GiveUpReason::NotRecoverable }
        );
    }

    #[test]
    fn zero_limits_are_invalid() {
        assert!(FailoverPolicy { max_attempts: 0, ..FailoverPolicy::default() }.validate().is_err());
        assert!(FailoverPolicy::default().validate().is_ok());
    }
}
