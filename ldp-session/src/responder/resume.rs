//! Suspend and resume: which connection carries a session, and the answers held (bounded) while it is away.

use std::time::Instant;

use ldp_types::{Envelope, LdpError, TaskFailed, codes};

use crate::held::{HeldAnswer, HeldStats};
use crate::{SessionState, TaskKey};

use super::Responder;
use super::types::{Delivery, ResponderEvent};

impl Responder {
    /// Suspends every active session last used over `connection` (the connection dropped). Their TTL keeps
    /// running; results finished meanwhile are held (bounded) for [`Responder::take_held`].
    pub fn suspend_connection(&mut self, connection: u64) {
        // The connection's own sessions only: a peer opening and dropping connections costs no pass over the rest.
        let Some(ids) = self.sessions_per_connection.remove(&connection) else { return };
        for id in ids {
            let Some(s) = self.sessions.get_mut(&id) else { continue };
            if s.connection == Some(connection) && s.state == SessionState::Active {
                if s.is_idle() {
                    self.idle_total = self.idle_total.saturating_sub(1);
                }
                s.state = SessionState::Suspended;
                self.events.push_back(ResponderEvent::SessionSuspended { session_id: id.to_string() });
            }
        }
    }

    /// Lists session `id` under `connection`, which it was just established over, moved to or resumed on. A list is
    /// pruned of sessions that ended or moved, and of repeats, when it reaches a power of two from 64 on, so that
    /// sessions coming and going over one long connection, or one session moved back and forth between two, cannot
    /// grow it past twice the sessions active there (or 64).
    pub(super) fn index_connection(&mut self, connection: u64, id: &str) {
        let Some((id, _)) = self.sessions.get_key_value(id) else { return };
        let listed = self.sessions_per_connection.entry(connection).or_default();
        listed.push(id.clone());
        if listed.len() >= 64 && listed.len().is_power_of_two() {
            let sessions = &self.sessions;
            let mut seen = std::collections::HashSet::with_capacity(listed.len());
            listed.retain(|id| {
                sessions.get(id).is_some_and(|s| s.connection == Some(connection))
                    && seen.insert(std::sync::Arc::clone(id))
            });
        }
    }

    /// The connection that carries `session_id` now: the one its peer last used, while the session is active.
    /// `None` when it is suspended or gone (its answers are then held for the resume).
    pub fn connection_of(&self, session_id: &str) -> Option<u64> {
        self.sessions.get(session_id).filter(|s| s.state == SessionState::Active).and_then(|s| s.connection)
    }

    /// The answers held for `session_id` while it was away, each handed out exactly once, for the transport to
    /// write before anything else on the session's connection: first a TASK_FAILED `RESULT_NOT_KEPT` for every task
    /// whose answer was dropped over [`Limits::held`](crate::Limits::held), then the answers kept, oldest first.
    pub fn take_held(&mut self, session_id: &str) -> Vec<HeldAnswer> {
        let taken = self.held.take(session_id);
        let mut answers = Vec::with_capacity(taken.dropped.len() + taken.results.len());
        let why = "the server's limit on results held for a disconnected session was reached";
        for task_id in taken.dropped {
            let Some(env) = self.result_not_kept(session_id, &task_id, why) else { continue };
            match env.to_json() {
                Ok(json) => answers.push(HeldAnswer::new(task_id, json)),
                Err(e) => tracing::error!(error = %e, "cannot encode a RESULT_NOT_KEPT"),
            }
        }
        answers.extend(taken.results.into_iter().map(|(task_id, json)| HeldAnswer::new(task_id, json)));
        answers
    }

    /// Keeps a final answer to `task_id` that a transport could not deliver (its connection ended before the
    /// message was written), encoded as it would have been written, for the session's resume. Bounded with the
    /// machine's own held answers ([`Limits::held`](crate::Limits::held)); ignored when the session has ended.
    pub fn hold(&mut self, now: Instant, session_id: &str, task_id: &str, json: String) {
        if self.sessions.contains_key(session_id) {
            self.held.push(now, &self.cfg.limits.held, session_id, task_id, json);
        }
    }

    /// What the held-answers store holds now, and what it dropped.
    pub fn held_stats(&self) -> HeldStats {
        self.held.stats()
    }

    /// A TASK_FAILED with [`codes::RESULT_NOT_KEPT`] for `task_id`, addressed (and signed, when the session signs)
    /// like the result it replaces: for a binding that had to drop a result it held for the session's resume.
    /// `None` when the session is gone.
    pub fn result_not_kept(&mut self, session_id: &str, task_id: &str, why: &str) -> Option<Envelope> {
        let s = self.sessions.get(session_id)?;
        let (peer, mode) = (s.peer.to_string(), s.mode);
        let error =
            LdpError::runtime(codes::RESULT_NOT_KEPT, format!("the result of task {task_id:?} was not kept: {why}"))
                .with_retryable(false);
        Some(self.envelope(session_id, &peer, TaskFailed::new(task_id.to_owned(), error), mode))
    }

    /// Sends a task's final answer, or holds it (bounded) while its session is suspended.
    pub(super) fn deliver(&mut self, now: Instant, key: &TaskKey, env: Envelope) -> Delivery {
        let suspended = self.sessions.get(key.session_id.as_str()).is_some_and(|s| s.state == SessionState::Suspended);
        if !suspended {
            return Delivery::Send(env);
        }
        if self.shared {
            self.shared_ended.push_back((key.clone(), env.clone()));
        }
        let limits = &self.cfg.limits.held;
        match env.to_json() {
            Ok(json) => self.held.push(now, limits, &key.session_id, &key.task_id, json),
            // Not kept, and reported as such on resume rather than lost silently.
            Err(_) => self.held.bury_one(now, limits, &key.session_id, &key.task_id),
        }
        Delivery::Held
    }
}
