//! The processor's hot path, with and without the `metrics` feature: events projected per
//! second on the in-memory backend, in batches of 10 and of 100 (two storage calls, a read
//! and a bookmark, per batch, each one timed and counted with the feature on).
//!
//! `cargo xtask bench metrics` runs it twice, without and with the feature (and then with the
//! Prometheus recorder installed, as `tenure run --metrics-listen` has it), and prints the ratio: the
//! figures must not move with metrics on.
//!
//! `cargo bench -p tenure-election --bench processor [--features metrics]` runs one build.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tenure_election::{
    Batch, ElectorConfig, LeaderElector, Processor, ProcessorConfig, Projection,
};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{AppendRequest, EventStorage, MAX_APPEND_EVENTS, NewEvent};
use tokio::sync::Notify;

const EVENTS: usize = 100_000;
const ROUNDS: usize = 7;

/// Counts events, and says when all have been seen.
struct Count {
    seen: Arc<AtomicUsize>,
    done: Arc<Notify>,
}

impl Projection for Count {
    type Error = std::convert::Infallible;

    async fn project(&mut self, batch: Batch) -> Result<(), Self::Error> {
        let seen =
            self.seen.fetch_add(batch.events().len(), Ordering::Relaxed) + batch.events().len();
        if seen >= EVENTS {
            self.done.notify_one();
        }
        Ok(())
    }
}

async fn round(n: usize, batch: usize) -> Duration {
    let memory = MemoryEventStorage::new();
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|i| NewEvent::new(format!("order-{i}"), "OrderPlaced", json!({ "n": i })))
        .collect();
    for chunk in events.chunks(MAX_APPEND_EVENTS) {
        memory
            .append(&AppendRequest::new(chunk.to_vec()))
            .await
            .unwrap();
    }
    let storage: Arc<dyn EventStorage> = Arc::new(memory);
    let reader = format!("bench-{n}");
    let elector = LeaderElector::start(
        storage.clone(),
        ElectorConfig::new(reader.clone(), Duration::from_secs(30)),
    )
    .unwrap();
    elector.wait_for_leadership().await.unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(Notify::new());
    let config = ProcessorConfig::new(reader)
        .with_batch_size(batch)
        .with_idle_poll(Duration::from_millis(1));
    let mut processor = Processor::new(
        storage,
        elector,
        config,
        Count {
            seen: seen.clone(),
            done: done.clone(),
        },
    )
    .unwrap();
    let started = Instant::now();
    processor.run_until(done.notified()).await.unwrap();
    let took = started.elapsed();
    assert!(seen.load(Ordering::Relaxed) >= EVENTS);
    processor.elector().shutdown().await.unwrap();
    took
}

fn main() {
    let recorder = std::env::args().any(|a| a == "--with-recorder");
    #[cfg(feature = "metrics")]
    if recorder {
        // The recorder `tenure run --metrics-listen` installs, without its listener.
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("installing the recorder");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let setting = match (cfg!(feature = "metrics"), recorder) {
        (false, _) => "metrics off",
        (true, false) => "metrics on, no recorder",
        (true, true) => "metrics on, recorder installed",
    };
    for batch in [10, 100] {
        let mut rates: Vec<f64> = (0..ROUNDS)
            .map(|n| EVENTS as f64 / runtime.block_on(round(n, batch)).as_secs_f64())
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[ROUNDS / 2];
        println!(
            "processor events/s, batches of {batch} ({setting}): median {median:.0} of {ROUNDS} rounds of {EVENTS} events"
        );
    }
}
