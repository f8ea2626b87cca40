//! The accept loop shared by the plain and the TLS listeners: a cap on open connections, a header-read timeout, a
//! keep-alive idle timeout, a request-body deadline and a minimum transfer rate for request heads and bodies, around
//! hyper's HTTP/1.1 connection.
//!
//! Why not `axum::serve`: it offers no header, idle or body timeouts and no connection cap, so an idle socket, a
//! half-sent head or a body trickled at one byte per ten seconds held a file descriptor for as long as the peer
//! liked, and 1,024 of them locked every legitimate client out.
//!
//! `mod.rs` holds the limits, the accept loop (`serve_connections`: the cap, eviction, refusals when full) and one
//! connection's life (`Connection`); `activity.rs` what a connection's bytes show (`Activity`, the transfer-rate
//! windows, the `Tracked` stream wrapper that answers a stalled head itself); `body.rs` the per-request service
//! (`PerRequest`, the body deadline and rate in `LimitedBody`, the rest of a body its handler did not read drained
//! or the connection closed, saying so) and the refusals with `Retry-After`.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use ldp_session::AuthenticatedPeer;
use ldp_session::runtime::DelegateRuntime;
use ldp_types::{LdpError, codes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::{HttpError, error_body};

mod activity;
mod body;

use activity::{Activity, Due, Tracked, Watched, lock};
use body::PerRequest;
pub use body::{BodyTooSlow, body_too_slow, refusal_with_retry, retry_after};

/// Limits on the connections of one listener, and on how long and how slowly a peer may send a request.
///
/// Every wait a peer controls has a bound here; together with [`max_connections`](Self::max_connections) they keep
/// half-open or trickling sockets from locking legitimate clients out.
///
/// A request answered without its whole body being read (refused by an authentication check or a rate limit, say)
/// waits for the rest of the body, at most 64 KiB within a second (or the body timeout, if shorter), and throws it
/// away, so that the connection can serve the next request; a larger or slower rest, or a body the client holds
/// back for `100 Continue`, is not read and the answer says `Connection: close`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at the same time, TLS handshakes and upgraded WebSockets included (default 512, half the
    /// common file-descriptor limit of 1,024). A connection arriving at the cap closes one that is not being served
    /// (idle, handshaking, or still sending a request head or body: no handler has its message yet) and takes its
    /// place: among the addresses holding the most connections, the one that has been in that state longest.
    /// Connections whose request a handler is running, and upgraded WebSockets, are never closed for room. When
    /// none can be closed, a plain-HTTP connection is answered `503` with `Retry-After` and a `CAPACITY_EXCEEDED`
    /// error body without reading its request, and a TLS connection is closed at once (an answer would need the
    /// handshake the limit is there to avoid).
    pub max_connections: usize,
    /// Longest time from the first byte of a request to the end of its head (request line and headers; default
    /// 10 s). A connection that takes longer is answered `408` with a `TIMEOUT` error and closed.
    pub header_timeout: Duration,
    /// Longest time a connection may stay open with no request in progress (default 60 s): after it was accepted,
    /// or after its last response was sent (keep-alive). Then it is closed.
    pub idle_timeout: Duration,
    /// Longest time a request body may take to arrive, counted from the end of the head (default 30 s, so a body at
    /// the default 1 MiB limit needs at least ~35 KB/s). Then the request is answered `408` with a `TIMEOUT` error
    /// and the connection is closed; a never-ending chunked body ends here too (or at the body size limit, `413`).
    pub body_timeout: Duration,
    /// Slowest a request head may arrive, in bytes per second (default 1,024; 0 turns the check off). Measured in
    /// consecutive windows of [`min_rate_window`](Self::min_rate_window) from the head's first byte: a window that
    /// ends with the head unfinished and fewer than `min_head_rate` x window bytes received in it ends the
    /// connection with `408` and a `TIMEOUT` error, long before [`header_timeout`](Self::header_timeout).
    pub min_head_rate: u64,
    /// Slowest a request body may arrive, in bytes per second (default 1,024; 0 turns the check off), measured the
    /// same way from the end of the head; below it the request is answered `408` with a `TIMEOUT` error and the
    /// connection is closed. A trickled body then holds its connection for one window, not the whole
    /// [`body_timeout`](Self::body_timeout), and a burst cannot buy a long trickle afterwards (every window must
    /// bring its share).
    pub min_body_rate: u64,
    /// The window over which [`min_head_rate`](Self::min_head_rate) and [`min_body_rate`](Self::min_body_rate) are
    /// measured, which is also the grace before the first check (default 5 s: long enough that a TCP
    /// retransmission or a stall of a few seconds on a working link does not cut a legitimate upload).
    pub min_rate_window: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            min_head_rate: 1024,
            min_body_rate: 1024,
            min_rate_window: Duration::from_secs(5),
        }
    }
}

