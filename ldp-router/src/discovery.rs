//! Opening transports by URL: [`TransportFactory`], the [`LdpAdapter`] for `ldp://` URLs and the
//! [`SchemeDispatcher`] that leaves `a2a://` and `mcp://` to other adapters (RFC 9.2).
//!
//! Nothing here names a concrete transport: the application registers connectors (for example one that builds an
//! HTTP transport from an [`Endpoint`]) and the router only ever sees `Arc<dyn Transport>`. Opening a transport does
//! no IO; the first exchange (the identity card) does.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use ldp_session::runtime::Transport;
use ldp_types::LdpError;

use crate::RouterError;
use crate::endpoint::{Binding, Endpoint, UrlError, resolve_ldp_url, scheme};

/// A transport shared between the registry's connections.
pub type SharedTransport = Arc<dyn Transport>;

/// Opens a transport to the delegate at a URL.
pub trait TransportFactory: Send + Sync {
    /// A transport to `url`. Should not do IO: discovery fetches the identity card through it afterwards.
    fn open(&self, url: &str) -> Result<SharedTransport, DiscoveryError>;
}

impl<F> TransportFactory for F
where
    F: Fn(&str) -> Result<SharedTransport, DiscoveryError> + Send + Sync,
{
    fn open(&self, url: &str) -> Result<SharedTransport, DiscoveryError> {
        self(url)
    }
}

/// Builds a transport for one binding's endpoint.
pub type Connector = Box<dyn Fn(&Endpoint) -> Result<SharedTransport, DiscoveryError> + Send + Sync>;

/// The LDP adapter: resolves `ldp://` URLs (and plain `http(s)`/`ws(s)` ones, as identity cards write their
/// `endpoint`) with [`resolve_ldp_url`] and hands the endpoint to the connector registered for its binding.
#[derive(Default)]
pub struct LdpAdapter {
    http: Option<Connector>,
    websocket: Option<Connector>,
}

impl fmt::Debug for LdpAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LdpAdapter")
            .field("http", &self.http.is_some())
            .field("websocket", &self.websocket.is_some())
            .finish()
    }
}

impl LdpAdapter {
    /// An adapter with no connectors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `connector` for HTTP endpoints.
    pub fn with_http(
        mut self,
        connector: impl Fn(&Endpoint) -> Result<SharedTransport, DiscoveryError> + Send + Sync + 'static,
    ) -> Self {
        self.http = Some(Box::new(connector));
        self
    }

    /// Uses `connector` for WebSocket endpoints.
    pub fn with_websocket(
        mut self,
        connector: impl Fn(&Endpoint) -> Result<SharedTransport, DiscoveryError> + Send + Sync + 'static,
    ) -> Self {
        self.websocket = Some(Box::new(connector));
        self
    }
}

impl TransportFactory for LdpAdapter {
    fn open(&self, url: &str) -> Result<SharedTransport, DiscoveryError> {
        let endpoint = resolve_ldp_url(url)?;
        let connector = match endpoint.binding {
            Binding::Http => self.http.as_ref(),
            Binding::WebSocket => self.websocket.as_ref(),
        };
        match connector {
            Some(connect) => connect(&endpoint),
            None => Err(DiscoveryError::NoConnector { binding: endpoint.binding, url: url.to_owned() }),
        }
    }
}

/// The schemes [`SchemeDispatcher::with_ldp`] gives to the LDP adapter.
pub const LDP_SCHEMES: [&str; 9] = ["ldp", "ldp+https", "ldp+http", "ldp+wss", "ldp+ws", "https", "http", "wss", "ws"];

/// Routes a URL to the adapter registered for its scheme: `ldp://` to LDP, `a2a://` and `mcp://` to whatever
/// adapters the runtime registers for them. An unregistered scheme is a typed
/// [`DiscoveryError::UnknownScheme`].
#[derive(Default, Clone)]
pub struct SchemeDispatcher {
    adapters: BTreeMap<String, Arc<dyn TransportFactory>>,
}

impl fmt::Debug for SchemeDispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemeDispatcher").field("schemes", &self.adapters.keys().collect::<Vec<_>>()).finish()
    }
}

impl SchemeDispatcher {
    /// A dispatcher with no adapters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `adapter` for `scheme` (case-insensitive), replacing any earlier one.
    pub fn register(mut self, scheme: &str, adapter: Arc<dyn TransportFactory>) -> Self {
        self.adapters.insert(scheme.to_ascii_lowercase(), adapter);
        self
    }

    /// Registers `adapter` for every scheme of [`LDP_SCHEMES`]: the `ldp` family, and plain `http(s)`/`ws(s)`,
    /// which identity cards use for their `endpoint`. Register another adapter afterwards to take one back.
    pub fn with_ldp(mut self, adapter: LdpAdapter) -> Self {
        let adapter: Arc<dyn TransportFactory> = Arc::new(adapter);
        for scheme in LDP_SCHEMES {
            self.adapters.insert(scheme.to_owned(), adapter.clone());
        }
        self
    }

    /// The registered schemes.
    pub fn schemes(&self) -> impl Iterator<Item = &str> {
        self.adapters.keys().map(String::as_str)
    }

