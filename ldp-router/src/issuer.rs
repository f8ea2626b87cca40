//! The attestation issuer's lifecycle (the paper's section 7: "issuer identity model, claim signatures, expiry
//! semantics"): which keys an issuer signs with and when, how it rotates them, and how it revokes an attestation or
//! a key, so that a router stops counting what the issuer no longer stands behind.
//!
//! Two signed documents, both JSON objects signed `ed25519-jcs` like an attestation (Ed25519 over the JCS form of
//! the object without `signature` and `signature_algorithm`), which an issuer publishes at well-known paths of its
//! base URL (any static web server will do; `ldp attest keys` and `ldp attest revoke` write them):
//!
//! * [`IssuerKeySet`] at [`ISSUER_KEYS_PATH`]: the issuer's keys, each with a `key_id` and a validity window
//!   (`valid_from`, optional `valid_until`), signed by one of them (`signed_by`).
//! * [`RevocationList`] at [`REVOCATIONS_PATH`]: the attestations (by their signature) and keys (by id) the issuer
//!   revokes, with `issued_at` and `next_update`, signed by one of its keys.
//!
//! Trust starts from a key the operator pins ([`TrustedIssuers::trust`](crate::TrustedIssuers::trust)); a key set is accepted only when a key the
//! router already trusts for that issuer, valid now, signed it, so rotation is a chain: publish a set with the old
//! and the new key (overlapping windows), signed by the old; once routers have it, the old key may expire. An
//! attestation names the key that signed it (`key_id`, a signed member); the key must have been valid when the
//! attestation was made (`attested_at` within the window) and not be revoked. Attestations signed by a retired but
//! unrevoked key keep counting until their own `expires_at`.
//!
//! Revocations need freshness to mean anything (a router cut off from the issuer would otherwise trust forever):
//! once [`TrustedIssuers::require_revocations`](crate::TrustedIssuers::require_revocations) is set for an issuer, its attestations count only while the router
//! holds a revocation list from it that is younger than the bound and not past its `next_update`.

use std::collections::BTreeMap;
use std::time::Duration;

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::attestation::{AttestationClaim, AttestationRejection, WireTime};

/// Where an issuer publishes its [`IssuerKeySet`], under its base URL.
pub const ISSUER_KEYS_PATH: &str = "/.well-known/ldp-issuer-keys";
/// Where an issuer publishes its [`RevocationList`], under its base URL.
pub const REVOCATIONS_PATH: &str = "/.well-known/ldp-issuer-revocations";
/// The member of an attestation naming the key that signed it.
pub const KEY_ID_MEMBER: &str = "key_id";
/// Most keys one key set may list, and most entries one revocation list may hold (both come from the network).
pub const MAX_KEYS: usize = 64;
/// Most revoked attestations and keys in one list.
pub const MAX_REVOKED: usize = 100_000;

/// One key of an issuer, as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedKey {
    /// The key's id, unique within the issuer.
    pub key_id: String,
    /// `ed25519`.
    pub algorithm: String,
    /// The Ed25519 public key, 64 hex digits.
    pub public_key: String,
    /// From when the key may sign.
    pub valid_from: WireTime,
    /// Until when it may sign (absent: until further notice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<WireTime>,
}

/// An issuer's published key set ([`ISSUER_KEYS_PATH`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssuerKeySet {
    /// The issuer (`ldp:issuer:<name>` by convention).
    pub issuer_id: String,
    /// When the set was published.
    pub issued_at: WireTime,
    /// The keys.
    pub keys: Vec<PublishedKey>,
    /// The key that signed the set.
    pub signed_by: String,
    /// Lowercase hex Ed25519 signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `ed25519-jcs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_algorithm: Option<String>,
}

/// An issuer's published revocations ([`REVOCATIONS_PATH`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevocationList {
    /// The issuer.
    pub issuer_id: String,
    /// When the list was made.
    pub issued_at: WireTime,
    /// When the next list is due; a router holding this one after that instant treats it as stale.
    pub next_update: WireTime,
    /// Revoked attestations, by their `signature` (which identifies a signed claim).
    #[serde(default)]
    pub revoked_attestations: Vec<String>,
    /// Revoked keys, by `key_id`: every attestation they signed stops counting.
    #[serde(default)]
    pub revoked_keys: Vec<String>,
    /// The key that signed the list.
    pub signed_by: String,
    /// Lowercase hex Ed25519 signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `ed25519-jcs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_algorithm: Option<String>,
}

