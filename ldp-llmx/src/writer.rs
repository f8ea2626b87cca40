//! The writers: the canonical text, which follows the spec's syntax, and a compact variant.
//!
//! Both: one block per line (a line break costs the same byte as none, and keeps diagnostics line-based), no spaces,
//! standard fields in spec order followed by `x_` fields, numbers without exponents.
//!
//! [`WriteStyle::Canonical`] quotes strings as section 2.2 ("String values use double quotes") and Appendix A
//! (`string = '"' , { char } , '"'`) say, leaving bare only what the spec's own examples write bare: the identifier
//! fields (HEADER `f`, `t`, `b`; CTX `p`; ACT `i`; OBS `ai`; a PLAN step's `i`) when they are plain identifiers, and
//! the enumerations (PLAN `s`, ACT `op`, OBS `s`). Every example of the spec is its own canonical text.
//! [`WriteStyle::Compact`] writes every string bare that reads back the same, for token budgets.

use std::fmt::Write as _;

use crate::message::{Block, BlockBody, CustomFields, Message, StepId};
use crate::value::{Object, Value};

/// How strings are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WriteStyle {
    /// The spec's syntax: strings quoted, bare only the identifier and enumeration fields its examples write bare.
    #[default]
    Canonical,
    /// Every string bare that reads back as the same string: fewer bytes and tokens, still parsed by this crate, but
    /// outside the spec's grammar for free-text strings.
    Compact,
}

/// The canonical text of one message, ending in a line break.
pub fn write(message: &Message) -> String {
    write_with(message, WriteStyle::Canonical)
}

/// The text of one message in `style`, ending in a line break.
pub fn write_with(message: &Message, style: WriteStyle) -> String {
    let mut out = String::with_capacity(64 * (message.blocks.len() + 1));
    write_into_with(message, style, &mut out);
    out
}

/// The canonical text of several messages, one after another.
pub fn write_all(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        write_into(m, &mut out);
    }
    out
}

/// Appends the canonical text of `message` to `out`.
pub fn write_into(message: &Message, out: &mut String) {
    write_into_with(message, WriteStyle::Canonical, out);
}

/// Appends the text of `message` in `style` to `out`.
pub fn write_into_with(message: &Message, style: WriteStyle, out: &mut String) {
    let h = &message.header;
    let mut w = Fields::open(out, "HEADER", style);
    w.ident("f", &h.from);
    w.ident("t", &h.to);
    w.raw("s", format_args!("{}", h.seq));
    if let Some(b) = &h.batch {
        w.ident("b", b);
    }
    w.custom(&h.custom);
    w.close();
    for b in &message.blocks {
        write_block_with(b, style, out);
    }
}

/// Appends one block in canonical form and its line break.
pub fn write_block(block: &Block, out: &mut String) {
    write_block_with(block, WriteStyle::Canonical, out);
}

/// Appends one block in `style` and its line break.
pub fn write_block_with(block: &Block, style: WriteStyle, out: &mut String) {
    match block {
        Block::Ctx(c) => {
            let mut w = Fields::open(out, "CTX", style);
            w.ident("p", &c.project);
            w.opt_strs("f", c.files.as_deref());
            if let Some(st) = &c.state {
                w.object("st", st);
            }
            w.opt_str("issue", c.issue.as_deref());
            w.custom(&c.custom);
            w.close();
        }
        Block::Req(r) => {
            let mut w = Fields::open(out, "REQ", style);
            w.str("o", &r.objective);
            w.raw("pr", format_args!("{}", r.priority.get()));
            w.opt_strs("d", r.deps.as_deref());
            w.opt_strs("exp", r.experts.as_deref());
            w.custom(&r.custom);
            w.close();
        }
        Block::Plan(p) => {
            out.push_str("PLAN:[");
            for (n, s) in p.steps.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str("(i:");
                match &s.id {
                    StepId::Num(i) => {
                        let _ = write!(out, "{i}");
                    }
                    StepId::Name(name) => write_ident(name, out),
                }
                out.push_str(",t:");
                write_str(&s.task, style, out);
                out.push_str(",s:");
                out.push_str(s.status.code());
                for (k, v) in s.custom.iter() {
                    out.push(',');
                    write_key(k, out);
                    out.push(':');
                    write_value_with(v, style, out);
                }
                out.push(')');
            }
            out.push_str("]\n");
        }
        Block::Act(a) => {
            let mut w = Fields::open(out, "ACT", style);
            if let Some(i) = &a.id {
                w.ident("i", i);
            }
            w.raw("op", format_args!("{}", a.op.as_str()));
            w.str("tgt", a.target.as_str());
            if let Some(args) = &a.args {
                w.object("args", args);
            }
            w.custom(&a.custom);
            w.close();
        }
        Block::Obs(o) => {
            let mut w = Fields::open(out, "OBS", style);
            if let Some(ai) = &o.action_id {
                w.ident("ai", ai);
            }
            w.raw("s", format_args!("{}", if o.status == crate::message::ObsStatus::Ok { "OK" } else { "ERR" }));
            if let Some(c) = &o.content {
                w.object("c", c);
            }
            w.opt_str("e", o.error.as_deref());
            w.custom(&o.custom);
            w.close();
        }
        Block::Blk(b) => {
            let mut w = Fields::open(out, "BLK", style);
            w.str("w", &b.why);
            w.strs("a", &b.alternatives);
            if let Some(esc) = b.escalate {
                w.raw("esc", format_args!("{esc}"));
            }
            w.custom(&b.custom);
            w.close();
        }
        Block::Ask(a) => {
            let mut w = Fields::open(out, "ASK", style);
            w.str("q", &a.question);
            w.strs("o", &a.options);
            w.opt_str("def", a.default.as_deref());
            w.custom(&a.custom);
            w.close();
        }
        Block::End(e) => {
            let mut w = Fields::open(out, "END", style);
            w.str("n", &e.next);
            w.opt_strs("t", e.tests.as_deref());
            w.opt_strs("r", e.risks.as_deref());
            w.strs("del", &e.deliverables);
            w.custom(&e.custom);
            w.close();
        }
        Block::Res(r) => {
            let mut w = Fields::open(out, "RES", style);
            w.str("o", &r.option);
            w.opt_str("msg", r.msg.as_deref());
            w.custom(&r.custom);
            w.close();
        }
        Block::Extension(e) => {
            out.push_str(e.name());
            out.push(':');
            match e.body() {
                BlockBody::Object(o) => write_object(o, '{', '}', style, out),
                BlockBody::Array(a) => write_array(a, style, out),
            }
            out.push('\n');
        }
    }
}

