//! The runner: configuration, per-check timeouts, run order, per-transport aggregation and scoring.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_transport_http::ClientTls;
use ldp_types::signing::SigningKey;
use serde::{Deserialize, Serialize};

use crate::catalogue::{CATALOGUE, Level, SPEC_VERSION};
use crate::checks::CHECKS;
use crate::ctx::{Claims, Ctx, Finding, Status, Validators};
use crate::probe::{Exchange, Probe, TransportKind};
use crate::profiles;
use crate::report::{CheckRun, Evidence, Implementation, Report, RequirementResult, Summary, Verdict};

/// The TTL the kit proposes for the expiry check when the operator gives no `--ttl-hint`.
pub const DEFAULT_TTL_PROBE_SECS: u64 = 2;

/// The deadline of a whole run when the operator gives none.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

/// The size of the oversize message (8 MiB).
pub const DEFAULT_OVERSIZE_BYTES: usize = 8 * 1024 * 1024;

/// Which requirements to run and report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LevelFilter {
    /// MUST and EXTENSION requirements (those whose failure fails the run).
    Must,
    /// MUST, EXTENSION and SHOULD.
    Should,
    /// Everything, MAY included.
    #[default]
    All,
}

impl LevelFilter {
    /// Whether requirements of `level` are selected.
    pub fn includes(self, level: Level) -> bool {
        match self {
            Self::Must => level.is_mandatory(),
            Self::Should => level != Level::May,
            Self::All => true,
        }
    }

    /// The lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Must => "must",
            Self::Should => "should",
            Self::All => "all",
        }
    }
}

impl std::str::FromStr for LevelFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "must" => Ok(Self::Must),
            "should" => Ok(Self::Should),
            "all" => Ok(Self::All),
            other => Err(format!("unknown level {other:?} (expected must, should or all)")),
        }
    }
}

/// What to test and how.
#[derive(Clone)]
pub struct Config {
    /// The implementation's endpoint, e.g. `http://127.0.0.1:8090` (a `ws://` or `wss://` URL, or one ending in
    /// `/ldp/ws`, `/ldp/messages`, `/ldp/stream` or `/.well-known/ldp-identity`, is accepted too).
    pub url: String,
    /// The transports to test; a requirement passes only if it passes on each.
    pub transports: Vec<TransportKind>,
    /// Bearer token for every request.
    pub token: Option<String>,
    /// A bearer token that authenticates the kit as a member of an untrusted domain.
    pub untrusted_token: Option<String>,
    /// The key to sign messages with (`--sign ALG --secret S`).
    pub signing: Option<SigningKey>,
    /// The short TTL (seconds) to propose for the expiry check.
    pub ttl_hint: Option<u64>,
    /// Which requirements to run.
    pub level: LevelFilter,
    /// Timeout of one request.
    pub request_timeout: Duration,
    /// Timeout of one check (a hung check fails its requirements).
    pub check_timeout: Duration,
    /// Deadline of the whole run, over every transport: a hung implementation costs at most this long, not
    /// `check_timeout` times every check. Checks that did not start before it ran out are reported NOT TESTABLE
    /// (the `wire.*` checks, which only read what earlier checks saw, still run).
    pub deadline: Duration,
    /// Size of the oversize message.
    pub oversize_bytes: usize,
    /// For `https://` and `wss://`: CAs trusted beyond the web PKI roots (e.g. the implementation's private CA) and
    /// the client certificate to present when it requires mutual TLS.
    pub tls: ClientTls,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url)
            .field("transports", &self.transports)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("untrusted_token", &self.untrusted_token.as_ref().map(|_| "<redacted>"))
            .field("signing", &self.signing.as_ref().map(SigningKey::algorithm))
            .field("ttl_hint", &self.ttl_hint)
            .field("level", &self.level)
            .field("request_timeout", &self.request_timeout)
            .field("check_timeout", &self.check_timeout)
            .field("deadline", &self.deadline)
            .field("oversize_bytes", &self.oversize_bytes)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Config {
    /// Defaults: HTTP, no token, no signing, all levels, 10 s per request, 60 s per check, 300 s for the whole run
    /// ([`DEFAULT_DEADLINE`]), 8 MiB oversize.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            transports: vec![TransportKind::Http],
            token: None,
            untrusted_token: None,
            signing: None,
            ttl_hint: None,
            level: LevelFilter::All,
            request_timeout: Duration::from_secs(10),
            check_timeout: Duration::from_secs(60),
            deadline: DEFAULT_DEADLINE,
            oversize_bytes: DEFAULT_OVERSIZE_BYTES,
            tls: ClientTls::default(),
        }
    }
}

