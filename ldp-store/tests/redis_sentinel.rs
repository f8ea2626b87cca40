//! Redis Sentinel (`redis+sentinel://HOST:PORT/SERVICE`), against a real primary, replica and sentinel (started by
//! `test_redis::RedisSentinel`; `redis-server` installed by `scripts/redis-server.sh` when missing, never skipped):
//! the store writes to the primary the sentinel names and follows it across a failover (the old primary, demoted,
//! answers `READONLY`) and a crash of the primary (its connection fails). Calls in between fail `Unavailable`
//! (typed, retryable), never hang, and state the replica had taken survives: a replay seen before is still a replay,
//! a session still lives.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::session_ttl;

use std::time::{Duration, Instant};

use ldp_session::shared::{Admission, ReplayClaim, ReplayVerdict, SessionLookup};
use ldp_session::store::{Store, StoreError};
use ldp_store::test_redis::RedisSentinel;
use ldp_store::{OpenError, RedisStore, RedisTls, StoreConfig};
use ldp_transport_http::test_pki::TestCa;

fn config() -> StoreConfig {
    StoreConfig::new("ldp:delegate:sentinel")
}

async fn replay(store: &RedisStore, message: &str) -> Result<ReplayVerdict, StoreError> {
    let claim = ReplayClaim::new("ldp:delegate:client", message, session_ttl::now_ms() + 600_000);
    let mut admission = Admission::default();
    admission.replay = Some(claim);
    Ok(store.admit(&admission).await?.replay)
}

async fn lookup(store: &RedisStore, id: &str) -> SessionLookup {
    let mut admission = Admission::default();
    admission.session_id = Some(id.to_owned());
    store.admit(&admission).await.unwrap().session.expect("a session step")
}

