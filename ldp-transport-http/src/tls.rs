//! TLS and mutual TLS for the server (feature `tls`): rustls with the `ring` provider, one handshake task per
//! connection (bounded by its timeout and counted against the connection cap), and the router served over the
//! encrypted streams by the same accept loop as plain HTTP.
//!
//! With mutual TLS, a verified client certificate that matches a [`ClientCertMatch`] of the [`ClientAuth`] table
//! authenticates its connection: every request on it carries a [`PeerContext`](ldp_session::PeerContext) with that
//! [`AuthenticatedPeer`], which [`require_bearer`](crate::require_bearer) keeps (no token needed) and the session
//! layer uses for its trust checks exactly as it uses a bearer token's identity.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use ldp_session::AuthenticatedPeer;
use ldp_session::runtime::DelegateRuntime;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::server::{HttpState, ServerHandle, router};
use ldp_edge::Error;
use ldp_edge::{ConnectionLimits, ConnectionStats, Establish, EstablishedPeer, serve_established};

/// Which client certificates a [`ClientAuth`] entry stands for.
///
/// * `sha256:<hex>`: exactly the certificate whose DER encoding has this SHA-256 digest (the "fingerprint";
///   64 hex digits, colons allowed, as `openssl x509 -noout -fingerprint -sha256` prints it). A bare 64-hex-digit
///   string means the same.
/// * `dns:<name>`: any certificate issued by the client CA that is valid for this DNS name, checked like a server
///   name: against the certificate's subjectAltName dNSName entries only (not its subject CN), so a wildcard entry
///   such as `*.example.com` matches `a.example.com`. Pin fingerprints if the CA issues wildcard certificates.
///
/// The subject common name is deliberately not supported: it is a free-form field that RFC 6125 retired for
/// naming, and reading it would need a full X.509 parser. Put the name in a subjectAltName instead.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientCertMatch(Match);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Match {
    Sha256([u8; 32]),
    /// Lower-case, and known to parse as a [`ServerName::DnsName`].
    DnsName(String),
}

impl ClientCertMatch {
    /// The certificate with this SHA-256 fingerprint.
    pub fn sha256_fingerprint(fingerprint: [u8; 32]) -> Self {
        Self(Match::Sha256(fingerprint))
    }

    /// Exactly this certificate (DER), pinned by its SHA-256 fingerprint.
    pub fn certificate(der: &[u8]) -> Self {
        Self(Match::Sha256(Sha256::digest(der).into()))
    }

    /// Any CA-issued certificate valid for DNS name `name` (see the type's docs).
    pub fn dns_name(name: &str) -> Result<Self, Error> {
        let name = name.to_ascii_lowercase();
        match ServerName::try_from(name.as_str()) {
            Ok(ServerName::DnsName(_)) => Ok(Self(Match::DnsName(name))),
            _ => Err(Error::Tls(format!("{name:?} is not a DNS name"))),
        }
    }

    /// Whether `cert` (an end-entity certificate, DER) is one this entry stands for.
    pub fn matches(&self, cert: &[u8]) -> bool {
        match &self.0 {
            Match::Sha256(fingerprint) => <[u8; 32]>::from(Sha256::digest(cert)) == *fingerprint,
            Match::DnsName(name) => {
                let der = CertificateDer::from(cert);
                let (Ok(ee), Ok(name)) = (webpki::EndEntityCert::try_from(&der), ServerName::try_from(name.as_str()))
                else {
                    return false;
                };
                ee.verify_is_valid_for_subject_name(&name).is_ok()
            }
        }
    }
}

impl FromStr for ClientCertMatch {
    type Err = Error;

