//! Contention, waiting, killed and stalled connections, timeouts and a server restart, against
//! real servers, on each driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use support::{
    LOCK_KEY_SQL, XorShift, admin, backends, blocked_on_lock, builder, deadpool_pool, fresh_prefix,
    fresh_storage, named_builder, settled_backends, sqlx_pool, url_named,
};
use tenure_pg_test::cluster::{Cluster, StopMode};
use tenure_ports::{
    EventStorage, EventStorageError, LeaseRequest, LeaseResponse, LeaseStatus, Timestamp,
};
use tenure_postgres::{PostgresEventStorage, SchemaMode};
use tenure_tck::history::{self, Call};
use tokio::time::Instant;

/// Holds the advisory lock of `lease` (as the lease functions take it) in an open transaction
/// on a connection of its own, until `release` is sent.
async fn hold_lease_lock(
    prefix: &str,
    lease: &str,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<SystemTime>,
) {
    let mut client = admin().await;
    let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (prefix, lease) = (prefix.to_owned(), lease.to_owned());
    let handle = tokio::spawn(async move {
        let tx = client.transaction().await.unwrap();
        tx.execute(
            &format!("SELECT pg_advisory_xact_lock({LOCK_KEY_SQL})"),
            &[&prefix, &lease],
        )
        .await
        .unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.await;
        let released_at: SystemTime = tx
            .query_one("SELECT clock_timestamp()", &[])
            .await
            .unwrap()
            .get(0);
        tx.commit().await.unwrap();
        released_at
    });
    locked_rx.await.unwrap();
    (release_tx, handle)
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_kept_waiting_on_the_lock_past_the_ttl_decides_on_the_time_it_decides(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let ttl = Duration::from_secs(1);
    let first = storage
        .request_lease(&LeaseRequest::new("l", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(first.status, LeaseStatus::Leader);
    // b sees a's tenure, and keeps seeing it for a ttl: a takeover once it has expired needs
    // that sighting (request_lease_v4, and v5, which b calls: it does not hold the lease).
    let seen = storage
        .request_lease(&LeaseRequest::new("l", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(seen.status, LeaseStatus::Standby);
    tokio::time::sleep(ttl).await;

    let (release, holder) = hold_lease_lock(guard.prefix(), "l").await;
    let waiting = tokio::spawn({
        let storage = storage.clone();
        async move {
            storage
                .request_lease(&LeaseRequest::new("l", "b", 0, ttl))
                .await
        }
    });
    blocked_on_lock(guard.prefix(), "request_lease_v5").await;
    // Keep b waiting well past a's ttl, then let it in.
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b did not wait on the lock");
    release.send(()).unwrap();
    let released_at = Timestamp::from_system_time(holder.await.unwrap()).unwrap();
    let answer = waiting.await.unwrap().unwrap();

    // a's lease had expired when b got the lock: b takes over, with the time it decided at.
    assert_eq!(answer.status, LeaseStatus::Leader);
    assert_eq!(answer.lease.owner, "b");
    assert_eq!(answer.fencing_token.get(), 2);
    assert!(
        answer.lease.acquired_at >= released_at,
        "b decided with a clock read before the lock: {} < {}",
        answer.lease.acquired_at,
        released_at
    );
    assert!(answer.lease.acquired_at >= first.lease.heartbeat_at.saturating_add(ttl));
    // And the heartbeat written is the same instant.
    assert_eq!(answer.lease.heartbeat_at, answer.lease.acquired_at);
    let contenders = storage.get_lease_contenders("l").await.unwrap();
    assert_eq!(
        contenders.len(),
        1,
        "a's registration expired too: {contenders:?}"
    );
    assert_eq!(contenders[0].last_seen, answer.lease.heartbeat_at);
}
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_mid_call_is_unavailable_and_the_next_call_succeeds(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard).pool_size(1).build().await.unwrap();
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));
    storage.request_lease(&request).await.unwrap();

    let (release, holder) = hold_lease_lock(guard.prefix(), "l").await;
    let call = tokio::spawn({
        let storage = storage.clone();
        let request = request.clone();
        async move { storage.request_lease(&request).await }
    });
    // The holder's renewal, its own call: the renewal statement first.
    let pid = blocked_on_lock(guard.prefix(), "renew_lease").await;
    let killed: bool = admin()
        .await
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(err, EventStorageError::Unavailable { .. }),
        "{err:?}"
    );
    release.send(()).unwrap();
    holder.await.unwrap();

    // The pool (of one connection) replaces the dead connection by itself.
    let again = storage.request_lease(&request).await.unwrap();
    assert_eq!(again.status, LeaseStatus::Leader);
    assert_eq!(again.fencing_token.get(), 1);
}
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_unavailable_in_time_and_the_pool_recovers(driver: PostgresDriver) {
    let guard = fresh_prefix();
    // The next call waits for the abandoned one's connection to be drained (or replaced)
    // within the same timeout: 300 ms left it little on a loaded machine.
    let timeout = Duration::from_secs(1);
    let storage = builder(driver, &guard)
        .pool_size(1)
        .call_timeout(timeout)
        .build()
        .await
        .unwrap();
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));
    storage.request_lease(&request).await.unwrap();

    let (release, holder) = hold_lease_lock(guard.prefix(), "l").await;
    let started = std::time::Instant::now();
    let err = storage.request_lease(&request).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(err.is_unconfirmed(), "{err:?}");
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(
        elapsed < timeout + Duration::from_millis(700),
        "hung past the timeout: {elapsed:?}"
    );
    // Other leases go on while that one is stuck (the abandoned connection was not reused).
    let other = LeaseRequest::new("other", "a", 0, Duration::from_secs(30));
    assert_eq!(
        storage.request_lease(&other).await.unwrap().status,
        LeaseStatus::Leader
    );
    release.send(()).unwrap();
    holder.await.unwrap();
    assert_eq!(
        storage.request_lease(&request).await.unwrap().status,
        LeaseStatus::Leader
    );
}
}

