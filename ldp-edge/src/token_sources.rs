//! Token sources a client can be given instead of a fixed token: [`ClientCredentials`] (OAuth 2.0 client
//! credentials grant, RFC 6749 section 4.4) and [`CommandToken`] (whatever a command prints). Both cache the token
//! and fetch a new one before the old one expires, so that asking before every request costs nothing most times.
//!
//! Neither logs a token, a secret or a command's output; errors name what failed (the status and OAuth error code
//! of the token endpoint, a command's exit status), never a credential.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use ldp_types::{LdpError, codes};
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::options::TokenSource;

/// The largest token endpoint answer or command output read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a token could not be obtained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFetchError {
    /// The token URL is not an `http(s)://` URL, or the client id is empty.
    #[error("token source: {0}")]
    Config(&'static str),
    /// The token endpoint could not be reached.
    #[error("token endpoint {url}: {source}")]
    Http {
        /// The token URL.
        url: String,
        /// The failure.
        #[source]
        source: reqwest::Error,
    },
    /// The token endpoint refused: its status and OAuth error code (`invalid_client`, `invalid_scope`, ...).
    #[error("token endpoint {url} answered {status}{}", error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Refused {
        /// The token URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code, when the answer had one.
        error: Option<String>,
    },
    /// The answer is not a token response (no `access_token`, not JSON, too large, not a bearer token).
    #[error("token endpoint {url}: {why}")]
    BadAnswer {
        /// The token URL.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The token command could not be started, failed, timed out or printed no token.
    #[error("token command: {0}")]
    Command(String),
}

impl TokenFetchError {
    /// The wire error a request fails with when its token could not be obtained.
    pub fn to_ldp_error(&self) -> LdpError {
        let retryable =
            matches!(self, Self::Http { .. }) || matches!(self, Self::Refused { status, .. } if *status >= 500);
        LdpError::identity(codes::UNAUTHENTICATED, format!("no bearer token: {self}")).with_retryable(retryable)
    }
}

/// A token and when to fetch a new one.
struct Cached {
    token: String,
    refresh_at: Instant,
}

/// When to refresh a token valid for `lifetime` from now: a minute before it expires, or halfway through a shorter
/// life, so that a request never leaves with a token about to expire on the way.
fn refresh_at(lifetime: Duration) -> Instant {
    let margin = (lifetime / 2).min(Duration::from_secs(60));
    Instant::now() + lifetime.saturating_sub(margin)
}

/// OAuth 2.0 client credentials: the client authenticates to the token endpoint with its id and secret (HTTP Basic,
/// `client_secret_basic`) and gets an access token for the scopes asked, refreshed before it expires.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use ldp_edge::{ClientCredentials, ConnectOptions, ConnectSettings};
/// let secret = std::env::var("LDP_OAUTH_CLIENT_SECRET")?;
/// let source = ClientCredentials::new("https://id.example.com/oauth/token", "my-agent", secret)?
///     .scopes(["ldp:call"]);
/// let options = ConnectOptions::new().token_source(source);
/// # let _ = options; Ok(()) }
/// ```
/// Clones share the cached token.
#[derive(Clone)]
pub struct ClientCredentials {
    token_url: String,
    client_id: String,
    client_secret: String,
    scopes: Vec<String>,
    audience: Option<String>,
    http: reqwest::Client,
    cached: Arc<Mutex<Option<Cached>>>,
}

impl fmt::Debug for ClientCredentials {
    /// The secret and the token left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// The members of a token response read (RFC 6749 section 5.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    token_type: Option<String>,
    expires_in: Option<u64>,
}

/// An error response (RFC 6749 section 5.2).
#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
}

impl ClientCredentials {
    /// Tokens from `token_url` for the client `client_id` with `client_secret`.
    pub fn new(
        token_url: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Result<Self, TokenFetchError> {
        let token_url = token_url.into();
        if !(token_url.starts_with("https://") || token_url.starts_with("http://")) {
            return Err(TokenFetchError::Config("the token URL must be an http(s) URL"));
        }
        let client_id = client_id.into();
        if client_id.is_empty() {
            return Err(TokenFetchError::Config("the client id is empty"));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|source| TokenFetchError::Http { url: token_url.clone(), source })?;
        Ok(Self {
            token_url,
            client_id,
            client_secret: client_secret.into(),
            scopes: Vec::new(),
            audience: None,
            http,
            cached: Arc::new(Mutex::new(None)),
        })
    }

    /// Asks for these scopes (sent space-separated as `scope`).
    #[must_use]
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Asks for a token for this resource (sent as `resource`, RFC 8707, and `audience`, which some providers
    /// read instead).
    #[must_use]
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// The current token: the cached one while it is fresh, else a new one from the token endpoint.
    pub async fn fetch(&self) -> Result<String, TokenFetchError> {
        // Held across the request: concurrent callers wait for one fetch instead of each making their own.
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| Instant::now() < c.refresh_at) {
            return Ok(c.token.clone());
        }
        let (token, lifetime) = self.request().await?;
        *cached = Some(Cached { token: token.clone(), refresh_at: refresh_at(lifetime) });
        Ok(token)
    }

    async fn request(&self) -> Result<(String, Duration), TokenFetchError> {
        let inner = self;
        let url = &inner.token_url;
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        let scope = inner.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        if let Some(audience) = &inner.audience {
            form.push(("resource", audience));
            form.push(("audience", audience));
        }
        let http = |source| TokenFetchError::Http { url: url.clone(), source };
        let mut resp = inner
            .http
            .post(url)
            .basic_auth(&inner.client_id, Some(&inner.client_secret))
            .header(http::header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await
            .map_err(http)?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(TokenFetchError::BadAnswer { url: url.clone(), why: "answer too large" });
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let error = serde_json::from_slice::<ErrorAnswer>(&body)
                .ok()
                .map(|e| e.error)
                .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()));
            return Err(TokenFetchError::Refused { url: url.clone(), status: status.as_u16(), error });
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| TokenFetchError::BadAnswer { url: url.clone(), why: "not a token response" })?;
        if answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
            return Err(TokenFetchError::BadAnswer { url: url.clone(), why: "not a bearer token" });
        }
        if answer.access_token.is_empty() {
            return Err(TokenFetchError::BadAnswer { url: url.clone(), why: "empty access_token" });
        }
        // Without `expires_in`, the token is kept a short while: the server decides when it stops working.
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(60));
        Ok((answer.access_token, lifetime))
    }
}

