#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Resume on another replica (issue 17): two runtimes share one store, each behind its own WebSocket server, with a
//! balancer in front. The connection to replica A dies mid-task, the task ends on A while the client is away (A holds
//! its answer and records it in the store), and the client's reconnect lands on replica B. The client resumes there:
//! its status query for the task is answered from the store, so the result arrives exactly once, and the session goes
//! on over B.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{Proxy, TestDelegate, card, client_via, eventually, runtime, serve_both};
use ldp_session::SessionState;
use ldp_session::store::{Store, StoreOptions};
use ldp_store::{MemoryStore, StoreConfig};
use ldp_transport_ws::WsServerConfig;
use ldp_types::{PayloadMode, SessionConfig};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_completed_on_one_replica_reaches_a_client_resuming_on_another() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreConfig::new(card().delegate_id.to_string())));
    let (on_a, on_b) = (Arc::new(TestDelegate::default()), Arc::new(TestDelegate::default()));
    let (a, b) = (runtime(on_a.clone()), runtime(on_b.clone()));
    let _renew_a = a.attach_store(store.clone(), StoreOptions::default()).unwrap();
    let _renew_b = b.attach_store(store, StoreOptions::default()).unwrap();
    let server_a = serve_both(&a, HashMap::new(), WsServerConfig::default()).await;
    let server_b = serve_both(&b, HashMap::new(), WsServerConfig::default()).await;
    let balancer = Proxy::start(server_a.addr).await;
    let client = client_via(balancer.ws_url(), server_a.http_url()).await;
    let text = SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() };
    let sid = client.propose(text).await.unwrap().session_id;
    let running = {
        let (client, sid) = (client.clone(), sid.clone());
        tokio::spawn(async move { client.submit(&sid, "wait", json!("w1"), None).await })
    };
    eventually("the task to start on A", || a.running_tasks() == 1).await;

    // A's connection dies; the balancer sends the next one to B. The task ends on A meanwhile.
    balancer.set_open(false);
    balancer.cut();
    eventually("A to suspend the session", || a.session_state(&sid) == Some(SessionState::Suspended)).await;
    balancer.retarget(server_b.addr);
    on_a.gate.add_permits(1);
    eventually("the task to end on A", || a.running_tasks() == 0).await;
    balancer.set_open(true);

    // The client resumes on B: the result, once.
    let out = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(out.output, json!({ "waited": "w1" }));
    let stats = client.transport().stats();
    assert!(stats.connections >= 2, "{stats:?}");
    assert_eq!(stats.unmatched, 0, "{stats:?}");
    assert_eq!(client.transport().outstanding(), 0);
    assert_eq!(b.running_tasks(), 0, "B ran nothing");

    // The session goes on over B, which adopted it from the store.
    let next = client.submit(&sid, "echo", json!("on B"), None).await.unwrap();
    assert_eq!(next.output, json!({ "echo": "on B" }));
    assert_eq!(b.session_state(&sid), Some(SessionState::Active));
}
