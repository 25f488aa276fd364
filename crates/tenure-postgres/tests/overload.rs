//! Calls abandoned in flight under overload (issue 13): on the deadpool driver the statement is
//! cancelled with PostgreSQL's cancel request and the connection is kept, so a storage whose
//! calls all time out does not make its pool open a new session per call. The sessions are
//! counted on the server (`pg_stat_activity`, by `application_name`), not in the client.
//!
//! The sqlx driver has no cancel request; it still closes such a connection (see the module
//! `connection::cancel`), so these tests run on deadpool only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::{LOCK_KEY_SQL, admin, builder, fresh_prefix, server};
use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
use tenure_postgres::{PostgresDriver, PostgresEventStorage, SchemaMode};

/// The test server's connection string with `application_name` set to `name`.
fn url_named(name: &str) -> String {
    let url = &server().url;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={name}")
    } else {
        format!("{url} application_name={name}")
    }
}

/// The backends on the server whose `application_name` is `name`.
async fn sessions(name: &str) -> HashSet<i32> {
    admin()
        .await
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Waits (bounded) until the session `pid` is idle, i.e. its cancelled statement is gone.
async fn wait_idle(pid: i32) -> bool {
    let client = admin().await;
    for _ in 0..500 {
        let state: Option<String> = client
            .query_opt("SELECT state FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .unwrap()
            .map(|row| row.get(0));
        if state.as_deref() == Some("idle") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A storage of `size` connections, each call bounded to 200 ms, sessions named `name`.
async fn storage(
    prefix: &tenure_pg_test::PrefixGuard,
    name: &str,
    size: usize,
) -> PostgresEventStorage {
    builder(PostgresDriver::Deadpool, prefix)
        .url(url_named(name))
        .schema_mode(SchemaMode::Ensure)
        .pool_size(size)
        .call_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap()
}

/// Holds the advisory lock of lease `lease` under `prefix` in an open transaction, on a client
/// of its own; the lock goes when the returned client is dropped.
async fn hold_lock(prefix: &str, lease: &str) -> tokio_postgres::Client {
    let client = admin().await;
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute(
            &format!("SELECT pg_advisory_xact_lock({LOCK_KEY_SQL})"),
            &[&prefix, &lease],
        )
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_leaves_its_connection_usable() {
    let guard = fresh_prefix();
    let name = format!("tenure-cancel-{}", guard.prefix());
    let storage = storage(&guard, &name, 1).await;
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));
    storage.request_lease(&request).await.unwrap();
    let before = sessions(&name).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let pid = *before.iter().next().unwrap();

    let holder = hold_lock(guard.prefix(), "l").await;
    let err = storage.request_lease(&request).await.unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    // The statement was cancelled on the server: the backend stops waiting on the lock while
    // the lock is still held.
    assert!(
        wait_idle(pid).await,
        "the abandoned statement was not cancelled"
    );
    drop(holder);

    let again = storage.request_lease(&request).await.unwrap();
    assert_eq!(again.status, LeaseStatus::Leader);
    assert_eq!(again.fencing_token.get(), 1);
    assert_eq!(sessions(&name).await, before, "the connection was replaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_whose_calls_all_time_out_opens_no_more_sessions_than_its_pool() {
    let guard = fresh_prefix();
    let name = format!("tenure-timeouts-{}", guard.prefix());
    let size = 2;
    let storage = storage(&guard, &name, size).await;
    let _holder = hold_lock(guard.prefix(), "l").await;
    let request = LeaseRequest::new("l", "a", 0, Duration::from_secs(30));

    let mut seen = HashSet::new();
    for round in 0..10 {
        let calls = (0..size * 2).map(|_| {
            let storage = storage.clone();
            let request = request.clone();
            tokio::spawn(async move { storage.request_lease(&request).await })
        });
        for call in calls.collect::<Vec<_>>() {
            let err = call.await.unwrap().unwrap_err();
            assert!(err.is_unconfirmed(), "round {round}: {err:?}");
        }
        seen.extend(sessions(&name).await);
    }
    // Without cancel-and-keep every timed-out call made the pool open a new session (40 here).
    assert!(
        seen.len() <= size,
        "{} sessions opened for a pool of {size}: {seen:?}",
        seen.len()
    );
}
