//! The HTTP/SSE binding of LDP (RFC 8): an axum server around an `ldp_session` [`DelegateRuntime`], and a
//! `reqwest` client implementing the session crate's [`Transport`].
//!
//! ```text
//!   Client<HttpTransport> ──POST /ldp/messages──► router(HttpState) ──► DelegateRuntime ──► Delegate
//!        (retries, SSE)   ◄── envelope / SSE ───   (auth, limits,         (Responder: trust, TTL,
//!                                                   timeouts, tracing)     signatures, replay)
//! ```
//!
//! Routes of [`router`]:
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /.well-known/ldp-identity` (RFC 2.3), `GET /ldp/identity` (reference SDKs) | the identity card |
//! | `GET /ldp/capabilities` | `{"capabilities": [...], "supported_modes": [...]}` |
//! | `POST /ldp/messages` | one envelope in, one envelope out (202 with no body for an ATTESTATION) |
//! | `POST /ldp/stream` | SSE: `event: envelope` TASK_UPDATEs, then the TASK_RESULT / TASK_FAILED; `event: error` with `{"error": ...}` if the stream fails after it started |
//!
//! Every failure is answered with an LDP body: the reply envelope when the session layer produced one (a
//! TASK_FAILED or SESSION_REJECT addressed to the sender), otherwise `{"error": <LdpError>}`. The status comes from
//! one function, [`status_for`], plus the transport's own checks:
//!
//! | failure | status | body |
//! | --- | --- | --- |
//! | `MALFORMED_MESSAGE` (bad JSON, not an envelope, empty `task_id`), `UNKNOWN_MESSAGE_TYPE` | 400 | error, or TASK_FAILED when addressable |
//! | content type not `application/json` | 415 | error `MALFORMED_MESSAGE` |
//! | body over `max_body` (`MESSAGE_TOO_LARGE`) | 413 | error |
//! | bearer token missing / unknown, or sender not the token's delegate (`UNAUTHENTICATED`) | 401 + `WWW-Authenticate: Bearer` | error / TASK_FAILED |
//! | `security` category: bad or missing signature, replay, stale timestamp | 401 + `WWW-Authenticate: LDP-Signature` | TASK_FAILED / SESSION_REJECT |
//! | `TRUST_VIOLATION` (untrusted or contradicted domain, `required_trust_domain` mismatch) | 403 | SESSION_REJECT |
//! | `NOT_SESSION_PEER` (a message into a session opened by another principal: other bearer token, certificate or `from`) | 403 | TASK_FAILED |
//! | other refusals with a reply: `SESSION_NOT_FOUND`, `SESSION_CLOSED`, `SESSION_EXPIRED`, `SKILL_NOT_FOUND`, `PAYLOAD_MODE_FAILED`, `CAPACITY_EXCEEDED`, `DUPLICATE_TASK`, `INVALID_STATE`, ... | 200 | TASK_FAILED / SESSION_REJECT |
//! | task failures (`CONTRACT_VIOLATED`, `EXECUTION_FAILED`, `CANCELLED`, ...) | 200 | TASK_FAILED |
//! | no answer within `request_timeout` (`TIMEOUT`, transport, not retryable) | 504 | error |
//! | unknown path | 404 | error |
//!
//! Why: session-level answers are protocol answers (the Python reference client fails on any non-2xx, and a
//! TASK_FAILED is the RFC's way to say no); security failures get 401 because the message was not accepted as
//! authentic and a 2xx would let a client that treats any non-REJECT answer to SESSION_PROPOSE as acceptance (the
//! Python one) believe it has a session. Nothing a client sends produces a 500.
//!
//! # Limits
//!
//! [`spawn`], [`serve`] and the `*_with_limits` functions serve connections with [`ConnectionLimits`] (the others
//! take the defaults): at most `max_connections` open at once (512; at the cap a connection no handler is serving,
//! idle, handshaking or still sending its request head or body, is closed to make room, taken from the address
//! holding the most connections; when every slot has a handler running or is an upgraded WebSocket, a plain-HTTP
//! connection is answered `503` with `Retry-After` and a retryable `CAPACITY_EXCEEDED` body without its request
//! being read, and a TLS one is closed before its handshake), `header_timeout` from the first byte of a request head
//! to its end (10 s), `idle_timeout` with no request in progress (60 s), `body_timeout` for the body (30 s), and a
//! minimum rate for heads and bodies (`min_head_rate`, `min_body_rate`: 1,024 bytes/s in every `min_rate_window` of
//! 5 s). A head or body over a limit is answered `408` with a retryable transport `TIMEOUT`, and the connection
//! closes. A never-ending chunked body ends at the body timeout
//! or at `max_body` (`413`). [`HttpServerConfig::rate_limit`] (a [`RateLimit`], off by default) allows each
//! principal (authenticated peer, else client IP) `N` requests per second or minute; beyond it `429` with
//! `Retry-After` and a retryable `CAPACITY_EXCEEDED`. [`ServerHandle::connections`] counts open connections.
//!
//! | failure | status | body |
//! | --- | --- | --- |
//! | too many open connections, none of them quiet | 503 + `Retry-After` | error `CAPACITY_EXCEEDED` (retryable) |
//! | over the principal's rate | 429 + `Retry-After` | error `CAPACITY_EXCEEDED` (retryable) |
//! | head not received within `header_timeout`, body not within `body_timeout`, or either below its minimum rate | 408 + `Connection: close` | error `TIMEOUT` (transport, retryable) |
//!
//! Authentication (RFC 8.3): [`HttpServerConfig::tokens`] maps bearer tokens to an [`AuthenticatedPeer`]; the
//! session layer then uses the token's trust domain and refuses a contradicting declaration. [`BearerAuth`] and
//! [`require_bearer`] are reusable by other bindings, and [`router_with`] adds their routes under the same layers.
//!
//! # TLS
//!
//! With the `tls` feature (off by default; the `ldp` CLI turns it on), `spawn_tls`, `serve_tls` and
//! `serve_router_tls` serve the same router over TLS 1.2/1.3 with rustls (the `ring` provider, chosen explicitly,
//! so no process-wide provider needs installing). `ServerTlsConfig` takes a PEM certificate chain and private key
//! (in memory or from files); each handshake runs on its own task with a timeout, and a failed one (a plain-HTTP
//! client, a refused certificate) only closes that connection.
//!
//! Mutual TLS (RFC 8.3) adds a `ClientAuth`: a client-CA bundle and a table from `ClientCertMatch` (a
//! certificate's SHA-256 fingerprint, `sha256:<hex>`, or a subjectAltName DNS name, `dns:<name>`) to an
//! [`AuthenticatedPeer`]. A verified, matching certificate authenticates its connection: each request on it carries
//! that peer in its [`PeerContext`](ldp_session::PeerContext), the same path a bearer token's identity takes to the
//! session layer, which then trusts only the certificate's domain (a contradicting declaration gets 403) and, when
//! the entry names a delegate id, only that sender. When mutual TLS is required (the default) a missing or
//! unmatched certificate fails the handshake; when optional, such clients fall back to the bearer-token rules.
//!
//! On the client side, [`HttpTransportBuilder::tls_root_certificate_pem`] trusts a private CA (or a self-signed
//! server) and [`HttpTransportBuilder::tls_client_identity_pem`] presents a client certificate; both need no
//! feature (reqwest's rustls backend is always on). They fill a [`ClientTls`], which the WebSocket transport and the
//! conformance kit take too, so one value configures every client of a process. The `test-pki` feature adds
//! `test_pki`: a throwaway CA for tests of such set-ups.
//!
//! Tracing: every message gets a server span whose parent is the request's W3C `traceparent` (absent or malformed:
//! a fresh trace), and the client sends the context of its span for each message ([`trace_context`]). The `otlp`
//! feature adds `otlp::OtlpExport`, which exports those spans over OTLP/HTTP (protobuf).
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn tls(state: ldp_transport_http::HttpState) -> Result<(), Box<dyn std::error::Error>> {
//! use ldp_session::AuthenticatedPeer;
//! use ldp_transport_http::{ClientAuth, ServerTlsConfig};
//!
//! let peer = AuthenticatedPeer { delegate_id: Some("ldp:delegate:planner".into()), trust_domain: "research".into() };
//! let mtls = ClientAuth::from_ca_file("client-ca.pem")?.peer("dns:planner.research.example".parse()?, peer);
//! let tls = ServerTlsConfig::from_pem_files("server.pem", "server.key", Some(mtls))?;
//! let server = ldp_transport_http::spawn_tls("0.0.0.0:8443", state, tls).await?;
//! println!("{}", server.url()); // https://0.0.0.0:8443
//! # Ok(()) }
//! ```
//!
//! A delegate and a client on loopback:
//!
//! ```
//! use std::sync::Arc;
//! use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate};
//! use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock};
//! use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
//! use ldp_types::{Capability, DelegateId, IdentityCard, SessionConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo")?, "Echo", "none", "1");
//! card.capabilities.push(Capability::new("echo"));
//! let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
//! let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
//! let server = ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await?;
//!
//! let transport = HttpTransport::new(server.url())?;
//! let client = Client::connect(transport, InitiatorConfig::new("ldp:delegate:me"), Arc::new(SystemClock),
//!     Box::new(SeededIds::from_entropy())).await?;
//! let session = client.propose(SessionConfig::default()).await?;
//! let outcome = client.submit(&session.session_id, "echo", serde_json::json!("hi"), None).await?;
//! assert_eq!(outcome.output, serde_json::json!({ "echo": "hi" }));
//! assert_eq!(outcome.provenance.produced_by, "ldp:delegate:echo");
//! client.close(&session.session_id).await?;
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! [`DelegateRuntime`]: ldp_session::runtime::DelegateRuntime
//! [`Transport`]: ldp_session::runtime::Transport
//! [`AuthenticatedPeer`]: ldp_session::AuthenticatedPeer
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "server")]
mod rate;
#[cfg(feature = "server")]
mod server;
pub mod sse;
#[cfg(feature = "test-pki")]
pub mod test_pki;
#[cfg(feature = "tls")]
mod tls;
/// W3C trace context in and out of the spans (re-exported from `ldp-edge`).
pub use ldp_edge::trace_context;

