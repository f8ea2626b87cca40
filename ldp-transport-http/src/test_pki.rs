//! Throwaway certificates for tests and local trials of TLS set-ups (feature `test-pki`): a CA made on the spot that
//! issues server and client certificates, all PEM. Not for production: the keys exist only in memory and nothing
//! can revoke the certificates.
//!
//! ```
//! use ldp_transport_http::test_pki::TestCa;
//!
//! let ca = TestCa::new("test CA")?;
//! let server = ca.server_cert()?; // for `localhost` and 127.0.0.1
//! let client = ca.client_cert("ldp:delegate:alpha")?;
//! assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
//! assert!(server.key_pem.contains("PRIVATE KEY"));
//! assert!(!client.der.is_empty());
//! # Ok::<(), ldp_transport_http::Error>(())
//! ```

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

use ldp_edge::Error;

/// What an issued certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertPurpose {
    /// A server certificate (extended key usage `serverAuth`); it also names 127.0.0.1.
    Server,
    /// A client certificate for mutual TLS (extended key usage `clientAuth`).
    Client,
}

/// A certificate and its private key.
#[derive(Clone)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
    /// The certificate, DER (e.g. for [`ClientCertMatch::certificate`](crate::ClientCertMatch::certificate)).
    pub der: Vec<u8>,
}

impl std::fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCert").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

/// A self-signed CA that issues certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

fn pki_error(e: rcgen::Error) -> Error {
    Error::Tls(format!("test pki: {e}"))
}

impl TestCa {
    /// A new CA with common name `name` and a fresh key.
    pub fn new(name: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(pki_error)?;
        Ok(Self { issuer: CertifiedIssuer::self_signed(params, key).map_err(pki_error)? })
    }

    /// The CA certificate, PEM: what a client trusts, or a server checks client certificates against.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `dns_names` (the first is also the common name; `client` when there is none).
    pub fn issue(&self, dns_names: &[&str], purpose: CertPurpose) -> Result<IssuedCert, Error> {
        let names: Vec<String> = dns_names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names).map_err(pki_error)?;
        if purpose == CertPurpose::Server {
            params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        }
        params.distinguished_name.push(DnType::CommonName, dns_names.first().copied().unwrap_or("client"));
        params.extended_key_usages = vec![match purpose {
            CertPurpose::Server => ExtendedKeyUsagePurpose::ServerAuth,
            CertPurpose::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let key = KeyPair::generate().map_err(pki_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_error)?;
        Ok(IssuedCert { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() })
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server_cert(&self) -> Result<IssuedCert, Error> {
        self.issue(&["localhost"], CertPurpose::Server)
    }

    /// A client certificate named `name`.
    pub fn client_cert(&self, name: &str) -> Result<IssuedCert, Error> {
        self.issue(&[name], CertPurpose::Client)
    }
}
