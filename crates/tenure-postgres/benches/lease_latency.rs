//! How close a lease call comes to the floor: one round trip and one commit.
//!
//! `cargo bench -p tenure-postgres --bench lease_latency` (or `cargo xtask bench postgres`)
//! measures, in one run against one server (found as the tests find it: `TENURE_PG_URL`, a
//! container, or the local server), through the same pool:
//!
//! * **floor**: a single-row `UPDATE` in autocommit (prepared), over 1,000 rows;
//! * **renewal**: `request_lease` renewing one of 1,000 held leases (the shipped adapter:
//!   one call of the PL/pgSQL function);
//! * **renewal with standbys**: for the record (no target), the same renewal of one of 1,000
//!   other leases that each have two live standby contenders, the shape of a deployment with
//!   three replicas: the renewal then also reads the lease's registrations.
//!
//! Latency: one caller, the sides interleaved in rounds, median and p90/p99 per side.
//! Throughput: 8 concurrent callers over the 1,000 rows/leases, the sides interleaved.
//! It prints the figures and the ratios against the targets (renewal median ≤ 1.3 × floor,
//! renewal throughput ≥ 0.8 × floor). It creates its own prefix and drops it afterwards.
//!
//! Settings: `TENURE_BENCH_SAMPLES` (latency samples per side, default 5000),
//! `TENURE_BENCH_SECONDS` (throughput seconds per side, default 20).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tenure_pg_test::PrefixGuard;
use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
use tenure_postgres::PostgresEventStorage;
use tenure_postgres::deadpool_postgres::Pool;

const ROWS: usize = 1000;
const CALLERS: usize = 8;
const TTL: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Floor,
    Renewal,
    RenewalWithStandbys,
}

impl Side {
    const ALL: [Side; 3] = [Side::Floor, Side::Renewal, Side::RenewalWithStandbys];

    fn label(self) -> &'static str {
        match self {
            Side::Floor => "single-row UPDATE (floor)",
            Side::Renewal => "renewal",
            Side::RenewalWithStandbys => "renewal, 2 live standbys",
        }
    }
}

struct Bench {
    storage: PostgresEventStorage,
    pool: Pool,
    prefix: String,
}

