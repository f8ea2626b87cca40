//! Resuming tasks across a lost connection, and the initiator's deadlines.
//!
//! A transport that carries many tasks over one connection (WebSocket) loses the answers of every task in flight
//! when that connection drops. The rules for getting them back live here, not in the transport:
//!
//! 1. [`Initiator::handle_disconnect`]: the driver names the tasks it had written on the lost connection; their
//!    answers may be lost.
//! 2. [`Initiator::handle_reconnect`]: a TASK_UPDATE status query for each of them (signed like every message of the
//!    initiator), drained with [`Initiator::poll_transmit`]. The query resumes the session on the responder, which
//!    sends the results it held for it before the answer.
//! 3. [`Initiator::handle_resume_answer`]: what the answer to a query (or to a resubmission) means for its task:
//!    `running` — wait, the result comes on the new connection; ended — its result was sent before the answer, or
//!    it was lost with the old connection (the task fails after the resume grace, [`Initiator::handle_timeout`]);
//!    `TASK_NOT_FOUND` — the responder never received the task: submit it again, once per query; `DUPLICATE_TASK`
//!    for that resubmission — the first copy arrived after all and runs: wait for its result, never run it twice;
//!    anything else (a result kept by the session, the session expired or closed) — that is the task's answer.
//!
//! A carrier without pushed answers (HTTP: one answer per request) sets a status poll
//! ([`Initiator::set_status_poll`]): a task reported `running`, or whose resubmission met `DUPLICATE_TASK`, is
//! queried again after the poll interval, since its result would otherwise never come. Every loss of a task's answer
//! counts against [`Initiator::set_max_resumes`]: a task whose answers keep getting lost fails rather than being
//! queried for ever.

use std::time::{Duration, Instant};

use ldp_types::{Body, Envelope, LdpError, TaskSubmit, TaskUpdate, codes};

use super::{Awaited, Initiator, PendingTask};
use crate::SessionState;
use crate::TaskKey;

/// How long, by default, to wait for the result of a task that the responder reports as ended when resuming before
/// concluding it was lost in transit ([`Initiator::set_resume_grace`]).
pub const DEFAULT_RESUME_GRACE: Duration = Duration::from_secs(5);

/// How many times, by default, a task's answer may be lost before the task fails ([`Initiator::set_max_resumes`]).
pub const DEFAULT_MAX_RESUMES: u32 = 5;

/// The `message` of the status queries the initiator sends when resuming.
const RESUME_QUERY: &str = "resume";

/// The status a responder gives a task that is still running.
const RUNNING: &str = "running";

/// Where a task stands in a resume.
#[derive(Debug, Default)]
pub(super) struct ResumeState {
    /// Its answer may have been lost with a connection: query its status on the next reconnect.
    lost: bool,
    /// The message id of the status query in flight.
    query: Option<String>,
    /// The message id of the resubmission in flight.
    resubmission: Option<String>,
    /// When a task reported ended stops waiting for its result, and the status it was reported in.
    give_up: Option<(Instant, String)>,
    /// When to query the task again (a carrier without pushed answers, [`Initiator::set_status_poll`]).
    poll_at: Option<Instant>,
    /// How many times its answer was lost ([`Initiator::handle_disconnect`], [`Initiator::handle_query_lost`]).
    losses: u32,
    /// Set when the losses passed [`Initiator::set_max_resumes`]: the task fails at the next
    /// [`Initiator::handle_timeout`].
    abandoned: Option<Instant>,
}

/// A message the initiator wants sent on its own: drained with [`Initiator::poll_transmit`]. Its answers go to
/// [`Initiator::handle_resume_answer`] under its message id.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Transmit {
    /// A TASK_UPDATE status query for a task whose answer may have been lost with the connection.
    StatusQuery {
        /// The task.
        key: TaskKey,
        /// The query.
        envelope: Envelope,
    },
    /// The task submitted again: the responder answered its status query with `TASK_NOT_FOUND`.
    Resubmit {
        /// The task.
        key: TaskKey,
        /// The TASK_SUBMIT (same task id, new message id).
        envelope: Envelope,
    },
}

impl Transmit {
    /// The task it is sent for.
    pub fn key(&self) -> &TaskKey {
        match self {
            Self::StatusQuery { key, .. } | Self::Resubmit { key, .. } => key,
        }
    }

