//! [`InspectError`]: what the inspector's API answers when a request cannot be served, as a message for the page.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why an API request failed. Every variant becomes a JSON body `{"error": message, "kind": ...}` that the page
/// shows as it is, so each message names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The request itself is wrong: a missing field, a bad URL, an input that is not JSON.
    #[error("{0}")]
    BadRequest(String),
    /// No connection, task or session has this id (the inspector was restarted, or it was dropped).
    #[error("{0} not found (reconnect to the delegate)")]
    NotFound(String),
    /// The delegate could not be reached, or did not answer in time.
    #[error("{0}")]
    Unreachable(String),
    /// The delegate answered, but with a refusal or something that is not LDP.
    #[error("{0}")]
    Delegate(String),
    /// The inspector cannot start: the address is taken or not local.
    #[error("{0}")]
    Start(String),
}

impl InspectError {
    fn kind(&self) -> &'static str {
        match self {
            InspectError::BadRequest(_) => "bad_request",
            InspectError::NotFound(_) => "not_found",
            InspectError::Unreachable(_) => "unreachable",
            InspectError::Delegate(_) => "delegate",
            InspectError::Start(_) => "start",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            InspectError::BadRequest(_) => StatusCode::BAD_REQUEST,
            InspectError::NotFound(_) => StatusCode::NOT_FOUND,
            // The inspector is a gateway to the delegate: its failures are the upstream's.
            InspectError::Unreachable(_) => StatusCode::GATEWAY_TIMEOUT,
            InspectError::Delegate(_) => StatusCode::BAD_GATEWAY,
            InspectError::Start(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for InspectError {
    fn into_response(self) -> Response {
        (self.status(), Json(json!({ "error": self.to_string(), "kind": self.kind() }))).into_response()
    }
}
