#![cfg(feature = "llm")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A delegate that delegates, assembled from its configuration (`backend.delegates`), as `ldp serve --delegate`
//! does: an LLM delegate whose model (an OpenAI-compatible stub answering with scripted tool calls) calls the skills
//! of real delegates over HTTP, each call routed by the router (the better self-claimed quality first, failover
//! to the other when it fails), under the child contract; the parent's result carries the hop in its lineage.

use ldp::config::{BackendKind, ServerConfig};
use ldp::{Delegate, LdpError, TaskContext};
use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
use ldp_session::runtime::Submission;
use ldp_types::{Budget, DelegationContract, FailurePolicy, codes};
use serde_json::json;

/// A delegate with one skill, `upper`, claiming `quality`; `broken` ones fail every task (retryably).
async fn upper(id: &str, quality: f64, broken: bool) -> ldp::Server {
    Delegate::builder(id)
        .skill("upper", move |input: String, _cx: TaskContext| async move {
            if broken {
                return Err(LdpError::runtime(codes::EXECUTION_FAILED, "out of order").with_retryable(true));
            }
            Ok(input.to_uppercase())
        })
        .describe("Upper-cases its input")
        .quality(quality)
        .spawn("127.0.0.1:0")
        .await
        .unwrap()
}

async fn planner(stub: &Stub, delegates: &[&ldp::Server]) -> ldp::Server {
    planner_trusting(stub, delegates, Vec::new()).await
}

/// A planner whose router trusts the attestation issuers `issuers` (`backend.delegates_issuers` entries).
async fn planner_trusting(stub: &Stub, delegates: &[&ldp::Server], issuers: Vec<String>) -> ldp::Server {
    let mut config = ServerConfig::default();
    config.backend.delegates_issuers = issuers;
    config.bind = "127.0.0.1:0".into();
    config.identity.delegate_id = Some("ldp:delegate:planner".into());
    config.backend.kind = Some(BackendKind::Openai);
    config.backend.base_url = Some(stub.base_url());
    config.backend.model = Some("stub-model".into());
    config.backend.delegates = delegates.iter().map(|d| d.url().to_owned()).collect();
    ldp::Server::start(config).await.unwrap()
}