/// Why a key set or a revocation list was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IssuerDocumentError {
    /// Not the expected JSON shape.
    #[error("malformed document: {0}")]
    Malformed(String),
    /// No key of this issuer is trusted yet: pin one first.
    #[error("issuer {0:?} is not trusted")]
    UntrustedIssuer(String),
    /// The signing key is not one the router trusts for this issuer, valid now.
    #[error("signed by {0:?}, which is not a trusted key of the issuer valid now")]
    UnknownSigner(String),
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// Over [`MAX_KEYS`] or [`MAX_REVOKED`].
    #[error("too many entries: {0}")]
    TooLarge(usize),
    /// Older than the document already held (a replayed old list must not undo a revocation).
    #[error("older than the one already held")]
    Stale,
    /// A key entry is not an Ed25519 public key, or its window is inverted.
    #[error("key {key_id:?}: {reason}")]
    BadKey {
        /// The key.
        key_id: String,
        /// What is wrong.
        reason: String,
    },
}

/// A key the router trusts for an issuer.
#[derive(Debug, Clone)]
pub(crate) struct TrustedKey {
    /// `None` for a key pinned without an id (it signs attestations that name no key).
    pub(crate) key_id: Option<String>,
    pub(crate) key: VerifyingKey,
    pub(crate) valid_from: Option<OffsetDateTime>,
    pub(crate) valid_until: Option<OffsetDateTime>,
}

impl TrustedKey {
    fn valid_at(&self, at: OffsetDateTime) -> bool {
        self.valid_from.is_none_or(|from| from <= at) && self.valid_until.is_none_or(|until| at <= until)
    }
}

/// What the router knows of one issuer.
#[derive(Debug, Clone, Default)]
pub(crate) struct IssuerState {
    pub(crate) keys: Vec<TrustedKey>,
    /// The newest revocation list accepted.
    revocations: Option<RevocationList>,
    /// When set, attestations count only while a revocation list younger than this is held.
    revocations_max_age: Option<Duration>,
    /// The newest key set accepted (to refuse an older one).
    keys_issued_at: Option<OffsetDateTime>,
}

/// Signs an issuer document (an attestation, a key set, a revocation list) with `key`: `ed25519-jcs` over the object
/// without its `signature` and `signature_algorithm` members, which the returned copy carries.
pub(crate) fn sign_document<T: Serialize + serde::de::DeserializeOwned>(
    document: &T,
    key: &SigningKey,
) -> Result<T, ldp_types::Error> {
    if key.algorithm() != SignatureAlgorithm::Ed25519Jcs {
        return Err(ldp_types::Error::InvalidKey("issuer documents are signed with an ed25519 key"));
    }
    let mut value = serde_json::to_value(document).map_err(ldp_types::Error::Serialize)?;
    if let Value::Object(map) = &mut value {
        map.remove("signature");
        map.remove("signature_algorithm");
    }
    signing::sign_value(&mut value, key)?;
    serde_json::from_value(value).map_err(ldp_types::Error::Serialize)
}

impl IssuerKeySet {
    /// A key set signed by `signer` (whose public key must be among `keys` under `signer_key_id`).
    pub fn signed(
        issuer_id: impl Into<String>,
        issued_at: OffsetDateTime,
        keys: Vec<PublishedKey>,
        signer_key_id: impl Into<String>,
        signer: &SigningKey,
    ) -> Result<Self, ldp_types::Error> {
        let set = IssuerKeySet {
            issuer_id: issuer_id.into(),
            issued_at: WireTime::new(issued_at),
            keys,
            signed_by: signer_key_id.into(),
            signature: None,
            signature_algorithm: None,
        };
        sign_document(&set, signer)
    }
}

