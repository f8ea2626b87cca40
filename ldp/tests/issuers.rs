//! The issuer-document fetcher against a real HTTP server (axum on loopback) publishing an issuer's key set and
//! revocation list at the well-known paths: rotation and revocation picked up on refresh, an issuer gone dark
//! retired by the freshness bound, and oversize, garbage, slow, foreign and forged documents refused with typed
//! errors while the last good documents stay in force. Time for the documents is a `ManualClock`; HTTP is real.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ldp::Error;
use ldp::issuers::{FetchLimits, IssuerDocument, IssuerFetcher, IssuerRefresher, IssuerSource, RefreshPolicy};
use ldp::router::issuer::{
    ISSUER_KEYS_PATH, IssuerDocumentError, IssuerKeySet, PublishedKey, REVOCATIONS_PATH, RevocationList, with_key_id,
};
use ldp::router::{
    AttestationClaim, AttestationRejection, ClaimType, Quality, Registry, RegistryConfig, SchemeDispatcher,
    TransportFactory, TrustedIssuers, sign_attestation, verify_attestation,
};
use ldp::session::{ManualClock, WallClock};
use ldp::types::signing::SigningKey;
use ldp::types::{Capability, ClaimType as CardClaimType, DelegateId, IdentityCard, Score};
use time::OffsetDateTime;
use time::macros::datetime;

const ISSUER: &str = "ldp:issuer:evals";
const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);
const SUBJECT: &str = "ldp:delegate:solid";

fn key(n: u8) -> SigningKey {
    SigningKey::ed25519_from_seed(&[n; 32])
}

fn hours(h: i64) -> time::Duration {
    time::Duration::hours(h)
}

/// What the issuer's server answers for one path.
#[derive(Clone)]
enum Reply {
    Json(String),
    Status(StatusCode),
    /// The body after a delay.
    Slow(Duration, String),
    /// A body of this many bytes, streamed in chunks without a Content-Length.
    Streamed(usize),
}

type Published = Arc<Mutex<HashMap<&'static str, Reply>>>;

async fn serve(State(published): State<Published>, uri: axum::http::Uri) -> Response {
    let path = uri.path().trim_start_matches("/evals");
    let path = if path == ISSUER_KEYS_PATH { ISSUER_KEYS_PATH } else { REVOCATIONS_PATH };
    let reply = published.lock().unwrap().get(path).cloned();
    match reply {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Reply::Json(text)) => ([("content-type", "application/json")], text).into_response(),
        Some(Reply::Status(status)) => status.into_response(),
        Some(Reply::Slow(delay, text)) => {
            tokio::time::sleep(delay).await;
            text.into_response()
        }
        Some(Reply::Streamed(n)) => {
            let chunks = (0..n.div_ceil(1024)).map(move |i| {
                let len = 1024.min(n - i * 1024);
                Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b' '; len]))
            });
            Response::new(Body::from_stream(futures::stream::iter(chunks.collect::<Vec<_>>())))
        }
    }
}

/// The issuer's web server, under the base path `/evals`.
struct IssuerServer {
    base: String,
    published: Published,
    task: tokio::task::JoinHandle<()>,
}

