//! The kit tests itself: a correct server passes everything it claims, and each deliberately broken delegate is
//! caught by exactly the check meant for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Break, Setup, config, explain, start};
use ldp_conformance::{Report, Status, TransportKind, Verdict};
use ldp_types::signing::SignatureAlgorithm;

async fn run(setup: Setup, transports: &[TransportKind]) -> Report {
    let server = start(setup).await;
    ldp_conformance::run(config(&server, transports)).await.expect("the kit runs")
}

fn assert_clean(report: &Report) {
    let bad: Vec<_> =
        report.requirements.iter().filter(|r| !matches!(r.outcome, Verdict::Pass | Verdict::Skipped)).collect();
    assert!(bad.is_empty(), "expected every requirement to pass:\n{}", explain(report));
}

fn assert_fails(report: &Report, id: &str) {
    let r = report.requirement(id).unwrap_or_else(|| panic!("{id} not in the report"));
    assert_eq!(
        r.status,
        Status::Fail,
        "{id} should fail but is {:?}: {:?}\nall:\n{}",
        r.status,
        r.details,
        explain(report)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_server_passes_everything_over_http_and_ws() {
    let report = run(Setup::good(), &[TransportKind::Http, TransportKind::Ws]).await;
    assert_clean(&report);
    // Unsigned: signing is not claimed, so its requirements are skipped and profile A is not met.
    assert_eq!(report.requirement("LDP-SEC-001").unwrap().status, Status::Skipped);
    assert!(!report.profiles[0].met);
    // Our HTTP binding serves /ldp/stream: streaming is claimed by behaviour and passes (on HTTP; WS skips it).
    let stream = report.requirement("LDP-HTTP-002").unwrap();
    assert_eq!(stream.status, Status::Pass, "{:?}", stream.details);
    assert!(report.claims.has(ldp_conformance::Feature::Streaming));
    for r in &report.requirements {
        if r.status == Status::Pass {
            assert!(r.transports.values().all(|s| *s == Status::Pass || *s == Status::Skipped), "{}", r.id);
        }
    }
    let json = report.render(ldp_conformance::Format::Json);
    assert!(json.contains("\"evidence\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_signing_server_meets_every_profile() {
    let setup = Setup { signing: Some(SignatureAlgorithm::HmacSha256Jcs), ..Setup::good() };
    let report = run(setup, &[TransportKind::Http]).await;
    assert_clean(&report);
    assert_eq!(report.requirement("LDP-SEC-003").unwrap().status, Status::Pass);
    assert!(report.profiles.iter().all(|p| p.met), "{:?}", report.profiles);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_payload_fallback_passes_too() {
    let setup = Setup { explicit_fallback: true, ..Setup::good() };
    let report = run(setup, &[TransportKind::Http]).await;
    assert_clean(&report);
    let details = &report.requirement("LDP-FALLBACK-001").unwrap().details;
    assert!(details.iter().any(|d| d.contains("PAYLOAD_MODE_FAILED")), "{details:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_provenance_is_caught() {
    let report = run(Setup::broken(Break::StripProvenance), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-PROV-001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_identity_path_is_caught() {
    let report = run(Setup::broken(Break::WrongIdentityPath), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-IDENT-001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_untrusted_domains_is_caught() {
    let report = run(Setup::broken(Break::AcceptUntrustedDomains), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-TRUST-002");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_on_malformed_json_is_caught() {
    let report = run(Setup::broken(Break::CrashOnMalformedJson), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-ROBUST-001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_replay_is_caught() {
    let setup = Setup { signing: Some(SignatureAlgorithm::HmacSha256Jcs), ..Setup::broken(Break::IgnoreReplay) };
    let report = run(setup, &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-SEC-003");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_the_result_is_caught() {
    let report = run(Setup::broken(Break::StreamWithoutResult), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-HTTP-002");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_streaming_without_the_endpoint_is_caught() {
    let report = run(Setup::broken(Break::ClaimsStreamingWithoutEndpoint), &[TransportKind::Http]).await;
    assert_fails(&report, "LDP-HTTP-002");
    let r = report.requirement("LDP-HTTP-002").unwrap();
    assert!(r.details.iter().any(|d| d.contains("404")), "{:?}", r.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_only_run_does_not_judge_the_http_binding() {
    // Even with streaming claimed on the card, the HTTP requirements are not applicable to a WebSocket-only run.
    let report = run(Setup::broken(Break::ClaimsStreamingWithoutEndpoint), &[TransportKind::Ws]).await;
    for id in ["LDP-HTTP-001", "LDP-HTTP-002"] {
        let r = report.requirement(id).unwrap();
        assert_eq!(r.status, Status::Skipped, "{id}: {:?}", r.details);
        assert!(r.details[0].contains("not applicable"), "{id}: {:?}", r.details);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_signing_without_a_secret_is_not_testable() {
    let setup = Setup { signing: Some(SignatureAlgorithm::HmacSha256Jcs), ..Setup::good() };
    let server = start(setup).await;
    let mut cfg = config(&server, &[TransportKind::Http]);
    cfg.signing = None;
    let report = ldp_conformance::run(cfg).await.unwrap();
    let sec = report.requirement("LDP-SEC-001").unwrap();
    assert_eq!(sec.status, Status::NotTestable, "{:?}", sec.details);
    assert_eq!(sec.outcome, Verdict::Failure);
    assert!(!report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = ldp_conformance::run(ldp_conformance::Config::new(url)).await.unwrap_err();
    assert!(matches!(err, ldp_conformance::RunError::Connection { .. }), "{err}");
}
