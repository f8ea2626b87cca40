//! Protocol helpers of the context: HELLO, a session from proposal to close, task submission and the liveness
//! probe, built the RFC way with the kit's identity.

#[allow(clippy::wildcard_imports, reason = "part of the context, moved out of its file as it was")]
use super::*;

impl Ctx {
    /// The proposal config: the preferences, the TTL, and the server's own domain declared as ours.
    pub(crate) fn session_config(&self, modes: &[PayloadMode], ttl_secs: u64) -> SessionConfig {
        SessionConfig {
            preferred_payload_modes: Some(modes.to_vec()),
            ttl_secs: Some(ttl_secs),
            trust_domain: self.card_domain(),
            ..SessionConfig::default()
        }
    }

    pub(crate) async fn hello(&mut self) -> Answer {
        let env = self.envelope(
            "",
            Hello::new(KIT_DELEGATE_ID.to_owned(), vec![PayloadMode::SemanticFrame, PayloadMode::Text]),
            PayloadMode::Text,
        );
        self.send_envelope(&env).await
    }

    pub(crate) async fn propose(&mut self, config: SessionConfig) -> Answer {
        let env = self.envelope("", SessionPropose::new(config), PayloadMode::Text);
        self.send_envelope(&env).await
    }

    /// HELLO then SESSION_PROPOSE; the accepted session or why there is none.
    pub(crate) async fn open_session(&mut self, modes: &[PayloadMode], ttl_secs: u64) -> Result<Session, String> {
        let hello = self.hello().await;
        if !hello.is_processed() {
            return Err(format!("HELLO was not answered normally: {}", hello.describe()));
        }
        let config = self.session_config(modes, ttl_secs);
        let answer = self.propose(config).await;
        session_from(&answer)
    }

    pub(crate) fn input_for(mode: PayloadMode) -> Value {
        match mode {
            PayloadMode::SemanticFrame => serde_json::json!({
                "task_type": "echo",
                "instruction": "Return the input unchanged.",
                "input": "conformance probe",
            }),
            _ => Value::String("conformance probe: please echo this text".into()),
        }
    }

    pub(crate) async fn submit(
        &mut self,
        session_id: &str,
        mode: PayloadMode,
        skill: &str,
        input: Value,
        contract: Option<DelegationContract>,
    ) -> (Envelope, Answer) {
        let task_id = format!("task-{}", uuid::Uuid::new_v4());
        let env = self.envelope(session_id, TaskSubmit::new(task_id, skill.to_owned(), input, contract), mode);
        let answer = self.send_envelope(&env).await;
        (env, answer)
    }

    pub(crate) async fn submit_default(&mut self, session: &Session) -> (Envelope, Answer) {
        let skill = self.skill();
        self.submit(&session.id, session.mode, &skill, Self::input_for(session.mode), None).await
    }

    pub(crate) async fn close(&mut self, session_id: &str) -> Answer {
        let env =
            self.envelope(session_id, SessionClose::new(Some("conformance check done".into())), PayloadMode::Text);
        self.send_envelope(&env).await
    }

    /// A normal request still works: HELLO is answered with CAPABILITY_MANIFEST.
    pub(crate) async fn alive(&mut self) -> Result<(), String> {
        let hello = self.hello().await;
        if hello.is_type("CAPABILITY_MANIFEST") {
            Ok(())
        } else {
            Err(format!("afterwards a normal HELLO was not answered with CAPABILITY_MANIFEST: {}", hello.describe()))
        }
    }
}