impl IssuerServer {
    async fn start() -> Self {
        let published = Published::default();
        let app = axum::Router::new().fallback(serve).with_state(published.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/evals", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        IssuerServer { base, published, task }
    }

    fn publish(&self, path: &'static str, reply: Reply) {
        self.published.lock().unwrap().insert(path, reply);
    }

    fn keys(&self, set: &IssuerKeySet) {
        self.publish(ISSUER_KEYS_PATH, Reply::Json(serde_json::to_string(set).unwrap()));
    }

    fn revocations(&self, list: &RevocationList) {
        self.publish(REVOCATIONS_PATH, Reply::Json(serde_json::to_string(list).unwrap()));
    }
}

impl Drop for IssuerServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn published(key_id: &str, signer: &SigningKey, from: OffsetDateTime, until: Option<OffsetDateTime>) -> PublishedKey {
    let key = PublishedKey::new(key_id, &signer.verifying_key(), from).unwrap();
    match until {
        Some(until) => key.valid_until(until),
        None => key,
    }
}

fn key_set(at: OffsetDateTime, keys: Vec<PublishedKey>, signer_id: &str, signer: &SigningKey) -> IssuerKeySet {
    IssuerKeySet::signed(ISSUER, at, keys, signer_id, signer).unwrap()
}

fn revocations(
    at: OffsetDateTime,
    revoked: &[&AttestationClaim],
    signer_id: &str,
    signer: &SigningKey,
) -> RevocationList {
    let revoked = revoked.iter().map(|a| a.signature.clone().unwrap()).collect();
    RevocationList::signed(ISSUER, at, Duration::from_secs(24 * 3600), revoked, vec![], signer_id, signer).unwrap()
}

fn attestation(at: OffsetDateTime, skill: &str, key_id: &str, signer: &SigningKey) -> AttestationClaim {
    let claim = AttestationClaim::new(SUBJECT, skill, Quality::new(0.9).unwrap(), ISSUER, at)
        .expiring_at(at + time::Duration::days(30));
    sign_attestation(with_key_id(claim, key_id), signer).unwrap()
}

/// A refresher into a plain `Mutex<TrustedIssuers>` pinned to k1, with the clock at T0+1h.
struct Fixture {
    server: IssuerServer,
    clock: Arc<ManualClock>,
    trusted: Arc<Mutex<TrustedIssuers>>,
    refresher: IssuerRefresher,
}

impl Fixture {
    async fn new(policy: RefreshPolicy, limits: FetchLimits) -> Self {
        let server = IssuerServer::start().await;
        let clock = Arc::new(ManualClock::new(T0 + hours(1)));
        let trusted =
            Arc::new(Mutex::new(TrustedIssuers::new().trust_key(ISSUER, "k1", key(1).verifying_key()).unwrap()));
        let refresher = IssuerRefresher::new(
            IssuerSource::new(ISSUER, &server.base).unwrap(),
            IssuerFetcher::new(limits).unwrap(),
            policy,
            trusted.clone(),
            clock.clone(),
        );
        Fixture { server, clock, trusted, refresher }
    }

