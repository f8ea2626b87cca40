//! The configuration mapped onto each layer that owns a rule: the responder's trust, signatures and limits; the
//! HTTP edge's tokens, connection caps and rate limit; the WebSocket binding; TLS; the store; the bridges' routes.

use std::collections::HashMap;
use std::time::Duration;

use ldp_session::runtime::DelegateRuntime;
use ldp_session::{AuthenticatedPeer, HeldLimits, ReplayConfig, ResponderConfig, SecurityConfig, TrustPolicy};
use ldp_transport_http::{
    ConnectionLimits, HttpServerConfig, HttpState, JWT_ALGORITHMS, JwtAuth, JwtConfig, ProtectedResource,
};
#[cfg(feature = "tls")]
use ldp_types::DelegateId;
use ldp_types::IdentityCard;
use ldp_types::signing::{SignatureAlgorithm, SigningKey};

use serde::Deserialize as _;

use crate::Error;
use crate::config::{IdentityConfig, ServerConfig, SigningAlgorithm};

/// The trust domain and trusted peers of the configuration, on a card.
pub(super) fn apply_identity(card: &mut IdentityCard, identity: &IdentityConfig) {
    if let Some(domain) = &identity.trust_domain {
        card.trust_domain.name.clone_from(domain);
    }
    for peer in &identity.trusted_peers {
        card.trust_domain = card.trust_domain.clone().trusting(peer.clone());
    }
}

/// Publishes `identity.attestations` on the card (`extra.attestations`, where routers look for them). Each file must
/// hold an attestation about this delegate and one of its skills: one that no router could use fails the start
/// rather than being ignored by every router. Signatures are the routers' to check, against keys they trust.
pub(super) fn publish_attestations(card: &mut IdentityCard, identity: &IdentityConfig) -> Result<(), Error> {
    let mut published = Vec::new();
    for path in &identity.attestations {
        let bad = |source: Box<dyn std::error::Error + Send + Sync>| Error::Setup {
            key: "identity.attestations".to_owned(),
            source: format!("{}: {source}", path.display()).into(),
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.into()))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.into()))?;
        let claim = ldp_router::AttestationClaim::deserialize(&value).map_err(|e| bad(e.into()))?;
        if claim.subject != card.delegate_id.as_str() {
            return Err(bad(format!("attests {}, not this delegate ({})", claim.subject, card.delegate_id).into()));
        }
        if !card.capabilities.iter().any(|c| c.name == claim.skill) {
            return Err(bad(format!("attests the skill {:?}, which this delegate does not offer", claim.skill).into()));
        }
        // The file's own JSON, not a re-encoding: the signature covers exactly what the issuer wrote.
        published.push(value);
    }
    if !published.is_empty() {
        card.extra.insert("attestations".to_owned(), serde_json::Value::Array(published));
    }
    Ok(())
}

