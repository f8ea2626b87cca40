//! The anchor of the server-cost bench (`scripts/server-cpu`): a bare axum endpoint on the `ldp` binary's allocator
//! that parses a TASK_SUBMIT into a `Value` and answers a TASK_RESULT-shaped JSON of about the same size, with no
//! session, no store and no signing. What `ldp serve` spends beyond it is the protocol's cost.
//!
//! `bare-echo ADDR` (for instance `127.0.0.1:8091`) serves until killed.

use std::process::ExitCode;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Parses the message and answers a reply shaped like the one `ldp serve` sends for the echo skill.
async fn echo(body: axum::body::Bytes) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let reply = json!({
        "message_id": "00000000-0000-4000-8000-000000000000", "session_id": v["session_id"], "from": v["to"],
        "to": v["from"], "payload_mode": "text", "timestamp": v["timestamp"],
        "body": {"type": "TASK_RESULT", "task_id": v["body"]["task_id"], "output": v["body"]["input"],
                 "provenance": {"produced_by": "ldp:delegate:bare", "model_version": "1", "payload_mode_used": "text",
                                "confidence": 1.0, "verified": false, "session_id": v["session_id"],
                                "timestamp": v["timestamp"], "verification_status": "unverified"}},
    });
    let mut resp = serde_json::to_vec(&reply).unwrap_or_default().into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: bare-echo ADDR");
        return ExitCode::from(2);
    };
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bare-echo: cannot bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let app = axum::Router::new().route("/ldp/messages", axum::routing::post(echo));
    match axum::serve(listener, app).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-echo: {e}");
            ExitCode::FAILURE
        }
    }
}
