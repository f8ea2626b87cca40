#![allow(clippy::unwrap_used)]

use super::{
    Connection, EXPIRED_OF_PRINCIPAL, EXPIRED_SHARES, ROOM_CHECK_EVERY, ROOM_CHECK_MOST, ROOM_RESULT_BYTES, Room,
    SCHEMA, SWEEP_DELETES,
};
use crate::MIN_BOUND_BYTES;

/// Between two reads of the pages in use, the file may grow by as many results as operations run: the eighth
/// between the drop mark and the bound holds them at [`ROOM_RESULT_BYTES`] each for every bound, and the default
/// bound holds them at a megabyte each.
#[test]
fn the_pages_in_use_are_read_before_the_bound_can_be_reached() {
    let default_bound = crate::StoreConfig::new("x").sqlite_max_bytes;
    for max_bytes in [MIN_BOUND_BYTES, 4 << 20, 64 << 20, 1 << 30, default_bound] {
        let conn = Connection::open_in_memory().unwrap();
        let room = Room::new(&conn, max_bytes).unwrap();
        let page = conn.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0)).unwrap().unsigned_abs();
        let eighth = (max_bytes / page - room.drop_above) * page;
        assert!((ROOM_CHECK_EVERY..=ROOM_CHECK_MOST).contains(&room.check_every), "{max_bytes}");
        assert!(room.check_every * ROOM_RESULT_BYTES <= eighth, "{max_bytes}: every {}", room.check_every);
        if max_bytes == default_bound {
            assert_eq!(room.check_every, ROOM_CHECK_MOST);
            assert!(room.check_every << 20 <= eighth, "the default bound holds a megabyte per operation");
        }
    }
}

/// Each step of a query plan (`EXPLAIN QUERY PLAN`), with zeros for its parameters.
fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let params = vec![0_i64; plan.parameter_count()];
    plan.query_map(rusqlite::params_from_iter(params), |r| r.get(3)).unwrap().map(Result::unwrap).collect()
}

/// Keeping the replay window's counts as entries expire reads what expired, through an index, never every entry
/// nor every share: a principal's share used to be counted with a `COUNT(*)` over its entries on every signed
/// message, which one principal holding many entries turned into seconds of the one writer's time.
#[test]
fn the_replay_counts_read_only_expired_entries() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    for sql in EXPIRED_SHARES.iter().chain(&EXPIRED_OF_PRINCIPAL) {
        let steps = plan(&conn, sql);
        assert!(!steps.is_empty(), "{sql}: no plan");
        assert!(steps.iter().any(|step| step.starts_with("SEARCH ")), "{sql}: {steps:?}");
        assert!(!steps.iter().any(|step| step.starts_with("SCAN")), "{sql}: {steps:?}");
    }
}

/// Each delete of the sweep reads a range of an index, never the whole table: a scan's cost would grow with every
/// row the file holds, every `SWEEP_EVERY` operations.
#[test]
fn the_sweep_reads_only_expired_rows() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    for delete in SWEEP_DELETES {
        let steps = plan(&conn, delete);
        assert!(!steps.is_empty(), "{delete}: no plan");
        for step in &steps {
            assert!(step.starts_with("SEARCH ") && step.contains("_expiry"), "{delete}: {steps:?}");
        }
    }
}
