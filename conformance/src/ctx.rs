//! The context a check runs in: the probe, what is known about the implementation, the findings and evidence of the
//! current check, and observations of every message received so far (schema, envelope fields, provenance, errors).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use ldp_types::signing::{self, SigningKey};
use ldp_types::{
    Body, DelegationContract, Envelope, ErrorCategory, Hello, IdentityCard, LdpError, PayloadMode, SessionClose,
    SessionConfig, SessionPropose, TaskSubmit,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalogue::Feature;
use crate::media::is_media_type;
use crate::probe::{Exchange, Outgoing, Probe, RawReply, StreamReply, TransportKind};
use crate::runner::Config;

mod observe;
mod protocol;

/// The kit's own delegate id, the `from` of everything it sends.
pub const KIT_DELEGATE_ID: &str = "ldp:delegate:conformance-kit";

/// The foreign trust domain the kit presents when it must look untrusted.
pub const UNTRUSTED_DOMAIN: &str = "conformance-untrusted.invalid";

/// The verdict of one check on one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// The requirement holds.
    Pass,
    /// The requirement is violated.
    Fail,
    /// The kit could not exercise the requirement; scored as a failure at the requirement's level.
    NotTestable,
    /// The requirement depends on a capability the implementation does not claim.
    Skipped,
    /// The kit could not exercise the requirement because another one it depends on failed (no session, no
    /// identity card): the failure is charged to that requirement, not repeated here. When the requirement named as
    /// the cause did not fail, the verdict becomes [`Status::NotTestable`].
    Blocked,
}

impl Status {
    /// The report name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::NotTestable => "NOT TESTABLE",
            Self::Skipped => "SKIPPED",
            Self::Blocked => "BLOCKED",
        }
    }

    /// Combines two verdicts on the same requirement: a failure anywhere wins, then not-testable, then blocked;
    /// skipped only when everything was skipped.
    pub fn combine(self, other: Status) -> Status {
        use Status::*;
        match (self, other) {
            (Fail, _) | (_, Fail) => Fail,
            (NotTestable, _) | (_, NotTestable) => NotTestable,
            (Blocked, _) | (_, Blocked) => Blocked,
            (Pass, _) | (_, Pass) => Pass,
            (Skipped, Skipped) => Skipped,
        }
    }
}

/// One verdict with its explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The requirement id.
    pub requirement: String,
    /// The verdict.
    pub status: Status,
    /// Why.
    pub detail: String,
    /// With [`Status::Blocked`]: the requirement whose failure kept the kit from exercising this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
}

/// What the implementation claims (from its card and its behaviour), and so which conditional requirements apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The claimed features, each with what showed the claim.
    pub features: std::collections::BTreeMap<Feature, String>,
}

impl Claims {
    /// Whether `f` is claimed.
    pub fn has(&self, f: Feature) -> bool {
        self.features.contains_key(&f)
    }

    pub(crate) fn claim(&mut self, f: Feature, why: impl Into<String>) {
        self.features.entry(f).or_insert_with(|| why.into());
    }
}

/// Compiled JSON-schema validators of `ldp-types`.
pub(crate) struct Validators {
    envelope: jsonschema::Validator,
    card: jsonschema::Validator,
    error: jsonschema::Validator,
    /// The strict RFC 2.1 card schema (formats validated), for LDP-IDENT-002.
    rfc_card: jsonschema::Validator,
}

impl Validators {
    pub fn new() -> Result<Self, String> {
        let build = |name: &str, schema: Value| {
            jsonschema::validator_for(&schema)
                .map_err(|e| format!("the {name} schema of ldp-types does not compile: {e}"))
        };
        Ok(Self {
            envelope: build("envelope", ldp_types::schema::envelope_schema())?,
            card: build("identity card", ldp_types::schema::identity_card_schema())?,
            error: build("error", ldp_types::schema::schema_for::<LdpError>())?,
            rfc_card: jsonschema::options()
                .should_validate_formats(true)
                .build(&crate::rfc_schema::identity_card())
                .map_err(|e| format!("the kit's RFC card schema does not compile: {e}"))?,
        })
    }

