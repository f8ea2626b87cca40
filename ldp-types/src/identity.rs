//! Identity (RFC section 2 and 7): delegate ids, identity cards, capabilities with claimed-vs-attested quality,
//! trust domains and the AgentCard label mapping of RFC 9.1.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::payload::PayloadMode;
use crate::score::Score;
use crate::{Code, Error, LdpError};

/// A delegate identifier of the form `ldp:delegate:<name>`.
///
/// The name is non-empty and free of whitespace and control characters. Parsing rejects anything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DelegateId(String);

impl DelegateId {
    /// The required prefix.
    pub const PREFIX: &'static str = "ldp:delegate:";

    /// Validates a full id such as `ldp:delegate:qwen3-8b`.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        let valid = id
            .strip_prefix(Self::PREFIX)
            .is_some_and(|name| !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control()));
        if valid { Ok(Self(id)) } else { Err(Error::InvalidDelegateId(id)) }
    }

    /// Builds `ldp:delegate:<name>` from a bare name.
    pub fn from_name(name: &str) -> Result<Self, Error> {
        Self::new(format!("{}{name}", Self::PREFIX))
    }

    /// The full id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part after `ldp:delegate:`.
    pub fn name(&self) -> &str {
        &self.0[Self::PREFIX.len()..]
    }
}

impl fmt::Display for DelegateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for DelegateId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::new(s)
    }
}

impl AsRef<str> for DelegateId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for DelegateId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DelegateId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DelegateId::new(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// A named security boundary (RFC 7.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct TrustDomain {
    /// The domain name, e.g. `research.internal`.
    pub name: String,
    /// Whether sessions with initiators of other domains may be accepted (only from `trusted_peers`).
    pub allow_cross_domain: bool,
    /// Other domains trusted when `allow_cross_domain` is set.
    pub trusted_peers: Vec<String>,
}

impl Default for TrustDomain {
    /// The domain `default`, as the reference SDKs name it, with cross-domain sessions refused.
    fn default() -> Self {
        Self::new("default")
    }
}

impl TrustDomain {
    /// A domain that refuses cross-domain sessions.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), allow_cross_domain: false, trusted_peers: Vec::new() }
    }

    /// Allows sessions from initiators of `peer`.
    pub fn trusting(mut self, peer: impl Into<String>) -> Self {
        self.allow_cross_domain = true;
        self.trusted_peers.push(peer.into());
        self
    }

    /// The RFC 7.2 check, run by a responder in this domain before SESSION_ACCEPT.
    ///
    /// `initiator_domain` must come from an authenticated context when one exists; `required` is the proposal's
    /// `required_trust_domain`.
    pub fn check_session(&self, initiator_domain: &str, required: Option<&str>) -> Result<(), TrustViolation> {
        if let Some(required) = required
            && required != self.name
        {
            return Err(TrustViolation::RequiredDomainMismatch {
                required: required.to_owned(),
                actual: self.name.clone(),
            });
        }
        if initiator_domain == self.name {
            return Ok(());
        }
        if !self.allow_cross_domain {
            return Err(TrustViolation::CrossDomainRefused {
                initiator: initiator_domain.to_owned(),
                responder: self.name.clone(),
            });
        }
        if !self.trusted_peers.iter().any(|p| p == initiator_domain) {
            return Err(TrustViolation::PeerNotTrusted { initiator: initiator_domain.to_owned() });
        }
        Ok(())
    }
}

/// Accepts the RFC object (with `allow_cross_domain` and `trusted_peers` defaulting to false and empty, as Python
/// does) and a bare domain name string.
impl<'de> Deserialize<'de> for TrustDomain {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Full {
            name: String,
            #[serde(default)]
            allow_cross_domain: bool,
            #[serde(default, deserialize_with = "null_as_default")]
            trusted_peers: Vec<String>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Name(String),
            Full(Full),
        }
        match Repr::deserialize(deserializer)? {
            Repr::Name(name) => Ok(TrustDomain::new(name)),
            Repr::Full(f) => Ok(TrustDomain {
                name: f.name,
                allow_cross_domain: f.allow_cross_domain,
                trusted_peers: f.trusted_peers,
            }),
        }
    }
}

/// Why a session was refused by the RFC 7.2 trust check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrustViolation {
    /// The initiator required a domain other than the responder's.
    RequiredDomainMismatch {
        /// The domain the initiator required.
        required: String,
        /// The responder's domain.
        actual: String,
    },
    /// The domains differ and the responder refuses cross-domain sessions.
    CrossDomainRefused {
        /// The initiator's domain.
        initiator: String,
        /// The responder's domain.
        responder: String,
    },
    /// Cross-domain sessions are allowed but not from this domain.
    PeerNotTrusted {
        /// The initiator's domain.
        initiator: String,
    },
}

