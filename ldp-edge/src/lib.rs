//! What every LDP binding shares at the network's edge, so that neither the HTTP nor the WebSocket binding depends
//! on the other: who a request comes from and whether its bearer token is known, how a refusal becomes an HTTP
//! status and body, what `/metrics` reports, and on the client side how a delegate is reached (token, TLS,
//! timeouts, retries) and its identity card discovered.
//!
//! | module | owns |
//! | --- | --- |
//! | `auth` (feature `server`) | [`BearerAuth`]: token -> authenticated peer, compared in constant time; [`require_bearer`], [`BearerLayer`] |
//! | `jwt` (feature `server`) | [`JwtAuth`]: JWT access tokens checked against an issuer's cached keys, [`TokenError`] |
//! | `oauth` (feature `server`) | [`ProtectedResource`]: RFC 9728 metadata, challenges pointing at it, scopes per endpoint |
//! | `source` (feature `server`) | [`identify_client`]: the client's address (trusted proxies), two `Authorization` headers refused |
//! | `error` | [`Error`] (this crate's and the bindings' API errors); [`HttpError`] and [`status_for`], the one status table (feature `server`) |
//! | `conn` (feature `server`) | the one listener: [`serve_router`], [`ConnectionLimits`] (cap, eviction, head/body/idle timeouts, minimum rates) |
//! | `metrics` (feature `server`) | [`HttpMetrics`], the Prometheus registry every binding reports to |
//! | `options`, `client_tls` | [`ConnectOptions`] and its [`ConnectSettings`] setters, [`RetryPolicy`], [`ClientTls`], [`TokenSource`] |
//! | `token_sources` (feature `client`) | [`ClientCredentials`] (OAuth 2.0 client credentials), [`CommandToken`]: cached, refreshed before expiry |
//! | `discovery` (feature `client`) | [`fetch_identity`], [`send_retrying`], bounded bodies, typed `transport` errors |
//! | `paths`, [`trace_context`] | the RFC 8 paths; W3C trace context in and out of spans |
//!
//! ```
//! use std::time::Duration;
//! use ldp_edge::{ConnectOptions, ConnectSettings, RetryPolicy};
//!
//! let options = ConnectOptions::new().bearer_token("t0k").request_timeout(Duration::from_secs(5));
//! assert_eq!(options.retry.unwrap_or_else(RetryPolicy::reconnect).max_retries, 10);
//! ```
#![warn(missing_docs)]
// The tour links to every feature's items; docs.rs builds with all of them.
#![cfg_attr(not(all(feature = "server", feature = "client")), allow(rustdoc::broken_intra_doc_links))]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

#[cfg(feature = "server")]
mod auth;
mod client_tls;
#[cfg(feature = "server")]
mod conn;
#[cfg(feature = "client")]
mod discovery;
mod error;
#[cfg(feature = "server")]
mod jwt;
#[cfg(feature = "server")]
mod metrics;
#[cfg(feature = "server")]
mod oauth;
mod options;
mod paths;
#[cfg(feature = "server")]
mod source;
#[cfg(feature = "client")]
mod token_sources;
pub mod trace_context;

#[cfg(feature = "server")]
pub use auth::{BearerAuth, BearerLayer, RequireBearer, require_bearer};
pub use client_tls::ClientTls;
#[cfg(feature = "server")]
pub use conn::{
    BodyTooSlow, ConnectionLimits, ConnectionStats, Establish, EstablishedPeer, Plain, body_too_slow,
    refusal_with_retry, retry_after, serve_connections, serve_established, serve_router, serve_router_with_limits,
    stop_and_join,
};
#[cfg(feature = "client")]
pub use discovery::{
    RequestFailure, fetch_identity, identity_urls, read_body, read_body_checked, request_error, send_checked,
    send_retrying, status_error,
};
pub use error::Error;
#[cfg(feature = "server")]
pub use error::{HttpError, error_body, json_response, status_for};
#[cfg(feature = "server")]
pub use jsonwebtoken::Algorithm as JwtAlgorithm;
#[cfg(feature = "server")]
pub use jwt::{DEFAULT_ALGORITHMS, DEFAULT_MAX_TOKEN_BYTES, JwtAuth, JwtConfig, KeyFetchError, TokenError};
#[cfg(feature = "server")]
pub use metrics::{HttpMetrics, METRICS_CONTENT_TYPE, TransportFigures, TransportSource, reply_label};
#[cfg(feature = "server")]
pub use oauth::{PROTECTED_RESOURCE_METADATA, ProtectedResource, metadata_routes};
pub use options::{ConnectOptions, ConnectSettings, Credentials, DEFAULT_MAX_RESPONSE_BYTES, RetryPolicy, TokenSource};
pub use paths::{CAPABILITIES, HEALTHZ, IDENTITY, MESSAGES, METRICS, READYZ, STREAM, WELL_KNOWN_IDENTITY};
#[cfg(feature = "server")]
pub use source::{TrustedProxies, ambiguous_credentials, identify, identify_client};
#[cfg(feature = "client")]
pub use token_sources::{ClientCredentials, CommandToken, TokenFetchError};