    /// The adapter for `url`'s scheme.
    pub fn adapter(&self, url: &str) -> Result<&Arc<dyn TransportFactory>, DiscoveryError> {
        let scheme = scheme(url)?;
        self.adapters.get(&scheme).ok_or_else(|| DiscoveryError::UnknownScheme { scheme, url: url.to_owned() })
    }
}

impl TransportFactory for SchemeDispatcher {
    fn open(&self, url: &str) -> Result<SharedTransport, DiscoveryError> {
        self.adapter(url)?.open(url)
    }
}

/// Why a delegate could not be discovered, registered or refreshed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The URL does not name an LDP endpoint.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// No adapter is registered for the URL's scheme.
    #[error("no adapter for scheme {scheme:?} ({url})")]
    UnknownScheme {
        /// The scheme, lowercased.
        scheme: String,
        /// The URL.
        url: String,
    },
    /// The LDP adapter has no connector for the binding the URL asks for.
    #[error("no {binding} connector for {url}")]
    NoConnector {
        /// The binding.
        binding: Binding,
        /// The URL.
        url: String,
    },
    /// A connector could not build its transport.
    #[error("cannot open a transport: {0}")]
    Adapter(String),
    /// Fetching the identity card failed.
    #[error("identity card unavailable: {0}")]
    Identity(LdpError),
    /// The card at a known delegate's URL names another delegate.
    #[error("expected delegate {expected:?} but the card names {actual:?}")]
    IdentityMismatch {
        /// The registered id.
        expected: String,
        /// The id on the card.
        actual: String,
    },
    /// A card-registered delegate has neither a transport nor an `endpoint`.
    #[error("delegate {0:?} has no endpoint")]
    NoEndpoint(String),
    /// No such delegate is registered.
    #[error("delegate {0:?} is not registered")]
    UnknownDelegate(String),
    /// The router refused the mapped candidate.
    #[error(transparent)]
    Router(#[from] RouterError),
}

impl DiscoveryError {
    /// An [`DiscoveryError::Adapter`] failure, for connectors.
    pub fn adapter(error: impl fmt::Display) -> Self {
        DiscoveryError::Adapter(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use ldp_types::{DelegateId, Envelope, IdentityCard};
    use tokio::sync::mpsc;

    use super::*;

    /// A transport that remembers the endpoint it was opened for.
    struct Named(String);

    #[async_trait]
    impl Transport for Named {
        async fn identity(&self) -> Result<IdentityCard, LdpError> {
            let mut card =
                IdentityCard::new(DelegateId::from_name("named").map_err(|e| LdpError::from(&e))?, "n", "f", "1");
            card.endpoint = self.0.clone();
            Ok(card)
        }

        async fn exchange(&self, _: &Envelope, _: Option<mpsc::Sender<Envelope>>) -> Result<Option<Vec<u8>>, LdpError> {
            Ok(None)
        }
    }

    fn named(prefix: &'static str) -> impl Fn(&Endpoint) -> Result<SharedTransport, DiscoveryError> {
        move |e: &Endpoint| Ok(Arc::new(Named(format!("{prefix} {}", e.url))) as SharedTransport)
    }

    async fn opened(factory: &dyn TransportFactory, url: &str) -> Result<String, DiscoveryError> {
        let transport = factory.open(url)?;
        Ok(transport.identity().await.map_err(DiscoveryError::Identity)?.endpoint)
    }

    #[tokio::test]
    async fn dispatch_by_scheme() {
        let a2a = |url: &str| Ok(Arc::new(Named(format!("a2a adapter {url}"))) as SharedTransport);
        let dispatcher = SchemeDispatcher::new()
            .with_ldp(LdpAdapter::new().with_http(named("http")).with_websocket(named("ws")))
            .register("A2A", Arc::new(a2a));
        assert_eq!(opened(&dispatcher, "ldp://h:1/x").await.unwrap(), "http https://h:1/x");
        assert_eq!(opened(&dispatcher, "ldp+ws://h/x").await.unwrap(), "ws ws://h/x");
        assert_eq!(opened(&dispatcher, "http://127.0.0.1:9").await.unwrap(), "http http://127.0.0.1:9");
        assert_eq!(opened(&dispatcher, "a2a://agent/x").await.unwrap(), "a2a adapter a2a://agent/x");
        assert_eq!(
            opened(&dispatcher, "mcp://tools/x").await,
            Err(DiscoveryError::UnknownScheme { scheme: "mcp".into(), url: "mcp://tools/x".into() })
        );
        assert!(matches!(opened(&dispatcher, "no scheme").await, Err(DiscoveryError::Url(UrlError::NoScheme(_)))));
        assert!(dispatcher.schemes().any(|s| s == "a2a"));
    }

    #[tokio::test]
    async fn a_missing_connector_is_typed() {
        let http_only = LdpAdapter::new().with_http(named("http"));
        assert_eq!(
            opened(&http_only, "ldp://h/x?transport=ws").await,
            Err(DiscoveryError::NoConnector { binding: Binding::WebSocket, url: "ldp://h/x?transport=ws".into() })
        );
        assert!(matches!(opened(&http_only, "a2a://x").await, Err(DiscoveryError::Url(UrlError::NotLdp { .. }))));
        let failing = LdpAdapter::new().with_http(|_: &Endpoint| Err(DiscoveryError::adapter("no TLS roots")));
        assert_eq!(opened(&failing, "ldp://h").await, Err(DiscoveryError::Adapter("no TLS roots".into())));
    }
}