    fn violations(v: &jsonschema::Validator, instance: &Value, what: &str) -> Vec<String> {
        v.iter_errors(instance)
            .take(8)
            .map(|e| {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() { "/".to_owned() } else { path };
                format!("{what} at {path}: {e}")
            })
            .collect()
    }

    pub fn envelope(&self, v: &Value) -> Vec<String> {
        Self::violations(&self.envelope, v, "envelope")
    }

    pub fn card(&self, v: &Value) -> Vec<String> {
        Self::violations(&self.card, v, "identity card")
    }

    /// Violations of the strict RFC 2.1 card schema.
    pub fn rfc_card(&self, v: &Value) -> Vec<String> {
        Self::violations(&self.rfc_card, v, "identity card (RFC 2.1)")
    }

    pub fn error(&self, v: &Value) -> Vec<String> {
        Self::violations(&self.error, v, "error")
    }
}

/// A problem seen on the wire, attributed to the check that provoked it.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub check: &'static str,
    pub what: String,
    pub exchange: Exchange,
}

/// Observations across every exchange of one transport, read by the `wire.*` checks.
#[derive(Debug, Default)]
pub(crate) struct Observations {
    pub envelopes_seen: usize,
    pub message_ids: HashSet<String>,
    pub schema: Vec<Observed>,
    pub envelope_fields: Vec<Observed>,
    pub timestamps: Vec<Observed>,
    pub duplicate_ids: Vec<Observed>,
    pub non_uuid_ids: Vec<Observed>,
    pub addressing: Vec<Observed>,
    pub content_type: Vec<Observed>,
    pub json_replies: usize,
    pub results_seen: usize,
    pub provenance_missing: Vec<Observed>,
    pub provenance_attribution: Vec<Observed>,
    pub mode_used: Vec<Observed>,
    pub provenance_fields: Vec<Observed>,
    pub confidence_missing: Vec<Observed>,
    pub verification: Vec<Observed>,
    pub errors_seen: usize,
    pub untyped_errors: Vec<Observed>,
    /// Replies to a TASK_SUBMIT that name a task (TASK_UPDATE, TASK_RESULT, TASK_FAILED).
    pub task_replies: usize,
    pub task_ids: Vec<Observed>,
    pub reused_ids: Vec<Observed>,
    pub accepts_seen: usize,
    pub accept_ids: Vec<Observed>,
}

/// A typed error read from an answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TypedError {
    pub code: String,
    pub category: String,
}

impl TypedError {
    pub fn describe(&self) -> String {
        format!("{} ({})", self.code, self.category)
    }
}

/// An answer, decoded as far as it goes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer {
    pub reply: Option<RawReply>,
    pub transport_error: Option<String>,
    pub json: Option<Value>,
}

/// The answer of `POST /ldp/stream`: decoded as [`Answer`] (for a reply that is not a stream: a 404, a JSON error),
/// plus the events of the stream.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamAnswer {
    pub answer: Answer,
    pub events: Vec<ldp_transport_http::sse::SseEvent>,
    pub timed_out: bool,
}

/// Message types that report success; a responder sends them with a 2xx status only.
const SUCCESS_TYPES: [&str; 5] =
    ["CAPABILITY_MANIFEST", "SESSION_ACCEPT", "TASK_UPDATE", "TASK_RESULT", "SESSION_CLOSE"];

const CATEGORIES: [&str; 8] =
    ["identity", "capability", "policy", "runtime", "quality", "session", "transport", "security"];

/// Reads a typed error object (`code` and a known `category`).
fn typed_error_in(v: &Value) -> Option<TypedError> {
    let code = v.get("code")?.as_str().filter(|c| !c.is_empty())?;
    let category = v.get("category")?.as_str().filter(|c| CATEGORIES.contains(c))?;
    Some(TypedError { code: code.to_owned(), category: category.to_owned() })
}

impl Answer {
    pub fn status(&self) -> Option<u16> {
        self.reply.as_ref().and_then(|r| r.status)
    }