on_each_driver! {
#[tokio::test]
async fn exhausted_tokens_are_an_internal_error_that_writes_nothing(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix();
    admin()
        .await
        .execute(
            &format!(
                "INSERT INTO {p}leases VALUES ('l', 'a', 0, 9223372036854775807, \
                 now() - interval '1 hour', now() - interval '1 hour', 1000)"
            ),
            &[],
        )
        .await
        .unwrap();
    // Released, so that b may take it over without a sighting of its own.
    admin()
        .await
        .execute(
            &format!("UPDATE {p}leases SET released_at = now() - interval '1 hour'"),
            &[],
        )
        .await
        .unwrap();
    let err = storage
        .request_lease(&LeaseRequest::new("l", "b", 0, Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, EventStorageError::Internal { .. }), "{err:?}");
    assert!(err.to_string().contains("exhausted"), "{err}");
    assert!(storage.get_lease_contenders("l").await.unwrap().is_empty());
    let snapshot = storage.get_leases().await.unwrap();
    assert_eq!(snapshot.get("l").unwrap().owner, "a");
}
}

on_each_driver! {
#[tokio::test]
async fn invalid_input_is_refused_before_anything_is_written(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    for request in [
        LeaseRequest::new("", "a", 0, Duration::from_secs(1)),
        LeaseRequest::new("l", "a\u{0}b", 0, Duration::from_secs(1)),
        LeaseRequest::new("l", "x".repeat(256), 0, Duration::from_secs(1)),
        LeaseRequest::new("l", "a", 0, Duration::from_micros(999)),
        LeaseRequest::new("l", "a", 0, Duration::from_secs(7 * 86_400 + 1)),
    ] {
        let err = storage.request_lease(&request).await.unwrap_err();
        assert!(
            matches!(err, EventStorageError::InvalidRequest(_)),
            "{err:?}"
        );
    }
    assert!(matches!(
        storage.release_lease("l", "").await,
        Err(EventStorageError::InvalidRequest(_))
    ));
    assert!(matches!(
        storage.get_lease_contenders("\u{7}").await,
        Err(EventStorageError::InvalidRequest(_))
    ));
    let rows: i64 = admin()
        .await
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {p}leases) + (SELECT count(*) FROM {p}lease_contenders)",
                p = guard.prefix()
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}
}

