//! Errors, split by who caused them: [`HttpError`] is a peer's bad request as the server answers it (it implements
//! [`IntoResponse`]); [`Error`] is the local caller's misuse or an IO failure of this crate's API.
//!
//! [`status_for`] is the one place where an LDP failure becomes an HTTP status (the table is in `ldp-transport-http`'s crate docs).

#[cfg(feature = "server")]
use std::time::Duration;

#[cfg(feature = "server")]
use axum::http::{HeaderValue, StatusCode, header};
#[cfg(feature = "server")]
use axum::response::{IntoResponse, Response};
#[cfg(feature = "server")]
use ldp_session::Refusal;
#[cfg(feature = "server")]
use ldp_types::{ErrorCategory, LdpError, codes};

/// Errors of this crate's API (not a peer's fault).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL is not an absolute `http://` or `https://` URL.
    #[error("invalid url {0:?}: expected http://host[:port][/path] or https://...")]
    InvalidUrl(String),
    /// The HTTP client could not be built (e.g. the TLS backend failed to initialise).
    #[cfg(feature = "client")]
    #[error("http client: {0}")]
    Client(#[source] reqwest::Error),
    /// Binding or serving failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The TLS configuration is unusable (bad certificate or key).
    #[error("tls: {0}")]
    Tls(String),
    /// The OTLP span exporter could not be built or could not deliver (feature `otlp`).
    #[error("otlp: {0}")]
    Otlp(String),
}

#[cfg(feature = "server")]
impl From<Refusal> for HttpError {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(Box::new(refusal))
    }
}

