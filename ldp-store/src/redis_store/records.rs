//! The Redis store's atomic step: the store's rules (`ldp_session::shared::rules`) run in Rust over one slot's
//! records, and one script ([`COMMIT`]) writes what they decided only if every record they read still holds what they
//! read: a compare-and-set over the records (optimistic concurrency). When one changed meanwhile, the script answers
//! the records as they are, at one instant, and the rules run again on them, at most [`ATTEMPTS`] times.
//!
//! So that a task still costs Redis one call for its admission and one for its end, the rules first run on the
//! records as this replica last wrote or read them ([`Remembered`]: a session's row and usage, a task's record), and
//! on a key it does not know as absent (a new task id, a new message's dedupe entry); the script checks both. A
//! replica serving a session another wrote, or a task another claimed, pays one call more, once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use ldp_session::TaskKey;
use ldp_session::shared::rules::{SessionRow, StoreRecords};
use ldp_session::shared::{ReplayClaim, ReplayVerdict, SessionUsage, SharedSession, SharedTask, TaskCost};
use ldp_session::store::StoreError;

use super::{BACKEND, CLOSED, RedisStore, decode, encode, unavailable};
use crate::corrupt;

/// How many times an operation's rules run before it is refused (retryably) as contended: each attempt after the
/// first runs on the records as the last one found them, so only a record changed again in between needs another.
const ATTEMPTS: usize = 8;

/// How many keys a replica remembers; past it, one is forgotten for each one learnt (a forgotten key costs a call).
const REMEMBERED: usize = 8192;

/// What a record is to the script and to the memory of the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A session's row, `<expiry ms>|<TTL ms>|<record>` or `closed`.
    Session,
    /// A session's usage hash, read as `<tasks>,<tokens>,<cost>`.
    Usage,
    /// A task's record (JSON).
    Task,
    /// A replay or dedupe entry (never remembered: a new one is taken as absent anyway).
    Entry,
}

/// The records this replica last wrote or read, by key (`None`: absent): the first guess of the next operation on
/// them, which the script checks.
#[derive(Debug, Default)]
pub(super) struct Remembered(Mutex<HashMap<String, Option<String>>>);

impl Remembered {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<String>>> {
        // Each access is one insert or lookup: the map stays consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn learn(&self, learnt: impl IntoIterator<Item = (String, Option<String>)>) {
        let mut map = self.map();
        for (key, value) in learnt {
            if map.len() >= REMEMBERED
                && !map.contains_key(&key)
                && let Some(old) = map.keys().next().cloned()
            {
                map.remove(&old);
            }
            map.insert(key, value);
        }
    }
}

/// Where an attempt took a key's value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The last attempt's script, at one instant.
    Fresh,
    /// This replica's memory.
    Remembered,
    /// Nowhere: taken as absent.
    Guessed,
}

/// One key of the slot, as an attempt sees it.
#[derive(Debug)]
struct Watched {
    name: String,
    role: Role,
    /// Whether the script reads it (the rules may): else it is only written.
    readable: bool,
    value: Option<String>,
    source: Source,
    /// What the rules read, which the script must find (`Some(None)`: absent).
    read: Option<Option<String>>,
    /// What the attempt wrote over it, as later reads see it (`Some(None)`: deleted).
    written: Option<Option<String>>,
}

/// A write, with its keys as indexes into the attempt's keys.
#[derive(Debug)]
enum Write {
    Set(usize, String, i64),
    SetAt(usize, String, i64),
    Del(usize),
    Expire(usize, i64),
    Count { usage: usize, session: usize, delta: i64 },
    Cost { usage: usize, session: usize, cost: TaskCost },
}

/// One slot's records as one attempt of an operation sees them: what the rules run on ([`StoreRecords`]).
pub(super) struct Slot<'a> {
    store: &'a RedisStore,
    /// The session whose slot it is (`None`: a message outside any session, whose replay entry is all it touches).
    session: Option<&'a str>,
    fresh: &'a HashMap<String, Option<String>>,
    now: i64,
    keys: Vec<Watched>,
    writes: Vec<Write>,
}

