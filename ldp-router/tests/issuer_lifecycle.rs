//! The attestation issuer's lifecycle: key ids and validity windows, rotation by signed key sets, revocation of an
//! attestation or a key, and the freshness bound on revocation lists. Every refusal is a typed rejection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ldp_router::issuer::{IssuerDocumentError, IssuerKeySet, PublishedKey, RevocationList, with_key_id};
use ldp_router::{
    AttestationClaim, AttestationRejection, Quality, TrustedIssuers, sign_attestation, verify_attestation,
};
use ldp_types::signing::SigningKey;
use time::OffsetDateTime;
use time::macros::datetime;

const ISSUER: &str = "ldp:issuer:evals";
const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

fn key(n: u8) -> SigningKey {
    SigningKey::ed25519_from_seed(&[n; 32])
}

fn hours(h: i64) -> time::Duration {
    time::Duration::hours(h)
}

/// An attestation made at `at`, signed by `signer` and naming `key_id`.
fn attestation(at: OffsetDateTime, key_id: &str, signer: &SigningKey) -> AttestationClaim {
    let claim = AttestationClaim::new("ldp:delegate:solid", "reasoning", Quality::new(0.9).unwrap(), ISSUER, at);
    sign_attestation(with_key_id(claim, key_id), signer).unwrap()
}

fn published(key_id: &str, signer: &SigningKey, from: OffsetDateTime, until: Option<OffsetDateTime>) -> PublishedKey {
    let key = PublishedKey::new(key_id, &signer.verifying_key(), from).unwrap();
    match until {
        Some(until) => key.valid_until(until),
        None => key,
    }
}

fn pinned() -> TrustedIssuers {
    TrustedIssuers::new().trust_key(ISSUER, "k1", key(1).verifying_key()).unwrap()
}

#[test]
fn keys_rotate_through_signed_key_sets() {
    let mut trusted = pinned();
    let (k1, k2, k3) = (key(1), key(2), key(3));
    // k1 until T0+48h, k2 from T0+24h: the overlap lets routers pick up k2 while k1 still signs.
    let keys = vec![published("k1", &k1, T0, Some(T0 + hours(48))), published("k2", &k2, T0 + hours(24), None)];
    let set = IssuerKeySet::signed(ISSUER, T0 + hours(1), keys.clone(), "k1", &k1).unwrap();
    trusted.apply_key_set(&set, T0 + hours(1)).unwrap();

    let now = T0 + hours(30);
    verify_attestation(&attestation(T0 + hours(2), "k1", &k1), &trusted, now).unwrap();
    verify_attestation(&attestation(T0 + hours(25), "k2", &k2), &trusted, now).unwrap();
    // k2 was not yet valid at T0+2h: an attestation it claims to have signed then is refused.
    let early = verify_attestation(&attestation(T0 + hours(2), "k2", &k2), &trusted, now);
    assert_eq!(early.unwrap_err(), AttestationRejection::KeyNotValid("k2".into()));
    // A key the issuer never published.
    let unknown = verify_attestation(&attestation(T0 + hours(2), "k9", &k3), &trusted, now);
    assert_eq!(unknown.unwrap_err(), AttestationRejection::UnknownKey("k9".into()));
    // Naming k2 but signed by k3.
    let forged = verify_attestation(&attestation(T0 + hours(25), "k2", &k3), &trusted, now);
    assert_eq!(forged.unwrap_err(), AttestationRejection::BadSignature(ISSUER.into()));

    // A set signed by a key the router does not trust, a tampered set, an older set: all refused.
    let rogue = IssuerKeySet::signed(ISSUER, T0 + hours(3), vec![published("k3", &k3, T0, None)], "k3", &k3).unwrap();
    assert_eq!(trusted.apply_key_set(&rogue, now), Err(IssuerDocumentError::UnknownSigner("k3".into())));
    let mut tampered = set.clone();
    tampered.keys.push(published("k3", &k3, T0, None));
    tampered.issued_at = (T0 + hours(5)).into();
    assert_eq!(trusted.apply_key_set(&tampered, now), Err(IssuerDocumentError::BadSignature));
    let older = IssuerKeySet::signed(ISSUER, T0, keys.clone(), "k1", &k1).unwrap();
    assert_eq!(trusted.apply_key_set(&older, now), Err(IssuerDocumentError::Stale));

    // After k1's window, only k2 can sign a new set; attestations k1 made in its window still count.
    let later = T0 + hours(72);
    let next = IssuerKeySet::signed(ISSUER, later, keys.clone(), "k1", &k1).unwrap();
    assert_eq!(trusted.apply_key_set(&next, later), Err(IssuerDocumentError::UnknownSigner("k1".into())));
    let next = IssuerKeySet::signed(ISSUER, later, keys, "k2", &k2).unwrap();
    trusted.apply_key_set(&next, later).unwrap();
    verify_attestation(&attestation(T0 + hours(2), "k1", &k1), &trusted, later).unwrap();
}

