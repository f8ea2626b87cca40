//! The schema, parsed: the subset as a tree, `$ref`s as indices into the document's definitions.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum Node {
    /// Any JSON value (`true`, `{}`).
    Any,
    /// No value (`false`, an empty `enum` ...).
    Never,
    /// Exactly these values (`enum`, `const`, already filtered by their siblings).
    Values(Vec<Value>),
    /// The definition at this index of the document.
    Ref(usize),
    /// At least one branch.
    AnyOf(Vec<Node>),
    /// Exactly one branch (the branches' generated values are proven exclusive).
    OneOf(Vec<Node>),
    /// A union of kinds, each with its own constraints.
    Typed(Box<Typed>),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Typed {
    pub(super) null: bool,
    pub(super) boolean: bool,
    pub(super) integer: bool,
    /// Numbers, integers included.
    pub(super) number: bool,
    pub(super) string: Option<Bounds>,
    pub(super) array: Option<ArrayRule>,
    pub(super) object: Option<ObjectRule>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: u64,
    /// The schema's maximum (validation uses it; generation caps it at [`MAX_REPETITION`]).
    pub(super) max: Option<u64>,
}

impl Bounds {
    fn admits(self, n: u64) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }
    /// The maximum a grammar generates.
    pub(super) fn generated_max(self) -> u64 {
        self.max.map_or(MAX_REPETITION, |m| m.min(MAX_REPETITION))
    }
}

#[derive(Debug, Clone)]
pub(super) struct ArrayRule {
    pub(super) items: Node,
    pub(super) len: Bounds,
}

#[derive(Debug, Clone)]
pub(super) struct ObjectRule {
    pub(super) props: Vec<Prop>,
    /// `additionalProperties: false`: validation refuses other members (generation never writes them anyway).
    closed: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Prop {
    pub(super) name: String,
    pub(super) node: Node,
    pub(super) required: bool,
}

/// Keywords that do not constrain values.
const IGNORED: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$comment",
    "$defs",
    "definitions",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Keywords of JSON Schema (drafts 4 to 2020-12) that constrain values and that the grammar does not express: a
/// schema holding one is a [`SchemaError::Unsupported`] naming it.
pub const UNSUPPORTED_KEYWORDS: &[&str] = &[
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "not",
    "allOf",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "$dynamicRef",
    "$recursiveRef",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
];

/// Keywords that constrain values and that `$ref`, `anyOf` and `oneOf` cannot be combined with.
const CONSTRAINING: &[&str] = &[
    "$ref",
    "anyOf",
    "oneOf",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
];

/// A schema definition reached through `$ref`.
pub(super) struct Def {
    pub(super) pointer: String,
    pub(super) node: Option<Node>,
}

/// One schema document being parsed (a tool's input schema, the answer schema ...).
pub(super) struct Document<'a> {
    pub(super) root: &'a Value,
    pub(super) defs: Vec<Def>,
    by_pointer: HashMap<String, usize>,
    size: usize,
    /// Steps taken by [`Document::admits`] and [`Document::excludes`], which borrow the definitions.
    pub(super) steps: Cell<usize>,
}

fn child(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", token.replace('~', "~0").replace('/', "~1"))
}

impl<'a> Document<'a> {
    pub(super) fn new(root: &'a Value) -> Self {
        Self { root, defs: Vec::new(), by_pointer: HashMap::new(), size: 0, steps: Cell::new(0) }
    }

    pub(super) fn count(&mut self, n: usize) -> Result<(), SchemaError> {
        self.size = self.size.saturating_add(n);
        if self.size > MAX_SCHEMA_SIZE {
            return Err(SchemaError::TooLarge { limit: MAX_SCHEMA_SIZE });
        }
        Ok(())
    }