#[async_trait]
impl TokenSource for ClientCredentials {
    async fn token(&self) -> Result<String, LdpError> {
        self.fetch().await.map_err(|e| e.to_ldp_error())
    }
}

/// A token printed by a command (`sh -c COMMAND`; on Windows `cmd /C`), e.g. a secret manager's or a cloud
/// CLI's: its standard output, trimmed. Run again when the token is older than [`CommandToken::ttl`] or, for a
/// JWT, a minute before its `exp`.
#[derive(Clone)]
pub struct CommandToken {
    command: String,
    ttl: Duration,
    timeout: Duration,
    cached: Arc<Mutex<Option<Cached>>>,
}

impl fmt::Debug for CommandToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandToken").field("command", &self.command).field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl CommandToken {
    /// The token `command` prints, kept for 5 minutes at most.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ttl: Duration::from_secs(300),
            timeout: Duration::from_secs(30),
            cached: Arc::new(Mutex::new(None)),
        }
    }

    /// Keeps a token at most this long.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The current token: the cached one while it is fresh, else what the command prints now.
    pub async fn fetch(&self) -> Result<String, TokenFetchError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| Instant::now() < c.refresh_at) {
            return Ok(c.token.clone());
        }
        let token = self.run().await?;
        let lifetime = jwt_lifetime(&token).map_or(self.ttl, |life| life.min(self.ttl));
        *cached = Some(Cached { token: token.clone(), refresh_at: refresh_at(lifetime) });
        Ok(token)
    }

    async fn run(&self) -> Result<String, TokenFetchError> {
        let mut command = if cfg!(windows) {
            let mut c = tokio::process::Command::new("cmd");
            c.arg("/C");
            c
        } else {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c");
            c
        };
        command.arg(&self.command).stdin(std::process::Stdio::null()).kill_on_drop(true);
        let output = tokio::time::timeout(self.timeout, command.output())
            .await
            .map_err(|_| TokenFetchError::Command(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| TokenFetchError::Command(format!("could not start: {e}")))?;
        if !output.status.success() {
            return Err(TokenFetchError::Command(format!("exited with {}", output.status)));
        }
        if output.stdout.len() > MAX_ANSWER_BYTES {
            return Err(TokenFetchError::Command("printed more than 64 KiB".to_owned()));
        }
        let token = String::from_utf8(output.stdout)
            .map_err(|_| TokenFetchError::Command("printed something that is not UTF-8".to_owned()))?;
        let token = token.trim();
        if token.is_empty() || token.chars().any(char::is_whitespace) {
            return Err(TokenFetchError::Command("printed no token (one word expected)".to_owned()));
        }
        Ok(token.to_owned())
    }
}

/// How long a JWT is still valid by its `exp` (read, not verified: the server verifies it; this only decides when
/// to ask for a new one).
fn jwt_lifetime(token: &str) -> Option<Duration> {
    use base64::Engine;
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).ok()?;
    let exp = serde_json::from_slice::<serde_json::Value>(&bytes).ok()?.get("exp")?.as_u64()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

#[async_trait]
impl TokenSource for CommandToken {
    async fn token(&self) -> Result<String, LdpError> {
        self.fetch().await.map_err(|e| e.to_ldp_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_command_token_is_cached_and_refused_when_empty_or_failing() {
        let dir = std::env::temp_dir().join(format!("ldp-token-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let count = dir.join("count");
        // Prints a new token each run, and counts the runs.
        let command = format!("echo x >> {0}; echo tok-$(wc -l < {0} | tr -d ' ')", count.display());
        let source = CommandToken::new(command);
        assert_eq!(source.token().await.unwrap(), "tok-1");
        assert_eq!(source.token().await.unwrap(), "tok-1");
        let expired = CommandToken::new(source.command.clone()).ttl(Duration::ZERO);
        assert_eq!(expired.token().await.unwrap(), "tok-2");
        assert_eq!(expired.token().await.unwrap(), "tok-3");
        let error = CommandToken::new("exit 3").token().await.unwrap_err();
        assert_eq!(error.code, codes::UNAUTHENTICATED);
        assert!(error.message.contains("exited with"), "{}", error.message);
        let error = CommandToken::new("true").token().await.unwrap_err();
        assert!(error.message.contains("printed no token"), "{}", error.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_jwt_is_refreshed_before_its_exp() {
        use base64::Engine;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{{\"exp\":{}}}", now + 100));
        let life = jwt_lifetime(&format!("e30.{claims}.sig")).unwrap();
        assert!(life <= Duration::from_secs(100) && life >= Duration::from_secs(98));
        assert_eq!(jwt_lifetime("opaque-token"), None);
        let at = refresh_at(Duration::from_secs(300));
        assert!(at <= Instant::now() + Duration::from_secs(240));
    }
}
