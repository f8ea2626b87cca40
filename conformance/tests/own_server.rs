//! The kit against our own implementation: `ldp-transport-http`'s server with `ldp-transport-ws`'s `/ldp/ws` merged
//! in, around a real `DelegateRuntime` with an echo delegate, bearer tokens, and (in the second test) signatures.
//! Every MUST and SHOULD passes over both transports, also over TLS with a private CA (`https://` and `wss://`); a
//! server requiring client certificates is reached with the one it expects and refused without it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::common::{DOMAIN, TOKEN, UNTRUSTED_TOKEN, card, explain, key};
use ldp_conformance::{
    ClientTls, Config, KIT_DELEGATE_ID, LevelFilter, Report, RunError, Status, TransportKind, UNTRUSTED_DOMAIN, Verdict,
};
use ldp_session::runtime::{Delegate, DelegateRuntime, EchoDelegate, TaskContext};
use ldp_session::{AuthenticatedPeer, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TrustPolicy};
use ldp_session::{TaskOutput, TaskRequest};
use ldp_transport_http::test_pki::TestCa;
use ldp_transport_http::{
    ClientAuth, ClientCertMatch, HttpServerConfig, HttpState, ServerTlsConfig, router_with, serve_router,
    serve_router_tls,
};
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
    start_with(signing, None, Arc::new(EchoDelegate)).await
}

/// The server; over TLS with `tls`.
async fn start_with(
    signing: Option<SignatureAlgorithm>,
    tls: Option<ServerTlsConfig>,
    delegate: Arc<dyn Delegate>,
) -> Server {
    let mut cfg = ResponderConfig::new(card());
    cfg.trust = TrustPolicy::strict();
    if let Some(alg) = signing {
        cfg.security = SecurityConfig::symmetric(key(alg));
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, delegate);
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
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let join = match tls {
        Some(tls) => tokio::spawn(serve_router_tls(listener, runtime, app, tls, stopped)),
        None => tokio::spawn(serve_router(listener, runtime, app, stopped)),
    };
    Server { url, stop: Some(stop), join }
}

async fn run(server: &Server, signing: Option<SignatureAlgorithm>) -> Report {
    ldp_conformance::run(config(server, signing)).await.expect("the kit runs")
}

fn config(server: &Server, signing: Option<SignatureAlgorithm>) -> Config {
    let mut cfg = Config::new(server.url.clone());
    cfg.transports = vec![TransportKind::Http, TransportKind::Ws];
    cfg.token = Some(TOKEN.into());
    cfg.untrusted_token = Some(UNTRUSTED_TOKEN.into());
    cfg.signing = signing.map(key);
    cfg.ttl_hint = Some(1);
    cfg.level = LevelFilter::Should;
    cfg.oversize_bytes = 2 * 1024 * 1024;
    cfg
}

fn assert_all_pass(report: &Report) {
    let bad: Vec<_> =
        report.requirements.iter().filter(|r| !matches!(r.outcome, Verdict::Pass | Verdict::Skipped)).collect();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_a_private_ca_every_must_and_should_passes_on_https_and_wss() {
    let ca = TestCa::new("private CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let tls = ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), None).unwrap();
    let server = start_with(None, Some(tls), Arc::new(EchoDelegate)).await;
    assert!(server.url.starts_with("https://"), "{}", server.url);

    // The web PKI roots alone do not reach it: a connection error (exit 2), not a report of failures.
    let err = ldp_conformance::run(config(&server, None)).await.err();
    assert!(matches!(&err, Some(RunError::Connection { .. })), "{err:?}");

    let mut cfg = config(&server, None);
    cfg.tls = ClientTls::new().with_root_certificate_pem(ca.pem());
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    assert_all_pass(&report);
    for r in report.requirements.iter().filter(|r| r.status == Status::Pass) {
        assert_eq!(r.transports.len(), 2, "{}", r.id);
    }
    let evidence = serde_json::to_string(&report).unwrap();
    assert!(evidence.contains("wss://127.0.0.1:"), "the WebSocket probe went over wss://");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_requiring_client_certificates_is_reached_with_the_one_it_expects() {
    let ca = TestCa::new("private CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let kit = ca.client_cert("kit.example").unwrap();
    let peer = AuthenticatedPeer { delegate_id: Some(KIT_DELEGATE_ID.into()), trust_domain: DOMAIN.into() };
    let auth = ClientAuth::from_ca_pem(ca.pem().as_bytes())
        .unwrap()
        .peer(ClientCertMatch::dns_name("kit.example").unwrap(), peer);
    let tls = ServerTlsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), Some(auth)).unwrap();
    let server = start_with(None, Some(tls), Arc::new(EchoDelegate)).await;
    let trusting = || {
        let mut cfg = config(&server, None);
        cfg.level = LevelFilter::Must;
        cfg.untrusted_token = None;
        cfg.tls = ClientTls::new().with_root_certificate_pem(ca.pem());
        cfg
    };

    let err = ldp_conformance::run(trusting()).await.err();
    assert!(matches!(&err, Some(RunError::Connection { .. })), "without a client certificate: {err:?}");

    let mut cfg = trusting();
    cfg.tls = cfg.tls.with_client_identity_pem(kit.cert_pem, kit.key_pem);
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    for id in ["LDP-IDENT-001", "LDP-SESS-001"] {
        let r = report.requirement(id).unwrap();
        assert_eq!(r.status, Status::Pass, "{id}:\n{}", explain(&report));
        assert_eq!(r.transports.len(), 2, "{id}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_is_a_configuration_error() {
    let mut cfg = Config::new("https://127.0.0.1:9");
    cfg.tls = ClientTls::new().with_root_certificate_pem("not a certificate");
    let err = ldp_conformance::run(cfg).await.err();
    assert!(matches!(&err, Some(RunError::Config(m)) if m.contains("root certificate")), "{err:?}");
}

/// Reports progress twice before echoing, so `/ldp/stream` carries TASK_UPDATEs (and WebSocket pushes them).
struct Progressing;

#[async_trait]
impl Delegate for Progressing {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, ldp_types::LdpError> {
        for (i, step) in ["reading", "echoing"].into_iter().enumerate() {
            ctx.progress(Some((i + 1) as f64 / 3.0), step.to_owned());
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        EchoDelegate.execute(task, ctx).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_reporting_progress_streams_its_updates_then_the_result() {
    let server = start_with(None, None, Arc::new(Progressing)).await;
    let report = run(&server, None).await;
    assert_all_pass(&report);
    let stream = report.requirement("LDP-HTTP-002").unwrap();
    assert_eq!(stream.status, Status::Pass, "{:?}", stream.details);
    assert!(
        stream.details.iter().any(|d| d.contains("2 TASK_UPDATE event(s), then the TASK_RESULT")),
        "{:?}",
        stream.details
    );
    server.stop().await;
}
