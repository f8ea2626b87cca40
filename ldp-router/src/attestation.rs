//! Signed quality attestations: how a third party vouches for a delegate's quality on one skill (paper 3.2, and the
//! "claim signatures, expiry semantics, and skill-specific attestation" of its section 7).
//!
//! An [`AttestationClaim`] is a JSON object:
//!
//! ```json
//! {
//!   "subject": "ldp:delegate:solid",
//!   "skill": "reasoning",
//!   "quality_score": 0.85,
//!   "claim_type": "issuer_attested",
//!   "issuer_id": "ldp:issuer:evals",
//!   "attested_at": "2026-03-08T12:00:00Z",
//!   "expires_at": "2026-06-08T12:00:00Z",
//!   "evidence_ref": "https://evals.example/reports/42",
//!   "signature": "<128 hex digits>",
//!   "signature_algorithm": "ed25519-jcs"
//! }
//! ```
//!
//! The signature is Ed25519 over the RFC 8785 (JCS) canonical JSON of the object without its `signature` and
//! `signature_algorithm` members, in lowercase hex: the same construction as an `ed25519-jcs` envelope signature,
//! computed by [`ldp_types::signing`]. Absent optional members are omitted, never written as `null`; members this
//! crate does not know are kept and signed. `expires_at` is optional (the [`crate::ClaimPolicy`]'s `max_claim_age`
//! still bounds an attestation without one).
//!
//! Attestations travel three ways, all read by [`crate::CardMapping`] and the registry: as the `claim` member of an
//! `ATTESTATION` message body ([`AttestationClaim::from_attestation`]; its `evidence` member is informational and
//! not trusted), inside an identity card (`extra.attestations`, an array) or inside one capability
//! (`capability.extra.attestation`, an object or an array).
//!
//! [`verify_attestation`] accepts a claim only when it is signed `ed25519-jcs`, its issuer is one the operator
//! trusts ([`TrustedIssuers`]), the issuer is not the subject (a delegate cannot attest itself), the signature
//! matches, its claim type is not `self_claimed`, it is not expired and not dated in the future; every refusal is a
//! typed [`AttestationRejection`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use time::OffsetDateTime;

use crate::issuer::{IssuerDocumentError, IssuerKeySet, IssuerState, RevocationList, TrustedKey};
use crate::{ClaimType, Quality, QualityClaim};

/// A timestamp that keeps its wire spelling, so that a received claim serialises again exactly as it was signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireTime {
    raw: String,
    at: OffsetDateTime,
}

impl WireTime {
    /// `at`, spelled as RFC 3339 in UTC.
    pub fn new(at: OffsetDateTime) -> Self {
        WireTime { raw: ldp_types::time::format_timestamp(at), at }
    }

    /// Parses an RFC 3339 timestamp, keeping its spelling.
    pub fn parse(raw: &str) -> Result<Self, ldp_types::Error> {
        Ok(WireTime { at: ldp_types::time::parse_timestamp(raw)?, raw: raw.to_owned() })
    }

    /// The instant.
    pub fn at(&self) -> OffsetDateTime {
        self.at
    }

    /// The spelling.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl From<OffsetDateTime> for WireTime {
    fn from(at: OffsetDateTime) -> Self {
        WireTime::new(at)
    }
}

