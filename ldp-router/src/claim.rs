//! Quality claims: who says how good a delegate is at a skill, and since when.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::RouterError;

/// A quality score in `[0, 1]`; once constructed it cannot be out of range or NaN.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Quality(f64);

impl Quality {
    /// The lowest quality.
    pub const MIN: Quality = Quality(0.0);
    /// The highest quality.
    pub const MAX: Quality = Quality(1.0);

    /// Accepts `value` if it lies within `[0, 1]`.
    pub fn new(value: f64) -> Result<Self, RouterError> {
        if (0.0..=1.0).contains(&value) { Ok(Quality(value)) } else { Err(RouterError::QualityOutOfRange(value)) }
    }

    /// Clamps `value` into `[0, 1]` (NaN becomes 0), for scores that come from arithmetic rather than from a peer.
    pub fn saturating(value: f64) -> Self {
        if value.is_nan() { Quality(0.0) } else { Quality(value.clamp(0.0, 1.0)) }
    }

    /// The score as a number.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Quality {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Quality::new(value).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Quality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}", self.0)
    }
}

/// How a quality claim was established: the wire model's type (paper section 3.2), so a card's claim and the
/// router's are one type.
pub use ldp_types::ClaimType;

/// One statement that a delegate achieves `value` on `skill`.
///
/// A claim speaks for its own skill only; the policy never carries it over to another skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityClaim {
    /// The skill the claim is about.
    pub skill: String,
    /// The claimed quality.
    pub value: Quality,
    /// How the claim was established.
    pub claim_type: ClaimType,
    /// Who attests it (for `runtime_observed`, the runtime that observed); required for every type but
    /// `self_claimed`. The router does not check signatures: only put verified attestations here.
    pub issuer: Option<String>,
    /// When it was established; required for attested claim types, and the origin of freshness decay.
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub attested_at: Option<OffsetDateTime>,
    /// After this instant the claim counts for nothing.
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub expires_at: Option<OffsetDateTime>,
}

impl QualityClaim {
    /// A claim the delegate makes about itself, as in an identity card's `quality_hint`.
    pub fn self_claimed(skill: impl Into<String>, value: Quality) -> Self {
        QualityClaim {
            skill: skill.into(),
            value,
            claim_type: ClaimType::SelfClaimed,
            issuer: None,
            attested_at: None,
            expires_at: None,
        }
    }

    /// A claim of `claim_type` made by `issuer` at `attested_at`.
    pub fn attested(
        claim_type: ClaimType,
        skill: impl Into<String>,
        value: Quality,
        issuer: impl Into<String>,
        attested_at: OffsetDateTime,
    ) -> Self {
        QualityClaim {
            skill: skill.into(),
            value,
            claim_type,
            issuer: Some(issuer.into()),
            attested_at: Some(attested_at),
            expires_at: None,
        }
    }

    /// The same claim with an expiry.
    pub fn expiring_at(mut self, expires_at: OffsetDateTime) -> Self {
        self.expires_at = Some(expires_at);
        self
    }

    /// The type the policy actually credits: an attested type without an issuer or an `attested_at` cannot be told
    /// apart from the delegate vouching for itself, so it counts as `self_claimed`.
    pub fn effective_type(&self) -> ClaimType {
        let unbacked = self.issuer.as_deref().is_none_or(str::is_empty) || self.attested_at.is_none();
        if self.claim_type.is_attested() && unbacked { ClaimType::SelfClaimed } else { self.claim_type }
    }
}
