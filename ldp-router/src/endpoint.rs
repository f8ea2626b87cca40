//! `ldp://` URLs (RFC 9.2) and the transport endpoints they name. Pure string work, no IO.
//!
//! An `ldp` URL names a delegate; it resolves to the URL of one of LDP's bindings:
//!
//! | delegate URL                          | binding    | endpoint                      |
//! |---------------------------------------|------------|-------------------------------|
//! | `ldp://host:port/path`                | HTTP       | `https://host:port/path`      |
//! | `ldp+https://host:port/path`          | HTTP       | `https://host:port/path`      |
//! | `ldp+http://host:port/path`           | HTTP       | `http://host:port/path`       |
//! | `ldp+wss://host:port/path`            | WebSocket  | `wss://host:port/path`        |
//! | `ldp+ws://host:port/path`             | WebSocket  | `ws://host:port/path`         |
//! | `ldp://host/path?transport=ws`        | WebSocket  | `wss://host/path`             |
//! | `ldp+http://host/path?transport=ws`   | WebSocket  | `ws://host/path`              |
//! | `http(s)://...`, `ws(s)://...`        | as written | unchanged (an identity card's `endpoint`) |
//!
//! The scheme decides whether the connection is encrypted and bare `ldp://` means TLS: a delegate URL that says
//! nothing more must not send bearer tokens in clear text. Plain text needs the explicit `ldp+http` / `ldp+ws`
//! (local development, tests on loopback). The `transport` query parameter (`http` or `ws`/`websocket`) picks the
//! binding and is removed from the endpoint; other query parameters and the fragment are kept. Schemes are
//! case-insensitive; the host must be non-empty and nothing may contain whitespace.

use std::fmt;

/// One of LDP's transport bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Binding {
    /// The HTTP binding (RFC 8.1): `/.well-known/ldp-identity`, `/ldp/messages`, `/ldp/stream`.
    Http,
    /// The WebSocket binding.
    WebSocket,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Binding::Http => "http",
            Binding::WebSocket => "websocket",
        })
    }
}

/// Where and how to reach a delegate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The binding to speak.
    pub binding: Binding,
    /// The endpoint URL (`http`, `https`, `ws` or `wss`).
    pub url: String,
}

/// Why a URL does not name an LDP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// There is no `scheme://`.
    #[error("{0:?} has no scheme")]
    NoScheme(String),
    /// The scheme is not one of LDP's.
    #[error("scheme {scheme:?} is not an LDP scheme")]
    NotLdp {
        /// The scheme, lowercased.
        scheme: String,
    },
    /// The host is empty, or the URL contains whitespace or control characters.
    #[error("{0:?} is not a valid URL")]
    Invalid(String),
    /// The `transport` parameter names no binding.
    #[error("unknown transport {0:?} (expected http or ws)")]
    UnknownTransport(String),
}

/// The scheme of `url`, lowercased.
pub fn scheme(url: &str) -> Result<String, UrlError> {
    let (scheme, _) = url.split_once("://").ok_or_else(|| UrlError::NoScheme(url.to_owned()))?;
    let valid = !scheme.is_empty()
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic());
    if valid { Ok(scheme.to_ascii_lowercase()) } else { Err(UrlError::NoScheme(url.to_owned())) }
}

