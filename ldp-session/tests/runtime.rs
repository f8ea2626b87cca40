#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The async glue end to end over the in-memory transport: client API, delegate runtime, fallback, cancel,
//! contracts, progress.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, EchoDelegate, MemoryTransport, Submission, TaskContext};
use ldp_session::*;
use ldp_types::*;
use serde_json::json;

fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:test").unwrap(), "Test", "none", "1.0");
    card.capabilities = vec![Capability::new("echo"), Capability::new("slow"), Capability::new("frames")];
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card
}

fn runtime(delegate: Arc<dyn Delegate>) -> DelegateRuntime {
    let responder = Responder::new(ResponderConfig::new(card()), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    DelegateRuntime::new(responder, delegate)
}

async fn client(rt: &DelegateRuntime) -> Client<MemoryTransport> {
    let transport = MemoryTransport::new(rt.clone(), PeerContext::default());
    Client::connect(
        transport,
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::new(8)),
    )
    .await
    .unwrap()
}

/// Fails semantic frames as a payload-mode failure, answers text; reports progress and usage.
struct FussyDelegate;

#[async_trait]
impl Delegate for FussyDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        match task.skill.as_str() {
            "slow" => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(TaskOutput::new(json!("late")))
            }
            "frames" if task.payload_mode == PayloadMode::SemanticFrame => {
                Err(LdpError::capability(codes::PAYLOAD_MODE_FAILED, "semantic_frame validation failed"))
            }
            _ => {
                ctx.progress(Some(0.5), Some("half".to_owned()));
                let mut out = TaskOutput::new(json!({ "got": task.input }));
                out.tokens_used = Some(8200);
                Ok(out)
            }
        }
    }
}

#[tokio::test]
async fn echo_round_trip_with_provenance() {
    let rt = runtime(Arc::new(EchoDelegate));
    let c = client(&rt).await;
    assert_eq!(c.manifest().unwrap().skills, vec!["echo", "slow", "frames"]);
    let s = c.propose(SessionConfig::default()).await.unwrap();
    assert_eq!(s.mode, PayloadMode::SemanticFrame);
    assert_eq!(s.fallback_chain, vec![PayloadMode::Text]);
    let frame = SemanticFrame::new("echo", "repeat").to_input();
    let out = c.submit(&s.session_id, "echo", frame.clone(), None).await.unwrap();
    assert_eq!(out.output, json!({ "echo": frame }));
    assert_eq!(out.provenance.produced_by, "ldp:delegate:test");
    assert_eq!(out.provenance.payload_mode_used, PayloadMode::SemanticFrame);
    c.close(&s.session_id).await.unwrap();
    let again = c.propose(SessionConfig::default()).await.unwrap();
    assert_ne!(again.session_id, s.session_id);
}

#[tokio::test]
async fn payload_failure_falls_back_to_text_automatically() {
    let rt = runtime(Arc::new(FussyDelegate));
    let c = client(&rt).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let out = c.submit(&s.session_id, "frames", SemanticFrame::new("t", "do it").to_input(), None).await.unwrap();
    assert_eq!(out.fallbacks, vec![(PayloadMode::SemanticFrame, PayloadMode::Text)]);
    assert_eq!(out.provenance.payload_mode_used, PayloadMode::Text);
    assert!(out.output.to_value().unwrap()["got"].as_str().unwrap().contains("instruction: do it"));
    // The session survived and now runs in text.
    let next = c.submit(&s.session_id, "echo", json!("plain"), None).await.unwrap();
    assert_eq!(next.provenance.payload_mode_used, PayloadMode::Text);
}

#[tokio::test]
async fn fail_closed_contract_violation_keeps_partial_output() {
    let rt = runtime(Arc::new(FussyDelegate));
    let c = client(&rt).await;
    let s = c
        .propose(SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() })
        .await
        .unwrap();
    let contract = DelegationContract::new("ctr-1", "summarise")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(6000), max_cost_usd: None });
    let err = c.submit(&s.session_id, "echo", json!("x"), Some(contract)).await.unwrap_err();
    let SessionError::Peer(e) = err else { panic!("{err:?}") };
    assert_eq!(e.code, codes::CONTRACT_VIOLATED);
    assert_eq!(e.category, ErrorCategory::Policy);
    assert_eq!(e.partial_output, Some(json!({ "got": "x" })));
}