    /// The message to send.
    pub fn envelope(&self) -> &Envelope {
        match self {
            Self::StatusQuery { envelope, .. } | Self::Resubmit { envelope, .. } => envelope,
        }
    }
}

/// What an answer to a [`Transmit`] means for its task ([`Initiator::handle_resume_answer`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResumeVerdict {
    /// Nothing for the task's caller: its answer is still to come (or the message answers a task already ended).
    Wait,
    /// A progress report of the resubmitted task: forward it like any TASK_UPDATE of the task.
    Progress(TaskKey),
    /// The message is the task's answer: hand it to whoever waits for the task, which passes it to
    /// [`Initiator::handle`] like any reply.
    Deliver(TaskKey),
    /// The task's answer will not come: its caller fails with `error` (the initiator has forgotten the task).
    Fail {
        /// The task.
        key: TaskKey,
        /// Why.
        error: LdpError,
    },
}

/// A deadline the initiator reached ([`Initiator::handle_timeout`]). The initiator has forgotten the request; its
/// caller fails with `error`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Expired {
    /// The responder reported the task ended while the connection was down, and its result did not follow within
    /// the resume grace: it was lost in transit (not retryable: the task ran).
    ResultLost {
        /// The task.
        key: TaskKey,
        /// The non-retryable `transport` error its caller gets.
        error: LdpError,
    },
    /// A SESSION_PROPOSE went unanswered for the answer timeout ([`Initiator::set_answer_timeout`]).
    ProposalUnanswered {
        /// The session id proposed.
        session_id: String,
        /// The `TIMEOUT` error its caller gets.
        error: LdpError,
    },
    /// A TASK_SUBMIT went unanswered for the answer timeout ([`Initiator::set_answer_timeout`]).
    TaskUnanswered {
        /// The task.
        key: TaskKey,
        /// The `TIMEOUT` error its caller gets.
        error: LdpError,
    },
    /// The task's answer was lost more often than [`Initiator::set_max_resumes`] allows: it is not queried again.
    NotResumed {
        /// The task.
        key: TaskKey,
        /// The non-retryable `transport` error its caller gets (the task may have run).
        error: LdpError,
    },
}

impl Expired {
    /// The error the request's caller gets.
    pub fn error(&self) -> &LdpError {
        match self {
            Self::ResultLost { error, .. }
            | Self::ProposalUnanswered { error, .. }
            | Self::TaskUnanswered { error, .. }
            | Self::NotResumed { error, .. } => error,
        }
    }
}

impl Initiator {
    /// How long to wait for the result of a task the responder reports as ended when resuming, before concluding
    /// that it was lost with the old connection (default [`DEFAULT_RESUME_GRACE`]).
    pub fn set_resume_grace(&mut self, grace: Duration) {
        self.resume_grace = grace;
    }

    /// The connection carrying `in_flight` dropped: the tasks whose TASK_SUBMIT the driver had written on it and
    /// whose answer has not arrived. Their answers may be lost; [`Initiator::handle_reconnect`] queries them.
    /// Messages not yet written are not in flight: they go out unchanged on the next connection. Tasks the
    /// initiator does not know (another initiator's, or ended) are ignored. (`now`, like in
    /// [`Initiator::handle_reconnect`], keeps every entry point of the machine on the one time source; no rule of
    /// these two depends on it yet.)
    pub fn handle_disconnect(&mut self, now: Instant, in_flight: impl IntoIterator<Item = TaskKey>) {
        let max = self.max_resumes;
        for key in in_flight {
            if let Some(task) = self.tasks.get_mut(&key) {
                // A query or resubmission in flight was lost too; the next query starts over.
                task.resume.query = None;
                task.resume.resubmission = None;
                task.resume.give_up = None;
                task.resume.poll_at = None;
                task.resume.losses = task.resume.losses.saturating_add(1);
                if task.resume.losses > max {
                    task.resume.lost = false;
                    task.resume.abandoned.get_or_insert(now);
                } else {
                    task.resume.lost = true;
                }
            }
        }
    }

    /// A status query or resubmission of a carrier without pushed answers ([`Initiator::set_status_poll`]) got no
    /// answer (the request failed on the way): the task is queried again after the poll interval rather than at
    /// once, and the loss counts against [`Initiator::set_max_resumes`].
    pub fn handle_query_lost(&mut self, now: Instant, key: &TaskKey) {
        self.handle_disconnect(now, [key.clone()]);
        let poll = self.status_poll.unwrap_or(self.resume_grace);
        if let Some(task) = self.tasks.get_mut(key)
            && task.resume.lost
        {
            task.resume.lost = false;
            task.resume.poll_at = Some(now + poll);
        }
    }

