//! The bridge between LLMX messages and LDP envelopes, so that an agent speaking LLMX can take part in an LDP session.
//!
//! | LLMX | LDP |
//! |------|-----|
//! | REQ (with its CTX, PLAN) | `TASK_SUBMIT`, input a semantic frame (`task_type: "llmx.req"`, `instruction` = `o`) |
//! | ACT | `TASK_SUBMIT`, skill `llmx.<op>`, task id = ACT `i` |
//! | END, OBS `s:OK` | `TASK_RESULT` (OBS: task id = `ai`) |
//! | OBS `s:ERR` | `TASK_FAILED` with a `runtime` [`LdpError`] carrying `e` (the OBS itself in `llmx_obs`) |
//! | BLK, ASK | `TASK_UPDATE` with `status: "input_required"` and the question or reason as `message` |
//! | PLAN on its own | `TASK_UPDATE` with `progress` = completed steps / steps |
//!
//! Every field LDP has no slot for travels next to the LDP fields (`llmx_type` and the block's JSON view in the
//! output, frame or body extras; the HEADER in the envelope extension `llmx_header`), so [`from_ldp`] rebuilds the
//! same messages. Envelopes from peers that do not speak LLMX map to the nearest block: `TASK_SUBMIT` to REQ,
//! `TASK_RESULT` to OBS, `TASK_FAILED` to OBS `s:ERR`, an input-required `TASK_UPDATE` to ASK and any other update to
//! an `X_LDP_UPDATE` extension block.
//!
//! Task ids: [`BridgeConfig::task_id`] if set, else HEADER `b`, else `<f>-<s>` for a REQ (an answer without either is
//! refused, since it could not name the task it answers); an ACT is its own task `i`, an OBS answers task `ai`.
//!
//! What does not round-trip: block order inside a REQ message is normalised to CTX, REQ, PLAN; tuples inside generic
//! values come back as objects (JSON has no tuples); a decimal can come back one ulp off once it has been through JSON
//! text (`serde_json` is built here without `float_roundtrip`); RES, CTX without REQ, and `X_`/unknown blocks have no
//! LDP counterpart (RES and lone CTX are refused, extension blocks are left out, as receivers may ignore them).

use ldp_types::{
    Body, Envelope, ErrorCategory, LdpError, PayloadMode, Provenance, SemanticFrame, TaskFailed, TaskResult,
    TaskSubmit, TaskUpdate,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json};

use crate::error::LlmxError;
use crate::message::{
    Act, Ask, Blk, Block, BlockBody, Ctx, End, ExtensionBlock, Header, Message, Obs, ObsStatus, Plan, Priority, Req,
    StepStatus,
};
use crate::value::{Object, Value};

/// Semantic-frame `task_type` of a bridged REQ.
pub const REQ_TASK_TYPE: &str = "llmx.req";
/// Semantic-frame `task_type` of a bridged ACT.
pub const ACT_TASK_TYPE: &str = "llmx.act";
/// `TaskFailed` error code of a bridged OBS `s:ERR`.
pub const OBS_ERR_CODE: &str = "LLMX_OBS_ERR";
/// The envelope extension that carries the LLMX HEADER.
pub const HEADER_EXTENSION: &str = "llmx_header";
/// The key that says which LLMX block an LDP payload came from.
pub const TYPE_KEY: &str = "llmx_type";
/// The `TASK_FAILED` member that carries a bridged OBS `s:ERR`.
pub const OBS_EXTRA: &str = "llmx_obs";
/// The `status` a `TASK_UPDATE` uses to ask for input (BLK, ASK).
pub const INPUT_REQUIRED: &str = "input_required";

/// What the bridge needs to know that LLMX does not say. Injected, so that the bridge is deterministic.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeConfig {
    /// The LDP session the messages belong to.
    pub session_id: String,
    /// Timestamp put on every envelope (ISO 8601).
    pub timestamp: String,
    /// The task the messages are about. Without it, HEADER `b` is used, and a REQ starts the task `<f>-<s>`.
    pub task_id: Option<String>,
    /// Prefix that turns an LLMX agent name into a delegate id.
    pub delegate_prefix: String,
    /// Model version recorded in the provenance of results.
    pub model_version: String,
    /// The session's negotiated payload mode.
    pub payload_mode: PayloadMode,
    /// The skill named in a bridged REQ's TASK_SUBMIT.
    pub skill: String,
}

