//! The elector against the in-memory backend, in paused tokio time: the storage's clock is
//! tokio's, so the ttl runs out on the storage exactly as time is advanced here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use support::{Backend, Fault, ms, wait_for_leader, wait_until};
use tenure_election::{ElectorConfig, ElectorError, LeaderElector, LeadershipState};
use tenure_ports::{EventStorage, LeaseStatus};
use tokio::time::{Instant, sleep};

const LEASE: &str = "order-dispatcher";

/// ttl 300 ms: poll 100 ms, call timeout 50 ms, safety margin 3 ms.
fn config(owner: &str) -> ElectorConfig {
    ElectorConfig::new(LEASE, ms(300)).with_owner(owner)
}

#[tokio::test(start_paused = true)]
async fn the_first_contender_is_elected_and_the_next_stands_by() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    let (token, at) = wait_for_leader(&a).await;
    assert_eq!(token, 1);
    assert_eq!(at, backend.origin, "elected on the first request, at once");
    assert_eq!(
        a.state(),
        LeadershipState::Leader {
            token: token_of(1),
            valid_until: backend.origin + ms(300) - ms(3),
        }
    );

    let (b, _) = backend.elector(config("b"));
    wait_until(&b, LeadershipState::is_standby).await;
    assert_eq!(
        b.state(),
        LeadershipState::Standby {
            holder: "a".try_into().unwrap(),
            token: token_of(1),
        }
    );
    let contenders = backend.memory.get_lease_contenders(LEASE).await.unwrap();
    assert_eq!(contenders.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn renewals_go_out_every_poll_interval_without_drifting_with_latency() {
    let backend = Backend::new();
    let (a, handle) = backend.elector(config("a"));
    handle.set(Fault::Slow(ms(40))); // every call takes 40 ms
    wait_for_leader(&a).await;
    sleep(ms(1_020)).await;

    let sends: Vec<_> = backend
        .calls_of("a", "request")
        .iter()
        .map(|c| c.sent.duration_since(backend.origin))
        .collect();
    let expected: Vec<_> = (0..=10).map(|k| ms(100 * k)).collect();
    assert_eq!(sends, expected);

    // Leadership runs from the sending of the last renewal, not from its answer.
    let last = backend.last_confirmed_send("a");
    assert_eq!(a.state().valid_until(), Some(last + ms(297)));
    assert_eq!(a.state().leader_token(), Some(token_of(1)));
}

#[tokio::test(start_paused = true)]
async fn a_step_down_request_makes_the_leader_finish_and_release_at_once() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    wait_for_leader(&a).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let work = tokio::spawn({
        let (a, runs) = (a.clone(), Arc::clone(&runs));
        async move {
            a.run_while_leader(|lease| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    lease.step_down_requested().await;
                    sleep(ms(20)).await; // finish the current unit of work
                }
            })
            .await
        }
    });

    let (c, _) = backend.elector(config("c").with_priority(5));
    wait_until(&c, LeadershipState::is_standby).await;
    let asked = wait_until(&a, LeadershipState::is_step_down_requested).await;

    let (token, taken_at) = wait_for_leader(&c).await;
    assert_eq!(token, 2);
    let released = backend.calls_of("a", "release");
    assert_eq!(released.len(), 1);
    assert_eq!(
        released[0].sent,
        asked + ms(20),
        "released as soon as the work ended"
    );
    assert!(
        taken_at - released[0].sent <= ms(100),
        "c took over at its next request, within one poll interval of the release"
    );
    assert_eq!(a.state(), LeadershipState::Unknown);

    // a stands aside for one ttl, then stands by behind c; its work is not run again.
    wait_until(&a, LeadershipState::is_standby).await;
    assert!(Instant::now() - released[0].sent >= ms(300));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(!work.is_finished());
    work.abort();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leader_is_replaced_once_its_ttl_has_run_out() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    let (b, _) = backend.elector(config("b"));
    wait_until(&b, LeadershipState::is_standby).await;

    sleep(ms(250)).await;
    a.abort(); // no release
    let last_heartbeat = backend.last_confirmed_send("a");

    let (token, taken_at) = wait_for_leader(&b).await;
    assert_eq!(token, 2);
    assert!(
        taken_at >= last_heartbeat + ms(300),
        "not before the ttl ran out"
    );
    assert!(
        taken_at <= last_heartbeat + ms(300) + ms(100),
        "at the first request after it ran out"
    );
}

#[tokio::test(start_paused = true)]
async fn leadership_lapses_at_its_deadline_when_renewals_fail() {
    let backend = Backend::new();
    let (a, handle) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    sleep(ms(130)).await;
    handle.set(Fault::Fail);

    let lapsed_at = wait_until(&a, |s| !s.is_leader()).await;
    let deadline = backend.last_confirmed_send("a") + ms(300);
    assert!(lapsed_at <= deadline, "never after the deadline");
    assert!(deadline - lapsed_at <= ms(10), "within 10 ms of it");
    assert_eq!(a.state(), LeadershipState::Unknown);
    // The lapse happened at the deadline, not at a poll: polls are at multiples of 100 ms.
    assert_ne!((lapsed_at - backend.origin).as_millis() % 100, 0);

    // Once the storage answers again, a comes back with a new tenure.
    handle.set(Fault::None);
    let (token, _) = wait_for_leader(&a).await;
    assert_eq!(token, 2);
}

