//! The client side: [`WsTransport`] implements the session crate's `Transport` over one WebSocket connection that
//! carries any number of sessions, matches answers to requests, pushes TASK_UPDATEs to their submitter, keeps the
//! connection alive, and reconnects and resumes when it drops.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Sink, SinkExt, Stream, StreamExt};
use ldp_session::runtime::Transport;
use ldp_session::{IdSource, SeededIds, SystemClock, WallClock};
use ldp_transport_http::trace_context::TraceHeaders;
use ldp_transport_http::{ClientTls, Error as HttpError};
use ldp_types::signing::SigningKey;
use ldp_types::trace_context::{TRACEPARENT, TRACESTATE};
use ldp_types::{Body, Envelope, ErrorCategory, IdentityCard, LdpError, PayloadMode, TaskSubmit, TaskUpdate, codes};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tracing::Instrument;

use crate::error::Error;
use crate::server::WS_PATH;
use crate::wire::{CloseFrame, Head, IN_REPLY_TO, Message, WireError, close_code, is_task_end};

/// Reconnection policy: exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reconnect {
    /// Attempts after a connection drops before the outstanding requests fail (the next request tries again).
    pub max_attempts: u32,
    /// Wait before the first attempt; doubles on each further attempt.
    pub initial_backoff: Duration,
    /// Upper bound of one wait.
    pub max_backoff: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self { max_attempts: 10, initial_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(5) }
    }
}

impl Reconnect {
    /// Never reconnect: a dropped connection fails the outstanding requests.
    pub fn never() -> Self {
        Self { max_attempts: 0, ..Self::default() }
    }

    /// The wait before attempt `attempt` (0-based): exponential, capped, half of it random.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.initial_backoff.saturating_mul(2u32.saturating_pow(attempt.min(31)));
        let capped = exp.min(self.max_backoff);
        let half = capped / 2;
        let half_ns = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        // A randomly keyed hash of the clock is random enough to keep clients from retrying in lockstep.
        let noise = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
        half + Duration::from_nanos(noise.checked_rem(half_ns.saturating_add(1)).unwrap_or(0))
    }
}

/// Client settings of [`WsTransport`].
#[derive(Debug, Clone)]
pub struct WsOptions {
    token: Option<String>,
    identity_url: Option<String>,
    ping_interval: Duration,
    idle_timeout: Duration,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
    max_message: usize,
    send_queue: usize,
    reconnect: Reconnect,
    resume_grace: Duration,
    signing_key: Option<SigningKey>,
    tls: ClientTls,
}

impl Default for WsOptions {
    fn default() -> Self {
        Self {
            token: None,
            identity_url: None,
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            connect_timeout: Duration::from_secs(5),
            request_timeout: None,
            max_message: 16 * 1024 * 1024,
            send_queue: 256,
            reconnect: Reconnect::default(),
            resume_grace: Duration::from_secs(5),
            signing_key: None,
            tls: ClientTls::default(),
        }
    }
}

impl WsOptions {
    /// Signs the status queries the client itself sends after a reconnect (the messages of the session layer are
    /// signed by it). Use the same key as the initiator when the server requires signed messages.
    pub fn signing_key(mut self, key: SigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// Sends `Authorization: Bearer <token>` on the upgrade request (and the identity request).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Where `identity()` fetches the identity card (default: `/.well-known/ldp-identity` on the same host, over
    /// `http` for `ws` and `https` for `wss`).
    pub fn identity_url(mut self, url: impl Into<String>) -> Self {
        self.identity_url = Some(url.into());
        self
    }

    /// Interval of the client's pings (default 15 s).
    pub fn ping_interval(mut self, every: Duration) -> Self {
        self.ping_interval = every;
        self
    }

    /// A connection on which nothing arrives (not even a pong) for this long is dead and is replaced (default 45 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Timeout of opening one connection, handshake included (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest wait for one answer, task execution included (default: none; long tasks are what WebSocket is for,
    /// and a dead connection is detected by the keepalive).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Largest message accepted from the server (default 16 MiB).
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Messages waiting to be written (default 256); callers wait when it is full.
    pub fn send_queue(mut self, frames: usize) -> Self {
        self.send_queue = frames;
        self
    }

    /// The reconnection policy.
    pub fn reconnect(mut self, policy: Reconnect) -> Self {
        self.reconnect = policy;
        self
    }

    /// After a resume, how long to wait for the result of a task the server reports as already ended before
    /// concluding that the result was lost with the old connection (default 5 s).
    pub fn resume_grace(mut self, grace: Duration) -> Self {
        self.resume_grace = grace;
        self
    }

    /// Trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks) for `wss://` URLs and the identity
    /// request over `https://`, in addition to the built-in web PKI roots: e.g. a private CA, or a self-signed server
    /// certificate in tests. Repeatable. A bad PEM makes [`WsTransport::connect`] fail with [`Error::Tls`].
    pub fn tls_root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls = self.tls.with_root_certificate_pem(pem);
        self
    }

