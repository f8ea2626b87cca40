//! RFC 8785 (JCS) canonical JSON, written in one pass from any `Serialize` value.
//!
//! This is a [`Style`] of the crate's JSON writer, which does the string escaping (which is already what JCS
//! requires: the two-character escapes, `\u00xx` in lowercase hex for other control characters, and nothing else).
//! At the end of each object the style sorts that object's members by their UTF-16 code units and rewrites them in
//! place. Numbers are written as ECMAScript would print the IEEE 754 double (`ryu-js`), integers included. No
//! intermediate `Value` is built.

use std::cell::Cell;
use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::check::Key;
use crate::json::{Error, Number, Style, Writer, write_str};

/// The canonical bytes of `value`. Fails on duplicate member names; non-finite numbers are
/// written as `null`, as serde_json (and the reference canonicaliser) write them.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    with_canonical(value, <[u8]>::to_vec)
}

/// Runs `f` on the canonical bytes of `value` (see [`to_vec`]), written into buffers reused on this thread.
pub(crate) fn with_canonical<T: Serialize + ?Sized, R>(
    value: &T,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, serde_json::Error> {
    let mut pool = Pool::take();
    let mut writer = Writer { out: &mut pool.out, style: std::mem::take(&mut pool.style) };
    let written = value.serialize(&mut writer);
    pool.style = writer.style;
    let result = written.map(|()| f(&pool.out)).map_err(Error::into_serde_json);
    pool.put_back();
    result
}

/// Runs `f` on the canonical bytes of the JSON object `json` without its top-level `signature` and
/// `signature_algorithm` members, and on the values of those two members, straight from the text: no `Value` tree is
/// built.
///
/// Fails on invalid JSON, a non-object, and duplicate member names anywhere (which a `Value` would resolve by keeping
/// the last, and which no signature is allowed to cover).
pub(crate) fn with_signing_input_from_slice<R>(
    json: &[u8],
    f: impl FnOnce(&[u8], Option<&Value>, Option<&Value>) -> R,
) -> Result<R, serde_json::Error> {
    // One UTF-8 check for the whole text is cheaper than one per string.
    let text = std::str::from_utf8(json).map_err(de::Error::custom)?;
    let mut pool = Pool::take();
    let mut writer = Writer { out: &mut pool.out, style: std::mem::take(&mut pool.style) };
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de.deserialize_map(TopLevel(&mut writer)).and_then(|members| de.end().map(|()| members));
    pool.style = writer.style;
    let result = parsed.map(|(signature, algorithm)| f(&pool.out, signature.as_ref(), algorithm.as_ref()));
    pool.put_back();
    result
}

/// The canonicaliser's buffers, kept per thread between calls: envelopes are about a kilobyte, and allocating that
/// much afresh for every signature and verification cost more than writing it (glibc sorts its free lists on every
/// request of 1 KiB or more).
#[derive(Default)]
struct Pool {
    out: Vec<u8>,
    style: Jcs,
}

thread_local! {
    static POOL: Cell<Option<Pool>> = const { Cell::new(None) };
}

impl Pool {
    /// This thread's buffers, or new ones (when another canonicalisation on this thread holds them).
    fn take() -> Self {
        POOL.try_with(Cell::take).ok().flatten().unwrap_or_default()
    }

    /// Returns the buffers for the next call, unless one unusually large message grew them.
    fn put_back(mut self) {
        const KEEP_AT_MOST: usize = 64 * 1024;
        self.out.clear();
        self.style.frames.clear();
        if self.out.capacity() <= KEEP_AT_MOST && self.style.scratch.capacity() <= KEEP_AT_MOST {
            // Fails only while the thread is exiting; the buffers are then simply dropped.
            let _ = POOL.try_with(|pool| pool.set(Some(self)));
        }
    }
}

/// The envelope object: every member but the two signature members is written canonically.
struct TopLevel<'w, 'o>(&'w mut Writer<'o, Jcs>);

impl<'de> Visitor<'de> for TopLevel<'_, '_> {
    type Value = (Option<Value>, Option<Value>);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let w = self.0;
        let (mut signature, mut algorithm) = (None, None);
        w.begin_object();
        let mut first = true;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                // Repeated, these would escape the duplicate check of the canonical writer (they are not written).
                "signature" | "signature_algorithm" => {
                    let slot = if key == "signature" { &mut signature } else { &mut algorithm };
                    if slot.is_some() {
                        return Err(de::Error::custom(format_args!("duplicate member name {key:?}")));
                    }
                    *slot = Some(map.next_value()?);
                }
                name => {
                    w.begin_key(&mut first).map_err(de::Error::custom)?;
                    write_str(w.out, name);
                    w.end_key().map_err(de::Error::custom)?;
                    map.next_value_seed(Transcode(&mut *w))?;
                    w.end_value().map_err(de::Error::custom)?;
                }
            }
        }
        w.end_object().map_err(de::Error::custom)?;
        Ok((signature, algorithm))
    }
}

