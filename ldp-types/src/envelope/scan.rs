//! The fast path of [`Envelope::from_json`]: a scanner for the envelope's and the body's own members.
//!
//! Why: most of an envelope is a dozen short members whose values are plain strings. Through serde each costs a
//! map-access round (separator, key parse into scratch, key match, `Option` visitor, value parse); here a member is
//! a scan to its closing quote and one copy. The contract and provenance records are read the same way. Everything
//! else (a string with escapes, evidence and lineage lists, an unknown member, the payload kept as raw text) is
//! handed to serde_json for exactly that value, so the typed decoding is serde's own.
//!
//! The scanner answers only when it is sure: on anything it does not handle (a member name with escapes, a value
//! nested deep enough to come near serde_json's recursion limit, a member name given twice, any error at all) it
//! gives up, and the caller decodes the whole message with the serde path, which checks the whole text first and
//! then produces the same value or the typed error. A property test checks that the two paths agree.
//!
//! Duplicate member names are found as the members go by: a bit per known member of the envelope, the body and the
//! records, the map of kept members for unknown ones (or a short list, for records that drop them), and the check
//! of `crate::check` for every value handed to serde that can hold an object, payloads included.

use std::sync::Arc;

use serde::Deserialize;

use super::{Body, BodyKey, BodySlots, Envelope, EnvelopeKey, TypeTag, insert_new};
use crate::check::{Checked, MAX_DEPTH};
use crate::contract::{Budget, ContractPolicy, DelegationContract, FailurePolicy};
use crate::identity::Object;
use crate::json::{escape_flags, word_at};
use crate::messages::{TaskResult, TaskSubmit};
use crate::payload::PayloadMode;
use crate::provenance::{EvidenceRef, LineageEntry, Provenance, VerificationStatus};
use crate::raw::RawJson;

/// Sub-values with at least this many `[` and `{` are left to the serde path: nested that deep inside the envelope
/// (which adds up to three levels), they could reach serde_json's limit of 128 there and not here. A value shorter
/// than twice this cannot nest that deep.
const MAX_NESTING: usize = 120;

/// Decodes `text`, or `None` to leave it to the serde path.
pub(super) fn decode(text: &str) -> Option<Envelope> {
    let mut scan = Scan { text, bytes: text.as_bytes(), pos: 0 };
    let envelope = scan.envelope()?;
    scan.ws();
    (scan.pos == scan.bytes.len()).then_some(envelope)
}

struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next significant byte, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// A string without escapes or control characters, borrowed; `None` (position unchanged) otherwise.
    fn plain_str(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let mut at = start;
        while at + 8 <= self.bytes.len() {
            let flags = escape_flags(word_at(self.bytes, at));
            if flags != 0 {
                // The first flagged byte ends the plain run: the closing quote, or an escape to leave to serde.
                at += flags.trailing_zeros() as usize / 8;
                break;
            }
            at += 8;
        }
        while let Some(&byte) = self.bytes.get(at) {
            match byte {
                b'"' => {
                    let s = self.text.get(start..at)?;
                    self.pos = at + 1;
                    return Some(s);
                }
                b'\\' | 0x00..=0x1f => return None,
                _ => at += 1,
            }
        }
        None
    }

    /// Any string value, owned.
    fn string(&mut self) -> Option<String> {
        match self.plain_str() {
            Some(s) => Some(s.to_owned()),
            None => self.value(),
        }
    }

    /// `null` or a string.
    fn opt_string(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'n' {
            return self.null().map(|()| None);
        }
        self.string().map(Some)
    }

    fn null(&mut self) -> Option<()> {
        let end = self.pos + 4;
        (self.bytes.get(self.pos..end)? == b"null").then(|| self.pos = end)
    }

    /// One value of any type, decoded by serde_json from where the scanner stands.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<T> {
        let (value, len) = self.value_unchecked()?;
        let span = self.bytes.get(self.pos..self.pos + len)?;
        if span.len() >= 2 * MAX_NESTING && memchr::memchr2_iter(b'[', b'{', span).nth(MAX_NESTING - 1).is_some() {
            return None;
        }
        // `T`'s decoder may take a repeated member name silently (the last wins in a `Value`, an unknown one is
        // skipped): whatever can hold an object is checked for them.
        if matches!(span.first(), Some(b'{' | b'[')) {
            let text = self.text.get(self.pos..self.pos + len)?;
            let mut de = serde_json::Deserializer::from_str(text);
            Checked::deserialize(&mut de).ok()?.duplicate.is_none().then_some(())?;
        }
        self.pos += len;
        Some(value)
    }

    /// A value that is not kept (an unknown member of a record), checked as any other.
    fn skip(&mut self) -> Option<()> {
        let (checked, len) = self.value_unchecked::<Checked>()?;
        (checked.duplicate.is_none() && checked.depth < MAX_NESTING).then(|| self.pos += len)
    }

    /// A payload (`input`, `output`): kept as text, checked in the same pass that finds its end. It sits two levels
    /// down (envelope, body), and the whole message must nest within serde_json's limit, as on the serde path.
    fn raw(&mut self) -> Option<Option<RawJson>> {
        let (checked, len) = self.value_unchecked::<Checked>()?;
        if checked.duplicate.is_some() || checked.depth + 2 > MAX_DEPTH {
            return None;
        }
        let text = self.text.get(self.pos..self.pos + len)?;
        self.pos += len;
        Some((text != "null").then(|| RawJson::from_checked(text)))
    }

    /// A value and its length in bytes, without moving past it.
    fn value_unchecked<T: Deserialize<'a>>(&mut self) -> Option<(T, usize)> {
        self.ws();
        let rest = self.text.get(self.pos..)?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        let value = values.next()?.ok()?;
        Some((value, values.byte_offset()))
    }

    /// Calls `member` for each member of the object that starts here, with the member name.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            let name = self.plain_str()?;
            self.eat(b':')?;
            member(self, name)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn envelope(&mut self) -> Option<Envelope> {
        let (mut message_id, mut session_id, mut from, mut to, mut body) = (None, None, None, None, None);
        let (mut payload_mode, mut timestamp, mut provenance) = (None, None, None);
        let (mut signature, mut signature_algorithm, mut nonce) = (None, None, None);
        let mut extensions = serde_json::Map::new();
        let mut seen = 0;
        self.object(|scan, name| {
            let key = EnvelopeKey::from_str(name);
            Self::first_time(&mut seen, key.as_ref().map_or(0, EnvelopeKey::bit))?;
            match key {
                Some(EnvelopeKey::MessageId) => message_id = Some(scan.string()?),
                Some(EnvelopeKey::SessionId) => session_id = scan.opt_string()?,
                Some(EnvelopeKey::From) => from = Some(scan.string()?),
                Some(EnvelopeKey::To) => to = Some(scan.string()?),
                Some(EnvelopeKey::Body) => body = Some(scan.body()?),
                Some(EnvelopeKey::PayloadMode) => {
                    payload_mode = match scan.plain_str() {
                        Some(name) => Some(name.parse::<PayloadMode>().ok()?),
                        None => scan.value()?,
                    }
                }
                Some(EnvelopeKey::Timestamp) => timestamp = Some(scan.string()?),
                Some(EnvelopeKey::Provenance) => provenance = scan.opt_provenance()?,
                Some(EnvelopeKey::Signature) => signature = scan.opt_string()?,
                Some(EnvelopeKey::SignatureAlgorithm) => signature_algorithm = scan.opt_string()?,
                Some(EnvelopeKey::Nonce) => nonce = scan.opt_string()?,
                Some(EnvelopeKey::Other(_)) | None => {
                    insert_new(&mut extensions, name.to_owned(), scan.value()?).is_none().then_some(())?;
                }
            }
            Some(())
        })?;
        Some(Envelope {
            message_id: message_id?,
            session_id: session_id.unwrap_or_default(),
            from: from?,
            to: to?,
            body: body?,
            payload_mode: payload_mode.unwrap_or(PayloadMode::Text),
            timestamp: timestamp?,
            provenance,
            signature,
            signature_algorithm,
            nonce,
            extensions,
        })
    }

    fn body(&mut self) -> Option<Body> {
        let start = self.pos;
        if let Some(body) = self.task_body() {
            return Some(body);
        }
        self.pos = start;
        self.any_body()
    }

    /// The common case read straight into its type: a TASK_SUBMIT or TASK_RESULT (its `type` anywhere) whose members
    /// are its own or unknown ones. A non-null member that belongs to another body type is read typed and kept in
    /// `extra` by [`Self::any_body`], as the serde decoder does; this gives way to it.
    fn task_body(&mut self) -> Option<Body> {
        let (mut ty, mut task_id, mut skill, mut input, mut output) = (None, None, None, None, None);
        let (mut contract, mut provenance) = (None, None);
        let mut extra = serde_json::Map::new();
        let mut seen = 0;
        self.object(|scan, name| {
            let key = BodyKey::from_str(name);
            Self::first_time(&mut seen, key.as_ref().map_or(0, BodyKey::bit))?;
            match key {
                Some(BodyKey::Type) => ty = Some(scan.plain_str()?),
                Some(BodyKey::TaskId) => task_id = scan.opt_string()?,
                Some(BodyKey::Skill) => skill = scan.opt_string()?,
                Some(BodyKey::Input) => input = scan.raw()?,
                Some(BodyKey::Output) => output = scan.raw()?,
                Some(BodyKey::Contract) => contract = scan.contract()?,
                Some(BodyKey::Provenance) => provenance = scan.opt_provenance()?,
                Some(_) => return None,
                None => {
                    insert_new(&mut extra, name.to_owned(), scan.value()?).is_none().then_some(())?;
                }
            }
            Some(())
        })?;
        match ty? {
            "TASK_SUBMIT" if output.is_none() && provenance.is_none() => Some(Body::TaskSubmit(TaskSubmit {
                task_id: task_id?,
                skill: skill?,
                input: input.unwrap_or_default(),
                contract,
                extra,
            })),
            "TASK_RESULT" if skill.is_none() && input.is_none() && contract.is_none() => {
                Some(Body::TaskResult(TaskResult {
                    task_id: task_id?,
                    output: output.unwrap_or_default(),
                    provenance: provenance?,
                    extra,
                }))
            }
            _ => None,
        }
    }

    /// Any body: each member read into its typed slot, the body assembled once its `type` is known.
    fn any_body(&mut self) -> Option<Body> {
        let mut s = BodySlots::default();
        let mut seen = 0;
        self.object(|scan, name| {
            let key = BodyKey::from_str(name);
            Self::first_time(&mut seen, key.as_ref().map_or(0, BodyKey::bit))?;
            match key {
                Some(BodyKey::Type) => {
                    s.type_tag = Some(match scan.plain_str() {
                        Some(tag) => tag.parse().map_or_else(|()| TypeTag::Unknown(tag.to_owned()), TypeTag::Known),
                        None => scan.value()?,
                    })
                }
                Some(BodyKey::DelegateId) => s.delegate_id = scan.opt_string()?,
                Some(BodyKey::SessionId) => s.session_id = scan.opt_string()?,
                Some(BodyKey::Reason) => s.reason = scan.opt_string()?,
                Some(BodyKey::TaskId) => s.task_id = scan.opt_string()?,
                Some(BodyKey::Skill) => s.skill = scan.opt_string()?,
                Some(BodyKey::Message) => s.message = scan.opt_string()?,
                Some(BodyKey::SupportedModes) => s.supported_modes = scan.value()?,
                Some(BodyKey::Capabilities) => s.capabilities = scan.value()?,
                Some(BodyKey::Config) => s.config = scan.value()?,
                Some(BodyKey::NegotiatedMode) => s.negotiated_mode = scan.value()?,
                Some(BodyKey::FallbackChain) => s.fallback_chain = scan.value()?,
                Some(BodyKey::Error) => s.error = scan.value()?,
                Some(BodyKey::Input) => s.input = scan.raw()?,
                Some(BodyKey::Contract) => s.contract = scan.contract()?,
                Some(BodyKey::Progress) => s.progress = scan.value()?,
                Some(BodyKey::Output) => s.output = scan.raw()?,
                Some(BodyKey::PartialOutput) => s.partial_output = scan.raw()?,
                Some(BodyKey::Provenance) => s.provenance = scan.opt_provenance()?,
                Some(BodyKey::Claim) => s.claim = scan.value()?,
                Some(BodyKey::Evidence) => s.evidence = scan.value()?,
                Some(BodyKey::Other(_)) | None => {
                    insert_new(&mut s.extra, name.to_owned(), scan.value()?).is_none().then_some(())?;
                }
            }
            Some(())
        })?;
        s.assemble::<serde_json::Error>().ok()
    }

    /// Marks member `bit` seen; `None` when it was already (the serde path then refuses the repeated name). An
    /// unknown member has bit 0 and is checked where it is kept.
    fn first_time(seen: &mut u32, bit: u32) -> Option<()> {
        (*seen & bit == 0).then(|| *seen |= bit)
    }

    /// Skips the value of an unknown member of a record, `None` when its name came before.
    fn skip_unknown(&mut self, unknown: &mut Vec<&'a str>, name: &'a str) -> Option<()> {
        if unknown.contains(&name) {
            return None;
        }
        unknown.push(name);
        self.skip()
    }

    /// A list of strings; `null` reads as empty (the contract's `null_as_default`).
    fn strings_or_null(&mut self) -> Option<Vec<String>> {
        match self.peek()? {
            b'n' => self.null().map(|()| Vec::new()),
            b'[' => {
                self.pos += 1;
                let mut list = Vec::new();
                if self.peek()? == b']' {
                    self.pos += 1;
                    return Some(list);
                }
                loop {
                    list.push(self.string()?);
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Some(list);
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    /// A TASK_SUBMIT `contract`, decoded as its derived `Deserialize` would.
    fn contract(&mut self) -> Option<Option<Box<DelegationContract>>> {
        match self.peek()? {
            b'n' => return self.null().map(|()| None),
            b'{' => {}
            _ => return None,
        }
        let (mut contract_id, mut objective, mut success_criteria, mut policy) = (None, None, None, None);
        let (mut deadline, mut created_at, mut seen) = (None, None, 0);
        let mut unknown = Vec::new();
        self.object(|scan, name| {
            match name {
                "contract_id" => {
                    Self::first_time(&mut seen, 1)?;
                    contract_id = Some(scan.string()?);
                }
                "objective" => {
                    Self::first_time(&mut seen, 2)?;
                    objective = scan.opt_string()?;
                }
                "success_criteria" => {
                    Self::first_time(&mut seen, 4)?;
                    success_criteria = Some(scan.strings_or_null()?);
                }
                "policy" => {
                    Self::first_time(&mut seen, 8)?;
                    policy = Some(scan.policy()?);
                }
                "deadline" => {
                    Self::first_time(&mut seen, 16)?;
                    deadline = scan.opt_string()?;
                }
                "created_at" => {
                    Self::first_time(&mut seen, 32)?;
                    created_at = scan.opt_string()?;
                }
                _ => scan.skip_unknown(&mut unknown, name)?,
            }
            Some(())
        })?;
        Some(Some(Box::new(DelegationContract {
            contract_id: contract_id?,
            objective: objective.unwrap_or_default(),
            success_criteria: success_criteria.unwrap_or_default(),
            policy: policy.unwrap_or_default(),
            deadline,
            created_at,
        })))
    }

    /// `null` or an unsigned integer written plainly (no sign, fraction or exponent, which serde would read as another
    /// type); anything else is left to serde.
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        let first = self.peek()?;
        if first == b'n' {
            return self.null().map(|()| None);
        }
        let digits = self.bytes.get(self.pos..)?.iter().take_while(|b| b.is_ascii_digit()).count();
        let end = self.pos + digits;
        let plain = digits > 0
            && (first != b'0' || digits == 1)
            && !matches!(self.bytes.get(end), Some(b'.' | b'e' | b'E' | b'-' | b'+'));
        if !plain {
            return None;
        }
        let number = self.text.get(self.pos..end)?.parse().ok()?;
        self.pos = end;
        Some(Some(number))
    }

    /// `null` or `true` / `false`; anything else is left to serde.
    fn opt_bool(&mut self) -> Option<Option<bool>> {
        let value = match self.peek()? {
            b'n' => return self.null().map(|()| None),
            b't' => true,
            b'f' => false,
            _ => return None,
        };
        let word: &[u8] = if value { b"true" } else { b"false" };
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)?;
        Some(Some(value))
    }

    /// `null` or a provenance record (RFC 6.1 plus the paper's 3.4), decoded as its `Deserialize` would: the
    /// members of `ProvenanceWire`, unknown members ignored, a duplicate one left to serde (which refuses it).
    fn opt_provenance(&mut self) -> Option<Option<Arc<Provenance>>> {
        match self.peek()? {
            b'n' => return self.null().map(|()| None),
            b'{' => {}
            _ => return None,
        }
        let (mut produced_by, mut model_version, mut payload_mode_used) = (None, None, None);
        let mut p = Provenance::new(String::new(), String::new(), PayloadMode::Text);
        let mut seen = 0;
        let mut unknown = Vec::new();
        self.object(|scan, name| {
            match name {
                "produced_by" => {
                    Self::first_time(&mut seen, 1)?;
                    produced_by = Some(scan.string()?);
                }
                "model_version" => {
                    Self::first_time(&mut seen, 1 << 1)?;
                    model_version = Some(scan.string()?);
                }
                "payload_mode_used" => {
                    Self::first_time(&mut seen, 1 << 2)?;
                    payload_mode_used = Some(match scan.plain_str() {
                        Some(mode) => mode.parse::<PayloadMode>().ok()?,
                        None => scan.value()?,
                    });
                }
                "confidence" => {
                    Self::first_time(&mut seen, 1 << 3)?;
                    p.confidence = scan.value()?;
                }
                "verified" => {
                    Self::first_time(&mut seen, 1 << 4)?;
                    p.verified = scan.opt_bool()?.unwrap_or_default();
                }
                "session_id" => {
                    Self::first_time(&mut seen, 1 << 5)?;
                    p.session_id = scan.opt_string()?;
                }
                "timestamp" => {
                    Self::first_time(&mut seen, 1 << 6)?;
                    p.timestamp = scan.opt_string()?;
                }
                "verification_status" => {
                    Self::first_time(&mut seen, 1 << 7)?;
                    p.verification_status = match scan.plain_str() {
                        Some(status) => Some(VerificationStatus::from_wire_name(status)?),
                        None => scan.value()?,
                    };
                }
                "evidence" => {
                    Self::first_time(&mut seen, 1 << 8)?;
                    let list: Option<Vec<Object<EvidenceRef>>> = scan.value()?;
                    p.evidence = list.map_or_else(Vec::new, |v| v.into_iter().map(|o| o.0).collect());
                }
                "lineage" => {
                    Self::first_time(&mut seen, 1 << 9)?;
                    let list: Option<Vec<Object<LineageEntry>>> = scan.value()?;
                    p.lineage = list.map_or_else(Vec::new, |v| v.into_iter().map(|o| o.0).collect());
                }
                "tokens_used" => {
                    Self::first_time(&mut seen, 1 << 10)?;
                    p.tokens_used = scan.opt_u64()?;
                }
                "cost_usd" => {
                    Self::first_time(&mut seen, 1 << 11)?;
                    p.cost_usd = scan.value()?;
                }
                "contract_id" => {
                    Self::first_time(&mut seen, 1 << 12)?;
                    p.contract_id = scan.opt_string()?;
                }
                "contract_satisfied" => {
                    Self::first_time(&mut seen, 1 << 13)?;
                    p.contract_satisfied = scan.opt_bool()?;
                }
                "contract_violations" => {
                    Self::first_time(&mut seen, 1 << 14)?;
                    p.contract_violations = scan.strings_or_null()?;
                }
                "usage_receipt" => {
                    Self::first_time(&mut seen, 1 << 15)?;
                    p.usage_receipt = scan.value()?;
                }
                _ => scan.skip_unknown(&mut unknown, name)?,
            }
            Some(())
        })?;
        p.produced_by = produced_by?;
        p.model_version = model_version?;
        p.payload_mode_used = payload_mode_used?;
        // As the serde decoder: a status other than unverified implies verified.
        if let Some(status) = p.verification_status {
            p.verified = status != VerificationStatus::Unverified;
        }
        Some(Some(Arc::new(p)))
    }

    /// A contract's `budget`: `null`, or an object read as its derived `Deserialize` would.
    fn budget(&mut self) -> Option<Option<Budget>> {
        match self.peek()? {
            b'n' => return self.null().map(|()| None),
            b'{' => {}
            _ => return None,
        }
        let mut budget = Budget::default();
        let mut seen = 0;
        let mut unknown = Vec::new();
        self.object(|scan, name| {
            match name {
                "max_tokens" => {
                    Self::first_time(&mut seen, 1)?;
                    budget.max_tokens = scan.opt_u64()?;
                }
                "max_cost_usd" => {
                    Self::first_time(&mut seen, 2)?;
                    budget.max_cost_usd = scan.value()?;
                }
                _ => scan.skip_unknown(&mut unknown, name)?,
            }
            Some(())
        })?;
        Some(Some(budget))
    }

    /// A contract's `policy`; `null` reads as the default.
    fn policy(&mut self) -> Option<ContractPolicy> {
        match self.peek()? {
            b'n' => return self.null().map(|()| ContractPolicy::default()),
            b'{' => {}
            _ => return None,
        }
        let mut policy = ContractPolicy::default();
        let mut seen = 0;
        let mut unknown = Vec::new();
        self.object(|scan, name| {
            match name {
                "failure_policy" => {
                    Self::first_time(&mut seen, 1)?;
                    policy.failure_policy = match scan.plain_str() {
                        Some("fail_closed") => FailurePolicy::FailClosed,
                        Some("fail_open") => FailurePolicy::FailOpen,
                        Some(_) => return None,
                        None => scan.value::<Option<FailurePolicy>>()?.unwrap_or_default(),
                    };
                }
                "budget" => {
                    Self::first_time(&mut seen, 2)?;
                    policy.budget = scan.budget()?;
                }
                "safety_constraints" => {
                    Self::first_time(&mut seen, 4)?;
                    policy.safety_constraints = scan.strings_or_null()?;
                }
                "max_delegation_depth" => {
                    Self::first_time(&mut seen, 8)?;
                    policy.max_delegation_depth = match scan.opt_u64()? {
                        Some(depth) => Some(u32::try_from(depth).ok()?),
                        None => None,
                    };
                }
                _ => scan.skip_unknown(&mut unknown, name)?,
            }
            Some(())
        })?;
        Some(policy)
    }
}
