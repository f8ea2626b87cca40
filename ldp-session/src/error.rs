//! Errors, split by who caused them: a peer's bad message becomes a [`Refusal`] (a typed `LdpError` plus the reply
//! envelope to send), a caller's misuse of the API is a [`SessionError`].

use ldp_types::{Envelope, LdpError};

/// A peer's message was refused. The transport sends `reply` when present (a TASK_FAILED or SESSION_REJECT
/// addressed to the sender); otherwise it answers with `error` alone (the message was not addressable).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The typed failure.
    pub error: LdpError,
    /// The protocol reply, when the message could be answered in-protocol.
    pub reply: Option<Envelope>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.error)
    }
}

impl std::error::Error for Refusal {}

/// Misuse of the session API by the local caller, or a failure reported by the peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// No session with this id.
    #[error("unknown session {0:?}")]
    UnknownSession(String),
    /// The session exists but is not active.
    #[error("session {session_id:?} is {state:?}, not active")]
    NotActive {
        /// The session.
        session_id: String,
        /// Its state.
        state: crate::SessionState,
    },
    /// No such task.
    #[error("unknown task {0:?}")]
    UnknownTask(String),
    /// The task already ended (completed, failed or cancelled).
    #[error("task {0:?} already ended")]
    TaskEnded(String),
    /// The input is not valid for the payload mode.
    #[error("payload invalid: {0}")]
    Payload(#[source] ldp_types::Error),
    /// Delegating further would exceed the contract's maximum delegation depth.
    #[error("delegation depth {depth} exceeds the contract's maximum {max}")]
    DelegationDepthExceeded {
        /// The depth the sub-delegation would reach.
        depth: usize,
        /// The contract's limit.
        max: u32,
    },
    /// The contract cannot be used (e.g. an unparseable deadline).
    #[error("invalid contract: {0}")]
    InvalidContract(#[source] ldp_types::Error),
    /// Signing an outbound message failed.
    #[error("signing failed: {0}")]
    Signing(#[source] ldp_types::Error),
    /// The peer answered with a typed failure.
    #[error("peer failed: {0}")]
    Peer(LdpError),
    /// The peer sent something that is not a valid answer.
    #[error("protocol violation by peer: {0}")]
    Protocol(String),
    /// The transport failed.
    #[error("transport failed: {0}")]
    Transport(LdpError),
}

impl SessionError {
    /// The typed wire error closest to this failure.
    pub fn to_ldp_error(&self) -> LdpError {
        use ldp_types::codes;
        match self {
            Self::Peer(e) | Self::Transport(e) => e.clone(),
            Self::UnknownSession(_) => LdpError::session(codes::SESSION_NOT_FOUND, self.to_string()),
            Self::NotActive { .. } => LdpError::session(codes::INVALID_STATE, self.to_string()),
            Self::UnknownTask(_) | Self::TaskEnded(_) => LdpError::session(codes::TASK_NOT_FOUND, self.to_string()),
            Self::Payload(_) => LdpError::capability(codes::PAYLOAD_MODE_FAILED, self.to_string()),
            Self::DelegationDepthExceeded { .. } => {
                LdpError::policy(codes::DELEGATION_DEPTH_EXCEEDED, self.to_string())
            }
            Self::InvalidContract(_) => LdpError::policy(codes::CONTRACT_VIOLATED, self.to_string()),
            Self::Signing(_) => LdpError::security(codes::SIGNATURE_INVALID, self.to_string()),
            Self::Protocol(_) => LdpError::runtime(codes::MALFORMED_MESSAGE, self.to_string()).with_retryable(false),
        }
    }
}
