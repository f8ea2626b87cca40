//! The layers a configuration is read from, lowest first: defaults, a TOML file, `LDP_*` environment variables,
//! then whatever the caller sets by key (`ldp serve`'s flags). Each layer's errors name where the bad value came
//! from: the file and line, the variable, or the flag; and always the key.

use std::fmt;
use std::path::{Path, PathBuf};

use super::ServerConfig;
use super::reference::{self, KeyKind};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// A configuration file (or text given a name, [`ServerConfig::from_toml_str`]).
    File(PathBuf),
    /// An environment variable.
    Env(String),
    /// A command-line flag.
    Flag(String),
    /// A value set in code (checked when the server starts).
    Code,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Env(var) => write!(f, "environment variable {var}"),
            Self::Flag(flag) => write!(f, "--{flag}"),
            Self::Code => f.write_str("the configuration"),
        }
    }
}

/// A configuration that cannot be read or is not valid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value is of the wrong type, out of range or malformed, or a key is unknown.
    #[error("{origin}{}: {key}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        /// Where it came from.
        origin: Origin,
        /// The line, for a file.
        line: Option<usize>,
        /// The key, as a dotted path (`connections.max_connections`).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A key that is set needs another that is not.
    #[error("{key} needs {needs}")]
    Requires {
        /// The key set.
        key: &'static str,
        /// What it needs.
        needs: &'static str,
    },
}

/// A value for [`ServerConfig::set`]: one piece of text, or a list (a repeated flag).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// One value, read as the key's type (a list key takes it comma-separated, or as a TOML array).
    One(String),
    /// The entries of a list key.
    Many(Vec<String>),
}

impl ServerConfig {
    /// Reads a TOML file. Unknown keys, wrong types and bad values are refused with the file, line and key.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml_str(&text, path)
    }

    /// Reads TOML text; `name` stands for its file in errors.
    pub fn from_toml_str(text: &str, name: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let origin = Origin::File(name.as_ref().to_path_buf());
        let invalid = |line: Option<usize>, key: String, message: String| ConfigError::Invalid {
            origin: origin.clone(),
            line,
            key,
            message,
        };
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| invalid(line_of(text, e.span()), String::new(), e.message().to_owned()))?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let (key, message) = key_and_message(&e.path().to_string(), e.inner().message());
            invalid(line_of(text, e.inner().span()), key, message)
        })
    }

    /// Applies `LDP_*` variables (from `vars`, usually `std::env::vars()`): each key's own variable
    /// ([`env_var`](super::env_var)), and the older names `LDP_TOKENS`, `LDP_SECRET`, `LDP_RECEIPT_KEY`,
    /// `LDP_STORE`, `LDP_A2A_TOKEN`, `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_SERVICE_NAME`, which a key's own
    /// variable overrides. Empty variables count as unset.
    pub fn apply_env(&mut self, vars: impl IntoIterator<Item = (String, String)>) -> Result<(), ConfigError> {
        let vars: std::collections::HashMap<String, String> =
            vars.into_iter().filter(|(name, _)| name.starts_with("LDP_") || name.starts_with("OTEL_")).collect();
        for key in reference::keys() {
            let own = reference::env_var(&key.key);
            let alias = reference::ENV_ALIASES.iter().find(|(_, k)| *k == key.key).map(|(var, _)| (*var).to_owned());
            let found = [Some(own), alias]
                .into_iter()
                .flatten()
                .find_map(|var| vars.get(&var).filter(|v| !v.is_empty()).map(|value| (var, value.clone())));
            if let Some((var, value)) = found {
                self.set(&key.key, Setting::One(value), Origin::Env(var))?;
            }
        }
        Ok(())
    }

    /// Sets one key (`connections.max_connections`) from text, as a flag or variable gives it; the value is checked
    /// as the file's would be.
    pub fn set(&mut self, key: &str, value: Setting, origin: Origin) -> Result<(), ConfigError> {
        let invalid =
            |message: String| ConfigError::Invalid { origin: origin.clone(), line: None, key: key.to_owned(), message };
        let kind = reference::keys()
            .into_iter()
            .find(|k| k.key == key)
            .map(|k| k.kind)
            .ok_or_else(|| invalid("unknown key".to_owned()))?;
        let value = kind.value(value).map_err(invalid)?;
        let mut document = toml::Value::try_from(&*self).map_err(|e| invalid(e.to_string()))?;
        let mut table = &mut document;
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            let toml::Value::Table(map) = table else { return Err(invalid("not a table".to_owned())) };
            if parts.peek().is_none() {
                map.insert(part.to_owned(), value);
                break;
            }
            table = map.entry(part.to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        }
        *self = serde_path_to_error::deserialize(document).map_err(|e| invalid(e.inner().message().to_owned()))?;
        Ok(())
    }

    /// Checks every value as a file's would be checked: values set in code meet the same checks.
    pub(crate) fn recheck(&self) -> Result<(), ConfigError> {
        let invalid =
            |key: String, message: String| ConfigError::Invalid { origin: Origin::Code, line: None, key, message };
        let document = toml::Value::try_from(self).map_err(|e| invalid(String::new(), e.to_string()))?;
        serde_path_to_error::deserialize::<_, ServerConfig>(document).map_err(|e| {
            let (key, message) = key_and_message(&e.path().to_string(), e.inner().message());
            invalid(key, message)
        })?;
        Ok(())
    }

    /// The configuration as TOML that [`ServerConfig::from_toml_str`] reads back. Secrets (tokens, signing secrets
    /// and keys, a store URL's password) are left out, each named in a comment with the variable that sets it.
    pub fn to_toml_redacted(&self) -> String {
        let Ok(toml::Value::Table(mut document)) = toml::Value::try_from(self) else { return String::new() };
        let mut header = String::from("# The effective ldp configuration (ldp serve --config reads this file).\n");
        for key in reference::keys().into_iter().filter(|k| k.secret) {
            let (section, name) = key.key.split_once('.').unwrap_or(("", key.key.as_str()));
            let Some(toml::Value::Table(table)) = document.get_mut(section) else { continue };
            let holds_secret = match table.get(name) {
                Some(toml::Value::String(s)) if key.key == "store.url" => ldp_store::redacted(s) != *s,
                Some(toml::Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
                None => false,
            };
            if holds_secret {
                table.remove(name);
                header.push_str(&format!("# {}: redacted; set it with {}\n", key.key, reference::env_var(&key.key)));
            }
        }
        let body = toml::to_string(&document).unwrap_or_default();
        format!("{header}\n{body}")
    }
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> Option<usize> {
    let start = span?.start.min(text.len());
    Some(text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count() + 1)
}

/// The key an error is about, and its message. An unknown field's path is its table's; its name is in the message.
fn key_and_message(path: &str, message: &str) -> (String, String) {
    let path = if path == "." { "" } else { path };
    let unknown =
        message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name.to_owned());
    match unknown {
        // Some paths end at the unknown key, some at its table.
        Some(name) if path.is_empty() || path == name || path.ends_with(&format!(".{name}")) => {
            let key = if path.is_empty() { name } else { path.to_owned() };
            (key, "unknown key".to_owned())
        }
        Some(name) => (format!("{path}.{name}"), "unknown key".to_owned()),
        None => (path.to_owned(), message.trim().to_owned()),
    }
}

