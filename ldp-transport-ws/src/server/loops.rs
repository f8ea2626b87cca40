//! The per-connection loops: the reader (backpressure by count, bytes and rate), the writer (batching, pings,
//! write timeouts) and one handler per envelope.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use ldp_session::PeerContext;
use ldp_session::runtime::Response as RuntimeResponse;
use ldp_types::{Envelope, LdpError, MessageType, codes};
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::Instrument;

use crate::wire::{CloseFrame, Head, Message, WireError, accepted_frame, close_code, envelope_frame, error_frame};

use super::WS_PATH;
use super::config::{ConnectionEnd, WsServerConfig};
use super::hub::{Hub, InFlightPermits, byte_cost, lock};
use super::outbound::{MAX_OUTBOUND_BUDGET, Out, Outbound, Reroute, Unconfirmed};

/// How long the writer may keep flushing queued frames (an error, a close frame) after the reader stopped.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Capacity of one task's progress channel; updates beyond it are dropped (progress is best-effort).
pub(super) const UPDATE_QUEUE: usize = 16;

/// Frames the writer sends in one batch before it flushes the socket.
pub(super) const WRITE_BATCH: usize = 64;

pub(super) async fn send_close(out: &Outbound, error: Option<String>, close: CloseFrame) {
    if let Some(text) = error {
        let _ = out.text(text, None).await;
    }
    out.close(close).await;
}

pub(super) fn too_large(limit: usize) -> LdpError {
    LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("message larger than {limit} bytes")).with_retryable(false)
}

/// Resolves once the server shuts down.
pub(super) async fn shutting_down(rx: &mut watch::Receiver<bool>) {
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

pub(super) async fn read_loop<St>(
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
pub(super) async fn write_loop<Si>(
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
pub(super) async fn handle_text(
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
    ldp_edge::trace_context::adopt_remote_parent(&span, head.traceparent.as_deref(), head.tracestate.as_deref());
    handle_head(hub, peer, conn, out, text, head, permits).instrument(span).await;
}

pub(super) async fn handle_head(
    hub: Arc<Hub>,
    peer: PeerContext,
    conn: u64,
    out: Outbound,
    text: String,
    head: Head,
    _permits: InFlightPermits,
) {
    let id = head.message_id.as_str();
    let is_submit = head.kind == MessageType::TaskSubmit.as_str();
    let response = if is_submit {
        let (tx, mut updates) = mpsc::channel::<Envelope>(UPDATE_QUEUE);
        // Boxed: pinned in place, the runtime's future would sit in this one beside the awaits below, and this
        // future is spawned (moved, copied) for every message.
        let mut job = Box::pin(hub.runtime.handle(&peer, text.as_bytes(), Some(tx)));
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
        hub.runtime.connection_closed(conn);
    }
    let reply = match response {
        RuntimeResponse::Reply(env) => Some(Ok(*env)),
        // A TASK_SUBMIT whose result the machine holds: its session was suspended meanwhile; resume delivers it.
        RuntimeResponse::Accepted if is_submit => None,
        RuntimeResponse::Accepted => Some(Err(accepted_frame(id))),
        RuntimeResponse::Refused(refusal) => Some(refusal.into_reply().map_err(|error| error_frame(&error, Some(id)))),
    };
    let session = match &reply {
        Some(Ok(env)) if !env.session_id.is_empty() => env.session_id.clone(),
        _ => head.session_id.clone(),
    };
    if open && !session.is_empty() {
        // Answers the machine held while the session was away go first, so they precede the answer to the message
        // that resumed it; the machine says whether it did.
        hub.flush(&session, conn, &out).await;
    }
    let Some(reply) = reply else { return };
    // A task's final answer is rerouted or held if this connection cannot take it; anything else is not.
    let ended_task = match &reply {
        Ok(env) if env.body.message_type().is_some_and(MessageType::ends_task) => {
            Some(env.body.task_id().unwrap_or_default().to_owned())
        }
        _ => None,
    };
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
    let reroute = ended_task
        .filter(|_| is_submit && !session.is_empty())
        .map(|task_id| Reroute { session: session.as_str().into(), task_id: task_id.into() });
    if let Err((text, Some(reroute))) = out.text(text, reroute).await {
        hub.reroute(reroute, text, conn);
    }
}

pub(super) async fn push_update(out: &Outbound, update: Envelope, in_reply_to: &str) {
    match envelope_frame(update, Some(in_reply_to)) {
        // Progress is best-effort: a connection that went away loses it.
        Ok(text) => drop(out.text(text, None).await),
        Err(e) => tracing::warn!(error = %e, "cannot encode a TASK_UPDATE"),
    }
}
