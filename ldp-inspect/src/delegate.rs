//! One connected delegate and the tasks run on it: the session client (the same `Client` `ldp call` uses) over a
//! tapped transport, the sessions opened from the page, and each task's event log that the page streams.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ldp_session::runtime::{Client, Progress, Submission, Transport};
use ldp_session::{InitiatorConfig, SecurityConfig, SeededIds, SessionError, SystemClock, TaskKey};
use ldp_transport_http::{ConnectOptions, HttpTransport};
use ldp_transport_ws::WsTransport;
use ldp_types::receipt::{ReceiptVerdict, check_receipt};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{DelegationContract, PayloadMode, Provenance, RawJson, SessionConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::InspectError;
use crate::card::{self, CardView};
use crate::tap::{Tap, WireLog};

/// The delegate id the inspector sends as.
pub const INSPECTOR_ID: &str = "ldp:delegate:inspector";

/// The longest the inspector waits for a delegate to answer, when the form does not say (seconds).
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// How long a task may run before the inspector gives up on it (a hanging delegate must not hang the page).
pub const TASK_TIMEOUT: Duration = Duration::from_secs(600);

/// The connect form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectRequest {
    /// `http(s)://` or `ws(s)://`.
    pub url: String,
    /// A bearer token sent with every request.
    #[serde(default)]
    pub token: Option<String>,
    /// `hmac-sha256`, `hmac-sha256-jcs` or `ed25519-jcs`, when the delegate signs.
    #[serde(default)]
    pub sign: Option<String>,
    /// The shared secret, or the Ed25519 seed in hex.
    #[serde(default)]
    pub secret: Option<String>,
    /// Issuer keys to verify attestations with: `ISSUER_ID=PUBLIC_KEY_HEX`, one per line.
    #[serde(default)]
    pub trusted_issuers: Option<String>,
    /// The trust domain the inspector declares in its proposals (default `default`).
    #[serde(default)]
    pub trust_domain: Option<String>,
    /// Seconds to wait for the delegate: connecting and each answer.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// A task as the page submits it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The skill.
    pub skill: String,
    /// The input, any JSON value.
    pub input: Value,
    /// The session to run in; none (or `new`) opens one.
    #[serde(default)]
    pub session: Option<String>,
    /// The payload mode to propose when a session is opened.
    #[serde(default)]
    pub mode: Option<String>,
    /// A delegation contract (RFC wire shape; `contract_id` filled in when empty).
    #[serde(default)]
    pub contract: Option<Value>,
}

/// A session opened from the page.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// Its id.
    pub session_id: String,
    /// The negotiated payload mode.
    pub mode: String,
    /// The fallback chain.
    pub fallback_chain: Vec<String>,
    /// The inspector's ids of the tasks run in it, in order.
    pub tasks: Vec<u64>,
}

/// A connected delegate.
pub struct Connected {
    /// The inspector's id for it.
    pub id: u64,
    /// The URL connected to.
    pub url: String,
    client: Arc<Client<Tap>>,
    /// Every message sent and received.
    pub wire: Arc<WireLog>,
    /// The card, laid out.
    pub card: CardView,
    /// The capability manifest, if the delegate sent one.
    pub manifest: Value,
    sessions: Mutex<Vec<SessionView>>,
    /// What the conformance kit needs to reach the delegate as the page did.
    pub token: Option<String>,
    /// The signing key, when the delegate signs.
    pub signing: Option<SigningKey>,
    /// The wait per answer.
    pub timeout: Duration,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected").field("id", &self.id).field("url", &self.url).finish_non_exhaustive()
    }
}

