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

/// How a requirement's verdict counts in the run (its [`crate::Status`] judged at its level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
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
    /// Blocked: the kit could not exercise it because a requirement it depends on failed; that failure is counted
    /// once, on the cause (see [`RequirementResult::blocked_by`]).
    Blocked,
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
    pub outcome: Verdict,
    /// The verdict per transport.
    pub transports: BTreeMap<TransportKind, Status>,
    /// Every check's explanation, prefixed `[transport] check VERDICT:`.
    pub details: Vec<String>,
    /// The requests sent and the responses received by the checks that judged it.
    pub evidence: Vec<Evidence>,
    /// With [`Status::Blocked`]: the failed requirements that kept the kit from exercising this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
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
    /// Blocked by the failure of another requirement (not counted as failures themselves).
    #[serde(default)]
    pub blocked: usize,
    /// Of the non-passing, how many were not testable.
    pub not_testable: usize,
}

impl Summary {
    /// Counts `results`.
    pub fn of(results: &[RequirementResult]) -> Self {
        let count = |o: Verdict| results.iter().filter(|r| r.outcome == o).count();
        Self {
            requirements: results.len(),
            passed: count(Verdict::Pass),
            failures: count(Verdict::Failure),
            warnings: count(Verdict::Warning),
            infos: count(Verdict::Info),
            skipped: count(Verdict::Skipped),
            blocked: count(Verdict::Blocked),
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
#[non_exhaustive]
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
            "{} requirements: {} passed, {} failures, {} warnings, {} info, {} skipped, {} blocked ({} not testable)",
            s.requirements, s.passed, s.failures, s.warnings, s.infos, s.skipped, s.blocked, s.not_testable
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
                (Status::Blocked, _) => "BLOCKED",
                (_, Verdict::Warning) => "WARN",
                (_, Verdict::Info) => "INFO",
                _ => "FAIL",
            };
            let _ = writeln!(out, "{verdict:<13} {:<9} {:<21} {}", r.level.as_str(), r.id, r.title);
            if !r.blocked_by.is_empty() {
                let _ = writeln!(out, "{:<45}blocked by {}", "", r.blocked_by.join(", "));
            }
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

    /// JUnit XML. Every test case carries its level, verdict and outcome as properties, so a SHOULD warning is
    /// visible to CI dashboards that show only failures and skips; the suite's properties count the warnings.
    fn junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let s = &self.summary;
        let (failures, skipped) = (s.failures, s.skipped + s.blocked);
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
        let _ = writeln!(out, "    <properties>");
        for (name, value) in [
            ("ldp.warnings", s.warnings),
            ("ldp.infos", s.infos),
            ("ldp.blocked", s.blocked),
            ("ldp.not_testable", s.not_testable),
        ] {
            let _ = writeln!(out, "      <property name=\"{name}\" value=\"{value}\"/>");
        }
        let _ = writeln!(out, "    </properties>");
        for r in &self.requirements {
            let _ = write!(
                out,
                "    <testcase classname=\"ldp.{}\" name=\"{}\">",
                r.level.as_str(),
                xml(&format!("{} {}", r.id, r.title))
            );
            let outcome = match r.outcome {
                Verdict::Pass => "pass",
                Verdict::Failure => "failure",
                Verdict::Warning => "warning",
                Verdict::Info => "info",
                Verdict::Skipped => "skipped",
                Verdict::Blocked => "blocked",
            };
            let _ = write!(
                out,
                "<properties><property name=\"ldp.level\" value=\"{}\"/><property name=\"ldp.verdict\" \
                 value=\"{}\"/><property name=\"ldp.outcome\" value=\"{outcome}\"/>",
                r.level,
                r.status.as_str()
            );
            if !r.blocked_by.is_empty() {
                let _ = write!(out, "<property name=\"ldp.blocked_by\" value=\"{}\"/>", xml(&r.blocked_by.join(",")));
            }
            let _ = write!(out, "</properties>");
            let details = xml(&r.details.join("\n"));
            match r.outcome {
                Verdict::Pass => {}
                Verdict::Skipped => {
                    let _ = write!(out, "<skipped message=\"{}\"/>", xml(r.details.first().map_or("", String::as_str)));
                }
                Verdict::Blocked => {
                    let _ = write!(
                        out,
                        "<skipped message=\"{}\"/><system-out>{details}</system-out>",
                        xml(&format!("BLOCKED by {}", r.blocked_by.join(", ")))
                    );
                }
                Verdict::Failure => {
                    let _ = write!(
                        out,
                        "<failure message=\"{} {}\" type=\"{}\">{details}</failure>",
                        r.level,
                        r.status.as_str(),
                        r.status.as_str()
                    );
                }
                Verdict::Warning | Verdict::Info => {
                    let label = if r.outcome == Verdict::Warning { "WARNING" } else { "INFO" };
                    let _ = write!(
                        out,
                        "<system-out>{label}: {} {}: {details}</system-out><system-err>{label}: {} {} {}</system-err>",
                        r.level,
                        r.status.as_str(),
                        r.level,
                        r.id,
                        r.status.as_str()
                    );
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
        let _ = writeln!(out, "- target: {} over {}", md(&self.target), transports.join(", "));
        let _ = writeln!(out, "- implementation: {}", md(&self.who()));
        let _ = writeln!(out, "- spec: {}", self.spec);
        let _ = writeln!(out, "- kit: {}; level: {}", self.kit, self.level.as_str());
        let _ = writeln!(out, "- {}", self.headline());
        let _ = writeln!(out, "- result: **{}**\n", if self.passed() { "PASS" } else { "FAIL" });
        let _ = writeln!(out, "## Profiles (RFC Appendix B)\n");
        for p in &self.profiles {
            let _ = writeln!(out, "- {}", md(&p.line()));
        }
        if let Some(b) = &self.baseline {
            let _ = writeln!(out, "\n## Baseline\n\n{}", md(&b.line()));
        }
        let _ = writeln!(out, "\n## Requirements\n");
        let _ = writeln!(out, "| requirement | level | verdict | counts as | why |");
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for r in &self.requirements {
            // Details quote the implementation's own answers (an error page, a header): escaped, so they show as
            // text and cannot inject markup into the rendered report.
            let why = if r.status == Status::Pass {
                String::new()
            } else {
                r.details
                    .iter()
                    .filter(|d| !d.contains(" PASS: "))
                    .take(2)
                    .map(|d| md(d))
                    .collect::<Vec<_>>()
                    .join("<br>")
            };
            let verdict = if r.blocked_by.is_empty() {
                r.status.as_str().to_owned()
            } else {
                format!("BLOCKED by {}", r.blocked_by.join(", "))
            };
            let _ = writeln!(
                out,
                "| {} {} | {} | {} | {:?} | {} |",
                r.id,
                md(r.title.as_str()),
                r.level,
                verdict,
                r.outcome,
                why
            );
        }
        out
    }
}

/// Text for a Markdown table cell: HTML-escaped (so `<script>` or `<img>` from an implementation's answer is shown,
/// not rendered), with the characters Markdown gives meaning to escaped and line breaks flattened.
fn md(s: &str) -> String {
    escaped(s, |c, out| match c {
        '|' => out.push_str("\\|"),
        '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '!' => {
            out.push('\\');
            out.push(c);
        }
        '\n' | '\r' => out.push(' '),
        c if c.is_control() => out.push(' '),
        c => out.push(c),
    })
}

/// `s` with the entities HTML and XML both need, every other character written by `other`.
fn escaped(s: &str, other: impl Fn(char, &mut String)) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match html_entity(c) {
            Some(entity) => out.push_str(entity),
            None => other(c, &mut out),
        }
    }
    out
}

