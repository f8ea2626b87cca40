//! Machine-checkable success criteria and safety constraints for delegation contracts (the paper's section 7:
//! "formal specification language with machine-checkable predicates (e.g., word count, output format, required
//! fields)").
//!
//! A contract's `success_criteria` and `policy.safety_constraints` stay lists of strings on the wire, so every
//! implementation reads them as before. An entry that starts with `check:` is a predicate over the task's output;
//! any other entry is free-form text for humans and is not checked. The language (`docs/contracts.md`):
//!
//! ```text
//! check: words <= 300                          measures: words, chars, lines, bytes (of the text), items (array)
//! check: words(summary) between 50 and 300     ... of a field: a dotted path, numbers index arrays, $ the output
//! check: has revenue, summary.title            required fields
//! check: json                                  the output is structured (an object or an array), not text
//! check: schema {"type": "object", "required": ["revenue"]}     a JSON Schema (draft 2020-12)
//! check: confidence between 0 and 1            numeric ranges (also <, <=, ==, !=, >=, >)
//! check: status in [ok, partial, "needs review"]   enumerations
//! check: summary matches /^[A-Z]/              regular expressions (linear time: no backtracking)
//! check: not matches /(?i)password/            combinators: not, and, or, parentheses
//! check: has total and (total >= 0 or status == "refund")
//! ```
//!
//! Text is measured on the output itself when it is a string, else on its JSON text. Everything is bounded: a
//! predicate's length, its nesting, the compiled size of each regular expression, and the number of predicates in
//! one contract; a predicate over a bound, or one that does not parse, makes the contract invalid
//! ([`Error::InvalidCriterion`]), and a responder refuses such a contract before running anything.
//!
//! ```
//! use ldp_types::criteria::Criterion;
//! use serde_json::json;
//!
//! let check = Criterion::parse("check: has revenue and words(summary) <= 5")?.expect("a predicate");
//! assert!(check.evaluate(&json!({"revenue": 12, "summary": "up four percent"})).is_ok());
//! let failure = check.evaluate(&json!({"summary": "no figures"})).unwrap_err();
//! assert_eq!(failure, "missing field revenue");
//! assert!(Criterion::parse("include revenue figures")?.is_none()); // free-form: not checked
//! # Ok::<(), ldp_types::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::Value;

use crate::Error;

/// The prefix that makes a criterion or constraint machine-checkable.
pub const CHECK_PREFIX: &str = "check:";
/// Longest predicate text, in bytes.
pub const MAX_CRITERION_BYTES: usize = 4096;
/// Deepest nesting of `not`, `and`, `or` and parentheses.
pub const MAX_NESTING: usize = 32;
/// Most predicates in one contract (criteria and constraints together).
pub const MAX_CHECKS_PER_CONTRACT: usize = 64;
/// Compiled size limit of one regular expression, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Most parsed predicates kept for reuse (each at most [`MAX_CRITERION_BYTES`] of text).
const PARSED_CACHE_ENTRIES: usize = 256;

/// Predicates already parsed, by their text: a contract is usually the same on every task of a session, and
/// compiling its JSON Schemas and regular expressions again each time was most of a delegated hop's cost.
static PARSED: LazyLock<Mutex<HashMap<Box<str>, Arc<Expr>>>> = LazyLock::new(Mutex::default);

/// One machine-checkable predicate, parsed.
#[derive(Debug, Clone)]
pub struct Criterion {
    source: String,
    expr: Arc<Expr>,
}

impl PartialEq for Criterion {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Criterion {
    /// Parses one entry of `success_criteria` or `safety_constraints`: `Ok(None)` for free-form text, the predicate
    /// for a `check:` entry, an error for a `check:` entry that does not parse or exceeds a bound.
    pub fn parse(text: &str) -> Result<Option<Criterion>, Error> {
        let Some(body) = text.trim_start().strip_prefix(CHECK_PREFIX) else { return Ok(None) };
        let invalid = |reason: String| Error::InvalidCriterion { criterion: truncate(text), reason };
        if text.len() > MAX_CRITERION_BYTES {
            return Err(invalid(format!("longer than {MAX_CRITERION_BYTES} bytes")));
        }
        let source = text.trim();
        if let Some(expr) = PARSED.lock().unwrap_or_else(PoisonError::into_inner).get(source) {
            return Ok(Some(Criterion { source: source.to_owned(), expr: Arc::clone(expr) }));
        }
        let mut parser = Parser { text: body, pos: 0, depth: 0 };
        let expr = parser.or().map_err(invalid)?;
        parser.skip_space();
        if parser.pos < body.len() {
            return Err(invalid(format!("unexpected {:?} at column {}", parser.rest_preview(), parser.column())));
        }
        let expr = Arc::new(expr);
        let mut parsed = PARSED.lock().unwrap_or_else(PoisonError::into_inner);
        if parsed.len() >= PARSED_CACHE_ENTRIES {
            // Peers choose the texts, so no order of eviction is better than another; any entry makes room.
            if let Some(victim) = parsed.keys().next().cloned() {
                parsed.remove(&victim);
            }
        }
        parsed.insert(source.into(), Arc::clone(&expr));
        Ok(Some(Criterion { source: source.to_owned(), expr }))
    }

