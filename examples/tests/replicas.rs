//! Runs `examples/replicas.rs` on its embedded SQLite default and on a real `redis-server`: its `run` asserts that
//! each task ran once across the two replicas, that the TASK_SUBMIT resent to the other replica was refused
//! `REPLAY_DETECTED` and did not run again,
//! and that the session went on after both replicas stopped and a third opened the same store.

#[allow(dead_code)] // the example's `main`: the tests call `run`.
#[path = "../examples/replicas.rs"]
mod replicas;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_example_runs_on_sqlite() {
    replicas::run(None).await.expect("the example fails");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_example_runs_on_redis() {
    let server = ldp_store::test_redis::RedisServer::start().expect("a redis-server (scripts/redis-server.sh)");
    replicas::run(Some(server.url())).await.expect("the example fails");
}
