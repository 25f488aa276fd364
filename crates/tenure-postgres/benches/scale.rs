//! How many leases one storage sustains: N leases × 3 contenders on one PostgreSQL.
//!
//! `cargo bench -p tenure-postgres --bench scale` (or `cargo xtask bench scale`) finds its
//! server as the tests do and, in one run:
//!
//! * **floor**: single-row `UPDATE`s (prepared, autocommit) by 8 callers in a closed loop
//!   through a deadpool pool of 8, for 5 s, at the start and again after each step and each
//!   overload: the server's capacity for the simplest write at that moment, the anchor of the
//!   ratio (see "Anchors" below);
//! * **ramp**: for N = 250, 500, 1,000, 2,000, … leases, one `PostgresEventStorage` (pool of 8,
//!   the default settings otherwise) and 3 contenders per lease (one leads, two stand by: the
//!   shape of a three-replica deployment), all starting at once (within one second, each at
//!   its own phase, as processes of one deploy do; on one tick, 3N calls would arrive in the
//!   same millisecond, which no deployment does and which measures only the queue); each
//!   contender calls
//!   `request_lease` once a second (ttl 3 s) inside `timeout(0.5 s)`, as `LeaderElector` does
//!   with its default poll of ttl/3 and its call bound of half a poll, and backs off after a
//!   failed call as it does (`tenure_election::Backoff`: a contender without a tenure waits a
//!   jittered delay that doubles per failure, up to a ttl; a leader keeps its cadence); the
//!   calls wanted are still one a second per contender. After 3 s (one ttl) of
//!   warm-up, 10 s are measured: N is **sustained** when at least 99 % of the calls wanted in
//!   that window answered in time and their p99 is at most 100 ms. N doubles until a step is
//!   not sustained, then up to three steps of bisection between the last sustained and the
//!   first not (to the nearest 250: 750 calls/s, about 5 % of the floor here; two steps left
//!   3,000 and 3,500 leases apart, 0.66x and 0.77x of the floor, with the 0.7x target between).
//!
//! * **overload**: with N the largest sustained, N leases × 3 contenders for a ttl, then
//!   (factor − 1) × N leases × 3 more (leases of their own, all starting within one second, as
//!   after a deploy) for 30 s, then the first N alone again for 10 s, on one storage, for
//!   factors 2 and 3. It prints the goodput (calls answered within the bound) of each second of
//!   the overload, its least against the rate sustained (target ≥ 0.9x), the renewals answered
//!   in time (a renewal: a call by a contender that led at its previous answer), what each
//!   second of the overload is made of (renewals in time and late, the other calls in time and
//!   late, leases acquired: created, or taken over from a leader whose renewals did not get
//!   through, by the second the calls were sent), the sessions
//!   opened (target ≤ the pool + 2), whether the first leases are served as in a sustained step
//!   (at least 99 % of the calls wanted answered in time) from 2 s after the load dropped
//!   (until 2026-12-06 the target was judged on the last single failure after it, which a step
//!   sustained with its own rare timeouts never meets), when the last call failed after it;
//!   and, for the first second of the surge, how many calls of the first
//!   leases and of the added ones were answered in time.
//!
//! It prints, per N: calls wanted and answered per second, p50/p99, timeouts and errors (and
//! each error's message with its count, for the step and for each overload), the server
//! sessions opened (`pg_stat_database.sessions`) and the floor measured just after the
//! step, with each second of the window (calls answered in time, p99, from the window's start
//! on the wall clock, to match with the server's and the system's logs) and the benchmark
//! process's CPU time per call; then the largest N sustained, its lease calls/s, and their
//! ratio to the floor's UPDATEs/s (target ≥ 0.7x). It creates its own prefix and drops it
//! afterwards. `TENURE_BENCH_MAX_LEASES` caps the ramp (default 16,000);
//! `TENURE_BENCH_LEASES=N` replaces the ramp with one step of N leases (and the overload from
//! there, if N is sustained), for a quicker run when N is known; `TENURE_BENCH_FACTORS=3`
//! (a comma-separated list, default `2,3`) runs only the overloads named, to look at one
//! without the aftermath of the other. `TENURE_BENCH_DRIVER=sqlx` puts the storage on the sqlx
//! driver (its own pool of 8) instead of deadpool.
//!
//! Each step's leases have names of their own, and the tables keep the rows of earlier steps:
//! a first version emptied them between steps and ran `VACUUM ANALYZE` on the empty tables,
//! and the next step's calls were then planned for empty tables (sequential scans of the
//! contenders, whose table grew to thousands of rows within the step), which halved the
//! capacity measured. `VACUUM ANALYZE` after each step keeps the statistics true.
//!
//! # Anchors
//!
//! The machines this runs on are shared, and their speed drifts within a run: on 2026-12-06
//! the floor was 13,177 UPDATEs/s at the start of one run and 9,141 at its end, six minutes
//! later, and a `pgbench` of the same `UPDATE` moved as much between runs. A ratio against
//! the mean of the run's first and last floors (what this benchmark did until then) then says
//! as much about the host's drift as about the storage. So the floor is measured again after
//! every step and every overload, and a step's ratio is taken against the mean of the floors
//! just before and just after it, minutes closer than the run's ends. For comparison the run
//! also prints the ratio against the mean of its first and last floors, and against its
//! highest floor (the strictest anchor); each overload prints the floors either side of it,
//! so that a drop of goodput can be told from a slower host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tenure_election::Backoff;
use tenure_ports::{EventStorage, LeaseRequest, Timestamp};
use tenure_postgres::{PostgresDriver, PostgresEventStorage, deadpool_postgres};

