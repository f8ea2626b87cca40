//! One connection's sending side: its bounded queue and byte budget, and the task answers written but not yet
//! confirmed, which are handed back for the resume if the connection dies.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};

use crate::wire::CloseFrame;

use super::config::{ConnectionEnd, WsServerConfig};

/// Largest outbound byte budget accepted (the budget is counted in semaphore permits, which are `u32`).
pub(super) const MAX_OUTBOUND_BUDGET: usize = u32::MAX as usize >> 4;

/// Task answers written on a connection that may not have reached the peer: those fed to the socket but not yet
/// flushed, and the most recent flushed ones (up to the connection's outbound budget in bytes), because a flush only
/// hands bytes to the kernel: when the server closes a connection whose peer stopped reading (and may still be
/// sending), the kernel answers with a reset and drops what the peer had not read yet. When the server ends the
/// connection on such a peer (write or idle timeout, oversize message) all of them are held for the resume (a
/// failed read or write is most often the peer's own reset: it left), so an answer
/// can arrive twice (the client deduplicates by task id) but is not lost; otherwise only the unflushed ones.
pub(super) struct Unconfirmed {
    pub(super) unflushed: Vec<(String, Reroute)>,
    pub(super) flushed: VecDeque<(String, Reroute)>,
    pub(super) flushed_bytes: usize,
    pub(super) limit: usize,
}

impl Unconfirmed {
    pub(super) fn new(limit: usize) -> Self {
        Unconfirmed { unflushed: Vec::new(), flushed: VecDeque::new(), flushed_bytes: 0, limit }
    }

    pub(super) fn fed(&mut self, text: &str, reroute: Reroute) {
        self.unflushed.push((text.to_owned(), reroute));
    }

    pub(super) fn flushed(&mut self) {
        for (text, reroute) in self.unflushed.drain(..) {
            self.flushed_bytes += text.len();
            self.flushed.push_back((text, reroute));
        }
        while self.flushed_bytes > self.limit {
            let Some((text, _)) = self.flushed.pop_front() else { break };
            self.flushed_bytes -= text.len();
        }
    }

    /// What to hold for the resume after the connection ended with `end`.
    pub(super) fn into_held(self, end: &ConnectionEnd) -> impl Iterator<Item = (String, Reroute)> {
        // Only where this server closes on a peer that may have stopped reading: a peer that closes the connection
        // itself has read what it wanted (and one that resumes after a drop is not sent its last answers twice).
        let server_closed =
            matches!(end, ConnectionEnd::WriteTimeout | ConnectionEnd::IdleTimeout | ConnectionEnd::TooLarge);
        let flushed = if server_closed { self.flushed } else { VecDeque::new() };
        flushed.into_iter().chain(self.unflushed)
    }
}

/// A task's final answer, which must not be lost if its connection dies before writing it.
#[derive(Debug)]
pub(super) struct Reroute {
    pub(super) session: Box<str>,
    pub(super) task_id: Box<str>,
}

/// One item of a connection's outbound queue.
#[derive(Debug)]
pub(super) enum Out {
    /// A text frame, holding its share of the connection's byte budget until written.
    Text { text: String, reroute: Option<Reroute>, _budget: Option<OwnedSemaphorePermit> },
    /// Close the connection.
    Close(CloseFrame),
}

/// The sending side of one connection: its queue, its byte budget, and the alarm raised when the peer stops
/// taking frames.
#[derive(Clone)]
pub(super) struct Outbound {
    pub(super) tx: mpsc::Sender<Out>,
    pub(super) budget: Arc<Semaphore>,
    pub(super) budget_max: u32,
    pub(super) stalled: Arc<Notify>,
    pub(super) write_timeout: Duration,
}

impl Outbound {
    pub(super) fn new(cfg: &WsServerConfig) -> (Self, mpsc::Receiver<Out>) {
        let (tx, rx) = mpsc::channel(cfg.outbound_queue.max(1));
        let budget_max = cfg.max_outbound_bytes.clamp(1, MAX_OUTBOUND_BUDGET);
        let outbound = Self {
            tx,
            budget: Arc::new(Semaphore::new(budget_max)),
            budget_max: u32::try_from(budget_max).unwrap_or(u32::MAX),
            stalled: Arc::new(Notify::new()),
            write_timeout: cfg.write_timeout,
        };
        (outbound, rx)
    }

    pub(super) fn cost(&self, text: &str) -> u32 {
        u32::try_from(text.len()).unwrap_or(u32::MAX).clamp(1, self.budget_max)
    }

    /// Queues a text frame, waiting at most the write timeout for room; gives it back when the connection is gone
    /// or stalled (and then raises the alarm that closes it).
    pub(super) async fn text(&self, text: String, reroute: Option<Reroute>) -> Result<(), (String, Option<Reroute>)> {
        let deadline = tokio::time::Instant::now() + self.write_timeout;
        let cost = self.cost(&text);
        let budget = match tokio::time::timeout_at(deadline, Arc::clone(&self.budget).acquire_many_owned(cost)).await {
            Ok(Ok(budget)) => budget,
            Ok(Err(_closed)) => return Err((text, reroute)),
            Err(_) => {
                self.stalled.notify_one();
                return Err((text, reroute));
            }
        };
        match tokio::time::timeout_at(deadline, self.tx.reserve()).await {
            Ok(Ok(slot)) => {
                slot.send(Out::Text { text, reroute, _budget: Some(budget) });
                Ok(())
            }
            Ok(Err(_closed)) => Err((text, reroute)),
            Err(_) => {
                self.stalled.notify_one();
                Err((text, reroute))
            }
        }
    }

    /// Queues a text frame if there is room now.
    pub(super) fn try_text(&self, text: String, reroute: Reroute) -> Result<(), (String, Reroute)> {
        let Ok(budget) = Arc::clone(&self.budget).try_acquire_many_owned(self.cost(&text)) else {
            return Err((text, reroute));
        };
        match self.tx.try_reserve() {
            Ok(slot) => {
                slot.send(Out::Text { text, reroute: Some(reroute), _budget: Some(budget) });
                Ok(())
            }
            Err(_) => Err((text, reroute)),
        }
    }

    pub(super) async fn close(&self, frame: CloseFrame) {
        let _ = tokio::time::timeout(self.write_timeout, self.tx.send(Out::Close(frame))).await;
    }
}
