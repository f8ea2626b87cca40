//! [`RawJson`]: a task's payload (TASK_SUBMIT `input`, TASK_RESULT `output`) kept as the JSON text it arrived in.
//!
//! Why: the payload is the delegate's business, not the protocol's. A router or a session machine forwards it,
//! signs it and checks its mode, but rarely reads it. Building a `serde_json::Value` tree for it on every decode (a
//! map and a string allocation per member) was most of the cost of decoding an envelope; keeping the text costs one
//! scan and one copy, and encoding it again is a copy. Whoever needs the content parses it once, into a `Value` or
//! straight into their own type.
//!
//! The text read from a peer is always one JSON value without surrounding whitespace that a `serde_json::Value` can
//! hold (no number out of range, no lone surrogate, nesting within serde_json's limit) and in which no object names
//! a member twice: exactly what `serde_json::from_str::<Value>` accepts, less duplicate names. Anything else is
//! refused when the payload is read (a typed error, and a 400 at a server's door), so that whoever reads the payload
//! later cannot fail, or read another value than the one a signature covered. It is written back verbatim (so a
//! payload relayed through this crate keeps its bytes), canonicalised for the JCS signature algorithms like any other
//! value, and compared by meaning (`{"a": 1}` equals `{"a":1}`).

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;

/// The name serde_json gives raw JSON fragments (`serde_json::value::RawValue`, feature `raw_value`). A serializer or
/// deserializer of serde_json recognises it and passes the text through untouched; so does this crate's writer. The
/// tests of this module fail if serde_json ever renames it.
pub(crate) const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// A JSON value kept as text: parsed on demand, written back verbatim.
///
/// Build one from JSON text with [`RawJson::from_json`], from a `serde_json::Value` or any serialisable value with
/// `From<Value>` / [`RawJson::from_serializable`]; `From<&str>` and `From<String>` make a JSON *string* (a text-mode
/// payload), not JSON text.
///
/// ```
/// use ldp_types::RawJson;
/// use serde_json::json;
///
/// let input = RawJson::from_json(r#"{"task_type": "analysis", "instruction": "Compare"}"#)?;
/// assert_eq!(input.to_value()?["task_type"], "analysis");
/// // Compared by meaning, not by spelling.
/// assert_eq!(input, json!({"instruction": "Compare", "task_type": "analysis"}));
/// # Ok::<(), ldp_types::Error>(())
/// ```
#[derive(Clone)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// JSON `null`.
    pub fn null() -> Self {
        Self("null".into())
    }

    /// Checks that `text` is one JSON value that a `serde_json::Value` can hold, with no member name given twice in
    /// any object, and keeps it (without surrounding whitespace).
    ///
    /// Errors: [`Error::MalformedJson`] for what `serde_json::from_str::<Value>` refuses (invalid JSON, a number out
    /// of range such as `1e400`, a lone surrogate such as `"\ud800"`, nesting deeper than 127 levels);
    /// [`Error::DuplicateMember`] for a repeated member name.
    pub fn from_json(text: impl Into<String>) -> Result<Self, Error> {
        let text = text.into();
        crate::check::check(&text)?;
        let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
        Ok(if trimmed.len() == text.len() { Self(text.into_boxed_str()) } else { Self(trimmed.into()) })
    }

    /// Text already checked by [`crate::check`] (the envelope scanner checks a payload as it finds its end).
    pub(crate) fn from_checked(text: &str) -> Self {
        Self(text.into())
    }

    /// The one-member object `{name: value}`, built around an already checked value without reading it again (a
    /// payload's text is checked once, when it is read).
    ///
    /// Errors: [`Error::MalformedJson`] when the object would nest deeper than a `serde_json::Value` holds (127
    /// levels).
    ///
    /// ```
    /// use ldp_types::RawJson;
    /// use serde_json::json;
    ///
    /// let input = RawJson::from_json(r#"{"text":"hi"}"#)?;
    /// assert_eq!(RawJson::member("echo", &input)?, json!({"echo": {"text": "hi"}}));
    /// # Ok::<(), ldp_types::Error>(())
    /// ```
    pub fn member(name: &str, value: &RawJson) -> Result<Self, Error> {
        if !value.nests_within(crate::check::MAX_DEPTH - 1) {
            let too_deep = format!("nested deeper than {} levels", crate::check::MAX_DEPTH);
            return Err(Error::MalformedJson(de::Error::custom(too_deep)));
        }
        let mut out = Vec::with_capacity(name.len() + value.0.len() + 8);
        out.push(b'{');
        crate::json::write_str(&mut out, name);
        out.push(b':');
        out.extend_from_slice(value.0.as_bytes());
        out.push(b'}');
        // Both parts are UTF-8 (a checked value, a string the writer escaped): this cannot fail.
        String::from_utf8(out)
            .map(|text| Self(text.into_boxed_str()))
            .map_err(|e| Error::MalformedJson(de::Error::custom(e)))
    }

    /// Whether arrays and objects nest at most `levels` deep in the value ([`RawJson::depth`] `<= levels`). A text
    /// too short to nest deeper (each level takes two bytes) is not scanned, so small values cost nothing.
    ///
    /// ```
    /// use ldp_types::RawJson;
    ///
    /// let value = RawJson::from_json(r#"{"a":[1,2]}"#)?;
    /// assert!(value.nests_within(2));
    /// assert!(!value.nests_within(1));
    /// # Ok::<(), ldp_types::Error>(())
    /// ```
    pub fn nests_within(&self, levels: usize) -> bool {
        self.0.len() / 2 <= levels || self.depth() <= levels
    }

    /// How deeply arrays and objects nest in the value: 0 for a scalar, 1 for `[]` or `{"a":1}`.
    pub fn depth(&self) -> usize {
        let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
        for &byte in self.0.as_bytes() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == b'"' {
                    in_string = false;
                }
                continue;
            }
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        deepest
    }

    /// The compact JSON of any serialisable value.
    pub fn from_serializable<T: Serialize + ?Sized>(value: &T) -> Result<Self, Error> {
        let mut out = Vec::new();
        crate::json::write_compact(&mut out, value).map_err(|e| Error::Serialize(e.into_serde_json()))?;
        // The writer only writes UTF-8.
        String::from_utf8(out)
            .map(|s| Self(s.into_boxed_str()))
            .map_err(|e| Error::Serialize(serde::ser::Error::custom(e)))
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub fn into_json(self) -> String {
        self.0.into_string()
    }

    /// Whether the value is JSON `null`.
    pub fn is_null(&self) -> bool {
        &*self.0 == "null"
    }

    /// Parses the text into a `Value` tree. Cannot fail for a payload read from JSON text (which is checked to be one
    /// a `Value` can hold); fails for one built by [`RawJson::from_serializable`] from a value that serialises to
    /// something no `Value` holds (nested deeper than 127 levels, say).
    pub fn to_value(&self) -> Result<Value, Error> {
        serde_json::from_str(&self.0).map_err(Error::from_decode)
    }

    /// Parses the text into any deserialisable type (which may borrow from it): the typed way to read a payload.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, Error> {
        serde_json::from_str(&self.0).map_err(Error::from_decode)
    }

    /// The text, when the value is a JSON string: its content, unescaped.
    pub fn as_string(&self) -> Option<Cow<'_, str>> {
        if !self.0.starts_with('"') {
            return None;
        }
        self.parse::<Cow<'_, str>>().ok()
    }
}

