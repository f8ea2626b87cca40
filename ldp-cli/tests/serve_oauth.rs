//! JWT access tokens against a real authorization server: Authlib's (scripts/auth_server.py, installed under
//! target/ by scripts/auth-server.sh; never skipped), issuing RS256 and ES256 tokens by client credentials and
//! rotating its keys on request. `ldp serve --jwt-issuer` validates them; `ldp call` and the front door fetch them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::{self, Guard, TempDir};

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use ldp::{Answer, ClientCredentials, ClientOptions, ConnectSettings, Delegate, TaskContext};
use serde_json::{Value, json};

const AUDIENCE: &str = "https://ldp.test";
const SECRET_VAR: &str = "LDP_OAUTH_CLIENT_SECRET";

/// The venv python with Authlib, installed once per test run (the script fails loudly rather than skip).
fn auth_python() -> &'static str {
    static PY: OnceLock<String> = OnceLock::new();
    PY.get_or_init(|| {
        let out = Command::new("bash")
            .arg(support::repo().join("scripts/auth-server.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run scripts/auth-server.sh");
        assert!(out.status.success(), "scripts/auth-server.sh could not install Authlib (see stderr)");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    })
}

/// A running authorization server: `agent` may have `ldp:call`, `reader` `ldp:call ldp:echo`.
struct AuthServer {
    _guard: Guard,
    url: String,
}

fn auth_server() -> AuthServer {
    let mut child = Command::new(auth_python())
        .arg(support::repo().join("scripts/auth_server.py"))
        .args(["--audience", AUDIENCE, "--client", "agent:agent-secret:ldp:call"])
        .args(["--client", "reader:reader-secret:ldp:call ldp:echo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("auth server said {line:?}: {e}"))["url"]
        .as_str()
        .unwrap()
        .to_owned();
    AuthServer { _guard: guard, url }
}

impl AuthServer {
    /// POSTs `body` to an admin endpoint of the server (see scripts/auth_server.py) and returns its answer.
    fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.url);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let resp = reqwest::Client::new().post(&url).json(&body).send().await.unwrap();
            assert!(resp.status().is_success(), "POST {url}: {}", resp.status());
            resp.json().await.unwrap()
        })
    }

    /// A token minted by the server's admin endpoint.
    fn mint(&self, body: Value) -> String {
        self.post("/admin/mint", body)["token"].as_str().unwrap().to_owned()
    }

    fn token_url(&self) -> String {
        format!("{}/oauth/token", self.url)
    }
}

/// `token` with one character of its signature changed.
fn tampered(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let at = bytes.len() - 10;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

fn ldp(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(args).env_remove("LDP_TOKEN").env_remove(SECRET_VAR);
    for (name, value) in env {
        command.env(name, value);
    }
    command.stdin(Stdio::null()).output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!("stdout is not one JSON value ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr))
    })
}

/// `ldp serve` accepting the auth server's tokens for `AUDIENCE`.
fn serve_jwt(auth: &AuthServer, extra: &[&str]) -> (Guard, String) {
    let mut args = vec!["--jwt-issuer", &auth.url, "--jwt-audience", AUDIENCE];
    args.extend_from_slice(extra);
    support::serve(&args, Stdio::null())
}

/// `ldp call URL echo "hi" --json` with client credentials of `client`.
fn call_as(url: &str, auth: &AuthServer, client: &str, secret: &str, scope: &str) -> Output {
    let token_url = auth.token_url();
    ldp(
        &[
            "call",
            url,
            "echo",
            "hi",
            "--json",
            "--oauth-token-url",
            &token_url,
            "--oauth-client-id",
            client,
            "--oauth-scope",
            scope,
            "--oauth-audience",
            AUDIENCE,
        ],
        &[(SECRET_VAR, secret)],
    )
}