impl fmt::Display for WireTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for WireTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for WireTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        WireTime::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// A third party's signed statement that `subject` achieves `quality_score` on `skill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttestationClaim {
    /// The delegate the claim is about (`ldp:delegate:<name>`).
    pub subject: String,
    /// The one skill it speaks for.
    pub skill: String,
    /// The attested quality.
    pub quality_score: Quality,
    /// How the issuer established it (`issuer_attested` or `externally_benchmarked`; `runtime_observed` for another
    /// runtime's signed observations).
    pub claim_type: ClaimType,
    /// Who attests it; must be a key the operator trusts.
    pub issuer_id: String,
    /// When it was established.
    pub attested_at: WireTime,
    /// After this instant it counts for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<WireTime>,
    /// Where the evidence can be found (a URI or report id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_ref: Option<String>,
    /// Lowercase hex Ed25519 signature; `None` for an unsigned claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `ed25519-jcs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_algorithm: Option<String>,
    /// Members this crate does not define, kept as received (they are signed too).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl AttestationClaim {
    /// An unsigned `issuer_attested` claim; sign it with [`sign_attestation`].
    pub fn new(
        subject: impl Into<String>,
        skill: impl Into<String>,
        quality_score: Quality,
        issuer_id: impl Into<String>,
        attested_at: OffsetDateTime,
    ) -> Self {
        AttestationClaim {
            subject: subject.into(),
            skill: skill.into(),
            quality_score,
            claim_type: ClaimType::IssuerAttested,
            issuer_id: issuer_id.into(),
            attested_at: WireTime::new(attested_at),
            expires_at: None,
            evidence_ref: None,
            signature: None,
            signature_algorithm: None,
            extra: BTreeMap::new(),
        }
    }

    /// Sets the expiry.
    pub fn expiring_at(mut self, expires_at: OffsetDateTime) -> Self {
        self.expires_at = Some(WireTime::new(expires_at));
        self
    }

    /// Sets the claim type.
    pub fn with_claim_type(mut self, claim_type: ClaimType) -> Self {
        self.claim_type = claim_type;
        self
    }

    /// Sets the evidence reference.
    pub fn with_evidence(mut self, evidence_ref: impl Into<String>) -> Self {
        self.evidence_ref = Some(evidence_ref.into());
        self
    }

    /// Reads a claim from its JSON object.
    pub fn from_value(value: Value) -> Result<Self, AttestationRejection> {
        serde_json::from_value(value).map_err(|e| AttestationRejection::Malformed(e.to_string()))
    }

    /// The JSON object.
    pub fn to_value(&self) -> Result<Value, ldp_types::Error> {
        serde_json::to_value(self).map_err(ldp_types::Error::Serialize)
    }

    /// Reads the claim carried by an `ATTESTATION` message body (its `claim` member).
    pub fn from_attestation(body: &ldp_types::Attestation) -> Result<Self, AttestationRejection> {
        Self::from_value(body.claim.clone())
    }

    /// An `ATTESTATION` body carrying this claim, with `evidence_ref` (if any) repeated as `evidence`.
    pub fn to_attestation(&self) -> Result<ldp_types::Attestation, ldp_types::Error> {
        let evidence = self.evidence_ref.clone().map_or(Value::Null, Value::String);
        Ok(ldp_types::Attestation::new(self.to_value()?, evidence))
    }

    /// The claim as the router's policy weighs it.
    fn quality_claim(&self) -> QualityClaim {
        let claim = QualityClaim::attested(
            self.claim_type,
            self.skill.clone(),
            self.quality_score,
            self.issuer_id.clone(),
            self.attested_at.at(),
        );
        match &self.expires_at {
            Some(expires_at) => claim.expiring_at(expires_at.at()),
            None => claim,
        }
    }
}

/// Signs `claim` with an Ed25519 key (`ed25519-jcs`), replacing any earlier signature.
pub fn sign_attestation(claim: AttestationClaim, key: &SigningKey) -> Result<AttestationClaim, ldp_types::Error> {
    crate::issuer::sign_document(&claim, key)
}

/// The issuers whose attestations the operator accepts: the keys pinned for each (with [`TrustedIssuers::trust`]
/// or [`TrustedIssuers::trust_key`]), the key sets and revocation lists accepted since ([`crate::issuer`]), and how
/// fresh revocations must be.
#[derive(Debug, Clone)]
pub struct TrustedIssuers {
    issuers: HashMap<String, IssuerState>,
    /// How far in the future an `attested_at` may lie (clock skew between issuer and router).
    pub max_clock_skew: Duration,
}

impl Default for TrustedIssuers {
    fn default() -> Self {
        TrustedIssuers { issuers: HashMap::new(), max_clock_skew: Duration::from_secs(300) }
    }
}

impl TrustedIssuers {
    /// No trusted issuer: every attestation is rejected.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pins an Ed25519 public key for `issuer_id`, with no key id and no validity window: it verifies every
    /// attestation of the issuer.
    pub fn trust(mut self, issuer_id: impl Into<String>, key: VerifyingKey) -> Result<Self, ldp_types::Error> {
        Self::check_ed25519(&key)?;
        let state = self.issuers.entry(issuer_id.into()).or_default();
        state.keys.push(TrustedKey { key_id: None, key, valid_from: None, valid_until: None });
        Ok(self)
    }

    /// Pins the key `key_id` of `issuer_id` (valid from now on): the start of a rotation chain, since key sets
    /// signed by it are accepted ([`TrustedIssuers::apply_key_set`]).
    pub fn trust_key(
        mut self,
        issuer_id: impl Into<String>,
        key_id: impl Into<String>,
        key: VerifyingKey,
    ) -> Result<Self, ldp_types::Error> {
        Self::check_ed25519(&key)?;
        let state = self.issuers.entry(issuer_id.into()).or_default();
        state.keys.push(TrustedKey { key_id: Some(key_id.into()), key, valid_from: None, valid_until: None });
        Ok(self)
    }

