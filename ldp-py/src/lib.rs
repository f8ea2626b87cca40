//! The native half of the Python package `ldp-rs` (module `ldp_rs._native`): a thin PyO3 binding over the front door
//! (`ldp-sdk`: [`ldp::Delegate::builder`], [`ldp::connect_with`]) and the conformance kit (`ldp-conformance`).
//!
//! ```text
//!  Python: @delegate.skill functions ── ldp_rs (python/ldp_rs: schemas, asyncio, typed results)
//!                                          │ JSON text both ways, one dispatcher call per task
//!  Rust:   _native ── ldp::Delegate::builder(..).skill(..) / ldp::connect_with(..) / ldp_conformance::run(..)
//!                       (every protocol rule stays in the crates underneath)
//! ```
//!
//! The server and the clients run on one tokio runtime of their own (pyo3-async-runtimes'); no tokio thread holds
//! the GIL except to hand a task to Python (`server.rs`) or a result back. Blocking entry points release the GIL
//! (`Python::detach`) while Rust works; awaitable ones are Python futures resolved from that runtime. Rust errors
//! become the exception classes of `ldp_rs.errors` (`errors.rs`); nothing reachable from Python panics.
#![warn(missing_docs)]

mod client;
mod errors;
mod keys;
mod kit;
mod server;

use pyo3::prelude::*;

/// The tokio runtime every server, client and kit run shares (pyo3-async-runtimes' own, so that its awaitables and
/// our blocking calls use the same one).
fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// The native module `ldp_rs._native`; the public API is the Python package around it (`ldp_rs`).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<keys::SigningKey>()?;
    m.add_class::<server::NativeServer>()?;
    m.add_class::<server::TaskContext>()?;
    m.add_class::<server::Reply>()?;
    m.add_class::<client::Connection>()?;
    m.add_class::<client::Stream>()?;
    m.add_function(wrap_pyfunction!(server::start, m)?)?;
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_function(wrap_pyfunction!(kit::run_conformance, m)?)?;
    m.add_function(wrap_pyfunction!(kit::compare_baseline, m)?)?;
    m.add_function(wrap_pyfunction!(kit::render_report, m)?)?;
    m.add("INVALID_INPUT", ldp::INVALID_INPUT)?;
    Ok(())
}
