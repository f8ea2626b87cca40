//! Attestation issuers' documents over HTTP(S): fetch an issuer's key set and revocation list from its well-known
//! paths, feed them to the router's [`TrustedIssuers`], and keep them fresh on a schedule.
//!
//! The rules stay where they are: whether a key set is accepted (signed by a key already trusted for the issuer,
//! valid now, not older than the set held), whether a revocation list is, and when an issuer's attestations stop
//! counting because its list is stale, are all [`ldp_router::issuer`]'s. This module is only the IO around them,
//! which is why it lives above the router (whose core does no IO) rather than in it:
//!
//! * [`IssuerFetcher::fetch`] GETs `<base>/.well-known/ldp-issuer-keys` and `<base>/.well-known/ldp-issuer-revocations`
//!   with a timeout and a size bound ([`FetchLimits`]), and checks each names the issuer expected.
//! * [`apply_documents`] hands them to [`TrustedIssuers`] (key set first, so a list signed by a newly rotated key
//!   verifies) and requires fresh revocations for the issuer.
//! * [`IssuerRefresher`] does both on a schedule ([`RefreshPolicy`]): after a success, halfway to the moment the
//!   list stops being fresh (its `next_update`, or its age reaching the bound), within `[min_interval,
//!   max_interval]`; after a failure, with exponential backoff up to `retry_max`, but never sleeping past that
//!   moment, so that a [`TrustTarget`] such as the [`Registry`] re-verifies its delegates' attestations when the
//!   issuer's stop counting. A failure changes nothing already accepted: the last good documents stay in force
//!   until the freshness bound retires them.
//!
//! ```no_run
//! # async fn run(factory: std::sync::Arc<dyn ldp::router::TransportFactory>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use ldp::issuers::{FetchLimits, IssuerFetcher, IssuerRefresher, IssuerSource, RefreshPolicy};
//! use ldp::router::{Registry, RegistryConfig, TrustedIssuers};
//! # let pinned = ldp::types::signing::SigningKey::ed25519_from_seed(&[1; 32]).verifying_key();
//! // Trust starts from a pinned key; the key sets it signs carry the rotation on.
//! let trusted = TrustedIssuers::new().trust_key("ldp:issuer:evals", "k1", pinned)?;
//! let config = RegistryConfig { trusted_issuers: trusted, ..RegistryConfig::default() };
//! let registry = Arc::new(Registry::new(config, factory, Arc::new(ldp::session::SystemClock))?);
//! let source = IssuerSource::new("ldp:issuer:evals", "https://evals.example")?;
//! let refresher = IssuerRefresher::new(
//!     source,
//!     IssuerFetcher::new(FetchLimits::default())?,
//!     RefreshPolicy::default(),
//!     registry.clone(),
//!     Arc::new(ldp::session::SystemClock),
//! );
//! let task = refresher.spawn(); // refreshes until aborted
//! # task.abort(); Ok(()) }
//! ```

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ldp_router::issuer::{ISSUER_KEYS_PATH, IssuerKeySet, REVOCATIONS_PATH, RevocationList};
use ldp_router::{Registry, TrustedIssuers};
use ldp_session::WallClock;
use reqwest::Url;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;

use crate::Error;

/// Which of the two documents a fetch or a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IssuerDocument {
    /// The key set, at [`ISSUER_KEYS_PATH`].
    KeySet,
    /// The revocation list, at [`REVOCATIONS_PATH`].
    Revocations,
}

impl IssuerDocument {
    /// The document's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            IssuerDocument::KeySet => "key set",
            IssuerDocument::Revocations => "revocation list",
        }
    }
}

impl std::fmt::Display for IssuerDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An issuer and where it publishes: `base_url` plus the well-known paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerSource {
    issuer_id: String,
    keys: Url,
    revocations: Url,
}

