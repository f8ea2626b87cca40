//! LLMX v1.0: a strict parser, typed messages, a canonical writer, and a bridge to LDP.
//!
//! LLMX is the compact text that LLM agents write and read directly:
//!
//! ```text
//! HEADER:{f:Claude,t:Gemini,s:1}          one HEADER per message
//! CTX:{p:myapp,f:["src/api.ts"]}          then blocks, one per line by convention
//! REQ:{o:"implement auth",pr:2}
//! PLAN:[(i:1,t:"analyze",s:C),(i:2,t:"implement",s:I)]
//! ```
//!
//! The layers, each usable alone:
//!
//! - [`parse`] / [`parse_all`] / [`Parser`]: text to [`Message`] (a [`Header`] and typed [`Block`]s). Errors are
//!   [`LlmxError::Parse`] with a line, a column and what was expected; [`Res::nack`] turns one into the spec's
//!   `RES:{o:"NACK",...}` answer, and [`Message::warnings`] gives the `RES:{o:"WARN",...}` answers for unknown types.
//! - [`Parser::reader`] / [`MessageReader`]: a stream of messages read one at a time, in memory bounded by the
//!   largest message; [`SequenceTracker`] warns when a sender's HEADER `s` does not increase (section 3.1).
//! - [`Value`]: the generic model behind `X_*` blocks, `x_*` fields, `args`, `st` and `c`.
//! - [`write()`]: the canonical text in the spec's syntax (strings quoted, identifiers and enumerations bare, as the
//!   spec's examples write them); `parse(&write(&m)) == Ok(m)` for every message. [`write_with`] and
//!   [`WriteStyle::Compact`] write every plain string bare, for token budgets.
//! - [`Target`], [`PathRef`], [`OpShortcut`]: section 4's shortcuts; [`SafeRoot`]: section 9.2's path checks.
//! - [`BatchTracker`]: section 5's batches, matching OBS `ai` to ACT `i` in any order.
//! - [`bridge`]: [`to_ldp`] turns messages into LDP envelopes (REQ to `TASK_SUBMIT`, END/OBS to `TASK_RESULT` or
//!   `TASK_FAILED`, BLK/ASK to an input-required `TASK_UPDATE`) and [`from_ldp`] turns them back.
//!
//! ```
//! use ldp_llmx::{Block, Operation, Resource, parse, write};
//!
//! let text = "HEADER:{f:Claude,t:Gemini,s:1}\nACT:{i:A1, op:edit, tgt:\"p:src/auth.ts#L42\"}";
//! let msg = parse(text)?;
//! let Block::Act(act) = &msg.blocks[0] else { unreachable!() };
//! assert_eq!(act.op, Operation::Edit);
//! assert!(matches!(act.target.resource(), Resource::Path(p) if p.path == "src/auth.ts"));
//! assert_eq!(write(&msg), "HEADER:{f:Claude,t:Gemini,s:1}\nACT:{i:A1,op:edit,tgt:\"p:src/auth.ts#L42\"}\n");
//! assert_eq!(parse(&write(&msg))?, msg);
//! # Ok::<(), ldp_llmx::LlmxError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

mod batch;
pub mod bridge;
mod error;
mod message;
mod parser;
mod shortcut;
mod stream;
mod value;
mod writer;

pub use batch::{BatchTracker, ObserveReport};
pub use bridge::{BridgeConfig, from_ldp, to_ldp};
pub use error::{LlmxError, ParseErrorKind, Position};
pub use message::{
    Act, Ask, Blk, Block, BlockBody, Ctx, CustomFields, End, ExtensionBlock, Header, Message, Obs, ObsStatus,
    Operation, Plan, PlanStep, Priority, Req, Res, STANDARD_TYPES, StepId, StepStatus,
};
pub use parser::{DEFAULT_MAX_DEPTH, Parser, parse, parse_all};
pub use shortcut::{ExpandedLines, ExpandedTarget, Lines, OpShortcut, PathRef, Resource, SafeRoot, Target};
pub use stream::{DEFAULT_MAX_MESSAGE_BYTES, MAX_TRACKED_SENDERS, MessageReader, SequenceTracker, sequence_warnings};
pub use value::{Number, Object, Value};
pub use writer::{
    WriteStyle, write, write_all, write_block, write_block_with, write_into, write_into_with, write_value,
    write_value_with, write_with,
};
