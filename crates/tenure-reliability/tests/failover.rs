//! A database failover under the election workload: a throwaway primary and a streaming
//! standby on loopback ports; 16 electors run against the primary; the primary is killed
//! (immediate stop: a crash), the standby promoted, and the electors pointed at it. The
//! history checker judges the whole run, before and after.
//!
//! * Synchronous replication (`synchronous_standby_names = '*'`): a commit is acknowledged
//!   only once the standby has it, so the promoted standby knows every token anybody was
//!   given: zero violations.
//! * Asynchronous replication: what the standby had not received when the primary died is
//!   lost, acquisitions included. To make that certain rather than a race, the test cuts the
//!   standby off (a wrong `primary_conninfo`) and kills the primary only once it has issued a
//!   token the standby never saw. The checker must then find tokens going backwards and a
//!   token given to two owners: what `docs/postgres.md` warns of.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_pg_test::cluster::{Cluster, StopMode};
use tenure_ports::EventStorage;
use tenure_reliability::switch::SwitchableStorage;
use tenure_reliability::workload::{self, WorkloadConfig, WorkloadReport};
use tenure_tck::history::Violation;
use tokio::time::{Instant, sleep};

const LEASE: &str = "failover";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Replication {
    Synchronous,
    Asynchronous,
}

async fn query_i64(url: &str, sql: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(connection);
    let value: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
    drop(client);
    let _ = task.await;
    value
}

async fn execute(url: &str, sql: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = task.await;
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(100)).await;
    }
}

const MAX_TOKEN: &str = "SELECT coalesce(max(fencing_token), 0)::int8 FROM tenure_leases";

/// Runs the workload through a failover; returns its report and how many lease requests the
/// promoted standby answered.
async fn failover(replication: Replication) -> (WorkloadReport, u64) {
    let primary = Cluster::create().unwrap();
    primary.start().unwrap();
    let standby = Cluster::standby_of(&primary).unwrap();
    standby.start().unwrap();
    let expected_state = match replication {
        Replication::Synchronous => {
            // Configured after the base backup, so that the promoted standby does not wait
            // for a standby of its own.
            primary
                .configure(&[("synchronous_standby_names", "'*'")])
                .unwrap();
            primary.reload().unwrap();
            "sync"
        }
        Replication::Asynchronous => "async",
    };
    let state = format!(
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = \
         '{expected_state}'"
    );
    wait_for("the standby to stream", async || {
        query_i64(&primary.url(), &state).await == 1
    })
    .await;

    let first: Arc<dyn EventStorage> = tenure_reliability::postgres_storage(&primary.url(), 8)
        .await
        .unwrap();
    let switch = Arc::new(SwitchableStorage::new(first));
    let config = WorkloadConfig {
        max_duration: Duration::from_secs(14),
        min_calls: usize::MAX,
        pause_chance: 0.0,
        release_chance: 0.1,
        ..WorkloadConfig::standard(LEASE, usize::MAX)
    };
    let storage: Arc<dyn EventStorage> = switch.clone();
    let run = tokio::spawn(async move { workload::run(&config, storage).await });

    sleep(Duration::from_secs(4)).await;
    if replication == Replication::Asynchronous {
        execute(
            &standby.url(),
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'",
        )
        .await;
        execute(&standby.url(), "SELECT pg_reload_conf()").await;
        let seen = query_i64(&standby.url(), MAX_TOKEN).await;
        wait_for("a token the standby never received", async || {
            query_i64(&primary.url(), MAX_TOKEN).await > seen
                && query_i64(&standby.url(), MAX_TOKEN).await == seen
        })
        .await;
    }
    primary.stop(StopMode::Immediate).unwrap();
    standby.promote().unwrap();
    let second: Arc<dyn EventStorage> = tenure_reliability::postgres_storage(&standby.url(), 8)
        .await
        .unwrap();
    switch.switch_to(second);
    let report = run.await.unwrap();
    (report, switch.answered_since_switch())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_replication_keeps_every_token_through_a_failover() {
    let (report, answered) = failover(Replication::Synchronous).await;
    println!("failover, synchronous replication: {answered} answers after the failover; {report}");
    assert!(
        answered > 100,
        "the electors did not carry on after the failover: {report}"
    );
    assert!(report.history.elections > 5, "{report}");
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_replication_can_lose_tokens_in_a_failover() {
    let (report, answered) = failover(Replication::Asynchronous).await;
    println!("failover, asynchronous replication: {answered} answers after the failover; {report}");
    assert!(
        answered > 100,
        "the electors did not carry on after the failover: {report}"
    );
    let violations = &report.history.violations;
    assert!(
        violations
            .iter()
            .any(|v| matches!(v, Violation::TokenWentBackwards { .. })),
        "a lost acquisition must show as a token going backwards: {report}"
    );
}
