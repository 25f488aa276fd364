//! Playing one case against the system under test and the reference, with the contract's
//! invariants asserted at every step.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tenure_ports::domain::{
    Contender, Lease, LeaseName, LeaseRequest, LeaseStatus, Owner, RecordWrite, Timestamp,
    Transition,
};
use tenure_ports::sort_contenders;

use super::case::{micros, owner_names};
use super::reference::Stored;
use super::{Case, DecisionSystem, Reference, Report, Step};

pub(super) fn fail(message: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(message.into())
}

/// How a case failed: at which step (`None` before the first), and why.
pub(super) struct Failure {
    pub(super) step: Option<usize>,
    pub(super) error: TestCaseError,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            TestCaseError::Fail(why) | TestCaseError::Reject(why) => write!(f, "{why}"),
        }
    }
}

/// Plays `case` on `lease_name` against `system` and a fresh reference.
pub(super) fn play_case<S: DecisionSystem + ?Sized>(
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
                self.reference.keeps_fresh_registrations() && !holds && fresh,
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
                self.reference.keeps_fresh_registrations()
                    && !holds
                    && c.priority == priority
                    && micros(c.ttl) == micros(ttl)
                    && age.saturating_mul(2) == micros(c.ttl),
            );
        }
        // Rule 7, lazily: a renewal that no registration of another owner could challenge (none,
        // live or lapsed, above the request's priority), by a system that spares them, leaves
        // them all in place; computed here and not by the domain.
        let spared = self
            .reference
            .spares_registrations_on_unchallenged_renewals()
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