fn contract() -> DelegationContract {
    let mut c = DelegationContract::new("ctr-plan", "shout")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(10_000), max_cost_usd: None });
    c.policy.max_delegation_depth = Some(2);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_tool_call_is_routed_to_the_better_delegate_and_fails_over() {
    let good = upper("ldp:delegate:upper-good", 0.9, false).await;
    let poor = upper("ldp:delegate:upper-poor", 0.4, false).await;
    let script = vec![StubTurn::call("upper", &json!({"input": "hello"})), StubTurn::text("it said HELLO")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script.clone())).await.unwrap();
    let server = planner(&stub, &[&good, &poor]).await;

    let conn = ldp::connect(server.url()).await.unwrap();
    let session = conn.session().await.unwrap();
    let task = Submission::new(&session, "chat", "shout hello").contract(contract());
    let out = conn.client().submit_task(task).await.unwrap();
    assert_eq!(out.output.as_string().unwrap(), "it said HELLO");
    // The tool offered was the skill, described from the card; its answer went back to the model.
    let recorded = stub.recorded();
    assert_eq!(recorded[0]["tools"][0]["function"]["name"], "upper");
    assert_eq!(recorded[0]["tools"][0]["function"]["description"], "Upper-cases its input");
    assert!(recorded[1].to_string().contains("HELLO"), "{}", recorded[1]);
    // The router chose the better claim; the hop is in the lineage.
    let hops: Vec<&str> = out.provenance.lineage.iter().map(|h| h.delegate_id.as_str()).collect();
    assert!(hops.contains(&"ldp:delegate:upper-good"), "{hops:?}");
    assert!(!hops.contains(&"ldp:delegate:upper-poor"), "{hops:?}");
    // The chain of hops as an LCTL document passes the checks `ldp lctl check` runs, and draws.
    let chain = ldp_lctl::ldp::document_from_ldp("ctr-plan", Some(&out.provenance), Some(&contract())).unwrap();
    let report = ldp_lctl::check_document(&chain);
    assert!(!report.has_errors(), "{report:?}");
    assert!(chain.trace.iter().any(|step| step.agent == "ldp:delegate:upper-good"), "{chain:?}");
    assert!(ldp_lctl::render_mermaid(&chain).contains("upper-good"));
    server.shutdown().await.unwrap();

    // The better one out of order: the call fails over to the other.
    let broken = upper("ldp:delegate:upper-broken", 0.95, true).await;
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let server = planner(&stub, &[&broken, &poor]).await;
    let conn = ldp::connect(server.url()).await.unwrap();
    let session = conn.session().await.unwrap();
    let task = Submission::new(&session, "chat", "shout hello").contract(contract());
    let out = conn.client().submit_task(task).await.unwrap();
    assert_eq!(out.output.as_string().unwrap(), "it said HELLO");
    let hops: Vec<&str> = out.provenance.lineage.iter().map(|h| h.delegate_id.as_str()).collect();
    assert!(hops.contains(&"ldp:delegate:upper-poor"), "{hops:?}");
    for s in [server, broken, good, poor] {
        s.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_that_cannot_be_reached_stops_the_server_from_starting() {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    config.backend.kind = Some(BackendKind::Openai);
    config.backend.base_url = Some(stub.base_url());
    config.backend.model = Some("stub-model".into());
    config.backend.delegates = vec!["http://127.0.0.1:1".into()];
    match ldp::Server::start(config).await {
        Err(ldp::Error::Setup { key, .. }) => assert_eq!(key, "backend.delegates"),
        other => panic!("expected a setup error naming backend.delegates, got {:?}", other.map(|s| s.url().to_owned())),
    }
    // Delegates need a model to call them: on the echo delegate or a bridge they are refused, not ignored.
    let mut config = ServerConfig::default();
    config.backend.delegates = vec!["http://127.0.0.1:1".into()];
    assert!(matches!(config.validate(), Err(ldp::config::ConfigError::Requires { key: "backend.delegates", .. })));
    config.backend.kind = Some(BackendKind::Mcp);
    config.backend.mcp_url = Some("http://127.0.0.1:1/mcp".into());
    assert!(matches!(config.validate(), Err(ldp::config::ConfigError::Requires { key: "backend.delegates", .. })));
}

/// A sub-delegate whose answer breaks the output schema its own card declares: the child contract carries that
/// schema as a `check:` criterion, so the answer comes back to the model as a typed `CONTRACT_VIOLATED`, not as
/// data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_outside_the_cards_output_schema_reaches_the_model_as_a_typed_error() {
    use std::sync::Arc;

    let mut card =
        ldp_types::IdentityCard::new(ldp_types::DelegateId::new("ldp:delegate:liar").unwrap(), "Liar", "echo", "1.0");
    card.supported_payload_modes = vec![ldp_types::PayloadMode::Text];
    let mut tally = ldp_types::Capability::new("tally").with_description("Counts things");
    tally.output_schema =
        Some(json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}));
    card.capabilities.push(tally);
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    // The echo delegate answers {"echo": ...}, which the card's schema does not allow.
    let liar = ldp::Server::start_with(config, card, Arc::new(ldp_session::runtime::EchoDelegate)).await.unwrap();

    let script = vec![StubTurn::call("tally", &json!({"input": "apples"})), StubTurn::text("could not count")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let server = planner(&stub, &[&liar]).await;
    let conn = ldp::connect(server.url()).await.unwrap();
    let out: ldp::Answer<String> = conn.call("chat", "count the apples").await.unwrap();
    assert_eq!(out.output, "could not count");
    let second = stub.recorded()[1].to_string();
    assert!(second.contains("CONTRACT_VIOLATED"), "the model was not told: {second}");
    assert!(!second.contains("\\\"echo\\\""), "the answer outside the schema reached the model as data: {second}");
    for s in [server, liar] {
        s.shutdown().await.unwrap();
    }
}

mod lying_about_quality {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use ldp::router::issuer::{
        ISSUER_KEYS_PATH, IssuerKeySet, PublishedKey, REVOCATIONS_PATH, RevocationList, with_key_id,
    };
    use ldp::router::{AttestationClaim, Quality, sign_attestation};
    use ldp::types::signing::SigningKey;
    use time::OffsetDateTime;

    const ISSUER: &str = "ldp:issuer:evals";
    const HONEST: &str = "ldp:delegate:upper-honest";
    const LIAR: &str = "ldp:delegate:upper-liar";

    fn issuer_key() -> SigningKey {
        SigningKey::ed25519_from_seed(&[7; 32])
    }