#[test]
fn ldp_call_gets_a_token_by_client_credentials_and_the_server_validates_it() {
    let auth = auth_server();
    let (_server, url) = serve_jwt(&auth, &[]);

    let out = call_as(&url, &auth, "agent", "agent-secret", "ldp:call");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["output"], json!({"echo": "hi"}));
    // Over WebSocket: the token goes with the upgrade.
    let ws = url.replacen("http://", "ws://", 1);
    let token_url = auth.token_url();
    let out = ldp(
        &["call", &ws, "echo", "7", "--json", "--oauth-token-url", &token_url, "--oauth-client-id", "agent"],
        &[(SECRET_VAR, "agent-secret")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // Without a token: 401, and the challenge names the protected resource metadata.
    let out = ldp(&["call", &url, "echo", "hi", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "UNAUTHENTICATED");
    // A wrong client secret: the token endpoint's refusal, typed, the secret nowhere.
    let out = call_as(&url, &auth, "agent", "not-the-secret", "ldp:call");
    assert_eq!(out.status.code(), Some(1));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("invalid_client") && !text.contains("not-the-secret"), "{text}");
    // A token from a command.
    let dir = TempDir::new("oauth-token-command");
    let file = dir.write("token", &auth.mint(json!({"aud": AUDIENCE})));
    let command = format!("cat {file}");
    let out = ldp(&["call", &url, "echo", "hi", "--json", "--token-command", &command], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_protected_resource_metadata_and_challenges_point_at_the_issuer() {
    let auth = auth_server();
    let (_server, url) =
        serve_jwt(&auth, &["--endpoint-scope", "/mcp=mcp:tools", "--mcp", "--a2a", "--skill-scope", "echo=ldp:echo"]);
    let token = auth.mint(json!({"aud": AUDIENCE, "scope": "ldp:call"}));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
            let doc: Value = http.get(format!("{url}{path}")).send().await.unwrap().json().await.unwrap();
            assert_eq!(doc["resource"], url.as_str(), "{doc}");
            assert_eq!(doc["authorization_servers"], json!([auth.url]), "{doc}");
            assert_eq!(doc["scopes_supported"], json!(["ldp:echo", "mcp:tools"]), "{doc}");
        }
        // The A2A Agent Card declares the same issuer, and the scope each skill needs.
        let card: Value =
            http.get(format!("{url}{}", ldp_bridge::a2a::CARD_PATH)).send().await.unwrap().json().await.unwrap();
        let oidc = &card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"];
        assert_eq!(oidc["openIdConnectUrl"], format!("{}/.well-known/openid-configuration", auth.url), "{card}");
        let echo = card["skills"].as_array().unwrap().iter().find(|s| s["id"] == "echo").unwrap();
        assert_eq!(echo["securityRequirements"], json!([{"schemes": {"oidc": {"list": ["ldp:echo"]}}}]), "{card}");
        let resp = http.post(format!("{url}/ldp/messages")).body("{}").send().await.unwrap();
        assert_eq!(resp.status(), 401);
        let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
        assert_eq!(
            challenge,
            format!("Bearer realm=\"ldp\", resource_metadata=\"{url}/.well-known/oauth-protected-resource\"")
        );
        // A valid token without the endpoint's scope: 403 insufficient_scope at /mcp.
        let resp = http.post(format!("{url}/mcp")).bearer_auth(&token).body("{}").send().await.unwrap();
        assert_eq!(resp.status(), 403);
        let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("error=\"insufficient_scope\", scope=\"mcp:tools\""), "{challenge}");
    });
}

#[test]
fn each_hostile_token_is_refused_with_its_reason() {
    let auth = auth_server();
    let (_server, url) = serve_jwt(&auth, &[]);
    let cases = [
        ("expired", auth.mint(json!({"aud": AUDIENCE, "exp_in": -3600})), "token expired"),
        ("not yet valid", auth.mint(json!({"aud": AUDIENCE, "nbf_in": 3600})), "token not yet valid"),
        (
            "wrong issuer",
            auth.mint(json!({"aud": AUDIENCE, "claims": {"iss": "https://evil.example"}})),
            "token from the wrong issuer",
        ),
        ("wrong audience", auth.mint(json!({"aud": "https://another.service"})), "token for the wrong audience"),
        ("alg none", auth.mint(json!({"aud": AUDIENCE, "forge": "none"})), "token algorithm not allowed"),
        (
            "HMAC keyed with the public key",
            auth.mint(json!({"aud": AUDIENCE, "forge": "hs256-public-key"})),
            "token algorithm not allowed",
        ),
        (
            "oversized",
            auth.mint(json!({"aud": AUDIENCE, "claims": {"pad": "x".repeat(9000)}})),
            "token longer than 8192 bytes",
        ),
        ("garbage", "garbage".to_owned(), "malformed token"),
        ("bad signature", tampered(&auth.mint(json!({"aud": AUDIENCE}))), "bad token signature"),
    ];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        for (name, token, reason) in &cases {
            let resp = http
                .post(format!("{url}/ldp/messages"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 401, "{name}");
            let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
            assert!(
                challenge.contains(&format!("error=\"invalid_token\", error_description=\"{reason}\"")),
                "{name}: {challenge}"
            );
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"]["code"], "UNAUTHENTICATED", "{name}");
            assert_eq!(body["error"]["message"], format!("bearer token refused: {reason}"), "{name}");
            let prefix = &token[..token.len().min(24)];
            assert!(!challenge.contains(prefix) && !body.to_string().contains(prefix), "{name}: the token is echoed");
        }
    });
}

