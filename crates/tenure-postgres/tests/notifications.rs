//! Wake-ups (issue 15): the storage's lease changes, from LISTEN/NOTIFY, on each driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::{builder, fresh_prefix};
use tenure_ports::{
    Capability, EventStorage, LeaseChange, LeaseChangeKind, LeaseChanges, LeaseName, LeaseRequest,
};

/// Far below any poll interval; only a bound on a wait that normally takes milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);

/// A subscription, taken after `build` (whose listener is then connected).
async fn listening(storage: &dyn EventStorage) -> Box<dyn LeaseChanges> {
    // `build` returned once the listener listened: a subscription hears every later change
    // at once, with no `Missed` first.
    storage.lease_changes().unwrap()
}

/// Waits for `kind` on `lease`, skipping other changes.
async fn expect(changes: &mut Box<dyn LeaseChanges>, lease: &str, kind: LeaseChangeKind) {
    let wanted = LeaseChange::Changed {
        lease_name: LeaseName::new(lease).unwrap(),
        kind,
    };
    tokio::time::timeout(PATIENCE, async {
        loop {
            if changes.next().await.unwrap() == wanted {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {wanted:?} within {PATIENCE:?}"));
}

on_each_driver! {
#[tokio::test]
async fn release_takeover_and_step_down_are_notified_and_creations_and_renewals_are_not(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard).build().await.unwrap();
    assert!(storage.capabilities().contains(Capability::LeaseChanges));
    let mut changes = listening(&storage).await;
    let ttl = Duration::from_secs(300);
    // The lease's first tenure (migration 0010), renewals, and a standby refreshing its
    // registration as it was: nothing.
    storage.request_lease(&LeaseRequest::new("l", "a", 0, ttl)).await.unwrap();
    storage.request_lease(&LeaseRequest::new("l", "low", -1, ttl)).await.unwrap();
    for _ in 0..20 {
        storage.request_lease(&LeaseRequest::new("l", "a", 0, ttl)).await.unwrap();
        storage.request_lease(&LeaseRequest::new("l", "low", -1, ttl)).await.unwrap();
    }
    // A higher-priority contender: a step-down request, and nothing came before it.
    storage.request_lease(&LeaseRequest::new("l", "high", 5, ttl)).await.unwrap();
    let next = tokio::time::timeout(PATIENCE, changes.next()).await.unwrap();
    assert_eq!(
        next,
        Some(LeaseChange::Changed {
            lease_name: LeaseName::new("l").unwrap(),
            kind: LeaseChangeKind::StepDownRequested
        }),
        "the creation, a renewal or a refresh notified"
    );
    storage.release_lease("l", "a").await.unwrap();
    expect(&mut changes, "l", LeaseChangeKind::Released).await;
    // A later tenure is announced.
    let taken = storage.request_lease(&LeaseRequest::new("l", "high", 5, ttl)).await.unwrap();
    assert_eq!(taken.fencing_token.get(), 2);
    expect(&mut changes, "l", LeaseChangeKind::Acquired).await;
    storage.close().await.unwrap();
    assert!(storage.lease_changes().is_err());
}
}

on_each_driver! {
#[tokio::test]
async fn a_terminated_listener_reconnects_and_says_missed(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard).build().await.unwrap();
    let mut changes = listening(&storage).await;
    let admin = support::admin().await;
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE application_name = 'tenure-listener' AND query LIKE $1",
            &[&format!("%{}lease_changes%", guard.prefix())],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let next = tokio::time::timeout(PATIENCE, changes.next()).await.unwrap();
    assert_eq!(next, Some(LeaseChange::Missed));
    // And it listens again.
    storage
        .request_lease(&LeaseRequest::new("l", "a", 0, Duration::from_secs(300)))
        .await
        .unwrap();
    storage.release_lease("l", "a").await.unwrap();
    expect(&mut changes, "l", LeaseChangeKind::Released).await;
}
}

on_each_driver! {
#[tokio::test]
async fn with_notifications_off_the_capability_is_absent(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard).notifications(false).build().await.unwrap();
    assert!(!storage.capabilities().contains(Capability::LeaseChanges));
    assert!(storage.lease_changes().is_err());
}
}
