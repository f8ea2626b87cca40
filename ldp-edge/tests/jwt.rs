#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! JWT bearer validation against a key set served over HTTP by the test: tokens minted in process (ES256 keys made
//! by ring, an RSA key from `fixtures/rsa-key.pem`, a key made for these tests only), each hostile case refused
//! with its own reason, keys refetched on rotation and rate-limited.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use ldp_edge::{BearerAuth, HttpError, JwtAuth, JwtConfig, ProtectedResource, TokenError};
use ldp_session::AuthenticatedPeer;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

const AUDIENCE: &str = "https://ldp.test";
const RSA_KEY: &[u8] = include_bytes!("fixtures/rsa-key.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("fixtures/rsa-public.pem");
const RSA_JWK: &str = include_str!("fixtures/rsa-jwk.json");

/// A P-256 key pair: its signing key and its public JWK.
struct EcKey {
    encoding: EncodingKey,
    jwk: Value,
}

fn ec_key(kid: &str) -> EcKey {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    // The uncompressed point: 0x04 || x || y.
    let point = pair.public_key().as_ref();
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    });
    EcKey { encoding: EncodingKey::from_ec_der(pkcs8.as_ref()), jwk }
}

fn now() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

/// The issuer the test plays: a JWKS and a discovery document, the number of JWKS fetches.
struct Issuer {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
}

