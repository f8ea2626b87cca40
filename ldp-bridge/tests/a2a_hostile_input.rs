//! What an A2A peer sends is never trusted to be well formed: the JSON-RPC parser and the 0.3 rewrites take
//! arbitrary input without panicking (the SSE reader's bound is checked in its own unit tests).
#![allow(clippy::unwrap_used)]

use ldp_bridge::a2a::rpc;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Arbitrary JSON, a few levels deep, with the member names the rewrites look at.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z_ -]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("message".to_owned()),
            Just("role".to_owned()),
            Just("parts".to_owned()),
            Just("file".to_owned()),
            Just("status".to_owned()),
            Just("state".to_owned()),
            Just("task".to_owned()),
            Just("statusUpdate".to_owned()),
            Just("artifactUpdate".to_owned()),
            Just("artifacts".to_owned()),
            Just("artifact".to_owned()),
            Just("configuration".to_owned()),
            Just("blocking".to_owned()),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn the_parser_takes_any_bytes(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = rpc::parse(&body);
    }

    #[test]
    fn the_parser_takes_any_json(value in json_value()) {
        let text = value.to_string();
        if let Ok(request) = rpc::parse(text.as_bytes()) {
            prop_assert!(request.params.is_object());
        }
    }

    #[test]
    fn the_v03_rewrites_take_any_json(value in json_value()) {
        let _ = rpc::params_from_v03(value.clone());
        let _ = rpc::task_v03(value.clone());
        let _ = rpc::event_v03(value);
    }
}
