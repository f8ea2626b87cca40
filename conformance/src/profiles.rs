//! The adoption profiles of RFC Appendix B, each a set of requirements that must all pass.

use serde::{Deserialize, Serialize};

use crate::ctx::Status;
use crate::report::RequirementResult;

/// An adoption profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// `A`, `B` or `C`.
    pub id: &'static str,
    /// Its name.
    pub name: &'static str,
    /// Its features, as Appendix B lists them.
    pub features: &'static str,
    /// The requirements it adds to the profile before it (each profile extends the one before).
    pub adds: &'static [&'static str],
}

impl Profile {
    /// Every requirement that must pass: those of the profiles it extends, then its own.
    pub fn requirements(&self) -> impl Iterator<Item = &'static str> + use<> {
        let last = PROFILES.iter().position(|p| p.id == self.id).unwrap_or(PROFILES.len() - 1);
        PROFILES[..=last].iter().flat_map(|p| p.adds.iter().copied())
    }
}

/// Profile A's requirements.
const A_ADDS: &[&str] = &[
    "LDP-IDENT-001",
    "LDP-IDENT-002",
    "LDP-IDENT-003",
    "LDP-PAYLOAD-001",
    "LDP-SEC-001",
    "LDP-SEC-002",
    "LDP-SEC-003",
];
/// What profile B adds to A.
const B_ADDS: &[&str] = &[
    "LDP-PROV-001",
    "LDP-PROV-004",
    "LDP-PROV-005",
    "LDP-TRUST-001",
    "LDP-TRUST-002",
    "LDP-POLICY-001",
    "LDP-ERR-001",
];
/// What profile C adds to B.
const C_ADDS: &[&str] = &[
    "LDP-NEG-001",
    "LDP-NEG-002",
    "LDP-PAYLOAD-002",
    "LDP-FALLBACK-001",
    "LDP-SESS-001",
    "LDP-SESS-002",
    "LDP-SESS-003",
    "LDP-SESS-004",
];

/// The three profiles, cumulative.
pub const PROFILES: &[Profile] = &[
    Profile { id: "A", name: "Basic", features: "identity cards + text payloads + signed messages", adds: A_ADDS },
    Profile { id: "B", name: "Enterprise", features: "A + provenance tracking + policy enforcement", adds: B_ADDS },
    Profile {
        id: "C",
        name: "High-Performance",
        features: "B + payload negotiation + session management",
        adds: C_ADDS,
    },
];

/// Whether an implementation meets a profile, and what is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileResult {
    /// `A`, `B` or `C`.
    pub profile: String,
    /// Its name.
    pub name: String,
    /// Whether every requirement of the profile passed.
    pub met: bool,
    /// Requirements that did not pass, with their verdict.
    pub missing: Vec<String>,
}

impl ProfileResult {
    /// A one-line summary.
    pub fn line(&self) -> String {
        if self.met {
            format!("profile {} ({}): met", self.profile, self.name)
        } else {
            format!("profile {} ({}): not met, missing {}", self.profile, self.name, self.missing.join(", "))
        }
    }
}

/// Evaluates every profile against the requirement results.
pub fn evaluate(results: &[RequirementResult]) -> Vec<ProfileResult> {
    PROFILES
        .iter()
        .map(|p| {
            let missing: Vec<String> = p
                .requirements()
                .filter_map(|id| match results.iter().find(|r| r.id == id) {
                    Some(r) if r.status == Status::Pass => None,
                    Some(r) => Some(format!("{id} ({})", r.status.as_str())),
                    None => Some(format!("{id} (not run at this --level)")),
                })
                .collect();
            ProfileResult { profile: p.id.into(), name: p.name.into(), met: missing.is_empty(), missing }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_cumulative_and_use_catalogue_ids_once() {
        let all: Vec<&str> = PROFILES.iter().flat_map(|p| p.adds.iter().copied()).collect();
        for (i, id) in all.iter().enumerate() {
            assert!(crate::catalogue::requirement(id).is_some(), "{id}");
            assert!(!all[..i].contains(id), "{id} is listed by two profiles");
        }
        for w in PROFILES.windows(2) {
            let (smaller, larger): (Vec<_>, Vec<_>) = (w[0].requirements().collect(), w[1].requirements().collect());
            assert_eq!(larger[..smaller.len()], smaller[..], "{} extends {}", w[1].id, w[0].id);
            assert_eq!(larger.len(), smaller.len() + w[1].adds.len());
        }
    }
}
