//! `route_and_submit`: select, connect, propose, submit, verify, learn, and fail over, within the task's contract.
//!
//! One task goes through these steps:
//!
//! 1. select a delegate for the skill at the clock's time (the request's filters, minus delegates that already
//!    failed with a reroute, with the budget ceiling lowered to what the contract's `max_cost_usd` has left);
//! 2. reuse or open the delegate's connection and session ([`Registry`] caches them);
//! 3. submit with the task's contract, bounded by the contract's deadline;
//! 4. on success, score the output with the [`OutcomeScorer`] and record the outcome, so the router learns;
//! 5. on failure, ask [`crate::FailoverPolicy::decide`]: retry the same delegate after the backoff (retryable
//!    `runtime`, `transport` and `session` failures; a session failure proposes a new session first), reroute to
//!    another delegate (capability failures at once; retryable ones once the delegate has had its attempts),
//!    accept a `quality` failure's partial output with a warning, or escalate (`policy`, `identity` and
//!    `security` failures, or the contract's attempts, deadline or budget used up).
//!
//! A capability failure is also recorded as an outcome of score 0 (source `validator: capability_failure`): the
//! delegate advertised a skill it could not perform, and should lose traffic for it. An identity failure counts
//! towards the registry's removal threshold. Each attempt is charged the chosen offer's `cost_usd` against the
//! budget (an estimate: LDP has no receipts).

use crate::receipts::{ReceiptPreference, ReceiptVerdict, predicate_score};
use ldp_session::TaskKey;
use std::time::Duration;

use async_trait::async_trait;
use ldp_types::{Code, DelegationContract, ErrorCategory, LdpError, Provenance, RawJson};
use serde_json::Value;
use tracing::Instrument;

use crate::registry::Registry;
use crate::{
    AttemptState, Decision, FailoverAction, Failure, GiveUpReason, Observation, Quality, RouterError, SelectionRequest,
    VerificationSource,
};

/// One task to route: the selection request (skill, strategy, filters), the input and the contract.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteTask {
    /// What to select by; its `skill` is the skill submitted.
    pub request: SelectionRequest,
    /// The task input.
    pub input: RawJson,
    /// The delegation contract: sent with every attempt, and its budget and deadline bound the whole routing.
    pub contract: Option<DelegationContract>,
    /// Whether delegates are chosen by their usage receipts ([`crate::receipts`]).
    pub receipts: ReceiptPreference,
}

impl RouteTask {
    /// A task for `skill` with the default (balanced) selection and no contract.
    pub fn new(skill: impl Into<String>, input: impl Into<RawJson>) -> Self {
        RouteTask {
            request: SelectionRequest::new(skill),
            input: input.into(),
            contract: None,
            receipts: ReceiptPreference::Any,
        }
    }

    /// Chooses delegates by their usage receipts.
    pub fn with_receipts(mut self, preference: ReceiptPreference) -> Self {
        self.receipts = preference;
        self
    }

    /// Selects with `request` (its skill becomes the task's skill).
    pub fn with_request(mut self, request: SelectionRequest) -> Self {
        self.request = request;
        self
    }

    /// Sets the contract.
    pub fn with_contract(mut self, contract: DelegationContract) -> Self {
        self.contract = Some(contract);
        self
    }

    /// The skill.
    pub fn skill(&self) -> &str {
        &self.request.skill
    }
}

/// A verifier's judgement of one output.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// How good the output is.
    pub score: Quality,
    /// Who judged it.
    pub source: VerificationSource,
}

/// The verification hook of [`Registry::route_and_submit`]: scores a completed task's output, or `None` when it
/// cannot judge (then nothing is recorded).
#[async_trait]
pub trait OutcomeScorer: Send + Sync {
    /// Scores `output`, produced for `task` with `provenance`.
    async fn score(&self, task: &RouteTask, output: &RawJson, provenance: &Provenance) -> Option<Verdict>;
}

/// Scores nothing: the router learns only from capability failures.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoScore;

#[async_trait]
impl OutcomeScorer for NoScore {
    async fn score(&self, _: &RouteTask, _: &RawJson, _: &Provenance) -> Option<Verdict> {
        None
    }
}

/// A synchronous scorer: the caller's own scoring function or a rule-based validator (schema, length, required
/// fields) over the output, read as a `Value` (an output no `Value` can hold is not scored).
pub struct ScoreFn<F> {
    source: VerificationSource,
    score: F,
}

impl<F> std::fmt::Debug for ScoreFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScoreFn").field("source", &self.source).finish_non_exhaustive()
    }
}

