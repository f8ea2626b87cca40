//! What travels in WebSocket frames: the transport-neutral [`Message`], close codes, the `in_reply_to` envelope
//! extension and the two control frames (`{"error": ...}` and `{"accepted": true}`).

use std::borrow::Cow;

#[cfg(feature = "client")]
use ldp_types::MessageType;
#[cfg(feature = "server")]
use ldp_types::{Envelope, LdpError};
use serde::Deserialize;
#[cfg(feature = "client")]
use serde_json::value::RawValue;
#[cfg(feature = "server")]
use serde_json::{Map, Value};

/// The envelope extension member naming the message a server frame answers (set on replies, pushed TASK_UPDATEs
/// and control frames; absent on results delivered after a resume).
pub const IN_REPLY_TO: &str = "in_reply_to";

/// WebSocket close codes used by this binding (RFC 6455 7.4.1).
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// The endpoint is going away (server shutdown, dead peer).
    pub const GOING_AWAY: u16 = 1001;
    /// A message violated the endpoint's policy.
    pub const POLICY: u16 = 1008;
    /// A message was too big to process.
    pub const TOO_BIG: u16 = 1009;
    /// An unexpected condition on the endpoint.
    pub const INTERNAL: u16 = 1011;
}

/// A close frame's code and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The close code (see [`close_code`]).
    pub code: u16,
    /// A short reason (at most 123 bytes on the wire).
    pub reason: String,
}

impl CloseFrame {
    /// A close frame with `code` and `reason`.
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        let mut reason = reason.into();
        // Control frames carry at most 125 bytes: 2 for the code, 123 for the reason.
        if reason.len() > 123 {
            let mut end = 123;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Self { code, reason }
    }
}

/// One WebSocket message, independent of the WebSocket library: the connection loops are written against this type,
/// so they run over axum, tokio-tungstenite or plain channels (in tests) alike.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::exhaustive_enums)] // Closed by definition: the RFC 6455 frame kinds an application sees.
pub enum Message {
    /// A text frame: one LDP envelope (or a control frame) as JSON.
    Text(String),
    /// A binary frame: refused by this binding.
    Binary(Vec<u8>),
    /// A ping.
    Ping(Vec<u8>),
    /// A pong.
    Pong(Vec<u8>),
    /// A close frame.
    Close(Option<CloseFrame>),
}

/// Why a connection's incoming stream failed: the receive path says why, it does not just end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The peer sent a message (or frame) larger than the limit.
    #[error("message larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The connection failed (IO error, protocol violation, reset).
    #[error("connection failed: {0}")]
    Io(String),
}

/// The first members of a message, read without decoding the rest: enough to route it and its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Head {
    pub message_id: String,
    pub session_id: String,
    pub kind: String,
    pub task_id: Option<String>,
    /// Control frame `{"error": ...}`.
    pub is_error: bool,
    /// Control frame `{"accepted": true}`.
    pub is_accepted: bool,
    pub in_reply_to: Option<String>,
    /// The W3C `traceparent` envelope member (the caller's span), unchecked.
    pub traceparent: Option<String>,
    /// The W3C `tracestate` envelope member, unchecked.
    pub tracestate: Option<String>,
}

#[derive(Deserialize)]
struct RawHead<'a> {
    #[serde(borrow, default)]
    message_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    body: Option<RawBody<'a>>,
    #[serde(borrow, default)]
    in_reply_to: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    traceparent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tracestate: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    accepted: Option<bool>,
}

#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    task_id: Option<Cow<'a, str>>,
}

impl Head {
    /// Reads the routing members of `text`; `None` when it is not a JSON object of the expected shape (the session
    /// layer then answers it with its own typed error).
    pub(crate) fn peek(text: &str) -> Option<Head> {
        let raw: RawHead<'_> = serde_json::from_str(text).ok()?;
        let (kind, task_id) = match raw.body {
            Some(b) => (b.kind.map(Cow::into_owned).unwrap_or_default(), b.task_id.map(Cow::into_owned)),
            None => (String::new(), None),
        };
        Some(Head {
            message_id: raw.message_id.map(Cow::into_owned).unwrap_or_default(),
            session_id: raw.session_id.map(Cow::into_owned).unwrap_or_default(),
            kind,
            task_id,
            is_error: raw.error.is_some(),
            is_accepted: raw.accepted == Some(true),
            in_reply_to: raw.in_reply_to.map(Cow::into_owned),
            traceparent: raw.traceparent.map(Cow::into_owned),
            tracestate: raw.tracestate.map(Cow::into_owned),
        })
    }
}

#[cfg(feature = "server")]
/// The fixed body used if an error cannot be encoded (only a non-finite float in `partial_output` can cause that).
const FALLBACK_ERROR: &str = r#"{"error":{"code":"EXECUTION_FAILED","category":"runtime","message":"internal error","severity":"error","retryable":true}}"#;

#[cfg(feature = "server")]
/// `{"error": <LdpError>, "in_reply_to": <id>}` (the latter when known).
pub(crate) fn error_frame(error: &LdpError, in_reply_to: Option<&str>) -> String {
    let mut map = Map::new();
    let Ok(e) = serde_json::to_value(error) else { return FALLBACK_ERROR.to_owned() };
    map.insert("error".to_owned(), e);
    if let Some(id) = in_reply_to.filter(|id| !id.is_empty()) {
        map.insert(IN_REPLY_TO.to_owned(), Value::String(id.to_owned()));
    }
    serde_json::to_string(&Value::Object(map)).unwrap_or_else(|_| FALLBACK_ERROR.to_owned())
}

