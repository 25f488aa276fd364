//! The election workload against the in-memory backend, in paused tokio time: 16 electors,
//! random priorities, ttls from 300 ms to 2 s, random releases and paused leaders, at least
//! 100,000 lease calls, zero violations.

use std::sync::Arc;

use tenure_memory::MemoryEventStorage;
use tenure_reliability::clock::TokioClock;
use tenure_reliability::workload::{self, WorkloadConfig};

#[tokio::test(start_paused = true)]
async fn sixteen_electors_100k_calls_zero_violations() {
    let storage = Arc::new(MemoryEventStorage::with_clock(Arc::new(TokioClock::new())));
    let config = WorkloadConfig::standard("stress", 100_000);
    let report = workload::run(&config, storage).await;
    println!("memory workload: {report}");
    assert!(report.history.calls >= 100_000, "{report}");
    assert!(
        report.history.elections > 100,
        "too few elections to mean much: {report}"
    );
    assert!(report.pauses > 10, "too few pauses injected: {report}");
    assert!(
        report.history.writes.1 > 0,
        "no stale write was ever refused: {report}"
    );
    assert!(report.passed(), "{report}");
}
