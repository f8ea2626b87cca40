//! The provider's API key, kept out of every printed form.

use std::fmt;

use crate::LlmError;

/// A provider API key. It has no `Display`, its `Debug` prints `ApiKey(<redacted>)`, and the backends scrub it from
/// any provider message they quote in an error, so it reaches no log or error.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key from its text.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key held by the environment variable `var`: an unset or empty variable is a typed error naming the
    /// variable (never its value).
    pub fn from_env(var: &str) -> Result<Self, LlmError> {
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(Self(key.trim().to_owned())),
            Ok(_) => Err(LlmError::Config(format!("the environment variable {var} is empty"))),
            Err(_) => Err(LlmError::Config(format!("the environment variable {var} is not set (or not UTF-8)"))),
        }
    }

    /// The key's text, for the request header that carries it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced: provider messages sometimes quote the key they refused.
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 { text.to_owned() } else { text.replace(&self.0, "<redacted>") }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Scrubs `key` (when there is one) from `text`.
pub(crate) fn scrub(key: Option<&ApiKey>, text: &str) -> String {
    key.map_or_else(|| text.to_owned(), |k| k.scrub(text))
}
