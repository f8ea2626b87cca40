//! The client's settings: [`WsOptions`], the [`Reconnect`] policy, and the TLS configuration shared by the
//! WebSocket and the identity request.

use std::sync::Arc;
use std::time::Duration;

use ldp_session::Backoff;
use ldp_transport_http::{ClientTls, Error as HttpError};
use ldp_types::signing::SigningKey;
use ldp_types::{LdpError, codes};

use crate::error::Error;

/// Reconnection policy: exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reconnect {
    /// Attempts after a connection drops before the outstanding requests fail (the next request tries again).
    pub max_attempts: u32,
    /// Wait before the first attempt; doubles on each further attempt.
    pub initial_backoff: Duration,
    /// Upper bound of one wait.
    pub max_backoff: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self { max_attempts: 10, initial_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(5) }
    }
}

impl Reconnect {
    /// Never reconnect: a dropped connection fails the outstanding requests.
    pub fn never() -> Self {
        Self { max_attempts: 0, ..Self::default() }
    }

    /// The wait before attempt `attempt` (0-based): exponential, capped, half of it random ([`Backoff`], the rule
    /// the HTTP client's retries follow too).
    pub fn backoff(&self, attempt: u32) -> Duration {
        Backoff::new(self.initial_backoff, self.max_backoff).delay(attempt, rand::random())
    }
}

/// Client settings of [`WsTransport`](super::WsTransport).
#[derive(Debug, Clone)]
pub struct WsOptions {
    pub(super) token: Option<String>,
    pub(super) identity_url: Option<String>,
    pub(super) ping_interval: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) request_timeout: Option<Duration>,
    pub(super) max_message: usize,
    pub(super) send_queue: usize,
    pub(super) reconnect: Reconnect,
    pub(super) resume_grace: Duration,
    pub(super) tls: ClientTls,
}

impl Default for WsOptions {
    fn default() -> Self {
        Self {
            token: None,
            identity_url: None,
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            connect_timeout: Duration::from_secs(5),
            request_timeout: None,
            max_message: 16 * 1024 * 1024,
            send_queue: 256,
            reconnect: Reconnect::default(),
            resume_grace: Duration::from_secs(5),
            tls: ClientTls::default(),
        }
    }
}

impl WsOptions {
    /// Formerly the key of the status queries the client sent itself after a reconnect. The initiator now builds
    /// and signs them with its own security settings, like every other message, so this key is ignored.
    #[deprecated(note = "the initiator signs the resume's status queries with its own key; this one is ignored")]
    pub fn signing_key(self, key: SigningKey) -> Self {
        drop(key);
        self
    }

    /// Sends `Authorization: Bearer <token>` on the upgrade request (and the identity request).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
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

    /// Timeout of opening one connection, handshake included (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest wait for one answer, task execution included (default: none; long tasks are what WebSocket is for,
    /// and a dead connection is detected by the keepalive).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Largest message accepted from the server (default 16 MiB).
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Messages waiting to be written (default 256); callers wait when it is full.
    pub fn send_queue(mut self, frames: usize) -> Self {
        self.send_queue = frames;
        self
    }

    /// The reconnection policy.
    pub fn reconnect(mut self, policy: Reconnect) -> Self {
        self.reconnect = policy;
        self
    }

    /// After a resume, how long to wait for the result of a task the server reports as already ended before
    /// concluding that the result was lost with the old connection (default 5 s).
    pub fn resume_grace(mut self, grace: Duration) -> Self {
        self.resume_grace = grace;
        self
    }

    /// Trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks) for `wss://` URLs and the identity
    /// request over `https://`, in addition to the built-in web PKI roots: e.g. a private CA, or a self-signed server
    /// certificate in tests. Repeatable. A bad PEM makes [`WsTransport::connect`](super::WsTransport::connect) fail with [`Error::Tls`].
    pub fn tls_root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls = self.tls.with_root_certificate_pem(pem);
        self
    }

    /// Presents this client certificate for mutual TLS (on the WebSocket and the identity request): `cert_chain`
    /// holds the certificate first, then any intermediates; `key` its private key (PKCS#8, PKCS#1 or SEC1), all PEM.
    /// A bad PEM makes [`WsTransport::connect`](super::WsTransport::connect) fail with [`Error::Tls`].
    pub fn tls_client_identity_pem(mut self, cert_chain: &[u8], key: &[u8]) -> Self {
        self.tls = self.tls.with_client_identity_pem(cert_chain, key);
        self
    }

    /// Replaces the TLS settings with `tls` (roots and client identity), e.g. one shared with an HTTP client.
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.tls = tls;
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
    let builder = reqwest::Client::builder().connect_timeout(opts.connect_timeout);
    let builder = opts.tls.configure(builder).map_err(|e| match e {
        HttpError::Tls(message) => Error::Tls(message),
        other => Error::Tls(other.to_string()),
    })?;
    builder.build().map_err(|e| Error::Connect(LdpError::transport(codes::TRANSPORT_ERROR, e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_and_jittered() {
        let p = Reconnect {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 0..10 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(attempt)).min(Duration::from_secs(1));
            let b = p.backoff(attempt);
            assert!(b >= ceiling / 2 && b <= ceiling, "{attempt}: {b:?}");
        }
    }
}
