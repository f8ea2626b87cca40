//! The kit against the Python reference delegate (PyPI `ldp-protocol[server]==0.2.0`, `scripts/ref_delegate.py`),
//! started on 127.0.0.1, compared strictly with the committed baselines under `conformance/baselines/`.
//!
//! Regenerate the baselines with `UPDATE_BASELINE=1 cargo test -p ldp-conformance --test integration python_reference::`.
//! These tests never skip: if the SDK cannot be installed they fail with the installer's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ldp_conformance::{Baseline, Config, Format, Report};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};

const SECRET: &str = "conformance-python-secret";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> String {
    let out = Command::new("bash")
        .arg(repo().join("scripts/ref-sdk.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/ref-sdk.sh");
    assert!(
        out.status.success(),
        "scripts/ref-sdk.sh could not install the Python reference SDK (ldp-protocol[server]==0.2.0); see its \
         message above. This test does not skip."
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

struct Delegate {
    child: Child,
    url: String,
}

impl Drop for Delegate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Delegate {
    let py = python();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(py)
        .arg(repo().join("scripts/ref_delegate.py"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start scripts/ref_delegate.py");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(90));
    let mut delegate = Delegate { child, url: String::new() };
    match line {
        Ok(l) if l.starts_with("READY ") => delegate.url = l["READY ".len()..].trim().to_owned(),
        other => panic!("ref_delegate.py did not become ready: {other:?}"),
    }
    delegate
}

fn baseline_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("baselines").join(name)
}

fn check_against_baseline(report: &Report, name: &str, implementation: &str) {
    let path = baseline_path(name);
    if std::env::var_os("UPDATE_BASELINE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        Baseline::from_report(report, implementation).save(&path).unwrap();
    }
    let baseline = Baseline::load(&path).unwrap_or_else(|e| panic!("{e}: regenerate with UPDATE_BASELINE=1"));
    let cmp = baseline.compare(report, path.display().to_string());
    assert!(cmp.ok, "{}\n\n{}", cmp.line(), report.render(Format::Table));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reference_matches_its_baseline() {
    let delegate = start(&[]);
    let mut cfg = Config::new(delegate.url.clone());
    cfg.ttl_hint = Some(1);
    cfg.oversize_bytes = 2 * 1024 * 1024;
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    check_against_baseline(
        &report,
        "python-ldp-protocol-0.2.0.json",
        "Python reference delegate, PyPI ldp-protocol[server]==0.2.0 (scripts/ref_delegate.py), unsigned, HTTP",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reference_with_signing_matches_its_baseline() {
    let delegate = start(&["--secret", SECRET]);
    let mut cfg = Config::new(delegate.url.clone());
    cfg.ttl_hint = Some(1);
    cfg.oversize_bytes = 2 * 1024 * 1024;
    cfg.signing = Some(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, SECRET).unwrap());
    let report = ldp_conformance::run(cfg).await.expect("the kit runs");
    check_against_baseline(
        &report,
        "python-ldp-protocol-0.2.0-signed.json",
        "Python reference delegate, PyPI ldp-protocol[server]==0.2.0 (scripts/ref_delegate.py --secret), \
         kit --sign hmac-sha256, HTTP",
    );
}
