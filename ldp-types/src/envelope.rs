//! The envelope (RFC 3.1) and the body enum. `Envelope::from_json` tries the scanner of `scan` first; the serde
//! decoder below is the reference it falls back to (and what `Deserialize` runs).
//!
//! Serde's internally tagged enums buffer the whole body before dispatching on `type`. The decoder here instead reads
//! each member straight into a typed slot of the union of all body fields, then assembles the variant once `type` is
//! known, wherever it appears. That is one pass with no intermediate tree, and it tolerates Python peers that write
//! every field of every body type as `null`.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::contract::{DelegationContract, FailurePolicy};
use crate::error::{Error, LdpError};
use crate::identity::Object;
use crate::json::{Compact, Error as JsonError, Writer, write_str};
use crate::messages::*;
use crate::payload::PayloadMode;
use crate::provenance::Provenance;
use crate::raw::RawJson;

mod scan;

/// A message body: one of the twelve types, or an explicit unknown.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::exhaustive_enums,
    reason = "the twelve message types of RFC 3.2, and Unknown for any other: a type this version does not know already parses as Unknown, and a machine that dispatches on Body must be made to handle a new type"
)]
pub enum Body {
    /// `HELLO`
    Hello(Hello),
    /// `CAPABILITY_MANIFEST`
    CapabilityManifest(CapabilityManifest),
    /// `SESSION_PROPOSE`
    SessionPropose(SessionPropose),
    /// `SESSION_ACCEPT`
    SessionAccept(SessionAccept),
    /// `SESSION_REJECT`
    SessionReject(SessionReject),
    /// `TASK_SUBMIT`
    TaskSubmit(TaskSubmit),
    /// `TASK_UPDATE`
    TaskUpdate(TaskUpdate),
    /// `TASK_RESULT`
    TaskResult(TaskResult),
    /// `TASK_FAILED`
    TaskFailed(TaskFailed),
    /// `TASK_CANCEL`
    TaskCancel(TaskCancel),
    /// `ATTESTATION`
    Attestation(Attestation),
    /// `SESSION_CLOSE`
    SessionClose(SessionClose),
    /// Any other `type`.
    Unknown(UnknownBody),
}

impl Body {
    /// The message type, or `None` for an unknown body.
    pub fn message_type(&self) -> Option<MessageType> {
        Some(match self {
            Self::Hello(_) => MessageType::Hello,
            Self::CapabilityManifest(_) => MessageType::CapabilityManifest,
            Self::SessionPropose(_) => MessageType::SessionPropose,
            Self::SessionAccept(_) => MessageType::SessionAccept,
            Self::SessionReject(_) => MessageType::SessionReject,
            Self::TaskSubmit(_) => MessageType::TaskSubmit,
            Self::TaskUpdate(_) => MessageType::TaskUpdate,
            Self::TaskResult(_) => MessageType::TaskResult,
            Self::TaskFailed(_) => MessageType::TaskFailed,
            Self::TaskCancel(_) => MessageType::TaskCancel,
            Self::Attestation(_) => MessageType::Attestation,
            Self::SessionClose(_) => MessageType::SessionClose,
            Self::Unknown(_) => return None,
        })
    }

    /// The `type` wire name as it appears (or appeared) on the wire.
    pub fn type_name(&self) -> &str {
        match self {
            Self::Unknown(u) => &u.type_name,
            known => known.message_type().map_or("", MessageType::as_str),
        }
    }

    /// The task id of a task-scoped body.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Self::TaskSubmit(b) => Some(&b.task_id),
            Self::TaskUpdate(b) => Some(&b.task_id),
            Self::TaskResult(b) => Some(&b.task_id),
            Self::TaskFailed(b) => Some(&b.task_id),
            Self::TaskCancel(b) => Some(&b.task_id),
            _ => None,
        }
    }
}

