//! Message-level security (RFC 7.3, first row): signature policy per peer and replay protection.
//!
//! Replay protection keys on `message_id` + `nonce` and only admits messages whose timestamp lies within a window
//! around the local wall clock. An entry is remembered until its timestamp leaves the window, and never earlier: when
//! the table is full, new messages are refused (retryably) rather than evicting old entries, so flooding with fresh
//! nonces can never re-open a replay.

use crate::keyed::PeerMap;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ldp_types::signing::{self, SigningKey, VerifyingKey};
use ldp_types::{Body, Envelope, LdpError, codes};

use crate::shared::ReplayVerdict;
use serde_json::Value;
use time::OffsetDateTime;

/// What a receiver requires of one peer's signatures.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum SignaturePolicy {
    /// Signatures are neither required nor checked.
    #[default]
    None,
    /// Every message must carry a valid signature under this key (and its algorithm).
    Require(VerifyingKey),
}

/// Replay-protection settings.
#[derive(Debug, Clone, Copy)]
pub struct ReplayConfig {
    /// How far in the past a timestamp may lie.
    pub window: Duration,
    /// How far in the future a timestamp may lie (clock skew).
    pub future_skew: Duration,
    /// Most messages remembered at once; beyond it new messages are refused, never old entries evicted.
    pub max_entries: usize,
    /// Most messages remembered at once for one source (the authenticated credential, else the sender's own signing
    /// key, else its network address; never the declared `from` alone), so that one key holder filling its share
    /// cannot lock others out of signed traffic. Holders of one shared secret are one trust group, told apart by
    /// address. A source is also held under the room the window has left ([`replay_room`]).
    pub max_entries_per_principal: usize,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(300),
            future_skew: Duration::from_secs(30),
            max_entries: 1_000_000,
            max_entries_per_principal: 100_000,
        }
    }
}

/// Signing and verification settings of one side.
#[derive(Debug, Clone, Default)]
pub struct SecurityConfig {
    /// Signs every outbound message when set.
    pub signing_key: Option<SigningKey>,
    /// The policy for peers without their own entry.
    pub default_policy: SignaturePolicy,
    /// Per-peer policies, keyed by the peer's `from` id.
    pub peer_policies: HashMap<String, SignaturePolicy>,
    /// Accept an unsigned HELLO even when the peer's policy requires signatures (discovery before keys are known).
    pub allow_unsigned_hello: bool,
    /// Replay protection; off when `None`.
    pub replay: Option<ReplayConfig>,
}

impl SecurityConfig {
    /// Signs with `key` and requires every peer to sign with the same algorithm and shared secret (or, for
    /// `ed25519-jcs`, with the matching public key), with replay protection on.
    pub fn symmetric(key: SigningKey) -> Self {
        let verify = key.verifying_key();
        Self {
            signing_key: Some(key),
            default_policy: SignaturePolicy::Require(verify),
            peer_policies: HashMap::new(),
            allow_unsigned_hello: false,
            replay: Some(ReplayConfig::default()),
        }
    }

    fn policy_for(&self, peer: &str) -> &SignaturePolicy {
        self.peer_policies.get(peer).unwrap_or(&self.default_policy)
    }

    /// Whether any policy needs the received JSON verbatim (the JCS algorithms do).
    pub fn needs_raw_json(&self) -> bool {
        let jcs = |p: &SignaturePolicy| matches!(p, SignaturePolicy::Require(k) if k.algorithm() != signing::SignatureAlgorithm::HmacSha256);
        jcs(&self.default_policy) || self.peer_policies.values().any(jcs)
    }
}

/// The replay table, with a count of entries per principal.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    /// Remembered keys and the principal each counts against.
    seen: PeerMap<String, Arc<str>>,
    by_expiry: BTreeSet<(i128, String)>,
    per_principal: PeerMap<Arc<str>, usize>,
}