    /// Parses `sha256:<hex>`, `dns:<name>` or a bare 64-hex-digit fingerprint.
    fn from_str(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        let bare_hex =
            s.chars().filter(|c| *c != ':').count() == 64 && s.chars().all(|c| c == ':' || c.is_ascii_hexdigit());
        if let Some(hex) = s.strip_prefix("sha256:").or(bare_hex.then_some(s)) {
            let digits: String = hex.chars().filter(|c| *c != ':').collect();
            let mut fingerprint = [0u8; 32];
            hex::decode_to_slice(&digits, &mut fingerprint)
                .map_err(|_| Error::Tls(format!("{s:?}: a SHA-256 fingerprint is 64 hex digits")))?;
            return Ok(Self::sha256_fingerprint(fingerprint));
        }
        match s.strip_prefix("dns:") {
            Some(name) => Self::dns_name(name),
            None => Err(Error::Tls(format!("{s:?}: expected sha256:<fingerprint> or dns:<name>"))),
        }
    }
}

impl fmt::Display for ClientCertMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Match::Sha256(fingerprint) => write!(f, "sha256:{}", hex::encode(fingerprint)),
            Match::DnsName(name) => write!(f, "dns:{name}"),
        }
    }
}

/// Mutual TLS: the CA bundle client certificates must chain to, and the table mapping certificates to the peers
/// they authenticate.
///
/// Required (the default): a client must present a certificate that chains to the CA **and** matches an entry,
/// or the handshake is refused (rustls sends an alert; no HTTP request is ever read). Optional
/// ([`ClientAuth::optional`]): a client may present no certificate, or a CA-issued one that matches no entry; its
/// requests are then judged by the bearer-token rules (or are anonymous when no tokens are configured). A
/// certificate that does not chain to the CA is refused in both modes.
///
/// The first matching entry wins. The peer's trust domain is authoritative for the session layer (a
/// contradicting declaration is refused with `TRUST_VIOLATION`, 403), and its delegate id, when set, must be the
/// sender of every message (`UNAUTHENTICATED`, 401), exactly as for bearer tokens. A matched certificate takes
/// precedence over any `Authorization` header on the same connection.
#[derive(Clone)]
pub struct ClientAuth {
    roots: Arc<RootCertStore>,
    peers: Vec<(ClientCertMatch, AuthenticatedPeer)>,
    required: bool,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientAuth")
            .field("ca_certificates", &self.roots.len())
            .field("peers", &self.peers)
            .field("required", &self.required)
            .finish()
    }
}

impl ClientAuth {
    /// Required mutual TLS with the CA certificates in `pem` (one or more `CERTIFICATE` blocks) and no peers yet.
    pub fn from_ca_pem(pem: &[u8]) -> Result<Self, Error> {
        let certs = certificates(pem, "client CA bundle")?;
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| Error::Tls(format!("client CA bundle: {e}")))?;
        }
        Ok(Self { roots: Arc::new(roots), peers: Vec::new(), required: true })
    }

    /// [`ClientAuth::from_ca_pem`] reading the file at `path`.
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::from_ca_pem(&read(path.as_ref())?)
    }

    /// Certificates matching `cert` authenticate as `peer`.
    pub fn peer(mut self, cert: ClientCertMatch, peer: AuthenticatedPeer) -> Self {
        self.peers.push((cert, peer));
        self
    }

    /// Lets clients connect without a (matching) certificate; see the type's docs.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// Whether a matching client certificate is required.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// The peer a verified end-entity certificate (DER) authenticates, if any entry matches it.
    pub fn identify(&self, cert: &[u8]) -> Option<&AuthenticatedPeer> {
        self.peers.iter().find(|(m, _)| m.matches(cert)).map(|(_, peer)| peer)
    }
}

/// The server side of TLS: certificate chain, private key and optional [`ClientAuth`], checked and turned into a
/// rustls configuration when constructed (TLS 1.2 and 1.3, the `ring` provider, ALPN `http/1.1`).
#[derive(Clone)]
pub struct ServerTlsConfig {
    rustls: Arc<rustls::ServerConfig>,
    client_auth: Option<Arc<ClientAuth>>,
    handshake_timeout: Duration,
}

