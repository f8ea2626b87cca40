//! [`Client`]: the initiator's message choreography over any [`Transport`] (discover, propose, submit with
//! fallback, cancel, close). Each request waits for the first of its reply and what the [`InitiatorDriver`] signals
//! for it (a deadline, an answer recovered by a resume); a lost answer over a request/response carrier is resumed
//! here, with the machine's status queries.

use std::sync::Arc;

use ldp_types::{
    DelegationContract, Envelope, ErrorCategory, IdentityCard, LdpError, Manifest, PayloadMode, Provenance,
    SessionConfig, codes,
};
use tokio::sync::mpsc;

use super::driver::{Signal, Waited, Watch};
use super::{Exchange, InitiatorDriver, Progress, Transport};
use crate::TaskKey;

/// The requests' wire names, for errors that name them (the names are `ldp_types::MessageType`'s).
const PROPOSE: &str = ldp_types::MessageType::SessionPropose.as_str();
const SUBMIT: &str = ldp_types::MessageType::TaskSubmit.as_str();
use crate::clock::{IdSource, WallClock};
use crate::config::InitiatorConfig;
use crate::error::{PeerMisbehaved, SessionError};
use crate::initiator::{Initiator, InitiatorEvent, Transmit};
use crate::responder::TaskRequest;

/// An established session, as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// The authoritative session id.
    pub session_id: String,
    /// The negotiated mode.
    pub mode: PayloadMode,
    /// The fallback chain.
    pub fallback_chain: Vec<PayloadMode>,
}

/// One task for [`Client::submit_task`]: the session, skill and input, and what else the submission carries.
#[must_use]
pub struct Submission<'a> {
    session_id: &'a str,
    skill: &'a str,
    input: ldp_types::RawJson,
    contract: Option<DelegationContract>,
    parent: Option<&'a TaskRequest>,
    progress: Option<mpsc::Sender<Progress>>,
    on_key: Option<OnKey<'a>>,
}

/// What [`Submission::on_key`] calls with the task's key.
type OnKey<'a> = Box<dyn FnOnce(&TaskKey) + Send + 'a>;

impl<'a> Submission<'a> {
    /// `skill` with `input`, in session `session_id`.
    pub fn new(session_id: &'a str, skill: &'a str, input: impl Into<ldp_types::RawJson>) -> Self {
        Self { session_id, skill, input: input.into(), contract: None, parent: None, progress: None, on_key: None }
    }

    /// Under this delegation contract (budget, deadline, failure policy, success criteria).
    pub fn contract(mut self, contract: impl Into<Option<DelegationContract>>) -> Self {
        self.contract = contract.into();
        self
    }

    /// As a sub-task of `parent` (a task this delegate is running): the delegation depth and budget follow its
    /// contract.
    pub fn parent(mut self, parent: &'a TaskRequest) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Forwards the task's progress and partial output to `progress` as they arrive.
    pub fn progress(mut self, progress: impl Into<Option<mpsc::Sender<Progress>>>) -> Self {
        self.progress = progress.into();
        self
    }

    /// Hands the task's key to `on_key` once the machine has built the TASK_SUBMIT and before it is sent, so that
    /// another future can [`Client::cancel`] the task while this one waits (the machine chooses task ids; a
    /// bridge relaying another protocol's cancellation needs the id).
    pub fn on_key(mut self, on_key: impl FnOnce(&TaskKey) + Send + 'a) -> Self {
        self.on_key = Some(Box::new(on_key));
        self
    }
}

impl std::fmt::Debug for Submission<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submission")
            .field("session_id", &self.session_id)
            .field("skill", &self.skill)
            .field("contract", &self.contract.is_some())
            .field("parent", &self.parent.map(|p| &p.key))
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

/// The outcome of a completed task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    /// The task.
    pub key: TaskKey,
    /// The output, as received ([`ldp_types::RawJson::parse`] reads it).
    pub output: ldp_types::RawJson,
    /// Its provenance (with the contract check recorded).
    pub provenance: Provenance,
    /// Payload-mode fallbacks that happened on the way (from, to).
    pub fallbacks: Vec<(PayloadMode, PayloadMode)>,
}

/// The initiator side over any transport: `connect`, `propose`, `submit`, `close`.
pub struct Client<T: Transport> {
    transport: T,
    driver: Arc<InitiatorDriver>,
    card: IdentityCard,
    manifest: Option<Manifest>,
}

