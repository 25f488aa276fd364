//! What an elector's operations can fail with.

use std::fmt;

use tenure_ports::EventStorageError;

use crate::config::ConfigError;

/// An elector operation that did not succeed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ElectorError {
    /// The configuration cannot be run; nothing was started.
    Config(ConfigError),
    /// [`LeaderElector::start`](crate::LeaderElector::start) was called outside a tokio runtime.
    NoRuntime,
    /// The elector has stopped (shut down, aborted, or its task ended).
    Stopped,
    /// The storage did not confirm a release; a held lease expires after its ttl instead.
    Release(EventStorageError),
}

impl fmt::Display for ElectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElectorError::Config(e) => write!(f, "{e}"),
            ElectorError::NoRuntime => {
                f.write_str("a leader elector must be started inside a tokio runtime")
            }
            ElectorError::Stopped => f.write_str("the leader elector has stopped"),
            ElectorError::Release(e) => write!(f, "releasing the lease failed: {e}"),
        }
    }
}

impl std::error::Error for ElectorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ElectorError::Config(e) => Some(e),
            ElectorError::Release(e) => Some(e),
            ElectorError::NoRuntime | ElectorError::Stopped => None,
        }
    }
}

impl From<ConfigError> for ElectorError {
    fn from(error: ConfigError) -> Self {
        ElectorError::Config(error)
    }
}