#[tokio::test]
async fn closing_a_session_cancels_its_running_task_with_a_definite_answer() {
    let rt = runtime(Arc::new(FussyDelegate));
    let c = Arc::new(client(&rt).await);
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let c2 = c.clone();
    let sid = s.session_id.clone();
    let frame = SemanticFrame::new("wait", "take your time").to_input();
    let running = tokio::spawn(async move { c2.submit(&sid, "slow", frame, None).await });
    for _ in 0..400 {
        if rt.running_tasks() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rt.running_tasks(), 1, "the slow task never started");
    c.close(&s.session_id).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    let SessionError::Peer(e) = result.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::CANCELLED);
    assert_eq!(rt.running_tasks(), 0);
}

#[tokio::test]
async fn progress_reaches_a_streaming_submitter() {
    let rt = runtime(Arc::new(FussyDelegate));
    let c = client(&rt).await;
    let s = c
        .propose(SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() })
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let out = c.submit_task(Submission::new(&s.session_id, "echo", json!("x")).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!({ "got": "x" }));
    let p = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!(p.progress, Some(0.5));
    assert_eq!(p.message.as_deref(), Some("half"));
}

/// Runs every message with `DelegateRuntime::handle_in_place` on a task of its own, as the HTTP binding does.
struct InPlaceTransport {
    runtime: DelegateRuntime,
}

#[async_trait]
impl runtime::Transport for InPlaceTransport {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        Ok(self.runtime.card())
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<tokio::sync::mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let bytes = envelope.to_vec().unwrap();
        let rt = self.runtime.clone();
        let job = tokio::spawn(async move { rt.handle_in_place(&PeerContext::default(), &bytes, updates).await });
        match job.await.unwrap() {
            runtime::Response::Reply(env) => Ok(Some(env.to_vec().unwrap())),
            runtime::Response::Accepted => Ok(None),
            runtime::Response::Refused(refusal) => refusal.into_reply().map(|env| Some(env.to_vec().unwrap())),
        }
    }
}

/// Panics on the `boom` skill, otherwise answers like `FussyDelegate`.
struct PanickyDelegate;

#[async_trait]
impl Delegate for PanickyDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        if task.skill == "boom" {
            panic!("delegate bug");
        }
        FussyDelegate.execute(task, ctx).await
    }
}

#[tokio::test]
async fn in_place_handling_completes_cancels_streams_and_survives_delegate_panics() {
    let mut card = card();
    card.capabilities.push(Capability::new("boom"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let rt = DelegateRuntime::new(responder, Arc::new(PanickyDelegate));
    let c = Arc::new(
        Client::connect(
            InPlaceTransport { runtime: rt.clone() },
            InitiatorConfig::new("ldp:delegate:client"),
            Arc::new(SystemClock),
            Box::new(SeededIds::new(8)),
        )
        .await
        .unwrap(),
    );
    let text = SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() };
    let s = c.propose(text).await.unwrap();
    // Completes, with progress streamed.
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let out = c.submit_task(Submission::new(&s.session_id, "echo", json!("x")).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!({ "got": "x" }));
    assert_eq!(rx.recv().await.unwrap().progress, Some(0.5));
    // A panicking delegate fails its task; the runtime keeps serving.
    let SessionError::Peer(e) = c.submit(&s.session_id, "boom", json!("x"), None).await.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::EXECUTION_FAILED);
    assert_eq!(rt.running_tasks(), 0);
    // Closing the session cancels a running task with a definite answer.
    let (c2, sid) = (c.clone(), s.session_id.clone());
    let running = tokio::spawn(async move { c2.submit(&sid, "slow", json!("x"), None).await });
    for _ in 0..400 {
        if rt.running_tasks() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rt.running_tasks(), 1, "the slow task never started");
    c.close(&s.session_id).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    let SessionError::Peer(e) = result.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::CANCELLED);
    assert_eq!(rt.running_tasks(), 0);
}

