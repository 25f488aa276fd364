//! An elector never adopts a tenure it did not start: two electors with one owner id (a live
//! twin), and an elector restarted with its predecessor's id within the ttl. In paused tokio
//! time on the in-memory backend, whose clock is tokio's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::{Backend, ms, wait_for_leader, wait_until};
use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_ports::EventStorage;
use tokio::time::sleep;

const LEASE: &str = "order-dispatcher";

/// ttl 300 ms: poll 100 ms, call timeout 50 ms, safety margin 3 ms.
fn config(owner: &str) -> ElectorConfig {
    ElectorConfig::new(LEASE, ms(300)).with_owner(owner)
}

/// Records whether `elector` was ever leader with `token`.
fn watch_for_token(elector: &LeaderElector, token: u64) -> Arc<AtomicBool> {
    let seen = Arc::new(AtomicBool::new(false));
    let mut state = elector.subscribe();
    let flag = seen.clone();
    tokio::spawn(async move {
        loop {
            if state.borrow_and_update().leader_token().map(|t| t.get()) == Some(token) {
                flag.store(true, Ordering::SeqCst);
            }
            if state.changed().await.is_err() {
                return;
            }
        }
    });
    seen
}

async fn record(backend: &Backend) -> tenure_ports::Lease {
    let snapshot = backend.memory.get_leases().await.unwrap();
    snapshot.leases.into_iter().next().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_twin_with_the_same_owner_waits_until_the_first_tenure_ends_then_takes_a_new_token() {
    let backend = Backend::new();
    let (first, _) = backend.elector(config("pod-a"));
    assert_eq!(wait_for_leader(&first).await.0, 1);
    sleep(ms(50)).await;

    let (twin, _) = backend.elector(config("pod-a"));
    let twin_led_token_1 = watch_for_token(&twin, 1);
    wait_until(&twin, LeadershipState::is_standby).await;
    // Many ttls with the first renewing: the twin never acts as leader, and only the first
    // keeps the tenure alive (the twin requests once, then only reads snapshots).
    sleep(ms(3_000)).await;
    assert!(first.state().is_leader());
    assert_eq!(
        twin.state(),
        LeadershipState::Standby {
            holder: "pod-a".try_into().unwrap(),
            token: first.state().leader_token().unwrap(),
        }
    );
    let requests = backend.calls_of("pod-a", "request").len();
    assert!(requests >= 30, "the first renews every 100 ms: {requests}");

    // The first hands over; the twin acquires a new tenure.
    first.shutdown().await.unwrap();
    let (token, _) = wait_for_leader(&twin).await;
    assert_eq!(token, 2, "a new token, never the first's");
    assert!(!twin_led_token_1.load(Ordering::SeqCst));
    twin.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restart_within_the_ttl_does_not_continue_the_dead_predecessors_token() {
    let backend = Backend::new();
    let (before, _) = backend.elector(config("pod-a"));
    assert_eq!(wait_for_leader(&before).await.0, 1);
    sleep(ms(150)).await;
    before.abort(); // a crash: nothing released
    let crashed_at = tokio::time::Instant::now();

    sleep(ms(20)).await;
    let (after, _) = backend.elector(config("pod-a"));
    let adopted = watch_for_token(&after, 1);
    let (token, elected_at) = wait_for_leader(&after).await;
    assert_eq!(token, 2);
    assert!(!adopted.load(Ordering::SeqCst), "never leader on token 1");
    // Its one renewal of the dead tenure (its first request) kept it live one ttl more; it
    // waited that out and acquired at once after, without renewing it again.
    let waited = elected_at.duration_since(crashed_at);
    assert!(waited >= ms(20 + 300), "{waited:?}");
    assert!(waited <= ms(20 + 300 + 3 + 100), "{waited:?}");
    let requests_before_elected = backend
        .calls_of("pod-a", "request")
        .iter()
        .filter(|c| c.sent > crashed_at && c.sent < elected_at)
        .count();
    assert_eq!(
        requests_before_elected, 1,
        "one renewal, then snapshots only"
    );
    after.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_twin_that_shuts_down_while_waiting_releases_nothing() {
    let backend = Backend::new();
    let (first, _) = backend.elector(config("pod-a"));
    wait_for_leader(&first).await;
    sleep(ms(50)).await;
    let (twin, _) = backend.elector(config("pod-a"));
    wait_until(&twin, LeadershipState::is_standby).await;
    let releases = backend.calls_of("pod-a", "release").len();
    twin.shutdown().await.unwrap();
    assert_eq!(backend.calls_of("pod-a", "release").len(), releases);
    let now = backend.memory.get_leases().await.unwrap().now;
    assert!(record(&backend).await.is_live_at(now));
    assert!(first.state().is_leader());
    // A third contender still stands by: the first's tenure was not ended.
    let (other, _) = backend.elector(config("pod-b"));
    wait_until(&other, LeadershipState::is_standby).await;
    first.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}
