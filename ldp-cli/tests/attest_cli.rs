//! `ldp attest` as a process: issue an attestation, publish a rotated key set, revoke, and verify each step as a
//! router would (exit 0 valid, 1 refused, 2 usage error).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use crate::support::TempDir;
use ldp_types::signing::SigningKey;

fn ldp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ldp")).args(args).env_remove("LDP_ISSUER_SEED").output().unwrap()
}

fn ok(out: Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const ISSUER: &str = "ldp:issuer:evals";

#[test]
fn issue_rotate_revoke_verify() {
    let dir = TempDir::new("attest");
    let (seed1, seed2) = ("01".repeat(32), "02".repeat(32));
    let public1 = SigningKey::ed25519_from_hex(&seed1).unwrap().verifying_key().public_hex().unwrap();
    let public2 = SigningKey::ed25519_from_hex(&seed2).unwrap().verifying_key().public_hex().unwrap();
    let pin = format!("k1={public1}");
    let issue = |seed: &str, key_id: &str, subject: &str| {
        ok(ldp(&[
            "attest",
            "issue",
            "--seed",
            seed,
            "--issuer",
            ISSUER,
            "--key-id",
            key_id,
            "--subject",
            subject,
            "--skill",
            "reasoning",
            "--score",
            "0.9",
        ]))
    };
    let a = dir.write("a.json", &issue(&seed1, "k1", "ldp:delegate:solid"));
    let verify = |file: &str, extra: &[&str]| {
        let mut args = vec!["attest", "verify", file, "--pin", pin.as_str()];
        args.extend_from_slice(extra);
        ldp(&args)
    };
    assert!(ok(verify(&a, &[])).contains("valid: ldp:issuer:evals attests ldp:delegate:solid at 0.9"));
    // Pinned to another key: refused (exit 1).
    let other = format!("k1={public2}");
    let out = ldp(&["attest", "verify", &a, "--pin", &other]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));

    // Rotation: k1 publishes a set listing k2; an attestation by k2 verifies with the set, not without.
    let keys = dir.write(
        "keys.json",
        &ok(ldp(&[
            "attest",
            "keys",
            "--seed",
            &seed1,
            "--issuer",
            ISSUER,
            "--key-id",
            "k1",
            "--key",
            &format!("k2={public2}"),
        ])),
    );
    let b = dir.write("b.json", &issue(&seed2, "k2", "ldp:delegate:other"));
    assert_eq!(verify(&b, &[]).status.code(), Some(1));
    ok(verify(&b, &["--keys", &keys]));

    // Revocation by k2 of attestation a: a is refused, b still valid.
    let seed_env_revoke = ok(Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["attest", "revoke", "--issuer", ISSUER, "--key-id", "k2", "--attestation", &a])
        .env("LDP_ISSUER_SEED", &seed2)
        .output()
        .unwrap());
    let revocations = dir.write("revocations.json", &seed_env_revoke);
    let out = verify(&a, &["--keys", &keys, "--revocations", &revocations]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revoked"), "{}", String::from_utf8_lossy(&out.stderr));
    ok(verify(&b, &["--keys", &keys, "--revocations", &revocations]));
    // A revocation list older than the freshness bound makes the issuer's attestations stop counting.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = verify(&b, &["--keys", &keys, "--revocations", &revocations, "--max-revocation-age", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no fresh revocation list"));

    // Usage errors: exit 2.
    for args in [
        vec![
            "attest",
            "issue",
            "--seed",
            "zz",
            "--issuer",
            ISSUER,
            "--key-id",
            "k",
            "--subject",
            "s",
            "--skill",
            "x",
            "--score",
            "0.5",
        ],
        vec!["attest", "verify", "missing.json", "--pin", pin.as_str()],
        vec!["attest", "verify", &a, "--pin", "no-equals-sign"],
    ] {
        assert_eq!(ldp(&args).status.code(), Some(2), "{args:?}");
    }
}

/// Files served at their paths by an axum server on a thread of its own (an issuer's static web server).
fn static_server() -> (String, Arc<Mutex<HashMap<String, String>>>) {
    let files: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let served = files.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let body = served.lock().unwrap().get(uri.path()).cloned();
        async move {
            match body {
                Some(body) => (axum::http::StatusCode::OK, body),
                None => (axum::http::StatusCode::NOT_FOUND, String::new()),
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{}", rx.recv().unwrap()), files)
}

#[test]
fn verify_fetches_the_issuer_documents_from_its_well_known_paths() {
    let (base, files) = static_server();
    let seed = "03".repeat(32);
    let public = SigningKey::ed25519_from_hex(&seed).unwrap().verifying_key().public_hex().unwrap();
    let pin = format!("k1={public}");
    let signer = ["--seed", seed.as_str(), "--issuer", ISSUER, "--key-id", "k1"];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&signer);
        ok(ldp(&all))
    };
    let dir = TempDir::new("attest-url");
    let publish = |path: &str, body: String| files.lock().unwrap().insert(format!("/evals{path}"), body);
    // The key set first: `attest keys` publishes the signing key valid from now, and the attestation must be
    // made within the key's window.
    publish("/.well-known/ldp-issuer-keys", run(&["attest", "keys"]));
    publish("/.well-known/ldp-issuer-revocations", run(&["attest", "revoke"]));
    let attestation =
        run(&["attest", "issue", "--subject", "ldp:delegate:solid", "--skill", "reasoning", "--score", "0.8"]);
    let a = dir.write("a.json", &attestation);
    let url = format!("{base}/evals");
    let verify = || ldp(&["attest", "verify", &a, "--pin", &pin, "--issuer-url", &url]);
    let out = ok(verify());
    assert!(out.contains("fetched from"), "{out}");
    assert!(out.contains("valid: ldp:issuer:evals attests ldp:delegate:solid at 0.8"), "{out}");

    // The issuer revokes it: the next verify fetches the new list and refuses.
    std::thread::sleep(std::time::Duration::from_millis(1100)); // a newer issued_at than the list held
    publish("/.well-known/ldp-issuer-revocations", run(&["attest", "revoke", "--attestation", &a]));
    let out = verify();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revoked"), "{}", String::from_utf8_lossy(&out.stderr));

    // No documents there: exit 1 with the HTTP status; a URL that is not http(s): usage error.
    let out = ldp(&["attest", "verify", &a, "--pin", &pin, "--issuer-url", &base]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ldp(&["attest", "verify", &a, "--pin", &pin, "--issuer-url", "ftp://evals.example"]);
    assert_eq!(out.status.code(), Some(2));
    // Files and a URL at once: usage error.
    let out = ldp(&["attest", "verify", &a, "--pin", &pin, "--issuer-url", &url, "--keys", &a]);
    assert_eq!(out.status.code(), Some(2));
}
