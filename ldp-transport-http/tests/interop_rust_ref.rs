//! The Rust reference SDK (crate `ldp-protocol` 0.2.0) as a client of our server, unchanged: its `LdpAdapter`
//! (discover, invoke with transparent session set-up, close) and its raw `LdpClient` through the whole lifecycle,
//! unsigned and signed with `hmac-sha256`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use ldp_protocol::types::messages::{LdpEnvelope, LdpMessageBody};
use ldp_protocol::types::payload::PayloadMode as RefMode;
use ldp_protocol::{LdpAdapter, LdpAdapterConfig, LdpClient, ProtocolAdapter};
use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, ServerHandle, spawn};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Capability, ClaimType, DelegateId, IdentityCard, PayloadMode, Score};
use serde_json::json;

const SECRET: &str = "rust-ref-secret";

async fn server(signed: bool) -> ServerHandle {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "echo", "1.0");
    // Quality metadata in both wire shapes, as `ldp serve` sends it: the reference crate must read it.
    let quality = Score::new(1.0).unwrap();
    card.capabilities
        .push(Capability::new("echo").with_quality(quality, ClaimType::SelfClaimed).with_latency_p50_ms(1));
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    let mut cfg = ResponderConfig::new(card);
    if signed {
        cfg.security =
            SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, SECRET).unwrap());
        cfg.hmac_sha256_nonce = false;
    }
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let state = HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), HttpServerConfig::default());
    spawn("127.0.0.1:0", state).await.unwrap()
}

fn adapter(signed: bool) -> LdpAdapter {
    let config = LdpAdapterConfig {
        delegate_id: "ldp:delegate:rust-ref".into(),
        signing_secret: signed.then(|| SECRET.to_owned()),
        ..LdpAdapterConfig::default()
    };
    LdpAdapter::new(config)
}

async fn adapter_flow(signed: bool) {
    let server = server(signed).await;
    let url = server.url().to_owned();
    let adapter = adapter(signed);
    let caps = adapter.discover(&url).await.unwrap();
    assert!(caps.skills.iter().any(|s| s.name == "echo"), "{caps:?}");
    // invoke: HELLO -> CAPABILITY_MANIFEST (reads supported_modes), SESSION_PROPOSE -> SESSION_ACCEPT, TASK_SUBMIT,
    // each reply parsed by the SDK.
    let task = ldp_protocol::TaskRequest { skill: "echo".into(), input: json!({"text": "hi"}), contract: None };
    let handle = adapter.invoke(&url, task).await.unwrap();
    assert!(!handle.task_id.is_empty());
    assert_eq!(adapter.session_manager().active_count().await, 1);
    adapter.session_manager().close(&url).await.unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_rust_reference_adapter_against_our_server() {
    adapter_flow(false).await;
}

#[tokio::test]
async fn the_rust_reference_adapter_against_our_server_signed_hmac_sha256() {
    adapter_flow(true).await;
}

#[tokio::test]
async fn the_rust_reference_client_through_the_whole_lifecycle() {
    for signed in [false, true] {
        let server = server(signed).await;
        let url = server.url().to_owned();
        let client = LdpClient::new();
        let me = "ldp:delegate:rust-ref";
        let card = client.fetch_identity_wellknown(&url).await.unwrap();
        assert_eq!(card.delegate_id, "ldp:delegate:echo");
        let caps = client.fetch_capabilities(&url).await.unwrap();
        assert_eq!(caps["capabilities"][0]["name"], "echo");
        let send = |mut env: LdpEnvelope| {
            let client = client.clone();
            let url = url.clone();
            async move {
                if signed {
                    ldp_protocol::apply_signature(&mut env, SECRET);
                }
                client.send_message(&url, &env).await.unwrap()
            }
        };
        let hello = LdpMessageBody::Hello {
            delegate_id: me.into(),
            supported_modes: vec![RefMode::SemanticFrame, RefMode::Text],
        };
        let reply = send(LdpEnvelope::new("", me, &url, hello, RefMode::Text)).await;
        let LdpMessageBody::CapabilityManifest { capabilities } = &reply.body else { panic!("{reply:?}") };
        assert_eq!(capabilities["supported_modes"], json!(["semantic_frame", "text"]));
        if signed {
            assert!(
                ldp_protocol::verify_envelope(&reply, SECRET, reply.signature.as_deref().unwrap()),
                "reply signature"
            );
        }
        let config = json!({"payload_mode": "text", "ttl_secs": 600, "trust_domain": "default"});
        let proposed = uuid::Uuid::new_v4().to_string();
        let propose = LdpMessageBody::SessionPropose { config };
        let reply = send(LdpEnvelope::new(&proposed, me, &reply.from, propose, RefMode::Text)).await;
        let LdpMessageBody::SessionAccept { session_id, negotiated_mode } = reply.body else { panic!("{reply:?}") };
        // The Rust SDK keeps its proposed id; we keep it too when it is fresh.
        assert_eq!(session_id, proposed);
        assert_eq!(negotiated_mode, RefMode::Text);
        let submit = LdpMessageBody::TaskSubmit {
            task_id: "t-1".into(),
            skill: "echo".into(),
            input: json!({"text": "hi"}),
            contract: None,
        };
        let reply = send(LdpEnvelope::new(&session_id, me, "ldp:delegate:echo", submit, RefMode::Text)).await;
        let LdpMessageBody::TaskResult { output, provenance, .. } = &reply.body else { panic!("{reply:?}") };
        assert_eq!(output, &json!({"echo": {"text": "hi"}}));
        assert_eq!(provenance.produced_by, "ldp:delegate:echo");
        if signed {
            assert!(
                ldp_protocol::verify_envelope(&reply, SECRET, reply.signature.as_deref().unwrap()),
                "reply signature"
            );
        }
        let close = LdpMessageBody::SessionClose { reason: None };
        let reply = send(LdpEnvelope::new(&session_id, me, "ldp:delegate:echo", close, RefMode::Text)).await;
        assert!(matches!(reply.body, LdpMessageBody::SessionClose { .. }), "{reply:?}");
        server.shutdown().await.unwrap();
    }
}
