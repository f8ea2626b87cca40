#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The committed JSON Schemas under `schema/` are current, and they describe what the decoder accepts: every message
//! of the RFC transcript and of both reference SDKs' golden vectors validates, and broken messages do not.
//!
//! Regenerate the committed files with `UPDATE_SCHEMAS=1 cargo test -p ldp-types --test integration schemas::`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use jsonschema::Validator;
use ldp_types::schema::{self, all_schemas, envelope_schema, identity_card_schema, message_body_schema};
use ldp_types::{Capability, Envelope, IdentityCard, MessageType};
use serde_json::{Value, json};

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("schema")
}

fn committed_files(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            committed_files(&entry.path(), &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".json") {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

/// The value with every object's keys sorted, so the files do not depend on serde_json's `preserve_order` feature.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(obj) => {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&obj[k]))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn render(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(schema)).unwrap();
    text.push('\n');
    text
}

#[test]
fn committed_schemas_are_current() {
    let dir = schema_dir();
    let generated = all_schemas();
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        let mut existing = BTreeSet::new();
        committed_files(&dir, "", &mut existing);
        for stale in existing {
            std::fs::remove_file(dir.join(stale)).unwrap();
        }
        for (path, schema) in &generated {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, render(schema)).unwrap();
        }
    }
    let mut stale = Vec::new();
    for (path, schema) in &generated {
        // Compared as JSON values: key order and formatting are not significant.
        match std::fs::read_to_string(dir.join(path)).map(|t| serde_json::from_str::<Value>(&t)) {
            Ok(Ok(committed)) if &committed == schema => {}
            Ok(_) => stale.push(format!("{path} differs")),
            Err(_) => stale.push(format!("{path} is missing")),
        }
    }
    let mut committed = BTreeSet::new();
    committed_files(&dir, "", &mut committed);
    let expected: BTreeSet<String> = generated.iter().map(|(p, _)| p.clone()).collect();
    stale.extend(committed.difference(&expected).map(|p| format!("{p} is not generated any more")));
    assert!(
        stale.is_empty(),
        "schema/ is stale ({}); run UPDATE_SCHEMAS=1 cargo test -p ldp-types --test integration schemas::",
        stale.join(", ")
    );
}

