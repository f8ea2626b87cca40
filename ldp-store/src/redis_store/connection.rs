//! Reaching Redis: one server, a Cluster or a Sentinel-watched primary, with TLS, every command bounded by
//! [`COMMAND_TIMEOUT`].

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

use crate::StoreConfig;

use super::*;

/// How long one Redis command may take, and one connection attempt, inside the runtime's own timeout.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How the store reaches Redis: one server (or a primary behind a proxy), or a cluster, whose client sends each
/// command to the node owning its keys' slot (every script's keys share one slot, see the module's notes).
#[derive(Clone)]
pub(super) enum Connection {
    Node(ConnectionManager),
    Cluster(std::sync::Arc<ClusterLink>),
    Sentinel(std::sync::Arc<SentinelLink>),
}

/// A cluster connection, made on first use and kept: a cluster that cannot be reached at start is no error, as a
/// single server that is down is not. Once made, the client follows the cluster's changes itself (slots moved,
/// nodes failed over).
pub(super) struct ClusterLink {
    pub(super) client: ClusterClient,
    pub(super) conn: tokio::sync::Mutex<Option<ClusterConnection>>,
}

impl ClusterLink {
    pub(super) async fn connection(&self) -> redis::RedisResult<ClusterConnection> {
        let mut held = self.conn.lock().await;
        if let Some(conn) = held.as_ref() {
            return Ok(conn.clone());
        }
        let made = tokio::time::timeout(COMMAND_TIMEOUT, self.client.get_async_connection())
            .await
            .map_err(|_| timed_out())??;
        *held = Some(made.clone());
        Ok(made)
    }
}

/// The error of a connection attempt that outlasted [`COMMAND_TIMEOUT`]: a timeout, retryable as the server's own are.
pub(super) fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// The primary that Redis Sentinels name for a service, connected to on first use and kept until a call finds it
/// gone (the connection failed) or demoted (`READONLY`: a failover made it a replica), or until the sentinels name
/// another (asked every [`SENTINEL_CHECK`] by a task of the store's, `SentinelLink::watch`): after a failover the old
/// primary may take writes for a while before the sentinels demote it, and a full resync then drops them. The next
/// call asks the sentinels again, and `redis` checks that the node they name says it is the primary (`ROLE`) before
/// it is used. Calls made while no primary can be reached fail (typed, retryable) without each asking the
/// sentinels: one asks at a time, and not again for [`SENTINEL_RETRY`] after a failed attempt.
pub(super) struct SentinelLink {
    pub(super) client: tokio::sync::Mutex<SentinelClient>,
    /// The connection and its generation (so that a failure drops only the connection it happened on).
    pub(super) conn: tokio::sync::Mutex<SentinelConn>,
}

#[derive(Default)]
pub(super) struct SentinelConn {
    /// The connection, its generation, and the address of the primary it goes to.
    pub(super) current: Option<(u64, MultiplexedConnection, redis::ConnectionAddr)>,
    pub(super) generation: u64,
    /// When the last attempt to find and reach the primary failed, and why.
    pub(super) failed: Option<(std::time::Instant, redis::RedisError)>,
}

/// How long after a failed attempt to reach the primary calls fail at once rather than ask the sentinels again.
pub(super) const SENTINEL_RETRY: Duration = Duration::from_millis(200);

/// How often the sentinels are asked which node is the primary while a connection is in use.
pub(super) const SENTINEL_CHECK: Duration = Duration::from_secs(1);

