//! A session's task limit and budget hold across replicas, on every backend: two replicas (two `DelegateRuntime`s,
//! each with its own machine) over one store, the initiator's messages alternating between them as a round-robin
//! balancer would send them. Without the usage the store shares, each replica would grant the session the whole
//! limit again (N replicas, N times the budget).
//!
//! - the task limit: the limit's worth of tasks run, whichever replica gets them, and the next is refused
//!   `BUDGET_EXCEEDED` on both;
//! - submissions that race: many at once across both replicas, and no more than the limit run (the store refuses a
//!   claim past the limit, so two admissions that each saw room cannot both take the last slot);
//! - a submission the machine refuses after its claim gives its slot back;
//! - the token and cost budget: what completed tasks reported on either replica counts on both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::store::{Store, StoreOptions};
use ldp_session::{
    Initiator, InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest,
};
use ldp_store::{MemoryStore, RedisStore, StoreConfig};
use ldp_types::{Body, Budget, Capability, DelegateId, Envelope, IdentityCard, LdpError, codes};

use crate::backends::Backends;

use crate::runtimes::{establish, send};

const DELEGATE: &str = "ldp:delegate:metered";

/// Counts the tasks it runs and reports `tokens` and `cost_usd` for each; an input `{"sleep_ms": N}` makes it take
/// N ms.
struct Metered {
    runs: Arc<AtomicUsize>,
    tokens: u64,
    cost_usd: f64,
}

#[async_trait]
impl Delegate for Metered {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let input: serde_json::Value = task.input.parse().unwrap_or_default();
        if let Some(ms) = input.get("sleep_ms").and_then(serde_json::Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let mut out = TaskOutput::new(serde_json::json!({ "ok": true }));
        out.tokens_used = Some(self.tokens);
        out.cost_usd = Some(self.cost_usd);
        Ok(out)
    }
}

/// What each replica is configured with (alike, as replicas must be).
#[derive(Clone, Copy)]
struct Limits {
    max_tasks: Option<u64>,
    budget: Budget,
    tokens_per_task: u64,
    cost_per_task: f64,
}

impl Limits {
    fn tasks(max: u64) -> Self {
        Self { max_tasks: Some(max), budget: Budget::default(), tokens_per_task: 0, cost_per_task: 0.0 }
    }
}

fn replica(store: Arc<dyn Store>, runs: &Arc<AtomicUsize>, limits: Limits) -> DelegateRuntime {
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Metered", "none", "1");
    card.capabilities.push(Capability::new("work"));
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_tasks_per_session = limits.max_tasks;
    cfg.limits.session_budget = limits.budget;
    cfg.limits.max_concurrent_tasks = 64;
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let delegate = Metered { runs: runs.clone(), tokens: limits.tokens_per_task, cost_usd: limits.cost_per_task };
    let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
    runtime.attach_store(store, StoreOptions::new(Duration::from_secs(2), Duration::from_secs(30))).unwrap();
    runtime
}

/// The answer's error code, or `"result"` for a TASK_RESULT.
fn outcome(env: &Envelope) -> String {
    match &env.body {
        Body::TaskResult(_) => "result".to_owned(),
        Body::TaskFailed(f) => f.error.code.as_str().to_owned(),
        other => panic!("expected a task's answer, got {}", other.type_name()),
    }
}

