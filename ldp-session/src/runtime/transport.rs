//! The client side's seam: a [`Transport`] carries an initiator's envelopes to one peer; [`MemoryTransport`] is the
//! in-process one.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ldp_types::{Envelope, IdentityCard, LdpError};
use tokio::sync::mpsc;

use super::{DelegateRuntime, Response};
use crate::error::Refusal;
use crate::initiator::Initiator;
use crate::responder::PeerContext;

/// Carries envelopes from an initiator to one peer.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Fetches the peer's identity card.
    async fn identity(&self) -> Result<IdentityCard, LdpError>;

    /// Sends one envelope and returns the peer's reply as the bytes of the envelope received (`None` when the peer
    /// accepted it without a reply). The transport does not decode the reply: the initiator does
    /// ([`Initiator::handle`]), with the decoder the responder uses, and checks a signature over the bytes as they
    /// came. TASK_UPDATEs that arrive before the reply are sent to `updates` when given. Transport failures are
    /// `transport`-category errors; a peer's refusal without an in-protocol reply is its typed error.
    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError>;

    /// Gives the transport the initiator it carries messages for ([`Client::connect`](super::Client::connect) calls
    /// it before its first exchange). A transport that outlives one connection (WebSocket) resumes the initiator's
    /// tasks through it after a reconnect ([`Initiator::handle_disconnect`]); a wrapper forwards it to the transport
    /// it wraps. The default ignores it.
    fn attach(&self, initiator: &SharedInitiator) {
        let _ = initiator;
    }
}

/// A shared transport is a transport: one `Arc` can serve discovery and a client, or a balancer the caller keeps a
/// handle on.
#[async_trait]
impl<T: Transport + ?Sized> Transport for Arc<T> {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        (**self).identity().await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        (**self).exchange(envelope, updates).await
    }

    fn attach(&self, initiator: &SharedInitiator) {
        (**self).attach(initiator);
    }
}

/// The initiator machine of a [`Client`](super::Client), shared with its transport ([`Transport::attach`]).
pub type SharedInitiator = Arc<Mutex<Initiator>>;

/// An in-process transport straight into a [`DelegateRuntime`]: no sockets, for tests and examples.
#[derive(Debug, Clone)]
pub struct MemoryTransport {
    runtime: DelegateRuntime,
    peer: PeerContext,
}

impl MemoryTransport {
    /// Connects to `runtime` as a peer the transport describes with `peer`.
    pub fn new(runtime: DelegateRuntime, peer: PeerContext) -> Self {
        Self { runtime, peer }
    }
}

#[async_trait]
impl Transport for MemoryTransport {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        Ok(self.runtime.card())
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let bytes = envelope.to_vec().map_err(|e| LdpError::from(&e))?;
        let encode = |env: Envelope| env.to_vec().map(Some).map_err(|e| LdpError::from(&e));
        match self.runtime.handle(&self.peer, &bytes, updates).await {
            Response::Reply(env) => encode(env),
            Response::Accepted => Ok(None),
            Response::Refused(Refusal { reply: Some(env), .. }) => encode(env),
            Response::Refused(Refusal { error, reply: None }) => Err(error),
        }
    }
}