    /// The message type of the answer. An HTTP 5xx is a server failure whatever its body says (a TASK_RESULT
    /// under a 500 is not a success), so it has none; a success type under a non-2xx status is none either.
    pub fn body_type(&self) -> Option<&str> {
        let ty = self.json.as_ref()?.pointer("/body/type")?.as_str()?;
        match self.status() {
            Some(s) if s >= 500 => None,
            Some(s) if !(200..300).contains(&s) && SUCCESS_TYPES.contains(&ty) => None,
            _ => Some(ty),
        }
    }

    pub fn body(&self) -> Option<&Value> {
        self.json.as_ref()?.get("body")
    }

    pub fn is_type(&self, ty: &str) -> bool {
        self.body_type() == Some(ty)
    }

    pub fn close_code(&self) -> Option<u16> {
        self.reply.as_ref().and_then(|r| r.close_code)
    }

    pub fn no_reply(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| r.no_reply)
    }

    /// A typed error: in a TASK_FAILED or SESSION_REJECT body, an `error` member, or the object itself.
    pub fn typed_error(&self) -> Option<TypedError> {
        let v = self.json.as_ref()?;
        if let Some(e) = v.pointer("/body/error").and_then(typed_error_in) {
            return Some(e);
        }
        if v.get("body").is_none() {
            if let Some(e) = v.get("error").and_then(typed_error_in) {
                return Some(e);
            }
            return typed_error_in(v);
        }
        None
    }

    /// Whether this is a refusal: a typed error, a TASK_FAILED or SESSION_REJECT, or an HTTP 4xx.
    pub fn is_refusal(&self) -> bool {
        self.typed_error().is_some()
            || self.is_type("TASK_FAILED")
            || self.is_type("SESSION_REJECT")
            || self.status().is_some_and(|s| (400..500).contains(&s))
    }

    /// Whether the message was processed normally (a 2xx envelope that is not a refusal).
    pub fn is_processed(&self) -> bool {
        self.status().is_none_or(|s| (200..300).contains(&s))
            && self.body_type().is_some()
            && !self.is_type("TASK_FAILED")
            && !self.is_type("SESSION_REJECT")
    }

    /// An acknowledgement without an envelope: no reply frame, an empty 2xx, or a control object such as
    /// `{"accepted": true}`.
    pub fn is_ack(&self) -> bool {
        let ok_status = self.status().is_none_or(|s| (200..300).contains(&s));
        let empty = self.reply.as_ref().is_some_and(|r| r.body.is_empty() && r.close_code.is_none());
        let accepted = self.json.as_ref().and_then(|j| j.get("accepted")) == Some(&Value::Bool(true));
        self.no_reply() || (ok_status && (empty || accepted))
    }

    /// A one-line description for findings.
    pub fn describe(&self) -> String {
        if let Some(e) = &self.transport_error {
            return format!("no answer: {e}");
        }
        let Some(r) = &self.reply else { return "no answer".into() };
        if r.no_reply {
            return "no reply frame".into();
        }
        if let Some(code) = r.close_code {
            return format!("connection closed with code {code}");
        }
        let mut s = match r.status {
            Some(st) => format!("HTTP {st}"),
            None => "frame".to_owned(),
        };
        if let Some(ct) = &r.content_type {
            s.push_str(&format!(" {ct}"));
        }
        if let Some(ty) = self.json.as_ref().and_then(|j| j.pointer("/body/type")).and_then(Value::as_str) {
            s.push_str(&format!(" {ty}"));
        }
        if let Some(e) = self.typed_error() {
            s.push_str(&format!(" {}", e.describe()));
        } else if self.json.is_none() && !r.body.is_empty() {
            let text = String::from_utf8_lossy(&r.body[..r.body.len().min(80)]).into_owned();
            s.push_str(&format!(" {text:?}"));
        }
        s
    }

    /// A defined, typed refusal: a typed error over HTTP 2xx/4xx or a frame; on WebSocket also a close frame with a
    /// protocol close code. `Err` explains what was wrong.
    pub fn typed_refusal(&self) -> Result<TypedError, String> {
        if let Some(e) = &self.transport_error {
            return Err(format!("no answer ({e})"));
        }
        if let Some(code) = self.close_code() {
            return if [1002, 1003, 1007, 1008, 1009].contains(&code) {
                Ok(TypedError { code: format!("websocket close {code}"), category: "transport".into() })
            } else {
                Err(format!("connection closed with code {code}"))
            };
        }
        if let Some(st) = self.status()
            && st >= 500
        {
            return Err(format!("server error: {}", self.describe()));
        }
        self.typed_error().ok_or_else(|| format!("answer is not a typed error: {}", self.describe()))
    }
}