on_each_driver! {
#[tokio::test]
async fn names_travel_as_parameters_whatever_they_contain(driver: PostgresDriver) {
    let (storage, _guard) = fresh_storage(driver).await;
    let names = ["l'; DROP TABLE x; --", "naïve ünïcödé", "$1", "%_\\"];
    for name in names {
        let response = storage
            .request_lease(&LeaseRequest::new(name, name, 0, Duration::from_secs(30)))
            .await
            .unwrap();
        assert_eq!(response.lease.lease_name, name);
        assert_eq!(response.lease.owner, name);
    }
    let snapshot = storage.get_leases().await.unwrap();
    let mut expected: Vec<&str> = names.to_vec();
    expected.sort_unstable();
    let listed: Vec<&str> = snapshot
        .leases
        .iter()
        .map(|l| l.lease_name.as_str())
        .collect();
    assert_eq!(listed, expected, "get_leases is ordered by name (bytes)");
}
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_contenders_over_four_pools_never_share_a_token_or_a_live_lease(driver: PostgresDriver) {
    const LEASES: [&str; 2] = ["hot-0", "hot-1"];
    let run_for = Duration::from_secs(10);
    let ttl = Duration::from_millis(200);

    let guard = fresh_prefix();
    let mut storages = vec![builder(driver, &guard).pool_size(8).build().await.unwrap()];
    for _ in 1..4 {
        storages.push(
            builder(driver, &guard)
                .pool_size(8)
                .schema_mode(SchemaMode::Validate)
                .build()
                .await
                .unwrap(),
        );
    }
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let released: Arc<Mutex<HashSet<(String, u64)>>> = Arc::default();
    let deadline = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for i in 0..32u64 {
        let storage: PostgresEventStorage = storages[(i % 4) as usize].clone();
        let (calls, released) = (calls.clone(), released.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("c{i}");
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (i + 1).wrapping_mul(0x2545_F491));
            while Instant::now() < deadline {
                let lease = LEASES[rng.below(2) as usize];
                let request = LeaseRequest::new(lease, &owner, (i % 3) as i64, ttl);
                let invoked = Instant::now();
                let result = storage.request_lease(&request).await;
                calls.lock().unwrap().push(Call {
                    lease_name: lease.to_owned(),
                    owner: owner.clone(),
                    invoked,
                    completed: Instant::now(),
                    response: result.as_ref().ok().cloned(),
                });
                if let Ok(response) = result
                    && response.status.holds_lease()
                {
                    match rng.below(20) {
                        // Hand over, as a step-down or a shutdown would.
                        0 | 1 => {
                            released
                                .lock()
                                .unwrap()
                                .insert((lease.to_owned(), response.fencing_token.get()));
                            storage.release_lease(lease, &owner).await.unwrap();
                        }
                        // Stall past the ttl, as a paused process would.
                        2 => tokio::time::sleep(ttl + Duration::from_millis(20)).await,
                        _ => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.below(8))).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let calls = calls.lock().unwrap().clone();
    let released = released.lock().unwrap().clone();

    // The kit's checks on the callers' clocks: tokens never shared, never backwards, holder
    // continuity.
    let report = history::check(&calls, &[], &[]);
    println!("contention: {report}");
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.failed_calls, 0);
    assert!(
        report.calls > 1000,
        "too few calls to mean anything: {report}"
    );

    // On the storage's clock: tokens run 1, 2, 3, … without gaps; a tenure is never renewed
    // after the next one began; and a tenure that was not released had expired before the
    // next one began. So no two owners ever held a live lease at once.
    for lease in LEASES {
        #[derive(Debug)]
        struct Tenure {
            owner: String,
            acquired_at: Timestamp,
            last_heartbeat: Timestamp,
            ttl: Duration,
        }
        let mut tenures: BTreeMap<u64, Tenure> = BTreeMap::new();
        let holders = calls
            .iter()
            .filter(|c| c.lease_name == lease)
            .filter_map(|c| c.response.as_ref())
            .filter(|r: &&LeaseResponse| r.status.holds_lease());
        for response in holders {
            let l = &response.lease;
            let t = tenures.entry(l.fencing_token.get()).or_insert(Tenure {
                owner: l.owner.to_string(),
                acquired_at: l.acquired_at,
                last_heartbeat: l.heartbeat_at,
                ttl: l.ttl,
            });
            assert_eq!(
                t.owner,
                l.owner.as_str(),
                "token {} of {lease}",
                l.fencing_token
            );
            assert_eq!(t.acquired_at, l.acquired_at);
            if l.heartbeat_at > t.last_heartbeat {
                t.last_heartbeat = l.heartbeat_at;
                t.ttl = l.ttl;
            }
        }
        let tokens: Vec<u64> = tenures.keys().copied().collect();
        assert_eq!(
            tokens,
            (1..=tokens.len() as u64).collect::<Vec<_>>(),
            "{lease}: tokens have gaps"
        );
        assert!(
            tokens.len() > 5,
            "{lease}: too few handovers: {}",
            tokens.len()
        );
        for (token, next) in tokens.iter().zip(tokens.iter().skip(1)) {
            let (a, b) = (&tenures[token], &tenures[next]);
            assert!(
                a.last_heartbeat <= b.acquired_at,
                "{lease}: tenure {token} renewed after tenure {next} began: {a:?} {b:?}"
            );
            if !released.contains(&(lease.to_owned(), *token)) {
                assert!(
                    a.last_heartbeat.saturating_add(a.ttl) <= b.acquired_at,
                    "{lease}: tenure {next} began while tenure {token} was live: {a:?} {b:?}"
                );
            }
        }
        println!("contention: {lease}: {} tenures", tokens.len());
    }
}
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_is_unavailable_then_the_pool_recovers_by_itself(driver: PostgresDriver) {
    // A cluster of the test's own, so that stopping it disturbs nobody else's tests. Missing
    // binaries fail the test: a skipped test reported as passed would hide that it never ran.
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = Cluster::create()?;
        cluster.start().map(|()| cluster)
    })
    .await
    .unwrap()
    .expect("a throwaway cluster from the local PostgreSQL binaries");
    let storage = PostgresEventStorage::builder().driver(driver)
        .url(cluster.url())
        .driver(driver)
        .pool_size(2)
        .call_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(60));
    let first = storage.request_lease(&request).await.unwrap();
    assert_eq!(first.status, LeaseStatus::Leader);

    cluster.stop(StopMode::Immediate).unwrap();
    let started = std::time::Instant::now();
    let err = storage.request_lease(&request).await.unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    cluster.start().expect("restarting the throwaway cluster");
    // The pool noticed its connections died and opens new ones: the next call succeeds.
    let answer = storage.request_lease(&request).await.unwrap();
    assert_eq!(
        answer.fencing_token, first.fencing_token,
        "the token survived the restart"
    );
    assert_eq!(answer.status, LeaseStatus::Leader);
}
}

