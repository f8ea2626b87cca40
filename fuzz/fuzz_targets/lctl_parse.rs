//! LCTL parsing (`parse`, which reads the YAML tree with `parse_yaml_value` and decodes it; `LctlAck::from_yaml`;
//! `receive_document`): any text gets a document or a typed error (no panic, no stack overflow on deep YAML, no alias
//! blow-up); every analysis of a parsed document returns; a parsed document writes as YAML and parses back to
//! the same document. The standalone `lctl_ack:` block round-trips the same way.
#![no_main]

use ldp_lctl::{LctlAck, RenderFormat, check_chain, check_document, failure_report, parallel_groups, parse, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // YAML parsing dominates the cost of an execution: each entry point below that parses is called only where it
    // can get further than `parse` (which `receive` also starts with).
    if text.contains("lctl_ack")
        && let Ok(ack) = LctlAck::from_yaml(text)
        && let Ok(yaml) = ack.to_yaml()
    {
        let again = LctlAck::from_yaml(&yaml).unwrap_or_else(|e| panic!("a written ack does not parse: {e}\n{yaml}"));
        assert_eq!(again, ack, "ack: to_yaml -> parse changed it\n{yaml}");
    }

    let Ok(document) = parse(text) else { return };
    let _ = check_document(&document);
    let _ = check_chain(&[document.clone(), document.clone()]);
    let _ = failure_report(&document);
    let _ = parallel_groups(&document);
    for format in [RenderFormat::Mermaid, RenderFormat::Dot, RenderFormat::Timeline] {
        let _ = render(&document, format);
    }
    let _ = ldp_lctl::receive_document(document.clone(), Some("fuzz-receiver"));
    let _ = ldp_lctl::receive_document(document.clone(), None);
    // Writing may refuse (a typed error), but what it writes must read back as the same document.
    if let Ok(yaml) = document.to_yaml() {
        let again = parse(&yaml).unwrap_or_else(|e| panic!("a written document does not parse: {e}\n{yaml}"));
        assert_eq!(again, document, "to_yaml -> parse changed the document\n{yaml}");
    }
});
