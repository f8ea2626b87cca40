//! The kit as a certifier (issue 19): delegates written from the RFC, each broken in exactly one way a single probe
//! per rule would miss, are failed on the requirement they break; RFC-valid variants pass with no warning; a
//! failure blocks what depends on it instead of cascading; a hung delegate costs the run's deadline, not a timeout
//! per check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::common::{Break, Setup, config, explain, start};
use ldp_conformance::{Format, Report, Status, TransportKind, Verdict};
use ldp_types::signing::SignatureAlgorithm;

async fn run(setup: Setup) -> Report {
    let server = start(setup).await;
    ldp_conformance::run(config(&server, &[TransportKind::Http])).await.expect("the kit runs")
}

/// `id` fails, and so does nothing else that passes against the good server, except `also`.
fn assert_fails_only(report: &Report, id: &str, also: &[&str]) {
    let r = report.requirement(id).unwrap_or_else(|| panic!("{id} not in the report"));
    assert_eq!(r.status, Status::Fail, "{id} should fail: {:?}\nall:\n{}", r.details, explain(report));
    for other in &report.requirements {
        if other.id != id && !also.contains(&other.id.as_str()) {
            assert!(
                matches!(other.outcome, Verdict::Pass | Verdict::Skipped),
                "only {id} should fail, but {} is {}: {:?}",
                other.id,
                other.status.as_str(),
                other.details
            );
        }
    }
}

fn signed(b: Break, alg: SignatureAlgorithm) -> Setup {
    Setup { signing: Some(alg), ..Setup::broken(b) }
}

// ---- class 1: signatures and replay ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_task_that_runs_twice_is_caught_though_replayed_proposals_are_refused() {
    let report = run(signed(Break::ReplayGuardOnProposeOnly, SignatureAlgorithm::HmacSha256Jcs)).await;
    assert_fails_only(&report, "LDP-SEC-003", &[]);
    let details = &report.requirement("LDP-SEC-003").unwrap().details;
    assert!(details.iter().any(|d| d.contains("replayed TASK_SUBMIT") && d.contains("FAIL")), "{details:?}");
    assert!(details.iter().any(|d| d.contains("replayed SESSION_PROPOSE") && d.contains("PASS")), "{details:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signing_algorithm_passes_the_signature_probes() {
    // The good server under each algorithm: the downgrade, tamper, empty and malformed probes are refused, the
    // replays and stale timestamps too, and unsigned messages of every type.
    for alg in SignatureAlgorithm::ALL {
        let report = run(Setup { signing: Some(alg), ..Setup::good() }).await;
        let bad: Vec<_> =
            report.requirements.iter().filter(|r| !matches!(r.outcome, Verdict::Pass | Verdict::Skipped)).collect();
        assert!(bad.is_empty(), "{alg}:\n{}", explain(&report));
        for id in ["LDP-SEC-002", "LDP-SEC-003", "LDP-SEC-004"] {
            let r = report.requirement(id).unwrap();
            let probes = r.details.iter().filter(|d| d.contains(" PASS: ")).count();
            assert!(probes >= 3, "{alg} {id}: {:?}", r.details);
        }
    }
}

