//! Sessions: establishment (trust domain, caps, TTL), the one check every in-session message passes (live, from
//! its peer; touching and resuming it), and their end (close, expiry).

use crate::keyed::{PeerKeyed, PeerMap};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{Body, Envelope, LdpError, PayloadMode, SessionAccept, SessionClose, codes, negotiate};

use crate::config::DeclaredDomains;
use crate::error::{Misuse, Refusal, SessionError};
use crate::{SessionState, TaskKey};

use super::context::Context;
use super::tasks::RunningTask;
use super::types::{Outcome, PeerContext, ResponderEvent, TaskStatus};
use super::{MAX_TTL, Responder, internal, session_error};

/// Per-session state. Kept small: an idle session is a few hundred bytes.
#[derive(Debug)]
pub(super) struct ResponderSession {
    pub(super) peer: Box<str>,
    /// The authenticated principal that opened the session ([`PeerContext::principal`]); only it may use it.
    pub(super) owner: Option<Box<str>>,
    /// The source the session counts against in the per-source limits ([`Responder::quota_key`]), shared with the
    /// principals' index.
    pub(super) quota: Arc<str>,
    pub(super) peer_delegate: Option<Box<str>>,
    pub(super) peer_domain: Box<str>,
    pub(super) state: SessionState,
    pub(super) mode: PayloadMode,
    pub(super) fallback: Box<[PayloadMode]>,
    pub(super) ttl: Duration,
    pub(super) last_activity: Instant,
    pub(super) connection: Option<u64>,
    pub(super) running: PeerMap<Box<str>, RunningTask>,
    pub(super) history: VecDeque<HistoryEntry>,
    /// Earlier tasks' inputs and outputs (RFC 5.3).
    pub(super) context: Context,
    pub(super) tasks_submitted: u64,
    pub(super) tokens_used: u64,
    pub(super) cost_usd: f64,
}

impl ResponderSession {
    /// A session just established (or adopted from the store): active, with nothing run yet.
    #[allow(clippy::too_many_arguments)] // One per field a new session takes from its opening; the rest start empty.
    pub(super) fn active(
        peer: Box<str>,
        owner: Option<Box<str>>,
        quota: Arc<str>,
        peer_delegate: Option<Box<str>>,
        peer_domain: Box<str>,
        (mode, fallback): (PayloadMode, Box<[PayloadMode]>),
        ttl: Duration,
        now: Instant,
        connection: Option<u64>,
    ) -> Self {
        Self {
            peer,
            owner,
            quota,
            peer_delegate,
            peer_domain,
            state: SessionState::Active,
            mode,
            fallback,
            ttl,
            last_activity: now,
            connection,
            running: PeerMap::default(),
            history: VecDeque::new(),
            context: Context::default(),
            tasks_submitted: 0,
            tokens_used: 0,
            cost_usd: 0.0,
        }
    }

    /// Whether a message from `from`, authenticated as `delegate` by the credential `principal`, comes from the
    /// peer that opened the session.
    pub(super) fn is_peer(&self, from: &str, delegate: Option<&str>, principal: Option<&str>) -> bool {
        *self.peer == *from
            && (self.peer_delegate.is_none() || self.peer_delegate.as_deref() == delegate)
            && self.owner.as_deref() == principal
    }

    /// A message from the session's peer arrived on `connection` (when the transport has connections): the TTL
    /// restarts, the session's answers go to that connection, and a suspended session resumes. Returns whether it
    /// resumed. A message with no connection (HTTP) leaves an active session's connection as it is (its peer may
    /// use both), but one that resumes the session forgets it: a session is suspended only when its connection
    /// drops, so that connection is gone.
    pub(super) fn touch(&mut self, now: Instant, connection: Option<u64>) -> bool {
        self.last_activity = now;
        let resumed = self.state == SessionState::Suspended;
        if connection.is_some() || resumed {
            self.connection = connection;
        }
        if resumed {
            self.state = SessionState::Active;
        }
        resumed
    }