    /// Presents this client certificate for mutual TLS (on the WebSocket and the identity request): `cert_chain`
    /// holds the certificate first, then any intermediates; `key` its private key (PKCS#8, PKCS#1 or SEC1), all PEM.
    /// A bad PEM makes [`WsTransport::connect`] fail with [`Error::Tls`].
    pub fn tls_client_identity_pem(mut self, cert_chain: &[u8], key: &[u8]) -> Self {
        self.tls = self.tls.with_client_identity_pem(cert_chain, key);
        self
    }

    /// Replaces the TLS settings with `tls` (roots and client identity), e.g. one shared with an HTTP client.
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.tls = tls;
        self
    }
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{what}: {e}"))
}

/// The rustls client configuration for `wss://` from `tls`: the web PKI roots plus its roots, and its client
/// identity. The `ring` provider is chosen explicitly so no process-wide default is needed. For clients that dial
/// `wss://` themselves (e.g. with `tokio_tungstenite::connect_async_tls_with_config`) and should trust exactly what
/// [`WsTransport`] trusts. Fails with [`Error::Tls`] on a bad PEM text.
pub fn rustls_client_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for pem in tls.root_certificates_pem() {
        let mut added = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| tls_error("root certificate", e))?;
            roots.add(cert).map_err(|e| tls_error("root certificate", e))?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Tls("root certificate: no PEM CERTIFICATE block".into()));
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("tls setup", e))?
        .with_root_certificates(roots);
    let config = match tls.client_identity_pem() {
        Some((chain, key)) => {
            let certs = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_error("client certificate", e))?;
            if certs.is_empty() {
                return Err(Error::Tls("client certificate: no PEM CERTIFICATE block".into()));
            }
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls_error("client key", e))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| tls_error("client identity", e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The client for the identity request, trusting the same roots and presenting the same identity.
fn http_client(opts: &WsOptions) -> Result<reqwest::Client, Error> {
    let builder = reqwest::Client::builder().connect_timeout(opts.connect_timeout);
    let builder = opts.tls.configure(builder).map_err(|e| match e {
        HttpError::Tls(message) => Error::Tls(message),
        other => Error::Tls(other.to_string()),
    })?;
    builder.build().map_err(|e| Error::Connect(LdpError::transport(codes::TRANSPORT_ERROR, e.to_string())))
}

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

type Answer = Result<Option<Value>, LdpError>;

/// Size of the connection's read and write buffers.
const IO_BUFFER: usize = 16 * 1024;

#[derive(Debug)]
enum Kind {
    Submit {
        session: String,
        task: String,
        from: String,
        to: String,
        mode: PayloadMode,
        resent: bool,
    },
    /// A status query sent after a reconnect on behalf of the submit with this message id.
    Resume {
        submit: String,
    },
    Other,
}

#[derive(Debug)]
struct Entry {
    kind: Kind,
    reply: Option<oneshot::Sender<Answer>>,
    updates: Option<mpsc::Sender<Envelope>>,
    text: Option<Arc<str>>,
    /// The connection generation it was written on (0: not yet written).
    sent_on: u64,
}

#[derive(Debug, Default)]
struct Pending {
    by_id: HashMap<String, Entry>,
    by_task: HashMap<(String, String), String>,
}

impl Pending {
    fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.by_id.remove(id)?;
        if let Kind::Submit { session, task, .. } = &entry.kind {
            let key = (session.clone(), task.clone());
            if self.by_task.get(&key).is_some_and(|i| i == id) {
                self.by_task.remove(&key);
            }
        }
        Some(entry)
    }

    fn complete(&mut self, id: &str, answer: Answer) -> bool {
        match self.remove(id) {
            Some(Entry { reply: Some(tx), .. }) => {
                // The caller may have stopped waiting; then nobody needs the answer.
                let _ = tx.send(answer);
                true
            }
            Some(_) => true,
            None => false,
        }
    }
}

