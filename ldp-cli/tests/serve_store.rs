//! `ldp serve --store` as real processes (issue 17).
//!
//! - SQLite: `kill -9` mid-session, restart on the same file: the session goes on, a message signed and accepted
//!   before the restart is refused when replayed after it, the result of a task completed before it is fetched by
//!   a status query. `kill -9` while 8 clients submit at full speed: every task answered before the kill is there
//!   after the restart (its result fetched, its message refused as a replay). A bounded file
//!   (`--sqlite-max-bytes`) under a flood of large results: every task answered, the file within its bound, the
//!   oldest results dropped first, the drops logged as one episode. A full disk (a file-size limit on the server,
//!   `prlimit`): every message refused `STORE_UNAVAILABLE` (retryable), logged as one outage (a bounded number of
//!   lines, not one per refusal), and service again once there is room, with what was acknowledged before still
//!   there.
//! - Redis (a real `redis-server` on a free loopback port, installed by `scripts/redis-server.sh` when missing; never
//!   skipped), two replicas: a session proposed on A continues on B; a signed message accepted by A and replayed to
//!   B is refused; a status query on B returns the result of a task that ran on A; a close on B ends the session on
//!   A; 2 replicas × 8 concurrent clients × 500 tasks, each task sent to both replicas, run exactly once (counted by
//!   the model server behind the delegates) and answered exactly once; Redis stopped: typed, retryable refusals
//!   within the store timeout, and service again once it is back; a task whose replica is killed mid-task is failed
//!   `TASK_LEASE_EXPIRED` (retryable) for a status query on the other replica once its lease has passed; Redis full
//!   (`maxmemory` under `noeviction`): typed, retryable refusals that leave nothing behind, so the same signed
//!   messages are accepted once there is room, logged as one outage; a wrong
//!   password stops the start without showing it; replicas over mutual TLS to a TLS-only Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use ldp_session::{Initiator, InitiatorConfig, InitiatorEvent, SecurityConfig, SeededIds, SystemClock};
use ldp_store::test_redis::{RedisServer, RedisServerOptions};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Body, Envelope, SessionConfig, TaskUpdate, codes};
use support::{Guard, TempDir, serve};

const SECRET: &str = "store-test-secret";

fn key() -> SigningKey {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap()
}

fn initiator(to: &str, signed: bool) -> Initiator {
    let mut cfg = InitiatorConfig::new("ldp:delegate:store-client");
    if signed {
        cfg.security = SecurityConfig::symmetric(key());
    }
    Initiator::new(cfg, to, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
}

fn unique() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// POSTs one message to `/ldp/messages`: the answer's status and body, or the error of a server that gave none.
async fn try_post(
    http: &reqwest::Client,
    url: &str,
    bytes: Vec<u8>,
) -> reqwest::Result<(reqwest::StatusCode, Vec<u8>)> {
    let resp =
        http.post(format!("{url}/ldp/messages")).header("content-type", "application/json").body(bytes).send().await?;
    let status = resp.status();
    Ok((status, resp.bytes().await?.to_vec()))
}

/// POSTs one message to `/ldp/messages` and returns the answer (refusals carry one too, whatever the status).
async fn post(http: &reqwest::Client, url: &str, bytes: Vec<u8>) -> Envelope {
    let (status, body) = try_post(http, url, bytes).await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
    assert_ne!(status.as_u16(), 500, "a 500");
    Envelope::from_slice(&body)
        .unwrap_or_else(|e| panic!("answer {status} is no envelope ({e}): {}", String::from_utf8_lossy(&body)))
}

async fn send(http: &reqwest::Client, url: &str, env: &Envelope) -> Envelope {
    post(http, url, env.to_vec().unwrap()).await
}

fn failure(env: &Envelope) -> (String, bool) {
    match &env.body {
        Body::TaskFailed(f) => (f.error.code.as_str().to_owned(), f.error.retryable),
        Body::SessionReject(r) => {
            r.error.as_ref().map(|e| (e.code.as_str().to_owned(), e.retryable)).unwrap_or_default()
        }
        other => panic!("expected a failure, got {}", other.type_name()),
    }
}

fn output(env: &Envelope) -> serde_json::Value {
    match &env.body {
        Body::TaskResult(r) => r.output.parse().unwrap(),
        other => panic!("expected TASK_RESULT, got {} ({:?})", other.type_name(), failure(env)),
    }
}

async fn establish(http: &reqwest::Client, url: &str, init: &mut Initiator) -> String {
    let accept = send(http, url, &init.propose(SessionConfig::default())).await;
    assert!(matches!(accept.body, Body::SessionAccept(_)), "{:?}", failure(&accept));
    init.handle_envelope(accept, None).unwrap();
    while let Some(e) = init.poll_event() {
        if let InitiatorEvent::SessionEstablished { session_id, .. } = e {
            return session_id;
        }
    }
    panic!("no session established");
}

/// A status query for `task_id` (signed when `signed`), as a client that lost its connection sends.
fn status_query(session_id: &str, to: &str, task_id: &str, signed: bool) -> Envelope {
    let mut env = Envelope::new(
        format!("q-{}", unique()),
        ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc()),
        session_id,
        "ldp:delegate:store-client",
        to,
        TaskUpdate::new(task_id.to_owned(), None, None),
    );
    if signed {
        env = env.with_nonce(unique());
        ldp_types::signing::sign(&mut env, &key()).unwrap();
    }
    env
}

/// The same message under a new id (and signature): what a client retrying on another replica sends.
fn resend(bytes: &[u8], signed: bool) -> Envelope {
    let mut env = Envelope::from_slice(bytes).unwrap();
    env.message_id = format!("resend-{}", unique());
    if signed {
        env.nonce = Some(unique());
        ldp_types::signing::sign(&mut env, &key()).unwrap();
    }
    env
}

