//! What survives closing and reopening a log: events, bookmarks and idempotency keys do,
//! leases and contenders do not (but each lease's highest issued token does), and positions
//! continue where they stopped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tenure_file::{Durability, FileEventStorage, FileOptions};
use tenure_ports::{
    AppendRequest, EventPosition, EventQuery, EventStorage, EventStorageError, LeaseRequest,
    LeaseStatus, ManualClock, NewEvent, ReadOptions, StoredEvent,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn pos(n: u64) -> EventPosition {
    EventPosition::new(n).unwrap()
}

fn event(stream: &str, n: u64) -> NewEvent {
    NewEvent::new(
        stream,
        "Counted",
        json!({ "n": n, "nested": { "list": [n, null, "text"] } }),
    )
    .tagged("b")
    .tagged("a")
    .tagged("a")
}

async fn all(storage: &impl EventStorage) -> Vec<StoredEvent> {
    storage
        .read_events(
            &EventQuery::all(),
            ReadOptions::forwards().with_limit(10_000),
        )
        .await
        .unwrap()
}

fn open(path: &Path, clock: &ManualClock) -> FileEventStorage {
    FileEventStorage::open_with(path, FileOptions::new().clock(clock.clone())).unwrap()
}

#[test]
fn events_bookmarks_and_idempotency_keys_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.log");
    let clock = ManualClock::new();
    let rt = runtime();
    let (events, first_batch, bookmarks) = rt.block_on(async {
        let storage = open(&path, &clock);
        assert!(storage.recovery().created);
        let keyed = AppendRequest::new(vec![event("s-1", 1), event("s-1", 2), event("s-2", 3)])
            .idempotent("batch-1");
        let first_batch = storage.append(&keyed).await.unwrap();
        clock.advance(Duration::from_secs(1));
        storage
            .append(&AppendRequest::new(vec![event("s-2", 4), event("s-3", 5)]))
            .await
            .unwrap();
        storage
            .bookmark("reader-1", pos(2), &["x".into()])
            .await
            .unwrap();
        storage.bookmark("reader-2", pos(5), &[]).await.unwrap();
        storage.remove_bookmark("reader-2").await.unwrap();
        clock.advance(Duration::from_secs(1));
        storage
            .bookmark("reader-1", pos(4), &["y".into(), "x".into()])
            .await
            .unwrap();
        storage.bookmark("reader-3", pos(1), &[]).await.unwrap();
        let events = all(&storage).await;
        let bookmarks = storage.get_bookmarks().await.unwrap();
        storage.close().await.unwrap();
        (events, first_batch, bookmarks)
    });
    assert_eq!(events.len(), 5);

    rt.block_on(async {
        let storage = open(&path, &clock);
        let report = storage.recovery();
        assert!(!report.created);
        assert_eq!((report.records, report.events), (7, 5));
        assert_eq!(report.cut, None);
        assert_eq!(all(&storage).await, events, "ids, payloads, tags and times survive");
        assert_eq!(storage.get_bookmarks().await.unwrap(), bookmarks);
        assert_eq!(storage.get_bookmark("reader-2").await.unwrap(), None);

        let again = AppendRequest::new(vec![event("other", 99)]).idempotent("batch-1");
        assert_eq!(
            storage.append(&again).await.unwrap(),
            first_batch,
            "a key stored before the restart replays its first events"
        );
        let next = storage
            .append(&AppendRequest::new(vec![event("s-9", 6)]))
            .await
            .unwrap();
        assert_eq!(next[0].position, pos(6), "positions continue");
        let conflict = storage
            .append(
                &AppendRequest::new(vec![event("s-1", 7)])
                    .on_condition(EventQuery::stream("s-1"), Some(pos(1))),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(conflict, EventStorageError::AppendConflict { conflicting } if conflicting == pos(2)),
            "conditions see the events from before the restart: {conflict:?}"
        );
        storage.close().await.unwrap();
    });

    rt.block_on(async {
        let storage = open(&path, &clock);
        assert_eq!(all(&storage).await.len(), 6);
    });
}