/// The session layer's configuration: trust, signatures, receipts and every protocol limit.
pub(super) fn responder_config(
    card: IdentityCard,
    config: &ServerConfig,
    banner: &mut Vec<String>,
) -> Result<ResponderConfig, Error> {
    let mut cfg = ResponderConfig::new(card);
    // Without tokens or client certificates a declared domain is taken at its word (reference behaviour, for
    // development); with them only the authenticated domain counts.
    cfg.trust = if config.authenticates() {
        TrustPolicy::strict()
    } else {
        TrustPolicy::permissive(&cfg.card.trust_domain.name)
    };
    if let (Some(algorithm), Some(secret)) = (config.signing.algorithm, &config.signing.secret) {
        let bad = |source: ldp_types::Error| Error::Setup { key: "signing.secret".to_owned(), source: source.into() };
        match algorithm {
            SigningAlgorithm::HmacSha256 | SigningAlgorithm::HmacSha256Jcs => {
                let alg = if algorithm == SigningAlgorithm::HmacSha256 {
                    SignatureAlgorithm::HmacSha256
                } else {
                    SignatureAlgorithm::HmacSha256Jcs
                };
                cfg.security = SecurityConfig::symmetric(SigningKey::shared_secret(alg, secret).map_err(bad)?);
                // hmac-sha256 exists to talk to the reference SDKs, whose PyPI version signs without a nonce.
                cfg.hmac_sha256_nonce = algorithm != SigningAlgorithm::HmacSha256;
            }
            SigningAlgorithm::Ed25519Jcs => {
                let key = SigningKey::ed25519_from_hex(secret).map_err(bad)?;
                if let Some(public) = key.verifying_key().public_hex() {
                    banner
                        .push(format!("ed25519 public key {public} (requests are not verified: peers' keys unknown)"));
                }
                cfg.security = SecurityConfig {
                    signing_key: Some(key),
                    replay: Some(ReplayConfig::default()),
                    ..SecurityConfig::default()
                };
            }
        }
    }
    if let Some(replay) = &mut cfg.security.replay {
        replay.max_entries_per_principal = config.signing.replay_entries_per_peer;
        replay.max_entries = config.signing.replay_entries;
    }
    if let Some(seed) = &config.identity.receipt_key {
        let bad =
            |source: ldp_types::Error| Error::Setup { key: "identity.receipt_key".to_owned(), source: source.into() };
        cfg.set_receipt_key(SigningKey::ed25519_from_hex(seed).map_err(bad)?).map_err(bad)?;
    }
    cfg.skill_scopes = skill_scopes(config);
    cfg.limits.max_ttl = config.sessions.max_ttl.max(Duration::from_secs(1));
    cfg.limits.max_sessions = config.sessions.max_sessions;
    cfg.limits.max_sessions_per_principal = config.sessions.max_sessions_per_peer;
    cfg.limits.max_identifier_len = config.sessions.max_id_len;
    cfg.limits.held = HeldLimits {
        per_session_results: config.held.results_per_session,
        per_session_bytes: usize_of(config.held.bytes_per_session),
        total_results: config.held.results_total,
        total_bytes: usize_of(config.held.bytes_total),
        ttl: config.held.ttl,
        ..HeldLimits::default()
    };
    Ok(cfg)
}

/// A configured size as a `usize` (saturating on 32-bit targets).
pub(super) fn usize_of(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The bearer tokens, by token.
fn tokens(config: &ServerConfig) -> HashMap<String, AuthenticatedPeer> {
    // `units::tokens` checked every entry's shape when the configuration was read.
    config
        .auth
        .tokens
        .iter()
        .filter_map(|entry| entry.rsplit_once('='))
        .map(|(token, domain)| {
            (token.to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() })
        })
        .collect()
}

/// The HTTP edge: body and request bounds, tokens, connection limits, the rate limit and trusted proxies.
pub(super) fn http_config(config: &ServerConfig, request_timeout: Duration) -> Result<HttpServerConfig, Error> {
    let c = &config.connections;
    let secs = |d: Duration| d.max(Duration::from_secs(1));
    let rate_limit = match &c.rate_limit {
        Some(rate) => Some(rate.parse().map_err(|e: ldp_transport_http::InvalidRate| Error::Setup {
            key: "connections.rate_limit".to_owned(),
            source: e.into(),
        })?),
        None => None,
    };
    let mut trusted_proxies = Vec::new();
    for proxy in &c.trusted_proxies {
        trusted_proxies.push(
            crate::config::network(proxy)
                .map_err(|e| Error::Setup { key: "connections.trusted_proxies".to_owned(), source: e.into() })?,
        );
    }
    Ok(HttpServerConfig {
        max_body: usize_of(config.max_body),
        request_timeout,
        tokens: tokens(config),
        limits: ConnectionLimits {
            max_connections: c.max_connections.max(1),
            header_timeout: secs(c.header_timeout),
            idle_timeout: secs(c.idle_timeout),
            body_timeout: secs(c.body_timeout),
            min_head_rate: c.min_head_rate,
            min_body_rate: c.min_body_rate,
            min_rate_window: secs(c.min_rate_window),
        },
        rate_limit,
        trusted_proxies,
        // Set by `jwt` where keys can be fetched (`launch`, `app`).
        jwt: None,
        oauth: protected_resource(config),
    })
}

