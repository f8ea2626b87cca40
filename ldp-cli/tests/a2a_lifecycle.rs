//! The A2A task lifecycle through both bridges at once, driven by the official A2A Python SDK (`a2a-sdk`): its
//! client against `ldp serve --a2a --backend a2a`, whose delegate is an a2a-sdk agent. Multi-turn (the agent's
//! `input-required` crossing LDP as an `INPUT_REQUIRED` turn and back), GetTask's history, ListTasks, SubscribeToTask
//! after a dropped stream (on the client side, and on the bridge's own stream to the agent, which an LDP client
//! follows to the end), and push notifications to receivers in this test that work, answer 500, are slow or are
//! down, with the non-public address rule.

use crate::support;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ldp_session::runtime::Submission;
use serde_json::{Value, json};
use support::{run_bridge_script, serve};

/// Runs `tests/bridge/a2a_client.py URL - STEPS` on a blocking thread.
async fn a2a_client(url: &str, steps: &[String]) -> Value {
    let mut args = vec![url.to_owned(), "-".to_owned()];
    args.extend(steps.iter().cloned());
    tokio::task::spawn_blocking(move || run_bridge_script("a2a_client.py", &args, Duration::from_secs(180)))
        .await
        .unwrap()
}

fn text_of(message: &Value) -> String {
    message["parts"].as_array().into_iter().flatten().filter_map(|p| p["text"].as_str()).collect()
}

