//! The one assembly path of a delegate server: a [`ServerConfig`] (and, from code, skills) becomes the runtime,
//! HTTP and WebSocket on one port, the store, telemetry and the bridges, listening. [`DelegateBuilder::spawn`],
//! [`Server::start`] and `ldp serve` all come here.
//!
//! [`DelegateBuilder::spawn`]: crate::DelegateBuilder::spawn

mod backend;
mod edge;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::{Delegate as RunDelegate, DelegateRuntime};
use ldp_session::{Limits, Responder, SecurityConfig, SeededIds, SystemClock};
use ldp_types::IdentityCard;
use ldp_types::signing::SigningKey;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Error;
use crate::config::ServerConfig;

pub(crate) use edge::parse_cert_peer;

/// Skills given in code, and what the builder sets beyond the configuration.
pub(crate) struct Skillset {
    /// The card (its id and capabilities are the code's).
    pub(crate) card: IdentityCard,
    /// What answers the tasks.
    pub(crate) delegate: Arc<dyn RunDelegate>,
    /// How long a cancelled task's handler may run on.
    pub(crate) cancel_grace: Option<Duration>,
    /// The session layer's limits, replacing the configuration's.
    pub(crate) limits: Option<Limits>,
    /// A signing key given as a key rather than as configuration text.
    pub(crate) signing_key: Option<SigningKey>,
}

impl Skillset {
    fn answering(card: IdentityCard, delegate: Arc<dyn RunDelegate>) -> Self {
        Self { card, delegate, cancel_grace: None, limits: None, signing_key: None }
    }
}

/// A running delegate server: [`Server::start`] from a configuration, or
/// [`DelegateBuilder::spawn`](crate::DelegateBuilder::spawn) from code.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    tls: bool,
    card: IdentityCard,
    runtime: DelegateRuntime,
    grace: Duration,
    banner: Vec<String>,
    stop: Option<oneshot::Sender<()>>,
    join: JoinHandle<std::io::Result<()>>,
    /// Renews running tasks' claims in a shared store; ends with the server.
    renewer: Option<JoinHandle<()>>,
    #[cfg(feature = "otel")]
    export: Option<ldp_transport_http::otlp::OtlpExport>,
}

impl Server {
    /// Starts the server `config` describes, answering tasks with its `backend` (the echo delegate of the reference
    /// SDKs by default, a language model, or a bridged MCP server or A2A agent). Bad files, keys and backends are
    /// refused before anything listens.
    pub async fn start(config: ServerConfig) -> Result<Self, Error> {
        launch(config, None).await
    }

    /// Starts the server `config` describes with a delegate of your own (a [`RunDelegate`] implementation) under a
    /// card of your own; the configuration's identity keys (trust domain, trusted peers) apply to the card, and its
    /// `backend` is not used.
    pub async fn start_with(
        config: ServerConfig,
        card: IdentityCard,
        delegate: Arc<dyn RunDelegate>,
    ) -> Result<Self, Error> {
        launch(config, Some(Skillset::answering(card, delegate))).await
    }

    /// Starts the server `config` describes and runs it until SIGINT or SIGTERM (or Ctrl-C), then shuts down
    /// gracefully ([`Server::shutdown`]).
    pub async fn run(config: ServerConfig) -> Result<(), Error> {
        let signal = shutdown_signal()?;
        let server = Self::start(config).await?;
        signal.await;
        server.shutdown().await
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` (`https://` with TLS), for [`connect`](crate::connect); WebSocket clients use the same URL
    /// with `ws://` (`wss://`).
    pub fn url(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.addr)
    }

    /// The identity card served.
    pub fn card(&self) -> &IdentityCard {
        &self.card
    }

    /// The runtime behind the server (for metrics, or a transport of your own beside it).
    pub fn runtime(&self) -> &DelegateRuntime {
        &self.runtime
    }

    /// What the server is, one line each: the delegate and its skills, authentication, the store, the URLs, the
    /// backend and the bridges (what `ldp serve` prints).
    pub fn banner(&self) -> &[String] {
        &self.banner
    }

    /// Shuts down gracefully: new sessions and tasks are refused at once (`CAPACITY_EXCEEDED`, retryable), running
    /// tasks get the shutdown grace to finish, those still running are then answered TASK_FAILED `CANCELLED`;
    /// then the server stops accepting, drains in-flight requests, closes its WebSockets and bridges, closes its
    /// store (an SQLite file is settled, its directory removable, when this returns), and ends.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        self.runtime.drain(self.grace).await;
        if let Some(stop) = self.stop.take() {
            // The server may have ended already; then nobody listens.
            let _ = stop.send(());
        }
        let served = match (&mut self.join).await {
            Ok(served) => served.map_err(Error::Io),
            Err(e) => Err(Error::Io(std::io::Error::other(e))),
        };
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
            // Awaited, so that no renewal is still calling the store when it closes.
            let _ = renewer.await;
        }
        // The store's files are settled when this returns: a caller may remove their directory at once.
        let closed = self.runtime.close_store().await.map_err(Error::StoreClose);
        #[cfg(feature = "otel")]
        if let Some(export) = self.export.take()
            && let Err(e) = export.flush()
        {
            tracing::warn!(error = %e, "exporting the last spans failed");
        }
        served.and(closed)
    }
}

