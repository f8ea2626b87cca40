//! The WebSocket binding of LDP: many sessions multiplexed over one persistent connection, TASK_UPDATEs pushed as
//! they happen, TASK_CANCEL delivered to the running task, and sessions that survive a dropped connection.
//!
//! ```text
//!   Client<WsTransport> ══ one WebSocket (text frames, one envelope each) ══► GET /ldp/ws ──► WsServer
//!     exchange() ─┐                                                                 reader ─► handler per envelope
//!     exchange() ─┼─► send queue ─► writer ──────────────────────────────────►        (concurrent, bounded) ──┐
//!     exchange() ─┘                                                                                           ▼
//!          ▲        reader ◄── replies, TASK_UPDATEs (matched by "in_reply_to") ◄── writer ◄── bounded queue ◄┘
//!          └────────────────┘                                                  DelegateRuntime (ldp-session)
//! ```
//!
//! - **Server**: [`WsServer`] runs one loop per connection, generic over any `Sink<Message>` +
//!   `Stream<Item = Result<Message, WireError>>` (the axum adapter is a few lines; the tests drive it with
//!   channels). [`ws_router`] / [`WsServer::router`] give `GET /ldp/ws` to merge into the HTTP binding's router;
//!   [`serve_ws`] / [`spawn_ws`] serve it alone. Each connection gets an id in [`PeerContext::connection`]; each text
//!   frame is handed to [`DelegateRuntime::handle`] on its own task (at most `max_in_flight` at once), so a long task
//!   never blocks the connection's other sessions.
//! - **Client**: [`WsTransport`] implements [`Transport`], so swapping HTTP for WebSocket is one line:
//!   `HttpTransport::new(url)?` becomes `WsTransport::connect(url, WsOptions::default()).await?` (the same
//!   `http://host:port` URL is accepted).
//! - **TLS**: `wss://` (or `https://`) URLs connect over rustls with the web PKI roots; merged into the HTTP binding's
//!   router and served by its `serve_router_tls` (feature `tls`), `/ldp/ws` is `wss://`. A private CA and a client
//!   certificate for mutual TLS are set with [`WsOptions::tls_root_certificate_pem`] and
//!   [`WsOptions::tls_client_identity_pem`] (or a whole [`ClientTls`], shared with an `HttpTransport`, through
//!   [`WsOptions::tls`]); they apply to the identity request over `https://` too. [`rustls_client_config`] gives the
//!   same trust to a client that dials `wss://` itself.
//!
//! # Wire rules
//!
//! | client sends | server answers |
//! | --- | --- |
//! | a text frame with one envelope | the reply envelope (CAPABILITY_MANIFEST, SESSION_ACCEPT/REJECT, TASK_RESULT/FAILED, TASK_UPDATE, SESSION_CLOSE), or `{"accepted": true}` for a message without a reply (ATTESTATION); TASK_UPDATEs of a running task before its result |
//! | garbage JSON, not an envelope | `{"error": <LdpError MALFORMED_MESSAGE>}` (a TASK_FAILED when addressable); the connection keeps serving |
//! | a binary frame | `{"error": <LdpError MALFORMED_MESSAGE>}`; the connection keeps serving |
//! | a message over `max_message` | `{"error": <LdpError MESSAGE_TOO_LARGE>}`, then close code 1009 |
//! | an upgrade without a known bearer token (when tokens are configured) | HTTP 401, `WWW-Authenticate: Bearer`, body `{"error": <LdpError UNAUTHENTICATED>}`; no upgrade |
//! | nothing (not even a pong to the server's pings) for `idle_timeout` | close code 1001; the sessions are suspended |
//! | an upgrade from a web page of another origin (an `Origin` header neither matching `Host` nor in `allowed_origins`) | HTTP 403, body `{"error": <LdpError TRUST_VIOLATION>}`; no upgrade |
//! | nothing read by the client: frames not queued (`max_outbound_bytes`, `outbound_queue`) or written within `write_timeout` | the connection is closed; its sessions are suspended, their unwritten results kept for the resume |
//! | messages from one principal (bearer token or certificate, else address) faster than `max_inbound_rate` bytes/s across its connections, beyond a burst | its sockets are left unread until the excess drains (TCP backpressure); nothing is refused |
//! | (server shutting down) | close code 1001 |
//!
//! **Correlation extension.** Every server frame that answers a client message carries the top-level member
//! `"in_reply_to": "<message_id of that message>"` (an envelope extension member; control frames carry it too).
//! Pushed TASK_UPDATEs carry the id of their TASK_SUBMIT. The client strips the member before handing an envelope to
//! the session layer, so signatures made over the envelope as the responder built it still verify. Results delivered
//! after a resume carry no `in_reply_to`; they are matched by `session_id` and `body.task_id`.
//!
//! # Disconnect and resume
//!
//! When a connection ends, the server suspends its sessions in the session machine
//! ([`Responder::suspend_connection`]); tasks keep running, and results that complete meanwhile are held by the
//! machine ([`Responder::take_held`]), as are results that were queued but not yet written (handed to it with
//! [`Responder::hold`]). Which connection carries a session is the machine's too ([`Responder::connection_of`]):
//! the server only keeps each open connection's outbound queue. The client reconnects with
//! backoff (its [`RetryPolicy`]) and hands the tasks it had written on the lost connection to the initiator of its
//! `Client` (its driver attached with `Transport::attach`; the same driver resumes HTTP tasks), whose rules the rest
//! follows ([`ldp_session::Initiator::handle_disconnect`]): for every such task it sends a **TASK_UPDATE status query** in
//! the task's session, built and signed like all its messages (RFC 3.2 TASK_UPDATE sent to a responder is answered
//! as a status query). That message resumes the
//! session (SUSPENDED -> ACTIVE), and the server writes the session's held results *before* the status answer, each
//! exactly once (the machine hands each out once; the client drops anything it no longer waits for). The answer
//! then settles the rest: `running` (the result will come), the task's TASK_RESULT (a completed task still kept in
//! its session's context: that is its answer), `completed`/`failed`/`cancelled` without a result (it was
//! lost in transit with the old connection: the task fails with a `transport` error after `resume_grace`), or
//! `TASK_NOT_FOUND` (the server never received the task: the initiator submits it again, and a `DUPLICATE_TASK`
//! answer to that copy means the first arrived after all: its result is awaited, the task never runs twice).
//! Requests other than
//! TASK_SUBMIT left unanswered by the dropped connection fail with a non-retryable `transport` error, since they
//! may have been processed.
//! A task whose answer is lost more often than the initiator allows ([`ldp_session::Initiator::set_max_resumes`])
//! fails with a non-retryable `transport` error rather than being queried for ever.
//!
//! Results kept for resume are bounded by the machine ([`HeldLimits`]: per session and in total, by count and bytes;
//! the responder's `Limits::held` sets them, whichever binding serves it). Beyond the limits the oldest are dropped, and the resuming client receives, for each dropped task, a TASK_FAILED with code
//! `RESULT_NOT_KEPT` (not retryable: the task ran) in place of its result, so no task is left waiting silently.
//! [`WsServer::held_stats`] reports what is held and what was dropped.
//!
//! # Example
//!
//! A delegate served over WebSocket alone, and a client on loopback:
//!
//! ```
//! use std::sync::Arc;
//! use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate};
//! use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock};
//! use ldp_transport_ws::{WsOptions, WsServerConfig, WsTransport, spawn_ws};
//! use ldp_types::{Capability, DelegateId, IdentityCard, SessionConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo")?, "Echo", "none", "1");
//! card.capabilities.push(Capability::new("echo"));
//! let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
//! let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
//! let server = spawn_ws("127.0.0.1:0", runtime, WsServerConfig::default()).await?;
//!
//! let transport = WsTransport::connect(server.url(), WsOptions::default()).await?;
//! let client = Client::connect(transport, InitiatorConfig::new("ldp:delegate:me"), Arc::new(SystemClock),
//!     Box::new(SeededIds::from_entropy())).await?;
//! let session = client.propose(SessionConfig::default()).await?;
//! let outcome = client.submit(&session.session_id, "echo", serde_json::json!("hi"), None).await?;
//! assert_eq!(outcome.output, serde_json::json!({ "echo": "hi" }));
//! client.close(&session.session_id).await?;
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! [`PeerContext::connection`]: ldp_session::PeerContext::connection
//! [`DelegateRuntime::handle`]: ldp_session::runtime::DelegateRuntime::handle
//! [`Transport`]: ldp_session::runtime::Transport
//! [`Responder::suspend_connection`]: ldp_session::Responder::suspend_connection
//! [`Responder::take_held`]: ldp_session::Responder::take_held
//! [`Responder::hold`]: ldp_session::Responder::hold
//! [`Responder::connection_of`]: ldp_session::Responder::connection_of
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]
// With neither side there is nothing to use the shared wire helpers.
#![cfg_attr(not(any(feature = "server", feature = "client")), allow(dead_code, unused_imports))]

#[cfg(feature = "client")]
mod client;
mod error;
#[cfg(feature = "server")]
mod inbound;
#[cfg(feature = "server")]
mod server;
mod wire;

/// The path of the WebSocket binding.
pub const WS_PATH: &str = "/ldp/ws";

#[cfg(feature = "client")]
pub use client::{WsOptions, WsStats, WsTransport, rustls_client_config};
pub use error::Error;
/// The client settings every transport shares (re-exported from `ldp-transport-http`, which uses the same types):
/// [`WsOptions`] carries a [`ConnectOptions`] and has the [`ConnectSettings`] setters.
pub use ldp_edge::{ClientTls, ConnectOptions, ConnectSettings, RetryPolicy, TokenSource};
/// The bounds on task answers held for resume, and what is held (the session machine's: [`ldp_session::Limits::held`]).
pub use ldp_session::{HeldLimits, HeldStats};
#[cfg(feature = "server")]
pub use server::{ConnectionEnd, WsServer, WsServerConfig, WsServerHandle, serve_ws, spawn_ws, ws_router};
pub use wire::{CloseFrame, IN_REPLY_TO, Message, WireError, close_code};
