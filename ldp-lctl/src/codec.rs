//! Reading and writing LCTL documents.
//!
//! Text is first parsed into an order-preserving [`Value`] tree by serde-saphyr, then decoded
//! by hand. Decoding by hand (rather than `#[derive(Deserialize)]`) is what lets every error
//! name its path, e.g. `facts.F2.confidence: expected 0.0-1.0`, and lets unknown keys be
//! collected without serde's buffered `flatten`.

use crate::model::{
    AckStatus, Analysis, Chain, ChainStatus, EndpointKeys, Fact, FactId, FactRegistry, Handoff, LCTL_VERSION, LctlAck,
    LctlDocument, Purpose, TraceStep,
};
use crate::{Confidence, LctlError, Mapping, Value};

/// Parses one YAML document in the full or the minimal LCTL format.
pub fn parse(yaml: &str) -> Result<LctlDocument, LctlError> {
    LctlDocument::from_value(parse_yaml_value(yaml)?)
}

/// Parses YAML text into a [`Value`] tree without interpreting it.
pub fn parse_yaml_value(yaml: &str) -> Result<Value, LctlError> {
    // YAML 1.2 typing: `on`/`yes`/`y` stay text and `007` keeps its zeros, so agent names and
    // ids survive. Duplicate keys stay rejected (serde-saphyr's default).
    let options = serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
    };
    serde_saphyr::from_str_with_options::<Value>(yaml, options).map_err(|err| {
        let location = err.location();
        LctlError::Syntax {
            message: first_line(&err.to_string()),
            line: location.map(|l| l.line()),
            column: location.map(|l| l.column()),
        }
    })
}

// serde-saphyr renders a source snippet under the message; callers print the location themselves.
fn first_line(rendered: &str) -> String {
    rendered.lines().next().unwrap_or_default().trim().to_owned()
}

pub(crate) fn value_to_yaml(value: &Value) -> Result<String, LctlError> {
    serde_saphyr::to_string(value).map_err(|err| LctlError::Serialize(err.to_string()))
}

impl LctlDocument {
    /// Parses YAML text (see [`parse`]).
    pub fn from_yaml(yaml: &str) -> Result<Self, LctlError> {
        parse(yaml)
    }

    /// Writes the document as YAML in the full format (known keys first, then unknown keys).
    pub fn to_yaml(&self) -> Result<String, LctlError> {
        value_to_yaml(&self.to_value())
    }

    /// Decodes a document from a value tree (YAML- or JSON-sourced).
    pub fn from_value(value: Value) -> Result<Self, LctlError> {
        let mut root = Fields::take(value, "")?;
        let version = root.required("lctl")?;
        check_version(&version)?;
        let purpose = root.optional_string("purpose")?.map(|p| Purpose::from_wire(&p));
        let chain = match root.optional("chain") {
            Some(value) => Some(decode_chain(value, "chain")?),
            None => None,
        };
        let trace = root.list("trace", decode_trace_step)?;
        let facts = match root.optional("facts") {
            Some(value) => decode_facts(value, "facts")?,
            None => FactRegistry::new(),
        };
        let handoff = match root.optional("handoff") {
            Some(value) => Some(decode_handoff(value, "handoff")?),
            None => None,
        };
        let instruction = root.optional_string("instruction")?;
        let analysis = match root.optional("analysis") {
            Some(value) => Some(decode_analysis(value, "analysis")?),
            None => None,
        };
        let ack = match root.optional("lctl_ack") {
            Some(value) => Some(decode_ack(value, "lctl_ack")?),
            None => None,
        };
        Ok(LctlDocument { purpose, chain, trace, facts, handoff, instruction, analysis, ack, extra: root.rest() })
    }

