//! The axum server: discovery, `POST /ldp/messages`, `POST /ldp/stream` (SSE), bearer authentication, limits,
//! timeouts and tracing, around a [`DelegateRuntime`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use futures::Stream;
use ldp_session::runtime::{DelegateRuntime, Response as RuntimeResponse};
use ldp_session::{AuthenticatedPeer, PeerContext, Refusal};
use ldp_types::{Envelope, IdentityCard};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tower_http::trace::TraceLayer;
use tracing::Instrument;
use tracing::field::Empty;

use crate::rate::{Limiter, RateLimit};
use crate::trace_context;
use ldp_edge::{BearerAuth, BearerLayer};
use ldp_edge::{CAPABILITIES, HEALTHZ, IDENTITY, MESSAGES, METRICS, READYZ, STREAM, WELL_KNOWN_IDENTITY};
use ldp_edge::{ConnectionLimits, ConnectionStats, Plain, body_too_slow, serve_established, serve_router_with_limits};
use ldp_edge::{HttpError, error_body, json_response};
use ldp_edge::{HttpMetrics, METRICS_CONTENT_TYPE};
use ldp_edge::{TrustedProxies, identify};

/// Server settings.
#[derive(Debug, Clone)]
pub struct HttpServerConfig {
    /// Largest request body accepted, in bytes (default 1 MiB); larger bodies get 413.
    pub max_body: usize,
    /// Longest time one message may take to be answered, task execution included (default 60 s); then 504. For
    /// `/ldp/stream` it bounds the whole stream.
    pub request_timeout: Duration,
    /// Bearer tokens and the identities they authenticate. When any is set, `/ldp/messages` and `/ldp/stream`
    /// refuse requests without a known token (401); discovery stays public.
    pub tokens: HashMap<String, AuthenticatedPeer>,
    /// Connection cap and the header, idle and body timeouts (see [`ConnectionLimits`] for the defaults).
    pub limits: ConnectionLimits,
    /// Requests per second allowed to each principal (off by default); see [`RateLimit`].
    pub rate_limit: Option<RateLimit>,
    /// Proxies (addresses or networks) whose `X-Forwarded-For` names the client (empty by default: nobody's, the
    /// socket's peer is the client). An unauthenticated peer's quotas (sessions, the replay window, the rate limit,
    /// the WebSocket inbound rate) are keyed on its client address, so list only proxies you run: a listed address
    /// can make its requests count against any client it names.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// JWT access tokens accepted beside `tokens`, judged against an issuer's keys (default none).
    pub jwt: Option<ldp_edge::JwtAuth>,
    /// The OAuth protected resource the server is: challenges naming its metadata, scopes per endpoint (default
    /// none). Its metadata routes are the caller's to serve ([`ldp_edge::metadata_routes`]).
    pub oauth: Option<ldp_edge::ProtectedResource>,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        Self {
            max_body: 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            tokens: HashMap::new(),
            limits: ConnectionLimits::default(),
            rate_limit: None,
            trusted_proxies: Vec::new(),
            jwt: None,
            oauth: None,
        }
    }
}

/// The server's shared state: the runtime, the configuration and the pre-encoded discovery documents.
///
/// Cloned into every request (axum's `State`): one reference count, not one per part.
#[derive(Clone)]
pub struct HttpState {
    inner: Arc<StateParts>,
}

