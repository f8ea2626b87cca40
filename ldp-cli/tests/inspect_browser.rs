//! `ldp inspect` in a real browser: Debian's headless Chromium driven by Playwright (`tests/inspect/e2e.mjs`)
//! against real `ldp serve` processes: an echo delegate, a signing delegate behind a bearer token whose card carries
//! a schema and attestations, and an LLM delegate on the provider stub (streaming slowly enough to watch and
//! cancel). `scripts/browser-deps` installs Chromium and the pinned npm packages when missing: the test never
//! skips. Screenshots of the main views and the measured first-load time land in `target/browser-e2e/`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use ldp_router::{AttestationClaim, Quality, sign_attestation};
use ldp_types::signing::SigningKey;
use serde_json::json;

use crate::support::{Guard, TempDir, repo, serve};

const TOKEN: &str = "inspector-test-token";
const SECRET: &str = "inspector-test-shared-secret";
const ISSUER: &str = "ldp:issuer:evals";
const SUBJECT: &str = "ldp:delegate:greeter";
/// The whole browser run's bound: a hung page or browser fails the test instead of hanging CI.
const BROWSER_LIMIT: Duration = Duration::from_secs(300);

/// A card with a skill whose input schema the page draws as a form, and two attestations about it: one signed by
/// the issuer whose key the page is given, one whose score was changed after signing.
fn greeter_card(issuer: &SigningKey) -> String {
    let now = time::OffsetDateTime::now_utc();
    let good =
        sign_attestation(AttestationClaim::new(SUBJECT, "greet", Quality::new(0.91).unwrap(), ISSUER, now), issuer)
            .unwrap();
    let mut forged =
        sign_attestation(AttestationClaim::new(SUBJECT, "greet", Quality::new(0.5).unwrap(), ISSUER, now), issuer)
            .unwrap();
    forged.quality_score = Quality::new(0.99).unwrap();
    json!({
        "delegate_id": SUBJECT,
        "name": "Greeter",
        "description": "Echoes a greeting request",
        "model_family": "echo",
        "model_version": "1.0",
        "trust_domain": { "name": "default", "allow_cross_domain": false, "trusted_peers": [] },
        "context_window": 4096,
        "capabilities": [{
            "name": "greet",
            "description": "Greets someone",
            "input_schema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "description": "who to greet" },
                    "times": { "type": "integer", "minimum": 1, "maximum": 5 },
                    "loud": { "type": "boolean" },
                    "tone": { "enum": ["warm", "formal"] }
                },
                "required": ["name"],
                "additionalProperties": false
            },
            "output_schema": { "type": "object" },
            "quality": { "quality_score": 0.8, "claim_type": "self_claimed" }
        }],
        "supported_payload_modes": ["semantic_frame", "text"],
        "endpoint": "http://127.0.0.1:0",
        "metadata": {},
        "attestations": [good.to_value().unwrap(), forged.to_value().unwrap()]
    })
    .to_string()
}

/// Starts `ldp inspect --bind 127.0.0.1:0` and returns it with the page's URL.
fn inspect() -> (Guard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["inspect", "--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("ldp inspect: open ") {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(30)).expect("ldp inspect printed no URL within 30 s");
    (guard, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_works_in_a_real_browser() {
    let deps = Command::new(repo().join("scripts/browser-deps")).stderr(Stdio::inherit()).output().unwrap();
    assert!(deps.status.success(), "scripts/browser-deps failed: the browser test needs Chromium and npm packages");
    let deps_dir = String::from_utf8(deps.stdout).unwrap().trim().to_owned();

    let dir = TempDir::new("inspect-browser");
    let issuer = SigningKey::ed25519_from_seed(&[7; 32]);
    let issuer_public = issuer.verifying_key().public_hex().unwrap();
    let card = dir.write("greeter.json", &greeter_card(&issuer));

    // A model that streams one word every 120 ms: slow enough to see partial output arrive and to cancel mid-way.
    let words: Vec<String> = (1..=40).map(|i| format!("word{i}")).collect();
    let stub = Stub::start(
        StubConfig::new(Flavor::OpenAi).with_reply(words.join(" ")).with_token_delay(Duration::from_millis(120)),
    )
    .await
    .unwrap();
    let base = stub.base_url();

    let (_echo, echo_url) = serve(&[], Stdio::inherit());
    let token = format!("{TOKEN}=default");
    let (_greeter, greeter_url) =
        serve(&["--card", &card, "--token", &token, "--sign", "hmac-sha256-jcs", "--secret", SECRET], Stdio::inherit());
    let (_llm, llm_url) =
        serve(&["--backend", "openai", "--base-url", &base, "--model", "stub-7b", "--skill", "chat"], Stdio::inherit());
    let (_inspector, inspect_url) = inspect();

    let artifacts = repo().join("target/browser-e2e");
    let fixtures = repo().join("ldp-lctl/tests/fixtures");
    let script = repo().join("ldp-cli/tests/inspect/e2e.mjs");
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .env("DEPS_DIR", &deps_dir)
        .env("ARTIFACTS", &artifacts)
        .env("INSPECT_URL", &inspect_url)
        .env("ECHO_URL", &echo_url)
        .env("GREETER_URL", &greeter_url)
        .env("GREETER_TOKEN", TOKEN)
        .env("GREETER_SECRET", SECRET)
        .env("ISSUER_LINE", format!("{ISSUER}={issuer_public}"))
        .env("LLM_URL", &llm_url)
        .env("LCTL_FIXTURES", &fixtures)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = match tokio::time::timeout(BROWSER_LIMIT, child.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => panic!("the browser test did not finish within {} s", BROWSER_LIMIT.as_secs()),
    };
    assert!(status.success(), "the browser test failed after {:?} (its output is above)", started.elapsed());
    for shot in ["card", "call-result", "streaming", "cancelled", "wire", "chain-task", "chain-pasted", "conformance"] {
        let path = artifacts.join("screenshots").join(format!("{shot}.png"));
        assert!(path.metadata().is_ok_and(|m| m.len() > 1000), "no screenshot {}", path.display());
    }
    drop(stub);
}
