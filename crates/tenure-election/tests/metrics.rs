//! The `metrics` feature, recorded with the `metrics` ecosystem's test recorder
//! (`metrics_util::debugging::DebuggingRecorder`) through an election with a lapse and a
//! takeover, a step-down and two releases, in paused tokio time so that every figure is exact.
//!
//! The debugging recorder's snapshots are destructive (every counter and gauge is swapped to
//! zero, every histogram drained), so `Recorded` adds them up: for counters and for the leader
//! gauge, which electors move up and down rather than set, the sums are the values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::SystemTime;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use support::{Backend, Fault, ms};
use tenure_election::{Batch, ElectorConfig, Processor, ProcessorConfig};
use tenure_ports::{AppendRequest, EventQuery, EventStorage, NewEvent, ReadOptions};
use tokio::time::sleep_until;

const LEASE: &str = "order-dispatcher";

/// ttl 300 ms: poll 100 ms, call timeout 50 ms, safety margin 3 ms.
fn config(owner: &str) -> ElectorConfig {
    ElectorConfig::new(LEASE, ms(300)).with_owner(owner)
}

/// Every snapshot so far, added up, by `name{label=value,…}`.
struct Recorded {
    snapshotter: Snapshotter,
    sums: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

impl Recorded {
    fn new(snapshotter: Snapshotter) -> Self {
        Recorded {
            snapshotter,
            sums: BTreeMap::new(),
            histograms: BTreeMap::new(),
        }
    }

    fn refresh(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            match value {
                DebugValue::Counter(n) => *self.sums.entry(name).or_default() += n as f64,
                DebugValue::Gauge(g) => *self.sums.entry(name).or_default() += g.into_inner(),
                DebugValue::Histogram(values) => self
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(values.into_iter().map(|v| v.into_inner())),
            }
        }
    }

    /// A counter's or the leader gauge's value; `None` if never recorded.
    fn get(&mut self, name: &str) -> Option<f64> {
        self.refresh();
        self.sums.get(name).copied()
    }

    fn histogram(&mut self, name: &str) -> Vec<f64> {
        self.refresh();
        self.histograms.get(name).cloned().unwrap_or_default()
    }

    /// Every series whose name starts with `prefix`, with its value.
    fn series(&mut self, prefix: &str) -> BTreeMap<String, f64> {
        self.refresh();
        self.sums
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, value)| (name.clone(), *value))
            .collect()
    }
}

fn leader_gauge(recorded: &mut Recorded) -> Option<f64> {
    recorded.get("tenure_leader{lease=order-dispatcher}")
}

