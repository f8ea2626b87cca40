//! The table of outstanding requests: which caller waits for which answer, and the routing of every server frame to
//! its caller or, for the messages a resume sends, to the initiator machine that sent them. The resume's rules
//! (which tasks to query, resubmit on `TASK_NOT_FOUND`, wait on `DUPLICATE_TASK`, give up after the grace) are
//! `ldp_session::Initiator`'s; this module only moves what the machine emits and feeds it what it asked for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ldp_session::runtime::SharedInitiator;
use ldp_session::{Expired, Initiator, ResumeVerdict, TaskKey, Transmit};
use ldp_types::{Envelope, LdpError, MessageType, codes};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{Head, IN_REPLY_TO, is_task_end, without_member};

pub(super) type Answer = Result<Option<Vec<u8>>, LdpError>;

#[derive(Debug)]
pub(super) enum Kind {
    /// A TASK_SUBMIT: besides its `in_reply_to` answers, results sent after a resume find it by session and task.
    Submit {
        session: String,
        task: String,
    },
    /// A message an initiator machine sent on its own (a status query or a resubmission) for the task of the submit
    /// with message id `submit`: its answers go to that machine.
    Machine {
        submit: String,
        machine: Weak<Mutex<Initiator>>,
        query: bool,
    },
    /// A SESSION_PROPOSE: its initiator may time it out by session id.
    Propose {
        session: String,
    },
    Other,
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) kind: Kind,
    pub(super) reply: Option<oneshot::Sender<Answer>>,
    pub(super) updates: Option<mpsc::Sender<Envelope>>,
    /// The connection generation it was written on (0: not yet written).
    pub(super) sent_on: u64,
}

#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) by_id: HashMap<String, Entry>,
    pub(super) by_task: HashMap<(String, String), String>,
}

