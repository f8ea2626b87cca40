#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Payload-mode negotiation and fallback (RFC 4.2, 4.3), replaying the RFC's sequence diagram through both machines.

use crate::support::*;
use ldp_session::{FallbackStyle, InitiatorEvent, Outcome, ResponderEvent, SessionState, TaskOutput};
use ldp_types::{Body, ErrorCategory, LdpError, Manifest, MessageType, PayloadMode, SessionConfig, codes};
use serde_json::{Value, json};

use PayloadMode::{SemanticFrame as Sf, SemanticGraph as Sg, Text};

fn types(sim: &Sim) -> Vec<(Dir, MessageType)> {
    sim.wire.iter().map(|(d, e)| (*d, e.body.message_type().unwrap())).collect()
}

/// The mermaid diagram of RFC 4.2, message by message.
#[test]
fn rfc_4_2_sequence_diagram() {
    let mut icfg = initiator_config();
    icfg.supported_modes = vec![Sg, Sf, Text];
    // The diagram's explicit style: the responder answers TASK_FAILED and the initiator resubmits.
    let mut rcfg = responder_config();
    rcfg.fallback = FallbackStyle::Explicit;
    let mut sim = Sim::with(rcfg, icfg);

    // I->>R: HELLO supported_modes=[semantic_graph, semantic_frame, text]
    let hello = sim.initiator.hello();
    assert!(matches!(&hello.body, Body::Hello(h) if h.supported_modes == vec![Sg, Sf, Text]));
    // R-->>I: CAPABILITY_MANIFEST supported_modes=[semantic_frame, text]
    let manifest = sim.step(hello).reply();
    let Body::CapabilityManifest(m) = &manifest.body else { panic!("{manifest:?}") };
    assert_eq!(Manifest::from_value(&m.capabilities).supported_modes, vec![Sf, Text]);

    // I->>R: SESSION_PROPOSE preferred_payload_modes=[semantic_graph, semantic_frame, text]
    let propose = sim.initiator.propose(SessionConfig::default());
    assert!(matches!(&propose.body, Body::SessionPropose(p)
        if p.config.preferred_payload_modes == Some(vec![Sg, Sf, Text])));
    // R-->>I: SESSION_ACCEPT negotiated_mode=semantic_frame fallback_chain=[text]
    // (semantic_graph is skipped: not implemented by both parties)
    let accept = sim.step(propose).reply();
    let Body::SessionAccept(a) = &accept.body else { panic!("{accept:?}") };
    assert_eq!((a.negotiated_mode, a.fallback_chain.clone()), (Sf, Some(vec![Text])));
    let sid = a.session_id.clone();
    assert_eq!(sim.initiator.session_mode(&sid), Some(Sf));
    sim.initiator_events();
    sim.responder_events();

    // I->>R: TASK_SUBMIT payload_mode=semantic_frame
    let input = frame("Classify the sentiment of: the product arrived on time");
    let mut submit = sim.initiator.submit(&sid, "echo", input.clone(), None, None).unwrap();
    assert_eq!(submit.payload_mode, Sf);
    let task_id = submit.body.task_id().unwrap().to_owned();
    // Our initiator only sends frames that validate, so the frame that fails validation at the responder is made
    // here, in transit (as a peer with a faulty encoder would send it): `instruction` is missing.
    let Body::TaskSubmit(ts) = &mut submit.body else { unreachable!() };
    ts.input = json!({ "task_type": "echo", "text": "the product arrived on time" }).into();

    // R-->>I: TASK_FAILED reason="semantic_frame validation failed"
    let step = sim.step(submit);
    let err = step.error();
    assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Capability, codes::PAYLOAD_MODE_FAILED));
    assert!(err.message.contains("semantic_frame validation failed"), "{}", err.message);
    let (failed, verdict) = step.reply.unwrap();
    assert!(matches!(&failed.body, Body::TaskFailed(f) if f.task_id == task_id));
    verdict.unwrap();
    // The session is not terminated: it moved down its chain on both sides.
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder.session_mode(&sid), Some(Text));
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::ModeFellBack { session_id: sid.clone(), from: Sf, to: Text }]
    );
    let key = ldp_session::TaskKey { session_id: sid.clone(), task_id: task_id.clone() };
    assert_eq!(sim.initiator_events(), vec![InitiatorEvent::FellBack { key: key.clone(), from: Sf, to: Text }]);
    assert_eq!(sim.initiator.session_mode(&sid), Some(Text));

    // Automatic downgrade: I->>R: TASK_SUBMIT payload_mode=text (queued by the initiator itself).
    let steps = sim.drive();
    assert_eq!(steps.len(), 1);
    let task = steps[0].task();
    assert_eq!((task.key.clone(), task.payload_mode), (key.clone(), Text));
    let Value::String(text) = task.input.to_value().unwrap() else { panic!("text mode input: {:?}", task.input) };
    assert!(text.contains("Classify the sentiment of: the product arrived on time"), "{text}");

    // R-->>I: TASK_RESULT payload_mode_used=text
    sim.complete(&task.key, TaskOutput::new(json!({ "label": "positive" })));
    let (_, result) = sim.wire.last().unwrap().clone();
    assert_eq!(result.payload_mode, Text);
    let Body::TaskResult(r) = &result.body else { panic!("{result:?}") };
    assert_eq!(r.provenance.payload_mode_used, Text);
    let events = sim.initiator_events();
    assert!(matches!(events.as_slice(), [InitiatorEvent::TaskCompleted { key: k, provenance, .. }]
        if *k == key && provenance.payload_mode_used == Text));

    assert_eq!(
        types(&sim),
        vec![
            (Dir::ToResponder, MessageType::Hello),
            (Dir::ToInitiator, MessageType::CapabilityManifest),
            (Dir::ToResponder, MessageType::SessionPropose),
            (Dir::ToInitiator, MessageType::SessionAccept),
            (Dir::ToResponder, MessageType::TaskSubmit),
            (Dir::ToInitiator, MessageType::TaskFailed),
            (Dir::ToResponder, MessageType::TaskSubmit),
            (Dir::ToInitiator, MessageType::TaskResult),
        ]
    );
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Active));
}