macro_rules! body_from {
    ($($variant:ident),*) => {
        $(impl From<$variant> for Body {
            fn from(b: $variant) -> Self {
                Body::$variant(b)
            }
        })*
    };
}
body_from!(
    Hello,
    CapabilityManifest,
    SessionPropose,
    SessionAccept,
    SessionReject,
    TaskSubmit,
    TaskUpdate,
    TaskResult,
    TaskFailed,
    TaskCancel,
    Attestation,
    SessionClose
);

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
enum TaggedRef<'a> {
    Hello(&'a Hello),
    CapabilityManifest(&'a CapabilityManifest),
    SessionPropose(&'a SessionPropose),
    SessionAccept(&'a SessionAccept),
    SessionReject(&'a SessionReject),
    TaskSubmit(&'a TaskSubmit),
    TaskUpdate(&'a TaskUpdate),
    TaskResult(&'a TaskResult),
    TaskFailed(&'a TaskFailed),
    TaskCancel(&'a TaskCancel),
    Attestation(&'a Attestation),
    SessionClose(&'a SessionClose),
}

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tagged = match self {
            Self::Hello(b) => TaggedRef::Hello(b),
            Self::CapabilityManifest(b) => TaggedRef::CapabilityManifest(b),
            Self::SessionPropose(b) => TaggedRef::SessionPropose(b),
            Self::SessionAccept(b) => TaggedRef::SessionAccept(b),
            Self::SessionReject(b) => TaggedRef::SessionReject(b),
            Self::TaskSubmit(b) => TaggedRef::TaskSubmit(b),
            Self::TaskUpdate(b) => TaggedRef::TaskUpdate(b),
            Self::TaskResult(b) => TaggedRef::TaskResult(b),
            Self::TaskFailed(b) => TaggedRef::TaskFailed(b),
            Self::TaskCancel(b) => TaggedRef::TaskCancel(b),
            Self::Attestation(b) => TaggedRef::Attestation(b),
            Self::SessionClose(b) => TaggedRef::SessionClose(b),
            Self::Unknown(u) => {
                let mut map = serializer.serialize_map(Some(u.fields.len() + 1))?;
                map.serialize_entry("type", &u.type_name)?;
                for (k, v) in &u.fields {
                    map.serialize_entry(k, v)?;
                }
                return map.end();
            }
        };
        tagged.serialize(serializer)
    }
}

/// Declares an enum of known member names plus `Other(String)`, deserialised as an identifier without allocating
/// for the known names.
macro_rules! member_keys {
    ($name:ident { $($variant:ident = $wire:literal),* $(,)? }) => {
        enum $name {
            $($variant,)*
            Other(String),
        }

        impl $name {
            fn from_str(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The wire name.
            fn wire(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)*
                    Self::Other(name) => name,
                }
            }

            /// Marks this member seen in `seen`; an error if it was already (an `Other` name is checked where it is
            /// kept).
            fn first_time<E: de::Error>(&self, seen: &mut u32) -> Result<(), E> {
                let bit = self.bit();
                if *seen & bit != 0 {
                    return Err(duplicate(self.wire()));
                }
                *seen |= bit;
                Ok(())
            }

            /// A bit of its own for each known name (declaration order), for finding repeated members; 0 for
            /// `Other`.
            #[allow(unused_assignments)]
            fn bit(&self) -> u32 {
                let mut bit = 1;
                $(if matches!(self, Self::$variant) {
                    return bit;
                }
                bit <<= 1;)*
                0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct KeyVisitor;
                impl Visitor<'_> for KeyVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok($name::from_str(v).unwrap_or_else(|| $name::Other(v.to_owned())))
                    }
                    fn visit_string<E: de::Error>(self, v: String) -> Result<$name, E> {
                        Ok($name::from_str(&v).unwrap_or($name::Other(v)))
                    }
                }
                deserializer.deserialize_identifier(KeyVisitor)
            }
        }
    };
}

member_keys!(BodyKey {
    Type = "type",
    DelegateId = "delegate_id",
    SupportedModes = "supported_modes",
    Capabilities = "capabilities",
    Config = "config",
    SessionId = "session_id",
    NegotiatedMode = "negotiated_mode",
    FallbackChain = "fallback_chain",
    Reason = "reason",
    Error = "error",
    TaskId = "task_id",
    Skill = "skill",
    Input = "input",
    Contract = "contract",
    Progress = "progress",
    Message = "message",
    PartialOutput = "partial_output",
    Output = "output",
    Provenance = "provenance",
    Claim = "claim",
    Evidence = "evidence",
});

member_keys!(EnvelopeKey {
    MessageId = "message_id",
    SessionId = "session_id",
    From = "from",
    To = "to",
    Body = "body",
    PayloadMode = "payload_mode",
    Timestamp = "timestamp",
    Provenance = "provenance",
    Signature = "signature",
    SignatureAlgorithm = "signature_algorithm",
    Nonce = "nonce",
});

/// A body's `type`: one of the twelve, parsed without allocating, or any other string.
enum TypeTag {
    Known(MessageType),
    Unknown(String),
}

impl<'de> Deserialize<'de> for TypeTag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TagVisitor;
        impl Visitor<'_> for TagVisitor {
            type Value = TypeTag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message type string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TypeTag, E> {
                Ok(v.parse().map_or_else(|()| TypeTag::Unknown(v.to_owned()), TypeTag::Known))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<TypeTag, E> {
                Ok(v.parse().map_or(TypeTag::Unknown(v), TypeTag::Known))
            }
        }
        deserializer.deserialize_str(TagVisitor)
    }
}

/// One typed slot per member name used by any body type. The large, rarely present slots are boxed to keep this
/// struct (built and moved on every decode) small.
#[derive(Default)]
struct BodySlots {
    type_tag: Option<TypeTag>,
    delegate_id: Option<String>,
    supported_modes: Option<Vec<PayloadMode>>,
    capabilities: Option<Value>,
    config: Option<Box<SessionConfig>>,
    session_id: Option<String>,
    negotiated_mode: Option<PayloadMode>,
    fallback_chain: Option<Vec<PayloadMode>>,
    reason: Option<String>,
    error: Option<Box<LdpError>>,
    task_id: Option<String>,
    skill: Option<String>,
    input: Option<RawJson>,
    contract: Option<Box<DelegationContract>>,
    progress: Option<f64>,
    message: Option<String>,
    partial_output: Option<RawJson>,
    output: Option<RawJson>,
    provenance: Option<Box<Provenance>>,
    claim: Option<Value>,
    evidence: Option<Value>,
    extra: Map<String, Value>,
}

/// The error for a member name given twice.
fn duplicate<E: de::Error>(name: &str) -> E {
    E::custom(Error::DuplicateMember(crate::check::shorten(name)))
}

/// Inserts a member unless one of that name is there already; then gives the name back.
fn insert_new(map: &mut Map<String, Value>, name: String, value: Value) -> Option<String> {
    match map.entry(name) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            None
        }
        serde_json::map::Entry::Occupied(slot) => Some(slot.key().clone()),
    }
}

fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

/// Moves a slot that does not belong to the decoded type into `extra`, so nothing a peer sent is silently lost.
fn keep<T: Serialize>(extra: &mut Map<String, Value>, name: &str, slot: Option<T>) {
    if let Some(v) = slot
        && let Ok(v) = serde_json::to_value(v)
        && !v.is_null()
    {
        extra.insert(name.to_owned(), v);
    }
}

impl BodySlots {
    /// Builds the body (by reference: the slots are a few hundred bytes, and moving them cost more than reading them).
    fn assemble<E: de::Error>(&mut self) -> Result<Body, E> {
        let (ty, type_name) = match self.type_tag.take() {
            Some(TypeTag::Known(ty)) => (Some(ty), String::new()),
            Some(TypeTag::Unknown(name)) => (None, name),
            None => return Err(E::missing_field("type")),
        };
        // Take the slots the type uses; whatever remains goes to `extra`.
        let body = match ty {
            Some(MessageType::Hello) => Body::Hello(Hello {
                delegate_id: required(self.delegate_id.take(), "delegate_id")?,
                supported_modes: self.supported_modes.take().unwrap_or_default(),
                extra: Map::new(),
            }),
            Some(MessageType::CapabilityManifest) => Body::CapabilityManifest(CapabilityManifest {
                capabilities: required(self.capabilities.take(), "capabilities")?,
                extra: Map::new(),
            }),
            Some(MessageType::SessionPropose) => Body::SessionPropose(SessionPropose {
                config: self.config.take().map(|c| *c).unwrap_or_default(),
                extra: Map::new(),
            }),
            Some(MessageType::SessionAccept) => Body::SessionAccept(SessionAccept {
                session_id: required(self.session_id.take(), "session_id")?,
                negotiated_mode: required(self.negotiated_mode.take(), "negotiated_mode")?,
                fallback_chain: self.fallback_chain.take(),
                extra: Map::new(),
            }),
            Some(MessageType::SessionReject) => Body::SessionReject(SessionReject {
                reason: self.reason.take().unwrap_or_default(),
                error: self.error.take().map(|e| *e),
                extra: Map::new(),
            }),
            Some(MessageType::TaskSubmit) => Body::TaskSubmit(TaskSubmit {
                task_id: required(self.task_id.take(), "task_id")?,
                skill: required(self.skill.take(), "skill")?,
                input: self.input.take().unwrap_or_default(),
                contract: self.contract.take(),
                extra: Map::new(),
            }),
            Some(MessageType::TaskUpdate) => Body::TaskUpdate(TaskUpdate {
                task_id: required(self.task_id.take(), "task_id")?,
                progress: self.progress.take(),
                message: self.message.take(),
                partial_output: self.partial_output.take().filter(|p| !p.is_null()),
                extra: Map::new(),
            }),
            Some(MessageType::TaskResult) => Body::TaskResult(TaskResult {
                task_id: required(self.task_id.take(), "task_id")?,
                output: self.output.take().unwrap_or_default(),
                provenance: required(self.provenance.take(), "provenance")?,
                extra: Map::new(),
            }),
            Some(MessageType::TaskFailed) => Body::TaskFailed(TaskFailed {
                task_id: required(self.task_id.take(), "task_id")?,
                error: *required(self.error.take(), "error")?,
                extra: Map::new(),
            }),
            Some(MessageType::TaskCancel) => {
                Body::TaskCancel(TaskCancel { task_id: required(self.task_id.take(), "task_id")?, extra: Map::new() })
            }
            Some(MessageType::Attestation) => Body::Attestation(Attestation {
                claim: self.claim.take().unwrap_or(Value::Null),
                evidence: self.evidence.take().unwrap_or(Value::Null),
                extra: Map::new(),
            }),
            Some(MessageType::SessionClose) => {
                Body::SessionClose(SessionClose { reason: self.reason.take(), extra: Map::new() })
            }
            None => Body::Unknown(UnknownBody { type_name, fields: Map::new() }),
        };
        let mut extra = std::mem::take(&mut self.extra);
        keep(&mut extra, "delegate_id", self.delegate_id.take());
        keep(&mut extra, "supported_modes", self.supported_modes.take());
        keep(&mut extra, "capabilities", self.capabilities.take());
        keep(&mut extra, "config", self.config.take());
        keep(&mut extra, "session_id", self.session_id.take());
        keep(&mut extra, "negotiated_mode", self.negotiated_mode.take());
        keep(&mut extra, "fallback_chain", self.fallback_chain.take());
        keep(&mut extra, "reason", self.reason.take());
        keep(&mut extra, "error", self.error.take());
        keep(&mut extra, "task_id", self.task_id.take());
        keep(&mut extra, "skill", self.skill.take());
        keep(&mut extra, "input", self.input.take());
        keep(&mut extra, "contract", self.contract.take());
        keep(&mut extra, "progress", self.progress.take());
        keep(&mut extra, "message", self.message.take());
        keep(&mut extra, "partial_output", self.partial_output.take());
        keep(&mut extra, "output", self.output.take());
        keep(&mut extra, "provenance", self.provenance.take());
        keep(&mut extra, "claim", self.claim.take());
        keep(&mut extra, "evidence", self.evidence.take());
        let mut body = body;
        if !extra.is_empty() {
            set_extra(&mut body, extra);
        }
        Ok(body)
    }
}

fn set_extra(body: &mut Body, extra: Map<String, Value>) {
    let slot = match body {
        Body::Hello(b) => &mut b.extra,
        Body::CapabilityManifest(b) => &mut b.extra,
        Body::SessionPropose(b) => &mut b.extra,
        Body::SessionAccept(b) => &mut b.extra,
        Body::SessionReject(b) => &mut b.extra,
        Body::TaskSubmit(b) => &mut b.extra,
        Body::TaskUpdate(b) => &mut b.extra,
        Body::TaskResult(b) => &mut b.extra,
        Body::TaskFailed(b) => &mut b.extra,
        Body::TaskCancel(b) => &mut b.extra,
        Body::Attestation(b) => &mut b.extra,
        Body::SessionClose(b) => &mut b.extra,
        Body::Unknown(u) => &mut u.fields,
    };
    *slot = extra;
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an LDP message body object with a `type`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
                let mut s = BodySlots::default();
                let mut seen = 0;
                while let Some(key) = map.next_key::<BodyKey>()? {
                    key.first_time(&mut seen)?;
                    match key {
                        BodyKey::Type => s.type_tag = Some(map.next_value()?),
                        BodyKey::DelegateId => s.delegate_id = map.next_value()?,
                        BodyKey::SupportedModes => s.supported_modes = map.next_value()?,
                        BodyKey::Capabilities => s.capabilities = map.next_value::<Option<Value>>()?,
                        BodyKey::Config => s.config = map.next_value()?,
                        BodyKey::SessionId => s.session_id = map.next_value()?,
                        BodyKey::NegotiatedMode => s.negotiated_mode = map.next_value()?,
                        BodyKey::FallbackChain => s.fallback_chain = map.next_value()?,
                        BodyKey::Reason => s.reason = map.next_value()?,
                        BodyKey::Error => s.error = map.next_value()?,
                        BodyKey::TaskId => s.task_id = map.next_value()?,
                        BodyKey::Skill => s.skill = map.next_value()?,
                        BodyKey::Input => s.input = map.next_value()?,
                        BodyKey::Contract => {
                            s.contract = map.next_value::<Option<Object<Box<DelegationContract>>>>()?.map(|c| c.0)
                        }
                        BodyKey::Progress => s.progress = map.next_value()?,
                        BodyKey::Message => s.message = map.next_value()?,
                        BodyKey::PartialOutput => s.partial_output = map.next_value()?,
                        BodyKey::Output => s.output = map.next_value()?,
                        BodyKey::Provenance => s.provenance = map.next_value()?,
                        BodyKey::Claim => s.claim = map.next_value::<Option<Value>>()?,
                        BodyKey::Evidence => s.evidence = map.next_value::<Option<Value>>()?,
                        BodyKey::Other(other) => {
                            let v: Value = map.next_value()?;
                            if let Some(name) = insert_new(&mut s.extra, other, v) {
                                return Err(duplicate(&name));
                            }
                        }
                    }
                }
                s.assemble()
            }
        }
        deserializer.deserialize_map(BodyVisitor)
    }
}

