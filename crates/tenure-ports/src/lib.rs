//! The storage SPI of Tenure: what a backend implements and what an application calls.
//!
//! [`EventStorage`] is the one trait: async, `Send + Sync`, and object safe, so that an
//! application can hold an `Arc<dyn EventStorage>` and switch backends by configuration.
//! [`Capability`] says which optional parts a backend offers; [`EventStorageError`] is the one
//! error type. Embedded backends take their storage clock from a [`Clock`].
//!
//! This crate makes no lease decisions (they live in `tenure-domain`, re-exported here as
//! [`domain`], whose documentation states [the lease contract](domain#the-lease-contract))
//! and contains no backend: see `tenure-memory`, `tenure-file` and `tenure-postgres`, and
//! `tenure-tck` for the conformance kit every backend must pass.
//!
//! # What the SPI adds to the lease contract
//!
//! * **Errors**: one type, [`EventStorageError`]. Invalid input is
//!   [`EventStorageError::InvalidRequest`], returned before anything is written;
//!   [`EventStorageError::Unavailable`] means *not confirmed* (the call may or may not have
//!   taken effect), never *refused*.
//! * **Capabilities**: [`EventStorage::capabilities`] says which optional parts a backend
//!   offers; a method of a part it lacks answers [`EventStorageError::Unsupported`].
//! * **Closing**: [`EventStorage::close`] releases the storage's resources. Every later call,
//!   on it or on any clone of it, fails with [`EventStorageError::Closed`], never a panic or a
//!   hang; closing twice is harmless. Leases held through a closed storage are not released
//!   by the close (a holder that wants a fast handover releases first): they expire.
//! * **Cancel safety**: dropping a lease call's future leaves its outcome unknown, exactly as
//!   a timeout does; the storage stays consistent.
//! * **Sightings**: a backend whose storage clock is another machine's (a database server's)
//!   keeps what each of its owners saw of their leases' tenures in a [`Sightings`], on the
//!   caller's monotonic clock: [`Sightings::before`] goes with each request, and
//!   [`Sightings::after`] records each answer. It decides with
//!   [`decide_request_sighted`](domain::decide_request_sighted), so that a takeover of a lease
//!   that merely expired waits for a whole ttl of the caller's own sighting (rule 5 of the
//!   contract). That costs up to one ttl for a contender that first sees a lease after it
//!   expired without a release; a released lease is taken over at once.
//! * **Backing off**: a caller that retries after failures (the elector for a contender
//!   without a tenure, an adapter reconnecting) waits as [`Backoff`] says: jittered, doubling,
//!   capped, so that callers failed at once by an overload do not retry in step.
//!
//! # Writing a backend
//!
//! Implement [`EventStorage`]: `name` and `capabilities` are required; every lease method has a
//! default body that returns [`EventStorageError::Unsupported`], so an adapter without leases
//! compiles and the conformance kit skips its lease scenarios. A backend that offers leases:
//!
//! 1. validates every input ([`LeaseRequest::validate`], [`LeaseName::new`], [`Owner::new`])
//!    and returns [`EventStorageError::InvalidRequest`] before writing anything;
//! 2. serializes the calls on one lease, reads the record, the lease's contenders and `now`
//!    from its own clock;
//! 3. applies [`decide_request`](domain::decide_request) or
//!    [`decide_release`](domain::decide_release), writing exactly what the outcome says.
//!
//! Then it runs `tenure_tck::tck_suite!` in a test target with `harness = false`.

#![deny(missing_docs)]

mod backoff;
mod capability;
mod changes;
mod clock;
mod error;
mod events;
mod fenced;
mod lease;
mod sightings;

pub use async_trait::async_trait;
pub use backoff::Backoff;
pub use capability::{Capabilities, Capability};
pub use changes::{LeaseChange, LeaseChangeKind, LeaseChanges};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{BoxError, EventStorageError};
pub use events::{
    AppendCondition, AppendRequest, Bookmark, Direction, EventId, EventPosition, EventQuery,
    MAX_APPEND_EVENTS, MAX_PAYLOAD_DEPTH, MAX_READ_LIMIT, MAX_TAGS, NewEvent, ReadOptions,
    StoredEvent, normalize_tags, validate_bookmark, validate_reader,
};
pub use fenced::Fence;
pub use sightings::{LastAnswer, Sightings};