    /// Encodes the document as a value tree, ready for YAML or JSON.
    pub fn to_value(&self) -> Value {
        let mut out = Mapping::new();
        out.insert("lctl", Value::String(LCTL_VERSION.to_owned()));
        put_string(&mut out, "purpose", self.purpose.as_ref().map(Purpose::as_str));
        if let Some(chain) = &self.chain {
            out.insert("chain", encode_chain(chain));
        }
        if !self.trace.is_empty() {
            out.insert("trace", Value::Sequence(self.trace.iter().map(encode_trace_step).collect()));
        }
        if !self.facts.is_empty() {
            let facts = self.facts.iter().map(|(id, fact)| (id.as_str().to_owned(), encode_fact(fact))).collect();
            out.insert("facts", Value::Mapping(facts));
        }
        if let Some(handoff) = &self.handoff {
            out.insert("handoff", encode_handoff(handoff));
        }
        put_string(&mut out, "instruction", self.instruction.as_deref());
        if let Some(analysis) = &self.analysis {
            out.insert("analysis", encode_analysis(analysis));
        }
        if let Some(ack) = &self.ack {
            out.insert("lctl_ack", encode_ack(ack));
        }
        out.extend(&self.extra);
        Value::Mapping(out)
    }
}

impl LctlAck {
    /// Parses a standalone `lctl_ack:` block (the receiving protocol's step 4).
    pub fn from_yaml(yaml: &str) -> Result<Self, LctlError> {
        let mut root = Fields::take(parse_yaml_value(yaml)?, "")?;
        let ack = decode_ack(root.required("lctl_ack")?, "lctl_ack")?;
        Ok(ack)
    }

    /// Writes the ack as a standalone `lctl_ack:` block.
    pub fn to_yaml(&self) -> Result<String, LctlError> {
        let mut root = Mapping::new();
        root.insert("lctl_ack", encode_ack(self));
        value_to_yaml(&Value::Mapping(root))
    }
}

fn check_version(version: &Value) -> Result<(), LctlError> {
    // An unquoted `lctl: 3.0` reads as a number; accept it rather than punish YAML's typing.
    let matches = match version {
        Value::String(text) => text == LCTL_VERSION,
        Value::Float(number) => *number == 3.0,
        Value::Integer(number) => *number == 3,
        _ => false,
    };
    if matches { Ok(()) } else { Err(LctlError::schema("lctl", format!("\"{LCTL_VERSION}\""))) }
}

fn decode_chain(value: Value, path: &str) -> Result<Chain, LctlError> {
    let mut fields = Fields::take(value, path)?;
    let id = fields.required_string("id")?;
    let step = fields.optional_u32("step")?;
    let (source, source_key) = fields.either_string("source", "from")?;
    let (target, target_key) = fields.either_string("target", "to")?;
    let short_form = source_key == Some("from") || target_key == Some("to");
    let long_form = source_key == Some("source") || target_key == Some("target");
    if short_form && long_form {
        return Err(LctlError::schema(path, "either source/target or from/to, not a mix"));
    }
    Ok(Chain {
        id,
        step,
        source,
        target,
        status: fields.optional_string("status")?.map(|s| ChainStatus::from_wire(&s)),
        failed_at_step: fields.optional_u32("failed_at_step")?,
        parallel_merge: fields.optional_bool("parallel_merge")?,
        endpoint_keys: if short_form { EndpointKeys::FromTo } else { EndpointKeys::SourceTarget },
        extra: fields.rest(),
    })
}

fn encode_chain(chain: &Chain) -> Value {
    let mut out = Mapping::new();
    out.insert("id", Value::String(chain.id.clone()));
    if let Some(step) = chain.step {
        out.insert("step", Value::Integer(i64::from(step)));
    }
    let (source_key, target_key) = match chain.endpoint_keys {
        EndpointKeys::SourceTarget => ("source", "target"),
        EndpointKeys::FromTo => ("from", "to"),
    };
    put_string(&mut out, source_key, chain.source.as_deref());
    put_string(&mut out, target_key, chain.target.as_deref());
    put_string(&mut out, "status", chain.status.as_ref().map(ChainStatus::as_str));
    if let Some(step) = chain.failed_at_step {
        out.insert("failed_at_step", Value::Integer(i64::from(step)));
    }
    if let Some(merge) = chain.parallel_merge {
        out.insert("parallel_merge", Value::Bool(merge));
    }
    out.extend(&chain.extra);
    Value::Mapping(out)
}