/// Bytes of an encoded envelope beyond its strings and payload: member names, quotes, punctuation (about 170 for a
/// TASK_SUBMIT), and room for a few escapes.
const ENCODE_OVERHEAD: usize = 224;

/// The same for a contract: its member names, punctuation and the longest numbers it can hold (about 230 with every
/// member present).
const CONTRACT_OVERHEAD: usize = 280;

/// The bytes a member adds besides its value: `,"` + name + `":`.
const fn member_len(name: &str) -> usize {
    name.len() + 4
}

/// The longest number an optional numeric member can hold (`u64::MAX` has 20 digits; an `f64` up to 24 characters).
const NUMBER: usize = 24;

/// An upper bound of the encoded length of a provenance record whose strings need no escapes.
fn provenance_estimate(p: &Provenance) -> usize {
    // An optional string member: its name, its value and the value's quotes.
    let string = |name: usize, value: &Option<String>| value.as_ref().map_or(0, |v| name + v.len() + 2);
    let number = |name: usize, present: bool| if present { name + NUMBER } else { 0 };
    let list = |name: usize, entries: usize| if entries == 0 { 0 } else { name + 2 + entries - 1 };
    let evidence = p.evidence.iter().map(|e| {
        const FIXED: usize = member_len("source") + member_len("kind") + 4 + 2;
        FIXED
            + e.source.len()
            + e.kind.len()
            + string(const { member_len("uri") }, &e.uri)
            + string(const { member_len("summary") }, &e.summary)
    });
    let lineage = p.lineage.iter().map(|l| {
        const FIXED: usize = member_len("delegate_id") + member_len("model_version") + member_len("step") + 6 + 2;
        const STATUS: usize = member_len("verification_status") + "\"human_verified\"".len();
        FIXED
            + STATUS
            + l.delegate_id.len()
            + l.model_version.len()
            + l.step.len()
            + string(const { member_len("timestamp") }, &l.timestamp)
    });
    const FIXED: usize = member_len("produced_by")
        + member_len("model_version")
        + 4
        + member_len("payload_mode_used")
        + "\"embedding_hints\"".len()
        + member_len("verified")
        + "false".len()
        + 2;
    FIXED
        + p.produced_by.len()
        + p.model_version.len()
        + number(const { member_len("confidence") }, p.confidence.is_some())
        + string(const { member_len("session_id") }, &p.session_id)
        + string(const { member_len("timestamp") }, &p.timestamp)
        + p.verification_status.map_or(0, |_| const { member_len("verification_status") + "\"human_verified\"".len() })
        + list(const { member_len("evidence") }, p.evidence.len())
        + evidence.sum::<usize>()
        + list(const { member_len("lineage") }, p.lineage.len())
        + lineage.sum::<usize>()
        + number(const { member_len("tokens_used") }, p.tokens_used.is_some())
        + number(const { member_len("cost_usd") }, p.cost_usd.is_some())
        + string(const { member_len("contract_id") }, &p.contract_id)
        + p.contract_satisfied.map_or(0, |_| const { member_len("contract_satisfied") + "false".len() })
        + list(const { member_len("contract_violations") }, p.contract_violations.len())
        + p.contract_violations.iter().map(|v| v.len() + 3).sum::<usize>()
}