impl SentinelLink {
    pub(super) async fn connection(&self) -> redis::RedisResult<(u64, MultiplexedConnection)> {
        let mut held = self.conn.lock().await;
        if let Some((generation, conn, _)) = held.current.as_ref() {
            return Ok((*generation, conn.clone()));
        }
        if let Some((at, error)) = held.failed.as_ref()
            && at.elapsed() < SENTINEL_RETRY
        {
            return Err(error.clone());
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT));
        let made = tokio::time::timeout(COMMAND_TIMEOUT, async {
            let client = self.named().await?;
            let primary = client.get_connection_info().addr().clone();
            Ok((client.get_multiplexed_async_connection_with_config(&config).await?, primary))
        })
        .await
        .map_err(|_| timed_out())
        .and_then(|made| made);
        match made {
            Ok((conn, primary)) => {
                held.generation += 1;
                held.current = Some((held.generation, conn.clone(), primary));
                held.failed = None;
                Ok((held.generation, conn))
            }
            Err(e) => {
                held.failed = Some((std::time::Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Starts the task that asks the sentinels every [`SENTINEL_CHECK`] which node is the primary, and drops the
    /// connection when they name another than the one it goes to. It ends when the store is dropped.
    pub(super) fn watch(link: &std::sync::Arc<Self>) {
        let link = std::sync::Arc::downgrade(link);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SENTINEL_CHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(link) = link.upgrade() else { return };
                if link.conn.lock().await.current.is_none() {
                    continue;
                }
                // Sentinels that cannot say keep the connection as it is: calls judge it themselves.
                let Ok(Ok(named)) = tokio::time::timeout(COMMAND_TIMEOUT, link.named()).await else { continue };
                let named = named.get_connection_info().addr().clone();
                let mut held = link.conn.lock().await;
                if held.current.as_ref().is_some_and(|(_, _, primary)| *primary != named) {
                    tracing::warn!(primary = %named, "the Redis sentinels name another primary; reconnecting");
                    held.current = None;
                }
            }
        });
    }

    /// A client for the primary the sentinels name now (its `ROLE` checked by `redis`).
    pub(super) async fn named(&self) -> redis::RedisResult<redis::Client> {
        self.client.lock().await.async_get_client().await
    }

    /// Drops the connection of `generation` when `outcome` says its node is no longer the primary to use.
    pub(super) async fn judge<T>(&self, generation: u64, outcome: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &outcome
            && (unreachable(e) || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
        {
            let mut held = self.conn.lock().await;
            if held.current.as_ref().is_some_and(|(g, _, _)| *g == generation) {
                held.current = None;
            }
        }
        outcome
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(link) => Box::pin(async move { link.connection().await?.req_packed_command(cmd).await }),
            Self::Sentinel(link) => Box::pin(async move {
                let (generation, mut conn) = link.connection().await?;
                link.judge(generation, conn.req_packed_command(cmd).await).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(link) => {
                Box::pin(async move { link.connection().await?.req_packed_commands(pipeline, offset, count).await })
            }
            Self::Sentinel(link) => Box::pin(async move {
                let (generation, mut conn) = link.connection().await?;
                link.judge(generation, conn.req_packed_commands(pipeline, offset, count).await).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(_) | Self::Sentinel(_) => 0,
        }
    }
}

/// The sentinel client for a `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]` URL: the
/// sentinels at the hosts, the primary of `SERVICE` with the URL's user, password and database. Sentinels that want a
/// password of their own (`requirepass` in their configuration) get `?sentinel_password=...` (and
/// `sentinel_user=...`), percent-encoded; any other parameter is refused, so that a mistyped one is not ignored.
/// `rediss+sentinel://` speaks TLS to the sentinels and to the primary alike, both checked against the system's roots
/// or [`StoreConfig::redis_tls`]'s CA, and both shown its client certificate. `None` for any other URL.
pub(super) fn sentinel_client(url: &str, cfg: &StoreConfig) -> Option<redis::RedisResult<SentinelClient>> {
    let parsed = crate::HostListUrl::parse(url)?;
    let node_scheme = parsed.node_scheme("sentinel")?;
    let invalid = |reason: String| {
        Some(Err(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "invalid sentinel URL", reason))))
    };
    let mut path = parsed.path().trim_start_matches('/').split('/');
    let Some(service) = path.next().filter(|s| !s.is_empty()) else {
        return invalid("a sentinel URL names its service: redis+sentinel://HOST:PORT/SERVICE[/DB]".to_owned());
    };
    let db = match path.next().filter(|d| !d.is_empty()).map(str::parse::<u32>) {
        None => 0,
        Some(Ok(db)) => db,
        Some(Err(_)) => return invalid("the database after the service is a number: /SERVICE/DB".to_owned()),
    };
    if path.any(|rest| !rest.is_empty()) {
        return invalid("a sentinel URL's path is /SERVICE[/DB], nothing more".to_owned());
    }
    let (mut sentinel_user, mut sentinel_password) = (None, None);
    for (key, value) in url::form_urlencoded::parse(parsed.query().unwrap_or_default().as_bytes()) {
        match &*key {
            "sentinel_user" => sentinel_user = Some(value.into_owned()),
            "sentinel_password" => sentinel_password = Some(value.into_owned()),
            // The key only: a mistyped password parameter's value may be a password.
            other => {
                return invalid(format!(
                    "a sentinel URL takes sentinel_user and sentinel_password as parameters, not {other:?}"
                ));
            }
        }
    }
    // The credentials as `redis` reads them in a `redis://` URL (percent-decoded), for the primary only.
    let credentials = parsed.credentials.map(|c| format!("{c}@")).unwrap_or_default();
    let primary = match redis::IntoConnectionInfo::into_connection_info(format!("redis://{credentials}127.0.0.1")) {
        Ok(info) => info.redis_settings().clone(),
        Err(e) => return Some(Err(e)),
    };
    let mut sentinels = Vec::new();
    for host in parsed.hosts.split(',').filter(|h| !h.is_empty()) {
        match redis::IntoConnectionInfo::into_connection_info(format!("{node_scheme}{host}")) {
            Ok(info) => sentinels.push(info.addr().clone()),
            Err(e) => return Some(Err(e)),
        }
    }
    let built = SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master).map(|builder| {
        let mut builder = builder.set_client_to_redis_db(i64::from(db));
        if let Some(user) = primary.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = primary.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &sentinel_user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if node_scheme == "rediss://" {
            // The sentinels' addresses are TLS ones already (from their `rediss://` form).
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(tls) = &cfg.redis_tls {
                builder = builder
                    .set_client_to_sentinel_certificates(tls_certificates(tls))
                    .set_client_to_redis_certificates(tls_certificates(tls));
            }
        }
        builder
    });
    Some(built.and_then(SentinelClientBuilder::build))
}

/// What `redis` presents and trusts over TLS, from [`StoreConfig::redis_tls`].
pub(super) fn tls_certificates(tls: &crate::RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client_pem
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: tls.ca_pem.clone(),
    }
}

/// The cluster client for a `redis+cluster://` or `rediss+cluster://` URL: each node of the list as a `redis://`
/// (`rediss://`) URL with the list's credentials. `None` for any other URL.
pub(super) fn cluster_client(url: &str, cfg: &StoreConfig) -> Option<redis::RedisResult<ClusterClient>> {
    let cluster = crate::HostListUrl::parse(url)?;
    let node_scheme = cluster.node_scheme("cluster")?;
    let credentials = cluster.credentials.map(|c| format!("{c}@")).unwrap_or_default();
    let nodes: Vec<String> =
        cluster.hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("{node_scheme}{credentials}{h}")).collect();
    let mut builder =
        ClusterClient::builder(nodes).connection_timeout(COMMAND_TIMEOUT).response_timeout(COMMAND_TIMEOUT).retries(1);
    if let Some(tls) = cfg.redis_tls.as_ref().filter(|_| node_scheme == "rediss://") {
        builder = builder.certs(tls_certificates(tls));
    }
    Some(builder.build())
}
