use std::collections::HashSet;
use std::time::Duration;

use super::*;

fn file_error(text: &str) -> (Option<usize>, String, String) {
    match ServerConfig::from_toml_str(text, "server.toml") {
        Err(ConfigError::Invalid { origin, line, key, message }) => {
            assert_eq!(origin, Origin::File("server.toml".into()));
            (line, key, message)
        }
        other => panic!("expected an invalid-value error for {text:?}, got {other:?}"),
    }
}

#[test]
fn the_defaults_print_and_read_back_unchanged() {
    let printed = ServerConfig::default().to_toml_redacted();
    assert_eq!(ServerConfig::from_toml_str(&printed, "printed").unwrap(), ServerConfig::default());
}

#[test]
fn a_full_configuration_prints_and_reads_back_unchanged_but_for_its_secrets() {
    let text = r#"
bind = "0.0.0.0:9000"
shutdown_grace = "5s"
request_timeout = "90s"
max_body = "2 MiB"
[identity]
delegate_id = "ldp:delegate:summarizer"
trust_domain = "research"
trusted_peers = ["partners"]
[auth]
tokens = ["s3cr3t-token==research"]
[signing]
algorithm = "hmac-sha256-jcs"
secret = "shared-secret"
replay_entries = 5000
[store]
url = "redis://user:pa55word@127.0.0.1:6379/2"
timeout = "750ms"
[connections]
max_connections = 64
rate_limit = "50/s"
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]
[websocket]
max_outbound = "1MiB"
[held]
results_per_session = 3
[backend]
kind = "openai"
model = "gpt-test"
base_url = "http://127.0.0.1:8080/v1"
[mcp]
enabled = true
[telemetry]
otlp_endpoint = "http://127.0.0.1:4318"
"#;
    let cfg = ServerConfig::from_toml_str(text, "full.toml").unwrap();
    assert_eq!(cfg.max_body, 2 << 20);
    assert_eq!(cfg.store.timeout, Duration::from_millis(750));
    assert_eq!(cfg.websocket.max_outbound, 1 << 20);
    let printed = cfg.to_toml_redacted();
    for secret in ["s3cr3t-token", "shared-secret", "pa55word"] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
    for var in ["LDP_AUTH_TOKENS", "LDP_SIGNING_SECRET", "LDP_STORE_URL"] {
        assert!(printed.contains(var), "the redaction should name {var}:\n{printed}");
    }
    let mut back = ServerConfig::from_toml_str(&printed, "printed").unwrap();
    assert_ne!(back, cfg, "secrets are left out");
    back.auth.tokens.clone_from(&cfg.auth.tokens);
    back.signing.secret.clone_from(&cfg.signing.secret);
    back.store.url.clone_from(&cfg.store.url);
    assert_eq!(back, cfg);
}

