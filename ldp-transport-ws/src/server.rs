//! The server side: one connection loop per WebSocket, generic over any `Sink<Message>` + `Stream` pair, and the thin
//! axum adapter that feeds it upgraded sockets.
//!
//! Per connection: a reader reads frames (while it holds one of `max_in_flight` permits), spawns one handler per
//! envelope, and handlers send replies and pushed TASK_UPDATEs through one bounded outbound queue that a writer drains
//! into the socket (pinging every `ping_interval`). When the queue is full, handlers wait, permits run out and the
//! reader stops reading: a slow reader costs bounded memory. When the connection ends, its sessions are suspended
//! in the session machine; results that could not be written are kept for the session's next connection.

use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{self as aws, WebSocketUpgrade};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::{Sink, SinkExt, Stream, StreamExt};
use ldp_session::runtime::{DelegateRuntime, Response as RuntimeResponse};
use ldp_session::{AuthenticatedPeer, PeerContext, Refusal};
use ldp_transport_http::{BearerAuth, HttpMetrics, IDENTITY, TransportFigures, TransportSource, WELL_KNOWN_IDENTITY};
use ldp_types::{Envelope, LdpError, codes};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::inbound::InboundBudget;
use crate::wire::{
    CloseFrame, Head, Message, WireError, accepted_frame, close_code, envelope_frame, error_frame, is_task_end,
};
use ldp_session::{HeldLimits, HeldStats};

/// The path of the WebSocket binding.
pub const WS_PATH: &str = "/ldp/ws";

/// How long the writer may keep flushing queued frames (an error, a close frame) after the reader stopped.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Capacity of one task's progress channel; updates beyond it are dropped (progress is best-effort).
const UPDATE_QUEUE: usize = 16;

/// Frames the writer sends in one batch before it flushes the socket.
const WRITE_BATCH: usize = 64;

/// Largest outbound byte budget accepted (the budget is counted in semaphore permits, which are `u32`).
const MAX_OUTBOUND_BUDGET: usize = u32::MAX as usize >> 4;

/// Server settings of the WebSocket binding.
#[derive(Debug, Clone)]
pub struct WsServerConfig {
    /// Largest text message accepted, in bytes (default 1 MiB, as HTTP's body limit). A larger one is answered with a
    /// `MESSAGE_TOO_LARGE` error frame, then the connection is closed with 1009.
    pub max_message: usize,
    /// Frames queued for one connection's writer (default 64). Replies and updates wait when it is full.
    pub outbound_queue: usize,
    /// Messages of one connection handled at the same time (default 256). The socket is not read while all are busy.
    pub max_in_flight: usize,
    /// Bytes of the messages one connection has in handling at the same time (default 8 MiB): a handler holds its
    /// message, and its answer while that waits for a client that does not read, so a count alone does not bound
    /// memory. The socket is not read while the budget is spent (the client then meets TCP backpressure).
    pub max_in_flight_bytes: usize,
    /// Bytes of the messages all connections have in handling at the same time (default 256 MiB).
    pub max_in_flight_bytes_total: usize,
    /// Bytes per second of inbound messages one principal (its bearer token or certificate, else its address) may
    /// send across all its connections (default 16 MiB/s; 0 turns the budget off), after a burst of as many bytes
    /// or two of the largest messages, whichever is more. Beyond it the principal's sockets are left unread until
    /// the debt drains (TCP backpressure): a flood of large tasks from one peer costs the server this much work per
    /// second and no more, so other clients keep their latency.
    pub max_inbound_rate: u64,
    /// Interval of the server's pings (default 15 s).
    pub ping_interval: Duration,
    /// A connection that sends nothing (not even a pong to the pings) for this long is dead (default 45 s).
    pub idle_timeout: Duration,
    /// Longest time a frame may wait to be queued for a connection, or to be written to its socket (default 30 s).
    /// A client that does not read is closed then; its unwritten task answers are kept for its resume.
    pub write_timeout: Duration,
    /// Bytes of frames queued for one connection's writer (default 4 MiB; a larger frame waits for an empty queue).
    /// With `outbound_queue` it bounds what a client that does not read costs before the write timeout closes it.
    pub max_outbound_bytes: usize,
    /// How long task answers completed for a disconnected session are kept for its resume (default 1 h, the RFC's
    /// default session TTL). With `held`, set on the runtime's responder when the server is built: the session
    /// machine keeps the answers ([`Responder::take_held`](ldp_session::Responder::take_held)).
    pub held_ttl: Duration,
    /// How many answers, and how many bytes, are kept for resume per session and in total. What does not fit is
    /// dropped oldest first, and the resuming client gets a TASK_FAILED `RESULT_NOT_KEPT` for each dropped task.
    /// Set on the runtime's responder when the server is built ([`Limits::held`](ldp_session::Limits::held); its
    /// `ttl` is `held_ttl`), replacing what its configuration said.
    pub held: HeldLimits,
    /// Origins (`scheme://host[:port]`, or `*`) whose web pages may open a WebSocket. An upgrade with an `Origin`
    /// header that is neither listed nor the server's own (matching `Host`) is refused with 403: otherwise any page
    /// a browser visits could drive a local server. Requests without `Origin` (non-browser clients) are allowed.
    pub allowed_origins: Vec<String>,
    /// Size of each connection's read and write buffers (default 16 KiB; tungstenite's own default of 128 KiB
    /// each makes an idle connection several times heavier). Larger messages still work: the buffers grow.
    pub io_buffer: usize,
    /// Bearer tokens and the identities they authenticate (the same table as HTTP's). When any is set, an upgrade
    /// without a known token is refused with 401 and an LDP error body.
    pub tokens: HashMap<String, AuthenticatedPeer>,
}

