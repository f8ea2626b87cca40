//! The delegate of `examples/production.rs`, shared with its test (which runs the conformance kit against it).

use std::path::{Path, PathBuf};

use ldp::types::signing::SigningKey;
use ldp::{Delegate, DelegateBuilder, LdpError, Output, TaskContext};
use ldp_transport_http::test_pki::TestCa;
use serde_json::{Value, json};

/// The token the example's client presents, and the trust domain it stands for.
pub const TOKEN: &str = "planner-token";
/// The delegate's trust domain (and its token holders').
pub const DOMAIN: &str = "research.example";

/// A private CA and a server certificate for localhost, written as PEM files into a directory.
#[derive(Debug)]
pub struct Pki {
    /// The directory (the SQLite store lives here too).
    pub dir: PathBuf,
    /// The CA certificate, PEM: what clients trust.
    pub ca_pem: String,
    /// The server certificate chain file.
    pub cert: PathBuf,
    /// The server key file.
    pub key: PathBuf,
}

impl Pki {
    /// Makes the CA and the server certificate, and writes them under `dir`.
    pub fn create(dir: &Path) -> Result<Self, Box<dyn std::error::Error>> {
        std::fs::create_dir_all(dir)?;
        let ca = TestCa::new("production example CA")?;
        let server = ca.server_cert()?;
        let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert, server.cert_pem)?;
        std::fs::write(&key, server.key_pem)?;
        Ok(Self { dir: dir.to_path_buf(), ca_pem: ca.pem(), cert, key })
    }
}

/// A production delegate: bearer tokens, signatures (with `key`), TLS, a SQLite store, a rate limit, MCP at /mcp,
/// and OpenTelemetry when `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector.
pub fn delegate(pki: &Pki, key: Option<SigningKey>) -> DelegateBuilder {
    let mut delegate = Delegate::builder("ldp:delegate:summarizer")
        .model("summarizer", "1.0")
        .trust_domain(DOMAIN)
        .skill("summarize", |input: Value, _ctx: TaskContext| async move {
            Ok::<_, LdpError>(Output::new(summary(&input)).confidence(0.9))
        })
        .describe("The first eight words of its input, and how many words there were")
        .quality(0.9)
        .token(TOKEN, DOMAIN)
        .tls(&pki.cert, &pki.key)
        .store(format!("sqlite:{}", pki.dir.join("state.db").display()))
        .rate_limit("200/s")
        .mcp();
    if let Some(key) = key {
        delegate = delegate.signing_key(key);
    }
    if let Ok(endpoint) = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        delegate = delegate.otlp(endpoint);
    }
    delegate
}

/// Any input: a string, or a frame's text fields.
fn summary(input: &Value) -> Value {
    let text = match input {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    json!({ "summary": words.iter().take(8).copied().collect::<Vec<_>>().join(" "), "words": words.len() })
}