async fn issuer(keys: Vec<Value>) -> Issuer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let keys = Arc::new(Mutex::new(keys));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (k, f, u) = (Arc::clone(&keys), Arc::clone(&fetches), url.clone());
    let app = Router::new()
        .route(
            "/jwks",
            get(move || {
                f.fetch_add(1, Ordering::SeqCst);
                let keys = k.lock().unwrap().clone();
                async move { axum::Json(json!({ "keys": keys })) }
            }),
        )
        .route(
            "/.well-known/openid-configuration",
            get(move || {
                let u = u.clone();
                async move { axum::Json(json!({ "issuer": u, "jwks_uri": format!("{u}/jwks") })) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Issuer { url, keys, fetches }
}

impl Issuer {
    fn config(&self) -> JwtConfig {
        let mut config = JwtConfig::new(self.url.clone(), AUDIENCE, "corp.example");
        config.jwks_url = Some(format!("{}/jwks", self.url));
        config.min_refetch_interval = Duration::from_secs(3600);
        config.delegate_id_claim = Some("client_id".into());
        config
    }

    fn claims(&self) -> Value {
        json!({
            "iss": self.url, "aud": AUDIENCE, "sub": "alice", "client_id": "ldp:delegate:alice",
            "exp": now() + 300, "iat": now(), "scope": "ldp:call ldp:admin",
        })
    }
}

fn es256(key: &EcKey, kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    encode(&header, claims, &key.encoding).unwrap()
}

fn rs256(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa-1".into());
    encode(&header, claims, &EncodingKey::from_rsa_pem(RSA_KEY).unwrap()).unwrap()
}

/// A token from raw header and claims with the given signature bytes (for forgeries jsonwebtoken would not make).
fn raw_token(header: &Value, claims: &Value, signature: &[u8]) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    format!("{}.{}.{}", part(header), part(claims), URL_SAFE_NO_PAD.encode(signature))
}

async fn started(issuer: &Issuer) -> JwtAuth {
    JwtAuth::start(issuer.config()).await.unwrap()
}

#[tokio::test]
async fn a_valid_token_maps_its_claims_to_the_peer() {
    let key = ec_key("ec-1");
    let issuer = issuer(vec![key.jwk.clone()]).await;
    let auth = started(&issuer).await;
    let peer = auth.validate(&es256(&key, "ec-1", &issuer.claims())).unwrap();
    assert_eq!(
        peer.authenticated,
        Some(AuthenticatedPeer { delegate_id: Some("ldp:delegate:alice".into()), trust_domain: "corp.example".into() })
    );
    assert_eq!(peer.principal.as_deref(), Some("jwt:alice"));
    assert!(peer.has_scope("ldp:call") && peer.has_scope("ldp:admin") && !peer.has_scope("ldp"));
}

#[tokio::test]
async fn rs256_tokens_verify_with_an_rsa_key_and_the_domain_can_come_from_a_claim() {
    let issuer = issuer(vec![serde_json::from_str(RSA_JWK).unwrap()]).await;
    let mut config = issuer.config();
    config.trust_domain_claim = Some("tenant".into());
    let auth = JwtAuth::start(config).await.unwrap();
    let mut claims = issuer.claims();
    assert_eq!(auth.validate(&rs256(&claims)), Err(TokenError::MissingClaim("tenant".into())));
    claims["tenant"] = json!("tenant-a");
    let peer = auth.validate(&rs256(&claims)).unwrap();
    assert_eq!(peer.authenticated.unwrap().trust_domain, "tenant-a");
}

#[tokio::test]
async fn each_hostile_token_is_refused_with_its_reason() {
    let key = ec_key("ec-1");
    let other = ec_key("ec-1");
    let mut rsa: Value = serde_json::from_str(RSA_JWK).unwrap();
    rsa["kid"] = json!("rsa-1");
    let issuer = issuer(vec![key.jwk.clone(), rsa]).await;
    let auth = started(&issuer).await;
    let good = issuer.claims();
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };

    assert_eq!(auth.validate(&es256(&key, "ec-1", &with("exp", json!(now() - 120)))), Err(TokenError::Expired));
    // Within the 60 s skew: still accepted.
    assert!(auth.validate(&es256(&key, "ec-1", &with("exp", json!(now() - 30)))).is_ok());
    assert_eq!(auth.validate(&es256(&key, "ec-1", &with("nbf", json!(now() + 120)))), Err(TokenError::NotYetValid));
    assert!(auth.validate(&es256(&key, "ec-1", &with("nbf", json!(now() + 30)))).is_ok());
    assert_eq!(
        auth.validate(&es256(&key, "ec-1", &with("iss", json!("https://evil.example")))),
        Err(TokenError::WrongIssuer)
    );
    assert_eq!(
        auth.validate(&es256(&key, "ec-1", &with("aud", json!("https://other.service")))),
        Err(TokenError::WrongAudience)
    );
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert_eq!(auth.validate(&es256(&key, "ec-1", &no_exp)), Err(TokenError::MissingClaim("exp".into())));
    let mut no_sub = good.clone();
    no_sub.as_object_mut().unwrap().remove("sub");
    assert_eq!(auth.validate(&es256(&key, "ec-1", &no_sub)), Err(TokenError::MissingClaim("sub".into())));

    // Signed by another key under the same key id.
    assert_eq!(auth.validate(&es256(&other, "ec-1", &good)), Err(TokenError::BadSignature));
    // A tampered payload.
    let token = es256(&key, "ec-1", &good);
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&with("sub", json!("root"))).unwrap());
    parts[1] = &forged;
    assert_eq!(auth.validate(&parts.join(".")), Err(TokenError::BadSignature));
    assert_eq!(auth.validate(&es256(&key, "nobody", &good)), Err(TokenError::UnknownKey));

    // `alg: none`, with and without a signature part.
    let none = json!({"alg": "none", "typ": "JWT", "kid": "ec-1"});
    assert_eq!(auth.validate(&raw_token(&none, &good, b"")), Err(TokenError::AlgorithmNotAllowed));
    assert_eq!(auth.validate(&raw_token(&none, &good, b"x")), Err(TokenError::AlgorithmNotAllowed));
    // HMAC keyed with the RSA public key (the classic key confusion): refused before any key is used.
    let hs = encode(
        &Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::HS256) },
        &good,
        &EncodingKey::from_secret(RSA_PUBLIC),
    )
    .unwrap();
    assert_eq!(auth.validate(&hs), Err(TokenError::AlgorithmNotAllowed));
    // An RSA algorithm naming the EC key: the key's type decides the family.
    let rs_on_ec = encode(
        &Header { kid: Some("ec-1".into()), ..Header::new(Algorithm::RS256) },
        &good,
        &EncodingKey::from_rsa_pem(RSA_KEY).unwrap(),
    )
    .unwrap();
    assert_eq!(auth.validate(&rs_on_ec), Err(TokenError::AlgorithmNotAllowed));

    let oversized = es256(&key, "ec-1", &with("pad", json!("x".repeat(10_000))));
    assert_eq!(auth.validate(&oversized), Err(TokenError::Oversized { limit: 8192 }));
    for garbage in ["", "garbage", "a.b.c", "a.b", "e30.e30.e30.e30", "!!!.e30.", "eyJhbGciOiJFUzI1NiJ9.%%%.abc"] {
        assert_eq!(auth.validate(garbage), Err(TokenError::Malformed), "{garbage:?}");
    }
}