    /// The predicate's text, as written in the contract.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the predicate on a task's output: `Ok(())` when it holds, else why not.
    pub fn evaluate(&self, output: &Value) -> Result<(), String> {
        self.expr.eval(output)
    }
}

/// The machine-checkable parts of one contract.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckableCriteria {
    /// Predicates from `success_criteria`.
    pub success: Vec<Criterion>,
    /// Predicates from `policy.safety_constraints`.
    pub safety: Vec<Criterion>,
}

impl CheckableCriteria {
    /// Parses the `check:` entries of both lists (free-form entries are skipped).
    pub fn parse(success_criteria: &[String], safety_constraints: &[String]) -> Result<Self, Error> {
        let parse_all = |entries: &[String]| -> Result<Vec<Criterion>, Error> {
            entries.iter().filter_map(|e| Criterion::parse(e).transpose()).collect()
        };
        let criteria =
            CheckableCriteria { success: parse_all(success_criteria)?, safety: parse_all(safety_constraints)? };
        let count = criteria.success.len() + criteria.safety.len();
        if count > MAX_CHECKS_PER_CONTRACT {
            return Err(Error::InvalidCriterion {
                criterion: format!("{count} predicates"),
                reason: format!("a contract may carry at most {MAX_CHECKS_PER_CONTRACT}"),
            });
        }
        Ok(criteria)
    }

    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.success.is_empty() && self.safety.is_empty()
    }
}

fn truncate(text: &str) -> String {
    const SHOWN: usize = 120;
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// What a measure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    Words,
    Chars,
    Lines,
    Bytes,
    Items,
}