    fn verdict(&self, claim: &AttestationClaim) -> Result<(), AttestationRejection> {
        verify_attestation(claim, &self.trusted.lock().unwrap(), self.clock.now_utc()).map(|_| ())
    }
}

#[tokio::test]
async fn a_rotated_key_is_picked_up_on_refresh_and_the_chain_carries_on_with_it() {
    let f = Fixture::new(RefreshPolicy::default(), FetchLimits::default()).await;
    let (k1, k2) = (key(1), key(2));
    f.server.keys(&key_set(T0, vec![published("k1", &k1, T0, None)], "k1", &k1));
    f.server.revocations(&revocations(T0 + hours(1), &[], "k1", &k1));
    f.refresher.refresh().await.unwrap();
    let by_k1 = attestation(T0 + hours(1), "reasoning", "k1", &k1);
    f.verdict(&by_k1).unwrap();

    // The issuer rotates: k2 from T0+2h, k1 until T0+48h, announced by k1; the next list is signed by k2.
    f.clock.set(T0 + hours(3));
    let by_k2 = attestation(T0 + hours(3), "summarize", "k2", &k2);
    assert_eq!(f.verdict(&by_k2), Err(AttestationRejection::UnknownKey("k2".into())), "not yet refreshed");
    let rotated = vec![published("k1", &k1, T0, Some(T0 + hours(48))), published("k2", &k2, T0 + hours(2), None)];
    f.server.keys(&key_set(T0 + hours(2), rotated.clone(), "k1", &k1));
    f.server.revocations(&revocations(T0 + hours(3), &[], "k2", &k2));
    f.refresher.refresh().await.unwrap();
    f.verdict(&by_k2).unwrap();
    f.verdict(&by_k1).unwrap();

    // Past k1's window only k2 signs key sets; a set k1 still signs is refused, and what was accepted stays.
    f.clock.set(T0 + hours(50));
    f.server.keys(&key_set(T0 + hours(50), rotated.clone(), "k1", &k1));
    f.server.revocations(&revocations(T0 + hours(50), &[], "k2", &k2));
    let refused = f.refresher.refresh().await.unwrap_err();
    assert!(
        matches!(&refused, Error::IssuerRefused { document: IssuerDocument::KeySet, error: IssuerDocumentError::UnknownSigner(k), .. } if k == "k1"),
        "{refused}"
    );
    f.server.keys(&key_set(T0 + hours(50), vec![published("k2", &k2, T0 + hours(2), None)], "k2", &k2));
    f.refresher.refresh().await.unwrap();
    f.verdict(&by_k2).unwrap();
    assert_eq!(f.refresher.status().consecutive_failures, 0);
}

#[tokio::test]
async fn a_revocation_published_later_stops_the_attestation_counting_in_the_registry_after_the_refresh() {
    let server = IssuerServer::start().await;
    let k1 = key(1);
    let clock = Arc::new(ManualClock::new(T0 + hours(1)));
    let trusted = TrustedIssuers::new().trust_key(ISSUER, "k1", k1.verifying_key()).unwrap();
    let config = RegistryConfig { trusted_issuers: trusted, ..RegistryConfig::default() };
    let factory = Arc::new(SchemeDispatcher::new()) as Arc<dyn TransportFactory>;
    let registry = Arc::new(Registry::new(config, factory, clock.clone()).unwrap());
    let mut card = IdentityCard::new(DelegateId::new(SUBJECT).unwrap(), "solid", "sim", "1");
    card.capabilities
        .push(Capability::new("reasoning").with_quality(Score::new(0.5).unwrap(), CardClaimType::SelfClaimed));
    registry.add_card(card, None).unwrap();
    let basis = || registry.with_router(|r| r.assess(SUBJECT, "reasoning", clock.now_utc()).unwrap().basis);

    let refresher = IssuerRefresher::new(
        IssuerSource::new(ISSUER, &server.base).unwrap(),
        IssuerFetcher::new(FetchLimits::default()).unwrap(),
        RefreshPolicy::default(),
        registry.clone(),
        clock.clone(),
    );
    let claim = attestation(T0 + hours(1), "reasoning", "k1", &k1);
    // Revocations are required from the refresher's start: before the first refresh the attestation waits.
    let registered = registry.add_attestation(claim.clone()).unwrap();
    assert_eq!(registered.ignored[0].reason, AttestationRejection::RevocationsStale(ISSUER.into()));
    assert_eq!(basis(), Some(ClaimType::SelfClaimed));

    server.keys(&key_set(T0, vec![published("k1", &k1, T0, None)], "k1", &k1));
    server.revocations(&revocations(T0 + hours(1), &[], "k1", &k1));
    refresher.refresh().await.unwrap();
    assert_eq!(basis(), Some(ClaimType::IssuerAttested), "the refresh re-verified the registry's attestations");

    // The issuer revokes it; until the router refreshes, it still counts.
    clock.set(T0 + hours(2));
    server.revocations(&revocations(T0 + hours(2), &[&claim], "k1", &k1));
    assert_eq!(basis(), Some(ClaimType::IssuerAttested));
    refresher.refresh().await.unwrap();
    assert_eq!(basis(), Some(ClaimType::SelfClaimed));
    let verdict = verify_attestation(&claim, &registry.trusted_issuers(), clock.now_utc());
    assert!(matches!(verdict, Err(AttestationRejection::Revoked(_))), "{verdict:?}");
}

#[tokio::test]
async fn an_issuer_gone_dark_stops_counting_within_the_freshness_bound_and_the_refresher_wakes_for_it() {
    let bound = Duration::from_secs(3600);
    let policy = RefreshPolicy::with_max_revocation_age(bound)
        .intervals(Duration::from_secs(10), Duration::from_secs(7200))
        .retries(Duration::from_secs(60), Duration::from_secs(7200));
    let mut f = Fixture::new(policy, FetchLimits::default()).await;
    let k1 = key(1);
    f.server.keys(&key_set(T0, vec![published("k1", &k1, T0, None)], "k1", &k1));
    // Due again in 24 h, but the router's bound is 1 h.
    f.server.revocations(&revocations(T0 + hours(1), &[], "k1", &k1));
    f.refresher.refresh().await.unwrap();
    let claim = attestation(T0 + hours(1), "reasoning", "k1", &k1);
    f.verdict(&claim).unwrap();
    // Next refresh halfway to staleness: 30 min.
    assert_eq!(f.refresher.next_wait(), Duration::from_secs(1800));

    // The issuer goes dark: 503s, then nothing listening at all.
    f.server.publish(ISSUER_KEYS_PATH, Reply::Status(StatusCode::SERVICE_UNAVAILABLE));
    f.clock.advance(Duration::from_secs(1800));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerStatus { status: 503, .. }), "{error}");
    f.verdict(&claim).unwrap(); // the last good list is still fresh
    assert_eq!(f.refresher.next_wait(), Duration::from_secs(60), "first retry after retry_initial");
    f.clock.advance(Duration::from_secs(60));
    assert!(f.refresher.refresh().await.is_err());
    assert_eq!(f.refresher.next_wait(), Duration::from_secs(120), "backoff doubles");
    f.clock.advance(Duration::from_secs(1560));
    assert!(f.refresher.refresh().await.is_err());
    // 240 s of backoff would overshoot staleness (in 180 s): the refresher wakes when the list goes stale.
    assert_eq!(f.refresher.next_wait(), Duration::from_secs(180));
    f.verdict(&claim).unwrap();

    let base = f.server.base.clone();
    f.server.task.abort();
    let _ = (&mut f.server.task).await; // nothing listens any more
    f.clock.advance(Duration::from_secs(181));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerFetch { .. } | Error::IssuerStatus { .. }), "{error} ({base})");
    assert_eq!(f.verdict(&claim), Err(AttestationRejection::RevocationsStale(ISSUER.into())));
    let status = f.refresher.status();
    assert_eq!(status.consecutive_failures, 4);
    assert_eq!(status.last_success, Some(T0 + hours(1)));
}

