//! JSON Schemas (draft 2020-12) of every wire type, generated with `schemars`.
//!
//! The schemas describe what this crate **accepts**, not only what it sends: decoding is liberal (the reference SDKs'
//! shapes, `null` for any optional member, a bare string as an error or a trust domain, unknown members kept), and so
//! are the schemas. A conformance kit can therefore validate third-party messages against them without rejecting
//! anything a reference SDK legitimately sends. The property "whatever [`Envelope::from_value`] accepts validates
//! against [`envelope_schema`]" is tested on arbitrary and mutated inputs.
//!
//! Known over-approximations (the schema accepts, the decoder refuses): an integral float such as `5.0` where an
//! integer is expected (JSON Schema's `integer` admits it, `serde_json` does not), and nesting deeper than
//! `serde_json`'s recursion limit of 128.
//!
//! The schemas are always compiled in (no cargo feature): `schemars` is small, and the conformance crate needs them at
//! run time. They are also committed under `schema/` at the workspace root; `tests/schemas.rs` fails when those files
//! are stale (regenerate with `UPDATE_SCHEMAS=1 cargo test -p ldp-types --test integration schemas::`).
//!
//! ```
//! let schema = ldp_types::schema::envelope_schema();
//! assert_eq!(schema["title"], "Envelope");
//! assert!(schema["required"].as_array().is_some_and(|r| r.contains(&"body".into())));
//! ```

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use crate::contract::DelegationContract;
use crate::envelope::{Body, Envelope};
use crate::error::{ErrorCategory, ErrorSeverity, LdpError};
use crate::identity::{Capability, DelegateId, IdentityCard, TrustDomain};
use crate::messages::{MessageType, SessionConfig};
use crate::payload::PayloadMode;
use crate::provenance::{Provenance, ProvenanceWire};
use crate::score::Score;

/// The JSON Schema dialect of every schema here.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The root schema of any type of this crate that implements [`JsonSchema`], with its definitions under `$defs`.
pub fn schema_for<T: JsonSchema>() -> Value {
    SchemaSettings::draft2020_12().for_deserialize().into_generator().into_root_schema_for::<T>().to_value()
}

/// The schema of an [`Envelope`], with every body type.
pub fn envelope_schema() -> Value {
    schema_for::<Envelope>()
}

/// The schema of a message [`Body`] of any type (including unknown types, which the decoder accepts).
pub fn body_schema() -> Value {
    schema_for::<Body>()
}

/// The schema of a body of one message type.
pub fn message_body_schema(ty: MessageType) -> Value {
    match ty {
        MessageType::Hello => schema_for::<VariantSchema<0>>(),
        MessageType::CapabilityManifest => schema_for::<VariantSchema<1>>(),
        MessageType::SessionPropose => schema_for::<VariantSchema<2>>(),
        MessageType::SessionAccept => schema_for::<VariantSchema<3>>(),
        MessageType::SessionReject => schema_for::<VariantSchema<4>>(),
        MessageType::TaskSubmit => schema_for::<VariantSchema<5>>(),
        MessageType::TaskUpdate => schema_for::<VariantSchema<6>>(),
        MessageType::TaskResult => schema_for::<VariantSchema<7>>(),
        MessageType::TaskFailed => schema_for::<VariantSchema<8>>(),
        MessageType::TaskCancel => schema_for::<VariantSchema<9>>(),
        MessageType::Attestation => schema_for::<VariantSchema<10>>(),
        MessageType::SessionClose => schema_for::<VariantSchema<11>>(),
    }
}

/// The schema of an [`IdentityCard`].
pub fn identity_card_schema() -> Value {
    schema_for::<IdentityCard>()
}

/// Every schema, keyed by its file path relative to the workspace's `schema/` directory (e.g. `envelope.json`,
/// `body/task_submit.json`). This is exactly the set of committed schema files.
pub fn all_schemas() -> Vec<(String, Value)> {
    let mut out = vec![("envelope.json".to_owned(), envelope_schema()), ("body.json".to_owned(), body_schema())];
    for ty in MessageType::ALL {
        out.push((format!("body/{}.json", ty.as_str().to_ascii_lowercase()), message_body_schema(ty)));
    }
    out.extend([
        ("identity_card.json".to_owned(), identity_card_schema()),
        ("capability.json".to_owned(), schema_for::<Capability>()),
        ("trust_domain.json".to_owned(), schema_for::<TrustDomain>()),
        ("delegate_id.json".to_owned(), schema_for::<DelegateId>()),
        ("payload_mode.json".to_owned(), schema_for::<PayloadMode>()),
        ("score.json".to_owned(), schema_for::<Score>()),
        ("session_config.json".to_owned(), schema_for::<SessionConfig>()),
        ("provenance.json".to_owned(), schema_for::<Provenance>()),
        ("delegation_contract.json".to_owned(), schema_for::<DelegationContract>()),
        ("ldp_error.json".to_owned(), schema_for::<LdpError>()),
    ]);
    out
}

