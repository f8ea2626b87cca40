//! A2A (the Agent2Agent protocol, 1.0, with the 0.3 method names accepted) both ways.
//!
//! **LDP delegate → A2A agent** ([`routes`], [`card_routes`]; `ldp serve --a2a`): the Agent Card at [`CARD_PATH`]
//! is derived from the identity card ([`card::agent_card`]); the JSON-RPC endpoint at [`RPC_PATH`] serves
//! `SendMessage`, `SendStreamingMessage` (SSE), `GetTask` (with history), `ListTasks`, `CancelTask`,
//! `SubscribeToTask` and the push notification config methods (and `message/send`, `message/stream`, `tasks/get`,
//! `tasks/cancel` in 0.3's shapes). An LDP failure [`INPUT_REQUIRED`] leaves the task waiting for the client's next
//! message, which runs as the next LDP task of the session; push notifications follow [`PushLimits`]. An A2A `contextId` gets one LDP session (bounded, evicted when
//! idle); each message is one LDP task in it, run by the session layer's client exactly as an LDP peer's would be.
//! TASK_UPDATE progress becomes `statusUpdate` events; `CancelTask` becomes TASK_CANCEL; the result is an artifact
//! whose metadata, like the task's, carries the provenance under [`PROVENANCE_META`]; a failure is a `FAILED` task
//! whose metadata carries the typed `LdpError` under [`ERROR_META`]. Requests the bridge cannot take are JSON-RPC
//! errors with A2A's codes, the typed error in their data.
//!
//! **A2A agent → LDP delegate** ([`A2aDelegate`]; `ldp serve --backend a2a --a2a-url URL`): the agent's card is
//! fetched and mapped to an honest generated identity card ([`card::identity_card`]); each LDP task is one
//! `SendStreamingMessage` (or `SendMessage` when the agent does not stream) whose status updates become TASK_UPDATEs;
//! TASK_CANCEL becomes `CancelTask`; a dropped stream is followed again with `SubscribeToTask`; an agent asking for
//! input fails the LDP task [`INPUT_REQUIRED`] and the session's next task continues it. Everything read from the
//! agent is bounded in size and time. [`A2aTransport`]
//! does the same in process, for a router that routes to `a2a+http://` URLs directly.

mod backend;
pub mod card;
mod push;
pub mod rpc;
mod server;
mod sse;
mod tables;
mod transport;

use std::sync::Arc;
use std::time::Duration;

pub use backend::{A2aDelegate, BackendLimits};
pub use card::{CardOidc, CardOptions, OIDC_SCHEME};
pub use push::{PushError, PushLimits, TOKEN_HEADER, check_url, is_private};
pub use transport::{A2A_SCHEMES, A2aTransport, http_url};

use crate::upstream::Upstream;

/// Where [`card_routes`] serves the Agent Card (A2A's well-known path).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// Where [`routes`] serves A2A's JSON-RPC binding.
pub const RPC_PATH: &str = "/a2a";
/// The metadata key of a result's LDP provenance (on the task and on its artifact).
pub const PROVENANCE_META: &str = "ldp/provenance";
/// The metadata key of a failed task's typed LDP error (and of the LDP error in a JSON-RPC error's data).
pub const ERROR_META: &str = "ldp/error";
/// The metadata key of a status update's TASK_UPDATE (`progress`, `message`, `partial`).
pub const PROGRESS_META: &str = "ldp/progress";
/// The message or request metadata key naming the LDP skill to run (A2A addresses agents, not skills); without it
/// the card's first capability runs.
pub const SKILL_META: &str = "ldp/skill";
/// The Agent Card extension URI whose params are the LDP identity card.
pub const IDENTITY_META: &str = "ldp/identity";
/// The code of an LDP task failure that asks for more input (A2A's `TASK_STATE_INPUT_REQUIRED`): its message is
/// the question, its partial output (when any) the question as data. The A2A server puts the task in
/// `INPUT_REQUIRED` and runs the next message of the task as the next LDP task of the same session; the A2A
/// delegate fails an LDP task with it when the agent asks, and continues the agent's task with the session's next
/// task.
pub const INPUT_REQUIRED: &str = "INPUT_REQUIRED";
/// The A2A protocol version the bridge speaks.
pub const VERSION: &str = a2a::VERSION;

/// The bounds of an A2A server: everything an A2A client can make it hold or wait for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct A2aLimits {
    /// Contexts (hence LDP sessions) held at once; when full, the least recently used idle one is closed, and when
    /// every one has a running task a new context is refused.
    pub max_contexts: usize,
    /// Tasks held at once, running or ended; ended ones make room, oldest first.
    pub max_tasks: usize,
    /// Tasks running at once; beyond it a message is refused with `CAPACITY_EXCEEDED`.
    pub max_running: usize,
    /// Longest a task may run; then it is cancelled (TASK_CANCEL) and fails with `TIMEOUT`.
    pub call_timeout: Duration,
    /// Longest opening a context's LDP session may take.
    pub connect_timeout: Duration,
    /// Longest to wait for a cancelled task's answer, and for a session's close.
    pub cancel_timeout: Duration,
    /// A context without a message this long is closed, with its LDP session.
    pub context_idle: Duration,
    /// How long an ended task stays readable by `GetTask`.
    pub task_ttl: Duration,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// Events queued for one streaming client, and how far a `SubscribeToTask` client may lag before it is sent the
    /// task anew; progress beyond it is dropped (the terminal events are waited for).
    pub max_queued_events: usize,
    /// Push notifications: whether offered, where they may go, and their bounds.
    pub push: PushLimits,
}

impl Default for A2aLimits {
    fn default() -> Self {
        Self {
            max_contexts: 256,
            max_tasks: 1024,
            max_running: 256,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            cancel_timeout: Duration::from_secs(5),
            context_idle: Duration::from_secs(300),
            task_ttl: Duration::from_secs(600),
            max_body: 1024 * 1024,
            max_queued_events: 64,
            push: PushLimits::default(),
        }
    }
}

/// A2A's JSON-RPC binding at [`RPC_PATH`] for the delegate behind `upstream`, as an axum router to pass as (or merge
/// into) the LDP app's authenticated extra routes. Cancelling `stop` ends open event streams (give it the server's
/// shutdown).
pub fn routes<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    limits: A2aLimits,
    stop: tokio_util::sync::CancellationToken,
) -> axum::Router<S> {
    server::router(upstream, limits, stop)
}

/// The Agent Card at [`CARD_PATH`], derived from the identity card of the delegate behind `upstream` on every
/// request. It is public (A2A clients read it to learn how to authenticate), so merge it outside the authenticated
/// routes.
pub fn card_routes<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    options: CardOptions,
) -> axum::Router<S> {
    server::card_router(upstream, options)
}
