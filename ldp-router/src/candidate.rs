//! The router's view of a delegate: what it offers and what is claimed about it.

use serde::{Deserialize, Serialize};

use crate::QualityClaim;

/// One skill a delegate offers, with its price and speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillOffer {
    /// The skill name, as in an identity card capability's `name`.
    pub skill: String,
    /// Estimated cost of one task in US dollars, comparable with a contract's `max_cost_usd`.
    pub cost_usd: f64,
    /// Median latency in milliseconds (`latency_hint_ms_p50`).
    pub latency_ms: u64,
}

impl SkillOffer {
    /// An offer of `skill` at `cost_usd` per task and `latency_ms` median latency.
    pub fn new(skill: impl Into<String>, cost_usd: f64, latency_ms: u64) -> Self {
        SkillOffer { skill: skill.into(), cost_usd, latency_ms }
    }
}

/// A delegate as the router sees it.
///
/// Claims are kept apart from offers and carry their own skill, because attestations arrive separately from the
/// identity card; the policy matches them to the requested skill and ignores the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The delegate's id (`ldp:delegate:<name>`).
    pub delegate_id: String,
    /// The trust domain it belongs to.
    pub trust_domain: String,
    /// Where it runs, if it says (for example `eu-west`).
    pub jurisdiction: Option<String>,
    /// The skills it offers.
    pub skills: Vec<SkillOffer>,
    /// Quality claims about it, any type, any skill.
    pub claims: Vec<QualityClaim>,
    /// Why evidence about it was set aside (an attestation with a bad signature, a card's unbacked
    /// `issuer_attested` label, ...); shown in the explanation of every decision that ranks it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<ClaimNote>,
}

/// A remark about the evidence behind a candidate, kept for explanations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimNote {
    /// The skill it concerns; `None` for the whole delegate.
    pub skill: Option<String>,
    /// What was set aside, and why.
    pub text: String,
}

impl ClaimNote {
    /// A note about `skill` (or the whole delegate when `None`).
    pub fn new(skill: Option<&str>, text: impl Into<String>) -> Self {
        ClaimNote { skill: skill.map(str::to_owned), text: text.into() }
    }
}

impl std::fmt::Display for ClaimNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.skill {
            Some(skill) => write!(f, "[{skill}] {}", self.text),
            None => f.write_str(&self.text),
        }
    }
}

impl Candidate {
    /// A candidate with no skills or claims yet.
    pub fn new(delegate_id: impl Into<String>, trust_domain: impl Into<String>) -> Self {
        Candidate {
            delegate_id: delegate_id.into(),
            trust_domain: trust_domain.into(),
            jurisdiction: None,
            skills: Vec::new(),
            claims: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Sets the jurisdiction.
    pub fn in_jurisdiction(mut self, jurisdiction: impl Into<String>) -> Self {
        self.jurisdiction = Some(jurisdiction.into());
        self
    }

    /// Adds an offered skill.
    pub fn offering(mut self, offer: SkillOffer) -> Self {
        self.skills.push(offer);
        self
    }

    /// Adds a quality claim.
    pub fn with_claim(mut self, claim: QualityClaim) -> Self {
        self.claims.push(claim);
        self
    }

    /// Adds a note for explanations.
    pub fn with_note(mut self, note: ClaimNote) -> Self {
        self.notes.push(note);
        self
    }
}