    /// A carrier without pushed answers (HTTP) queries a task reported `running` again after `interval`; `None`
    /// (the default, for carriers that push results on the connection, as WebSocket does) waits for the result.
    pub fn set_status_poll(&mut self, interval: Option<Duration>) {
        self.status_poll = interval;
    }

    /// How many times a task's answer may be lost (a dropped connection, a failed status query) before the task
    /// fails with [`Expired::NotResumed`] (default [`DEFAULT_MAX_RESUMES`]).
    pub fn set_max_resumes(&mut self, max: u32) {
        self.max_resumes = max;
    }

    /// A new connection is up: queues a status query for every task whose answer was lost
    /// ([`Initiator::poll_transmit`]).
    pub fn handle_reconnect(&mut self, _now: Instant) {
        let mut lost: Vec<TaskKey> = self.tasks.iter().filter(|(_, t)| t.resume.lost).map(|(k, _)| k.clone()).collect();
        lost.sort();
        for key in lost {
            self.query(key);
        }
    }

    /// Queues a status query for `key`.
    fn query(&mut self, key: TaskKey) {
        let Some(mode) = self.tasks.get(&key).map(|t| t.mode) else { return };
        let body = TaskUpdate::new(key.task_id.clone(), None, Some(RESUME_QUERY.to_owned()));
        let envelope = self.envelope(&key.session_id, body, mode);
        if let Some(task) = self.tasks.get_mut(&key) {
            task.resume.lost = false;
            task.resume.poll_at = None;
            task.resume.query = Some(envelope.message_id.clone());
        }
        self.transmit.push_back(Transmit::StatusQuery { key, envelope });
    }

    /// The next message the initiator wants sent on its own (status queries, resubmissions).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// Judges one answer to the [`Transmit`] with message id `in_reply_to`: `Ok` an envelope (its `in_reply_to`
    /// binding member removed), `Err` a refusal without one (a transport's error frame). A message for no
    /// transmit the initiator still waits on is [`ResumeVerdict::Wait`]: it answers a task already ended.
    pub fn handle_resume_answer(
        &mut self,
        now: Instant,
        in_reply_to: &str,
        answer: Result<&Envelope, &LdpError>,
    ) -> ResumeVerdict {
        let found = self.tasks.iter().find_map(|(k, t)| {
            if t.resume.query.as_deref() == Some(in_reply_to) {
                Some((k.clone(), true))
            } else if t.resume.resubmission.as_deref() == Some(in_reply_to) {
                Some((k.clone(), false))
            } else {
                None
            }
        });
        let Some((key, is_query)) = found else { return ResumeVerdict::Wait };
        let env = match answer {
            Ok(env) => env,
            Err(error) => {
                // The responder refused the query or the resubmission: that is the task's answer.
                self.tasks.remove(&key);
                return ResumeVerdict::Fail { key, error: error.clone() };
            }
        };
        if is_query { self.query_answered(now, key, env) } else { self.resubmission_answered(now, key, env) }
    }

    fn query_answered(&mut self, now: Instant, key: TaskKey, env: &Envelope) -> ResumeVerdict {
        if let Some(task) = self.tasks.get_mut(&key) {
            task.resume.query = None;
        }
        match &env.body {
            Body::TaskUpdate(u) => {
                let status = u.message.as_deref().unwrap_or_default();
                let poll = self.status_poll;
                let grace = self.resume_grace;
                if let Some(task) = self.tasks.get_mut(&key) {
                    if status != RUNNING {
                        // Ended while we were away: its held result went out before this answer (then it is on its
                        // way to the caller), or it was lost with the old connection. Give it the grace to arrive.
                        task.resume.give_up = Some((now + grace, status.to_owned()));
                    } else if let Some(poll) = poll {
                        // Nothing pushes the result on this carrier: ask again later.
                        task.resume.poll_at = Some(now + poll);
                    }
                }
                ResumeVerdict::Wait
            }
            Body::TaskFailed(f) if f.error.code == codes::TASK_NOT_FOUND => self.resubmit(key),
            // A result the session kept, or the session is gone (expired, closed): the task's answer.
            _ => ResumeVerdict::Deliver(key),
        }
    }

