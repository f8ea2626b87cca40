//! What every JSON text read from a peer must be before anything else reads it: one value that a
//! `serde_json::Value` can hold (numbers within the range of an `f64`, no lone surrogate escapes, nesting within
//! serde_json's recursion limit of [`MAX_DEPTH`]) in which no object names a member twice.
//!
//! Why refuse duplicate names rather than pick one: JSON parsers disagree on which occurrence wins (serde_json and
//! most keep the last, some the first, some refuse). A message that means one thing to the receiver that verifies
//! its signature and another to an intermediary that forwards or logs it is an attack, not a message. RFC 8785
//! (JCS) refuses duplicates for the same reason, and so does this crate, anywhere in a message: envelope, body,
//! records, unknown members and payloads alike.
//!
//! The check parses the value with serde_json's own parser (so "what a `Value` can hold" is decided by the code
//! that decides it for `Value`), visiting every member name and keeping nothing but the names of the object being
//! read: a few borrowed names compared directly, a hash set only for large objects or names with escapes.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::Error;

/// The deepest nesting of arrays and objects a `serde_json::Value` can be read with (serde_json's recursion limit);
/// a whole message, counted from its outermost object, must stay within it. Tested against serde_json below.
pub const MAX_DEPTH: usize = 127;

/// Checks that `text` is one JSON value a `serde_json::Value` can hold, with no duplicate member names.
///
/// Errors: [`Error::MalformedJson`] for invalid JSON and for JSON no `Value` can hold (a number out of range, a lone
/// surrogate, nesting deeper than [`MAX_DEPTH`]); [`Error::DuplicateMember`] for a name given twice in one object.
pub(crate) fn check(text: &str) -> Result<(), Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let checked = Checked::deserialize(&mut de).and_then(|c| de.end().map(|()| c)).map_err(Error::from_decode)?;
    checked.into_result()
}

/// [`check`] for bytes, which must also be UTF-8.
pub(crate) fn check_slice(bytes: &[u8]) -> Result<(), Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => check(text),
        // serde_json's byte reader reports where the invalid sequence is (it checks each string as it reads it).
        Err(utf8) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            Checked::deserialize(&mut de).and_then(|c| de.end().map(|()| c)).map_err(Error::from_decode)?;
            Err(Error::MalformedJson(de::Error::custom(utf8)))
        }
    }
}

/// What checking a value found: how deep it nests (0 for a scalar, 1 for `[]`) and the first member name that an
/// object in it repeats. Parse failures are the deserializer's errors.
pub(crate) struct Checked {
    /// The first repeated member name, in document order of the repetition.
    pub(crate) duplicate: Option<Box<str>>,
    /// The nesting depth of the value.
    pub(crate) depth: usize,
}

impl Checked {
    /// The verdict on a value that parsed.
    pub(crate) fn into_result(self) -> Result<(), Error> {
        match self.duplicate {
            None => Ok(()),
            Some(name) => Err(Error::DuplicateMember(shorten(&name))),
        }
    }

    const SCALAR: Self = Self { duplicate: None, depth: 0 };
}

/// A member name for an error message: whole when short, else its first 64 bytes (a peer's name may be megabytes).
pub(crate) fn shorten(name: &str) -> String {
    const KEEP: usize = 64;
    if name.len() <= KEEP {
        return name.to_owned();
    }
    let mut end = KEEP;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &name[..end])
}

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckVisitor)
    }
}

/// A member name, borrowed from the input when it has no escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// How many names an object may have before they move to a hash set: the envelope's own members and most payload
/// objects fit, and comparing against a handful of short names costs less than hashing one.
const INLINE: usize = 12;

