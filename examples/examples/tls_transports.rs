//! Run with: cargo run -p ldp-examples --example tls_transports
//!
//! One delegate served over TLS on both bindings (`https://` for `/ldp/messages`, `wss://` for `/ldp/ws`), with a
//! certificate from a private CA made on the spot (`ldp_transport_http::test_pki`). One `ConnectOptions` that trusts
//! that CA configures both clients: the same task goes over HTTP and over WebSocket. The conformance kit takes the same
//! settings from the command line: `ldp conformance https://... --ca-cert ca.pem`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate, Transport};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::test_pki::TestCa;
use ldp_transport_http::{
    ConnectOptions, ConnectSettings, HttpServerConfig, HttpState, HttpTransport, RetryPolicy, ServerTlsConfig,
    serve_router_tls,
};
use ldp_transport_ws::{WsServer, WsServerConfig, WsTransport};
use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, SessionConfig};
use serde_json::json;

/// HELLO, a session, one echo task, SESSION_CLOSE; prints what came back.
async fn round_trip<T: Transport>(binding: &str, transport: T) -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = InitiatorConfig::new("ldp:delegate:tls-example");
    cfg.trust_domain = Some("default".into());
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await?;
    let session = client.propose(SessionConfig::default()).await?;
    let outcome = client.submit(&session.session_id, "echo", json!(format!("hello over {binding}")), None).await?;
    println!("{binding}: {} (produced by {})", outcome.output, outcome.provenance.produced_by);
    client.close(&session.session_id).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A private CA and a server certificate for localhost / 127.0.0.1.
    let ca = TestCa::new("example CA")?;
    let cert = ca.server_cert()?;

    // The delegate: one runtime behind both bindings, merged into one router and served over TLS.
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo")?, "Echo", "echo", "1.0");
    card.capabilities.push(Capability::new("echo"));
    card.supported_payload_modes = vec![PayloadMode::Text];
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let http = HttpState::new(runtime.clone(), HttpServerConfig::default());
    let ws = WsServer::new(runtime.clone(), WsServerConfig::default());
    let app = ldp_transport_http::router(http).merge(ws.router());
    let tls = ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), None)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("https://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_router_tls(listener, runtime, app, tls, async move {
        let _ = stopped.await;
    }));
    println!("delegate listening on {url} and {}/ldp/ws", url.replacen("https", "wss", 1));

    // One set of client options for both transports.
    let trusting = ConnectOptions::new().tls_root_certificate_pem(ca.pem());
    round_trip("https", HttpTransport::with_options(&url, trusting.clone())?).await?;
    round_trip("wss", WsTransport::connect(&url, trusting).await?).await?;

    // Without the CA, the handshake is refused: the web PKI roots do not know it.
    let untrusting = HttpTransport::with_options(&url, ConnectOptions::new().retry(RetryPolicy::none()))?;
    match untrusting.identity().await {
        Ok(_) => println!("unexpected: a client without the CA connected"),
        Err(e) => println!("without the CA: {e}"),
    }

    let _ = stop.send(());
    server.await??;
    Ok(())
}