/// Connects as the form asks: the card, HELLO and the manifest, through the tap.
pub async fn connect(id: u64, form: ConnectRequest) -> Result<Connected, InspectError> {
    let url = form.url.trim().to_owned();
    let timeout = Duration::from_secs(form.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, 600));
    let token = form.token.filter(|t| !t.trim().is_empty()).map(|t| t.trim().to_owned());
    let signing = signing_key(form.sign.as_deref(), form.secret.as_deref())?;
    let trusted = card::trusted_issuers(form.trusted_issuers.as_deref().unwrap_or_default())?;
    let mut options = ConnectOptions::new();
    options.connect_timeout = timeout;
    // No per-request timeout: a task's answer comes when the task ends, which may be minutes. Each wait is bounded
    // here instead: connecting, proposing and cancelling by `timeout`, a task by `TASK_TIMEOUT`.
    options.request_timeout = None;
    options.token = token.clone();
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    let wire = Arc::new(WireLog::default());
    let mut cfg = InitiatorConfig::new(INSPECTOR_ID);
    cfg.trust_domain = Some(form.trust_domain.filter(|d| !d.trim().is_empty()).unwrap_or_else(|| "default".into()));
    if let Some(key) = &signing {
        // The reference SDKs sign hmac-sha256 without a nonce; our own servers accept both (as `ldp call`).
        cfg.hmac_sha256_nonce = key.algorithm() != SignatureAlgorithm::HmacSha256;
        cfg.security = SecurityConfig::symmetric(key.clone());
    }
    // Every step is bounded: a delegate that accepts the connection and never answers costs `timeout`, not forever.
    let connecting = async {
        let inner: Arc<dyn Transport> = match scheme.as_str() {
            "http" | "https" => Arc::new(
                HttpTransport::with_options(&url, options)
                    .map_err(|e| InspectError::BadRequest(format!("{url}: {e}")))?,
            ),
            "ws" | "wss" => {
                Arc::new(WsTransport::connect(&url, options).await.map_err(|e| unreachable(&url, &e.to_string()))?)
            }
            _ => {
                return Err(InspectError::BadRequest(format!(
                    "{url:?}: expected an http://, https://, ws:// or wss:// URL"
                )));
            }
        };
        let tap = Tap::new(inner, wire.clone());
        Client::connect(tap, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
            .await
            .map_err(|e| session_failure(&url, &e))
    };
    let client = tokio::time::timeout(timeout + Duration::from_secs(1), connecting)
        .await
        .map_err(|_| InspectError::Unreachable(format!("{url}: no answer within {} s", timeout.as_secs())))??;
    let card = card::view(client.card(), &trusted, time::OffsetDateTime::now_utc());
    let manifest = client.manifest().map_or(Value::Null, |m| {
        json!({
            "skills": m.skills,
            "supported_modes": m.supported_modes.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "max_concurrent_tasks": m.max_concurrent_tasks,
        })
    });
    Ok(Connected {
        id,
        url,
        client: Arc::new(client),
        wire,
        card,
        manifest,
        sessions: Mutex::new(Vec::new()),
        token,
        signing,
        timeout,
    })
}

fn signing_key(sign: Option<&str>, secret: Option<&str>) -> Result<Option<SigningKey>, InspectError> {
    let sign = sign.map(str::trim).filter(|s| !s.is_empty() && *s != "none");
    let secret = secret.filter(|s| !s.is_empty());
    match (sign, secret) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(InspectError::BadRequest("a signing secret needs a signature algorithm".into())),
        (Some(alg), None) => Err(InspectError::BadRequest(format!("signing with {alg} needs the secret"))),
        (Some(alg), Some(secret)) => {
            let alg: SignatureAlgorithm =
                alg.parse().map_err(|e| InspectError::BadRequest(format!("signature algorithm: {e}")))?;
            let key = match alg {
                SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_hex(secret),
                other => SigningKey::shared_secret(other, secret),
            }
            .map_err(|e| InspectError::BadRequest(format!("signing secret: {e}")))?;
            Ok(Some(key))
        }
    }
}

/// A connection failure, said so a person knows what to change.
fn unreachable(url: &str, message: &str) -> InspectError {
    InspectError::Unreachable(format!("{url}: {message}{}", hint(message)))
}

fn session_failure(url: &str, e: &SessionError) -> InspectError {
    let message = e.to_string();
    match e {
        SessionError::Transport(_) => unreachable(url, &message),
        _ => InspectError::Delegate(format!("{url}: {message}{}", hint(&message))),
    }
}

