//! The mapping between an LDP capability and an MCP tool, and between a task's answer and a `tools/call` result.
//! Pure functions: the server and the tests use the same ones.

use std::sync::Arc;

use ldp_types::{Capability, IdentityCard, LdpError, Provenance, RawJson};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool};
use serde_json::{Value, json};

/// The `_meta` key of a successful result's LDP provenance (RFC 6: who produced it, with what model, in which session,
/// its verification status and contract check).
pub const PROVENANCE_META: &str = "ldp/provenance";
/// The `_meta` key of a failed result's typed LDP error (code, category, retryable, partial output).
pub const ERROR_META: &str = "ldp/error";
/// The `_meta` key of a tool's LDP capability (its quality claims with their claim types, latency and cost hints).
pub const CAPABILITY_META: &str = "ldp/capability";
/// The `_meta` key of the initialize result's LDP identity card.
pub const IDENTITY_META: &str = "ldp/identity";
/// The argument that carries the task's input when the skill's input is not itself a JSON object (MCP tool
/// arguments always are).
pub const INPUT_ARGUMENT: &str = "input";
/// The error code of `tools/call` arguments that do not give the skill an input.
pub const INVALID_INPUT: &str = "INVALID_INPUT";

/// Whether the skill's declared input is a JSON object, so that the tool's arguments are the task's input as they
/// are. Otherwise (a string, a number, an unknown schema) the input travels in the [`INPUT_ARGUMENT`] argument.
fn takes_object(capability: &Capability) -> bool {
    matches!(&capability.input_schema, Some(Value::Object(s)) if s.get("type") == Some(&json!("object")))
}

/// The tool's input schema: the skill's own when it describes an object; otherwise an object with one required
/// [`INPUT_ARGUMENT`] property holding the skill's schema (any JSON value when the card gives none), with the
/// schema's definitions moved to the root so that its references still resolve.
pub fn input_schema(capability: &Capability) -> JsonObject {
    if let (true, Some(Value::Object(schema))) = (takes_object(capability), &capability.input_schema) {
        return schema.clone();
    }
    let mut inner = match &capability.input_schema {
        Some(Value::Object(schema)) => schema.clone(),
        Some(other) => JsonObject::from_iter([("const".to_owned(), other.clone())]),
        None => JsonObject::from_iter([("description".to_owned(), json!("the task's input: any JSON value"))]),
    };
    let mut root = JsonObject::new();
    for key in ["$schema", "$defs", "definitions"] {
        if let Some(v) = inner.remove(key) {
            root.insert(key.to_owned(), v);
        }
    }
    root.insert("type".to_owned(), json!("object"));
    root.insert("properties".to_owned(), json!({ INPUT_ARGUMENT: Value::Object(inner) }));
    root.insert("required".to_owned(), json!([INPUT_ARGUMENT]));
    root
}

/// The MCP tool of an LDP capability: its name, its description, the input schema of [`input_schema`], an output
/// schema when the skill's output is a JSON object, and the capability itself under [`CAPABILITY_META`] (so a host
/// sees the quality claims with their claim types, `self_claimed` included, rather than bare numbers).
pub fn tool(capability: &Capability) -> Tool {
    let description = capability.description.clone().unwrap_or_else(|| format!("LDP skill {}", capability.name));
    let mut tool = Tool::new(capability.name.clone(), description, Arc::new(input_schema(capability)));
    if let Some(Value::Object(schema)) = &capability.output_schema
        && schema.get("type") == Some(&json!("object"))
    {
        tool = tool.with_raw_output_schema(Arc::new(schema.clone()));
    }
    if let Ok(cap) = serde_json::to_value(capability) {
        let mut meta = MetaObject::new();
        meta.insert(CAPABILITY_META.to_owned(), cap);
        tool = tool.with_meta(meta);
    }
    tool
}

/// Every capability of the card as a tool, in the card's order.
pub fn tools(card: &IdentityCard) -> Vec<Tool> {
    card.capabilities.iter().map(tool).collect()
}