    /// Whether this replica's copy may be dropped for a session adopted from the store: active, no task running
    /// (a suspended session waits for its resume here).
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.state == SessionState::Active
    }

    /// The initiator's delegate id, owned: the `to` of a message this session sends.
    pub(super) fn peer_id(&self) -> String {
        String::from(&*self.peer)
    }

    pub(super) fn deadline(&self) -> Instant {
        self.last_activity + self.ttl
    }

    /// Records a task that left `running`, keeping at most `history_len` entries.
    pub(super) fn record_history(&mut self, task_id: &str, skill: Box<str>, status: TaskStatus, history_len: usize) {
        if history_len > 0 {
            if self.history.len() >= history_len {
                self.history.pop_front();
            }
            self.history.push_back(HistoryEntry { tag: IdTag::of(task_id), task_id: task_id.into(), skill, status });
        }
    }

    /// The remembered finished task `task_id`, latest first.
    pub(super) fn finished(&self, task_id: &str) -> Option<&HistoryEntry> {
        let tag = IdTag::of(task_id);
        self.history.iter().rev().find(|h| h.is(tag, task_id))
    }

    /// [`ResponderSession::finished`], to change.
    pub(super) fn finished_mut(&mut self, task_id: &str) -> Option<&mut HistoryEntry> {
        let tag = IdTag::of(task_id);
        self.history.iter_mut().rev().find(|h| h.is(tag, task_id))
    }
}

#[derive(Debug)]
pub(super) struct HistoryEntry {
    /// Compared before the id: a submit checks its id against the whole history.
    tag: IdTag,
    pub(super) task_id: Box<str>,
    pub(super) skill: Box<str>,
    pub(super) status: TaskStatus,
}

impl HistoryEntry {
    /// Whether this is the task `task_id`, whose tag is `tag`.
    pub(super) fn is(&self, tag: IdTag, task_id: &str) -> bool {
        self.tag == tag && *self.task_id == *task_id
    }
}

/// 32 bits of an id's keyed hash: two ids with different tags differ, so most comparisons end on one integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IdTag(u32);

impl IdTag {
    pub(super) fn of(id: &str) -> Self {
        // Truncated on purpose: the tag only filters, and equal tags are confirmed on the ids themselves.
        Self(PeerKeyed.hash_one(id) as u32)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Expired,
    Closed,
    /// Closed to make room in a full session table for a peer of a lighter source ([`Responder::make_room_for`]).
    Evicted,
}

/// Idle sessions by last activity, least recent first: (last activity, session id).
pub(super) type IdleOrder = BinaryHeap<Reverse<(Instant, Arc<str>)>>;

/// The idle sessions of `sessions` by last activity, for [`Responder`]'s idle order.
pub(super) fn idle_order_of(sessions: &PeerMap<Arc<str>, ResponderSession>) -> IdleOrder {
    sessions.iter().filter(|(_, s)| s.is_idle()).map(|(id, s)| Reverse((s.last_activity, id.clone()))).collect()
}

impl Responder {
    /// Counts session `id` as idle: new here, its last task ended, or it resumed. It is queued in the idle order
    /// when that is kept; the order is rebuilt when its entries outnumber the sessions twice (each session that
    /// runs task after task queues itself once per task), so that it cannot grow past that.
    pub(super) fn count_idle(&mut self, id: &str) {
        self.idle_total += 1;
        let Some(order) = &mut self.idle_order else { return };
        if let Some((id, s)) = self.sessions.get_key_value(id) {
            order.push(Reverse((s.last_activity, id.clone())));
        }
        if order.len() > 2 * self.sessions.len() + 64 {
            *order = idle_order_of(&self.sessions);
        }
    }

    /// A task left its session's running tasks (ended, aborted or taken back): one fewer running here, and the
    /// session, `idle` now (that was its last task and it is active), counts as idle again.
    pub(super) fn count_task_left(&mut self, session_id: &str, idle: bool) {
        self.running_total = self.running_total.saturating_sub(1);
        if idle {
            self.count_idle(session_id);
        }
    }

    /// Stops counting a session as idle: a task started in it, it was suspended, or it left.
    pub(super) fn uncount_idle(&mut self) {
        self.idle_total = self.idle_total.saturating_sub(1);
    }

