//! The mappings between an LDP identity card and an A2A Agent Card, and between a task's input and output and A2A
//! message parts. Pure functions: the server, the backend and the tests use the same ones.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill, HttpAuthSecurityScheme, Part, PartContent,
    SecurityScheme,
};
use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, RawJson};
use serde_json::{Value, json};

use super::{IDENTITY_META, RPC_PATH};

/// The name of the Agent Card's security scheme for the delegate's bearer tokens.
pub const BEARER_SCHEME: &str = "bearer";
/// The A2A binding the bridge serves and speaks.
pub const JSONRPC: &str = "JSONRPC";
/// The model fields of a bridged A2A agent's card: A2A does not say which model (if any) answers.
pub const UNDECLARED: &str = "undeclared";
/// The card `extra` member naming the bridged protocol and agent.
pub const BRIDGED_EXTRA: &str = "bridged_from";
/// The capability `extra` member holding an A2A skill's tags and examples (the agent's own word).
pub const SKILL_EXTRA: &str = "a2a_skill";

/// How the delegate is reached and protected, for its Agent Card.
#[derive(Debug, Clone, Default)]
pub struct CardOptions {
    /// The delegate's base URL (the JSON-RPC endpoint is [`RPC_PATH`] under it).
    pub base_url: String,
    /// Whether requests need a bearer token (`ldp serve --token`): the card then declares an HTTP bearer scheme and
    /// requires it.
    pub bearer: bool,
    /// Whether requests need a client certificate: the card then declares a mutual-TLS scheme and requires it.
    pub mutual_tls: bool,
    /// Whether requests may carry JWT access tokens of an OpenID Connect issuer: the card then declares an
    /// `openIdConnect` scheme naming its discovery document, requires it with these scopes, and each skill with the
    /// scopes it needs.
    pub oidc: Option<CardOidc>,
    /// Whether the JSON-RPC binding takes push notification configs (`capabilities.pushNotifications`).
    pub push_notifications: bool,
}

/// The OpenID Connect side of an Agent Card: where clients get tokens and which scopes they need.
#[derive(Debug, Clone, Default)]
pub struct CardOidc {
    /// The issuer (its discovery document is `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    /// Scopes every request needs.
    pub required_scopes: Vec<String>,
    /// Scopes each skill needs, by skill.
    pub skill_scopes: HashMap<String, Vec<String>>,
}

/// The name of the Agent Card's OpenID Connect security scheme.
pub const OIDC_SCHEME: &str = "oidc";

/// The Agent Card of an LDP delegate: one skill per capability (id and name the capability's name), streaming
/// (SendStreamingMessage carries TASK_UPDATE progress), the JSON-RPC interface at [`RPC_PATH`], security schemes
/// that match the configured authentication, and the full LDP identity card in the [`IDENTITY_META`] extension's
/// params (its quality claims keep their claim types there; A2A has no field for them).
pub fn agent_card(card: &IdentityCard, options: &CardOptions) -> AgentCard {
    let base = options.base_url.trim_end_matches('/');
    let mut modes: Vec<String> = Vec::new();
    for mode in card.supported_payload_modes.iter().map(|m| media_type(*m)) {
        if !modes.iter().any(|m| m == mode) {
            modes.push(mode.to_owned());
        }
    }
    let modes = if modes.is_empty() { vec!["text/plain".to_owned(), "application/json".to_owned()] } else { modes };
    let skills = card
        .capabilities
        .iter()
        .map(|c| AgentSkill {
            id: c.name.clone(),
            name: c.name.clone(),
            description: c.description.clone().unwrap_or_else(|| format!("LDP skill {}", c.name)),
            tags: vec!["ldp".to_owned()],
            examples: None,
            input_modes: None,
            output_modes: None,
            security_requirements: options.oidc.as_ref().and_then(|oidc| {
                let scopes = oidc.skill_scopes.get(&c.name)?;
                let mut all = oidc.required_scopes.clone();
                all.extend(scopes.iter().cloned());
                Some(vec![HashMap::from([(OIDC_SCHEME.to_owned(), all)])])
            }),
        })
        .collect();
    let mut schemes = HashMap::new();
    let mut required = Vec::new();
    if options.bearer {
        let scheme = HttpAuthSecurityScheme {
            scheme: "Bearer".to_owned(),
            description: Some("a bearer token the delegate was configured with (ldp serve --token)".to_owned()),
            bearer_format: None,
        };
        schemes.insert(BEARER_SCHEME.to_owned(), SecurityScheme::HttpAuth(scheme));
        required.push(HashMap::from([(BEARER_SCHEME.to_owned(), Vec::new())]));
    }
    if let Some(oidc) = &options.oidc {
        let scheme = a2a::OpenIdConnectSecurityScheme {
            open_id_connect_url: format!("{}/.well-known/openid-configuration", oidc.issuer.trim_end_matches('/')),
            description: Some("a JWT access token of this issuer (e.g. by the client credentials grant)".to_owned()),
        };
        schemes.insert(OIDC_SCHEME.to_owned(), SecurityScheme::OpenIdConnect(scheme));
        // Any one of the listed requirements suffices: a static token, or an issuer's token with its scopes.
        required.push(HashMap::from([(OIDC_SCHEME.to_owned(), oidc.required_scopes.clone())]));
    }
    if options.mutual_tls {
        let scheme = a2a::MutualTlsSecurityScheme {
            description: Some("a client certificate the delegate maps to a peer (ldp serve --client-ca)".to_owned()),
        };
        schemes.insert("mtls".to_owned(), SecurityScheme::MutualTls(scheme));
        required.push(HashMap::from([("mtls".to_owned(), Vec::new())]));
    }
    let identity = serde_json::to_value(card).ok().and_then(|v| serde_json::from_value(v).ok());
    let extension = a2a::AgentExtension {
        uri: IDENTITY_META.to_owned(),
        description: Some("the LDP identity card this Agent Card was derived from".to_owned()),
        required: Some(false),
        params: identity.map(|card: HashMap<String, Value>| card),
    };
    AgentCard {
        name: card.name.clone(),
        description: card.description.clone().unwrap_or_else(|| format!("LDP delegate {}", card.delegate_id.as_str())),
        version: card.model_version.clone(),
        supported_interfaces: vec![AgentInterface::new(format!("{base}{RPC_PATH}"), JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(options.push_notifications),
            extensions: Some(vec![extension]),
            extended_agent_card: Some(false),
        },
        default_input_modes: modes.clone(),
        default_output_modes: modes,
        skills,
        provider: Some(AgentProvider {
            url: base.to_owned(),
            organization: format!(
                "LDP delegate {} (trust domain {})",
                card.delegate_id.as_str(),
                card.trust_domain.name
            ),
        }),
        documentation_url: None,
        icon_url: None,
        security_schemes: (!schemes.is_empty()).then_some(schemes),
        security_requirements: (!required.is_empty()).then_some(required),
        signatures: None,
    }
}

fn media_type(mode: PayloadMode) -> &'static str {
    match mode {
        PayloadMode::Text => "text/plain",
        _ => "application/json",
    }
}

