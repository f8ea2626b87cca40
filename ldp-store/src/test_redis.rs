//! A throwaway `redis-server` for tests (feature `test-redis`): on a free loopback port, without persistence,
//! killed on drop; with a password, over TLS only, or on a Unix socket when [`RedisServerOptions`] ask. The binary
//! comes from `scripts/redis-server.sh`, which installs Debian's package when it is missing; tests that use this never
//! skip.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server` child process.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    binary: PathBuf,
    options: RedisServerOptions,
    /// Where the TLS files and the socket live (removed on drop).
    scratch: Option<PathBuf>,
}

/// How a test server is reached: by default plain TCP on loopback, no password.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RedisServerOptions {
    password: Option<String>,
    tls: Option<ServerTls>,
    unix_socket: bool,
    config: Vec<(String, String)>,
}

/// The PEM files of a TLS test server.
#[derive(Clone)]
struct ServerTls {
    cert_pem: String,
    key_pem: String,
    ca_pem: String,
    require_client_cert: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("require_client_cert", &self.require_client_cert).finish_non_exhaustive()
    }
}

impl RedisServerOptions {
    /// Clients must `AUTH` with this password (`requirepass`).
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self
    }

    /// TLS only (no plain port): the server presents `cert_pem` (with `key_pem`), and checks client certificates
    /// against `ca_pem`, requiring one when `require_client_cert`.
    pub fn tls(mut self, cert_pem: &str, key_pem: &str, ca_pem: &str, require_client_cert: bool) -> Self {
        self.tls = Some(ServerTls {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            ca_pem: ca_pem.to_owned(),
            require_client_cert,
        });
        self
    }

    /// A configuration directive on the command line (`--NAME VALUE`), such as `maxmemory-policy`.
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.config.push((name.to_owned(), value.to_owned()));
        self
    }

    /// A Unix socket only (no TCP port): [`RedisServer::url`] is `redis+unix:///PATH`.
    pub fn unix_socket(mut self) -> Self {
        self.unix_socket = true;
        self
    }
}