#[derive(Debug)]
struct Inner {
    pending: Mutex<Pending>,
    ids: Mutex<SeededIds>,
    fatal: Mutex<Option<LdpError>>,
    connections: AtomicU64,
    unmatched: AtomicU64,
    resumed: AtomicU64,
    resume_grace: Duration,
    signing_key: Option<SigningKey>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section completes its mutation before anything that could panic; recover from poisoning.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lost(why: &str) -> LdpError {
    // Not retryable: the message may have been processed before the connection went.
    LdpError::transport(codes::TRANSPORT_ERROR, format!("connection lost before the answer: {why}"))
        .with_retryable(false)
}

impl Inner {
    fn fatal(&self) -> Option<LdpError> {
        lock(&self.fatal).clone()
    }

    /// Marks a queued request as written on `generation`; false when nobody waits for it any more.
    fn mark_sent(&self, id: &str, generation: u64) -> bool {
        match lock(&self.pending).by_id.get_mut(id) {
            Some(e) => {
                e.sent_on = generation;
                true
            }
            None => false,
        }
    }

    fn fail_all(&self, error: &LdpError) {
        let mut pending = lock(&self.pending);
        let ids: Vec<String> = pending.by_id.keys().cloned().collect();
        for id in ids {
            pending.complete(&id, Err(error.clone()));
        }
    }

    /// After a reconnect: a status query for every task written on an earlier connection (it resumes the session
    /// and makes the server send results held for it), and a definite failure for every other unanswered request.
    fn resume_frames(&self, generation: u64, why: &str) -> Vec<String> {
        let mut pending = lock(&self.pending);
        let mut frames = Vec::new();
        let stale: Vec<String> = pending
            .by_id
            .iter()
            .filter(|(_, e)| e.sent_on != 0 && e.sent_on != generation)
            .map(|(id, _)| id.clone())
            .collect();
        let now = ldp_types::time::format_timestamp(SystemClock.now_utc());
        for id in stale {
            let Some(entry) = pending.by_id.get_mut(&id) else { continue };
            match &entry.kind {
                Kind::Submit { session, task, from, to, mode, .. } => {
                    let query_id = lock(&self.ids).uuid();
                    let mut query = Envelope::new(
                        query_id.clone(),
                        now.clone(),
                        session.clone(),
                        from.clone(),
                        to.clone(),
                        TaskUpdate::new(task.clone(), None, Some("resume".to_owned())),
                    )
                    .with_payload_mode(*mode);
                    entry.sent_on = generation;
                    if let Some(key) = &self.signing_key {
                        query.nonce = Some(lock(&self.ids).nonce());
                        if let Err(e) = ldp_types::signing::sign(&mut query, key) {
                            pending.complete(&id, Err(LdpError::from(&e)));
                            continue;
                        }
                    }
                    match query.to_json() {
                        Ok(text) => {
                            frames.push(text);
                            pending.by_id.insert(
                                query_id,
                                Entry {
                                    kind: Kind::Resume { submit: id },
                                    reply: None,
                                    updates: None,
                                    text: None,
                                    sent_on: generation,
                                },
                            );
                            self.resumed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            pending.complete(&id, Err(LdpError::from(&e)));
                        }
                    }
                }
                Kind::Resume { .. } => {
                    pending.remove(&id);
                }
                Kind::Other => {
                    pending.complete(&id, Err(lost(why)));
                }
            }
        }
        frames
    }