/// Resolves an `ldp` URL (or a plain `http(s)`/`ws(s)` one) to its endpoint; see the module documentation.
pub fn resolve_ldp_url(url: &str) -> Result<Endpoint, UrlError> {
    let scheme = scheme(url)?;
    let rest = url.get(scheme.len() + 3..).unwrap_or_default();
    let (secure, mut binding) = match scheme.as_str() {
        "ldp" | "ldp+https" | "https" => (true, Binding::Http),
        "ldp+http" | "http" => (false, Binding::Http),
        "ldp+wss" | "wss" => (true, Binding::WebSocket),
        "ldp+ws" | "ws" => (false, Binding::WebSocket),
        _ => return Err(UrlError::NotLdp { scheme }),
    };
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::Invalid(url.to_owned()));
    }
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = rest.get(..host_end).unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.is_empty() || host.starts_with(':') {
        return Err(UrlError::Invalid(url.to_owned()));
    }
    let (before_fragment, fragment) = match rest.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (rest, None),
    };
    let (target, query) = match before_fragment.split_once('?') {
        Some((target, query)) => (target, Some(query)),
        None => (before_fragment, None),
    };
    let mut kept = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("transport", value)) => {
                binding = match value.to_ascii_lowercase().as_str() {
                    "http" | "https" => Binding::Http,
                    "ws" | "wss" | "websocket" => Binding::WebSocket,
                    _ => return Err(UrlError::UnknownTransport(value.to_owned())),
                }
            }
            _ => kept.push(pair),
        }
    }
    let out_scheme = match (binding, secure) {
        (Binding::Http, true) => "https",
        (Binding::Http, false) => "http",
        (Binding::WebSocket, true) => "wss",
        (Binding::WebSocket, false) => "ws",
    };
    let mut endpoint = format!("{out_scheme}://{target}");
    if !kept.is_empty() {
        endpoint.push('?');
        endpoint.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        endpoint.push('#');
        endpoint.push_str(fragment);
    }
    Ok(Endpoint { binding, url: endpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(url: &str) -> (Binding, String) {
        let e = resolve_ldp_url(url).unwrap();
        (e.binding, e.url)
    }

    #[test]
    fn the_mapping_table() {
        use Binding::*;
        let cases = [
            ("ldp://delegates.example:8443/qwen", Http, "https://delegates.example:8443/qwen"),
            ("LDP://delegates.example", Http, "https://delegates.example"),
            ("ldp+https://h/x", Http, "https://h/x"),
            ("ldp+http://127.0.0.1:8080", Http, "http://127.0.0.1:8080"),
            ("ldp+wss://h:1/ws", WebSocket, "wss://h:1/ws"),
            ("ldp+ws://h/ws", WebSocket, "ws://h/ws"),
            ("ldp://h/p?transport=ws", WebSocket, "wss://h/p"),
            ("ldp://h/p?a=1&transport=websocket&b=2#top", WebSocket, "wss://h/p?a=1&b=2#top"),
            ("ldp+http://h/p?transport=ws", WebSocket, "ws://h/p"),
            ("ldp+wss://h/p?transport=http", Http, "https://h/p"),
            ("http://h:80/base", Http, "http://h:80/base"),
            ("wss://h", WebSocket, "wss://h"),
            ("ldp://[::1]:9000/x", Http, "https://[::1]:9000/x"),
            ("ldp://user@h/x", Http, "https://user@h/x"),
        ];
        for (url, binding, endpoint) in cases {
            assert_eq!(resolved(url), (binding, endpoint.to_owned()), "{url}");
        }
    }

    #[test]
    fn bad_urls_are_typed() {
        assert_eq!(resolve_ldp_url("delegates.example"), Err(UrlError::NoScheme("delegates.example".into())));
        assert_eq!(resolve_ldp_url("a2a://agent"), Err(UrlError::NotLdp { scheme: "a2a".into() }));
        assert_eq!(resolve_ldp_url("mcp://tool"), Err(UrlError::NotLdp { scheme: "mcp".into() }));
        assert!(matches!(resolve_ldp_url("ldp:///path"), Err(UrlError::Invalid(_))));
        assert!(matches!(resolve_ldp_url("ldp://:80/x"), Err(UrlError::Invalid(_))));
        assert!(matches!(resolve_ldp_url("ldp://h/a b"), Err(UrlError::Invalid(_))));
        assert_eq!(
            resolve_ldp_url("ldp://h?transport=carrier-pigeon"),
            Err(UrlError::UnknownTransport("carrier-pigeon".into()))
        );
        assert!(matches!(resolve_ldp_url("://h"), Err(UrlError::NoScheme(_))));
        assert!(matches!(resolve_ldp_url("1ldp://h"), Err(UrlError::NoScheme(_))));
        assert_eq!(scheme("Ldp+WSS://h").unwrap(), "ldp+wss");
    }
}