impl Default for RawJson {
    fn default() -> Self {
        Self::null()
    }
}

impl From<&Value> for RawJson {
    fn from(value: &Value) -> Self {
        // A `Value` always serialises: its keys are strings and it cannot hold a non-finite number.
        Self::from_serializable(value).unwrap_or_default()
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> Self {
        Self::from(&value)
    }
}

impl From<&str> for RawJson {
    /// A JSON string (a text-mode payload), not JSON text: `"hi"` becomes `"\"hi\""`.
    fn from(text: &str) -> Self {
        let mut out = Vec::with_capacity(text.len() + 2);
        crate::json::write_str(&mut out, text);
        // Quoting valid UTF-8 gives valid UTF-8.
        Self(String::from_utf8(out).unwrap_or_default().into_boxed_str())
    }
}

impl From<String> for RawJson {
    /// A JSON string (a text-mode payload), not JSON text.
    fn from(text: String) -> Self {
        Self::from(text.as_str())
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RawJson").field(&format_args!("{}", self.0)).finish()
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq for RawJson {
    /// Equal when the texts are, or when both parse to equal values.
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
            || match (self.to_value(), other.to_value()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
    }
}

impl PartialEq<Value> for RawJson {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| v == *other)
    }
}

impl PartialEq<RawJson> for Value {
    fn eq(&self, other: &RawJson) -> bool {
        other == self
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The shape serde_json's serializers (and this crate's) recognise as text to write as is.
        let mut raw = serializer.serialize_struct(RAW_TOKEN, 1)?;
        raw.serialize_field(RAW_TOKEN, &*self.0)?;
        raw.end()
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // serde_json's deserializers answer this name with the value's text; any other deserializer (a buffered
        // `#[serde(flatten)]` struct, YAML, ...) hands over a structured value, which is written out as JSON.
        deserializer.deserialize_newtype_struct(RAW_TOKEN, RawJsonVisitor)
    }
}

