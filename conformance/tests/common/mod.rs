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
    // ---- one defect each, written from the RFC (issue 19) --------------------------------------------------------
    /// Signs and requires signatures, but detects replays of SESSION_PROPOSE only (the one type the old probe
    /// replayed): a replayed TASK_SUBMIT runs twice.
    ReplayGuardOnProposeOnly,
    /// A TASK_SUBMIT naming a well-formed UUID that is no established session runs in a session the delegate keeps
    /// open (non-UUID and empty ids are refused, as the old probe expected).
    AcceptsRandomUuidSessions,
    /// The same, on `POST /ldp/stream` only.
    StreamIgnoresSessions,
    /// TASK_RESULTs name another task than the submitted one.
    WrongResultTaskId,
    /// Replies reuse the request's message id.
    EchoRequestMessageId,
    /// SESSION_ACCEPT's envelope names another session than its body.
    AcceptSessionMismatch,
    /// Refusals (HTTP 4xx) are sent as `text/plain` (with the same JSON body).
    TextPlainRefusals,
    /// TASK_RESULTs are answered with HTTP 500 (the body is the TASK_RESULT).
    ResultUnder500,
    /// Every SESSION_PROPOSE is refused: everything needing a session is blocked by LDP-SESS-001.
    RejectAllSessions,
    /// The card is served, but `/ldp/messages` never answers.
    HangMessages,
    /// `required_trust_domain` is compared with `ends_with`: a name ending in the server's domain is accepted.
    SuffixDomainMatch,
    /// The responder's preference order wins: the proposal's modes are taken richest first.
    ResponderPreferenceWins,
    /// The CAPABILITY_MANIFEST declares a capability the card does not.
    ManifestDisagrees,
    /// The CAPABILITY_MANIFEST declares no capabilities at all.
    ManifestEmpty,
    /// Signs, checks replays by message id, but takes any timestamp: an hour-old or future message runs.
    AcceptsStaleTimestamps,
    /// Takes a message signed with another algorithm than its own (the algorithm-confusion downgrade).
    AcceptsOtherAlgorithm,
    /// Takes a signature of the right shape that does not verify: a message changed after signing runs.
    AcceptsTamperedMessages,
    /// Requires signatures on everything but SESSION_CLOSE: an unsigned one closes the session.
    AcceptsUnsignedClose,
    /// Answers an unsigned status query (TASK_UPDATE to the responder) with the task's result.
    AcceptsUnsignedStatusQuery,
    /// Bearer tokens are required on `/ldp/messages`, but `/ldp/stream` takes anyone.
    StreamWithoutAuth,
    /// Bearer tokens are required on HTTP, but the WebSocket upgrade at `/ldp/ws` takes anyone.
    WsWithoutAuth,
    /// The card's `trust_domain` is a bare string (what the liberal decoder accepts), not a TrustDomain object.
    CardTrustDomainString,
    /// The card's `endpoint` is not a URL.
    CardEndpointNotUrl,
    /// The card lists a payload mode the RFC does not define.
    CardUnknownPayloadMode,
    /// Provenance says the result was produced in `semantic_graph`, a mode of neither the request nor the reply.
    FalseModeUsed,
    /// Over WebSocket only: a TASK_SUBMIT naming an unknown well-formed UUID runs in a session the delegate keeps
    /// open (the HTTP binding is correct).
    WsIgnoresSessions,
    /// Not a defect: RFC-valid variants the kit must accept without a warning: `Application/JSON; Charset=UTF-8`,
    /// pretty-printed JSON in another member order, unknown members, `+00:00` offsets, 204 on SESSION_CLOSE, SSE
    /// comments, `id:` and `retry:` lines and data split over several `data:` lines.
    RfcValidVariants,
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
        if matches!(setup.broken, Break::IgnoreReplay | Break::ReplayGuardOnProposeOnly) {
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
    let ws_adversary = matches!(setup.broken, Break::WsIgnoresSessions | Break::RfcValidVariants)
        .then(|| Adversary::new(setup.broken, None));
    let ws = Router::new().route("/ldp/ws", get(ws_upgrade)).layer(Extension(ws_adversary));
    let mut app = router_with(state, ws);
    app = match setup.broken {
        Break::StripProvenance => app.layer(middleware::from_fn(strip_provenance)),
        Break::WrongIdentityPath => app.layer(middleware::from_fn(hide_well_known)),
        Break::CrashOnMalformedJson => app.layer(middleware::from_fn(crash_on_malformed)),
        Break::StreamWithoutResult => app.layer(middleware::from_fn(drop_streamed_results)),
        Break::ClaimsStreamingWithoutEndpoint => app.layer(middleware::from_fn(hide_stream)),
        Break::StreamWithoutAuth => app.layer(middleware::from_fn_with_state("/ldp/stream", let_in_unauthenticated)),
        Break::WsWithoutAuth => app.layer(middleware::from_fn_with_state("/ldp/ws", let_in_unauthenticated)),
        Break::Nothing | Break::AcceptUntrustedDomains | Break::IgnoreReplay | Break::WsIgnoresSessions => app,
        other => app.layer(middleware::from_fn_with_state(Adversary::new(other, setup.signing.map(key)), adversary)),
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
        if !matches!(r.outcome, ldp_conformance::Verdict::Pass | ldp_conformance::Verdict::Skipped) {
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
    Extension(adversary): Extension<Option<Adversary>>,
    ws: WebSocketUpgrade,
) -> Response {
    let mut peer = peer.map(|Extension(p)| p).unwrap_or_default();
    peer.connection = Some(CONNECTIONS.fetch_add(1, Ordering::Relaxed));
    ws.on_upgrade(move |socket| ws_loop(socket, state, peer, adversary))
}

fn error_frame(e: &LdpError) -> Message {
    Message::Text(serde_json::json!({ "error": e }).to_string().into())
}

async fn ws_loop(mut socket: WebSocket, state: HttpState, peer: PeerContext, adversary: Option<Adversary>) {
    while let Some(Ok(msg)) = socket.recv().await {
        let msg = match (msg, &adversary) {
            (Message::Text(t), Some(adv)) if adv.broken == Break::WsIgnoresSessions => {
                match serde_json::from_str::<Value>(t.as_str()) {
                    Ok(mut v) => {
                        if ignore_sessions(adv, &mut v, true) {
                            // The kept session's close is acknowledged and ignored.
                            let ack = Message::Text(serde_json::json!({ "accepted": true }).to_string().into());
                            if socket.send(ack).await.is_err() {
                                break;
                            }
                            continue;
                        }
                        Message::Text(v.to_string().into())
                    }
                    Err(_) => Message::Text(t),
                }
            }
            (msg, _) => msg,
        };
        let reply = match msg {
            Message::Text(t) => match state.dispatch(peer.clone(), Bytes::from(t.as_str().to_owned()), None).await {
                Ok(RuntimeResponse::Reply(env)) => match (&adversary, env.to_value()) {
                    (Some(adv), Ok(v)) if adv.broken == Break::RfcValidVariants => {
                        Some(Message::Text(String::from_utf8(variant_json(v)).unwrap().into()))
                    }
                    (Some(adv), Ok(v)) => {
                        remember_session(adv, &v);
                        env.to_json().ok().map(|j| Message::Text(j.into()))
                    }
                    _ => env.to_json().ok().map(|j| Message::Text(j.into())),
                },
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
    for event in ldp_transport_http::sse::SseParser::default().push(&bytes).unwrap_or_default() {
        let final_event = event.data.contains("\"TASK_RESULT\"") || event.data.contains("\"TASK_FAILED\"");
        if !final_event {
            kept.push_str(&format!("event: {}\ndata: {}\n\n", event.event, event.data));
        }
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(kept))
}

/// Whether the `broken` delegate takes the signed (or unsigned) request `r` that a correct one refuses.
fn lets_through(broken: Break, r: &Value, key: &SigningKey, req_type: Option<&str>) -> bool {
    let algorithm = r.get("signature_algorithm").and_then(Value::as_str);
    let signature = r.get("signature").and_then(Value::as_str).unwrap_or_default();
    let own = key.algorithm().as_str();
    match broken {
        Break::AcceptsStaleTimestamps => {
            let at = r.get("timestamp").and_then(Value::as_str).and_then(|t| ldp_types::time::parse_timestamp(t).ok());
            let skew = at.map(|at| (time::OffsetDateTime::now_utc() - at).whole_seconds().abs());
            algorithm == Some(own) && skew.is_some_and(|s| s > 300)
        }
        Break::AcceptsOtherAlgorithm => algorithm.is_some_and(|a| a != own && a != "none") && !signature.is_empty(),
        Break::AcceptsTamperedMessages => {
            let well_formed = !signature.is_empty() && signature.bytes().all(|b| b.is_ascii_hexdigit());
            well_formed && algorithm == Some(own) && ldp_types::signing::verify_value(r, &key.verifying_key()).is_err()
        }
        Break::AcceptsUnsignedClose => {
            req_type == Some("SESSION_CLOSE") && r.get("signature").is_none_or(Value::is_null)
        }
        Break::AcceptsUnsignedStatusQuery => {
            req_type == Some("TASK_UPDATE") && r.get("signature").is_none_or(Value::is_null)
        }
        _ => false,
    }
}

/// Requests to `path` without credentials pass as if authenticated: the one endpoint a broken server forgot.
async fn let_in_unauthenticated(State(path): State<&'static str>, mut req: Request, next: Next) -> Response {
    if req.uri().path() == path && req.headers().get(header::AUTHORIZATION).is_none() {
        let peer = AuthenticatedPeer { delegate_id: Some(KIT_DELEGATE_ID.into()), trust_domain: DOMAIN.into() };
        req.extensions_mut().insert(PeerContext {
            authenticated: Some(peer),
            principal: Some("anyone".into()),
            ..PeerContext::default()
        });
    }
    next.run(req).await
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

// ---- the adversary: one defect per delegate, on the HTTP binding ----------------------------------------------

/// What the adversarial middleware remembers across requests.
#[derive(Clone)]
pub struct Adversary {
    broken: Break,
    /// The delegate's key, to re-sign a message it rewrites.
    key: Option<SigningKey>,
    /// Message ids of SESSION_PROPOSEs seen (ReplayGuardOnProposeOnly).
    proposals: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Sessions the delegate accepted, and the first one, which it keeps open (AcceptsRandomUuidSessions).
    sessions: Arc<std::sync::Mutex<(Vec<String>, Option<String>)>>,
}

impl Adversary {
    fn new(broken: Break, key: Option<SigningKey>) -> Self {
        Self { broken, key, proposals: Arc::default(), sessions: Arc::default() }
    }
}

/// Appended to the task id of a replayed TASK_SUBMIT (ReplayGuardOnProposeOnly), and taken off its result.
const REPLAYED: &str = "-replayed";

fn typed_error_response(status: StatusCode, error: &LdpError) -> Response {
    let body = serde_json::json!({ "error": error }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Rewrites every `...Z` RFC 3339 timestamp as `...+00:00` (the same instant).
fn offset_timestamps(v: &mut Value) {
    match v {
        Value::String(s) if s.ends_with('Z') && ldp_types::time::parse_timestamp(s).is_ok() => {
            s.pop();
            s.push_str("+00:00");
        }
        Value::Array(a) => a.iter_mut().for_each(offset_timestamps),
        Value::Object(o) => o.values_mut().for_each(offset_timestamps),
        _ => {}
    }
}

/// An RFC-valid variant of a JSON reply: `+00:00` offsets, an unknown member, pretty-printed in sorted member order.
fn variant_json(mut v: Value) -> Vec<u8> {
    offset_timestamps(&mut v);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("x_vendor_extension".into(), serde_json::json!({ "note": "unknown members are ignored" }));
    }
    serde_json::to_vec_pretty(&v).unwrap()
}

/// For the session-ignoring delegates: keeps the first accepted session open (its SESSION_CLOSE is swallowed: returns
/// true) and runs a TASK_SUBMIT naming an unknown well-formed UUID in it, when `applies`.
fn ignore_sessions(adv: &Adversary, request: &mut Value, applies: bool) -> bool {
    let ty = request.pointer("/body/type").and_then(Value::as_str).map(str::to_owned);
    let sid = request.get("session_id").and_then(Value::as_str).map(str::to_owned);
    let (known, pinned) = adv.sessions.lock().unwrap().clone();
    if ty.as_deref() == Some("SESSION_CLOSE") && sid.is_some() && sid == pinned {
        return true;
    }
    if applies
        && ty.as_deref() == Some("TASK_SUBMIT")
        && let (Some(sid), Some(pinned)) = (sid, pinned)
        && uuid::Uuid::parse_str(&sid).is_ok()
        && !known.contains(&sid)
    {
        request["session_id"] = Value::String(pinned);
    }
    false
}

/// Records the session a SESSION_ACCEPT reply establishes (the first one is kept open by the session-ignoring
/// delegates).
fn remember_session(adv: &Adversary, reply: &Value) {
    if reply.pointer("/body/type").and_then(Value::as_str) == Some("SESSION_ACCEPT")
        && let Some(sid) = reply.pointer("/body/session_id").and_then(Value::as_str)
    {
        let mut sessions = adv.sessions.lock().unwrap();
        sessions.0.push(sid.to_owned());
        if sessions.1.is_none() {
            sessions.1 = Some(sid.to_owned());
        }
    }
}

async fn adversary(State(adv): State<Adversary>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/ldp/ws" {
        // The WebSocket binding's adversary lives in `ws_loop`; the upgrade passes untouched.
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let mut request = serde_json::from_slice::<Value>(&bytes).ok();
    let req_type = request.as_ref().and_then(|r| r.pointer("/body/type")).and_then(Value::as_str).map(str::to_owned);
    let req_id = request.as_ref().and_then(|r| r.get("message_id")).and_then(Value::as_str).map(str::to_owned);
    let is_message = path == "/ldp/messages" || path == "/ldp/stream";
    match adv.broken {
        Break::HangMessages if is_message => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        Break::ReplayGuardOnProposeOnly => {
            let seen = req_id.as_ref().is_some_and(|id| !adv.proposals.lock().unwrap().insert(id.clone()));
            match req_type.as_deref() {
                Some("SESSION_PROPOSE") if seen => {
                    return typed_error_response(
                        StatusCode::UNAUTHORIZED,
                        &LdpError::security(codes::REPLAY_DETECTED, "this proposal was seen before"),
                    );
                }
                // The copy of a task runs again (as for a delegate that keys tasks by message, not by task id); its
                // result names the task the initiator submitted.
                Some("TASK_SUBMIT") if seen => {
                    if let Some(r) = request.as_mut() {
                        let task = r["body"]["task_id"].as_str().unwrap_or_default().to_owned();
                        r["body"]["task_id"] = Value::String(format!("{task}{REPLAYED}"));
                        if let Some(k) = &adv.key
                            && let Ok(mut env) = ldp_types::Envelope::from_value(r.clone())
                        {
                            ldp_types::signing::sign(&mut env, k).unwrap();
                            *r = env.to_value().unwrap();
                        }
                    }
                }
                _ => {}
            }
        }
        Break::SuffixDomainMatch | Break::ResponderPreferenceWins if req_type.as_deref() == Some("SESSION_PROPOSE") => {
            if let Some(config) = request.as_mut().and_then(|r| r.pointer_mut("/body/config")) {
                if adv.broken == Break::SuffixDomainMatch
                    && let Some(required) = config.get("required_trust_domain").and_then(Value::as_str)
                    && required.ends_with(DOMAIN)
                {
                    config["required_trust_domain"] = Value::String(DOMAIN.into());
                }
                if adv.broken == Break::ResponderPreferenceWins
                    && let Some(modes) = config.get_mut("preferred_payload_modes").and_then(Value::as_array_mut)
                {
                    let rank =
                        |m: &Value| m.as_str().and_then(|s| s.parse::<PayloadMode>().ok()).map_or(0, |m| m.number());
                    modes.sort_by_key(|m| std::cmp::Reverse(rank(m)));
                }
            }
        }
        Break::AcceptsStaleTimestamps
        | Break::AcceptsOtherAlgorithm
        | Break::AcceptsTamperedMessages
        | Break::AcceptsUnsignedClose
        | Break::AcceptsUnsignedStatusQuery => {
            if let (Some(r), Some(key)) = (request.as_mut(), &adv.key)
                && lets_through(adv.broken, r, key, req_type.as_deref())
                && let Ok(mut env) = ldp_types::Envelope::from_value(r.clone())
            {
                // What this delegate lets through is made to pass the responder's own check.
                env.timestamp = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
                env.signature = None;
                env.signature_algorithm = None;
                ldp_types::signing::sign(&mut env, key).unwrap();
                *r = env.to_value().unwrap();
            }
        }
        Break::RejectAllSessions if req_type.as_deref() == Some("SESSION_PROPOSE") => {
            return typed_error_response(
                StatusCode::FORBIDDEN,
                &LdpError::policy(codes::SESSION_REJECTED, "this delegate accepts no sessions"),
            );
        }
        Break::AcceptsRandomUuidSessions | Break::StreamIgnoresSessions => {
            let applies = adv.broken == Break::AcceptsRandomUuidSessions || path == "/ldp/stream";
            if let Some(r) = request.as_mut()
                && ignore_sessions(&adv, r, applies)
            {
                return StatusCode::NO_CONTENT.into_response();
            }
        }
        _ => {}
    }
    let rewrites = matches!(
        adv.broken,
        Break::AcceptsRandomUuidSessions
            | Break::StreamIgnoresSessions
            | Break::ReplayGuardOnProposeOnly
            | Break::SuffixDomainMatch
            | Break::ResponderPreferenceWins
            | Break::AcceptsStaleTimestamps
            | Break::AcceptsOtherAlgorithm
            | Break::AcceptsTamperedMessages
            | Break::AcceptsUnsignedClose
            | Break::AcceptsUnsignedStatusQuery
    );
    let forwarded = match &request {
        Some(r) if rewrites => Bytes::from(serde_json::to_vec(r).unwrap()),
        _ => bytes,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    let resp = next.run(Request::from_parts(parts, Body::from(forwarded))).await;

    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    let is_sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if is_sse {
        if adv.broken == Break::RfcValidVariants {
            let mut out = String::from(": an SSE comment before the first event\nretry: 1000\n\n");
            for (i, event) in
                ldp_transport_http::sse::SseParser::default().push(&bytes).unwrap_or_default().into_iter().enumerate()
            {
                out.push_str(&format!(": event {i}\nid: {i}\nevent: {}\n", event.event));
                let data = serde_json::from_str::<Value>(&event.data)
                    .map(|v| String::from_utf8(variant_json(v)).unwrap())
                    .unwrap_or(event.data);
                for line in data.lines() {
                    out.push_str(&format!("data: {line}\n"));
                }
                out.push('\n');
            }
            parts.headers.insert(header::CONTENT_TYPE, "Text/Event-Stream; Charset=UTF-8".parse().unwrap());
            return Response::from_parts(parts, Body::from(out));
        }
        return Response::from_parts(parts, Body::from(bytes));
    }
    let Ok(mut reply) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let reply_type = reply.pointer("/body/type").and_then(Value::as_str).map(str::to_owned);
    remember_session(&adv, &reply);
    if let Some(task) = reply.pointer("/body/task_id").and_then(Value::as_str)
        && let Some(original) = task.strip_suffix(REPLAYED)
    {
        reply["body"]["task_id"] = Value::String(original.to_owned());
    }
    if reply.get("delegate_id").is_some() && reply.get("body").is_none() {
        match adv.broken {
            Break::CardTrustDomainString => reply["trust_domain"] = Value::String(DOMAIN.into()),
            Break::CardEndpointNotUrl => reply["endpoint"] = Value::String("the conformance target".into()),
            Break::CardUnknownPayloadMode => {
                if let Some(modes) = reply["supported_payload_modes"].as_array_mut() {
                    modes.push(Value::String("telepathy".into()));
                }
            }
            _ => {}
        }
    }
    match adv.broken {
        Break::ManifestEmpty if reply_type.as_deref() == Some("CAPABILITY_MANIFEST") => {
            let caps = &mut reply["body"]["capabilities"];
            if let Some(list) = caps.as_array_mut() {
                list.clear();
            } else if let Some(list) = caps.get_mut("capabilities").and_then(Value::as_array_mut) {
                list.clear();
            }
        }
        Break::ManifestDisagrees if reply_type.as_deref() == Some("CAPABILITY_MANIFEST") => {
            let extra = serde_json::json!({ "name": "undeclared-on-the-card", "description": "not on the card" });
            let caps = &mut reply["body"]["capabilities"];
            if let Some(list) = caps.as_array_mut() {
                list.push(extra);
            } else if let Some(list) = caps.get_mut("capabilities").and_then(Value::as_array_mut) {
                list.push(extra);
            }
        }
        Break::FalseModeUsed if reply_type.as_deref() == Some("TASK_RESULT") => {
            reply["body"]["provenance"]["payload_mode_used"] = Value::String("semantic_graph".into());
        }
        Break::WrongResultTaskId if reply_type.as_deref() == Some("TASK_RESULT") => {
            reply["body"]["task_id"] = Value::String("task-someone-else".into());
        }
        Break::EchoRequestMessageId if reply_type.is_some() => {
            if let Some(id) = &req_id {
                reply["message_id"] = Value::String(id.clone());
            }
        }
        Break::AcceptSessionMismatch if reply_type.as_deref() == Some("SESSION_ACCEPT") => {
            reply["session_id"] = Value::String(uuid::Uuid::new_v4().to_string());
        }
        Break::TextPlainRefusals if parts.status.is_client_error() => {
            parts.headers.insert(header::CONTENT_TYPE, "text/plain; charset=utf-8".parse().unwrap());
        }
        Break::ResultUnder500 if reply_type.as_deref() == Some("TASK_RESULT") => {
            parts.status = StatusCode::INTERNAL_SERVER_ERROR;
        }
        Break::RfcValidVariants => {
            if req_type.as_deref() == Some("SESSION_CLOSE") && parts.status.is_success() {
                return StatusCode::NO_CONTENT.into_response();
            }
            parts.headers.insert(header::CONTENT_TYPE, "Application/JSON; Charset=UTF-8".parse().unwrap());
            return Response::from_parts(parts, Body::from(variant_json(reply)));
        }
        _ => {}
    }
    Response::from_parts(parts, Body::from(serde_json::to_vec(&reply).unwrap()))
}