impl fmt::Debug for ServerTlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTlsConfig")
            .field("client_auth", &self.client_auth)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl ServerTlsConfig {
    /// From PEM: `cert_chain` holds the server certificate first, then any intermediates; `key` holds its private
    /// key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_chain: &[u8], key: &[u8], client_auth: Option<ClientAuth>) -> Result<Self, Error> {
        let chain = certificates(cert_chain, "certificate chain")?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| Error::Tls(format!("private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?;
        let builder = match &client_auth {
            Some(auth) => builder.with_client_cert_verifier(verifier(auth, provider)?),
            None => builder.with_no_client_auth(),
        };
        let mut config =
            builder.with_single_cert(chain, key).map_err(|e| Error::Tls(format!("certificate or key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            rustls: Arc::new(config),
            client_auth: client_auth.map(Arc::new),
            handshake_timeout: Duration::from_secs(10),
        })
    }

    /// [`ServerTlsConfig::from_pem`] reading the files at `cert_chain` and `key`.
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
        client_auth: Option<ClientAuth>,
    ) -> Result<Self, Error> {
        Self::from_pem(&read(cert_chain.as_ref())?, &read(key.as_ref())?, client_auth)
    }

    /// Longest time a client may take to complete the handshake (default 10 s); then the connection is dropped.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The mutual-TLS settings, if any.
    pub fn client_auth(&self) -> Option<&ClientAuth> {
        self.client_auth.as_deref()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Tls(format!("{}: {e}", path.display())))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Tls(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Tls(format!("{what}: no PEM CERTIFICATE block")));
    }
    Ok(certs)
}

fn verifier(auth: &ClientAuth, provider: Arc<CryptoProvider>) -> Result<Arc<dyn ClientCertVerifier>, Error> {
    if auth.required && auth.peers.is_empty() {
        return Err(Error::Tls("mutual TLS is required but no client certificate is mapped to a peer".into()));
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::clone(&auth.roots), provider);
    let builder = if auth.required { builder } else { builder.allow_unauthenticated() };
    let inner = builder.build().map_err(|e| Error::Tls(format!("client CA bundle: {e}")))?;
    Ok(Arc::new(MappedClientVerifier { inner, auth: auth.clone() }))
}

/// The WebPKI verifier, plus: when mutual TLS is required, a certificate that matches no entry is refused during
/// the handshake (`ApplicationVerificationFailure`, sent to the client as an alert).
#[derive(Debug)]
struct MappedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    auth: ClientAuth,
}

