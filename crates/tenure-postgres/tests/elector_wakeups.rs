//! Wake-ups seen by electors (issue 15), on each driver: with LISTEN/NOTIFY a release reaches
//! a standby and a step-down request reaches the holder at once, not at their next poll; a
//! listener whose connection is terminated loses no handover; with notifications off, the
//! same handovers happen by polling.
//!
//! Real time, one storage per elector (as one per process), poll intervals of 200 s (ttl
//! 600 s) far beyond the tests' patience, so that only a wake-up can pass them; the negative
//! control shows that the same handover without notifications is not taken up within it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{builder, fresh_prefix};
use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_pg_test::PrefixGuard;
use tenure_ports::EventStorage;
use tenure_postgres::PostgresDriver;
use tokio::time::timeout;

/// Far below the 200 s poll interval of `LONG_TTL`; only a bound on waits that normally take
/// milliseconds.
const PATIENCE: Duration = Duration::from_secs(5);
const LONG_TTL: Duration = Duration::from_secs(600);

/// A storage of its own (its own pool and listener) on the guard's prefix.
async fn storage(
    driver: PostgresDriver,
    guard: &PrefixGuard,
    notifications: bool,
) -> Arc<dyn EventStorage> {
    Arc::new(
        builder(driver, guard)
            .notifications(notifications)
            .build()
            .await
            .unwrap(),
    )
}

fn elector(
    storage: Arc<dyn EventStorage>,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> LeaderElector {
    let config = ElectorConfig::new("wake", ttl)
        .with_owner(owner)
        .with_priority(priority);
    LeaderElector::start(storage, config).unwrap()
}

async fn until(elector: &LeaderElector, wanted: impl Fn(&LeadershipState) -> bool) -> bool {
    let mut state = elector.subscribe();
    timeout(PATIENCE, state.wait_for(|s| wanted(s)))
        .await
        .is_ok()
}

/// Terminates every listener session of the prefix; how many there were.
async fn terminate_listeners(prefix: &str) -> i64 {
    support::admin()
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE application_name = 'tenure-listener' AND query LIKE $1",
            &[&format!("%{prefix}lease_changes%")],
        )
        .await
        .unwrap()
        .get(0)
}

/// `a` leads, `b` stands by, `a` shuts down (and releases): does `b` lead within the
/// patience? `between` runs after `b` stands by and before `a` shuts down.
async fn release_handover(
    driver: PostgresDriver,
    notifications: bool,
    ttl: Duration,
    between: impl AsyncFnOnce(&PrefixGuard),
) -> bool {
    let guard = fresh_prefix();
    let a = elector(storage(driver, &guard, notifications).await, "a", 0, ttl);
    assert!(until(&a, LeadershipState::is_leader).await);
    let b = elector(storage(driver, &guard, notifications).await, "b", 0, ttl);
    assert!(until(&b, LeadershipState::is_standby).await);
    between(&guard).await;
    a.shutdown().await.unwrap();
    let led = until(&b, LeadershipState::is_leader).await;
    b.shutdown().await.unwrap();
    led
}

on_each_driver! {
#[tokio::test]
async fn a_release_wakes_the_standby_without_waiting_for_its_poll(driver: PostgresDriver) {
    assert!(release_handover(driver, true, LONG_TTL, async |_| {}).await);
}
}

on_each_driver! {
#[tokio::test]
async fn a_step_down_request_reaches_the_holder_without_waiting_for_its_poll(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let a = elector(storage(driver, &guard, true).await, "a", 0, LONG_TTL);
    assert!(until(&a, LeadershipState::is_leader).await);
    let b = elector(storage(driver, &guard, true).await, "b", 10, LONG_TTL);
    assert!(
        until(&a, LeadershipState::is_step_down_requested).await,
        "the holder did not hear the step-down request"
    );
    // The holder hands over (a release), which wakes the contender in turn.
    a.release().await.unwrap();
    assert!(until(&b, LeadershipState::is_leader).await);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
}

on_each_driver! {
#[tokio::test]
async fn a_terminated_listener_loses_no_handover(driver: PostgresDriver) {
    // The release follows the termination at once, so its notification is usually sent while
    // the standby's listener reconnects, and is lost; the standby's re-request after the
    // reconnection takes the lease anyway.
    let led = release_handover(driver, true, LONG_TTL, async |guard| {
        assert_eq!(terminate_listeners(guard.prefix()).await, 2);
    })
    .await;
    assert!(led, "the handover was lost with the listener's connection");
}
}

on_each_driver! {
#[tokio::test]
async fn with_notifications_off_a_release_waits_for_the_poll(driver: PostgresDriver) {
    // The negative control: what passes above is the wake-up, not a poll.
    assert!(!release_handover(driver, false, LONG_TTL, async |_| {}).await);
}
}

on_each_driver! {
#[tokio::test]
async fn with_notifications_off_handovers_still_happen_by_polling(driver: PostgresDriver) {
    // A 1.5 s ttl polls every 0.5 s: well within the patience.
    assert!(release_handover(driver, false, Duration::from_millis(1_500), async |_| {}).await);
}
}
