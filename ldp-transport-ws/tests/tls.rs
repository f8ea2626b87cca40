//! `wss://`: the HTTP router with `/ldp/ws` merged in, served over TLS and mutual TLS by the HTTP crate's
//! `serve_router_tls`, with certificates made by rcgen for each test; a full flow through `Client<WsTransport>`,
//! and clients that do not trust the server (or are not trusted) failing with typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{TestDelegate, runtime};
use ldp_session::runtime::{Client, Transport};
use ldp_session::{AuthenticatedPeer, InitiatorConfig, SeededIds, SystemClock};
use ldp_transport_http::test_pki::TestCa;
use ldp_transport_http::{ClientAuth, HttpServerConfig, HttpState, ServerTlsConfig, serve_router_tls};
use ldp_transport_ws::{ConnectSettings, Error, RetryPolicy, WsOptions, WsServer, WsServerConfig, WsTransport};
use ldp_types::{ErrorCategory, SessionConfig};
use serde_json::json;
use tokio::net::TcpListener;

/// Both bindings on one TLS port; stops when the sender is dropped.
async fn serve_tls(ca: &TestCa, client_auth: Option<ClientAuth>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let rt = runtime(Arc::new(TestDelegate::default()));
    let http = HttpState::new(rt.clone(), HttpServerConfig { tokens: HashMap::new(), ..Default::default() });
    let ws = WsServer::new(rt.clone(), WsServerConfig::default());
    let app = ldp_transport_http::router(http).merge(ws.router());
    let cert = ca.server_cert().unwrap();
    let tls = ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), client_auth)
        .unwrap()
        .with_handshake_timeout(Duration::from_secs(2));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_router_tls(listener, rt, app, tls, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

fn options() -> WsOptions {
    WsOptions::default().retry(RetryPolicy::none()).connect_timeout(Duration::from_secs(5))
}

/// HELLO (identity card over https), SESSION_PROPOSE, TASK_SUBMIT, SESSION_CLOSE over `wss://`.
async fn full_flow(transport: WsTransport) {
    let cfg = InitiatorConfig::new("ldp:delegate:client");
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await;
    let client = client.unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let out = client.submit(&session.session_id, "echo", json!("over wss"), None).await.unwrap();
    assert_eq!(out.output, json!({ "echo": "over wss" }));
    client.close(&session.session_id).await.unwrap();
}

fn assert_handshake_refused(result: Result<WsTransport, Error>) {
    match result {
        Err(Error::Connect(e)) => {
            assert_eq!(e.category, ErrorCategory::Transport, "{e:?}");
            assert!(!e.retryable, "{e:?}");
        }
        Err(other) => panic!("expected a connection error, got {other:?}"),
        Ok(_) => panic!("the TLS handshake must fail"),
    }
}

#[tokio::test]
async fn full_flow_over_wss_with_a_private_ca() {
    let ca = TestCa::new("test CA").unwrap();
    let (addr, _stop) = serve_tls(&ca, None).await;
    for url in [format!("wss://127.0.0.1:{}/ldp/ws", addr.port()), format!("https://localhost:{}", addr.port())] {
        let transport = WsTransport::connect(&url, options().tls_root_certificate_pem(ca.pem())).await.unwrap();
        assert!(transport.url().starts_with("wss://"), "{}", transport.url());
        assert_eq!(transport.identity().await.unwrap().delegate_id.as_str(), "ldp:delegate:test");
        full_flow(transport).await;
    }
    // A client that does not trust the CA (web PKI roots only), or trusts another one, refuses the server.
    let url = format!("wss://localhost:{}", addr.port());
    assert_handshake_refused(WsTransport::connect(&url, options()).await);
    let other = TestCa::new("another CA").unwrap();
    assert_handshake_refused(WsTransport::connect(&url, options().tls_root_certificate_pem(other.pem())).await);
}

#[tokio::test]
async fn mutual_tls_over_wss() {
    let ca = TestCa::new("test CA").unwrap();
    let auth = ClientAuth::from_ca_pem(ca.pem().as_bytes()).unwrap().peer(
        "dns:client.example".parse().unwrap(),
        AuthenticatedPeer { delegate_id: None, trust_domain: "default".into() },
    );
    let (addr, _stop) = serve_tls(&ca, Some(auth)).await;
    let url = format!("wss://localhost:{}", addr.port());
    let id = ca.client_cert("client.example").unwrap();
    let opts = options()
        .tls_root_certificate_pem(ca.pem())
        .tls_client_identity_pem(id.cert_pem.as_bytes(), id.key_pem.as_bytes());
    full_flow(WsTransport::connect(&url, opts).await.unwrap()).await;

    // No certificate, or one from another CA: refused at the handshake (TLS 1.3 reports it on the first read,
    // which for WebSocket is the upgrade response, so the connect itself fails).
    let refused = WsTransport::connect(&url, options().tls_root_certificate_pem(ca.pem())).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
    let stranger = TestCa::new("another CA").unwrap().client_cert("client.example").unwrap();
    let opts = options()
        .tls_root_certificate_pem(ca.pem())
        .tls_client_identity_pem(stranger.cert_pem.as_bytes(), stranger.key_pem.as_bytes());
    let refused = WsTransport::connect(&url, opts).await;
    assert!(matches!(refused, Err(Error::Connect(_))), "{refused:?}");
}

#[tokio::test]
async fn bad_pem_is_a_typed_error() {
    for opts in [
        options().tls_root_certificate_pem("not a certificate"),
        options().tls_client_identity_pem(b"garbage", b"garbage"),
        options().tls_client_identity_pem(TestCa::new("x").unwrap().pem().as_bytes(), b"no key here"),
    ] {
        let result = WsTransport::connect("wss://localhost:1", opts).await;
        assert!(matches!(result, Err(Error::Tls(_))), "{result:?}");
    }
}
