//! The router without a socket (`tower::ServiceExt::oneshot`): every bad request gets a typed LDP answer and a
//! fitting status, never a 500, and the server keeps working afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{AuthenticatedPeer, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TrustPolicy};
use ldp_transport_http::{HttpServerConfig, HttpState, router};
use ldp_types::signing::{SignatureAlgorithm, SigningKey, sign};
use ldp_types::{
    Capability, DelegateId, Envelope, Hello, IdentityCard, PayloadMode, SessionClose, SessionConfig, SessionPropose,
    TaskSubmit, TrustDomain,
};
use serde_json::{Value, json};
use tower::ServiceExt;

const ME: &str = "ldp:delegate:client";
const SECRET: &str = "s3cret";

fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:alpha").unwrap(), "Alpha", "test", "1");
    card.capabilities.push(Capability::new("echo"));
    card.trust_domain = TrustDomain::new("research").trusting("partners");
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card
}

struct Setup {
    signed: bool,
    tokens: HashMap<String, AuthenticatedPeer>,
    max_body: usize,
    timeout: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Self { signed: false, tokens: HashMap::new(), max_body: 64 * 1024, timeout: Duration::from_secs(5) }
    }
}

fn app(setup: Setup) -> Router {
    let mut cfg = ResponderConfig::new(card());
    if setup.signed {
        cfg.security =
            SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap());
    }
    if !setup.tokens.is_empty() {
        cfg.trust = TrustPolicy::strict();
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let config = HttpServerConfig {
        max_body: setup.max_body,
        request_timeout: setup.timeout,
        tokens: setup.tokens,
        ..Default::default()
    };
    router(HttpState::new(runtime, config))
}

fn now() -> String {
    ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc())
}

fn env(session: &str, body: impl Into<ldp_types::Body>) -> Envelope {
    Envelope::new(uuid::Uuid::new_v4().to_string(), now(), session, ME, "ldp:delegate:alpha", body)
}

fn signed(mut e: Envelope) -> Envelope {
    e.nonce = Some(uuid::Uuid::new_v4().simple().to_string());
    sign(&mut e, &SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap()).unwrap();
    e
}

fn propose(domain: Option<&str>) -> Envelope {
    let config = SessionConfig { trust_domain: domain.map(str::to_owned), ..SessionConfig::default() };
    env("", SessionPropose::new(config))
}

fn submit(session: &str) -> Envelope {
    env(session, TaskSubmit::new(uuid::Uuid::new_v4().to_string(), "echo".into(), json!("hi"), None))
        .with_payload_mode(PayloadMode::Text)
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{value}");
    (status, headers, value)
}

fn post_raw(body: impl Into<Body>, ctype: Option<&str>, token: Option<&str>) -> Request<Body> {
    let mut b = Request::post("/ldp/messages");
    if let Some(c) = ctype {
        b = b.header(header::CONTENT_TYPE, c);
    }
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(body.into()).unwrap()
}

fn post(e: &Envelope) -> Request<Body> {
    post_raw(e.to_vec().unwrap(), Some("application/json"), None)
}

fn post_with_token(e: &Envelope, token: &str) -> Request<Body> {
    post_raw(e.to_vec().unwrap(), Some("application/json"), Some(token))
}

fn body_type(v: &Value) -> &str {
    v["body"]["type"].as_str().unwrap_or("")
}

fn code(v: &Value) -> &str {
    v["body"]["error"]["code"].as_str().or(v["error"]["code"].as_str()).unwrap_or("")
}

/// Opens a session and returns its id.
async fn open(app: &Router) -> String {
    let (status, _, reply) = send(app, post(&propose(None))).await;
    assert_eq!((status, body_type(&reply)), (StatusCode::OK, "SESSION_ACCEPT"), "{reply}");
    reply["body"]["session_id"].as_str().unwrap().to_owned()
}

/// A normal exchange still works.
async fn still_works(app: &Router) {
    let session = open(app).await;
    let (status, _, reply) = send(app, post(&submit(&session))).await;
    assert_eq!((status, body_type(&reply)), (StatusCode::OK, "TASK_RESULT"), "{reply}");
    assert_eq!(reply["body"]["output"], json!({"echo": "hi"}));
}