    pub(super) fn initiator_domain(&self, peer: &PeerContext, declared: Option<&str>) -> Result<String, LdpError> {
        if let Some(auth) = &peer.authenticated {
            if let Some(d) = declared
                && d != auth.trust_domain
            {
                return Err(LdpError::policy(
                    codes::TRUST_VIOLATION,
                    format!("declared trust domain {d:?} contradicts the authenticated domain {:?}", auth.trust_domain),
                ));
            }
            return Ok(auth.trust_domain.clone());
        }
        let believed = declared.filter(|d| match &self.cfg.trust.declared_domains {
            DeclaredDomains::TakeAtWord => true,
            DeclaredDomains::Allow(list) => list.iter().any(|a| a == d),
            DeclaredDomains::Ignore => false,
        });
        match (believed, &self.cfg.trust.unidentified_domain) {
            (Some(d), _) => Ok(d.to_owned()),
            // A declaration the policy does not believe is no identification: the peer is unidentified.
            (None, Some(assumed)) => Ok(assumed.clone()),
            (None, _) => Err(LdpError::policy(
                codes::TRUST_VIOLATION,
                match declared {
                    Some(d) => format!("declared trust domain {d:?} is not accepted without authentication"),
                    None => "the initiator's trust domain is unknown (not authenticated)".to_owned(),
                },
            )),
        }
    }

    pub(super) fn on_propose(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        let Body::SessionPropose(p) = &env.body else { return Err(self.refuse(&env, internal())) };
        let config = p.config.clone();
        let domain = match self.initiator_domain(peer, config.trust_domain.as_deref()) {
            Ok(d) => d,
            Err(e) => return Err(self.refuse(&env, e)),
        };
        if let Err(v) = self.cfg.card.trust_domain.check_session(&domain, config.required_trust_domain.as_deref()) {
            return Err(self.refuse(&env, LdpError::from(&v)));
        }
        let owner = peer.principal();
        let key = self.quota_key(peer, &env);
        let held = self.sessions_of(&key);
        if held >= self.cfg.limits.max_sessions_per_principal {
            self.refusals.session_share.refused(now);
            let error = session_error(
                codes::CAPACITY_EXCEEDED,
                format!("this peer holds {held} sessions, the most allowed; close one or retry later"),
            )
            .with_retryable(true);
            return Err(self.refuse(&env, error));
        }
        if self.sessions.len() >= self.cfg.limits.max_sessions && !self.make_room_for(&key, held) {
            self.refusals.session_table.refused(now);
            let error = session_error(codes::CAPACITY_EXCEEDED, "too many sessions; retry later").with_retryable(true);
            return Err(self.refuse(&env, error));
        }
        let negotiated =
            negotiate(&config.preferences(), &self.cfg.card.supported_payload_modes, &self.cfg.implemented_modes);
        let ttl_secs = match config.ttl_secs() {
            0 => ldp_types::SessionConfig::DEFAULT_TTL_SECS,
            n => n,
        };
        // A century bounds the TTL even when `max_ttl` does not, so that `last_activity + ttl` cannot overflow.
        let ttl = Duration::from_secs(ttl_secs).min(self.cfg.limits.max_ttl).min(MAX_TTL);
        // Keep the initiator's id when it is fresh and unused (the Rust SDK relies on it); assign one otherwise.
        let proposed = env.session_id.as_str();
        let session_id = if !proposed.is_empty()
            && proposed.len() <= 128
            && !self.sessions.contains_key(proposed)
            && !self.ended.contains_key(proposed)
        {
            proposed.to_owned()
        } else {
            self.ids.uuid()
        };
        let session = ResponderSession::active(
            env.from.as_str().into(),
            owner.map(Into::into),
            key.clone(),
            peer.authenticated.as_ref().and_then(|a| a.delegate_id.as_deref()).map(Into::into),
            domain.as_str().into(),
            (negotiated.mode, negotiated.fallback_chain.clone().into_boxed_slice()),
            ttl,
            now,
            peer.connection,
        );
        // One allocation of the id, shared by the session table, the expiry queue and the principal's list.
        let id: Arc<str> = session_id.as_str().into();
        self.expiry.push(Reverse((session.deadline(), id.clone())));
        self.sessions.insert(id.clone(), session);
        self.count_session(key, id);
        self.count_idle(&session_id);
        if let Some(connection) = peer.connection {
            self.index_connection(connection, &session_id);
        }
        self.events.push_back(ResponderEvent::SessionEstablished {
            session_id: session_id.clone(),
            peer: env.from.clone(),
            peer_domain: domain,
            mode: negotiated.mode,
        });
        let body = SessionAccept::new(session_id.clone(), negotiated.mode, Some(negotiated.fallback_chain));
        Ok(Outcome::Reply(self.envelope(&session_id, &env.from, body, PayloadMode::Text)))
    }

