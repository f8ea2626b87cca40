//! Expected-failures baselines for CI, compared strictly both ways: an unlisted failure fails the run, and a listed
//! failure that no longer fails fails it as stale.
//!
//! A requirement counts as failing when it is FAIL or NOT TESTABLE, at any level (a SHOULD warning is listed too,
//! so a baseline is a complete record of where an implementation departs from the spec).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ctx::Status;
use crate::report::Report;

/// One expected failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedFailure {
    /// The requirement id.
    pub id: String,
    /// `fail` or `not_testable`.
    pub status: Status,
    /// Why it fails (documentation; not compared).
    pub reason: String,
}

/// A baseline file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// What was tested, and how.
    pub implementation: String,
    /// The catalogue's spec version.
    pub spec: String,
    /// The expected failures, in catalogue order.
    pub expected_failures: Vec<ExpectedFailure>,
}

/// A baseline could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BaselineError {
    /// The file could not be read or written.
    #[error("baseline {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a baseline.
    #[error("baseline {path} is not valid: {source}")]
    Parse {
        /// The path.
        path: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// The comparison of a run with a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineComparison {
    /// Where the baseline came from.
    pub source: String,
    /// Failing now but not listed: `id (status): first detail`.
    pub unexpected: Vec<String>,
    /// Listed but not failing now.
    pub stale: Vec<String>,
    /// Listed and failing, but with another status (`fail` vs `not_testable`); reported, not fatal.
    pub changed: Vec<String>,
    /// Whether the run matches the baseline exactly.
    pub ok: bool,
}

impl BaselineComparison {
    /// A one-line summary.
    pub fn line(&self) -> String {
        if self.ok {
            let mut s = format!("baseline {}: matches", self.source);
            if !self.changed.is_empty() {
                s.push_str(&format!(" (status changed: {})", self.changed.join(", ")));
            }
            return s;
        }
        let mut parts = Vec::new();
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected failures: {}", self.unexpected.join("; ")));
        }
        if !self.stale.is_empty() {
            parts.push(format!("stale entries (now passing or skipped): {}", self.stale.join(", ")));
        }
        format!("baseline {}: MISMATCH: {}", self.source, parts.join(" | "))
    }
}

impl Baseline {
    /// The baseline a report would match exactly, with each reason taken from the requirement's first non-passing
    /// detail.
    pub fn from_report(report: &Report, implementation: impl Into<String>) -> Self {
        let expected_failures = report
            .requirements
            .iter()
            .filter(|r| matches!(r.status, Status::Fail | Status::NotTestable))
            .map(|r| ExpectedFailure {
                id: r.id.clone(),
                status: r.status,
                reason: r.details.iter().find(|d| !d.contains(" PASS: ")).cloned().unwrap_or_default(),
            })
            .collect();
        Self { implementation: implementation.into(), spec: report.spec.clone(), expected_failures }
    }

    /// Reads a baseline file.
    pub fn load(path: &Path) -> Result<Self, BaselineError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| BaselineError::Io { path: path.display().to_string(), source })?;
        serde_json::from_str(&text).map_err(|source| BaselineError::Parse { path: path.display().to_string(), source })
    }

    /// Writes a baseline file (pretty JSON, trailing newline).
    pub fn save(&self, path: &Path) -> Result<(), BaselineError> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|source| BaselineError::Parse { path: path.display().to_string(), source })?;
        text.push('\n');
        std::fs::write(path, text).map_err(|source| BaselineError::Io { path: path.display().to_string(), source })
    }

    /// Compares a report with this baseline.
    pub fn compare(&self, report: &Report, source: impl Into<String>) -> BaselineComparison {
        let mut unexpected = Vec::new();
        let mut changed = Vec::new();
        for r in report.requirements.iter().filter(|r| matches!(r.status, Status::Fail | Status::NotTestable)) {
            match self.expected_failures.iter().find(|e| e.id == r.id) {
                None => {
                    let why = r.details.iter().find(|d| !d.contains(" PASS: ")).cloned().unwrap_or_default();
                    unexpected.push(format!("{} ({}): {why}", r.id, r.status.as_str()));
                }
                Some(e) if e.status != r.status => {
                    changed.push(format!("{} {} -> {}", r.id, e.status.as_str(), r.status.as_str()));
                }
                Some(_) => {}
            }
        }
        let stale: Vec<String> = self
            .expected_failures
            .iter()
            .filter(|e| {
                !report
                    .requirements
                    .iter()
                    .any(|r| r.id == e.id && matches!(r.status, Status::Fail | Status::NotTestable))
            })
            .map(|e| {
                let now = report.requirement(&e.id).map_or("not run", |r| r.status.as_str());
                format!("{} (now {now})", e.id)
            })
            .collect();
        let ok = unexpected.is_empty() && stale.is_empty();
        BaselineComparison { source: source.into(), unexpected, stale, changed, ok }
    }
}
