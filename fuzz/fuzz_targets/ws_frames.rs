//! The WebSocket server's connection loop (`WsServer::serve_connection`, over plain channels: the frame layer of
//! `wire.rs` and everything that reads an inbound text frame, down to the session machine and the echo delegate).
//!
//! Input: frames separated by `0xFF` (a byte no UTF-8 text contains); each frame's first byte picks its kind (text
//! mostly, binary, ping, pong, close, or a receive error), the rest is its payload. Each frame is handled before the
//! next is sent, except text frames of kind 8 and 9, which follow at once (pipelined). Oracle: the loop ends, never
//! panics (nor does any task it spawns: the fuzzer aborts on a panic anywhere), and every text frame the server
//! sends is an envelope or a typed control frame (`{"error": <LdpError>}` or `{"accepted": true}`).
#![no_main]

use std::cell::RefCell;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{ManualClock, PeerContext, Responder, ResponderConfig, SeededIds};
use ldp_transport_ws::{CloseFrame, Message, WireError, WsServer, WsServerConfig};
use ldp_types::{Capability, DelegateId, Envelope, IdentityCard, LdpError, PayloadMode, TrustDomain};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::Value;
use tokio::runtime::Runtime;

/// `LDP_FUZZ_DEBUG=1` prints what the server sends (to see how far an input gets).
static DEBUG: LazyLock<bool> = LazyLock::new(|| std::env::var_os("LDP_FUZZ_DEBUG").is_some());

/// 2026-03-09T10:00:00Z, the time of the spec's transcript, so that its timestamps are current.
const TRANSCRIPT_TIME: i64 = 1_773_050_400;

/// The delegate the spec's transcript talks to, so that the transcript's messages get past the session checks.
/// The configuration is immutable, so it is built once; every input gets a responder, a runtime and a server of
/// its own (fresh session state).
static RESPONDER_CONFIG: LazyLock<ResponderConfig> = LazyLock::new(|| {
    let id = DelegateId::new("ldp:delegate:qwen3-8b-reasoning").expect("a valid id");
    let mut card = IdentityCard::new(id, "Echo", "fuzz", "1");
    card.trust_domain = TrustDomain::new("research.internal");
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card.capabilities.extend(["reasoning", "analysis", "echo"].map(Capability::new));
    ResponderConfig::new(card)
});

/// A small message limit, so that the fuzzer reaches the oversize path too.
static SERVER_CONFIG: LazyLock<WsServerConfig> =
    LazyLock::new(|| WsServerConfig { max_message: 3072, ..Default::default() });

fn server() -> WsServer {
    let start = time::OffsetDateTime::from_unix_timestamp(TRANSCRIPT_TIME).expect("a valid time");
    let responder =
        Responder::new(RESPONDER_CONFIG.clone(), Arc::new(ManualClock::new(start)), Box::new(SeededIds::new(1)));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    WsServer::new(runtime, SERVER_CONFIG.clone())
}

thread_local! {
    /// The runtime of the previous input, kept when nothing of that input was left in it (no task alive): building
    /// and dropping a runtime per input cost more than many inputs' own work. Paused time carries over from one
    /// input to the next, which nothing here depends on (the wall clock is the responder's `ManualClock`, and every
    /// timer is relative).
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

fn frame(bytes: &[u8]) -> Result<Message, WireError> {
    let (kind, payload) = match bytes.split_first() {
        Some((kind, payload)) => (*kind, payload),
        None => (0, bytes),
    };
    Ok(match kind % 16 {
        // 8 and 9: sent without waiting for the answer to the frame before (see below).
        0..=9 => Message::Text(String::from_utf8_lossy(payload).into_owned()),
        10 => Message::Binary(payload.to_vec()),
        11 => Message::Ping(payload.to_vec()),
        12 => Message::Pong(payload.to_vec()),
        13 => Message::Close(payload.get(..2).map(|code| {
            CloseFrame::new(u16::from_be_bytes([code[0], code[1]]), String::from_utf8_lossy(&payload[2..]))
        })),
        14 => return Err(WireError::TooLarge { limit: payload.len() }),
        _ => return Err(WireError::Io(String::from_utf8_lossy(payload).into_owned())),
    })
}

fn check_sent(message: &Message) {
    let Message::Text(text) = message else { return };
    // Most frames an input gets back are control frames, and `Envelope::from_json` refuses one only after both of its
    // decoders have read it: the frames that start as the server writes a control frame are tried as one first. The
    // order changes only the cost: a text passes when it is either.
    if (text.starts_with(r#"{"error":"#) || text.starts_with(r#"{"accepted":"#)) && is_control_frame(text) {
        return;
    }
    if Envelope::from_json(text).is_ok() {
        return;
    }
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("the server sent non-JSON ({e}): {text}"));
    if let Some(error) = value.get("error") {
        serde_json::from_value::<LdpError>(error.clone())
            .unwrap_or_else(|e| panic!("an error frame without a typed error ({e}): {text}"));
    } else {
        assert_eq!(value.get("accepted"), Some(&Value::Bool(true)), "neither envelope nor control frame: {text}");
    }
}

/// Whether `text` is `{"error": <LdpError>}` (other members allowed, as the reading below allows them) or has
/// `"accepted": true`, read exactly as the panicking branch of [`check_sent`] reads it.
fn is_control_frame(text: &str) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(text) else { return false };
    match value.get("error") {
        Some(error) => LdpError::deserialize(error).is_ok(),
        None => value.get("accepted") == Some(&Value::Bool(true)),
    }
}

fuzz_target!(|data: &[u8]| {
    let rt = match RUNTIME.take() {
        Some(rt) => rt,
        None => match tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build() {
            Ok(rt) => rt,
            Err(_) => return,
        },
    };
    rt.block_on(async {
        let server = server();
        let (to_server, inbound) = mpsc::unbounded();
        let (outbound, mut from_server) = mpsc::unbounded::<Message>();
        let connection = tokio::spawn({
            let server = server.clone();
            async move { server.serve_connection(PeerContext::default(), outbound, inbound).await }
        });
        for bytes in data.split(|&b| b == 0xFF) {
            let pipelined = matches!(bytes.first(), Some(8 | 9));
            if to_server.unbounded_send(frame(bytes)).is_err() {
                break;
            }
            if !pipelined {
                // Paused time moves on only when every task waits: the frame has been handled, as a client that
                // waits for each answer would see it.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // Paused time moves on only when every task waits: by then each frame has been handled.
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(to_server);
        let ended = tokio::time::timeout(Duration::from_secs(600), connection).await;
        assert!(matches!(ended, Ok(Ok(_))), "the connection loop did not end: {ended:?}");
        while let Some(message) = from_server.next().await {
            if *DEBUG {
                eprintln!("server sent: {message:?}");
            }
            check_sent(&message);
        }
        assert_eq!(server.connections(), 0);
    });
    // A task still alive (a delegate the connection's end did not stop) would run on during the next input: such a
    // runtime is dropped (which cancels it), as every runtime was before.
    if rt.metrics().num_alive_tasks() == 0 {
        RUNTIME.set(Some(rt));
    }
});