impl Default for WsServerConfig {
    fn default() -> Self {
        Self {
            max_message: 1024 * 1024,
            outbound_queue: 64,
            max_in_flight: 256,
            max_in_flight_bytes: 8 * 1024 * 1024,
            max_in_flight_bytes_total: 256 * 1024 * 1024,
            max_inbound_rate: 16 * 1024 * 1024,
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(30),
            max_outbound_bytes: 4 * 1024 * 1024,
            held_ttl: Duration::from_secs(3600),
            held: HeldLimits::default(),
            allowed_origins: Vec::new(),
            io_buffer: 16 * 1024,
            tokens: HashMap::new(),
        }
    }
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionEnd {
    /// The peer closed it (with this close code, if it sent one) or its stream ended.
    PeerClosed(Option<u16>),
    /// The peer sent a message over the limit; it got a `MESSAGE_TOO_LARGE` error and close code 1009.
    TooLarge,
    /// Nothing arrived within the idle timeout: the peer is dead.
    IdleTimeout,
    /// The peer did not take the server's frames within the write timeout (it does not read): closed without a
    /// close frame, its unwritten task answers kept for its resume.
    WriteTimeout,
    /// The server shut down (close code 1001).
    Shutdown,
    /// Reading or writing failed.
    Failed(WireError),
}

/// Task answers written on a connection that may not have reached the peer: those fed to the socket but not yet
/// flushed, and the most recent flushed ones (up to the connection's outbound budget in bytes), because a flush only
/// hands bytes to the kernel: when the server closes a connection whose peer stopped reading (and may still be
/// sending), the kernel answers with a reset and drops what the peer had not read yet. When the server ends the
/// connection on such a peer (write or idle timeout, oversize message) all of them are held for the resume (a
/// failed read or write is most often the peer's own reset: it left), so an answer
/// can arrive twice (the client deduplicates by task id) but is not lost; otherwise only the unflushed ones.
struct Unconfirmed {
    unflushed: Vec<(String, Reroute)>,
    flushed: VecDeque<(String, Reroute)>,
    flushed_bytes: usize,
    limit: usize,
}

impl Unconfirmed {
    fn new(limit: usize) -> Self {
        Unconfirmed { unflushed: Vec::new(), flushed: VecDeque::new(), flushed_bytes: 0, limit }
    }

    fn fed(&mut self, text: &str, reroute: Reroute) {
        self.unflushed.push((text.to_owned(), reroute));
    }