    pub(super) fn parse(&mut self, schema: &'a Value, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { pointer: pointer.into(), limit: MAX_DEPTH });
        }
        self.count(1)?;
        match schema {
            Value::Bool(true) => Ok(Node::Any),
            Value::Bool(false) => Ok(Node::Never),
            Value::Object(map) => self.parse_object(map, pointer, depth),
            _ => Err(SchemaError::Invalid {
                pointer: pointer.into(),
                reason: "a schema is an object or a boolean".into(),
            }),
        }
    }

    fn parse_object(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        for (keyword, value) in map {
            let at = || child(pointer, keyword);
            let unsupported = || SchemaError::Unsupported { keyword: keyword.clone(), pointer: at() };
            match keyword.as_str() {
                k if UNSUPPORTED_KEYWORDS.contains(&k) => return Err(unsupported()),
                // At the root `$id` names the document; below, it would start a new base for `$ref`s.
                "$id" if !pointer.is_empty() => return Err(unsupported()),
                "additionalProperties" if !is_trivial(value) => return Err(unsupported()),
                "uniqueItems" if value != &Value::Bool(false) => return Err(unsupported()),
                "items" if !value.is_object() && !value.is_boolean() => return Err(unsupported()),
                _ => {}
            }
        }
        let values = self.values(map, pointer)?;
        let rest = self.parse_rest(map, pointer, depth)?;
        let Some(values) = values else { return Ok(rest) };
        let mut kept: Vec<Value> = Vec::with_capacity(values.len());
        for value in values {
            if self.admits(&rest, value, 0) == Some(true) && !kept.iter().any(|k| json_eq(k, value)) {
                kept.push(value.clone());
            }
        }
        Ok(if kept.is_empty() { Node::Never } else { Node::Values(kept) })
    }

    /// The values `enum` and `const` allow (both when both are there), or `None` when neither is.
    pub(super) fn values(
        &mut self,
        map: &'a Map<String, Value>,
        pointer: &str,
    ) -> Result<Option<Vec<&'a Value>>, SchemaError> {
        let mut values: Option<Vec<&'a Value>> = None;
        if let Some(list) = map.get("enum") {
            let Value::Array(list) = list else {
                return Err(SchemaError::Invalid {
                    pointer: child(pointer, "enum"),
                    reason: "`enum` is an array".into(),
                });
            };
            self.count(list.len())?;
            for (i, v) in list.iter().enumerate() {
                check_value_depth(v, &child(&child(pointer, "enum"), &i.to_string()))?;
            }
            values = Some(list.iter().collect());
        }
        if let Some(constant) = map.get("const") {
            check_value_depth(constant, &child(pointer, "const"))?;
            values = Some(match values {
                Some(list) => list.into_iter().filter(|v| json_eq(v, constant)).collect(),
                None => vec![constant],
            });
        }
        Ok(values)
    }

    /// The schema without its `enum` and `const`.
    fn parse_rest(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        for keyword in ["$ref", "anyOf", "oneOf"] {
            if map.contains_key(keyword) && CONSTRAINING.iter().any(|k| *k != keyword && map.contains_key(*k)) {
                return Err(SchemaError::UnsupportedCombination {
                    keyword: keyword.into(),
                    pointer: child(pointer, keyword),
                });
            }
        }
        if let Some(reference) = map.get("$ref") {
            return self.reference(reference, &child(pointer, "$ref"), depth);
        }
        for keyword in ["anyOf", "oneOf"] {
            let Some(branches) = map.get(keyword) else { continue };
            let at = child(pointer, keyword);
            let branches = match branches {
                Value::Array(list) if !list.is_empty() => list,
                _ => {
                    return Err(SchemaError::Invalid {
                        pointer: at,
                        reason: format!("`{keyword}` is a non-empty array"),
                    });
                }
            };
            let mut nodes = Vec::with_capacity(branches.len());
            for (i, branch) in branches.iter().enumerate() {
                nodes.push(self.parse(branch, &child(&at, &i.to_string()), depth + 1)?);
            }
            if keyword == "anyOf" {
                return Ok(Node::AnyOf(nodes));
            }
            for (i, a) in nodes.iter().enumerate() {
                for (j, b) in nodes.iter().enumerate() {
                    if i != j && !self.excludes(a, b, 0) {
                        return Err(SchemaError::OverlappingOneOf { pointer: at });
                    }
                }
            }
            return Ok(Node::OneOf(nodes));
        }
        self.parse_typed(map, pointer, depth)
    }

    pub(super) fn reference(&mut self, reference: &Value, at: &str, depth: usize) -> Result<Node, SchemaError> {
        let Value::String(reference) = reference else {
            return Err(SchemaError::Invalid { pointer: at.into(), reason: "`$ref` is a string".into() });
        };
        let unresolved = || SchemaError::UnresolvedRef { reference: reference.clone(), pointer: at.into() };
        let target_pointer = match reference.strip_prefix('#') {
            Some(p) if p.is_empty() || p.starts_with("/$defs/") || p.starts_with("/definitions/") => p,
            _ => return Err(unresolved()),
        };
        if let Some(&index) = self.by_pointer.get(target_pointer) {
            return Ok(Node::Ref(index));
        }
        let target = self.root.pointer(target_pointer).ok_or_else(unresolved)?;
        let index = self.defs.len();
        self.defs.push(Def { pointer: target_pointer.into(), node: None });
        self.by_pointer.insert(target_pointer.into(), index);
        let node = self.parse(target, target_pointer, depth + 1)?;
        if let Some(def) = self.defs.get_mut(index) {
            def.node = Some(node);
        }
        Ok(Node::Ref(index))
    }

    fn parse_typed(&mut self, map: &'a Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, SchemaError> {
        let has = |keys: &[&str]| keys.iter().any(|k| map.contains_key(*k));
        let object_hint = has(&["properties", "required", "additionalProperties"]);
        let array_hint = has(&["items", "minItems", "maxItems"]);
        let string_hint = has(&["minLength", "maxLength"]);
        let mut kinds = BTreeSet::new();
        match map.get("type") {
            None if !(object_hint || array_hint || string_hint) => return Ok(Node::Any),
            None => {
                for (hint, kind) in [(object_hint, "object"), (array_hint, "array"), (string_hint, "string")] {
                    if hint {
                        kinds.insert(kind);
                    }
                }
            }
            Some(Value::String(name)) => {
                kinds.insert(type_name(name, &child(pointer, "type"))?);
            }
            Some(Value::Array(names)) => {
                for (i, name) in names.iter().enumerate() {
                    let at = child(&child(pointer, "type"), &i.to_string());
                    let Value::String(name) = name else {
                        return Err(SchemaError::Invalid { pointer: at, reason: "a type name is a string".into() });
                    };
                    kinds.insert(type_name(name, &at)?);
                }
            }
            Some(_) => {
                return Err(SchemaError::Invalid {
                    pointer: child(pointer, "type"),
                    reason: "`type` is a string or an array of strings".into(),
                });
            }
        }
        let mut typed = Typed {
            null: kinds.contains("null"),
            boolean: kinds.contains("boolean"),
            integer: kinds.contains("integer"),
            number: kinds.contains("number"),
            ..Typed::default()
        };
        if kinds.contains("string") {
            typed.string = bounds(map, "minLength", "maxLength", pointer)?;
        }
        if kinds.contains("array") {
            let len = bounds(map, "minItems", "maxItems", pointer)?;
            let items = match map.get("items") {
                Some(items) => self.parse(items, &child(pointer, "items"), depth + 1)?,
                None => Node::Any,
            };
            typed.array = len.map(|len| ArrayRule { items, len });
        }
        if kinds.contains("object") {
            typed.object = Some(self.object(map, pointer, depth)?);
        }
        Ok(Node::Typed(Box::new(typed)))
    }

    pub(super) fn object(
        &mut self,
        map: &'a Map<String, Value>,
        pointer: &str,
        depth: usize,
    ) -> Result<ObjectRule, SchemaError> {
        let mut props = Vec::new();
        if let Some(properties) = map.get("properties") {
            let at = child(pointer, "properties");
            let Value::Object(properties) = properties else {
                return Err(SchemaError::Invalid { pointer: at, reason: "`properties` is an object".into() });
            };
            for (name, schema) in properties {
                let node = self.parse(schema, &child(&at, name), depth + 1)?;
                props.push(Prop { name: name.clone(), node, required: false });
            }
        }
        let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
        if let Some(required) = map.get("required") {
            let at = child(pointer, "required");
            let Value::Array(required) = required else {
                return Err(SchemaError::Invalid { pointer: at, reason: "`required` is an array".into() });
            };
            self.count(required.len())?;
            for (i, name) in required.iter().enumerate() {
                let Value::String(name) = name else {
                    return Err(SchemaError::Invalid {
                        pointer: child(&at, &i.to_string()),
                        reason: "a required name is a string".into(),
                    });
                };
                match props.iter_mut().find(|p| &p.name == name) {
                    Some(prop) => prop.required = true,
                    // Valid values have it, with any value (none when the object is closed): generate it, after
                    // the declared ones.
                    None => {
                        let node = if closed { Node::Never } else { Node::Any };
                        props.push(Prop { name: name.clone(), node, required: true });
                    }
                }
            }
        }
        Ok(ObjectRule { props, closed })
    }

    pub(super) fn def(&self, index: usize) -> Option<&Node> {
        self.defs.get(index).and_then(|d| d.node.as_ref())
    }

    /// One step of the checks; `false` once the budget or the depth is spent.
    pub(super) fn step(&self, depth: usize) -> bool {
        self.steps.set(self.steps.get() + 1);
        self.steps.get() <= MAX_CHECK_STEPS && depth <= 4 * MAX_DEPTH
    }

    /// Whether `value` is valid for `node` under JSON Schema's rules (other members allowed unless the object is
    /// closed); `None` when unknown (a definition still being parsed, the budget spent).
    fn admits(&self, node: &Node, value: &Value, depth: usize) -> Option<bool> {
        if !self.step(depth) {
            return None;
        }
        match node {
            Node::Any => Some(true),
            Node::Never => Some(false),
            Node::Values(values) => Some(values.iter().any(|v| json_eq(v, value))),
            Node::Ref(i) => self.admits(self.def(*i)?, value, depth + 1),
            Node::AnyOf(nodes) => {
                let mut unknown = false;
                for n in nodes {
                    match self.admits(n, value, depth + 1) {
                        Some(true) => return Some(true),
                        Some(false) => {}
                        None => unknown = true,
                    }
                }
                if unknown { None } else { Some(false) }
            }
            Node::OneOf(nodes) => {
                let mut matched = 0;
                for n in nodes {
                    matched += usize::from(self.admits(n, value, depth + 1)?);
                }
                Some(matched == 1)
            }
            Node::Typed(t) => self.admits_typed(t, value, depth),
        }
    }

    fn admits_typed(&self, t: &Typed, value: &Value, depth: usize) -> Option<bool> {
        match value {
            Value::Null => Some(t.null),
            Value::Bool(_) => Some(t.boolean),
            Value::Number(n) => {
                let integral = n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0);
                Some(t.number || (t.integer && integral))
            }
            Value::String(s) => Some(t.string.is_some_and(|b| b.admits(s.chars().count() as u64))),
            Value::Array(items) => {
                let Some(rule) = &t.array else { return Some(false) };
                if !rule.len.admits(items.len() as u64) {
                    return Some(false);
                }
                for item in items {
                    if !self.admits(&rule.items, item, depth + 1)? {
                        return Some(false);
                    }
                }
                Some(true)
            }
            Value::Object(members) => {
                let Some(rule) = &t.object else { return Some(false) };
                for prop in &rule.props {
                    match members.get(&prop.name) {
                        None if prop.required => return Some(false),
                        Some(v) if !self.admits(&prop.node, v, depth + 1)? => return Some(false),
                        _ => {}
                    }
                }
                Some(!rule.closed || members.keys().all(|k| rule.props.iter().any(|p| &p.name == k)))
            }
        }
    }

    /// Whether no value the grammar of `a` generates is valid for `b` (`false` when unsure).
    fn excludes(&self, a: &Node, b: &Node, depth: usize) -> bool {
        if !self.step(depth) {
            return false;
        }
        match (a, b) {
            (Node::Never, _) | (_, Node::Never) => true,
            (_, Node::Any) | (Node::Any, _) => false,
            (Node::Values(values), _) => values.iter().all(|v| self.admits(b, v, depth + 1) == Some(false)),
            (Node::Ref(i), _) => self.def(*i).is_some_and(|a| self.excludes(a, b, depth + 1)),
            (Node::AnyOf(nodes) | Node::OneOf(nodes), _) => nodes.iter().all(|n| self.excludes(n, b, depth + 1)),
            // A value `a` generates is one of its own (generation is sound), so none of `b`'s values if `a`
            // refuses them all.
            (_, Node::Values(values)) => values.iter().all(|v| self.admits(a, v, depth + 1) == Some(false)),
            (_, Node::Ref(i)) => self.def(*i).is_some_and(|b| self.excludes(a, b, depth + 1)),
            // A value valid for a `oneOf` is valid for one of its branches.
            (_, Node::AnyOf(nodes) | Node::OneOf(nodes)) => nodes.iter().all(|n| self.excludes(a, n, depth + 1)),
            (Node::Typed(a), Node::Typed(b)) => self.excludes_typed(a, b, depth),
        }
    }

    fn excludes_typed(&self, a: &Typed, b: &Typed, depth: usize) -> bool {
        let numbers_a = a.integer || a.number;
        let numbers_b = b.integer || b.number;
        if (a.null && b.null) || (a.boolean && b.boolean) || (numbers_a && numbers_b) {
            return false;
        }
        if let (Some(sa), Some(sb)) = (a.string, b.string) {
            let (lo, hi) = (sa.min, sa.generated_max());
            if lo <= hi && sb.min <= hi && sb.max.is_none_or(|m| m >= lo) {
                return false;
            }
        }
        if let (Some(aa), Some(ab)) = (&a.array, &b.array) {
            let (lo, hi) = (aa.len.min, aa.len.generated_max());
            let counts_overlap = lo <= hi && ab.len.min <= hi && ab.len.max.is_none_or(|m| m >= lo);
            // Arrays of a's lengths that b allows: refused only when a's items never pass b's (and none is empty).
            if counts_overlap && (ab.len.admits(0) && lo == 0 || !self.excludes(&aa.items, &ab.items, depth + 1)) {
                return false;
            }
        }
        if let (Some(oa), Some(ob)) = (&a.object, &b.object) {
            let mut excluded = false;
            for pb in ob.props.iter().filter(|p| p.required) {
                match oa.props.iter().find(|p| p.name == pb.name) {
                    None => excluded = true,
                    Some(pa) => excluded |= self.excludes(&pa.node, &pb.node, depth + 1),
                }
                if excluded {
                    break;
                }
            }
            if !excluded {
                for pa in oa.props.iter().filter(|p| p.required) {
                    match ob.props.iter().find(|p| p.name == pa.name) {
                        None => excluded = ob.closed,
                        Some(pb) => excluded = self.excludes(&pa.node, &pb.node, depth + 1),
                    }
                    if excluded {
                        break;
                    }
                }
            }
            if !excluded {
                return false;
            }
        }
        true
    }
}

