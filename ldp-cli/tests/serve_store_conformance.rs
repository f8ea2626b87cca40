//! The conformance kit against two `ldp serve` replicas on one Redis behind a round-robin proxy (issue 17): every
//! request goes to the other replica than the one before, so each session is proposed on one and used on both.
//! Every MUST and SHOULD requirement over HTTP, signed, must pass as it does against one server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::{read_report, serve};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, Response, StatusCode, header};
use ldp_store::test_redis::RedisServer;

/// A reverse proxy on a free loopback port sending each request to the next of `backends` in turn (bodies and
/// streamed answers passed through); returns its URL.
async fn round_robin(backends: Vec<String>) -> String {
    let next = Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let hop_by_hop = [header::HOST, header::CONNECTION, header::TRANSFER_ENCODING, header::CONTENT_LENGTH];
    let skip = move |name: &HeaderName| hop_by_hop.contains(name);
    let app = axum::Router::new().fallback(move |req: Request| {
        let (next, client, backends) = (next.clone(), client.clone(), backends.clone());
        async move {
            let backend = &backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
            let (parts, body) = req.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
                return Response::builder().status(StatusCode::BAD_REQUEST).body(Body::empty()).unwrap();
            };
            let mut request = client.request(parts.method, format!("{backend}{path}")).body(bytes);
            for (name, value) in &parts.headers {
                if !skip(name) {
                    request = request.header(name, value);
                }
            }
            match request.send().await {
                Ok(answer) => {
                    let mut response = Response::builder().status(answer.status());
                    for (name, value) in answer.headers() {
                        if !skip(name) {
                            response = response.header(name, value);
                        }
                    }
                    response.body(Body::from_stream(answer.bytes_stream())).unwrap()
                }
                Err(_) => Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_passes_against_two_replicas_behind_a_round_robin_proxy() {
    let redis = RedisServer::start().unwrap();
    let redis_url = redis.url();
    #[rustfmt::skip]
    let args = [
        "--store", &redis_url, "--trust-domain", "conformance.test", "--token", "kit-token=conformance.test",
        "--token", "foreign-token=conformance-untrusted.invalid", "--sign", "hmac-sha256-jcs", "--secret", "s3cret",
    ];
    let (_a, a) = serve(&args, Stdio::null());
    let (_b, b) = serve(&args, Stdio::null());
    let proxy = round_robin(vec![a, b]).await;
    let report = std::env::temp_dir().join(format!("ldp-conformance-replicas-{}.json", std::process::id()));
    let report_path = report.to_str().unwrap().to_owned();
    #[rustfmt::skip]
    let kit = [
        proxy.as_str(), "--transport", "http", "--token", "kit-token", "--untrusted-token", "foreign-token",
        "--ttl-hint", "1", "--deadline", "240", "--format", "json", "--output", &report_path,
        "--sign", "hmac-sha256-jcs", "--secret", "s3cret", "--level", "should",
    ];
    let kit: Vec<String> = kit.iter().map(|s| (*s).to_owned()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_ldp")).arg("conformance").args(&kit).output().unwrap()
    })
    .await
    .unwrap();
    let (json, failing) = read_report(&report);
    let _ = std::fs::remove_file(&report);
    assert_eq!(out.status.code(), Some(0), "stderr: {}\nfailures: {failing:#?}", String::from_utf8_lossy(&out.stderr));
    assert!(failing.is_empty(), "{failing:#?}");
    eprintln!("conformance through the proxy: {}", json["summary"]);
    assert!(json["summary"]["passed"].as_u64().is_some_and(|n| n > 20), "{}", json["summary"]);
}