impl Bench {
    async fn call(&self, side: Side, i: usize) {
        match side {
            Side::Floor => {
                let client = self.pool.get().await.unwrap();
                let sql = format!(
                    "UPDATE {}bench_rows SET v = v + 1 WHERE id = $1",
                    self.prefix
                );
                let statement = client.prepare_cached(&sql).await.unwrap();
                let id = i32::try_from(i % ROWS).unwrap();
                assert_eq!(client.execute(&statement, &[&id]).await.unwrap(), 1);
            }
            Side::Renewal | Side::RenewalWithStandbys => {
                let name = if side == Side::Renewal {
                    format!("bench-{}", i % ROWS)
                } else {
                    format!("busy-{}", i % ROWS)
                };
                let request = LeaseRequest::new(name, "bench", 0, TTL);
                let response = self.storage.request_lease(&request).await.unwrap();
                assert_eq!(response.status, LeaseStatus::Leader);
            }
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = tenure_pg_test::required_server();
    let guard = PrefixGuard::new(server.url.clone(), tenure_pg_test::unique_prefix());
    let prefix = guard.prefix().to_owned();
    runtime.block_on(async {
        let storage = PostgresEventStorage::builder()
            .url(server.url.clone())
            .prefix(&prefix)
            .pool_size(CALLERS)
            .build()
            .await
            .unwrap();
        let pool = storage.pool().clone();
        let setup = server.connect().await.unwrap();
        setup
            .batch_execute(&format!(
                "CREATE TABLE {prefix}bench_rows (id integer PRIMARY KEY, v bigint NOT NULL) \
                   WITH (fillfactor = 50); \
                 INSERT INTO {prefix}bench_rows SELECT g, 0 FROM generate_series(0, {}) g; \
                 SELECT {prefix}request_lease_v1('bench-' || g, 'bench', 0, {}) \
                   FROM generate_series(0, {}) g; \
                 SELECT {prefix}request_lease_v1('busy-' || g, o, 0, {}) \
                   FROM generate_series(0, {}) g, \
                        unnest(ARRAY['bench', 'standby-1', 'standby-2']) WITH ORDINALITY AS s(o, n) \
                  ORDER BY g, n;",
                ROWS - 1,
                TTL.as_micros(),
                ROWS - 1,
                TTL.as_micros(),
                ROWS - 1
            ))
            .await
            .unwrap();
        for table in ["bench_rows", "leases", "lease_contenders"] {
            setup
                .batch_execute(&format!("VACUUM ANALYZE {prefix}{table}"))
                .await
                .unwrap();
        }
        let bench = Arc::new(Bench {
            storage,
            pool,
            prefix: prefix.clone(),
        });
        println!("lease_latency: PostgreSQL at {}", server.redacted_url());
        let version: String = setup
            .query_one("SHOW server_version", &[])
            .await
            .unwrap()
            .get(0);
        let sync: String = setup
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap()
            .get(0);
        println!("lease_latency: server {version}, synchronous_commit={sync}, {ROWS} rows/leases");

        // Warm every connection's statement cache, and the server's buffers.
        for side in Side::ALL {
            let tasks: Vec<_> = (0..CALLERS)
                .map(|c| {
                    let bench = bench.clone();
                    tokio::spawn(async move {
                        for i in 0..200 {
                            bench.call(side, c * 200 + i).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }

        // Latency: one caller, sides interleaved in rounds of 100 calls.
        let samples = env_number("TENURE_BENCH_SAMPLES", 5000) as usize;
        let mut latencies: Vec<Vec<Duration>> =
            (0..3).map(|_| Vec::with_capacity(samples)).collect();
        let mut i = 0;
        while latencies[0].len() < samples {
            for (s, side) in Side::ALL.iter().enumerate() {
                for _ in 0..100 {
                    i += 7;
                    let started = Instant::now();
                    bench.call(*side, i).await;
                    latencies[s].push(started.elapsed());
                }
            }
        }

        // Throughput: CALLERS concurrent callers, sides interleaved in slices of 2 s.
        let seconds = env_number("TENURE_BENCH_SECONDS", 20);
        let mut counts = [0u64; 3];
        let mut spent = [Duration::ZERO; 3];
        for _ in 0..seconds.div_ceil(2) {
            for (s, side) in Side::ALL.iter().enumerate() {
                let done = Arc::new(AtomicU64::new(0));
                let stop = Instant::now() + Duration::from_secs(2);
                let started = Instant::now();
                let tasks: Vec<_> = (0..CALLERS)
                    .map(|c| {
                        let (bench, done, side) = (bench.clone(), done.clone(), *side);
                        tokio::spawn(async move {
                            // Each caller works on its own share of the rows/leases.
                            let mut i = c;
                            while Instant::now() < stop {
                                bench.call(side, i).await;
                                done.fetch_add(1, Ordering::Relaxed);
                                i += CALLERS;
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                spent[s] += started.elapsed();
                counts[s] += done.load(Ordering::Relaxed);
            }
        }

        println!();
        println!(
            "{:<36} {:>10} {:>10} {:>10} {:>14}",
            "side", "median ms", "p90 ms", "p99 ms", "calls/s (x8)"
        );
        let mut medians = [Duration::ZERO; 3];
        let mut rates = [0f64; 3];
        for (s, side) in Side::ALL.iter().enumerate() {
            let mut sorted = latencies[s].clone();
            sorted.sort_unstable();
            medians[s] = percentile(&sorted, 0.5);
            rates[s] = counts[s] as f64 / spent[s].as_secs_f64();
            println!(
                "{:<36} {:>10.3} {:>10.3} {:>10.3} {:>14.0}",
                side.label(),
                ms(medians[s]),
                ms(percentile(&sorted, 0.9)),
                ms(percentile(&sorted, 0.99)),
                rates[s]
            );
        }
        println!();
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        let latency_ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
        let rate_ratio = rates[1] / rates[0];
        println!(
            "renewal median / floor median       = {latency_ratio:.2}x  (target <= 1.30x: {})",
            verdict(latency_ratio <= 1.3)
        );
        println!(
            "renewal throughput / floor's        = {rate_ratio:.2}x  (target >= 0.80x: {})",
            verdict(rate_ratio >= 0.8)
        );
        println!(
            "with 2 standbys (no target)         = {:.2}x latency, {:.2}x throughput",
            medians[2].as_secs_f64() / medians[0].as_secs_f64(),
            rates[2] / rates[0]
        );
        bench.storage.close().await.unwrap();
    });
    drop(guard);
}
