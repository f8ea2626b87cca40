//! How the Redis store is reached, against real `redis-server`s (installed by `scripts/redis-server.sh` when
//! missing; never skipped): a password in the URL, TLS with a private CA and with client certificates, a Unix
//! socket. Mistakes that will not mend (a wrong password, a database the server does not have, a certificate that
//! does not lead to the CA given, a client certificate missing) are refused at `open`, typed, and no error shows the
//! password; a server that is down at `open` is not an error, and the store works once it is up.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::session_ttl;

use std::time::{Duration, Instant};

use ldp_session::store::{Store, StoreError};
use ldp_store::test_redis::{RedisServer, RedisServerOptions};
use ldp_store::{OpenError, RedisStore, RedisTls, StoreConfig};
use ldp_transport_http::test_pki::TestCa;

const PASSWORD: &str = "s3cret-Pa55";

fn config() -> StoreConfig {
    StoreConfig::new("ldp:delegate:connections")
}

/// A session created once is in the store: the second creation finds it.
async fn round_trip(store: &RedisStore, id: &str) -> Result<(), StoreError> {
    let session = session_ttl::session(id, 60);
    assert!(store.create_session(&session).await?, "a fresh id is created");
    assert!(!store.create_session(&session).await?, "the store holds the session it created");
    Ok(())
}

fn open_error(result: Result<RedisStore, OpenError>) -> String {
    match result {
        Ok(_) => panic!("the store opened"),
        Err(e) => {
            assert!(matches!(e, OpenError::Redis { .. }), "{e:?}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn a_password_in_the_url_is_used_and_a_wrong_one_is_refused_at_open_without_showing_it() {
    let server = RedisServer::start_with(RedisServerOptions::default().password(PASSWORD)).unwrap();
    let store = RedisStore::open(&server.url(), config()).await.unwrap();
    round_trip(&store, "with-password").await.unwrap();

    let wrong = open_error(RedisStore::open(&server.url_with_password(Some("not-it-123")), config()).await);
    assert!(!wrong.contains("not-it-123"), "the wrong password is shown: {wrong}");
    assert!(wrong.contains("***"), "the URL is shown redacted: {wrong}");
    let missing = open_error(RedisStore::open(&server.url_with_password(None), config()).await);
    assert!(missing.contains("NOAUTH") || missing.to_lowercase().contains("auth"), "{missing}");

    // Debug output (what clap and loggers print) redacts it too.
    let spec: ldp_store::StoreSpec = server.url().parse().unwrap();
    assert!(!format!("{spec:?}").contains(PASSWORD), "{spec:?}");
}

#[tokio::test]
async fn a_database_the_server_does_not_have_is_refused_at_open() {
    let server = RedisServer::start().unwrap();
    // redis-server has 16 databases by default.
    let error = open_error(RedisStore::open(&format!("{}/99", server.url()), config()).await);
    assert!(error.contains("DB index"), "{error}");
}

#[tokio::test]
async fn a_server_down_at_open_is_no_error_and_is_used_once_it_is_up() {
    let mut server = RedisServer::start().unwrap();
    server.stop();
    let started = Instant::now();
    let store = RedisStore::open(&server.url(), config()).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "open waited {:?}", started.elapsed());
    let down = store.create_session(&session_ttl::session("while-down", 60)).await;
    assert!(matches!(down, Err(StoreError::Unavailable { .. })), "{down:?}");
    assert!(down.unwrap_err().to_ldp().retryable);

    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match round_trip(&store, "after-restart").await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store did not recover: {e}"),
        }
    }
}