impl PublishedKey {
    /// The published form of `key` under `key_id`, valid from `valid_from`.
    pub fn new(
        key_id: impl Into<String>,
        key: &VerifyingKey,
        valid_from: OffsetDateTime,
    ) -> Result<Self, ldp_types::Error> {
        let public_key = key.public_hex().ok_or(ldp_types::Error::InvalidKey("an issuer key is an ed25519 key"))?;
        Ok(PublishedKey {
            key_id: key_id.into(),
            algorithm: "ed25519".to_owned(),
            public_key,
            valid_from: WireTime::new(valid_from),
            valid_until: None,
        })
    }

    /// Sets the end of the window.
    pub fn valid_until(mut self, until: OffsetDateTime) -> Self {
        self.valid_until = Some(WireTime::new(until));
        self
    }

    fn to_trusted(&self) -> Result<TrustedKey, IssuerDocumentError> {
        let bad = |reason: &str| IssuerDocumentError::BadKey { key_id: self.key_id.clone(), reason: reason.to_owned() };
        if self.algorithm != "ed25519" {
            return Err(bad("the algorithm is not ed25519"));
        }
        let key = VerifyingKey::ed25519_from_hex(&self.public_key).map_err(|e| bad(&e.to_string()))?;
        let (from, until) = (self.valid_from.at(), self.valid_until.as_ref().map(WireTime::at));
        if until.is_some_and(|until| until < from) {
            return Err(bad("valid_until precedes valid_from"));
        }
        Ok(TrustedKey { key_id: Some(self.key_id.clone()), key, valid_from: Some(from), valid_until: until })
    }
}

impl RevocationList {
    /// A revocation list signed by `signer` under `signer_key_id`, due again `valid_for` after `issued_at`.
    pub fn signed(
        issuer_id: impl Into<String>,
        issued_at: OffsetDateTime,
        valid_for: Duration,
        revoked_attestations: Vec<String>,
        revoked_keys: Vec<String>,
        signer_key_id: impl Into<String>,
        signer: &SigningKey,
    ) -> Result<Self, ldp_types::Error> {
        let next = issued_at + time::Duration::try_from(valid_for).unwrap_or(time::Duration::ZERO);
        let list = RevocationList {
            issuer_id: issuer_id.into(),
            issued_at: WireTime::new(issued_at),
            next_update: WireTime::new(next),
            revoked_attestations,
            revoked_keys,
            signed_by: signer_key_id.into(),
            signature: None,
            signature_algorithm: None,
        };
        sign_document(&list, signer)
    }
}

/// Verifies a document's signature with the issuer's key `signed_by`, which must be trusted and valid at `now`.
fn verify_document<T: Serialize>(
    document: &T,
    signed_by: &str,
    state: &IssuerState,
    now: OffsetDateTime,
) -> Result<(), IssuerDocumentError> {
    let key = state
        .keys
        .iter()
        .find(|k| k.key_id.as_deref() == Some(signed_by) && k.valid_at(now))
        .ok_or_else(|| IssuerDocumentError::UnknownSigner(signed_by.to_owned()))?;
    let value = serde_json::to_value(document).map_err(|e| IssuerDocumentError::Malformed(e.to_string()))?;
    match value.get("signature_algorithm").and_then(Value::as_str) {
        Some(name) if name == SignatureAlgorithm::Ed25519Jcs.as_str() => {}
        _ => return Err(IssuerDocumentError::BadSignature),
    }
    signing::verify_value(&value, &key.key).map_err(|_| IssuerDocumentError::BadSignature)
}

impl IssuerState {
    /// Accepts a key set signed by a trusted key valid at `now`; it replaces the issuer's keys (keys pinned without
    /// an id are kept).
    pub(crate) fn apply_key_set(&mut self, set: &IssuerKeySet, now: OffsetDateTime) -> Result<(), IssuerDocumentError> {
        if set.keys.len() > MAX_KEYS {
            return Err(IssuerDocumentError::TooLarge(set.keys.len()));
        }
        if self.keys_issued_at.is_some_and(|held| set.issued_at.at() < held) {
            return Err(IssuerDocumentError::Stale);
        }
        verify_document(set, &set.signed_by, self, now)?;
        let mut keys: Vec<TrustedKey> = self.keys.iter().filter(|k| k.key_id.is_none()).cloned().collect();
        for published in &set.keys {
            keys.push(published.to_trusted()?);
        }
        self.keys = keys;
        self.keys_issued_at = Some(set.issued_at.at());
        Ok(())
    }