    /// Routes one server frame; returns frames to write (a resubmission).
    fn dispatch(self: &Arc<Self>, text: &str, generation: u64) -> Vec<String> {
        let Some(head) = Head::peek(text) else {
            self.unmatched("a frame that is not a JSON object");
            return Vec::new();
        };
        let mut pending = lock(&self.pending);
        if head.is_error || head.is_accepted {
            let answer = if head.is_error {
                let error = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| serde_json::from_value::<LdpError>(v.get("error")?.clone()).ok())
                    .unwrap_or_else(|| LdpError::runtime(codes::MALFORMED_MESSAGE, "unreadable error frame"));
                Err(error)
            } else {
                Ok(None)
            };
            let Some(id) = head.in_reply_to.as_deref() else {
                if let Err(e) = &answer {
                    tracing::warn!(code = %e.code, message = %e.message, "connection-level error from the server");
                }
                self.unmatched("a control frame without in_reply_to");
                return Vec::new();
            };
            match pending.by_id.get(id).map(|e| matches!(e.kind, Kind::Resume { .. })) {
                Some(true) => {
                    if let Some(Entry { kind: Kind::Resume { submit }, .. }) = pending.remove(id)
                        && let Err(e) = answer
                    {
                        pending.complete(&submit, Err(e));
                    }
                }
                Some(false) => {
                    pending.complete(id, answer);
                }
                None => self.unmatched("a control frame for no outstanding request"),
            }
            return Vec::new();
        }
        let mut value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) => {
                self.unmatched("an unreadable envelope");
                return Vec::new();
            }
        };
        if let Value::Object(map) = &mut value {
            // The correlation member is this binding's, not the envelope's: strip it so that signatures computed
            // over the envelope as the responder built it still verify.
            map.remove(IN_REPLY_TO);
        }
        let target = match head.in_reply_to.clone() {
            Some(id) => Some(id),
            None if is_task_end(&head.kind) => {
                head.task_id.as_ref().and_then(|t| pending.by_task.get(&(head.session_id.clone(), t.clone())).cloned())
            }
            None => None,
        };
        let Some(target) = target.filter(|t| pending.by_id.contains_key(t)) else {
            self.unmatched(&head.kind);
            return Vec::new();
        };
        let Some(entry) = pending.by_id.get_mut(&target) else { return Vec::new() };
        match &mut entry.kind {
            Kind::Submit { .. } if head.kind == "TASK_UPDATE" => {
                if let Some(tx) = &entry.updates
                    && let Ok(env) = Envelope::from_value(value)
                {
                    // Progress is best-effort: a caller that stopped reading must not stall the connection.
                    let _ = tx.try_send(env);
                }
                Vec::new()
            }
            Kind::Submit { resent: true, .. } if error_code(&value) == Some(codes::DUPLICATE_TASK) => {
                // The first copy reached the server after all and is running; its result will come.
                Vec::new()
            }
            Kind::Submit { .. } | Kind::Other => {
                pending.complete(&target, Ok(Some(value)));
                Vec::new()
            }
            Kind::Resume { submit } => {
                let submit = submit.clone();
                pending.remove(&target);
                self.resume_answer(&mut pending, &submit, &head.kind, value, generation)
            }
        }
    }

    fn resume_answer(
        self: &Arc<Self>,
        pending: &mut Pending,
        submit: &str,
        kind: &str,
        value: Value,
        generation: u64,
    ) -> Vec<String> {
        match kind {
            "TASK_UPDATE" => {
                let status = value.get("body").and_then(|b| b.get("message")).and_then(Value::as_str).unwrap_or("");
                if status != "running" && pending.by_id.contains_key(submit) {
                    // Its result was held for us and sent before this answer, or lost with the old connection.
                    let inner = self.clone();
                    let submit = submit.to_owned();
                    let status = status.to_owned();
                    tokio::spawn(async move {
                        tokio::time::sleep(inner.resume_grace).await;
                        let error = LdpError::transport(
                            codes::TRANSPORT_ERROR,
                            format!("the task {status} while disconnected and its result was lost in transit"),
                        )
                        .with_retryable(false);
                        lock(&inner.pending).complete(&submit, Err(error));
                    });
                }
                Vec::new()
            }
            "TASK_FAILED" if error_code(&value) == Some(codes::TASK_NOT_FOUND) => {
                // The server never saw the task: send it again.
                match pending.by_id.get_mut(submit) {
                    Some(Entry { kind: Kind::Submit { resent, .. }, text: Some(text), sent_on, .. }) => {
                        *resent = true;
                        *sent_on = generation;
                        vec![text.to_string()]
                    }
                    _ => Vec::new(),
                }
            }
            // The session is gone (expired, closed) or the query was refused: that is the task's answer.
            _ => {
                pending.complete(submit, Ok(Some(value)));
                Vec::new()
            }
        }
    }

    fn unmatched(&self, what: &str) {
        self.unmatched.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(what, "server frame matches no outstanding request");
    }
}

