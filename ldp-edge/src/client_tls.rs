//! Client-side TLS settings, shared by every client that dials `https://` or `wss://`: this crate's
//! `ldp_transport_http::HttpTransport`, the WebSocket transport and the conformance kit take the same value, so
//! a private CA or a client certificate is configured once and checked the same way everywhere.

use std::fmt;

#[cfg(feature = "client")]
use crate::Error;

/// What a client trusts beyond the built-in web PKI roots, and the certificate it presents for mutual TLS.
///
/// The default trusts the web PKI roots only and presents no certificate. The PEM texts are checked when a client
/// is built from them ([`ClientTls::configure`], or the WebSocket transport's connect), which fails with
/// [`Error::Tls`] on a bad one.
///
/// ```
/// use ldp_edge::ClientTls;
///
/// let ca = "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n";
/// let tls = ClientTls::new().with_root_certificate_pem(ca);
/// assert_eq!(tls.root_certificates_pem().count(), 1);
/// assert!(tls.client_identity_pem().is_none());
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    roots: Vec<Vec<u8>>,
    /// Certificate chain and private key, PEM.
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// Web PKI roots only, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks): e.g. a private CA, or a
    /// self-signed server certificate in tests. Repeatable.
    pub fn with_root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(pem.into());
        self
    }

    /// Presents this client certificate for mutual TLS: `cert_chain` holds the certificate first, then any
    /// intermediates; `key` its private key (PKCS#8, PKCS#1 or SEC1), all PEM.
    pub fn with_client_identity_pem(mut self, cert_chain: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.identity = Some((cert_chain.into(), key.into()));
        self
    }

    /// Whether this is the default: nothing trusted beyond the web PKI roots, no client certificate.
    pub fn is_default(&self) -> bool {
        self.roots.is_empty() && self.identity.is_none()
    }

    /// The PEM texts of the added roots, in the order they were added.
    pub fn root_certificates_pem(&self) -> impl Iterator<Item = &[u8]> {
        self.roots.iter().map(Vec::as_slice)
    }

    /// The client certificate chain and its private key, PEM, if one is set.
    pub fn client_identity_pem(&self) -> Option<(&[u8], &[u8])> {
        self.identity.as_ref().map(|(chain, key)| (chain.as_slice(), key.as_slice()))
    }

    /// Adds the roots and the client identity to a `reqwest` client builder (feature `client`). Fails with [`Error::Tls`] when a root
    /// text holds no certificate or a PEM text does not parse.
    #[cfg(feature = "client")]
    pub fn configure(&self, mut builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, Error> {
        for pem in &self.roots {
            let certs =
                reqwest::Certificate::from_pem_bundle(pem).map_err(|e| Error::Tls(format!("root certificate: {e}")))?;
            if certs.is_empty() {
                return Err(Error::Tls("root certificate: no PEM CERTIFICATE block".into()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some((chain, key)) = &self.identity {
            // reqwest reads the identity from one PEM text holding both the chain and the key.
            let mut pem = Vec::with_capacity(chain.len() + key.len() + 1);
            pem.extend_from_slice(chain);
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let identity =
                reqwest::Identity::from_pem(&pem).map_err(|e| Error::Tls(format!("client identity: {e}")))?;
            builder = builder.identity(identity);
        }
        Ok(builder)
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The private key never reaches a log line.
        f.debug_struct("ClientTls")
            .field("roots", &self.roots.len())
            .field("client_identity", &self.identity.as_ref().map(|_| "<certificate and key>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_without_a_certificate_block_is_a_tls_error() {
        let tls = ClientTls::new().with_root_certificate_pem("not a certificate");
        let err = tls.configure(reqwest::Client::builder()).err();
        assert!(matches!(&err, Some(Error::Tls(m)) if m.contains("root certificate")), "{err:?}");
    }

    #[test]
    fn a_broken_client_identity_is_a_tls_error() {
        let tls = ClientTls::new().with_client_identity_pem("no cert", "no key");
        let err = tls.configure(reqwest::Client::builder()).err();
        assert!(matches!(&err, Some(Error::Tls(m)) if m.contains("client identity")), "{err:?}");
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let tls = ClientTls::new().with_client_identity_pem("CHAIN", "SECRET-KEY-MATERIAL");
        let shown = format!("{tls:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(!tls.is_default());
        assert!(ClientTls::new().is_default());
    }
}
