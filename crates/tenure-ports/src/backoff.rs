//! Backing off, with jitter, after failures: a random delay in `[bound / 2, bound]`, where the
//! bound doubles from a first delay per consecutive failure up to a cap, and starts again after
//! a success.
//!
//! Two callers of the SPI use it, so that the rule exists once:
//! * `tenure-election`'s elector, after failed lease requests of a contender that holds no
//!   tenure (first delay one poll interval, cap one ttl). Under overload every contender's call
//!   fails at once; retrying at the poll cadence, all in step, keeps the storage overloaded
//!   (issue 13). A standby still notices a vacant lease within about a ttl. A leader is never
//!   backed off: its renewals keep their cadence, and its self-demotion deadline is untouched.
//! * `tenure-postgres`'s lease-change listener, between its reconnection attempts.
//!
//! [`Backoff`] is public for callers that drive `request_lease` in a loop of their own (a
//! custom elector, a benchmark that plays thousands of contenders) and want the elector's rule
//! (`tenure_election` re-exports it).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Jittered, doubling delays after consecutive failures: how many failures, and a small
/// random source for the jitter.
///
/// ```
/// use std::time::Duration;
/// use tenure_ports::Backoff;
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
    /// No failure yet, jitter seeded per instance (so electors, or listeners, of one process
    /// do not move in step).
    pub fn new() -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0x9e37_79b9_7f4a_7c15);
        Backoff {
            failures: 0,
            state: hasher.finish() | 1,
        }
    }

    /// A success: the next failure's delay starts from the first one again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// A failure: how long to wait before the next attempt, at least `first / 2` and at most
    /// `cap` (never below `first`), the bound doubling from `first` per consecutive failure.
    pub fn failed(&mut self, first: Duration, cap: Duration) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doubling = 1u32 << self.failures.min(16).saturating_sub(1);
        let bound = first.saturating_mul(doubling).min(cap.max(first));
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