/// The LDP envelope that wraps every message.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Unique message id (a UUID in practice).
    pub message_id: String,
    /// The session (empty before one exists).
    pub session_id: String,
    /// Sender delegate id.
    pub from: String,
    /// Recipient delegate id (the Python SDK sends a URL here during set-up).
    pub to: String,
    /// The message body.
    pub body: Body,
    /// Payload mode of this message.
    pub payload_mode: PayloadMode,
    /// ISO 8601 timestamp, kept exactly as sent because signatures cover it.
    pub timestamp: String,
    /// Envelope-level provenance (RFC 3.1; usually `null`, so boxed: every move of an envelope would copy it).
    pub provenance: Option<Box<Provenance>>,
    /// Hex signature.
    pub signature: Option<String>,
    /// Signature algorithm name, e.g. `hmac-sha256-jcs`.
    pub signature_algorithm: Option<String>,
    /// Replay-protection nonce.
    pub nonce: Option<String>,
    /// Members this implementation does not define, kept as received.
    pub extensions: Map<String, Value>,
}

impl Envelope {
    /// An unsigned text-mode envelope.
    pub fn new(
        message_id: impl Into<String>,
        timestamp: impl Into<String>,
        session_id: impl Into<String>,
        from: impl Into<String>,
        to: impl Into<String>,
        body: impl Into<Body>,
    ) -> Self {
        Self {
            message_id: message_id.into(),
            session_id: session_id.into(),
            from: from.into(),
            to: to.into(),
            body: body.into(),
            payload_mode: PayloadMode::Text,
            timestamp: timestamp.into(),
            provenance: None,
            signature: None,
            signature_algorithm: None,
            nonce: None,
            extensions: Map::new(),
        }
    }

    /// Sets the payload mode.
    pub fn with_payload_mode(mut self, mode: PayloadMode) -> Self {
        self.payload_mode = mode;
        self
    }

    /// Sets the nonce.
    pub fn with_nonce(mut self, nonce: impl Into<String>) -> Self {
        self.nonce = Some(nonce.into());
        self
    }

    /// Decodes an envelope from JSON text.
    ///
    /// Errors: [`Error::MalformedJson`] for text that is not JSON or not JSON a `serde_json::Value` can hold (see the
    /// crate docs for the limits), [`Error::DuplicateMember`] for a member name repeated in any object of the message
    /// (payloads and unknown members included), [`Error::InvalidMessage`] for JSON that is not an envelope.
    #[inline]
    pub fn from_json(json: &str) -> Result<Self, Error> {
        // The scanner takes the common case; whatever it leaves (including every error) is decoded by serde.
        if let Some(envelope) = scan::decode(json) {
            return Ok(envelope);
        }
        decode_checked(json)
    }

    /// Decodes an envelope from JSON bytes.
    #[inline]
    pub fn from_slice(json: &[u8]) -> Result<Self, Error> {
        // Checking the whole message for UTF-8 at once is several times cheaper than serde_json checking each
        // string as it goes (long runs take the word-at-a-time ASCII path); invalid input takes the byte decoder,
        // which reports where the bad byte is.
        match std::str::from_utf8(json) {
            Ok(text) => Self::from_json(text),
            Err(utf8) => {
                // Fails, saying where the bad byte is.
                crate::check::check_slice(json)?;
                Err(Error::MalformedJson(de::Error::custom(utf8)))
            }
        }
    }

    /// Decodes an envelope from a JSON value.
    pub fn from_value(mut value: Value) -> Result<Self, Error> {
        // A `Value` has no duplicate names left to check (its parser kept one of each): read it member by member.
        match EnvelopeVisitor.visit_value_ref(&value) {
            Err(first) if result_provenance_from_envelope(&mut value) => {
                EnvelopeVisitor.visit_value_ref(&value).map_err(|_| Error::InvalidMessage(first))
            }
            decoded => decoded.map_err(Error::InvalidMessage),
        }
    }

    /// Decodes an envelope from a borrowed JSON value (e.g. one kept to verify a signature), without cloning it
    /// (unless it is a TASK_RESULT whose provenance is only in the envelope, which is then read from there).
    pub fn from_value_ref(value: &Value) -> Result<Self, Error> {
        match EnvelopeVisitor.visit_value_ref(value) {
            Err(first) => {
                let mut copy = value.clone();
                if result_provenance_from_envelope(&mut copy) {
                    EnvelopeVisitor.visit_value_ref(&copy).map_err(|_| Error::InvalidMessage(first))
                } else {
                    Err(Error::InvalidMessage(first))
                }
            }
            decoded => decoded.map_err(Error::InvalidMessage),
        }
    }

    /// Encodes the envelope as JSON text.
    pub fn to_json(&self) -> Result<String, Error> {
        let bytes = self.to_vec()?;
        // serde_json only writes UTF-8.
        String::from_utf8(bytes).map_err(|e| Error::Serialize(serde::ser::Error::custom(e)))
    }

