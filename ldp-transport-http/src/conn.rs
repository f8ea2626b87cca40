//! The accept loop shared by the plain and the TLS listeners: a cap on open connections, a header-read timeout, a
//! keep-alive idle timeout and a request-body deadline, around hyper's HTTP/1.1 connection.
//!
//! Why not `axum::serve`: it offers no header, idle or body timeouts and no connection cap, so an idle socket, a
//! half-sent head or a body trickled at one byte per ten seconds held a file descriptor for as long as the peer
//! liked, and 1,024 of them locked every legitimate client out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
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

use crate::error::error_body;

/// Limits on the connections of one listener, and on how long a peer may take to send a request.
///
/// Every wait a peer controls has a bound here; together with [`max_connections`](Self::max_connections) they keep
/// half-open or trickling sockets from locking legitimate clients out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at the same time, TLS handshakes and upgraded WebSockets included (default 512, half the
    /// common file-descriptor limit of 1,024). A connection arriving at the cap closes the one that has been quiet
    /// longest (idle, sending a head, or handshaking: no request in progress) and takes its place; when none is
    /// quiet, a plain-HTTP connection is answered `503` with `Retry-After` and a `CAPACITY_EXCEEDED` error body
    /// without reading its request, and a TLS connection is closed at once (an answer would need the handshake the
    /// limit is there to avoid).
    pub max_connections: usize,
    /// Longest time from the first byte of a request to the end of its head (request line and headers; default
    /// 10 s). A connection that takes longer is closed.
    pub header_timeout: Duration,
    /// Longest time a connection may stay open with no request in progress (default 60 s): after it was accepted,
    /// or after its last response was sent (keep-alive). Then it is closed.
    pub idle_timeout: Duration,
    /// Longest time a request body may take to arrive, counted from the end of the head (default 30 s, so a body at
    /// the default 1 MiB limit needs at least ~35 KB/s). Then the request is answered `408` with a `TIMEOUT` error
    /// and the connection is closed; a never-ending chunked body ends here too (or at the body size limit, `413`).
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
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
            // Full. Connections doing nothing (idle, or still sending a head) make room: the one that has been so
            // the longest is closed, so that sockets held open without requests cannot lock real clients out.
            let Ok(waiting) = Arc::clone(&refusals).try_acquire_owned() else { continue };
            let evicted = registry.evict_longest_quiet();
            let slots = Arc::clone(&stats.slots);
            let max = stats.max;
            tasks.spawn(async move {
                if evicted && let Ok(Ok(slot)) = tokio::time::timeout(EVICTION_WAIT, slots.acquire_owned()).await {
                    drop(waiting);
                    return connection.run(tcp, remote, slot).await;
                }
                tracing::debug!(%remote, max, "connection refused: too many open connections, none quiet");
                if E::PLAINTEXT {
                    refuse_busy(tcp, waiting).await;
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

/// How long a connection arriving at the cap waits for the slot of the quiet connection it had closed.
const EVICTION_WAIT: Duration = Duration::from_millis(250);

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

    /// Asks the connection that has been quiet (no request in progress) the longest to close; false if none is.
    fn evict_longest_quiet(&self) -> bool {
        let conns = self.conns();
        let victim = conns
            .values()
            .filter(|w| !w.evicting.load(Ordering::Relaxed))
            .filter_map(|w| {
                let a = lock(w);
                (a.in_flight == 0).then_some((a.idle_since, w))
            })
            .min_by_key(|(since, _)| *since)
            .map(|(_, w)| Arc::clone(w));
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
            activity: Mutex::new(Activity { in_flight: 0, idle_since: Instant::now(), head_started: None }),
            changed: Notify::new(),
            evict: Notify::new(),
            evicting: AtomicBool::new(false),
        });
        let _registered = self.registry.register(&activity);
        // A handshake in progress is quiet too: it can be closed to make room.
        let established = tokio::select! {
            established = self.establish.establish(tcp, remote) => established,
            () = activity.evict.notified() => None,
        };
        let Some((io, peer)) = established else { return };
        lock(&activity).idle_since = Instant::now();
        // The slot travels with the stream, so an upgraded WebSocket keeps counting against the limit.
        let io = TokioIo::new(Tracked { inner: io, activity: Arc::clone(&activity), _slot: slot });
        let service = PerRequest {
            app: self.app,
            remote,
            peer,
            activity: Arc::clone(&activity),
            body_timeout: self.limits.body_timeout,
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The header timeout is enforced below from the first byte of a head; hyper's own counts idle keep-alive
        // time too, which would make the two limits one.
        builder.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
        let conn = builder.serve_connection(io, hyper_util::service::TowerToHyperService::new(service)).with_upgrades();
        tokio::pin!(conn);
        let mut stopping = false;
        loop {
            if stopping && lock(&activity).in_flight == 0 {
                // Shutting down: a connection with no request in progress (idle, or half a head) ends now.
                return;
            }
            let deadline = lock(&activity).deadline(&self.limits);
            tokio::select! {
                () = activity.changed.notified() => {}
                () = activity.evict.notified() => {
                    if lock(&activity).in_flight == 0 {
                        tracing::debug!(%remote, "quiet connection closed to make room for a new one");
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
                    if lock(&activity).expired(&self.limits) {
                        tracing::debug!(%remote, "connection timed out (idle, or a request head too slow)");
                        return;
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

/// What a connection is doing, for its timeouts.
#[derive(Debug)]
struct Activity {
    /// Requests whose response has not been sent completely.
    in_flight: usize,
    /// When the connection last became idle (accepted, or its last response sent).
    idle_since: Instant,
    /// When the first byte of the next request arrived, while no request was in progress.
    head_started: Option<Instant>,
}

impl Activity {
    /// When the connection is next due for a check; `None` while a request is in progress (the request timeout and
    /// the body timeout bound that).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        if self.in_flight > 0 {
            return None;
        }
        Some(match self.head_started {
            Some(start) => start + limits.header_timeout,
            None => self.idle_since + limits.idle_timeout,
        })
    }

    fn expired(&self, limits: &ConnectionLimits) -> bool {
        self.deadline(limits).is_some_and(|at| at <= Instant::now())
    }
}

/// A connection's [`Activity`], a signal to its timer that the deadline moved, and one asking it to close if quiet.
struct Watched {
    activity: Mutex<Activity>,
    changed: Notify,
    evict: Notify,
    evicting: AtomicBool,
}

fn lock(watched: &Watched) -> MutexGuard<'_, Activity> {
    // Nothing panics while the lock is held; recover from poisoning anyway.
    watched.activity.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection's stream, noting when bytes of a new request start to arrive.
struct Tracked<T> {
    inner: T,
    activity: Arc<Watched>,
    _slot: OwnedSemaphorePermit,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let mut activity = lock(&this.activity);
            if activity.in_flight == 0 && activity.head_started.is_none() {
                activity.head_started = Some(Instant::now());
                drop(activity);
                this.activity.changed.notify_one();
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
    fn start(activity: &Arc<Watched>) -> Self {
        let mut a = lock(activity);
        a.in_flight += 1;
        a.head_started = None;
        drop(a);
        Self(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = lock(&self.0);
        a.in_flight = a.in_flight.saturating_sub(1);
        a.idle_since = Instant::now();
        drop(a);
        self.0.changed.notify_one();
    }
}

/// The router, with each request's extensions holding the connection's `ConnectInfo<SocketAddr>` (and, for a
/// certificate-authenticated connection, its [`PeerContext`]), its body under the body deadline, and its
/// response tracked until sent.
#[derive(Clone)]
struct PerRequest {
    app: Router,
    remote: SocketAddr,
    peer: Option<EstablishedPeer>,
    activity: Arc<Watched>,
    body_timeout: Duration,
}

impl Service<hyper::Request<hyper::body::Incoming>> for PerRequest {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        <Router as Service<Request>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        let mut req = req.map(|body| Body::new(DeadlineBody::new(body, self.body_timeout)));
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

/// The request body did not arrive within [`ConnectionLimits::body_timeout`].
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub(crate) struct BodyTimeout(pub(crate) Duration);

/// A request body that fails with [`BodyTimeout`] once its deadline passes.
struct DeadlineBody {
    inner: hyper::body::Incoming,
    timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl DeadlineBody {
    fn new(inner: hyper::body::Incoming, timeout: Duration) -> Self {
        Self { inner, timeout, deadline: Box::pin(tokio::time::sleep(timeout)) }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(self.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error` (a body-reading failure, as axum reports it) is, somewhere down its causes, a [`BodyTimeout`].
pub(crate) fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimeout>() {
            return true;
        }
        cause = e.source();
    }
    false
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
