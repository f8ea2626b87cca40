//! The responder's side of state shared between replicas (`crate::shared`): what it hands its driver to commit to a
//! store, and how it takes back what the store knows. Every rule stays here; the driver only moves the records.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{Envelope, LdpError, TaskFailed, TaskResult, TaskUpdate, codes};

use crate::TaskKey;
use crate::error::Refusal;
use crate::shared::{ReplayClaim, ReplayVerdict, SessionUsage, SharedSession, SharedTask, SharedTaskStatus};

use super::inbound::{dedupe_key, reference_category};
use super::sessions::{Ended, ResponderSession, idle_order_of};
use super::sources::{PrincipalSessions, recorded_quota};
use super::types::PeerContext;
use super::{MAX_TTL, Responder};

/// How a session ended according to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedEnd {
    /// Closed by some replica: later messages get `SESSION_CLOSED`.
    Closed,
    /// Gone from the store (its TTL ran out everywhere): later messages get `SESSION_EXPIRED`.
    Expired,
    /// Never committed (the store refused or failed when it was established): forgotten without a trace.
    Discarded,
}

impl Responder {
    /// Tells the machine a store shares its state: final answers it holds for a suspended session are then also
    /// handed to the driver ([`Responder::poll_shared_ended`]), which records them for other replicas.
    pub fn set_shared(&mut self, shared: bool) {
        self.shared = shared;
    }

    /// The next final answer the machine held for a suspended session since the last call (only with
    /// [`Responder::set_shared`]): the driver records it in the store, as it does the answers it sends.
    pub fn poll_shared_ended(&mut self) -> Option<(TaskKey, Envelope)> {
        self.shared_ended.pop_front()
    }

    /// The refusal of a message the store's replay window has seen (`Seen`), or whose sender's share of it is full
    /// (`Full`), or that is full as a whole (`TableFull`), with the errors of the machine's own window; `None` for a
    /// fresh message.
    pub fn refuse_shared_replay(&mut self, env: &Envelope, verdict: ReplayVerdict) -> Option<Refusal> {
        let error = match verdict {
            ReplayVerdict::Fresh => return None,
            ReplayVerdict::Seen => crate::security::replay_detected(env),
            ReplayVerdict::Full => crate::security::share_full(),
            ReplayVerdict::TableFull => crate::security::table_full(),
        };
        if verdict != ReplayVerdict::Seen {
            self.refusals.replay_window.refused(Instant::now());
        }
        Some(self.refuse(env, error))
    }

    /// The shared replay-window entry of an inbound message, for a store to insert if absent before the machine
    /// sees the message. With replay protection on, a signed message's id and nonce, kept until its timestamp leaves
    /// the window (a future skew later, for replicas whose clocks lag), counted against the sender's principal; without it, the unsigned dedupe pair (session, message
    /// id), kept for the dedupe window. Signed entries carry the window's bounds (per principal and in total,
    /// [`crate::ReplayConfig`]), which the store enforces across replicas. `None` when the message would be refused anyway (timestamp outside the
    /// window or unparseable): the machine refuses it with its own typed error.
    pub fn replay_claim(&self, peer: &PeerContext, env: &Envelope) -> Option<ReplayClaim> {
        let wall = self.wall.now_utc();
        let principal = self.quota_key(peer, env).to_string();
        let (key, expires, max, max_total) = match self.cfg.security.replay {
            Some(replay) => {
                let ts = crate::security::timestamp_in_window(&replay, env, wall).ok()?;
                let window = time::Duration::try_from(replay.window).unwrap_or(time::Duration::MAX);
                let key = crate::security::replay_key(env);
                // Kept a future skew past the window: a replica whose clock lags the one that admitted the message
                // (by up to the skew the window tolerates) still takes its timestamp as in the window, and must
                // still find the entry.
                let skew = time::Duration::try_from(replay.future_skew).unwrap_or(time::Duration::ZERO);
                let expires = ts.checked_add(window)?.checked_add(skew)?;
                (digest_hex(key.as_bytes()), expires, Some(replay.max_entries_per_principal), Some(replay.max_entries))
            }
            None => {
                ldp_types::time::parse_timestamp(&env.timestamp).ok()?;
                let window = time::Duration::try_from(self.cfg.limits.unsigned_dedupe_window).ok()?;
                // The local dedupe forgets when full rather than refusing; the shared one never refuses either
                // (its entries leave with the window).
                (hex(&dedupe_key(&env.session_id, &env.message_id)), wall.checked_add(window)?, None, None)
            }
        };
        let expires_at_ms = i64::try_from(expires.unix_timestamp_nanos() / 1_000_000).ok()?;
        Some(ReplayClaim { principal, key, expires_at_ms, max_per_principal: max, max_total })
    }

