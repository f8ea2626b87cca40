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
