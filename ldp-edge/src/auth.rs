//! Bearer-token authentication (RFC 8.3): a token maps to an [`AuthenticatedPeer`] (trust domain, optionally a
//! delegate id), which the session layer uses for its trust checks instead of what the peer declares.
//!
//! Beside the static table, a [`JwtAuth`] (configured with [`BearerAuth::with_jwt`]) accepts JWT access tokens of
//! an identity provider, and a [`ProtectedResource`] ([`BearerAuth::with_resource`]) makes every 401 point OAuth
//! clients at the resource's metadata (RFC 9728) and requires scopes per endpoint.
//!
//! [`BearerAuth::authenticate`] is the check itself, usable by any transport (the WebSocket binding calls it on its
//! upgrade request); [`require_bearer`] is the same check as an axum middleware that stores the resulting
//! [`PeerContext`] in the request extensions, and [`BearerLayer`] the same check as a tower layer that costs a request
//! which passes without waiting nothing beyond the check.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ldp_session::{AuthenticatedPeer, PeerContext};
use subtle::ConstantTimeEq;

use crate::error::HttpError;
use crate::jwt::{JwtAuth, TokenError};
use crate::oauth::ProtectedResource;
use crate::source::ambiguous_credentials;

/// Token-to-identity table. Empty means authentication is off: every request is an unauthenticated peer whose
/// declarations the session layer judges by its trust policy.
#[derive(Debug, Clone, Default)]
pub struct BearerAuth {
    tokens: Arc<[KnownToken]>,
    /// JWT access tokens, judged when a token is not in the table.
    jwt: Option<JwtAuth>,
    /// The OAuth protected resource this server is: its metadata's URL in challenges, scopes per endpoint.
    resource: Option<Arc<ProtectedResource>>,
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
        Self { tokens: tokens.into(), jwt: None, resource: None }
    }

    /// The same table, also accepting the JWT access tokens `jwt` validates.
    #[must_use]
    pub fn with_jwt(mut self, jwt: Option<JwtAuth>) -> Self {
        self.jwt = jwt;
        self
    }

    /// The same table, answering as the OAuth protected resource `resource` describes (challenges naming its
    /// metadata, scopes per endpoint).
    #[must_use]
    pub fn with_resource(mut self, resource: Option<ProtectedResource>) -> Self {
        self.resource = resource.map(Arc::new);
        self
    }

    /// The JWT validator, when one is configured.
    pub fn jwt(&self) -> Option<&JwtAuth> {
        self.jwt.as_ref()
    }

    /// The protected resource settings, when configured.
    pub fn resource(&self) -> Option<&ProtectedResource> {
        self.resource.as_deref()
    }

    /// A table from a map.
    pub fn from_map(tokens: &HashMap<String, AuthenticatedPeer>) -> Self {
        Self::new(tokens.iter().map(|(t, p)| (t.clone(), p.clone())))
    }

    /// Whether any token is configured, or a JWT issuer (and so every protected request must carry one).
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }

    /// The peer a request comes from, judged by its `Authorization` header: an authenticated peer for a known
    /// token, an unauthenticated one when no tokens are configured, and [`HttpError::Unauthenticated`] when tokens
    /// are configured and the header is missing, malformed or carries an unknown token. With a JWT issuer, a token
    /// not in the table is judged as a JWT with the cached keys, a refusal being [`HttpError::InvalidToken`] naming
    /// the check that failed ([`BearerAuth::authenticate_fresh`] also refetches the keys for an unknown key).
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
        let token = token.trim();
        let bytes = token.as_bytes();
        // Compare against every token in constant time, so that timing reveals neither which nor how much matched.
        let mut found = None;
        for (known, peer, label) in self.tokens.iter() {
            if bool::from(known.as_ref().ct_eq(bytes)) {
                found = Some((peer, label));
            }
        }
        let Some((peer, label)) = found else {
            return match &self.jwt {
                Some(jwt) => jwt.validate(token).map_err(HttpError::InvalidToken),
                None => Err(HttpError::Unauthenticated("unknown bearer token")),
            };
        };
        // The label, not the trust domain, is the principal: two tokens of one domain are two principals.
        Ok(PeerContext { authenticated: Some(peer.clone()), principal: Some(label.clone()), ..PeerContext::default() })
    }
}

impl BearerAuth {
    /// [`BearerAuth::authenticate`], and once more after refetching the issuer's keys when a JWT names a key the
    /// cache does not hold (at most one refetch per [`JwtConfig::min_refetch_interval`](crate::JwtConfig)), so that
    /// tokens signed by a key the issuer just rotated in are accepted at once.
    pub async fn authenticate_fresh(&self, headers: &HeaderMap) -> Result<PeerContext, HttpError> {
        match (self.authenticate(headers), &self.jwt) {
            (Err(HttpError::InvalidToken(TokenError::UnknownKey)), Some(jwt)) => {
                if jwt.refresh_for_unknown_key().await {
                    self.authenticate(headers)
                } else {
                    Err(HttpError::InvalidToken(TokenError::UnknownKey))
                }
            }
            (result, _) => result,
        }
    }

    /// Whether `peer` may use the endpoint at `path`: the scopes the protected resource requires for it
    /// ([`ProtectedResource::endpoint_scopes`]), refused [`TokenError::MissingScope`] (403 `insufficient_scope`).
    pub fn check_endpoint(&self, path: &str, peer: &PeerContext) -> Result<(), HttpError> {
        let Some(resource) = &self.resource else { return Ok(()) };
        match resource.missing_scope(path, peer) {
            Some(scope) => Err(HttpError::InvalidToken(TokenError::MissingScope(scope.to_owned()))),
            None => Ok(()),
        }
    }