fn error_code(value: &Value) -> Option<&str> {
    value.get("body")?.get("error")?.get("code")?.as_str()
}

/// One request for the driver to write.
#[derive(Debug)]
struct Outgoing {
    id: String,
    text: Arc<str>,
}

type BoxSink = Pin<Box<dyn Sink<Message, Error = WireError> + Send>>;
type BoxStream = Pin<Box<dyn Stream<Item = Result<Message, WireError>> + Send>>;

#[derive(Debug, Clone)]
struct Target {
    url: String,
    options: WsOptions,
    /// Set for `wss://`.
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// An LDP client transport over one WebSocket connection, shared by every session of a `Client`.
///
/// Each request is a text frame; the server's answer names it in its `in_reply_to` member (or, for results held
/// across a reconnect, by session and task id). TASK_UPDATEs pushed for a TASK_SUBMIT go to the `updates` channel of
/// its `exchange`. When the connection drops, the transport reconnects with backoff and resumes: it sends a
/// TASK_UPDATE status query for every outstanding task, which resumes the session on the server and makes it send the
/// results it held, exactly once; a task the server never received is submitted again. Other requests left
/// unanswered by the dropped connection fail with a non-retryable `transport` error.
#[derive(Debug)]
pub struct WsTransport {
    inner: Arc<Inner>,
    outbound: mpsc::Sender<Outgoing>,
    identity_urls: Vec<String>,
    http: reqwest::Client,
    token: Option<String>,
    request_timeout: Option<Duration>,
    url: String,
}

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
    /// `http://host:port`; `wss://` and `https://` for TLS, see [`WsOptions::tls_root_certificate_pem`]) and starts the task that drives it. Fails if the first connection cannot be made or the
    /// server refuses the upgrade (e.g. 401 for a missing token); later drops are repaired by reconnecting.
    pub async fn connect(url: impl AsRef<str>, options: WsOptions) -> Result<Self, Error> {
        let (ws_url, http_base) = normalise(url.as_ref())?;
        let identity_urls = match &options.identity_url {
            Some(u) => vec![u.clone()],
            None => vec![
                format!("{http_base}{}", ldp_transport_http::WELL_KNOWN_IDENTITY),
                format!("{http_base}{}", ldp_transport_http::IDENTITY),
            ],
        };
        // Built for every scheme, so a bad PEM is reported whatever the URL.
        let tls = rustls_client_config(&options.tls)?;
        let http = http_client(&options)?;
        let tls = ws_url.starts_with("wss:").then_some(tls);
        let target = Target { url: ws_url.clone(), options: options.clone(), tls };
        let (sink, stream) = open(&target).await.map_err(Error::Connect)?;
        let inner = Arc::new(Inner {
            pending: Mutex::new(Pending::default()),
            ids: Mutex::new(SeededIds::from_entropy()),
            fatal: Mutex::new(None),
            connections: AtomicU64::new(1),
            unmatched: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            resume_grace: options.resume_grace,
            signing_key: options.signing_key.clone(),
        });
        let (outbound, rx) = mpsc::channel(options.send_queue.max(1));
        tokio::spawn(drive(inner.clone(), target, sink, stream, rx));
        Ok(Self {
            inner,
            outbound,
            identity_urls,
            http,
            token: options.token,
            request_timeout: options.request_timeout,
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
    /// `GET /.well-known/ldp-identity` on the server's HTTP side (RFC 2.3), falling back to `/ldp/identity`.
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        let mut last = LdpError::transport(codes::TRANSPORT_ERROR, "no identity card");
        for url in &self.identity_urls {
            let mut req = self.http.get(url).timeout(Duration::from_secs(30));
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| LdpError::transport(codes::TRANSPORT_ERROR, format!("identity request failed: {e}")))?;
            let status = resp.status();
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| LdpError::transport(codes::TRANSPORT_ERROR, format!("identity request failed: {e}")))?;
            if !status.is_success() {
                last = LdpError::transport(codes::TRANSPORT_ERROR, format!("identity: HTTP {status} from {url}"))
                    .with_retryable(false);
                continue;
            }
            return serde_json::from_slice(&bytes).map_err(|e| {
                LdpError::runtime(codes::MALFORMED_MESSAGE, format!("identity card does not parse: {e}"))
                    .with_retryable(false)
            });
        }
        Err(last)
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Value>, LdpError> {
        if let Some(error) = self.inner.fatal() {
            return Err(error);
        }
        let span = ldp_session::spans::send_span(envelope);
        let text: Arc<str> = traced_frame(envelope, &span).map_err(|e| LdpError::from(&e))?.into();
        let result = self.send_frame(envelope, text, updates).instrument(span.clone()).await;
        ldp_transport_http::trace_context::record_exchange(&span, &result);
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
    ) -> Result<Option<Value>, LdpError> {
        let id = envelope.message_id.clone();
        let (tx, rx) = oneshot::channel();
        let kind = match &envelope.body {
            Body::TaskSubmit(TaskSubmit { task_id, .. }) => Kind::Submit {
                session: envelope.session_id.clone(),
                task: task_id.clone(),
                from: envelope.from.clone(),
                to: envelope.to.clone(),
                mode: envelope.payload_mode,
                resent: false,
            },
            _ => Kind::Other,
        };
        {
            let mut pending = lock(&self.inner.pending);
            let key = match &kind {
                Kind::Submit { session, task, .. } => Some((session.clone(), task.clone())),
                _ => None,
            };
            let keep_text = key.is_some().then(|| text.clone());
            if let Some(old) =
                pending.by_id.insert(id.clone(), Entry { kind, reply: Some(tx), updates, text: keep_text, sent_on: 0 })
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
        let answer = match self.request_timeout {
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

/// Opens one connection: handshake with the bearer token, then the library's stream behind the [`Message`] adapter.
async fn open(target: &Target) -> Result<(BoxSink, BoxStream), LdpError> {
    let opts = &target.options;
    let mut request =
        target.url.as_str().into_client_request().map_err(|e| {
            LdpError::transport(codes::TRANSPORT_ERROR, format!("bad request: {e}")).with_retryable(false)
        })?;
    if let Some(token) = &opts.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| LdpError::identity(codes::UNAUTHENTICATED, "the bearer token is not a valid header value"))?;
        request.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, value);
    }
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(opts.max_message))
        .max_frame_size(Some(opts.max_message))
        // tungstenite's 128 KiB defaults make an idle connection heavy; the buffers grow for larger messages.
        .read_buffer_size(IO_BUFFER)
        .write_buffer_size(IO_BUFFER);
    let connector = target.tls.clone().map(tokio_tungstenite::Connector::Rustls);
    let connecting = tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, connector);
    let (socket, _) = match tokio::time::timeout(opts.connect_timeout, connecting).await {
        Err(_) => return Err(LdpError::transport(codes::TIMEOUT, "connecting timed out")),
        Ok(Err(tungstenite::Error::Http(resp))) => {
            let status = resp.status();
            let error = resp
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .and_then(|v| serde_json::from_value::<LdpError>(v.get("error")?.clone()).ok())
                .unwrap_or_else(|| {
                    LdpError::transport(codes::TRANSPORT_ERROR, format!("upgrade refused: HTTP {status}"))
                });
            // A refusal (401, 404) is the server's answer, not a network failure: retrying does not help, except
            // when it says it is overloaded.
            let retryable = status.as_u16() == 503 || status.as_u16() == 429;
            return Err(error.with_retryable(retryable));
        }
        Ok(Err(e)) => return Err(connect_failure(&e)),
        Ok(Ok(ok)) => ok,
    };
    let limit = opts.max_message;
    let (sink, stream) = socket.split();
    let sink = sink
        .sink_map_err(|e| WireError::Io(e.to_string()))
        .with(|m: Message| futures::future::ready(Ok::<_, WireError>(to_tungstenite(m))));
    let stream = stream.map(move |item| from_tungstenite(item, limit));
    Ok((Box::pin(sink), Box::pin(stream)))
}