    /// Finds the message's session and checks that it is live and that the sender is its peer. A suspended session
    /// resumes on its peer's first message.
    pub(super) fn with_session(&mut self, now: Instant, peer: &PeerContext, env: &Envelope) -> Result<(), Refusal> {
        let id = env.session_id.as_str();
        // The common case, a live session, with one lookup.
        if let Some(session) = self.sessions.get_mut(id)
            && session.deadline() > now
        {
            let authenticated = peer.authenticated.as_ref().and_then(|a| a.delegate_id.as_deref());
            // Another credential may not use the session, even under the same `from` and trust domain.
            if !session.is_peer(&env.from, authenticated, peer.principal().as_deref()) {
                let error =
                    session_error(codes::NOT_SESSION_PEER, format!("{:?} is not the peer of session {id:?}", env.from))
                        .with_retryable(false);
                return Err(self.refuse(env, error));
            }
            let moved = peer.connection.is_some() && session.connection != peer.connection;
            let resumed = session.touch(now, peer.connection);
            let idle = session.is_idle();
            if let Some(connection) = peer.connection.filter(|_| moved || resumed) {
                self.index_connection(connection, id);
            }
            if resumed {
                if idle {
                    self.count_idle(id);
                }
                self.events.push_back(ResponderEvent::SessionResumed { session_id: id.to_owned() });
            }
            return Ok(());
        }
        // Not live: reap it if it expired meanwhile, and say why it is gone.
        if self.sessions.contains_key(id) {
            self.end_session(id, Ended::Expired);
        }
        let error = match self.ended.get(id) {
            Some(Ended::Expired) => {
                session_error(codes::SESSION_EXPIRED, format!("session {id:?} expired; establish a new one"))
            }
            Some(Ended::Evicted) => session_error(
                codes::SESSION_EXPIRED,
                format!(
                    "session {id:?} was idle when the session table filled and was closed to make room for other \
                     sources' sessions; establish a new one"
                ),
            ),
            Some(Ended::Closed) => {
                session_error(codes::SESSION_CLOSED, format!("session {id:?} is closed")).with_retryable(false)
            }
            None if id.is_empty() => {
                session_error(codes::SESSION_NOT_FOUND, "no session: establish one with SESSION_PROPOSE first")
            }
            None => session_error(codes::SESSION_NOT_FOUND, format!("unknown session {id:?}")),
        };
        Err(self.refuse(env, error))
    }

    pub(super) fn on_close(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let cancelled = self.end_session(&env.session_id, Ended::Closed);
        let reply = self.envelope(
            &env.session_id,
            &env.from,
            SessionClose::new(Some("acknowledged".into())),
            PayloadMode::Text,
        );
        Ok(Outcome::Cancel { reply, cancelled })
    }

    /// Closes a session from the responder's side (RFC 3.2: SESSION_CLOSE goes either way): forgets it, and returns
    /// the SESSION_CLOSE to send to the initiator and the running tasks to abort.
    pub fn close_session(
        &mut self,
        session_id: &str,
        reason: Option<String>,
    ) -> Result<(Envelope, Vec<TaskKey>), SessionError> {
        let peer = self.peer_of(session_id)?;
        let cancelled = self.end_session(session_id, Ended::Closed);
        let env = self.envelope(session_id, &peer, SessionClose::new(reason), PayloadMode::Text);
        Ok((env, cancelled))
    }

