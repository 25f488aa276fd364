//! The lease state machine: every lease decision, as pure functions.
//!
//! A backend serializes the calls on one lease (a mutex, an advisory lock), reads the current
//! record and the lease's contenders, reads `now` from **its own** clock, calls
//! [`decide_request`] or [`decide_release`], and writes back what the outcome says. It decides
//! nothing itself.

use crate::lease::{Contender, FencingToken, Lease, LeaseResponse, LeaseStatus, ValidLeaseRequest};
use crate::sighting::Sighting;
use crate::time::Timestamp;
use crate::validation::{LeaseName, Owner};

/// How a request changed the lease record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transition {
    /// There was no record: it was created with token 1 (rule 2).
    Created,
    /// The caller held the live lease: heartbeat, ttl and priority were updated (rule 3).
    Renewed,
    /// The caller was the last holder of an expired or released lease and acquired it again,
    /// with a new token (rule 3, second half).
    Reacquired,
    /// Another owner's lease had expired: the caller took it over with a new token (rule 5).
    TakenOver,
    /// Another owner holds the live lease (rule 4), or its lease expired but the caller has not
    /// yet seen that tenure unchanged for a ttl on its own clock (rule 5, see [`Sighting`]):
    /// the record was not touched.
    Standby,
}

impl Transition {
    /// Whether the caller now holds the lease.
    pub fn holds_lease(self) -> bool {
        !matches!(self, Transition::Standby)
    }

    /// Whether this began a new tenure with a new token.
    pub fn is_acquisition(self) -> bool {
        matches!(
            self,
            Transition::Created | Transition::Reacquired | Transition::TakenOver
        )
    }

    /// What the backend must write to the lease record.
    pub fn record_write(self) -> RecordWrite {
        match self {
            Transition::Created => RecordWrite::Insert,
            Transition::Renewed | Transition::Reacquired | Transition::TakenOver => {
                RecordWrite::Update
            }
            Transition::Standby => RecordWrite::None,
        }
    }
}

/// What a backend must do to the stored lease record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RecordWrite {
    /// Nothing.
    None,
    /// Insert the new record (there was none).
    Insert,
    /// Replace the existing record with the new one.
    Update,
}

/// The decision on one [`ValidLeaseRequest`].
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct RequestOutcome {
    /// What happened to the record.
    pub transition: Transition,
    /// The answer for the caller; `response.lease` is the record after the call.
    pub response: LeaseResponse,
    /// The caller's registration after the call: to insert or replace when `refreshed`, the
    /// stored one, unchanged, when not.
    pub contender: Contender,
    /// Whether the caller's registration is written (rule 1): always, from
    /// [`decide_request`] and [`decide_request_sighted`]; not for a standby whose registration
    /// is fresh, after [`RequestOutcome::keeping_fresh_registration`].
    pub refreshed: bool,
    /// Contenders of this lease that are no longer live, to delete (rule 7); none when the
    /// registration is not `refreshed` (nothing is written).
    pub pruned: Vec<Owner>,
}

impl RequestOutcome {
    /// The record after the call (the same as `response.lease`).
    pub fn record(&self) -> &Lease {
        &self.response.lease
    }