impl IssuerSource {
    /// The issuer `issuer_id` publishing under `base_url` (`http://` or `https://`; a path prefix is kept).
    pub fn new(issuer_id: impl Into<String>, base_url: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::IssuerUrl { url: base_url.to_owned(), reason: reason.to_owned() };
        let base = Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
            return Err(bad("expected an http:// or https:// URL with a host"));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad("a base URL has no query or fragment"));
        }
        let prefix = base.path().trim_end_matches('/').to_owned();
        let at = |path: &str| {
            let mut url = base.clone();
            url.set_path(&format!("{prefix}{path}"));
            url
        };
        Ok(IssuerSource { issuer_id: issuer_id.into(), keys: at(ISSUER_KEYS_PATH), revocations: at(REVOCATIONS_PATH) })
    }

    /// The issuer.
    pub fn issuer_id(&self) -> &str {
        &self.issuer_id
    }

    /// Where `document` is fetched from.
    pub fn url(&self, document: IssuerDocument) -> &Url {
        match document {
            IssuerDocument::KeySet => &self.keys,
            IssuerDocument::Revocations => &self.revocations,
        }
    }
}

/// Bounds on one fetch: the issuer's server is as much a peer as any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchLimits {
    /// Longest one document's request may take, connecting to the last byte.
    pub timeout: Duration,
    /// Largest document read, in bytes; a longer one is refused without reading the rest.
    pub max_bytes: usize,
}

impl Default for FetchLimits {
    /// 10 s and 16 MiB: a revocation list at the router's own entry bound
    /// ([`MAX_REVOKED`](ldp_router::issuer::MAX_REVOKED) signatures of 128 hex digits) is about 13 MB.
    fn default() -> Self {
        FetchLimits { timeout: Duration::from_secs(10), max_bytes: 16 << 20 }
    }
}

impl FetchLimits {
    /// `timeout` and `max_bytes` (the struct is non-exhaustive).
    pub fn new(timeout: Duration, max_bytes: usize) -> Self {
        FetchLimits { timeout, max_bytes }
    }
}

/// An issuer's two documents as fetched, not yet accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuerDocuments {
    /// The key set.
    pub keys: IssuerKeySet,
    /// The revocation list.
    pub revocations: RevocationList,
}

/// Fetches issuer documents over HTTP(S).
#[derive(Debug, Clone)]
pub struct IssuerFetcher {
    client: reqwest::Client,
    limits: FetchLimits,
}

impl IssuerFetcher {
    /// A fetcher with its own HTTP client (rustls, the web PKI roots), bounded by `limits`.
    pub fn new(limits: FetchLimits) -> Result<Self, Error> {
        let client = reqwest::Client::builder()
            .timeout(limits.timeout)
            // A redirect may move the documents, but not forever.
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| Error::IssuerFetch {
                url: "(no request: building the client)".to_owned(),
                reason: e.to_string(),
            })?;
        Ok(IssuerFetcher { client, limits })
    }

    /// The bounds.
    pub fn limits(&self) -> FetchLimits {
        self.limits
    }

    /// GETs both documents of `source` (concurrently) and checks that each is `source`'s issuer's.
    pub async fn fetch(&self, source: &IssuerSource) -> Result<IssuerDocuments, Error> {
        let (keys, revocations) = tokio::join!(
            self.get::<IssuerKeySet>(source.url(IssuerDocument::KeySet), IssuerDocument::KeySet),
            self.get::<RevocationList>(source.url(IssuerDocument::Revocations), IssuerDocument::Revocations),
        );
        let (keys, revocations) = (keys?, revocations?);
        for (document, named) in
            [(IssuerDocument::KeySet, &keys.issuer_id), (IssuerDocument::Revocations, &revocations.issuer_id)]
        {
            if named != source.issuer_id() {
                return Err(Error::IssuerMismatch {
                    url: source.url(document).to_string(),
                    expected: source.issuer_id().to_owned(),
                    actual: named.clone(),
                });
            }
        }
        Ok(IssuerDocuments { keys, revocations })
    }

    async fn get<T: DeserializeOwned>(&self, url: &Url, document: IssuerDocument) -> Result<T, Error> {
        let limit = self.limits.timeout;
        // The client's own timeout covers the request too; this one also bounds a body trickled byte by byte.
        match tokio::time::timeout(limit, self.get_within(url, document)).await {
            Ok(result) => result,
            Err(_) => Err(Error::IssuerTimeout { url: url.to_string(), after: limit }),
        }
    }

    async fn get_within<T: DeserializeOwned>(&self, url: &Url, document: IssuerDocument) -> Result<T, Error> {
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                Error::IssuerTimeout { url: url.to_string(), after: self.limits.timeout }
            } else {
                Error::IssuerFetch { url: url.to_string(), reason: e.to_string() }
            }
        };
        let mut response = self
            .client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(Error::IssuerStatus { url: url.to_string(), status: status.as_u16() });
        }
        let max = self.limits.max_bytes;
        let too_large = || Error::IssuerTooLarge { url: url.to_string(), limit: max };
        if response.content_length().is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX)) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len().saturating_add(chunk.len()) > max {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        // serde's derived structs refuse a member given twice, and serde_json bounds the nesting.
        serde_json::from_slice(&body).map_err(|e| Error::IssuerMalformed {
            url: url.to_string(),
            document,
            reason: e.to_string(),
        })
    }
}