    fn resubmission_answered(&mut self, now: Instant, key: TaskKey, env: &Envelope) -> ResumeVerdict {
        match &env.body {
            Body::TaskUpdate(_) => ResumeVerdict::Progress(key),
            Body::TaskFailed(f) if f.error.code == codes::DUPLICATE_TASK => {
                // The first copy reached the responder after all and runs: its result answers the task (pushed, or
                // fetched by the next status poll).
                let poll = self.status_poll;
                if let Some(task) = self.tasks.get_mut(&key) {
                    task.resume.resubmission = None;
                    task.resume.poll_at = poll.map(|p| now + p);
                }
                ResumeVerdict::Wait
            }
            _ => ResumeVerdict::Deliver(key),
        }
    }

    /// The responder never received the task: queue it again, with the same task id.
    fn resubmit(&mut self, key: TaskKey) -> ResumeVerdict {
        let Some(PendingTask { skill, input, mode, contract, .. }) = self.tasks.get(&key) else {
            return ResumeVerdict::Wait;
        };
        let body = TaskSubmit::new(
            key.task_id.clone(),
            skill.clone(),
            input.clone(),
            contract.as_ref().map(|(c, _)| c.clone()),
        );
        let mode = *mode;
        let envelope = self.envelope(&key.session_id, body, mode);
        if let Some(task) = self.tasks.get_mut(&key) {
            task.resume.resubmission = Some(envelope.message_id.clone());
        }
        self.transmit.push_back(Transmit::Resubmit { key, envelope });
        ResumeVerdict::Wait
    }

    /// The earliest deadline of the initiator: call [`Initiator::handle_timeout`] then (or later).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let resume = self.tasks.values().flat_map(|t| {
            let r = &t.resume;
            [r.give_up.as_ref().map(|(at, _)| *at), r.poll_at, r.abandoned].into_iter().flatten()
        });
        let answers = self.deadlines.values().copied();
        resume.chain(answers).min()
    }

    /// Ends every request whose deadline is at or before `now`: the initiator forgets it, and the driver fails its
    /// caller with the error of each [`Expired`]. Status polls that are due are queued ([`Initiator::poll_transmit`]).
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Expired> {
        let mut expired = Vec::new();
        for key in self.tasks_where(|r| r.abandoned.is_some_and(|at| at <= now)) {
            let losses = self.forget_task(&key).map(|t| t.resume.losses).unwrap_or_default();
            let error = answer_lost(format!("the task's answer was lost {losses} times; it is not resumed again"));
            expired.push(Expired::NotResumed { key, error });
        }
        for key in self.tasks_where(|r| r.give_up.as_ref().is_some_and(|(at, _)| *at <= now)) {
            let status = self.forget_task(&key).and_then(|t| t.resume.give_up).map(|(_, s)| s).unwrap_or_default();
            let error = answer_lost(format!("the task {status} while disconnected and its result was lost in transit"));
            expired.push(Expired::ResultLost { key, error });
        }
        for key in self.tasks_where(|r| r.poll_at.is_some_and(|at| at <= now)) {
            self.query(key);
        }
        let mut due: Vec<Awaited> =
            self.deadlines.iter().filter(|(_, at)| **at <= now).map(|(p, _)| p.clone()).collect();
        due.sort();
        for awaited in due {
            self.deadlines.remove(&awaited);
            if let Some(e) = self.expire(awaited) {
                expired.push(e);
            }
        }
        expired
    }
}

/// The error of a task whose answer is lost for good: a non-retryable `transport` error (the task may have run).
fn answer_lost(message: String) -> LdpError {
    LdpError::transport(codes::TRANSPORT_ERROR, message).with_retryable(false)
}

impl Initiator {
    /// How long a SESSION_PROPOSE or TASK_SUBMIT may go unanswered once written ([`Initiator::handle_sent`]) before
    /// [`Initiator::handle_timeout`] ends it with a `TIMEOUT` (default: none; long tasks are legitimate, and a dead
    /// connection is the transport's to detect).
    pub fn set_answer_timeout(&mut self, timeout: Option<Duration>) {
        self.answer_timeout = timeout;
        if timeout.is_none() {
            self.deadlines.clear();
        }
    }