    pub(super) fn end_session(&mut self, id: &str, how: Ended) -> Vec<TaskKey> {
        let Some(session) = self.sessions.remove(id) else { return Vec::new() };
        if session.is_idle() {
            self.uncount_idle();
        }
        // Nobody can resume it any more.
        self.held.forget(id);
        self.uncount_session(&session.quota, id);
        self.running_total = self.running_total.saturating_sub(session.running.len());
        let mut running: Vec<(Box<str>, PayloadMode)> = session.running.into_iter().map(|(t, r)| (t, r.mode)).collect();
        // Hash order is not an order: keep aborts (and their ids drawn from the id source) deterministic.
        running.sort_unstable();
        let why = match how {
            Ended::Expired => "because the session expired",
            Ended::Closed | Ended::Evicted => "because the session was closed",
        };
        let mut cancelled = Vec::with_capacity(running.len());
        for (task_id, mode) in running {
            let key = TaskKey { session_id: id.to_owned(), task_id: task_id.into() };
            self.abort(&session.peer, mode, key.clone(), why);
            cancelled.push(key);
        }
        self.tombstone(id, how);
        self.events.push_back(match how {
            Ended::Expired | Ended::Evicted => {
                ResponderEvent::SessionExpired { session_id: id.to_owned(), aborted: cancelled.clone() }
            }
            Ended::Closed => ResponderEvent::SessionClosed { session_id: id.to_owned(), aborted: cancelled.clone() },
        });
        cancelled
    }

    /// Remembers how a session ended, so that late messages are told (bounded: the oldest is forgotten first).
    pub(super) fn tombstone(&mut self, id: &str, how: Ended) {
        if self.cfg.limits.tombstones > 0 {
            if self.ended_order.len() >= self.cfg.limits.tombstones
                && let Some(old) = self.ended_order.pop_front()
            {
                self.ended.remove(&old);
            }
            self.ended.insert(id.into(), how);
            self.ended_order.push_back(id.into());
        }
    }

    pub(super) fn peer_of(&self, session_id: &str) -> Result<String, SessionError> {
        self.sessions
            .get(session_id)
            .map(|s| s.peer.to_string())
            .ok_or_else(|| Misuse::UnknownSession(session_id.to_owned()).into())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::responder::sources::{HeavySources, recorded_quota};
    use crate::shared::SharedSession;
    use crate::{ResponderConfig, SeededIds, SystemClock};
    use ldp_types::{Capability, DelegateId, IdentityCard};

    /// The responder of the tests below.
    pub(in crate::responder) const ME: &str = "ldp:delegate:r";

    /// Message number `sent` (its id made of it) of session `session` from `peer` to [`ME`], stamped by `wall`.
    pub(in crate::responder) fn message(
        wall: &crate::ManualClock,
        sent: u64,
        session: &str,
        peer: &str,
        body: Body,
    ) -> Vec<u8> {
        use crate::WallClock;
        let stamp = ldp_types::time::format_timestamp(wall.now_utc());
        let env = Envelope::new(format!("00000000-0000-4000-8000-{sent:012x}"), stamp, session, peer, ME, body);
        env.to_vec().unwrap()
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A session of the store, adopted for the principal (owner or sender) given.
        Adopt { session: u8, principal: u8, authenticated: bool },
        /// A session ended here (closed or expired).
        End { session: u8, expired: bool },
        /// A task started in a session (so that it may not give way) or ended in it.
        Busy { session: u8, busy: bool },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..12u8, 0..3u8, any::<bool>()).prop_map(|(session, principal, authenticated)| Op::Adopt {
                session,
                principal,
                authenticated
            }),
            (0..12u8, any::<bool>()).prop_map(|(session, expired)| Op::End { session, expired }),
            (0..12u8, any::<bool>()).prop_map(|(session, busy)| Op::Busy { session, busy }),
        ]
    }

