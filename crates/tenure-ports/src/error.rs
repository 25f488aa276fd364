//! The one error type of the SPI.

use tenure_domain::{DecisionError, ValidationError};

use crate::Capability;

/// A boxed error kept as the source of an [`EventStorageError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a storage call can fail with.
///
/// The variants say what the caller can do about it:
///
/// * [`InvalidRequest`](Self::InvalidRequest): fix the input; nothing was written.
/// * [`Unsupported`](Self::Unsupported): this backend lacks the capability.
/// * [`Unavailable`](Self::Unavailable): the outcome is **not confirmed** (connection lost,
///   timed out). The call may or may not have taken effect; a lease holder must treat it as a
///   renewal that did not happen.
/// * [`Schema`](Self::Schema), [`Io`](Self::Io), [`Corrupt`](Self::Corrupt): an operator must
///   look.
/// * [`Closed`](Self::Closed): the storage was closed.
/// * [`Internal`](Self::Internal): a bug or an invariant broken.
///
/// Sources are kept: walk [`std::error::Error::source`] for the underlying cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStorageError {
    /// An input breaks the contract; nothing was written.
    #[error(transparent)]
    InvalidRequest(#[from] ValidationError),

    /// The backend does not offer this capability.
    #[error("this storage does not support {0}")]
    Unsupported(Capability),

    /// The storage could not be reached or did not answer in time: the outcome is not confirmed.
    #[error("storage unavailable: {message}")]
    Unavailable {
        /// What happened, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// The storage's schema is missing or not in the expected shape.
    #[error("schema problem: {message}")]
    Schema {
        /// What is missing or wrong, naming each object.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// Reading or writing the storage's files or connection failed.
    #[error("I/O error: {message}")]
    Io {
        /// What was being done.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },

    /// Stored data is damaged.
    #[error("stored data is corrupt: {message}")]
    Corrupt {
        /// What is damaged, and where.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// An append's condition failed: an event matching its query is stored after the position
    /// the condition named. Nothing was appended.
    #[error("append condition failed: event {conflicting} matches the condition's query")]
    AppendConflict {
        /// The position of the first (oldest) conflicting event.
        conflicting: crate::EventPosition,
    },

    /// A fenced write was refused: a newer tenure of the lease (token `newer`) has written
    /// that reader's bookmark or holds the lease. Nothing was written. The writer's tenure has
    /// ended: it must stop, as after a lost lease.
    #[error(
        "bookmark of {reader:?} refused: token {token} of lease {lease_name:?} is superseded by token {newer}"
    )]
    Fenced {
        /// The reader whose bookmark was to be written.
        reader: String,
        /// The lease the write was fenced by.
        lease_name: String,
        /// The write's token.
        token: u64,
        /// The newer token that supersedes it.
        newer: u64,
    },

    /// The storage (or a clone of it) was closed.
    #[error("the storage is closed")]
    Closed,

    /// A bug or a broken invariant.
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

macro_rules! constructors {
    ($($(#[$doc:meta])* $fn:ident, $with:ident => $variant:ident;)*) => {
        impl EventStorageError {
            $(
                $(#[$doc])*
                pub fn $fn(message: impl Into<String>) -> Self {
                    EventStorageError::$variant { message: message.into(), source: None }
                }

                $(#[$doc])*
                ///
                /// Keeps `source` as the error's cause.
                pub fn $with(
                    message: impl Into<String>,
                    source: impl Into<BoxError>,
                ) -> Self {
                    EventStorageError::$variant {
                        message: message.into(),
                        source: Some(source.into()),
                    }
                }
            )*
        }
    };
}

constructors! {
    /// An [`Unavailable`](EventStorageError::Unavailable) error.
    unavailable, unavailable_with => Unavailable;
    /// A [`Schema`](EventStorageError::Schema) error.
    schema, schema_with => Schema;
    /// An [`Io`](EventStorageError::Io) error.
    io, io_with => Io;
    /// A [`Corrupt`](EventStorageError::Corrupt) error.
    corrupt, corrupt_with => Corrupt;
    /// An [`Internal`](EventStorageError::Internal) error.
    internal, internal_with => Internal;
}

impl EventStorageError {
    /// Whether the outcome of the call is unknown (it may or may not have taken effect).
    pub fn is_unconfirmed(&self) -> bool {
        matches!(self, EventStorageError::Unavailable { .. })
    }
}

impl From<DecisionError> for EventStorageError {
    fn from(err: DecisionError) -> Self {
        EventStorageError::internal_with("the lease state machine refused a decision", err)
    }
}