/// A session the kit established.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub id: String,
    pub mode: PayloadMode,
    pub fallback_chain: Option<Vec<PayloadMode>>,
}

/// Everything a check can use.
pub struct Ctx {
    pub(crate) cfg: Arc<Config>,
    pub(crate) probe: Probe,
    pub(crate) validators: Arc<Validators>,
    pub(crate) card: Option<IdentityCard>,
    pub(crate) claims: Claims,
    pub(crate) obs: Observations,
    pub(crate) check: &'static str,
    pub(crate) findings: Vec<Finding>,
    pub(crate) evidence: Vec<Exchange>,
    pub(crate) signing: Option<SigningKey>,
    /// Sign outgoing messages (checks turn it off to send unsigned ones).
    pub(crate) sign_outgoing: bool,
}

impl Ctx {
    pub(crate) fn new(cfg: Arc<Config>, probe: Probe, validators: Arc<Validators>) -> Self {
        let signing = cfg.signing.clone();
        let mut claims = Claims::default();
        if signing.is_some() {
            claims.claim(Feature::Signing, "the operator passed --sign");
        }
        Self {
            cfg,
            probe,
            validators,
            card: None,
            claims,
            obs: Observations::default(),
            check: "",
            findings: Vec::new(),
            evidence: Vec::new(),
            signing,
            sign_outgoing: true,
        }
    }

    /// The transport under test.
    pub fn transport(&self) -> TransportKind {
        self.probe.kind()
    }

    pub(crate) fn record(&mut self, requirement: &str, status: Status, detail: impl Into<String>) {
        self.findings.push(Finding {
            requirement: requirement.to_owned(),
            status,
            detail: detail.into(),
            blocked_by: None,
        });
    }

    /// Records that `requirement` could not be exercised because `cause` (a requirement another check judges)
    /// failed.
    pub(crate) fn blocked(&mut self, requirement: &str, cause: &str, detail: impl Into<String>) {
        self.findings.push(Finding {
            requirement: requirement.to_owned(),
            status: Status::Blocked,
            detail: format!("blocked by {cause}: {}", detail.into()),
            blocked_by: Some(cause.to_owned()),
        });
    }

    pub(crate) fn pass(&mut self, requirement: &str, detail: impl Into<String>) {
        self.record(requirement, Status::Pass, detail);
    }

    pub(crate) fn fail(&mut self, requirement: &str, detail: impl Into<String>) {
        self.record(requirement, Status::Fail, detail);
    }

    pub(crate) fn not_testable(&mut self, requirement: &str, detail: impl Into<String>) {
        self.record(requirement, Status::NotTestable, detail);
    }

    pub(crate) fn skip(&mut self, requirement: &str, detail: impl Into<String>) {
        self.record(requirement, Status::Skipped, detail);
    }

    /// The `to` of messages: the card's delegate id, else the URL.
    pub(crate) fn peer_id(&self) -> String {
        self.card.as_ref().map_or_else(|| self.probe.base().to_owned(), |c| c.delegate_id.to_string())
    }

    pub(crate) fn card_domain(&self) -> Option<String> {
        self.card.as_ref().map(|c| c.trust_domain.name.clone())
    }

    /// The skill used for tasks: the card's first capability, else `echo`.
    pub(crate) fn skill(&self) -> String {
        self.card.as_ref().and_then(|c| c.capabilities.first()).map_or_else(|| "echo".to_owned(), |c| c.name.clone())
    }

    pub(crate) fn card_modes(&self) -> Vec<PayloadMode> {
        self.card.as_ref().map_or_else(|| vec![PayloadMode::Text], |c| c.supported_payload_modes.clone())
    }

