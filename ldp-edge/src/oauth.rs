//! The server as an OAuth 2.0 protected resource, as the MCP authorization spec asks of remote servers: its
//! metadata document (RFC 9728) at `/.well-known/oauth-protected-resource`, naming the authorization servers that
//! issue its tokens and the scopes it knows; every 401 pointing at that document; scopes required per endpoint.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use ldp_session::PeerContext;

use crate::error::quoted;

/// The path of the protected resource metadata document (RFC 9728 section 3). Clients may also ask for it with the
/// resource's path appended (`/.well-known/oauth-protected-resource/mcp`); both get the same document.
pub const PROTECTED_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";

/// What the server publishes and requires as an OAuth protected resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProtectedResource {
    /// The resource identifier: the server's public base URL, e.g. `https://agents.example.com` (tokens' audience
    /// should be it). `None` derives it from each request's `Host` header and [`ProtectedResource::https`], which
    /// is right when clients reach the server directly.
    pub resource: Option<String>,
    /// Whether the server is reached over `https` (for a derived resource URL).
    pub https: bool,
    /// The authorization servers' issuer URLs, whose metadata (RFC 8414 or OIDC discovery) tells clients where to
    /// get tokens.
    pub authorization_servers: Vec<String>,
    /// The scopes the server knows (its `scopes_supported`).
    pub scopes_supported: Vec<String>,
    /// Scopes required by endpoint: a request whose path is the prefix, or below it, needs every scope listed.
    pub endpoint_scopes: Vec<(String, Vec<String>)>,
}

impl ProtectedResource {
    /// A resource whose tokens `authorization_servers` issue.
    pub fn new(authorization_servers: Vec<String>) -> Self {
        Self { authorization_servers, ..Self::default() }
    }

    /// The resource identifier for a request with `headers`: the configured one, else derived from `Host`.
    pub fn resource_url(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(resource) = &self.resource {
            return Some(resource.trim_end_matches('/').to_owned());
        }
        let host = headers.get(header::HOST)?.to_str().ok()?;
        // A Host header is a host and port; anything else would make the URL say something the client did not.
        if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)) {
            return None;
        }
        Some(format!("{}://{host}", if self.https { "https" } else { "http" }))
    }

    /// The metadata document (RFC 9728 section 2) for a request with `headers`.
    pub fn metadata(&self, headers: &HeaderMap) -> serde_json::Value {
        let mut doc = serde_json::json!({
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "scopes_supported": self.scopes_supported,
        });
        if let (Some(resource), Some(map)) = (self.resource_url(headers), doc.as_object_mut()) {
            map.insert("resource".to_owned(), resource.into());
        }
        doc
    }

    /// The first scope `path` requires that `peer` lacks.
    pub fn missing_scope<'a>(&'a self, path: &str, peer: &PeerContext) -> Option<&'a str> {
        self.endpoint_scopes
            .iter()
            .filter(|(prefix, _)| under(path, prefix))
            .flat_map(|(_, scopes)| scopes)
            .find(|scope| !peer.has_scope(scope))
            .map(String::as_str)
    }

    /// Appends `resource_metadata="<url>"` to the response's Bearer challenge (RFC 9728 section 5.1).
    pub fn add_metadata_to_challenge(&self, resp: &mut Response, headers: &HeaderMap) {
        let Some(url) = self.resource_url(headers) else { return };
        let Some(challenge) = resp.headers().get(header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()) else {
            return;
        };
        if !challenge.starts_with("Bearer") {
            return;
        }
        let joined = format!("{challenge}, resource_metadata=\"{}{PROTECTED_RESOURCE_METADATA}\"", quoted(&url));
        if let Ok(value) = HeaderValue::from_str(&joined) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
    }
}

/// The public routes serving the metadata document: [`PROTECTED_RESOURCE_METADATA`], and the same with any
/// resource path appended (clients following RFC 9728 section 3.1 insert the well-known path before the resource's).
pub fn metadata_routes<S: Clone + Send + Sync + 'static>(resource: ProtectedResource) -> axum::Router<S> {
    use axum::routing::get;
    let resource = std::sync::Arc::new(resource);
    let serve = move |headers: HeaderMap| {
        let resource = std::sync::Arc::clone(&resource);
        async move {
            let body = serde_json::to_vec(&resource.metadata(&headers)).unwrap_or_default();
            crate::error::json_response(axum::http::StatusCode::OK, body)
        }
    };
    axum::Router::new()
        .route(PROTECTED_RESOURCE_METADATA, get(serve.clone()))
        .route(&format!("{PROTECTED_RESOURCE_METADATA}/{{*resource}}"), get(serve))
}

/// Whether `path` is `prefix` or below it (`/mcp` covers `/mcp` and `/mcp/x`, not `/mcpx`).
fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(scopes: &[&str]) -> PeerContext {
        PeerContext {
            scopes: Some(scopes.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>().into()),
            ..Default::default()
        }
    }

    #[test]
    fn endpoint_scopes_cover_the_path_and_below() {
        let resource = ProtectedResource {
            endpoint_scopes: vec![("/mcp".into(), vec!["mcp:tools".into()])],
            ..ProtectedResource::default()
        };
        assert_eq!(resource.missing_scope("/mcp", &peer(&[])), Some("mcp:tools"));
        assert_eq!(resource.missing_scope("/mcp/", &PeerContext::default()), Some("mcp:tools"));
        assert_eq!(resource.missing_scope("/mcp", &peer(&["mcp:tools"])), None);
        assert_eq!(resource.missing_scope("/mcpx", &peer(&[])), None);
        assert_eq!(resource.missing_scope("/ldp/messages", &peer(&[])), None);
    }

    #[test]
    fn the_resource_url_comes_from_configuration_or_a_plain_host() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        let derived = ProtectedResource::default();
        assert_eq!(derived.resource_url(&headers).as_deref(), Some("http://127.0.0.1:8080"));
        headers.insert(header::HOST, HeaderValue::from_static("evil\"/x"));
        assert_eq!(derived.resource_url(&headers), None);
        let fixed = ProtectedResource { resource: Some("https://a.example/".into()), ..ProtectedResource::default() };
        assert_eq!(fixed.resource_url(&headers).as_deref(), Some("https://a.example"));
        assert_eq!(fixed.metadata(&headers)["resource"], "https://a.example");
    }
}