/// What [`HttpState`] shares.
struct StateParts {
    runtime: DelegateRuntime,
    config: HttpServerConfig,
    auth: BearerAuth,
    card: Bytes,
    capabilities: Bytes,
    metrics: HttpMetrics,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl HttpState {
    /// State serving `runtime` with `config`.
    pub fn new(runtime: DelegateRuntime, config: HttpServerConfig) -> Self {
        let card = runtime.card();
        let auth =
            BearerAuth::from_map(&config.tokens).with_jwt(config.jwt.clone()).with_resource(config.oauth.clone());
        let inner = StateParts {
            card: Bytes::from(encode_card(&card)),
            capabilities: Bytes::from(encode_capabilities(&card)),
            runtime,
            config,
            auth,
            metrics: HttpMetrics::new(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// The metrics `/metrics` serves.
    pub fn metrics(&self) -> &HttpMetrics {
        &self.inner.metrics
    }

    /// The runtime behind the server.
    pub fn runtime(&self) -> &DelegateRuntime {
        &self.inner.runtime
    }

    /// The configuration.
    pub fn config(&self) -> &HttpServerConfig {
        &self.inner.config
    }

    /// The authentication table (for other transports sharing this server).
    pub fn auth(&self) -> &BearerAuth {
        &self.inner.auth
    }

    /// Handles one message, bounded by the request timeout. The handling runs within the request's own future,
    /// with no task spawned (most messages are answered in one poll); if that future is dropped before the handling
    /// ends (the peer hung up, the request timed out), the rest runs on a task of its own, so
    /// that a task is never abandoned half-way: it completes and is recorded even if nobody reads the answer.
    pub async fn dispatch(
        &self,
        peer: PeerContext,
        bytes: Bytes,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<RuntimeResponse, HttpError> {
        let rt = self.inner.runtime.clone();
        // The handling owns what it needs ('static), so that it can outlive this request.
        let job = FinishOnDrop::new(async move { rt.handle_in_place(&peer, &bytes, updates).await }.in_current_span());
        match tokio::time::timeout(self.inner.config.request_timeout, job).await {
            Ok(Ok(resp)) => {
                if let RuntimeResponse::Reply(env) = &resp {
                    self.inner.metrics.record_answer(env);
                }
                Ok(resp)
            }
            Ok(Err(Panicked)) => Err(HttpError::Internal("message handler failed: it panicked".into())),
            Err(_) => Err(HttpError::Timeout(self.inner.config.request_timeout)),
        }
    }
}

/// A future polled in place that, if dropped before it ends, finishes on a task of its own. A panic while it is
/// polled is caught and answered [`Panicked`] instead of taking the connection down.
struct FinishOnDrop<T: Send + 'static> {
    job: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
}

/// A [`FinishOnDrop`] job panicked.
#[derive(Debug)]
struct Panicked;

impl<T: Send + 'static> FinishOnDrop<T> {
    fn new(job: impl Future<Output = T> + Send + 'static) -> Self {
        Self { job: Some(Box::pin(job)) }
    }
}

impl<T: Send + 'static> Future for FinishOnDrop<T> {
    type Output = Result<T, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(job) = self.job.as_mut() else {
            return Poll::Ready(Err(Panicked));
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| job.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => {
                self.job = None;
                Poll::Ready(Ok(out))
            }
            Err(_) => {
                // A job that panicked is not resumed, here or on a task.
                self.job = None;
                Poll::Ready(Err(Panicked))
            }
        }
    }
}

impl<T: Send + 'static> Drop for FinishOnDrop<T> {
    fn drop(&mut self) {
        if let Some(job) = self.job.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = job.await;
            });
        }
    }
}

impl FromRef<HttpState> for BearerAuth {
    fn from_ref(state: &HttpState) -> Self {
        state.inner.auth.clone()
    }
}

fn encode_card(card: &IdentityCard) -> Vec<u8> {
    serde_json::to_vec(card).unwrap_or_else(|_| b"{}".to_vec())
}

fn encode_capabilities(card: &IdentityCard) -> Vec<u8> {
    let doc = serde_json::json!({
        "capabilities": card.capabilities,
        "supported_modes": card.supported_payload_modes,
    });
    serde_json::to_vec(&doc).unwrap_or_else(|_| b"{}".to_vec())
}

/// The LDP HTTP routes with their layers: discovery, messages, streaming.
pub fn router(state: HttpState) -> Router {
    router_with(state, Router::new())
}

/// [`router`] plus `extra` routes (e.g. the WebSocket binding's `/ldp/ws`), which get the same bearer
/// authentication (a [`PeerContext`] extension), body limit and tracing as `/ldp/messages`, and can extract the
/// [`HttpState`].
pub fn router_with(state: HttpState, extra: Router<HttpState>) -> Router {
    let protected = Router::new()
        .route(MESSAGES, post(messages))
        .route(STREAM, post(stream))
        .merge(extra)
        .route_layer(BearerLayer::new(state.inner.auth.clone()));
    let config = &state.inner.config;
    let edge = Arc::new(EdgeChecks {
        proxies: TrustedProxies::new(&config.trusted_proxies),
        limiter: config.rate_limit.map(|rate| Limiter::new(rate, state.inner.auth.clone())),
        max_body: config.max_body,
    });
    // The request's tracing, the edge checks and the body limit, outermost first, as one layer: each layer a router
    // applies wraps every route in one more boxed route, which each request clones (with all it wraps) and calls.
    let layers = tower::ServiceBuilder::new()
        .layer(TraceLayer::new_for_http())
        .layer(EdgeLayer(edge))
        .layer(DefaultBodyLimit::max(config.max_body));
    Router::new()
        .route(HEALTHZ, get(healthz))
        .route(READYZ, get(readyz))
        .route(METRICS, get(metrics))
        .route(WELL_KNOWN_IDENTITY, get(identity))
        .route(IDENTITY, get(identity))
        .route(CAPABILITIES, get(capabilities))
        .merge(protected)
        .fallback(not_found)
        .layer(layers)
        .with_state(state)
}

