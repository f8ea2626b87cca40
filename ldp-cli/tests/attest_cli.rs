//! `ldp attest` as a process: issue an attestation, publish a rotated key set, revoke, and verify each step as a
//! router would (exit 0 valid, 1 refused, 2 usage error).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Command, Output};

use ldp_types::signing::SigningKey;
use support::TempDir;

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
