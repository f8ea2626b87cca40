//! Tasks: admission of a TASK_SUBMIT, cancellation, status queries, and the end of a task (result, failure,
//! contract deadline, abort) with its answer.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ldp_types::{
    Body, Envelope, LdpError, PayloadMode, Provenance, RawJson, TaskFailed, TaskResult, TaskSubmit, TaskUpdate,
    UsageReceipt, codes,
};

use crate::TaskKey;
use crate::error::{Misuse, Refusal, SessionError};
use crate::shared::SharedTask;

use super::admit::Admission;
use super::context::Turn;
use super::sessions::ResponderSession;
use super::types::{Aborted, Delivery, Outcome, PeerContext, ResponderEvent, TaskOutput, TaskRequest, TaskStatus};
use super::{Responder, internal, session_error};

/// The levels a TASK_RESULT's output sits in its message: the envelope, the body.
const RESULT_NESTING: usize = 2;

#[derive(Debug)]
pub(super) struct RunningTask {
    pub(super) skill: Box<str>,
    pub(super) mode: PayloadMode,
    pub(super) contract_id: Option<Box<str>>,
    /// When the machine admitted it: the start of the wall time its usage receipt reports.
    pub(super) admitted: Instant,
    /// When a `fail_closed` contract's deadline passes: the machine ends the task then (see `task_deadlines`).
    pub(super) deadline: Option<Instant>,
    /// The contract's `check:` predicates and failure policy, when it has any: the responder checks its own output
    /// against them before answering (boxed: most tasks have none, and a running task should stay small).
    pub(super) checks: Option<Box<(ldp_types::criteria::CheckableCriteria, ldp_types::FailurePolicy)>>,
    /// The input, for the session's context once the task ends (`None` when context is turned off).
    pub(super) input: Option<RawJson>,
}

/// When a `fail_closed` contract's deadline falls on the machine's monotonic clock (`now` read at `wall_now`); a
/// deadline already past falls on `now`. `None` without a deadline or under `fail_open` (whose violation is recorded
/// in the provenance instead).
pub(super) fn fail_closed_deadline(
    contract: Option<&ldp_types::DelegationContract>,
    now: Instant,
    wall_now: time::OffsetDateTime,
) -> Option<Instant> {
    let limits = contract?.limits().ok()?;
    if limits.failure_policy != ldp_types::FailurePolicy::FailClosed {
        return None;
    }
    let left = std::time::Duration::try_from(limits.deadline? - wall_now).unwrap_or_default();
    // A deadline beyond the monotonic clock's range never comes.
    now.checked_add(left)
}

/// A running task's contract deadline: (when, session id, task id).
pub(super) type TaskDeadline = (Instant, Box<str>, Box<str>);

impl Responder {
    pub(super) fn on_submit(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let (Body::TaskSubmit(submit), Some(session)) = (&env.body, self.sessions.get(env.session_id.as_str())) else {
            return Err(self.refuse(&env, internal()));
        };
        if let Some(error) = missing_scope(&self.cfg.skill_scopes, peer, &submit.skill) {
            return Err(self.refuse(&env, error));
        }
        let admission = match self.admit(session, env.payload_mode, submit) {
            Ok(admission) => admission,
            Err(error) => {
                if error.code == codes::PAYLOAD_MODE_FAILED {
                    self.fall_back(&env.session_id, env.payload_mode);
                }
                return Err(self.refuse(&env, error));
            }
        };
        if admission.mode != env.payload_mode {
            self.fall_back_to(&env.session_id, env.payload_mode, admission.mode);
        }
        self.accept(now, env, admission)
    }

