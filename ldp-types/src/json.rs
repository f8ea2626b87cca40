//! A JSON writer for any `Serialize` value, used for envelopes (compact, byte for byte what `serde_json::to_vec`
//! writes) and for JCS signing input (see `jcs`).
//!
//! Why not `serde_json`'s serializer: it escapes strings one byte at a time through a lookup table, which was most of
//! the cost of encoding an envelope (mostly string content) and of canonicalising one for a signature. This writer
//! skips eight bytes at a time while none of them needs escaping, and copies runs with one `extend_from_slice`. It
//! writes into a `Vec<u8>` only. The escapes are serde_json's (and RFC 8785's): `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
//! `\t`, `\u00xx` with lowercase hex for other control characters, nothing else. Non-finite floats are written as
//! `null`, as serde_json does.
//!
//! What differs between the two outputs (number formatting, member order) is a [`Style`].

use std::fmt;

use serde::ser::{self, Serialize};

/// A serialisation failure (unsupported key type, duplicate member, ...).
#[derive(Debug)]
pub(crate) struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

impl Error {
    pub(crate) fn new(msg: &str) -> Self {
        Self(msg.to_owned())
    }

    /// As the `serde_json::Error` the public API reports.
    pub(crate) fn into_serde_json(self) -> serde_json::Error {
        <serde_json::Error as ser::Error>::custom(self.0)
    }
}

/// A finite number, as serde hands it over.
#[derive(Clone, Copy)]
pub(crate) enum Number {
    U64(u64),
    I64(i64),
    U128(u128),
    I128(i128),
    F32(f32),
    F64(f64),
}

/// What differs between output formats: numbers, and what happens around object members.
pub(crate) trait Style {
    /// Writes a number (never NaN or infinite).
    fn number(&mut self, out: &mut Vec<u8>, n: Number) -> Result<(), Error>;

    /// Called after `{` is written.
    fn begin_object(&mut self, _out: &mut Vec<u8>) {}