const ECHO: &str = "ldp:delegate:echo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_state_survives_kill_9() {
    let dir = TempDir::new("store-sqlite");
    let store = format!("sqlite:{}", dir.path("state.db"));
    let args = ["--store", &store, "--sign", "hmac-sha256-jcs", "--secret", SECRET];
    let (mut first, url) = serve(&args, Stdio::null());
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, true);
    let session_id = establish(&http, &url, &mut init).await;
    let submit = init.submit(&session_id, "echo", serde_json::json!({"n": 1}), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    let submit_bytes = submit.to_vec().unwrap();
    assert_eq!(output(&post(&http, &url, submit_bytes.clone()).await), serde_json::json!({"echo": {"n": 1}}));

    // kill -9, restart on the same file.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let (_second, url) = serve(&args, Stdio::null());

    // The session goes on.
    let next = init.submit(&session_id, "echo", serde_json::json!({"n": 2}), None, None).unwrap();
    assert_eq!(output(&send(&http, &url, &next).await), serde_json::json!({"echo": {"n": 2}}));
    // The pre-restart message, replayed: refused.
    assert_eq!(failure(&post(&http, &url, submit_bytes.clone()).await).0, codes::REPLAY_DETECTED);
    // Resent under a new id: the task exists already, it does not run again.
    assert_eq!(failure(&send(&http, &url, &resend(&submit_bytes, true)).await).0, codes::DUPLICATE_TASK);
    // The completed result is still there.
    let answer = send(&http, &url, &status_query(&session_id, ECHO, &task_id, true)).await;
    assert_eq!(output(&answer), serde_json::json!({"echo": {"n": 1}}));
}

/// One task a client saw answered before the server was killed: what the restarted server must still hold.
struct Acknowledged {
    session_id: String,
    task_id: String,
    n: usize,
    submit_bytes: Vec<u8>,
}

/// Submits signed echo tasks in `session_id` back to back until the server stops answering, pushing each one
/// answered with its result to `acknowledged`. Returns the client and its session, the task in flight when the
/// connection failed, if any, and any other answer it got (none is expected).
async fn submit_until_killed(
    url: String,
    mut init: Initiator,
    session_id: String,
    acknowledged: Arc<std::sync::Mutex<Vec<Acknowledged>>>,
) -> (Initiator, String, Option<String>, Vec<String>) {
    let http = reqwest::Client::new();
    let mut unexpected = Vec::new();
    for n in 0.. {
        let submit = init.submit(&session_id, "echo", serde_json::json!({"n": n}), None, None).unwrap();
        let task_id = submit.body.task_id().unwrap().to_owned();
        let submit_bytes = submit.to_vec().unwrap();
        // A killed server's connection is reset: an error at once.
        let Ok((_, body)) = try_post(&http, &url, submit_bytes.clone()).await else {
            return (init, session_id, Some(task_id), unexpected);
        };
        match Envelope::from_slice(&body).map(|env| env.body) {
            Ok(Body::TaskResult(r))
                if r.output.parse::<serde_json::Value>().ok() == Some(serde_json::json!({"echo": {"n": n}})) =>
            {
                acknowledged.lock().unwrap().push(Acknowledged {
                    session_id: session_id.clone(),
                    task_id,
                    n,
                    submit_bytes,
                });
            }
            other => unexpected.push(format!("{other:?}")),
        }
    }
    unreachable!("the loop ends only by returning")
}

