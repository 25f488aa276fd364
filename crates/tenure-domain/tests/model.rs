//! Model-based property test of the lease state machine.
//!
//! Each case picks 2 to 6 owners with random priorities and plays up to 60 random steps against
//! one lease: requests (random ttl, mostly a few milliseconds, and now and then a new priority),
//! releases, and clock advances (random, or to exactly one microsecond before, at or after the
//! expiry of the lease or of a registration, where off-by-one mistakes live). The steps are not
//! chosen from the state, so any shrunk sequence is still a valid one.
//!
//! Every step goes through [`decide_request`] / [`decide_release`] and is applied to a
//! `Storage` kept here exactly as a backend keeps it: an `Option<Lease>` written when
//! `transition.record_write()` says so, and a map of registrations from which `pruned` is
//! removed and into which `contender` is upserted (on a release, `updated` is written and
//! `withdrawn` removed). Every release is applied twice, to check that it is idempotent.
//!
//! Beside it, `Model` is a deliberately naive reference written from the contract alone,
//! with plain integer microseconds and owner indices; it shares no code with the domain. After
//! every step the storage must equal the model, and the contract's invariants are checked
//! directly as well (one live holder, fencing tokens, standby answers, step-down, release,
//! bounded registry, response consistency), so that a failure names the rule that broke.
//!
//! A second property checks input validation against the contract: names of 1 to 255 bytes
//! without control characters, ttls from 1 ms to 7 days, valid and invalid values alike.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tenure_domain::{
    Contender, Field, Lease, LeaseName, LeaseRequest, LeaseStatus, MAX_TTL, MIN_TTL, Owner, Reason,
    RecordWrite, RequestOutcome, Timestamp, Transition, decide_release, decide_request,
    validate_ttl,
};

/// The number of cases when `PROPTEST_CASES` is not set.
const DEFAULT_CASES: u32 = 256;

const LEASE: &str = "model-lease";

/// The test's configuration: `PROPTEST_CASES` if set, otherwise [`DEFAULT_CASES`].
fn config() -> Config {
    let from_env = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        from_env.cases
    } else {
        DEFAULT_CASES
    };
    Config {
        cases,
        source_file: Some(file!()),
        ..from_env
    }
}

fn fail(message: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(message.into())
}

// ---------------------------------------------------------------------------------------------
// Steps and their generation.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Step {
    /// A request by owner `owner`; `priority: None` uses the owner's usual priority.
    Request {
        owner: usize,
        priority: Option<i64>,
        ttl: Duration,
    },
    /// A release by owner `owner`, applied twice.
    Release { owner: usize },
    /// The storage clock moves forward by `micros` (possibly 0).
    Advance { micros: i64 },
    /// The clock moves to the lease record's expiry + `offset` µs (if that is not in the past).
    ToLeaseExpiry { offset: i64 },
    /// The clock moves to a stored registration's expiry + `offset` µs (if not in the past).
    ToContenderExpiry { pick: Index, offset: i64 },
}

#[derive(Clone, Debug)]
struct Scenario {
    /// The storage clock at the start, in µs since the epoch.
    start: i64,
    /// Each owner's usual priority; the number of owners is its length.
    priorities: Vec<i64>,
    steps: Vec<Step>,
}

fn ttl_strategy() -> impl Strategy<Value = Duration> {
    prop_oneof![
        // Mostly short, with sub-microsecond noise that the storage must truncate.
        30 => (1_000u64..=30_000, 0u64..1_000)
            .prop_map(|(us, ns)| Duration::from_micros(us) + Duration::from_nanos(ns)),
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
        1 => (any::<Index>(), -1i64..=1)
            .prop_map(|(pick, offset)| Step::ToContenderExpiry { pick, offset }),
    ]
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (2usize..=6).prop_flat_map(|owners| {
        (
            -1_000_000_000_000i64..=2_000_000_000_000_000,
            prop::collection::vec(-3i64..=3, owners),
            prop::collection::vec(step_strategy(owners), 1..=60),
        )
            .prop_map(|(start, priorities, steps)| Scenario {
                start,
                priorities,
                steps,
            })
    })
}

