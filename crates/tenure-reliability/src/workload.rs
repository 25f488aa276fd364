//! The election workload: many electors on one lease, with releases, step-downs and paused
//! leaders, checked by the history checker.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenure_election::{ElectorConfig, FencingGuard, LeaderElector, LeadershipState, safety_margin};
use tenure_ports::domain::LeaseName;
use tenure_ports::{
    AppendRequest, Capability, EventPosition, EventStorage, EventStorageError, Fence, FencingToken,
    NewEvent,
};
use tenure_tck::history::{BookmarkWrite, Call, FencedWrite, History, Report, Tenure};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::recorder::RecordingStorage;

/// How to run a workload.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// The lease the electors contend for (with `-1`, `-2`, … appended when `leases` > 1).
    pub lease_name: String,
    /// How many independent leases, each with its own electors (more calls per second
    /// without making any one election unrealistic).
    pub leases: usize,
    /// How many electors contend for each lease.
    pub electors: usize,
    /// The shortest and longest ttl an elector is given.
    pub ttl: (Duration, Duration),
    /// Poll interval = ttl / this.
    pub poll_divisor: u32,
    /// Stop once this many lease calls were made…
    pub min_calls: usize,
    /// …or once this much time (tokio's clock) has passed.
    pub max_duration: Duration,
    /// The chance, per unit of work, that a leader pauses for longer than its ttl.
    pub pause_chance: f64,
    /// The chance, per unit of work, that a leader releases.
    pub release_chance: f64,
    /// Seed of the random choices.
    pub seed: u64,
}

impl WorkloadConfig {
    /// The workload: 16 electors, ttls from 300 ms to 2 s, polling at ttl/3.
    pub fn standard(lease_name: impl Into<String>, min_calls: usize) -> Self {
        WorkloadConfig {
            lease_name: lease_name.into(),
            leases: 1,
            electors: 16,
            ttl: (Duration::from_millis(300), Duration::from_secs(2)),
            poll_divisor: 3,
            min_calls,
            max_duration: Duration::from_secs(24 * 3600),
            pause_chance: 0.01,
            release_chance: 0.02,
            seed: 0x5eed_7e4e,
        }
    }
}

/// What a workload did and what the checker found.
#[derive(Debug)]
pub struct WorkloadReport {
    /// The checker's report (calls, elections, violations…).
    pub history: Report,
    /// Leader pauses injected (each longer than the paused elector's ttl).
    pub pauses: u64,
    /// Calls that hung because of a pause.
    pub hung_calls: u64,
    /// Releases and step-downs performed.
    pub releases: u64,
    /// How long it ran, on tokio's clock.
    pub elapsed: Duration,
}

impl WorkloadReport {
    /// Whether the run was clean.
    pub fn passed(&self) -> bool {
        self.history.violations.is_empty()
    }
}

impl fmt::Display for WorkloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, pauses injected: {}, hung calls: {}, releases: {}, elapsed: {:.1?}",
            self.history, self.pauses, self.hung_calls, self.releases, self.elapsed
        )?;
        for violation in &self.history.violations {
            write!(f, "\n  violation: {violation}")?;
        }
        Ok(())
    }
}

/// A small deterministic generator (xorshift64*), enough for choosing delays and dice.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A duration in `[low, high]`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + (high.saturating_sub(low)).mul_f64(self.unit())
    }
}

