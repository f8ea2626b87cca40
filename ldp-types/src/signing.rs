//! Envelope signatures, three named algorithms.
//!
//! - `hmac-sha256`: byte-for-byte the reference SDKs' scheme: HMAC-SHA256 over
//!   `from|to|session_id|timestamp|message_id[|nonce]|KEY|TYPE`, where KEY identifies the body (see
//!   [`legacy_signing_input`]). It does **not** cover the body's content (input, output, config, provenance) nor
//!   `payload_mode`; use it only to interoperate.
//! - `hmac-sha256-jcs`: HMAC-SHA256 over the RFC 8785 (JCS) canonical JSON of the whole envelope without
//!   `signature` and `signature_algorithm` (`nonce` included). Any change to any member fails verification.
//! - `ed25519-jcs`: Ed25519 over the same canonical bytes, verifiable by third parties without a shared secret.
//!
//! Signatures are lowercase hex. Verification compares in constant time. A receiver verifies the JCS algorithms
//! over the JSON *as received* ([`verify_value`]): members present as `null`, and members this implementation does
//! not know, are part of what the sender signed.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::Signer;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::envelope::{Body, Envelope, UnsignedView};
use crate::error::Error;

type HmacSha256 = Hmac<Sha256>;

/// A signature algorithm, by its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignatureAlgorithm {
    /// `hmac-sha256` (reference-SDK compatible; does not cover the body's content).
    HmacSha256,
    /// `hmac-sha256-jcs` (covers the whole envelope).
    HmacSha256Jcs,
    /// `ed25519-jcs` (covers the whole envelope; public-key verifiable).
    Ed25519Jcs,
}

impl SignatureAlgorithm {
    /// All algorithms.
    pub const ALL: [SignatureAlgorithm; 3] = [Self::HmacSha256, Self::HmacSha256Jcs, Self::Ed25519Jcs];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::HmacSha256Jcs => "hmac-sha256-jcs",
            Self::Ed25519Jcs => "ed25519-jcs",
        }
    }
}

impl fmt::Display for SignatureAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SignatureAlgorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| Error::UnknownSignatureAlgorithm(s.to_owned()))
    }
}

/// A key that signs.
#[derive(Clone)]
#[non_exhaustive]
pub enum SigningKey {
    /// Shared secret for `hmac-sha256`.
    HmacSha256(Vec<u8>),
    /// Shared secret for `hmac-sha256-jcs`.
    HmacSha256Jcs(Vec<u8>),
    /// Ed25519 private key for `ed25519-jcs`.
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print secrets.
        write!(f, "SigningKey({})", self.algorithm())
    }
}

impl SigningKey {
    /// A shared-secret key for `algorithm` (`hmac-sha256` or `hmac-sha256-jcs`).
    pub fn shared_secret(algorithm: SignatureAlgorithm, secret: impl AsRef<[u8]>) -> Result<Self, Error> {
        let secret = secret.as_ref().to_vec();
        match algorithm {
            SignatureAlgorithm::HmacSha256 => Ok(Self::HmacSha256(secret)),
            SignatureAlgorithm::HmacSha256Jcs => Ok(Self::HmacSha256Jcs(secret)),
            SignatureAlgorithm::Ed25519Jcs => {
                Err(Error::InvalidKey("ed25519-jcs takes a private key, not a shared secret"))
            }
        }
    }

    /// An Ed25519 key from its 32-byte seed.
    pub fn ed25519_from_seed(seed: &[u8; 32]) -> Self {
        Self::Ed25519(Box::new(ed25519_dalek::SigningKey::from_bytes(seed)))
    }

    /// An Ed25519 key from a 64-character hex seed.
    pub fn ed25519_from_hex(seed_hex: &str) -> Result<Self, Error> {
        let bytes = hex::decode(seed_hex).map_err(|_| Error::InvalidKey("ed25519 seed must be hex"))?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| Error::InvalidKey("ed25519 seed must be 32 bytes"))?;
        Ok(Self::ed25519_from_seed(&seed))
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match self {
            Self::HmacSha256(_) => SignatureAlgorithm::HmacSha256,
            Self::HmacSha256Jcs(_) => SignatureAlgorithm::HmacSha256Jcs,
            Self::Ed25519(_) => SignatureAlgorithm::Ed25519Jcs,
        }
    }

    /// The matching verifying key.
    pub fn verifying_key(&self) -> VerifyingKey {
        match self {
            Self::HmacSha256(s) => VerifyingKey::HmacSha256(s.clone()),
            Self::HmacSha256Jcs(s) => VerifyingKey::HmacSha256Jcs(s.clone()),
            Self::Ed25519(k) => VerifyingKey::Ed25519(k.verifying_key()),
        }
    }
}