#[test]
fn a_delegate_side_payload_failure_falls_back_and_the_resubmission_succeeds() {
    let mut sim = Sim::new();
    let sid = sim.session();
    assert_eq!(sim.responder.session_mode(&sid), Some(Sf));
    let task = sim.submit(&sid, "echo", frame("draw a graph")).task();
    assert_eq!(task.payload_mode, Sf);
    sim.fail(&task.key, LdpError::capability(codes::PAYLOAD_MODE_FAILED, "cannot use this frame"));
    assert_eq!(sim.responder.session_mode(&sid), Some(Text));
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::ModeFellBack { session_id: sid.clone(), from: Sf, to: Text }]
    );
    assert!(matches!(sim.initiator_events().as_slice(),
        [InitiatorEvent::FellBack { key, from: Sf, to: Text }] if *key == task.key));
    // The same task id is resubmitted in text and accepted (a failed task may be retried under its id).
    let steps = sim.drive();
    let again = steps[0].task();
    assert_eq!((again.key.clone(), again.payload_mode), (task.key.clone(), Text));
    sim.complete(&again.key, TaskOutput::new(json!("done")));
    assert!(matches!(sim.initiator_events().as_slice(),
        [InitiatorEvent::TaskCompleted { provenance, .. }] if provenance.payload_mode_used == Text));
    // Later tasks start in the fallen-back mode.
    let next = sim.submit(&sid, "echo", frame("next")).task();
    assert_eq!(next.payload_mode, Text);
}

#[test]
fn without_a_fallback_left_the_failure_surfaces_and_the_session_survives() {
    let mut sim = Sim::new();
    let sid = sim.establish(SessionConfig { preferred_payload_modes: Some(vec![Text]), ..Default::default() });
    let task = sim.submit(&sid, "echo", json!("plain")).task();
    assert_eq!(task.payload_mode, Text);
    sim.fail(&task.key, LdpError::capability(codes::PAYLOAD_MODE_FAILED, "even text failed"));
    assert!(sim.initiator.poll_outbound().is_none(), "nothing to fall back to");
    assert!(matches!(sim.initiator_events().as_slice(),
        [InitiatorEvent::TaskFailed { key, error }] if *key == task.key && error.code == codes::PAYLOAD_MODE_FAILED));
    assert!(sim.responder_events().is_empty());
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.initiator.session_state(&sid), Some(SessionState::Active));
    sim.submit(&sid, "echo", json!("again")).task();
}