/// As for one server: a Redis Cluster that is down when the store opens is no error (the cluster connection is made
/// on first use), calls meanwhile are refused `Unavailable` (retryable), and the store serves once the cluster is up.
#[tokio::test]
async fn a_cluster_down_at_open_is_no_error_and_is_used_once_it_is_up() {
    let mut cluster = ldp_store::test_redis::RedisCluster::start(3).unwrap();
    cluster.stop();
    let started = Instant::now();
    let store = RedisStore::open(&cluster.url(), config()).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "open waited {:?}", started.elapsed());
    let down = store.create_session(&session_ttl::session("while-down", 60)).await;
    assert!(matches!(down, Err(StoreError::Unavailable { .. })), "{down:?}");
    assert!(down.unwrap_err().to_ldp().retryable);

    cluster.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match round_trip(&store, "after-restart").await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the store did not recover: {e}"),
        }
    }
}

#[tokio::test]
async fn rediss_with_a_private_ca_works_and_another_ca_is_refused_at_open() {
    let ca = TestCa::new("redis test CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let options = RedisServerOptions::default().password(PASSWORD).tls(&cert.cert_pem, &cert.key_pem, &ca.pem(), false);
    let server = RedisServer::start_with(options).unwrap();
    assert!(server.url().starts_with("rediss://"));

    let mut trusted = config();
    trusted.redis_tls = Some(RedisTls::default().with_ca(ca.pem().into_bytes()));
    let store = RedisStore::open(&server.url(), trusted).await.unwrap();
    round_trip(&store, "over-tls").await.unwrap();

    // The system's roots do not lead to this CA, nor does another CA: refused at open, as a mistake that will not
    // mend, not taken for an outage.
    let untrusted = open_error(RedisStore::open(&server.url(), config()).await);
    assert!(untrusted.contains("certificate"), "{untrusted}");
    assert!(!untrusted.contains(PASSWORD), "{untrusted}");
    let other = TestCa::new("another CA").unwrap();
    let mut wrong_ca = config();
    wrong_ca.redis_tls = Some(RedisTls::default().with_ca(other.pem().into_bytes()));
    let wrong = open_error(RedisStore::open(&server.url(), wrong_ca).await);
    assert!(wrong.contains("certificate"), "{wrong}");
}

#[tokio::test]
async fn rediss_with_client_certificates_needs_one_the_server_trusts() {
    let ca = TestCa::new("redis mtls CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let server =
        RedisServer::start_with(RedisServerOptions::default().tls(&cert.cert_pem, &cert.key_pem, &ca.pem(), true))
            .unwrap();
    let client = ca.client_cert("ldp:delegate:replica").unwrap();

    let mut with_cert = config();
    with_cert.redis_tls = Some(
        RedisTls::default()
            .with_ca(ca.pem().into_bytes())
            .with_client_cert(client.cert_pem.into_bytes(), client.key_pem.into_bytes()),
    );
    let store = RedisStore::open(&server.url(), with_cert).await.unwrap();
    round_trip(&store, "mutual-tls").await.unwrap();

    let mut without_cert = config();
    without_cert.redis_tls = Some(RedisTls::default().with_ca(ca.pem().into_bytes()));
    let refused = open_error(RedisStore::open(&server.url(), without_cert).await);
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");

    // TLS files for a plain URL are a mistake, said at open.
    let mut plain = config();
    plain.redis_tls = Some(RedisTls::default().with_ca(ca.pem().into_bytes()));
    let error = open_error(RedisStore::open("redis://127.0.0.1:1", plain).await);
    assert!(error.contains("rediss://"), "{error}");
}

#[tokio::test]
async fn a_unix_socket_with_its_password_in_the_query_works_and_is_redacted() {
    let server = RedisServer::start_with(RedisServerOptions::default().unix_socket().password(PASSWORD)).unwrap();
    let url = server.url();
    assert!(url.starts_with("redis+unix://") && url.contains(PASSWORD), "{url}");
    let store = RedisStore::open(&url, config()).await.unwrap();
    round_trip(&store, "over-a-socket").await.unwrap();

    let wrong = open_error(RedisStore::open(&server.url_with_password(Some("wrong-pass-456")), config()).await);
    assert!(!wrong.contains("wrong-pass-456"), "{wrong}");
    assert!(!ldp_store::redacted(&url).contains(PASSWORD), "{}", ldp_store::redacted(&url));
}
