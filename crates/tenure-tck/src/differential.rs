//! One proof for a rule computed twice: a differential check against `tenure_domain`.
//!
//! Every lease decision has one home, the domain's state machine
//! ([`decide_request`] / [`decide_release`]). A backend that computes the decision in its own
//! code instead (in SQL for one round trip, in another language, in a hand-tuned fast path)
//! holds a second copy of the rules, and proves that the copy agrees with
//! [`check_decisions`]: it plays random cases against the backend (the *system under test*, a
//! [`DecisionSystem`]) and against the domain applied to a plain store ([`Reference`]), at
//! instants the check chooses, and compares every answer and, after every step, what is
//! stored. On the first disagreement, it shrinks the case (proptest's shrinking, then plain
//! edits until no one, two or three of its steps can go) and returns it in a [`Mismatch`].
//!
//! # The generator
//!
//! Each case is one lease, played by 2 to 6 owners whose names are deliberately awkward
//! (multi-byte UTF-8, one byte, exactly 255 bytes), with priorities from −3 to 3 and now and
//! then `i64::MIN` or `i64::MAX`, for up to 60 steps: requests (ttls from 1 ms to 7 days,
//! mostly a few milliseconds, with sub-microsecond noise the storage must truncate), releases
//! (each applied twice), and clock moves — random, or to exactly the expiry of the lease or of
//! a registration, or one microsecond either side of it, where off-by-one mistakes live. The
//! clock starts anywhere from December 1969 to 2033. The steps are not chosen from the state, so every
//! shrunk case is still a valid one. Each case (and each shrinking attempt) uses a lease name of
//! its own, so a system that keeps state across cases (a database) needs no reset.
//!
//! A system that keeps a standby's fresh registration as it is instead of refreshing it at
//! every request (a database server, where every refresh is a write and a flush of its log)
//! says so with [`DecisionSystem::keeps_fresh_registrations`]; the reference then applies
//! [`RequestOutcome::keeping_fresh_registration`] too, and the generator's polling steps
//! ([`Step::PollAtHalfTtl`]) must reach a kept registration and a refresh at exactly half a
//! ttl.
//!
//! A system that answers an unchallenged renewal without reading the registrations (a database
//! server keeping an upper bound of their priorities on the lease record) leaves the lapsed
//! ones for a later request to prune, and says so with
//! [`DecisionSystem::spares_registrations_on_unchallenged_renewals`]; the reference then applies
//! [`RequestOutcome::sparing_registrations_on_unchallenged_renewal`] too, and the generator
//! must reach such a renewal with a lapsed registration left in place.
//!
//! [`RequestOutcome::keeping_fresh_registration`]: tenure_ports::domain::RequestOutcome::keeping_fresh_registration
//! [`RequestOutcome::sparing_registrations_on_unchallenged_renewal`]: tenure_ports::domain::RequestOutcome::sparing_registrations_on_unchallenged_renewal
//!
//! Besides the comparison, the check asserts the contract's invariants on every answer (one
//! live holder, tokens that start at 1 and grow by one per new tenure, standby answers carrying
//! the holder's token, step-down exactly when a live contender outranks the holder, releases
//! that only backdate, a bounded registry), so that a failure names the rule that broke, and it
//! fails if its generator did not reach every rule.
//!
//! ```
//! use tenure_tck::differential::{Reference, check_decisions};
//!
//! // The domain applied to a plain store agrees with itself; a backend passes its own system.
//! let report = check_decisions(&mut Reference::default()).expect("no disagreement");
//! assert!(report.steps > 0);
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{
    Config as ProptestConfig, RngSeed, TestCaseError, TestError, TestRunner,
};
use tenure_ports::domain::{
    Contender, Lease, LeaseName, LeaseRequest, LeaseResponse, LeaseStatus, MAX_TTL, MIN_TTL, Owner,
    RecordWrite, Timestamp, Transition, ValidLeaseRequest, decide_release, decide_request,
};
use tenure_ports::{BoxError, sort_contenders};

/// A store that makes lease decisions in its own code, driven at instants the check chooses.
///
/// Every method is given `now`, the storage clock for that call: a database backend passes it
/// to its functions instead of reading its own clock (a test-only entry point), an embedded one
/// injects it. An `Err` fails the check, naming the step.
pub trait DecisionSystem {
    /// Handles a lease request at storage time `now`, exactly as the backend would.
    fn request(&mut self, request: &ValidLeaseRequest, now: Timestamp)
    -> Result<Decided, BoxError>;

    /// Handles a release of `lease_name` by `owner` at `now`; returns whether it changed the
    /// record (the caller held it and its heartbeat was backdated).
    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError>;

    /// What the system stores for `lease_name`, read at `now` (after every step).
    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError>;

    /// Whether the system keeps a standby's fresh registration as it is instead of refreshing
    /// it at every request (rule 1, lazily: [`RequestOutcome::keeping_fresh_registration`]);
    /// the reference then decides the same way, and the check requires its generator to reach
    /// a kept registration and a refresh at exactly half a ttl. `false` unless overridden.
    ///
    /// [`RequestOutcome::keeping_fresh_registration`]: tenure_ports::domain::RequestOutcome::keeping_fresh_registration
    fn keeps_fresh_registrations(&self) -> bool {
        false
    }

    /// Whether the system leaves the other registrations alone, lapsed ones included, on a
    /// renewal that none of them can challenge (rule 7, lazily:
    /// [`RequestOutcome::sparing_registrations_on_unchallenged_renewal`]); the reference then
    /// decides the same way, and the check requires its generator to reach such a renewal with
    /// a lapsed registration left in place. `false` unless overridden.
    ///
    /// [`RequestOutcome::sparing_registrations_on_unchallenged_renewal`]: tenure_ports::domain::RequestOutcome::sparing_registrations_on_unchallenged_renewal
    fn spares_registrations_on_unchallenged_renewals(&self) -> bool {
        false
    }
}