/// What to change, for the failures whose own words do not say it.
fn hint(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if lower.contains("401") || lower.contains("unauthenticated") || lower.contains("bearer") {
        " (the delegate refused the bearer token: wrong or missing token)"
    } else if lower.contains("signature") || lower.contains("unsigned") {
        " (check the signing algorithm and secret: they must be the delegate's)"
    } else if lower.contains("connection refused") || lower.contains("error sending request") {
        " (nothing answers at that address: is the delegate running?)"
    } else if lower.contains("timed out") || lower.contains("timeout") {
        " (the delegate did not answer in time)"
    } else if lower.contains("does not parse") || lower.contains("malformed") || lower.contains("decode") {
        " (the delegate's answer is not LDP)"
    } else {
        ""
    }
}

impl Connected {
    /// The sessions opened from the page.
    pub fn sessions(&self) -> Vec<SessionView> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Opens a session proposing `mode`.
    async fn open_session(&self, mode: Option<PayloadMode>) -> Result<String, InspectError> {
        let mut proposal = SessionConfig::default();
        if let Some(mode) = mode {
            proposal.preferred_payload_modes = Some(vec![mode]);
        }
        let info = tokio::time::timeout(self.timeout + Duration::from_secs(1), self.client.propose(proposal))
            .await
            .map_err(|_| InspectError::Unreachable(format!("{}: no answer to SESSION_PROPOSE", self.url)))?
            .map_err(|e| session_failure(&self.url, &e))?;
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).push(SessionView {
            session_id: info.session_id.clone(),
            mode: info.mode.as_str().to_owned(),
            fallback_chain: info.fallback_chain.iter().map(|m| m.as_str().to_owned()).collect(),
            tasks: Vec::new(),
        });
        Ok(info.session_id)
    }

    /// Validates the call, opens a session if asked, and starts the task; it runs on a task of its own, its events
    /// collected in the returned [`Task`].
    pub async fn call(self: &Arc<Self>, task_id: u64, request: CallRequest) -> Result<Arc<Task>, InspectError> {
        let skill = request.skill.trim().to_owned();
        if skill.is_empty() {
            return Err(InspectError::BadRequest("choose a skill".into()));
        }
        if let Some(schema) = self.card.skills.iter().find(|s| s.name == skill).and_then(|s| s.input_schema.as_ref()) {
            check_input(schema, &request.input)?;
        }
        let contract = match request.contract {
            None | Some(Value::Null) => None,
            Some(value) => Some(contract(value)?),
        };
        let mode = match request.mode.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
            Some(m) => {
                Some(m.parse::<PayloadMode>().map_err(|e| InspectError::BadRequest(format!("payload mode: {e}")))?)
            }
            None => None,
        };
        let session_id = match request.session.as_deref().map(str::trim).filter(|s| !s.is_empty() && *s != "new") {
            Some(id) if self.sessions().iter().any(|s| s.session_id == id) => id.to_owned(),
            Some(id) => return Err(InspectError::NotFound(format!("session {id}"))),
            None => self.open_session(mode).await?,
        };
        let input = RawJson::from(request.input.clone());
        let task = Arc::new(Task::new(task_id, self.id, &skill, &session_id, request.input, contract.clone()));
        if let Some(session) =
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).iter_mut().find(|s| s.session_id == session_id)
        {
            session.tasks.push(task_id);
        }
        let client = self.client.clone();
        let running = task.clone();
        tokio::spawn(async move { run(client, running, session_id, skill, input, contract).await });
        Ok(task)
    }

    /// Sends TASK_CANCEL for `task`.
    pub async fn cancel(&self, task: &Task) -> Result<(), InspectError> {
        let key = task.key().ok_or_else(|| InspectError::BadRequest("the task has not been sent yet".into()))?;
        if task.finished() {
            return Err(InspectError::BadRequest("the task has already ended".into()));
        }
        task.push(TaskEvent::Cancelling);
        tokio::time::timeout(self.timeout + Duration::from_secs(1), self.client.cancel(&key))
            .await
            .map_err(|_| InspectError::Unreachable(format!("{}: no answer to TASK_CANCEL", self.url)))?
            .map_err(|e| session_failure(&self.url, &e))
    }

    /// The card of the delegate, as received.
    pub fn raw_card(&self) -> &ldp_types::IdentityCard {
        self.client.card()
    }
}

