//! Typed LLMX messages (spec section 3) and their checked construction from parsed text.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::LlmxError;

use crate::shortcut::Target;
use crate::value::{Object, Value};

/// One LLMX message: a HEADER and zero or more blocks (Appendix A: `message = header , { block }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The HEADER block.
    pub header: Header,
    /// The blocks after it, in order.
    pub blocks: Vec<Block>,
}

impl Message {
    /// A message from its parts.
    pub fn new(header: Header, blocks: Vec<Block>) -> Self {
        Message { header, blocks }
    }

    /// The `RES:{o:"WARN",...}` answers that spec section 7.3 asks for: one for each block of an unknown type.
    ///
    /// `X_` extension blocks are ignored silently (section 8.1), so they get none.
    pub fn warnings(&self) -> Vec<Res> {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                Block::Extension(e) if !e.is_custom() => Some(Res::warn_unknown(e.name())),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for Message {
    /// The canonical text (see [`crate::write`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::writer::write(self))
    }
}

/// `HEADER:{f,t,s,b?}` (section 3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// `f`: sender.
    pub from: String,
    /// `t`: target, or `ALL`.
    pub to: String,
    /// `s`: sequence number.
    pub seq: u64,
    /// `b`: batch id for parallel operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// A block after the HEADER.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Block {
    /// `CTX`.
    #[serde(rename = "CTX")]
    Ctx(Ctx),
    /// `REQ`.
    #[serde(rename = "REQ")]
    Req(Req),
    /// `PLAN`.
    #[serde(rename = "PLAN")]
    Plan(Plan),
    /// `ACT`.
    #[serde(rename = "ACT")]
    Act(Act),
    /// `OBS`.
    #[serde(rename = "OBS")]
    Obs(Obs),
    /// `BLK`.
    #[serde(rename = "BLK")]
    Blk(Blk),
    /// `ASK`.
    #[serde(rename = "ASK")]
    Ask(Ask),
    /// `END`.
    #[serde(rename = "END")]
    End(End),
    /// `RES`.
    #[serde(rename = "RES")]
    Res(Res),
    /// An `X_*` extension or a type this crate does not know, kept as generic values.
    #[serde(rename = "EXTENSION")]
    Extension(ExtensionBlock),
}

impl Block {
    /// The block's LLMX type name.
    pub fn type_name(&self) -> &str {
        match self {
            Block::Ctx(_) => "CTX",
            Block::Req(_) => "REQ",
            Block::Plan(_) => "PLAN",
            Block::Act(_) => "ACT",
            Block::Obs(_) => "OBS",
            Block::Blk(_) => "BLK",
            Block::Ask(_) => "ASK",
            Block::End(_) => "END",
            Block::Res(_) => "RES",
            Block::Extension(e) => e.name(),
        }
    }
}

/// The standard block type names of section 3 (after HEADER).
pub const STANDARD_TYPES: [&str; 9] = ["CTX", "REQ", "PLAN", "ACT", "OBS", "BLK", "ASK", "END", "RES"];

/// `CTX:{p,f?,st?,issue?}` (section 3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ctx {
    /// `p`: project.
    pub project: String,
    /// `f`: relevant file paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// `st`: state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Object>,
    /// `issue`: issue or ticket id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// `REQ:{o,pr,d?,exp?}` (section 3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Req {
    /// `o`: objective.
    pub objective: String,
    /// `pr`: priority.
    pub priority: Priority,
    /// `d`: dependency ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<Vec<String>>,
    /// `exp`: required expert reviewers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<Vec<String>>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// A REQ priority: 1 (critical) to 5 (low).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Priority(u8);

impl Priority {
    /// 1, the most urgent.
    pub const CRITICAL: Priority = Priority(1);
    /// 5, the least urgent.
    pub const LOW: Priority = Priority(5);

    /// A priority; 1..=5 only.
    pub fn new(p: u8) -> Result<Self, LlmxError> {
        if (1..=5).contains(&p) { Ok(Priority(p)) } else { Err(LlmxError::OutOfRange("priority must be 1..=5")) }
    }

    /// The number.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<u8> for Priority {
    type Error = LlmxError;
    fn try_from(p: u8) -> Result<Self, LlmxError> {
        Priority::new(p)
    }
}

impl From<Priority> for u8 {
    fn from(p: Priority) -> u8 {
        p.0
    }
}

/// `PLAN:[(i,t,s),...]` (section 3.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in order.
    pub steps: Vec<PlanStep>,
}

/// One `(i:ID,t:TASK,s:STATUS)` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// `i`: step id.
    pub id: StepId,
    /// `t`: task.
    pub task: String,
    /// `s`: status.
    pub status: StepStatus,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// A PLAN step id: the spec allows a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
