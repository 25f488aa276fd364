//! Cases and their generation.

use std::fmt;
use std::time::Duration;

use proptest::prelude::*;
use tenure_ports::domain::{MAX_TTL, MIN_TTL};

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

/// The generator of [`Case`]s that [`check_decisions`](super::check_decisions) plays.
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
pub(super) fn lease_name_for(n: u64) -> String {
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
pub(super) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_nanos() / 1_000).unwrap_or(i64::MAX)
}
