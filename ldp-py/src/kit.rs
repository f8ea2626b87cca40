//! The conformance kit from Python: [`ldp_conformance::run`] against any endpoint, its report as JSON, rendered in
//! the kit's formats, and compared with an expected-failures baseline.

use std::path::PathBuf;

use ldp_conformance::{Baseline, ClientTls, Config, Format, Report};
use pyo3::prelude::*;

use crate::errors;
use crate::keys::SigningKey;
use crate::runtime;
use crate::server::seconds;

/// Runs the kit against `url`, blocking with the GIL released (the run is bounded by `deadline`), and returns
/// `(report_json, passed)`. With `baseline` (an expected-failures file, as `ldp conformance --baseline` reads) the
/// run passes when its failures are exactly the listed ones.
#[pyfunction]
#[pyo3(signature = (
    url, *, transports=vec!["http".to_owned()], token=None, untrusted_token=None, signing_key=None, ttl_hint=None,
    level="all", request_timeout=10.0, check_timeout=60.0, deadline=None, oversize_bytes=None,
    tls_root_certificate_pem=None, baseline=None,
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_conformance(
    py: Python<'_>,
    url: String,
    transports: Vec<String>,
    token: Option<String>,
    untrusted_token: Option<String>,
    signing_key: Option<PyRef<'_, SigningKey>>,
    ttl_hint: Option<u64>,
    level: &str,
    request_timeout: f64,
    check_timeout: f64,
    deadline: Option<f64>,
    oversize_bytes: Option<usize>,
    tls_root_certificate_pem: Option<Vec<u8>>,
    baseline: Option<PathBuf>,
) -> PyResult<(String, bool)> {
    let mut config = Config::new(url);
    config.transports = transports
        .iter()
        .map(|t| t.parse().map_err(|e: String| errors::usage(format!("transports: {e}"))))
        .collect::<PyResult<_>>()?;
    config.token = token;
    config.untrusted_token = untrusted_token;
    config.signing = signing_key.map(|k| k.key.clone());
    config.ttl_hint = ttl_hint;
    config.level = level.parse().map_err(|e: String| errors::usage(format!("level: {e}")))?;
    config.request_timeout = seconds(request_timeout, "request_timeout")?;
    config.check_timeout = seconds(check_timeout, "check_timeout")?;
    if let Some(secs) = deadline {
        config.deadline = seconds(secs, "deadline")?;
    }
    if let Some(bytes) = oversize_bytes {
        config.oversize_bytes = bytes;
    }
    if let Some(pem) = tls_root_certificate_pem {
        config.tls = ClientTls::new().with_root_certificate_pem(pem);
    }
    let expected = baseline
        .map(|path| Baseline::load(&path).map(|b| (b, path)))
        .transpose()
        .map_err(|e| errors::usage(e.to_string()))?;
    let mut report = py
        .detach(|| runtime().block_on(ldp_conformance::run(config)))
        .map_err(|e| Python::attach(|py| kit_error(py, &e.to_string())))?;
    if let Some((expected, path)) = expected {
        report.baseline = Some(expected.compare(&report, path.display().to_string()));
    }
    let passed = report.passed();
    let json = serde_json::to_string(&report).map_err(|e| errors::usage(e.to_string()))?;
    Ok((json, passed))
}

/// A `ConformanceError`: the run could not be made (an unreachable endpoint, a bad configuration).
fn kit_error(py: Python<'_>, message: &str) -> PyErr {
    match py.import("ldp_rs.errors").and_then(|m| m.getattr("ConformanceError")).and_then(|c| c.call1((message,))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// Renders a report (its JSON) as `table`, `json`, `junit` or `markdown`.
#[pyfunction]
pub(crate) fn render_report(report_json: &str, format: &str) -> PyResult<String> {
    let report: Report = serde_json::from_str(report_json).map_err(|e| errors::usage(format!("report: {e}")))?;
    let format: Format = format.parse().map_err(errors::usage)?;
    Ok(report.render(format))
}

/// Compares a report (its JSON) with the expected-failures file at `baseline`: the comparison as JSON
/// (`unexpected`, `stale`, `changed`, `ok`).
#[pyfunction]
pub(crate) fn compare_baseline(report_json: &str, baseline: PathBuf) -> PyResult<String> {
    let report: Report = serde_json::from_str(report_json).map_err(|e| errors::usage(format!("report: {e}")))?;
    let expected = Baseline::load(&baseline).map_err(|e| errors::usage(e.to_string()))?;
    let comparison = expected.compare(&report, baseline.display().to_string());
    serde_json::to_string(&comparison).map_err(|e| errors::usage(e.to_string()))
}
