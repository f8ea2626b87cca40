#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! JSON a peer can send that parsers disagree on (issue 14): repeated member names, and text that is JSON by its
//! syntax but that no `serde_json::Value` can hold. Both are refused when a message or payload is read, before any
//! signature check, with a typed error that maps to MALFORMED_MESSAGE.

use std::collections::BTreeSet;
use std::fmt;

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{Body, Envelope, Error, ErrorCategory, IdentityCard, LdpError, RawJson, TaskSubmit, codes};
use proptest::prelude::*;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

fn submit() -> Envelope {
    Envelope::new(
        "m1",
        "2026-03-09T10:00:04Z",
        "s1",
        "ldp:delegate:a",
        "ldp:delegate:b",
        TaskSubmit::new("t1".into(), "echo".into(), json!({"text": "hi", "n": 1}), None),
    )
    .with_nonce("00112233445566778899aabbccddeeff")
}

/// The text of a TASK_SUBMIT (with an unknown member `x_meta`) signed with `key` as a `Value` reader sees it (the last occurrence of each name), with
/// `(find, insert)` edits that put an earlier occurrence of a member before the one that was signed.
fn signed_with_hidden_first_occurrence(key: &SigningKey, edits: &[(&str, &str)]) -> String {
    let mut value = submit().to_value().unwrap();
    value["x_meta"] = json!({"a": 2});
    signing::sign_value(&mut value, key).unwrap();
    let mut text = value.to_string();
    for (find, insert) in edits {
        assert!(text.contains(find), "{find} not in {text}");
        text = text.replacen(find, &format!("{insert}{find}"), 1);
    }
    text
}

#[test]
fn a_signed_message_with_a_repeated_member_is_refused_before_verification() {
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "s3cret").unwrap();
    let cases: [&[(&str, &str)]; 4] = [
        // The envelope: an intermediary keeping the first `to` would deliver elsewhere.
        &[("\"to\":", "\"to\":\"ldp:delegate:evil\",")],
        // The payload: the delegate keeping the first would run another instruction.
        &[("\"text\":\"hi\"", "\"text\":\"rm -rf /\",")],
        // A nested object of an unknown member, and the signature members themselves.
        &[("\"a\":2", "\"a\":1,")],
        &[("\"signature\":", "\"signature\":\"00\",")],
    ];
    for edits in cases {
        let text = signed_with_hidden_first_occurrence(&key, edits);
        // Read as a `Value` (the last occurrence wins), the signature verifies: this is what was accepted before.
        let last_wins: Value = serde_json::from_str(&text).unwrap();
        if !text.contains("\"signature\":\"00\"") {
            signing::verify_value(&last_wins, &key.verifying_key()).unwrap();
        }
        // Decoding, which a receiver runs before verifying, refuses it, as does verifying the received bytes.
        let err = Envelope::from_slice(text.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::DuplicateMember(_)), "{text}: {err}");
        let wire = LdpError::from(&err);
        assert_eq!(
            (wire.code.as_str(), wire.category, wire.retryable),
            (codes::MALFORMED_MESSAGE, ErrorCategory::Runtime, false)
        );
        let verdict = signing::verify_slice(text.as_bytes(), &key.verifying_key());
        assert!(matches!(verdict, Err(Error::DuplicateMember(_))), "{text}: {verdict:?}");
    }
    // The error names the member.
    let text = signed_with_hidden_first_occurrence(&key, &[("\"text\":\"hi\"", "\"text\":\"x\",")]);
    let Err(Error::DuplicateMember(name)) = Envelope::from_json(&text) else { panic!("accepted {text}") };
    assert_eq!(name, "text");
}

#[test]
fn identity_cards_with_repeated_members_are_refused() {
    let card = |members: &str| {
        format!(
            r#"{{"delegate_id":"ldp:delegate:x","name":"n","model_family":"f","model_version":"v",
            "trust_domain":{{"name":"a"}},"context_window":1,"supported_payload_modes":["text"]{members}}}"#
        )
    };
    assert!(IdentityCard::from_json(&card("")).is_ok());
    // Unknown members are kept in a map, where the last occurrence used to win.
    for (members, repeated) in [(r#","x_a":1,"x_a":2"#, "x_a"), (r#","x_b":{"c":[{"d":1,"d":1}]}"#, "d")] {
        assert!(
            matches!(IdentityCard::from_json(&card(members)), Err(Error::DuplicateMember(name)) if name == repeated)
        );
    }
}

