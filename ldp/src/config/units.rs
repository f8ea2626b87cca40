//! How values are written in a configuration (durations, sizes), and the checks that make a bad value fail where it
//! is read, so that the error names its file, line and key.

use std::borrow::Cow;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// The schema of a duration: `30s`, `2m`, `1h 30m`, `500ms`.
pub(crate) struct DurationText;

impl JsonSchema for DurationText {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "duration" })
    }
}

/// The schema of a size: a number of bytes, or `64KiB`, `16 MiB`, `1GB`.
pub(crate) struct SizeText;

impl JsonSchema for SizeText {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": ["integer", "string"], "format": "size" })
    }
}

/// A size as written: an integer (bytes) or a string such as `16 MiB`.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

fn parse_size<E: serde::de::Error>(value: SizeValue) -> Result<u64, E> {
    match value {
        SizeValue::Bytes(n) => Ok(n),
        SizeValue::Text(text) => {
            let trimmed = text.trim();
            if let Ok(n) = trimmed.parse::<u64>() {
                return Ok(n);
            }
            bytesize::ByteSize::from_str(trimmed).map(|b| b.as_u64()).map_err(|_| {
                E::custom(format!("invalid size {text:?}: expected bytes, or a number and a unit (64KiB, 16 MiB, 1GB)"))
            })
        }
    }
}

/// Sizes: read as bytes or text, written as exact bytes (a unit could round).
pub(crate) mod size {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        parse_size(SizeValue::deserialize(d).map_err(|_| D::Error::custom(SIZE_EXPECTED))?)
    }
}

/// Optional sizes, as [`size`].
pub(crate) mod size_opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(bytes: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(n) => s.serialize_some(n),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        parse_size(SizeValue::deserialize(d).map_err(|_| D::Error::custom(SIZE_EXPECTED))?).map(Some)
    }
}

const SIZE_EXPECTED: &str = "invalid type: expected a size, bytes or a string such as \"16 MiB\"";

/// Reads a string that must parse as `T`, keeping the text (so that it is written back as it was given).
fn checked<'de, D, T>(d: D, what: &str) -> Result<String, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let text = String::deserialize(d)?;
    match text.parse::<T>() {
        Ok(_) => Ok(text),
        Err(e) => Err(D::Error::custom(format!("invalid {what}: {e}"))),
    }
}

/// A `HOST:PORT` to listen on.
pub(crate) fn socket_address<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let port = text.rsplit_once(':').map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(_))) if !host.is_empty() => Ok(text),
        _ => Err(D::Error::custom(format!("invalid address {text:?}: expected HOST:PORT, e.g. 127.0.0.1:8090"))),
    }
}

/// `ldp:delegate:<name>`.
pub(crate) fn delegate_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked::<D, ldp_types::DelegateId>(d, "delegate id").map(Some)
}

/// A 64-hex-digit Ed25519 seed (the error never repeats the value: it is a secret).
pub(crate) fn ed25519_seed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    match ldp_types::signing::SigningKey::ed25519_from_hex(&text) {
        Ok(_) => Ok(Some(text)),
        Err(_) => Err(D::Error::custom("invalid Ed25519 seed: expected 64 hex digits")),
    }
}

/// `TOKEN=DOMAIN` entries (the errors never repeat a token).
pub(crate) fn tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for (i, entry) in entries.iter().enumerate() {
        match entry.rsplit_once('=') {
            Some((token, domain)) if !token.is_empty() && !domain.is_empty() => {}
            _ => return Err(D::Error::custom(format!("entry {}: expected TOKEN=DOMAIN", i + 1))),
        }
    }
    Ok(entries)
}

/// `NAME=SCOPE[ SCOPE...]` entries (skill or endpoint scopes).
pub(crate) fn scope_entries<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for (i, entry) in entries.iter().enumerate() {
        match entry.split_once('=') {
            Some((name, scopes)) if !name.is_empty() && !scopes.trim().is_empty() => {}
            _ => return Err(D::Error::custom(format!("entry {}: expected NAME=SCOPE[ SCOPE...]", i + 1))),
        }
    }
    Ok(entries)
}

