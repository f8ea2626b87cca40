//! [`InitiatorDriver`]: the one driver of an initiator machine, whatever carries its messages.
//!
//! The machine ([`Initiator`]) decides every rule of answer deadlines, resume, resubmission and their bounds; the
//! driver runs it: it keeps one timer re-armed from [`Initiator::poll_timeout`], feeds the machine what the carrier
//! reports, and hands each verdict to the caller waiting for that request. Transports report, and keep only request
//! correlation:
//!
//! - a connection-oriented carrier (WebSocket) that reconnects calls [`InitiatorDriver::resume`] with the tasks it
//!   had written on the lost connection, writes the [`Transmit`]s it gets back, and passes their answers to
//!   [`InitiatorDriver::resume_answer`];
//! - a request/response carrier (HTTP) reports a lost answer as [`Exchange::Lost`](super::Exchange::Lost) from
//!   [`Transport::exchange_outcome`](super::Transport::exchange_outcome); the [`Client`](super::Client) waiting for
//!   the task then sends the machine's status queries itself, through the same calls.
//!
//! Either way the caller of [`Client::submit`](super::Client::submit) sees one outcome: the task's answer, however
//! it came, or a typed error when a deadline passes or the resume gives up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ldp_types::{Envelope, LdpError};
use tokio::sync::{Notify, mpsc};

use super::lock;
use crate::TaskKey;
use crate::initiator::{Expired, Initiator, ResumeVerdict, Transmit};

/// The status poll a request/response carrier (HTTP) sets ([`InitiatorDriver::set_status_poll`]): how often a task
/// whose answer was lost is asked about again while it runs.
pub const DEFAULT_STATUS_POLL: Duration = Duration::from_millis(500);

/// A request a caller waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Waited {
    /// A TASK_SUBMIT, by its task.
    Task(TaskKey),
    /// A SESSION_PROPOSE, by the session id it proposed.
    Proposal(String),
}

/// What the driver tells the caller waiting for a request.
#[derive(Debug)]
pub(super) enum Signal {
    /// The request's answer arrived another way than as the reply to its exchange (a resume): the bytes of the
    /// envelope, for [`Initiator::handle`].
    Answer(Vec<u8>),
    /// The request ended with this error (a deadline passed, the resume was refused or gave up).
    Failed(LdpError),
    /// The machine wants this sent for the task, and the caller's carrier has no connection of its own to send it
    /// on (a status poll over HTTP).
    Send(Transmit),
}

#[derive(Debug)]
struct Waiter {
    signals: mpsc::UnboundedSender<Signal>,
    /// Where the task's progress goes (a resubmission's TASK_UPDATEs).
    updates: Option<mpsc::Sender<Envelope>>,
}

/// The one driver of an [`Initiator`]: its timer, answer deadlines, resume and bounded retries, for every transport
/// (module docs). Made by [`Client::connect`](super::Client::connect) and given to its transport through
/// [`Transport::attach`](super::Transport::attach).
#[derive(Debug)]
pub struct InitiatorDriver {
    machine: Mutex<Initiator>,
    /// The callers waiting, one per outstanding proposal or task of the client: bounded by the client's own callers.
    waiters: Mutex<HashMap<Waited, Waiter>>,
    /// Re-arms the timer task after anything that may have moved the machine's earliest deadline.
    wake: Arc<Notify>,
}

