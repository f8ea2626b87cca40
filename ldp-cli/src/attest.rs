//! `ldp attest`: issue, publish, revoke and verify signed quality attestations (the issuer's side of
//! `ldp_router::issuer`). Documents go to stdout as JSON, ready to serve at the issuer's well-known paths.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use ldp::issuers::{FetchLimits, IssuerFetcher, IssuerSource, apply_documents};
use ldp_router::issuer::{IssuerKeySet, PublishedKey, RevocationList, describe_keys, with_key_id};
use ldp_router::{AttestationClaim, Quality, TrustedIssuers, sign_attestation, verify_attestation};
use ldp_types::signing::{SigningKey, VerifyingKey};
use time::OffsetDateTime;

use crate::exit;

/// Who signs: the issuer, its key's id and seed (the key set lists the seed's public key under that id).
#[derive(Debug, clap::Args)]
pub struct Signer {
    /// The signing key's Ed25519 seed (64 hex digits).
    #[arg(long, env = "LDP_ISSUER_SEED", hide_env_values = true)]
    seed: String,
    /// The issuer's id.
    #[arg(long)]
    issuer: String,
    /// The id of the signing key, as published in the issuer's key set.
    #[arg(long)]
    key_id: String,
}

/// `ldp attest` subcommands.
#[derive(Debug, Subcommand)]
pub enum AttestCommand {
    /// Sign an attestation: the issuer vouches that SUBJECT reaches SCORE on SKILL.
    Issue {
        #[command(flatten)]
        signer: Signer,
        /// The delegate attested.
        #[arg(long)]
        subject: String,
        /// The skill.
        #[arg(long)]
        skill: String,
        /// The quality score, 0.0-1.0.
        #[arg(long)]
        score: f64,
        /// Expiry (RFC 3339).
        #[arg(long)]
        expires: Option<String>,
        /// Where the evidence is (a URI or report id).
        #[arg(long)]
        evidence: Option<String>,
    },
    /// Print the issuer's key set (to serve at /.well-known/ldp-issuer-keys), signed by the key of --seed.
    Keys {
        #[command(flatten)]
        signer: Signer,
        /// Until when the signing key may sign (RFC 3339); omitted: until further notice.
        #[arg(long)]
        valid_until: Option<String>,
        /// Another key to list: KEY_ID=PUBLIC_HEX[@FROM[/UNTIL]] (repeatable), e.g. the next key of a rotation.
        #[arg(long = "key", value_name = "KEY_ID=PUBLIC_HEX[@FROM[/UNTIL]]")]
        keys: Vec<String>,
    },
    /// Print a signed revocation list (to serve at /.well-known/ldp-issuer-revocations).
    Revoke {
        #[command(flatten)]
        signer: Signer,
        /// An attestation file to revoke (repeatable).
        #[arg(long = "attestation", value_name = "FILE")]
        attestations: Vec<PathBuf>,
        /// A key id to revoke, with everything it signed (repeatable).
        #[arg(long = "revoke-key", value_name = "KEY_ID")]
        revoked_keys: Vec<String>,
        /// The list published so far, whose entries are kept.
        #[arg(long, value_name = "FILE")]
        previous: Option<PathBuf>,
        /// Seconds until the next list is due (routers treat this one as stale after that).
        #[arg(long, value_name = "SECS", default_value_t = 86_400)]
        valid_for: u64,
    },
    /// Verify an attestation as a router would: against the issuer's pinned key, its key set and revocations
    /// (from files, or fetched from the issuer's well-known paths with --issuer-url).
    Verify {
        /// The attestation (JSON file, `-` for stdin).
        file: PathBuf,
        /// The issuer's pinned key: KEY_ID=PUBLIC_HEX (the start of its rotation chain).
        #[arg(long, value_name = "KEY_ID=PUBLIC_HEX")]
        pin: String,
        /// The issuer's key set (a file).
        #[arg(long, value_name = "FILE", conflicts_with = "issuer_url")]
        keys: Option<PathBuf>,
        /// The issuer's revocation list (a file); with it, revocations are required fresh.
        #[arg(long, value_name = "FILE", conflicts_with = "issuer_url")]
        revocations: Option<PathBuf>,
        /// The issuer's base URL: fetch its key set and revocation list from /.well-known/ldp-issuer-keys and
        /// /.well-known/ldp-issuer-revocations under it (revocations are then required fresh).
        #[arg(long, value_name = "URL")]
        issuer_url: Option<String>,
        /// With --issuer-url: how long each document may take, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 10, requires = "issuer_url")]
        fetch_timeout: u64,
        /// How old the revocation list may be, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 86_400)]
        max_revocation_age: u64,
    },
}