#[cfg(feature = "client")]
pub use client::{DEFAULT_REQUEST_TIMEOUT, HttpTransport, HttpTransportBuilder};
// The edge every binding shares, re-exported so that this crate's users need not name `ldp-edge`.
#[cfg(feature = "server")]
pub use ldp_edge::{
    BearerAuth, ConnectionLimits, ConnectionStats, HttpError, HttpMetrics, METRICS_CONTENT_TYPE, TransportFigures,
    TransportSource, require_bearer, serve_router, serve_router_with_limits, status_for,
};
pub use ldp_edge::{
    CAPABILITIES, ClientTls, ConnectOptions, ConnectSettings, Credentials, DEFAULT_MAX_RESPONSE_BYTES, Error, HEALTHZ,
    IDENTITY, MESSAGES, METRICS, READYZ, RetryPolicy, STREAM, TokenSource, WELL_KNOWN_IDENTITY,
};
#[cfg(feature = "client")]
pub use ldp_edge::{ClientCredentials, CommandToken, TokenFetchError, fetch_identity, identity_urls};
#[cfg(feature = "server")]
pub use ldp_edge::{
    DEFAULT_ALGORITHMS as JWT_ALGORITHMS, JwtAlgorithm, JwtAuth, JwtConfig, KeyFetchError, PROTECTED_RESOURCE_METADATA,
    ProtectedResource, TokenError, metadata_routes,
};
#[cfg(feature = "server")]
pub use rate::{InvalidRate, RateLimit};
#[cfg(feature = "server")]
pub use server::{HttpServerConfig, HttpState, ServerHandle, router, router_with, serve, spawn};
#[cfg(feature = "tls")]
pub use tls::{
    ClientAuth, ClientCertMatch, ServerTlsConfig, serve_router_tls, serve_router_tls_with_limits, serve_tls, spawn_tls,
};