/// Two replicas over `a` and `b` (one store, or two handles on it), a session proposed on A.
async fn two_replicas(
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
    limits: Limits,
) -> ([DelegateRuntime; 2], Initiator, String, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let replicas = [replica(a, &runs, limits), replica(b, &runs, limits)];
    let mut init = Initiator::new(
        InitiatorConfig::new("ldp:delegate:client"),
        DELEGATE,
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    let session_id = establish(&mut init, &replicas[0]).await;
    (replicas, init, session_id, runs)
}

fn submit(init: &mut Initiator, session_id: &str, skill: &str, input: serde_json::Value) -> Envelope {
    init.submit(session_id, skill, input, None, None).unwrap()
}

/// With a limit of 3, three tasks run (A, B, A), and the fourth is refused on either replica.
async fn the_task_limit_spans_replicas(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let ([ra, rb], mut init, session, runs) = two_replicas(a, b, Limits::tasks(3)).await;
    for rt in [&ra, &rb, &ra] {
        let answer = send(rt, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
        assert_eq!(outcome(&answer), "result");
    }
    for rt in [&rb, &ra] {
        let answer = send(rt, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
        assert_eq!(outcome(&answer), codes::BUDGET_EXCEEDED, "a replica granted the session more than its limit");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// Twelve submissions at once, six to each replica, each task taking a while: no more than the limit (4) run. Each
/// admission may see room (the others have not been counted when it reads), so only the store's refusal of a claim
/// past the limit keeps the count.
async fn racing_submissions_keep_to_the_limit(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let ([ra, rb], mut init, session, runs) = two_replicas(a, b, Limits::tasks(4)).await;
    let (ra, rb) = (Arc::new(ra), Arc::new(rb));
    let mut answers = Vec::new();
    for i in 0..12 {
        let env = submit(&mut init, &session, "work", serde_json::json!({ "sleep_ms": 300 }));
        let rt = if i % 2 == 0 { ra.clone() } else { rb.clone() };
        answers.push(tokio::spawn(async move { outcome(&send(&rt, &env).await) }));
    }
    let mut results = 0;
    for answer in answers {
        match answer.await.unwrap().as_str() {
            "result" => results += 1,
            code => assert_eq!(code, codes::BUDGET_EXCEEDED),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), results);
    assert_eq!(results, 4, "the limit is 4 tasks per session, across replicas");
}

/// A submission the machine refuses after the store claimed it (an undeclared skill) does not use up the limit:
/// with a limit of 1, the refused one on A leaves room for one on B.
async fn a_refused_submission_gives_its_slot_back(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let ([ra, rb], mut init, session, runs) = two_replicas(a, b, Limits::tasks(1)).await;
    let refused = send(&ra, &submit(&mut init, &session, "no-such-skill", serde_json::json!({}))).await;
    assert_eq!(outcome(&refused), codes::SKILL_NOT_FOUND);
    let answer = send(&rb, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
    assert_eq!(outcome(&answer), "result", "the refused submission used up the session's only task");
    let answer = send(&ra, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
    assert_eq!(outcome(&answer), codes::BUDGET_EXCEEDED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Budgets of 100 tokens, and of $1 in another session: tasks spend 40 tokens ($0.40) each, so two run (80 spent),
/// a third is still admitted (80 is under 100: a budget is judged before a task, on what was spent) and brings the
/// session to 120, and the fourth is refused, whichever replica ran the others.
async fn the_budget_spans_replicas(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let tokens = Limits {
        max_tasks: None,
        budget: Budget { max_tokens: Some(100), max_cost_usd: None },
        tokens_per_task: 40,
        cost_per_task: 0.0,
    };
    let cost = Limits {
        max_tasks: None,
        budget: Budget { max_tokens: None, max_cost_usd: Some(1.0) },
        tokens_per_task: 0,
        cost_per_task: 0.4,
    };
    for limits in [tokens, cost] {
        let ([ra, rb], mut init, session, runs) = two_replicas(a.clone(), b.clone(), limits).await;
        for rt in [&ra, &rb, &ra] {
            let answer = send(rt, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
            assert_eq!(outcome(&answer), "result");
        }
        for rt in [&rb, &ra] {
            let answer = send(rt, &submit(&mut init, &session, "work", serde_json::json!({}))).await;
            assert_eq!(outcome(&answer), codes::BUDGET_EXCEEDED, "a replica did not count the other's spending");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }
}

/// Runs `test` on two replicas sharing each backend in turn: one `MemoryStore`, one SQLite file opened twice, one
/// Redis with a store each, and a Redis Cluster of three primaries likewise.
fn on_every_backend<F, Fut>(name: &str, test: F)
where
    F: Fn(Arc<dyn Store>, Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let backends = Backends::start(name);
    let cfg = StoreConfig::new(DELEGATE);
    backends.rt.block_on(async {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(cfg.clone()));
        test(memory.clone(), memory).await;
        test(backends.sqlite(&cfg, "usage.db"), backends.sqlite(&cfg, "usage.db")).await;
        test(backends.redis(&cfg).await, backends.redis(&cfg).await).await;
        let cluster = ldp_store::test_redis::RedisCluster::start(3).unwrap();
        let open =
            || async { Arc::new(RedisStore::open(&cluster.url(), cfg.clone()).await.unwrap()) as Arc<dyn Store> };
        test(open().await, open().await).await;
    });
}

#[test]
fn task_limit_spans_replicas() {
    on_every_backend("usage-limit", the_task_limit_spans_replicas);
}

#[test]
fn racing_submissions_keep_to_the_task_limit() {
    on_every_backend("usage-race", racing_submissions_keep_to_the_limit);
}

#[test]
fn refused_submission_gives_its_slot_back() {
    on_every_backend("usage-refused", a_refused_submission_gives_its_slot_back);
}

#[test]
fn budget_spans_replicas() {
    on_every_backend("usage-budget", the_budget_spans_replicas);
}
