//! The storage: the [`EventStorage`] implementation, on whichever driver it was built with.
//!
//! [`PostgresEventStorage`] holds one [`Adapter`] over one driver; every call goes, by one
//! `match`, to the same generic code (`lease`, `events`) monomorphized for that driver. No
//! call is boxed, and a build with one driver compiles no code of the other.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Capability, Contender, EventPosition, EventQuery,
    EventStorage, EventStorageError, Fence, LeaseChanges, LeaseRequest, LeaseResponse,
    LeaseSnapshot, ReadOptions, Sightings, StoredEvent, async_trait,
};

use crate::changes::Notifications;
use crate::connection::{Driver, Link};
use crate::events::{self, EventStatements};
use crate::lease::{self, Carpools, Clock, LeaseStatements, Version};
use crate::prefix::TablePrefix;

/// The driver a storage talks to PostgreSQL through (see the crate's features).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum PostgresDriver {
    /// tokio-postgres 0.7 through a deadpool-postgres 0.14 pool (feature `deadpool`, on by
    /// default).
    #[cfg(feature = "deadpool")]
    Deadpool,
    /// sqlx 0.9 through a `sqlx::PgPool` (feature `sqlx-0_9`).
    #[cfg(feature = "sqlx-0_9")]
    Sqlx09,
}

impl PostgresDriver {
    /// A short name: `deadpool` or `sqlx-0.9`.
    pub fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "deadpool")]
            PostgresDriver::Deadpool => "deadpool",
            #[cfg(feature = "sqlx-0_9")]
            PostgresDriver::Sqlx09 => "sqlx-0.9",
        }
    }
}

impl fmt::Display for PostgresDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a storage needs on one driver: the driver with its timeout, and the statements.
pub(crate) struct Adapter<D: Driver> {
    pub(crate) link: Arc<Link<D>>,
    pub(crate) prefix: TablePrefix,
    pub(crate) leases: LeaseStatements,
    pub(crate) events: EventStatements,
    pub(crate) visibility_wait: Duration,
    /// What this storage's owners saw of their leases' tenures (sent with each request).
    pub(crate) sightings: Sightings,
    /// The lease requests waiting for a connection, to be carried together.
    pub(crate) carpools: Carpools<D::Row>,
    /// Call `request_lease_v1` as a process of the previous release does (tests only).
    #[cfg(feature = "testing")]
    pub(crate) calls_v1: std::sync::atomic::AtomicBool,
}

impl<D: Driver> Adapter<D> {
    pub(crate) fn new(link: Link<D>, prefix: TablePrefix, visibility_wait: Duration) -> Self {
        Adapter {
            link: Arc::new(link),
            leases: LeaseStatements::new(&prefix),
            events: EventStatements::new(&prefix),
            prefix,
            visibility_wait,
            sightings: Sightings::new(),
            carpools: Carpools::default(),
            #[cfg(feature = "testing")]
            calls_v1: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// How a request of this storage is made: `request_lease_v4` or `_v5` with its sightings.
    pub(crate) fn version(&self) -> Version<'_> {
        #[cfg(feature = "testing")]
        if self.calls_v1.load(std::sync::atomic::Ordering::Relaxed) {
            return Version::V1;
        }
        Version::Current(&self.sightings)
    }
}

/// The adapter on the driver the storage was built with.
pub(crate) enum Engine {
    #[cfg(feature = "deadpool")]
    Deadpool(Adapter<crate::connection::deadpool::Deadpool>),
    #[cfg(feature = "sqlx-0_9")]
    Sqlx09(Adapter<crate::connection::sqlx::Sqlx>),
}

/// Runs `$body` with `$a` bound to the storage's [`Adapter`], whichever its driver.
macro_rules! on_adapter {
    ($engine:expr, $a:ident => $body:expr) => {
        match $engine {
            #[cfg(feature = "deadpool")]
            Engine::Deadpool($a) => $body,
            #[cfg(feature = "sqlx-0_9")]
            Engine::Sqlx09($a) => $body,
        }
    };
}
pub(crate) use on_adapter;

/// Leases, an event log and bookmarks in PostgreSQL, one short transaction per call on a pool,
/// on the database's clock.
///
/// Leases live in `<prefix>leases` and `<prefix>lease_contenders`, each call serialized per
/// lease by a transaction-scoped advisory lock. Events live in `<prefix>events` (with
/// `<prefix>event_keys` for idempotency keys) and bookmarks in `<prefix>bookmarks`; reads stay
/// behind the oldest transaction in flight (the `pg_snapshot_xmin` barrier), so that reading on
/// from the last position returned never skips an event. `docs/postgres.md` has the details.
///
/// Build one with [`PostgresEventStorage::builder`], on either driver: the SQL, the decoding
/// of the answers, the schema modes and the errors are the same. Clones share the pool;
/// closing one closes them all.
#[derive(Clone)]
pub struct PostgresEventStorage {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    target: String,
    /// The wake-ups (`changes`): the listener's connection, if on and started.
    changes: Notifications,
}

impl fmt::Debug for PostgresEventStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = &self.inner.engine;
        f.debug_struct("PostgresEventStorage")
            .field("driver", &self.driver())
            .field("target", &self.inner.target)
            .field("prefix", &self.prefix().as_str())
            .field("call_timeout", &self.call_timeout())
            .field("closed", &on_adapter!(engine, a => a.link.is_closed()))
            .field("notifications", &self.inner.changes)
            .finish()
    }
}

