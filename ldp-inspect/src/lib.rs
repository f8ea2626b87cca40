//! `ldp-inspect`: a web inspector for any LDP delegate, served on loopback by `ldp inspect`.
//!
//! ```text
//!   browser ──HTTP (JSON API + SSE)──► Inspector (this crate) ──Client<Tap>──► any delegate (http/ws)
//!     page: assets/ (plain ES modules,     │ connect: card + HELLO (ldp-session Client, as `ldp call`)
//!     embedded with include_str!)          │ call: session, mode, contract; progress and partials as SSE
//!                                          │ wire: every envelope both ways (Tap)
//!                                          │ lctl: ldp-lctl check; conformance: ldp-conformance run
//! ```
//!
//! The page is static HTML, CSS and JavaScript compiled into the binary: no CDN, no Node at run time, works
//! offline. Everything it shows comes from the JSON API of [`router`], which reuses the workspace's libraries: the
//! session [`Client`](ldp_session::runtime::Client) over the HTTP or WebSocket transport for calls, `ldp-router` to
//! verify attestations, `ldp-lctl` to check chains, `ldp-conformance` to run the kit.
//!
//! ```no_run
//! # async fn run() -> Result<(), ldp_inspect::InspectError> {
//! let inspector = ldp_inspect::Inspector::new(ldp_inspect::Defaults::default());
//! let server = ldp_inspect::serve("127.0.0.1:0".parse().unwrap(), inspector).await?;
//! println!("open {}", server.url());
//! server.wait().await;
//! # Ok(()) }
//! ```
//!
//! The inspector holds credentials and reaches any URL it is given, so it listens on loopback only, answers only
//! requests whose `Host` is a loopback name, and takes API writes only as `application/json` (which a page of
//! another origin cannot send without a CORS preflight, never answered).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod api;
mod assets;
pub mod card;
pub mod chain;
mod delegate;
mod error;
pub mod tap;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use api::router;
pub use assets::ASSET_BYTES;
pub use delegate::{
    CallRequest, ConnectRequest, Connected, DEFAULT_TIMEOUT_SECS, INSPECTOR_ID, MAX_TASK_EVENTS, SessionView,
    TASK_TIMEOUT, Task, TaskEvent,
};
pub use error::InspectError;

/// How many delegates one inspector keeps connected; connecting another drops the oldest.
pub const MAX_CONNECTIONS: usize = 32;
/// How many tasks one inspector remembers; starting another forgets the oldest.
pub const MAX_TASKS: usize = 512;

/// What `ldp inspect` was started with: the page pre-fills the URL, and the token is used when the form leaves it
/// empty (so it need not be typed into the page, nor appear in a URL).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Defaults {
    /// The delegate to connect to on load.
    pub url: Option<String>,
    /// The bearer token for it.
    pub token: Option<String>,
}

impl Defaults {
    /// Connect to `url` on load.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// With `token` when the form gives none.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// The inspector's state: connected delegates, their tasks. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Inspector {
    inner: Arc<State>,
}

#[derive(Debug)]
struct State {
    defaults: Defaults,
    next_id: AtomicU64,
    connections: Mutex<BTreeMap<u64, Arc<Connected>>>,
    tasks: Mutex<BTreeMap<u64, Arc<Task>>>,
    conformance_running: AtomicBool,
}

impl Inspector {
    /// An inspector with nothing connected.
    pub fn new(defaults: Defaults) -> Self {
        Inspector {
            inner: Arc::new(State {
                defaults,
                next_id: AtomicU64::new(1),
                connections: Mutex::new(BTreeMap::new()),
                tasks: Mutex::new(BTreeMap::new()),
                conformance_running: AtomicBool::new(false),
            }),
        }
    }

    fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn connection(&self, id: u64) -> Result<Arc<Connected>, InspectError> {
        lock(&self.inner.connections)
            .get(&id)
            .cloned()
            .ok_or_else(|| InspectError::NotFound(format!("connection {id}")))
    }

    fn task(&self, id: u64) -> Result<Arc<Task>, InspectError> {
        lock(&self.inner.tasks).get(&id).cloned().ok_or_else(|| InspectError::NotFound(format!("task {id}")))
    }

    fn keep_connection(&self, connected: Arc<Connected>) {
        let mut connections = lock(&self.inner.connections);
        connections.insert(connected.id, connected);
        while connections.len() > MAX_CONNECTIONS {
            connections.pop_first();
        }
    }

    fn keep_task(&self, task: Arc<Task>) {
        let mut tasks = lock(&self.inner.tasks);
        tasks.insert(task.id, task);
        while tasks.len() > MAX_TASKS {
            tasks.pop_first();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves maps that are still consistent (single inserts and removes).
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running inspector ([`serve`]).
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Waits until the server stops (it stops only when its task is aborted or the runtime ends).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Stops the server.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Binds `addr` (a loopback address: the inspector holds credentials and proxies to any URL) and serves the page
/// and its API on a task of its own.
pub async fn serve(addr: SocketAddr, inspector: Inspector) -> Result<Running, InspectError> {
    if !addr.ip().is_loopback() {
        return Err(InspectError::Start(format!(
            "{addr} is not a loopback address: the inspector holds delegate credentials and reaches any URL, so it \
             serves this machine only (use 127.0.0.1 or [::1])"
        )));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| InspectError::Start(format!("cannot listen on {addr}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| InspectError::Start(format!("{addr}: {e}")))?;
    let app = router(inspector);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("ldp inspect: the server stopped: {e}");
        }
    });
    Ok(Running { addr, task })
}
