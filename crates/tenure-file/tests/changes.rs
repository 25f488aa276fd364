//! Lease changes on the file backend: in-process wake-ups, as in memory (whose code it shares).
//!
//! A release by the holder, a new tenure and a step-down request are announced to every
//! subscription; a plain renewal is not; a subscriber that fell behind is told it missed
//! changes. Through a `LeaderElector`, a release wakes a standby and a step-down request
//! reaches the holder without their polls: the electors poll every 200 s (a 600 s ttl), far
//! beyond the tests' patience (5 s), so that only a wake-up can pass them. Patience is a bound
//! on a wake-up that never comes, not a speed target.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_file::FileEventStorage;
use tenure_ports::{
    Capability, EventStorage, EventStorageError, LeaseChange, LeaseChangeKind, LeaseChanges,
    LeaseName, LeaseRequest, LeaseStatus,
};
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(5);
const LONG_TTL: Duration = Duration::from_secs(600);
const LEASE: &str = "jobs";

fn open() -> (tempfile::TempDir, FileEventStorage) {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path().join("events.log")).unwrap();
    (dir, storage)
}

fn changed(lease: &str, kind: LeaseChangeKind) -> LeaseChange {
    LeaseChange::Changed {
        lease_name: LeaseName::new(lease).unwrap(),
        kind,
    }
}

async fn request(storage: &FileEventStorage, owner: &str, priority: i64) -> LeaseStatus {
    storage
        .request_lease(&LeaseRequest::new(LEASE, owner, priority, LONG_TTL))
        .await
        .unwrap()
        .status
}

/// The next change, within the patience.
async fn next(changes: &mut dyn LeaseChanges) -> LeaseChange {
    timeout(PATIENCE, changes.next())
        .await
        .expect("a change within the patience")
        .expect("the subscription is open")
}

/// Whether a change is waiting, without waiting for one (memory and file deliver in the call).
async fn pending(changes: &mut dyn LeaseChanges) -> Option<LeaseChange> {
    timeout(Duration::from_millis(50), changes.next())
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn the_capability_is_listed_and_a_subscription_is_given() {
    let (_dir, storage) = open();
    assert!(storage.capabilities().contains(Capability::LeaseChanges));
    assert!(storage.lease_changes().is_ok());
    storage.close().await.unwrap();
    assert!(matches!(
        storage.lease_changes(),
        Err(EventStorageError::Closed)
    ));
}

#[tokio::test]
async fn acquisitions_releases_and_step_down_requests_are_announced_renewals_are_not() {
    let (_dir, storage) = open();
    let mut changes = storage.lease_changes().unwrap();
    assert_eq!(request(&storage, "a", 0).await, LeaseStatus::Leader);
    assert_eq!(
        next(changes.as_mut()).await,
        changed(LEASE, LeaseChangeKind::Acquired)
    );

    // Renewals, and a standby of equal priority asking again and again: nothing.
    for _ in 0..5 {
        assert_eq!(request(&storage, "a", 0).await, LeaseStatus::Leader);
        assert_eq!(request(&storage, "b", 0).await, LeaseStatus::Standby);
    }
    assert_eq!(pending(changes.as_mut()).await, None);

    // A higher-priority contender registers: once, not at each of its requests.
    assert_eq!(request(&storage, "c", 5).await, LeaseStatus::Standby);
    assert_eq!(
        next(changes.as_mut()).await,
        changed(LEASE, LeaseChangeKind::StepDownRequested)
    );
    assert_eq!(request(&storage, "c", 5).await, LeaseStatus::Standby);
    assert_eq!(
        request(&storage, "a", 0).await,
        LeaseStatus::LeaderStepDownRequested
    );
    assert_eq!(pending(changes.as_mut()).await, None);

    // The holder releases; the contender acquires.
    storage.release_lease(LEASE, "a").await.unwrap();
    assert_eq!(
        next(changes.as_mut()).await,
        changed(LEASE, LeaseChangeKind::Released)
    );
    assert_eq!(pending(changes.as_mut()).await, None);
    assert_eq!(request(&storage, "c", 5).await, LeaseStatus::Leader);
    assert_eq!(
        next(changes.as_mut()).await,
        changed(LEASE, LeaseChangeKind::Acquired)
    );

    // A release by a contender that does not hold the lease is no release of it.
    storage.release_lease(LEASE, "b").await.unwrap();
    assert_eq!(pending(changes.as_mut()).await, None);
}

#[tokio::test]
async fn a_lagging_subscriber_is_told_it_missed_changes() {
    let (_dir, storage) = open();
    let mut changes = storage.lease_changes().unwrap();
    // 1,100 handovers: 2,200 changes, more than the 1,024 a subscription buffers.
    for n in 0..1_100 {
        let owner = if n % 2 == 0 { "a" } else { "b" };
        assert!(request(&storage, owner, 0).await.holds_lease());
        storage.release_lease(LEASE, owner).await.unwrap();
    }
    assert_eq!(next(changes.as_mut()).await, LeaseChange::Missed);
    let lease = LeaseName::new(LEASE).unwrap();
    assert!(LeaseChange::Missed.wakes(&lease));
    // The subscription goes on with what it still holds, then with new changes.
    let mut last = LeaseChange::Missed;
    while let Some(change) = pending(changes.as_mut()).await {
        last = change;
    }
    assert_eq!(last, changed(LEASE, LeaseChangeKind::Released));
    assert_eq!(request(&storage, "c", 0).await, LeaseStatus::Leader);
    assert_eq!(
        next(changes.as_mut()).await,
        changed(LEASE, LeaseChangeKind::Acquired)
    );
}

fn elector(storage: &Arc<dyn EventStorage>, owner: &str, priority: i64) -> LeaderElector {
    let config = ElectorConfig::new(LEASE, LONG_TTL)
        .with_owner(owner)
        .with_priority(priority);
    LeaderElector::start(storage.clone(), config).unwrap()
}

async fn until(elector: &LeaderElector, wanted: impl Fn(&LeadershipState) -> bool) -> bool {
    let mut state = elector.subscribe();
    timeout(PATIENCE, state.wait_for(|s| wanted(s)))
        .await
        .is_ok()
}

#[tokio::test]
async fn a_release_wakes_a_standby_elector_without_waiting_for_its_poll() {
    let (_dir, storage) = open();
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let a = elector(&storage, "a", 0);
    assert!(until(&a, LeadershipState::is_leader).await);
    let b = elector(&storage, "b", 0);
    assert!(until(&b, |s| matches!(s, LeadershipState::Standby { .. })).await);
    a.shutdown().await.unwrap();
    assert!(
        until(&b, LeadershipState::is_leader).await,
        "the standby was not woken by the release"
    );
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_step_down_request_reaches_the_holding_elector_without_waiting_for_its_poll() {
    let (_dir, storage) = open();
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let a = elector(&storage, "a", 0);
    assert!(until(&a, LeadershipState::is_leader).await);
    // The holder's unit of work ends as soon as a step-down is requested; the elector then
    // releases, which wakes the contender in turn.
    let holder = a.clone();
    let work = tokio::spawn(async move {
        holder
            .run_while_leader(|lease| async move { lease.step_down_requested().await })
            .await
    });
    let b = elector(&storage, "b", 10);
    assert!(
        until(&b, LeadershipState::is_leader).await,
        "the planned handover waited for a poll"
    );
    work.abort();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
