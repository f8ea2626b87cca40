//! JSON Schema (a subset) as a GBNF grammar, for decoding under llama.cpp's grammar sampler.
//!
//! A sampler that only lets the model pick tokens the grammar allows makes even a very small model emit a value
//! valid for the schema, every time. This module is the pure, engine-neutral half: it turns a schema into GBNF
//! text (the format of llama.cpp's `grammars/README.md`, start rule `root`) and reads back what was decoded.
//!
//! ```text
//! schema ──parse──> Node (the subset, $refs as indices) ──compile──> rules ──prune, check──> GBNF text
//! ```
//!
//! - [`schema_to_gbnf`]: every sentence of the grammar is JSON valid for the schema; values written compactly or
//!   with single spaces between tokens are reachable (at most one optional space, so a model cannot loop on
//!   whitespace).
//! - [`tool_call_gbnf`]: the sentences are `{"tool":"NAME","arguments":ARGS}` for each tool and `{"answer":X}`;
//!   [`parse_tool_call_output`] reads such a sentence back as a [`ToolCallOutput`].
//!
//! ```
//! use ldp_llm::ToolSpec;
//! use ldp_llm::grammar::{ToolCallOutput, parse_tool_call_output, schema_to_gbnf, tool_call_gbnf};
//! use serde_json::json;
//!
//! let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
//! let gbnf = schema_to_gbnf(&schema)?;
//! assert!(gbnf.starts_with("root ::= "));
//!
//! let weather = ToolSpec::new("weather", "The weather in a city", schema);
//! let gbnf = tool_call_gbnf(&[weather], None)?;
//! assert!(gbnf.contains(r#""\"weather\"""#));
//!
//! // What the engine decoded under that grammar:
//! let out = parse_tool_call_output(r#"{"tool":"weather","arguments":{"city":"Oslo"}}"#)?;
//! assert_eq!(out, ToolCallOutput::Call { name: "weather".into(), arguments: json!({"city": "Oslo"}) });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The subset
//!
//! | keyword | grammar |
//! |---|---|
//! | `type` (a name or an array of names) | the union of the kinds; without `type`, the kinds the other keywords constrain (`properties` implies an object), or any JSON value when none |
//! | `properties`, `required` | optional properties optional, in the order the `serde_json::Map` iterates (alphabetical unless serde_json's `preserve_order` feature is on); a required name without a property schema takes any value; **no other property is generated** (as if `additionalProperties: false`), so `additionalProperties` may only be `true`, `false` or `{}` |
//! | `items`, `minItems`, `maxItems` | a bounded or open list |
//! | `minLength`, `maxLength` | a bounded count of characters (escapes count as one) |
//! | `enum`, `const` | the listed values, written compactly or with single spaces, filtered by the sibling keywords |
//! | `anyOf`, `oneOf` | the union; a `oneOf` whose branches may generate a value valid for another branch is refused |
//! | `$ref` to `#`, `#/$defs/..`, `#/definitions/..` | a rule (recursion allowed, when it consumes input first) |
//! | `description`, `title`, `default`, `examples`, `$schema`, `$comment`, `$defs`, `definitions`, `readOnly`, `writeOnly`, `deprecated`, `$id` (at the root), `uniqueItems: false`, unknown keywords | ignored |
//!
//! Every other keyword that constrains values (`pattern`, `format`, `minimum`, `multipleOf`, `not`, `allOf`,
//! `if`/`then`/`else`, `patternProperties`, `additionalProperties` with a schema, `prefixItems`, an external `$ref`
//! ...) is a [`SchemaError`] naming it and its JSON pointer, before any decoding. So is a combination the grammar
//! cannot intersect (`anyOf`/`oneOf`/`$ref` beside constraining siblings).
//!
//! Numbers are bounded so that every sentence parses as an `f64`/`i64` (16 digits before and after the point, a
//! two-digit exponent); lengths and counts above [`MAX_REPETITION`] are generated up to that bound only. Nesting
//! deeper than serde_json's default recursion limit (128) is reachable through unbounded schemas (`{}`, recursive
//! `$ref`s) but not what a model writes.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::ToolSpec;

/// The deepest nesting of subschemas (and of `$ref` chains, and of `enum`/`const` values) the converter follows.
pub const MAX_DEPTH: usize = 64;
/// The most subschemas, properties and `enum` values one conversion reads.
pub const MAX_SCHEMA_SIZE: usize = 10_000;
/// The largest count a `{m,n}` repetition of the grammar holds (llama.cpp refuses more than 2,000); a larger
/// `maxLength`/`maxItems` is generated up to this bound, a larger `minLength`/`minItems` is refused.
pub const MAX_REPETITION: u64 = 1_000;
/// The steps the `oneOf` overlap check and the `enum` filter may take in one conversion; past it they answer
/// "unknown", which refuses the `oneOf` or drops the value.
const MAX_CHECK_STEPS: usize = 1_000_000;

/// Why a schema has no grammar. Every variant names where in the schema (a JSON pointer, `""` for the root).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A keyword outside the subset that constrains values (`pattern`, `minimum`, `allOf`, ...).
    #[error("keyword `{keyword}` at `{pointer}` is not supported by the grammar converter")]
    Unsupported {
        /// The keyword.
        keyword: String,
        /// The JSON pointer of the keyword.
        pointer: String,
    },
    /// A keyword of the subset beside constraining siblings the grammar cannot intersect with it.
    #[error("keyword `{keyword}` at `{pointer}` cannot be combined with its sibling constraints")]
    UnsupportedCombination {
        /// The keyword (`$ref`, `anyOf` or `oneOf`).
        keyword: String,
        /// The JSON pointer of the keyword.
        pointer: String,
    },
    /// A keyword whose value is not what JSON Schema allows (a `type` name that is none, a negative length ...).
    #[error("invalid schema at `{pointer}`: {reason}")]
    Invalid {
        /// The JSON pointer of the offending value.
        pointer: String,
        /// What is wrong.
        reason: String,
    },
    /// A `$ref` that is external or points at nothing in the document.
    #[error(
        "`$ref` `{reference}` at `{pointer}` is not a local reference to `#`, `#/$defs/..` or `#/definitions/..` that exists"
    )]
    UnresolvedRef {
        /// The reference.
        reference: String,
        /// The JSON pointer of the `$ref` keyword.
        pointer: String,
    },
    /// A `oneOf` whose branches the converter cannot prove exclusive: a generated value might match two branches.
    #[error("the branches of `oneOf` at `{pointer}` may match the same value; use `anyOf`")]
    OverlappingOneOf {
        /// The JSON pointer of the `oneOf` keyword.
        pointer: String,
    },
    /// A `$ref` cycle that expands to itself before any character (`{"anyOf": [{"$ref": "#"}, ...]}`).
    #[error("the schema at `{pointer}` refers to itself before any character is written")]
    LeftRecursion {
        /// The JSON pointer of the recursive schema.
        pointer: String,
    },
    /// No finite JSON value is valid for the schema (`false`, an empty `enum`, `minItems` above `maxItems`, a
    /// required recursion without end ...).
    #[error("no JSON value is valid for the schema at `{pointer}`")]
    Unsatisfiable {
        /// The JSON pointer of the schema.
        pointer: String,
    },
    /// Subschemas (or `$ref` chains, or `enum` values) nested deeper than [`MAX_DEPTH`].
    #[error("the schema nests deeper than {limit} at `{pointer}`")]
    TooDeep {
        /// The JSON pointer where the limit was reached.
        pointer: String,
        /// [`MAX_DEPTH`].
        limit: usize,
    },
    /// More than [`MAX_SCHEMA_SIZE`] subschemas, properties and values.
    #[error("the schema has more than {limit} subschemas, properties and values")]
    TooLarge {
        /// [`MAX_SCHEMA_SIZE`].
        limit: usize,
    },
    /// A `minLength`/`minItems` above [`MAX_REPETITION`].
    #[error("`{keyword}` at `{pointer}` is {value}, above the grammar's limit of {limit}")]
    BoundTooLarge {
        /// The keyword.
        keyword: String,
        /// The JSON pointer of the keyword.
        pointer: String,
        /// Its value.
        value: u64,
        /// [`MAX_REPETITION`].
        limit: u64,
    },
    /// Two tools of a [`tool_call_gbnf`] share a name.
    #[error("two tools are named `{name}`")]
    DuplicateTool {
        /// The name.
        name: String,
    },
    /// The input schema of a tool of [`tool_call_gbnf`] has no grammar.
    #[error("the input schema of tool `{name}`: {source}")]
    Tool {
        /// The tool.
        name: String,
        /// Why; its pointers are relative to the tool's input schema.
        source: Box<SchemaError>,
    },
    /// The answer schema of [`tool_call_gbnf`] has no grammar.
    #[error("the answer schema: {0}")]
    Answer(Box<SchemaError>),
}