    proptest::proptest! {
        /// Each principal's index of sessions holds exactly the sessions held here that count against it, whatever
        /// adoptions (dropping idle copies at either limit), ends and tasks came before; and neither limit is passed.
        #[test]
        fn the_principals_index_holds_exactly_their_sessions(ops in proptest::collection::vec(op(), 1..60)) {
            let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:r").unwrap(), "r", "sim", "1");
            card.capabilities.push(Capability::new("echo"));
            let mut cfg = ResponderConfig::new(card);
            (cfg.limits.max_sessions, cfg.limits.max_sessions_per_principal) = (5, 3);
            let mut r = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::new(1)));
            let now = Instant::now();
            for op in ops {
                match op {
                    Op::Adopt { session, principal, authenticated } => {
                        let shared: SharedSession = serde_json::from_value(serde_json::json!({
                            "session_id": format!("s{session}"), "peer": format!("ldp:delegate:p{principal}"),
                            "owner": authenticated.then(|| format!("p{principal}")), "peer_delegate": null,
                            "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": 600,
                        }))
                        .unwrap();
                        let _ = r.adopt_session(now, &shared);
                    }
                    Op::End { session, expired } => {
                        r.end_session(&format!("s{session}"), if expired { Ended::Expired } else { Ended::Closed });
                    }
                    Op::Busy { session, busy } => {
                        if let Some(s) = r.sessions.get_mut(format!("s{session}").as_str()) {
                            s.state = if busy { SessionState::Suspended } else { SessionState::Active };
                        }
                    }
                }
                let mut indexed = 0;
                for (key, ids) in &r.sessions_per_principal {
                    proptest::prop_assert!(ids.len() > 0, "{key}: an empty entry is removed");
                    proptest::prop_assert!(ids.len() <= 3, "{key}: over its limit");
                    for id in ids.iter() {
                        let s = r.sessions.get(id);
                        proptest::prop_assert!(s.is_some(), "{key}: {id} is not held");
                        let s = s.unwrap();
                        proptest::prop_assert_eq!(&*recorded_quota(s.owner.as_deref(), &s.peer), &**key);
                        proptest::prop_assert_eq!(&s.quota, key);
                    }
                    indexed += ids.len();
                }
                proptest::prop_assert_eq!(&heavy_of(&r), &r.heavy, "the heavy sources are those holding two or more");
                proptest::prop_assert_eq!(indexed, r.sessions.len(), "every session held is indexed once");
                proptest::prop_assert!(r.sessions.len() <= 5);
            }
        }
    }

    /// What happens to the sessions of a responder at its `max_sessions`, for the idle count and order.
    #[derive(Debug, Clone)]
    enum Step {
        /// A session of the store adopted here (dropping the least recently used idle one at the cap).
        Adopt { session: u8 },
        /// A task submitted in a session, over connection `connection` (which resumes it if suspended).
        Submit { session: u8, connection: u8 },
        /// A session's first running task ends: completed, failed, cancelled by its peer or taken back.
        EndTask { session: u8, how: u8 },
        /// A connection drops: its sessions are suspended.
        Suspend { connection: u8 },
        /// A message that arrived over a connection before it dropped is handled after the drop (resuming its
        /// session there), and the transport, seeing the connection gone, suspends the connection again.
        Late { session: u8, connection: u8 },
        /// A session is closed here.
        Close { session: u8 },
        /// Time passes (sessions live 20 s) and expired sessions are reaped.
        Wait { secs: u8 },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0..10u8).prop_map(|session| Step::Adopt { session }),
            4 => (0..10u8, 0..3u8).prop_map(|(session, connection)| Step::Submit { session, connection }),
            3 => (0..10u8, 0..4u8).prop_map(|(session, how)| Step::EndTask { session, how }),
            1 => (0..3u8).prop_map(|connection| Step::Suspend { connection }),
            1 => (0..10u8, 0..3u8).prop_map(|(session, connection)| Step::Late { session, connection }),
            1 => (0..10u8).prop_map(|session| Step::Close { session }),
            1 => (0..12u8).prop_map(|secs| Step::Wait { secs }),
        ]
    }

    /// The heavy sources as the source index says they are: those holding two sessions or more.
    pub(in crate::responder) fn heavy_of(r: &Responder) -> HeavySources {
        r.sessions_per_principal
            .iter()
            .filter(|(_, ids)| ids.len() >= 2)
            .map(|(key, ids)| (ids.len(), key.clone()))
            .collect()
    }

    /// A responder of the echo skill as [`ME`], with `limits` changed, on a manual wall clock (returned with it).
    pub(in crate::responder) fn echo_responder(
        limits: impl FnOnce(&mut crate::Limits),
    ) -> (Responder, crate::ManualClock) {
        let mut card = IdentityCard::new(DelegateId::new(ME).unwrap(), "r", "sim", "1");
        card.capabilities.push(Capability::new("echo"));
        let mut cfg = ResponderConfig::new(card);
        limits(&mut cfg.limits);
        let wall = crate::ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
        (Responder::new(cfg, Arc::new(wall.clone()), Box::new(SeededIds::new(1))), wall)
    }

    /// The idle sessions, by the definition, with their last activity.
    fn idle_now(r: &Responder) -> Vec<(String, Instant)> {
        r.sessions.iter().filter(|(_, s)| s.is_idle()).map(|(id, s)| (id.to_string(), s.last_activity)).collect()
    }

    proptest::proptest! {
        /// Whatever tasks start and end, connections drop and sessions resume, close, expire and come from the
        /// store: the idle count is the number of idle sessions; once kept, the idle order queues every idle session
        /// at or before its last use; and a session adopted at `max_sessions` takes the place of the least recently
        /// used idle session, or is refused when none is idle.
        #[test]
        fn the_idle_count_and_order_follow_the_sessions(steps in proptest::collection::vec(step(), 1..80)) {
            use crate::TaskOutput;
            use ldp_types::{TaskCancel, TaskSubmit};
            let (mut r, wall) = echo_responder(|limits| (limits.max_sessions, limits.max_concurrent_tasks) = (4, 100));
            let mut now = Instant::now();
            let mut sent = 0u64;
            // A transport never reuses a connection's id: each drop of connection `c` starts its next generation.
            let mut generation = [0u64; 3];
            let live = |generation: &[u64; 3], c: u8| u64::from(c) + 3 * generation[usize::from(c)];
            for step in steps {
                match step {
                    Step::Adopt { session } => {
                        let id = format!("s{session}");
                        let shared: SharedSession = serde_json::from_value(serde_json::json!({
                            "session_id": id, "peer": format!("ldp:delegate:p{session}"), "owner": null,
                            "peer_delegate": null, "peer_domain": "default", "mode": "text", "fallback": ["text"],
                            "ttl_secs": 20,
                        }))
                        .unwrap();
                        let held = r.sessions.contains_key(id.as_str());
                        let idle = idle_now(&r);
                        let full = r.sessions.len() >= 4;
                        let oldest = idle.iter().map(|(_, at)| *at).min();
                        let adopted = r.adopt_session(now, &shared);
                        if !held && full {
                            proptest::prop_assert_eq!(adopted.is_ok(), oldest.is_some(), "refused only when none is idle");
                            if let Some(oldest) = oldest {
                                let gone: Vec<_> =
                                    idle.iter().filter(|(id, _)| !r.sessions.contains_key(id.as_str())).collect();
                                proptest::prop_assert_eq!(gone.len(), 1, "one idle session gives way");
                                proptest::prop_assert_eq!(gone[0].1, oldest, "the least recently used one");
                            }
                        }
                    }
                    Step::Submit { session, connection } => {
                        sent += 1;
                        let body = TaskSubmit::new(format!("t{sent}"), "echo".into(), serde_json::json!(sent), None);
                        let bytes =
                            message(&wall, sent, &format!("s{session}"), &format!("ldp:delegate:p{session}"), body.into());
                        let peer =
                            PeerContext { connection: Some(live(&generation, connection)), ..PeerContext::default() };
                        let _ = r.handle(now, &peer, &bytes);
                    }
                    Step::EndTask { session, how } => {
                        let id = format!("s{session}");
                        let Some(task) = r.sessions.get(id.as_str()).and_then(|s| s.running.keys().min().cloned())
                        else { continue };
                        let key = TaskKey { session_id: id.clone(), task_id: task.to_string() };
                        match how {
                            0 => { let _ = r.complete_task(now, &key, TaskOutput::new("done")); }
                            1 => { let _ = r.fail_task(now, &key, LdpError::runtime("FAILED", "no")); }
                            2 => {
                                sent += 1;
                                let body = Body::from(TaskCancel::new(task.to_string()));
                                let bytes = message(&wall, sent, &id, &format!("ldp:delegate:p{session}"), body);
                                let _ = r.handle(now, &PeerContext::default(), &bytes);
                            }
                            _ => { let _ = r.retract_task(&key, LdpError::runtime("STORE_UNAVAILABLE", "down")); }
                        }
                    }
                    Step::Suspend { connection } => {
                        r.suspend_connection(live(&generation, connection));
                        generation[usize::from(connection)] += 1;
                    }
                    Step::Late { session, connection } => {
                        let Some(previous) = generation[usize::from(connection)].checked_sub(1) else { continue };
                        let dropped = u64::from(connection) + 3 * previous;
                        sent += 1;
                        let body = Body::from(ldp_types::TaskUpdate::new("t".into(), None, None));
                        let bytes = message(&wall, sent, &format!("s{session}"), &format!("ldp:delegate:p{session}"), body);
                        let peer = PeerContext { connection: Some(dropped), ..PeerContext::default() };
                        let _ = r.handle(now, &peer, &bytes);
                        r.suspend_connection(dropped);
                        for (id, s) in &r.sessions {
                            proptest::prop_assert!(
                                !(s.connection == Some(dropped) && s.state == SessionState::Active),
                                "{} is active over the dropped connection {}", id, dropped
                            );
                        }
                    }
                    Step::Close { session } => {
                        r.end_session(&format!("s{session}"), Ended::Closed);
                    }
                    Step::Wait { secs } => {
                        now += Duration::from_secs(u64::from(secs));
                        wall.advance(Duration::from_secs(u64::from(secs)));
                        let _ = r.handle_timeout(now);
                    }
                }
                while r.poll_aborted().is_some() {}
                let idle = idle_now(&r);
                proptest::prop_assert_eq!(r.idle_total, idle.len(), "the idle count");
                proptest::prop_assert!(r.sessions.len() <= 4);
                if let Some(order) = &r.idle_order {
                    for (id, last) in &idle {
                        proptest::prop_assert!(
                            order.iter().any(|Reverse((at, queued))| **queued == **id && at <= last),
                            "{} is idle but not queued", id
                        );
                    }
                    proptest::prop_assert!(order.len() <= 2 * r.sessions.len() + 65, "the order is bounded");
                }
                // Every session active over a connection still open is listed under it.
                for (id, s) in &r.sessions {
                    if let (Some(connection), SessionState::Active) = (s.connection, s.state) {
                        let listed = r.sessions_per_connection.get(&connection);
                        proptest::prop_assert!(
                            listed.is_some_and(|ids| ids.iter().any(|listed| listed == id)),
                            "{} is active over connection {} but not listed under it", id, connection
                        );
                    }
                }
            }
        }
    }

    /// One session moved back and forth between two WebSocket connections by its peer, message after message: each
    /// move lists it under the connection it moved to, and the lists stay bounded (their repeats pruned), where they
    /// grew by an entry per move before.
    #[test]
    fn a_session_moved_back_and_forth_keeps_the_connection_lists_bounded() {
        use crate::ManualClock;
        let mut card = IdentityCard::new(DelegateId::new(ME).unwrap(), "r", "sim", "1");
        card.capabilities.push(Capability::new("echo"));
        let wall = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
        let mut r = Responder::new(ResponderConfig::new(card), Arc::new(wall.clone()), Box::new(SeededIds::new(1)));
        let now = Instant::now();
        let shared: SharedSession = serde_json::from_value(serde_json::json!({
            "session_id": "s", "peer": "ldp:delegate:p", "owner": null, "peer_delegate": null,
            "peer_domain": "default", "mode": "text", "fallback": ["text"], "ttl_secs": 600,
        }))
        .unwrap();
        r.adopt_session(now, &shared).unwrap();
        for sent in 0..10_000u64 {
            let connection = 1 + sent % 2;
            let body = Body::from(ldp_types::TaskUpdate::new("t".into(), None, None));
            let peer = PeerContext { connection: Some(connection), ..PeerContext::default() };
            let _ = r.handle(now, &peer, &message(&wall, sent, "s", "ldp:delegate:p", body));
            assert_eq!(r.connection_of("s"), Some(connection), "the message moved the session");
        }
        for (connection, listed) in &r.sessions_per_connection {
            assert!(listed.len() <= 64, "connection {connection} lists {} entries for one session", listed.len());
        }
        r.suspend_connection(2);
        assert_eq!(r.session_state("s"), Some(SessionState::Suspended), "the drop still finds the session");
    }
}