impl fmt::Display for TrustViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RequiredDomainMismatch { required, actual } => {
                write!(f, "required trust domain {required:?} but responder is in {actual:?}")
            }
            Self::CrossDomainRefused { initiator, responder } => {
                write!(f, "domain {responder:?} refuses cross-domain sessions from {initiator:?}")
            }
            Self::PeerNotTrusted { initiator } => write!(f, "domain {initiator:?} is not a trusted peer"),
        }
    }
}

impl From<&TrustViolation> for LdpError {
    fn from(v: &TrustViolation) -> Self {
        LdpError::policy(Code::TrustViolation, v.to_string())
    }
}

/// How a quality claim was established (paper section 3.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClaimType {
    /// Reported by the delegate itself.
    #[default]
    SelfClaimed,
    /// Measured by the LDP runtime from real invocations.
    RuntimeObserved,
    /// Verified by a trusted third-party issuer.
    IssuerAttested,
    /// Validated by an external benchmarking service.
    ExternallyBenchmarked,
}

impl ClaimType {
    /// All claim types, weakest first.
    pub const ALL: [ClaimType; 4] =
        [Self::SelfClaimed, Self::RuntimeObserved, Self::IssuerAttested, Self::ExternallyBenchmarked];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SelfClaimed => "self_claimed",
            Self::RuntimeObserved => "runtime_observed",
            Self::IssuerAttested => "issuer_attested",
            Self::ExternallyBenchmarked => "externally_benchmarked",
        }
    }

    /// Whether someone other than the delegate stands behind the claim; such claims need issuer and recency
    /// metadata, or a delegate could simply label its own boast `issuer_attested`.
    pub const fn is_attested(self) -> bool {
        !matches!(self, Self::SelfClaimed)
    }
}

impl fmt::Display for ClaimType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ClaimType {
    type Err = Error;

    /// The claim type with this wire name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| Error::UnknownClaimType(s.to_owned()))
    }
}

/// Quality, latency and cost of one capability, in the reference SDKs' shape, with the claim's provenance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QualityMetrics {
    /// Quality score in 0.0-1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_score: Option<Score>,
    /// Median latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p50_ms: Option<u64>,
    /// 99th-percentile latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_ms: Option<u64>,
    /// Approximate cost per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_call_usd: Option<f64>,
    /// Maximum tokens per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Whether streaming responses are supported. Always sent: the Rust reference SDK requires it.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<bool>")]
    pub supports_streaming: bool,
    /// How the claim was established.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<ClaimType>")]
    pub claim_type: ClaimType,
    /// Who attested the claim (for `issuer_attested` / `externally_benchmarked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_id: Option<String>,
    /// When the claim was attested (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attested_at: Option<String>,
    /// When the claim stops being valid (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Where the evidence for the claim can be found (a URI or report id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_ref: Option<String>,
}

/// Cost tier of the RFC's capability shape and of `cost_profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CostTier {
    /// Cheap.
    Low,
    /// Moderate.
    Medium,
    /// Expensive.
    High,
}