#[tokio::test]
async fn a_panicking_delegate_fails_its_task_when_spawned_too() {
    let mut card = card();
    card.capabilities.push(Capability::new("boom"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let rt = DelegateRuntime::new(responder, Arc::new(PanickyDelegate));
    let c = client(&rt).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let SessionError::Peer(e) = c.submit(&s.session_id, "boom", json!("x"), None).await.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::EXECUTION_FAILED);
}

/// The echo delegate `ldp serve` runs, driven with the inputs of issue 14 (finding 5) as raw messages: each is
/// refused at the door with a typed MALFORMED_MESSAGE (what no `serde_json::Value` can hold, a repeated member
/// name), failed with a typed error (one level too deep to echo), or echoed; never "the delegate panicked".
#[tokio::test]
async fn the_echo_delegate_never_panics_on_hostile_input() {
    let rt = runtime(Arc::new(EchoDelegate));
    let c = client(&rt).await;
    let text = SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() };
    let s = c.propose(text).await.unwrap();
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let submit = |n: usize, input: &str| {
        format!(
            r#"{{"message_id":"hostile-{n}","session_id":"{}","from":"ldp:delegate:client","to":"ldp:delegate:test",
            "body":{{"type":"TASK_SUBMIT","task_id":"t-{n}","skill":"echo","input":{input}}},"payload_mode":"text",
            "timestamp":"{}"}}"#,
            s.session_id,
            ldp_types::time::format_timestamp(::time::OffsetDateTime::now_utc()),
        )
    };
    enum Expect {
        Refused,
        Failed,
        Echoed,
    }
    let cases = [
        ("\"\\ud800\"".to_owned(), Expect::Refused),
        ("1e400".to_owned(), Expect::Refused),
        ("9".repeat(400), Expect::Refused),
        (nested(128), Expect::Refused),
        // The deepest input a message can carry (the envelope and body take two of the 127 levels)...
        (nested(126), Expect::Refused),
        (nested(125), Expect::Failed),
        // ...and the deepest the echo's one more level still fits.
        (nested(124), Expect::Echoed),
        (r#"{"text":"a","text":"b"}"#.to_owned(), Expect::Refused),
        (r#"{"a":[{"b":1,"b":1}]}"#.to_owned(), Expect::Refused),
        (format!("[{}, 1e300, \"\\ud83d\\ude00\"]", "9".repeat(300)), Expect::Echoed),
        (r#""hello""#.to_owned(), Expect::Echoed),
    ];
    for (n, (input, expect)) in cases.iter().enumerate() {
        let response = rt.handle(&PeerContext::default(), submit(n, input).as_bytes(), None).await;
        match (expect, response) {
            (Expect::Refused, runtime::Response::Refused(refusal)) => {
                let error = &refusal.error;
                assert_eq!(error.code, codes::MALFORMED_MESSAGE, "{input}: {error}");
            }
            (Expect::Failed, runtime::Response::Reply(env)) => {
                let Body::TaskFailed(failed) = env.body else { panic!("{input}: {:?}", env.body) };
                assert_eq!(failed.error.code, codes::EXECUTION_FAILED);
                assert!(!failed.error.message.contains("panicked"), "{input}: {}", failed.error);
            }
            (Expect::Echoed, runtime::Response::Reply(env)) => {
                let Body::TaskResult(result) = &env.body else { panic!("{input}: {:?}", env.body) };
                let input: serde_json::Value = serde_json::from_str(input).unwrap();
                assert_eq!(result.output, json!({ "echo": input }));
                // What the peer receives decodes and can be read.
                let received = Envelope::from_slice(&env.to_vec().unwrap()).unwrap();
                let Body::TaskResult(received) = received.body else { panic!() };
                assert_eq!(received.output, json!({ "echo": input }));
            }
            (_, other) => panic!("{input}: unexpected {other:?}"),
        }
    }
    assert_eq!(rt.running_tasks(), 0);
}

/// Works until stopped: counts its steps, and records that its future was dropped (the runtime stopped it).
struct Spinner {
    steps: Arc<std::sync::atomic::AtomicU64>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

/// Sets its flag when dropped: the delegate's future was dropped (aborted), not finished.
struct DropGuard(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl Delegate for Spinner {
    async fn execute(&self, _task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let _guard = DropGuard(self.stopped.clone());
        loop {
            self.steps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// How the test ends the session under the spinning task.
#[derive(Debug, Clone, Copy)]
enum End {
    /// Its TTL runs out and the machine reaps it (`handle_timeout`, as the reaper calls it).
    Expiry,
    /// The server closes it (`Responder::close_session`).
    ServerClose,
    /// The initiator closes it (SESSION_CLOSE).
    PeerClose,
}

/// Expiry and close stop the delegate's work (its future is dropped and it makes no more steps), answer its
/// submitter with a definite CANCELLED, and free the slot; on a spawned delegate and one run in place alike.
#[tokio::test]
async fn expiry_and_close_stop_the_delegates_work() {
    use std::sync::atomic::Ordering;
    for in_place in [false, true] {
        for end in [End::Expiry, End::ServerClose, End::PeerClose] {
            let steps = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let rt = runtime(Arc::new(Spinner { steps: steps.clone(), stopped: stopped.clone() }));
            let c = Arc::new(if in_place {
                Client::connect(
                    InPlaceTransportOrMemory::InPlace(InPlaceTransport { runtime: rt.clone() }),
                    InitiatorConfig::new("ldp:delegate:client"),
                    Arc::new(SystemClock),
                    Box::new(SeededIds::new(8)),
                )
                .await
                .unwrap()
            } else {
                Client::connect(
                    InPlaceTransportOrMemory::Memory(MemoryTransport::new(rt.clone(), PeerContext::default())),
                    InitiatorConfig::new("ldp:delegate:client"),
                    Arc::new(SystemClock),
                    Box::new(SeededIds::new(8)),
                )
                .await
                .unwrap()
            });
            let config = SessionConfig { ttl_secs: Some(60), ..Default::default() };
            let s = c.propose(config).await.unwrap();
            let (c2, sid) = (c.clone(), s.session_id.clone());
            let submitter = tokio::spawn(async move { c2.submit(&sid, "echo", json!("spin"), None).await });
            for _ in 0..400 {
                if steps.load(Ordering::SeqCst) > 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(steps.load(Ordering::SeqCst) > 2, "{end:?}: the delegate never ran");
            match end {
                End::Expiry => {
                    let later = std::time::Instant::now() + Duration::from_secs(61);
                    let reaped = rt.machine(|r| r.handle_timeout(later));
                    assert_eq!(reaped.len(), 1, "{end:?}: the expired session's task is handed back");
                }
                End::ServerClose => {
                    let (_, aborted) = rt.machine(|r| r.close_session(&s.session_id, None)).unwrap();
                    assert_eq!(aborted.len(), 1);
                }
                End::PeerClose => c.close(&s.session_id).await.unwrap(),
            }
            assert_eq!(rt.running_tasks(), 0, "{end:?}: the slot is freed");
            let answer = tokio::time::timeout(Duration::from_secs(5), submitter).await.unwrap().unwrap();
            let SessionError::Peer(e) = answer.unwrap_err() else { panic!("{end:?}") };
            assert_eq!(e.code, codes::CANCELLED, "{end:?}: {e}");
            for _ in 0..400 {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(
                stopped.load(Ordering::SeqCst),
                "{end:?} (in place: {in_place}): the delegate's work was not stopped"
            );
            let after = steps.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(steps.load(Ordering::SeqCst), after, "{end:?}: the delegate keeps working");
        }
    }
}

/// Either transport, so one test drives both ways of running a delegate.
enum InPlaceTransportOrMemory {
    InPlace(InPlaceTransport),
    Memory(MemoryTransport),
}

#[async_trait]
impl runtime::Transport for InPlaceTransportOrMemory {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        match self {
            Self::InPlace(t) => t.identity().await,
            Self::Memory(t) => t.identity().await,
        }
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<tokio::sync::mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        match self {
            Self::InPlace(t) => t.exchange(envelope, updates).await,
            Self::Memory(t) => t.exchange(envelope, updates).await,
        }
    }
}

/// The runtime reads time from one hook (tokio's clock by default), so a test simulates it: with tokio's time
/// paused, a minute passes at once, the reaper expires the session and the delegate's work stops.
#[tokio::test(start_paused = true)]
async fn the_reaper_expires_sessions_on_simulated_time() {
    use std::sync::atomic::Ordering;
    let steps = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rt = runtime(Arc::new(Spinner { steps: steps.clone(), stopped: stopped.clone() }));
    let reaper = rt.spawn_reaper();
    let c = Arc::new(client(&rt).await);
    let s = c.propose(SessionConfig { ttl_secs: Some(60), ..Default::default() }).await.unwrap();
    let (c2, sid) = (c.clone(), s.session_id.clone());
    let submitter = tokio::spawn(async move { c2.submit(&sid, "echo", json!("spin"), None).await });
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(steps.load(Ordering::SeqCst) > 0 && !stopped.load(Ordering::SeqCst), "still working before the TTL");
    assert_eq!(rt.running_tasks(), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let SessionError::Peer(e) = submitter.await.unwrap().unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::CANCELLED);
    // The delegate's work is dropped once its cancel grace has passed.
    tokio::time::sleep(runtime::DEFAULT_CANCEL_GRACE).await;
    assert!(stopped.load(Ordering::SeqCst), "the expired session's work was not stopped");
    assert_eq!(rt.gauges().sessions, 0);
    reaper.abort();
}

/// The reaper sleeps until the machine's next timeout; a message that brings that timeout forward wakes it. Here a
/// session with a one-minute TTL, proposed while the reaper sleeps until an hour-long session's expiry, is reaped
/// when its minute is up, not an hour later.
#[tokio::test(start_paused = true)]
async fn a_shorter_ttl_proposed_while_the_reaper_sleeps_is_reaped_on_time() {
    let rt = runtime(Arc::new(EchoDelegate));
    let reaper = rt.spawn_reaper();
    let c = client(&rt).await;
    c.propose(SessionConfig { ttl_secs: Some(3600), ..Default::default() }).await.unwrap();
    // Past the reaper's one-second look when it had nothing to wait for: it now sleeps until the hour is up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.propose(SessionConfig { ttl_secs: Some(60), ..Default::default() }).await.unwrap();
    assert_eq!(rt.gauges().sessions, 2);
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(rt.gauges().sessions, 2, "reaped before its TTL");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rt.gauges().sessions, 1, "the one-minute session outlived its TTL");
    reaper.abort();
}

/// Echoes, and says when it is dropped (its guard's only use is its drop).
struct DropFlag(#[allow(dead_code)] DropGuard);

#[async_trait]
impl Delegate for DropFlag {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        EchoDelegate.execute(task, ctx).await
    }
}

/// A detached reaper (as a router mounted in the caller's app spawns) keeps nothing alive: once the last handle of
/// the runtime is dropped, the delegate is dropped and the reaper ends, though a session had an hour to run.
#[tokio::test(start_paused = true)]
async fn a_detached_reaper_ends_with_its_runtime() {
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rt = runtime(Arc::new(DropFlag(DropGuard(dropped.clone()))));
    let reaper = rt.spawn_reaper();
    let c = client(&rt).await;
    c.propose(SessionConfig { ttl_secs: Some(3600), ..Default::default() }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!reaper.is_finished());
    drop((c, rt));
    tokio::time::timeout(Duration::from_secs(1), reaper).await.expect("the reaper outlived its runtime").unwrap();
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the delegate was kept alive");
}

/// A writer into a shared buffer, for reading what the runtime logged.
#[derive(Clone, Default)]
struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogSink {
    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap()).matches(needle).count()
    }
}

/// The end of a run of refusals is logged when the machine's quiet period is up, also when the run started while
/// the reaper slept until a far later timeout (it had slept until the hour-long session's expiry, so the line came an
/// hour late, or never).
#[tokio::test(start_paused = true)]
async fn the_end_of_a_run_of_refusals_is_logged_when_its_quiet_period_is_up() {
    let sink = LogSink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut cfg = ResponderConfig::new(card());
    cfg.limits.max_sessions = 1;
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let rt = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let reaper = rt.spawn_reaper();
    let c = client(&rt).await;
    c.propose(SessionConfig { ttl_secs: Some(3600), ..Default::default() }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let SessionError::Peer(e) = c.propose(SessionConfig::default()).await.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::CAPACITY_EXCEEDED);
    assert_eq!(sink.count("the session table (max_sessions) started refusing"), 1);
    tokio::time::sleep(REFUSAL_QUIET_AFTER - Duration::from_secs(1)).await;
    assert_eq!(sink.count("stopped refusing"), 0, "ended before its quiet period was up");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.count("the session table (max_sessions) stopped refusing after 1 refusals"), 1);
    reaper.abort();
}

/// A `fail_closed` contract's deadline is enforced while the task runs (issue 22): when it passes, the machine ends
/// the task, its submitter gets `CONTRACT_VIOLATED` at once (not the result, late), and the delegate's work stops
/// (after the cancellation grace, which a delegate that watches `TaskContext::cancelled` does not need).
/// Under `fail_open` the task runs on. On simulated time: the reaper wakes for the deadline although the session's
/// expiry is far later.
#[tokio::test(start_paused = true)]
async fn a_fail_closed_deadline_stops_the_work_when_it_passes() {
    use std::sync::atomic::Ordering;
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let steps = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rt = runtime(Arc::new(Spinner { steps: steps.clone(), stopped: stopped.clone() }));
        let reaper = rt.spawn_reaper();
        let c = Arc::new(client(&rt).await);
        let s = c.propose(SessionConfig { ttl_secs: Some(3600), ..Default::default() }).await.unwrap();
        let deadline = ldp_types::time::format_timestamp(::time::OffsetDateTime::now_utc() + Duration::from_secs(5));
        let contract = DelegationContract::new("c-deadline", "spin for a while")
            .with_deadline(deadline)
            .with_failure_policy(policy);
        let (c2, sid) = (c.clone(), s.session_id.clone());
        let submitter = tokio::spawn(async move { c2.submit(&sid, "echo", json!("spin"), Some(contract)).await });
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!stopped.load(Ordering::SeqCst) && !submitter.is_finished(), "{policy:?}: stopped before the deadline");
        tokio::time::sleep(Duration::from_secs(2)).await;
        match policy {
            FailurePolicy::FailClosed => {
                assert!(submitter.is_finished(), "the submitter still waits after the deadline");
                let SessionError::Peer(e) = submitter.await.unwrap().unwrap_err() else { panic!() };
                assert_eq!(e.code, codes::CONTRACT_VIOLATED, "{e}");
                assert!(e.message.contains("DEADLINE_EXCEEDED") && !e.retryable, "{e}");
                // The delegate is signalled at once and its work dropped after the cancellation grace.
                tokio::time::sleep(runtime::DEFAULT_CANCEL_GRACE + Duration::from_millis(100)).await;
                assert!(stopped.load(Ordering::SeqCst), "the work was not stopped after the deadline and grace");
                assert_eq!(rt.running_tasks(), 0);
            }
            _ => {
                assert!(!stopped.load(Ordering::SeqCst), "fail_open: the work goes on past the deadline");
                assert_eq!(rt.running_tasks(), 1);
                submitter.abort();
            }
        }
        reaper.abort();
    }
}

/// Carries messages into a runtime, except that it fails the next `failures` exchanges of the message types in
/// `fail` with a transport error (the message is delivered first when `deliver` is set: the answer is what got lost).
/// With `report_lost` it tells its driver those answers were lost (`Exchange::Lost`, as the HTTP transport does
/// once the request was written) and gives the driver a 30 s answer timeout and a status poll; with `hang` those
/// messages are never answered at all.
struct Lossy {
    inner: MemoryTransport,
    fail: &'static [&'static str],
    failures: std::sync::atomic::AtomicUsize,
    deliver: bool,
    report_lost: bool,
    hang: bool,
}

/// The error of an exchange [`Lossy`] fails.
fn reset() -> LdpError {
    LdpError::transport(codes::TRANSPORT_ERROR, "connection reset").with_retryable(true)
}

#[async_trait]
impl runtime::Transport for Lossy {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        self.inner.identity().await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<tokio::sync::mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.hang && self.fail.contains(&envelope.body.type_name()) {
            return std::future::pending().await;
        }
        let failing = self.fail.contains(&envelope.body.type_name())
            && self.failures.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
        if !failing {
            return self.inner.exchange(envelope, updates).await;
        }
        if self.deliver {
            let _ = self.inner.exchange(envelope, updates).await;
        }
        Err(reset())
    }

    async fn exchange_outcome(
        &self,
        envelope: &Envelope,
        updates: Option<tokio::sync::mpsc::Sender<Envelope>>,
    ) -> runtime::Exchange {
        match self.exchange(envelope, updates).await {
            Ok(answer) => runtime::Exchange::Answered(answer),
            Err(error) if self.report_lost && error == reset() => runtime::Exchange::Lost(error),
            Err(error) => runtime::Exchange::Failed(error),
        }
    }

    fn attach(&self, driver: &Arc<runtime::InitiatorDriver>) {
        if self.report_lost || self.hang {
            driver.set_answer_timeout(Some(Duration::from_secs(30)));
            driver.set_status_poll(Some(runtime::DEFAULT_STATUS_POLL));
        }
    }
}

