//! A2A's JSON-RPC binding at the edge: the request envelope, the methods (A2A 1.0 names, and the 0.3 names with
//! their wire shapes), and errors with A2A's codes carrying the typed `LdpError`.

use std::collections::HashMap;

use a2a::errordetails::{ERROR_INFO_TYPE, STRUCT_TYPE};
use a2a::errors::error_code;
use ldp_types::LdpError;
use serde_json::{Map, Value, json};

use super::ERROR_META;

/// The A2A methods the bridge serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `SendMessage` (0.3: `message/send`): runs a task, answers when it ends (or at once with `returnImmediately`).
    Send,
    /// `SendStreamingMessage` (0.3: `message/stream`): runs a task, answers with an SSE stream of its events.
    Stream,
    /// `GetTask` (0.3: `tasks/get`).
    Get,
    /// `CancelTask` (0.3: `tasks/cancel`): TASK_CANCEL for the LDP task.
    Cancel,
    /// `ListTasks`: the caller's tasks, filtered and paged.
    List,
    /// `SubscribeToTask`: an SSE stream of a running task's events (after a dropped stream, say).
    Subscribe,
    /// `CreateTaskPushNotificationConfig`: a webhook for the task's events.
    PushCreate,
    /// `GetTaskPushNotificationConfig`.
    PushGet,
    /// `ListTaskPushNotificationConfigs`.
    PushList,
    /// `DeleteTaskPushNotificationConfig`.
    PushDelete,
}

/// Which version of A2A's wire shapes a request was written in (by its method's name), and its answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A2A 1.0 (`SendMessage`, protobuf JSON: `TASK_STATE_COMPLETED`, `ROLE_USER`, parts by field presence).
    V1,
    /// A2A 0.3 (`message/send`, `kind` discriminators, `completed`, `user`).
    V03,
}

impl Method {
    /// The method and dialect of a method name; `None` for a method the bridge does not serve.
    pub fn parse(name: &str) -> Option<(Self, Dialect)> {
        Some(match name {
            "SendMessage" => (Self::Send, Dialect::V1),
            "SendStreamingMessage" => (Self::Stream, Dialect::V1),
            "GetTask" => (Self::Get, Dialect::V1),
            "CancelTask" => (Self::Cancel, Dialect::V1),
            "ListTasks" => (Self::List, Dialect::V1),
            "SubscribeToTask" => (Self::Subscribe, Dialect::V1),
            "CreateTaskPushNotificationConfig" => (Self::PushCreate, Dialect::V1),
            "GetTaskPushNotificationConfig" => (Self::PushGet, Dialect::V1),
            "ListTaskPushNotificationConfigs" => (Self::PushList, Dialect::V1),
            "DeleteTaskPushNotificationConfig" => (Self::PushDelete, Dialect::V1),
            "message/send" => (Self::Send, Dialect::V03),
            "message/stream" => (Self::Stream, Dialect::V03),
            "tasks/get" => (Self::Get, Dialect::V03),
            "tasks/cancel" => (Self::Cancel, Dialect::V03),
            _ => return None,
        })
    }
}

/// A JSON-RPC request, checked: version `2.0`, a method name, an id (string, number or null; a notification has
/// none and gets no answer... but every A2A method is a request, so a missing id is answered with id null).
#[derive(Debug)]
pub struct Request {
    /// The request id, echoed in the answer.
    pub id: Value,
    /// The method name as sent.
    pub method: String,
    /// The params (an object; absent is an empty object).
    pub params: Value,
}

/// A JSON-RPC error with A2A's code, and the typed LDP error behind it when there is one.
#[derive(Debug, Clone)]
pub struct RpcError {
    /// The JSON-RPC error code (A2A's: -32001 task not found, -32002 not cancelable, ...).
    pub code: i32,
    /// The message.
    pub message: String,
    /// The LDP error it stands for (boxed: most errors have none, and results carrying this one stay small).
    pub ldp: Option<Box<LdpError>>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), ldp: None }
    }

    /// An LDP failure outside any task (the session could not be opened, a bound was reached): A2A's internal error,
    /// with the typed error in its data.
    pub fn ldp(code: i32, error: LdpError) -> Self {
        Self { code, message: format!("{}: {}", error.code.as_str(), error.message), ldp: Some(Box::new(error)) }
    }

    /// The `error` member of the answer: in 1.0 the data is a list of typed details (a `google.rpc.ErrorInfo`
    /// whose reason is the LDP code, and the typed `LdpError` as a struct under [`ERROR_META`]); in 0.3 an object.
    pub fn to_value(&self, dialect: Dialect) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(ldp) = &self.ldp {
            let typed = serde_json::to_value(ldp).unwrap_or(Value::Null);
            error["data"] = match dialect {
                Dialect::V1 => {
                    let metadata: HashMap<&str, String> = HashMap::from([
                        ("code", ldp.code.as_str().to_owned()),
                        ("category", ldp.category.as_str().to_owned()),
                        ("retryable", ldp.retryable.to_string()),
                        (ERROR_META, typed.to_string()),
                    ]);
                    json!([
                        {"@type": ERROR_INFO_TYPE, "reason": ldp.code.as_str(), "domain": "ldp", "metadata": metadata},
                        {"@type": STRUCT_TYPE, ERROR_META: typed},
                    ])
                }
                Dialect::V03 => json!({ ERROR_META: typed }),
            };
        }
        error
    }
}

