//! Signature verification under each algorithm (`hmac-sha256`, `hmac-sha256-jcs`, `ed25519-jcs`).
//!
//! Input: three selector bytes, then an envelope text.
//! - Any bytes, as a signed envelope, under every key and entry point: a verdict, never a panic. On a text without
//!   duplicate members `verify_slice` and `verify_value` give the same verdict (as `verify_slice` promises).
//! - Where the text decodes to an envelope: signing it and verifying it holds through every entry point (the
//!   envelope, its encoded text, its `Value`, and the envelope decoded back from the text).
//! - One byte of the signed text changed (where the selector says): verification fails or decoding fails, unless
//!   the change left the signed content as it was (e.g. `1e5` spelt `1E5`, or a hex digit's case in the
//!   signature itself). For the legacy `hmac-sha256`, the signed content is its pipe-joined fields only.
#![no_main]

use std::sync::LazyLock;

use ldp_fuzz::{is_json_without_duplicates, split_selector};
use ldp_types::Envelope;
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey, VerifyingKey};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// One key per algorithm, with its verifying key. Built once: deriving the Ed25519 public key is a scalar
/// multiplication, a cost (and coverage) per input that tells nothing about the input.
static KEYS: LazyLock<[(SigningKey, VerifyingKey); 3]> = LazyLock::new(|| {
    [
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "fuzz-secret").expect("secret"),
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "fuzz-secret").expect("secret"),
        SigningKey::ed25519_from_seed(&[7; 32]),
    ]
    .map(|key| {
        let verifying = key.verifying_key();
        (key, verifying)
    })
});

fuzz_target!(|data: &[u8]| {
    let keys = &*KEYS;
    let ([at_low, at_high, flip], text) = split_selector::<3>(data);
    // Arbitrary bytes: verdicts only.
    let value = serde_json::from_slice::<Value>(text).ok();
    let comparable = value.is_some() && is_json_without_duplicates(text);
    for (_, verifying) in keys {
        let from_text = signing::verify_slice(text, verifying);
        if let Some(value) = &value {
            let from_value = signing::verify_value(value, verifying);
            if comparable {
                assert_eq!(
                    from_text.is_ok(),
                    from_value.is_ok(),
                    "verify_slice {from_text:?}, verify_value {from_value:?}"
                );
            }
        }
    }
    let Ok(envelope) = Envelope::from_slice(text) else { return };
    for (_, verifying) in keys {
        let _ = signing::verify(&envelope, verifying);
    }

    // Sign, then verify every way.
    for (key, verifying) in keys {
        let mut signed = envelope.clone();
        if signing::sign(&mut signed, key).is_err() {
            continue;
        }
        signing::verify(&signed, verifying).expect("a signed envelope verifies");
        let Ok(bytes) = signed.to_vec() else { continue };
        signing::verify_slice(&bytes, verifying).expect("a signed envelope's text verifies");
        if let Ok(value) = signed.to_value() {
            signing::verify_value(&value, verifying).expect("a signed envelope's value verifies");
        }
        let back = Envelope::from_slice(&bytes).expect("a signed envelope's text decodes");
        signing::verify(&back, verifying).expect("a signed envelope decoded again verifies");

        // One byte changed.
        let mut damaged = bytes.clone();
        let at = usize::from(u16::from_le_bytes([at_low, at_high])) % damaged.len();
        damaged[at] ^= flip.max(1);
        if signing::verify_slice(&damaged, verifying).is_err() {
            continue;
        }
        assert!(
            same_signed_content(key.algorithm(), &bytes, &damaged),
            "{:?} verified a changed message\nsigned:  {}\nchanged: {}",
            key.algorithm(),
            String::from_utf8_lossy(&bytes),
            String::from_utf8_lossy(&damaged)
        );
    }
});

/// Whether two texts carry the same content under `algorithm`'s signature.
fn same_signed_content(algorithm: SignatureAlgorithm, signed: &[u8], changed: &[u8]) -> bool {
    match algorithm {
        SignatureAlgorithm::HmacSha256 => {
            // As `verify_slice` reads this algorithm's input: the envelope decoded from the parsed `Value`.
            let decode = |text: &[u8]| {
                serde_json::from_slice::<Value>(text).ok().and_then(|v| Envelope::from_value_ref(&v).ok())
            };
            let (Some(a), Some(b)) = (decode(signed), decode(changed)) else { return false };
            signing::legacy_signing_input(&a) == signing::legacy_signing_input(&b)
        }
        _ => {
            let (Ok(a), Ok(b)) = (serde_json::from_slice::<Value>(signed), serde_json::from_slice::<Value>(changed))
            else {
                return false;
            };
            match (signing::canonical_signing_input_value(&a), signing::canonical_signing_input_value(&b)) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        }
    }
}