/// What a model decoded under a [`tool_call_gbnf`] grammar said.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolCallOutput {
    /// `{"tool":NAME,"arguments":ARGS}`: a call of tool `name`.
    Call {
        /// The tool called.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// `{"answer":X}`: the final answer (a JSON string unless the grammar had an answer schema).
    Answer(Value),
}

/// Why a model's output is not a [`ToolCallOutput`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The text ends before the JSON value does (the token budget ran out during decoding).
    #[error("the output ends before its JSON value does")]
    Truncated,
    /// The text is not one JSON value.
    #[error("the output is not JSON: {0}")]
    NotJson(String),
    /// The JSON value is neither `{"tool":NAME,"arguments":ARGS}` nor `{"answer":X}`.
    #[error("the output is neither a tool call nor an answer: {0}")]
    Shape(String),
}

/// The GBNF grammar (start rule `root`) whose sentences are the JSON values valid for `schema` that a model
/// writes compactly or with single spaces; see the [module documentation](self) for the subset.
pub fn schema_to_gbnf(schema: &Value) -> Result<String, SchemaError> {
    let mut builder = Builder::default();
    let root = builder.add_document(schema, Context::Schema)?;
    builder.finish(Expr::Rule(root))
}

/// The GBNF grammar of one step of a tool loop: `{"tool":"NAME","arguments":ARGS}` for each tool (`ARGS` valid for
/// its input schema) or `{"answer":X}`, `X` a JSON string or, when `answer_schema` is given, a value valid for it.
pub fn tool_call_gbnf(tools: &[ToolSpec], answer_schema: Option<&Value>) -> Result<String, SchemaError> {
    let mut builder = Builder::default();
    let mut seen = BTreeSet::new();
    let mut branches = Vec::with_capacity(tools.len() + 1);
    for tool in tools {
        if !seen.insert(tool.name.as_str()) {
            return Err(SchemaError::DuplicateTool { name: tool.name.clone() });
        }
        let args = builder.add_document(&tool.input_schema, Context::Tool(tool.name.clone()))?;
        branches.push(Expr::Seq(vec![
            member_head("tool"),
            Expr::Lit(json_string(&tool.name)),
            Expr::Prim(Prim::Ws),
            Expr::Lit(",".into()),
            Expr::Prim(Prim::Ws),
            member_head("arguments"),
            Expr::Rule(args),
        ]));
    }
    let answer = match answer_schema {
        Some(schema) => Expr::Rule(builder.add_document(schema, Context::Answer)?),
        None => Expr::Prim(Prim::String),
    };
    branches.push(Expr::Seq(vec![member_head("answer"), answer]));
    let root = Expr::Seq(vec![
        Expr::Lit("{".into()),
        Expr::Prim(Prim::Ws),
        Expr::Alt(branches),
        Expr::Prim(Prim::Ws),
        Expr::Lit("}".into()),
    ]);
    builder.finish(root)
}

/// Reads what a model decoded under a [`tool_call_gbnf`] grammar (surrounding whitespace allowed). It checks the
/// shape only, not the tool's name or its arguments against the schema: the grammar did.
pub fn parse_tool_call_output(text: &str) -> Result<ToolCallOutput, OutputError> {
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|e| if e.is_eof() { OutputError::Truncated } else { OutputError::NotJson(e.to_string()) })?;
    let Value::Object(mut map) = value else {
        return Err(OutputError::Shape("not a JSON object".into()));
    };
    if map.len() == 1
        && let Some(answer) = map.remove("answer")
    {
        return Ok(ToolCallOutput::Answer(answer));
    }
    if map.len() == 2
        && let (Some(Value::String(name)), Some(arguments)) = (map.remove("tool"), map.remove("arguments"))
    {
        return Ok(ToolCallOutput::Call { name, arguments });
    }
    Err(OutputError::Shape("expected the members `tool` and `arguments`, or `answer` alone".into()))
}

/// `"NAME"` `:` with the optional spaces around the colon.
fn member_head(name: &str) -> Expr {
    Expr::Seq(vec![Expr::Lit(json_string(name)), Expr::Prim(Prim::Ws), Expr::Lit(":".into()), Expr::Prim(Prim::Ws)])
}

// ---------------------------------------------------------------------------------------------------------------
// The schema, parsed: the subset as a tree, `$ref`s as indices into the document's definitions.

#[derive(Debug, Clone)]
enum Node {
    /// Any JSON value (`true`, `{}`).
    Any,
    /// No value (`false`, an empty `enum` ...).
    Never,
    /// Exactly these values (`enum`, `const`, already filtered by their siblings).
    Values(Vec<Value>),
    /// The definition at this index of the document.
    Ref(usize),
    /// At least one branch.
    AnyOf(Vec<Node>),
    /// Exactly one branch (the branches' generated values are proven exclusive).
    OneOf(Vec<Node>),
    /// A union of kinds, each with its own constraints.
    Typed(Box<Typed>),
}

#[derive(Debug, Clone, Default)]
struct Typed {
    null: bool,
    boolean: bool,
    integer: bool,
    /// Numbers, integers included.
    number: bool,
    string: Option<Bounds>,
    array: Option<ArrayRule>,
    object: Option<ObjectRule>,
}

