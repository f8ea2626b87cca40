//! Checks of an inbound message that need no session state: decoding, identifier sizes, signatures (outside the
//! machine's lock, [`InboundCheck`]), deduplication of unsigned messages, and the category a refusal is sent with.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{Body, Envelope, LdpError, codes};

use crate::error::Refusal;
use crate::security::{Received, SecurityConfig, verify_inbound};

/// Recently seen `(session_id, message_id)` pairs, as keyed digests, oldest first; bounded in time and count.
///
/// The digests never leave this process, so they are 128-bit SipHash-1-3 digests under a key drawn for this table
/// (one pass, a twentieth of the instructions of the SHA-256 [`dedupe_key`] that replicas share): without the key a
/// peer can neither predict a digest nor aim for a collision, and 128 bits make an accidental one as unlikely as
/// SHA-256's first 128 bits do.
#[derive(Debug)]
pub(super) struct Dedupe {
    pub(super) seen: HashSet<u128, BuildHasherDefault<Digested>>,
    pub(super) order: VecDeque<(Instant, u128)>,
    key: [u64; 2],
}

impl Default for Dedupe {
    fn default() -> Self {
        Self { seen: HashSet::default(), order: VecDeque::new(), key: [rand::random(), rand::random()] }
    }
}

impl Dedupe {
    /// Records the message and says whether it is new. Entries older than `window` are forgotten, and the oldest
    /// when `max` are held: a flood can make the table forget, never refuse a new message.
    pub(super) fn admit(
        &mut self,
        now: Instant,
        window: Duration,
        max: usize,
        session_id: &str,
        message_id: &str,
    ) -> bool {
        if max == 0 {
            return true;
        }
        while let Some((at, key)) = self.order.front() {
            if now.saturating_duration_since(*at) < window && self.order.len() < max {
                break;
            }
            self.seen.remove(key);
            self.order.pop_front();
        }
        let key = self.key(session_id, message_id);
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back((now, key));
        true
    }

    /// The pair's digest under this table's key, length-prefixed so that no two pairs share an encoding.
    fn key(&self, session_id: &str, message_id: &str) -> u128 {
        use siphasher::sip128::Hasher128;
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(self.key[0], self.key[1]);
        h.write_usize(session_id.len());
        h.write(session_id.as_bytes());
        h.write(message_id.as_bytes());
        h.finish128().as_u128()
    }
}

/// The hasher of [`Dedupe`]'s set: its members are already keyed digests, so their low half is the hash.
#[derive(Debug, Default)]
pub(super) struct Digested(u64);

