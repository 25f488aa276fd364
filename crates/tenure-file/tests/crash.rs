//! Crash tests against real processes: a child appends in a loop and is killed with SIGKILL
//! at random moments, many times; after each kill, every append the child acknowledged is in
//! the file, and every batch in it is whole. And a second process opening a file that a live
//! process holds gets `InUse`.
//!
//! The child is this test binary, run again with `CHILD_ENV` set: the test `child_entry_point`
//! does nothing in an ordinary run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use tenure_file::{Durability, FileError, FileEventStorage, FileOptions};
use tenure_ports::{
    AppendRequest, EventCursor, EventQuery, EventStorage, NewEvent, ReadOptions, StoredEvent,
};

const CHILD_ENV: &str = "TENURE_FILE_TEST_CHILD_LOG";
const MODE_ENV: &str = "TENURE_FILE_TEST_CHILD_MODE";

/// The child's side: runs only when this binary is re-executed by a test below.
#[test]
fn child_entry_point() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mode = std::env::var(MODE_ENV).unwrap_or_default();
    let result = match mode.as_str() {
        "append-fsync" => append_forever(Path::new(&path), Durability::Fsync),
        "append-nofsync" => append_forever(Path::new(&path), Durability::NoFsync),
        "hold" => hold(Path::new(&path)),
        other => Err(format!("unknown child mode {other:?}")),
    };
    if let Err(err) = result {
        eprintln!("child failed: {err}");
        std::process::exit(3);
    }
}

