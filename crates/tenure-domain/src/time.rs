//! Storage-clock instants.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant on the **storage's** clock, with microsecond precision (PostgreSQL's).
///
/// It counts microseconds since the Unix epoch (UTC). Every instant on a [`Lease`](crate::Lease)
/// comes from the storage that produced it; comparing one with a caller's own wall clock
/// compares two clocks, which is exactly what leases exist to avoid. Use it for display and
/// monitoring, never to decide to start processing.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch, 1970-01-01T00:00:00Z.
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    /// The instant `micros` microseconds after the Unix epoch (before it if negative).
    pub const fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the Unix epoch.
    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// Converts a [`SystemTime`], truncating to whole microseconds.
    ///
    /// Returns `None` for an instant outside about ±292,000 years of 1970.
    pub fn from_system_time(time: SystemTime) -> Option<Self> {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_micros()).ok().map(Timestamp),
            Err(before) => {
                let micros = before.duration().as_micros();
                // Round towards the past so that truncation never moves an instant later.
                let sub_micro = before.duration().subsec_nanos() % 1_000 != 0;
                let micros = i64::try_from(micros).ok()?;
                micros
                    .checked_neg()
                    .and_then(|m| m.checked_sub(i64::from(sub_micro)))
                    .map(Timestamp)
            }
        }
    }

    /// Converts to a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    /// `self + duration`, truncated to microseconds and saturating at the end of time.
    pub fn saturating_add(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_micros(duration)))
    }

    /// `self - duration`, truncated to microseconds and saturating at the start of time.
    pub fn saturating_sub(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_micros(duration)))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        let micros = self.0.saturating_sub(earlier.0);
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }
}

/// Whole microseconds in `duration`, saturating at `i64::MAX`.
pub(crate) fn duration_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with microseconds, e.g. `2026-12-02T15:08:42.123456Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros_per_day: i64 = 86_400 * 1_000_000;
        let days = self.0.div_euclid(micros_per_day);
        let of_day = self.0.rem_euclid(micros_per_day);
        let (year, month, day) = civil_from_days(days);
        let secs = of_day / 1_000_000;
        let micros = of_day % 1_000_000;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            secs / 3600,
            (secs / 60) % 60,
            secs % 60
        )
    }
}

/// Proleptic Gregorian date of a day number counted from 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_rfc3339_with_micros() {
        assert_eq!(
            Timestamp::UNIX_EPOCH.to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        // 2026-12-02T15:08:42.123456Z
        let t = Timestamp::from_micros(1_796_224_122_123_456);
        assert_eq!(t.to_string(), "2026-12-02T15:08:42.123456Z");
        assert_eq!(
            Timestamp::from_micros(-1).to_string(),
            "1969-12-31T23:59:59.999999Z"
        );
        assert_eq!(
            Timestamp::from_micros(951_782_400_000_000).to_string(),
            "2000-02-29T00:00:00.000000Z"
        );
    }

    #[test]
    fn system_time_round_trip_truncates_to_micros() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let ts = Timestamp::from_system_time(t).unwrap();
        assert_eq!(ts.as_micros(), 1_700_000_000_123_456);
        assert_eq!(
            ts.to_system_time(),
            UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_000)
        );
        let before = UNIX_EPOCH - Duration::new(1, 500);
        assert_eq!(
            Timestamp::from_system_time(before).unwrap().as_micros(),
            -1_000_001
        );
    }

    #[test]
    fn arithmetic_saturates() {
        let max = Timestamp::from_micros(i64::MAX);
        assert_eq!(max.saturating_add(Duration::from_secs(1)), max);
        let min = Timestamp::from_micros(i64::MIN);
        assert_eq!(min.saturating_sub(Duration::from_secs(1)), min);
        assert_eq!(
            Timestamp::from_micros(5).saturating_duration_since(Timestamp::from_micros(9)),
            Duration::ZERO
        );
    }
}
