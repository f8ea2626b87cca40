//! The cost one delegation hop adds: the same sub-task sent straight to a delegate (`ldp::connect` and `call`, one
//! session reused) and sent as a model's tool call through `RouterTools` (selection by verified quality, the child
//! contract with its `check: schema` criterion, route_and_submit's bookkeeping, the provenance kept for the
//! lineage), side by side in one run, against one delegate on loopback.
//!
//!     cargo bench -p ldp-sdk --features llm --bench delegation
//!     LDP_BENCH_REQUESTS=5000 cargo bench -p ldp-sdk --features llm --bench delegation
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use ldp::delegates::RouterTools;
use ldp::{Delegate, TaskContext};
use ldp_llm::{ToolRun, Toolbox};
use ldp_session::{History, TaskKey, TaskRequest};
use ldp_types::{Budget, DelegationContract, FailurePolicy, PayloadMode, RawJson};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let requests: usize = std::env::var("LDP_BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let sub = Delegate::builder("ldp:delegate:upper")
            .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        let direct = ldp::connect(sub.url()).await.unwrap();
        let tools = RouterTools::over(&[sub.url()], ldp::ConnectOptions::new()).await.unwrap();
        let mut contract = DelegationContract::new("ctr-bench", "bench")
            .with_failure_policy(FailurePolicy::FailClosed)
            .with_budget(Budget { max_tokens: Some(1_000_000), max_cost_usd: None });
        contract.policy.max_delegation_depth = Some(1);
        let parent = TaskRequest {
            key: TaskKey { session_id: "s-bench".into(), task_id: "t-bench".into() },
            skill: "chat".into(),
            input: RawJson::from(json!("bench")),
            payload_mode: PayloadMode::Text,
            contract: Some(contract.clone()),
            peer: "ldp:delegate:caller".into(),
            history: History::default(),
        };
        let mut child = contract.clone();
        child.policy.max_delegation_depth = Some(0);

        // Warm both paths (connections, sessions), then alternate rounds so drift hits both alike.
        for _ in 0..50 {
            direct.call::<String>("upper", "warm").await.unwrap();
            let run = ToolRun::new("upper", json!({"input": "warm"}), Some(child.clone()), &parent);
            tools.run(run).await.unwrap();
        }
        let (mut straight, mut routed) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
        let started = Instant::now();
        for _ in 0..requests {
            let t = Instant::now();
            direct.call::<String>("upper", "hello").await.unwrap();
            straight.push(t.elapsed());
            let run = ToolRun::new("upper", json!({"input": "hello"}), Some(child.clone()), &parent);
            let t = Instant::now();
            tools.run(run).await.unwrap();
            routed.push(t.elapsed());
        }
        let (a, b) = (median(straight), median(routed));
        println!("delegation hop, {requests} tasks each, {:.1} s", started.elapsed().as_secs_f64());
        println!("  straight to the delegate (ldp::connect, call):      median {:>8.1} us", a.as_secs_f64() * 1e6);
        println!("  as a tool call through RouterTools (route_and_submit): median {:>8.1} us", b.as_secs_f64() * 1e6);
        println!(
            "  added per hop: {:.1} us ({:.2}x)",
            (b.as_secs_f64() - a.as_secs_f64()) * 1e6,
            b.as_secs_f64() / a.as_secs_f64()
        );
        sub.shutdown().await.unwrap();
    });
}
