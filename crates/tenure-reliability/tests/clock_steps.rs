//! Real wall-clock steps on the embedded backends: the election workload runs in a child
//! process under libfaketime, whose wall clock this test steps forward and backward by more
//! than the largest ttl (1 s) while 16 electors contend; the history checker judges the run.
//!
//! * memory and file, on their storage clock (the monotonic clock): zero overlapping
//!   leaderships;
//! * the negative control, memory on a storage clock that reads the wall clock at every call
//!   (what the embedded backends did before): the checker finds overlapping leaders.
//!
//! Only the wall clock is stepped (`FAKETIME_DONT_FAKE_MONOTONIC=1`), as NTP or an operator
//! steps it; the child reports the steps it saw, so that a run in which no step happened
//! cannot pass for a clean one. Needs Debian's `faketime` package (libfaketime), which
//! `.ci/run` installs; without it the test fails, naming the package.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The wall-clock offsets written while the child runs, one every 1.5 s: forward 10 s, forward
/// 10 s more, back 15 s, forward 25 s. Every step is larger than the largest ttl.
const OFFSETS: &[&str] = &["+10s", "+20s", "+5s", "+30s"];

const SECONDS: u64 = 8;

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

struct Run {
    child: Child,
    offsets: PathBuf,
}

fn start(backend: &str, clock: &str, dir: &Path) -> Run {
    let offsets = dir.join(format!("offset-{backend}-{clock}"));
    std::fs::write(&offsets, "+0s").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_clock_step_workload"))
        .args(["--backend", backend, "--clock", clock])
        .args(["--seconds", &SECONDS.to_string()])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", &offsets)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Run { child, offsets }
}

/// The `key=value` pairs of the child's last line, with its whole output for messages.
fn finish(run: Run) -> (HashMap<String, String>, String) {
    let output = run.child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the workload failed: {text}");
    let summary = stdout
        .lines()
        .find_map(|line| line.strip_prefix("clock-step-workload: "))
        .unwrap_or_else(|| panic!("no summary line: {text}"));
    let pairs = summary
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (pairs, text)
}

fn number(pairs: &HashMap<String, String>, key: &str) -> u64 {
    pairs[key].parse().unwrap()
}

#[test]
fn stepped_wall_clock_never_gives_two_leaders_on_the_embedded_backends() {
    let dir = tempfile_dir();
    let runs = vec![
        start("memory", "monotonic", &dir),
        start("file", "monotonic", &dir),
        start("memory", "wall", &dir),
    ];
    for offset in OFFSETS {
        std::thread::sleep(Duration::from_millis(1500));
        for run in &runs {
            std::fs::write(&run.offsets, offset).unwrap();
        }
    }
    let results: Vec<_> = runs.into_iter().map(finish).collect();
    std::fs::remove_dir_all(&dir).unwrap();

    for (pairs, text) in &results {
        println!("{}", text.lines().last().unwrap_or_default());
        assert!(
            number(pairs, "wall_steps") >= OFFSETS.len() as u64 - 1,
            "the wall clock was not stepped as planned: {text}"
        );
        assert!(number(pairs, "largest_step_ms") >= 10_000, "{text}");
        assert!(
            number(pairs, "elections") >= 3,
            "too few elections to mean much: {text}"
        );
    }
    for (pairs, text) in &results[..2] {
        assert_eq!(number(pairs, "violations"), 0, "{text}");
    }
    let (control, text) = &results[2];
    assert!(
        number(control, "violations") > 0,
        "the negative control (a storage clock that reads the wall clock) showed no overlap, so \
         the checker or the fault is not working: {text}"
    );
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-clock-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
