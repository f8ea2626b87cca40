//! From identity cards (RFC 2) to [`Candidate`]s: offers, claims and the attestations that back them.

use ldp_types::{Capability, CostTier, IdentityCard};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::attestation::{AttestationClaim, AttestationRejection, TrustedIssuers, verify_attestation};
use crate::{Candidate, ClaimNote, ClaimType, Quality, QualityClaim, SkillOffer};

/// How identity cards become candidates.
///
/// * One [`SkillOffer`] per capability. Cost: the capability's `cost_per_call_usd` when given (finite and
///   non-negative); else its RFC `cost_hint` tier priced by this mapping; else the card's `cost_profile` tier;
///   else `unknown_cost_usd`. Latency: the capability's `latency_p50_ms()` (either wire shape); else the card's
///   `latency_profile` when it reads `p50:<n>ms` or `p50:<n>s`; else `unknown_latency_ms`. A capability with an empty
///   or repeated name is skipped with a note.
/// * One claim per capability that states a quality score, always as `self_claimed`: whatever `claim_type` the card
///   writes, the card is the delegate speaking about itself. A card that labels a score `issuer_attested` (or any
///   type but `self_claimed`) without a valid attestation for that skill gets a note saying it was counted as
///   `self_claimed`.
/// * One attested claim per valid [`AttestationClaim`] about this delegate and one of its offered skills, from the
///   card (`extra.attestations`, `capability.extra.attestation`) or supplied separately; it upgrades that skill
///   only. Invalid ones are ignored with their [`AttestationRejection`], a `tracing` warning and a note.
/// * Trust domain and jurisdiction from the card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardMapping {
    /// Price per task of the `low` cost tier, in US dollars (default 0.001).
    pub low_cost_usd: f64,
    /// Price per task of the `medium` tier (default 0.01).
    pub medium_cost_usd: f64,
    /// Price per task of the `high` tier (default 0.1).
    pub high_cost_usd: f64,
    /// Price assumed when a card says nothing about cost (default: the medium price, 0.01).
    pub unknown_cost_usd: f64,
    /// Median latency assumed when a card says nothing about latency (default 5000 ms, the RFC's example).
    pub unknown_latency_ms: u64,
}

impl Default for CardMapping {
    fn default() -> Self {
        CardMapping {
            low_cost_usd: 0.001,
            medium_cost_usd: 0.01,
            high_cost_usd: 0.1,
            unknown_cost_usd: 0.01,
            unknown_latency_ms: 5000,
        }
    }
}

/// An attestation that was set aside, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct IgnoredAttestation {
    /// The skill it named, when it could be read.
    pub skill: Option<String>,
    /// Its issuer, when it could be read.
    pub issuer_id: Option<String>,
    /// Why it was ignored.
    pub reason: AttestationRejection,
}

/// A card mapped to a candidate, with the attestations that did not count.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedCard {
    /// The candidate, ready for [`crate::Router::upsert`]; its notes explain what was set aside.
    pub candidate: Candidate,
    /// Attestations that were ignored.
    pub ignored: Vec<IgnoredAttestation>,
}

impl CardMapping {
    /// The price of a cost tier.
    pub fn tier_cost_usd(&self, tier: CostTier) -> f64 {
        match tier {
            CostTier::Low => self.low_cost_usd,
            CostTier::Medium => self.medium_cost_usd,
            CostTier::High => self.high_cost_usd,
            // A tier added to the wire model later is priced as the dearest until it has a price here.
            _ => self.high_cost_usd,
        }
    }