fn decode_trace_step(value: Value, path: &str) -> Result<TraceStep, LctlError> {
    let mut fields = Fields::take(value, path)?;
    Ok(TraceStep {
        step: fields.required_u32("step")?,
        agent: fields.required_string("agent")?,
        action: fields.optional_string("action")?,
        confidence: fields.optional_confidence("confidence")?,
        facts_added: fields.list("facts_added", decode_fact_id)?,
        facts_modified: fields.list("facts_modified", decode_fact_id)?,
        facts_at_failure: fields.list("facts_at_failure", decode_fact_id)?,
        parallel: fields.optional_bool("parallel")?.unwrap_or(false),
        duration_ms: fields.optional_u64("duration_ms")?,
        error: fields.optional_string("error")?,
        extra: fields.rest(),
    })
}

fn encode_trace_step(step: &TraceStep) -> Value {
    let mut out = Mapping::new();
    out.insert("step", Value::Integer(i64::from(step.step)));
    out.insert("agent", Value::String(step.agent.clone()));
    if step.parallel {
        out.insert("parallel", Value::Bool(true));
    }
    put_string(&mut out, "action", step.action.as_deref());
    if let Some(confidence) = step.confidence {
        out.insert("confidence", Value::Float(confidence.value()));
    }
    put_ids(&mut out, "facts_added", &step.facts_added);
    put_ids(&mut out, "facts_modified", &step.facts_modified);
    put_string(&mut out, "error", step.error.as_deref());
    put_ids(&mut out, "facts_at_failure", &step.facts_at_failure);
    if let Some(duration) = step.duration_ms {
        out.insert("duration_ms", u64_value(duration));
    }
    out.extend(&step.extra);
    Value::Mapping(out)
}

fn decode_facts(value: Value, path: &str) -> Result<FactRegistry, LctlError> {
    let fields = Fields::take(value, path)?;
    let mut registry = FactRegistry::new();
    for (key, value) in fields.rest() {
        let fact_path = format!("{path}.{key}");
        let id = FactId::new(key.clone()).map_err(|_| LctlError::schema(&fact_path, "a fact id such as F1"))?;
        registry.insert(id, decode_fact(value, &fact_path)?);
    }
    Ok(registry)
}

fn decode_fact(value: Value, path: &str) -> Result<Fact, LctlError> {
    let mut fields = Fields::take(value, path)?;
    let text = fields.required_string("text")?;
    let confidence = fields
        .optional_confidence("confidence")?
        .ok_or_else(|| LctlError::schema(&fields.child("confidence"), "0.0-1.0 (missing)"))?;
    Ok(Fact {
        text,
        confidence,
        source: fields.optional_string("source")?,
        step: fields.optional_u32("step")?,
        note: fields.optional_string("note")?,
        extra: fields.rest(),
    })
}

fn encode_fact(fact: &Fact) -> Value {
    let mut out = Mapping::new();
    out.insert("text", Value::String(fact.text.clone()));
    out.insert("confidence", Value::Float(fact.confidence.value()));
    put_string(&mut out, "source", fact.source.as_deref());
    if let Some(step) = fact.step {
        out.insert("step", Value::Integer(i64::from(step)));
    }
    put_string(&mut out, "note", fact.note.as_deref());
    out.extend(&fact.extra);
    Value::Mapping(out)
}

fn decode_handoff(value: Value, path: &str) -> Result<Handoff, LctlError> {
    let mut fields = Fields::take(value, path)?;
    Ok(Handoff {
        critical_facts: fields.list("critical_facts", decode_fact_id)?,
        context_facts: fields.list("context_facts", decode_fact_id)?,
        warnings: fields.list("warnings", decode_string)?,
        extra: fields.rest(),
    })
}

