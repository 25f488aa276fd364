//! `tenure run --metrics-listen`: two competing `tenure run` processes on PostgreSQL, each
//! serving its metrics on a loopback port, scraped over plain HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure_pg_test::{PrefixGuard, required_server, unique_name, unique_prefix};

/// A loopback port nobody listens on (bound, then freed for `tenure run` to bind).
fn free_port() -> SocketAddr {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// `GET /metrics` over a plain TCP connection; the body, or `None` while nothing listens.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Some(body.to_owned())
}

/// The value of the sample `series` (name and labels, exactly as exported).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// Scrapes `addr` until `done` holds of the body; the body.
fn scrape_until(addr: SocketAddr, what: &str, done: impl Fn(&str) -> bool) -> String {
    let began = Instant::now();
    let mut last = None;
    while began.elapsed() < Duration::from_secs(20) {
        if let Some(body) = scrape(addr) {
            if done(&body) {
                return body;
            }
            last = Some(body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not seen on {addr} within 20 s; last scrape:\n{last:?}");
}

struct Contender {
    child: Child,
    metrics: SocketAddr,
}

impl Contender {
    fn start(url: &str, prefix: &str, lease: &str, owner: &str) -> Contender {
        let metrics = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tenure"))
            // 2 s: at 1 s (a call timeout of 167 ms) two slow renewals on a loaded machine
            // can make the leader lapse, and the gauges and counters below count it.
            .args(["run", "--lease", lease, "--owner", owner, "--ttl", "2s"])
            .args(["--prefix", prefix, "--metrics-listen", &metrics.to_string()])
            .args(["--", "sleep", "60"])
            .env("TENURE_DATABASE_URL", url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Contender { child, metrics }
    }

    /// SIGTERM, as a supervisor stops it: it stops its command and releases.
    fn stop(&mut self) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = kill(pid, Signal::SIGTERM);
        let began = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if began.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                panic!("tenure run did not stop within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_leader_exports_the_leader_gauge_at_1_and_the_standby_at_0() {
    let server = required_server();
    let prefix = unique_prefix();
    let _tables = PrefixGuard::new(server.url.clone(), prefix.clone());
    let lease = unique_name("job");
    let gauge = format!("tenure_leader{{lease=\"{lease}\"}}");

    let mut a = Contender::start(&server.url, &prefix, &lease, "a");
    let leading = scrape_until(a.metrics, "a leading", |body| {
        sample(body, &gauge) == Some(1.0)
    });
    let b = Contender::start(&server.url, &prefix, &lease, "b");
    let standing_by = scrape_until(b.metrics, "b standing by", |body| {
        sample(body, &gauge).is_some()
            && sample(body, "tenure_storage_calls_total{op=\"request_lease\"}") >= Some(2.0)
    });
    assert_eq!(sample(&standing_by, &gauge), Some(0.0), "{standing_by}");
    // a still leads once b has asked twice: exactly one leader across the two.
    let leading_still = scrape(a.metrics).unwrap();
    assert_eq!(sample(&leading_still, &gauge), Some(1.0));

    // What a leader exports besides: its acquisition, its renewals, the help texts, and the
    // storage-call latency as a histogram with buckets.
    let acquired = format!("tenure_transitions_total{{lease=\"{lease}\",kind=\"acquired\"}}");
    // Read from the later scrape: the gauge and the counter are two writes, and the first
    // scrape may fall between them.
    assert_eq!(
        sample(&leading_still, &acquired),
        Some(1.0),
        "{leading_still}"
    );
    assert!(leading.contains("# HELP tenure_leader "), "{leading}");
    assert!(
        leading_still
            .contains("tenure_storage_call_seconds_bucket{op=\"request_lease\",le=\"0.5\"}"),
        "{leading_still}"
    );

    // a stops and releases; b takes over at its next request and says so.
    a.stop();
    let taken_over = scrape_until(b.metrics, "b leading", |body| {
        sample(body, &gauge) == Some(1.0)
    });
    assert_eq!(
        sample(
            &taken_over,
            &format!("tenure_handover_seconds_count{{lease=\"{lease}\"}}")
        ),
        Some(1.0),
        "{taken_over}"
    );
}

#[test]
fn an_address_that_cannot_be_bound_is_a_clear_error() {
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = taken.local_addr().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "run",
            "--lease",
            "job",
            "--metrics-listen",
            &addr.to_string(),
        ])
        .args([
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "--",
            "true",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("tenure: error: serving metrics on {addr}")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
