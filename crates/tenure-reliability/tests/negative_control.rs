//! The checker and the workload can fail: the same partition scenario, run once with an elector
//! that ignores the self-demotion rule (it believes in its leadership until an answer says
//! otherwise, as a naive loop around `request_lease` does) and once with `LeaderElector`.
//! The first must be caught as two overlapping leaders; the second must be clean.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_election::{ElectorConfig, LeaderElector};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{EventStorage, FencingToken, LeaseRequest};
use tenure_reliability::clock::TokioClock;
use tenure_reliability::recorder::RecordingStorage;
use tenure_tck::history::{History, Tenure, Violation};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(333);

/// Polls `request_lease` and believes it leads from a holder answer until an answer says it
/// does not; errors and hangs change nothing. Records its spans.
async fn naive(storage: Arc<RecordingStorage>, history: Arc<History>, owner: &str, until: Instant) {
    let request = LeaseRequest::new("l", owner, 0, TTL);
    let mut leading: Option<(FencingToken, Instant)> = None;
    while Instant::now() < until {
        let sent = Instant::now();
        match storage.request_lease(&request).await {
            Ok(r) if r.status.holds_lease() => {
                leading.get_or_insert((r.fencing_token, Instant::now()));
            }
            Ok(_) => {
                if let Some((token, from)) = leading.take() {
                    history.record_tenure(span(owner, token, from, Instant::now()));
                }
            }
            Err(_) => {} // "probably still leader"
        }
        tokio::time::sleep_until(sent + POLL).await;
    }
    if let Some((token, from)) = leading {
        history.record_tenure(span(owner, token, from, Instant::now()));
    }
}

fn span(owner: &str, token: FencingToken, from: Instant, until: Instant) -> Tenure {
    Tenure {
        lease_name: "l".into(),
        owner: owner.into(),
        token,
        from,
        until,
    }
}

fn setup() -> (Arc<RecordingStorage>, Arc<History>) {
    let history = Arc::new(History::new());
    let memory = Arc::new(MemoryEventStorage::with_clock(Arc::new(TokioClock::new())));
    let storage = Arc::new(RecordingStorage::new(memory, Arc::clone(&history)));
    (storage, history)
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_does_not_demote_itself_is_caught() {
    let (storage, history) = setup();
    let end = Instant::now() + Duration::from_secs(10);
    let a = tokio::spawn(naive(storage.clone(), history.clone(), "a", end));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = tokio::spawn(naive(storage.clone(), history.clone(), "b", end));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // a's calls hang for three ttls, as in a partition.
    storage.hang("a", Instant::now() + TTL * 3);
    a.await.unwrap();
    b.await.unwrap();
    let report = history.check();
    println!("naive electors: {report}");
    assert!(
        report
            .violations
            .iter()
            .any(|v| matches!(v, Violation::OverlappingLeaders { .. })),
        "the checker missed a leader that did not demote itself: {report}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_elector_demotes_itself_in_the_same_scenario() {
    let (storage, history) = setup();
    let config = |owner: &str| {
        ElectorConfig::new("l", TTL)
            .with_owner(owner)
            .with_poll_interval(POLL)
    };
    let dyn_storage: Arc<dyn EventStorage> = storage.clone();
    let a = LeaderElector::start(dyn_storage.clone(), config("a")).unwrap();
    let a_lease = a.wait_for_leadership().await.unwrap();
    let a_from = Instant::now();
    let b = LeaderElector::start(dyn_storage, config("b")).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    storage.hang("a", Instant::now() + TTL * 3);
    a_lease.lost().await;
    history.record_tenure(span("a", a_lease.token(), a_from, Instant::now()));
    let b_lease = b.wait_for_leadership().await.unwrap();
    history.record_tenure(span(
        "b",
        b_lease.token(),
        Instant::now(),
        Instant::now() + TTL,
    ));
    let report = history.check();
    println!("LeaderElector: {report}");
    assert!(report.violations.is_empty(), "{report}");
    assert!(b_lease.token() > a_lease.token());
    a.abort();
    b.abort();
}
