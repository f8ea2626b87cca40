//! The delegate registry: discovery by URL or by card, attestations, refresh, removal after repeated identity
//! failures, and one cached connection per delegate. [`Registry::route_and_submit`] builds on it.
//!
//! The registry owns a [`Router`] and keeps it in step with what discovery finds. It never names a transport:
//! URLs go through a [`TransportFactory`] (typically a [`crate::SchemeDispatcher`]). Wall-clock time comes from the
//! injected [`WallClock`], so tests drive it with a `ManualClock`.
//!
//! Connections: the first task for a delegate connects a `Client` (identity card, HELLO) and proposes a session;
//! later tasks reuse both. A session failure drops the cached session (the next attempt proposes a new one), an
//! identity failure drops the connection, and re-registering or refreshing a delegate's card keeps them.

use crate::receipts::{ReceiptPreference, ReceiptRecord, ReceiptVerdict, check_receipt};
use ldp_session::TaskKey;
use ldp_types::Provenance;
use ldp_types::receipt::receipt_key;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ldp_session::runtime::{Client, Transport};
use ldp_session::{IdSource, InitiatorConfig, SeededIds, WallClock};
use ldp_types::{Code, IdentityCard, LdpError, SessionConfig};
use time::OffsetDateTime;

use crate::attestation::{AttestationClaim, TrustedIssuers};
use crate::card::{CardMapping, IgnoredAttestation};
use crate::discovery::{DiscoveryError, SharedTransport, TransportFactory};
use crate::{Decision, FailoverPolicy, Router, RouterConfig, RouterError, SelectionRequest};

/// Everything that shapes a [`Registry`].
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// The router's policy, learner and seed.
    pub router: RouterConfig,
    /// How cards become candidates.
    pub mapping: CardMapping,
    /// Attestation issuers the operator trusts at the start; [`Registry::update_trusted_issuers`] changes them
    /// later (an issuer's new key set or revocation list).
    pub trusted_issuers: TrustedIssuers,
    /// Consecutive identity failures (card unavailable or naming another delegate, identity-category errors)
    /// after which a delegate is removed. At least 1; default 3.
    pub identity_failure_threshold: u32,
    /// Who the registry is when it connects to delegates.
    pub initiator: InitiatorConfig,
    /// What it proposes.
    pub session: SessionConfig,
    /// Retries and reroutes of [`Registry::route_and_submit`].
    pub failover: FailoverPolicy,
    /// Seed of message ids and nonces; `None` draws them from the operating system.
    pub id_seed: Option<u64>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            router: RouterConfig::default(),
            mapping: CardMapping::default(),
            trusted_issuers: TrustedIssuers::default(),
            identity_failure_threshold: 3,
            initiator: InitiatorConfig::new("ldp:delegate:router"),
            session: SessionConfig::default(),
            failover: FailoverPolicy::default(),
            id_seed: None,
        }
    }
}

/// The result of registering (or re-registering) a delegate.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// The delegate.
    pub delegate_id: String,
    /// The skills it was registered for.
    pub skills: Vec<String>,
    /// Attestations that did not count, with their reasons.
    pub ignored: Vec<IgnoredAttestation>,
}

/// What [`Registry::refresh`] did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RefreshReport {
    /// Delegates whose card was fetched and re-registered.
    pub refreshed: Vec<String>,
    /// Delegates whose card could not be fetched or did not match, with the reason.
    pub failed: Vec<(String, DiscoveryError)>,
    /// Delegates removed because they reached the identity failure threshold.
    pub removed: Vec<String>,
}

struct Entry {
    /// The URL it was discovered at, if any.
    url: Option<String>,
    transport: Option<SharedTransport>,
    card: IdentityCard,
    /// Attestations supplied apart from the card.
    attestations: Vec<AttestationClaim>,
    identity_failures: u32,
    connection: Option<Arc<Connection>>,
    /// Verdicts on its usage receipts so far (kept across card refreshes).
    receipts: ReceiptRecord,
}

