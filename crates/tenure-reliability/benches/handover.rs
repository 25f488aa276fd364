//! Handover latency: how long a change of leader takes when nobody crashes.
//!
//! `cargo bench -p tenure-reliability --bench handover` (or `cargo xtask bench handover`)
//! measures, with `LeaderElector`s on a storage (generic over `EventStorage`: whatever the
//! storage offers, wake-ups or polling only, is what is measured):
//!
//! * **graceful handover**: a holder and a standby on one lease; the holder shuts down (which
//!   releases); the time from the call to `shutdown` until the standby's elector publishes that
//!   it leads.
//! * **planned handover**: a holder runs `run_while_leader` with a unit of work that ends as
//!   soon as a step-down is requested (an instant unit of work); a contender of higher priority
//!   starts; the time from its start until its elector publishes that it leads (its first
//!   request registers it, the holder hears `LeaderStepDownRequested`, releases, the contender
//!   acquires).
//!
//! each at ttl 30 s and 2 s (the elector's default poll of ttl/3), `TENURE_BENCH_TRIALS`
//! trials each (default 30), each trial on a lease of its own. On a storage with the
//! `lease_changes` capability the trials run one after another, the release right after the
//! standby is seen (its poll is then a whole interval away, so only a wake-up can be fast). On
//! one without it, where the figure is decided by where the release falls in the standby's poll
//! interval, each trial waits a random part of a poll interval first, and the trials run
//! concurrently (each poll-bound trial takes seconds; a few milliseconds of contention between
//! them do not show at that scale).
//!
//! Storages: `tenure-memory`, and PostgreSQL when `TENURE_DATABASE_URL` names a server (under a
//! table prefix of its own, dropped afterwards). When `etcd` and `etcdctl` are on the `PATH`, a
//! throwaway etcd is started on loopback ports with a temporary data directory, and its
//! election is measured in the same run as the anchor: one `etcdctl elect NAME a` leads, one
//! `etcdctl elect NAME b` waits; the time from SIGINT to the leader (on which `etcdctl` resigns)
//! until the waiting one prints its proposal. Every figure is then also given as a ratio to
//! etcd's median. etcd is stopped and its directory removed at the end.
//!
//! Figures: median, p90, p99 (nearest rank) and max, in milliseconds.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_memory::MemoryEventStorage;
use tenure_pg_test::PrefixGuard;
use tenure_ports::{Capability, EventStorage};
use tenure_postgres::PostgresEventStorage;
use tokio::time::{Instant, sleep, timeout};

const TTLS: [Duration; 2] = [Duration::from_secs(30), Duration::from_secs(2)];
/// How long an elector may take to reach a state that is not the measured one (its first
/// leadership, its first standby): a bound on a broken run, not part of any figure.
const SETUP_BOUND: Duration = Duration::from_secs(30);