#[test]
fn what_no_value_can_hold_is_refused_in_the_payload_and_in_the_envelope() {
    let message = |input: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":{input}}}}}"#
        )
    };
    let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
    let hostile = ["\"\\ud800\"", "1e400", &"9".repeat(400), "-1e400", "[\"\\udfff\"]", &deep];
    for input in hostile {
        // The four cases of the finding, on their own, as `RawJson`.
        assert!(matches!(RawJson::from_json(input), Err(Error::MalformedJson(_))), "{input}");
        // As a payload: refused at decoding, on both paths.
        let text = message(input);
        assert!(matches!(Envelope::from_json(&text), Err(Error::MalformedJson(_))), "{text}");
        assert!(matches!(ldp_types::_serde_decodes(&text), Err(Error::MalformedJson(_))), "{text}");
        let wire = LdpError::from(&Envelope::from_json(&text).unwrap_err());
        assert_eq!(wire.code, codes::MALFORMED_MESSAGE);
    }
    // In the envelope's own members and in records, likewise.
    let envelope = |members: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t",{members}"body":{{"type":"TASK_CANCEL","task_id":"t"}}}}"#
        )
    };
    let provenance = |members: &str| {
        envelope(&format!(
            r#""provenance":{{"produced_by":"d","model_version":"v","payload_mode_used":"text"{members}}},"#
        ))
    };
    for text in [
        envelope(r#""message_id":"\ud800","#).replacen(r#""message_id":"m","#, "", 1),
        envelope(r#""x_big":1e400,"#),
        envelope(&format!(r#""x_big":{},"#, "9".repeat(400))),
        envelope(&format!(r#""x_deep":{deep},"#)),
        provenance(r#","confidence":1e400"#),
        provenance(&format!(r#","tokens_used":{}"#, "9".repeat(400))),
        provenance(r#","x":"\udc00""#),
    ] {
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
        assert!(matches!(Envelope::from_json(&text), Err(Error::MalformedJson(_))), "{text}");
        assert!(matches!(ldp_types::_serde_decodes(&text), Err(Error::MalformedJson(_))), "{text}");
    }
    // A payload that decodes can always be read.
    let text = message(&format!("[{}, 1e300, \"\\ud83d\\ude00\"]", "9".repeat(300)));
    let Body::TaskSubmit(submit) = Envelope::from_json(&text).unwrap().body else { panic!("not a submit") };
    submit.input.to_value().unwrap();
}

// ---------------------------------------------------------------------------------------------------------------
// RawJson accepts exactly what `serde_json::Value` accepts, less repeated names

/// A reference reading that keeps every member of every object, to find repeated names independently of the crate.
enum Tree {
    Leaf,
    List(Vec<Tree>),
    Object(Vec<(String, Tree)>),
}

impl Tree {
    fn has_duplicates(&self) -> bool {
        match self {
            Tree::Leaf => false,
            Tree::List(items) => items.iter().any(Tree::has_duplicates),
            Tree::Object(members) => {
                let names: BTreeSet<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
                names.len() != members.len() || members.iter().any(|(_, v)| v.has_duplicates())
            }
        }
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TreeVisitor;
        impl<'de> Visitor<'de> for TreeVisitor {
            type Value = Tree;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Tree::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Tree::Object(members))
            }
        }
        deserializer.deserialize_any(TreeVisitor)
    }
}

fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        "-?[1-9][0-9]{300,420}",
        "\"([a-z ]|\\\\[nt\"\\\\/]|\\\\u[dD][89abAB][0-9a-f]{2}|\\\\u[dD][c-fC-F][0-9a-f]{2}|\\\\u00[0-9a-f]{2}){0,4}\"",
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec(("[ab]{1,2}", inner), 0..4).prop_map(|members| {
                let members: Vec<String> = members.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// Text near JSON: valid texts with bytes edited, brackets nested around the depth limit, and noise.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => json_text(),
        2 => (json_text(), prop::collection::vec((any::<prop::sample::Index>(), "[\\[\\]{}\",:0-9e\\\\u ]"), 1..3))
            .prop_map(|(text, edits)| {
                let mut chars: Vec<char> = text.chars().collect();
                for (at, with) in edits {
                    let at = at.index(chars.len() + 1);
                    chars.splice(at..at.min(chars.len()), with.chars());
                }
                chars.into_iter().collect()
            }),
        1 => (120usize..135, json_text()).prop_map(|(depth, inner)| {
            format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
        }),
        1 => "[\\[\\]{}\",:0-9eE.+\\-a-z\\\\ ]{0,24}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn raw_json_accepts_exactly_what_a_value_can_hold_without_repeated_names(text in hostile_text()) {
        let value_accepts = serde_json::from_str::<Value>(&text).is_ok();
        let repeated = serde_json::from_str::<Tree>(&text).is_ok_and(|t| t.has_duplicates());
        let raw = RawJson::from_json(text.clone());
        prop_assert_eq!(raw.is_ok(), value_accepts && !repeated, "{} ({:?})", text, raw);
        if repeated && value_accepts {
            prop_assert!(matches!(raw, Err(Error::DuplicateMember(_))));
        }
        // Through serde (a payload read from a larger document) the same, and what is accepted can be read.
        prop_assert_eq!(serde_json::from_str::<RawJson>(&text).is_ok(), raw.is_ok(), "{}", text);
        if let Ok(raw) = raw {
            prop_assert!(raw.to_value().is_ok());
        }
    }
}