#[test]
fn keys_rotate_at_the_issuer_while_the_delegate_runs() {
    let auth = auth_server();
    let (_server, url) = serve_jwt(&auth, &[]);
    let old = auth.mint(json!({"aud": AUDIENCE}));
    let call = |token: &str| ldp(&["call", &url, "echo", "hi", "--json", "--token", token], &[]);
    let out = call(&old);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // A new key (another algorithm too): its tokens are accepted at once, the old ones until they expire.
    auth.post("/admin/rotate", json!({"alg": "ES256"}));
    let new = auth.mint(json!({"aud": AUDIENCE}));
    assert!(new.len() < old.len(), "ES256 tokens are the shorter ones");
    let out = call(&new);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = call(&old);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // By client credentials too, signed with the new key.
    let out = call_as(&url, &auth, "agent", "agent-secret", "ldp:call");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // A token of a key the issuer never published is refused as such.
    let retired = auth.post("/admin/rotate", json!({"alg": "RS256"}))["kid"].as_str().unwrap().to_owned();
    auth.post("/admin/retire", json!({"kid": retired}));
    let orphan = auth.mint(json!({"aud": AUDIENCE, "kid": retired}));
    let out = call(&orphan);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["message"], "bearer token refused: token signed by an unknown key");
}

#[test]
fn scopes_are_enforced_per_skill() {
    let auth = auth_server();
    let (_server, url) = serve_jwt(&auth, &["--skill-scope", "echo=ldp:echo"]);
    let out = call_as(&url, &auth, "agent", "agent-secret", "ldp:call");
    assert_eq!(out.status.code(), Some(1));
    let error = &stdout_json(&out)["error"];
    assert_eq!(error["code"], "TRUST_VIOLATION", "{error}");
    assert_eq!(error["message"], "skill \"echo\" requires the scope \"ldp:echo\"", "{error}");
    let out = call_as(&url, &auth, "reader", "reader-secret", "ldp:call ldp:echo");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn the_front_door_serves_and_calls_with_client_credentials() {
    let auth = tokio::task::spawn_blocking(auth_server).await.unwrap();
    let server = Delegate::builder("ldp:delegate:jwt")
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .skill("admin", |input: String, _cx: TaskContext| async move { Ok(input) })
        .jwt_issuer(auth.url.clone(), AUDIENCE)
        .skill_scope("admin", "ldp:echo")
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let source = ClientCredentials::new(auth.token_url(), "agent", "agent-secret").unwrap().scopes(["ldp:call"]);
    let options = ClientOptions::new().token_source(source).request_timeout(Duration::from_secs(10));
    let conn = ldp::connect_with(server.url(), options).await.unwrap();
    let answer: Answer<String> = conn.call("upper", "jwt").await.unwrap();
    assert_eq!(answer.output, "JWT");
    let refused = conn.call::<String>("admin", "x").await.unwrap_err();
    assert!(refused.to_string().contains("requires the scope"), "{refused}");
    // Without a token: connecting (HELLO) is refused.
    let refused = ldp::connect(server.url()).await.map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("bearer token required"), "{refused}");
    server.shutdown().await.unwrap();
}

