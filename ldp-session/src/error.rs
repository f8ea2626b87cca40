//! Errors, split by who caused them. On the responder, a peer's bad message becomes a [`Refusal`] (a typed
//! `LdpError` plus the reply envelope to send). A [`SessionError`] is either the local caller's [`Misuse`] of the
//! API, a peer that [`PeerMisbehaved`] (an initiator's view of a bad answer), the peer's typed failure, or the
//! transport's.

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

impl Refusal {
    /// What the peer is sent: the protocol reply when there is one, else the error alone.
    pub fn into_reply(self) -> Result<Envelope, LdpError> {
        match self {
            Self { reply: Some(env), .. } => Ok(env),
            Self { error, reply: None } => Err(error),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.error)
    }
}

impl std::error::Error for Refusal {}

/// A failure of a session call, split by who caused it: the local caller ([`Misuse`]), the peer breaking the
/// protocol ([`PeerMisbehaved`]), the peer answering with a typed failure, or the transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The local caller misused the API (a Rust error; nothing went on the wire).
    #[error(transparent)]
    Misuse(#[from] Misuse),
    /// The peer sent something that is not a valid answer.
    #[error("protocol violation by peer: {0}")]
    PeerMisbehaved(#[from] PeerMisbehaved),
    /// The peer answered with a typed failure.
    #[error("peer failed: {0}")]
    Peer(LdpError),
    /// The transport failed.
    #[error("transport failed: {0}")]
    Transport(LdpError),
}

/// Misuse of the session API by the local caller.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Misuse {
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
}

/// How a peer broke the protocol, as the initiator sees it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerMisbehaved {
    /// The reply does not decode as an envelope.
    #[error("undecodable reply: {0}")]
    UndecodableReply(#[source] ldp_types::Error),
    /// A request that must be answered was not (the transport delivered no envelope).
    #[error("no answer to {request}")]
    NoAnswer {
        /// The request's message type.
        request: &'static str,
    },
    /// A request was answered with a message that does not answer it.
    #[error("{request} was not answered with {expected}")]
    WrongAnswer {
        /// The request's message type.
        request: &'static str,
        /// What answers it.
        expected: &'static str,
    },
    /// A SESSION_ACCEPT that answers no proposal of ours.
    #[error("SESSION_ACCEPT for {session_id:?} answers no pending proposal")]
    UnsolicitedAccept {
        /// The session it accepts.
        session_id: String,
    },
    /// A TASK_RESULT for no task of ours (never submitted, already finished, or of a closed session).
    #[error("TASK_RESULT for unknown task {task_id:?}")]
    UnknownTaskResult {
        /// The task it claims to finish.
        task_id: String,
    },
    /// A message an initiator never receives (e.g. TASK_SUBMIT, or an unknown type).
    #[error("{message_type} is not a reply an initiator accepts")]
    NotAReply {
        /// Its message type.
        message_type: String,
    },
}

impl SessionError {
    /// Whether the local caller caused it (as opposed to the peer or the transport).
    pub fn is_misuse(&self) -> bool {
        matches!(self, Self::Misuse(_))
    }

    /// The typed wire error closest to this failure.
    pub fn to_ldp_error(&self) -> LdpError {
        use ldp_types::codes;
        match self {
            Self::Peer(e) | Self::Transport(e) => e.clone(),
            Self::PeerMisbehaved(_) => {
                LdpError::runtime(codes::MALFORMED_MESSAGE, self.to_string()).with_retryable(false)
            }
            Self::Misuse(m) => match m {
                Misuse::UnknownSession(_) => LdpError::session(codes::SESSION_NOT_FOUND, self.to_string()),
                Misuse::NotActive { .. } => LdpError::session(codes::INVALID_STATE, self.to_string()),
                Misuse::UnknownTask(_) | Misuse::TaskEnded(_) => {
                    LdpError::session(codes::TASK_NOT_FOUND, self.to_string())
                }
                Misuse::Payload(_) => LdpError::capability(codes::PAYLOAD_MODE_FAILED, self.to_string()),
                Misuse::DelegationDepthExceeded { .. } => {
                    LdpError::policy(codes::DELEGATION_DEPTH_EXCEEDED, self.to_string())
                }
                Misuse::InvalidContract(_) => LdpError::policy(codes::CONTRACT_VIOLATED, self.to_string()),
                Misuse::Signing(_) => LdpError::security(codes::SIGNATURE_INVALID, self.to_string()),
            },
        }
    }
}
