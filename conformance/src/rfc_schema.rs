//! The identity card as RFC 2.1 and 2.2 type it, as a strict JSON Schema: the kit judges a peer's card with it rather
//! than with `ldp-types`' decoder and schemas, which are deliberately liberal (they accept what the reference SDKs
//! send: a bare string for a trust domain, a missing endpoint). Strict means: every required field present with the
//! RFC's type, objects where the RFC has a type of its own (`TrustDomain`, `LdpCapability`), the RFC's enums
//! (payload modes, cost tiers), a URL for `endpoint`. Members the RFC does not name are allowed: it never forbids
//! them, and both reference SDKs add some. An optional member may be `null` (read as absent, as the Python SDK
//! writes every unset optional field); a required one may not.

use serde_json::{Value, json};

/// The payload mode names of RFC 4.1.
const PAYLOAD_MODES: [&str; 6] =
    ["text", "semantic_frame", "embedding_hints", "semantic_graph", "latent_capsules", "cache_slices"];

/// RFC 2.1 / 2.2: "Cost tier: \"low\", \"medium\", \"high\"".
const COST_TIERS: [&str; 3] = ["low", "medium", "high"];

/// The strict schema of an identity card.
pub(crate) fn identity_card() -> Value {
    let string = json!({ "type": ["string", "null"] });
    let mut tiers: Vec<Value> = COST_TIERS.iter().map(|t| json!(t)).collect();
    tiers.push(Value::Null);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "LdpIdentityCard (RFC 2.1, strict)",
        "type": "object",
        "required": [
            "delegate_id", "name", "model_family", "model_version", "trust_domain", "context_window",
            "capabilities", "supported_payload_modes", "endpoint"
        ],
        "properties": {
            "delegate_id": { "type": "string", "pattern": "^ldp:delegate:.+$" },
            "name": { "type": "string" },
            "model_family": { "type": "string" },
            "model_version": { "type": "string" },
            "trust_domain": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": { "type": "string", "minLength": 1 },
                    "allow_cross_domain": { "type": ["boolean", "null"] },
                    "trusted_peers": { "type": ["array", "null"], "items": { "type": "string" } }
                }
            },
            "context_window": { "type": "integer", "minimum": 0 },
            "capabilities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": { "type": "string", "minLength": 1 },
                        "quality_hint": { "type": ["number", "null"], "minimum": 0.0, "maximum": 1.0 },
                        "latency_hint_ms_p50": { "type": ["integer", "null"], "minimum": 0 },
                        "cost_hint": { "enum": tiers },
                        "quality": {
                            "type": ["object", "null"],
                            "properties": {
                                "quality_score": { "type": ["number", "null"], "minimum": 0.0, "maximum": 1.0 }
                            }
                        }
                    }
                }
            },
            "supported_payload_modes": { "type": "array", "items": { "enum": PAYLOAD_MODES } },
            "endpoint": { "type": "string", "format": "uri" },
            "description": string,
            "weights_fingerprint": string,
            "reasoning_profile": string,
            "cost_profile": { "enum": tiers },
            "latency_profile": string,
            "jurisdiction": string,
            "metadata": { "type": ["object", "null"], "additionalProperties": { "type": "string" } }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violations(card: &Value) -> Vec<String> {
        let v = jsonschema::options().should_validate_formats(true).build(&identity_card()).unwrap();
        v.iter_errors(card).map(|e| format!("{} {e}", e.instance_path())).collect()
    }

    fn good() -> Value {
        json!({
            "delegate_id": "ldp:delegate:x", "name": "X", "model_family": "f", "model_version": "1",
            "trust_domain": { "name": "d", "allow_cross_domain": false, "trusted_peers": [] },
            "context_window": 8192,
            "capabilities": [{ "name": "echo", "quality_hint": 0.5, "cost_hint": "low", "x_unknown": 1 }],
            "supported_payload_modes": ["text"], "endpoint": "https://x.example/ldp", "x_vendor": { "a": 1 },
            "jurisdiction": null, "cost_profile": null, "metadata": null
        })
    }

    #[test]
    fn an_rfc_card_with_unknown_members_is_valid() {
        assert_eq!(violations(&good()), Vec::<String>::new());
    }

    #[test]
    fn liberal_shapes_are_violations() {
        let cases: [(&str, Value); 6] = [
            ("/trust_domain", json!("d")),
            ("/endpoint", json!("not a url")),
            ("/supported_payload_modes/0", json!(["telepathy"])),
            ("/capabilities", json!("echo")),
            ("/context_window", json!("8192")),
            ("/delegate_id", json!("x")),
        ];
        for (path, bad) in cases {
            let mut card = good();
            let member = path.trim_start_matches('/').split('/').next().unwrap();
            card[member] = bad;
            let v = violations(&card);
            assert!(v.iter().any(|e| e.starts_with(path)), "{path}: {v:?}");
        }
        let mut card = good();
        card.as_object_mut().unwrap().remove("endpoint");
        assert!(!violations(&card).is_empty());
        let mut card = good();
        card["cost_profile"] = json!("cheap");
        assert!(!violations(&card).is_empty());
    }
}
