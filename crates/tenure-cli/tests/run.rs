//! `tenure run` end to end against PostgreSQL, with competing `tenure run` processes. Each
//! child records its start (and, if it gets there, its end) in a file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::alive;
use tenure_pg_test::{PrefixGuard, server, unique_name, unique_prefix};

/// The ttl of [`Scene::run`]: at 1 s (a call timeout of ttl/6, 167 ms) two slow renewals in a
/// row on a loaded machine made a leader lapse, as `process_faults.rs` saw.
const TTL: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(667);

struct Scene {
    url: String,
    prefix: String,
    lease: String,
    log: PathBuf,
    _tables: PrefixGuard,
}

impl Scene {
    fn new() -> Scene {
        let server = match server() {
            Ok(server) => server,
            Err(message) => panic!("{message}"),
        };
        let prefix = unique_prefix();
        let log = std::env::temp_dir().join(format!("{}.log", unique_name("tenure_run")));
        Scene {
            url: server.url.clone(),
            lease: unique_name("job"),
            _tables: PrefixGuard::new(server.url.clone(), prefix.clone()),
            prefix,
            log,
        }
    }

    /// Starts `tenure run` as `name`, with a child that appends
    /// `start <name> <pid> <token> <uptime>` to the log (the pid as `/proc` shows it: `$$`
    /// is the pid inside the command's PID namespace), runs `body`, then appends
    /// `end <name> <uptime>`, and exits with `body`'s code. Times are `/proc/uptime`'s: a
    /// clock that no step of the wall clock moves. `tenure run`'s own log goes to
    /// [`Scene::stderr`].
    fn run(&self, name: &str, priority: i64, body: &str) -> Child {
        self.run_with_ttl(name, priority, "2s", body)
    }

    /// As [`Scene::run`], with a ttl of `ttl` (as `--ttl` takes it).
    fn run_with_ttl(&self, name: &str, priority: i64, ttl: &str, body: &str) -> Child {
        self.spawn(name, priority, ttl, &[], body)
    }

    /// As [`Scene::run_with_ttl`], with `--no-notifications`: polling only.
    fn run_polling(&self, name: &str, priority: i64, ttl: &str, body: &str) -> Child {
        self.spawn(name, priority, ttl, &["--no-notifications"], body)
    }

    fn spawn(&self, name: &str, priority: i64, ttl: &str, options: &[&str], body: &str) -> Child {
        let script = format!(
            "read -r pid rest < /proc/self/stat; \
             read -r up idle < /proc/uptime; \
             echo \"start {name} $pid $TENURE_FENCING_TOKEN $up\" >> \"$1\"; {body}; \
             code=$?; read -r up idle < /proc/uptime; echo \"end {name} $up\" >> \"$1\"; \
             exit $code"
        );
        let stderr = std::fs::File::create(self.stderr_path(name)).unwrap();
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["run", "--lease", &self.lease, "--owner", name, "--ttl", ttl])
            .args(options)
            .args([
                "--priority",
                &priority.to_string(),
                "--prefix",
                &self.prefix,
            ])
            .args(["--", "sh", "-c", &script, "sh"])
            .arg(&self.log)
            .env("TENURE_DATABASE_URL", &self.url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap()
    }