    /// A fresh envelope from the kit, signed when a key is configured and signing is on.
    pub(crate) fn envelope(&self, session_id: &str, body: impl Into<Body>, mode: PayloadMode) -> Envelope {
        let mut env = Envelope::new(
            uuid::Uuid::new_v4().to_string(),
            ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc()),
            session_id,
            KIT_DELEGATE_ID,
            self.peer_id(),
            body,
        )
        .with_payload_mode(mode);
        if self.sign_outgoing
            && let Some(key) = &self.signing
        {
            // Signing only fails for non-finite floats, which the kit never puts in a message.
            let _ = signing::sign(&mut env, key);
        }
        env
    }

    /// Sends an envelope and observes the answer.
    pub(crate) async fn send_envelope(&mut self, env: &Envelope) -> Answer {
        let bytes = match env.to_vec() {
            Ok(b) => b,
            Err(e) => {
                return Answer { transport_error: Some(format!("kit could not encode: {e}")), ..Answer::default() };
            }
        };
        let mut out = Outgoing::json(bytes);
        out.task_id = env.body.task_id().map(str::to_owned);
        out.reply_optional = matches!(env.body, Body::Attestation(_));
        out.message_id = Some(env.message_id.clone());
        self.send(out, Some(env)).await
    }

    /// Sends an envelope as the JSON object `value` (the envelope `request` altered after it was built or signed:
    /// a member removed, a signature spoiled, a field tampered with) and observes the answer as a reply to
    /// `request`.
    pub(crate) async fn send_value(&mut self, value: &Value, request: &Envelope) -> Answer {
        let mut out = Outgoing::json(serde_json::to_vec(value).unwrap_or_default());
        out.task_id = request.body.task_id().map(str::to_owned);
        out.reply_optional = matches!(request.body, Body::Attestation(_));
        out.message_id = Some(request.message_id.clone());
        self.send(out, Some(request)).await
    }

    /// Re-signs `env` after a change (when a key is configured and signing is on).
    pub(crate) fn resign(&self, env: &mut Envelope) {
        env.signature = None;
        env.signature_algorithm = None;
        if self.sign_outgoing
            && let Some(key) = &self.signing
        {
            let _ = signing::sign(env, key);
        }
    }

    /// Sends raw bytes and observes the answer.
    pub(crate) async fn send(&mut self, out: Outgoing, request: Option<&Envelope>) -> Answer {
        let (mut ex, result) = self.probe.send(out).await;
        let answer = match result {
            Ok(reply) => {
                let json = serde_json::from_slice::<Value>(&reply.body).ok();
                Answer { reply: Some(reply), transport_error: None, json }
            }
            Err(e) => Answer { reply: None, transport_error: Some(e), json: None },
        };
        self.observe(&mut ex, &answer, request);
        self.evidence.push(ex);
        answer
    }

    /// Posts an envelope to `/ldp/stream` (HTTP only) and observes every envelope the event stream carries, as
    /// any other reply: schemas, fields, provenance.
    pub(crate) async fn send_stream(&mut self, env: &Envelope) -> StreamAnswer {
        let token = self.cfg.token.clone();
        self.send_stream_as(env, token).await
    }

    /// [`Ctx::send_stream`] with `token` as the bearer token (`None`: none).
    pub(crate) async fn send_stream_as(&mut self, env: &Envelope, token: Option<String>) -> StreamAnswer {
        let bytes = match env.to_vec() {
            Ok(b) => b,
            Err(e) => {
                let answer =
                    Answer { transport_error: Some(format!("kit could not encode: {e}")), ..Answer::default() };
                return StreamAnswer { answer, ..StreamAnswer::default() };
            }
        };
        let (mut ex, result) = self.probe.post_stream_as(bytes, token).await;
        let streamed = match result {
            Ok(StreamReply { reply, events, timed_out }) => {
                let json = if events.is_empty() { serde_json::from_slice::<Value>(&reply.body).ok() } else { None };
                StreamAnswer { answer: Answer { reply: Some(reply), transport_error: None, json }, events, timed_out }
            }
            Err(e) => {
                StreamAnswer { answer: Answer { transport_error: Some(e), ..Answer::default() }, ..Default::default() }
            }
        };
        let mut notes = Vec::new();
        for event in &streamed.events {
            if let Ok(json) = serde_json::from_str::<Value>(&event.data)
                && json.get("body").is_some_and(Value::is_object)
            {
                self.observe_envelope(&json, Some(env), &mut notes);
            }
        }
        for (kind, what) in notes {
            self.note(kind, what, &mut ex);
        }
        self.evidence.push(ex);
        streamed
    }

    /// The WebSocket upgrade with `token` (`None`: none), recorded; the status says what the server did (`101`:
    /// upgraded).
    pub(crate) async fn ws_upgrade(&mut self, token: Option<&str>) -> Result<u16, String> {
        let (ex, result) = self.probe.ws_upgrade(token).await;
        self.evidence.push(ex);
        result.map(|r| r.status.unwrap_or(0))
    }

    /// `GET path` over HTTP, recorded.
    pub(crate) async fn get(&mut self, path: &str) -> (Option<RawReply>, Result<(), String>, usize) {
        let (ex, result) = self.probe.get(path).await;
        self.evidence.push(ex);
        let index = self.evidence.len() - 1;
        match result {
            Ok(r) => (Some(r), Ok(()), index),
            Err(e) => (None, Err(e), index),
        }
    }
}

