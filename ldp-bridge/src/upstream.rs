//! The LDP delegate behind a bridge: in this process (`ldp serve --mcp`, `ldp serve --a2a`) or at a URL
//! (`ldp mcp-proxy`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Client, DelegateRuntime, MemoryTransport, Transport};
use ldp_session::{InitiatorConfig, PeerContext, SeededIds, SessionError, SystemClock};
use ldp_transport_http::{ConnectOptions, ConnectSettings, HttpTransport};
use ldp_types::IdentityCard;

use crate::BridgeError;

/// The delegate id the MCP bridges send as (an MCP host is not an LDP delegate; the bridge is its initiator).
pub const BRIDGE_ID: &str = "ldp:delegate:mcp-bridge";
/// The delegate id the A2A bridge sends as (an A2A client is not an LDP delegate either).
pub const A2A_BRIDGE_ID: &str = "ldp:delegate:a2a-bridge";

/// Where the bridged LDP delegate is, and how to open an initiator to it.
#[async_trait]
pub trait Upstream: Send + Sync + 'static {
    /// The transport of its clients.
    type Transport: Transport + 'static;

    /// Its identity card (the tools are its capabilities).
    fn card(&self) -> IdentityCard;

    /// A client (discovery and HELLO done) for the other protocol's peer `peer`: the peer the HTTP layer
    /// authenticated, or `PeerContext::default()` when none did.
    async fn connect(&self, peer: PeerContext) -> Result<Client<Self::Transport>, SessionError>;
}

/// A delegate served by this process: clients reach its runtime through [`MemoryTransport`], as the MCP peer the
/// HTTP layer authenticated (its bearer token's domain and principal), so the responder's trust, session caps and
/// session binding apply to MCP callers exactly as to LDP ones.
#[derive(Debug, Clone)]
pub struct InProcess {
    runtime: DelegateRuntime,
    initiator: &'static str,
}

impl InProcess {
    /// Bridges `runtime`, its clients sending as [`BRIDGE_ID`].
    pub fn new(runtime: DelegateRuntime) -> Self {
        Self { runtime, initiator: BRIDGE_ID }
    }

    /// The delegate id the bridge's clients send as (which bridge opened a session shows in the responder's logs).
    pub fn with_initiator(mut self, id: &'static str) -> Self {
        self.initiator = id;
        self
    }
}

#[async_trait]
impl Upstream for InProcess {
    type Transport = MemoryTransport;

    fn card(&self) -> IdentityCard {
        self.runtime.card()
    }

    async fn connect(&self, peer: PeerContext) -> Result<Client<MemoryTransport>, SessionError> {
        let mut cfg = InitiatorConfig::new(self.initiator);
        // Unauthenticated, the bridge declares the delegate's own domain (it runs in the delegate's process); an
        // authenticated peer's domain is the token's, whatever is declared.
        cfg.trust_domain = Some(self.runtime.card().trust_domain.name);
        let transport = MemoryTransport::new(self.runtime.clone(), peer);
        Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await
    }
}

/// A delegate at a URL, reached over HTTP (with SSE for progress).
#[derive(Debug, Clone)]
pub struct Remote {
    url: String,
    token: Option<String>,
    timeout: Duration,
    card: IdentityCard,
}

impl Remote {
    /// Fetches the card of the delegate at `url` (each request, card included, bounded by `timeout`), sending
    /// `token` as its bearer token when given.
    pub async fn discover(url: &str, token: Option<String>, timeout: Duration) -> Result<Self, BridgeError> {
        let transport = Self::transport(url, token.as_deref(), timeout)?;
        let card = transport.identity().await.map_err(SessionError::Transport)?;
        Ok(Self { url: url.to_owned(), token, timeout, card })
    }

    fn transport(url: &str, token: Option<&str>, timeout: Duration) -> Result<HttpTransport, BridgeError> {
        let mut options = ConnectOptions::new().request_timeout(timeout);
        options.token = token.map(str::to_owned);
        Ok(HttpTransport::with_options(url, options)?)
    }
}

#[async_trait]
impl Upstream for Remote {
    type Transport = HttpTransport;

    fn card(&self) -> IdentityCard {
        self.card.clone()
    }

    async fn connect(&self, _peer: PeerContext) -> Result<Client<HttpTransport>, SessionError> {
        // The remote delegate knows the proxy by its own token; the MCP peer (a local desktop host on stdio) has no
        // credential of its own to forward.
        let transport = Self::transport(&self.url, self.token.as_deref(), self.timeout)
            .map_err(|e| SessionError::Transport(e.to_ldp_error()))?;
        Client::connect(
            transport,
            InitiatorConfig::new(BRIDGE_ID),
            Arc::new(SystemClock),
            Box::new(SeededIds::from_entropy()),
        )
        .await
    }
}
