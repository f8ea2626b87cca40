//! Run with: cargo run -p ldp-examples --example replicas [-- redis://127.0.0.1:6379/0]
//!
//! Two replicas of one delegate behind a round-robin balancer, sharing their protocol state through a store: an
//! embedded SQLite file by default (nothing to start), or Redis when a URL is given. The client's messages alternate
//! between the replicas, and it still sees one delegate: the session proposed on one goes on on the other, each task
//! runs once, a message one replica accepted is refused when resent to the other. Then both replicas stop, and a new
//! one on the same file (or the same Redis) carries the session on from what they committed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, TaskContext, Transport};
use ldp_session::store::{Store, StoreOptions};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_store::{StoreConfig, StoreSpec};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, ServerHandle};
use ldp_types::{Body, Capability, DelegateId, Envelope, IdentityCard, LdpError, SessionConfig};
use serde_json::json;
use tokio::sync::mpsc;

const DELEGATE: &str = "ldp:delegate:replicated";

/// The work: says which replica ran it, and counts every run across replicas.
struct Work {
    replica: &'static str,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Delegate for Work {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(TaskOutput::new(
            json!({ "ran_on": self.replica, "input": task.input.parse::<serde_json::Value>().unwrap_or_default() }),
        ))
    }
}

/// One replica: the same card on every replica (one delegate), its own runtime and HTTP server, the shared store.
async fn replica(replica: &'static str, store: Arc<dyn Store>, runs: Arc<AtomicUsize>) -> ServerHandle {
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Replicated", "none", "1");
    card.capabilities.push(Capability::new("work"));
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(Work { replica, runs }));
    runtime.attach_store(store, StoreOptions::default()).expect("a store is attached once");
    let server =
        ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await.unwrap();
    println!("replica {replica} listening on {}", server.url());
    server
}

/// A round-robin balancer as a client transport: each message goes to the next replica. It keeps the last
/// TASK_SUBMIT it carried, to resend it elsewhere.
struct RoundRobin {
    replicas: Mutex<Vec<(&'static str, Arc<HttpTransport>)>>,
    next: AtomicUsize,
    last_submit: Mutex<Option<(&'static str, Envelope)>>,
}

impl RoundRobin {
    fn new(replicas: Vec<(&'static str, &str)>) -> Self {
        let this = Self { replicas: Mutex::default(), next: AtomicUsize::new(0), last_submit: Mutex::default() };
        this.point_at(replicas);
        this
    }

    /// What the balancer sends to from now on.
    fn point_at(&self, replicas: Vec<(&'static str, &str)>) {
        let transports = replicas.into_iter().map(|(name, url)| (name, Arc::new(HttpTransport::new(url).unwrap())));
        *self.replicas.lock().unwrap() = transports.collect();
    }

    fn pick(&self) -> (&'static str, Arc<HttpTransport>) {
        let replicas = self.replicas.lock().unwrap();
        let (name, transport) = &replicas[self.next.fetch_add(1, Ordering::SeqCst) % replicas.len()];
        (name, transport.clone())
    }
}

#[async_trait]
impl Transport for RoundRobin {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        self.pick().1.identity().await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let (name, transport) = self.pick();
        println!("  {:<15} -> replica {name}", envelope.body.type_name());
        if matches!(envelope.body, Body::TaskSubmit(_)) {
            *self.last_submit.lock().unwrap() = Some((name, envelope.clone()));
        }
        transport.exchange(envelope, updates).await
    }
}

/// The store every replica opens: what `spec` names, opened once per replica as separate processes would.
async fn open(spec: &StoreSpec) -> Arc<dyn Store> {
    ldp_store::open(spec, StoreConfig::new(DELEGATE)).await.unwrap().expect("a shared store, not `memory`")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(std::env::args().nth(1)).await
}

/// Runs the replicas, the client and the restart on the store `store` names (`None`: an SQLite file in a scratch
/// directory). Public so that a test runs it.
pub async fn run(store: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    // The SQLite default's file, in a directory of its own that goes at the end.
    let scratch = store.is_none().then(|| std::env::temp_dir().join(format!("ldp-replicas-{}", rand_suffix())));
    let spec: StoreSpec = match (store, &scratch) {
        // A flag (a test harness's `--quiet`) is no SQLite path: refuse it rather than create a file of that name.
        (Some(flag), _) if flag.starts_with('-') => return Err(format!("{flag:?} is not a store").into()),
        (Some(url), _) => url.parse()?,
        (None, dir) => {
            let dir = dir.as_ref().expect("a scratch directory without a store URL");
            std::fs::create_dir_all(dir)?;
            StoreSpec::Sqlite(dir.join("state.db"))
        }
    };
    println!("store: {spec:?}");
    let runs = Arc::new(AtomicUsize::new(0));
    let a = replica("a", open(&spec).await, runs.clone()).await;
    let b = replica("b", open(&spec).await, runs.clone()).await;

    let balancer = Arc::new(RoundRobin::new(vec![("a", a.url()), ("b", b.url())]));
    let mut cfg = InitiatorConfig::new("ldp:delegate:example-client");
    cfg.trust_domain = Some("default".into());
    // The client gets a handle on the balancer (a shared transport is a transport); `run` keeps one to repoint it.
    let client =
        Client::connect(balancer.clone(), cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await?;
    let session = client.propose(SessionConfig::default()).await?;
    println!("session {} established", session.session_id);
    for i in 0..4 {
        let outcome = client.submit(&session.session_id, "work", json!(i), None).await?;
        println!("  task {i}: {}", outcome.output);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4, "every task ran exactly once");

    // A message one replica accepted, resent to the other as an attacker (or a retrying proxy) would.
    let (accepted_by, submit) = balancer.last_submit.lock().unwrap().clone().expect("a TASK_SUBMIT was sent");
    let other = if accepted_by == "a" { b.url() } else { a.url() };
    let reply = HttpTransport::new(other)?.exchange(&submit, None).await;
    let refusal = match reply {
        Ok(Some(bytes)) => match Envelope::from_slice(&bytes)?.body {
            Body::TaskFailed(failed) => failed.error.code.as_str().to_owned(),
            other => format!("unexpected {}", other.type_name()),
        },
        Ok(None) => "accepted".to_owned(),
        Err(error) => error.code.as_str().to_owned(),
    };
    println!("the TASK_SUBMIT replica {accepted_by} ran, resent to the other: {refusal}");
    // The same message id in the same session: the other replica finds its dedupe entry in the store.
    assert_eq!(refusal, ldp_types::codes::REPLAY_DETECTED, "the resent TASK_SUBMIT was not refused as a replay");
    assert_eq!(runs.load(Ordering::SeqCst), 4, "the resent task did not run again");

    // Both replicas stop; a new one opens the same store, and the balancer now sends everything to it.
    a.shutdown().await?;
    b.shutdown().await?;
    println!("replicas a and b stopped");
    let c = replica("c", open(&spec).await, runs.clone()).await;
    balancer.point_at(vec![("c", c.url())]);
    let outcome = client.submit(&session.session_id, "work", json!("after the restart"), None).await?;
    println!("  the same session, after the restart: {}", outcome.output);
    client.close(&session.session_id).await?;
    println!("session closed; {} tasks ran in all", runs.load(Ordering::SeqCst));
    c.shutdown().await?;
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// A name no other run of this example uses at the same time.
fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}