/// The JWT validator's settings, when `jwt.issuer` is set.
fn jwt_config(config: &ServerConfig) -> Option<JwtConfig> {
    let j = &config.jwt;
    let issuer = j.issuer.clone()?;
    let trust_domain =
        j.trust_domain.clone().or_else(|| config.identity.trust_domain.clone()).unwrap_or_else(|| "default".to_owned());
    let mut jwt = JwtConfig::new(issuer, String::new(), trust_domain);
    jwt.audiences.clone_from(&j.audiences);
    jwt.jwks_url.clone_from(&j.jwks_url);
    if !j.algorithms.is_empty() {
        // `units::jwt_algorithms` checked every name when the configuration was read.
        jwt.algorithms = JWT_ALGORITHMS.iter().copied().filter(|a| j.algorithms.contains(&format!("{a:?}"))).collect();
    }
    jwt.leeway = j.leeway;
    jwt.max_token_bytes = usize_of(j.max_token_size).max(1);
    jwt.refresh_interval = j.refresh_interval.max(Duration::from_secs(1));
    jwt.min_refetch_interval = j.min_refetch_interval;
    jwt.principal_claim.clone_from(&j.principal_claim);
    jwt.trust_domain_claim.clone_from(&j.trust_domain_claim);
    jwt.delegate_id_claim.clone_from(&j.delegate_id_claim);
    jwt.required_scopes.clone_from(&j.required_scopes);
    Some(jwt)
}

/// The JWT validator with its keys fetched (a server that cannot reach its issuer does not start), when
/// `jwt.issuer` is set.
pub(super) async fn jwt(config: &ServerConfig) -> Result<Option<JwtAuth>, Error> {
    let Some(jwt) = jwt_config(config) else { return Ok(None) };
    let setup = |e: ldp_transport_http::KeyFetchError| Error::Setup { key: "jwt.issuer".to_owned(), source: e.into() };
    JwtAuth::start(jwt).await.map(Some).map_err(setup)
}

/// The JWT validator without fetching its keys yet: the first token fetches them (for `app`, which may be called
/// outside a runtime).
pub(super) fn jwt_lazy(config: &ServerConfig) -> Result<Option<JwtAuth>, Error> {
    let Some(jwt) = jwt_config(config) else { return Ok(None) };
    let setup = |e: ldp_transport_http::KeyFetchError| Error::Setup { key: "jwt.issuer".to_owned(), source: e.into() };
    JwtAuth::new(jwt).map(Some).map_err(setup)
}

/// `NAME=SCOPE[ SCOPE...]` entries as a map (`units::scope_entries` checked their shape).
fn scope_entries(entries: &[String]) -> Vec<(String, Vec<String>)> {
    entries
        .iter()
        .filter_map(|entry| entry.split_once('='))
        .map(|(name, scopes)| (name.to_owned(), scopes.split_ascii_whitespace().map(str::to_owned).collect()))
        .collect()
}

/// The scopes each skill requires (`oauth.skill_scopes`).
pub(super) fn skill_scopes(config: &ServerConfig) -> HashMap<String, Vec<String>> {
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for (skill, scopes) in scope_entries(&config.oauth.skill_scopes) {
        map.entry(skill).or_default().extend(scopes);
    }
    map
}

/// The server as an OAuth protected resource, when `jwt.issuer` is set.
pub(super) fn protected_resource(config: &ServerConfig) -> Option<ProtectedResource> {
    let issuer = config.jwt.issuer.as_ref()?;
    let o = &config.oauth;
    let servers =
        if o.authorization_servers.is_empty() { vec![issuer.clone()] } else { o.authorization_servers.clone() };
    let mut resource = ProtectedResource::new(servers);
    resource.resource.clone_from(&o.resource);
    resource.https = config.tls.cert.is_some();
    resource.endpoint_scopes = scope_entries(&o.endpoint_scopes);
    resource.scopes_supported = if o.scopes_supported.is_empty() {
        let mut all: Vec<String> = config.jwt.required_scopes.clone();
        let named = resource
            .endpoint_scopes
            .iter()
            .chain(scope_entries(&o.skill_scopes).iter())
            .flat_map(|(_, s)| s.clone())
            .collect::<Vec<_>>();
        all.extend(named);
        all.sort();
        all.dedup();
        all
    } else {
        o.scopes_supported.clone()
    };
    Some(resource)
}