// ---- class 2: session enforcement ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_uuid_session_id_that_runs_is_caught() {
    let report = run(Setup::broken(Break::AcceptsRandomUuidSessions)).await;
    // The task runs in another session, so its provenance names that one (LDP-PROV-004) too.
    assert_fails_only(&report, "LDP-SESS-002", &["LDP-PROV-004"]);
    let r = report.requirement("LDP-SESS-002").unwrap();
    assert!(r.details.iter().any(|d| d.contains("well-formed UUID") && d.contains("FAIL")), "{:?}", r.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_endpoint_that_ignores_sessions_is_caught() {
    let report = run(Setup::broken(Break::StreamIgnoresSessions)).await;
    assert_fails_only(&report, "LDP-SESS-002", &["LDP-PROV-004"]);
    let r = report.requirement("LDP-SESS-002").unwrap();
    assert!(r.details.iter().any(|d| d.contains("/ldp/stream") && d.contains("FAIL")), "{:?}", r.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_rule_broken_over_websocket_only_is_caught_there() {
    let server = start(Setup::broken(Break::WsIgnoresSessions)).await;
    let report = ldp_conformance::run(config(&server, &[TransportKind::Http, TransportKind::Ws])).await.unwrap();
    let r = report.requirement("LDP-SESS-002").unwrap();
    assert_eq!(r.status, Status::Fail, "{:?}", r.details);
    assert_eq!(r.transports[&TransportKind::Http], Status::Pass, "{:?}", r.details);
    assert_eq!(r.transports[&TransportKind::Ws], Status::Fail, "{:?}", r.details);
    assert_fails_only(&report, "LDP-SESS-002", &["LDP-PROV-004"]);
}

// ---- class 3: correlation --------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_for_another_task_is_caught() {
    let report = run(Setup::broken(Break::WrongResultTaskId)).await;
    assert_fails_only(&report, "LDP-CORR-001", &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_reusing_the_request_message_id_is_caught() {
    let report = run(Setup::broken(Break::EchoRequestMessageId)).await;
    // Two replies to the same request then share an id too: LDP-ENV-003 sees that.
    assert_fails_only(&report, "LDP-CORR-002", &["LDP-ENV-003"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_accept_naming_two_sessions_is_caught() {
    let report = run(Setup::broken(Break::AcceptSessionMismatch)).await;
    assert_fails_only(&report, "LDP-CORR-003", &[]);
    assert_eq!(report.requirement("LDP-CORR-003").unwrap().outcome, Verdict::Warning);
}

// ---- class 4: negotiation --------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_whose_preference_wins_is_caught() {
    let report = run(Setup::broken(Break::ResponderPreferenceWins)).await;
    assert_fails_only(&report, "LDP-NEG-001", &[]);
    let r = report.requirement("LDP-NEG-001").unwrap();
    assert!(r.details.iter().any(|d| d.contains("initiator") && d.contains("FAIL")), "{:?}", r.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_disagrees_with_the_card_is_caught() {
    let report = run(Setup::broken(Break::ManifestDisagrees)).await;
    assert_fails_only(&report, "LDP-MSG-008", &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signature_shortcut_is_caught_by_its_own_probe() {
    let cases = [
        (Break::AcceptsStaleTimestamps, "LDP-SEC-003", "timestamped an hour old"),
        (Break::AcceptsOtherAlgorithm, "LDP-SEC-002", "signed with"),
        (Break::AcceptsTamperedMessages, "LDP-SEC-002", "changed after signing"),
        (Break::AcceptsUnsignedClose, "LDP-SEC-004", "an unsigned SESSION_CLOSE"),
        (Break::AcceptsUnsignedStatusQuery, "LDP-SEC-004", "an unsigned TASK_UPDATE"),
    ];
    for (broken, id, probe) in cases {
        let report = run(signed(broken, SignatureAlgorithm::HmacSha256Jcs)).await;
        assert_fails_only(&report, id, &[]);
        let details = &report.requirement(id).unwrap().details;
        assert!(details.iter().any(|d| d.contains(probe) && d.contains("FAIL")), "{broken:?}: {details:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_manifest_is_caught() {
    let report = run(Setup::broken(Break::ManifestEmpty)).await;
    assert_fails_only(&report, "LDP-MSG-008", &["LDP-MSG-001"]);
    assert_eq!(report.requirement("LDP-MSG-001").unwrap().status, Status::Fail, "{}", explain(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_left_off_one_endpoint_is_caught() {
    for (broken, endpoint) in [(Break::StreamWithoutAuth, "/ldp/stream"), (Break::WsWithoutAuth, "/ldp/ws")] {
        let report = run(Setup::broken(broken)).await;
        assert_fails_only(&report, "LDP-AUTH-001", &[]);
        let details = &report.requirement("LDP-AUTH-001").unwrap().details;
        assert!(details.iter().any(|d| d.contains(endpoint)), "{broken:?}: {details:?}");
    }
}

// ---- class 5: trust --------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suffix_match_of_the_required_domain_is_caught() {
    let report = run(Setup::broken(Break::SuffixDomainMatch)).await;
    assert_fails_only(&report, "LDP-TRUST-001", &[]);
    let r = report.requirement("LDP-TRUST-001").unwrap();
    assert!(r.details.iter().any(|d| d.contains("ending in") && d.contains("FAIL")), "{:?}", r.details);
}

// ---- class 6: validation, not lenient decoding ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_the_liberal_decoder_would_accept_is_judged_by_the_rfc_schema() {
    let cases = [
        (Break::CardTrustDomainString, "/trust_domain"),
        (Break::CardEndpointNotUrl, "/endpoint"),
        (Break::CardUnknownPayloadMode, "/supported_payload_modes"),
    ];
    for (broken, path) in cases {
        let report = run(Setup::broken(broken)).await;
        let r = report.requirement("LDP-IDENT-002").unwrap();
        assert_eq!(r.status, Status::Fail, "{broken:?}: {:?}", r.details);
        assert!(r.details.iter().any(|d| d.contains(path)), "{broken:?}: {:?}", r.details);
        if broken != Break::CardUnknownPayloadMode {
            // The rest of the card still decodes: nothing else is charged for it.
            assert_fails_only(&report, "LDP-IDENT-002", &[]);
        }
    }
}

// ---- class 9: severities argued from the RFC ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_false_payload_mode_used_is_a_must_failure() {
    let report = run(Setup::broken(Break::FalseModeUsed)).await;
    // A frame task that fell back transparently is also judged by its mode: LDP-FALLBACK-001 sees the false mode.
    assert_fails_only(&report, "LDP-PROV-005", &["LDP-FALLBACK-001", "LDP-NEG-003"]);
    assert_eq!(report.requirement("LDP-PROV-005").unwrap().outcome, Verdict::Failure);
    assert!(!report.passed());
}

// ---- class 7: HTTP semantics -----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_that_are_not_application_json_are_caught() {
    let report = run(Setup::broken(Break::TextPlainRefusals)).await;
    assert_fails_only(&report, "LDP-HTTP-001", &[]);
    let r = report.requirement("LDP-HTTP-001").unwrap();
    assert!(r.details.iter().any(|d| d.contains("HTTP 4")), "{:?}", r.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_under_http_500_fails_the_message_checks() {
    let report = run(Setup::broken(Break::ResultUnder500)).await;
    for id in ["LDP-MSG-003", "LDP-SESS-001"] {
        assert_eq!(report.requirement(id).unwrap().status, Status::Fail, "{id}:\n{}", explain(&report));
    }
    let r = report.requirement("LDP-MSG-003").unwrap();
    assert!(r.details.iter().any(|d| d.contains("HTTP 500")), "{:?}", r.details);
}

// ---- RFC-valid variants ----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc_valid_variants_pass_without_a_warning() {
    let server = start(Setup::broken(Break::RfcValidVariants)).await;
    let report = ldp_conformance::run(config(&server, &[TransportKind::Http, TransportKind::Ws])).await.unwrap();
    let bad: Vec<_> =
        report.requirements.iter().filter(|r| !matches!(r.outcome, Verdict::Pass | Verdict::Skipped)).collect();
    assert!(bad.is_empty(), "RFC-valid variants must pass:\n{}", explain(&report));
    let stream = report.requirement("LDP-HTTP-002").unwrap();
    assert_eq!(stream.status, Status::Pass, "{:?}", stream.details);
}

// ---- class 8: reporting ----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_session_establishment_blocks_instead_of_cascading() {
    let report = run(Setup::broken(Break::RejectAllSessions)).await;
    assert_eq!(report.requirement("LDP-SESS-001").unwrap().status, Status::Fail, "{}", explain(&report));
    for id in ["LDP-SESS-003", "LDP-MSG-004", "LDP-MSG-006", "LDP-PROV-001", "LDP-SESS-005"] {
        let r = report.requirement(id).unwrap();
        assert_eq!((r.status, r.outcome), (Status::Blocked, Verdict::Blocked), "{id}: {:?}", r.details);
        assert_eq!(r.blocked_by, vec!["LDP-SESS-001".to_owned()], "{id}");
    }
    assert!(report.summary.blocked >= 5, "{:?}", report.summary);
    assert!(!report.passed());
    let junit = report.render(Format::Junit);
    assert!(junit.contains("BLOCKED by LDP-SESS-001"), "{junit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_delegate_costs_the_run_deadline_not_a_timeout_per_check() {
    let server = start(Setup::broken(Break::HangMessages)).await;
    let mut cfg = config(&server, &[TransportKind::Http]);
    cfg.request_timeout = Duration::from_secs(1);
    cfg.deadline = Duration::from_secs(4);
    let started = Instant::now();
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    let elapsed = started.elapsed();
    // Every check would take at least a second per request without the deadline: about 40 checks.
    assert!(elapsed < Duration::from_secs(15), "the run took {elapsed:?}");
    assert!(!report.passed());
    let not_run = report
        .requirements
        .iter()
        .filter(|r| r.details.iter().any(|d| d.contains("deadline")))
        .map(|r| r.id.as_str())
        .collect::<Vec<_>>();
    assert!(not_run.contains(&"LDP-SESS-004"), "{not_run:?}\n{}", explain(&report));
    // The card was still judged.
    assert_eq!(report.requirement("LDP-IDENT-001").unwrap().status, Status::Pass);
}