/// What every request passes before any route: see [`Edge`].
struct EdgeChecks {
    proxies: TrustedProxies,
    limiter: Option<Limiter>,
    max_body: usize,
}

/// The layer of [`Edge`].
#[derive(Clone)]
struct EdgeLayer(Arc<EdgeChecks>);

impl<S> tower::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge { checks: Arc::clone(&self.0), inner }
    }
}

/// The checks every request passes before any route, in one hand-written layer (an axum `from_fn` middleware costs
/// every request a copy of the route it wraps, a `Next` and a boxed future): the client's address
/// ([`ldp_edge::identify`]), so that everything after it knows it; then the rate limit, before the body is read, so
/// that a request over its quota costs no body read and no work; then a declared body size over the limit
/// ([`refuse_declared_oversize`]). A request that passes goes to the route as it is.
#[derive(Clone)]
struct Edge<S> {
    checks: Arc<EdgeChecks>,
    inner: S,
}

impl<S> tower::Service<axum::extract::Request> for Edge<S>
where
    S: tower::Service<axum::extract::Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    // Boxed only for a refusal, off the path of a request that passes.
    type Future = futures::future::Either<S::Future, futures::future::BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::extract::Request) -> Self::Future {
        use futures::future::Either;
        let refused = |resp: Response| -> Self::Future { Either::Right(Box::pin(std::future::ready(Ok(resp)))) };
        let checks = &self.checks;
        if let Err(e) = identify(&checks.proxies, &mut request) {
            return refused(e.into_response());
        }
        if let Some(limiter) = &checks.limiter
            && let Some(refusal) = limiter.refusal(&request)
        {
            return refused(refusal);
        }
        if declared_length(request.headers()).is_some_and(|n| n > checks.max_body as u64) {
            let limit = checks.max_body;
            return Either::Right(Box::pin(async move { Ok(refuse_declared_oversize(request, limit).await) }));
        }
        Either::Left(self.inner.call(request))
    }
}

/// A request's `Content-Length`, when it declares a valid one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok())
}

/// Serves `router(state)` on `listener` until `shutdown` resolves, then drains in-flight requests. Also reaps
/// expired sessions while it runs. The connection limits are the state's [`HttpServerConfig::limits`].
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.inner.config.limits.clone();
    serve_router_with_limits(listener, state.inner.runtime.clone(), router(state), limits, shutdown).await
}

/// A server started with [`spawn`]: its URL, and a handle to stop it.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    url: String,
    stop: Option<oneshot::Sender<()>>,
    join: JoinHandle<std::io::Result<()>>,
    stats: ConnectionStats,
}

impl ServerHandle {
    /// A handle for a server already running on `join`, which stops when `stop` is sent.
    #[cfg(feature = "tls")]
    pub(crate) fn running(
        addr: SocketAddr,
        url: String,
        stop: oneshot::Sender<()>,
        join: JoinHandle<std::io::Result<()>>,
        stats: ConnectionStats,
    ) -> Self {
        Self { addr, url, stop: Some(stop), join, stats }
    }

    /// The server's connection counts (open now, and the cap).
    pub fn connections(&self) -> &ConnectionStats {
        &self.stats
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` (`https://<addr>` for a server started with `spawn_tls`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops accepting, drains in-flight requests and waits for the server to end.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        ldp_edge::stop_and_join(self.stop.take(), &mut self.join).await
    }
}