impl<T: Transport> std::fmt::Debug for Client<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("peer", &self.card.delegate_id).finish_non_exhaustive()
    }
}

impl<T: Transport> Client<T> {
    /// Discovers the peer (identity card) and exchanges HELLO / CAPABILITY_MANIFEST.
    pub async fn connect(
        transport: T,
        cfg: InitiatorConfig,
        wall: Arc<dyn WallClock>,
        ids: Box<dyn IdSource>,
    ) -> Result<Self, SessionError> {
        let card = transport.identity().await.map_err(SessionError::Transport)?;
        let mut initiator = Initiator::new(cfg, card.delegate_id.as_str(), wall, ids);
        let hello = initiator.hello();
        let driver = InitiatorDriver::new(initiator);
        transport.attach(&driver);
        let reply = transport.exchange(&hello, None).await.map_err(classify)?;
        let mut manifest = None;
        if let Some(reply) = reply {
            let mut initiator = driver.machine();
            handle_reply(&mut initiator, &reply)?;
            while let Some(e) = initiator.poll_event() {
                if let InitiatorEvent::Manifest(m) = e {
                    manifest = Some(m);
                }
            }
        }
        Ok(Self { transport, driver, card, manifest })
    }

    /// The peer's identity card.
    pub fn card(&self) -> &IdentityCard {
        &self.card
    }

    /// The peer's capability manifest, if it sent one.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The driver of this client's initiator machine.
    pub fn driver(&self) -> &Arc<InitiatorDriver> {
        &self.driver
    }

    /// Proposes a session and waits for the answer.
    pub async fn propose(&self, config: SessionConfig) -> Result<SessionInfo, SessionError> {
        let env = self.driver.machine().propose(config);
        let result = self.await_accept(&env).await;
        if result.is_err() {
            // However the proposal failed, its caller has the error: no later answer may be matched to it.
            self.driver.machine().handle_send_failed(&env);
        }
        result
    }

    async fn await_accept(&self, env: &Envelope) -> Result<SessionInfo, SessionError> {
        let mut watch = self.driver.watch(Waited::Proposal(env.session_id.clone()), None);
        self.driver.sent(env);
        let reply = tokio::select! {
            signal = watch.next() => match signalled(signal, PROPOSE)? {
                Signalled::Reply(reply) => Some(reply),
                Signalled::Send(_) => None,
            },
            reply = self.transport.exchange(env, None) => reply.map_err(classify)?,
        };
        drop(watch);
        let reply = reply.ok_or(PeerMisbehaved::NoAnswer { request: PROPOSE })?;
        let mut init = self.driver.machine();
        handle_reply(&mut init, &reply)?;
        let mut result =
            Err(PeerMisbehaved::WrongAnswer { request: PROPOSE, expected: "SESSION_ACCEPT or SESSION_REJECT" }.into());
        while let Some(e) = init.poll_event() {
            match e {
                InitiatorEvent::SessionEstablished { session_id, mode, fallback_chain } => {
                    result = Ok(SessionInfo { session_id, mode, fallback_chain });
                }
                InitiatorEvent::SessionRejected { error } => result = Err(SessionError::Peer(error)),
                InitiatorEvent::TaskFailed { error, .. } => result = Err(SessionError::Peer(error)),
                _ => {}
            }
        }
        result
    }

    /// Submits a task and waits for its outcome, resubmitting automatically along the fallback chain. For
    /// progress, a parent task or the task's key, use [`Client::submit_task`].
    pub async fn submit(
        &self,
        session_id: &str,
        skill: &str,
        input: impl Into<ldp_types::RawJson>,
        contract: Option<DelegationContract>,
    ) -> Result<TaskOutcome, SessionError> {
        self.submit_task(Submission::new(session_id, skill, input).contract(contract)).await
    }

