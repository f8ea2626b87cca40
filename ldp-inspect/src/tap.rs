//! The wire log: a [`Transport`] wrapper that records every envelope sent and every one received, as its bytes.
//!
//! The inspector shows what crossed the wire, not what the session machine made of it, so the tap sits between the
//! [`Client`](ldp_session::runtime::Client) and the real transport: the outbound envelope is encoded once more here
//! (the transport encodes it the same way, `Envelope::to_vec` is deterministic), replies are recorded as the bytes the
//! transport handed back, and pushed TASK_UPDATEs are copied off the update channel on their way to the client.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ldp_session::runtime::{Exchange, InitiatorDriver, Transport};
use ldp_types::{Envelope, IdentityCard, LdpError};
use serde::Serialize;
use tokio::sync::mpsc;

/// How many wire entries one connection keeps; older ones are dropped (the log is a view, not an archive).
pub const WIRE_LOG_CAPACITY: usize = 2_000;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the inspector to the delegate.
    Out,
    /// From the delegate to the inspector.
    In,
}

/// One message on the wire.
#[derive(Debug, Clone, Serialize)]
pub struct WireEntry {
    /// Position in the connection's log, from 0 (kept across dropped entries, so a reader can ask for what is new).
    pub seq: u64,
    /// Which way it went.
    pub direction: Direction,
    /// The message type (`TASK_SUBMIT`, ...), or `?` when the bytes do not decode as an envelope.
    pub message_type: String,
    /// The envelope's session id, when it decodes.
    pub session_id: Option<String>,
    /// The task it concerns, when it decodes and names one.
    pub task_id: Option<String>,
    /// The signature algorithm, when the envelope is signed.
    pub signed: Option<String>,
    /// The envelope as it crossed the wire (UTF-8; invalid bytes replaced).
    pub text: String,
}

/// A connection's wire log, bounded by [`WIRE_LOG_CAPACITY`].
#[derive(Debug, Default)]
pub struct WireLog {
    entries: Mutex<(u64, VecDeque<WireEntry>)>,
}

impl WireLog {
    /// Records `bytes` going `direction`.
    pub fn record(&self, direction: Direction, bytes: &[u8]) {
        let decoded = Envelope::from_slice(bytes).ok();
        let (message_type, session_id, task_id, signed) = match &decoded {
            Some(env) => (
                env.body.message_type().map_or_else(|| "UNKNOWN".to_owned(), |t| t.as_str().to_owned()),
                Some(env.session_id.clone()).filter(|s| !s.is_empty()),
                env.body.task_id().map(str::to_owned),
                env.signature.as_ref().map(|_| env.signature_algorithm.clone().unwrap_or_else(|| "unnamed".into())),
            ),
            None => ("?".to_owned(), None, None, None),
        };
        let text = String::from_utf8_lossy(bytes).into_owned();
        let mut guard = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (next, entries) = &mut *guard;
        entries.push_back(WireEntry { seq: *next, direction, message_type, session_id, task_id, signed, text });
        *next += 1;
        while entries.len() > WIRE_LOG_CAPACITY {
            entries.pop_front();
        }
    }

    /// Records `envelope` going out and returns a channel that copies each update into the log on its way to
    /// `updates`.
    fn tee(
        self: &Arc<Self>,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Option<mpsc::Sender<Envelope>> {
        if let Ok(bytes) = envelope.to_vec() {
            self.record(Direction::Out, &bytes);
        }
        updates.map(|client| {
            let (tx, mut rx) = mpsc::channel::<Envelope>(64);
            let log = Arc::clone(self);
            tokio::spawn(async move {
                while let Some(update) = rx.recv().await {
                    if let Ok(bytes) = update.to_vec() {
                        log.record(Direction::In, &bytes);
                    }
                    if client.send(update).await.is_err() {
                        break;
                    }
                }
            });
            tx
        })
    }

    /// The entries whose `seq` is `since` or later.
    pub fn since(&self, since: u64) -> Vec<WireEntry> {
        let guard = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.1.iter().filter(|e| e.seq >= since).cloned().collect()
    }
}

/// A transport that records what the one it wraps sends and receives in a [`WireLog`].
pub struct Tap {
    inner: Arc<dyn Transport>,
    log: Arc<WireLog>,
}

impl Tap {
    /// Wraps `inner`, recording into `log`.
    pub fn new(inner: Arc<dyn Transport>, log: Arc<WireLog>) -> Self {
        Self { inner, log }
    }
}

#[async_trait]
impl Transport for Tap {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        self.inner.identity().await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let updates = self.log.tee(envelope, updates);
        let reply = self.inner.exchange(envelope, updates).await?;
        if let Some(bytes) = &reply {
            self.log.record(Direction::In, bytes);
        }
        Ok(reply)
    }

    // The wrapped transport's verdict passes through unchanged, so a lost answer is still resumed.
    async fn exchange_outcome(&self, envelope: &Envelope, updates: Option<mpsc::Sender<Envelope>>) -> Exchange {
        let updates = self.log.tee(envelope, updates);
        let outcome = self.inner.exchange_outcome(envelope, updates).await;
        if let Exchange::Answered(Some(bytes)) = &outcome {
            self.log.record(Direction::In, bytes);
        }
        outcome
    }

    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        self.inner.attach(driver);
    }
}