#[test]
fn leases_are_not_persisted_but_tokens_continue_above_the_highest_issued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.log");
    let clock = ManualClock::new();
    let rt = runtime();
    let ttl = Duration::from_secs(30);
    rt.block_on(async {
        let storage = open(&path, &clock);
        let a = storage
            .request_lease(&LeaseRequest::new("jobs", "a", 0, ttl))
            .await
            .unwrap();
        assert_eq!(a.status, LeaseStatus::Leader);
        clock.advance(ttl);
        let b = storage
            .request_lease(&LeaseRequest::new("jobs", "b", 5, ttl))
            .await
            .unwrap();
        assert_eq!(b.fencing_token.get(), 2);
        storage
            .request_lease(&LeaseRequest::new("jobs", "c", 9, ttl))
            .await
            .unwrap();
        storage
            .append(&AppendRequest::new(vec![event("s", 1)]))
            .await
            .unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        for _ in 0..5 {
            let renewed = storage
                .request_lease(&LeaseRequest::new("jobs", "b", 5, ttl))
                .await
                .unwrap();
            assert_eq!(renewed.fencing_token.get(), 2);
        }
        storage
            .request_lease(&LeaseRequest::new("jobs", "c", 9, ttl))
            .await
            .unwrap();
        storage.release_lease("jobs", "c").await.unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            before,
            "renewals, standby requests and releases never write the file"
        );
        storage
            .request_lease(&LeaseRequest::new("other", "a", 0, ttl))
            .await
            .unwrap();
        assert!(
            std::fs::metadata(&path).unwrap().len() > before,
            "an acquisition writes its token"
        );
        storage.close().await.unwrap();
    });
    rt.block_on(async {
        let storage = open(&path, &clock);
        let snapshot = storage.get_leases().await.unwrap();
        assert_eq!(snapshot.leases.len(), 2, "{snapshot:?}");
        for lease in &snapshot.leases {
            assert!(
                !lease.is_live_at(snapshot.now) && lease.is_released(),
                "after reopening no lease is held: {lease:?}"
            );
        }
        assert!(
            storage
                .get_lease_contenders("jobs")
                .await
                .unwrap()
                .is_empty()
        );
        let c = storage
            .request_lease(&LeaseRequest::new("jobs", "c", 9, ttl))
            .await
            .unwrap();
        assert_eq!(
            c.status,
            LeaseStatus::Leader,
            "b's live lease did not survive"
        );
        assert_eq!(
            c.fencing_token.get(),
            3,
            "the next acquisition continues above the highest token issued (b's 2)"
        );
        let other = storage
            .request_lease(&LeaseRequest::new("other", "a", 0, ttl))
            .await
            .unwrap();
        assert_eq!(
            other.fencing_token.get(),
            2,
            "the same owner's restart is a new tenure"
        );
        assert_eq!(all(&storage).await.len(), 1, "the events did survive");
        storage.close().await.unwrap();
    });
    // And again: each reopening starts above what the one before issued.
    rt.block_on(async {
        let storage = open(&path, &clock);
        let d = storage
            .request_lease(&LeaseRequest::new("jobs", "d", 0, ttl))
            .await
            .unwrap();
        assert_eq!(d.fencing_token.get(), 4);
    });
}

#[test]
fn dropping_without_close_keeps_everything_in_both_durability_modes() {
    for durability in [Durability::Fsync, Durability::NoFsync] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drop.log");
        let rt = runtime();
        for round in 1..=3u64 {
            rt.block_on(async {
                let storage =
                    FileEventStorage::open_with(&path, FileOptions::new().durability(durability))
                        .unwrap();
                assert_eq!(storage.durability(), durability);
                assert_eq!(all(&storage).await.len() as u64, (round - 1) * 2);
                let stored = storage
                    .append(&AppendRequest::new(vec![
                        event("s", round),
                        event("s", round),
                    ]))
                    .await
                    .unwrap();
                assert_eq!(stored[1].position, pos(round * 2));
                storage
                    .bookmark("r", stored[1].position, &[])
                    .await
                    .unwrap();
                // Dropped, not closed: the lock goes with the last handle.
            });
        }
        rt.block_on(async {
            let storage = FileEventStorage::open(&path).unwrap();
            assert_eq!(all(&storage).await.len(), 6, "{durability:?}");
            assert_eq!(
                storage.get_bookmark("r").await.unwrap().unwrap().position,
                pos(6)
            );
        });
    }
}

