//! Probes: the kit's own raw transports. They send exactly the bytes a check asks for (malformed JSON, wrong content
//! types, oversize bodies included) and record every request and response as [`Exchange`] evidence.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use ldp_transport_http::ClientTls;
use ldp_transport_http::sse::{SseEvent, SseParser};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Bodies longer than this are cut in evidence (the byte count is kept).
const EVIDENCE_BODY_LIMIT: usize = 16 * 1024;

/// A transport binding of LDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TransportKind {
    /// RFC 8.1: `POST <endpoint>/ldp/messages`, one envelope per request and reply.
    Http,
    /// `GET <endpoint>/ldp/ws` upgraded to WebSocket, one JSON envelope per text frame.
    Ws,
}

impl TransportKind {
    /// The lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Ws => "ws",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "http" => Ok(Self::Http),
            "ws" => Ok(Self::Ws),
            other => Err(format!("unknown transport {other:?} (expected http or ws)")),
        }
    }
}

/// One request as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// `GET`, `POST`, `WS-TEXT` or `WS-BINARY`.
    pub method: String,
    /// The URL.
    pub url: String,
    /// Headers the kit set (an authorization value is redacted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body as text (lossy UTF-8, cut at 16 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body's full length in bytes.
    pub body_bytes: usize,
}

/// One response as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRecord {
    /// The HTTP status (absent for WebSocket frames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Response headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body (or the final text frame) as text, cut at 16 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The full length in bytes.
    pub body_bytes: usize,
    /// WebSocket: the close code, when the server closed the connection instead of answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_code: Option<u16>,
    /// WebSocket: frames received before the answer (TASK_UPDATEs, unsolicited messages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_frames: Vec<String>,
}

/// One request and what came back: the evidence of a check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The transport used.
    pub transport: TransportKind,
    /// What the kit sent.
    pub request: RequestRecord,
    /// What came back, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ResponseRecord>,
    /// Why nothing came back (connection refused, reset, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Round-trip time in milliseconds.
    pub elapsed_ms: u64,
    /// What the kit found wrong with the response (schema violations with their paths, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

fn evidence_text(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(EVIDENCE_BODY_LIMIT)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if bytes.len() > EVIDENCE_BODY_LIMIT {
        s.push_str(&format!("... ({} bytes in all)", bytes.len()));
    }
    s
}

/// What a probe got back, unrecorded.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawReply {
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// True when nothing at all came back and that is an acceptable outcome (WebSocket: no frame within the grace
    /// period for a message that needs no reply).
    pub no_reply: bool,
    pub close_code: Option<u16>,
    /// HTTP: the first attempt failed without an answer (stale keep-alive connection) and was retried.
    pub retried_after: Option<String>,
}

/// What to send.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub body: Vec<u8>,
    /// HTTP: the `Content-Type`; WebSocket: anything but JSON is sent as a binary frame.
    pub content_type: &'static str,
    /// Whether a reply is optional (WebSocket waits only briefly for one).
    pub reply_optional: bool,
    /// WebSocket: skip TASK_UPDATE frames for this task while waiting.
    pub task_id: Option<String>,
    /// Override the bearer token for this request (`Some(None)`: send none).
    pub token: Option<Option<String>>,
    /// The envelope's message id, when it is one (WebSocket: skips frames that answer another message).
    pub message_id: Option<String>,
}

impl Outgoing {
    pub fn json(body: Vec<u8>) -> Self {
        Self {
            body,
            content_type: "application/json",
            reply_optional: false,
            task_id: None,
            token: None,
            message_id: None,
        }
    }
}

/// The probe of one transport.
pub(crate) struct Probe {
    kind: TransportKind,
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    timeout: Duration,
    ws: Option<WebSocketStream<MaybeTlsStream<TcpStream>>>,
    /// Connection used by the WebSocket probe when a request overrides the token.
    ws_url: String,
    /// The rustls configuration for `wss://` (built once, from the same roots and identity as the HTTP client).
    wss: Option<tokio_tungstenite::Connector>,
}

/// A probe could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(String),
    /// The TLS settings are unusable (a root or client certificate that does not parse).
    #[error("tls: {0}")]
    Tls(String),
}