impl BridgeConfig {
    /// A configuration with the `ldp:delegate:` prefix, semantic frames, skill `llmx` and model version `unknown`.
    pub fn new(session_id: impl Into<String>, timestamp: impl Into<String>) -> Self {
        BridgeConfig {
            session_id: session_id.into(),
            timestamp: timestamp.into(),
            task_id: None,
            delegate_prefix: "ldp:delegate:".to_owned(),
            model_version: "unknown".to_owned(),
            payload_mode: PayloadMode::SemanticFrame,
            skill: "llmx".to_owned(),
        }
    }

    /// Sets the task id.
    pub fn with_task_id(mut self, task_id: impl Into<String>) -> Self {
        self.task_id = Some(task_id.into());
        self
    }

    fn delegate(&self, name: &str) -> String {
        format!("{}{name}", self.delegate_prefix)
    }
}

fn err(msg: impl Into<String>) -> LlmxError {
    LlmxError::Bridge(msg.into())
}

fn to_json<T: Serialize>(v: &T) -> Result<Json, LlmxError> {
    serde_json::to_value(v).map_err(|e| err(format!("cannot encode: {e}")))
}

fn from_json<T: DeserializeOwned>(v: Json, what: &str) -> Result<T, LlmxError> {
    serde_json::from_value(v).map_err(|e| err(format!("invalid {what}: {e}")))
}

/// The block's JSON view as an object, tagged with its LLMX type.
fn tagged<T: Serialize>(type_name: &str, block: &T) -> Result<Map<String, Json>, LlmxError> {
    let Json::Object(mut m) = to_json(block)? else {
        return Err(err("block did not encode as an object"));
    };
    m.insert(TYPE_KEY.to_owned(), Json::String(type_name.to_owned()));
    Ok(m)
}

