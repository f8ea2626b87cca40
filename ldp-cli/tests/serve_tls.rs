//! `ldp serve --tls-cert/--tls-key/--client-ca/--client-cert-peer` as a process: it prints an https:// URL, a
//! client with a mapped certificate runs HELLO through SESSION_CLOSE, one without a certificate is refused at the
//! handshake.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_transport_http::ConnectSettings;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{Guard, TempDir};
use ldp_session::runtime::{Client, Transport};
use ldp_session::{InitiatorConfig, SeededIds, SystemClock};
use ldp_transport_http::test_pki::TestCa;
use ldp_transport_http::{HttpTransport, RetryPolicy};
use ldp_types::SessionConfig;

#[tokio::test]
async fn ldp_serve_over_mutual_tls() {
    let dir = TempDir::new("serve-tls");
    let ca = TestCa::new("ldp test CA").unwrap();
    let server = ca.server_cert().unwrap();
    let (server_cert, server_key) = (server.cert_pem, server.key_pem);
    let client = ca.client_cert("planner.example").unwrap();
    let (client_cert, client_key) = (client.cert_pem, client.key_pem);
    let ca_pem = ca.pem();

    let child = Command::new(env!("CARGO_BIN_EXE_ldp"))
        .args(["serve", "--bind", "127.0.0.1:0", "--trust-domain", "research"])
        .args(["--tls-cert", &dir.write("server.pem", &server_cert)])
        .args(["--tls-key", &dir.write("server.key", &server_key)])
        .args(["--client-ca", &dir.write("ca.pem", &ca_pem)])
        .args(["--client-cert-peer", "dns:planner.example=ldp:delegate:me@research"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = Guard(child);
    let stdout = guard.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let url = loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("ldp serve prints its URL");
        if let Some(rest) = line.strip_prefix("ldp serve: listening on ") {
            assert!(rest.contains("wss://"), "{rest}");
            break rest.split_whitespace().next().unwrap().to_owned();
        }
        lines.push(line);
    };
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert!(lines.iter().any(|l| l.contains("client certificates required")), "{lines:?}");

    let transport = HttpTransport::builder(&url)
        .tls_root_certificate_pem(ca_pem.clone())
        .tls_client_identity_pem(client_cert.as_bytes(), client_key.as_bytes())
        .build()
        .unwrap();
    let ids = Box::new(SeededIds::from_entropy());
    let client =
        Client::connect(transport, InitiatorConfig::new("ldp:delegate:me"), Arc::new(SystemClock), ids).await.unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let out = client.submit(&session.session_id, "echo", serde_json::json!("hi"), None).await.unwrap();
    assert_eq!(out.output, serde_json::json!({ "echo": "hi" }));
    client.close(&session.session_id).await.unwrap();

    let anonymous =
        HttpTransport::builder(&url).tls_root_certificate_pem(ca_pem).retry(RetryPolicy::none()).build().unwrap();
    assert!(anonymous.identity().await.is_err());
}
