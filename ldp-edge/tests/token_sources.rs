#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `ClientCredentials` against a token endpoint of this test: what it sends (grant, Basic credentials, scope,
//! resource), its cache, one fetch for concurrent callers, a refresh before expiry, and typed refusals that never
//! show the secret.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Form;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine;
use ldp_edge::{ClientCredentials, TokenFetchError, TokenSource};
use serde_json::json;

/// The last request's form and `Authorization` header.
type LastRequest = Arc<Mutex<Option<(Vec<(String, String)>, String)>>>;

/// A token endpoint answering `expires_in` and counting requests; the last form and Authorization header kept.
struct Endpoint {
    url: String,
    calls: Arc<AtomicUsize>,
    last: LastRequest,
}

async fn endpoint(expires_in: u64) -> Endpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let last: LastRequest = Arc::new(Mutex::new(None));
    let (c, l) = (Arc::clone(&calls), Arc::clone(&last));
    let app = Router::new().route(
        "/token",
        post(move |headers: HeaderMap, Form(form): Form<Vec<(String, String)>>| {
            let n = c.fetch_add(1, Ordering::SeqCst) + 1;
            let auth = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            *l.lock().unwrap() = Some((form, auth.clone()));
            let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("agent:s3cret"));
            async move {
                // Slow enough that concurrent callers overlap.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if auth != expected {
                    let body = json!({"error": "invalid_client", "error_description": "bad secret"});
                    return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
                }
                axum::Json(json!({"access_token": format!("token-{n}"), "token_type": "Bearer",
                    "expires_in": expires_in}))
                .into_response()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Endpoint { url, calls, last }
}

#[tokio::test]
async fn a_token_is_asked_for_with_the_clients_credentials_and_cached() {
    let server = endpoint(3600).await;
    let source = ClientCredentials::new(&server.url, "agent", "s3cret")
        .unwrap()
        .scopes(["ldp:call", "ldp:echo"])
        .audience("https://ldp.test");
    assert_eq!(source.token().await.unwrap(), "token-1");
    let (form, _) = server.last.lock().unwrap().clone().unwrap();
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("grant_type").as_deref(), Some("client_credentials"));
    assert_eq!(get("scope").as_deref(), Some("ldp:call ldp:echo"));
    assert_eq!(get("resource").as_deref(), Some("https://ldp.test"));
    assert_eq!(get("client_secret"), None, "the secret goes in the Authorization header only");

    // Cached: clones share it, and concurrent callers make no request.
    let clones: Vec<_> = (0..8).map(|_| source.clone()).collect();
    let tokens = futures::future::join_all(clones.iter().map(ClientCredentials::fetch)).await;
    assert!(tokens.iter().all(|t| t.as_deref().unwrap() == "token-1"));
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
    assert!(!format!("{source:?}").contains("s3cret"));
}

#[tokio::test]
async fn concurrent_callers_share_one_fetch_and_a_token_is_refreshed_before_it_expires() {
    let server = endpoint(1).await;
    let source = ClientCredentials::new(&server.url, "agent", "s3cret").unwrap();
    let tokens = futures::future::join_all((0..8).map(|_| source.fetch())).await;
    assert!(tokens.iter().all(|t| t.as_deref().unwrap() == "token-1"), "{tokens:?}");
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
    // A one-second token is fetched again halfway through its life.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(source.fetch().await.unwrap(), "token-2");
}

#[tokio::test]
async fn a_refused_secret_is_a_typed_error_without_the_secret() {
    let server = endpoint(60).await;
    let source = ClientCredentials::new(&server.url, "agent", "not-the-secret").unwrap();
    let error = source.fetch().await.unwrap_err();
    assert!(
        matches!(&error, TokenFetchError::Refused { status: 401, error: Some(code), .. } if code == "invalid_client"),
        "{error:?}"
    );
    let wire = source.token().await.unwrap_err();
    assert_eq!(wire.code, ldp_types::codes::UNAUTHENTICATED);
    assert!(!wire.message.contains("not-the-secret") && wire.message.contains("invalid_client"), "{}", wire.message);
    assert!(!wire.retryable, "a refused secret does not get better by retrying");
    assert!(ClientCredentials::new("ftp://x", "agent", "s").is_err());
    assert!(ClientCredentials::new("http://x", "", "s").is_err());
}