/// `CERT=[DELEGATE_ID@]DOMAIN` of a client certificate peer.
#[cfg(feature = "tls")]
pub(crate) fn parse_cert_peer(
    entry: &str,
) -> Result<(ldp_transport_http::ClientCertMatch, AuthenticatedPeer), Box<dyn std::error::Error + Send + Sync>> {
    let (cert, peer) = entry.split_once('=').ok_or("expected CERT=[DELEGATE_ID@]DOMAIN")?;
    let cert = cert.parse::<ldp_transport_http::ClientCertMatch>()?;
    let (delegate_id, domain) = match peer.rsplit_once('@') {
        Some((id, domain)) => (Some(DelegateId::new(id)?.as_str().to_owned()), domain),
        None => (None, peer),
    };
    if domain.is_empty() {
        return Err("the trust domain is empty".into());
    }
    Ok((cert, AuthenticatedPeer { delegate_id, trust_domain: domain.to_owned() }))
}

/// Without the `tls` feature a certificate peer is checked for its shape only (TLS itself is refused at start).
#[cfg(not(feature = "tls"))]
pub(crate) fn parse_cert_peer(
    entry: &str,
) -> Result<((), AuthenticatedPeer), Box<dyn std::error::Error + Send + Sync>> {
    let (_, peer) = entry.split_once('=').ok_or("expected CERT=[DELEGATE_ID@]DOMAIN")?;
    let domain = peer.rsplit_once('@').map_or(peer, |(_, d)| d);
    if domain.is_empty() {
        return Err("the trust domain is empty".into());
    }
    Ok(((), AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() }))
}

/// The server's TLS, if `tls.cert` is set.
#[cfg(feature = "tls")]
pub(super) fn tls(config: &ServerConfig) -> Result<Option<ldp_transport_http::ServerTlsConfig>, Error> {
    let t = &config.tls;
    let (Some(cert), Some(key)) = (&t.cert, &t.key) else { return Ok(None) };
    let setup =
        |key: &str, source: Box<dyn std::error::Error + Send + Sync>| Error::Setup { key: key.to_owned(), source };
    let client_auth = match &t.client_ca {
        Some(ca) => {
            let mut auth =
                ldp_transport_http::ClientAuth::from_ca_file(ca).map_err(|e| setup("tls.client_ca", e.into()))?;
            for entry in &t.client_cert_peers {
                let (cert, peer) = parse_cert_peer(entry).map_err(|e| setup("tls.client_cert_peers", e))?;
                auth = auth.peer(cert, peer);
            }
            if t.client_cert_optional {
                auth = auth.optional();
            }
            Some(auth)
        }
        None => None,
    };
    let tls = ldp_transport_http::ServerTlsConfig::from_pem_files(cert, key, client_auth)
        .map_err(|e| setup("tls.cert", e.into()))?
        .with_handshake_timeout(config.connections.header_timeout.max(Duration::from_secs(1)));
    Ok(Some(tls))
}

/// Refuses keys whose feature this build lacks, rather than serving without them (TLS in the clear, say).
pub(super) fn check_features(config: &ServerConfig) -> Result<(), Error> {
    let missing = |key: &'static str, feature: &'static str| Err(Error::FeatureMissing { key, feature });
    if config.tls.cert.is_some() && !cfg!(feature = "tls") {
        return missing("tls.cert", "tls");
    }
    if config.mcp.enabled && !cfg!(feature = "mcp") {
        return missing("mcp.enabled", "mcp");
    }
    if config.a2a.enabled && !cfg!(feature = "a2a") {
        return missing("a2a.enabled", "a2a");
    }
    if config.telemetry.otlp_endpoint.is_some() && !cfg!(feature = "otel") {
        return missing("telemetry.otlp_endpoint", "otel");
    }
    Ok(())
}

