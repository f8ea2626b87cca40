//! RFC 8785 (JCS) canonical JSON, written in one pass from any `Serialize` value.
//!
//! This is a `serde_json` [`Formatter`]: serde_json drives it and does the string escaping (which is already what JCS
//! requires: the two-character escapes, `\u00xx` in lowercase hex for other control characters, and nothing else).
//! The formatter writes into its own buffer; at the end of each object it sorts that object's members by their
//! UTF-16 code units and rewrites them in place. Numbers are written as ECMAScript would print the IEEE 754 double
//! (`ryu-js`), integers included. No intermediate `Value` is built.

use std::cmp::Ordering;
use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

/// The canonical bytes of `value`. Fails on non-finite numbers, duplicate member names and raw JSON fragments.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(2048);
    let formatter = JcsFormatter { out: &mut out, frames: Vec::new(), spare: Vec::new(), scratch: Vec::new() };
    let mut serializer = serde_json::Serializer::with_formatter(io::sink(), formatter);
    value.serialize(&mut serializer)?;
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

struct JcsFormatter<'a> {
    out: &'a mut Vec<u8>,
    frames: Vec<Frame>,
    /// Member lists of finished objects, reused.
    spare: Vec<Vec<Member>>,
    /// Copy of the object being sorted, reused.
    scratch: Vec<u8>,
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The member name as text: the escaped bytes between the quotes, unescaped when they contain an escape.
fn key_text(quoted: &[u8]) -> io::Result<String> {
    serde_json::from_slice::<String>(quoted).map_err(|_| invalid("member name is not a string"))
}

/// JCS member order: by UTF-16 code units.
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Whether a quoted member name is ASCII without escapes, so its bytes compare like its UTF-16 code units.
fn is_plain(quoted: &[u8]) -> bool {
    quoted.iter().all(|&b| b < 0x80 && b != b'\\')
}

impl JcsFormatter<'_> {
    fn write_number(&mut self, value: f64) -> io::Result<()> {
        if !value.is_finite() {
            return Err(invalid("NaN and infinities are not JSON"));
        }
        self.out.extend_from_slice(ryu_js::Buffer::new().format_finite(value).as_bytes());
        Ok(())
    }

    /// Puts the members of the object starting at `frame.start` (written as `{k:v,k:v`) in JCS order.
    fn sort_object(&mut self, frame: &mut Frame) -> io::Result<()> {
        let out = &*self.out;
        // The name without its quotes.
        let name = |m: &Member| &out[m.key_start + 1..m.key_end - 1];
        if frame.members.windows(2).all(|w| is_plain(name(&w[0])) && is_plain(name(&w[1])) && name(&w[0]) < name(&w[1]))
        {
            // Already in order (always true of `serde_json::Map`s of ASCII names): nothing to move.
            return Ok(());
        }
        if frame.members.iter().all(|m| is_plain(name(m))) {
            frame.members.sort_unstable_by(|a, b| name(a).cmp(name(b)));
            if frame.members.windows(2).any(|w| name(&w[0]) == name(&w[1])) {
                return Err(invalid("duplicate member name"));
            }
        } else {
            let mut keyed = Vec::with_capacity(frame.members.len());
            for m in &frame.members {
                keyed.push((key_text(&out[m.key_start..m.key_end])?, *m));
            }
            keyed.sort_by(|a, b| utf16_cmp(&a.0, &b.0));
            if keyed.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(invalid("duplicate member name"));
            }
            frame.members.clear();
            frame.members.extend(keyed.into_iter().map(|(_, m)| m));
        }
        // Rewrite the members after the `{` in their new order.
        let body = frame.start + 1;
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.out[body..]);
        self.out.truncate(body);
        for (i, m) in frame.members.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.extend_from_slice(&self.scratch[m.key_start - body..m.value_end - body]);
        }
        Ok(())
    }
}

macro_rules! as_double {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method<W: ?Sized + io::Write>(&mut self, _: &mut W, value: $ty) -> io::Result<()> {
            // JCS numbers are IEEE 754 doubles, printed as ECMAScript does; large integers lose precision exactly as
            // they would in a JavaScript signer.
            self.write_number(value as f64)
        })*
    };
}

impl Formatter for JcsFormatter<'_> {
    fn write_null<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn write_bool<W: ?Sized + io::Write>(&mut self, _: &mut W, value: bool) -> io::Result<()> {
        self.out.extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    as_double!(
        write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64, write_i128: i128,
        write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64, write_u128: u128,
        write_f32: f32, write_f64: f64
    );

    fn write_number_str<W: ?Sized + io::Write>(&mut self, _: &mut W, value: &str) -> io::Result<()> {
        let number: f64 = value.parse().map_err(|_| invalid("not a number"))?;
        self.write_number(number)
    }

    fn begin_string<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.push(b'"');
        Ok(())
    }

    fn end_string<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.push(b'"');
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, _: &mut W, fragment: &str) -> io::Result<()> {
        self.out.extend_from_slice(fragment.as_bytes());
        Ok(())
    }

    fn write_char_escape<W: ?Sized + io::Write>(&mut self, _: &mut W, escape: CharEscape) -> io::Result<()> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let short: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"/",
            CharEscape::Backspace => b"\\b",
            CharEscape::FormFeed => b"\\f",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::AsciiControl(byte) => {
                let hex = [b'\\', b'u', b'0', b'0', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]];
                self.out.extend_from_slice(&hex);
                return Ok(());
            }
        };
        self.out.extend_from_slice(short);
        Ok(())
    }

    fn write_byte_array<W: ?Sized + io::Write>(&mut self, w: &mut W, value: &[u8]) -> io::Result<()> {
        self.begin_array(w)?;
        for (i, byte) in value.iter().enumerate() {
            self.begin_array_value(w, i == 0)?;
            self.write_u8(w, *byte)?;
        }
        self.end_array(w)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.push(b'[');
        Ok(())
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.push(b']');
        Ok(())
    }

    fn begin_array_value<W: ?Sized + io::Write>(&mut self, _: &mut W, first: bool) -> io::Result<()> {
        if !first {
            self.out.push(b',');
        }
        Ok(())
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        let members = self.spare.pop().unwrap_or_default();
        self.frames.push(Frame { start: self.out.len(), members });
        self.out.push(b'{');
        Ok(())
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        let Some(mut frame) = self.frames.pop() else { return Err(invalid("unbalanced object")) };
        let result = self.sort_object(&mut frame);
        self.out.push(b'}');
        frame.members.clear();
        self.spare.push(frame.members);
        result
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, _: &mut W, first: bool) -> io::Result<()> {
        if !first {
            self.out.push(b',');
        }
        let at = self.out.len();
        let frame = self.frames.last_mut().ok_or_else(|| invalid("member outside an object"))?;
        frame.members.push(Member { key_start: at, key_end: at, value_end: at });
        Ok(())
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        let at = self.out.len();
        let member = self.frames.last_mut().and_then(|f| f.members.last_mut()).ok_or_else(|| invalid("no member"))?;
        member.key_end = at;
        Ok(())
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        self.out.push(b':');
        Ok(())
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        let at = self.out.len();
        let member = self.frames.last_mut().and_then(|f| f.members.last_mut()).ok_or_else(|| invalid("no member"))?;
        member.value_end = at;
        Ok(())
    }

    fn write_raw_fragment<W: ?Sized + io::Write>(&mut self, _: &mut W, _: &str) -> io::Result<()> {
        Err(invalid("raw JSON fragments cannot be canonicalised"))
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