/// Binds `addr` (use `127.0.0.1:0` for a free port) and serves `state` on a background task.
pub async fn spawn(addr: impl tokio::net::ToSocketAddrs, state: HttpState) -> std::io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = state.inner.config.limits.clone();
    let stats = ConnectionStats::new(limits.max_connections);
    let (runtime, app) = (state.inner.runtime.clone(), router(state));
    let join = tokio::spawn(serve_established(listener, Plain, runtime, app, limits, stats.clone(), async move {
        let _ = stopped.await;
    }));
    Ok(ServerHandle { addr, url: format!("http://{addr}"), stop: Some(stop), join, stats })
}

async fn identity(State(state): State<HttpState>) -> Response {
    json_response(StatusCode::OK, state.inner.card.to_vec())
}

async fn capabilities(State(state): State<HttpState>) -> Response {
    json_response(StatusCode::OK, state.inner.capabilities.to_vec())
}

/// How much of a body declared over the limit is read and discarded before answering 413.
const OVERSIZE_DRAIN_BYTES: u64 = 64 * 1024 * 1024;
/// How long that draining may take.
const OVERSIZE_DRAIN_TIME: Duration = Duration::from_secs(10);

/// Answers a request whose `Content-Length` exceeds the limit with 413 `MESSAGE_TOO_LARGE`, after reading (and
/// discarding) what the client sends, within a bound. A server that answers and closes while the client is still
/// uploading leaves most HTTP clients (hyper, httpx) with a broken pipe instead of the typed answer; draining lets them
/// finish writing and read it, and keeps the connection usable.
async fn refuse_declared_oversize(request: axum::extract::Request, limit: usize) -> Response {
    let declared = declared_length(request.headers()).unwrap_or(u64::MAX);
    if declared <= OVERSIZE_DRAIN_BYTES {
        use futures::StreamExt;
        let mut data = request.into_body().into_data_stream();
        let drain = async {
            let mut read: u64 = 0;
            while let Some(Ok(chunk)) = data.next().await {
                read += chunk.len() as u64;
                if read > OVERSIZE_DRAIN_BYTES {
                    break;
                }
            }
        };
        // A client that stalls mid-upload gets the answer after the bound, and the connection closes.
        let _ = tokio::time::timeout(OVERSIZE_DRAIN_TIME, drain).await;
    }
    HttpError::PayloadTooLarge { limit }.into_response()
}

async fn not_found() -> Response {
    let error = ldp_types::LdpError::runtime("NOT_FOUND", "no such LDP endpoint").with_retryable(false);
    json_response(StatusCode::NOT_FOUND, error_body(&error))
}

/// Checks the content type and reads the body.
fn accept_body(
    state: &HttpState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, HttpError> {
    let ctype = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("<binary>")).unwrap_or("");
    let essence = ctype.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(HttpError::UnsupportedMediaType(ctype.to_owned()));
    }
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            HttpError::PayloadTooLarge { limit: state.inner.config.max_body }
        } else if let Some(slow) = body_too_slow(&rejection) {
            HttpError::from(slow)
        } else {
            HttpError::UnreadableBody
        }
    })
}

/// The server span of one request: a root of its own (never the child of whatever span the connection runs in),
/// whose parent is the caller's span when the request names one in `traceparent`.
fn message_span(path: &'static str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "ldp.message",
        otel.name = format!("POST {path}"),
        otel.kind = "server",
        otel.status_code = Empty,
        path,
        status = Empty,
        reply = Empty,
        code = Empty
    );
    trace_context::adopt_from_headers(&span, headers);
    span
}

fn record(span: &tracing::Span, status: StatusCode, reply: Option<&Envelope>, code: Option<&str>) {
    span.record("status", status.as_u16());
    if let Some(env) = reply {
        span.record("reply", env.body.type_name());
    }
    if let Some(code) = code {
        span.record("code", code);
        span.record("otel.status_code", "ERROR");
    }
}

/// The answer to one message, as `/ldp/messages` sends it.
fn answer(resp: RuntimeResponse) -> Result<Response, HttpError> {
    match resp {
        RuntimeResponse::Reply(env) => {
            let body = env.to_vec().map_err(|e| HttpError::Internal(format!("encoding the reply: {e}")))?;
            Ok(json_response(StatusCode::OK, body))
        }
        RuntimeResponse::Accepted => Ok(StatusCode::ACCEPTED.into_response()),
        RuntimeResponse::Refused(refusal) => Err((*refusal).into()),
    }
}