#[derive(Debug, Clone, Copy)]
struct Bounds {
    min: u64,
    /// The schema's maximum (validation uses it; generation caps it at [`MAX_REPETITION`]).
    max: Option<u64>,
}

impl Bounds {
    fn admits(self, n: u64) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }
    /// The maximum a grammar generates.
    fn generated_max(self) -> u64 {
        self.max.map_or(MAX_REPETITION, |m| m.min(MAX_REPETITION))
    }
}

#[derive(Debug, Clone)]
struct ArrayRule {
    items: Node,
    len: Bounds,
}

#[derive(Debug, Clone)]
struct ObjectRule {
    props: Vec<Prop>,
    /// `additionalProperties: false`: validation refuses other members (generation never writes them anyway).
    closed: bool,
}

#[derive(Debug, Clone)]
struct Prop {
    name: String,
    node: Node,
    required: bool,
}

/// Keywords that do not constrain values.
const IGNORED: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$comment",
    "$defs",
    "definitions",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Keywords of JSON Schema (drafts 4 to 2020-12) that constrain values and that the grammar does not express.
const UNSUPPORTED: &[&str] = &[
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "not",
    "allOf",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "$dynamicRef",
    "$recursiveRef",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
];

/// Keywords that constrain values and that `$ref`, `anyOf` and `oneOf` cannot be combined with.
const CONSTRAINING: &[&str] = &[
    "$ref",
    "anyOf",
    "oneOf",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
];

/// A schema definition reached through `$ref`.
struct Def {
    pointer: String,
    node: Option<Node>,
}

/// One schema document being parsed (a tool's input schema, the answer schema ...).
struct Document<'a> {
    root: &'a Value,
    defs: Vec<Def>,
    by_pointer: HashMap<String, usize>,
    size: usize,
    /// Steps taken by [`Document::admits`] and [`Document::excludes`], which borrow the definitions.
    steps: Cell<usize>,
}

fn child(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", token.replace('~', "~0").replace('/', "~1"))
}

impl<'a> Document<'a> {
    fn new(root: &'a Value) -> Self {
        Self { root, defs: Vec::new(), by_pointer: HashMap::new(), size: 0, steps: Cell::new(0) }
    }

    fn count(&mut self, n: usize) -> Result<(), SchemaError> {
        self.size = self.size.saturating_add(n);
        if self.size > MAX_SCHEMA_SIZE {
            return Err(SchemaError::TooLarge { limit: MAX_SCHEMA_SIZE });
        }
        Ok(())
    }