/// Owner names, varied on purpose: multi-byte UTF-8, one byte, exactly 255 bytes.
fn owner_name(index: usize) -> String {
    match index {
        0 => "pod-a".to_owned(),
        1 => "pod-b".to_owned(),
        2 => "βeta".to_owned(),
        3 => "ünïcødé-🦀".to_owned(),
        4 => "x".to_owned(),
        _ => format!("{}{index}", "é".repeat(127)),
    }
}

/// Whole microseconds in `d`, computed here and not by the domain.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_nanos() / 1_000).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The reference model: the contract, naively, in integers.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ModelLease {
    owner: usize,
    priority: i64,
    token: u64,
    acquired_at: i64,
    heartbeat_at: i64,
    ttl: i64,
    released_at: Option<i64>,
}

impl ModelLease {
    fn live_at(&self, now: i64) -> bool {
        now < self.heartbeat_at + self.ttl
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ModelContender {
    priority: i64,
    last_seen: i64,
    ttl: i64,
}

impl ModelContender {
    fn live_at(&self, now: i64) -> bool {
        now < self.last_seen + self.ttl
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Created,
    Renewed,
    Reacquired,
    TakenOver,
    Standby,
}

#[derive(Clone, Copy, Debug)]
struct Expected {
    kind: Kind,
    status: LeaseStatus,
    token: u64,
}

#[derive(Clone, Default, Debug)]
struct Model {
    lease: Option<ModelLease>,
    contenders: BTreeMap<usize, ModelContender>,
}

impl Model {
    fn request(&mut self, owner: usize, priority: i64, ttl: i64, now: i64) -> Expected {
        self.contenders.insert(
            owner,
            ModelContender {
                priority,
                last_seen: now,
                ttl,
            },
        );
        self.contenders
            .retain(|&other, c| other == owner || c.live_at(now));
        let fresh = |token| ModelLease {
            owner,
            priority,
            token,
            acquired_at: now,
            heartbeat_at: now,
            ttl,
            released_at: None,
        };
        let kind = match self.lease {
            None => {
                self.lease = Some(fresh(1));
                Kind::Created
            }
            Some(lease) if lease.live_at(now) && lease.owner == owner => {
                self.lease = Some(ModelLease {
                    priority,
                    heartbeat_at: now,
                    ttl,
                    ..lease
                });
                Kind::Renewed
            }
            Some(lease) if lease.live_at(now) => Kind::Standby,
            Some(lease) => {
                self.lease = Some(fresh(lease.token + 1));
                if lease.owner == owner {
                    Kind::Reacquired
                } else {
                    Kind::TakenOver
                }
            }
        };
        let token = self.lease.map_or(0, |l| l.token);
        let status = if kind == Kind::Standby {
            LeaseStatus::Standby
        } else if self
            .contenders
            .iter()
            .any(|(&other, c)| other != owner && c.live_at(now) && c.priority > priority)
        {
            LeaseStatus::LeaderStepDownRequested
        } else {
            LeaseStatus::Leader
        };
        Expected {
            kind,
            status,
            token,
        }
    }

    fn release(&mut self, owner: usize, now: i64) {
        if let Some(lease) = self.lease.as_mut()
            && lease.owner == owner
            && now - lease.ttl < lease.heartbeat_at
        {
            lease.heartbeat_at = now - lease.ttl;
            lease.released_at = Some(now);
        }
        self.contenders.remove(&owner);
    }
}

// ---------------------------------------------------------------------------------------------
// The storage: what a backend keeps, written only as the domain's outcomes say.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct Storage {
    record: Option<Lease>,
    contenders: BTreeMap<Owner, Contender>,
}

impl Storage {
    fn apply_request(&mut self, outcome: &RequestOutcome) -> Result<(), TestCaseError> {
        match outcome.transition.record_write() {
            RecordWrite::Insert => {
                prop_assert!(self.record.is_none(), "Insert asked while a record exists");
                self.record = Some(outcome.response.lease.clone());
            }
            RecordWrite::Update => {
                prop_assert!(self.record.is_some(), "Update asked while no record exists");
                self.record = Some(outcome.response.lease.clone());
            }
            RecordWrite::None => {}
        }
        for owner in &outcome.pruned {
            prop_assert!(
                self.contenders.remove(owner).is_some(),
                "pruned {owner}, which was not registered"
            );
        }
        self.contenders
            .insert(outcome.contender.owner.clone(), outcome.contender.clone());
        Ok(())
    }

    fn release(&mut self, lease_name: &LeaseName, owner: &Owner, now: Timestamp) -> TestResult {
        let outcome = decide_release(self.record.as_ref(), lease_name, owner, now)
            .map_err(|e| fail(format!("decide_release failed: {e}")))?;
        prop_assert_eq!(
            &outcome.withdrawn,
            owner,
            "withdrew someone else's registration"
        );
        if let Some(updated) = outcome.updated {
            prop_assert!(
                self.record.is_some(),
                "a release wrote a record where there was none"
            );
            self.record = Some(updated);
        }
        self.contenders.remove(&outcome.withdrawn);
        Ok(())
    }
}

type TestResult = Result<(), TestCaseError>;

// ---------------------------------------------------------------------------------------------
// The harness: plays a scenario and checks every step.
// ---------------------------------------------------------------------------------------------

/// A response that gave the lease to an owner: valid until `expires` unless it released.
#[derive(Clone, Copy, Debug)]
struct Grant {
    token: u64,
    at: i64,
    expires: i64,
}

#[derive(Default, Debug)]
struct Coverage {
    cases: u64,
    steps: u64,
    created: u64,
    renewed: u64,
    reacquired: u64,
    taken_over: u64,
    standby: u64,
    step_down: u64,
    holder_releases: u64,
    other_releases: u64,
    acquired_after_release: u64,
    acquired_at_exact_expiry: u64,
    pruned: u64,
}

struct Harness<'a> {
    lease_name: LeaseName,
    owners: Vec<Owner>,
    priorities: Vec<i64>,
    now: i64,
    storage: Storage,
    model: Model,
    /// The latest grant to each owner, forgotten when the owner releases.
    grants: BTreeMap<usize, Grant>,
    /// Which owner each token was ever given to.
    token_owner: BTreeMap<u64, usize>,
    /// The highest token seen so far, in any record or response.
    highest_token: u64,
    /// The token of a lease its holder released, until the next request.
    released_token: Option<u64>,
    coverage: &'a RefCell<Coverage>,
}

impl<'a> Harness<'a> {
    fn new(scenario: &Scenario, coverage: &'a RefCell<Coverage>) -> Result<Self, TestCaseError> {
        let owners = (0..scenario.priorities.len())
            .map(|i| Owner::new(owner_name(i)).map_err(|e| fail(format!("owner name: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Harness {
            lease_name: LeaseName::new(LEASE).map_err(|e| fail(format!("lease name: {e}")))?,
            owners,
            priorities: scenario.priorities.clone(),
            now: scenario.start,
            storage: Storage::default(),
            model: Model::default(),
            grants: BTreeMap::new(),
            token_owner: BTreeMap::new(),
            highest_token: 0,
            released_token: None,
            coverage,
        })
    }

    fn owner_index(&self, owner: &Owner) -> Result<usize, TestCaseError> {
        self.owners
            .iter()
            .position(|o| o == owner)
            .ok_or_else(|| fail(format!("unknown owner {owner:?} in storage")))
    }

    fn step(&mut self, step: &Step) -> TestResult {
        self.coverage.borrow_mut().steps += 1;
        match *step {
            Step::Request {
                owner,
                priority,
                ttl,
            } => self.request(owner, priority.unwrap_or(self.priorities[owner]), ttl)?,
            Step::Release { owner } => self.release(owner)?,
            Step::Advance { micros } => self.now += micros,
            Step::ToLeaseExpiry { offset } => {
                if let Some(lease) = &self.storage.record {
                    let target = lease.heartbeat_at.as_micros() + micros(lease.ttl) + offset;
                    self.now = self.now.max(target);
                }
            }
            Step::ToContenderExpiry { pick, offset } => {
                let stored = &self.storage.contenders;
                if !stored.is_empty()
                    && let Some(c) = stored.values().nth(pick.index(stored.len()))
                {
                    let target = c.last_seen.as_micros() + micros(c.ttl) + offset;
                    self.now = self.now.max(target);
                }
            }
        }
        self.check_common()
    }

    fn request(&mut self, who: usize, priority: i64, ttl: Duration) -> TestResult {
        let request = LeaseRequest::new(LEASE, self.owners[who].as_str(), priority, ttl)
            .validate()
            .map_err(|e| fail(format!("a valid request was refused: {e}")))?;
        let now = self.now;
        let before = self.storage.record.clone();
        let registered: Vec<Contender> = self.storage.contenders.values().cloned().collect();
        let outcome = decide_request(
            before.as_ref(),
            &registered,
            &request,
            Timestamp::from_micros(now),
        )
        .map_err(|e| fail(format!("decide_request failed: {e}")))?;
        prop_assert!(
            !outcome.pruned.contains(&self.owners[who]),
            "the requester itself was pruned"
        );
        self.storage.apply_request(&outcome)?;
        let expected = self.model.request(who, priority, micros(ttl), now);
        let response = &outcome.response;
        let record = self
            .storage
            .record
            .clone()
            .ok_or_else(|| fail("no record after a request"))?;
        let record_token = record.fencing_token.get();
        let record_expires = record.heartbeat_at.as_micros() + micros(record.ttl);
        let before_live = before
            .as_ref()
            .map(|l| now < l.heartbeat_at.as_micros() + micros(l.ttl));

        // The response is consistent with itself and with the storage.
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
            outcome.transition.holds_lease(),
            "status {:?} disagrees with transition {:?}",
            response.status,
            outcome.transition
        );

        // One live holder: whoever holds is the live record's owner; a standby is not.
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

        // Tokens.
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
            }
            (Some(prev), _) if prev.owner == self.owners[who] => {
                prop_assert_eq!(outcome.transition, Transition::Renewed, "not a renewal");
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
                // Standby: the holder's token, and the record untouched.
                prop_assert_eq!(response.status, LeaseStatus::Standby);
                prop_assert_eq!(
                    outcome.transition.record_write(),
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
            self.coverage.borrow_mut().acquired_after_release += 1;
        }
        if holds {
            prop_assert_eq!(record.priority, priority, "holder's priority not updated");
            prop_assert_eq!(micros(record.ttl), micros(ttl), "holder's ttl not updated");
            self.grant(who, record_token, record_expires)?;
        }

        // Step-down, judged on the stored registrations.
        let outranked = self.storage.contenders.values().any(|c| {
            c.owner != record.owner
                && now < c.last_seen.as_micros() + micros(c.ttl)
                && c.priority > record.priority
        });
        prop_assert_eq!(
            response.status == LeaseStatus::LeaderStepDownRequested,
            holds && outranked,
            "step-down must be asked exactly of a holder outranked by a live contender"
        );

        // Bounded registry: only the requester may be stale, and it is fresh.
        prop_assert!(self.storage.contenders.len() <= self.owners.len());
        for c in self.storage.contenders.values() {
            if c.owner == self.owners[who] {
                prop_assert_eq!(c.last_seen.as_micros(), now, "registration not refreshed");
                prop_assert_eq!(c.priority, priority);
                prop_assert_eq!(micros(c.ttl), micros(ttl));
            } else {
                prop_assert!(
                    now < c.last_seen.as_micros() + micros(c.ttl),
                    "a stale registration of {} survived a request",
                    c.owner
                );
            }
        }

        // The reference model agrees on everything.
        let kind = match outcome.transition {
            Transition::Created => Kind::Created,
            Transition::Renewed => Kind::Renewed,
            Transition::Reacquired => Kind::Reacquired,
            Transition::TakenOver => Kind::TakenOver,
            Transition::Standby => Kind::Standby,
        };
        prop_assert_eq!(kind, expected.kind, "transition differs from the model");
        prop_assert_eq!(
            response.status,
            expected.status,
            "status differs from the model"
        );
        prop_assert_eq!(record_token, expected.token, "token differs from the model");

        let mut cov = self.coverage.borrow_mut();
        match kind {
            Kind::Created => cov.created += 1,
            Kind::Renewed => cov.renewed += 1,
            Kind::Reacquired => cov.reacquired += 1,
            Kind::TakenOver => cov.taken_over += 1,
            Kind::Standby => cov.standby += 1,
        }
        if response.status == LeaseStatus::LeaderStepDownRequested {
            cov.step_down += 1;
        }
        if kind != Kind::Created
            && before_live == Some(false)
            && before
                .as_ref()
                .map(|l| l.heartbeat_at.as_micros() + micros(l.ttl))
                == Some(now)
        {
            cov.acquired_at_exact_expiry += 1;
        }
        cov.pruned += outcome.pruned.len() as u64;
        Ok(())
    }

    /// Records a grant of `token` to `who`, checking that no other owner still holds one.
    fn grant(&mut self, who: usize, token: u64, expires: i64) -> TestResult {
        let now = self.now;
        for (&other, g) in &self.grants {
            prop_assert!(
                other == who || g.expires <= now,
                "two live holders: owner {} got token {} at {} valid until {}, and owner {} \
                 gets token {} at {}{}",
                other,
                g.token,
                g.at,
                g.expires,
                who,
                token,
                now,
                if g.at == now {
                    " (the same instant)"
                } else {
                    ""
                }
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

    fn release(&mut self, who: usize) -> TestResult {
        let now = Timestamp::from_micros(self.now);
        let owner = self.owners[who].clone();
        let before = self.storage.record.clone();

        self.storage.release(&self.lease_name, &owner, now)?;
        let once = self.storage.clone();
        self.storage.release(&self.lease_name, &owner, now)?;
        prop_assert_eq!(
            &self.storage,
            &once,
            "releasing twice differs from releasing once"
        );

        self.model.release(who, self.now);
        self.grants.remove(&who);
        prop_assert!(
            !self.storage.contenders.contains_key(&owner),
            "the releaser is still registered"
        );

        match (&before, &self.storage.record) {
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
                self.coverage.borrow_mut().holder_releases += 1;
            }
            (prev, after) => {
                prop_assert_eq!(after, prev, "a release by a non-holder touched the record");
                self.coverage.borrow_mut().other_releases += 1;
            }
        }
        Ok(())
    }

    /// Checks that hold after every step: the storage equals the model, tokens never go back.
    fn check_common(&mut self) -> TestResult {
        let observed = match &self.storage.record {
            None => None,
            Some(l) => {
                prop_assert_eq!(&l.lease_name, &self.lease_name);
                prop_assert_eq!(l.ttl.subsec_nanos() % 1_000, 0, "ttl not truncated to µs");
                Some(ModelLease {
                    owner: self.owner_index(&l.owner)?,
                    priority: l.priority,
                    token: l.fencing_token.get(),
                    acquired_at: l.acquired_at.as_micros(),
                    heartbeat_at: l.heartbeat_at.as_micros(),
                    ttl: micros(l.ttl),
                    released_at: l.released_at.map(Timestamp::as_micros),
                })
            }
        };
        prop_assert_eq!(
            observed,
            self.model.lease,
            "stored record differs from the model"
        );

        let mut registered = BTreeMap::new();
        for (key, c) in &self.storage.contenders {
            prop_assert_eq!(key, &c.owner);
            prop_assert_eq!(&c.lease_name, &self.lease_name);
            prop_assert_eq!(c.ttl.subsec_nanos() % 1_000, 0, "ttl not truncated to µs");
            registered.insert(
                self.owner_index(&c.owner)?,
                ModelContender {
                    priority: c.priority,
                    last_seen: c.last_seen.as_micros(),
                    ttl: micros(c.ttl),
                },
            );
        }
        prop_assert_eq!(
            &registered,
            &self.model.contenders,
            "stored registrations differ from the model"
        );
        prop_assert!(
            registered.len() <= self.owners.len(),
            "more registrations than owners"
        );

        let token = observed.map_or(0, |l| l.token);
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

fn run_scenario(scenario: &Scenario, coverage: &RefCell<Coverage>) -> TestResult {
    coverage.borrow_mut().cases += 1;
    let mut harness = Harness::new(scenario, coverage)?;
    for step in &scenario.steps {
        harness.step(step)?;
    }
    Ok(())
}

#[test]
fn lease_state_machine_matches_the_model() {
    let config = config();
    let cases = config.cases;
    let coverage = RefCell::new(Coverage::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&scenario_strategy(), |scenario| {
        run_scenario(&scenario, &coverage)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let cov = coverage.into_inner();
    eprintln!("{cases} cases: {cov:?}");
    // The generator must reach every rule; otherwise the properties above prove little.
    if cases >= 100 {
        for (what, count) in [
            ("created", cov.created),
            ("renewed", cov.renewed),
            ("reacquired", cov.reacquired),
            ("taken over", cov.taken_over),
            ("standby", cov.standby),
            ("step-down", cov.step_down),
            ("holder releases", cov.holder_releases),
            ("other releases", cov.other_releases),
            ("acquired after release", cov.acquired_after_release),
            ("acquired at exact expiry", cov.acquired_at_exact_expiry),
            ("pruned", cov.pruned),
        ] {
            assert!(count > 0, "no {what} in {cases} cases: {cov:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation.
// ---------------------------------------------------------------------------------------------

/// The contract's control characters: Unicode general category Cc.
fn is_control(c: char) -> bool {
    c <= '\u{1f}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// Every reason the contract gives for refusing `text` (empty when it is valid).
fn name_faults(text: &str) -> Vec<Reason> {
    if text.is_empty() {
        return vec![Reason::Empty];
    }
    let mut faults = Vec::new();
    if text.len() > 255 {
        faults.push(Reason::TooLong {
            len: text.len(),
            max: 255,
        });
    }
    if let Some((at, _)) = text.char_indices().find(|&(_, c)| is_control(c)) {
        faults.push(Reason::ControlCharacter { at });
    }
    faults
}

fn ttl_fault(ttl: Duration) -> Option<Reason> {
    let one_ms = Duration::from_millis(1);
    let seven_days = Duration::from_secs(7 * 24 * 3600);
    if ttl < one_ms {
        Some(Reason::TooShort { min: one_ms })
    } else if ttl > seven_days {
        Some(Reason::TooLarge { max: seven_days })
    } else {
        None
    }
}

fn name_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        6 => prop::char::range('a', 'z'),
        2 => prop::sample::select(vec!['é', 'β', '🦀', '-', ' ', '\u{a0}', '\u{200b}']),
        1 => prop::sample::select(vec!['\0', '\t', '\n', '\u{1b}', '\u{7f}', '\u{85}', '\u{9f}']),
    ];
    prop_oneof![
        1 => Just(String::new()),
        3 => prop::collection::vec(piece.clone(), 1..=12).prop_map(|v| v.into_iter().collect()),
        // Around the 255-byte limit, with multi-byte characters straddling it.
        3 => (240usize..=260, prop::option::of(prop::sample::select(vec!['é', '🦀', '\0'])))
            .prop_map(|(len, extra)| {
                let mut s = "a".repeat(len);
                if let Some(c) = extra {
                    s.push(c);
                }
                s
            }),
        2 => any::<String>(),
        1 => prop::collection::vec(piece, 200..=300).prop_map(|v| v.into_iter().collect()),
    ]
}

fn any_ttl_strategy() -> impl Strategy<Value = Duration> {
    let ms = Duration::from_millis(1);
    let week = Duration::from_secs(7 * 24 * 3600);
    prop_oneof![
        Just(Duration::ZERO),
        Just(ms),
        Just(ms - Duration::from_nanos(1)),
        Just(ms + Duration::from_nanos(1)),
        Just(week),
        Just(week - Duration::from_nanos(1)),
        Just(week + Duration::from_nanos(1)),
        Just(Duration::MAX),
        (0u64..=2_000_000).prop_map(Duration::from_nanos),
        (0u64..=2 * 7 * 24 * 3600, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        any::<u64>().prop_map(Duration::from_nanos),
    ]
}

fn check_name_result<T: AsRef<str>>(
    field: Field,
    text: &str,
    result: Result<T, tenure_domain::ValidationError>,
) -> TestResult {
    let faults = name_faults(text);
    match result {
        Ok(name) => {
            prop_assert!(
                faults.is_empty(),
                "{:?} accepted as {}: {:?}",
                text,
                field,
                faults
            );
            prop_assert_eq!(name.as_ref(), text);
        }
        Err(e) => {
            prop_assert_eq!(e.field, field);
            prop_assert!(
                faults.contains(&e.reason),
                "{:?} refused as {} for {:?}, expected one of {:?}",
                text,
                field,
                e.reason,
                faults
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn inputs_are_validated_per_the_contract(
        lease_name in name_strategy(),
        owner in name_strategy(),
        priority in any::<i64>(),
        ttl in any_ttl_strategy(),
    ) {
        check_name_result(Field::LeaseName, &lease_name, LeaseName::new(lease_name.clone()))?;
        check_name_result(Field::Owner, &owner, Owner::new(owner.as_str()))?;

        let ttl_result = validate_ttl(ttl);
        match (ttl_fault(ttl), &ttl_result) {
            (None, Ok(kept)) => {
                prop_assert_eq!(kept.as_nanos(), ttl.as_nanos() / 1_000 * 1_000, "not truncated");
            }
            (Some(reason), Err(e)) => {
                prop_assert_eq!(e.field, Field::Ttl);
                prop_assert_eq!(&e.reason, &reason);
            }
            (expected, got) => {
                prop_assert!(false, "ttl {:?}: expected fault {:?}, got {:?}", ttl, expected, got);
            }
        }

        // A whole request: refused for its first bad field, in the order lease_name, owner, ttl.
        let request = LeaseRequest::new(lease_name.clone(), owner.clone(), priority, ttl);
        let first_fault = if !name_faults(&lease_name).is_empty() {
            Some(Field::LeaseName)
        } else if !name_faults(&owner).is_empty() {
            Some(Field::Owner)
        } else if ttl_fault(ttl).is_some() {
            Some(Field::Ttl)
        } else {
            None
        };
        match (request.validate(), first_fault) {
            (Ok(valid), None) => {
                prop_assert_eq!(valid.lease_name.as_str(), lease_name.as_str());
                prop_assert_eq!(valid.owner.as_str(), owner.as_str());
                prop_assert_eq!(valid.priority, priority);
                prop_assert_eq!(valid.ttl.as_nanos(), ttl.as_nanos() / 1_000 * 1_000);
            }
            (Err(e), Some(field)) => prop_assert_eq!(e.field, field),
            (got, expected) => {
                prop_assert!(false, "request validation: expected {:?}, got {:?}", expected, got);
            }
        }
    }
}