/// Why a test server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestRedisError {
    /// `scripts/redis-server.sh` failed (its message is on stderr).
    #[error("scripts/redis-server.sh could not provide redis-server: {0}")]
    Install(String),
    /// The server did not start or did not listen in time.
    #[error("redis-server did not start: {0}")]
    Start(String),
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers.
    pub fn start() -> Result<Self, TestRedisError> {
        Self::start_with(RedisServerOptions::default())
    }

    /// Starts a server as `options` say and waits until it listens.
    pub fn start_with(options: RedisServerOptions) -> Result<Self, TestRedisError> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-server.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| TestRedisError::Install(e.to_string()))?;
        if !out.status.success() {
            return Err(TestRedisError::Install(format!("exit status {}", out.status)));
        }
        let binary = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let port = free_port().map_err(|e| TestRedisError::Start(e.to_string()))?;
        let scratch = if options.tls.is_some() || options.unix_socket {
            let dir = std::env::temp_dir().join(format!("ldp-test-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| TestRedisError::Start(e.to_string()))?;
            if let Some(tls) = &options.tls {
                for (name, pem) in
                    [("server.pem", &tls.cert_pem), ("server.key", &tls.key_pem), ("ca.pem", &tls.ca_pem)]
                {
                    std::fs::write(dir.join(name), pem).map_err(|e| TestRedisError::Start(e.to_string()))?;
                }
            }
            Some(dir)
        } else {
            None
        };
        let mut server = Self { child: None, port, binary, options, scratch };
        server.restart()?;
        Ok(server)
    }

    /// The server's URL: `redis://127.0.0.1:PORT`, `rediss://` with TLS, `redis+unix:///PATH` on a socket; with the
    /// password in it when there is one.
    pub fn url(&self) -> String {
        self.url_with_password(self.options.password.as_deref())
    }

    /// The server's URL with another password, or none (for tests of what a wrong or missing one does).
    pub fn url_with_password(&self, password: Option<&str>) -> String {
        if let Some(socket) = self.socket() {
            let pass = password.map(|p| format!("?pass={p}")).unwrap_or_default();
            return format!("redis+unix://{}{pass}", socket.display());
        }
        let scheme = if self.options.tls.is_some() { "rediss" } else { "redis" };
        let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
        format!("{scheme}://{auth}127.0.0.1:{}", self.port)
    }

    fn socket(&self) -> Option<PathBuf> {
        match (&self.scratch, self.options.unix_socket) {
            (Some(dir), true) => Some(dir.join("redis.sock")),
            _ => None,
        }
    }

    /// Runs `redis-cli` against the server (over TCP, with its password; not for TLS or socket servers); its output,
    /// or an error when the server answered one.
    pub fn cli(&self, args: &[&str]) -> Result<String, TestRedisError> {
        if self.options.tls.is_some() || self.options.unix_socket {
            return Err(TestRedisError::Start("RedisServer::cli speaks plain TCP only".into()));
        }
        let mut all = match &self.options.password {
            Some(password) => vec!["--no-auth-warning", "-a", password.as_str()],
            None => Vec::new(),
        };
        all.extend_from_slice(args);
        cli(&self.binary, self.port, &all)
    }

    /// Starts `redis-cli MONITOR` against the server (plain TCP, as [`RedisServer::cli`]), its output piped: each
    /// command the server runs is a line, those a script runs marked `[... lua]`. The caller reads and kills it.
    pub fn monitor(&self) -> Result<std::process::Child, TestRedisError> {
        if self.options.tls.is_some() || self.options.unix_socket {
            return Err(TestRedisError::Start("RedisServer::monitor speaks plain TCP only".into()));
        }
        let mut command = Command::new(cli_binary(&self.binary));
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(password) = &self.options.password {
            command.args(["--no-auth-warning", "-a", password]);
        }
        command
            .arg("MONITOR")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| TestRedisError::Start(format!("redis-cli MONITOR: {e}")))
    }

    /// Stops the server (SIGKILL), as an outage.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: it keeps nothing on disk).
    pub fn restart(&mut self) -> Result<(), TestRedisError> {
        self.stop();
        let port = self.port.to_string();
        let mut args: Vec<String> =
            ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"].map(String::from).into();
        match (&self.options.tls, self.socket()) {
            (_, Some(socket)) => {
                let _ = std::fs::remove_file(&socket);
                args.extend(["--port".into(), "0".into(), "--unixsocket".into(), socket.display().to_string()]);
            }
            (Some(tls), None) => {
                let dir = self.scratch.clone().unwrap_or_default();
                let file = |name: &str| dir.join(name).display().to_string();
                let auth = if tls.require_client_cert { "yes" } else { "no" };
                args.extend(["--port".into(), "0".into(), "--tls-port".into(), port.clone()]);
                args.extend([
                    "--tls-cert-file".into(),
                    file("server.pem"),
                    "--tls-key-file".into(),
                    file("server.key"),
                ]);
                args.extend(["--tls-ca-cert-file".into(), file("ca.pem"), "--tls-auth-clients".into(), auth.into()]);
            }
            (None, None) => args.extend(["--port".into(), port.clone()]),
        }
        if let Some(password) = &self.options.password {
            args.extend(["--requirepass".into(), password.clone()]);
        }
        for (name, value) in &self.options.config {
            args.extend([format!("--{name}"), value.clone()]);
        }
        let child = Command::new(&self.binary)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestRedisError::Start(e.to_string()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let listening = match self.socket() {
                Some(socket) => std::os::unix::net::UnixStream::connect(socket).is_ok(),
                None => TcpStream::connect(("127.0.0.1", self.port)).is_ok(),
            };
            // Listening, and by this server: one that could not bind its port has exited.
            if listening && self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None))) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(TestRedisError::Start(format!("nothing listens at {} after 10 s", self.url())))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A throwaway Redis Cluster on loopback: `nodes` primaries (no replicas), each a [`RedisServer`] in cluster mode,
