//! The generic value model: what any LLMX value parses into before (or instead of) a typed message.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number as LLMX writes it: an integer, or a decimal that is always finite.
///
/// The integer/decimal distinction is kept so that `1` and `1.0` write back as they were read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number(N);

#[derive(Debug, Clone, Copy, PartialEq)]
enum N {
    Int(i64),
    // Invariant: above i64::MAX (smaller values are always Int, so equal numbers have one representation).
    UInt(u64),
    // Invariant: finite (LLMX has no syntax for NaN or infinities).
    Float(f64),
}

impl Number {
    /// An integer.
    pub fn from_i64(n: i64) -> Self {
        Number(N::Int(n))
    }

    /// A non-negative integer.
    pub fn from_u64(n: u64) -> Self {
        match i64::try_from(n) {
            Ok(i) => Number(N::Int(i)),
            Err(_) => Number(N::UInt(n)),
        }
    }

    /// A decimal; `None` for NaN and infinities, which LLMX cannot express.
    pub fn from_f64(f: f64) -> Option<Self> {
        f.is_finite().then_some(Number(N::Float(f)))
    }

    /// The value as an `i64` if it was written as an integer.
    pub fn as_i64(&self) -> Option<i64> {
        match self.0 {
            N::Int(i) => Some(i),
            N::UInt(_) | N::Float(_) => None,
        }
    }

    /// The value as an `u64` if it was written as a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self.0 {
            N::Int(i) => u64::try_from(i).ok(),
            N::UInt(u) => Some(u),
            N::Float(_) => None,
        }
    }

    /// The value as an `f64` (integers are converted).
    pub fn as_f64(&self) -> f64 {
        match self.0 {
            // Precision loss above 2^53 is what any f64 reader accepts.
            #[allow(clippy::cast_precision_loss)]
            N::Int(i) => i as f64,
            #[allow(clippy::cast_precision_loss)]
            N::UInt(u) => u as f64,
            N::Float(f) => f,
        }
    }

    /// Whether the number was written as an integer.
    pub fn is_integer(&self) -> bool {
        !matches!(self.0, N::Float(_))
    }
}

impl fmt::Display for Number {
    /// Writes the number in LLMX syntax: no exponent, and a decimal always keeps a `.`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            N::Int(i) => write!(f, "{i}"),
            N::UInt(u) => write!(f, "{u}"),
            N::Float(x) => {
                // `Display` for f64 never uses an exponent and prints the shortest text that reads back exactly.
                let s = x.to_string();
                if s.contains('.') { f.write_str(&s) } else { write!(f, "{s}.0") }
            }
        }
    }
}

impl From<i64> for Number {
    fn from(n: i64) -> Self {
        Number::from_i64(n)
    }
}

/// An ordered map of unique keys to values: an LLMX `{k:v}` object or `(k:v)` tuple.
///
/// Order is kept as written so that the canonical writer reproduces it. Lookups are linear: LLMX objects are small.
///
/// Equality is a map's: the same keys with equal values, in any order (JSON, the LDP side of the bridge, keeps no
/// order).
#[derive(Debug, Clone, Default)]
pub struct Object(Vec<(String, Value)>);

impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        // Keys are unique on both sides, so equal length plus every entry found equal means equal maps.
        self.0.len() == other.0.len() && self.0.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Object {
    /// An empty object.
    pub fn new() -> Self {
        Object(Vec::new())
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value`, replacing (in place) any earlier value, which is returned.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        if let Some(slot) = self.0.iter_mut().find(|(k, _)| *k == key) {
            return Some(std::mem::replace(&mut slot.1, value));
        }
        self.0.push((key, value));
        None
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let idx = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(idx).1)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds from pairs the parser already checked for uniqueness.
    pub(crate) fn from_unique(pairs: Vec<(String, Value)>) -> Self {
        Object(pairs)
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Object {
    /// Later duplicates replace earlier ones, keeping the first position.
    fn from_iter<T: IntoIterator<Item = (K, V)>>(iter: T) -> Self {
        let mut o = Object::new();
        for (k, v) in iter {
            o.insert(k, v);
        }
        o
    }
}

/// Any LLMX value.
///
/// Bare identifiers (`f:Claude`, `s:C`) are strings written without quotes, so they parse to [`Value::Str`]; the
/// writer leaves a string bare whenever that reads back the same.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::exhaustive_enums,
    reason = "an LLMX value is one of the grammar's value forms (LLMX v1.0 section 3); a new form is a new format version"
)]
pub enum Value {
    /// A quoted string or a bare identifier.
    Str(String),
    /// A number.
    Number(Number),
    /// `true` or `false`.
    Bool(bool),
    /// `[a,b,c]`.
    Array(Vec<Value>),
    /// `{k:v}`.
    Object(Object),
    /// `(k:v)`, the form PLAN steps use.
    Tuple(Object),
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Converts a JSON value; `None` for `null` anywhere in it, which LLMX has no syntax for.
    pub fn from_json(json: &serde_json::Value) -> Option<Value> {
        Some(match json {
            serde_json::Value::Null => return None,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(match n.as_i64() {
                Some(i) => Number::from_i64(i),
                None => match n.as_u64() {
                    Some(u) => Number::from_u64(u),
                    None => Number::from_f64(n.as_f64()?)?,
                },
            }),
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => Value::Array(a.iter().map(Value::from_json).collect::<Option<_>>()?),
            serde_json::Value::Object(o) => Value::Object(Object::from_unique(
                o.iter().map(|(k, v)| Some((k.clone(), Value::from_json(v)?))).collect::<Option<_>>()?,
            )),
        })
    }

    /// The JSON view of the value; tuples become objects.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Number(n) => match n.0 {
                N::Int(i) => serde_json::Value::from(i),
                N::UInt(u) => serde_json::Value::from(u),
                N::Float(f) => {
                    serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)
                }
            },
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Array(a) => serde_json::Value::Array(a.iter().map(Value::to_json).collect()),
            Value::Object(o) | Value::Tuple(o) => object_to_json(o),
        }
    }
}

/// The JSON view of an object.
pub(crate) fn object_to_json(o: &Object) -> serde_json::Value {
    serde_json::Value::Object(o.iter().map(|(k, v)| (k.to_owned(), v.to_json())).collect())
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Number(Number::from_i64(n))
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<Number> for Value {
    fn from(n: Number) -> Self {
        Value::Number(n)
    }
}
impl From<Object> for Value {
    fn from(o: Object) -> Self {
        Value::Object(o)
    }
}
impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Self {
        Value::Array(a)
    }
}

// Serde: the JSON view (tuples serialize as objects and come back as objects).

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            N::Int(i) => s.serialize_i64(i),
            N::UInt(u) => s.serialize_u64(u),
            N::Float(f) => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => Ok(n),
            _ => Err(de::Error::custom("expected a number")),
        }
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Object(o) => Ok(o),
            _ => Err(de::Error::custom("expected an object")),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Str(v) => s.serialize_str(v),
            Value::Number(n) => n.serialize(s),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Object(o) | Value::Tuple(o) => o.serialize(s),
        }
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an LLMX value (string, number, boolean, array or object; no null)")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(Number::from_u64(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out: Vec<(String, Value)> = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        // As in the LLMX parser: linear search for small objects, a set for big ones, so hostile input stays linear.
        let mut seen: Option<std::collections::HashSet<String>> = None;
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            let dup = match &mut seen {
                Some(set) => !set.insert(k.clone()),
                None => {
                    let dup = out.iter().any(|(ok, _)| *ok == k);
                    if out.len() >= 16 {
                        let mut set: std::collections::HashSet<String> = out.iter().map(|(ok, _)| ok.clone()).collect();
                        set.insert(k.clone());
                        seen = Some(set);
                    }
                    dup
                }
            };
            if dup {
                return Err(de::Error::custom(format!("duplicate key '{k}'")));
            }
            out.push((k, v));
        }
        Ok(Value::Object(Object(out)))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}