/// Sends `signal` (`STOP`, `CONT`) to the server process `pid`.
fn signal(pid: i32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_is_unavailable_in_time_and_replaced(driver: PostgresDriver) {
    // The server process behind the storage's only connection is stopped (SIGSTOP): the socket
    // stays open and nothing answers, as with a hung server or a black-holed network.
    let guard = fresh_prefix();
    let name = format!("stall-{}", guard.prefix());
    // The next call waits for the stalled connection to be given up on and replaced within the
    // same timeout: a new session's connect and first statement. 500 ms left it little on a
    // loaded machine, and 1 s too, once (a clean-clone CI run of 2026-12-07, sqlx, beside a
    // test with eight callers at full speed on the same two cores: "get_leases: no answer
    // within 1s"). The bounds below are relative to it.
    let timeout = Duration::from_secs(2);
    let storage = named_builder(driver, &guard, &name)
        .pool_size(1)
        .call_timeout(timeout)
        .build()
        .await
        .unwrap();
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));
    assert_eq!(storage.request_lease(&request).await.unwrap().status, LeaseStatus::Leader);
    let before = settled_backends(&name, 1).await;
    let stalled = before[0];
    signal(stalled, "STOP");
    let started = std::time::Instant::now();
    let result = storage.request_lease(&request).await;
    let elapsed = started.elapsed();
    // The next call gets a new connection: the stalled one was taken out of the pool.
    let next = storage.get_leases().await;
    let after = backends(&name).await;
    signal(stalled, "CONT");
    let err = result.unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < timeout + Duration::from_millis(700), "hung past the timeout: {elapsed:?}");
    assert_eq!(next.unwrap().get("l").unwrap().owner, "a");
    assert!(
        after.contains(&stalled) && after.len() == 2,
        "the stalled backend {stalled} and a new one, not {after:?}"
    );
    assert_eq!(storage.request_lease(&request).await.unwrap().status, LeaseStatus::Leader);
    storage.close().await.unwrap();
}
}

