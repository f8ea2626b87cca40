//! Helpers shared by the fuzz targets in `fuzz_targets/`.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Whether `json` is one JSON text in which no object names a member twice (at any depth).
///
/// Oracles that compare a text path with a `serde_json::Value` path need this: a `Value` keeps the last of two
/// members with one name, and the text paths are entitled to refuse such input instead, so the two are only
/// comparable on texts without duplicates.
pub fn is_json_without_duplicates(json: &[u8]) -> bool {
    let mut de = serde_json::Deserializer::from_slice(json);
    de::Deserialize::deserialize(&mut de).map(|NoDuplicates| ()).and_then(|()| de.end()).is_ok()
}

struct NoDuplicates;

impl<'de> de::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicates, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicates, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate member name"));
            }
            map.next_value::<NoDuplicates>()?;
        }
        Ok(NoDuplicates)
    }
}

/// Splits `data` into a small selector (its first `n` bytes, zero-padded) and the rest.
pub fn split_selector<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut selector = [0u8; N];
    let cut = data.len().min(N);
    selector[..cut].copy_from_slice(&data[..cut]);
    (selector, &data[cut..])
}
