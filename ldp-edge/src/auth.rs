//! Bearer-token authentication (RFC 8.3): a token maps to an [`AuthenticatedPeer`] (trust domain, optionally a
//! delegate id), which the session layer uses for its trust checks instead of what the peer declares.
//!
//! [`BearerAuth::authenticate`] is the check itself, usable by any transport (the WebSocket binding calls it on its
//! upgrade request); [`require_bearer`] is the same check as an axum middleware that stores the resulting
//! [`PeerContext`] in the request extensions.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ldp_session::{AuthenticatedPeer, PeerContext};
use subtle::ConstantTimeEq;

use crate::error::HttpError;
use crate::source::ambiguous_credentials;

/// Token-to-identity table. Empty means authentication is off: every request is an unauthenticated peer whose
/// declarations the session layer judges by its trust policy.
#[derive(Debug, Clone, Default)]
pub struct BearerAuth {
    tokens: Arc<[KnownToken]>,
}

/// A configured token, the identity it authenticates and its principal label.
type KnownToken = (Box<[u8]>, AuthenticatedPeer, Arc<str>);

/// The principal label of a bearer token: a digest, so that sessions bound to it are bound to the token without the
/// session state holding the secret, and so that every transport sharing the token table derives the same label.
fn token_label(token: &[u8]) -> Arc<str> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(token);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("bearer:sha256:{hex}").into()
}

impl BearerAuth {
    /// A table from `token -> identity` pairs.
    pub fn new(tokens: impl IntoIterator<Item = (String, AuthenticatedPeer)>) -> Self {
        let tokens: Vec<_> = tokens
            .into_iter()
            .map(|(t, p)| {
                let label = token_label(t.as_bytes());
                (t.into_bytes().into_boxed_slice(), p, label)
            })
            .collect();
        Self { tokens: tokens.into() }
    }

    /// A table from a map.
    pub fn from_map(tokens: &HashMap<String, AuthenticatedPeer>) -> Self {
        Self::new(tokens.iter().map(|(t, p)| (t.clone(), p.clone())))
    }

    /// Whether any token is configured (and so every protected request must carry one).
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The peer a request comes from, judged by its `Authorization` header: an authenticated peer for a known
    /// token, an unauthenticated one when no tokens are configured, and [`HttpError::Unauthenticated`] when tokens
    /// are configured and the header is missing, malformed or carries an unknown token.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<PeerContext, HttpError> {
        if ambiguous_credentials(headers) {
            return Err(HttpError::AmbiguousCredentials);
        }
        if !self.is_enabled() {
            return Ok(PeerContext::default());
        }
        let value = headers.get(header::AUTHORIZATION).ok_or(HttpError::Unauthenticated("bearer token required"))?;
        let value = value.to_str().map_err(|_| HttpError::Unauthenticated("malformed Authorization header"))?;
        let (scheme, token) =
            value.split_once(' ').ok_or(HttpError::Unauthenticated("malformed Authorization header"))?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(HttpError::Unauthenticated("Authorization scheme must be Bearer"));
        }
        let token = token.trim().as_bytes();
        // Compare against every token in constant time, so that timing reveals neither which nor how much matched.
        let mut found = None;
        for (known, peer, label) in self.tokens.iter() {
            if bool::from(known.as_ref().ct_eq(token)) {
                found = Some((peer, label));
            }
        }
        let (peer, label) = found.ok_or(HttpError::Unauthenticated("unknown bearer token"))?;
        // The label, not the trust domain, is the principal: two tokens of one domain are two principals.
        Ok(PeerContext { authenticated: Some(peer.clone()), principal: Some(label.clone()), ..PeerContext::default() })
    }
}

/// Axum middleware: authenticates the request with [`BearerAuth::authenticate`] and stores the [`PeerContext`] in
/// the request extensions, or answers 401 with an LDP error body.
///
/// A request whose extensions already hold a [`PeerContext`] with an authenticated peer was authenticated by its
/// connection (a mapped TLS client certificate, feature `tls`): it passes as it is, without a token.
///
/// ```
/// # use axum::{Router, routing::post, Extension};
/// # use ldp_session::PeerContext;
/// use ldp_edge::{BearerAuth, require_bearer};
/// let auth = BearerAuth::default();
/// let app: Router = Router::new()
///     .route("/ldp/ws", post(|Extension(peer): Extension<PeerContext>| async move { format!("{peer:?}") }))
///     .route_layer(axum::middleware::from_fn_with_state(auth, require_bearer));
/// ```
pub async fn require_bearer(State(auth): State<BearerAuth>, mut req: Request, next: Next) -> Response {
    if req.extensions().get::<PeerContext>().is_some_and(|p| p.authenticated.is_some()) {
        return next.run(req).await;
    }
    match auth.authenticate(req.headers()) {
        Ok(mut peer) => {
            // The client's address, which the edge found (`identify_client`), stays with the credential.
            peer.address = req.extensions().get::<PeerContext>().and_then(|p| p.address);
            req.extensions_mut().insert(peer);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}
