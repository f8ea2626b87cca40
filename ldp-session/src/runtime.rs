//! The async glue: a [`Delegate`] runs tasks, a [`Transport`] carries envelopes, [`DelegateRuntime`] joins a
//! [`Responder`] to a delegate for servers, [`Client`] hides the initiator's message choreography, and
//! [`InitiatorDriver`] runs the initiator's timers and resume for every transport.
//!
//! This is the only async code in the crate; every protocol rule stays in the machines. Transports (HTTP, WebSocket,
//! [`MemoryTransport`]) implement [`Transport`] on the client side and call [`DelegateRuntime::handle`] on the
//! server side, so swapping one for another changes one value in user code.

use crate::keyed::PeerMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ldp_types::{Envelope, IdentityCard, LdpError, RawJson, codes};
use tokio::sync::{Notify, broadcast, mpsc, oneshot};
use tokio::task::AbortHandle;
use tracing::Instrument;

use crate::TaskKey;
use crate::error::Refusal;
use crate::responder::{
    Aborted, Delivery, History, InboundCheck, Outcome, PeerContext, Responder, ResponderEvent, TaskOutput, TaskRequest,
};
use crate::shared::{
    Admission, Admitted, ReplayVerdict, SessionLookup, SharedTask, SharedTaskStatus, TaskAnswer, TaskClaim, TaskFinish,
    TaskStep, needs_session,
};
use crate::store::{OutageLog, Store, StoreError, StoreOptions};

/// A TASK_UPDATE from a running task: progress, or a chunk of its output.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Progress {
    /// Fraction done, 0.0-1.0.
    pub progress: Option<f64>,
    /// A status message.
    pub message: Option<String>,
    /// The next chunk of the task's output ([`TaskContext::partial`]).
    pub partial: Option<RawJson>,
}

/// What a running task can see and do besides computing: its session's earlier turns, progress and partial output
/// reports, and the signal that it was cancelled.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// Where reports go; `None` where nobody can receive them (an answer over plain HTTP), so that they cost nothing.
    updates: Option<mpsc::UnboundedSender<Progress>>,
    cancel: Arc<CancelSignal>,
    history: History,
}

/// A task's cancellation signal: raised once, seen by every copy of its context. Lighter than a `watch` channel,
/// whose sender wakes eight notifiers when it is dropped, which every task that ends uncancelled would pay for.
#[derive(Debug, Default)]
struct CancelSignal {
    raised: AtomicBool,
    notify: Notify,
}

impl CancelSignal {
    fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: a raise in between still wakes this waiter, and a wake only follows a
        // raise (the flag is set before the notification).
        notified.as_mut().enable();
        if !self.is_raised() {
            notified.await;
        }
    }
}

impl TaskContext {
    /// Reports progress; it reaches the initiator as TASK_UPDATE when the transport can push it.
    pub fn progress(&self, progress: Option<f64>, message: impl Into<Option<String>>) {
        // The receiver is gone only after the task ended; a late report has nowhere to go.
        if let Some(updates) = &self.updates {
            let _ = updates.send(Progress { progress, message: message.into(), partial: None });
        }
    }

    /// Sends the next chunk of the output (text as a `&str` or `String`, or JSON as a `serde_json::Value` or
    /// [`RawJson`]); it reaches the initiator as a TASK_UPDATE with `partial_output` when the transport can push it
    /// (SSE on `/ldp/stream`, WebSocket), and is dropped otherwise. The task's result still carries its whole output.
    pub fn partial(&self, chunk: impl Into<RawJson>) {
        if let Some(updates) = &self.updates {
            let _ = updates.send(Progress { progress: None, message: None, partial: Some(chunk.into()) });
        }
    }

    /// The session's earlier turns, oldest first (RFC 5.3: the initiator need not re-send them).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Whether the task was cancelled (TASK_CANCEL, its session closed or expired). Its answer has then already gone
    /// to the submitter; whatever the delegate returns is discarded.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_raised()
    }

    /// Resolves when the task is cancelled, and never if it is not: select on it next to slow work (a provider
    /// request) to stop that work. The runtime drops a cancelled delegate's future after its cancel grace
    /// ([`DelegateRuntime::set_cancel_grace`]) in any case.
    pub async fn cancelled(&self) {
        self.cancel.wait().await;
    }

    /// A context outside any runtime, for testing a delegate on its own: the handle receives what the task reports
    /// and can cancel it.
    pub fn detached(history: History) -> (Self, TaskHandle) {
        let (updates, rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(CancelSignal::default());
        (Self { updates: Some(updates), cancel: Arc::clone(&cancel), history }, TaskHandle { updates: rx, cancel })
    }
}

