//! How the replica tests talk to a `DelegateRuntime` in process: a message in, its answer out, and a session
//! proposed and established.

use ldp_session::runtime::{DelegateRuntime, Response};
use ldp_session::{Initiator, InitiatorEvent, PeerContext};
use ldp_types::{Body, Envelope, SessionConfig};

/// `env` handled by `rt`; its answer (a refusal's reply included).
pub async fn send(rt: &DelegateRuntime, env: &Envelope) -> Envelope {
    send_bytes(rt, &env.to_vec().unwrap()).await
}

/// `bytes` handled by `rt` as they are; the answer.
pub async fn send_bytes(rt: &DelegateRuntime, bytes: &[u8]) -> Envelope {
    match rt.handle(&PeerContext::default(), bytes, None).await {
        Response::Reply(env) => *env,
        Response::Refused(r) => r.reply.unwrap_or_else(|| panic!("refused without a reply: {:?}", r.error)),
        Response::Accepted => panic!("no answer"),
    }
}

/// Proposes a session on `rt`; its id, once `init` has it established.
pub async fn establish(init: &mut Initiator, rt: &DelegateRuntime) -> String {
    let accept = send(rt, &init.propose(SessionConfig::default())).await;
    assert!(matches!(accept.body, Body::SessionAccept(_)), "{}", accept.body.type_name());
    init.handle_envelope(accept, None).unwrap();
    loop {
        match init.poll_event() {
            Some(InitiatorEvent::SessionEstablished { session_id, .. }) => break session_id,
            Some(_) => continue,
            None => panic!("no session"),
        }
    }
}