/// A connection that could not be opened. A failed TLS handshake (a server certificate the client does not trust,
/// or a client certificate the server refuses) is not fixed by retrying.
fn connect_failure(e: &tungstenite::Error) -> LdpError {
    let tls = match e {
        tungstenite::Error::Tls(_) => true,
        tungstenite::Error::Io(io) => io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    };
    if tls {
        LdpError::transport(codes::TRANSPORT_ERROR, format!("TLS handshake failed: {e}")).with_retryable(false)
    } else {
        LdpError::transport(codes::TRANSPORT_ERROR, format!("cannot connect: {e}"))
    }
}

fn to_tungstenite(m: Message) -> tungstenite::Message {
    use tungstenite::protocol::CloseFrame as TCloseFrame;
    match m {
        Message::Text(t) => tungstenite::Message::Text(t.into()),
        Message::Binary(b) => tungstenite::Message::Binary(b.into()),
        Message::Ping(b) => tungstenite::Message::Ping(b.into()),
        Message::Pong(b) => tungstenite::Message::Pong(b.into()),
        Message::Close(f) => {
            tungstenite::Message::Close(f.map(|f| TCloseFrame { code: f.code.into(), reason: f.reason.into() }))
        }
    }
}

fn from_tungstenite(
    item: Result<tungstenite::Message, tungstenite::Error>,
    limit: usize,
) -> Result<Message, WireError> {
    match item {
        Ok(tungstenite::Message::Text(t)) => Ok(Message::Text(t.as_str().to_owned())),
        Ok(tungstenite::Message::Binary(b)) => Ok(Message::Binary(b.to_vec())),
        Ok(tungstenite::Message::Ping(b)) => Ok(Message::Ping(b.to_vec())),
        Ok(tungstenite::Message::Pong(b)) => Ok(Message::Pong(b.to_vec())),
        Ok(tungstenite::Message::Close(f)) => {
            Ok(Message::Close(f.map(|f| CloseFrame { code: f.code.into(), reason: f.reason.as_str().to_owned() })))
        }
        // Raw frames are only produced when writing; reading yields whole messages.
        Ok(tungstenite::Message::Frame(_)) => Ok(Message::Pong(Vec::new())),
        Err(tungstenite::Error::Capacity(_)) => Err(WireError::TooLarge { limit }),
        Err(e) => Err(WireError::Io(e.to_string())),
    }
}