impl Measure {
    fn name(self) -> &'static str {
        match self {
            Measure::Words => "words",
            Measure::Chars => "chars",
            Measure::Lines => "lines",
            Measure::Bytes => "bytes",
            Measure::Items => "items",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
}

impl Cmp {
    fn holds(self, left: f64, right: f64) -> bool {
        match self {
            Cmp::Lt => left < right,
            Cmp::Le => left <= right,
            Cmp::Eq => left == right,
            Cmp::Ne => left != right,
            Cmp::Ge => left >= right,
            Cmp::Gt => left > right,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
        }
    }
}

/// A path into the output: `$` (empty) is the output itself.
#[derive(Debug, Clone, PartialEq)]
struct Path(Vec<String>);

impl Path {
    fn resolve<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.0.iter().try_fold(value, |v, segment| match v {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() { f.write_str("$") } else { f.write_str(&self.0.join(".")) }
    }
}

#[derive(Debug, Clone)]
enum Expr {
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Measure { measure: Measure, path: Path, cmp: Cmp, bound: f64 },
    Has(Vec<Path>),
    Structured,
    Schema(Box<jsonschema::Validator>),
    Number { path: Path, cmp: Cmp, bound: f64 },
    Between { path: Path, low: f64, high: f64 },
    Equals { path: Path, literal: Value, negated: bool },
    In { path: Path, literals: Vec<Value> },
    Matches { path: Path, regex: regex::Regex },
}

/// The text a measure or a regular expression reads: a string as itself, anything else as its JSON text.
fn text_of(value: &Value) -> std::borrow::Cow<'_, str> {
    match value {
        Value::String(s) => std::borrow::Cow::Borrowed(s),
        other => std::borrow::Cow::Owned(other.to_string()),
    }
}

impl Expr {
    fn eval(&self, output: &Value) -> Result<(), String> {
        let field = |path: &Path| path.resolve(output).ok_or_else(|| format!("missing field {path}"));
        match self {
            Expr::Not(inner) => match inner.eval(output) {
                Ok(()) => Err(format!("not ({}) does not hold", inner.describe())),
                Err(_) => Ok(()),
            },
            Expr::And(left, right) => left.eval(output).and_then(|()| right.eval(output)),
            Expr::Or(left, right) => left
                .eval(output)
                .or_else(|why_left| right.eval(output).map_err(|why_right| format!("{why_left}, and {why_right}"))),
            Expr::Measure { measure, path, cmp, bound } => {
                let value = field(path)?;
                let amount = match measure {
                    Measure::Words => text_of(value).split_whitespace().count(),
                    Measure::Chars => text_of(value).chars().count(),
                    Measure::Lines => text_of(value).lines().count(),
                    Measure::Bytes => text_of(value).len(),
                    Measure::Items => match value {
                        Value::Array(items) => items.len(),
                        Value::Object(map) => map.len(),
                        _ => return Err(format!("{path} is not an array or object")),
                    },
                } as f64;
                if cmp.holds(amount, *bound) {
                    Ok(())
                } else {
                    let of = if path.0.is_empty() { String::new() } else { format!(" of {path}") };
                    Err(format!("{} {amount}{of}, expected {} {bound}", measure.name(), cmp.symbol()))
                }
            }
            Expr::Has(paths) => paths.iter().try_for_each(|p| field(p).map(|_| ())),
            Expr::Structured => match output {
                Value::Object(_) | Value::Array(_) => Ok(()),
                _ => Err("the output is not structured (an object or an array)".to_owned()),
            },
            Expr::Schema(validator) => match validator.iter_errors(output).next() {
                None => Ok(()),
                Some(error) => Err(format!("schema: {} at {}", error, error.instance_path())),
            },
            Expr::Number { path, cmp, bound } => {
                let number = field(path)?.as_f64().ok_or_else(|| format!("{path} is not a number"))?;
                if cmp.holds(number, *bound) {
                    Ok(())
                } else {
                    Err(format!("{path} is {number}, expected {} {bound}", cmp.symbol()))
                }
            }
            Expr::Between { path, low, high } => {
                let number = field(path)?.as_f64().ok_or_else(|| format!("{path} is not a number"))?;
                if (*low..=*high).contains(&number) {
                    Ok(())
                } else {
                    Err(format!("{path} is {number}, expected between {low} and {high}"))
                }
            }
            Expr::Equals { path, literal, negated } => {
                let value = field(path)?;
                if (value == literal) != *negated {
                    Ok(())
                } else {
                    Err(format!("{path} is {value}, expected {} {literal}", if *negated { "!=" } else { "==" }))
                }
            }
            Expr::In { path, literals } => {
                let value = field(path)?;
                if literals.contains(value) {
                    Ok(())
                } else {
                    Err(format!("{path} is {value}, not one of the listed values"))
                }
            }
            Expr::Matches { path, regex } => {
                if regex.is_match(&text_of(field(path)?)) {
                    Ok(())
                } else {
                    Err(format!("{path} does not match /{}/", regex.as_str()))
                }
            }
        }
    }

    /// A short name for failure messages of `not`.
    fn describe(&self) -> String {
        match self {
            Expr::Matches { path, regex } => format!("{path} matches /{}/", regex.as_str()),
            Expr::Has(paths) => format!("has {}", paths.iter().map(Path::to_string).collect::<Vec<_>>().join(", ")),
            Expr::Structured => "json".to_owned(),
            _ => "the predicate".to_owned(),
        }
    }
}

/// A recursive-descent parser over the text after `check:`; errors are messages with a column.
struct Parser<'t> {
    text: &'t str,
    pos: usize,
    depth: usize,
}

type Parsed<T> = Result<T, String>;