#[tokio::test]
async fn an_algorithm_outside_the_allow_list_is_refused() {
    let issuer = issuer(vec![serde_json::from_str(RSA_JWK).unwrap()]).await;
    let mut config = issuer.config();
    config.algorithms = vec![Algorithm::ES256];
    // The RSA key verifies nothing now: no algorithm of its type is allowed.
    let auth = JwtAuth::start(config).await.unwrap();
    assert_eq!(auth.validate(&rs256(&issuer.claims())), Err(TokenError::AlgorithmNotAllowed));
    let mut hmac = issuer.config();
    hmac.algorithms = vec![Algorithm::HS256];
    assert!(JwtAuth::new(hmac).is_err());
    let mut no_audience = issuer.config();
    no_audience.audiences.clear();
    assert!(JwtAuth::new(no_audience).is_err());
}

#[tokio::test]
async fn keys_are_found_by_oidc_discovery() {
    let key = ec_key("ec-1");
    let issuer = issuer(vec![key.jwk.clone()]).await;
    let mut config = issuer.config();
    config.jwks_url = None;
    let auth = JwtAuth::start(config).await.unwrap();
    assert!(auth.validate(&es256(&key, "ec-1", &issuer.claims())).is_ok());
}

#[tokio::test]
async fn a_rotated_key_is_fetched_at_once_and_refetches_are_rate_limited() {
    let old = ec_key("old");
    let issuer = issuer(vec![old.jwk.clone()]).await;
    let mut config = issuer.config();
    config.min_refetch_interval = Duration::from_millis(500);
    let auth = BearerAuth::default().with_jwt(Some(JwtAuth::start(config).await.unwrap()));
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1);
    let new = ec_key("new");
    issuer.keys.lock().unwrap().push(new.jwk.clone());

    let headers = bearer(&es256(&new, "new", &issuer.claims()));
    // The cache alone does not know the key; a fresh check fetches it once and accepts the token, right after the
    // start's fetch (which does not count against the refetch rate).
    assert!(matches!(auth.authenticate(&headers), Err(HttpError::InvalidToken(TokenError::UnknownKey))));
    assert!(auth.authenticate_fresh(&headers).await.is_ok());
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2);
    // Old tokens still pass while the issuer publishes the old key.
    assert!(auth.authenticate_fresh(&bearer(&es256(&old, "old", &issuer.claims()))).await.is_ok());

    // Made-up key ids cause at most one fetch per interval.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for i in 0..20 {
        let forged = bearer(&es256(&old, &format!("made-up-{i}"), &issuer.claims()));
        assert!(matches!(auth.authenticate_fresh(&forged).await, Err(HttpError::InvalidToken(TokenError::UnknownKey))));
    }
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 3);

    // The issuer drops the old key: after the next fetch, its tokens are refused.
    issuer.keys.lock().unwrap().remove(0);
    auth.jwt().unwrap().refresh().await.unwrap();
    assert!(matches!(
        auth.authenticate_fresh(&bearer(&es256(&old, "old", &issuer.claims()))).await,
        Err(HttpError::InvalidToken(TokenError::UnknownKey))
    ));
}

/// A validator made without a runtime (as `Server::app` makes it) refetches its keys on the schedule once it has
/// validated a token, so that a key the issuer withdraws stops verifying without any unknown key to prompt it.
#[tokio::test]
async fn a_lazily_made_validator_refetches_on_its_schedule() {
    let key = ec_key("only");
    let issuer = issuer(vec![key.jwk.clone()]).await;
    let mut config = issuer.config();
    config.refresh_interval = Duration::from_secs(1);
    let auth = BearerAuth::default().with_jwt(Some(JwtAuth::new(config).unwrap()));
    let token = bearer(&es256(&key, "only", &issuer.claims()));
    // The first token fetches the keys; that validation also starts the schedule.
    assert!(auth.authenticate_fresh(&token).await.is_ok());
    let after_first = issuer.fetches.load(Ordering::SeqCst);
    issuer.keys.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(issuer.fetches.load(Ordering::SeqCst) > after_first, "no scheduled refetch");
    assert!(matches!(auth.authenticate(&token), Err(HttpError::InvalidToken(TokenError::UnknownKey))));
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
    headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7000"));
    headers
}

