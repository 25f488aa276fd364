//! A history checker for lease calls: record what every caller saw, then check that the
//! contract's safety properties held over the whole run.
//!
//! Record each lease call with a [`History`] (invocation and completion instants on the
//! monotonic clock, and the answer), the moments each elector considered itself leader, and
//! the writes a fencing guard accepted or refused; then [`History::check`] returns every
//! [`Violation`] it finds:
//!
//! * no fencing token is ever given to two owners;
//! * tokens never go backwards in real time: a call that completed before another began never
//!   shows a larger token than that later call;
//! * holder continuity: between two responses that gave one owner the lease with the same
//!   token, no other owner was given the lease;
//! * no two electors considered themselves leader at overlapping moments;
//! * writes stamped with a token were never accepted out of order;
//! * a fenced bookmark never moves backwards: of two accepted writes of one reader's
//!   bookmark, the one whose call began after the other's completed (real time, the callers'
//!   monotonic clock, never the storage's clock, which may step) never goes to a lower token or
//!   an earlier position.
//!
//! Instants are [`tokio::time::Instant`], so a history recorded in paused tokio time checks
//! the same way as one recorded in real time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use tenure_ports::{
    EventPosition, EventStorage, EventStorageError, FencingToken, LeaseRequest, LeaseResponse,
    LeaseStatus, Timestamp,
};
use tokio::time::Instant;

/// One lease call as a caller saw it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The lease.
    pub lease_name: String,
    /// The caller.
    pub owner: String,
    /// When the call was sent.
    pub invoked: Instant,
    /// When its answer arrived.
    pub completed: Instant,
    /// The answer, or `None` when the call failed (its outcome is unknown).
    pub response: Option<LeaseResponse>,
}

/// A span of time during which an elector considered itself the leader.
#[derive(Clone, Debug)]
pub struct Tenure {
    /// The lease.
    pub lease_name: String,
    /// The elector.
    pub owner: String,
    /// Its token.
    pub token: FencingToken,
    /// When it began to act as leader.
    pub from: Instant,
    /// When it stopped (demoted itself, released, or learned it had lost).
    pub until: Instant,
}

/// A write stamped with a token and offered to a fencing guard.
#[derive(Clone, Debug)]
pub struct FencedWrite {
    /// The lease whose token stamped it.
    pub lease_name: String,
    /// The writer.
    pub owner: String,
    /// The token it carried.
    pub token: FencingToken,
    /// Whether the guard accepted it.
    pub accepted: bool,
}

/// A fenced bookmark write, as the storage answered it.
#[derive(Clone, Debug)]
pub struct BookmarkWrite {
    /// The reader whose bookmark was written.
    pub reader: String,
    /// The token the write was fenced by.
    pub token: FencingToken,
    /// The position it was to move the bookmark to.
    pub position: EventPosition,
    /// When the storage placed it (on the storage's clock, for the record only), or `None` if
    /// it refused it.
    pub placed_at: Option<Timestamp>,
    /// When the call was sent, on the caller's monotonic clock.
    pub invoked: Instant,
    /// When its answer arrived, on the caller's monotonic clock.
    pub completed: Instant,
}

