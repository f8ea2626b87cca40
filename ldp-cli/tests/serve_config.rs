//! `ldp serve --config`: the same server from flags and from a file, `--print-config` read back, precedence, and
//! malformed files refused before anything starts.

use std::process::{Command, Output, Stdio};

use crate::support::{self, TempDir};

fn ldp_serve(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.arg("serve").args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn printed(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = ldp_serve(&[args, &["--print-config"]].concat(), env);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Opens sessions (one connection each, all from 127.0.0.1) until the server refuses one.
async fn sessions_until_refused(url: &str) -> usize {
    let mut open = Vec::new();
    for n in 0..10 {
        let connection = ldp::connect(url).await.unwrap();
        if connection.session().await.is_err() {
            return n;
        }
        open.push(connection);
    }
    panic!("{url} accepted ten sessions from one peer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_and_the_printed_config_file_make_the_same_server() {
    let dir = TempDir::new("serve-config");
    let flags_db = format!("sqlite:{}", dir.path("flags.db"));
    let flags = [
        "--bind",
        "127.0.0.1:0",
        "--delegate-id",
        "ldp:delegate:configured",
        "--trust-domain",
        "research",
        "--trusted-peer",
        "partners",
        "--max-sessions-per-peer",
        "2",
        "--ttl",
        "120",
        "--store",
        &flags_db,
        "--rate-limit",
        "500/s",
    ];
    // The flags printed as a file, with the store moved to a file of its own.
    let text = printed(&flags, &[]).replace("flags.db", "file.db");
    assert!(text.contains("[sessions]") && text.contains("max_sessions_per_peer = 2"), "{text}");
    let file = dir.write("server.toml", &text);
    // Read back and printed again, the file is the same text.
    assert_eq!(printed(&["--config", &file], &[]), text);

    let (_by_flags, flags_url) = support::serve(&flags[2..], Stdio::null());
    let (_by_file, file_url) = {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
        command.args(["serve", "--config", &file]).stdout(Stdio::piped()).stderr(Stdio::null());
        support::serve_command(command)
    };
    let card = |url: String| async move {
        let mut card = ldp::connect(url).await.unwrap().card().clone();
        card.endpoint.clear();
        card
    };
    let (flags_card, file_card) = (card(flags_url.clone()).await, card(file_url.clone()).await);
    assert_eq!(flags_card, file_card);
    assert_eq!(flags_card.trust_domain.name, "research");
    assert_eq!(flags_card.trust_domain.trusted_peers, ["partners"]);
    assert_eq!(sessions_until_refused(&flags_url).await, 2);
    assert_eq!(sessions_until_refused(&file_url).await, 2);
    for db in ["flags.db", "file.db"] {
        assert!(std::path::Path::new(&dir.path(db)).exists(), "{db}: the SQLite store was not used");
    }
}

#[test]
fn flags_override_variables_which_override_the_file() {
    let dir = TempDir::new("serve-config-precedence");
    let file = dir.write("server.toml", "[sessions]\nmax_sessions_per_peer = 5\n");
    let peers = |text: String| {
        text.lines().find_map(|l| l.strip_prefix("max_sessions_per_peer = ")).map(str::to_owned).unwrap_or_default()
    };
    let var = [("LDP_SESSIONS_MAX_SESSIONS_PER_PEER", "3")];
    assert_eq!(peers(printed(&["--config", &file], &[])), "5");
    assert_eq!(peers(printed(&["--config", &file], &var)), "3");
    assert_eq!(peers(printed(&["--config", &file, "--max-sessions-per-peer", "1"], &var)), "1");
    // Secrets never print; the older variable names still work.
    let text = printed(&["--sign", "hmac-sha256-jcs"], &[("LDP_SECRET", "do-not-print-me")]);
    assert!(!text.contains("do-not-print-me") && text.contains("LDP_SIGNING_SECRET"), "{text}");
}

#[test]
fn malformed_files_exit_2_naming_the_file_line_and_key_and_start_nothing() {
    let dir = TempDir::new("serve-config-malformed");
    for (name, text, line, key) in [
        (
            "unknown.toml",
            "bind = \"127.0.0.1:0\"\n[connections]\nmax_conections = 4\n",
            3,
            "connections.max_conections",
        ),
        ("type.toml", "[sessions]\nmax_sessions = \"many\"\n", 2, "sessions.max_sessions"),
        ("duration.toml", "\n\n[store]\ntimeout = \"a while\"\n", 4, "store.timeout"),
        ("url.toml", "[telemetry]\notlp_endpoint = \"collector:4318\"\n", 2, "telemetry.otlp_endpoint"),
        ("size.toml", "max_body = \"huge\"\n", 1, "max_body"),
    ] {
        let file = dir.write(name, text);
        let out = ldp_serve(&["--config", &file], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(&format!("{file}:{line}: {key}")), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name} started something: {}", String::from_utf8_lossy(&out.stdout));
    }
    let out = ldp_serve(&["--config", &dir.path("missing.toml")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
    // A bad variable is named too, with its key.
    let out = ldp_serve(&["--print-config"], &[("LDP_CONNECTIONS_MAX_CONNECTIONS", "lots")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("LDP_CONNECTIONS_MAX_CONNECTIONS") && stderr.contains("connections.max_connections"),
        "{stderr}"
    );
}

/// The configuration file README.md shows reads as it is (with its secret from the variable it names).
#[test]
fn the_readme_configuration_file_reads() {
    let readme = std::fs::read_to_string(support::repo().join("README.md")).unwrap();
    let block = readme.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a TOML block");
    let dir = TempDir::new("serve-config-readme");
    let file = dir.write("server.toml", block);
    let text = printed(&["--config", &file], &[("LDP_SIGNING_SECRET", "from-the-environment")]);
    assert!(text.contains("delegate_id = \"ldp:delegate:summarizer\"") && text.contains("kind = \"openai\""), "{text}");
}
