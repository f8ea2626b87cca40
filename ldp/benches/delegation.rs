//! The cost one delegation hop adds: the same sub-task sent straight to a delegate (`ldp::connect` and `call`, one
//! session reused) and sent as a model's tool call through `RouterTools` (selection by verified quality, the child
//! contract with its `check: schema` criterion, route_and_submit's bookkeeping, the provenance kept for the
//! lineage), side by side in one run, against one delegate on loopback. Both the latency of each task (median) and
//! the CPU the process spent per task (all its threads, the delegate's included, from `/proc/self/task/*/schedstat`;
//! Linux only) are reported: on a loaded machine the CPU figure is the steadier one. The two paths alternate in
//! blocks, so drift hits both alike.
//!
//!     cargo bench -p ldp-sdk --features llm --bench delegation
//!     LDP_BENCH_REQUESTS=5000 cargo bench -p ldp-sdk --features llm --bench delegation
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use ldp::delegates::RouterTools;
use ldp::{Delegate, TaskContext};
use ldp_llm::{ToolRun, Toolbox};
use ldp_session::runtime::Submission;
use ldp_session::{History, TaskKey, TaskRequest};
use ldp_types::{Budget, DelegationContract, FailurePolicy, PayloadMode, RawJson};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// CPU time of every thread of this process so far, in nanoseconds (`None` off Linux).
fn cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for thread in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(thread.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Blocks each path runs in turn.
const BLOCKS: usize = 10;

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

        // The contract a routed call carries (the child contract and the card's output schema as a `check:`
        // criterion, as RouterTools adds it), for the third path: straight to the delegate with that contract.
        let mut contracted = child.clone();
        let output_schema =
            direct.card().capabilities.iter().find(|c| c.name == "upper").and_then(|c| c.output_schema.clone());
        if let Some(schema) = output_schema {
            contracted.success_criteria.push(format!("check: schema {schema}"));
        }
        let session = direct.session().await.unwrap();
        let with_contract = || Submission::new(&session, "upper", "hello").contract(contracted.clone());

        // Warm every path (connections, sessions), then alternate blocks so drift hits each alike.
        for _ in 0..50 {
            direct.call::<String>("upper", "warm").await.unwrap();
            direct.client().submit_task(with_contract()).await.unwrap();
            let run = ToolRun::new("upper", json!({"input": "warm"}), Some(child.clone()), &parent);
            tools.run(run).await.unwrap();
        }
        let per_block = requests.div_ceil(BLOCKS);
        let mut latency: [Vec<Duration>; 3] = Default::default();
        let mut cpu = [0u64; 3];
        let started = Instant::now();
        for _ in 0..BLOCKS {
            let before = cpu_ns();
            for _ in 0..per_block {
                let t = Instant::now();
                direct.call::<String>("upper", "hello").await.unwrap();
                latency[0].push(t.elapsed());
            }
            let after_straight = cpu_ns();
            for _ in 0..per_block {
                let t = Instant::now();
                direct.client().submit_task(with_contract()).await.unwrap();
                latency[1].push(t.elapsed());
            }
            let after_contract = cpu_ns();
            for _ in 0..per_block {
                let run = ToolRun::new("upper", json!({"input": "hello"}), Some(child.clone()), &parent);
                let t = Instant::now();
                tools.run(run).await.unwrap();
                latency[2].push(t.elapsed());
            }
            if let (Some(a), Some(b), Some(c), Some(d)) = (before, after_straight, after_contract, cpu_ns()) {
                cpu[0] += b - a;
                cpu[1] += c - b;
                cpu[2] += d - c;
            }
        }
        let tasks = (per_block * BLOCKS) as f64;
        println!("delegation hop, {} tasks each, {:.1} s", per_block * BLOCKS, started.elapsed().as_secs_f64());
        let names = [
            "straight to the delegate (ldp::connect, call)",
            "straight, with the routed call's contract",
            "as a tool call through RouterTools",
        ];
        let medians: Vec<f64> = latency.into_iter().map(|v| median(v).as_secs_f64() * 1e6).collect();
        let cpus: Vec<f64> = cpu.iter().map(|&ns| ns as f64 / tasks / 1e3).collect();
        for (i, name) in names.iter().enumerate() {
            let cpu = if cpu[0] > 0 { format!(", CPU {:>6.1} us/task", cpus[i]) } else { String::new() };
            println!("  {name:<46} median {:>6.1} us{cpu}", medians[i]);
        }
        println!(
            "  added per hop (routed vs straight): latency {:.1} us ({:.2}x)",
            medians[2] - medians[0],
            medians[2] / medians[0]
        );
        if cpu[0] > 0 {
            println!(
                "  added per hop (routed vs straight): CPU {:.1} us ({:.2}x), of which the contract {:.1} us",
                cpus[2] - cpus[0],
                cpus[2] / cpus[0],
                cpus[1] - cpus[0]
            );
        }
        sub.shutdown().await.unwrap();
    });
}