/// A system's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decided {
    /// The response the caller gets.
    pub response: LeaseResponse,
    /// The transition, if the system reports one (compared when given).
    pub transition: Option<Transition>,
}

impl Decided {
    /// An answer without a transition.
    pub fn new(response: LeaseResponse) -> Self {
        Decided {
            response,
            transition: None,
        }
    }

    /// Reports the transition too, so that the check compares it.
    #[must_use]
    pub fn with_transition(mut self, transition: Transition) -> Self {
        self.transition = Some(transition);
        self
    }
}

/// What a system stores for one lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Observed {
    /// The lease record, if there is one.
    pub record: Option<Lease>,
    /// Every registration live at `now`, the holder's included if it is live (what
    /// `get_lease_contenders` lists), in any order. A system that keeps the holder's
    /// registration inside the record reports it here as a [`Contender`].
    pub live_contenders: Vec<Contender>,
    /// Every stored registration, live or not, if the system can list them: each must be
    /// one the domain keeps too, so that the system's registry is as bounded.
    pub stored_contenders: Option<Vec<Contender>>,
}

impl Observed {
    /// An observation of `record` and the live registrations.
    pub fn new(record: Option<Lease>, live_contenders: Vec<Contender>) -> Self {
        Observed {
            record,
            live_contenders,
            stored_contenders: None,
        }
    }

    /// Adds every stored registration, live or not.
    #[must_use]
    pub fn with_stored_contenders(mut self, stored: Vec<Contender>) -> Self {
        self.stored_contenders = Some(stored);
        self
    }
}

/// The reference: the domain's decisions applied to a plain store, exactly as a backend keeps
/// it (a record written when the transition says so; registrations upserted, pruned and
/// withdrawn as the outcome says).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reference {
    leases: BTreeMap<LeaseName, Stored>,
    /// Whether a standby's fresh registration is kept as it is.
    keeps_fresh: bool,
    /// Whether an unchallenged renewal leaves the registrations alone.
    spares_on_renewal: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stored {
    record: Option<Lease>,
    contenders: BTreeMap<Owner, Contender>,
}

/// What the reference decided on one request, with what it pruned.
struct ReferenceOutcome {
    transition: Transition,
    response: LeaseResponse,
    refreshed: bool,
    pruned: Vec<Owner>,
}

impl Reference {
    /// A reference that keeps a standby's fresh registration as it is (the rule of a system
    /// whose [`DecisionSystem::keeps_fresh_registrations`] is true).
    pub fn keeping_fresh_registrations() -> Self {
        Reference {
            keeps_fresh: true,
            ..Reference::default()
        }
    }

    /// This reference, also leaving the registrations alone on an unchallenged renewal (the
    /// rule of a system whose
    /// [`DecisionSystem::spares_registrations_on_unchallenged_renewals`] is true).
    #[must_use]
    pub fn sparing_registrations_on_unchallenged_renewals(self) -> Self {
        Reference {
            spares_on_renewal: true,
            ..self
        }
    }

    fn decide_request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<ReferenceOutcome, String> {
        let stored = self.leases.entry(request.lease_name.clone()).or_default();
        let registered: Vec<Contender> = stored.contenders.values().cloned().collect();
        let mut outcome = decide_request(stored.record.as_ref(), &registered, request, now)
            .map_err(|e| format!("decide_request failed: {e}"))?;
        if self.keeps_fresh {
            outcome = outcome.keeping_fresh_registration(&registered, now);
        }
        if self.spares_on_renewal {
            outcome = outcome.sparing_registrations_on_unchallenged_renewal(&registered);
        }
        match outcome.transition.record_write() {
            RecordWrite::Insert if stored.record.is_some() => {
                return Err("the domain asked for an Insert while a record exists".into());
            }
            RecordWrite::Update if stored.record.is_none() => {
                return Err("the domain asked for an Update while no record exists".into());
            }
            RecordWrite::Insert | RecordWrite::Update => {
                stored.record = Some(outcome.response.lease.clone());
            }
            RecordWrite::None => {}
        }
        for owner in &outcome.pruned {
            if stored.contenders.remove(owner).is_none() {
                return Err(format!(
                    "the domain pruned {owner}, which was not registered"
                ));
            }
        }
        stored
            .contenders
            .insert(outcome.contender.owner.clone(), outcome.contender);
        Ok(ReferenceOutcome {
            transition: outcome.transition,
            response: outcome.response,
            refreshed: outcome.refreshed,
            pruned: outcome.pruned,
        })
    }

    fn decide_release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, String> {
        let stored = self.leases.entry(lease_name.clone()).or_default();
        let outcome = decide_release(stored.record.as_ref(), lease_name, owner, now)
            .map_err(|e| format!("decide_release failed: {e}"))?;
        if outcome.withdrawn != *owner {
            return Err("the domain withdrew someone else's registration".into());
        }
        let touched = outcome.updated.is_some();
        if let Some(updated) = outcome.updated {
            if stored.record.is_none() {
                return Err("a release wrote a record where there was none".into());
            }
            stored.record = Some(updated);
        }
        stored.contenders.remove(&outcome.withdrawn);
        Ok(touched)
    }

    fn stored(&self, lease_name: &LeaseName) -> Option<&Stored> {
        self.leases.get(lease_name)
    }
}

impl DecisionSystem for Reference {
    fn request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<Decided, BoxError> {
        let outcome = self.decide_request(request, now)?;
        Ok(Decided::new(outcome.response).with_transition(outcome.transition))
    }

    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        Ok(self.decide_release(lease_name, owner, now)?)
    }

    fn keeps_fresh_registrations(&self) -> bool {
        self.keeps_fresh
    }

    fn spares_registrations_on_unchallenged_renewals(&self) -> bool {
        self.spares_on_renewal
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        let Some(stored) = self.stored(lease_name) else {
            return Ok(Observed::default().with_stored_contenders(Vec::new()));
        };
        let all: Vec<Contender> = stored.contenders.values().cloned().collect();
        let live = all.iter().filter(|c| c.is_live_at(now)).cloned().collect();
        Ok(Observed::new(stored.record.clone(), live).with_stored_contenders(all))
    }
}

