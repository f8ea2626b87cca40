//! The soak driver behind `scripts/soak`: starts a real `ldp serve` per attack, measures a legitimate client alone
//! (the idle baseline), then runs one flood against the server while the same client keeps working, and reports
//! per attack the server's peak RSS, the legitimate client's success rate and its p99 latency against the idle p99.
//!
//! Everything is loopback only and bounded: every attack stops at its deadline, every request has a timeout, and
//! the server processes are killed when the run ends. Attackers connect from `127.0.0.2` so that they are a
//! different network peer from the legitimate client (`127.0.0.1`), as they would be in a real deployment.
//!
//! `--bench-stores` runs the store throughput bench instead (`scripts/store-bench`, module `store_bench`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use ldp_types::signing::{SignatureAlgorithm, SigningKey, sign_value};
use rand::Rng;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpSocket;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;

mod attacks;
mod store_bench;

use attacks::*;

/// Peak RSS allowed under every attack (issue 14).
const RSS_TARGET_MIB: f64 = 512.0;
/// The legitimate client's p99 under attack may be at most this many times its idle p99.
const P99_RATIO_TARGET: f64 = 10.0;
/// The secret of the signed-flood scenario (loopback only; not a real credential).
const SOAK_SECRET: &str = "soak-shared-secret";
/// The delegate id the legitimate client sends from.
const LEGIT_FROM: &str = "ldp:delegate:legit-client";

#[derive(Debug, Parser)]
#[command(
    about = "Floods a real `ldp serve` on loopback while a legitimate client works; prints peak RSS, success and p99"
)]
struct Args {
    /// The `ldp` binary to attack (build it with `cargo build --release -p ldp-cli`).
    #[arg(long, default_value = "target/release/ldp")]
    ldp: PathBuf,
    /// Attacks to run (repeatable): session-flood, ws-nonreading, ws-dropping, slowloris, replay-flood,
    /// from-rotation, victim-lockout, secret-replay-fill.
    #[arg(long = "attack", value_name = "NAME")]
    attacks: Vec<String>,
    /// Seconds each attack lasts.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds of the idle baseline before each attack.
    #[arg(long, default_value_t = 5)]
    idle_seconds: u64,
    /// The server's open-file limit (`ulimit -n`) during the slow-connection attack.
    #[arg(long, default_value_t = 1024)]
    fd_limit: u64,
    /// Sockets the slow-connection attack holds open (more than the fd limit on purpose).
    #[arg(long, default_value_t = 1100)]
    slow_sockets: usize,
    /// Extra flags for every `ldp serve` (e.g. `--extra=--max-sessions=1000`).
    #[arg(long = "extra", value_name = "FLAG", allow_hyphen_values = true)]
    extra: Vec<String>,
    /// Exit 1 when a target is missed.
    #[arg(long)]
    check: bool,
    /// Instead of the attacks: the store throughput bench (`scripts/store-bench`) over these stores, comma-separated
    /// (memory, sqlite, sqlite-full, redis, redis-unix: Redis on its Unix socket).
    #[arg(long, value_name = "STORES", value_delimiter = ',')]
    bench_stores: Vec<String>,
    /// Store bench: concurrent clients (a session and a keep-alive connection each); a comma-separated list runs
    /// the bench at each count in turn (e.g. `32,128`), for throughput at saturation as well as at a fixed load.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    bench_clients: Vec<usize>,
    /// Store bench: rounds over all the stores.
    #[arg(long, default_value_t = 3)]
    bench_rounds: usize,
    /// Store bench: measured seconds per store and round.
    #[arg(long, default_value_t = 8)]
    bench_seconds: u64,
}

const ALL_ATTACKS: [&str; 8] = [
    "session-flood",
    "ws-nonreading",
    "ws-dropping",
    "slowloris",
    "replay-flood",
    "from-rotation",
    "victim-lockout",
    "secret-replay-fill",
];

/// Errors of the soak driver itself (not of the server under test, which are measurements).
#[derive(Debug)]
enum SoakError {
    /// The server could not be started or did not say where it listens.
    Server(String),
    /// The legitimate client could not open its session before the attack.
    Setup(String),
}