#[test]
fn every_schema_is_a_valid_2020_12_schema() {
    for (path, schema) in all_schemas() {
        assert_eq!(schema["$schema"], schema::DIALECT, "{path}");
        jsonschema::meta::validate(&schema).unwrap_or_else(|e| panic!("{path}: {e}"));
        jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

fn validator(schema: &Value) -> Validator {
    jsonschema::validator_for(schema).unwrap()
}

fn assert_valid(v: &Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = v.iter_errors(instance).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{what} should validate: {errors:?}\n{instance}");
}

fn flow() -> Vec<Value> {
    serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap()
}

fn golden(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every golden envelope as received: the `wire` text parsed, plus the Rust server's inputs.
fn golden_envelopes() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for file in ["python_ref_vectors.json", "rust_ref_vectors.json"] {
        let doc = golden(file);
        for vector in doc["vectors"].as_array().unwrap() {
            let name = format!("{file}:{}", vector["name"].as_str().unwrap());
            let wire: Value = serde_json::from_str(vector["wire"].as_str().unwrap()).unwrap();
            out.push((name.clone(), wire));
            if vector["sdk_input"].is_object() {
                out.push((format!("{name}:sdk_input"), vector["sdk_input"].clone()));
            }
        }
    }
    out
}

fn message_type(envelope: &Value) -> MessageType {
    envelope["body"]["type"].as_str().unwrap().parse().unwrap()
}

#[test]
fn flow_messages_validate() {
    let env = validator(&envelope_schema());
    let body = validator(&schema::body_schema());
    for message in flow() {
        assert_valid(&env, &message, "flow envelope");
        assert_valid(&body, &message["body"], "flow body");
        assert_valid(&validator(&message_body_schema(message_type(&message))), &message["body"], "flow body by type");
        // What we send back validates too.
        let ours = Envelope::from_value(message).unwrap().to_value().unwrap();
        assert_valid(&env, &ours, "re-encoded flow envelope");
    }
}

#[test]
fn golden_vectors_validate() {
    let env = validator(&envelope_schema());
    let vectors = golden_envelopes();
    assert!(vectors.len() > 80, "expected both SDKs' vectors, got {}", vectors.len());
    for (name, message) in vectors {
        Envelope::from_value(message.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_valid(&env, &message, &name);
        let by_type = validator(&message_body_schema(message_type(&message)));
        assert_valid(&by_type, &message["body"], &name);
    }
}

#[test]
fn golden_identity_cards_and_capabilities_validate() {
    let card = validator(&identity_card_schema());
    let capability = validator(&schema::schema_for::<Capability>());
    for file in ["python_ref_vectors.json", "rust_ref_vectors.json"] {
        let doc = golden(file);
        assert_valid(&card, &doc["identity_card"], file);
        IdentityCard::from_json(&doc["identity_card"].to_string()).unwrap();
        let caps = doc["capabilities_response"]["capabilities"].as_array().unwrap();
        assert!(!caps.is_empty());
        for c in caps {
            assert_valid(&capability, c, file);
        }
    }
}

fn submit() -> Value {
    flow()[4].clone()
}

/// Liberal forms the reference SDKs send must validate (and decode).
#[test]
fn liberal_forms_validate() {
    let env = validator(&envelope_schema());
    let mut string_error = submit();
    string_error["body"] = json!({"type": "TASK_FAILED", "task_id": "t", "error": "boom"});
    let mut python_nulls = submit();
    for member in ["delegate_id", "config", "error", "output", "provenance", "contract", "progress", "claim"] {
        python_nulls["body"][member] = Value::Null;
    }
    python_nulls["signature"] = Value::Null;
    python_nulls["signature_algorithm"] = Value::Null;
    python_nulls["session_id"] = Value::Null;
    let mut unknown_type = submit();
    unknown_type["body"] = json!({"type": "GOSSIP", "rumour": 1});
    let mut extension = submit();
    extension["x_trace"] = json!({"hop": 2});
    let mut no_mode = submit();
    no_mode.as_object_mut().unwrap().remove("payload_mode");
    for (what, message) in [
        ("string error", string_error),
        ("python nulls", python_nulls),
        ("unknown type", unknown_type),
        ("extension", extension),
        ("no payload mode", no_mode),
    ] {
        Envelope::from_value(message.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_valid(&env, &message, what);
    }
    let card = validator(&identity_card_schema());
    let mut c = golden("python_ref_vectors.json")["identity_card"].clone();
    c["trust_domain"] = json!("research.internal");
    IdentityCard::from_json(&c.to_string()).unwrap();
    assert_valid(&card, &c, "string trust domain");
}

/// Each broken message is refused by the decoder and by the schema.
#[test]
fn broken_messages_do_not_validate() {
    let env = validator(&envelope_schema());
    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mutate = |f: &dyn Fn(&mut Value)| {
        let mut m = submit();
        f(&mut m);
        m
    };
    cases.push(("no body", mutate(&|m| drop(m.as_object_mut().unwrap().remove("body")))));
    cases.push(("no message_id", mutate(&|m| drop(m.as_object_mut().unwrap().remove("message_id")))));
    cases.push(("null timestamp", mutate(&|m| m["timestamp"] = Value::Null)));
    cases.push(("numeric from", mutate(&|m| m["from"] = json!(7))));
    cases.push(("unknown payload mode", mutate(&|m| m["payload_mode"] = json!("binary"))));
    cases.push(("body without type", mutate(&|m| drop(m["body"].as_object_mut().unwrap().remove("type")))));
    cases.push(("submit without skill", mutate(&|m| drop(m["body"].as_object_mut().unwrap().remove("skill")))));
    cases.push(("submit with null task_id", mutate(&|m| m["body"]["task_id"] = Value::Null)));
    cases.push(("mistyped unused member", mutate(&|m| m["body"]["progress"] = json!("half"))));
    cases.push(("contract without id", mutate(&|m| m["body"]["contract"] = json!({"objective": "x"}))));
    cases.push(("bad error category", mutate(&|m| m["body"]["error"] = json!({"code": "X", "category": "weird"}))));
    cases.push((
        "confidence out of range",
        mutate(&|m| {
            m["provenance"] =
                json!({"produced_by": "d", "model_version": "v", "payload_mode_used": "text", "confidence": 1.5})
        }),
    ));
    cases.push(("result without provenance", mutate(&|m| m["body"] = json!({"type": "TASK_RESULT", "task_id": "t"}))));
    cases.push(("accept without mode", mutate(&|m| m["body"] = json!({"type": "SESSION_ACCEPT", "session_id": "s"}))));
    cases.push(("body is a string", mutate(&|m| m["body"] = json!("TASK_SUBMIT"))));
    cases.push(("envelope is an array", json!([submit()])));
    for (what, message) in cases {
        assert!(Envelope::from_value(message.clone()).is_err(), "decoder accepted {what}");
        assert!(!env.is_valid(&message), "schema accepted {what}: {message}");
    }

    let card = validator(&identity_card_schema());
    let good = golden("python_ref_vectors.json")["identity_card"].clone();
    for (what, field, value) in [
        ("bad delegate id", "delegate_id", json!("alice")),
        ("whitespace in delegate id", "delegate_id", json!("ldp:delegate:a b")),
        ("unknown payload mode in card", "supported_payload_modes", json!(["binary"])),
        ("negative context window", "context_window", json!(-1)),
        ("null trust domain", "trust_domain", Value::Null),
    ] {
        let mut c = good.clone();
        c[field] = value;
        assert!(IdentityCard::from_json(&c.to_string()).is_err(), "decoder accepted {what}");
        assert!(!card.is_valid(&c), "schema accepted {what}");
    }
}
