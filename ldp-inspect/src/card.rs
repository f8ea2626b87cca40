//! The identity card as the page shows it: each skill with its schemas and its quality, the delegate's own claim
//! side by side with the attestations about it and whether each verifies against the issuer keys the user pinned.

use ldp_router::{AttestationClaim, TrustedIssuers, embedded_attestations, verify_attestation};
use ldp_types::IdentityCard;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::InspectError;

/// A card, laid out for the page.
#[derive(Debug, Clone, Serialize)]
pub struct CardView {
    /// The card as received, for the raw view.
    pub card: Value,
    /// One entry per capability.
    pub skills: Vec<SkillView>,
    /// Attestations that could not be read, or that name another delegate or a skill the card does not offer.
    pub stray_attestations: Vec<AttestationView>,
}

/// One skill.
#[derive(Debug, Clone, Serialize)]
pub struct SkillView {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// The JSON Schema of its input, if the card gives one.
    pub input_schema: Option<Value>,
    /// The JSON Schema of its output.
    pub output_schema: Option<Value>,
    /// The quality the card states, if any, with the claim type the card writes.
    pub claim: Option<ClaimView>,
    /// The attestations about this skill carried by the card.
    pub attestations: Vec<AttestationView>,
}

/// The card's own quality statement.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimView {
    /// The score, 0-1.
    pub score: Option<f64>,
    /// The claim type the card writes (`self_claimed`, `issuer_attested`, ...).
    pub claim_type: String,
    /// The issuer the card names, if any.
    pub issuer_id: Option<String>,
}

/// One attestation and the verdict on it.
#[derive(Debug, Clone, Serialize)]
pub struct AttestationView {
    /// The issuer, when readable.
    pub issuer_id: Option<String>,
    /// The skill, when readable.
    pub skill: Option<String>,
    /// The attested score, when readable.
    pub score: Option<f64>,
    /// Whether it verifies against the pinned issuer keys.
    pub verified: bool,
    /// `verified`, or why not.
    pub verdict: String,
}

/// Reads the pinned issuer keys of the connect form: one `ISSUER_ID=PUBLIC_KEY_HEX` per line (or comma-separated).
pub fn trusted_issuers(text: &str) -> Result<TrustedIssuers, InspectError> {
    let mut trusted = TrustedIssuers::new();
    for entry in text.split([',', '\n']).map(str::trim).filter(|e| !e.is_empty()) {
        let (issuer, key) = entry.split_once('=').ok_or_else(|| {
            InspectError::BadRequest(format!("trusted issuer {entry:?}: expected ISSUER_ID=ED25519_PUBLIC_KEY_HEX"))
        })?;
        trusted = trusted
            .trust_hex(issuer.trim(), key.trim())
            .map_err(|e| InspectError::BadRequest(format!("trusted issuer {}: {e}", issuer.trim())))?;
    }
    Ok(trusted)
}

/// Lays `card` out, verifying its attestations against `trusted` at `now`.
pub fn view(card: &IdentityCard, trusted: &TrustedIssuers, now: OffsetDateTime) -> CardView {
    let mut skills: Vec<SkillView> = card
        .capabilities
        .iter()
        .map(|c| SkillView {
            name: c.name.clone(),
            description: c.description.clone(),
            input_schema: c.input_schema.clone(),
            output_schema: c.output_schema.clone(),
            claim: c.quality.as_ref().map(|q| ClaimView {
                score: q.quality_score.map(|s| s.get()),
                claim_type: q.claim_type.as_str().to_owned(),
                issuer_id: q.issuer_id.clone(),
            }),
            attestations: Vec::new(),
        })
        .collect();
    let mut stray = Vec::new();
    for found in embedded_attestations(card) {
        let attestation = match found {
            Ok(claim) => judge(&claim, card, trusted, now),
            Err(why) => AttestationView {
                issuer_id: None,
                skill: None,
                score: None,
                verified: false,
                verdict: format!("unreadable: {why}"),
            },
        };
        match skills.iter_mut().find(|s| attestation.skill.as_deref() == Some(s.name.as_str())) {
            Some(skill) if attestation.verdict != WRONG_SUBJECT => skill.attestations.push(attestation),
            _ => stray.push(attestation),
        }
    }
    CardView { card: serde_json::to_value(card).unwrap_or(Value::Null), skills, stray_attestations: stray }
}

const WRONG_SUBJECT: &str = "about another delegate";

fn judge(
    claim: &AttestationClaim,
    card: &IdentityCard,
    trusted: &TrustedIssuers,
    now: OffsetDateTime,
) -> AttestationView {
    let (verified, verdict) = if claim.subject != card.delegate_id.as_str() {
        (false, WRONG_SUBJECT.to_owned())
    } else {
        match verify_attestation(claim, trusted, now) {
            Ok(_) => (true, "verified".to_owned()),
            Err(why) => (false, format!("not verified: {why}")),
        }
    };
    AttestationView {
        issuer_id: Some(claim.issuer_id.clone()),
        skill: Some(claim.skill.clone()),
        score: Some(claim.quality_score.get()),
        verified,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_keys_must_be_pairs_of_issuer_and_hex() {
        assert!(trusted_issuers("").is_ok_and(|t| t.is_empty()));
        assert!(matches!(trusted_issuers("ldp:issuer:x"), Err(InspectError::BadRequest(m)) if m.contains("expected")));
        assert!(
            matches!(trusted_issuers("ldp:issuer:x=zz"), Err(InspectError::BadRequest(m)) if m.contains("ldp:issuer:x"))
        );
    }
}