/// Feeds `documents` of `source`'s issuer to `trusted` at `now`: the key set (accepted only under the rotation chain
/// rule), then the revocation list, and from now on requires that issuer's revocations no older than `max_age`. A
/// refused document changes nothing; a refused revocation list leaves an accepted key set in place (it stands on
/// its own signature).
pub fn apply_documents(
    trusted: &mut TrustedIssuers,
    source: &IssuerSource,
    documents: &IssuerDocuments,
    max_age: Duration,
    now: OffsetDateTime,
) -> Result<(), Error> {
    let refused = |document: IssuerDocument, error| Error::IssuerRefused {
        url: source.url(document).to_string(),
        document,
        error,
    };
    trusted.require_revocations(source.issuer_id(), max_age);
    trusted.apply_key_set(&documents.keys, now).map_err(|e| refused(IssuerDocument::KeySet, e))?;
    trusted.apply_revocations(&documents.revocations, now).map_err(|e| refused(IssuerDocument::Revocations, e))
}

/// Whatever holds the [`TrustedIssuers`] a refresher keeps up to date.
pub trait TrustTarget: Send + Sync + std::fmt::Debug {
    /// Runs `f` on the trusted issuers, then makes the change count (a [`Registry`] re-verifies its delegates'
    /// attestations). Called with a no-op `f` after a failed refresh, so that a list gone stale takes effect.
    fn update(&self, f: &mut dyn FnMut(&mut TrustedIssuers));
}