/// Why a run could not be made (exit code 2 of the CLI).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The implementation could not be reached at all.
    #[error("cannot reach {url} over {transport}: {reason}")]
    Connection {
        /// The URL tried.
        url: String,
        /// The transport.
        transport: TransportKind,
        /// What failed.
        reason: String,
    },
}

/// Progress of a run, for a live display.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ProgressEvent {
    /// A check starts.
    CheckStarted {
        /// The transport.
        transport: TransportKind,
        /// 1-based position among this transport's checks.
        index: usize,
        /// Number of checks on this transport.
        total: usize,
        /// The check id.
        check: &'static str,
    },
    /// A check finished.
    CheckFinished {
        /// The transport.
        transport: TransportKind,
        /// 1-based position.
        index: usize,
        /// Number of checks on this transport.
        total: usize,
        /// The check id.
        check: &'static str,
        /// Its worst verdict.
        status: Status,
        /// How long it took.
        elapsed: Duration,
    },
}

/// Normalises the URL to the base endpoint (`http(s)://host:port[/prefix]`).
pub fn base_url(url: &str) -> Result<String, RunError> {
    let mut u = url.trim().trim_end_matches('/').to_owned();
    if let Some(rest) = u.strip_prefix("ws://") {
        u = format!("http://{rest}");
    } else if let Some(rest) = u.strip_prefix("wss://") {
        u = format!("https://{rest}");
    }
    for suffix in ["/ldp/ws", "/ldp/messages", "/ldp/stream", "/.well-known/ldp-identity"] {
        if let Some(s) = u.strip_suffix(suffix) {
            u = s.to_owned();
        }
    }
    if !(u.starts_with("http://") || u.starts_with("https://")) {
        return Err(RunError::Config(format!("{url:?} is not an http(s) or ws(s) URL")));
    }
    reqwest::Url::parse(&u).map_err(|e| RunError::Config(format!("{url:?}: {e}")))?;
    Ok(u)
}

/// One check's run on one transport.
pub(crate) struct RawRun {
    pub check: &'static str,
    pub transport: TransportKind,
    pub findings: Vec<Finding>,
    pub evidence: Vec<Exchange>,
    pub elapsed: Duration,
    pub timed_out: bool,
}

/// Runs the kit.
pub async fn run(config: Config) -> Result<Report, RunError> {
    run_with_progress(config, &|_| {}).await
}