    /// Whether a message's dedupe entry ([`Responder::replay_claim`]) goes with its task's claim
    /// ([`crate::shared::TaskStep::Claim`]'s `dedupe`) rather than in the admission's replay step: an unsigned
    /// TASK_SUBMIT (no replay protection). Its claim already makes one store write, keyed by the task, which then
    /// keeps the message's entry ([`crate::shared::SharedTask::message_key`]); the entry itself is written only when
    /// no claim is made, when the machine refuses the task and its claim is given back, or when the record would
    /// not outlive it. The same TASK_SUBMIT resent to any replica is refused `REPLAY_DETECTED` as before, for one
    /// store write per task fewer. One answer differs: a peer that reuses a TASK_SUBMIT's message id for another
    /// message (another task, another type) is refused by the replica that saw the first, not by the others, since
    /// the record is found by its task. Unsigned message ids are the peer's own to keep unique (RFC); signed
    /// messages keep their replay entry, whose bounds per principal are a protection of their own.
    pub fn claim_dedupes(&self, env: &Envelope) -> bool {
        self.cfg.security.replay.is_none() && matches!(env.body, ldp_types::Body::TaskSubmit(_))
    }

    /// The record of a live session for the store (after its SESSION_ACCEPT).
    pub fn shared_session(&self, session_id: &str) -> Option<SharedSession> {
        let s = self.sessions.get(session_id)?;
        Some(SharedSession {
            session_id: session_id.to_owned(),
            peer: s.peer.to_string(),
            owner: s.owner.as_deref().map(str::to_owned),
            quota: Some(s.quota.to_string()),
            peer_delegate: s.peer_delegate.as_deref().map(str::to_owned),
            peer_domain: s.peer_domain.to_string(),
            mode: s.mode,
            fallback: s.fallback.to_vec(),
            ttl_secs: s.ttl.as_secs(),
        })
    }

    /// A session the store says is live: continued here. Unknown here (established on another replica, or before
    /// a restart), it is installed as the store has it; known, its TTL restarts. The store is the authority on
    /// liveness, so a local tombstone (this replica saw no message for a TTL while others did) gives way.
    ///
    /// Installing one counts against both session limits as an established session does. At
    /// `max_sessions_per_principal` for the session's principal, this replica's copy of that principal's least
    /// recently used idle session (active, no task running) is dropped to make room; at `max_sessions`, that of
    /// any principal. The store still holds a dropped session, so its next message here adopts it again; what it
    /// loses is only this replica's copy of the session's context and task history, as when a session moves to
    /// another replica. Without such a session (every one is running a task or suspended), the adoption is refused
    /// `CAPACITY_EXCEEDED` (retryable), so that peers continuing sessions of other replicas here cannot grow this
    /// one past either limit, nor one principal take more of it than a principal may.
    pub fn adopt_session(&mut self, now: Instant, shared: &SharedSession) -> Result<(), LdpError> {
        if let Some(local) = self.sessions.get_mut(shared.session_id.as_str()) {
            local.last_activity = now;
            return Ok(());
        }
        let key = match &shared.quota {
            Some(quota) => Arc::from(quota.as_str()),
            None => recorded_quota(shared.owner.as_deref(), &shared.peer),
        };
        if self.principal_full(&key) && !self.drop_idle_copy(Some(&key)) {
            return Err(no_room_for_principal());
        }
        if self.sessions.len() >= self.cfg.limits.max_sessions && !self.drop_idle_copy(None) {
            return Err(no_room());
        }
        let id: Arc<str> = shared.session_id.as_str().into();
        if self.ended.remove(&*id).is_some() {
            self.ended_order.retain(|e| **e != *id);
        }
        let ttl = Duration::from_secs(shared.ttl_secs).min(self.cfg.limits.max_ttl).min(MAX_TTL);
        let session = ResponderSession::active(
            shared.peer.as_str().into(),
            shared.owner.as_deref().map(Into::into),
            key.clone(),
            shared.peer_delegate.as_deref().map(Into::into),
            shared.peer_domain.as_str().into(),
            (shared.mode, shared.fallback.clone().into_boxed_slice()),
            ttl,
            now,
            None,
        );
        self.expiry.push(Reverse((session.deadline(), id.clone())));
        self.sessions.insert(id.clone(), session);
        self.count_session(key, id);
        self.count_idle(&shared.session_id);
        Ok(())
    }