/// Runs the workload against `storage` and checks the history.
///
/// Each elector has a worker that, while it leads, writes through a shared [`FencingGuard`]
/// (stamped with its token, after checking that its tenure is still valid), releases now and
/// then, hands over when asked to step down, and now and then **pauses** for longer than its
/// ttl, as a GC pause or a suspended VM would: its elector's calls hang meanwhile, and when it
/// wakes up it writes once more with its old token *without checking*, as a zombie would. The
/// guard must refuse that write if a newer tenure has written since.
///
/// On a storage with events and fenced bookmarks, each unit of work also appends an event and
/// moves the lease's bookmark to it under the tenure's fence, and the zombie writes its last
/// bookmark again with its old token: the checker adds that no bookmark ever moved backwards.
pub async fn run(config: &WorkloadConfig, storage: Arc<dyn EventStorage>) -> WorkloadReport {
    let history = Arc::new(History::new());
    let capabilities = storage.capabilities();
    let bookmarks = (capabilities.contains(Capability::Events)
        && capabilities.contains(Capability::FencedBookmarks))
    .then(|| Arc::clone(&storage));
    let recorder = Arc::new(RecordingStorage::new(storage, Arc::clone(&history)));
    let guard = Arc::new(FencingGuard::new());
    let stop = Arc::new(AtomicBool::new(false));
    let pauses = Arc::new(AtomicU64::new(0));
    let releases = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut rng = Rng::new(config.seed);

    let mut electors = Vec::new();
    let mut tasks = JoinSet::new();
    for lease in 0..config.leases.max(1) {
        let lease_name = if config.leases > 1 {
            format!("{}-{lease}", config.lease_name)
        } else {
            config.lease_name.clone()
        };
        for n in 0..config.electors {
            let ttl = rng.between(config.ttl.0, config.ttl.1);
            let ttl = Duration::from_millis(ttl.as_millis().try_into().unwrap_or(u64::MAX));
            let owner = format!("elector-{lease}-{n:02}");
            let elector_config = ElectorConfig::new(lease_name.clone(), ttl)
                .with_owner(owner)
                .with_priority(i64::try_from(rng.next_u64() % 4).unwrap_or(0))
                .with_poll_interval(ttl / config.poll_divisor);
            let storage: Arc<dyn EventStorage> = recorder.clone();
            let elector = match LeaderElector::start(storage, elector_config) {
                Ok(elector) => elector,
                Err(err) => panic!("the workload's elector configuration is invalid: {err}"),
            };
            tasks.spawn(observe(
                elector.clone(),
                Arc::clone(&history),
                Arc::clone(&recorder),
                Arc::clone(&stop),
            ));
            tasks.spawn(work(Worker {
                elector: elector.clone(),
                lease_name: lease_name.clone(),
                ttl,
                rng: Rng::new(config.seed ^ ((lease * config.electors + n) as u64 + 1)),
                config: config.clone(),
                history: Arc::clone(&history),
                recorder: Arc::clone(&recorder),
                guard: Arc::clone(&guard),
                bookmarks: bookmarks.clone(),
                last_position: None,
                stop: Arc::clone(&stop),
                pauses: Arc::clone(&pauses),
                releases: Arc::clone(&releases),
            }));
            electors.push(elector);
        }
    }

    while history.calls() < config.min_calls && started.elapsed() < config.max_duration {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Release);
    for elector in &electors {
        // A release the storage did not confirm just lets the lease expire.
        let _ = elector.shutdown().await;
    }
    while tasks.join_next().await.is_some() {}
    for tenure in tenures_by_the_rule(&history.recorded_calls(), &recorder) {
        history.record_tenure(tenure);
    }

    WorkloadReport {
        history: history.check(),
        pauses: pauses.load(Ordering::Relaxed),
        hung_calls: recorder.hung_calls(),
        releases: releases.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    }
}

struct Worker {
    elector: LeaderElector,
    lease_name: String,
    ttl: Duration,
    rng: Rng,
    config: WorkloadConfig,
    history: Arc<History>,
    recorder: Arc<RecordingStorage>,
    guard: Arc<FencingGuard>,
    /// The storage itself, for the fenced bookmarks; `None` when it lacks events or fenced
    /// bookmarks.
    bookmarks: Option<Arc<dyn EventStorage>>,
    /// The position this worker's last bookmark pointed at, and the tenure that wrote it:
    /// what a zombie of that tenure writes again.
    last_position: Option<(FencingToken, EventPosition)>,
    stop: Arc<AtomicBool>,
    pauses: Arc<AtomicU64>,
    releases: Arc<AtomicU64>,
}

impl Worker {
    fn write(&self, token: FencingToken) {
        let lease_name = self.lease_name.as_str();
        let owner = self.elector.owner().to_string();
        let record = |accepted| FencedWrite {
            lease_name: lease_name.to_owned(),
            owner: owner.clone(),
            token,
            accepted,
        };
        // The guard orders the write: it is recorded while the guard holds its decision.
        if self
            .guard
            .admit_with(lease_name, token, || {
                self.history.record_write(record(true))
            })
            .is_err()
        {
            self.history.record_write(record(false));
        }
    }
}

impl Worker {
    /// As a leader's unit of work: a new event appended, then the reader's bookmark moved to
    /// it under the tenure's fence. Failed calls (a killed connection) are left out of the
    /// history: their outcome is unknown, and a missing record can only hide a violation.
    async fn bookmark_new_work(&mut self, token: FencingToken) {
        let Some(storage) = self.bookmarks.clone() else {
            return;
        };
        let event = NewEvent::new(
            format!("{}-work", self.lease_name),
            "Work",
            serde_json::json!({ "token": token.get() }),
        );
        let Ok(stored) = storage.append(&AppendRequest::new(vec![event])).await else {
            return;
        };
        let Some(position) = stored.first().map(|e| e.position) else {
            return;
        };
        self.last_position = Some((token, position));
        self.bookmark(&*storage, token, position).await;
    }

    /// As a zombie: the bookmark it last wrote in this tenure, written again with its old
    /// token. A position written in an earlier tenure of this worker is not written again:
    /// under the newer token it would be a leader moving its bookmark back on purpose (what
    /// no processor does: it resumes from the bookmark), not a zombie's late write.
    async fn bookmark_again(&self, token: FencingToken) {
        if let (Some(storage), Some((written_by, position))) = (&self.bookmarks, self.last_position)
            && written_by == token
        {
            self.bookmark(&**storage, token, position).await;
        }
    }

