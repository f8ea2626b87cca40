//! Payload modes (RFC section 4): wire values, negotiation with a fallback chain, and the semantic frame.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::Error;
use crate::raw::RawJson;

/// A payload encoding, numbered 0-5 as in the RFC's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PayloadMode {
    /// Mode 0, `text`: required of every delegate.
    Text,
    /// Mode 1, `semantic_frame`: typed JSON with `task_type` and `instruction`.
    SemanticFrame,
    /// Mode 2, `embedding_hints`.
    EmbeddingHints,
    /// Mode 3, `semantic_graph`.
    SemanticGraph,
    /// Mode 4, `latent_capsules` (future).
    LatentCapsules,
    /// Mode 5, `cache_slices` (future).
    CacheSlices,
}

impl PayloadMode {
    /// All modes in mode-number order.
    pub const ALL: [PayloadMode; 6] = [
        Self::Text,
        Self::SemanticFrame,
        Self::EmbeddingHints,
        Self::SemanticGraph,
        Self::LatentCapsules,
        Self::CacheSlices,
    ];

    /// The RFC's mode number (0-5).
    pub const fn number(self) -> u8 {
        match self {
            Self::Text => 0,
            Self::SemanticFrame => 1,
            Self::EmbeddingHints => 2,
            Self::SemanticGraph => 3,
            Self::LatentCapsules => 4,
            Self::CacheSlices => 5,
        }
    }

    /// The wire value, e.g. `semantic_frame`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::SemanticFrame => "semantic_frame",
            Self::EmbeddingHints => "embedding_hints",
            Self::SemanticGraph => "semantic_graph",
            Self::LatentCapsules => "latent_capsules",
            Self::CacheSlices => "cache_slices",
        }
    }
}

impl fmt::Display for PayloadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PayloadMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| Error::UnknownPayloadMode(s.to_owned()))
    }
}

impl Serialize for PayloadMode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PayloadMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ModeVisitor;
        impl serde::de::Visitor<'_> for ModeVisitor {
            type Value = PayloadMode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a payload mode name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PayloadMode, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(ModeVisitor)
    }
}

/// The outcome of RFC 4.2 negotiation: the mode to start in and the modes to fall back through, richest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The selected mode.
    pub mode: PayloadMode,
    /// Lower-numbered common modes to fall back to, ending with `text`.
    pub fallback_chain: Vec<PayloadMode>,
}

/// Negotiates a payload mode per RFC 4.2.
///
/// `implemented` is what this side can actually process (a mode listed by a peer but not implemented here is
/// skipped, as `semantic_graph` is in the RFC's diagram). The first mode of the initiator's preference list that
/// both the responder supports and this side implements is selected; if none, `text`. The fallback chain is every
/// other common implemented mode with a lower number, in descending order, always ending in `text`.
pub fn negotiate(
    initiator_prefs: &[PayloadMode],
    responder_supported: &[PayloadMode],
    implemented: &[PayloadMode],
) -> Negotiated {
    let usable = |m: &PayloadMode| responder_supported.contains(m) && implemented.contains(m);
    let mode = initiator_prefs.iter().copied().find(usable).unwrap_or(PayloadMode::Text);
    let mut fallback_chain: Vec<PayloadMode> = PayloadMode::ALL
        .into_iter()
        .rev()
        .filter(|m| {
            m.number() < mode.number() && (*m == PayloadMode::Text || (usable(m) && initiator_prefs.contains(m)))
        })
        .collect();
    if mode != PayloadMode::Text && !fallback_chain.contains(&PayloadMode::Text) {
        fallback_chain.push(PayloadMode::Text);
    }
    Negotiated { mode, fallback_chain }
}

/// A mode-1 payload: typed JSON with required `task_type` and `instruction` (RFC 4.4). Other fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticFrame {
    /// The kind of task, e.g. `classification`.
    pub task_type: String,
    /// What to do.
    pub instruction: String,
    /// The optional fields (`input`, `expected_output_format`, `labels`, ...).
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl SemanticFrame {
    /// A frame with no optional fields.
    pub fn new(task_type: impl Into<String>, instruction: impl Into<String>) -> Self {
        Self { task_type: task_type.into(), instruction: instruction.into(), fields: Map::new() }
    }

    /// Validates a TASK_SUBMIT `input` as a semantic frame: it must be an object whose `task_type` and `instruction`
    /// are non-empty strings. Reads the two members only; the rest of the input is skipped, not built.
    pub fn validate(input: &RawJson) -> Result<(), Error> {
        let check =
            input.parse::<FrameCheck>().map_err(|_| Error::InvalidSemanticFrame("input must be a JSON object"))?;
        if !check.task_type {
            return Err(Error::InvalidSemanticFrame("task_type is required and must be a non-empty string"));
        }
        if !check.instruction {
            return Err(Error::InvalidSemanticFrame("instruction is required and must be a non-empty string"));
        }
        Ok(())
    }

    /// Parses and validates a TASK_SUBMIT `input` as a semantic frame.
    pub fn from_input(input: &RawJson) -> Result<Self, Error> {
        Self::validate(input)?;
        input.parse()
    }

    /// The frame as a JSON value for a TASK_SUBMIT `input`.
    pub fn to_input(&self) -> Value {
        let mut obj = self.fields.clone();
        obj.insert("task_type".into(), Value::String(self.task_type.clone()));
        obj.insert("instruction".into(), Value::String(self.instruction.clone()));
        Value::Object(obj)
    }
}

