//! How a scenario says that a check did not hold.

use std::fmt;

use tenure_ports::EventStorageError;

/// Why a scenario failed: a check that did not hold, or a call that should have succeeded.
#[derive(Debug)]
pub struct Failure(String);

impl Failure {
    /// A failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Failure(message.into())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<EventStorageError> for Failure {
    fn from(err: EventStorageError) -> Self {
        let mut message = format!("a storage call failed: {err}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Failure(message)
    }
}

/// Fails the scenario with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::check::Failure::new(format!($($arg)+)));
        }
    };
}

/// Fails the scenario unless `left == right`, showing both and what was checked.
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (left, right) => {
                if left != right {
                    return Err($crate::check::Failure::new(format!(
                        "{}: expected {:?}, got {:?}",
                        format!($($arg)+),
                        right,
                        left
                    )));
                }
            }
        }
    };
}

pub(crate) use {ensure, ensure_eq};