impl Probe {
    pub fn new(
        kind: TransportKind,
        base: &str,
        token: Option<String>,
        timeout: Duration,
        tls: &ClientTls,
    ) -> Result<Self, ProbeError> {
        let builder = reqwest::Client::builder().timeout(timeout).redirect(reqwest::redirect::Policy::none());
        let http = tls
            .configure(builder)
            .map_err(|e| ProbeError::Tls(e.to_string()))?
            .build()
            .map_err(|e| ProbeError::Client(e.to_string()))?;
        let ws_url = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}/ldp/ws")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}/ldp/ws")
        } else {
            format!("{base}/ldp/ws")
        };
        let wss = if ws_url.starts_with("wss:") {
            let config = ldp_transport_ws::rustls_client_config(tls).map_err(|e| ProbeError::Tls(e.to_string()))?;
            Some(tokio_tungstenite::Connector::Rustls(config))
        } else {
            None
        };
        Ok(Self { kind, base: base.to_owned(), token, http, timeout, ws: None, ws_url, wss })
    }

    pub fn kind(&self) -> TransportKind {
        self.kind
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Drops the WebSocket connection (after a check was cancelled mid-exchange).
    pub fn reset(&mut self) {
        self.ws = None;
    }

    /// `GET <base><path>` over HTTP (identity discovery uses HTTP whatever the message transport).
    pub async fn get(&mut self, path: &str) -> (Exchange, Result<RawReply, String>) {
        let url = format!("{}{path}", self.base);
        let mut headers = BTreeMap::new();
        let mut req = self.http.get(&url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
            headers.insert("authorization".into(), "Bearer <redacted>".into());
        }
        let request = RequestRecord { method: "GET".into(), url, headers, body: None, body_bytes: 0 };
        let start = Instant::now();
        let result = http_reply(req.send().await).await;
        (record(TransportKind::Http, request, start, &result), result)
    }

    /// `POST <base>/ldp/stream` (RFC 8.1) with one message, reading the event stream until its final event (an
    /// envelope whose body is a TASK_RESULT or TASK_FAILED, or an `error` event), the end of the body, or the
    /// request timeout; an endpoint that keeps the stream open after the result is still judged.
    /// With `token` as the bearer token (`None`: none).
    pub async fn post_stream_as(
        &mut self,
        body: Vec<u8>,
        token: Option<String>,
    ) -> (Exchange, Result<StreamReply, String>) {
        let (req, request) = self.post("/ldp/stream", "application/json", Some("text/event-stream"), token, &body);
        let start = Instant::now();
        let result = read_stream(req.body(body)).await;
        let raw = result.as_ref().map(|s| s.reply.clone()).map_err(Clone::clone);
        let mut ex = record(TransportKind::Http, request, start, &raw);
        if let Ok(StreamReply { timed_out: true, .. }) = &result {
            ex.findings.push("the stream was still open when the request timeout ran out".to_owned());
        }
        (ex, result)
    }

    /// Sends one message and waits for its answer.
    pub async fn send(&mut self, out: Outgoing) -> (Exchange, Result<RawReply, String>) {
        match self.kind {
            TransportKind::Http => self.send_http(out).await,
            TransportKind::Ws => self.send_ws(out).await,
        }
    }

    /// A `POST <base><path>` request with its headers, and its record for the evidence.
    fn post(
        &self,
        path: &str,
        content_type: &str,
        accept: Option<&str>,
        token: Option<String>,
        body: &[u8],
    ) -> (reqwest::RequestBuilder, RequestRecord) {
        let url = format!("{}{path}", self.base);
        let mut headers = BTreeMap::new();
        headers.insert("content-type".into(), content_type.to_owned());
        let mut req = self.http.post(&url).header("content-type", content_type);
        if let Some(accept) = accept {
            headers.insert("accept".into(), accept.to_owned());
            req = req.header("accept", accept);
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
            headers.insert("authorization".into(), "Bearer <redacted>".into());
        }
        let request = RequestRecord {
            method: "POST".into(),
            url,
            headers,
            body: Some(evidence_text(body)),
            body_bytes: body.len(),
        };
        (req, request)
    }

    async fn send_http(&mut self, out: Outgoing) -> (Exchange, Result<RawReply, String>) {
        let token = match &out.token {
            Some(t) => t.clone(),
            None => self.token.clone(),
        };
        let (req, request) = self.post("/ldp/messages", out.content_type, None, token, &out.body);
        let start = Instant::now();
        let retry = req.try_clone();
        let mut result = http_reply(req.body(out.body.clone()).send().await).await;
        if let (Err(first), Some(retry)) = (&result, retry)
            && !first.starts_with("timed out")
        {
            // A pooled keep-alive connection the server had closed (e.g. after an error reply) fails before any
            // answer; try once more on a fresh connection and keep the first error in the evidence.
            let first = first.clone();
            result = http_reply(retry.body(out.body).send().await)
                .await
                .map_err(|e| format!("{e} (retried after: {first})"));
            if let Ok(r) = &mut result {
                r.retried_after = Some(first);
            }
        }
        let mut ex = record(TransportKind::Http, request, start, &result);
        if let Ok(RawReply { retried_after: Some(first), .. }) = &result {
            ex.findings.push(format!("the first attempt failed without an answer and was retried: {first}"));
        }
        (ex, result)
    }

    async fn connect_ws(&self, token: Option<&str>) -> Result<WebSocketStream<MaybeTlsStream<TcpStream>>, String> {
        self.connect_ws_raw(token)
            .await?
            .map_err(|status| format!("websocket connect to {} failed: HTTP error: {status}", self.ws_url))
    }

    /// Asks for the WebSocket upgrade at `/ldp/ws` with `token` (`None`: no `Authorization`), and closes at once:
    /// the reply's status is `101` when the server upgraded, its refusal's status otherwise.
    pub async fn ws_upgrade(&self, token: Option<&str>) -> (Exchange, Result<RawReply, String>) {
        let mut headers = BTreeMap::new();
        if token.is_some() {
            headers.insert("authorization".into(), "Bearer <redacted>".into());
        }
        let request = RequestRecord {
            method: "GET (upgrade)".into(),
            url: self.ws_url.clone(),
            headers,
            body: None,
            body_bytes: 0,
        };
        let start = Instant::now();
        let result = match self.connect_ws_raw(token).await {
            Ok(Ok(mut stream)) => {
                let _ = stream.close(None).await;
                Ok(RawReply { status: Some(101), ..RawReply::default() })
            }
            Ok(Err(status)) => Ok(RawReply { status: Some(status), ..RawReply::default() }),
            Err(e) => Err(e),
        };
        (record(TransportKind::Ws, request, start, &result), result)
    }

    /// A WebSocket connection with `token`: the stream, or the HTTP status that refused the upgrade (`Ok(Err)`),
    /// or why no answer came (`Err`).
    async fn connect_ws_raw(
        &self,
        token: Option<&str>,
    ) -> Result<Result<WebSocketStream<MaybeTlsStream<TcpStream>>, u16>, String> {
        let mut request = self.ws_url.as_str().into_client_request().map_err(|e| format!("bad ws url: {e}"))?;
        if let Some(t) = token {
            let value = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|e| format!("bad token: {e}"))?;
            request.headers_mut().insert("authorization", value);
        }
        let connecting = tokio_tungstenite::connect_async_tls_with_config(request, None, false, self.wss.clone());
        match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok((stream, _))) => Ok(Ok(stream)),
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => Ok(Err(response.status().as_u16())),
            Ok(Err(e)) => Err(format!("websocket connect to {} failed: {e}", self.ws_url)),
            Err(_) => Err(format!("websocket connect to {} timed out", self.ws_url)),
        }
    }

    /// Opens the WebSocket connection (used as a preflight).
    pub async fn connect(&mut self) -> Result<(), String> {
        if self.kind == TransportKind::Ws && self.ws.is_none() {
            self.ws = Some(self.connect_ws(self.token.as_deref()).await?);
        }
        Ok(())
    }

    async fn send_ws(&mut self, out: Outgoing) -> (Exchange, Result<RawReply, String>) {
        let binary = !out.content_type.starts_with("application/json");
        let mut headers = BTreeMap::new();
        let override_token = out.token.is_some();
        let token = match &out.token {
            Some(t) => t.clone(),
            None => self.token.clone(),
        };
        if token.is_some() {
            headers.insert("authorization".into(), "Bearer <redacted> (upgrade request)".into());
        }
        let request = RequestRecord {
            method: if binary { "WS-BINARY".into() } else { "WS-TEXT".into() },
            url: self.ws_url.clone(),
            headers,
            body: Some(evidence_text(&out.body)),
            body_bytes: out.body.len(),
        };
        let start = Instant::now();
        let mut earlier = Vec::new();
        let result = self.ws_round_trip(out, binary, override_token, token, &mut earlier).await;
        let mut ex = record(TransportKind::Ws, request, start, &result);
        if let Some(resp) = &mut ex.response {
            resp.earlier_frames = earlier;
        }
        (ex, result)
    }

    async fn ws_round_trip(
        &mut self,
        out: Outgoing,
        binary: bool,
        override_token: bool,
        token: Option<String>,
        earlier: &mut Vec<String>,
    ) -> Result<RawReply, String> {
        // Frames that arrived on the shared connection since the last exchange are not answers to this one. A
        // connection the server closed since (e.g. after refusing an oversize message with 1009) is replaced.
        if !override_token && let Some(ws) = self.ws.as_mut() {
            let mut closed = false;
            while let Ok(next) = tokio::time::timeout(Duration::from_millis(1), ws.next()).await {
                match next {
                    Some(Ok(Message::Text(t))) => earlier.push(t.as_str().to_owned()),
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                        closed = true;
                        break;
                    }
                    Some(Ok(_)) => {}
                }
            }
            if closed {
                self.ws = None;
                earlier.push("(the server had closed the previous connection; reconnected)".into());
            }
        }
        // A request with its own token gets its own connection; the shared one is (re)opened on demand.
        let mut own;
        let stream = if override_token {
            own = self.connect_ws(token.as_deref()).await?;
            &mut own
        } else {
            if self.ws.is_none() {
                self.ws = Some(self.connect_ws(token.as_deref()).await?);
            }
            match self.ws.as_mut() {
                Some(s) => s,
                None => return Err("websocket not connected".into()),
            }
        };
        let message = if binary {
            Message::Binary(out.body.into())
        } else {
            Message::Text(String::from_utf8_lossy(&out.body).into_owned().into())
        };
        let sent = stream.send(message).await;
        let wait = if out.reply_optional { Duration::from_millis(1500).min(self.timeout) } else { self.timeout };
        let expect = Expect {
            optional: out.reply_optional,
            task_id: out.task_id.as_deref(),
            message_id: out.message_id.as_deref(),
        };
        let result = match sent {
            // The server may have answered (an error frame, a close frame) and closed before taking the whole
            // message; read what arrived before judging.
            Err(e) => match read_answer(stream, Duration::from_millis(500), &expect, earlier).await {
                Ok(r) if !r.no_reply => {
                    earlier.push(format!("(sending did not complete: {e})"));
                    Ok(r)
                }
                _ => Err(format!("websocket send failed: {e}")),
            },
            Ok(()) => read_answer(stream, wait, &expect, earlier).await,
        };
        let broken = match &result {
            Err(_) => true,
            Ok(r) => r.close_code.is_some(),
        };
        if broken && !override_token {
            // Reconnect on the next request.
            self.ws = None;
        }
        result
    }
}