impl<F: Fn(&Value) -> Option<Quality> + Send + Sync> ScoreFn<F> {
    /// The caller's own scorer.
    pub fn caller(score: F) -> Self {
        ScoreFn { source: VerificationSource::Caller, score }
    }

    /// A rule-based validator called `name`.
    pub fn validator(name: impl Into<String>, score: F) -> Self {
        ScoreFn { source: VerificationSource::Validator(name.into()), score }
    }
}

#[async_trait]
impl<F: Fn(&Value) -> Option<Quality> + Send + Sync> OutcomeScorer for ScoreFn<F> {
    async fn score(&self, _: &RouteTask, output: &RawJson, _: &Provenance) -> Option<Verdict> {
        (self.score)(&output.to_value().ok()?).map(|score| Verdict { score, source: self.source.clone() })
    }
}

/// A judge delegate, itself routed through a registry: it receives `{"skill", "input", "output"}` for skill
/// `judge_skill` and answers a number in `[0, 1]`, or an object with a numeric `score`.
#[derive(Debug, Clone)]
pub struct JudgeScorer {
    registry: std::sync::Arc<Registry>,
    request: SelectionRequest,
}

impl JudgeScorer {
    /// Judges with whichever delegate of `registry` `request` selects (for example
    /// `SelectionRequest::new("judge").strategy(Strategy::Quality)`).
    pub fn new(registry: std::sync::Arc<Registry>, request: SelectionRequest) -> Self {
        JudgeScorer { registry, request }
    }
}

#[async_trait]
impl OutcomeScorer for JudgeScorer {
    async fn score(&self, task: &RouteTask, output: &RawJson, _: &Provenance) -> Option<Verdict> {
        #[derive(serde::Serialize)]
        struct Judged<'a> {
            skill: &'a str,
            input: &'a RawJson,
            output: &'a RawJson,
        }
        let input = RawJson::from_serializable(&Judged { skill: task.skill(), input: &task.input, output }).ok()?;
        let judged = RouteTask::new(task.skill(), input).with_request(self.request.clone());
        let routed = match self.registry.route_and_submit(&judged, &NoScore).await {
            Ok(routed) => routed,
            Err(error) => {
                tracing::info!(%error, "judge unavailable; outcome not scored");
                return None;
            }
        };
        let verdict = routed.output.to_value().ok()?;
        let number = verdict.as_f64().or_else(|| verdict.get("score").and_then(Value::as_f64))?;
        let score = Quality::new(number).ok()?;
        Some(Verdict { score, source: VerificationSource::Judge(routed.delegate_id) })
    }
}

/// One submission to one delegate.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The delegate tried.
    pub delegate_id: String,
    /// Its failure; `None` for the attempt that succeeded.
    pub error: Option<LdpError>,
    /// What the failover policy decided after the failure.
    pub action: Option<FailoverAction>,
}

/// A routed task's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// The output, as the delegate sent it (for a result accepted with a quality warning, the failure's partial
    /// output).
    pub output: RawJson,
    /// Its provenance; `None` only for a result accepted with a quality warning, which comes without one.
    pub provenance: Option<Provenance>,
    /// The delegate that produced it.
    pub delegate_id: String,
    /// The selection that chose it, with its explanation.
    pub decision: Decision,
    /// Every selection made, first to last (more than one after reroutes).
    pub decisions: Vec<Decision>,
    /// Every attempt, first to last; the last one succeeded.
    pub attempts: Vec<Attempt>,
    /// The verifier's judgement, when it gave one.
    pub verdict: Option<Verdict>,
    /// Set when the result was accepted despite a `quality` failure.
    pub quality_warning: Option<LdpError>,
    /// What the result's usage receipt showed ([`crate::receipts`]); `Missing` for a result accepted with a quality
    /// warning, which comes without provenance.
    pub receipt: ReceiptVerdict,
}

/// Why a task could not be completed, with what was tried.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct RouteError {
    /// What went wrong.
    pub kind: RouteErrorKind,
    /// Every selection made.
    pub decisions: Vec<Decision>,
    /// Every attempt made.
    pub attempts: Vec<Attempt>,
}

/// The kinds of [`RouteError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteErrorKind {
    /// No (further) delegate could be selected.
    #[error("no delegate to try: {0}")]
    Selection(RouterError),
    /// The failover policy handed the failure back.
    #[error("escalated ({reason:?}): {error}")]
    Escalated {
        /// The last failure.
        error: LdpError,
        /// Why it was not retried.
        reason: GiveUpReason,
    },
    /// The contract's deadline is not a timestamp.
    #[error("invalid contract: {0}")]
    InvalidContract(String),
}