impl ReplayGuard {
    /// Number of remembered messages.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Forgets entries whose timestamps have left the window.
    pub fn prune(&mut self, now: OffsetDateTime) {
        let now_ns = now.unix_timestamp_nanos();
        while let Some(first) = self.by_expiry.first() {
            if first.0 > now_ns {
                break;
            }
            if let Some((_, key)) = self.by_expiry.pop_first()
                && let Some(principal) = self.seen.remove(&key)
                && let Some(n) = self.per_principal.get_mut(&principal)
            {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.per_principal.remove(&principal);
                }
            }
        }
    }

    /// Admits a message once, or refuses it; the sender's declared `from` is its principal.
    pub fn check(&mut self, cfg: &ReplayConfig, env: &Envelope, now: OffsetDateTime) -> Result<(), LdpError> {
        self.check_for(cfg, env, &env.from, now)
    }

    /// Admits a message once, or refuses it, counting it against `principal`'s share of the table
    /// ([`ReplayConfig::max_entries_per_principal`]).
    pub fn check_for(
        &mut self,
        cfg: &ReplayConfig,
        env: &Envelope,
        principal: &str,
        now: OffsetDateTime,
    ) -> Result<(), LdpError> {
        let ts = timestamp_in_window(cfg, env, now)?;
        let window = time::Duration::try_from(cfg.window).unwrap_or(time::Duration::MAX);
        self.prune(now);
        let key = replay_key(env);
        if self.seen.contains_key(&key) {
            return Err(replay_detected(env));
        }
        let held = self.per_principal.get_key_value(principal);
        match replay_room(
            held.map_or(0, |(_, n)| *n),
            self.seen.len(),
            Some(cfg.max_entries_per_principal),
            Some(cfg.max_entries),
        ) {
            ReplayVerdict::Fresh | ReplayVerdict::Seen => {}
            ReplayVerdict::Full => return Err(share_full()),
            ReplayVerdict::TableFull => return Err(table_full()),
        }
        // One allocation per principal, shared by its entries.
        let principal = held.map_or_else(|| Arc::from(principal), |(p, _)| p.clone());
        *self.per_principal.entry(principal.clone()).or_insert(0) += 1;
        let expiry = (ts + window).unix_timestamp_nanos();
        self.by_expiry.insert((expiry, key.clone()));
        self.seen.insert(key, principal);
        Ok(())
    }
}

/// Whether a replay window holding `total` entries, `held` of them counted against one source, has room for one
/// more of that source's: [`ReplayVerdict::Full`] when the source holds its share (`max_per_principal`) or as many
/// entries as the window has room left, [`ReplayVerdict::TableFull`] when the window holds `max_total`, else
/// [`ReplayVerdict::Fresh`]. The room-left rule means one source can fill at most half the window, `n` sources
/// `n / (n + 1)` of it, and the heaviest are refused first: a source holding little is admitted while a heavy one is
/// refused. The one rule of every replay window, the machine's own and each store's.
pub fn replay_room(
    held: usize,
    total: usize,
    max_per_principal: Option<usize>,
    max_total: Option<usize>,
) -> ReplayVerdict {
    if max_per_principal.is_some_and(|max| held >= max) {
        return ReplayVerdict::Full;
    }
    match max_total {
        Some(max) if total >= max => ReplayVerdict::TableFull,
        Some(max) if held >= max - total => ReplayVerdict::Full,
        _ => ReplayVerdict::Fresh,
    }
}

/// The refusal of a signed message seen before (by this table or a shared store's).
pub(crate) fn replay_detected(env: &Envelope) -> LdpError {
    LdpError::security(codes::REPLAY_DETECTED, format!("message {} was already received", env.message_id))
}

/// The refusal of a message when the replay window holds its global bound: retryable, nothing is evicted.
pub(crate) fn table_full() -> LdpError {
    LdpError::runtime(codes::CAPACITY_EXCEEDED, "replay table full; retry later").with_retryable(true)
}

/// The refusal of a message whose sender's share of the replay window is full (retryable: entries leave with it).
pub(crate) fn share_full() -> LdpError {
    LdpError::runtime(codes::CAPACITY_EXCEEDED, "this sender's share of the replay table is full; retry later")
        .with_retryable(true)
}

/// The message's timestamp, if it lies within the window around `now` (else the typed refusal).
pub(crate) fn timestamp_in_window(
    cfg: &ReplayConfig,
    env: &Envelope,
    now: OffsetDateTime,
) -> Result<OffsetDateTime, LdpError> {
    let ts = ldp_types::time::parse_timestamp(&env.timestamp).map_err(|_| {
        LdpError::security(codes::TIMESTAMP_OUT_OF_WINDOW, format!("unparseable timestamp {:?}", env.timestamp))
    })?;
    let window = time::Duration::try_from(cfg.window).unwrap_or(time::Duration::MAX);
    let skew = time::Duration::try_from(cfg.future_skew).unwrap_or(time::Duration::MAX);
    if ts < now - window || ts > now + skew {
        return Err(LdpError::security(
            codes::TIMESTAMP_OUT_OF_WINDOW,
            format!("timestamp {} is outside the accepted window", env.timestamp),
        ));
    }
    Ok(ts)
}