/// What the answer being waited for looks like.
struct Expect<'a> {
    optional: bool,
    task_id: Option<&'a str>,
    message_id: Option<&'a str>,
}

async fn read_answer(
    stream: &mut WebSocketStream<MaybeTlsStream<TcpStream>>,
    wait: Duration,
    expect: &Expect<'_>,
    earlier: &mut Vec<String>,
) -> Result<RawReply, String> {
    let optional = expect.optional;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let frame = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) if optional => return Ok(RawReply { no_reply: true, ..RawReply::default() }),
            Err(_) => return Err(format!("no answer within {} ms", wait.as_millis())),
            Ok(None) => return Err("connection closed without a close frame".into()),
            Ok(Some(Err(e))) => return Err(format!("websocket error: {e}")),
            Ok(Some(Ok(frame))) => frame,
        };
        match frame {
            Message::Text(t) => {
                let text = t.as_str();
                if is_interim(text, expect) {
                    earlier.push(text.to_owned());
                    continue;
                }
                return Ok(RawReply {
                    status: None,
                    content_type: Some("application/json".into()),
                    body: text.as_bytes().to_vec(),
                    no_reply: false,
                    close_code: None,
                    retried_after: None,
                });
            }
            Message::Binary(b) => {
                return Ok(RawReply {
                    status: None,
                    content_type: Some("application/octet-stream".into()),
                    body: b.to_vec(),
                    no_reply: false,
                    close_code: None,
                    retried_after: None,
                });
            }
            Message::Close(frame) => {
                let (code, reason) = frame.map_or((1005, String::new()), |f| (u16::from(f.code), f.reason.to_string()));
                return Ok(RawReply {
                    status: None,
                    content_type: None,
                    body: reason.into_bytes(),
                    no_reply: false,
                    close_code: Some(code),
                    retried_after: None,
                });
            }
            // Pings are answered by tungstenite itself.
            _ => continue,
        }
    }
}