/// A key that verifies.
#[derive(Clone)]
#[non_exhaustive]
pub enum VerifyingKey {
    /// Shared secret for `hmac-sha256`.
    HmacSha256(Vec<u8>),
    /// Shared secret for `hmac-sha256-jcs`.
    HmacSha256Jcs(Vec<u8>),
    /// Ed25519 public key for `ed25519-jcs`.
    Ed25519(ed25519_dalek::VerifyingKey),
}

impl fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VerifyingKey({})", self.algorithm())
    }
}

impl VerifyingKey {
    /// An Ed25519 public key from 64 hex characters.
    pub fn ed25519_from_hex(public_hex: &str) -> Result<Self, Error> {
        let bytes = hex::decode(public_hex).map_err(|_| Error::InvalidKey("ed25519 public key must be hex"))?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| Error::InvalidKey("ed25519 public key must be 32 bytes"))?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(Self::Ed25519)
            .map_err(|_| Error::InvalidKey("not an ed25519 point"))
    }

    /// The public key as hex (Ed25519 only).
    pub fn public_hex(&self) -> Option<String> {
        match self {
            Self::Ed25519(k) => Some(hex::encode(k.as_bytes())),
            _ => None,
        }
    }

    /// The algorithm this key verifies.
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match self {
            Self::HmacSha256(_) => SignatureAlgorithm::HmacSha256,
            Self::HmacSha256Jcs(_) => SignatureAlgorithm::HmacSha256Jcs,
            Self::Ed25519(_) => SignatureAlgorithm::Ed25519Jcs,
        }
    }
}

/// The exact bytes the reference SDKs feed to HMAC for `hmac-sha256`.
pub fn legacy_signing_input(envelope: &Envelope) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    for part in [&envelope.from, &envelope.to, &envelope.session_id, &envelope.timestamp, &envelope.message_id] {
        out.extend_from_slice(part.as_bytes());
        out.push(b'|');
    }
    if let Some(nonce) = &envelope.nonce {
        out.extend_from_slice(nonce.as_bytes());
        out.push(b'|');
    }
    match &envelope.body {
        Body::Hello(b) => out.extend_from_slice(b.delegate_id.as_bytes()),
        Body::SessionAccept(b) => out.extend_from_slice(b.session_id.as_bytes()),
        Body::SessionReject(b) => out.extend_from_slice(b.reason.as_bytes()),
        Body::TaskSubmit(b) => {
            out.extend_from_slice(b.task_id.as_bytes());
            out.push(b'|');
            out.extend_from_slice(b.skill.as_bytes());
        }
        Body::TaskUpdate(_) | Body::TaskResult(_) | Body::TaskFailed(_) | Body::TaskCancel(_) => {
            out.extend_from_slice(envelope.body.task_id().unwrap_or_default().as_bytes());
        }
        Body::CapabilityManifest(_)
        | Body::SessionPropose(_)
        | Body::Attestation(_)
        | Body::SessionClose(_)
        | Body::Unknown(_) => {}
    }
    out.push(b'|');
    out.extend_from_slice(envelope.body.type_name().as_bytes());
    out
}

/// The RFC 8785 canonical bytes of the envelope without its signature members: what the JCS algorithms sign.
pub fn canonical_signing_input(envelope: &Envelope) -> Result<Vec<u8>, Error> {
    crate::jcs::to_vec(&UnsignedView(envelope)).map_err(Error::Serialize)
}

/// The RFC 8785 canonical bytes of a received envelope object without its signature members.
pub fn canonical_signing_input_value(envelope: &Value) -> Result<Vec<u8>, Error> {
    let obj = envelope.as_object().ok_or(Error::InvalidKey("an envelope must be a JSON object"))?;
    crate::jcs::to_vec(&WithoutSignature(obj)).map_err(Error::Serialize)
}

struct WithoutSignature<'a>(&'a Map<String, Value>);

impl Serialize for WithoutSignature<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.0 {
            if k != "signature" && k != "signature_algorithm" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

fn hmac(secret: &[u8], data: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this constructor cannot fail; an empty MAC state is never reached.
    let mut mac = <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default()));
    mac.update(data);
    mac
}

fn sign_bytes(key: &SigningKey, data: &[u8]) -> String {
    match key {
        SigningKey::HmacSha256(s) | SigningKey::HmacSha256Jcs(s) => lower_hex(&hmac(s, data).finalize().into_bytes()),
        SigningKey::Ed25519(k) => lower_hex(&k.sign(data).to_bytes()),
    }
}

