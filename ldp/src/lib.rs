//! The LDP front door: serve a delegate from typed skill closures, and call one in a line.
//!
//! ```text
//!   Delegate::builder(id).skill(name, |input: I, cx| async { Ok(output) })   connect(url).call(skill, input)
//!        │ card (skills + JSON Schemas), input read into I, output from O          │ discovery, lazy session,
//!        ▼                                                                         ▼ typed output + provenance
//!   ldp-session DelegateRuntime ◄── ldp-transport-http (HTTP + SSE) + ldp-transport-ws (/ldp/ws) ──► Client
//! ```
//!
//! Each skill is declared once: its name, input schema and output schema go on the identity card, and tasks for it
//! run its closure with the input read into the closure's `Deserialize` type (an [`INVALID_INPUT`] `capability` error
//! when it does not fit) and a [`TaskContext`]: the session's earlier turns ([`TaskContext::history`], RFC 5.3),
//! partial output ([`TaskContext::partial`], streamed as TASK_UPDATEs), and the cancellation signal
//! ([`TaskContext::cancelled`]). The output is any `Serialize` value, or an [`Output`] with usage figures.
//! Every protocol rule stays in the layers underneath, re-exported here for what the front door does not cover:
//! [`types`] (wire types), [`session`] (the sans-IO machines and runtime), [`http`] and [`ws`] (the bindings),
//! [`router`] (selection, attestations); [`issuers`] fetches attestation issuers' documents for the router.
//!
//! A delegate can require bearer tokens and signatures ([`DelegateBuilder::token`], [`DelegateBuilder::signing_key`]),
//! describe its skills on the card ([`DelegateBuilder::describe`]), and shuts down gracefully on SIGTERM or SIGINT
//! ([`DelegateBuilder::serve`], [`Server::shutdown`]: new work refused, running tasks given a grace). A client picks
//! HTTP or WebSocket by the URL's scheme and takes a token, a signing key, TLS roots and timeouts from one
//! [`ClientOptions`] ([`connect_with`]).
//!
//! A delegate and a client, on loopback:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ldp::Error> {
//! let server = ldp::Delegate::builder("ldp:delegate:upper")
//!     .skill("upper", |input: String, cx: ldp::TaskContext| async move {
//!         let turns = cx.history().len(); // earlier tasks of this session
//!         Ok(format!("{} (turn {})", input.to_uppercase(), turns + 1))
//!     })
//!     .spawn("127.0.0.1:0")
//!     .await?;
//!
//! let upper = ldp::connect(server.url()).await?;
//! let answer: ldp::Answer<String> = upper.call("upper", "hi").await?;
//! assert_eq!(answer.output, "HI (turn 1)");
//! assert_eq!(answer.provenance.produced_by, "ldp:delegate:upper");
//! let again: ldp::Answer<String> = upper.call("upper", "again").await?; // same session, no context re-sent
//! assert_eq!(again.output, "AGAIN (turn 2)");
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "llm")]
pub mod delegates;
#[cfg(feature = "client")]
pub mod issuers;
#[cfg(feature = "server")]
mod launch;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "client")]
pub use client::{Answer, CLIENT_ID, Canceller, ClientOptions, Connection, Event, Stream, connect, connect_with};
#[cfg(feature = "server")]
pub use launch::{Server, shutdown_signal};
pub use ldp_session::runtime::TaskContext;
pub use ldp_session::{History, Limits, TaskOutput, Turn};
/// Token sources for [`ClientOptions::token_source`](ConnectSettings::token_source): OAuth 2.0 client credentials
/// and a command's output, cached and refreshed before expiry.
#[cfg(feature = "client")]
pub use ldp_transport_http::{ClientCredentials, CommandToken, TokenFetchError};
/// The transport settings of [`ClientOptions`]: token, TLS, timeouts, retries.
#[cfg(feature = "client")]
pub use ldp_transport_http::{ClientTls, ConnectOptions, ConnectSettings, RetryPolicy, TokenSource};
pub use ldp_types::{LdpError, Provenance, RawJson};
#[cfg(feature = "server")]
pub use server::{Delegate, DelegateBuilder, INVALID_INPUT, IntoOutput, Output};

/// Routing by verified quality, attestations and their issuers (`ldp-router`).
pub use ldp_router as router;
/// The session layer: sans-IO machines and the async runtime (`ldp-session`).
pub use ldp_session as session;
/// The HTTP/SSE binding (`ldp-transport-http`).
pub use ldp_transport_http as http;
/// The WebSocket binding (`ldp-transport-ws`).
#[cfg(feature = "ws")]
pub use ldp_transport_ws as ws;
/// The wire types (`ldp-types`).
pub use ldp_types as types;