    /// The same decision for a backend that keeps a standby's fresh registration as it is
    /// (rule 1, lazily): when the caller stands by and its stored registration (among
    /// `contenders`, what was passed to the decision) has the request's priority and ttl and
    /// [is fresh](Contender::is_fresh_at) at `now`, nothing is written: `contender` is the
    /// stored registration, `refreshed` is false and nothing is pruned (the next request that
    /// writes prunes). The answer and the record are the same either way.
    ///
    /// A database server pays a write and a flush of its log for every registration it
    /// refreshes; with this rule a standby that polls often writes about once per half ttl.
    /// What "live" means does not change: a registration is live while
    /// `now < last_seen + ttl`. A contender whose requests come less than a ttl apart stays live
    /// throughout, as with a refresh at every request (a registration is kept only while
    /// younger than half its ttl, so the next request after the last refresh comes before
    /// the registration lapses); one that stops requesting lapses between half a ttl and a
    /// ttl after its last request, instead of exactly a ttl.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tenure_domain::{decide_request, LeaseRequest, Timestamp};
    /// let ttl = Duration::from_millis(100);
    /// let a = LeaseRequest::new("jobs", "a", 0, ttl).validate().unwrap();
    /// let b = LeaseRequest::new("jobs", "b", 0, ttl).validate().unwrap();
    /// let held = decide_request(None, &[], &a, Timestamp::from_micros(0)).unwrap();
    /// let first = decide_request(Some(held.record()), &[], &b, Timestamp::from_micros(10_000)).unwrap();
    /// let registered = [first.contender.clone()];
    /// // 49.999 ms later the registration is still fresh: nothing to write.
    /// let at = Timestamp::from_micros(59_999);
    /// let kept = decide_request(Some(held.record()), &registered, &b, at)
    ///     .unwrap()
    ///     .keeping_fresh_registration(&registered, at);
    /// assert!(!kept.refreshed);
    /// assert_eq!(kept.contender, first.contender);
    /// // At half its ttl it is refreshed.
    /// let at = Timestamp::from_micros(60_000);
    /// let again = decide_request(Some(held.record()), &registered, &b, at)
    ///     .unwrap()
    ///     .keeping_fresh_registration(&registered, at);
    /// assert!(again.refreshed);
    /// assert_eq!(again.contender.last_seen, at);
    /// ```
    #[must_use]
    pub fn keeping_fresh_registration(mut self, contenders: &[Contender], now: Timestamp) -> Self {
        if self.transition != Transition::Standby {
            return self;
        }
        let requested = &self.contender;
        let stored = contenders.iter().find(|c| {
            c.owner == requested.owner
                && c.priority == requested.priority
                && c.ttl == requested.ttl
                && c.is_fresh_at(now)
        });
        if let Some(stored) = stored {
            self.contender = stored.clone();
            self.refreshed = false;
            self.pruned.clear();
        }
        self
    }

    /// The same decision for a backend that leaves the other registrations alone on a renewal
    /// that none of them can challenge (rule 7, lazily): when the caller renews its live lease
    /// and no stored registration of another owner (among `contenders`, what was passed to the
    /// decision), live or lapsed, has a priority above the request's, nothing is pruned. The
    /// answer is the same either way: such a renewal is [`LeaseStatus::Leader`], whatever the
    /// registrations' liveness.
    ///
    /// A database server can then answer the common renewal (a holder among standbys of its
    /// own priority) from the lease record alone, with an upper bound of the registrations'
    /// priorities kept beside it, instead of reading every registration at every renewal. The
    /// registry stays bounded: a lapsed registration is pruned by the next request that reads
    /// the registrations (any standby's refresh, any acquisition, a renewal that a
    /// registration could challenge), and every new contender's first request is one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tenure_domain::{decide_request, LeaseRequest, LeaseStatus, Timestamp};
    /// let a = LeaseRequest::new("jobs", "a", 5, Duration::from_secs(30)).validate().unwrap();
    /// let b = LeaseRequest::new("jobs", "b", 5, Duration::from_secs(1)).validate().unwrap();
    /// let held = decide_request(None, &[], &a, Timestamp::from_micros(0)).unwrap();
    /// let standby = decide_request(Some(held.record()), &[], &b, Timestamp::from_micros(0)).unwrap();
    /// let registered = [standby.contender];
    /// // Two seconds later b's registration has lapsed; a's renewal leaves it alone.
    /// let at = Timestamp::from_micros(2_000_000);
    /// let renewal = decide_request(Some(held.record()), &registered, &a, at).unwrap();
    /// assert_eq!(renewal.pruned.len(), 1);
    /// let spared = renewal.sparing_registrations_on_unchallenged_renewal(&registered);
    /// assert!(spared.pruned.is_empty());
    /// assert_eq!(spared.response.status, LeaseStatus::Leader);
    /// ```
    #[must_use]
    pub fn sparing_registrations_on_unchallenged_renewal(
        mut self,
        contenders: &[Contender],
    ) -> Self {
        if self.transition != Transition::Renewed {
            return self;
        }
        let holder = &self.response.lease;
        let challenged = contenders
            .iter()
            .any(|c| c.owner != holder.owner && c.priority > holder.priority);
        if !challenged {
            self.pruned.clear();
        }
        self
    }
}