/// The machine's monotonic time: tokio's clock, so that a test with paused time drives its deadlines too.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl InitiatorDriver {
    /// Drives `initiator`, with a timer task on the current tokio runtime that ends when the driver is dropped.
    pub fn new(initiator: Initiator) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let driver = Arc::new(Self { machine: Mutex::new(initiator), waiters: Mutex::default(), wake: wake.clone() });
        tokio::spawn(run_timer(Arc::downgrade(&driver), wake));
        driver
    }

    /// The machine, locked. Callers hold the guard briefly and never across an await.
    pub(super) fn machine(&self) -> MutexGuard<'_, Initiator> {
        lock(&self.machine)
    }

    /// Changes the machine's settings (`f` calls its setters) and re-arms the timer.
    fn configure(&self, f: impl FnOnce(&mut Initiator)) {
        f(&mut self.machine());
        self.wake.notify_one();
    }

    /// How long a proposal or task may go unanswered ([`Initiator::set_answer_timeout`]): a transport sets its
    /// request timeout here when it is attached.
    pub fn set_answer_timeout(&self, timeout: Option<Duration>) {
        self.configure(|m| m.set_answer_timeout(timeout));
    }

    /// How long to wait for a result the peer reports ended while the answer was lost
    /// ([`Initiator::set_resume_grace`]).
    pub fn set_resume_grace(&self, grace: Duration) {
        self.configure(|m| m.set_resume_grace(grace));
    }

    /// How often to ask again about a task that runs on while its carrier pushes nothing (HTTP,
    /// [`Initiator::set_status_poll`]).
    pub fn set_status_poll(&self, interval: Option<Duration>) {
        self.configure(|m| m.set_status_poll(interval));
    }

    /// How many lost answers a task survives ([`Initiator::set_max_resumes`]).
    pub fn set_max_resumes(&self, max: u32) {
        self.configure(|m| m.set_max_resumes(max));
    }

    /// Whether the machine keeps the answer deadline of `env`: the transport then sets no timer of its own for it.
    pub fn keeps_deadline(&self, env: &Envelope) -> bool {
        self.machine().keeps_deadline(env)
    }

    /// Whether the machine still waits for task `key` (its answer may yet come, or the driver fails it): a
    /// transport keeps such a task's request open rather than failing it itself.
    pub fn awaits_task(&self, key: &TaskKey) -> bool {
        self.machine().awaits_task(key)
    }

    /// The number of tasks submitted and not yet ended.
    pub fn pending_tasks(&self) -> usize {
        self.machine().pending_tasks()
    }

    /// `env` goes out now: the machine starts its answer deadline (when it keeps one).
    pub(super) fn sent(&self, env: &Envelope) {
        if self.machine().handle_sent(now(), env) {
            self.wake.notify_one();
        }
    }

    /// Registers the caller waiting for `waited`; its signals come on the returned watch.
    pub(super) fn watch(&self, waited: Waited, updates: Option<mpsc::Sender<Envelope>>) -> Watch<'_> {
        let (signals, rx) = mpsc::unbounded_channel();
        lock(&self.waiters).insert(waited.clone(), Waiter { signals, updates });
        Watch { driver: self, waited, rx }
    }

    /// The answers of the tasks `in_flight` may have been lost (their connection dropped, or the request carrying
    /// them failed after it was written) and the carrier can send again: the status queries to send, for the tasks
    /// someone still waits for. A task whose answers were lost too often fails through the timer
    /// ([`Expired::NotResumed`]).
    pub fn resume(&self, in_flight: impl IntoIterator<Item = TaskKey>) -> Vec<Transmit> {
        let now = now();
        let mut m = self.machine();
        m.handle_disconnect(now, in_flight);
        m.handle_reconnect(now);
        let transmits = self.waited_transmits(&mut m);
        drop(m);
        self.wake.notify_one();
        transmits
    }

    /// A status query or resubmission of `key`'s, sent over a carrier without a connection of its own, was lost on
    /// the way: the machine asks again after its poll interval (and counts the loss).
    pub(super) fn query_lost(&self, key: &TaskKey) {
        self.machine().handle_query_lost(now(), key);
        self.wake.notify_one();
    }

    /// The answer to the [`Transmit`] of `key` with message id `in_reply_to`: the bytes of an envelope (the binding's
    /// correlation member removed), or a refusal without one (an error frame). The machine judges it and the caller
    /// waiting for the task gets the verdict; returns what the machine wants sent next.
    pub fn resume_answer(&self, key: &TaskKey, in_reply_to: &str, answer: Result<Vec<u8>, LdpError>) -> Vec<Transmit> {
        let now = now();
        let mut m = self.machine();
        let (verdict, bytes, decoded) = match answer {
            Err(error) => (m.handle_resume_answer(now, in_reply_to, Err(&error)), None, None),
            Ok(bytes) => match Envelope::from_slice(&bytes) {
                Ok(env) => (m.handle_resume_answer(now, in_reply_to, Ok(&env)), Some(bytes), Some(env)),
                // Not an envelope: the caller's initiator reports it as the undecodable answer it is.
                Err(_) => (ResumeVerdict::Deliver(key.clone()), Some(bytes), None),
            },
        };
        let transmits = self.waited_transmits(&mut m);
        drop(m);
        let waiters = lock(&self.waiters);
        match verdict {
            ResumeVerdict::Progress(key) => {
                if let (Some(env), Some(tx)) =
                    (decoded, waiters.get(&Waited::Task(key)).and_then(|w| w.updates.as_ref()))
                {
                    // Progress is best-effort: a caller that stopped reading must not stall the carrier.
                    let _ = tx.try_send(env);
                }
            }
            ResumeVerdict::Deliver(key) => {
                if let Some(bytes) = bytes {
                    signal(&waiters, &Waited::Task(key), Signal::Answer(bytes));
                }
            }
            ResumeVerdict::Fail { key, error } => signal(&waiters, &Waited::Task(key), Signal::Failed(error)),
            // Waiting, or a verdict a newer machine may give: the caller keeps waiting.
            _ => {}
        }
        drop(waiters);
        self.wake.notify_one();
        transmits
    }

    /// What the machine wants sent, for the tasks someone waits for (a task nobody waits for any more is not asked
    /// about).
    fn waited_transmits(&self, m: &mut Initiator) -> Vec<Transmit> {
        let waiters = lock(&self.waiters);
        std::iter::from_fn(|| m.poll_transmit())
            .filter(|t| waiters.contains_key(&Waited::Task(t.key().clone())))
            .collect()
    }

    /// Runs the machine's deadlines that are due: fails the callers of expired requests, and hands status polls to
    /// the callers that send them.
    fn fire(&self) {
        let mut m = self.machine();
        let expired = m.handle_timeout(now());
        let polls: Vec<Transmit> = std::iter::from_fn(|| m.poll_transmit()).collect();
        drop(m);
        let waiters = lock(&self.waiters);
        for e in expired {
            let waited = match &e {
                Expired::ProposalUnanswered { session_id, .. } => Waited::Proposal(session_id.clone()),
                Expired::ResultLost { key, .. }
                | Expired::TaskUnanswered { key, .. }
                | Expired::NotResumed { key, .. } => Waited::Task(key.clone()),
            };
            signal(&waiters, &waited, Signal::Failed(e.error().clone()));
        }
        for t in polls {
            signal(&waiters, &Waited::Task(t.key().clone()), Signal::Send(t));
        }
    }
}