/// Lowercase hex, as `hex::encode` writes it, into one string sized up front.
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Signs `envelope` in place: sets `signature` and `signature_algorithm`.
pub fn sign(envelope: &mut Envelope, key: &SigningKey) -> Result<(), Error> {
    let signature = match key.algorithm() {
        SignatureAlgorithm::HmacSha256 => sign_bytes(key, &legacy_signing_input(envelope)),
        SignatureAlgorithm::HmacSha256Jcs | SignatureAlgorithm::Ed25519Jcs => {
            crate::jcs::with_canonical(&UnsignedView(envelope), |data| sign_bytes(key, data))
                .map_err(Error::Serialize)?
        }
    };
    envelope.signature = Some(signature);
    envelope.signature_algorithm = Some(key.algorithm().as_str().to_owned());
    Ok(())
}

/// Signs any JSON object in place with a JCS algorithm (`hmac-sha256-jcs` or `ed25519-jcs`): the signature covers
/// the RFC 8785 canonical bytes of the object without its `signature` and `signature_algorithm` members, and is
/// stored in those two members. [`verify_value`] verifies such an object. `hmac-sha256` signs envelopes only.
pub fn sign_value(object: &mut Value, key: &SigningKey) -> Result<(), Error> {
    if key.algorithm() == SignatureAlgorithm::HmacSha256 {
        return Err(Error::InvalidKey("hmac-sha256 signs envelopes only; use a JCS algorithm"));
    }
    let obj = object.as_object().ok_or(Error::InvalidKey("an envelope must be a JSON object"))?;
    let signature =
        crate::jcs::with_canonical(&WithoutSignature(obj), |data| sign_bytes(key, data)).map_err(Error::Serialize)?;
    let obj = object.as_object_mut().ok_or(Error::InvalidKey("only a JSON object can be signed"))?;
    obj.insert("signature".to_owned(), Value::String(signature));
    obj.insert("signature_algorithm".to_owned(), Value::String(key.algorithm().as_str().to_owned()));
    Ok(())
}

fn check_algorithm(named: Option<&str>, key: &VerifyingKey) -> Result<(), Error> {
    // The reference SDKs always name the algorithm; an unnamed signature is read as the key's algorithm.
    match named {
        None => Ok(()),
        Some(name) if name == key.algorithm().as_str() => Ok(()),
        Some(name) => {
            Err(Error::SignatureAlgorithmMismatch { expected: key.algorithm().as_str(), actual: name.to_owned() })
        }
    }
}

fn verify_bytes(key: &VerifyingKey, data: &[u8], signature_hex: &str) -> Result<(), Error> {
    // Signatures are 32 (HMAC) or 64 (Ed25519) bytes: decode on the stack; anything longer cannot verify.
    let mut buf = [0u8; 64];
    let len = signature_hex.len() / 2;
    if !signature_hex.len().is_multiple_of(2) || len > buf.len() {
        return Err(Error::BadSignature);
    }
    hex::decode_to_slice(signature_hex, &mut buf[..len]).map_err(|_| Error::BadSignature)?;
    let sig = &buf[..len];
    match key {
        VerifyingKey::HmacSha256(s) | VerifyingKey::HmacSha256Jcs(s) => {
            // `verify_slice` compares in constant time.
            hmac(s, data).verify_slice(sig).map_err(|_| Error::BadSignature)
        }
        VerifyingKey::Ed25519(k) => {
            let sig: [u8; 64] = sig.try_into().map_err(|_| Error::BadSignature)?;
            k.verify_strict(data, &ed25519_dalek::Signature::from_bytes(&sig)).map_err(|_| Error::BadSignature)
        }
    }
}

/// Verifies a decoded envelope.
///
/// For the JCS algorithms this canonicalises the decoded envelope; when the original JSON is at hand, prefer
/// [`verify_value`], which also covers `null` members dropped by decoding.
pub fn verify(envelope: &Envelope, key: &VerifyingKey) -> Result<(), Error> {
    let signature = envelope.signature.as_deref().ok_or(Error::MissingSignature)?;
    check_algorithm(envelope.signature_algorithm.as_deref(), key)?;
    match key.algorithm() {
        SignatureAlgorithm::HmacSha256 => verify_bytes(key, &legacy_signing_input(envelope), signature),
        _ => crate::jcs::with_canonical(&UnsignedView(envelope), |data| verify_bytes(key, data, signature))
            .map_err(Error::Serialize)?,
    }
}

