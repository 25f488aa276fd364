//! The file backend's speed: appends per second with and without fsync, each against the raw
//! floor of writing the very same bytes with `write` (+ `fdatasync`) in the same run, and the
//! time to reopen (replay) a log of one million events, and the time to open a log whose
//! damaged last record is followed by megabytes of random bytes.
//!
//! Run with `cargo bench -p tenure-file --bench append` (or `cargo xtask bench file`). Set
//! `TENURE_BENCH_QUICK=1` for a short smoke run. Figures go to `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tenure_file::{Durability, FileEventStorage, FileOptions};
use tenure_ports::{AppendRequest, EventStorage, NewEvent};

const HEADER_LEN: usize = 16;
const ROUNDS: usize = 3;

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let quick = std::env::var_os("TENURE_BENCH_QUICK").is_some();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir_in(
        std::env::var_os("TENURE_BENCH_DIR")
            .unwrap_or_else(|| std::env::temp_dir().into_os_string()),
    )
    .unwrap();
    println!(
        "tenure-file append benchmark (directory {})",
        dir.path().display()
    );
    println!(
        "one event per append: ~150-byte JSON payload, ~300-byte record; median of {ROUNDS} rounds"
    );
    println!();
    println!(
        "{:<9} {:>8} {:>13} {:>13} {:>9} {:>14}",
        "mode", "appends", "backend/s", "raw floor/s", "ratio", "overhead/append"
    );

    let mut memory_line = None;
    for (label, durability, count) in [
        ("fsync", Durability::Fsync, if quick { 200 } else { 2_000 }),
        (
            "no fsync",
            Durability::NoFsync,
            if quick { 10_000 } else { 200_000 },
        ),
    ] {
        let mut backend = Vec::new();
        let mut raw = Vec::new();
        for round in 0..ROUNDS {
            let path = dir.path().join(format!("{label}-{round}.log"));
            backend.push(runtime.block_on(append_run(&path, durability, count)));
            let written = fs::read(&path).unwrap();
            let frames = frames_of(&written);
            assert_eq!(frames.len(), count);
            let raw_path = dir.path().join(format!("{label}-{round}.raw"));
            raw.push(raw_run(&raw_path, &frames, durability == Durability::Fsync));
            fs::remove_file(&path).unwrap();
            fs::remove_file(&raw_path).unwrap();
        }
        if durability == Durability::NoFsync {
            // The shared in-memory logic alone, for attributing the overhead.
            let memory = median(
                (0..ROUNDS)
                    .map(|_| runtime.block_on(memory_run(count)))
                    .collect(),
            );
            memory_line = Some((count, memory));
        }
        let backend = median(backend);
        let raw = median(raw);
        let backend_rate = count as f64 / backend.as_secs_f64();
        let raw_rate = count as f64 / raw.as_secs_f64();
        let overhead = backend.saturating_sub(raw) / count as u32;
        println!(
            "{label:<9} {count:>8} {backend_rate:>13.0} {raw_rate:>13.0} {:>8.2}x {:>12.1} us",
            backend_rate / raw_rate,
            overhead.as_secs_f64() * 1e6
        );
    }

    if let Some((count, memory)) = memory_line {
        println!(
            "{:<9} {count:>8} {:>13.0}   (tenure-memory alone: validation, ids, copies; no file)",
            "memory",
            count as f64 / memory.as_secs_f64()
        );
    }

    println!();
    let million = if quick { 50_000 } else { 1_000_000 };
    for per_append in [100usize, 1] {
        let path = dir.path().join(format!("reopen-{per_append}.log"));
        let built = Instant::now();
        runtime.block_on(build_log(&path, million, per_append));
        let built = built.elapsed();
        let size = fs::metadata(&path).unwrap().len();
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let storage = FileEventStorage::open(&path).unwrap();
            times.push(started.elapsed());
            assert_eq!(storage.recovery().events, million as u64);
            drop(storage);
        }
        let reopen = median(times);
        println!(
            "reopen: {million} events in {} records of {per_append}: {:.2} s ({:.0} events/s, \
             {:.0} MB/s); file {:.1} MB, written in {:.1} s",
            million / per_append,
            reopen.as_secs_f64(),
            million as f64 / reopen.as_secs_f64(),
            size as f64 / 1e6 / reopen.as_secs_f64(),
            size as f64 / 1e6,
            built.as_secs_f64()
        );
        fs::remove_file(&path).unwrap();
    }

    println!();
    recovery_after_damage(dir.path(), quick);
}

