//! RFC 8785 (JCS) canonicalisation, through its public entry points in `ldp_types::signing`.
//!
//! Oracles, for any JSON text that parses:
//! - canonicalising never panics; where ours and `serde_json_canonicalizer` both accept, the bytes are equal;
//! - the canonical form is a fixed point: parsing and canonicalising it again gives the same bytes;
//! - the single-pass canonicaliser that `verify_slice` runs straight on the text agrees with the `Value` path: an
//!   object signed through the `Value` path (`sign_value`) verifies from its text, with the signature members
//!   spliced into the original text as it was (whitespace, escapes, number spellings and member order kept).
#![no_main]

use ldp_fuzz::is_json_without_duplicates;
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = serde_json::from_slice::<Value>(data) else {
        // Not JSON: the text path must still answer with a typed error.
        let _ = signing::verify_slice(data, &key().verifying_key());
        return;
    };
    // The signing input is an object; anything else is canonicalised as a member of one.
    let object = match &parsed {
        Value::Object(_) => parsed.clone(),
        other => Value::Object(Map::from_iter([("v".to_owned(), other.clone())])),
    };
    let mut unsigned = object.clone();
    if let Some(map) = unsigned.as_object_mut() {
        map.remove("signature");
        map.remove("signature_algorithm");
    }
    let ours = signing::canonical_signing_input_value(&object);
    if let (Ok(ours), Ok(reference)) = (&ours, serde_json_canonicalizer::to_vec(&unsigned)) {
        assert_eq!(
            String::from_utf8_lossy(ours),
            String::from_utf8_lossy(&reference),
            "ours and serde_json_canonicalizer disagree"
        );
    }
    if let Ok(ours) = &ours {
        let again: Value = serde_json::from_slice(ours).expect("canonical output is JSON");
        let twice = signing::canonical_signing_input_value(&again).expect("canonical output canonicalises");
        assert_eq!(String::from_utf8_lossy(ours), String::from_utf8_lossy(&twice), "not idempotent");
    }
    splice_and_verify(data, &parsed);
});

fn key() -> SigningKey {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "fuzz").expect("a valid secret")
}

/// Signs the parsed object through the `Value` path, writes the signature into the original text, and verifies that
/// text with the single-pass path.
fn splice_and_verify(text: &[u8], parsed: &Value) {
    let Some(members) = parsed.as_object() else { return };
    if members.contains_key("signature") || members.contains_key("signature_algorithm") {
        return;
    }
    if !is_json_without_duplicates(text) {
        return;
    }
    let key = key();
    let mut signed = parsed.clone();
    if signing::sign_value(&mut signed, &key).is_err() {
        return;
    }
    let signature = signed["signature"].as_str().unwrap_or_default();
    let Some(open) = text.iter().position(|&b| b == b'{') else { return };
    let fields = format!(r#""signature":"{signature}","signature_algorithm":"{}""#, key.algorithm().as_str());
    let mut spliced = text[..=open].to_vec();
    spliced.extend_from_slice(fields.as_bytes());
    if !members.is_empty() {
        spliced.push(b',');
    }
    if members.is_empty() {
        // `{ }`: the rest after the whitespace is the closing brace.
        let rest = &text[open + 1..];
        let close = rest.iter().position(|&b| b == b'}').unwrap_or(rest.len());
        spliced.extend_from_slice(&rest[close..]);
    } else {
        spliced.extend_from_slice(&text[open + 1..]);
    }
    let verdict = signing::verify_slice(&spliced, &key.verifying_key());
    assert!(
        verdict.is_ok(),
        "signed through the Value path, refused from the text: {verdict:?}\n{}",
        String::from_utf8_lossy(&spliced)
    );
}