const CONTENDERS: usize = 3;
const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_secs(1);
const CALL_BOUND: Duration = Duration::from_millis(500);
const WARM_UP: Duration = Duration::from_secs(3);
const WINDOW: Duration = Duration::from_secs(10);
const FLOOR_ROWS: i32 = 1000;
const FLOOR_CALLERS: i32 = 8;

/// Overload: how long the offered load stays at 2x or 3x, and how long is watched after.
const OVERLOAD: Duration = Duration::from_secs(30);
const AFTER: Duration = Duration::from_secs(10);
/// How soon after an overload the first leases must be served as in a sustained step again.
const FULL_SERVICE: Duration = Duration::from_secs(2);
/// The pool of the storage under test.
const POOL: usize = 8;

/// One call of a contender: when it was sent, and how it ended.
#[derive(Clone, Copy)]
struct Call {
    sent: tokio::time::Instant,
    /// The latency, when it was answered within the call bound.
    answered: Option<Duration>,
    /// It failed with an error (neither answered nor timed out).
    error: bool,
    /// The contender held the lease at its previous answer: a renewal.
    renewal: bool,
    /// The contender holds the lease after this call (at its previous answer, if this one was
    /// not answered).
    leads: bool,
}

impl Call {
    fn failed(&self) -> bool {
        self.answered.is_none()
    }
}

/// The errors calls failed with since the last [`take_errors`], by message.
static ERRORS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// Counts a call's error by its message.
fn tally(error: &dyn std::error::Error) {
    let mut errors = ERRORS.lock().unwrap_or_else(PoisonError::into_inner);
    *errors.entry(error.to_string()).or_default() += 1;
}

/// The errors counted since the last call, as "count × message" lines (none when there were
/// none), and starts counting afresh.
fn take_errors() -> Vec<String> {
    let errors = std::mem::take(&mut *ERRORS.lock().unwrap_or_else(PoisonError::into_inner));
    errors
        .into_iter()
        .map(|(m, n)| format!("{n} × {m}"))
        .collect()
}

/// Prints what [`take_errors`] gave, if anything.
fn print_errors(errors: &[String]) {
    for e in errors {
        println!("    error: {e}");
    }
}

