//! The client side: [`WsTransport`] implements the session crate's `Transport` over one WebSocket connection that
//! carries any number of sessions, matches answers to requests, pushes TASK_UPDATEs to their submitter, keeps the
//! connection alive, and reconnects when it drops, reporting it to the initiator's driver
//! (`ldp_session::runtime::InitiatorDriver`), which resumes and times the tasks.
//!
//! - `options`: [`WsOptions`] and the TLS configuration;
//! - `pending`: the table of outstanding requests and the routing of server frames (to a caller, or to the driver
//!   whose status query or resubmission they answer);
//! - `connection`: opening a connection, and the task that runs it, reconnects with backoff and starts the resume;
//! - this module: the [`WsTransport`] handle and its `Transport` implementation.

mod connection;
mod options;
mod pending;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ldp_edge::trace_context::TraceHeaders;
use ldp_edge::{Credentials, RetryPolicy, fetch_identity, identity_urls};
use ldp_session::runtime::{InitiatorDriver, Transport};
use ldp_types::trace_context::{TRACEPARENT, TRACESTATE};
use ldp_types::{Body, Envelope, IdentityCard, LdpError, TaskSubmit, codes};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use self::connection::{Outgoing, Target, drive, open};
use self::options::http_client;
pub use self::options::{WsOptions, rustls_client_config};
use self::pending::{Entry, Inner, Kind, Pending, lock};
use crate::WS_PATH;
use crate::error::Error;

/// Counters of a [`WsTransport`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsStats {
    /// Connections opened (1 + reconnects).
    pub connections: u64,
    /// Server frames that matched no outstanding request (a duplicate would show up here).
    pub unmatched: u64,
    /// Outstanding tasks resumed after a reconnect.
    pub resumed: u64,
}

/// An LDP client transport over one WebSocket connection, shared by every session of a `Client`.
///
/// Each request is a text frame; the server's answer names it in its `in_reply_to` member (or, for results held
/// across a reconnect, by session and task id). TASK_UPDATEs pushed for a TASK_SUBMIT go to the `updates` channel of
/// its `exchange`. When the connection drops, the transport reconnects with backoff and hands the tasks in flight to
/// the initiator of the `Client` it carries (`Transport::attach`), which resumes them: a TASK_UPDATE status query
/// for each, which resumes the session on the server and makes it send the results it held, exactly once; a task
/// the server never received is submitted again ([`ldp_session::Initiator::handle_disconnect`]). Other requests
/// left unanswered by the dropped connection, and tasks of no attached initiator, fail with a non-retryable
/// `transport` error.
#[derive(Debug)]
pub struct WsTransport {
    inner: Arc<Inner>,
    outbound: mpsc::Sender<Outgoing>,
    identity_urls: Vec<String>,
    http: reqwest::Client,
    credentials: Credentials,
    request_timeout: Option<Duration>,
    /// The bound on the identity card's body too.
    max_message: usize,
    url: String,
}

/// The timeout of one identity request.
const IDENTITY_TIMEOUT: Duration = Duration::from_secs(30);

/// Removes a request's entry when its caller stops waiting, so an abandoned request leaves nothing behind.
struct Forget<'a> {
    inner: &'a Inner,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.inner.pending).remove(self.id);
    }
}

/// `ws://host:port/ldp/ws` from what the user gave: a `ws(s)://` URL (with or without the path), or the same
/// `http(s)://` base URL they would give the HTTP transport.
fn normalise(url: &str) -> Result<(String, String), Error> {
    let mut parsed = reqwest::Url::parse(url).map_err(|_| Error::InvalidUrl(url.to_owned()))?;
    let (ws_scheme, http_scheme) = match parsed.scheme() {
        "ws" | "http" => ("ws", "http"),
        "wss" | "https" => ("wss", "https"),
        _ => return Err(Error::InvalidUrl(url.to_owned())),
    };
    if !parsed.has_host() {
        return Err(Error::InvalidUrl(url.to_owned()));
    }
    let path = parsed.path().trim_end_matches('/').to_owned();
    let base_path = path.strip_suffix(WS_PATH).unwrap_or(&path).to_owned();
    parsed.set_path(&format!("{base_path}{WS_PATH}"));
    parsed.set_scheme(ws_scheme).map_err(|()| Error::InvalidUrl(url.to_owned()))?;
    let ws = parsed.to_string();
    parsed.set_path(&base_path);
    parsed.set_scheme(http_scheme).map_err(|()| Error::InvalidUrl(url.to_owned()))?;
    let http = parsed.as_str().trim_end_matches('/').to_owned();
    Ok((ws, http))
}