/// A JSON-RPC error answer.
pub fn error_answer(id: &Value, error: &RpcError, dialect: Dialect) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_value(dialect)})
}

/// A JSON-RPC result answer.
pub fn result_answer(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// Parses a request body: not JSON is a parse error (-32700); not a JSON-RPC 2.0 request object (a batch, a wrong
/// version, no method, params that are not an object, an id that is neither string, number nor null) an invalid
/// request (-32600). The id is kept for the answer whenever it could be read.
pub fn parse(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| (Value::Null, RpcError::new(error_code::PARSE_ERROR, format!("not JSON: {e}"))))?;
    let Value::Object(mut object) = value else {
        return Err((Value::Null, RpcError::new(error_code::INVALID_REQUEST, "not a JSON-RPC request object")));
    };
    let id = object.remove("id").unwrap_or(Value::Null);
    let invalid = |id: Value, why: &str| (id, RpcError::new(error_code::INVALID_REQUEST, why.to_owned()));
    if !matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
        return Err(invalid(Value::Null, "the id must be a string, a number or null"));
    }
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(invalid(id, "no method"));
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => params,
        Some(_) => return Err(invalid(id, "params must be an object")),
    };
    Ok(Request { id, method, params })
}

// -- A2A 0.3 wire shapes -------------------------------------------------------------------------------------------

/// Rewrites 0.3 params into 1.0's: roles `user`/`agent` as `ROLE_*`, file parts as URL or raw parts, and
/// `configuration.blocking: false` as `returnImmediately: true` (text and data parts read the same in both).
pub fn params_from_v03(mut params: Value) -> Value {
    if let Some(message) = params.get_mut("message") {
        if let Some(role) = message.get_mut("role") {
            let upper = match role.as_str() {
                Some("user") => "ROLE_USER",
                Some("agent") => "ROLE_AGENT",
                _ => "",
            };
            if !upper.is_empty() {
                *role = json!(upper);
            }
        }
        if let Some(Value::Array(parts)) = message.get_mut("parts") {
            for part in parts {
                if let Some(file) = part.get("file").cloned() {
                    let mut converted = Map::new();
                    if let Some(uri) = file.get("uri") {
                        converted.insert("url".into(), uri.clone());
                    } else if let Some(bytes) = file.get("bytes") {
                        converted.insert("raw".into(), bytes.clone());
                    }
                    if let Some(mime) = file.get("mimeType") {
                        converted.insert("mediaType".into(), mime.clone());
                    }
                    *part = Value::Object(converted);
                }
            }
        }
    }
    if let Some(config) = params.get_mut("configuration")
        && let Some(Value::Bool(blocking)) = config.get("blocking").cloned()
    {
        config["returnImmediately"] = json!(!blocking);
    }
    params
}

/// A 1.0 task state's 0.3 name (`TASK_STATE_INPUT_REQUIRED` is `input-required`).
fn state_v03(state: &Value) -> Value {
    let name = state.as_str().unwrap_or_default().trim_start_matches("TASK_STATE_").to_ascii_lowercase();
    json!(name.replace('_', "-"))
}

fn parts_v03(parts: &mut Value) {
    if let Value::Array(parts) = parts {
        for part in parts.iter_mut().filter(|p| p.is_object()) {
            let kind = if part.get("text").is_some() {
                "text"
            } else if part.get("data").is_some() {
                "data"
            } else {
                "file"
            };
            if kind == "file" {
                let file = json!({"uri": part.get("url"), "bytes": part.get("raw"), "mimeType": part.get("mediaType")});
                *part = json!({"kind": "file", "file": file});
            } else {
                part["kind"] = json!(kind);
            }
        }
    }
}

