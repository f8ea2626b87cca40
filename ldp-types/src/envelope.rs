//! The envelope (RFC 3.1) and the body enum. `Envelope::from_json` tries the scanner of `scan` first; the serde
//! decoder of `decode` is the reference it falls back to (and what `Deserialize` runs).
//!
//! Serde's internally tagged enums buffer the whole body before dispatching on `type`. The decoder here instead reads
//! each member straight into a typed slot of the union of all body fields, then assembles the variant once `type` is
//! known, wherever it appears. That is one pass with no intermediate tree, and it tolerates Python peers that write
//! every field of every body type as `null`.
//!
//! Files: this one holds [`Envelope`] and its `Serialize` views; `body` the [`Body`] enum and its one-pass
//! decoder; `decode` the envelope's serde decoder (the reference the scanner is checked against); `write` the direct
//! encoder and its output-size estimate; `scan` the fast-path decoder.

use std::sync::Arc;

use serde::Serialize;
use serde::de;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::json::{Compact, Writer};
use crate::payload::PayloadMode;
use crate::provenance::Provenance;

mod body;
mod decode;
mod scan;
mod write;

pub use body::Body;
use body::{BodyKey, BodySlots, EnvelopeKey, TypeTag, insert_new};
use decode::{EnvelopeVisitor, decode_checked, result_provenance_from_envelope};
use write::{CONTRACT_OVERHEAD, ENCODE_OVERHEAD, member_len, provenance_estimate, write_envelope};

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
    /// Envelope-level provenance (RFC 3.1; usually `null`, and on a TASK_RESULT the body's record, so shared rather
    /// than held inline: every move of an envelope would copy it).
    pub provenance: Option<Arc<Provenance>>,
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

/// The serde path alone, without the scanner: for tests that compare the two (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn _serde_decodes(json: &str) -> Result<Envelope, Error> {
    decode_checked(json)
}

/// Whether the scanner decodes `json` itself (rather than leaving it to the serde path): for tests and fuzz targets
/// (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn _scanner_decodes(json: &str) -> bool {
    scan::decode(json).is_some()
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
