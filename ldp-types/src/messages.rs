//! The twelve LDP message bodies (RFC 3.2-3.3) and their building blocks.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::contract::DelegationContract;
use crate::error::LdpError;
use crate::identity::{Capability, null_as_default, optional_object};
use crate::payload::PayloadMode;
use crate::provenance::Provenance;
use crate::raw::RawJson;

/// Calls `$then!` with the twelve message types of RFC 3.2 as `Variant => "WIRE_NAME"` pairs, in the RFC's table
/// order: the one list that [`MessageType`] and [`Body`](crate::Body) (its variants, conversions and encoder) are
/// generated from, so a wire name is written once.
macro_rules! message_types {
    ($then:ident) => {
        $then! {
            Hello => "HELLO",
            CapabilityManifest => "CAPABILITY_MANIFEST",
            SessionPropose => "SESSION_PROPOSE",
            SessionAccept => "SESSION_ACCEPT",
            SessionReject => "SESSION_REJECT",
            TaskSubmit => "TASK_SUBMIT",
            TaskUpdate => "TASK_UPDATE",
            TaskResult => "TASK_RESULT",
            TaskFailed => "TASK_FAILED",
            TaskCancel => "TASK_CANCEL",
            Attestation => "ATTESTATION",
            SessionClose => "SESSION_CLOSE",
        }
    };
}
pub(crate) use message_types;

macro_rules! declare_message_type {
    ($($variant:ident => $wire:literal,)*) => {
        /// The wire names of the twelve message types.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(
            clippy::exhaustive_enums,
            reason = "the twelve message types of RFC 3.2; Body::Unknown carries any other"
        )]
        pub enum MessageType {
            $(#[doc = concat!("`", $wire, "`")] $variant,)*
        }

        impl MessageType {
            /// All twelve types in RFC table order.
            pub const ALL: [MessageType; 12] = [$(Self::$variant),*];

            /// The wire name, e.g. `TASK_SUBMIT`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)*
                }
            }
        }
    };
}
message_types!(declare_message_type);

impl MessageType {
    /// Whether this type ends a task: the final answer to a TASK_SUBMIT (TASK_RESULT or TASK_FAILED).
    pub const fn ends_task(self) -> bool {
        matches!(self, Self::TaskResult | Self::TaskFailed)
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MessageType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or(())
    }
}

/// `HELLO`: the initiator's handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The initiator's delegate id.
    pub delegate_id: String,
    /// Modes the initiator supports, most preferred first.
    #[serde(default, deserialize_with = "null_as_default")]
    pub supported_modes: Vec<PayloadMode>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `CAPABILITY_MANIFEST`: the responder's declaration.
///
/// `capabilities` is kept exactly as received because implementations send different shapes (an object in the RFC
/// transcript and the Rust SDK, a list in the Python SDK); [`Manifest::from_value`] reads any of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityManifest {
    /// The manifest, in whatever shape the sender used.
    pub capabilities: Value,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A typed reading of a capability manifest.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    /// Skill names.
    pub skills: Vec<String>,
    /// Supported payload modes (empty when the sender did not say).
    pub supported_modes: Vec<PayloadMode>,
    /// The responder's concurrency limit.
    pub max_concurrent_tasks: Option<u32>,
    /// Full capability entries when the sender included them.
    pub capabilities: Vec<Capability>,
}

impl Manifest {
    /// Reads a manifest in any of the known shapes: `{skills, supported_modes, max_concurrent_tasks,
    /// capabilities}` (any subset) or a bare list of capabilities. Entries that do not parse are skipped.
    pub fn from_value(v: &Value) -> Self {
        let mut m = Manifest::default();
        let read_caps = |list: &Vec<Value>| -> Vec<Capability> {
            list.iter().filter_map(|c| serde_json::from_value::<Capability>(c.clone()).ok()).collect()
        };
        match v {
            Value::Array(list) => m.capabilities = read_caps(list),
            Value::Object(obj) => {
                if let Some(Value::Array(list)) = obj.get("capabilities") {
                    m.capabilities = read_caps(list);
                }
                if let Some(Value::Array(skills)) = obj.get("skills") {
                    m.skills = skills.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect();
                }
                if let Some(Value::Array(modes)) = obj.get("supported_modes") {
                    m.supported_modes = modes.iter().filter_map(|s| s.as_str()?.parse().ok()).collect();
                }
                m.max_concurrent_tasks =
                    obj.get("max_concurrent_tasks").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
            }
            _ => {}
        }
        for c in &m.capabilities {
            if !m.skills.contains(&c.name) {
                m.skills.push(c.name.clone());
            }
        }
        m
    }