/// Converts one LLMX message into the LDP envelopes that carry it.
///
/// A message holding a REQ becomes one `TASK_SUBMIT` (with its CTX and PLAN in the frame); otherwise each block
/// becomes one envelope. Envelope ids are `llmx-<f>-<s>-<n>`.
pub fn to_ldp(message: &Message, cfg: &BridgeConfig) -> Result<Vec<Envelope>, LlmxError> {
    let h = &message.header;
    let header_json = to_json(h)?;
    let base_task = cfg.task_id.clone().or_else(|| h.batch.clone());
    let envelope = |n: usize, body: Body| {
        let mut e = Envelope::new(
            format!("llmx-{}-{}-{n}", h.from, h.seq),
            cfg.timestamp.clone(),
            cfg.session_id.clone(),
            cfg.delegate(&h.from),
            cfg.delegate(&h.to),
            body,
        )
        .with_payload_mode(cfg.payload_mode);
        e.extensions.insert(HEADER_EXTENSION.to_owned(), header_json.clone());
        e
    };
    let task_for = |what: &str| {
        base_task.clone().ok_or_else(|| {
            err(format!("no task id for {what}: set BridgeConfig::task_id or HEADER b to the task it answers"))
        })
    };

    let reqs = message.blocks.iter().filter(|b| matches!(b, Block::Req(_))).count();
    if reqs > 1 {
        return Err(err("one REQ per message: a TASK_SUBMIT carries one objective"));
    }
    if reqs == 1 {
        let (mut req, mut ctx, mut plan) = (None, None, None);
        for b in &message.blocks {
            match b {
                Block::Req(r) => req = Some(r),
                Block::Ctx(c) if ctx.is_none() => ctx = Some(c),
                Block::Plan(p) if plan.is_none() => plan = Some(p),
                Block::Extension(_) => {}
                other => {
                    return Err(err(format!(
                        "a REQ message carries at most one CTX and one PLAN, not {}",
                        other.type_name()
                    )));
                }
            }
        }
        let Some(req) = req else { return Err(err("REQ vanished")) };
        let task_id = base_task.clone().unwrap_or_else(|| format!("{}-{}", h.from, h.seq));
        let mut frame = SemanticFrame::new(REQ_TASK_TYPE, req.objective.clone());
        frame.fields = tagged("REQ", req)?;
        frame.fields.remove("objective");
        if let Some(c) = ctx {
            frame.fields.insert("context".to_owned(), to_json(c)?);
        }
        if let Some(p) = plan {
            frame.fields.insert("plan".to_owned(), to_json(p)?);
        }
        let submit = TaskSubmit::new(task_id, cfg.skill.clone(), frame.to_input(), None);
        return Ok(vec![envelope(0, submit.into())]);
    }

    let mut out = Vec::new();
    for (n, b) in message.blocks.iter().enumerate() {
        let body: Body = match b {
            Block::Act(a) => {
                let task_id = match (&a.id, &base_task) {
                    (Some(i), _) => i.clone(),
                    (None, Some(t)) => format!("{t}-{n}"),
                    (None, None) => format!("{}-{}-{n}", h.from, h.seq),
                };
                let mut frame = SemanticFrame::new(ACT_TASK_TYPE, a.target.as_str());
                frame.fields = tagged("ACT", a)?;
                frame.fields.remove("target");
                TaskSubmit::new(task_id, format!("llmx.{}", a.op.as_str()), frame.to_input(), None).into()
            }
            Block::End(e) => {
                let mut prov = Provenance::new(cfg.delegate(&h.from), cfg.model_version.clone(), cfg.payload_mode);
                prov.session_id = Some(cfg.session_id.clone());
                TaskResult::new(task_for("END")?, Json::Object(tagged("END", e)?), prov).into()
            }
            Block::Obs(o) => {
                let task_id = match &o.action_id {
                    Some(ai) => ai.clone(),
                    None => task_for("OBS without ai")?,
                };
                match o.status {
                    ObsStatus::Ok => {
                        let mut prov =
                            Provenance::new(cfg.delegate(&h.from), cfg.model_version.clone(), cfg.payload_mode);
                        prov.session_id = Some(cfg.session_id.clone());
                        TaskResult::new(task_id, Json::Object(tagged("OBS", o)?), prov).into()
                    }
                    ObsStatus::Err => {
                        let message = o.error.clone().unwrap_or_else(|| "action failed".to_owned());
                        let mut failed = TaskFailed::new(task_id, LdpError::runtime(OBS_ERR_CODE, message));
                        // Nested, because the OBS field `error` would collide with TASK_FAILED's own `error`.
                        failed.extra.insert(TYPE_KEY.to_owned(), Json::String("OBS".to_owned()));
                        failed.extra.insert(OBS_EXTRA.to_owned(), to_json(o)?);
                        failed.into()
                    }
                }
            }
            Block::Blk(blk) => input_required(task_for("BLK")?, "why", tagged("BLK", blk)?),
            Block::Ask(ask) => input_required(task_for("ASK")?, "question", tagged("ASK", ask)?),
            Block::Plan(p) => {
                let done = p.steps.iter().filter(|s| s.status == StepStatus::Completed).count();
                #[allow(clippy::cast_precision_loss)]
                let progress = if p.steps.is_empty() { 0.0 } else { done as f64 / p.steps.len() as f64 };
                let mut u = TaskUpdate::new(task_for("PLAN")?, Some(progress), None);
                u.extra = tagged("PLAN", p)?;
                u.into()
            }
            // Spec 8.1 lets receivers ignore extension blocks; LDP has nowhere to put them.
            Block::Extension(_) => continue,
            other => return Err(err(format!("{} has no LDP counterpart outside a REQ message", other.type_name()))),
        };
        out.push(envelope(n, body));
    }
    if out.is_empty() {
        return Err(err("nothing in this message maps to LDP"));
    }
    Ok(out)
}

/// An update asking for input; the block's text field becomes the update's `message` rather than travelling twice.
fn input_required(task_id: String, text_field: &str, mut extra: Map<String, Json>) -> Body {
    let message = extra.remove(text_field).and_then(|v| v.as_str().map(str::to_owned));
    extra.insert("status".to_owned(), Json::String(INPUT_REQUIRED.to_owned()));
    let mut u = TaskUpdate::new(task_id, None, message);
    u.extra = extra;
    u.into()
}

