//! Rust errors as the exception classes of `ldp_rs.errors` (defined in Python, so that they carry attributes and
//! docstrings): one mapping, by who caused the error.
//!
//! | Rust error | Python exception |
//! |---|---|
//! | the delegate's typed `LdpError` (TASK_FAILED, SESSION_REJECT, ...) | `TaskFailed` (code, category, retryable) |
//! | a transport failure (connect, TLS, timeout, HTTP, WebSocket, IO) | `TransportError` |
//! | a peer that broke the protocol | `ProtocolError` |
//! | the caller's misuse: bad id, URL, option, configuration, input | `UsageError` (also a `ValueError`) |
//! | a server that cannot start: bind, store, a file that cannot be read | `ServerError` |

use ldp::LdpError;
use ldp::session::SessionError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// `ldp_rs.errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An instance of `ldp_rs.errors.<class>` with `message`, as an error to raise.
fn raise(py: Python<'_>, class: &str, message: &str) -> PyErr {
    let built = ERRORS
        .get_or_try_init(py, || py.import("ldp_rs.errors").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(class))
        .and_then(|cls| cls.call1((message,)));
    match built {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// A `UsageError` (the caller's mistake).
pub(crate) fn usage(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| raise(py, "UsageError", &message))
}

/// A `TaskFailed` carrying the delegate's typed error.
pub(crate) fn task_failed(e: &LdpError) -> PyErr {
    let category = serde_json::to_value(e.category).ok().and_then(|v| v.as_str().map(str::to_owned));
    let partial = e.partial_output.as_ref().map(serde_json::Value::to_string);
    Python::attach(|py| {
        let kwargs = pyo3::types::PyDict::new(py);
        let set = || -> PyResult<()> {
            kwargs.set_item("code", e.code.as_str())?;
            kwargs.set_item("category", category.as_deref().unwrap_or("runtime"))?;
            kwargs.set_item("retryable", e.retryable)?;
            kwargs.set_item("partial_output_json", partial.as_deref())?;
            Ok(())
        };
        if let Err(err) = set() {
            return err;
        }
        let built = ERRORS
            .get_or_try_init(py, || py.import("ldp_rs.errors").map(Bound::unbind))
            .and_then(|m| m.bind(py).getattr("TaskFailed"))
            .and_then(|cls| cls.call((e.message.as_str(),), Some(&kwargs)));
        match built {
            Ok(instance) => PyErr::from_value(instance),
            Err(err) => err,
        }
    })
}

/// The front door's error as the exception its cause calls for.
pub(crate) fn from_ldp(e: ldp::Error) -> PyErr {
    use ldp::Error as E;
    let class = match &e {
        E::Session(SessionError::Peer(err)) => return task_failed(err),
        E::Session(SessionError::Transport(_)) | E::Http(_) | E::Ws(_) | E::Io(_) => "TransportError",
        E::IssuerFetch { .. } | E::IssuerTimeout { .. } | E::IssuerStatus { .. } | E::IssuerTooLarge { .. } => {
            "TransportError"
        }
        E::Session(SessionError::PeerMisbehaved(_)) | E::Output(_) => "ProtocolError",
        E::Bind { .. } | E::Store(_) | E::Setup { .. } => "ServerError",
        _ => "UsageError",
    };
    let message = e.to_string();
    Python::attach(|py| raise(py, class, &message))
}
