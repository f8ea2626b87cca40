//! The accept loop shared by the plain and the TLS listeners: a cap on open connections, a header-read timeout, a
//! keep-alive idle timeout, a request-body deadline and a minimum transfer rate for request heads and bodies, around
//! hyper's HTTP/1.1 connection.
//!
//! Why not `axum::serve`: it offers no header, idle or body timeouts and no connection cap, so an idle socket, a
//! half-sent head or a body trickled at one byte per ten seconds held a file descriptor for as long as the peer
//! liked, and 1,024 of them locked every legitimate client out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use ldp_session::{AuthenticatedPeer, PeerContext};
use ldp_types::{LdpError, codes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::Service;

use crate::error::{HttpError, error_body};

/// Limits on the connections of one listener, and on how long and how slowly a peer may send a request.
///
/// Every wait a peer controls has a bound here; together with [`max_connections`](Self::max_connections) they keep
/// half-open or trickling sockets from locking legitimate clients out.
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
    pub(crate) fn new(max: usize) -> Self {
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
/// its own timeout), with what the handshake established about the peer.
pub(crate) trait Establish: Clone + Send + Sync + 'static {
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
pub(crate) type EstablishedPeer = (AuthenticatedPeer, Arc<str>);

/// Plain TCP.
#[derive(Clone)]
pub(crate) struct Plain;

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
pub(crate) async fn serve_connections<E: Establish>(
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
        loop {
            if stopping && lock(&activity).in_flight == 0 {
                // Shutting down: a connection with no request in progress (idle, or half a head) ends now.
                return;
            }
            let deadline = refusing_until.or_else(|| lock(&activity).deadline(&self.limits));
            tokio::select! {
                () = activity.changed.notified() => {}
                () = activity.evict.notified() => {
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
                () = sleep_until_opt(deadline) => {
                    if refusing_until.is_some() {
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
                changed = self.stop.changed(), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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

/// Bytes received in consecutive windows, for a minimum transfer rate.
#[derive(Debug, Clone, Copy)]
struct RateWindow {
    /// When the current window ends (and is judged).
    ends: Instant,
    /// Bytes received in it so far.
    bytes: u64,
}

impl RateWindow {
    fn new(now: Instant, window: Duration) -> Self {
        Self { ends: now + window, bytes: 0 }
    }

    /// Judges the window that just ended against `min_rate` bytes/s and starts the next one at `now` (not at the
    /// old end: time the server itself spent not reading, on a loaded machine, is not held against the peer).
    fn roll(&mut self, min_rate: u64, window: Duration, now: Instant) -> bool {
        let needed = u128::from(min_rate) * window.as_millis() / 1000;
        let enough = u128::from(self.bytes) >= needed;
        *self = Self::new(now, window);
        enough
    }
}

/// What a connection's timer found due.
enum Due {
    Nothing,
    /// Idle too long: close.
    Idle,
    /// The request head is too slow: answer this, then close.
    Head(HttpError),
}

/// What a connection is doing, for its timeouts and for eviction.
#[derive(Debug)]
struct Activity {
    /// Requests whose response has not been sent completely.
    in_flight: usize,
    /// When the connection last became idle (accepted, or its last response sent).
    idle_since: Instant,
    /// When the first byte of the next request arrived, while no request was in progress.
    head_started: Option<Instant>,
    /// The head's current rate window (meaningful while `head_started` is set).
    head_window: RateWindow,
    /// While the body of the request in progress is still being read (no handler has the message yet): when the
    /// body started.
    body_started: Option<Instant>,
    /// A too-slow head's answer, for the stream to write in place of further reads.
    refusal: Option<Vec<u8>>,
}

impl Activity {
    fn new(now: Instant) -> Self {
        Self {
            in_flight: 0,
            idle_since: now,
            head_started: None,
            head_window: RateWindow::new(now, Duration::ZERO),
            body_started: None,
            refusal: None,
        }
    }

    /// When the connection is next due for a check; `None` while a request is in progress (the request timeout and
    /// the body limits bound that).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        if self.in_flight > 0 {
            return None;
        }
        Some(match self.head_started {
            Some(start) if limits.min_head_rate > 0 => (start + limits.header_timeout).min(self.head_window.ends),
            Some(start) => start + limits.header_timeout,
            None => self.idle_since + limits.idle_timeout,
        })
    }

    /// What is due at `now`; rolls the head's rate window when it has ended.
    fn due(&mut self, limits: &ConnectionLimits, now: Instant) -> Due {
        if self.in_flight > 0 {
            return Due::Nothing;
        }
        match self.head_started {
            Some(start) if now >= start + limits.header_timeout => {
                Due::Head(HttpError::HeadTimeout(limits.header_timeout))
            }
            Some(_) if limits.min_head_rate > 0 && now >= self.head_window.ends => {
                if self.head_window.roll(limits.min_head_rate, limits.min_rate_window, now) {
                    Due::Nothing
                } else {
                    Due::Head(HttpError::HeadTooSlow { min_rate: limits.min_head_rate, window: limits.min_rate_window })
                }
            }
            Some(_) => Due::Nothing,
            None if now >= self.idle_since + limits.idle_timeout => Due::Idle,
            None => Due::Nothing,
        }
    }

    /// Since when the connection has been closable to make room (idle, handshaking, sending a head, or sending a
    /// body no handler has yet); `None` while a handler is serving it.
    fn evictable_since(&self) -> Option<Instant> {
        if self.in_flight == 0 { Some(self.head_started.unwrap_or(self.idle_since)) } else { self.body_started }
    }
}

/// A connection's [`Activity`], a signal to its timer that the deadline moved, and one asking it to close if no
/// handler is serving it.
struct Watched {
    activity: Mutex<Activity>,
    changed: Notify,
    evict: Notify,
    evicting: AtomicBool,
    /// The peer's address, for choosing whom to evict.
    address: IpAddr,
}

fn lock(watched: &Watched) -> MutexGuard<'_, Activity> {
    // Nothing panics while the lock is held; recover from poisoning anyway.
    watched.activity.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection's stream: notes when bytes of a new request start to arrive and counts them for the head's rate,
/// and, once a head was found too slow, writes the `408` in place of further reads.
struct Tracked<T> {
    inner: T,
    activity: Arc<Watched>,
    limits: Arc<ConnectionLimits>,
    refusing: Option<Refusing>,
    _slot: OwnedSemaphorePermit,
}

/// A `408` being written to a peer whose head was too slow, then the peer's remaining bytes being drained (closing
/// with unread data would reset the connection and could lose the answer), all within [`REFUSAL_LINGER`].
struct Refusing {
    answer: Vec<u8>,
    written: usize,
    shut: bool,
    drained: usize,
    linger: Pin<Box<tokio::time::Sleep>>,
}

/// Bytes of a refused peer's request read and discarded at most.
const REFUSAL_DRAIN_BYTES: usize = 64 * 1024;

impl Refusing {
    /// Drives the refusal; ends with an error for hyper, which then closes the connection.
    fn poll<T: AsyncRead + AsyncWrite + Unpin>(&mut self, io: &mut T, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let done =
            || Poll::Ready(std::io::Error::new(std::io::ErrorKind::TimedOut, "request head refused as too slow"));
        if self.linger.as_mut().poll(cx).is_ready() {
            return done();
        }
        while self.written < self.answer.len() {
            match Pin::new(&mut *io).poll_write(cx, &self.answer[self.written..]) {
                Poll::Ready(Ok(n)) if n > 0 => self.written += n,
                Poll::Ready(_) => return done(),
                Poll::Pending => return Poll::Pending,
            }
        }
        if !self.shut {
            match Pin::new(&mut *io).poll_shutdown(cx) {
                Poll::Ready(_) => self.shut = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        let mut sink = [0u8; 4096];
        while self.drained < REFUSAL_DRAIN_BYTES {
            let mut buf = ReadBuf::new(&mut sink);
            match Pin::new(&mut *io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => self.drained += buf.filled().len(),
                Poll::Ready(_) => return done(),
                Poll::Pending => return Poll::Pending,
            }
        }
        done()
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.refusing.is_none()
            && let Some(answer) = lock(&this.activity).refusal.take()
        {
            this.refusing = Some(Refusing {
                answer,
                written: 0,
                shut: false,
                drained: 0,
                linger: Box::pin(tokio::time::sleep(REFUSAL_LINGER)),
            });
        }
        if let Some(refusing) = &mut this.refusing {
            return refusing.poll(&mut this.inner, cx).map(Err);
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if matches!(polled, Poll::Ready(Ok(()))) && read > 0 {
            let mut activity = lock(&this.activity);
            if activity.in_flight == 0 {
                if activity.head_started.is_none() {
                    let now = Instant::now();
                    activity.head_started = Some(now);
                    activity.head_window = RateWindow::new(now, this.limits.min_rate_window);
                    activity.head_window.bytes = read as u64;
                    drop(activity);
                    this.activity.changed.notify_one();
                } else {
                    activity.head_window.bytes = activity.head_window.bytes.saturating_add(read as u64);
                }
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request in progress; when dropped (its response body sent, or abandoned), the connection is idle again.
struct InFlight(Arc<Watched>);

impl InFlight {
    /// `reading_body`: the request has a body still to arrive, during which the connection stays closable.
    fn start(activity: &Arc<Watched>, reading_body: bool) -> Self {
        let mut a = lock(activity);
        a.in_flight += 1;
        a.head_started = None;
        a.body_started = reading_body.then(Instant::now);
        drop(a);
        Self(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = lock(&self.0);
        a.in_flight = a.in_flight.saturating_sub(1);
        a.idle_since = Instant::now();
        a.body_started = None;
        drop(a);
        self.0.changed.notify_one();
    }
}

/// The request has been read (or given up on), and a handler has it: the connection is no longer closable.
fn body_read(activity: &Watched) {
    lock(activity).body_started = None;
}

/// The router, with each request's extensions holding the connection's `ConnectInfo<SocketAddr>` (and, for a
/// certificate-authenticated connection, its [`PeerContext`]), its body under the body deadline and minimum rate,
/// and its response tracked until sent.
#[derive(Clone)]
struct PerRequest {
    app: Router,
    remote: SocketAddr,
    peer: Option<EstablishedPeer>,
    activity: Arc<Watched>,
    limits: Arc<ConnectionLimits>,
}

impl Service<hyper::Request<hyper::body::Incoming>> for PerRequest {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        <Router as Service<Request>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity, !http_body::Body::is_end_stream(req.body()));
        let (limits, activity) = (Arc::clone(&self.limits), Arc::clone(&self.activity));
        let mut req = req.map(|body| Body::new(LimitedBody::new(body, limits, activity)));
        req.extensions_mut().insert(ConnectInfo(self.remote));
        if let Some((peer, principal)) = &self.peer {
            req.extensions_mut().insert(PeerContext {
                authenticated: Some(peer.clone()),
                connection: None,
                principal: Some(principal.clone()),
            });
        }
        let future = self.app.call(req);
        Box::pin(async move {
            let Ok(resp) = future.await;
            // A handler that answered without reading its whole body has the request all the same.
            body_read(&in_flight.0);
            // The request counts as in progress until its body (an SSE stream, say) has been sent.
            Ok(resp.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _in_flight = &in_flight;
                    frame
                }))
            }))
        })
    }
}

/// Why a request body was cut off.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyTooSlow {
    /// It did not arrive within [`ConnectionLimits::body_timeout`].
    #[error("the request body did not arrive within {0:?}")]
    Deadline(Duration),
    /// A window of [`ConnectionLimits::min_rate_window`] brought less than [`ConnectionLimits::min_body_rate`].
    #[error("the request body arrived slower than {min_rate} bytes/s (over {window:?})")]
    Rate {
        /// The minimum rate, bytes per second.
        min_rate: u64,
        /// The window it was measured over.
        window: Duration,
    },
}

impl From<&BodyTooSlow> for HttpError {
    fn from(slow: &BodyTooSlow) -> Self {
        match *slow {
            BodyTooSlow::Deadline(timeout) => Self::BodyTimeout(timeout),
            BodyTooSlow::Rate { min_rate, window } => Self::BodyTooSlow { min_rate, window },
        }
    }
}

/// A request body that fails with [`BodyTooSlow`] once its deadline passes or a rate window brings too little, and
/// marks the connection as no longer closable once it has been read.
struct LimitedBody {
    inner: hyper::body::Incoming,
    limits: Arc<ConnectionLimits>,
    activity: Arc<Watched>,
    deadline: Instant,
    /// `None` when the minimum rate is off.
    window: Option<RateWindow>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl LimitedBody {
    fn new(inner: hyper::body::Incoming, limits: Arc<ConnectionLimits>, activity: Arc<Watched>) -> Self {
        let now = Instant::now();
        let deadline = now + limits.body_timeout;
        let window = (limits.min_body_rate > 0).then(|| RateWindow::new(now, limits.min_rate_window));
        let next = window.map_or(deadline, |w| w.ends.min(deadline));
        Self { inner, limits, activity, deadline, window, timer: Box::pin(tokio::time::sleep_until(next)) }
    }

    fn fail(&self, slow: BodyTooSlow) -> Poll<Option<Result<Frame<axum::body::Bytes>, BoxError>>> {
        body_read(&self.activity);
        Poll::Ready(Some(Err(Box::new(slow))))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl http_body::Body for LimitedBody {
    type Data = axum::body::Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            match &frame {
                Some(Ok(f)) => {
                    if let (Some(window), Some(data)) = (&mut this.window, f.data_ref()) {
                        window.bytes = window.bytes.saturating_add(data.len() as u64);
                    }
                    if this.inner.is_end_stream() {
                        body_read(&this.activity);
                    }
                }
                Some(Err(_)) | None => body_read(&this.activity),
            }
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        // Nothing arrived: judge whatever came due, then sleep until the next check.
        while this.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if now >= this.deadline {
                return this.fail(BodyTooSlow::Deadline(this.limits.body_timeout));
            }
            if let Some(window) = &mut this.window
                && now >= window.ends
                && !window.roll(this.limits.min_body_rate, this.limits.min_rate_window, now)
            {
                let (min_rate, window) = (this.limits.min_body_rate, this.limits.min_rate_window);
                return this.fail(BodyTooSlow::Rate { min_rate, window });
            }
            let next = this.window.map_or(this.deadline, |w| w.ends.min(this.deadline));
            this.timer.as_mut().reset(next);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The [`BodyTooSlow`] somewhere down the causes of `error` (a body-reading failure, as axum reports it), if any.
pub(crate) fn body_too_slow<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTooSlow> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(slow) = e.downcast_ref::<BodyTooSlow>() {
            return Some(slow);
        }
        cause = e.source();
    }
    None
}

/// The `Retry-After` header value for `secs` seconds (at least one).
pub(crate) fn retry_after(secs: u64) -> HeaderValue {
    HeaderValue::from(secs.max(1))
}

/// A JSON error answer with `Retry-After`.
pub(crate) fn refusal_with_retry(status: StatusCode, error: &LdpError, secs: u64) -> Response {
    let mut resp = crate::error::json_response(status, error_body(error));
    resp.headers_mut().insert(header::RETRY_AFTER, retry_after(secs));
    resp
}