/// The runtime the configuration and skills make: the card (trust domain, trusted peers, `endpoint`), the
/// responder's trust, signatures and limits.
pub(crate) fn runtime(
    config: &ServerConfig,
    skills: Skillset,
    endpoint: &str,
    banner: &mut Vec<String>,
) -> Result<DelegateRuntime, Error> {
    let Skillset { mut card, delegate, cancel_grace, limits, signing_key } = skills;
    edge::apply_identity(&mut card, &config.identity);
    edge::publish_attestations(&mut card, &config.identity)?;
    if card.endpoint.is_empty() {
        card.endpoint = endpoint.to_owned();
    }
    let mut responder_config = edge::responder_config(card, config, banner)?;
    if let Some(limits) = limits {
        responder_config.limits = limits;
    }
    if let Some(key) = signing_key {
        // As with `signing.algorithm`: hmac-sha256 exists to talk to the reference SDKs, which sign it without a
        // nonce (and cannot verify one).
        responder_config.hmac_sha256_nonce = key.algorithm() != ldp_types::signing::SignatureAlgorithm::HmacSha256;
        responder_config.security = SecurityConfig::symmetric(key);
    }
    let responder = Responder::new(responder_config, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, delegate);
    if let Some(grace) = cancel_grace {
        runtime.set_cancel_grace(grace);
    }
    Ok(runtime)
}

/// The runtime and its app (HTTP, `/ldp/ws`, the bridges) without a listener, for mounting in an app of the
/// caller's.
pub(crate) fn app(config: &ServerConfig, skills: Skillset) -> Result<(DelegateRuntime, axum::Router), Error> {
    config.validate()?;
    let runtime = runtime(config, skills, "", &mut Vec::new())?;
    let mut http = edge::http_config(config, config.effective_request_timeout())?;
    http.jwt = edge::jwt_lazy(config)?;
    let routes = edge::routes(&runtime, config, http, "", false, &Vec::new());
    Ok((runtime, routes.app))
}

/// Assembles and starts a server: `skills` answer, or else the configured backend.
pub(crate) async fn launch(config: ServerConfig, skills: Option<Skillset>) -> Result<Server, Error> {
    config.validate()?;
    edge::check_features(&config)?;
    #[cfg(feature = "otel")]
    let export = edge::telemetry(&config.telemetry)?;
    let timeout = config.effective_request_timeout();
    let mut banner = Vec::new();
    let mut prompts = Vec::new();
    let skills = match skills {
        Some(skills) => skills,
        None => {
            let answered = backend::start(&config, timeout).await?;
            banner.extend(answered.describe);
            prompts = answered.prompts;
            Skillset::answering(answered.card, answered.delegate)
        }
    };
    #[cfg(feature = "tls")]
    let tls = edge::tls(&config)?;
    #[cfg(not(feature = "tls"))]
    let tls: Option<std::convert::Infallible> = None;
    let listener = tokio::net::TcpListener::bind(&config.bind)
        .await
        .map_err(|source| Error::Bind { addr: config.bind.clone(), source })?;
    let addr = listener.local_addr()?;
    let url = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
    let runtime = runtime(&config, skills, &url, &mut banner)?;
    let card = runtime.card();
    let (store, renewer) = edge::attach_store(&runtime, &config).await?;
    let mut http = edge::http_config(&config, timeout)?;
    http.jwt = edge::jwt(&config).await?;
    let limits = http.limits.clone();
    let routes = edge::routes(&runtime, &config, http, &url, tls_requires_certs(&tls), &prompts);
    banner.insert(0, edge::summary(&card, &config, &store, tls_client_auth(&tls)));
    banner.insert(1, format!("listening on {url} (WebSocket: {}/ldp/ws)", url.replacen("http", "ws", 1)));
    banner.extend(routes.describe.iter().map(|line| line.replace("{url}", &url)));
    let (stop, stopped) = oneshot::channel::<()>();
    let edge::Routes { app, sockets, .. } = routes;
    let shutdown = async move {
        let _ = stopped.await;
        sockets.shutdown();
    };
    let served = runtime.clone();
    let join = match tls {
        #[cfg(feature = "tls")]
        Some(tls) => {
            tokio::spawn(ldp_transport_http::serve_router_tls_with_limits(listener, served, app, tls, limits, shutdown))
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match never {},
        None => tokio::spawn(ldp_transport_http::serve_router_with_limits(listener, served, app, limits, shutdown)),
    };
    Ok(Server {
        addr,
        tls: url.starts_with("https"),
        card,
        runtime,
        grace: config.shutdown_grace,
        banner,
        stop: Some(stop),
        join,
        renewer,
        #[cfg(feature = "otel")]
        export,
    })
}

#[cfg(feature = "tls")]
fn tls_client_auth(tls: &Option<ldp_transport_http::ServerTlsConfig>) -> Option<bool> {
    tls.as_ref().and_then(ldp_transport_http::ServerTlsConfig::client_auth).map(|auth| auth.is_required())
}

#[cfg(not(feature = "tls"))]
fn tls_client_auth(_: &Option<std::convert::Infallible>) -> Option<bool> {
    None
}

#[cfg(feature = "tls")]
fn tls_requires_certs(tls: &Option<ldp_transport_http::ServerTlsConfig>) -> bool {
    tls_client_auth(tls) == Some(true)
}

#[cfg(not(feature = "tls"))]
fn tls_requires_certs(_: &Option<std::convert::Infallible>) -> bool {
    false
}

/// Resolves on SIGINT or SIGTERM (on Unix; Ctrl-C elsewhere). The handlers are registered before it returns, so a
/// signal sent as soon as the server listens is not lost.
pub fn shutdown_signal() -> Result<impl Future<Output = ()> + Send, Error> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
