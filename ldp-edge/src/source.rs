//! Who a request comes from, as far as the network can tell: the client's address (the socket's peer, or the client
//! a trusted proxy names in `X-Forwarded-For`), put on every request's [`PeerContext`] so that the per-source limits
//! of the session machine, the rate limiter and the WebSocket binding key an unauthenticated peer on what it cannot
//! choose. A request with two `Authorization` headers is refused here, before any route sees it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use ldp_session::PeerContext;

use crate::error::HttpError;

/// The header a trusted proxy names the client in.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The proxies whose `X-Forwarded-For` is believed; nobody else's (empty: the socket's peer is the client).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<[IpNet]>);

impl TrustedProxies {
    /// Believes the `X-Forwarded-For` of peers in these networks.
    pub fn new(proxies: &[IpNet]) -> Self {
        Self(proxies.into())
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        let addr = ldp_session::source_of(addr);
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// The client of a request that arrived from `remote`: `remote` itself unless it is a trusted proxy; then the
    /// nearest address in `X-Forwarded-For` (read from the right, the hops the proxies appended) that is not a
    /// trusted proxy. An entry that is not an address stops the walk at the proxy that wrote it, so a client cannot
    /// hide behind garbage.
    pub fn client_of(&self, remote: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.0.is_empty() || !self.trusts(remote) {
            return remote;
        }
        let mut client = remote;
        let hops = headers.get_all(FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>();
        for hop in hops.iter().rev().flat_map(|v| v.rsplit(',')) {
            if !self.trusts(client) {
                break;
            }
            match parse_hop(hop) {
                Some(addr) => client = addr,
                None => break,
            }
        }
        client
    }
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// Whether `headers` carry more than one `Authorization` header: which one counts would be up to each server and
/// proxy on the way, so none does.
pub fn ambiguous_credentials(headers: &HeaderMap) -> bool {
    headers.get_all(header::AUTHORIZATION).iter().nth(1).is_some()
}

/// Axum middleware on every route: [`identify`].
pub async fn identify_client(State(proxies): State<TrustedProxies>, mut req: Request, next: Next) -> Response {
    match identify(&proxies, &mut req) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Refuses two `Authorization` headers ([`HttpError::AmbiguousCredentials`]), and puts the client's address on the
/// request's [`PeerContext`] (creating one for an unauthenticated request). A plain function, so that a server can
/// run it in a middleware of its own next to its other checks instead of in one more layer.
pub fn identify(proxies: &TrustedProxies, req: &mut Request) -> Result<(), HttpError> {
    if ambiguous_credentials(req.headers()) {
        return Err(HttpError::AmbiguousCredentials);
    }
    let remote = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
    if let Some(remote) = remote {
        let address = proxies.client_of(remote, req.headers());
        match req.extensions_mut().get_mut::<PeerContext>() {
            Some(peer) => peer.address = Some(address),
            None => {
                req.extensions_mut().insert(PeerContext { address: Some(address), ..PeerContext::default() });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_a_trusted_proxy_is_believed() {
        let none = TrustedProxies::default();
        let headers = forwarded(&["203.0.113.9"]);
        assert_eq!(none.client_of(ip("127.0.0.1"), &headers), ip("127.0.0.1"));
        let proxies = TrustedProxies::new(&["10.0.0.0/8".parse().unwrap()]);
        assert_eq!(proxies.client_of(ip("10.1.2.3"), &headers), ip("203.0.113.9"));
        // Anyone else sending the header is its own client.
        assert_eq!(proxies.client_of(ip("192.0.2.1"), &headers), ip("192.0.2.1"));
    }

    #[test]
    fn the_walk_stops_at_the_first_untrusted_hop_from_the_right() {
        let proxies = TrustedProxies::new(&["10.0.0.0/8".parse().unwrap()]);
        // The client forged the first entry; the proxies appended the rest.
        let headers = forwarded(&["198.51.100.7, 203.0.113.9", "10.0.0.2"]);
        assert_eq!(proxies.client_of(ip("10.0.0.1"), &headers), ip("203.0.113.9"));
        // Garbage stops the walk at the proxy that passed it on.
        let headers = forwarded(&["not-an-address, 10.0.0.2"]);
        assert_eq!(proxies.client_of(ip("10.0.0.1"), &headers), ip("10.0.0.2"));
        let headers = forwarded(&["[2001:db8::1]:443", "192.0.2.5:80"]);
        assert_eq!(proxies.client_of(ip("10.0.0.1"), &headers), ip("192.0.2.5"));
    }

    #[test]
    fn two_authorization_headers_are_ambiguous() {
        let mut headers = HeaderMap::new();
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        assert!(!ambiguous_credentials(&headers));
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        assert!(ambiguous_credentials(&headers));
    }
}