    fn check_ed25519(key: &VerifyingKey) -> Result<(), ldp_types::Error> {
        if key.algorithm() != SignatureAlgorithm::Ed25519Jcs {
            return Err(ldp_types::Error::InvalidKey("attestation issuers are trusted by their ed25519 public key"));
        }
        Ok(())
    }

    /// [`TrustedIssuers::trust`] with the public key in hex.
    pub fn trust_hex(self, issuer_id: impl Into<String>, public_hex: &str) -> Result<Self, ldp_types::Error> {
        self.trust(issuer_id, VerifyingKey::ed25519_from_hex(public_hex)?)
    }

    /// Accepts an issuer's published key set (rotation): it must be signed by a key already trusted for that issuer
    /// and valid at `now`, and not older than the set held.
    pub fn apply_key_set(&mut self, set: &IssuerKeySet, now: OffsetDateTime) -> Result<(), IssuerDocumentError> {
        let state = self
            .issuers
            .get_mut(&set.issuer_id)
            .ok_or_else(|| IssuerDocumentError::UntrustedIssuer(set.issuer_id.clone()))?;
        state.apply_key_set(set, now)
    }

    /// Accepts an issuer's revocation list: signed by a trusted key valid at `now`, not older than the list held.
    pub fn apply_revocations(&mut self, list: &RevocationList, now: OffsetDateTime) -> Result<(), IssuerDocumentError> {
        let state = self
            .issuers
            .get_mut(&list.issuer_id)
            .ok_or_else(|| IssuerDocumentError::UntrustedIssuer(list.issuer_id.clone()))?;
        state.apply_revocations(list, now)
    }

    /// From now on, `issuer_id`'s attestations count only while a revocation list from it younger than `max_age`
    /// (and not past its `next_update`) is held.
    pub fn require_revocations(&mut self, issuer_id: &str, max_age: Duration) {
        if let Some(state) = self.issuers.get_mut(issuer_id) {
            state.require_revocations(max_age);
        }
    }

    /// The first key pinned for `issuer_id`.
    pub fn key(&self, issuer_id: &str) -> Option<&VerifyingKey> {
        self.issuers.get(issuer_id).and_then(|s| s.keys.first()).map(|k| &k.key)
    }

    /// Number of trusted issuers.
    pub fn len(&self) -> usize {
        self.issuers.len()
    }

    /// Whether no issuer is trusted.
    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }
}

/// Why an attestation was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttestationRejection {
    /// It is not a valid attestation object.
    #[error("malformed attestation: {0}")]
    Malformed(String),
    /// It carries no signature.
    #[error("unsigned attestation")]
    Unsigned,
    /// It is signed with an algorithm other than `ed25519-jcs`.
    #[error("unsupported signature algorithm {0:?} (attestations are signed ed25519-jcs)")]
    UnsupportedAlgorithm(String),
    /// Its claim type is `self_claimed`, which no third party can attest.
    #[error("claim type self_claimed cannot be attested")]
    NotAnAttestation,
    /// The issuer is the subject: a delegate cannot attest itself.
    #[error("issuer {0:?} attests itself")]
    SelfIssued(String),
    /// The operator does not trust the issuer.
    #[error("issuer {0:?} is not trusted")]
    UntrustedIssuer(String),
    /// The signature does not match the claim and the issuer's key (tampered, or signed by another key).
    #[error("signature does not verify with the key of issuer {0:?}")]
    BadSignature(String),
    /// It expired.
    #[error("expired at {0}")]
    Expired(String),
    /// It is dated in the future beyond the allowed clock skew.
    #[error("attested_at {0} lies in the future")]
    NotYetValid(String),
    /// It is about another delegate.
    #[error("attestation is about {actual:?}, not {expected:?}")]
    WrongSubject {
        /// The delegate being assessed.
        expected: String,
        /// The attestation's subject.
        actual: String,
    },
    /// The subject does not offer the attested skill.
    #[error("skill {0:?} is not offered by the subject")]
    SkillNotOffered(String),
    /// The issuer revoked the attestation, or the key that signed it.
    #[error("{0}")]
    Revoked(String),
    /// Revocations are required for this issuer and the router holds none fresh enough.
    #[error("no fresh revocation list from issuer {0:?}")]
    RevocationsStale(String),
    /// The attestation names a key the issuer has not published.
    #[error("key {0:?} is not a published key of the issuer")]
    UnknownKey(String),
    /// The named key was not valid when the attestation was made.
    #[error("key {0:?} was not valid at attested_at")]
    KeyNotValid(String),
}