impl<'a> Slot<'a> {
    /// The index of key `name`, added with its value as known (fresh, remembered, else guessed absent).
    fn key(&mut self, name: String, role: Role, readable: bool) -> usize {
        if let Some(i) = self.keys.iter().position(|k| k.name == name) {
            self.keys[i].readable |= readable;
            return i;
        }
        let (value, source) = match self.fresh.get(&name) {
            Some(value) => (value.clone(), Source::Fresh),
            None if role == Role::Entry => (None, Source::Guessed),
            None => match self.store.remembered.map().get(&name) {
                Some(value) => (value.clone(), Source::Remembered),
                None => (None, Source::Guessed),
            },
        };
        self.keys.push(Watched { name, role, readable, value, source, read: None, written: None });
        self.keys.len() - 1
    }

    /// Reads a key: what the attempt wrote over it, else its value, then a condition of the commit.
    fn read(&mut self, name: String, role: Role) -> Option<String> {
        let i = self.key(name, role, true);
        let key = &mut self.keys[i];
        if let Some(written) = &key.written {
            return written.clone();
        }
        key.read.get_or_insert_with(|| key.value.clone()).clone()
    }

    fn write(&mut self, name: String, role: Role, write: impl FnOnce(usize) -> Write) {
        let i = self.key(name, role, false);
        let write = write(i);
        match &write {
            Write::Set(_, value, _) | Write::SetAt(_, value, _) => self.keys[i].written = Some(Some(value.clone())),
            Write::Del(_) => self.keys[i].written = Some(None),
            _ => {}
        }
        self.writes.push(write);
    }

    /// Milliseconds from now to `until`, at least 1 (Redis refuses an expiry of 0).
    fn px(&self, until: i64) -> i64 {
        until.saturating_sub(self.now).max(1)
    }

    fn session_id(&self, id: &str) -> String {
        self.store.session_key(id)
    }

    fn entry(&self, entry: &ReplayClaim) -> String {
        self.store.replay_key(self.session, &entry.key)
    }

    /// Whether the rules' answer stands without a call: nothing to write, and every record read at one instant.
    fn settled(&self) -> bool {
        self.writes.is_empty() && self.keys.iter().all(|k| k.read.is_none() || k.source == Source::Fresh)
    }
}

/// A session's value as a row: `<expiry ms>|<TTL ms>|<record>` (or, as earlier versions wrote it, `<expiry
/// ms>|<record>`), or `closed` (its key goes when the marker does).
pub(super) fn session_row(value: &str) -> Result<SessionRow, StoreError> {
    if value == CLOSED {
        return Ok(SessionRow::new(None, i64::MAX, SessionUsage::default()));
    }
    let unreadable = || corrupt(BACKEND, "a session's value is not <expiry>|<TTL>|<record>");
    let (expiry, rest) = value.split_once('|').ok_or_else(unreadable)?;
    let expiry: i64 = expiry.parse().map_err(|_| unreadable())?;
    let record = match rest.split_once('|') {
        Some((ttl, record)) if ttl.parse::<i64>().is_ok() => record,
        _ => rest,
    };
    Ok(SessionRow::new(Some(decode(record)?), expiry, SessionUsage::default()))
}

/// A live session's value, `<expiry ms>|<TTL ms>|<record>`.
fn session_value(session: &SharedSession, record: &str, expires_ms: i64) -> String {
    let ttl = crate::ms(std::time::Duration::from_secs(session.ttl_secs)).max(1);
    format!("{expires_ms}|{ttl}|{record}")
}

/// A usage hash as the script reads it: `<tasks>,<tokens>,<cost>`, absent fields empty.
fn usage(text: &str) -> Result<SessionUsage, StoreError> {
    let mut fields = text.split(',');
    let mut field = || fields.next().unwrap_or_default();
    let (tasks, tokens, cost) = (field(), field(), field());
    let count = |text: &str| if text.is_empty() { Ok(0) } else { text.parse::<u64>().map_err(|e| corrupt(BACKEND, e)) };
    let cost: f64 = if cost.is_empty() { 0.0 } else { cost.parse().map_err(|e| corrupt(BACKEND, e))? };
    Ok(SessionUsage::new(count(tasks)?, count(tokens)?, cost))
}