/// A frame that is not the answer: a TASK_UPDATE for the awaited task, or a frame that names (in the `in_reply_to`
/// correlation member some servers add) another message than the one sent.
fn is_interim(text: &str, expect: &Expect<'_>) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return false };
    if let (Some(reply_to), Some(sent)) = (v.get("in_reply_to").and_then(|r| r.as_str()), expect.message_id)
        && reply_to != sent
    {
        return true;
    }
    match v.pointer("/body/type").and_then(|t| t.as_str()) {
        Some("TASK_UPDATE") => {
            expect.task_id.is_some() && v.pointer("/body/task_id").and_then(|t| t.as_str()) == expect.task_id
        }
        _ => false,
    }
}

/// What `POST /ldp/stream` got back: the raw reply (its body the stream bytes read) and the events in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamReply {
    pub reply: RawReply,
    /// The events read, when the reply is `text/event-stream`.
    pub events: Vec<SseEvent>,
    /// The request timeout ran out before the final event or the end of the stream.
    pub timed_out: bool,
}

/// Whether `event` ends a task's stream: an `error` event, or an envelope whose body is a TASK_RESULT or
/// TASK_FAILED.
pub(crate) fn is_final_event(event: &SseEvent) -> bool {
    if event.event == "error" {
        return true;
    }
    let json = serde_json::from_str::<serde_json::Value>(&event.data).ok();
    let ty = json.as_ref().and_then(|j| j.pointer("/body/type")).and_then(serde_json::Value::as_str);
    matches!(ty, Some("TASK_RESULT" | "TASK_FAILED"))
}