fn nullable_string() -> Schema {
    json_schema!({ "type": ["string", "null"] })
}

impl JsonSchema for Envelope {
    fn schema_name() -> Cow<'static, str> {
        "Envelope".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let body = g.subschema_for::<Body>();
        let payload_mode = g.subschema_for::<Option<PayloadMode>>();
        let provenance = g.subschema_for::<Option<Provenance>>();
        json_schema!({
            "description": "The LDP envelope (RFC 3.1). `session_id` and `payload_mode` may be absent or null \
                (empty and `text`); members not listed are extensions and are kept.",
            "type": "object",
            "required": ["message_id", "from", "to", "body", "timestamp"],
            "properties": {
                "message_id": { "type": "string" },
                "session_id": nullable_string(),
                "from": { "type": "string" },
                "to": { "type": "string" },
                "body": body,
                "payload_mode": payload_mode,
                "timestamp": { "type": "string", "description": "ISO 8601, kept as sent (signatures cover it)." },
                "provenance": provenance,
                "signature": nullable_string(),
                "signature_algorithm": nullable_string(),
                "nonce": nullable_string(),
            },
        })
    }
}

/// The non-null schema of each member any body type may carry (`None`: any JSON). The decoder reads every one of
/// these members typed, whatever the body's `type`, so a mistyped member fails even in a body type that does not use
/// it.
fn slot_schema(g: &mut SchemaGenerator, name: &str) -> Option<Schema> {
    Some(match name {
        "delegate_id" | "session_id" | "reason" | "task_id" | "skill" | "message" => json_schema!({ "type": "string" }),
        "supported_modes" | "fallback_chain" => g.subschema_for::<Vec<PayloadMode>>(),
        "negotiated_mode" => g.subschema_for::<PayloadMode>(),
        "config" => g.subschema_for::<SessionConfig>(),
        "error" => g.subschema_for::<LdpError>(),
        "contract" => g.subschema_for::<DelegationContract>(),
        "progress" => json_schema!({ "type": "number" }),
        "provenance" => g.subschema_for::<Provenance>(),
        // capabilities, input, partial_output, output, claim, evidence
        _ => return None,
    })
}

/// Every member name with a typed slot in the body decoder.
const SLOTS: [&str; 20] = [
    "delegate_id",
    "supported_modes",
    "capabilities",
    "config",
    "session_id",
    "negotiated_mode",
    "fallback_chain",
    "reason",
    "error",
    "task_id",
    "skill",
    "input",
    "contract",
    "progress",
    "message",
    "partial_output",
    "output",
    "provenance",
    "claim",
    "evidence",
];

/// The members a body type requires (present and not null).
fn required_slots(ty: MessageType) -> &'static [&'static str] {
    match ty {
        MessageType::Hello => &["delegate_id"],
        MessageType::CapabilityManifest => &["capabilities"],
        MessageType::SessionAccept => &["session_id", "negotiated_mode"],
        MessageType::TaskSubmit => &["task_id", "skill"],
        MessageType::TaskUpdate | MessageType::TaskCancel => &["task_id"],
        MessageType::TaskResult => &["task_id", "provenance"],
        MessageType::TaskFailed => &["task_id", "error"],
        MessageType::SessionPropose
        | MessageType::SessionReject
        | MessageType::Attestation
        | MessageType::SessionClose => &[],
    }
}

/// A body of one type (`ty`), or of an unknown type (`None`).
fn variant_schema(g: &mut SchemaGenerator, ty: Option<MessageType>) -> Schema {
    let required_members = ty.map_or(&[][..], required_slots);
    let mut properties = serde_json::Map::new();
    let type_schema = match ty {
        Some(t) => json_schema!({ "const": t.as_str() }),
        None => {
            let names: Vec<&str> = MessageType::ALL.iter().map(|t| t.as_str()).collect();
            json_schema!({ "type": "string", "not": { "enum": names } })
        }
    };
    properties.insert("type".into(), type_schema.to_value());
    for name in SLOTS {
        let required = required_members.contains(&name);
        let schema = match slot_schema(g, name) {
            Some(schema) if required => schema,
            Some(schema) => json_schema!({ "anyOf": [schema, { "type": "null" }] }),
            None if required => json_schema!({ "not": { "type": "null" } }),
            None => json_schema!(true),
        };
        properties.insert(name.into(), schema.to_value());
    }
    let mut required = vec!["type"];
    required.extend_from_slice(required_members);
    let description = match ty {
        Some(t) => format!("A {t} body. Members of other body types may be present (as null, or typed)."),
        None => "A body of a type that is not one of the twelve: accepted so it can be answered with a typed error."
            .to_owned(),
    };
    json_schema!({
        "description": description,
        "type": "object",
        "required": required,
        "properties": properties,
    })
}