    /// Maps `card` with the attestations it carries plus `attestations` supplied separately, verified against
    /// `trusted` at `now`.
    pub fn map(
        &self,
        card: &IdentityCard,
        attestations: &[AttestationClaim],
        trusted: &TrustedIssuers,
        now: OffsetDateTime,
    ) -> MappedCard {
        let delegate_id = card.delegate_id.as_str();
        let mut candidate = Candidate::new(delegate_id, card.trust_domain.name.clone());
        candidate.jurisdiction = card.jurisdiction.clone();
        let mut ignored = Vec::new();
        let card_tier = card.cost_profile.as_deref().and_then(parse_tier);
        let card_latency = card.latency_profile.as_deref().and_then(parse_p50_ms);

        for capability in &card.capabilities {
            let name = capability.name.as_str();
            if name.is_empty() {
                candidate.notes.push(ClaimNote::new(None, "a capability without a name was skipped"));
                continue;
            }
            if candidate.skills.iter().any(|o| o.skill == name) {
                candidate.notes.push(ClaimNote::new(Some(name), "repeated capability skipped; the first one counts"));
                continue;
            }
            let cost = capability
                .cost_per_call_usd()
                .filter(|c| c.is_finite() && *c >= 0.0)
                .or_else(|| capability.cost_hint.or(card_tier).map(|t| self.tier_cost_usd(t)))
                .unwrap_or(self.unknown_cost_usd);
            let latency = capability.latency_p50_ms().or(card_latency).unwrap_or(self.unknown_latency_ms);
            candidate.skills.push(SkillOffer::new(name, cost, latency));
            if let Some(score) = capability.quality_score() {
                // A Score is within [0, 1] by construction.
                candidate.claims.push(QualityClaim::self_claimed(name, Quality::saturating(score.get())));
            }
        }

        let mut pending: Vec<Result<AttestationClaim, AttestationRejection>> = embedded(card);
        pending.extend(attestations.iter().cloned().map(Ok));
        let mut seen_signatures: Vec<String> = Vec::new();
        for item in pending {
            let claim = match item {
                Ok(claim) => claim,
                Err(reason) => {
                    reject_with(&mut ignored, &mut candidate, None, reason);
                    continue;
                }
            };
            if claim.subject != delegate_id {
                let reason = AttestationRejection::WrongSubject {
                    expected: delegate_id.to_owned(),
                    actual: claim.subject.clone(),
                };
                reject_with(&mut ignored, &mut candidate, Some(&claim), reason);
                continue;
            }
            if !candidate.skills.iter().any(|o| o.skill == claim.skill) {
                let reason = AttestationRejection::SkillNotOffered(claim.skill.clone());
                reject_with(&mut ignored, &mut candidate, Some(&claim), reason);
                continue;
            }
            match verify_attestation(&claim, trusted, now) {
                Ok(verified) => {
                    let signature = claim.signature.clone().unwrap_or_default();
                    if seen_signatures.contains(&signature) {
                        continue;
                    }
                    seen_signatures.push(signature);
                    candidate.claims.push(verified.quality_claim());
                }
                Err(reason) => reject_with(&mut ignored, &mut candidate, Some(&claim), reason),
            }
        }

        for capability in &card.capabilities {
            note_unbacked_label(capability, &mut candidate);
        }
        MappedCard { candidate, ignored }
    }
}

/// Notes a card's non-`self_claimed` label when no verified attestation backs that skill.
fn note_unbacked_label(capability: &Capability, candidate: &mut Candidate) {
    let declared = capability.claim_type();
    if declared == ldp_types::ClaimType::SelfClaimed || capability.quality_score().is_none() {
        return;
    }
    let name = capability.name.as_str();
    let backed = candidate.claims.iter().any(|c| c.skill == name && c.claim_type != ClaimType::SelfClaimed);
    if !backed {
        let text = format!(
            "card labels its {name} score {declared} without a valid attestation; counted as self_claimed",
            declared = declared.as_str()
        );
        tracing::info!(delegate = %candidate.delegate_id, skill = name, "{text}");
        candidate.notes.push(ClaimNote::new(Some(name), text));
    }
}

fn reject_with(
    ignored: &mut Vec<IgnoredAttestation>,
    candidate: &mut Candidate,
    claim: Option<&AttestationClaim>,
    reason: AttestationRejection,
) {
    let skill = claim.map(|c| c.skill.clone());
    let issuer_id = claim.map(|c| c.issuer_id.clone());
    tracing::warn!(
        delegate = %candidate.delegate_id,
        skill = skill.as_deref().unwrap_or("?"),
        issuer = issuer_id.as_deref().unwrap_or("?"),
        %reason,
        "attestation ignored"
    );
    let text = format!("attestation by {} ignored: {reason}", issuer_id.as_deref().unwrap_or("an unreadable issuer"));
    candidate.notes.push(ClaimNote::new(skill.as_deref(), text));
    ignored.push(IgnoredAttestation { skill, issuer_id, reason });
}