/// A connected client and its current session.
pub(crate) struct Connection {
    pub(crate) client: Client<SharedTransport>,
    session: Mutex<Option<String>>,
}

/// Delegates known to the router, how to reach them, and their cached connections. Shareable (`Arc<Registry>`):
/// every method takes `&self`, and no lock is held across an await.
pub struct Registry {
    pub(crate) config: RegistryConfig,
    factory: Arc<dyn TransportFactory>,
    pub(crate) clock: Arc<dyn WallClock>,
    router: Mutex<Router>,
    entries: Mutex<HashMap<String, Entry>>,
    /// The trusted issuers now: `config.trusted_issuers`, with the documents accepted since. Lock order: `entries`,
    /// then this, then `router`; never held across another lock's acquisition otherwise.
    trusted: Mutex<TrustedIssuers>,
    clients_made: AtomicU64,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("delegates", &self.delegates()).finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent before anything in it could panic; recover from poison.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registry {
    /// An empty registry opening transports with `factory` and reading wall-clock time from `clock`.
    pub fn new(
        config: RegistryConfig,
        factory: Arc<dyn TransportFactory>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self, RouterError> {
        config.failover.validate()?;
        if config.identity_failure_threshold == 0 {
            return Err(RouterError::InvalidConfig("identity_failure_threshold must be at least 1"));
        }
        Ok(Registry {
            router: Mutex::new(Router::new(config.router.clone())?),
            trusted: Mutex::new(config.trusted_issuers.clone()),
            config,
            factory,
            clock,
            entries: Mutex::new(HashMap::new()),
            clients_made: AtomicU64::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// The trusted issuers now: the configured ones with the key sets and revocation lists accepted since.
    pub fn trusted_issuers(&self) -> TrustedIssuers {
        lock(&self.trusted).clone()
    }

    /// Changes the trusted issuers (`f` applies an issuer's key set or revocation list, pins a key, requires fresh
    /// revocations), then re-verifies every registered delegate's attestations at the clock's time, so that a
    /// revocation, or an issuer's list gone stale, changes the next selection rather than the next card refresh.
    /// Returns what `f` returns; a delegate whose re-registration the router refuses keeps its previous candidate.
    pub fn update_trusted_issuers<R>(&self, f: impl FnOnce(&mut TrustedIssuers) -> R) -> R {
        let result = f(&mut lock(&self.trusted));
        self.reverify_attestations();
        result
    }

    /// Re-verifies every registered delegate's attestations at the clock's time, against its held card (nothing is
    /// fetched), and returns the registrations (each with the attestations that no longer count).
    pub fn reverify_attestations(&self) -> Vec<Registration> {
        let cards: Vec<IdentityCard> = lock(&self.entries).values().map(|e| e.card.clone()).collect();
        cards.into_iter().filter_map(|card| self.map_and_store(card, None, false).ok()).collect()
    }

    /// The injected clock's time.
    pub fn now(&self) -> OffsetDateTime {
        self.clock.now_utc()
    }

    /// Runs `f` on the router (to assess, inspect observations, or select with full control).
    pub fn with_router<R>(&self, f: impl FnOnce(&mut Router) -> R) -> R {
        f(&mut lock(&self.router))
    }

    /// Selects a delegate at the clock's time.
    pub fn select(&self, request: &SelectionRequest) -> Result<Decision, RouterError> {
        let now = self.now();
        lock(&self.router).select(request, now)
    }

    /// The registered delegates, sorted.
    pub fn delegates(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.entries).keys().cloned().collect();
        ids.sort();
        ids
    }

    /// A registered delegate's current card.
    pub fn card(&self, delegate_id: &str) -> Option<IdentityCard> {
        lock(&self.entries).get(delegate_id).map(|e| e.card.clone())
    }

    /// What a registered delegate's usage receipts have shown so far ([`crate::receipts`]).
    pub fn receipt_record(&self, delegate_id: &str) -> Option<ReceiptRecord> {
        lock(&self.entries)
            .get(delegate_id)
            .map(|e| ReceiptRecord { published: receipt_key(&e.card).is_some(), ..e.receipts })
    }

    /// Checks and records the receipt of a result `delegate_id` produced for `key`.
    pub(crate) fn record_receipt(&self, delegate_id: &str, provenance: &Provenance, key: &TaskKey) -> ReceiptVerdict {
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(delegate_id) else { return ReceiptVerdict::NotPublished };
        let verdict = check_receipt(&entry.card, provenance, &key.session_id, &key.task_id);
        entry.receipts.record(&verdict);
        if let ReceiptVerdict::Invalid(why) = &verdict {
            tracing::warn!(delegate = %delegate_id, %why, "usage receipt refused");
        }
        verdict
    }

    /// Adds to `request.exclude` the delegates `preference` sets aside: those not [`ReceiptRecord::trustworthy`]
    /// (for `Prefer`, only while at least one registered delegate offering the skill is).
    pub(crate) fn exclude_by_receipts(&self, preference: ReceiptPreference, request: &mut SelectionRequest) {
        if preference == ReceiptPreference::Any {
            return;
        }
        let entries = lock(&self.entries);
        let offering = entries.iter().filter(|(id, e)| {
            !request.exclude.contains(id) && e.card.capabilities.iter().any(|c| c.name == request.skill)
        });
        let (good, bad): (Vec<_>, Vec<_>) = offering.partition(|(_, e)| {
            ReceiptRecord { published: receipt_key(&e.card).is_some(), ..e.receipts }.trustworthy()
        });
        if preference == ReceiptPreference::Prefer && good.is_empty() {
            return;
        }
        request.exclude.extend(bad.into_iter().map(|(id, _)| id.clone()));
    }

    /// A registered delegate's consecutive identity failures.
    pub fn identity_failures(&self, delegate_id: &str) -> Option<u32> {
        lock(&self.entries).get(delegate_id).map(|e| e.identity_failures)
    }

    /// Discovers the delegate at `url`: opens a transport through the factory, fetches the identity card and
    /// registers it. The delegate is refreshed from the same URL later.
    pub async fn add_url(&self, url: &str) -> Result<Registration, DiscoveryError> {
        let transport = self.factory.open(url)?;
        let card = transport.identity().await.map_err(DiscoveryError::Identity)?;
        self.install(card, Some((Some(url.to_owned()), Some(transport))))
    }

    /// Registers a delegate from its card. `transport` reaches it; without one, its card's `endpoint` is opened
    /// through the factory when a task is first routed to it.
    pub fn add_card(
        &self,
        card: IdentityCard,
        transport: Option<SharedTransport>,
    ) -> Result<Registration, DiscoveryError> {
        self.install(card, Some((None, transport)))
    }

    /// Adds an attestation about a registered delegate (for example from an `ATTESTATION` message) and
    /// re-registers it; the registration says whether the attestation was ignored, and why.
    pub fn add_attestation(&self, claim: AttestationClaim) -> Result<Registration, DiscoveryError> {
        let card = {
            let mut entries = lock(&self.entries);
            let entry = entries
                .get_mut(&claim.subject)
                .ok_or_else(|| DiscoveryError::UnknownDelegate(claim.subject.clone()))?;
            entry.attestations.retain(|a| a.signature.is_none() || a.signature != claim.signature);
            entry.attestations.push(claim);
            entry.card.clone()
        };
        self.install(card, None)
    }

    /// Registers `card`; `reach` replaces how the delegate is reached (URL, transport) unless `None`.
    fn install(
        &self,
        card: IdentityCard,
        reach: Option<(Option<String>, Option<SharedTransport>)>,
    ) -> Result<Registration, DiscoveryError> {
        self.map_and_store(card, reach, true)
    }

    /// [`Registry::install`]; `identity_seen` says the card was just obtained (which clears the identity failure
    /// count), as opposed to re-verified from the copy held.
    fn map_and_store(
        &self,
        card: IdentityCard,
        reach: Option<(Option<String>, Option<SharedTransport>)>,
        identity_seen: bool,
    ) -> Result<Registration, DiscoveryError> {
        let now = self.now();
        let id = card.delegate_id.as_str().to_owned();
        let mut entries = lock(&self.entries);
        let attestations = entries.get(&id).map(|e| e.attestations.clone()).unwrap_or_default();
        let mapped = self.config.mapping.map(&card, &attestations, &lock(&self.trusted), now);
        lock(&self.router).upsert(&mapped.candidate)?;
        let skills = mapped.candidate.skills.iter().map(|o| o.skill.clone()).collect();
        match entries.get_mut(&id) {
            Some(entry) => {
                entry.card = card;
                if identity_seen {
                    entry.identity_failures = 0;
                }
                if let Some((url, transport)) = reach {
                    entry.url = url;
                    entry.transport = transport;
                    entry.connection = None;
                }
            }
            None => {
                let (url, transport) = reach.unwrap_or((None, None));
                entries.insert(
                    id.clone(),
                    Entry {
                        url,
                        transport,
                        card,
                        attestations,
                        identity_failures: 0,
                        connection: None,
                        receipts: ReceiptRecord::default(),
                    },
                );
            }
        }
        tracing::debug!(delegate = %id, ignored = mapped.ignored.len(), "delegate registered");
        Ok(Registration { delegate_id: id, skills, ignored: mapped.ignored })
    }

    /// Unregisters a delegate (its observed outcomes are kept by the router in case it returns); returns whether
    /// it was registered.
    pub fn remove(&self, delegate_id: &str) -> bool {
        let removed = lock(&self.entries).remove(delegate_id).is_some();
        lock(&self.router).remove(delegate_id);
        removed
    }

    /// Counts an identity failure of `delegate_id`; at the configured threshold of consecutive failures the
    /// delegate is removed. Returns whether it was removed.
    pub fn record_identity_failure(&self, delegate_id: &str, reason: &dyn fmt::Display) -> bool {
        let failures = {
            let mut entries = lock(&self.entries);
            let Some(entry) = entries.get_mut(delegate_id) else { return false };
            entry.identity_failures = entry.identity_failures.saturating_add(1);
            entry.connection = None;
            entry.identity_failures
        };
        let threshold = self.config.identity_failure_threshold;
        if failures >= threshold {
            tracing::warn!(delegate = delegate_id, failures, %reason, "identity failed repeatedly; delegate removed");
            self.remove(delegate_id)
        } else {
            tracing::info!(delegate = delegate_id, failures, threshold, %reason, "identity failure");
            false
        }
    }

    /// Fetches every reachable delegate's card again and re-registers it (re-verifying attestations at the
    /// clock's time). A card that cannot be fetched, or names another delegate, counts as an identity failure.
    /// Delegates registered by card without transport or endpoint are left as they are.
    pub async fn refresh(&self) -> RefreshReport {
        let mut report = RefreshReport::default();
        for id in self.delegates() {
            match self.refresh_delegate(&id).await {
                Ok(Some(_)) => report.refreshed.push(id),
                Ok(None) => {}
                Err(DiscoveryError::UnknownDelegate(_)) => {}
                Err(error) => {
                    if self.record_identity_failure(&id, &error) {
                        report.removed.push(id.clone());
                    }
                    report.failed.push((id, error));
                }
            }
        }
        report
    }

    /// Fetches one delegate's card again and re-registers it; `Ok(None)` when it cannot be reached at all (no
    /// transport, no URL, no endpoint). Does not count failures; [`Registry::refresh`] does.
    pub async fn refresh_delegate(&self, delegate_id: &str) -> Result<Option<Registration>, DiscoveryError> {
        let Some(transport) = self.transport_of(delegate_id)? else { return Ok(None) };
        let card = transport.identity().await.map_err(DiscoveryError::Identity)?;
        if card.delegate_id.as_str() != delegate_id {
            return Err(DiscoveryError::IdentityMismatch {
                expected: delegate_id.to_owned(),
                actual: card.delegate_id.as_str().to_owned(),
            });
        }
        self.install(card, None).map(Some)
    }

    /// The transport of a delegate: its own, else one opened for its URL or card endpoint.
    fn transport_of(&self, delegate_id: &str) -> Result<Option<SharedTransport>, DiscoveryError> {
        let (transport, url) = {
            let entries = lock(&self.entries);
            let entry = entries.get(delegate_id).ok_or_else(|| DiscoveryError::UnknownDelegate(delegate_id.into()))?;
            let url = entry.url.clone().or_else(|| Some(entry.card.endpoint.clone()).filter(|e| !e.is_empty()));
            (entry.transport.clone(), url)
        };
        match (transport, url) {
            (Some(transport), _) => Ok(Some(transport)),
            (None, Some(url)) => self.factory.open(&url).map(Some),
            (None, None) => Ok(None),
        }
    }

    fn ids(&self) -> Box<dyn IdSource> {
        let n = self.clients_made.fetch_add(1, Ordering::Relaxed);
        match self.config.id_seed {
            // Distinct streams per connection: a delegate's replay guard must never see a nonce twice.
            Some(seed) => Box::new(SeededIds::new(seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
            None => Box::new(SeededIds::from_entropy()),
        }
    }

    /// The cached connection to a delegate, connecting on first use.
    pub(crate) async fn connection(&self, delegate_id: &str) -> Result<Arc<Connection>, LdpError> {
        if let Some(connection) = lock(&self.entries).get(delegate_id).and_then(|e| e.connection.clone()) {
            return Ok(connection);
        }
        let transport = self
            .transport_of(delegate_id)
            .map_err(|e| LdpError::transport(Code::TransportError, e.to_string()).with_retryable(false))?
            .ok_or_else(|| {
                LdpError::transport(Code::TransportError, format!("delegate {delegate_id:?} has no endpoint"))
                    .with_retryable(false)
            })?;
        let client = Client::connect(transport, self.config.initiator.clone(), self.clock.clone(), self.ids())
            .await
            .map_err(|e| e.to_ldp_error())?;
        if client.card().delegate_id.as_str() != delegate_id {
            return Err(LdpError::identity(
                "IDENTITY_MISMATCH",
                format!("expected {delegate_id:?}, the peer is {:?}", client.card().delegate_id.as_str()),
            ));
        }
        let connection = Arc::new(Connection { client, session: Mutex::new(None) });
        let mut entries = lock(&self.entries);
        Ok(match entries.get_mut(delegate_id) {
            // Another task may have connected meanwhile; keep one connection.
            Some(entry) => entry.connection.get_or_insert(connection).clone(),
            None => connection,
        })
    }

    /// The connection's session, proposing one when there is none.
    pub(crate) async fn session(&self, connection: &Connection) -> Result<String, LdpError> {
        if let Some(session) = lock(&connection.session).clone() {
            return Ok(session);
        }
        let info = connection.client.propose(self.config.session.clone()).await.map_err(|e| e.to_ldp_error())?;
        *lock(&connection.session) = Some(info.session_id.clone());
        Ok(info.session_id)
    }

    /// Forgets a delegate's cached session (the next task proposes a new one).
    pub(crate) fn reset_session(&self, delegate_id: &str) {
        if let Some(connection) = lock(&self.entries).get(delegate_id).and_then(|e| e.connection.clone()) {
            *lock(&connection.session) = None;
        }
    }
}