impl StoreRecords for Slot<'_> {
    type Error = StoreError;

    fn claim_replay(&mut self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        // The window's bounds were counted before (`ACCOUNT`, a slot of their own): the entry itself is set if absent.
        let name = self.entry(claim);
        if self.read(name.clone(), Role::Entry).is_some() {
            return Ok(ReplayVerdict::Seen);
        }
        self.write(name, Role::Entry, |i| Write::SetAt(i, "1".to_owned(), claim.expires_at_ms));
        Ok(ReplayVerdict::Fresh)
    }

    fn dedupe_held(&mut self, entry: &ReplayClaim) -> Result<bool, StoreError> {
        let name = self.entry(entry);
        Ok(self.read(name, Role::Entry).is_some())
    }

    fn write_dedupe(&mut self, entry: &ReplayClaim) -> Result<(), StoreError> {
        let name = self.entry(entry);
        self.write(name, Role::Entry, |i| Write::SetAt(i, "1".to_owned(), entry.expires_at_ms));
        Ok(())
    }

    fn session(&mut self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let name = self.session_id(id);
        self.read(name, Role::Session).as_deref().map(session_row).transpose()
    }

    fn usage(&mut self, id: &str, _row: &SessionRow) -> Result<SessionUsage, StoreError> {
        let name = self.store.usage_key(id);
        usage(&self.read(name, Role::Usage).unwrap_or_default())
    }

    fn insert_session(&mut self, session: &SharedSession, expires_ms: i64) -> Result<(), StoreError> {
        let value = session_value(session, &encode(session)?, expires_ms);
        let px = self.px(expires_ms).saturating_add(self.store.keeping().marker_ms);
        self.write(self.session_id(&session.session_id), Role::Session, |i| Write::Set(i, value, px));
        Ok(())
    }

    fn close_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        // Deletes first: a close is made even when Redis is full.
        self.write(self.store.usage_key(id), Role::Usage, Write::Del);
        let name = self.session_id(id);
        self.write(name.clone(), Role::Session, Write::Del);
        let px = self.px(until_ms);
        self.write(name, Role::Session, |i| Write::Set(i, CLOSED.to_owned(), px));
        Ok(())
    }

    fn renew_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        let name = self.session_id(id);
        let Some(value) = self.read(name.clone(), Role::Session) else { return Ok(()) };
        let Some(session) = session_row(&value)?.record else { return Ok(()) };
        // The record's text as stored: the last of the value's fields (a record may hold `|`, a field may not).
        let fields = value.splitn(3, '|').collect::<Vec<_>>();
        let record = match fields.as_slice() {
            [_, ttl, record] if ttl.parse::<i64>().is_ok() => (*record).to_owned(),
            _ => encode(&session)?,
        };
        let px = self.px(until_ms).saturating_add(self.store.keeping().marker_ms);
        self.write(name, Role::Session, |i| Write::Set(i, session_value(&session, &record, until_ms), px));
        self.write(self.store.usage_key(id), Role::Usage, |i| Write::Expire(i, px));
        Ok(())
    }

    fn count_tasks(&mut self, id: &str, delta: i64) -> Result<(), StoreError> {
        let session = self.key(self.session_id(id), Role::Session, false);
        self.write(self.store.usage_key(id), Role::Usage, |usage| Write::Count { usage, session, delta });
        Ok(())
    }

    fn add_cost(&mut self, id: &str, cost: TaskCost) -> Result<(), StoreError> {
        let session = self.key(self.session_id(id), Role::Session, false);
        self.write(self.store.usage_key(id), Role::Usage, |usage| Write::Cost { usage, session, cost });
        Ok(())
    }

    fn task(&mut self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let name = self.store.task_key(key);
        self.read(name, Role::Task).as_deref().map(decode).transpose()
    }

    fn put_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<(), StoreError> {
        let (value, px) = (encode(task)?, self.px(expires_ms));
        self.write(self.store.task_key(key), Role::Task, |i| Write::Set(i, value, px));
        Ok(())
    }

    fn put_new_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<bool, StoreError> {
        if self.read(self.store.task_key(key), Role::Task).is_some() {
            return Ok(false);
        }
        self.put_task(key, task, expires_ms)?;
        Ok(true)
    }

    fn put_end(&mut self, key: &TaskKey, record: &SharedTask, expires_ms: i64) -> Result<(), StoreError> {
        // Deleted first: a task's end is recorded even when Redis is full.
        self.write(self.store.task_key(key), Role::Task, Write::Del);
        self.put_task(key, record, expires_ms)
    }

    fn remove_task(&mut self, key: &TaskKey) -> Result<(), StoreError> {
        self.write(self.store.task_key(key), Role::Task, Write::Del);
        Ok(())
    }
}

/// What the script answered.
enum Commit {
    /// Written; the usage hashes as they are after it.
    Done(Vec<Option<String>>),
    /// A record read had changed: each key's value now.
    Changed(Vec<Option<String>>),
}

