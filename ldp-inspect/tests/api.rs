//! The inspector's JSON API against real delegates on loopback (the browser test in `ldp-cli/tests/inspect_browser.rs`
//! drives the page; this checks the API's contract without one): connect, a streamed task and its events, cancel,
//! the wire log, a task's chain, bad input, the conformance kit, and the guards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp::TaskContext;
use serde_json::{Value, json};

struct Fixture {
    _delegate: ldp::Server,
    delegate: String,
    inspector: String,
    http: reqwest::Client,
}

/// A delegate with a skill that streams a chunk every 50 ms until cancelled or done, and an inspector.
async fn fixture() -> Fixture {
    let delegate = ldp::Delegate::builder("ldp:delegate:counter")
        .skill("count", |n: u32, cx: TaskContext| async move {
            for i in 0..n {
                if cx.is_cancelled() {
                    break;
                }
                cx.partial(format!("{i} "));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(n)
        })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let url = delegate.url();
    let inspector = ldp_inspect::serve("127.0.0.1:0".parse().unwrap(), ldp_inspect::Inspector::new(Default::default()))
        .await
        .unwrap();
    let inspector_url = inspector.url();
    // The server lives as long as the test's runtime.
    std::mem::forget(inspector);
    Fixture { _delegate: delegate, delegate: url, inspector: inspector_url, http: reqwest::Client::new() }
}

impl Fixture {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.http.post(format!("{}{path}", self.inspector)).json(&body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(format!("{}{path}", self.inspector)).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// The task's events, read from the SSE stream until it ends.
    async fn events(&self, task: u64) -> Vec<Value> {
        let response = self.http.get(format!("{}api/tasks/{task}/events", self.inspector)).send().await.unwrap();
        let text = tokio::time::timeout(Duration::from_secs(20), response.text()).await.unwrap().unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .flat_map(|data| serde_json::from_str::<Vec<Value>>(data).unwrap())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_task_its_wire_log_and_its_chain() {
    let f = fixture().await;
    let (status, connected) = f.post("api/connect", json!({ "url": f.delegate })).await;
    assert_eq!(status, 200, "{connected}");
    assert_eq!(connected["view"]["card"]["delegate_id"], "ldp:delegate:counter");
    let schema = &connected["view"]["skills"][0]["input_schema"];
    assert_eq!(schema["type"], "integer", "the skill's schema comes from its closure's type: {schema}");
    let id = connected["connection"].as_u64().unwrap();

    let (status, started) =
        f.post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": 5 })).await;
    assert_eq!(status, 200, "{started}");
    let events = f.events(started["task"].as_u64().unwrap()).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"));
    assert_eq!(kinds.iter().filter(|k| **k == "partial").count(), 5, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"result"));
    let result = events.last().unwrap();
    assert_eq!(result["output"], 5);
    assert_eq!(result["provenance"]["produced_by"], "ldp:delegate:counter");

    let (_, wire) = f.get(&format!("api/connections/{id}/wire")).await;
    let types: Vec<(&str, &str)> = wire["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["direction"].as_str().unwrap(), e["message_type"].as_str().unwrap()))
        .collect();
    for expected in [("out", "HELLO"), ("in", "CAPABILITY_MANIFEST"), ("out", "TASK_SUBMIT"), ("in", "TASK_RESULT")] {
        assert!(types.contains(&expected), "{expected:?} in {types:?}");
    }
    let (_, later) = f.get(&format!("api/connections/{id}/wire?since={}", types.len())).await;
    assert_eq!(later["entries"].as_array().unwrap().len(), 0, "since= gives only what is new");

    let (status, chain) = f.get(&format!("api/tasks/{}/chain", started["task"])).await;
    assert_eq!(status, 200, "{chain}");
    assert_eq!(chain["steps"][0]["agent"], "ldp:delegate:counter");
    assert!(chain["yaml"].as_str().unwrap().starts_with("lctl:"));

    // The same session again: its turns accumulate.
    let session = started["session"].as_str().unwrap();
    let (status, _) = f
        .post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": 1, "session": session }))
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, sessions) = f.get(&format!("api/connections/{id}/sessions")).await;
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(sessions["sessions"][0]["turns"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_cancelled() {
    let f = fixture().await;
    let (_, connected) = f.post("api/connect", json!({ "url": f.delegate })).await;
    let id = connected["connection"].as_u64().unwrap();
    let (_, started) = f.post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": 400 })).await;
    let task = started["task"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, answer) = f.post(&format!("api/tasks/{task}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let events = f.events(task).await;
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "failed", "{last}");
    assert_eq!(last["detail"]["code"], "CANCELLED", "{last}");
    assert!(events.iter().any(|e| e["kind"] == "cancelling"));
    let (status, again) = f.post(&format!("api/tasks/{task}/cancel"), json!({})).await;
    assert_eq!((status, again["error"].as_str().unwrap()), (400, "the task has already ended"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_message() {
    let f = fixture().await;
    let cases = [
        (json!({ "url": "" }), "enter the delegate's URL"),
        (json!({ "url": "ftp://x" }), "expected an http://"),
        (json!({ "url": "http://127.0.0.1:1" }), "nothing answers"),
        (json!({ "url": f.delegate, "sign": "hmac-sha256" }), "needs the secret"),
        (json!({ "url": f.delegate, "sign": "rot13", "secret": "x" }), "signature algorithm"),
        (json!({ "url": f.delegate, "trusted_issuers": "nokey" }), "ISSUER_ID=ED25519_PUBLIC_KEY_HEX"),
        (json!({ "url": f.delegate, "colour": "red" }), "not what the API takes"),
    ];
    for (body, expected) in cases {
        let (status, answer) = f.post("api/connect", body.clone()).await;
        assert!(status >= 400, "{body} -> {status}");
        assert!(answer["error"].as_str().unwrap().contains(expected), "{body} -> {answer}");
    }
    // A delegate that accepts the connection and never answers costs the timeout, then a message.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging = format!("http://{}", listener.local_addr().unwrap());
    let _held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let (status, answer) = f.post("api/connect", json!({ "url": hanging, "timeout_secs": 1 })).await;
    assert_eq!(status, 504, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by the timeout");

    let (_, connected) = f.post("api/connect", json!({ "url": f.delegate })).await;
    let id = connected["connection"].as_u64().unwrap();
    let (status, answer) =
        f.post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": "x" })).await;
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().contains("does not fit the skill's schema"), "{answer}");
    let (status, answer) = f
        .post(
            &format!("api/connections/{id}/call"),
            json!({ "skill": "count", "input": 1, "contract": { "policy": 3 } }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().starts_with("contract:"), "{answer}");
    let (status, answer) = f.post("api/connections/999/call", json!({ "skill": "count", "input": 1 })).await;
    assert_eq!((status, answer["kind"].as_str().unwrap()), (404, "not_found"));
    let (status, answer) = f.post("api/lctl", json!({ "text": "lctl: [" })).await;
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().contains("not an LCTL document"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_runs_and_the_guards_hold() {
    let f = fixture().await;
    let (_, connected) = f.post("api/connect", json!({ "url": f.delegate })).await;
    let id = connected["connection"].as_u64().unwrap();
    let (status, report) = f.post(&format!("api/connections/{id}/conformance"), json!({ "level": "must" })).await;
    assert_eq!(status, 200, "{report}");
    // The counter's typed input refuses the kit's sample inputs, so some checks fail: the report says which (the
    // browser test runs the kit against the echo delegate, which passes).
    assert_eq!(report["passed"], false, "{}", report["summary"]);
    assert_eq!(report["summary"]["requirements"], report["requirements"].as_array().unwrap().len());
    assert!(report["requirements"].as_array().unwrap().len() > 20);
    let failed = report["requirements"].as_array().unwrap().iter().find(|r| r["outcome"] == "failure").unwrap();
    assert!(!failed["details"].as_array().unwrap().is_empty(), "a failure comes with its explanation: {failed}");

    // Another site's page cannot reach the API: a foreign Host, or a write that is not JSON.
    let response =
        f.http.get(format!("{}api/defaults", f.inspector)).header("Host", "attacker.example").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let response = f
        .http
        .post(format!("{}api/lctl", f.inspector))
        .header("Content-Type", "text/plain")
        .body(r#"{"text":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    // The page itself: embedded, with a policy that keeps it to its own origin.
    let page = f.http.get(&f.inspector).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    assert!(page.text().await.unwrap().contains("<script type=\"module\" src=\"/app.js\">"));
    // A non-loopback address is refused.
    let refused =
        ldp_inspect::serve("0.0.0.0:0".parse().unwrap(), ldp_inspect::Inspector::new(Default::default())).await;
    assert!(matches!(refused, Err(ldp_inspect::InspectError::Start(m)) if m.contains("loopback")));
}

/// A `ws://` delegate URL is inspected through the WebSocket transport: the session, a streamed task (its partial
/// outputs pushed as frames), its result and chain, the wire log, and a cancel, as over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_url_is_inspected_over_the_websocket() {
    let f = fixture().await;
    let ws = f.delegate.replacen("http://", "ws://", 1);
    let (status, connected) = f.post("api/connect", json!({ "url": ws })).await;
    assert_eq!(status, 200, "{connected}");
    assert_eq!(connected["url"], ws, "{connected}");
    assert_eq!(connected["view"]["card"]["delegate_id"], "ldp:delegate:counter");
    let id = connected["connection"].as_u64().unwrap();

    let n = 4;
    let (status, started) =
        f.post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": n })).await;
    assert_eq!(status, 200, "{started}");
    let events = f.events(started["task"].as_u64().unwrap()).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "partial").count(), n, "{kinds:?}");
    let result = events.last().unwrap();
    assert_eq!((result["kind"].as_str(), &result["output"]), (Some("result"), &json!(n)), "{result}");
    assert_eq!(result["provenance"]["produced_by"], "ldp:delegate:counter");

    // What crossed the WebSocket, both ways, as the tap saw it.
    let (_, wire) = f.get(&format!("api/connections/{id}/wire")).await;
    let types: Vec<(&str, &str)> = wire["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["direction"].as_str().unwrap(), e["message_type"].as_str().unwrap()))
        .collect();
    for expected in [
        ("out", "HELLO"),
        ("in", "CAPABILITY_MANIFEST"),
        ("out", "SESSION_PROPOSE"),
        ("in", "SESSION_ACCEPT"),
        ("out", "TASK_SUBMIT"),
        ("in", "TASK_UPDATE"),
        ("in", "TASK_RESULT"),
    ] {
        assert!(types.contains(&expected), "{expected:?} in {types:?}");
    }
    let (status, chain) = f.get(&format!("api/tasks/{}/chain", started["task"])).await;
    assert_eq!(status, 200, "{chain}");
    assert_eq!(chain["steps"][0]["agent"], "ldp:delegate:counter");

    // A cancel travels over the same socket.
    let (_, long) = f.post(&format!("api/connections/{id}/call"), json!({ "skill": "count", "input": 400 })).await;
    let task = long["task"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, answer) = f.post(&format!("api/tasks/{task}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let last = f.events(task).await.pop().unwrap();
    assert_eq!((last["kind"].as_str(), last["detail"]["code"].as_str()), (Some("failed"), Some("CANCELLED")), "{last}");
}