async fn lossy_client(
    rt: &DelegateRuntime,
    fail: &'static [&'static str],
    failures: usize,
    deliver: bool,
) -> Client<Lossy> {
    lossy(Lossy { inner: memory(rt), fail, failures: failures.into(), deliver, report_lost: false, hang: false }).await
}

fn memory(rt: &DelegateRuntime) -> MemoryTransport {
    MemoryTransport::new(rt.clone(), PeerContext::default())
}

/// A client over `transport`.
async fn lossy(transport: Lossy) -> Client<Lossy> {
    let ids = Box::new(SeededIds::new(8));
    Client::connect(transport, InitiatorConfig::new("ldp:delegate:client"), Arc::new(SystemClock), ids).await.unwrap()
}

/// A client whose first `lose` TASK_SUBMIT answers are lost on the way back, reported as lost (`Exchange::Lost`).
async fn losing_client(rt: &DelegateRuntime, lose: usize, deliver: bool, hang: bool) -> Client<Lossy> {
    let fail = &["TASK_SUBMIT"];
    lossy(Lossy { inner: memory(rt), fail, failures: lose.into(), deliver, report_lost: true, hang }).await
}

/// A caller that got a transport error for its submit has no task left in its client's initiator (nothing would
/// ever end it), whether the message got lost on the way out or its answer on the way back.
#[tokio::test]
async fn a_failed_exchange_leaves_no_task_behind() {
    for deliver in [false, true] {
        let rt = runtime(Arc::new(FussyDelegate));
        let c = lossy_client(&rt, &["TASK_SUBMIT"], 3, deliver).await;
        let s = c.propose(SessionConfig::default()).await.unwrap();
        for _ in 0..3 {
            let err = c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap_err();
            assert!(matches!(&err, SessionError::Transport(e) if e.retryable), "{err:?}");
        }
        assert_eq!(c.pending_tasks(), 0, "deliver: {deliver}");
        // The client goes on: the next submit, carried, completes.
        c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap();
        assert_eq!(c.pending_tasks(), 0);
    }
}