/// How one connection ended, for the driver.
enum End {
    /// The transport was dropped: stop.
    Dropped,
    /// The connection failed: reconnect.
    Lost(String),
}

/// Owns the connection: runs it, and when it drops, reconnects with backoff and resumes.
async fn drive(
    inner: Arc<Inner>,
    target: Target,
    sink: BoxSink,
    stream: BoxStream,
    mut outbound: mpsc::Receiver<Outgoing>,
) {
    let mut socket = Some((sink, stream));
    let mut generation = 0u64;
    let mut carry: Option<Outgoing> = None;
    loop {
        let (sink, stream) = match socket.take() {
            Some(s) => s,
            None => match reconnect(&inner, &target, &mut outbound, &mut carry).await {
                Some(s) => s,
                None => return,
            },
        };
        generation += 1;
        let first = if generation > 1 { inner.resume_frames(generation, "reconnected") } else { Vec::new() };
        match run(&inner, &target.options, sink, stream, &mut outbound, carry.take(), first, generation).await {
            End::Dropped => return,
            End::Lost(why) => {
                tracing::debug!(why, "websocket connection lost; reconnecting");
            }
        }
    }
}

/// Reconnects with backoff. `None` when the transport was dropped meanwhile or the server refuses us for good.
async fn reconnect(
    inner: &Arc<Inner>,
    target: &Target,
    outbound: &mut mpsc::Receiver<Outgoing>,
    carry: &mut Option<Outgoing>,
) -> Option<(BoxSink, BoxStream)> {
    let policy = target.options.reconnect;
    let mut attempt = 0u32;
    loop {
        if attempt >= policy.max_attempts {
            let error = LdpError::transport(
                codes::TRANSPORT_ERROR,
                format!("connection lost and not restored after {attempt} attempts"),
            )
            .with_retryable(true);
            inner.fail_all(&error);
            // Try again when someone needs the connection.
            match outbound.recv().await {
                Some(o) => *carry = Some(o),
                None => return None,
            }
            attempt = 0;
            continue;
        }
        let wait = policy.backoff(attempt);
        attempt += 1;
        if carry.is_none() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                next = outbound.recv() => match next {
                    Some(o) => {
                        *carry = Some(o);
                        tokio::time::sleep(wait).await;
                    }
                    None => return None,
                },
            }
        } else {
            tokio::time::sleep(wait).await;
        }
        match open(target).await {
            Ok(s) => {
                inner.connections.fetch_add(1, Ordering::Relaxed);
                return Some(s);
            }
            Err(e) if e.category != ErrorCategory::Transport && !e.retryable => {
                tracing::warn!(code = %e.code, message = %e.message, "the server refused the reconnection");
                *lock(&inner.fatal) = Some(e.clone());
                inner.fail_all(&e);
                return None;
            }
            Err(e) => tracing::debug!(attempt, code = %e.code, message = %e.message, "reconnect failed"),
        }
    }
}

