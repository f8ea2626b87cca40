//! An A2A agent reached as an LDP delegate without a bridge process: a [`Transport`] that, on first use,
//! discovers the agent and runs [`A2aDelegate`] behind an in-process LDP responder. A router registers it for the
//! `a2a+http` and `a2a+https` schemes (`a2a://` means HTTPS, as `ldp://` does), so that one registry routes to LDP
//! delegates and A2A agents alike, every task going through the same LDP session machinery and provenance.

use std::sync::Arc;

use async_trait::async_trait;
use ldp_session::runtime::{DelegateRuntime, InitiatorDriver, MemoryTransport, Transport};
use ldp_session::{PeerContext, Responder, ResponderConfig, SeededIds, SystemClock, TrustPolicy};
use ldp_types::{DelegateId, Envelope, IdentityCard, LdpError, codes};
use tokio::sync::{OnceCell, mpsc};

use super::{A2aDelegate, BackendLimits};
use crate::BridgeError;

/// The URL schemes of A2A agents, and the HTTP scheme each stands for.
pub const A2A_SCHEMES: [(&str, &str); 3] = [("a2a", "https"), ("a2a+https", "https"), ("a2a+http", "http")];

/// The agent's HTTP base URL for an `a2a://`, `a2a+https://` or `a2a+http://` URL.
pub fn http_url(url: &str) -> Result<String, BridgeError> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| BridgeError::A2a(format!("{url:?} has no scheme")))?;
    let scheme = scheme.to_ascii_lowercase();
    let http = A2A_SCHEMES
        .iter()
        .find(|(s, _)| *s == scheme)
        .map(|(_, h)| *h)
        .ok_or_else(|| BridgeError::A2a(format!("{url:?} is not an a2a:// URL")))?;
    Ok(format!("{http}://{rest}"))
}

/// A lazily bridged A2A agent (see the module docs). Its generated card's `endpoint` is the `a2a` URL it was opened
/// with, so a registry that refreshes cards reaches it the same way.
pub struct A2aTransport {
    url: String,
    delegate_id: DelegateId,
    token: Option<String>,
    limits: BackendLimits,
    inner: OnceCell<(MemoryTransport, tokio::task::JoinHandle<()>)>,
}

impl Drop for A2aTransport {
    /// Stops the in-process responder's session reaper with the transport.
    fn drop(&mut self) {
        if let Some((_, reaper)) = self.inner.get() {
            reaper.abort();
        }
    }
}

impl std::fmt::Debug for A2aTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aTransport").field("url", &self.url).field("delegate_id", &self.delegate_id).finish()
    }
}

impl A2aTransport {
    /// The agent at the `a2a` URL `url`, its generated card under `delegate_id`; `token` is sent to the agent.
    pub fn new(url: &str, delegate_id: DelegateId, token: Option<String>, limits: BackendLimits) -> Self {
        Self { url: url.to_owned(), delegate_id, token, limits, inner: OnceCell::new() }
    }

    async fn inner(&self) -> Result<&MemoryTransport, LdpError> {
        self.inner
            .get_or_try_init(|| async {
                let base = http_url(&self.url)?;
                let delegate = A2aDelegate::discover(&base, self.token.clone(), self.limits.clone()).await?;
                let mut card: IdentityCard = delegate.card(self.delegate_id.clone());
                card.endpoint.clone_from(&self.url);
                let mut config = ResponderConfig::new(card);
                // In process and unauthenticated: initiators are taken at their declared domain, as `ldp serve`
                // without tokens takes them.
                config.trust = TrustPolicy::permissive(&config.card.trust_domain.name);
                let responder = Responder::new(config, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
                let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
                // Expired sessions are closed and their tasks aborted, as `ldp serve`'s reaper does.
                let reaper = runtime.spawn_reaper();
                Ok::<_, BridgeError>((MemoryTransport::new(runtime, PeerContext::default()), reaper))
            })
            .await
            .map(|(transport, _)| transport)
            .map_err(|e| {
                let error = e.to_ldp_error();
                LdpError::transport(codes::TRANSPORT_ERROR, format!("{}: {}", self.url, error.message))
            })
    }
}

#[async_trait]
impl Transport for A2aTransport {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        self.inner().await?.identity().await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        self.inner().await?.exchange(envelope, updates).await
    }

    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        if let Some((inner, _)) = self.inner.get() {
            inner.attach(driver);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_urls_name_their_http_scheme() {
        assert_eq!(http_url("a2a+http://h:1/x").unwrap(), "http://h:1/x");
        assert_eq!(http_url("A2A://h").unwrap(), "https://h");
        assert_eq!(http_url("a2a+https://h").unwrap(), "https://h");
        assert!(http_url("ldp://h").is_err());
        assert!(http_url("h").is_err());
    }
}
