//! The client side's seam: a [`Transport`] carries an initiator's envelopes to one peer; [`MemoryTransport`] is the
//! in-process one.

use std::sync::Arc;

use async_trait::async_trait;
use ldp_types::{Envelope, IdentityCard, LdpError};
use tokio::sync::mpsc;

use super::{DelegateRuntime, InitiatorDriver, Response};
use crate::responder::PeerContext;

/// How one exchange ended ([`Transport::exchange_outcome`]): what the initiator's driver needs to know to resume.
#[derive(Debug)]
#[non_exhaustive]
pub enum Exchange {
    /// The peer answered: the bytes of the envelope received (`None` when it accepted without a reply).
    Answered(Option<Vec<u8>>),
    /// The exchange failed for good: the peer's typed refusal, or a transport failure before the request reached
    /// the peer (or one the transport already retried as far as it may).
    Failed(LdpError),
    /// The request may have reached the peer and its answer was lost on the way back (the connection broke after
    /// the request was written): the driver asks the peer about the task rather than fail it
    /// ([`InitiatorDriver::resume`]).
    Lost(LdpError),
}

/// Carries envelopes from an initiator to one peer.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Fetches the peer's identity card.
    async fn identity(&self) -> Result<IdentityCard, LdpError>;

    /// Sends one envelope and returns the peer's reply as the bytes of the envelope received (`None` when the peer
    /// accepted it without a reply). The transport does not decode the reply: the initiator does
    /// ([`Initiator::handle`](crate::Initiator::handle)), with the decoder the responder uses, and checks a
    /// signature over the bytes as they came. TASK_UPDATEs that arrive before the reply are sent to `updates` when given. Transport failures are
    /// `transport`-category errors; a peer's refusal without an in-protocol reply is its typed error.
    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError>;

    /// [`Transport::exchange`], telling a lost answer from a failure: a transport that can tell that a request
    /// was written before its connection broke reports [`Exchange::Lost`], so that the driver resumes the task. The
    /// default reports every error as [`Exchange::Failed`].
    async fn exchange_outcome(&self, envelope: &Envelope, updates: Option<mpsc::Sender<Envelope>>) -> Exchange {
        match self.exchange(envelope, updates).await {
            Ok(answer) => Exchange::Answered(answer),
            Err(error) => Exchange::Failed(error),
        }
    }

    /// Gives the transport the driver of the initiator it carries messages for
    /// ([`Client::connect`](super::Client::connect) calls it before its first exchange). The transport sets its
    /// request timeout as the driver's answer timeout and leaves the deadlines the driver keeps to it
    /// ([`InitiatorDriver::keeps_deadline`]); one that outlives a connection (WebSocket) reports reconnects through
    /// it ([`InitiatorDriver::resume`]). A wrapper forwards it to the transport it wraps. The default ignores it.
    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        let _ = driver;
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

    async fn exchange_outcome(&self, envelope: &Envelope, updates: Option<mpsc::Sender<Envelope>>) -> Exchange {
        (**self).exchange_outcome(envelope, updates).await
    }

    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        (**self).attach(driver);
    }
}

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
            Response::Reply(env) => encode(*env),
            Response::Accepted => Ok(None),
            Response::Refused(refusal) => refusal.into_reply().and_then(encode),
        }
    }
}
