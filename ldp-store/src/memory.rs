//! The in-memory store: one process's tables behind a mutex, for replicas in one process (tests) and as the
//! reference the other backends follow. Expiries are on this machine's wall clock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::{
    ReplayClaim, ReplayVerdict, SessionLookup, SharedSession, SharedTask, SharedTaskStatus, TaskClaim,
};
use ldp_session::store::{Store, StoreError};

use crate::{StoreConfig, ms, now_ms};

/// Shared state in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    cfg: StoreConfig,
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    /// Message key -> (principal, expiry).
    replay: HashMap<String, (String, i64)>,
    /// Live entries per principal.
    per_principal: HashMap<String, usize>,
    /// Session id -> (record, `None` once closed; when it expires, or when a closed marker goes). An expired
    /// session is kept as a marker for the closed-marker time after its expiry.
    sessions: HashMap<String, (Option<SharedSession>, i64)>,
    /// Task -> (record, expiry of the record).
    tasks: HashMap<TaskKey, (SharedTask, i64)>,
    /// Operations since the last sweep of expired entries.
    since_sweep: usize,
}

/// Expired entries are swept every this many operations (each lookup also ignores expired entries).
const SWEEP_EVERY: usize = 1024;

impl Tables {
    fn sweep(&mut self, now: i64, marker: i64) {
        self.since_sweep += 1;
        if self.since_sweep < SWEEP_EVERY {
            return;
        }
        self.since_sweep = 0;
        let per_principal = &mut self.per_principal;
        self.replay.retain(|_, (principal, expires)| {
            let keep = *expires > now;
            if !keep && let Some(n) = per_principal.get_mut(principal.as_str()) {
                *n = n.saturating_sub(1);
            }
            keep
        });
        per_principal.retain(|_, n| *n > 0);
        self.sessions.retain(|_, (record, expires)| match record {
            Some(_) => expires.saturating_add(marker) > now,
            None => *expires > now,
        });
        self.tasks.retain(|_, (_, expires)| *expires > now);
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new(cfg: StoreConfig) -> Self {
        Self { cfg, tables: Mutex::new(Tables::default()) }
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // Every mutation completes before anything can panic: the tables stay consistent.
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn claim_message(&self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        if let Some((principal, expires)) = t.replay.get(&claim.key) {
            if *expires > now {
                return Ok(ReplayVerdict::Seen);
            }
            let principal = principal.clone();
            t.replay.remove(&claim.key);
            if let Some(n) = t.per_principal.get_mut(&principal) {
                *n = n.saturating_sub(1);
            }
        }
        let held = t.per_principal.get(&claim.principal).copied().unwrap_or(0);
        if claim.max_per_principal.is_some_and(|max| held >= max) {
            // Entries past their expiry still count until swept: sweep now before refusing.
            t.since_sweep = SWEEP_EVERY;
            t.sweep(now, ms(self.cfg.closed_ttl));
            if t.per_principal.get(&claim.principal).copied().unwrap_or(0) >= held {
                return Ok(ReplayVerdict::Full);
            }
        }
        t.replay.insert(claim.key.clone(), (claim.principal.clone(), claim.expires_at_ms));
        *t.per_principal.entry(claim.principal.clone()).or_insert(0) += 1;
        Ok(ReplayVerdict::Fresh)
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        let marker = ms(self.cfg.closed_ttl);
        let held = |(record, expires): &(Option<SharedSession>, i64)| match record {
            Some(_) => expires.saturating_add(marker) > now,
            None => *expires > now,
        };
        if t.sessions.get(&session.session_id).is_some_and(held) {
            return Ok(false);
        }
        let expires = now.saturating_add(ms(Duration::from_secs(session.ttl_secs)));
        t.sessions.insert(session.session_id.clone(), (Some(session.clone()), expires));
        Ok(true)
    }

    async fn touch_session(&self, session_id: &str) -> Result<SessionLookup, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        let marker = ms(self.cfg.closed_ttl);
        let Some((record, expires)) = t.sessions.get_mut(session_id) else { return Ok(SessionLookup::Unknown) };
        match record {
            Some(_) if *expires <= now && expires.saturating_add(marker) > now => Ok(SessionLookup::Expired),
            Some(s) if *expires > now => {
                *expires = now.saturating_add(ms(Duration::from_secs(s.ttl_secs)));
                Ok(SessionLookup::Live(s.clone()))
            }
            None if *expires > now => Ok(SessionLookup::Closed),
            _ => Ok(SessionLookup::Unknown),
        }
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sessions.insert(session_id.to_owned(), (None, now.saturating_add(ms(self.cfg.closed_ttl))));
        Ok(())
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        if let Some((held, expires)) = t.tasks.get(key)
            && *expires > now
            && !held.claimable(held.lease_until_ms > now)
        {
            return Ok(TaskClaim::Taken);
        }
        let mut task = task.clone();
        task.lease_until_ms = now.saturating_add(ms(lease));
        t.tasks.insert(key.clone(), (task, now.saturating_add(ms(self.cfg.result_ttl))));
        Ok(TaskClaim::Claimed)
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<(), StoreError> {
        let until = now_ms().saturating_add(ms(lease));
        let mut t = self.tables();
        for key in keys {
            if let Some((task, _)) = t.tasks.get_mut(key)
                && task.owner == owner
                && task.status == SharedTaskStatus::Running
            {
                task.lease_until_ms = until;
            }
        }
        Ok(())
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<(), StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        if t.tasks.get(key).is_some_and(|(held, _)| held.owner != task.owner) {
            return Ok(());
        }
        t.tasks.insert(key.clone(), (task.clone(), now.saturating_add(ms(self.cfg.result_ttl))));
        Ok(())
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        let Some((task, expires)) = t.tasks.get_mut(key) else { return Ok(None) };
        if *expires <= now {
            return Ok(None);
        }
        if task.status == SharedTaskStatus::Running && task.lease_until_ms <= now {
            *task = task.lease_expired();
        }
        Ok(Some(task.clone()))
    }
}