/// One capability (skill) of a delegate.
///
/// Both wire shapes are accepted into this one model: the RFC's (`quality_hint`, `latency_hint_ms_p50`,
/// `cost_hint`) and the reference SDKs' (`description`, `input_schema`, `output_schema`, `domains`, `quality{...}`).
/// The accessors ([`Capability::quality_score`], ...) read whichever is present; [`Capability::new`] and the
/// builders fill both, so reference clients (which drop the RFC shape) and RFC clients both understand our cards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Capability {
    /// The skill name, e.g. `reasoning`.
    pub name: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// JSON Schema of the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Domains the capability applies to.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub domains: Vec<String>,
    /// Reference-SDK quality block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualityMetrics>,
    /// RFC 2.2 quality score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_hint: Option<Score>,
    /// RFC 2.2 median latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_hint_ms_p50: Option<u64>,
    /// RFC 2.2 cost tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_hint: Option<CostTier>,
    /// Fields neither shape defines, kept as received.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Capability {
    /// A capability with no quality metadata.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            input_schema: None,
            output_schema: None,
            domains: Vec::new(),
            quality: None,
            quality_hint: None,
            latency_hint_ms_p50: None,
            cost_hint: None,
            extra: BTreeMap::new(),
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets a quality score with its claim type, in both wire shapes.
    pub fn with_quality(mut self, score: Score, claim_type: ClaimType) -> Self {
        self.quality_hint = Some(score);
        let q = self.quality.get_or_insert_with(QualityMetrics::default);
        q.quality_score = Some(score);
        q.claim_type = claim_type;
        self
    }

    /// Sets the median latency, in both wire shapes.
    pub fn with_latency_p50_ms(mut self, ms: u64) -> Self {
        self.latency_hint_ms_p50 = Some(ms);
        self.quality.get_or_insert_with(QualityMetrics::default).latency_p50_ms = Some(ms);
        self
    }

    /// Sets the cost per call (reference shape) and the tier (RFC shape).
    pub fn with_cost(mut self, usd_per_call: f64, tier: CostTier) -> Self {
        self.cost_hint = Some(tier);
        self.quality.get_or_insert_with(QualityMetrics::default).cost_per_call_usd = Some(usd_per_call);
        self
    }

    /// The quality score from either shape (the reference block wins when both are present).
    pub fn quality_score(&self) -> Option<Score> {
        self.quality.as_ref().and_then(|q| q.quality_score).or(self.quality_hint)
    }

    /// The median latency from either shape.
    pub fn latency_p50_ms(&self) -> Option<u64> {
        self.quality.as_ref().and_then(|q| q.latency_p50_ms).or(self.latency_hint_ms_p50)
    }

    /// The claim type (`self_claimed` when no quality block says otherwise: RFC-shape hints are self-reported).
    pub fn claim_type(&self) -> ClaimType {
        self.quality.as_ref().map(|q| q.claim_type).unwrap_or_default()
    }

    /// The cost per call in USD, when given.
    pub fn cost_per_call_usd(&self) -> Option<f64> {
        self.quality.as_ref().and_then(|q| q.cost_per_call_usd)
    }
}

/// A delegate's identity card (RFC 2.1), served at `/.well-known/ldp-identity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IdentityCard {
    /// `ldp:delegate:<name>`.
    pub delegate_id: DelegateId,
    /// Human-readable name.
    pub name: String,
    /// Purpose description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Model family, e.g. `qwen`.
    pub model_family: String,
    /// Model version.
    pub model_version: String,
    /// SHA-256 of the model weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_fingerprint: Option<String>,
    /// The delegate's trust domain.
    pub trust_domain: TrustDomain,
    /// Context window in tokens.
    pub context_window: u64,
    /// Qualitative reasoning descriptor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_profile: Option<String>,
    /// Cost tier: `low`, `medium`, `high` (kept as a string: other values are seen in the wild).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_profile: Option<String>,
    /// Latency characteristics, e.g. `p50:2000ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_profile: Option<String>,
    /// Jurisdictional constraints, e.g. `eu-west`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jurisdiction: Option<String>,
    /// Capabilities with quality and cost metadata.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<Vec<Capability>>")]
    pub capabilities: Vec<Capability>,
    /// Supported payload modes, most preferred first.
    pub supported_payload_modes: Vec<PayloadMode>,
    /// The delegate's URL (defaults to empty when a peer omits it, as the Python SDK allows).
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<String>")]
    pub endpoint: String,
    /// Additional metadata.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub metadata: BTreeMap<String, String>,
    /// Fields the RFC does not define, kept as received.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl IdentityCard {
    /// A minimal card: one text-capable delegate with no capabilities.
    pub fn new(
        delegate_id: DelegateId,
        name: impl Into<String>,
        model_family: impl Into<String>,
        model_version: impl Into<String>,
    ) -> Self {
        Self {
            delegate_id,
            name: name.into(),
            description: None,
            model_family: model_family.into(),
            model_version: model_version.into(),
            weights_fingerprint: None,
            trust_domain: TrustDomain::default(),
            context_window: 0,
            reasoning_profile: None,
            cost_profile: None,
            latency_profile: None,
            jurisdiction: None,
            capabilities: Vec::new(),
            supported_payload_modes: vec![PayloadMode::Text],
            endpoint: String::new(),
            metadata: BTreeMap::new(),
            extra: BTreeMap::new(),
        }
    }

    /// Parses a card from JSON (e.g. a peer's `/ldp/identity`), refusing what no `serde_json::Value` can hold and
    /// repeated member names anywhere ([`Error::DuplicateMember`]), as envelopes are refused.
    pub fn from_json(json: &str) -> Result<Self, Error> {
        crate::check::check(json)?;
        serde_json::from_str(json).map_err(Error::from_decode)
    }

    /// The capability named `skill`, if declared.
    pub fn capability(&self, skill: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.name == skill)
    }

    /// The RFC 9.1 AgentCard labels of this card.
    pub fn to_labels(&self) -> BTreeMap<String, String> {
        AgentCardLabels::from(self).to_map()
    }
}

