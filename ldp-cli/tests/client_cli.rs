//! `ldp card` and `ldp call` as processes against real delegates (`ldp serve`, and a delegate of this test that
//! reports progress), over HTTP and WebSocket, plain, streamed, signed and with a bearer token; and the exit statuses
//! every command shares (0 ok, 1 the operation failed, 2 usage error).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::{Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_transport_http::{HttpServerConfig, HttpState};
use ldp_transport_ws::{WsServer, WsServerConfig};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, PayloadMode};
use serde_json::{Value, json};
use support::{TempDir, serve};

fn ldp(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(args).env_remove("LDP_TOKEN").env_remove("LDP_SECRET").env_remove("LDP_TOKENS");
    for (name, value) in env {
        command.env(name, value);
    }
    command.stdin(Stdio::null()).output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON value ({e}): {text}\nstderr: {}", stderr(out)))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn card_prints_the_served_identity_card() {
    let (_server, url) = serve(&["--delegate-id", "ldp:delegate:cli-card", "--trust-domain", "lab"], Stdio::null());
    let out = ldp(&["card", &url, "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let card = stdout_json(&out);
    assert_eq!(card["delegate_id"], "ldp:delegate:cli-card");
    assert_eq!(card["trust_domain"]["name"], "lab");
    let skills: Vec<&str> =
        card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(skills.contains(&"echo"), "{card:#}");

    let out = ldp(&["card", &url], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ldp:delegate:cli-card"), "{text}");
    assert!(text.contains("trust domain lab") && text.contains("echo"), "{text}");

    // The same card over the WebSocket transport.
    let ws_url = url.replacen("http://", "ws://", 1);
    let out = ldp(&["card", &ws_url, "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["delegate_id"], "ldp:delegate:cli-card");
}

#[test]
fn call_runs_a_task_and_prints_output_and_provenance() {
    let (_server, url) = serve(&[], Stdio::null());
    let out = ldp(&["call", &url, "echo", r#"{"text":"hello"}"#, "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = stdout_json(&out);
    assert_eq!(result["output"], json!({"echo": {"text": "hello"}}));
    assert_eq!(result["provenance"]["produced_by"], "ldp:delegate:echo");
    assert!(result["provenance"]["session_id"].as_str().is_some_and(|s| !s.is_empty()), "{result:#}");

    // Text that is not JSON is sent as a string; without --json the output alone goes to stdout.
    let out = ldp(&["call", &url, "echo", "plain words"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), r#"{"echo":"plain words"}"#);
    assert!(stderr(&out).contains("produced by ldp:delegate:echo"), "{}", stderr(&out));

    // Over WebSocket, chosen by the URL or by --transport.
    for args in [
        vec!["call", &url, "echo", "7", "--json", "--transport", "ws"],
        vec!["call", &url.replacen("http://", "ws://", 1), "echo", "7", "--json"],
    ] {
        let out = ldp(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout_json(&out)["output"], json!({"echo": 7}));
    }

    // An unknown skill: exit 1 with the delegate's typed error.
    let out = ldp(&["call", &url, "no-such-skill", "x", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["error"]["code"], "SKILL_NOT_FOUND");
}

#[test]
fn call_with_a_bearer_token_from_the_flag_or_the_environment() {
    let (_server, url) = serve(&["--token", "cli-token=default"], Stdio::null());
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["error"]["code"], "UNAUTHENTICATED");

    let out = ldp(&["call", &url, "echo", "hi", "--json", "--token", "cli-token"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[("LDP_TOKEN", "cli-token")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["output"], json!({"echo": "hi"}));

    // The server's tokens can come from its environment too.
    let (_server, url) = serve_with_env(&[("LDP_TOKENS", "env-token=default,other-token=default")]);
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for token in ["env-token", "other-token"] {
        let out = ldp(&["call", &url, "echo", "hi", "--json", "--token", token], &[]);
        assert_eq!(out.status.code(), Some(0), "{token}: {}", stderr(&out));
    }
}

#[test]
fn call_checks_the_usage_receipt_of_a_server_with_a_receipt_key() {
    let seed = "07".repeat(32);
    let (_server, url) = serve(&["--receipt-key", &seed], Stdio::null());
    let card = stdout_json(&ldp(&["card", &url, "--json"], &[]));
    let public = ldp_types::signing::SigningKey::ed25519_from_hex(&seed).unwrap().verifying_key().public_hex();
    assert_eq!(card["receipt_public_key"].as_str(), public.as_deref(), "{card:#}");
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = stdout_json(&out);
    assert_eq!(result["receipt"], "verified", "{result:#}");
    let receipt = &result["provenance"]["usage_receipt"];
    assert_eq!(receipt["signature_algorithm"], "ed25519-jcs");
    assert_eq!(receipt["session_id"], result["provenance"]["session_id"]);
    let out = ldp(&["call", &url, "echo", "hi"], &[]);
    assert!(stderr(&out).contains("usage receipt: verified"), "{}", stderr(&out));

    // From the environment too; a server without a key sends none, and a bad key is a usage error.
    let (_server, url) = serve_with_env(&[("LDP_RECEIPT_KEY", &seed)]);
    assert_eq!(stdout_json(&ldp(&["call", &url, "echo", "hi", "--json"], &[]))["receipt"], "verified");
    let (_plain, url) = serve(&[], Stdio::null());
    assert_eq!(stdout_json(&ldp(&["call", &url, "echo", "hi", "--json"], &[]))["receipt"], Value::Null);
    let out = Command::new(env!("CARGO_BIN_EXE_ldp")).args(["serve", "--receipt-key", "not-hex"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `ldp serve` with extra environment variables, as `support::serve` starts it.
fn serve_with_env(env: &[(&str, &str)]) -> (support::Guard, String) {
    use std::io::{BufRead, BufReader};
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(["serve", "--bind", "127.0.0.1:0"]).stdout(Stdio::piped()).stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let guard = support::Guard(child);
    let url = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("ldp serve: listening on ").map(|r| r.split_whitespace().next().unwrap().to_owned())
        })
        .expect("ldp serve printed no URL");
    (guard, url)
}

#[test]
fn call_signed_with_the_secret_from_the_environment() {
    let (_server, url) = serve(&["--sign", "hmac-sha256-jcs", "--secret", "cli-secret"], Stdio::null());
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["error"]["code"], "SIGNATURE_REQUIRED");

    let out =
        ldp(&["call", &url, "echo", "hi", "--json", "--sign", "hmac-sha256-jcs"], &[("LDP_SECRET", "cli-secret")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["output"], json!({"echo": "hi"}));

    let out = ldp(&["call", &url, "echo", "hi", "--json", "--sign", "hmac-sha256-jcs", "--secret", "wrong"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let code = stdout_json(&out)["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert!(code.starts_with("SIGNATURE_"), "{code}");
}

/// Reports three steps of progress, then answers.
struct Stepper;

#[async_trait]
impl Delegate for Stepper {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        for step in 1..=3 {
            ctx.progress(Some(f64::from(step) / 4.0), Some(format!("step {step}")));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(TaskOutput::new(json!({ "done": task.input.to_value().unwrap_or(Value::Null) })))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_stream_shows_progress_before_the_result_over_http_and_websocket() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:stepper").unwrap(), "Stepper", "none", "1");
    card.capabilities.push(Capability::new("steps"));
    card.supported_payload_modes = vec![PayloadMode::Text];
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let runtime = DelegateRuntime::new(responder, Arc::new(Stepper));
    let ws = WsServer::new(runtime.clone(), WsServerConfig::default());
    let runtime_for_reaper = runtime.clone();
    let app = ldp_transport_http::router(HttpState::new(runtime, HttpServerConfig::default())).merge(ws.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ldp_transport_http::serve_router(listener, runtime_for_reaper, app, async move {
        let _ = stopped.await;
    }));

    for transport in ["http", "ws"] {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            ldp(&["call", &url, "steps", "42", "--stream", "--json", "--transport", transport], &[])
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{transport}: {}", stderr(&out));
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{transport}: not JSON ({e}): {l}")))
            .collect();
        let (result, progress) = lines.split_last().unwrap();
        assert_eq!(result["output"], json!({"done": 42}), "{transport}");
        assert_eq!(result["provenance"]["produced_by"], "ldp:delegate:stepper", "{transport}");
        let messages: Vec<&str> = progress.iter().map(|p| p["message"].as_str().unwrap()).collect();
        assert_eq!(messages, ["step 1", "step 2", "step 3"], "{transport}: {lines:#?}");
        assert_eq!(progress[0]["progress"], 0.25, "{transport}");
    }

    // Without --stream no progress is printed: the result is the only line.
    let out = tokio::task::spawn_blocking(move || ldp(&["call", &url, "steps", "1", "--json"], &[])).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1, "{}", String::from_utf8_lossy(&out.stdout));
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

#[test]
fn exit_statuses_are_the_same_for_every_command() {
    // 2: the command line cannot be acted on.
    let dir = TempDir::new("exit-codes");
    let missing = dir.path("missing.yaml");
    for args in [
        vec!["call", "ftp://127.0.0.1:1", "echo", "x"],
        vec!["call", "http://127.0.0.1:1", "echo", "x", "--sign", "none", "--secret", "s"],
        vec!["card"],
        vec!["card", "http://127.0.0.1:1", "--no-such-flag"],
        vec!["serve", "--sign", "bogus", "--secret", "x"],
        vec!["lctl", "check", &missing],
        vec!["llmx", "parse", &missing],
    ] {
        let out = ldp(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    // 1: the operation ran and failed (nothing listens on the port).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    for args in [vec!["card", &closed], vec!["call", &closed, "echo", "x", "--timeout", "3"]] {
        let out = ldp(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
    }
    let broken = dir.write("broken.yaml", "lctl: [not, a, document");
    let out = ldp(&["lctl", "check", &broken], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // The statuses are documented where users look.
    let help = String::from_utf8_lossy(&ldp(&["--help"], &[]).stdout).into_owned();
    assert!(help.contains("0 the operation succeeded, 1 it ran and failed, 2 usage error"), "{help}");
    let help = String::from_utf8_lossy(&ldp(&["serve", "--help"], &[]).stdout).into_owned();
    assert!(help.contains("hmac-sha256-jcs") && help.contains("ed25519-jcs"), "--sign lists its values: {help}");
}

#[test]
fn https_against_a_plain_http_server_gets_a_hint() {
    let (_server, url) = serve(&[], Stdio::null());
    let https = url.replacen("http://", "https://", 1);
    let out = ldp(&["call", &https, "echo", "x", "--timeout", "5"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("hint: the TLS handshake failed; if the server speaks plain HTTP, use {url}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn lctl_check_json_reports_findings_as_one_object() {
    let dir = TempDir::new("lctl-json");
    let doc = dir.write(
        "doc.yaml",
        "lctl: \"3.0\"\nchain:\n  id: c1\ntrace:\n  - step: 1\n    agent: a\n    action: start\n    confidence: 0.5\n\
         facts:\n  F1:\n    text: a fact\n    confidence: 0.9\n    source: a:1\n",
    );
    let out = ldp(&["lctl", "check", "--json", &doc], &[]);
    let report = stdout_json(&out);
    assert_eq!(report["documents"], json!([doc]));
    let findings = report["findings"].as_array().unwrap();
    let text = String::from_utf8_lossy(&ldp(&["lctl", "check", &doc], &[]).stdout).into_owned();
    // The JSON says what the text says: the same findings, the same counts, the same verdict.
    for finding in findings {
        assert!(text.contains(finding["message"].as_str().unwrap()), "{finding:#} not in {text}");
    }
    let errors = report["errors"].as_u64().unwrap();
    assert!(text.contains(&format!("{errors} error(s)")), "{text}");
    assert_eq!(report["ok"], errors == 0);
    assert_eq!(out.status.code(), Some(if errors == 0 { 0 } else { 1 }));

    let out = ldp(&["lctl", "check", "--json", &dir.path("missing.yaml")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout_json(&out)["ok"], false);
}

#[test]
fn call_sends_the_contract_of_a_file_and_reports_what_it_found() {
    let (_server, url) = serve(&[], Stdio::null());
    let dir = TempDir::new("call-contract");
    let contract = |id: &str, policy: &str, criterion: &str| {
        json!({"contract_id": id, "objective": "echo", "success_criteria": [criterion],
               "policy": {"failure_policy": policy}})
        .to_string()
    };

    // fail_open: the result stands, and provenance says which predicate failed.
    let open = dir.write("open.json", &contract("c-open", "fail_open", "check: has echo.missing"));
    let out = ldp(&["call", &url, "echo", r#"{"text":"hi"}"#, "--json", "--contract", &open], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let provenance = &stdout_json(&out)["provenance"];
    assert_eq!(provenance["contract_id"], "c-open", "{provenance:#}");
    assert_eq!(provenance["contract_satisfied"], false, "{provenance:#}");
    assert_eq!(provenance["contract_violations"], json!(["SUCCESS_CRITERION_FAILED"]), "{provenance:#}");

    // fail_closed and the predicate holds: satisfied.
    let held = dir.write("held.json", &contract("c-held", "fail_closed", "check: has echo.text"));
    let out = ldp(&["call", &url, "echo", r#"{"text":"hi"}"#, "--json", "--contract", &held], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["provenance"]["contract_satisfied"], true);

    // fail_closed and it fails: exit 1 with the typed error.
    let closed = dir.write("closed.json", &contract("c-closed", "fail_closed", "check: has echo.missing"));
    let out = ldp(&["call", &url, "echo", r#"{"text":"hi"}"#, "--json", "--contract", &closed], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["error"]["code"], "CONTRACT_VIOLATED");

    // A file that is not a contract, or is missing, is a usage error and nothing is sent.
    let junk = dir.write("junk.json", "[1, 2]");
    for path in [junk, dir.path("absent.json")] {
        let out = ldp(&["call", &url, "echo", "x", "--contract", &path], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("--contract"), "{}", stderr(&out));
    }
}
