//! The conformance kit against the production example's delegate (tokens, TLS, SQLite, rate limit, MCP), over
//! https:// and wss://, signed and unsigned: every MUST and SHOULD it claims passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp::http::ClientTls;
use ldp::types::signing::{SignatureAlgorithm, SigningKey};
use ldp_conformance::{Config, LevelFilter, Report, Status, TransportKind, UNTRUSTED_DOMAIN, Verdict};
use ldp_examples::production::{self, Pki, TOKEN};

const UNTRUSTED_TOKEN: &str = "untrusted-token";

async fn kit_against_production(signed: bool) -> Report {
    let dir = std::env::temp_dir().join(format!("ldp-production-kit-{}-{signed}", std::process::id()));
    let pki = Pki::create(&dir).unwrap();
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "kit-shared-secret").unwrap();
    // The kit also needs a peer of a domain the delegate does not trust.
    let delegate = production::delegate(&pki, signed.then(|| key.clone())).token(UNTRUSTED_TOKEN, UNTRUSTED_DOMAIN);
    let server = delegate.spawn("127.0.0.1:0").await.unwrap();
    assert!(server.url().starts_with("https://"), "{}", server.url());
    let mut cfg = Config::new(server.url());
    cfg.transports = vec![TransportKind::Http, TransportKind::Ws];
    cfg.token = Some(TOKEN.into());
    cfg.untrusted_token = Some(UNTRUSTED_TOKEN.into());
    cfg.signing = signed.then_some(key);
    cfg.ttl_hint = Some(1);
    cfg.level = LevelFilter::Should;
    cfg.oversize_bytes = 2 * 1024 * 1024;
    cfg.tls = ClientTls::new().with_root_certificate_pem(pki.ca_pem.as_str());
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn assert_all_pass(report: &Report) {
    let bad: Vec<String> = report
        .requirements
        .iter()
        .filter(|r| !matches!(r.outcome, Verdict::Pass | Verdict::Skipped))
        .map(|r| format!("{} {:?}: {:?}", r.id, r.outcome, r.details))
        .collect();
    assert!(bad.is_empty(), "the production delegate fails:\n{}", bad.join("\n"));
    assert!(report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_passes_against_the_production_delegate_unsigned() {
    let report = kit_against_production(false).await;
    assert_all_pass(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_passes_against_the_production_delegate_signed() {
    let report = kit_against_production(true).await;
    assert_all_pass(&report);
    for id in ["LDP-SEC-001", "LDP-SEC-002", "LDP-SEC-003", "LDP-SEC-004"] {
        assert_eq!(report.requirement(id).unwrap().status, Status::Pass, "{id}");
    }
}

#[path = "../examples/production.rs"]
mod example;

/// The example as it is: both calls answer over https:// and wss://.
#[test]
fn the_production_example_runs() {
    example::main().expect("the example fails");
}
