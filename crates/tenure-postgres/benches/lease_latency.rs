//! How close a lease call comes to the floor, one round trip and one commit, on each driver.
//!
//! `cargo bench -p tenure-postgres --bench lease_latency` (or `cargo xtask bench postgres`)
//! measures, in one run against one server (found as the tests find it: `TENURE_DATABASE_URL`, a
//! container, or the local server):
//!
//! * **floor**: a single-row `UPDATE` in autocommit (prepared), over 1,000 rows, through a
//!   deadpool-postgres pool and tokio-postgres: the one floor both drivers are held to;
//! * **floor on sqlx** (for the record): the same `UPDATE` through a `sqlx::PgPool`, which says
//!   what the sqlx driver itself costs;
//! * then on each storage (the deadpool storage on that deadpool pool, the sqlx storage on that
//!   `PgPool`, both passed in as an application passes its pool, and a sqlx storage built from
//!   the URL, with a pool of its own of the same size):
//!   * **renewal**: `request_lease` renewing one of 1,000 held leases (one statement, the
//!     holder's renewal `UPDATE`, since the fourteenth session; a call of the PL/pgSQL function
//!     before);
//!   * **renewal, 2 live standbys**: the same on 1,000 other leases that each have two live
//!     standby contenders, the shape of a three-replica deployment;
//!   * **standby's request**: a contender's `request_lease` on one of 1,000 leases held by
//!     someone else (it registers, and stands by);
//!   * **takeover**: `request_lease` on one of 1,000 leases whose holder's 1 ms ttl ran out
//!     (a new tenure, a new token), by a contender that has seen that tenure end: since
//!     `request_lease_v2` (and v3) a takeover of a lease that merely expired needs the taker's own
//!     sighting of it for a ttl, so each round of takeovers is prepared, untimed, by one
//!     standby's request per lease from the round's new owner and a 2 ms pause.
//!
//! Each lease's request (but a takeover's, whose owner is new every round) is built once and
//! sent again at each of its calls, as an elector builds its request once and sends it at every
//! poll: the floor's side builds no request either.
//!
//! Latency: one caller, the sides interleaved in rounds of 100 calls, median and p90/p99 per
//! side. Throughput: 8 concurrent callers over the 1,000 rows/leases, each caller its own
//! share, the sides interleaved in 2-second slices (a takeover slice ends sooner, after one
//! round over its 1,000 leases, as each lease can be taken over once per prepared round), with
//! the benchmark process's own CPU time per call in those slices (the client's share of the
//! cores the server also runs on, from `/proc`). It prints the figures and, per driver, the
//! ratios against the targets (renewal median ≤ 1.3 × floor, renewal throughput ≥ 0.8 × floor).
//! It creates its own prefix and drops it afterwards.
//!
//! Settings: `TENURE_BENCH_SAMPLES` (latency samples per side, default 3000),
//! `TENURE_BENCH_SECONDS` (throughput seconds per side, default 12).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
use tenure_postgres::sqlx_0_9::postgres::PgPoolOptions;
use tenure_postgres::sqlx_0_9::{self, PgPool};
use tenure_postgres::{PostgresDriver, PostgresEventStorage, deadpool_postgres};

const ROWS: usize = 1000;
const CALLERS: usize = 8;
const TTL: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Renewal,
    RenewalWithStandbys,
    StandbyRequest,
    Takeover,
}

impl Call {
    const ALL: [Call; 4] = [
        Call::Renewal,
        Call::RenewalWithStandbys,
        Call::StandbyRequest,
        Call::Takeover,
    ];

    fn label(self) -> &'static str {
        match self {
            Call::Renewal => "renewal",
            Call::RenewalWithStandbys => "renewal, 2 live standbys",
            Call::StandbyRequest => "a standby's request",
            Call::Takeover => "takeover",
        }
    }
}

/// The storages measured: one per driver on the application's pool, and the sqlx driver on a
/// pool of its own (which keeps its connections between calls, so it does not pay the ping
/// that sqlx sends on every connection given back to a `PgPool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    Deadpool,
    SqlxOnAppPool,
    SqlxOwnPool,
}

impl Storage {
    const ALL: [Storage; 3] = [
        Storage::Deadpool,
        Storage::SqlxOnAppPool,
        Storage::SqlxOwnPool,
    ];

    fn label(self) -> &'static str {
        match self {
            Storage::Deadpool => "deadpool",
            Storage::SqlxOnAppPool => "sqlx-0.9",
            Storage::SqlxOwnPool => "sqlx-0.9 own pool",
        }
    }

    /// The takeover leases' tag: each storage has leases of its own.
    fn tag(self) -> &'static str {
        match self {
            Storage::Deadpool => "dp",
            Storage::SqlxOnAppPool => "sx",
            Storage::SqlxOwnPool => "so",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Floor,
    FloorOnSqlx,
    Lease(Storage, Call),
}

