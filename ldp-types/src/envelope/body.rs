//! The message body enum and its decoder: each member read straight into a typed slot of the union of all body
//! fields, the variant assembled once `type` is known, wherever it appears.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::contract::DelegationContract;
use crate::error::{Error, LdpError};
use crate::identity::Object;
use crate::messages::*;
use crate::payload::PayloadMode;
use crate::provenance::Provenance;
use crate::raw::RawJson;

macro_rules! declare_body {
    ($($variant:ident => $wire:literal,)*) => {
        /// A message body: one of the twelve types, or an explicit unknown.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(
            clippy::exhaustive_enums,
            reason = "the twelve message types of RFC 3.2, and Unknown for any other: a type this version does not know already parses as Unknown, and a machine that dispatches on Body must be made to handle a new type"
        )]
        pub enum Body {
            $(#[doc = concat!("`", $wire, "`")] $variant($variant),)*
            /// Any other `type`.
            Unknown(UnknownBody),
        }

        impl Body {
            /// The message type, or `None` for an unknown body.
            pub fn message_type(&self) -> Option<MessageType> {
                match self {
                    $(Self::$variant(_) => Some(MessageType::$variant),)*
                    Self::Unknown(_) => None,
                }
            }

            /// The body with its `type` tag for the encoder; an unknown body is written as it came.
            fn tagged(&self) -> Result<TaggedRef<'_>, &UnknownBody> {
                match self {
                    $(Self::$variant(b) => Ok(TaggedRef::$variant(b)),)*
                    Self::Unknown(u) => Err(u),
                }
            }
        }

        $(impl From<$variant> for Body {
            fn from(b: $variant) -> Self {
                Body::$variant(b)
            }
        })*

        /// A known body borrowed for encoding: serde writes `type` first, then the body's members.
        #[derive(Serialize)]
        #[serde(tag = "type")]
        pub(super) enum TaggedRef<'a> {
            $(#[serde(rename = $wire)] $variant(&'a $variant),)*
        }
    };
}
message_types!(declare_body);

impl Body {
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

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.tagged() {
            Ok(tagged) => tagged.serialize(serializer),
            Err(u) => {
                let mut map = serializer.serialize_map(Some(u.fields.len() + 1))?;
                map.serialize_entry("type", &u.type_name)?;
                for (k, v) in &u.fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Declares an enum of known member names plus `Other(String)`, deserialised as an identifier without allocating
/// for the known names.
macro_rules! member_keys {
    ($name:ident { $($variant:ident = $wire:literal),* $(,)? }) => {
        pub(super) enum $name {
            $($variant,)*
            Other(String),
        }

        impl $name {
            pub(super) fn from_str(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The wire name.
            pub(super) fn wire(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)*
                    Self::Other(name) => name,
                }
            }

            /// Marks this member seen in `seen`; an error if it was already (an `Other` name is checked where it is
            /// kept).
            pub(super) fn first_time<E: de::Error>(&self, seen: &mut u32) -> Result<(), E> {
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
            pub(super) fn bit(&self) -> u32 {
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
pub(super) enum TypeTag {
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
pub(super) struct BodySlots {
    pub(super) type_tag: Option<TypeTag>,
    pub(super) delegate_id: Option<String>,
    pub(super) supported_modes: Option<Vec<PayloadMode>>,
    pub(super) capabilities: Option<Value>,
    pub(super) config: Option<Box<SessionConfig>>,
    pub(super) session_id: Option<String>,
    pub(super) negotiated_mode: Option<PayloadMode>,
    pub(super) fallback_chain: Option<Vec<PayloadMode>>,
    pub(super) reason: Option<String>,
    pub(super) error: Option<Box<LdpError>>,
    pub(super) task_id: Option<String>,
    pub(super) skill: Option<String>,
    pub(super) input: Option<RawJson>,
    pub(super) contract: Option<Box<DelegationContract>>,
    pub(super) progress: Option<f64>,
    pub(super) message: Option<String>,
    pub(super) partial_output: Option<RawJson>,
    pub(super) output: Option<RawJson>,
    pub(super) provenance: Option<Arc<Provenance>>,
    pub(super) claim: Option<Value>,
    pub(super) evidence: Option<Value>,
    pub(super) extra: Map<String, Value>,
}

/// The error for a member name given twice.
pub(super) fn duplicate<E: de::Error>(name: &str) -> E {
    E::custom(Error::DuplicateMember(crate::check::shorten(name)))
}

/// Inserts a member unless one of that name is there already; then gives the name back.
pub(super) fn insert_new(map: &mut Map<String, Value>, name: String, value: Value) -> Option<String> {
    match map.entry(name) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            None
        }
        serde_json::map::Entry::Occupied(slot) => Some(slot.key().clone()),
    }
}

pub(super) fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

/// Moves a slot that does not belong to the decoded type into `extra`, so nothing a peer sent is silently lost.
pub(super) fn keep<T: Serialize>(extra: &mut Map<String, Value>, name: &str, slot: Option<T>) {
    if let Some(v) = slot
        && let Ok(v) = serde_json::to_value(v)
        && !v.is_null()
    {
        extra.insert(name.to_owned(), v);
    }
}

impl BodySlots {
    /// Builds the body (by reference: the slots are a few hundred bytes, and moving them cost more than reading them).
    pub(super) fn assemble<E: de::Error>(&mut self) -> Result<Body, E> {
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

pub(super) fn set_extra(body: &mut Body, extra: Map<String, Value>) {
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
