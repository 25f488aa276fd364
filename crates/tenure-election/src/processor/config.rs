//! What a processor is told: which reader's bookmark it moves, which events it reads, how many
//! at a time, and how long it waits when it has caught up.

use std::fmt;
use std::time::Duration;

use tenure_ports::domain::ValidationError;
use tenure_ports::{Capability, EventQuery, MAX_READ_LIMIT, ReadOptions, validate_bookmark};

/// The batch size when none is configured.
pub const DEFAULT_BATCH_SIZE: usize = 100;

/// The idle poll when none is configured.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_millis(500);

/// The storage-call timeout when none is configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`Processor`](crate::Processor) reads and bookmarks. Build it with
/// [`ProcessorConfig::new`] and the `with_*` methods;
/// [`Processor::new`](crate::Processor::new) validates it.
///
/// | setting | default |
/// |---|---|
/// | reader (the bookmark's key) | (required) |
/// | query | every event ([`EventQuery::all`]) |
/// | batch size | [`DEFAULT_BATCH_SIZE`] (100), at most [`MAX_READ_LIMIT`] |
/// | idle poll | [`DEFAULT_IDLE_POLL`] (500 ms): the wait before reading again once caught up |
/// | call timeout | [`DEFAULT_CALL_TIMEOUT`] (10 s): a storage call that takes longer counts as unavailable |
/// | bookmark tags | none |
///
/// ```
/// use std::time::Duration;
/// use tenure_election::ProcessorConfig;
/// use tenure_ports::EventQuery;
/// let config = ProcessorConfig::new("order-dispatcher")
///     .with_query(EventQuery::all().of_type("OrderPlaced"))
///     .with_batch_size(500)
///     .with_idle_poll(Duration::from_millis(200));
/// config.validate()?;
/// assert_eq!(config.batch_size(), 500);
/// # Ok::<(), tenure_election::ProcessorConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProcessorConfig {
    reader: String,
    query: EventQuery,
    batch_size: usize,
    idle_poll: Duration,
    call_timeout: Duration,
    bookmark_tags: Vec<String>,
}

impl ProcessorConfig {
    /// A configuration for the bookmark of `reader`, every other setting at its default.
    ///
    /// The reader names the position, not the instance: every replica of one processor uses
    /// the same reader (usually the lease's name), so that whoever holds the lease resumes
    /// where the previous holder left off.
    pub fn new(reader: impl Into<String>) -> Self {
        ProcessorConfig {
            reader: reader.into(),
            query: EventQuery::all(),
            batch_size: DEFAULT_BATCH_SIZE,
            idle_poll: DEFAULT_IDLE_POLL,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            bookmark_tags: Vec::new(),
        }
    }

    /// Which events to process. The bookmark is placed on the last event of each batch, so
    /// it always points at an event this query matched.
    #[must_use]
    pub fn with_query(mut self, query: EventQuery) -> Self {
        self.query = query;
        self
    }

    /// The most events read, projected and bookmarked at a time (1 to [`MAX_READ_LIMIT`]).
    /// It bounds what is projected twice after a crash, and how many bookmark writes are
    /// made.
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// How long to wait before reading again after a read found fewer events than a batch
    /// (caught up), and before retrying after a storage call was not confirmed.
    #[must_use]
    pub fn with_idle_poll(mut self, idle_poll: Duration) -> Self {
        self.idle_poll = idle_poll;
        self
    }

    /// How long one storage call (reading the bookmark, reading a batch, writing the
    /// bookmark) may take before it counts as unavailable and is retried.
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// Tags written with every bookmark.
    #[must_use]
    pub fn with_bookmark_tags(mut self, tags: Vec<String>) -> Self {
        self.bookmark_tags = tags;
        self
    }

    /// The reader whose bookmark is moved.
    pub fn reader(&self) -> &str {
        &self.reader
    }

    /// The events processed.
    pub fn query(&self) -> &EventQuery {
        &self.query
    }

    /// The most events per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The wait once caught up.
    pub fn idle_poll(&self) -> Duration {
        self.idle_poll
    }