    /// Starts an admitted task: it becomes a running task of its session, in the mode admission chose.
    fn accept(&mut self, now: Instant, env: Envelope, admission: Admission) -> Result<Outcome, Refusal> {
        let deadline = match &env.body {
            Body::TaskSubmit(submit) => fail_closed_deadline(submit.contract.as_deref(), now, self.wall.now_utc()),
            _ => None,
        };
        let Some(session) = self.sessions.get_mut(env.session_id.as_str()) else {
            return Err(self.refuse(&env, internal()));
        };
        // Accepted: take the task out of the message instead of copying it.
        let Envelope { session_id, from, body, .. } = env;
        let payload_mode = admission.mode;
        let Body::TaskSubmit(TaskSubmit { task_id, skill, input, contract, .. }) = body else {
            return Err(Refusal { error: internal(), reply: None });
        };
        if session.is_idle() {
            self.idle_total = self.idle_total.saturating_sub(1);
        }
        session.tasks_submitted += 1;
        let history = session.context.snapshot();
        let keep_input = self.cfg.limits.context_turns > 0;
        session.running.insert(
            task_id.as_str().into(),
            RunningTask {
                skill: skill.as_str().into(),
                mode: payload_mode,
                contract_id: contract.as_ref().map(|c| c.contract_id.as_str().into()),
                admitted: now,
                deadline,
                // Parsed before admission (`limits()` refuses a contract whose predicates do not parse), so this
                // cannot fail here; a contract with only free-form entries keeps nothing.
                checks: contract.as_ref().and_then(|c| {
                    c.checkable_criteria()
                        .ok()
                        .filter(|criteria| !criteria.is_empty())
                        .map(|criteria| Box::new((criteria, c.policy.failure_policy)))
                }),
                input: keep_input.then(|| input.clone()),
            },
        );
        self.running_total += 1;
        if let Some(deadline) = deadline {
            self.task_deadlines.push(Reverse((deadline, session_id.as_str().into(), task_id.as_str().into())));
        }
        Ok(Outcome::Execute(TaskRequest {
            key: TaskKey { session_id, task_id },
            skill,
            input,
            payload_mode,
            contract: contract.map(|c| *c),
            peer: from,
            history,
        }))
    }

    /// Moves the session from `failed` to a chosen lower mode (transparent fallback).
    pub(super) fn fall_back_to(&mut self, session_id: &str, failed: PayloadMode, to: PayloadMode) {
        let Some(s) = self.sessions.get_mut(session_id) else { return };
        if s.mode.number() > to.number() {
            s.mode = to;
        }
        self.events.push_back(ResponderEvent::ModeFellBack { session_id: session_id.to_owned(), from: failed, to });
    }

    /// RFC 4.3: a payload-mode failure moves the session down its fallback chain instead of ending it.
    pub(super) fn fall_back(&mut self, session_id: &str, failed: PayloadMode) {
        let Some(s) = self.sessions.get_mut(session_id) else { return };
        if s.mode != failed {
            return;
        }
        if let Some(next) = s.fallback.iter().copied().find(|m| m.number() < failed.number()) {
            s.mode = next;
            self.events.push_back(ResponderEvent::ModeFellBack {
                session_id: session_id.to_owned(),
                from: failed,
                to: next,
            });
        }
    }