/// The member names of one object seen so far: up to [`INLINE`] borrowed names in place (nothing allocated or moved
/// for a typical object), then a hash set.
struct Names<'de> {
    inline: [&'de str; INLINE],
    len: usize,
    hashed: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> Names<'de> {
    /// Adds `name`; `false` when it was already there.
    fn insert(&mut self, name: Cow<'de, str>) -> bool {
        if let Some(set) = &mut self.hashed {
            return set.insert(name);
        }
        let seen = &self.inline[..self.len];
        if seen.contains(&&*name) {
            return false;
        }
        match name {
            Cow::Borrowed(borrowed) if self.len < INLINE => {
                self.inline[self.len] = borrowed;
                self.len += 1;
            }
            name => {
                // A long object, or a name with escapes (unescaped into the parser's scratch space, so it must be
                // copied to be kept).
                let mut set: HashSet<Cow<'de, str>> = seen.iter().map(|n| Cow::Borrowed(*n)).collect();
                set.insert(name);
                self.hashed = Some(set);
            }
        }
        true
    }
}

struct CheckVisitor;

impl<'de> Visitor<'de> for CheckVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_none<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked::SCALAR)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Checked, D::Error> {
        Checked::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        let mut found = Checked { duplicate: None, depth: 1 };
        while let Some(element) = seq.next_element::<Checked>()? {
            found.absorb(element);
        }
        Ok(found)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let mut found = Checked { duplicate: None, depth: 1 };
        let mut names = Names { inline: [""; INLINE], len: 0, hashed: None };
        while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
            if found.duplicate.is_none() && !names.insert(name.clone()) {
                found.duplicate = Some(name.into());
            }
            found.absorb(map.next_value::<Checked>()?);
        }
        Ok(found)
    }
}

impl Checked {
    /// Takes in what a member or element found.
    fn absorb(&mut self, inner: Checked) {
        self.depth = self.depth.max(inner.depth + 1);
        if self.duplicate.is_none() {
            self.duplicate = inner.duplicate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn max_depth_is_serde_json_s_limit() {
        assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_DEPTH)).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_DEPTH + 1)).is_err());
        assert!(check(&nested(MAX_DEPTH)).is_ok());
        assert!(matches!(check(&nested(MAX_DEPTH + 1)), Err(Error::MalformedJson(_))));
    }

    #[test]
    fn depth_is_counted_from_the_outside() {
        let depth = |text: &str| {
            let mut de = serde_json::Deserializer::from_str(text);
            Checked::deserialize(&mut de).unwrap().depth
        };
        assert_eq!(depth("1"), 0);
        assert_eq!(depth("[]"), 1);
        assert_eq!(depth(r#"{"a":[1,{"b":[]}],"c":{}}"#), 4);
    }

    #[test]
    fn duplicates_are_found_wherever_they_are() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"[{"x":{"y":[{"k":1,"j":2,"k":3}]}}]"#,
            // Past the inline names, and a repeat of the first name.
            r#"{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0,"g":0,"h":0,"i":0,"j":0,"k":0,"l":0,"m":0,"a":0}"#,
            r#"{"é\n":0,"x":0,"é\n":0}"#,
        ] {
            assert!(matches!(check(text), Err(Error::DuplicateMember(_))), "{text}");
        }
        assert!(matches!(check(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#), Ok(())));
        let Err(Error::DuplicateMember(name)) = check(r#"{"k":{"n":1,"n":2}}"#) else { panic!() };
        assert_eq!(name, "n");
        let long = "x".repeat(1000);
        let Err(Error::DuplicateMember(name)) = check(&format!(r#"{{"{long}":1,"{long}":2}}"#)) else { panic!() };
        assert!(name.len() < 80);
    }

    #[test]
    fn what_no_value_can_hold_is_malformed() {
        for text in ["\"\\ud800\"", "1e400", &"9".repeat(400), "[\"\\udc00x\"]", &nested(MAX_DEPTH + 1)] {
            assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
            assert!(matches!(check(text), Err(Error::MalformedJson(_))), "{text}");
        }
        assert!(matches!(check_slice(b"[\"\xff\"]"), Err(Error::MalformedJson(_))));
        assert!(check_slice(b"[\"\xc3\xa9\"]").is_ok());
    }
}