/// Opening a log whose last record is damaged and followed by random bytes, against the floor
/// of reading the same file and checksumming it once, in the same run. The search for a whole
/// record after the damage must be linear: the ratio stays flat as the garbage doubles.
fn recovery_after_damage(dir: &Path, quick: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sizes: &[usize] = if quick { &[4] } else { &[16, 32, 64] };
    for &mib in sizes {
        let path = dir.join(format!("damaged-{mib}.log"));
        runtime.block_on(build_log(&path, 1_000, 1));
        let mut bytes = fs::read(&path).unwrap();
        let last = frames_of(&bytes).last().unwrap().len();
        let at = bytes.len() - last + 12;
        bytes[at] ^= 0x01;
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        bytes.extend((0..mib << 20).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let (mut open, mut floor) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            fs::write(&path, &bytes).unwrap();
            let started = Instant::now();
            let read = fs::read(&path).unwrap();
            std::hint::black_box(crc32fast::hash(&read));
            floor.push(started.elapsed());
            let started = Instant::now();
            let storage = FileEventStorage::open(&path).unwrap();
            open.push(started.elapsed());
            assert!(storage.recovery().cut.is_some());
        }
        let (open, floor) = (median(open), median(floor));
        println!(
            "recovery after damage + {mib:>2} MiB of random bytes: {:.3} s, floor (read + crc32) \
             {:.3} s, ratio {:.1}x, {:.1} ms per MiB",
            open.as_secs_f64(),
            floor.as_secs_f64(),
            open.as_secs_f64() / floor.as_secs_f64(),
            open.as_secs_f64() * 1e3 / mib as f64
        );
        fs::remove_file(&path).unwrap();
    }
}

fn event(n: usize) -> NewEvent {
    NewEvent::new(
        "bench-stream",
        "BenchEvent",
        json!({ "n": n, "customer": "customer-0001", "data": "x".repeat(100) }),
    )
    .tagged("bench")
}

async fn append_run(path: &Path, durability: Durability, count: usize) -> Duration {
    let storage =
        FileEventStorage::open_with(path, FileOptions::new().durability(durability)).unwrap();
    let requests: Vec<AppendRequest> = (0..count)
        .map(|n| AppendRequest::new(vec![event(n)]))
        .collect();
    let started = Instant::now();
    for request in &requests {
        storage.append(request).await.unwrap();
    }
    let elapsed = started.elapsed();
    storage.close().await.unwrap();
    elapsed
}

async fn memory_run(count: usize) -> Duration {
    let storage = tenure_memory::MemoryEventStorage::new();
    let requests: Vec<AppendRequest> = (0..count)
        .map(|n| AppendRequest::new(vec![event(n)]))
        .collect();
    let started = Instant::now();
    for request in &requests {
        storage.append(request).await.unwrap();
    }
    started.elapsed()
}

/// The records of a log file, as written.
fn frames_of(bytes: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        frames.push(&bytes[at..at + 8 + len]);
        at += 8 + len;
    }
    frames
}

/// The floor: the same bytes, one `write` (and one `fdatasync`) per record.
fn raw_run(path: &Path, frames: &[&[u8]], sync: bool) -> Duration {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(&[0u8; HEADER_LEN]).unwrap();
    file.sync_all().unwrap();
    let started = Instant::now();
    for frame in frames {
        file.write_all(frame).unwrap();
        if sync {
            file.sync_data().unwrap();
        }
    }
    let elapsed = started.elapsed();
    drop::<File>(file);
    elapsed
}

async fn build_log(path: &Path, events: usize, per_append: usize) {
    let storage =
        FileEventStorage::open_with(path, FileOptions::new().durability(Durability::NoFsync))
            .unwrap();
    let mut n = 0;
    while n < events {
        let batch = (n..n + per_append).map(event).collect();
        storage.append(&AppendRequest::new(batch)).await.unwrap();
        n += per_append;
    }
    storage.close().await.unwrap();
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}