/// A safety property that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// One token was given to two owners.
    TokenSharedByOwners {
        /// The lease.
        lease_name: String,
        /// The token.
        token: FencingToken,
        /// The owners that were given it.
        owners: (String, String),
    },
    /// A call saw a smaller token than one that completed before it began.
    TokenWentBackwards {
        /// The lease.
        lease_name: String,
        /// The earlier call's token.
        earlier: FencingToken,
        /// The later call's token.
        later: FencingToken,
        /// The later call's owner.
        owner: String,
    },
    /// Another owner was given the lease between two responses of one tenure.
    TenureInterrupted {
        /// The lease.
        lease_name: String,
        /// The tenure's owner and token.
        holder: (String, FencingToken),
        /// The owner and token given the lease in between.
        intruder: (String, FencingToken),
    },
    /// Two electors considered themselves leader at once.
    OverlappingLeaders {
        /// The lease.
        lease_name: String,
        /// The two electors and their tokens.
        leaders: ((String, FencingToken), (String, FencingToken)),
    },
    /// A fencing guard accepted a write with a token older than one it had accepted before.
    WriteAcceptedOutOfOrder {
        /// The lease.
        lease_name: String,
        /// The highest token accepted before.
        highest: FencingToken,
        /// The older token accepted after it.
        stale: FencingToken,
    },
    /// A reader's bookmark was moved to a lower token or an earlier position than an accepted
    /// write that had completed before this one was sent.
    BookmarkMovedBackwards {
        /// The reader.
        reader: String,
        /// The token and position of the earlier write.
        from: (FencingToken, EventPosition),
        /// The token and position of the later write.
        to: (FencingToken, EventPosition),
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::TokenSharedByOwners {
                lease_name,
                token,
                owners,
            } => write!(
                f,
                "{lease_name}: token {token} was given to {} and to {}",
                owners.0, owners.1
            ),
            Violation::TokenWentBackwards {
                lease_name,
                earlier,
                later,
                owner,
            } => write!(
                f,
                "{lease_name}: {owner} saw token {later} after a call that had completed with \
                 token {earlier}"
            ),
            Violation::TenureInterrupted {
                lease_name,
                holder,
                intruder,
            } => write!(
                f,
                "{lease_name}: {} was given the lease (token {}) inside {}'s tenure {}",
                intruder.0, intruder.1, holder.0, holder.1
            ),
            Violation::OverlappingLeaders {
                lease_name,
                leaders,
            } => write!(
                f,
                "{lease_name}: {} (token {}) and {} (token {}) acted as leader at once",
                leaders.0.0, leaders.0.1, leaders.1.0, leaders.1.1
            ),
            Violation::WriteAcceptedOutOfOrder {
                lease_name,
                highest,
                stale,
            } => write!(
                f,
                "{lease_name}: a write with token {stale} was accepted after token {highest}"
            ),
            Violation::BookmarkMovedBackwards { reader, from, to } => write!(
                f,
                "{reader}: the bookmark moved from position {} (token {}) back to position {} \
                 (token {})",
                from.1, from.0, to.1, to.0
            ),
        }
    }
}

/// What [`History::check`] found.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Report {
    /// Lease calls recorded.
    pub calls: usize,
    /// Calls that failed (outcome unknown).
    pub failed_calls: usize,
    /// Distinct tenures (lease, token) seen in responses.
    pub elections: usize,
    /// Leadership spans recorded.
    pub tenures: usize,
    /// Fenced writes recorded, and how many were refused.
    pub writes: (usize, usize),
    /// Fenced bookmark writes recorded, and how many were refused.
    pub bookmarks: (usize, usize),
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "calls: {}, failed calls: {}, elections: {}, leadership spans: {}, writes: {} \
             ({} refused), fenced bookmarks: {} ({} refused), violations: {}",
            self.calls,
            self.failed_calls,
            self.elections,
            self.tenures,
            self.writes.0,
            self.writes.1,
            self.bookmarks.0,
            self.bookmarks.1,
            self.violations.len()
        )
    }
}

/// A thread-safe recorder of lease calls, leadership spans and fenced writes.
#[derive(Debug, Default)]
pub struct History {
    calls: Mutex<Vec<Call>>,
    tenures: Mutex<Vec<Tenure>>,
    writes: Mutex<Vec<FencedWrite>>,
    bookmarks: Mutex<Vec<BookmarkWrite>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// Sends `request` to `storage` and records the call.
    pub async fn request_lease(
        &self,
        storage: &dyn EventStorage,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let invoked = Instant::now();
        let result = storage.request_lease(request).await;
        self.record_call(Call {
            lease_name: request.lease_name.clone(),
            owner: request.owner.clone(),
            invoked,
            completed: Instant::now(),
            response: result.as_ref().ok().cloned(),
        });
        result
    }

