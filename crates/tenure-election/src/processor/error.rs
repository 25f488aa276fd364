//! What a running processor can stop with.

use std::fmt;

use tenure_ports::{EventPosition, EventStorageError, FencingToken};

use crate::error::ElectorError;

/// Why [`Processor::run`](crate::Processor::run) stopped. `E` is the projection's error.
///
/// A storage call that is not confirmed ([`EventStorageError::Unavailable`], or no answer
/// within the call timeout) does not stop the processor: it is logged and retried after the
/// idle poll, from the bookmark as stored. Everything here is something a retry would not
/// fix by itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProcessorError<E> {
    /// The projection failed a batch. The bookmark was not moved past it, and the lease is
    /// still held: run again to retry from the bookmark, or shut the elector down to hand
    /// over.
    Projection {
        /// The projection's error.
        error: E,
        /// The tenure the batch was projected under.
        token: FencingToken,
        /// The batch's first position.
        first: EventPosition,
        /// The batch's last position.
        last: EventPosition,
    },
    /// The storage refused a call for a reason other than being unavailable (it is closed,
    /// corrupt, or misconfigured).
    Storage {
        /// The call: `get_bookmark`, `read_events` or `bookmark`.
        operation: &'static str,
        /// The storage's error.
        error: EventStorageError,
    },
    /// The elector has stopped (shut down or aborted): nobody campaigns for the lease.
    Elector(ElectorError),
}

impl<E: fmt::Display> fmt::Display for ProcessorError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessorError::Projection {
                error,
                token,
                first,
                last,
            } => write!(
                f,
                "the projection failed on events {first} to {last} (token {token}): {error}"
            ),
            ProcessorError::Storage { operation, error } => {
                write!(f, "{operation} failed: {error}")
            }
            ProcessorError::Elector(error) => write!(f, "{error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ProcessorError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcessorError::Projection { error, .. } => Some(error),
            ProcessorError::Storage { error, .. } => Some(error),
            ProcessorError::Elector(error) => Some(error),
        }
    }
}

impl<E> From<ElectorError> for ProcessorError<E> {
    fn from(error: ElectorError) -> Self {
        ProcessorError::Elector(error)
    }
}