impl PostgresEventStorage {
    pub(crate) fn new(engine: Engine, target: String, changes: Notifications) -> Self {
        PostgresEventStorage {
            inner: Arc::new(Inner {
                engine,
                target,
                changes,
            }),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The driver the storage uses.
    pub fn driver(&self) -> PostgresDriver {
        match self.inner.engine {
            #[cfg(feature = "deadpool")]
            Engine::Deadpool(_) => PostgresDriver::Deadpool,
            #[cfg(feature = "sqlx-0_9")]
            Engine::Sqlx09(_) => PostgresDriver::Sqlx09,
        }
    }

    /// The table prefix.
    pub fn prefix(&self) -> &TablePrefix {
        on_adapter!(&self.inner.engine, a => &a.prefix)
    }

    /// The bound on one call.
    pub fn call_timeout(&self) -> Duration {
        on_adapter!(&self.inner.engine, a => a.link.call_timeout())
    }

    /// How long a read may wait for older transactions to finish so that it returns the events
    /// committed before it (see
    /// [`PostgresEventStorageBuilder::visibility_wait`](crate::PostgresEventStorageBuilder::visibility_wait)).
    pub fn visibility_wait(&self) -> Duration {
        on_adapter!(&self.inner.engine, a => a.visibility_wait)
    }

    /// Marks the storage closed, and closes the pool if the storage built it.
    pub(crate) fn close_now(&self) {
        on_adapter!(&self.inner.engine, a => a.link.close());
        self.inner.changes.close();
    }

    /// Starts the listener (when the storage has wake-ups) and waits, at most `patience`,
    /// until it listens or its first attempt failed.
    pub(crate) async fn start_notifications(&self, patience: Duration) {
        self.inner.changes.start(patience).await;
    }
}

#[async_trait]
impl EventStorage for PostgresEventStorage {
    fn name(&self) -> &str {
        "postgres"
    }

    /// Every capability; [`Capability::LeaseChanges`] unless notifications are off
    /// ([`notifications`](crate::PostgresEventStorageBuilder::notifications)) or the storage
    /// was built on an application's deadpool pool (whose connection settings it cannot
    /// read).
    fn capabilities(&self) -> Capabilities {
        let mut capabilities = Capabilities::from([
            Capability::Lease,
            Capability::Events,
            Capability::Bookmarks,
            Capability::FencedBookmarks,
        ]);
        if self.inner.changes.available() {
            capabilities = capabilities.with(Capability::LeaseChanges);
        }
        capabilities
    }

    /// A subscription to the lease changes that the triggers of the schema notify on
    /// `<prefix>lease_changes`, received by the storage's one listening connection (opened when
    /// the storage is built, with the storage's connection settings and TLS, and
    /// `application_name` `<application_name>-listener`). Every change committed after the
    /// subscription was taken reaches it while the listener is connected; after each
    /// reconnection of the listener every subscription receives
    /// [`LeaseChange::Missed`](tenure_ports::LeaseChange::Missed): notifications sent while it
    /// was disconnected are lost. Must be called within a tokio
    /// runtime; fails with `Closed` once the storage is closed, and with `Unsupported` when
    /// the storage has no [`Capability::LeaseChanges`].
    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        if on_adapter!(self.engine(), a => a.link.is_closed()) {
            return Err(EventStorageError::Closed);
        }
        self.inner.changes.subscribe()
    }

    /// One call of the `<prefix>request_lease_v4` function (or `_v5`, which decides the same
    /// and answers a standby with a fresh registration at less cost, when the owner did not
    /// hold the lease at its last answer), in autocommit, with this
    /// storage's sighting of the lease's tenure (a takeover of a lease that expired without a
    /// release waits until the owner has seen that tenure unchanged for a ttl on this
    /// process's monotonic clock; see `docs/postgres.md`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (or hitting the call timeout) leaves the outcome unknown: the
    /// server may still complete the call. A statement in flight is then cancelled or its
    /// connection closed, never reused before it is known to be over; but a call that carries
    /// other requests waiting for a connection goes on in its own task, so that those get their
    /// answers.
    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::request(&a.link, &a.leases, &a.carpools, request, Clock::Database, a.version())
                .await
                .map(|(_, response)| response)
        })
    }

    /// One call of the `<prefix>release_lease_v1` function, in autocommit.
    ///
    /// # Cancel safety
    ///
    /// As for [`request_lease`](Self::request_lease): the outcome of a dropped call is unknown.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        on_adapter!(self.engine(), a => {
            let released = lease::release(&a.link, &a.leases, lease_name, owner, Clock::Database)
                .await
                .map(|_| ());
            if released.is_ok() {
                a.sightings.forget(lease_name, owner);
            }
            released
        })
    }

    /// One read of the leases table, with the database's `now()`.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        on_adapter!(self.engine(), a => lease::leases(&a.link, &a.leases).await)
    }

    /// One read of the contenders of `lease_name`, judged live on the database's `now()`.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::contenders(&a.link, &a.leases, lease_name, Clock::Database).await
        })
    }

    /// One call of the `<prefix>append_events_v1` function, in autocommit: the batch is stored
    /// atomically with consecutive positions, one instant of the database clock, and ids made
    /// by `gen_random_uuid()`. A conditional append is serialized with every other append of
    /// the prefix (see `docs/postgres.md`); an unconditional one only with conditional ones.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (or hitting the call timeout) leaves the outcome unknown: the
    /// server may still commit the batch. Retry with the same idempotency key to find out.
    async fn append(&self, request: &AppendRequest) -> Result<Vec<StoredEvent>, EventStorageError> {
        on_adapter!(self.engine(), a => events::append(&a.link, &a.events, request).await)
    }

    /// One statement, behind the barrier: only events whose writing transaction is older than
    /// every transaction still in flight. If the barrier hides committed events the read
    /// needs, it waits for at most the [visibility
    /// wait](crate::PostgresEventStorageBuilder::visibility_wait) and reads again.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        on_adapter!(self.engine(), a => {
            events::read(&a.link, &a.events, query, options, a.visibility_wait).await
        })
    }

    /// One upsert, on the database clock, written only if `position` is a stored event.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the outcome unknown, as for an append.
    async fn bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        on_adapter!(self.engine(), a => {
            events::place_bookmark(&a.link, &a.events, reader, position, tags).await
        })
    }

    /// One statement: the lease's row is locked while the reader's fence and the lease's token
    /// are compared with `fence` and the bookmark is written, so that no acquisition and no
    /// other fenced write comes between them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the outcome unknown, as for an unfenced bookmark.
    async fn bookmark_fenced(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
    ) -> Result<Bookmark, EventStorageError> {
        on_adapter!(self.engine(), a => {
            events::place_bookmark_fenced(&a.link, &a.events, reader, position, tags, fence).await
        })
    }

    /// One read of `<prefix>bookmarks`.
    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        on_adapter!(self.engine(), a => events::bookmark(&a.link, &a.events, reader).await)
    }

    /// One delete; removing a bookmark that does not exist does nothing.
    async fn remove_bookmark(&self, reader: &str) -> Result<(), EventStorageError> {
        on_adapter!(self.engine(), a => events::remove_bookmark(&a.link, &a.events, reader).await)
    }

    /// One read of `<prefix>bookmarks`, ordered by reader (byte order).
    async fn get_bookmarks(&self) -> Result<Vec<Bookmark>, EventStorageError> {
        on_adapter!(self.engine(), a => events::bookmarks(&a.link, &a.events).await)
    }

    /// Marks the storage (and every clone) closed and, if the storage built its own pool,
    /// closes the pool: idle connections are closed at once, busy ones when their call ends.
    /// A pool passed in with
    /// [`pool`](crate::PostgresEventStorageBuilder::pool) stays open.
    async fn close(&self) -> Result<(), EventStorageError> {
        self.close_now();
        Ok(())
    }
}
