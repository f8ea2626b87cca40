//! The contract predicate parser (`ldp_types::criteria`) on arbitrary input: it never panics, refuses with a typed
//! error or parses, and whatever parses evaluates on any JSON value without panicking, in bounded time.
#![allow(clippy::unwrap_used)]

use ldp_types::Error;
use ldp_types::criteria::Criterion;
use proptest::prelude::*;
use serde_json::Value;

/// Fragments of the language, so that random predicates get past the first token often.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("words".to_owned()),
        Just("chars(".to_owned()),
        Just("items(a)".to_owned()),
        Just("has a, b.0".to_owned()),
        Just("json".to_owned()),
        Just("schema {\"type\":\"object\"}".to_owned()),
        Just("matches /a+b/".to_owned()),
        Just("between 1 and 2".to_owned()),
        Just("in [x, \"y\", 3]".to_owned()),
        Just(" and ".to_owned()),
        Just(" or ".to_owned()),
        Just("not ".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just("<= 3".to_owned()),
        Just("== \"z\"".to_owned()),
        Just("a.b".to_owned()),
        Just("$".to_owned()),
        "\\PC{0,8}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1e6f64..1e6).prop_map(|f| serde_json::json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[ab0-2]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parsing_never_panics_and_parsed_predicates_evaluate(parts in prop::collection::vec(fragment(), 0..10), output in json_value()) {
        let text = format!("check: {}", parts.concat());
        match Criterion::parse(&text) {
            Ok(Some(criterion)) => {
                // Whatever parses evaluates to a verdict on any value.
                let _ = criterion.evaluate(&output);
                prop_assert_eq!(criterion.source(), text.trim());
            }
            Ok(None) => prop_assert!(false, "a check: entry was taken as free-form: {}", text),
            Err(Error::InvalidCriterion { .. }) => {}
            Err(other) => prop_assert!(false, "an untyped refusal: {}", other),
        }
    }

    #[test]
    fn arbitrary_text_is_free_form_or_a_typed_answer(text in "\\PC{0,64}") {
        match Criterion::parse(&text) {
            Ok(None) => prop_assert!(!text.trim_start().starts_with("check:")),
            Ok(Some(_)) | Err(Error::InvalidCriterion { .. }) => prop_assert!(text.trim_start().starts_with("check:")),
            Err(other) => prop_assert!(false, "an untyped refusal: {}", other),
        }
    }
}
