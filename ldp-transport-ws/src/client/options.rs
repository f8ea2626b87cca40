//! The client's settings: [`WsOptions`] and the TLS configuration shared by the
//! WebSocket and the identity request.

use std::sync::Arc;
use std::time::Duration;

use ldp_edge::{ClientTls, ConnectOptions, ConnectSettings, Error as EdgeError, RetryPolicy};
use ldp_types::{LdpError, codes};

use crate::error::Error;

/// Client settings of [`WsTransport`](super::WsTransport): the [`ConnectOptions`] every transport shares (token,
/// TLS, timeouts, reconnects as its [`RetryPolicy`], largest message; set through [`ConnectSettings`]) and the
/// WebSocket's own (keepalive, send queue, resume).
#[derive(Debug, Clone)]
pub struct WsOptions {
    pub(super) connect: ConnectOptions,
    pub(super) identity_url: Option<String>,
    pub(super) ping_interval: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) send_queue: usize,
    pub(super) resume_grace: Duration,
}

impl Default for WsOptions {
    fn default() -> Self {
        ConnectOptions::default().into()
    }
}

impl From<ConnectOptions> for WsOptions {
    /// `connect` with the WebSocket's own settings at their defaults.
    fn from(connect: ConnectOptions) -> Self {
        Self {
            connect,
            identity_url: None,
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            send_queue: 256,
            resume_grace: Duration::from_secs(5),
        }
    }
}

impl ConnectSettings for WsOptions {
    fn connect_options_mut(&mut self) -> &mut ConnectOptions {
        &mut self.connect
    }
}

impl WsOptions {
    /// The reconnect policy in force: the one set, or [`RetryPolicy::reconnect`].
    pub(super) fn reconnect(&self) -> RetryPolicy {
        self.connect.retry.unwrap_or_else(RetryPolicy::reconnect)
    }

    /// Where `identity()` fetches the identity card (default: `/.well-known/ldp-identity` on the same host, over
    /// `http` for `ws` and `https` for `wss`).
    pub fn identity_url(mut self, url: impl Into<String>) -> Self {
        self.identity_url = Some(url.into());
        self
    }

    /// Interval of the client's pings (default 15 s).
    pub fn ping_interval(mut self, every: Duration) -> Self {
        self.ping_interval = every;
        self
    }

    /// A connection on which nothing arrives (not even a pong) for this long is dead and is replaced (default 45 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Messages waiting to be written (default 256); callers wait when it is full.
    pub fn send_queue(mut self, frames: usize) -> Self {
        self.send_queue = frames;
        self
    }

    /// After a resume, how long to wait for the result of a task the server reports as already ended before
    /// concluding that the result was lost with the old connection (default 5 s).
    pub fn resume_grace(mut self, grace: Duration) -> Self {
        self.resume_grace = grace;
        self
    }
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{what}: {e}"))
}

/// The rustls client configuration for `wss://` from `tls`: the web PKI roots plus its roots, and its client
/// identity. The `ring` provider is chosen explicitly so no process-wide default is needed. For clients that dial
/// `wss://` themselves (e.g. with `tokio_tungstenite::connect_async_tls_with_config`) and should trust exactly what
/// [`WsTransport`](super::WsTransport) trusts. Fails with [`Error::Tls`] on a bad PEM text.
pub fn rustls_client_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for pem in tls.root_certificates_pem() {
        let mut added = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| tls_error("root certificate", e))?;
            roots.add(cert).map_err(|e| tls_error("root certificate", e))?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Tls("root certificate: no PEM CERTIFICATE block".into()));
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("tls setup", e))?
        .with_root_certificates(roots);
    let config = match tls.client_identity_pem() {
        Some((chain, key)) => {
            let certs = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_error("client certificate", e))?;
            if certs.is_empty() {
                return Err(Error::Tls("client certificate: no PEM CERTIFICATE block".into()));
            }
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls_error("client key", e))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| tls_error("client identity", e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The client for the identity request, trusting the same roots and presenting the same identity.
pub(super) fn http_client(opts: &WsOptions) -> Result<reqwest::Client, Error> {
    let builder = reqwest::Client::builder().connect_timeout(opts.connect.connect_timeout);
    let builder = opts.connect.tls.configure(builder).map_err(|e| match e {
        EdgeError::Tls(message) => Error::Tls(message),
        other => Error::Tls(other.to_string()),
    })?;
    builder.build().map_err(|e| Error::Connect(LdpError::transport(codes::TRANSPORT_ERROR, e.to_string())))
}