/// The decision on one release.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct ReleaseOutcome {
    /// The updated record, when the caller held the lease and its heartbeat had to be
    /// backdated; `None` when the record must not be touched.
    pub updated: Option<Lease>,
    /// The registration to withdraw (always the caller's own, whether or not it held the lease).
    pub withdrawn: Owner,
}

/// A decision that cannot be made.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The lease's token is [`FencingToken::MAX`]; no new tenure can be given a larger one.
    #[error("fencing tokens of lease {0:?} are exhausted")]
    TokensExhausted(LeaseName),
    /// The backend passed a record or contenders of another lease.
    #[error("the backend passed state of lease {found:?} to a decision on {expected:?}")]
    WrongLease {
        /// The lease the request is for.
        expected: LeaseName,
        /// The lease of the state the backend passed.
        found: LeaseName,
    },
}

/// Decides a lease request (rules 1 to 7 of the contract).
///
/// * `current`: the lease's record, if there is one;
/// * `contenders`: every stored registration for this lease, live or not (the caller's own
///   included, if any);
/// * `now`: the storage's clock, read while the lease is serialized.
///
/// ```
/// use std::time::Duration;
/// use tenure_domain::{decide_request, LeaseRequest, LeaseStatus, Timestamp, Transition};
/// let request = LeaseRequest::new("jobs", "a", 0, Duration::from_secs(10)).validate().unwrap();
/// let now = Timestamp::from_micros(1_000_000);
/// let outcome = decide_request(None, &[], &request, now).unwrap();
/// assert_eq!(outcome.transition, Transition::Created);
/// assert_eq!(outcome.response.status, LeaseStatus::Leader);
/// assert_eq!(outcome.response.fencing_token.get(), 1);
/// ```
pub fn decide_request(
    current: Option<&Lease>,
    contenders: &[Contender],
    request: &ValidLeaseRequest,
    now: Timestamp,
) -> Result<RequestOutcome, DecisionError> {
    let sighting = current.map(|lease| Sighting::on_storage_clock(lease, now));
    decide_request_sighted(current, contenders, request, now, sighting.as_ref())
}