    async fn bookmark(
        &self,
        storage: &dyn EventStorage,
        token: FencingToken,
        position: EventPosition,
    ) {
        let Ok(lease_name) = LeaseName::new(self.lease_name.as_str()) else {
            return;
        };
        let fence = Fence::new(lease_name, token);
        let invoked = Instant::now();
        let answer = storage
            .bookmark_fenced(&self.lease_name, position, &[], &fence)
            .await;
        let completed = Instant::now();
        let placed_at = match answer {
            Ok(bookmark) => Some(bookmark.placed_at),
            Err(EventStorageError::Fenced { .. }) => None,
            Err(_) => return,
        };
        self.history.record_bookmark(BookmarkWrite {
            reader: self.lease_name.clone(),
            token,
            position,
            placed_at,
            invoked,
            completed,
        });
    }
}

async fn work(mut w: Worker) {
    while !w.stop.load(Ordering::Acquire) {
        let lease = tokio::select! {
            lease = w.elector.wait_for_leadership() => match lease {
                Ok(lease) => lease,
                Err(_) => return,
            },
            () = tokio::time::sleep(Duration::from_millis(200)) => continue,
        };
        while lease.is_valid() && !w.stop.load(Ordering::Acquire) {
            let dice = w.rng.unit();
            if dice < w.config.pause_chance {
                // A pause longer than the ttl: the whole "process" stalls, its elector's calls
                // included; then the work goes on with the token it had, unchecked.
                w.pauses.fetch_add(1, Ordering::Relaxed);
                let pause = w.ttl.mul_f64(1.2 + w.rng.unit());
                w.recorder
                    .hang(w.elector.owner().as_str(), Instant::now() + pause);
                tokio::time::sleep(pause).await;
                w.write(lease.token());
                w.bookmark_again(lease.token()).await;
                break;
            } else if dice < w.config.pause_chance + w.config.release_chance
                || lease.is_step_down_requested()
            {
                w.releases.fetch_add(1, Ordering::Relaxed);
                let _ = w.elector.release().await;
                break;
            }
            w.write(lease.token());
            w.bookmark_new_work(lease.token()).await;
            let pace = w.rng.between(Duration::from_millis(5), w.ttl / 5);
            tokio::time::sleep(pace).await;
        }
    }
}

/// The spans during which each caller may act as leader **by the self-demotion rule**, derived
/// from the calls alone: from the completion of each answer that gave it the lease, until the
/// instant its request was sent plus the ttl less the safety margin, cut short by its next
/// release. These complement the spans observed on the electors' state (which a `watch`
/// channel may coalesce): together they check both the rule and the elector that applies it.
fn tenures_by_the_rule(calls: &[Call], recorder: &RecordingStorage) -> Vec<Tenure> {
    calls
        .iter()
        .filter_map(|call| {
            let response = call.response.as_ref()?;
            if !response.status.holds_lease() {
                return None;
            }
            let ttl = response.lease.ttl;
            let deadline = call.invoked + ttl - safety_margin(ttl);
            let until = recorder
                .first_release_since(&call.lease_name, &call.owner, call.completed)
                .map_or(deadline, |released| released.min(deadline));
            (call.completed < until).then(|| Tenure {
                lease_name: call.lease_name.clone(),
                owner: call.owner.clone(),
                token: response.fencing_token,
                from: call.completed,
                until,
            })
        })
        .collect()
}

/// Records the spans during which `elector` considered itself leader.
///
/// A span starts when the elector publishes a leader state and ends at the earliest of: when
/// it publishes another state, the deadline it published (`valid_until`, the instant it
/// demotes itself), and its first release call after the start (it stops leading before it
/// releases). The last two make the span exact even if this observer runs late.
async fn observe(
    elector: LeaderElector,
    history: Arc<History>,
    recorder: Arc<RecordingStorage>,
    stop: Arc<AtomicBool>,
) {
    let mut states = elector.subscribe();
    let lease_name = elector.lease_name().to_string();
    let owner = elector.owner().to_string();
    let mut current: Option<(FencingToken, Instant, Instant)> = None;
    loop {
        let state = states.borrow_and_update().clone();
        let now = Instant::now();
        let next = match &state {
            LeadershipState::Leader { token, valid_until }
            | LeadershipState::StepDownRequested { token, valid_until } => {
                Some((*token, *valid_until))
            }
            _ => None,
        };
        match (current, next) {
            (Some((token, from, until)), Some((next_token, next_until))) if token == next_token => {
                current = Some((token, from, until.max(next_until)));
            }
            (previous, next) => {
                if let Some((token, from, until)) = previous {
                    let released = recorder
                        .first_release_since(&lease_name, &owner, from)
                        .unwrap_or(now);
                    history.record_tenure(Tenure {
                        lease_name: lease_name.clone(),
                        owner: owner.clone(),
                        token,
                        from,
                        until: now.min(until).min(released),
                    });
                }
                current = next.map(|(token, until)| (token, now, until));
            }
        }
        if stop.load(Ordering::Acquire) && current.is_none() {
            return;
        }
        if states.changed().await.is_err() {
            if let Some((token, from, until)) = current {
                history.record_tenure(Tenure {
                    lease_name: lease_name.clone(),
                    owner: owner.clone(),
                    token,
                    from,
                    until: Instant::now().min(until),
                });
            }
            return;
        }
    }
}
