//! The records as SQL: the sweep, replay and dedupe entries, sessions and their usage, task records. These are the
//! primitives the store's rules (`ldp_session::shared::rules`) run on ([`Records`]); each runs inside the writer's
//! transaction, and none decides anything of the protocol.

use ldp_session::shared::rules::{SessionRow, StoreRecords};
use ldp_session::shared::{ReplayClaim, ReplayVerdict, SessionUsage, SharedSession, SharedTask, TaskCost};
use ldp_session::store::StoreError;
use ldp_session::{TaskKey, replay_room};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{StoreConfig, corrupt, ms};

use super::*;

/// The sweep's deletes (replay entries, tasks, sessions), each a range of an expiry index: the sweep runs every
/// [`SWEEP_EVERY`] operations, and a scan of every row would make its cost grow with everything the file holds (an
/// hour of results), not with what has expired. A task's expiry is its last write plus the result TTL, so the tasks'
/// expiry index takes its entries at its newest pages, as the tasks themselves do; a live session's row (and so its
/// index entry) is rewritten about once a second.
pub(super) const SWEEP_DELETES: [&str; 3] = [
    // After `EXPIRED_SHARES` has uncounted them.
    "DELETE FROM replay WHERE expires_ms <= ?1",
    "DELETE FROM task_rows WHERE expires_ms <= ?1",
    // An expired session's row stays as the marker that it expired until `?2` (its expiry plus the marker's time); a
    // closed one (no record) goes at its expiry.
    "DELETE FROM sessions WHERE expires_ms <= ?1 AND (record IS NULL OR expires_ms <= ?2)",
];

/// Uncounts expired replay entries from their principals' shares, before they are deleted: every principal that
/// has expired entries (`?1` the time), then the shares that fell to none. Each reads the expired range of an index
/// (`replay_expiry`, then `replay_principal` per principal), never every entry.
pub(super) const EXPIRED_SHARES: [&str; 2] = [
    "UPDATE replay_shares SET n = MAX(n - (SELECT COUNT(*) FROM replay WHERE replay.principal = replay_shares.principal \
     AND replay.expires_ms <= ?1), 0) WHERE principal IN (SELECT principal FROM replay WHERE expires_ms <= ?1)",
    "DELETE FROM replay_shares WHERE n <= 0 AND principal IN (SELECT principal FROM replay WHERE expires_ms <= ?1)",
];

/// [`EXPIRED_SHARES`] and the delete for one principal's expired entries (`?1` the principal, `?2` the time).
pub(super) const EXPIRED_OF_PRINCIPAL: [&str; 3] = [
    "UPDATE replay_shares SET n = MAX(n - (SELECT COUNT(*) FROM replay WHERE principal = ?1 AND expires_ms <= ?2), 0) \
     WHERE principal = ?1",
    "DELETE FROM replay_shares WHERE principal = ?1 AND n <= 0",
    "DELETE FROM replay WHERE principal = ?1 AND expires_ms <= ?2",
];

/// Deletes the expired replay entries, of every principal or of one, keeping the total and the shares counted.
pub(super) fn delete_expired_replay(conn: &Connection, now: i64, principal: Option<&str>) -> Result<(), StoreError> {
    let run = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        conn.prepare_cached(sql).and_then(|mut st| st.execute(params)).map_err(unavailable)
    };
    let gone = match principal {
        None => {
            for sql in EXPIRED_SHARES {
                run(sql, params![now])?;
            }
            run(SWEEP_DELETES[0], params![now])?
        }
        Some(principal) => {
            let [uncount, empty, delete] = EXPIRED_OF_PRINCIPAL;
            run(uncount, params![principal, now])?;
            run(empty, params![principal])?;
            run(delete, params![principal, now])?
        }
    };
    count_replay_rows(conn, -i64::try_from(gone).unwrap_or(i64::MAX))
}

/// Adds `delta` to `principal`'s count of replay entries (a share at none is deleted).
pub(super) fn count_share(conn: &Connection, principal: &str, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO replay_shares (principal, n) VALUES (?1, MAX(?2, 0)) \
         ON CONFLICT (principal) DO UPDATE SET n = MAX(n + ?2, 0)",
    )
    .and_then(|mut st| st.execute(params![principal, delta]))
    .map_err(unavailable)?;
    if delta < 0 {
        conn.prepare_cached("DELETE FROM replay_shares WHERE principal = ?1 AND n <= 0")
            .and_then(|mut st| st.execute(params![principal]))
            .map_err(unavailable)?;
    }
    Ok(())
}

