//! The table of outstanding requests: which caller waits for which answer, and the routing of every server frame to
//! its caller or, for the messages a resume sends, to the initiator driver that asked for them. The resume's rules
//! (which tasks to query, resubmit on `TASK_NOT_FOUND`, wait on `DUPLICATE_TASK`, give up after the grace) are
//! `ldp_session::Initiator`'s, and its timers `ldp_session::runtime::InitiatorDriver`'s; this module only reports
//! reconnects, writes what the driver emits and hands it the answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ldp_session::runtime::{AttachedDrivers, InitiatorDriver};
use ldp_session::{TaskKey, Transmit};
use ldp_types::{Envelope, LdpError, MessageType, codes};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{Head, IN_REPLY_TO, is_task_end, without_member};

pub(super) type Answer = Result<Option<Vec<u8>>, LdpError>;

#[derive(Debug)]
pub(super) enum Kind {
    /// A TASK_SUBMIT: besides its `in_reply_to` answers, results sent after a resume find it by session and task.
    Submit { session: String, task: String },
    /// A message an initiator machine sent on its own (a status query or a resubmission) for task `key`: its answers
    /// go to that machine's driver.
    Machine { key: TaskKey, driver: Weak<InitiatorDriver>, query: bool },
    /// Any other request (a proposal, a cancel, a close): answered by `in_reply_to` alone.
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
    /// The drivers of the initiators whose tasks this transport resumes
    /// ([`ldp_session::runtime::Transport::attach`]).
    pub(super) drivers: AttachedDrivers,
    pub(super) fatal: Mutex<Option<LdpError>>,
    pub(super) connections: AtomicU64,
    pub(super) unmatched: AtomicU64,
    pub(super) resumed: AtomicU64,
    pub(super) resume_grace: Duration,
    /// The drivers' answer timeout (`WsOptions::request_timeout`).
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

impl Inner {
    pub(super) fn fatal(&self) -> Option<LdpError> {
        lock(&self.fatal).clone()
    }

    pub(super) fn attach(&self, driver: &Arc<InitiatorDriver>) {
        driver.set_resume_grace(self.resume_grace);
        driver.set_answer_timeout(self.request_timeout);
        self.drivers.add(driver);
    }

    /// Whether an attached driver keeps the answer deadline of `env` (then this transport sets no timer for it).
    pub(super) fn keeps_deadline(&self, env: &Envelope) -> bool {
        // No answer timeout: no driver keeps a deadline, so the hot path takes no lock.
        self.request_timeout.is_some() && self.drivers.keeps_deadline(env)
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

    /// After a reconnect: reports the tasks written on an earlier connection to the drivers
    /// (`InitiatorDriver::resume`) and returns what they emit (status queries); every other unanswered request, and
    /// a task no driver resumes, fails definitely.
    pub(super) fn resume_frames(self: &Arc<Self>, generation: u64, why: &str) -> Vec<String> {
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
                Kind::Other => drop(pending.complete(&id, Err(lost(why)))),
            }
        }
        let mut frames = Vec::new();
        for driver in self.drivers.all() {
            let transmits = driver.resume(in_flight.iter().map(|(_, k)| k.clone()));
            self.take_transmits(&mut pending, transmits, &driver, generation, &mut frames);
        }
        let drivers = self.drivers.all();
        for (id, key) in in_flight {
            // Queried submits were moved onto this connection; a task its driver still waits for is the driver's to
            // end (it gave up, and its timer fails the task); the rest no machine knows.
            let Some(entry) = pending.by_id.get_mut(&id) else { continue };
            if entry.sent_on == generation {
                continue;
            }
            if drivers.iter().any(|d| d.awaits_task(&key)) {
                entry.sent_on = generation;
            } else {
                pending.complete(&id, Err(lost(why)));
            }
        }
        frames
    }

    /// Registers and encodes what `driver` wants sent, on behalf of the submits waiting for its tasks.
    fn take_transmits(
        &self,
        pending: &mut Pending,
        transmits: Vec<Transmit>,
        driver: &Arc<InitiatorDriver>,
        generation: u64,
        frames: &mut Vec<String>,
    ) {
        for transmit in transmits {
            // Nobody waits for the task any more (its caller gave up): nothing to send.
            let Some(submit) = pending.submit_of(transmit.key()) else { continue };
            let query = matches!(transmit, Transmit::StatusQuery { .. });
            let envelope = transmit.envelope();
            match envelope.to_json() {
                Ok(text) => {
                    if let Some(e) = pending.by_id.get_mut(&submit) {
                        e.sent_on = generation;
                    }
                    let kind = Kind::Machine { key: transmit.key().clone(), driver: Arc::downgrade(driver), query };
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
                    if let Some(Entry { kind: Kind::Machine { key, driver, .. }, .. }) = pending.remove(id)
                        && let Err(e) = answer
                    {
                        return self.to_driver(&mut pending, &driver, &key, id, Err(e), generation);
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
            Kind::Submit { .. } | Kind::Other => {
                pending.complete(&target, Ok(Some(reply)));
                Vec::new()
            }
            Kind::Machine { key, driver, query } => {
                let (key, driver) = (key.clone(), driver.clone());
                // A query has one answer; a resubmission its updates, then its end.
                if *query || is_task_end(&head.kind) {
                    pending.remove(&target);
                }
                self.to_driver(&mut pending, &driver, &key, &target, Ok(reply), generation)
            }
        }
    }

    /// Hands an answer to a driver's own message to that driver, which gives the waiting caller its verdict;
    /// returns what the driver wants sent next.
    fn to_driver(
        &self,
        pending: &mut Pending,
        driver: &Weak<InitiatorDriver>,
        key: &TaskKey,
        in_reply_to: &str,
        answer: Result<Vec<u8>, LdpError>,
        generation: u64,
    ) -> Vec<String> {
        let Some(driver) = driver.upgrade() else {
            // Its client is gone, and with it whoever waited.
            return Vec::new();
        };
        let transmits = driver.resume_answer(key, in_reply_to, answer);
        let mut frames = Vec::new();
        self.take_transmits(pending, transmits, &driver, generation, &mut frames);
        frames
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