    /// Submits `task` and waits for its outcome, resubmitting automatically along the fallback chain.
    pub async fn submit_task(&self, task: Submission<'_>) -> Result<TaskOutcome, SessionError> {
        let Submission { session_id, skill, input, contract, parent, progress, on_key } = task;
        let env = self.driver.machine().submit(session_id, skill, input, contract, parent)?;
        if let Some(on_key) = on_key {
            on_key(&TaskKey {
                session_id: env.session_id.clone(),
                task_id: env.body.task_id().unwrap_or_default().to_owned(),
            });
        }
        let result = self.await_result(env.clone(), progress).await;
        if result.is_err() {
            // A transport failure, or a reply the initiator could not take, leaves the task in the machine with no
            // one waiting for it: forget it (a task the peer failed is gone already).
            self.driver.machine().handle_send_failed(&env);
        }
        result
    }

    /// The number of tasks submitted and not yet ended, as the initiator counts them.
    pub fn pending_tasks(&self) -> usize {
        self.driver.pending_tasks()
    }

    async fn await_result(
        &self,
        env: Envelope,
        progress: Option<mpsc::Sender<Progress>>,
    ) -> Result<TaskOutcome, SessionError> {
        let key =
            TaskKey { session_id: env.session_id.clone(), task_id: env.body.task_id().unwrap_or_default().to_owned() };
        let updates = progress.map(|p| forward_updates(p, key.clone()));
        let mut watch = self.driver.watch(Waited::Task(key.clone()), updates.clone());
        let mut fallbacks = Vec::new();
        let mut next = Some(Outgoing::Request(env));
        loop {
            let reply = match next.take() {
                None => match signalled(watch.next().await, SUBMIT)? {
                    Signalled::Reply(reply) => reply,
                    Signalled::Send(t) => {
                        next = Some(Outgoing::Transmit(t));
                        continue;
                    }
                },
                Some(out) => match self.send(&key, &mut watch, out, updates.clone()).await? {
                    Step::Reply(reply) => reply,
                    Step::Send(out) => {
                        next = out;
                        continue;
                    }
                },
            };
            let mut init = self.driver.machine();
            handle_reply(&mut init, &reply)?;
            let mut done = None;
            while let Some(e) = init.poll_event() {
                match e {
                    InitiatorEvent::TaskCompleted { key: k, output, provenance } if k == key => {
                        done = Some(Ok(TaskOutcome { key: k, output, provenance, fallbacks: Vec::new() }));
                    }
                    InitiatorEvent::TaskFailed { key: k, error } if k == key => {
                        done = Some(Err(SessionError::Peer(error)))
                    }
                    InitiatorEvent::FellBack { key: k, from, to } if k == key => fallbacks.push((from, to)),
                    _ => {}
                }
            }
            if let Some(done) = done {
                return done.map(|mut o| {
                    o.fallbacks = fallbacks;
                    o
                });
            }
            match init.poll_outbound() {
                Some(resend) => next = Some(Outgoing::Request(resend)),
                None => {
                    return Err(PeerMisbehaved::WrongAnswer {
                        request: SUBMIT,
                        expected: "TASK_RESULT or TASK_FAILED",
                    }
                    .into());
                }
            }
        }
    }

    /// Sends one message for the task `key`, racing its answer against what the driver signals for the task.
    async fn send(
        &self,
        key: &TaskKey,
        watch: &mut Watch<'_>,
        out: Outgoing,
        updates: Option<mpsc::Sender<ldp_types::Envelope>>,
    ) -> Result<Step, SessionError> {
        let env = out.envelope();
        self.driver.sent(env);
        let outcome = tokio::select! {
            signal = watch.next() => {
                return Ok(match signalled(signal, SUBMIT)? {
                    Signalled::Reply(reply) => Step::Reply(reply),
                    Signalled::Send(t) => Step::Send(Some(Outgoing::Transmit(t))),
                });
            }
            outcome = self.transport.exchange_outcome(env, updates) => outcome,
        };
        match (out, outcome) {
            (Outgoing::Request(_), Exchange::Answered(Some(reply))) => Ok(Step::Reply(reply)),
            (Outgoing::Request(_), Exchange::Answered(None)) => {
                Err(PeerMisbehaved::NoAnswer { request: SUBMIT }.into())
            }
            (Outgoing::Request(_), Exchange::Lost(error)) => {
                // The peer may have the task: ask it, rather than fail a task that may run.
                let first = self.driver.resume([key.clone()]).into_iter().next();
                if first.is_none() && !self.driver.machine().awaits_task(key) {
                    return Err(classify(error));
                }
                // Nothing to send: the machine gave up on the task, and the driver's timer fails it.
                Ok(Step::Send(first.map(Outgoing::Transmit)))
            }
            (Outgoing::Request(_), Exchange::Failed(error)) => Err(classify(error)),
            (Outgoing::Transmit(t), Exchange::Answered(answer)) => {
                let answer = answer.ok_or_else(|| {
                    LdpError::transport(codes::TRANSPORT_ERROR, "the peer accepted a status query without an answer")
                        .with_retryable(false)
                });
                let sent = &t.envelope().message_id;
                Ok(Step::Send(self.driver.resume_answer(key, sent, answer).into_iter().next().map(Outgoing::Transmit)))
            }
            // The query never got through: ask again later (the loss counts against the machine's bound).
            (Outgoing::Transmit(_), Exchange::Lost(_)) => {
                self.driver.query_lost(key);
                Ok(Step::Send(None))
            }
            (Outgoing::Transmit(_), Exchange::Failed(error)) if error.category == ErrorCategory::Transport => {
                self.driver.query_lost(key);
                Ok(Step::Send(None))
            }
            (Outgoing::Transmit(t), Exchange::Failed(error)) => {
                let sent = &t.envelope().message_id;
                Ok(Step::Send(
                    self.driver.resume_answer(key, sent, Err(error)).into_iter().next().map(Outgoing::Transmit),
                ))
            }
        }
    }

