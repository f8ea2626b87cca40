//! JWT bearer tokens (RFC 7519) issued by an identity provider: [`JwtAuth`] validates an access token against the
//! issuer's published keys and maps its claims to the peer it authenticates, beside the static token table of
//! [`BearerAuth`](crate::BearerAuth).
//!
//! What a token must pass, in this order, each failure its own [`TokenError`]:
//!
//! 1. size: at most [`JwtConfig::max_token_bytes`], before anything is decoded ([`TokenError::Oversized`]);
//! 2. shape: three base64url parts, a JSON header ([`TokenError::Malformed`]);
//! 3. algorithm: in [`JwtConfig::algorithms`] (never `none`, never an HMAC one: the keys are public)
//!    ([`TokenError::AlgorithmNotAllowed`]);
//! 4. key: the JWKS key its `kid` names, whose type must fit the algorithm, so that an RSA public key is never used
//!    as an HMAC secret ([`TokenError::UnknownKey`], [`TokenError::AlgorithmNotAllowed`]);
//! 5. signature ([`TokenError::BadSignature`]), then `exp`, `nbf` (with [`JwtConfig::leeway`]), `iss`, `aud`;
//! 6. the claims the mapping needs, and the scopes every request needs ([`TokenError::MissingScope`]).
//!
//! Keys come from a JWKS URL or the issuer's OIDC discovery document (`jwks_uri`). They are cached; refetched on a
//! schedule ([`JwtConfig::refresh_interval`]) and when a token names a key the cache does not hold, at most once per
//! [`JwtConfig::min_refetch_interval`], so that tokens with made-up key ids cannot make the server hammer the
//! issuer. A key the issuer stops publishing is dropped at the next refetch; tokens it signed are then refused.
//!
//! Nothing about a token is logged or echoed: a refusal names the check that failed, never the token or its claims.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
// The signature algorithms by their registered names, as the lists below and JOSE headers write them.
use jsonwebtoken::Algorithm::{ES256, ES384, EdDSA, PS256, PS384, PS512, RS256, RS384, RS512};
use ldp_session::{AuthenticatedPeer, PeerContext};
use serde_json::{Map, Value};

/// The algorithms accepted by default: the asymmetric ones identity providers sign access tokens with.
pub const DEFAULT_ALGORITHMS: &[Algorithm] = &[RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA];

/// The algorithms an RSA key verifies.
const RSA_FAMILY: &[Algorithm] = &[RS256, RS384, RS512, PS256, PS384, PS512];

/// The default bound on a token's length: real access tokens are 1-2 KiB; a larger one is refused unread.
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The most keys taken from one JWKS document (the rest are ignored): a key set is a handful of keys, and each
/// costs memory and, for tokens without a `kid`, a verification.
const MAX_KEYS: usize = 32;

