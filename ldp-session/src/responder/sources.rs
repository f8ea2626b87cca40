//! Who a session counts against: each source's sessions (the credential, the peer's own signing key, else its
//! address; [`Responder::quota_key`]), the heavy sources, and the room a full table makes for a lighter source.

use std::collections::BTreeSet;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use ldp_types::Envelope;

use crate::security::SignaturePolicy;

use super::Responder;
use super::sessions::Ended;
use super::types::PeerContext;

/// The ids of one principal's live sessions here (at most `max_sessions_per_principal`). Each id is the session
/// table's own allocation, shared rather than copied, and a principal's one session takes no allocation of its own:
/// a replica may hold a million idle sessions, each of another principal (`examples/idle_sessions.rs`).
#[derive(Debug)]
pub(super) enum PrincipalSessions {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl PrincipalSessions {
    pub(super) fn len(&self) -> usize {
        match self {
            Self::One(_) => 1,
            Self::Many(ids) => ids.len(),
        }
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Arc<str>> {
        match self {
            Self::One(id) => std::slice::from_ref(id).iter(),
            Self::Many(ids) => ids.iter(),
        }
    }

    fn push(&mut self, id: Arc<str>) {
        match self {
            Self::One(first) => *self = Self::Many(vec![first.clone(), id]),
            Self::Many(ids) => ids.push(id),
        }
    }

    /// Removes `id`; returns whether none is left.
    fn remove(&mut self, id: &str) -> bool {
        match self {
            Self::One(held) => **held == *id,
            Self::Many(ids) => {
                if let Some(at) = ids.iter().position(|held| **held == *id) {
                    ids.swap_remove(at);
                }
                ids.is_empty()
            }
        }
    }
}

/// The quota key of a session record that names none (written before records carried one): its authenticated
/// principal, else its declared sender.
pub(super) fn recorded_quota(owner: Option<&str>, from: &str) -> Arc<str> {
    match owner {
        Some(p) => format!("auth:{p}").into(),
        None => format!("from:{from}").into(),
    }
}

/// The sources holding two sessions or more, by count: the heaviest is the last. A source with one session is not
/// kept, so a replica holding a million sessions of a million peers keeps nothing here.
pub(super) type HeavySources = BTreeSet<(usize, Arc<str>)>;

impl Responder {
    /// The source a message's sender counts against in the per-source limits (sessions, the replay window): what
    /// the peer cannot choose. Its transport credential (a bearer token, a client certificate); else the signing
    /// key the machine verified the message with, when its sender has a key of its own; else its network address.
    /// The declared `from` alone only for transports that know none of these (in process).
    pub(super) fn quota_key(&self, peer: &PeerContext, env: &Envelope) -> Arc<str> {
        if let Some(principal) = peer.principal() {
            return format!("auth:{principal}").into();
        }
        if env.signature.is_some()
            && matches!(self.cfg.security.peer_policies.get(env.from.as_str()), Some(SignaturePolicy::Require(_)))
        {
            return format!("signer:{}", env.from).into();
        }
        match peer.source() {
            Some(source) => format!("addr:{source}").into(),
            None => format!("from:{}", env.from).into(),
        }
    }

    /// How many live sessions the source `key` holds here.
    pub(super) fn sessions_of(&self, key: &str) -> usize {
        self.sessions_per_principal.get(key).map_or(0, PrincipalSessions::len)
    }

    /// Counts session `id` against the source `key`.
    pub(super) fn count_session(&mut self, key: Arc<str>, id: Arc<str>) {
        let held = match self.sessions_per_principal.entry(key.clone()) {
            Entry::Occupied(mut held) => {
                held.get_mut().push(id);
                held.get().len()
            }
            Entry::Vacant(first) => {
                first.insert(PrincipalSessions::One(id));
                1
            }
        };
        if held >= 2 {
            self.heavy.remove(&(held - 1, key.clone()));
            self.heavy.insert((held, key));
        }
    }

    /// Stops counting session `id` against the source `key`.
    pub(super) fn uncount_session(&mut self, key: &Arc<str>, id: &str) {
        let Some(held) = self.sessions_per_principal.get_mut(key) else { return };
        let before = held.len();
        let after = if held.remove(id) {
            self.sessions_per_principal.remove(key);
            0
        } else {
            held.len()
        };
        // An id this source does not hold changes nothing.
        if before != after {
            if before >= 2 {
                self.heavy.remove(&(before, key.clone()));
            }
            if after >= 2 {
                self.heavy.insert((after, key.clone()));
            }
        }
    }