    /// The object shape: the RFC transcript's `skills`, `supported_modes`, `max_concurrent_tasks`, plus full
    /// `capabilities` entries.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("skills".into(), Value::from(self.skills.clone()));
        obj.insert(
            "supported_modes".into(),
            Value::Array(self.supported_modes.iter().map(|m| Value::from(m.as_str())).collect()),
        );
        if let Some(n) = self.max_concurrent_tasks {
            obj.insert("max_concurrent_tasks".into(), Value::from(n));
        }
        if !self.capabilities.is_empty() {
            obj.insert("capabilities".into(), serde_json::to_value(&self.capabilities).unwrap_or(Value::Null));
        }
        Value::Object(obj)
    }
}

/// `SESSION_PROPOSE` configuration (RFC 5.4), accepting the reference SDKs' variants.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SessionConfig {
    /// Mode preference list (RFC, Python SDK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_payload_modes: Option<Vec<PayloadMode>>,
    /// A single preferred mode (Rust SDK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_mode: Option<PayloadMode>,
    /// Inactivity timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// The domain the responder must belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_trust_domain: Option<String>,
    /// The initiator's self-declared domain (reference SDKs; not in the RFC, not authenticated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionConfig {
    /// The RFC default TTL.
    pub const DEFAULT_TTL_SECS: u64 = 3600;

    /// The mode preference list: `preferred_payload_modes`, else the single `payload_mode`, else the RFC default
    /// `[semantic_frame, text]`.
    pub fn preferences(&self) -> Vec<PayloadMode> {
        match (&self.preferred_payload_modes, self.payload_mode) {
            (Some(p), _) if !p.is_empty() => p.clone(),
            (_, Some(m)) => vec![m],
            _ => vec![PayloadMode::SemanticFrame, PayloadMode::Text],
        }
    }

    /// The TTL, defaulting to 3600 s.
    pub fn ttl_secs(&self) -> u64 {
        self.ttl_secs.unwrap_or(Self::DEFAULT_TTL_SECS)
    }
}