/// Decides a lease request for a backend whose clock is not the caller's (a database
/// server's): as [`decide_request`], except that a takeover of another owner's lease that
/// expired without a release also needs `sighting`, the caller's own sighting of that tenure
/// unchanged for at least its ttl ([`Sighting::covers`]). Without one, the caller stands by
/// and the record is not touched; a released lease is taken over at once.
///
/// ```
/// use std::time::Duration;
/// use tenure_domain::{decide_request_sighted, LeaseRequest, Sighting, Timestamp, Transition};
/// let ttl = Duration::from_secs(10);
/// let a = LeaseRequest::new("jobs", "a", 0, ttl).validate().unwrap();
/// let b = LeaseRequest::new("jobs", "b", 0, ttl).validate().unwrap();
/// let held = decide_request_sighted(None, &[], &a, Timestamp::from_micros(0), None).unwrap();
/// let lease = held.record();
/// // The server's clock jumps 60 s: the lease looks expired, but b has not seen it end.
/// let later = Timestamp::from_micros(60_000_000);
/// let early = decide_request_sighted(Some(lease), &[], &b, later, None).unwrap();
/// assert_eq!(early.transition, Transition::Standby);
/// // b has seen that very heartbeat for a whole ttl on its own clock: it takes over.
/// let seen = Sighting { fencing_token: lease.fencing_token, heartbeat_at: lease.heartbeat_at, unchanged_for: ttl };
/// let over = decide_request_sighted(Some(lease), &[], &b, later, Some(&seen)).unwrap();
/// assert_eq!(over.transition, Transition::TakenOver);
/// ```
pub fn decide_request_sighted(
    current: Option<&Lease>,
    contenders: &[Contender],
    request: &ValidLeaseRequest,
    now: Timestamp,
    sighting: Option<&Sighting>,
) -> Result<RequestOutcome, DecisionError> {
    check_lease(&request.lease_name, current.map(|l| &l.lease_name))?;
    for c in contenders {
        check_lease(&request.lease_name, Some(&c.lease_name))?;
    }

    // Rule 1: register the contender.
    let contender = Contender {
        lease_name: request.lease_name.clone(),
        owner: request.owner.clone(),
        priority: request.priority,
        last_seen: now,
        ttl: request.ttl,
    };

    let fresh_tenure = |token: FencingToken| Lease {
        lease_name: request.lease_name.clone(),
        owner: request.owner.clone(),
        priority: request.priority,
        fencing_token: token,
        acquired_at: now,
        heartbeat_at: now,
        ttl: request.ttl,
        released_at: None,
    };
    let next_token = |lease: &Lease| {
        lease
            .fencing_token
            .next()
            .ok_or_else(|| DecisionError::TokensExhausted(lease.lease_name.clone()))
    };

    let (transition, record) = match current {
        // Rule 2.
        None => (Transition::Created, fresh_tenure(FencingToken::FIRST)),
        Some(lease) => match (lease.owner == request.owner, lease.is_live_at(now)) {
            // Rule 3, renewal.
            (true, true) => (
                Transition::Renewed,
                Lease {
                    heartbeat_at: now,
                    ttl: request.ttl,
                    priority: request.priority,
                    ..lease.clone()
                },
            ),
            // Rule 3, the same owner after expiry or release: a new tenure.
            (true, false) => (Transition::Reacquired, fresh_tenure(next_token(lease)?)),
            // Rule 4.
            (false, true) => (Transition::Standby, lease.clone()),
            // Rule 5: released, or seen by the caller to have ended.
            (false, false) if lease.is_released() || sighting.is_some_and(|s| s.covers(lease)) => {
                (Transition::TakenOver, fresh_tenure(next_token(lease)?))
            }
            // Rule 5, not yet: expired on the storage's clock only.
            (false, false) => (Transition::Standby, lease.clone()),
        },
    };

    // Rule 6: only a holder is asked to step down, and only by a live, strictly higher
    // priority contender other than itself. The caller's own registration is the new one.
    let status = if transition.holds_lease() {
        let outranked = contenders
            .iter()
            .filter(|c| c.owner != record.owner)
            .any(|c| c.is_live_at(now) && c.priority > record.priority);
        if outranked {
            LeaseStatus::LeaderStepDownRequested
        } else {
            LeaseStatus::Leader
        }
    } else {
        LeaseStatus::Standby
    };

    // Rule 7: whoever is no longer live is pruned (the caller is registered anew).
    let pruned = contenders
        .iter()
        .filter(|c| c.owner != request.owner && !c.is_live_at(now))
        .map(|c| c.owner.clone())
        .collect();

    Ok(RequestOutcome {
        transition,
        response: LeaseResponse {
            status,
            fencing_token: record.fencing_token,
            lease: record,
        },
        contender,
        refreshed: true,
        pruned,
    })
}

