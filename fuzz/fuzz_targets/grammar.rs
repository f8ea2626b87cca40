//! JSON Schema to GBNF (`ldp_llm::grammar`): any JSON value gets a grammar or a typed error, within bounded time
//! and stack, as a schema and as a tool's input schema; a grammar starts with its `root` rule and defines every
//! rule it names. Any text gets a `ToolCallOutput` or a typed error from `parse_tool_call_output`.
#![no_main]

use std::collections::HashSet;

use ldp_llm::ToolSpec;
use ldp_llm::grammar::{parse_tool_call_output, schema_to_gbnf, tool_call_gbnf};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Every name used in a rule body is defined: a cheap check of the text llama.cpp will parse.
fn check(gbnf: &str) {
    assert!(gbnf.starts_with("root ::= "), "no root rule first:\n{gbnf}");
    let defined: HashSet<&str> = gbnf.lines().filter_map(|l| l.split_once(" ::= ").map(|(n, _)| n)).collect();
    for line in gbnf.lines() {
        let (_, body) = line.split_once(" ::= ").unwrap_or_else(|| panic!("not a rule: {line}"));
        // Names outside literals and classes: drop those first.
        let mut rest = String::new();
        let (mut in_lit, mut in_class, mut escaped) = (false, false, false);
        for c in body.chars() {
            match (in_lit, in_class, escaped, c) {
                (_, _, true, _) => escaped = false,
                (true, _, _, '\\') | (_, true, _, '\\') => escaped = true,
                (true, _, _, '"') => in_lit = false,
                (_, true, _, ']') => in_class = false,
                (false, false, _, '"') => in_lit = true,
                (false, false, _, '[') => in_class = true,
                (false, false, _, c) => rest.push(c),
                _ => {}
            }
        }
        for word in rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if word.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
                assert!(defined.contains(word), "rule {word} is used but not defined:\n{gbnf}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_tool_call_output(text);
    }
    let Ok(schema) = serde_json::from_slice::<Value>(data) else { return };
    if let Ok(gbnf) = schema_to_gbnf(&schema) {
        check(&gbnf);
    }
    let tools = [ToolSpec::new("t", "", schema.clone())];
    if let Ok(gbnf) = tool_call_gbnf(&tools, Some(&schema)) {
        check(&gbnf);
    }
});