    /// Makes room in a full session table for a proposal of the source `key`, which holds `held` sessions: the
    /// least recently used idle session of the heaviest source goes, if that source holds at least two more than
    /// `held` (so that sessions only ever move from heavier sources to lighter ones, and the table tends to equal
    /// shares). Without a store it ends ([`Ended::Evicted`]: its peer is told to establish a new one); with one, only
    /// this replica's copy goes. Returns whether a session went. Sources of equal weight never displace each other:
    /// a table filled by many sources of one session each (many addresses) refuses newcomers, which no single-node
    /// rule can tell from honest load (THREAT_MODEL.md).
    pub(super) fn make_room_for(&mut self, key: &str, held: usize) -> bool {
        // The few heaviest sources, in case the heaviest has every session busy.
        let candidates: Vec<Arc<str>> = self
            .heavy
            .iter()
            .rev()
            .take_while(|(n, heavy)| *n >= held.saturating_add(2) && **heavy != *key)
            .take(4)
            .map(|(_, heavy)| heavy.clone())
            .collect();
        for heavy in candidates {
            let idle = self
                .sessions_per_principal
                .get(&heavy)
                .into_iter()
                .flat_map(PrincipalSessions::iter)
                .filter_map(|id| Some((id, self.sessions.get(id)?)))
                .filter(|(_, s)| s.is_idle())
                .min_by_key(|(_, s)| s.last_activity)
                .map(|(id, _)| id.clone());
            let Some(id) = idle else { continue };
            if self.shared {
                self.drop_copy(&id);
            } else {
                self.end_session(&id, Ended::Evicted);
            }
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use ldp_types::Body;

    use super::super::sessions::tests::{echo_responder, heavy_of, message};
    use super::*;
    use crate::SessionState;

    /// What peers at a few addresses do to a small session table, for the per-source rules.
    #[derive(Debug, Clone)]
    enum Flood {
        /// A proposal from the peer at `10.0.0.<source>`, under a `from` of its choosing.
        Propose { source: u8, from: u8 },
        /// A held session ends (closed here).
        End { nth: u8 },
        /// A held session becomes busy (suspended) or idle again.
        Busy { nth: u8, busy: bool },
    }

    fn flood() -> impl proptest::strategy::Strategy<Value = Flood> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0..4u8, 0..8u8).prop_map(|(source, from)| Flood::Propose { source, from }),
            1 => any::<u8>().prop_map(|nth| Flood::End { nth }),
            2 => (any::<u8>(), any::<bool>()).prop_map(|(nth, busy)| Flood::Busy { nth, busy }),
        ]
    }

    proptest::proptest! {
        /// Whatever peers at four addresses propose under whatever `from`: no source passes its share, the table never
        /// passes its bound, the source index and the heavy sources stay exact, and a proposal the full table
        /// refuses is refused only when no source holding two or more sessions than the proposer has an idle one;
        /// when the table makes room, the session that goes is an idle one of the heaviest such source.
        #[test]
        fn a_full_table_gives_way_only_from_heavier_sources(ops in proptest::collection::vec(flood(), 1..80)) {
            use ldp_types::{SessionConfig, SessionPropose};
            let (mut r, wall) =
                echo_responder(|limits| (limits.max_sessions, limits.max_sessions_per_principal) = (6, 4));
            let mut now = Instant::now();
            let mut sent = 0u64;
            for op in ops {
                now += std::time::Duration::from_millis(10);
                let ids: Vec<Arc<str>> = {
                    let mut ids: Vec<Arc<str>> = r.sessions.keys().cloned().collect();
                    ids.sort();
                    ids
                };
                match op {
                    Flood::Propose { source, from } => {
                        sent += 1;
                        let peer = PeerContext {
                            address: Some(std::net::IpAddr::from([10, 0, 0, source])),
                            ..PeerContext::default()
                        };
                        let key = format!("addr:10.0.0.{source}");
                        let held = r.sessions_of(&key);
                        let full = r.sessions.len() >= 6;
                        // The idle sessions of the sources that may give way, by count.
                        let givers: Vec<(usize, Arc<str>, Arc<str>)> = r
                            .sessions
                            .iter()
                            .filter(|(_, s)| s.is_idle() && *s.quota != *key)
                            .map(|(id, s)| (r.sessions_of(&s.quota), s.quota.clone(), id.clone()))
                            .filter(|(n, _, _)| *n >= held + 2)
                            .collect();
                        let before: Vec<Arc<str>> = ids.clone();
                        let body = Body::SessionPropose(SessionPropose::new(SessionConfig::default()));
                        let bytes = message(&wall, sent, "", &format!("ldp:delegate:p{from}"), body);
                        let outcome = r.handle(now, &peer, &bytes);
                        if held >= 4 {
                            proptest::prop_assert!(outcome.is_err(), "over the source's share");
                        } else if full {
                            proptest::prop_assert_eq!(outcome.is_ok(), !givers.is_empty(), "refused only without a giver");
                            if outcome.is_ok() {
                                let gone: Vec<&Arc<str>> =
                                    before.iter().filter(|id| !r.sessions.contains_key(&***id)).collect();
                                proptest::prop_assert_eq!(gone.len(), 1);
                                let heaviest = givers.iter().map(|(n, _, _)| *n).max().unwrap_or(0);
                                proptest::prop_assert!(
                                    givers.iter().any(|(n, _, id)| id == gone[0] && *n == heaviest),
                                    "an idle session of the heaviest source went"
                                );
                            }
                        } else {
                            proptest::prop_assert!(outcome.is_ok(), "room in the table and the share");
                        }
                    }
                    Flood::End { nth } => {
                        if !ids.is_empty() {
                            r.end_session(&ids[usize::from(nth) % ids.len()], Ended::Closed);
                        }
                    }
                    Flood::Busy { nth, busy } => {
                        if !ids.is_empty() {
                            let id = &ids[usize::from(nth) % ids.len()];
                            if let Some(s) = r.sessions.get_mut(&**id) {
                                let was_idle = s.is_idle();
                                s.state = if busy { SessionState::Suspended } else { SessionState::Active };
                                let idle = s.is_idle();
                                match (was_idle, idle) {
                                    (true, false) => r.uncount_idle(),
                                    (false, true) => r.count_idle(id),
                                    _ => {}
                                }
                            }
                        }
                    }
                }
                proptest::prop_assert!(r.sessions.len() <= 6);
                let mut indexed = 0;
                for (key, ids) in &r.sessions_per_principal {
                    proptest::prop_assert!(ids.len() <= 4, "{key}: over its share");
                    for id in ids.iter() {
                        proptest::prop_assert_eq!(r.sessions.get(id).map(|s| &s.quota), Some(key));
                    }
                    indexed += ids.len();
                }
                proptest::prop_assert_eq!(indexed, r.sessions.len());
                proptest::prop_assert_eq!(&heavy_of(&r), &r.heavy);
            }
        }
    }
}
