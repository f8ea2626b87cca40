//! Construction of the typed messages from the parser's raw blocks: each field read once, by name, into its typed
//! slot; what no slot takes is kept as a custom field.

use super::*;
use crate::error::ParseErrorKind;
use crate::parser::{PErr, RawBlock, RawBody, RawField};
use crate::value::{Object, Value};

/// Takes a block's fields one by one and reports what is missing, mistyped or unknown.
struct Reader<'a, 'f> {
    block: &'static str,
    at: usize,
    fields: &'f mut [RawField<'a>],
}

type Conv<T> = fn(Value) -> Option<T>;

impl<'a, 'f> Reader<'a, 'f> {
    fn new(block: &'static str, raw: RawBlock<'a>, fields: &'f mut [RawField<'a>]) -> Result<Self, PErr> {
        match raw.body {
            RawBody::Object => Ok(Reader { block, at: raw.offset, fields }),
            RawBody::Array(_) | RawBody::Steps(_) => {
                Err(PErr::new(raw.offset, ParseErrorKind::InvalidBody { block, expected: "an object {...}" }))
            }
        }
    }

    fn from_fields(block: &'static str, at: usize, fields: &'f mut [RawField<'a>]) -> Self {
        Reader { block, at, fields }
    }

    /// The value and offset of `key`, once.
    fn take(&mut self, key: &str) -> Option<(Value, usize)> {
        let f = self.fields.iter_mut().find(|f| !f.taken && f.key == key)?;
        f.taken = true;
        Some((std::mem::replace(&mut f.value, Value::Bool(false)), f.offset))
    }

    fn opt<T>(&mut self, key: &'static str, conv: Conv<T>, expected: &'static str) -> Result<Option<T>, PErr> {
        match self.take(key) {
            None => Ok(None),
            Some((value, offset)) => conv(value).map(Some).ok_or_else(|| {
                PErr::new(offset, ParseErrorKind::InvalidField { block: self.block, field: key, expected })
            }),
        }
    }

    fn req<T>(&mut self, key: &'static str, conv: Conv<T>, expected: &'static str) -> Result<T, PErr> {
        self.opt(key, conv, expected)?
            .ok_or_else(|| PErr::new(self.at, ParseErrorKind::MissingField { block: self.block, field: key }))
    }

    fn finish(self) -> Result<CustomFields, PErr> {
        let mut custom = Vec::new();
        for f in self.fields.iter_mut().filter(|f| !f.taken) {
            if !f.key.starts_with("x_") {
                return Err(PErr::new(
                    f.offset,
                    ParseErrorKind::UnknownField { block: self.block, field: f.key.to_string() },
                ));
            }
            custom.push((f.key.to_string(), std::mem::replace(&mut f.value, Value::Bool(false))));
        }
        Ok(CustomFields(Object::from_unique(custom)))
    }
}

fn string(v: Value) -> Option<String> {
    match v {
        Value::Str(s) => Some(s),
        _ => None,
    }
}

fn strings(v: Value) -> Option<Vec<String>> {
    match v {
        Value::Array(a) => a.into_iter().map(string).collect(),
        _ => None,
    }
}

fn object(v: Value) -> Option<Object> {
    match v {
        Value::Object(o) => Some(o),
        _ => None,
    }
}

fn boolean(v: Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(b),
        _ => None,
    }
}

fn uint(v: Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

const STR: &str = "a string";
const STRS: &str = "an array of strings";
const OBJ: &str = "an object";

pub(crate) fn header_from_raw<'a>(raw: RawBlock<'a>, fields: &mut Vec<RawField<'a>>) -> Result<Header, PErr> {
    let mut r = Reader::new("HEADER", raw, fields)?;
    Ok(Header {
        from: r.req("f", string, STR)?,
        to: r.req("t", string, STR)?,
        seq: r.req("s", uint, "a non-negative integer")?,
        batch: r.opt("b", string, STR)?,
        custom: r.finish()?,
    })
}