#[test]
fn malformed_files_name_the_line_and_the_key() {
    let (line, key, message) = file_error("bind = \"127.0.0.1:1\"\n\n[connections]\nmax_conections = 5\n");
    assert_eq!((line, key.as_str(), message.as_str()), (Some(4), "connections.max_conections", "unknown key"));
    let (line, key, _) = file_error("colour = \"blue\"\n");
    assert_eq!((line, key.as_str()), (Some(1), "colour"));
    let (line, key, message) = file_error("[connections]\n\nmax_connections = \"many\"\n");
    assert_eq!((line, key.as_str()), (Some(3), "connections.max_connections"));
    assert!(message.contains("invalid type"), "{message}");
    let (line, key, message) = file_error("[store]\ntimeout = \"soon\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "store.timeout"));
    assert!(message.contains("soon") || message.contains("duration") || message.contains("unit"), "{message}");
    let (line, key, message) = file_error("[telemetry]\notlp_endpoint = \"not a url\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "telemetry.otlp_endpoint"));
    assert!(message.contains("invalid URL"), "{message}");
    let (line, key, _) = file_error("[backend]\nbase_url = \"ftp://example.com\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "backend.base_url"));
    let (line, key, message) = file_error("max_body = \"lots\"\n");
    assert_eq!((line, key.as_str()), (Some(1), "max_body"));
    assert!(message.contains("invalid size"), "{message}");
    let (line, key, _) = file_error("[connections]\nrate_limit = \"fast\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "connections.rate_limit"));
    let (line, key, _) = file_error("[store]\nurl = \"mongodb://x\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "store.url"));
    let (line, key, _) = file_error("[backend]\nkind = \"gpt\"\n");
    assert_eq!((line, key.as_str()), (Some(2), "backend.kind"));
    let (line, key, message) = file_error("[auth]\ntokens = [\"no-domain-here\"]\n");
    assert_eq!((line, key.as_str()), (Some(2), "auth.tokens"));
    assert!(!message.contains("no-domain-here"), "a token is a secret: {message}");
    let (line, _, _) = file_error("bind = \n");
    assert_eq!(line, Some(1), "a TOML syntax error is placed too");
}

#[test]
fn every_key_has_its_own_variable_and_the_older_names_point_at_keys() {
    let keys = keys();
    let mut vars = HashSet::new();
    for key in &keys {
        assert!(vars.insert(env_var(&key.key)), "{} shares its variable", key.key);
        assert!(!key.doc.is_empty(), "{} has no doc comment", key.key);
    }
    for (alias, key) in reference::ENV_ALIASES {
        assert!(keys.iter().any(|k| k.key == key), "{alias} names no key {key}");
        assert!(!vars.contains(alias), "{alias} is also a key's own variable");
    }
    let secrets: Vec<&str> = keys.iter().filter(|k| k.secret).map(|k| k.key.as_str()).collect();
    for secret in ["auth.tokens", "signing.secret", "identity.receipt_key", "store.url", "backend.a2a_token"] {
        assert!(secrets.contains(&secret), "{secret} is not marked secret: {secrets:?}");
    }
}

/// Each doc comment states its default; it must be the default the code has.
#[test]
fn every_stated_default_is_the_real_one() {
    let defaults = ServerConfig::default();
    let mut checked = 0;
    for key in keys() {
        let Some(stated) = key.doc.split("Default `").nth(1).and_then(|rest| rest.split('`').next()) else { continue };
        let mut cfg = ServerConfig::default();
        cfg.set(&key.key, Setting::One(stated.to_owned()), Origin::Flag("test".into()))
            .unwrap_or_else(|e| panic!("{}: stated default {stated:?} does not read: {e}", key.key));
        assert_eq!(cfg, defaults, "{}: the doc says {stated:?}", key.key);
        checked += 1;
    }
    assert!(checked > 50, "only {checked} keys state a default");
}

#[test]
fn variables_override_the_file_and_name_themselves_when_bad() {
    let mut cfg = ServerConfig::from_toml_str("[connections]\nmax_connections = 7\n", "f.toml").unwrap();
    let vars =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
    cfg.apply_env(vars(&[
        ("LDP_CONNECTIONS_MAX_CONNECTIONS", "9"),
        ("LDP_TOKENS", "a=one,b=two"),
        ("LDP_STORE", "sqlite:/tmp/alias.db"),
        ("LDP_STORE_URL", "sqlite:/tmp/own.db"),
        ("LDP_MCP_ENABLED", "true"),
        ("LDP_HELD_TTL", "90s"),
        ("LDP_SIGNING_REPLAY_ENTRIES", ""),
        ("HOME", "/root"),
    ]))
    .unwrap();
    assert_eq!(cfg.connections.max_connections, 9);
    assert_eq!(cfg.auth.tokens, ["a=one", "b=two"]);
    assert_eq!(cfg.store.url, "sqlite:/tmp/own.db", "a key's own variable wins over the older name");
    assert!(cfg.mcp.enabled);
    assert_eq!(cfg.held.ttl, Duration::from_secs(90));
    assert_eq!(cfg.signing.replay_entries, 1_000_000, "an empty variable is unset");
    let err = cfg.apply_env(vars(&[("LDP_CONNECTIONS_MAX_CONNECTIONS", "lots")])).unwrap_err();
    match err {
        ConfigError::Invalid { origin: Origin::Env(var), key, .. } => {
            assert_eq!(
                (var.as_str(), key.as_str()),
                ("LDP_CONNECTIONS_MAX_CONNECTIONS", "connections.max_connections")
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn keys_that_need_each_other_are_refused_together() {
    let needs = |text: &str| match ServerConfig::from_toml_str(text, "f").unwrap().validate() {
        Err(ConfigError::Requires { key, .. }) => key,
        other => panic!("{text}: {other:?}"),
    };
    assert_eq!(needs("[signing]\nalgorithm = \"hmac-sha256\"\n"), "signing.algorithm");
    assert_eq!(needs("[tls]\ncert = \"c.pem\"\n"), "tls.cert");
    assert_eq!(needs("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n"), "tls.client_ca");
    assert_eq!(needs("[backend]\nkind = \"openai\"\n"), "backend.kind");
    assert!(ServerConfig::default().validate().is_ok());
}

#[test]
fn values_set_in_code_are_checked_as_a_file_is() {
    let mut cfg = ServerConfig::default();
    cfg.connections.rate_limit = Some("fast".to_owned());
    match cfg.validate() {
        Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "connections.rate_limit"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_model_backend_gets_a_request_timeout_its_attempts_fit_in() {
    let mut cfg = ServerConfig::default();
    assert_eq!(cfg.effective_request_timeout(), Duration::from_secs(60));
    cfg.backend.kind = Some(BackendKind::Echo);
    // 120 s per attempt, 3 attempts, 10 s of slack.
    assert_eq!(cfg.effective_request_timeout(), Duration::from_secs(370));
    cfg.request_timeout = Some(Duration::from_secs(9));
    assert_eq!(cfg.effective_request_timeout(), Duration::from_secs(9));
}

/// `docs/config.md` is generated; it must be what the keys say today.
#[test]
fn the_reference_page_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let page = std::fs::read_to_string(path).expect("docs/config.md");
    assert!(
        page == reference_markdown(),
        "docs/config.md is stale: run `cargo run -p ldp-cli -- serve --config-reference > docs/config.md`"
    );
    for key in keys() {
        let name = key.key.rsplit('.').next().unwrap_or_default();
        assert!(page.contains(&format!("| `{name}` | `{}` |", env_var(&key.key))), "{} is not documented", key.key);
    }
}

#[cfg(feature = "tls")]
#[test]
fn client_certificate_peers_are_checked_when_read() {
    let ok =
        "[tls]\nclient_cert_peers = [\"dns:planner.example=ldp:delegate:me@research\", \"sha256:AB:CD=partners\"]\n";
    let peers = |text: &str| ServerConfig::from_toml_str(text, "f").map(|c| c.tls.client_cert_peers);
    assert!(peers(&ok.replace("AB:CD", &("AB:".repeat(31) + "AB"))).is_ok());
    for bad in
        ["dns:planner.example", "dns:planner.example=", "sha256:12=d", "cn:x=d", "dns:a.example=@d", "dns:a.example=x@"]
    {
        let text = format!("[tls]\nclient_cert_peers = [{bad:?}]\n");
        assert!(peers(&text).is_err(), "{bad}");
    }
}