/// `kill -9` while 8 clients submit at full speed (SQLite's writer committing batches): every task a client saw
/// answered before the kill is still there after a restart on the same file — its result fetched by a status query,
/// its signed message refused as a replay — and every session goes on. A batch answered before its commit reached
/// the file would lose exactly such tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_every_answered_task_across_kill_9_under_load() {
    const CLIENTS: usize = 8;
    const ANSWERED_BEFORE_THE_KILL: usize = 400;
    let dir = TempDir::new("store-sqlite-load-kill");
    let store = format!("sqlite:{}", dir.path("state.db"));
    let args = ["--store", &store, "--sign", "hmac-sha256-jcs", "--secret", SECRET];
    let (mut first, url) = serve(&args, Stdio::null());
    let http = reqwest::Client::new();
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut init = initiator(ECHO, true);
        let session_id = establish(&http, &url, &mut init).await;
        clients.push(tokio::spawn(submit_until_killed(url.clone(), init, session_id, acknowledged.clone())));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.lock().unwrap().len() < ANSWERED_BEFORE_THE_KILL {
        assert!(Instant::now() < deadline, "only {} tasks answered in 60 s", acknowledged.lock().unwrap().len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The clients are still sending: the kill lands with tasks in flight and a batch (perhaps) being written.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let mut in_flight = Vec::new();
    let mut sessions = Vec::new();
    for client in clients {
        let (init, session_id, pending, unexpected) = client.await.unwrap();
        assert!(unexpected.is_empty(), "answers other than the task's result before the kill: {unexpected:?}");
        in_flight.extend(pending.map(|task_id| (session_id.clone(), task_id)));
        sessions.push((init, session_id));
    }
    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    assert!(acknowledged.len() >= ANSWERED_BEFORE_THE_KILL);

    let (_second, url) = serve(&args, Stdio::null());
    for task in &acknowledged {
        let answer = send(&http, &url, &status_query(&task.session_id, ECHO, &task.task_id, true)).await;
        let Body::TaskResult(result) = &answer.body else {
            panic!("task {} was answered before the kill, now: {}", task.task_id, answer.body.type_name())
        };
        assert_eq!(result.output.parse::<serde_json::Value>().unwrap(), serde_json::json!({"echo": {"n": task.n}}));
        let replayed = post(&http, &url, task.submit_bytes.clone()).await;
        assert_eq!(failure(&replayed).0, codes::REPLAY_DETECTED, "task {}'s message accepted again", task.task_id);
    }
    // A task in flight at the kill was never answered: the restarted server answers for it all the same (its result
    // if its batch was written, a typed failure or its status otherwise), and never with a 500 (`post` checks).
    for (session_id, task_id) in &in_flight {
        let answer = send(&http, &url, &status_query(session_id, ECHO, task_id, true)).await;
        assert!(
            matches!(answer.body, Body::TaskResult(_) | Body::TaskFailed(_) | Body::TaskUpdate(_)),
            "task {task_id} in flight at the kill: {}",
            answer.body.type_name()
        );
    }
    // Every session goes on.
    for (init, session_id) in &mut sessions {
        let next = init.submit(session_id, "echo", serde_json::json!("after"), None, None).unwrap();
        assert_eq!(output(&send(&http, &url, &next).await), serde_json::json!({"echo": "after"}));
    }
}

/// A flood of large results into a bounded SQLite file (`--sqlite-max-bytes`, 4 MiB; 12 MiB of results): every task
/// is answered, the file stays within its bound, the oldest results give way to the newest, and the drops are
/// logged as one episode, not a line per batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_sqlite_file_keeps_serving_a_flood_of_large_results() {
    const BOUND: u64 = 4 << 20;
    let dir = TempDir::new("store-sqlite-bound");
    let file = dir.path("state.db");
    let store = format!("sqlite:{file}");
    let args = ["--store", &store, "--sqlite-max-bytes", &BOUND.to_string()];
    let (mut server, url) = serve(&args, Stdio::piped());
    let lines = log_lines(&mut server);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &url, &mut init).await;
    let large = "z".repeat(32 << 10);
    let mut task_ids = Vec::new();
    for n in 0..384 {
        let submit = init.submit(&session_id, "echo", serde_json::json!([n, large]), None, None).unwrap();
        task_ids.push(submit.body.task_id().unwrap().to_owned());
        assert_eq!(output(&send(&http, &url, &submit).await), serde_json::json!({"echo": [n, large]}), "task {n}");
    }
    let newest = send(&http, &url, &status_query(&session_id, ECHO, task_ids.last().unwrap(), false)).await;
    assert_eq!(output(&newest), serde_json::json!({"echo": [383, large]}));

    // Restarted (the machine's own memory of the tasks gone), the oldest result is no longer in the file.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size <= BOUND, "the file holds {size} bytes, over its bound of {BOUND}");
    let drops: Vec<String> = warnings(&lines).into_iter().filter(|l| l.contains("dropped before their TTL")).collect();
    assert!(!drops.is_empty() && drops.len() <= 3, "the drops are logged as one episode: {drops:#?}");
    let (_server, url) = serve(&args, Stdio::null());
    let oldest = send(&http, &url, &status_query(&session_id, ECHO, &task_ids[0], false)).await;
    assert!(!matches!(oldest.body, Body::TaskResult(_)), "the oldest result was kept");
    assert_eq!(failure(&oldest), (codes::TASK_NOT_FOUND.to_owned(), false), "answered as an expired result is");
    let newest = send(&http, &url, &status_query(&session_id, ECHO, task_ids.last().unwrap(), false)).await;
    assert_eq!(output(&newest), serde_json::json!({"echo": [383, large]}));
}

