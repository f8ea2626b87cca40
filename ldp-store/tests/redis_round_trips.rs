//! What a task costs a Redis store in round trips: an unsigned TASK_SUBMIT answered TASK_RESULT by a replica makes at
//! most two calls to Redis (the admission and the task's end), counted by the server itself (`MONITOR`), so that moving the store's rules above the backends cannot add a read before a write.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::store::StoreOptions;
use ldp_session::{
    Initiator, InitiatorConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TaskOutput,
    TaskRequest,
};
use ldp_store::{RedisStore, StoreConfig};
use ldp_types::{Body, Capability, DelegateId, IdentityCard, LdpError};

use crate::runtimes::{establish, send};

const DELEGATE: &str = "ldp:delegate:round-trips";
const TASKS: usize = 10;

struct Echo;

#[async_trait]
impl Delegate for Echo {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        Ok(TaskOutput::new(serde_json::json!({ "echo": task.input.json() })))
    }
}

/// A `redis-cli MONITOR` of the server: the commands its clients send, each a line.
struct Monitor {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Monitor {
    /// Started, and watching once it has said so.
    fn start(redis: &ldp_store::test_redis::RedisServer) -> Self {
        use std::io::BufRead;
        let mut child = redis.monitor().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap().trim(), "OK");
        Self { child, lines }
    }

    /// The calls clients made (a script's own commands, `[... lua]`, are not) until `marker`, an `ECHO` sent after
    /// them: lines come in the order the server ran them.
    fn calls_until(&mut self, redis: &ldp_store::test_redis::RedisServer, marker: &str) -> Vec<String> {
        redis.cli(&["ECHO", marker]).unwrap();
        let mut calls = Vec::new();
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if line.contains(marker) {
                break;
            }
            if !line.contains(" lua]") {
                calls.push(line);
            }
        }
        calls
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_task_costs_at_most_two_round_trips() {
    let redis = ldp_store::test_redis::RedisServer::start().expect("a redis-server (scripts/redis-server.sh)");
    let store = Arc::new(RedisStore::open(&redis.url(), StoreConfig::new(DELEGATE)).await.unwrap());
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Round trips", "none", "1");
    card.capabilities.push(Capability::new("work"));
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(Echo));
    let _renewer = runtime.attach_store(store, StoreOptions::default()).unwrap();
    let mut init = Initiator::new(
        InitiatorConfig::new("ldp:delegate:client"),
        DELEGATE,
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    assert!(matches!(InitiatorConfig::new("x").security, SecurityConfig { signing_key: None, .. }), "unsigned");
    let session_id = establish(&mut init, &runtime).await;
    // The first task loads the scripts (a `NOSCRIPT` answer and a second call, once per script).
    let mut submit = |n: usize| init.submit(&session_id, "work", serde_json::json!({ "n": n }), None, None).unwrap();
    let first = submit(0);
    assert!(matches!(send(&runtime, &first).await.body, Body::TaskResult(_)));
    let mut monitor = Monitor::start(&redis);
    for n in 1..=TASKS {
        let answer = send(&runtime, &submit(n)).await;
        assert!(matches!(answer.body, Body::TaskResult(_)), "{}", answer.body.type_name());
    }
    let calls = monitor.calls_until(&redis, "round-trips-counted");
    assert!(!calls.is_empty(), "the store made no calls: the count is not counting");
    assert!(calls.len() <= 2 * TASKS, "{} calls to Redis for {TASKS} tasks: {calls:#?}", calls.len());
}
