//! `ldp demo`: the whole protocol in one command, on loopback, with no external service. Two delegates with
//! different identity cards start in-process over HTTP; a client runs HELLO through SESSION_CLOSE and shows
//! provenance, a payload-mode fallback, a `fail_closed` contract violation, an untrusted domain and a replay.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ldp::config::{ServerConfig, SigningAlgorithm};
use ldp_session::runtime::{Client, Delegate, EchoDelegate, InitiatorDriver, Submission, TaskContext, Transport};
use ldp_session::{
    Initiator, InitiatorConfig, SecurityConfig, SeededIds, SessionError, SystemClock, TaskOutput, TaskRequest,
};
use ldp_transport_http::HttpTransport;
use ldp_transport_ws::{WsOptions, WsTransport};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{
    Body, Budget, Capability, ClaimType, ContractPolicy, DelegateId, DelegationContract, Envelope, FailurePolicy,
    IdentityCard, LdpError, PayloadMode, Score, SessionConfig, TrustDomain, VerificationStatus, codes,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const ROUTER: &str = "ldp:delegate:router";

/// Arguments of `ldp demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The transport the client uses; the delegates serve both on one port.
    #[arg(long, value_enum, default_value = "http")]
    pub transport: TransportKind,
    /// Instead of the in-process tour, tour the LLM delegate at this URL (e.g. `ldp serve --backend ...`): a
    /// conversation of two turns, provenance from the model, and a fail_closed token budget that stops it.
    #[arg(long, value_name = "URL")]
    pub llm: Option<String>,
    /// With --llm: the skill to call.
    #[arg(long, value_name = "NAME", default_value = "chat", requires = "llm")]
    pub llm_skill: String,
}

/// The client's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportKind {
    /// `POST /ldp/messages` (and SSE).
    Http,
    /// One WebSocket connection (`/ldp/ws`).
    Ws,
}

/// The analyst: `summarize` works on semantic frames and text; `classify` has no frame parser and fails in
/// `semantic_frame` mode with PAYLOAD_MODE_FAILED, which makes the session fall back to text (RFC 4.3).
struct Analyst;

#[async_trait]
impl Delegate for Analyst {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let input: Value = task.input.parse().map_err(|e| LdpError::from(&e))?;
        let text = match &input {
            Value::String(s) => s.clone(),
            Value::Object(o) => o.get("input").and_then(Value::as_str).unwrap_or_default().to_owned(),
            other => other.to_string(),
        };
        let output = match task.skill.as_str() {
            "classify" if task.payload_mode == PayloadMode::SemanticFrame => {
                return Err(LdpError::capability(
                    codes::PAYLOAD_MODE_FAILED,
                    "classify cannot read semantic frames; send text",
                ));
            }
            "classify" => json!({ "label": if text.contains("fast") { "performance" } else { "other" } }),
            _ => {
                let words: Vec<&str> = text.split_whitespace().collect();
                json!({ "summary": words.iter().take(6).copied().collect::<Vec<_>>().join(" ") + " …",
                        "words": words.len() })
            }
        };
        let mut out = TaskOutput::new(output);
        out.confidence = Score::new(0.92).ok();
        out.tokens_used = Some(120);
        out.cost_usd = Some(0.0004);
        out.verification_status = VerificationStatus::SelfVerified;
        Ok(out)
    }
}

fn analyst_card() -> Result<IdentityCard, String> {
    let id = DelegateId::new("ldp:delegate:analyst").map_err(|e| e.to_string())?;
    let mut card = IdentityCard::new(id, "Analyst", "qwen", "qwen3-8b");
    card.context_window = 32_768;
    card.trust_domain = TrustDomain::new("research.internal");
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    let score = Score::new(0.85).map_err(|e| e.to_string())?;
    card.capabilities = vec![
        Capability::new("summarize").with_quality(score, ClaimType::SelfClaimed).with_latency_p50_ms(900),
        Capability::new("classify"),
    ];
    Ok(card)
}

fn vault_card() -> Result<IdentityCard, String> {
    let id = DelegateId::new("ldp:delegate:vault").map_err(|e| e.to_string())?;
    let mut card = IdentityCard::new(id, "Vault", "llama", "llama-3.1-70b");
    card.context_window = 131_072;
    card.trust_domain = TrustDomain::new("research.internal");
    card.capabilities = vec![Capability::new("echo")];
    Ok(card)
}

