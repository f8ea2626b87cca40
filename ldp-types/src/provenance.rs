//! Provenance (RFC section 6 plus the paper's section 3.4): who produced a result, how it was verified, and which
//! delegates handled it on the way.

use crate::receipt::UsageReceipt;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::identity::{Object, null_as_default, objects_or_default};
use crate::payload::PayloadMode;
use crate::score::Score;

/// How a result was verified (paper 3.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum VerificationStatus {
    /// Not verified.
    #[default]
    Unverified,
    /// Checked by the producing delegate itself.
    SelfVerified,
    /// Checked by another delegate.
    PeerVerified,
    /// Checked by a tool (tests, a validator).
    ToolVerified,
    /// Checked by a person.
    HumanVerified,
}

impl VerificationStatus {
    /// Every status, weakest first.
    pub const ALL: [VerificationStatus; 5] =
        [Self::Unverified, Self::SelfVerified, Self::PeerVerified, Self::ToolVerified, Self::HumanVerified];

    /// The status with this wire name.
    pub fn from_wire_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The wire name, e.g. `peer_verified`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unverified => "unverified",
            Self::SelfVerified => "self_verified",
            Self::PeerVerified => "peer_verified",
            Self::ToolVerified => "tool_verified",
            Self::HumanVerified => "human_verified",
        }
    }
}

impl std::fmt::Display for VerificationStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reference to evidence supporting a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceRef {
    /// What produced the evidence, e.g. `pytest`.
    pub source: String,
    /// The kind of evidence, e.g. `test_results`.
    pub kind: String,
    /// Where to find it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// A short summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// One hop of a delegation chain.
///
/// The RFC's entry is `delegate_id`, `model_version`, `step`, `timestamp` and `verification_status`. The facts a
/// delegating delegate knows of each hop follow as optional members (an extension, docs/interop.md): the skill it
/// ran, the confidence, tokens and cost the hop reported, and the time it took as the delegating side measured it.
/// Each is omitted when unknown, and both reference SDKs ignore them (their entries have no such members and reject
/// no unknown ones), so an entry with them still parses there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct LineageEntry {
    /// The delegate that handled the hop.
    pub delegate_id: String,
    /// Its model version.
    pub model_version: String,
    /// What it did, e.g. `reasoning` or `delegated`.
    pub step: String,
    /// When (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// How that hop's output was verified.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<VerificationStatus>")]
    pub verification_status: VerificationStatus,
    /// The skill the hop ran (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<String>,
    /// The confidence the hop reported in its result (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Score>,
    /// The tokens the hop reported (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,
    /// The cost in USD the hop reported (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Milliseconds from sending the hop's task to its result, as the delegating side measured them, failover
    /// included (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

impl LineageEntry {
    /// An entry for `delegate_id` running `model_version` that did `step`, unverified, with no other fact.
    pub fn new(delegate_id: impl Into<String>, model_version: impl Into<String>, step: impl Into<String>) -> Self {
        Self {
            delegate_id: delegate_id.into(),
            model_version: model_version.into(),
            step: step.into(),
            timestamp: None,
            verification_status: VerificationStatus::Unverified,
            skill: None,
            confidence: None,
            tokens_used: None,
            cost_usd: None,
            latency_ms: None,
        }
    }

    /// The entry for a hop whose result carried `provenance`: who produced it, with which model and when, how it
    /// was verified, and the confidence, tokens and cost it reported. The step is `step`; the skill and latency,
    /// which the result does not carry, are the caller's to add.
    pub fn of_result(provenance: &Provenance, step: impl Into<String>) -> Self {
        Self {
            timestamp: provenance.timestamp.clone(),
            verification_status: provenance.verification_status(),
            confidence: provenance.confidence,
            tokens_used: provenance.tokens_used,
            cost_usd: provenance.cost_usd,
            ..Self::new(provenance.produced_by.as_str(), provenance.model_version.as_str(), step)
        }
    }

    /// Sets the timestamp.
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = Some(timestamp.into());
        self
    }

    /// Sets the verification status.
    #[must_use]
    pub fn with_verification_status(mut self, status: VerificationStatus) -> Self {
        self.verification_status = status;
        self
    }

    /// Sets the skill the hop ran.
    #[must_use]
    pub fn with_skill(mut self, skill: impl Into<String>) -> Self {
        self.skill = Some(skill.into());
        self
    }

    /// Sets the hop's latency in milliseconds.
    #[must_use]
    pub fn with_latency_ms(mut self, latency_ms: u64) -> Self {
        self.latency_ms = Some(latency_ms);
        self
    }
}

/// The provenance record every TASK_RESULT carries.
///
/// `verification_status` is authoritative; the legacy `verified` bool is kept consistent with it
/// ([`Provenance::set_verification_status`]) and, when a peer sends only `verified: true`, reads as `self_verified`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    /// Delegate id that produced the result.
    pub produced_by: String,
    /// Model version used.
    pub model_version: String,
    /// Payload mode of the exchange.
    pub payload_mode_used: PayloadMode,
    /// Self-reported confidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Score>,
    /// Legacy flag: whether the result was independently verified.
    pub verified: bool,
    /// Session in which the result was produced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When it was produced (ISO 8601).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Granular verification status, absent when the sender predates the paper.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification_status: Option<VerificationStatus>,
    /// Evidence references.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<EvidenceRef>,
    /// Delegation lineage, newest hop first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<LineageEntry>,
    /// Tokens consumed (delegate-reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,
    /// Cost in USD (delegate-reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The contract the result was produced under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract_id: Option<String>,
    /// Whether the contract was satisfied (set by validation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract_satisfied: Option<bool>,
    /// Violation codes found by validation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contract_violations: Vec<String>,
    /// What the task consumed, signed by the delegate's identity key ([`crate::receipt`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_receipt: Option<Box<UsageReceipt>>,
}