/// `ldp serve --mcp` at a fixed free port, its tokens' audience being its own URL (what the MCP SDK asks for, as
/// RFC 8707's `resource`).
fn serve_mcp_at_own_audience(auth: &AuthServer) -> (Guard, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let own = format!("http://{bind}");
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command
        .args(["serve", "--bind", &bind, "--mcp", "--jwt-issuer", &auth.url, "--jwt-audience", &own])
        .args(["--endpoint-scope", "/mcp=ldp:echo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    support::serve_command(command)
}

#[test]
fn an_mcp_host_discovers_the_authorization_server_gets_a_token_and_calls_a_tool() {
    let auth = auth_server();
    let (_server, url) = serve_mcp_at_own_audience(&auth);
    let args: Vec<String> = [
        format!("{url}/mcp"),
        auth.url.clone(),
        "reader".into(),
        "reader-secret".into(),
        "ldp:call ldp:echo".into(),
        "echo".into(),
        r#"{"input": "via oauth"}"#.into(),
    ]
    .into();
    let result = support::run_bridge_script("mcp_oauth_client.py", &args, Duration::from_secs(120));
    assert_eq!(result["isError"], json!(false), "{result}");
    assert!(result.to_string().contains("via oauth"), "{result}");
}

#[test]
fn ldp_conformance_fetches_its_token_and_the_jwt_server_passes_the_kit() {
    let auth = auth_server();
    let (_server, url) = serve_jwt(
        &auth,
        &["--trust-domain", "conformance.test", "--token", "foreign-token=conformance-untrusted.invalid"],
    );
    let report = std::env::temp_dir().join(format!("ldp-conformance-jwt-{}.json", std::process::id()));
    let token_url = auth.token_url();
    let out = ldp(
        &[
            "conformance",
            &url,
            "--oauth-token-url",
            &token_url,
            "--oauth-client-id",
            "agent",
            "--oauth-audience",
            AUDIENCE,
            "--untrusted-token",
            "foreign-token",
            "--ttl-hint",
            "1",
            "--deadline",
            "240",
            "--format",
            "json",
            "--output",
            report.to_str().unwrap(),
        ],
        &[(SECRET_VAR, "agent-secret")],
    );
    let (json, failing) = support::read_report(&report);
    let _ = std::fs::remove_file(&report);
    assert_eq!(out.status.code(), Some(0), "{}\nfailures: {failing:#?}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["summary"]["failures"], 0, "{failing:#?}");
    assert!(failing.is_empty(), "{failing:#?}");
    // The authentication requirement was judged with the fetched token (every endpoint refuses none or a bad one).
    let auth_check = json["requirements"].as_array().unwrap().iter().find(|r| r["id"] == "LDP-AUTH-001").unwrap();
    assert_eq!(auth_check["outcome"], "pass", "{auth_check}");

    // A secret the token endpoint refuses: the kit does not start, and says why without the secret.
    let out = ldp(
        &["conformance", &url, "--oauth-token-url", &token_url, "--oauth-client-id", "agent"],
        &[(SECRET_VAR, "wrong-secret")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid_client") && !stderr.contains("wrong-secret"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_calls_jwt_protected_delegates_with_a_client_credentials_token() {
    use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
    let auth = tokio::task::spawn_blocking(auth_server).await.unwrap();
    let upper = Delegate::builder("ldp:delegate:upper")
        .skill("upper", |input: String, _cx: TaskContext| async move { Ok(input.to_uppercase()) })
        .describe("Upper-cases its input")
        .jwt_issuer(auth.url.clone(), AUDIENCE)
        .spawn("127.0.0.1:0")
        .await
        .unwrap();
    let script = vec![StubTurn::call("upper", &json!({"input": "hello"})), StubTurn::text("it said HELLO")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--backend", "openai", "--model", "stub-model"])
        .args(["--base-url", &stub.base_url(), "--delegate", &upper.url()])
        .args(["--delegate-oauth-token-url", &auth.token_url(), "--delegate-oauth-client-id", "agent"])
        .args(["--delegate-oauth-audience", AUDIENCE])
        .env(SECRET_VAR, "agent-secret")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (_planner, url) = tokio::task::spawn_blocking(move || support::serve_command(command)).await.unwrap();
    let out =
        tokio::task::spawn_blocking(move || ldp(&["call", &url, "chat", "shout hello", "--json"], &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout_json(&out);
    assert_eq!(result["output"], "it said HELLO", "{result}");
    // The sub-task ran at the JWT-protected delegate (its hop is in the lineage), and its answer reached the model.
    let hops = result["provenance"]["lineage"].to_string();
    assert!(hops.contains("ldp:delegate:upper"), "{hops}");
    assert!(stub.recorded()[1].to_string().contains("HELLO"), "{}", stub.recorded()[1]);
    upper.shutdown().await.unwrap();
}
