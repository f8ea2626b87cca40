#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The MCP bridges, driven by the official MCP Python SDK (`mcp` on PyPI, installed by `scripts/bridge-sdks.sh`)
//! as a real MCP host: `ldp serve --mcp` (Streamable HTTP at /mcp) and `ldp mcp-proxy URL` (stdio). The host lists
//! the tools, calls one and reads its provenance, gets progress while a model streams, and cancels a call, which
//! must reach the delegate as TASK_CANCEL (the provider's stream closes).

use crate::support;
use ldp_session::runtime::Submission;

use std::process::Stdio;
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use serde_json::{Value, json};
use support::{bridge_python, repo, run_bridge_script, serve};

/// Runs `tests/bridge/mcp_client.py TARGET MODE STEPS` (at most 120 s) and returns what it printed.
async fn mcp_client(target: &str, mode: &str, steps: &[&str]) -> Value {
    let mut args = vec![target.to_owned(), mode.to_owned()];
    args.extend(steps.iter().map(|s| (*s).to_owned()));
    tokio::task::spawn_blocking(move || run_bridge_script("mcp_client.py", &args, Duration::from_secs(120)))
        .await
        .unwrap()
}

async fn card(url: &str) -> Value {
    reqwest::get(format!("{url}/.well-known/ldp-identity")).await.unwrap().json().await.unwrap()
}