/// Schema-only marker for the body of `MessageType::ALL[I]` (`I == 12`: an unknown type).
struct VariantSchema<const I: usize>;

impl<const I: usize> VariantSchema<I> {
    fn message_type() -> Option<MessageType> {
        MessageType::ALL.get(I).copied()
    }
}

impl<const I: usize> JsonSchema for VariantSchema<I> {
    fn schema_name() -> Cow<'static, str> {
        match Self::message_type() {
            Some(t) => format!("{t:?}Body").into(),
            None => "UnknownBody".into(),
        }
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        variant_schema(g, Self::message_type())
    }
}

impl JsonSchema for Body {
    fn schema_name() -> Cow<'static, str> {
        "Body".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let variants = [
            g.subschema_for::<VariantSchema<0>>(),
            g.subschema_for::<VariantSchema<1>>(),
            g.subschema_for::<VariantSchema<2>>(),
            g.subschema_for::<VariantSchema<3>>(),
            g.subschema_for::<VariantSchema<4>>(),
            g.subschema_for::<VariantSchema<5>>(),
            g.subschema_for::<VariantSchema<6>>(),
            g.subschema_for::<VariantSchema<7>>(),
            g.subschema_for::<VariantSchema<8>>(),
            g.subschema_for::<VariantSchema<9>>(),
            g.subschema_for::<VariantSchema<10>>(),
            g.subschema_for::<VariantSchema<11>>(),
            g.subschema_for::<VariantSchema<12>>(),
        ];
        json_schema!({
            "description": "A message body (RFC 3.2), discriminated by `type`.",
            "oneOf": variants,
        })
    }
}

impl JsonSchema for PayloadMode {
    fn schema_name() -> Cow<'static, str> {
        "PayloadMode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = PayloadMode::ALL.iter().map(|m| m.as_str()).collect();
        json_schema!({
            "description": "A payload mode (RFC 4), modes 0-5.",
            "type": "string",
            "enum": names,
        })
    }
}

impl JsonSchema for Score {
    fn schema_name() -> Cow<'static, str> {
        "Score".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A quality or confidence score in 0.0-1.0.",
            "type": "number",
            "minimum": 0.0,
            "maximum": 1.0,
        })
    }
}

impl JsonSchema for DelegateId {
    fn schema_name() -> Cow<'static, str> {
        "DelegateId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`ldp:delegate:<name>`, the name non-empty and free of whitespace and control characters.",
            "type": "string",
            "pattern": "^ldp:delegate:[^\\s\\p{Cc}]+$",
        })
    }
}

impl JsonSchema for TrustDomain {
    fn schema_name() -> Cow<'static, str> {
        "TrustDomain".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A trust domain (RFC 7.1): the object, or a bare domain name.",
            "anyOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": { "type": "string" },
                        "allow_cross_domain": { "type": "boolean" },
                        "trusted_peers": { "type": ["array", "null"], "items": { "type": "string" } },
                    },
                },
            ],
        })
    }
}

impl JsonSchema for LdpError {
    fn schema_name() -> Cow<'static, str> {
        "LdpError".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let category = g.subschema_for::<ErrorCategory>();
        let severity = g.subschema_for::<Option<ErrorSeverity>>();
        json_schema!({
            "description": "A typed failure (paper 3.3). A bare string is accepted as an untyped runtime error; a \
                missing severity or retryable takes the category's default.",
            "anyOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "required": ["code", "category"],
                    "properties": {
                        "code": { "type": "string" },
                        "category": category,
                        "message": nullable_string(),
                        "severity": severity,
                        "retryable": { "type": ["boolean", "null"] },
                        "partial_output": true,
                    },
                },
            ],
        })
    }
}

impl JsonSchema for Provenance {
    fn schema_name() -> Cow<'static, str> {
        "Provenance".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        ProvenanceWire::json_schema(g)
    }
}