/// Seconds a client refused for lack of a connection slot is told to wait.
const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// Refusals being written at once; beyond it an over-limit connection is closed without an answer.
const MAX_REFUSALS_IN_PROGRESS: usize = 64;

/// How long a refusal may take to write, and to let the client finish sending before the socket closes (closing
/// with unread data resets the connection, and the client may lose the answer).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Counts of one server's connections, readable while it runs (for metrics and soak tests).
#[derive(Debug, Clone)]
pub struct ConnectionStats {
    slots: Arc<Semaphore>,
    max: usize,
}

impl ConnectionStats {
    /// Counts for a listener of at most `max` connections.
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Self { slots: Arc::new(Semaphore::new(max)), max }
    }

    /// Connections open now (handshaking, serving HTTP, or upgraded to WebSocket).
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// How a new TCP connection becomes the stream HTTP is served on: as it is, or after a TLS handshake (bounded by
/// its own timeout), with what the handshake established about the peer. [`Plain`] here; the HTTP binding's TLS
/// listener is the other.
pub trait Establish: Clone + Send + Sync + 'static {
    /// The stream HTTP runs over.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Whether an over-limit connection can be answered in plain text.
    const PLAINTEXT: bool;
    /// The stream and its authenticated peer with its principal label, or `None` when the connection is to be
    /// dropped.
    fn establish(
        &self,
        tcp: TcpStream,
        remote: SocketAddr,
    ) -> impl Future<Output = Option<(Self::Io, Option<EstablishedPeer>)>> + Send;
}

/// A peer a handshake authenticated, and the label of its credential (the session principal).
pub type EstablishedPeer = (AuthenticatedPeer, Arc<str>);

/// Plain TCP.
#[derive(Debug, Clone)]
pub struct Plain;

impl Establish for Plain {
    type Io = TcpStream;
    const PLAINTEXT: bool = true;

    async fn establish(&self, tcp: TcpStream, _remote: SocketAddr) -> Option<(TcpStream, Option<EstablishedPeer>)> {
        // Best effort: latency matters more than packet count for one-envelope exchanges.
        let _ = tcp.set_nodelay(true);
        Some((tcp, None))
    }
}

/// Serves `app` on the connections of `listener` until `shutdown` resolves, then lets open requests finish.
pub async fn serve_connections<E: Establish>(
    listener: TcpListener,
    establish: E,
    app: Router,
    limits: ConnectionLimits,
    stats: ConnectionStats,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = Arc::new(limits);
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_PROGRESS));
    let registry = Registry::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    // Errors about one connection are that connection's; others (too many open files) last a
                    // while, so back off instead of spinning.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::ConnectionRefused
                    ) {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    continue;
                }
            },
        };
        let connection = Connection {
            establish: establish.clone(),
            app: app.clone(),
            limits: Arc::clone(&limits),
            stop: stop_rx.clone(),
            registry: registry.clone(),
        };
        let Ok(slot) = Arc::clone(&stats.slots).try_acquire_owned() else {
            // Full. Connections no handler is serving (idle, handshaking, or still sending a request) make room,
            // so that sockets held open without complete requests cannot lock real clients out.
            let Ok(waiting) = Arc::clone(&refusals).try_acquire_owned() else { continue };
            let slots = Arc::clone(&stats.slots);
            let (registry, max) = (registry.clone(), stats.max);
            tasks.spawn(async move {
                match make_room(&registry, &slots).await {
                    Some(slot) => {
                        drop(waiting);
                        connection.run(tcp, remote, slot).await;
                    }
                    None => {
                        tracing::debug!(%remote, max, "connection refused: too many open connections, all being served");
                        if E::PLAINTEXT {
                            refuse_busy(tcp, waiting).await;
                        }
                    }
                }
            });
            continue;
        };
        tasks.spawn(connection.run(tcp, remote, slot));
    }
    drop(listener);
    stop_tx.send_replace(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// How long a connection arriving at the cap waits, in all, for the slot of a connection it had closed.
const EVICTION_WAIT: Duration = Duration::from_millis(250);

/// How long it waits after one eviction before asking for another (the first victim may have just started being
/// served, and declined).
const EVICTION_STEP: Duration = Duration::from_millis(50);

/// Closes connections that no handler is serving until a slot frees up, within [`EVICTION_WAIT`]; `None` if none
/// could be closed or no slot came free in time.
async fn make_room(registry: &Registry, slots: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
    let until = Instant::now() + EVICTION_WAIT;
    loop {
        let evicted = registry.evict_one();
        let step =
            if evicted { EVICTION_STEP } else { EVICTION_STEP.min(until.saturating_duration_since(Instant::now())) };
        if let Ok(Ok(slot)) = tokio::time::timeout(step, Arc::clone(slots).acquire_owned()).await {
            return Some(slot);
        }
        if !evicted || Instant::now() >= until {
            return None;
        }
    }
}

/// Answers an over-limit connection `503` without reading its request, then lingers briefly so the client can
/// finish sending and read the answer.
async fn refuse_busy(mut tcp: TcpStream, _refusal: OwnedSemaphorePermit) {
    let error =
        LdpError::runtime(codes::CAPACITY_EXCEEDED, "too many open connections; retry later").with_retryable(true);
    let body = error_body(&error);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {BUSY_RETRY_AFTER_SECS}\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let linger = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&body).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tokio::io::AsyncReadExt::read(&mut tcp, &mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, linger).await;
}