    /// Every lease call recorded so far.
    pub fn recorded_calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many lease calls were recorded so far.
    pub fn calls(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Records a call made elsewhere.
    pub fn record_call(&self, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }

    /// Records a span of leadership.
    pub fn record_tenure(&self, tenure: Tenure) {
        self.tenures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tenure);
    }

    /// Records a write offered to a fencing guard, in the order the guard decided on them.
    pub fn record_write(&self, write: FencedWrite) {
        self.writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(write);
    }

    /// Records a fenced bookmark write and the storage's answer.
    pub fn record_bookmark(&self, write: BookmarkWrite) {
        self.bookmarks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(write);
    }

    /// Checks every property over everything recorded.
    pub fn check(&self) -> Report {
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let tenures = self
            .tenures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let writes = self
            .writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let bookmarks = self
            .bookmarks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut report = check(&calls, &tenures, &writes);
        report.bookmarks = (
            bookmarks.len(),
            bookmarks.iter().filter(|b| b.placed_at.is_none()).count(),
        );
        report.violations.extend(check_bookmarks(&bookmarks));
        report
    }
}

/// Checks that no reader's bookmark moved backwards: of its accepted fenced writes, one sent
/// after another completed never goes to a lower token or an earlier position. Writes whose
/// calls overlapped are not ordered (the storage may have placed them either way), and the
/// storage's `placed_at` is not used: it is the storage's clock, which may step.
pub fn check_bookmarks(writes: &[BookmarkWrite]) -> Vec<Violation> {
    let mut by_reader: BTreeMap<&str, Vec<&BookmarkWrite>> = BTreeMap::new();
    for write in writes.iter().filter(|w| w.placed_at.is_some()) {
        by_reader.entry(&write.reader).or_default().push(write);
    }
    let mut violations = Vec::new();
    for (reader, mut accepted) in by_reader {
        let mut by_completion = accepted.clone();
        by_completion.sort_by_key(|w| w.completed);
        accepted.sort_by_key(|w| w.invoked);
        // The highest token and the furthest position among the writes completed so far.
        let (mut highest, mut furthest): (Option<&BookmarkWrite>, Option<&BookmarkWrite>) =
            (None, None);
        let mut done = by_completion.iter().peekable();
        for later in accepted {
            while let Some(earlier) = done.next_if(|w| w.completed < later.invoked) {
                if highest.is_none_or(|h| earlier.token > h.token) {
                    highest = Some(earlier);
                }
                if furthest.is_none_or(|f| earlier.position > f.position) {
                    furthest = Some(earlier);
                }
            }
            let passed = match (highest, furthest) {
                (Some(h), _) if later.token < h.token => Some(h),
                (_, Some(f)) if later.position < f.position => Some(f),
                _ => None,
            };
            if let Some(earlier) = passed {
                violations.push(Violation::BookmarkMovedBackwards {
                    reader: reader.to_owned(),
                    from: (earlier.token, earlier.position),
                    to: (later.token, later.position),
                });
            }
        }
    }
    violations
}

/// Checks recorded calls, spans and writes (see the [module docs](self)).
pub fn check(calls: &[Call], tenures: &[Tenure], writes: &[FencedWrite]) -> Report {
    let mut report = Report {
        calls: calls.len(),
        failed_calls: calls.iter().filter(|c| c.response.is_none()).count(),
        tenures: tenures.len(),
        writes: (writes.len(), writes.iter().filter(|w| !w.accepted).count()),
        ..Report::default()
    };
    let mut by_lease: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.response.is_some()) {
        by_lease.entry(&call.lease_name).or_default().push(call);
    }
    for (lease, calls) in by_lease {
        report.elections += check_lease(lease, &calls, &mut report.violations);
    }
    check_tenures(tenures, &mut report.violations);
    check_writes(writes, &mut report.violations);
    report
}