/// A message request's parts: its peer, its headers (moved out, not copied as the `HeaderMap` extractor does) and
/// its body, read under the body limit.
async fn message_parts(
    state: &HttpState,
    request: axum::extract::Request,
) -> (Option<Extension<PeerContext>>, HeaderMap, Result<Bytes, BytesRejection>) {
    use axum::extract::FromRequest;
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let peer = parts.extensions.remove::<PeerContext>().map(Extension);
    // The body limit travels in the extensions, which stay with the body.
    let body = Bytes::from_request(axum::extract::Request::from_parts(parts, body), state).await;
    (peer, headers, body)
}

async fn messages(State(state): State<HttpState>, request: axum::extract::Request) -> Response {
    let started = std::time::Instant::now();
    let (peer, headers, body) = message_parts(&state, request).await;
    let span = message_span(MESSAGES, &headers);
    let mut reply = None;
    let result = async {
        let bytes = accept_body(&state, &headers, body)?;
        let peer = peer.map(|Extension(p)| p).unwrap_or_default();
        let resp = state.dispatch(peer, bytes, None).await?;
        reply = reply_type(&resp);
        answer(resp)
    }
    .instrument(span.clone())
    .await;
    let mut refused = None;
    let resp = result.unwrap_or_else(|e| {
        let code = e.to_ldp_error().code;
        let resp = e.into_response();
        record(&span, resp.status(), None, Some(code.as_str()));
        refused = Some(code);
        resp
    });
    span.record("status", resp.status().as_u16());
    state.inner.metrics.observe(MESSAGES, reply, resp.status().as_u16(), refused.as_ref(), started.elapsed());
    resp
}

/// The message type of the answer, as a metrics label.
fn reply_type(resp: &RuntimeResponse) -> Option<&'static str> {
    let env = match resp {
        RuntimeResponse::Reply(env) => Some(&**env),
        RuntimeResponse::Refused(refusal) => refusal.reply.as_ref(),
        _ => None,
    };
    env.map(|env| ldp_edge::reply_label(Some(env.body.type_name())))
}

/// `GET /healthz`: the process answers.
async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// How long `/readyz` waits for the session machine.
const READY_WITHIN: Duration = Duration::from_secs(2);

/// `GET /readyz`: the session machine answers within [`READY_WITHIN`] (a wedged or poisoned lock is not ready).
async fn readyz(State(state): State<HttpState>) -> Response {
    let runtime = state.inner.runtime.clone();
    let probe = tokio::task::spawn_blocking(move || runtime.gauges());
    match tokio::time::timeout(READY_WITHIN, probe).await {
        Ok(Ok(_)) => (StatusCode::OK, "ready\n").into_response(),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "not ready: the session machine does not answer\n").into_response(),
    }
}