fn last_state(events: &Value) -> Value {
    let last = events.as_array().and_then(|e| e.last()).cloned().unwrap_or(Value::Null);
    last["statusUpdate"]["status"]["state"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_drives_multi_turn_list_history_and_resubscribe_through_both_bridges() {
    let dir = support::TempDir::new("a2a-lifecycle");
    let markers = dir.path("");
    let (_agent, agent_url) = support::a2a_agent(&markers);
    let (_server, url) = serve(&["--backend", "a2a", "--a2a-url", &agent_url, "--a2a"], Stdio::inherit());

    let count = |n: u32, pause: f64| json!({"data": {"n": n, "pause": pause}, "skill": "count"}).to_string();
    let steps = [
        format!("stream:{}", json!({"text": "alice?", "skill": "ask"})),
        "reply:bob".to_owned(),
        "history:10".to_owned(),
        "history:1".to_owned(),
        format!("stream:{}", count(2, 0.05)),
        "list:{\"context\": \"last\", \"artifacts\": true}".to_owned(),
        "list:{}".to_owned(),
        "list:{\"size\": 1}".to_owned(),
        "list:{\"size\": 1, \"next\": true}".to_owned(),
        "list:{\"state\": \"TASK_STATE_INPUT_REQUIRED\"}".to_owned(),
        format!("drop:{}:3", count(6, 0.3)),
        "subscribe-ended".to_owned(),
    ];
    let out = a2a_client(&url, &steps).await;
    let step = |i: usize| &out["steps"][i];

    // Multi-turn: the agent's question reaches the A2A client as INPUT_REQUIRED (through LDP's INPUT_REQUIRED
    // turn); the reply continues the same task, at the agent too (it greets the reply and names the first message).
    let asked = &step(0)["events"];
    assert_eq!(last_state(asked), "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let question = &asked.as_array().unwrap().last().unwrap()["statusUpdate"]["status"]["message"];
    assert_eq!(text_of(question), "who is asking?");
    let task_id = asked[0]["task"]["id"].as_str().unwrap().to_owned();
    let replied = &step(1)["events"];
    assert_eq!(last_state(replied), "TASK_STATE_COMPLETED", "{replied}");
    assert_eq!(replied[0]["task"]["id"], task_id.as_str(), "the reply continues the task");
    let artifact = replied.as_array().unwrap().iter().find_map(|e| e["artifactUpdate"]["artifact"].as_object());
    assert_eq!(text_of(&json!(artifact.unwrap())), "hello bob, you asked alice?");

    // GetTask's history: the user's turns and the agent's question, in order; historyLength keeps the latest.
    let history = step(2)["task"]["history"].as_array().unwrap().clone();
    let said: Vec<(String, String)> =
        history.iter().map(|m| (m["role"].as_str().unwrap().to_owned(), text_of(m))).collect();
    let expected = [("ROLE_USER", "alice?"), ("ROLE_AGENT", "who is asking?"), ("ROLE_USER", "bob")];
    assert_eq!(said, expected.map(|(r, t)| (r.to_owned(), t.to_owned())), "{history:?}");
    assert!(history.iter().all(|m| m["taskId"] == task_id.as_str()), "{history:?}");
    let latest = step(3)["task"]["history"].as_array().unwrap().clone();
    assert_eq!(latest, history[2..].to_vec());

    // ListTasks: by context (with artifacts), all of them newest first, paged, by state.
    let counted = &step(4)["events"];
    assert_eq!(last_state(counted), "TASK_STATE_COMPLETED", "{counted}");
    let count_id = counted[0]["task"]["id"].as_str().unwrap();
    let in_context = &step(5)["list"];
    assert_eq!(in_context["tasks"].as_array().unwrap().len(), 1, "{in_context}");
    assert_eq!(in_context["tasks"][0]["id"], count_id);
    assert_eq!(text_of(&in_context["tasks"][0]["artifacts"][0]), "counted 2");
    let all = step(6)["list"]["tasks"].as_array().unwrap().clone();
    let ids: Vec<&str> = all.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [count_id, task_id.as_str()], "newest first");
    assert!(all.iter().all(|t| t.get("artifacts").is_none()), "artifacts only when asked: {all:?}");
    let (first, second) = (&step(7)["list"], &step(8)["list"]);
    assert_eq!(
        (first["tasks"][0]["id"].as_str(), second["tasks"][0]["id"].as_str()),
        (Some(count_id), Some(&*task_id))
    );
    assert_eq!((first["totalSize"].as_i64(), second["totalSize"].as_i64()), (Some(2), Some(2)));
    assert!(first["nextPageToken"].as_str().is_some_and(|t| !t.is_empty()), "{first}");
    assert!(second.get("nextPageToken").is_none_or(|t| t == ""), "the last page: {second}");
    assert!(step(9)["list"].get("tasks").is_none_or(|t| t == &json!([])), "none waits for input: {}", step(9));

    // SubscribeToTask after the client dropped its stream: the rest of the task, to its end.
    let dropped = step(10);
    assert_eq!(dropped["events"].as_array().unwrap().len(), 3, "{dropped}");
    let resumed = &dropped["resumed"];
    assert_eq!(resumed[0]["task"]["id"], dropped["events"][0]["task"]["id"], "{resumed}");
    assert_eq!(last_state(resumed), "TASK_STATE_COMPLETED", "{resumed}");
    let steps_seen: Vec<String> = dropped["events"]
        .as_array()
        .unwrap()
        .iter()
        .chain(resumed.as_array().unwrap())
        .filter_map(|e| e["statusUpdate"]["status"]["message"].as_object())
        .map(|m| text_of(&json!(m)))
        .collect();
    assert!(steps_seen.contains(&"step 6".to_owned()), "{steps_seen:?}");
    assert_eq!(text_of(&dropped["task"]["artifacts"][0]), "counted 6");
    // A task that ended has nothing more to stream: A2A's unsupported operation.
    assert_eq!(step(11)["error"], "UnsupportedOperationError", "{}", step(11));

    // From the LDP side: a long task whose A2A stream (the bridge's, to the agent) is cut half-way is followed to
    // its end through SubscribeToTask, every step arriving as a TASK_UPDATE.
    let ldp = ldp::connect(&url).await.unwrap();
    let session = ldp.session().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(32);
    let submit =
        ldp.client().submit_task(Submission::new(&session, "flaky", json!({"n": 5, "pause": 0.3})).progress(tx));
    let watch = async {
        let mut messages = Vec::new();
        while let Some(update) = rx.recv().await {
            messages.extend(update.message);
        }
        messages
    };
    let (done, messages) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(submit, watch) })
        .await
        .expect("the flaky task did not end within 60 s");
    assert_eq!(done.unwrap().output.to_value().unwrap(), json!("counted 5"));
    assert!(std::path::Path::new(&markers).join("stream-cut").exists(), "the agent's stream was never cut");
    assert_eq!(messages.last().map(String::as_str), Some("step 5"), "{messages:?}");
}

