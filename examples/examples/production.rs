//! Run with: cargo run -p ldp-examples --example production
//!
//! A production delegate from one builder (`ldp_examples::production::delegate`): bearer tokens, HMAC signatures,
//! TLS with a private CA made on the spot, a SQLite store, a rate limit, MCP at /mcp, and OpenTelemetry when
//! OTEL_EXPORTER_OTLP_ENDPOINT is set. A client with options (its id, token, signing key, the CA, a timeout) calls it
//! over https:// and wss://. README.md, "Production", shows the same server as an `ldp serve --config` file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ldp::types::signing::{SignatureAlgorithm, SigningKey};
use ldp::{ClientOptions, ConnectSettings, connect_with};
use ldp_examples::production::{self, Pki, TOKEN};
use serde_json::Value;

/// Starts the delegate, calls it over `https://` and `wss://`, and shuts it down.
#[tokio::main]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pki = Pki::create(&std::env::temp_dir().join(format!("ldp-production-{}", std::process::id())))?;
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "a-long-random-shared-secret")?;
    let server = production::delegate(&pki, Some(key.clone())).spawn("127.0.0.1:0").await?;
    server.banner().iter().for_each(|line| println!("server: {line}"));

    let options = ClientOptions::new()
        .delegate_id("ldp:delegate:planner")
        .signing_key(key)
        .bearer_token(TOKEN)
        .tls_root_certificate_pem(pki.ca_pem.as_str())
        .request_timeout(Duration::from_secs(30));
    for url in [server.url(), server.url().replacen("https", "wss", 1)] {
        let connection = connect_with(&url, options.clone()).await?;
        let answer =
            connection.call::<Value>("summarize", "LDP lets a router pick delegates by verified quality").await?;
        println!("{url}: {} (produced by {})", answer.output, answer.provenance.produced_by);
        connection.close().await?;
    }
    server.shutdown().await?;
    std::fs::remove_dir_all(&pki.dir)?;
    Ok(())
}
