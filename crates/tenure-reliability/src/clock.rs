//! A storage clock that follows tokio's clock.

use tenure_ports::{Clock, Timestamp};
use tokio::time::Instant;

/// A storage clock that advances with tokio's clock, from 2026-01-01T00:00:00Z at creation.
///
/// In paused tokio time (`start_paused`, `tokio::time::pause`) the in-memory backend then
/// judges expiry on the same virtual clock the electors measure their ttls on, so a workload
/// of hours runs in seconds and exactly the same way every time it is scheduled alike.
#[derive(Debug)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock starting now. Must be called inside a tokio runtime with the time driver.
    pub fn new() -> Self {
        TokioClock {
            origin: Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

/// 2026-01-01T00:00:00Z in microseconds since the epoch.
const EPOCH_2026: i64 = 1_767_225_600_000_000;

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.origin.elapsed().as_micros()).unwrap_or(i64::MAX);
        Timestamp::from_micros(EPOCH_2026.saturating_add(elapsed))
    }
}