#[tokio::test(start_paused = true)]
async fn leadership_lapses_at_its_deadline_while_a_call_hangs() {
    let backend = Backend::new();
    let (a, handle) = backend.elector(
        config("a")
            .with_poll_interval(ms(140))
            .with_call_timeout(ms(130)),
    );
    let lease = a.wait_for_leadership().await.unwrap();
    sleep(ms(10)).await;
    handle.set(Fault::Hang);

    // The renewal sent at 140 ms hangs; leadership, confirmed by the request sent at 0,
    // lapses at 297 ms while the renewal sent at 280 ms hangs too.
    lease.lost().await;
    let lapsed_at = Instant::now();
    // The elector publishes the lapse at that same instant.
    assert_eq!(wait_until(&a, |s| !s.is_leader()).await, lapsed_at);
    let deadline = backend.last_confirmed_send("a") + ms(300);
    assert_eq!(backend.last_confirmed_send("a"), backend.origin);
    assert!(lapsed_at <= deadline && deadline - lapsed_at <= ms(10));
    assert!(!lease.is_valid());
    let hung = backend.calls_of("a", "request");
    assert_eq!(hung.last().unwrap().sent, backend.origin + ms(280));
    assert!(
        hung.last().unwrap().status.is_none(),
        "the call was still in flight"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_and_the_standby_takes_over_at_its_next_request() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    let (b, _) = backend.elector(config("b"));
    wait_until(&b, LeadershipState::is_standby).await;
    let lease = a.wait_for_leadership().await.unwrap();

    sleep(ms(150)).await;
    let shutdown_at = Instant::now();
    a.shutdown().await.unwrap();
    assert!(
        !lease.is_valid(),
        "the tenure ends before the release is sent"
    );
    let snapshot = backend.memory.get_leases().await.unwrap();
    let record = snapshot.get(LEASE).unwrap();
    assert!(
        record.is_expired_at(snapshot.now),
        "released, not waiting out the ttl"
    );
    assert_eq!(
        record.fencing_token,
        token_of(1),
        "the token survives the release"
    );

    let (token, taken_at) = wait_for_leader(&b).await;
    assert_eq!(token, 2);
    assert!(taken_at - shutdown_at <= ms(100));
    assert!(matches!(
        a.wait_for_leadership().await,
        Err(ElectorError::Stopped)
    ));
    a.shutdown().await.unwrap(); // twice is harmless
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_releases_too() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    drop(a);
    sleep(ms(1)).await;
    assert_eq!(backend.calls_of("a", "release").len(), 1);
    let snapshot = backend.memory.get_leases().await.unwrap();
    assert!(snapshot.get(LEASE).unwrap().is_expired_at(snapshot.now));
}

#[tokio::test(start_paused = true)]
async fn work_that_ends_while_leader_returns_and_the_lease_is_kept() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    let token = a
        .run_while_leader(|lease| async move { lease.token().get() })
        .await
        .unwrap();
    assert_eq!(token, 1);
    sleep(ms(1_000)).await;
    assert_eq!(
        a.state().leader_token(),
        Some(token_of(1)),
        "still renewing"
    );
    assert!(backend.calls_of("a", "release").is_empty());
}

#[tokio::test(start_paused = true)]
async fn work_is_cut_short_when_leadership_lapses_and_runs_again_on_the_next_tenure() {
    let backend = Backend::new();
    let (a, handle) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = tokio::spawn({
        let (a, tokens) = (a.clone(), Arc::clone(&tokens));
        async move {
            a.run_while_leader(|lease| {
                let tokens = Arc::clone(&tokens);
                async move {
                    tokens.lock().unwrap().push(lease.token().get());
                    if lease.token().get() == 1 {
                        // Work "forever": until_lost cuts it at the lapse.
                        return lease.until_lost(sleep(ms(60_000))).await.is_err();
                    }
                    false
                }
            })
            .await
        }
    });
    sleep(ms(50)).await;
    handle.set(Fault::Fail);
    wait_until(&a, |s| !s.is_leader()).await;
    handle.set(Fault::None);
    // The first tenure's output (true: cut short) is dropped; the second run returns.
    assert!(!work.await.unwrap().unwrap());
    assert_eq!(*tokens.lock().unwrap(), vec![1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_standby_whose_calls_fail_is_unknown_then_stands_by_again() {
    let backend = Backend::new();
    let (a, _) = backend.elector(config("a"));
    wait_for_leader(&a).await;
    let (b, handle) = backend.elector(config("b"));
    wait_until(&b, LeadershipState::is_standby).await;
    handle.set(Fault::Fail);
    wait_until(&b, |s| *s == LeadershipState::Unknown).await;
    handle.set(Fault::None);
    wait_until(&b, LeadershipState::is_standby).await;
    assert_eq!(
        backend.calls_of("b", "request").last().unwrap().status,
        Some(LeaseStatus::Standby)
    );
}

#[test]
fn starting_outside_a_runtime_is_an_error_not_a_panic() {
    let storage = Arc::new(tenure_memory::MemoryEventStorage::new());
    let result = LeaderElector::start(storage, config("a"));
    assert!(matches!(result, Err(ElectorError::NoRuntime)));
}

#[tokio::test]
async fn a_bad_configuration_is_refused_before_anything_runs() {
    let storage = Arc::new(tenure_memory::MemoryEventStorage::new());
    let result = LeaderElector::start(
        storage,
        ElectorConfig::new(LEASE, ms(300)).with_call_timeout(ms(100)),
    );
    let error = result.unwrap_err();
    assert!(matches!(error, ElectorError::Config(_)));
    assert!(error.to_string().contains("call timeout"));
}

fn token_of(n: u64) -> tenure_ports::FencingToken {
    tenure_ports::FencingToken::new(n).unwrap()
}