impl TrustTarget for Mutex<TrustedIssuers> {
    fn update(&self, f: &mut dyn FnMut(&mut TrustedIssuers)) {
        f(&mut self.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

impl TrustTarget for Registry {
    fn update(&self, f: &mut dyn FnMut(&mut TrustedIssuers)) {
        self.update_trusted_issuers(|trusted| f(trusted));
    }
}

/// When an [`IssuerRefresher`] fetches again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshPolicy {
    /// The freshness bound: the issuer's attestations count only while the router holds a revocation list from it
    /// younger than this (and not past its `next_update`); [`TrustedIssuers::require_revocations`] enforces it.
    pub max_revocation_age: Duration,
    /// Shortest wait after a success (an issuer publishing `next_update` = now must not be polled in a loop).
    pub min_interval: Duration,
    /// Longest wait after a success, however far off `next_update` is (key rotations are picked up by then).
    pub max_interval: Duration,
    /// Wait after the first failure; doubled after each further one.
    pub retry_initial: Duration,
    /// Longest wait after failures.
    pub retry_max: Duration,
}

impl Default for RefreshPolicy {
    /// Lists fresh for a day; refresh every 10 s to 1 h; retry after 5 s, backing off to 5 min.
    fn default() -> Self {
        RefreshPolicy {
            max_revocation_age: Duration::from_secs(86_400),
            min_interval: Duration::from_secs(10),
            max_interval: Duration::from_secs(3_600),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(300),
        }
    }
}

impl RefreshPolicy {
    /// The default with the freshness bound `max_revocation_age`.
    pub fn with_max_revocation_age(max_revocation_age: Duration) -> Self {
        RefreshPolicy { max_revocation_age, ..RefreshPolicy::default() }
    }

    /// Sets the bounds of the wait after a success.
    pub fn intervals(mut self, min: Duration, max: Duration) -> Self {
        self.min_interval = min;
        self.max_interval = max.max(min);
        self
    }

    /// Sets the backoff after failures.
    pub fn retries(mut self, initial: Duration, max: Duration) -> Self {
        self.retry_initial = initial;
        self.retry_max = max.max(initial);
        self
    }

    /// When `held` (the last list accepted) stops being fresh: its `next_update`, or its age reaching the bound.
    pub fn stale_at(&self, held: &RevocationList) -> OffsetDateTime {
        let age = time::Duration::try_from(self.max_revocation_age).unwrap_or(time::Duration::MAX);
        held.next_update.at().min(held.issued_at.at().saturating_add(age))
    }

    /// How long to wait at `now` before the next fetch, after `failures` consecutive failures (0: the last fetch
    /// succeeded), holding `held`.
    pub fn next_wait(&self, now: OffsetDateTime, failures: u32, held: Option<&RevocationList>) -> Duration {
        let until_stale = held.map(|list| positive(self.stale_at(list) - now));
        if failures == 0 {
            // Halfway to staleness leaves the other half for retries.
            let wait = until_stale.map_or(self.max_interval, |left| left / 2);
            return wait.clamp(self.min_interval, self.max_interval);
        }
        let doublings = failures.saturating_sub(1).min(30);
        let backoff = self.retry_initial.saturating_mul(1_u32 << doublings).min(self.retry_max);
        match until_stale {
            // Wake when the list goes stale, so the target re-verifies then, not a backoff later.
            Some(left) if !left.is_zero() => backoff.min(left),
            _ => backoff,
        }
    }
}

fn positive(d: time::Duration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

/// What an [`IssuerRefresher`] has achieved so far.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RefreshStatus {
    /// When documents were last fetched and accepted.
    pub last_success: Option<OffsetDateTime>,
    /// Failed refreshes since then.
    pub consecutive_failures: u32,
    /// The last failure, as text.
    pub last_error: Option<String>,
    /// The revocation list accepted last (the one in force, while fresh).
    pub revocations: Option<RevocationList>,
}

/// Keeps one issuer's documents in a [`TrustTarget`] fresh.
#[derive(Debug)]
pub struct IssuerRefresher {
    source: IssuerSource,
    fetcher: IssuerFetcher,
    policy: RefreshPolicy,
    target: Arc<dyn TrustTarget>,
    clock: Arc<dyn WallClock>,
    status: Mutex<RefreshStatus>,
}

impl IssuerRefresher {
    /// A refresher of `source` into `target`, reading time from `clock`. From now on the issuer's attestations
    /// count in `target` only while a fresh revocation list from it is held: none is, until the first refresh.
    pub fn new(
        source: IssuerSource,
        fetcher: IssuerFetcher,
        policy: RefreshPolicy,
        target: Arc<dyn TrustTarget>,
        clock: Arc<dyn WallClock>,
    ) -> Self {
        target.update(&mut |trusted| trusted.require_revocations(source.issuer_id(), policy.max_revocation_age));
        IssuerRefresher { source, fetcher, policy, target, clock, status: Mutex::new(RefreshStatus::default()) }
    }

    fn status_lock(&self) -> MutexGuard<'_, RefreshStatus> {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The source.
    pub fn source(&self) -> &IssuerSource {
        &self.source
    }

    /// What has happened so far.
    pub fn status(&self) -> RefreshStatus {
        self.status_lock().clone()
    }

    /// Fetches both documents and feeds them to the target. On failure nothing changes but the target re-verifies
    /// (the list held may have gone stale); the error says which document failed and how.
    pub async fn refresh(&self) -> Result<(), Error> {
        let result = match self.fetcher.fetch(&self.source).await {
            Ok(documents) => {
                let now = self.clock.now_utc();
                let mut applied = Ok(());
                let max_age = self.policy.max_revocation_age;
                self.target.update(&mut |trusted| {
                    applied = apply_documents(trusted, &self.source, &documents, max_age, now);
                });
                applied.map(|()| (now, documents.revocations))
            }
            Err(error) => {
                self.target.update(&mut |_| {});
                Err(error)
            }
        };
        let mut status = self.status_lock();
        match result {
            Ok((now, revocations)) => {
                status.last_success = Some(now);
                status.consecutive_failures = 0;
                status.last_error = None;
                status.revocations = Some(revocations);
                Ok(())
            }
            Err(error) => {
                status.consecutive_failures = status.consecutive_failures.saturating_add(1);
                status.last_error = Some(error.to_string());
                Err(error)
            }
        }
    }

    /// How long to wait now before the next refresh ([`RefreshPolicy::next_wait`]).
    pub fn next_wait(&self) -> Duration {
        let status = self.status_lock();
        self.policy.next_wait(self.clock.now_utc(), status.consecutive_failures, status.revocations.as_ref())
    }

    /// Refreshes now, then whenever [`IssuerRefresher::next_wait`] says, until the task is aborted. Failures are
    /// logged (`tracing` warnings) and kept in [`IssuerRefresher::status`].
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(error) = self.refresh().await {
                tracing::warn!(issuer = %self.source.issuer_id(), %error, "issuer documents not refreshed");
            }
            tokio::time::sleep(self.next_wait()).await;
        }
    }

