//! The grammar: rules of expressions, pruned of what generates nothing, then written as GBNF.

use super::*;

/// The fixed rules of JSON's lexical pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Prim {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn rules(self) -> (&'static [&'static str], &'static [Prim]) {
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
pub(super) enum Expr {
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
pub(super) enum Context {
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

pub(super) struct Rule {
    pub(super) name: String,
    body: Expr,
    /// The document and pointer it comes from, for errors.
    origin: Option<(Context, String)>,
}

#[derive(Default)]
pub(super) struct Builder {
    pub(super) rules: Vec<Rule>,
}

impl Builder {
    pub(super) fn rule(&mut self, name: String, origin: Option<(Context, String)>) -> usize {
        self.rules.push(Rule { name, body: Expr::Never, origin });
        self.rules.len() - 1
    }

    pub(super) fn set(&mut self, rule: usize, body: Expr) {
        if let Some(r) = self.rules.get_mut(rule) {
            r.body = body;
        }
    }

    /// Parses and compiles one schema document; returns the rule of its root.
    pub(super) fn add_document(&mut self, schema: &Value, context: Context) -> Result<usize, SchemaError> {
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
    pub(super) fn finish(mut self, root: Expr) -> Result<String, SchemaError> {
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
        self.least_fixpoint(is_productive)
    }

    /// The rules for which `holds` becomes true, given what holds of the rules they refer to, repeated until nothing
    /// changes.
    fn least_fixpoint(&self, holds: fn(&Expr, &[bool]) -> bool) -> Vec<bool> {
        let mut known = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (i, rule) in self.rules.iter().enumerate() {
                if !known[i] && holds(&rule.body, &known) {
                    known[i] = true;
                    changed = true;
                }
            }
            if !changed {
                return known;
            }
        }
    }

    pub(super) fn reachable(&self, root: usize) -> Vec<bool> {
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
        let nullable = self.least_fixpoint(is_nullable);
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
            // A sequence needs parentheses only before a repetition's suffix, an alternation inside anything.
            Expr::Seq(items) => self.render_joined(items, " ", ctx == Ctx::Postfix, out),
            Expr::Alt(items) => self.render_joined(items, " | ", ctx != Ctx::Top, out),
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

    fn render_joined(&self, items: &[Expr], separator: &str, paren: bool, out: &mut String) {
        if paren {
            out.push_str("( ");
        }
        for (k, item) in items.iter().enumerate() {
            if k > 0 {
                out.push_str(separator);
            }
            self.render(item, Ctx::Item, out);
        }
        if paren {
            out.push_str(" )");
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
pub(super) fn json_string(s: &str) -> String {
    // A `Value`'s `Display` is serde_json's own writer, which cannot fail on a string.
    Value::String(s.to_owned()).to_string()
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
    pub(super) builder: &'b mut Builder,
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

    pub(super) fn compile(&mut self, node: &Node) -> Expr {
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