/// The key a signed message is remembered by in the replay window (this table's and a shared store's,
/// [`crate::Responder::replay_claim`]): its id and nonce.
pub(crate) fn replay_key(env: &Envelope) -> String {
    format!("{}\u{0}{}", env.message_id, env.nonce.as_deref().unwrap_or(""))
}

/// The JSON of an inbound message as received, which the JCS algorithms verify.
#[derive(Clone, Copy)]
pub(crate) enum Received<'a> {
    /// Not at hand: verify the decoded envelope.
    Decoded,
    /// Parsed into a value.
    Value(&'a Value),
    /// The bytes themselves.
    Bytes(&'a [u8]),
}

impl<'a> From<Option<&'a Value>> for Received<'a> {
    fn from(raw: Option<&'a Value>) -> Self {
        raw.map_or(Received::Decoded, Received::Value)
    }
}

/// Checks an inbound message's signature under the policy for its sender.
pub(crate) fn verify_inbound(cfg: &SecurityConfig, env: &Envelope, raw: Received<'_>) -> Result<(), LdpError> {
    let SignaturePolicy::Require(key) = cfg.policy_for(&env.from) else {
        return Ok(());
    };
    let unsigned = env.signature.as_deref().is_none_or(str::is_empty);
    if unsigned && cfg.allow_unsigned_hello && matches!(env.body, Body::Hello(_)) {
        return Ok(());
    }
    let verdict = match raw {
        Received::Value(raw) => signing::verify_value(raw, key),
        Received::Bytes(raw) => signing::verify_slice(raw, key),
        Received::Decoded => signing::verify(env, key),
    };
    verdict.map_err(|e| {
        let mut err = LdpError::from(&e);
        err.message = format!("message {} from {}: {}", env.message_id, env.from, err.message);
        err
    })
}