/// The LDP fields of an AgentCard, as RFC 9.1 stores them in `ldp.`-prefixed labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCardLabels {
    /// `ldp.delegate_id`.
    pub delegate_id: DelegateId,
    /// `ldp.model_family`.
    pub model_family: String,
    /// `ldp.model_version`.
    pub model_version: String,
    /// `ldp.trust_domain` (the domain name).
    pub trust_domain: String,
    /// `ldp.context_window`.
    pub context_window: u64,
    /// `ldp.weights_fingerprint`.
    pub weights_fingerprint: Option<String>,
    /// `ldp.reasoning_profile`.
    pub reasoning_profile: Option<String>,
    /// `ldp.cost_profile`.
    pub cost_profile: Option<String>,
    /// `ldp.latency_profile`.
    pub latency_profile: Option<String>,
    /// `ldp.jurisdiction`.
    pub jurisdiction: Option<String>,
    /// `ldp.payload_modes`, comma-separated on the wire.
    pub payload_modes: Vec<PayloadMode>,
}

impl From<&IdentityCard> for AgentCardLabels {
    fn from(card: &IdentityCard) -> Self {
        Self {
            delegate_id: card.delegate_id.clone(),
            model_family: card.model_family.clone(),
            model_version: card.model_version.clone(),
            trust_domain: card.trust_domain.name.clone(),
            context_window: card.context_window,
            weights_fingerprint: card.weights_fingerprint.clone(),
            reasoning_profile: card.reasoning_profile.clone(),
            cost_profile: card.cost_profile.clone(),
            latency_profile: card.latency_profile.clone(),
            jurisdiction: card.jurisdiction.clone(),
            payload_modes: card.supported_payload_modes.clone(),
        }
    }
}

impl AgentCardLabels {
    /// The label map, keys prefixed `ldp.`.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("ldp.delegate_id".into(), self.delegate_id.to_string());
        m.insert("ldp.model_family".into(), self.model_family.clone());
        m.insert("ldp.model_version".into(), self.model_version.clone());
        m.insert("ldp.trust_domain".into(), self.trust_domain.clone());
        m.insert("ldp.context_window".into(), self.context_window.to_string());
        let optional = [
            ("ldp.weights_fingerprint", &self.weights_fingerprint),
            ("ldp.reasoning_profile", &self.reasoning_profile),
            ("ldp.cost_profile", &self.cost_profile),
            ("ldp.latency_profile", &self.latency_profile),
            ("ldp.jurisdiction", &self.jurisdiction),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                m.insert(key.into(), v.clone());
            }
        }
        let modes: Vec<&str> = self.payload_modes.iter().map(|p| p.as_str()).collect();
        m.insert("ldp.payload_modes".into(), modes.join(","));
        m
    }

    /// Reads the labels back. Labels without the `ldp.` prefix are ignored; required ones must be present.
    pub fn from_map(labels: &BTreeMap<String, String>) -> Result<Self, Error> {
        let required = |key: &'static str| {
            labels.get(key).cloned().ok_or_else(|| Error::InvalidMessage(serde::de::Error::missing_field(key)))
        };
        let context_window = required("ldp.context_window")?;
        let context_window = context_window.trim().parse::<u64>().map_err(|_| {
            Error::InvalidMessage(serde::de::Error::custom(format!(
                "ldp.context_window {context_window:?} is not a number"
            )))
        })?;
        let payload_modes = match labels.get("ldp.payload_modes") {
            Some(s) if !s.trim().is_empty() => s.split(',').map(|m| m.trim().parse()).collect::<Result<Vec<_>, _>>()?,
            _ => vec![PayloadMode::Text],
        };
        Ok(Self {
            delegate_id: DelegateId::new(required("ldp.delegate_id")?)?,
            model_family: required("ldp.model_family")?,
            model_version: required("ldp.model_version")?,
            trust_domain: required("ldp.trust_domain")?,
            context_window,
            weights_fingerprint: labels.get("ldp.weights_fingerprint").cloned(),
            reasoning_profile: labels.get("ldp.reasoning_profile").cloned(),
            cost_profile: labels.get("ldp.cost_profile").cloned(),
            latency_profile: labels.get("ldp.latency_profile").cloned(),
            jurisdiction: labels.get("ldp.jurisdiction").cloned(),
            payload_modes,
        })
    }

    /// Builds an identity card from the labels plus the AgentCard's own name and URL. Capabilities are not part of
    /// the label mapping and start empty.
    pub fn into_card(self, name: impl Into<String>, endpoint: impl Into<String>) -> IdentityCard {
        let mut card = IdentityCard::new(self.delegate_id, name, self.model_family, self.model_version);
        card.trust_domain = TrustDomain::new(self.trust_domain);
        card.context_window = self.context_window;
        card.weights_fingerprint = self.weights_fingerprint;
        card.reasoning_profile = self.reasoning_profile;
        card.cost_profile = self.cost_profile;
        card.latency_profile = self.latency_profile;
        card.jurisdiction = self.jurisdiction;
        card.supported_payload_modes = self.payload_modes;
        card.endpoint = endpoint.into();
        card
    }
}