/// Writes `{k:v,...}` one field at a time.
struct Fields<'o> {
    out: &'o mut String,
    first: bool,
    style: WriteStyle,
}

impl<'o> Fields<'o> {
    fn open(out: &'o mut String, name: &str, style: WriteStyle) -> Self {
        out.push_str(name);
        out.push_str(":{");
        Fields { out, first: true, style }
    }

    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        write_key(k, self.out);
        self.out.push(':');
    }

    fn raw(&mut self, k: &str, v: std::fmt::Arguments<'_>) {
        self.key(k);
        let _ = self.out.write_fmt(v);
    }

    fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        write_str(v, self.style, self.out);
    }

    /// An identifier field, which the spec's examples write bare (`f:Claude`, `i:A1`).
    fn ident(&mut self, k: &str, v: &str) {
        self.key(k);
        write_ident(v, self.out);
    }

    fn opt_str(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.str(k, v);
        }
    }

    fn strs(&mut self, k: &str, v: &[String]) {
        self.key(k);
        self.out.push('[');
        for (n, s) in v.iter().enumerate() {
            if n > 0 {
                self.out.push(',');
            }
            write_str(s, self.style, self.out);
        }
        self.out.push(']');
    }

    fn opt_strs(&mut self, k: &str, v: Option<&[String]>) {
        if let Some(v) = v {
            self.strs(k, v);
        }
    }

    fn object(&mut self, k: &str, o: &Object) {
        self.key(k);
        write_object(o, '{', '}', self.style, self.out);
    }

    fn custom(&mut self, c: &CustomFields) {
        for (k, v) in c.iter() {
            self.key(k);
            write_value_with(v, self.style, self.out);
        }
    }

    fn close(self) {
        self.out.push_str("}\n");
    }
}

/// Whether `s` reads back as the same string when written without quotes.
///
/// Narrower than what the parser accepts bare (no `-` or `.`), as in the spec's examples (`PROJ-123` is quoted).
pub(crate) fn is_bare(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && s != "true"
        && s != "false"
}

fn write_key(k: &str, out: &mut String) {
    let b = k.as_bytes();
    if b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
    {
        out.push_str(k);
    } else {
        write_quoted(k, out);
    }
}

/// A free-text string: quoted in canonical form, bare in compact form when that reads back the same.
fn write_str(s: &str, style: WriteStyle, out: &mut String) {
    if style == WriteStyle::Compact && is_bare(s) {
        out.push_str(s);
    } else {
        write_quoted(s, out);
    }
}

/// An identifier: bare in every style when that reads back the same, as the spec's examples write them.
fn write_ident(s: &str, out: &mut String) {
    if is_bare(s) {
        out.push_str(s);
    } else {
        write_quoted(s, out);
    }
}

fn write_quoted(s: &str, out: &mut String) {
    out.push('"');
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(esc);
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

fn write_object(o: &Object, open: char, close: char, style: WriteStyle, out: &mut String) {
    out.push(open);
    for (n, (k, v)) in o.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        write_key(k, out);
        out.push(':');
        write_value_with(v, style, out);
    }
    out.push(close);
}

fn write_array(a: &[Value], style: WriteStyle, out: &mut String) {
    out.push('[');
    for (n, v) in a.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        write_value_with(v, style, out);
    }
    out.push(']');
}

/// Appends one value in canonical form (strings quoted).
pub fn write_value(v: &Value, out: &mut String) {
    write_value_with(v, WriteStyle::Canonical, out);
}

/// Appends one value in `style`.
pub fn write_value_with(v: &Value, style: WriteStyle, out: &mut String) {
    match v {
        Value::Str(s) => write_str(s, style, out),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Array(a) => write_array(a, style, out),
        Value::Object(o) => write_object(o, '{', '}', style, out),
        Value::Tuple(o) => write_object(o, '(', ')', style, out),
    }
}