/// `principal`'s count of replay entries, live or expired but not yet deleted.
pub(super) fn share(conn: &Connection, principal: &str) -> Result<usize, StoreError> {
    let n: Option<i64> = conn
        .prepare_cached("SELECT n FROM replay_shares WHERE principal = ?1")
        .and_then(|mut st| st.query_row(params![principal], |r| r.get(0)).optional())
        .map_err(unavailable)?;
    Ok(n.map_or(0, |n| usize::try_from(n).unwrap_or(0)))
}

/// Deletes expired rows (lookups ignore them already; this returns their space). An expired session stays as a
/// marker for `marker` ms after its expiry.
pub(super) fn sweep(conn: &Connection, now: i64, marker: i64) -> Result<(), StoreError> {
    let [_, tasks, sessions] = SWEEP_DELETES;
    delete_expired_replay(conn, now, None)?;
    // Dedupe entries go a generation at a time instead ([`claim_dedupe`]).
    conn.prepare_cached(tasks).and_then(|mut st| st.execute(params![now])).map_err(unavailable)?;
    conn.prepare_cached(sessions)
        .and_then(|mut st| st.execute(params![now, now.saturating_sub(marker)]))
        .map_err(unavailable)?;
    Ok(())
}

/// Adds `delta` to the count of rows in the replay table (live or expired but not yet swept): the window's total,
/// read in O(1) where `COUNT(*)` would scan.
pub(super) fn count_replay_rows(conn: &Connection, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE meta SET value = MAX(value + ?1, 0) WHERE name = 'replay_rows'")
        .and_then(|mut st| st.execute(params![delta]))
        .map_err(unavailable)?;
    Ok(())
}

pub(super) fn replay_rows(conn: &Connection) -> Result<usize, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'replay_rows'")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(unavailable)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// A session's row with its usage.
pub(super) fn load_session_usage(
    conn: &Connection,
    id: &str,
) -> Result<Option<(Option<String>, i64, SessionUsage)>, StoreError> {
    let row = conn
        .prepare_cached("SELECT record, expires_ms, tasks, tokens, cost FROM sessions WHERE id = ?1")
        .and_then(|mut st| {
            st.query_row(params![id], |r| {
                Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?, {
                    r.get::<_, f64>(4)?
                }))
            })
            .optional()
        })
        .map_err(unavailable)?;
    Ok(row.map(|(record, expires, tasks, tokens, cost)| {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        (record, expires, SessionUsage::new(count(tasks), count(tokens), cost))
    }))
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(BACKEND, e))
}

pub(super) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| corrupt(BACKEND, e))
}