/// The task input for a `tools/call`: the arguments object itself for an object-taking skill, else the value of
/// its [`INPUT_ARGUMENT`] argument (an [`INVALID_INPUT`] error when it is missing).
pub fn task_input(capability: &Capability, arguments: Option<JsonObject>) -> Result<RawJson, LdpError> {
    let mut arguments = arguments.unwrap_or_default();
    let value = if takes_object(capability) {
        Value::Object(arguments)
    } else {
        arguments.remove(INPUT_ARGUMENT).ok_or_else(|| {
            LdpError::capability(
                INVALID_INPUT,
                format!("tool {:?} takes its input in the {INPUT_ARGUMENT:?} argument", capability.name),
            )
            .with_retryable(false)
        })?
    };
    Ok(RawJson::from(value))
}

/// The `tools/call` result of a completed task: the output as text content (a JSON string as its text, anything
/// else as JSON text), as structured content when it is an object, and its provenance under [`PROVENANCE_META`].
pub fn success(output: &RawJson, provenance: &Provenance) -> CallToolResult {
    let value = output.to_value().ok();
    let text = match &value {
        Some(Value::String(s)) => s.clone(),
        _ => output.json().to_owned(),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if let Some(Value::Object(object)) = value {
        result.structured_content = Some(Value::Object(object));
    }
    let mut meta = MetaObject::new();
    meta.insert(PROVENANCE_META.to_owned(), serde_json::to_value(provenance).unwrap_or(Value::Null));
    result.meta = Some(meta);
    result
}

/// The `tools/call` result of a failed task (MCP's tool-error form, `isError: true`, so the model sees it): the
/// error as text, and the typed LDP error as structured content (`{"error": ...}`) and under [`ERROR_META`].
pub fn failure(error: &LdpError) -> CallToolResult {
    let text = format!("{} ({}): {}", error.code.as_str(), error.category.as_str(), error.message);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    let typed = serde_json::to_value(error).unwrap_or(Value::Null);
    result.structured_content = Some(json!({ "error": typed.clone() }));
    let mut meta = MetaObject::new();
    meta.insert(ERROR_META.to_owned(), typed);
    result.meta = Some(meta);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(schema: Option<Value>) -> Capability {
        let mut c = Capability::new("s");
        c.input_schema = schema;
        c
    }

    #[test]
    fn object_skills_take_the_arguments_and_others_one_input_argument() {
        let object = cap(Some(json!({"type": "object", "properties": {"q": {"type": "string"}}})));
        assert_eq!(Value::Object(input_schema(&object)), object.input_schema.clone().unwrap());
        let args = JsonObject::from_iter([("q".to_owned(), json!("x"))]);
        assert_eq!(task_input(&object, Some(args)).unwrap().to_value().unwrap(), json!({"q": "x"}));

        let string = cap(Some(json!({"$schema": "s", "type": "string", "$defs": {"D": {}}})));
        let schema = Value::Object(input_schema(&string));
        assert_eq!(schema["properties"][INPUT_ARGUMENT], json!({"type": "string"}));
        assert_eq!((&schema["$defs"], &schema["required"]), (&json!({"D": {}}), &json!([INPUT_ARGUMENT])));
        let args = JsonObject::from_iter([(INPUT_ARGUMENT.to_owned(), json!("hi"))]);
        assert_eq!(task_input(&string, Some(args)).unwrap().to_value().unwrap(), json!("hi"));
        let err = task_input(&string, None).unwrap_err();
        assert_eq!((err.code.as_str(), err.retryable), (INVALID_INPUT, false));

        let unknown = cap(None);
        assert_eq!(Value::Object(input_schema(&unknown))["type"], "object");
    }

    #[test]
    fn results_carry_provenance_and_typed_errors() {
        let prov = Provenance::new("ldp:delegate:x", "m-1", ldp_types::PayloadMode::Text);
        let ok = success(&RawJson::from(json!({"a": 1})), &prov);
        assert_eq!(ok.structured_content, Some(json!({"a": 1})));
        let meta = ok.meta.unwrap();
        assert_eq!(meta.get(PROVENANCE_META).unwrap()["produced_by"], "ldp:delegate:x");
        let text = success(&RawJson::from(json!("plain")), &prov);
        assert_eq!(text.structured_content, None);

        let err = LdpError::runtime(ldp_types::codes::CANCELLED, "stopped");
        let failed = failure(&err);
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(failed.structured_content.unwrap()["error"]["code"], "CANCELLED");
        assert_eq!(failed.meta.unwrap().get(ERROR_META).unwrap()["category"], "runtime");
    }
}
