//! Tenure's safety evidence under faults, and nothing else: it is not published.
//!
//! Leader election is only worth using if it holds when things break. This crate drives
//! realistic election workloads (16 electors with random priorities, ttls, releases and
//! paused leaders) against a backend, optionally injects faults into it, records every lease
//! call, leadership span and fenced write in a [`tenure_tck::history::History`], and returns
//! the checker's verdict with the counts: calls, faults injected, elections, violations.
//!
//! * [`workload`]: the election workload and its report.
//! * [`recorder`]: a storage wrapper that records every call and can make one owner's calls
//!   hang, as a paused process or a partition would.
//! * [`clock`]: a storage clock driven by tokio's clock, so that the in-memory backend runs in
//!   paused time.
//! * [`killer`]: connections killed at random with `pg_terminate_backend`.
//! * [`proxy`]: a TCP proxy that stalls or cuts one contender's connections (a partition).
//! * [`failover`]: a primary and a streaming standby of a test's own, and a failover.
//! * [`switch`]: a storage whose target is switched while electors use it (a failover).
//! * `tenure_pg_test::cluster`: a throwaway PostgreSQL cluster that a test may restart or crash.
//!
//! The tests in `tests/` are the bounded versions that `cargo xtask test` runs; the `stress`
//! binary (`cargo xtask stress [--minutes N]`) runs the long ones.

#![deny(missing_docs)]

pub mod clock;
pub mod failover;
pub mod killer;
pub mod proxy;
pub mod recorder;
pub mod switch;
pub mod workload;

use std::sync::Arc;
use std::time::Duration;

use tenure_postgres::PostgresEventStorage;

/// A PostgreSQL storage for a workload: a pool of `pool_size` on `url`, a 250 ms bound on each
/// call (far below the workloads' ttls, so a stalled call is given up in time), the schema
/// ensured.
pub async fn postgres_storage(
    url: &str,
    pool_size: usize,
) -> Result<Arc<PostgresEventStorage>, String> {
    PostgresEventStorage::builder()
        .url(url)
        .pool_size(pool_size)
        .call_timeout(Duration::from_millis(250))
        .build()
        .await
        .map(Arc::new)
        .map_err(|e| e.to_string())
}
