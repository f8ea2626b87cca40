//! `ldp serve` as a process: the Python reference SDK's `LdpClient` (`scripts/ref_client.py`) runs discover,
//! session, submit and close against it (unsigned and with `--sign hmac-sha256`), bearer tokens refuse anonymous
//! requests, bad flags fail cleanly, and SIGTERM stops it with exit status 0. Never skips: if the SDK cannot be
//! installed the test fails with the installer's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::serve;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn python_client(url: &str, extra: &[&str]) -> Value {
    let py = Command::new("bash").arg(repo().join("scripts/ref-sdk.sh")).stderr(Stdio::inherit()).output().unwrap();
    assert!(py.status.success(), "scripts/ref-sdk.sh could not install the Python reference SDK (see stderr)");
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    let out = Command::new(py).arg(repo().join("scripts/ref_client.py")).arg(url).args(extra).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("no JSON report ({e}): {stdout}"))
}

fn assert_ok(report: &Value) {
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["steps"]["submit_task"]["output"], serde_json::json!({"echo": {"text": "hello"}}));
    assert_eq!(report["steps"]["establish_session"]["propose_reply_type"], "SESSION_ACCEPT");
    assert_eq!(report["steps"]["close_session"]["reply_type"], "SESSION_CLOSE");
}

#[test]
fn the_python_client_works_against_ldp_serve() {
    let (_server, url) = serve(&[], Stdio::piped());
    assert_ok(&python_client(&url, &[]));
    assert_ok(&python_client(&url, &["--discover", "wellknown"]));
}

#[test]
fn the_python_client_works_against_ldp_serve_signed() {
    let (_server, url) = serve(&["--sign", "hmac-sha256", "--secret", "cli-secret"], Stdio::piped());
    let report = python_client(&url, &["--secret", "cli-secret", "--require-signed-responses"]);
    assert_ok(&report);
    let report = python_client(&url, &["--secret", "wrong"]);
    assert_eq!(report["ok"], false, "{report:#}");
}

#[test]
fn tokens_refuse_anonymous_requests_and_domains_are_checked() {
    let (_server, url) =
        serve(&["--trust-domain", "lab", "--trusted-peer", "partners", "--token", "t1=lab"], Stdio::piped());
    // The Python client cannot send tokens: discovery (public) works, HELLO is refused.
    let report = python_client(&url, &["--trust-domain", "lab"]);
    assert_eq!(report["failed_step"], "establish_session", "{report:#}");
    assert!(report["http"].as_array().unwrap().iter().any(|h| h["status"] == 401), "{report:#}");
}

#[test]
fn bad_flags_fail_cleanly() {
    for args in [
        &["--sign", "rot13", "--secret", "x"][..],
        &["--token", "no-domain"],
        &["--delegate-id", "not-an-id"],
        &["--card", "/nonexistent/card.json"],
        &["--bind", "256.0.0.1:1"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ldp")).arg("serve").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}

#[cfg(unix)]
#[test]
fn sigterm_stops_it_cleanly() {
    let (mut server, _url) = serve(&[], Stdio::piped());
    let pid = server.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    server.0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains("stopped"), "{stderr}");
}

/// docs/interop.md: "we send only the seven categories to Python peers". Under `--sign hmac-sha256`, a bad signature
/// is refused (401) with a TASK_FAILED whose error the Python SDK's `LdpEnvelope` must be able to read: category
/// `identity` (the paper's "authentication or identity mismatch"), not this implementation's `security`.
#[test]
fn a_bad_signature_refusal_is_readable_by_the_python_sdk() {
    let (_server, url) = serve(&["--sign", "hmac-sha256", "--secret", "cli-secret"], Stdio::piped());
    let report = python_client(&url, &["--secret", "wrong"]);
    assert_eq!(report["ok"], false, "{report:#}");
    let refusal = report["http"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["status"] == 401)
        .unwrap_or_else(|| panic!("no 401: {report:#}"))["response_json"]
        .clone();
    let error = &refusal["body"]["error"];
    assert_eq!(error["category"], "identity", "{refusal:#}");
    assert_eq!(error["code"], "SIGNATURE_INVALID", "{refusal:#}");
    // The SDK's own model reads the refusal.
    let py = Command::new("bash").arg(repo().join("scripts/ref-sdk.sh")).stderr(Stdio::inherit()).output().unwrap();
    assert!(py.status.success(), "scripts/ref-sdk.sh could not install the Python reference SDK (see stderr)");
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    let mut child = Command::new(py)
        .args([
            "-c",
            "import json, sys\nfrom ldp_protocol import LdpEnvelope\n\
                      e = LdpEnvelope.model_validate(json.load(sys.stdin))\nprint(e.body.error.category.value)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), refusal.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the Python SDK cannot read the refusal: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("identity"), "{}", String::from_utf8_lossy(&out.stdout));
}
