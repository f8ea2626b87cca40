//! Calling a delegate from Python: [`ldp::connect_with`] and its [`ldp::Connection`], as asyncio awaitables.
//!
//! Inputs and outputs cross as JSON text (the Python layer encodes and decodes them); each awaitable is a tokio task
//! on the shared runtime resolving a Python future, so no Rust work holds the GIL.

use std::sync::Arc;

use ldp::{ClientOptions, ConnectSettings, Event, RawJson};
use pyo3::prelude::*;
use pyo3_async_runtimes::tokio::future_into_py;
use tokio::sync::Mutex;

use crate::errors;
use crate::keys::SigningKey;
use crate::server::seconds;

/// JSON text as the front door's raw JSON (the Python layer made it with `json.dumps`).
fn raw(json: String) -> PyResult<RawJson> {
    RawJson::from_json(json).map_err(|e| errors::usage(format!("input not JSON: {e}")))
}

/// Connects to the delegate at `url` (`http(s)://` or `ws(s)://`): discovery and HELLO; the session opens on the
/// first call. The options are the front door's `ClientOptions`. Returns an awaitable of a [`Connection`].
#[pyfunction]
#[pyo3(signature = (
    url, *, delegate_id=None, trust_domain=None, signing_key=None, bearer_token=None, token_command=None, client_credentials=None,
    connect_timeout=None, request_timeout=None, retries=None, max_message=None, tls_root_certificate_pem=None,
    tls_client_identity_pem=None,
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect<'py>(
    py: Python<'py>,
    url: String,
    delegate_id: Option<String>,
    trust_domain: Option<String>,
    signing_key: Option<PyRef<'py, SigningKey>>,
    bearer_token: Option<String>,
    token_command: Option<String>,
    client_credentials: Option<(String, String, String, Vec<String>)>,
    connect_timeout: Option<f64>,
    request_timeout: Option<f64>,
    retries: Option<u32>,
    max_message: Option<usize>,
    tls_root_certificate_pem: Option<Vec<u8>>,
    tls_client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut options = ClientOptions::new();
    if let Some(id) = delegate_id {
        options = options.delegate_id(id);
    }
    if let Some(domain) = trust_domain {
        options = options.trust_domain(domain);
    }
    if let Some(key) = signing_key {
        options = options.signing_key(key.key.clone());
    }
    if let Some(token) = bearer_token {
        options = options.bearer_token(token);
    }
    if let Some(command) = token_command {
        options = options.token_source(ldp::CommandToken::new(command));
    }
    if let Some((token_url, client_id, secret, scopes)) = client_credentials {
        let source = ldp::ClientCredentials::new(token_url, client_id, secret)
            .map_err(|e| errors::usage(format!("client_credentials: {e}")))?
            .scopes(scopes);
        options = options.token_source(source);
    }
    if let Some(secs) = connect_timeout {
        options = options.connect_timeout(seconds(secs, "connect_timeout")?);
    }
    if let Some(secs) = request_timeout {
        options = options.request_timeout(seconds(secs, "request_timeout")?);
    }
    if let Some(n) = retries {
        options = options.retry(ldp::RetryPolicy { max_retries: n, ..ldp::RetryPolicy::default() });
    }
    if let Some(bytes) = max_message {
        options = options.max_message(bytes);
    }
    if let Some(pem) = tls_root_certificate_pem {
        options = options.tls_root_certificate_pem(pem);
    }
    if let Some((chain, key)) = tls_client_identity_pem {
        options = options.tls_client_identity_pem(chain, key);
    }
    future_into_py(py, async move {
        let connection = ldp::connect_with(url, options).await.map_err(errors::from_ldp)?;
        Ok(Connection { inner: Arc::new(connection) })
    })
}

/// A connection to one delegate; one session, opened on the first call and reused.
#[pyclass(module = "ldp_rs._native", frozen)]
pub(crate) struct Connection {
    inner: Arc<ldp::Connection>,
}

#[pymethods]
impl Connection {
    /// The delegate's identity card, as JSON text.
    #[getter]
    fn card_json(&self) -> PyResult<String> {
        serde_json::to_string(self.inner.card()).map_err(|e| errors::usage(e.to_string()))
    }

    /// Runs `skill` on `input_json`; an awaitable of `(output_json, provenance_json)`.
    fn call<'py>(&self, py: Python<'py>, skill: String, input_json: String) -> PyResult<Bound<'py, PyAny>> {
        let input = raw(input_json)?;
        let inner = self.inner.clone();
        future_into_py(py, async move {
            let answer: ldp::Answer<RawJson> = inner.call(&skill, input).await.map_err(errors::from_ldp)?;
            let provenance = serde_json::to_string(&answer.provenance).map_err(|e| errors::usage(e.to_string()))?;
            Ok((answer.output.json().to_owned(), provenance))
        })
    }

    /// Runs `skill` on `input_json`, streaming; an awaitable of a [`Stream`].
    fn stream<'py>(&self, py: Python<'py>, skill: String, input_json: String) -> PyResult<Bound<'py, PyAny>> {
        let input = raw(input_json)?;
        let inner = self.inner.clone();
        future_into_py(py, async move {
            let stream = inner.stream(&skill, input).await.map_err(errors::from_ldp)?;
            let canceller = stream.canceller();
            Ok(Stream { inner: Arc::new(Mutex::new(stream)), canceller })
        })
    }

    /// Closes the session (the next call opens another); an awaitable.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        future_into_py(py, async move { inner.close().await.map_err(errors::from_ldp) })
    }
}

/// A streamed task: its events in order (partial output, progress, then the answer).
#[pyclass(module = "ldp_rs._native", frozen)]
pub(crate) struct Stream {
    inner: Arc<Mutex<ldp::Stream>>,
    /// Outside the lock: `next_event` holds that while it waits.
    canceller: ldp::Canceller,
}

#[pymethods]
impl Stream {
    /// The next event as `(kind, a, b)`: `("partial", chunk_json, None)`, `("progress", fraction, message)`,
    /// `("done", output_json, provenance_json)`, or `None` after the last one; an awaitable. A failed task raises.
    fn next_event<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        future_into_py(py, async move {
            let next = inner.lock().await.next().await;
            let event = match next {
                None => return Ok(None),
                Some(Err(e)) => return Err(errors::from_ldp(e)),
                Some(Ok(event)) => event,
            };
            Python::attach(|py| -> PyResult<Option<Py<PyAny>>> {
                let tuple = match event {
                    Event::Partial(chunk) => ("partial", chunk.json(), None::<String>).into_pyobject(py)?,
                    Event::Progress { progress, message } => ("progress", progress, message).into_pyobject(py)?,
                    Event::Done(answer) => {
                        let provenance =
                            serde_json::to_string(&answer.provenance).map_err(|e| errors::usage(e.to_string()))?;
                        ("done", answer.output.json(), Some(provenance)).into_pyobject(py)?
                    }
                    _ => return Ok(None),
                };
                Ok(Some(tuple.into_any().unbind()))
            })
        })
    }

    /// Cancels the task (TASK_CANCEL); the stream then raises `TaskFailed` with code `CANCELLED`. An awaitable.
    fn cancel<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let canceller = self.canceller.clone();
        future_into_py(py, async move { canceller.cancel().await.map_err(errors::from_ldp) })
    }
}
