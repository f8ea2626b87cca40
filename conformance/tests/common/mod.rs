//! Test servers: our own HTTP server (`ldp-transport-http`) around a real `DelegateRuntime`, with a small WebSocket
//! route following the documented binding (`GET /ldp/ws`, one envelope per text frame), and deliberately broken
//! variants, each breaking exactly one thing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ldp_conformance::{Config, KIT_DELEGATE_ID, Report, TransportKind, UNTRUSTED_DOMAIN};
use ldp_session::runtime::{DelegateRuntime, EchoDelegate, Response as RuntimeResponse};
use ldp_session::{
    AuthenticatedPeer, PeerContext, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TrustPolicy,
};
use ldp_transport_http::{HttpServerConfig, HttpState, router_with};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Capability, ClaimType, DelegateId, IdentityCard, LdpError, PayloadMode, Score, TrustDomain, codes};
use serde_json::Value;

pub const DOMAIN: &str = "conformance.test";
pub const TOKEN: &str = "kit-token";
pub const UNTRUSTED_TOKEN: &str = "untrusted-token";
pub const SECRET: &str = "conformance-secret";

/// What to break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// Nothing: the reference good server.
    Nothing,
    /// TASK_RESULT bodies lose their provenance.
    StripProvenance,
    /// The card is not served at /.well-known/ldp-identity (only at /ldp/identity).
    WrongIdentityPath,
    /// The trust policy ignores the initiator's declared domain and assumes the server's own: foreign initiators
    /// are accepted.
    AcceptUntrustedDomains,
    /// A body that is not JSON gets a 500 text/plain, as from a crashed handler.
    CrashOnMalformedJson,
    /// Signs and requires signatures, but has no replay protection.
    IgnoreReplay,
    /// `/ldp/stream` answers with an event stream that ends without the task's TASK_RESULT.
    StreamWithoutResult,
    /// The card declares `supports_streaming`, but there is no `/ldp/stream` (404).
    ClaimsStreamingWithoutEndpoint,
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Setup {
    pub broken: Break,
    pub signing: Option<SignatureAlgorithm>,
    pub tokens: bool,
    /// RFC-diagram fallback (TASK_FAILED, then resubmit) instead of transparent fallback.
    pub explicit_fallback: bool,
}

impl Setup {
    pub fn good() -> Self {
        Self { broken: Break::Nothing, signing: None, tokens: true, explicit_fallback: false }
    }

    pub fn broken(b: Break) -> Self {
        Self { broken: b, ..Self::good() }
    }
}

pub struct Server {
    pub url: String,
    pub setup: Setup,
    join: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.join.abort();
    }
}

pub fn card() -> IdentityCard {
    let mut card = IdentityCard::new(
        DelegateId::new("ldp:delegate:conformance-target").unwrap(),
        "Conformance target",
        "echo",
        "1.0",
    );
    card.description = Some("ldp-conformance self-test delegate".into());
    card.trust_domain = TrustDomain::new(DOMAIN);
    card.context_window = 8192;
    card.capabilities.push(
        Capability::new("echo")
            .with_description("Echoes the input")
            .with_quality(Score::new(0.9).unwrap(), ClaimType::SelfClaimed),
    );
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card.endpoint = "http://127.0.0.1".into();
    card
}

pub fn key(alg: SignatureAlgorithm) -> SigningKey {
    match alg {
        SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_seed(&[7; 32]),
        other => SigningKey::shared_secret(other, SECRET).unwrap(),
    }
}

