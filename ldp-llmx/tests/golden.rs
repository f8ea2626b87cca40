//! Golden files: the typed JSON view and the LDP envelopes of the spec's example messages, reviewed by hand once and
//! kept so that any change to either mapping shows up in review. Regenerate with `UPDATE_GOLDEN=1 cargo test -p
//! ldp-llmx --test integration golden::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_llmx::{BridgeConfig, parse, to_ldp};
use serde_json::{Value, json};

use crate::corpus;

fn check(name: &str, actual: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Some((n, (got, want))) = text.lines().zip(expected.lines()).enumerate().find(|(_, (a, b))| a != b) {
        panic!("{name} differs at line {}: got {got:?}, golden {want:?} (UPDATE_GOLDEN=1 if intended)", n + 1);
    }
    assert_eq!(text.lines().count(), expected.lines().count(), "{name}: length differs (UPDATE_GOLDEN=1 if intended)");
}

#[test]
fn spec_examples_typed_json_and_ldp_envelopes() {
    let cfg =
        BridgeConfig::new("550e8400-e29b-41d4-a716-446655440000", "2026-03-09T10:00:00Z").with_task_id("task-001");
    let mut typed = Vec::new();
    let mut bridged = Vec::new();
    for (name, text) in corpus::MESSAGES {
        let m = parse(text).unwrap();
        typed.push(json!({"example": name, "message": m}));
        bridged.push(match to_ldp(&m, &cfg) {
            Ok(envs) => {
                json!({"example": name, "envelopes": envs.iter().map(|e| e.to_value().unwrap()).collect::<Vec<_>>()})
            }
            Err(e) => json!({"example": name, "error": e.to_string()}),
        });
    }
    check("spec_examples.typed.json", &Value::Array(typed));
    check("spec_examples.ldp.json", &Value::Array(bridged));
}