#[test]
fn close_refuses_calls_on_every_clone_and_releases_the_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("close.log");
    runtime().block_on(async {
        let storage = FileEventStorage::open(&path).unwrap();
        let clone = storage.clone();
        storage
            .append(&AppendRequest::new(vec![event("s", 1)]))
            .await
            .unwrap();
        storage.close().await.unwrap();
        assert!(matches!(
            clone.append(&AppendRequest::new(vec![event("s", 2)])).await,
            Err(EventStorageError::Closed)
        ));
        assert!(matches!(
            clone
                .read_events(&EventQuery::all(), ReadOptions::forwards())
                .await,
            Err(EventStorageError::Closed)
        ));
        assert!(matches!(
            clone.bookmark("r", pos(1), &[]).await,
            Err(EventStorageError::Closed)
        ));
        clone.close().await.unwrap();
        storage.close().await.unwrap();

        // The clone is still alive, but the file is released.
        let reopened = FileEventStorage::open(&path).unwrap();
        assert_eq!(all(&reopened).await.len(), 1);
        drop(clone);
    });
}

#[test]
fn concurrent_appends_from_many_tasks_all_survive_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("concurrent.log");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let written = rt.block_on(async {
        let storage =
            FileEventStorage::open_with(&path, FileOptions::new().durability(Durability::NoFsync))
                .unwrap();
        let mut tasks = Vec::new();
        for writer in 0..4u64 {
            let storage = storage.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..50u64 {
                    storage
                        .append(&AppendRequest::new(vec![event(&format!("w-{writer}"), n)]))
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let events = all(&storage).await;
        storage.close().await.unwrap();
        events
    });
    assert_eq!(written.len(), 200);
    rt.block_on(async {
        let storage = FileEventStorage::open(&path).unwrap();
        assert_eq!(all(&storage).await, written);
    });
}

/// A payload at the deepest nesting validation accepts survives a reopen (the record that holds
/// it nests it a few levels deeper still), and one level deeper is refused before anything is
/// written, so that no acknowledged event can make the file unreadable.
#[test]
fn the_deepest_payload_validation_accepts_survives_a_reopen() {
    let nested = |depth: usize| (0..depth).fold(json!(0), |inner, _| json!({ "k": [inner] }));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.log");
    let clock = ManualClock::new();
    let rt = runtime();
    let deepest = nested(tenure_ports::MAX_PAYLOAD_DEPTH / 2);
    rt.block_on(async {
        let storage = open(&path, &clock);
        let empty = storage.file_len();
        let too_deep = nested(tenure_ports::MAX_PAYLOAD_DEPTH / 2 + 1);
        let refused = storage
            .append(&AppendRequest::new(vec![NewEvent::new("s", "T", too_deep)]))
            .await;
        assert!(
            matches!(refused, Err(EventStorageError::InvalidRequest(_))),
            "{refused:?}"
        );
        assert_eq!(storage.file_len(), empty, "a refused append writes nothing");
        storage
            .append(&AppendRequest::new(vec![NewEvent::new(
                "s",
                "T",
                deepest.clone(),
            )]))
            .await
            .unwrap();
        assert!(storage.file_len() > empty);
        storage.close().await.unwrap();
    });
    rt.block_on(async {
        let storage = open(&path, &clock);
        let events = all(&storage).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload, deepest);
    });
}

#[test]
fn a_readers_fence_survives_a_reopen() {
    use tenure_ports::{Fence, FencingToken, LeaseName};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fenced.log");
    let clock = ManualClock::new();
    let rt = runtime();
    let fence = |token: u64| {
        Fence::new(
            LeaseName::new("never-acquired").unwrap(),
            FencingToken::new(token).unwrap(),
        )
    };
    rt.block_on(async {
        let storage = open(&path, &clock);
        storage
            .append(&AppendRequest::new(vec![event("s", 1), event("s", 2)]))
            .await
            .unwrap();
        storage
            .bookmark_fenced("projection", pos(2), &[], &fence(2))
            .await
            .unwrap();
        storage.close().await.unwrap();
    });
    rt.block_on(async {
        let storage = open(&path, &clock);
        let refused = storage
            .bookmark_fenced("projection", pos(1), &[], &fence(1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                refused,
                EventStorageError::Fenced {
                    token: 1,
                    newer: 2,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(
            storage
                .get_bookmark("projection")
                .await
                .unwrap()
                .unwrap()
                .position,
            pos(2)
        );
        storage
            .bookmark_fenced("projection", pos(1), &[], &fence(3))
            .await
            .unwrap();
    });
}