/// Decides a release of `lease_name` by `owner` at storage time `now`.
///
/// If `owner` holds the record, its heartbeat is backdated so that the lease is expired at
/// `now` (`heartbeat_at = min(heartbeat_at, now - ttl)`) and `released_at = now`; owner and
/// token stay. A lease already expired that far back is not touched: it ended by expiry. A record held
/// by another owner is never touched. The caller's registration is withdrawn either way.
pub fn decide_release(
    current: Option<&Lease>,
    lease_name: &LeaseName,
    owner: &Owner,
    now: Timestamp,
) -> Result<ReleaseOutcome, DecisionError> {
    check_lease(lease_name, current.map(|l| &l.lease_name))?;
    let updated = current.and_then(|lease| {
        let backdated = now.saturating_sub(lease.ttl);
        (lease.owner == *owner && backdated < lease.heartbeat_at).then(|| Lease {
            heartbeat_at: backdated,
            released_at: Some(now),
            ..lease.clone()
        })
    });
    Ok(ReleaseOutcome {
        updated,
        withdrawn: owner.clone(),
    })
}

fn check_lease(expected: &LeaseName, found: Option<&LeaseName>) -> Result<(), DecisionError> {
    match found {
        Some(found) if found != expected => Err(DecisionError::WrongLease {
            expected: expected.clone(),
            found: found.clone(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseRequest;
    use std::time::Duration;

    fn req(owner: &str, priority: i64, ttl_ms: u64) -> ValidLeaseRequest {
        LeaseRequest::new("l", owner, priority, Duration::from_millis(ttl_ms))
            .validate()
            .unwrap()
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_micros(ms * 1000)
    }

    fn seen(lease: &Lease, unchanged_for: Duration) -> Sighting {
        Sighting {
            fencing_token: lease.fencing_token,
            heartbeat_at: lease.heartbeat_at,
            unchanged_for,
        }
    }

    #[test]
    fn an_expired_lease_is_taken_over_only_with_a_sighting_of_a_whole_ttl() {
        let ttl = Duration::from_millis(100);
        let held = decide_request_sighted(None, &[], &req("a", 0, 100), at(0), None).unwrap();
        let lease = held.record().clone();
        // Expired on the storage's clock (a step forward, say), at and far past the expiry.
        for now in [at(100), at(60_000)] {
            let decide = |sighting: Option<&Sighting>| {
                decide_request_sighted(Some(&lease), &[], &req("b", 0, 100), now, sighting).unwrap()
            };
            let refused = [
                None,
                Some(seen(&lease, ttl - Duration::from_micros(1))),
                Some(Sighting {
                    fencing_token: FencingToken::FIRST.next().unwrap(),
                    ..seen(&lease, ttl)
                }),
                Some(Sighting {
                    heartbeat_at: at(-1),
                    ..seen(&lease, ttl)
                }),
            ];
            for sighting in refused {
                let outcome = decide(sighting.as_ref());
                assert_eq!(outcome.transition, Transition::Standby, "{sighting:?}");
                assert_eq!(outcome.record(), &lease, "the record is not touched");
                assert_eq!(outcome.response.status, LeaseStatus::Standby);
                assert_eq!(outcome.response.fencing_token, lease.fencing_token);
            }
            for unchanged_for in [ttl, ttl * 600] {
                let outcome = decide(Some(&seen(&lease, unchanged_for)));
                assert_eq!(outcome.transition, Transition::TakenOver);
                assert_eq!(outcome.response.fencing_token.get(), 2);
            }
        }
        // Not expired on the storage's clock: a sighting alone takes nothing.
        let live = decide_request_sighted(
            Some(&lease),
            &[],
            &req("b", 0, 100),
            at(99),
            Some(&seen(&lease, ttl * 10)),
        )
        .unwrap();
        assert_eq!(live.transition, Transition::Standby);
    }

    #[test]
    fn a_released_lease_and_the_same_owner_need_no_sighting() {
        let held = decide_request_sighted(None, &[], &req("a", 0, 100), at(0), None).unwrap();
        let released = decide_release(
            Some(held.record()),
            &held.record().lease_name,
            &held.record().owner,
            at(10),
        )
        .unwrap()
        .updated
        .unwrap();
        let over =
            decide_request_sighted(Some(&released), &[], &req("b", 0, 100), at(10), None).unwrap();
        assert_eq!(over.transition, Transition::TakenOver);
        let back =
            decide_request_sighted(Some(held.record()), &[], &req("a", 0, 100), at(500), None)
                .unwrap();
        assert_eq!(back.transition, Transition::Reacquired);
    }

    #[test]
    fn the_embedded_rule_is_the_sighted_rule_with_the_records_own_heartbeat() {
        let held = decide_request(None, &[], &req("a", 0, 100), at(0)).unwrap();
        for now in [at(50), at(99), at(100), at(101), at(10_000)] {
            let implied = Sighting::on_storage_clock(held.record(), now);
            assert_eq!(
                decide_request(Some(held.record()), &[], &req("b", 0, 100), now).unwrap(),
                decide_request_sighted(
                    Some(held.record()),
                    &[],
                    &req("b", 0, 100),
                    now,
                    Some(&implied)
                )
                .unwrap()
            );
        }
    }

    #[test]
    fn walk_through_the_rules() {
        let a = req("a", 0, 100);
        let b = req("b", 5, 100);

        let first = decide_request(None, &[], &a, at(0)).unwrap();
        assert_eq!(first.transition, Transition::Created);
        assert_eq!(first.response.fencing_token, FencingToken::FIRST);
        assert_eq!(first.transition.record_write(), RecordWrite::Insert);
        let mut contenders = vec![first.contender.clone()];
        let lease = first.response.lease;

        // b stands by with a's token; a is now asked to step down.
        let standby = decide_request(Some(&lease), &contenders, &b, at(10)).unwrap();
        assert_eq!(standby.response.status, LeaseStatus::Standby);
        assert_eq!(standby.response.fencing_token.get(), 1);
        assert_eq!(standby.response.lease, lease);
        contenders.push(standby.contender);

        let renewed = decide_request(Some(&lease), &contenders, &a, at(50)).unwrap();
        assert_eq!(renewed.transition, Transition::Renewed);
        assert_eq!(
            renewed.response.status,
            LeaseStatus::LeaderStepDownRequested
        );
        assert_eq!(renewed.response.lease.heartbeat_at, at(50));
        assert_eq!(renewed.response.lease.acquired_at, at(0));
        let lease = renewed.response.lease;

        // b's registration lapses at 110: a is a plain leader again and b is pruned.
        contenders[0] = renewed.contender;
        let alone = decide_request(Some(&lease), &contenders, &a, at(120)).unwrap();
        assert_eq!(alone.response.status, LeaseStatus::Leader);
        assert_eq!(alone.pruned, vec![Owner::new("b").unwrap()]);

        // a releases; it comes back with a new token.
        let released = decide_release(
            Some(&alone.response.lease),
            &alone.response.lease.lease_name,
            &Owner::new("a").unwrap(),
            at(130),
        )
        .unwrap();
        let lease = released.updated.unwrap();
        assert!(lease.is_expired_at(at(130)));
        assert_eq!(lease.released_at, Some(at(130)));
        assert!(lease.is_released());
        assert_eq!(lease.fencing_token.get(), 1);
        let back = decide_request(Some(&lease), &[], &a, at(130)).unwrap();
        assert_eq!(back.transition, Transition::Reacquired);
        assert_eq!(back.response.fencing_token.get(), 2);
        assert_eq!(back.response.lease.released_at, None, "a new tenure");
        assert!(!back.response.lease.is_released());

        // b takes over after expiry.
        let over = decide_request(Some(&back.response.lease), &[], &b, at(230)).unwrap();
        assert_eq!(over.transition, Transition::TakenOver);
        assert_eq!(over.response.fencing_token.get(), 3);
        assert_eq!(over.response.lease.owner, "b");
    }

    /// `b`'s request at `now` against `a`'s lease, with `registered` stored, kept lazily.
    fn lazily(
        lease: &Lease,
        registered: &[Contender],
        b: &ValidLeaseRequest,
        now: Timestamp,
    ) -> RequestOutcome {
        decide_request(Some(lease), registered, b, now)
            .unwrap()
            .keeping_fresh_registration(registered, now)
    }

    #[test]
    fn a_fresh_standby_registration_is_kept_and_nothing_else_changes() {
        let a = req("a", 0, 1_000);
        let lease = decide_request(None, &[], &a, at(0)).unwrap().response.lease;
        let b = req("b", 1, 101);
        let first = decide_request(Some(&lease), &[], &b, at(0)).unwrap();
        let stale = Contender {
            owner: Owner::new("c").unwrap(),
            last_seen: at(-200),
            ..first.contender.clone()
        };
        let registered = [first.contender.clone(), stale];
        // 2 × 50.499 ms < 101 ms: kept, and the stale registration is left for a write.
        let kept = lazily(&lease, &registered, &b, Timestamp::from_micros(50_499));
        assert!(!kept.refreshed);
        assert_eq!(kept.contender, first.contender);
        assert!(kept.pruned.is_empty());
        let eager = decide_request(
            Some(&lease),
            &registered,
            &b,
            Timestamp::from_micros(50_499),
        )
        .unwrap();
        assert_eq!(kept.response, eager.response, "the same answer");
        assert_eq!(eager.pruned, vec![Owner::new("c").unwrap()]);
        // Half its ttl and more: refreshed, and the stale one pruned.
        for micros in [50_500, 50_501, 100_000] {
            let now = Timestamp::from_micros(micros);
            let refreshed = lazily(&lease, &registered, &b, now);
            assert!(refreshed.refreshed, "{micros}");
            assert_eq!(refreshed.contender.last_seen, now);
            assert_eq!(refreshed.pruned, vec![Owner::new("c").unwrap()]);
        }
        // Another priority, another ttl, a registration from the future (the clock stepped
        // back): refreshed at once.
        for other in [req("b", 2, 101), req("b", 1, 102)] {
            assert!(lazily(&lease, &registered, &other, at(1)).refreshed);
        }
        let ahead = [Contender {
            last_seen: at(5),
            ..first.contender.clone()
        }];
        assert!(lazily(&lease, &ahead, &b, at(4)).refreshed);
        // A holder's registration is always written.
        let mine = [decide_request(Some(&lease), &[], &a, at(1))
            .unwrap()
            .contender];
        let renewed = lazily(&lease, &mine, &a, at(2));
        assert_eq!(renewed.transition, Transition::Renewed);
        assert!(renewed.refreshed);
    }

    #[test]
    fn a_contender_requesting_within_its_ttl_stays_live_when_kept_lazily() {
        let a = req("a", 0, 1_000_000);
        let lease = decide_request(None, &[], &a, at(0)).unwrap().response.lease;
        let ttl_us: i64 = 9_001;
        let b = req("b", 0, 9);
        let b = ValidLeaseRequest {
            ttl: Duration::from_micros(ttl_us as u64),
            ..b
        };
        for interval in [1, 2, 7, 3_000, 4_500, 4_501, 6_000, 9_000] {
            let mut registered: Vec<Contender> = Vec::new();
            let mut writes = 0;
            for k in 0..40 {
                let now = Timestamp::from_micros(k * interval);
                if let Some(c) = registered.first() {
                    assert!(
                        c.is_live_at(now),
                        "interval {interval}: lapsed at request {k}"
                    );
                }
                let outcome = lazily(&lease, &registered, &b, now);
                writes += usize::from(outcome.refreshed);
                registered = vec![outcome.contender];
            }
            assert!(writes >= 1);
            if interval < ttl_us / 2 {
                assert!(writes < 40, "interval {interval}: written at every request");
            }
        }
    }

    #[test]
    fn an_unchallenged_renewal_spares_the_registrations_and_a_challenged_one_prunes() {
        let a = req("a", 5, 1_000);
        let lease = decide_request(None, &[], &a, at(0)).unwrap().response.lease;
        let lapsed = |owner: &str, priority: i64| {
            let request = req(owner, priority, 10);
            decide_request(Some(&lease), &[], &request, at(0))
                .unwrap()
                .contender
        };
        let renew = |registered: &[Contender], request: &ValidLeaseRequest| {
            decide_request(Some(&lease), registered, request, at(100)).unwrap()
        };
        let spare = |registered: &[Contender], request: &ValidLeaseRequest| {
            renew(registered, request).sparing_registrations_on_unchallenged_renewal(registered)
        };
        // Equal and lower priorities, lapsed: left alone, and the answer does not change.
        let low = [lapsed("b", 5), lapsed("c", -1)];
        let eager = renew(&low, &a);
        assert_eq!(eager.pruned.len(), 2);
        let spared = spare(&low, &a);
        assert!(spared.pruned.is_empty());
        assert_eq!(spared.response, eager.response);
        assert_eq!(spared.response.status, LeaseStatus::Leader);
        // A lapsed registration above the request's priority (the holder lowered its own, or
        // an outranking standby went away): it could challenge, so everything is pruned.
        let lowered = req("a", 4, 1_000);
        assert_eq!(spare(&low, &lowered).pruned.len(), 2);
        let high = [lapsed("b", 5), lapsed("d", 6)];
        assert_eq!(spare(&high, &a).pruned.len(), 2);
        // Only renewals: an acquisition prunes as always.
        let expired = decide_request(Some(&lease), &low, &a, at(2_000))
            .unwrap()
            .sparing_registrations_on_unchallenged_renewal(&low);
        assert_eq!(expired.transition, Transition::Reacquired);
        assert_eq!(expired.pruned.len(), 2);
    }

    #[test]
    fn release_by_another_owner_touches_nothing() {
        let a = req("a", 0, 100);
        let lease = decide_request(None, &[], &a, at(0)).unwrap().response.lease;
        let out = decide_release(
            Some(&lease),
            &lease.lease_name,
            &Owner::new("b").unwrap(),
            at(1),
        )
        .unwrap();
        assert_eq!(out.updated, None);
        assert_eq!(out.withdrawn, "b");
        // Releasing an already expired lease changes nothing either.
        let out = decide_release(
            Some(&lease),
            &lease.lease_name,
            &Owner::new("a").unwrap(),
            at(500),
        )
        .unwrap();
        assert_eq!(out.updated, None);
    }

    #[test]
    fn exhausted_tokens_are_an_error_not_a_wrap() {
        let a = req("a", 0, 100);
        let mut lease = decide_request(None, &[], &a, at(0)).unwrap().response.lease;
        lease.fencing_token = FencingToken::MAX;
        let err = decide_request(Some(&lease), &[], &a, at(1000)).unwrap_err();
        assert!(matches!(err, DecisionError::TokensExhausted(_)));
        // A renewal needs no new token.
        assert!(decide_request(Some(&lease), &[], &a, at(50)).is_ok());
    }

    #[test]
    fn state_of_another_lease_is_refused() {
        let a = req("a", 0, 100);
        let other = LeaseRequest::new("other", "a", 0, Duration::from_millis(100))
            .validate()
            .unwrap();
        let lease = decide_request(None, &[], &other, at(0))
            .unwrap()
            .response
            .lease;
        assert!(matches!(
            decide_request(Some(&lease), &[], &a, at(1)),
            Err(DecisionError::WrongLease { .. })
        ));
    }
}