/// The entity HTML and XML both need for `c`, if any.
fn html_entity(c: char) -> Option<&'static str> {
    match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        _ => None,
    }
}

fn xml(s: &str) -> String {
    escaped(s, |c, out| match c {
        '\'' => out.push_str("&apos;"),
        c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
        c => out.push(c),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, level: Level, status: Status, outcome: Verdict, detail: &str) -> RequirementResult {
        RequirementResult {
            id: id.to_owned(),
            title: format!("title of {id}"),
            level,
            section: "RFC 0".into(),
            source: "\"...\"".into(),
            applies_when: None,
            status,
            outcome,
            transports: BTreeMap::from([(TransportKind::Http, status)]),
            details: vec![detail.to_owned()],
            evidence: Vec::new(),
            blocked_by: Vec::new(),
        }
    }

    fn report(requirements: Vec<RequirementResult>) -> Report {
        Report {
            kit: "kit".into(),
            spec: "spec".into(),
            target: "http://127.0.0.1:1".into(),
            transports: vec![TransportKind::Http],
            level: LevelFilter::All,
            signing: None,
            ttl_probe_secs: 2,
            implementation: None,
            claims: Claims::default(),
            summary: Summary::of(&requirements),
            profiles: Vec::new(),
            requirements,
            checks: Vec::new(),
            baseline: None,
            elapsed_ms: 1,
        }
    }

    #[test]
    fn markdown_shows_an_implementations_markup_as_text() {
        let hostile = "[http] x FAIL: HTTP 500 text/html \"<script>alert(1)</script><img src=x onerror=y>|col\"";
        let md = report(vec![result("LDP-X-001", Level::Must, Status::Fail, Verdict::Failure, hostile)])
            .render(Format::Markdown);
        assert!(!md.contains("<script>") && !md.contains("<img"), "{md}");
        assert!(md.contains("&lt;script&gt;"), "{md}");
        assert!(md.contains("\\|col"), "{md}");
    }

    #[test]
    fn junit_makes_warnings_and_blocked_requirements_visible() {
        let mut blocked = result("LDP-B-001", Level::Must, Status::Blocked, Verdict::Blocked, "blocked by LDP-A-001");
        blocked.blocked_by = vec!["LDP-A-001".into()];
        let rep = report(vec![
            result("LDP-A-001", Level::Must, Status::Fail, Verdict::Failure, "no session"),
            result("LDP-W-001", Level::Should, Status::Fail, Verdict::Warning, "ids are not UUIDs"),
            blocked,
        ]);
        assert_eq!((rep.summary.failures, rep.summary.warnings, rep.summary.blocked), (1, 1, 1));
        let xml = rep.render(Format::Junit);
        assert!(xml.contains("<property name=\"ldp.warnings\" value=\"1\"/>"), "{xml}");
        assert!(xml.contains("<property name=\"ldp.outcome\" value=\"warning\"/>"), "{xml}");
        assert!(xml.contains("<system-err>WARNING: SHOULD LDP-W-001 FAIL</system-err>"), "{xml}");
        assert!(xml.contains("<skipped message=\"BLOCKED by LDP-A-001\"/>"), "{xml}");
        assert!(xml.contains("failures=\"1\""), "{xml}");
        let table = rep.render(Format::Table);
        assert!(table.contains("BLOCKED") && table.contains("blocked by LDP-A-001"), "{table}");
        assert!(rep.render(Format::Markdown).contains("BLOCKED by LDP-A-001"));
    }
}