#[tokio::test]
async fn discovery_serves_the_card_on_both_paths() {
    let app = app(Setup::default());
    let get = |p: &str| Request::get(p).body(Body::empty()).unwrap();
    let (s1, h1, card1) = send(&app, get("/.well-known/ldp-identity")).await;
    let (s2, _, card2) = send(&app, get("/ldp/identity")).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(h1[header::CONTENT_TYPE], "application/json");
    assert_eq!(card1, card2);
    assert_eq!(card1["delegate_id"], "ldp:delegate:alpha");
    assert_eq!(card1["trust_domain"]["name"], "research");
    let (s, _, caps) = send(&app, get("/ldp/capabilities")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(caps["capabilities"][0]["name"], "echo");
    let (s, _, err) = send(&app, get("/nope")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(err["error"]["code"].is_string());
    // Wrong method on a known path: never a 500.
    let (s, _, _) = send(&app, get("/ldp/messages")).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn full_lifecycle_hello_to_close() {
    let app = app(Setup::default());
    let (s, _, manifest) = send(&app, post(&env("", Hello::new(ME.into(), vec![PayloadMode::Text])))).await;
    assert_eq!((s, body_type(&manifest)), (StatusCode::OK, "CAPABILITY_MANIFEST"));
    assert_eq!(manifest["body"]["capabilities"]["supported_modes"], json!(["semantic_frame", "text"]));
    let session = open(&app).await;
    let (s, _, result) = send(&app, post(&submit(&session))).await;
    assert_eq!((s, body_type(&result)), (StatusCode::OK, "TASK_RESULT"));
    assert_eq!(result["body"]["provenance"]["produced_by"], "ldp:delegate:alpha");
    let (s, _, close) = send(&app, post(&env(&session, SessionClose::new(None)))).await;
    assert_eq!((s, body_type(&close)), (StatusCode::OK, "SESSION_CLOSE"));
    // After close: a protocol answer, not an HTTP error.
    let (s, _, failed) = send(&app, post(&submit(&session))).await;
    assert_eq!((s, body_type(&failed), code(&failed)), (StatusCode::OK, "TASK_FAILED", "SESSION_CLOSED"));
}

#[tokio::test]
async fn malformed_json_is_400_with_an_ldp_error() {
    let app = app(Setup::default());
    for bad in [&b"{not json"[..], b"", b"[]", b"42", b"{\"body\": 3}", b"{\"message_id\": 1}", b"\xff\xfe"] {
        let (s, _, v) = send(&app, post_raw(bad.to_vec(), Some("application/json"), None)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(v["error"]["code"], "MALFORMED_MESSAGE");
        assert_eq!(v["error"]["category"], "runtime");
    }
    still_works(&app).await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let app = app(Setup::default());
    let body = propose(None).to_vec().unwrap();
    for ctype in [Some("text/plain"), None, Some("application/jsonx"), Some("multipart/form-data")] {
        let (s, _, v) = send(&app, post_raw(body.clone(), ctype, None)).await;
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ctype:?}");
        assert_eq!(v["error"]["code"], "MALFORMED_MESSAGE");
    }
    // Parameters are fine.
    let (s, _, _) = send(&app, post_raw(body, Some("application/json; charset=utf-8"), None)).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn unknown_message_type_is_400_with_task_failed() {
    let app = app(Setup::default());
    let mut raw = env("", SessionClose::new(None)).to_value().unwrap();
    raw["body"] = json!({"type": "SING_A_SONG", "task_id": "t1"});
    let (s, _, v) = send(&app, post_raw(raw.to_string(), Some("application/json"), None)).await;
    assert_eq!((s, body_type(&v), code(&v)), (StatusCode::BAD_REQUEST, "TASK_FAILED", "UNKNOWN_MESSAGE_TYPE"));
    still_works(&app).await;
}

#[tokio::test]
async fn oversize_body_is_413() {
    let app = app(Setup { max_body: 1024, ..Setup::default() });
    let mut big = submit("x");
    if let ldp_types::Body::TaskSubmit(t) = &mut big.body {
        t.input = json!("x".repeat(4096)).into();
    }
    let (s, _, v) = send(&app, post(&big)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"]["code"], "MESSAGE_TOO_LARGE");
    // Chunked (no content-length) too.
    let chunks = futures::stream::iter(vec![Ok::<_, std::io::Error>(vec![b' '; 800]), Ok(vec![b' '; 800])]);
    let req = Request::post("/ldp/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(chunks))
        .unwrap();
    let (s, _, _) = send(&app, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    still_works(&app).await;
}

#[tokio::test]
async fn bearer_tokens_authenticate_and_set_the_domain() {
    let tokens = HashMap::from([
        ("tok-research".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "research".into() }),
        ("tok-evil".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "evil".into() }),
        (
            "tok-pinned".to_owned(),
            AuthenticatedPeer { delegate_id: Some("ldp:delegate:other".into()), trust_domain: "research".into() },
        ),
    ]);
    let app = app(Setup { tokens, ..Setup::default() });
    let p = propose(None);
    // Missing, unknown, malformed.
    let (s, h, v) = send(&app, post(&p)).await;
    assert_eq!((s, v["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("UNAUTHENTICATED")));
    assert_eq!(h[header::WWW_AUTHENTICATE], "Bearer realm=\"ldp\"");
    let (s, _, _) = send(&app, post_with_token(&p, "nope")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let req = Request::post("/ldp/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Basic dXNlcjpwdw==")
        .body(Body::from(p.to_vec().unwrap()))
        .unwrap();
    assert_eq!(send(&app, req).await.0, StatusCode::UNAUTHORIZED);
    // Discovery stays public.
    let (s, _, _) = send(&app, Request::get("/ldp/identity").body(Body::empty()).unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    // A known token: the token's domain counts.
    let (s, _, v) = send(&app, post_with_token(&propose(None), "tok-research")).await;
    assert_eq!((s, body_type(&v)), (StatusCode::OK, "SESSION_ACCEPT"));
    // A declaration that contradicts the token: refused, 403.
    let (s, _, v) = send(&app, post_with_token(&propose(Some("partners")), "tok-research")).await;
    assert_eq!((s, body_type(&v), code(&v)), (StatusCode::FORBIDDEN, "SESSION_REJECT", "TRUST_VIOLATION"));
    // A token of an untrusted domain: 403, whatever it declares.
    let (s, _, v) = send(&app, post_with_token(&propose(Some("research")), "tok-evil")).await;
    assert_eq!((s, code(&v)), (StatusCode::FORBIDDEN, "TRUST_VIOLATION"));
    // A token bound to another delegate id than the sender: 401.
    let (s, _, v) = send(&app, post_with_token(&propose(None), "tok-pinned")).await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"));
    let (s, _, v) = send(&app, post_with_token(&submit("nope"), "tok-research")).await;
    assert_eq!((s, code(&v)), (StatusCode::OK, "SESSION_NOT_FOUND"));
}

#[tokio::test]
async fn untrusted_declared_domain_is_403() {
    let app = app(Setup::default());
    let (s, _, v) = send(&app, post(&propose(Some("evil.example")))).await;
    assert_eq!((s, body_type(&v), code(&v)), (StatusCode::FORBIDDEN, "SESSION_REJECT", "TRUST_VIOLATION"));
    // A trusted peer domain is accepted.
    let (s, _, v) = send(&app, post(&propose(Some("partners")))).await;
    assert_eq!((s, body_type(&v)), (StatusCode::OK, "SESSION_ACCEPT"));
    still_works(&app).await;
}

#[tokio::test]
async fn session_and_skill_refusals_are_protocol_answers() {
    let app = app(Setup::default());
    let (s, _, v) = send(&app, post(&submit("no-such-session"))).await;
    assert_eq!((s, body_type(&v), code(&v)), (StatusCode::OK, "TASK_FAILED", "SESSION_NOT_FOUND"));
    let session = open(&app).await;
    let wrong_skill = env(&session, TaskSubmit::new("t-1".into(), "dance".into(), json!("x"), None));
    let (s, _, v) = send(&app, post(&wrong_skill)).await;
    assert_eq!((s, code(&v)), (StatusCode::OK, "SKILL_NOT_FOUND"));
    let empty_task = env(&session, TaskSubmit::new(String::new(), "echo".into(), json!("x"), None));
    let (s, _, v) = send(&app, post(&empty_task)).await;
    assert_eq!((s, body_type(&v), code(&v)), (StatusCode::BAD_REQUEST, "TASK_FAILED", "MALFORMED_MESSAGE"));
    still_works(&app).await;
}

#[tokio::test]
async fn signatures_and_replays_are_401() {
    let app = app(Setup { signed: true, ..Setup::default() });
    let (s, _, accept) = send(&app, post(&signed(propose(None)))).await;
    assert_eq!((s, body_type(&accept)), (StatusCode::OK, "SESSION_ACCEPT"), "{accept}");
    assert_eq!(accept["signature_algorithm"], "hmac-sha256-jcs");
    let session = accept["body"]["session_id"].as_str().unwrap().to_owned();

    let first = signed(submit(&session));
    let (s, _, v) = send(&app, post(&first)).await;
    assert_eq!((s, body_type(&v)), (StatusCode::OK, "TASK_RESULT"));
    // The same bytes again.
    let (s, h, v) = send(&app, post(&first)).await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "REPLAY_DETECTED"));
    assert_eq!(h[header::WWW_AUTHENTICATE], "LDP-Signature realm=\"ldp\"");
    // Tampered after signing.
    let mut tampered = signed(submit(&session));
    if let ldp_types::Body::TaskSubmit(t) = &mut tampered.body {
        t.input = json!("evil").into();
    }
    let (s, _, v) = send(&app, post(&tampered)).await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "SIGNATURE_INVALID"));
    // Unsigned.
    let (s, _, v) = send(&app, post(&submit(&session))).await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "SIGNATURE_REQUIRED"));
    // Stale timestamp (signed correctly).
    let mut stale = submit(&session);
    stale.timestamp = "2020-01-01T00:00:00Z".into();
    let (s, _, v) = send(&app, post(&signed(stale))).await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "TIMESTAMP_OUT_OF_WINDOW"));
    // A bad signature on a proposal: 401, not a 2xx a lenient client could take for acceptance.
    let mut p = signed(propose(None));
    p.signature = Some("00".repeat(32));
    let (s, _, v) = send(&app, post(&p)).await;
    assert_eq!((s, body_type(&v)), (StatusCode::UNAUTHORIZED, "SESSION_REJECT"));
    // Still works.
    let (s, _, v) = send(&app, post(&signed(submit(&session)))).await;
    assert_eq!((s, body_type(&v)), (StatusCode::OK, "TASK_RESULT"), "{v}");
}

#[tokio::test]
async fn garbage_never_yields_a_500() {
    let app = app(Setup::default());
    let valid = submit("s").to_value().unwrap();
    let mut cases: Vec<Vec<u8>> = vec![
        b"null".to_vec(),
        b"\"str\"".to_vec(),
        b"{}".to_vec(),
        br#"{"body":{}}"#.to_vec(),
        br#"{"body":{"type":null}}"#.to_vec(),
        br#"{"body":{"type":"TASK_SUBMIT"}}"#.to_vec(),
        "{\"body\":{\"type\":\"HELLO\",\"delegate_id\":\"\u{0}\"}}".as_bytes().to_vec(),
        vec![b'['; 10_000],
        vec![b'{'; 10_000],
    ];
    // Each member of a valid message replaced by odd values.
    for key in ["message_id", "session_id", "from", "to", "body", "payload_mode", "timestamp", "provenance", "nonce"] {
        for odd in [json!(null), json!(1e308), json!([]), json!({}), json!("latent_capsules"), json!(-1)] {
            let mut v = valid.clone();
            v[key] = odd;
            cases.push(v.to_string().into_bytes());
        }
    }
    for body in cases {
        let (s, _, v) = send(&app, post_raw(body.clone(), Some("application/json"), None)).await;
        assert!(s.is_client_error() || s.is_success(), "{s} for {}", String::from_utf8_lossy(&body));
        assert!(v.get("error").is_some() || v.get("body").is_some(), "{v}");
    }
    still_works(&app).await;
}
