//! The serde decoder of envelopes: the reference the scanner falls back to and is checked against, and what
//! `Deserialize` runs.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, MapAccess, Visitor};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::body::{EnvelopeKey, duplicate, insert_new, required};
use super::{Body, Envelope};
use crate::error::Error;
use crate::messages::*;
use crate::payload::PayloadMode;
use crate::provenance::Provenance;

/// Reads an envelope from serde_json through [`Envelope::from_json`] (serde_json hands over the text when asked for
/// a raw value, so the whole message is checked as from the other entry points, and the scanner takes the common
/// case); from any other deserializer, member by member (a structured value, which has no text to check).
impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(crate::raw::RAW_TOKEN, EnvelopeText)
    }
}

/// The visitor of [`Envelope`]'s `Deserialize`: serde_json's raw text, or the members of a structured value.
pub(super) struct EnvelopeText;

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
pub(super) struct Text;

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
pub(super) struct EnvelopeVisitor;

impl EnvelopeVisitor {
    pub(super) fn visit_value_ref(self, value: &Value) -> Result<Envelope, serde_json::Error> {
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
pub(super) fn envelope_members<'de, A: MapAccess<'de>>(
    first: Option<EnvelopeKey>,
    mut map: A,
) -> Result<Envelope, A::Error> {
    let mut message_id: Option<String> = None;
    let mut session_id: Option<String> = None;
    let mut from: Option<String> = None;
    let mut to: Option<String> = None;
    let mut body: Option<Body> = None;
    let mut payload_mode: Option<PayloadMode> = None;
    let mut timestamp: Option<String> = None;
    let mut provenance: Option<Arc<Provenance>> = None;
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
pub(super) fn decode_checked(json: &str) -> Result<Envelope, Error> {
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
pub(super) fn result_provenance_from_envelope(value: &mut Value) -> bool {
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
