//! LLMX parsing: any text gets a message or a typed error; what parses writes canonically and parses back to the
//! same message, and the canonical text is a fixed point. The bridge to LDP takes any parsed message without
//! panicking, and the envelopes it makes encode.
#![no_main]

use ldp_llmx::{BridgeConfig, Parser, parse, parse_all, to_ldp, write, write_all};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The byte entry point checks UTF-8 itself.
    let _ = Parser::new().parse_bytes(data);
    let Ok(text) = std::str::from_utf8(data) else { return };

    if let Ok(message) = parse(text) {
        let canonical = write(&message);
        let again = parse(&canonical).unwrap_or_else(|e| panic!("canonical text does not parse: {e}\n{canonical}"));
        assert_eq!(again, message, "parse -> write -> parse changed the message\n{canonical}");
        assert_eq!(write(&again), canonical, "the canonical text is not a fixed point");
        let _ = message.warnings();
        let cfg = BridgeConfig::new("s-fuzz", "2026-03-09T10:00:00Z");
        if let Ok(envelopes) = to_ldp(&message, &cfg) {
            for envelope in &envelopes {
                envelope.to_vec().expect("a bridged envelope encodes");
            }
            let _ = ldp_llmx::from_ldp(&envelopes, &cfg);
        }
    }
    if let Ok(messages) = parse_all(text) {
        let canonical = write_all(&messages);
        let again = parse_all(&canonical).unwrap_or_else(|e| panic!("canonical text does not parse: {e}\n{canonical}"));
        assert_eq!(again, messages, "parse_all -> write_all -> parse_all changed the messages\n{canonical}");
    }
});