fn token_of(call: &Call) -> Option<(FencingToken, &str, LeaseStatus)> {
    call.response
        .as_ref()
        .map(|r| (r.fencing_token, r.lease.owner.as_str(), r.status))
}

/// Checks one lease's answered calls; returns the number of distinct tokens.
fn check_lease(lease: &str, calls: &[&Call], violations: &mut Vec<Violation>) -> usize {
    // 1. One owner per token (holders' answers and standbys' views of the record alike).
    let mut owner_of: HashMap<FencingToken, &str> = HashMap::new();
    for call in calls {
        let Some((token, owner, _)) = token_of(call) else {
            continue;
        };
        match owner_of.get(&token) {
            None => {
                owner_of.insert(token, owner);
            }
            Some(first) if *first != owner => {
                violations.push(Violation::TokenSharedByOwners {
                    lease_name: lease.to_owned(),
                    token,
                    owners: ((*first).to_owned(), owner.to_owned()),
                });
            }
            Some(_) => {}
        }
    }

    // 2. Real-time monotonicity: sweep calls by invocation, folding in every call that
    //    completed before it.
    let mut by_completion: Vec<&Call> = calls.to_vec();
    by_completion.sort_by_key(|c| c.completed);
    let mut by_invocation: Vec<&Call> = calls.to_vec();
    by_invocation.sort_by_key(|c| c.invoked);
    let mut done = 0;
    let mut highest: Option<FencingToken> = None;
    for call in by_invocation {
        while done < by_completion.len() && by_completion[done].completed < call.invoked {
            let token = token_of(by_completion[done]).map(|t| t.0);
            highest = highest.max(token);
            done += 1;
        }
        if let (Some(earlier), Some((later, _, _))) = (highest, token_of(call))
            && later < earlier
        {
            violations.push(Violation::TokenWentBackwards {
                lease_name: lease.to_owned(),
                earlier,
                later,
                owner: call.owner.clone(),
            });
        }
    }

    // 3. Holder continuity: no other holder answered strictly inside a tenure's span, from its
    //    first holder answer's completion to its last holder answer's invocation. Holder
    //    answers sorted by invocation make each span's candidates one contiguous range.
    let mut holders: Vec<&Call> = calls
        .iter()
        .copied()
        .filter(|c| token_of(c).is_some_and(|(_, _, s)| s.holds_lease()))
        .collect();
    holders.sort_by_key(|c| c.invoked);
    let mut spans: HashMap<(FencingToken, &str), (Instant, Instant)> = HashMap::new();
    for call in &holders {
        let Some((token, _, _)) = token_of(call) else {
            continue;
        };
        let span = spans
            .entry((token, call.owner.as_str()))
            .or_insert((call.completed, call.invoked));
        span.0 = span.0.min(call.completed);
        span.1 = span.1.max(call.invoked);
    }
    for ((token, owner), (start, end)) in &spans {
        let first = holders.partition_point(|c| c.invoked <= *start);
        for other in holders[first..].iter().take_while(|c| c.invoked < *end) {
            let Some((other_token, _, _)) = token_of(other) else {
                continue;
            };
            if other.owner != *owner && other.completed < *end {
                violations.push(Violation::TenureInterrupted {
                    lease_name: lease.to_owned(),
                    holder: ((*owner).to_owned(), *token),
                    intruder: (other.owner.clone(), other_token),
                });
            }
        }
    }
    owner_of.len()
}

