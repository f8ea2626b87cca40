//! The page: plain HTML, CSS and ES-module JavaScript compiled into the binary (no build step, no CDN, no Node at
//! run time).

use axum::http::header;
use axum::response::IntoResponse;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// The bytes the page is made of (BENCHMARKS.md reports them).
pub const ASSET_BYTES: usize = INDEX.len() + SCRIPT.len() + STYLE.len();

/// Nothing is cached: the assets change with the binary, and a stale script against a newer API helps nobody.
const NO_STORE: (header::HeaderName, &str) = (header::CACHE_CONTROL, "no-store");

/// A policy for the page itself: its own scripts and styles only, API calls to itself only.
const CSP: (header::HeaderName, &str) = (
    header::CONTENT_SECURITY_POLICY,
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
);

pub(crate) async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), NO_STORE, CSP], INDEX)
}

pub(crate) async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), NO_STORE], SCRIPT)
}

pub(crate) async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), NO_STORE], STYLE)
}
