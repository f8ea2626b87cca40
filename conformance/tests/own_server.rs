//! The kit against our own implementation: `ldp-transport-http`'s server with `ldp-transport-ws`'s `/ldp/ws` merged
//! in, around a real `DelegateRuntime` with an echo delegate, bearer tokens, and (in the second test) signatures.
//! Every MUST and SHOULD passes over both transports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{DOMAIN, TOKEN, UNTRUSTED_TOKEN, card, explain, key};
use ldp_conformance::{Config, KIT_DELEGATE_ID, LevelFilter, Outcome, Report, Status, TransportKind, UNTRUSTED_DOMAIN};
use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{AuthenticatedPeer, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TrustPolicy};
use ldp_transport_http::{HttpServerConfig, HttpState, router_with, serve_router};
use ldp_transport_ws::{WsServer, WsServerConfig};
use ldp_types::signing::SignatureAlgorithm;

struct Server {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.join).await;
    }
}

async fn start(signing: Option<SignatureAlgorithm>) -> Server {
    let mut cfg = ResponderConfig::new(card());
    cfg.trust = TrustPolicy::strict();
    if let Some(alg) = signing {
        cfg.security = SecurityConfig::symmetric(key(alg));
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let mut tokens = HashMap::new();
    tokens.insert(
        TOKEN.to_owned(),
        AuthenticatedPeer { delegate_id: Some(KIT_DELEGATE_ID.into()), trust_domain: DOMAIN.into() },
    );
    tokens.insert(
        UNTRUSTED_TOKEN.to_owned(),
        AuthenticatedPeer { delegate_id: None, trust_domain: UNTRUSTED_DOMAIN.into() },
    );
    let state = HttpState::new(runtime.clone(), HttpServerConfig { tokens, ..HttpServerConfig::default() });
    let ws = WsServer::new(runtime.clone(), WsServerConfig::default());
    let app = router_with(state, ws.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let join = tokio::spawn(serve_router(listener, runtime, app, async move {
        let _ = stopped.await;
    }));
    Server { url, stop: Some(stop), join }
}

async fn run(server: &Server, signing: Option<SignatureAlgorithm>) -> Report {
    let mut cfg = Config::new(server.url.clone());
    cfg.transports = vec![TransportKind::Http, TransportKind::Ws];
    cfg.token = Some(TOKEN.into());
    cfg.untrusted_token = Some(UNTRUSTED_TOKEN.into());
    cfg.signing = signing.map(key);
    cfg.ttl_hint = Some(1);
    cfg.level = LevelFilter::Should;
    cfg.oversize_bytes = 2 * 1024 * 1024;
    ldp_conformance::run(cfg).await.expect("the kit runs")
}

fn assert_all_pass(report: &Report) {
    let bad: Vec<_> =
        report.requirements.iter().filter(|r| !matches!(r.outcome, Outcome::Pass | Outcome::Skipped)).collect();
    assert!(bad.is_empty(), "our server must pass every MUST and SHOULD it claims:\n{}", explain(report));
    assert!(report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_server_passes_every_must_and_should_over_http_and_ws() {
    let server = start(None).await;
    let report = run(&server, None).await;
    assert_all_pass(&report);
    // Only what it does not claim is skipped: signatures (unsigned server).
    let skipped: Vec<&str> =
        report.requirements.iter().filter(|r| r.status == Status::Skipped).map(|r| r.id.as_str()).collect();
    assert!(skipped.iter().all(|id| id.starts_with("LDP-SEC-")), "{skipped:?}");
    for r in report.requirements.iter().filter(|r| r.status == Status::Pass) {
        assert_eq!(r.transports.len(), 2, "{}", r.id);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_signing_server_passes_everything_and_meets_every_profile() {
    let alg = SignatureAlgorithm::HmacSha256Jcs;
    let server = start(Some(alg)).await;
    let report = run(&server, Some(alg)).await;
    assert_all_pass(&report);
    for id in ["LDP-SEC-001", "LDP-SEC-002", "LDP-SEC-003", "LDP-SEC-004"] {
        assert_eq!(report.requirement(id).unwrap().status, Status::Pass, "{id}");
    }
    assert!(report.profiles.iter().all(|p| p.met), "{:?}", report.profiles);
    server.stop().await;
}
