#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `ldp serve --backend openai|anthropic` in front of a local provider stub, toured by `ldp demo --llm`: the card
//! reflects the backend, the system prompt and templates reach the provider, the budget stops generation, and the
//! API key never shows in the server's output (debug logs included) nor in what the client is told, even when the
//! provider refuses it and quotes it back.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{Guard, TempDir};
use ldp_llm::stub::{Flavor, Stub, StubConfig};

const KEY: &str = "sk-cli-test-SECRET-42";

/// `ldp serve ARGS` with the key in `LDP_TEST_LLM_KEY` and debug logs written to `log`; returns it and its URL.
fn serve_llm(args: &[&str], log: &str) -> (Guard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .env("LDP_TEST_LLM_KEY", KEY)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut printed = String::new();
    loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("ldp serve printed no URL within 30 s");
        printed.push_str(&line);
        if let Some(rest) = line.strip_prefix("ldp serve: listening on ") {
            assert!(!printed.contains(KEY));
            return (guard, rest.split_whitespace().next().unwrap().to_owned());
        }
    }
}

async fn demo(url: &str) -> (bool, String) {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_ldp")).args(["demo", "--llm", &url]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldp_serve_fronts_each_provider() {
    let dir = TempDir::new("serve-llm");
    let system = dir.write("system.txt", "You are a careful assistant.\n");
    let template = dir.write("summarize.txt", "Summarize: {{input}}");
    let skill = format!("summarize={template}");
    for (flavor, backend) in [(Flavor::OpenAi, "openai"), (Flavor::Anthropic, "anthropic")] {
        let stub = Stub::start(StubConfig::new(flavor).with_api_key(KEY).with_model("stub-7b-2025")).await.unwrap();
        let base = stub.base_url();
        let log = dir.path(&format!("{backend}.log"));
        #[rustfmt::skip]
        let (guard, url) = serve_llm(&[
            "--backend", backend, "--base-url", &base, "--model", "stub-7b", "--api-key-env", "LDP_TEST_LLM_KEY",
            "--system-prompt", &system, "--skill", "chat", "--skill", &skill, "--context-window", "2048",
        ], &log);
        let card: serde_json::Value =
            reqwest::get(format!("{url}/.well-known/ldp-identity")).await.unwrap().json().await.unwrap();
        let family = if flavor == Flavor::OpenAi { "openai-compatible" } else { "anthropic" };
        assert_eq!((&card["model_family"], &card["model_version"]), (&family.into(), &"stub-7b".into()));
        assert_eq!(card["context_window"], 2048);
        let skills: Vec<&str> =
            card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(skills, ["chat", "summarize"]);
        let (ok, out) = demo(&url).await;
        assert!(ok, "{out}");
        assert!(out.contains("CONTRACT_VIOLATED"), "{out}");
        let sent = stub.recorded();
        let system_of = |v: &serde_json::Value| match flavor {
            Flavor::OpenAi => v["messages"][0]["content"].clone(),
            Flavor::Anthropic => v["system"].clone(),
        };
        assert_eq!(system_of(&sent[0]), "You are a careful assistant.");
        assert_eq!(sent[2]["max_tokens"], 8, "{flavor:?}: the tour's budget is the provider's max_tokens");
        drop(guard);
        assert!(!std::fs::read_to_string(&log).unwrap().contains(KEY));
    }
}

/// `--backend local`: a GGUF model run in process (a fixture model whose answer is known: the byte `a` until
/// `max_tokens`), toured like a provider: card, two turns with the history counted, the budget stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldp_serve_runs_a_local_gguf_model() {
    use ldp_llm_local::fixture::{self, Behaviour, Fixture};
    let dir = TempDir::new("serve-local");
    let model = dir.path("fixture.gguf");
    let mut spec = Fixture::new(Behaviour::Repeat(b'a'));
    spec.context_length = 512;
    fixture::write(&model, &spec).unwrap();
    let log = dir.path("local.log");
    // Fixture models are candle's: their answers are facts of its arithmetic.
    let (guard, url) =
        serve_llm(&["--backend", "local", "--engine", "candle", "--model", &model, "--max-tokens", "12"], &log);
    let card: serde_json::Value =
        reqwest::get(format!("{url}/.well-known/ldp-identity")).await.unwrap().json().await.unwrap();
    assert_eq!((&card["model_family"], &card["model_version"]), (&"local".into(), &"fixture".into()));
    assert_eq!(card["context_window"], 512, "the model's own context window");
    let (ok, out) = demo(&url).await;
    assert!(ok, "{out}");
    assert!(out.contains(&format!("answer 1: {}", "a".repeat(12))), "{out}");
    assert!(out.contains("CONTRACT_VIOLATED"), "{out}");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_never_shows() {
    let dir = TempDir::new("serve-llm-key");
    for (flavor, backend) in [(Flavor::OpenAi, "openai"), (Flavor::Anthropic, "anthropic")] {
        // The provider wants another key, and quotes the one it got in its refusal (as OpenAI does).
        let stub = Stub::start(StubConfig::new(flavor).with_api_key("another-key")).await.unwrap();
        let base = stub.base_url();
        let log = dir.path(&format!("{backend}.log"));
        #[rustfmt::skip]
        let (guard, url) = serve_llm(&[
            "--backend", backend, "--base-url", &base, "--model", "m", "--api-key-env", "LDP_TEST_LLM_KEY",
        ], &log);
        let (ok, out) = demo(&url).await;
        assert!(!ok, "{out}");
        assert!(out.contains("PROVIDER_AUTH_FAILED") && out.contains("<redacted>"), "{out}");
        assert!(!out.contains(KEY), "{out}");
        assert_eq!(stub.requests(), 1, "a refused key is not retried");
        drop(guard);
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(logged.contains("DEBUG"), "the server logged at debug level");
        assert!(!logged.contains(KEY), "{logged}");
    }
}

#[test]
fn llm_flags_are_checked() {
    for (args, why) in [
        (&["--backend", "openai"][..], "--model"),
        (&["--model", "m"][..], "--backend"),
        (&["--backend", "openai", "--model", "m", "--base-url", "ftp://x"][..], "not http"),
        (&["--backend", "openai", "--model", "m", "--api-key-env", "LDP_TEST_UNSET_VAR_X"][..], "LDP_TEST_UNSET_VAR_X"),
        (&["--backend", "echo", "--skill", "a=/nonexistent/template"][..], "/nonexistent/template"),
        (&["--backend", "local"][..], "--model"),
        (&["--backend", "local", "--model", "/nonexistent/model.gguf"][..], "/nonexistent/model.gguf"),
        (&["--backend", "local", "--model", "m.gguf", "--top-p", "0.5"][..], "--temperature"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ldp")).arg("serve").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
}