fn check_tenures(tenures: &[Tenure], violations: &mut Vec<Violation>) {
    let mut by_lease: BTreeMap<&str, Vec<&Tenure>> = BTreeMap::new();
    for tenure in tenures {
        by_lease.entry(&tenure.lease_name).or_default().push(tenure);
    }
    for (lease, mut spans) in by_lease {
        spans.sort_by_key(|t| t.from);
        // Sweep by start, keeping the span that reaches furthest so far and the furthest of
        // any *other* owner: a span overlaps another owner's exactly when it starts before the
        // furthest end among the other owners' spans that started before it.
        let mut furthest: Option<&Tenure> = None;
        let mut runner_up: Option<&Tenure> = None; // furthest of an owner other than furthest's
        for span in spans {
            let rival = match furthest {
                Some(f) if f.owner != span.owner => Some(f),
                _ => runner_up,
            };
            if let Some(rival) = rival
                && span.from < rival.until
            {
                violations.push(Violation::OverlappingLeaders {
                    lease_name: lease.to_owned(),
                    leaders: (
                        (rival.owner.clone(), rival.token),
                        (span.owner.clone(), span.token),
                    ),
                });
            }
            match furthest {
                None => furthest = Some(span),
                Some(f) if span.until > f.until => {
                    if f.owner != span.owner {
                        runner_up = Some(f);
                    }
                    furthest = Some(span);
                }
                Some(f) => {
                    if f.owner != span.owner && runner_up.is_none_or(|r| span.until > r.until) {
                        runner_up = Some(span);
                    }
                }
            }
        }
    }
}

