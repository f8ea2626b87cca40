#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! [`BearerLayer`] against [`require_bearer`], the middleware it replaces on the server's hot path: for each request
//! (no token, an unknown token, a known one, a peer its connection authenticated, a scope the peer lacks) both give
//! the same status, challenge and body, and a request that passes reaches the route with its peer and its address.

use std::net::{IpAddr, Ipv4Addr};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::post;
use axum::{Extension, Router};
use ldp_edge::{BearerAuth, BearerLayer, ProtectedResource, require_bearer};
use ldp_session::{AuthenticatedPeer, PeerContext};
use tower::ServiceExt;

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

/// A route answering with what the auth layer left it: the peer's trust domain, principal kind and address.
async fn echo_peer(Extension(peer): Extension<PeerContext>) -> String {
    let domain = peer.authenticated.map_or_else(|| "-".to_owned(), |p| p.trust_domain);
    let principal = peer.principal.map_or("-", |p| if p.starts_with("bearer:sha256:") { "bearer" } else { "other" });
    format!("{domain} {principal} {:?}", peer.address)
}

fn routes() -> Router {
    Router::new().route("/ldp/messages", post(echo_peer)).route("/mcp", post(echo_peer))
}

/// The same routes behind the layer and behind the middleware.
fn both(auth: &BearerAuth) -> [Router; 2] {
    [
        routes().route_layer(BearerLayer::new(auth.clone())),
        routes().route_layer(axum::middleware::from_fn_with_state(auth.clone(), require_bearer)),
    ]
}

/// A request to `path`, with `token` as its bearer token, carrying the peer the edge (or the connection) found.
fn request(path: &str, token: Option<&str>, peer: PeerContext) -> Request<Body> {
    let mut builder = Request::post(path).header(header::HOST, "127.0.0.1:7000");
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let mut req = builder.body(Body::empty()).unwrap();
    req.extensions_mut().insert(peer);
    req
}

fn from_edge() -> PeerContext {
    PeerContext { address: Some(CLIENT), ..PeerContext::default() }
}

/// Status, challenge and body of `app`'s answer to `req`.
async fn answer(app: Router, req: Request<Body>) -> (StatusCode, Option<String>, String) {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let challenge = resp.headers().get(header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
    (status, challenge, String::from_utf8(body.to_vec()).unwrap())
}

/// The layer's answer, after checking that the middleware gives the same one.
async fn judged(auth: &BearerAuth, make: impl Fn() -> Request<Body>) -> (StatusCode, Option<String>, String) {
    let [layer, middleware] = both(auth);
    let by_layer = answer(layer, make()).await;
    assert_eq!(by_layer, answer(middleware, make()).await, "the layer and the middleware disagree");
    by_layer
}

fn scoped() -> BearerAuth {
    let ops = AuthenticatedPeer { delegate_id: None, trust_domain: "ops".into() };
    let mut resource = ProtectedResource::new(vec!["https://issuer.test".into()]);
    resource.endpoint_scopes = vec![("/mcp".into(), vec!["mcp:tools".into()])];
    BearerAuth::new([("static-secret".to_owned(), ops)]).with_resource(Some(resource))
}

#[tokio::test]
async fn a_known_static_token_passes_with_its_peer_and_the_edge_s_address() {
    let (status, _, body) = judged(&scoped(), || request("/ldp/messages", Some("static-secret"), from_edge())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, format!("ops bearer Some({CLIENT})"));
}

#[tokio::test]
async fn a_missing_or_unknown_token_is_refused_401_with_the_resource_s_challenge() {
    for token in [None, Some("not-the-secret"), Some("static-secre")] {
        let (status, challenge, body) = judged(&scoped(), || request("/ldp/messages", token, from_edge())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        let challenge = challenge.unwrap();
        assert!(challenge.starts_with("Bearer realm=\"ldp\""), "{challenge}");
        assert!(
            challenge.ends_with("resource_metadata=\"http://127.0.0.1:7000/.well-known/oauth-protected-resource\"")
        );
        assert!(body.contains("UNAUTHENTICATED"), "{body}");
    }
}

#[tokio::test]
async fn a_static_token_lacks_the_scope_an_endpoint_requires() {
    let (status, challenge, _) = judged(&scoped(), || request("/mcp", Some("static-secret"), from_edge())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(challenge.unwrap().contains("error=\"insufficient_scope\", scope=\"mcp:tools\""));
}

#[tokio::test]
async fn a_peer_its_connection_authenticated_passes_without_a_token_but_not_past_a_scope() {
    let by_certificate = || PeerContext {
        authenticated: Some(AuthenticatedPeer { delegate_id: None, trust_domain: "mtls".into() }),
        principal: Some("cert:sha256:00".into()),
        address: Some(CLIENT),
        ..PeerContext::default()
    };
    let (status, _, body) = judged(&scoped(), || request("/ldp/messages", None, by_certificate())).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, format!("mtls other Some({CLIENT})").as_str()));
    // A token beside it changes nothing: the connection's identity is the one kept.
    let (_, _, body) = judged(&scoped(), || request("/ldp/messages", Some("static-secret"), by_certificate())).await;
    assert_eq!(body, format!("mtls other Some({CLIENT})"));
    let (status, challenge, _) = judged(&scoped(), || request("/mcp", None, by_certificate())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(challenge.unwrap().contains("insufficient_scope"));
}

#[tokio::test]
async fn without_tokens_every_request_passes_unauthenticated_and_two_credentials_are_refused() {
    let (status, _, body) = judged(&BearerAuth::default(), || request("/mcp", None, from_edge())).await;
    assert_eq!((status, body), (StatusCode::OK, format!("- - Some({CLIENT})")));
    let two = || {
        let mut req = request("/ldp/messages", Some("a"), from_edge());
        req.headers_mut().append(header::AUTHORIZATION, "Bearer b".parse().unwrap());
        req
    };
    let (status, _, _) = judged(&BearerAuth::default(), two).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