    /// A TASK_CANCEL. `remote` is the task's record when the store has just cancelled it for this message (it runs
    /// on another replica, which stops it at its next lease renewal): answered as a cancel here would be.
    pub(super) fn on_cancel(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        env: Envelope,
        remote: Option<&SharedTask>,
    ) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let task_id = env.body.task_id().unwrap_or_default().to_owned();
        let key = TaskKey { session_id: env.session_id.clone(), task_id: task_id.clone() };
        // The canceller's answer, in the mode the task ran in.
        let cancelled = |r: &mut Self, task_id: String, mode| {
            let error = LdpError::runtime(codes::CANCELLED, "cancelled by the initiator").with_retryable(false);
            r.envelope(&env.session_id, &env.from, TaskFailed::new(task_id, error), mode)
        };
        let Some(mode) = self.end_task(&key, TaskStatus::Cancelled) else {
            if let Some(remote) = remote.filter(|t| t.status == crate::shared::SharedTaskStatus::Failed) {
                let reply = cancelled(self, task_id, remote.mode);
                return Ok(Outcome::Cancel { reply, cancelled: Vec::new() });
            }
            let error =
                session_error(codes::TASK_NOT_FOUND, format!("task {task_id:?} is not running")).with_retryable(false);
            return Err(self.refuse(&env, error));
        };
        self.abort(&env.from, mode, key.clone(), "by the initiator");
        let reply = cancelled(self, task_id, env.payload_mode);
        Ok(Outcome::Cancel { reply, cancelled: vec![key] })
    }

    /// TASK_UPDATE sent to a responder is answered as a status query (as the Rust reference SDK does).
    pub(super) fn on_status_query(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        env: Envelope,
        remote: Option<&SharedTask>,
    ) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let task_id = env.body.task_id().unwrap_or_default();
        // A long task over HTTP outlives its request: once it has finished, the query fetches its result, for as long
        // as the session keeps it as context.
        let kept = self.sessions.get(env.session_id.as_str()).and_then(|s| {
            let (output, provenance) = s.context.result(task_id)?;
            Some((output.clone(), provenance.clone()))
        });
        if let Some((output, provenance)) = kept {
            let mode = provenance.payload_mode_used;
            let body = TaskResult::new(task_id.to_owned(), output, provenance);
            return Ok(Outcome::Reply(self.envelope(&env.session_id, &env.from, body, mode)));
        }
        let status = self.sessions.get(env.session_id.as_str()).and_then(|s| {
            if s.running.contains_key(task_id) {
                return Some("running");
            }
            s.finished(task_id).map(|h| match h.status {
                TaskStatus::Completed => "completed",
                TaskStatus::Failed => "failed",
                TaskStatus::Cancelled => "cancelled",
            })
        });
        let Some(status) = status else {
            if let Some(remote) = remote {
                // Not known here, known to the store: it ran on another replica (or before a restart).
                return Ok(Outcome::Reply(self.remote_status(&env, task_id, remote)));
            }
            let error =
                session_error(codes::TASK_NOT_FOUND, format!("task {task_id:?} is not known")).with_retryable(false);
            return Err(self.refuse(&env, error));
        };
        let body = TaskUpdate::new(task_id.to_owned(), None, Some(status.to_owned()));
        Ok(Outcome::Reply(self.envelope(&env.session_id, &env.from, body, env.payload_mode)))
    }

    /// Removes a running task and records it in the history. Returns the mode it ran in, `None` if it was not
    /// running.
    /// Starts a graceful shutdown: from now on new sessions and new tasks are refused (`CAPACITY_EXCEEDED`,
    /// retryable: another replica, or this one after a restart, takes them), while running tasks go on and every
    /// other message (status queries, cancels, closes) is answered as before.
    pub fn start_draining(&mut self) {
        self.draining = true;
    }

    /// Whether [`Responder::start_draining`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Ends every running task, each submitter answered TASK_FAILED `CANCELLED` (retryable) saying `why`, its work
    /// stopped (queued for [`Responder::poll_aborted`]): the end of a shutdown's grace period. Returns the tasks.
    pub fn cancel_running(&mut self, why: &str) -> Vec<TaskKey> {
        let mut keys: Vec<TaskKey> = self
            .sessions
            .iter()
            .flat_map(|(sid, s)| {
                s.running.keys().map(|t| TaskKey { session_id: sid.to_string(), task_id: t.to_string() })
            })
            .collect();
        // Hash order is not an order: keep the answers (and the ids they draw) deterministic.
        keys.sort_unstable_by(|a, b| (&a.session_id, &a.task_id).cmp(&(&b.session_id, &b.task_id)));
        for key in &keys {
            let error = LdpError::runtime(codes::CANCELLED, format!("cancelled {why}")).with_retryable(true);
            let Some(peer) = self.sessions.get(key.session_id.as_str()).map(ResponderSession::peer_id) else {
                continue;
            };
            if let Some(mode) = self.end_task(key, TaskStatus::Cancelled) {
                self.abort_with(&peer, mode, key.clone(), error);
            }
        }
        keys
    }

    pub(super) fn end_task(&mut self, key: &TaskKey, status: TaskStatus) -> Option<PayloadMode> {
        let limits = &self.cfg.limits;
        let s = self.sessions.get_mut(key.session_id.as_str())?;
        let task = s.running.remove(key.task_id.as_str())?;
        if let Some(input) = task.input {
            let turn = Turn { task_id: key.task_id.clone(), skill: String::from(&*task.skill), input, output: None };
            s.context.push(turn, None, limits.context_turns, limits.context_bytes);
        }
        s.record_history(&key.task_id, task.skill, status, limits.history_len);
        let idle = s.is_idle();
        self.count_task_left(&key.session_id, idle);
        Some(task.mode)
    }

    pub(super) fn running(&self, key: &TaskKey) -> Result<&RunningTask, SessionError> {
        let s =
            self.sessions.get(key.session_id.as_str()).ok_or_else(|| Misuse::UnknownSession(key.session_id.clone()))?;
        s.running.get(key.task_id.as_str()).ok_or_else(|| Misuse::TaskEnded(key.task_id.clone()).into())
    }

    /// A TASK_UPDATE for a running task. A task whose session's TTL has run out by `now` is not running: its
    /// session is reaped (and the task queued for [`Responder::poll_aborted`]) as [`Responder::handle`] would.
    pub fn progress(
        &mut self,
        now: Instant,
        key: &TaskKey,
        progress: Option<f64>,
        message: Option<String>,
    ) -> Result<Envelope, SessionError> {
        let progress = progress.map(|p| p.clamp(0.0, 1.0));
        self.update(now, key, TaskUpdate::new(key.task_id.clone(), progress, message))
    }

    /// A TASK_UPDATE carrying the next chunk of a running task's output (`partial_output`, docs/interop.md), with
    /// the expiry rule of [`Responder::progress`]. The chunk is the delegate's: text or JSON as its payload mode
    /// allows; it is not checked against the contract (the final output is).
    pub fn partial_output(&mut self, now: Instant, key: &TaskKey, chunk: RawJson) -> Result<Envelope, SessionError> {
        self.update(now, key, TaskUpdate::new(key.task_id.clone(), None, None).with_partial_output(chunk))
    }

    pub(super) fn update(&mut self, now: Instant, key: &TaskKey, body: TaskUpdate) -> Result<Envelope, SessionError> {
        let _reaped = self.handle_timeout(now);
        let mode = self.running(key)?.mode;
        let peer = self.peer_of(&key.session_id)?;
        Ok(self.envelope(&key.session_id, &peer, body, mode))
    }

    /// Completes a task: builds the TASK_RESULT with full provenance (RFC 10.1.3), records usage against the
    /// session budget, and appends lineage entries for results obtained by re-delegating. A task whose session's TTL
    /// has run out by `now` cannot complete: the session is reaped first, as [`Responder::handle`] would, and the
    /// task is queued for [`Responder::poll_aborted`].
    /// An output nested too deeply for its reply to be read (a result sits two levels into its message: the
    /// envelope, the body) fails the task `EXECUTION_FAILED` instead, not retryable: whatever the delegate, the peer gets an
    /// answer it can read.
    pub fn complete_task(&mut self, now: Instant, key: &TaskKey, out: TaskOutput) -> Result<Delivery, SessionError> {
        if !out.output.nests_within(ldp_types::MAX_JSON_DEPTH - RESULT_NESTING) {
            let error = LdpError::runtime(
                codes::EXECUTION_FAILED,
                format!(
                    "the delegate's output nests deeper than the {} levels a result can carry",
                    ldp_types::MAX_JSON_DEPTH - RESULT_NESTING
                ),
            )
            .with_retryable(false);
            return self.fail_task(now, key, error);
        }
        let _reaped = self.handle_timeout(now);
        // One lookup of the session (and one of the task) for all the bookkeeping: this runs for every task.
        let history_len = self.cfg.limits.history_len;
        let s = self
            .sessions
            .get_mut(key.session_id.as_str())
            .ok_or_else(|| Misuse::UnknownSession(key.session_id.clone()))?;
        let task = s.running.remove(key.task_id.as_str()).ok_or_else(|| Misuse::TaskEnded(key.task_id.clone()))?;
        // The contract's machine-checkable predicates, checked by the responder on its own output (paper 7): under
        // `fail_closed` a violation is answered TASK_FAILED `CONTRACT_VIOLATED` naming each failed predicate, with the
        // output as `partial_output`; under `fail_open` the result goes out with the violations in its provenance.
        let violations =
            task.checks.as_deref().map(|(criteria, policy)| (ldp_types::check_output(criteria, &out.output), *policy));
        if let Some((violations, ldp_types::FailurePolicy::FailClosed)) = &violations
            && !violations.is_empty()
        {
            let details: Vec<String> = violations.iter().map(ToString::to_string).collect();
            let mut error = LdpError::policy(
                codes::CONTRACT_VIOLATED,
                format!(
                    "contract {} violated: {}",
                    task.contract_id.as_deref().unwrap_or_default(),
                    details.join("; ")
                ),
            );
            if let Ok(partial) = out.output.to_value() {
                error = error.with_partial_output(partial);
            }
            // Put the task back so that `fail_task` ends it through the one path that answers failures.
            s.running.insert(key.task_id.as_str().into(), task);
            return self.fail_task(now, key, error);
        }
        s.tokens_used = s.tokens_used.saturating_add(out.tokens_used.unwrap_or(0));
        s.cost_usd += out.cost_usd.unwrap_or(0.0);
        let skill = (task.input.is_some()).then(|| String::from(&*task.skill));
        s.record_history(&key.task_id, task.skill, TaskStatus::Completed, history_len);
        let peer = s.peer_id();
        let idle = s.is_idle();
        self.count_task_left(&key.session_id, idle);
        let mode = task.mode;
        let mut provenance =
            Provenance::new(self.cfg.card.delegate_id.as_str(), self.cfg.card.model_version.as_str(), mode);
        provenance.confidence = out.confidence;
        provenance.session_id = Some(key.session_id.clone());
        // One instant for the result: its provenance and its envelope.
        let timestamp = ldp_types::time::format_timestamp(self.wall.now_utc());
        provenance.timestamp = Some(timestamp.clone());
        provenance.set_verification_status(out.verification_status);
        provenance.evidence = out.evidence;
        provenance.tokens_used = out.tokens_used;
        provenance.cost_usd = out.cost_usd;
        if let Some(model) = &out.model {
            // The model that actually answered (a provider's dated name), not only the one the card advertises.
            provenance.model_version.clone_from(model);
        }
        provenance.contract_id = task.contract_id.map(String::from);
        if let Some((violations, _)) = &violations {
            provenance.contract_satisfied = Some(violations.is_empty());
            provenance.contract_violations = violations.iter().map(|v| v.code().to_owned()).collect();
        }
        if let Some(signing_key) = &self.cfg.receipt_key {
            // Signed over what the provenance reports, so a client can check the figures against the key.
            let mut receipt = UsageReceipt::new(
                provenance.produced_by.as_str(),
                key.session_id.as_str(),
                key.task_id.as_str(),
                provenance.timestamp.clone().unwrap_or_default(),
            );
            receipt.model = Some(out.model.unwrap_or_else(|| provenance.model_version.clone()));
            receipt.tokens_in = out.tokens_in;
            receipt.tokens_out = out.tokens_out;
            receipt.tokens_total = provenance.tokens_used;
            receipt.cost_usd = provenance.cost_usd;
            receipt.wall_time_ms = u64::try_from(now.saturating_duration_since(task.admitted).as_millis()).ok();
            // Only an Ed25519 key is kept in the configuration ([`ResponderConfig::set_receipt_key`]), so signing
            // cannot fail; a result without a receipt is still a result.
            provenance.usage_receipt = receipt.sign(signing_key).ok().map(Box::new);
        }
        for hop in out.delegated {
            provenance.lineage.push(hop.entry);
            provenance.lineage.extend(hop.provenance.lineage);
        }
        let provenance = Arc::new(provenance);
        if let (Some(input), Some(skill)) = (task.input, skill)
            && let Some(s) = self.sessions.get_mut(key.session_id.as_str())
        {
            let turn = Turn { task_id: key.task_id.clone(), skill, input, output: Some(out.output.clone()) };
            let limits = &self.cfg.limits;
            s.context.push(turn, Some(Arc::clone(&provenance)), limits.context_turns, limits.context_bytes);
        }
        let result = TaskResult::new(key.task_id.clone(), out.output, provenance);
        let env = self.envelope_at(timestamp, &key.session_id, &peer, result, mode);
        Ok(self.deliver(now, key, env))
    }

    /// Fails a task with a typed error (with the expiry rule of [`Responder::complete_task`]).
    pub fn fail_task(&mut self, now: Instant, key: &TaskKey, error: LdpError) -> Result<Delivery, SessionError> {
        let _reaped = self.handle_timeout(now);
        let mode = self.running(key)?.mode;
        let peer = self.peer_of(&key.session_id)?;
        if error.code == codes::PAYLOAD_MODE_FAILED {
            self.fall_back(&key.session_id, mode);
        }
        self.end_task(key, TaskStatus::Failed);
        let env = self.envelope(&key.session_id, &peer, TaskFailed::new(key.task_id.clone(), error), mode);
        Ok(self.deliver(now, key, env))
    }

    /// Ends a task whose `fail_closed` contract's deadline passed while it ran (paper 7: the responder enforces the
    /// time budget, not only reports it): its work is aborted and its submitter told `CONTRACT_VIOLATED`.
    pub(super) fn end_past_deadline(&mut self, deadline: Instant, session_id: &str, task_id: &str) -> Option<TaskKey> {
        let session = self.sessions.get_mut(session_id)?;
        if session.running.get(task_id)?.deadline != Some(deadline) {
            return None;
        }
        let task = session.running.remove(task_id)?;
        let peer = session.peer_id();
        let history_len = self.cfg.limits.history_len;
        session.record_history(task_id, task.skill, TaskStatus::Failed, history_len);
        let idle = session.is_idle();
        self.count_task_left(session_id, idle);
        let contract = task.contract_id.as_deref().unwrap_or_default();
        let error = LdpError::policy(
            codes::CONTRACT_VIOLATED,
            format!("contract {contract}: DEADLINE_EXCEEDED, the deadline passed while the task ran (fail_closed)"),
        )
        .with_retryable(false);
        let key = TaskKey { session_id: session_id.to_owned(), task_id: task_id.to_owned() };
        let reply = self.envelope(session_id, &peer, TaskFailed::new(task_id.to_owned(), error), task.mode);
        self.aborted.push_back(Aborted { key: key.clone(), reply });
        Some(key)
    }

    /// Queues the abort of a running task with the definite answer for its submitter.
    pub(super) fn abort(&mut self, peer: &str, mode: PayloadMode, key: TaskKey, why: &str) {
        let error = LdpError::runtime(codes::CANCELLED, format!("cancelled {why}")).with_retryable(false);
        self.abort_with(peer, mode, key, error);
    }

    fn abort_with(&mut self, peer: &str, mode: PayloadMode, key: TaskKey, error: LdpError) {
        let reply = self.envelope(&key.session_id, peer, TaskFailed::new(key.task_id.clone(), error), mode);
        self.aborted.push_back(Aborted { key, reply });
    }

    /// A task this machine has answered with its result, which the store says ended otherwise meanwhile (cancelled
    /// through another replica, or failed after its lease lapsed, before this replica's next renewal could tell it):
    /// the store's record is what every replica's status queries answer, so the submitter is told `error` too, in
    /// place of the result, and the task's history and the session's context say so (the result is withdrawn from
    /// both). Returns that answer, in `mode` (the result's); `None` when the session is gone.
    pub fn overruled_by_store(&mut self, key: &TaskKey, error: LdpError, mode: PayloadMode) -> Option<Envelope> {
        let status = if error.code == codes::CANCELLED { TaskStatus::Cancelled } else { TaskStatus::Failed };
        let s = self.sessions.get_mut(key.session_id.as_str())?;
        if let Some(entry) = s.finished_mut(&key.task_id) {
            entry.status = status;
        }
        s.context.withdraw_result(&key.task_id);
        let peer = s.peer_id();
        Some(self.envelope(&key.session_id, &peer, TaskFailed::new(key.task_id.clone(), error), mode))
    }

    /// A running task the store says has ended elsewhere with `error` (cancelled through another replica, or
    /// failed after its lease lapsed): ended here too, its submitter answered with that error, and its work
    /// stopped (queued for [`Responder::poll_aborted`]). `false` when it is not running here.
    pub fn end_by_store(&mut self, key: &TaskKey, error: LdpError) -> bool {
        let status = if error.code == codes::CANCELLED { TaskStatus::Cancelled } else { TaskStatus::Failed };
        let Some(peer) = self.sessions.get(key.session_id.as_str()).map(ResponderSession::peer_id) else {
            return false;
        };
        let Some(mode) = self.end_task(key, status) else { return false };
        self.abort_with(&peer, mode, key.clone(), error);
        true
    }
}

/// The refusal of a skill whose required scopes the peer's credential does not all grant, or `None`. Checked before
/// admission, so that a peer without the scope learns nothing about the skill's limits or its input's shape.
fn missing_scope(scopes: &HashMap<String, Vec<String>>, peer: &PeerContext, skill: &str) -> Option<LdpError> {
    let missing = scopes.get(skill)?.iter().find(|scope| !peer.has_scope(scope))?;
    Some(
        LdpError::security(codes::TRUST_VIOLATION, format!("skill {skill:?} requires the scope {missing:?}"))
            .with_retryable(false),
    )
}