// ---------------------------------------------------------------------------------------------
// Cases and their generation.
// ---------------------------------------------------------------------------------------------

/// One step of a [`Case`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A request by owner number `owner`; `priority: None` uses the owner's usual priority.
    Request {
        /// The owner's index in [`Case::priorities`].
        owner: usize,
        /// A priority other than the owner's usual one.
        priority: Option<i64>,
        /// The requested ttl (before truncation to microseconds).
        ttl: Duration,
    },
    /// A release by owner number `owner`, applied twice.
    Release {
        /// The owner's index.
        owner: usize,
    },
    /// The storage clock moves forward by `micros` (possibly 0).
    Advance {
        /// How far, in µs.
        micros: i64,
    },
    /// The clock moves to the lease record's expiry + `offset` µs (if that is not in the past).
    ToLeaseExpiry {
        /// −1, 0 or 1.
        offset: i64,
    },
    /// The clock moves to a stored registration's expiry + `offset` µs (if not in the past).
    ToContenderExpiry {
        /// Which registration: the `pick % n`th of the `n` the reference stores, by owner.
        pick: usize,
        /// −1, 0 or 1.
        offset: i64,
    },
    /// A polling contender: the owner of a stored registration requests again, with that
    /// registration's priority and ttl, when it is half a ttl old + `offset` µs (or now, if
    /// that is in the past), where a system that keeps fresh registrations starts refreshing
    /// them. Nothing happens when nothing is registered.
    PollAtHalfTtl {
        /// Which registration, as for [`Step::ToContenderExpiry`].
        pick: usize,
        /// −1, 0 or 1.
        offset: i64,
    },
}

/// One generated case: a starting instant, the owners' usual priorities, and the steps.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Case {
    /// The storage clock at the start, in µs since the Unix epoch.
    pub start: i64,
    /// Each owner's usual priority; the number of owners is its length (2 to 6).
    pub priorities: Vec<i64>,
    /// The steps, 1 to 60.
    pub steps: Vec<Step>,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "start at {} µs, owners {:?} with priorities {:?}:",
            self.start,
            owner_names(self.priorities.len()),
            self.priorities
        )?;
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {i}: {step:?}")?;
        }
        Ok(())
    }
}

fn ttl_strategy() -> impl Strategy<Value = Duration> {
    prop_oneof![
        // Mostly short, with sub-microsecond noise that the storage must truncate.
        30 => (1_000u64..=30_000, 0u64..1_000)
            .prop_map(|(us, ns)| Duration::from_micros(us) + Duration::from_nanos(ns)),
        // The same ttl again, as a polling contender asks: even and odd microseconds.
        20 => prop_oneof![Just(10_000u64), Just(10_001)].prop_map(Duration::from_micros),
        3 => Just(MIN_TTL),
        1 => (1u64..=MAX_TTL.as_secs()).prop_map(Duration::from_secs),
        1 => Just(MAX_TTL),
    ]
}

fn priority_strategy() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        8 => Just(None),
        3 => (-3i64..=3).prop_map(Some),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX)].prop_map(Some),
    ]
}

fn advance_strategy() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => Just(0i64),
        6 => 1i64..=20_000,
        2 => 20_001i64..=100_000,
        1 => 100_001i64..=10_000_000,
    ]
}

fn step_strategy(owners: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (0..owners, priority_strategy(), ttl_strategy()).prop_map(
            |(owner, priority, ttl)| Step::Request { owner, priority, ttl }
        ),
        2 => (0..owners).prop_map(|owner| Step::Release { owner }),
        5 => advance_strategy().prop_map(|micros| Step::Advance { micros }),
        1 => (-1i64..=1).prop_map(|offset| Step::ToLeaseExpiry { offset }),
        1 => (0usize..6, -1i64..=1)
            .prop_map(|(pick, offset)| Step::ToContenderExpiry { pick, offset }),
        2 => (0usize..6, -1i64..=1)
            .prop_map(|(pick, offset)| Step::PollAtHalfTtl { pick, offset }),
    ]
}

/// The generator of [`Case`]s that [`check_decisions`] plays.
pub fn case_strategy() -> impl Strategy<Value = Case> {
    (2usize..=6).prop_flat_map(|owners| {
        (
            -1_000_000_000_000i64..=2_000_000_000_000_000,
            prop::collection::vec(-3i64..=3, owners),
            prop::collection::vec(step_strategy(owners), 1..=60),
        )
            .prop_map(|(start, priorities, steps)| Case {
                start,
                priorities,
                steps,
            })
    })
}

/// The names of the first `n` owners of a case, varied on purpose: multi-byte UTF-8, one byte,
/// exactly 255 bytes.
pub fn owner_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|index| match index {
            0 => "pod-a".to_owned(),
            1 => "pod-b".to_owned(),
            2 => "βeta".to_owned(),
            3 => "ünïcødé-🦀".to_owned(),
            4 => "x".to_owned(),
            _ => format!("{}{}", "é".repeat(127), index % 10),
        })
        .collect()
}

/// A lease name of its own for the `n`th case played: short ASCII, or 255 bytes of multi-byte
/// UTF-8.
fn lease_name_for(n: u64) -> String {
    if n.is_multiple_of(2) {
        format!("differential-{n}")
    } else {
        let tag = format!("-{n}");
        let mut name = "ł".repeat((255 - tag.len()) / 2);
        name.push_str(&tag);
        while name.len() < 255 {
            name.insert(0, 'x');
        }
        name
    }
}

/// Whole microseconds in `d`, computed here and not by the domain.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_nanos() / 1_000).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The check.
// ---------------------------------------------------------------------------------------------

/// How many cases [`check_decisions_with`] plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The number of cases (before shrinking). Below 100, the coverage of every rule is not
    /// required.
    pub cases: u32,
    /// The seed of the generator: `None` for a random one (or `PROPTEST_RNG_SEED`'s), a number
    /// to play the same cases each time (a negative control that must find the same case).
    pub seed: Option<u64>,
}

