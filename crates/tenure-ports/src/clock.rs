//! Storage clocks for embedded backends.
//!
//! A database backend reads its database's clock and needs none of this. An embedded backend
//! (in-memory, file) *is* the storage, so its clock is the storage clock: [`SystemClock`] in
//! production, [`ManualClock`] in tests that must not wait for a ttl to pass.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use tenure_domain::Timestamp;

/// A source of storage-clock instants.
pub trait Clock: Send + Sync + Debug {
    /// The current instant. Implementations never go backwards.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock, made monotonic: it never returns an instant earlier than one it
/// returned before, so that a wall-clock step backwards cannot bring a released or expired
/// lease back to life.
#[derive(Debug, Default)]
pub struct SystemClock {
    last: AtomicI64,
}

impl SystemClock {
    /// A new system clock.
    pub fn new() -> Self {
        SystemClock::default()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let wall = Timestamp::from_system_time(SystemTime::now())
            .map(Timestamp::as_micros)
            .unwrap_or(0);
        // Read before writing: calls within one microsecond (most of them, on a busy
        // storage) find the instant already there and leave the shared line unwritten.
        let last = self.last.load(Ordering::Acquire);
        if wall <= last {
            return Timestamp::from_micros(last);
        }
        let previous = self.last.fetch_max(wall, Ordering::AcqRel);
        Timestamp::from_micros(previous.max(wall))
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
