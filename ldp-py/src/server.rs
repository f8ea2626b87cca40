//! Serving Python skills: the front door's [`ldp::Delegate::builder`] with one skill closure per Python function,
//! each handing its task to a Python dispatcher and awaiting the [`Reply`] the dispatcher fills.
//!
//! The path of one task: the Rust server admits it (every protocol rule, in `ldp-session`), the skill's closure
//! serialises the input to JSON text and calls the dispatcher (`ldp_rs._delegate`) on a blocking thread with the GIL
//! (a sync skill runs right there; an async one is scheduled on the server's asyncio loop), then waits for the
//! reply, the task's cancellation, or the runtime's cancel grace. A cancelled or abandoned task calls the callable
//! the dispatcher registered with [`Reply::on_cancel`] (an asyncio task's `cancel`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ldp::types::codes;
use ldp::{LdpError, Output, RawJson, TaskOutput};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::keys::SigningKey;
use crate::{errors, runtime};

/// What a skill answers: its output, or a typed failure.
type Answer = Result<TaskOutput, LdpError>;

/// The state a task's [`Reply`] shares with the skill's closure.
struct ReplyState {
    /// Taken by the first answer; later ones are ignored.
    answer: Mutex<Option<oneshot::Sender<Answer>>>,
    /// What cancels the Python side of the task (set by the dispatcher for async skills).
    cancel: Mutex<Option<Py<PyAny>>>,
    /// Set once the task is cancelled or abandoned: a cancel callable registered later is called at once.
    cancelled: std::sync::atomic::AtomicBool,
}

impl ReplyState {
    fn answer(&self, answer: Answer) -> bool {
        let sender = self.answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        sender.is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// Cancels the Python side: calls the registered callable on a blocking thread (it takes the GIL).
    fn cancel(&self) {
        self.cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
        let callable = self.cancel.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(callable) = callable {
            runtime().spawn_blocking(move || {
                // A cancel that fails (the task ended meanwhile) has nothing left to stop.
                Python::attach(|py| drop(callable.call0(py)));
            });
        }
    }
}

/// Cancels the Python side of a task whose closure is dropped before its answer (the runtime's cancel grace ran
/// out, or the server shut down).
struct CancelOnDrop(Option<Arc<ReplyState>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            state.cancel();
        }
    }
}

/// How a task answers: the dispatcher calls exactly one of [`Reply::ok`] and [`Reply::fail`] (later calls are
/// ignored). A reply dropped unanswered fails the task with `EXECUTION_FAILED`.
#[pyclass(module = "ldp_rs._native", frozen)]
pub(crate) struct Reply {
    state: Arc<ReplyState>,
}

#[pymethods]
impl Reply {
    /// Answers with `output_json` (JSON text) and what the skill reports about it. Returns whether the answer was
    /// taken (false when the task was already answered or cancelled).
    #[pyo3(signature = (output_json, tokens=None, cost_usd=None, confidence=None))]
    fn ok(&self, output_json: String, tokens: Option<u64>, cost_usd: Option<f64>, confidence: Option<f64>) -> bool {
        let answer = match RawJson::from_json(output_json) {
            Ok(raw) => {
                let mut output = Output::new(raw);
                if let Some(t) = tokens {
                    output = output.tokens(t);
                }
                if let Some(c) = cost_usd {
                    output = output.cost_usd(c);
                }
                if let Some(c) = confidence {
                    output = output.confidence(c);
                }
                ldp::IntoOutput::into_output(output)
            }
            Err(e) => Err(LdpError::runtime(codes::EXECUTION_FAILED, format!("output not JSON: {e}"))),
        };
        self.state.answer(answer)
    }

    /// Fails the task with a typed error: `category` is one of identity, capability, policy, runtime, quality,
    /// session, transport, security (anything else: runtime).
    #[pyo3(signature = (message, code, category="runtime", retryable=false, partial_output_json=None))]
    fn fail(
        &self,
        message: String,
        code: String,
        category: &str,
        retryable: bool,
        partial_output_json: Option<String>,
    ) -> bool {
        let category =
            serde_json::from_value(Value::String(category.to_owned())).unwrap_or(ldp::types::ErrorCategory::Runtime);
        let mut error = LdpError::new(category, code, message).with_retryable(retryable);
        if let Some(partial) = partial_output_json.and_then(|p| serde_json::from_str(&p).ok()) {
            error = error.with_partial_output(partial);
        }
        self.state.answer(Err(error))
    }

    /// Registers what cancels the Python side of the task (an asyncio task's `cancel`); called at once if the task
    /// is cancelled already.
    fn on_cancel(&self, py: Python<'_>, callable: Py<PyAny>) -> PyResult<()> {
        if self.state.cancelled.load(std::sync::atomic::Ordering::SeqCst) {
            callable.call0(py)?;
            return Ok(());
        }
        *self.state.cancel.lock().unwrap_or_else(PoisonError::into_inner) = Some(callable);
        Ok(())
    }
}

