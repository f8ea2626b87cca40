//! Run with: cargo run -p ldp-examples --example http_quickstart
//!
//! The smallest useful pair over HTTP: a delegate with one custom skill served on 127.0.0.1 (a free port), and a
//! client that discovers it, opens a session, submits a task, reads the provenance and closes the session.
//! Pass a URL (e.g. one printed by `ldp serve`) to run only the client part against that delegate's `echo` skill.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, TaskContext};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, PayloadMode, Score, SessionConfig};
use serde_json::json;

/// A delegate that counts the words of its input.
struct WordCounter;

#[async_trait]
impl Delegate for WordCounter {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let text = task.input.as_string().map_or_else(|| task.input.to_string(), |s| s.into_owned());
        let mut out = TaskOutput::new(json!({ "words": text.split_whitespace().count() }));
        out.confidence = Score::new(1.0).ok();
        Ok(out)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let external = std::env::args().nth(1);
    // The delegate: an identity card, a responder (the protocol rules), the delegate (the work), an HTTP server.
    let server = match &external {
        Some(_) => None,
        None => {
            let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:counter")?, "Counter", "none", "1");
            card.capabilities.push(Capability::new("count_words"));
            card.supported_payload_modes = vec![PayloadMode::Text];
            let responder =
                Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
            let runtime = DelegateRuntime::new(responder, Arc::new(WordCounter));
            let state = HttpState::new(runtime, HttpServerConfig::default());
            let server = ldp_transport_http::spawn("127.0.0.1:0", state).await?;
            println!("delegate listening on {}", server.url());
            Some(server)
        }
    };
    let url = external.clone().unwrap_or_else(|| server.as_ref().map(|s| s.url().to_owned()).unwrap_or_default());
    let (skill, input) = if external.is_some() {
        ("echo", json!({"text": "hello"}))
    } else {
        ("count_words", json!("the quick brown fox"))
    };

    // The client: discovery + HELLO, SESSION_PROPOSE, TASK_SUBMIT, SESSION_CLOSE.
    let mut cfg = InitiatorConfig::new("ldp:delegate:quickstart");
    cfg.trust_domain = Some("default".into());
    let client =
        Client::connect(HttpTransport::new(&url)?, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
            .await?;
    println!("connected to {} ({})", client.card().delegate_id.as_str(), client.card().name);
    let session = client.propose(SessionConfig::default()).await?;
    println!("session {} in {} mode", session.session_id, session.mode);
    let outcome = client.submit(&session.session_id, skill, input, None).await?;
    println!("output {}", outcome.output);
    println!(
        "produced by {} ({}), confidence {:?}",
        outcome.provenance.produced_by, outcome.provenance.model_version, outcome.provenance.confidence
    );
    client.close(&session.session_id).await?;
    if let Some(server) = server {
        server.shutdown().await?;
    }
    Ok(())
}
