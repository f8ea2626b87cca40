//! Envelope decoding: the scanner fast path (inside `Envelope::from_slice`) against the plain serde decoder.
//!
//! Oracle: both accept with the same envelope, or both refuse (the error variants are not compared: which typed
//! error a refusal gets may change, that both refuse may not). The one allowance: a text with a duplicate member
//! name may be refused by the entry points where the serde decoder alone accepts it. Whatever decodes re-encodes, decodes back to the
//! same envelope, and encodes to the same bytes again; the hand-written encoder writes what `Serialize` writes.
#![no_main]

use ldp_fuzz::is_json_without_duplicates;
use ldp_types::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = Envelope::from_slice(data);
    let serde_path = serde_json::from_slice::<Envelope>(data);
    match (&ours, &serde_path) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the scanner and serde decode to different envelopes"),
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => panic!("the fast path accepts what serde refuses ({e})"),
        // A text that names a member twice may be refused before decoding (the public entry points check for
        // duplicates; a bare `Deserialize` cannot see them all).
        (Err(_), Ok(_)) if !is_json_without_duplicates(data) => {}
        (Err(e), Ok(_)) => panic!("the fast path refuses what serde accepts ({e})"),
    }
    // The text path and the `&str` entry point are one decoder.
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(Envelope::from_json(text).ok(), ours.as_ref().ok().cloned());
        let _ = ldp_types::_scanner_decodes(text);
    }
    // The `Value` path: only that it returns (a `Value` has already resolved duplicate members, so it may accept
    // what the text paths refuse).
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = Envelope::from_value_ref(&value);
    }

    let Ok(envelope) = ours else { return };
    let bytes = envelope.to_vec().expect("a decoded envelope encodes");
    assert_eq!(serde_json::to_vec(&envelope).expect("Serialize"), bytes, "to_vec and Serialize write different bytes");
    let back = Envelope::from_slice(&bytes).expect("what the encoder writes decodes");
    assert_eq!(back, envelope, "encode then decode changed the envelope");
    assert_eq!(back.to_vec().expect("re-encode"), bytes, "encoding is not stable");
    if let Ok(value) = envelope.to_value() {
        assert_eq!(Envelope::from_value(value).expect("to_value decodes"), envelope);
    }
});
