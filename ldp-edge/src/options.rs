//! What every client transport is configured with, whatever its wire: [`ConnectOptions`] (token, TLS, timeouts,
//! retries, the largest answer) and the [`ConnectSettings`] setters, written once and shared by the HTTP builder,
//! the WebSocket options and the front door's client options.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::Backoff;
use ldp_types::LdpError;
use rand::Rng;

use crate::client_tls::ClientTls;

/// When and how often to try again: exponential backoff with jitter.
///
/// Over HTTP these are retries of a request that never reached the delegate (the connection could not be made, or
/// the server answered 503/429 before handling it); a timeout after a message was sent is not retried, since a
/// resent TASK_SUBMIT would be a duplicate, except for the idempotent discovery GET. Over WebSocket they are
/// reconnects after a dropped connection, after which the outstanding requests are resumed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts after the first one.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles on each further retry.
    pub initial_backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// The HTTP default: 3 retries, 100 ms doubling up to 2 s.
    fn default() -> Self {
        Self { max_retries: 3, initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(2) }
    }
}

impl RetryPolicy {
    /// Never retry (never reconnect: a dropped connection fails the outstanding requests).
    pub fn none() -> Self {
        Self { max_retries: 0, ..Self::default() }
    }

    /// The WebSocket default: 10 reconnects, 50 ms doubling up to 5 s. Longer than HTTP's, because a dropped
    /// connection takes running tasks with it and a restarting server should be waited for.
    pub fn reconnect() -> Self {
        Self { max_retries: 10, initial_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(5) }
    }

    /// The wait before retry number `attempt` (0-based): exponential, capped, with "equal jitter" (half fixed,
    /// half uniformly random) so that many clients failing together do not retry in lockstep.
    pub fn backoff(&self, attempt: u32) -> Duration {
        Backoff::new(self.initial_backoff, self.max_backoff).delay(attempt, rand::rng().random())
    }
}

/// The default bound on one answer (an HTTP body, a streamed event, a WebSocket message): a delegate is a peer, and
/// an answer that never ends must not grow the client's memory.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where a client gets a bearer token that changes: short-lived tokens from an identity provider, a secret store,
/// a command. Asked before every HTTP request and every WebSocket connection, so it should cache and refresh the
/// token itself; a failure is the request's failure (return an `identity` [`LdpError`] such as `UNAUTHENTICATED`).
#[async_trait]
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// The token to send now.
    async fn token(&self) -> Result<String, LdpError>;
}

/// How a client reaches a delegate, for either transport: one value configures an
/// `ldp_transport_http::HttpTransport`, a WebSocket transport, or the front door's `connect_with`.
///
/// Set it with the [`ConnectSettings`] methods, which every client builder has too:
///
/// ```
/// use std::time::Duration;
/// use ldp_edge::{ConnectOptions, ConnectSettings, RetryPolicy};
///
/// let options = ConnectOptions::new()
///     .bearer_token("s3cret")
///     .request_timeout(Duration::from_secs(30))
///     .retry(RetryPolicy::none());
/// assert_eq!(options.token.as_deref(), Some("s3cret"));
/// assert_eq!(options.retry, Some(RetryPolicy::none()));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Sent as `Authorization: Bearer <token>` with every request (and the WebSocket upgrade).
    pub token: Option<String>,
    /// Asked for the token before every request (and connection) instead, when set.
    pub token_source: Option<Arc<dyn TokenSource>>,
    /// Trust roots beyond the web PKI, and a client certificate for mutual TLS (`https://`, `wss://`).
    pub tls: ClientTls,
    /// Longest wait to open a connection, TLS and upgrade included (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for one answer, task execution included (default: the transport's; HTTP 60 s, WebSocket none
    /// beyond the task's own, since a dead connection is found by the keepalive).
    pub request_timeout: Option<Duration>,
    /// Retries (HTTP) or reconnects (WebSocket) (default: the transport's; [`RetryPolicy::default`] and
    /// [`RetryPolicy::reconnect`]).
    pub retry: Option<RetryPolicy>,
    /// Largest answer accepted from the delegate, in bytes (default [`DEFAULT_MAX_RESPONSE_BYTES`]); a larger one
    /// fails with `MESSAGE_TOO_LARGE` and is not retried.
    pub max_message: usize,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            token: None,
            token_source: None,
            tls: ClientTls::default(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: None,
            retry: None,
            max_message: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

impl fmt::Debug for ConnectOptions {
    /// The token left out: options end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_source", &self.token_source)
            .field("tls", &self.tls)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("max_message", &self.max_message)
            .finish()
    }
}

impl ConnectOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token to send now: the [`TokenSource`]'s when there is one, else the fixed token, else none.
    pub async fn current_token(&self) -> Result<Option<String>, LdpError> {
        self.credentials().current().await
    }

    /// The token settings alone, for a transport to keep.
    pub fn credentials(&self) -> Credentials {
        Credentials { token: self.token.clone(), source: self.token_source.clone() }
    }
}

/// The bearer token settings a transport keeps from its [`ConnectOptions`]: a fixed token or a [`TokenSource`].
/// Its `Debug` leaves the token out.
#[derive(Clone, Default)]
pub struct Credentials {
    token: Option<String>,
    source: Option<Arc<dyn TokenSource>>,
}