#[test]
fn a_task_in_a_mode_that_was_not_negotiated_is_refused_without_ending_the_session() {
    let mut sim = Sim::new();
    let sid = sim.establish(SessionConfig { preferred_payload_modes: Some(vec![Text]), ..Default::default() });
    for mode in [Sf, Sg, PayloadMode::EmbeddingHints, PayloadMode::LatentCapsules] {
        let submit = ldp_types::TaskSubmit::new(format!("t-{mode}"), "echo".into(), frame("x"), None);
        let env = sim.forge(&sid, submit, mode);
        let err = sim.send_responder(&env).unwrap_err().error;
        assert_eq!(
            (err.category, err.code.as_str()),
            (ErrorCategory::Capability, codes::PAYLOAD_MODE_FAILED),
            "{mode}"
        );
    }
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder.session_mode(&sid), Some(Text));
    assert!(matches!(sim.submit(&sid, "echo", json!("x")).outcome, Ok(Outcome::Execute(_))));
}

#[test]
fn several_tasks_failing_in_one_mode_are_each_resubmitted_once() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let tasks: Vec<_> = (0..3).map(|i| sim.submit(&sid, "echo", frame(&format!("task {i}"))).task()).collect();
    for t in &tasks {
        sim.fail(&t.key, LdpError::capability(codes::PAYLOAD_MODE_FAILED, "frame unusable"));
    }
    let steps = sim.drive();
    assert_eq!(steps.len(), 3);
    let mut resubmitted: Vec<_> = steps.iter().map(|s| s.task().key).collect();
    let mut expected: Vec<_> = tasks.iter().map(|t| t.key.clone()).collect();
    resubmitted.sort();
    expected.sort();
    assert_eq!(resubmitted, expected);
    assert!(steps.iter().all(|s| s.task().payload_mode == Text));
    // Only the first failure moved the responder's session; the others found it already in text.
    assert_eq!(sim.responder_events().len(), 1);
}

#[test]
fn transparent_fallback_runs_an_invalid_frame_in_text_without_a_failure() {
    // The reference SDKs' clients send raw input in semantic_frame mode and never resubmit; the default transparent
    // style runs such a task in text, moves the session down, and says so in provenance.
    let mut sim = Sim::new();
    let sid = sim.session();
    assert_eq!(sim.responder.session_mode(&sid), Some(PayloadMode::SemanticFrame));
    let mut submit = sim.initiator.submit(&sid, "echo", frame("x"), None, None).unwrap();
    let Body::TaskSubmit(ts) = &mut submit.body else { unreachable!() };
    ts.input = json!({ "message": "raw input, not a frame" }).into();
    let Ok(Outcome::Execute(task)) = sim.send_responder(&submit) else { panic!("expected the task to run") };
    assert_eq!(task.payload_mode, PayloadMode::Text);
    assert_eq!(sim.responder.session_mode(&sid), Some(PayloadMode::Text));
    assert_eq!(
        sim.responder_events(),
        vec![ResponderEvent::ModeFellBack {
            session_id: sid.clone(),
            from: PayloadMode::SemanticFrame,
            to: PayloadMode::Text
        }]
    );
}

#[test]
fn an_input_the_session_mode_cannot_carry_goes_out_in_the_fallback_mode() {
    let mut sim = Sim::new();
    let sid = sim.session();
    assert_eq!(sim.initiator.session_mode(&sid), Some(PayloadMode::SemanticFrame));
    let submit = sim.initiator.submit(&sid, "echo", json!("just text"), None, None).unwrap();
    assert_eq!(submit.payload_mode, PayloadMode::Text);
    let Ok(Outcome::Execute(task)) = sim.send_responder(&submit) else { panic!("the text-mode task must run") };
    assert_eq!(task.input, json!("just text"));
    // A frame still goes out as a frame.
    let framed = sim.initiator.submit(&sid, "echo", frame("x"), None, None).unwrap();
    assert_eq!(framed.payload_mode, PayloadMode::SemanticFrame);
}
