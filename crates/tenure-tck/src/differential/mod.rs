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
//! [`decide_request`]: tenure_ports::domain::decide_request
//! [`decide_release`]: tenure_ports::domain::decide_release
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
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestError, TestRunner};
use tenure_ports::BoxError;
use tenure_ports::domain::{
    Contender, Lease, LeaseName, LeaseResponse, Owner, Timestamp, Transition, ValidLeaseRequest,
};

mod case;
mod minimize;
mod play;
mod reference;

pub use case::{Case, Step, case_strategy, owner_names};
pub use reference::Reference;

use case::lease_name_for;
use minimize::minimize;
use play::play_case;

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