/// Appends batches of 1 to 4 events forever, printing `ack <first> <last> <batch>` after each
/// append returns, and `bookmark <position>` after each bookmark returns.
fn append_forever(path: &Path, durability: Durability) -> Result<(), String> {
    let storage = FileEventStorage::open_with(path, FileOptions::new().durability(durability))
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let pid = std::process::id();
    let mut out = std::io::stdout().lock();
    // libtest has printed `test child_entry_point ... ` without a newline: end that line.
    writeln!(out).map_err(|e| e.to_string())?;
    runtime.block_on(async {
        for n in 0u64.. {
            let batch = format!("{pid}-{n}");
            let size = 1 + (n % 4) as usize;
            let events = (0..size)
                .map(|i| {
                    NewEvent::new(
                        "crash",
                        "Appended",
                        json!({ "batch": batch, "of": size, "i": i, "pad": "x".repeat((n as usize * 37 + i * 101) % 3000) }),
                    )
                })
                .collect();
            let stored = storage
                .append(&AppendRequest::new(events))
                .await
                .map_err(|e| e.to_string())?;
            let (first, last) = (stored[0].position, stored[size - 1].position);
            writeln!(out, "ack {first} {last} {batch}").map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
            if n % 5 == 4 {
                storage
                    .bookmark("crash-reader", last, &[])
                    .await
                    .map_err(|e| e.to_string())?;
                writeln!(out, "bookmark {last}").map_err(|e| e.to_string())?;
                out.flush().map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })
}

/// Opens the log, says so, and holds it until killed.
fn hold(path: &Path) -> Result<(), String> {
    let _storage = FileEventStorage::open(path).map_err(|e| e.to_string())?;
    println!("\nlocked");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(60));
    Err("the parent never killed the child".into())
}

fn spawn_child(path: &Path, mode: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_entry_point",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env(MODE_ENV, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A small xorshift generator: the kill moments, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ack {
    last: u64,
    batch: String,
}

async fn read_all(storage: &FileEventStorage) -> Vec<StoredEvent> {
    let mut cursor = EventCursor::new(storage, EventQuery::all(), ReadOptions::forwards());
    let mut all = Vec::new();
    while let Some(batch) = cursor.next_batch().await.unwrap() {
        all.extend(batch);
    }
    all
}

#[test]
fn sigkill_at_random_moments_never_loses_an_acknowledged_append() {
    const MIN_KILLS: usize = 20;
    const MAX_KILLS: usize = 50;
    const BUDGET: Duration = Duration::from_secs(20);
    let seed = std::env::var("TENURE_FILE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("crash test seed: {seed} (set TENURE_FILE_CRASH_SEED to replay)");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.log");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut acked: BTreeMap<u64, Ack> = BTreeMap::new();
    let mut last_bookmark = 0u64;
    let (mut kills, mut cuts, mut cut_bytes) = (0usize, 0usize, 0u64);

    while kills < MAX_KILLS && (kills < MIN_KILLS || started.elapsed() < BUDGET) {
        let mode = if kills % 4 == 3 {
            "append-nofsync"
        } else {
            "append-fsync"
        };
        let mut child = spawn_child(&path, mode);
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            // A line cut short by the kill (no newline) was not fully acknowledged.
            while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                if line.ends_with(b"\n") {
                    lines.push(String::from_utf8_lossy(&line).trim_end().to_owned());
                }
                line.clear();
            }
            lines
        });
        // Mostly while appending; sometimes during start-up and replay.
        let delay = if rng.below(5) == 0 {
            rng.below(15)
        } else {
            15 + rng.below(250)
        };
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        let lines = reader.join().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(
            status.code().is_none(),
            "the child stopped by itself ({status}) before the kill: {stderr}"
        );
        kills += 1;

        for line in &lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["ack", first, last, batch] => {
                    let ack = Ack {
                        last: last.parse().unwrap(),
                        batch: (*batch).to_owned(),
                    };
                    let previous = acked.insert(first.parse().unwrap(), ack.clone());
                    assert!(previous.is_none(), "position {first} acknowledged twice");
                }
                ["bookmark", position] => last_bookmark = position.parse().unwrap(),
                _ => {}
            }
        }

        runtime.block_on(async {
            let storage = FileEventStorage::open(&path)
                .unwrap_or_else(|err| panic!("after kill {kills} (seed {seed}): {err}"));
            if let Some(cut) = &storage.recovery().cut {
                assert!(!cut.discarded_records, "{cut:?}");
                cuts += 1;
                cut_bytes += cut.bytes;
            }
            let events = read_all(&storage).await;
            // Positions are 1..=n, and every batch is whole: `of` events, in order.
            let mut batches: BTreeMap<String, Vec<&StoredEvent>> = BTreeMap::new();
            for (index, event) in events.iter().enumerate() {
                assert_eq!(event.position.get(), index as u64 + 1);
                let batch = event.payload["batch"].as_str().unwrap().to_owned();
                batches.entry(batch).or_default().push(event);
            }
            for (batch, members) in &batches {
                let of = members[0].payload["of"].as_u64().unwrap() as usize;
                assert_eq!(members.len(), of, "batch {batch} is not whole");
                for (i, event) in members.iter().enumerate() {
                    assert_eq!(event.payload["i"].as_u64().unwrap() as usize, i);
                    assert_eq!(event.position.get(), members[0].position.get() + i as u64);
                }
            }
            // Every acknowledged append is there, at the positions acknowledged.
            for (first, ack) in &acked {
                let members = batches.get(&ack.batch).unwrap_or_else(|| {
                    panic!(
                        "acknowledged batch {} (at {first}) is lost after kill {kills}",
                        ack.batch
                    )
                });
                assert_eq!(members[0].position.get(), *first);
                assert_eq!(members[members.len() - 1].position.get(), ack.last);
            }
            let bookmark = storage.get_bookmark("crash-reader").await.unwrap();
            assert!(
                bookmark.map_or(0, |b| b.position.get()) >= last_bookmark,
                "an acknowledged bookmark went back"
            );
            storage.close().await.unwrap();
        });
    }
    let appended = acked.len();
    println!(
        "crash test: {kills} kills in {:.1} s, {appended} acknowledged appends all present, \
         {cuts} torn tails cut ({cut_bytes} bytes)",
        started.elapsed().as_secs_f64()
    );
    assert!(kills >= MIN_KILLS);
    assert!(appended > 0, "the child never acknowledged an append");
}

#[test]
fn another_process_opening_a_held_file_gets_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.log");
    let mut child = spawn_child(&path, "hold");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "locked" {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child exited before taking the lock"
        );
    }
    let err = FileEventStorage::open(&path).unwrap_err();
    assert!(matches!(err, FileError::InUse { .. }), "{err:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel released the dead process's lock.
    FileEventStorage::open(&path).unwrap();
}