/// Why an error object is not a full typed `LdpError`, if it is not.
fn untyped(err: &Value) -> Option<String> {
    let Some(obj) = err.as_object() else {
        return Some(format!("error is {err}, not a typed LdpError object"));
    };
    let mut missing = Vec::new();
    if obj.get("code").and_then(Value::as_str).is_none_or(str::is_empty) {
        missing.push("code");
    }
    if !obj.get("category").and_then(Value::as_str).is_some_and(|c| CATEGORIES.contains(&c)) {
        missing.push("category (one of the paper's categories)");
    }
    if !obj.get("severity").and_then(Value::as_str).is_some_and(|s| ["warning", "error", "fatal"].contains(&s)) {
        missing.push("severity");
    }
    if !obj.get("retryable").is_some_and(Value::is_boolean) {
        missing.push("retryable");
    }
    (!missing.is_empty()).then(|| format!("error {err} lacks {}", missing.join(", ")))
}

/// The session a SESSION_ACCEPT establishes.
pub(crate) fn session_from(answer: &Answer) -> Result<Session, String> {
    if !answer.is_type("SESSION_ACCEPT") {
        return Err(format!("SESSION_PROPOSE was not accepted: {}", answer.describe()));
    }
    let body = answer.body().cloned().unwrap_or(Value::Null);
    let id = body
        .get("session_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| answer.json.as_ref()?.get("session_id")?.as_str().filter(|s| !s.is_empty()))
        .ok_or("SESSION_ACCEPT carries no session_id")?
        .to_owned();
    let mode = body
        .get("negotiated_mode")
        .and_then(|m| serde_json::from_value::<PayloadMode>(m.clone()).ok())
        .ok_or("SESSION_ACCEPT carries no valid negotiated_mode")?;
    let fallback_chain =
        body.get("fallback_chain").filter(|v| !v.is_null()).and_then(|v| serde_json::from_value(v.clone()).ok());
    Ok(Session { id, mode, fallback_chain })
}

/// Whether the category of a typed error is one of `expected`.
pub(crate) fn category_in(e: &TypedError, expected: &[ErrorCategory]) -> bool {
    expected.iter().any(|c| c.as_str() == e.category)
}

/// Every distinct check named in a list of observations, for details.
pub(crate) fn summarise(list: &[Observed]) -> String {
    let mut seen = BTreeSet::new();
    let mut parts = Vec::new();
    for o in list {
        if seen.insert(o.what.clone()) && parts.len() < 5 {
            parts.push(format!("{} (during {})", o.what, o.check));
        }
    }
    let more = seen.len().saturating_sub(parts.len());
    let mut s = parts.join("; ");
    if more > 0 {
        s.push_str(&format!("; and {more} more"));
    }
    s
}