/// The server's log lines (its stderr, piped), as they come.
fn log_lines(server: &mut Guard) -> Arc<std::sync::Mutex<Vec<String>>> {
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = server.0.stderr.take().expect("stderr piped");
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// The warnings among `lines`.
fn warnings(lines: &std::sync::Mutex<Vec<String>>) -> Vec<String> {
    lines.lock().unwrap().iter().filter(|l| l.contains("WARN")).cloned().collect()
}

/// Waits up to 5 s for the log line of an outage's end (`"... works again"`), and returns every such line.
async fn outage_ends(lines: &std::sync::Mutex<Vec<String>>) -> Vec<String> {
    let ended = || warnings(lines).into_iter().filter(|l| l.contains("the store works again")).collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ended().is_empty() {
        assert!(Instant::now() < deadline, "no end of the outage logged: {:#?}", warnings(lines));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ended()
}

/// Opens a session and runs a task in it (input `"before"`), answered: what an outage that follows must not lose.
/// Returns the session's id and the task's.
async fn session_with_a_result(http: &reqwest::Client, url: &str, init: &mut Initiator) -> (String, String) {
    let session_id = establish(http, url, init).await;
    let before = init.submit(&session_id, "echo", serde_json::json!("before"), None, None).unwrap();
    let task_id = before.body.task_id().unwrap().to_owned();
    assert_eq!(output(&send(http, url, &before).await), serde_json::json!({"echo": "before"}));
    (session_id, task_id)
}

/// Sets the soft file-size limit of process `pid` (`prlimit`, util-linux): `0` makes every file write fail, as a
/// full disk does, and `unlimited` gives the room back.
fn file_size_limit(pid: u32, limit: &str) {
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={limit}:")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --pid {pid} --fsize={limit}: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_refused_retryably_logged_as_one_outage_then_recovers() {
    let dir = TempDir::new("store-full-disk");
    let store = format!("sqlite:{}", dir.path("state.db"));
    // A file-size limit stands in for a full disk: every write past it fails (EFBIG, where a full disk gives
    // ENOSPC). SIGXFSZ is ignored, as servers do, so that the write fails instead of the signal killing the process.
    let mut command = std::process::Command::new("bash");
    command
        .args(["-c", "trap '' XFSZ; exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_ldp"), "serve", "--bind", "127.0.0.1:0"])
        .args(["--store", &store, "--store-timeout", "1500"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut server, url) = support::serve_command(command);
    let pid = server.0.id();
    // Its log lines (stderr is a pipe: the limit is on files only).
    let lines = log_lines(&mut server);

    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let (session_id, task_before) = session_with_a_result(&http, &url, &mut init).await;

    // The disk is full: every message is refused, typed and retryable, within the store timeout.
    file_size_limit(pid, "0");
    const REFUSED: usize = 300;
    for i in 0..REFUSED {
        let started = Instant::now();
        let submit = init.submit(&session_id, "echo", serde_json::json!(i), None, None).unwrap();
        let (code, retryable) = failure(&send(&http, &url, &submit).await);
        assert_eq!((code.as_str(), retryable), (codes::STORE_UNAVAILABLE, true), "message {i}");
        assert!(started.elapsed() < Duration::from_secs(3), "refusal {i} took {:?}", started.elapsed());
    }
    let (code, retryable) = failure(&send(&http, &url, &init.propose(SessionConfig::default())).await);
    assert_eq!((code.as_str(), retryable), (codes::STORE_UNAVAILABLE, true));
    // A second of the checkpoint thread meeting the full disk too (it tries every 50 ms).
    tokio::time::sleep(Duration::from_secs(1)).await;
    // One outage, not a line per refusal: the runtime's first failure, the checkpoint's, nothing else within 10 s.
    let during = warnings(&lines);
    assert!(during.iter().any(|l| l.contains("store call failed; message refused")), "{during:#?}");
    assert!(during.len() <= 3, "{} warnings for {REFUSED} refusals: {during:#?}", during.len());
    // Each refusal is still counted, where operators count: the metrics.
    let metrics = http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    let counted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ldp_refusals_total{code=\"STORE_UNAVAILABLE\"} "))
        .unwrap_or_else(|| panic!("no STORE_UNAVAILABLE refusals counted:\n{metrics}"))
        .parse()
        .unwrap();
    assert_eq!(counted, REFUSED as u64 + 1);

    // Room again: the same session goes on, and what was acknowledged before the disk filled is still there.
    file_size_limit(pid, "unlimited");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let submit = init.submit(&session_id, "echo", serde_json::json!("after"), None, None).unwrap();
        let answer = send(&http, &url, &submit).await;
        if matches!(answer.body, Body::TaskResult(_)) {
            assert_eq!(output(&answer), serde_json::json!({"echo": "after"}));
            break;
        }
        assert_eq!(failure(&answer), (codes::STORE_UNAVAILABLE.to_owned(), true));
        assert!(Instant::now() < deadline, "no recovery within 15 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = send(&http, &url, &status_query(&session_id, ECHO, &task_before, false)).await;
    assert_eq!(output(&answer), serde_json::json!({"echo": "before"}));
    // The outage's end is logged once, with its count.
    let ended = outage_ends(&lines).await;
    assert_eq!(ended.len(), 1, "{ended:#?}");
    assert!(ended[0].contains("failures="), "{}", ended[0]);
}

/// A `redis-server` configured as the start-up check asks: a memory bound of `maxmemory`, no eviction.
fn bounded_redis(maxmemory: &str) -> RedisServer {
    let options = RedisServerOptions::default().config("maxmemory", maxmemory).config("maxmemory-policy", "noeviction");
    RedisServer::start_with(options).unwrap()
}

/// `ldp serve` on `redis` as its store (a 1.5 s store timeout), stdout piped for its URL; the caller adds the rest.
fn serve_on(redis: &RedisServer) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ldp"));
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--store", &redis.url(), "--store-timeout", "1500"])
        .stdout(Stdio::piped());
    command
}

/// A full Redis (`maxmemory` reached under `noeviction`, the policy the start-up check asks for): every message is
/// refused `STORE_UNAVAILABLE` (retryable), and nothing of a refused message is left behind (Redis refuses a
/// script's first write when it starts out of memory, so none of its writes happen), so once there is room the very
/// same signed messages are accepted, neither replays nor duplicates; logged as one outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_refused_retryably_and_the_same_messages_pass_once_there_is_room() {
    // Configured as the start-up check asks: a memory bound, no eviction. So nothing is logged before the outage.
    let redis = bounded_redis("256mb");
    let mut command = serve_on(&redis);
    command.args(["--sign", "hmac-sha256-jcs", "--secret", SECRET]).stderr(Stdio::piped());
    let (mut server, url) = support::serve_command(command);
    let lines = log_lines(&mut server);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, true);
    let (session_id, task_before) = session_with_a_result(&http, &url, &mut init).await;

    // Full: no write fits.
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    const REFUSED: usize = 100;
    let mut refused = Vec::new();
    for i in 0..REFUSED {
        let submit = init.submit(&session_id, "echo", serde_json::json!(i), None, None).unwrap();
        let bytes = submit.to_vec().unwrap();
        let (code, retryable) = failure(&post(&http, &url, bytes.clone()).await);
        assert_eq!((code.as_str(), retryable), (codes::STORE_UNAVAILABLE, true), "message {i}");
        refused.push((i, bytes));
    }
    let (code, retryable) = failure(&send(&http, &url, &init.propose(SessionConfig::default())).await);
    assert_eq!((code.as_str(), retryable), (codes::STORE_UNAVAILABLE, true));
    let during = warnings(&lines);
    assert!(during.len() <= 2, "{} warnings for {REFUSED} refusals: {during:#?}", during.len());

    // Room again: each refused message, resent byte for byte (its id, nonce and signature), runs now, once.
    redis.cli(&["CONFIG", "SET", "maxmemory", "256mb"]).unwrap();
    for (i, bytes) in &refused {
        assert_eq!(output(&post(&http, &url, bytes.clone()).await), serde_json::json!({"echo": i}), "message {i}");
    }
    let (i, bytes) = &refused[0];
    assert_eq!(failure(&post(&http, &url, bytes.clone()).await).0, codes::REPLAY_DETECTED, "message {i} again");
    // The result from before the outage was the store's to drop early: refused for memory, the store made room from
    // the oldest ended tasks' records, and at a `maxmemory` of one byte every one of them went.
    let answer = send(&http, &url, &status_query(&session_id, ECHO, &task_before, true)).await;
    assert_eq!(failure(&answer).0, codes::TASK_NOT_FOUND, "the oldest result is dropped to make room");
    assert_eq!(outage_ends(&lines).await.len(), 1);
}