    fn flushed(&mut self) {
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
    fn into_held(self, end: &ConnectionEnd) -> impl Iterator<Item = (String, Reroute)> {
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
struct Reroute {
    session: Box<str>,
    task_id: Box<str>,
}

/// One item of a connection's outbound queue.
#[derive(Debug)]
enum Out {
    /// A text frame, holding its share of the connection's byte budget until written.
    Text { text: String, reroute: Option<Reroute>, _budget: Option<OwnedSemaphorePermit> },
    /// Close the connection.
    Close(CloseFrame),
}

/// The sending side of one connection: its queue, its byte budget, and the alarm raised when the peer stops
/// taking frames.
#[derive(Clone)]
struct Outbound {
    tx: mpsc::Sender<Out>,
    budget: Arc<Semaphore>,
    budget_max: u32,
    stalled: Arc<Notify>,
    write_timeout: Duration,
}

impl Outbound {
    fn new(cfg: &WsServerConfig) -> (Self, mpsc::Receiver<Out>) {
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

    fn cost(&self, text: &str) -> u32 {
        u32::try_from(text.len()).unwrap_or(u32::MAX).clamp(1, self.budget_max)
    }

    /// Queues a text frame, waiting at most the write timeout for room; gives it back when the connection is gone
    /// or stalled (and then raises the alarm that closes it).
    async fn text(&self, text: String, reroute: Option<Reroute>) -> Result<(), (String, Option<Reroute>)> {
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
    fn try_text(&self, text: String, reroute: Reroute) -> Result<(), (String, Reroute)> {
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

    async fn close(&self, frame: CloseFrame) {
        let _ = tokio::time::timeout(self.write_timeout, self.tx.send(Out::Close(frame))).await;
    }
}

/// The outbound queue of each open connection, by the connection id the session machine knows it by
/// ([`PeerContext::connection`]; which connection carries which session is the machine's:
/// [`Responder::connection_of`](ldp_session::Responder::connection_of)).
type Conns = HashMap<u64, Outbound>;

struct Hub {
    runtime: DelegateRuntime,
    config: WsServerConfig,
    auth: BearerAuth,
    conns: Mutex<Conns>,
    shutdown: watch::Sender<bool>,
    open: AtomicUsize,
    /// Bytes of messages in handling across every connection (`max_in_flight_bytes_total`).
    in_flight_bytes: Arc<Semaphore>,
    /// Inbound bytes per second per principal (`max_inbound_rate`).
    inbound: InboundBudget,
    /// Text frames read and written since the server started (for `/metrics`).
    received: AtomicU64,
    sent: AtomicU64,
    /// The HTTP server's metrics, when this server reports there ([`WsServer::report_to`]).
    metrics: std::sync::OnceLock<HttpMetrics>,
}

/// The WebSocket figures `/metrics` reads at scrape time; holds the server weakly, so a dropped server reports zeros.
struct Figures(std::sync::Weak<Hub>);

impl TransportSource for Figures {
    fn figures(&self) -> TransportFigures {
        let Some(hub) = self.0.upgrade() else { return TransportFigures::default() };
        let held = hub.runtime.with_responder(|r| r.held_stats());
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
struct InFlightPermits {
    _count: tokio::sync::OwnedSemaphorePermit,
    _bytes: tokio::sync::OwnedSemaphorePermit,
    _total: tokio::sync::OwnedSemaphorePermit,
}

/// A message's share of a byte budget (clamped so that one message never waits for more than the whole budget).
fn byte_cost(len: usize, budget: usize) -> u32 {
    u32::try_from(len.clamp(1, budget.clamp(1, MAX_OUTBOUND_BUDGET))).unwrap_or(u32::MAX)
}

/// Connection ids are unique in the process, so that several servers can share one runtime.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

fn lock(m: &Mutex<Conns>) -> MutexGuard<'_, Conns> {
    // Every mutation of the map completes before anything that could panic; recover from poisoning.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The WebSocket binding's server: serves a [`DelegateRuntime`] over any number of connections. Cheap to clone.
///
/// [`WsServer::router`] gives the axum routes (`GET /ldp/ws`); [`WsServer::serve_connection`] runs one connection
/// over any sink and stream of [`Message`]s.
#[derive(Clone)]
pub struct WsServer {
    hub: Arc<Hub>,
}

impl std::fmt::Debug for WsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsServer")
            .field("config", &self.hub.config)
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

impl WsServer {
    /// A server for `runtime` with `config`.
    pub fn new(runtime: DelegateRuntime, config: WsServerConfig) -> Self {
        let auth = BearerAuth::from_map(&config.tokens);
        let (shutdown, _) = watch::channel(false);
        let in_flight_bytes = Arc::new(Semaphore::new(config.max_in_flight_bytes_total.clamp(1, MAX_OUTBOUND_BUDGET)));
        let burst =
            config.max_inbound_rate.max(u64::try_from(config.max_message).unwrap_or(u64::MAX).saturating_mul(2));
        let inbound = InboundBudget::new(config.max_inbound_rate, burst);
        let held = HeldLimits { ttl: config.held_ttl, ..config.held };
        runtime.with_responder(|r| r.set_held_limits(held));
        Self {
            hub: Arc::new(Hub {
                runtime,
                config,
                auth,
                conns: Mutex::new(Conns::new()),
                shutdown,
                open: AtomicUsize::new(0),
                in_flight_bytes,
                inbound,
                received: AtomicU64::new(0),
                sent: AtomicU64::new(0),
                metrics: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Reports this server's connections, frames and held answers, and the usage of the results it answers, in the
    /// HTTP server's `/metrics` (`ldp_ws_*`, `ldp_held_*`, `ldp_backend_*`). Only the first call counts.
    pub fn report_to(&self, metrics: &HttpMetrics) {
        if self.hub.metrics.set(metrics.clone()).is_ok() {
            metrics.add_source(Arc::new(Figures(Arc::downgrade(&self.hub))));
        }
    }

    /// The runtime served.
    pub fn runtime(&self) -> &DelegateRuntime {
        &self.hub.runtime
    }

    /// The configuration.
    pub fn config(&self) -> &WsServerConfig {
        &self.hub.config
    }

    /// Connections currently open.
    pub fn connections(&self) -> usize {
        self.hub.open.load(Ordering::Relaxed)
    }

    /// The task answers kept for resume (by the runtime's responder, for every binding that serves it): how many,
    /// how many bytes, and how many were dropped.
    pub fn held_stats(&self) -> HeldStats {
        self.hub.runtime.with_responder(|r| r.held_stats())
    }

    /// Bytes of inbound messages in handling across every connection now (bounded by
    /// [`WsServerConfig::max_in_flight_bytes_total`]).
    pub fn in_flight_bytes(&self) -> usize {
        let budget = self.hub.config.max_in_flight_bytes_total.clamp(1, MAX_OUTBOUND_BUDGET);
        budget.saturating_sub(self.hub.in_flight_bytes.available_permits())
    }

    /// Closes every connection with 1001 (going away). Their sessions are suspended, and resume on another server
    /// sharing the runtime, or on this one if it keeps running.
    pub fn shutdown(&self) {
        self.hub.shutdown.send_replace(true);
    }

    /// `GET /ldp/ws`, mergeable into any router (for example the HTTP binding's: `router(state).merge(ws)`). When a
    /// [`PeerContext`] extension is present (set by the HTTP binding's bearer middleware when the route is added with
    /// its `router_with`) it is used; otherwise the upgrade request is authenticated with this server's tokens.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let server = self.clone();
        Router::new().route(
            WS_PATH,
            get(
                move |address: Option<Extension<ConnectInfo<SocketAddr>>>,
                      peer: Option<Extension<PeerContext>>,
                      headers: HeaderMap,
                      ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>| {
                    let address = address.map(|Extension(ConnectInfo(a))| a);
                    upgrade(server.clone(), address, peer, headers, ws)
                },
            ),
        )
    }

    /// [`WsServer::router`] plus the identity card at `/.well-known/ldp-identity` and `/ldp/identity` (what a
    /// client's `identity()` fetches): everything a server that speaks only WebSocket needs.
    pub fn standalone_router(&self) -> Router {
        let card = serde_json::to_vec(&self.hub.runtime.card()).unwrap_or_else(|_| b"{}".to_vec());
        let card = axum::body::Bytes::from(card);
        let get_card = move || {
            let card = card.clone();
            async move { ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], card) }
        };
        Router::new()
            .route(WELL_KNOWN_IDENTITY, get(get_card.clone()))
            .route(IDENTITY, get(get_card))
            .merge(self.router())
    }

    /// Runs one connection until it ends: reads envelopes from `stream`, answers them on `sink`. `peer` is what the
    /// upgrade established about the peer (its connection id is assigned here).
    ///
    /// Its inbound messages are charged to [`WsServerConfig::max_inbound_rate`] under the peer's principal, or, for
    /// an unauthenticated peer, under this connection alone (the upgrade route charges them to the peer's address).
    pub async fn serve_connection<Si, St>(&self, peer: PeerContext, sink: Si, stream: St) -> ConnectionEnd
    where
        Si: Sink<Message> + Unpin + Send,
        Si::Error: Display,
        St: Stream<Item = Result<Message, WireError>> + Unpin + Send,
    {
        self.serve_connection_as(peer, None, sink, stream).await
    }

    /// [`serve_connection`](Self::serve_connection), charging an unauthenticated peer's inbound bytes to `address`.
    async fn serve_connection_as<Si, St>(
        &self,
        peer: PeerContext,
        address: Option<SocketAddr>,
        sink: Si,
        stream: St,
    ) -> ConnectionEnd
    where
        Si: Sink<Message> + Unpin + Send,
        Si::Error: Display,
        St: Stream<Item = Result<Message, WireError>> + Unpin + Send,
    {
        let hub = &self.hub;
        let conn = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        let budget_key: Box<str> = match (peer.principal(), address) {
            (Some(principal), _) => format!("principal:{principal}").into(),
            (None, Some(address)) => format!("address:{}", address.ip()).into(),
            (None, None) => format!("connection:{conn}").into(),
        };
        let peer = PeerContext { connection: Some(conn), ..peer };
        let (outbound, mut out_rx) = Outbound::new(&hub.config);
        let stalled = Arc::clone(&outbound.stalled);
        lock(&hub.conns).insert(conn, outbound.clone());
        hub.open.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(conn, "websocket connection opened");
        // Task answers handed to the socket that may not have reached the peer (see `Unconfirmed`).
        let mut unconfirmed = Unconfirmed::new(hub.config.max_outbound_bytes);
        let end = {
            let reader = read_loop(hub.clone(), peer, conn, &budget_key, stream, outbound);
            let writer = write_loop(&hub.config, sink, &mut out_rx, &mut unconfirmed, &hub.sent);
            tokio::pin!(reader, writer);
            tokio::select! {
                () = stalled.notified() => ConnectionEnd::WriteTimeout,
                end = &mut reader => {
                    if !matches!(end, ConnectionEnd::PeerClosed(_) | ConnectionEnd::Failed(_)) {
                        // The reader queued an error and a close frame; give the writer a moment to send them.
                        let _ = tokio::time::timeout(FLUSH_TIMEOUT, &mut writer).await;
                    }
                    end
                }
                end = &mut writer => end,
            }
        };
        tracing::debug!(conn, ?end, "websocket connection ended");
        hub.disconnect(conn, out_rx, unconfirmed.into_held(&end));
        end
    }
}

impl Hub {
    /// Forgets the connection, suspends its sessions, and hands its task answers that may not have reached the peer
    /// (`unconfirmed`) and those still queued to their sessions' new connections or to the machine to hold.
    fn disconnect(
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
        self.runtime.with_responder(|r| r.suspend_connection(conn));
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
    fn reroute(&self, reroute: Reroute, text: String, from: u64) {
        let target = self.runtime.with_responder(|r| r.connection_of(&reroute.session)).filter(|c| *c != from);
        let outbound = target.and_then(|c| lock(&self.conns).get(&c).cloned());
        let (text, reroute) = match outbound {
            Some(outbound) => match outbound.try_text(text, reroute) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => (text, reroute),
        };
        let now = self.runtime.now();
        self.runtime.with_responder(|r| r.hold(now, &reroute.session, &reroute.task_id, text));
    }

    /// Writes the answers the session machine held for `session` while it was away to `out`, each once (a
    /// TASK_FAILED `RESULT_NOT_KEPT` for every task whose answer was dropped, then the answers kept), before the
    /// answer to the message that brought the session back.
    async fn flush(&self, session: &str, conn: u64, out: &Outbound) {
        let held = self.runtime.with_responder(|r| r.take_held(session));
        for answer in held {
            let reroute = Reroute { session: session.into(), task_id: answer.task_id().into() };
            if let Err((text, Some(reroute))) = out.text(answer.into_json(), Some(reroute)).await {
                self.reroute(reroute, text, conn);
            }
        }
    }
}

async fn send_close(out: &Outbound, error: Option<String>, close: CloseFrame) {
    if let Some(text) = error {
        let _ = out.text(text, None).await;
    }
    out.close(close).await;
}

fn too_large(limit: usize) -> LdpError {
    LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("message larger than {limit} bytes")).with_retryable(false)
}

/// Resolves once the server shuts down.
async fn shutting_down(rx: &mut watch::Receiver<bool>) {
    loop {
        let down = *rx.borrow_and_update();
        if down {
            return;
        }
        if rx.changed().await.is_err() {
            // The server is gone without a shutdown: nothing will ever say so.
            std::future::pending::<()>().await;
        }
    }
}

async fn read_loop<St>(
    hub: Arc<Hub>,
    peer: PeerContext,
    conn: u64,
    budget_key: &str,
    mut stream: St,
    out: Outbound,
) -> ConnectionEnd
where
    St: Stream<Item = Result<Message, WireError>> + Unpin + Send,
{
    let cfg = &hub.config;
    let permits = Arc::new(Semaphore::new(cfg.max_in_flight.max(1)));
    let byte_budget = cfg.max_in_flight_bytes.clamp(1, MAX_OUTBOUND_BUDGET);
    let bytes = Arc::new(Semaphore::new(byte_budget));
    let mut shutdown = hub.shutdown.subscribe();
    loop {
        // Backpressure: no permit (all handlers busy, typically waiting for the outbound queue) means no reading.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return ConnectionEnd::Failed(WireError::Io("permits closed".into()));
        };
        let next = tokio::select! {
            next = tokio::time::timeout(cfg.idle_timeout, stream.next()) => next,
            () = shutting_down(&mut shutdown) => {
                send_close(&out, None, CloseFrame::new(close_code::GOING_AWAY, "server shutting down")).await;
                return ConnectionEnd::Shutdown;
            }
        };
        let message = match next {
            Err(_) => {
                send_close(
                    &out,
                    None,
                    CloseFrame::new(close_code::GOING_AWAY, "nothing received within the idle timeout"),
                )
                .await;
                return ConnectionEnd::IdleTimeout;
            }
            Ok(None) => return ConnectionEnd::PeerClosed(None),
            Ok(Some(Err(WireError::TooLarge { .. }))) => {
                let error = error_frame(&too_large(cfg.max_message), None);
                send_close(&out, Some(error), CloseFrame::new(close_code::TOO_BIG, "message too large")).await;
                return ConnectionEnd::TooLarge;
            }
            Ok(Some(Err(e))) => return ConnectionEnd::Failed(e),
            Ok(Some(Ok(m))) => m,
        };
        match message {
            Message::Text(text) if text.len() > cfg.max_message => {
                let id = Head::peek(&text).map(|h| h.message_id);
                let error = error_frame(&too_large(cfg.max_message), id.as_deref());
                send_close(&out, Some(error), CloseFrame::new(close_code::TOO_BIG, "message too large")).await;
                return ConnectionEnd::TooLarge;
            }
            Message::Text(text) => {
                hub.received.fetch_add(1, Ordering::Relaxed);
                // Backpressure by bytes: wait (not reading further) until this connection's and the server's
                // messages in handling leave room for this one.
                let own = bytes.clone().acquire_many_owned(byte_cost(text.len(), byte_budget));
                let total = hub
                    .in_flight_bytes
                    .clone()
                    .acquire_many_owned(byte_cost(text.len(), cfg.max_in_flight_bytes_total));
                let (Ok(own), Ok(total)) = (own.await, total.await) else {
                    return ConnectionEnd::Failed(WireError::Io("permits closed".into()));
                };
                let held = InFlightPermits { _count: permit, _bytes: own, _total: total };
                let wait = hub.inbound.charge(budget_key, text.len());
                tokio::spawn(handle_text(hub.clone(), peer.clone(), conn, out.clone(), text, held));
                // Over the principal's byte rate: the socket is left unread until its debt drains.
                if !wait.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = shutting_down(&mut shutdown) => {
                            send_close(&out, None, CloseFrame::new(close_code::GOING_AWAY, "server shutting down")).await;
                            return ConnectionEnd::Shutdown;
                        }
                    }
                }
            }
            Message::Binary(_) => {
                let error = LdpError::runtime(
                    codes::MALFORMED_MESSAGE,
                    "binary frames are not accepted: send each envelope as JSON in a text frame",
                )
                .with_retryable(false);
                let _ = out.text(error_frame(&error, None), None).await;
            }
            Message::Ping(_) | Message::Pong(_) => {}
            Message::Close(frame) => return ConnectionEnd::PeerClosed(frame.map(|f| f.code)),
        }
    }
}

/// Writes the connection's queue to `sink`, keeping a copy of each task answer in `unconfirmed` (which the caller
/// holds for the resume when the connection ends) and counting the frames in `sent`.
async fn write_loop<Si>(
    cfg: &WsServerConfig,
    mut sink: Si,
    out: &mut mpsc::Receiver<Out>,
    unconfirmed: &mut Unconfirmed,
    sent: &AtomicU64,
) -> ConnectionEnd
where
    Si: Sink<Message> + Unpin + Send,
    Si::Error: Display,
{
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + cfg.ping_interval, cfg.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stalled = || ConnectionEnd::WriteTimeout;
    let write_timeout = cfg.write_timeout;
    loop {
        let first = tokio::select! {
            item = out.recv() => match item {
                Some(item) => item,
                None => return ConnectionEnd::PeerClosed(None),
            },
            _ = ping.tick() => {
                match tokio::time::timeout(write_timeout, sink.send(Message::Ping(Vec::new()))).await {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => return ConnectionEnd::Failed(WireError::Io(e.to_string())),
                    Err(_) => return stalled(),
                }
            }
        };
        // Feed a batch, then flush once: many sessions answering at once cost one flush, not one each.
        let mut item = Some(first);
        let mut fed = 0;
        while let Some(next) = item.take() {
            let (message, last) = match next {
                Out::Text { text, reroute, .. } => {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if let Some(reroute) = reroute {
                        unconfirmed.fed(&text, reroute);
                    }
                    (Message::Text(text), false)
                }
                Out::Close(frame) => (Message::Close(Some(frame)), true),
            };
            match tokio::time::timeout(write_timeout, sink.feed(message)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return ConnectionEnd::Failed(WireError::Io(e.to_string())),
                Err(_) => return stalled(),
            }
            if last {
                if let Ok(Ok(())) = tokio::time::timeout(write_timeout, sink.flush()).await {
                    unconfirmed.flushed();
                }
                return ConnectionEnd::PeerClosed(None);
            }
            fed += 1;
            if fed < WRITE_BATCH {
                item = out.try_recv().ok();
            }
        }
        match tokio::time::timeout(write_timeout, sink.flush()).await {
            Ok(Ok(())) => unconfirmed.flushed(),
            Ok(Err(e)) => return ConnectionEnd::Failed(WireError::Io(e.to_string())),
            Err(_) => return stalled(),
        }
    }
}

/// Handles one envelope on a task of its own, so a long task does not hold up the connection's other sessions.
///
/// Its span is a root of its own whose parent is the caller's span when the frame names one in its `traceparent`
/// member (absent or malformed: a fresh trace).
async fn handle_text(
    hub: Arc<Hub>,
    peer: PeerContext,
    conn: u64,
    out: Outbound,
    text: String,
    permits: InFlightPermits,
) {
    let head = Head::peek(&text).unwrap_or_default();
    let span = tracing::info_span!(
        parent: None,
        "ldp.message",
        otel.name = format!("WS {WS_PATH}"),
        otel.kind = "server",
        path = WS_PATH,
    );
    ldp_transport_http::trace_context::adopt_remote_parent(
        &span,
        head.traceparent.as_deref(),
        head.tracestate.as_deref(),
    );
    handle_head(hub, peer, conn, out, text, head, permits).instrument(span).await;
}

async fn handle_head(
    hub: Arc<Hub>,
    peer: PeerContext,
    conn: u64,
    out: Outbound,
    text: String,
    head: Head,
    _permits: InFlightPermits,
) {
    let id = head.message_id.as_str();
    let is_submit = head.kind == "TASK_SUBMIT";
    let response = if is_submit {
        let (tx, mut updates) = mpsc::channel::<Envelope>(UPDATE_QUEUE);
        let job = hub.runtime.handle(&peer, text.as_bytes(), Some(tx));
        tokio::pin!(job);
        let response = loop {
            tokio::select! {
                biased;
                response = &mut job => break response,
                Some(update) = updates.recv() => push_update(&out, update, id).await,
            }
        };
        while let Ok(update) = updates.try_recv() {
            push_update(&out, update, id).await;
        }
        response
    } else {
        hub.runtime.handle(&peer, text.as_bytes(), None).await
    };
    let open = lock(&hub.conns).contains_key(&conn);
    if !open {
        // The connection ended while this message was being handled, and handling it may have made its session
        // live on that connection again: suspend it, so later results are held for the resume.
        hub.runtime.with_responder(|r| r.suspend_connection(conn));
    }
    let (accepted, reply) = match response {
        RuntimeResponse::Reply(env) => (true, Some(Ok(env))),
        // A TASK_SUBMIT whose result the machine holds: its session was suspended meanwhile; resume delivers it.
        RuntimeResponse::Accepted if is_submit => (true, None),
        RuntimeResponse::Accepted => (true, Some(Err(accepted_frame(id)))),
        RuntimeResponse::Refused(Refusal { reply: Some(env), .. }) => (false, Some(Ok(env))),
        RuntimeResponse::Refused(Refusal { error, reply: None }) => (false, Some(Err(error_frame(&error, Some(id))))),
    };
    let session = match &reply {
        Some(Ok(env)) if !env.session_id.is_empty() => env.session_id.clone(),
        _ => head.session_id.clone(),
    };
    let (reply_kind, task_id) = match &reply {
        Some(Ok(env)) => (env.body.type_name().to_owned(), env.body.task_id().unwrap_or_default().to_owned()),
        _ => (String::new(), String::new()),
    };
    if open && accepted && !session.is_empty() && !(is_submit && reply.is_none()) && reply_kind != "SESSION_CLOSE" {
        // The session is live on this connection: answers the machine held while it was away go first, so they
        // precede the answer to the message that resumed it (a closed session's were forgotten with it).
        hub.flush(&session, conn, &out).await;
    }
    let Some(reply) = reply else { return };
    if let (Some(metrics), Ok(env)) = (hub.metrics.get(), &reply) {
        metrics.record_answer(env);
    }
    let text = match reply {
        Ok(env) => match envelope_frame(env, Some(id)) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a reply");
                error_frame(&LdpError::runtime(codes::EXECUTION_FAILED, "internal error"), Some(id))
            }
        },
        Err(control) => control,
    };
    let reroute = (is_submit && is_task_end(&reply_kind) && !session.is_empty())
        .then(|| Reroute { session: session.as_str().into(), task_id: task_id.into() });
    if let Err((text, Some(reroute))) = out.text(text, reroute).await {
        hub.reroute(reroute, text, conn);
    }
}

async fn push_update(out: &Outbound, update: Envelope, in_reply_to: &str) {
    match envelope_frame(update, Some(in_reply_to)) {
        // Progress is best-effort: a connection that went away loses it.
        Ok(text) => drop(out.text(text, None).await),
        Err(e) => tracing::warn!(error = %e, "cannot encode a TASK_UPDATE"),
    }
}

fn json_error(status: StatusCode, error: &LdpError) -> Response {
    let mut resp = (status, error_frame(error, None)).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

async fn upgrade(
    server: WsServer,
    address: Option<SocketAddr>,
    peer: Option<Extension<PeerContext>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    // A web page's cross-origin upgrade is refused before anything else: browsers let any page open a WebSocket to
    // any host (no preflight), so without this a page could drive a server on the visitor's machine.
    if let Err(origin) = check_origin(&headers, &server.hub.config.allowed_origins) {
        let error = LdpError::security(
            codes::TRUST_VIOLATION,
            format!(
                "cross-origin WebSocket upgrade from {origin:?} refused; the server must list the origin as allowed"
            ),
        )
        .with_retryable(false);
        return json_error(StatusCode::FORBIDDEN, &error);
    }
    // Authenticate before anything else: an unauthenticated peer learns nothing, not even whether it upgraded right.
    let peer = match peer {
        Some(Extension(peer)) => peer,
        None => match server.hub.auth.authenticate(&headers) {
            Ok(peer) => peer,
            Err(e) => return e.into_response(),
        },
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            let error = LdpError::runtime(
                codes::MALFORMED_MESSAGE,
                format!("{WS_PATH} expects a WebSocket upgrade request: {rejection}"),
            )
            .with_retryable(false);
            return json_error(rejection.status(), &error);
        }
    };
    // The library's own limit is a backstop above ours, so that an oversize message normally arrives whole and is
    // answered with its message id.
    let limit = server.hub.config.max_message;
    let hard = limit.saturating_mul(2).max(limit.saturating_add(64 * 1024));
    let buffer = server.hub.config.io_buffer.max(1024);
    ws.max_message_size(hard).max_frame_size(hard).read_buffer_size(buffer).write_buffer_size(buffer).on_upgrade(
        move |socket| async move {
            let (sink, stream) = socket.split();
            let sink = sink.with(|m: Message| futures::future::ready(Ok::<_, axum::Error>(to_axum(m))));
            let stream = stream.map(move |item| from_axum(item, hard));
            server.serve_connection_as(peer, address, sink, stream).await;
        },
    )
}

/// Allows an upgrade without `Origin` (not from a browser), from the server's own origin (the origin's host and
/// port are the `Host` the request was sent to), or from a listed origin; otherwise returns the refused origin.
fn check_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), String> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let Ok(origin) = origin.to_str() else { return Err("<not text>".to_owned()) };
    let origin = origin.trim().trim_end_matches('/');
    if allowed.iter().any(|a| a == "*" || a.trim().trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(str::trim);
    let authority = origin.split_once("://").map(|(_, rest)| rest);
    match (authority, host) {
        (Some(authority), Some(host)) if !host.is_empty() && authority.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(origin.to_owned()),
    }
}

fn to_axum(m: Message) -> aws::Message {
    match m {
        Message::Text(t) => aws::Message::Text(t.into()),
        Message::Binary(b) => aws::Message::Binary(b.into()),
        Message::Ping(b) => aws::Message::Ping(b.into()),
        Message::Pong(b) => aws::Message::Pong(b.into()),
        Message::Close(f) => aws::Message::Close(f.map(|f| aws::CloseFrame { code: f.code, reason: f.reason.into() })),
    }
}

fn from_axum(item: Result<aws::Message, axum::Error>, limit: usize) -> Result<Message, WireError> {
    match item {
        Ok(aws::Message::Text(t)) => Ok(Message::Text(t.as_str().to_owned())),
        Ok(aws::Message::Binary(b)) => Ok(Message::Binary(b.to_vec())),
        Ok(aws::Message::Ping(b)) => Ok(Message::Ping(b.to_vec())),
        Ok(aws::Message::Pong(b)) => Ok(Message::Pong(b.to_vec())),
        Ok(aws::Message::Close(f)) => {
            Ok(Message::Close(f.map(|f| CloseFrame { code: f.code, reason: f.reason.as_str().to_owned() })))
        }
        Err(e) => Err(wire_error(&e.to_string(), limit)),
    }
}

/// A WebSocket library error as a [`WireError`]. tungstenite reports its size limits as "Message too long" (and
/// "Space limit exceeded" for buffers); axum hides the typed error, so its text is what is left to go by.
pub(crate) fn wire_error(detail: &str, limit: usize) -> WireError {
    if detail.contains("Message too long") || detail.contains("Space limit exceeded") {
        WireError::TooLarge { limit }
    } else {
        WireError::Io(detail.to_owned())
    }
}

/// The routes of a WebSocket server for `runtime`: `GET /ldp/ws` only, ready to merge into the HTTP binding's router
/// (`ldp_transport_http::router(state).merge(ws_router(runtime, config))`) or any other.
pub fn ws_router(runtime: DelegateRuntime, config: WsServerConfig) -> Router {
    WsServer::new(runtime, config).router()
}

/// Serves the WebSocket binding alone (with the identity card, see [`WsServer::standalone_router`]) on `listener`
/// until `shutdown` resolves, then closes every connection with 1001. Also reaps expired sessions while it runs.
/// Connections are accepted with the HTTP binding's default [`ConnectionLimits`](ldp_transport_http::ConnectionLimits).
pub async fn serve_ws(
    listener: TcpListener,
    runtime: DelegateRuntime,
    config: WsServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = WsServer::new(runtime.clone(), config);
    let app = server.standalone_router();
    let closing = server.clone();
    // The HTTP binding's accept loop: its connection cap and header and idle timeouts cover the upgrade requests.
    let result = ldp_transport_http::serve_router(listener, runtime, app, async move {
        shutdown.await;
        closing.shutdown();
    })
    .await;
    server.shutdown();
    result
}

/// A server started with [`spawn_ws`].
#[derive(Debug)]
pub struct WsServerHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    join: JoinHandle<std::io::Result<()>>,
}

impl WsServerHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://<addr>/ldp/ws`.
    pub fn url(&self) -> String {
        format!("ws://{}{WS_PATH}", self.addr)
    }

    /// Closes every connection and stops the server.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.join).await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}

/// Binds `addr` (use `127.0.0.1:0` for a free port) and runs [`serve_ws`] on a background task.
pub async fn spawn_ws(
    addr: impl tokio::net::ToSocketAddrs,
    runtime: DelegateRuntime,
    config: WsServerConfig,
) -> std::io::Result<WsServerHandle> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let join = tokio::spawn(serve_ws(listener, runtime, config, async move {
        let _ = stopped.await;
    }));
    Ok(WsServerHandle { addr, stop: Some(stop), join })
}

#[cfg(test)]
mod tests {
    //! The connection loop over plain channels: no sockets, no WebSocket library.
    use std::sync::Arc;
    use std::task::Poll;

