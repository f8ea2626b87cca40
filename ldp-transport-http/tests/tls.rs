//! TLS and mutual TLS on real sockets (feature `tls`): certificates made with rcgen for each test, the client
//! transport against `spawn_tls`, certificate-to-peer mapping through the session layer's trust checks, and
//! handshakes that must fail without hurting the server.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_transport_http::ConnectSettings;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate, Submission, Transport};
use ldp_session::{
    AuthenticatedPeer, InitiatorConfig, Responder, ResponderConfig, SeededIds, SessionError, SystemClock, TrustPolicy,
};
use ldp_transport_http::test_pki::{IssuedCert, TestCa};
use ldp_transport_http::{
    ClientAuth, ClientCertMatch, HttpServerConfig, HttpState, HttpTransport, RetryPolicy, ServerHandle,
    ServerTlsConfig, spawn_tls,
};
use ldp_types::{Capability, DelegateId, Envelope, ErrorCategory, IdentityCard, SessionConfig, SessionPropose};
use serde_json::json;
use tokio::io::AsyncWriteExt;

const ME: &str = "ldp:delegate:me";

fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:alpha").unwrap(), "Alpha", "test", "1");
    card.capabilities.push(Capability::new("echo"));
    card.trust_domain = ldp_types::TrustDomain::new("research");
    card
}

fn state(strict: bool, tokens: HashMap<String, AuthenticatedPeer>) -> HttpState {
    let mut cfg = ResponderConfig::new(card());
    if strict {
        cfg.trust = TrustPolicy::strict();
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    HttpState::new(runtime, HttpServerConfig { tokens, ..Default::default() })
}

async fn server(ca: &TestCa, client_auth: Option<ClientAuth>, strict: bool) -> ServerHandle {
    server_with_tokens(ca, client_auth, strict, HashMap::new()).await
}

async fn server_with_tokens(
    ca: &TestCa,
    client_auth: Option<ClientAuth>,
    strict: bool,
    tokens: HashMap<String, AuthenticatedPeer>,
) -> ServerHandle {
    let cert = ca.server_cert().unwrap();
    let tls = ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), client_auth)
        .unwrap()
        .with_handshake_timeout(Duration::from_secs(2));
    spawn_tls("127.0.0.1:0", state(strict, tokens), tls).await.unwrap()
}

/// A transport to `url` that trusts `ca`, presents `identity` if given, and never retries.
fn transport(url: &str, ca: &TestCa, identity: Option<&IssuedCert>, token: Option<&str>) -> HttpTransport {
    let mut b = HttpTransport::builder(url).tls_root_certificate_pem(ca.pem()).retry(RetryPolicy::none());
    if let Some(id) = identity {
        b = b.tls_client_identity_pem(id.cert_pem.as_bytes(), id.key_pem.as_bytes());
    }
    if let Some(t) = token {
        b = b.bearer_token(t);
    }
    b.build().unwrap()
}

