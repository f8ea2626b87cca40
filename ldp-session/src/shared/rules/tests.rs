use ldp_types::{PayloadMode, codes};

use super::*;

fn running(owner: &str) -> SharedTask {
    SharedTask::running(owner, PayloadMode::Text)
}

fn with_status(status: SharedTaskStatus) -> SharedTask {
    let mut task = running("a");
    task.status = status;
    task
}

fn session(ttl_secs: u64) -> SharedSession {
    SharedSession {
        session_id: "s".into(),
        peer: "ldp:delegate:peer".into(),
        owner: None,
        quota: None,
        peer_delegate: None,
        peer_domain: "default".into(),
        mode: PayloadMode::Text,
        fallback: Vec::new(),
        ttl_secs,
    }
}

#[test]
fn a_task_id_is_free_when_failed_absent_or_lapsed() {
    use SharedTaskStatus::{Completed, Failed, Running};
    assert!(claimable_record(None, false));
    assert!(!claimable_record(None, true), "a lease with no record still holds the id");
    assert!(claimable_record(Some(&with_status(Failed)), true));
    assert!(!claimable_record(Some(&with_status(Completed)), false));
    assert!(!claimable_record(Some(&with_status(Running)), true));
    assert!(claimable_record(Some(&with_status(Running)), false));
}

#[test]
fn only_a_lapsed_running_task_is_failed_and_only_a_leased_one_cancelled() {
    let task = running("a");
    let failed = lapsed(&task, false).unwrap();
    assert_eq!(failed.status, SharedTaskStatus::Failed);
    assert_eq!(failed.error.as_ref().map(|e| (e.code.as_str(), e.retryable)), Some((codes::TASK_LEASE_EXPIRED, true)));
    assert_eq!(lapsed(&task, true), None);
    assert_eq!(lapsed(&with_status(SharedTaskStatus::Completed), false), None);
    let stopped = cancelled(&task, true).unwrap();
    assert_eq!(stopped.error.as_ref().map(|e| (e.code.as_str(), e.retryable)), Some((codes::CANCELLED, false)));
    assert_eq!(cancelled(&task, false), None, "a lapsed lease is not cancelled: its owner is gone");
    assert_eq!(cancelled(&with_status(SharedTaskStatus::Failed), true), None);
}

#[test]
fn an_end_keeps_the_claiming_message_and_is_refused_over_another_record() {
    let entry = ReplayClaim::new("", "m", 500);
    let held = running("a").with_message(Some(&entry));
    let mut end = with_status(SharedTaskStatus::Completed);
    end.message_key = Some("other".into());
    let written = ended(Some(&held), &end).unwrap();
    assert_eq!((written.message_key.as_deref(), written.message_until_ms), (Some("m"), 500));
    let written = ended(None, &end).unwrap();
    assert_eq!((written.message_key, written.message_until_ms), (None, 0));
    let taken = running("b");
    assert_eq!(ended(Some(&taken), &end), Err(taken.clone()));
    assert_eq!(ended(Some(&held.cancelled()), &end), Err(held.cancelled()));
}

#[test]
fn dedupe_entries_outlive_the_records_that_stood_for_them() {
    let old = running("a").with_message(Some(&ReplayClaim::new("", "old", 900)));
    let new = running("b").with_message(Some(&ReplayClaim::new("", "new", 700)));
    assert_eq!(outlived(&old, &new, 100).map(|e| (e.key, e.expires_at_ms)), Some(("old".into(), 900)));
    assert_eq!(outlived(&old, &new, 900), None, "expired: nothing to keep");
    assert_eq!(outlived(&old, &old, 100), None, "the same message: the new record stands for it");
    assert_eq!(outliving(&new, 600).map(|e| e.expires_at_ms), Some(700));
    assert_eq!(outliving(&new, 700), None);
}

#[test]
fn a_session_restarts_its_ttl_written_ahead_by_a_tenth_at_most_a_second() {
    // TTL 5 s: due at now + 5 s, written 0.5 s ahead; already that far ahead: nothing written.
    assert_eq!(session_renewal(0, 5, 1_000), Some(6_500));
    assert_eq!(session_renewal(6_500, 5, 1_200), None);
    assert_eq!(session_renewal(6_500, 5, 1_600), Some(7_100));
    // TTL an hour: a second ahead at most.
    assert_eq!(session_renewal(0, 3_600, 0), Some(3_601_000));
}

#[test]
fn a_session_row_is_live_expired_closed_or_unknown() {
    let keeping = Keeping::new(Duration::from_millis(100), Duration::from_secs(1));
    let live = SessionRow::new(Some(session(5)), 1_000, SessionUsage::default());
    assert_eq!(session_lookup(Some(&live), 999, keeping), SessionLookup::Live(session(5)));
    assert_eq!(session_lookup(Some(&live), 1_000, keeping), SessionLookup::Expired);
    assert_eq!(session_lookup(Some(&live), 1_100, keeping), SessionLookup::Unknown);
    let closed = SessionRow::new(None, 1_000, SessionUsage::default());
    assert_eq!(session_lookup(Some(&closed), 999, keeping), SessionLookup::Closed);
    assert_eq!(session_lookup(Some(&closed), 1_000, keeping), SessionLookup::Unknown);
    assert_eq!(session_lookup(None, 0, keeping), SessionLookup::Unknown);
}

#[test]
fn the_task_limit_counts_admitted_tasks() {
    assert!(!at_task_limit(SessionUsage::new(5, 0, 0.0), None));
    assert!(!at_task_limit(SessionUsage::new(1, 0, 0.0), Some(2)));
    assert!(at_task_limit(SessionUsage::new(2, 0, 0.0), Some(2)));
}