fn trials() -> usize {
    std::env::var("TENURE_BENCH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(30)
}

/// A small random generator (SplitMix64), seeded from the clock: only for poll phases.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9);
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, below)`.
    fn below(&mut self, below: Duration) -> Duration {
        let fraction = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        below.mul_f64(fraction)
    }
}

/// Median, p90, p99 and max of some samples.
struct Figures {
    median: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

impl Figures {
    fn of(samples: &[Duration]) -> Figures {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |q: f64| {
            let n = sorted.len();
            let index = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            sorted[index]
        };
        Figures {
            median: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
        }
    }
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 1_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// One line of the report: the figures, and their ratios to the anchor's median.
fn report(what: &str, samples: &[Duration], anchor: Option<Duration>) {
    let f = Figures::of(samples);
    let mut line = format!(
        "{what:<58} n={:<3} median {:>10}  p90 {:>10}  p99 {:>10}  max {:>10}",
        samples.len(),
        ms(f.median),
        ms(f.p90),
        ms(f.p99),
        ms(f.max)
    );
    if let Some(anchor) = anchor.filter(|a| !a.is_zero()) {
        let ratio = |d: Duration| d.as_secs_f64() / anchor.as_secs_f64();
        line.push_str(&format!(
            "  | / etcd median: {:.2}x {:.2}x {:.2}x {:.2}x",
            ratio(f.median),
            ratio(f.p90),
            ratio(f.p99),
            ratio(f.max)
        ));
    }
    println!("{line}");
}

fn start(
    storage: &Arc<dyn EventStorage>,
    lease: &str,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> Result<LeaderElector, String> {
    let config = ElectorConfig::new(lease, ttl)
        .with_owner(owner)
        .with_priority(priority);
    LeaderElector::start(Arc::clone(storage), config).map_err(|e| e.to_string())
}

async fn reach(
    elector: &LeaderElector,
    bound: Duration,
    what: &str,
    wanted: impl Fn(&LeadershipState) -> bool,
) -> Result<(), String> {
    let mut state = elector.subscribe();
    match timeout(bound, state.wait_for(|s| wanted(s))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err(format!("{what}: the elector stopped")),
        Err(_) => Err(format!("{what}: not within {bound:?}")),
    }
}

/// A bound on the measured wait: long past what polling alone takes (two poll intervals and
/// an expiry), so that only a broken run hits it.
fn measured_bound(ttl: Duration) -> Duration {
    ttl * 2 + Duration::from_secs(10)
}

async fn graceful_trial(
    storage: Arc<dyn EventStorage>,
    lease: String,
    ttl: Duration,
    phase: Duration,
) -> Result<Duration, String> {
    let holder = start(&storage, &lease, "holder", 0, ttl)?;
    reach(
        &holder,
        SETUP_BOUND,
        "the holder",
        LeadershipState::is_leader,
    )
    .await?;
    let standby = start(&storage, &lease, "standby", 0, ttl)?;
    reach(
        &standby,
        SETUP_BOUND,
        "the standby",
        LeadershipState::is_standby,
    )
    .await?;
    sleep(phase).await;
    let mut state = standby.subscribe();
    let started = Instant::now();
    holder.shutdown().await.map_err(|e| e.to_string())?;
    let led = matches!(
        timeout(
            measured_bound(ttl),
            state.wait_for(LeadershipState::is_leader)
        )
        .await,
        Ok(Ok(_))
    );
    let took = started.elapsed();
    drop(state);
    standby.shutdown().await.map_err(|e| e.to_string())?;
    if led {
        Ok(took)
    } else {
        Err(format!("graceful {lease}: the standby never led"))
    }
}

async fn planned_trial(
    storage: Arc<dyn EventStorage>,
    lease: String,
    ttl: Duration,
    phase: Duration,
) -> Result<Duration, String> {
    let holder = start(&storage, &lease, "holder", 0, ttl)?;
    reach(
        &holder,
        SETUP_BOUND,
        "the holder",
        LeadershipState::is_leader,
    )
    .await?;
    // The holder's unit of work is instant: it ends as soon as a step-down is requested, and
    // `run_while_leader` then releases.
    let worker = {
        let holder = holder.clone();
        tokio::spawn(async move {
            holder
                .run_while_leader(|lease| async move { lease.step_down_requested().await })
                .await
        })
    };
    sleep(phase).await;
    let started = Instant::now();
    let contender = start(&storage, &lease, "contender", 10, ttl)?;
    let mut state = contender.subscribe();
    let led = matches!(
        timeout(
            measured_bound(ttl),
            state.wait_for(LeadershipState::is_leader)
        )
        .await,
        Ok(Ok(_))
    );
    let took = started.elapsed();
    drop(state);
    worker.abort();
    holder.shutdown().await.map_err(|e| e.to_string())?;
    contender.shutdown().await.map_err(|e| e.to_string())?;
    if led {
        Ok(took)
    } else {
        Err(format!("planned {lease}: the contender never led"))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Graceful,
    Planned,
}

/// `trials` trials of `kind` at `ttl` on `storage`, as the module's documentation says.
async fn measure(
    storage: &Arc<dyn EventStorage>,
    kind: Kind,
    ttl: Duration,
    trials: usize,
    rng: &mut Rng,
) -> Result<Vec<Duration>, String> {
    let woken = storage.capabilities().contains(Capability::LeaseChanges);
    let poll = ElectorConfig::new("bench", ttl)
        .validate()
        .map_err(|e| e.to_string())?
        .poll_interval();
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let tag = match kind {
        Kind::Graceful => "graceful",
        Kind::Planned => "planned",
    };
    let trial = |n: usize, phase: Duration| {
        let lease = format!("handover-{tag}-{}s-{run}-{n}", ttl.as_secs());
        let storage = Arc::clone(storage);
        async move {
            match kind {
                Kind::Graceful => graceful_trial(storage, lease, ttl, phase).await,
                Kind::Planned => planned_trial(storage, lease, ttl, phase).await,
            }
        }
    };
    let mut samples = Vec::with_capacity(trials);
    if woken {
        for n in 0..trials {
            samples.push(trial(n, Duration::ZERO).await?);
        }
    } else {
        let tasks: Vec<_> = (0..trials)
            .map(|n| tokio::spawn(trial(n, rng.below(poll))))
            .collect();
        for task in tasks {
            samples.push(task.await.map_err(|e| e.to_string())??);
        }
    }
    Ok(samples)
}

async fn bench_storage(
    name: &str,
    storage: Arc<dyn EventStorage>,
    trials: usize,
    anchor: Option<Duration>,
    rng: &mut Rng,
) {
    let woken = storage.capabilities().contains(Capability::LeaseChanges);
    let how = if woken {
        "wake-ups, sequential trials"
    } else {
        "polling only, concurrent trials at random poll phases"
    };
    println!("{name}: {how}");
    for ttl in TTLS {
        for (kind, label) in [(Kind::Graceful, "graceful"), (Kind::Planned, "planned")] {
            let what = format!("  {name} {label} handover, ttl {} s", ttl.as_secs());
            match measure(&storage, kind, ttl, trials, rng).await {
                Ok(samples) => report(&what, &samples, anchor),
                Err(err) => println!("{what}: failed: {err}"),
            }
        }
    }
}

// --- etcd ------------------------------------------------------------------------------------

fn on_path(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(binary))
            .find(|candidate| candidate.is_file())
    })
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// A throwaway etcd: stopped and its data directory removed when dropped.
struct Etcd {
    child: Child,
    dir: PathBuf,
    endpoint: String,
    etcdctl: PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Err(err) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("handover: could not remove {}: {err}", self.dir.display());
        }
    }
}

fn start_etcd(etcd: &Path, etcdctl: PathBuf) -> Result<Etcd, String> {
    let (client, peer) = (free_port()?, free_port()?);
    let dir = std::env::temp_dir().join(format!(
        "tenure-handover-etcd-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(etcd)
        .arg("--name=bench")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=bench={peer_url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start etcd: {e}"))?;
    let etcd = Etcd {
        child,
        dir,
        endpoint: client_url,
        etcdctl,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let healthy = etcd
            .ctl()
            .args(["endpoint", "health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if healthy {
            return Ok(etcd);
        }
        if std::time::Instant::now() > deadline {
            return Err("etcd did not become healthy within 30 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Etcd {
    fn ctl(&self) -> Command {
        let mut command = Command::new(&self.etcdctl);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint));
        command
    }

    /// `etcdctl elect name proposal`, and a channel of its output lines, each stamped with
    /// when it was read.
    fn elect(
        &self,
        name: &str,
        proposal: &str,
    ) -> Result<(Child, mpsc::Receiver<std::time::Instant>), String> {
        let mut child = self
            .ctl()
            .args(["elect", name, proposal])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start etcdctl: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout of etcdctl")?;
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if line.is_err() || lines.send(std::time::Instant::now()).is_err() {
                    return;
                }
            }
        });
        Ok((child, received))
    }

    /// How many candidates campaign in election `name` (its keys).
    fn candidates(&self, name: &str) -> Result<usize, String> {
        let out = self
            .ctl()
            .args(["get", "--prefix", "--keys-only", &format!("{name}/")])
            .output()
            .map_err(|e| format!("etcdctl get: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count())
    }

    /// One election handover: `a` leads, `b` waits, `a` resigns (SIGINT).
    fn trial(&self, n: usize) -> Result<Duration, String> {
        let name = format!("bench-{n}");
        let bound = Duration::from_secs(10);
        let (mut a, a_lines) = self.elect(&name, "a")?;
        a_lines
            .recv_timeout(bound)
            .map_err(|_| "etcdctl elect a never led".to_owned())?;
        let (mut b, b_lines) = self.elect(&name, "b")?;
        let deadline = std::time::Instant::now() + bound;
        while self.candidates(&name)? < 2 {
            if std::time::Instant::now() > deadline {
                return Err("etcdctl elect b never campaigned".to_owned());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = nix::unistd::Pid::from_raw(a.id() as i32);
        let started = std::time::Instant::now();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)
            .map_err(|e| format!("SIGINT to etcdctl: {e}"))?;
        let elected = b_lines.recv_timeout(bound);
        let _ = a.wait();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(b.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let _ = b.wait();
        elected
            .map(|at| at.duration_since(started))
            .map_err(|_| "the waiting candidate was never elected".to_owned())
    }
}

/// etcd's election handover figures, when etcd is installed.
fn etcd_anchor(trials: usize) -> Option<Vec<Duration>> {
    let (Some(etcd), Some(etcdctl)) = (on_path("etcd"), on_path("etcdctl")) else {
        println!("etcd: not on the PATH, no anchor (apt-get install etcd-server etcd-client)");
        return None;
    };
    let version = Command::new(&etcd)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let server = match start_etcd(&etcd, etcdctl) {
        Ok(server) => server,
        Err(err) => {
            println!("etcd: {err}; no anchor");
            return None;
        }
    };
    let mut samples = Vec::with_capacity(trials);
    for n in 0..trials {
        match server.trial(n) {
            Ok(took) => samples.push(took),
            Err(err) => {
                println!("etcd: trial {n} failed: {err}; no anchor");
                return None;
            }
        }
    }
    report(
        &format!("etcd election ({version}), resign -> waiting candidate elected"),
        &samples,
        None,
    );
    drop(server);
    Some(samples)
}

fn main() {
    let trials = trials();
    println!("handover benchmark: {trials} trials per figure, times in ms");
    let anchor = etcd_anchor(trials).map(|samples| Figures::of(&samples).median);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rng = Rng::new();
    runtime.block_on(async {
        let memory: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
        bench_storage("memory", memory, trials, anchor, &mut rng).await;

        let Some(url) = std::env::var("TENURE_DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            println!("postgres: TENURE_DATABASE_URL names no server, skipped");
            return;
        };
        let guard = PrefixGuard::new(url.clone(), tenure_pg_test::unique_prefix());
        match PostgresEventStorage::builder()
            .url(&url)
            .prefix(guard.prefix())
            .pool_size(8)
            .build()
            .await
        {
            Ok(storage) => {
                let storage = Arc::new(storage);
                let shared: Arc<dyn EventStorage> = storage.clone();
                bench_storage("postgres", shared, trials, anchor, &mut rng).await;
                let _ = storage.close().await;
            }
            Err(err) => println!("postgres: {err}; skipped"),
        }
        drop(guard);
    });
}