fn encode_handoff(handoff: &Handoff) -> Value {
    let mut out = Mapping::new();
    put_ids(&mut out, "critical_facts", &handoff.critical_facts);
    put_ids(&mut out, "context_facts", &handoff.context_facts);
    if !handoff.warnings.is_empty() {
        let warnings = handoff.warnings.iter().cloned().map(Value::String).collect();
        out.insert("warnings", Value::Sequence(warnings));
    }
    out.extend(&handoff.extra);
    Value::Mapping(out)
}

fn decode_analysis(value: Value, path: &str) -> Result<Analysis, LctlError> {
    let mut fields = Fields::take(value, path)?;
    Ok(Analysis {
        root_cause: fields.optional_string("root_cause")?,
        confidence_in_analysis: fields.optional_confidence("confidence_in_analysis")?,
        recommendation: fields.optional_string("recommendation")?,
        extra: fields.rest(),
    })
}

fn encode_analysis(analysis: &Analysis) -> Value {
    let mut out = Mapping::new();
    put_string(&mut out, "root_cause", analysis.root_cause.as_deref());
    if let Some(confidence) = analysis.confidence_in_analysis {
        out.insert("confidence_in_analysis", Value::Float(confidence.value()));
    }
    put_string(&mut out, "recommendation", analysis.recommendation.as_deref());
    out.extend(&analysis.extra);
    Value::Mapping(out)
}

fn decode_ack(value: Value, path: &str) -> Result<LctlAck, LctlError> {
    let mut fields = Fields::take(value, path)?;
    Ok(LctlAck {
        chain_id: fields.required_string("chain_id")?,
        step: fields.required_u32("step")?,
        agent: fields.required_string("agent")?,
        status: AckStatus::from_wire(&fields.required_string("status")?),
        facts_loaded: fields.list("facts_loaded", decode_fact_id)?,
        confidence_concerns: fields.list("confidence_concerns", decode_fact_id)?,
        extra: fields.rest(),
    })
}

fn encode_ack(ack: &LctlAck) -> Value {
    let mut out = Mapping::new();
    out.insert("chain_id", Value::String(ack.chain_id.clone()));
    out.insert("step", Value::Integer(i64::from(ack.step)));
    out.insert("agent", Value::String(ack.agent.clone()));
    out.insert("status", Value::String(ack.status.as_str().to_owned()));
    // Both lists are written even when empty: an empty concern list is the ack's good news.
    out.insert("facts_loaded", ids_value(&ack.facts_loaded));
    out.insert("confidence_concerns", ids_value(&ack.confidence_concerns));
    out.extend(&ack.extra);
    Value::Mapping(out)
}

fn decode_fact_id(value: Value, path: &str) -> Result<FactId, LctlError> {
    let text = scalar_text(value).ok_or_else(|| LctlError::schema(path, "a fact id such as F1"))?;
    FactId::new(text).map_err(|_| LctlError::schema(path, "a fact id such as F1"))
}

fn decode_string(value: Value, path: &str) -> Result<String, LctlError> {
    scalar_text(value).ok_or_else(|| LctlError::schema(path, "a string"))
}

/// Free text may arrive as a YAML number or boolean (`id: 2024`); it is still text.
fn scalar_text(value: Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text),
        Value::Integer(number) => Some(number.to_string()),
        Value::Float(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Null | Value::Sequence(_) | Value::Mapping(_) => None,
    }
}

fn put_string(out: &mut Mapping, key: &str, value: Option<&str>) {
    if let Some(text) = value {
        out.insert(key, Value::String(text.to_owned()));
    }
}

fn put_ids(out: &mut Mapping, key: &str, ids: &[FactId]) {
    if !ids.is_empty() {
        out.insert(key, ids_value(ids));
    }
}

fn ids_value(ids: &[FactId]) -> Value {
    Value::Sequence(ids.iter().map(|id| Value::String(id.as_str().to_owned())).collect())
}

fn u64_value(number: u64) -> Value {
    i64::try_from(number).map_or(Value::Float(number as f64), Value::Integer)
}

/// A mapping being decoded: known keys are taken out one by one and whatever is left over
/// becomes the block's unknown keys.
struct Fields {
    path: String,
    map: Mapping,
}