fn check_writes(writes: &[FencedWrite], violations: &mut Vec<Violation>) {
    let mut highest: HashMap<&str, FencingToken> = HashMap::new();
    for write in writes.iter().filter(|w| w.accepted) {
        let entry = highest.entry(&write.lease_name).or_insert(write.token);
        if write.token < *entry {
            violations.push(Violation::WriteAcceptedOutOfOrder {
                lease_name: write.lease_name.clone(),
                highest: *entry,
                stale: write.token,
            });
        } else {
            *entry = write.token;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bookmark_placed_back_is_caught() {
        let base = Instant::now();
        let ms = |n: u64| base + Duration::from_millis(n);
        // A write of `token` to `position`, sent at `from` ms and answered at `to` ms, accepted
        // or not; `placed_at` is a stepped storage clock that runs backwards.
        let write =
            |token: u64, position: u64, (from, to): (u64, u64), accepted: bool| BookmarkWrite {
                reader: "r".into(),
                token: token_(token),
                position: EventPosition::new(position).unwrap(),
                placed_at: accepted.then(|| Timestamp::from_micros(1_000_000 - from as i64)),
                invoked: ms(from),
                completed: ms(to),
            };
        // Recorded out of order, in order in real time (the storage's clock says otherwise):
        // clean; a refusal counts for nothing.
        let clean = [
            write(2, 20, (3, 4), true),
            write(1, 10, (1, 2), true),
            write(1, 5, (5, 6), false),
        ];
        assert!(check_bookmarks(&clean).is_empty());
        // Overlapping calls are not ordered: either may have been placed first.
        let overlapping = [write(2, 20, (1, 4), true), write(1, 10, (2, 3), true)];
        assert!(check_bookmarks(&overlapping).is_empty());
        // An earlier position sent after a later one was answered, and an older token.
        let backwards = [write(2, 20, (1, 2), true), write(2, 15, (3, 4), true)];
        assert_eq!(check_bookmarks(&backwards).len(), 1);
        let older = [write(2, 20, (1, 2), true), write(1, 30, (3, 4), true)];
        assert!(matches!(
            check_bookmarks(&older)[..],
            [Violation::BookmarkMovedBackwards { .. }]
        ));
        // Against the furthest of all the writes before, not only the last one.
        let behind_an_older_one = [
            write(3, 50, (1, 2), true),
            write(3, 60, (3, 4), true),
            write(3, 55, (5, 6), true),
        ];
        assert_eq!(check_bookmarks(&behind_an_older_one).len(), 1);
    }

    fn token_(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }
    use std::time::Duration;
    use tenure_ports::Timestamp;
    use tenure_ports::domain::{Lease, LeaseName, Owner};

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn call(owner: &str, holder: &str, t: u64, status: LeaseStatus, at: (u64, u64)) -> Call {
        let base = Instant::now();
        let lease = Lease {
            lease_name: LeaseName::new("l").unwrap(),
            owner: Owner::new(holder).unwrap(),
            priority: 0,
            fencing_token: token(t),
            acquired_at: Timestamp::UNIX_EPOCH,
            heartbeat_at: Timestamp::UNIX_EPOCH,
            ttl: Duration::from_secs(1),
            released_at: None,
        };
        Call {
            lease_name: "l".into(),
            owner: owner.into(),
            invoked: base + Duration::from_millis(at.0),
            completed: base + Duration::from_millis(at.1),
            response: Some(LeaseResponse {
                status,
                fencing_token: token(t),
                lease,
            }),
        }
    }

    use LeaseStatus::{Leader, Standby};

    #[test]
    fn a_clean_history_passes() {
        let calls = [
            call("a", "a", 1, Leader, (0, 1)),
            call("b", "a", 1, Standby, (2, 3)),
            call("a", "a", 1, Leader, (4, 5)),
            call("b", "b", 2, Leader, (10, 11)),
            call("a", "b", 2, Standby, (12, 13)),
        ];
        let report = check(&calls, &[], &[]);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.elections, 2);
    }

    #[test]
    fn each_property_catches_its_violation() {
        let shared = check(
            &[
                call("a", "a", 1, Leader, (0, 1)),
                call("b", "b", 1, Leader, (2, 3)),
            ],
            &[],
            &[],
        );
        assert!(matches!(
            shared.violations[0],
            Violation::TokenSharedByOwners { .. }
        ));

        let backwards = check(
            &[
                call("a", "a", 2, Leader, (0, 1)),
                call("b", "b", 1, Standby, (2, 3)),
            ],
            &[],
            &[],
        );
        assert!(
            backwards
                .violations
                .iter()
                .any(|v| matches!(v, Violation::TokenWentBackwards { .. })),
            "{:?}",
            backwards.violations
        );

        let interrupted = check(
            &[
                call("a", "a", 1, Leader, (0, 1)),
                call("b", "b", 2, Leader, (2, 3)),
                call("a", "a", 1, Leader, (4, 5)),
            ],
            &[],
            &[],
        );
        assert!(
            interrupted
                .violations
                .iter()
                .any(|v| matches!(v, Violation::TenureInterrupted { .. })),
            "{:?}",
            interrupted.violations
        );

        let base = Instant::now();
        let span = |owner: &str, t: u64, from: u64, until: u64| Tenure {
            lease_name: "l".into(),
            owner: owner.into(),
            token: token(t),
            from: base + Duration::from_millis(from),
            until: base + Duration::from_millis(until),
        };
        let overlapping = check(
            &[],
            &[
                span("a", 1, 0, 100),
                span("a", 1, 100, 200),
                span("b", 2, 150, 300),
            ],
            &[],
        );
        assert_eq!(overlapping.violations.len(), 1);
        let touching = check(&[], &[span("a", 1, 0, 100), span("b", 2, 100, 200)], &[]);
        assert!(touching.violations.is_empty());
        // b's long span is the furthest; b's own later span must still be checked against a.
        let hidden = check(
            &[],
            &[
                span("b", 1, 0, 50),
                span("a", 2, 60, 100),
                span("b", 1, 5, 300),
                span("b", 3, 70, 80),
            ],
            &[],
        );
        assert!(
            hidden.violations.iter().any(|v| matches!(
                v,
                Violation::OverlappingLeaders { leaders, .. } if leaders.1 .1 == token(3)
            )),
            "{:?}",
            hidden.violations
        );

        let write = |t: u64, accepted: bool| FencedWrite {
            lease_name: "l".into(),
            owner: "x".into(),
            token: token(t),
            accepted,
        };
        let writes = check(
            &[],
            &[],
            &[
                write(1, true),
                write(2, true),
                write(1, false),
                write(1, true),
            ],
        );
        assert_eq!(
            writes.violations,
            vec![Violation::WriteAcceptedOutOfOrder {
                lease_name: "l".into(),
                highest: token(2),
                stale: token(1)
            }]
        );
        assert_eq!(writes.writes, (4, 1));
    }
}