/// Sends `env` until it is answered otherwise than refused for memory (`STORE_UNAVAILABLE`, retryable: the store is
/// making room), every 20 ms, at most 200 times; returns the answer and how many refusals came before it.
async fn resend_while_full(http: &reqwest::Client, url: &str, env: &Envelope) -> (Envelope, usize) {
    let bytes = env.to_vec().unwrap();
    for refused in 0..200 {
        let answer = post(http, url, bytes.clone()).await;
        let full = matches!(&answer.body, Body::TaskFailed(f) if f.error.code.as_str() == codes::STORE_UNAVAILABLE);
        if !full {
            return (answer, refused);
        }
        assert!(failure(&answer).1, "a refusal for memory is retryable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still refused after 200 attempts over 4 s");
}

/// A flood of tasks into a Redis four times too small for their results: every task is answered (a refusal for memory
/// is retryable, and the same message resent finds the room the store made meanwhile from the oldest results), and
/// Redis stays within its `maxmemory`, holding the newest results and not the oldest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_tasks_into_a_small_redis_is_answered_and_the_oldest_results_make_room() {
    let redis = bounded_redis("8mb");
    let mut command = serve_on(&redis);
    command.stderr(Stdio::null());
    let (_server, url) = support::serve_command(command);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &url, &mut init).await;
    // 1,000 results of 32 KiB: 32 MiB.
    let input = "x".repeat(32 * 1024);
    let (mut tasks, mut refused) = (Vec::new(), 0);
    for _ in 0..1000 {
        let submit = init.submit(&session_id, "echo", serde_json::json!(input), None, None).unwrap();
        tasks.push(submit.body.task_id().unwrap().to_owned());
        let (answer, attempts) = resend_while_full(&http, &url, &submit).await;
        assert_eq!(output(&answer), serde_json::json!({"echo": input}));
        refused += attempts;
    }
    let info = redis.cli(&["INFO", "memory"]).unwrap();
    let field = |name: &str| -> u64 {
        info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap()
    };
    let (used, max) = (field("used_memory"), field("maxmemory"));
    assert!(used <= max + max / 8, "Redis holds {used} bytes of its {max}");
    // A status query renews the session (a write), so it may be refused for memory too: resent, as a client does.
    let (newest, _) =
        resend_while_full(&http, &url, &status_query(&session_id, ECHO, tasks.last().unwrap(), false)).await;
    assert_eq!(output(&newest), serde_json::json!({"echo": input}), "the newest result is kept");
    let (oldest, _) = resend_while_full(&http, &url, &status_query(&session_id, ECHO, &tasks[0], false)).await;
    assert_eq!(failure(&oldest).0, codes::TASK_NOT_FOUND, "the oldest result made room");
    eprintln!("{refused} submissions refused for memory and resent, of 1,000");
}

fn replica(redis: &str, extra: &[&str]) -> (Guard, String) {
    let mut args = vec!["--store", redis, "--store-timeout", "1500"];
    args.extend_from_slice(extra);
    serve(&args, Stdio::null())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_serve_one_session() {
    let redis = RedisServer::start().unwrap();
    two_replicas_serve_one_session(&redis.url()).await;
}

/// As on one Redis, with two processes on one SQLite file (`--store sqlite:PATH`): replicas on one machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_sqlite_file_serve_one_session() {
    let dir = TempDir::new("store-sqlite-replicas");
    let store = format!("sqlite:{}", dir.path("shared.db"));
    two_replicas_serve_one_session(&store).await;
}

/// As on one Redis, with `--store redis+cluster://` on a cluster of three primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_a_redis_cluster_serve_one_session() {
    let cluster = ldp_store::test_redis::RedisCluster::start(3).unwrap();
    two_replicas_serve_one_session(&cluster.url()).await;
}