/// Converts LDP envelopes back into LLMX messages.
///
/// Consecutive envelopes that carry the same `llmx_header` form one message, as [`to_ldp`] split it. Envelopes
/// without one (from peers that do not speak LLMX) become one message each, numbered from 1 in the order given,
/// with the delegate prefix stripped from `from` and `to`. Session messages (HELLO, SESSION_*, ...) are refused.
pub fn from_ldp(envelopes: &[Envelope], cfg: &BridgeConfig) -> Result<Vec<Message>, LlmxError> {
    let mut out: Vec<(Option<Json>, Message)> = Vec::new();
    for (n, env) in envelopes.iter().enumerate() {
        let tag = env.extensions.get(HEADER_EXTENSION).cloned();
        let header: Header = match &tag {
            Some(h) => from_json(h.clone(), HEADER_EXTENSION)?,
            None => Header {
                from: strip(&env.from, &cfg.delegate_prefix),
                to: strip(&env.to, &cfg.delegate_prefix),
                seq: u64::try_from(n + 1).unwrap_or(u64::MAX),
                batch: None,
                custom: Default::default(),
            },
        };
        let blocks = blocks_from_body(&env.body)?;
        match out.last_mut() {
            Some((Some(prev), m)) if tag.as_ref() == Some(prev) => m.blocks.extend(blocks),
            _ => out.push((tag, Message { header, blocks })),
        }
    }
    Ok(out.into_iter().map(|(_, m)| m).collect())
}

/// An update's extras with its `message` put back under the block's own name for it.
fn with_text(extra: &Map<String, Json>, field: &str, message: &Option<String>) -> Json {
    let mut m = extra.clone();
    m.insert(field.to_owned(), Json::String(message.clone().unwrap_or_default()));
    Json::Object(m)
}

fn strip(id: &str, prefix: &str) -> String {
    id.strip_prefix(prefix).unwrap_or(id).to_owned()
}

fn llmx_type(m: &Map<String, Json>) -> Option<&str> {
    m.get(TYPE_KEY).and_then(Json::as_str)
}

fn blocks_from_body(body: &Body) -> Result<Vec<Block>, LlmxError> {
    Ok(match body {
        Body::TaskSubmit(s) => {
            let input = payload(&s.input)?;
            let frame = input.as_object();
            match frame.and_then(|f| f.get("task_type")).and_then(Json::as_str) {
                Some(REQ_TASK_TYPE) if frame.is_some_and(|f| llmx_type(f) == Some("REQ")) => {
                    let mut f = frame.cloned().unwrap_or_default();
                    let objective = f.remove("instruction").unwrap_or_default();
                    let context = f.remove("context");
                    let plan = f.remove("plan");
                    f.insert("objective".to_owned(), objective);
                    let mut blocks = Vec::new();
                    if let Some(c) = context {
                        blocks.push(Block::Ctx(from_json::<Ctx>(c, "context")?));
                    }
                    blocks.push(Block::Req(from_json::<Req>(Json::Object(f), "REQ frame")?));
                    if let Some(p) = plan {
                        blocks.push(Block::Plan(from_json::<Plan>(p, "plan")?));
                    }
                    blocks
                }
                Some(ACT_TASK_TYPE) if frame.is_some_and(|f| llmx_type(f) == Some("ACT")) => {
                    let mut f = frame.cloned().unwrap_or_default();
                    let target = f.remove("instruction").unwrap_or_default();
                    f.insert("target".to_owned(), target);
                    vec![Block::Act(from_json::<Act>(Json::Object(f), "ACT frame")?)]
                }
                _ => vec![Block::Req(foreign_submit(s, &input)?)],
            }
        }
        Body::TaskResult(r) => match payload(&r.output)? {
            Json::Object(o) if llmx_type(&o) == Some("END") => {
                vec![Block::End(from_json::<End>(Json::Object(o), "END")?)]
            }
            Json::Object(o) if llmx_type(&o) == Some("OBS") => {
                vec![Block::Obs(from_json::<Obs>(Json::Object(o), "OBS")?)]
            }
            output => vec![Block::Obs(Obs {
                action_id: Some(r.task_id.clone()),
                status: ObsStatus::Ok,
                content: Some(json_object(&output)?),
                error: None,
                custom: Default::default(),
            })],
        },
        Body::TaskFailed(f) => match llmx_type(&f.extra) {
            Some("OBS") => {
                vec![Block::Obs(from_json::<Obs>(f.extra.get(OBS_EXTRA).cloned().unwrap_or_default(), OBS_EXTRA)?)]
            }
            _ => {
                let mut content = Object::new();
                content.insert("code", f.error.code.to_string());
                content.insert("category", category_name(f.error.category));
                content.insert("retryable", f.error.retryable);
                vec![Block::Obs(Obs {
                    action_id: Some(f.task_id.clone()),
                    status: ObsStatus::Err,
                    content: Some(content),
                    error: Some(f.error.message.clone()),
                    custom: Default::default(),
                })]
            }
        },
        Body::TaskUpdate(u) => match llmx_type(&u.extra) {
            Some("BLK") => vec![Block::Blk(from_json::<Blk>(with_text(&u.extra, "why", &u.message), "BLK")?)],
            Some("ASK") => vec![Block::Ask(from_json::<Ask>(with_text(&u.extra, "question", &u.message), "ASK")?)],
            Some("PLAN") => vec![Block::Plan(from_json::<Plan>(Json::Object(u.extra.clone()), "PLAN")?)],
            _ if u.extra.get("status").and_then(Json::as_str) == Some(INPUT_REQUIRED) => {
                let options = u
                    .extra
                    .get("options")
                    .and_then(Json::as_array)
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                vec![Block::Ask(Ask {
                    question: u.message.clone().unwrap_or_default(),
                    options,
                    default: None,
                    custom: Default::default(),
                })]
            }
            _ => {
                let mut o = Object::new();
                o.insert("task_id", u.task_id.clone());
                if let Some(p) = u.progress.and_then(crate::value::Number::from_f64) {
                    o.insert("progress", p);
                }
                if let Some(m) = &u.message {
                    o.insert("message", m.clone());
                }
                vec![Block::Extension(ExtensionBlock::new("X_LDP_UPDATE", BlockBody::Object(o))?)]
            }
        },
        other => {
            return Err(err(format!(
                "{} is session machinery with no LLMX counterpart",
                other.message_type().map_or("an unknown body", |t| t.as_str())
            )));
        }
    })
}