impl std::fmt::Display for SoakError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(why) => write!(f, "server: {why}"),
            Self::Setup(why) => write!(f, "set-up: {why}"),
        }
    }
}

/// A running `ldp serve`.
struct Server {
    child: Child,
    pid: u32,
    url: String,
    addr: SocketAddr,
    /// The server's log lines about a limit refusing ("... started refusing", "... still refusing"), the first
    /// [`MAX_REFUSAL_LINES`]: the server's own account of the attack, beside what the attacker saw.
    refusal_lines: Arc<std::sync::Mutex<Vec<String>>>,
}

/// Most refusal log lines kept per server (a limit logs one when it starts refusing, then one per 10 s at most).
const MAX_REFUSAL_LINES: usize = 16;

impl Server {
    async fn start(ldp: &PathBuf, flags: &[String], fd_limit: Option<u64>) -> Result<Self, SoakError> {
        // `ulimit -n` through the shell: the driver itself forbids unsafe code (no setrlimit in pre_exec).
        let limit = fd_limit.map_or_else(String::new, |n| format!("ulimit -n {n} && "));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{limit}exec \"$0\" serve --bind 127.0.0.1:0 \"$@\""))
            .arg(ldp)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SoakError::Server(format!("cannot start {}: {e}", ldp.display())))?;
        let pid = child.id().ok_or_else(|| SoakError::Server("no pid".into()))?;
        let refusal_lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let kept = refusal_lines.clone();
            // Drained to its end as bytes (a line that is not UTF-8 must not stop the draining: a server blocked on
            // a full pipe would measure this driver, not itself).
            tokio::spawn(async move {
                let mut stderr = BufReader::new(stderr);
                let mut line = Vec::new();
                while matches!(stderr.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
                    let text = String::from_utf8_lossy(&line);
                    if text.contains(" refusing")
                        && let Ok(mut kept) = kept.lock()
                        && kept.len() < MAX_REFUSAL_LINES
                    {
                        kept.push(truncate(strip_ansi(&text).trim(), 300).to_owned());
                    }
                    line.clear();
                }
            });
        }
        let stdout = child.stdout.take().ok_or_else(|| SoakError::Server("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let listening = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    return rest.split_whitespace().next().map(str::to_owned);
                }
            }
            None
        })
        .await;
        let url = match listening {
            Ok(Some(url)) => url,
            // Its output ended: it exited (or closed it) before listening, a binary that is not there included.
            Ok(None) => {
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let how = match status {
                    Ok(Ok(status)) => format!("exited ({status})"),
                    _ => "closed its output".to_owned(),
                };
                return Err(SoakError::Server(format!("{} {how} before its 'listening on' line", ldp.display())));
            }
            Err(_) => return Err(SoakError::Server("no 'listening on' line within 20 s".into())),
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr = url
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| SoakError::Server(format!("bad listening address {url}: {e}")))?;
        Ok(Self { child, pid, url, addr, refusal_lines })
    }

    /// The refusal log lines so far.
    fn refusal_lines(&self) -> Vec<String> {
        self.refusal_lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Peak resident set size so far (VmHWM), in MiB.
    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let kib = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        kib / 1024.0
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// `line` without its terminal colour codes (`ESC [ ... m`), which the server's log lines may carry.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip to the end of the escape sequence (a letter), or of the line.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

fn random_id() -> String {
    let n: u128 = rand::rng().random();
    let h = format!("{n:032x}");
    format!("{}-{}-4{}-a{}-{}", &h[0..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32])
}

/// An envelope as a peer would send it; signed when a key is given.
fn envelope(session_id: &str, from: &str, body: Value, key: Option<&SigningKey>) -> Value {
    let mut env = json!({
        "message_id": random_id(),
        "session_id": session_id,
        "from": from,
        "to": "ldp:delegate:echo",
        "body": body,
        "payload_mode": "text",
        "timestamp": now_rfc3339(),
    });
    if let Some(key) = key {
        env["nonce"] = json!(random_id());
        let _ = sign_value(&mut env, key);
    }
    env
}

fn propose_body() -> Value {
    json!({"type": "SESSION_PROPOSE", "config": {"preferred_payload_modes": ["text"], "ttl_secs": 600}})
}

/// The legitimate client: one session, then one small task after another; with `reopen_every`, it also closes its
/// session and proposes a new one every so many tasks.
struct Legit {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    key: Option<SigningKey>,
    session_id: String,
    /// Every this many tasks, a SESSION_CLOSE of the client's session and a SESSION_PROPOSE of a new one (None:
    /// the session opened at set-up serves every task). The attacks on the session table and on a peer's share of
    /// it would go unseen by a client that never proposes again.
    reopen_every: Option<u64>,
}

/// Latencies and outcomes of the legitimate client over one phase: one per request it needed served (a task, and
/// with [`Legit::reopen_every`] a close or a proposal), each after its retries.
#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    first_try_ok: u64,
    eventually_ok: u64,
    failed: u64,
    failures: Vec<String>,
}