/// A failure with its exit status.
struct Failure(u8, String);

fn usage(message: impl std::fmt::Display) -> Failure {
    Failure(exit::USAGE, message.to_string())
}

/// Runs an `ldp attest` subcommand.
pub fn run(cmd: AttestCommand) -> ExitCode {
    match execute(cmd) {
        Ok(text) => {
            println!("{text}");
            ExitCode::from(exit::OK)
        }
        Err(Failure(code, message)) => {
            eprintln!("ldp attest: {message}");
            ExitCode::from(code)
        }
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn seed_key(seed: &str) -> Result<SigningKey, Failure> {
    SigningKey::ed25519_from_hex(seed).map_err(|e| usage(format!("--seed: {e}")))
}

fn time_arg(flag: &str, text: &str) -> Result<OffsetDateTime, Failure> {
    ldp_types::time::parse_timestamp(text).map_err(|e| usage(format!("{flag}: {e}")))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Failure> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).map_err(|e| usage(format!("stdin: {e}")))?
    } else {
        std::fs::read_to_string(path).map_err(|e| usage(format!("{}: {e}", path.display())))?
    };
    serde_json::from_str(&text).map_err(|e| Failure(exit::FAILED, format!("{}: {e}", path.display())))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string_pretty(value).map_err(|e| Failure(exit::FAILED, e.to_string()))
}

fn execute(cmd: AttestCommand) -> Result<String, Failure> {
    match cmd {
        AttestCommand::Issue { signer: Signer { seed, issuer, key_id }, subject, skill, score, expires, evidence } => {
            let key = seed_key(&seed)?;
            let score = Quality::new(score).map_err(|e| usage(format!("--score: {e}")))?;
            let mut claim = AttestationClaim::new(subject, skill, score, issuer, now());
            if let Some(expires) = expires {
                claim = claim.expiring_at(time_arg("--expires", &expires)?);
            }
            if let Some(evidence) = evidence {
                claim = claim.with_evidence(evidence);
            }
            let signed = sign_attestation(with_key_id(claim, key_id), &key).map_err(usage)?;
            to_json(&signed)
        }
        AttestCommand::Keys { signer: Signer { seed, issuer, key_id }, valid_until, keys } => {
            let signer = seed_key(&seed)?;
            let mut own = PublishedKey::new(&key_id, &signer.verifying_key(), now()).map_err(usage)?;
            if let Some(until) = valid_until {
                own = own.valid_until(time_arg("--valid-until", &until)?);
            }
            let mut listed = vec![own];
            for arg in &keys {
                listed.push(parse_key_arg(arg)?);
            }
            to_json(&IssuerKeySet::signed(issuer, now(), listed, key_id, &signer).map_err(usage)?)
        }
        AttestCommand::Revoke {
            signer: Signer { seed, issuer, key_id },
            attestations,
            revoked_keys,
            previous,
            valid_for,
        } => {
            let signer = seed_key(&seed)?;
            let (mut revoked, mut keys) = (Vec::new(), revoked_keys);
            if let Some(previous) = previous {
                let list: RevocationList = read_json(&previous)?;
                revoked.extend(list.revoked_attestations);
                keys.extend(list.revoked_keys);
            }
            for path in &attestations {
                let claim: AttestationClaim = read_json(path)?;
                let signature = claim.signature.ok_or_else(|| usage(format!("{}: not signed", path.display())))?;
                revoked.push(signature);
            }
            revoked.sort();
            revoked.dedup();
            keys.sort();
            keys.dedup();
            let list =
                RevocationList::signed(issuer, now(), Duration::from_secs(valid_for), revoked, keys, key_id, &signer)
                    .map_err(usage)?;
            to_json(&list)
        }
        AttestCommand::Verify { file, pin, keys, revocations, issuer_url, fetch_timeout, max_revocation_age } => {
            let claim: AttestationClaim = read_json(&file)?;
            let (pin_id, pin_hex) = pin.split_once('=').ok_or_else(|| usage("--pin: expected KEY_ID=PUBLIC_HEX"))?;
            let pinned = VerifyingKey::ed25519_from_hex(pin_hex).map_err(|e| usage(format!("--pin: {e}")))?;
            let mut trusted = TrustedIssuers::new()
                .trust_key(&claim.issuer_id, pin_id, pinned)
                .map_err(|e| usage(format!("--pin: {e}")))?;
            let now = now();
            let mut summary = Vec::new();
            if let Some(url) = issuer_url {
                let max_age = Duration::from_secs(max_revocation_age);
                summary.push(fetch_documents(&mut trusted, &claim.issuer_id, &url, fetch_timeout, max_age, now)?);
            }
            if let Some(path) = keys {
                let set: IssuerKeySet = read_json(&path)?;
                trusted
                    .apply_key_set(&set, now)
                    .map_err(|e| Failure(exit::FAILED, format!("key set {}: {e}", path.display())))?;
                summary.push(format!("key set accepted: {:?}", describe_keys(&set)));
            }
            if let Some(path) = revocations {
                let list: RevocationList = read_json(&path)?;
                trusted
                    .apply_revocations(&list, now)
                    .map_err(|e| Failure(exit::FAILED, format!("revocations {}: {e}", path.display())))?;
                trusted.require_revocations(&claim.issuer_id, Duration::from_secs(max_revocation_age));
            }
            let verified = verify_attestation(&claim, &trusted, now)
                .map_err(|e| Failure(exit::FAILED, format!("attestation refused: {e}")))?;
            let claim = verified.claim();
            summary.push(format!(
                "valid: {} attests {} at {} on {} (attested {})",
                claim.issuer_id,
                claim.subject,
                claim.quality_score.get(),
                claim.skill,
                claim.attested_at
            ));
            Ok(summary.join("\n"))
        }
    }
}