impl KeyKind {
    /// `value` as the TOML value of a key of this kind.
    fn value(self, value: Setting) -> Result<toml::Value, String> {
        let scalar = |text: String| -> Result<toml::Value, String> {
            let trimmed = text.trim();
            Ok(match self {
                Self::Integer => {
                    toml::Value::Integer(trimmed.parse().map_err(|_| format!("{text:?} is not an integer"))?)
                }
                Self::Number => toml::Value::Float(trimmed.parse().map_err(|_| format!("{text:?} is not a number"))?),
                Self::Boolean => toml::Value::Boolean(match trimmed {
                    "true" | "1" | "yes" | "on" => true,
                    "false" | "0" | "no" | "off" => false,
                    _ => return Err(format!("{text:?} is not a boolean (true or false)")),
                }),
                Self::Size => match trimmed.parse::<i64>() {
                    Ok(n) => toml::Value::Integer(n),
                    Err(_) => toml::Value::String(text),
                },
                Self::Text | Self::List => toml::Value::String(text),
            })
        };
        match (self, value) {
            (Self::List, Setting::Many(items)) => {
                Ok(toml::Value::Array(items.into_iter().map(toml::Value::String).collect()))
            }
            (Self::List, Setting::One(text)) if text.trim_start().starts_with('[') => {
                let parsed: toml::Table = toml::from_str(&format!("v = {text}")).map_err(|e| e.message().to_owned())?;
                parsed.get("v").cloned().ok_or_else(|| "not a list".to_owned())
            }
            (Self::List, Setting::One(text)) => Ok(toml::Value::Array(
                text.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.to_owned()))
                    .collect(),
            )),
            (_, Setting::One(text)) => scalar(text),
            (_, Setting::Many(mut items)) => match items.pop() {
                // A repeated single-valued flag: the last wins, as clap has it.
                Some(last) => scalar(last),
                None => Err("no value".to_owned()),
            },
        }
    }
}
