//! Every key of [`ServerConfig`], found from its JSON Schema (so a new field is a new key with no list to edit):
//! its type, default, environment variable and doc comment; and the reference page made of them.

use serde_json::Value;

use super::ServerConfig;

/// The older variable names, kept working beside each key's own (`LDP_` + the key).
pub(crate) const ENV_ALIASES: [(&str, &str); 7] = [
    ("LDP_TOKENS", "auth.tokens"),
    ("LDP_SECRET", "signing.secret"),
    ("LDP_RECEIPT_KEY", "identity.receipt_key"),
    ("LDP_STORE", "store.url"),
    ("LDP_A2A_TOKEN", "backend.a2a_token"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "telemetry.otlp_endpoint"),
    ("OTEL_SERVICE_NAME", "telemetry.service_name"),
];

/// How a key's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyKind {
    /// Text (durations, addresses, URLs, names, enumerations).
    Text,
    /// A whole number.
    Integer,
    /// A number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// Bytes, or text with a unit.
    Size,
    /// A list of text.
    List,
}

/// One key of the configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KeyDoc {
    /// The dotted path (`connections.max_connections`).
    pub key: String,
    /// How its value is written.
    pub kind: KeyKind,
    /// Its doc comment.
    pub doc: String,
    /// Whether it holds a secret (left out of printed configurations).
    pub secret: bool,
}

/// The environment variable of a key: `LDP_` and the path in capitals, dots as `_`.
pub fn env_var(key: &str) -> String {
    format!("LDP_{}", key.replace('.', "_").to_ascii_uppercase())
}

/// Every key: the top level's, then each section's, by name.
pub fn keys() -> Vec<KeyDoc> {
    let schema = schemars::schema_for!(ServerConfig);
    let root = schema.as_value();
    let mut out = Vec::new();
    for (name, property) in properties(root) {
        let resolved = resolve(root, property);
        if resolved.get("properties").is_some() {
            for (leaf, leaf_schema) in properties(resolved) {
                out.push(key_doc(root, format!("{name}.{leaf}"), leaf_schema));
            }
        } else {
            out.push(key_doc(root, name.clone(), property));
        }
    }
    out.sort_by_key(|k| (k.key.contains('.'), k.key.clone()));
    out
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

/// A `$ref` followed to its definition.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(name) => root.pointer(&format!("/$defs/{name}")).unwrap_or(schema),
        None => schema,
    }
}

fn key_doc(root: &Value, key: String, schema: &Value) -> KeyDoc {
    let doc = schema.get("description").and_then(Value::as_str).unwrap_or_default().replace('\n', " ");
    let kind = kind_of(root, schema);
    let secret = doc.contains("Secret");
    KeyDoc { key, kind, doc, secret }
}

fn kind_of(root: &Value, schema: &Value) -> KeyKind {
    let schema = resolve(root, schema);
    if schema.get("format").and_then(Value::as_str) == Some("size") {
        return KeyKind::Size;
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if let Some(t) = types.iter().find(|t| **t != "null") {
        return match *t {
            "integer" => KeyKind::Integer,
            "number" => KeyKind::Number,
            "boolean" => KeyKind::Boolean,
            "array" => KeyKind::List,
            _ => KeyKind::Text,
        };
    }
    // `Option<Enum>` and documented enumerations: the first alternative that is not null decides.
    for alternatives in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = schema.get(alternatives)
            && let Some(option) = options.iter().find(|o| o.get("type").and_then(Value::as_str) != Some("null"))
        {
            return kind_of(root, option);
        }
    }
    KeyKind::Text
}

/// The reference page of every key (`docs/config.md`): its section, variable, default and meaning.
pub fn reference_markdown() -> String {
    let defaults = toml::Value::try_from(ServerConfig::default()).unwrap_or(toml::Value::Table(toml::Table::new()));
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from `ldp::config::ServerConfig` (`cargo run -p ldp-cli -- serve --config-reference`); do not \
         edit by hand.\n\n\
         `ldp serve --config FILE` reads these keys from a TOML file; every key also has an environment variable \
         and most a flag (`ldp serve --help`). Precedence: flags, then variables, then the file, then the defaults. \
         `ldp serve --print-config` prints the effective configuration, secrets left out. Durations are written \
         `30s`, `2m`, `1h`, `500ms`; sizes as bytes or `64KiB`, `16 MiB`, `1GB`. Library users set the same \
         struct from code or read the same file: `ldp::config::ServerConfig::from_toml_file`.\n",
    );
    let mut section = None;
    for key in keys() {
        let (table, name) = key.key.split_once('.').map_or(("", key.key.as_str()), |(t, n)| (t, n));
        if section != Some(table.to_owned()) {
            let title = if table.is_empty() { "Top level".to_owned() } else { format!("`[{table}]`") };
            out.push_str(&format!("\n## {title}\n\n| key | variable | default | meaning |\n|---|---|---|---|\n"));
            section = Some(table.to_owned());
        }
        let default = key
            .key
            .split('.')
            .try_fold(&defaults, |v, part| v.get(part))
            .map_or_else(|| "none".to_owned(), |v| format!("`{v}`"));
        let doc = key.doc.replace('|', "\\|");
        out.push_str(&format!("| `{name}` | `{}` | {default} | {doc} |\n", env_var(&key.key)));
    }
    out.push_str("\nOlder variable names still read (a key's own variable wins): ");
    let aliases: Vec<String> = ENV_ALIASES.iter().map(|(var, key)| format!("`{var}` (`{key}`)")).collect();
    out.push_str(&aliases.join(", "));
    out.push_str(".\n");
    out
}