/// `SESSION_PROPOSE`: the initiator proposes a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionPropose {
    /// The proposed configuration.
    #[serde(default, deserialize_with = "null_as_default")]
    pub config: SessionConfig,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `SESSION_ACCEPT`: the responder accepts; its `session_id` is authoritative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionAccept {
    /// The session id both sides use from now on.
    pub session_id: String,
    /// The negotiated payload mode.
    pub negotiated_mode: PayloadMode,
    /// Modes to fall back through, richest first (RFC 4.2 step 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_chain: Option<Vec<PayloadMode>>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `SESSION_REJECT`: the responder refuses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionReject {
    /// Why.
    pub reason: String,
    /// The typed failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<LdpError>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `TASK_SUBMIT`: a task within a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSubmit {
    /// Task id, unique within the session.
    pub task_id: String,
    /// The declared skill to run.
    pub skill: String,
    /// The input, in the envelope's payload mode, kept as received ([`RawJson::parse`] reads it).
    #[serde(default)]
    pub input: RawJson,
    /// The delegation contract (boxed: most tasks have none, and every move of a message would copy it).
    #[serde(default, deserialize_with = "optional_object", skip_serializing_if = "Option::is_none")]
    pub contract: Option<Box<DelegationContract>>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `TASK_UPDATE`: progress of a running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskUpdate {
    /// The task.
    pub task_id: String,
    /// Progress in 0.0-1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// A status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A chunk of the task's output produced so far (an extension member, named like `LdpError`'s
    /// `partial_output`; docs/interop.md): text or JSON in the task's payload mode, kept as sent. Each update carries
    /// the next chunk, not the output so far. Absent (or `null`, read as absent) in plain progress updates, so peers
    /// that do not know it ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_output: Option<RawJson>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `TASK_RESULT`: a completed task with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// The task.
    pub task_id: String,
    /// The output, kept as produced ([`RawJson::parse`] reads it).
    #[serde(default)]
    pub output: RawJson,
    /// Who produced it and how (RFC 6.1: required). Shared: a responder's result carries the same record in its
    /// body, its envelope and its session's context, and every move of a message stays small.
    pub provenance: Arc<Provenance>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `TASK_FAILED`: a task ended in a typed failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFailed {
    /// The task.
    pub task_id: String,
    /// The failure (a bare string from an untyped peer is accepted as a `runtime` error).
    pub error: LdpError,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `TASK_CANCEL`: the initiator cancels a running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCancel {
    /// The task.
    pub task_id: String,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `ATTESTATION`: a trust signal from either side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attestation {
    /// What is attested.
    #[serde(default)]
    pub claim: Value,
    /// Supporting evidence.
    #[serde(default)]
    pub evidence: Value,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `SESSION_CLOSE`: either side ends the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionClose {
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fields this implementation does not define, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A body whose `type` is not one of the twelve. It parses (so a receiver can answer with a typed
/// `UNKNOWN_MESSAGE_TYPE` error) and re-serialises as received.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownBody {
    /// The `type` as sent (empty when the body had none).
    pub type_name: String,
    /// Every other member.
    pub fields: Map<String, Value>,
}

macro_rules! extra_constructors {
    ($($ty:ident { $($field:ident : $fty:ty),* }),* $(,)?) => {
        $(impl $ty {
            /// Builds the body with no extra fields.
            pub fn new($($field: $fty),*) -> Self {
                Self { $($field,)* extra: Map::new() }
            }
        })*
    };
}

extra_constructors! {
    Hello { delegate_id: String, supported_modes: Vec<PayloadMode> },
    CapabilityManifest { capabilities: Value },
    SessionPropose { config: SessionConfig },
    SessionAccept { session_id: String, negotiated_mode: PayloadMode, fallback_chain: Option<Vec<PayloadMode>> },
    SessionReject { reason: String, error: Option<LdpError> },
    TaskFailed { task_id: String, error: LdpError },
    TaskCancel { task_id: String },
    Attestation { claim: Value, evidence: Value },
    SessionClose { reason: Option<String> },
}

impl TaskSubmit {
    /// Builds the body with no extra fields; `input` may be a `serde_json::Value`, a [`RawJson`] or a `&str` (a
    /// text-mode payload).
    pub fn new(
        task_id: String,
        skill: String,
        input: impl Into<RawJson>,
        contract: Option<DelegationContract>,
    ) -> Self {
        Self { task_id, skill, input: input.into(), contract: contract.map(Box::new), extra: Map::new() }
    }
}

impl TaskUpdate {
    /// Builds the body with no partial output and no extra fields.
    pub fn new(task_id: String, progress: Option<f64>, message: Option<String>) -> Self {
        Self { task_id, progress, message, partial_output: None, extra: Map::new() }
    }

    /// The same update carrying a chunk of partial output; `chunk` may be a `serde_json::Value`, a [`RawJson`] or a
    /// `&str`.
    #[must_use]
    pub fn with_partial_output(mut self, chunk: impl Into<RawJson>) -> Self {
        self.partial_output = Some(chunk.into());
        self
    }
}

impl TaskResult {
    /// Builds the body with no extra fields; `output` may be a `serde_json::Value`, a [`RawJson`] or a `&str`, and
    /// `provenance` a [`Provenance`] or one already shared (`Arc<Provenance>`).
    pub fn new(task_id: String, output: impl Into<RawJson>, provenance: impl Into<Arc<Provenance>>) -> Self {
        Self { task_id, output: output.into(), provenance: provenance.into(), extra: Map::new() }
    }
}