    /// Whether [`Responder::adopt_session`] would take the session `env` is for, sent by `peer`, now: it is known
    /// here, or both limits leave room (the principal's sessions here, then all of them), each either under its
    /// limit or with an idle session whose copy can go. A driver asks before its store admission, so that a message
    /// this replica cannot take is refused before the store acts on it (a cancel, say); the adoption itself may
    /// still be refused when another took the room meanwhile. The principal is the sender's, which is the
    /// session's own for every message the machine would take (a message from another peer is refused anyway).
    pub fn room_for_session(&self, peer: &PeerContext, env: &Envelope) -> Result<(), LdpError> {
        if self.sessions.contains_key(env.session_id.as_str()) {
            return Ok(());
        }
        let key = self.quota_key(peer, env);
        if self.principal_full(&key) && !self.idle_of(&key) {
            return Err(no_room_for_principal());
        }
        let room = self.sessions.len() < self.cfg.limits.max_sessions || self.idle_total > 0;
        if room { Ok(()) } else { Err(no_room()) }
    }

    /// Whether the principal `key` holds `max_sessions_per_principal` sessions here.
    fn principal_full(&self, key: &str) -> bool {
        self.sessions_of(key) >= self.cfg.limits.max_sessions_per_principal
    }

    /// Whether the principal `key` has an idle session here. Run only at its limit, it reads that principal's
    /// sessions alone: a peer at its limit that sends messages for sessions not held here costs a scan of its own
    /// sessions, not of every session this replica holds.
    fn idle_of(&self, key: &str) -> bool {
        self.ids_of(key).any(|id| self.sessions.get(id).is_some_and(ResponderSession::is_idle))
    }