/// The generated identity card of an A2A agent: one capability per skill (id as the name, description, tags and
/// examples under [`SKILL_EXTRA`] marked `self_claimed`), no quality claim (A2A makes none), the model fields
/// [`UNDECLARED`], and [`BRIDGED_EXTRA`] naming the agent and its provider. A card without skills gets one
/// capability named after the agent, so that it can be addressed at all.
pub fn identity_card(agent: &AgentCard, delegate_id: DelegateId) -> IdentityCard {
    let mut card = IdentityCard::new(delegate_id, agent.name.clone(), UNDECLARED, UNDECLARED);
    card.description = Some(format!(
        "A2A agent {} {} bridged to LDP; the model behind it, if any, is not declared. {}",
        agent.name, agent.version, agent.description
    ));
    card.supported_payload_modes = vec![PayloadMode::Text];
    card.extra.insert(
        BRIDGED_EXTRA.to_owned(),
        json!({
            "protocol": "a2a",
            "agent": {"name": agent.name, "version": agent.version},
            "provider": agent.provider.as_ref().map(|p| json!({"organization": p.organization, "url": p.url})),
            "streaming": agent.capabilities.streaming.unwrap_or(false),
        }),
    );
    for skill in &agent.skills {
        let mut capability = Capability::new(skill.id.clone());
        capability.description =
            Some(if skill.description.is_empty() { skill.name.clone() } else { skill.description.clone() });
        capability.extra.insert(
            SKILL_EXTRA.to_owned(),
            json!({"claim_type": "self_claimed", "name": skill.name, "tags": skill.tags, "examples": skill.examples}),
        );
        card.capabilities.push(capability);
    }
    if card.capabilities.is_empty() {
        card.capabilities.push(Capability::new(agent.name.clone()));
    }
    card
}

/// The message parts of a task input: a JSON string is a text part, any other value a data part.
pub fn input_parts(input: &RawJson) -> Vec<Part> {
    match input.to_value() {
        Ok(Value::String(text)) => vec![Part::text(text)],
        Ok(value) => vec![Part::data(value)],
        // Not JSON (a text-mode payload): the raw text.
        Err(_) => vec![Part::text(input.json().to_owned())],
    }
}

/// The JSON value of one part: a text part its text, a data part its data, a file its URL or bytes as an object.
pub fn part_value(part: &Part) -> Value {
    match &part.content {
        PartContent::Text(text) => Value::String(text.clone()),
        PartContent::Data(data) => data.clone(),
        PartContent::Url(url) => json!({"url": url, "mediaType": part.media_type, "filename": part.filename}),
        PartContent::Raw(bytes) => {
            json!({"bytes": bytes.len(), "mediaType": part.media_type, "filename": part.filename})
        }
    }
}

