//! The paths of the HTTP binding, which the server serves and the clients ask for.

/// Path of the RFC 2.3 identity card.
pub const WELL_KNOWN_IDENTITY: &str = "/.well-known/ldp-identity";
/// Path where the reference SDKs' clients look for the identity card.
pub const IDENTITY: &str = "/ldp/identity";
/// Path of the capability list (reference SDKs).
pub const CAPABILITIES: &str = "/ldp/capabilities";
/// Path of the one-envelope-in, one-envelope-out binding.
pub const MESSAGES: &str = "/ldp/messages";
/// Path of the streaming binding (RFC 8.1).
pub const STREAM: &str = "/ldp/stream";
/// Liveness: 200 while the process answers.
pub const HEALTHZ: &str = "/healthz";
/// Readiness: 200 while the session machine answers, else 503.
pub const READYZ: &str = "/readyz";
/// Metrics in the Prometheus (OpenMetrics) text format ([`HttpMetrics`](crate::HttpMetrics), feature `server`).
pub const METRICS: &str = "/metrics";