/// The attestations a card carries: `extra.attestations` (an array) and each capability's `extra.attestation` (an
/// object or an array).
pub fn embedded(card: &IdentityCard) -> Vec<Result<AttestationClaim, AttestationRejection>> {
    let mut out = Vec::new();
    let mut take = |value: &Value| match value {
        Value::Array(items) => out.extend(items.iter().cloned().map(AttestationClaim::from_value)),
        other => out.push(AttestationClaim::from_value(other.clone())),
    };
    if let Some(list) = card.extra.get("attestations") {
        take(list);
    }
    for capability in &card.capabilities {
        if let Some(one) = capability.extra.get("attestation") {
            take(one);
        }
    }
    out
}

fn parse_tier(s: &str) -> Option<CostTier> {
    match s.trim().to_ascii_lowercase().as_str() {
        "low" => Some(CostTier::Low),
        "medium" => Some(CostTier::Medium),
        "high" => Some(CostTier::High),
        _ => None,
    }
}

/// Reads `p50:2000ms` or `p50:2s` (any other text around it, comma-separated, is ignored).
fn parse_p50_ms(profile: &str) -> Option<u64> {
    profile.split([',', ';', ' ']).find_map(|part| {
        let value = part.trim().strip_prefix("p50:")?.trim();
        if let Some(ms) = value.strip_suffix("ms") {
            ms.trim().parse().ok()
        } else {
            value.strip_suffix('s').and_then(|s| s.trim().parse::<u64>().ok()).and_then(|s| s.checked_mul(1000))
        }
    })
}

#[cfg(test)]
mod tests {
    use ldp_types::signing::SigningKey;
    use ldp_types::{DelegateId, Score, TrustDomain};
    use time::macros::datetime;

    use super::*;
    use crate::attestation::sign_attestation;