impl WsTransport {
    /// Opens a connection to `url` (`ws://host:port`, `ws://host:port/ldp/ws`, or the HTTP binding's
    /// `http://host:port`; `wss://` and `https://` for TLS) with `options` (a [`WsOptions`], or just the shared
    /// [`ConnectOptions`](crate::ConnectOptions)) and starts the task that drives it. Fails if the first connection
    /// cannot be made or the server refuses the upgrade (e.g. 401 for a missing token); later drops are repaired by
    /// reconnecting.
    pub async fn connect(url: impl AsRef<str>, options: impl Into<WsOptions>) -> Result<Self, Error> {
        let options = options.into();
        let (ws_url, http_base) = normalise(url.as_ref())?;
        let identity_urls = match &options.identity_url {
            Some(u) => vec![u.clone()],
            None => identity_urls(&http_base),
        };
        // Built for every scheme, so a bad PEM is reported whatever the URL.
        let tls = rustls_client_config(&options.connect.tls)?;
        let http = http_client(&options)?;
        let tls = ws_url.starts_with("wss:").then_some(tls);
        let target = Target { url: ws_url.clone(), options: options.clone(), tls };
        let (sink, stream) = open(&target).await.map_err(Error::Connect)?;
        let inner = Arc::new(Inner {
            pending: Mutex::new(Pending::default()),
            drivers: Default::default(),
            fatal: Mutex::new(None),
            connections: AtomicU64::new(1),
            unmatched: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            resume_grace: options.resume_grace,
            request_timeout: options.connect.request_timeout,
        });
        let (outbound, rx) = mpsc::channel(options.send_queue.max(1));
        tokio::spawn(drive(inner.clone(), target, sink, stream, rx));
        Ok(Self {
            inner,
            outbound,
            identity_urls,
            http,
            credentials: options.connect.credentials(),
            request_timeout: options.connect.request_timeout,
            max_message: options.connect.max_message,
            url: ws_url,
        })
    }

    /// The WebSocket URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Counters: connections opened, unmatched frames, resumed tasks.
    pub fn stats(&self) -> WsStats {
        WsStats {
            connections: self.inner.connections.load(Ordering::Relaxed),
            unmatched: self.inner.unmatched.load(Ordering::Relaxed),
            resumed: self.inner.resumed.load(Ordering::Relaxed),
        }
    }

    /// Requests sent and not yet answered.
    pub fn outstanding(&self) -> usize {
        lock(&self.inner.pending).by_id.len()
    }
}

#[async_trait]
impl Transport for WsTransport {
    /// `GET /.well-known/ldp-identity` on the server's HTTP side (RFC 2.3), falling back to `/ldp/identity` when it
    /// is missing: the HTTP client's fetch ([`ldp_edge::fetch_identity`]), with its default retries.
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        let retry = RetryPolicy::default();
        let token = self.credentials.current().await?;
        fetch_identity(&self.http, &self.identity_urls, token.as_deref(), IDENTITY_TIMEOUT, &retry, self.max_message)
            .await
    }

    /// Reports reconnects to `driver`, which resumes its tasks, and leaves it the answer deadlines it keeps.
    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        self.inner.attach(driver);
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        if let Some(error) = self.inner.fatal() {
            return Err(error);
        }
        let span = ldp_session::spans::send_span(envelope);
        let text: Arc<str> = traced_frame(envelope, &span).map_err(|e| LdpError::from(&e))?.into();
        let result = self.send_frame(envelope, text, updates).instrument(span.clone()).await;
        ldp_edge::trace_context::record_exchange(&span, &result);
        result
    }
}