/// Checks `input` against the skill's input schema, so a bad input is a message before anything is sent.
fn check_input(schema: &Value, input: &Value) -> Result<(), InspectError> {
    // A schema that does not compile is the delegate's problem: let it judge the input itself.
    let Ok(validator) = jsonschema::validator_for(schema) else { return Ok(()) };
    let problems: Vec<String> = validator
        .iter_errors(input)
        .take(8)
        .map(|e| {
            let path = e.instance_path().to_string();
            format!("{}: {e}", if path.is_empty() { "input".to_owned() } else { format!("input{path}") })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InspectError::BadRequest(format!("the input does not fit the skill's schema: {}", problems.join("; "))))
    }
}

fn contract(mut value: Value) -> Result<DelegationContract, InspectError> {
    if let Some(object) = value.as_object_mut() {
        let empty = object.get("contract_id").and_then(Value::as_str).is_none_or(str::is_empty);
        if empty {
            let id = format!("inspector-{}", time::OffsetDateTime::now_utc().unix_timestamp_nanos());
            object.insert("contract_id".into(), Value::String(id));
        }
    }
    serde_json::from_value(value).map_err(|e| InspectError::BadRequest(format!("contract: {e}")))
}

/// What happens to a task, in order; the page renders each as it comes.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskEvent {
    /// TASK_SUBMIT is on its way.
    Submitted {
        /// The wire task id.
        task_id: String,
        /// The session.
        session_id: String,
    },
    /// A progress report.
    Progress {
        /// Fraction done, 0-1.
        progress: Option<f64>,
        /// A status message.
        message: Option<String>,
    },
    /// The next chunk of output.
    Partial {
        /// The chunk.
        chunk: Value,
    },
    /// The page asked to cancel.
    Cancelling,
    /// The task's result.
    Result {
        /// The output.
        output: Value,
        /// Its provenance (RFC 6), with usage and lineage.
        provenance: Value,
        /// The usage receipt's verdict.
        receipt: String,
        /// Payload-mode fallbacks on the way.
        fallbacks: Vec<[String; 2]>,
    },
    /// The task failed (TASK_FAILED, or the transport).
    Failed {
        /// The message.
        error: String,
        /// The typed LDP error, when the delegate sent one.
        detail: Value,
    },
}

/// A task started from the page.
pub struct Task {
    /// The inspector's id for it.
    pub id: u64,
    /// The connection it runs on.
    pub connection: u64,
    /// The skill.
    pub skill: String,
    /// The session.
    pub session_id: String,
    /// The input.
    pub input: Value,
    /// Its contract.
    pub contract: Option<DelegationContract>,
    state: Mutex<TaskState>,
    changed: watch::Sender<usize>,
}

#[derive(Default)]
struct TaskState {
    events: Vec<TaskEvent>,
    key: Option<TaskKey>,
    provenance: Option<Provenance>,
    finished: bool,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task").field("id", &self.id).field("skill", &self.skill).finish_non_exhaustive()
    }
}

/// The most events one task keeps (a delegate streaming without end must not grow the inspector without end).
pub const MAX_TASK_EVENTS: usize = 10_000;

impl Task {
    fn new(
        id: u64,
        connection: u64,
        skill: &str,
        session: &str,
        input: Value,
        contract: Option<DelegationContract>,
    ) -> Self {
        Task {
            id,
            connection,
            skill: skill.to_owned(),
            session_id: session.to_owned(),
            input,
            contract,
            state: Mutex::new(TaskState::default()),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: TaskEvent) {
        let mut state = self.lock();
        let last = matches!(event, TaskEvent::Result { .. } | TaskEvent::Failed { .. });
        // Past the bound, streamed chunks are dropped; the ending is always kept.
        if state.events.len() < MAX_TASK_EVENTS || last {
            state.events.push(event);
        }
        state.finished |= last;
        let count = state.events.len();
        drop(state);
        self.changed.send_replace(count);
    }

    /// The events from `from` on, and whether the task has ended.
    pub fn events(&self, from: usize) -> (Vec<TaskEvent>, bool) {
        let state = self.lock();
        (state.events.get(from..).map(<[TaskEvent]>::to_vec).unwrap_or_default(), state.finished)
    }

    /// Wakes when an event is added.
    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.changed.subscribe()
    }

