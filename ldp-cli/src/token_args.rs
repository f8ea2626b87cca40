//! How a client command gets its bearer token when it is not a fixed `--token`: OAuth 2.0 client credentials
//! (`--oauth-token-url`, `--oauth-client-id`, the secret from an environment variable, `--oauth-scope`) or a
//! command that prints one (`--token-command`). Shared by `ldp call`, `ldp card` and `ldp conformance`.

use std::sync::Arc;

use ldp_transport_http::TokenSource;
use ldp_transport_http::{ClientCredentials, CommandToken};

/// The flags of a token fetched rather than given.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenArgs {
    /// Run this command (with `sh -c`) for the bearer token: its output, trimmed; run again after 5 minutes or a
    /// minute before a JWT's `exp`.
    #[arg(long, value_name = "COMMAND", conflicts_with_all = ["token", "oauth_token_url"])]
    pub token_command: Option<String>,
    /// Get the bearer token from this OAuth 2.0 token endpoint by the client credentials grant (refreshed before
    /// it expires). Needs --oauth-client-id; the secret is read from --oauth-client-secret-env.
    #[arg(long, value_name = "URL", requires = "oauth_client_id", conflicts_with = "token")]
    pub oauth_token_url: Option<String>,
    /// The OAuth client id.
    #[arg(long, value_name = "ID", requires = "oauth_token_url")]
    pub oauth_client_id: Option<String>,
    /// The environment variable holding the client secret (never a flag: flags are visible to other users).
    #[arg(long, value_name = "VAR", default_value = "LDP_OAUTH_CLIENT_SECRET")]
    pub oauth_client_secret_env: String,
    /// A scope to ask for (repeatable).
    #[arg(long = "oauth-scope", value_name = "SCOPE", value_delimiter = ',')]
    pub oauth_scopes: Vec<String>,
    /// The resource (audience) to ask a token for (sent as `resource` and `audience`).
    #[arg(long, value_name = "URL")]
    pub oauth_audience: Option<String>,
}

impl TokenArgs {
    /// The token source these flags describe, or `None` for a fixed token (or none).
    pub fn source(&self) -> Result<Option<Arc<dyn TokenSource>>, String> {
        if let Some(command) = &self.token_command {
            return Ok(Some(Arc::new(CommandToken::new(command.clone()))));
        }
        let (Some(url), Some(client_id)) = (&self.oauth_token_url, &self.oauth_client_id) else { return Ok(None) };
        let secret = std::env::var(&self.oauth_client_secret_env).map_err(|_| {
            format!("--oauth-token-url: the client secret variable {} is not set", self.oauth_client_secret_env)
        })?;
        let mut source = ClientCredentials::new(url.clone(), client_id.clone(), secret)
            .map_err(|e| format!("--oauth-token-url: {e}"))?
            .scopes(self.oauth_scopes.clone());
        if let Some(audience) = &self.oauth_audience {
            source = source.audience(audience.clone());
        }
        Ok(Some(Arc::new(source)))
    }
}