#[tokio::test]
async fn oversize_garbage_slow_foreign_and_forged_documents_are_typed_errors_and_the_last_good_state_stays() {
    let limits = FetchLimits::new(Duration::from_millis(500), 64 * 1024);
    let f = Fixture::new(RefreshPolicy::default(), limits).await;
    let (k1, k9) = (key(1), key(9));
    let kept = attestation(T0 + hours(1), "reasoning", "k1", &k1);
    let revoked = attestation(T0 + hours(1), "summarize", "k1", &k1);
    let good_keys = key_set(T0, vec![published("k1", &k1, T0, None)], "k1", &k1);
    let good_list = revocations(T0 + hours(1), &[&revoked], "k1", &k1);
    f.server.keys(&good_keys);
    f.server.revocations(&good_list);
    f.refresher.refresh().await.unwrap();
    let unchanged = |f: &Fixture| {
        f.verdict(&kept).unwrap();
        assert!(matches!(f.verdict(&revoked), Err(AttestationRejection::Revoked(_))));
    };
    unchanged(&f);
    let list_json = serde_json::to_string(&good_list).unwrap();

    // Over the size bound, announced by Content-Length and streamed without one.
    let padded = format!("{list_json}{}", " ".repeat(64 * 1024));
    f.server.publish(REVOCATIONS_PATH, Reply::Json(padded));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(
        matches!(&error, Error::IssuerTooLarge { limit: 65_536, url } if url.ends_with(REVOCATIONS_PATH)),
        "{error}"
    );
    f.server.publish(REVOCATIONS_PATH, Reply::Streamed(200 * 1024));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerTooLarge { .. }), "{error}");
    unchanged(&f);

    // Not JSON; JSON of the wrong shape; a member given twice.
    for garbage in ["<html>moved</html>", r#"{"issuer_id": 7}"#, &list_json.replacen('{', r#"{"signed_by":"k9","#, 1)] {
        f.server.publish(REVOCATIONS_PATH, Reply::Json(garbage.to_owned()));
        let error = f.refresher.refresh().await.unwrap_err();
        assert!(matches!(&error, Error::IssuerMalformed { document: IssuerDocument::Revocations, .. }), "{error}");
    }
    unchanged(&f);

    // Slower than the timeout.
    f.server.publish(REVOCATIONS_PATH, Reply::Slow(Duration::from_secs(3), list_json.clone()));
    let started = std::time::Instant::now();
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerTimeout { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2), "the timeout cut it short");
    unchanged(&f);

    // Another issuer's list; a list signed by a key the router does not trust; a tampered list; an older list
    // (a replay that would undo the revocation).
    let mut foreign = good_list.clone();
    foreign.issuer_id = "ldp:issuer:other".into();
    f.server.revocations(&foreign);
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerMismatch { actual, .. } if actual == "ldp:issuer:other"), "{error}");
    f.server.revocations(&revocations(T0 + hours(2), &[], "k9", &k9));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(
        matches!(&error, Error::IssuerRefused { error: IssuerDocumentError::UnknownSigner(k), .. } if k == "k9"),
        "{error}"
    );
    let mut tampered = revocations(T0 + hours(2), &[&revoked], "k1", &k1);
    tampered.revoked_attestations.clear();
    f.server.revocations(&tampered);
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerRefused { error: IssuerDocumentError::BadSignature, .. }), "{error}");
    f.server.revocations(&revocations(T0, &[], "k1", &k1));
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerRefused { error: IssuerDocumentError::Stale, .. }), "{error}");
    // A missing document.
    f.server.published.lock().unwrap().remove(REVOCATIONS_PATH);
    let error = f.refresher.refresh().await.unwrap_err();
    assert!(matches!(&error, Error::IssuerStatus { status: 404, .. }), "{error}");
    unchanged(&f);
    let status = f.refresher.status();
    assert_eq!(status.consecutive_failures, 11);
    assert_eq!(status.revocations.as_ref(), Some(&good_list));

    // Good documents again: accepted, the failure count reset.
    f.server.revocations(&good_list);
    f.refresher.refresh().await.unwrap();
    assert_eq!(f.refresher.status().consecutive_failures, 0);
    unchanged(&f);
}