/// the 16,384 slots split evenly between them, joined with `CLUSTER MEET`; ready when every node says the cluster is
/// `ok`. Its nodes' files are removed and its servers killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    scratch: PathBuf,
}

impl RedisCluster {
    /// Starts a cluster of `nodes` primaries (at least one) and waits until it serves every slot.
    pub fn start(nodes: usize) -> Result<Self, TestRedisError> {
        let fail = |e: std::io::Error| TestRedisError::Start(e.to_string());
        let nodes = nodes.max(1);
        let scratch = std::env::temp_dir().join(format!(
            "ldp-test-redis-cluster-{}-{}",
            std::process::id(),
            free_port().map_err(fail)?
        ));
        std::fs::create_dir_all(&scratch).map_err(fail)?;
        let mut servers = Vec::with_capacity(nodes);
        let mut buses = Vec::with_capacity(nodes);
        for i in 0..nodes {
            let bus = free_port().map_err(fail)?;
            let conf = scratch.join(format!("nodes-{i}.conf")).display().to_string();
            let options = RedisServerOptions::default()
                .config("cluster-enabled", "yes")
                .config("cluster-config-file", &conf)
                .config("cluster-port", &bus.to_string())
                .config("cluster-node-timeout", "5000");
            servers.push(RedisServer::start_with(options)?);
            buses.push(bus);
        }
        let cluster = Self { nodes: servers, scratch };
        const SLOTS: usize = 16_384;
        for (i, node) in cluster.nodes.iter().enumerate() {
            let (first, last) = (i * SLOTS / nodes, (i + 1) * SLOTS / nodes - 1);
            cluster.cli(node, &["CLUSTER", "ADDSLOTSRANGE", &first.to_string(), &last.to_string()])?;
        }
        for (node, bus) in cluster.nodes.iter().zip(&buses).skip(1) {
            cluster
                .cli(&cluster.nodes[0], &["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string(), &bus.to_string()])?;
        }
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// Stops every node (SIGKILL), as an outage of the whole cluster.
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Starts every node again on its ports; each reads the cluster's layout back from its nodes file (the data is
    /// gone: nothing is persisted). Waits until the cluster serves every slot again.
    pub fn restart(&mut self) -> Result<(), TestRedisError> {
        for node in &mut self.nodes {
            node.restart()?;
        }
        self.wait_until_ok()
    }

    fn wait_until_ok(&self) -> Result<(), TestRedisError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut ready = true;
            for node in &self.nodes {
                let info = self.cli(node, &["CLUSTER", "INFO"])?;
                let known = format!("cluster_known_nodes:{}", self.nodes.len());
                ready &= info.contains("cluster_state:ok") && info.contains(&known);
            }
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestRedisError::Start("the cluster did not reach state ok within 20 s".to_owned()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The cluster's URL: `redis+cluster://127.0.0.1:PORT,127.0.0.1:PORT,...`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// Each node's own URL (`redis://127.0.0.1:PORT`), to see which keys a node holds.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Runs `redis-cli` against `node`; its output.
    /// Sets a configuration directive on every node (`CONFIG SET NAME VALUE`), such as `maxmemory`.
    pub fn config_set(&self, name: &str, value: &str) -> Result<(), TestRedisError> {
        for node in &self.nodes {
            self.cli(node, &["CONFIG", "SET", name, value])?;
        }
        Ok(())
    }

    fn cli(&self, node: &RedisServer, args: &[&str]) -> Result<String, TestRedisError> {
        cli(&node.binary, node.port, args)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// What a TLS-only Sentinel deployment's servers present and require.
struct SentinelTls {
    server: ServerTls,
    /// The client certificate and key the servers require of every client and present in their own connections.
    client_pem: Option<(String, String)>,
}

/// The paths of a TLS-only Sentinel deployment's files, as written in its directory.
struct TlsFiles {
    cert: String,
    key: String,
    ca: String,
    /// The client certificate and its key, when the servers require one.
    client: Option<(String, String)>,
}

/// A throwaway Redis Sentinel deployment on loopback: a primary, one replica of it, and one sentinel (quorum 1)
/// watching them as the service [`RedisSentinel::SERVICE`], quick to judge a primary down (1 s). Its servers are
/// killed and its files removed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The two data nodes; which one is the primary changes with failovers.
    nodes: Vec<RedisServer>,
    sentinel: Option<Child>,
    sentinel_port: u16,
    /// The sentinel's own password (`requirepass`), if it has one.
    sentinel_password: Option<String>,
    /// Whether every server speaks TLS only (and `redis-cli` must too: these are its TLS arguments).
    cli_tls: Vec<String>,
    scratch: PathBuf,
}

/// How long [`RedisSentinel::failover`] waits for a step of the sentinel's before taking it again: past the
/// sentinel's `failover-timeout` (3 s here) with room for a loaded machine.
const FAILOVER_RETRY: Duration = Duration::from_secs(10);

impl RedisSentinel {
    /// The service name the sentinel watches.
    pub const SERVICE: &'static str = "ldp-test";

    /// Starts the primary, its replica and the sentinel, and waits until the sentinel knows the replica (so that a
    /// failover can pick it).
    pub fn start() -> Result<Self, TestRedisError> {
        Self::start_with(None)
    }

    /// [`RedisSentinel::start`], the sentinel wanting `sentinel_password` from its clients (`requirepass`) when
    /// given; the data nodes want none.
    pub fn start_with(sentinel_password: Option<&str>) -> Result<Self, TestRedisError> {
        Self::start_inner(sentinel_password, None)
    }

    /// [`RedisSentinel::start`] over TLS only: the primary, the replica and the sentinel each listen on a TLS port
    /// alone and present `cert_pem` (with `key_pem`, issued for 127.0.0.1); replication and the sentinel's own
    /// connections to the nodes are TLS too (`tls-replication`), each checked against `ca_pem`. With
    /// `client_pem` (a certificate and its key, issued by the same CA for client use), every server requires a client
    /// certificate (`tls-auth-clients yes`) and presents that one in its own connections; without, clients need none.
    /// [`RedisSentinel::url`] is then `rediss+sentinel://`.
    pub fn start_tls(
        cert_pem: &str,
        key_pem: &str,
        ca_pem: &str,
        client_pem: Option<(&str, &str)>,
    ) -> Result<Self, TestRedisError> {
        let tls = SentinelTls {
            server: ServerTls {
                cert_pem: cert_pem.to_owned(),
                key_pem: key_pem.to_owned(),
                ca_pem: ca_pem.to_owned(),
                require_client_cert: client_pem.is_some(),
            },
            client_pem: client_pem.map(|(cert, key)| (cert.to_owned(), key.to_owned())),
        };
        Self::start_inner(None, Some(tls))
    }

    fn start_inner(sentinel_password: Option<&str>, tls: Option<SentinelTls>) -> Result<Self, TestRedisError> {
        let fail = |e: std::io::Error| TestRedisError::Start(e.to_string());
        let sentinel_port = free_port().map_err(fail)?;
        let scratch =
            std::env::temp_dir().join(format!("ldp-test-redis-sentinel-{}-{sentinel_port}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(fail)?;
        // Each node works in a directory of its own: a replica writes the snapshot of its full sync there
        // (`dump.rdb`), which a server started later in the same directory would load.
        let node_dir = |name: &str| {
            let dir = scratch.join(name);
            std::fs::create_dir_all(&dir).map(|()| dir.display().to_string())
        };
        let file = |name: &str, pem: &str| {
            let path = scratch.join(name);
            std::fs::write(&path, pem).map(|()| path.display().to_string()).map_err(fail)
        };
        // The files the sentinel and `redis-cli` read (the data nodes write their own copies of the server's).
        let files = match &tls {
            Some(t) => Some(TlsFiles {
                cert: file("server.pem", &t.server.cert_pem)?,
                key: file("server.key", &t.server.key_pem)?,
                ca: file("ca.pem", &t.server.ca_pem)?,
                client: match &t.client_pem {
                    Some((cert, key)) => Some((file("client.pem", cert)?, file("client.key", key)?)),
                    None => None,
                },
            }),
            None => None,
        };
        let node = |name: &str| -> Result<RedisServerOptions, TestRedisError> {
            let options = RedisServerOptions::default().config("dir", &node_dir(name).map_err(fail)?);
            let (Some(t), Some(files)) = (&tls, &files) else { return Ok(options) };
            let s = &t.server;
            let options =
                options.tls(&s.cert_pem, &s.key_pem, &s.ca_pem, s.require_client_cert).config("tls-replication", "yes");
            Ok(match &files.client {
                Some((cert, key)) => options.config("tls-client-cert-file", cert).config("tls-client-key-file", key),
                None => options,
            })
        };
        let primary = RedisServer::start_with(node("a")?)?;
        let replica = RedisServer::start_with(node("b")?.config("replicaof", &format!("127.0.0.1 {}", primary.port)))?;
        // The sentinel rewrites its configuration file, so it gets one of its own.
        let conf = scratch.join("sentinel.conf");
        let service = Self::SERVICE;
        let (listen, cli_tls) = match &files {
            Some(TlsFiles { cert, key, ca, client }) => {
                let mut listen = format!(
                    "port 0\ntls-port {sentinel_port}\ntls-cert-file {cert}\ntls-key-file {key}\n\
                     tls-ca-cert-file {ca}\ntls-replication yes\n"
                );
                let mut cli_tls = vec!["--tls".to_owned(), "--cacert".to_owned(), ca.clone()];
                match client {
                    Some((client_cert, client_key)) => {
                        listen.push_str(&format!(
                            "tls-auth-clients yes\ntls-client-cert-file {client_cert}\n\
                             tls-client-key-file {client_key}\n"
                        ));
                        cli_tls.extend([
                            "--cert".to_owned(),
                            client_cert.clone(),
                            "--key".to_owned(),
                            client_key.clone(),
                        ]);
                    }
                    None => listen.push_str("tls-auth-clients no\n"),
                }
                (listen, cli_tls)
            }
            None => (format!("port {sentinel_port}\n"), Vec::new()),
        };
        std::fs::write(
            &conf,
            format!(
                "bind 127.0.0.1\n{listen}dir {}\nsentinel monitor {service} 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds {service} 1000\nsentinel failover-timeout {service} 3000\n{}",
                scratch.display(),
                primary.port,
                sentinel_password.map(|p| format!("requirepass {p}\n")).unwrap_or_default(),
            ),
        )
        .map_err(fail)?;
        let child = Command::new(&primary.binary)
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(fail)?;
        let deployment = Self {
            nodes: vec![primary, replica],
            sentinel: Some(child),
            sentinel_port,
            sentinel_password: sentinel_password.map(str::to_owned),
            cli_tls,
            scratch,
        };
        deployment.wait_for(Duration::from_secs(30), "the sentinel to know the replica", |d| d.replicated())?;
        Ok(deployment)
    }

    /// `redis+sentinel://127.0.0.1:SENTINEL_PORT/SERVICE` (`rediss+sentinel://` over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.cli_tls.is_empty() { "redis+sentinel" } else { "rediss+sentinel" };
        format!("{scheme}://127.0.0.1:{}/{}", self.sentinel_port, Self::SERVICE)
    }

    /// The port of the node the sentinel names as the primary.
    pub fn primary_port(&self) -> Result<u16, TestRedisError> {
        let said = self.sentinel_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE])?;
        said.lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
            .ok_or_else(|| TestRedisError::Start(format!("the sentinel names no primary: {said:?}")))
    }

    /// Waits until the replica has every write the primary took, as a failover that must lose nothing needs.
    pub fn sync(&self) -> Result<(), TestRedisError> {
        // After a failover the sentinel makes the old primary a replica of the new one on its next look at it.
        self.wait_for(Duration::from_secs(40), "the replica to take every write", |d| d.replicated())
    }

    /// Whether the replica is online and has taken everything the primary has (its acknowledged offset has reached
    /// the primary's), and the sentinel knows it as a replica it could promote. (`WAIT` would not do: it counts the
    /// writes of its own connection only.)
    fn replicated(&self) -> Result<bool, TestRedisError> {
        let primary = self.primary()?;
        let info = self.node_cli(primary.port, &["INFO", "replication"])?;
        let field = |line: &str, name: &str| {
            line.split(',').find_map(|f| f.split_once('=').filter(|(k, _)| *k == name).map(|(_, v)| v.to_owned()))
        };
        let offset: Option<u64> =
            info.lines().find_map(|l| l.strip_prefix("master_repl_offset:")).and_then(|v| v.trim().parse().ok());
        let caught_up = info.lines().filter(|l| l.starts_with("slave")).any(|line| {
            let acked: Option<u64> = field(line, "offset").and_then(|v| v.trim().parse().ok());
            field(line, "state").as_deref() == Some("online") && acked.is_some() && acked >= offset
        });
        let known = self.sentinel_cli(&["SENTINEL", "REPLICAS", Self::SERVICE])?;
        Ok(caught_up && known.contains("slave") && !known.contains("disconnected") && !known.contains("s_down"))
    }

    fn primary(&self) -> Result<&RedisServer, TestRedisError> {
        let port = self.primary_port()?;
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .ok_or_else(|| TestRedisError::Start(format!("the sentinel names an unknown primary, port {port}")))
    }

    /// Has the sentinel fail the primary over to the replica (`SENTINEL FAILOVER`): the old primary is made a
    /// replica of the new one (it answers writes `READONLY`). Returns once the sentinel names the new primary, it
    /// takes writes, and the old one says it is a replica (until then, it too takes writes, which its resync from
    /// the new primary then drops: Redis's own window, not the client's).
    ///
    /// A loaded machine can outlast the sentinel's own bounds, so both steps are taken again when they do not come:
    /// a manual failover the sentinel aborted (past its `failover-timeout`) is not retried by the sentinel, so it is
    /// asked again; and an old primary the sentinel has not yet demoted is made a replica as the sentinel would.
    pub fn failover(&self) -> Result<(), TestRedisError> {
        let before = self.primary_port()?;
        let ask = |d: &Self| d.sentinel_cli(&["SENTINEL", "FAILOVER", Self::SERVICE]).is_ok();
        self.wait_for(Duration::from_secs(20), "the sentinel to start a failover", |d| Ok(ask(d)))?;
        let asked = std::cell::Cell::new(Instant::now());
        let promoted: std::cell::Cell<Option<Instant>> = std::cell::Cell::new(None);
        self.wait_for(Duration::from_secs(60), "the failover to end", |d| {
            if !d.names_another_primary(before)? {
                // An answer `-INPROG` while the first is still going on is fine: it is left to finish.
                if asked.get().elapsed() > FAILOVER_RETRY {
                    ask(d);
                    asked.set(Instant::now());
                }
                return Ok(false);
            }
            if d.role(before)?.starts_with("slave") {
                return Ok(true);
            }
            let since = promoted.get().unwrap_or_else(Instant::now);
            promoted.set(Some(since));
            if since.elapsed() > FAILOVER_RETRY {
                let now = d.primary_port()?.to_string();
                d.node_cli(before, &["REPLICAOF", "127.0.0.1", &now])?;
            }
            Ok(false)
        })
    }

    /// Kills the primary (SIGKILL), as a crash: the sentinel judges it down after a second and fails over to the
    /// replica. Returns once the sentinel names the new primary and it takes writes.
    pub fn kill_primary(&mut self) -> Result<(), TestRedisError> {
        let before = self.primary_port()?;
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == before) {
            node.stop();
        }
        self.wait_for(Duration::from_secs(30), "the sentinel to fail the dead primary over", |d| {
            d.names_another_primary(before)
        })
    }

    /// Whether the sentinel names a primary other than the one on `before`, and that one takes writes.
    fn names_another_primary(&self, before: u16) -> Result<bool, TestRedisError> {
        let now = self.primary_port()?;
        Ok(now != before && self.role(now)?.starts_with("master"))
    }

    /// Makes the replica a primary and has the sentinel name it, without a failover: the old primary is not
    /// demoted and keeps its clients (a split brain, set up on purpose, of the kind a failover leaves until the
    /// sentinels reach the old primary). Returns the new primary's port.
    pub fn split_brain(&self) -> Result<u16, TestRedisError> {
        let before = self.primary_port()?;
        let Some(replica) = self.nodes.iter().map(|n| n.port).find(|p| *p != before) else {
            return Err(TestRedisError::Start("no replica to promote".to_owned()));
        };
        self.node_cli(replica, &["REPLICAOF", "NO", "ONE"])?;
        self.sentinel_cli(&["SENTINEL", "REMOVE", Self::SERVICE])?;
        self.sentinel_cli(&["SENTINEL", "MONITOR", Self::SERVICE, "127.0.0.1", &replica.to_string(), "1"])?;
        self.wait_for(Duration::from_secs(10), "the sentinel to name the promoted replica", |d| {
            Ok(d.primary_port()? == replica)
        })?;
        Ok(replica)
    }

    /// Runs `redis-cli` against the data node on `port` (either node, whatever its role); its output.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> Result<String, TestRedisError> {
        let mut all: Vec<&str> = self.cli_tls.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        cli(&self.nodes[0].binary, port, &all)
    }

    fn role(&self, port: u16) -> Result<String, TestRedisError> {
        self.node_cli(port, &["ROLE"])
    }

    fn sentinel_cli(&self, args: &[&str]) -> Result<String, TestRedisError> {
        let mut all = match &self.sentinel_password {
            Some(password) => vec!["--no-auth-warning", "-a", password.as_str()],
            None => Vec::new(),
        };
        all.extend_from_slice(args);
        self.node_cli(self.sentinel_port, &all)
    }

    fn wait_for(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&Self) -> Result<bool, TestRedisError>,
    ) -> Result<(), TestRedisError> {
        let deadline = Instant::now() + within;
        let mut last = None;
        while Instant::now() < deadline {
            match done(self) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(TestRedisError::Start(format!("waited {within:?} for {what}; last error: {last:?}")))
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.sentinel.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for node in &mut self.nodes {
            node.stop();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Runs `redis-cli` (beside the `redis-server` binary, as Debian installs them) against the loopback `port`; its
/// output, or an error when it failed or the server answered an error.
fn cli(server_binary: &std::path::Path, port: u16, args: &[&str]) -> Result<String, TestRedisError> {
    let out = Command::new(cli_binary(server_binary))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| TestRedisError::Start(format!("redis-cli: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success()
        || text.starts_with("ERR")
        || text.starts_with("NOGOODSLAVE")
        || text.starts_with("(error)")
    {
        return Err(TestRedisError::Start(format!("redis-cli {args:?}: {text}")));
    }
    Ok(text)
}

/// `redis-cli`: beside the `redis-server` binary, as Debian installs them, else on the `PATH`.
fn cli_binary(server_binary: &std::path::Path) -> PathBuf {
    let beside = server_binary.with_file_name("redis-cli");
    if beside.exists() { beside } else { PathBuf::from("redis-cli") }
}

/// A loopback port no other listener holds now, and that this process has not handed out before. The port is free
/// only until something binds it; without the record, two servers starting at once on other threads of one test
/// binary (a server's port and a cluster node's bus port, say) could be handed the same port, and the server that
/// lost the race would be found "listening" through the other's socket.
fn free_port() -> std::io::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut handed = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !handed.contains(&port) {
            handed.push(port);
            return Ok(port);
        }
    }
}