    use futures::channel::mpsc as fmpsc;
    use ldp_session::runtime::EchoDelegate;
    use ldp_session::{Responder, ResponderConfig, SeededIds, SessionState, SystemClock};
    use ldp_types::{Capability, DelegateId, IdentityCard};
    use serde_json::{Value, json};

    use super::*;

    fn runtime() -> DelegateRuntime {
        let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "none", "1");
        card.capabilities.push(Capability::new("echo"));
        let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(1)));
        DelegateRuntime::new(responder, Arc::new(EchoDelegate))
    }

    fn envelope(id: &str, session: &str, body: Value) -> String {
        json!({
            "message_id": id, "session_id": session, "from": "ldp:delegate:c", "to": "ldp:delegate:echo",
            "body": body, "payload_mode": "text", "timestamp": "2026-03-09T10:00:00Z", "provenance": null,
        })
        .to_string()
    }

    fn hello(id: &str) -> String {
        envelope(id, "", json!({"type": "HELLO", "delegate_id": "ldp:delegate:c", "supported_modes": ["text"]}))
    }

    struct Peer {
        to_server: fmpsc::Sender<Result<Message, WireError>>,
        from_server: fmpsc::Receiver<Message>,
        done: tokio::task::JoinHandle<ConnectionEnd>,
    }

    impl Peer {
        fn start(server: &WsServer, sink_buffer: usize) -> Peer {
            let (to_server, inbound) = fmpsc::channel(4);
            let (outbound, from_server) = fmpsc::channel(sink_buffer);
            let server = server.clone();
            let done =
                tokio::spawn(async move { server.serve_connection(PeerContext::default(), outbound, inbound).await });
            Peer { to_server, from_server, done }
        }

        async fn send(&mut self, m: Message) {
            self.to_server.send(Ok(m)).await.unwrap();
        }

        async fn next(&mut self) -> Message {
            loop {
                let m = tokio::time::timeout(Duration::from_secs(5), self.from_server.next()).await.unwrap().unwrap();
                if !matches!(m, Message::Ping(_)) {
                    return m;
                }
            }
        }

        async fn next_json(&mut self) -> Value {
            match self.next().await {
                Message::Text(t) => serde_json::from_str(&t).unwrap(),
                other => panic!("expected text, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn answers_are_correlated_and_bad_frames_get_typed_errors() {
        let server = WsServer::new(runtime(), WsServerConfig { max_message: 1000, ..Default::default() });
        let mut peer = Peer::start(&server, 16);
        peer.send(Message::Binary(vec![0xff])).await;
        assert_eq!(peer.next_json().await["error"]["code"], codes::MALFORMED_MESSAGE);
        peer.send(Message::Text("garbage".into())).await;
        assert_eq!(peer.next_json().await["error"]["code"], codes::MALFORMED_MESSAGE);
        peer.send(Message::Text(hello("h1"))).await;
        let v = peer.next_json().await;
        assert_eq!((v["body"]["type"].as_str(), v["in_reply_to"].as_str()), (Some("CAPABILITY_MANIFEST"), Some("h1")));
        // An ATTESTATION outside a session is refused in-protocol; in a session it would get {"accepted": true}.
        let attestation = envelope("a1", "nope", json!({"type": "ATTESTATION", "claim": {}, "evidence": null}));
        peer.send(Message::Text(attestation)).await;
        let v = peer.next_json().await;
        assert_eq!(v["in_reply_to"], "a1");
        assert_eq!(v["body"]["error"]["code"], codes::SESSION_NOT_FOUND);
        // Oversize: error naming the message, close 1009, the loop ends.
        peer.send(Message::Text(format!("{{\"message_id\":\"big\",\"pad\":\"{}\"}}", "x".repeat(2000)))).await;
        let v = peer.next_json().await;
        assert_eq!(
            (v["error"]["code"].as_str(), v["in_reply_to"].as_str()),
            (Some(codes::MESSAGE_TOO_LARGE), Some("big"))
        );
        assert_eq!(peer.next().await, Message::Close(Some(CloseFrame::new(close_code::TOO_BIG, "message too large"))));
        assert_eq!(peer.done.await.unwrap(), ConnectionEnd::TooLarge);
        assert_eq!(server.connections(), 0);
    }

    #[tokio::test]
    async fn the_library_size_limit_is_answered_too() {
        let server = WsServer::new(runtime(), WsServerConfig::default());
        let mut peer = Peer::start(&server, 16);
        peer.to_server.send(Err(WireError::TooLarge { limit: 10 })).await.unwrap();
        assert_eq!(peer.next_json().await["error"]["code"], codes::MESSAGE_TOO_LARGE);
        assert!(matches!(peer.next().await, Message::Close(Some(CloseFrame { code: 1009, .. }))));
        assert_eq!(peer.done.await.unwrap(), ConnectionEnd::TooLarge);
    }

    #[tokio::test]
    async fn a_slow_reader_stops_the_server_reading_instead_of_growing_memory() {
        let config = WsServerConfig { outbound_queue: 2, max_in_flight: 2, ..Default::default() };
        let server = WsServer::new(runtime(), config);
        let mut peer = Peer::start(&server, 0);
        // Nobody reads the server's answers. Offer 200 messages without waiting; the server must stop taking them.
        let mut offered = 0;
        for i in 0..200 {
            if peer.to_server.try_send(Ok(Message::Text(hello(&format!("m{i}"))))).is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if peer.to_server.try_send(Ok(Message::Text(hello(&format!("m{i}"))))).is_err() {
                    break;
                }
            }
            offered += 1;
        }
        // In flight at most: 2 handlers + 2 queued + 1 being written + the channels' own small buffers.
        assert!(offered < 20, "the server kept reading: {offered} messages taken");
        // Once the peer reads again, every taken message is answered.
        let mut answered = 0;
        while answered < offered {
            let v = peer.next_json().await;
            assert_eq!(v["body"]["type"], "CAPABILITY_MANIFEST");
            answered += 1;
        }
    }

    #[tokio::test]
    async fn a_silent_peer_is_dead_and_its_sessions_are_suspended() {
        let rt = runtime();
        let config = WsServerConfig {
            ping_interval: Duration::from_millis(20),
            idle_timeout: Duration::from_millis(300),
            ..Default::default()
        };
        let server = WsServer::new(rt.clone(), config);
        let (mut to_server, inbound) = fmpsc::channel(4);
        let (outbound, mut from_server) = fmpsc::channel(64);
        let done = {
            let server = server.clone();
            tokio::spawn(async move { server.serve_connection(PeerContext::default(), outbound, inbound).await })
        };
        let propose = envelope("p1", "", json!({"type": "SESSION_PROPOSE", "config": {}}));
        to_server.send(Ok(Message::Text(propose))).await.unwrap();
        let mut session = String::new();
        let mut pings = 0;
        let mut close = None;
        while let Some(m) = from_server.next().await {
            match m {
                Message::Text(t) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    session = v["body"]["session_id"].as_str().unwrap().to_owned();
                }
                Message::Ping(_) => pings += 1,
                Message::Close(f) => close = f,
                other => panic!("{other:?}"),
            }
        }
        assert!(pings >= 3, "pings: {pings}");
        assert_eq!(close.map(|f| f.code), Some(close_code::GOING_AWAY));
        assert_eq!(done.await.unwrap(), ConnectionEnd::IdleTimeout);
        assert_eq!(rt.with_responder(|r| r.session_state(&session)), Some(SessionState::Suspended));
    }

    #[test]
    fn origins_are_checked_against_host_and_the_allow_list() {
        let headers = |origin: Option<&str>, host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
            }
            h
        };
        let none: &[String] = &[];
        assert!(check_origin(&headers(None, "127.0.0.1:8090"), none).is_ok());
        assert!(check_origin(&headers(Some("http://127.0.0.1:8090"), "127.0.0.1:8090"), none).is_ok());
        assert!(check_origin(&headers(Some("HTTPS://Localhost:8090/"), "localhost:8090"), none).is_ok());
        for bad in ["http://evil.example", "null", "http://127.0.0.1:8091", "http://127.0.0.1", "127.0.0.1:8090"] {
            assert!(check_origin(&headers(Some(bad), "127.0.0.1:8090"), none).is_err(), "{bad}");
        }
        let allowed = vec!["https://app.example".to_owned()];
        assert!(check_origin(&headers(Some("https://app.example"), "127.0.0.1:8090"), &allowed).is_ok());
        assert!(check_origin(&headers(Some("https://app.example.evil"), "127.0.0.1:8090"), &allowed).is_err());
        assert!(check_origin(&headers(Some("http://anything"), "h"), &["*".to_owned()]).is_ok());
    }

    /// A sink that delivers the frames of its first `flushes` flushes and then never completes a flush: a socket
    /// whose peer stopped reading after the bytes left the process's buffer.
    struct StallingSink {
        flushes: usize,
        buffered: Vec<Message>,
        delivered: Arc<std::sync::Mutex<Vec<Message>>>,
    }

    impl Sink<Message> for StallingSink {
        type Error = std::convert::Infallible;

        fn poll_ready(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(mut self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            self.buffered.push(item);
            Ok(())
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            if self.flushes == 0 {
                return Poll::Pending;
            }
            self.flushes -= 1;
            let frames = std::mem::take(&mut self.buffered);
            self.delivered.lock().unwrap().extend(frames);
            Poll::Ready(Ok(()))
        }

        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            self.poll_flush(cx)
        }
    }

    /// A write timeout ends the connection: the answer fed but never flushed, and the one flushed just before (which
    /// the kernel may drop with the connection's reset), are both held for the resume.
    #[tokio::test(start_paused = true)]
    async fn answers_the_peer_may_not_have_read_when_its_writes_stall_are_held_for_the_resume() {
        let config = WsServerConfig {
            write_timeout: Duration::from_secs(1),
            ping_interval: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3600),
            ..Default::default()
        };
        let server = WsServer::new(runtime(), config);
        let delivered = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = StallingSink { flushes: 2, buffered: Vec::new(), delivered: Arc::clone(&delivered) };
        let (mut to_server, inbound) = fmpsc::channel(4);
        let done = {
            let server = server.clone();
            tokio::spawn(async move { server.serve_connection(PeerContext::default(), sink, inbound).await })
        };
        let delivered_after = |n: usize| {
            let delivered = Arc::clone(&delivered);
            async move {
                while delivered.lock().unwrap().len() < n {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        let propose = envelope("p1", "", json!({"type": "SESSION_PROPOSE", "config": {}}));
        to_server.send(Ok(Message::Text(propose))).await.unwrap();
        delivered_after(1).await;
        let accept: Value = match &delivered.lock().unwrap()[0] {
            Message::Text(t) => serde_json::from_str(t).unwrap(),
            other => panic!("{other:?}"),
        };
        let session = accept["body"]["session_id"].as_str().unwrap().to_owned();
        let submit = |id: &str, task: &str| {
            envelope(id, &session, json!({"type": "TASK_SUBMIT", "task_id": task, "skill": "echo", "input": task}))
        };
        // t1's result is flushed (handed to the kernel); t2's is fed, and its flush never completes.
        to_server.send(Ok(Message::Text(submit("m1", "t1")))).await.unwrap();
        delivered_after(2).await;
        to_server.send(Ok(Message::Text(submit("m2", "t2")))).await.unwrap();
        assert_eq!(done.await.unwrap(), ConnectionEnd::WriteTimeout);
        assert_eq!(delivered.lock().unwrap().len(), 2, "t2's result never left the process");
        assert_eq!(server.held_stats().results, 2, "both answers the peer may not have read are held");

        // The resume delivers them before the answer to the message that resumed the session.
        let mut peer = Peer::start(&server, 16);
        peer.send(Message::Text(submit("m3", "probe"))).await;
        let mut resumed = Vec::new();
        for _ in 0..2 {
            let v = peer.next_json().await;
            assert_eq!(v["body"]["type"], "TASK_RESULT", "{v}");
            resumed.push(v["body"]["task_id"].as_str().unwrap().to_owned());
        }
        resumed.sort();
        assert_eq!(resumed, ["t1", "t2"]);
        assert_eq!(peer.next_json().await["body"]["task_id"], "probe");
        assert_eq!(server.held_stats().results, 0);
    }

    #[tokio::test]
    async fn shutdown_closes_with_going_away() {
        let server = WsServer::new(runtime(), WsServerConfig::default());
        let mut peer = Peer::start(&server, 16);
        peer.send(Message::Text(hello("h"))).await;
        let _ = peer.next_json().await;
        server.shutdown();
        assert!(matches!(peer.next().await, Message::Close(Some(CloseFrame { code: 1001, .. }))));
        assert_eq!(peer.done.await.unwrap(), ConnectionEnd::Shutdown);
    }
}
