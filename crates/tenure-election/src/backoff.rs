//! Backing off, with jitter, after failed lease requests of an elector that holds no tenure.
//!
//! Under overload every contender's call fails at once; retrying at the poll cadence, all in
//! step, keeps the storage overloaded (issue 13). A contender without a tenure therefore waits
//! longer after each consecutive failure: a random delay in `[bound / 2, bound]`, where the
//! bound doubles from one poll interval per failure up to a cap (one ttl at most, so a standby
//! still notices a vacant lease within about a ttl). A leader is never backed off here: its
//! renewals keep their cadence, and its self-demotion deadline is untouched.
//!
//! [`Backoff`] is public for callers that drive `request_lease` in a loop of their own (a
//! custom elector, a benchmark that plays thousands of contenders) and want the elector's rule.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The elector's backoff after failed requests of a contender without a tenure: consecutive
/// failures, and a small random source for the jitter.
///
/// ```
/// use std::time::Duration;
/// use tenure_election::Backoff;
/// let (poll, ttl) = (Duration::from_secs(1), Duration::from_secs(3));
/// let mut backoff = Backoff::new();
/// let first = backoff.failed(poll, ttl);
/// assert!(first >= poll / 2 && first <= poll);
/// let second = backoff.failed(poll, ttl);
/// assert!(second >= poll && second <= 2 * poll);
/// backoff.succeeded();
/// assert!(backoff.failed(poll, ttl) <= poll);
/// ```
#[derive(Debug)]
pub struct Backoff {
    failures: u32,
    state: u64,
}

impl Backoff {
    /// No failure yet, jitter seeded per elector (so electors of one process do not move in
    /// step).
    pub fn new() -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0x9e37_79b9_7f4a_7c15);
        Backoff {
            failures: 0,
            state: hasher.finish() | 1,
        }
    }

    /// A request succeeded: the next failure starts from one poll interval again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// A request failed: how long to wait before the next one, at least `poll / 2` and at
    /// most `cap` (never below `poll`).
    pub fn failed(&mut self, poll: Duration, cap: Duration) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doubling = 1u32 << self.failures.min(16).saturating_sub(1);
        let bound = poll.saturating_mul(doubling).min(cap.max(poll));
        let half = bound / 2;
        half + half.mul_f64(self.unit())
    }

    /// A uniform sample of `[0, 1)` (xorshift64*).
    fn unit(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Default for Backoff {
    /// [`Backoff::new`].
    fn default() -> Self {
        Backoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_per_failure_up_to_the_cap_and_restart_after_a_success() {
        let (poll, cap) = (Duration::from_millis(100), Duration::from_millis(800));
        let mut backoff = Backoff::new();
        for (failure, bound) in [100u64, 200, 400, 800, 800, 800].into_iter().enumerate() {
            let delay = backoff.failed(poll, cap);
            let bound = Duration::from_millis(bound);
            assert!(
                delay >= bound / 2 && delay <= bound,
                "failure {}: {delay:?} outside [{:?}, {bound:?}]",
                failure + 1,
                bound / 2
            );
        }
        backoff.succeeded();
        assert!(backoff.failed(poll, cap) <= poll);
    }

    #[test]
    fn delays_are_jittered() {
        let (poll, cap) = (Duration::from_secs(1), Duration::from_secs(1));
        let mut backoff = Backoff::new();
        let delays: std::collections::HashSet<_> =
            (0..50).map(|_| backoff.failed(poll, cap)).collect();
        assert!(delays.len() > 40, "{delays:?}");
    }
}