#[test]
fn revoked_attestations_and_keys_stop_counting() {
    let mut trusted = pinned();
    let (k1, k2) = (key(1), key(2));
    let keys = vec![published("k1", &k1, T0, None), published("k2", &k2, T0, None)];
    trusted.apply_key_set(&IssuerKeySet::signed(ISSUER, T0, keys, "k1", &k1).unwrap(), T0).unwrap();
    let a = attestation(T0 + hours(1), "k1", &k1);
    let b = attestation(T0 + hours(2), "k1", &k1);
    let c = attestation(T0 + hours(2), "k2", &k2);
    let now = T0 + hours(3);
    for claim in [&a, &b, &c] {
        verify_attestation(claim, &trusted, now).unwrap();
    }

    let day = Duration::from_secs(86_400);
    let revoke_a = vec![a.signature.clone().unwrap()];
    let list = RevocationList::signed(ISSUER, now, day, revoke_a, vec![], "k2", &k2).unwrap();
    trusted.apply_revocations(&list, now).unwrap();
    assert!(matches!(verify_attestation(&a, &trusted, now), Err(AttestationRejection::Revoked(_))));
    verify_attestation(&b, &trusted, now).unwrap();

    // Revoking the key k1 (compromised) revokes everything it signed; k2's attestations stand.
    let later = now + hours(1);
    let list2 = RevocationList::signed(ISSUER, later, day, vec![], vec!["k1".into()], "k2", &k2).unwrap();
    trusted.apply_revocations(&list2, later).unwrap();
    assert!(matches!(verify_attestation(&b, &trusted, later), Err(AttestationRejection::Revoked(_))));
    verify_attestation(&c, &trusted, later).unwrap();
    // Replaying the older list cannot undo the key's revocation.
    assert_eq!(trusted.apply_revocations(&list, later), Err(IssuerDocumentError::Stale));
    assert!(matches!(verify_attestation(&b, &trusted, later), Err(AttestationRejection::Revoked(_))));
    // A list from a stranger's key is refused.
    let rogue =
        RevocationList::signed(ISSUER, later + hours(1), day, vec![], vec!["k2".into()], "k2", &key(7)).unwrap();
    assert_eq!(trusted.apply_revocations(&rogue, later + hours(1)), Err(IssuerDocumentError::BadSignature));
}

#[test]
fn attestations_count_only_while_revocations_are_fresh() {
    let mut trusted = pinned();
    let k1 = key(1);
    trusted
        .apply_key_set(&IssuerKeySet::signed(ISSUER, T0, vec![published("k1", &k1, T0, None)], "k1", &k1).unwrap(), T0)
        .unwrap();
    let claim = attestation(T0 + hours(1), "k1", &k1);
    trusted.require_revocations(ISSUER, Duration::from_secs(3600));
    let now = T0 + hours(2);
    // No list held yet: the issuer's attestations do not count.
    assert_eq!(verify_attestation(&claim, &trusted, now), Err(AttestationRejection::RevocationsStale(ISSUER.into())));
    let list = RevocationList::signed(ISSUER, now, Duration::from_secs(7200), vec![], vec![], "k1", &k1).unwrap();
    trusted.apply_revocations(&list, now).unwrap();
    verify_attestation(&claim, &trusted, now + hours(1)).unwrap();
    // Older than the bound (one hour), though before next_update: stale.
    let stale = verify_attestation(&claim, &trusted, now + hours(1) + time::Duration::seconds(1));
    assert_eq!(stale, Err(AttestationRejection::RevocationsStale(ISSUER.into())));
    // Within the age bound but past next_update: stale too.
    let mut short = pinned();
    short
        .apply_key_set(&IssuerKeySet::signed(ISSUER, T0, vec![published("k1", &k1, T0, None)], "k1", &k1).unwrap(), T0)
        .unwrap();
    short.require_revocations(ISSUER, Duration::from_secs(86_400));
    let list = RevocationList::signed(ISSUER, now, Duration::from_secs(60), vec![], vec![], "k1", &k1).unwrap();
    short.apply_revocations(&list, now).unwrap();
    verify_attestation(&claim, &short, now + time::Duration::seconds(30)).unwrap();
    let past = verify_attestation(&claim, &short, now + time::Duration::seconds(61));
    assert_eq!(past, Err(AttestationRejection::RevocationsStale(ISSUER.into())));
}

#[test]
fn documents_round_trip_through_json() {
    let k1 = key(1);
    let set = IssuerKeySet::signed(ISSUER, T0, vec![published("k1", &k1, T0, None)], "k1", &k1).unwrap();
    let text = serde_json::to_string(&set).unwrap();
    let back: IssuerKeySet = serde_json::from_str(&text).unwrap();
    let mut trusted = pinned();
    trusted.apply_key_set(&back, T0).unwrap();
    let list =
        RevocationList::signed(ISSUER, T0, Duration::from_secs(60), vec!["ab".into()], vec![], "k1", &k1).unwrap();
    let back: RevocationList = serde_json::from_str(&serde_json::to_string(&list).unwrap()).unwrap();
    trusted.apply_revocations(&back, T0).unwrap();
}