fn message_v03(message: &mut Value) {
    if !message.is_object() {
        return;
    }
    message["kind"] = json!("message");
    if let Some(role) = message.get_mut("role") {
        *role = json!(if role == "ROLE_AGENT" { "agent" } else { "user" });
    }
    if let Some(parts) = message.get_mut("parts") {
        parts_v03(parts);
    }
}

fn status_v03(status: &mut Value) {
    if let Some(state) = status.get_mut("state") {
        *state = state_v03(state);
    }
    if let Some(message) = status.get_mut("message") {
        message_v03(message);
    }
}

/// A 1.0 task in 0.3's shape (anything but an object is left as it is: these rewrite the bridge's own answers, but
/// never panic on any value).
pub fn task_v03(mut task: Value) -> Value {
    if !task.is_object() {
        return task;
    }
    task["kind"] = json!("task");
    if let Some(status) = task.get_mut("status") {
        status_v03(status);
    }
    if let Some(Value::Array(artifacts)) = task.get_mut("artifacts") {
        for artifact in artifacts {
            if let Some(parts) = artifact.get_mut("parts") {
                parts_v03(parts);
            }
        }
    }
    task
}

/// A 1.0 stream event (`{"task"|"statusUpdate"|"artifactUpdate": ...}`) in 0.3's shape (the event itself, with its
/// `kind`; a status update says whether it is the last, `final`).
pub fn event_v03(event: Value) -> Value {
    let Value::Object(mut event) = event else { return event };
    if let Some(task) = event.remove("task") {
        return task_v03(task);
    }
    if let Some(mut update) = event.remove("statusUpdate").filter(Value::is_object) {
        update["kind"] = json!("status-update");
        let state = update["status"]["state"].as_str().unwrap_or_default().to_owned();
        update["final"] = json!(matches!(
            state.as_str(),
            "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
        ));
        if let Some(status) = update.get_mut("status") {
            status_v03(status);
        }
        return update;
    }
    if let Some(mut update) = event.remove("artifactUpdate").filter(Value::is_object) {
        update["kind"] = json!("artifact-update");
        if let Some(parts) = update.get_mut("artifact").and_then(|a| a.get_mut("parts")) {
            parts_v03(parts);
        }
        return update;
    }
    Value::Object(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        assert_eq!(parse(b"{").unwrap_err().1.code, error_code::PARSE_ERROR);
        assert_eq!(parse(b"[1]").unwrap_err().1.code, error_code::INVALID_REQUEST);
        let (id, e) = parse(br#"{"jsonrpc":"1.0","id":7,"method":"GetTask"}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(7), error_code::INVALID_REQUEST));
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err().1.code,
            error_code::INVALID_REQUEST
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#).unwrap_err().1.code,
            error_code::INVALID_REQUEST
        );
        let ok = parse(br#"{"jsonrpc":"2.0","id":"a","method":"GetTask"}"#).unwrap();
        assert_eq!((ok.id, ok.params), (json!("a"), json!({})));
        assert_eq!(Method::parse("tasks/cancel"), Some((Method::Cancel, Dialect::V03)));
        assert_eq!(Method::parse("SendStreamingMessage"), Some((Method::Stream, Dialect::V1)));
        assert_eq!(Method::parse("tasks/resubscribe"), None);
    }

    #[test]
    fn typed_errors_travel_in_the_data() {
        let e = RpcError::ldp(error_code::INTERNAL_ERROR, LdpError::runtime("CAPACITY_EXCEEDED", "full"));
        let v1 = e.to_value(Dialect::V1);
        assert_eq!(v1["data"][0]["reason"], "CAPACITY_EXCEEDED");
        assert_eq!(v1["data"][1][ERROR_META]["category"], "runtime");
        assert_eq!(e.to_value(Dialect::V03)["data"][ERROR_META]["code"], "CAPACITY_EXCEEDED");
    }

    #[test]
    fn v03_shapes() {
        let params = params_from_v03(json!({"message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]},
            "configuration": {"blocking": false}}));
        assert_eq!(params["message"]["role"], "ROLE_USER");
        assert_eq!(params["configuration"]["returnImmediately"], true);
        let task = task_v03(json!({"id": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x"}, {"data": 1}]}]}));
        assert_eq!((&task["kind"], &task["status"]["state"]), (&json!("task"), &json!("input-required")));
        assert_eq!(task["artifacts"][0]["parts"][1]["kind"], "data");
        let event = event_v03(json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_CANCELED"}}}));
        assert_eq!(
            (&event["kind"], &event["final"], &event["status"]["state"]),
            (&json!("status-update"), &json!(true), &json!("canceled"))
        );
    }
}