impl Config {
    /// `cases` cases, from a random seed.
    pub fn with_cases(cases: u32) -> Self {
        Config { cases, seed: None }
    }

    /// The same, from `seed`: the same cases, and the same failing case, each time.
    pub fn with_seed(self, seed: u64) -> Self {
        Config {
            seed: Some(seed),
            ..self
        }
    }

    /// `PROPTEST_CASES` if it is set to a number, else `default`.
    pub fn from_env_or(default: u32) -> Self {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default);
        Config::with_cases(cases)
    }
}

impl Default for Config {
    /// 256 cases, or `PROPTEST_CASES`.
    fn default() -> Self {
        Config::from_env_or(256)
    }
}

/// How often the generator reached each rule over a whole check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Coverage {
    /// First acquisitions.
    pub created: u64,
    /// Renewals.
    pub renewed: u64,
    /// Acquisitions by the last holder after expiry or release.
    pub reacquired: u64,
    /// Takeovers by another owner.
    pub taken_over: u64,
    /// Standby answers.
    pub standby: u64,
    /// Step-down requests.
    pub step_down: u64,
    /// Releases by the holder.
    pub holder_releases: u64,
    /// Releases by a non-holder.
    pub other_releases: u64,
    /// Acquisitions right after a release.
    pub acquired_after_release: u64,
    /// Acquisitions at the exact microsecond of expiry.
    pub acquired_at_exact_expiry: u64,
    /// Registrations pruned.
    pub pruned: u64,
    /// Standby requests whose fresh registration was kept as it was (only by a system that
    /// keeps fresh registrations).
    pub kept_fresh: u64,
    /// Registrations refreshed at exactly half their ttl (only by such a system).
    pub refreshed_at_half_ttl: u64,
    /// Unchallenged renewals that left a lapsed registration in place (only by a system that
    /// spares registrations on such renewals).
    pub spared_on_renewal: u64,
}

impl Coverage {
    fn unreached(&self, keeps_fresh: bool, spares_on_renewal: bool) -> Vec<&'static str> {
        let lazily = [
            ("kept fresh", self.kept_fresh),
            ("refreshed at half ttl", self.refreshed_at_half_ttl),
        ];
        let spared = [(
            "lapsed registration spared by a renewal",
            self.spared_on_renewal,
        )];
        [
            ("created", self.created),
            ("renewed", self.renewed),
            ("reacquired", self.reacquired),
            ("taken over", self.taken_over),
            ("standby", self.standby),
            ("step-down", self.step_down),
            ("holder releases", self.holder_releases),
            ("other releases", self.other_releases),
            ("acquired after release", self.acquired_after_release),
            ("acquired at exact expiry", self.acquired_at_exact_expiry),
            ("pruned", self.pruned),
        ]
        .into_iter()
        .chain(lazily.into_iter().filter(|_| keeps_fresh))
        .chain(spared.into_iter().filter(|_| spares_on_renewal))
        .filter(|(_, n)| *n == 0)
        .map(|(what, _)| what)
        .collect()
    }
}

/// What a passing check played.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Cases played, shrinking attempts included.
    pub cases: u64,
    /// Steps played.
    pub steps: u64,
    /// How often each rule was reached.
    pub coverage: Coverage,
}

/// The system under test disagreed with the domain (or broke a rule of the contract), on
/// `case`, the smallest case found by shrinking: without any one, two or three of its steps, it
/// passes (unless shrinking stopped at its bound of 5,000 replays).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Mismatch {
    /// The minimal failing case; `None` when the check failed as a whole (an unreached rule).
    pub case: Option<Case>,
    /// What differed, naming the step.
    pub reason: String,
    /// The generator's seed: [`Config::with_seed`] (or `PROPTEST_RNG_SEED`) plays the same
    /// cases again.
    pub seed: u64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.case {
            Some(case) => write!(
                f,
                "the system under test and tenure_domain disagree: {}\nminimal case (seed {}): \
                 {case}",
                self.reason, self.seed
            ),
            None => write!(f, "{} (seed {})", self.reason, self.seed),
        }
    }
}

impl std::error::Error for Mismatch {}

/// Plays [`Config::default`] cases against `system` and the [`Reference`]; see the
/// [module documentation](self).
pub fn check_decisions<S: DecisionSystem>(system: &mut S) -> Result<Report, Mismatch> {
    check_decisions_with(Config::default(), system)
}

/// Plays `config.cases` cases against `system` and the [`Reference`], comparing every answer
/// and what is stored after every step; on a disagreement, shrinks to a minimal case.
pub fn check_decisions_with<S: DecisionSystem>(
    config: Config,
    system: &mut S,
) -> Result<Report, Mismatch> {
    let defaults = ProptestConfig::default();
    // A seed of our own when none is given, so that a mismatch can name it.
    let seed = config.seed.unwrap_or(match defaults.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => RandomState::new().hash_one(std::process::id()),
    });
    let mut runner = TestRunner::new(ProptestConfig {
        cases: config.cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..defaults
    });
    let keeps_fresh = system.keeps_fresh_registrations();
    let spares_on_renewal = system.spares_registrations_on_unchallenged_renewals();
    let system = RefCell::new(system);
    let report = RefCell::new(Report::default());
    let played = AtomicU64::new(0);
    let play_next = |case: &Case| {
        let n = played.fetch_add(1, Ordering::Relaxed);
        play_case(
            case,
            lease_name_for(n),
            &mut **system.borrow_mut(),
            &mut report.borrow_mut(),
        )
    };
    let result = runner.run(&case_strategy(), |case| {
        play_next(&case).map_err(|failure| failure.error)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(_, case)) => {
            let (case, failure) =
                minimize(case.clone(), |case| play_next(case).err()).map_err(|reason| {
                    Mismatch {
                        case: Some(case.clone()),
                        reason,
                        seed,
                    }
                })?;
            return Err(Mismatch {
                reason: failure.to_string(),
                case: Some(case),
                seed,
            });
        }
        Err(TestError::Abort(reason)) => {
            return Err(Mismatch {
                case: None,
                reason: format!("the check was aborted: {reason}"),
                seed,
            });
        }
    }
    let report = report.into_inner();
    if config.cases >= 100 {
        let unreached = report.coverage.unreached(keeps_fresh, spares_on_renewal);
        if !unreached.is_empty() {
            return Err(Mismatch {
                case: None,
                reason: format!(
                    "the generator did not reach every rule in {} cases: no {}",
                    config.cases,
                    unreached.join(", no ")
                ),
                seed,
            });
        }
    }
    Ok(report)
}