/// The other end of a [`TaskContext::detached`] context.
#[derive(Debug)]
pub struct TaskHandle {
    updates: mpsc::UnboundedReceiver<Progress>,
    cancel: Arc<CancelSignal>,
}

impl TaskHandle {
    /// Raises the task's cancellation signal.
    pub fn cancel(&self) {
        self.cancel.raise();
    }

    /// The next report, `None` once every copy of the context is dropped.
    pub async fn next(&mut self) -> Option<Progress> {
        self.updates.recv().await
    }
}

/// Executes tasks. A cancelled task's context signals it ([`TaskContext::cancelled`]), and its future is dropped
/// after the runtime's cancel grace, so long-running work should await regularly.
#[async_trait]
pub trait Delegate: Send + Sync + 'static {
    /// Runs one task.
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError>;
}

/// The echo delegate of the reference SDKs: answers `{"echo": <input>}`.
///
/// It never parses the input (it writes the text back inside one more object), so no input can make it fail but one
/// nested so deep that one more level would make the result a message no JSON reader holds; that task fails with a
/// typed `EXECUTION_FAILED` (the responder's rule for every delegate's output, `Responder::complete_task`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoDelegate;

#[async_trait]
impl Delegate for EchoDelegate {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let output = RawJson::member("echo", &task.input).map_err(|e| {
            LdpError::runtime(codes::EXECUTION_FAILED, format!("the input cannot be echoed: {e}")).with_retryable(false)
        })?;
        let mut out = TaskOutput::new(output);
        out.confidence = ldp_types::Score::new(1.0).ok();
        Ok(out)
    }
}

/// The answer to one inbound message.
///
/// Both answers are boxed: a response passes by value through every layer of a transport (the handling future,
/// its timeout, the handler), and an envelope inline made each of those moves 464 bytes.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed on purpose: a transport must answer every response, so a new one breaks its build.
pub enum Response {
    /// Send this envelope.
    Reply(Box<Envelope>),
    /// Accepted; nothing to send.
    Accepted,
    /// Refused; send the reply if any, else the error alone.
    Refused(Box<Refusal>),
}

impl Response {
    /// [`Response::Reply`] with `envelope`.
    pub fn reply(envelope: Envelope) -> Self {
        Self::Reply(Box::new(envelope))
    }

    /// [`Response::Refused`] with `refusal`.
    pub fn refused(refusal: Refusal) -> Self {
        Self::Refused(Box::new(refusal))
    }
}

struct RuntimeInner {
    /// Decoding and signature checks, run before taking the responder's lock.
    check: InboundCheck,
    responder: Mutex<Responder>,
    delegate: Arc<dyn Delegate>,
    /// The tasks the machine told the runtime to run, registered under the responder's lock as the machine hands
    /// them out, so that an abort the machine decides later always finds its task.
    running: Mutex<PeerMap<TaskKey, Running>>,
    events: broadcast::Sender<ResponderEvent>,
    /// The one source of monotonic time for the machine ([`DelegateRuntime::with_time`]).
    now: TimeSource,
    /// Wakes the reaper when a message brought the machine's next timeout forward (a contract deadline, a session
    /// with a shorter TTL, the end of a run of refusals), so that it sleeps no longer than the machine asks.
    timers: Arc<tokio::sync::Notify>,
    /// The timeout the reaper sleeps until, as nanoseconds after `epoch` ([`NOT_ARMED`]: none); written and
    /// compared under the responder's lock.
    armed: AtomicU64,
    /// The instant `armed` counts from: when the runtime was built.
    epoch: Instant,
    /// How long a cancelled delegate may run on after its cancellation signal, in milliseconds.
    cancel_grace_ms: AtomicU64,
    /// The store shared with other replicas, once attached ([`DelegateRuntime::attach_store`]).
    store: std::sync::OnceLock<store::StoreLink>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        // The reaper, asleep without the runtime, wakes and ends.
        self.timers.notify_one();
    }
}

/// [`RuntimeInner::armed`] when the reaper waits for no timeout (it looks again within a second).
const NOT_ARMED: u64 = u64::MAX;