/// The failover input of a typed failure: its category and retry advice.
pub fn failure_of(error: &LdpError) -> Failure {
    Failure { category: error.category, retryable: Some(error.retryable) }
}

impl Registry {
    /// Routes `task` to a delegate over the session layer and returns the output, its provenance, the routing
    /// explanation and the attempts made; see the [module documentation](self) for the steps and failover rules.
    ///
    /// Runs in an `ldp.route` span (skill, chosen delegate, attempts): the messages it sends are its children, so the
    /// transports carry the caller's trace on to the delegates.
    pub async fn route_and_submit(&self, task: &RouteTask, scorer: &dyn OutcomeScorer) -> Result<Routed, RouteError> {
        let span = tracing::info_span!(
            "ldp.route",
            otel.name = format!("ldp.route {}", task.skill()),
            otel.status_code = tracing::field::Empty,
            ldp.skill = task.skill(),
            ldp.delegate = tracing::field::Empty,
            ldp.attempts = tracing::field::Empty,
        );
        let routed = self.route_in_span(task, scorer).instrument(span.clone()).await;
        match &routed {
            Ok(routed) => {
                span.record("ldp.delegate", routed.delegate_id.as_str());
                span.record("ldp.attempts", routed.attempts.len());
            }
            Err(error) => {
                span.record("ldp.attempts", error.attempts.len());
                span.record("otel.status_code", "ERROR");
            }
        }
        routed
    }

    async fn route_in_span(&self, task: &RouteTask, scorer: &dyn OutcomeScorer) -> Result<Routed, RouteError> {
        let mut decisions: Vec<Decision> = Vec::new();
        let mut attempts: Vec<Attempt> = Vec::new();
        let fail = |kind, decisions: Vec<Decision>, attempts: Vec<Attempt>| RouteError { kind, decisions, attempts };
        let limits = match task.contract.as_ref().map(DelegationContract::limits).transpose() {
            Ok(limits) => limits,
            Err(e) => return Err(fail(RouteErrorKind::InvalidContract(e.to_string()), decisions, attempts)),
        };
        let deadline = limits.as_ref().and_then(|l| l.deadline);
        let budget = limits.as_ref().and_then(|l| l.budget.max_cost_usd);
        let skill = task.skill().to_owned();
        let mut excluded = task.request.exclude.clone();
        let mut spent_usd = 0.0;
        // The decision whose delegate is being tried.
        let mut current: Option<Decision> = None;
        let mut on_delegate = 0_u32;

        loop {
            let now = self.now();
            if let Some(deadline) = deadline
                && now >= deadline
            {
                let error =
                    LdpError::transport(Code::Timeout, "the contract's deadline has passed").with_retryable(false);
                let kind = RouteErrorKind::Escalated { error, reason: GiveUpReason::DeadlineExhausted };
                return Err(fail(kind, decisions, attempts));
            }
            let decision = match current.take() {
                Some(decision) => decision,
                None => {
                    let mut request = task.request.clone();
                    request.exclude.clone_from(&excluded);
                    self.exclude_by_receipts(task.receipts, &mut request);
                    if let Some(budget) = budget {
                        let left = (budget - spent_usd).max(0.0);
                        request.max_cost_usd = Some(request.max_cost_usd.map_or(left, |c| c.min(left)));
                    }
                    let decision = match self.with_router(|r| r.select(&request, now)) {
                        Ok(decision) => decision,
                        Err(e) => return Err(fail(RouteErrorKind::Selection(e), decisions, attempts)),
                    };
                    tracing::info!(skill = %skill, delegate = %decision.delegate_id, "selected\n{decision}");
                    decisions.push(decision.clone());
                    on_delegate = 0;
                    decision
                }
            };
            let (delegate, cost) = (decision.delegate_id.clone(), decision.chosen.cost_usd);
            on_delegate += 1;
            spent_usd += cost;

            let error = match self.attempt(&delegate, task, deadline).await {
                Ok((output, provenance, key)) => {
                    let receipt = self.after_result(&delegate, task, &output, &provenance, &key);
                    let verdict = scorer.score(task, &output, &provenance).await;
                    if let Some(verdict) = &verdict {
                        self.learn(&delegate, &skill, verdict.score, verdict.source.clone());
                    }
                    attempts.push(Attempt { delegate_id: delegate.clone(), error: None, action: None });
                    let routed = Routed {
                        output,
                        provenance: Some(provenance),
                        delegate_id: delegate,
                        decision,
                        decisions,
                        attempts,
                        verdict,
                        quality_warning: None,
                        receipt,
                    };
                    return Ok(routed);
                }
                Err(error) => error,
            };

            let failure = failure_of(&error);
            tracing::info!(delegate = %delegate, %error, category = ?failure.category, "attempt failed");
            match failure.category {
                ErrorCategory::Capability => self.learn(
                    &delegate,
                    &skill,
                    Quality::MIN,
                    VerificationSource::Validator("capability_failure".into()),
                ),
                ErrorCategory::Identity | ErrorCategory::Security => {
                    self.record_identity_failure(&delegate, &error);
                }
                _ => {}
            }
            let state = AttemptState {
                attempts: u32::try_from(attempts.len() + 1).unwrap_or(u32::MAX),
                attempts_on_delegate: on_delegate,
                deadline,
                spent_usd,
                budget_usd: budget,
                next_attempt_cost_usd: cost,
            };
            let action = self.config.failover.decide(failure, &state, self.now());
            attempts.push(Attempt {
                delegate_id: delegate.clone(),
                error: Some(error.clone()),
                action: Some(action.clone()),
            });
            match action {
                FailoverAction::Retry { after, new_session } => {
                    if new_session {
                        self.reset_session(&delegate);
                    }
                    current = Some(decision);
                    sleep(after).await;
                }
                FailoverAction::Reroute { after } => {
                    excluded.push(delegate);
                    sleep(after).await;
                }
                FailoverAction::AcceptWithWarning => match error.partial_output.clone() {
                    Some(output) => {
                        let routed = Routed {
                            output: output.into(),
                            provenance: None,
                            delegate_id: delegate,
                            decision,
                            decisions,
                            attempts,
                            verdict: None,
                            quality_warning: Some(error),
                            receipt: ReceiptVerdict::Missing,
                        };
                        return Ok(routed);
                    }
                    None => {
                        let kind = RouteErrorKind::Escalated { error, reason: GiveUpReason::NotRecoverable };
                        return Err(fail(kind, decisions, attempts));
                    }
                },
                FailoverAction::Escalate { reason } => {
                    return Err(fail(RouteErrorKind::Escalated { error, reason }, decisions, attempts));
                }
            }
        }
    }