/// As on one Redis, with `--store redis+sentinel://` on a primary, its replica and a sentinel; then a session goes
/// on across a failover: messages while the store follows the new primary are refused `STORE_UNAVAILABLE`
/// (retryable), and the session's next task is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_redis_sentinel_serve_one_session_across_a_failover() {
    let sentinel = ldp_store::test_redis::RedisSentinel::start().unwrap();
    two_replicas_serve_one_session(&sentinel.url()).await;

    let (_a, a) = replica(&sentinel.url(), &[]);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &a, &mut init).await;
    let submit = init.submit(&session_id, "echo", serde_json::json!("before"), None, None).unwrap();
    assert_eq!(output(&send(&http, &a, &submit).await), serde_json::json!({"echo": "before"}));
    sentinel.sync().unwrap();
    sentinel.failover().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let submit = init.submit(&session_id, "echo", serde_json::json!("after"), None, None).unwrap();
        let answer = send(&http, &a, &submit).await;
        if let Body::TaskResult(_) = &answer.body {
            assert_eq!(output(&answer), serde_json::json!({"echo": "after"}));
            break;
        }
        assert_eq!(failure(&answer), (codes::STORE_UNAVAILABLE.to_owned(), true));
        assert!(Instant::now() < deadline, "the session did not go on within 20 s of the failover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Two `ldp serve` replicas on the store at `url`: a session proposed on A continues on B, a message accepted by A
/// and replayed to B is refused, a task resent to B under a new id is DUPLICATE_TASK, B answers a status query for
/// A's task with its result, and a close on B ends the session on A.
async fn two_replicas_serve_one_session(url: &str) {
    let signed = ["--sign", "hmac-sha256-jcs", "--secret", SECRET];
    let (_a, a) = replica(url, &signed);
    let (_b, b) = replica(url, &signed);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, true);

    // Proposed on A, continued on B.
    let session_id = establish(&http, &a, &mut init).await;
    let submit = init.submit(&session_id, "echo", serde_json::json!("on A"), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    let bytes = submit.to_vec().unwrap();
    assert_eq!(output(&post(&http, &a, bytes.clone()).await), serde_json::json!({"echo": "on A"}));
    let on_b = init.submit(&session_id, "echo", serde_json::json!("on B"), None, None).unwrap();
    assert_eq!(output(&send(&http, &b, &on_b).await), serde_json::json!({"echo": "on B"}));

    // Accepted by A, replayed to B: refused.
    assert_eq!(failure(&post(&http, &b, bytes.clone()).await).0, codes::REPLAY_DETECTED);
    // Resent to B under a new id: DUPLICATE_TASK.
    assert_eq!(failure(&send(&http, &b, &resend(&bytes, true)).await).0, codes::DUPLICATE_TASK);
    // B answers a status query for the task that ran on A with its result.
    let answer = send(&http, &b, &status_query(&session_id, ECHO, &task_id, true)).await;
    assert_eq!(output(&answer), serde_json::json!({"echo": "on A"}));

    // Closed on B: ended on A.
    let close = init.close(&session_id, None).unwrap();
    assert!(matches!(send(&http, &b, &close).await.body, Body::SessionClose(_)));
    let late = resend(&bytes, true);
    let mut late = late;
    if let Body::TaskSubmit(t) = &mut late.body {
        t.task_id = format!("late-{}", unique());
    }
    ldp_types::signing::sign(&mut late, &key()).unwrap();
    assert_eq!(failure(&send(&http, &a, &late).await).0, codes::SESSION_CLOSED);
}

/// 2 replicas × 8 concurrent clients each × 500 tasks (8,000 tasks), each TASK_SUBMIT sent to both replicas at once
/// (the second under a new message id, as a client retrying elsewhere would): every task runs exactly once, counted
/// by the model server behind both replicas, and gets exactly one TASK_RESULT, the other copy DUPLICATE_TASK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_runs_once_across_two_replicas() {
    let redis = RedisServer::start().unwrap();
    every_task_runs_once_across_two_replicas_on(&redis.url(), 8, 500).await;
}

/// As on Redis, with two processes on one SQLite file, whose writers take turns at the file's write lock: 2 replicas
/// × 4 clients × 250 tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_runs_once_across_two_replicas_on_one_sqlite_file() {
    let dir = TempDir::new("store-sqlite-once");
    every_task_runs_once_across_two_replicas_on(&format!("sqlite:{}", dir.path("shared.db")), 4, 250).await;
}