/// What every bridge must show for the echo delegate: its skill as a tool, with its claim's type; a call's output as
/// structured content with the task's provenance; a bad call as a typed tool error.
fn check_echo(out: &Value, card: &Value) {
    assert_eq!(out["server_info"]["name"], card["delegate_id"]);
    let tools = out["steps"][0]["list"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let skills: Vec<&str> =
        card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, skills);
    let echo = &tools[0];
    assert_eq!(echo["inputSchema"]["required"], json!(["input"]), "{echo}");
    assert_eq!(echo["_meta"]["ldp/capability"], card["capabilities"][0], "the tool carries the capability as carded");

    let call = &out["steps"][1]["call"];
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(call["structuredContent"], json!({"echo": {"x": [1, 2]}}));
    let text: Value = serde_json::from_str(call["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, call["structuredContent"]);
    let provenance = &call["_meta"]["ldp/provenance"];
    assert_eq!(provenance["produced_by"], card["delegate_id"]);
    assert_eq!(provenance["model_version"], card["model_version"]);
    assert!(provenance["session_id"].as_str().is_some_and(|s| !s.is_empty()), "{provenance}");

    let bad = &out["steps"][2]["call"];
    assert_eq!(bad["isError"], true, "{bad}");
    assert_eq!(bad["structuredContent"]["error"]["code"], "INVALID_INPUT");
    assert_eq!(bad["_meta"]["ldp/error"]["category"], "capability");
}

const ECHO_STEPS: [&str; 3] = ["list", r#"call:echo:{"input": {"x": [1, 2]}}"#, "call:echo:{}"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_lists_and_calls_the_skills_of_ldp_serve() {
    let (_server, url) = serve(&["--mcp"], Stdio::null());
    let card = card(&url).await;
    // The handshake (an MCP session, hence one LDP session) and the discovery probe of the newer protocol.
    for mode in ["legacy", "auto"] {
        let out = mcp_client(&format!("{url}/mcp"), mode, &ECHO_STEPS).await;
        check_echo(&out, &card);
    }
    // Without --mcp there is no /mcp.
    let (_plain, plain) = serve(&[], Stdio::null());
    let status = reqwest::Client::new().post(format!("{plain}/mcp")).body("{}").send().await.unwrap().status();
    assert_eq!(status, 404);
}

/// `logging/setLevel` turns on the session's task events as `notifications/message`, at the level asked for; before
/// it, none arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_events_reach_a_host_that_asks_for_them_as_log_messages() {
    let (_server, url) = serve(&["--mcp"], Stdio::null());
    let target = format!("{url}/mcp");
    let call = r#"call:echo:{"input": "logged"}"#;
    // Log lines ride the GET stream and may trail the result: each run waits (bounded) for those it expects, and
    // the quiet one for a moment, so that a line sent wrongly is seen.
    let quiet = mcp_client(&target, "legacy", &[call, "pause:0.3"]).await;
    assert_eq!(quiet["log"], json!([]), "log messages nobody asked for: {quiet}");

    let events = |out: &Value| -> Vec<String> {
        out["log"].as_array().unwrap().iter().filter_map(|m| m["data"]["event"].as_str().map(str::to_owned)).collect()
    };
    let info = mcp_client(&target, "legacy", &["loglevel:info", call, "awaitlog:1:10"]).await;
    assert_eq!(events(&info), ["task completed"], "info and above, not debug: {info}");
    let line = &info["log"][0];
    assert_eq!(line["level"], "info");
    assert_eq!(line["logger"], "ldp");
    assert_eq!(line["data"]["produced_by"], card(&url).await["delegate_id"]);
    let debug = mcp_client(&target, "legacy", &["loglevel:debug", call, "awaitlog:2:10"]).await;
    assert_eq!(events(&debug), ["task submitted", "task completed"], "{debug}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_proxy_puts_a_remote_delegate_on_stdio() {
    let (_server, url) = serve(&[], Stdio::null());
    let card = card(&url).await;
    let target = format!("stdio:{} mcp-proxy {url}", env!("CARGO_BIN_EXE_ldp"));
    let out = mcp_client(&target, "legacy", &ECHO_STEPS).await;
    check_echo(&out, &card);
}

/// Calls a streaming model delegate through `target`: the progress notifications carry its output as it streams,
/// and a cancelled call closes the provider's stream (TASK_CANCEL reached the delegate).
async fn progress_and_cancel(stub: &Stub, target: &str) {
    let long = "w ".repeat(400);
    let cancel = format!("cancel:chat:{}:0.3", json!({ "input": long }));
    let steps = [r#"call:chat:{"input": "one two three four"}"#, &cancel, "pause:3"].map(str::to_owned);
    let client = {
        let target = target.to_owned();
        tokio::spawn(async move {
            let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
            mcp_client(&target, "legacy", &steps).await
        })
    };
    // The provider's stream closes while the MCP session is still open (the host pauses in it): TASK_CANCEL ended
    // the task, not the end of the session.
    let started = Instant::now();
    while stub.cancelled_streams() < 1 {
        assert!(started.elapsed() < Duration::from_secs(60), "the provider's stream was not closed");
        assert!(!client.is_finished(), "the MCP session ended before the task was cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!client.is_finished(), "the MCP session ended before the task was cancelled");
    let out = client.await.unwrap();

    let call = &out["steps"][0];
    assert_eq!(call["call"]["isError"], false, "{call}");
    let progress = call["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "one notification per streamed piece: {call}");
    let streamed: String = progress.iter().map(|p| p["message"].as_str().unwrap()).collect();
    assert_eq!(streamed, call["call"]["content"][0]["text"].as_str().unwrap(), "the pieces add up to the output");
    let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "MCP progress must increase: {values:?}");
    // The model that answered (the provider's name for it), not the one configured.
    assert_eq!(call["call"]["_meta"]["ldp/provenance"]["model_version"], "stub-7b-2025");

    let cancelled = &out["steps"][1];
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    assert!(!cancelled["progress"].as_array().unwrap().is_empty());
}

/// A model that streams its answer (an echo of the input) one piece per 20 ms.
fn stub_config() -> StubConfig {
    StubConfig::new(Flavor::OpenAi).with_model("stub-7b-2025").with_token_delay(Duration::from_millis(20))
}

fn llm_args(stub: &Stub) -> Vec<String> {
    ["--backend", "openai", "--base-url", &stub.base_url(), "--model", "stub-7b", "--skill", "chat"]
        .map(str::to_owned)
        .to_vec()
}

/// `ldp serve --mcp` over the stub model (skill `chat`).
fn serve_llm_mcp(stub: &Stub) -> (support::Guard, String) {
    let mut args = llm_args(stub);
    args.push("--mcp".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serve(&args, Stdio::null())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_cancellation_cross_ldp_serve_mcp() {
    let stub = Stub::start(stub_config()).await.unwrap();
    let (_server, url) = serve_llm_mcp(&stub);
    progress_and_cancel(&stub, &format!("{url}/mcp")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_cancellation_cross_mcp_proxy() {
    let stub = Stub::start(stub_config()).await.unwrap();
    let args = llm_args(&stub);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_server, url) = serve(&args, Stdio::null());
    progress_and_cancel(&stub, &format!("stdio:{} mcp-proxy {url}", env!("CARGO_BIN_EXE_ldp"))).await;
}

/// An MCP `initialize` POST, with a bearer token when given.
async fn initialize(url: &str, token: Option<&str>) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_need_the_ldp_credentials_and_are_bounded() {
    let (_server, url) = serve(&["--mcp", "--token", "s3cret=default", "--mcp-max-sessions", "2"], Stdio::null());
    assert_eq!(initialize(&url, None).await.status(), 401, "no token");
    assert_eq!(initialize(&url, Some("wrong")).await.status(), 401, "unknown token");
    for _ in 0..2 {
        let ok = initialize(&url, Some("s3cret")).await;
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().contains_key("mcp-session-id"));
    }
    let full = initialize(&url, Some("s3cret")).await;
    assert_eq!(full.status(), 503);
    assert!(full.headers().contains_key("retry-after"));
    let body: Value = full.json().await.unwrap();
    assert_eq!(body["error"]["data"]["ldp/error"]["code"], "CAPACITY_EXCEEDED", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_behind_ldp_serve_is_an_ldp_delegate() {
    let dir = support::TempDir::new("mcp-backend");
    let markers = dir.path("");
    let script = repo().join("ldp-cli/tests/bridge/mcp_server.py");
    let command = format!("{} {} {markers}", bridge_python(), script.display());
    let (_server, url) = serve(&["--backend", "mcp", "--mcp-command", &command], Stdio::inherit());

    // The generated card: the server's tools, its name and version, the model undeclared, no quality claim, the
    // tools' annotations kept as the server's own word.
    let card = card(&url).await;
    let names: Vec<&str> =
        card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["add", "slow", "fail"]);
    assert_eq!((&card["model_family"], &card["model_version"]), (&json!("undeclared"), &json!("undeclared")));
    assert_eq!(
        card["bridged_from"],
        json!({"protocol": "mcp", "server": {"name": "bridge-test-server", "version": "3.1.4"}})
    );
    let slow = &card["capabilities"][1];
    assert_eq!(slow["mcp_annotations"]["claim_type"], "self_claimed", "{slow}");
    assert_eq!(slow["mcp_annotations"]["hints"]["readOnlyHint"], true);
    assert!(card["capabilities"].as_array().unwrap().iter().all(|c| c.get("quality").is_none()), "{card}");
    assert_eq!(card["capabilities"][0]["input_schema"]["properties"]["a"]["type"], "integer");
    assert_eq!(card["capabilities"][0]["output_schema"]["properties"]["sum"]["type"], "integer");

    // A call, with the provenance the LDP responder stamps.
    let ldp = ldp::connect(&url).await.unwrap();
    let sum: ldp::Answer<Value> = ldp.call("add", json!({"a": 2, "b": 40})).await.unwrap();
    assert_eq!(sum.output, json!({"sum": 42}));
    assert_eq!(sum.provenance.produced_by, card["delegate_id"].as_str().unwrap());
    assert_eq!(sum.provenance.model_version, "undeclared");

    // A tool error is a typed LDP failure.
    let err = ldp.call::<Value>("fail", json!({"reason": "no"})).await.unwrap_err();
    let ldp::Error::Session(ldp::session::SessionError::Peer(err)) = err else { panic!("{err:?}") };
    assert_eq!(err.code.as_str(), "TOOL_ERROR");
    assert!(err.message.contains("refused: no"), "{err:?}");

    // MCP progress arrives as TASK_UPDATEs; TASK_CANCEL reaches the MCP server as notifications/cancelled.
    let session = ldp.session().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let key = std::sync::Mutex::new(None);
    let note = |k: &ldp::session::TaskKey| *key.lock().unwrap() = Some(k.clone());
    let submit =
        ldp.client().submit_task(Submission::new(&session, "slow", json!({"steps": 3})).progress(tx).on_key(note));
    let watch = async {
        // Until the last step's update: an update overtaken by a later one is dropped as stale (the MCP SDK's
        // notifications may arrive out of order), so fewer than three may come, never one going backwards.
        let mut updates = Vec::new();
        while updates.last().is_none_or(|(progress, _)| *progress != Some(1.0)) {
            let update = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
            updates.push((update.progress, update.message));
        }
        let key = key.lock().unwrap().clone().unwrap();
        ldp.client().cancel(&key).await.unwrap();
        updates
    };
    let (cancelled, updates) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(submit, watch) })
        .await
        .expect("the slow task neither progressed nor ended within 60 s");
    // Each update is the step its message names, in increasing order, ending with the last.
    let mut step_before = 0;
    for (progress, message) in &updates {
        let step: u32 = message.as_deref().and_then(|m| m.strip_prefix("step ")).unwrap().parse().unwrap();
        assert!(step > step_before, "{updates:?}");
        assert_eq!(*progress, Some(f64::from(step) / 3.0), "{updates:?}");
        step_before = step;
    }
    assert_eq!(step_before, 3, "{updates:?}");
    assert_eq!(cancelled.unwrap_err().to_ldp_error().code.as_str(), "CANCELLED");
    let marker = std::path::Path::new(&markers).join("cancelled");
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "the MCP server's call was not cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_calls_of_one_mcp_session_are_bounded() {
    let stub = Stub::start(stub_config()).await.unwrap();
    // Each call streams 40 pieces, 20 ms apart: the three overlap.
    let concurrent = format!("concurrent:chat:{}:3", json!({ "input": "w ".repeat(40) }));
    let outcomes = |out: &Value| -> (usize, Vec<String>) {
        let results = out["steps"][0]["concurrent"].as_array().unwrap();
        assert_eq!(results.len(), 3, "{out}");
        let ok = results.iter().filter(|r| r["isError"] == false).count();
        let refusals = results
            .iter()
            .filter(|r| r["isError"] == true)
            .map(|r| r["structuredContent"]["error"]["code"].as_str().unwrap_or_default().to_owned())
            .collect();
        (ok, refusals)
    };
    for (limit, expected_ok) in [("1", 1), ("3", 3)] {
        let mut args = llm_args(&stub);
        args.extend(["--mcp", "--mcp-max-calls-per-session", limit].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_server, url) = serve(&args, Stdio::null());
        let out = mcp_client(&format!("{url}/mcp"), "legacy", &[&concurrent]).await;
        let (ok, refusals) = outcomes(&out);
        assert_eq!(ok, expected_ok, "limit {limit}: {out}");
        // Beyond the bound a call is refused at once, typed and retryable, not queued.
        assert!(refusals.iter().all(|code| code == "CAPACITY_EXCEEDED"), "limit {limit}: {refusals:?}");
        assert_eq!(refusals.len(), 3 - expected_ok);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_over_streamable_http_behind_ldp_serve_is_an_ldp_delegate() {
    let dir = support::TempDir::new("mcp-url");
    // The Python MCP server of `an_mcp_server_behind_ldp_serve_is_an_ldp_delegate`, on Streamable HTTP.
    let url_file = dir.path("mcp-url");
    let (_mcp, mcp_url) = support::bridge_server("mcp_server.py", &[&dir.path(""), &url_file, "mcp-secret"], &url_file);

    // The wrong token: the MCP server refuses the initialize, and `ldp serve` exits 2 saying why.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["serve", "--bind", "127.0.0.1:0", "--backend", "mcp", "--mcp-url", &mcp_url, "--mcp-token", "wrong"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--mcp-url") && stderr.contains("401"), "{stderr}");

    // The right one: the server's tools are the skills, and a call carries the responder's provenance.
    let args = ["--backend", "mcp", "--mcp-url", &mcp_url, "--mcp-token", "mcp-secret"];
    let (_server, url) = serve(&args, Stdio::inherit());
    let card = card(&url).await;
    let names: Vec<&str> =
        card["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["add", "slow", "fail"]);
    assert_eq!(card["bridged_from"]["server"]["name"], "bridge-test-server");
    let ldp = ldp::connect(&url).await.unwrap();
    let sum: ldp::Answer<Value> = ldp.call("add", json!({"a": 40, "b": 2})).await.unwrap();
    assert_eq!(sum.output, json!({"sum": 42}));
    assert_eq!(sum.provenance.produced_by, card["delegate_id"].as_str().unwrap());
    let err = ldp.call::<Value>("fail", json!({"reason": "over http"})).await.unwrap_err();
    let ldp::Error::Session(ldp::session::SessionError::Peer(err)) = err else { panic!("{err:?}") };
    assert_eq!(err.code.as_str(), "TOOL_ERROR");
    assert!(err.message.contains("refused: over http"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_result_provenance_and_lctl_chain_are_subscribable_resources() {
    let stub = Stub::start(stub_config()).await.unwrap();
    let (_server, url) = serve_llm_mcp(&stub);
    let card = card(&url).await;
    let input = "w ".repeat(60);
    let step = format!("resources:chat:{}", json!({ "input": input }));
    let out = mcp_client(&format!("{url}/mcp"), "legacy", &[&step]).await;
    let seen = &out["steps"][0]["resources"];
    let text = |read: &Value| read["contents"][0]["text"].as_str().unwrap().to_owned();

    // While the task runs: its result resource is listed (and nothing else), and reads as running.
    assert_eq!(seen["running_called"], false, "the call had ended before the resources were read: {seen}");
    let running: Value = serde_json::from_str(&text(&seen["running"])).unwrap();
    assert_eq!((&running["state"], &running["skill"]), (&json!("running"), &json!("chat")), "{running}");
    assert_eq!(seen["running_list"].as_array().unwrap().len(), 1, "{seen}");
    let task_id = running["task_id"].as_str().unwrap();
    let uri = |part: &str| format!("ldp://tasks/{task_id}/{part}");

    // After it: the result holds the tool's output, the provenance is the one on the tool result, and the LCTL
    // chain names the delegate that produced it.
    let call = &seen["call"];
    let reads = &seen["reads"];
    let result: Value = serde_json::from_str(&text(&reads[uri("result")])).unwrap();
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["output"].as_str(), call["content"][0]["text"].as_str(), "{result}");
    let provenance: Value = serde_json::from_str(&text(&reads[uri("provenance")])).unwrap();
    assert_eq!(provenance, call["_meta"]["ldp/provenance"]);
    assert_eq!(provenance["produced_by"], card["delegate_id"]);
    let lctl = &reads[uri("lctl")]["contents"][0];
    assert_eq!(lctl["mimeType"], "application/yaml");
    let document = ldp_lctl::parse(lctl["text"].as_str().unwrap()).unwrap();
    assert_eq!(document.chain.as_ref().map(|c| c.id.as_str()), Some(task_id), "{document:?}");
    assert_eq!(document.trace.last().map(|s| s.agent.as_str()), card["delegate_id"].as_str(), "{}", lctl["text"]);
    let mut listed: Vec<&str> = seen["list"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    listed.sort_unstable();
    assert_eq!(listed, [uri("lctl"), uri("provenance"), uri("result")]);
    assert_eq!(seen["templates"].as_array().unwrap().len(), 3);
    assert!(seen["unknown"]["message"].as_str().is_some(), "an unknown task is an error: {seen}");

    // The subscriptions: updates of the result as the model streamed, then of both when it ended; the list changed
    // when the task appeared and when it completed.
    let updated: Vec<&str> = out["updated"].as_array().unwrap().iter().map(|u| u.as_str().unwrap()).collect();
    assert!(updated.iter().filter(|u| **u == uri("result")).count() >= 2, "{updated:?}");
    assert_eq!(updated.last(), Some(&uri("provenance").as_str()), "{updated:?}");
    assert!(out["list_changed"].as_u64().unwrap() >= 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_delegates_skill_templates_are_prompts() {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_model("stub-7b-2025")).await.unwrap();
    let dir = support::TempDir::new("mcp-prompts");
    let template = dir.write("summarize.txt", "Summarize in one line:\n{{input}}\nBe brief.");
    let skill = format!("summarize={template}");
    let base = stub.base_url();
    let args =
        ["--backend", "openai", "--base-url", &base, "--model", "m", "--skill", &skill, "--skill", "chat", "--mcp"];
    let (_server, url) = serve(&args, Stdio::null());
    let steps = [
        "prompts",
        r#"prompt:summarize:{"input": "a long story"}"#,
        r#"call:summarize:{"input": "a long story"}"#,
        r#"prompt:summarize:{}"#,
        r#"prompt:chat:{"input": "x"}"#,
    ];
    let out = mcp_client(&format!("{url}/mcp"), "legacy", &steps).await;

    // Only the templated skill is a prompt, with its one required argument.
    let prompts = out["steps"][0]["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert_eq!(prompts[0]["name"], "summarize");
    assert_eq!(
        prompts[0]["arguments"][0],
        json!({"name": "input", "description": prompts[0]["arguments"][0]["description"], "required": true})
    );

    // The prompt is the user message the delegate sends its model for that input: the model saw the same text.
    let message = &out["steps"][1]["prompt"]["messages"][0];
    assert_eq!(message["role"], "user");
    let rendered = message["content"]["text"].as_str().unwrap();
    let recorded = stub.recorded();
    let sent = recorded.last().unwrap()["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(sent.as_str(), Some(rendered), "{recorded:?}");
    assert!(rendered.contains("a long story") && rendered.starts_with("Summarize in one line:"), "{rendered}");
    assert_eq!(out["steps"][2]["call"]["isError"], false);

    // Without its argument, and a skill without a template: MCP errors.
    assert!(out["steps"][3]["message"].as_str().unwrap().contains("input"), "{}", out["steps"][3]);
    assert!(out["steps"][4]["message"].as_str().unwrap().contains("unknown prompt"), "{}", out["steps"][4]);
}
