//! `ldp conformance`: runs the conformance kit against any LDP implementation.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ldp_conformance::{Baseline, Config, Format, LevelFilter, ProgressEvent, TransportKind};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};

/// Test an LDP implementation against the requirement catalogue (RFC 0.1 + paper extensions).
///
/// Exit codes: 0 every required requirement passed (or, with --baseline, the failures are exactly the expected
/// ones); 1 failures; 2 configuration or connection error.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// The implementation's endpoint, e.g. http://127.0.0.1:8090.
    url: String,
    /// Transport to test: http or ws (repeat for both; a requirement passes only if it passes on each).
    #[arg(long = "transport", default_value = "http")]
    transports: Vec<TransportKind>,
    /// Bearer token sent with every request.
    #[arg(long, env = "LDP_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A token fetched instead (once, when the run starts): OAuth client credentials or a command.
    #[command(flatten)]
    fetched: crate::token_args::TokenArgs,
    /// A bearer token that authenticates the kit as a member of an untrusted domain (trust-rejection check).
    #[arg(long)]
    untrusted_token: Option<String>,
    /// Sign messages with this algorithm: hmac-sha256, hmac-sha256-jcs or ed25519-jcs.
    #[arg(long, requires = "secret", value_parser = ["hmac-sha256", "hmac-sha256-jcs", "ed25519-jcs"])]
    sign: Option<String>,
    /// The shared secret (hmac-*) or the hex Ed25519 seed (ed25519-jcs).
    #[arg(long, requires = "sign", env = "LDP_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// A short session TTL in seconds the server accepts, for the expiry check (default 2).
    #[arg(long)]
    ttl_hint: Option<u64>,
    /// Requirements to run: must (MUST + EXTENSION), should (+ SHOULD) or all (+ MAY).
    #[arg(long, default_value = "all")]
    level: LevelFilter,
    /// Report format: table, json (with evidence), junit or markdown.
    #[arg(long, default_value = "table")]
    format: Format,
    /// Write the report to this file instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Expected-failures baseline: the run passes only if the failures are exactly those listed.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Write the failures of this run as a baseline file.
    #[arg(long)]
    write_baseline: Option<PathBuf>,
    /// Trust the CA certificates in this PEM file for https:// and wss://, beyond the web PKI roots (e.g. the
    /// implementation's private CA or self-signed certificate). Repeatable.
    #[arg(long = "ca-cert", value_name = "FILE")]
    ca_certs: Vec<PathBuf>,
    /// Present this client certificate (PEM, the certificate first, then any intermediates) to an implementation
    /// that requires mutual TLS.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// Timeout of one request, in seconds.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Deadline of the whole run, in seconds: a hung implementation costs at most this long; checks not started
    /// by then are reported NOT TESTABLE.
    #[arg(long, default_value_t = 300)]
    deadline: u64,
    /// No progress display on stderr.
    #[arg(long)]
    no_progress: bool,
}

fn config(args: &ConformanceArgs) -> Result<Config, String> {
    let mut config = Config::new(args.url.clone());
    config.transports = args.transports.clone();
    config.token = args.token.clone();
    config.untrusted_token = args.untrusted_token.clone();
    config.ttl_hint = args.ttl_hint;
    config.level = args.level;
    config.request_timeout = Duration::from_secs(args.timeout.max(1));
    config.deadline = Duration::from_secs(args.deadline.max(1));
    if let (Some(alg), Some(secret)) = (&args.sign, &args.secret) {
        let alg: SignatureAlgorithm = alg.parse().map_err(|e| format!("--sign: {e}"))?;
        let key = match alg {
            SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_hex(secret),
            other => SigningKey::shared_secret(other, secret),
        }
        .map_err(|e| format!("--secret: {e}"))?;
        config.signing = Some(key);
    }
    let read = |flag: &str, path: &PathBuf| std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()));
    for path in &args.ca_certs {
        config.tls = std::mem::take(&mut config.tls).with_root_certificate_pem(read("--ca-cert", path)?);
    }
    if let (Some(cert), Some(key)) = (&args.client_cert, &args.client_key) {
        let (cert, key) = (read("--client-cert", cert)?, read("--client-key", key)?);
        config.tls = std::mem::take(&mut config.tls).with_client_identity_pem(cert, key);
    }
    ldp_conformance::base_url(&config.url).map_err(|e| e.to_string())?;
    Ok(config)
}

fn progress_printer(enabled: bool) -> impl Fn(&ProgressEvent) + Send + Sync {
    move |event: &ProgressEvent| {
        if !enabled {
            return;
        }
        match event {
            ProgressEvent::CheckStarted { transport, index, total, check } => {
                eprint!("\r\x1b[2K[{index:>2}/{total}] {transport:<4} {check} ...");
            }
            ProgressEvent::CheckFinished { transport, index, total, check, status, elapsed } => {
                eprintln!(
                    "\r\x1b[2K[{index:>2}/{total}] {transport:<4} {check:<28} {} ({} ms)",
                    status.as_str(),
                    elapsed.as_millis()
                );
            }
            _ => {}
        }
    }
}

/// Runs `ldp conformance`.
pub fn run(args: ConformanceArgs) -> ExitCode {
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ldp conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let baseline = match &args.baseline {
        Some(path) => match Baseline::load(path) {
            Ok(b) => Some((b, path.display().to_string())),
            Err(e) => {
                eprintln!("ldp conformance: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp conformance: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut config = config;
    if let Some(source) = match args.fetched.source() {
        Ok(source) => source,
        Err(e) => {
            eprintln!("ldp conformance: {e}");
            return ExitCode::from(2);
        }
    } {
        // The kit's probes send one fixed token: fetched once, it must outlive the run (see --deadline).
        match runtime.block_on(source.token()) {
            Ok(token) => config.token = Some(token),
            Err(e) => {
                eprintln!("ldp conformance: {}", e.message);
                return ExitCode::from(1);
            }
        }
    }
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let printer = progress_printer(show);
    let result = runtime.block_on(ldp_conformance::run_with_progress(config, &printer));
    let mut report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ldp conformance: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some((b, source)) = &baseline {
        report.baseline = Some(b.compare(&report, source.clone()));
    }
    if let Some(path) = &args.write_baseline {
        let implementation = report.implementation.as_ref().map_or_else(
            || args.url.clone(),
            |i| format!("{} ({} {})", i.delegate_id, i.model_family, i.model_version),
        );
        if let Err(e) = Baseline::from_report(&report, implementation).save(path) {
            eprintln!("ldp conformance: {e}");
            return ExitCode::from(2);
        }
    }
    let rendered = report.render(args.format);
    match &args.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, rendered) {
                eprintln!("ldp conformance: cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
            let s = &report.summary;
            eprintln!(
                "ldp conformance: {} passed, {} failures, {} warnings, {} skipped; report written to {}",
                s.passed,
                s.failures,
                s.warnings,
                s.skipped,
                path.display()
            );
            if let Some(b) = &report.baseline {
                eprintln!("{}", b.line());
            }
        }
        None => print!("{rendered}"),
    }
    if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