impl Drop for InitiatorDriver {
    fn drop(&mut self) {
        // Wakes the timer task, which then finds the driver gone and ends.
        self.wake.notify_one();
    }
}

fn signal(waiters: &HashMap<Waited, Waiter>, waited: &Waited, signal: Signal) {
    if let Some(w) = waiters.get(waited) {
        // The caller may have stopped waiting; then nobody needs the signal.
        let _ = w.signals.send(signal);
    }
}

/// The driver's one timer: sleeps until the machine's earliest deadline, runs it, and re-arms when woken.
async fn run_timer(driver: Weak<InitiatorDriver>, wake: Arc<Notify>) {
    loop {
        // No strong reference is held while sleeping, so dropping the client ends this task.
        let next = match driver.upgrade() {
            Some(d) => d.machine().poll_timeout(),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => match driver.upgrade() {
                        Some(d) => d.fire(),
                        None => return,
                    },
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// A caller's registration for one request ([`InitiatorDriver::watch`]); dropping it unregisters the caller.
#[derive(Debug)]
pub(super) struct Watch<'a> {
    driver: &'a InitiatorDriver,
    waited: Waited,
    rx: mpsc::UnboundedReceiver<Signal>,
}

impl Watch<'_> {
    /// The next signal for the request (never `None` while the registration lives: the driver holds the sender).
    pub(super) async fn next(&mut self) -> Option<Signal> {
        self.rx.recv().await
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        lock(&self.driver.waiters).remove(&self.waited);
    }
}

/// The drivers attached to one transport ([`Transport::attach`](super::Transport::attach)): several clients may
/// share a transport. Held weakly, so that a dropped client's driver ends.
#[derive(Debug, Default)]
pub struct AttachedDrivers {
    drivers: Mutex<Vec<Weak<InitiatorDriver>>>,
}

impl AttachedDrivers {
    /// Adds `driver` (and forgets drivers that ended).
    pub fn add(&self, driver: &Arc<InitiatorDriver>) {
        let mut drivers = lock(&self.drivers);
        drivers.retain(|d| d.strong_count() > 0);
        drivers.push(Arc::downgrade(driver));
    }

    /// The drivers still alive.
    pub fn all(&self) -> Vec<Arc<InitiatorDriver>> {
        lock(&self.drivers).iter().filter_map(Weak::upgrade).collect()
    }

    /// Whether one of them keeps the answer deadline of `env` ([`InitiatorDriver::keeps_deadline`]): the transport
    /// then sets no timer of its own for it.
    pub fn keeps_deadline(&self, env: &Envelope) -> bool {
        self.all().iter().any(|d| d.keeps_deadline(env))
    }
}