    /// Whether the task has ended.
    pub fn finished(&self) -> bool {
        self.lock().finished
    }

    /// The wire key, once the TASK_SUBMIT is built.
    pub fn key(&self) -> Option<TaskKey> {
        self.lock().key.clone()
    }

    /// The provenance, once the result is in.
    pub fn provenance(&self) -> Option<Provenance> {
        self.lock().provenance.clone()
    }

    /// The task as a session turn: input, and output or error.
    pub fn turn(&self) -> Value {
        let state = self.lock();
        let ending = state.events.iter().rev().find_map(|e| match e {
            TaskEvent::Result { output, .. } => Some(json!({ "status": "completed", "output": output })),
            TaskEvent::Failed { error, .. } => Some(json!({ "status": "failed", "error": error })),
            _ => None,
        });
        let mut turn = ending.unwrap_or_else(|| json!({ "status": "running" }));
        turn["task"] = json!(self.id);
        turn["task_id"] = json!(state.key.as_ref().map(|k| k.task_id.clone()));
        turn["skill"] = json!(self.skill);
        turn["input"] = self.input.clone();
        turn
    }
}

async fn run(
    client: Arc<Client<Tap>>,
    task: Arc<Task>,
    session_id: String,
    skill: String,
    input: RawJson,
    contract: Option<DelegationContract>,
) {
    let (progress_tx, mut progress_rx) = mpsc::channel::<Progress>(64);
    let forwarder = {
        let task = task.clone();
        tokio::spawn(async move {
            while let Some(p) = progress_rx.recv().await {
                match p.partial {
                    Some(chunk) => task.push(TaskEvent::Partial { chunk: chunk.to_value().unwrap_or(Value::Null) }),
                    None => task.push(TaskEvent::Progress { progress: p.progress, message: p.message }),
                }
            }
        })
    };
    let keyed = task.clone();
    let submission =
        Submission::new(&session_id, &skill, input).contract(contract).progress(progress_tx).on_key(move |key| {
            keyed.lock().key = Some(key.clone());
            keyed.push(TaskEvent::Submitted { task_id: key.task_id.clone(), session_id: key.session_id.clone() });
        });
    let outcome = tokio::time::timeout(TASK_TIMEOUT, client.submit_task(submission)).await;
    // Every update is in once the submission has ended and dropped its sender.
    let _ = forwarder.await;
    let event = match outcome {
        Err(_) => {
            TaskEvent::Failed { error: format!("no answer within {} s", TASK_TIMEOUT.as_secs()), detail: Value::Null }
        }
        Ok(Err(e)) => TaskEvent::Failed {
            error: e.to_string(),
            detail: serde_json::to_value(e.to_ldp_error()).unwrap_or(Value::Null),
        },
        Ok(Ok(outcome)) => {
            let receipt = match check_receipt(
                client.card(),
                &outcome.provenance,
                &outcome.key.session_id,
                &outcome.key.task_id,
            ) {
                ReceiptVerdict::Verified => "verified".to_owned(),
                ReceiptVerdict::Missing => "missing (the card publishes a receipt key)".to_owned(),
                ReceiptVerdict::Invalid(why) => format!("INVALID: {why}"),
                _ => "none (figures self-reported)".to_owned(),
            };
            task.lock().provenance = Some(outcome.provenance.clone());
            TaskEvent::Result {
                output: outcome.output.to_value().unwrap_or(Value::Null),
                provenance: serde_json::to_value(&outcome.provenance).unwrap_or(Value::Null),
                receipt,
                fallbacks: outcome
                    .fallbacks
                    .iter()
                    .map(|(a, b)| [a.as_str().to_owned(), b.as_str().to_owned()])
                    .collect(),
            }
        }
    };
    task.push(event);
}