    /// Called before a member name (after the `,` that separates it from the previous member).
    fn begin_key(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Called after a member name, before its `:`.
    fn end_key(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Called after a member value.
    fn end_value(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Called before the `}` is written.
    fn end_object(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Writes a raw JSON fragment ([`crate::RawJson`]): one valid JSON value, as text.
    fn raw(&mut self, out: &mut Vec<u8>, json: &str) -> Result<(), Error> {
        out.extend_from_slice(json.as_bytes());
        Ok(())
    }
}

/// serde_json's compact output.
pub(crate) struct Compact;

impl Style for Compact {
    fn number(&mut self, out: &mut Vec<u8>, n: Number) -> Result<(), Error> {
        match n {
            Number::U64(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
            Number::I64(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
            Number::U128(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
            Number::I128(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
            // serde_json's own float formatter, so the digits are its own (property-tested against it).
            Number::F32(v) => out.extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes()),
            Number::F64(v) => out.extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes()),
        }
        Ok(())
    }
}

/// Compact JSON of `value`, the same bytes as `serde_json::to_vec`, appended to `out`.
pub(crate) fn write_compact<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(&mut Writer { out, style: Compact })
}

/// Whether any of the eight bytes of `word` is a control character, `"` or `\\`.
pub(crate) fn needs_escape(word: u64) -> bool {
    escape_flags(word) != 0
}

/// The high bit of each byte of `word` (read little-endian) that is a control character, `"` or `\\`, and possibly
/// of bytes after the first such byte; the lowest set bit is always exact.
pub(crate) fn escape_flags(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of a byte of `below(x, n)` is set for some byte exactly when some byte of `x` is below `n`
    // (n <= 0x80): the classic word-at-a-time test. A zero byte of `word ^ (ONES * c)` is a byte equal to `c`.
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x;
    // Flipping bit 1 of every byte maps `"` (0x22) to 0x20 and keeps 0x00-0x1f below 0x20 while every other byte
    // stays at 0x21 or above, so one test finds control characters and quotes.
    let flags = below(word ^ (ONES * 0x02), 0x21) | below(word ^ (ONES * u64::from(b'\\')), 1);
    flags & HIGH
}

/// The escape sequence of a byte, if it needs one.
fn escape(byte: u8) -> Option<&'static [u8]> {
    Some(match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0c => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x00..=0x1f => return Some(CONTROL[usize::from(byte)]),
        _ => return None,
    })
}

/// `\u00xx` for every control character (those with a short escape are never looked up here).
const CONTROL: [&[u8]; 32] = [
    b"\\u0000", b"\\u0001", b"\\u0002", b"\\u0003", b"\\u0004", b"\\u0005", b"\\u0006", b"\\u0007", b"\\u0008",
    b"\\u0009", b"\\u000a", b"\\u000b", b"\\u000c", b"\\u000d", b"\\u000e", b"\\u000f", b"\\u0010", b"\\u0011",
    b"\\u0012", b"\\u0013", b"\\u0014", b"\\u0015", b"\\u0016", b"\\u0017", b"\\u0018", b"\\u0019", b"\\u001a",
    b"\\u001b", b"\\u001c", b"\\u001d", b"\\u001e", b"\\u001f",
];

/// How many leading bytes of `bytes`, in whole eight-byte words, need no escape.
fn clean_words(bytes: &[u8]) -> usize {
    let mut clean = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else { break };
        if needs_escape(u64::from_le_bytes(word)) {
            break;
        }
        clean += 8;
    }
    clean
}

/// The eight bytes of `bytes` from `at` (which must leave eight).
pub(crate) fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    if let Some(chunk) = bytes.get(at..at + 8) {
        word.copy_from_slice(chunk);
    }
    u64::from_le_bytes(word)
}

/// Whether no byte of `bytes` needs an escape: whole words, then the last eight bytes again (overlapping what was
/// checked) instead of a byte loop or a padded copy of the tail.
fn is_clean(bytes: &[u8]) -> bool {
    let len = bytes.len();
    if len < 8 {
        return bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\');
    }
    let mut at = 0;
    while at + 8 <= len {
        if needs_escape(word_at(bytes, at)) {
            return false;
        }
        at += 8;
    }
    at == len || !needs_escape(word_at(bytes, len - 8))
}

/// Writes `s` as a JSON string.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    // Nearly every string in a message needs no escape: one check, one copy.
    if is_clean(bytes) {
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        i += clean_words(&bytes[i..]);
        let tail = &bytes[i..];
        if tail.len() < 8 {
            // Test the last few bytes as one word too, padded with bytes that need no escape.
            let mut word = [b' '; 8];
            word[..tail.len()].copy_from_slice(tail);
            if !needs_escape(u64::from_le_bytes(word)) {
                break;
            }
        }
        let Some(&byte) = bytes.get(i) else { break };
        if byte < 0x20 || byte == b'"' || byte == b'\\' {
            out.extend_from_slice(&bytes[run..i]);
            out.extend_from_slice(escape(byte).unwrap_or_default());
            run = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// The serializer.
pub(crate) struct Writer<'o, S> {
    pub(crate) out: &'o mut Vec<u8>,
    pub(crate) style: S,
}

impl<S: Style> Writer<'_, S> {
    fn float(&mut self, n: Number, finite: bool) -> Result<(), Error> {
        if finite {
            self.style.number(self.out, n)
        } else {
            self.out.extend_from_slice(b"null");
            Ok(())
        }
    }

    pub(crate) fn begin_object(&mut self) {
        self.out.push(b'{');
        self.style.begin_object(self.out);
    }

    /// `{"variant":`, the head of an externally tagged enum variant with fields.
    fn begin_variant(&mut self, variant: &str) -> Result<(), Error> {
        self.begin_object();
        self.begin_key(&mut true)?;
        write_str(self.out, variant);
        self.end_key()
    }

    pub(crate) fn end_object(&mut self) -> Result<(), Error> {
        self.style.end_object(self.out)?;
        self.out.push(b'}');
        Ok(())
    }

    pub(crate) fn begin_key(&mut self, first: &mut bool) -> Result<(), Error> {
        if !std::mem::replace(first, false) {
            self.out.push(b',');
        }
        self.style.begin_key(self.out)
    }

    pub(crate) fn end_key(&mut self) -> Result<(), Error> {
        self.style.end_key(self.out)?;
        self.out.push(b':');
        Ok(())
    }

    /// Called after a member value.
    pub(crate) fn end_value(&mut self) -> Result<(), Error> {
        self.style.end_value(self.out)
    }

    fn field<T: Serialize + ?Sized>(&mut self, first: &mut bool, key: &str, value: &T) -> Result<(), Error> {
        self.begin_key(first)?;
        write_str(self.out, key);
        self.end_key()?;
        value.serialize(&mut *self)?;
        self.style.end_value(self.out)
    }
}

/// What the serializer's compound methods return: the array or object they opened.
type Opened<'a, 'o, S> = Result<Compound<'a, 'o, S>, Error>;

/// An array or object being written.
pub(crate) struct Compound<'a, 'o, S> {
    w: &'a mut Writer<'o, S>,
    first: bool,
    /// Closes a `{"variant":` wrapper as well (tuple and struct variants).
    variant: bool,
    /// A raw JSON fragment: serde_json's marker struct, whose one field is the text to write.
    raw: bool,
}

impl<'a, 'o, S: Style> Compound<'a, 'o, S> {
    fn end_array(self) -> Result<(), Error> {
        self.w.out.push(b']');
        self.end_variant()
    }

