//! Real clock steps of a PostgreSQL server: a throwaway server started under libfaketime,
//! whose wall clock (what `clock_timestamp()` reads, the storage clock of every lease call)
//! this test steps forward and backward by more than the largest ttl (2 s) while electors
//! contend; the history checker judges the run.
//!
//! * Electors on `request_lease_v4` and `_v5` (the sighted rule: a takeover of a lease that
//!   merely expired needs the taker's own sighting of that tenure for a ttl on its monotonic
//!   clock): zero violations of any kind (overlapping leaderships, shared or backward tokens,
//!   stale writes accepted, bookmarks moved back: the checker orders bookmark writes by the
//!   callers' monotonic clock, never by the server's stepped one).
//! * The negative control, electors on `request_lease_v1` (the previous rule: expiry on the
//!   server's clock alone), against the same server at the same time: the checker finds
//!   overlapping leaders.
//!
//! The offset is in a file that libfaketime reads at every clock read
//! (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`); only the wall clock is faked
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`), as NTP or an operator steps it. Before the run, the
//! test checks that a written offset shows in the server's `clock_timestamp()`, so a server
//! that ignored libfaketime cannot pass for a clean run. Bounded: about 15 s. Needs Debian's
//! `faketime` package and the PostgreSQL server binaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tenure_pg_test::cluster::Cluster;
use tenure_ports::EventStorage;
use tenure_postgres::PostgresEventStorage;
use tenure_reliability::workload::{self, WorkloadConfig, WorkloadReport};
use tenure_tck::history::Violation;

const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The server's clock offsets, one every 1.5 s: forward 10 s, forward 10 s more, back 15 s,
/// forward 25 s, back 30 s, forward 10 s. Every step is larger than the largest ttl (2 s).
const OFFSETS: &[&str] = &["+10s", "+20s", "+5s", "+30s", "+0s", "+10s"];
const STEP_EVERY: Duration = Duration::from_millis(1500);

fn libfaketime() -> PathBuf {
    LIBFAKETIME
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed (looked in {LIBFAKETIME:?}): install Debian's \
                 `faketime` package (`apt-get install faketime`)"
            )
        })
}

/// The server's `clock_timestamp()` minus this process's wall clock, in seconds.
async fn server_offset(client: &tokio_postgres::Client) -> f64 {
    let server: f64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .unwrap()
        .get(0);
    let here = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    server - here
}

fn write_offset(path: &PathBuf, offset: &str) {
    std::fs::write(path, offset).unwrap();
}

async fn storage(url: &str, prefix: &str) -> Arc<PostgresEventStorage> {
    PostgresEventStorage::builder()
        .url(url)
        .prefix(prefix)
        .pool_size(8)
        .call_timeout(Duration::from_millis(250))
        .build()
        .await
        .map(Arc::new)
        .unwrap()
}

fn config(lease: &str) -> WorkloadConfig {
    WorkloadConfig {
        electors: 8,
        max_duration: STEP_EVERY * (OFFSETS.len() as u32 + 1),
        min_calls: usize::MAX,
        pause_chance: 0.0,
        release_chance: 0.02,
        ..WorkloadConfig::standard(lease, usize::MAX)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepped_server_clock_never_gives_two_leaders_with_the_sighted_rule() {
    let dir = std::env::temp_dir().join(format!("tenure-pg-clock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let offsets = dir.join("offset");
    write_offset(&offsets, "+0s");
    // The server runs as `postgres` when this test runs as root: it must read the file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&offsets, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let library = libfaketime();
    let cluster = Cluster::create().unwrap();
    cluster
        .start_with_env(&[
            ("LD_PRELOAD", library.to_str().unwrap()),
            ("FAKETIME_TIMESTAMP_FILE", offsets.to_str().unwrap()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ])
        .unwrap_or_else(|e| panic!("the server did not start under libfaketime: {e}"));
    let url = cluster.url();

    // The server's clock follows the file.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let before = server_offset(&client).await;
    write_offset(&offsets, "+100s");
    let after = server_offset(&client).await;
    write_offset(&offsets, "+0s");
    assert!(
        before.abs() < 2.0 && (after - 100.0).abs() < 2.0,
        "the server's clock does not follow libfaketime's offset file (offset {before:.1} s \
         at +0s, {after:.1} s at +100s); server log: {}",
        cluster.log()
    );

    // Each run on tables of its own (the workloads' bookmark readers share names), on the
    // one server whose clock is stepped.
    let sighted = storage(&url, "sighted_").await;
    let unsighted = storage(&url, "unsighted_").await;
    unsighted.call_request_lease_v1(true);
    let runs = [
        ("clock-steps-v4", sighted as Arc<dyn EventStorage>),
        ("clock-steps-v1", unsighted as Arc<dyn EventStorage>),
    ]
    .map(|(lease, storage)| {
        let config = config(lease);
        tokio::spawn(async move { workload::run(&config, storage).await })
    });

    let mut observed = Vec::new();
    for offset in OFFSETS {
        tokio::time::sleep(STEP_EVERY).await;
        write_offset(&offsets, offset);
        observed.push(server_offset(&client).await);
    }
    let [v4, v1] = runs;
    let v4: WorkloadReport = v4.await.unwrap();
    let v1: WorkloadReport = v1.await.unwrap();
    let largest_step = observed
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(observed[0].abs(), f64::max);
    println!("server clock offsets after each step (s): {observed:.1?}");
    println!("request_lease_v4 and v5 (sighted): {v4}");
    println!("request_lease_v1 (negative control): {v1}");
    assert!(
        largest_step >= 10.0,
        "the server's clock was not stepped as planned: {observed:?}"
    );
    for (name, report) in [("v4", &v4), ("v1", &v1)] {
        assert!(
            report.history.elections >= 3,
            "{name}: too few elections to mean much: {report}"
        );
    }
    println!(
        "request_lease_v4 and v5: {} violations",
        v4.history.violations.len()
    );
    assert!(v4.passed(), "the sighted rule did not hold: {v4}");
    let overlaps = v1
        .history
        .violations
        .iter()
        .filter(|v| matches!(v, Violation::OverlappingLeaders { .. }))
        .count();
    println!("request_lease_v1: {overlaps} overlapping leaderships");
    assert!(
        overlaps > 0,
        "the negative control (request_lease_v1, expiry on the server's clock alone) showed no \
         overlapping leaders, so the checker or the fault is not working: {v1}"
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
