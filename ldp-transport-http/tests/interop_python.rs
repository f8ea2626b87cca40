//! Interop with the Python reference SDK (PyPI `ldp-protocol[server]==0.2.0`, installed under `target/` by
//! `scripts/ref-sdk.sh`), both directions on 127.0.0.1:
//! - our `Client<HttpTransport>` against the SDK's `LdpDelegate.run()` (`scripts/ref_delegate.py`), unsigned and
//!   signed with `hmac-sha256`;
//! - the SDK's `LdpClient` (`scripts/ref_client.py`) against our server, unsigned and signed.
//!
//! These tests never skip: if the SDK cannot be installed they fail with the installer's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SessionError, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, spawn};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, SessionConfig};
use serde_json::{Value, json};

const SECRET: &str = "interop-secret";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The venv's python, installing the SDK on first use. Fails (never skips) when that is impossible.
fn python() -> String {
    let out = Command::new("bash").arg(repo().join("scripts/ref-sdk.sh")).stderr(Stdio::inherit()).output();
    let out = out.unwrap_or_else(|e| panic!("cannot run scripts/ref-sdk.sh: {e}"));
    assert!(out.status.success(), "scripts/ref-sdk.sh could not install the Python reference SDK (see stderr above)");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Kills the child process on drop, also when the test fails.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `scripts/ref_delegate.py` and waits (bounded) for its READY line.
fn python_delegate(extra: &[&str]) -> (Guard, String) {
    let py = python();
    let port = free_port().to_string();
    let mut child = Command::new(py)
        .arg(repo().join("scripts/ref_delegate.py"))
        .args(["--host", "127.0.0.1", "--port", &port])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start scripts/ref_delegate.py");
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).expect("the Python delegate did not print READY within 60 s");
    let url = line.trim().strip_prefix("READY ").unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned();
    (guard, url)
}

/// Runs `scripts/ref_client.py` against `url` and returns its JSON report.
async fn python_client(url: &str, extra: &[&str]) -> Value {
    let py = python();
    let mut cmd = tokio::process::Command::new(py);
    cmd.arg(repo().join("scripts/ref_client.py")).arg(url).args(extra).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("ref_client.py hung").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("ref_client.py printed no JSON report ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr))
    })
}

async fn connect(url: &str, cfg: InitiatorConfig) -> Result<Client<HttpTransport>, SessionError> {
    Client::connect(HttpTransport::new(url).unwrap(), cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
        .await
}

fn client_config(signed: bool) -> InitiatorConfig {
    let mut cfg = InitiatorConfig::new("ldp:delegate:rust-client");
    // The Python delegate rejects proposals that declare no domain; it trusts only its own (`default`).
    cfg.trust_domain = Some("default".into());
    if signed {
        cfg.security =
            SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, SECRET).unwrap());
        cfg.hmac_sha256_nonce = false;
    }
    cfg
}

async fn full_flow(url: &str, cfg: InitiatorConfig) {
    let client = connect(url, cfg).await.unwrap();
    assert_eq!(client.card().delegate_id.as_str(), "ldp:delegate:ref-echo");
    let manifest = client.manifest().expect("HELLO must be answered with CAPABILITY_MANIFEST");
    assert!(manifest.skills.iter().any(|s| s == "echo"), "{manifest:?}");
    let session = client.propose(SessionConfig::default()).await.unwrap();
    assert!(!session.session_id.is_empty());
    for input in [json!("hello"), json!({"text": "hi", "n": 2})] {
        let input = if session.mode == PayloadMode::SemanticFrame {
            json!({"task_type": "echo", "instruction": "repeat", "input": input})
        } else {
            input
        };
        let out = client.submit(&session.session_id, "echo", input.clone(), None).await.unwrap();
        assert_eq!(out.output, json!({ "echo": input }));
        assert_eq!(out.provenance.produced_by, "ldp:delegate:ref-echo");
        assert_eq!(out.provenance.session_id.as_deref(), Some(session.session_id.as_str()));
    }
    client.close(&session.session_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_against_the_python_delegate() {
    let (_guard, url) = python_delegate(&["--delegate-id", "ldp:delegate:ref-echo"]);
    full_flow(&url, client_config(false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_against_the_python_delegate_signed_hmac_sha256() {
    let (_guard, url) = python_delegate(&["--delegate-id", "ldp:delegate:ref-echo", "--secret", SECRET]);
    // Replies are signed by the SDK and verified by our client (SecurityConfig::symmetric requires it).
    full_flow(&url, client_config(true)).await;
    // A wrong secret: the SDK answers HELLO with an unsigned TASK_FAILED, which our client refuses.
    let mut wrong = client_config(true);
    wrong.security =
        SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "wrong").unwrap());
    assert!(connect(&url, wrong).await.is_err());
}

fn echo_state(signed: bool) -> HttpState {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "echo", "1.0");
    card.capabilities.push(Capability::new("echo"));
    let mut cfg = ResponderConfig::new(card);
    if signed {
        cfg.security =
            SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, SECRET).unwrap());
        cfg.hmac_sha256_nonce = false;
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), HttpServerConfig::default())
}

fn assert_report_ok(report: &Value) {
    assert_eq!(report["ok"], true, "{report:#}");
    let steps = &report["steps"];
    for step in ["discover", "establish_session", "submit_task", "close_session"] {
        assert_eq!(steps[step]["ok"], true, "{step}: {report:#}");
    }
    assert_eq!(steps["establish_session"]["hello_reply_type"], "CAPABILITY_MANIFEST");
    assert_eq!(steps["establish_session"]["propose_reply_type"], "SESSION_ACCEPT");
    assert_eq!(steps["submit_task"]["output"], json!({"echo": {"text": "hello"}}));
    assert_eq!(steps["submit_task"]["provenance_wire"]["produced_by"], "ldp:delegate:echo");
    assert_eq!(steps["close_session"]["reply_type"], "SESSION_CLOSE");
    for exchange in report["http"].as_array().unwrap() {
        assert!(exchange["status"].as_u64().is_some_and(|s| s < 300), "{exchange:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_against_our_server() {
    let server = spawn("127.0.0.1:0", echo_state(false)).await.unwrap();
    let report = python_client(server.url(), &["--expect-output", r#"{"echo": {"text": "hello"}}"#]).await;
    assert_report_ok(&report);
    let report = python_client(server.url(), &["--discover", "wellknown"]).await;
    assert_report_ok(&report);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_against_our_server_signed_hmac_sha256() {
    let server = spawn("127.0.0.1:0", echo_state(true)).await.unwrap();
    let report = python_client(server.url(), &["--secret", SECRET, "--require-signed-responses"]).await;
    assert_report_ok(&report);
    for sig in report["response_signatures"].as_array().unwrap() {
        assert_eq!(sig["valid"], true, "{sig:#}");
    }
    // Without the secret our server refuses the unsigned HELLO with 401, which the SDK reports as a failure.
    let report = python_client(server.url(), &[]).await;
    assert_eq!(report["ok"], false);
    assert_eq!(report["failed_step"], "establish_session", "{report:#}");
    server.shutdown().await.unwrap();
}