/// Fetches the issuer's documents from `url` and feeds them to `trusted` (`--issuer-url`); returns a summary line.
fn fetch_documents(
    trusted: &mut TrustedIssuers,
    issuer_id: &str,
    url: &str,
    timeout: u64,
    max_age: Duration,
    now: OffsetDateTime,
) -> Result<String, Failure> {
    let source = IssuerSource::new(issuer_id, url).map_err(|e| usage(format!("--issuer-url: {e}")))?;
    let limits = FetchLimits::new(Duration::from_secs(timeout), FetchLimits::default().max_bytes);
    let fetcher = IssuerFetcher::new(limits).map_err(|e| Failure(exit::FAILED, e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(exit::FAILED, format!("starting the runtime: {e}")))?;
    let documents = runtime.block_on(fetcher.fetch(&source)).map_err(|e| Failure(exit::FAILED, e.to_string()))?;
    apply_documents(trusted, &source, &documents, max_age, now).map_err(|e| Failure(exit::FAILED, e.to_string()))?;
    Ok(format!(
        "fetched from {url}: key set accepted: {:?}; revocation list of {} accepted ({} attestations, {} keys revoked)",
        describe_keys(&documents.keys),
        documents.revocations.issued_at,
        documents.revocations.revoked_attestations.len(),
        documents.revocations.revoked_keys.len()
    ))
}

/// `KEY_ID=PUBLIC_HEX[@FROM[/UNTIL]]`.
fn parse_key_arg(arg: &str) -> Result<PublishedKey, Failure> {
    let bad = |why: &str| usage(format!("--key {arg:?}: {why} (expected KEY_ID=PUBLIC_HEX[@FROM[/UNTIL]])"));
    let (key_id, rest) = arg.split_once('=').ok_or_else(|| bad("no '='"))?;
    let (hex, window) = match rest.split_once('@') {
        Some((hex, window)) => (hex, Some(window)),
        None => (rest, None),
    };
    let key = VerifyingKey::ed25519_from_hex(hex).map_err(|e| bad(&e.to_string()))?;
    let (from, until) = match window.map(|w| w.split_once('/').map_or((w, None), |(f, u)| (f, Some(u)))) {
        Some((from, until)) => (time_arg("--key", from)?, until.map(|u| time_arg("--key", u)).transpose()?),
        None => (now(), None),
    };
    let published = PublishedKey::new(key_id, &key, from).map_err(|e| bad(&e.to_string()))?;
    Ok(match until {
        Some(until) => published.valid_until(until),
        None => published,
    })
}