/// What can go wrong in the front door; a delegate's own refusals arrive as [`Error::Session`] with its
/// [`LdpError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The delegate id is not `ldp:delegate:<name>`.
    #[error("invalid delegate id {0:?}: expected ldp:delegate:<name>")]
    InvalidDelegateId(String),
    /// A skill was declared twice.
    #[error("skill {0:?} is declared twice")]
    DuplicateSkill(String),
    /// Binding or serving failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The HTTP client could not be built (a bad URL).
    #[error("http: {0}")]
    Http(#[from] ldp_transport_http::Error),
    /// The WebSocket client could not connect (a bad URL, a refused upgrade, TLS).
    #[cfg(feature = "ws")]
    #[error("websocket: {0}")]
    Ws(#[from] ldp_transport_ws::Error),
    /// The URL's scheme is none of `http`, `https`, `ws`, `wss` (`ws` and `wss` with the `ws` feature).
    #[error("unsupported URL {0:?}: expected http://, https://, ws:// or wss://")]
    UnsupportedScheme(String),
    /// The server configuration is malformed or incomplete (the file, line or key is named).
    #[cfg(feature = "server")]
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The address to listen on could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address (`bind`).
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store could not be opened (a wrong password or database, a certificate that does not verify, a
    /// database file that cannot be created, or a backend this build lacks).
    #[cfg(feature = "server")]
    #[error("store: {0}")]
    Store(#[from] ldp_store::OpenError),
    /// The store could not be closed at shutdown (what it held may not all be written).
    #[cfg(feature = "server")]
    #[error("closing the store: {0}")]
    StoreClose(#[source] ldp_session::store::StoreError),
    /// A key's value could not be put to use: a file that cannot be read, a key that does not parse, a backend or
    /// bridged server that does not answer.
    #[error("{key}: {source}")]
    Setup {
        /// The configuration key.
        key: String,
        /// What went wrong.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A key asks for what this build was compiled without.
    #[error("{key}: this build lacks the `{feature}` feature")]
    FeatureMissing {
        /// The key.
        key: &'static str,
        /// The cargo feature of `ldp-sdk` (or `ldp-cli`) that brings it.
        feature: &'static str,
    },
    /// The session layer or the delegate refused or failed (the delegate's typed error is inside).
    #[error(transparent)]
    Session(#[from] ldp_session::SessionError),
    /// The input could not be encoded as JSON.
    #[error("input not encodable: {0}")]
    Input(serde_json::Error),
    /// The output did not fit the type asked for.
    #[error("output does not fit the expected type: {0}")]
    Output(serde_json::Error),
    /// An issuer's base URL is not an `http://` or `https://` URL ([`issuers::IssuerSource::new`]).
    #[error("issuer URL {url:?}: {reason}")]
    IssuerUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An issuer document could not be fetched: connection, TLS or HTTP failure.
    #[error("GET {url}: {reason}")]
    IssuerFetch {
        /// The document's URL.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// An issuer document did not arrive within [`issuers::FetchLimits::timeout`].
    #[error("GET {url}: no complete answer within {after:?}")]
    IssuerTimeout {
        /// The document's URL.
        url: String,
        /// The bound.
        after: std::time::Duration,
    },
    /// The issuer's server answered with an HTTP status other than success.
    #[error("GET {url}: HTTP status {status}")]
    IssuerStatus {
        /// The document's URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// An issuer document is larger than [`issuers::FetchLimits::max_bytes`] (not read beyond the bound).
    #[error("GET {url}: the document exceeds {limit} bytes")]
    IssuerTooLarge {
        /// The document's URL.
        url: String,
        /// The bound.
        limit: usize,
    },
    /// An issuer document is not the JSON object it should be.
    #[cfg(feature = "client")]
    #[error("GET {url}: not a {document}: {reason}")]
    IssuerMalformed {
        /// The document's URL.
        url: String,
        /// Which document.
        document: issuers::IssuerDocument,
        /// The decoder's error.
        reason: String,
    },
    /// An issuer document names another issuer than the one it was fetched for.
    #[error("{url} is a document of issuer {actual:?}, not of {expected:?}")]
    IssuerMismatch {
        /// The document's URL.
        url: String,
        /// The issuer it was fetched for.
        expected: String,
        /// The issuer it names.
        actual: String,
    },
    /// The router refused an issuer document (signer not trusted, bad signature, older than the one held, too
    /// many entries): the documents held before stay in force.
    #[cfg(feature = "client")]
    #[error("{url}: {document} refused: {error}")]
    IssuerRefused {
        /// The document's URL.
        url: String,
        /// Which document.
        document: issuers::IssuerDocument,
        /// The router's reason.
        error: ldp_router::issuer::IssuerDocumentError,
    },
}