impl RedisStore {
    /// Runs `rules` (given the slot and now, in ms) as one atomic step over the records of `session`'s slot, the
    /// keys of `watch` read by the script when their records have changed, so that the next attempt finds them.
    pub(super) async fn atomically<T>(
        &self,
        session: Option<&str>,
        watch: &[(String, Role)],
        mut rules: impl FnMut(&mut Slot<'_>, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut fresh = HashMap::new();
        for _ in 0..ATTEMPTS {
            let now = crate::now_ms();
            let mut slot = Slot { store: self, session, fresh: &fresh, now, keys: Vec::new(), writes: Vec::new() };
            for (name, role) in watch {
                slot.key(name.clone(), *role, true);
            }
            let answer = rules(&mut slot, now)?;
            if slot.settled() {
                return Ok(answer);
            }
            let (keys, wrote) = (slot.keys, !slot.writes.is_empty());
            match self.commit(&keys, &slot.writes, now).await? {
                Commit::Done(usage) => {
                    if wrote {
                        self.after_write();
                    }
                    self.remembered.learn(learnt(keys, usage));
                    return Ok(answer);
                }
                Commit::Changed(values) => {
                    let held: Vec<_> = keys.into_iter().zip(values).filter(|(k, _)| k.readable).collect();
                    let records = held.iter().filter(|(k, _)| k.role != Role::Entry);
                    self.remembered.learn(records.map(|(k, value)| (k.name.clone(), value.clone())));
                    fresh = held.into_iter().map(|(k, value)| (k.name, value)).collect();
                }
            }
        }
        Err(unavailable(format!("the records changed under each of {ATTEMPTS} attempts; retry")))
    }

    async fn commit(&self, keys: &[Watched], writes: &[Write], now: i64) -> Result<Commit, StoreError> {
        let mut invocation = self.scripts.commit.prepare_invoke();
        invocation.arg(now);
        for key in keys {
            invocation.key(&key.name);
            let kind = match (key.readable, key.role) {
                (false, _) => 'w',
                (true, Role::Usage) => 'u',
                (true, _) => 't',
            };
            invocation.arg(match &key.read {
                None => format!("{kind}?"),
                Some(None) => format!("{kind}-"),
                Some(Some(value)) => format!("{kind}={value}"),
            });
        }
        // Key indexes are 1-based in Lua.
        for write in writes {
            match write {
                Write::Set(k, value, px) => invocation.arg("set").arg(k + 1).arg(value).arg(px),
                Write::SetAt(k, value, at) => invocation.arg("at").arg(k + 1).arg(value).arg(at),
                Write::Del(k) => invocation.arg("del").arg(k + 1),
                Write::Expire(k, px) => invocation.arg("expire").arg(k + 1).arg(px),
                Write::Count { usage, session, delta } => {
                    invocation.arg("count").arg(usage + 1).arg(session + 1).arg(delta)
                }
                Write::Cost { usage, session, cost } => invocation
                    .arg("cost")
                    .arg(usage + 1)
                    .arg(session + 1)
                    .arg(cost.tokens.min(i64::MAX as u64))
                    .arg(cost.cost_usd.to_string()),
            };
        }
        let reply: Vec<Option<String>> =
            invocation.invoke_async(&mut self.conn()).await.map_err(|e| self.refused(e))?;
        let mut reply = reply.into_iter();
        match reply.next().flatten().as_deref() {
            Some("ok") => Ok(Commit::Done(reply.collect())),
            Some("changed") => Ok(Commit::Changed(reply.collect())),
            other => Err(unavailable(format!("the commit script answered {other:?}"))),
        }
    }
}

/// What a committed attempt teaches: each record key's value as written, or as read (the script found it so), the
/// usage hashes as the script answered them.
fn learnt(keys: Vec<Watched>, usage: Vec<Option<String>>) -> Vec<(String, Option<String>)> {
    let mut usage = usage.into_iter();
    let mut learnt = Vec::new();
    for key in keys {
        let value = match key.role {
            Role::Entry => continue,
            Role::Usage if key.readable => usage.next().flatten(),
            // Written, not read: its value is the script's.
            Role::Usage => continue,
            _ => match (key.written, key.read) {
                (Some(written), _) | (None, Some(written)) => written,
                (None, None) => continue,
            },
        };
        learnt.push((key.name, value));
    }
    learnt
}