    fn end_variant(self) -> Result<(), Error> {
        if self.variant {
            self.w.style.end_value(self.w.out)?;
            self.w.end_object()?;
        }
        Ok(())
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        if !std::mem::replace(&mut self.first, false) {
            self.w.out.push(b',');
        }
        value.serialize(&mut *self.w)
    }
}

/// The integer methods of a `Serializer`, each writing its value as the [`Number`] variant that holds it.
macro_rules! serialize_integers {
    ($($method:ident($int:ty) => $variant:ident),* $(,)?) => {
        $(fn $method(self, v: $int) -> Result<(), Error> {
            self.style.number(self.out, Number::$variant(v.into()))
        })*
    };
}

impl<'a, 'o, S: Style> ser::Serializer for &'a mut Writer<'o, S> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, 'o, S>;
    type SerializeTuple = Compound<'a, 'o, S>;
    type SerializeTupleStruct = Compound<'a, 'o, S>;
    type SerializeTupleVariant = Compound<'a, 'o, S>;
    type SerializeMap = Compound<'a, 'o, S>;
    type SerializeStruct = Compound<'a, 'o, S>;
    type SerializeStructVariant = Compound<'a, 'o, S>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    serialize_integers! {
        serialize_i8(i8) => I64, serialize_i16(i16) => I64, serialize_i32(i32) => I64, serialize_i64(i64) => I64,
        serialize_i128(i128) => I128, serialize_u8(u8) => U64, serialize_u16(u16) => U64, serialize_u32(u32) => U64,
        serialize_u64(u64) => U64, serialize_u128(u128) => U128,
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(Number::F32(v), v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(Number::F64(v), v.is_finite())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.begin_object();
        self.field(&mut true, variant, value)?;
        self.end_object()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a, 'o, S>, Error> {
        self.out.push(b'[');
        Ok(Compound { w: self, first: true, variant: false, raw: false })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'o, S>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a, 'o, S>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Opened<'a, 'o, S> {
        self.begin_variant(variant)?;
        self.out.push(b'[');
        Ok(Compound { w: self, first: true, variant: true, raw: false })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a, 'o, S>, Error> {
        self.begin_object();
        Ok(Compound { w: self, first: true, variant: false, raw: false })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, 'o, S>, Error> {
        if name == crate::raw::RAW_TOKEN {
            return Ok(Compound { w: self, first: true, variant: false, raw: true });
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Opened<'a, 'o, S> {
        self.begin_variant(variant)?;
        self.begin_object();
        Ok(Compound { w: self, first: true, variant: true, raw: false })
    }
}

/// The four array-shaped serializers: each element written by `element`, the array closed by `end_array`.
macro_rules! array_compound {
    ($($serializer:ident :: $method:ident),* $(,)?) => {$(
        impl<S: Style> ser::$serializer for Compound<'_, '_, S> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.end_array()
            }
        }
    )*};
}
array_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl<S: Style> ser::SerializeMap for Compound<'_, '_, S> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.w.begin_key(&mut self.first)?;
        key.serialize(KeyWriter(&mut *self.w))?;
        self.w.end_key()
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.w)?;
        self.w.style.end_value(self.w.out)
    }
    fn end(self) -> Result<(), Error> {
        self.w.end_object()
    }
}

