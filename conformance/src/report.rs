//! The report and its renderings: a terminal table, JSON (with evidence), JUnit XML and Markdown.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ldp_types::IdentityCard;
use serde::{Deserialize, Serialize};

use crate::baseline::BaselineComparison;
use crate::catalogue::{Feature, Level};
use crate::ctx::{Claims, Status};
use crate::probe::{Exchange, TransportKind};
use crate::profiles::ProfileResult;
use crate::runner::LevelFilter;

/// How a requirement's verdict counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Passed.
    Pass,
    /// A MUST or EXTENSION requirement failed or was not testable: the run fails.
    Failure,
    /// A SHOULD requirement failed or was not testable.
    Warning,
    /// A MAY requirement failed or was not testable.
    Info,
    /// Skipped: depends on a capability the implementation does not claim (or does not apply to the transport).
    Skipped,
}

/// Who was tested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    /// The card's delegate id.
    pub delegate_id: String,
    /// The card's name.
    pub name: String,
    /// Model family.
    pub model_family: String,
    /// Model version.
    pub model_version: String,
    /// Trust domain name.
    pub trust_domain: String,
}

impl Implementation {
    /// From an identity card.
    pub fn from_card(card: &IdentityCard) -> Self {
        Self {
            delegate_id: card.delegate_id.to_string(),
            name: card.name.clone(),
            model_family: card.model_family.clone(),
            model_version: card.model_version.clone(),
            trust_domain: card.trust_domain.name.clone(),
        }
    }
}

/// The requests and responses of one check on one transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The check.
    pub check: String,
    /// The transport.
    pub transport: TransportKind,
    /// Every exchange, in order.
    pub exchanges: Vec<Exchange>,
}

/// The verdict on one requirement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequirementResult {
    /// The requirement id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its level.
    pub level: Level,
    /// The spec section.
    pub section: String,
    /// The spec sentence.
    pub source: String,
    /// The capability it depends on.
    pub applies_when: Option<Feature>,
    /// The combined verdict over every check and transport.
    pub status: Status,
    /// How it counts.
    pub outcome: Outcome,
    /// The verdict per transport.
    pub transports: BTreeMap<TransportKind, Status>,
    /// Every check's explanation, prefixed `[transport] check VERDICT:`.
    pub details: Vec<String>,
    /// The requests sent and the responses received by the checks that judged it.
    pub evidence: Vec<Evidence>,
}

/// One check's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRun {
    /// The check id.
    pub check: String,
    /// The transport.
    pub transport: TransportKind,
    /// Duration.
    pub elapsed_ms: u64,
    /// Whether it hit its timeout.
    pub timed_out: bool,
}

/// Counts of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Requirements reported.
    pub requirements: usize,
    /// Passed.
    pub passed: usize,
    /// Failures (MUST/EXTENSION failed or not testable).
    pub failures: usize,
    /// Warnings (SHOULD failed or not testable).
    pub warnings: usize,
    /// Informational (MAY failed or not testable).
    pub infos: usize,
    /// Skipped.
    pub skipped: usize,
    /// Of the non-passing, how many were not testable.
    pub not_testable: usize,
}

impl Summary {
    /// Counts `results`.
    pub fn of(results: &[RequirementResult]) -> Self {
        let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
        Self {
            requirements: results.len(),
            passed: count(Outcome::Pass),
            failures: count(Outcome::Failure),
            warnings: count(Outcome::Warning),
            infos: count(Outcome::Info),
            skipped: count(Outcome::Skipped),
            not_testable: results.iter().filter(|r| r.status == Status::NotTestable).count(),
        }
    }
}

/// A conformance report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The kit and its version.
    pub kit: String,
    /// The spec version of the catalogue.
    pub spec: String,
    /// The endpoint tested.
    pub target: String,
    /// The transports tested.
    pub transports: Vec<TransportKind>,
    /// The level filter.
    pub level: LevelFilter,
    /// The signature algorithm used, if any.
    pub signing: Option<String>,
    /// The TTL proposed by the expiry check.
    pub ttl_probe_secs: u64,
    /// The implementation, from its card.
    pub implementation: Option<Implementation>,
    /// What it claims.
    pub claims: Claims,
    /// Counts.
    pub summary: Summary,
    /// The adoption profiles of RFC Appendix B.
    pub profiles: Vec<ProfileResult>,
    /// One result per requirement, in catalogue order.
    pub requirements: Vec<RequirementResult>,
    /// Every check run.
    pub checks: Vec<CheckRun>,
    /// The comparison with an expected-failures baseline, when one was given.
    pub baseline: Option<BaselineComparison>,
    /// Duration of the run.
    pub elapsed_ms: u64,
}

/// Output formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// A human-readable table.
    #[default]
    Table,
    /// The full report with evidence.
    Json,
    /// JUnit XML, one test case per requirement.
    Junit,
    /// Markdown.
    Markdown,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "table" => Ok(Self::Table),
            "json" => Ok(Self::Json),
            "junit" => Ok(Self::Junit),
            "markdown" | "md" => Ok(Self::Markdown),
            other => Err(format!("unknown format {other:?} (expected table, json, junit or markdown)")),
        }
    }
}

impl Report {
    /// Whether every required requirement passed (and, with a baseline, the failures are exactly the expected ones).
    pub fn passed(&self) -> bool {
        match &self.baseline {
            Some(b) => b.ok,
            None => self.summary.failures == 0,
        }
    }

    /// The result of one requirement.
    pub fn requirement(&self, id: &str) -> Option<&RequirementResult> {
        self.requirements.iter().find(|r| r.id == id)
    }

