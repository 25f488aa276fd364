//! Behaviour of the in-memory backend beyond the conformance kit.

use std::sync::Arc;
use std::time::Duration;

use tenure_memory::{ManualClock, MemoryEventStorage};
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