impl<S: Style> ser::SerializeStruct for Compound<'_, '_, S> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if self.raw {
            return value.serialize(RawWriter(&mut *self.w));
        }
        self.w.field(&mut self.first, key, value)
    }
    fn end(self) -> Result<(), Error> {
        if self.raw {
            return Ok(());
        }
        self.w.end_object()
    }
}

impl<S: Style> ser::SerializeStructVariant for Compound<'_, '_, S> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.w.field(&mut self.first, key, value)
    }
    fn end(self) -> Result<(), Error> {
        self.w.end_object()?;
        self.end_variant()
    }
}

/// The parts of a `Serializer` that a serializer accepting only scalars shares: its associated types, every
/// compound (which it refuses with `$error`), and the scalar methods listed after the error, refused likewise.
macro_rules! scalar_only_serializer {
    ($error:expr; $($method:ident $(: $ty:ty)?),* $(,)?) => {
        type Ok = ();
        type Error = Error;
        type SerializeSeq = ser::Impossible<(), Error>;
        type SerializeTuple = ser::Impossible<(), Error>;
        type SerializeTupleStruct = ser::Impossible<(), Error>;
        type SerializeTupleVariant = ser::Impossible<(), Error>;
        type SerializeMap = ser::Impossible<(), Error>;
        type SerializeStruct = ser::Impossible<(), Error>;
        type SerializeStructVariant = ser::Impossible<(), Error>;

        $(fn $method(self $(, _: $ty)?) -> Result<(), Error> {
            Err($error)
        })*
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
            Err($error)
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
            Err($error)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), Error> {
            Err($error)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
            Err($error)
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
            Err($error)
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Error> {
            Err($error)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, Error> {
            Err($error)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
            Err($error)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
            Err($error)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, Error> {
            Err($error)
        }
    };
}

/// Member names: strings, and (as serde_json allows) integers, booleans and chars written as strings.
struct KeyWriter<'a, 'o, S>(&'a mut Writer<'o, S>);

macro_rules! quoted_keys {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Result<(), Error> {
            write_str(self.0.out, &v.to_string());
            Ok(())
        })*
    };
}

impl<S: Style> ser::Serializer for KeyWriter<'_, '_, S> {
    scalar_only_serializer!(Error::new("key must be a string");
        serialize_f32: f32, serialize_f64: f64, serialize_bytes: &[u8], serialize_none, serialize_unit);

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.0.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.0.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    quoted_keys!(
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
        serialize_u128: u128
    );
}

/// The text of a raw JSON fragment ([`crate::RawJson`]), handed to the style.
struct RawWriter<'a, 'o, S>(&'a mut Writer<'o, S>);

