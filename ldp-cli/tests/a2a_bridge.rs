#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The A2A bridges, driven by the official A2A Python SDK (`a2a-sdk` on PyPI, installed by
//! `scripts/bridge-sdks.sh`): its client against `ldp serve --a2a` (fetch the card, send, stream with progress, get,
//! cancel, which must reach the model as TASK_CANCEL), hostile requests answered with typed JSON-RPC errors, and an
//! a2a-sdk agent behind `ldp serve --backend a2a` as an LDP delegate.

use crate::support;
use ldp_session::runtime::Submission;

use std::process::Stdio;
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use serde_json::{Value, json};
use support::{run_bridge_script, serve};

/// Runs `tests/bridge/a2a_client.py URL TOKEN STEPS` on a blocking thread.
async fn a2a_client(url: &str, token: Option<&str>, steps: &[String]) -> Value {
    let mut args = vec![url.to_owned(), token.unwrap_or("-").to_owned()];
    args.extend(steps.iter().cloned());
    tokio::task::spawn_blocking(move || run_bridge_script("a2a_client.py", &args, Duration::from_secs(120)))
        .await
        .unwrap()
}

async fn ldp_card(url: &str) -> Value {
    reqwest::get(format!("{url}/.well-known/ldp-identity")).await.unwrap().json().await.unwrap()
}

/// A model that streams its answer (an echo of the input) one piece per 20 ms.
async fn stub() -> Stub {
    let config = StubConfig::new(Flavor::OpenAi).with_model("stub-7b-2025").with_token_delay(Duration::from_millis(20));
    Stub::start(config).await.unwrap()
}