impl Side {
    fn all() -> Vec<Side> {
        let mut sides = vec![Side::Floor, Side::FloorOnSqlx];
        for storage in Storage::ALL {
            sides.extend(Call::ALL.map(|call| Side::Lease(storage, call)));
        }
        sides
    }

    fn label(self) -> String {
        match self {
            Side::Floor => "single-row UPDATE (floor)".to_owned(),
            Side::FloorOnSqlx => "single-row UPDATE on sqlx".to_owned(),
            Side::Lease(storage, call) => format!("{}: {}", storage.label(), call.label()),
        }
    }
}

struct Bench {
    deadpool: PostgresEventStorage,
    sqlx: PostgresEventStorage,
    sqlx_own: PostgresEventStorage,
    deadpool_pool: deadpool_postgres::Pool,
    sqlx_pool: PgPool,
    update: String,
    /// The requests of the renewals, the renewals among standbys and the standbys' requests,
    /// one per lease, built once: an elector builds its request once and sends it at every
    /// poll, so building one per call would charge the lease sides work that the floor's side
    /// (an integer) does not do and an application does not either.
    renewals: Vec<LeaseRequest>,
    busy_renewals: Vec<LeaseRequest>,
    standbys: Vec<LeaseRequest>,
}

impl Bench {
    async fn call(&self, side: Side, i: usize) {
        let id = i32::try_from(i % ROWS).unwrap();
        let (which, call) = match side {
            Side::Floor => {
                let client = self.deadpool_pool.get().await.unwrap();
                let statement = client.prepare_cached(&self.update).await.unwrap();
                assert_eq!(client.execute(&statement, &[&id]).await.unwrap(), 1);
                return;
            }
            Side::FloorOnSqlx => {
                let done = sqlx_0_9::query(sqlx_0_9::AssertSqlSafe(self.update.as_str()))
                    .bind(id)
                    .execute(&self.sqlx_pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
                return;
            }
            Side::Lease(which, call) => (which, call),
        };
        let storage = self.storage(which);
        let n = i % ROWS;
        let takeover;
        let (request, expected) = match call {
            Call::Renewal => (&self.renewals[n], LeaseStatus::Leader),
            Call::RenewalWithStandbys => (&self.busy_renewals[n], LeaseStatus::Leader),
            Call::StandbyRequest => (&self.standbys[n], LeaseStatus::Standby),
            // Prepared: the holder's 1 ms ran out, and the taker saw it (`prepare`). A new
            // owner every round, so built per call.
            Call::Takeover => {
                takeover = self.takeover(which, i);
                (&takeover, LeaseStatus::Leader)
            }
        };
        let response = storage.request_lease(request).await.unwrap();
        assert_eq!(response.status, expected, "{side:?}");
    }
}

impl Bench {
    /// Before the takeovers of `calls` (all in one round over the leases, `i / ROWS`
    /// the same for each): each call's new owner asks once, stands by and so starts its
    /// sighting of the expired tenure, and 2 ms pass, more than the holder's 1 ms ttl. Untimed;
    /// nothing for the other sides.
    async fn prepare(self: &Arc<Self>, side: Side, calls: std::ops::Range<usize>) {
        let Side::Lease(which, Call::Takeover) = side else {
            return;
        };
        assert_eq!(
            calls.start / ROWS,
            (calls.end - 1) / ROWS,
            "a round of its own"
        );
        let tasks: Vec<_> = (0..CALLERS)
            .map(|c| {
                let (bench, calls) = (self.clone(), calls.clone());
                tokio::spawn(async move {
                    for i in calls.skip(c).step_by(CALLERS) {
                        let request = bench.takeover(which, i);
                        let response = bench.storage(which).request_lease(&request).await.unwrap();
                        assert_eq!(response.status, LeaseStatus::Standby, "sighting {i}");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    fn storage(&self, which: Storage) -> &PostgresEventStorage {
        match which {
            Storage::Deadpool => &self.deadpool,
            Storage::SqlxOnAppPool => &self.sqlx,
            Storage::SqlxOwnPool => &self.sqlx_own,
        }
    }

    /// The takeover request of call `i`: a new owner every round over the leases.
    fn takeover(&self, which: Storage, i: usize) -> LeaseRequest {
        LeaseRequest::new(
            format!("tk-{}-{}", which.tag(), i % ROWS),
            format!("o{}", i / ROWS),
            0,
            Duration::from_millis(1),
        )
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
    let (server, guard) = support::server_and_prefix();
    let prefix = guard.prefix().to_owned();
    runtime.block_on(async {
        // The application's pools, as an application would build them (and as the storage
        // builds its own from a URL): no ping before each checkout.
        let deadpool_pool = support::application_pool(&server.url, CALLERS);
        let sqlx_pool = PgPoolOptions::new()
            .max_connections(u32::try_from(CALLERS).unwrap())
            .test_before_acquire(false)
            .connect(&server.url)
            .await
            .unwrap();
        let deadpool = PostgresEventStorage::builder()
            .pool(deadpool_pool.clone())
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        let sqlx = PostgresEventStorage::builder()
            .pool(sqlx_pool.clone())
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        let sqlx_own = PostgresEventStorage::builder()
            .url(server.url.clone())
            .driver(PostgresDriver::Sqlx09)
            .pool_size(CALLERS)
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        assert_eq!(sqlx_own.driver(), PostgresDriver::Sqlx09);
        let setup = server.connect().await.unwrap();
        let ttl = TTL.as_micros();
        let last = ROWS - 1;
        setup
            .batch_execute(&format!(
                "CREATE TABLE {prefix}bench_rows (id integer PRIMARY KEY, v bigint NOT NULL) \
                   WITH (fillfactor = 50); \
                 INSERT INTO {prefix}bench_rows SELECT g, 0 FROM generate_series(0, {last}) g; \
                 SELECT {prefix}request_lease_v1('bench-' || g, 'bench', 0, {ttl}) \
                   FROM generate_series(0, {last}) g; \
                 SELECT {prefix}request_lease_v1('busy-' || g, o, 0, {ttl}) \
                   FROM generate_series(0, {last}) g, \
                        unnest(ARRAY['bench', 'standby-1', 'standby-2']) WITH ORDINALITY AS s(o, n) \
                  ORDER BY g, n; \
                 SELECT {prefix}request_lease_v1('held-' || g, 'holder', 0, {ttl}) \
                   FROM generate_series(0, {last}) g; \
                 SELECT {prefix}request_lease_v1('tk-' || t || '-' || g, 'first', 0, 1000) \
                   FROM generate_series(0, {last}) g, unnest(ARRAY['dp', 'sx', 'so']) AS t;"
            ))
            .await
            .unwrap();
        for table in ["bench_rows", "leases", "lease_contenders"] {
            setup
                .batch_execute(&format!("VACUUM ANALYZE {prefix}{table}"))
                .await
                .unwrap();
        }
        let requests = |lease: &str, owner: &str| -> Vec<LeaseRequest> {
            (0..ROWS)
                .map(|n| LeaseRequest::new(format!("{lease}-{n}"), owner, 0, TTL))
                .collect()
        };
        let bench = Arc::new(Bench {
            deadpool,
            sqlx,
            sqlx_own,
            deadpool_pool,
            sqlx_pool,
            update: format!("UPDATE {prefix}bench_rows SET v = v + 1 WHERE id = $1"),
            renewals: requests("bench", "bench"),
            busy_renewals: requests("busy", "bench"),
            standbys: requests("held", "bench"),
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
        let sides = Side::all();

        // Warm every connection's statement cache, and the server's buffers.
        for &side in &sides {
            bench.prepare(side, 0..ROWS).await;
            let tasks: Vec<_> = (0..CALLERS)
                .map(|c| {
                    let bench = bench.clone();
                    tokio::spawn(async move {
                        for i in (c..ROWS).step_by(CALLERS) {
                            bench.call(side, i).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }
        // The takeovers' owners go on from the warm-up's round.
        let mut i = ROWS;

        // Latency: one caller, sides interleaved in rounds of 100 calls.
        let samples = env_number("TENURE_BENCH_SAMPLES", 3000) as usize;
        let mut latencies: Vec<Vec<Duration>> = sides
            .iter()
            .map(|_| Vec::with_capacity(samples))
            .collect();
        while latencies[0].len() < samples {
            for (s, side) in sides.iter().enumerate() {
                bench.prepare(*side, i..i + 100).await;
                for _ in 0..100 {
                    let started = Instant::now();
                    bench.call(*side, i).await;
                    latencies[s].push(started.elapsed());
                    i += 1;
                }
            }
        }

        // Throughput: CALLERS concurrent callers, sides interleaved in slices of 2 s.
        let seconds = env_number("TENURE_BENCH_SECONDS", 12);
        let mut counts = vec![0u64; sides.len()];
        let mut spent = vec![Duration::ZERO; sides.len()];
        // The benchmark process's own CPU time per side (its callers and the drivers: the
        // client's share of the two cores the server also runs on).
        let mut client_cpu = vec![Duration::ZERO; sides.len()];
        let base = Arc::new(AtomicU64::new(i.div_ceil(ROWS) as u64 * ROWS as u64));
        for _ in 0..seconds.div_ceil(2) {
            for (s, side) in sides.iter().enumerate() {
                let from = base.load(Ordering::Relaxed) as usize;
                // A takeover slice is one prepared round: each lease taken over once.
                let end = match side {
                    Side::Lease(_, Call::Takeover) => from + ROWS,
                    _ => usize::MAX,
                };
                bench.prepare(*side, from..from + ROWS).await;
                let done = Arc::new(AtomicU64::new(0));
                let stop = Instant::now() + Duration::from_secs(2);
                let started = Instant::now();
                let cpu_before = support::process_cpu();
                let tasks: Vec<_> = (0..CALLERS)
                    .map(|c| {
                        let (bench, done, side) = (bench.clone(), done.clone(), *side);
                        tokio::spawn(async move {
                            // Each caller works on its own share of the rows/leases.
                            let mut i = from + c;
                            while Instant::now() < stop && i < end {
                                bench.call(side, i).await;
                                done.fetch_add(1, Ordering::Relaxed);
                                i += CALLERS;
                            }
                            i
                        })
                    })
                    .collect();
                let mut furthest = from;
                for t in tasks {
                    furthest = furthest.max(t.await.unwrap());
                }
                // Later slices start in a round of their own (new takeover owners).
                base.store(
                    (furthest.div_ceil(ROWS) * ROWS + ROWS) as u64,
                    Ordering::Relaxed,
                );
                spent[s] += started.elapsed();
                if let (Some(before), Some(after)) = (cpu_before, support::process_cpu()) {
                    client_cpu[s] += after.saturating_sub(before);
                }
                counts[s] += done.load(Ordering::Relaxed);
            }
        }

        println!();
        println!(
            "{:<44} {:>10} {:>10} {:>10} {:>14} {:>16}",
            "side", "median ms", "p90 ms", "p99 ms", "calls/s (x8)", "client µs/call"
        );
        let mut medians = vec![Duration::ZERO; sides.len()];
        let mut rates = vec![0f64; sides.len()];
        for (s, side) in sides.iter().enumerate() {
            let mut sorted = latencies[s].clone();
            sorted.sort_unstable();
            medians[s] = support::percentile(&sorted, 0.5);
            rates[s] = counts[s] as f64 / spent[s].as_secs_f64();
            println!(
                "{:<44} {:>10.3} {:>10.3} {:>10.3} {:>14.0} {:>16.1}",
                side.label(),
                ms(medians[s]),
                ms(support::percentile(&sorted, 0.9)),
                ms(support::percentile(&sorted, 0.99)),
                rates[s],
                client_cpu[s].as_secs_f64() * 1e6 / counts[s].max(1) as f64
            );
        }
        println!();
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        let index = |side: Side| sides.iter().position(|s| *s == side).unwrap();
        let (floor_median, floor_rate) = (medians[0].as_secs_f64(), rates[0]);
        for which in Storage::ALL {
            let driver = which.label();
            let renewal = index(Side::Lease(which, Call::Renewal));
            let latency_ratio = medians[renewal].as_secs_f64() / floor_median;
            let rate_ratio = rates[renewal] / floor_rate;
            println!(
                "{driver:<17} renewal median / floor median     = {latency_ratio:.2}x  (target <= 1.30x: {})",
                verdict(latency_ratio <= 1.3)
            );
            println!(
                "{driver:<17} renewal throughput / floor's      = {rate_ratio:.2}x  (target >= 0.80x: {})",
                verdict(rate_ratio >= 0.8)
            );
            for call in [Call::RenewalWithStandbys, Call::StandbyRequest, Call::Takeover] {
                let s = index(Side::Lease(which, call));
                println!(
                    "{driver:<17} {:<32} = {:.2}x latency, {:.2}x throughput (no target)",
                    call.label(),
                    medians[s].as_secs_f64() / floor_median,
                    rates[s] / floor_rate
                );
            }
        }
        println!(
            "sqlx floor / floor                                 = {:.2}x latency, {:.2}x throughput (the driver alone)",
            medians[1].as_secs_f64() / floor_median,
            rates[1] / floor_rate
        );
        bench.deadpool.close().await.unwrap();
        bench.sqlx.close().await.unwrap();
        bench.sqlx_own.close().await.unwrap();
        bench.sqlx_pool.close().await;
    });
    drop(guard);
}