/// 2 replicas on the store at `url` × `per_replica` clients each × `tasks` tasks per client, each task sent to both.
async fn every_task_runs_once_across_two_replicas_on(url: &str, per_replica: usize, tasks: usize) {
    let client_count = 2 * per_replica;
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
    let base = stub.base_url();
    let llm = ["--backend", "openai", "--base-url", &base, "--model", "m", "--skill", "chat", "--no-stream"];
    let (_a, a) = replica(url, &llm);
    let (_b, b) = replica(url, &llm);
    let delegate = "ldp:delegate:llm";
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..client_count {
        let (a, b) = (a.clone(), b.clone());
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut init = initiator(delegate, false);
            let (first, second) = if c % 2 == 0 { (a, b) } else { (b, a) };
            let session_id = establish(&http, &first, &mut init).await;
            let (mut results, mut duplicates) = (0usize, 0usize);
            for i in 0..tasks {
                let input = format!("client {c} task {i}");
                let submit = init.submit(&session_id, "chat", serde_json::json!(input), None, None).unwrap();
                let bytes = submit.to_vec().unwrap();
                let copy = resend(&bytes, false);
                let (x, y) = if i % 2 == 0 { (&first, &second) } else { (&second, &first) };
                let (one, two) = tokio::join!(post(&http, x, bytes), send(&http, y, &copy));
                let mut answered = 0;
                for answer in [one, two] {
                    match &answer.body {
                        Body::TaskResult(r) => {
                            assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), serde_json::json!(input));
                            answered += 1;
                        }
                        _ => {
                            assert_eq!(failure(&answer).0, codes::DUPLICATE_TASK);
                            duplicates += 1;
                        }
                    }
                }
                assert_eq!(answered, 1, "task {i} of client {c} answered {answered} times");
                results += answered;
            }
            (results, duplicates)
        }));
    }
    let mut results = 0;
    for client in clients {
        let (r, d) = tokio::time::timeout(Duration::from_secs(600), client).await.expect("bounded").unwrap();
        assert_eq!((r, d), (tasks, tasks));
        results += r;
    }
    assert_eq!(results, client_count * tasks);
    // Counted on the delegate side: the model server saw each task once.
    assert_eq!(stub.requests(), client_count * tasks, "tasks run on the delegate side");
    eprintln!("{} tasks (each sent to both replicas) in {:?}", client_count * tasks, started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_refused_typed_and_retryable_then_recovers() {
    let mut redis = RedisServer::start().unwrap();
    let (_a, a) = replica(&redis.url(), &[]);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &a, &mut init).await;
    redis.stop();
    for _ in 0..3 {
        let started = Instant::now();
        let submit = init.submit(&session_id, "echo", serde_json::json!("down"), None, None).unwrap();
        let (code, retryable) = failure(&send(&http, &a, &submit).await);
        assert_eq!(code, codes::STORE_UNAVAILABLE);
        assert!(retryable);
        let (code, retryable) = failure(&send(&http, &a, &init.propose(SessionConfig::default())).await);
        assert_eq!((code.as_str(), retryable), (codes::STORE_UNAVAILABLE, true));
        assert!(started.elapsed() < Duration::from_secs(6), "refusals took {:?}", started.elapsed());
    }
    redis.restart().unwrap();
    // The restarted Redis is empty (no persistence in this test): the replica serves new sessions again.
    let deadline = Instant::now() + Duration::from_secs(15);
    let session_id = loop {
        let answer = send(&http, &a, &init.propose(SessionConfig::default())).await;
        if let Body::SessionAccept(accept) = &answer.body {
            init.handle_envelope(answer.clone(), None).unwrap();
            break accept.session_id.clone();
        }
        assert_eq!(failure(&answer).0, codes::STORE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "no recovery within 15 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let submit = init.submit(&session_id, "echo", serde_json::json!("up"), None, None).unwrap();
    assert_eq!(output(&send(&http, &a, &submit).await), serde_json::json!({"echo": "up"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_replica_dies_fails_retryably_after_its_lease() {
    let redis = RedisServer::start().unwrap();
    // A model that takes a minute: the task is still running when its replica is killed.
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_latency(Duration::from_secs(60))).await.unwrap();
    let base = stub.base_url();
    let llm = ["--backend", "openai", "--base-url", &base, "--model", "m", "--no-stream", "--task-lease", "2"];
    let (mut a, a_url) = replica(&redis.url(), &llm);
    let (_b, b_url) = replica(&redis.url(), &llm);
    let delegate = "ldp:delegate:llm";
    let http = reqwest::Client::new();
    let mut init = initiator(delegate, false);
    let session_id = establish(&http, &a_url, &mut init).await;
    let submit = init.submit(&session_id, "chat", serde_json::json!("slow"), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    let pending = {
        let (http, a_url) = (http.clone(), a_url.clone());
        tokio::spawn(async move {
            let request = http.post(format!("{a_url}/ldp/messages")).header("content-type", "application/json");
            // Never answered: A is killed while the model thinks.
            let _ = request.body(submit.to_vec().unwrap()).send().await;
        })
    };
    // Running on A, as B sees it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(&http, &b_url, &status_query(&session_id, delegate, &task_id, false)).await;
        if let Body::TaskUpdate(u) = &answer.body {
            assert_eq!(u.message.as_deref(), Some("running"));
            break;
        }
        assert!(Instant::now() < deadline, "the task never showed as running: {:?}", failure(&answer));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still running after more than a lease: A renews it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answer = send(&http, &b_url, &status_query(&session_id, delegate, &task_id, false)).await;
    assert!(matches!(answer.body, Body::TaskUpdate(_)), "lapsed while A lived: {:?}", failure(&answer));
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    pending.abort();
    let killed = Instant::now();
    let failed = loop {
        let answer = send(&http, &b_url, &status_query(&session_id, delegate, &task_id, false)).await;
        match &answer.body {
            Body::TaskUpdate(_) => {
                assert!(killed.elapsed() < Duration::from_secs(10), "still running 10 s after its replica died");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => break failure(&answer),
        }
    };
    assert_eq!(failed, (codes::TASK_LEASE_EXPIRED.to_owned(), true));
}

/// Runs `ldp serve --bind 127.0.0.1:0 ARGS`, which must exit within 10 s (killed and failed otherwise); its exit code
/// and stderr.
/// A `--store` value that is no store (a misspelt scheme, or a Redis address without one) stops the start, exit 2,
/// without showing the password it holds, whether given on the command line or in `LDP_STORE`; a bare `HOST:PORT`
/// is not silently opened as an SQLite file of that name.
#[test]
fn a_store_value_that_is_no_store_stops_the_start_without_showing_its_password() {
    let dir = std::env::temp_dir().join(format!("ldp-cli-bad-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (value, says) in
        [("reddis://app:hunter2@db:6379/0", "is not a store"), ("app:hunter2@db:6379", "Redis address")]
    {
        for from_env in [false, true] {
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ldp"));
            command.current_dir(&dir).args(["serve", "--bind", "127.0.0.1:0"]);
            if from_env {
                command.env("LDP_STORE", value);
            } else {
                command.args(["--store", value]);
            }
            let out = command.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{value} (env: {from_env}): {stderr}");
            assert!(stderr.contains(says), "{value} (env: {from_env}): {stderr}");
            assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "a file was created for an address: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn serve_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ldp serve {args:?} did not stop within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

/// A Redis that refuses the credentials stops `ldp serve` at start, with an error that shows the URL without its
/// password; the right password serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_redis_password_stops_the_start_without_showing_it() {
    let mut redis = RedisServer::start_with(RedisServerOptions::default().password("right-Pa55word")).unwrap();
    let (code, stderr) = serve_to_exit(&["--store", &redis.url_with_password(Some("wrong-Pa55word"))]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("redis://:***@127.0.0.1"), "{stderr}");
    assert!(!stderr.contains("wrong-Pa55word") && !stderr.contains("right-Pa55word"), "{stderr}");

    // The right one, from LDP_STORE (out of the process list), serves.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(["serve", "--bind", "127.0.0.1:0"]).env("LDP_STORE", redis.url()).stdout(Stdio::piped());
    let (_server, url) = support::serve_command(command);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &url, &mut init).await;
    let submit = init.submit(&session_id, "echo", serde_json::json!("authenticated"), None, None).unwrap();
    assert_eq!(output(&send(&http, &url, &submit).await), serde_json::json!({"echo": "authenticated"}));
    // It was the Redis store: without Redis, the next task is refused.
    redis.stop();
    let next = init.submit(&session_id, "echo", serde_json::json!("no redis"), None, None).unwrap();
    assert_eq!(failure(&send(&http, &url, &next).await), (codes::STORE_UNAVAILABLE.to_owned(), true));
}

/// Two replicas on a Redis that speaks only TLS and asks for client certificates, given a private CA and a client
/// certificate with `--redis-ca`, `--redis-cert` and `--redis-key`: a session proposed on one goes on on the other,
/// and a resent task is not run twice. Without the client certificate, the start stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_session_over_mutual_tls_to_redis() {
    let ca = ldp_transport_http::test_pki::TestCa::new("redis CA").unwrap();
    let server_cert = ca.server_cert().unwrap();
    let client_cert = ca.client_cert("ldp-replica").unwrap();
    let options = RedisServerOptions::default().tls(&server_cert.cert_pem, &server_cert.key_pem, &ca.pem(), true);
    let redis = RedisServer::start_with(options).unwrap();
    let dir = TempDir::new("store-redis-tls");
    let ca_file = dir.write("ca.pem", &ca.pem());
    let cert_file = dir.write("client.pem", &client_cert.cert_pem);
    let key_file = dir.write("client.key", &client_cert.key_pem);
    let tls = ["--redis-ca", ca_file.as_str(), "--redis-cert", cert_file.as_str(), "--redis-key", key_file.as_str()];

    let (code, stderr) = serve_to_exit(&["--store", &redis.url(), "--redis-ca", &ca_file]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    share_a_session_over_tls(&redis.url(), &tls).await;
}

/// Two replicas on the store at `url`, started with `tls` (their --redis-* flags): a session proposed on one goes on
/// on the other, and a task resent to the first is `DUPLICATE_TASK`.
async fn share_a_session_over_tls(url: &str, tls: &[&str]) {
    let (_a, a) = replica(url, tls);
    let (_b, b) = replica(url, tls);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &a, &mut init).await;
    let submit = init.submit(&session_id, "echo", serde_json::json!("over TLS"), None, None).unwrap();
    let bytes = submit.to_vec().unwrap();
    assert_eq!(output(&post(&http, &b, bytes.clone()).await), serde_json::json!({"echo": "over TLS"}));
    assert_eq!(failure(&send(&http, &a, &resend(&bytes, false)).await).0, codes::DUPLICATE_TASK);
}

/// Two replicas on `rediss+sentinel://`, a Sentinel deployment that speaks only TLS, given its private CA with
/// `--redis-ca`: a session proposed on one goes on on the other, and a resent task is not run twice. Without the CA,
/// the sentinels' certificate does not verify and the start stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_session_over_tls_to_redis_sentinel() {
    let ca = ldp_transport_http::test_pki::TestCa::new("sentinel CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let sentinel =
        ldp_store::test_redis::RedisSentinel::start_tls(&cert.cert_pem, &cert.key_pem, &ca.pem(), None).unwrap();
    let url = sentinel.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let dir = TempDir::new("store-sentinel-tls");
    let ca_file = dir.write("ca.pem", &ca.pem());

    let (code, stderr) = serve_to_exit(&["--store", &url]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    share_a_session_over_tls(&url, &["--redis-ca", &ca_file]).await;
}

/// A Redis that may evict keys when full (any `maxmemory-policy` but `noeviction` under a `maxmemory`, as some
/// managed services ship) could drop replay entries and accept a replayed message: `ldp serve` says so at start. So
/// does one with no `maxmemory` at all, which a flood of tasks grows until its host runs out of memory. A server
/// bounded and never evicting gets no such warning.
#[test]
fn a_redis_that_may_evict_keys_is_warned_of_at_start() {
    let warning = |options: RedisServerOptions| {
        let redis = RedisServer::start_with(options).unwrap();
        let (mut server, _url) = serve(&["--store", &redis.url()], Stdio::piped());
        // The warning comes before the `listening on` line; whatever is written by then is on the pipe.
        server.0.kill().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut server.0.stderr.take().unwrap(), &mut stderr).unwrap();
        stderr
    };
    let evicting =
        warning(RedisServerOptions::default().config("maxmemory", "64mb").config("maxmemory-policy", "volatile-lru"));
    assert!(evicting.contains("maxmemory-policy noeviction") && evicting.contains("volatile-lru"), "{evicting}");
    let keeping =
        warning(RedisServerOptions::default().config("maxmemory", "64mb").config("maxmemory-policy", "noeviction"));
    assert!(!keeping.contains("evict") && !keeping.contains("maxmemory"), "{keeping}");
    let unbounded = warning(RedisServerOptions::default().config("maxmemory", "0"));
    assert!(unbounded.contains("Redis has no maxmemory"), "{unbounded}");
}

/// `--result-max-bytes`: a result longer than it is answered to its submitter in full, and a status query on the
/// other replica gets TASK_FAILED RESULT_NOT_KEPT (not retryable) instead of a copy the store was not to keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_kept_size_is_answered_but_not_kept() {
    let redis = RedisServer::start().unwrap();
    let limit = ["--result-max-bytes", "64"];
    let (_a, a) = replica(&redis.url(), &limit);
    let (_b, b) = replica(&redis.url(), &limit);
    let http = reqwest::Client::new();
    let mut init = initiator(ECHO, false);
    let session_id = establish(&http, &a, &mut init).await;
    let long = "y".repeat(100);
    let submit = init.submit(&session_id, "echo", serde_json::json!(long), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    assert_eq!(output(&send(&http, &a, &submit).await), serde_json::json!({"echo": long}));
    let answer = send(&http, &b, &status_query(&session_id, ECHO, &task_id, false)).await;
    assert_eq!(failure(&answer), (codes::RESULT_NOT_KEPT.to_owned(), false));
}