    /// The longest one storage call may take.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The tags written with every bookmark.
    pub fn bookmark_tags(&self) -> &[String] {
        &self.bookmark_tags
    }

    /// The options of the read that follows `start`.
    pub(crate) fn read_options(&self, start: Option<tenure_ports::EventPosition>) -> ReadOptions {
        ReadOptions::forwards()
            .starting_after(start)
            .with_limit(self.batch_size)
    }

    /// Checks every setting with the storage's own rules, so that no storage call made by the
    /// processor can be refused as invalid input.
    pub fn validate(&self) -> Result<(), ProcessorConfigError> {
        validate_bookmark(&self.reader, &self.bookmark_tags)
            .map_err(ProcessorConfigError::Reader)?;
        self.query.validate().map_err(ProcessorConfigError::Query)?;
        if self.batch_size == 0 || self.batch_size > MAX_READ_LIMIT {
            return Err(ProcessorConfigError::BatchSize {
                batch_size: self.batch_size,
            });
        }
        if self.idle_poll.is_zero() {
            return Err(ProcessorConfigError::IdlePoll);
        }
        if self.call_timeout.is_zero() {
            return Err(ProcessorConfigError::CallTimeout);
        }
        Ok(())
    }
}

/// A processor that cannot run; nothing was started.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ProcessorConfigError {
    /// The reader or a bookmark tag breaks the storage's rules.
    Reader(ValidationError),
    /// A stream, type or tag of the query breaks the storage's rules.
    Query(ValidationError),
    /// The batch size is 0 or above [`MAX_READ_LIMIT`].
    BatchSize {
        /// The batch size given.
        batch_size: usize,
    },
    /// The idle poll is zero.
    IdlePoll,
    /// The call timeout is zero.
    CallTimeout,
    /// The storage does not offer the event log or bookmarks.
    Unsupported(Capability),
}

impl fmt::Display for ProcessorConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessorConfigError::Reader(e) | ProcessorConfigError::Query(e) => write!(f, "{e}"),
            ProcessorConfigError::BatchSize { batch_size } => write!(
                f,
                "invalid batch size: {batch_size} must be between 1 and {MAX_READ_LIMIT}"
            ),
            ProcessorConfigError::IdlePoll => f.write_str("invalid idle poll: must be above zero"),
            ProcessorConfigError::CallTimeout => {
                f.write_str("invalid call timeout: must be above zero")
            }
            ProcessorConfigError::Unsupported(capability) => {
                write!(f, "a processor needs a storage that supports {capability}")
            }
        }
    }
}

impl std::error::Error for ProcessorConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcessorConfigError::Reader(e) | ProcessorConfigError::Query(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_setting_is_named() {
        let bad = |c: ProcessorConfig| c.validate().unwrap_err();
        assert!(matches!(
            bad(ProcessorConfig::new("")),
            ProcessorConfigError::Reader(_)
        ));
        assert!(matches!(
            bad(ProcessorConfig::new("r").with_bookmark_tags(vec!["a\0".into()])),
            ProcessorConfigError::Reader(_)
        ));
        assert!(matches!(
            bad(ProcessorConfig::new("r").with_query(EventQuery::stream(""))),
            ProcessorConfigError::Query(_)
        ));
        for batch_size in [0, MAX_READ_LIMIT + 1] {
            assert_eq!(
                bad(ProcessorConfig::new("r").with_batch_size(batch_size)),
                ProcessorConfigError::BatchSize { batch_size }
            );
        }
        assert_eq!(
            bad(ProcessorConfig::new("r").with_idle_poll(Duration::ZERO)),
            ProcessorConfigError::IdlePoll
        );
        assert_eq!(
            bad(ProcessorConfig::new("r").with_call_timeout(Duration::ZERO)),
            ProcessorConfigError::CallTimeout
        );
        assert!(
            ProcessorConfig::new("r")
                .with_batch_size(MAX_READ_LIMIT)
                .validate()
                .is_ok()
        );
    }
}