impl ClientCertVerifier for MappedClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.auth.required
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        if self.auth.required && self.auth.identify(end_entity).is_none() {
            return Err(rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// TLS on an accepted connection: the handshake on the connection's own task (a slow client holds up nobody
/// else), bounded by the handshake timeout, and the peer a mapped client certificate authenticates.
#[derive(Clone)]
struct Tls {
    acceptor: TlsAcceptor,
    client_auth: Option<Arc<ClientAuth>>,
    timeout: Duration,
}

impl Tls {
    fn new(tls: &ServerTlsConfig) -> Self {
        Self {
            acceptor: TlsAcceptor::from(Arc::clone(&tls.rustls)),
            client_auth: tls.client_auth.clone(),
            timeout: tls.handshake_timeout,
        }
    }
}

impl Establish for Tls {
    type Io = TlsStream<TcpStream>;
    const PLAINTEXT: bool = false;

    async fn establish(
        &self,
        tcp: TcpStream,
        remote: SocketAddr,
    ) -> Option<(TlsStream<TcpStream>, Option<EstablishedPeer>)> {
        // Best effort: latency matters more than packet count for one-envelope exchanges.
        let _ = tcp.set_nodelay(true);
        let stream = match tokio::time::timeout(self.timeout, self.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                tracing::debug!(%remote, timeout = ?self.timeout, "TLS handshake timed out");
                return None;
            }
        };
        // rustls keeps the client's certificates only once they are verified.
        let peer = match (&self.client_auth, stream.get_ref().1.peer_certificates().and_then(<[_]>::first)) {
            // The principal is the certificate itself (its SHA-256 fingerprint): a renewed certificate is a new
            // principal, so sessions opened with the old one are not reachable with the new one.
            (Some(auth), Some(cert)) => auth.identify(cert).map(|peer| {
                use sha2::{Digest, Sha256};
                let fingerprint: String = Sha256::digest(cert.as_ref()).iter().map(|b| format!("{b:02x}")).collect();
                (peer.clone(), Arc::from(format!("mtls:sha256:{fingerprint}")))
            }),
            _ => None,
        };
        Some((stream, peer))
    }
}

/// [`serve`](crate::serve) over TLS: serves `router(state)` on `listener` until `shutdown` resolves, with the
/// state's connection limits.
pub async fn serve_tls(
    listener: TcpListener,
    state: HttpState,
    tls: ServerTlsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.config().limits.clone();
    serve_router_tls_with_limits(listener, state.runtime().clone(), router(state), tls, limits, shutdown).await
}

/// [`serve_router`](crate::serve_router) over TLS, for a router built with [`router_with`](crate::router_with)
/// (possibly merged with other bindings' routes, which see the certificate's
/// [`PeerContext`](ldp_session::PeerContext) too), with the default [`ConnectionLimits`]. Failed handshakes (a
/// plain-HTTP client, a refused certificate) only end their own connection.
pub async fn serve_router_tls(
    listener: TcpListener,
    runtime: DelegateRuntime,
    app: Router,
    tls: ServerTlsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_tls_with_limits(listener, runtime, app, tls, ConnectionLimits::default(), shutdown).await
}

/// [`serve_router_tls`] with these connection limits (see [`serve_router_with_limits`](crate::serve_router_with_limits)).
/// Handshakes count against [`ConnectionLimits::max_connections`] and are quiet (a stalled one makes room for a new
/// connection at the cap); a connection over the cap with none quiet is closed before its handshake.
pub async fn serve_router_tls_with_limits(
    listener: TcpListener,
    runtime: DelegateRuntime,
    app: Router,
    tls: ServerTlsConfig,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stats = ConnectionStats::new(limits.max_connections);
    serve_established(listener, Tls::new(&tls), runtime, app, limits, stats, shutdown).await
}

/// [`spawn`](crate::spawn) over TLS: binds `addr` and serves `state` on a background task; the handle's URL is
/// `https://<addr>`.
pub async fn spawn_tls(
    addr: impl tokio::net::ToSocketAddrs,
    state: HttpState,
    tls: ServerTlsConfig,
) -> std::io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = state.config().limits.clone();
    let stats = ConnectionStats::new(limits.max_connections);
    let (runtime, app) = (state.runtime().clone(), router(state));
    let join =
        tokio::spawn(serve_established(listener, Tls::new(&tls), runtime, app, limits, stats.clone(), async move {
            let _ = stopped.await;
        }));
    Ok(ServerHandle::running(addr, format!("https://{addr}"), stop, join, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_parse_and_print() {
        let fp = "AB:".repeat(31) + "AB";
        let m: ClientCertMatch = format!("sha256:{fp}").parse().unwrap();
        assert_eq!(m.to_string(), format!("sha256:{}", "ab".repeat(32)));
        assert_eq!("ab".repeat(32).parse::<ClientCertMatch>().unwrap(), m);
        assert_eq!("dns:Client.Example".parse::<ClientCertMatch>().unwrap().to_string(), "dns:client.example");
        for bad in ["sha256:abc", "dns:", "dns:not a name", "client.example", "", "sha256:", "dns:127.0.0.1"] {
            assert!(bad.parse::<ClientCertMatch>().is_err(), "{bad}");
        }
        assert!(!m.matches(b"not a certificate"));
        assert!(!"dns:a.example".parse::<ClientCertMatch>().unwrap().matches(b"not a certificate"));
        assert!(ClientCertMatch::certificate(b"x").matches(b"x"));
    }

    #[test]
    fn bad_pem_is_an_error_not_a_panic() {
        assert!(matches!(ServerTlsConfig::from_pem(b"", b"", None), Err(Error::Tls(_))));
        assert!(matches!(ServerTlsConfig::from_pem(b"garbage", b"garbage", None), Err(Error::Tls(_))));
        assert!(matches!(ClientAuth::from_ca_pem(b"-----BEGIN CERTIFICATE-----\n!!\n"), Err(Error::Tls(_))));
        assert!(ServerTlsConfig::from_pem_files("/nonexistent/cert.pem", "/nonexistent/key.pem", None).is_err());
    }
}