impl Hasher for Digested {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u128` members are hashed (`write_u128`); any other input still spreads over the table.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, digest: u128) {
        self.0 = digest as u64;
    }
}

/// A digest of the pair, length-prefixed so that no two pairs share an encoding.
pub(super) fn dedupe_key(session_id: &str, message_id: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((session_id.len() as u64).to_be_bytes());
    h.update(session_id.as_bytes());
    h.update(message_id.as_bytes());
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// Refuses a message with an identifier longer than `max` bytes: every one of them may be kept (in a session, the
/// replay table, an event), so a peer must not choose their size. Refused without a reply, which would echo them.
pub(super) fn check_identifiers(env: &Envelope, max: usize) -> Result<(), LdpError> {
    let mut fields: [(&str, Option<&str>); 10] = [
        ("from", Some(&env.from)),
        ("to", Some(&env.to)),
        ("message_id", Some(&env.message_id)),
        ("session_id", Some(&env.session_id)),
        ("nonce", env.nonce.as_deref()),
        ("signature_algorithm", env.signature_algorithm.as_deref()),
        ("task_id", env.body.task_id()),
        ("skill", None),
        ("contract_id", None),
        ("trust_domain", None),
    ];
    match &env.body {
        Body::TaskSubmit(t) => {
            fields[7].1 = Some(&t.skill);
            fields[8].1 = t.contract.as_ref().map(|c| c.contract_id.as_str());
        }
        Body::SessionPropose(p) => {
            fields[8].1 = p.config.required_trust_domain.as_deref();
            fields[9].1 = p.config.trust_domain.as_deref();
        }
        _ => {}
    }
    match fields.iter().find(|(_, v)| v.is_some_and(|v| v.len() > max)) {
        None => Ok(()),
        Some((name, v)) => Err(LdpError::runtime(
            codes::MALFORMED_MESSAGE,
            format!("{name} is {} bytes long; at most {max} are accepted", v.map_or(0, str::len)),
        )
        .with_retryable(false)),
    }
}

/// Decodes a message as [`Responder::handle`](crate::Responder::handle) does: malformed input is refused without a
/// reply.
pub(super) fn decode(bytes: &[u8]) -> Result<Envelope, Refusal> {
    Envelope::from_slice(bytes).map_err(|e| Refusal { error: LdpError::from(&e), reply: None })
}

/// Decoding and signature verification of inbound messages, separated from the machine so that they can run without
/// exclusive access to it (see [`Responder::inbound_check`](crate::Responder::inbound_check) and
/// [`Responder::handle_checked`](crate::Responder::handle_checked)).
#[derive(Debug, Clone)]
pub struct InboundCheck {
    pub(super) security: Arc<SecurityConfig>,
    pub(super) max_identifier_len: usize,
}

impl InboundCheck {
    /// Decodes `bytes` and checks the signature under the sender's policy. A message that does not decode is refused
    /// here exactly as [`Responder::handle`](crate::Responder::handle) refuses it; a signature failure is kept in the
    /// result, for the machine to answer in protocol (after its own earlier checks).
    pub fn check(&self, bytes: &[u8]) -> Result<Checked, Refusal> {
        let env = decode(bytes)?;
        check_identifiers(&env, self.max_identifier_len).map_err(|error| Refusal { error, reply: None })?;
        // The JCS algorithms verify the bytes as received (nulls and unknown members included).
        let received = if self.security.needs_raw_json() { Received::Bytes(bytes) } else { Received::Decoded };
        let signature = verify_inbound(&self.security, &env, received);
        Ok(Checked { env, signature })
    }
}

/// A decoded message and the verdict on its signature, for
/// [`Responder::handle_checked`](crate::Responder::handle_checked).
#[derive(Debug)]
pub struct Checked {
    pub(super) env: Envelope,
    pub(super) signature: Result<(), LdpError>,
}

impl Checked {
    /// The decoded message.
    pub fn envelope(&self) -> &Envelope {
        &self.env
    }

    /// The verdict on its signature (the machine answers a failure in protocol).
    pub fn signature(&self) -> Result<(), &LdpError> {
        match &self.signature {
            Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The error as a refusal sends it: a `security` failure (signature, replay, timestamp window) goes out with the
/// paper's `identity` category ("authentication or identity mismatch"), keeping its code, message, severity and
/// retryability, because the Python reference SDK accepts only the paper's seven categories and fails to read the
/// whole reply otherwise (docs/interop.md). The typed refusal and the responder's events keep `security`.
pub(super) fn reference_category(error: &LdpError) -> LdpError {
    let mut on_wire = error.clone();
    if on_wire.category == ldp_types::ErrorCategory::Security {
        on_wire.category = ldp_types::ErrorCategory::Identity;
    }
    on_wire
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair is recognised again, and no other pair is taken for it: not one that concatenates to the same text,
    /// and not the same pair in another table (whose key is its own).
    #[test]
    fn a_pair_is_seen_once_and_only_itself() {
        let (now, window) = (Instant::now(), Duration::from_secs(60));
        let mut table = Dedupe::default();
        assert!(table.admit(now, window, 10, "ab", "c"));
        assert!(!table.admit(now, window, 10, "ab", "c"));
        assert!(table.admit(now, window, 10, "a", "bc"));
        assert!(table.admit(now, window, 10, "abc", ""));
        assert_ne!(table.key("s", "m"), Dedupe::default().key("s", "m"));
        // Bounded by count: the oldest is forgotten, never a new one refused.
        for i in 0..20 {
            assert!(table.admit(now, window, 10, "s", &i.to_string()));
        }
        assert_eq!(table.seen.len(), 10);
        assert!(table.admit(now, window, 10, "ab", "c"));
    }
}
