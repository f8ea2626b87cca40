//! The cost of authenticating one request: `BearerAuth::authenticate` with a static token (the anchor: SHA-256
//! label of a constant-time match) against JWT access tokens validated with a cached key (RS256 2048-bit, ES256).
//! The keys are served by a JWKS endpoint of this bench and fetched once before measuring.
//!
//!     cargo bench -p ldp-edge --bench auth
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use ldp_edge::{BearerAuth, JwtAuth, JwtConfig};
use ldp_session::AuthenticatedPeer;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

const RSA_KEY: &[u8] = include_bytes!("../tests/fixtures/rsa-key.pem");
const RSA_JWK: &str = include_str!("../tests/fixtures/rsa-jwk.json");

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
    headers
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref();
    let ec_jwk = json!({"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65])});
    let rsa_jwk: Value = serde_json::from_str(RSA_JWK).unwrap();
    let keys = json!({"keys": [rsa_jwk, ec_jwk]});

    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/jwks", axum::routing::get(move || async move { axum::Json(keys) }));
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut config = JwtConfig::new(url.clone(), "https://ldp.bench", "bench");
    config.jwks_url = Some(format!("{url}/jwks"));
    let jwt = rt.block_on(JwtAuth::start(config)).unwrap();

    let peer = AuthenticatedPeer { delegate_id: None, trust_domain: "bench".into() };
    let auth = BearerAuth::new([("static-bench-token-0123456789abcdef".to_owned(), peer)]).with_jwt(Some(jwt));
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"iss": url, "aud": "https://ldp.bench", "sub": "agent", "exp": now + 3600,
        "iat": now, "scope": "ldp:call"});
    let rs256 = encode(
        &Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::RS256) },
        &claims,
        &EncodingKey::from_rsa_pem(RSA_KEY).unwrap(),
    )
    .unwrap();
    let es256 = encode(
        &Header { kid: Some("ec-1".into()), ..Header::new(Algorithm::ES256) },
        &claims,
        &EncodingKey::from_ec_der(pkcs8.as_ref()),
    )
    .unwrap();

    let mut group = c.benchmark_group("authenticate");
    for (name, token) in
        [("static", "static-bench-token-0123456789abcdef".to_owned()), ("jwt-rs256", rs256), ("jwt-es256", es256)]
    {
        let headers = bearer(&token);
        assert!(auth.authenticate(&headers).is_ok(), "{name}");
        group.bench_function(name, |b| b.iter(|| auth.authenticate(std::hint::black_box(&headers)).unwrap()));
    }
    group.finish();
    // The static table alone, as it is without an issuer configured (what every request paid before).
    let plain = BearerAuth::new([(
        "static-bench-token-0123456789abcdef".to_owned(),
        AuthenticatedPeer { delegate_id: None, trust_domain: "bench".into() },
    )]);
    let headers = bearer("static-bench-token-0123456789abcdef");
    c.bench_function("authenticate/static-without-issuer", |b| {
        b.iter(|| plain.authenticate(std::hint::black_box(&headers)).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
