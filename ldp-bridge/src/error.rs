//! The bridge's one error type.

use std::time::Duration;

use ldp_session::SessionError;
use ldp_types::{LdpError, codes};

/// What can go wrong in a bridge. Failures of the LDP side keep their typed [`LdpError`] (through
/// [`BridgeError::to_ldp_error`]), which is what the other protocol's caller is shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The LDP delegate refused or failed, or the session layer did (its typed error inside).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The LDP delegate could not be reached or discovered.
    #[error("LDP delegate: {0}")]
    Http(#[from] ldp_transport_http::Error),
    /// A wait of the bridge ran past its bound.
    #[error("{what} took longer than {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The bound.
        after: Duration,
    },
    /// A resource the other protocol's peers can grow is at its bound.
    #[error("{what}: at the bound of {limit}")]
    Capacity {
        /// Which resource.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// A call came from another principal than the one whose credentials opened the bridged session.
    #[error("this bridged session's LDP session belongs to another principal")]
    NotSessionPeer,
    /// The MCP side failed (its SDK's service could not start or ended with an error).
    #[error("MCP: {0}")]
    Mcp(String),
    /// The A2A side failed: the agent could not be reached, sent something that is not A2A, or refused.
    #[error("A2A: {0}")]
    A2a(String),
    /// Standard input or output failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl BridgeError {
    /// The typed LDP error closest to this failure: the delegate's own when it answered, else one of the catalogue's
    /// codes (`TIMEOUT`, `CAPACITY_EXCEEDED`, `NOT_SESSION_PEER`, `TRANSPORT_ERROR`).
    pub fn to_ldp_error(&self) -> LdpError {
        match self {
            Self::Session(e) => e.to_ldp_error(),
            Self::Http(e) => LdpError::transport(codes::TRANSPORT_ERROR, e.to_string()),
            Self::Timeout { .. } => LdpError::transport(codes::TIMEOUT, self.to_string()).with_retryable(true),
            Self::Capacity { .. } => LdpError::runtime(codes::CAPACITY_EXCEEDED, self.to_string()),
            Self::NotSessionPeer => LdpError::session(codes::NOT_SESSION_PEER, self.to_string()),
            Self::Mcp(_) | Self::A2a(_) | Self::Io(_) => LdpError::transport(codes::TRANSPORT_ERROR, self.to_string()),
        }
    }
}
