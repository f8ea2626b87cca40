//! Admission of a TASK_SUBMIT: each rule a task must meet before it runs, checked in a fixed order (the first one
//! broken is the refusal), each a small function. [`Responder::admit`] runs them; `on_submit` then accepts.

use ldp_types::{DelegationContract, LdpError, PayloadMode, RawJson, TaskSubmit, codes, validate_payload};

use crate::config::FallbackStyle;

use super::sessions::{IdTag, ResponderSession};
use super::types::TaskStatus;
use super::{Responder, session_error};

/// What admission decided for a task it let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Admission {
    /// The mode the task runs in: the message's, or the lower mode of the session's fallback chain that accepts its
    /// input (transparent fallback, RFC 4.3).
    pub(super) mode: PayloadMode,
}

impl Responder {
    /// The checks a TASK_SUBMIT in `session` passes before it runs, in order: a task id, a new one, a declared skill,
    /// a negotiated mode, a free task slot, the session's task limit and budget, a contract that can be honoured,
    /// and input valid in its mode (or in a lower one, under transparent fallback).
    pub(super) fn admit(
        &self,
        session: &ResponderSession,
        mode: PayloadMode,
        submit: &TaskSubmit,
    ) -> Result<Admission, LdpError> {
        task_id_present(&submit.task_id)?;
        task_id_new(session, &submit.task_id)?;
        self.skill_declared(&submit.skill)?;
        mode_negotiated(session, mode)?;
        self.slot_free()?;
        self.task_limit_left(session)?;
        self.budget_left(session)?;
        contract_honourable(submit.contract.as_deref())?;
        self.input_valid(session, mode, &submit.input)
    }

    fn skill_declared(&self, skill: &str) -> Result<(), LdpError> {
        match self.cfg.card.capability(skill) {
            Some(_) => Ok(()),
            None => Err(LdpError::capability(
                codes::SKILL_NOT_FOUND,
                format!("skill {skill:?} is not declared by this delegate"),
            )),
        }
    }

    fn slot_free(&self) -> Result<(), LdpError> {
        let max = self.cfg.limits.max_concurrent_tasks;
        if self.running_total >= max {
            return Err(LdpError::runtime(
                codes::CAPACITY_EXCEEDED,
                format!("all {max} task slots are busy; retry later"),
            ));
        }
        Ok(())
    }

    fn task_limit_left(&self, session: &ResponderSession) -> Result<(), LdpError> {
        if self.cfg.limits.max_tasks_per_session.is_some_and(|max| session.tasks_submitted >= max) {
            return Err(task_limit_reached());
        }
        Ok(())
    }

    fn budget_left(&self, session: &ResponderSession) -> Result<(), LdpError> {
        let budget = &self.cfg.limits.session_budget;
        if budget.max_tokens.is_some_and(|max| session.tokens_used >= max)
            || budget.max_cost_usd.is_some_and(|max| session.cost_usd >= max)
        {
            return Err(LdpError::policy(codes::BUDGET_EXCEEDED, "the session's budget is exhausted"));
        }
        Ok(())
    }

    /// RFC 4.3: fallback is automatic and transparent. Under `Transparent`, input invalid in its mode runs in the
    /// first lower mode of the chain that accepts it (clients such as the Python SDK send raw input in
    /// semantic_frame mode); under `Explicit`, it is refused `PAYLOAD_MODE_FAILED`, as the RFC's sequence diagram
    /// shows.
    fn input_valid(
        &self,
        session: &ResponderSession,
        mode: PayloadMode,
        input: &RawJson,
    ) -> Result<Admission, LdpError> {
        let Err(e) = validate_payload(mode, input) else { return Ok(Admission { mode }) };
        let lower = match self.cfg.fallback {
            FallbackStyle::Transparent => session
                .fallback
                .iter()
                .copied()
                .find(|m| m.number() < mode.number() && validate_payload(*m, input).is_ok()),
            FallbackStyle::Explicit => None,
        };
        lower
            .map(|mode| Admission { mode })
            .ok_or_else(|| LdpError::capability(codes::PAYLOAD_MODE_FAILED, format!("{mode} validation failed: {e}")))
    }
}

fn task_id_present(task_id: &str) -> Result<(), LdpError> {
    if task_id.is_empty() {
        return Err(LdpError::runtime(codes::MALFORMED_MESSAGE, "task_id must not be empty").with_retryable(false));
    }
    Ok(())
}

/// A failed task may be resubmitted under its id (payload fallback, retries); a running or finished one may not.
fn task_id_new(session: &ResponderSession, task_id: &str) -> Result<(), LdpError> {
    let tag = IdTag::of(task_id);
    if session.running.contains_key(task_id)
        || session.history.iter().any(|h| h.is(tag, task_id) && h.status != TaskStatus::Failed)
    {
        return Err(duplicate_task(task_id));
    }
    Ok(())
}

/// The refusal of a task id already in use (here, or by another replica: [`Responder::refuse_claimed`]).
pub(super) fn duplicate_task(task_id: &str) -> LdpError {
    session_error(codes::DUPLICATE_TASK, format!("task {task_id:?} already exists")).with_retryable(false)
}

fn mode_negotiated(session: &ResponderSession, mode: PayloadMode) -> Result<(), LdpError> {
    if mode != session.mode && !session.fallback.contains(&mode) {
        return Err(LdpError::capability(
            codes::PAYLOAD_MODE_FAILED,
            format!("payload mode {mode} was not negotiated (session mode {})", session.mode),
        ));
    }
    Ok(())
}

fn contract_honourable(contract: Option<&DelegationContract>) -> Result<(), LdpError> {
    match contract.map(DelegationContract::limits).transpose() {
        Ok(_) => Ok(()),
        Err(e) => Err(LdpError::policy(codes::CONTRACT_VIOLATED, format!("contract cannot be honoured: {e}"))),
    }
}

/// The refusal of a TASK_SUBMIT beyond the session's task limit (here, or counted across replicas by a store).
pub(super) fn task_limit_reached() -> LdpError {
    LdpError::policy(codes::BUDGET_EXCEEDED, "the session's task limit is reached")
}