#[tokio::test]
async fn static_tokens_keep_working_beside_jwts_and_refusals_name_the_check_not_the_token() {
    let key = ec_key("ec-1");
    let issuer = issuer(vec![key.jwk.clone()]).await;
    let peer = AuthenticatedPeer { delegate_id: None, trust_domain: "ops".into() };
    let mut resource = ProtectedResource::new(vec![issuer.url.clone()]);
    resource.endpoint_scopes = vec![("/mcp".into(), vec!["mcp:tools".into()])];
    let auth = BearerAuth::new([("static-secret".to_owned(), peer.clone())])
        .with_jwt(Some(started(&issuer).await))
        .with_resource(Some(resource));
    assert!(auth.is_enabled());
    let static_peer = auth.authenticate(&bearer("static-secret")).unwrap();
    assert_eq!(static_peer.authenticated, Some(peer));
    assert!(static_peer.principal.unwrap().starts_with("bearer:sha256:"));

    let expired = es256(&key, "ec-1", &{
        let mut c = issuer.claims();
        c["exp"] = json!(now() - 3600);
        c
    });
    let headers = bearer(&expired);
    let error = auth.authenticate(&headers).unwrap_err();
    let resp = auth.refusal(error, &headers);
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let challenge = resp.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().to_owned();
    assert_eq!(
        challenge,
        "Bearer realm=\"ldp\", error=\"invalid_token\", error_description=\"token expired\", \
         resource_metadata=\"http://127.0.0.1:7000/.well-known/oauth-protected-resource\""
    );
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
    assert_eq!(body["error"]["message"], "bearer token refused: token expired");
    assert!(!challenge.contains(&expired[..20]) && !body.to_string().contains(&expired[..20]));

    // A valid token without the endpoint's scope: 403 insufficient_scope.
    let valid = auth.authenticate(&bearer(&es256(&key, "ec-1", &issuer.claims()))).unwrap();
    assert!(auth.check_endpoint("/ldp/messages", &valid).is_ok());
    let error = auth.check_endpoint("/mcp", &valid).unwrap_err();
    let resp = auth.refusal(error, &headers);
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(
        resp.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Bearer realm=\"ldp\", error=\"insufficient_scope\", scope=\"mcp:tools\", resource_metadata=")
    );
    // A static token carries no scopes: the scoped endpoint refuses it too.
    assert!(auth.check_endpoint("/mcp", &auth.authenticate(&bearer("static-secret")).unwrap()).is_err());

    // An unknown static-looking token with a JWT issuer configured: judged as a JWT, malformed.
    let error = auth.authenticate(&bearer("not-a-known-token")).unwrap_err();
    assert!(matches!(error, HttpError::InvalidToken(TokenError::Malformed)));
    assert_eq!(error.into_response().status(), StatusCode::UNAUTHORIZED);
}

/// [`ldp_edge::BearerLayer`] judges a JWT with [`BearerAuth::authenticate_fresh`], as the middleware does: a token
/// signed by a key the issuer just rotated in passes at once (the layer waits for the refetch), a forged one is
/// refused 401 `invalid_token`, and a valid one lacking an endpoint's scope 403.
#[tokio::test]
async fn the_bearer_layer_waits_for_a_rotated_key_and_refuses_what_the_middleware_refuses() {
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::post;
    use tower::ServiceExt;

    let old = ec_key("old");
    let issuer = issuer(vec![old.jwk.clone()]).await;
    let mut resource = ProtectedResource::new(vec![issuer.url.clone()]);
    resource.endpoint_scopes = vec![("/mcp".into(), vec!["mcp:tools".into()])];
    let auth = BearerAuth::default().with_jwt(Some(started(&issuer).await)).with_resource(Some(resource));
    let app = Router::new()
        .route(
            "/ldp/messages",
            post(|axum::Extension(peer): axum::Extension<ldp_session::PeerContext>| async move {
                peer.authenticated.and_then(|p| p.delegate_id).unwrap_or_default()
            }),
        )
        .route("/mcp", post(|| async { "tools" }))
        .route_layer(ldp_edge::BearerLayer::new(auth));
    let call = |path: &str, token: &str| {
        let mut req = Request::post(path).body(Body::empty()).unwrap();
        *req.headers_mut() = bearer(token);
        app.clone().oneshot(req)
    };

    let new = ec_key("new");
    issuer.keys.lock().unwrap().push(new.jwk.clone());
    let resp = call("/ldp/messages", &es256(&new, "new", &issuer.claims())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
    assert_eq!(&body[..], b"ldp:delegate:alice");
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2, "the rotated key was not fetched");

    let resp = call("/ldp/messages", "not-a-jwt").await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().contains("error=\"invalid_token\""));
    let resp = call("/mcp", &es256(&old, "old", &issuer.claims())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
}