/// The vault's shared secret (`hmac-sha256-jcs`), which the demo's signing client holds too.
const VAULT_SECRET: &str = "demo-shared-secret";

fn vault_key() -> Result<SigningKey, String> {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, VAULT_SECRET).map_err(|e| e.to_string())
}

/// A delegate serving HTTP and WebSocket on one loopback port: the library's server, as `ldp serve` runs it.
async fn start(
    card: IdentityCard,
    delegate: Arc<dyn Delegate>,
    configure: impl FnOnce(&mut ServerConfig),
) -> Result<ldp::Server, String> {
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".to_owned();
    configure(&mut config);
    ldp::Server::start_with(config, card, delegate).await.map_err(|e| format!("cannot start a delegate: {e}"))
}

/// Prints every exchange as `→ TYPE` / `← TYPE`, and keeps the last envelope sent.
struct Traced {
    inner: Box<dyn Transport>,
    url: String,
    last_sent: Mutex<Option<Envelope>>,
}

fn describe(env: &Envelope) -> String {
    let mut s = format!("{:<19}", env.body.type_name());
    match &env.body {
        Body::Hello(h) => {
            let _ = write!(s, " from {}, modes {}", h.delegate_id, modes(&h.supported_modes));
        }
        Body::CapabilityManifest(m) => {
            let m = ldp_types::Manifest::from_value(&m.capabilities);
            let _ = write!(s, " skills [{}], modes {}", m.skills.join(", "), modes(&m.supported_modes));
        }
        Body::SessionPropose(p) => {
            let domain = p.config.trust_domain.as_deref().unwrap_or("-");
            let _ = write!(s, " declared domain {domain}, ttl {} s", p.config.ttl_secs());
        }
        Body::SessionAccept(a) => {
            let fallback = modes(a.fallback_chain.as_deref().unwrap_or_default());
            let _ = write!(s, " session {}…, mode {}, fallback {fallback}", short(&a.session_id), a.negotiated_mode);
        }
        Body::SessionReject(r) => {
            let code = r.error.as_ref().map(|e| format!("{}: ", e.code)).unwrap_or_default();
            let _ = write!(s, " {code}{}", r.reason);
        }
        Body::TaskSubmit(t) => {
            let contract = if t.contract.is_some() { ", with contract" } else { "" };
            let _ = write!(s, " skill {}, mode {}{contract}, input {}", t.skill, env.payload_mode, clip(&t.input));
        }
        Body::TaskResult(r) => {
            let _ = write!(s, " output {}", clip(&r.output));
        }
        Body::TaskFailed(f) => {
            let _ = write!(s, " {} ({}): {}", f.error.code, f.error.category, f.error.message);
        }
        Body::SessionClose(c) => {
            let _ = write!(s, " {}", c.reason.as_deref().unwrap_or(""));
        }
        _ => {}
    }
    if let Some(alg) = &env.signature_algorithm {
        let _ = write!(s, "  [signed {alg}]");
    }
    s
}

fn modes(m: &[PayloadMode]) -> String {
    format!("[{}]", m.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", "))
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn clip(v: &impl std::fmt::Display) -> String {
    let s = v.to_string();
    if s.chars().count() > 70 { s.chars().take(69).collect::<String>() + "…" } else { s }
}

#[async_trait]
impl Transport for Traced {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        let card = self.inner.identity().await?;
        println!("  GET {}/.well-known/ldp-identity", self.url);
        println!(
            "  ✔ {} \"{}\" ({} {}), trust domain {}, context {} tokens",
            card.delegate_id.as_str(),
            card.name,
            card.model_family,
            card.model_version,
            card.trust_domain.name,
            card.context_window
        );
        Ok(card)
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        println!("  → {}", describe(envelope));
        if let Ok(mut last) = self.last_sent.lock() {
            *last = Some(envelope.clone());
        }
        let reply = self.inner.exchange(envelope, updates).await;
        match &reply {
            Ok(Some(reply)) => match Envelope::from_slice(reply) {
                Ok(env) => println!("  ← {}", describe(&env)),
                Err(e) => println!("  ← (unreadable reply: {e})"),
            },
            Ok(None) => println!("  ← (accepted, no reply)"),
            Err(e) => println!("  ← ✘ {} ({}): {}", e.code, e.category, e.message),
        }
        reply
    }
    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        self.inner.attach(driver);
    }
}

