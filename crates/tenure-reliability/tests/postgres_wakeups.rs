//! The election workload on PostgreSQL with wake-ups on (issue 15): 16 electors on one lease
//! under release and step-down churn, woken by LISTEN/NOTIFY, keep the zero-violation result
//! of the history checker. A subscription of its own counts what the listener delivered, so
//! that the run shows the wake-ups were in play, not only that polling was safe.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenure_pg_test::TempDatabase;
use tenure_ports::{Capability, EventStorage, LeaseChange, LeaseChangeKind};
use tenure_reliability::workload::{self, WorkloadConfig};

#[derive(Default)]
struct Heard {
    released: AtomicU64,
    acquired: AtomicU64,
    step_down_requested: AtomicU64,
    missed: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_electors_woken_under_churn_zero_violations() {
    let server = tenure_pg_test::required_server();
    let db = TempDatabase::create(&server.url).await.unwrap();
    let storage = tenure_reliability::postgres_storage(&db.url(), 8)
        .await
        .unwrap();
    assert!(storage.capabilities().contains(Capability::LeaseChanges));

    let heard = Arc::new(Heard::default());
    let mut changes = storage.lease_changes().unwrap();
    let counting = tokio::spawn({
        let heard = Arc::clone(&heard);
        async move {
            while let Some(change) = changes.next().await {
                let counter = match change {
                    LeaseChange::Changed { kind, .. } => match kind {
                        LeaseChangeKind::Released => &heard.released,
                        LeaseChangeKind::Acquired => &heard.acquired,
                        LeaseChangeKind::StepDownRequested => &heard.step_down_requested,
                        _ => continue,
                    },
                    LeaseChange::Missed => &heard.missed,
                    _ => continue,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let config = WorkloadConfig {
        max_duration: Duration::from_secs(20),
        min_calls: usize::MAX,
        // About one release in ten units of work, as in the fault runs: many handovers.
        release_chance: 0.1,
        pause_chance: 0.02,
        ..WorkloadConfig::standard("woken", usize::MAX)
    };
    let report = workload::run(&config, storage.clone()).await;
    counting.abort();
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "postgres workload with wake-ups: heard {} released, {} acquired, {} step-down \
         requested, {} missed; {report}",
        count(&heard.released),
        count(&heard.acquired),
        count(&heard.step_down_requested),
        count(&heard.missed),
    );
    assert!(report.history.elections > 10, "{report}");
    assert!(report.releases > 10, "too little churn: {report}");
    assert!(count(&heard.released) > 0, "no release was ever notified");
    assert!(
        count(&heard.acquired) > 0,
        "no acquisition was ever notified"
    );
    assert!(report.passed(), "{report}");
    storage.close().await.unwrap();
}
