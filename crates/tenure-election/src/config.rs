//! What an elector is told: the lease, its own identity, its priority and its timing, checked
//! once before it starts.

use std::fmt;
use std::time::Duration;

use tenure_ports::domain::{ValidationError, validate_ttl};
use tenure_ports::{LeaseName, LeaseRequest, Owner};

use crate::owner::default_owner;

/// The shortest ttl an elector accepts: 10 ms.
///
/// The storage accepts 1 ms, but an elector needs room inside the ttl for a poll interval, a
/// call timeout below it, and the [safety margin](safety_margin).
pub const MIN_ELECTOR_TTL: Duration = Duration::from_millis(10);

/// The safety margin taken off every ttl: `max(ttl / 100, 1 ms)`.
///
/// Leadership is valid until the instant the last successful request was *sent*, plus the ttl,
/// measured on this process's monotonic clock, **less this margin**. The storage measures the
/// same ttl on its own clock, so the two clocks' rates matter: if this process's clock ran 1 %
/// slow, it would still believe in a lease the storage had already let expire. The margin
/// covers a rate difference of up to 1 % (NTP-disciplined clocks stay within 0.05 %,
/// free-running quartz within about 0.01 %), and its 1 ms floor covers timer granularity and
/// the storage's truncation of ttl and timestamps to whole microseconds.
///
/// ```
/// use std::time::Duration;
/// use tenure_election::safety_margin;
/// assert_eq!(safety_margin(Duration::from_secs(30)), Duration::from_millis(300));
/// assert_eq!(safety_margin(Duration::from_millis(50)), Duration::from_millis(1));
/// ```
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 100).max(Duration::from_millis(1))
}

/// How an elector should campaign for one lease. Build it with [`ElectorConfig::new`] and the
/// `with_*` methods; [`LeaderElector::start`](crate::LeaderElector::start) validates it.
///
/// | setting | default |
/// |---|---|
/// | owner | the host name plus a random suffix, e.g. `web-3-4f1a9c02be71` |
/// | priority | 0 |
/// | poll interval | ttl / 3: two failed renewals still leave time for a third |
/// | call timeout | poll interval / 2 |
///
/// ```
/// use std::time::Duration;
/// use tenure_election::ElectorConfig;
/// let config = ElectorConfig::new("order-dispatcher", Duration::from_secs(30))
///     .with_owner("pod-7f3a9")
///     .with_priority(10);
/// let valid = config.validate()?;
/// assert_eq!(valid.poll_interval(), Duration::from_secs(10));
/// assert_eq!(valid.call_timeout(), Duration::from_secs(5));
/// # Ok::<(), tenure_election::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ElectorConfig {
    lease_name: String,
    owner: Option<String>,
    priority: i64,
    ttl: Duration,
    poll_interval: Option<Duration>,
    call_timeout: Option<Duration>,
}

impl ElectorConfig {
    /// A configuration for `lease_name` with `ttl`, every other setting at its default.
    pub fn new(lease_name: impl Into<String>, ttl: Duration) -> Self {
        ElectorConfig {
            lease_name: lease_name.into(),
            owner: None,
            priority: 0,
            ttl,
            poll_interval: None,
            call_timeout: None,
        }
    }

    /// This instance's identity: stable for its lifetime and unique among contenders.
    #[must_use]
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The priority: a live contender with a strictly higher priority than the holder's asks
    /// the holder to step down.
    #[must_use]
    pub fn with_priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// How often to call `request_lease`, measured from one request's sending to the next.
    #[must_use]
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = Some(poll_interval);
        self
    }

    /// How long one storage call may take before it counts as failed. Must be below the poll
    /// interval, so that at most one request is ever in flight.
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = Some(call_timeout);
        self
    }

    /// Checks every setting and fills in the defaults. A default owner is generated here, so
    /// each validation of a configuration without an owner names a new contender.
    pub fn validate(&self) -> Result<ValidConfig, ConfigError> {
        let lease_name =
            LeaseName::new(self.lease_name.as_str()).map_err(ConfigError::LeaseName)?;
        let owner = match &self.owner {
            Some(owner) => Owner::new(owner.as_str()),
            None => Owner::new(default_owner()),
        }
        .map_err(ConfigError::Owner)?;
        let ttl = validate_ttl(self.ttl).map_err(ConfigError::Ttl)?;
        if ttl < MIN_ELECTOR_TTL {
            return Err(ConfigError::TtlTooShort { ttl });
        }
        let margin = safety_margin(ttl);
        let poll_interval = self.poll_interval.unwrap_or(ttl / 3);
        if poll_interval.is_zero() || poll_interval >= ttl - margin {
            return Err(ConfigError::PollInterval { poll_interval, ttl });
        }
        let call_timeout = self.call_timeout.unwrap_or(poll_interval / 2);
        if call_timeout.is_zero() || call_timeout >= poll_interval {
            return Err(ConfigError::CallTimeout {
                call_timeout,
                poll_interval,
            });
        }
        Ok(ValidConfig {
            lease_name,
            owner,
            priority: self.priority,
            ttl,
            poll_interval,
            call_timeout,
            safety_margin: margin,
        })
    }
}