    /// Accepts a revocation list signed by a trusted key valid at `now`, unless an newer one is held.
    pub(crate) fn apply_revocations(
        &mut self,
        list: &RevocationList,
        now: OffsetDateTime,
    ) -> Result<(), IssuerDocumentError> {
        let entries = list.revoked_attestations.len() + list.revoked_keys.len();
        if entries > MAX_REVOKED {
            return Err(IssuerDocumentError::TooLarge(entries));
        }
        if self.revocations.as_ref().is_some_and(|held| list.issued_at.at() < held.issued_at.at()) {
            return Err(IssuerDocumentError::Stale);
        }
        verify_document(list, &list.signed_by, self, now)?;
        self.revocations = Some(list.clone());
        Ok(())
    }

    pub(crate) fn require_revocations(&mut self, max_age: Duration) {
        self.revocations_max_age = Some(max_age);
    }

    /// The key that verifies `claim`, given the lifecycle: the key it names (or, naming none, any key pinned without
    /// an id), valid when the claim was made, not revoked; the claim itself not revoked; revocations fresh if
    /// required.
    pub(crate) fn key_for(
        &self,
        claim: &AttestationClaim,
        now: OffsetDateTime,
    ) -> Result<Vec<&VerifyingKey>, AttestationRejection> {
        if let Some(max_age) = self.revocations_max_age {
            let max_age = time::Duration::try_from(max_age).unwrap_or(time::Duration::ZERO);
            let fresh = self
                .revocations
                .as_ref()
                .is_some_and(|list| now - list.issued_at.at() <= max_age && now <= list.next_update.at());
            if !fresh {
                return Err(AttestationRejection::RevocationsStale(claim.issuer_id.clone()));
            }
        }
        let revocations = self.revocations.as_ref();
        if let (Some(list), Some(signature)) = (revocations, claim.signature.as_deref())
            && list.revoked_attestations.iter().any(|r| r == signature)
        {
            return Err(AttestationRejection::Revoked(format!("attestation revoked by {}", claim.issuer_id)));
        }
        let named = claim.extra.get(KEY_ID_MEMBER).and_then(Value::as_str);
        if let (Some(list), Some(key_id)) = (revocations, named)
            && list.revoked_keys.iter().any(|r| r == key_id)
        {
            return Err(AttestationRejection::Revoked(format!("key {key_id:?} of {} revoked", claim.issuer_id)));
        }
        let at = claim.attested_at.at();
        let candidates: Vec<&VerifyingKey> = self
            .keys
            .iter()
            // A key pinned without an id is trusted for every claim of the issuer; a named key only for its own.
            .filter(|k| (k.key_id.is_none() || k.key_id.as_deref() == named) && k.valid_at(at))
            .map(|k| &k.key)
            .collect();
        if candidates.is_empty() {
            return Err(match named {
                Some(key_id) if self.keys.iter().any(|k| k.key_id.as_deref() == Some(key_id)) => {
                    AttestationRejection::KeyNotValid(key_id.to_owned())
                }
                Some(key_id) => AttestationRejection::UnknownKey(key_id.to_owned()),
                None => AttestationRejection::UnknownKey("(none named)".to_owned()),
            });
        }
        Ok(candidates)
    }
}

/// Keeps a claim's `key_id` among its signed members.
pub fn with_key_id(mut claim: AttestationClaim, key_id: impl Into<String>) -> AttestationClaim {
    claim.extra.insert(KEY_ID_MEMBER.to_owned(), Value::String(key_id.into()));
    claim
}

/// Public members of an issuer document, for display (`ldp attest verify`).
pub fn describe_keys(set: &IssuerKeySet) -> BTreeMap<String, (String, Option<String>)> {
    set.keys
        .iter()
        .map(|k| (k.key_id.clone(), (k.valid_from.to_string(), k.valid_until.as_ref().map(ToString::to_string))))
        .collect()
}