    /// Encodes the envelope as JSON bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(self.estimated_len());
        write_envelope(&mut Writer { out: &mut out, style: Compact }, self)
            .map_err(|e| Error::Serialize(e.into_serde_json()))?;
        Ok(out)
    }

    /// About the encoded size, for the output buffer: big enough to be allocated once in the common case, and no
    /// bigger, because glibc serves allocations above 1 KiB from its slower bins. Extension members are not counted.
    fn estimated_len(&self) -> usize {
        let required = [&self.message_id, &self.session_id, &self.from, &self.to, &self.timestamp];
        let optional = [
            (&self.signature, const { member_len("signature") + 2 }),
            (&self.signature_algorithm, const { member_len("signature_algorithm") + 2 }),
            (&self.nonce, const { member_len("nonce") + 2 }),
        ];
        let strings = required.into_iter().map(String::len).sum::<usize>()
            + optional.into_iter().filter_map(|(value, name)| value.as_ref().map(|v| v.len() + name)).sum::<usize>();
        let body = match &self.body {
            Body::TaskSubmit(b) => {
                let contract = b.contract.as_ref().map_or(0, |c| {
                    let listed = c.success_criteria.iter().chain(&c.policy.safety_constraints);
                    // Each listed string adds its quotes and a comma.
                    let listed = listed.map(|s| s.len() + 3).sum::<usize>();
                    let timestamps = [&c.deadline, &c.created_at].into_iter().flatten().map(String::len).sum::<usize>();
                    CONTRACT_OVERHEAD + c.contract_id.len() + c.objective.len() + listed + timestamps
                });
                b.task_id.len() + b.skill.len() + b.input.json().len() + contract
            }
            Body::TaskResult(b) => b.task_id.len() + b.output.json().len() + provenance_estimate(&b.provenance),
            // A streamed chunk can be large; the rest of an update fits the default.
            Body::TaskUpdate(b) => 256 + b.partial_output.as_ref().map_or(0, |p| p.json().len()),
            _ => 256,
        };
        ENCODE_OVERHEAD + strings + body + self.provenance.as_deref().map_or(0, provenance_estimate)
    }

    /// Encodes the envelope as a JSON value.
    pub fn to_value(&self) -> Result<Value, Error> {
        serde_json::to_value(self).map_err(Error::Serialize)
    }
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_envelope(self, true, serializer)
    }
}

/// The envelope without `signature` and `signature_algorithm`: what the JCS signature algorithms sign.
pub(crate) struct UnsignedView<'a>(pub(crate) &'a Envelope);

impl Serialize for UnsignedView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_envelope(self.0, false, serializer)
    }
}