/// Whether a semantic frame's two required members are non-empty strings (the last occurrence counts, as in a
/// `Value`); fails to parse when the input is not an object.
struct FrameCheck {
    task_type: bool,
    instruction: bool,
}

impl<'de> Deserialize<'de> for FrameCheck {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};

        /// A member name, compared without allocating.
        enum Member {
            TaskType,
            Instruction,
            Other,
        }
        impl<'de> Deserialize<'de> for Member {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct NameVisitor;
                impl Visitor<'_> for NameVisitor {
                    type Value = Member;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Member, E> {
                        Ok(match v {
                            "task_type" => Member::TaskType,
                            "instruction" => Member::Instruction,
                            _ => Member::Other,
                        })
                    }
                }
                deserializer.deserialize_str(NameVisitor)
            }
        }

        /// A member value: whether it is a non-empty string.
        struct NonEmptyString(bool);
        impl<'de> Deserialize<'de> for NonEmptyString {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                Value::deserialize(deserializer).map(|v| Self(v.as_str().is_some_and(|s| !s.is_empty())))
            }
        }

        struct CheckVisitor;
        impl<'de> Visitor<'de> for CheckVisitor {
            type Value = FrameCheck;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FrameCheck, A::Error> {
                let mut check = FrameCheck { task_type: false, instruction: false };
                while let Some(key) = map.next_key::<Member>()? {
                    match key {
                        Member::TaskType => check.task_type = map.next_value::<NonEmptyString>()?.0,
                        Member::Instruction => check.instruction = map.next_value::<NonEmptyString>()?.0,
                        Member::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(check)
            }
        }
        deserializer.deserialize_map(CheckVisitor)
    }
}

/// Validates `input` for `mode`: a semantic frame for mode 1; any JSON for text (a string or any value, as the
/// reference SDKs send objects in text mode too). Modes 2-5 are not implemented here and fail.
pub fn validate_payload(mode: PayloadMode, input: &RawJson) -> Result<(), Error> {
    match mode {
        PayloadMode::Text => Ok(()),
        PayloadMode::SemanticFrame => SemanticFrame::validate(input),
        other => Err(Error::UnknownPayloadMode(format!("{other} is not implemented"))),
    }
}

/// The modes this crate can validate and process.
pub const IMPLEMENTED_MODES: [PayloadMode; 2] = [PayloadMode::SemanticFrame, PayloadMode::Text];

#[cfg(test)]
mod tests {
    use super::*;
    use PayloadMode::{EmbeddingHints, LatentCapsules, SemanticGraph, Text};
    const FRAME: PayloadMode = PayloadMode::SemanticFrame;

    #[test]
    fn wire_values_round_trip() {
        for m in PayloadMode::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<PayloadMode>(&json).unwrap(), m);
        }
        assert_eq!(LatentCapsules.number(), 4);
        assert!(serde_json::from_str::<PayloadMode>("\"binary\"").is_err());
    }

    #[test]
    fn rfc_diagram_negotiation() {
        // RFC 4.2: the initiator prefers semantic_graph, the responder supports frame and text.
        let n = negotiate(&[SemanticGraph, FRAME, Text], &[FRAME, Text], &IMPLEMENTED_MODES);
        assert_eq!(n.mode, FRAME);
        assert_eq!(n.fallback_chain, vec![Text]);
    }

    #[test]
    fn no_common_mode_falls_back_to_text() {
        let n = negotiate(&[SemanticGraph], &[EmbeddingHints], &IMPLEMENTED_MODES);
        assert_eq!(n.mode, Text);
        assert!(n.fallback_chain.is_empty());
    }

    #[test]
    fn semantic_frame_requires_task_type_and_instruction() {
        let frame = |v: serde_json::Value| SemanticFrame::validate(&RawJson::from(v));
        assert!(frame(serde_json::json!({"task_type": "a", "instruction": "b", "x": [1, {"y": 2}]})).is_ok());
        assert!(frame(serde_json::json!({"task_type": "a"})).is_err());
        assert!(frame(serde_json::json!({"instruction": "b"})).is_err());
        assert!(frame(serde_json::json!("text")).is_err());
        assert!(frame(serde_json::json!({"task_type": "", "instruction": "b"})).is_err());
        assert!(frame(serde_json::json!({"task_type": 1, "instruction": "b"})).is_err());
        // A repeated member is not a payload at all: refused before anything reads it.
        assert!(matches!(
            RawJson::from_json(r#"{"task_type":"a","instruction":"","instruction":"b"}"#),
            Err(crate::Error::DuplicateMember(name)) if name == "instruction"
        ));
    }
}