/// The default of [`DelegateRuntime::set_cancel_grace`].
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How often [`DelegateRuntime::drain`] looks whether the running tasks have finished.
const DRAIN_TICK: Duration = Duration::from_millis(20);

/// The grace period a graceful shutdown gives running tasks by default (`ldp serve --shutdown-grace`, the front
/// door's `shutdown_grace`).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Where a runtime or driver reads monotonic time: the one hook, so that tests can simulate time.
pub type TimeSource = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Tokio's clock: the system's monotonic time, or virtual time in a test runtime whose time is paused
/// (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`), where sleeping advances it.
pub fn tokio_time() -> TimeSource {
    Arc::new(|| tokio::time::Instant::now().into_std())
}

/// A responder joined to a delegate: the server side of any transport.
#[derive(Clone)]
pub struct DelegateRuntime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for DelegateRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegateRuntime").finish_non_exhaustive()
    }
}

/// How to stop a running task's delegate and answer its submitter.
struct Running {
    /// Hands the machine's definite answer to the future awaiting the task, which then stops waiting.
    stop: oneshot::Sender<Envelope>,
    /// The delegate's own task, when it runs on one (it outlives the awaiting future, so it is aborted directly).
    spawned: Option<AbortHandle>,
    /// The delegate's cancellation signal ([`TaskContext::cancelled`]).
    cancel: Arc<CancelSignal>,
}

/// A cancelled delegate's work, left to run for the cancel grace.
enum WindDown {
    /// On its own task.
    Spawned(AbortHandle),
    /// Its future, taken from the request that ran it.
    InPlace(CatchPanic<'static, Result<TaskOutput, LdpError>>),
}

/// What the machine made of a message: an answer, or a task to run (registered in `running`).
enum Decision {
    Answer(Response),
    Execute { task: TaskRequest, stop: oneshot::Receiver<Envelope>, cancelled: Arc<CancelSignal> },
}

/// How a delegate's run ended.
enum Finished {
    Done(Result<TaskOutput, LdpError>),
    /// The machine aborted the task; its answer for the submitter.
    Aborted(Envelope),
    Panicked,
}

/// Polls a delegate's future, catching a panic as a spawned task's `JoinHandle` would.
struct CatchPanic<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> Future for CatchPanic<'_, T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let fut = &mut self.get_mut().0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Some(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the machine consistent (every mutation completes before it can panic),
    // so recover the guard instead of propagating the poison.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DelegateRuntime {
    /// Joins `responder` and `delegate`, with time from [`tokio_time`].
    pub fn new(responder: Responder, delegate: Arc<dyn Delegate>) -> Self {
        Self::with_time(responder, delegate, tokio_time())
    }

    /// Joins `responder` and `delegate`, reading monotonic time only from `now` (every `now` the machine is given,
    /// and the reaper's deadlines).
    pub fn with_time(responder: Responder, delegate: Arc<dyn Delegate>, now: TimeSource) -> Self {
        let (events, _) = broadcast::channel(1024);
        let epoch = now();
        Self {
            inner: Arc::new(RuntimeInner {
                check: responder.inbound_check(),
                responder: Mutex::new(responder),
                delegate,
                running: Mutex::new(PeerMap::default()),
                events,
                now,
                timers: Arc::new(tokio::sync::Notify::new()),
                armed: AtomicU64::new(NOT_ARMED),
                epoch,
                cancel_grace_ms: AtomicU64::new(DEFAULT_CANCEL_GRACE.as_millis() as u64),
                store: std::sync::OnceLock::new(),
            }),
        }
    }

    /// How long a cancelled task's delegate may run on after its cancellation signal (TASK_CANCEL, session close
    /// or expiry) before its future is dropped (default [`DEFAULT_CANCEL_GRACE`]; zero drops it at once, as a
    /// delegate that never looks at the signal needs). The submitter's TASK_FAILED `CANCELLED` goes out at once
    /// either way, and the task's slot is free at once; a delegate uses the grace to stop its own work cleanly.
    pub fn set_cancel_grace(&self, grace: Duration) {
        let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self.inner.cancel_grace_ms.store(ms, Ordering::Relaxed);
    }

    fn cancel_grace(&self) -> Duration {
        Duration::from_millis(self.inner.cancel_grace_ms.load(Ordering::Relaxed))
    }

