#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The front door end to end over real sockets: typed skills, the derived card, input extraction, streaming, the
//! WebSocket binding on the same port.

use std::sync::Arc;

use ldp::{Answer, ConnectSettings, Delegate, Error, Event, LdpError, Output, TaskContext};
use ldp_session::runtime::Client;
use ldp_session::{InitiatorConfig, SeededIds, SystemClock};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Deserialize, JsonSchema)]
struct Sum {
    a: i64,
    b: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
struct Total {
    total: i64,
}

async fn server() -> ldp::Server {
    Delegate::builder("ldp:delegate:calc")
        .model("arith", "2")
        .skill("add", |input: Sum, _cx: TaskContext| async move { Ok(Total { total: input.a + input.b }) })
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .skill("count", |input: String, cx: TaskContext| async move {
            for word in input.split(' ') {
                cx.partial(word);
            }
            Ok(Output::new(json!(input.split(' ').count())).tokens(7).confidence(0.5))
        })
        .spawn("127.0.0.1:0")
        .await
        .unwrap()
}

#[tokio::test]
async fn the_card_is_derived_from_the_skills() {
    let server = server().await;
    let calc = ldp::connect(server.url()).await.unwrap();
    let card = calc.card();
    let names: Vec<&str> = card.capabilities.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["add", "upper", "count"]);
    let add = &card.capabilities[0];
    let input = add.input_schema.as_ref().unwrap();
    assert_eq!(input["properties"]["a"]["type"], "integer", "{input}");
    assert_eq!(add.output_schema.as_ref().unwrap()["properties"]["total"]["type"], "integer");
    assert_eq!(card.capabilities[1].input_schema.as_ref().unwrap()["type"], "string");
    assert_eq!(card.capabilities[2].output_schema, None, "a full Output gives no schema");
    assert_eq!((card.model_family.as_str(), card.model_version.as_str()), ("arith", "2"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn calls_are_typed_both_ways_and_reuse_one_session() {
    let server = server().await;
    let calc = ldp::connect(server.url()).await.unwrap();
    let sum: Answer<Total> = calc.call("add", json!({ "a": 2, "b": 40 })).await.unwrap();
    assert_eq!(sum.output, Total { total: 42 });
    assert_eq!(sum.provenance.model_version, "2");
    let session = calc.session().await.unwrap();
    assert_eq!(sum.provenance.session_id.as_deref(), Some(session.as_str()));
    let up: Answer<String> = calc.call("upper", "hi").await.unwrap();
    assert_eq!(up.output, "HI");
    assert_eq!(up.provenance.session_id.as_deref(), Some(session.as_str()), "the session is reused");
    // An input that does not fit the skill's type: a typed capability error.
    let err = calc.call::<Total>("add", json!({ "a": "two" })).await.unwrap_err();
    let Error::Session(ldp_session::SessionError::Peer(e)) = err else { panic!("{err:?}") };
    assert_eq!((e.code.as_str(), e.category), (ldp::INVALID_INPUT, ldp_types::ErrorCategory::Capability));
    // An output that does not fit the type asked for.
    assert!(matches!(calc.call::<Total>("upper", "x").await, Err(Error::Output(_))));
    // After a close the next call opens a new session.
    calc.close().await.unwrap();
    let up: Answer<String> = calc.call("upper", "again").await.unwrap();
    assert_ne!(up.provenance.session_id.as_deref(), Some(session.as_str()));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stream_yields_partial_output_then_the_answer() {
    let server = server().await;
    let calc = ldp::connect(server.url()).await.unwrap();
    let mut stream = calc.stream("count", "one two three").await.unwrap();
    let mut chunks = Vec::new();
    let done = loop {
        match stream.next().await.unwrap().unwrap() {
            Event::Partial(chunk) => chunks.push(chunk.parse::<String>().unwrap()),
            Event::Done(answer) => break answer,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(chunks, ["one", "two", "three"]);
    assert_eq!(done.output, json!(3));
    assert_eq!(done.provenance.tokens_used, Some(7));
    assert!(stream.next().await.is_none());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn websocket_is_served_on_the_same_port() {
    let server = server().await;
    let transport =
        ldp_transport_ws::WsTransport::connect(server.url(), ldp_transport_ws::WsOptions::default()).await.unwrap();
    let client = Client::connect(
        transport,
        InitiatorConfig::new("ldp:delegate:ws"),
        Arc::new(SystemClock),
        Box::new(SeededIds::new(1)),
    )
    .await
    .unwrap();
    let s = client.propose(Default::default()).await.unwrap();
    let out = client.submit(&s.session_id, "upper", json!("ws"), None).await.unwrap();
    assert_eq!(out.output, json!("WS"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn declaring_a_skill_twice_or_a_bad_id_is_refused() {
    let twice = Delegate::builder("ldp:delegate:x")
        .skill("a", |i: String, _cx: TaskContext| async move { Ok::<_, LdpError>(i) })
        .skill("a", |i: String, _cx: TaskContext| async move { Ok::<_, LdpError>(i) });
    assert!(matches!(twice.runtime(), Err(Error::DuplicateSkill(name)) if name == "a"));
    assert!(matches!(Delegate::builder("upper").runtime(), Err(Error::InvalidDelegateId(_))));
}

#[tokio::test]
async fn the_router_mounts_in_an_app_of_ones_own() {
    let app = Delegate::builder("ldp:delegate:mounted")
        .skill("upper", |i: String, _cx: TaskContext| async move { Ok(i.to_uppercase()) })
        .router()
        .unwrap()
        .route("/hello", axum::routing::get(|| async { "mine" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    let up: Answer<String> = ldp::connect(url).await.unwrap().call("upper", "mounted").await.unwrap();
    assert_eq!(up.output, "MOUNTED");
    serving.abort();
}

/// Issue 50: a skill's description and examples reach the card.
#[tokio::test]
async fn skills_carry_their_description_and_examples_on_the_card() {
    let server = Delegate::builder("ldp:delegate:described")
        .skill("add", |input: Sum, _cx: TaskContext| async move { Ok(Total { total: input.a + input.b }) })
        .describe("Adds two integers.")
        .example(json!({"a": 1, "b": 2}))
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let card = ldp::connect(server.url()).await.unwrap().card().clone();
    let add = &card.capabilities[0];
    assert_eq!(add.description.as_deref(), Some("Adds two integers."));
    assert_eq!(add.input_schema.as_ref().unwrap()["examples"], json!([{"a": 1, "b": 2}]));
    assert_eq!(card.capabilities[1].description, None, "only the skill declared before describe()");
    server.shutdown().await.unwrap();
}

/// Issue 50: a graceful shutdown lets a running task finish within the grace, refuses new sessions meanwhile, and
/// answers a task past the grace TASK_FAILED `CANCELLED` (retryable) before the server ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_tasks_up_to_the_grace() {
    let slow = |grace_ms: u64, work_ms: u64| {
        Delegate::builder("ldp:delegate:slow")
            .shutdown_grace(std::time::Duration::from_millis(grace_ms))
            .skill("wait", move |input: String, _cx: TaskContext| async move {
                tokio::time::sleep(std::time::Duration::from_millis(work_ms)).await;
                Ok(input)
            })
            .spawn("127.0.0.1:0")
    };
    // Within the grace: the answer is the result.
    let server = slow(5_000, 600).await.unwrap();
    let client = ldp::connect(server.url()).await.unwrap();
    let call = tokio::spawn(async move { client.call::<String>("wait", "done").await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let url = server.url();
    let stopping = tokio::spawn(server.shutdown());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let late = ldp::connect(&url).await.unwrap().call::<String>("wait", "late").await;
    match late {
        Err(Error::Session(ldp_session::SessionError::Peer(e))) => {
            assert_eq!((e.code.as_str(), e.retryable), ("CAPACITY_EXCEEDED", true), "{e:?}")
        }
        other => panic!("a new session while draining: {other:?}"),
    }
    assert_eq!(call.await.unwrap().unwrap().output, "done");
    stopping.await.unwrap().unwrap();

    // Past the grace: cancelled, retryable, and the server still ends.
    let server = slow(300, 30_000).await.unwrap();
    let client = ldp::connect(server.url()).await.unwrap();
    let call = tokio::spawn(async move { client.call::<String>("wait", "never").await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    tokio::time::timeout(std::time::Duration::from_secs(10), server.shutdown()).await.unwrap().unwrap();
    match call.await.unwrap() {
        Err(Error::Session(ldp_session::SessionError::Peer(e))) => {
            assert_eq!((e.code.as_str(), e.retryable), ("CANCELLED", true), "{e:?}");
        }
        other => panic!("a task past the grace: {other:?}"),
    }
}

/// A shutdown closes the store: when it returns, the SQLite file is settled (its WAL checkpointed and removed, as
/// the last connection's close does) and the directory holding it can be removed at once. The store's threads used
/// to end only when the last clone of the runtime dropped, some time after, and a caller removing the directory
/// raced them (`DirectoryNotEmpty`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_the_sqlite_file_settled_and_its_directory_removable() {
    let dir = std::env::temp_dir().join(format!("ldp-front-door-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Delegate::builder("ldp:delegate:stored")
        .store(format!("sqlite:{}", dir.join("state.db").display()))
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let client = ldp::connect(server.url()).await.unwrap();
    for word in ["kept", "written"] {
        assert_eq!(client.call::<String>("upper", word).await.unwrap().output, word.to_uppercase());
    }
    // The client's connection stays open through the shutdown, as a peer's may.
    server.shutdown().await.unwrap();
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["state.db"], "the WAL outlived the shutdown");
    std::fs::remove_dir_all(&dir).unwrap();
    drop(client);
}

/// Issue 50: one set of client options over either transport, chosen by the URL's scheme: a delegate that wants a
/// token and signs is called over HTTP and WebSocket alike; a wrong token, no signing key and an unknown scheme are
/// each a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_with_takes_token_signing_and_the_transport_from_the_url() {
    use ldp::ClientOptions;
    use ldp_types::signing::{SignatureAlgorithm, SigningKey};
    let key = || SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "front door secret").unwrap();
    let server = Delegate::builder("ldp:delegate:guarded")
        .trust_domain("acme")
        .token("tok-1", "acme")
        .signing_key(key())
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let options = || {
        ClientOptions::new()
            .bearer_token("tok-1")
            .signing_key(key())
            .delegate_id("ldp:delegate:caller")
            .request_timeout(std::time::Duration::from_secs(10))
    };
    let ws_url = server.url().replacen("http://", "ws://", 1);
    for url in [server.url(), ws_url.clone()] {
        let conn = ldp::connect_with(&url, options()).await.unwrap();
        let up: Answer<String> = conn.call("upper", "over either").await.unwrap();
        assert_eq!(up.output, "OVER EITHER", "{url}");
        // The same connection streams too.
        let mut stream = conn.stream("upper", "streamed").await.unwrap();
        let mut last = None;
        while let Some(event) = stream.next().await {
            last = Some(event.unwrap());
        }
        assert!(matches!(last, Some(Event::Done(_))), "{url}");
    }
    // A wrong token: refused before any session, over HTTP and WebSocket.
    for url in [server.url(), ws_url] {
        let wrong = ClientOptions::new().bearer_token("tok-2").signing_key(key());
        let refused = match ldp::connect_with(&url, wrong).await {
            Ok(conn) => conn.call::<String>("upper", "x").await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(refused.is_err(), "{url}: a wrong token was served");
    }
    // No signing key: the delegate requires signatures.
    let unsigned = ldp::connect_with(server.url(), ClientOptions::new().bearer_token("tok-1")).await;
    let refused = match unsigned {
        Ok(conn) => conn.call::<String>("upper", "x").await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(refused.is_err(), "an unsigned call was served");
    assert!(matches!(
        ldp::connect_with("ftp://127.0.0.1:1", ClientOptions::new()).await,
        Err(Error::UnsupportedScheme(_))
    ));
    server.shutdown().await.unwrap();
}

/// What the builder's configuration bounds is bounded over WebSocket too: the body limit (the WebSocket binding
/// used its own default of 1 MiB) and the session limits (the machine's, whichever binding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_set_through_the_builder_hold_over_websocket() {
    let limits = ldp::Limits { max_sessions_per_principal: 1, ..ldp::Limits::default() };
    let mut builder = Delegate::builder("ldp:delegate:bounded")
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .limits(limits);
    builder.config_mut().max_body = 4096;
    let server = builder.spawn("127.0.0.1:0").await.unwrap();
    let ws_url = server.url().replacen("http", "ws", 1);
    let options = || ldp::ClientOptions::new().retry(ldp::RetryPolicy::none());

    let first = ldp::connect_with(&ws_url, options()).await.unwrap();
    let small: Answer<String> = first.call("upper", "small").await.unwrap();
    assert_eq!(small.output, "SMALL");
    // A second session of the same peer (127.0.0.1) is one too many.
    let second = ldp::connect_with(&ws_url, options()).await.unwrap();
    match second.session().await {
        Err(Error::Session(e)) => assert!(e.to_string().contains("CAPACITY_EXCEEDED"), "{e}"),
        other => panic!("a second session was not refused: {other:?}"),
    }
    // A message beyond the body limit is refused over WebSocket as over HTTP.
    let large = "x".repeat(8 * 1024);
    assert!(first.call::<String>("upper", &large).await.is_err(), "an 8 KiB message passed a 4 KiB limit over ws");
    server.shutdown().await.unwrap();
}

/// Hands out the tokens of a list in turn, then fails: shows that the client asks before every request.
#[derive(Debug)]
struct ListedTokens(std::sync::Mutex<std::collections::VecDeque<&'static str>>);

#[async_trait::async_trait]
impl ldp::TokenSource for ListedTokens {
    async fn token(&self) -> Result<String, LdpError> {
        let next = self.0.lock().unwrap().pop_front();
        next.map(str::to_owned).ok_or_else(|| LdpError::identity("UNAUTHENTICATED", "the token source ran dry"))
    }
}

/// A token source is asked for every HTTP request and every WebSocket connection; a token the delegate does not
/// know, or a source that fails, fails the call with a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_source_is_asked_for_every_request_and_connection() {
    let server = Delegate::builder("ldp:delegate:rotating")
        .token("tok-a", "default")
        .token("tok-b", "default")
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let source = |tokens: Vec<&'static str>| ListedTokens(std::sync::Mutex::new(tokens.into()));
    let options = |tokens| ldp::ClientOptions::new().retry(ldp::RetryPolicy::none()).token_source(source(tokens));

    // HTTP: the identity request, HELLO, SESSION_PROPOSE and TASK_SUBMIT each ask once.
    let ok = "tok-a";
    let http = ldp::connect_with(server.url(), options(vec![ok, ok, ok, "wrong"])).await.unwrap();
    match http.call::<String>("upper", "one").await {
        Err(e) => assert!(e.to_string().contains("UNAUTHENTICATED"), "{e}"),
        Ok(_) => panic!("the fourth request did not carry the source's fourth token"),
    }
    let http = ldp::connect_with(server.url(), options(vec![ok, ok, ok, ok])).await.unwrap();
    assert_eq!(http.call::<String>("upper", "one").await.unwrap().output, "ONE");
    match http.call::<String>("upper", "two").await {
        Err(e) => assert!(e.to_string().contains("ran dry"), "{e}"),
        Ok(_) => panic!("a request went out without asking the source"),
    }

    // WebSocket: the connection and the identity request ask; later messages ride the open connection.
    let ws_url = server.url().replacen("http", "ws", 1);
    let ws = ldp::connect_with(&ws_url, options(vec!["tok-b", "tok-b"])).await.unwrap();
    assert_eq!(ws.call::<String>("upper", "over ws").await.unwrap().output, "OVER WS");
    assert_eq!(ws.call::<String>("upper", "again").await.unwrap().output, "AGAIN");
    assert!(ldp::connect_with(&ws_url, options(vec!["wrong", ok])).await.is_err(), "a wrong upgrade token passed");
    server.shutdown().await.unwrap();
}

/// A skill whose types are known only at run time (a binding to another language) declares its schemas itself.
#[tokio::test]
async fn schemas_set_at_run_time_replace_the_derived_ones() {
    let input = json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let output = json!({"type": "array", "items": {"type": "string"}});
    let server = Delegate::builder("ldp:delegate:dynamic")
        .skill("split", |input: serde_json::Value, _cx: TaskContext| async move {
            Ok(Output::new(json!(input["q"].as_str().unwrap_or_default().split(' ').collect::<Vec<_>>())))
        })
        .input_schema(input.clone())
        .output_schema(output.clone())
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let skill = &server.card().capabilities[0];
    assert_eq!((skill.input_schema.as_ref(), skill.output_schema.as_ref()), (Some(&input), Some(&output)));
    let conn = ldp::connect(server.url()).await.unwrap();
    assert_eq!(conn.card().capabilities[0].input_schema.as_ref(), Some(&input));
    let answer: Answer<Vec<String>> = conn.call("split", json!({"q": "a b"})).await.unwrap();
    assert_eq!(answer.output, ["a", "b"]);
    server.shutdown().await.unwrap();
}

/// A streamed task is cancelled through its canceller while another future waits on the stream: the stream ends
/// with the delegate's CANCELLED, and the skill sees its cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_task_is_cancelled_while_the_stream_is_awaited() {
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<()>();
    let seen = Arc::new(std::sync::Mutex::new(Some(seen_tx)));
    let server = Delegate::builder("ldp:delegate:slow")
        .skill("wait", move |_input: String, cx: TaskContext| {
            let seen = seen.clone();
            async move {
                cx.partial("started");
                cx.cancelled().await;
                if let Some(tx) = seen.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                Ok("never seen".to_owned())
            }
        })
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    for url in [server.url(), server.url().replacen("http", "ws", 1)] {
        let conn = ldp::connect(url).await.unwrap();
        let mut stream = conn.stream("wait", "x").await.unwrap();
        assert!(matches!(stream.next().await, Some(Ok(Event::Partial(_)))));
        let canceller = stream.canceller();
        let waiting = tokio::spawn(async move { stream.next().await });
        canceller.cancel().await.unwrap();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await.unwrap().unwrap();
        match ended {
            Some(Err(Error::Session(ldp::session::SessionError::Peer(e)))) => assert_eq!(e.code, "CANCELLED"),
            other => panic!("expected CANCELLED, got {other:?}"),
        }
        // Cancelling again, once the task has ended, changes nothing.
        canceller.cancel().await.unwrap();
    }
    tokio::time::timeout(std::time::Duration::from_secs(10), seen_rx).await.unwrap().unwrap();
    server.shutdown().await.unwrap();
}