    /// Runs [`IssuerRefresher::run`] on the tokio runtime; the handle aborts it.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(Arc::new(self).run())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use ldp_types::signing::SigningKey;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

    fn list(issued_at: OffsetDateTime, valid_for: Duration) -> RevocationList {
        let key = SigningKey::ed25519_from_seed(&[1; 32]);
        RevocationList::signed("ldp:issuer:x", issued_at, valid_for, vec![], vec![], "k1", &key).unwrap()
    }

    #[test]
    fn after_a_success_the_wait_is_half_the_time_left_within_the_intervals() {
        let policy = RefreshPolicy::with_max_revocation_age(Duration::from_secs(3600))
            .intervals(Duration::from_secs(10), Duration::from_secs(1200));
        // Fresh for an hour by the bound (the list's own next_update is a day away): half is 30 min, over the max.
        let day = list(T0, Duration::from_secs(86_400));
        assert_eq!(policy.stale_at(&day), T0 + time::Duration::hours(1));
        assert_eq!(policy.next_wait(T0, 0, Some(&day)), Duration::from_secs(1200));
        assert_eq!(policy.next_wait(T0 + time::Duration::minutes(40), 0, Some(&day)), Duration::from_secs(600));
        // next_update sooner than the bound: it decides; an issuer due again at once is polled at min_interval.
        let soon = list(T0, Duration::from_secs(60));
        assert_eq!(policy.next_wait(T0, 0, Some(&soon)), Duration::from_secs(30));
        assert_eq!(policy.next_wait(T0 + time::Duration::minutes(5), 0, Some(&soon)), Duration::from_secs(10));
        assert_eq!(policy.next_wait(T0, 0, None), Duration::from_secs(1200));
    }

    #[test]
    fn after_failures_the_wait_doubles_to_its_bound_but_never_past_staleness() {
        let policy = RefreshPolicy::with_max_revocation_age(Duration::from_secs(3600))
            .retries(Duration::from_secs(5), Duration::from_secs(300));
        let held = list(T0, Duration::from_secs(86_400));
        let waits: Vec<u64> = (1..=9).map(|n| policy.next_wait(T0, n, Some(&held)).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(policy.next_wait(T0, u32::MAX, None), Duration::from_secs(300), "no overflow");
        // 100 s before staleness, a 300 s backoff wakes at staleness instead; once stale, the backoff applies.
        let near = T0 + time::Duration::seconds(3500);
        assert_eq!(policy.next_wait(near, 9, Some(&held)), Duration::from_secs(100));
        assert_eq!(policy.next_wait(T0 + time::Duration::hours(2), 9, Some(&held)), Duration::from_secs(300));
    }
}