/// A checked [`ElectorConfig`]: every setting present and consistent.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ValidConfig {
    lease_name: LeaseName,
    owner: Owner,
    priority: i64,
    ttl: Duration,
    poll_interval: Duration,
    call_timeout: Duration,
    safety_margin: Duration,
}

impl ValidConfig {
    /// The lease contended for.
    pub fn lease_name(&self) -> &LeaseName {
        &self.lease_name
    }

    /// This contender's identity.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// This contender's priority.
    pub fn priority(&self) -> i64 {
        self.priority
    }

    /// The ttl asked for, in whole microseconds.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The time from one request's sending to the next's.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// The longest one storage call may take.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The [safety margin](safety_margin) taken off the ttl.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// How long a confirmed request keeps this elector leader, counted from its sending:
    /// ttl less the safety margin.
    pub fn leadership_span(&self) -> Duration {
        self.ttl - self.safety_margin
    }

    /// The request this elector sends on every poll.
    pub fn request(&self) -> LeaseRequest {
        LeaseRequest::new(
            self.lease_name.as_str(),
            self.owner.as_str(),
            self.priority,
            self.ttl,
        )
    }
}

/// A setting an elector cannot run with.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lease name breaks the contract.
    LeaseName(ValidationError),
    /// The owner breaks the contract.
    Owner(ValidationError),
    /// The ttl is outside the contract's range (1 ms to 7 days).
    Ttl(ValidationError),
    /// The ttl is below [`MIN_ELECTOR_TTL`].
    TtlTooShort {
        /// The ttl given.
        ttl: Duration,
    },
    /// The poll interval is zero, or not below the ttl less its safety margin.
    PollInterval {
        /// The poll interval given (or defaulted).
        poll_interval: Duration,
        /// The ttl.
        ttl: Duration,
    },
    /// The call timeout is zero, or not below the poll interval.
    CallTimeout {
        /// The call timeout given (or defaulted).
        call_timeout: Duration,
        /// The poll interval.
        poll_interval: Duration,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::LeaseName(e) | ConfigError::Owner(e) | ConfigError::Ttl(e) => {
                write!(f, "{e}")
            }
            ConfigError::TtlTooShort { ttl } => write!(
                f,
                "invalid ttl: {ttl:?} is below the elector's minimum of {MIN_ELECTOR_TTL:?}"
            ),
            ConfigError::PollInterval { poll_interval, ttl } => write!(
                f,
                "invalid poll interval: {poll_interval:?} must be above zero and below the \
                 ttl ({ttl:?}) less its safety margin ({:?})",
                safety_margin(*ttl)
            ),
            ConfigError::CallTimeout {
                call_timeout,
                poll_interval,
            } => write!(
                f,
                "invalid call timeout: {call_timeout:?} must be above zero and below the poll \
                 interval ({poll_interval:?})"
            ),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::LeaseName(e) | ConfigError::Owner(e) | ConfigError::Ttl(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_follow_the_ttl() {
        let valid = ElectorConfig::new("l", ms(3000)).validate().unwrap();
        assert_eq!(valid.poll_interval(), ms(1000));
        assert_eq!(valid.call_timeout(), ms(500));
        assert_eq!(valid.safety_margin(), ms(30));
        assert_eq!(valid.leadership_span(), ms(2970));
        assert_eq!(valid.priority(), 0);
    }

    #[test]
    fn default_owner_is_valid_and_differs_per_validation() {
        let config = ElectorConfig::new("l", ms(3000));
        let a = config.validate().unwrap();
        let b = config.validate().unwrap();
        assert_ne!(a.owner(), b.owner());
    }

    #[test]
    fn every_bad_setting_is_named() {
        let bad = |c: ElectorConfig| c.validate().unwrap_err();
        assert!(matches!(
            bad(ElectorConfig::new("", ms(1000))),
            ConfigError::LeaseName(_)
        ));
        assert!(matches!(
            bad(ElectorConfig::new("l", ms(1000)).with_owner("a\0b")),
            ConfigError::Owner(_)
        ));
        assert!(matches!(
            bad(ElectorConfig::new("l", Duration::ZERO)),
            ConfigError::Ttl(_)
        ));
        assert!(matches!(
            bad(ElectorConfig::new("l", ms(5))),
            ConfigError::TtlTooShort { .. }
        ));
        assert!(matches!(
            bad(ElectorConfig::new("l", ms(1000)).with_poll_interval(ms(995))),
            ConfigError::PollInterval { .. }
        ));
        assert!(matches!(
            bad(ElectorConfig::new("l", ms(1000)).with_poll_interval(Duration::ZERO)),
            ConfigError::PollInterval { .. }
        ));
        let err = bad(ElectorConfig::new("l", ms(900)).with_call_timeout(ms(300)));
        assert!(matches!(err, ConfigError::CallTimeout { .. }));
        assert_eq!(
            err.to_string(),
            "invalid call timeout: 300ms must be above zero and below the poll interval (300ms)"
        );
    }
}
