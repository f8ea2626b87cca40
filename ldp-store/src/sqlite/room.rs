//! The bounded file: how many pages are in use, and dropping the oldest ended tasks' records to make room.

use ldp_session::shared::ReplayClaim;
use ldp_session::store::StoreError;
use rusqlite::{Connection, params};

use crate::{MIN_BOUND_BYTES, StoreConfig, drop_marks};

use super::*;

/// The bound of the database file's pages in use ([`StoreConfig::sqlite_max_bytes`]) and the marks between which
/// the writer drops the oldest ended tasks' records early.
#[derive(Debug, Clone, Copy)]
pub(super) struct Room {
    /// Past this many pages in use, a batch first drops old records.
    pub(super) drop_above: u64,
    /// ... until this many are in use (or it has dropped [`ROOM_ROWS_PER_BATCH`]).
    pub(super) drop_to: u64,
    /// How often, in operations, the writer reads the pages in use while the file is not near its bound
    /// ([`Room::check_every`]).
    pub(super) check_every: u64,
}

/// The most records one batch drops to make room: a writer that must drop more to get under the mark does so over
/// the next batches, rather than stalling this one's callers. (A batch's own writes add at most [`MAX_BATCH`] records.)
pub(super) const ROOM_ROWS_PER_BATCH: usize = 1024;

/// The fewest operations between two reads of the pages in use while the file is not near its bound.
pub(super) const ROOM_CHECK_EVERY: u64 = 16;

/// The most operations between two such reads. Each read costs about as much as a claim (the pager's page counts
/// through two table-valued pragmas), so a bound with room to spare is read less often.
pub(super) const ROOM_CHECK_MOST: u64 = 256;

/// The result size the eighth between the mark and the bound is sized for (see [`Room::check_every`]).
pub(super) const ROOM_RESULT_BYTES: u64 = 8 << 10;

/// Records read and dropped at a time while making room, between checks of the pages in use.
pub(super) const ROOM_CHUNK: i64 = 64;

/// The oldest ended tasks' records, in insertion order (`?1` at most). A running task's record starts so: `status` is
/// [`SharedTask`]'s first field, and these are the only records this store writes. Reading that prefix spares
/// parsing a record, which may hold a result of up to a megabyte.
pub(super) const OLDEST_ENDED: &str = "SELECT row, message_key, message_until_ms FROM task_rows \
     WHERE substr(record, 1, 19) <> '{\"status\":\"running\"' ORDER BY row LIMIT ?1";

impl Room {
    /// Sets the file's bound on `conn` (`PRAGMA max_page_count`, which never goes below the pages the file has; at
    /// least [`MIN_BOUND_BYTES`]) and its marks ([`drop_marks`]).
    pub(super) fn new(conn: &Connection, max_bytes: u64) -> rusqlite::Result<Self> {
        let page_size: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let max_pages = max_bytes.max(MIN_BOUND_BYTES) / u64::from(page_size.max(512));
        conn.query_row(&format!("PRAGMA max_page_count={max_pages}"), [], |_| Ok(()))?;
        let (drop_above, drop_to) = drop_marks(max_pages);
        let eighth = max_pages.saturating_sub(drop_above).saturating_mul(u64::from(page_size.max(512)));
        Ok(Self { drop_above, drop_to, check_every: Self::check_every(eighth) })
    }

    /// How often to read the pages in use, given the bytes between the mark and the bound (`eighth`): between two
    /// reads the file grows by at most that many results (plus a batch's), which the eighth must hold. The smallest
    /// bound the store takes, 1 MiB, holds [`ROOM_CHECK_EVERY`] results of [`ROOM_RESULT_BYTES`]; the default bound
    /// (4 GiB) holds [`ROOM_CHECK_MOST`] results of a megabyte.
    pub(super) fn check_every(eighth: u64) -> u64 {
        (eighth / ROOM_RESULT_BYTES).clamp(ROOM_CHECK_EVERY, ROOM_CHECK_MOST)
    }

    /// Drops the oldest ended tasks' records while more than [`Room::drop_above`] pages are in use, down to
    /// [`Room::drop_to`] or [`ROOM_ROWS_PER_BATCH`] records. A dropped record's message dedupe entry, while it
    /// lasts, is written on its own first, so that a resent unsigned message is still refused. Returns how many it
    /// dropped.
    pub(super) fn make(&self, conn: &Connection, cfg: &StoreConfig, now: i64) -> Result<usize, StoreError> {
        if pages_in_use(conn)? <= self.drop_above {
            return Ok(0);
        }
        let mut dropped = 0;
        while dropped < ROOM_ROWS_PER_BATCH {
            let oldest = conn
                .prepare_cached(OLDEST_ENDED)
                .and_then(|mut st| {
                    st.query_map(params![ROOM_CHUNK], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, i64>(2)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(unavailable)?;
            if oldest.is_empty() {
                break;
            }
            for (row, message_key, message_until) in &oldest {
                if let Some(key) = message_key.as_ref().filter(|_| *message_until > now) {
                    claim_dedupe(conn, cfg, &ReplayClaim::new("", key.clone(), *message_until), now)?;
                }
                conn.prepare_cached("DELETE FROM task_rows WHERE row = ?1")
                    .and_then(|mut st| st.execute(params![row]))
                    .map_err(unavailable)?;
            }
            dropped += oldest.len();
            if pages_in_use(conn)? <= self.drop_to {
                break;
            }
        }
        Ok(dropped)
    }
}

/// The database's pages in use: the pager's count less the free list's (both kept, neither counted by a scan).
pub(super) fn pages_in_use(conn: &Connection) -> Result<u64, StoreError> {
    let used: i64 = conn
        .prepare_cached("SELECT page_count - freelist_count FROM pragma_page_count(), pragma_freelist_count()")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(unavailable)?;
    Ok(used.unsigned_abs())
}