/// What a webhook receiver of the test got: per path, each request's headers of interest and body.
type Received = Arc<Mutex<HashMap<String, Vec<(HashMap<String, String>, Value)>>>>;
/// Requests per path so far.
type Hits = Arc<Mutex<HashMap<String, u32>>>;

/// A webhook receiver on loopback: `/ok/*` answers 204; `/flaky` answers 500 to its first two requests; `/slow`
/// holds its first request 3 s (past the bridge's 1 s attempt timeout). Every request is recorded, also the ones
/// answered 500.
async fn receiver() -> (String, Received) {
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode};
    let received: Received = Arc::default();
    let attempts: Hits = Arc::default();
    let record = |received: &Received, path: String, headers: &HeaderMap, body: Value| {
        let keep = ["authorization", "x-a2a-notification-token", "a2a-version"];
        let headers = keep
            .iter()
            .filter_map(|k| headers.get(*k).map(|v| (k.to_string(), v.to_str().unwrap_or_default().to_owned())))
            .collect();
        received.lock().unwrap().entry(path).or_default().push((headers, body));
    };
    let state = (received.clone(), attempts.clone());
    let app = axum::Router::new()
        .route(
            "/{*path}",
            axum::routing::post(
                move |State((received, attempts)): State<(Received, Hits)>,
                      Path(path): Path<String>,
                      headers: HeaderMap,
                      axum::Json(body): axum::Json<Value>| async move {
                    // How many requests this path had before this one.
                    let n = {
                        let mut hits = attempts.lock().unwrap();
                        let n = hits.entry(path.clone()).or_default();
                        *n += 1;
                        *n - 1
                    };
                    if path == "slow" && n == 0 {
                        record(&received, "slow-held".into(), &headers, body);
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        return StatusCode::NO_CONTENT;
                    }
                    record(&received, path.clone(), &headers, body);
                    if path == "flaky" && n < 2 { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::NO_CONTENT }
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// The states of the status updates `path` was sent (the ones it answered 500 to as well, in order).
fn states(received: &Received, path: &str) -> Vec<String> {
    let received = received.lock().unwrap();
    received
        .get(path)
        .into_iter()
        .flatten()
        .filter_map(|(_, body)| body["statusUpdate"]["status"]["state"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_notifications_reach_webhooks_with_auth_retries_and_the_address_rules() {
    let dir = support::TempDir::new("a2a-push");
    let (_agent, agent_url) = support::a2a_agent(&dir.path(""));
    let (hooks, received) = receiver().await;
    // A port nothing listens on: the receiver that is down.
    let down = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/down", socket.local_addr().unwrap())
    };
    let args = [
        "--backend",
        "a2a",
        "--a2a-url",
        &agent_url,
        "--a2a",
        "--a2a-push-allowed-host",
        "127.0.0.1",
        "--a2a-push-timeout",
        "1000",
    ];
    let (_server, url) = serve(&args, Stdio::inherit());
    let task = |n: u32, pause: f64, push: Value| {
        json!({"data": {"n": n, "pause": pause}, "skill": "count", "push": push}).to_string()
    };
    let localhost = hooks.replace("127.0.0.1", "localhost");
    let steps = [
        format!("push-send:{}", task(2, 0.2, json!({"url": format!("{hooks}/ok/1"), "token": "tok-1", "auth": "s3"}))),
        "follow".to_owned(),
        format!("push-send:{}", task(6, 0.4, json!({"url": format!("{hooks}/flaky"), "id": "flaky"}))),
        format!("push-create:{}", json!({"url": format!("{hooks}/slow"), "id": "slow"})),
        format!("push-create:{}", json!({"url": down, "id": "down"})),
        format!("push-create:{}", json!({"url": format!("{hooks}/ok/gone"), "id": "gone"})),
        "push-delete:gone".to_owned(),
        "push-get:slow".to_owned(),
        "push-list".to_owned(),
        format!("push-create:{}", json!({"url": format!("{localhost}/ok/2"), "id": "local"})),
        format!("push-create:{}", json!({"url": "http://169.254.169.254/latest", "id": "metadata"})),
        "follow".to_owned(),
    ];
    let out = a2a_client(&url, &steps).await;
    let step = |i: usize| &out["steps"][i];
    assert_eq!(out["card"]["capabilities"]["pushNotifications"], true, "{}", out["card"]);

    // The configs: stored with their ids, listed, one deleted; a host resolving to loopback (not the allowed
    // 127.0.0.1) and the cloud metadata address are refused.
    assert_eq!(step(3)["config"]["id"], "slow", "{}", step(3));
    assert_eq!(step(7)["config"]["url"], format!("{hooks}/slow"));
    let mut listed: Vec<&str> =
        step(8)["configs"]["configs"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    listed.sort_unstable();
    assert_eq!(listed, ["down", "flaky", "slow"]);
    for refused in [step(9), step(10)] {
        assert_eq!(refused["error"], "InvalidParamsError", "{refused}");
        assert!(refused["message"].as_str().unwrap().contains("non-public address"), "{refused}");
    }
    assert_eq!(last_state(&step(1)["events"]), "TASK_STATE_COMPLETED", "{}", step(1));
    assert_eq!(last_state(&step(11)["events"]), "TASK_STATE_COMPLETED", "{}", step(11));

    // Every working receiver gets each task's events in order, ending COMPLETED: the plain one with its token and
    // credentials, the one answering 500 after retries, the slow one after its attempt timed out.
    let started = Instant::now();
    let ended = |path: &str| states(&received, path).last().is_some_and(|s| s == "TASK_STATE_COMPLETED");
    while !(ended("ok/1") && ended("flaky") && ended("slow")) {
        assert!(started.elapsed() < Duration::from_secs(60), "pushes missing: {:?}", received.lock().unwrap().keys());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ok = received.lock().unwrap()["ok/1"].clone();
    let (headers, first) = &ok[0];
    assert_eq!(headers.get("authorization").map(String::as_str), Some("Bearer s3"));
    assert_eq!(headers.get("x-a2a-notification-token").map(String::as_str), Some("tok-1"));
    assert_eq!(headers.get("a2a-version").map(String::as_str), Some("1.0"));
    assert_eq!(first["statusUpdate"]["taskId"], step(0)["events"][0]["task"]["id"]);
    assert!(ok.iter().any(|(_, b)| text_of(&b["artifactUpdate"]["artifact"]) == "counted 2"), "{ok:?}");
    let flaky = states(&received, "flaky");
    assert_eq!(&flaky[..3], ["TASK_STATE_WORKING"; 3], "the first event, twice refused, then accepted: {flaky:?}");
    let held = received.lock().unwrap().get("slow-held").cloned().unwrap_or_default();
    assert_eq!(held.len(), 1, "the slow receiver held the first attempt");
    let retried = received.lock().unwrap()["slow"][0].1.clone();
    assert_eq!(held[0].1, retried, "the event whose attempt timed out was sent again");
    assert!(received.lock().unwrap().get("ok/gone").is_none(), "a deleted config gets nothing");
    assert!(received.lock().unwrap().keys().all(|k| !k.starts_with("ok/2")), "a refused config gets nothing");
}