/// Opens the configured store and attaches it to the runtime. Returns the store's name and its lease renewer.
pub(super) async fn attach_store(
    runtime: &DelegateRuntime,
    config: &ServerConfig,
) -> Result<(String, Option<tokio::task::JoinHandle<()>>), Error> {
    let s = &config.store;
    let spec: ldp_store::StoreSpec = s.url.parse()?;
    let mut cfg = ldp_store::StoreConfig::new(runtime.with_card(|card| card.delegate_id.as_str().to_owned()));
    cfg.result_ttl = s.result_ttl.max(Duration::from_secs(1));
    cfg.closed_ttl = cfg.result_ttl;
    cfg.sqlite_durability = s.sqlite_durability.parse().unwrap_or_default();
    cfg.sqlite_wal_pages = s.sqlite_wal_pages.max(1);
    cfg.sqlite_mmap_bytes = s.sqlite_mmap_bytes;
    cfg.sqlite_max_bytes = s.sqlite_max_bytes;
    cfg.redis_tls = redis_tls(config)?;
    let Some(store) = ldp_store::open(&spec, cfg).await? else { return Ok(("memory".to_owned(), None)) };
    let opts = ldp_session::store::StoreOptions::new(
        s.timeout.max(Duration::from_millis(1)),
        s.task_lease.max(Duration::from_secs(1)),
    )
    .with_max_result_bytes(usize_of(s.result_max_bytes));
    let name = store.backend().to_owned();
    Ok((name, runtime.attach_store(store, opts)))
}

/// The TLS files of a `rediss://` store, read; `None` when none is given.
fn redis_tls(config: &ServerConfig) -> Result<Option<ldp_store::RedisTls>, Error> {
    let s = &config.store;
    if s.redis_ca.is_none() && s.redis_cert.is_none() {
        return Ok(None);
    }
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| Error::Setup {
            key: key.to_owned(),
            source: Box::new(FileError { path: path.to_path_buf(), source: e }),
        })
    };
    let mut tls = ldp_store::RedisTls::default();
    if let Some(ca) = &s.redis_ca {
        tls = tls.with_ca(read("store.redis_ca", ca)?);
    }
    if let (Some(cert), Some(key)) = (&s.redis_cert, &s.redis_key) {
        tls = tls.with_client_cert(read("store.redis_cert", cert)?, read("store.redis_key", key)?);
    }
    Ok(Some(tls))
}

/// A file that could not be read, named.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub(crate) struct FileError {
    pub(crate) path: std::path::PathBuf,
    pub(crate) source: std::io::Error,
}

/// The first banner line: who, whom it lets in, where it keeps state.
pub(super) fn summary(card: &IdentityCard, config: &ServerConfig, store: &str, client_auth: Option<bool>) -> String {
    let skills: Vec<&str> = card.capabilities.iter().map(|c| c.name.as_str()).collect();
    let tokens = match (config.auth.tokens.is_empty(), &config.jwt.issuer) {
        (true, None) => "no authentication".to_owned(),
        (false, None) => "bearer tokens required".to_owned(),
        (_, Some(issuer)) => format!("bearer tokens required (JWTs of {issuer})"),
    };
    let auth = match client_auth {
        Some(true) => "client certificates required".to_owned(),
        Some(false) => format!("client certificates optional, otherwise {tokens}"),
        None => tokens,
    };
    format!(
        "{} (trust domain {}, skills: {}), {auth}, store {store}",
        card.delegate_id.as_str(),
        card.trust_domain.name,
        skills.join(", ")
    )
}

/// The app and what must hear of a shutdown.
pub(super) struct Routes {
    pub(super) app: axum::Router,
    pub(super) sockets: Sockets,
    /// Banner lines for the bridges (`{url}` stands for the server's URL).
    pub(super) describe: Vec<String>,
}

/// What serves beside the HTTP routes and must be told of a shutdown.
pub(super) struct Sockets {
    #[cfg(feature = "ws")]
    ws: ldp_transport_ws::WsServer,
    #[cfg(any(feature = "mcp", feature = "a2a"))]
    bridges: tokio_util::sync::CancellationToken,
}

impl Sockets {
    /// Closes the WebSockets (1001, going away) and ends the bridges' event streams, which would otherwise hold
    /// the drain of in-flight requests open.
    pub(super) fn shutdown(&self) {
        #[cfg(feature = "ws")]
        self.ws.shutdown();
        #[cfg(any(feature = "mcp", feature = "a2a"))]
        self.bridges.cancel();
    }
}