fn serialize_envelope<S: Serializer>(env: &Envelope, with_signature: bool, serializer: S) -> Result<S::Ok, S::Error> {
    if !with_signature && env.extensions.is_empty() {
        return serialize_unsigned_sorted(env, serializer);
    }
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("message_id", &env.message_id)?;
    map.serialize_entry("session_id", &env.session_id)?;
    map.serialize_entry("from", &env.from)?;
    map.serialize_entry("to", &env.to)?;
    map.serialize_entry("body", &env.body)?;
    map.serialize_entry("payload_mode", &env.payload_mode)?;
    map.serialize_entry("timestamp", &env.timestamp)?;
    map.serialize_entry("provenance", &env.provenance)?;
    if with_signature {
        if let Some(s) = &env.signature {
            map.serialize_entry("signature", s)?;
        }
        if let Some(s) = &env.signature_algorithm {
            map.serialize_entry("signature_algorithm", s)?;
        }
    }
    if let Some(s) = &env.nonce {
        map.serialize_entry("nonce", s)?;
    }
    for (k, v) in &env.extensions {
        if !with_signature && (k == "signature" || k == "signature_algorithm") {
            continue;
        }
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// Writes `env` as its `Serialize` implementation would (the same bytes, property-tested), with the envelope's and
/// the common bodies' member names written as constants rather than escaped one by one through serde: that was
/// most of the cost of encoding a message whose payload is already text.
fn write_envelope(w: &mut Writer<'_, Compact>, env: &Envelope) -> Result<(), JsonError> {
    w.out.extend_from_slice(b"{\"message_id\":");
    write_str(w.out, &env.message_id);
    w.out.extend_from_slice(b",\"session_id\":");
    write_str(w.out, &env.session_id);
    w.out.extend_from_slice(b",\"from\":");
    write_str(w.out, &env.from);
    w.out.extend_from_slice(b",\"to\":");
    write_str(w.out, &env.to);
    w.out.extend_from_slice(b",\"body\":");
    write_body(w, &env.body)?;
    w.out.extend_from_slice(b",\"payload_mode\":\"");
    // Mode names are plain ASCII.
    w.out.extend_from_slice(env.payload_mode.as_str().as_bytes());
    w.out.extend_from_slice(b"\",\"timestamp\":");
    write_str(w.out, &env.timestamp);
    w.out.extend_from_slice(b",\"provenance\":");
    match &env.provenance {
        None => w.out.extend_from_slice(b"null"),
        Some(p) => write_provenance(w, p)?,
    }
    for (name, value) in [("signature", &env.signature), ("signature_algorithm", &env.signature_algorithm)] {
        if let Some(value) = value {
            member(w, name);
            write_str(w.out, value);
        }
    }
    if let Some(nonce) = &env.nonce {
        w.out.extend_from_slice(b",\"nonce\":");
        write_str(w.out, nonce);
    }
    write_members(w, &env.extensions)?;
    w.out.push(b'}');
    Ok(())
}

/// Writes a provenance record as its `Serialize` does (the same members, order and omissions); evidence and lineage
/// entries, rare, go through `Serialize`.
fn write_provenance(w: &mut Writer<'_, Compact>, p: &Provenance) -> Result<(), JsonError> {
    w.out.extend_from_slice(b"{\"produced_by\":");
    write_str(w.out, &p.produced_by);
    w.out.extend_from_slice(b",\"model_version\":");
    write_str(w.out, &p.model_version);
    w.out.extend_from_slice(b",\"payload_mode_used\":\"");
    // Mode names are plain ASCII.
    w.out.extend_from_slice(p.payload_mode_used.as_str().as_bytes());
    w.out.push(b'"');
    if let Some(confidence) = p.confidence {
        w.out.extend_from_slice(b",\"confidence\":");
        confidence.serialize(&mut *w)?;
    }
    w.out.extend_from_slice(if p.verified { b",\"verified\":true" } else { b",\"verified\":false" });
    for (name, value) in [("session_id", &p.session_id), ("timestamp", &p.timestamp)] {
        if let Some(value) = value {
            member(w, name);
            write_str(w.out, value);
        }
    }
    if let Some(status) = p.verification_status {
        w.out.extend_from_slice(b",\"verification_status\":\"");
        // Status names are plain ASCII.
        w.out.extend_from_slice(status.as_str().as_bytes());
        w.out.push(b'"');
    }
    if !p.evidence.is_empty() {
        w.out.extend_from_slice(b",\"evidence\":");
        p.evidence.serialize(&mut *w)?;
    }
    if !p.lineage.is_empty() {
        w.out.extend_from_slice(b",\"lineage\":");
        p.lineage.serialize(&mut *w)?;
    }
    if let Some(tokens) = p.tokens_used {
        w.out.extend_from_slice(b",\"tokens_used\":");
        tokens.serialize(&mut *w)?;
    }
    if let Some(cost) = p.cost_usd {
        w.out.extend_from_slice(b",\"cost_usd\":");
        cost.serialize(&mut *w)?;
    }
    if let Some(contract_id) = &p.contract_id {
        w.out.extend_from_slice(b",\"contract_id\":");
        write_str(w.out, contract_id);
    }
    if let Some(satisfied) = p.contract_satisfied {
        w.out.extend_from_slice(if satisfied {
            b",\"contract_satisfied\":true"
        } else {
            b",\"contract_satisfied\":false"
        });
    }
    if !p.contract_violations.is_empty() {
        w.out.extend_from_slice(b",\"contract_violations\":");
        write_strings(w, &p.contract_violations);
    }
    w.out.push(b'}');
    Ok(())
}

/// Writes `,"name":`.
fn member(w: &mut Writer<'_, Compact>, name: &str) {
    w.out.push(b',');
    write_str(w.out, name);
    w.out.push(b':');
}

/// Writes each member of `map` after a `,`.
fn write_members(w: &mut Writer<'_, Compact>, map: &Map<String, Value>) -> Result<(), JsonError> {
    for (name, value) in map {
        member(w, name);
        value.serialize(&mut *w)?;
    }
    Ok(())
}

fn write_body(w: &mut Writer<'_, Compact>, body: &Body) -> Result<(), JsonError> {
    match body {
        Body::TaskSubmit(b) => {
            w.out.extend_from_slice(b"{\"type\":\"TASK_SUBMIT\",\"task_id\":");
            write_str(w.out, &b.task_id);
            w.out.extend_from_slice(b",\"skill\":");
            write_str(w.out, &b.skill);
            w.out.extend_from_slice(b",\"input\":");
            w.out.extend_from_slice(b.input.json().as_bytes());
            if let Some(contract) = &b.contract {
                w.out.extend_from_slice(b",\"contract\":");
                write_contract(w, contract)?;
            }
            write_members(w, &b.extra)?;
        }
        Body::TaskResult(b) => {
            w.out.extend_from_slice(b"{\"type\":\"TASK_RESULT\",\"task_id\":");
            write_str(w.out, &b.task_id);
            w.out.extend_from_slice(b",\"output\":");
            w.out.extend_from_slice(b.output.json().as_bytes());
            w.out.extend_from_slice(b",\"provenance\":");
            write_provenance(w, &b.provenance)?;
            write_members(w, &b.extra)?;
        }
        other => return other.serialize(&mut *w),
    }
    w.out.push(b'}');
    Ok(())
}

/// Writes the contract as its derived `Serialize` does.
fn write_contract(w: &mut Writer<'_, Compact>, c: &DelegationContract) -> Result<(), JsonError> {
    w.out.extend_from_slice(b"{\"contract_id\":");
    write_str(w.out, &c.contract_id);
    w.out.extend_from_slice(b",\"objective\":");
    write_str(w.out, &c.objective);
    w.out.extend_from_slice(b",\"success_criteria\":");
    write_strings(w, &c.success_criteria);
    w.out.extend_from_slice(b",\"policy\":{\"failure_policy\":");
    let policy = &c.policy;
    w.out.extend_from_slice(match policy.failure_policy {
        FailurePolicy::FailClosed => b"\"fail_closed\"",
        FailurePolicy::FailOpen => b"\"fail_open\"",
    });
    if let Some(budget) = &policy.budget {
        w.out.extend_from_slice(b",\"budget\":{");
        if let Some(tokens) = budget.max_tokens {
            w.out.extend_from_slice(b"\"max_tokens\":");
            tokens.serialize(&mut *w)?;
        }
        if let Some(cost) = budget.max_cost_usd {
            if budget.max_tokens.is_some() {
                w.out.push(b',');
            }
            w.out.extend_from_slice(b"\"max_cost_usd\":");
            cost.serialize(&mut *w)?;
        }
        w.out.push(b'}');
    }
    if !policy.safety_constraints.is_empty() {
        w.out.extend_from_slice(b",\"safety_constraints\":");
        write_strings(w, &policy.safety_constraints);
    }
    if let Some(depth) = policy.max_delegation_depth {
        w.out.extend_from_slice(b",\"max_delegation_depth\":");
        depth.serialize(&mut *w)?;
    }
    w.out.push(b'}');
    if let Some(deadline) = &c.deadline {
        w.out.extend_from_slice(b",\"deadline\":");
        write_str(w.out, deadline);
    }
    if let Some(created_at) = &c.created_at {
        w.out.extend_from_slice(b",\"created_at\":");
        write_str(w.out, created_at);
    }
    w.out.push(b'}');
    Ok(())
}

fn write_strings(w: &mut Writer<'_, Compact>, strings: &[String]) {
    w.out.push(b'[');
    for (i, s) in strings.iter().enumerate() {
        if i > 0 {
            w.out.push(b',');
        }
        write_str(w.out, s);
    }
    w.out.push(b']');
}

/// The signing view with its members already in JCS order (the canonicaliser then has nothing to move at the top
/// level, which is the whole message). Only for envelopes without extension members, whose names could sort anywhere.
fn serialize_unsigned_sorted<S: Serializer>(env: &Envelope, serializer: S) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("body", &env.body)?;
    map.serialize_entry("from", &env.from)?;
    map.serialize_entry("message_id", &env.message_id)?;
    if let Some(s) = &env.nonce {
        map.serialize_entry("nonce", s)?;
    }
    map.serialize_entry("payload_mode", &env.payload_mode)?;
    map.serialize_entry("provenance", &env.provenance)?;
    map.serialize_entry("session_id", &env.session_id)?;
    map.serialize_entry("timestamp", &env.timestamp)?;
    map.serialize_entry("to", &env.to)?;
    map.end()
}

/// Reads an envelope from serde_json through [`Envelope::from_json`] (serde_json hands over the text when asked for
/// a raw value, so the whole message is checked as from the other entry points, and the scanner takes the common
/// case); from any other deserializer, member by member (a structured value, which has no text to check).
impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(crate::raw::RAW_TOKEN, EnvelopeText)
    }
}

/// The visitor of [`Envelope`]'s `Deserialize`: serde_json's raw text, or the members of a structured value.
struct EnvelopeText;