/// The connections that could be closed to make room: every one not yet upgraded.
#[derive(Clone, Default)]
struct Registry {
    conns: Arc<Mutex<HashMap<u64, Arc<Watched>>>>,
    next_id: Arc<AtomicU64>,
}

impl Registry {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, Arc<Watched>>> {
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, watched: &Arc<Watched>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.conns().insert(id, Arc::clone(watched));
        Registered { registry: self.clone(), id }
    }

    /// Asks one connection that no handler is serving to close; false if there is none.
    ///
    /// The victim comes from the address holding the most open connections not already asked to close (a flood
    /// from one address evicts its own sockets before anyone else's), and within it is the one that has been idle,
    /// handshaking or sending its request the longest (a trickling request is, by then, the slowest).
    fn evict_one(&self) -> bool {
        let conns = self.conns();
        // Connections already asked to close do not count: otherwise, while many newcomers arrive at once and the
        // flooding address's victims are all on their way out, the next choice would fall on another address.
        let mut per_address: HashMap<IpAddr, usize> = HashMap::new();
        for w in conns.values().filter(|w| !w.evicting.load(Ordering::Relaxed)) {
            *per_address.entry(w.address).or_default() += 1;
        }
        let victim = conns
            .values()
            .filter(|w| !w.evicting.load(Ordering::Relaxed))
            .filter_map(|w| {
                let since = lock(w).evictable_since()?;
                Some((per_address.get(&w.address).copied().unwrap_or(0), since, w))
            })
            // Most connections first, then the earliest `since`.
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
            .map(|(_, _, w)| Arc::clone(w));
        drop(conns);
        match victim {
            Some(w) => {
                w.evicting.store(true, Ordering::Relaxed);
                w.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Removes a connection from the [`Registry`] when it ends or upgrades.
struct Registered {
    registry: Registry,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.conns().remove(&self.id);
    }
}

/// One accepted connection.
struct Connection<E> {
    establish: E,
    app: Router,
    limits: Arc<ConnectionLimits>,
    stop: watch::Receiver<bool>,
    registry: Registry,
}

impl<E: Establish> Connection<E> {
    async fn run(mut self, tcp: TcpStream, remote: SocketAddr, slot: OwnedSemaphorePermit) {
        let activity = Arc::new(Watched {
            activity: Mutex::new(Activity::new(Instant::now())),
            changed: Notify::new(),
            evict: Notify::new(),
            evicting: AtomicBool::new(false),
            address: remote.ip(),
        });
        let _registered = self.registry.register(&activity);
        // A handshake in progress is not being served either: it can be closed to make room.
        let established = tokio::select! {
            established = self.establish.establish(tcp, remote) => established,
            () = activity.evict.notified() => None,
        };
        let Some((io, peer)) = established else { return };
        lock(&activity).idle_since = Instant::now();
        // The slot travels with the stream, so an upgraded WebSocket keeps counting against the limit.
        let io = TokioIo::new(Tracked {
            inner: io,
            activity: Arc::clone(&activity),
            limits: Arc::clone(&self.limits),
            refusing: None,
            _slot: slot,
        });
        let service = PerRequest {
            app: self.app,
            remote,
            peer,
            activity: Arc::clone(&activity),
            limits: Arc::clone(&self.limits),
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The header timeout is enforced below from the first byte of a head; hyper's own counts idle keep-alive
        // time too, which would make the two limits one.
        builder.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
        let conn = builder.serve_connection(io, hyper_util::service::TowerToHyperService::new(service)).with_upgrades();
        tokio::pin!(conn);
        let mut stopping = false;
        // Set once a too-slow head is being answered 408: the answer is written by the stream (hyper holds it),
        // and this bounds how long that may take.
        let mut refusing_until: Option<Instant> = None;
        // A head that starts and a response that ends change the deadline. The loop's waits are made once and kept
        // across wakes: the timer is moved only to an earlier deadline, and a timer that fires before the current
        // deadline finds nothing due and is set again; a change wakes the loop only when it needs the timer moved
        // (`Activity::wakes_timer`), so a busy connection costs no wake and no timer work a request.
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        let changed = activity.changed.notified();
        tokio::pin!(changed);
        let evict = activity.evict.notified();
        tokio::pin!(evict);
        // Made once too: a new `changed()` each pass would register with the channel and leave it again every wake.
        let stop = self.stop.changed();
        tokio::pin!(stop);
        loop {
            // In a block: the guard must be gone before the `select!` awaits.
            let reset = {
                let mut watched = lock(&activity);
                if stopping && watched.in_flight == 0 {
                    // Shutting down: a connection with no request in progress (idle, or half a head) ends now.
                    return;
                }
                let deadline = refusing_until.or_else(|| watched.deadline(&self.limits));
                let reset = deadline.filter(|at| armed.is_none_or(|current| *at < current));
                if reset.is_some() {
                    armed = reset;
                }
                // Published under the lock the changes are made under, so that a change either is seen here or
                // sees this (`Activity::wakes_timer`). While stopping or refusing, every change may matter.
                watched.timer_at = if stopping || refusing_until.is_some() { None } else { armed };
                reset
            };
            if let Some(at) = reset {
                timer.as_mut().reset(at);
            }
            tokio::select! {
                () = changed.as_mut() => changed.set(activity.changed.notified()),
                () = evict.as_mut() => {
                    evict.set(activity.evict.notified());
                    if lock(&activity).evictable_since().is_some() {
                        tracing::debug!(%remote, "connection not being served closed to make room for a new one");
                        return;
                    }
                    activity.evicting.store(false, Ordering::Relaxed);
                }
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%remote, error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = timer.as_mut(), if armed.is_some() => {
                    // Changes wake the loop until the timer is set again, at the top of the loop.
                    armed = None;
                    lock(&activity).timer_at = None;
                    if refusing_until.is_some_and(|until| Instant::now() >= until) {
                        return;
                    }
                    let due = lock(&activity).due(&self.limits, Instant::now());
                    match due {
                        Due::Nothing => {}
                        Due::Idle => {
                            tracing::debug!(%remote, "idle connection timed out");
                            return;
                        }
                        Due::Head(error) => {
                            tracing::debug!(%remote, %error, "request head refused");
                            lock(&activity).refusal = Some(raw_response(&error));
                            refusing_until = Some(Instant::now() + REFUSAL_LINGER + EVICTION_WAIT);
                        }
                    }
                }
                changed = stop.as_mut(), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// An error answer written straight to the stream (`Connection: close`), for a request hyper has not parsed.
fn raw_response(error: &HttpError) -> Vec<u8> {
    let status = error.status();
    let body = error_body(&error.to_ldp_error());
    let mut bytes = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Tells a server task to stop (`stop`, if not sent yet) and waits for it to end: what every server handle's
/// `shutdown` does. The server may have ended already; then there is nobody to tell, and its result is returned.
pub async fn stop_and_join(
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: &mut tokio::task::JoinHandle<std::io::Result<()>>,
) -> std::io::Result<()> {
    if let Some(stop) = stop {
        let _ = stop.send(());
    }
    match join.await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Serves `app` on `listener` with the default [`ConnectionLimits`] until `shutdown` resolves, reaping `runtime`'s
/// expired sessions meanwhile: the one listener every binding (HTTP, WebSocket, both merged) is served by.
pub async fn serve_router(
    listener: TcpListener,
    runtime: DelegateRuntime,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_with_limits(listener, runtime, app, ConnectionLimits::default(), shutdown).await
}

/// [`serve_router`] with these connection limits (give the HTTP binding the same ones: its router applies the body
/// timeout, this loop the others).
pub async fn serve_router_with_limits(
    listener: TcpListener,
    runtime: DelegateRuntime,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stats = ConnectionStats::new(limits.max_connections);
    serve_established(listener, Plain, runtime, app, limits, stats, shutdown).await
}

/// The accept loop over connections established by `establish`, with the session reaper running beside it.
pub async fn serve_established<E: Establish>(
    listener: TcpListener,
    establish: E,
    runtime: DelegateRuntime,
    app: Router,
    limits: ConnectionLimits,
    stats: ConnectionStats,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reaper = runtime.spawn_reaper();
    let result = serve_connections(listener, establish, app, limits, stats, shutdown).await;
    reaper.abort();
    result
}
