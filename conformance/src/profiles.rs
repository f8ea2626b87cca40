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
    /// The requirements that must all pass (including those of the profiles it extends).
    pub requirements: &'static [&'static str],
}

const A: &[&str] = &[
    "LDP-IDENT-001",
    "LDP-IDENT-002",
    "LDP-IDENT-003",
    "LDP-PAYLOAD-001",
    "LDP-SEC-001",
    "LDP-SEC-002",
    "LDP-SEC-003",
];
const B: &[&str] = &[
    "LDP-IDENT-001",
    "LDP-IDENT-002",
    "LDP-IDENT-003",
    "LDP-PAYLOAD-001",
    "LDP-SEC-001",
    "LDP-SEC-002",
    "LDP-SEC-003",
    "LDP-PROV-001",
    "LDP-PROV-004",
    "LDP-PROV-005",
    "LDP-TRUST-001",
    "LDP-TRUST-002",
    "LDP-POLICY-001",
    "LDP-ERR-001",
];
const C: &[&str] = &[
    "LDP-IDENT-001",
    "LDP-IDENT-002",
    "LDP-IDENT-003",
    "LDP-PAYLOAD-001",
    "LDP-SEC-001",
    "LDP-SEC-002",
    "LDP-SEC-003",
    "LDP-PROV-001",
    "LDP-PROV-004",
    "LDP-PROV-005",
    "LDP-TRUST-001",
    "LDP-TRUST-002",
    "LDP-POLICY-001",
    "LDP-ERR-001",
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
    Profile { id: "A", name: "Basic", features: "identity cards + text payloads + signed messages", requirements: A },
    Profile { id: "B", name: "Enterprise", features: "A + provenance tracking + policy enforcement", requirements: B },
    Profile {
        id: "C",
        name: "High-Performance",
        features: "B + payload negotiation + session management",
        requirements: C,
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
                .requirements
                .iter()
                .filter_map(|id| match results.iter().find(|r| r.id == *id) {
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
    fn profiles_are_cumulative_and_use_catalogue_ids() {
        for w in PROFILES.windows(2) {
            for id in w[0].requirements {
                assert!(w[1].requirements.contains(id), "{} lacks {id} of {}", w[1].id, w[0].id);
            }
        }
        for p in PROFILES {
            for id in p.requirements {
                assert!(crate::catalogue::requirement(id).is_some(), "{id}");
            }
        }
    }
}