/// What a running skill sees besides its input: the session's earlier turns, partial output and progress reports,
/// and whether the task was cancelled.
#[pyclass(module = "ldp_rs._native", frozen)]
pub(crate) struct TaskContext {
    cx: ldp::TaskContext,
}

#[pymethods]
impl TaskContext {
    /// Sends the next chunk of the output as a TASK_UPDATE (over SSE or WebSocket; dropped over plain HTTP): a
    /// `str` as text, anything else as the JSON `json.dumps` makes of it.
    fn partial(&self, py: Python<'_>, chunk: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(text) = chunk.extract::<String>() {
            self.cx.partial(text);
            return Ok(());
        }
        let json: String = py.import("json")?.call_method1("dumps", (chunk,))?.extract()?;
        let raw = RawJson::from_json(json).map_err(|e| errors::usage(format!("partial output: {e}")))?;
        self.cx.partial(raw);
        Ok(())
    }

    /// Reports progress: `fraction` done in 0.0-1.0 and a status message, as a TASK_UPDATE.
    #[pyo3(signature = (fraction=None, message=None))]
    fn progress(&self, fraction: Option<f64>, message: Option<String>) {
        self.cx.progress(fraction, message);
    }

    /// The session's earlier turns, oldest first (RFC 5.3): dicts with `task_id`, `skill`, `input` and `output`
    /// (`None` for a task that failed).
    #[getter]
    fn history<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let loads = py.import("json")?.getattr("loads")?;
        let turns = PyList::empty(py);
        for turn in self.cx.history().iter() {
            let item = PyDict::new(py);
            item.set_item("task_id", &turn.task_id)?;
            item.set_item("skill", &turn.skill)?;
            item.set_item("input", loads.call1((turn.input.json(),))?)?;
            let output = match &turn.output {
                Some(out) => Some(loads.call1((out.json(),))?),
                None => None,
            };
            item.set_item("output", output)?;
            turns.append(item)?;
        }
        Ok(turns)
    }

    /// Whether the task was cancelled (TASK_CANCEL, its session closed or expired, the server shutting down): its
    /// answer has gone already, and a sync skill should stop.
    #[getter]
    fn cancelled(&self) -> bool {
        self.cx.is_cancelled()
    }
}

/// Runs one task of `skill`: hands it to the Python dispatcher and waits for its reply or its cancellation.
async fn run_skill(dispatcher: Arc<Py<PyAny>>, skill: Arc<str>, input: Value, cx: ldp::TaskContext) -> Answer {
    let (tx, rx) = oneshot::channel();
    let state = Arc::new(ReplyState {
        answer: Mutex::new(Some(tx)),
        cancel: Mutex::new(None),
        cancelled: std::sync::atomic::AtomicBool::new(false),
    });
    let mut guard = CancelOnDrop(Some(state.clone()));
    let context = TaskContext { cx: cx.clone() };
    let input = input.to_string();
    let shared = state.clone();
    // Taking the GIL may wait, and a sync skill runs in the dispatcher's call: a blocking thread, not a tokio
    // worker (their number bounds the sync skills running at once; the session layer bounds the tasks).
    tokio::task::spawn_blocking(move || {
        Python::attach(|py| {
            let reply = Reply { state: shared.clone() };
            if let Err(e) = dispatcher.call1(py, (&*skill, input, context, reply)) {
                let message = format!("the dispatcher failed: {e}");
                shared.answer(Err(LdpError::runtime(codes::EXECUTION_FAILED, message)));
            }
        });
    });
    let answer = tokio::select! {
        answer = rx => answer.unwrap_or_else(|_| {
            Err(LdpError::runtime(codes::EXECUTION_FAILED, "the skill ended without an answer"))
        }),
        () = cx.cancelled() => {
            // The runtime has answered CANCELLED already; stop the Python side.
            return Err(LdpError::runtime(codes::CANCELLED, "cancelled"));
        }
    };
    guard.0 = None;
    answer
}

/// A skill as the Python layer declares it: name, description, self-claimed quality, and the input and output
/// JSON Schemas as JSON text.
type SkillSpec = (String, Option<String>, Option<f64>, Option<String>, Option<String>);

fn schema(text: Option<&str>, what: &str, skill: &str) -> PyResult<Option<Value>> {
    text.map(|t| serde_json::from_str(t).map_err(|e| errors::usage(format!("skill {skill:?}: {what} schema: {e}"))))
        .transpose()
}

