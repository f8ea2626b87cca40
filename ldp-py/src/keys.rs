//! `SigningKey`: the message-signing key a server and a client share (`ldp::types::signing::SigningKey`).

use ldp::types::signing::{SignatureAlgorithm, SigningKey as Key};
use pyo3::prelude::*;

use crate::errors;

/// A key that signs every message and checks every answer: `hmac-sha256` (the reference SDK's scheme, ids only),
/// `hmac-sha256-jcs` (the whole envelope) or `ed25519-jcs` (the whole envelope, public-key verifiable).
#[pyclass(module = "ldp_rs._native", frozen)]
#[derive(Clone)]
pub(crate) struct SigningKey {
    pub(crate) key: Key,
}

#[pymethods]
impl SigningKey {
    /// A key for `algorithm`: the shared secret of `hmac-sha256` and `hmac-sha256-jcs`, or the 64-hex-digit seed
    /// of `ed25519-jcs`.
    #[new]
    fn new(algorithm: &str, secret: &str) -> PyResult<Self> {
        let alg: SignatureAlgorithm = algorithm.parse().map_err(|e| errors::usage(format!("{e}")))?;
        let key = match alg {
            SignatureAlgorithm::Ed25519Jcs => Key::ed25519_from_hex(secret),
            other => Key::shared_secret(other, secret),
        }
        .map_err(|e| errors::usage(format!("signing key: {e}")))?;
        Ok(Self { key })
    }

    /// The algorithm's wire name.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.key.algorithm().as_str()
    }

    /// The Ed25519 public key in hex, for peers that verify only (`None` for the HMAC schemes).
    #[getter]
    fn public_hex(&self) -> Option<String> {
        self.key.verifying_key().public_hex()
    }

    fn __repr__(&self) -> String {
        format!("SigningKey(algorithm={:?}, secret=<redacted>)", self.algorithm())
    }
}