/// The largest JWKS or discovery document read.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// How a JWT's issuer, keys and claims are configured.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JwtConfig {
    /// The issuer (`iss`) every token must name, e.g. `https://id.example.com/realms/agents`. Without
    /// [`JwtConfig::jwks_url`], the keys are found through `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// Where the issuer publishes its keys (a JWK Set); `None` to use the discovery document's `jwks_uri`.
    pub jwks_url: Option<String>,
    /// The audiences accepted: a token's `aud` must contain one of them (required: a token issued for another
    /// service must not open this one).
    pub audiences: Vec<String>,
    /// The algorithms accepted (default [`DEFAULT_ALGORITHMS`]). HMAC ones are refused whatever this says: the
    /// keys are public, so a secret derived from them proves nothing.
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf` (default 60 s).
    pub leeway: Duration,
    /// Longest token accepted, in bytes (default [`DEFAULT_MAX_TOKEN_BYTES`]).
    pub max_token_bytes: usize,
    /// How often the keys are refetched (default 10 min).
    pub refresh_interval: Duration,
    /// The least time between two refetches caused by tokens naming an unknown key (default 30 s).
    pub min_refetch_interval: Duration,
    /// Longest wait for the issuer when fetching keys (default 5 s).
    pub fetch_timeout: Duration,
    /// The claim naming the principal sessions, quotas and rate limits are bound to (default `sub`).
    pub principal_claim: String,
    /// The trust domain of every token's holder, unless [`JwtConfig::trust_domain_claim`] names one.
    pub trust_domain: String,
    /// A claim holding the holder's trust domain (then required in every token); default none.
    pub trust_domain_claim: Option<String>,
    /// A claim holding the holder's delegate id (e.g. `client_id` or `azp`); default none (any delegate id).
    pub delegate_id_claim: Option<String>,
    /// Scopes every token must grant, whatever it asks for (default none).
    pub required_scopes: Vec<String>,
}

impl JwtConfig {
    /// Tokens of `issuer` for `audience`, their holders in `trust_domain`, keys found by OIDC discovery; the other
    /// settings at their defaults.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, trust_domain: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            jwks_url: None,
            audiences: vec![audience.into()],
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: Duration::from_secs(60),
            max_token_bytes: DEFAULT_MAX_TOKEN_BYTES,
            refresh_interval: Duration::from_secs(600),
            min_refetch_interval: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(5),
            principal_claim: "sub".to_owned(),
            trust_domain: trust_domain.into(),
            trust_domain_claim: None,
            delegate_id_claim: None,
            required_scopes: Vec::new(),
        }
    }
}

/// Why a bearer token was refused. The message names the check, never the token or a claim's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token is longer than the limit.
    #[error("token longer than {limit} bytes")]
    Oversized {
        /// The limit in bytes.
        limit: usize,
    },
    /// The token is not a JWT (three base64url parts with a JSON header and claims).
    #[error("malformed token")]
    Malformed,
    /// The token's algorithm is not allowed (`none`, HMAC, one not configured), or does not fit its key's type.
    #[error("token algorithm not allowed")]
    AlgorithmNotAllowed,
    /// The token names a key (`kid`) the issuer does not publish, or no published key fits it.
    #[error("token signed by an unknown key")]
    UnknownKey,
    /// The signature does not verify with the issuer's key.
    #[error("bad token signature")]
    BadSignature,
    /// `exp` is past (beyond the allowed skew).
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future (beyond the allowed skew).
    #[error("token not yet valid")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("token from the wrong issuer")]
    WrongIssuer,
    /// `aud` names none of the configured audiences.
    #[error("token for the wrong audience")]
    WrongAudience,
    /// A claim the configuration needs is absent or not a string.
    #[error("token lacks the claim {0:?}")]
    MissingClaim(String),
    /// The token does not grant a scope this request needs.
    #[error("token lacks the scope {0:?}")]
    MissingScope(String),
}

impl TokenError {
    /// The OAuth error code of the refusal (RFC 6750 section 3.1): `insufficient_scope` or `invalid_token`.
    pub fn oauth_error(&self) -> &'static str {
        match self {
            Self::MissingScope(_) => "insufficient_scope",
            _ => "invalid_token",
        }
    }
}

/// The reasons fetching the issuer's keys failed (a setup or refresh failure, not a peer's fault).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFetchError {
    /// The configuration cannot work (no audience, an HMAC algorithm, a URL that is not http(s)).
    #[error("jwt configuration: {0}")]
    Config(&'static str),
    /// The issuer could not be reached or answered an error status.
    #[error("fetching {url}: {source}")]
    Http {
        /// The document's URL.
        url: String,
        /// The failure.
        #[source]
        source: reqwest::Error,
    },
    /// The document is too large or not the JSON expected.
    #[error("{url}: {why}")]
    Document {
        /// The document's URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
}

/// One published key and the algorithms it may verify.
struct Key {
    decoding: DecodingKey,
    /// The algorithms of its type (and its `alg`, when the JWK names one).
    algorithms: Vec<Algorithm>,
}

/// The keys of one fetch: by `kid`, and those published without one.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    anonymous: Vec<Arc<Key>>,
}

/// Validates JWT bearer tokens against an issuer's keys. Cheap to clone (shared cache).
#[derive(Clone)]
pub struct JwtAuth {
    inner: Arc<Inner>,
}

struct Inner {
    config: JwtConfig,
    keys: RwLock<Arc<KeySet>>,
    /// When the keys were last refetched for an unknown `kid` (successfully or not), for its rate limit; held
    /// across every fetch so that concurrent requests with a new key wait for one fetch instead of each starting their own.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
    http: reqwest::Client,
    /// The JWKS URL, once known (configured, or read from the discovery document).
    jwks_url: RwLock<Option<String>>,
    /// Whether the scheduled refetch runs: started by [`JwtAuth::start`], or by the first validation of a validator
    /// made with [`JwtAuth::new`] (which may be made outside a runtime).
    scheduled: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtAuth").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// The algorithms a JWK's type allows: its type decides the family, so no token can pick a family of its own. A
/// key published for encryption, or naming an algorithm outside its type's family, verifies nothing.
fn algorithms_of(jwk: &Jwk, allowed: &[Algorithm]) -> Vec<Algorithm> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))) {
        return Vec::new();
    }
    let family: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RSA_FAMILY,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => &[ES256],
            EllipticCurve::P384 => &[ES384],
            _ => &[],
        },
        AlgorithmParameters::OctetKeyPair(_) => &[EdDSA],
        // A symmetric key has no place in a public key set.
        AlgorithmParameters::OctetKey(_) => &[],
    };
    let named = match jwk.common.key_algorithm {
        None => None,
        Some(named) => match signature_algorithm(named) {
            Some(alg) => Some(alg),
            None => return Vec::new(),
        },
    };
    family.iter().copied().filter(|a| allowed.contains(a) && named.is_none_or(|n| n == *a)).collect()
}

/// The signature algorithm a JWK's `alg` names, or `None` for an encryption one.
fn signature_algorithm(named: KeyAlgorithm) -> Option<Algorithm> {
    Some(match named {
        KeyAlgorithm::HS256 => Algorithm::HS256,
        KeyAlgorithm::HS384 => Algorithm::HS384,
        KeyAlgorithm::HS512 => Algorithm::HS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        KeyAlgorithm::RSA1_5 | KeyAlgorithm::RSA_OAEP | KeyAlgorithm::RSA_OAEP_256 => return None,
    })
}

/// The header members read before verification.
#[derive(serde::Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
}

/// The header of `token`, read without trusting it: only to choose the key and check the algorithm.
fn read_header(token: &str) -> Result<(Algorithm, Option<String>), TokenError> {
    use base64::Engine;
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let base64url = |part: &str| part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !base64url(claims) || !base64url(signature) {
        return Err(TokenError::Malformed);
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).map_err(|_| TokenError::Malformed)?;
    let raw: RawHeader = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    // `none` and the HMAC family are not parsed as allowed whatever the configuration says.
    let alg: Algorithm = raw.alg.parse().map_err(|_| TokenError::AlgorithmNotAllowed)?;
    if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(TokenError::AlgorithmNotAllowed);
    }
    Ok((alg, raw.kid))
}

impl JwtAuth {
    /// A validator for `config`, its keys not fetched yet (see [`JwtAuth::start`]).
    pub fn new(config: JwtConfig) -> Result<Self, KeyFetchError> {
        if config.audiences.is_empty() {
            return Err(KeyFetchError::Config("at least one audience is required"));
        }
        if config.algorithms.iter().any(|a| matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)) {
            return Err(KeyFetchError::Config("HMAC algorithms cannot be used with published keys"));
        }
        let url = config.jwks_url.as_deref().unwrap_or(&config.issuer);
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(KeyFetchError::Config("the issuer and the JWKS URL must be http(s) URLs"));
        }
        let http = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .build()
            .map_err(|source| KeyFetchError::Http { url: url.to_owned(), source })?;
        Ok(Self {
            inner: Arc::new(Inner {
                jwks_url: RwLock::new(config.jwks_url.clone()),
                config,
                keys: RwLock::new(Arc::new(KeySet::default())),
                last_fetch: tokio::sync::Mutex::new(None),
                http,
                scheduled: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// A validator for `config` with its keys fetched, refetched every [`JwtConfig::refresh_interval`] by a task
    /// that ends when the last clone of the validator is dropped. Must be called within a tokio runtime.
    pub async fn start(config: JwtConfig) -> Result<Self, KeyFetchError> {
        let auth = Self::new(config)?;
        auth.refresh().await?;
        auth.schedule_refresh();
        Ok(auth)
    }

    /// Starts the scheduled refetch, once, when called within a tokio runtime; the task ends when the last clone of
    /// the validator is dropped.
    fn schedule_refresh(&self) {
        use std::sync::atomic::Ordering;
        if self.inner.scheduled.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if !self.inner.scheduled.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(&self.inner);
            runtime.spawn(refresh_periodically(weak, self.inner.config.refresh_interval));
        }
    }

    /// The configuration.
    pub fn config(&self) -> &JwtConfig {
        &self.inner.config
    }

    /// Fetches the keys now (the discovery document first, when no JWKS URL is configured) and replaces the
    /// cached set. On failure the cached keys stay in use.
    pub async fn refresh(&self) -> Result<(), KeyFetchError> {
        // Serialised with the unknown-key refetches, but not counted against their rate: a scheduled fetch must not
        // delay accepting a key the issuer rotated in right after it.
        let _serial = self.inner.last_fetch.lock().await;
        self.fetch().await
    }

    /// Refetches the keys after a token named an unknown key, unless a fetch happened within
    /// [`JwtConfig::min_refetch_interval`]; whether the keys were fetched.
    pub async fn refresh_for_unknown_key(&self) -> bool {
        let mut last = self.inner.last_fetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.inner.config.min_refetch_interval) {
            return false;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "refetching the token issuer's keys failed; the cached keys stay in use");
                false
            }
        }
    }

    async fn fetch(&self) -> Result<(), KeyFetchError> {
        let known = self.inner.jwks_url.read().map(|u| u.clone()).unwrap_or_default();
        let url = match known {
            Some(url) => url,
            None => {
                let discovery =
                    format!("{}/.well-known/openid-configuration", self.inner.config.issuer.trim_end_matches('/'));
                let doc = self.get_json(&discovery).await?;
                let url = doc
                    .get("jwks_uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| KeyFetchError::Document { url: discovery.clone(), why: "no jwks_uri".to_owned() })?;
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(KeyFetchError::Document {
                        url: discovery,
                        why: "jwks_uri is not an http(s) URL".into(),
                    });
                }
                if let Ok(mut slot) = self.inner.jwks_url.write() {
                    *slot = Some(url.to_owned());
                }
                url.to_owned()
            }
        };
        let doc = self.get_json(&url).await?;
        // Key by key, so that one key of a type this crate does not know leaves the others usable.
        let Some(Value::Array(published)) = doc.get("keys") else {
            return Err(KeyFetchError::Document { url, why: "not a JWK Set (no keys array)".to_owned() });
        };
        let mut keys = KeySet::default();
        for jwk in published.iter().take(MAX_KEYS) {
            let Ok(jwk) = serde_json::from_value::<Jwk>(jwk.clone()) else { continue };
            let jwk = &jwk;
            let algorithms = algorithms_of(jwk, &self.inner.config.algorithms);
            if algorithms.is_empty() {
                continue;
            }
            let Ok(decoding) = DecodingKey::from_jwk(jwk) else { continue };
            let key = Arc::new(Key { decoding, algorithms });
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), key);
                }
                None => keys.anonymous.push(key),
            }
        }
        tracing::debug!(keys = keys.by_kid.len() + keys.anonymous.len(), "token issuer's keys fetched");
        if let Ok(mut slot) = self.inner.keys.write() {
            *slot = Arc::new(keys);
        }
        Ok(())
    }

    async fn get_json(&self, url: &str) -> Result<Value, KeyFetchError> {
        let http = |source| KeyFetchError::Http { url: url.to_owned(), source };
        let mut resp = self.inner.http.get(url).send().await.map_err(http)?.error_for_status().map_err(http)?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(KeyFetchError::Document {
                    url: url.to_owned(),
                    why: format!("larger than {MAX_DOCUMENT_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body)
            .map_err(|e| KeyFetchError::Document { url: url.to_owned(), why: format!("not JSON: {e}") })
    }

    /// The peer `token` authenticates, judged with the cached keys (no IO): the trust domain and delegate id its
    /// claims map to, the principal `jwt:<principal claim>`, its scopes.
    pub fn validate(&self, token: &str) -> Result<PeerContext, TokenError> {
        // A validator made with `new` (for `app`, perhaps outside a runtime) starts its schedule here.
        self.schedule_refresh();
        let config = &self.inner.config;
        if token.len() > config.max_token_bytes {
            return Err(TokenError::Oversized { limit: config.max_token_bytes });
        }
        let (alg, kid) = read_header(token)?;
        if !config.algorithms.contains(&alg) {
            return Err(TokenError::AlgorithmNotAllowed);
        }
        let keys = self.inner.keys.read().map(|k| Arc::clone(&k)).map_err(|_| TokenError::UnknownKey)?;
        let candidates: Vec<&Arc<Key>> = match &kid {
            Some(kid) => keys.by_kid.get(kid).into_iter().collect(),
            None => keys.anonymous.iter().filter(|k| k.algorithms.contains(&alg)).collect(),
        };
        let first = candidates.first().ok_or(TokenError::UnknownKey)?;
        if !first.algorithms.contains(&alg) {
            return Err(TokenError::AlgorithmNotAllowed);
        }
        let mut validation = Validation::new(alg);
        validation.leeway = config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&config.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let mut last = TokenError::UnknownKey;
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
                Ok(data) => return self.peer_of(&data.claims),
                Err(e) => last = token_error(&e),
            }
        }
        Err(last)
    }

    /// The peer the verified `claims` map to.
    fn peer_of(&self, claims: &Map<String, Value>) -> Result<PeerContext, TokenError> {
        let config = &self.inner.config;
        let string = |name: &str| -> Result<String, TokenError> {
            claims.get(name).and_then(Value::as_str).map(str::to_owned).ok_or(TokenError::MissingClaim(name.to_owned()))
        };
        let principal = string(&config.principal_claim)?;
        let trust_domain = match &config.trust_domain_claim {
            Some(claim) => string(claim)?,
            None => config.trust_domain.clone(),
        };
        let delegate_id = match &config.delegate_id_claim {
            Some(claim) => claims.get(claim).and_then(Value::as_str).map(str::to_owned),
            None => None,
        };
        let scopes = scopes_of(claims);
        if let Some(missing) = config.required_scopes.iter().find(|s| !scopes.contains(s)) {
            return Err(TokenError::MissingScope(missing.clone()));
        }
        Ok(PeerContext {
            authenticated: Some(AuthenticatedPeer { delegate_id, trust_domain }),
            principal: Some(format!("jwt:{principal}").into()),
            scopes: Some(scopes.into()),
            ..PeerContext::default()
        })
    }
}

/// The scopes a token grants: `scope` (space-separated, RFC 8693 and RFC 9068) or `scp` (a list or a string, as
/// some providers write it).
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let words = |s: &str| s.split_ascii_whitespace().map(str::to_owned).collect::<Vec<_>>();
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => words(s),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The refusal for a `jsonwebtoken` failure.
fn token_error(e: &jsonwebtoken::errors::Error) -> TokenError {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => TokenError::Expired,
        K::ImmatureSignature => TokenError::NotYetValid,
        K::InvalidIssuer => TokenError::WrongIssuer,
        K::InvalidAudience => TokenError::WrongAudience,
        K::InvalidAlgorithm | K::InvalidAlgorithmName | K::MissingAlgorithm => TokenError::AlgorithmNotAllowed,
        K::MissingRequiredClaim(claim) => TokenError::MissingClaim(claim.clone()),
        K::InvalidToken | K::Base64(_) | K::Json(_) | K::Utf8(_) => TokenError::Malformed,
        // The signature, or a key that cannot verify it (a malformed published key).
        _ => TokenError::BadSignature,
    }
}

/// Refetches the keys every `interval` while the validator lives.
async fn refresh_periodically(inner: Weak<Inner>, interval: Duration) {
    let interval = interval.max(Duration::from_secs(1));
    loop {
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else { return };
        let auth = JwtAuth { inner };
        if let Err(e) = auth.refresh().await {
            tracing::warn!(error = %e, "refreshing the token issuer's keys failed; the cached keys stay in use");
        }
    }
}
