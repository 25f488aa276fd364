//! What the PostgreSQL benchmarks share.

// Each benchmark uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use tenure_postgres::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

/// The server the tests would use, and a table prefix of this run's own, whose tables and
/// functions go when the guard drops.
pub fn server_and_prefix() -> (&'static tenure_pg_test::Server, tenure_pg_test::PrefixGuard) {
    let server = tenure_pg_test::required_server();
    let guard =
        tenure_pg_test::PrefixGuard::new(server.url.clone(), tenure_pg_test::unique_prefix());
    (server, guard)
}

/// A deadpool pool of `size` on `url`, as an application builds it (no ping before a
/// checkout) and connected as the storage connects (TLS as the string's `sslmode` asks), so
/// that a baseline through it and the storage share one client code path.
pub fn application_pool(url: &str, size: usize) -> Pool {
    let info = tenure_postgres::tenure_conninfo::ConnInfo::parse(url).unwrap();
    let (config, tls) =
        tenure_postgres::tokio_postgres_config(&info, Duration::from_secs(10)).unwrap();
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager).max_size(size).build().unwrap()
}

/// The `p` quantile (0 to 1) of `sorted`, nearest rank; `Duration::MAX` when it is empty (a
/// step in which no call was answered).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let Some(last) = sorted.len().checked_sub(1) else {
        return Duration::MAX;
    };
    let index = (last as f64 * p).round() as usize;
    sorted[index.min(last)]
}

/// The CPU time this process has used so far, user and system, from `/proc/self/stat` (in
/// clock ticks of 10 ms: read it over seconds of work, not single calls). `None` where there
/// is no `/proc`.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name, in parentheses, may hold spaces: the fields counted follow it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}
