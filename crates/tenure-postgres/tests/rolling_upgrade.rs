//! A rolling upgrade: a process of the previous release (calling `request_lease_v1`) and one
//! of this release (calling `request_lease_v4` with its sightings) side by side on one lease.
//!
//! The schema starts as a release before the sightings left it (every migration before
//! `0006_lease_functions_v2.sql`), and the old process elects alone; then the new process is
//! built with `SchemaMode::Ensure`, which adds v2, the triggers, v3 and v4 beside v1 without
//! touching it. The two then
//! take turns: the leader renews while the other stands by, then stops (half the rounds by
//! releasing, half by simply going silent) and the other takes over. Every grant must go to
//! one owner at a time (a new owner's first grant arrives no earlier than a ttl after the old
//! owner sent its last renewal, or after its release), and the fencing tokens must be 1, 2, 3,
//! … with one tenure each, whichever version gave them.
//!
//! And the bound of the registrations' priorities that v4 answers unchallenged renewals from
//! (`0009_lease_functions_v4.sql`): an old process that knows nothing of it registers, then
//! raises its priority above the new holder's; the holder's next renewal must hear of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::{admin, builder, fresh_prefix};
use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
use tenure_postgres::{PostgresDriver, SchemaMode};

/// Long enough that a holder renewing every [`POLL`], with a call of the other side's in
/// between, does not lapse on a loaded machine (at 300 ms it could).
const TTL: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(100);
/// The ttl of the old process's first tenure, which must outlive the new process's `Ensure`.
const BEFORE_THE_ROUNDS: Duration = Duration::from_secs(60);

/// The previous release's DDL: every shipped migration before v2.
fn previous_release_ddl(prefix: &str) -> String {
    let ddl = tenure_postgres::ddl(prefix).unwrap();
    let cut = ddl
        .find("-- migrations/postgres/0006_lease_functions_v2.sql")
        .expect("the v2 migration is shipped");
    ddl[..cut].to_owned()
}