pub use lease::{
    Contender, FencingToken, Lease, LeaseName, LeaseRequest, LeaseResponse, LeaseSnapshot,
    LeaseStatus, Owner, Timestamp, sort_contenders,
};
/// The lease rules, re-exported so that a backend needs only this crate.
pub use tenure_domain as domain;
pub use tenure_domain::Sighting;

/// A storage of events, bookmarks and leases.
///
/// Every method may be called concurrently from many tasks and threads, on the same value or
/// on clones of it. Errors follow [`EventStorageError`]; in particular
/// [`EventStorageError::Unavailable`] means "not confirmed", never "refused".
///
/// # Cancel safety
///
/// Dropping a lease call's future before it completes leaves the outcome unknown, exactly as
/// a timeout does: the call may or may not have taken effect. The storage stays consistent.
#[async_trait]
pub trait EventStorage: Send + Sync + std::fmt::Debug {
    /// A short name of the backend, e.g. `memory` or `postgres`.
    fn name(&self) -> &str;

    /// The optional parts of the SPI this backend offers.
    fn capabilities(&self) -> Capabilities;

    /// Acquires, renews, or registers as a contender for a lease, in one atomic step, and says
    /// what the caller should do, by the rules of
    /// [the lease contract](crate::domain#the-lease-contract).
    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let _ = request;
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Releases `lease_name` if `owner` holds it (it is expired at once, keeping its token) and
    /// withdraws `owner`'s registration. Releasing a lease one does not hold does nothing and
    /// is not an error.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        let _ = (lease_name, owner);
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Every lease record, expired ones included, with the storage's `now`.
    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// The live contenders of `lease_name` (the holder included, if it is still requesting),
    /// ordered by priority, highest first, then by owner.
    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        let _ = lease_name;
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Appends a batch of events atomically and returns them as stored, with consecutive
    /// positions in the order given. With a condition, fails with
    /// [`EventStorageError::AppendConflict`] (storing nothing) if the condition's query matches
    /// an event after its position. With an idempotency key already stored, returns the events
    /// stored under it the first time and stores nothing.
    async fn append(&self, request: &AppendRequest) -> Result<Vec<StoredEvent>, EventStorageError> {
        let _ = request;
        Err(EventStorageError::Unsupported(Capability::Events))
    }

    /// Reads at most `options.limit` events matching `query`, from `options.start` (exclusive)
    /// in `options.direction`. A reader never sees a position beyond an event that is not yet
    /// visible, so reading on from the last position returned never skips an event. For a log
    /// larger than one batch, use [`EventCursor`].
    ///
    /// An event that the backend cannot decode (one written past its validation, by another
    /// writer) ends a read early: the events before it are returned, and a read that would
    /// return it first fails with [`EventStorageError::Corrupt`] naming its position, so that
    /// one such event never hides the ones before it.
    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        let _ = (query, options);
        Err(EventStorageError::Unsupported(Capability::Events))
    }

    /// Places `reader`'s bookmark at `position`, which must be the position of a stored event
    /// (else [`EventStorageError::InvalidRequest`] naming `position`). Returns it as stored.
    async fn bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        let _ = (reader, position, tags);
        Err(EventStorageError::Unsupported(Capability::Bookmarks))
    }

    /// Places `reader`'s bookmark at `position` as [`bookmark`](Self::bookmark) does, under
    /// the tenure `fence` (see [`Fence`]): refused with [`EventStorageError::Fenced`], writing
    /// nothing, when a higher token of that lease has written this reader's bookmark, or the
    /// lease's current tenure has a higher token. Atomic: no other write of the bookmark and
    /// no acquisition of the lease comes between the check and the write. Storages without
    /// [`Capability::FencedBookmarks`] answer [`EventStorageError::Unsupported`].
    async fn bookmark_fenced(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
    ) -> Result<Bookmark, EventStorageError> {
        let _ = (reader, position, tags, fence);
        Err(EventStorageError::Unsupported(Capability::FencedBookmarks))
    }

    /// `reader`'s bookmark, if it has one.
    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        let _ = reader;
        Err(EventStorageError::Unsupported(Capability::Bookmarks))
    }

    /// Removes `reader`'s bookmark. Removing one that does not exist is not an error.
    async fn remove_bookmark(&self, reader: &str) -> Result<(), EventStorageError> {
        let _ = reader;
        Err(EventStorageError::Unsupported(Capability::Bookmarks))
    }

    /// Every bookmark, ordered by reader.
    async fn get_bookmarks(&self) -> Result<Vec<Bookmark>, EventStorageError> {
        Err(EventStorageError::Unsupported(Capability::Bookmarks))
    }

    /// A subscription to this storage's lease changes (see [`LeaseChanges`]), for callers
    /// that want to act on a release or a step-down request at once rather than at their next
    /// poll. Storages without [`Capability::LeaseChanges`] answer
    /// [`EventStorageError::Unsupported`] (the default), and callers keep polling.
    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        Err(EventStorageError::Unsupported(Capability::LeaseChanges))
    }

    /// Releases the storage's resources. Every later call, on this value or on any clone of
    /// it, fails with [`EventStorageError::Closed`]. Closing twice is harmless. Leases held
    /// through the storage are not released by closing it: they expire.
    async fn close(&self) -> Result<(), EventStorageError> {
        Ok(())
    }
}