    /// `ISSUER=k1=PUBLIC_HEX[@url]`, as `--delegate-issuer` takes it.
    fn pin(url: Option<&str>) -> String {
        let hex = serde_json::to_value(PublishedKey::new("k1", &issuer_key().verifying_key(), now()).unwrap()).unwrap()
            ["public_key"]
            .as_str()
            .unwrap()
            .to_owned();
        match url {
            Some(url) => format!("{ISSUER}=k1={hex}@{url}"),
            None => format!("{ISSUER}=k1={hex}"),
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    /// The issuer's 0.8 for the honest delegate's `upper`, signed an hour ago.
    fn attestation() -> AttestationClaim {
        let at = now() - time::Duration::hours(1);
        let claim = AttestationClaim::new(HONEST, "upper", Quality::new(0.8).unwrap(), ISSUER, at)
            .expiring_at(at + time::Duration::days(30));
        sign_attestation(with_key_id(claim, "k1"), &issuer_key()).unwrap()
    }

    /// The honest delegate: it claims 0.7 itself, and publishes the issuer's attestation on its card.
    async fn honest(dir: &std::path::Path, attestation: &AttestationClaim) -> ldp::Server {
        let path = dir.join("attestation.json");
        std::fs::write(&path, serde_json::to_string(attestation).unwrap()).unwrap();
        let mut builder = Delegate::builder(HONEST)
            .skill("upper", |input: String, _cx: TaskContext| async move { Ok::<_, LdpError>(input.to_uppercase()) })
            .describe("Upper-cases its input")
            .quality(0.7);
        builder.config_mut().identity.attestations = vec![path];
        builder.spawn("127.0.0.1:0").await.unwrap()
    }

    /// The liar: its card labels 0.99 on `upper` as issuer-attested, with no attestation behind the label.
    async fn liar() -> ldp::Server {
        let mut card = ldp_types::IdentityCard::new(ldp_types::DelegateId::new(LIAR).unwrap(), "Liar", "echo", "1.0");
        card.supported_payload_modes = vec![ldp_types::PayloadMode::Text];
        let upper = ldp_types::Capability::new("upper")
            .with_description("Upper-cases its input")
            .with_quality(ldp_types::Score::new(0.99).unwrap(), ldp_types::ClaimType::IssuerAttested);
        card.capabilities.push(upper);
        let mut config = ServerConfig::default();
        config.bind = "127.0.0.1:0".into();
        ldp::Server::start_with(config, card, Arc::new(Mumbler)).await.unwrap()
    }

    /// The liar's skill: a string, as the tool's schema wants, but not upper-cased.
    struct Mumbler;

    #[async_trait::async_trait]
    impl ldp_session::runtime::Delegate for Mumbler {
        async fn execute(
            &self,
            task: ldp_session::TaskRequest,
            _cx: TaskContext,
        ) -> Result<ldp_session::TaskOutput, LdpError> {
            let text = task.input.json().to_lowercase();
            Ok(ldp_session::TaskOutput::new(ldp_types::RawJson::from_json(text).unwrap()))
        }
    }

    /// An issuer publishing its key set and a revocation list naming `revoked`, at `/.well-known/...`.
    async fn issuer_site(revoked: Vec<String>) -> (String, tokio::task::JoinHandle<()>) {
        let at = now() - time::Duration::minutes(1);
        let key = issuer_key();
        let published = PublishedKey::new("k1", &key.verifying_key(), at - time::Duration::days(1)).unwrap();
        let keys =
            serde_json::to_string(&IssuerKeySet::signed(ISSUER, at, vec![published], "k1", &key).unwrap()).unwrap();
        let list =
            RevocationList::signed(ISSUER, at, Duration::from_secs(86_400), revoked, vec![], "k1", &key).unwrap();
        let list = serde_json::to_string(&list).unwrap();
        let json = |body: String| move || async move { ([("content-type", "application/json")], body) };
        let app = axum::Router::new()
            .route(ISSUER_KEYS_PATH, axum::routing::get(json(keys)))
            .route(REVOCATIONS_PATH, axum::routing::get(json(list)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        (url, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
    }

    /// Runs one planner task calling `upper`; the delegates in its lineage.
    async fn hops_with(delegates: &[&ldp::Server], issuers: Vec<String>) -> Vec<String> {
        let script = vec![StubTurn::call("upper", &json!({"input": "hello"})), StubTurn::text("done")];
        let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
        let server = planner_trusting(&stub, delegates, issuers).await;
        let conn = ldp::connect(server.url()).await.unwrap();
        let out: ldp::Answer<String> = conn.call("chat", "shout hello").await.unwrap();
        server.shutdown().await.unwrap();
        out.provenance.lineage.iter().map(|h| h.delegate_id.clone()).collect()
    }

    /// A sub-delegate that lies about its quality loses to one whose lower quality an issuer the planner trusts has
    /// attested: the unbacked label counts as a self-claim, below any attestation. Without the issuer pinned (the
    /// control) the lie wins; with the attestation revoked at the issuer's site, it wins again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_attested_delegate_beats_one_that_lies_about_its_quality() {
        let dir = std::env::temp_dir().join(format!("ldp-lying-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let attested = attestation();
        let honest = honest(&dir, &attested).await;
        let liar = liar().await;
        let card = ldp::connect(honest.url()).await.unwrap().card().clone();
        assert_eq!(card.extra["attestations"][0]["subject"], HONEST, "the attestation is on the card");

        let trusted = hops_with(&[&liar, &honest], vec![pin(None)]).await;
        assert!(trusted.iter().any(|h| h == HONEST) && !trusted.iter().any(|h| h == LIAR), "{trusted:?}");

        let untrusted = hops_with(&[&liar, &honest], Vec::new()).await;
        assert!(
            untrusted.iter().any(|h| h == LIAR),
            "without the issuer the claims are all self-claims: {untrusted:?}"
        );

        let (site, _issuer) = issuer_site(Vec::new()).await;
        let fetched = hops_with(&[&liar, &honest], vec![pin(Some(&site))]).await;
        assert!(fetched.iter().any(|h| h == HONEST), "with fresh documents the attestation counts: {fetched:?}");

        let revoked = attested.signature.clone().unwrap();
        let (site, _issuer) = issuer_site(vec![revoked]).await;
        let after = hops_with(&[&liar, &honest], vec![pin(Some(&site))]).await;
        assert!(after.iter().any(|h| h == LIAR), "a revoked attestation no longer counts: {after:?}");
        for s in [liar, honest] {
            s.shutdown().await.unwrap();
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A pin that cannot be read, an issuer that cannot be reached, or an attestation about another delegate stop
    /// the start with the key that is wrong.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_issuer_pins_and_attestations_stop_the_start() {
        let toml = |entry: &str| {
            format!(
                "[backend]\nkind = \"echo\"\ndelegates = [\"http://127.0.0.1:1\"]\ndelegates_issuers = [\"{entry}\"]\n"
            )
        };
        for bad in
            ["ldp:issuer:x", "ldp:issuer:x=k1", "ldp:issuer:x=k1=abcd", "=k1=00", &format!("{}@ftp://x", pin(None))]
        {
            let err = ServerConfig::from_toml_str(&toml(bad), "ldp.toml").unwrap_err().to_string();
            assert!(err.contains("delegates_issuers") && err.contains("ISSUER_ID=KEY_ID=PUBLIC_HEX"), "{bad}: {err}");
        }

        let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
        let good = upper("ldp:delegate:upper-good", 0.9, false).await;
        let mut config = ServerConfig::default();
        config.bind = "127.0.0.1:0".into();
        config.backend.kind = Some(BackendKind::Openai);
        config.backend.base_url = Some(stub.base_url());
        config.backend.model = Some("stub-model".into());
        config.backend.delegates = vec![good.url().to_owned()];
        config.backend.delegates_issuers = vec![pin(Some("http://127.0.0.1:1"))];
        match ldp::Server::start(config).await {
            Err(ldp::Error::Setup { key, .. }) => assert_eq!(key, "backend.delegates_issuers"),
            other => panic!("expected a setup error, got {:?}", other.map(|s| s.url().to_owned())),
        }

        let dir = std::env::temp_dir().join(format!("ldp-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("foreign.json");
        std::fs::write(&path, serde_json::to_string(&attestation()).unwrap()).unwrap();
        let mut builder = Delegate::builder("ldp:delegate:someone-else")
            .skill("upper", |input: String, _cx: TaskContext| async move { Ok::<_, LdpError>(input) });
        builder.config_mut().identity.attestations = vec![path];
        match builder.spawn("127.0.0.1:0").await {
            Err(ldp::Error::Setup { key, source }) => {
                assert_eq!(key, "identity.attestations");
                assert!(source.to_string().contains(HONEST), "{source}");
            }
            other => panic!("expected a setup error, got {:?}", other.map(|s| s.url().to_owned())),
        }
        good.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The chain hop by hop, over both providers' wires: a planner whose model (an OpenAI-compatible or Anthropic
/// Messages stub, plain and streamed, the Anthropic one streaming each `tool_use` input as `input_json_delta`
/// pieces) calls two real delegates in turn; each call's `tool_result` goes back to the model, and each hop's
/// lineage entry carries what that delegate reported (confidence, tokens, cost, verification status), the skill it
/// ran and the time it took. The chain as LCTL passes the checks `ldp lctl check` runs and draws each hop.
mod chain_facts {
    use super::*;
    use ldp::TaskOutput;
    use ldp_types::{Score, VerificationStatus};

    /// What a delegate reports of its work.
    #[derive(Clone, Copy)]
    struct Facts {
        confidence: f64,
        tokens: u64,
        cost_usd: f64,
        status: VerificationStatus,
    }

    const EXTRACT: Facts =
        Facts { confidence: 0.91, tokens: 120, cost_usd: 0.0012, status: VerificationStatus::ToolVerified };
    const TRANSLATE: Facts =
        Facts { confidence: 0.74, tokens: 64, cost_usd: 0.0007, status: VerificationStatus::PeerVerified };

    /// A delegate with one skill that upper-cases its input and reports `facts` with the result.
    async fn reporting(id: &str, skill: &str, facts: Facts) -> ldp::Server {
        Delegate::builder(id)
            .skill(skill, move |input: String, _cx: TaskContext| async move {
                let out = TaskOutput {
                    confidence: Score::new(facts.confidence).ok(),
                    tokens_used: Some(facts.tokens),
                    cost_usd: Some(facts.cost_usd),
                    verification_status: facts.status,
                    ..TaskOutput::new(input.to_uppercase().as_str())
                };
                Ok::<_, LdpError>(ldp::Output::from(out))
            })
            .describe(format!("The skill {skill}"))
            .spawn("127.0.0.1:0")
            .await
            .unwrap()
    }

    async fn planner_on(stub: &Stub, flavor: Flavor, stream: bool, delegates: &[&ldp::Server]) -> ldp::Server {
        let mut config = ServerConfig::default();
        config.bind = "127.0.0.1:0".into();
        config.identity.delegate_id = Some("ldp:delegate:planner".into());
        config.backend.kind = Some(match flavor {
            Flavor::OpenAi => BackendKind::Openai,
            Flavor::Anthropic => BackendKind::Anthropic,
        });
        config.backend.base_url = Some(stub.base_url());
        config.backend.model = Some("stub-model".into());
        config.backend.no_stream = !stream;
        config.backend.delegates = delegates.iter().map(|d| d.url().to_owned()).collect();
        ldp::Server::start(config).await.unwrap()
    }

    /// The tool results the planner sent back to the model in `request`, as (call id, content), in each wire's shape.
    fn tool_results(flavor: Flavor, request: &serde_json::Value) -> Vec<(String, String)> {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        match flavor {
            Flavor::OpenAi => messages
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| (m["tool_call_id"].as_str().unwrap().to_owned(), m["content"].to_string()))
                .collect(),
            Flavor::Anthropic => messages
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_array().cloned())
                .flatten()
                .filter(|block| block["type"] == "tool_result")
                .map(|block| (block["tool_use_id"].as_str().unwrap().to_owned(), block["content"].to_string()))
                .collect(),
        }
    }

    /// The ids of the calls the model made, as the planner replayed them to it in `request`.
    fn replayed_calls(flavor: Flavor, request: &serde_json::Value) -> Vec<String> {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let assistant = messages.iter().filter(|m| m["role"] == "assistant");
        match flavor {
            Flavor::OpenAi => assistant
                .filter_map(|m| m["tool_calls"].as_array().cloned())
                .flatten()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .collect(),
            Flavor::Anthropic => assistant
                .filter_map(|m| m["content"].as_array().cloned())
                .flatten()
                .filter(|block| block["type"] == "tool_use")
                .map(|block| block["id"].as_str().unwrap().to_owned())
                .collect(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_hop_carries_what_its_delegate_reported_over_both_wires() {
        let extractor = reporting("ldp:delegate:extractor", "extract", EXTRACT).await;
        let translator = reporting("ldp:delegate:translator", "translate", TRANSLATE).await;
        let hops = [
            ("ldp:delegate:extractor", "extract", "quarterly", EXTRACT),
            ("ldp:delegate:translator", "translate", "revenue", TRANSLATE),
        ];
        for flavor in [Flavor::OpenAi, Flavor::Anthropic] {
            for stream in [false, true] {
                let what = format!("{flavor:?}, streamed: {stream}");
                let script = vec![
                    StubTurn::call(hops[0].1, &json!({"input": hops[0].2})),
                    StubTurn::call(hops[1].1, &json!({"input": hops[1].2})),
                    StubTurn::text("both done"),
                ];
                let stub = Stub::start(StubConfig::new(flavor).with_script(script)).await.unwrap();
                let server = planner_on(&stub, flavor, stream, &[&extractor, &translator]).await;
                let conn = ldp::connect(server.url()).await.unwrap();
                let session = conn.session().await.unwrap();
                let started = std::time::Instant::now();
                let task = Submission::new(&session, "chat", "extract and translate").contract(contract());
                let out = conn.client().submit_task(task).await.unwrap();
                let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap();
                assert_eq!(out.output.as_string().unwrap(), "both done", "{what}");

                // Each call's answer went back to the model as that call's result, in the wire's own shape.
                let recorded = stub.recorded();
                assert_eq!(recorded.len(), 3, "{what}");
                let last = &recorded[2];
                let results = tool_results(flavor, last);
                assert_eq!(results.len(), 2, "{what}: {last}");
                let calls = replayed_calls(flavor, last);
                for (index, (call_id, content)) in results.iter().enumerate() {
                    assert_eq!(Some(call_id), calls.get(index), "{what}: {last}");
                    assert!(content.contains(&hops[index].2.to_uppercase()), "{what}: {content}");
                }
                if stream {
                    assert_eq!(last["stream"], true, "{what}");
                }

                // One lineage entry per hop, in call order, each with the facts its delegate reported.
                let lineage = &out.provenance.lineage;
                assert_eq!(lineage.len(), hops.len(), "{what}: {lineage:?}");
                let mut hop_tokens = 0;
                for (entry, (id, skill, _, facts)) in lineage.iter().zip(hops) {
                    assert_eq!(entry.delegate_id, id, "{what}");
                    assert_eq!(entry.step, "delegated", "{what}");
                    assert_eq!(entry.skill.as_deref(), Some(skill), "{what}");
                    assert_eq!(entry.confidence, Score::new(facts.confidence).ok(), "{what}");
                    assert_eq!(entry.tokens_used, Some(facts.tokens), "{what}");
                    assert_eq!(entry.cost_usd, Some(facts.cost_usd), "{what}");
                    assert_eq!(entry.verification_status, facts.status, "{what}");
                    let latency = entry.latency_ms.unwrap();
                    assert!(latency <= elapsed_ms, "{what}: a hop of {latency} ms in a task of {elapsed_ms} ms");
                    hop_tokens += facts.tokens;
                }
                // The parent's usage sums the model's answers and the hops'.
                let total = out.provenance.tokens_used.unwrap();
                assert!(total > hop_tokens, "{what}: {total} tokens for hops of {hop_tokens}");
                let hop_cost: f64 = hops.iter().map(|h| h.3.cost_usd).sum();
                assert!(out.provenance.cost_usd.unwrap() >= hop_cost - 1e-12, "{what}");

                // The chain, hop by hop, as LCTL: it passes `ldp lctl check` (`check_chain`) and each hop is drawn
                // with its time, its skill and its confidence.
                let doc =
                    ldp_lctl::ldp::document_from_ldp("ctr-plan", Some(&out.provenance), Some(&contract())).unwrap();
                let doc = ldp_lctl::parse(&doc.to_yaml().unwrap()).unwrap();
                let report = ldp_lctl::check_chain(std::slice::from_ref(&doc));
                assert!(!report.has_errors(), "{what}: {report:?}");
                let drawn = ldp_lctl::render_mermaid(&doc);
                let timeline = ldp_lctl::render_timeline(&doc);
                for (entry, step) in lineage.iter().zip(&doc.trace) {
                    assert_eq!(step.agent, entry.delegate_id, "{what}");
                    assert_eq!(step.duration_ms, entry.latency_ms, "{what}");
                    let confidence = step.confidence.unwrap();
                    assert_eq!(Some(confidence.value()), entry.confidence.map(|c| c.get()), "{what}");
                    let skill = entry.skill.as_deref().unwrap();
                    let title = format!("{}: {} ({} ms)", step.step, entry.delegate_id, entry.latency_ms.unwrap());
                    assert!(drawn.contains(&title), "{what}: {title} not in {drawn}");
                    assert!(drawn.contains(&format!("delegated {skill}")), "{what}: {drawn}");
                    assert!(timeline.contains(&confidence.to_string()), "{what}: {timeline}");
                }
                server.shutdown().await.unwrap();
            }
        }
        for s in [extractor, translator] {
            s.shutdown().await.unwrap();
        }
    }
}