impl Credentials {
    /// The token to send now: the source's when there is one, else the fixed token, else none.
    pub async fn current(&self) -> Result<Option<String>, LdpError> {
        match &self.source {
            Some(source) => source.token().await.map(Some),
            None => Ok(self.token.clone()),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("source", &self.source)
            .finish()
    }
}

/// The setters of [`ConnectOptions`], for every type that carries one (the options themselves, the HTTP builder,
/// the WebSocket options, the front door's client options), so each setting is named and documented once.
pub trait ConnectSettings: Sized {
    /// The options being set.
    fn connect_options_mut(&mut self) -> &mut ConnectOptions;

    /// Replaces all of them with `options`.
    #[must_use]
    fn connect_options(mut self, options: ConnectOptions) -> Self {
        *self.connect_options_mut() = options;
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request (and the WebSocket upgrade).
    #[must_use]
    fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.connect_options_mut().token = Some(token.into());
        self
    }

    /// Asks `source` for the token before every request (and WebSocket connection), instead of a fixed token.
    #[must_use]
    fn token_source(mut self, source: impl TokenSource + 'static) -> Self {
        self.connect_options_mut().token_source = Some(Arc::new(source));
        self
    }

    /// Longest wait to open a connection (default 5 s).
    #[must_use]
    fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_options_mut().connect_timeout = timeout;
        self
    }

    /// Longest wait for one answer, task execution included (default: HTTP 60 s, WebSocket none).
    #[must_use]
    fn request_timeout(mut self, timeout: Duration) -> Self {
        self.connect_options_mut().request_timeout = Some(timeout);
        self
    }

    /// The retry (HTTP) or reconnect (WebSocket) policy.
    #[must_use]
    fn retry(mut self, policy: RetryPolicy) -> Self {
        self.connect_options_mut().retry = Some(policy);
        self
    }

    /// Largest answer accepted from the delegate, in bytes (default 16 MiB).
    #[must_use]
    fn max_message(mut self, bytes: usize) -> Self {
        self.connect_options_mut().max_message = bytes;
        self
    }

    /// Replaces the TLS settings with `tls` (roots and client identity).
    #[must_use]
    fn tls(mut self, tls: ClientTls) -> Self {
        self.connect_options_mut().tls = tls;
        self
    }

    /// Also trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks): a private CA, or a self-signed
    /// server certificate in tests. Repeatable. A bad PEM fails when the client is built or connects.
    #[must_use]
    fn tls_root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        let options = self.connect_options_mut();
        options.tls = std::mem::take(&mut options.tls).with_root_certificate_pem(pem);
        self
    }

    /// Presents this client certificate for mutual TLS: `cert_chain` holds the certificate first, then any
    /// intermediates; `key` its private key (PKCS#8, PKCS#1 or SEC1), all PEM.
    #[must_use]
    fn tls_client_identity_pem(mut self, cert_chain: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        let options = self.connect_options_mut();
        options.tls = std::mem::take(&mut options.tls).with_client_identity_pem(cert_chain, key);
        self
    }
}

impl ConnectSettings for ConnectOptions {
    fn connect_options_mut(&mut self) -> &mut ConnectOptions {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 0..10 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(attempt)).min(Duration::from_secs(1));
            let b = p.backoff(attempt);
            assert!(b >= ceiling / 2 && b <= ceiling, "{attempt}: {b:?}");
        }
    }

    #[test]
    fn setters_write_the_field_they_name() {
        let o = ConnectOptions::new()
            .bearer_token("t")
            .connect_timeout(Duration::from_secs(2))
            .request_timeout(Duration::from_secs(9))
            .max_message(10)
            .tls_root_certificate_pem("ca")
            .tls_client_identity_pem("cert", "key");
        assert_eq!(o.token.as_deref(), Some("t"));
        assert_eq!(o.connect_timeout, Duration::from_secs(2));
        assert_eq!(o.request_timeout, Some(Duration::from_secs(9)));
        assert_eq!(o.max_message, 10);
        assert_eq!(o.tls.root_certificates_pem().count(), 1);
        assert!(o.tls.client_identity_pem().is_some());
        assert_eq!(o.retry, None, "left to the transport's default");
        assert!(!format!("{o:?}").contains("\"t\""), "the token stays out of Debug: {o:?}");
    }

    #[derive(Debug)]
    struct Rotating(std::sync::atomic::AtomicU32);

    #[async_trait]
    impl TokenSource for Rotating {
        async fn token(&self) -> Result<String, LdpError> {
            Ok(format!("tok-{}", self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
        }
    }

    #[tokio::test]
    async fn a_token_source_is_asked_each_time_and_wins_over_the_fixed_token() {
        let o = ConnectOptions::new().bearer_token("fixed");
        assert_eq!(o.current_token().await.unwrap().as_deref(), Some("fixed"));
        let o = o.token_source(Rotating(Default::default()));
        assert_eq!(o.current_token().await.unwrap().as_deref(), Some("tok-0"));
        assert_eq!(o.current_token().await.unwrap().as_deref(), Some("tok-1"));
    }
}