/// An attestation that passed [`verify_attestation`]; only such claims become attested [`QualityClaim`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedAttestation(AttestationClaim);

impl VerifiedAttestation {
    /// The verified claim.
    pub fn claim(&self) -> &AttestationClaim {
        &self.0
    }

    /// The claim as the router's policy weighs it: its claim type, issuer, dates and skill.
    pub fn quality_claim(&self) -> QualityClaim {
        self.0.quality_claim()
    }
}

/// Checks `claim` against the operator's `trusted` issuers at `now`; see the module documentation for the rules.
/// Whether the subject and skill fit the delegate being assessed is the caller's check.
pub fn verify_attestation(
    claim: &AttestationClaim,
    trusted: &TrustedIssuers,
    now: OffsetDateTime,
) -> Result<VerifiedAttestation, AttestationRejection> {
    let Some(signature) = claim.signature.as_deref().filter(|s| !s.is_empty()) else {
        return Err(AttestationRejection::Unsigned);
    };
    match claim.signature_algorithm.as_deref() {
        Some(name) if name == SignatureAlgorithm::Ed25519Jcs.as_str() => {}
        other => return Err(AttestationRejection::UnsupportedAlgorithm(other.unwrap_or("none").to_owned())),
    }
    if !claim.claim_type.is_attested() {
        return Err(AttestationRejection::NotAnAttestation);
    }
    if claim.issuer_id == claim.subject {
        return Err(AttestationRejection::SelfIssued(claim.issuer_id.clone()));
    }
    let issuer = trusted
        .issuers
        .get(&claim.issuer_id)
        .ok_or_else(|| AttestationRejection::UntrustedIssuer(claim.issuer_id.clone()))?;
    // The lifecycle: the key the claim names, valid when it was made, neither revoked, revocations fresh if required.
    let keys = issuer.key_for(claim, now)?;
    // The claim as received: its own members, spellings and extensions, with `signature` (checked above) set.
    let value = claim.to_value().map_err(|e| AttestationRejection::Malformed(e.to_string()))?;
    debug_assert_eq!(value.get("signature").and_then(Value::as_str), Some(signature));
    if !keys.iter().any(|key| signing::verify_value(&value, key).is_ok()) {
        return Err(AttestationRejection::BadSignature(claim.issuer_id.clone()));
    }
    if let Some(expires_at) = &claim.expires_at
        && expires_at.at() <= now
    {
        return Err(AttestationRejection::Expired(expires_at.as_str().to_owned()));
    }
    let skew = time::Duration::try_from(trusted.max_clock_skew).unwrap_or(time::Duration::ZERO);
    if now.checked_add(skew).is_some_and(|latest| claim.attested_at.at() > latest) {
        return Err(AttestationRejection::NotYetValid(claim.attested_at.as_str().to_owned()));
    }
    Ok(VerifiedAttestation(claim.clone()))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);

    fn issuer_key() -> SigningKey {
        SigningKey::ed25519_from_seed(&[42; 32])
    }

    fn trusted() -> TrustedIssuers {
        TrustedIssuers::new().trust("ldp:issuer:evals", issuer_key().verifying_key()).unwrap()
    }

    fn claim() -> AttestationClaim {
        AttestationClaim::new(
            "ldp:delegate:solid",
            "reasoning",
            Quality::new(0.85).unwrap(),
            "ldp:issuer:evals",
            datetime!(2026-03-08 12:00 UTC),
        )
        .expiring_at(datetime!(2026-06-08 12:00 UTC))
        .with_evidence("https://evals.example/reports/42")
    }

    fn signed() -> AttestationClaim {
        sign_attestation(claim(), &issuer_key()).unwrap()
    }

    #[test]
    fn a_signed_claim_from_a_trusted_issuer_verifies_and_survives_the_wire() {
        let claim = signed();
        let verified = verify_attestation(&claim, &trusted(), NOW).unwrap();
        let q = verified.quality_claim();
        assert_eq!(
            (q.claim_type, q.value.get(), q.issuer.as_deref()),
            (ClaimType::IssuerAttested, 0.85, Some("ldp:issuer:evals"))
        );
        assert_eq!(q.expires_at, Some(datetime!(2026-06-08 12:00 UTC)));
        // Through JSON text and an ATTESTATION body, with the issuer's own timestamp spelling and an unknown member.
        let mut value = claim.to_value().unwrap();
        value["attested_at"] = "2026-03-08T12:00:00.000+00:00".into();
        value["x_suite"] = "mmlu-pro".into();
        value.as_object_mut().unwrap().remove("signature");
        signing::sign_value(&mut value, &issuer_key()).unwrap();
        let text = serde_json::to_string(&value).unwrap();
        let back = AttestationClaim::from_value(serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back.attested_at.as_str(), "2026-03-08T12:00:00.000+00:00");
        verify_attestation(&back, &trusted(), NOW).unwrap();
        let body = back.to_attestation().unwrap();
        verify_attestation(&AttestationClaim::from_attestation(&body).unwrap(), &trusted(), NOW).unwrap();
    }

    #[test]
    fn every_rejection_has_its_reason() {
        let trusted = trusted();
        let verdict = |c: &AttestationClaim| verify_attestation(c, &trusted, NOW).unwrap_err();
        assert_eq!(verdict(&claim()), AttestationRejection::Unsigned);

        let mut tampered = signed();
        tampered.quality_score = Quality::new(0.99).unwrap();
        assert_eq!(verdict(&tampered), AttestationRejection::BadSignature("ldp:issuer:evals".into()));
        let mut moved = signed();
        moved.skill = "coding".into();
        assert!(matches!(verdict(&moved), AttestationRejection::BadSignature(_)));

        let forged = sign_attestation(claim(), &SigningKey::ed25519_from_seed(&[1; 32])).unwrap();
        assert!(matches!(verdict(&forged), AttestationRejection::BadSignature(_)));

        let stranger =
            sign_attestation(AttestationClaim { issuer_id: "ldp:issuer:unknown".into(), ..claim() }, &issuer_key())
                .unwrap();
        assert_eq!(verdict(&stranger), AttestationRejection::UntrustedIssuer("ldp:issuer:unknown".into()));

        let expired = sign_attestation(claim().expiring_at(NOW - time::Duration::seconds(1)), &issuer_key()).unwrap();
        assert!(matches!(verdict(&expired), AttestationRejection::Expired(_)));
        assert!(verify_attestation(&expired, &trusted, NOW - time::Duration::days(1)).is_ok());

        let future = sign_attestation(
            AttestationClaim { attested_at: WireTime::new(NOW + time::Duration::hours(1)), ..claim() },
            &issuer_key(),
        )
        .unwrap();
        assert!(matches!(verdict(&future), AttestationRejection::NotYetValid(_)));

        let own = TrustedIssuers::new().trust("ldp:delegate:solid", issuer_key().verifying_key()).unwrap();
        let selfie =
            sign_attestation(AttestationClaim { issuer_id: "ldp:delegate:solid".into(), ..claim() }, &issuer_key())
                .unwrap();
        assert_eq!(
            verify_attestation(&selfie, &own, NOW).unwrap_err(),
            AttestationRejection::SelfIssued("ldp:delegate:solid".into())
        );

        let boast = sign_attestation(claim().with_claim_type(ClaimType::SelfClaimed), &issuer_key()).unwrap();
        assert_eq!(verdict(&boast), AttestationRejection::NotAnAttestation);

        let mut hmac = signed();
        hmac.signature_algorithm = Some("hmac-sha256-jcs".into());
        assert_eq!(verdict(&hmac), AttestationRejection::UnsupportedAlgorithm("hmac-sha256-jcs".into()));
    }

    #[test]
    fn only_ed25519_keys_sign_and_are_trusted() {
        let hmac = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "s").unwrap();
        assert!(sign_attestation(claim(), &hmac).is_err());
        assert!(TrustedIssuers::new().trust("i", hmac.verifying_key()).is_err());
        assert!(TrustedIssuers::new().trust_hex("i", "zz").is_err());
        let hex = issuer_key().verifying_key().public_hex().unwrap();
        assert_eq!(TrustedIssuers::new().trust_hex("i", &hex).unwrap().len(), 1);
    }

    #[test]
    fn malformed_claims_are_typed() {
        for bad in [
            serde_json::json!({"subject": "x"}),
            serde_json::json!([1, 2]),
            serde_json::json!({"subject": "a", "skill": "s", "quality_score": 1.5, "claim_type": "issuer_attested",
                "issuer_id": "i", "attested_at": "2026-03-08T12:00:00Z"}),
            serde_json::json!({"subject": "a", "skill": "s", "quality_score": 0.5, "claim_type": "issuer_attested",
                "issuer_id": "i", "attested_at": "last week"}),
        ] {
            assert!(matches!(AttestationClaim::from_value(bad), Err(AttestationRejection::Malformed(_))));
        }
    }
}
