//! Signed usage receipts (paper section 7, "delegates can misreport token usage").
//!
//! A delegate that holds an Ed25519 identity key signs, for each result, what the task consumed: tokens in and out,
//! cost, model, wall time, bound to the task and session ids so that a receipt cannot be moved onto another result.
//! The receipt travels inside the result's provenance as `usage_receipt`; the delegate publishes the public half of
//! its key in its identity card as [`RECEIPT_KEY_MEMBER`]. A client verifies the receipt with
//! [`UsageReceipt::verify_for`] and may then trust the provenance's `tokens_used` and `cost_usd` as much as it trusts
//! the key. The format is documented for other implementations in `docs/receipts.md`.
//!
//! The signature is the `ed25519-jcs` construction of envelopes and attestations: Ed25519 over the RFC 8785 bytes of
//! the receipt object without its `signature` and `signature_algorithm` members. Members this version does not know
//! are kept (in [`UsageReceipt::extra`]) so that a receipt from a newer implementation still verifies.
//!
//! ```
//! use ldp_types::UsageReceipt;
//! use ldp_types::signing::SigningKey;
//!
//! let key = SigningKey::ed25519_from_seed(&[7; 32]);
//! let mut receipt = UsageReceipt::new("ldp:delegate:summariser", "session-1", "task-9", "2026-03-09T10:00:07Z");
//! receipt.tokens_in = Some(120);
//! receipt.tokens_out = Some(48);
//! receipt.wall_time_ms = Some(830);
//! let signed = receipt.sign(&key)?;
//! signed.verify_for(&key.verifying_key(), "session-1", "task-9")?;
//! // Moved onto another task, it no longer verifies.
//! assert!(signed.verify_for(&key.verifying_key(), "session-1", "task-10").is_err());
//! # Ok::<(), ldp_types::Error>(())
//! ```

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::signing::{self, SignatureAlgorithm, SigningKey, VerifyingKey};
use crate::{Error, IdentityCard, Provenance};

/// The identity-card member (in the card's extra members) holding the delegate's receipt key: the lowercase hex of
/// its 32-byte Ed25519 public key.
pub const RECEIPT_KEY_MEMBER: &str = "receipt_public_key";

/// The version this implementation writes.
pub const RECEIPT_VERSION: u32 = 1;

/// What one task consumed, as its delegate signs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct UsageReceipt {
    /// Format version ([`RECEIPT_VERSION`]).
    pub receipt_version: u32,
    /// The delegate that ran the task (its `ldp:delegate:` id).
    pub delegate_id: String,
    /// The session the task ran in.
    pub session_id: String,
    /// The task.
    pub task_id: String,
    /// The model that produced the output, as its provider named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Prompt (input) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    /// Completion (output) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    /// All tokens: what the provenance's `tokens_used` must equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_total: Option<u64>,
    /// Cost in USD: what the provenance's `cost_usd` must equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Milliseconds from the task's admission to its result, measured by the delegate's session machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
    /// When the receipt was issued (RFC 3339).
    pub issued_at: String,
    /// `ed25519-jcs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_algorithm: Option<String>,
    /// Lowercase hex Ed25519 signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Members of later versions, kept so that their signature still verifies.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl UsageReceipt {
    /// An unsigned receipt with no usage figures.
    pub fn new(
        delegate_id: impl Into<String>,
        session_id: impl Into<String>,
        task_id: impl Into<String>,
        issued_at: impl Into<String>,
    ) -> Self {
        UsageReceipt {
            receipt_version: RECEIPT_VERSION,
            delegate_id: delegate_id.into(),
            session_id: session_id.into(),
            task_id: task_id.into(),
            model: None,
            tokens_in: None,
            tokens_out: None,
            tokens_total: None,
            cost_usd: None,
            wall_time_ms: None,
            issued_at: issued_at.into(),
            signature_algorithm: None,
            signature: None,
            extra: BTreeMap::new(),
        }
    }

    /// Signs the receipt with an Ed25519 key (`ed25519-jcs`), replacing any earlier signature. A shared-secret key
    /// is refused: a receipt must be checkable by anyone holding the delegate's public key.
    pub fn sign(mut self, key: &SigningKey) -> Result<Self, Error> {
        if key.algorithm() != SignatureAlgorithm::Ed25519Jcs {
            return Err(Error::InvalidKey("usage receipts are signed ed25519-jcs"));
        }
        self.signature = None;
        self.signature_algorithm = None;
        let mut value = serde_json::to_value(&self).map_err(Error::Serialize)?;
        signing::sign_value(&mut value, key)?;
        serde_json::from_value(value).map_err(Error::InvalidMessage)
    }

    /// Verifies the signature with the delegate's public key and that the receipt is about this session's task; a
    /// receipt copied from another result fails with [`Error::ReceiptMismatch`].
    pub fn verify_for(&self, key: &VerifyingKey, session_id: &str, task_id: &str) -> Result<(), Error> {
        if key.algorithm() != SignatureAlgorithm::Ed25519Jcs {
            return Err(Error::InvalidKey("usage receipts are verified with an ed25519 public key"));
        }
        let value = serde_json::to_value(self).map_err(Error::Serialize)?;
        signing::verify_value(&value, key)?;
        if self.session_id != session_id {
            return Err(Error::ReceiptMismatch { member: "session_id" });
        }
        if self.task_id != task_id {
            return Err(Error::ReceiptMismatch { member: "task_id" });
        }
        Ok(())
    }

    /// Checks that the self-reported figures of a provenance record agree with this receipt: `tokens_used` with
    /// `tokens_total` and `cost_usd` with `cost_usd`, and the producer with the signer. Call it after
    /// [`verify_for`](Self::verify_for).
    pub fn matches(&self, provenance: &Provenance) -> Result<(), Error> {
        if provenance.produced_by != self.delegate_id {
            return Err(Error::ReceiptMismatch { member: "delegate_id" });
        }
        if provenance.tokens_used != self.tokens_total {
            return Err(Error::ReceiptMismatch { member: "tokens_total" });
        }
        if provenance.cost_usd != self.cost_usd {
            return Err(Error::ReceiptMismatch { member: "cost_usd" });
        }
        Ok(())
    }
}