/// The frame for `envelope`, with the `traceparent`/`tracestate` members of `span`'s context when adding them cannot
/// break its signature: an unsigned envelope, or one under the legacy `hmac-sha256`, which does not cover them. A
/// signature over the whole envelope (the JCS algorithms) would no longer verify, so such a request goes without them
/// (its sender may put them in before signing, then they are signed like any member).
fn traced_frame(envelope: &Envelope, span: &tracing::Span) -> Result<String, ldp_types::Error> {
    let unsigned_members =
        envelope.signature.is_none() || envelope.signature_algorithm.as_deref() == Some("hmac-sha256");
    let trace =
        if unsigned_members && !envelope.extensions.contains_key(TRACEPARENT) { TraceHeaders::of(span) } else { None };
    let Some(trace) = trace else { return envelope.to_json() };
    let mut env = envelope.clone();
    env.extensions.insert(TRACEPARENT.to_owned(), Value::String(trace.traceparent));
    if let Some(state) = trace.tracestate {
        env.extensions.insert(TRACESTATE.to_owned(), Value::String(state));
    }
    env.to_json()
}

impl WsTransport {
    async fn send_frame(
        &self,
        envelope: &Envelope,
        text: Arc<str>,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let id = envelope.message_id.clone();
        let (tx, rx) = oneshot::channel();
        let kind = match &envelope.body {
            Body::TaskSubmit(TaskSubmit { task_id, .. }) => {
                Kind::Submit { session: envelope.session_id.clone(), task: task_id.clone() }
            }
            _ => Kind::Other,
        };
        {
            let mut pending = lock(&self.inner.pending);
            let key = match &kind {
                Kind::Submit { session, task, .. } => Some((session.clone(), task.clone())),
                _ => None,
            };
            if let Some(old) = pending.by_id.insert(id.clone(), Entry { kind, reply: Some(tx), updates, sent_on: 0 })
                && let Some(reply) = old.reply
            {
                let error = LdpError::runtime(codes::DUPLICATE_TASK, "another request reused this message id")
                    .with_retryable(false);
                let _ = reply.send(Err(error));
            }
            if let Some(key) = key {
                pending.by_task.insert(key, id.clone());
            }
        }
        let _forget = Forget { inner: &self.inner, id: &id };
        self.outbound.send(Outgoing { id: id.clone(), text }).await.map_err(|_| closed(&self.inner))?;
        // A proposal or task of an attached initiator waits under its driver's deadline (the same timeout); other
        // messages under this transport's own timer.
        let timer = if self.inner.keeps_deadline(envelope) { None } else { self.request_timeout };
        let answer = match timer {
            Some(limit) => match tokio::time::timeout(limit, rx).await {
                Ok(a) => a,
                Err(_) => {
                    return Err(LdpError::transport(codes::TIMEOUT, format!("no answer within {limit:?}"))
                        .with_retryable(false));
                }
            },
            None => rx.await,
        };
        answer.map_err(|_| closed(&self.inner))?
    }
}

fn closed(inner: &Inner) -> LdpError {
    inner.fatal().unwrap_or_else(|| {
        LdpError::transport(codes::TRANSPORT_ERROR, "the connection task ended").with_retryable(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalised() {
        let (ws, http) = normalise("http://127.0.0.1:8090").unwrap();
        assert_eq!(ws, "ws://127.0.0.1:8090/ldp/ws");
        assert_eq!(http, "http://127.0.0.1:8090");
        let (ws, http) = normalise("ws://h:1/ldp/ws").unwrap();
        assert_eq!((ws.as_str(), http.as_str()), ("ws://h:1/ldp/ws", "http://h:1"));
        let (ws, http) = normalise("wss://h/base/").unwrap();
        assert_eq!((ws.as_str(), http.as_str()), ("wss://h/base/ldp/ws", "https://h/base"));
        assert!(normalise("ftp://h").is_err());
        assert!(normalise("nonsense").is_err());
    }
}