/// Reads a query's events batch by batch, so that a large log never has to fit in memory.
///
/// ```
/// # async fn example(storage: &dyn tenure_ports::EventStorage) -> Result<(), tenure_ports::EventStorageError> {
/// use tenure_ports::{EventCursor, EventQuery, ReadOptions};
/// let mut cursor = EventCursor::new(storage, EventQuery::all(), ReadOptions::forwards());
/// while let Some(batch) = cursor.next_batch().await? {
///     for event in batch {
///         println!("{} {}", event.position, event.event_type);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EventCursor<'a> {
    storage: &'a dyn EventStorage,
    query: EventQuery,
    options: ReadOptions,
    done: bool,
}

impl<'a> EventCursor<'a> {
    /// A cursor over `query`'s events, starting at `options.start`, `options.limit` at a time.
    pub fn new(storage: &'a dyn EventStorage, query: EventQuery, options: ReadOptions) -> Self {
        EventCursor {
            storage,
            query,
            options,
            done: false,
        }
    }

    /// The next batch, or `None` once the log is exhausted. After an error the cursor can be
    /// asked again: it resumes after the last batch it returned.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<StoredEvent>>, EventStorageError> {
        if self.done {
            return Ok(None);
        }
        let batch = self.storage.read_events(&self.query, self.options).await?;
        match batch.last() {
            None => {
                self.done = true;
                Ok(None)
            }
            Some(last) => {
                self.options.start = Some(last.position);
                if batch.len() < self.options.limit {
                    self.done = true;
                }
                Ok(Some(batch))
            }
        }
    }

    /// The position the next batch starts after.
    pub fn position(&self) -> Option<EventPosition> {
        self.options.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Bare;

    #[async_trait]
    impl EventStorage for Bare {
        fn name(&self) -> &str {
            "bare"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }
    }

    fn assert_send_sync<T: Send + Sync>(_: &T) {}

    #[tokio::test]
    async fn defaults_are_unsupported_and_dyn_works_across_spawn() {
        let storage: Arc<dyn EventStorage> = Arc::new(Bare);
        assert_send_sync(&storage);
        let handle = tokio::spawn({
            let storage = Arc::clone(&storage);
            async move {
                storage
                    .request_lease(&LeaseRequest::new(
                        "l",
                        "o",
                        0,
                        std::time::Duration::from_secs(1),
                    ))
                    .await
            }
        });
        let result = handle.await.unwrap();
        assert!(matches!(
            result,
            Err(EventStorageError::Unsupported(Capability::Lease))
        ));
        assert!(matches!(
            storage.release_lease("l", "o").await,
            Err(EventStorageError::Unsupported(Capability::Lease))
        ));
        assert!(storage.get_leases().await.is_err());
        assert!(storage.get_lease_contenders("l").await.is_err());
        assert!(storage.close().await.is_ok());
        assert_eq!(storage.name(), "bare");
    }

    #[test]
    fn errors_keep_their_source() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let err = EventStorageError::unavailable_with("request_lease", io);
        assert!(err.is_unconfirmed());
        assert_eq!(err.to_string(), "storage unavailable: request_lease");
        assert_eq!(err.source().unwrap().to_string(), "reset by peer");
        let invalid: EventStorageError = tenure_domain::LeaseName::new("").unwrap_err().into();
        assert_eq!(invalid.to_string(), "invalid lease_name: must not be empty");
    }

    #[test]
    fn system_clock_never_goes_backwards() {
        let clock = SystemClock::new();
        let mut last = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }
}