    /// The answer to a refused request: `error`'s, its `WWW-Authenticate` challenge also naming the protected
    /// resource's metadata (RFC 9728 section 5.1), where clients that follow the MCP authorization spec find the
    /// authorization server.
    pub fn refusal(&self, error: HttpError, headers: &HeaderMap) -> Response {
        let mut resp = error.into_response();
        if let Some(resource) = &self.resource {
            resource.add_metadata_to_challenge(&mut resp, headers);
        }
        resp
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
pub async fn require_bearer(State(auth): State<BearerAuth>, req: Request, next: Next) -> Response {
    match auth.admit(req) {
        Admitted::Pass(req) => next.run(req).await,
        Admitted::Refused(resp) => resp,
        Admitted::Fresh(req) => match auth.admit_fresh(req).await {
            Ok(req) => next.run(req).await,
            Err(resp) => resp,
        },
    }
}

/// What [`BearerAuth::admit`] decided without waiting.
enum Admitted {
    /// The request goes on, its [`PeerContext`] in its extensions.
    Pass(Request),
    /// The answer to a refused request.
    Refused(Response),
    /// A JWT issuer is configured: the token is judged by [`BearerAuth::admit_fresh`], which may fetch keys.
    Fresh(Request),
}

impl BearerAuth {
    /// [`require_bearer`]'s decision, as far as it can be taken without waiting: a peer the connection
    /// authenticated, and the static token table, are judged here; a token for the JWT issuer is left to
    /// [`BearerAuth::admit_fresh`].
    fn admit(&self, mut req: Request) -> Admitted {
        if let Some(peer) = req.extensions().get::<PeerContext>().filter(|p| p.authenticated.is_some()) {
            return match self.check_endpoint(req.uri().path(), peer) {
                Ok(()) => Admitted::Pass(req),
                Err(e) => Admitted::Refused(self.refusal(e, req.headers())),
            };
        }
        // Static tokens only: the check is synchronous, as it has always been.
        if self.jwt.is_some() {
            return Admitted::Fresh(req);
        }
        match self.authenticate(req.headers()) {
            Ok(peer) => match self.accept(peer, &mut req) {
                Ok(()) => Admitted::Pass(req),
                Err(e) => Admitted::Refused(self.refusal(e, req.headers())),
            },
            Err(e) => Admitted::Refused(self.refusal(e, req.headers())),
        }
    }

    /// The rest of [`require_bearer`] for a server with a JWT issuer: the token judged with
    /// [`BearerAuth::authenticate_fresh`].
    async fn admit_fresh(&self, mut req: Request) -> Result<Request, Response> {
        let checked = self.authenticate_fresh(req.headers()).await;
        match checked.and_then(|peer| self.accept(peer, &mut req)) {
            Ok(()) => Ok(req),
            Err(e) => Err(self.refusal(e, req.headers())),
        }
    }

    /// Checks the endpoint's scopes for `peer` and puts it on `req`, keeping the client's address, which the edge
    /// found ([`crate::identify`]), with the credential.
    fn accept(&self, mut peer: PeerContext, req: &mut Request) -> Result<(), HttpError> {
        self.check_endpoint(req.uri().path(), &peer)?;
        // Replaced in place when the edge put one there: an insert would box the context again.
        match req.extensions_mut().get_mut::<PeerContext>() {
            Some(found) => {
                peer.address = found.address;
                *found = peer;
            }
            None => {
                req.extensions_mut().insert(peer);
            }
        }
        Ok(())
    }
}

/// [`require_bearer`] as a tower layer, for a router's `route_layer`: the same checks, the same answers, but a
/// request that passes them without waiting (a static token table, or no tokens at all) goes straight to the route,
/// without the boxed future, the copy of the route and the `Next` that an axum `from_fn` middleware costs each
/// request.
///
/// ```
/// # use axum::{Router, routing::post, Extension};
/// # use ldp_session::PeerContext;
/// use ldp_edge::{BearerAuth, BearerLayer};
/// let app: Router = Router::new()
///     .route("/ldp/ws", post(|Extension(peer): Extension<PeerContext>| async move { format!("{peer:?}") }))
///     .route_layer(BearerLayer::new(BearerAuth::default()));
/// ```
#[derive(Debug, Clone)]
pub struct BearerLayer {
    auth: BearerAuth,
}

impl BearerLayer {
    /// The layer judging requests by `auth`.
    pub fn new(auth: BearerAuth) -> Self {
        Self { auth }
    }
}

impl<S> tower::Layer<S> for BearerLayer {
    type Service = RequireBearer<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireBearer { auth: self.auth.clone(), inner }
    }
}

/// The service [`BearerLayer`] wraps a route in.
#[derive(Debug, Clone)]
pub struct RequireBearer<S> {
    auth: BearerAuth,
    inner: S,
}

impl<S> tower::Service<Request> for RequireBearer<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    // Boxed only off the fast path: a refusal, or a token judged asynchronously.
    type Future = futures::future::Either<S::Future, futures::future::BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        use futures::future::Either;
        match self.auth.admit(req) {
            Admitted::Pass(req) => Either::Left(self.inner.call(req)),
            Admitted::Refused(resp) => Either::Right(Box::pin(std::future::ready(Ok(resp)))),
            Admitted::Fresh(req) => {
                // The ready service goes with the request; a clone stays for the next one.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let auth = self.auth.clone();
                Either::Right(Box::pin(async move {
                    match auth.admit_fresh(req).await {
                        Ok(req) => tower::ServiceExt::oneshot(inner, req).await,
                        Err(resp) => Ok(resp),
                    }
                }))
            }
        }
    }
}