    /// One value of `sql` (a `float8`), read on a connection of its own.
    fn query_f64(&self, sql: &str) -> f64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = tenure_pg_test::connect(&self.url).await.unwrap();
            client.query_one(sql, &[]).await.unwrap().get(0)
        })
    }

    /// Waits until `owner` is registered as a contender for the lease (its first request was
    /// answered), at most `limit`.
    fn wait_for_contender(&self, owner: &str, limit: Duration) {
        let began = Instant::now();
        let registered = format!(
            "SELECT count(*)::float8 FROM {}lease_contenders WHERE lease_name = '{}' \
             AND owner = '{owner}'",
            self.prefix, self.lease
        );
        while self.query_f64(&registered) < 1.0 {
            assert!(
                began.elapsed() < limit,
                "{owner} did not register within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The database's clock now, in seconds since the epoch.
    fn database_clock(&self) -> f64 {
        self.query_f64("SELECT extract(epoch FROM clock_timestamp())::float8")
    }

    /// When the lease's current tenure began, on the database's clock (the storage's record).
    fn acquired_at(&self) -> f64 {
        self.query_f64(&format!(
            "SELECT extract(epoch FROM acquired_at)::float8 FROM {}leases WHERE lease_name = '{}'",
            self.prefix, self.lease
        ))
    }

    fn stderr_path(&self, name: &str) -> PathBuf {
        self.log.with_extension(format!("{name}.stderr"))
    }

    /// What `tenure run` as `name` has logged so far.
    fn stderr(&self, name: &str) -> String {
        std::fs::read_to_string(self.stderr_path(name)).unwrap_or_default()
    }

    fn lines(&self) -> Vec<Line> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(Line::parse)
            .collect()
    }

    /// Waits until the log has `count` start lines.
    fn wait_for_starts(&self, count: usize, limit: Duration) -> Vec<Line> {
        let began = Instant::now();
        loop {
            let lines = self.lines();
            if lines.iter().filter(|l| l.start).count() >= count {
                return lines;
            }
            assert!(began.elapsed() < limit, "only {lines:?} after {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
        for name in ["a", "b", "low", "high"] {
            let path = self.stderr_path(name);
            if let Ok(log) = std::fs::read_to_string(&path) {
                // Shown with a failing test's output.
                println!("--- tenure run as {name}:\n{log}");
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

#[derive(Debug, Clone)]
struct Line {
    start: bool,
    name: String,
    pid: i32,
    token: u64,
    /// When the line was written, on `/proc/uptime`'s clock.
    at: Duration,
}

impl Line {
    fn parse(text: &str) -> Line {
        let fields: Vec<&str> = text.split_whitespace().collect();
        match fields.as_slice() {
            ["start", name, pid, token, at] => Line {
                start: true,
                name: (*name).to_owned(),
                pid: pid.parse().unwrap(),
                token: token.parse().unwrap(),
                at: uptime_from(at),
            },
            ["end", name, at] => Line {
                start: false,
                name: (*name).to_owned(),
                pid: 0,
                token: 0,
                at: uptime_from(at),
            },
            _ => panic!("unexpected log line {text:?}"),
        }
    }
}

fn wait_with_limit(child: &mut Child, limit: Duration) -> ExitStatus {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            panic!("tenure run did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends SIGTERM to `child` (a `tenure run`).
fn sigterm(child: &Child) {
    kill(
        Pid::from_raw(i32::try_from(child.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
}

/// `/proc/uptime`'s first field (seconds, to the hundredth), as the children write it.
fn uptime_from(text: &str) -> Duration {
    Duration::from_secs_f64(text.parse().unwrap())
}

/// Now, on the clock the children's lines use.
fn uptime() -> Duration {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    uptime_from(text.split_whitespace().next().unwrap())
}

/// Every start is followed by its own end before the next start.
fn assert_one_at_a_time(lines: &[Line]) {
    for pair in lines.chunks(2) {
        match pair {
            [start, end] => {
                assert!(start.start && !end.start, "interleaved: {lines:?}");
                assert_eq!(start.name, end.name, "interleaved: {lines:?}");
            }
            [start] => assert!(start.start, "{lines:?}"),
            _ => unreachable!(),
        }
    }
}

#[test]
fn two_contenders_run_their_commands_one_after_the_other() {
    let scene = Scene::new();
    let mut a = scene.run("a", 0, "sleep 1; (exit 3)");
    let mut b = scene.run("b", 0, "sleep 1");
    let codes = [
        wait_with_limit(&mut a, Duration::from_secs(15)),
        wait_with_limit(&mut b, Duration::from_secs(15)),
    ];
    let lines = scene.lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_one_at_a_time(&lines);
    // Each exits with its own child's code.
    let by_name = |name: &str| if name == "a" { 3 } else { 0 };
    assert_eq!(codes[0].code(), Some(by_name("a")));
    assert_eq!(codes[1].code(), Some(by_name("b")));
    // Two tenures, two tokens; the second took over at its next request after the release.
    assert_eq!((lines[0].token, lines[2].token), (1, 2));
    let handover = lines[2].at - lines[1].at;
    println!("handover after a release: {handover:?}");
    assert!(handover < POLL + Duration::from_millis(300), "{handover:?}");
}

#[test]
fn when_the_leader_is_killed_the_standby_takes_over_within_ttl_and_a_poll() {
    let scene = Scene::new();
    let mut first = scene.run("a", 0, "sleep 60");
    let started = scene.wait_for_starts(1, Duration::from_secs(10));
    let mut second = scene.run("b", 0, "sleep 60");
    // The standby registers, and the leader renews meanwhile.
    scene.wait_for_contender("b", Duration::from_secs(10));
    assert_eq!(scene.lines().len(), 1, "only one child runs");

    let killed_at = uptime();
    let killed_on_database_clock = scene.database_clock();
    first.kill().unwrap(); // SIGKILL: no release, no chance to stop the child itself
    let _ = first.wait();
    let leader_child = started[0].pid;

    let lines = scene.wait_for_starts(2, Duration::from_secs(10));
    let took_over = Duration::from_secs_f64(scene.acquired_at() - killed_on_database_clock);
    println!(
        "the standby took the lease {took_over:?} after the leader was killed (the storage's \
         record), and its child started {:?} after",
        lines[1].at.saturating_sub(killed_at)
    );
    assert!(
        !alive(leader_child),
        "the killed leader's child was killed by its guard"
    );
    assert_eq!((lines[0].name.as_str(), lines[1].name.as_str()), ("a", "b"));
    assert!(
        took_over >= Duration::from_millis(500),
        "not before the lease could expire"
    );
    // The lease expires at most a ttl after the kill, and the standby's next request goes out
    // within a poll interval of that; the storage records the takeover when the request
    // arrives, within the call timeout (half a poll) of its sending. Unless one of the
    // standby's requests went unanswered (a loaded machine): an unanswered takeover may have
    // taken the lease (token 2) without the standby knowing; it then lapses, and the standby's
    // later request starts a new tenure (token 3). Its own log says which path it took.
    let unanswered = scene
        .stderr("b")
        .lines()
        .filter(|line| line.contains("lease request failed") || line.contains("too late"))
        .count();
    if unanswered == 0 {
        assert_eq!(lines[1].token, 2);
        assert!(
            took_over <= TTL + POLL + POLL / 2,
            "within ttl + one poll interval (+ the call timeout): {took_over:?}"
        );
    } else {
        println!("{unanswered} of the standby's requests went unanswered");
        assert!(lines[1].token >= 2, "a token above the killed leader's");
    }

    // SIGTERM to `tenure run`: it stops its child, releases, and reports the child's end.
    sigterm(&second);
    let status = wait_with_limit(&mut second, Duration::from_secs(10));
    assert_eq!(status.code(), Some(143), "sh was ended by SIGTERM");
    assert!(!alive(lines[1].pid));
}

#[test]
fn a_higher_priority_contender_makes_the_leader_stop_its_command_and_hand_over() {
    let scene = Scene::new();
    let mut low = scene.run("low", 0, "sleep 60");
    scene.wait_for_starts(1, Duration::from_secs(10));
    let mut high = scene.run("high", 10, "sleep 0.2");
    // The low-priority leader gets SIGTERM on its next renewal and exits; the high-priority
    // contender takes over at its next request.
    let low_status = wait_with_limit(&mut low, Duration::from_secs(10));
    assert_eq!(low_status.code(), Some(76), "handed over");
    let high_status = wait_with_limit(&mut high, Duration::from_secs(10));
    assert_eq!(high_status.code(), Some(0));
    let lines = scene.lines();
    let names: Vec<_> = lines.iter().map(|l| (l.start, l.name.as_str())).collect();
    assert_eq!(names, [(true, "low"), (true, "high"), (false, "high")]);
    assert!(!alive(lines[0].pid), "the low-priority child was stopped");
}

#[test]
fn a_leader_stopped_by_sigterm_hands_over_without_waiting_for_the_standbys_poll() {
    // ttl 60 s: the standby polls every 20 s, far beyond the 5 s allowed here, so only the
    // storage's wake-up (LISTEN/NOTIFY on the release) can start its command in time.
    let scene = Scene::new();
    let mut a = scene.run_with_ttl("a", 0, "60s", "sleep 60");
    scene.wait_for_starts(1, Duration::from_secs(10));
    let mut b = scene.run_with_ttl("b", 0, "60s", "sleep 0.2");
    // b's first request (at its start) registers it, and it stands by.
    scene.wait_for_contender("b", Duration::from_secs(10));
    assert_eq!(scene.lines().len(), 1, "only one child runs");

    let stopped_at = uptime();
    sigterm(&a);
    let lines = scene.wait_for_starts(2, Duration::from_secs(5));
    let took_over = lines[1].at.saturating_sub(stopped_at);
    println!("the standby's child started {took_over:?} after SIGTERM to the leader");
    assert_eq!((lines[0].name.as_str(), lines[1].name.as_str()), ("a", "b"));
    assert_eq!(lines[1].token, 2);
    assert_eq!(
        wait_with_limit(&mut a, Duration::from_secs(10)).code(),
        Some(143)
    );
    assert_eq!(
        wait_with_limit(&mut b, Duration::from_secs(10)).code(),
        Some(0)
    );
}

#[test]
fn with_no_notifications_a_release_waits_for_the_standbys_poll() {
    // The negative control of the test above: the same handover, the standby polling only,
    // is not taken up within 3 s (its next poll is up to 20 s away).
    let scene = Scene::new();
    let mut a = scene.run_with_ttl("a", 0, "60s", "sleep 60");
    scene.wait_for_starts(1, Duration::from_secs(10));
    let mut b = scene.run_polling("b", 0, "60s", "sleep 0.2");
    scene.wait_for_contender("b", Duration::from_secs(10));
    sigterm(&a);
    assert_eq!(
        wait_with_limit(&mut a, Duration::from_secs(10)).code(),
        Some(143)
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        scene.lines().len(),
        1,
        "the polling standby started at once"
    );
    sigterm(&b);
    let _ = wait_with_limit(&mut b, Duration::from_secs(10));
}

#[test]
fn with_no_notifications_handovers_happen_by_polling() {
    let scene = Scene::new();
    let mut a = scene.run_polling("a", 0, "2s", "sleep 1");
    let mut b = scene.run_polling("b", 0, "2s", "sleep 0.2");
    assert_eq!(
        wait_with_limit(&mut a, Duration::from_secs(15)).code(),
        Some(0)
    );
    assert_eq!(
        wait_with_limit(&mut b, Duration::from_secs(15)).code(),
        Some(0)
    );
    let lines = scene.lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_one_at_a_time(&lines);
}
