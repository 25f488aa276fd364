//! `tenure demo`, the project's main job, run as a user runs it: every chapter of the story
//! is told, in order, and it exits 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Instant;

/// The lines every run must tell, in this order (timestamps vary; the story does not).
const STORY: &[&str] = &[
    "Chapter 1: the first election",
    "replica-a  elected leader (token 1)",
    "replica-a  dispatching orders, every batch stamped with token 1",
    "downstream accepted the first batch from replica-a (token 1)",
    "replica-a  renewed the lease (token 1",
    "replica-a  renewed the lease (token 1",
    "Chapter 2: a planned handover",
    "replica-c  standing by (leader replica-a, token 1)",
    "replica-a  asked to step down: a contender with a higher priority is waiting (token 1)",
    "replica-a  finishing its current batch before handing over",
    "replica-a  released the lease (token 1)",
    "replica-c  elected leader (token 2)",
    "Chapter 3: a crash",
    "replica-a  standing by (leader replica-c, token 2)",
    "replica-c  CRASHES: its process is killed, nothing is released",
    "replica-a  elected leader (token 3)",
    "-> replica-a took over",
    "Chapter 4: a graceful release",
    "replica-b  standing by (leader replica-a, token 3)",
    "replica-a  shuts down gracefully",
    "replica-a  released the lease (token 3)",
    "replica-b  elected leader (token 4)",
    "-> replica-b took over",
    "Chapter 5: a zombie leader, stopped by its fencing token",
    "replica-d  standing by (leader replica-b, token 4)",
    "replica-b  FREEZES mid-batch, holding token 4",
    "replica-d  elected leader (token 5)",
    "downstream accepted the first batch from replica-d (token 5)",
    "replica-b  wakes up, still believing it leads, and publishes its batch with token 4",
    "downstream REJECTED the batch from replica-b: stale fencing token 4 for lease \"order-dispatcher\": token 5 was already accepted",
    "replica-d  shuts down gracefully: the story is over",
    "replica-d  released the lease (token 5)",
    "Summary",
    "Checked: 5 tenures with tokens 1, 2, 3, 4, 5; no two overlapped; writes in token order.",
];

fn assert_story(stdout: &str, story: &[&str]) {
    let mut from = 0;
    for line in story {
        match stdout[from..].find(line) {
            Some(at) => from += at + line.len(),
            None => panic!("the story lacks {line:?} (in order) in:\n{stdout}"),
        }
    }
}

#[test]
fn the_demo_tells_the_whole_story_in_order_and_exits_0() {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("demo")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    println!("{stdout}");
    assert!(
        output.status.success(),
        "exit {:?}; stderr: {stderr}",
        output.status
    );
    assert!(stderr.is_empty(), "nothing on stderr, got: {stderr}");
    assert_story(&stdout, STORY);
    // Nothing else goes wrong along the way.
    for unwanted in [
        "storage call failed",
        "stopped leading",
        "lost the lease",
        "shutdown failed",
    ] {
        assert!(
            !stdout.contains(unwanted),
            "unexpected {unwanted:?} in:\n{stdout}"
        );
    }
    assert!(took.as_secs_f64() < 15.0, "the demo took {took:?}");
    println!("the demo took {took:?}");
}

#[test]
fn the_demo_tells_the_same_story_on_postgresql() {
    let server = match tenure_pg_test::server() {
        Ok(server) => server,
        Err(message) => panic!("{message}"),
    };
    let prefix = tenure_pg_test::unique_prefix();
    let _cleanup = tenure_pg_test::PrefixGuard::new(server.url.clone(), prefix.clone());
    let output = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "demo",
            "--ttl",
            "1500ms",
            "--postgres",
            &server.url,
            "--prefix",
            &prefix,
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    println!("{stdout}");
    assert!(
        output.status.success(),
        "exit {:?}; stderr: {stderr}",
        output.status
    );
    assert!(stdout.contains("store  PostgreSQL at"));
    // The same story, under a lease name of its own.
    let story: Vec<&str> = STORY
        .iter()
        .map(|line| line.split(" for lease \"").next().unwrap_or(line))
        .collect();
    assert_story(&stdout, &story);
}