#[test]
fn a_base_url_must_be_http_or_https_and_keeps_its_path() {
    let source = IssuerSource::new(ISSUER, "https://evals.example/issuers/evals/").unwrap();
    assert_eq!(
        source.url(IssuerDocument::KeySet).as_str(),
        "https://evals.example/issuers/evals/.well-known/ldp-issuer-keys"
    );
    for bad in ["ftp://evals.example", "evals.example", "https://evals.example/?x=1", "file:///etc/passwd"] {
        assert!(matches!(IssuerSource::new(ISSUER, bad), Err(Error::IssuerUrl { .. })), "{bad}");
    }
}

#[tokio::test]
async fn the_spawned_refresher_picks_up_a_revocation_on_its_own_schedule() {
    let policy = RefreshPolicy::default()
        .intervals(Duration::from_millis(50), Duration::from_millis(100))
        .retries(Duration::from_millis(50), Duration::from_millis(100));
    let f = Fixture::new(policy, FetchLimits::default()).await;
    let k1 = key(1);
    let claim = attestation(T0 + hours(1), "reasoning", "k1", &k1);
    f.server.keys(&key_set(T0, vec![published("k1", &k1, T0, None)], "k1", &k1));
    f.server.revocations(&revocations(T0 + hours(1), &[], "k1", &k1));
    let Fixture { server, clock, trusted, refresher } = f;
    let task = refresher.spawn();
    let verdict = || verify_attestation(&claim, &trusted.lock().unwrap(), clock.now_utc()).map(|_| ());
    within("the first refresh", || verdict().is_ok()).await;
    clock.set(T0 + hours(2));
    server.revocations(&revocations(T0 + hours(2), &[&claim], "k1", &k1));
    within("the revocation", || matches!(verdict(), Err(AttestationRejection::Revoked(_)))).await;
    task.abort();
}

async fn within(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
