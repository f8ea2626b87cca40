#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The envelope scanner against the serde decoder: wherever the scanner decodes a text (random, damaged, the
//! transcript, the benchmarked messages, edge cases), serde decodes it to the same envelope; both hold the recursion
//! limit; both refuse a duplicate member name anywhere (issue 14, finding 7). Needs the `test-hooks` feature.

use ldp_types::signing::{self};
use ldp_types::{Body, Envelope, IdentityCard, TaskResult, TaskSubmit};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::strategies::*;

use crate::inputs;

/// One byte edit of a message's text, biased towards the bytes JSON's grammar turns on.
fn byte_edit() -> impl Strategy<Value = (usize, u8, u8)> {
    let byte = prop_oneof![
        Just(b'"'),
        Just(b'\\'),
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b']'),
        Just(b','),
        Just(b':'),
        Just(b' '),
        Just(b'\n'),
        Just(b'n'),
        Just(b'0'),
        Just(b'-'),
        Just(b'e'),
        Just(0x01),
        any::<u8>(),
    ];
    (any::<usize>(), byte, 0u8..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Byte-level damage (which no `Value`-level mutation can produce: cut strings, stray escapes, bad separators)
    /// decodes as the serde path decodes it, through the scanner or around it.
    #[test]
    fn damaged_text_decodes_as_serde_decodes_it(env in envelope(), edits in vec(byte_edit(), 1..4)) {
        let mut bytes = env.to_vec().unwrap();
        for (at, byte, op) in edits {
            let at = at % (bytes.len() + 1);
            match op {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => drop(bytes.remove(at)),
                _ if at < bytes.len() => bytes[at] = byte,
                _ => bytes.push(byte),
            }
        }
        let ours = Envelope::from_slice(&bytes).ok();
        let serde_path = serde_json::from_slice::<Envelope>(&bytes).ok();
        prop_assert_eq!(ours, serde_path, "{}", String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn the_scanner_takes_the_transcript_and_the_benchmarked_messages() {
    let flow: Vec<Value> = serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap();
    let sized = [inputs::sized_submit(972, false), inputs::sized_submit(1497, true)];
    let texts = flow.iter().map(|m| m.to_string()).chain(sized.iter().map(|b| String::from_utf8(b.clone()).unwrap()));
    for text in texts {
        // The transcript's `_comment` is an extension member like any other.
        assert!(ldp_types::_scanner_decodes(&text), "{text}");
        assert_eq!(Envelope::from_json(&text).unwrap(), ldp_types::_serde_decodes(&text).unwrap());
    }
    // Left to serde: escapes in a member name, nesting near the recursion limit, any error.
    let escaped_name =
        r#"{"message\u005fid":"m","from":"a","to":"b","timestamp":"t","body":{"type":"TASK_CANCEL","task_id":"t"}}"#;
    assert!(!ldp_types::_scanner_decodes(escaped_name));
    assert_eq!(Envelope::from_json(escaped_name).unwrap().message_id, "m");
    let deep = nested_input(127).replace("\"input\"", "\"x_deep\"");
    assert!(!ldp_types::_scanner_decodes(&deep));
    assert!(Envelope::from_json(&deep).is_err(), "127 levels inside the body exceed serde_json's limit of 128");
    assert!(!ldp_types::_scanner_decodes(r#"{"message_id":"m"}"#));
}

#[test]
fn the_scanner_reads_contracts_and_edge_cases_as_serde_does() {
    let envelope = |body: &str| {
        format!(r#"{{"message_id":"m","session_id":null,"from":"a","to":"b","timestamp":"t","body":{body}}}"#)
    };
    let submit = |contract: &str| {
        envelope(&format!(r#"{{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":null,"contract":{contract}}}"#))
    };
    let policy = |p: &str| submit(&format!(r#"{{"contract_id":"c","policy":{p}}}"#));
    let texts = [
        submit("null"),
        submit(r#"{"contract_id":"c"}"#),
        submit(r#"{"contract_id":null}"#),
        submit(r#"{"objective":"o"}"#),
        submit(r#"{"contract_id":"c","contract_id":"d"}"#),
        submit(r#"{"contract_id":"c","objective":null,"success_criteria":null,"policy":null,"deadline":null}"#),
        submit(r#"{"contract_id":"c","success_criteria":["a",null]}"#),
        submit(r#"{"contract_id":"c","success_criteria":[]}"#),
        submit(r#"{"contract_id":"c","success_criteria":"a"}"#),
        submit(r#"{"contract_id":"c\u00e9\n","x_more":{"deep":[1,2,{"a":null}]}}"#),
        submit(r#"["c"]"#),
        policy(r#"{"failure_policy":"fail_closed","failure_policy":"fail_open"}"#),
        policy(r#"{"failure_policy":null}"#),
        policy(r#"{"failure_policy":"fail_sideways"}"#),
        policy(r#"{"failure_policy":"fail\u005fclosed"}"#),
        policy(r#"{"budget":null,"safety_constraints":null}"#),
        policy(r#"{"budget":{"max_tokens":6000,"max_cost_usd":0.05}}"#),
        policy(r#"{"budget":{"max_tokens":6000,"max_tokens":1}}"#),
        policy(r#"{"budget":{"max_tokens":null,"max_cost_usd":null,"extra":[]}}"#),
        policy(r#"{"budget":{"max_tokens":1.0}}"#),
        policy(r#"{"budget":{"max_tokens":-1}}"#),
        policy(r#"{"budget":{"max_tokens":01}}"#),
        policy(r#"{"budget":{"max_tokens":1e3}}"#),
        policy(r#"{"budget":{"max_tokens":18446744073709551615}}"#),
        policy(r#"{"budget":{"max_tokens":18446744073709551616}}"#),
        policy(r#"{"budget":[]}"#),
        policy("[]"),
        policy(r#"["fail_closed"]"#),
        policy(r#"{"max_delegation_depth":4294967295}"#),
        policy(r#"{"max_delegation_depth":4294967296}"#),
        policy(r#"{"max_delegation_depth":0}"#),
        policy(r#"{"max_delegation_depth": 2 }"#),
        policy(r#"{"max_delegation_depth":2,"max_delegation_depth":3}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","task_id":"u"}"#),
        envelope(r#"{"type":"TASK_SUBMIT","type":"TASK_CANCEL","task_id":"t"}"#),
        envelope(r#"{"type":"TASK_\u0053UBMIT","task_id":"t","skill":"s"}"#),
        envelope(
            r#"{"type":"TASK_RESULT","task_id":"t","output":{"a":[1]},"provenance":{"produced_by":"d","model_version":"v","payload_mode_used":"text"}}"#,
        ),
        envelope(r#"{"type":"GOSSIP","rumour":"x"}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","output":{"o":1},"delegate_id":null,"x":[1]}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","delegate_id":5}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":null}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":"a","input":"b"}"#),
        envelope(r#"{"task_id":"t","type":"TASK_SUBMIT","skill":"s","input":[]}"#),
        envelope(
            r#"{"type":"TASK_RESULT","task_id":"t","skill":"s","provenance":{"produced_by":"d","model_version":"v","payload_mode_used":"text"}}"#,
        ),
        envelope(r#"{"type":"TASK_RESULT","task_id":"t","output":null}"#),
        envelope(r#"{"type":"TASK_RESULT","task_id":"t","provenance":null,"output":"x"}"#),
        envelope(r#"{"type":"HELLO","delegate_id":"ldp:delegate:a","supported_modes":["text"]}"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"} "#) + " ",
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#) + " x",
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t\"q"}"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"tab\there"}"#),
        envelope("{\"type\":\"TASK_CANCEL\",\"task_id\":\"raw\ttab\"}"),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""to":"b""#, r#""to":"b","to":"c""#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""from":"a""#, r#""from":null"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""session_id":null"#, r#""payload_mode":null"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#)
            .replace(r#""session_id":null"#, r#""payload_mode":"binary""#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""session_id":null"#, r#""provenance":7"#),
    ];
    let mut scanned = 0;
    let mut duplicated = 0;
    for text in &texts {
        let ours = Envelope::from_json(text).ok();
        let serde_path = ldp_types::_serde_decodes(text).ok();
        assert_eq!(ours, serde_path, "{text}");
        scanned += usize::from(ldp_types::_scanner_decodes(text));
        duplicated += usize::from(matches!(Envelope::from_json(text), Err(ldp_types::Error::DuplicateMember(_))));
    }
    // Every text above that repeats a member name, in the envelope, the body, the contract or its policy.
    assert_eq!(duplicated, 8);
    // A struct's fields given as an array (which serde's derived decoders would take) are refused, as the schema
    // refuses them.
    for text in [policy("[]"), policy(r#"{"budget":[6000]}"#), submit(r#"["c"]"#)] {
        assert!(matches!(Envelope::from_json(&text), Err(ldp_types::Error::InvalidMessage(_))), "{text}");
    }
    // Most of these are the scanner's (the rest it leaves to serde, which the equality above covers).
    assert!(scanned >= (texts.len() - duplicated) / 2, "only {scanned} of {} scanned", texts.len());
}

#[test]
fn the_scanner_reads_provenance_as_serde_does() {
    let result = |provenance: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_RESULT","task_id":"t","output":1,"provenance":{provenance}}}}}"#
        )
    };
    let at_envelope = |provenance: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","provenance":{provenance},"body":{{"type":"TASK_CANCEL","task_id":"t"}}}}"#
        )
    };
    let with =
        |members: &str| format!(r#"{{"produced_by":"d","model_version":"v","payload_mode_used":"text"{members}}}"#);
    let records = [
        with(""),
        with(r#","confidence":0.82,"verified":false,"session_id":"s","timestamp":"2026-03-09T10:00:09Z""#),
        with(r#","verified":true"#),
        with(r#","verified":null,"confidence":null,"session_id":null,"timestamp":null"#),
        with(r#","verified":false,"verification_status":"tool_verified""#),
        with(r#","verified":true,"verification_status":"unverified""#),
        with(r#","verification_status":"self_verified","verification_status":"peer_verified""#),
        with(r#","verification_status":"notarised""#),
        with(r#","verification_status":"peer\u005fverified""#),
        with(r#","verification_status":null"#),
        with(r#","verified":"yes""#),
        with(r#","verified":truex"#),
        with(r#","confidence":1.2"#),
        with(r#","confidence":1"#),
        with(r#","confidence":-0.0"#),
        with(r#","confidence":"0.5""#),
        with(r#","tokens_used":1500,"cost_usd":0.0021,"contract_id":"ctr-1","contract_satisfied":true"#),
        with(r#","tokens_used":1.5"#),
        with(r#","tokens_used":null,"cost_usd":null,"contract_id":null,"contract_satisfied":null"#),
        with(r#","contract_satisfied":"true""#),
        with(r#","contract_violations":["BUDGET_EXCEEDED","DEADLINE_MISSED"]"#),
        with(r#","contract_violations":null"#),
        with(r#","contract_violations":[null]"#),
        with(r#","evidence":[{"source":"pytest","kind":"test_results","uri":"u","summary":"ok"}],"lineage":[]"#),
        with(r#","evidence":null,"lineage":null"#),
        with(r#","evidence":[["pytest","test_results"]]"#),
        with(r#","evidence":{"source":"pytest","kind":"k"}"#),
        with(r#","lineage":[{"delegate_id":"a","model_version":"m","step":"s","verification_status":null}]"#),
        with(r#","lineage":[{"delegate_id":"a","model_version":"m","step":"s","verification_status":"nope"}]"#),
        with(r#","x_extra":{"deep":[1,{"a":null}]},"produced_by_note":"x""#),
        with(r#","produced_by":"e""#),
        r#"{"model_version":"v","payload_mode_used":"text"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v","payload_mode_used":"smoke_signals"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v","payload_mode_used":null}"#.to_owned(),
        r#"{"produced_by":"d\u00e9","model_version":"v","payload_mode_used":"semantic\u005fframe"}"#.to_owned(),
        r#"{"produced_by":null,"model_version":"v","payload_mode_used":"text"}"#.to_owned(),
        r#"{ "produced_by" : "d" , "model_version" : "v" , "payload_mode_used" : "text" }"#.to_owned(),
        r#"["d","v","text"]"#.to_owned(),
        r#""d""#.to_owned(),
        "null".to_owned(),
        "{}".to_owned(),
    ];
    let mut scanned = 0;
    let mut texts = 0;
    for record in &records {
        for text in [result(record), at_envelope(record)] {
            let ours = Envelope::from_json(&text).ok();
            let serde_path = ldp_types::_serde_decodes(&text).ok();
            assert_eq!(ours, serde_path, "{text}");
            scanned += usize::from(ldp_types::_scanner_decodes(&text));
            texts += 1;
        }
    }
    // About half are errors (serde then answers for the scanner); the rest the scanner decodes itself.
    assert!(scanned >= texts / 3, "only {scanned} of {texts} scanned");
    // The legacy flag follows the status, as serde's decoder keeps it.
    let text = result(&with(r#","verified":false,"verification_status":"tool_verified""#));
    let Body::TaskResult(r) = Envelope::from_json(&text).unwrap().body else { panic!("not a result") };
    assert!(r.provenance.verified);
}

// ---------------------------------------------------------------------------------------------------------------
// Deep nesting

fn nested_input(depth: usize) -> String {
    format!(
        r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[test]
fn recursion_limit_holds_through_the_custom_decoders() {
    // A message must be one a `serde_json::Value` can hold, payload included: 127 levels counted from the envelope,
    // whose payload starts two levels down. Deeper is refused at decoding as a typed error, never a stack overflow,
    // by the scanner and the serde path alike; so a payload that decodes can always be read and signed.
    let key =
        ldp_types::signing::SigningKey::shared_secret(ldp_types::signing::SignatureAlgorithm::HmacSha256Jcs, b"k")
            .unwrap();
    for depth in [100, 125] {
        let text = nested_input(depth);
        let whole: Value = serde_json::from_str(&text).unwrap();
        let env = Envelope::from_json(&text).unwrap();
        assert_eq!(ldp_types::_serde_decodes(&text).unwrap(), env);
        let ldp_types::Body::TaskSubmit(submit) = &env.body else { panic!("not a submit") };
        assert_eq!(submit.input, whole["body"]["input"]);
        ldp_types::signing::sign(&mut env.clone(), &key).unwrap();
    }
    for depth in [126, 129, 1_000, 100_000] {
        let text = nested_input(depth);
        assert!(serde_json::from_str::<Value>(&text).is_err());
        for err in [Envelope::from_json(&text).unwrap_err(), ldp_types::_serde_decodes(&text).unwrap_err()] {
            assert!(matches!(err, ldp_types::Error::MalformedJson(_)), "{depth}: {err}");
            assert!(err.to_string().contains("recursion limit"), "{depth}: {err}");
        }
        assert!(serde_json::from_str::<Envelope>(&text).is_err());
    }
    // The same anywhere else in the message.
    let deep_extra = nested_input(1_000).replace("\"input\"", "\"x_deep\"");
    let err = Envelope::from_json(&deep_extra).unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
    let deep_card = format!(
        r#"{{"delegate_id":"ldp:delegate:x","name":"n","model_family":"f","model_version":"v","trust_domain":"d",
        "context_window":1,"supported_payload_modes":["text"],"x_deep":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(matches!(IdentityCard::from_json(&deep_card), Err(ldp_types::Error::MalformedJson(_))));
    // Under a member the contract decoder ignores, too: it is part of what a signature covers.
    let deep_contract = |depth: usize| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_SUBMIT","task_id":"t",
        "skill":"s","contract":{{"contract_id":"c","x":{}1{}}}}}}}"#,
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        )
    };
    let env = Envelope::from_json(&deep_contract(100)).unwrap();
    let ldp_types::Body::TaskSubmit(submit) = env.body else { panic!("not a submit") };
    assert_eq!(submit.contract.unwrap().contract_id, "c");
    for text in [
        deep_contract(5_000),
        deep_contract(5_000).replace(r#""contract":{"contract_id":"c","x":"#, r#""x_kept":{"y":"#),
    ] {
        let err = Envelope::from_json(&text).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Duplicate member names (issue 14, finding 7)

/// Writes `value` as compact JSON, repeating one member of the `target`-th object (pre-order, counting every object:
/// envelope, body, records, payloads, unknown members) after its other members, with `again` as its second value
/// (or its first value again). An empty target object gets a member `"k"` twice. Returns whether the target object
/// existed.
fn write_with_duplicate(
    value: &Value,
    target: usize,
    again: Option<&Value>,
    seen: &mut usize,
    out: &mut String,
) -> bool {
    match value {
        Value::Object(map) => {
            let here = *seen == target;
            *seen += 1;
            let mut hit = here;
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                hit |= write_with_duplicate(v, target, again, seen, out);
            }
            if here {
                let name = map.keys().nth(map.len() / 2).cloned().unwrap_or_else(|| "k".to_owned());
                let again = again.or(map.get(&name)).cloned().unwrap_or(Value::from(1));
                if map.is_empty() {
                    out.push_str(&format!("{}:{again},", serde_json::to_string(&name).unwrap()));
                } else {
                    out.push(',');
                }
                out.push_str(&format!("{}:{again}", serde_json::to_string(&name).unwrap()));
            }
            out.push('}');
            hit
        }
        Value::Array(items) => {
            let mut hit = false;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                hit |= write_with_duplicate(v, target, again, seen, out);
            }
            out.push(']');
            hit
        }
        scalar => {
            out.push_str(&scalar.to_string());
            false
        }
    }
}

/// A body whose payloads, records and unknown members hold objects at several depths.
fn nested_body() -> impl Strategy<Value = Body> {
    let payload =
        || json_value().prop_map(|v| json!({"task_type": "t", "instruction": "i", "data": [v, {"n": {"m": 1}}]}));
    prop_oneof![
        (payload(), option::of(contract()), extra()).prop_map(|(input, contract, extra)| {
            let mut submit = TaskSubmit::new("t1".into(), "s".into(), input, contract);
            submit.extra = extra;
            Body::TaskSubmit(submit)
        }),
        (payload(), provenance(), extra()).prop_map(|(output, provenance, extra)| {
            let mut result = TaskResult::new("t1".into(), output, provenance);
            result.extra = extra;
            Body::TaskResult(result)
        }),
        body(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A member name repeated in any object of a message (the envelope, the body, a record, a payload, an unknown
    /// member), with the same or another value, compact or pretty: the scanner leaves it, and the serde path, the
    /// decoder as a whole, serde_json's `Deserialize` and the signature check all refuse it as a duplicate.
    #[test]
    fn a_duplicate_member_anywhere_is_refused_by_every_path(
        env in (envelope(), nested_body()).prop_map(|(mut e, b)| { e.body = b; e }),
        target in any::<prop::sample::Index>(),
        again in option::of(json_value()),
        pretty in any::<bool>(),
    ) {
        let mut value = env.to_value().unwrap();
        value["x_ext"] = json!({"a": [{"b": {}}]});
        let objects = {
            let mut count = 0;
            write_with_duplicate(&value, usize::MAX, None, &mut count, &mut String::new());
            count
        };
        let target = target.index(objects);
        let mut text = String::new();
        prop_assert!(write_with_duplicate(&value, target, again.as_ref(), &mut 0, &mut text));
        if pretty {
            text = text.replace(",\"", ",\n  \"").replace(":", " : ");
        }
        let is_duplicate = |r: Result<Envelope, ldp_types::Error>| matches!(r, Err(ldp_types::Error::DuplicateMember(_)));
        prop_assert!(!ldp_types::_scanner_decodes(&text), "{}", text);
        prop_assert!(is_duplicate(Envelope::from_json(&text)), "{}", text);
        prop_assert!(is_duplicate(Envelope::from_slice(text.as_bytes())), "{}", text);
        prop_assert!(is_duplicate(ldp_types::_serde_decodes(&text)), "{}", text);
        prop_assert!(serde_json::from_str::<Envelope>(&text).is_err(), "{}", text);
        for key in keys() {
            let verdict = signing::verify_slice(text.as_bytes(), &key.verifying_key());
            prop_assert!(matches!(verdict, Err(ldp_types::Error::DuplicateMember(_))), "{}: {:?}", text, verdict);
        }
    }
}
