//! What every connection of a server shares: the runtime, the open connections' outbound queues, budgets and
//! figures; and moving a dead connection's undelivered answers to the session machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ldp_edge::{BearerAuth, HttpMetrics, TransportFigures, TransportSource};
use ldp_session::runtime::DelegateRuntime;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::inbound::InboundBudget;

use super::config::WsServerConfig;
use super::outbound::{MAX_OUTBOUND_BUDGET, Out, Outbound, Reroute};

/// The outbound queue of each open connection, by the connection id the session machine knows it by
/// ([`PeerContext::connection`]; which connection carries which session is the machine's:
/// [`Responder::connection_of`](ldp_session::Responder::connection_of)).
pub(super) type Conns = HashMap<u64, Outbound>;

pub(super) struct Hub {
    pub(super) runtime: DelegateRuntime,
    pub(super) config: WsServerConfig,
    pub(super) auth: BearerAuth,
    pub(super) conns: Mutex<Conns>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) open: AtomicUsize,
    /// Bytes of messages in handling across every connection (`max_in_flight_bytes_total`).
    pub(super) in_flight_bytes: Arc<Semaphore>,
    /// Inbound bytes per second per principal (`max_inbound_rate`).
    pub(super) inbound: InboundBudget,
    /// Text frames read and written since the server started (for `/metrics`).
    pub(super) received: AtomicU64,
    pub(super) sent: AtomicU64,
    /// The HTTP server's metrics, when this server reports there ([`WsServer::report_to`]).
    pub(super) metrics: std::sync::OnceLock<HttpMetrics>,
}

/// The WebSocket figures `/metrics` reads at scrape time; holds the server weakly, so a dropped server reports zeros.
pub(super) struct Figures(pub(super) std::sync::Weak<Hub>);

impl TransportSource for Figures {
    fn figures(&self) -> TransportFigures {
        let Some(hub) = self.0.upgrade() else { return TransportFigures::default() };
        let held = hub.runtime.gauges().held;
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        TransportFigures::new(
            n(hub.open.load(Ordering::Relaxed)),
            hub.received.load(Ordering::Relaxed),
            hub.sent.load(Ordering::Relaxed),
            n(held.results),
            n(held.bytes),
        )
    }
}

/// What one message in handling holds of its connection's and the server's budgets, released when it is done.
pub(super) struct InFlightPermits {
    pub(super) _count: tokio::sync::OwnedSemaphorePermit,
    pub(super) _bytes: tokio::sync::OwnedSemaphorePermit,
    pub(super) _total: tokio::sync::OwnedSemaphorePermit,
}

/// A message's share of a byte budget (clamped so that one message never waits for more than the whole budget).
pub(super) fn byte_cost(len: usize, budget: usize) -> u32 {
    u32::try_from(len.clamp(1, budget.clamp(1, MAX_OUTBOUND_BUDGET))).unwrap_or(u32::MAX)
}

/// Connection ids are unique in the process, so that several servers can share one runtime.
pub(super) static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

pub(super) fn lock(m: &Mutex<Conns>) -> MutexGuard<'_, Conns> {
    // Every mutation of the map completes before anything that could panic; recover from poisoning.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Hub {
    /// Forgets the connection, suspends its sessions, and hands its task answers that may not have reached the peer
    /// (`unconfirmed`) and those still queued to their sessions' new connections or to the machine to hold.
    pub(super) fn disconnect(
        &self,
        conn: u64,
        mut out_rx: mpsc::Receiver<Out>,
        unconfirmed: impl Iterator<Item = (String, Reroute)>,
    ) {
        if let Some(outbound) = lock(&self.conns).remove(&conn) {
            // Handlers waiting for room give up at once and keep their answers for the resume.
            outbound.budget.close();
        }
        out_rx.close();
        // Suspended first, so that only a session that has moved to another connection is written there.
        self.runtime.connection_closed(conn);
        for (text, reroute) in unconfirmed {
            self.reroute(reroute, text, conn);
        }
        while let Ok(item) = out_rx.try_recv() {
            if let Out::Text { text, reroute: Some(reroute), .. } = item {
                self.reroute(reroute, text, conn);
            }
        }
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A task's final answer that could not be written on connection `from`: to the connection that carries its
    /// session now if that has room, else to the session machine, which holds it (bounded) until the session
    /// resumes.
    pub(super) fn reroute(&self, reroute: Reroute, text: String, from: u64) {
        let target = self.runtime.carrier(&reroute.session).filter(|c| *c != from);
        let outbound = target.and_then(|c| lock(&self.conns).get(&c).cloned());
        let (text, reroute) = match outbound {
            Some(outbound) => match outbound.try_text(text, reroute) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => (text, reroute),
        };
        self.runtime.hold(&reroute.session, &reroute.task_id, text);
    }

    /// Writes the answers the session machine held for `session` while it was away to `out`, each once (a
    /// TASK_FAILED `RESULT_NOT_KEPT` for every task whose answer was dropped, then the answers kept), before the
    /// answer to the message that brought the session back; when the machine says the session is live on `conn`.
    pub(super) async fn flush(&self, session: &str, conn: u64, out: &Outbound) {
        let held = self.runtime.held_for(session, conn);
        for answer in held {
            let reroute = Reroute { session: session.into(), task_id: answer.task_id().into() };
            if let Err((text, Some(reroute))) = out.text(answer.into_json(), Some(reroute)).await {
                self.reroute(reroute, text, conn);
            }
        }
    }
}
