//! The in-memory store: one process's tables behind a mutex, for replicas in one process (tests) and as the
//! reference the other backends follow. Expiries are on this machine's wall clock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SharedSession, SharedTask, SharedTaskStatus,
    TaskAnswer, TaskClaim, TaskFinish, TaskStep,
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

impl Tables {
    /// The replay step of an admission.
    fn claim_message(&mut self, claim: &ReplayClaim, now: i64, marker: i64) -> ReplayVerdict {
        if let Some((principal, expires)) = self.replay.get(&claim.key) {
            if *expires > now {
                return ReplayVerdict::Seen;
            }
            let principal = principal.clone();
            self.replay.remove(&claim.key);
            if let Some(n) = self.per_principal.get_mut(&principal) {
                *n = n.saturating_sub(1);
            }
        }
        let held = |t: &Self| t.per_principal.get(&claim.principal).copied().unwrap_or(0);
        let share_full = |t: &Self| claim.max_per_principal.is_some_and(|max| held(t) >= max);
        let table_full = |t: &Self| claim.max_total.is_some_and(|max| t.replay.len() >= max);
        if share_full(self) || table_full(self) {
            // Entries past their expiry still count until swept: sweep now before refusing.
            self.since_sweep = SWEEP_EVERY;
            self.sweep(now, marker);
            if share_full(self) {
                return ReplayVerdict::Full;
            }
            if table_full(self) {
                return ReplayVerdict::TableFull;
            }
        }
        self.replay.insert(claim.key.clone(), (claim.principal.clone(), claim.expires_at_ms));
        *self.per_principal.entry(claim.principal.clone()).or_insert(0) += 1;
        ReplayVerdict::Fresh
    }

    /// The session step of an admission: the lookup, restarting a live session's TTL.
    fn touch_session(&mut self, session_id: &str, now: i64, marker: i64) -> SessionLookup {
        let Some((record, expires)) = self.sessions.get_mut(session_id) else { return SessionLookup::Unknown };
        match record {
            Some(_) if *expires <= now && expires.saturating_add(marker) > now => SessionLookup::Expired,
            Some(s) if *expires > now => {
                *expires = now.saturating_add(ms(Duration::from_secs(s.ttl_secs)));
                SessionLookup::Live(s.clone())
            }
            None if *expires > now => SessionLookup::Closed,
            _ => SessionLookup::Unknown,
        }
    }

    fn claim_task(&mut self, key: &TaskKey, task: &SharedTask, lease: Duration, now: i64, keep: i64) -> TaskClaim {
        if let Some((held, expires)) = self.tasks.get(key)
            && *expires > now
            && !held.claimable(held.lease_until_ms > now)
        {
            return TaskClaim::Taken;
        }
        let mut task = task.clone();
        task.lease_until_ms = now.saturating_add(ms(lease));
        self.tasks.insert(key.clone(), (task, now.saturating_add(keep)));
        TaskClaim::Claimed
    }

    /// A live task record, a lapsed lease failed first.
    fn read_task(&mut self, key: &TaskKey, now: i64) -> Option<SharedTask> {
        let (task, expires) = self.tasks.get_mut(key)?;
        if *expires <= now {
            return None;
        }
        if task.status == SharedTaskStatus::Running && task.lease_until_ms <= now {
            *task = task.lease_expired();
        }
        Some(task.clone())
    }

    fn cancel_task(&mut self, key: &TaskKey, now: i64) -> Option<SharedTask> {
        let (task, expires) = self.tasks.get_mut(key)?;
        if *expires <= now || task.status != SharedTaskStatus::Running || task.lease_until_ms <= now {
            return None;
        }
        *task = task.cancelled();
        Some(task.clone())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let now = now_ms();
        let marker = ms(self.cfg.closed_ttl);
        let mut t = self.tables();
        t.sweep(now, marker);
        let replay = match &admission.replay {
            Some(claim) => t.claim_message(claim, now, marker),
            None => ReplayVerdict::Fresh,
        };
        let mut admitted = Admitted::replay_only(replay);
        let Some(session_id) = admission.session_id.as_deref().filter(|_| replay == ReplayVerdict::Fresh) else {
            return Ok(admitted);
        };
        let session = t.touch_session(session_id, now, marker);
        let live = matches!(session, SessionLookup::Live(_));
        admitted.session = Some(session);
        if !live {
            return Ok(admitted);
        }
        admitted.task = admission.task.as_ref().map(|step| match step {
            TaskStep::Claim { key, task, lease } => {
                TaskAnswer::Claim(t.claim_task(key, task, *lease, now, ms(self.cfg.result_ttl)))
            }
            TaskStep::Read(key) => TaskAnswer::Read(t.read_task(key, now)),
            TaskStep::Cancel(key) => TaskAnswer::Cancel(t.cancel_task(key, now)),
            // A step this backend does not know is not taken.
            _ => TaskAnswer::Read(None),
        });
        Ok(admitted)
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
        Ok(t.claim_task(key, task, lease, now, ms(self.cfg.result_ttl)))
    }

    async fn release_task(&self, key: &TaskKey, owner: &str) -> Result<(), StoreError> {
        let mut t = self.tables();
        if t.tasks.get(key).is_some_and(|(task, _)| task.owner == owner && task.status == SharedTaskStatus::Running) {
            t.tasks.remove(key);
        }
        Ok(())
    }

    async fn renew_leases(
        &self,
        owner: &str,
        keys: &[TaskKey],
        lease: Duration,
    ) -> Result<Vec<(TaskKey, SharedTask)>, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(ms(lease));
        let mut t = self.tables();
        let mut lost = Vec::new();
        for key in keys {
            match t.tasks.get_mut(key) {
                Some((task, _)) if task.owner == owner && task.status == SharedTaskStatus::Running => {
                    task.lease_until_ms = until;
                }
                Some((task, expires)) if *expires > now => lost.push((key.clone(), task.clone())),
                _ => {}
            }
        }
        Ok(lost)
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        // Absent (expired, or never claimed: a task admitted before the store was attached) is recorded too.
        if let Some((held, expires)) = t.tasks.get(key)
            && *expires > now
            && (held.owner != task.owner || held.status != SharedTaskStatus::Running)
        {
            return Ok(TaskFinish::Refused(Box::new(held.clone())));
        }
        t.tasks.insert(key.clone(), (task.clone(), now.saturating_add(ms(self.cfg.result_ttl))));
        Ok(TaskFinish::Recorded)
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let now = now_ms();
        Ok(self.tables().read_task(key, now))
    }
}