/// Runs one connection: a reader that routes answers and a writer that sends requests and pings, concurrently (so
/// that a server waiting for us to read never blocks our writes, and the reverse).
#[allow(clippy::too_many_arguments)]
async fn run(
    inner: &Arc<Inner>,
    opts: &WsOptions,
    mut sink: BoxSink,
    mut stream: BoxStream,
    outbound: &mut mpsc::Receiver<Outgoing>,
    carry: Option<Outgoing>,
    first: Vec<String>,
    generation: u64,
) -> End {
    let (resend_tx, mut resend_rx) = mpsc::unbounded_channel::<String>();
    let reader = async {
        loop {
            let next = match tokio::time::timeout(opts.idle_timeout, stream.next()).await {
                Err(_) => return End::Lost("nothing received within the idle timeout".into()),
                Ok(None) => return End::Lost("the server ended the stream".into()),
                Ok(Some(Err(e))) => return End::Lost(e.to_string()),
                Ok(Some(Ok(m))) => m,
            };
            match next {
                Message::Text(text) => {
                    for frame in inner.dispatch(&text, generation) {
                        let _ = resend_tx.send(frame);
                    }
                }
                Message::Close(frame) => {
                    let code = frame.map(|f| f.code).unwrap_or(close_code::NORMAL);
                    return End::Lost(format!("the server closed the connection ({code})"));
                }
                Message::Binary(_) => inner.unmatched("a binary frame"),
                Message::Ping(_) | Message::Pong(_) => {}
            }
        }
    };
    let writer = async {
        let write = |r: Result<(), WireError>| r.map_err(|e| End::Lost(e.to_string()));
        for text in first {
            if let Err(e) = write(sink.feed(Message::Text(text)).await) {
                return e;
            }
        }
        if let Some(o) = carry
            && inner.mark_sent(&o.id, generation)
            && let Err(e) = write(sink.feed(Message::Text(o.text.to_string())).await)
        {
            return e;
        }
        if let Err(e) = write(sink.flush().await) {
            return e;
        }
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + opts.ping_interval, opts.ping_interval);
        loop {
            let message = tokio::select! {
                next = outbound.recv() => match next {
                    Some(o) => {
                        if !inner.mark_sent(&o.id, generation) {
                            continue;
                        }
                        Message::Text(o.text.to_string())
                    }
                    None => {
                        let bye = Message::Close(Some(CloseFrame::new(close_code::NORMAL, "client done")));
                        let _ = tokio::time::timeout(Duration::from_secs(1), sink.send(bye)).await;
                        return End::Dropped;
                    }
                },
                Some(text) = resend_rx.recv() => Message::Text(text),
                _ = ping.tick() => Message::Ping(Vec::new()),
            };
            if let Err(e) = write(sink.feed(message).await) {
                return e;
            }
            // Batch what is already queued into one flush.
            while let Ok(o) = outbound.try_recv() {
                if inner.mark_sent(&o.id, generation)
                    && let Err(e) = write(sink.feed(Message::Text(o.text.to_string())).await)
                {
                    return e;
                }
            }
            match tokio::time::timeout(opts.idle_timeout, sink.flush()).await {
                Ok(r) => {
                    if let Err(e) = write(r) {
                        return e;
                    }
                }
                Err(_) => return End::Lost("the socket stopped taking frames".into()),
            }
        }
    };
    tokio::select! {
        end = reader => end,
        end = writer => end,
    }
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

    #[test]
    fn backoff_is_capped_and_jittered() {
        let p = Reconnect {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 0..10 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(attempt)).min(Duration::from_secs(1));
            let b = p.backoff(attempt);
            assert!(b >= ceiling / 2 && b <= ceiling, "{attempt}: {b:?}");
        }
    }
}