/// `additionalProperties` values that say nothing more than the grammar does: `true`, `false`, `{}`.
fn is_trivial(value: &Value) -> bool {
    match value {
        Value::Bool(_) => true,
        Value::Object(map) => map.keys().all(|k| IGNORED.contains(&k.as_str())),
        _ => false,
    }
}

fn type_name<'n>(name: &'n str, pointer: &str) -> Result<&'n str, SchemaError> {
    match name {
        "null" | "boolean" | "integer" | "number" | "string" | "array" | "object" => Ok(name),
        _ => {
            Err(SchemaError::Invalid { pointer: pointer.into(), reason: format!("`{name}` is not a JSON Schema type") })
        }
    }
}

/// The bounds `min_key`..`max_key`, or `None` when no count is in them.
fn bounds(
    map: &Map<String, Value>,
    min_key: &str,
    max_key: &str,
    pointer: &str,
) -> Result<Option<Bounds>, SchemaError> {
    let count = |key: &str| -> Result<Option<u64>, SchemaError> {
        match map.get(key) {
            None => Ok(None),
            Some(v) => count_value(v).map(Some).ok_or_else(|| SchemaError::Invalid {
                pointer: child(pointer, key),
                reason: format!("`{key}` is a non-negative integer"),
            }),
        }
    };
    let min = count(min_key)?.unwrap_or(0);
    let max = count(max_key)?;
    if min > MAX_REPETITION {
        return Err(SchemaError::BoundTooLarge {
            keyword: min_key.into(),
            pointer: child(pointer, min_key),
            value: min,
            limit: MAX_REPETITION,
        });
    }
    Ok(if max.is_some_and(|m| m < min) { None } else { Some(Bounds { min, max }) })
}

/// A count: a non-negative integer, written `3` or `3.0`.
fn count_value(v: &Value) -> Option<u64> {
    let n = v.as_number()?;
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    let f = n.as_f64()?;
    // Whole floats beyond u64 saturate: a bound that large is no bound for a grammar.
    (f >= 0.0 && f.fract() == 0.0).then_some(f as u64)
}

/// Refuses values nested deeper than [`MAX_DEPTH`], without recursion.
fn check_value_depth(value: &Value, pointer: &str) -> Result<(), SchemaError> {
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { pointer: pointer.into(), limit: MAX_DEPTH });
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(members) => stack.extend(members.values().map(|i| (i, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// JSON Schema's equality: numbers by value (`1` equals `1.0`), objects whatever their member order. Values are
/// at most [`MAX_DEPTH`] deep (checked when read).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(i), Some(j), _, _) => i == j,
            (_, _, Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}