/// Runs the kit, reporting progress.
pub async fn run_with_progress(
    config: Config,
    progress: &(dyn Fn(&ProgressEvent) + Send + Sync),
) -> Result<Report, RunError> {
    let started = Instant::now();
    let base = base_url(&config.url)?;
    if config.transports.is_empty() {
        return Err(RunError::Config("no transport selected".into()));
    }
    let validators = Arc::new(Validators::new().map_err(RunError::Config)?);
    let cfg = Arc::new(config);
    let selected = |id: &str| crate::catalogue::requirement(id).is_some_and(|r| cfg.level.includes(r.level));
    let checks: Vec<_> = CHECKS.iter().filter(|c| c.requirements.iter().any(|r| selected(r))).collect();
    let mut transports = cfg.transports.clone();
    transports.dedup();

    let mut runs = Vec::new();
    let mut claims = Claims::default();
    let mut implementation = None;
    for &kind in &transports {
        let mut probe = Probe::new(kind, &base, cfg.token.clone(), cfg.request_timeout, &cfg.tls)
            .map_err(|e| RunError::Config(e.to_string()))?;
        let (_, preflight) = probe.get("/.well-known/ldp-identity").await;
        if let Err(reason) = preflight {
            return Err(RunError::Connection { url: base.clone(), transport: kind, reason });
        }
        if let Err(reason) = probe.connect().await {
            return Err(RunError::Connection { url: base.clone(), transport: kind, reason });
        }
        let mut ctx = Ctx::new(cfg.clone(), probe, validators.clone());
        let total = checks.len();
        for (i, check) in checks.iter().enumerate() {
            let index = i + 1;
            progress(&ProgressEvent::CheckStarted { transport: kind, index, total, check: check.id });
            ctx.check = check.id;
            ctx.findings.clear();
            ctx.evidence.clear();
            let start = Instant::now();
            let remaining = cfg.deadline.saturating_sub(started.elapsed());
            let reads_only = check.id.starts_with("wire.");
            let mut findings = Vec::new();
            let mut timed_out = false;
            if remaining.is_zero() && !reads_only {
                for r in check.requirements {
                    findings.push(Finding {
                        requirement: (*r).to_owned(),
                        status: Status::NotTestable,
                        detail: format!("not run: the run's deadline ({} s) ran out", cfg.deadline.as_secs()),
                        blocked_by: None,
                    });
                }
            } else {
                let per_check = cfg.check_timeout + Duration::from_secs(cfg.ttl_hint.unwrap_or(DEFAULT_TTL_PROBE_SECS));
                // The reading checks take no time; they always get their own short bound.
                let limit = if reads_only { per_check } else { per_check.min(remaining) };
                timed_out = tokio::time::timeout(limit, (check.run)(&mut ctx)).await.is_err();
                findings = std::mem::take(&mut ctx.findings);
                if timed_out {
                    ctx.probe.reset();
                    ctx.sign_outgoing = true;
                    let why = if limit < per_check {
                        format!(
                            "the run's deadline ({} s) ran out during the check (a request hung)",
                            cfg.deadline.as_secs()
                        )
                    } else {
                        format!("the check did not finish within {} s (a request hung)", limit.as_secs())
                    };
                    for r in check.requirements {
                        findings.push(Finding {
                            requirement: (*r).to_owned(),
                            status: Status::Fail,
                            detail: why.clone(),
                            blocked_by: None,
                        });
                    }
                }
            }
            // A check may give no verdict on a requirement another check judges (a trust refusal's category cannot
            // be judged when there was no refusal); a requirement no check judged is NOT TESTABLE (`aggregate`).
            findings.retain(|f| selected(&f.requirement));
            let worst = findings.iter().map(|f| f.status).fold(Status::Skipped, worst_of);
            let elapsed = start.elapsed();
            progress(&ProgressEvent::CheckFinished {
                transport: kind,
                index,
                total,
                check: check.id,
                status: worst,
                elapsed,
            });
            runs.push(RawRun {
                check: check.id,
                transport: kind,
                findings,
                evidence: std::mem::take(&mut ctx.evidence),
                elapsed,
                timed_out,
            });
        }
        for (f, why) in &ctx.claims.features {
            claims.claim(*f, why.clone());
        }
        if implementation.is_none() {
            implementation = ctx.card.as_ref().map(Implementation::from_card);
        }
    }

    let requirements = aggregate(&runs, &transports, &claims, cfg.level);
    let summary = Summary::of(&requirements);
    let profiles = profiles::evaluate(&requirements);
    let checks = runs
        .iter()
        .map(|r| CheckRun {
            check: r.check.to_owned(),
            transport: r.transport,
            elapsed_ms: u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
            timed_out: r.timed_out,
        })
        .collect();
    Ok(Report {
        kit: format!("ldp-conformance {}", env!("CARGO_PKG_VERSION")),
        spec: SPEC_VERSION.to_owned(),
        target: base,
        transports,
        level: cfg.level,
        signing: cfg.signing.as_ref().map(|k| k.algorithm().as_str().to_owned()),
        ttl_probe_secs: cfg.ttl_hint.unwrap_or(DEFAULT_TTL_PROBE_SECS),
        implementation,
        claims,
        summary,
        profiles,
        requirements,
        checks,
        baseline: None,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Orders verdicts for a progress display: fail > not testable > pass > skipped.
fn worst_of(a: Status, b: Status) -> Status {
    a.combine(b)
}

/// Combines the findings of every check and transport into one result per selected requirement, and scores it.
pub(crate) fn aggregate(
    runs: &[RawRun],
    transports: &[TransportKind],
    claims: &Claims,
    level: LevelFilter,
) -> Vec<RequirementResult> {
    let mut out = Vec::new();
    for req in CATALOGUE.iter().filter(|r| level.includes(r.level)) {
        let mut per_transport: BTreeMap<TransportKind, Status> = BTreeMap::new();
        let mut details = Vec::new();
        let mut evidence = Vec::new();
        let mut blocked_by: Vec<String> = Vec::new();
        for run in runs.iter().filter(|r| req.checks.contains(&r.check)) {
            let mut any = false;
            for f in run.findings.iter().filter(|f| f.requirement == req.id) {
                any = true;
                let entry = per_transport.entry(run.transport).or_insert(f.status);
                *entry = entry.combine(f.status);
                details.push(format!("[{}] {} {}: {}", run.transport, run.check, f.status.as_str(), f.detail));
                if let Some(cause) = &f.blocked_by
                    && !blocked_by.contains(cause)
                {
                    blocked_by.push(cause.clone());
                }
            }
            if any && !run.evidence.is_empty() {
                evidence.push(Evidence {
                    check: run.check.to_owned(),
                    transport: run.transport,
                    exchanges: run.evidence.clone(),
                });
            }
        }
        for t in transports {
            if !per_transport.contains_key(t) {
                per_transport.insert(*t, Status::NotTestable);
                details.push(format!("[{t}] no check reached a verdict"));
            }
        }
        let mut status = per_transport.values().copied().reduce(Status::combine).unwrap_or(Status::NotTestable);
        let binding_absent = req.binding().is_some_and(|b| !transports.contains(&b));
        if let Some(b) = req.binding().filter(|_| binding_absent) {
            status = Status::Skipped;
            for s in per_transport.values_mut() {
                *s = Status::Skipped;
            }
            details.insert(0, format!("not applicable: the run does not include the {b} binding"));
        } else if let Some(feature) = req.applies_when {
            match claims.features.get(&feature) {
                None => {
                    status = Status::Skipped;
                    for s in per_transport.values_mut() {
                        *s = Status::Skipped;
                    }
                    details.insert(0, format!("skipped: the implementation does not claim {feature}"));
                }
                Some(why) if status == Status::Skipped => {
                    status = Status::NotTestable;
                    for s in per_transport.values_mut() {
                        *s = Status::NotTestable;
                    }
                    details.insert(0, format!("{feature} is claimed ({why}) but the kit could not exercise it"));
                }
                Some(_) => {}
            }
        }
        if status != Status::Blocked {
            blocked_by.clear();
        }
        let outcome = match status {
            Status::Pass => Verdict::Pass,
            Status::Skipped => Verdict::Skipped,
            Status::Blocked => Verdict::Blocked,
            Status::Fail | Status::NotTestable => failure_at(req.level),
        };
        out.push(RequirementResult {
            id: req.id.to_owned(),
            title: req.title.to_owned(),
            level: req.level,
            section: req.section.to_owned(),
            source: req.source.to_owned(),
            applies_when: req.applies_when,
            status,
            outcome,
            transports: per_transport,
            details,
            evidence,
            blocked_by,
        });
    }
    resolve_blocked(&mut out);
    out
}

/// How a requirement that failed or was not testable counts at `level`.
fn failure_at(level: Level) -> Verdict {
    match level {
        Level::Must | Level::Extension => Verdict::Failure,
        Level::Should => Verdict::Warning,
        Level::May => Verdict::Info,
    }
}

/// How much an outcome weighs: a blocked requirement is only excused by a cause that weighs at least as much as
/// its own failure would (a failed SHOULD cannot excuse an untested MUST, or the run would pass without it).
fn weight(outcome: Verdict) -> u8 {
    match outcome {
        Verdict::Failure => 3,
        Verdict::Warning => 2,
        Verdict::Info => 1,
        Verdict::Pass | Verdict::Skipped | Verdict::Blocked => 0,
    }
}

/// A BLOCKED requirement stays blocked (the failure is charged to its cause, not counted again) only when a cause
/// it names failed at least as heavily as it would; otherwise the kit simply could not test it: NOT TESTABLE.
fn resolve_blocked(results: &mut [RequirementResult]) {
    let weights: BTreeMap<String, u8> = results.iter().map(|r| (r.id.clone(), weight(r.outcome))).collect();
    for r in results.iter_mut().filter(|r| r.status == Status::Blocked) {
        let own = weight(failure_at(r.level));
        let excused = r.blocked_by.iter().any(|c| weights.get(c).is_some_and(|w| *w >= own));
        if excused {
            continue;
        }
        let causes = r.blocked_by.join(", ");
        r.details.insert(0, format!("not testable: blocked by {causes}, which did not fail as a {}", r.level));
        r.blocked_by.clear();
        r.status = Status::NotTestable;
        r.outcome = failure_at(r.level);
        for s in r.transports.values_mut() {
            if *s == Status::Blocked {
                *s = Status::NotTestable;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(requirement: &str, status: Status, blocked_by: Option<&str>) -> Finding {
        Finding {
            requirement: requirement.to_owned(),
            status,
            detail: "d".into(),
            blocked_by: blocked_by.map(str::to_owned),
        }
    }

    fn raw(check: &'static str, findings: Vec<Finding>) -> RawRun {
        RawRun {
            check,
            transport: TransportKind::Http,
            findings,
            evidence: Vec::new(),
            elapsed: Duration::ZERO,
            timed_out: false,
        }
    }

    #[test]
    fn a_requirement_blocked_by_a_failure_is_not_a_second_failure() {
        let runs = [
            raw("session.lifecycle", vec![finding("LDP-SESS-001", Status::Fail, None)]),
            raw("session.closed", vec![finding("LDP-SESS-003", Status::Blocked, Some("LDP-SESS-001"))]),
        ];
        let results = aggregate(&runs, &[TransportKind::Http], &Claims::default(), LevelFilter::All);
        let get = |id: &str| results.iter().find(|r| r.id == id).unwrap();
        assert_eq!(get("LDP-SESS-001").outcome, Verdict::Failure);
        let closed = get("LDP-SESS-003");
        assert_eq!((closed.status, closed.outcome), (Status::Blocked, Verdict::Blocked));
        assert_eq!(closed.blocked_by, vec!["LDP-SESS-001".to_owned()]);
        assert_eq!(Summary::of(&results).blocked, 1);
    }

    #[test]
    fn a_requirement_blocked_by_a_cause_that_did_not_fail_is_not_testable() {
        // The cause passed (the establishing check got its session, a later one did not): nothing excuses it.
        let runs = [
            raw("session.lifecycle", vec![finding("LDP-SESS-001", Status::Pass, None)]),
            raw("session.closed", vec![finding("LDP-SESS-003", Status::Blocked, Some("LDP-SESS-001"))]),
        ];
        let results = aggregate(&runs, &[TransportKind::Http], &Claims::default(), LevelFilter::All);
        let closed = results.iter().find(|r| r.id == "LDP-SESS-003").unwrap();
        assert_eq!((closed.status, closed.outcome), (Status::NotTestable, Verdict::Failure));
        assert!(closed.blocked_by.is_empty());
        assert!(closed.details[0].contains("did not fail"), "{:?}", closed.details);
        // A failed SHOULD cannot excuse an untested MUST.
        let runs = [
            raw("wire.envelopes", vec![finding("LDP-ENV-004", Status::Fail, None)]),
            raw("session.closed", vec![finding("LDP-SESS-003", Status::Blocked, Some("LDP-ENV-004"))]),
        ];
        let results = aggregate(&runs, &[TransportKind::Http], &Claims::default(), LevelFilter::All);
        let closed = results.iter().find(|r| r.id == "LDP-SESS-003").unwrap();
        assert_eq!(closed.outcome, Verdict::Failure);
    }

    #[test]
    fn any_endpoint_url_of_an_implementation_names_its_base() {
        for url in [
            "http://h:1",
            "http://h:1/",
            "ws://h:1/ldp/ws",
            "http://h:1/ldp/messages",
            "http://h:1/ldp/stream",
            "http://h:1/.well-known/ldp-identity",
        ] {
            assert_eq!(base_url(url).unwrap(), "http://h:1", "{url}");
        }
        assert_eq!(base_url("wss://h/ldp/ws").unwrap(), "https://h");
        for bad in ["ftp://h", "h:1", "http://"] {
            assert!(matches!(base_url(bad), Err(RunError::Config(_))), "{bad}");
        }
    }
}