#[cfg(feature = "server")]
/// `{"accepted": true, "in_reply_to": <id>}`: the message was accepted and has no reply (an ATTESTATION).
pub(crate) fn accepted_frame(in_reply_to: &str) -> String {
    serde_json::json!({ "accepted": true, IN_REPLY_TO: in_reply_to }).to_string()
}

#[cfg(feature = "server")]
/// Encodes `env` with `in_reply_to` set (when non-empty).
pub(crate) fn envelope_frame(mut env: Envelope, in_reply_to: Option<&str>) -> Result<String, ldp_types::Error> {
    if let Some(id) = in_reply_to.filter(|id| !id.is_empty()) {
        env.extensions.insert(IN_REPLY_TO.to_owned(), Value::String(id.to_owned()));
    }
    env.to_json()
}

#[cfg(feature = "client")]
/// `text`, a JSON object, without its top-level members named `name`: every other member kept as received (its
/// value byte for byte) and in order, so that a signature over the rest still verifies. `None` when `text` is not a
/// JSON object. Used to take this binding's correlation member off an envelope without decoding the envelope.
pub(crate) fn without_member(text: &str, name: &str) -> Option<String> {
    struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

    impl<'de> Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut members = Vec::new();
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        members.push((key, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Members(members))
                }
            }
            deserializer.deserialize_map(Visit)
        }
    }

    let Members(members) = serde_json::from_str(text).ok()?;
    let mut out = String::with_capacity(text.len());
    out.push('{');
    for (key, value) in members.iter().filter(|(key, _)| key != name) {
        if out.len() > 1 {
            out.push(',');
        }
        // A key is re-escaped the one standard way; a value is copied as it came.
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    Some(out)
}

/// Whether a body type ends a task (the final answer to a TASK_SUBMIT).
#[cfg(feature = "client")]
pub(crate) fn is_task_end(kind: &str) -> bool {
    kind.parse::<MessageType>().is_ok_and(MessageType::ends_task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_without_the_rest() {
        let h = Head::peek(
            r#"{"message_id":"m1","session_id":"s","body":{"type":"TASK_SUBMIT","task_id":"t","input":{"x":[1,2]}},"in_reply_to":"q"}"#,
        )
        .unwrap();
        assert_eq!((h.message_id.as_str(), h.session_id.as_str(), h.kind.as_str()), ("m1", "s", "TASK_SUBMIT"));
        assert_eq!(h.task_id.as_deref(), Some("t"));
        assert_eq!(h.in_reply_to.as_deref(), Some("q"));
        assert!(!h.is_error);
        assert!(Head::peek("not json").is_none());
        assert!(Head::peek("[1]").is_none());
        let e = Head::peek(&error_frame(&LdpError::runtime("X", "y"), Some("m1"))).unwrap();
        assert!(e.is_error);
        assert_eq!(e.in_reply_to.as_deref(), Some("m1"));
        assert!(Head::peek(&accepted_frame("m2")).unwrap().is_accepted);
    }

    #[test]
    fn close_reasons_fit_a_control_frame() {
        let f = CloseFrame::new(close_code::TOO_BIG, "é".repeat(100));
        assert!(f.reason.len() <= 123);
    }

    #[test]
    fn the_correlation_member_comes_off_and_nothing_else_changes() {
        let frame = r#"{"a" : 1.50, "in_reply_to":"m-1","b":{"in_reply_to":"inner"},"c\u0041":"x\n","d":[1,2]}"#;
        let stripped = without_member(frame, IN_REPLY_TO).unwrap();
        assert_eq!(stripped, r#"{"a":1.50,"b":{"in_reply_to":"inner"},"cA":"x\n","d":[1,2]}"#);
        // Repeated members stay repeated: the envelope decoder, not this, refuses them.
        assert_eq!(without_member(r#"{"a":1,"a":2}"#, "x").unwrap(), r#"{"a":1,"a":2}"#);
        for not_an_object in ["[1]", "1", "", "{", r#"{"a":}"#] {
            assert_eq!(without_member(not_an_object, IN_REPLY_TO), None, "{not_an_object}");
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the members and the whitespace between them, the named member goes and every other one stays,
        /// in order and byte for byte.
        #[test]
        fn stripping_a_member_removes_it_and_nothing_else(
            members in proptest::collection::btree_map(
                proptest::prop_oneof![proptest::strategy::Just(IN_REPLY_TO.to_owned()), ".{0,6}"],
                json_value(),
                0..6,
            ),
            spaces in proptest::collection::vec(proptest::prop_oneof![" ", "\n", "\t", ""], 4),
        ) {
            let write = |(k, v): (&String, &Value)| {
                format!("{}{}:{}{}", serde_json::to_string(k).unwrap(), spaces[0], spaces[1], v)
            };
            let all: Vec<String> = members.iter().map(write).collect();
            let text = format!("{}{{{}{}}}{}", spaces[2], all.join(&format!(",{}", spaces[3])), spaces[3], spaces[2]);
            let kept: Vec<String> = members
                .iter()
                .filter(|(k, _)| *k != IN_REPLY_TO)
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v))
                .collect();
            proptest::prop_assert_eq!(without_member(&text, IN_REPLY_TO), Some(format!("{{{}}}", kept.join(","))));
        }
    }
}
