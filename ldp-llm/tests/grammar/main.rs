#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `ldp_llm::grammar`: each keyword of the subset (what its grammar accepts and refuses, read through a small GBNF
//! interpreter, `gbnf.rs`), each error, and properties: every sentence generated from the grammar of a random
//! schema of the subset is JSON valid for it (checked with `jsonschema`), tool-call sentences read back, and the
//! converter never panics.

mod gbnf;

use gbnf::{Grammar, Rng};
use ldp_llm::ToolSpec;
use ldp_llm::grammar::{
    MAX_DEPTH, MAX_REPETITION, OutputError, SchemaError, ToolCallOutput, UNSUPPORTED_KEYWORDS, parse_tool_call_output,
    schema_to_gbnf, tool_call_gbnf,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn grammar(schema: &Value) -> Grammar {
    let text = schema_to_gbnf(schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
    let g = Grammar::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // What generates nothing is pruned, never written.
    assert!(!text.contains(r"\U0010FFFF"), "{text}");
    assert!(g.unproductive().is_empty(), "unproductive rules {:?}\n{text}", g.unproductive());
    g
}

/// The grammar of `schema` accepts each of `yes` and refuses each of `no`.
fn check(schema: Value, yes: &[&str], no: &[&str]) {
    let g = grammar(&schema);
    let text = schema_to_gbnf(&schema).unwrap();
    for s in yes {
        assert!(g.accepts(s), "{schema} should accept {s}\n{text}");
    }
    for s in no {
        assert!(!g.accepts(s), "{schema} should refuse {s}\n{text}");
    }
}

/// Sentences of `schema`'s grammar, each JSON valid for it.
fn assert_sound(schema: &Value, seed: u64, count: usize) {
    let g = grammar(schema);
    let validator = jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
    let mut rng = Rng::new(seed);
    for _ in 0..count {
        let sentence = g.generate(&mut rng, 12);
        let value: Value =
            serde_json::from_str(&sentence).unwrap_or_else(|e| panic!("{schema}: {sentence:?} is not JSON: {e}"));
        assert!(validator.is_valid(&value), "{schema}: {sentence} is not valid");
    }
}

fn err(schema: Value) -> SchemaError {
    schema_to_gbnf(&schema).expect_err(&format!("{schema} should fail"))
}

fn unsupported(keyword: &str, pointer: &str) -> SchemaError {
    SchemaError::Unsupported { keyword: keyword.into(), pointer: pointer.into() }
}

#[test]
fn types() {
    check(json!({"type": "null"}), &["null"], &["0", "\"null\""]);
    check(json!({"type": "boolean"}), &["true", "false"], &["null", "1"]);
    check(
        json!({"type": "integer"}),
        &["0", "-7", "1234567890123456"],
        &["1.5", "01", "1e3", "+1", "12345678901234567"],
    );
    check(json!({"type": "number"}), &["0", "-7", "1.5", "2e10", "-0.25E-3"], &["1.", ".5", "1e", "1e100", "NaN"]);
    check(
        json!({"type": "string"}),
        &[r#""""#, r#""a b""#, r#""é😀""#, r#""\n\"\\\/\u00e9""#],
        &["\"a\nb\"", r#""\x""#, r#""\ud800""#, r#""a"#],
    );
    check(json!({"type": ["string", "null"]}), &["null", "\"x\""], &["1"]);
    check(json!(true), &["null", "[1, {\"a\": [true]}]", "{}", "\"s\""], &["[1,]", "{ \"a\" : 1 }x"]);
    check(json!({}), &["1.5", "[ ]"], &[]);
    check(json!({"description": "d", "title": "t", "default": 1, "examples": [1], "$schema": "x"}), &["1"], &[]);
}

#[test]
fn string_lengths_count_characters() {
    check(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &[r#""ab""#, r#""a\nc""#, r#""日本語""#],
        &[r#""a""#, r#""abcd""#],
    );
    // A bound beyond MAX_REPETITION is generated up to it; a minimum beyond it is refused.
    let text = schema_to_gbnf(&json!({"type": "string", "maxLength": 1_000_000})).unwrap();
    assert!(text.contains(&format!("{{0,{MAX_REPETITION}}}")), "{text}");
    assert_eq!(
        err(json!({"type": "string", "minLength": 5000})),
        SchemaError::BoundTooLarge {
            keyword: "minLength".into(),
            pointer: "/minLength".into(),
            value: 5000,
            limit: MAX_REPETITION
        }
    );
    assert!(matches!(err(json!({"type": "string", "minLength": -1})), SchemaError::Invalid { .. }));
    assert_eq!(
        err(json!({"type": "string", "minLength": 3, "maxLength": 2})),
        SchemaError::Unsatisfiable { pointer: "".into() }
    );
}

#[test]
fn objects_properties_and_required() {
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"]
    });
    check(
        schema,
        &[r#"{"b":"x"}"#, r#"{"a":1,"b":"x"}"#, r#"{ "a": 1, "b": "x", "c": true }"#, r#"{"b":"x","c":false}"#],
        &[
            "{}",
            r#"{"a":1}"#,
            r#"{"b":"x","a":1}"#,
            r#"{"b":"x","d":1}"#,
            r#"{"b":"x",}"#,
            r#"{"b":"x"  }"#,
            r#"{"b" :"x"}x"#,
        ],
    );
    check(json!({"type": "object"}), &["{}", "{ }"], &[r#"{"a":1}"#]);
    check(json!({"properties": {"a": {"const": 1}}}), &["{}", r#"{"a":1}"#], &["1"]);
    // A required name without a property schema takes any value.
    check(json!({"type": "object", "required": ["z"]}), &[r#"{"z":[1]}"#], &["{}"]);
    check(json!({"type": "object", "additionalProperties": false}), &["{}"], &[]);
    assert_eq!(
        err(json!({"type": "object", "additionalProperties": false, "required": ["a"]})),
        SchemaError::Unsatisfiable { pointer: "".into() }
    );
    check(json!({"type": "object", "additionalProperties": {}}), &["{}"], &[]);
    assert_eq!(
        err(json!({"type": "object", "additionalProperties": {"type": "string"}})),
        unsupported("additionalProperties", "/additionalProperties")
    );
}

#[test]
fn property_names_are_exact_literals() {
    let names = ["quo\"te", "back\\slash", "new\nline", "tab\t", "ünï 😀", "", "a]b[c", "{x}", "\u{1}", "~/"];
    let mut properties = serde_json::Map::new();
    for n in names {
        properties.insert(n.into(), json!({"type": "integer"}));
    }
    let schema = json!({"type": "object", "properties": properties, "required": names});
    let g = grammar(&schema);
    let mut rng = Rng::new(7);
    let value: Value = serde_json::from_str(&g.generate(&mut rng, 10)).unwrap();
    for n in names {
        assert!(value.get(n).is_some_and(Value::is_number), "{n:?} missing from {value}");
    }
    assert_sound(&schema, 3, 20);
}

#[test]
fn arrays() {
    check(
        json!({"type": "array", "items": {"type": "integer"}}),
        &["[]", "[ ]", "[1]", "[1,2, 3]", "[ 1 , 2 ]"],
        &["[1,]", "[,1]", "[\"a\"]", "[1  ,2]"],
    );
    check(
        json!({"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "null"}}),
        &["[null]", "[null,null]"],
        &["[]", "[null,null,null]"],
    );
    check(json!({"type": "array", "maxItems": 0}), &["[]"], &["[1]"]);
    check(json!({"type": "array", "items": false}), &["[]"], &["[1]"]);
    check(json!({"type": "array"}), &["[1, \"a\", {}]"], &[]);
    check(json!({"type": "array", "uniqueItems": false}), &["[1,1]"], &[]);
    assert_eq!(err(json!({"type": "array", "uniqueItems": true})), unsupported("uniqueItems", "/uniqueItems"));
    assert_eq!(err(json!({"type": "array", "items": [{"type": "string"}]})), unsupported("items", "/items"));
    assert_eq!(
        err(json!({"type": "array", "minItems": 2, "maxItems": 1})),
        SchemaError::Unsatisfiable { pointer: "".into() }
    );
    assert_eq!(
        err(json!({"type": "array", "minItems": 1, "items": false})),
        SchemaError::Unsatisfiable { pointer: "".into() }
    );
}

#[test]
fn enum_and_const() {
    check(
        json!({"enum": ["a", 1, null, [1, "x"], {"k": true}]}),
        &["\"a\"", "1", "null", "[1,\"x\"]", "[ 1, \"x\" ]", "{\"k\": true}"],
        &["\"b\"", "2", "[1]"],
    );
    check(json!({"const": "only"}), &["\"only\""], &["\"other\""]);
    // Filtered by their siblings.
    check(json!({"type": "string", "enum": ["a", 1, "abc"], "maxLength": 2}), &["\"a\""], &["1", "\"abc\""]);
    check(json!({"enum": [1, 2, 3], "const": 2}), &["2"], &["1"]);
    check(json!({"type": "integer", "enum": [1.0, 2.5]}), &["1.0"], &["2.5"]);
    assert_eq!(err(json!({"enum": []})), SchemaError::Unsatisfiable { pointer: "".into() });
    assert_eq!(err(json!({"type": "string", "const": 1})), SchemaError::Unsatisfiable { pointer: "".into() });
    assert!(matches!(err(json!({"enum": 1})), SchemaError::Invalid { pointer, .. } if pointer == "/enum"));
}

#[test]
fn any_of_and_one_of() {
    check(json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}), &["\"a\"", "1"], &["null"]);
    check(json!({"oneOf": [{"type": "string"}, {"type": "null"}], "title": "t"}), &["\"a\"", "null"], &["1"]);
    // Discriminated objects are exclusive.
    let shapes = json!({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind"]}
    ]});
    check(shapes.clone(), &[r#"{"kind":"circle","r":1}"#, r#"{"kind":"square"}"#], &[r#"{"kind":"circle"}"#]);
    assert_sound(&shapes, 11, 30);
    // A branch is dropped when it generates nothing.
    check(json!({"anyOf": [false, {"type": "null"}]}), &["null"], &[]);
    for overlapping in [
        json!({"oneOf": [{"type": "number"}, {"type": "integer"}]}),
        json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}),
        json!({"oneOf": [{"type": "object"}, {"type": "object", "properties": {"a": {}}}]}),
        json!({"oneOf": [{}, {"type": "null"}]}),
    ] {
        assert_eq!(err(overlapping), SchemaError::OverlappingOneOf { pointer: "/oneOf".into() });
    }
    assert_eq!(
        err(json!({"anyOf": []})),
        SchemaError::Invalid { pointer: "/anyOf".into(), reason: "`anyOf` is a non-empty array".into() }
    );
    assert_eq!(
        err(json!({"type": "object", "anyOf": [{}]})),
        SchemaError::UnsupportedCombination { keyword: "anyOf".into(), pointer: "/anyOf".into() }
    );
}

#[test]
fn refs_and_recursion() {
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }, "required": ["v"]}},
        "$ref": "#/$defs/node"
    });
    // Properties in the map's order: alphabetical, as serde_json's `preserve_order` is off in this workspace.
    check(tree.clone(), &[r#"{"v":1}"#, r#"{"kids":[{"kids":[],"v":2}],"v":1}"#], &[r#"{"kids":[{}],"v":1}"#]);
    assert_sound(&tree, 5, 30);
    check(
        json!({"definitions": {"s": {"type": "string"}}, "items": {"$ref": "#/definitions/s"}}),
        &["[\"a\"]"],
        &["[1]"],
    );
    check(json!({"type": "object", "properties": {"self": {"$ref": "#"}}}), &["{}", r#"{"self":{"self":{}}}"#], &[]);
    // A required recursion without end generates nothing.
    assert_eq!(
        err(json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})),
        SchemaError::Unsatisfiable { pointer: "".into() }
    );
    // A recursion that writes nothing first: llama.cpp refuses left recursion.
    assert_eq!(
        err(json!({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})),
        SchemaError::LeftRecursion { pointer: "/$defs/a".into() }
    );
    for (reference, pointer) in [("other.json#/x", "/$ref"), ("#/$defs/missing", "/$ref"), ("#/properties/a", "/$ref")]
    {
        assert_eq!(
            err(json!({"$ref": reference})),
            SchemaError::UnresolvedRef { reference: reference.into(), pointer: pointer.into() }
        );
    }
    assert_eq!(
        err(json!({"$defs": {"s": {}}, "$ref": "#/$defs/s", "type": "string"})),
        SchemaError::UnsupportedCombination { keyword: "$ref".into(), pointer: "/$ref".into() }
    );
}

#[test]
fn unsupported_keywords_name_their_pointer() {
    // The keywords a schema for a tool most often holds, whose meaning the grammar would silently drop.
    for keyword in ["pattern", "format", "minimum", "exclusiveMinimum", "allOf", "not", "prefixItems", "$dynamicRef"] {
        assert!(UNSUPPORTED_KEYWORDS.contains(&keyword), "{keyword} is not refused");
    }
    for &keyword in UNSUPPORTED_KEYWORDS {
        let schema = json!({"type": "object", "properties": {"a/b": {"type": "array", "items": {keyword: 1}}}});
        assert_eq!(err(schema), unsupported(keyword, &format!("/properties/a~1b/items/{keyword}")));
    }
    assert_eq!(err(json!({"properties": {"x": {"$id": "y"}}})), unsupported("$id", "/properties/x/$id"));
    // Unknown keywords do not constrain values (JSON Schema ignores them).
    check(json!({"type": "integer", "x-vendor": {"pattern": 1}}), &["1"], &[]);
}

#[test]
fn invalid_schemas() {
    assert_eq!(
        err(json!(1)),
        SchemaError::Invalid { pointer: "".into(), reason: "a schema is an object or a boolean".into() }
    );
    assert!(matches!(err(json!({"type": "str"})), SchemaError::Invalid { pointer, .. } if pointer == "/type"));
    assert!(
        matches!(err(json!({"type": ["string", 1]})), SchemaError::Invalid { pointer, .. } if pointer == "/type/1")
    );
    assert!(matches!(err(json!({"properties": []})), SchemaError::Invalid { pointer, .. } if pointer == "/properties"));
    assert!(matches!(err(json!({"required": [1]})), SchemaError::Invalid { pointer, .. } if pointer == "/required/0"));
    assert_eq!(err(json!(false)), SchemaError::Unsatisfiable { pointer: "".into() });
}

#[test]
fn hostile_sizes_are_typed_errors() {
    let mut deep = json!({"type": "string"});
    // Built by hand: `json!` serialises an interpolated value recursively.
    for _ in 0..10_000 {
        deep = Value::Object(std::iter::once(("items".to_string(), deep)).collect());
    }
    // Not through `err`, whose message formats the schema recursively.
    assert!(matches!(schema_to_gbnf(&deep), Err(SchemaError::TooDeep { limit: MAX_DEPTH, .. })));
    let mut deep_enum = json!(1);
    for _ in 0..10_000 {
        deep_enum = Value::Array(vec![deep_enum]);
    }
    let deep_enum = Value::Object(std::iter::once(("enum".to_string(), Value::Array(vec![deep_enum]))).collect());
    assert!(matches!(schema_to_gbnf(&deep_enum), Err(SchemaError::TooDeep { limit: MAX_DEPTH, .. })));
    // Dropping 10,000 nested values recursively would overflow the test's stack.
    std::mem::forget(deep);
    std::mem::forget(deep_enum);
    let wide: serde_json::Map<String, Value> = (0..20_000).map(|i| (format!("p{i}"), json!({}))).collect();
    assert!(matches!(err(json!({"properties": wide})), SchemaError::TooLarge { .. }));
    // A chain of $refs nests too.
    let defs: serde_json::Map<String, Value> =
        (0..200).map(|i| (format!("d{i}"), json!({"items": {"$ref": format!("#/$defs/d{}", i + 1)}}))).collect();
    assert!(matches!(err(json!({"$defs": defs, "$ref": "#/$defs/d0"})), SchemaError::TooDeep { .. }));
    // Many overlapping checks stay within their budget.
    let branches: Vec<Value> = (0..300).map(|i| json!({"const": i})).collect();
    assert!(schema_to_gbnf(&json!({"oneOf": branches})).is_ok());
}

#[test]
fn tool_calls() {
    let tools = [
        ToolSpec::new(
            "weather",
            "w",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new("now", "n", json!({"type": "object"})),
    ];
    let text = tool_call_gbnf(&tools, None).unwrap();
    let g = Grammar::parse(&text).unwrap();
    assert!(g.accepts(r#"{"tool":"weather","arguments":{"city":"Oslo"}}"#));
    assert!(g.accepts(r#"{ "tool": "now", "arguments": {} }"#));
    assert!(g.accepts(r#"{"answer":"It is sunny."}"#));
    assert!(!g.accepts(r#"{"tool":"weather","arguments":{}}"#));
    assert!(!g.accepts(r#"{"tool":"other","arguments":{}}"#));
    assert!(!g.accepts(r#"{"answer":1}"#));
    let text = tool_call_gbnf(&tools, Some(&json!({"type": "integer"}))).unwrap();
    let g = Grammar::parse(&text).unwrap();
    assert!(g.accepts(r#"{"answer":1}"#) && !g.accepts(r#"{"answer":"1"}"#));
    let g = Grammar::parse(&tool_call_gbnf(&[], None).unwrap()).unwrap();
    assert!(g.accepts(r#"{"answer":""}"#));

    let dup = [tools[1].clone(), tools[1].clone()];
    assert_eq!(tool_call_gbnf(&dup, None), Err(SchemaError::DuplicateTool { name: "now".into() }));
    let bad = [ToolSpec::new("t", "", json!({"properties": {"a": {"pattern": "x"}}}))];
    assert_eq!(
        tool_call_gbnf(&bad, None),
        Err(SchemaError::Tool { name: "t".into(), source: Box::new(unsupported("pattern", "/properties/a/pattern")) })
    );
    assert_eq!(
        tool_call_gbnf(&tools, Some(&json!(false))),
        Err(SchemaError::Answer(Box::new(SchemaError::Unsatisfiable { pointer: "".into() })))
    );
}

#[test]
fn tool_call_output() {
    assert_eq!(parse_tool_call_output(" {\"answer\": \"hi\"}\n"), Ok(ToolCallOutput::Answer(json!("hi"))));
    assert_eq!(
        parse_tool_call_output(r#"{"tool":"t","arguments":{"a":1}}"#),
        Ok(ToolCallOutput::Call { name: "t".into(), arguments: json!({"a": 1}) })
    );
    assert_eq!(parse_tool_call_output(r#"{"tool":"t","argu"#), Err(OutputError::Truncated));
    assert!(matches!(parse_tool_call_output("{} x"), Err(OutputError::NotJson(_))));
    for shape in ["[]", "{}", r#"{"tool":1,"arguments":{}}"#, r#"{"tool":"t"}"#, r#"{"answer":1,"x":2}"#] {
        assert!(matches!(parse_tool_call_output(shape), Err(OutputError::Shape(_))), "{shape}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Properties.

fn names() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d", "b c", "quo\"te", "sl\\sh", "ü😀", "", "n\nl", "[x]"])
        .prop_map(str::to_string)
}

fn small_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        prop::sample::select(vec![0.5, -2.25, 1e20]).prop_map(Value::from),
        names().prop_map(Value::String),
        prop::collection::vec((-2i64..2).prop_map(Value::from), 0..3).prop_map(Value::Array),
        (names(), -2i64..2).prop_map(|(k, v)| json!({ k: v })),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec!["null", "boolean", "integer", "number", "string"]).prop_map(|t| json!({"type": t})),
        (0u64..3, 0u64..4)
            .prop_map(|(min, extra)| json!({"type": "string", "minLength": min, "maxLength": min + extra})),
        prop::collection::vec(small_value(), 0..4).prop_map(|v| json!({"enum": v})),
        small_value().prop_map(|v| json!({"const": v})),
        prop::collection::vec(small_value(), 1..4)
            .prop_map(|v| json!({"type": ["string", "integer"], "enum": v, "maxLength": 1})),
        Just(json!(true)),
        Just(json!({})),
        Just(json!(false)),
        Just(json!({"type": ["integer", "null"]})),
        Just(json!({"$ref": "#/$defs/d"})),
        Just(json!({"$ref": "#"})),
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            (
                prop::collection::vec((names(), inner.clone(), any::<bool>()), 0..4),
                any::<bool>(),
                prop::option::of(names())
            )
                .prop_map(|(props, closed, extra_required)| {
                    let mut properties = serde_json::Map::new();
                    let mut required = Vec::new();
                    for (name, schema, req) in props {
                        if req && !required.contains(&name) {
                            required.push(name.clone());
                        }
                        properties.insert(name, schema);
                    }
                    required.extend(extra_required.filter(|n| !required.contains(n)));
                    let mut s = json!({"type": "object", "properties": properties, "required": required});
                    if closed {
                        s["additionalProperties"] = json!(false);
                    }
                    s
                }),
            (inner.clone(), 0u64..3, prop::option::of(0u64..3)).prop_map(|(items, min, extra)| {
                let mut s = json!({"type": "array", "items": items, "minItems": min});
                if let Some(extra) = extra {
                    s["maxItems"] = json!(min + extra);
                }
                s
            }),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"anyOf": v})),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"oneOf": v})),
            (inner.clone(), prop::collection::vec(small_value(), 1..4))
                .prop_map(|(s, v)| json!({"anyOf": [s, {"enum": v}]})),
        ]
    })
}

/// A schema with a definition `d` (which may refer to itself and to the root).
fn document() -> impl Strategy<Value = Value> {
    (schema(), schema(), any::<bool>()).prop_map(|(mut root, d, defs_style)| {
        let defs = if defs_style { "$defs" } else { "definitions" };
        let text = serde_json::to_string(&root).unwrap().replace("#/$defs/d", &format!("#/{defs}/d"));
        let d_text = serde_json::to_string(&d).unwrap().replace("#/$defs/d", &format!("#/{defs}/d"));
        root = serde_json::from_str(&text).unwrap();
        let d: Value = serde_json::from_str(&d_text).unwrap();
        match root {
            Value::Object(ref mut m) => {
                m.insert(defs.into(), json!({ "d": d }));
                root
            }
            other => json!({"anyOf": [other], defs: {"d": d}}),
        }
    })
}

/// Errors a schema of the subset may still have: a `oneOf` that cannot be proven exclusive, no value at all, a
/// recursion that writes nothing first.
fn expected(e: &SchemaError) -> bool {
    matches!(
        e,
        SchemaError::OverlappingOneOf { .. } | SchemaError::Unsatisfiable { .. } | SchemaError::LeftRecursion { .. }
    )
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "$ref",
        "$defs",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "additionalProperties",
        "pattern",
        "x",
        "string",
        "object",
        "#",
        "#/$defs/x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        keys.clone().prop_map(|k| Value::String(k.into())),
    ];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Every sentence of the grammar of a schema of the subset is JSON valid for the schema.
    #[test]
    fn sentences_are_valid(schema in document(), seed in any::<u64>()) {
        match schema_to_gbnf(&schema) {
            Err(e) => prop_assert!(expected(&e), "{schema}: {e}"),
            Ok(_) => assert_sound(&schema, seed, 8),
        }
    }

    /// Tool-call sentences read back as the call or the answer they are, with valid arguments.
    #[test]
    fn tool_call_sentences_read_back(args in prop::collection::vec(document(), 0..3), answer in prop::option::of(schema()), seed in any::<u64>()) {
        let tools: Vec<ToolSpec> = args.iter().enumerate().map(|(i, s)| ToolSpec::new(format!("t\"{i}"), "", s.clone())).collect();
        let answer = answer.map(|a| serde_json::from_str::<Value>(&serde_json::to_string(&a).unwrap().replace("#/$defs/d", "#")).unwrap());
        let text = match tool_call_gbnf(&tools, answer.as_ref()) {
            Err(SchemaError::Tool { source, .. } | SchemaError::Answer(source)) => { prop_assert!(expected(&source)); return Ok(()); }
            Err(e) => panic!("{e}"),
            Ok(text) => text,
        };
        let g = Grammar::parse(&text).unwrap();
        let mut rng = Rng::new(seed);
        for _ in 0..8 {
            let sentence = g.generate(&mut rng, 12);
            match parse_tool_call_output(&sentence).unwrap_or_else(|e| panic!("{sentence}: {e}")) {
                ToolCallOutput::Call { name, arguments } => {
                    let tool = tools.iter().find(|t| t.name == name).expect("a known tool");
                    prop_assert!(jsonschema::validator_for(&tool.input_schema).unwrap().is_valid(&arguments), "{sentence}");
                }
                ToolCallOutput::Answer(value) => match &answer {
                    Some(schema) => prop_assert!(jsonschema::validator_for(schema).unwrap().is_valid(&value), "{sentence}"),
                    None => prop_assert!(value.is_string()),
                },
                other => panic!("{other:?}"),
            }
        }
    }

    /// Arbitrary JSON gets a grammar the interpreter parses, or a typed error; never a panic.
    #[test]
    fn never_panics(value in arbitrary_json()) {
        if let Ok(text) = schema_to_gbnf(&value) {
            prop_assert!(Grammar::parse(&text).is_ok(), "{text}");
        }
        let _ = tool_call_gbnf(&[ToolSpec::new("t", "", value.clone())], Some(&value));
    }
}