struct Step {
    leases: usize,
    wanted_per_s: f64,
    answered_per_s: f64,
    p50: Duration,
    p99: Duration,
    timeouts: u64,
    errors: u64,
    sessions: i64,
    /// Each second of the window: the calls sent in it and answered in time, and their p99.
    per_second: Vec<(usize, Duration)>,
    /// When the window began, on the wall clock (to match the seconds with system logs).
    window_from: SystemTime,
    /// The benchmark process's CPU time per call over the whole step (its contenders and the
    /// storage: the client's share of the cores the server also runs on), if `/proc` says.
    client_cpu_per_call: Option<Duration>,
    /// The errors calls failed with, by message ([`take_errors`]).
    errors_by_message: Vec<String>,
}

impl Step {
    fn sustained(&self) -> bool {
        self.answered_per_s >= 0.99 * self.wanted_per_s && self.p99 <= Duration::from_millis(100)
    }
}

/// `t` on the wall clock, as the storage prints instants (RFC 3339, UTC).
fn wall(t: SystemTime) -> String {
    Timestamp::from_system_time(t).map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn ms(d: Duration) -> String {
    if d == Duration::MAX {
        "-".to_owned()
    } else {
        format!("{:.1}", d.as_secs_f64() * 1000.0)
    }
}

async fn sessions(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// `VACUUM ANALYZE` of each table, one statement each (VACUUM runs outside transactions).
async fn vacuum(admin: &tokio_postgres::Client, tables: &[&str]) {
    for table in tables {
        admin
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .await
            .unwrap();
    }
}

/// UPDATEs/s of `FLOOR_CALLERS` closed-loop callers for 5 s.
async fn floor(pool: &deadpool_postgres::Pool, update: &str) -> f64 {
    let stop = Instant::now() + Duration::from_secs(5);
    let started = Instant::now();
    let tasks: Vec<_> = (0..FLOOR_CALLERS)
        .map(|c| {
            let (pool, update) = (pool.clone(), update.to_owned());
            tokio::spawn(async move {
                let mut done = 0u64;
                let mut id = c;
                while Instant::now() < stop {
                    let client = pool.get().await.unwrap();
                    let statement = client.prepare_cached(&update).await.unwrap();
                    client.execute(&statement, &[&id]).await.unwrap();
                    done += 1;
                    id = (id + FLOOR_CALLERS) % FLOOR_ROWS;
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task.await.unwrap();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// The floors of one run (see the module docs, "Anchors"): the first, the last, the highest.
struct Floors {
    first: f64,
    last: f64,
    highest: f64,
}

impl Floors {
    /// The run's first floor.
    async fn first(pool: &deadpool_postgres::Pool, update: &str) -> Floors {
        let first = floor(pool, update).await;
        Floors {
            first,
            last: first,
            highest: first,
        }
    }

    /// After a step or an overload: the lease tables vacuumed (the next run's leases have
    /// names of their own; the tables keep this run's rows, and their statistics are brought
    /// up to date, see the module docs), then the floor measured again. Returns the floors
    /// either side of the run that just ended.
    async fn after_run(
        &mut self,
        admin: &tokio_postgres::Client,
        prefix: &str,
        pool: &deadpool_postgres::Pool,
        update: &str,
    ) -> (f64, f64) {
        vacuum(
            admin,
            &[
                &format!("{prefix}leases"),
                &format!("{prefix}lease_contenders"),
            ],
        )
        .await;
        let before = self.last;
        self.last = floor(pool, update).await;
        self.highest = self.highest.max(self.last);
        (before, self.last)
    }
}

/// The mean of the floors either side of a run: the anchor of its ratio.
fn anchor((before, after): (f64, f64)) -> f64 {
    (before + after) / 2.0
}

/// One contender: a request a second, from `start` until `end`, each inside the call bound, as
/// `LeaderElector` calls, backing off after a failure as it does (`tenure_election::Backoff`:
/// a contender without a tenure waits a jittered, doubling delay, a leader keeps its cadence);
/// every call, logged.
async fn contend(
    storage: Arc<PostgresEventStorage>,
    request: LeaseRequest,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
) -> Vec<Call> {
    let mut next = start;
    let mut calls = Vec::new();
    let mut leads = false;
    let mut backoff = Backoff::new();
    while next < end {
        tokio::time::sleep_until(next).await;
        let sent = tokio::time::Instant::now();
        let outcome = tokio::time::timeout(CALL_BOUND, storage.request_lease(&request)).await;
        let renewal = leads;
        let (answered, error) = match outcome {
            Ok(Ok(response)) => {
                leads = response.status.holds_lease();
                (Some(sent.elapsed()), false)
            }
            Ok(Err(e)) => {
                tally(&e);
                (None, true)
            }
            Err(_) => (None, false),
        };
        calls.push(Call {
            sent,
            answered,
            error,
            renewal,
            leads,
        });
        next += POLL;
        if answered.is_some() {
            backoff.succeeded();
        } else if !leads {
            next = next.max(tokio::time::Instant::now() + backoff.failed(POLL, TTL));
        }
    }
    calls
}

/// The driver the storage under test uses: `TENURE_BENCH_DRIVER=sqlx` for sqlx 0.9, else
/// deadpool (the default driver).
fn driver() -> PostgresDriver {
    match std::env::var("TENURE_BENCH_DRIVER").as_deref() {
        Ok("sqlx") => PostgresDriver::Sqlx09,
        _ => PostgresDriver::Deadpool,
    }
}

/// The storage under test: the default settings, a pool of [`POOL`], the driver [`driver`]
/// says.
async fn storage(url: &str, prefix: &str) -> Arc<PostgresEventStorage> {
    Arc::new(
        PostgresEventStorage::builder()
            .url(url)
            .driver(driver())
            .prefix(prefix)
            .pool_size(POOL)
            .build()
            .await
            .unwrap(),
    )
}

/// Spawns `CONTENDERS` contenders on each of `leases` leases named `{name}-{n}`, all between
/// `at` and `end`, each starting at its own phase within the first poll interval.
fn spawn_contenders(
    storage: &Arc<PostgresEventStorage>,
    name: &str,
    leases: usize,
    at: tokio::time::Instant,
    end: tokio::time::Instant,
) -> Vec<tokio::task::JoinHandle<Vec<Call>>> {
    // A fixed sequence of phases (a Weyl sequence over the poll interval): reproducible.
    let phase = |n: usize| POLL.mul_f64((n as f64 * 0.618_033_988_75).fract());
    (0..leases)
        .flat_map(|lease| (0..CONTENDERS).map(move |c| (lease, c)))
        .map(|(lease, c)| {
            let request = LeaseRequest::new(format!("{name}-{lease}"), format!("c{c}"), 0, TTL);
            let start = at + phase(lease * CONTENDERS + c);
            tokio::spawn(contend(Arc::clone(storage), request, start, end))
        })
        .collect()
}

async fn joined(tasks: Vec<tokio::task::JoinHandle<Vec<Call>>>) -> Vec<Call> {
    let mut calls = Vec::new();
    for task in tasks {
        calls.extend(task.await.unwrap());
    }
    calls
}

async fn step(url: &str, prefix: &str, leases: usize, admin: &tokio_postgres::Client) -> Step {
    let storage = storage(url, prefix).await;
    let before = sessions(admin).await;
    let cpu_before = support::process_cpu();
    let at = tokio::time::Instant::now() + Duration::from_millis(100);
    let window_from = SystemTime::now() + Duration::from_millis(100) + WARM_UP;
    let end = at + WARM_UP + WINDOW;
    let calls = joined(spawn_contenders(
        &storage,
        &format!("scale-{leases}"),
        leases,
        at,
        end,
    ))
    .await;
    let cpu = support::process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let opened = sessions(admin).await - before;
    storage.close().await.unwrap();
    // The window is the same for every contender: from one ttl after the first start.
    let window: Vec<&Call> = calls.iter().filter(|c| c.sent >= end - WINDOW).collect();
    let mut answered: Vec<Duration> = window.iter().filter_map(|c| c.answered).collect();
    answered.sort_unstable();
    let errors = window.iter().filter(|c| c.error).count() as u64;
    let wanted = (leases * CONTENDERS) as f64 * (WINDOW.as_secs_f64() / POLL.as_secs_f64());
    let window_start = end - WINDOW;
    let per_second = (0..WINDOW.as_secs())
        .map(|second| {
            let from = window_start + Duration::from_secs(second);
            let mut in_second: Vec<Duration> = window
                .iter()
                .filter(|c| c.sent >= from && c.sent < from + Duration::from_secs(1))
                .filter_map(|c| c.answered)
                .collect();
            in_second.sort_unstable();
            (in_second.len(), support::percentile(&in_second, 0.99))
        })
        .collect();
    Step {
        leases,
        wanted_per_s: wanted / WINDOW.as_secs_f64(),
        answered_per_s: answered.len() as f64 / WINDOW.as_secs_f64(),
        p50: support::percentile(&answered, 0.5),
        p99: support::percentile(&answered, 0.99),
        timeouts: window.len() as u64 - answered.len() as u64 - errors,
        errors,
        sessions: opened,
        per_second,
        client_cpu_per_call: cpu.map(|cpu| cpu / calls.len().max(1) as u32),
        window_from,
        errors_by_message: take_errors(),
    }
}

/// What one overload run showed.
struct Overload {
    factor: usize,
    offered_per_s: f64,
    /// Calls answered in time, per second of the overload (by the second they were sent).
    goodput: Vec<f64>,
    /// What each second of the overload is made of: [`Composition`].
    composition: Vec<Composition>,
    /// Renewals (a call by an owner that led at its previous answer) during the overload:
    /// answered in time, of all.
    renewals: (usize, usize),
    /// From the end of the overload to the sending of the last call that failed after it (zero
    /// when none did).
    last_failure: Duration,
    /// The first leases' calls from [`FULL_SERVICE`] after the load dropped to the end:
    /// answered in time, and wanted (one a second per contender).
    after: (usize, usize),
    /// The first leases' calls answered in time, per second after the load dropped.
    after_per_second: Vec<usize>,
    sessions: i64,
    /// The first second of the overload: calls of the first leases (sent, answered in time),
    /// and of the leases added (sent, answered in time, errors).
    first_second: ((usize, usize), (usize, usize, usize)),
    /// When the overload began, on the wall clock.
    surge_from: SystemTime,
    /// The errors calls failed with, by message ([`take_errors`]).
    errors_by_message: Vec<String>,
}

/// The calls sent in one second of an overload, by kind: renewals (by a contender that led at
/// its previous answer) and the others (standbys' calls, creations, takeovers), each answered in
/// time or not; and how many of the others made their caller the leader (an acquisition: a
/// lease created, or taken over from a leader whose renewals did not get through).
#[derive(Clone, Copy, Default)]
struct Composition {
    renewals_in_time: usize,
    renewals_late: usize,
    others_in_time: usize,
    others_late: usize,
    acquisitions: usize,
}

impl Composition {
    fn add(&mut self, call: &Call) {
        match (call.renewal, call.answered.is_some()) {
            (true, true) => self.renewals_in_time += 1,
            (true, false) => self.renewals_late += 1,
            (false, true) => self.others_in_time += 1,
            (false, false) => self.others_late += 1,
        }
        if !call.renewal && call.leads && call.answered.is_some() {
            self.acquisitions += 1;
        }
    }
}

/// `leases` leases × 3 contenders for a ttl, then `factor - 1` times as many more (leases of
/// their own, starting within one second: a deploy, a restart) for [`OVERLOAD`], then the
/// first ones alone again for [`AFTER`]; on one storage.
async fn overload(
    url: &str,
    prefix: &str,
    leases: usize,
    factor: usize,
    admin: &tokio_postgres::Client,
) -> Overload {
    let storage = storage(url, prefix).await;
    let before = sessions(admin).await;
    let at = tokio::time::Instant::now() + Duration::from_millis(100);
    let surge_from = SystemTime::now() + Duration::from_millis(100) + WARM_UP;
    let (from, to) = (at + WARM_UP, at + WARM_UP + OVERLOAD);
    let name = format!("overload-{factor}x");
    let base = spawn_contenders(&storage, &format!("{name}-base"), leases, at, to + AFTER);
    let extra = spawn_contenders(
        &storage,
        &format!("{name}-extra"),
        leases * (factor - 1),
        from,
        to,
    );
    let (base, extra) = (joined(base).await, joined(extra).await);
    let opened = sessions(admin).await - before;
    storage.close().await.unwrap();
    let during = |c: &&Call| c.sent >= from && c.sent < to;
    let mut goodput = vec![0.0; OVERLOAD.as_secs() as usize];
    let mut composition = vec![Composition::default(); goodput.len()];
    for c in base.iter().chain(&extra).filter(during) {
        let second = (c.sent - from).as_secs() as usize;
        if c.answered.is_some() {
            goodput[second] += 1.0;
        }
        composition[second].add(c);
    }
    let renewals: Vec<&Call> = base
        .iter()
        .chain(&extra)
        .filter(during)
        .filter(|c| c.renewal)
        .collect();
    let renewed = renewals.iter().filter(|c| c.answered.is_some()).count();
    let last_failure = base
        .iter()
        .filter(|c| c.sent >= to && c.failed())
        .map(|c| c.sent - to)
        .max()
        .unwrap_or_default();
    let answered_between = |a: Duration, b: Duration| {
        base.iter()
            .filter(|c| c.sent >= to + a && c.sent < to + b && c.answered.is_some())
            .count()
    };
    let after = (
        answered_between(FULL_SERVICE, AFTER),
        leases * CONTENDERS * (AFTER - FULL_SERVICE).as_secs() as usize,
    );
    let after_per_second = (0..AFTER.as_secs())
        .map(|s| answered_between(Duration::from_secs(s), Duration::from_secs(s + 1)))
        .collect();
    let first = |c: &&Call| c.sent >= from && c.sent < from + Duration::from_secs(1);
    let count = |calls: &[Call]| {
        let sent: Vec<&Call> = calls.iter().filter(first).collect();
        let answered = sent.iter().filter(|c| c.answered.is_some()).count();
        let errors = sent.iter().filter(|c| c.error).count();
        (sent.len(), answered, errors)
    };
    let ((base_sent, base_answered, _), extra_first) = (count(&base), count(&extra));
    Overload {
        first_second: ((base_sent, base_answered), extra_first),
        factor,
        offered_per_s: (leases * factor * CONTENDERS) as f64 / POLL.as_secs_f64(),
        goodput,
        composition,
        renewals: (renewed, renewals.len()),
        last_failure,
        after,
        after_per_second,
        sessions: opened,
        surge_from,
        errors_by_message: take_errors(),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, guard) = support::server_and_prefix();
    let prefix = guard.prefix().to_owned();
    let max_leases: usize = std::env::var("TENURE_BENCH_MAX_LEASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16_000);
    let factors: Vec<usize> = std::env::var("TENURE_BENCH_FACTORS")
        .ok()
        .map(|v| v.split(',').filter_map(|f| f.trim().parse().ok()).collect())
        .filter(|factors: &Vec<usize>| !factors.is_empty() && factors.iter().all(|f| *f >= 2))
        .unwrap_or_else(|| vec![2, 3]);
    let only: Option<usize> = std::env::var("TENURE_BENCH_LEASES")
        .ok()
        .and_then(|v| v.parse().ok());
    runtime.block_on(async {
        let admin = server.connect().await.unwrap();
        let pool = support::application_pool(&server.url, FLOOR_CALLERS as usize);
        admin
            .batch_execute(&format!(
                "CREATE TABLE {prefix}scale_rows (id integer PRIMARY KEY, v bigint NOT NULL) \
                   WITH (fillfactor = 50); \
                 INSERT INTO {prefix}scale_rows SELECT g, 0 FROM generate_series(0, {}) g",
                FLOOR_ROWS - 1
            ))
            .await
            .unwrap();
        vacuum(&admin, &[&format!("{prefix}scale_rows")]).await;
        let update = format!("UPDATE {prefix}scale_rows SET v = v + 1 WHERE id = $1");
        println!(
            "scale: PostgreSQL at {}, the {:?} driver",
            server.redacted_url(),
            driver()
        );
        let mut floors = Floors::first(&pool, &update).await;
        println!(
            "floor: {:.0} single-row UPDATEs/s ({FLOOR_CALLERS} callers, closed loop), \
             then again after each step and each overload",
            floors.first
        );
        println!();
        println!(
            "{:>7} {:>12} {:>12} {:>8} {:>8} {:>9} {:>7} {:>9} {:>9}  verdict",
            "leases",
            "wanted/s",
            "answered/s",
            "p50 ms",
            "p99 ms",
            "timeouts",
            "errors",
            "sessions",
            "floor/s"
        );
        // The largest step sustained, with the floors either side of it.
        let mut best: Option<(Step, (f64, f64))> = None;
        let (mut leases, mut failed_at, mut refinements) = (only.unwrap_or(250), None::<usize>, 0);
        while leases <= max_leases || only.is_some() {
            let s = step(&server.url, &prefix, leases, &admin).await;
            let around = floors.after_run(&admin, &prefix, &pool, &update).await;
            let verdict = if s.sustained() { "sustained" } else { "NOT sustained" };
            println!(
                "{:>7} {:>12.0} {:>12.0} {:>8} {:>8} {:>9} {:>7} {:>9} {:>9.0}  {verdict}",
                s.leases,
                s.wanted_per_s,
                s.answered_per_s,
                ms(s.p50),
                ms(s.p99),
                s.timeouts,
                s.errors,
                s.sessions,
                around.1
            );
            let per_second: Vec<String> = s
                .per_second
                .iter()
                .map(|(answered, p99)| format!("{answered}/{}", ms(*p99)))
                .collect();
            println!(
                "    per second from {} (answered in time/p99 ms): {}",
                wall(s.window_from),
                per_second.join(" ")
            );
            print_errors(&s.errors_by_message);
            if let Some(cpu) = s.client_cpu_per_call {
                println!(
                    "    the benchmark process: {:.1} µs of CPU per call",
                    cpu.as_secs_f64() * 1e6
                );
            }
            if s.sustained() {
                best = Some((s, around));
            } else {
                failed_at = Some(s.leases);
            }
            if only.is_some() {
                break;
            }
            let sustained_at = best.as_ref().map_or(0, |(b, _)| b.leases);
            leases = match failed_at {
                None => leases * 2,
                Some(failed) => {
                    refinements += 1;
                    let mid = (sustained_at + failed) / 2 / 250 * 250;
                    if refinements > 3 || mid <= sustained_at {
                        break;
                    }
                    mid
                }
            };
        }
        // Overload at 2x and 3x the rate sustained, and back (issue 13's last targets).
        if let Some((b, b_around)) = &best {
            println!();
            let named: Vec<String> = factors.iter().map(|f| format!("{f}x")).collect();
            println!(
                "overload: {} leases x {CONTENDERS} sustained ({:.0} calls/s); {} that offered \
                 for {} s, then back",
                b.leases,
                b.answered_per_s,
                named.join(" and "),
                OVERLOAD.as_secs()
            );
            for &factor in &factors {
                let o = overload(&server.url, &prefix, b.leases, factor, &admin).await;
                let (floor_before, floor_after) =
                    floors.after_run(&admin, &prefix, &pool, &update).await;
                let least = o.goodput.iter().copied().fold(f64::INFINITY, f64::min);
                let mean = o.goodput.iter().sum::<f64>() / o.goodput.len() as f64;
                let goodput_ok = least >= 0.9 * b.answered_per_s;
                let sessions_ok = o.sessions <= POOL as i64 + 2;
                let (after_answered, after_wanted) = o.after;
                let recovery_ok = after_answered as f64 >= 0.99 * after_wanted as f64;
                println!(
                    "{}x: offered {:.0}/s; goodput per second least {least:.0}, mean {mean:.0} \
                     (least / sustained = {:.2}x, target >= 0.90x: {}); renewals in time {} of {}; \
                     sessions opened {} (target <= pool {POOL} + 2: {}); from {} s after the load \
                     dropped, {after_answered} of {after_wanted} calls answered in time (target \
                     >= 99%, as in a sustained step: {}); the last failure {} ms after it",
                    o.factor,
                    o.offered_per_s,
                    least / b.answered_per_s,
                    if goodput_ok { "met" } else { "MISSED" },
                    o.renewals.0,
                    o.renewals.1,
                    o.sessions,
                    if sessions_ok { "met" } else { "MISSED" },
                    FULL_SERVICE.as_secs(),
                    if recovery_ok { "met" } else { "MISSED" },
                    o.last_failure.as_millis(),
                );
                let per_second: Vec<String> = o.goodput.iter().map(|g| format!("{g:.0}")).collect();
                println!(
                    "    goodput per second from {}: {}",
                    wall(o.surge_from),
                    per_second.join(" ")
                );
                let column = |f: fn(&Composition) -> usize| {
                    o.composition.iter().map(|c| f(c).to_string()).collect::<Vec<_>>().join(" ")
                };
                println!(
                    "    per second, renewals in time: {}",
                    column(|c| c.renewals_in_time)
                );
                println!("    per second, renewals late: {}", column(|c| c.renewals_late));
                println!(
                    "    per second, other calls in time: {}",
                    column(|c| c.others_in_time)
                );
                println!("    per second, other calls late: {}", column(|c| c.others_late));
                println!(
                    "    per second, leases acquired (created or taken over): {}",
                    column(|c| c.acquisitions)
                );
                let after: Vec<String> = o.after_per_second.iter().map(|a| a.to_string()).collect();
                println!(
                    "    after the load dropped, the first leases' calls answered in time per \
                     second: {}",
                    after.join(" ")
                );
                let ((base_sent, base_answered), (sent, answered, errors)) = o.first_second;
                println!(
                    "    first second: the first leases' calls {base_answered} answered in time of \
                     {base_sent}; the added leases' {answered} of {sent} ({errors} errors)"
                );
                print_errors(&o.errors_by_message);
                println!(
                    "    the floor before and after this overload: {floor_before:.0} and \
                     {floor_after:.0} UPDATEs/s ({:.0} either side of the sustained step)",
                    anchor(*b_around)
                );
            }
        }
        println!();
        match best {
            Some((s, around)) => {
                let ratio = s.answered_per_s / anchor(around);
                let first_last = anchor((floors.first, floors.last));
                println!(
                    "largest N sustained: {} leases x {CONTENDERS} contenders, {:.0} lease calls/s, \
                     p99 {} ms; / the floors either side of it ({:.0} and {:.0}) = {ratio:.2}x \
                     (target >= 0.70x: {})",
                    s.leases,
                    s.answered_per_s,
                    ms(s.p99),
                    around.0,
                    around.1,
                    if ratio >= 0.7 { "met" } else { "MISSED" }
                );
                println!(
                    "    for comparison: / the mean of the run's first and last floors \
                     ({:.0} and {:.0}) = {:.2}x; / the run's highest floor ({:.0}) = {:.2}x",
                    floors.first,
                    floors.last,
                    s.answered_per_s / first_last,
                    floors.highest,
                    s.answered_per_s / floors.highest
                );
            }
            None => println!("no N sustained (the first, 250 leases, was not)"),
        }
    });
    drop(guard);
}