#[allow(clippy::exhaustive_enums, reason = "the grammar's two id forms, a number or a name")]
pub enum StepId {
    /// A numeric id.
    Num(u64),
    /// A textual id.
    Name(String),
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepId::Num(n) => write!(f, "{n}"),
            StepId::Name(s) => f.write_str(s),
        }
    }
}

/// A PLAN step status (`P|I|C|X`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StepStatus {
    /// `P`: not started.
    #[serde(rename = "P")]
    Pending,
    /// `I`: executing.
    #[serde(rename = "I")]
    InProgress,
    /// `C`: finished successfully.
    #[serde(rename = "C")]
    Completed,
    /// `X`: cancelled or failed.
    #[serde(rename = "X")]
    Cancelled,
}

impl StepStatus {
    /// The one-letter code.
    pub fn code(self) -> &'static str {
        match self {
            StepStatus::Pending => "P",
            StepStatus::InProgress => "I",
            StepStatus::Completed => "C",
            StepStatus::Cancelled => "X",
        }
    }

    fn from_code(s: &str) -> Option<Self> {
        Some(match s {
            "P" => StepStatus::Pending,
            "I" => StepStatus::InProgress,
            "C" => StepStatus::Completed,
            "X" => StepStatus::Cancelled,
            _ => return None,
        })
    }
}

/// `ACT:{i?,op,tgt,args?}` (section 3.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Act {
    /// `i`: action id, which OBS `ai` refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `op`: operation.
    pub op: Operation,
    /// `tgt`: target, with its shortcuts decoded on demand.
    pub target: Target,
    /// `args`: operation arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Object>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// An ACT operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Operation {
    /// Read a file or resource.
    Read,
    /// Create a file.
    Write,
    /// Modify a file.
    Edit,
    /// Run a shell command.
    Shell,
    /// Search the codebase.
    Search,
    /// Start a sub-agent.
    Spawn,
}

impl Operation {
    /// The LLMX spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Edit => "edit",
            Operation::Shell => "shell",
            Operation::Search => "search",
            Operation::Spawn => "spawn",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "read" => Operation::Read,
            "write" => Operation::Write,
            "edit" => Operation::Edit,
            "shell" => Operation::Shell,
            "search" => Operation::Search,
            "spawn" => Operation::Spawn,
            _ => return None,
        })
    }
}

/// `OBS:{ai?,s,c,e?}` (section 3.6).
///
/// The spec's table makes `c` required, yet its own `s:ERR` examples (sections 3.6 and 7.1) leave it out. This crate
/// follows the examples: `c` is required when the status is `OK` and optional when it is `ERR`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Obs {
    /// `ai`: the ACT id this reports on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// `s`: status.
    pub status: ObsStatus,
    /// `c`: result content (must be `Some` when `status` is `Ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Object>,
    /// `e`: error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// OBS status (`OK|ERR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ObsStatus {
    /// `OK`.
    #[serde(rename = "OK")]
    Ok,
    /// `ERR`.
    #[serde(rename = "ERR")]
    Err,
}

/// `BLK:{w,a,esc?}` (section 3.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blk {
    /// `w`: why work is blocked.
    pub why: String,
    /// `a`: alternative approaches.
    pub alternatives: Vec<String>,
    /// `esc`: escalate to a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate: Option<bool>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// `ASK:{q,o,def?}` (section 3.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ask {
    /// `q`: question.
    pub question: String,
    /// `o`: options.
    pub options: Vec<String>,
    /// `def`: default or recommended option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// `END:{n,t?,r?,del}` (section 3.9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// `n`: next action needed.
    pub next: String,
    /// `t`: tests to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<Vec<String>>,
    /// `r`: risks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risks: Option<Vec<String>>,
    /// `del`: deliverable paths.
    pub deliverables: Vec<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

/// `RES:{o,msg?}` (section 3.10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Res {
    /// `o`: the selected option, or `ACK`/`NACK`/`WARN`.
    pub option: String,
    /// `msg`: additional message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    /// `x_*` fields.
    #[serde(default, skip_serializing_if = "CustomFields::is_empty")]
    pub custom: CustomFields,
}

impl Res {
    /// `RES:{o:ACK,msg?}`.
    pub fn ack(msg: Option<String>) -> Res {
        Res { option: "ACK".to_owned(), msg, custom: CustomFields::default() }
    }