/// JWT algorithm names, asymmetric ones only.
pub(crate) fn jwt_algorithms<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for entry in &entries {
        let known = ldp_transport_http::JWT_ALGORITHMS.iter().any(|a| format!("{a:?}") == *entry);
        if !known {
            return Err(D::Error::custom(format!(
                "{entry:?}: expected one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA"
            )));
        }
    }
    Ok(entries)
}

/// `CERT=[DELEGATE_ID@]DOMAIN` entries.
pub(crate) fn cert_peers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for entry in &entries {
        crate::launch::parse_cert_peer(entry).map_err(|e| D::Error::custom(format!("{entry:?}: {e}")))?;
    }
    Ok(entries)
}

/// A store URL (its password never repeated in the error).
pub(crate) fn store_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked::<D, ldp_store::StoreSpec>(d, "store")
}

/// `process` or `full`.
pub(crate) fn durability<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked::<D, ldp_store::Durability>(d, "durability")
}

/// `N/s` or `N/m`.
pub(crate) fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked::<D, ldp_transport_http::RateLimit>(d, "rate").map(Some)
}

/// Addresses or networks (CIDR).
pub(crate) fn networks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for entry in &entries {
        network(entry).map_err(D::Error::custom)?;
    }
    Ok(entries)
}

/// A network (`10.0.0.0/8`) or one address (`10.0.0.1`).
pub(crate) fn network(text: &str) -> Result<ipnet::IpNet, String> {
    let trimmed = text.trim();
    trimmed
        .parse::<ipnet::IpNet>()
        .or_else(|_| trimmed.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is neither an address nor a network (CIDR)"))
}

/// An `http://` or `https://` URL.
pub(crate) fn url_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    match url::Url::parse(&text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(Some(text)),
        Ok(_) => Err(D::Error::custom(format!("invalid URL {text:?}: not http or https with a host"))),
        Err(e) => Err(D::Error::custom(format!("invalid URL {text:?}: {e}"))),
    }
}

/// One `ISSUER_ID=KEY_ID=PUBLIC_HEX[@URL]` entry of `backend.delegates_issuers`: an attestation issuer's pinned
/// key, and where its documents are published.
#[derive(Debug, Clone)]
// Checked when any configuration is read; only a build with LLM delegates (feature `llm`) uses what it holds.
#[cfg_attr(not(feature = "llm"), allow(dead_code))]
pub(crate) struct IssuerPin<'a> {
    pub(crate) issuer_id: &'a str,
    pub(crate) key_id: &'a str,
    pub(crate) key: ldp_types::signing::VerifyingKey,
    pub(crate) url: Option<&'a str>,
}

/// Reads an issuer pin; the error says which part is wrong (a pin is public, so it may be quoted).
pub(crate) fn issuer_pin(entry: &str) -> Result<IssuerPin<'_>, String> {
    let (issuer_id, rest) = entry.split_once('=').ok_or("no '=' after the issuer id")?;
    // A key in hex holds no '@', so the first one starts the URL (which may hold more, as userinfo).
    let (pin, url) = match rest.split_once('@') {
        Some((pin, url)) => (pin, Some(url)),
        None => (rest, None),
    };
    let (key_id, hex) = pin.split_once('=').ok_or("no '=' after the key id")?;
    if issuer_id.is_empty() || key_id.is_empty() {
        return Err("the issuer id and the key id must not be empty".to_owned());
    }
    let key = ldp_types::signing::VerifyingKey::ed25519_from_hex(hex)
        .map_err(|_| "the public key is not an Ed25519 key in 64 hex digits".to_owned())?;
    if let Some(url) = url {
        match url::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
            _ => return Err(format!("invalid URL {url:?}: not http or https with a host")),
        }
    }
    Ok(IssuerPin { issuer_id, key_id, key, url })
}

/// `ISSUER_ID=KEY_ID=PUBLIC_HEX[@URL]` entries.
pub(crate) fn issuer_pins<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(d)?;
    for (i, entry) in entries.iter().enumerate() {
        issuer_pin(entry).map_err(|why| {
            D::Error::custom(format!("entry {}: {why} (expected ISSUER_ID=KEY_ID=PUBLIC_HEX[@URL])", i + 1))
        })?;
    }
    Ok(entries)
}