pub(crate) fn block_from_raw<'a>(raw: RawBlock<'a>, fields: &mut Vec<RawField<'a>>) -> Result<Block, PErr> {
    let at = raw.offset;
    Ok(match raw.name {
        "HEADER" => return Err(PErr::new(at, ParseErrorKind::ExtraHeader)),
        "CTX" => {
            let mut r = Reader::new("CTX", raw, fields)?;
            Block::Ctx(Ctx {
                project: r.req("p", string, STR)?,
                files: r.opt("f", strings, STRS)?,
                state: r.opt("st", object, OBJ)?,
                issue: r.opt("issue", string, STR)?,
                custom: r.finish()?,
            })
        }
        "REQ" => {
            let mut r = Reader::new("REQ", raw, fields)?;
            Block::Req(Req {
                objective: r.req("o", string, STR)?,
                priority: r.req(
                    "pr",
                    |v| uint(v).and_then(|p| u8::try_from(p).ok()).and_then(|p| Priority::new(p).ok()),
                    "an integer from 1 (critical) to 5 (low)",
                )?,
                deps: r.opt("d", strings, STRS)?,
                experts: r.opt("exp", strings, STRS)?,
                custom: r.finish()?,
            })
        }
        "PLAN" => {
            let RawBody::Steps(items) = raw.body else {
                return Err(PErr::new(
                    at,
                    ParseErrorKind::InvalidBody { block: "PLAN", expected: "an array of (i,t,s) steps" },
                ));
            };
            let mut steps = Vec::with_capacity(items.len());
            for (range, offset) in items {
                let Some(step_fields) = fields.get_mut(range) else {
                    return Err(PErr::new(offset, ParseErrorKind::InvalidBody { block: "PLAN", expected: "steps" }));
                };
                let mut r = Reader::from_fields("PLAN", offset, step_fields);
                steps.push(PlanStep {
                    id: r.req(
                        "i",
                        |v| match v {
                            Value::Str(s) => Some(StepId::Name(s)),
                            other => uint(other).map(StepId::Num),
                        },
                        "a non-negative integer or a string",
                    )?,
                    task: r.req("t", string, STR)?,
                    status: r.req("s", |v| string(v).and_then(|s| StepStatus::from_code(&s)), "one of P, I, C, X")?,
                    custom: r.finish()?,
                });
            }
            Block::Plan(Plan { steps })
        }
        "ACT" => {
            let mut r = Reader::new("ACT", raw, fields)?;
            Block::Act(Act {
                id: r.opt("i", string, STR)?,
                op: r.req(
                    "op",
                    |v| string(v).and_then(|s| Operation::parse(&s)),
                    "one of read, write, edit, shell, search, spawn",
                )?,
                target: r.req("tgt", |v| string(v).map(Target::from), STR)?,
                args: r.opt("args", object, OBJ)?,
                custom: r.finish()?,
            })
        }
        "OBS" => {
            let mut r = Reader::new("OBS", raw, fields)?;
            let action_id = r.opt("ai", string, STR)?;
            let status = r.req(
                "s",
                |v| match v.as_str() {
                    Some("OK") => Some(ObsStatus::Ok),
                    Some("ERR") => Some(ObsStatus::Err),
                    _ => None,
                },
                "OK or ERR",
            )?;
            let content = match status {
                ObsStatus::Ok => Some(r.req("c", object, OBJ)?),
                ObsStatus::Err => r.opt("c", object, OBJ)?,
            };
            Block::Obs(Obs { action_id, status, content, error: r.opt("e", string, STR)?, custom: r.finish()? })
        }
        "BLK" => {
            let mut r = Reader::new("BLK", raw, fields)?;
            Block::Blk(Blk {
                why: r.req("w", string, STR)?,
                alternatives: r.req("a", strings, STRS)?,
                escalate: r.opt("esc", boolean, "true or false")?,
                custom: r.finish()?,
            })
        }
        "ASK" => {
            let mut r = Reader::new("ASK", raw, fields)?;
            Block::Ask(Ask {
                question: r.req("q", string, STR)?,
                options: r.req("o", strings, STRS)?,
                default: r.opt("def", string, STR)?,
                custom: r.finish()?,
            })
        }
        "END" => {
            let mut r = Reader::new("END", raw, fields)?;
            Block::End(End {
                next: r.req("n", string, STR)?,
                tests: r.opt("t", strings, STRS)?,
                risks: r.opt("r", strings, STRS)?,
                deliverables: r.req("del", strings, STRS)?,
                custom: r.finish()?,
            })
        }
        "RES" => {
            let mut r = Reader::new("RES", raw, fields)?;
            Block::Res(Res { option: r.req("o", string, STR)?, msg: r.opt("msg", string, STR)?, custom: r.finish()? })
        }
        other => {
            let body = match raw.body {
                RawBody::Object => BlockBody::Object(Object::from_unique(
                    fields.drain(..).map(|f| (f.key.into_owned(), f.value)).collect(),
                )),
                RawBody::Array(items) => BlockBody::Array(items.into_iter().map(|(v, _)| v).collect()),
                // Only blocks named PLAN are parsed as steps, and PLAN is matched above.
                RawBody::Steps(_) => {
                    return Err(PErr::new(at, ParseErrorKind::InvalidBody { block: "PLAN", expected: "steps" }));
                }
            };
            // The parser only hands over names of the block-type shape, and standard names are matched above.
            Block::Extension(ExtensionBlock { name: other.to_owned(), body })
        }
    })
}
