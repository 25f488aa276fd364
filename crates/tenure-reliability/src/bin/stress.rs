//! The long version of the reliability suite: `cargo xtask stress [--minutes N]`.
//!
//! 1. The election workload on the in-memory backend, in paused time, for 1,000,000 calls.
//! 2. The same workload on PostgreSQL (the server of `TENURE_DATABASE_URL`, or a local one), on 8
//!    leases at once (16 electors each), with connections killed at random, until 100,000
//!    calls or half the time is up.
//! 3. The same on a throwaway cluster that is restarted in fast and in immediate mode every
//!    20 s, for two fifths of the time.
//! 4. The standard workload on a throwaway primary with a synchronous standby, failed over
//!    every 20 s (the primary killed, the standby promoted and given a standby of its own, the
//!    electors pointed at it), for the last fifth.
//!
//! It prints the counts of each (calls, faults injected, elections, violations) and exits
//! non-zero if any violation was found.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenure_memory::MemoryEventStorage;
use tenure_pg_test::cluster::{Cluster, StopMode};
use tenure_reliability::clock::TokioClock;
use tenure_reliability::failover::{ReplicatedPair, Replication};
use tenure_reliability::killer::ConnectionKiller;
use tenure_reliability::switch::SwitchableStorage;
use tenure_reliability::workload::{self, WorkloadConfig, WorkloadReport};

fn main() -> ExitCode {
    let minutes = match parse_minutes() {
        Ok(minutes) => minutes,
        Err(message) => {
            eprintln!("stress: {message}");
            return ExitCode::FAILURE;
        }
    };
    let budget = Duration::from_secs_f64(minutes * 60.0);
    println!("stress: {minutes} minutes of PostgreSQL workloads, after the in-memory one");

    let mut clean = true;
    match memory() {
        Ok(report) => clean &= show("memory, paused time", &report),
        Err(message) => {
            eprintln!("stress: memory: {message}");
            clean = false;
        }
    }
    match postgres_killed(budget * 2 / 5) {
        Ok((report, kills)) => {
            clean &= show(&format!("postgres, {kills} connections killed"), &report)
        }
        Err(message) => {
            eprintln!("stress: postgres: {message}");
            clean = false;
        }
    }
    match postgres_restarts(budget * 2 / 5) {
        Ok((report, restarts)) => {
            clean &= show(
                &format!("postgres, {restarts} server restarts (fast and immediate)"),
                &report,
            )
        }
        Err(message) => {
            eprintln!("stress: postgres restarts: {message}");
            clean = false;
        }
    }
    match postgres_failovers(budget / 5) {
        Ok((report, failovers)) => {
            clean &= show(
                &format!("postgres, {failovers} failovers to a synchronous standby"),
                &report,
            )
        }
        Err(message) => {
            eprintln!("stress: postgres failovers: {message}");
            clean = false;
        }
    }
    if clean {
        println!("stress: zero violations");
        ExitCode::SUCCESS
    } else {
        println!("stress: FAILED");
        ExitCode::FAILURE
    }
}

fn parse_minutes() -> Result<f64, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(10.0),
        [flag, value] if flag == "--minutes" => value
            .parse::<f64>()
            .ok()
            .filter(|m| *m > 0.0 && m.is_finite())
            .ok_or_else(|| format!("--minutes takes a positive number, not {value:?}")),
        _ => Err("usage: stress [--minutes N]".into()),
    }
}

fn show(what: &str, report: &WorkloadReport) -> bool {
    println!("stress: {what}: {report}");
    report.passed()
}

fn memory() -> Result<WorkloadReport, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let storage = Arc::new(MemoryEventStorage::with_clock(Arc::new(TokioClock::new())));
        Ok(workload::run(&WorkloadConfig::standard("stress", 1_000_000), storage).await)
    })
}

fn multi_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// The standard workload on 8 leases at once (128 electors), for about 600 calls a second.
fn fast_workload(lease: &str, budget: Duration) -> WorkloadConfig {
    WorkloadConfig {
        leases: 8,
        max_duration: budget,
        ..WorkloadConfig::standard(lease, 100_000)
    }
}

fn postgres_killed(budget: Duration) -> Result<(WorkloadReport, u64), String> {
    multi_thread()?.block_on(async {
        let server = tenure_pg_test::server()?;
        let db = tenure_pg_test::TempDatabase::create(&server.url).await?;
        let storage = tenure_reliability::postgres_storage(&db.url(), 16).await?;
        let killer = ConnectionKiller::start(&server.url, db.name(), 11).await?;
        let report = workload::run(&fast_workload("stress-killed", budget), storage).await;
        let kills = killer.stop().await;
        Ok((report, kills))
    })
}

fn postgres_restarts(budget: Duration) -> Result<(WorkloadReport, u64), String> {
    let cluster = Arc::new(Cluster::create()?);
    cluster.start()?;
    multi_thread()?.block_on(async {
        let storage = tenure_reliability::postgres_storage(&cluster.url(), 16).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let restarts = tokio::spawn({
            let (cluster, stop) = (Arc::clone(&cluster), Arc::clone(&stop));
            async move {
                let mut count = 0u64;
                for n in 0u64.. {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let mode = if n % 2 == 0 {
                        StopMode::Fast
                    } else {
                        StopMode::Immediate
                    };
                    let cluster = Arc::clone(&cluster);
                    let restarted = tokio::task::spawn_blocking(move || {
                        cluster.stop(mode)?;
                        cluster.start()
                    })
                    .await;
                    if matches!(restarted, Ok(Ok(()))) {
                        count += 1;
                    }
                }
                count
            }
        });
        let config = WorkloadConfig {
            min_calls: usize::MAX,
            ..fast_workload("stress-restarts", budget)
        };
        let report = workload::run(&config, storage).await;
        stop.store(true, Ordering::Release);
        let count = restarts.await.unwrap_or(0);
        Ok((report, count))
    })
}

fn postgres_failovers(budget: Duration) -> Result<(WorkloadReport, u64), String> {
    multi_thread()?.block_on(async {
        let pair = ReplicatedPair::start(Replication::Synchronous).await?;
        let first = tenure_reliability::postgres_storage(&pair.primary.url(), 16).await?;
        let switch = Arc::new(SwitchableStorage::new(first));
        let config = WorkloadConfig {
            leases: 4,
            max_duration: budget,
            min_calls: usize::MAX,
            release_chance: 0.1,
            ..WorkloadConfig::standard("stress-failovers", usize::MAX)
        };
        let storage: Arc<dyn tenure_ports::EventStorage> = switch.clone();
        let run = tokio::spawn(async move { workload::run(&config, storage).await });
        let deadline = tokio::time::Instant::now() + budget;
        let mut pair = Some(pair);
        let mut failovers = 0u64;
        let mut outcome = Ok(());
        while tokio::time::Instant::now() + Duration::from_secs(25) < deadline {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let Some(current) = pair.take() else { break };
            let step = async {
                let promoted = current.fail_over().await?;
                let storage = tenure_reliability::postgres_storage(&promoted.url(), 16).await?;
                switch.switch_to(storage);
                ReplicatedPair::attach(promoted, Replication::Synchronous).await
            };
            match step.await {
                Ok(next) => {
                    failovers += 1;
                    pair = Some(next);
                }
                Err(message) => {
                    outcome = Err(format!("failover {}: {message}", failovers + 1));
                    break;
                }
            }
        }
        let report = run.await.map_err(|e| e.to_string())?;
        outcome.map(|()| (report, failovers))
    })
}
