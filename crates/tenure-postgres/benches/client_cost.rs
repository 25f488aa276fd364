//! The benchmark process's own work per lease call, in instructions, against the floor's.
//!
//! Run it through `benches/client-cost.sh`, which runs this program under valgrind's callgrind
//! and prints the instructions per call of each side and their ratio to the floor. Callgrind
//! counts the instructions this process executes, not seconds: the same binary and inputs give
//! the same count whatever else the machine is doing, so a change of the adapter's client-side
//! cost shows here by itself, where `lease_latency`'s `client µs/call` moves with the host.
//!
//! One side per run, named by `TENURE_BENCH_SIDE`, `TENURE_BENCH_CALLS` calls of it in a row on
//! one connection (a pool of one) and a current-thread runtime, after a warm-up; only the calls
//! are counted (callgrind's collection is toggled on `measured`):
//!
//! * `floor`: a single-row `UPDATE` (prepared, autocommit) through deadpool-postgres and
//!   tokio-postgres, as `lease_latency`'s floor;
//! * `renewal`: `request_lease` by the holder of one of 100 leases, on a deadpool storage;
//! * `standby`: `request_lease` by a standby of one of those leases;
//! * `floor-sqlx`: the floor's `UPDATE` through a `sqlx::PgPool` of one connection: what the
//!   sqlx driver itself costs;
//! * `renewal-sqlx`: the renewal on a storage with the sqlx driver and a pool of its own.
//!
//! The deadpool storage is given the same pool as the floor, so both pay the same connection
//! and TLS costs. It creates its own prefix and drops it afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
use tenure_postgres::sqlx_0_9::{self, PgPool, postgres::PgPoolOptions};
use tenure_postgres::{PostgresDriver, PostgresEventStorage, deadpool_postgres};

const LEASES: usize = 100;
const TTL: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Floor,
    Renewal,
    Standby,
    FloorOnSqlx,
    RenewalOnSqlx,
}

struct Bench {
    storage: PostgresEventStorage,
    pool: deadpool_postgres::Pool,
    sqlx_storage: PostgresEventStorage,
    sqlx_pool: PgPool,
    update: String,
    renewals: Vec<LeaseRequest>,
    standbys: Vec<LeaseRequest>,
}

impl Bench {
    async fn call(&self, side: Side, i: usize) {
        let n = i % LEASES;
        let (request, expected) = match side {
            Side::Floor => {
                let client = self.pool.get().await.unwrap();
                let statement = client.prepare_cached(&self.update).await.unwrap();
                let id = i32::try_from(n).unwrap();
                assert_eq!(client.execute(&statement, &[&id]).await.unwrap(), 1);
                return;
            }
            Side::FloorOnSqlx => {
                let done = sqlx_0_9::query(sqlx_0_9::AssertSqlSafe(self.update.as_str()))
                    .bind(i32::try_from(n).unwrap())
                    .execute(&self.sqlx_pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
                return;
            }
            Side::Renewal | Side::RenewalOnSqlx => (&self.renewals[n], LeaseStatus::Leader),
            Side::Standby => (&self.standbys[n], LeaseStatus::Standby),
        };
        let storage = match side {
            Side::RenewalOnSqlx => &self.sqlx_storage,
            _ => &self.storage,
        };
        let response = storage.request_lease(request).await.unwrap();
        assert_eq!(response.status, expected);
    }
}

/// The counted calls: callgrind collects inside this function only.
#[inline(never)]
fn measured(runtime: &tokio::runtime::Runtime, bench: &Bench, side: Side, calls: usize) {
    runtime.block_on(async {
        for i in 0..calls {
            bench.call(side, i).await;
        }
    });
}

fn main() {
    let side = match std::env::var("TENURE_BENCH_SIDE").as_deref() {
        Ok("floor") => Side::Floor,
        Ok("renewal") => Side::Renewal,
        Ok("standby") => Side::Standby,
        Ok("floor-sqlx") => Side::FloorOnSqlx,
        Ok("renewal-sqlx") => Side::RenewalOnSqlx,
        other => panic!(
            "TENURE_BENCH_SIDE must be floor, renewal, standby, floor-sqlx or renewal-sqlx, \
             not {other:?}"
        ),
    };
    let calls: usize = std::env::var("TENURE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (server, guard) = support::server_and_prefix();
    let prefix = guard.prefix().to_owned();
    let bench = runtime.block_on(async {
        let pool = support::application_pool(&server.url, 1);
        let storage = PostgresEventStorage::builder()
            .pool(pool.clone())
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        server
            .connect()
            .await
            .unwrap()
            .batch_execute(&format!(
                "CREATE TABLE {prefix}bench_rows (id integer PRIMARY KEY, v bigint NOT NULL); \
                 INSERT INTO {prefix}bench_rows SELECT g, 0 FROM generate_series(0, {}) g",
                LEASES - 1
            ))
            .await
            .unwrap();
        let requests = |owner: &str| -> Vec<LeaseRequest> {
            (0..LEASES)
                .map(|n| LeaseRequest::new(format!("lease-{n}"), owner, 0, TTL))
                .collect()
        };
        let sqlx_storage = PostgresEventStorage::builder()
            .url(server.url.clone())
            .driver(PostgresDriver::Sqlx09)
            .pool_size(1)
            .prefix(&prefix)
            .build()
            .await
            .unwrap();
        let sqlx_pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect(&server.url)
            .await
            .unwrap();
        Bench {
            storage,
            pool,
            sqlx_storage,
            sqlx_pool,
            update: format!("UPDATE {prefix}bench_rows SET v = v + 1 WHERE id = $1"),
            renewals: requests("holder"),
            standbys: requests("standby"),
        }
    });
    // Warm-up: every lease held and stood by for, every statement prepared, the sightings kept.
    runtime.block_on(async {
        for i in 0..2 * LEASES {
            for side in [
                Side::Renewal,
                Side::Standby,
                Side::Floor,
                Side::FloorOnSqlx,
                Side::RenewalOnSqlx,
            ] {
                bench.call(side, i).await;
            }
        }
    });
    measured(&runtime, &bench, side, calls);
    runtime.block_on(async {
        bench.storage.close().await.unwrap();
        bench.sqlx_storage.close().await.unwrap();
        bench.sqlx_pool.close().await;
    });
}
