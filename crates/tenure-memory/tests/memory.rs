//! Behaviour of the in-memory backend beyond the conformance kit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_memory::MemoryEventStorage;
use tenure_ports::ManualClock;
use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};

fn storage() -> (MemoryEventStorage, ManualClock) {
    let clock = ManualClock::new();
    (
        MemoryEventStorage::with_clock(Arc::new(clock.clone())),
        clock,
    )
}

#[tokio::test]
async fn clones_share_one_state_and_one_close() {
    let (storage, _) = storage();
    let other = storage.clone();
    let ttl = Duration::from_secs(10);
    let a = storage
        .request_lease(&LeaseRequest::new("l", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(a.status, LeaseStatus::Leader);
    let b = other
        .request_lease(&LeaseRequest::new("l", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(b.status, LeaseStatus::Standby);
    other.close().await.unwrap();
    assert!(matches!(
        storage.get_leases().await,
        Err(tenure_ports::EventStorageError::Closed)
    ));
}

#[tokio::test]
async fn vanished_contenders_are_pruned_from_storage() {
    let (storage, clock) = storage();
    let ttl = Duration::from_secs(1);
    for n in 0..1000 {
        storage
            .request_lease(&LeaseRequest::new("l", format!("o{n}"), 0, ttl))
            .await
            .unwrap();
    }
    assert_eq!(storage.contender_registrations().unwrap(), 1000);
    clock.advance(ttl);
    storage
        .request_lease(&LeaseRequest::new("l", "last", 0, ttl))
        .await
        .unwrap();
    assert_eq!(storage.contender_registrations().unwrap(), 1);
    storage.release_lease("l", "last").await.unwrap();
    assert_eq!(storage.contender_registrations().unwrap(), 0);
}

#[test]
fn os_threads_contend_for_real() {
    let (storage, _) = storage();
    let ttl = Duration::from_secs(60);
    let threads: Vec<_> = (0..8)
        .map(|n| {
            let storage = storage.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                (0..100)
                    .filter(|_| {
                        rt.block_on(storage.request_lease(&LeaseRequest::new(
                            "l",
                            format!("t{n}"),
                            0,
                            ttl,
                        )))
                        .unwrap()
                        .status
                        .holds_lease()
                    })
                    .count()
            })
        })
        .collect();
    let wins: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // Exactly one thread won, and it kept winning.
    assert_eq!(wins.iter().filter(|&&w| w > 0).count(), 1, "{wins:?}");
    assert_eq!(wins.iter().sum::<usize>(), 100);
}

mod journal {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;
    use tenure_memory::{Change, EventLog, Journal};
    use tenure_ports::{
        AppendRequest, EventQuery, EventStorageError, LeaseRequest, NewEvent, ReadOptions,
    };

    /// Records what it is asked to, or fails when told to.
    #[derive(Debug, Clone, Default)]
    struct Recorder {
        changes: Arc<Mutex<Vec<String>>>,
        fail: Arc<Mutex<bool>>,
    }

    impl Journal for Recorder {
        fn record(&mut self, change: Change<'_>) -> Result<(), EventStorageError> {
            if *self.fail.lock().unwrap() {
                return Err(EventStorageError::io("disk full"));
            }
            let line = match change {
                Change::Appended { events, .. } => format!("appended {}", events.len()),
                Change::BookmarkPlaced(b) => format!("bookmark {} at {}", b.reader, b.position),
                Change::BookmarkFenced { bookmark, token } => {
                    format!(
                        "bookmark {} at {} under {token}",
                        bookmark.reader, bookmark.position
                    )
                }
                Change::BookmarkRemoved(r) => format!("removed {r}"),
                Change::TokenIssued {
                    lease_name,
                    owner,
                    token,
                } => format!("token {token} of {lease_name} to {owner}"),
            };
            self.changes.lock().unwrap().push(line);
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_change_is_journaled_first_and_a_failed_journal_applies_nothing() {
        let recorder = Recorder::default();
        let storage = MemoryEventStorage::with_journal(
            Arc::new(ManualClock::new()),
            EventLog::new(),
            Box::new(recorder.clone()),
        );
        let event = || NewEvent::new("s", "T", json!({}));
        let stored = storage
            .append(&AppendRequest::new(vec![event(), event()]))
            .await
            .unwrap();
        storage
            .bookmark("r", stored[1].position, &[])
            .await
            .unwrap();
        storage.remove_bookmark("r").await.unwrap();
        storage.remove_bookmark("r").await.unwrap(); // nothing to remove: nothing journaled
        assert_eq!(
            *recorder.changes.lock().unwrap(),
            vec!["appended 2", "bookmark r at 2", "removed r"]
        );

        *recorder.fail.lock().unwrap() = true;
        let err = storage
            .append(&AppendRequest::new(vec![event()]))
            .await
            .unwrap_err();
        assert!(matches!(err, EventStorageError::Io { .. }), "{err:?}");
        assert!(
            storage
                .bookmark("r", stored[0].position, &[])
                .await
                .is_err()
        );
        let all = storage
            .read_events(&EventQuery::all(), ReadOptions::forwards())
            .await
            .unwrap();
        assert_eq!(all.len(), 2);
        assert!(storage.get_bookmark("r").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn acquisitions_journal_their_token_renewals_do_not_and_a_failed_journal_grants_nothing()
    {
        let recorder = Recorder::default();
        let clock = ManualClock::new();
        let storage = MemoryEventStorage::with_journal(
            Arc::new(clock.clone()),
            EventLog::new(),
            Box::new(recorder.clone()),
        );
        let ttl = std::time::Duration::from_secs(1);
        let ask = |owner: &str| LeaseRequest::new("jobs", owner, 0, ttl);
        storage.request_lease(&ask("a")).await.unwrap();
        storage.request_lease(&ask("a")).await.unwrap(); // a renewal
        storage.request_lease(&ask("b")).await.unwrap(); // a standby
        storage.release_lease("jobs", "a").await.unwrap();
        let b = storage.request_lease(&ask("b")).await.unwrap(); // taken after the release
        assert_eq!(b.fencing_token.get(), 2);
        assert_eq!(
            *recorder.changes.lock().unwrap(),
            vec!["token 1 of jobs to a", "token 2 of jobs to b"]
        );

        clock.advance(ttl);
        *recorder.fail.lock().unwrap() = true;
        let err = storage.request_lease(&ask("c")).await.unwrap_err();
        assert!(matches!(err, EventStorageError::Io { .. }), "{err:?}");
        let snapshot = storage.get_leases().await.unwrap();
        assert_eq!(
            snapshot.leases[0].owner.as_str(),
            "b",
            "nothing was granted"
        );
        assert_eq!(snapshot.leases[0].fencing_token.get(), 2);
    }

    #[test]
    fn replay_rejects_changes_that_cannot_follow() {
        let mut log = EventLog::new();
        let stored = log
            .append(
                &AppendRequest::new(vec![NewEvent::new("s", "T", json!(1))]),
                tenure_ports::Timestamp::UNIX_EPOCH,
                None,
            )
            .unwrap();
        let err = log
            .apply(Change::Appended {
                events: &stored,
                idempotency_key: None,
            })
            .unwrap_err();
        assert!(matches!(err, EventStorageError::Corrupt { .. }), "{err:?}");
        assert_eq!(log.len(), 1);
        let err = log.apply_appended(stored.clone(), None).unwrap_err();
        assert!(matches!(err, EventStorageError::Corrupt { .. }), "{err:?}");
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn owned_replay_moves_events_in_and_keeps_the_key() {
        let mut source = EventLog::new();
        let request = AppendRequest::new(vec![NewEvent::new("s", "T", json!(1))]).idempotent("k");
        let stored = source
            .append(&request, tenure_ports::Timestamp::UNIX_EPOCH, None)
            .unwrap();
        let mut replayed = EventLog::new();
        replayed.apply_appended(stored.clone(), Some("k")).unwrap();
        assert_eq!(
            replayed
                .append(&request, tenure_ports::Timestamp::UNIX_EPOCH, None)
                .unwrap(),
            stored,
            "the key replays the first append"
        );
        assert_eq!(replayed.len(), 1);
    }
}