fn fail(message: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(message.into())
}

/// How a case failed: at which step (`None` before the first), and why.
struct Failure {
    step: Option<usize>,
    error: TestCaseError,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            TestCaseError::Fail(why) | TestCaseError::Reject(why) => write!(f, "{why}"),
        }
    }
}

/// Plays `case` on `lease_name` against `system` and a fresh reference.
fn play_case<S: DecisionSystem + ?Sized>(
    case: &Case,
    lease_name: String,
    system: &mut S,
    report: &mut Report,
) -> Result<(), Failure> {
    let mut play = Play::new(case, lease_name, system, report)
        .map_err(|error| Failure { step: None, error })?;
    for (i, step) in case.steps.iter().enumerate() {
        play.step(step).map_err(|e| Failure {
            step: Some(i),
            error: match e {
                TestCaseError::Fail(why) => fail(format!("step {i} ({step:?}): {why}")),
                reject => reject,
            },
        })?;
    }
    Ok(())
}

/// Replays beyond this many are not tried: the case found so far is reported.
const MINIMIZE_REPLAYS: usize = 5_000;

/// Makes a failing `case` (as proptest shrank it) as small as plain edits can: cut after the
/// failing step, drop single steps, then pairs and triples of steps, merge adjacent clock
/// moves, for as long as the case still fails. Proptest's shrinking stops at a local minimum
/// that depends on the random case it started from (a redundant renewal kept, a clock move
/// split in two); the case reported is then 3-minimal: without any one, two or three of its
/// steps, it passes. `fails` replays a case; `Err` when even the case given no longer fails.
fn minimize(
    case: Case,
    mut fails: impl FnMut(&Case) -> Option<Failure>,
) -> Result<(Case, Failure), String> {
    let mut failing =
        |candidate: &Case| fails(candidate).filter(|f| matches!(f.error, TestCaseError::Fail(_)));
    let mut replays = 1;
    let Some(mut failure) = failing(&case) else {
        return Err(
            "the case proptest reported failing passes when played again: the system \
                    under test does not decide the same way twice"
                .into(),
        );
    };
    let mut case = case;
    loop {
        if let Some(step) = failure.step {
            case.steps.truncate(step + 1);
        }
        let mut smaller = None;
        for edit in edits(&case) {
            if replays >= MINIMIZE_REPLAYS {
                break;
            }
            replays += 1;
            if let Some(f) = failing(&edit) {
                smaller = Some((edit, f));
                break;
            }
        }
        match smaller {
            Some((edit, f)) => (case, failure) = (edit, f),
            None => return Ok((case, failure)),
        }
    }
}

/// The cases one edit smaller than `case`, smallest edits first: each single step removed
/// (from the last), each pair, each three steps, each two adjacent clock moves merged into one.
fn edits(case: &Case) -> impl Iterator<Item = Case> + '_ {
    let n = case.steps.len();
    let without = move |drop: &[usize]| {
        let mut smaller = case.clone();
        smaller.steps = (0..n)
            .filter(|i| !drop.contains(i))
            .map(|i| case.steps[i].clone())
            .collect();
        smaller
    };
    let singles = (0..n).rev().map(move |i| without(&[i]));
    let pairs = (0..n)
        .rev()
        .flat_map(move |j| (0..j).rev().map(move |i| (i, j)))
        .map(move |(i, j)| without(&[i, j]));
    let triples = (0..n)
        .rev()
        .flat_map(move |k| (0..k).rev().map(move |j| (j, k)))
        .flat_map(move |(j, k)| (0..j).rev().map(move |i| [i, j, k]))
        .map(move |drop| without(&drop));
    let merges = (1..n).filter_map(move |i| match (&case.steps[i - 1], &case.steps[i]) {
        (Step::Advance { micros: a }, Step::Advance { micros: b }) => {
            let mut merged = without(&[i]);
            merged.steps[i - 1] = Step::Advance {
                micros: a.saturating_add(*b),
            };
            Some(merged)
        }
        _ => None,
    });
    singles
        .chain(pairs)
        .chain(triples)
        .chain(merges)
        .filter(|c| !c.steps.is_empty())
}

type StepResult = Result<(), TestCaseError>;

/// A response that gave the lease to an owner: valid until `expires` unless it released.
#[derive(Clone, Copy, Debug)]
struct Grant {
    token: u64,
    at: i64,
    expires: i64,
}

/// One case being played against the system and the reference.
struct Play<'a, S: DecisionSystem + ?Sized> {
    lease_name: LeaseName,
    owners: Vec<Owner>,
    priorities: Vec<i64>,
    now: i64,
    system: &'a mut S,
    reference: Reference,
    /// The latest grant to each owner, forgotten when the owner releases.
    grants: BTreeMap<usize, Grant>,
    /// Which owner each token was ever given to.
    token_owner: BTreeMap<u64, usize>,
    /// The highest token seen so far.
    highest_token: u64,
    /// The token of a lease its holder released, until the next request.
    released_token: Option<u64>,
    report: &'a mut Report,
}