/// A proposal whose answer got lost is forgotten with the session it proposed, and the client's next proposal
/// opens a session that works.
#[tokio::test]
async fn a_failed_proposal_is_forgotten() {
    let rt = runtime(Arc::new(FussyDelegate));
    let c = lossy_client(&rt, &["SESSION_PROPOSE"], 1, true).await;
    let err = c.propose(SessionConfig::default()).await.unwrap_err();
    assert!(matches!(err, SessionError::Transport(_)), "{err:?}");
    let s = c.propose(SessionConfig::default()).await.unwrap();
    c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap();
}

/// The connection API a WebSocket server uses: the machine says which connection carries a session, holds what
/// could not be delivered, and hands held answers out once, only on the connection the session is live on.
#[tokio::test]
async fn held_answers_go_out_once_on_the_connection_the_session_is_live_on() {
    let rt = runtime(Arc::new(EchoDelegate));
    let peer = PeerContext { connection: Some(1), ..Default::default() };
    let c = Client::connect(
        MemoryTransport::new(rt.clone(), peer),
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::new(8)),
    )
    .await
    .unwrap();
    let sid = c.propose(SessionConfig::default()).await.unwrap().session_id;
    assert_eq!(rt.carrier(&sid), Some(1));

    rt.hold(&sid, "t-1", r#"{"first":true}"#.to_owned());
    assert_eq!(rt.gauges().held.results, 1);
    assert!(rt.held_for(&sid, 2).is_empty(), "handed out on a connection that does not carry the session");
    let held = rt.held_for(&sid, 1);
    assert_eq!(held.iter().map(HeldAnswer::task_id).collect::<Vec<_>>(), ["t-1"]);
    assert!(rt.held_for(&sid, 1).is_empty(), "handed out twice");

    // Away: nothing is handed out until a message brings the session back on a connection.
    rt.connection_closed(1);
    assert_eq!(rt.session_state(&sid), Some(SessionState::Suspended));
    assert_eq!(rt.carrier(&sid), None);
    rt.hold(&sid, "t-2", r#"{"second":true}"#.to_owned());
    assert!(rt.held_for(&sid, 1).is_empty(), "handed out while the session is away");
    c.submit(&sid, "echo", json!("back"), None).await.unwrap();
    assert_eq!(rt.carrier(&sid), Some(1));
    assert_eq!(rt.held_for(&sid, 1).iter().map(HeldAnswer::task_id).collect::<Vec<_>>(), ["t-2"]);
    assert_eq!(rt.gauges().held.results, 0);

    // A closed session's held answers are forgotten with it.
    rt.hold(&sid, "t-3", "{}".to_owned());
    c.close(&sid).await.unwrap();
    assert!(rt.held_for(&sid, 1).is_empty());
}

/// Counts the tasks it runs, and answers with the input.
#[derive(Default)]
struct Counting(std::sync::atomic::AtomicUsize);

#[async_trait]
impl Delegate for Counting {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(TaskOutput::new(json!({ "got": task.input })))
    }
}

