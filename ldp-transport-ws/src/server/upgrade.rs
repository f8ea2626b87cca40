//! The axum edge: the upgrade request (origin check, authentication, limits) and the conversion of axum's
//! WebSocket messages to this crate's.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{self as aws, WebSocketUpgrade};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use ldp_session::PeerContext;
use ldp_types::{LdpError, codes};

use crate::wire::{CloseFrame, Message, WireError, error_frame};

use super::{WS_PATH, WsServer};

pub(super) fn json_error(status: StatusCode, error: &LdpError) -> Response {
    let mut resp = (status, error_frame(error, None)).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub(super) async fn upgrade(
    server: WsServer,
    address: Option<SocketAddr>,
    peer: Option<Extension<PeerContext>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    // A web page's cross-origin upgrade is refused before anything else: browsers let any page open a WebSocket to
    // any host (no preflight), so without this a page could drive a server on the visitor's machine.
    if let Err(origin) = check_origin(&headers, &server.hub.config.allowed_origins) {
        let error = LdpError::security(
            codes::TRUST_VIOLATION,
            format!(
                "cross-origin WebSocket upgrade from {origin:?} refused; the server must list the origin as allowed"
            ),
        )
        .with_retryable(false);
        return json_error(StatusCode::FORBIDDEN, &error);
    }
    // Authenticate before anything else: an unauthenticated peer learns nothing, not even whether it upgraded right.
    let mut peer = match peer {
        // Authenticated by the HTTP binding's layer, or unauthenticated there with the client's address on it.
        Some(Extension(peer)) if peer.authenticated.is_some() || !server.hub.auth.is_enabled() => peer,
        other => match server.hub.auth.authenticate_fresh(&headers).await {
            Ok(mut peer) => {
                peer.address = other.and_then(|Extension(p)| p.address);
                peer
            }
            Err(e) => return server.hub.auth.refusal(e, &headers),
        },
    };
    if peer.address.is_none() {
        peer.address = address.map(|a| a.ip());
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            let error = LdpError::runtime(
                codes::MALFORMED_MESSAGE,
                format!("{WS_PATH} expects a WebSocket upgrade request: {rejection}"),
            )
            .with_retryable(false);
            return json_error(rejection.status(), &error);
        }
    };
    // The library's own limit is a backstop above ours, so that an oversize message normally arrives whole and is
    // answered with its message id.
    let limit = server.hub.config.max_message;
    let hard = limit.saturating_mul(2).max(limit.saturating_add(64 * 1024));
    let buffer = server.hub.config.io_buffer.max(1024);
    ws.max_message_size(hard).max_frame_size(hard).read_buffer_size(buffer).write_buffer_size(buffer).on_upgrade(
        move |socket| async move {
            let (sink, stream) = socket.split();
            let sink = sink.with(|m: Message| futures::future::ready(Ok::<_, axum::Error>(to_axum(m))));
            let stream = stream.map(move |item| from_axum(item, hard));
            server.serve_connection_as(peer, address, sink, stream).await;
        },
    )
}

/// Allows an upgrade without `Origin` (not from a browser), from the server's own origin (the origin's host and
/// port are the `Host` the request was sent to), or from a listed origin; otherwise returns the refused origin.
pub(super) fn check_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), String> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let Ok(origin) = origin.to_str() else { return Err("<not text>".to_owned()) };
    let origin = origin.trim().trim_end_matches('/');
    if allowed.iter().any(|a| a == "*" || a.trim().trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(str::trim);
    let authority = origin.split_once("://").map(|(_, rest)| rest);
    match (authority, host) {
        (Some(authority), Some(host)) if !host.is_empty() && authority.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(origin.to_owned()),
    }
}

pub(super) fn to_axum(m: Message) -> aws::Message {
    match m {
        Message::Text(t) => aws::Message::Text(t.into()),
        Message::Binary(b) => aws::Message::Binary(b.into()),
        Message::Ping(b) => aws::Message::Ping(b.into()),
        Message::Pong(b) => aws::Message::Pong(b.into()),
        Message::Close(f) => aws::Message::Close(f.map(|f| aws::CloseFrame { code: f.code, reason: f.reason.into() })),
    }
}

pub(super) fn from_axum(item: Result<aws::Message, axum::Error>, limit: usize) -> Result<Message, WireError> {
    match item {
        Ok(aws::Message::Text(t)) => Ok(Message::Text(t.as_str().to_owned())),
        Ok(aws::Message::Binary(b)) => Ok(Message::Binary(b.to_vec())),
        Ok(aws::Message::Ping(b)) => Ok(Message::Ping(b.to_vec())),
        Ok(aws::Message::Pong(b)) => Ok(Message::Pong(b.to_vec())),
        Ok(aws::Message::Close(f)) => {
            Ok(Message::Close(f.map(|f| CloseFrame { code: f.code, reason: f.reason.as_str().to_owned() })))
        }
        Err(e) => Err(wire_error(&e.to_string(), limit)),
    }
}

/// A WebSocket library error as a [`WireError`]. tungstenite reports its size limits as "Message too long" (and
/// "Space limit exceeded" for buffers); axum hides the typed error, so its text is what is left to go by.
pub(crate) fn wire_error(detail: &str, limit: usize) -> WireError {
    if detail.contains("Message too long") || detail.contains("Space limit exceeded") {
        WireError::TooLarge { limit }
    } else {
        WireError::Io(detail.to_owned())
    }
}