async fn traced(url: &str, kind: TransportKind) -> Result<Traced, String> {
    // The one line that picks the transport.
    let inner: Box<dyn Transport> = match kind {
        TransportKind::Http => Box::new(HttpTransport::new(url).map_err(|e| e.to_string())?),
        TransportKind::Ws => {
            Box::new(WsTransport::connect(url, WsOptions::default()).await.map_err(|e| e.to_string())?)
        }
    };
    Ok(Traced { inner, url: url.to_owned(), last_sent: Mutex::new(None) })
}

async fn connect(url: &str, cfg: InitiatorConfig, kind: TransportKind) -> Result<Client<Traced>, String> {
    Client::connect(traced(url, kind).await?, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
        .await
        .map_err(|e| format!("connect: {e}"))
}

fn section(n: usize, title: &str) {
    println!("\n━━ {n}. {title} {}", "━".repeat(70usize.saturating_sub(title.len())));
}

/// POSTs raw bytes and returns the status and the decoded reply.
async fn post_raw(http: &reqwest::Client, url: &str, body: Vec<u8>) -> Result<(u16, Value), String> {
    let resp = http
        .post(format!("{url}/ldp/messages"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let value = resp.json::<Value>().await.map_err(|e| e.to_string())?;
    Ok((status, value))
}

fn reply_line(status: u16, v: &Value) -> String {
    match Envelope::from_value(v.clone()) {
        Ok(env) => format!("HTTP {status}  {}", describe(&env)),
        Err(_) => format!("HTTP {status}  {v}"),
    }
}

async fn run_demo(kind: TransportKind) -> Result<(), String> {
    let over = if kind == TransportKind::Ws { "WebSocket" } else { "HTTP" };
    println!("LDP demo: delegates on loopback, speaking LDP over {over} (no external service).");

    section(1, "Two delegates start, each with its own identity card");
    let analyst = start(analyst_card()?, Arc::new(Analyst), |_| {}).await?;
    let vault = start(vault_card()?, Arc::new(EchoDelegate), |config| {
        config.signing.algorithm = Some(SigningAlgorithm::HmacSha256Jcs);
        config.signing.secret = Some(VAULT_SECRET.to_owned());
    })
    .await?;
    println!("  ✔ ldp:delegate:analyst  {}  research.internal, modes [semantic_frame, text]", &analyst.url());
    println!(
        "  ✔ ldp:delegate:vault    {}  research.internal, hmac-sha256-jcs signatures + replay guard",
        &vault.url()
    );

    section(2, "Discovery and handshake: router → analyst");
    let mut cfg = InitiatorConfig::new(ROUTER);
    cfg.trust_domain = Some("research.internal".into());
    let client = connect(&analyst.url(), cfg, kind).await?;
    let session = client.propose(SessionConfig::default()).await.map_err(|e| format!("propose: {e}"))?;
    println!("  ✔ session active, mode {}", session.mode);

    section(3, "A task, and the provenance that comes with its result");
    let frame = json!({ "task_type": "summarization", "instruction": "Summarize the design note",
                        "input": "The new cache layer makes reads fast and keeps writes consistent across regions" });
    let out = client.submit(&session.session_id, "summarize", frame, None).await.map_err(|e| e.to_string())?;
    let p = &out.provenance;
    println!("  provenance:");
    println!("    produced_by          {}", p.produced_by);
    println!("    model_version        {}", p.model_version);
    println!("    payload_mode_used    {}", p.payload_mode_used);
    println!("    confidence           {}", p.confidence.map_or("-".into(), |c| format!("{:.2}", c.get())));
    println!("    verification_status  {}", p.verification_status());
    println!("    tokens_used          {}", p.tokens_used.map_or("-".into(), |t| t.to_string()));
    println!("    session_id           {}…", short(p.session_id.as_deref().unwrap_or("")));
    println!("    timestamp            {}", p.timestamp.as_deref().unwrap_or("-"));

    section(4, "Payload-mode fallback (RFC 4.3): classify cannot read frames");
    let frame = json!({ "task_type": "classification", "instruction": "Label this note", "input": "reads are fast" });
    let out = client.submit(&session.session_id, "classify", frame, None).await.map_err(|e| e.to_string())?;
    for (from, to) in &out.fallbacks {
        println!("  ✔ fell back {from} → {to}; the session goes on in {to}, output {}", out.output);
    }

    section(5, "A fail_closed contract: budget 50 tokens, the delegate reports 120");
    let mut contract = DelegationContract::new("contract-7", "Summarize within budget");
    contract.policy = ContractPolicy {
        failure_policy: FailurePolicy::FailClosed,
        budget: Some(Budget { max_tokens: Some(50), max_cost_usd: None }),
        ..Default::default()
    };
    match client.submit(&session.session_id, "summarize", json!("A short note on budgets"), Some(contract)).await {
        Err(SessionError::Peer(e)) => {
            println!("  ✘ refused by the contract check: {} ({}, {}): {}", e.code, e.category, e.severity, e.message);
            if let Some(partial) = &e.partial_output {
                println!("    partial_output kept for the caller: {partial}");
            }
        }
        other => return Err(format!("expected a contract violation, got {other:?}")),
    }

    section(6, "An untrusted domain is rejected at establishment (RFC 7.2)");
    let mut stranger = InitiatorConfig::new("ldp:delegate:stranger");
    stranger.trust_domain = Some("unknown.example".into());
    let mut initiator =
        Initiator::new(stranger, "ldp:delegate:analyst", Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let propose = initiator.propose(SessionConfig::default());
    println!("  → {}  (from ldp:delegate:stranger)", describe(&propose));
    let http = reqwest::Client::new();
    let (status, reply) = post_raw(&http, &analyst.url(), propose.to_vec().map_err(|e| e.to_string())?).await?;
    println!("  ← {}", reply_line(status, &reply));

    section(7, "A replay is rejected (vault signs and checks every message)");
    let mut cfg = InitiatorConfig::new(ROUTER);
    cfg.security = SecurityConfig::symmetric(vault_key()?);
    let signed = connect(&vault.url(), cfg, kind).await?;
    let vs = signed.propose(SessionConfig::default()).await.map_err(|e| format!("propose: {e}"))?;
    signed.submit(&vs.session_id, "echo", json!("transfer 10 credits"), None).await.map_err(|e| e.to_string())?;
    let captured = signed.transport().last_sent.lock().ok().and_then(|l| l.clone()).ok_or("nothing was sent")?;
    println!("  an eavesdropper resends the captured TASK_SUBMIT, byte for byte:");
    let (status, reply) = post_raw(&http, &vault.url(), captured.to_vec().map_err(|e| e.to_string())?).await?;
    println!("  ← {}", reply_line(status, &reply));
    signed.close(&vs.session_id).await.map_err(|e| e.to_string())?;

    section(8, "Closing the session");
    client.close(&session.session_id).await.map_err(|e| e.to_string())?;
    let mut late = InitiatorConfig::new(ROUTER);
    late.trust_domain = Some("research.internal".into());
    println!("  a late TASK_SUBMIT on the closed session:");
    let mut initiator =
        Initiator::new(late, "ldp:delegate:analyst", Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let mut env = initiator.propose(SessionConfig::default());
    env.session_id.clone_from(&session.session_id);
    env.body = Body::TaskSubmit(ldp_types::TaskSubmit::new("late-1".into(), "summarize".into(), json!("hi"), None));
    let (status, reply) = post_raw(&http, &analyst.url(), env.to_vec().map_err(|e| e.to_string())?).await?;
    println!("  ← {}", reply_line(status, &reply));

    analyst.shutdown().await.map_err(|e| e.to_string())?;
    vault.shutdown().await.map_err(|e| e.to_string())?;
    println!("\n✔ demo complete: HELLO → SESSION_CLOSE over {over}, provenance, fallback, contract, trust, replay.");
    Ok(())
}

fn print_provenance(p: &ldp_types::Provenance) {
    println!(
        "    provenance: model_version {}, tokens_used {}, cost_usd {}, confidence {}",
        p.model_version,
        p.tokens_used.map_or("-".into(), |t| t.to_string()),
        p.cost_usd.map_or("-".into(), |c| format!("{c:.6}")),
        p.confidence.map_or("unset".into(), |c| format!("{:.2}", c.get()))
    );
}

/// The tour of an LLM delegate: discovery, a two-turn conversation, provenance, a budget stop, close.
async fn run_llm_tour(url: &str, skill: &str, kind: TransportKind) -> Result<(), String> {
    println!("LDP demo: the LLM delegate at {url}.");
    section(1, "Discovery and handshake");
    let mut cfg = InitiatorConfig::new(ROUTER);
    cfg.trust_domain = Some("default".into());
    let client = connect(url, cfg, kind).await?;
    if !client.card().capabilities.iter().any(|c| c.name == skill) {
        return Err(format!("the delegate has no skill {skill:?} (try --llm-skill)"));
    }
    let session = client.propose(SessionConfig::default()).await.map_err(|e| format!("propose: {e}"))?;
    println!("  ✔ session active, mode {}", session.mode);

    section(2, "A conversation: the second turn needs the first");
    let first = "The secret word is banana.";
    let out1 = client.submit(&session.session_id, skill, first, None).await.map_err(|e| e.to_string())?;
    println!("  answer 1: {}", out1.output.as_string().unwrap_or_default().trim());
    print_provenance(&out1.provenance);
    let second = "What is the secret word?";
    // The second answer is streamed: its pieces arrive as TASK_UPDATEs with partial output before the result.
    let (tx, mut rx) = mpsc::channel::<ldp_session::runtime::Progress>(256);
    let printer = tokio::spawn(async move {
        let mut pieces = 0usize;
        print!("  streamed:");
        while let Some(p) = rx.recv().await {
            if let Some(chunk) = p.partial {
                pieces += 1;
                print!("{}", chunk.as_string().unwrap_or_default());
                let _ = std::io::Write::flush(&mut std::io::stdout());
            }
        }
        println!();
        pieces
    });
    let out2 = client
        .submit_task(Submission::new(&session.session_id, skill, second).progress(tx))
        .await
        .map_err(|e| e.to_string())?;
    let pieces = printer.await.map_err(|e| e.to_string())?;
    println!("  answer 2: {} ({pieces} streamed pieces)", out2.output.as_string().unwrap_or_default().trim());
    print_provenance(&out2.provenance);
    // The delegate sent the first turn (question and answer) with the second question: the provider counted it.
    match (out1.provenance.tokens_used, out2.provenance.tokens_used) {
        (Some(t1), Some(t2)) if t2 > t1 => {
            println!("  ✔ turn 2 used {t2} tokens > turn 1's {t1}: the first turn was in its context (not re-sent)");
        }
        (t1, t2) => return Err(format!("turn 2 did not carry turn 1 as context (tokens {t1:?}, then {t2:?})")),
    }

    section(3, "A fail_closed contract with a budget of 8 tokens");
    let contract = DelegationContract::new("contract-llm-1", "Answer within 8 tokens")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(8), max_cost_usd: None });
    let task = "Count from one to one hundred in words.";
    match client.submit(&session.session_id, skill, task, Some(contract)).await {
        Err(SessionError::Peer(e)) if e.code == codes::CONTRACT_VIOLATED => {
            println!("  ✔ generation stopped: {} ({}): {}", e.code, e.category, e.message);
            if let Some(partial) = &e.partial_output {
                println!("    partial_output: {partial}");
            }
        }
        other => return Err(format!("expected CONTRACT_VIOLATED, got {other:?}")),
    }

    section(4, "Closing the session");
    client.close(&session.session_id).await.map_err(|e| e.to_string())?;
    println!("\n✔ LLM tour complete.");
    Ok(())
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tour = async {
        match &args.llm {
            Some(url) => run_llm_tour(url, &args.llm_skill, args.transport).await,
            None => run_demo(args.transport).await,
        }
    };
    match rt.block_on(tour) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ldp demo: ✘ {e}");
            ExitCode::FAILURE
        }
    }
}