pub(super) fn load_task(conn: &Connection, key: &TaskKey, now: i64) -> Result<Option<SharedTask>, StoreError> {
    let row: Option<(String, Option<String>, i64)> = conn
        .prepare_cached(
            "SELECT record, message_key, message_until_ms FROM task_rows \
             WHERE session_id = ?1 AND task_id = ?2 AND expires_ms > ?3",
        )
        .and_then(|mut st| {
            st.query_row(params![key.session_id, key.task_id, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(unavailable)?;
    let Some((text, message_key, message_until_ms)) = row else { return Ok(None) };
    let mut task: SharedTask = decode(&text)?;
    (task.message_key, task.message_until_ms) = (message_key, message_until_ms);
    Ok(Some(task))
}

/// Writes a task's record with its message key (columns of the row, not in the record's text).
pub(super) fn put_task(conn: &Connection, key: &TaskKey, task: &SharedTask, expires: i64) -> Result<(), StoreError> {
    put_task_text(conn, key, &encode(&crate::without_message_key(task))?, task, expires)
}

/// [`put_task`] of a record whose text (without its message key) is encoded already.
fn put_task_text(
    conn: &Connection,
    key: &TaskKey,
    record: &str,
    task: &SharedTask,
    expires: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        // In place when the task is there already (its row keeps its place, near the table's end).
        "INSERT INTO task_rows (session_id, task_id, record, expires_ms, message_key, message_until_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (session_id, task_id) DO UPDATE SET record = excluded.record, \
         expires_ms = excluded.expires_ms, message_key = excluded.message_key, \
         message_until_ms = excluded.message_until_ms",
    )
    .and_then(|mut st| {
        st.execute(params![key.session_id, key.task_id, record, expires, task.message_key, task.message_until_ms])
    })
    .map_err(unavailable)?;
    Ok(())
}

/// Writes a task's record only if the table holds no row for its key (expired or not): whether it did. A task id new
/// to the store (nearly every claim) is claimed by this one statement.
pub(super) fn put_new_task(
    conn: &Connection,
    key: &TaskKey,
    task: &SharedTask,
    expires: i64,
) -> Result<bool, StoreError> {
    let record = encode(&crate::without_message_key(task))?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO task_rows (session_id, task_id, record, expires_ms, message_key, message_until_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (session_id, task_id) DO NOTHING",
        )
        .and_then(|mut st| {
            st.execute(params![key.session_id, key.task_id, record, expires, task.message_key, task.message_until_ms])
        })
        .map_err(unavailable)?;
    Ok(inserted == 1)
}

/// The replay step of an admission. Entries without bounds (unsigned traffic's dedupe) live in a table of their own,
/// with no principal or count to keep: one upsert decides.
pub(super) fn claim_message(
    conn: &Connection,
    cfg: &StoreConfig,
    claim: &ReplayClaim,
    now: i64,
) -> Result<ReplayVerdict, StoreError> {
    if claim.max_per_principal.is_none() && claim.max_total.is_none() {
        return claim_dedupe(conn, cfg, claim, now);
    }
    let seen: Option<(String, i64)> = conn
        .prepare_cached("SELECT principal, expires_ms FROM replay WHERE key = ?1")
        .and_then(|mut st| st.query_row(params![claim.key], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(unavailable)?;
    match seen {
        Some((_, expires)) if expires > now => return Ok(ReplayVerdict::Seen),
        // An expired entry of the same key, not yet swept: it goes first, uncounted, and the key is new again.
        Some((held_by, _)) => {
            conn.prepare_cached("DELETE FROM replay WHERE key = ?1")
                .and_then(|mut st| st.execute(params![claim.key]))
                .map_err(unavailable)?;
            count_share(conn, &held_by, -1)?;
            count_replay_rows(conn, -1)?;
        }
        None => {}
    }
    // Counts kept as entries come and go: a principal's share in O(1), where counting its entries took a time that
    // grew with them, on the one writer every message waits for.
    let room = |conn: &Connection| -> Result<ReplayVerdict, StoreError> {
        Ok(replay_room(share(conn, &claim.principal)?, replay_rows(conn)?, claim.max_per_principal, claim.max_total))
    };
    let mut verdict = room(conn)?;
    // Expired entries still count until deleted: delete this principal's, then everyone's, before refusing.
    for of in [Some(claim.principal.as_str()), None] {
        if verdict == ReplayVerdict::Fresh {
            break;
        }
        delete_expired_replay(conn, now, of)?;
        verdict = room(conn)?;
    }
    if verdict != ReplayVerdict::Fresh {
        return Ok(verdict);
    }
    conn.prepare_cached("INSERT INTO replay (key, principal, expires_ms) VALUES (?1, ?2, ?3)")
        .and_then(|mut st| st.execute(params![claim.key, claim.principal, claim.expires_at_ms]))
        .map_err(unavailable)?;
    count_replay_rows(conn, 1)?;
    count_share(conn, &claim.principal, 1)?;
    Ok(ReplayVerdict::Fresh)
}

/// SQL of the two dedupe generations: (look up a key, upsert an entry, clear the table).
pub(super) fn dedupe_sql(generation: i64) -> (&'static str, &'static str, &'static str) {
    if generation == 0 {
        (
            "SELECT expires_ms FROM dedupe_0 WHERE key = ?1",
            "INSERT INTO dedupe_0 (key, expires_ms) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE \
             SET expires_ms = excluded.expires_ms WHERE dedupe_0.expires_ms <= ?3",
            "DELETE FROM dedupe_0",
        )
    } else {
        (
            "SELECT expires_ms FROM dedupe_1 WHERE key = ?1",
            "INSERT INTO dedupe_1 (key, expires_ms) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE \
             SET expires_ms = excluded.expires_ms WHERE dedupe_1.expires_ms <= ?3",
            "DELETE FROM dedupe_1",
        )
    }
}

pub(super) fn set_meta(conn: &Connection, name: &str, value: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")
        .and_then(|mut st| st.execute(params![name, value]))
        .map_err(unavailable)?;
    Ok(())
}

pub(super) fn until_name(generation: i64) -> &'static str {
    if generation == 0 { "dedupe_0_until_ms" } else { "dedupe_1_until_ms" }
}

/// A dedupe key as stored: the machine's keys (32 hex digits) as their 16 bytes, any other as its text (a text never
/// equals a blob in SQLite, so the two forms cannot collide).
pub(super) fn dedupe_value(key: &str) -> rusqlite::types::Value {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes: Option<Vec<u8>> = (key.len() == 32)
        .then(|| key.as_bytes().chunks(2).map(|pair| Some(hex(pair[0])? << 4 | hex(pair[1])?)).collect())
        .flatten();
    match bytes {
        Some(bytes) => rusqlite::types::Value::Blob(bytes),
        None => rusqlite::types::Value::Text(key.to_owned()),
    }
}

/// Unsigned traffic's dedupe step. The entries live in two generation tables: new ones go into the current one, a
/// key is seen if either holds it unexpired. Once the other generation's entries have all expired (its `until_ms`,
/// kept a second ahead so that it is written about once a second, has passed) and the current one has taken
/// entries for [`StoreConfig::sqlite_dedupe_generation`], the other is emptied at once and becomes the current one.
/// So no entry is deleted on its own: a sweep by expiry would rewrite a random page per entry, and an index on the
/// expiry would add a page to every commit.
pub(super) fn claim_dedupe(
    conn: &Connection,
    cfg: &StoreConfig,
    claim: &ReplayClaim,
    now: i64,
) -> Result<ReplayVerdict, StoreError> {
    let (current, until) = dedupe_generation(conn, cfg, now)?;
    let key = dedupe_value(&claim.key);
    if dedupe_held(conn, 1 - current, &key, now)? {
        return Ok(ReplayVerdict::Seen);
    }
    let inserted = conn
        .prepare_cached(dedupe_sql(current).1)
        .and_then(|mut st| st.execute(params![key, claim.expires_at_ms, now]))
        .map_err(unavailable)?;
    if inserted == 0 {
        return Ok(ReplayVerdict::Seen);
    }
    if claim.expires_at_ms > until {
        set_meta(conn, until_name(current), claim.expires_at_ms.saturating_add(1000))?;
    }
    Ok(ReplayVerdict::Fresh)
}

/// The current dedupe generation and how long its entries last (`dedupe_N_until_ms`), the older one cleared and made
/// current first when its time has come.
pub(super) fn dedupe_generation(conn: &Connection, cfg: &StoreConfig, now: i64) -> Result<(i64, i64), StoreError> {
    // One statement for the four values: this runs for nearly every unsigned message.
    let (current, since, until): (i64, i64, [i64; 2]) = conn
        .prepare_cached(
            "SELECT (SELECT value FROM meta WHERE name = 'dedupe_current'), \
             (SELECT value FROM meta WHERE name = 'dedupe_since_ms'), \
             (SELECT value FROM meta WHERE name = 'dedupe_0_until_ms'), \
             (SELECT value FROM meta WHERE name = 'dedupe_1_until_ms')",
        )
        .and_then(|mut st| {
            st.query_row([], |r| Ok((r.get::<_, i64>(0)?.clamp(0, 1), r.get(1)?, [r.get(2)?, r.get(3)?])))
        })
        .map_err(unavailable)?;
    let (other, until_of) = (1 - current, |generation: i64| until[usize::from(generation != 0)]);
    if now.saturating_sub(since) >= ms(cfg.sqlite_dedupe_generation) && until_of(other) <= now {
        conn.prepare_cached(dedupe_sql(other).2).and_then(|mut st| st.execute([])).map_err(unavailable)?;
        set_meta(conn, until_name(other), 0)?;
        set_meta(conn, "dedupe_current", other)?;
        set_meta(conn, "dedupe_since_ms", now)?;
        return Ok((other, 0));
    }
    Ok((current, until_of(current)))
}

/// Whether generation `generation` holds a live entry for `key`.
pub(super) fn dedupe_held(
    conn: &Connection,
    generation: i64,
    key: &rusqlite::types::Value,
    now: i64,
) -> Result<bool, StoreError> {
    let expires: Option<i64> = conn
        .prepare_cached(dedupe_sql(generation).0)
        .and_then(|mut st| st.query_row(params![key], |r| r.get(0)).optional())
        .map_err(unavailable)?;
    Ok(expires.is_some_and(|expires| expires > now))
}

/// Whether an unsigned message's dedupe entry is held as an entry (in either generation), without writing it. The
/// record of the task the message claimed may hold it too ([`record_holds`]).
pub(super) fn dedupe_holds(
    conn: &Connection,
    cfg: &StoreConfig,
    claim: &ReplayClaim,
    now: i64,
) -> Result<bool, StoreError> {
    let (current, _) = dedupe_generation(conn, cfg, now)?;
    let key = dedupe_value(&claim.key);
    Ok(dedupe_held(conn, current, &key, now)? || dedupe_held(conn, 1 - current, &key, now)?)
}

/// Restarts a live session's TTL: its row expires at `until`.
pub(super) fn renew_session(conn: &Connection, id: &str, until: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE sessions SET expires_ms = ?2 WHERE id = ?1")
        .and_then(|mut st| st.execute(params![id, until]))
        .map_err(unavailable)?;
    Ok(())
}

/// Adds what a task spent to its session's usage, while the session is live.
pub(super) fn add_session_cost(conn: &Connection, id: &str, cost: TaskCost, now: i64) -> Result<(), StoreError> {
    let tokens = i64::try_from(cost.tokens).unwrap_or(i64::MAX);
    conn.prepare_cached(
        // An integer sum past i64 would turn into a REAL in SQLite: saturate instead.
        "UPDATE sessions SET tokens = CASE WHEN tokens > 9223372036854775807 - ?2 THEN 9223372036854775807 \
         ELSE tokens + ?2 END, cost = cost + ?3 WHERE id = ?1 AND record IS NOT NULL AND expires_ms > ?4",
    )
    .and_then(|mut st| st.execute(params![id, tokens, cost.cost_usd, now]))
    .map_err(unavailable)?;
    Ok(())
}

/// Adds `delta` to a session's count of admitted tasks, never below 0.
pub(super) fn count_session_tasks(conn: &Connection, id: &str, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE sessions SET tasks = MAX(tasks + ?2, 0) WHERE id = ?1")
        .and_then(|mut st| st.execute(params![id, delta]))
        .map_err(unavailable)?;
    Ok(())
}

/// The database inside the writer's transaction, as the store's rules see it.
pub(super) struct Records<'a> {
    pub(super) conn: &'a Connection,
    pub(super) cfg: &'a StoreConfig,
    pub(super) now: i64,
    /// A task's end as its caller encoded it (without its message key), so that the one writer does not encode it.
    pub(super) end_text: Option<&'a str>,
}

impl StoreRecords for Records<'_> {
    type Error = StoreError;

    fn claim_replay(&mut self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        claim_message(self.conn, self.cfg, claim, self.now)
    }

    fn dedupe_held(&mut self, entry: &ReplayClaim) -> Result<bool, StoreError> {
        dedupe_holds(self.conn, self.cfg, entry, self.now)
    }

    fn write_dedupe(&mut self, entry: &ReplayClaim) -> Result<(), StoreError> {
        claim_dedupe(self.conn, self.cfg, entry, self.now).map(drop)
    }

    fn session(&mut self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let Some((record, expires, usage)) = load_session_usage(self.conn, id)? else { return Ok(None) };
        Ok(Some(SessionRow::new(record.as_deref().map(decode).transpose()?, expires, usage)))
    }

    fn insert_session(&mut self, session: &SharedSession, expires_ms: i64) -> Result<(), StoreError> {
        let record = encode(session)?;
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, ?2, ?3)")
            .and_then(|mut st| st.execute(params![session.session_id, record, expires_ms]))
            .map_err(unavailable)?;
        Ok(())
    }

    fn close_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, NULL, ?2)")
            .and_then(|mut st| st.execute(params![id, until_ms]))
            .map_err(unavailable)?;
        Ok(())
    }

    fn renew_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        renew_session(self.conn, id, until_ms)
    }

    fn count_tasks(&mut self, id: &str, delta: i64) -> Result<(), StoreError> {
        count_session_tasks(self.conn, id, delta)
    }

    fn add_cost(&mut self, id: &str, cost: TaskCost) -> Result<(), StoreError> {
        add_session_cost(self.conn, id, cost, self.now)
    }

    fn task(&mut self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        load_task(self.conn, key, self.now)
    }

    fn put_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<(), StoreError> {
        put_task(self.conn, key, task, expires_ms)
    }

    fn put_new_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<bool, StoreError> {
        put_new_task(self.conn, key, task, expires_ms)
    }

    fn put_end(&mut self, key: &TaskKey, record: &SharedTask, expires_ms: i64) -> Result<(), StoreError> {
        match self.end_text {
            Some(text) => put_task_text(self.conn, key, text, record, expires_ms),
            None => put_task(self.conn, key, record, expires_ms),
        }
    }

    fn remove_task(&mut self, key: &TaskKey) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM task_rows WHERE session_id = ?1 AND task_id = ?2")
            .and_then(|mut st| st.execute(params![key.session_id, key.task_id]))
            .map_err(unavailable)?;
        Ok(())
    }
}