/// Sends fresh messages until one is taken; each failure before must be `Unavailable` and come within the store's
/// own timeouts. Returns how many failed.
async fn until_served(store: &RedisStore, phase: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    for attempt in 0.. {
        assert!(Instant::now() < deadline, "the store did not follow the primary within 30 s ({phase})");
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(10), replay(store, &format!("{phase}-{attempt}")))
            .await
            .unwrap_or_else(|_| panic!("a call hung ({phase})"));
        match answer {
            Ok(verdict) => {
                assert_eq!(verdict, ReplayVerdict::Fresh, "{phase}: a fresh message is no replay");
                return attempt;
            }
            Err(e) => {
                assert!(matches!(e, StoreError::Unavailable { .. }), "{phase}: {e:?}");
                assert!(started.elapsed() < Duration::from_secs(6), "{phase}: a failure took {:?}", started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_the_primary_across_a_failover_and_a_crash() {
    let mut deployment = RedisSentinel::start().unwrap();
    let store = RedisStore::open(&deployment.url(), config()).await.unwrap();
    assert!(store.create_session(&session_ttl::session("followed", 600)).await.unwrap());
    assert_eq!(replay(&store, "before").await.unwrap(), ReplayVerdict::Fresh);
    deployment.sync().unwrap();
    let first = deployment.primary_port().unwrap();

    // A failover: the old primary is now a replica, and the store's connection to it meets `READONLY`.
    deployment.failover().unwrap();
    let second = deployment.primary_port().unwrap();
    assert_ne!(second, first);
    until_served(&store, "failover").await;
    assert_eq!(replay(&store, "before").await.unwrap(), ReplayVerdict::Seen, "a replay seen before the failover");
    assert!(matches!(lookup(&store, "followed").await, SessionLookup::Live(_)));
    assert_eq!(replay(&store, "between").await.unwrap(), ReplayVerdict::Fresh);

    // A crash of the new primary: the store's connection fails, and the sentinel promotes the first one again.
    deployment.sync().unwrap();
    deployment.kill_primary().unwrap();
    assert_eq!(deployment.primary_port().unwrap(), first);
    until_served(&store, "crash").await;
    for message in ["before", "between"] {
        assert_eq!(replay(&store, message).await.unwrap(), ReplayVerdict::Seen, "{message}");
    }
    assert!(matches!(lookup(&store, "followed").await, SessionLookup::Live(_)));
}

/// The store leaves a primary the sentinels no longer name even while that node still takes writes and keeps its
/// clients: the sentinel is made to name the replica, promoted by hand, without the old primary being demoted (a
/// split brain, as a failover leaves until the sentinels reach the old primary). Within the store's look at the
/// sentinels, its writes land on the primary they name, not on the node its connection goes to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_leaves_a_primary_the_sentinels_no_longer_name() {
    let deployment = RedisSentinel::start().unwrap();
    let store = RedisStore::open(&deployment.url(), config()).await.unwrap();
    assert_eq!(replay(&store, "connected").await.unwrap(), ReplayVerdict::Fresh);
    let old = deployment.primary_port().unwrap();
    let named = deployment.split_brain().unwrap();
    // Two of the store's looks at the sentinels.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let attempt = until_served(&store, "watched").await;
    let key = format!("ldp:ldp:delegate:sentinel:replay:{{watched-{attempt}}}");
    assert_eq!(deployment.node_cli(named, &["EXISTS", &key]).unwrap().trim(), "1", "not on the named primary");
    assert_eq!(deployment.node_cli(old, &["EXISTS", &key]).unwrap().trim(), "0", "on the old primary");
}

/// A sentinel URL must name its service; its database and credentials are those of the primary, and no error shows
/// the password.
#[tokio::test]
async fn a_sentinel_url_is_checked_at_open() {
    for (url, says) in [
        ("redis+sentinel://127.0.0.1:1", "names its service"),
        ("redis+sentinel://127.0.0.1:1/", "names its service"),
        ("redis+sentinel://127.0.0.1:1/svc/x", "is a number"),
        ("redis+sentinel://:hunter2@127.0.0.1:1/svc/0/more", "nothing more"),
    ] {
        let Err(e) = RedisStore::open(url, config()).await else { panic!("{url} opened") };
        assert!(matches!(e, OpenError::Redis { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains(says) && !text.contains("hunter2"), "{url}: {text}");
    }
    // No sentinel listens: not an open error (as a Redis down at start is not), calls fail retryably.
    let store = RedisStore::open("redis+sentinel://:hunter2@127.0.0.1:1/svc/2", config()).await.unwrap();
    let failed = replay(&store, "x").await.unwrap_err();
    assert!(matches!(failed, StoreError::Unavailable { .. }), "{failed:?}");
    assert!(!format!("{failed:?}").contains("hunter2"));
    let spec: ldp_store::StoreSpec = "redis+sentinel://u:hunter2@h1:26379,h2:26379/svc".parse().unwrap();
    assert_eq!(format!("{spec:?}"), r#"Redis("redis+sentinel://u:***@h1:26379,h2:26379/svc")"#);
}

/// Sentinels that want a password of their own get the URL's `sentinel_password` (the primary gets the URL's
/// credentials, none here); a wrong or missing one is refused at open without being shown, and an unknown parameter
/// (a mistyped one) is refused rather than ignored.
#[tokio::test]
async fn sentinels_that_want_a_password_get_the_one_in_the_url() {
    let deployment = RedisSentinel::start_with(Some("sentinel-Pa55")).unwrap();
    let store =
        RedisStore::open(&format!("{}?sentinel_password=sentinel-Pa55", deployment.url()), config()).await.unwrap();
    assert!(store.create_session(&session_ttl::session("authed", 60)).await.unwrap());
    assert_eq!(replay(&store, "authed").await.unwrap(), ReplayVerdict::Fresh);

    for url in [format!("{}?sentinel_password=not-it-999", deployment.url()), deployment.url()] {
        let Err(e) = RedisStore::open(&url, config()).await else { panic!("opened without the sentinels' password") };
        assert!(matches!(e, OpenError::Redis { .. }), "{e:?}");
        assert!(!e.to_string().contains("not-it-999"), "{e}");
    }
    let Err(e) = RedisStore::open(&format!("{}?sentinel_pasword=x-secret", deployment.url()), config()).await else {
        panic!("a mistyped parameter was ignored")
    };
    assert!(e.to_string().contains("sentinel_pasword") && !e.to_string().contains("x-secret"), "{e}");
}

/// `rediss+sentinel://`: TLS to the sentinels and to the primary, both checked against the CA the store is given,
/// and the primary's database the URL names. The store follows the primary across a failover as over plain TCP.
/// Certificates the store cannot verify (the system's roots, another CA) are refused at open, as a mistake that will
/// not mend; so are TLS files given for a plain `redis+sentinel://` URL, and a plain URL to TLS sentinels gets no
/// answer (an outage to wait out, as a sentinel that is down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_store_verifies_sentinels_and_primary_and_follows_a_failover() {
    let ca = TestCa::new("sentinel test CA").unwrap();
    let cert = ca.server_cert().unwrap();
    let deployment = RedisSentinel::start_tls(&cert.cert_pem, &cert.key_pem, &ca.pem(), None).unwrap();
    let url = deployment.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let trusting = |pem: String| {
        let mut cfg = config();
        cfg.redis_tls = Some(RedisTls::default().with_ca(pem.into_bytes()));
        cfg
    };

    // The primary's database 3, as the URL says.
    let store = RedisStore::open(&format!("{url}/3"), trusting(ca.pem())).await.unwrap();
    assert!(store.create_session(&session_ttl::session("over-tls", 600)).await.unwrap());
    assert_eq!(replay(&store, "before").await.unwrap(), ReplayVerdict::Fresh);
    let key = "ldp:ldp:delegate:sentinel:replay:{before}";
    let primary = deployment.primary_port().unwrap();
    assert_eq!(deployment.node_cli(primary, &["-n", "3", "EXISTS", key]).unwrap().trim(), "1", "not in database 3");
    assert_eq!(deployment.node_cli(primary, &["EXISTS", key]).unwrap().trim(), "0", "in database 0");
    deployment.sync().unwrap();
    deployment.failover().unwrap();
    assert_ne!(deployment.primary_port().unwrap(), primary);
    until_served(&store, "tls-failover").await;
    assert_eq!(replay(&store, "before").await.unwrap(), ReplayVerdict::Seen, "a replay seen before the failover");
    assert!(matches!(lookup(&store, "over-tls").await, SessionLookup::Live(_)));

    let other = TestCa::new("another CA").unwrap();
    for (what, cfg) in [("the system's roots", config()), ("another CA", trusting(other.pem()))] {
        let Err(e) = RedisStore::open(&url, cfg).await else { panic!("opened trusting {what}") };
        assert!(matches!(e, OpenError::Redis { .. }), "{what}: {e:?}");
        assert!(e.to_string().to_lowercase().contains("certificate"), "{what}: {e}");
    }
    let plain = url.replacen("rediss+", "redis+", 1);
    let Err(e) = RedisStore::open(&plain, trusting(ca.pem())).await else { panic!("TLS files for a plain URL") };
    assert!(e.to_string().contains("rediss+sentinel://"), "{e}");
    let store = RedisStore::open(&plain, config()).await.unwrap();
    let failed = replay(&store, "plain").await.unwrap_err();
    assert!(matches!(failed, StoreError::Unavailable { .. }), "{failed:?}");
}

/// Sentinels and nodes that require client certificates (`tls-auth-clients yes`): the store presents the one it is
/// given to the sentinels and to the primary alike, and without one it is refused at open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_the_store_presents_its_certificate_to_sentinels_and_primary() {
    let ca = TestCa::new("sentinel mtls CA").unwrap();
    let server = ca.server_cert().unwrap();
    let client = ca.client_cert("ldp:delegate:replica").unwrap();
    let deployment = RedisSentinel::start_tls(
        &server.cert_pem,
        &server.key_pem,
        &ca.pem(),
        Some((&client.cert_pem, &client.key_pem)),
    )
    .unwrap();

    let mut with_cert = config();
    with_cert.redis_tls = Some(
        RedisTls::default()
            .with_ca(ca.pem().into_bytes())
            .with_client_cert(client.cert_pem.clone().into_bytes(), client.key_pem.clone().into_bytes()),
    );
    let store = RedisStore::open(&deployment.url(), with_cert).await.unwrap();
    assert!(store.create_session(&session_ttl::session("mutual", 60)).await.unwrap());
    assert_eq!(replay(&store, "mutual").await.unwrap(), ReplayVerdict::Fresh);
    assert_eq!(replay(&store, "mutual").await.unwrap(), ReplayVerdict::Seen);

    let mut without_cert = config();
    without_cert.redis_tls = Some(RedisTls::default().with_ca(ca.pem().into_bytes()));
    let Err(e) = RedisStore::open(&deployment.url(), without_cert).await else {
        panic!("opened without a certificate")
    };
    assert!(matches!(e, OpenError::Redis { .. }), "{e:?}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}