impl Fields {
    fn take(value: Value, path: &str) -> Result<Self, LctlError> {
        match value {
            Value::Mapping(map) => Ok(Fields { path: path.to_owned(), map }),
            other => Err(LctlError::schema(path, format!("a mapping, found {}", other.kind()))),
        }
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_owned() } else { format!("{}.{key}", self.path) }
    }

    /// Present and not null.
    fn optional(&mut self, key: &str) -> Option<Value> {
        match self.map.remove(key) {
            None | Some(Value::Null) => None,
            Some(value) => Some(value),
        }
    }

    fn required(&mut self, key: &str) -> Result<Value, LctlError> {
        self.optional(key).ok_or_else(|| LctlError::schema(&self.child(key), "a value (missing)"))
    }

    fn optional_string(&mut self, key: &str) -> Result<Option<String>, LctlError> {
        match self.optional(key) {
            None => Ok(None),
            Some(value) => decode_string(value, &self.child(key)).map(Some),
        }
    }

    fn required_string(&mut self, key: &str) -> Result<String, LctlError> {
        self.optional_string(key)?.ok_or_else(|| LctlError::schema(&self.child(key), "a string (missing)"))
    }

    fn either_string(
        &mut self,
        long: &'static str,
        short: &'static str,
    ) -> Result<(Option<String>, Option<&'static str>), LctlError> {
        let long_value = self.optional_string(long)?;
        let short_value = self.optional_string(short)?;
        match (long_value, short_value) {
            (Some(_), Some(_)) => Err(LctlError::schema(&self.child(short), format!("only one of {long} and {short}"))),
            (Some(value), None) => Ok((Some(value), Some(long))),
            (None, Some(value)) => Ok((Some(value), Some(short))),
            (None, None) => Ok((None, None)),
        }
    }

    fn optional_u64(&mut self, key: &str) -> Result<Option<u64>, LctlError> {
        match self.optional(key) {
            None => Ok(None),
            Some(Value::Integer(number)) if number >= 0 => Ok(u64::try_from(number).ok()),
            Some(_) => Err(LctlError::schema(&self.child(key), "a non-negative integer")),
        }
    }

    fn optional_u32(&mut self, key: &str) -> Result<Option<u32>, LctlError> {
        match self.optional(key) {
            None => Ok(None),
            Some(Value::Integer(number)) => u32::try_from(number)
                .map(Some)
                .map_err(|_| LctlError::schema(&self.child(key), "a non-negative step number")),
            Some(_) => Err(LctlError::schema(&self.child(key), "a non-negative step number")),
        }
    }

    fn required_u32(&mut self, key: &str) -> Result<u32, LctlError> {
        self.optional_u32(key)?.ok_or_else(|| LctlError::schema(&self.child(key), "a step number (missing)"))
    }

    fn optional_bool(&mut self, key: &str) -> Result<Option<bool>, LctlError> {
        match self.optional(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(flag)),
            Some(_) => Err(LctlError::schema(&self.child(key), "true or false")),
        }
    }

    fn optional_confidence(&mut self, key: &str) -> Result<Option<Confidence>, LctlError> {
        let number = match self.optional(key) {
            None => return Ok(None),
            Some(Value::Float(number)) => number,
            Some(Value::Integer(number)) => number as f64,
            Some(_) => return Err(LctlError::schema(&self.child(key), "0.0-1.0")),
        };
        Confidence::new(number).map(Some).map_err(|_| LctlError::schema(&self.child(key), "0.0-1.0"))
    }

    fn list<T>(
        &mut self,
        key: &str,
        decode: impl Fn(Value, &str) -> Result<T, LctlError>,
    ) -> Result<Vec<T>, LctlError> {
        let path = self.child(key);
        match self.optional(key) {
            None => Ok(Vec::new()),
            Some(Value::Sequence(items)) => {
                items.into_iter().enumerate().map(|(index, item)| decode(item, &format!("{path}[{index}]"))).collect()
            }
            Some(other) => Err(LctlError::schema(&path, format!("a list, found {}", other.kind()))),
        }
    }

    fn rest(self) -> Mapping {
        self.map
    }
}