/// Writes one JSON value canonically as it is parsed.
struct Transcode<'w, 'o>(&'w mut Writer<'o, Jcs>);

impl<'de> DeserializeSeed<'de> for Transcode<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Transcode<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        v.serialize(&mut *self.0).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        v.serialize(&mut *self.0).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        v.serialize(&mut *self.0).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        v.serialize(&mut *self.0).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write_str(self.0.out, v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let w = self.0;
        w.out.push(b'[');
        let mut first = true;
        loop {
            let at = w.out.len();
            if !first {
                w.out.push(b',');
            }
            if seq.next_element_seed(Transcode(&mut *w))?.is_none() {
                // No element after all: take back the separator.
                w.out.truncate(at);
                break;
            }
            first = false;
        }
        w.out.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let w = self.0;
        w.begin_object();
        let mut first = true;
        while let Some(Key(key)) = map.next_key()? {
            w.begin_key(&mut first).map_err(de::Error::custom)?;
            write_str(w.out, &key);
            w.end_key().map_err(de::Error::custom)?;
            map.next_value_seed(Transcode(&mut *w))?;
            w.end_value().map_err(de::Error::custom)?;
        }
        w.end_object().map_err(de::Error::custom)
    }
}

/// One member of an object being written: offsets into the output buffer of its quoted name and of the end of its
/// value (`key_end` is the `:`).
#[derive(Clone, Copy)]
struct Member {
    key_start: usize,
    key_end: usize,
    value_end: usize,
}

/// An object being written: where it starts and its members so far.
struct Frame {
    start: usize,
    members: Vec<Member>,
}

#[derive(Default)]
struct Jcs {
    frames: Vec<Frame>,
    /// Member lists of finished objects, reused.
    spare: Vec<Vec<Member>>,
    /// Copy of the object being sorted, reused.
    scratch: Vec<u8>,
}

/// The member name as text: the escaped bytes between the quotes, unescaped when they contain an escape.
fn key_text(quoted: &[u8]) -> Result<String, Error> {
    serde_json::from_slice::<String>(quoted).map_err(|_| Error::new("member name is not a string"))
}

/// JCS member order: by UTF-16 code units.
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Whether a quoted member name is ASCII without escapes, so its bytes compare like its UTF-16 code units.
fn is_plain(quoted: &[u8]) -> bool {
    quoted.iter().all(|&b| b < 0x80 && b != b'\\')
}

impl Jcs {
    /// Puts the members of the object starting at `frame.start` (written as `{k:v,k:v`) in JCS order.
    fn sort_object(&mut self, out: &mut Vec<u8>, frame: &mut Frame) -> Result<(), Error> {
        let text = &*out;
        // The name without its quotes.
        let name = |m: &Member| &text[m.key_start + 1..m.key_end - 1];
        let all_plain = frame.members.iter().all(|m| is_plain(name(m)));
        if all_plain && frame.members.windows(2).all(|w| name(&w[0]) < name(&w[1])) {
            // Already in order (always true of `serde_json::Map`s of ASCII names): nothing to move.
            return Ok(());
        }
        if all_plain {
            frame.members.sort_unstable_by(|a, b| name(a).cmp(name(b)));
            if frame.members.windows(2).any(|w| name(&w[0]) == name(&w[1])) {
                return Err(Error::new("duplicate member name"));
            }
        } else {
            let mut keyed = Vec::with_capacity(frame.members.len());
            for m in &frame.members {
                keyed.push((key_text(&text[m.key_start..m.key_end])?, *m));
            }
            keyed.sort_by(|a, b| utf16_cmp(&a.0, &b.0));
            if keyed.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(Error::new("duplicate member name"));
            }
            frame.members.clear();
            frame.members.extend(keyed.into_iter().map(|(_, m)| m));
        }
        // Rewrite the members after the `{` in their new order.
        let body = frame.start + 1;
        self.scratch.clear();
        self.scratch.extend_from_slice(&out[body..]);
        out.truncate(body);
        for (i, m) in frame.members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.scratch[m.key_start - body..m.value_end - body]);
        }
        Ok(())
    }

    fn member(&mut self) -> Result<&mut Member, Error> {
        self.frames.last_mut().and_then(|f| f.members.last_mut()).ok_or_else(|| Error::new("no member"))
    }
}

impl Style for Jcs {
    fn number(&mut self, out: &mut Vec<u8>, n: Number) -> Result<(), Error> {
        // JCS numbers are IEEE 754 doubles, printed as ECMAScript does; large integers lose precision exactly as they
        // would in a JavaScript signer.
        let value = match n {
            Number::U64(v) => v as f64,
            Number::I64(v) => v as f64,
            Number::U128(v) => v as f64,
            Number::I128(v) => v as f64,
            Number::F32(v) => f64::from(v),
            Number::F64(v) => v,
        };
        if !value.is_finite() {
            return Err(Error::new("NaN and infinities are not JSON"));
        }
        out.extend_from_slice(ryu_js::Buffer::new().format_finite(value).as_bytes());
        Ok(())
    }

