#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Usage receipts (issue 22, paper section 7): a responder with an Ed25519 identity key signs what each task
//! consumed into the result's provenance; the initiator's side checks it with the key the card publishes.

use std::time::Duration;

use crate::support::*;
use ldp_session::{InitiatorEvent, TaskOutput};
use ldp_types::receipt::receipt_key;
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Envelope, Error};
use serde_json::json;

fn key() -> SigningKey {
    SigningKey::ed25519_from_seed(&[9; 32])
}

fn usage() -> TaskOutput {
    TaskOutput {
        tokens_used: Some(15),
        tokens_in: Some(10),
        tokens_out: Some(5),
        cost_usd: Some(0.0015),
        model: Some("smollm2-135m-instruct".into()),
        ..TaskOutput::new(json!({ "summary": "revenue grew" }))
    }
}

#[test]
fn every_result_carries_a_receipt_that_verifies_with_the_published_key() {
    let mut cfg = responder_config();
    cfg.set_receipt_key(key()).unwrap();
    let card = cfg.card.clone();
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let task = sim.submit(&sid, "summarize", frame("summarise")).task();
    sim.advance(Duration::from_millis(1500));
    sim.complete(&task.key, usage());
    let InitiatorEvent::TaskCompleted { key: done, provenance, .. } = sim.initiator_events().remove(0) else {
        panic!("not completed")
    };
    let receipt = provenance.usage_receipt.as_deref().expect("a receipt");
    let published = receipt_key(&card).expect("the card publishes the receipt key");
    receipt.verify_for(&published, &done.session_id, &done.task_id).unwrap();
    receipt.matches(&provenance).unwrap();
    assert_eq!(receipt.wall_time_ms, Some(1500), "measured by the machine from admission to completion");
    assert_eq!((receipt.tokens_in, receipt.tokens_out, receipt.tokens_total), (Some(10), Some(5), Some(15)));
    assert_eq!(receipt.model.as_deref(), Some("smollm2-135m-instruct"));
    assert_eq!(provenance.model_version, "smollm2-135m-instruct", "the model that answered, not the card's");
    assert_ne!(card.model_version, provenance.model_version);
    assert_eq!(receipt.delegate_id, card.delegate_id.as_str());

    // Replayed onto another task of the session, or with its figures changed, it does not verify.
    assert!(matches!(
        receipt.verify_for(&published, &done.session_id, "another-task"),
        Err(Error::ReceiptMismatch { member: "task_id" })
    ));
    let mut inflated = receipt.clone();
    inflated.tokens_total = Some(1500);
    assert!(matches!(inflated.verify_for(&published, &done.session_id, &done.task_id), Err(Error::BadSignature)));
    // A provenance that reports other figures than it signed is caught too.
    let mut misreported = provenance.clone();
    misreported.tokens_used = Some(1500);
    assert!(matches!(receipt.matches(&misreported), Err(Error::ReceiptMismatch { member: "tokens_total" })));
}

#[test]
fn the_receipt_survives_both_decoders_and_the_writer() {
    let mut cfg = responder_config();
    cfg.set_receipt_key(key()).unwrap();
    let mut sim = Sim::with(cfg, initiator_config());
    let sid = sim.session();
    let task = sim.submit(&sid, "summarize", frame("summarise")).task();
    let ldp_session::Delivery::Send(result) = sim.complete(&task.key, usage()) else { panic!("held") };
    let text = result.to_json().unwrap();
    assert!(text.contains("\"usage_receipt\":{"), "{text}");
    assert!(ldp_types::_scanner_decodes(&text), "the scanner reads it");
    let by_serde = ldp_types::_serde_decodes(&text).unwrap();
    let by_scanner = Envelope::from_json(&text).unwrap();
    assert_eq!(by_serde, by_scanner);
    assert_eq!(by_scanner, result);
}

#[test]
fn without_a_key_no_receipt_and_only_ed25519_keys_sign_them() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let task = sim.submit(&sid, "summarize", frame("summarise")).task();
    sim.complete(&task.key, usage());
    let InitiatorEvent::TaskCompleted { provenance, .. } = sim.initiator_events().remove(0) else { panic!() };
    assert!(provenance.usage_receipt.is_none());

    let mut cfg = responder_config();
    let hmac = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "shared").unwrap();
    assert!(matches!(cfg.set_receipt_key(hmac), Err(Error::InvalidKey(_))));
    assert!(cfg.receipt_key.is_none() && receipt_key(&cfg.card).is_none());
}