impl Pending {
    pub(super) fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.by_id.remove(id)?;
        if let Kind::Submit { session, task } = &entry.kind {
            let key = (session.clone(), task.clone());
            if self.by_task.get(&key).is_some_and(|i| i == id) {
                self.by_task.remove(&key);
            }
        }
        Some(entry)
    }

    pub(super) fn complete(&mut self, id: &str, answer: Answer) -> bool {
        match self.remove(id) {
            Some(Entry { reply: Some(tx), .. }) => {
                // The caller may have stopped waiting; then nobody needs the answer.
                let _ = tx.send(answer);
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    fn submit_of(&self, key: &TaskKey) -> Option<String> {
        self.by_task.get(&(key.session_id.clone(), key.task_id.clone())).cloned()
    }
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) pending: Mutex<Pending>,
    /// The initiators whose tasks this transport resumes ([`ldp_session::runtime::Transport::attach`]).
    pub(super) machines: Mutex<Vec<Weak<Mutex<Initiator>>>>,
    pub(super) fatal: Mutex<Option<LdpError>>,
    pub(super) connections: AtomicU64,
    pub(super) unmatched: AtomicU64,
    pub(super) resumed: AtomicU64,
    pub(super) resume_grace: Duration,
    /// The machines' answer timeout (`WsOptions::request_timeout`).
    pub(super) request_timeout: Option<Duration>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section completes its mutation before anything that could panic; recover from poisoning.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lost(why: &str) -> LdpError {
    // Not retryable: the message may have been processed before the connection went.
    LdpError::transport(codes::TRANSPORT_ERROR, format!("connection lost before the answer: {why}"))
        .with_retryable(false)
}

/// The machines' monotonic time: tokio's clock, so that a test with paused time drives their deadlines too.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Inner {
    pub(super) fn fatal(&self) -> Option<LdpError> {
        lock(&self.fatal).clone()
    }

    pub(super) fn attach(&self, machine: &SharedInitiator) {
        {
            let mut m = lock(machine);
            m.set_resume_grace(self.resume_grace);
            m.set_answer_timeout(self.request_timeout);
        }
        let mut machines = lock(&self.machines);
        machines.retain(|m| m.strong_count() > 0);
        machines.push(Arc::downgrade(machine));
    }

    fn machines(&self) -> Vec<SharedInitiator> {
        lock(&self.machines).iter().filter_map(Weak::upgrade).collect()
    }

    /// Marks a queued request as written on `generation`; false when nobody waits for it any more.
    pub(super) fn mark_sent(&self, id: &str, generation: u64) -> bool {
        match lock(&self.pending).by_id.get_mut(id) {
            Some(e) => {
                e.sent_on = generation;
                true
            }
            None => false,
        }
    }

    pub(super) fn fail_all(&self, error: &LdpError) {
        let mut pending = lock(&self.pending);
        let ids: Vec<String> = pending.by_id.keys().cloned().collect();
        for id in ids {
            pending.complete(&id, Err(error.clone()));
        }
    }

    /// After a reconnect: hands the tasks written on an earlier connection to the machines
    /// (`Initiator::handle_disconnect`, `handle_reconnect`) and returns what they emit (status queries); every other
    /// unanswered request, and a task no machine resumes, fails definitely.
    pub(super) fn resume_frames(self: &Arc<Self>, generation: u64, why: &str) -> Vec<String> {
        let now = now();
        let mut pending = lock(&self.pending);
        let stale: Vec<String> = pending
            .by_id
            .iter()
            .filter(|(_, e)| e.sent_on != 0 && e.sent_on != generation)
            .map(|(id, _)| id.clone())
            .collect();
        let mut in_flight = Vec::new();
        for id in stale {
            let Some(entry) = pending.by_id.get(&id) else { continue };
            match &entry.kind {
                Kind::Submit { session, task } => {
                    in_flight.push((id, TaskKey { session_id: session.clone(), task_id: task.clone() }));
                }
                // The machine asks again on this connection.
                Kind::Machine { .. } => drop(pending.remove(&id)),
                Kind::Propose { .. } | Kind::Other => drop(pending.complete(&id, Err(lost(why)))),
            }
        }
        let mut frames = Vec::new();
        for machine in self.machines() {
            let mut m = lock(&machine);
            m.handle_disconnect(now, in_flight.iter().map(|(_, k)| k.clone()));
            m.handle_reconnect(now);
            self.take_transmits(&mut pending, &mut m, &machine, generation, &mut frames);
        }
        for (id, _) in in_flight {
            // Queried submits were moved onto this connection; the rest no machine knows.
            if pending.by_id.get(&id).is_some_and(|e| e.sent_on != generation) {
                pending.complete(&id, Err(lost(why)));
            }
        }
        frames
    }

    /// Registers and encodes what `m` wants sent, on behalf of the submits waiting for its tasks.
    fn take_transmits(
        &self,
        pending: &mut Pending,
        m: &mut Initiator,
        machine: &SharedInitiator,
        generation: u64,
        frames: &mut Vec<String>,
    ) {
        while let Some(transmit) = m.poll_transmit() {
            // Nobody waits for the task any more (its caller gave up): nothing to send.
            let Some(submit) = pending.submit_of(transmit.key()) else { continue };
            let query = matches!(transmit, Transmit::StatusQuery { .. });
            let envelope = transmit.envelope();
            match envelope.to_json() {
                Ok(text) => {
                    if let Some(e) = pending.by_id.get_mut(&submit) {
                        e.sent_on = generation;
                    }
                    let kind = Kind::Machine { submit, machine: Arc::downgrade(machine), query };
                    let entry = Entry { kind, reply: None, updates: None, sent_on: generation };
                    pending.by_id.insert(envelope.message_id.clone(), entry);
                    frames.push(text);
                    if query {
                        self.resumed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => drop(pending.complete(&submit, Err(LdpError::from(&e)))),
            }
        }
    }

    /// Routes one server frame; returns frames to write (a resubmission).
    pub(super) fn dispatch(self: &Arc<Self>, text: &str, generation: u64) -> Vec<String> {
        let Some(head) = Head::peek(text) else {
            self.unmatched("a frame that is not a JSON object");
            return Vec::new();
        };
        let mut pending = lock(&self.pending);
        if head.is_error || head.is_accepted {
            let answer = if head.is_error {
                let error = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| serde_json::from_value::<LdpError>(v.get("error")?.clone()).ok())
                    .unwrap_or_else(|| LdpError::runtime(codes::MALFORMED_MESSAGE, "unreadable error frame"));
                Err(error)
            } else {
                Ok(None)
            };
            let Some(id) = head.in_reply_to.as_deref() else {
                if let Err(e) = &answer {
                    tracing::warn!(code = %e.code, message = %e.message, "connection-level error from the server");
                }
                self.unmatched("a control frame without in_reply_to");
                return Vec::new();
            };
            match pending.by_id.get(id).map(|e| matches!(e.kind, Kind::Machine { .. })) {
                Some(true) => {
                    if let Some(Entry { kind: Kind::Machine { submit, machine, .. }, .. }) = pending.remove(id)
                        && let Err(e) = answer
                    {
                        return self.to_machine(&mut pending, &machine, &submit, id, Err(&e), None, generation);
                    }
                }
                Some(false) => {
                    pending.complete(id, answer);
                }
                None => self.unmatched("a control frame for no outstanding request"),
            }
            return Vec::new();
        }
        // The correlation member is this binding's, not the envelope's: it comes off, so that signatures computed
        // over the envelope as the responder built it still verify. The envelope itself is decoded once, by whoever
        // takes it (the caller's initiator, or the progress channel).
        let reply = match &head.in_reply_to {
            Some(_) => match without_member(text, IN_REPLY_TO) {
                Some(stripped) => stripped.into_bytes(),
                None => {
                    self.unmatched("an unreadable envelope");
                    return Vec::new();
                }
            },
            None => text.as_bytes().to_vec(),
        };
        let target = match head.in_reply_to.clone() {
            Some(id) => Some(id),
            None if is_task_end(&head.kind) => {
                head.task_id.as_ref().and_then(|t| pending.by_task.get(&(head.session_id.clone(), t.clone())).cloned())
            }
            None => None,
        };
        let Some(target) = target.filter(|t| pending.by_id.contains_key(t)) else {
            self.unmatched(&head.kind);
            return Vec::new();
        };
        let Some(entry) = pending.by_id.get(&target) else { return Vec::new() };
        match &entry.kind {
            Kind::Submit { .. } if head.kind == MessageType::TaskUpdate.as_str() => {
                forward_update(entry, &reply);
                Vec::new()
            }
            Kind::Submit { .. } | Kind::Propose { .. } | Kind::Other => {
                pending.complete(&target, Ok(Some(reply)));
                Vec::new()
            }
            Kind::Machine { submit, machine, query } => {
                let (submit, machine) = (submit.clone(), machine.clone());
                // A query has one answer; a resubmission its updates, then its end.
                if *query || is_task_end(&head.kind) {
                    pending.remove(&target);
                }
                match Envelope::from_slice(&reply) {
                    Ok(env) => {
                        self.to_machine(&mut pending, &machine, &submit, &target, Ok(&env), Some(reply), generation)
                    }
                    // Not an envelope: the caller's initiator reports it as the undecodable answer it is.
                    Err(_) => {
                        pending.complete(&submit, Ok(Some(reply)));
                        Vec::new()
                    }
                }
            }
        }
    }

    /// Feeds an answer to a machine's own message to that machine and carries out its verdict for the waiting
    /// submit; returns what the machine wants sent next.
    #[allow(clippy::too_many_arguments)]
    fn to_machine(
        self: &Arc<Self>,
        pending: &mut Pending,
        machine: &Weak<Mutex<Initiator>>,
        submit: &str,
        in_reply_to: &str,
        answer: Result<&Envelope, &LdpError>,
        reply: Option<Vec<u8>>,
        generation: u64,
    ) -> Vec<String> {
        let Some(machine) = machine.upgrade() else {
            // Its client is gone, and with it whoever waited.
            return Vec::new();
        };
        let now = now();
        let mut m = lock(&machine);
        let before = m.poll_timeout();
        match m.handle_resume_answer(now, in_reply_to, answer) {
            ResumeVerdict::Progress(_) => {
                if let (Some(entry), Some(reply)) = (pending.by_id.get(submit), reply) {
                    forward_update(entry, &reply);
                }
            }
            ResumeVerdict::Deliver(_) => drop(pending.complete(submit, Ok(reply))),
            ResumeVerdict::Fail { error, .. } => drop(pending.complete(submit, Err(error))),
            // Waiting, or anything a newer machine may decide: the caller keeps waiting.
            _ => {}
        }
        let mut frames = Vec::new();
        self.take_transmits(pending, &mut m, &machine, generation, &mut frames);
        if let Some(at) = m.poll_timeout().filter(|at| Some(*at) != before) {
            self.wake_at(at);
        }
        frames
    }

    /// Tells the machines that `env` goes out now; true when one of them keeps its answer deadline.
    pub(super) fn track(self: &Arc<Self>, env: &Envelope) -> bool {
        // No answer timeout: no machine keeps a deadline, so the hot path takes no lock.
        if self.request_timeout.is_none() {
            return false;
        }
        let now = now();
        let mut tracked = false;
        for machine in self.machines() {
            let mut m = lock(&machine);
            if m.handle_sent(now, env) {
                tracked = true;
                if let Some(at) = m.poll_timeout() {
                    self.wake_at(at);
                }
            }
        }
        tracked
    }

    /// Runs the machines' timeouts at `at`.
    fn wake_at(self: &Arc<Self>, at: Instant) {
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            if let Some(inner) = inner.upgrade() {
                inner.expire();
            }
        });
    }

    /// Fails the callers of every request whose machine deadline passed.
    fn expire(&self) {
        let now = now();
        for machine in self.machines() {
            let expired = lock(&machine).handle_timeout(now);
            let mut pending = lock(&self.pending);
            for e in expired {
                let (id, error) = match e {
                    Expired::ResultLost { key, error } | Expired::TaskUnanswered { key, error } => {
                        (pending.submit_of(&key), error)
                    }
                    Expired::ProposalUnanswered { session_id, error } => {
                        let id = pending.by_id.iter().find_map(|(id, e)| match &e.kind {
                            Kind::Propose { session } if *session == session_id => Some(id.clone()),
                            _ => None,
                        });
                        (id, error)
                    }
                    // A deadline a newer machine knows: its caller waits for the transport's own failures.
                    _ => continue,
                };
                if let Some(id) = id {
                    pending.complete(&id, Err(error));
                }
            }
        }
    }

    pub(super) fn unmatched(&self, what: &str) {
        self.unmatched.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(what, "server frame matches no outstanding request");
    }
}

/// Hands a pushed TASK_UPDATE to the submitter's progress channel.
fn forward_update(entry: &Entry, update: &[u8]) {
    if let Some(tx) = &entry.updates
        && let Ok(env) = Envelope::from_slice(update)
    {
        // Progress is best-effort: a caller that stopped reading must not stall the connection.
        let _ = tx.try_send(env);
    }
}
