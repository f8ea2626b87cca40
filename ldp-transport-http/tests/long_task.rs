#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A task that outlives its HTTP request (issue 16): the request times out (504), the task keeps running on the
//! server, and a status query afterwards returns its result, output and provenance, not just "completed".

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, TaskContext, Transport};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_types::*;
use serde_json::json;

/// Takes longer than the server's request timeout.
struct Slow;

#[async_trait]
impl Delegate for Slow {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut out = TaskOutput::new(json!({ "done": task.input }));
        out.tokens_used = Some(99);
        Ok(out)
    }
}

fn envelope(session_id: &str, to: &str, body: impl Into<Body>) -> Envelope {
    let now = ldp_types::time::format_timestamp(::time::OffsetDateTime::now_utc());
    Envelope::new(uuid::Uuid::new_v4().to_string(), now, session_id, "ldp:delegate:client", to, body)
        .with_payload_mode(PayloadMode::Text)
}

#[tokio::test]
async fn a_status_query_fetches_the_result_of_a_task_that_outlived_its_request() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:slow").unwrap(), "Slow", "none", "1");
    card.capabilities.push(Capability::new("work"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(3)));
    let runtime = DelegateRuntime::new(responder, Arc::new(Slow));
    let config = HttpServerConfig { request_timeout: Duration::from_millis(150), ..HttpServerConfig::default() };
    let server = ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, config)).await.unwrap();

    let client = Client::connect(
        HttpTransport::new(server.url()).unwrap(),
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::new(4)),
    )
    .await
    .unwrap();
    let session = client
        .propose(SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() })
        .await
        .unwrap();
    let to = "ldp:delegate:slow";
    let submit = envelope(&session.session_id, to, TaskSubmit::new("long-1".into(), "work".into(), "go", None));
    let err = client.transport().exchange(&submit, None).await.unwrap_err();
    assert_eq!(err.code, codes::TIMEOUT, "{err:?}");

    // Still running: the query says so.
    let query = |sid: &str| envelope(sid, to, TaskUpdate::new("long-1".into(), None, None));
    let reply = client.transport().exchange(&query(&session.session_id), None).await.unwrap().unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(reply["body"]["type"], "TASK_UPDATE", "{reply}");
    assert_eq!(reply["body"]["message"], "running");

    // Finished meanwhile: the query returns the result itself.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let reply = client.transport().exchange(&query(&session.session_id), None).await.unwrap().unwrap();
    let env = Envelope::from_slice(&reply).unwrap();
    let Body::TaskResult(result) = env.body else { panic!("{}", String::from_utf8_lossy(&reply)) };
    assert_eq!(result.output, json!({ "done": "go" }));
    assert_eq!(result.provenance.tokens_used, Some(99));
    assert_eq!(result.provenance.produced_by, "ldp:delegate:slow");
    server.shutdown().await.unwrap();
}
