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
//!   standby off and kills the primary only once it has issued a token the standby never saw
//!   ([`ReplicatedPair::diverge`]). The checker must then find tokens going backwards: what
//!   `docs/postgres.md` warns of.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_ports::EventStorage;
use tenure_reliability::failover::{ReplicatedPair, Replication};
use tenure_reliability::switch::SwitchableStorage;
use tenure_reliability::workload::{self, WorkloadConfig, WorkloadReport};
use tenure_tck::history::Violation;

/// Runs the workload through one failover; returns its report and how many lease requests
/// the promoted standby answered.
async fn failover(replication: Replication) -> (WorkloadReport, u64) {
    let pair = ReplicatedPair::start(replication).await.unwrap();
    let first: Arc<dyn EventStorage> = tenure_reliability::postgres_storage(&pair.primary.url(), 8)
        .await
        .unwrap();
    let switch = Arc::new(SwitchableStorage::new(first));
    let config = WorkloadConfig {
        max_duration: Duration::from_secs(14),
        min_calls: usize::MAX,
        pause_chance: 0.0,
        release_chance: 0.1,
        ..WorkloadConfig::standard("failover", usize::MAX)
    };
    let storage: Arc<dyn EventStorage> = switch.clone();
    let run = tokio::spawn(async move { workload::run(&config, storage).await });

    tokio::time::sleep(Duration::from_secs(4)).await;
    if replication == Replication::Asynchronous {
        pair.diverge().await.unwrap();
    }
    let promoted = pair.fail_over().await.unwrap();
    let second: Arc<dyn EventStorage> = tenure_reliability::postgres_storage(&promoted.url(), 8)
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
    // The replica never saw the last acquisitions: it gives their tokens again. That shows
    // as a token going backwards (when a later token had been seen) or, when the lost
    // acquisition was the last one, as one token given to two owners.
    assert!(
        report.history.violations.iter().any(|v| matches!(
            v,
            Violation::TokenWentBackwards { .. } | Violation::TokenSharedByOwners { .. }
        )),
        "a lost acquisition must show as a token given again: {report}"
    );
}
