//! Two replicas (two `DelegateRuntime`s, each with its own machine) over one store, for every backend: a session
//! proposed on A continues on B; a TASK_SUBMIT resent to the other replica is DUPLICATE_TASK and never runs twice; a
//! status query on A returns the result of a task that ran on B; a signed message accepted by A and replayed to B
//! is refused; a close on B ends the session on A; a task whose replica stops renewing its lease is failed
//! TASK_LEASE_EXPIRED (retryable) for a status query on the other; a TASK_CANCEL sent to B reaches the task running
//! on A, and a SESSION_CLOSE sent to B stops the session's task running on A; the replay window's global bound holds
//! across replicas; a submission the machine refuses gives its task id
//! back. Redis is a real `redis-server` (installed by `scripts/redis-server.sh` when missing; never skipped).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::shared::{SharedTask, TaskClaim};
use ldp_session::store::{Store, StoreOptions};
use ldp_session::{
    Initiator, InitiatorConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TaskOutput,
    TaskRequest,
};
use ldp_store::{MemoryStore, RedisStore, SqliteStore, StoreConfig};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Body, Capability, DelegateId, Envelope, IdentityCard, LdpError, SessionConfig, TaskUpdate, codes};

/// Counts the tasks it runs; an input `{"sleep_ms": N}` makes it take N ms.
struct Counting(Arc<AtomicUsize>);

#[async_trait]
impl Delegate for Counting {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let input: serde_json::Value = task.input.parse().unwrap_or_default();
        if let Some(ms) = input.get("sleep_ms").and_then(serde_json::Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(TaskOutput::new(serde_json::json!({ "ran": input })))
    }
}

use crate::runtimes::{establish, send, send_bytes};

const DELEGATE: &str = "ldp:delegate:replicated";

fn key() -> SigningKey {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "replica-secret").unwrap()
}

fn replica(
    store: Arc<dyn Store>,
    runs: &Arc<AtomicUsize>,
    lease: Duration,
) -> (DelegateRuntime, tokio::task::JoinHandle<()>) {
    replica_with(store, runs, lease, SecurityConfig::symmetric(key()))
}

fn replica_with(
    store: Arc<dyn Store>,
    runs: &Arc<AtomicUsize>,
    lease: Duration,
    security: SecurityConfig,
) -> (DelegateRuntime, tokio::task::JoinHandle<()>) {
    replica_with_options(store, runs, security, StoreOptions::new(Duration::from_secs(2), lease))
}

fn replica_with_options(
    store: Arc<dyn Store>,
    runs: &Arc<AtomicUsize>,
    security: SecurityConfig,
    options: StoreOptions,
) -> (DelegateRuntime, tokio::task::JoinHandle<()>) {
    replica_from(responder_config(security), store, runs, options)
}

/// The replicas' machine configuration: the delegate's card with its one skill, `work`.
fn responder_config(security: SecurityConfig) -> ResponderConfig {
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Replicated", "none", "1");
    card.capabilities.push(Capability::new("work"));
    let mut cfg = ResponderConfig::new(card);
    cfg.security = security;
    cfg
}

fn replica_from(
    cfg: ResponderConfig,
    store: Arc<dyn Store>,
    runs: &Arc<AtomicUsize>,
    options: StoreOptions,
) -> (DelegateRuntime, tokio::task::JoinHandle<()>) {
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(Counting(runs.clone())));
    let renewer = runtime.attach_store(store, options).unwrap();
    (runtime, renewer)
}

fn initiator() -> Initiator {
    initiator_as("ldp:delegate:client")
}

/// An initiator sending as `from` (each `from` is its own principal for the replay window's shares).
fn initiator_as(from: &str) -> Initiator {
    let mut cfg = InitiatorConfig::new(from);
    cfg.security = SecurityConfig::symmetric(key());
    Initiator::new(cfg, DELEGATE, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
}

fn error_code(env: &Envelope) -> String {
    match &env.body {
        Body::TaskFailed(f) => f.error.code.as_str().to_owned(),
        Body::SessionReject(r) => r.error.as_ref().map(|e| e.code.as_str().to_owned()).unwrap_or_default(),
        other => panic!("expected a failure, got {}", other.type_name()),
    }
}

/// A signed status query for `task_id`.
fn status_query(init: &mut Initiator, session_id: &str, task_id: &str) -> Envelope {
    // The initiator signs what it builds; a status query is built by hand and signed with the same key.
    let mut env = Envelope::new(
        format!("q-{}", rand_id()),
        ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc()),
        session_id,
        "ldp:delegate:client",
        DELEGATE,
        TaskUpdate::new(task_id.to_owned(), None, None),
    )
    .with_nonce(rand_id());
    let _ = init;
    ldp_types::signing::sign(&mut env, &key()).unwrap();
    env
}

fn rand_id() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