/// Verifies an envelope from the JSON object exactly as received.
pub fn verify_value(envelope: &Value, key: &VerifyingKey) -> Result<(), Error> {
    let obj = envelope.as_object().ok_or(Error::MissingSignature)?;
    let signature = obj.get("signature").and_then(Value::as_str).ok_or(Error::MissingSignature)?;
    check_algorithm(obj.get("signature_algorithm").and_then(Value::as_str), key)?;
    match key.algorithm() {
        SignatureAlgorithm::HmacSha256 => {
            verify_bytes(key, &legacy_signing_input(&Envelope::from_value_ref(envelope)?), signature)
        }
        _ => crate::jcs::with_canonical(&WithoutSignature(obj), |data| verify_bytes(key, data, signature))
            .map_err(Error::Serialize)?,
    }
}

/// Verifies an envelope from the JSON text exactly as received: the same verdict as [`verify_value`] on the parsed
/// text, without building a `Value` for the JCS algorithms (the canonical form is written while parsing).
pub fn verify_slice(json: &[u8], key: &VerifyingKey) -> Result<(), Error> {
    if key.algorithm() != SignatureAlgorithm::HmacSha256
        && let Ok(verdict) = crate::jcs::with_signing_input_from_slice(json, |canonical, signature, algorithm| {
            let signature = signature.and_then(Value::as_str).ok_or(Error::MissingSignature)?;
            check_algorithm(algorithm.and_then(Value::as_str), key)?;
            verify_bytes(key, canonical, signature)
        })
    {
        return verdict;
    }
    // `hmac-sha256`, and what the single pass refused: the typed reason (malformed text, a duplicate member name,
    // which is refused rather than resolved as a `Value` would, keeping the last), or the verdict on a non-object.
    crate::check::check_slice(json)?;
    let value: Value = serde_json::from_slice(json).map_err(Error::from_decode)?;
    verify_value(&value, key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskSubmit;

    fn submit() -> Envelope {
        Envelope::new(
            "m1",
            "2026-03-09T10:00:04Z",
            "s1",
            "ldp:delegate:a",
            "ldp:delegate:b",
            TaskSubmit::new("t1".into(), "echo".into(), serde_json::json!({"text": "hi"}), None),
        )
        .with_nonce("00112233445566778899aabbccddeeff")
    }

    fn keys() -> Vec<SigningKey> {
        vec![
            SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "s3cret").unwrap(),
            SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "s3cret").unwrap(),
            SigningKey::ed25519_from_seed(&[7; 32]),
        ]
    }

    #[test]
    fn sign_verify_round_trip_all_algorithms() {
        for key in keys() {
            let mut env = submit();
            sign(&mut env, &key).unwrap();
            verify(&env, &key.verifying_key()).unwrap();
            verify_value(&env.to_value().unwrap(), &key.verifying_key()).unwrap();
        }
    }

    #[test]
    fn tampering_with_input_only_breaks_body_covering_algorithms() {
        for key in keys() {
            let mut env = submit();
            sign(&mut env, &key).unwrap();
            let mut raw = env.to_value().unwrap();
            raw["body"]["input"]["text"] = "tampered".into();
            let verdict = verify_value(&raw, &key.verifying_key());
            match key.algorithm() {
                SignatureAlgorithm::HmacSha256 => assert!(verdict.is_ok(), "legacy scheme does not cover input"),
                _ => assert!(matches!(verdict, Err(Error::BadSignature)), "{}", key.algorithm()),
            }
        }
    }

    #[test]
    fn wrong_key_and_algorithm_mismatch_fail() {
        let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "a").unwrap();
        let mut env = submit();
        sign(&mut env, &key).unwrap();
        let other = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "b").unwrap();
        assert!(matches!(verify(&env, &other.verifying_key()), Err(Error::BadSignature)));
        let legacy = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "a").unwrap();
        assert!(matches!(verify(&env, &legacy.verifying_key()), Err(Error::SignatureAlgorithmMismatch { .. })));
        env.signature = None;
        assert!(matches!(verify(&env, &key.verifying_key()), Err(Error::MissingSignature)));
    }

    #[test]
    fn jcs_verification_covers_received_nulls_and_unknown_members() {
        let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap();
        let mut env = submit();
        env.extensions.insert("x_hop".into(), Value::from(1));
        sign(&mut env, &key).unwrap();
        let mut raw = env.to_value().unwrap();
        verify_value(&raw, &key.verifying_key()).unwrap();
        raw["x_hop"] = Value::from(2);
        assert!(verify_value(&raw, &key.verifying_key()).is_err());
    }

    #[test]
    fn any_object_signs_and_verifies_with_jcs_algorithms() {
        for key in keys().into_iter().skip(1) {
            let mut claim = serde_json::json!({"subject": "ldp:delegate:a", "quality_score": 0.8});
            sign_value(&mut claim, &key).unwrap();
            verify_value(&claim, &key.verifying_key()).unwrap();
            claim["quality_score"] = Value::from(0.9);
            assert!(matches!(verify_value(&claim, &key.verifying_key()), Err(Error::BadSignature)));
        }
        let legacy = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "k").unwrap();
        assert!(sign_value(&mut serde_json::json!({}), &legacy).is_err());
        assert!(sign_value(&mut serde_json::json!([1]), &SigningKey::ed25519_from_seed(&[1; 32])).is_err());
    }

    #[test]
    fn verify_slice_agrees_with_verify_value() {
        let jcs = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap();
        let mut env = submit();
        env.extensions.insert("x_hop".into(), serde_json::json!({"b": [1, -2, 0.5, null, "\u{e9}\t"], "a": true}));
        sign(&mut env, &jcs).unwrap();
        let text = String::from_utf8(env.to_vec().unwrap()).unwrap();
        // Members out of order, escaped names, nulls and whitespace are all part of what was received.
        let variants = [
            text.clone(),
            text.replacen("{\"message_id\"", "{ \"provenance\" : null, \"m\\u0065ssage_id\"", 1),
            text.replacen("{\"message_id\"", "{ \"m\\u0065ssage_id\"", 1),
            text.replacen("\"from\"", "\"z_null\":null,\"from\"", 1),
            text.replacen("\"text\":\"hi\"", "\"text\":\"ho\"", 1),
            text.replacen("\"x_hop\"", "\"x_hop\":1,\"x_hop\"", 1),
            text.replacen("\"signature\":", "\"signature\":7,\"signature\":", 1),
            text.replacen("\"signature_algorithm\":\"hmac-sha256-jcs\"", "\"signature_algorithm\":\"ed25519-jcs\"", 1),
            text.replacen("\"signature\":", "\"unsigned\":", 1),
            "[1]".to_owned(),
            "{\"a\":".to_owned(),
            format!("{text} x"),
        ];
        // A repeated member name is refused, not resolved as a `Value` resolves it (the last one kept).
        let duplicated = [1, 5, 6];
        for key in keys() {
            let verifying = key.verifying_key();
            for (i, v) in variants.iter().enumerate() {
                if duplicated.contains(&i) {
                    let got = verify_slice(v.as_bytes(), &verifying);
                    assert!(matches!(got, Err(Error::DuplicateMember(_))), "{} on {v}: {got:?}", key.algorithm());
                    continue;
                }
                let expected = serde_json::from_str::<Value>(v)
                    .map_err(Error::from_decode)
                    .and_then(|value| verify_value(&value, &verifying));
                let got = verify_slice(v.as_bytes(), &verifying);
                assert_eq!(format!("{got:?}"), format!("{expected:?}"), "{} on {v}", key.algorithm());
            }
        }
        verify_slice(text.as_bytes(), &jcs.verifying_key()).unwrap();
    }

    #[test]
    fn hex_is_hex_crate_hex() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
    }

    #[test]
    fn sorted_signing_view_is_the_canonical_form() {
        let mut env = submit();
        env.provenance = Some(std::sync::Arc::new(crate::Provenance::new("a", "m", crate::PayloadMode::Text)));
        let ours = canonical_signing_input(&env).unwrap();
        let mut value = env.to_value().unwrap();
        value.as_object_mut().unwrap().remove("signature");
        assert_eq!(ours, serde_json_canonicalizer::to_vec(&value).unwrap());
        env.nonce = None;
        env.extensions.insert("a_first".into(), Value::from(1));
        let mut value = env.to_value().unwrap();
        value.as_object_mut().unwrap().remove("signature");
        assert_eq!(canonical_signing_input(&env).unwrap(), serde_json_canonicalizer::to_vec(&value).unwrap());
    }

    #[test]
    fn legacy_input_layout() {
        let env = submit();
        let input = String::from_utf8(legacy_signing_input(&env)).unwrap();
        assert_eq!(
            input,
            "ldp:delegate:a|ldp:delegate:b|s1|2026-03-09T10:00:04Z|m1|00112233445566778899aabbccddeeff|t1|echo|TASK_SUBMIT"
        );
    }
}