impl<'de> Visitor<'de> for EnvelopeText {
    type Value = Envelope;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an LDP envelope object")
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Envelope, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let first = match map.next_key::<crate::raw::FirstKey>()? {
            Some(crate::raw::FirstKey::Token) => {
                let text = map.next_value_seed(Text)?;
                return Envelope::from_json(&text).map_err(de::Error::custom);
            }
            Some(crate::raw::FirstKey::Name(name)) => {
                Some(EnvelopeKey::from_str(&name).unwrap_or(EnvelopeKey::Other(name)))
            }
            None => None,
        };
        envelope_members(first, map)
    }
}

/// JSON text handed over by serde_json, borrowed when it can be.
struct Text;

impl<'de> de::DeserializeSeed<'de> for Text {
    type Value = std::borrow::Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = std::borrow::Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON text")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(v.into())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(v.to_owned().into())
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(v.into())
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// The serde decoder of an envelope object's members.
struct EnvelopeVisitor;

impl EnvelopeVisitor {
    fn visit_value_ref(self, value: &Value) -> Result<Envelope, serde_json::Error> {
        value.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an LDP envelope object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Envelope, A::Error> {
        envelope_members(None, map)
    }
}

/// Reads the members of an envelope object, starting with `first` when the caller has already read that name.
fn envelope_members<'de, A: MapAccess<'de>>(first: Option<EnvelopeKey>, mut map: A) -> Result<Envelope, A::Error> {
    let mut message_id: Option<String> = None;
    let mut session_id: Option<String> = None;
    let mut from: Option<String> = None;
    let mut to: Option<String> = None;
    let mut body: Option<Body> = None;
    let mut payload_mode: Option<PayloadMode> = None;
    let mut timestamp: Option<String> = None;
    let mut provenance: Option<Box<Provenance>> = None;
    let mut signature: Option<String> = None;
    let mut signature_algorithm: Option<String> = None;
    let mut nonce: Option<String> = None;
    let mut extensions = Map::new();
    let mut seen = 0;
    let mut first = first;
    loop {
        let key = match first.take() {
            Some(key) => key,
            None => match map.next_key::<EnvelopeKey>()? {
                Some(key) => key,
                None => break,
            },
        };
        key.first_time(&mut seen)?;
        match key {
            EnvelopeKey::MessageId => message_id = Some(map.next_value()?),
            EnvelopeKey::SessionId => session_id = map.next_value()?,
            EnvelopeKey::From => from = Some(map.next_value()?),
            EnvelopeKey::To => to = Some(map.next_value()?),
            EnvelopeKey::Body => body = Some(map.next_value()?),
            EnvelopeKey::PayloadMode => payload_mode = map.next_value()?,
            EnvelopeKey::Timestamp => timestamp = Some(map.next_value()?),
            EnvelopeKey::Provenance => provenance = map.next_value()?,
            EnvelopeKey::Signature => signature = map.next_value()?,
            EnvelopeKey::SignatureAlgorithm => signature_algorithm = map.next_value()?,
            EnvelopeKey::Nonce => nonce = map.next_value()?,
            EnvelopeKey::Other(other) => {
                let v: Value = map.next_value()?;
                if let Some(name) = insert_new(&mut extensions, other, v) {
                    return Err(duplicate(&name));
                }
            }
        }
    }
    Ok(Envelope {
        message_id: required(message_id, "message_id")?,
        session_id: session_id.unwrap_or_default(),
        from: required(from, "from")?,
        to: required(to, "to")?,
        body: required(body, "body")?,
        payload_mode: payload_mode.unwrap_or(PayloadMode::Text),
        timestamp: required(timestamp, "timestamp")?,
        provenance,
        signature,
        signature_algorithm,
        nonce,
        extensions,
    })
}

/// The serde path of [`Envelope::from_json`]: the whole text checked (JSON a `Value` can hold, no duplicate member
/// names), then decoded member by member.
fn decode_checked(json: &str) -> Result<Envelope, Error> {
    crate::check::check(json)?;
    let mut de = serde_json::Deserializer::from_str(json);
    let decoded =
        de.deserialize_map(EnvelopeVisitor).and_then(|env| de.end().map(|()| env)).map_err(Error::from_decode);
    match decoded {
        // Only a message that failed pays for the second reading.
        Err(Error::InvalidMessage(first)) => {
            let moved = serde_json::from_str::<Value>(json)
                .ok()
                .and_then(|mut value| result_provenance_from_envelope(&mut value).then_some(value));
            match moved {
                Some(value) => EnvelopeVisitor.visit_value_ref(&value).map_err(|_| Error::InvalidMessage(first)),
                None => Err(Error::InvalidMessage(first)),
            }
        }
        other => other,
    }
}

/// RFC 3.1 puts provenance in the envelope and RFC 6.1 in the TASK_RESULT body; the transcript sends both, and a
/// sender that fills only the envelope's is read as if it had filled the body's. Returns whether it moved a record
/// (a TASK_RESULT whose body has none, or `null`, while the envelope has one).
fn result_provenance_from_envelope(value: &mut Value) -> bool {
    let Some(envelope) = value.as_object_mut() else { return false };
    let Some(record) = envelope.get("provenance").filter(|p| p.is_object()).cloned() else { return false };
    let Some(body) = envelope.get_mut("body").and_then(Value::as_object_mut) else { return false };
    let is_result = body.get("type").and_then(Value::as_str) == Some(MessageType::TaskResult.as_str());
    if !is_result || body.get("provenance").is_some_and(|p| !p.is_null()) {
        return false;
    }
    body.insert("provenance".to_owned(), record);
    true
}

/// The serde path alone, without the scanner: for tests that compare the two.
#[doc(hidden)]
pub fn _serde_decodes(json: &str) -> Result<Envelope, Error> {
    decode_checked(json)
}

/// Whether the scanner decodes `json` itself (rather than leaving it to the serde path): for tests and benches.
#[doc(hidden)]
pub fn _scanner_decodes(json: &str) -> bool {
    scan::decode(json).is_some()
}

#[doc(hidden)]
pub fn _ignored_any_parse(json: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<IgnoredAny>(json).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit_json(extra: &str) -> String {
        format!(
            r#"{{"message_id":"m1","session_id":"s1","from":"ldp:delegate:a","to":"ldp:delegate:b","payload_mode":"semantic_frame",
            "timestamp":"2026-03-09T10:00:04Z","provenance":null,
            "body":{{"input":{{"task_type":"t","instruction":"i"}},"type":"TASK_SUBMIT","task_id":"t1","skill":"reasoning"{extra}}}}}"#
        )
    }

    #[test]
    fn type_may_come_after_fields() {
        let env = Envelope::from_json(&submit_json("")).unwrap();
        let Body::TaskSubmit(t) = &env.body else { panic!("wrong variant {:?}", env.body) };
        assert_eq!(t.skill, "reasoning");
        assert_eq!(env.payload_mode, PayloadMode::SemanticFrame);
    }