/// The call timeout of the storages below: a call that waits for it hung.
const KILLED_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Eight callers renew leases of their own on `storage` in a loop for 5 s; after 1 s every
/// session named `name` is killed (`pg_terminate_backend`, a real fault: what a failover or a
/// server restart does to a pool). No call waits for the call timeout (a call on a killed
/// session fails at once, as `Unavailable`: when in flight, or at the next use of an idle one,
/// which a pool without a check before each checkout hands out once), and every caller is
/// answered again after the kill. Until 2026-12-07 the sqlx driver's own pool could leave every
/// caller waiting for a connection handed over while connections sat idle in sqlx's pool (see
/// `Acquired` in `src/connection/sqlx.rs`): 6 of 38 runs hung for the whole call timeout.
async fn every_connection_killed_at_once(storage: PostgresEventStorage, name: &str) {
    let storage = Arc::new(storage);
    let stop = Instant::now() + Duration::from_secs(5);
    let callers: Vec<_> = (0..8)
        .map(|c| {
            let storage = Arc::clone(&storage);
            tokio::spawn(async move {
                let request = LeaseRequest::new(format!("l{c}"), "a", 0, Duration::from_secs(30));
                let mut calls = Vec::new();
                while Instant::now() < stop {
                    let sent = Instant::now();
                    let result = storage.request_lease(&request).await;
                    calls.push((sent, sent.elapsed(), result.map(|r| r.status)));
                }
                calls
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Instant::now();
    let killed: i64 = admin()
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
              WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    let mut per_caller = Vec::new();
    for caller in callers {
        per_caller.push(caller.await.unwrap());
    }
    let calls: Vec<_> = per_caller.iter().flatten().collect();
    assert!(killed >= 1, "no session of {name} to kill");
    let hung: Vec<_> = calls
        .iter()
        .filter(|(_, took, _)| *took >= KILLED_CALL_TIMEOUT)
        .collect();
    assert!(
        hung.is_empty(),
        "{} calls waited for the call timeout",
        hung.len()
    );
    for (caller, calls) in per_caller.iter().enumerate() {
        assert!(
            calls
                .iter()
                .any(|(sent, _, r)| *sent >= killed_at && r.is_ok()),
            "caller {caller} was not answered after the kill"
        );
    }
    storage.close().await.unwrap();
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_of_its_own_pool_killed_at_once(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let name = format!("killall-{}", guard.prefix());
    let storage = named_builder(driver, &guard, &name)
        .pool_size(8)
        .call_timeout(KILLED_CALL_TIMEOUT)
        .build()
        .await
        .unwrap();
    every_connection_killed_at_once(storage, &name).await;
}
}

/// [`every_connection_killed_at_once`] on a storage built on an application's `pool`.
async fn every_connection_of_an_application_s_pool_killed_at_once(
    pool: tenure_postgres::ApplicationPool,
    guard: &tenure_pg_test::PrefixGuard,
    name: &str,
) {
    let storage = PostgresEventStorage::builder()
        .pool(pool)
        .prefix(guard.prefix())
        .call_timeout(KILLED_CALL_TIMEOUT)
        .build()
        .await
        .unwrap();
    every_connection_killed_at_once(storage, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_of_an_application_s_deadpool_pool_killed_at_once() {
    let guard = fresh_prefix();
    let name = format!("killall-dp-{}", guard.prefix());
    let pool = deadpool_pool(&url_named(&name), 8);
    every_connection_of_an_application_s_pool_killed_at_once(pool.into(), &guard, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_of_an_application_s_sqlx_pool_killed_at_once() {
    let guard = fresh_prefix();
    let name = format!("killall-sx-{}", guard.prefix());
    let pool = sqlx_pool(&url_named(&name), 8).await;
    every_connection_of_an_application_s_pool_killed_at_once(pool.into(), &guard, &name).await;
}