fn text_of(message: &Value) -> String {
    message["parts"].as_array().into_iter().flatten().filter_map(|p| p["text"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_client_sends_streams_gets_and_cancels_through_ldp_serve() {
    let stub = stub().await;
    let base = stub.base_url();
    let args = ["--backend", "openai", "--base-url", &base, "--model", "stub-7b", "--skill", "chat", "--a2a"];
    let (_server, url) = serve(&args, Stdio::null());
    let card = ldp_card(&url).await;
    let long = "w ".repeat(400);
    let steps = [
        json!({"text": "one two three four", "skill": "chat"}).to_string(),
        json!({"text": "x", "skill": "no-such-skill"}).to_string(),
        json!({"text": long, "skill": "chat"}).to_string(),
    ];
    let steps = [
        format!("stream:{}", steps[0]),
        "get".to_owned(),
        "cancel-ended".to_owned(),
        format!("send:{}", steps[1]),
        format!("cancel:{}:3", steps[2]),
        "get-unknown".to_owned(),
    ];
    let out = a2a_client(&url, None, &steps).await;

    // The card: the identity card's skills, streaming, the JSON-RPC interface, no security scheme (no tokens).
    let agent = &out["card"];
    assert_eq!(agent["name"], card["name"]);
    assert_eq!(agent["skills"][0]["id"], "chat");
    assert_eq!(agent["capabilities"]["streaming"], true);
    assert_eq!(agent["supportedInterfaces"][0]["url"], format!("{url}/a2a"));
    assert_eq!(agent["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert!(agent.get("securitySchemes").is_none(), "{agent}");
    assert_eq!(agent["capabilities"]["extensions"][0]["params"]["delegate_id"], card["delegate_id"]);

    // Streaming: the task, WORKING, one status update per streamed piece (TASK_UPDATE), the artifact, COMPLETED.
    let events = out["steps"][0]["events"].as_array().unwrap();
    assert_eq!(events[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{events:?}");
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["statusUpdate"]["metadata"]["ldp/progress"].is_object())
        .map(|e| &e["statusUpdate"])
        .collect();
    assert!(progress.len() >= 2, "one status update per streamed piece: {events:?}");
    let streamed: String = progress.iter().map(|u| text_of(&u["status"]["message"])).collect();
    let artifact = &events.iter().find(|e| e["artifactUpdate"].is_object()).unwrap()["artifactUpdate"]["artifact"];
    assert_eq!(streamed, text_of(artifact), "the pieces add up to the output");
    assert_eq!(events.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    let provenance = &artifact["metadata"]["ldp/provenance"];
    assert_eq!(provenance["produced_by"], card["delegate_id"]);
    assert_eq!(provenance["model_version"], "stub-7b-2025", "the model that answered");

    // GetTask: the ended task with its provenance; CancelTask of it: A2A's not-cancelable error.
    let task = &out["steps"][1]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["metadata"]["ldp/provenance"], *provenance);
    assert_eq!(out["steps"][2]["error"], "TaskNotCancelableError", "{}", out["steps"][2]);

    // A skill the delegate lacks: the LDP responder's refusal, typed, on a FAILED task.
    let failed = &out["steps"][3]["events"][0]["task"];
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED", "{failed}");
    assert_eq!(failed["metadata"]["ldp/error"]["code"], "SKILL_NOT_FOUND");

    // CancelTask mid-stream: TASK_CANCEL reached the model (its stream closed), the task is CANCELED.
    let cancel = &out["steps"][4];
    assert_eq!(cancel["cancelled"]["status"]["state"], "TASK_STATE_CANCELED", "{cancel}");
    assert_eq!(cancel["cancelled"]["metadata"]["ldp/error"]["code"], "CANCELLED");
    let last = cancel["events"].as_array().unwrap().last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED", "{cancel}");
    let started = Instant::now();
    while stub.cancelled_streams() < 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "the provider's stream was not closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // An unknown task: A2A's task-not-found, the LDP error in the data.
    let unknown = &out["steps"][5];
    assert_eq!(unknown["error"], "TaskNotFoundError", "{unknown}");
    assert_eq!(unknown["data"]["code"], "TASK_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_card_declares_the_bearer_tokens_the_binding_requires() {
    let (_server, url) = serve(&["--a2a", "--token", "s3cret=default"], Stdio::null());
    let send = json!({"data": {"n": 1}}).to_string();
    let out = a2a_client(&url, Some("s3cret"), &[format!("send:{send}")]).await;
    let schemes = &out["card"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer", "{}", out["card"]);
    assert!(out["card"]["securityRequirements"].to_string().contains("bearer"), "{}", out["card"]);
    let task = &out["steps"][0]["events"][0]["task"];
    assert_eq!(task["artifacts"][0]["parts"][0]["data"], json!({"echo": {"n": 1.0}}), "{task}");
    let status = reqwest::Client::new().post(format!("{url}/a2a")).body("{}").send().await.unwrap().status();
    assert_eq!(status, 401, "the binding needs the token the card declares");
    // Without --a2a there is neither card nor binding.
    let (_plain, plain) = serve(&[], Stdio::null());
    assert_eq!(reqwest::get(format!("{plain}/.well-known/agent-card.json")).await.unwrap().status(), 404);
}

/// POSTs `body` to `/a2a` and returns the status and the JSON-RPC answer, within 10 s (never a hang).
async fn rpc(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let send =
        reqwest::Client::new().post(format!("{url}/a2a")).header("content-type", "application/json").body(body).send();
    let response = tokio::time::timeout(Duration::from_secs(10), send).await.expect("no answer in 10 s").unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_typed_json_rpc_errors() {
    let (_server, url) = serve(&["--a2a", "--a2a-max-body", "4096"], Stdio::null());
    let call = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});

    let (status, big) = rpc(&url, vec![b' '; 8192]).await;
    assert_eq!((status, &big["error"]["code"]), (413, &json!(-32600)), "{big}");
    assert_eq!(big["error"]["data"][0]["reason"], "MESSAGE_TOO_LARGE");
    let cases = [
        ("{not json".to_owned(), -32700),
        ("[1, 2]".to_owned(), -32600),
        (json!({"jsonrpc": "2.0", "id": 7}).to_string(), -32600),
        (call("tasks/resubscribe", json!({})).to_string(), -32601),
        (call("SendMessage", json!({"message": 3})).to_string(), -32602),
        (call("GetTask", json!({"id": "nope"})).to_string(), -32001),
        (call("CancelTask", json!({"id": "nope"})).to_string(), -32001),
    ];
    for (body, code) in cases {
        let (status, answer) = rpc(&url, body.clone()).await;
        assert_eq!((status, &answer["error"]["code"]), (200, &json!(code)), "{body} -> {answer}");
        assert_eq!(answer["jsonrpc"], "2.0");
    }
    // Not JSON by its content type (what a cross-origin page can send without a preflight): refused before reading.
    let plain = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .header("content-type", "text/plain")
        .body(call("message/send", json!({})).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    assert_eq!(plain.json::<Value>().await.unwrap()["error"]["code"], -32600);
    let (_, unknown) = rpc(&url, call("GetTask", json!({"id": "nope"})).to_string()).await;
    assert_eq!(unknown["id"], 7);
    assert_eq!(unknown["error"]["data"][1]["ldp/error"]["code"], "TASK_NOT_FOUND", "{unknown}");

    // The 0.3 method names answer in 0.3's shapes.
    let message =
        json!({"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}]});
    let (status, sent) = rpc(&url, call("message/send", json!({"message": message})).to_string()).await;
    assert_eq!(status, 200);
    let task = &sent["result"];
    assert_eq!((&task["kind"], &task["status"]["state"]), (&json!("task"), &json!("completed")), "{sent}");
    assert_eq!(task["artifacts"][0]["parts"][0], json!({"kind": "data", "data": {"echo": "hi"}}));
    let (_, got) = rpc(&url, call("tasks/get", json!({"id": task["id"]})).to_string()).await;
    assert_eq!(got["result"]["id"], task["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_sdk_agent_behind_ldp_serve_is_an_ldp_delegate() {
    let dir = support::TempDir::new("a2a-backend");
    let markers = dir.path("");
    let (_agent, agent_url) = support::a2a_agent(&markers);
    let (_server, url) = serve(&["--backend", "a2a", "--a2a-url", &agent_url], Stdio::inherit());

    // The generated card: the agent's skills, name and version, the model undeclared, no quality claim, the skills'
    // tags kept as the agent's own word.
    let card = ldp_card(&url).await;
    let names: Vec<&str> =
        card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shout", "slow", "fail", "ask", "count", "flaky"]);
    assert_eq!((&card["model_family"], &card["model_version"]), (&json!("undeclared"), &json!("undeclared")));
    assert_eq!(card["bridged_from"]["protocol"], "a2a");
    assert_eq!(card["bridged_from"]["agent"], json!({"name": "bridge-test-agent", "version": "2.7.1"}));
    assert!(card["capabilities"].as_array().unwrap().iter().all(|c| c.get("quality").is_none()), "{card}");
    assert_eq!(card["capabilities"][0]["a2a_skill"]["claim_type"], "self_claimed");

    // A call, with the provenance the LDP responder stamps and the A2A task as evidence.
    let ldp = ldp::connect(&url).await.unwrap();
    let shout: ldp::Answer<Value> = ldp.call("shout", json!("hello a2a")).await.unwrap();
    assert_eq!(shout.output, json!("HELLO A2A"));
    assert_eq!(shout.provenance.produced_by, card["delegate_id"].as_str().unwrap());
    assert_eq!(shout.provenance.model_version, "undeclared");
    assert!(shout.provenance.evidence.iter().any(|e| e.kind == "a2a_task"), "{:?}", shout.provenance);

    // A failed A2A task is a typed LDP failure.
    let err = ldp.call::<Value>("fail", json!("no")).await.unwrap_err();
    let ldp::Error::Session(ldp::session::SessionError::Peer(err)) = err else { panic!("{err:?}") };
    assert_eq!(err.code.as_str(), "A2A_TASK_FAILED");
    assert!(err.message.contains("refused: no"), "{err:?}");

    // A2A status updates arrive as TASK_UPDATEs; TASK_CANCEL reaches the agent as CancelTask.
    let session = ldp.session().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let key = std::sync::Mutex::new(None);
    let note = |k: &ldp::session::TaskKey| *key.lock().unwrap() = Some(k.clone());
    let submit =
        ldp.client().submit_task(Submission::new(&session, "slow", json!({"steps": 3})).progress(tx).on_key(note));
    let watch = async {
        let mut updates = Vec::new();
        while updates.len() < 3 {
            let update = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
            updates.push(update.message);
        }
        let key = key.lock().unwrap().clone().unwrap();
        ldp.client().cancel(&key).await.unwrap();
        updates
    };
    let (cancelled, updates) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(submit, watch) })
        .await
        .expect("the slow task neither progressed nor ended within 60 s");
    assert_eq!(updates, [Some("step 1".into()), Some("step 2".into()), Some("step 3".into())]);
    assert_eq!(cancelled.unwrap_err().to_ldp_error().code.as_str(), "CANCELLED");
    let marker = std::path::Path::new(&markers).join("cancel-called");
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "the A2A agent's task was not cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