    /// Cancels a running task (submitted from another future).
    pub async fn cancel(&self, key: &TaskKey) -> Result<(), SessionError> {
        let env = self.driver.machine().cancel(key)?;
        self.transport.exchange(&env, None).await.map_err(classify)?;
        Ok(())
    }

    /// Closes a session.
    pub async fn close(&self, session_id: &str) -> Result<(), SessionError> {
        let env = self.driver.machine().close(session_id, Some("done".into()))?;
        self.transport.exchange(&env, None).await.map_err(classify)?;
        Ok(())
    }
}

/// A message the client sends for a task: the task's own (its submit, a fallback's resubmission), or one the machine
/// wants sent to resume it.
#[derive(Debug)]
enum Outgoing {
    Request(Envelope),
    Transmit(Transmit),
}

impl Outgoing {
    fn envelope(&self) -> &Envelope {
        match self {
            Self::Request(env) => env,
            Self::Transmit(t) => t.envelope(),
        }
    }
}

/// What one send of [`Client::send`] leads to.
#[derive(Debug)]
enum Step {
    /// The task's answer, for the machine to judge.
    Reply(Vec<u8>),
    /// No answer yet: send this next (`None`: wait for the driver's signal).
    Send(Option<Outgoing>),
}

/// What the driver signalled to a waiting caller, when it is not a failure.
#[derive(Debug)]
enum Signalled {
    /// The request's answer.
    Reply(Vec<u8>),
    /// A status poll to send for the task.
    Send(Transmit),
}

/// A driver's signal to a waiting caller: the answer, a status poll to send, or the request's error.
fn signalled(signal: Option<Signal>, request: &'static str) -> Result<Signalled, SessionError> {
    match signal {
        Some(Signal::Answer(reply)) => Ok(Signalled::Reply(reply)),
        Some(Signal::Send(t)) => Ok(Signalled::Send(t)),
        Some(Signal::Failed(error)) => Err(classify(error)),
        None => Err(PeerMisbehaved::NoAnswer { request }.into()),
    }
}

fn classify(e: LdpError) -> SessionError {
    if e.category == ldp_types::ErrorCategory::Transport { SessionError::Transport(e) } else { SessionError::Peer(e) }
}

/// Feeds a reply to the initiator: the one decode of a reply, from the bytes the transport received.
fn handle_reply(init: &mut Initiator, reply: &[u8]) -> Result<(), SessionError> {
    init.handle(reply)
}

fn forward_updates(progress: mpsc::Sender<Progress>, key: TaskKey) -> mpsc::Sender<Envelope> {
    let (tx, mut rx) = mpsc::channel::<Envelope>(64);
    tokio::spawn(async move {
        while let Some(env) = rx.recv().await {
            if let ldp_types::Body::TaskUpdate(u) = env.body
                && u.task_id == key.task_id
            {
                let update = Progress { progress: u.progress, message: u.message, partial: u.partial_output };
                let _ = progress.send(update).await;
            }
        }
    });
    tx
}