impl<'t> Parser<'t> {
    fn rest(&self) -> &'t str {
        &self.text[self.pos..]
    }

    fn rest_preview(&self) -> String {
        truncate(self.rest().split_whitespace().next().unwrap_or(""))
    }

    fn column(&self) -> usize {
        CHECK_PREFIX.len() + self.text[..self.pos].chars().count() + 1
    }

    fn skip_space(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.text.len() - trimmed.len();
    }

    fn error<T>(&self, expected: &str) -> Parsed<T> {
        let found = self.rest_preview();
        let found = if found.is_empty() { "the end".to_owned() } else { format!("{found:?}") };
        Err(format!("expected {expected} at column {}, found {found}", self.column()))
    }

    /// Consumes `symbol` if it comes next.
    fn eat(&mut self, symbol: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(symbol) {
            self.pos += symbol.len();
            true
        } else {
            false
        }
    }

    /// Consumes the keyword `word` if the next word is exactly it.
    fn eat_word(&mut self, word: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        let next = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        if &rest[..next] == word {
            self.pos += next;
            true
        } else {
            false
        }
    }

    fn peek_word(&mut self) -> &'t str {
        self.skip_space();
        let rest = self.rest();
        &rest[..rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len())]
    }

    fn enter(&mut self) -> Parsed<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING { Err(format!("nested deeper than {MAX_NESTING} levels")) } else { Ok(()) }
    }

    fn or(&mut self) -> Parsed<Expr> {
        self.enter()?;
        let mut left = self.and()?;
        while self.eat_word("or") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn and(&mut self) -> Parsed<Expr> {
        let mut left = self.unary()?;
        while self.eat_word("and") {
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Parsed<Expr> {
        if self.eat_word("not") {
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if self.eat("(") {
            let inner = self.or()?;
            if !self.eat(")") {
                return self.error("')'");
            }
            return Ok(inner);
        }
        self.atom()
    }

    fn atom(&mut self) -> Parsed<Expr> {
        let word = self.peek_word();
        let measure = match word {
            "words" => Some(Measure::Words),
            "chars" => Some(Measure::Chars),
            "lines" => Some(Measure::Lines),
            "bytes" => Some(Measure::Bytes),
            "items" => Some(Measure::Items),
            _ => None,
        };
        if let Some(measure) = measure {
            self.eat_word(word);
            let path = if self.eat("(") {
                let path = self.path()?;
                if !self.eat(")") {
                    return self.error("')'");
                }
                path
            } else {
                Path(Vec::new())
            };
            return self.comparison_or_range(path, Some(measure));
        }
        match word {
            "has" => {
                self.eat_word("has");
                let mut paths = vec![self.path()?];
                while self.eat(",") {
                    paths.push(self.path()?);
                }
                Ok(Expr::Has(paths))
            }
            "json" => {
                self.eat_word("json");
                Ok(Expr::Structured)
            }
            "schema" => {
                self.eat_word("schema");
                self.skip_space();
                let mut values = serde_json::Deserializer::from_str(self.rest()).into_iter::<Value>();
                let schema = match values.next() {
                    Some(Ok(schema)) => schema,
                    Some(Err(e)) => return Err(format!("the schema is not JSON: {e}")),
                    None => return self.error("a JSON Schema"),
                };
                self.pos += values.byte_offset();
                let validator = jsonschema::options()
                    .with_pattern_options(
                        jsonschema::PatternOptions::regex()
                            .size_limit(REGEX_SIZE_LIMIT)
                            .dfa_size_limit(REGEX_SIZE_LIMIT),
                    )
                    .build(&schema)
                    .map_err(|e| format!("invalid JSON Schema: {e}"))?;
                Ok(Expr::Schema(Box::new(validator)))
            }
            "matches" => {
                self.eat_word("matches");
                Ok(Expr::Matches { path: Path(Vec::new()), regex: self.regex()? })
            }
            _ => {
                let path = self.path()?;
                if self.eat_word("matches") {
                    return Ok(Expr::Matches { path, regex: self.regex()? });
                }
                if self.eat_word("in") {
                    return Ok(Expr::In { path, literals: self.list()? });
                }
                self.comparison_or_range(path, None)
            }
        }
    }

    /// `cmp number`, `between a and b`, or (for a field) `== literal` / `!= literal`.
    fn comparison_or_range(&mut self, path: Path, measure: Option<Measure>) -> Parsed<Expr> {
        if self.eat_word("between") {
            let low = self.number()?;
            if !self.eat_word("and") {
                return self.error("'and'");
            }
            let high = self.number()?;
            return Ok(match measure {
                Some(measure) => Expr::And(
                    Box::new(Expr::Measure { measure, path: path.clone(), cmp: Cmp::Ge, bound: low }),
                    Box::new(Expr::Measure { measure, path, cmp: Cmp::Le, bound: high }),
                ),
                None => Expr::Between { path, low, high },
            });
        }
        let Some(cmp) = self.cmp() else {
            return self.error("a comparison (<, <=, ==, !=, >=, >), 'between', 'in' or 'matches'");
        };
        if measure.is_none() && matches!(cmp, Cmp::Eq | Cmp::Ne) {
            let literal = self.literal()?;
            if let Some(bound) = literal.as_f64() {
                return Ok(Expr::Number { path, cmp, bound });
            }
            return Ok(Expr::Equals { path, literal, negated: cmp == Cmp::Ne });
        }
        let bound = self.number()?;
        Ok(match measure {
            Some(measure) => Expr::Measure { measure, path, cmp, bound },
            None => Expr::Number { path, cmp, bound },
        })
    }

    fn cmp(&mut self) -> Option<Cmp> {
        for (symbol, cmp) in [
            ("<=", Cmp::Le),
            (">=", Cmp::Ge),
            ("==", Cmp::Eq),
            ("!=", Cmp::Ne),
            ("<", Cmp::Lt),
            (">", Cmp::Gt),
            ("=", Cmp::Eq),
        ] {
            if self.eat(symbol) {
                return Some(cmp);
            }
        }
        None
    }

    fn path(&mut self) -> Parsed<Path> {
        self.skip_space();
        if self.eat("$") {
            return Ok(Path(Vec::new()));
        }
        let rest = self.rest();
        let end = rest.find(|c: char| !(is_word_char(c) || c == '.')).unwrap_or(rest.len());
        let text = &rest[..end];
        if text.is_empty() || text.split('.').any(str::is_empty) {
            return self.error("a field path (e.g. summary.title, items.0, or $)");
        }
        self.pos += end;
        Ok(Path(text.split('.').map(str::to_owned).collect()))
    }

    fn number(&mut self) -> Parsed<f64> {
        match self.literal()? {
            Value::Number(n) => n.as_f64().ok_or_else(|| "a number out of range".to_owned()),
            _ => self.error("a number"),
        }
    }

    /// A JSON literal (string, number, true, false, null), or a bare word read as a string.
    fn literal(&mut self) -> Parsed<Value> {
        self.skip_space();
        let rest = self.rest();
        if rest.starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit()) {
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            return match values.next() {
                Some(Ok(value @ (Value::String(_) | Value::Number(_)))) => {
                    self.pos += values.byte_offset();
                    Ok(value)
                }
                _ => self.error("a number or a quoted string"),
            };
        }
        let word = self.peek_word();
        if word.is_empty() {
            return self.error("a value");
        }
        self.eat_word(word);
        Ok(match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            other => Value::String(other.to_owned()),
        })
    }

    fn list(&mut self) -> Parsed<Vec<Value>> {
        if !self.eat("[") {
            return self.error("'['");
        }
        let mut items = vec![self.literal()?];
        while self.eat(",") {
            items.push(self.literal()?);
        }
        if !self.eat("]") {
            return self.error("']' or ','");
        }
        Ok(items)
    }

    /// `/pattern/` with `\/` for a slash inside; compiled by the `regex` crate (finite automata: matching is linear
    /// in the text, so no pattern can make it backtrack), within a size limit.
    fn regex(&mut self) -> Parsed<regex::Regex> {
        if !self.eat("/") {
            return self.error("a regular expression between slashes");
        }
        let mut pattern = String::new();
        let mut chars = self.rest().char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("the regular expression has no closing '/'".to_owned()),
                Some((i, '/')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '/')) => pattern.push('/'),
                    Some((_, c)) => {
                        pattern.push('\\');
                        pattern.push(c);
                    }
                    None => return Err("the regular expression has no closing '/'".to_owned()),
                },
                Some((_, c)) => pattern.push(c),
            }
        };
        self.pos += end + 1;
        regex::RegexBuilder::new(&pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| format!("invalid regular expression: {e}"))
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(text: &str) -> Criterion {
        Criterion::parse(text).unwrap().unwrap()
    }

    fn holds(text: &str, output: &Value) -> bool {
        check(text).evaluate(output).is_ok()
    }

    #[test]
    fn free_form_text_is_not_a_predicate() {
        for text in ["<=300 words", "include revenue figures", "no speculative projections", ""] {
            assert_eq!(Criterion::parse(text).unwrap(), None, "{text}");
        }
    }

    #[test]
    fn measures_count_text_of_the_output_or_a_field() {
        let text = json!("one two three\nfour");
        assert!(holds("check: words == 4", &text));
        assert!(holds("check: lines == 2", &text));
        assert!(holds("check: chars == 18", &text));
        assert!(!holds("check: words <= 3", &text));
        let doc = json!({"summary": "a b c", "items": [1, 2, 3]});
        assert!(holds("check: words(summary) between 2 and 3", &doc));
        assert!(!holds("check: words(summary) between 4 and 9", &doc));
        assert!(holds("check: items(items) >= 3", &doc));
        assert_eq!(check("check: words(summary) < 3").evaluate(&doc).unwrap_err(), "words 3 of summary, expected < 3");
    }

    #[test]
    fn fields_numbers_enumerations_and_combinators() {
        let doc = json!({"revenue": 12.5, "status": "needs review", "rows": [{"id": 7}], "ok": true});
        assert!(holds("check: has revenue, rows.0.id", &doc));
        assert_eq!(check("check: has revenue, cost").evaluate(&doc).unwrap_err(), "missing field cost");
        assert!(holds("check: revenue between 0 and 100 and rows.0.id == 7", &doc));
        assert!(holds("check: status in [ok, \"needs review\"]", &doc));
        assert!(!holds("check: status in [ok, partial]", &doc));
        assert!(holds("check: status == \"needs review\" and ok == true", &doc));
        assert!(holds("check: status != ok", &doc));
        assert!(holds("check: has cost or revenue > 10", &doc));
        assert!(!holds("check: not (has revenue)", &doc));
        assert!(holds("check: json", &doc));
        assert!(!holds("check: json", &json!("text")));
    }

    #[test]
    fn a_repeated_predicate_is_compiled_once_and_the_cache_stays_bounded() {
        let text = r#"check: schema {"type": "object", "required": ["once"]}"#;
        let first = check(text);
        let again = check(&format!("  {text} "));
        assert!(Arc::ptr_eq(&first.expr, &again.expr), "the second parse reused the first's schema");
        assert!(again.evaluate(&json!({"once": 1})).is_ok());
        assert!(again.evaluate(&json!({})).is_err());
        for i in 0..PARSED_CACHE_ENTRIES * 2 {
            check(&format!("check: words <= {i}"));
        }
        assert!(PARSED.lock().unwrap_or_else(PoisonError::into_inner).len() <= PARSED_CACHE_ENTRIES);
    }

    #[test]
    fn regular_expressions_and_schemas() {
        let doc = json!({"summary": "Revenue rose", "code": "a/b"});
        assert!(holds("check: summary matches /^[A-Z]/", &doc));
        assert!(holds("check: code matches /a\\/b/", &doc));
        assert!(holds("check: not matches /(?i)password/", &doc));
        assert!(!holds("check: not matches /(?i)REVENUE/", &doc));
        let schema =
            r#"check: schema {"type": "object", "required": ["summary"], "properties": {"code": {"type": "number"}}}"#;
        let failure = check(schema).evaluate(&doc).unwrap_err();
        assert!(failure.starts_with("schema:") && failure.contains("/code"), "{failure}");
        assert!(holds(r#"check: schema {"type": "object"} and has summary"#, &doc));
    }

    #[test]
    fn hostile_predicates_are_refused_or_bounded() {
        // The classic catastrophic-backtracking pattern runs in linear time here.
        let evil = check("check: matches /^(a+)+$/");
        let text = Value::String(format!("{}!", "a".repeat(100_000)));
        assert!(evil.evaluate(&text).is_err());
        // Patterns whose automaton would be huge are refused when the contract is read.
        for text in [
            "check: matches /(a{1000}){1000}/".to_owned(),
            format!("check: {}has x{}", "(".repeat(40), ")".repeat(40)),
            format!("check: {}has x", "not ".repeat(40)),
            format!("check: has {}", "x".repeat(MAX_CRITERION_BYTES)),
            "check: words <= ".to_owned(),
            "check: has".to_owned(),
            "check: matches /unclosed".to_owned(),
            "check: schema {\"type\": 7}".to_owned(),
            "check: revenue between 1".to_owned(),
            "check: has a trailing".to_owned(),
        ] {
            assert!(matches!(Criterion::parse(&text), Err(Error::InvalidCriterion { .. })), "{text:.80}");
        }
        let many: Vec<String> = (0..=MAX_CHECKS_PER_CONTRACT).map(|i| format!("check: has f{i}")).collect();
        assert!(CheckableCriteria::parse(&many, &[]).is_err());
        assert!(CheckableCriteria::parse(&many[1..], &[]).is_ok());
    }
}
