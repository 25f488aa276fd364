//! Storage clocks for embedded backends.
//!
//! A database backend reads its database's clock and needs none of this. An embedded backend
//! (in-memory, file) *is* the storage, so its clock is the storage clock: [`SystemClock`] (the
//! monotonic clock, shown as wall-clock time) in production, [`ManualClock`] in tests that must
//! not wait for a ttl to pass.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tenure_domain::Timestamp;

/// A source of storage-clock instants.
pub trait Clock: Send + Sync + Debug {
    /// The current instant. Implementations never go backwards.
    fn now(&self) -> Timestamp;
}

/// The storage clock of the embedded backends: the system's wall-clock time when the clock
/// was made, plus the time elapsed since on the monotonic clock.
///
/// Lease liveness is judged on it, so it must not step: a wall clock that NTP, an operator or
/// a VM migration steps forward would make a live lease look expired (two leaders), and one
/// stepped back would bring an expired one back to life. This clock moves at the monotonic
/// clock's rate whatever the wall clock does; its instants are wall-clock times for display
/// only, and drift from the wall clock by the size of any step taken after it was made.
#[derive(Debug)]
pub struct SystemClock {
    wall_at_start: i64,
    start: Instant,
}

impl SystemClock {
    /// A clock reading the wall clock once, now, and the monotonic clock from then on.
    pub fn new() -> Self {
        SystemClock {
            wall_at_start: Timestamp::from_system_time(SystemTime::now())
                .map(Timestamp::as_micros)
                .unwrap_or(0),
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX);
        Timestamp::from_micros(self.wall_at_start.saturating_add(elapsed))
    }
}

/// A clock that moves only when told to. Clones share one instant.
///
/// ```
/// use std::time::Duration;
/// use tenure_ports::{Clock, ManualClock};
/// let clock = ManualClock::starting_at_micros(1_000);
/// clock.advance(Duration::from_millis(2));
/// assert_eq!(clock.now().as_micros(), 3_000);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at 2026-01-01T00:00:00Z.
    pub fn new() -> Self {
        ManualClock::starting_at_micros(1_767_225_600_000_000)
    }

    /// A clock standing at `micros` microseconds after the Unix epoch.
    pub fn starting_at_micros(micros: i64) -> Self {
        ManualClock {
            micros: Arc::new(AtomicI64::new(micros)),
        }
    }

    /// Moves the clock forward by `by` (truncated to microseconds, saturating).
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        let _ = self
            .micros
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                Some(m.saturating_add(by))
            });
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.micros.load(Ordering::Acquire))
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}