impl Provenance {
    /// A minimal record.
    pub fn new(
        produced_by: impl Into<String>,
        model_version: impl Into<String>,
        payload_mode_used: PayloadMode,
    ) -> Self {
        Self {
            produced_by: produced_by.into(),
            model_version: model_version.into(),
            payload_mode_used,
            confidence: None,
            verified: false,
            session_id: None,
            timestamp: None,
            verification_status: None,
            evidence: Vec::new(),
            lineage: Vec::new(),
            tokens_used: None,
            cost_usd: None,
            contract_id: None,
            contract_satisfied: None,
            contract_violations: Vec::new(),
            usage_receipt: None,
        }
    }

    /// The verification status, derived from the legacy bool when the sender did not send one.
    pub fn verification_status(&self) -> VerificationStatus {
        match self.verification_status {
            Some(s) => s,
            None if self.verified => VerificationStatus::SelfVerified,
            None => VerificationStatus::Unverified,
        }
    }

    /// Sets the status and keeps `verified` consistent with it.
    pub fn set_verification_status(&mut self, status: VerificationStatus) {
        self.verification_status = Some(status);
        self.verified = status != VerificationStatus::Unverified;
    }

    /// Number of delegation hops recorded.
    pub fn delegation_depth(&self) -> usize {
        self.lineage.len()
    }
}

/// What the provenance decoder accepts (every optional member may be `null`); also its JSON Schema.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Provenance", description = "The provenance record of a result (RFC 6, paper 3.4).")]
pub(crate) struct ProvenanceWire {
    pub(crate) produced_by: String,
    pub(crate) model_version: String,
    pub(crate) payload_mode_used: PayloadMode,
    #[serde(default)]
    pub(crate) confidence: Option<Score>,
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<bool>")]
    pub(crate) verified: bool,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    #[serde(default)]
    pub(crate) timestamp: Option<String>,
    #[serde(default)]
    pub(crate) verification_status: Option<VerificationStatus>,
    #[serde(default, deserialize_with = "objects_or_default")]
    #[schemars(with = "Option<Vec<EvidenceRef>>")]
    pub(crate) evidence: Vec<EvidenceRef>,
    #[serde(default, deserialize_with = "objects_or_default")]
    #[schemars(with = "Option<Vec<LineageEntry>>")]
    pub(crate) lineage: Vec<LineageEntry>,
    #[serde(default)]
    pub(crate) tokens_used: Option<u64>,
    #[serde(default)]
    pub(crate) cost_usd: Option<f64>,
    #[serde(default)]
    pub(crate) contract_id: Option<String>,
    #[serde(default)]
    pub(crate) contract_satisfied: Option<bool>,
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<Vec<String>>")]
    pub(crate) contract_violations: Vec<String>,
    #[serde(default)]
    pub(crate) usage_receipt: Option<Box<UsageReceipt>>,
}

impl<'de> Deserialize<'de> for Provenance {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Object(w) = Object::<ProvenanceWire>::deserialize(deserializer)?;
        // A status other than unverified implies verified; keep the legacy flag consistent on the way in.
        let verified = match w.verification_status {
            Some(s) => s != VerificationStatus::Unverified,
            None => w.verified,
        };
        Ok(Provenance {
            produced_by: w.produced_by,
            model_version: w.model_version,
            payload_mode_used: w.payload_mode_used,
            confidence: w.confidence,
            verified,
            session_id: w.session_id,
            timestamp: w.timestamp,
            verification_status: w.verification_status,
            evidence: w.evidence,
            lineage: w.lineage,
            tokens_used: w.tokens_used,
            cost_usd: w.cost_usd,
            contract_id: w.contract_id,
            contract_satisfied: w.contract_satisfied,
            contract_violations: w.contract_violations,
            usage_receipt: w.usage_receipt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_verified_true_reads_as_self_verified() {
        let p: Provenance = serde_json::from_str(
            r#"{"produced_by":"d","model_version":"v","payload_mode_used":"text","verified":true}"#,
        )
        .unwrap();
        assert_eq!(p.verification_status(), VerificationStatus::SelfVerified);
    }

    #[test]
    fn status_keeps_verified_consistent() {
        let mut p = Provenance::new("d", "v", PayloadMode::Text);
        p.set_verification_status(VerificationStatus::PeerVerified);
        assert!(p.verified);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["verified"], true);
        assert_eq!(json["verification_status"], "peer_verified");
        p.set_verification_status(VerificationStatus::Unverified);
        assert!(!p.verified);
        let inconsistent: Provenance = serde_json::from_str(
            r#"{"produced_by":"d","model_version":"v","payload_mode_used":"text","verified":false,"verification_status":"tool_verified"}"#,
        )
        .unwrap();
        assert!(inconsistent.verified);
    }

    #[test]
    fn confidence_out_of_range_is_rejected() {
        let r = serde_json::from_str::<Provenance>(
            r#"{"produced_by":"d","model_version":"v","payload_mode_used":"text","verified":false,"confidence":1.2}"#,
        );
        assert!(r.is_err());
    }
}
