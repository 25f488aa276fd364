//! The storage under test, and how the kit moves its time.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tenure_ports::{EventStorage, ManualClock};

/// A future that cleans up after a scenario.
pub type Teardown = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A handle that moves a backend's storage clock forward.
pub trait AdvanceClock: Send + Sync {
    /// Moves the storage clock forward by `by`.
    fn advance(&self, by: Duration);
}

impl AdvanceClock for ManualClock {
    fn advance(&self, by: Duration) {
        ManualClock::advance(self, by);
    }
}

/// A fresh storage for one scenario, made by the factory given to
/// [`tck_suite!`](crate::tck_suite).
///
/// Give it a clock handle ([`Subject::with_clock`]) when the backend's clock can be moved: the
/// scenarios then advance it instead of sleeping, and run in microseconds. Without one, they
/// run in real time with ttls long enough (see [`Timing`]) to stay correct on a loaded machine.
pub struct Subject {
    pub(crate) storage: Arc<dyn EventStorage>,
    pub(crate) clock: Option<Arc<dyn AdvanceClock>>,
    pub(crate) timing: Timing,
    pub(crate) teardown: std::sync::Mutex<Option<Teardown>>,
    pub(crate) suite: Option<String>,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("storage", &self.storage)
            .field("controllable_clock", &self.clock.is_some())
            .field("timing", &self.timing)
            .finish()
    }
}

impl Subject {
    /// A subject running in real time.
    pub fn new(storage: impl EventStorage + 'static) -> Self {
        Subject::from_arc(Arc::new(storage))
    }

    /// A subject running in real time, from a shared storage.
    pub fn from_arc(storage: Arc<dyn EventStorage>) -> Self {
        Subject {
            storage,
            clock: None,
            timing: Timing::REAL_TIME,
            teardown: std::sync::Mutex::new(None),
            suite: None,
        }
    }

    /// Lets the scenarios move the storage clock instead of sleeping.
    #[must_use]
    pub fn with_clock(mut self, clock: impl AdvanceClock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self.timing = Timing::CONTROLLED;
        self
    }

    /// Overrides the real-time margins (for a backend that is slower than usual).
    #[must_use]
    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Runs `teardown` after the scenario, whether it passed or failed (dropping a schema, a
    /// temporary database, a directory).
    #[must_use]
    pub fn with_teardown(mut self, teardown: impl Future<Output = ()> + Send + 'static) -> Self {
        self.teardown = std::sync::Mutex::new(Some(Box::pin(teardown)));
        self
    }

    /// Names the suite in the kit's output lines (`tck: passed <suite>::<scenario>`); the
    /// storage's [`name`](tenure_ports::EventStorage::name) by default. Use it to tell apart two
    /// suites over one backend, e.g. on a manual clock and in real time.
    #[must_use]
    pub fn with_suite_name(mut self, suite: impl Into<String>) -> Self {
        self.suite = Some(suite.into());
        self
    }

    /// The storage under test.
    pub fn storage(&self) -> &Arc<dyn EventStorage> {
        &self.storage
    }

    /// Whether the storage clock is controlled by the kit.
    pub fn has_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// The ttls and margins in force.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Lets `ttl` pass on the storage clock: advances it, or sleeps `ttl` plus the margin.
    pub async fn wait_past(&self, ttl: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(ttl),
            None => tokio::time::sleep(ttl + self.timing.margin).await,
        }
    }

    /// Lets a little time pass on the storage clock (so that two calls get different instants).
    pub async fn tick(&self) {
        match &self.clock {
            Some(clock) => clock.advance(Duration::from_millis(1)),
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The ttls the scenarios use, and the margin they sleep beyond a ttl in real time.
///
/// A registration made with [`Timing::short`] is only ever relied upon to be live for the next
/// one or two calls; [`Timing::long`] is never relied upon to expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timing {
    /// A ttl that the scenario lets expire.
    pub short: Duration,
    /// A ttl that never expires during a scenario.
    pub long: Duration,
    /// How long past a ttl a real-time scenario sleeps before it relies on the expiry.
    pub margin: Duration,
}

impl Timing {
    /// Margins of one's own, for [`Subject::with_timing`]: `short` is let expire, `long` never
    /// expires during a scenario, `margin` is slept past a ttl in real time.
    pub const fn new(short: Duration, long: Duration, margin: Duration) -> Self {
        Timing {
            short,
            long,
            margin,
        }
    }

    /// For backends whose clock the kit moves.
    pub const CONTROLLED: Timing = Timing {
        short: Duration::from_secs(10),
        long: Duration::from_secs(3600),
        margin: Duration::ZERO,
    };

    /// For backends in real time: a short ttl of 1.5 s, slept past by 0.5 s.
    pub const REAL_TIME: Timing = Timing {
        short: Duration::from_millis(1500),
        long: Duration::from_secs(600),
        margin: Duration::from_millis(500),
    };
}