impl<S: Style> ser::Serializer for RawWriter<'_, '_, S> {
    scalar_only_serializer!(Error::new("a raw JSON fragment must be given as text");
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
        serialize_u128: u128, serialize_f32: f32, serialize_f64: f64, serialize_char: char,
        serialize_bytes: &[u8], serialize_none, serialize_unit);

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.style.raw(self.0.out, v)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Error> {
        Err(Error::new("a raw JSON fragment must be given as text"))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result<(), Error> {
        Err(Error::new("a raw JSON fragment must be given as text"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn compact(v: &impl Serialize) -> Vec<u8> {
        let mut out = Vec::new();
        write_compact(&mut out, v).unwrap();
        out
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            // Control characters, quotes, backslashes and non-ASCII text at every position of the 8-byte words.
            "[\\x00-\\x1f\"\\\\/a-z\u{7f}\u{e9}\u{20ac}\u{1f600} ]{0,40}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\x01\u{e9}]{0,12}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn compact_output_is_serde_json_output(v in any_json()) {
            prop_assert_eq!(compact(&v), serde_json::to_vec(&v).unwrap());
        }

        #[test]
        fn floats_are_written_as_serde_json_writes_them(double in any::<f64>(), single in any::<f32>()) {
            prop_assert_eq!(compact(&double), serde_json::to_vec(&double).unwrap());
            prop_assert_eq!(compact(&single), serde_json::to_vec(&single).unwrap());
        }
    }

    proptest! {
        #[test]
        fn escape_flags_finds_the_first_byte_to_escape(bytes in proptest::array::uniform8(any::<u8>())) {
            let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
            let flags = escape_flags(u64::from_le_bytes(bytes));
            match bytes.iter().position(|&b| needs(b)) {
                None => prop_assert_eq!(flags, 0),
                Some(first) => prop_assert_eq!(flags.trailing_zeros() as usize / 8, first),
            }
        }
    }

    #[test]
    fn escape_flags_flags_exactly_the_bytes_to_escape() {
        for byte in 0..=255u8 {
            for at in 0..8 {
                let mut word = [b'a'; 8];
                word[at] = byte;
                let flags = escape_flags(u64::from_le_bytes(word));
                let needs = byte < 0x20 || byte == b'"' || byte == b'\\';
                assert_eq!(flags != 0, needs, "byte {byte:#04x} at {at}");
                if needs {
                    assert_eq!(flags.trailing_zeros() as usize / 8, at);
                }
            }
        }
    }

    #[test]
    fn every_byte_escapes_as_serde_json_does() {
        let all: String = (0u8..=0x7f).map(char::from).chain(['é', '€', '😀']).collect();
        for s in [all.clone(), all.repeat(3), format!("abcdefg{all}"), "x".repeat(17)] {
            assert_eq!(compact(&s), serde_json::to_vec(&s).unwrap());
        }
    }

    #[test]
    fn serde_shapes_match_serde_json() {
        #[derive(serde::Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(u8, f32),
            Struct { a: Option<char> },
        }
        #[derive(serde::Serialize)]
        struct Newtype(i128);
        let mut keys = std::collections::BTreeMap::new();
        keys.insert(7u32, "seven");
        let v = (
            E::Unit,
            E::New(1),
            E::Tuple(2, 0.5),
            E::Struct { a: Some('"') },
            Newtype(-1),
            keys,
            [f64::NAN, f64::INFINITY, 1e21, -0.0],
            serde_bytes_like(),
            (),
        );
        assert_eq!(compact(&v), serde_json::to_vec(&v).unwrap());
        assert_eq!(compact(&json!({"a": [1, {"b": null}]})), br#"{"a":[1,{"b":null}]}"#);
        let mut bad = std::collections::BTreeMap::new();
        bad.insert(vec![1], 1);
        assert!(write_compact(&mut Vec::new(), &bad).is_err());
    }

    fn serde_bytes_like() -> Vec<u8> {
        vec![0, 255]
    }
}