    /// One submission, bounded by the deadline.
    async fn attempt(
        &self,
        delegate: &str,
        task: &RouteTask,
        deadline: Option<time::OffsetDateTime>,
    ) -> Result<(RawJson, Provenance, TaskKey), LdpError> {
        let work = async {
            let connection = self.connection(delegate).await?;
            let session = self.session(&connection).await?;
            let outcome = connection
                .client
                .submit(&session, task.skill(), task.input.clone(), task.contract.clone())
                .await
                .map_err(|e| e.to_ldp_error())?;
            Ok((outcome.output, outcome.provenance, outcome.key))
        };
        let Some(deadline) = deadline else { return work.await };
        let timed_out = || LdpError::transport(Code::Timeout, "the contract's deadline passed").with_retryable(false);
        let left = Duration::try_from(deadline - self.now()).map_err(|_| timed_out())?;
        tokio::time::timeout(left, work).await.unwrap_or_else(|_| Err(timed_out()))
    }

    /// What the router learns from a result besides the scorer's verdict: the receipt's verdict (recorded per
    /// delegate) and, when the contract has `check:` predicates, the fraction that held on the output, as a runtime
    /// observation of the delegate's quality.
    fn after_result(
        &self,
        delegate: &str,
        task: &RouteTask,
        output: &RawJson,
        provenance: &Provenance,
        key: &TaskKey,
    ) -> ReceiptVerdict {
        let receipt = self.record_receipt(delegate, provenance, key);
        if let Some(score) = predicate_score(task.contract.as_ref(), output) {
            let source = VerificationSource::Validator("contract_check".into());
            self.learn(delegate, task.skill(), Quality::saturating(score), source);
        }
        receipt
    }

    fn learn(&self, delegate: &str, skill: &str, score: Quality, source: VerificationSource) {
        let outcome = Observation { delegate_id: delegate.to_owned(), skill: skill.to_owned(), score, source };
        let now = self.now();
        if let Err(error) = self.with_router(|r| r.record_outcome(&outcome, now)) {
            // The delegate was removed while its task ran.
            tracing::debug!(%error, "outcome not recorded");
        }
    }
}

async fn sleep(after: Duration) {
    if !after.is_zero() {
        tokio::time::sleep(after).await;
    }
}
