//! The server side: one connection loop per WebSocket, generic over any `Sink<Message>` + `Stream` pair, and the thin
//! axum adapter that feeds it upgraded sockets.
//!
//! Per connection: a reader reads frames (while it holds one of `max_in_flight` permits), spawns one handler per
//! envelope, and handlers send replies and pushed TASK_UPDATEs through one bounded outbound queue that a writer drains
//! into the socket (pinging every `ping_interval`). When the queue is full, handlers wait, permits run out and the
//! reader stops reading: a slow reader costs bounded memory. When the connection ends, its sessions are suspended
//! in the session machine, and results that could not be written are handed to it to hold for the session's next
//! connection: the protocol state (which connection carries a session, which answers are held) is the machine's;
//! this binding keeps only each open connection's outbound queue.
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | [`WsServer`]: the connection driver (`serve_connection_as`: reader and writer joined, then `Hub::disconnect`), the routers, [`serve_ws`] / [`spawn_ws`] |
//! | `config.rs` | [`WsServerConfig`] and its defaults, [`ConnectionEnd`] |
//! | `loops.rs` | `read_loop` (backpressure by count, bytes and rate; idle timeout; oversize), `write_loop` (batches, pings, write timeout), `handle_head` (one envelope: runtime, pushed updates, held answers first, the reply) |
//! | `outbound.rs` | `Outbound` (the bounded queue and byte budget, the stall alarm), `Unconfirmed` (answers written but maybe not read) |
//! | `hub.rs` | `Hub` (what connections share), `Hub::disconnect` / `reroute` / `flush`: undelivered answers to the session's connection or to the machine ([`Responder::hold`](ldp_session::Responder::hold)), held ones out ([`Responder::take_held`](ldp_session::Responder::take_held)) |
//! | `upgrade.rs` | the axum edge: origin check, authentication, library limits, message conversion |

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::ConnectInfo;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::routing::get;
use axum::{Extension, Router};
use futures::{Sink, Stream};
use ldp_edge::{BearerAuth, HttpMetrics, IDENTITY, WELL_KNOWN_IDENTITY};
use ldp_session::PeerContext;
use ldp_session::runtime::DelegateRuntime;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinHandle;

use crate::WS_PATH;
use crate::inbound::InboundBudget;
use crate::wire::{Message, WireError};
use ldp_session::HeldStats;

mod config;
mod hub;
mod loops;
mod outbound;
mod upgrade;

pub use config::{ConnectionEnd, WsServerConfig};
use hub::{Conns, Figures, Hub, NEXT_CONNECTION, lock};
use loops::{FLUSH_TIMEOUT, read_loop, write_loop};
use outbound::{MAX_OUTBOUND_BUDGET, Outbound, Unconfirmed};
use upgrade::upgrade;

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
        let auth = BearerAuth::from_map(&config.tokens).with_jwt(config.jwt.clone());
        let (shutdown, _) = watch::channel(false);
        let in_flight_bytes = Arc::new(Semaphore::new(config.max_in_flight_bytes_total.clamp(1, MAX_OUTBOUND_BUDGET)));
        let burst =
            config.max_inbound_rate.max(u64::try_from(config.max_message).unwrap_or(u64::MAX).saturating_mul(2));
        let inbound = InboundBudget::new(config.max_inbound_rate, burst);
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
        self.hub.runtime.gauges().held
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
        let source = peer.source().or_else(|| address.map(|a| ldp_session::source_of(a.ip())));
        let budget_key: Box<str> = match (peer.principal(), source) {
            (Some(principal), _) => format!("principal:{principal}").into(),
            (None, Some(source)) => format!("address:{source}").into(),
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

/// The routes of a WebSocket server for `runtime`: `GET /ldp/ws` only, ready to merge into the HTTP binding's router
/// (`ldp_edge::router(state).merge(ws_router(runtime, config))`) or any other.
pub fn ws_router(runtime: DelegateRuntime, config: WsServerConfig) -> Router {
    WsServer::new(runtime, config).router()
}

/// Serves the WebSocket binding alone (with the identity card, see [`WsServer::standalone_router`]) on `listener`
/// until `shutdown` resolves, then closes every connection with 1001. Also reaps expired sessions while it runs.
/// Connections are accepted with the HTTP binding's default [`ConnectionLimits`](ldp_edge::ConnectionLimits).
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
    let result = ldp_edge::serve_router(listener, runtime, app, async move {
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
        ldp_edge::stop_and_join(self.stop.take(), &mut self.join).await
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
mod tests;