    /// The driver sent `env` at `now`: under an answer timeout, its answer is due by `now` plus the timeout. True
    /// when the initiator now keeps that deadline (a proposal or task of its own, under an answer timeout): the
    /// driver then leaves the timeout to [`Initiator::handle_timeout`].
    pub fn handle_sent(&mut self, now: Instant, env: &Envelope) -> bool {
        let Some(timeout) = self.answer_timeout else { return false };
        let awaited = match &env.body {
            Body::SessionPropose(_) if self.proposals.contains(&env.session_id) => {
                Awaited::Proposal(env.session_id.clone())
            }
            Body::TaskSubmit(t) => {
                let key = TaskKey { session_id: env.session_id.clone(), task_id: t.task_id.clone() };
                if !self.tasks.contains_key(&key) {
                    return false;
                }
                Awaited::Task(key)
            }
            _ => return false,
        };
        // A resubmission keeps the first deadline: the caller has waited since then.
        self.deadlines.entry(awaited).or_insert(now + timeout);
        true
    }

    /// The driver could not deliver `env`, or lost its answer, and its caller has been given that failure: the
    /// initiator forgets the request. A task is dropped (with its deadline), so that no later answer is reported
    /// for it and the machine does not keep it; a proposal is dropped with the session it proposed, so that a later
    /// SESSION_ACCEPT is not matched to it. Other messages hold no state. Returns whether anything was forgotten.
    pub fn handle_send_failed(&mut self, env: &Envelope) -> bool {
        match &env.body {
            Body::SessionPropose(_) => {
                let Some(at) = self.proposals.iter().position(|p| *p == env.session_id) else { return false };
                self.proposals.remove(at);
                self.deadlines.remove(&Awaited::Proposal(env.session_id.clone()));
                if self.sessions.get(&env.session_id).is_some_and(|s| s.state == SessionState::Proposed) {
                    self.sessions.remove(&env.session_id);
                }
                true
            }
            Body::TaskSubmit(t) => {
                let key = TaskKey { session_id: env.session_id.clone(), task_id: t.task_id.clone() };
                self.deadlines.remove(&Awaited::Task(key.clone()));
                self.tasks.remove(&key).is_some()
            }
            _ => false,
        }
    }

    /// Whether the initiator keeps the answer deadline of `env` ([`Initiator::handle_sent`] took it): a transport
    /// then sets no timer of its own for it.
    pub fn keeps_deadline(&self, env: &Envelope) -> bool {
        match &env.body {
            Body::SessionPropose(_) => self.deadlines.contains_key(&Awaited::Proposal(env.session_id.clone())),
            Body::TaskSubmit(t) => self.deadlines.contains_key(&Awaited::Task(TaskKey {
                session_id: env.session_id.clone(),
                task_id: t.task_id.clone(),
            })),
            _ => false,
        }
    }

    /// The tasks whose resume state `due` picks, in key order (so that what follows is deterministic).
    fn tasks_where(&self, due: impl Fn(&ResumeState) -> bool) -> Vec<TaskKey> {
        let mut keys: Vec<TaskKey> =
            self.tasks.iter().filter(|(_, t)| due(&t.resume)).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
    }

    /// Forgets task `key` and its answer deadline.
    fn forget_task(&mut self, key: &TaskKey) -> Option<PendingTask> {
        self.deadlines.remove(&Awaited::Task(key.clone()));
        self.tasks.remove(key)
    }

    /// Whether `key` is a task the initiator still waits for.
    pub fn awaits_task(&self, key: &TaskKey) -> bool {
        self.tasks.contains_key(key)
    }

    /// Ends one overdue request; `None` when it was answered meanwhile.
    fn expire(&mut self, awaited: Awaited) -> Option<Expired> {
        let timeout = self.answer_timeout.unwrap_or_default();
        // Not retryable: the request may have been handled (the task may run on).
        let error = LdpError::transport(codes::TIMEOUT, format!("no answer within {timeout:?}")).with_retryable(false);
        match awaited {
            Awaited::Proposal(session_id) => {
                let i = self.proposals.iter().position(|p| *p == session_id)?;
                self.proposals.remove(i);
                if let Some(s) = self.sessions.get_mut(&session_id) {
                    s.state = SessionState::Failed;
                }
                Some(Expired::ProposalUnanswered { session_id, error })
            }
            Awaited::Task(key) => {
                self.tasks.remove(&key)?;
                Some(Expired::TaskUnanswered { key, error })
            }
        }
    }
}