    const NOW: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);
    const ID: &str = "ldp:delegate:solid";

    fn issuer() -> SigningKey {
        SigningKey::ed25519_from_seed(&[42; 32])
    }

    fn trusted() -> TrustedIssuers {
        TrustedIssuers::new().trust("ldp:issuer:evals", issuer().verifying_key()).unwrap()
    }

    fn card() -> IdentityCard {
        let mut card = IdentityCard::new(DelegateId::new(ID).unwrap(), "Solid", "qwen", "3");
        card.trust_domain = TrustDomain::new("research.internal");
        card.jurisdiction = Some("eu-west".into());
        let score = |v| Score::new(v).unwrap();
        card.capabilities = vec![
            // Reference-SDK shape with a cost per call, labelled attested by the card itself.
            Capability::new("reasoning")
                .with_quality(score(0.9), ldp_types::ClaimType::IssuerAttested)
                .with_latency_p50_ms(1200)
                .with_cost(0.02, CostTier::High),
            // RFC shape: tier only.
            serde_json::from_str(
                r#"{"name":"summarize","quality_hint":0.7,"latency_hint_ms_p50":300,"cost_hint":"low"}"#,
            )
            .unwrap(),
            // Nothing at all: card-level profiles apply.
            Capability::new("translate"),
        ];
        card.cost_profile = Some("High".into());
        card.latency_profile = Some("p50:2s, p99:9s".into());
        card
    }

    fn attestation(skill: &str, quality: f64) -> AttestationClaim {
        let claim = AttestationClaim::new(
            ID,
            skill,
            Quality::new(quality).unwrap(),
            "ldp:issuer:evals",
            datetime!(2026-03-10 12:00 UTC),
        )
        .expiring_at(datetime!(2026-04-10 12:00 UTC));
        sign_attestation(claim, &issuer()).unwrap()
    }

    #[test]
    fn offers_costs_latencies_and_identity_come_from_the_card() {
        let mapped = CardMapping::default().map(&card(), &[], &trusted(), NOW);
        let c = &mapped.candidate;
        assert_eq!((c.delegate_id.as_str(), c.trust_domain.as_str()), (ID, "research.internal"));
        assert_eq!(c.jurisdiction.as_deref(), Some("eu-west"));
        assert_eq!(
            c.skills,
            vec![
                SkillOffer::new("reasoning", 0.02, 1200),
                SkillOffer::new("summarize", 0.001, 300),
                SkillOffer::new("translate", 0.1, 2000),
            ]
        );
        // Two self-claims; the card's issuer_attested label does not count without an attestation, and says so.
        assert!(c.claims.iter().all(|q| q.claim_type == ClaimType::SelfClaimed));
        assert_eq!(c.claims.iter().map(|q| q.skill.as_str()).collect::<Vec<_>>(), ["reasoning", "summarize"]);
        assert_eq!(c.notes.len(), 1);
        assert!(c.notes[0].text.contains("issuer_attested without a valid attestation"), "{}", c.notes[0]);
        assert!(mapped.ignored.is_empty());
    }

    #[test]
    fn unknown_cost_and_latency_use_the_documented_defaults() {
        let mut bare = card();
        bare.cost_profile = None;
        bare.latency_profile = Some("fast".into());
        let mapped = CardMapping::default().map(&bare, &[], &trusted(), NOW);
        assert_eq!(mapped.candidate.skills[2], SkillOffer::new("translate", 0.01, 5000));
        assert_eq!(parse_p50_ms("p50:1500ms"), Some(1500));
        assert_eq!(parse_p50_ms("p99:1s"), None);
    }

    #[test]
    fn a_valid_attestation_upgrades_only_its_own_skill() {
        let mapped = CardMapping::default().map(&card(), &[attestation("summarize", 0.8)], &trusted(), NOW);
        let c = &mapped.candidate;
        let attested: Vec<_> = c.claims.iter().filter(|q| q.claim_type == ClaimType::IssuerAttested).collect();
        assert_eq!(attested.len(), 1);
        assert_eq!((attested[0].skill.as_str(), attested[0].value.get()), ("summarize", 0.8));
        assert_eq!(attested[0].expires_at, Some(datetime!(2026-04-10 12:00 UTC)));
        // reasoning is still only the card's word.
        assert!(c.notes.iter().any(|n| n.skill.as_deref() == Some("reasoning")));
    }

    #[test]
    fn an_attestation_embedded_in_the_card_counts_once() {
        let mut with = card();
        let a = attestation("reasoning", 0.88);
        with.capabilities[0].extra.insert("attestation".into(), a.to_value().unwrap());
        with.extra.insert("attestations".into(), Value::Array(vec![a.to_value().unwrap()]));
        let mapped = CardMapping::default().map(&with, &[a], &trusted(), NOW);
        let attested = mapped.candidate.claims.iter().filter(|q| q.claim_type == ClaimType::IssuerAttested).count();
        assert_eq!(attested, 1);
        assert!(mapped.candidate.notes.is_empty(), "{:?}", mapped.candidate.notes);
    }

    #[test]
    fn bad_attestations_are_ignored_with_a_reason_in_the_notes() {
        let unsigned = AttestationClaim { signature: None, ..attestation("reasoning", 0.95) };
        let expired =
            sign_attestation(attestation("reasoning", 0.95).expiring_at(NOW - time::Duration::days(1)), &issuer())
                .unwrap();
        let untrusted = sign_attestation(
            AttestationClaim { issuer_id: "ldp:issuer:shady".into(), ..attestation("reasoning", 0.95) },
            &issuer(),
        )
        .unwrap();
        let mut tampered = attestation("reasoning", 0.5);
        tampered.quality_score = Quality::new(0.99).unwrap();
        let wrong_skill = attestation("poetry", 0.99);
        let other_subject = sign_attestation(
            AttestationClaim { subject: "ldp:delegate:other".into(), ..attestation("reasoning", 0.9) },
            &issuer(),
        )
        .unwrap();
        let mut with = card();
        with.extra.insert("attestations".into(), serde_json::json!([{"subject": ID}]));
        let all = [unsigned, expired, untrusted, tampered, wrong_skill, other_subject];
        let mapped = CardMapping::default().map(&with, &all, &trusted(), NOW);
        let reasons: Vec<_> = mapped.ignored.iter().map(|i| i.reason.clone()).collect();
        assert!(matches!(reasons[0], AttestationRejection::Malformed(_)));
        assert_eq!(reasons[1], AttestationRejection::Unsigned);
        assert!(matches!(reasons[2], AttestationRejection::Expired(_)));
        assert_eq!(reasons[3], AttestationRejection::UntrustedIssuer("ldp:issuer:shady".into()));
        assert!(matches!(reasons[4], AttestationRejection::BadSignature(_)));
        assert_eq!(reasons[5], AttestationRejection::SkillNotOffered("poetry".into()));
        assert!(matches!(reasons[6], AttestationRejection::WrongSubject { .. }));
        assert_eq!(reasons.len(), 7);
        assert!(mapped.candidate.claims.iter().all(|q| q.claim_type == ClaimType::SelfClaimed));
        // Every reason is in the notes (plus the unbacked card label).
        assert_eq!(mapped.candidate.notes.len(), 8);
        assert!(mapped.candidate.notes.iter().any(|n| n.text.contains("expired at")));
    }
}