    /// The ids of the principal `key`'s live sessions here.
    fn ids_of<'a>(&'a self, key: &str) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        self.sessions_per_principal.get(key).into_iter().flat_map(PrincipalSessions::iter)
    }

    /// Drops this replica's copy of its least recently used idle session (active, no task running), of the
    /// principal `of` or of any, which the store still holds: no tombstone, no event, nothing aborted; answers held
    /// for it stay (under their own TTL), for the session's resume if it is adopted here again. Returns whether
    /// there was one. Run only at a session limit: a principal's are found by a scan of its own sessions (at most
    /// `max_sessions_per_principal`), any principal's from the idle order, without a scan. The expiry queue's
    /// entries it leaves stale are swept out once they outnumber the sessions twice, so that churn cannot grow the
    /// queue.
    fn drop_idle_copy(&mut self, of: Option<&str>) -> bool {
        let idle = match of {
            Some(key) => self
                .ids_of(key)
                .filter_map(|id| Some((id, self.sessions.get(id)?)))
                .filter(|(_, s)| s.is_idle())
                .min_by_key(|(_, s)| s.last_activity)
                .map(|(id, _)| id.clone()),
            None => self.least_recent_idle(),
        };
        idle.is_some_and(|id| self.drop_copy(&id))
    }

    /// Drops this replica's copy of the idle session `id`, which the store still holds (see
    /// [`Responder::drop_idle_copy`]). Returns whether it was held.
    pub(super) fn drop_copy(&mut self, id: &str) -> bool {
        let Some((id, session)) = self.sessions.remove_entry(id) else { return false };
        self.uncount_idle();
        self.uncount_session(&session.quota, &id);
        if self.expiry.len() > 2 * self.sessions.len().max(16) {
            self.expiry = self.sessions.iter().map(|(id, s)| Reverse((s.deadline(), id.clone()))).collect();
        }
        true
    }

    /// The least recently used idle session, from the idle order (built here the first time it is needed). Entries
    /// whose session left or is busy are dropped (a session queues itself again when it is next idle); one whose
    /// session was used since is queued again at its last use. Each entry is so handled once per use or change of
    /// its session, so the cost is bounded by what peers did, not by the sessions held.
    fn least_recent_idle(&mut self) -> Option<Arc<str>> {
        if self.idle_total == 0 {
            return None;
        }
        let sessions = &self.sessions;
        let order = self.idle_order.get_or_insert_with(|| idle_order_of(sessions));
        while let Some(Reverse((at, id))) = order.pop() {
            let Some(s) = sessions.get(&id).filter(|s| s.is_idle()) else { continue };
            if s.last_activity != at {
                order.push(Reverse((s.last_activity, id)));
                continue;
            }
            return Some(id);
        }
        // Unreachable while every idle session is queued; should one not be, a rebuild finds it.
        *order = idle_order_of(sessions);
        order.peek().map(|Reverse((_, id))| id.clone())
    }

    /// The task limit per session that the store counts across replicas ([`crate::shared::TaskStep::Claim`]'s
    /// `max_tasks`), `None` without one.
    pub fn shared_task_limit(&self) -> Option<u64> {
        self.cfg.limits.max_tasks_per_session
    }

    /// Whether a TASK_SUBMIT is judged by the session's usage (a task limit or a budget), which a store then answers
    /// with its claim.
    pub fn judges_by_usage(&self) -> bool {
        let budget = &self.cfg.limits.session_budget;
        self.cfg.limits.max_tasks_per_session.is_some() || budget.max_tokens.is_some() || budget.max_cost_usd.is_some()
    }

    /// Takes in a session's spending across replicas as the store has it (read with a TASK_SUBMIT's claim): this
    /// replica's tokens and cost become the larger of its own and the store's, so the budget is judged on what the
    /// session spent everywhere. Its own are the larger only by what the store has not recorded yet (a task that
    /// ended here a moment ago) or missed. The task count is not taken in: the store counts claims itself and
    /// refuses one past the limit ([`crate::shared::TaskClaim::LimitReached`]), while its count includes claims of
    /// this replica not yet admitted here, which the machine would count a second time.
    pub fn merge_shared_usage(&mut self, session_id: &str, usage: &SessionUsage) {
        let Some(s) = self.sessions.get_mut(session_id) else { return };
        s.tokens_used = s.tokens_used.max(usage.tokens);
        // A NaN is never the larger.
        if usage.cost_usd > s.cost_usd {
            s.cost_usd = usage.cost_usd;
        }
    }

    /// A session the store says has ended (or that could not be committed): ended here too, its running tasks
    /// aborted (queued for [`Responder::poll_aborted`]). Returns those tasks.
    pub fn end_shared_session(&mut self, session_id: &str, how: SharedEnd) -> Vec<TaskKey> {
        let ended = match how {
            SharedEnd::Closed => Ended::Closed,
            SharedEnd::Expired | SharedEnd::Discarded => Ended::Expired,
        };
        let aborted = if self.sessions.contains_key(session_id) {
            self.end_session(session_id, ended)
        } else {
            if how != SharedEnd::Discarded && !self.ended.contains_key(session_id) {
                self.tombstone(session_id, ended);
            }
            Vec::new()
        };
        if how == SharedEnd::Discarded && self.ended.remove(session_id).is_some() {
            self.ended_order.retain(|e| **e != *session_id);
        }
        aborted
    }

    /// Takes back the admission of a task another submission already holds in the store: it never runs here, and
    /// its submitter is told `DUPLICATE_TASK`, as for a task id this replica knows.
    pub fn refuse_claimed(&mut self, key: &TaskKey) -> Option<Refusal> {
        self.retract_task(key, super::admit::duplicate_task(&key.task_id))
    }

    /// Takes back the admission of a task the store refused because the session reached its task limit on other
    /// replicas meanwhile: it never runs, and its submitter is told `BUDGET_EXCEEDED`, as for the limit here.
    pub fn refuse_over_limit(&mut self, key: &TaskKey) -> Option<Refusal> {
        self.retract_task(key, super::admit::task_limit_reached())
    }

    /// Takes back the admission of a task (it never ran), answering its submitter with `error` (a store failure).
    pub fn retract_task(&mut self, key: &TaskKey, error: LdpError) -> Option<Refusal> {
        let s = self.sessions.get_mut(key.session_id.as_str())?;
        let task = s.running.remove(key.task_id.as_str())?;
        s.tasks_submitted = s.tasks_submitted.saturating_sub(1);
        let peer = s.peer.to_string();
        let idle = s.is_idle();
        self.count_task_left(&key.session_id, idle);
        let body = TaskFailed::new(key.task_id.clone(), reference_category(&error));
        let reply = self.envelope(&key.session_id, &peer, body, task.mode);
        Some(Refusal { error, reply: Some(reply) })
    }

    /// Refuses `env` with `error` (a store failure before the machine saw it), answered in protocol as the machine
    /// answers its own refusals.
    pub fn refusal(&mut self, env: &Envelope, error: LdpError) -> Refusal {
        self.refuse(env, error)
    }

    /// The answer to a status query for a task this replica does not know but the store does (it ran on another
    /// replica, or before a restart): its result, its failure, or `running`.
    pub(super) fn remote_status(&mut self, env: &Envelope, task_id: &str, remote: &SharedTask) -> Envelope {
        let (session_id, to) = (env.session_id.as_str(), env.from.as_str());
        let output = remote.output.as_ref().and_then(|o| ldp_types::RawJson::from_json(o.clone()).ok());
        match (remote.status, output, &remote.provenance, &remote.error) {
            (SharedTaskStatus::Completed, Some(output), Some(provenance), _) => {
                let body = TaskResult::new(task_id.to_owned(), output, (**provenance).clone());
                self.envelope(session_id, to, body, remote.mode)
            }
            // Failed, or completed with a result the store did not keep (`SharedTask::bounded`).
            (SharedTaskStatus::Failed | SharedTaskStatus::Completed, _, _, Some(error)) => {
                let body = TaskFailed::new(task_id.to_owned(), reference_category(error));
                self.envelope(session_id, to, body, remote.mode)
            }
            (SharedTaskStatus::Running, ..) => {
                let body = TaskUpdate::new(task_id.to_owned(), None, Some("running".to_owned()));
                self.envelope(session_id, to, body, env.payload_mode)
            }
            _ => {
                let error = LdpError::runtime(codes::RESULT_NOT_KEPT, "the task's record in the store is incomplete")
                    .with_retryable(false);
                self.envelope(session_id, to, TaskFailed::new(task_id.to_owned(), error), remote.mode)
            }
        }
    }
}

fn digest_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(bytes)[..16])
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The refusal of a session this replica has no room for: at `max_sessions`, every session running a task or
/// suspended.
fn no_room() -> LdpError {
    LdpError::session(codes::CAPACITY_EXCEEDED, "too many sessions on this replica, every one busy; retry later")
        .with_retryable(true)
}

/// The refusal of a session whose principal holds `max_sessions_per_principal` sessions here, every one running a
/// task or suspended.
fn no_room_for_principal() -> LdpError {
    LdpError::session(
        codes::CAPACITY_EXCEEDED,
        "this peer holds the most sessions allowed on this replica, every one busy; retry later",
    )
    .with_retryable(true)
}
