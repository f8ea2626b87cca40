//! What the context observes in every reply, for the `wire.*` checks: envelope fields, request/reply correlation,
//! provenance and typed errors, with notes on the exchange's evidence.

#[allow(clippy::wildcard_imports, reason = "part of the context, moved out of its file as it was")]
use super::*;

impl Ctx {
    pub(super) fn observed(&self, what: String, ex: &Exchange) -> Observed {
        Observed { check: self.check, what, exchange: ex.clone() }
    }

    /// Runs the wire-level observations on one answer.
    pub(super) fn observe(&mut self, ex: &mut Exchange, answer: &Answer, request: Option<&Envelope>) {
        let Some(reply) = &answer.reply else { return };
        if reply.no_reply || reply.close_code.is_some() {
            return;
        }
        let mut notes: Vec<(&'static str, String)> = Vec::new();
        // RFC 8.2 "All LDP messages use `Content-Type: application/json`": an answer and a refusal (4xx) alike; a
        // 5xx is no LDP message and is judged by the check that provoked it.
        if self.probe.kind() == TransportKind::Http
            && reply.status.is_some_and(|s| (200..500).contains(&s))
            && !reply.body.is_empty()
        {
            self.obs.json_replies += 1;
            if !is_media_type(reply.content_type.as_deref(), "application/json") {
                let status = reply.status.unwrap_or_default();
                notes.push((
                    "content_type",
                    format!("HTTP {status} reply content type is {:?}, not application/json", reply.content_type),
                ));
            }
        }
        let Some(json) = &answer.json else {
            for (kind, what) in notes {
                self.note(kind, what, ex);
            }
            return;
        };
        // A 2xx HTTP answer to a message is an envelope unless it is a bare error or acknowledgement object; a
        // WebSocket frame is one when it has a `body` (other frames are control objects: `{"error": ...}`,
        // `{"accepted": true}`).
        let control = json.get("error").is_some() || json.get("accepted").is_some();
        let is_envelope = json.get("body").is_some_and(Value::is_object)
            || (reply.status.is_some_and(|s| (200..300).contains(&s)) && json.is_object() && !control);
        if is_envelope {
            self.observe_envelope(json, request, &mut notes);
        } else if let Some(err) = json.get("error") {
            self.obs.errors_seen += 1;
            for v in self.validators.error(err) {
                notes.push(("schema", v));
            }
            if let Some(problem) = untyped(err) {
                notes.push(("untyped", problem));
            }
        }
        for (kind, what) in notes {
            self.note(kind, what, ex);
        }
    }

    pub(super) fn note(&mut self, kind: &'static str, what: String, ex: &mut Exchange) {
        ex.findings.push(what.clone());
        let o = self.observed(what, ex);
        let list = match kind {
            "schema" => &mut self.obs.schema,
            "fields" => &mut self.obs.envelope_fields,
            "timestamp" => &mut self.obs.timestamps,
            "duplicate" => &mut self.obs.duplicate_ids,
            "uuid" => &mut self.obs.non_uuid_ids,
            "addressing" => &mut self.obs.addressing,
            "content_type" => &mut self.obs.content_type,
            "provenance_missing" => &mut self.obs.provenance_missing,
            "provenance_attribution" => &mut self.obs.provenance_attribution,
            "mode_used" => &mut self.obs.mode_used,
            "provenance_fields" => &mut self.obs.provenance_fields,
            "confidence" => &mut self.obs.confidence_missing,
            "verification" => &mut self.obs.verification,
            "task_id" => &mut self.obs.task_ids,
            "reused_id" => &mut self.obs.reused_ids,
            "accept_id" => &mut self.obs.accept_ids,
            _ => &mut self.obs.untyped_errors,
        };
        list.push(o);
    }

    pub(super) fn observe_envelope(
        &mut self,
        json: &Value,
        request: Option<&Envelope>,
        notes: &mut Vec<(&'static str, String)>,
    ) {
        self.obs.envelopes_seen += 1;
        for v in self.validators.envelope(json) {
            notes.push(("schema", v));
        }
        for field in ["message_id", "session_id", "from", "to", "payload_mode", "timestamp"] {
            match json.get(field) {
                Some(Value::String(_)) => {}
                Some(other) => notes.push(("fields", format!("envelope `{field}` is {other}, not a string"))),
                None => notes.push(("fields", format!("envelope `{field}` is missing"))),
            }
        }
        if json.pointer("/body/type").and_then(Value::as_str).is_none() {
            notes.push(("fields", "envelope `body.type` is missing".to_owned()));
        }
        if let Some(ts) = json.get("timestamp").and_then(Value::as_str)
            && ldp_types::time::parse_timestamp(ts).is_err()
        {
            notes.push(("timestamp", format!("timestamp {ts:?} is not RFC 3339 (the ISO 8601 date-time profile)")));
        }
        if let Some(id) = json.get("message_id").and_then(Value::as_str) {
            if !self.obs.message_ids.insert(id.to_owned()) {
                notes.push(("duplicate", format!("message_id {id:?} was already used by an earlier reply")));
            }
            if uuid::Uuid::parse_str(id).is_err() {
                notes.push(("uuid", format!("message_id {id:?} is not a UUID")));
            }
        }
        if let Some(card) = &self.card
            && let Some(from) = json.get("from").and_then(Value::as_str)
            && from != card.delegate_id.as_str()
        {
            notes.push(("addressing", format!("reply `from` is {from:?}, not the card's {}", card.delegate_id)));
        }
        // Mirrored addressing: a reply goes to whoever sent the request (the kit, or the stranger it posed as).
        if let Some(to) = json.get("to").and_then(Value::as_str)
            && let Some(req) = request
            && to != req.from
        {
            notes.push(("addressing", format!("reply `to` is {to:?}, not the sender {:?}", req.from)));
        }
        self.observe_correlation(json, request, notes);
        if json.get("signature").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            self.claims.claim(Feature::Signing, "replies carry signatures");
        }
        match json.pointer("/body/type").and_then(Value::as_str) {
            Some("TASK_RESULT") => self.observe_result(json, request, notes),
            Some("TASK_FAILED") | Some("SESSION_REJECT") => {
                self.obs.errors_seen += 1;
                match json.pointer("/body/error") {
                    Some(err) if !err.is_null() => {
                        if let Some(problem) = untyped(err) {
                            notes.push(("untyped", problem));
                        }
                    }
                    _ => notes.push(("untyped", "the refusal carries no `error` object".to_owned())),
                }
            }
            _ => {}
        }
    }

    /// Whether a reply answers its request: the task's replies name the submitted task, the reply's message id is
    /// its own, a SESSION_ACCEPT names one session.
    pub(super) fn observe_correlation(
        &mut self,
        json: &Value,
        request: Option<&Envelope>,
        notes: &mut Vec<(&'static str, String)>,
    ) {
        let ty = json.pointer("/body/type").and_then(Value::as_str).unwrap_or_default();
        if let Some(req) = request
            && json.get("message_id").and_then(Value::as_str) == Some(req.message_id.as_str())
        {
            notes.push(("reused_id", format!("the {ty} reply reuses the request's message_id {:?}", req.message_id)));
        }
        if let Some(req) = request
            && let Body::TaskSubmit(submit) = &req.body
            && matches!(ty, "TASK_UPDATE" | "TASK_RESULT" | "TASK_FAILED")
        {
            let task = json.pointer("/body/task_id");
            // A TASK_FAILED refusing the message before it became a task may leave the task out; a result or an
            // update cannot.
            let absent_ok = ty == "TASK_FAILED" && task.is_none_or(Value::is_null);
            if !absent_ok {
                self.obs.task_replies += 1;
                if task.and_then(Value::as_str) != Some(submit.task_id.as_str()) {
                    notes.push((
                        "task_id",
                        format!(
                            "the {ty} answering task {:?} names task {}",
                            submit.task_id,
                            task.map_or("<none>".to_owned(), Value::to_string)
                        ),
                    ));
                }
            }
        }
        if ty == "SESSION_ACCEPT" {
            self.obs.accepts_seen += 1;
            let envelope_sid = json.get("session_id").and_then(Value::as_str);
            let body_sid = json.pointer("/body/session_id").and_then(Value::as_str);
            if let (Some(e), Some(b)) = (envelope_sid, body_sid)
                && e != b
            {
                notes.push((
                    "accept_id",
                    format!("SESSION_ACCEPT envelope session_id {e:?} differs from its body's {b:?}"),
                ));
            }
        }
    }

    pub(super) fn observe_result(
        &mut self,
        json: &Value,
        request: Option<&Envelope>,
        notes: &mut Vec<(&'static str, String)>,
    ) {
        self.obs.results_seen += 1;
        let Some(p) = json.pointer("/body/provenance").filter(|p| p.is_object()) else {
            notes.push(("provenance_missing", "TASK_RESULT has no provenance record".to_owned()));
            return;
        };
        for field in ["produced_by", "model_version", "payload_mode_used"] {
            if p.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                notes
                    .push(("provenance_missing", format!("provenance `{field}` is missing or not a non-empty string")));
            }
        }
        if !p.get("verified").is_some_and(Value::is_boolean) {
            notes.push(("provenance_missing", "provenance `verified` is missing or not a bool".to_owned()));
        }
        if let Some(card) = &self.card
            && let Some(by) = p.get("produced_by").and_then(Value::as_str)
            && by != card.delegate_id.as_str()
        {
            notes
                .push(("provenance_attribution", format!("produced_by {by:?} is not the card's {}", card.delegate_id)));
        }
        let used = p.get("payload_mode_used").and_then(Value::as_str);
        let env_mode = json.get("payload_mode").and_then(Value::as_str);
        if let (Some(used), Some(req)) = (used, request)
            && used != req.payload_mode.as_str()
            && Some(used) != env_mode
        {
            notes.push((
                "mode_used",
                format!(
                    "payload_mode_used {used:?} is neither the request's {} nor the reply's mode",
                    req.payload_mode
                ),
            ));
        }
        match p.get("confidence") {
            None | Some(Value::Null) => notes.push(("confidence", "provenance has no confidence".to_owned())),
            Some(c) => {
                if !c.as_f64().is_some_and(|c| (0.0..=1.0).contains(&c)) {
                    notes.push(("provenance_fields", format!("confidence {c} is not a number in 0.0-1.0")));
                }
            }
        }
        if let Some(ts) = p.get("timestamp").filter(|t| !t.is_null())
            && ts.as_str().is_none_or(|s| ldp_types::time::parse_timestamp(s).is_err())
        {
            notes.push(("provenance_fields", format!("provenance timestamp {ts} is not RFC 3339")));
        }
        if let Some(sid) = p.get("session_id").filter(|t| !t.is_null())
            && let Some(req) = request
            && sid.as_str() != Some(req.session_id.as_str())
        {
            notes.push((
                "provenance_fields",
                format!("provenance session_id {sid} is not the task's session {:?}", req.session_id),
            ));
        }
        if let Some(vs) = p.get("verification_status").filter(|v| !v.is_null()) {
            self.claims.claim(Feature::VerificationStatus, "provenance carries verification_status");
            const STATUSES: [&str; 5] =
                ["unverified", "self_verified", "peer_verified", "tool_verified", "human_verified"];
            match vs.as_str() {
                Some(s) if STATUSES.contains(&s) => {
                    if s == "unverified" && p.get("verified") == Some(&Value::Bool(true)) {
                        notes.push(("verification", "verification_status unverified with verified: true".to_owned()));
                    }
                }
                _ => notes.push(("verification", format!("verification_status {vs} is not one of {STATUSES:?}"))),
            }
        }
        if p.get("contract_id").and_then(Value::as_str).is_some() {
            self.claims.claim(Feature::Contracts, "provenance reports contract_id");
        }
    }
}