    fn parse(&mut self, schema: &'a Value, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { pointer: pointer.into(), limit: MAX_DEPTH });
        }
        self.count(1)?;
        match schema {
            Value::Bool(true) => Ok(Node::Any),
            Value::Bool(false) => Ok(Node::Never),
            Value::Object(map) => self.parse_object(map, pointer, depth),
            _ => Err(SchemaError::Invalid {
                pointer: pointer.into(),
                reason: "a schema is an object or a boolean".into(),
            }),
        }
    }

    fn parse_object(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        for (keyword, value) in map {
            let at = || child(pointer, keyword);
            let unsupported = || SchemaError::Unsupported { keyword: keyword.clone(), pointer: at() };
            match keyword.as_str() {
                k if UNSUPPORTED.contains(&k) => return Err(unsupported()),
                // At the root `$id` names the document; below, it would start a new base for `$ref`s.
                "$id" if !pointer.is_empty() => return Err(unsupported()),
                "additionalProperties" if !is_trivial(value) => return Err(unsupported()),
                "uniqueItems" if value != &Value::Bool(false) => return Err(unsupported()),
                "items" if !value.is_object() && !value.is_boolean() => return Err(unsupported()),
                _ => {}
            }
        }
        let values = self.values(map, pointer)?;
        let rest = self.parse_rest(map, pointer, depth)?;
        let Some(values) = values else { return Ok(rest) };
        let mut kept: Vec<Value> = Vec::with_capacity(values.len());
        for value in values {
            if self.admits(&rest, value, 0) == Some(true) && !kept.iter().any(|k| json_eq(k, value)) {
                kept.push(value.clone());
            }
        }
        Ok(if kept.is_empty() { Node::Never } else { Node::Values(kept) })
    }

    /// The values `enum` and `const` allow (both when both are there), or `None` when neither is.
    fn values(&mut self, map: &'a Map<String, Value>, pointer: &str) -> Result<Option<Vec<&'a Value>>, SchemaError> {
        let mut values: Option<Vec<&'a Value>> = None;
        if let Some(list) = map.get("enum") {
            let Value::Array(list) = list else {
                return Err(SchemaError::Invalid {
                    pointer: child(pointer, "enum"),
                    reason: "`enum` is an array".into(),
                });
            };
            self.count(list.len())?;
            for (i, v) in list.iter().enumerate() {
                check_value_depth(v, &child(&child(pointer, "enum"), &i.to_string()))?;
            }
            values = Some(list.iter().collect());
        }
        if let Some(constant) = map.get("const") {
            check_value_depth(constant, &child(pointer, "const"))?;
            values = Some(match values {
                Some(list) => list.into_iter().filter(|v| json_eq(v, constant)).collect(),
                None => vec![constant],
            });
        }
        Ok(values)
    }

    /// The schema without its `enum` and `const`.
    fn parse_rest(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        for keyword in ["$ref", "anyOf", "oneOf"] {
            if map.contains_key(keyword) && CONSTRAINING.iter().any(|k| *k != keyword && map.contains_key(*k)) {
                return Err(SchemaError::UnsupportedCombination {
                    keyword: keyword.into(),
                    pointer: child(pointer, keyword),
                });
            }
        }
        if let Some(reference) = map.get("$ref") {
            return self.reference(reference, &child(pointer, "$ref"), depth);
        }
        for keyword in ["anyOf", "oneOf"] {
            let Some(branches) = map.get(keyword) else { continue };
            let at = child(pointer, keyword);
            let branches = match branches {
                Value::Array(list) if !list.is_empty() => list,
                _ => {
                    return Err(SchemaError::Invalid {
                        pointer: at,
                        reason: format!("`{keyword}` is a non-empty array"),
                    });
                }
            };
            let mut nodes = Vec::with_capacity(branches.len());
            for (i, branch) in branches.iter().enumerate() {
                nodes.push(self.parse(branch, &child(&at, &i.to_string()), depth + 1)?);
            }
            if keyword == "anyOf" {
                return Ok(Node::AnyOf(nodes));
            }
            for (i, a) in nodes.iter().enumerate() {
                for (j, b) in nodes.iter().enumerate() {
                    if i != j && !self.excludes(a, b, 0) {
                        return Err(SchemaError::OverlappingOneOf { pointer: at });
                    }
                }
            }
            return Ok(Node::OneOf(nodes));
        }
        self.parse_typed(map, pointer, depth)
    }

    fn reference(&mut self, reference: &Value, at: &str, depth: usize) -> Result<Node, SchemaError> {
        let Value::String(reference) = reference else {
            return Err(SchemaError::Invalid { pointer: at.into(), reason: "`$ref` is a string".into() });
        };
        let unresolved = || SchemaError::UnresolvedRef { reference: reference.clone(), pointer: at.into() };
        let target_pointer = match reference.strip_prefix('#') {
            Some(p) if p.is_empty() || p.starts_with("/$defs/") || p.starts_with("/definitions/") => p,
            _ => return Err(unresolved()),
        };
        if let Some(&index) = self.by_pointer.get(target_pointer) {
            return Ok(Node::Ref(index));
        }
        let target = self.root.pointer(target_pointer).ok_or_else(unresolved)?;
        let index = self.defs.len();
        self.defs.push(Def { pointer: target_pointer.into(), node: None });
        self.by_pointer.insert(target_pointer.into(), index);
        let node = self.parse(target, target_pointer, depth + 1)?;
        if let Some(def) = self.defs.get_mut(index) {
            def.node = Some(node);
        }
        Ok(Node::Ref(index))
    }

    fn parse_typed(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        let has = |keys: &[&str]| keys.iter().any(|k| map.contains_key(*k));
        let object_hint = has(&["properties", "required", "additionalProperties"]);
        let array_hint = has(&["items", "minItems", "maxItems"]);
        let string_hint = has(&["minLength", "maxLength"]);
        let mut kinds = BTreeSet::new();
        match map.get("type") {
            None if !(object_hint || array_hint || string_hint) => return Ok(Node::Any),
            None => {
                for (hint, kind) in [(object_hint, "object"), (array_hint, "array"), (string_hint, "string")] {
                    if hint {
                        kinds.insert(kind);
                    }
                }
            }
            Some(Value::String(name)) => {
                kinds.insert(type_name(name, &child(pointer, "type"))?);
            }
            Some(Value::Array(names)) => {
                for (i, name) in names.iter().enumerate() {
                    let at = child(&child(pointer, "type"), &i.to_string());
                    let Value::String(name) = name else {
                        return Err(SchemaError::Invalid { pointer: at, reason: "a type name is a string".into() });
                    };
                    kinds.insert(type_name(name, &at)?);
                }
            }
            Some(_) => {
                return Err(SchemaError::Invalid {
                    pointer: child(pointer, "type"),
                    reason: "`type` is a string or an array of strings".into(),
                });
            }
        }
        let mut typed = Typed {
            null: kinds.contains("null"),
            boolean: kinds.contains("boolean"),
            integer: kinds.contains("integer"),
            number: kinds.contains("number"),
            ..Typed::default()
        };
        if kinds.contains("string") {
            typed.string = bounds(map, "minLength", "maxLength", pointer)?;
        }
        if kinds.contains("array") {
            let len = bounds(map, "minItems", "maxItems", pointer)?;
            let items = match map.get("items") {
                Some(items) => self.parse(items, &child(pointer, "items"), depth + 1)?,
                None => Node::Any,
            };
            typed.array = len.map(|len| ArrayRule { items, len });
        }
        if kinds.contains("object") {
            typed.object = Some(self.object(map, pointer, depth)?);
        }
        Ok(Node::Typed(Box::new(typed)))
    }

    fn object(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<ObjectRule, SchemaError> {
        let mut props = Vec::new();
        if let Some(properties) = map.get("properties") {
            let at = child(pointer, "properties");
            let Value::Object(properties) = properties else {
                return Err(SchemaError::Invalid { pointer: at, reason: "`properties` is an object".into() });
            };
            for (name, schema) in properties {
                let node = self.parse(schema, &child(&at, name), depth + 1)?;
                props.push(Prop { name: name.clone(), node, required: false });
            }
        }
        let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
        if let Some(required) = map.get("required") {
            let at = child(pointer, "required");
            let Value::Array(required) = required else {
                return Err(SchemaError::Invalid { pointer: at, reason: "`required` is an array".into() });
            };
            self.count(required.len())?;
            for (i, name) in required.iter().enumerate() {
                let Value::String(name) = name else {
                    return Err(SchemaError::Invalid {
                        pointer: child(&at, &i.to_string()),
                        reason: "a required name is a string".into(),
                    });
                };
                match props.iter_mut().find(|p| &p.name == name) {
                    Some(prop) => prop.required = true,
                    // Valid values have it, with any value (none when the object is closed): generate it, after
                    // the declared ones.
                    None => {
                        let node = if closed { Node::Never } else { Node::Any };
                        props.push(Prop { name: name.clone(), node, required: true });
                    }
                }
            }
        }
        Ok(ObjectRule { props, closed })
    }

    fn def(&self, index: usize) -> Option<&Node> {
        self.defs.get(index).and_then(|d| d.node.as_ref())
    }

    /// One step of the checks; `false` once the budget or the depth is spent.
    fn step(&self, depth: usize) -> bool {
        self.steps.set(self.steps.get() + 1);
        self.steps.get() <= MAX_CHECK_STEPS && depth <= 4 * MAX_DEPTH
    }

    /// Whether `value` is valid for `node` under JSON Schema's rules (other members allowed unless the object is
    /// closed); `None` when unknown (a definition still being parsed, the budget spent).
    fn admits(&self, node: &Node, value: &Value, depth: usize) -> Option<bool> {
        if !self.step(depth) {
            return None;
        }
        match node {
            Node::Any => Some(true),
            Node::Never => Some(false),
            Node::Values(values) => Some(values.iter().any(|v| json_eq(v, value))),
            Node::Ref(i) => self.admits(self.def(*i)?, value, depth + 1),
            Node::AnyOf(nodes) => {
                let mut unknown = false;
                for n in nodes {
                    match self.admits(n, value, depth + 1) {
                        Some(true) => return Some(true),
                        Some(false) => {}
                        None => unknown = true,
                    }
                }
                if unknown { None } else { Some(false) }
            }
            Node::OneOf(nodes) => {
                let mut matched = 0;
                for n in nodes {
                    matched += usize::from(self.admits(n, value, depth + 1)?);
                }
                Some(matched == 1)
            }
            Node::Typed(t) => self.admits_typed(t, value, depth),
        }
    }

    fn admits_typed(&self, t: &Typed, value: &Value, depth: usize) -> Option<bool> {
        match value {
            Value::Null => Some(t.null),
            Value::Bool(_) => Some(t.boolean),
            Value::Number(n) => {
                let integral = n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0);
                Some(t.number || (t.integer && integral))
            }
            Value::String(s) => Some(t.string.is_some_and(|b| b.admits(s.chars().count() as u64))),
            Value::Array(items) => {
                let Some(rule) = &t.array else { return Some(false) };
                if !rule.len.admits(items.len() as u64) {
                    return Some(false);
                }
                for item in items {
                    if !self.admits(&rule.items, item, depth + 1)? {
                        return Some(false);
                    }
                }
                Some(true)
            }
            Value::Object(members) => {
                let Some(rule) = &t.object else { return Some(false) };
                for prop in &rule.props {
                    match members.get(&prop.name) {
                        None if prop.required => return Some(false),
                        Some(v) if !self.admits(&prop.node, v, depth + 1)? => return Some(false),
                        _ => {}
                    }
                }
                Some(!rule.closed || members.keys().all(|k| rule.props.iter().any(|p| &p.name == k)))
            }
        }
    }

    /// Whether no value the grammar of `a` generates is valid for `b` (`false` when unsure).
    fn excludes(&self, a: &Node, b: &Node, depth: usize) -> bool {
        if !self.step(depth) {
            return false;
        }
        match (a, b) {
            (Node::Never, _) | (_, Node::Never) => true,
            (_, Node::Any) | (Node::Any, _) => false,
            (Node::Values(values), _) => values.iter().all(|v| self.admits(b, v, depth + 1) == Some(false)),
            (Node::Ref(i), _) => self.def(*i).is_some_and(|a| self.excludes(a, b, depth + 1)),
            (Node::AnyOf(nodes) | Node::OneOf(nodes), _) => nodes.iter().all(|n| self.excludes(n, b, depth + 1)),
            // A value `a` generates is one of its own (generation is sound), so none of `b`'s values if `a`
            // refuses them all.
            (_, Node::Values(values)) => values.iter().all(|v| self.admits(a, v, depth + 1) == Some(false)),
            (_, Node::Ref(i)) => self.def(*i).is_some_and(|b| self.excludes(a, b, depth + 1)),
            // A value valid for a `oneOf` is valid for one of its branches.
            (_, Node::AnyOf(nodes) | Node::OneOf(nodes)) => nodes.iter().all(|n| self.excludes(a, n, depth + 1)),
            (Node::Typed(a), Node::Typed(b)) => self.excludes_typed(a, b, depth),
        }
    }

    fn excludes_typed(&self, a: &Typed, b: &Typed, depth: usize) -> bool {
        let numbers_a = a.integer || a.number;
        let numbers_b = b.integer || b.number;
        if (a.null && b.null) || (a.boolean && b.boolean) || (numbers_a && numbers_b) {
            return false;
        }
        if let (Some(sa), Some(sb)) = (a.string, b.string) {
            let (lo, hi) = (sa.min, sa.generated_max());
            if lo <= hi && sb.min <= hi && sb.max.is_none_or(|m| m >= lo) {
                return false;
            }
        }
        if let (Some(aa), Some(ab)) = (&a.array, &b.array) {
            let (lo, hi) = (aa.len.min, aa.len.generated_max());
            let counts_overlap = lo <= hi && ab.len.min <= hi && ab.len.max.is_none_or(|m| m >= lo);
            // Arrays of a's lengths that b allows: refused only when a's items never pass b's (and none is empty).
            if counts_overlap && (ab.len.admits(0) && lo == 0 || !self.excludes(&aa.items, &ab.items, depth + 1)) {
                return false;
            }
        }
        if let (Some(oa), Some(ob)) = (&a.object, &b.object) {
            let mut excluded = false;
            for pb in ob.props.iter().filter(|p| p.required) {
                match oa.props.iter().find(|p| p.name == pb.name) {
                    None => excluded = true,
                    Some(pa) => excluded |= self.excludes(&pa.node, &pb.node, depth + 1),
                }
                if excluded {
                    break;
                }
            }
            if !excluded {
                for pa in oa.props.iter().filter(|p| p.required) {
                    match ob.props.iter().find(|p| p.name == pa.name) {
                        None => excluded = ob.closed,
                        Some(pb) => excluded = self.excludes(&pa.node, &pb.node, depth + 1),
                    }
                    if excluded {
                        break;
                    }
                }
            }
            if !excluded {
                return false;
            }
        }
        true
    }
}