    #[test]
    fn python_style_nulls_are_tolerated_and_dropped() {
        let env =
            Envelope::from_json(&submit_json(r#","delegate_id":null,"output":null,"error":null,"contract":null"#))
                .unwrap();
        let Body::TaskSubmit(t) = &env.body else { panic!() };
        assert!(t.extra.is_empty());
        assert!(t.contract.is_none());
    }

    #[test]
    fn unknown_type_parses_as_unknown_and_round_trips() {
        let json = r#"{"message_id":"m","session_id":"","from":"a","to":"b","timestamp":"2026-03-09T10:00:00Z",
            "body":{"type":"GOSSIP","rumour":"x","task_id":"t"}}"#;
        let env = Envelope::from_json(json).unwrap();
        assert_eq!(env.body.message_type(), None);
        assert_eq!(env.body.type_name(), "GOSSIP");
        let v = env.to_value().unwrap();
        assert_eq!(v["body"]["rumour"], "x");
        assert_eq!(v["body"]["task_id"], "t");
        assert_eq!(v["body"]["type"], "GOSSIP");
    }

    #[test]
    fn unknown_envelope_members_are_kept() {
        let json = r#"{"message_id":"m","from":"a","to":"b","timestamp":"t","x_trace":{"id":7},
            "body":{"type":"SESSION_CLOSE"}}"#;
        let env = Envelope::from_json(json).unwrap();
        assert_eq!(env.extensions["x_trace"]["id"], 7);
        assert_eq!(env.to_value().unwrap()["x_trace"]["id"], 7);
    }

    #[test]
    fn missing_required_fields_are_typed_errors() {
        assert!(matches!(Envelope::from_json("{\"message_id\":"), Err(Error::MalformedJson(_))));
        assert!(matches!(
            Envelope::from_json(
                r#"{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{"type":"TASK_SUBMIT"}}"#
            ),
            Err(Error::InvalidMessage(_))
        ));
        assert!(matches!(
            Envelope::from_json(r#"{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{"skill":"x"}}"#),
            Err(Error::InvalidMessage(_))
        ));
        assert!(matches!(Envelope::from_json(r#"{"message_id":5}"#), Err(Error::InvalidMessage(_))));
        assert!(matches!(Envelope::from_json("[]"), Err(Error::InvalidMessage(_))));
    }

    #[test]
    fn bytes_decode_like_text_and_encode_like_serde_json() {
        let json = submit_json(r#","x_note":"tab\there \"quoted\" \u00e9\u0001","progress":0.25"#);
        let env = Envelope::from_slice(json.as_bytes()).unwrap();
        assert_eq!(env, Envelope::from_json(&json).unwrap());
        assert_eq!(env.to_vec().unwrap(), serde_json::to_vec(&env).unwrap());
        // Invalid UTF-8 is malformed JSON either way.
        let mut bad = json.into_bytes();
        bad[20] = 0xff;
        assert!(matches!(Envelope::from_slice(&bad), Err(Error::MalformedJson(_))));
    }

    #[test]
    fn the_output_buffer_is_allocated_once_and_not_much_bigger() {
        let flow: Vec<Value> = serde_json::from_str(include_str!("../tests/fixtures/ldp-session-flow.json")).unwrap();
        let mut with_contract = flow[4].clone();
        with_contract["body"]["contract"] = serde_json::json!({"contract_id": "ctr-1", "objective": "Summarize",
            "success_criteria": ["<=300 words"], "policy": {"failure_policy": "fail_closed",
            "budget": {"max_tokens": 6000, "max_cost_usd": 0.05}, "safety_constraints": ["none"],
            "max_delegation_depth": 2}, "deadline": "2026-03-15T18:00:00Z", "created_at": "2026-03-15T10:00:00Z"});
        let mut signed = with_contract.clone();
        signed["nonce"] = serde_json::json!("9a8b7c6d5e4f30211203948576abcdef");
        signed["signature"] = serde_json::json!("3f1e5d7c9b2a4f6e8d0c1b3a5f7e9d2c4b6a8f0e1d3c5b7a9f2e4d6c8b0a1f3e");
        signed["signature_algorithm"] = serde_json::json!("hmac-sha256-jcs");
        // A result with every provenance member, several evidence and lineage entries, echoed at the envelope level.
        let mut full_result = flow.iter().find(|m| m["body"]["type"] == "TASK_RESULT").unwrap().clone();
        let provenance = serde_json::json!({"produced_by": "ldp:delegate:qwen3-8b-reasoning",
            "model_version": "qwen3-8b-2026-01", "payload_mode_used": "embedding_hints", "confidence": 0.1234567890123,
            "verified": true, "session_id": "550e8400-e29b-41d4-a716-446655440000", "timestamp": "2026-03-09T10:00:05Z",
            "verification_status": "human_verified", "tokens_used": 18_446_744_073_709_551_615_u64,
            "cost_usd": 1.234_567_890_123_456_7e-5, "contract_id": "ctr-7f3a9c2e-4b1d-4e8a-9f6c-2d5e8a1b3c7f",
            "contract_satisfied": false, "contract_violations": ["BUDGET_EXCEEDED", "DEADLINE_MISSED", "X"],
            "evidence": [{"source": "pytest", "kind": "test_results", "uri": "https://ci.example/run/1", "summary": "ok"},
                {"source": "a", "kind": "b"}, {"source": "", "kind": ""}],
            "lineage": [{"delegate_id": "ldp:delegate:a", "model_version": "m", "step": "reasoning",
                "timestamp": "2026-03-09T10:00:05Z", "verification_status": "human_verified"},
                {"delegate_id": "", "model_version": "", "step": "", "verification_status": "tool_verified"}]});
        full_result["body"]["provenance"] = provenance.clone();
        full_result["provenance"] = provenance;
        full_result["signature"] = signed["signature"].clone();
        full_result["signature_algorithm"] = signed["signature_algorithm"].clone();
        for message in flow.iter().chain([&with_contract, &signed, &full_result]) {
            let mut env = Envelope::from_value_ref(message).unwrap();
            // Extension members are not estimated (they are rare, and sizing a `Value` costs a walk over it).
            env.extensions.clear();
            let (estimate, len) = (env.estimated_len(), env.to_vec().unwrap().len());
            assert!(estimate >= len, "{estimate} < {len}: {message}");
            assert!(estimate <= len + 320, "{estimate} for {len}: {message}");
        }
    }

    #[test]
    fn bare_string_task_failed_error_is_accepted() {
        let json = r#"{"message_id":"m","session_id":"s","from":"a","to":"b","timestamp":"t",
            "body":{"type":"TASK_FAILED","task_id":"t1","error":"boom"}}"#;
        let env = Envelope::from_json(json).unwrap();
        let Body::TaskFailed(f) = env.body else { panic!() };
        assert_eq!(f.error.message, "boom");
    }
}
