//! The election workload on an embedded backend in real time, for a test that steps this
//! process's wall clock from outside (libfaketime's `FAKETIME_TIMESTAMP_FILE`) while it runs.
//!
//! ```text
//! clock_step_workload --backend memory|file --clock monotonic|wall --seconds N
//! ```
//!
//! `--clock monotonic` is the backends' own storage clock ([`SystemClock`]); `--clock wall`
//! reads the wall clock at every call, as the embedded backends did before: the negative
//! control, which must show overlapping leaders when the wall clock steps forward. Besides
//! the workload's report, it prints the wall-clock steps it saw (the wall clock's movement
//! against the monotonic clock's, sampled every 20 ms), so that the test can tell the fault
//! was real. The last line is `clock-step-workload: key=value …` for the test to read.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tenure_file::{Durability, FileEventStorage, FileOptions};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{Clock, EventStorage, SystemClock, Timestamp};
use tenure_reliability::workload::{self, WorkloadConfig};

/// The storage clock the embedded backends used before: the wall clock, read at every call.
#[derive(Debug)]
struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now()).unwrap_or(Timestamp::from_micros(0))
    }
}

struct Args {
    backend: String,
    clock: String,
    seconds: u64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        backend: "memory".into(),
        clock: "monotonic".into(),
        seconds: 8,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--backend" => args.backend = value,
            "--clock" => args.clock = value,
            "--seconds" => args.seconds = value.parse().map_err(|e| format!("--seconds: {e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("clock_step_workload: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("clock_step_workload: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("clock_step_workload: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let clock: Arc<dyn Clock> = match args.clock.as_str() {
        "monotonic" => Arc::new(SystemClock::new()),
        "wall" => Arc::new(WallClock),
        other => return Err(format!("unknown clock {other}")),
    };
    let dir = std::env::temp_dir().join(format!("tenure-clock-step-{}", std::process::id()));
    let storage: Arc<dyn EventStorage> = match args.backend.as_str() {
        "memory" => Arc::new(MemoryEventStorage::with_clock(clock)),
        "file" => {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let options = FileOptions::new()
                .clock(clock)
                .durability(Durability::NoFsync);
            Arc::new(
                FileEventStorage::open_with(dir.join("events.log"), options)
                    .map_err(|e| e.to_string())?,
            )
        }
        other => return Err(format!("unknown backend {other}")),
    };

    let steps = Arc::new(AtomicU64::new(0));
    let largest_ms = Arc::new(AtomicU64::new(0));
    let watcher = tokio::spawn(watch_wall_clock(
        Arc::clone(&steps),
        Arc::clone(&largest_ms),
    ));

    let mut config = WorkloadConfig::standard("clock-steps", usize::MAX);
    config.ttl = (Duration::from_millis(300), Duration::from_secs(1));
    config.max_duration = Duration::from_secs(args.seconds);
    config.pause_chance = 0.0;
    // Hand over often, so that every step finds standbys and a recent election.
    config.release_chance = 0.1;
    let report = workload::run(&config, storage).await;
    watcher.abort();
    let _ = std::fs::remove_dir_all(&dir);

    println!("workload: {report}");
    println!(
        "clock-step-workload: backend={} clock={} violations={} elections={} calls={} \
         wall_steps={} largest_step_ms={}",
        args.backend,
        args.clock,
        report.history.violations.len(),
        report.history.elections,
        report.history.calls,
        steps.load(Ordering::Acquire),
        largest_ms.load(Ordering::Acquire),
    );
    Ok(())
}

/// Counts the wall clock's steps: moves of more than 500 ms away from the monotonic clock
/// between two samples 20 ms apart.
async fn watch_wall_clock(steps: Arc<AtomicU64>, largest_ms: Arc<AtomicU64>) {
    let mut last = (SystemTime::now(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = (SystemTime::now(), Instant::now());
        let mono = now.1.duration_since(last.1).as_secs_f64();
        let wall = match now.0.duration_since(last.0) {
            Ok(forward) => forward.as_secs_f64(),
            Err(backward) => -backward.duration().as_secs_f64(),
        };
        let step = (wall - mono).abs();
        if step > 0.5 {
            steps.fetch_add(1, Ordering::AcqRel);
            largest_ms.fetch_max((step * 1000.0) as u64, Ordering::AcqRel);
        }
        last = now;
    }
}
