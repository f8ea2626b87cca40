//! A task's result, provenance and LCTL chain as MCP resources, per MCP session: each `tools/call` adds its task
//! (`ldp://tasks/{task_id}/result` at once, `.../provenance` and `.../lctl` once it completed), a host can read and
//! subscribe to them while the task runs, and is told `notifications/resources/updated` as it progresses and ends.
//! Bounded: the latest tasks of the session only, and a bounded number of subscriptions.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use ldp_session::runtime::Progress;
use ldp_types::{LdpError, Provenance, RawJson};
use rmcp::model::{ErrorData, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use serde_json::{Value, json};

/// The URI prefix of the task resources.
pub const TASK_URI: &str = "ldp://tasks/";
/// Tasks whose resources one MCP session keeps (the oldest ended task goes first).
pub const MAX_TASKS: usize = 64;
/// Resource URIs one MCP session may be subscribed to.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// The three resources of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `result`: the task's state, progress and output or typed error (JSON), readable while it runs.
    Result,
    /// `provenance`: the LDP provenance of a completed task (JSON).
    Provenance,
    /// `lctl`: the task's provenance as an LCTL v3.0 document (YAML), the chain of delegates that produced it.
    Lctl,
}

impl Part {
    const ALL: [Part; 3] = [Part::Result, Part::Provenance, Part::Lctl];

    fn name(self) -> &'static str {
        match self {
            Part::Result => "result",
            Part::Provenance => "provenance",
            Part::Lctl => "lctl",
        }
    }

    fn mime(self) -> &'static str {
        match self {
            Part::Lctl => "application/yaml",
            Part::Result | Part::Provenance => "application/json",
        }
    }
}

/// The URI of a task's resource.
pub fn uri(task_id: &str, part: Part) -> String {
    format!("{TASK_URI}{task_id}/{}", part.name())
}

/// The task id and part a URI names, if it is a task resource URI.
pub fn parse_uri(uri: &str) -> Option<(&str, Part)> {
    let (task, part) = uri.strip_prefix(TASK_URI)?.rsplit_once('/')?;
    let part = Part::ALL.into_iter().find(|p| p.name() == part)?;
    (!task.is_empty() && !task.contains('/')).then_some((task, part))
}

/// What a session knows of one of its tasks.
#[derive(Debug)]
struct Record {
    task_id: String,
    skill: String,
    progress: Option<f64>,
    message: Option<String>,
    outcome: Option<Result<(Value, Provenance), LdpError>>,
}

impl Record {
    fn state(&self) -> &'static str {
        match &self.outcome {
            None => "running",
            Some(Ok(_)) => "completed",
            Some(Err(_)) => "failed",
        }
    }

    fn provenance(&self) -> Option<&Provenance> {
        self.outcome.as_ref().and_then(|o| o.as_ref().ok()).map(|(_, p)| p)
    }
}

/// The task resources of one MCP session.
#[derive(Debug, Default)]
pub(crate) struct TaskResources {
    records: Mutex<VecDeque<Record>>,
    subscribed: Mutex<HashSet<String>>,
}

fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(format!("no resource {uri:?} in this MCP session"), Some(json!({"uri": uri})))
}

impl TaskResources {
    /// A task was submitted: its `result` resource exists from now on.
    pub(crate) fn started(&self, task_id: &str, skill: &str) {
        let Ok(mut records) = self.records.lock() else { return };
        if records.len() >= MAX_TASKS {
            let oldest = records.iter().position(|r| r.outcome.is_some()).unwrap_or(0);
            records.remove(oldest);
        }
        records.push_back(Record {
            task_id: task_id.to_owned(),
            skill: skill.to_owned(),
            progress: None,
            message: None,
            outcome: None,
        });
    }

    fn with(&self, task_id: &str, change: impl FnOnce(&mut Record)) {
        if let Ok(mut records) = self.records.lock()
            && let Some(record) = records.iter_mut().find(|r| r.task_id == task_id)
        {
            change(record);
        }
    }

    /// A TASK_UPDATE of the task.
    pub(crate) fn progressed(&self, task_id: &str, update: &Progress) {
        self.with(task_id, |r| {
            r.progress = update.progress.or(r.progress);
            r.message = update.message.clone().or_else(|| r.message.take());
        });
    }

    /// The task ended.
    pub(crate) fn ended(&self, task_id: &str, outcome: Result<(&RawJson, &Provenance), LdpError>) {
        let outcome = outcome.map(|(output, provenance)| {
            let output = output.to_value().unwrap_or_else(|_| Value::String(output.json().to_owned()));
            (output, provenance.clone())
        });
        self.with(task_id, |r| r.outcome = Some(outcome));
    }

    /// The URIs of the task that a subscription covers.
    pub(crate) fn subscribed_of(&self, task_id: &str) -> Vec<String> {
        let Ok(subscribed) = self.subscribed.lock() else { return Vec::new() };
        Part::ALL.into_iter().map(|p| uri(task_id, p)).filter(|u| subscribed.contains(u)).collect()
    }