async fn rolling_upgrade(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let p = guard.prefix().to_owned();
    admin()
        .await
        .batch_execute(&tenure_pg_test::serialized(&previous_release_ddl(&p)))
        .await
        .unwrap();

    let old = builder(driver, &guard)
        .schema_mode(SchemaMode::None)
        .build()
        .await
        .unwrap();
    old.call_request_lease_v1(true);
    let lease = "upgrade";
    let request = |owner: &str| LeaseRequest::new(lease, owner, 0, TTL);

    // The old process alone, before the new schema exists.
    let long = LeaseRequest::new(lease, "old", 0, BEFORE_THE_ROUNDS);
    let first = old.request_lease(&long).await.unwrap();
    assert_eq!(first.status, LeaseStatus::Leader);
    assert_eq!(first.fencing_token.get(), 1);

    // The new process's Ensure adds v2 and leaves v1 as it was.
    let new = builder(driver, &guard)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .unwrap();
    let renewed = old.request_lease(&long).await.unwrap();
    assert_eq!(renewed.status, LeaseStatus::Leader, "v1 broke after Ensure");
    assert_eq!(renewed.fencing_token.get(), 1);

    // (storage, owner) of each side; the old one leads first.
    let sides = [(&old, "old"), (&new, "new")];
    let mut leader = 0usize;
    let mut token = 1u64;
    // The instant the current leader sent its last confirmed renewal (or released).
    let mut last_grant_sent = Instant::now();
    let mut handovers = 0;
    for round in 0..8 {
        let (held, holder) = sides[leader];
        let (other, contender) = sides[1 - leader];
        // A few renewals while the other stands by and sees them.
        for _ in 0..3 {
            let sent = Instant::now();
            let answer = held.request_lease(&request(holder)).await.unwrap();
            assert_eq!(
                answer.status,
                LeaseStatus::Leader,
                "round {round}: {holder}"
            );
            assert_eq!(answer.fencing_token.get(), token, "round {round}: renewal");
            last_grant_sent = sent;
            let seen = other.request_lease(&request(contender)).await.unwrap();
            assert_eq!(
                seen.status,
                LeaseStatus::Standby,
                "round {round}: {contender}"
            );
            assert_eq!(seen.fencing_token.get(), token);
            tokio::time::sleep(POLL).await;
        }
        let released = round % 2 == 0;
        if released {
            held.release_lease(lease, holder).await.unwrap();
        }
        // The other polls until it leads.
        let started = Instant::now();
        let taken = loop {
            let answer = other.request_lease(&request(contender)).await.unwrap();
            let received = Instant::now();
            if answer.status == LeaseStatus::Leader {
                break (answer, received);
            }
            assert_eq!(
                answer.fencing_token.get(),
                token,
                "round {round}: standby token"
            );
            assert!(
                started.elapsed() < TTL * 10,
                "round {round}: {contender} never took over"
            );
            tokio::time::sleep(POLL).await;
        };
        let (answer, received) = taken;
        token += 1;
        assert_eq!(
            answer.fencing_token.get(),
            token,
            "round {round}: the next tenure's token"
        );
        assert_eq!(answer.lease.owner, contender);
        if !released {
            assert!(
                received >= last_grant_sent + TTL,
                "round {round}: {contender} led {:?} after {holder}'s last renewal was sent, \
                 within its ttl",
                received - last_grant_sent
            );
        }
        // The old holder is told it stands by now, with the new token.
        let after = held.request_lease(&request(holder)).await.unwrap();
        assert_eq!(
            after.status,
            LeaseStatus::Standby,
            "round {round}: {holder}"
        );
        assert_eq!(after.fencing_token.get(), token);
        handovers += 1;
        leader = 1 - leader;
    }
    assert_eq!(handovers, 8);
    assert_eq!(token, 9, "one tenure per handover, tokens 1 to 9");
    let snapshot = new.get_leases().await.unwrap();
    assert_eq!(snapshot.get(lease).unwrap().fencing_token.get(), 9);
    old.close().await.unwrap();
    new.close().await.unwrap();
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_processes_elect_side_by_side_on_deadpool() {
    rolling_upgrade(PostgresDriver::Deadpool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_processes_elect_side_by_side_on_sqlx() {
    rolling_upgrade(PostgresDriver::Sqlx09).await;
}

/// A v4 holder among old standbys: the bound is set by a renewal that reads the
/// registrations, then raised by the trigger when an old process (v1) raises its priority,
/// and the holder's next renewal is asked to step down; once that standby goes, the holder
/// leads again.
async fn an_old_standby_raising_its_priority_reaches_a_new_holder(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let new = builder(driver, &guard).build().await.unwrap();
    let old = builder(driver, &guard)
        .schema_mode(SchemaMode::None)
        .build()
        .await
        .unwrap();
    old.call_request_lease_v1(true);
    let lease = "bound";
    let ttl = Duration::from_secs(60);
    let holder = LeaseRequest::new(lease, "new", 5, ttl);
    let renew = || async { new.request_lease(&holder).await.unwrap().status };

    assert_eq!(renew().await, LeaseStatus::Leader);
    let standby = old
        .request_lease(&LeaseRequest::new(lease, "old", 5, ttl))
        .await
        .unwrap();
    assert_eq!(standby.status, LeaseStatus::Standby);
    // The first renewal among standbys reads them and sets the bound; the next one is answered
    // from the record.
    assert_eq!(renew().await, LeaseStatus::Leader);
    assert_eq!(bound(guard.prefix(), lease).await, Some(5));
    assert_eq!(renew().await, LeaseStatus::Leader);

    let raised = old
        .request_lease(&LeaseRequest::new(lease, "old", 9, ttl))
        .await
        .unwrap();
    assert_eq!(raised.status, LeaseStatus::Standby);
    assert_eq!(bound(guard.prefix(), lease).await, Some(9), "not raised");
    assert_eq!(renew().await, LeaseStatus::LeaderStepDownRequested);

    old.release_lease(lease, "old").await.unwrap();
    assert_eq!(renew().await, LeaseStatus::Leader);
    assert_eq!(
        bound(guard.prefix(), lease).await,
        None,
        "no registration is left"
    );
    old.close().await.unwrap();
    new.close().await.unwrap();
    drop(guard);
}

/// The lease's `contender_priority_bound`, as stored.
async fn bound(prefix: &str, lease: &str) -> Option<i64> {
    admin()
        .await
        .query_one(
            &format!("SELECT contender_priority_bound FROM {prefix}leases WHERE lease_name = $1"),
            &[&lease],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_standby_raising_its_priority_reaches_a_new_holder_on_deadpool() {
    an_old_standby_raising_its_priority_reaches_a_new_holder(PostgresDriver::Deadpool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_standby_raising_its_priority_reaches_a_new_holder_on_sqlx() {
    an_old_standby_raising_its_priority_reaches_a_new_holder(PostgresDriver::Sqlx09).await;
}