/// Starts a delegate serving `skills` on `bind` (`HOST:PORT`, port 0 for a free one), every task handed to
/// `dispatcher(skill, input_json, context, reply)`. The configuration is the front door's `ServerConfig`: from
/// `config_file` (TOML) or `config_json` (the same keys as JSON), then the keyword settings over it. Blocks while
/// the server binds, with the GIL released.
#[pyfunction]
#[pyo3(signature = (
    delegate_id, bind, skills, dispatcher, *, name=None, model=None, config_file=None, config_json=None,
    trust_domain=None, tokens=Vec::new(), signing_key=None, tls=None, store=None, rate_limit=None, otlp=None,
    shutdown_grace=None, cancel_grace=None,
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    py: Python<'_>,
    delegate_id: String,
    bind: String,
    skills: Vec<SkillSpec>,
    dispatcher: Py<PyAny>,
    name: Option<String>,
    model: Option<(String, String)>,
    config_file: Option<std::path::PathBuf>,
    config_json: Option<String>,
    trust_domain: Option<String>,
    tokens: Vec<(String, String)>,
    signing_key: Option<PyRef<'_, SigningKey>>,
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    store: Option<String>,
    rate_limit: Option<String>,
    otlp: Option<String>,
    shutdown_grace: Option<f64>,
    cancel_grace: Option<f64>,
) -> PyResult<NativeServer> {
    let mut builder = ldp::Delegate::builder(delegate_id);
    if let Some(path) = config_file {
        let config = ldp::config::ServerConfig::from_toml_file(&path).map_err(|e| errors::usage(e.to_string()))?;
        builder = builder.config(config);
    }
    if let Some(json) = config_json {
        let config: ldp::config::ServerConfig =
            serde_json::from_str(&json).map_err(|e| errors::usage(format!("config: {e}")))?;
        builder = builder.config(config);
    }
    let dispatcher = Arc::new(dispatcher);
    for (skill, description, quality, input, output) in skills {
        let input = schema(input.as_deref(), "input", &skill)?;
        let output = schema(output.as_deref(), "output", &skill)?;
        let (dispatcher, name): (_, Arc<str>) = (dispatcher.clone(), Arc::from(skill.as_str()));
        builder = builder.skill(skill, move |input: Value, cx: ldp::TaskContext| {
            let answer = run_skill(dispatcher.clone(), name.clone(), input, cx);
            async move { answer.await.map(Output::from) }
        });
        if let Some(d) = description {
            builder = builder.describe(d);
        }
        if let Some(q) = quality {
            builder = builder.quality(q);
        }
        if let Some(s) = input {
            builder = builder.input_schema(s);
        }
        if let Some(s) = output {
            builder = builder.output_schema(s);
        }
    }
    if let Some(n) = name {
        builder = builder.name(n);
    }
    if let Some((family, version)) = model {
        builder = builder.model(family, version);
    }
    if let Some(domain) = trust_domain {
        builder = builder.trust_domain(domain);
    }
    for (token, domain) in tokens {
        builder = builder.token(token, domain);
    }
    if let Some(key) = signing_key {
        builder = builder.signing_key(key.key.clone());
    }
    if let Some((cert, key)) = tls {
        builder = builder.tls(cert, key);
    }
    if let Some(url) = store {
        builder = builder.store(url);
    }
    if let Some(rate) = rate_limit {
        builder = builder.rate_limit(rate);
    }
    if let Some(endpoint) = otlp {
        builder = builder.otlp(endpoint);
    }
    if let Some(secs) = shutdown_grace {
        builder = builder.shutdown_grace(seconds(secs, "shutdown_grace")?);
    }
    if let Some(secs) = cancel_grace {
        builder = builder.cancel_grace(seconds(secs, "cancel_grace")?);
    }
    let server = py.detach(|| runtime().block_on(builder.spawn(bind))).map_err(errors::from_ldp)?;
    let card = serde_json::to_string(server.card()).map_err(|e| errors::usage(e.to_string()))?;
    Ok(NativeServer { url: server.url(), card, banner: server.banner().to_vec(), server: Mutex::new(Some(server)) })
}

/// A duration in seconds from Python, refused when negative or not finite.
pub(crate) fn seconds(secs: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| errors::usage(format!("{what}: {secs} is not a duration in seconds")))
}

/// A running delegate server (from [`start`]).
#[pyclass(module = "ldp_rs._native", frozen)]
pub(crate) struct NativeServer {
    url: String,
    card: String,
    banner: Vec<String>,
    server: Mutex<Option<ldp::Server>>,
}

#[pymethods]
impl NativeServer {
    /// `http://HOST:PORT` (`https://` with TLS); WebSocket clients use `ws://` (`wss://`) on the same address.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The identity card served, as JSON text.
    #[getter]
    fn card_json(&self) -> &str {
        &self.card
    }

    /// What the server is, one line each (the delegate and its skills, authentication, store, URLs).
    #[getter]
    fn banner(&self) -> Vec<String> {
        self.banner.clone()
    }

    /// Whether the server is still running (not shut down).
    #[getter]
    fn running(&self) -> bool {
        self.server.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// Shuts down gracefully (new work refused, running tasks given the shutdown grace), blocking with the GIL
    /// released; a second call does nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let server = self.server.lock().unwrap_or_else(PoisonError::into_inner).take();
        match server {
            Some(server) => py.detach(|| runtime().block_on(server.shutdown())).map_err(errors::from_ldp),
            None => Ok(()),
        }
    }
}
