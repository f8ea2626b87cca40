#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A malicious delegate answering a client (THREAT_MODEL.md): an answer body or a streamed event that never ends is
//! cut at the client's limit with a typed `MESSAGE_TOO_LARGE`, over a real socket, instead of growing the client's
//! memory for as long as the delegate keeps sending.

use ldp_transport_http::ConnectSettings;
use std::time::Duration;

use ldp_session::runtime::Transport;
use ldp_transport_http::{HttpTransport, RetryPolicy};
use ldp_types::{Envelope, codes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the hostile delegate answers every request with, after its head.
#[derive(Clone, Copy)]
enum Answer {
    /// `application/json`, chunked, never ending.
    EndlessJson,
    /// `application/json` declaring a body far over the limit.
    DeclaredHuge,
    /// `text/event-stream` whose one event never ends.
    EndlessEvent,
}

/// Serves one kind of hostile answer on 127.0.0.1; returns its base URL and how many bytes it managed to send.
async fn hostile(answer: Answer) -> (String, tokio::sync::watch::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sent_tx, sent_rx) = tokio::sync::watch::channel(0usize);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sent_tx = sent_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let head: &[u8] = match answer {
                    Answer::EndlessJson => {
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                    }
                    Answer::DeclaredHuge => {
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000000000\r\n\r\n"
                    }
                    Answer::EndlessEvent => {
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                    }
                };
                if socket.write_all(head).await.is_err() {
                    return;
                }
                let mut total = 0usize;
                if matches!(answer, Answer::EndlessEvent) {
                    let start = b"event: envelope\ndata: ";
                    let chunk = format!("{:x}\r\n", start.len());
                    let _ = socket.write_all(chunk.as_bytes()).await;
                    let _ = socket.write_all(start).await;
                    let _ = socket.write_all(b"\r\n").await;
                }
                let piece = vec![b'x'; 16 * 1024];
                // At most 256 MiB, so the test ends even if the client never stopped reading.
                while total < 256 * 1024 * 1024 {
                    let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
                    frame.extend_from_slice(&piece);
                    frame.extend_from_slice(b"\r\n");
                    if socket.write_all(&frame).await.is_err() {
                        break;
                    }
                    total += piece.len();
                    let _ = sent_tx.send(total);
                }
            });
        }
    });
    (url, sent_rx)
}

fn hello() -> Envelope {
    Envelope::from_json(
        r#"{"message_id":"m1","session_id":"","from":"ldp:delegate:client","to":"ldp:delegate:hostile",
            "timestamp":"2026-01-01T00:00:00Z","payload_mode":"text",
            "body":{"type":"HELLO","delegate_id":"ldp:delegate:client","supported_modes":["text"]}}"#,
    )
    .unwrap()
}

fn transport(url: &str) -> HttpTransport {
    HttpTransport::builder(url)
        .max_message(1024 * 1024)
        .retry(RetryPolicy::none())
        .request_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_endless_answer_body_is_cut_at_the_limit() {
    let (url, sent) = hostile(Answer::EndlessJson).await;
    let err = tokio::time::timeout(Duration::from_secs(20), transport(&url).exchange(&hello(), None))
        .await
        .expect("the client gave up by itself")
        .expect_err("an endless body is no answer");
    assert_eq!(err.code, codes::MESSAGE_TOO_LARGE, "{err}");
    assert!(!err.retryable);
    // The client stopped reading near its limit (plus what the socket buffers held), not at the sender's 256 MiB.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(*sent.borrow() < 64 * 1024 * 1024, "the client kept reading: {} bytes", *sent.borrow());
}

#[tokio::test]
async fn a_declared_huge_body_is_refused_before_reading() {
    let (url, _) = hostile(Answer::DeclaredHuge).await;
    let err = tokio::time::timeout(Duration::from_secs(20), transport(&url).exchange(&hello(), None))
        .await
        .expect("the client gave up by itself")
        .expect_err("too large");
    assert_eq!(err.code, codes::MESSAGE_TOO_LARGE, "{err}");
}

#[tokio::test]
async fn an_event_that_never_ends_is_cut_at_the_limit() {
    let (url, sent) = hostile(Answer::EndlessEvent).await;
    // Asking for updates makes the client use /ldp/stream, where the hostile server answers with its endless event.
    let (updates, _rx) = tokio::sync::mpsc::channel(8);
    let err = tokio::time::timeout(Duration::from_secs(20), transport(&url).exchange(&hello(), Some(updates)))
        .await
        .expect("the client gave up by itself")
        .expect_err("an endless event is no answer");
    assert_eq!(err.code, codes::MESSAGE_TOO_LARGE, "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(*sent.borrow() < 64 * 1024 * 1024, "the client kept reading: {} bytes", *sent.borrow());
}
