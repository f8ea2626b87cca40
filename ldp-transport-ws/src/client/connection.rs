//! One connection at a time: opening it (handshake, bearer token, TLS), the task that runs it (a reader routing
//! frames, a writer sending requests and pings), and reconnecting with backoff when it drops, after which the
//! initiators' drivers resume their tasks (`Inner::resume_frames`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use ldp_types::{ErrorCategory, LdpError, codes};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::options::WsOptions;
use super::pending::{Inner, lock};
use crate::wire::{CloseFrame, Message, WireError, close_code};

/// Size of the connection's read and write buffers.
const IO_BUFFER: usize = 16 * 1024;

/// One request for the driver to write.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) id: String,
    pub(super) text: Arc<str>,
}

pub(super) type BoxSink = Pin<Box<dyn Sink<Message, Error = WireError> + Send>>;
pub(super) type BoxStream = Pin<Box<dyn Stream<Item = Result<Message, WireError>> + Send>>;

#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) url: String,
    pub(super) options: WsOptions,
    /// Set for `wss://`.
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
}

/// Opens one connection: handshake with the bearer token, then the library's stream behind the [`Message`] adapter.
pub(super) async fn open(target: &Target) -> Result<(BoxSink, BoxStream), LdpError> {
    let opts = &target.options;
    let mut request =
        target.url.as_str().into_client_request().map_err(|e| {
            LdpError::transport(codes::TRANSPORT_ERROR, format!("bad request: {e}")).with_retryable(false)
        })?;
    // Asked on every connection, reconnects included, so a rotating token is fresh on each.
    if let Some(token) = opts.connect.current_token().await? {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| LdpError::identity(codes::UNAUTHENTICATED, "the bearer token is not a valid header value"))?;
        request.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, value);
    }
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(opts.connect.max_message))
        .max_frame_size(Some(opts.connect.max_message))
        // tungstenite's 128 KiB defaults make an idle connection heavy; the buffers grow for larger messages.
        .read_buffer_size(IO_BUFFER)
        .write_buffer_size(IO_BUFFER);
    let connector = target.tls.clone().map(tokio_tungstenite::Connector::Rustls);
    let connecting = tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, connector);
    let (socket, _) = match tokio::time::timeout(opts.connect.connect_timeout, connecting).await {
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
    let limit = opts.connect.max_message;
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
pub(super) async fn drive(
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
    let policy = target.options.reconnect();
    let mut attempt = 0u32;
    loop {
        if attempt >= policy.max_retries {
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