    /// `resources/subscribe`: any resource URI of a task of this session, also one that is not there yet (the
    /// provenance of a running task).
    pub(crate) fn subscribe(&self, uri: &str) -> Result<(), ErrorData> {
        let (task_id, _) = parse_uri(uri).ok_or_else(|| not_found(uri))?;
        let known = self.records.lock().map(|r| r.iter().any(|r| r.task_id == task_id)).unwrap_or(false);
        if !known {
            return Err(not_found(uri));
        }
        let mut subscribed = self.subscribed.lock().map_err(|_| not_found(uri))?;
        if subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains(uri) {
            let error = crate::BridgeError::Capacity { what: "MCP resource subscriptions", limit: MAX_SUBSCRIPTIONS };
            return Err(ErrorData::invalid_request(
                error.to_string(),
                Some(json!({"ldp/error": error.to_ldp_error()})),
            ));
        }
        subscribed.insert(uri.to_owned());
        Ok(())
    }

    /// `resources/unsubscribe`.
    pub(crate) fn unsubscribe(&self, uri: &str) {
        if let Ok(mut subscribed) = self.subscribed.lock() {
            subscribed.remove(uri);
        }
    }

    /// `resources/list`: every task's `result`, and the `provenance` and `lctl` of the completed ones.
    pub(crate) fn list(&self) -> Vec<Resource> {
        let Ok(records) = self.records.lock() else { return Vec::new() };
        let mut resources = Vec::new();
        for record in records.iter() {
            for part in Part::ALL {
                if part != Part::Result && record.provenance().is_none() {
                    continue;
                }
                let description = match part {
                    Part::Result => {
                        format!("The state and output of LDP task {} (skill {})", record.task_id, record.skill)
                    }
                    Part::Provenance => format!("The LDP provenance of task {}", record.task_id),
                    Part::Lctl => format!("The delegation chain of task {} as an LCTL v3.0 document", record.task_id),
                };
                let name = format!("{} {}", record.skill, part.name());
                resources.push(
                    Resource::new(uri(&record.task_id, part), name)
                        .with_description(description)
                        .with_mime_type(part.mime()),
                );
            }
        }
        resources
    }

    /// `resources/read`.
    pub(crate) fn read(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let (task_id, part) = parse_uri(uri).ok_or_else(|| not_found(uri))?;
        let records = self.records.lock().map_err(|_| not_found(uri))?;
        let record = records.iter().find(|r| r.task_id == task_id).ok_or_else(|| not_found(uri))?;
        let text = match part {
            Part::Result => {
                let mut result = json!({"task_id": record.task_id, "skill": record.skill, "state": record.state(),
                    "progress": record.progress, "message": record.message});
                match &record.outcome {
                    Some(Ok((output, _))) => result["output"] = output.clone(),
                    Some(Err(error)) => result["error"] = json!(error),
                    None => {}
                }
                result.to_string()
            }
            Part::Provenance => json!(record.provenance().ok_or_else(|| not_found(uri))?).to_string(),
            Part::Lctl => {
                let provenance = record.provenance().ok_or_else(|| not_found(uri))?;
                ldp_lctl::ldp::document_from_ldp(&record.task_id, Some(provenance), None)
                    .and_then(|d| d.to_yaml())
                    .map_err(|e| ErrorData::internal_error(format!("the task's LCTL document: {e}"), None))?
            }
        };
        let contents = ResourceContents::TextResourceContents {
            uri: uri.to_owned(),
            mime_type: Some(part.mime().to_owned()),
            text,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }
}

/// The URI templates of the task resources.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    Part::ALL
        .into_iter()
        .map(|part| {
            let mut template = ResourceTemplate::new(
                format!("{TASK_URI}{{task_id}}/{}", part.name()),
                format!("task {}", part.name()),
            );
            template.mime_type = Some(part.mime().to_owned());
            template
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_strangers_are_refused() {
        assert_eq!(parse_uri(&uri("t-1", Part::Lctl)), Some(("t-1", Part::Lctl)));
        for bad in ["ldp://tasks//result", "ldp://tasks/a/b/result", "ldp://tasks/t/other", "file:///etc/passwd"] {
            assert_eq!(parse_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn tasks_and_subscriptions_are_bounded() {
        let resources = TaskResources::default();
        for n in 0..MAX_TASKS + 5 {
            resources.started(&n.to_string(), "s");
        }
        assert_eq!(resources.records.lock().unwrap().len(), MAX_TASKS);
        assert!(resources.read(&uri("0", Part::Result)).is_err(), "the oldest went");
        assert!(resources.subscribe(&uri("nope", Part::Result)).is_err(), "an unknown task");
        resources.subscribe(&uri("68", Part::Provenance)).unwrap();
        assert_eq!(resources.subscribed_of("68"), [uri("68", Part::Provenance)]);
        assert!(resources.read(&uri("68", Part::Provenance)).is_err(), "no provenance while it runs");
    }
}