/// LDP over HTTP and `/ldp/ws`, `/mcp` and `/a2a` as extra routes behind the same edge (authentication, body and
/// rate limits, the client's address), and the public A2A Agent Card.
pub(super) fn routes(
    runtime: &DelegateRuntime,
    config: &ServerConfig,
    http: HttpServerConfig,
    url: &str,
    certs_required: bool,
    prompts: &super::backend::Prompts,
) -> Routes {
    let mut describe = Vec::new();
    let extra = axum::Router::new();
    #[cfg(feature = "ws")]
    let ws = ldp_transport_ws::WsServer::new(runtime.clone(), ws_config(config, &http));
    #[cfg(feature = "ws")]
    let extra = extra.merge(ws.router());
    #[cfg(any(feature = "mcp", feature = "a2a"))]
    let bridges = tokio_util::sync::CancellationToken::new();
    #[cfg(any(feature = "mcp", feature = "a2a"))]
    let (extra, public) = {
        let (protected, public) = super::backend::bridge_routes(
            runtime,
            config,
            prompts,
            &http,
            url,
            certs_required,
            &bridges,
            &mut describe,
        );
        (extra.merge(protected), public)
    };
    #[cfg(not(any(feature = "mcp", feature = "a2a")))]
    let _ = (url, certs_required, &mut describe, config, prompts);
    let resource = http.oauth.clone();
    let state = HttpState::new(runtime.clone(), http);
    #[cfg(feature = "ws")]
    ws.report_to(state.metrics());
    let app = ldp_transport_http::router_with(state, extra);
    #[cfg(any(feature = "mcp", feature = "a2a"))]
    let app = app.merge(public);
    // Public, as the identity card is: it tells a client where to get the token it lacks.
    let app = match resource {
        Some(resource) => app.merge(ldp_transport_http::metadata_routes(resource)),
        None => app,
    };
    Routes {
        app,
        sockets: Sockets {
            #[cfg(feature = "ws")]
            ws,
            #[cfg(any(feature = "mcp", feature = "a2a"))]
            bridges,
        },
        describe,
    }
}

/// The WebSocket binding: the HTTP edge's tokens and message bound, and its own timeouts and byte bounds.
#[cfg(feature = "ws")]
fn ws_config(config: &ServerConfig, http: &HttpServerConfig) -> ldp_transport_ws::WsServerConfig {
    let w = &config.websocket;
    let idle = w.idle_timeout.max(Duration::from_secs(1));
    ldp_transport_ws::WsServerConfig {
        max_message: http.max_body,
        tokens: http.tokens.clone(),
        jwt: http.jwt.clone(),
        // Three pings per idle period: one lost pong does not kill a live connection.
        ping_interval: idle / 3,
        idle_timeout: idle,
        write_timeout: w.write_timeout.max(Duration::from_secs(1)),
        max_outbound_bytes: usize_of(w.max_outbound).max(1),
        max_in_flight_bytes: usize_of(w.max_in_flight).max(1),
        max_inbound_rate: w.max_inbound_rate,
        allowed_origins: w.allow_origins.clone(),
        ..ldp_transport_ws::WsServerConfig::default()
    }
}

/// The OTLP export of the spans, installed as the global subscriber (with logs to stderr) unless the program has
/// installed one of its own, which should then carry [`OtlpExport::layer`](ldp_transport_http::otlp::OtlpExport).
#[cfg(feature = "otel")]
pub(super) fn telemetry(
    config: &crate::config::TelemetryConfig,
) -> Result<Option<ldp_transport_http::otlp::OtlpExport>, Error> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    if tracing::dispatcher::has_been_set() {
        // The program's own subscriber: `ldp serve` installs one carrying this export (`ldp::telemetry`).
        return Ok(None);
    }
    let service = config.service_name.as_deref().unwrap_or("ldp");
    let export = ldp_transport_http::otlp::OtlpExport::new(endpoint, service)
        .map_err(|e| Error::Setup { key: "telemetry.otlp_endpoint".to_owned(), source: e.into() })?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    let spans = export.layer().with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    let _ = tracing_subscriber::registry().with(logs).with(spans).try_init();
    Ok(Some(export))
}