/// `additionalProperties` values that say nothing more than the grammar does: `true`, `false`, `{}`.
fn is_trivial(value: &Value) -> bool {
    match value {
        Value::Bool(_) => true,
        Value::Object(map) => map.keys().all(|k| IGNORED.contains(&k.as_str())),
        _ => false,
    }
}

fn type_name<'n>(name: &'n str, pointer: &str) -> Result<&'n str, SchemaError> {
    match name {
        "null" | "boolean" | "integer" | "number" | "string" | "array" | "object" => Ok(name),
        _ => {
            Err(SchemaError::Invalid { pointer: pointer.into(), reason: format!("`{name}` is not a JSON Schema type") })
        }
    }
}

/// The bounds `min_key`..`max_key`, or `None` when no count is in them.
fn bounds(
    map: &Map<String, Value>,
    min_key: &str,
    max_key: &str,
    pointer: &str,
) -> Result<Option<Bounds>, SchemaError> {
    let count = |key: &str| -> Result<Option<u64>, SchemaError> {
        match map.get(key) {
            None => Ok(None),
            Some(v) => count_value(v).map(Some).ok_or_else(|| SchemaError::Invalid {
                pointer: child(pointer, key),
                reason: format!("`{key}` is a non-negative integer"),
            }),
        }
    };
    let min = count(min_key)?.unwrap_or(0);
    let max = count(max_key)?;
    if min > MAX_REPETITION {
        return Err(SchemaError::BoundTooLarge {
            keyword: min_key.into(),
            pointer: child(pointer, min_key),
            value: min,
            limit: MAX_REPETITION,
        });
    }
    Ok(if max.is_some_and(|m| m < min) { None } else { Some(Bounds { min, max }) })
}

/// A count: a non-negative integer, written `3` or `3.0`.
fn count_value(v: &Value) -> Option<u64> {
    let n = v.as_number()?;
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    let f = n.as_f64()?;
    // Whole floats beyond u64 saturate: a bound that large is no bound for a grammar.
    (f >= 0.0 && f.fract() == 0.0).then_some(f as u64)
}