async fn read_stream(req: reqwest::RequestBuilder) -> Result<StreamReply, String> {
    let mut resp = req.send().await.map_err(describe_reqwest)?;
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let is_stream = crate::media::is_media_type(content_type.as_deref(), "text/event-stream");
    let mut parser = SseParser::default();
    let mut out = StreamReply::default();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                out.reply.body.extend_from_slice(&chunk);
                if is_stream {
                    let events = match parser.push(&chunk) {
                        Ok(events) => events,
                        Err(e) => return Err(format!("event stream: {e}")),
                    };
                    let done = events.iter().any(is_final_event);
                    out.events.extend(events);
                    if done {
                        break;
                    }
                }
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() && is_stream => {
                out.timed_out = true;
                break;
            }
            Err(e) => return Err(describe_reqwest(e)),
        }
    }
    out.reply.status = Some(status);
    out.reply.content_type = content_type;
    Ok(out)
}

async fn http_reply(sent: Result<reqwest::Response, reqwest::Error>) -> Result<RawReply, String> {
    let resp = sent.map_err(describe_reqwest)?;
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = resp.bytes().await.map_err(describe_reqwest)?;
    Ok(RawReply {
        status: Some(status),
        content_type,
        body: body.to_vec(),
        no_reply: false,
        close_code: None,
        retried_after: None,
    })
}

fn describe_reqwest(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "reading the body failed"
    } else {
        "request failed"
    };
    let mut msg = format!("{kind}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

fn record(
    transport: TransportKind,
    request: RequestRecord,
    start: Instant,
    result: &Result<RawReply, String>,
) -> Exchange {
    let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(r) => {
            let mut headers = BTreeMap::new();
            if let Some(ct) = &r.content_type {
                headers.insert("content-type".into(), ct.clone());
            }
            let response = (!r.no_reply).then(|| ResponseRecord {
                status: r.status,
                headers,
                body: (!r.body.is_empty()).then(|| evidence_text(&r.body)),
                body_bytes: r.body.len(),
                close_code: r.close_code,
                earlier_frames: Vec::new(),
            });
            let error = r.no_reply.then(|| "no reply frame (none needed)".to_owned());
            Exchange { transport, request, response, error, elapsed_ms, findings: Vec::new() }
        }
        Err(e) => {
            Exchange { transport, request, response: None, error: Some(e.clone()), elapsed_ms, findings: Vec::new() }
        }
    }
}