impl Phase {
    fn p99_ms(&self) -> f64 {
        percentile_ms(&self.latencies, 0.99)
    }
    fn total(&self) -> u64 {
        self.eventually_ok + self.failed
    }
    fn success_pct(&self) -> f64 {
        if self.total() == 0 { 0.0 } else { 100.0 * self.eventually_ok as f64 / self.total() as f64 }
    }
}

fn percentile_ms(samples: &[Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    let idx = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[idx]
}

enum Attempt {
    /// The answer expected, with its envelope.
    Ok(Value),
    /// A refusal the client may retry (429/503, connection refused), with the wait the server asked for.
    Retry(Duration, String),
    Failed(String),
}

/// One request of the legitimate client.
enum Step<'a> {
    /// A task in this session.
    Task(&'a str),
    /// Closing this session.
    Close(&'a str),
    /// Proposing a new session.
    Propose,
}

impl Step<'_> {
    /// The body type of the answer that means success.
    fn expected(&self) -> &'static str {
        match self {
            Self::Task(_) => "TASK_RESULT",
            Self::Close(_) => "SESSION_CLOSE",
            Self::Propose => "SESSION_ACCEPT",
        }
    }
}

impl Legit {
    async fn open(
        url: &str,
        token: Option<String>,
        key: Option<SigningKey>,
        reopen_every: Option<u64>,
    ) -> Result<Self, SoakError> {
        // A fresh connection per request: the client must get through whatever the attack does to connections.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SoakError::Setup(e.to_string()))?;
        let mut legit = Self { http, url: url.to_owned(), token, key, session_id: String::new(), reopen_every };
        let env = envelope("", LEGIT_FROM, propose_body(), legit.key.as_ref());
        let (status, reply) = legit.post(&env).await.map_err(SoakError::Setup)?;
        match (status, reply["body"]["type"].as_str(), accepted_session(&reply)) {
            (200, Some("SESSION_ACCEPT"), Some(id)) => legit.session_id = id,
            _ => return Err(SoakError::Setup(format!("proposal answered {status}: {reply}"))),
        }
        Ok(legit)
    }

    async fn post(&self, env: &Value) -> Result<(u16, Value), String> {
        let mut req = self.http.post(format!("{}/ldp/messages", self.url)).json(env);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.map_err(|e| format!("send: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(|e| format!("read: {e}"))?;
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }

    /// Sends `step` once (a fresh message id and nonce each time, so that a retry is no replay).
    async fn attempt(&self, step: &Step<'_>, task_id: &str) -> Attempt {
        let env = match step {
            Step::Task(session) => {
                let body = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "echo", "input": "ping"});
                envelope(session, LEGIT_FROM, body, self.key.as_ref())
            }
            Step::Close(session) => envelope(session, LEGIT_FROM, json!({"type": "SESSION_CLOSE"}), self.key.as_ref()),
            Step::Propose => envelope("", LEGIT_FROM, propose_body(), self.key.as_ref()),
        };
        let mut req = self.http.post(format!("{}/ldp/messages", self.url)).json(&env);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Attempt::Retry(Duration::from_millis(100), format!("connect: {e}")),
            Err(e) => return Attempt::Failed(format!("send: {e}")),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(Duration::from_millis(100), |s| Duration::from_secs(s).min(Duration::from_secs(1)));
        let reply: Value = match resp.bytes().await {
            Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
            Err(e) => return Attempt::Failed(format!("read: {e}")),
        };
        match (status, reply["body"]["type"].as_str()) {
            (200, Some(t)) if t == step.expected() => Attempt::Ok(reply),
            (429 | 503, _) => Attempt::Retry(retry_after, format!("{status}")),
            // A SESSION_REJECT, even a retryable one, is a failure: a full table or share must make room for a
            // light source at once, not after the client has waited.
            _ => {
                Attempt::Failed(format!("{} answered {status} {}", step.expected(), truncate(&reply.to_string(), 200)))
            }
        }
    }