/// The receipt key a delegate publishes in its identity card ([`RECEIPT_KEY_MEMBER`]), if any and well formed.
pub fn receipt_key(card: &IdentityCard) -> Option<VerifyingKey> {
    let hex = card.extra.get(RECEIPT_KEY_MEMBER)?.as_str()?;
    VerifyingKey::ed25519_from_hex(hex).ok()
}

/// Publishes `key`'s public half in `card` as its receipt key. Returns false for a key that has no public half
/// (a shared secret), which cannot sign receipts.
pub fn publish_receipt_key(card: &mut IdentityCard, key: &SigningKey) -> bool {
    match key.verifying_key().public_hex() {
        Some(public) if key.algorithm() == SignatureAlgorithm::Ed25519Jcs => {
            card.extra.insert(RECEIPT_KEY_MEMBER.to_owned(), Value::String(public));
            true
        }
        _ => false,
    }
}

/// What a client finds in one result's provenance ([`check_receipt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiptVerdict {
    /// The delegate publishes no receipt key: its figures are self-reported.
    NotPublished,
    /// Signed by the published key, about this task, and the provenance's figures agree with it.
    Verified,
    /// The delegate publishes a key but the result carries no receipt.
    Missing,
    /// The receipt does not verify, is about another task, or disagrees with the provenance.
    Invalid(String),
}

