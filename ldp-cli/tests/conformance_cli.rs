//! `ldp conformance` as a process against `ldp serve` (HTTP and WebSocket on one port, bearer tokens, signed with
//! hmac-sha256-jcs): exit 0 when every required requirement passes, a JSON report with evidence, exit 2 for an
//! unreachable endpoint or a bad flag.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::serve;

fn conformance(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ldp")).arg("conformance").args(args).output().unwrap()
}

#[test]
fn ldp_serve_passes_the_kit_over_http_and_ws() {
    let (_server, url) = serve(
        &[
            "--trust-domain",
            "conformance.test",
            "--token",
            "kit-token=conformance.test",
            "--token",
            "foreign-token=conformance-untrusted.invalid",
            "--sign",
            "hmac-sha256-jcs",
            "--secret",
            "s3cret",
        ],
        Stdio::null(),
    );
    let report = std::env::temp_dir().join(format!("ldp-conformance-cli-{}.json", std::process::id()));
    let out = conformance(&[
        &url,
        "--transport",
        "http",
        "--transport",
        "ws",
        "--token",
        "kit-token",
        "--untrusted-token",
        "foreign-token",
        "--sign",
        "hmac-sha256-jcs",
        "--secret",
        "s3cret",
        "--ttl-hint",
        "1",
        "--format",
        "json",
        "--output",
        report.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let failing: Vec<String> = json["requirements"]
        .as_array()
        .map(|rs| {
            rs.iter().filter(|r| r["outcome"] == "failure").map(|r| format!("{} {}", r["id"], r["details"])).collect()
        })
        .unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "stderr: {}\nfailures: {failing:#?}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["summary"]["failures"], 0);
    assert!(json["requirements"][0]["evidence"][0]["exchanges"].as_array().is_some_and(|e| !e.is_empty()));
}

#[test]
fn unreachable_endpoint_and_bad_flags_exit_2() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = conformance(&[&format!("http://127.0.0.1:{port}"), "--no-progress"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let out = conformance(&["http://127.0.0.1:1", "--sign", "rot13", "--secret", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let out = conformance(&["ftp://example.invalid"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