/// A lost answer is not the task's failure: the driver asks the delegate about the task. When the submit got
/// through, the status query fetches the result the session kept; when it did not, the task is submitted again.
/// Either way it runs once and its caller gets its result.
#[tokio::test]
async fn a_lost_answer_is_resumed_by_the_driver_and_the_task_runs_once() {
    for deliver in [true, false] {
        let delegate = Arc::new(Counting::default());
        let rt = runtime(delegate.clone());
        let c = losing_client(&rt, 1, deliver, false).await;
        let s = c.propose(SessionConfig::default()).await.unwrap();
        let out = c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap();
        assert_eq!(out.output, json!({ "got": "hi" }), "deliver: {deliver}");
        assert_eq!(delegate.0.load(std::sync::atomic::Ordering::SeqCst), 1, "deliver: {deliver}");
        assert_eq!(c.pending_tasks(), 0);
    }
}

/// Answers lost again and again end the task with a typed error after the machine's bound, not a retry loop.
#[tokio::test(start_paused = true)]
async fn answers_lost_without_end_fail_the_task_after_the_bound() {
    let rt = runtime(Arc::new(Counting::default()));
    let c = losing_client(&rt, usize::MAX, false, false).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    // Every submit's answer, the first and each resubmission's, is lost.
    let err = c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap_err();
    let SessionError::Transport(e) = &err else { panic!("{err:?}") };
    assert_eq!(e.code, codes::TRANSPORT_ERROR);
    assert!(!e.retryable);
    assert_eq!(
        e.message,
        format!("the task's answer was lost {} times; it is not resumed again", DEFAULT_MAX_RESUMES + 1)
    );
    assert_eq!(c.pending_tasks(), 0);
}

/// The driver's timer keeps the answer deadline whatever the transport does: a submit nobody answers ends with
/// the machine's `TIMEOUT` at the deadline (virtual time).
#[tokio::test(start_paused = true)]
async fn the_driver_ends_an_unanswered_submit_at_its_deadline() {
    let rt = runtime(Arc::new(Counting::default()));
    let c = losing_client(&rt, 0, false, true).await;
    let s = c.propose(SessionConfig::default()).await.unwrap();
    let before = tokio::time::Instant::now();
    let err = c.submit(&s.session_id, "echo", json!("hi"), None).await.unwrap_err();
    assert_eq!(before.elapsed(), Duration::from_secs(30));
    let SessionError::Transport(e) = &err else { panic!("{err:?}") };
    assert_eq!(e.code, codes::TIMEOUT);
    assert!(!e.retryable);
    assert_eq!(c.pending_tasks(), 0);
}