async fn connect(t: HttpTransport, domain: Option<&str>) -> Result<Client<HttpTransport>, SessionError> {
    let mut cfg = InitiatorConfig::new(ME);
    cfg.trust_domain = domain.map(str::to_owned);
    Client::connect(t, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await
}

/// HELLO, SESSION_PROPOSE, TASK_SUBMIT, SESSION_CLOSE; the proposal's outcome is returned, the rest must succeed.
async fn full_flow(t: HttpTransport, domain: Option<&str>) -> Result<(), SessionError> {
    let client = connect(t, None).await?;
    let config = SessionConfig { trust_domain: domain.map(str::to_owned), ..SessionConfig::default() };
    let session = client.propose(config).await?;
    let out = client.submit(&session.session_id, "echo", json!("over tls"), None).await.unwrap();
    assert_eq!(out.output, json!({ "echo": "over tls" }));
    client.close(&session.session_id).await.unwrap();
    Ok(())
}

fn peer_code(r: Result<(), SessionError>) -> String {
    match r {
        Err(SessionError::Peer(e)) => e.code.to_string(),
        other => panic!("expected a peer refusal, got {other:?}"),
    }
}

/// The handshake is refused: discovery (the first request) fails as a transport error.
async fn assert_refused_at_handshake(t: HttpTransport) {
    let e = t.identity().await.expect_err("the handshake must fail");
    assert_eq!(e.category, ErrorCategory::Transport, "{e:?}");
}

#[tokio::test]
async fn full_flow_over_https_with_a_private_ca() {
    let ca = TestCa::new("test CA").unwrap();
    let server = server(&ca, None, false).await;
    assert!(server.url().starts_with("https://127.0.0.1:"), "{}", server.url());
    full_flow(transport(server.url(), &ca, None, None), None).await.unwrap();
    // Also by name, and with a streaming task (SSE over TLS).
    let by_name = server.url().replace("127.0.0.1", "localhost");
    let client = connect(transport(&by_name, &ca, None, None), None).await.unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(8);
    let out = client.submit_task(Submission::new(&session.session_id, "echo", json!(1)).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!({ "echo": 1 }));
    // A client that does not trust the CA refuses the server, and says why.
    let untrusting = HttpTransport::builder(server.url()).retry(RetryPolicy::none()).build().unwrap();
    let err = untrusting.identity().await.unwrap_err();
    assert!(err.message.contains("certificate"), "the cause is named: {}", err.message);
    assert!(err.message.starts_with("TLS handshake failed"), "{}", err.message);
    assert!(!err.retryable, "retrying does not make a certificate trusted");
    assert_refused_at_handshake(untrusting).await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn mutual_tls_maps_certificates_to_peers() {
    let ca = TestCa::new("test CA").unwrap();
    let planner = ca.client_cert("planner.research.example").unwrap();
    let pinned = ca.client_cert("pinned.example").unwrap();
    let impostor = ca.client_cert("other.example").unwrap();
    let stranger = TestCa::new("another CA").unwrap().client_cert("planner.research.example").unwrap();
    let named = ca.client_cert("bound.example").unwrap();
    let auth = ClientAuth::from_ca_pem(ca.pem().as_bytes())
        .unwrap()
        .peer(
            "dns:planner.research.example".parse().unwrap(),
            AuthenticatedPeer { delegate_id: None, trust_domain: "research".into() },
        )
        .peer(
            ClientCertMatch::certificate(&pinned.der),
            AuthenticatedPeer { delegate_id: Some(ME.into()), trust_domain: "research".into() },
        )
        .peer(
            "dns:bound.example".parse().unwrap(),
            AuthenticatedPeer {
                delegate_id: Some("ldp:delegate:someone-else".into()),
                trust_domain: "research".into(),
            },
        );
    assert!(auth.is_required());
    assert!(auth.identify(&impostor.der).is_none());
    let server = server(&ca, Some(auth), true).await;

    // Mapped by DNS name and by fingerprint: the certificate's domain is used, the whole flow works.
    full_flow(transport(server.url(), &ca, Some(&planner), None), None).await.unwrap();
    full_flow(transport(server.url(), &ca, Some(&pinned), None), Some("research")).await.unwrap();
    // A proposal declaring another domain than the certificate's is refused.
    let refused = full_flow(transport(server.url(), &ca, Some(&planner), None), Some("partners")).await;
    assert_eq!(peer_code(refused), "TRUST_VIOLATION");
    // ... with 403 on the wire.
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .identity(reqwest::Identity::from_pem(format!("{}{}", planner.cert_pem, planner.key_pem).as_bytes()).unwrap())
        .build()
        .unwrap();
    let config = SessionConfig { trust_domain: Some("partners".into()), ..SessionConfig::default() };
    let now = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
    let propose =
        Envelope::new(uuid::Uuid::new_v4().to_string(), now, "", ME, "ldp:delegate:alpha", SessionPropose::new(config));
    let resp = http
        .post(format!("{}/ldp/messages", server.url()))
        .header("content-type", "application/json")
        .body(propose.to_vec().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::FORBIDDEN);
    // A certificate bound to another delegate id than the sender's: its proposal is UNAUTHENTICATED.
    let refused = full_flow(transport(server.url(), &ca, Some(&named), None), None).await;
    assert_eq!(peer_code(refused), "UNAUTHENTICATED");

    // Refused at the handshake: no certificate, a CA-issued certificate that matches no entry, another CA's.
    assert_refused_at_handshake(transport(server.url(), &ca, None, None)).await;
    assert_refused_at_handshake(transport(server.url(), &ca, Some(&impostor), None)).await;
    assert_refused_at_handshake(transport(server.url(), &ca, Some(&stranger), None)).await;

    // The server still serves.
    full_flow(transport(server.url(), &ca, Some(&planner), None), None).await.unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn optional_mutual_tls_falls_back_to_bearer_tokens() {
    let ca = TestCa::new("test CA").unwrap();
    let planner = ca.client_cert("planner.research.example").unwrap();
    let unmapped = ca.client_cert("other.example").unwrap();
    let auth = ClientAuth::from_ca_pem(ca.pem().as_bytes())
        .unwrap()
        .peer(
            "dns:planner.research.example".parse().unwrap(),
            AuthenticatedPeer { delegate_id: None, trust_domain: "research".into() },
        )
        .optional();
    let tokens =
        HashMap::from([("t0k".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "partners".into() })]);
    let server = server_with_tokens(&ca, Some(auth), true, tokens).await;

    // A mapped certificate needs no token, and beats one: its domain ("research"), not the token's ("partners",
    // untrusted), is the peer's.
    full_flow(transport(server.url(), &ca, Some(&planner), None), None).await.unwrap();
    full_flow(transport(server.url(), &ca, Some(&planner), Some("t0k")), None).await.unwrap();
    // No certificate, or an unmapped one: the bearer rules apply (the token's domain, "partners", is not trusted by
    // a "research" delegate; without a token, 401).
    for id in [None, Some(&unmapped)] {
        let r = full_flow(transport(server.url(), &ca, id, Some("t0k")), None).await;
        assert_eq!(peer_code(r), "TRUST_VIOLATION");
        match connect(transport(server.url(), &ca, id, None), None).await {
            Err(SessionError::Peer(e)) => assert_eq!(e.code, "UNAUTHENTICATED"),
            other => panic!("{other:?}"),
        }
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn plain_http_and_garbage_on_the_tls_port_fail_cleanly() {
    let ca = TestCa::new("test CA").unwrap();
    let server = server(&ca, None, false).await;
    let plain = HttpTransport::builder(server.url().replacen("https://", "http://", 1))
        .retry(RetryPolicy::none())
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let e = plain.identity().await.expect_err("plain HTTP to a TLS port must fail");
    assert_eq!(e.category, ErrorCategory::Transport);
    // Raw bytes that are not a ClientHello, and a client that connects and says nothing (handshake timeout).
    let mut raw = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    raw.write_all(b"\x00\x01garbage\r\n\r\n").await.unwrap();
    let _silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    drop(raw);
    full_flow(transport(server.url(), &ca, None, None), None).await.unwrap();
    server.shutdown().await.unwrap();
}

#[test]
fn configuration_errors_are_typed() {
    let ca = TestCa::new("test CA").unwrap();
    let cert = ca.server_cert().unwrap();
    // Key and certificate swapped, no key, a required client CA with nobody mapped.
    assert!(ServerTlsConfig::from_pem(cert.key_pem.as_bytes(), cert.cert_pem.as_bytes(), None).is_err());
    assert!(ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), b"", None).is_err());
    let nobody = ClientAuth::from_ca_pem(ca.pem().as_bytes()).unwrap();
    assert!(
        ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), Some(nobody.clone())).is_err()
    );
    assert!(
        ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), Some(nobody.optional())).is_ok()
    );
    // Client side: a bad root or identity is an error at build time.
    assert!(HttpTransport::builder("https://localhost:1").tls_root_certificate_pem("nope").build().is_err());
    assert!(HttpTransport::builder("https://localhost:1").tls_client_identity_pem(b"x", b"y").build().is_err());
    let custom = reqwest::Client::new();
    let both = HttpTransport::builder("https://localhost:1").http_client(custom).tls_root_certificate_pem(ca.pem());
    assert!(both.build().is_err());
}