    /// The section 7.2 answer to a malformed message: `RES:{o:"NACK",msg:"parse error: ..."}`.
    pub fn nack(err: &LlmxError) -> Res {
        let msg = match err {
            LlmxError::Parse { position, kind } => {
                format!("parse error: {kind} at line {}, column {}", position.line, position.column)
            }
            other => format!("parse error: {other}"),
        };
        Res { option: "NACK".to_owned(), msg: Some(msg), custom: CustomFields::default() }
    }

    /// The warning for a HEADER `s` that is not above the previous `s` of the same sender (section 3.1: "Sequence
    /// number (monotonic)"), in the section 7.3 form: `RES:{o:"WARN",msg:"..."}`.
    pub fn warn_sequence(sender: &str, seq: u64, previous: u64) -> Res {
        Res {
            option: "WARN".to_owned(),
            msg: Some(format!("sequence number s:{seq} from {sender} does not increase (previous s:{previous})")),
            custom: CustomFields::default(),
        }
    }

    /// The section 7.3 answer to an unknown block type: `RES:{o:"WARN",msg:"unknown message type: NAME ignored"}`.
    pub fn warn_unknown(type_name: &str) -> Res {
        Res {
            option: "WARN".to_owned(),
            msg: Some(format!("unknown message type: {type_name} ignored")),
            custom: CustomFields::default(),
        }
    }
}

/// The body of a block this crate has no type for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BlockBody {
    /// `{...}`.
    #[serde(rename = "object")]
    Object(Object),
    /// `[...]`.
    #[serde(rename = "array")]
    Array(Vec<Value>),
}

/// An `X_*` extension block (section 8.1) or a block of an unknown type (section 7.3), kept as generic values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ExtensionRepr")]
pub struct ExtensionBlock {
    name: String,
    body: BlockBody,
}

#[derive(Deserialize)]
struct ExtensionRepr {
    name: String,
    body: BlockBody,
}

impl TryFrom<ExtensionRepr> for ExtensionBlock {
    type Error = LlmxError;
    fn try_from(r: ExtensionRepr) -> Result<Self, LlmxError> {
        ExtensionBlock::new(r.name, r.body)
    }
}

impl ExtensionBlock {
    /// An extension block. The name must be a block type (a letter, then letters, digits and `_`) other than
    /// `HEADER` and the standard types, since those would read back as typed blocks.
    pub fn new(name: impl Into<String>, body: BlockBody) -> Result<Self, LlmxError> {
        let name = name.into();
        let b = name.as_bytes();
        let well_formed =
            b.first().is_some_and(u8::is_ascii_alphabetic) && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
        if !well_formed {
            return Err(LlmxError::InvalidName { name, reason: "a block type is a letter then letters, digits or _" });
        }
        if name == "HEADER" || STANDARD_TYPES.contains(&name.as_str()) {
            return Err(LlmxError::InvalidName { name, reason: "standard block types have typed variants" });
        }
        Ok(ExtensionBlock { name, body })
    }

    /// The block type.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The body.
    pub fn body(&self) -> &BlockBody {
        &self.body
    }

    /// Whether this is a declared `X_` extension (ignored silently) rather than an unknown type (warned about).
    pub fn is_custom(&self) -> bool {
        self.name.starts_with("X_")
    }

    /// Name and body.
    pub fn into_parts(self) -> (String, BlockBody) {
        (self.name, self.body)
    }
}

/// The `x_*` custom fields of a standard block (section 8.2), in written order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(try_from = "Object", into = "Object")]
pub struct CustomFields(Object);

impl CustomFields {
    /// No custom fields.
    pub fn new() -> Self {
        CustomFields::default()
    }

    /// Sets a custom field; the key must start with `x_`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<Option<Value>, LlmxError> {
        let key = key.into();
        if !key.starts_with("x_") {
            return Err(LlmxError::InvalidName { name: key, reason: "custom fields start with x_" });
        }
        Ok(self.0.insert(key, value))
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields as an object.
    pub fn as_object(&self) -> &Object {
        &self.0
    }
}

impl TryFrom<Object> for CustomFields {
    type Error = LlmxError;
    fn try_from(o: Object) -> Result<Self, LlmxError> {
        // The object's keys are already unique; only the prefix needs checking (and this stays linear).
        if let Some((k, _)) = o.iter().find(|(k, _)| !k.starts_with("x_")) {
            return Err(LlmxError::InvalidName { name: k.to_owned(), reason: "custom fields start with x_" });
        }
        Ok(CustomFields(o))
    }
}

impl From<CustomFields> for Object {
    fn from(c: CustomFields) -> Object {
        c.0
    }
}

mod from_raw;
pub(crate) use from_raw::{block_from_raw, header_from_raw};