impl<'a, S: DecisionSystem + ?Sized> Play<'a, S> {
    fn new(
        case: &Case,
        lease_name: String,
        system: &'a mut S,
        report: &'a mut Report,
    ) -> Result<Self, TestCaseError> {
        report.cases += 1;
        let mut reference = if system.keeps_fresh_registrations() {
            Reference::keeping_fresh_registrations()
        } else {
            Reference::default()
        };
        if system.spares_registrations_on_unchallenged_renewals() {
            reference = reference.sparing_registrations_on_unchallenged_renewals();
        }
        let owners = owner_names(case.priorities.len())
            .into_iter()
            .map(|name| Owner::new(name).map_err(|e| fail(format!("owner name: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Play {
            lease_name: LeaseName::new(lease_name).map_err(|e| fail(format!("lease name: {e}")))?,
            owners,
            priorities: case.priorities.clone(),
            now: case.start,
            system,
            reference,
            grants: BTreeMap::new(),
            token_owner: BTreeMap::new(),
            highest_token: 0,
            released_token: None,
            report,
        })
    }

    fn stored(&self) -> Stored {
        self.reference
            .stored(&self.lease_name)
            .cloned()
            .unwrap_or_default()
    }

    fn step(&mut self, step: &Step) -> StepResult {
        self.report.steps += 1;
        match *step {
            Step::Request {
                owner,
                priority,
                ttl,
            } => self.request(owner, priority.unwrap_or(self.priorities[owner]), ttl)?,
            Step::Release { owner } => self.release(owner)?,
            Step::Advance { micros } => self.now += micros,
            Step::ToLeaseExpiry { offset } => {
                if let Some(lease) = &self.stored().record {
                    let target = lease.heartbeat_at.as_micros() + micros(lease.ttl) + offset;
                    self.now = self.now.max(target);
                }
            }
            Step::ToContenderExpiry { pick, offset } => {
                self.move_to_contender(pick, |c| micros(c.ttl) + offset);
            }
            Step::PollAtHalfTtl { pick, offset } => {
                // Half of an odd ttl falls between two microseconds: its ceiling.
                if let Some(c) = self.move_to_contender(pick, |c| (micros(c.ttl) + 1) / 2 + offset)
                {
                    let who = self
                        .owners
                        .iter()
                        .position(|o| *o == c.owner)
                        .ok_or_else(|| fail("a registration of an owner of no case"))?;
                    self.request(who, c.priority, c.ttl)?;
                }
            }
        }
        self.compare_stored()?;
        self.check_tokens()
    }

    /// Moves the clock to the `pick`th stored registration's `last_seen` + `after(it)` µs, if
    /// that is not in the past; returns that registration.
    fn move_to_contender(
        &mut self,
        pick: usize,
        after: impl Fn(&Contender) -> i64,
    ) -> Option<Contender> {
        let stored = self.stored().contenders;
        let c = stored.values().nth(pick.checked_rem(stored.len())?)?;
        self.now = self.now.max(c.last_seen.as_micros() + after(c));
        Some(c.clone())
    }

    fn request(&mut self, who: usize, priority: i64, ttl: Duration) -> StepResult {
        let request = LeaseRequest::new(
            self.lease_name.as_str(),
            self.owners[who].as_str(),
            priority,
            ttl,
        )
        .validate()
        .map_err(|e| fail(format!("a valid request was refused: {e}")))?;
        let now = self.now;
        let at = Timestamp::from_micros(now);
        let before = self.stored().record;
        let registered_before = self.stored().contenders.get(&self.owners[who]).cloned();
        let registered_before_all: Vec<Contender> =
            self.stored().contenders.values().cloned().collect();
        let expected = self.reference.decide_request(&request, at).map_err(fail)?;
        let decided = self
            .system
            .request(&request, at)
            .map_err(|e| fail(format!("the system failed a request: {e}")))?;

        // The system agrees with the domain.
        prop_assert_eq!(
            &decided.response,
            &expected.response,
            "the response differs (left: the system's, right: the domain's)"
        );
        if let Some(transition) = decided.transition {
            prop_assert_eq!(transition, expected.transition, "the transition differs");
        }

        // The domain keeps the contract.
        prop_assert!(
            !expected.pruned.contains(&self.owners[who]),
            "the requester itself was pruned"
        );
        let response = &expected.response;
        let record = self
            .stored()
            .record
            .ok_or_else(|| fail("no record after a request"))?;
        let record_token = record.fencing_token.get();
        let record_expires = record.heartbeat_at.as_micros() + micros(record.ttl);
        let before_live = before
            .as_ref()
            .map(|l| now < l.heartbeat_at.as_micros() + micros(l.ttl));
        prop_assert_eq!(
            response.fencing_token,
            response.lease.fencing_token,
            "response token differs from its lease's token"
        );
        prop_assert_eq!(
            &response.lease,
            &record,
            "response.lease is not the stored record"
        );
        prop_assert_eq!(
            response.status.holds_lease(),
            expected.transition.holds_lease(),
            "status {:?} disagrees with transition {:?}",
            response.status,
            expected.transition
        );
        let holds = response.status.holds_lease();
        prop_assert!(
            now < record_expires,
            "after a request the record is not live at now"
        );
        if holds {
            prop_assert_eq!(
                &record.owner,
                &self.owners[who],
                "holder is not the record's owner"
            );
        } else {
            prop_assert_ne!(
                &record.owner,
                &self.owners[who],
                "the live owner was told Standby"
            );
        }
        match (&before, before_live) {
            (None, _) => {
                prop_assert!(holds, "the first request did not acquire");
                prop_assert_eq!(record_token, 1, "the first acquisition's token is not 1");
            }
            (Some(prev), Some(false)) => {
                prop_assert!(holds, "a request on an expired lease did not acquire");
                prop_assert_eq!(
                    record_token,
                    prev.fencing_token.get() + 1,
                    "acquiring a lease that was not live must add exactly one to the token"
                );
                prop_assert_eq!(record.acquired_at.as_micros(), now, "acquired_at not now");
                self.report.coverage.acquired_at_exact_expiry +=
                    u64::from(prev.heartbeat_at.as_micros() + micros(prev.ttl) == now);
            }
            (Some(prev), _) if prev.owner == self.owners[who] => {
                prop_assert_eq!(expected.transition, Transition::Renewed, "not a renewal");
                prop_assert_eq!(
                    record_token,
                    prev.fencing_token.get(),
                    "a renewal of a live lease changed the token"
                );
                prop_assert_eq!(
                    record.acquired_at,
                    prev.acquired_at,
                    "renewal moved acquired_at"
                );
                prop_assert_eq!(
                    record.heartbeat_at.as_micros(),
                    now,
                    "renewal heartbeat not now"
                );
            }
            (Some(prev), _) => {
                prop_assert_eq!(response.status, LeaseStatus::Standby);
                prop_assert_eq!(
                    expected.transition.record_write(),
                    RecordWrite::None,
                    "a standby wrote the record"
                );
                prop_assert_eq!(&record, prev, "a standby changed the record");
                prop_assert_eq!(
                    response.fencing_token,
                    prev.fencing_token,
                    "a standby's token is not the holder's"
                );
            }
        }
        if let Some(released) = self.released_token.take() {
            prop_assert!(holds, "the first request after a release did not acquire");
            prop_assert_eq!(
                record_token,
                released + 1,
                "the first acquisition after a release must add one to the token"
            );
            self.report.coverage.acquired_after_release += 1;
        }
        if holds {
            prop_assert_eq!(record.priority, priority, "holder's priority not updated");
            prop_assert_eq!(micros(record.ttl), micros(ttl), "holder's ttl not updated");
            self.grant(who, record_token, record_expires)?;
        }
        let stored = self.stored();
        let outranked = stored.contenders.values().any(|c| {
            c.owner != record.owner
                && now < c.last_seen.as_micros() + micros(c.ttl)
                && c.priority > record.priority
        });
        prop_assert_eq!(
            response.status == LeaseStatus::LeaderStepDownRequested,
            holds && outranked,
            "step-down must be asked exactly of a holder outranked by a live contender"
        );
        prop_assert!(stored.contenders.len() <= self.owners.len());
        // Rule 1, lazily or not: refreshed, or (kept by a system that keeps fresh ones) a
        // standby's registration with the request's priority and ttl, younger than half its
        // ttl, computed here and not by the domain.
        let kept = !expected.refreshed;
        if kept {
            let fresh = registered_before.as_ref().is_some_and(|c| {
                let age = now - c.last_seen.as_micros();
                c.priority == priority
                    && micros(c.ttl) == micros(ttl)
                    && age >= 0
                    && age.saturating_mul(2) < micros(c.ttl)
            });
            prop_assert!(
                self.reference.keeps_fresh && !holds && fresh,
                "a registration was kept that must be refreshed"
            );
            prop_assert!(
                expected.pruned.is_empty(),
                "a kept registration pruned others"
            );
            self.report.coverage.kept_fresh += 1;
        } else if let Some(c) = &registered_before {
            let age = now - c.last_seen.as_micros();
            self.report.coverage.refreshed_at_half_ttl += u64::from(
                self.reference.keeps_fresh
                    && !holds
                    && c.priority == priority
                    && micros(c.ttl) == micros(ttl)
                    && age.saturating_mul(2) == micros(c.ttl),
            );
        }
        // Rule 7, lazily: a renewal that no registration of another owner could challenge (none,
        // live or lapsed, above the request's priority), by a system that spares them, leaves
        // them all in place; computed here and not by the domain.
        let spared = self.reference.spares_on_renewal
            && expected.transition == Transition::Renewed
            && registered_before_all
                .iter()
                .all(|c| c.owner == self.owners[who] || c.priority <= priority);
        if spared {
            prop_assert!(expected.pruned.is_empty(), "a spared renewal pruned");
        }
        let mut lapsed_spared = false;
        for c in stored.contenders.values() {
            if c.owner == self.owners[who] {
                if kept {
                    prop_assert_eq!(Some(c), registered_before.as_ref(), "a kept one changed");
                } else {
                    prop_assert_eq!(c.last_seen.as_micros(), now, "registration not refreshed");
                }
                prop_assert_eq!(c.priority, priority);
                prop_assert_eq!(micros(c.ttl), micros(ttl));
            } else if !kept && !spared {
                prop_assert!(
                    now < c.last_seen.as_micros() + micros(c.ttl),
                    "a stale registration of {} survived a request",
                    c.owner
                );
            } else if spared && now >= c.last_seen.as_micros() + micros(c.ttl) {
                lapsed_spared = true;
            }
        }
        self.report.coverage.spared_on_renewal += u64::from(lapsed_spared);

        let cov = &mut self.report.coverage;
        match expected.transition {
            Transition::Created => cov.created += 1,
            Transition::Renewed => cov.renewed += 1,
            Transition::Reacquired => cov.reacquired += 1,
            Transition::TakenOver => cov.taken_over += 1,
            Transition::Standby => cov.standby += 1,
        }
        if response.status == LeaseStatus::LeaderStepDownRequested {
            cov.step_down += 1;
        }
        cov.pruned += expected.pruned.len() as u64;
        Ok(())
    }

    /// Records a grant of `token` to `who`, checking that no other owner still holds one.
    fn grant(&mut self, who: usize, token: u64, expires: i64) -> StepResult {
        let now = self.now;
        for (&other, g) in &self.grants {
            prop_assert!(
                other == who || g.expires <= now,
                "two live holders: owner {} got token {} at {} valid until {}, and owner {} \
                 gets token {} at {}",
                other,
                g.token,
                g.at,
                g.expires,
                who,
                token,
                now
            );
        }
        let first_owner = *self.token_owner.entry(token).or_insert(who);
        prop_assert_eq!(first_owner, who, "token {} given to two owners", token);
        self.grants.insert(
            who,
            Grant {
                token,
                at: now,
                expires,
            },
        );
        Ok(())
    }

    fn release(&mut self, who: usize) -> StepResult {
        let at = Timestamp::from_micros(self.now);
        let owner = self.owners[who].clone();
        let before = self.stored().record;

        for attempt in ["first", "second"] {
            let expected = self
                .reference
                .decide_release(&self.lease_name, &owner, at)
                .map_err(fail)?;
            let touched = self
                .system
                .release(&self.lease_name, &owner, at)
                .map_err(|e| fail(format!("the system failed a release: {e}")))?;
            prop_assert_eq!(
                touched,
                expected,
                "whether the {} release changed the record differs (left: the system's)",
                attempt
            );
        }
        let stored = self.stored();
        prop_assert!(
            !stored.contenders.contains_key(&owner),
            "the releaser is still registered"
        );
        self.grants.remove(&who);
        match (&before, &stored.record) {
            (Some(prev), Some(after)) if prev.owner == owner => {
                prop_assert!(
                    self.now >= after.heartbeat_at.as_micros() + micros(after.ttl),
                    "a released lease is still live at now"
                );
                prop_assert_eq!(
                    after.heartbeat_at.as_micros(),
                    prev.heartbeat_at
                        .as_micros()
                        .min(self.now - micros(prev.ttl)),
                    "heartbeat not backdated to min(heartbeat_at, now - ttl)"
                );
                let backdated = after.heartbeat_at != prev.heartbeat_at;
                prop_assert_eq!(
                    after.released_at,
                    if backdated {
                        Some(Timestamp::from_micros(self.now))
                    } else {
                        prev.released_at
                    },
                    "released_at is not the release's instant (or a lease already expired that \
                     far back was marked released)"
                );
                prop_assert_eq!(after.is_released(), backdated || prev.is_released());
                prop_assert_eq!(
                    &Lease {
                        heartbeat_at: prev.heartbeat_at,
                        released_at: prev.released_at,
                        ..after.clone()
                    },
                    prev,
                    "a release changed more than the heartbeat and released_at"
                );
                self.released_token = Some(prev.fencing_token.get());
                self.report.coverage.holder_releases += 1;
            }
            (prev, after) => {
                prop_assert_eq!(after, prev, "a release by a non-holder touched the record");
                self.report.coverage.other_releases += 1;
            }
        }
        Ok(())
    }

    /// After every step: the system stores what the reference stores.
    fn compare_stored(&mut self) -> StepResult {
        let at = Timestamp::from_micros(self.now);
        let observed = self
            .system
            .observe(&self.lease_name, at)
            .map_err(|e| fail(format!("the system failed to show what it stores: {e}")))?;
        let stored = self.stored();
        prop_assert_eq!(
            &observed.record,
            &stored.record,
            "the stored record differs (left: the system's)"
        );
        let by_owner = |mut list: Vec<Contender>| {
            list.sort_by(|a, b| a.owner.cmp(&b.owner));
            list
        };
        let mut live: Vec<Contender> = stored
            .contenders
            .values()
            .filter(|c| c.is_live_at(at))
            .cloned()
            .collect();
        sort_contenders(&mut live);
        prop_assert_eq!(
            by_owner(observed.live_contenders),
            by_owner(live),
            "the live registrations differ (left: the system's)"
        );
        if let Some(kept) = observed.stored_contenders {
            for c in &kept {
                prop_assert!(
                    stored.contenders.get(&c.owner) == Some(c),
                    "the system keeps a registration {:?} that the domain does not",
                    c
                );
            }
        }
        for c in stored.contenders.values() {
            prop_assert_eq!(&c.lease_name, &self.lease_name);
            prop_assert_eq!(c.ttl.subsec_nanos() % 1_000, 0, "ttl not truncated to µs");
        }
        if let Some(l) = &stored.record {
            prop_assert_eq!(&l.lease_name, &self.lease_name);
            prop_assert_eq!(l.ttl.subsec_nanos() % 1_000, 0, "ttl not truncated to µs");
        }
        Ok(())
    }

    /// Tokens never go back.
    fn check_tokens(&mut self) -> StepResult {
        let token = self.stored().record.map_or(0, |l| l.fencing_token.get());
        prop_assert!(
            token >= self.highest_token,
            "the token went back from {} to {}",
            self.highest_token,
            token
        );
        self.highest_token = token;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advance(micros: i64) -> Step {
        Step::Advance { micros }
    }

    fn request(owner: usize) -> Step {
        Step::Request {
            owner,
            priority: None,
            ttl: MIN_TTL,
        }
    }

    /// Fails at the first step where the clock has moved 10 µs or more since owner 0's release.
    fn after_a_release(case: &Case) -> Option<Failure> {
        let mut moved = None;
        for (i, step) in case.steps.iter().enumerate() {
            match *step {
                Step::Release { owner: 0 } => moved = Some(0),
                Step::Advance { micros } => moved = moved.map(|m| m + micros),
                _ => {}
            }
            if moved.is_some_and(|m| m >= 10) {
                return Some(Failure {
                    step: Some(i),
                    error: fail(format!("step {i}")),
                });
            }
        }
        None
    }

    #[test]
    fn minimize_cuts_after_the_failure_drops_what_is_not_needed_and_merges_clock_moves() {
        let case = Case {
            start: 0,
            priorities: vec![0, 0],
            steps: vec![
                request(0),
                advance(4),
                Step::Release { owner: 0 },
                request(1),
                advance(6),
                advance(5),
                request(1),
            ],
        };
        let Ok((minimal, failure)) = minimize(case, after_a_release) else {
            panic!("a failing case was not minimized");
        };
        assert_eq!(minimal.steps, [Step::Release { owner: 0 }, advance(11)]);
        assert_eq!(failure.step, Some(1));
    }

    #[test]
    fn minimize_refuses_a_case_that_passes_when_played_again() {
        let case = Case {
            start: 0,
            priorities: vec![0, 0],
            steps: vec![request(0)],
        };
        let Err(reason) = minimize(case, after_a_release) else {
            panic!("a passing case was reported minimal");
        };
        assert!(
            reason.contains("does not decide the same way twice"),
            "{reason}"
        );
    }
}