    /// Ids of requirements that did not pass and were not skipped (any level).
    pub fn failing_ids(&self) -> Vec<String> {
        self.requirements
            .iter()
            .filter(|r| matches!(r.status, Status::Fail | Status::NotTestable))
            .map(|r| r.id.clone())
            .collect()
    }

    /// Renders in `format`.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Table => self.table(),
            Format::Json => serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")),
            Format::Junit => self.junit(),
            Format::Markdown => self.markdown(),
        }
    }

    fn headline(&self) -> String {
        let s = &self.summary;
        format!(
            "{} requirements: {} passed, {} failures, {} warnings, {} info, {} skipped ({} not testable)",
            s.requirements, s.passed, s.failures, s.warnings, s.infos, s.skipped, s.not_testable
        )
    }

    fn who(&self) -> String {
        match &self.implementation {
            Some(i) => format!("{} ({}, {} {})", i.delegate_id, i.name, i.model_family, i.model_version),
            None => "unknown implementation (no identity card)".into(),
        }
    }

    fn table(&self) -> String {
        let mut out = String::new();
        let transports: Vec<&str> = self.transports.iter().map(|t| t.as_str()).collect();
        let _ = writeln!(out, "LDP conformance: {} over {}", self.target, transports.join(", "));
        let _ = writeln!(out, "implementation: {}", self.who());
        let _ = writeln!(out, "spec: {}", self.spec);
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<13} {:<9} {:<21} title", "verdict", "level", "requirement");
        for r in &self.requirements {
            let verdict = match (r.status, r.outcome) {
                (Status::Pass, _) => "PASS",
                (Status::Skipped, _) => "SKIPPED",
                (Status::NotTestable, _) => "NOT TESTABLE",
                (_, Outcome::Warning) => "WARN",
                (_, Outcome::Info) => "INFO",
                _ => "FAIL",
            };
            let _ = writeln!(out, "{verdict:<13} {:<9} {:<21} {}", r.level.as_str(), r.id, r.title);
            if !matches!(r.status, Status::Pass) {
                for d in r.details.iter().filter(|d| !d.contains(" PASS: ")).take(3) {
                    let _ = writeln!(out, "{:<45}{}", "", d);
                }
            }
        }
        let _ = writeln!(out);
        for p in &self.profiles {
            let _ = writeln!(out, "{}", p.line());
        }
        if !self.claims.features.is_empty() {
            let claims: Vec<String> = self.claims.features.iter().map(|(f, why)| format!("{f} ({why})")).collect();
            let _ = writeln!(out, "claims: {}", claims.join("; "));
        }
        if let Some(b) = &self.baseline {
            let _ = writeln!(out, "{}", b.line());
        }
        let _ = writeln!(out, "{}", self.headline());
        let _ = writeln!(out, "result: {}", if self.passed() { "PASS" } else { "FAIL" });
        out
    }

    fn junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let failures = self.summary.failures;
        let skipped = self.summary.skipped;
        let _ = writeln!(
            out,
            "<testsuites name=\"ldp-conformance\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\">",
            self.requirements.len()
        );
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{:.3}\">",
            xml(&format!("{} ({})", self.target, self.spec)),
            self.requirements.len(),
            self.elapsed_ms as f64 / 1000.0
        );
        for r in &self.requirements {
            let _ = write!(
                out,
                "    <testcase classname=\"ldp.{}\" name=\"{}\">",
                r.level.as_str(),
                xml(&format!("{} {}", r.id, r.title))
            );
            let details = xml(&r.details.join("\n"));
            match r.outcome {
                Outcome::Pass => {}
                Outcome::Skipped => {
                    let _ = write!(out, "<skipped message=\"{}\"/>", xml(r.details.first().map_or("", String::as_str)));
                }
                Outcome::Failure => {
                    let _ = write!(
                        out,
                        "<failure message=\"{} {}\" type=\"{}\">{details}</failure>",
                        r.level,
                        r.status.as_str(),
                        r.status.as_str()
                    );
                }
                Outcome::Warning | Outcome::Info => {
                    let _ = write!(out, "<system-out>{} {}: {details}</system-out>", r.level, r.status.as_str());
                }
            }
            let _ = writeln!(out, "</testcase>");
        }
        let _ = writeln!(out, "  </testsuite>\n</testsuites>");
        out
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let transports: Vec<&str> = self.transports.iter().map(|t| t.as_str()).collect();
        let _ = writeln!(out, "# LDP conformance report\n");
        let _ = writeln!(out, "- target: `{}` over {}", self.target, transports.join(", "));
        let _ = writeln!(out, "- implementation: {}", self.who());
        let _ = writeln!(out, "- spec: {}", self.spec);
        let _ = writeln!(out, "- kit: {}; level: {}", self.kit, self.level.as_str());
        let _ = writeln!(out, "- {}", self.headline());
        let _ = writeln!(out, "- result: **{}**\n", if self.passed() { "PASS" } else { "FAIL" });
        let _ = writeln!(out, "## Profiles (RFC Appendix B)\n");
        for p in &self.profiles {
            let _ = writeln!(out, "- {}", p.line());
        }
        if let Some(b) = &self.baseline {
            let _ = writeln!(out, "\n## Baseline\n\n{}", b.line());
        }
        let _ = writeln!(out, "\n## Requirements\n");
        let _ = writeln!(out, "| requirement | level | verdict | counts as | why |");
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for r in &self.requirements {
            let why = if r.status == Status::Pass {
                String::new()
            } else {
                r.details.iter().filter(|d| !d.contains(" PASS: ")).take(2).cloned().collect::<Vec<_>>().join("<br>")
            };
            let _ = writeln!(
                out,
                "| {} {} | {} | {} | {:?} | {} |",
                r.id,
                r.title,
                r.level,
                r.status.as_str(),
                r.outcome,
                why.replace('|', "\\|")
            );
        }
        out
    }
}

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