    fn begin_object(&mut self, out: &mut Vec<u8>) {
        let members = self.spare.pop().unwrap_or_default();
        // The `{` is already written.
        self.frames.push(Frame { start: out.len() - 1, members });
    }

    fn begin_key(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let at = out.len();
        let frame = self.frames.last_mut().ok_or_else(|| Error::new("member outside an object"))?;
        frame.members.push(Member { key_start: at, key_end: at, value_end: at });
        Ok(())
    }

    fn end_key(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.member()?.key_end = out.len();
        Ok(())
    }

    fn end_value(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.member()?.value_end = out.len();
        Ok(())
    }

    fn end_object(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let Some(mut frame) = self.frames.pop() else { return Err(Error::new("unbalanced object")) };
        let result = self.sort_object(out, &mut frame);
        frame.members.clear();
        self.spare.push(frame.members);
        result
    }

    /// A raw fragment is canonicalised as it is parsed. One with duplicate member names (which no payload read from
    /// JSON text has: they are refused on decoding) fails, as any object with them does: there is no canonical form
    /// of an object whose readers disagree on its content.
    fn raw(&mut self, out: &mut Vec<u8>, json: &str) -> Result<(), Error> {
        let mut writer = Writer { out: &mut *out, style: std::mem::take(self) };
        let mut de = serde_json::Deserializer::from_str(json);
        let single_pass = Transcode(&mut writer).deserialize(&mut de).and_then(|()| de.end());
        *self = writer.style;
        single_pass.map_err(|e| Error::new(&e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc_8785_examples() {
        // RFC 8785 section 3.2.2 (numbers) and 3.2.3 (sorting).
        let v: serde_json::Value = serde_json::from_str(
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "literals": [null, true, false]}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(to_vec(&v).unwrap()).unwrap(),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}"#
        );
        let sorting = json!({"\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{80}": "Control", "\u{f6}": "Latin Small Letter O With Diaeresis"});
        let text = String::from_utf8(to_vec(&sorting).unwrap()).unwrap();
        let order: Vec<&str> = ["\\r", "1", "\u{80}", "\u{f6}", "\u{20ac}", "\u{1f600}", "\u{fb33}"].to_vec();
        let mut last = 0;
        for key in order {
            let at = text.find(&format!("\"{key}\":")).unwrap();
            assert!(at >= last, "{key} out of order in {text}");
            last = at;
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "[\\x00-\\x1f\"\\\\a-z\u{e9}\u{20ac}\u{1f600} ]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z\u{e9}\u{1f600}\"]{0,6}", inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn single_pass_from_text_equals_canonicalising_the_value(
            members in proptest::collection::btree_map("[a-z_]{0,10}", any_json(), 0..6),
            signature in proptest::option::of(any_json()),
        ) {
            let mut object: serde_json::Map<String, serde_json::Value> = members.into_iter().collect();
            if let Some(s) = signature {
                object.insert("signature".into(), s);
            }
            let value = serde_json::Value::Object(object);
            let text = serde_json::to_vec_pretty(&value).unwrap();
            let (canonical, sig) =
                with_signing_input_from_slice(&text, |canonical, sig, _| (canonical.to_vec(), sig.cloned())).unwrap();
            let expected = crate::signing::canonical_signing_input_value(&value).unwrap();
            proptest::prop_assert_eq!(canonical, expected);
            proptest::prop_assert_eq!(sig.as_ref(), value.get("signature"));
        }
    }

    #[test]
    fn nested_objects_are_sorted_and_escapes_are_minimal() {
        let v = json!({"b": {"z": 1, "a": [{"y": "\u{1}\n/", "x": 2}]}, "a": "é"});
        assert_eq!(
            String::from_utf8(to_vec(&v).unwrap()).unwrap(),
            "{\"a\":\"é\",\"b\":{\"a\":[{\"x\":2,\"y\":\"\\u0001\\n/\"}],\"z\":1}}"
        );
    }

    #[test]
    fn duplicate_members_fail_and_non_finite_numbers_are_null() {
        struct Dup;
        impl Serialize for Dup {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("a", &1)?;
                m.serialize_entry("a", &2)?;
                m.end()
            }
        }
        assert!(to_vec(&Dup).is_err());
        // serde_json writes non-finite floats as null before they reach the formatter; so does the reference crate.
        assert_eq!(to_vec(&[f64::NAN]).unwrap(), serde_json_canonicalizer::to_vec(&[f64::NAN]).unwrap());
    }
}