/// A struct read from a JSON object only. serde's derived decoders also accept a struct's fields as an array, a form
/// no LDP peer sends and the JSON Schemas do not allow; where a message nests one of this crate's structs, the
/// decoder goes through this so that it accepts exactly what the schema does.
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData)).map(Object)
    }
}

/// `null`, absent or an object (see [`Object`]).
pub(crate) fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Object<T>>::deserialize(deserializer)?.map(|o| o.0))
}

/// `null` or absent (the default), or an object (see [`Object`]).
pub(crate) fn object_or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(optional_object(deserializer)?.unwrap_or_default())
}

/// `null` or absent (empty), or a list of objects (see [`Object`]).
pub(crate) fn objects_or_default<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<Object<T>>>::deserialize(deserializer)?
        .map_or_else(Vec::new, |v| v.into_iter().map(|o| o.0).collect()))
}

/// Treats an explicit `null` like an absent field, as Python peers write `null` for every unset field.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegate_id_format() {
        assert!(DelegateId::new("ldp:delegate:qwen3-8b").is_ok());
        for bad in ["qwen", "ldp:delegate:", "ldp:delegate:a b", "LDP:delegate:x", "ldp:agent:x", "ldp:delegate:\n"] {
            assert!(DelegateId::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(DelegateId::from_name("alpha").unwrap().name(), "alpha");
    }

    #[test]
    fn trust_check_follows_rfc_7_2() {
        let d = TrustDomain::new("research.internal");
        assert!(d.check_session("research.internal", Some("research.internal")).is_ok());
        assert!(matches!(
            d.check_session("research.internal", Some("other")),
            Err(TrustViolation::RequiredDomainMismatch { .. })
        ));
        assert!(matches!(d.check_session("other", None), Err(TrustViolation::CrossDomainRefused { .. })));
        let open = TrustDomain::new("a").trusting("b");
        assert!(open.check_session("b", None).is_ok());
        assert!(matches!(open.check_session("c", None), Err(TrustViolation::PeerNotTrusted { .. })));
    }

    #[test]
    fn both_capability_shapes_read_the_same() {
        let rfc: Capability = serde_json::from_str(
            r#"{"name":"reasoning","quality_hint":0.85,"latency_hint_ms_p50":5000,"cost_hint":"medium"}"#,
        )
        .unwrap();
        let sdk: Capability = serde_json::from_str(
            r#"{"name":"reasoning","description":null,"quality":{"quality_score":0.85,"latency_p50_ms":5000,"supports_streaming":false,"claim_type":"issuer_attested"}}"#,
        )
        .unwrap();
        assert_eq!(rfc.quality_score().map(Score::get), Some(0.85));
        assert_eq!(sdk.quality_score().map(Score::get), Some(0.85));
        assert_eq!(rfc.latency_p50_ms(), sdk.latency_p50_ms());
        assert_eq!(rfc.claim_type(), ClaimType::SelfClaimed);
        assert_eq!(sdk.claim_type(), ClaimType::IssuerAttested);
        assert!(serde_json::from_str::<Capability>(r#"{"name":"x","quality_hint":1.5}"#).is_err());
    }

    #[test]
    fn labels_round_trip() {
        let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:q").unwrap(), "Q", "qwen", "3");
        card.context_window = 32768;
        card.jurisdiction = Some("eu-west".into());
        card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
        card.trust_domain = TrustDomain::new("research.internal");
        let map = card.to_labels();
        assert_eq!(map["ldp.payload_modes"], "semantic_frame,text");
        let back = AgentCardLabels::from_map(&map).unwrap();
        assert_eq!(back, AgentCardLabels::from(&card));
        let rebuilt = back.into_card("Q", "");
        assert_eq!(rebuilt.to_labels(), map);
    }
}