/// The task input of A2A message parts: one part is its value ([`part_value`]); several text parts are their text
/// joined; any other mix is the array of their values. `None` for no parts.
pub fn parts_value(parts: &[Part]) -> Option<Value> {
    match parts {
        [] => None,
        [one] => Some(part_value(one)),
        many if many.iter().all(|p| p.as_text().is_some()) => {
            Some(Value::String(many.iter().filter_map(Part::as_text).collect::<Vec<_>>().join("")))
        }
        many => Some(Value::Array(many.iter().map(part_value).collect())),
    }
}

/// The artifact parts of a task output: a JSON string is a text part, any other value a data part.
pub fn output_parts(output: &RawJson) -> Vec<Part> {
    input_parts(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldp_types::{ClaimType, Score};

    fn ldp_card() -> IdentityCard {
        let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:x").unwrap(), "X", "fam", "v9");
        card.capabilities
            .push(Capability::new("summarize").with_quality(Score::new(0.9).unwrap(), ClaimType::SelfClaimed));
        card
    }

    #[test]
    fn the_agent_card_follows_the_identity_card_and_its_auth() {
        let open = agent_card(&ldp_card(), &CardOptions { base_url: "http://h:1/".into(), ..Default::default() });
        assert_eq!(open.skills.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["summarize"]);
        assert_eq!(open.supported_interfaces[0].url, "http://h:1/a2a");
        assert_eq!(open.capabilities.streaming, Some(true));
        assert!(open.security_schemes.is_none() && open.security_requirements.is_none());
        let params = open.capabilities.extensions.unwrap()[0].params.clone().unwrap();
        assert_eq!(params["capabilities"][0]["quality"]["claim_type"], "self_claimed");

        let locked =
            agent_card(&ldp_card(), &CardOptions { base_url: "http://h".into(), bearer: true, ..Default::default() });
        let wire = serde_json::to_value(&locked).unwrap();
        assert_eq!(wire["securitySchemes"][BEARER_SCHEME]["httpAuthSecurityScheme"]["scheme"], "Bearer");
        assert!(wire["securityRequirements"].to_string().contains(BEARER_SCHEME), "{wire}");
    }

    #[test]
    fn an_oidc_issuer_is_declared_with_the_scopes_of_the_card_and_of_each_skill() {
        let oidc = CardOidc {
            issuer: "https://id.example/".into(),
            required_scopes: vec!["ldp:call".into()],
            skill_scopes: HashMap::from([("summarize".to_owned(), vec!["ldp:summarize".to_owned()])]),
        };
        let card = agent_card(&ldp_card(), &CardOptions { oidc: Some(oidc), ..Default::default() });
        let wire = serde_json::to_value(&card).unwrap();
        assert_eq!(
            wire["securitySchemes"][OIDC_SCHEME]["openIdConnectSecurityScheme"]["openIdConnectUrl"],
            "https://id.example/.well-known/openid-configuration",
            "{wire}"
        );
        assert_eq!(wire["securityRequirements"], json!([{"schemes": {"oidc": {"list": ["ldp:call"]}}}]), "{wire}");
        assert_eq!(
            card.skills[0].security_requirements,
            Some(vec![HashMap::from([(
                OIDC_SCHEME.to_owned(),
                vec!["ldp:call".to_owned(), "ldp:summarize".to_owned()]
            )])])
        );
    }

    #[test]
    fn a_generated_card_claims_nothing_the_agent_did_not() {
        let agent = agent_card(&ldp_card(), &CardOptions::default());
        let card = identity_card(&agent, DelegateId::new("ldp:delegate:a2a").unwrap());
        assert_eq!((card.model_family.as_str(), card.model_version.as_str()), (UNDECLARED, UNDECLARED));
        assert_eq!(card.capabilities[0].name, "summarize");
        assert!(card.capabilities.iter().all(|c| c.quality.is_none()));
        assert_eq!(card.capabilities[0].extra[SKILL_EXTRA]["claim_type"], "self_claimed");
        assert_eq!(card.extra[BRIDGED_EXTRA]["protocol"], "a2a");
    }

    #[test]
    fn parts_round_trip_values() {
        for value in [json!("hi"), json!({"a": [1, 2]}), json!(3)] {
            let parts = input_parts(&RawJson::from(value.clone()));
            assert_eq!(parts_value(&parts), Some(value));
        }
        assert_eq!(parts_value(&[Part::text("a"), Part::text("b")]), Some(json!("ab")));
        assert_eq!(parts_value(&[Part::text("a"), Part::data(json!(1))]), Some(json!(["a", 1])));
        assert_eq!(parts_value(&[]), None);
    }
}