#[cfg(feature = "server")]
/// A request the server refuses, as it answers it: an HTTP status and an LDP body.
///
/// The body is the reply envelope when the session layer produced one (a TASK_FAILED or SESSION_REJECT addressed to
/// the sender), otherwise `{"error": <LdpError>}`. Internal failures never reveal details to the peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The session layer refused the message (malformed, unknown type, untrusted, bad signature, ...).
    #[error("refused: {}", .0.error)]
    Refused(Box<Refusal>),
    /// The bearer token is missing, malformed or unknown.
    #[error("unauthenticated: {0}")]
    Unauthenticated(&'static str),
    /// A JWT bearer token was refused: which check failed (never the token itself).
    #[error("bearer token refused: {0}")]
    InvalidToken(crate::jwt::TokenError),
    /// The request carries more than one `Authorization` header (which one counts would differ between servers and
    /// proxies, so none does).
    #[error("more than one Authorization header")]
    AmbiguousCredentials,
    /// The request's content type is not `application/json`.
    #[error("unsupported content type {0:?}; expected application/json")]
    UnsupportedMediaType(String),
    /// The body is larger than the configured limit.
    #[error("body larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body could not be read (the peer aborted it, or sent a broken chunked encoding).
    #[error("unreadable body")]
    UnreadableBody,
    /// The request body did not arrive within the body timeout; the connection is closed after the answer.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
    /// The request body arrived slower than the minimum rate (a window of `window` brought fewer than
    /// `min_rate` x `window` bytes); the connection is closed after the answer.
    #[error("the request body arrived slower than {min_rate} bytes/s (measured over {window:?})")]
    BodyTooSlow {
        /// The minimum rate, in bytes per second.
        min_rate: u64,
        /// The window it is measured over.
        window: Duration,
    },
    /// The request head (request line and headers) did not arrive within the header timeout; the answer is written
    /// before hyper has a request, and the connection is closed.
    #[error("the request head did not arrive within {0:?}")]
    HeadTimeout(Duration),
    /// The request head arrived slower than the minimum rate; answered like [`HttpError::HeadTimeout`].
    #[error("the request head arrived slower than {min_rate} bytes/s (measured over {window:?})")]
    HeadTooSlow {
        /// The minimum rate, in bytes per second.
        min_rate: u64,
        /// The window it is measured over.
        window: Duration,
    },
    /// The message was not answered within the request timeout. It may still complete on the server.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A failure of the server itself. The detail is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

#[cfg(feature = "server")]
impl HttpError {
    /// The typed wire error for this failure.
    pub fn to_ldp_error(&self) -> LdpError {
        match self {
            Self::Refused(r) => r.error.clone(),
            Self::Unauthenticated(why) => LdpError::identity(codes::UNAUTHENTICATED, *why),
            // A missing scope is a refusal of what the peer asked for, not of who it is.
            Self::InvalidToken(why @ crate::jwt::TokenError::MissingScope(_)) => {
                LdpError::security(codes::TRUST_VIOLATION, format!("bearer token refused: {why}")).with_retryable(false)
            }
            Self::InvalidToken(why) => {
                LdpError::identity(codes::UNAUTHENTICATED, format!("bearer token refused: {why}")).with_retryable(false)
            }
            Self::UnsupportedMediaType(_) | Self::AmbiguousCredentials => {
                LdpError::runtime(codes::MALFORMED_MESSAGE, self.to_string()).with_retryable(false)
            }
            Self::PayloadTooLarge { .. } => {
                LdpError::runtime(codes::MESSAGE_TOO_LARGE, self.to_string()).with_retryable(false)
            }
            Self::UnreadableBody => LdpError::transport(codes::TRANSPORT_ERROR, self.to_string()),
            // Retryable: the message was never read, so nothing was processed.
            Self::BodyTimeout(_) | Self::BodyTooSlow { .. } | Self::HeadTimeout(_) | Self::HeadTooSlow { .. } => {
                LdpError::transport(codes::TIMEOUT, self.to_string()).with_retryable(true)
            }
            // Not retryable: the message may have been processed (a resent TASK_SUBMIT would be a duplicate).
            Self::Timeout(_) => LdpError::transport(codes::TIMEOUT, self.to_string()).with_retryable(false),
            Self::Internal(_) => LdpError::runtime(codes::EXECUTION_FAILED, "internal error"),
        }
    }

    /// The HTTP status of this failure.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Refused(r) => status_for(&r.error, r.reply.is_some()),
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::InvalidToken(crate::jwt::TokenError::MissingScope(_)) => StatusCode::FORBIDDEN,
            Self::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnreadableBody | Self::AmbiguousCredentials => StatusCode::BAD_REQUEST,
            Self::BodyTimeout(_) | Self::BodyTooSlow { .. } | Self::HeadTimeout(_) | Self::HeadTooSlow { .. } => {
                StatusCode::REQUEST_TIMEOUT
            }
            Self::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[cfg(feature = "server")]
/// The HTTP status for a refusal carrying `error`; `has_reply` says whether an in-protocol reply envelope goes with
/// it. This is the single mapping of the workspace; the table is in `ldp-transport-http`'s crate docs.
pub fn status_for(error: &LdpError, has_reply: bool) -> StatusCode {
    match error.code.as_str() {
        codes::MALFORMED_MESSAGE | codes::UNKNOWN_MESSAGE_TYPE => StatusCode::BAD_REQUEST,
        codes::UNAUTHENTICATED => StatusCode::UNAUTHORIZED,
        // Another principal's session: refused as forbidden, whatever the message and whether it was signed.
        codes::TRUST_VIOLATION | codes::NOT_SESSION_PEER => StatusCode::FORBIDDEN,
        codes::MESSAGE_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
        codes::TIMEOUT if error.category == ErrorCategory::Transport => StatusCode::GATEWAY_TIMEOUT,
        // Signature, replay and timestamp failures: the message was not accepted as authentic and changed nothing.
        // A 2xx would let a client that treats any non-REJECT answer to SESSION_PROPOSE as acceptance (the Python
        // reference client does) believe it has a session.
        _ if error.category == ErrorCategory::Security => StatusCode::UNAUTHORIZED,
        // Session, capability, runtime and other policy refusals are protocol answers, not HTTP errors.
        _ if has_reply => StatusCode::OK,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[cfg(feature = "server")]
/// `WWW-Authenticate` for a 401 caused by a missing or unknown bearer token.
const BEARER_CHALLENGE: &str = "Bearer realm=\"ldp\"";
#[cfg(feature = "server")]
/// `WWW-Authenticate` for a 401 caused by a message signature, replay or timestamp failure.
const SIGNATURE_CHALLENGE: &str = "LDP-Signature realm=\"ldp\"";

#[cfg(feature = "server")]
/// `WWW-Authenticate` for a refused JWT (RFC 6750 section 3): `invalid_token` with the check that failed, or
/// `insufficient_scope` with the scope needed.
fn token_challenge(why: &crate::jwt::TokenError) -> HeaderValue {
    let challenge = match why {
        crate::jwt::TokenError::MissingScope(scope) => {
            format!("Bearer realm=\"ldp\", error=\"insufficient_scope\", scope=\"{}\"", quoted(scope))
        }
        other => format!(
            "Bearer realm=\"ldp\", error=\"{}\", error_description=\"{}\"",
            other.oauth_error(),
            quoted(&other.to_string())
        ),
    };
    HeaderValue::from_str(&challenge).unwrap_or_else(|_| HeaderValue::from_static(BEARER_CHALLENGE))
}

#[cfg(feature = "server")]
/// `text` safe inside a quoted-string: without quotes, backslashes or control characters.
pub(crate) fn quoted(text: &str) -> String {
    text.chars().filter(|c| !matches!(c, '"' | '\\') && !c.is_control()).collect()
}

#[cfg(feature = "server")]
/// A JSON response from already-encoded bytes.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    // Built whole: `(status, body).into_response()` would first set an octet-stream type, then be overwritten.
    let mut resp = Response::new(axum::body::Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[cfg(feature = "server")]
/// `{"error": <LdpError>}`.
pub fn error_body(error: &LdpError) -> Vec<u8> {
    // Serialising an LdpError cannot fail unless `partial_output` holds a non-finite float, which JSON cannot
    // carry; fall back to a fixed body rather than failing the answer.
    serde_json::to_vec(&serde_json::json!({ "error": error }))
        .unwrap_or_else(|_| br#"{"error":{"code":"EXECUTION_FAILED","category":"runtime","message":"internal error","severity":"error","retryable":true}}"#.to_vec())
}

#[cfg(feature = "server")]
impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Self::Internal(detail) => tracing::error!(%detail, "internal error answering a request"),
            other => tracing::debug!(%status, error = %other, "request refused"),
        }
        let body = match &self {
            Self::Refused(r) => r.reply.as_ref().and_then(|env| env.to_vec().ok()),
            _ => None,
        };
        let body = body.unwrap_or_else(|| error_body(&self.to_ldp_error()));
        let mut resp = json_response(status, body);
        if self.status() == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way; the connection cannot carry another request.
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Self::InvalidToken(why) = &self {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, token_challenge(why));
        } else if status == StatusCode::UNAUTHORIZED {
            let challenge =
                if self.to_ldp_error().code == codes::UNAUTHENTICATED { BEARER_CHALLENGE } else { SIGNATURE_CHALLENGE };
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        resp
    }
}
