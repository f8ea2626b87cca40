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

mod gbnf;
mod schema;

pub use schema::UNSUPPORTED_KEYWORDS;

use gbnf::*;
use schema::*;

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
