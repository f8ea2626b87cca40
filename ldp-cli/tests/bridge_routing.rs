#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Routing across protocols: one router's registry holds an LDP delegate (`ldp serve`), an MCP server bridged by
//! `ldp serve --backend mcp` (the official MCP Python SDK's server), an A2A agent bridged by
//! `ldp serve --backend a2a` (the official A2A Python SDK's agent) and the same agent reached directly through the
//! scheme dispatcher's `a2a+http` adapter. Each task is routed by skill, each result carries its provenance, and
//! the bridged delegates' self-descriptions win them no quality under the claim-trust policy.

use crate::support;
use ldp_transport_http::ConnectSettings;

use std::process::Stdio;
use std::sync::Arc;

use ldp_bridge::a2a::{A2aTransport, BackendLimits};
use ldp_router::{
    ClaimType, DiscoveryError, Endpoint, LdpAdapter, Registry, RegistryConfig, RouteTask, SchemeDispatcher,
    SelectionRequest, SharedTransport,
};
use ldp_session::SystemClock;
use ldp_transport_http::{HttpTransport, RetryPolicy};
use ldp_types::DelegateId;
use serde_json::{Value, json};
use support::serve;

const DIRECT: &str = "ldp:delegate:a2a-direct";

fn registry() -> Registry {
    let http = LdpAdapter::new().with_http(|endpoint: &Endpoint| {
        let transport = HttpTransport::builder(endpoint.url.clone())
            .retry(RetryPolicy::none())
            .build()
            .map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(transport) as SharedTransport)
    });
    let a2a = |url: &str| {
        let id = DelegateId::new(DIRECT).map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(A2aTransport::new(url, id, None, BackendLimits::default())) as SharedTransport)
    };
    let dispatcher = SchemeDispatcher::new().with_ldp(http).register("a2a+http", Arc::new(a2a));
    Registry::new(RegistryConfig::default(), Arc::new(dispatcher), Arc::new(SystemClock)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_router_routes_to_ldp_mcp_and_a2a_delegates() {
    let dir = support::TempDir::new("bridge-routing");
    let markers = dir.path("");
    let python = support::bridge_python();
    let mcp_server = support::repo().join("ldp-cli/tests/bridge/mcp_server.py");
    let mcp_command = format!("{python} {} {markers}", mcp_server.display());
    let (_agent, agent_url) = support::a2a_agent(&markers);

    let (_ldp, ldp_url) = serve(&[], Stdio::null());
    let (_mcp, mcp_url) = serve(&["--backend", "mcp", "--mcp-command", &mcp_command], Stdio::inherit());
    let (_a2a, a2a_url) = serve(&["--backend", "a2a", "--a2a-url", &agent_url], Stdio::inherit());
    let direct_url = agent_url.replacen("http://", "a2a+http://", 1);

    let registry = registry();
    let mut ids = Vec::new();
    for url in [&ldp_url, &mcp_url, &a2a_url, &direct_url] {
        let registration = registry.add_url(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        ids.push(registration.delegate_id);
    }
    assert_eq!(ids, ["ldp:delegate:echo", "ldp:delegate:mcp", "ldp:delegate:a2a", DIRECT]);

    // Each task goes to the delegate that offers its skill; the result carries the provenance its LDP responder
    // stamped (the bridges' own, for the bridged servers: the model undeclared).
    let route = |skill: &str, input: Value, exclude: Option<&str>| {
        let mut request = SelectionRequest::new(skill);
        if let Some(id) = exclude {
            request = request.exclude(id);
        }
        RouteTask::new(skill, input).with_request(request)
    };
    let tasks = [
        (route("echo", json!({"q": 1}), None), "ldp:delegate:echo", json!({"echo": {"q": 1}})),
        (route("add", json!({"a": 2, "b": 3}), None), "ldp:delegate:mcp", json!({"sum": 5})),
        (route("shout", json!("via ldp serve"), Some(DIRECT)), "ldp:delegate:a2a", json!("VIA LDP SERVE")),
        (route("shout", json!("direct"), Some("ldp:delegate:a2a")), DIRECT, json!("DIRECT")),
    ];
    let no_score = ldp_router::ScoreFn::caller(|_: &Value| None);
    for (task, delegate, output) in tasks {
        let routed = registry.route_and_submit(&task, &no_score).await.unwrap_or_else(|e| panic!("{delegate}: {e}"));
        assert_eq!(routed.delegate_id, delegate);
        assert_eq!(routed.output.to_value().unwrap(), output, "{delegate}");
        let provenance = routed.provenance.expect("every result carries provenance");
        assert_eq!(provenance.produced_by, delegate);
        assert!(provenance.session_id.is_some_and(|s| !s.is_empty()), "{delegate}");
        if delegate != "ldp:delegate:echo" {
            assert_eq!(provenance.model_version, "undeclared", "{delegate}");
        }
    }

    // The claim-trust policy: the LDP delegate's card claim counts as self_claimed (never verified); the bridged
    // delegates' cards win them no claim at all.
    let now = time::OffsetDateTime::now_utc();
    let basis = |id: &str, skill: &str| registry.with_router(|r| r.assess(id, skill, now).unwrap().basis);
    assert_eq!(basis("ldp:delegate:echo", "echo"), Some(ClaimType::SelfClaimed));
    for (id, skill) in [("ldp:delegate:mcp", "add"), ("ldp:delegate:a2a", "shout"), (DIRECT, "shout")] {
        assert_eq!(basis(id, skill), None, "{id}");
    }
}

/// A delegate that delegates across protocols: the planner's model (a scripted OpenAI-compatible stub) calls the
/// `add` tool of an MCP server (the official MCP Python SDK's, bridged by `ldp serve --backend mcp`) and the
/// `shout` skill of an A2A agent (the official A2A Python SDK's, reached directly by `--delegate a2a+http://...`).
/// Each call is a routed sub-task whose answer goes back to the model, and each hop is in the result's lineage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planners_model_calls_an_mcp_server_and_an_a2a_agent_as_tools() {
    use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};

    let dir = support::TempDir::new("bridge-tools");
    let markers = dir.path("");
    let python = support::bridge_python();
    let mcp_server = support::repo().join("ldp-cli/tests/bridge/mcp_server.py");
    let mcp_command = format!("{python} {} {markers}", mcp_server.display());
    let (_agent, agent_url) = support::a2a_agent(&markers);
    let (_mcp, mcp_url) = serve(&["--backend", "mcp", "--mcp-command", &mcp_command], Stdio::inherit());
    let direct_url = agent_url.replacen("http://", "a2a+http://", 1);

    let script = vec![
        StubTurn::call("add", &json!({"a": 2, "b": 3})),
        StubTurn::call("shout", &json!({"input": "hello"})),
        StubTurn::text("5, and HELLO"),
    ];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let base = stub.base_url();
    #[rustfmt::skip]
    let (_planner, planner_url) = serve(&[
        "--backend", "openai", "--base-url", &base, "--model", "stub", "--skill", "chat",
        "--delegate", &mcp_url, "--delegate", &direct_url,
    ], Stdio::inherit());

    let conn = ldp::connect(&planner_url).await.unwrap();
    let out: ldp::Answer<String> = conn.call("chat", "add 2 and 3, then shout hello").await.unwrap();
    assert_eq!(out.output, "5, and HELLO");
    // The model was offered both protocols' tools, and each answer came back to it.
    let recorded = stub.recorded();
    let offered: Vec<&str> =
        recorded[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(offered.contains(&"add") && offered.contains(&"shout"), "{offered:?}");
    let tool_answer = |turn: usize| {
        recorded[turn]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(serde_json::from_str::<Value>(&tool_answer(1)).unwrap(), json!({"sum": 5}));
    assert_eq!(serde_json::from_str::<Value>(&tool_answer(2)).unwrap(), json!("HELLO"));
    let hops: Vec<&str> = out.provenance.lineage.iter().map(|h| h.delegate_id.as_str()).collect();
    assert!(hops.contains(&"ldp:delegate:mcp"), "{hops:?}");
    assert!(hops.iter().any(|h| h.starts_with("ldp:delegate:a2a-127.0.0.1-")), "{hops:?}");
}
