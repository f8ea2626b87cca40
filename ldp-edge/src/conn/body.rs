//! Per request: the service that times a request's body and bounds its rate, and the refusals with `Retry-After`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body::Frame;
use http_body_util::BodyExt;
use ldp_session::PeerContext;
use ldp_types::LdpError;
use tokio::time::Instant;
use tower::Service;

use crate::error::{HttpError, error_body};

use super::activity::{InFlight, RateWindow, Unread, Watched, body_read, lock, unread_body};
use super::{BoxError, ConnectionLimits, EstablishedPeer, REFUSAL_LINGER};

/// Largest rest of a request body read and thrown away after its handler answered without it, so that the
/// connection can serve the next request; a larger rest closes the connection instead.
const MAX_DRAINED_BODY: u64 = 64 * 1024;

/// The router, with each request's extensions holding the connection's `ConnectInfo<SocketAddr>` (and, for a
/// certificate-authenticated connection, its [`PeerContext`]), its body under the body deadline and minimum rate,
/// and its response tracked until sent.
#[derive(Clone)]
pub(super) struct PerRequest {
    pub(super) app: Router,
    pub(super) remote: SocketAddr,
    pub(super) peer: Option<EstablishedPeer>,
    pub(super) activity: Arc<Watched>,
    pub(super) limits: Arc<ConnectionLimits>,
}

impl Service<hyper::Request<hyper::body::Incoming>> for PerRequest {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        <Router as Service<Request>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity, &self.limits, !http_body::Body::is_end_stream(req.body()));
        let (limits, activity) = (Arc::clone(&self.limits), Arc::clone(&self.activity));
        // Reading such a body would ask the client for what the handler did not want (`100 Continue`). hyper
        // compares the value as this does (and keeps the last of several); any of them counts here, to be safe.
        let awaits_continue =
            req.headers().get_all(header::EXPECT).iter().any(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let mut req = req.map(|body| Body::new(LimitedBody::new(body, limits, activity, awaits_continue)));
        req.extensions_mut().insert(ConnectInfo(self.remote));
        if let Some((peer, principal)) = &self.peer {
            req.extensions_mut().insert(PeerContext {
                authenticated: Some(peer.clone()),
                principal: Some(principal.clone()),
                ..PeerContext::default()
            });
        }
        let future = self.app.call(req);
        let drain_wait = REFUSAL_LINGER.min(self.limits.body_timeout);
        Box::pin(async move {
            let Ok(mut resp) = future.await;
            if let Some(unread) = unread_body(&in_flight.activity) {
                // Left unread, the body would be drained by hyper only as far as it had arrived, and the connection
                // closed after the response without saying so: a client reusing it would lose its next request.
                let drained = match unread {
                    // Boxed: held inline, the rare drain would grow every request's future.
                    Unread::Dropped(rest) => Box::pin(drain(rest, drain_wait)).await,
                    Unread::Held => false,
                };
                if !drained {
                    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                // A handler that answered without reading its whole body has the request all the same.
                body_read(&in_flight.activity);
            }
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

/// Reads the rest of a body its handler did not want and throws it away: whether it ended within `wait` and
/// [`MAX_DRAINED_BODY`] bytes (the connection can then serve another request).
async fn drain(mut rest: hyper::body::Incoming, wait: Duration) -> bool {
    if http_body::Body::size_hint(&rest).lower() > MAX_DRAINED_BODY {
        return false;
    }
    let read = async {
        let mut seen = 0u64;
        while let Some(frame) = rest.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                seen = seen.saturating_add(data.len() as u64);
                if seen > MAX_DRAINED_BODY {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(wait, read).await.unwrap_or(false)
}

/// Why a request body was cut off.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyTooSlow {
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
/// marks the connection as no longer closable once it has been read. Dropped before its end, it leaves the rest
/// to the connection's activity, for [`PerRequest`] to drain.
pub(super) struct LimitedBody {
    /// `None` only once dropped.
    pub(super) inner: Option<hyper::body::Incoming>,
    /// The body ended (or failed): nothing is left to drain.
    pub(super) ended: bool,
    /// The client waits for `100 Continue` before sending the body, which draining would ask for.
    pub(super) awaits_continue: bool,
    pub(super) limits: Arc<ConnectionLimits>,
    pub(super) activity: Arc<Watched>,
    pub(super) deadline: Instant,
    /// `None` when the minimum rate is off.
    pub(super) window: Option<RateWindow>,
    pub(super) timer: Pin<Box<tokio::time::Sleep>>,
}

impl LimitedBody {
    pub(super) fn new(
        inner: hyper::body::Incoming,
        limits: Arc<ConnectionLimits>,
        activity: Arc<Watched>,
        awaits_continue: bool,
    ) -> Self {
        let now = Instant::now();
        let deadline = now + limits.body_timeout;
        let window = (limits.min_body_rate > 0).then(|| RateWindow::new(now, limits.min_rate_window));
        let next = window.map_or(deadline, |w| w.ends.min(deadline));
        let ended = http_body::Body::is_end_stream(&inner);
        let timer = Box::pin(tokio::time::sleep_until(next));
        Self { inner: Some(inner), ended, awaits_continue, limits, activity, deadline, window, timer }
    }

    pub(super) fn fail(&mut self, slow: BodyTooSlow) -> Poll<Option<Result<Frame<axum::body::Bytes>, BoxError>>> {
        self.ended = true;
        body_read(&self.activity);
        Poll::Ready(Some(Err(Box::new(slow))))
    }
}

impl http_body::Body for LimitedBody {
    type Data = axum::body::Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        if let Poll::Ready(frame) = Pin::new(&mut *inner).poll_frame(cx) {
            match &frame {
                Some(Ok(f)) => {
                    if let (Some(window), Some(data)) = (&mut this.window, f.data_ref()) {
                        window.bytes = window.bytes.saturating_add(data.len() as u64);
                    }
                    if inner.is_end_stream() {
                        this.ended = true;
                        body_read(&this.activity);
                    }
                }
                Some(Err(_)) | None => {
                    this.ended = true;
                    body_read(&this.activity);
                }
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
        self.inner.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.as_ref().map_or_else(|| http_body::SizeHint::with_exact(0), http_body::Body::size_hint)
    }
}

impl Drop for LimitedBody {
    fn drop(&mut self) {
        if !self.ended && !self.awaits_continue {
            lock(&self.activity).unread = self.inner.take();
        }
    }
}

/// The [`BodyTooSlow`] somewhere down the causes of `error` (a body-reading failure, as axum reports it), if any.
pub fn body_too_slow<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTooSlow> {
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
pub fn retry_after(secs: u64) -> HeaderValue {
    HeaderValue::from(secs.max(1))
}

/// A JSON error answer with `Retry-After`.
pub fn refusal_with_retry(status: StatusCode, error: &LdpError, secs: u64) -> Response {
    let mut resp = crate::json_response(status, error_body(error));
    resp.headers_mut().insert(header::RETRY_AFTER, retry_after(secs));
    resp
}