    /// Lets a cancelled delegate's work run for the grace, then drops it. Outside a tokio runtime (or with no grace)
    /// it is dropped at once.
    fn wind_down(&self, work: WindDown) {
        let grace = self.cancel_grace();
        let handle = tokio::runtime::Handle::try_current().ok().filter(|_| !grace.is_zero());
        match (work, handle) {
            (WindDown::Spawned(abort), Some(rt)) => {
                rt.spawn(async move {
                    tokio::time::sleep(grace).await;
                    abort.abort();
                });
            }
            (WindDown::Spawned(abort), None) => abort.abort(),
            (WindDown::InPlace(fut), Some(rt)) => {
                rt.spawn(async move {
                    let _ = tokio::time::timeout(grace, fut).await;
                });
            }
            (WindDown::InPlace(fut), None) => drop(fut),
        }
    }

    /// A graceful shutdown's first half: new sessions and tasks are refused from now on
    /// ([`Responder::start_draining`]), running tasks get up to `grace` to finish, and those still running then are
    /// answered TASK_FAILED `CANCELLED` (retryable) and their work stopped. Returns how many were cancelled. Stop the
    /// transports after it, so that every answer reaches its submitter first.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.with_responder(Responder::start_draining);
        let deadline = tokio::time::Instant::now() + grace;
        // Polled: a shutdown happens once, and a tick of this length is far below any grace worth giving.
        while self.with_responder(|r| r.running_tasks()) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + DRAIN_TICK)).await;
        }
        let cancelled = self.with_responder(|r| r.cancel_running("because the delegate is shutting down"));
        if !cancelled.is_empty() {
            tracing::warn!(
                cancelled = cancelled.len(),
                ?grace,
                "shutdown: tasks still running after the grace were cancelled"
            );
        }
        cancelled.len()
    }

    /// The current monotonic time, from the runtime's [`TimeSource`].
    pub fn now(&self) -> Instant {
        (self.inner.now)()
    }

    /// The identity card served.
    pub fn card(&self) -> IdentityCard {
        lock(&self.inner.responder).config().card.clone()
    }

    /// Subscribes to responder events.
    pub fn subscribe(&self) -> broadcast::Receiver<ResponderEvent> {
        self.inner.events.subscribe()
    }

    /// Runs `f` on the machine, then forwards its events and stops the delegates' work of every task the machine
    /// aborted meanwhile ([`Responder::poll_aborted`]; do not drain that from `f`). Crate-private: transports ask
    /// the machine through named methods (`connections.rs`), so its rules cannot be bypassed from outside.
    pub(crate) fn with_responder<R>(&self, f: impl FnOnce(&mut Responder) -> R) -> R {
        let (out, aborted, ended) = {
            let mut r = lock(&self.inner.responder);
            let out = f(&mut r);
            self.wake_reaper_if_sooner(&r);
            while let Some(e) = r.poll_event() {
                // No subscribers is fine: events are for observers.
                let _ = self.inner.events.send(e);
            }
            let mut aborted = Vec::new();
            while let Some(a) = r.poll_aborted() {
                aborted.push(a);
            }
            let mut ended = Vec::new();
            while let Some(e) = r.poll_shared_ended() {
                ended.push(e);
            }
            (out, aborted, ended)
        };
        if let Some(link) = self.inner.store.get() {
            // Tasks the machine ended on its own (cancel, close, expiry) and answers it held for a suspended
            // session: recorded for the other replicas' status queries, off the caller's path.
            let records: Vec<(TaskKey, SharedTask)> = aborted
                .iter()
                .map(|a| (&a.key, &a.reply))
                .chain(ended.iter().map(|(k, e)| (k, e)))
                .filter_map(|(k, e)| SharedTask::ended(link.replica.as_str(), e).map(|t| (k.clone(), t)))
                .collect();
            if !records.is_empty()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                let rt_self = self.clone();
                rt.spawn(async move { rt_self.record_ended(records).await });
            }
        }
        if !aborted.is_empty() {
            let mut running = lock(&self.inner.running);
            for Aborted { key, reply } in aborted {
                if let Some(task) = running.remove(&key) {
                    // The signal first, so that the delegate sees it before its work is dropped.
                    task.cancel.raise();
                    if let Some(handle) = task.spawned {
                        self.wind_down(WindDown::Spawned(handle));
                    }
                    // The awaiting future may be gone (a dropped request); the work is stopped all the same.
                    let _ = task.stop.send(reply);
                }
            }
        }
        out
    }

    /// Wakes the reaper when the machine's next timeout is now sooner than the one it sleeps until. Called with the
    /// responder's lock held, after every call into the machine: a notification is kept until the reaper next
    /// waits, so none is lost between its reading the timeout and its sleep.
    fn wake_reaper_if_sooner(&self, r: &Responder) {
        let Some(next) = r.poll_timeout() else { return };
        let next = self.since_epoch(next);
        if next < self.inner.armed.load(Ordering::Relaxed) {
            self.inner.armed.store(next, Ordering::Relaxed);
            self.inner.timers.notify_one();
        }
    }

    /// `at` as nanoseconds after the runtime's epoch (0 before it), the form [`RuntimeInner::armed`] holds.
    fn since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.inner.epoch).as_nanos()).unwrap_or(NOT_ARMED - 1)
    }

    /// Reaps expired sessions (aborting their tasks' work) until the returned task is aborted or the runtime is
    /// dropped. Servers spawn it once. It holds the runtime only while it reaps, not while it sleeps: a detached
    /// reaper (a router mounted in an app of the caller's) keeps neither the runtime nor its delegate alive.
    pub fn spawn_reaper(&self) -> tokio::task::JoinHandle<()> {
        let runtime = Arc::downgrade(&self.inner);
        let timers = Arc::clone(&self.inner.timers);
        tokio::spawn(async move {
            loop {
                let Some(inner) = runtime.upgrade() else { return };
                let rt = DelegateRuntime { inner };
                let next = rt.with_responder(|r| {
                    let next = r.poll_timeout();
                    rt.inner.armed.store(next.map_or(NOT_ARMED, |t| rt.since_epoch(t)), Ordering::Relaxed);
                    next
                });
                let now = rt.now();
                let wait = next.map_or(std::time::Duration::from_secs(1), |t| t.saturating_duration_since(now));
                drop(rt);
                // A relative sleep: the time source need not be tokio's. The runtime's drop notifies too.
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = timers.notified() => continue,
                }
                let Some(inner) = runtime.upgrade() else { return };
                let rt = DelegateRuntime { inner };
                // The reaped sessions' tasks are queued for `poll_aborted` too, which `with_responder` drains.
                let now = rt.now();
                rt.with_responder(|r| r.handle_timeout(now));
            }
        })
    }

    /// Handles one inbound message. For a TASK_SUBMIT this runs the task to completion; TASK_UPDATEs it emits are
    /// sent to `updates` when given (streaming transports), and dropped otherwise.
    ///
    /// The delegate runs on a task of its own, so it keeps running when this future is dropped or not polled (until
    /// the machine aborts it: TASK_CANCEL, SESSION_CLOSE, session expiry).
    pub async fn handle(&self, peer: &PeerContext, bytes: &[u8], updates: Option<mpsc::Sender<Envelope>>) -> Response {
        self.handle_with(peer, bytes, updates, false).await
    }

    /// [`DelegateRuntime::handle`] with the delegate run within this future instead of on a task of its own (one
    /// task spawn less per TASK_SUBMIT), for callers that already run each message on its own task and poll it to
    /// completion, as the HTTP binding does. Cancellation and delegate panics are handled as by `handle`; but the
    /// delegate stops when this future is dropped, and makes no progress while it is not polled.
    pub async fn handle_in_place(
        &self,
        peer: &PeerContext,
        bytes: &[u8],
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Response {
        self.handle_with(peer, bytes, updates, true).await
    }

    async fn handle_with(
        &self,
        peer: &PeerContext,
        bytes: &[u8],
        updates: Option<mpsc::Sender<Envelope>>,
        in_place: bool,
    ) -> Response {
        // Decoding and signature verification need no machine state: keep them out of the lock, which every message
        // and every task completion takes.
        // Built in a block and awaited outside it: a local still in scope at an `.await` takes room in this future
        // even once moved, and transports move (and spawn) this future for every message.
        let (handling, span) = {
            let checked = match self.inner.check.check(bytes) {
                Ok(checked) => checked,
                Err(refusal) => return Response::refused(refusal),
            };
            let span = crate::spans::handle_span(checked.envelope());
            (self.handle_checked(peer, checked, updates, in_place).instrument(span.clone()), span)
        };
        let response = handling.await;
        match &response {
            Response::Reply(env) => crate::spans::record_answer(&span, env),
            Response::Refused(refusal) => crate::spans::record_error(&span, refusal.error.code.as_str()),
            Response::Accepted => {}
        }
        response
    }

    async fn handle_checked(
        &self,
        peer: &PeerContext,
        checked: crate::Checked,
        updates: Option<mpsc::Sender<Envelope>>,
        in_place: bool,
    ) -> Response {
        if let Some(link) = self.inner.store.get() {
            // The store's steps make this future about three times larger, and the transports move it (a spawn
            // copies it several times): boxed, only runtimes with a store pay for them, one allocation a message.
            return Box::pin(self.handle_stored(link, peer, checked, updates, in_place)).await;
        }
        // The task's parts are moved into the future and out of scope before the `.await` (see `handle_with`).
        let execution = match self.admit(peer, checked, None) {
            Decision::Answer(response) => return response,
            Decision::Execute { task, stop, cancelled } => self.execute(task, stop, cancelled, updates, in_place),
        };
        execution.await
    }

    /// Runs the machine on a checked message (with the store's record of its task, for a status query on a
    /// replica that does not run it), registering a task it admits before the machine's lock is released.
    fn admit(&self, peer: &PeerContext, checked: crate::Checked, remote: Option<&SharedTask>) -> Decision {
        let now = self.now();
        let outcome = self.with_responder(|r| {
            let outcome = r.handle_checked_shared(now, peer, checked, remote);
            // Registered before the machine's lock is released: any abort the machine decides later finds it.
            let stop = match &outcome {
                Ok(Outcome::Execute(task)) => {
                    let (tx, rx) = oneshot::channel();
                    let cancelled = Arc::new(CancelSignal::default());
                    let cancel = Arc::clone(&cancelled);
                    lock(&self.inner.running).insert(task.key.clone(), Running { stop: tx, spawned: None, cancel });
                    Some((rx, cancelled))
                }
                _ => None,
            };
            (outcome, stop)
        });
        Decision::Answer(match outcome {
            (Err(refusal), _) => Response::refused(refusal),
            (Ok(Outcome::Reply(env) | Outcome::Cancel { reply: env, .. }), _) => Response::reply(env),
            (Ok(Outcome::Accepted), _) => Response::Accepted,
            (Ok(Outcome::Execute(task)), Some((stop, cancelled))) => {
                return Decision::Execute { task, stop, cancelled };
            }
            // Registration above always yields a receiver for `Execute`.
            (Ok(Outcome::Execute(_)), None) => Response::Accepted,
        })
    }

    /// Runs an admitted task's delegate and delivers its end. Not an `async fn`: the arguments move into the
    /// delegate's run here and are held once, where an `async fn` would also keep them for its whole life.
    fn execute(
        &self,
        task: TaskRequest,
        stop: oneshot::Receiver<Envelope>,
        cancelled: Arc<CancelSignal>,
        updates: Option<mpsc::Sender<Envelope>>,
        in_place: bool,
    ) -> impl Future<Output = Response> + Send + '_ {
        let key = task.key.clone();
        // Reports go through a channel only to a transport that can push them (SSE, WebSocket).
        let (progress_tx, progress_rx) = match updates {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel::<Progress>();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let ctx = TaskContext { updates: progress_tx, cancel: cancelled, history: task.history.clone() };
        // Boxed: the delivery polls the run while forwarding progress, and a run held by value would be stored
        // twice in that future (as its argument and pinned), which every transport moves per message.
        let run = Box::pin(self.run_delegate(task, ctx, stop, in_place));
        self.deliver(key, run, progress_rx, updates)
    }

    /// Runs the delegate until it ends or the machine stops the task; hands `stop` back for an answer the machine
    /// queues after the delegate ended.
    async fn run_delegate(
        &self,
        task: TaskRequest,
        ctx: TaskContext,
        mut stop: oneshot::Receiver<Envelope>,
        in_place: bool,
    ) -> (Finished, oneshot::Receiver<Envelope>) {
        let delegate = self.inner.delegate.clone();
        let finished = if in_place {
            // Owned by this future ('static), so that a cancelled delegate can wind down after it returns.
            let mut work: CatchPanic<'static, _> =
                CatchPanic(Box::pin(async move { delegate.execute(task, ctx).await }));
            let stopped = tokio::select! {
                biased;
                reply = &mut stop => Err(reply),
                out = &mut work => Ok(out),
            };
            match stopped {
                Ok(out) => out.map_or(Finished::Panicked, Finished::Done),
                Err(reply) => {
                    self.wind_down(WindDown::InPlace(work));
                    reply.map_or(Finished::Panicked, Finished::Aborted)
                }
            }
        } else {
            let run_key = task.key.clone();
            // In the message's span, so the delegate's own calls (re-delegation) continue its trace.
            let mut join = tokio::spawn(async move { delegate.execute(task, ctx).await }.in_current_span());
            match lock(&self.inner.running).get_mut(&run_key) {
                Some(running) => running.spawned = Some(join.abort_handle()),
                // Aborted between the machine's answer and this spawn (its signal already raised).
                None => join.abort(),
            }
            tokio::select! {
                biased;
                // The abort already signalled the delegate and scheduled the end of its work (`wind_down`).
                reply = &mut stop => reply.map_or_else(|_| {
                    join.abort();
                    Finished::Panicked
                }, Finished::Aborted),
                // A cancelled join is one this runtime aborted for the machine, which then fails to finish the
                // task and waits for its answer like any other abort.
                out = &mut join => out.map_or(Finished::Panicked, Finished::Done),
            }
        };
        (finished, stop)
    }

    /// Forwards the running task's progress, then delivers its end through the machine (and the store).
    async fn deliver(
        &self,
        key: TaskKey,
        mut run: impl Future<Output = (Finished, oneshot::Receiver<Envelope>)> + Unpin,
        progress_rx: Option<mpsc::UnboundedReceiver<Progress>>,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Response {
        // Forward updates while the task runs, and those sent before it ended; later ones (from a delegate winding
        // down, or a copy of its context it kept) have nowhere to go.
        let forward = |p: Progress| {
            let Some(tx) = &updates else { return };
            let now = self.now();
            let env = self.with_responder(|r| match p.partial {
                Some(chunk) => r.partial_output(now, &key, chunk),
                None => r.progress(now, &key, p.progress, p.message),
            });
            if let Ok(env) = env {
                // A slow or gone reader must not stall the task; updates are best-effort.
                let _ = tx.try_send(env);
            }
        };
        // The task's end is worked out in blocks, so that only the answer itself is held across the store's await
        // (a local in scope at an `.await` takes room in the future even once moved; see `handle_with`).
        let (delivery, stop) = {
            let (finished, stop) = match progress_rx {
                None => run.await,
                Some(mut progress_rx) => {
                    let finished = loop {
                        tokio::select! {
                            biased;
                            Some(p) = progress_rx.recv() => forward(p),
                            finished = &mut run => break finished,
                        }
                    };
                    while let Ok(p) = progress_rx.try_recv() {
                        forward(p);
                    }
                    finished
                }
            };
            let now = self.now();
            let delivery = match finished {
                Finished::Aborted(reply) => return Response::reply(reply),
                Finished::Done(Ok(output)) => self.with_responder(|r| r.complete_task(now, &key, output)),
                Finished::Done(Err(error)) => self.with_responder(|r| r.fail_task(now, &key, error)),
                Finished::Panicked => {
                    let error = LdpError::runtime(codes::EXECUTION_FAILED, "the delegate panicked");
                    self.with_responder(|r| r.fail_task(now, &key, error))
                }
            };
            (delivery, stop)
        };
        let answer = match delivery {
            Ok(delivery) => {
                lock(&self.inner.running).remove(&key);
                match delivery {
                    Delivery::Send(env) => env,
                    Delivery::Held => return Response::Accepted,
                }
            }
            // The machine ended the task while it ran (cancelled, its session closed or expired) and queued its
            // answer, which `with_responder` hands to `stop` (the registration is still there to receive it).
            Err(_) => return stop.await.map_or(Response::Accepted, Response::reply),
        };
        // Committed before the answer goes out: an answered task is in the store for every replica's status
        // queries, and survives this process. Boxed for the reason `handle_checked` boxes the store's steps.
        if let Some(link) = self.inner.store.get() {
            return Response::reply(Box::pin(self.record_answer(link, &key, answer)).await);
        }
        Response::reply(answer)
    }
}

mod client;
mod connections;
mod driver;
mod store;
mod transport;

pub use client::{Client, SessionInfo, Submission, TaskOutcome};
pub use connections::RuntimeGauges;
pub use driver::{AttachedDrivers, DEFAULT_STATUS_POLL, InitiatorDriver};
pub use transport::{Exchange, MemoryTransport, Transport};
