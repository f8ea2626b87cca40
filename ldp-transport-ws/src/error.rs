//! Errors of this crate's API. A peer's bad message is answered on the wire with a typed `LdpError` (see the crate
//! docs); what the local caller gets wrong, or a connection that cannot be made, is an [`Error`].

use ldp_types::LdpError;

/// Errors of [`WsTransport::connect`](crate::WsTransport::connect).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not an absolute `ws://`, `wss://`, `http://` or `https://` URL with a host.
    #[error("invalid url {0:?}: expected ws://host[:port][/path] (or the HTTP binding's http://host[:port])")]
    InvalidUrl(String),
    /// The connection could not be made, or the server refused the upgrade (its typed error, e.g.
    /// `UNAUTHENTICATED` for a missing or unknown bearer token).
    #[error("cannot connect: {} ({})", .0.message, .0.code)]
    Connect(LdpError),
    /// The TLS settings are unusable: a root certificate or client identity that is not valid PEM.
    #[error("tls: {0}")]
    Tls(String),
}

impl Error {
    /// The typed wire error closest to this failure.
    pub fn to_ldp_error(&self) -> LdpError {
        match self {
            Self::InvalidUrl(_) => {
                LdpError::transport(ldp_types::codes::TRANSPORT_ERROR, self.to_string()).with_retryable(false)
            }
            Self::Tls(_) => {
                LdpError::transport(ldp_types::codes::TRANSPORT_ERROR, self.to_string()).with_retryable(false)
            }
            Self::Connect(e) => e.clone(),
        }
    }
}
