//! RFC 8785 (JCS) canonical JSON, written in one pass from any `Serialize` value.
//!
//! This is a [`Style`] of the crate's JSON writer, which does the string escaping (which is already what JCS
//! requires: the two-character escapes, `\u00xx` in lowercase hex for other control characters, and nothing else).
//! At the end of each object the style sorts that object's members by their UTF-16 code units and rewrites them in
//! place. Numbers are written as ECMAScript would print the IEEE 754 double (`ryu-js`), integers included. No
//! intermediate `Value` is built.

use std::cmp::Ordering;

use serde::Serialize;

use crate::json::{Error, Number, Style, Writer};

/// The canonical bytes of `value`. Fails on duplicate member names and raw JSON fragments; non-finite numbers are
/// written as `null`, as serde_json (and the reference canonicaliser) write them.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(2048);
    let style = Jcs { frames: Vec::new(), spare: Vec::new(), scratch: Vec::new() };
    value.serialize(&mut Writer { out: &mut out, style }).map_err(Error::into_serde_json)?;
    Ok(out)
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