pub async fn start(setup: Setup) -> Server {
    let mut card = card();
    if setup.broken == Break::ClaimsStreamingWithoutEndpoint
        && let Some(quality) = card.capabilities.first_mut().and_then(|c| c.quality.as_mut())
    {
        quality.supports_streaming = true;
    }
    let mut cfg = ResponderConfig::new(card);
    if setup.explicit_fallback {
        cfg.fallback = ldp_session::FallbackStyle::Explicit;
    }
    if let Some(alg) = setup.signing {
        cfg.security = SecurityConfig::symmetric(key(alg));
        if setup.broken == Break::IgnoreReplay {
            cfg.security.replay = None;
            // Without replay protection the responder still deduplicates message ids; the broken server must not.
            cfg.limits.unsigned_dedupe_entries = 0;
        }
    }
    cfg.trust = if setup.broken == Break::AcceptUntrustedDomains {
        TrustPolicy { declared_domains: ldp_session::DeclaredDomains::Ignore, unidentified_domain: Some(DOMAIN.into()) }
    } else if setup.tokens {
        TrustPolicy::strict()
    } else {
        TrustPolicy::permissive(DOMAIN)
    };
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let mut tokens = HashMap::new();
    if setup.tokens && setup.broken != Break::AcceptUntrustedDomains {
        tokens.insert(
            TOKEN.to_owned(),
            AuthenticatedPeer { delegate_id: Some(KIT_DELEGATE_ID.into()), trust_domain: DOMAIN.into() },
        );
        tokens.insert(
            UNTRUSTED_TOKEN.to_owned(),
            AuthenticatedPeer { delegate_id: None, trust_domain: UNTRUSTED_DOMAIN.into() },
        );
    }
    let http = HttpServerConfig { tokens, ..HttpServerConfig::default() };
    let state = HttpState::new(runtime.clone(), http);
    let ws = Router::new().route("/ldp/ws", get(ws_upgrade));
    let mut app = router_with(state, ws);
    app = match setup.broken {
        Break::StripProvenance => app.layer(middleware::from_fn(strip_provenance)),
        Break::WrongIdentityPath => app.layer(middleware::from_fn(hide_well_known)),
        Break::CrashOnMalformedJson => app.layer(middleware::from_fn(crash_on_malformed)),
        Break::StreamWithoutResult => app.layer(middleware::from_fn(drop_streamed_results)),
        Break::ClaimsStreamingWithoutEndpoint => app.layer(middleware::from_fn(hide_stream)),
        _ => app,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let join = tokio::spawn(async move {
        let reaper = runtime.spawn_reaper();
        let _ = axum::serve(listener, app).await;
        reaper.abort();
    });
    Server { url: format!("http://{addr}"), setup, join }
}

/// A kit configuration for a server started with `setup`.
pub fn config(server: &Server, transports: &[TransportKind]) -> Config {
    let mut c = Config::new(server.url.clone());
    c.transports = transports.to_vec();
    if server.setup.tokens && server.setup.broken != Break::AcceptUntrustedDomains {
        c.token = Some(TOKEN.into());
        c.untrusted_token = Some(UNTRUSTED_TOKEN.into());
    }
    c.signing = server.setup.signing.map(key);
    c.ttl_hint = Some(1);
    c.oversize_bytes = 2 * 1024 * 1024;
    c
}

pub fn explain(report: &Report) -> String {
    let mut out = String::new();
    for r in &report.requirements {
        if !matches!(r.outcome, ldp_conformance::Outcome::Pass | ldp_conformance::Outcome::Skipped) {
            out.push_str(&format!("{} {} {:?}\n", r.id, r.status.as_str(), r.details));
        }
    }
    out
}

// ---- the WebSocket binding (documented contract: GET /ldp/ws, one envelope per text frame) ---------------------

static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

async fn ws_upgrade(
    State(state): State<HttpState>,
    peer: Option<Extension<PeerContext>>,
    ws: WebSocketUpgrade,
) -> Response {
    let mut peer = peer.map(|Extension(p)| p).unwrap_or_default();
    peer.connection = Some(CONNECTIONS.fetch_add(1, Ordering::Relaxed));
    ws.on_upgrade(move |socket| ws_loop(socket, state, peer))
}

fn error_frame(e: &LdpError) -> Message {
    Message::Text(serde_json::json!({ "error": e }).to_string().into())
}

async fn ws_loop(mut socket: WebSocket, state: HttpState, peer: PeerContext) {
    while let Some(Ok(msg)) = socket.recv().await {
        let reply = match msg {
            Message::Text(t) => match state.dispatch(peer.clone(), Bytes::from(t.as_str().to_owned()), None).await {
                Ok(RuntimeResponse::Reply(env)) => env.to_json().ok().map(|j| Message::Text(j.into())),
                Ok(RuntimeResponse::Accepted) => None,
                Ok(RuntimeResponse::Refused(r)) => Some(match r.reply.and_then(|e| e.to_json().ok()) {
                    Some(j) => Message::Text(j.into()),
                    None => error_frame(&r.error),
                }),
                Err(e) => Some(error_frame(&e.to_ldp_error())),
            },
            Message::Binary(_) => Some(error_frame(&LdpError::runtime(
                codes::MALFORMED_MESSAGE,
                "binary frames are not LDP messages; send one JSON envelope per text frame",
            ))),
            Message::Close(_) => break,
            _ => None,
        };
        if let Some(reply) = reply
            && socket.send(reply).await.is_err()
        {
            break;
        }
    }
}

// ---- breakages -------------------------------------------------------------------------------------------------

async fn strip_provenance(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) if v.pointer("/body/type") == Some(&Value::from("TASK_RESULT")) => {
            if let Some(body) = v.get_mut("body").and_then(Value::as_object_mut) {
                body.remove("provenance");
            }
            Bytes::from(serde_json::to_vec(&v).unwrap())
        }
        _ => bytes,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

async fn drop_streamed_results(req: Request, next: Next) -> Response {
    if req.uri().path() != "/ldp/stream" {
        return next.run(req).await;
    }
    let resp = next.run(req).await;
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let mut kept = String::new();
    for event in ldp_transport_http::sse::SseParser::default().push(&bytes) {
        let final_event = event.data.contains("\"TASK_RESULT\"") || event.data.contains("\"TASK_FAILED\"");
        if !final_event {
            kept.push_str(&format!("event: {}\ndata: {}\n\n", event.event, event.data));
        }
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(kept))
}

async fn hide_stream(req: Request, next: Next) -> Response {
    if req.uri().path() == "/ldp/stream" {
        return (StatusCode::NOT_FOUND, "no streaming here").into_response();
    }
    next.run(req).await
}

async fn hide_well_known(req: Request, next: Next) -> Response {
    if req.uri().path() == "/.well-known/ldp-identity" {
        return (StatusCode::NOT_FOUND, "not here").into_response();
    }
    next.run(req).await
}

async fn crash_on_malformed(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    if parts.method == axum::http::Method::POST && serde_json::from_slice::<Value>(&bytes).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], "Internal Server Error")
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}