struct RawJsonVisitor;

impl RawJsonVisitor {
    fn from_value<E: de::Error>(value: Value) -> Result<RawJson, E> {
        RawJson::from_serializable(&value).map_err(E::custom)
    }
}

/// Reads the value half of serde_json's raw-value map: the text, checked.
struct RawText;

impl<'de> DeserializeSeed<'de> for RawText {
    type Value = RawJson;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawJson, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = RawJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("raw JSON text")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawJson, E> {
                // serde_json hands over the text as it skipped it: checked for syntax only.
                crate::check::check(v).map_err(E::custom)?;
                Ok(RawJson(v.into()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<RawJson, E> {
                crate::check::check(&v).map_err(E::custom)?;
                Ok(RawJson(v.into_boxed_str()))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// The first member name of a map: serde_json's raw-value marker (compared without allocating), or a real name.
pub(crate) enum FirstKey {
    Token,
    Name(String),
}

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = FirstKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FirstKey, E> {
                Ok(if v == RAW_TOKEN { FirstKey::Token } else { FirstKey::Name(v.to_owned()) })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Collects a value from a deserializer that is not serde_json's, through serde_json's own `Value` visitor.
struct Structured<D>(D);

impl<'de, D: Deserializer<'de>> Structured<D> {
    fn value(self) -> Result<RawJson, D::Error> {
        RawJsonVisitor::from_value(Value::deserialize(self.0)?)
    }
}

macro_rules! forward_to_value {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method<E: de::Error>(self, v: $ty) -> Result<RawJson, E> {
            Self::from_value(Value::from(v))
        })*
    };
}

impl<'de> Visitor<'de> for RawJsonVisitor {
    type Value = RawJson;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawJson, D::Error> {
        Structured(deserializer).value()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawJson, A::Error> {
        let first = match map.next_key::<FirstKey>()? {
            None => return Ok(RawJson("{}".into())),
            Some(FirstKey::Token) => return map.next_value_seed(RawText),
            Some(FirstKey::Name(name)) => name,
        };
        // An object from a deserializer that ignored the name.
        let mut object = serde_json::Map::new();
        object.insert(first, map.next_value()?);
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            object.insert(k, v);
        }
        Self::from_value(Value::Object(object))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<RawJson, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Self::from_value(value)
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawJson, E> {
        Ok(RawJson::null())
    }

    fn visit_none<E: de::Error>(self) -> Result<RawJson, E> {
        Ok(RawJson::null())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawJson, D::Error> {
        Structured(deserializer).value()
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawJson, E> {
        Ok(RawJson::from(v))
    }

    forward_to_value!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64);
}

impl JsonSchema for RawJson {
    fn schema_name() -> Cow<'static, str> {
        "AnyJson".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serde_json_passes_the_text_through_both_ways() {
        // These fail if serde_json stops recognising `RAW_TOKEN`.
        let text = r#"{"b": [1, 2.50, "x"],  "a": null}"#;
        let raw: RawJson = serde_json::from_str(&format!("[{text}]")).map(|mut v: Vec<RawJson>| v.remove(0)).unwrap();
        assert_eq!(raw.json(), text);
        assert_eq!(serde_json::to_string(&raw).unwrap(), text);
        assert_eq!(serde_json::to_value(&raw).unwrap(), json!({"b": [1, 2.5, "x"], "a": null}));
        let mut ours = Vec::new();
        crate::json::write_compact(&mut ours, &raw).unwrap();
        assert_eq!(ours, text.as_bytes());
    }

    #[test]
    fn any_deserializer_can_produce_one() {
        let value = json!({"task_type": "t", "n": [1, -2, 0.5, true, null, "s"]});
        // serde_json's `Value` deserializer.
        let raw: RawJson = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(raw, value);
        // A buffered struct (serde's private content deserializer, as `#[serde(flatten)]` uses).
        #[derive(Deserialize)]
        struct WithFlatten {
            input: RawJson,
            #[serde(flatten)]
            rest: serde_json::Map<String, Value>,
        }
        let w: WithFlatten = serde_json::from_value(json!({"input": value, "other": 1})).unwrap();
        assert_eq!(w.input, value);
        assert_eq!(w.rest["other"], 1);
        let w: WithFlatten = serde_json::from_str(r#"{"input": "text", "other": 1}"#).unwrap();
        assert_eq!(w.input.as_string().as_deref(), Some("text"));
    }

    #[test]
    fn equality_is_by_meaning() {
        assert_eq!(
            RawJson::from_json("{\"a\":1,\"b\":2}").unwrap(),
            RawJson::from_json("{ \"b\": 2, \"a\": 1 }").unwrap()
        );
        assert_ne!(RawJson::from_json("[1,2]").unwrap(), RawJson::from_json("[2,1]").unwrap());
        assert_eq!(RawJson::from("hé \"q\""), json!("hé \"q\""));
        assert_eq!(RawJson::default(), Value::Null);
        assert!(RawJson::default().is_null());
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[\\x00-\\x1f\"\\\\a-z\u{e9}\u{1f600} ]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{0,5}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn text_in_any_layout_reads_and_relays_as_its_value(value in any_json(), pretty in proptest::bool::ANY) {
            let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
            let text = format!(" {}\n", text.unwrap());
            let raw = RawJson::from_json(text.clone()).unwrap();
            proptest::prop_assert_eq!(raw.json(), text.trim());
            proptest::prop_assert_eq!(raw.to_value().unwrap(), value.clone());
            let compact = RawJson::from(&value);
            proptest::prop_assert_eq!(&raw, &compact);
            // Written back as it came, by serde_json and by this crate's writer.
            proptest::prop_assert_eq!(serde_json::to_string(&raw).unwrap(), text.trim());
            let mut ours = Vec::new();
            crate::json::write_compact(&mut ours, &raw).unwrap();
            proptest::prop_assert_eq!(ours, text.trim().as_bytes());
            // Canonicalised like the value itself.
            proptest::prop_assert_eq!(crate::jcs::to_vec(&raw).unwrap(), crate::jcs::to_vec(&value).unwrap());
        }
    }

    /// The depth of a value as serde_json sees it, for comparison.
    fn value_depth(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
            Value::Object(members) => 1 + members.values().map(value_depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    proptest::proptest! {
        #[test]
        fn a_member_wraps_any_value_as_serde_would(value in any_json(), name in "[\\x00-\\x1f\"\\\\a-z\u{e9}]{0,8}", pretty in proptest::bool::ANY) {
            let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
            let raw = RawJson::from_json(text.unwrap()).unwrap();
            proptest::prop_assert_eq!(raw.depth(), value_depth(&value));
            let wrapped = RawJson::member(&name, &raw).unwrap();
            // Text that reads back (and checks) as the object serde_json builds.
            let reread = RawJson::from_json(wrapped.json()).unwrap();
            proptest::prop_assert_eq!(reread.to_value().unwrap(), json!({ name: value }));
            proptest::prop_assert_eq!(wrapped.depth(), raw.depth() + 1);
        }

        #[test]
        fn nests_within_agrees_with_the_depth(value in any_json(), pretty in proptest::bool::ANY, levels in 0usize..8) {
            let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
            let raw = RawJson::from_json(text.unwrap()).unwrap();
            proptest::prop_assert_eq!(raw.nests_within(levels), value_depth(&value) <= levels);
        }
    }

    #[test]
    fn a_member_never_nests_past_what_a_value_holds() {
        let nested = |n: usize| RawJson::from_json(format!("{}{}", "[".repeat(n), "]".repeat(n))).unwrap();
        let deepest = RawJson::member("a", &nested(126)).unwrap();
        assert_eq!(deepest.depth(), 127);
        assert!(deepest.to_value().is_ok());
        assert!(matches!(RawJson::member("a", &nested(127)), Err(Error::MalformedJson(_))));
        // Brackets in strings, escaped quotes included, do not count.
        assert_eq!(RawJson::from_json(r#"{"a":[[1],{"b":"\"]]]["}],"c":[]}"#).unwrap().depth(), 3);
        assert_eq!(RawJson::from_json(r#"["\\",[["x"]]]"#).unwrap().depth(), 3);
        assert_eq!(RawJson::from_json(r#""[{""#).unwrap().depth(), 0);
    }

    #[test]
    fn invalid_text_is_a_typed_error() {
        assert!(matches!(RawJson::from_json("{\"a\":"), Err(Error::MalformedJson(_))));
        assert!(matches!(RawJson::from_json("1 2"), Err(Error::MalformedJson(_))));
        assert_eq!(RawJson::from_json(" \n[1]\t").unwrap().json(), "[1]");
        // Syntactically valid, but no `Value` can hold these: refused, as `Value` refuses them.
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        for text in ["\"\\ud800\"", "1e400", &"1".repeat(400), &deep] {
            assert!(serde_json::from_str::<Value>(text).is_err());
            assert!(matches!(RawJson::from_json(text), Err(Error::MalformedJson(_))), "{text}");
            // Through serde too (a payload inside a larger document, read on its own).
            assert!(serde_json::from_str::<RawJson>(text).is_err(), "{text}");
        }
        // Just within the limits.
        let deep = format!("{}{}", "[".repeat(127), "]".repeat(127));
        for text in ["\"\\ud800\\udc00\"", "1e300", &"1".repeat(300), &deep] {
            assert!(serde_json::from_str::<Value>(text).is_ok());
            assert!(RawJson::from_json(text).unwrap().to_value().is_ok(), "{text}");
        }
        assert!(matches!(RawJson::from_json(r#"[{"a":1,"a":1}]"#), Err(Error::DuplicateMember(_))));
        assert!(serde_json::from_str::<RawJson>(r#"[{"a":1,"a":1}]"#).is_err());
        assert!(matches!(RawJson::from_json("{}").unwrap().parse::<String>(), Err(Error::InvalidMessage(_))));
    }
}