/// `GET /metrics`: the Prometheus / OpenMetrics text ([`crate::metrics`]).
async fn metrics(State(state): State<HttpState>) -> Response {
    let runtime = state.inner.runtime.clone();
    let gauges = tokio::task::spawn_blocking(move || runtime.gauges());
    let gauges = match tokio::time::timeout(READY_WITHIN, gauges).await {
        Ok(Ok(gauges)) => gauges,
        _ => return (StatusCode::SERVICE_UNAVAILABLE, "the session machine does not answer\n").into_response(),
    };
    let text = state.inner.metrics.encode(&gauges);
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response()
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

fn envelope_event(env: &Envelope) -> Event {
    match env.to_json() {
        Ok(json) => Event::default().event("envelope").id(env.message_id.clone()).data(json),
        Err(e) => error_event(&HttpError::Internal(format!("encoding an event: {e}"))),
    }
}

/// A refusal once streaming: its reply envelope when the machine made one, else its error.
fn refusal_event(refusal: Refusal) -> Event {
    match &refusal.reply {
        Some(env) => envelope_event(env),
        None => error_event(&refusal.into()),
    }
}

fn error_event(error: &HttpError) -> Event {
    let body = String::from_utf8(error_body(&error.to_ldp_error())).unwrap_or_default();
    Event::default().event("error").data(body)
}

async fn stream(State(state): State<HttpState>, request: axum::extract::Request) -> Response {
    let (peer, headers, body) = message_parts(&state, request).await;
    let span = message_span(STREAM, &headers);
    match start_stream(state, peer, headers, body).instrument(span.clone()).await {
        Ok(events) => {
            record(&span, StatusCode::OK, None, None);
            Sse::new(events).keep_alive(KeepAlive::default()).into_response()
        }
        Err(e) => {
            let code = e.to_ldp_error().code;
            let resp = e.into_response();
            record(&span, resp.status(), None, Some(code.as_str()));
            resp
        }
    }
}

/// Runs the message; until the first TASK_UPDATE arrives nothing is committed, so a refusal still gets its proper
/// HTTP status. After that the answer is an SSE stream: the updates, then the final envelope.
async fn start_stream(
    state: HttpState,
    peer: Option<Extension<PeerContext>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<EventStream, HttpError> {
    let bytes = accept_body(&state, &headers, body)?;
    let peer = peer.map(|Extension(p)| p).unwrap_or_default();
    let (tx, mut updates) = mpsc::channel::<Envelope>(64);
    let timeout = state.inner.config.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    // On a task of its own: the delegate must go on producing updates while they are forwarded below.
    let job = tokio::spawn(async move { state.dispatch(peer, bytes, Some(tx)).await }.in_current_span());
    let mut job = Box::pin(async move {
        job.await.unwrap_or_else(|e| Err(HttpError::Internal(format!("message handler failed: {e}"))))
    });
    let first = tokio::select! {
        biased;
        Some(update) = updates.recv() => update,
        done = &mut job => {
            // Finished before any update: answer exactly like /ldp/messages would, but as one event.
            let mut events: Vec<Event> = Vec::new();
            while let Ok(update) = updates.try_recv() {
                events.push(envelope_event(&update));
            }
            match done? {
                RuntimeResponse::Reply(env) => events.push(envelope_event(&env)),
                RuntimeResponse::Accepted => {}
                RuntimeResponse::Refused(refusal) if events.is_empty() => return Err((*refusal).into()),
                RuntimeResponse::Refused(refusal) => events.push(refusal_event(*refusal)),
            }
            let events = futures::stream::iter(events.into_iter().map(Ok));
            return Ok(Box::pin(events));
        }
    };
    // Committed to streaming: forward updates, then the final envelope, through a channel the response reads.
    let (out, rx) = mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let mut next = Some(first);
        while let Some(update) = next {
            if out.send(envelope_event(&update)).await.is_err() {
                // The peer hung up; the task still completes on its own (see `dispatch`).
                return;
            }
            next = tokio::select! {
                u = updates.recv() => u,
                _ = tokio::time::sleep_until(deadline) => None,
            };
        }
        let last = match tokio::time::timeout_at(deadline, job).await {
            Ok(Ok(RuntimeResponse::Reply(env))) => envelope_event(&env),
            Ok(Ok(RuntimeResponse::Accepted)) => return,
            Ok(Ok(RuntimeResponse::Refused(refusal))) => refusal_event(*refusal),
            Ok(Err(e)) => error_event(&e),
            Err(_) => error_event(&HttpError::Timeout(timeout)),
        };
        let _ = out.send(last).await;
    });
    let events = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) });
    Ok(Box::pin(events))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    /// A handling whose request is dropped half-way still runs to its end, on a task of its own.
    #[tokio::test]
    async fn a_dropped_handling_finishes_on_its_own_task() {
        let (release, released) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<&str>();
        let job = FinishOnDrop::new(async move {
            let _ = released.await;
            let _ = done.send("finished");
        });
        // Polled once (pending on `released`), then dropped, as when the peer hangs up.
        let polled = tokio::time::timeout(Duration::from_millis(20), job).await;
        assert!(polled.is_err(), "the job cannot end before it is released");
        release.send(()).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), finished).await;
        assert_eq!(end.unwrap().unwrap(), "finished");
    }

    /// A handling that panics is answered, not resumed, and leaves the caller's task standing.
    #[tokio::test]
    async fn a_panicking_handling_is_answered_panicked() {
        let job = FinishOnDrop::new(async {
            if std::hint::black_box(true) {
                panic!("a bug in the handling");
            }
            7
        });
        assert!(matches!(job.await, Err(Panicked)));
        let job = FinishOnDrop::new(async { 7 });
        assert_eq!(job.await.unwrap(), 7);
    }
}