/// Checks the receipt of a result that the delegate of `card` produced for `task_id` in `session_id`.
pub fn check_receipt(card: &IdentityCard, provenance: &Provenance, session_id: &str, task_id: &str) -> ReceiptVerdict {
    let Some(key) = receipt_key(card) else { return ReceiptVerdict::NotPublished };
    let Some(receipt) = provenance.usage_receipt.as_deref() else { return ReceiptVerdict::Missing };
    match receipt.verify_for(&key, session_id, task_id).and_then(|()| receipt.matches(provenance)) {
        Ok(()) => ReceiptVerdict::Verified,
        Err(e) => ReceiptVerdict::Invalid(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PayloadMode;

    fn key() -> SigningKey {
        SigningKey::ed25519_from_seed(&[3; 32])
    }

    fn receipt() -> UsageReceipt {
        let mut r = UsageReceipt::new("ldp:delegate:d", "s1", "t1", "2026-03-09T10:00:07Z");
        r.model = Some("smollm2-135m".into());
        r.tokens_in = Some(10);
        r.tokens_out = Some(5);
        r.tokens_total = Some(15);
        r.cost_usd = Some(0.000_125);
        r.wall_time_ms = Some(42);
        r
    }

    #[test]
    fn a_signed_receipt_verifies_and_survives_the_wire() {
        let signed = receipt().sign(&key()).unwrap();
        assert_eq!(signed.signature_algorithm.as_deref(), Some("ed25519-jcs"));
        let text = serde_json::to_string(&signed).unwrap();
        let back: UsageReceipt = serde_json::from_str(&text).unwrap();
        back.verify_for(&key().verifying_key(), "s1", "t1").unwrap();
    }

    #[test]
    fn tampering_another_key_and_another_task_are_refused() {
        let signed = receipt().sign(&key()).unwrap();
        let mut tampered = signed.clone();
        tampered.tokens_total = Some(1);
        assert!(matches!(tampered.verify_for(&key().verifying_key(), "s1", "t1"), Err(Error::BadSignature)));
        let other = SigningKey::ed25519_from_seed(&[4; 32]).verifying_key();
        assert!(matches!(signed.verify_for(&other, "s1", "t1"), Err(Error::BadSignature)));
        assert!(matches!(
            signed.verify_for(&key().verifying_key(), "s1", "t2"),
            Err(Error::ReceiptMismatch { member: "task_id" })
        ));
        assert!(matches!(
            signed.verify_for(&key().verifying_key(), "s2", "t1"),
            Err(Error::ReceiptMismatch { member: "session_id" })
        ));
        let unsigned = receipt();
        assert!(matches!(unsigned.verify_for(&key().verifying_key(), "s1", "t1"), Err(Error::MissingSignature)));
    }

    #[test]
    fn shared_secrets_neither_sign_nor_verify_receipts() {
        let hmac = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "s").unwrap();
        assert!(matches!(receipt().sign(&hmac), Err(Error::InvalidKey(_))));
        let signed = receipt().sign(&key()).unwrap();
        assert!(matches!(signed.verify_for(&hmac.verifying_key(), "s1", "t1"), Err(Error::InvalidKey(_))));
    }

    #[test]
    fn members_of_a_later_version_are_covered_and_kept() {
        let mut r = receipt();
        r.extra.insert("gpu_seconds".into(), serde_json::json!(1.5));
        let signed = r.sign(&key()).unwrap();
        let text = serde_json::to_string(&signed).unwrap();
        assert!(text.contains("gpu_seconds"));
        let back: UsageReceipt = serde_json::from_str(&text).unwrap();
        back.verify_for(&key().verifying_key(), "s1", "t1").unwrap();
        let mut changed = back;
        changed.extra.insert("gpu_seconds".into(), serde_json::json!(0.5));
        assert!(changed.verify_for(&key().verifying_key(), "s1", "t1").is_err());
    }

    #[test]
    fn provenance_figures_must_match_the_receipt() {
        let signed = receipt().sign(&key()).unwrap();
        let mut p = Provenance::new("ldp:delegate:d", "v", PayloadMode::Text);
        p.tokens_used = Some(15);
        p.cost_usd = Some(0.000_125);
        signed.matches(&p).unwrap();
        p.tokens_used = Some(5);
        assert!(matches!(signed.matches(&p), Err(Error::ReceiptMismatch { member: "tokens_total" })));
        p.tokens_used = Some(15);
        p.cost_usd = Some(0.0);
        assert!(matches!(signed.matches(&p), Err(Error::ReceiptMismatch { member: "cost_usd" })));
        p.cost_usd = Some(0.000_125);
        p.produced_by = "ldp:delegate:other".into();
        assert!(matches!(signed.matches(&p), Err(Error::ReceiptMismatch { member: "delegate_id" })));
    }

    #[test]
    fn the_card_publishes_the_receipt_key() {
        let mut card = crate::IdentityCard::new(crate::DelegateId::new("ldp:delegate:d").unwrap(), "D", "m", "1");
        assert!(receipt_key(&card).is_none());
        assert!(publish_receipt_key(&mut card, &key()));
        assert_eq!(receipt_key(&card).and_then(|k| k.public_hex()), key().verifying_key().public_hex());
        let hmac = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "s").unwrap();
        assert!(!publish_receipt_key(&mut card, &hmac));
    }
}