    /// Sends `step`, retrying a retryable refusal up to three times; records its latency and outcome in `phase`
    /// and returns the answer when it succeeded.
    async fn request(&self, step: &Step<'_>, phase: &mut Phase) -> Option<Value> {
        let task_id = random_id();
        let start = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match self.attempt(step, &task_id).await {
                Attempt::Ok(reply) => {
                    phase.latencies.push(start.elapsed());
                    phase.eventually_ok += 1;
                    if tries == 1 {
                        phase.first_try_ok += 1;
                    }
                    return Some(reply);
                }
                Attempt::Retry(wait, why) if tries < 4 => {
                    if phase.failures.len() < 5 {
                        phase.failures.push(format!("retried: {why}"));
                    }
                    tokio::time::sleep(wait).await;
                }
                Attempt::Retry(_, why) | Attempt::Failed(why) => {
                    phase.latencies.push(start.elapsed());
                    phase.failed += 1;
                    if phase.failures.len() < 10 {
                        phase.failures.push(why);
                    }
                    return None;
                }
            }
        }
    }

    /// Runs tasks back to back until `deadline`, reopening its session every [`Legit::reopen_every`] tasks.
    async fn run(&self, deadline: Instant) -> Phase {
        let mut phase = Phase::default();
        // A reopening run works in sessions of its own, the first proposed at once: an earlier run may have closed
        // what it used. Only the sessions a run opened are closed; the last one is left to the server's end.
        let mut session = self.session_id.clone();
        let mut own = false;
        let mut tasks = 0u64;
        while Instant::now() < deadline {
            if self.reopen_every.is_some_and(|every| !own || tasks.is_multiple_of(every.max(1))) {
                if own {
                    // Closed or not, it is not used again: a failed close is counted, not retried forever.
                    let _ = self.request(&Step::Close(&session), &mut phase).await;
                    own = false;
                }
                match self.request(&Step::Propose, &mut phase).await.as_ref().and_then(accepted_session) {
                    Some(id) => {
                        session = id;
                        own = true;
                    }
                    // No session: the next step proposes again (after the pause below), and the tasks wait for it.
                    None => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let _ = self.request(&Step::Task(&session), &mut phase).await;
            tasks += 1;
            // A client that works, not a flood: about a hundred tasks a second at most.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        phase
    }
}

/// The session id a SESSION_ACCEPT names.
fn accepted_session(reply: &Value) -> Option<String> {
    reply["body"]["session_id"].as_str().or_else(|| reply["session_id"].as_str()).map(str::to_owned)
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Counters the attackers keep (what the server answered them).
#[derive(Default)]
struct AttackStats {
    sent: AtomicU64,
    /// Of `sent`, the messages the server refused, when the attack counts them ([`AttackStats::counting_refusals`]).
    refused: Option<AtomicU64>,
    by_status: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

impl AttackStats {
    /// Counters that also count the server's refusals, for the attacks on a limit: how many of the attacker's
    /// messages the limit refused shows it working.
    fn counting_refusals() -> Self {
        Self { refused: Some(AtomicU64::new(0)), ..Self::default() }
    }
    fn record(&self, what: impl Into<String>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.by_status.lock() {
            *m.entry(what.into()).or_default() += 1;
        }
    }
    /// Records an answer, and counts it as a refusal when `refused` (an answer nonetheless: not a transport error).
    fn record_answer(&self, what: impl Into<String>, refused: bool) {
        if refused && let Some(n) = &self.refused {
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.record(what);
    }
    fn summary(&self) -> String {
        let m = self.by_status.lock().map(|m| m.clone()).unwrap_or_default();
        let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let sent = self.sent.load(Ordering::Relaxed);
        match &self.refused {
            Some(n) => format!("{sent} sent, {} refused ({})", n.load(Ordering::Relaxed), parts.join(", ")),
            None => format!("{sent} sent ({})", parts.join(", ")),
        }
    }
}

/// What one attack measured.
struct Report {
    attack: String,
    peak_rss_mib: f64,
    idle: Phase,
    attacked: Phase,
    attack_stats: String,
    /// The server's refusal log lines ([`Server::refusal_lines`]).
    server_lines: Vec<String>,
}

impl Report {
    fn ratio(&self) -> f64 {
        self.attacked.p99_ms() / self.idle.p99_ms()
    }
    fn passes(&self) -> bool {
        self.peak_rss_mib <= RSS_TARGET_MIB
            && self.attacked.failed == 0
            && self.attacked.total() > 0
            && self.ratio() <= P99_RATIO_TARGET
    }
}

async fn run_attack(args: &Args, attack: &str) -> Result<Report, SoakError> {
    let mut flags = args.extra.clone();
    let mut fd_limit = None;
    let (token, key) = match attack {
        "replay-flood" => {
            flags.extend(
                ["--sign", "hmac-sha256-jcs", "--secret", SOAK_SECRET]
                    .into_iter()
                    .chain(["--token", "attacker-token=default", "--token", "legit-token=default"])
                    .map(str::to_owned),
            );
            let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SOAK_SECRET)
                .map_err(|e| SoakError::Setup(e.to_string()))?;
            (Some("legit-token".to_owned()), Some(key))
        }
        "slowloris" => {
            fd_limit = Some(args.fd_limit);
            (None, None)
        }
        // A table small enough for a thousand `from` values of a hundred sessions each to fill at once.
        "from-rotation" => {
            flags.extend(["--max-sessions", "2000"].map(str::to_owned));
            (None, None)
        }
        "secret-replay-fill" => {
            // A window of 200,000 and shares of 20,000 rather than the defaults (1,000,000 and 100,000): the
            // attacker sends some 20 thousand signed messages a second on a 2-core machine, so ten `from`-keyed
            // shares would fill this window in about 10 s, within the attack's 20, where the default window would
            // take nearly a minute. No bearer tokens: the attacker and the legitimate client are told apart by
            // their addresses only.
            flags.extend(
                ["--sign", "hmac-sha256-jcs", "--secret", SOAK_SECRET]
                    .into_iter()
                    .chain(["--replay-entries", "200000", "--replay-entries-per-peer", "20000"])
                    .map(str::to_owned),
            );
            let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SOAK_SECRET)
                .map_err(|e| SoakError::Setup(e.to_string()))?;
            (None, Some(key))
        }
        _ => (None, None),
    };
    // An attack on the session table or a source's share of it is only seen by a client that proposes again: these
    // clients close their session and propose a new one every ten tasks (signed in the replay fill, where each of
    // those is a replay entry too), idle as well as attacked, so that the two p99s measure the same work.
    let reopen_every = matches!(attack, "from-rotation" | "victim-lockout" | "secret-replay-fill").then_some(10);
    let server = Server::start(&args.ldp, &flags, fd_limit).await?;
    let legit = Arc::new(Legit::open(&server.url, token, key, reopen_every).await?);
    let idle = on_own_thread(legit.clone(), Instant::now() + Duration::from_secs(args.idle_seconds)).await;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let stats =
        Arc::new(if reopen_every.is_some() { AttackStats::counting_refusals() } else { AttackStats::default() });
    let attacker = {
        let (url, addr, stats, sockets) = (server.url.clone(), server.addr, stats.clone(), args.slow_sockets);
        let attack = attack.to_owned();
        tokio::spawn(async move {
            match attack.as_str() {
                "session-flood" => session_flood(url, deadline, stats).await,
                "ws-nonreading" => ws_nonreading(addr, deadline, stats).await,
                "ws-dropping" => ws_dropping(addr, deadline, stats).await,
                "slowloris" => slowloris(addr, sockets, deadline, stats).await,
                "replay-flood" => replay_flood(url, deadline, stats).await,
                "from-rotation" => from_rotation(url, deadline, stats).await,
                "victim-lockout" => victim_lockout(url, deadline, stats).await,
                "secret-replay-fill" => secret_replay_fill(url, deadline, stats).await,
                _ => {}
            }
        })
    };
    // Let the flood build up before the legitimate client is measured against it.
    tokio::time::sleep(Duration::from_secs(2).min(Duration::from_secs(args.seconds / 4))).await;
    let attacked = on_own_thread(legit, deadline).await;
    // Attackers stop at the deadline; a wedged one is abandoned after a grace period.
    let _ = tokio::time::timeout(Duration::from_secs(15), attacker).await;
    let peak_rss_mib = server.peak_rss_mib();
    let server_lines = server.refusal_lines();
    server.stop().await;
    Ok(Report { attack: attack.to_owned(), peak_rss_mib, idle, attacked, attack_stats: stats.summary(), server_lines })
}

/// Runs the legitimate client on a thread and runtime of its own, so that its latency is the server's answer time
/// and not time spent queued behind the attackers' tasks in this process's runtime.
async fn on_own_thread(legit: Arc<Legit>, deadline: Instant) -> Phase {
    let joined = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        Some(rt.block_on(legit.run(deadline)))
    })
    .await;
    joined.ok().flatten().unwrap_or_else(|| Phase {
        failed: 1,
        failures: vec!["the legitimate client's runtime could not start".into()],
        ..Phase::default()
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if !args.bench_stores.is_empty() {
        if let Err(e) = store_bench::check_stores(&args.bench_stores) {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
        let plan = store_bench::BenchPlan {
            ldp: &args.ldp,
            stores: args.bench_stores.clone(),
            clients: args.bench_clients.iter().map(|&n| n.max(1)).collect(),
            rounds: args.bench_rounds.max(1),
            seconds: args.bench_seconds.max(1),
            extra: args.extra.clone(),
        };
        return match store_bench::run(plan).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("store bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let attacks: Vec<String> = if args.attacks.is_empty() {
        ALL_ATTACKS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.attacks.clone()
    };
    if let Some(bad) = attacks.iter().find(|a| !ALL_ATTACKS.contains(&a.as_str())) {
        eprintln!("soak: unknown attack {bad:?}; known: {}", ALL_ATTACKS.join(", "));
        return ExitCode::from(2);
    }
    println!(
        "soak: {} ({} s idle + {} s attack each), targets: peak RSS <= {RSS_TARGET_MIB} MiB, legitimate success 100%, p99 <= {P99_RATIO_TARGET}x idle",
        args.ldp.display(),
        args.idle_seconds,
        args.seconds
    );
    let mut all_pass = true;
    println!(
        "| attack | peak RSS (MiB) | legitimate ok (first try) | idle p99 (ms) | attack p99 (ms) | ratio | verdict | attacker saw |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for attack in &attacks {
        match run_attack(&args, attack).await {
            Ok(r) => {
                let pass = r.passes();
                all_pass &= pass;
                println!(
                    "| {} | {:.0} | {:.1}% of {} ({}) | {:.2} | {:.2} | {:.1}x | {} | {} |",
                    r.attack,
                    r.peak_rss_mib,
                    r.attacked.success_pct(),
                    r.attacked.total(),
                    r.attacked.first_try_ok,
                    r.idle.p99_ms(),
                    r.attacked.p99_ms(),
                    r.ratio(),
                    if pass { "pass" } else { "MISS" },
                    r.attack_stats
                );
                for f in r.attacked.failures.iter().chain(r.idle.failures.iter()) {
                    eprintln!("soak: {attack}: legitimate client: {f}");
                }
                for line in &r.server_lines {
                    eprintln!("soak: {attack}: server: {line}");
                }
            }
            Err(e) => {
                all_pass = false;
                println!("| {attack} | - | - | - | - | - | ERROR | {e} |");
            }
        }
    }
    if args.check && !all_pass { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::{PathBuf, Server, SoakError};

    /// A server that cannot start is reported at once, with how it ended, rather than after the 20 s wait for its
    /// "listening on" line.
    #[tokio::test]
    async fn a_server_that_exits_before_listening_is_reported_at_once() {
        let started = std::time::Instant::now();
        let missing = PathBuf::from("/nonexistent/ldp");
        let Err(SoakError::Server(why)) = Server::start(&missing, &[], None).await else {
            panic!("a binary that is not there started");
        };
        assert!(why.contains("exited (exit status: 127)"), "{why}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
    }
}