/// Signs an outbound message when a key is configured, first giving it a nonce from `ids` (except for
/// `hmac-sha256` when `hmac_sha256_nonce` is off: the PyPI reference SDK cannot verify that scheme with a nonce).
pub(crate) fn sign_outbound(
    cfg: &SecurityConfig,
    hmac_sha256_nonce: bool,
    ids: &mut dyn crate::clock::IdSource,
    env: &mut Envelope,
) {
    if let Some(key) = &cfg.signing_key {
        if hmac_sha256_nonce || key.algorithm() != signing::SignatureAlgorithm::HmacSha256 {
            env.nonce = Some(ids.nonce());
        }
        // Signing a typed envelope only fails when a `Value` holds a non-finite float, which serde_json cannot
        // produce; leave such a message unsigned and let the peer refuse it.
        if let Err(e) = signing::sign(env, key) {
            tracing::warn!(error = %e, "could not sign outbound message");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldp_types::SessionClose;

    fn env(id: &str, nonce: &str, ts: &str) -> Envelope {
        Envelope::new(id, ts, "s", "a", "b", SessionClose::new(None)).with_nonce(nonce)
    }

    fn short() -> ReplayConfig {
        ReplayConfig { window: Duration::from_secs(60), future_skew: Duration::from_secs(5), ..ReplayConfig::default() }
    }

    #[test]
    fn one_principal_filling_its_share_does_not_lock_out_others() {
        let cfg = ReplayConfig { max_entries: 5, max_entries_per_principal: 2, ..short() };
        let mut g = ReplayGuard::default();
        let now = t("2026-01-01T00:01:00Z");
        let ts = "2026-01-01T00:00:59Z";
        g.check_for(&cfg, &env("f1", "n", ts), "flooder", now).unwrap();
        g.check_for(&cfg, &env("f2", "n", ts), "flooder", now).unwrap();
        let full = g.check_for(&cfg, &env("f3", "n", ts), "flooder", now).unwrap_err();
        assert_eq!(full.code, codes::CAPACITY_EXCEEDED);
        assert!(full.retryable);
        // Everyone else keeps working, up to the global bound; as the window fills, a source holding as many entries
        // as there is room left is refused while a source holding none is still admitted.
        g.check_for(&cfg, &env("o1", "n", ts), "other", now).unwrap();
        g.check_for(&cfg, &env("t1", "n", ts), "third", now).unwrap();
        let heavy = g.check_for(&cfg, &env("t2", "n", ts), "third", now).unwrap_err();
        assert_eq!(heavy.message, share_full().message);
        g.check_for(&cfg, &env("q1", "n", ts), "quiet", now).unwrap();
        let full = g.check_for(&cfg, &env("o2", "n", ts), "other", now).unwrap_err();
        assert_eq!(full.message, table_full().message);
        // Entries leave with the window, and their shares with them.
        let later = t("2026-01-01T00:02:00Z");
        g.prune(later);
        assert!(g.is_empty());
        assert!(g.per_principal.is_empty());
        let ts = "2026-01-01T00:01:59Z";
        g.check_for(&cfg, &env("f4", "n", ts), "flooder", later).unwrap();
    }

    proptest::proptest! {
        /// Whatever sources add entries in whatever order: none passes its share, the window never passes its bound,
        /// one source never holds more than about half of it, and a source holding nothing is admitted exactly while
        /// the window is not full.
        #[test]
        fn the_room_rule_bounds_every_source(
            sources in proptest::collection::vec(0..6usize, 1..400),
            max_total in 1..64usize,
            max_per in 1..64usize,
        ) {
            let (mut held, mut total) = ([0usize; 6], 0usize);
            for s in sources {
                if replay_room(held[s], total, Some(max_per), Some(max_total)) == ReplayVerdict::Fresh {
                    held[s] += 1;
                    total += 1;
                }
                let quiet = replay_room(0, total, Some(max_per), Some(max_total));
                proptest::prop_assert_eq!(quiet == ReplayVerdict::Fresh, total < max_total);
                proptest::prop_assert!(total <= max_total);
                for h in held {
                    proptest::prop_assert!(h <= max_per && 2 * h <= max_total + 1, "{h} of {max_total}");
                }
            }
        }
    }

    fn t(s: &str) -> OffsetDateTime {
        ldp_types::time::parse_timestamp(s).unwrap()
    }

    #[test]
    fn replay_is_refused_within_window_and_stale_messages_outside() {
        let cfg = ReplayConfig { max_entries: 10, ..short() };
        let mut g = ReplayGuard::default();
        let now = t("2026-01-01T00:01:00Z");
        g.check(&cfg, &env("m1", "n", "2026-01-01T00:00:30Z"), now).unwrap();
        let again = g.check(&cfg, &env("m1", "n", "2026-01-01T00:00:30Z"), now).unwrap_err();
        assert_eq!(again.code, codes::REPLAY_DETECTED);
        // Same id, other nonce: a different message.
        g.check(&cfg, &env("m1", "n2", "2026-01-01T00:00:30Z"), now).unwrap();
        let stale = g.check(&cfg, &env("m2", "n", "2025-12-31T23:59:00Z"), now).unwrap_err();
        assert_eq!(stale.code, codes::TIMESTAMP_OUT_OF_WINDOW);
        let future = g.check(&cfg, &env("m3", "n", "2026-01-01T00:02:00Z"), now).unwrap_err();
        assert_eq!(future.code, codes::TIMESTAMP_OUT_OF_WINDOW);
        let garbage = g.check(&cfg, &env("m4", "n", "yesterday"), now).unwrap_err();
        assert_eq!(garbage.category, ldp_types::ErrorCategory::Security);
    }

    #[test]
    fn flooding_never_evicts_a_remembered_message() {
        let cfg = ReplayConfig { max_entries: 3, ..short() };
        let mut g = ReplayGuard::default();
        let now = t("2026-01-01T00:01:00Z");
        g.check(&cfg, &env("victim", "n", "2026-01-01T00:00:59Z"), now).unwrap();
        // Flooders of one source each (one source alone would be held to the room left).
        for i in 0..2 {
            let flooder = format!("flooder{i}");
            g.check_for(&cfg, &env(&format!("flood{i}"), "n", "2026-01-01T00:00:59Z"), &flooder, now).unwrap();
        }
        let full = g.check_for(&cfg, &env("flood9", "n", "2026-01-01T00:00:59Z"), "flooder9", now).unwrap_err();
        assert_eq!(full.code, codes::CAPACITY_EXCEEDED);
        assert!(full.retryable);
        let replay = g.check(&cfg, &env("victim", "n", "2026-01-01T00:00:59Z"), now).unwrap_err();
        assert_eq!(replay.code, codes::REPLAY_DETECTED);
        // Once the window has passed, entries are forgotten and the stale timestamp is refused on its own.
        let later = t("2026-01-01T00:03:00Z");
        g.prune(later);
        assert!(g.is_empty());
        assert_eq!(
            g.check(&cfg, &env("victim", "n", "2026-01-01T00:00:59Z"), later).unwrap_err().code,
            codes::TIMESTAMP_OUT_OF_WINDOW
        );
    }
}