/// Refuses values nested deeper than [`MAX_DEPTH`], without recursion.
fn check_value_depth(value: &Value, pointer: &str) -> Result<(), SchemaError> {
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { pointer: pointer.into(), limit: MAX_DEPTH });
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(members) => stack.extend(members.values().map(|i| (i, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// JSON Schema's equality: numbers by value (`1` equals `1.0`), objects whatever their member order. Values are
/// at most [`MAX_DEPTH`] deep (checked when read).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(i), Some(j), _, _) => i == j,
            (_, _, Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The grammar: rules of expressions, pruned of what generates nothing, then written as GBNF.

/// The fixed rules of JSON's lexical pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Prim {
    /// At most one space.
    Ws,
    /// One character of a string, raw or escaped.
    Char,
    /// Any string.
    String,
    Integer,
    Number,
    Boolean,
    /// Any JSON value.
    Value,
}

impl Prim {
    fn name(self) -> &'static str {
        match self {
            Prim::Ws => "ws",
            Prim::Char => "json-char",
            Prim::String => "json-string",
            Prim::Integer => "json-integer",
            Prim::Number => "json-number",
            Prim::Boolean => "json-boolean",
            Prim::Value => "json-value",
        }
    }

    /// Its rules (the first one is its own), and the pieces they use.
    fn rules(self) -> (&'static [&'static str], &'static [Prim]) {
        match self {
            Prim::Ws => (&[r#"ws ::= " "?"#], &[]),
            // `\u` escapes of surrogates are left out: serde_json refuses a lone one, and the character itself
            // can be written raw.
            Prim::Char => (
                &[
                    r#"json-char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" json-hex4 )"#,
                    r#"json-hex4 ::= ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F] | [dD] [0-7] ) [0-9a-fA-F] [0-9a-fA-F]"#,
                ],
                &[],
            ),
            Prim::String => (&[r#"json-string ::= "\"" json-char* "\"""#], &[Prim::Char]),
            // Bounded digits: every sentence fits an i64, or an f64 below its overflow.
            Prim::Integer => (&[r#"json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )"#], &[]),
            Prim::Number => {
                (&[r#"json-number ::= json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?"#], &[Prim::Integer])
            }
            Prim::Boolean => (&[r#"json-boolean ::= "true" | "false""#], &[]),
            Prim::Value => (
                &[
                    r#"json-value ::= json-object | json-array | json-string | json-number | json-boolean | "null""#,
                    r#"json-object ::= "{" ws ( json-member ( ws "," ws json-member )* ws )? "}""#,
                    r#"json-member ::= json-string ws ":" ws json-value"#,
                    r#"json-array ::= "[" ws ( json-value ( ws "," ws json-value )* ws )? "]""#,
                ],
                &[Prim::Ws, Prim::String, Prim::Number, Prim::Boolean],
            ),
        }
    }
}

#[derive(Debug, Clone)]
enum Expr {
    /// The empty string.
    Empty,
    /// Nothing (pruned before writing).
    Never,
    /// This text exactly.
    Lit(String),
    Prim(Prim),
    Rule(usize),
    Seq(Vec<Expr>),
    Alt(Vec<Expr>),
    Repeat(Box<Expr>, u64, Option<u64>),
}

fn ws() -> Expr {
    Expr::Prim(Prim::Ws)
}

fn lit(text: &str) -> Expr {
    Expr::Lit(text.into())
}

/// Where a document came from, to say so in its errors.
#[derive(Debug, Clone)]
enum Context {
    Schema,
    Tool(String),
    Answer,
}

impl Context {
    fn wrap(&self, e: SchemaError) -> SchemaError {
        match self {
            Context::Schema => e,
            Context::Tool(name) => SchemaError::Tool { name: name.clone(), source: Box::new(e) },
            Context::Answer => SchemaError::Answer(Box::new(e)),
        }
    }
}

struct Rule {
    name: String,
    body: Expr,
    /// The document and pointer it comes from, for errors.
    origin: Option<(Context, String)>,
}

#[derive(Default)]
struct Builder {
    rules: Vec<Rule>,
}

impl Builder {
    fn rule(&mut self, name: String, origin: Option<(Context, String)>) -> usize {
        self.rules.push(Rule { name, body: Expr::Never, origin });
        self.rules.len() - 1
    }

    fn set(&mut self, rule: usize, body: Expr) {
        if let Some(r) = self.rules.get_mut(rule) {
            r.body = body;
        }
    }

    /// Parses and compiles one schema document; returns the rule of its root.
    fn add_document(&mut self, schema: &Value, context: Context) -> Result<usize, SchemaError> {
        let mut doc = Document::new(schema);
        let node = doc.parse(schema, "", 0).map_err(|e| context.wrap(e))?;
        let root = self.rule(format!("doc{}", self.rules.len()), Some((context.clone(), String::new())));
        let mut compiler =
            Compiler { builder: self, doc: &doc, def_rules: HashMap::new(), pending: Vec::new(), context };
        let body = compiler.compile(&node);
        compiler.builder.set(root, body);
        // Definitions are compiled from a work list, not recursively, so that a long chain cannot overflow the stack.
        while let Some((index, rule)) = compiler.pending.pop() {
            let body = match compiler.doc.def(index) {
                Some(node) => compiler.compile(node),
                None => Expr::Never,
            };
            compiler.builder.set(rule, body);
        }
        Ok(root)
    }

    /// Prunes what generates nothing, checks for left recursion and writes the grammar with `root` as its start.
    fn finish(mut self, root: Expr) -> Result<String, SchemaError> {
        let root_rule = self.rule("root".into(), None);
        self.set(root_rule, root);
        let productive = self.productive();
        for (rule, ok) in self.rules.iter().zip(&productive) {
            if let (false, Some((context, pointer))) = (ok, &rule.origin) {
                // A document whose root generates nothing is the caller's error; a definition that generates
                // nothing is only pruned (another branch may still generate).
                if pointer.is_empty() && rule.name.starts_with("doc") {
                    return Err(context.wrap(SchemaError::Unsatisfiable { pointer: String::new() }));
                }
            }
        }
        for rule in &mut self.rules {
            rule.body = simplify(std::mem::replace(&mut rule.body, Expr::Never), &productive);
        }
        if matches!(self.rules.get(root_rule).map(|r| &r.body), Some(Expr::Never) | None) {
            return Err(SchemaError::Unsatisfiable { pointer: String::new() });
        }
        let reachable = self.reachable(root_rule);
        self.check_left_recursion(&reachable)?;
        Ok(self.write(root_rule, &reachable))
    }

    /// Which rules generate at least one finite sentence (a least fixpoint).
    fn productive(&self) -> Vec<bool> {
        let mut productive = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (i, rule) in self.rules.iter().enumerate() {
                if !productive[i] && is_productive(&rule.body, &productive) {
                    productive[i] = true;
                    changed = true;
                }
            }
            if !changed {
                return productive;
            }
        }
    }

    fn reachable(&self, root: usize) -> Vec<bool> {
        let mut seen = vec![false; self.rules.len()];
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            if seen.get(i).copied().unwrap_or(true) {
                continue;
            }
            seen[i] = true;
            if let Some(rule) = self.rules.get(i) {
                rule_refs(&rule.body, &mut |r| stack.push(r));
            }
        }
        seen
    }

    /// llama.cpp refuses a rule that can reach itself before consuming a character.
    fn check_left_recursion(&self, reachable: &[bool]) -> Result<(), SchemaError> {
        let n = self.rules.len();
        let mut nullable = vec![false; n];
        loop {
            let mut changed = false;
            for (i, rule) in self.rules.iter().enumerate() {
                if !nullable[i] && is_nullable(&rule.body, &nullable) {
                    nullable[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let left: Vec<Vec<usize>> = self
            .rules
            .iter()
            .map(|r| {
                let mut out = Vec::new();
                left_refs(&r.body, &nullable, &mut out);
                out
            })
            .collect();
        // Iterative depth-first search: 0 unvisited, 1 on the path, 2 done.
        let mut state = vec![0u8; n];
        for start in (0..n).filter(|&i| reachable[i]) {
            if state[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            state[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                match left.get(node).and_then(|l| l.get(*next)).copied() {
                    Some(to) => {
                        *next += 1;
                        match state.get(to) {
                            Some(0) => {
                                state[to] = 1;
                                stack.push((to, 0));
                            }
                            Some(1) => {
                                // The cycle is the path from `to` on; name its first rule that comes from a schema.
                                let from = stack.iter().position(|(r, _)| *r == to).unwrap_or(0);
                                let culprit = stack[from..].iter().find_map(|(r, _)| self.rules[*r].origin.clone());
                                let (context, pointer) = culprit.unwrap_or((Context::Schema, String::new()));
                                return Err(context.wrap(SchemaError::LeftRecursion { pointer }));
                            }
                            _ => {}
                        }
                    }
                    None => {
                        state[node] = 2;
                        stack.pop();
                    }
                }
            }
        }
        Ok(())
    }

    fn write(&self, root: usize, reachable: &[bool]) -> String {
        let mut out = String::new();
        let order = std::iter::once(root).chain((0..self.rules.len()).filter(|&i| i != root && reachable[i]));
        let mut prims = BTreeSet::new();
        for i in order {
            let rule = &self.rules[i];
            let _ = write!(out, "{} ::= ", rule.name);
            self.render(&rule.body, Ctx::Top, &mut out);
            out.push('\n');
            collect_prims(&rule.body, &mut prims);
        }
        let mut todo: Vec<Prim> = prims.iter().copied().collect();
        while let Some(p) = todo.pop() {
            for dep in p.rules().1 {
                if prims.insert(*dep) {
                    todo.push(*dep);
                }
            }
        }
        for p in prims {
            for line in p.rules().0 {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    fn render(&self, e: &Expr, ctx: Ctx, out: &mut String) {
        match e {
            Expr::Empty => out.push_str("\"\""),
            // Pruned before writing; an empty character class would match nothing if one remained.
            Expr::Never => out.push_str(r"[^\x00-\U0010FFFF]"),
            Expr::Lit(text) => gbnf_literal(text, out),
            Expr::Prim(p) => out.push_str(p.name()),
            Expr::Rule(i) => out.push_str(self.rules.get(*i).map_or("root", |r| r.name.as_str())),
            Expr::Seq(items) => {
                let paren = ctx == Ctx::Postfix;
                if paren {
                    out.push_str("( ");
                }
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push(' ');
                    }
                    self.render(item, Ctx::Item, out);
                }
                if paren {
                    out.push_str(" )");
                }
            }
            Expr::Alt(items) => {
                let paren = ctx != Ctx::Top;
                if paren {
                    out.push_str("( ");
                }
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push_str(" | ");
                    }
                    self.render(item, Ctx::Item, out);
                }
                if paren {
                    out.push_str(" )");
                }
            }
            Expr::Repeat(inner, min, max) => {
                self.render(inner, Ctx::Postfix, out);
                let _ = match (min, max) {
                    (0, None) => write!(out, "*"),
                    (1, None) => write!(out, "+"),
                    (0, Some(1)) => write!(out, "?"),
                    (m, None) => write!(out, "{{{m},}}"),
                    (m, Some(n)) if m == n => write!(out, "{{{m}}}"),
                    (m, Some(n)) => write!(out, "{{{m},{n}}}"),
                };
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// A rule's whole body.
    Top,
    /// An item of a sequence or an alternative.
    Item,
    /// The operand of a repetition.
    Postfix,
}

/// A GBNF literal: `"`, `\` and control characters escaped, the rest as UTF-8.
fn gbnf_literal(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as JSON text, as serde_json writes it.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn is_productive(e: &Expr, productive: &[bool]) -> bool {
    match e {
        Expr::Never => false,
        Expr::Empty | Expr::Lit(_) | Expr::Prim(_) => true,
        Expr::Rule(i) => productive.get(*i).copied().unwrap_or(false),
        Expr::Seq(items) => items.iter().all(|x| is_productive(x, productive)),
        Expr::Alt(items) => items.iter().any(|x| is_productive(x, productive)),
        Expr::Repeat(x, min, max) => *min == 0 || *max == Some(0) || is_productive(x, productive),
    }
}

fn is_nullable(e: &Expr, nullable: &[bool]) -> bool {
    match e {
        Expr::Never => false,
        Expr::Empty => true,
        Expr::Lit(s) => s.is_empty(),
        Expr::Prim(p) => *p == Prim::Ws,
        Expr::Rule(i) => nullable.get(*i).copied().unwrap_or(false),
        Expr::Seq(items) => items.iter().all(|x| is_nullable(x, nullable)),
        Expr::Alt(items) => items.iter().any(|x| is_nullable(x, nullable)),
        Expr::Repeat(x, min, _) => *min == 0 || is_nullable(x, nullable),
    }
}

/// The rules `e` can start with.
fn left_refs(e: &Expr, nullable: &[bool], out: &mut Vec<usize>) {
    match e {
        Expr::Rule(i) => out.push(*i),
        Expr::Seq(items) => {
            for x in items {
                left_refs(x, nullable, out);
                if !is_nullable(x, nullable) {
                    break;
                }
            }
        }
        Expr::Alt(items) => items.iter().for_each(|x| left_refs(x, nullable, out)),
        Expr::Repeat(x, _, _) => left_refs(x, nullable, out),
        Expr::Empty | Expr::Never | Expr::Lit(_) | Expr::Prim(_) => {}
    }
}

fn rule_refs(e: &Expr, f: &mut impl FnMut(usize)) {
    match e {
        Expr::Rule(i) => f(*i),
        Expr::Seq(items) | Expr::Alt(items) => items.iter().for_each(|x| rule_refs(x, f)),
        Expr::Repeat(x, _, _) => rule_refs(x, f),
        Expr::Empty | Expr::Never | Expr::Lit(_) | Expr::Prim(_) => {}
    }
}

fn collect_prims(e: &Expr, out: &mut BTreeSet<Prim>) {
    match e {
        Expr::Prim(p) => {
            out.insert(*p);
        }
        Expr::Seq(items) | Expr::Alt(items) => items.iter().for_each(|x| collect_prims(x, out)),
        Expr::Repeat(x, _, _) => collect_prims(x, out),
        Expr::Empty | Expr::Never | Expr::Lit(_) | Expr::Rule(_) => {}
    }
}

/// `e` without the parts that generate nothing (references to unproductive rules), flattened.
fn simplify(e: Expr, productive: &[bool]) -> Expr {
    match e {
        Expr::Lit(s) if s.is_empty() => Expr::Empty,
        Expr::Rule(i) if !productive.get(i).copied().unwrap_or(false) => Expr::Never,
        Expr::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for x in items {
                match simplify(x, productive) {
                    Expr::Never => return Expr::Never,
                    Expr::Empty => {}
                    Expr::Seq(inner) => out.extend(inner),
                    x => out.push(x),
                }
            }
            match out.len() {
                0 => Expr::Empty,
                1 => out.pop().unwrap_or(Expr::Empty),
                _ => Expr::Seq(out),
            }
        }
        Expr::Alt(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut empty = false;
            for x in items {
                match simplify(x, productive) {
                    Expr::Never => {}
                    Expr::Empty => empty = true,
                    Expr::Alt(inner) => out.extend(inner),
                    x => out.push(x),
                }
            }
            let body = match out.len() {
                0 => return if empty { Expr::Empty } else { Expr::Never },
                1 => out.pop().unwrap_or(Expr::Empty),
                _ => Expr::Alt(out),
            };
            if empty { Expr::Repeat(Box::new(body), 0, Some(1)) } else { body }
        }
        Expr::Repeat(x, min, max) => {
            if max == Some(0) {
                return Expr::Empty;
            }
            match simplify(*x, productive) {
                Expr::Never if min == 0 => Expr::Empty,
                Expr::Never => Expr::Never,
                Expr::Empty => Expr::Empty,
                x => Expr::Repeat(Box::new(x), min, max),
            }
        }
        e => e,
    }
}

/// Compiles one document's nodes into the builder's rules.
struct Compiler<'b, 'd> {
    builder: &'b mut Builder,
    doc: &'d Document<'d>,
    def_rules: HashMap<usize, usize>,
    pending: Vec<(usize, usize)>,
    context: Context,
}

impl Compiler<'_, '_> {
    fn new_rule(&mut self, kind: &str) -> usize {
        let n = self.builder.rules.len();
        self.builder.rule(format!("{kind}{n}"), None)
    }

    /// `body` as a rule of its own, so that it can be used twice without being written twice.
    fn shared(&mut self, kind: &str, body: Expr) -> Expr {
        match body {
            e @ (Expr::Lit(_) | Expr::Prim(_) | Expr::Rule(_) | Expr::Never | Expr::Empty) => e,
            body => {
                let rule = self.new_rule(kind);
                self.builder.set(rule, body);
                Expr::Rule(rule)
            }
        }
    }

    fn compile(&mut self, node: &Node) -> Expr {
        match node {
            Node::Any => Expr::Prim(Prim::Value),
            Node::Never => Expr::Never,
            Node::Values(values) => Expr::Alt(values.iter().map(value_expr).collect()),
            Node::Ref(index) => Expr::Rule(self.def_rule(*index)),
            Node::AnyOf(nodes) | Node::OneOf(nodes) => Expr::Alt(nodes.iter().map(|n| self.compile(n)).collect()),
            Node::Typed(t) => self.compile_typed(t),
        }
    }

    fn def_rule(&mut self, index: usize) -> usize {
        if let Some(&rule) = self.def_rules.get(&index) {
            return rule;
        }
        let pointer = self.doc.defs.get(index).map(|d| d.pointer.clone()).unwrap_or_default();
        let label: String = pointer
            .rsplit('/')
            .next()
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(32)
            .collect();
        let n = self.builder.rules.len();
        let name = if label.is_empty() { format!("def{n}") } else { format!("def-{label}-{n}") };
        let rule = self.builder.rule(name, Some((self.context.clone(), pointer)));
        self.def_rules.insert(index, rule);
        self.pending.push((index, rule));
        rule
    }

    fn compile_typed(&mut self, t: &Typed) -> Expr {
        let mut alts = Vec::new();
        if t.null {
            alts.push(lit("null"));
        }
        if t.boolean {
            alts.push(Expr::Prim(Prim::Boolean));
        }
        if t.number {
            alts.push(Expr::Prim(Prim::Number));
        } else if t.integer {
            alts.push(Expr::Prim(Prim::Integer));
        }
        if let Some(b) = t.string {
            alts.push(if b.min == 0 && b.max.is_none() {
                Expr::Prim(Prim::String)
            } else {
                Expr::Seq(vec![
                    lit("\""),
                    Expr::Repeat(Box::new(Expr::Prim(Prim::Char)), b.min, Some(b.generated_max())),
                    lit("\""),
                ])
            });
        }
        if let Some(a) = &t.array {
            alts.push(self.compile_array(a));
        }
        if let Some(o) = &t.object {
            alts.push(self.compile_object(o));
        }
        Expr::Alt(alts)
    }

    fn compile_array(&mut self, a: &ArrayRule) -> Expr {
        let items = self.compile(&a.items);
        let item = self.shared("item", items);
        let mut alts = Vec::new();
        if a.len.min == 0 {
            alts.push(Expr::Seq(vec![lit("["), ws(), lit("]")]));
        }
        let max = a.len.generated_max();
        if max >= 1 {
            let more = Expr::Seq(vec![ws(), lit(","), ws(), item.clone()]);
            alts.push(Expr::Seq(vec![
                lit("["),
                ws(),
                item,
                Expr::Repeat(Box::new(more), a.len.min.saturating_sub(1), a.len.max.map(|_| max - 1)),
                ws(),
                lit("]"),
            ]));
        }
        Expr::Alt(alts)
    }

    /// Members in the order of the properties, optional ones skippable, commas only between members: `first(i)`
    /// writes at least one member from the `i`-th on, `rest(i)` the members from the `i`-th on, each after a comma.
    fn compile_object(&mut self, o: &ObjectRule) -> Expr {
        let n = o.props.len();
        let mut members = Vec::with_capacity(n);
        for p in &o.props {
            let value = self.compile(&p.node);
            let member = Expr::Seq(vec![member_head(&p.name), value]);
            members.push(self.shared("member", member));
        }
        let mut rest = Expr::Empty;
        let mut first = Expr::Never;
        for (i, p) in o.props.iter().enumerate().rev() {
            let member = members.get(i).cloned().unwrap_or(Expr::Never);
            let with_rest = Expr::Seq(vec![member.clone(), rest.clone()]);
            first = if p.required { with_rest } else { Expr::Alt(vec![with_rest, first]) };
            first = self.shared("first", first);
            let after = Expr::Seq(vec![ws(), lit(","), ws(), member]);
            rest = if p.required {
                Expr::Seq(vec![after, rest])
            } else {
                Expr::Seq(vec![Expr::Repeat(Box::new(after), 0, Some(1)), rest])
            };
            rest = self.shared("rest", rest);
        }
        let mut alts = Vec::new();
        if o.props.iter().all(|p| !p.required) {
            alts.push(Expr::Seq(vec![lit("{"), ws(), lit("}")]));
        }
        alts.push(Expr::Seq(vec![lit("{"), ws(), first, ws(), lit("}")]));
        Expr::Alt(alts)
    }
}

/// Exactly `value`, with the optional spaces between its tokens.
fn value_expr(value: &Value) -> Expr {
    match value {
        Value::Null => lit("null"),
        Value::Bool(b) => lit(if *b { "true" } else { "false" }),
        Value::Number(n) => Expr::Lit(n.to_string()),
        Value::String(s) => Expr::Lit(json_string(s)),
        Value::Array(items) => {
            let mut seq = vec![lit("["), ws()];
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    seq.extend([ws(), lit(","), ws()]);
                }
                seq.push(value_expr(item));
            }
            if !items.is_empty() {
                seq.push(ws());
            }
            seq.push(lit("]"));
            Expr::Seq(seq)
        }
        Value::Object(members) => {
            let mut seq = vec![lit("{"), ws()];
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    seq.extend([ws(), lit(","), ws()]);
                }
                seq.extend([member_head(k), value_expr(v)]);
            }
            if !members.is_empty() {
                seq.push(ws());
            }
            seq.push(lit("}"));
            Expr::Seq(seq)
        }
    }
}