async fn two_replicas_share_state(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ra) = replica(a_store.clone(), &runs, Duration::from_secs(30));
    let (b, _rb) = replica(b_store, &runs, Duration::from_secs(30));
    let mut init = initiator();

    // Proposed on A, continued on B.
    let session_id = establish(&mut init, &a).await;
    let submit = init.submit(&session_id, "work", serde_json::json!({"n": 1}), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    let submit_bytes = submit.to_vec().unwrap();
    let result = send_bytes(&b, &submit_bytes).await;
    let Body::TaskResult(r) = &result.body else { panic!("expected a result, got {}", error_code(&result)) };
    assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), serde_json::json!({"ran": {"n": 1}}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The same bytes on A: a replay, refused by the replica that never saw them.
    assert_eq!(error_code(&send_bytes(&a, &submit_bytes).await), codes::REPLAY_DETECTED);
    // The same task resent as a new message (as a retrying client would) to A: DUPLICATE_TASK, and it does not run.
    let mut again = Envelope::from_slice(&submit_bytes).unwrap();
    again.message_id = format!("resend-{}", rand_id());
    again.nonce = Some(rand_id());
    ldp_types::signing::sign(&mut again, &key()).unwrap();
    assert_eq!(error_code(&send(&a, &again).await), codes::DUPLICATE_TASK);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a duplicate ran");

    // A status query on A for the task that ran on B: its result.
    let answer = send(&a, &status_query(&mut init, &session_id, &task_id)).await;
    let Body::TaskResult(r) = &answer.body else { panic!("expected the result, got {:?}", answer.body.type_name()) };
    assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), serde_json::json!({"ran": {"n": 1}}));

    // A replica that stops renewing its lease (it died) leaves its task failed, retryably, once the lease passes.
    // The task takes a minute: it cannot end by itself while this runs, however loaded the machine.
    let lease = Duration::from_millis(1500);
    let (c, renewer_c) = replica(a_store, &runs, lease);
    let slow = init.submit(&session_id, "work", serde_json::json!({"sleep_ms": 60_000}), None, None).unwrap();
    let slow_id = slow.body.task_id().unwrap().to_owned();
    let running = tokio::spawn(async move { send(&c, &slow).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(&a, &status_query(&mut init, &session_id, &slow_id)).await;
        if let Body::TaskUpdate(u) = &answer.body {
            assert_eq!(u.message.as_deref(), Some("running"));
            break;
        }
        // Not claimed yet.
        assert_eq!(error_code(&answer), codes::TASK_NOT_FOUND);
        assert!(std::time::Instant::now() < deadline, "the task never showed as running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Still renewed after more than a lease.
    tokio::time::sleep(lease + lease / 2).await;
    let answer = send(&a, &status_query(&mut init, &session_id, &slow_id)).await;
    assert!(matches!(answer.body, Body::TaskUpdate(_)), "the lease lapsed while renewed: {}", error_code(&answer));
    renewer_c.abort();
    let stopped = std::time::Instant::now();
    let failed = loop {
        let answer = send(&a, &status_query(&mut init, &session_id, &slow_id)).await;
        match &answer.body {
            Body::TaskUpdate(_) => {
                assert!(stopped.elapsed() < Duration::from_secs(10), "still running 10 s after renewals stopped");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Body::TaskFailed(f) => break f.error.clone(),
            other => panic!("expected a failure, got {}", other.type_name()),
        }
    };
    assert_eq!(failed.code.as_str(), codes::TASK_LEASE_EXPIRED);
    assert!(failed.retryable);
    running.abort();

    // Closed on B: ended on A.
    let close = init.close(&session_id, None).unwrap();
    assert!(matches!(send(&b, &close).await.body, Body::SessionClose(_)));
    let late = init.submit(&session_id, "work", serde_json::json!({"n": 2}), None, None);
    let late = match late {
        Ok(env) => env,
        // The initiator knows it closed the session; build the late message as another client would.
        Err(_) => {
            let mut env = Envelope::from_slice(&submit_bytes).unwrap();
            env.message_id = format!("late-{}", rand_id());
            env.nonce = Some(rand_id());
            if let Body::TaskSubmit(t) = &mut env.body {
                t.task_id = format!("late-{}", rand_id());
            }
            ldp_types::signing::sign(&mut env, &key()).unwrap();
            env
        }
    };
    assert_eq!(error_code(&send(&a, &late).await), codes::SESSION_CLOSED);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "only the two accepted tasks ran");

    // Expired with no message anywhere: every replica says so, also one that never saw the session.
    let config = SessionConfig { ttl_secs: Some(1), ..SessionConfig::default() };
    let accept = send(&a, &init.propose(config)).await;
    let Body::SessionAccept(accepted) = &accept.body else { panic!("{}", error_code(&accept)) };
    let short = accepted.session_id.clone();
    init.handle_envelope(accept, None).unwrap();
    while init.poll_event().is_some() {}
    tokio::time::sleep(Duration::from_millis(1300)).await;
    for replica in [&b, &a] {
        let late = init.submit(&short, "work", serde_json::json!({"n": 3}), None, None).unwrap();
        assert_eq!(error_code(&send(replica, &late).await), codes::SESSION_EXPIRED);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Submits a task with `input` to replica A (answered in the background: the handle) and waits, for at most 10 s,
/// until replica B's status query shows it running; `waiting` checks each answer B gives before that. The task id.
async fn submit_on_a_until_running_on_b(
    init: &mut Initiator,
    a: &DelegateRuntime,
    b: &DelegateRuntime,
    session_id: &str,
    input: serde_json::Value,
    waiting: impl Fn(&Envelope),
) -> (String, tokio::task::JoinHandle<Envelope>) {
    let task = init.submit(session_id, "work", input, None, None).unwrap();
    let task_id = task.body.task_id().unwrap().to_owned();
    let a2 = a.clone();
    let submitted = tokio::spawn(async move { send(&a2, &task).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(b, &status_query(init, session_id, &task_id)).await;
        if matches!(answer.body, Body::TaskUpdate(_)) {
            return (task_id, submitted);
        }
        waiting(&answer);
        assert!(std::time::Instant::now() < deadline, "the task never showed as running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two replicas whose leases are renewed every 200 ms, a session proposed on A, and a task of a minute running on A,
/// seen running by B: what only a cancel or a close can end while a test runs.
struct MinuteTaskOnA {
    runs: Arc<AtomicUsize>,
    a: DelegateRuntime,
    b: DelegateRuntime,
    init: Initiator,
    session_id: String,
    task_id: String,
    /// The submitter's answer, once the task ends.
    submitted: tokio::task::JoinHandle<Envelope>,
    /// The replicas' lease renewers, kept running.
    _renewers: [tokio::task::JoinHandle<()>; 2],
}

impl MinuteTaskOnA {
    async fn start(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) -> Self {
        let runs = Arc::new(AtomicUsize::new(0));
        let lease = Duration::from_millis(600);
        let (a, ra) = replica(a_store, &runs, lease);
        let (b, rb) = replica(b_store, &runs, lease);
        let mut init = initiator();
        let session_id = establish(&mut init, &a).await;
        let (task_id, submitted) = submit_on_a_until_running_on_b(
            &mut init,
            &a,
            &b,
            &session_id,
            serde_json::json!({"sleep_ms": 60_000}),
            |answer| assert_eq!(error_code(answer), codes::TASK_NOT_FOUND),
        )
        .await;
        Self { runs, a, b, init, session_id, task_id, submitted, _renewers: [ra, rb] }
    }
}

/// A TASK_CANCEL received by replica B for a task running on replica A reaches it through the store: the canceller
/// is answered TASK_FAILED CANCELLED by B, A stops the task at its next lease renewal and answers its submitter
/// TASK_FAILED CANCELLED, and the record says cancelled for every replica.
async fn cancel_reaches_the_replica_running_the_task(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    // The task takes a minute: only the cancel can end it while this runs.
    let MinuteTaskOnA { runs, a, b, mut init, session_id, task_id, submitted, _renewers } =
        MinuteTaskOnA::start(a_store, b_store).await;

    let key = ldp_session::TaskKey { session_id: session_id.clone(), task_id: task_id.clone() };
    let cancel = init.cancel(&key).unwrap();
    let answer = send(&b, &cancel).await;
    let Body::TaskFailed(f) = &answer.body else { panic!("the canceller got {}", answer.body.type_name()) };
    assert_eq!(f.error.code.as_str(), codes::CANCELLED, "{:?}", f.error);
    assert!(!f.error.retryable);

    // The submitter, waiting on A, is answered CANCELLED once A renews its lease (every 200 ms).
    let stopped = tokio::time::timeout(Duration::from_secs(10), submitted)
        .await
        .expect("the task on A was not stopped by the cancel sent to B")
        .unwrap();
    assert_eq!(error_code(&stopped), codes::CANCELLED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Every replica now says cancelled: B from the store's record, A from its own history.
    let on_b = send(&b, &status_query(&mut init, &session_id, &task_id)).await;
    assert_eq!(error_code(&on_b), codes::CANCELLED);
    let on_a = send(&a, &status_query(&mut init, &session_id, &task_id)).await;
    let Body::TaskUpdate(u) = &on_a.body else { panic!("{}", on_a.body.type_name()) };
    assert_eq!(u.message.as_deref(), Some("cancelled"));
    // Cancelled once: a second cancel finds nothing running.
    let again = send(&b, &init.cancel(&key).unwrap_or_else(|_| cancel_envelope(&session_id, &task_id))).await;
    assert_eq!(error_code(&again), codes::TASK_NOT_FOUND);
}

/// A SESSION_CLOSE received by replica B ends the session on replica A too while A runs one of its tasks and sees
/// no message of the session: at its next lease renewal, A learns from the store that the session is closed and
/// ends it as a close received there would, stopping the task and answering its submitter TASK_FAILED CANCELLED
/// (before, the task ran on to its end, renewing its lease in a closed session).
async fn a_close_elsewhere_stops_the_sessions_tasks(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    let MinuteTaskOnA { runs, a: _a, b, mut init, session_id, submitted, _renewers, .. } =
        MinuteTaskOnA::start(a_store, b_store).await;
    let close = init.close(&session_id, None).unwrap();
    assert!(matches!(send(&b, &close).await.body, Body::SessionClose(_)));
    let stopped = tokio::time::timeout(Duration::from_secs(10), submitted)
        .await
        .expect("the task on A ran on in a session closed through B")
        .unwrap();
    let Body::TaskFailed(f) = &stopped.body else { panic!("the submitter got {}", stopped.body.type_name()) };
    assert_eq!(f.error.code.as_str(), codes::CANCELLED, "{:?}", f.error);
    assert!(f.error.message.contains("closed"), "{}", f.error.message);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A task that ends on A after a TASK_CANCEL sent to B recorded it cancelled, but before A's next lease renewal
/// could tell A: A's result is not what the submitter gets. The store's record (cancelled) wins, as it does for every
/// status query, so the submitter is answered TASK_FAILED CANCELLED, and A's own history says cancelled too.
async fn a_cancel_elsewhere_overrules_a_result_not_yet_sent(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    let runs = Arc::new(AtomicUsize::new(0));
    // Renewed every 10 s: the task ends long before A's first renewal.
    let lease = Duration::from_secs(30);
    let (a, _ra) = replica(a_store, &runs, lease);
    let (b, _rb) = replica(b_store, &runs, lease);
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;
    let (task_id, submitted) =
        submit_on_a_until_running_on_b(&mut init, &a, &b, &session_id, serde_json::json!({"sleep_ms": 1500}), |_| {})
            .await;
    let key = ldp_session::TaskKey { session_id: session_id.clone(), task_id: task_id.clone() };
    let answer = send(&b, &init.cancel(&key).unwrap()).await;
    assert_eq!(error_code(&answer), codes::CANCELLED);

    let ended = tokio::time::timeout(Duration::from_secs(10), submitted).await.unwrap().unwrap();
    assert!(!matches!(ended.body, Body::TaskResult(_)), "the submitter got the result of a cancelled task");
    assert_eq!(error_code(&ended), codes::CANCELLED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let on_b = send(&b, &status_query(&mut init, &session_id, &task_id)).await;
    assert_eq!(error_code(&on_b), codes::CANCELLED);
    let on_a = send(&a, &status_query(&mut init, &session_id, &task_id)).await;
    match &on_a.body {
        Body::TaskUpdate(u) => assert_eq!(u.message.as_deref(), Some("cancelled")),
        _ => assert_eq!(error_code(&on_a), codes::CANCELLED),
    }
}

/// A signed TASK_CANCEL built by hand (the initiator forgets a task once it ended).
fn cancel_envelope(session_id: &str, task_id: &str) -> Envelope {
    let mut env = Envelope::new(
        format!("c-{}", rand_id()),
        ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc()),
        session_id,
        "ldp:delegate:client",
        DELEGATE,
        ldp_types::TaskCancel::new(task_id.to_owned()),
    )
    .with_nonce(rand_id());
    ldp_types::signing::sign(&mut env, &key()).unwrap();
    env
}

/// The replay window's global bound holds across replicas: with room for 3 entries in all (2 per principal),
/// principal X's two messages on A and B and principal Y's first on A fill it, and Y's second, on B (whose own
/// table holds one entry, and Y's share one), is refused CAPACITY_EXCEEDED, retryable; Y's first again is still a
/// replay.
async fn replay_window_total_bound_spans_replicas(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut security = SecurityConfig::symmetric(key());
    security.replay = Some(ldp_session::ReplayConfig {
        max_entries: 3,
        max_entries_per_principal: 2,
        ..ldp_session::ReplayConfig::default()
    });
    let lease = Duration::from_secs(30);
    let (a, _ra) = replica_with(a_store, &runs, lease, security.clone());
    let (b, _rb) = replica_with(b_store, &runs, lease, security);
    let (mut x, mut y) = (initiator_as("ldp:delegate:x"), initiator_as("ldp:delegate:y"));
    for rt in [&a, &b] {
        let answer = send(rt, &x.propose(SessionConfig::default())).await;
        assert!(matches!(answer.body, Body::SessionAccept(_)), "{}", error_code(&answer));
    }
    let y_first = y.propose(SessionConfig::default());
    assert!(matches!(send(&a, &y_first).await.body, Body::SessionAccept(_)));
    let refused = send(&b, &y.propose(SessionConfig::default())).await;
    assert_eq!(error_code(&refused), codes::CAPACITY_EXCEEDED);
    let Body::SessionReject(r) = &refused.body else { unreachable!() };
    let error = r.error.as_ref().unwrap();
    assert!(error.retryable);
    assert!(error.message.contains("replay table full"), "{}", error.message);
    // Nothing was evicted for it: Y's first message is still known to every replica.
    assert_eq!(error_code(&send(&b, &y_first).await), codes::REPLAY_DETECTED);
}

/// The admission claims a TASK_SUBMIT's id before the machine judges it; a submission the machine refuses (an
/// unknown skill) gives the id back, so the same task id, submitted again rightly, runs on the other replica instead
/// of being refused DUPLICATE_TASK.
async fn a_refused_submission_leaves_its_task_id_free(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ra) = replica(a_store, &runs, Duration::from_secs(30));
    let (b, _rb) = replica(b_store, &runs, Duration::from_secs(30));
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;
    let bad = init.submit(&session_id, "no-such-skill", serde_json::json!({"n": 1}), None, None).unwrap();
    let refused = send(&a, &bad).await;
    let code = error_code(&refused);
    assert_ne!(code, codes::DUPLICATE_TASK);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let mut good = Envelope::from_slice(&bad.to_vec().unwrap()).unwrap();
    good.message_id = format!("again-{}", rand_id());
    good.nonce = Some(rand_id());
    if let Body::TaskSubmit(t) = &mut good.body {
        t.skill = "work".to_owned();
    }
    ldp_types::signing::sign(&mut good, &key()).unwrap();
    let answer = send(&b, &good).await;
    assert!(matches!(answer.body, Body::TaskResult(_)), "the id stayed claimed: {}", error_code(&answer));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A throwaway `redis-server` (kept running while the returned handle lives) and two stores on it, as two replicas
/// would have.
async fn redis_pair() -> (ldp_store::test_redis::RedisServer, Arc<dyn Store>, Arc<dyn Store>) {
    let server = ldp_store::test_redis::RedisServer::start().unwrap();
    let a: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap());
    (server, a, b)
}

/// A wall clock `lag` behind the system's, as a replica's whose clock drifted.
#[derive(Debug)]
struct Lagging(Duration);

impl ldp_session::WallClock for Lagging {
    fn now_utc(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc() - self.0
    }
}

/// A signed message accepted by A is refused as a replay by B even when B's clock lags A's: B takes the message's
/// timestamp as within its window for longer than A does (by the lag), so the shared entry is kept a future skew
/// past the window, the lag the window tolerates. Before, the entry went with A's window, and B accepted the replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_lags_still_refuses_a_replay() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreConfig::new(DELEGATE)));
    let mut security = SecurityConfig::symmetric(key());
    security.replay = Some(ldp_session::ReplayConfig {
        window: Duration::from_secs(2),
        future_skew: Duration::from_secs(5),
        ..ldp_session::ReplayConfig::default()
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ra) = replica_with(store.clone(), &runs, Duration::from_secs(30), security.clone());
    let build_b = || {
        let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Replicated", "none", "1");
        card.capabilities.push(Capability::new("work"));
        let mut cfg = ResponderConfig::new(card);
        cfg.security = security.clone();
        let clock = Arc::new(Lagging(Duration::from_secs(3)));
        let responder = Responder::new(cfg, clock, Box::new(SeededIds::from_entropy()));
        let runtime = DelegateRuntime::new(responder, Arc::new(Counting(runs.clone())));
        let renewer =
            runtime.attach_store(store.clone(), StoreOptions::new(Duration::from_secs(2), Duration::from_secs(30)));
        (runtime, renewer)
    };
    let (b, _rb) = build_b();
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;
    let query = status_query(&mut init, &session_id, "t-none");
    assert_eq!(error_code(&send(&a, &query).await), codes::TASK_NOT_FOUND);
    // Past A's window (2 s), within B's: B's clock says the message is 0.5 s in the future.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let replayed = send(&b, &query).await;
    assert_eq!(error_code(&replayed), codes::REPLAY_DETECTED, "a replica with a lagging clock accepted a replay");
}

/// A store degraded as a test asks: its first `failures` results (`finish_task`) fail, as a store down for a moment
/// would, and each lease renewal takes `renew_per_key` per task, as over a slow link.
struct Degraded {
    inner: Arc<dyn Store>,
    failures: AtomicUsize,
    renew_per_key: Duration,
}

#[async_trait]
impl Store for Degraded {
    fn backend(&self) -> &'static str {
        "degraded"
    }
    async fn admit(
        &self,
        admission: &ldp_session::shared::Admission,
    ) -> Result<ldp_session::shared::Admitted, ldp_session::store::StoreError> {
        self.inner.admit(admission).await
    }
    async fn create_session(
        &self,
        session: &ldp_session::shared::SharedSession,
    ) -> Result<bool, ldp_session::store::StoreError> {
        self.inner.create_session(session).await
    }
    async fn close_session(&self, session_id: &str) -> Result<(), ldp_session::store::StoreError> {
        self.inner.close_session(session_id).await
    }
    async fn claim_task(
        &self,
        key: &ldp_session::TaskKey,
        task: &SharedTask,
        lease: Duration,
    ) -> Result<TaskClaim, ldp_session::store::StoreError> {
        self.inner.claim_task(key, task, lease).await
    }
    async fn release_task(
        &self,
        key: &ldp_session::TaskKey,
        owner: &str,
        dedupe: Option<&ldp_session::shared::ReplayClaim>,
    ) -> Result<(), ldp_session::store::StoreError> {
        self.inner.release_task(key, owner, dedupe).await
    }
    async fn renew_leases(
        &self,
        owner: &str,
        keys: &[ldp_session::TaskKey],
        lease: Duration,
    ) -> Result<Vec<(ldp_session::TaskKey, SharedTask)>, ldp_session::store::StoreError> {
        tokio::time::sleep(self.renew_per_key * u32::try_from(keys.len()).unwrap()).await;
        self.inner.renew_leases(owner, keys, lease).await
    }
    async fn finish_task(
        &self,
        key: &ldp_session::TaskKey,
        task: &SharedTask,
    ) -> Result<ldp_session::shared::TaskFinish, ldp_session::store::StoreError> {
        let failing = self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if failing {
            return Err(ldp_session::store::StoreError::Unavailable { backend: "flaky", reason: "down".to_owned() });
        }
        self.inner.finish_task(key, task).await
    }
    async fn task(&self, key: &ldp_session::TaskKey) -> Result<Option<SharedTask>, ldp_session::store::StoreError> {
        self.inner.task(key).await
    }
    async fn ended_sessions(
        &self,
        session_ids: &[String],
    ) -> Result<Vec<(String, ldp_session::shared::SessionLookup)>, ldp_session::store::StoreError> {
        self.inner.ended_sessions(session_ids).await
    }
}

/// A result the store does not take when the task ends (down for a moment) is still answered to its submitter, and
/// recorded once the store takes it again: a status query on the other replica then gets the result, not a task
/// left `running` until its lease lapses and then failed `TASK_LEASE_EXPIRED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_store_missed_is_recorded_when_it_is_back() {
    let shared: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreConfig::new(DELEGATE)));
    let flaky: Arc<dyn Store> =
        Arc::new(Degraded { inner: shared.clone(), failures: AtomicUsize::new(2), renew_per_key: Duration::ZERO });
    let runs = Arc::new(AtomicUsize::new(0));
    // Renewed (and a missed record retried) every 200 ms.
    let lease = Duration::from_millis(600);
    let (a, _ra) = replica(flaky, &runs, lease);
    let (b, _rb) = replica(shared, &runs, lease);
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;
    let task = init.submit(&session_id, "work", serde_json::json!({"n": 1}), None, None).unwrap();
    let task_id = task.body.task_id().unwrap().to_owned();
    let answer = send(&a, &task).await;
    assert!(matches!(answer.body, Body::TaskResult(_)), "the submitter lost its result: {}", answer.body.type_name());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let on_b = send(&b, &status_query(&mut init, &session_id, &task_id)).await;
        match &on_b.body {
            Body::TaskResult(_) => break,
            Body::TaskUpdate(_) => {}
            _ => panic!("the other replica answered {}", error_code(&on_b)),
        }
        assert!(std::time::Instant::now() < deadline, "the result was never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A replica running many tasks renews all their leases even when each renewal is slow: renewals go in chunks, each
/// under the store timeout, where one call for every task outlasted the timeout and let every lease lapse (the other
/// replica then failed the tasks `TASK_LEASE_EXPIRED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_running_tasks_keep_their_leases_over_a_slow_store() {
    let shared: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreConfig::new(DELEGATE)));
    // 20 ms per task renewed: the 64 tasks (the replica's slots) in one call would take 1.28 s, past the 1 s timeout.
    let slow: Arc<dyn Store> = Arc::new(Degraded {
        inner: shared.clone(),
        failures: AtomicUsize::new(0),
        renew_per_key: Duration::from_millis(20),
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let lease = Duration::from_secs(3);
    let options = StoreOptions::new(Duration::from_secs(1), lease);
    let (a, _ra) = replica_with_options(slow, &runs, SecurityConfig::symmetric(key()), options);
    let (b, _rb) = replica(shared, &runs, lease);
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;
    let a = Arc::new(a);
    let mut running = Vec::new();
    for _ in 0..64 {
        let task = init.submit(&session_id, "work", serde_json::json!({"sleep_ms": 7000}), None, None).unwrap();
        let task_id = task.body.task_id().unwrap().to_owned();
        let a = a.clone();
        running.push((task_id, tokio::spawn(async move { send(&a, &task).await })));
    }
    // Past two leases, while every task still runs: none has lapsed for the other replica.
    tokio::time::sleep(Duration::from_millis(6200)).await;
    for (task_id, _) in running.iter().step_by(9) {
        let on_b = send(&b, &status_query(&mut init, &session_id, task_id)).await;
        assert!(matches!(on_b.body, Body::TaskUpdate(_)), "task {task_id} on B: {}", error_code(&on_b));
    }
    for (_, answer) in running {
        assert!(matches!(answer.await.unwrap().body, Body::TaskResult(_)));
    }
}

/// Two stores on one Redis Cluster, in a namespace of their own (each scenario's replay window counted apart), as
/// two replicas would open them.
async fn cluster_pair(
    cluster: &ldp_store::test_redis::RedisCluster,
    namespace: &str,
) -> (Arc<dyn Store>, Arc<dyn Store>) {
    let open = || async {
        Arc::new(RedisStore::open(&cluster.url(), StoreConfig::new(namespace)).await.unwrap()) as Arc<dyn Store>
    };
    (open().await, open().await)
}

/// The replicas' scenarios on a Redis Cluster of three primaries (`redis+cluster://`): every script's keys share
/// one slot, so each runs on the node that owns it, and sessions spread over the nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_serves_the_replicas() {
    let cluster = ldp_store::test_redis::RedisCluster::start(3).unwrap();
    let (a, b) = cluster_pair(&cluster, "ldp:delegate:cluster-share").await;
    two_replicas_share_state(a, b).await;
    let (a, b) = cluster_pair(&cluster, "ldp:delegate:cluster-cancel").await;
    cancel_reaches_the_replica_running_the_task(a, b).await;
    let (a, b) = cluster_pair(&cluster, "ldp:delegate:cluster-close").await;
    a_close_elsewhere_stops_the_sessions_tasks(a, b).await;
    let (a, b) = cluster_pair(&cluster, "ldp:delegate:cluster-bound").await;
    replay_window_total_bound_spans_replicas(a, b).await;
    let (a, b) = cluster_pair(&cluster, "ldp:delegate:cluster-refused").await;
    a_refused_submission_leaves_its_task_id_free(a, b).await;
    // The sessions landed on more than one node.
    let mut holding = 0;
    for url in cluster.node_urls() {
        let mut node = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
        let keys: usize = redis::cmd("DBSIZE").query_async(&mut node).await.unwrap();
        holding += usize::from(keys > 0);
    }
    assert!(holding >= 2, "every key is on one node of three");
}

/// Two connections (two writer threads) to one fresh database file, as two processes on one machine would have.
fn sqlite_pair(name: &str) -> (std::path::PathBuf, Arc<dyn Store>, Arc<dyn Store>) {
    let dir = std::env::temp_dir().join(format!("ldp-store-replicas-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    let a: Arc<dyn Store> = Arc::new(SqliteStore::open(&path, StoreConfig::new(DELEGATE)).unwrap());
    let b: Arc<dyn Store> = Arc::new(SqliteStore::open(&path, StoreConfig::new(DELEGATE)).unwrap());
    (dir, a, b)
}

/// Redis down: every message is refused STORE_UNAVAILABLE (retryable) within the store timeout, never hangs; back
/// up (empty), the replica serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_a_typed_retryable_refusal_and_recovers() {
    let mut server = ldp_store::test_redis::RedisServer::start().unwrap();
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url(), StoreConfig::new(DELEGATE)).await.unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _r) = replica(store, &runs, Duration::from_secs(30));
    let mut init = initiator();
    assert!(matches!(send(&a, &init.propose(SessionConfig::default())).await.body, Body::SessionAccept(_)));
    server.stop();
    let started = std::time::Instant::now();
    let refused = send(&a, &init.propose(SessionConfig::default())).await;
    assert_eq!(error_code(&refused), codes::STORE_UNAVAILABLE);
    let Body::SessionReject(r) = &refused.body else { unreachable!() };
    assert!(r.error.as_ref().unwrap().retryable);
    // What failed inside is the operator's (logged), not the peer's: no backend, address or system error.
    let message = &r.error.as_ref().unwrap().message;
    for inside in ["redis", "127.0.0.1", "refused", "os error"] {
        assert!(!message.to_lowercase().contains(inside), "{message}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    server.restart().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(&a, &init.propose(SessionConfig::default())).await;
        if matches!(answer.body, Body::SessionAccept(_)) {
            break;
        }
        assert_eq!(error_code(&answer), codes::STORE_UNAVAILABLE);
        assert!(std::time::Instant::now() < deadline, "no recovery within 10 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A task's end is recorded only while the task runs under its owner; otherwise the store answers with the record it
/// holds, in the same step (another replica's claim, or an end already recorded), which is what every status query
/// will say.
async fn a_refused_end_returns_the_record_held(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    use ldp_session::shared::{SharedTaskStatus, TaskFinish};
    let key = ldp_session::TaskKey { session_id: format!("s-{}", rand_id()), task_id: "t".into() };
    let on_a = SharedTask::running("replica-a", ldp_types::PayloadMode::Text);
    let claimed = a_store.claim_task(&key, &on_a, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed, TaskClaim::Claimed);

    let mut b_result = SharedTask::running("replica-b", ldp_types::PayloadMode::Text);
    b_result.status = SharedTaskStatus::Completed;
    b_result.output = Some("\"from b\"".into());
    let TaskFinish::Refused(held) = b_store.finish_task(&key, &b_result).await.unwrap() else {
        panic!("a replica that does not own the task recorded its end");
    };
    // The claim as stored (whether its lease is in the record or beside it depends on the backend).
    assert_eq!((held.owner.as_str(), &held.status), ("replica-a", &SharedTaskStatus::Running));

    let cancelled = on_a.cancelled();
    assert_eq!(a_store.finish_task(&key, &cancelled).await.unwrap(), TaskFinish::Recorded);
    let mut late = on_a.clone();
    late.status = SharedTaskStatus::Completed;
    late.output = Some("\"late\"".into());
    assert_eq!(a_store.finish_task(&key, &late).await.unwrap(), TaskFinish::Refused(Box::new(cancelled.clone())));
    assert_eq!(b_store.task(&key).await.unwrap(), Some(cancelled), "what a status query says");
}

/// A result longer than the store keeps (`StoreOptions::max_result_bytes`) is answered in full to its submitter, and
/// kept as failed `RESULT_NOT_KEPT` (not retryable) for status queries on other replicas; its id still refuses a
/// resend, and a short result is kept as it is. What one task can make the store hold stays bounded.
async fn a_result_too_long_to_keep_is_answered_but_not_kept(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    const KEEP: usize = 200;
    let runs = Arc::new(AtomicUsize::new(0));
    let options = StoreOptions::new(Duration::from_secs(2), Duration::from_secs(30)).with_max_result_bytes(KEEP);
    let (a, _ra) = replica_with_options(a_store, &runs, SecurityConfig::symmetric(key()), options);
    let (b, _rb) = replica_with_options(b_store, &runs, SecurityConfig::symmetric(key()), options);
    let mut init = initiator();
    let session_id = establish(&mut init, &a).await;

    let long = "x".repeat(KEEP);
    let submit = init.submit(&session_id, "work", serde_json::json!(long), None, None).unwrap();
    let task_id = submit.body.task_id().unwrap().to_owned();
    let answered = send(&a, &submit).await;
    let Body::TaskResult(r) = &answered.body else { panic!("expected the result, got {}", error_code(&answered)) };
    assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), serde_json::json!({"ran": long}));
    let queried = send(&b, &status_query(&mut init, &session_id, &task_id)).await;
    let Body::TaskFailed(f) = &queried.body else {
        panic!("expected RESULT_NOT_KEPT, got {}", queried.body.type_name())
    };
    assert_eq!((f.error.code.as_str(), f.error.retryable), (codes::RESULT_NOT_KEPT, false));
    let mut again = submit.clone();
    again.message_id = format!("resend-{}", rand_id());
    again.nonce = Some(rand_id());
    ldp_types::signing::sign(&mut again, &key()).unwrap();
    assert_eq!(error_code(&send(&b, &again).await), codes::DUPLICATE_TASK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let short = init.submit(&session_id, "work", serde_json::json!("short"), None, None).unwrap();
    let short_id = short.body.task_id().unwrap().to_owned();
    assert!(matches!(send(&a, &short).await.body, Body::TaskResult(_)));
    let queried = send(&b, &status_query(&mut init, &session_id, &short_id)).await;
    let Body::TaskResult(r) = &queried.body else { panic!("expected the result, got {}", error_code(&queried)) };
    assert_eq!(r.output.parse::<serde_json::Value>().unwrap(), serde_json::json!({"ran": "short"}));
}

/// A replica at its session limit (one session, here) continues sessions proposed on another replica by dropping
/// its copy of an idle one, which the store still holds and which it adopts again on that session's next message.
/// With no session idle (its one session runs a task) it refuses the next, CAPACITY_EXCEEDED (retryable), before the
/// store acts on it: no replica holds the task it submitted, and a cancel it carried leaves its task running.
async fn a_full_replica_makes_room_for_sessions_of_others(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    a_replica_at_a_limit_makes_room(a_store, b_store, |limits| limits.max_sessions = 1).await;
}

/// The same at the peer's own limit on the replica (`max_sessions_per_principal`, one here), the replica itself far
/// from full: one principal cannot take more of a replica by continuing its sessions there than by proposing them.
async fn a_replica_at_a_principals_limit_makes_room(a_store: Arc<dyn Store>, b_store: Arc<dyn Store>) {
    a_replica_at_a_limit_makes_room(a_store, b_store, |limits| limits.max_sessions_per_principal = 1).await;
}

async fn a_replica_at_a_limit_makes_room(
    a_store: Arc<dyn Store>,
    b_store: Arc<dyn Store>,
    limit: impl FnOnce(&mut ldp_session::Limits),
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ra) = replica(a_store, &runs, Duration::from_secs(30));
    let mut small = responder_config(SecurityConfig::symmetric(key()));
    limit(&mut small.limits);
    let (b, _rb) =
        replica_from(small, b_store, &runs, StoreOptions::new(Duration::from_secs(2), Duration::from_secs(30)));
    let mut init = initiator();
    let first = establish(&mut init, &a).await;
    let second = establish(&mut init, &a).await;
    for session_id in [&first, &second, &first] {
        let answer = send(&b, &init.submit(session_id, "work", serde_json::json!({}), None, None).unwrap()).await;
        assert!(matches!(answer.body, Body::TaskResult(_)), "{}", error_code(&answer));
    }

    // A task of `second` runs on A, for a cancel B must not act on.
    let (on_a, on_a_done) =
        submit_on_a_until_running_on_b(&mut init, &a, &a, &second, serde_json::json!({"sleep_ms": 3_000}), |answer| {
            assert_eq!(error_code(answer), codes::TASK_NOT_FOUND)
        })
        .await;
    // `first` runs a task on B: B has no idle session to drop.
    let (_, running) =
        submit_on_a_until_running_on_b(&mut init, &b, &a, &first, serde_json::json!({"sleep_ms": 1_500}), |answer| {
            assert_eq!(error_code(answer), codes::TASK_NOT_FOUND)
        })
        .await;
    let refused = init.submit(&second, "work", serde_json::json!({}), None, None).unwrap();
    let refused_id = refused.body.task_id().unwrap().to_owned();
    let answer = send(&b, &refused).await;
    let Body::TaskFailed(f) = &answer.body else { panic!("expected a refusal, got {}", answer.body.type_name()) };
    assert_eq!((f.error.code.as_str(), f.error.retryable), (codes::CAPACITY_EXCEEDED, true), "{:?}", f.error);
    let query = status_query(&mut init, &second, &refused_id);
    assert_eq!(error_code(&send(&a, &query).await), codes::TASK_NOT_FOUND, "the refused task's claim was kept");
    // A cancel B cannot take is refused before the store acts on it: the task on A runs on.
    assert_eq!(error_code(&send(&b, &cancel_envelope(&second, &on_a)).await), codes::CAPACITY_EXCEEDED);
    let on_a_now = send(&a, &status_query(&mut init, &second, &on_a)).await;
    assert!(matches!(on_a_now.body, Body::TaskUpdate(_)), "the refused cancel was applied: {}", error_code(&on_a_now));

    // Once that task ends, B continues `second` again.
    let ended = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    assert!(matches!(ended.body, Body::TaskResult(_)), "{}", error_code(&ended));
    let answer = send(&b, &init.submit(&second, "work", serde_json::json!({}), None, None).unwrap()).await;
    assert!(matches!(answer.body, Body::TaskResult(_)), "{}", error_code(&answer));
    let done = tokio::time::timeout(Duration::from_secs(10), on_a_done).await.unwrap().unwrap();
    assert!(matches!(done.body, Body::TaskResult(_)), "{}", error_code(&done));
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

/// The three tests of a scenario on two replicas, one per backend, in a module named for the scenario: one
/// `MemoryStore` both replicas hold, one SQLite file each opens (two writer threads, as two processes on one machine
/// would have), one `redis-server` each connects to.
macro_rules! on_every_backend {
    ($($name:ident => $scenario:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreConfig::new(DELEGATE)));
                $scenario(store.clone(), store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (dir, a, b) = sqlite_pair(stringify!($name));
                $scenario(a, b).await;
                let _ = std::fs::remove_dir_all(&dir);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                let (_server, a, b) = redis_pair().await;
                $scenario(a, b).await;
            }
        }
    )*};
}

on_every_backend! {
    replicas_share_state => two_replicas_share_state,
    close_elsewhere_stops_the_tasks => a_close_elsewhere_stops_the_sessions_tasks,
    cancel_elsewhere_overrules_the_result => a_cancel_elsewhere_overrules_a_result_not_yet_sent,
    refused_submission_frees_its_id => a_refused_submission_leaves_its_task_id_free,
    cancel_reaches_the_owner => cancel_reaches_the_replica_running_the_task,
    replay_total_bound => replay_window_total_bound_spans_replicas,
    refused_end_returns_the_record_held => a_refused_end_returns_the_record_held,
    result_too_long_to_keep => a_result_too_long_to_keep_is_answered_but_not_kept,
    full_replica_makes_room => a_full_replica_makes_room_for_sessions_of_others,
    principal_limit_makes_room => a_replica_at_a_principals_limit_makes_room,
}
