//! Shared test fixtures: a delegate with slow, gated and progress-reporting skills, one server speaking HTTP and
//! WebSocket on the same port, and a TCP proxy that can cut connections.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::{
    AuthenticatedPeer, Responder, ResponderConfig, SeededIds, SystemClock, TaskKey, TaskOutput, TaskRequest,
};
use ldp_transport_http::{HttpServerConfig, HttpState};
use ldp_transport_ws::{ConnectSettings, RetryPolicy, WsOptions, WsServer, WsServerConfig, WsTransport};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, PayloadMode, codes};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

pub fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:test").unwrap(), "Test", "none", "1.0");
    card.capabilities = ["echo", "progress", "wait", "frames", "slow"].into_iter().map(Capability::new).collect();
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card
}

/// `echo`, `progress` (reports 0.5 then answers), `wait` (answers when the gate gets a permit), `frames` (fails
/// semantic frames as a payload-mode failure), `slow` (sleeps 200 ms). Records the keys of started tasks.
pub struct TestDelegate {
    pub gate: Arc<Semaphore>,
    pub started: Mutex<Vec<TaskKey>>,
}

impl Default for TestDelegate {
    fn default() -> Self {
        Self { gate: Arc::new(Semaphore::new(0)), started: Mutex::new(Vec::new()) }
    }
}

#[async_trait]
impl Delegate for TestDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.started.lock().unwrap().push(task.key.clone());
        match task.skill.as_str() {
            "progress" => {
                ctx.progress(Some(0.5), Some("half".to_owned()));
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(TaskOutput::new(json!({ "got": task.input })))
            }
            "wait" => {
                let permit =
                    self.gate.acquire().await.map_err(|_| LdpError::runtime(codes::EXECUTION_FAILED, "gate"))?;
                permit.forget();
                Ok(TaskOutput::new(json!({ "waited": task.input })))
            }
            "slow" => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(TaskOutput::new(json!({ "slow": task.input })))
            }
            "frames" if task.payload_mode == PayloadMode::SemanticFrame => {
                Err(LdpError::capability(codes::PAYLOAD_MODE_FAILED, "semantic_frame validation failed"))
            }
            _ => Ok(TaskOutput::new(json!({ "echo": task.input }))),
        }
    }
}

pub fn runtime(delegate: Arc<TestDelegate>) -> DelegateRuntime {
    runtime_with(delegate, |_| {})
}

/// A runtime whose responder configuration `adjust` may change (e.g. to require signatures).
pub fn runtime_with(delegate: Arc<TestDelegate>, adjust: impl FnOnce(&mut ResponderConfig)) -> DelegateRuntime {
    let mut cfg = ResponderConfig::new(card());
    cfg.limits.max_concurrent_tasks = 1024;
    adjust(&mut cfg);
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    DelegateRuntime::new(responder, delegate)
}

pub struct Server {
    pub addr: SocketAddr,
    pub ws: WsServer,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn ws_url(&self) -> String {
        format!("ws://{}/ldp/ws", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.ws.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// One port, both bindings: the HTTP router with `/ldp/ws` merged in, as `ldp serve` does.
pub async fn serve_both(
    rt: &DelegateRuntime,
    tokens: HashMap<String, AuthenticatedPeer>,
    ws: WsServerConfig,
) -> Server {
    let http = HttpState::new(rt.clone(), HttpServerConfig { tokens: tokens.clone(), ..Default::default() });
    let ws = WsServer::new(rt.clone(), WsServerConfig { tokens, ..ws });
    let app = ldp_transport_http::router(http).merge(ws.router());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server { addr, ws, stop: Some(stop) }
}

/// A loopback TCP proxy whose connections can be cut, which can refuse new ones for a while, and which can send new
/// ones to another server (a load balancer's next replica).
pub struct Proxy {
    pub addr: SocketAddr,
    cut: watch::Sender<u64>,
    open: watch::Sender<bool>,
    blackhole: watch::Sender<bool>,
    target: watch::Sender<SocketAddr>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(0u64);
        let (open, _) = watch::channel(true);
        let (blackhole, _) = watch::channel(false);
        let (target, _) = watch::channel(target);
        let (cut_tx, open_tx, hole_tx, target_tx) = (cut.clone(), open.clone(), blackhole.clone(), target.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { return };
                if !*open_tx.borrow() {
                    drop(inbound);
                    continue;
                }
                let mut cut_rx = cut_tx.subscribe();
                let hole = hole_tx.subscribe();
                let target = *target_tx.borrow();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    let (mut from_client, mut to_client) = inbound.split();
                    let (mut from_server, mut to_server) = tokio::io::split(outbound);
                    let upstream = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match from_client.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            // Swallowed: the client wrote it, the server never sees it.
                            if *hole.borrow() {
                                continue;
                            }
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let downstream = tokio::io::copy(&mut from_server, &mut to_client);
                    tokio::select! {
                        _ = upstream => {}
                        _ = downstream => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Proxy { addr, cut, open, blackhole, target }
    }

    /// New connections go to `target` from now on; current ones stay where they are.
    pub fn retarget(&self, target: SocketAddr) {
        self.target.send_replace(target);
    }

    /// Cuts every current connection (both sides see the socket close, without a WebSocket close handshake).
    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Accept (true) or immediately drop (false) new connections.
    pub fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }

    /// Drop (true) or forward (false) what clients send on current connections; answers still flow back.
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.send_replace(on);
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ldp/ws", self.addr)
    }
}

/// Polls `f` until it holds, for up to 5 s.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Client options for the resume tests: quick reconnects, many attempts, a short idle timeout.
pub fn resuming() -> WsOptions {
    WsOptions::default()
        .retry(RetryPolicy {
            max_retries: 1000,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
        })
        .ping_interval(Duration::from_millis(200))
        .idle_timeout(Duration::from_secs(2))
}

/// A client whose messages go to `ws_url` (a proxy, say) and whose identity card comes from `http_url` directly.
pub async fn client_via(ws_url: String, http_url: String) -> Arc<ldp_session::runtime::Client<WsTransport>> {
    let options = resuming().identity_url(format!("{http_url}/.well-known/ldp-identity"));
    let transport = WsTransport::connect(ws_url, options).await.unwrap();
    let cfg = ldp_session::InitiatorConfig::new("ldp:delegate:client");
    let client = ldp_session::runtime::Client::connect(
        transport,
        cfg,
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    Arc::new(client.await.unwrap())
}