#[tokio::test(start_paused = true)]
async fn an_election_with_a_lapse_a_takeover_a_step_down_and_releases_is_counted_exactly() {
    let recorder = DebuggingRecorder::new();
    let mut recorded = Recorded::new(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(&recorder);

    let backend = Backend::new();
    let at = |t: u64| backend.origin + ms(t);

    // 0 ms: a leads (token 1), renews at 100 and 200; its storage hangs from 250 on, so the
    // requests of 300 and 400 time out (at 350 and 450) and leadership lapses at 497.
    let (a, a_storage) = backend.elector(config("a"));
    // 30 ms: b stands by (30, 130 … 430) and takes over at 530 (token 2), 30 ms after a's
    // lease expired on the storage (heartbeat 200 + ttl 300).
    sleep_until(at(30)).await;
    let (b, _) = backend.elector(config("b"));
    let b_work = tokio::spawn({
        let b = b.clone();
        async move {
            // Finish at once when asked to step down: run_while_leader then releases.
            b.run_while_leader(|lease| async move { lease.step_down_requested().await })
                .await
        }
    });
    sleep_until(at(250)).await;
    assert_eq!(leader_gauge(&mut recorded), Some(1.0), "a leads");
    a_storage.set(Fault::Hang);

    sleep_until(at(510)).await;
    assert_eq!(leader_gauge(&mut recorded), Some(0.0), "a lapsed at 497");
    a.abort(); // drops a's hanging request of 500: it is not counted
    sleep_until(at(540)).await;
    assert_eq!(leader_gauge(&mut recorded), Some(1.0), "b took over at 530");

    // 560 ms: c (priority 10) stands by; b's renewal at 630 is asked to step down, its work
    // returns, b releases at once; c acquires at its next request, 660 (token 3).
    sleep_until(at(560)).await;
    let (c, _) = backend.elector(config("c").with_priority(10));
    sleep_until(at(640)).await;
    assert_eq!(leader_gauge(&mut recorded), Some(0.0), "b released at 630");
    sleep_until(at(670)).await;
    assert_eq!(leader_gauge(&mut recorded), Some(1.0), "c leads from 660");
    assert_eq!(c.state().leader_token().map(|t| t.get()), Some(3));

    // 700 ms: b (standing aside, not leading) withdraws, c releases.
    sleep_until(at(700)).await;
    b_work.abort();
    b.shutdown().await.unwrap();
    c.shutdown().await.unwrap();
    assert_eq!(leader_gauge(&mut recorded), Some(0.0));

    let transitions = recorded.series("tenure_transitions_total");
    let expected: BTreeMap<String, f64> = [
        ("acquired", 3.0),            // a at 0, b at 530, c at 660
        ("renewed", 2.0),             // a at 100 and 200
        ("lost_lapsed", 1.0),         // a at 497
        ("step_down_requested", 1.0), // b at 630
        ("released", 2.0),            // b at 630, c at 700 (b's withdrawal at 700 is none)
    ]
    .into_iter()
    .map(|(kind, n)| {
        (
            format!("tenure_transitions_total{{kind={kind},lease={LEASE}}}"),
            n,
        )
    })
    .collect();
    assert_eq!(transitions, expected);

    // Requests: a 0, 100, 200, 300 (timeout), 400 (timeout); b 30 … 630 (7); c 560, 660.
    // Releases: b at 630 and 700, c at 700. The independent record agrees.
    let sent_requests = backend
        .calls()
        .iter()
        .filter(|c| c.kind == "request")
        .count();
    assert_eq!(
        sent_requests, 15,
        "the backend saw a's dropped request of 500 too"
    );
    assert_eq!(
        recorded.series("tenure_storage_"),
        BTreeMap::from([
            (
                "tenure_storage_calls_total{op=release_lease}".to_owned(),
                3.0
            ),
            (
                "tenure_storage_calls_total{op=request_lease}".to_owned(),
                14.0
            ),
            (
                "tenure_storage_errors_total{kind=timeout,op=request_lease}".to_owned(),
                2.0
            ),
        ])
    );
    // The answered calls took no time: paused time, in memory.
    assert_eq!(
        recorded.histogram("tenure_storage_call_seconds{op=request_lease}"),
        vec![0.0; 12]
    );
    assert_eq!(
        recorded.histogram("tenure_storage_call_seconds{op=release_lease}"),
        vec![0.0; 3]
    );
    // b: from a's expiry at 500 to 530; c: b released before its expiry, between c's standby
    // request of 560 and its acquisition at 660.
    assert_eq!(
        recorded.histogram("tenure_handover_seconds{lease=order-dispatcher}"),
        vec![0.030, 0.100]
    );
}

#[tokio::test(start_paused = true)]
async fn a_processor_counts_its_events_and_batches_and_its_bookmark_lag() {
    let recorder = DebuggingRecorder::new();
    let mut recorded = Recorded::new(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(&recorder);

    let backend = Backend::new();
    let events = (1..=250).map(|n| NewEvent::new(format!("order-{n}"), "OrderPlaced", json!({})));
    backend
        .memory
        .append(&AppendRequest::new(events.collect()))
        .await
        .unwrap();
    let last = backend
        .memory
        .read_events(&EventQuery::all(), ReadOptions::backwards().with_limit(1))
        .await
        .unwrap();
    let last_recorded_at = last[0].recorded_at.to_system_time();

    let (elector, _) = backend.elector(config("a"));
    let (progress, mut projected) = tokio::sync::watch::channel(0);
    let projection = move |batch: Batch| {
        let progress = progress.clone();
        async move {
            progress.send_modify(|n| *n += batch.len());
            Ok::<(), std::io::Error>(())
        }
    };
    let before = SystemTime::now();
    let mut processor = Processor::new(
        std::sync::Arc::new(backend.handle()),
        elector.clone(),
        ProcessorConfig::new("dispatcher").with_batch_size(100),
        projection,
    )
    .unwrap();
    processor
        .run_until(async move {
            let _ = projected.wait_for(|n| *n == 250).await;
        })
        .await
        .unwrap();
    let after = SystemTime::now();
    elector.shutdown().await.unwrap();

    assert_eq!(
        recorded.get("tenure_processor_events_total{reader=dispatcher}"),
        Some(250.0)
    );
    assert_eq!(
        recorded.get("tenure_processor_batches_total{reader=dispatcher}"),
        Some(3.0)
    );
    // Set once per batch: the last is the lag behind event 250 when it was bookmarked.
    let lag = recorded
        .get("tenure_processor_bookmark_lag_seconds{reader=dispatcher}")
        .unwrap();
    let bound = |t: SystemTime| t.duration_since(last_recorded_at).unwrap();
    assert!(
        (bound(before).as_secs_f64()..=bound(after).as_secs_f64()).contains(&lag),
        "lag {lag} s outside the wall-clock interval of the run"
    );
    // One get_bookmark, three reads and three bookmarks (the run stopped after the third).
    assert_eq!(
        recorded.series("tenure_storage_calls_total{op=bookmark}"),
        BTreeMap::from([("tenure_storage_calls_total{op=bookmark}".to_owned(), 3.0)])
    );
    assert_eq!(
        recorded.get("tenure_storage_calls_total{op=get_bookmark}"),
        Some(1.0)
    );
}
