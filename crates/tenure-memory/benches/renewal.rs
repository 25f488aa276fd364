//! `MemoryEventStorage::request_lease` renewals against a bare `Mutex<HashMap>` doing the same
//! bookkeeping, side by side in one run, on one thread and on two.
//!
//! The baseline is what a hand-rolled in-process lease would do per renewal and no less: lock;
//! find the lease by name; check that the caller holds it and that it is live on the clock
//! (read under the lock, as the storage reads it); update heartbeat, ttl and priority; refresh
//! the caller's registration; copy the record out for the answer. It validates nothing, makes
//! no decision beyond "holder and live", and keeps no registry to prune: the ratio is what
//! Tenure's validation, state machine and SPI cost on top of that.
//!
//! Each configuration is measured in interleaved rounds (baseline, storage, baseline, …) and the
//! median round is reported, so that the other load on a shared machine hits both alike.
//! `TENURE_BENCH_ROUNDS` (default 15) and `TENURE_BENCH_CALLS` (default 200,000 per thread per
//! round) change the length.
//!
//! Run with `cargo bench -p tenure-memory --bench renewal`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tenure_memory::MemoryEventStorage;
use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};

/// Polls a future that completes without waiting (every memory call does) to its end.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// The record, copied out whole for the answer as the storage does (hence fields never read).
#[allow(dead_code)]
#[derive(Clone, Debug)]
struct BareRecord {
    lease_name: String,
    owner: String,
    priority: i64,
    token: u64,
    acquired_at: i64,
    heartbeat_at: i64,
    ttl: Duration,
}

#[derive(Debug)]
struct BareRegistration {
    priority: i64,
    last_seen: i64,
    ttl: Duration,
}

#[derive(Default)]
struct BareLease {
    record: Option<BareRecord>,
    registrations: HashMap<String, BareRegistration>,
}

/// The baseline: a bare `Mutex<HashMap>`.
#[derive(Default)]
struct Bare {
    leases: Mutex<HashMap<String, BareLease>>,
}

fn micros_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

impl Bare {
    fn acquire(&self, lease: &str, owner: &str, ttl: Duration) {
        let now = micros_now();
        let mut leases = self.leases.lock().unwrap();
        let entry = leases.entry(lease.to_owned()).or_default();
        entry.record = Some(BareRecord {
            lease_name: lease.to_owned(),
            owner: owner.to_owned(),
            priority: 0,
            token: 1,
            acquired_at: now,
            heartbeat_at: now,
            ttl,
        });
        entry.registrations.insert(
            owner.to_owned(),
            BareRegistration {
                priority: 0,
                last_seen: now,
                ttl,
            },
        );
    }

    /// One renewal: `Some(record)` when the caller holds the live lease.
    fn renew(&self, lease: &str, owner: &str, priority: i64, ttl: Duration) -> Option<BareRecord> {
        let mut leases = self.leases.lock().unwrap();
        let now = micros_now();
        let entry = leases.get_mut(lease)?;
        let record = entry.record.as_mut()?;
        if record.owner != owner || now >= record.heartbeat_at + ttl.as_micros() as i64 {
            return None;
        }
        record.heartbeat_at = now;
        record.ttl = ttl;
        record.priority = priority;
        let answer = record.clone();
        let registration = entry.registrations.get_mut(owner)?;
        registration.priority = priority;
        registration.last_seen = now;
        registration.ttl = ttl;
        Some(answer)
    }
}

const TTL: Duration = Duration::from_secs(30);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `work(thread)` on `threads` threads at once, `calls` times each; returns ns per call
/// (wall time over all calls of all threads: the inverse of throughput).
fn timed(threads: usize, calls: u64, work: Arc<dyn Fn(usize) + Send + Sync>) -> f64 {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            let work = Arc::clone(&work);
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..calls {
                    work(t);
                }
                barrier.wait();
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    barrier.wait();
    let elapsed = start.elapsed();
    for h in handles {
        h.join().unwrap();
    }
    elapsed.as_nanos() as f64 / (calls as f64 * threads as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds = env_or("TENURE_BENCH_ROUNDS", 15);
    let calls = env_or("TENURE_BENCH_CALLS", 200_000);
    println!(
        "renewals of a held lease, median of {rounds} interleaved rounds of {calls} calls per thread"
    );
    for threads in [1usize, 2] {
        // Each thread renews a lease of its own, on one shared storage.
        let names: Vec<(String, String)> = (0..threads)
            .map(|t| (format!("bench-lease-{t}"), format!("bench-owner-{t}")))
            .collect();

        let bare = Arc::new(Bare::default());
        let storage = MemoryEventStorage::new();
        let requests: Arc<Vec<LeaseRequest>> = Arc::new(
            names
                .iter()
                .map(|(lease, owner)| LeaseRequest::new(lease.as_str(), owner.as_str(), 0, TTL))
                .collect(),
        );
        // Each thread's lease is acquired by a thread of its own, as the components of a
        // process would acquire theirs, so that what each stores is allocated apart.
        std::thread::scope(|scope| {
            for (t, (lease, owner)) in names.iter().enumerate() {
                let (bare, storage, requests) = (&bare, &storage, &requests);
                scope.spawn(move || {
                    bare.acquire(lease, owner, TTL);
                    let response = ready(storage.request_lease(&requests[t])).unwrap();
                    assert_eq!(response.status, LeaseStatus::Leader);
                });
            }
        });

        let bare_work: Arc<dyn Fn(usize) + Send + Sync> = {
            let bare = Arc::clone(&bare);
            let names = names.clone();
            Arc::new(move |t| {
                let (lease, owner) = &names[t];
                black_box(bare.renew(black_box(lease), black_box(owner), 0, TTL)).unwrap();
            })
        };
        let storage_work: Arc<dyn Fn(usize) + Send + Sync> = {
            let storage = storage.clone();
            let requests = Arc::clone(&requests);
            Arc::new(move |t| {
                let response = ready(storage.request_lease(black_box(&requests[t]))).unwrap();
                assert_eq!(response.status, LeaseStatus::Leader);
                black_box(response);
            })
        };

        // Warm up both.
        timed(threads, calls / 10, Arc::clone(&bare_work));
        timed(threads, calls / 10, Arc::clone(&storage_work));
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            base.push(timed(threads, calls, Arc::clone(&bare_work)));
            ours.push(timed(threads, calls, Arc::clone(&storage_work)));
        }
        let (base, ours) = (median(base), median(ours));
        println!(
            "{threads} thread(s): Mutex<HashMap> {base:.0} ns/call, MemoryEventStorage {ours:.0} ns/call: {:.2}x the baseline's rate",
            base / ours
        );
    }
}