/// A REQ for a TASK_SUBMIT from a peer that does not speak LLMX. LDP has no priority, so the middle one (3) is used.
fn foreign_submit(s: &TaskSubmit, input: &Json) -> Result<Req, LlmxError> {
    let mut custom = crate::message::CustomFields::new();
    custom.insert("x_task_id", s.task_id.clone())?;
    custom.insert("x_skill", s.skill.clone())?;
    let objective = match input {
        Json::String(text) => text.clone(),
        Json::Object(o) => {
            let mut rest = o.clone();
            let instruction = rest.remove("instruction").and_then(|v| v.as_str().map(str::to_owned));
            if !rest.is_empty() {
                custom.insert("x_input", Value::Object(json_object(&Json::Object(rest))?))?;
            }
            instruction.unwrap_or_default()
        }
        other => {
            custom.insert("x_input", json_value(other)?)?;
            String::new()
        }
    };
    Ok(Req { objective, priority: Priority::new(3)?, deps: None, experts: None, custom })
}

/// A task's payload as a JSON tree.
fn payload(raw: &ldp_types::RawJson) -> Result<Json, LlmxError> {
    raw.to_value().map_err(|e| err(format!("payload is not readable JSON: {e}")))
}

/// JSON to an LLMX value, dropping `null` object members (LLMX has no null; an absent member means the same).
fn json_value(j: &Json) -> Result<Value, LlmxError> {
    Ok(match j {
        Json::Object(_) => Value::Object(json_object(j)?),
        Json::Array(a) => Value::Array(a.iter().map(json_value).collect::<Result<_, _>>()?),
        other => Value::from_json(other).ok_or_else(|| err("null inside an array has no LLMX form"))?,
    })
}

fn json_object(j: &Json) -> Result<Object, LlmxError> {
    match j {
        Json::Object(m) => {
            // JSON object keys are unique, so the entries go in as they are (no quadratic re-check).
            let mut pairs = Vec::with_capacity(m.len());
            for (k, v) in m {
                if !v.is_null() {
                    pairs.push((k.clone(), json_value(v)?));
                }
            }
            Ok(Object::from_unique(pairs))
        }
        Json::Null => Ok(Object::new()),
        other => {
            let mut o = Object::new();
            o.insert("output", json_value(other)?);
            Ok(o)
        }
    }
}

fn category_name(c: ErrorCategory) -> String {
    match serde_json::to_value(c) {
        Ok(Json::String(s)) => s,
        _ => format!("{c:?}").to_lowercase(),
    }
}
