//! The storage: one statement per call (a function call for lease calls and appends), on a
//! pooled connection, within a deadline.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tenure_ports::domain::{Field, Reason, Transition, ValidationError};
use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Capability, Contender, Direction, EventPosition,
    EventQuery, EventStorage, EventStorageError, LeaseName, LeaseRequest, LeaseResponse,
    LeaseSnapshot, Owner, ReadOptions, StoredEvent, Timestamp, async_trait, normalize_tags,
    sort_contenders, validate_bookmark, validate_reader,
};
use tokio::time::Instant;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::builder::PostgresEventStorageBuilder;
use crate::error::{connection_broken, from_pg, from_pool};
use crate::events::{self, EventStatements, TAG_SEPARATOR};
use crate::ops::{self, Statements};
use crate::prefix::TablePrefix;

/// Leases, an event log and bookmarks in PostgreSQL, one short transaction per call on a pool,
/// on the database's clock.
///
/// Leases live in `<prefix>leases` and `<prefix>lease_contenders`, each call serialized per
/// lease by a transaction-scoped advisory lock. Events live in `<prefix>events` (with
/// `<prefix>event_keys` for idempotency keys) and bookmarks in `<prefix>bookmarks`; reads stay
/// behind the oldest transaction in flight (the `pg_snapshot_xmin` barrier), so that reading on
/// from the last position returned never skips an event. `docs/postgres.md` has the details.
///
/// Build one with [`PostgresEventStorage::builder`]. Clones share the pool; closing one closes
/// them all.
#[derive(Clone)]
pub struct PostgresEventStorage {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    prefix: TablePrefix,
    statements: Statements,
    events: EventStatements,
    call_timeout: Duration,
    visibility_wait: Duration,
    owns_pool: bool,
    target: String,
    closed: AtomicBool,
}

impl fmt::Debug for PostgresEventStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresEventStorage")
            .field("target", &self.inner.target)
            .field("prefix", &self.inner.prefix.as_str())
            .field("call_timeout", &self.inner.call_timeout)
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl PostgresEventStorage {
    /// A builder: give it [`url`](PostgresEventStorageBuilder::url) or
    /// [`pool`](PostgresEventStorageBuilder::pool), then
    /// [`build`](PostgresEventStorageBuilder::build).
    pub fn builder() -> PostgresEventStorageBuilder {
        PostgresEventStorageBuilder::default()
    }

    pub(crate) fn new(
        pool: Pool,
        prefix: TablePrefix,
        call_timeout: Duration,
        visibility_wait: Duration,
        owns_pool: bool,
        target: String,
    ) -> Self {
        PostgresEventStorage {
            inner: Arc::new(Inner {
                pool,
                statements: Statements::new(&prefix),
                events: EventStatements::new(&prefix),
                prefix,
                call_timeout,
                visibility_wait,
                owns_pool,
                target,
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The table prefix.
    pub fn prefix(&self) -> &TablePrefix {
        &self.inner.prefix
    }

    /// The pool the storage uses.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The bound on one call.
    pub fn call_timeout(&self) -> Duration {
        self.inner.call_timeout
    }

    /// How long a read may wait for older transactions to finish so that it returns the events
    /// committed before it (see [`PostgresEventStorageBuilder::visibility_wait`]).
    pub fn visibility_wait(&self) -> Duration {
        self.inner.visibility_wait
    }

    pub(crate) fn close_pool_if_owned(&self) {
        self.inner.closed.store(true, Ordering::Release);
        if self.inner.owns_pool {
            self.inner.pool.close();
        }
    }

    /// Runs `request` with `now` standing in for the database clock, and says how the record
    /// changed. For the crate's property test, which compares these decisions with the domain's
    /// state machine; an application has no use for it.
    #[doc(hidden)]
    pub async fn request_lease_at_for_tests(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        self.request(request, Some(now)).await
    }

    /// Runs a release with `now` standing in for the database clock; says whether the record
    /// was backdated. For the crate's property test.
    #[doc(hidden)]
    pub async fn release_lease_at_for_tests(
        &self,
        lease_name: &str,
        owner: &str,
        now: Timestamp,
    ) -> Result<bool, EventStorageError> {
        self.release(lease_name, owner, Some(now)).await
    }

    /// The contenders of `lease_name` live at `now` instead of the database clock. For the
    /// crate's property test.
    #[doc(hidden)]
    pub async fn get_lease_contenders_at_for_tests(
        &self,
        lease_name: &str,
        now: Timestamp,
    ) -> Result<Vec<Contender>, EventStorageError> {
        self.contenders(lease_name, Some(now)).await
    }

    async fn contenders(
        &self,
        lease_name: &str,
        at: Option<Timestamp>,
    ) -> Result<Vec<Contender>, EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let name = lease_name.as_str();
        let rows = self
            .query(
                "get_lease_contenders",
                &self.inner.statements.contenders,
                &[&name],
            )
            .await?;
        let (now, all) = ops::contenders_from_rows(&lease_name, &rows)?;
        let now = at.unwrap_or(now);
        let mut live: Vec<Contender> = all.into_iter().filter(|c| c.is_live_at(now)).collect();
        sort_contenders(&mut live);
        Ok(live)
    }

    async fn request(
        &self,
        request: &LeaseRequest,
        now: Option<Timestamp>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        let request = request.validate()?;
        let ttl_micros = ops::ttl_micros(request.ttl)?;
        let lease_name = request.lease_name.as_str();
        let owner = request.owner.as_str();
        let now = now.map(Timestamp::to_system_time);
        let row = match &now {
            None => {
                self.query_one(
                    "request_lease",
                    &self.inner.statements.request,
                    &[&lease_name, &owner, &request.priority, &ttl_micros],
                )
                .await?
            }
            Some(now) => {
                self.query_one(
                    "request_lease",
                    &self.inner.statements.request_at,
                    &[&lease_name, &owner, &request.priority, &ttl_micros, now],
                )
                .await?
            }
        };
        ops::response_from_row(&request.lease_name, &row)
    }

    async fn release(
        &self,
        lease_name: &str,
        owner: &str,
        now: Option<Timestamp>,
    ) -> Result<bool, EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let owner = Owner::new(owner)?;
        let (lease_name, owner) = (lease_name.as_str(), owner.as_str());
        let now = now.map(Timestamp::to_system_time);
        let row = match &now {
            None => {
                self.query_one(
                    "release_lease",
                    &self.inner.statements.release,
                    &[&lease_name, &owner],
                )
                .await?
            }
            Some(now) => {
                self.query_one(
                    "release_lease",
                    &self.inner.statements.release_at,
                    &[&lease_name, &owner, now],
                )
                .await?
            }
        };
        ops::get(&row, 0, "o_released")
    }

    async fn append_events(
        &self,
        request: &AppendRequest,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        request.validate()?;
        let what = "append";
        let tags: Vec<Vec<String>> = request
            .events
            .iter()
            .map(|e| normalize_tags(&e.tags))
            .collect();
        let joined_tags: Vec<String> = tags.iter().map(|t| t.join(TAG_SEPARATOR)).collect();
        let streams: Vec<&str> = request.events.iter().map(|e| e.stream.as_str()).collect();
        let types: Vec<&str> = request
            .events
            .iter()
            .map(|e| e.event_type.as_str())
            .collect();
        let payloads: Vec<&serde_json::Value> = request.events.iter().map(|e| &e.payload).collect();
        let key = request.idempotency_key.as_deref();
        let none: &[String] = &[];
        let (conditional, c_streams, c_types, c_tags, c_after) = match &request.condition {
            Some(c) => (
                true,
                c.query.streams.as_slice(),
                c.query.event_types.as_slice(),
                c.query.tags.as_slice(),
                c.after.map_or(0, EventPosition::get_i64),
            ),
            None => (false, none, none, none, 0),
        };
        let params: [&(dyn ToSql + Sync); 10] = [
            &streams,
            &types,
            &payloads,
            &joined_tags,
            &key,
            &conditional,
            &c_streams,
            &c_types,
            &c_tags,
            &c_after,
        ];
        let sql = &self.inner.events.append;
        let rows = self
            .timed(what, async {
                let mut connection = self.checkout(what).await?;
                let mut result = connection.query(sql, &params).await;
                if key.is_some()
                    && matches!(&result, Err(Failed::Pg(e)) if self.is_key_violation(e))
                {
                    // An append with the same key committed while this one ran: this one was
                    // rolled back, and running it again replays the other's events.
                    tracing::debug!(target: "tenure_postgres", "idempotency key taken meanwhile; replaying");
                    result = connection.query(sql, &params).await;
                }
                result.map_err(|failed| {
                    // Whatever failed, the connection is not trusted again (the function
                    // releases its session lock on error, and closing is the belt to those
                    // braces).
                    connection.discard();
                    failed.into_storage(what)
                })
            })
            .await?;
        let Some(first) = rows.first() else {
            return Err(EventStorageError::internal("append: no row"));
        };
        match ops::get::<&str>(first, 0, "o_outcome")? {
            "appended" => {
                if rows.len() != request.events.len() {
                    return Err(EventStorageError::internal(format!(
                        "append: {} events sent, {} stored",
                        request.events.len(),
                        rows.len()
                    )));
                }
                let mut stored = Vec::with_capacity(rows.len());
                for ((row, event), tags) in rows.iter().zip(&request.events).zip(tags) {
                    stored.push(StoredEvent {
                        position: events::position(ops::get(row, 1, "o_position")?)?,
                        id: events::event_id(ops::get(row, 2, "o_event_id")?)?,
                        recorded_at: events::timestamp(
                            ops::get(row, 3, "o_recorded_at")?,
                            "recorded_at",
                        )?,
                        stream: event.stream.clone(),
                        event_type: event.event_type.clone(),
                        payload: event.payload.clone(),
                        tags,
                    });
                }
                Ok(stored)
            }
            "replayed" => rows
                .iter()
                .map(|row| {
                    Ok(StoredEvent {
                        position: events::position(ops::get(row, 1, "o_position")?)?,
                        id: events::event_id(ops::get(row, 2, "o_event_id")?)?,
                        recorded_at: events::timestamp(
                            ops::get(row, 3, "o_recorded_at")?,
                            "recorded_at",
                        )?,
                        stream: ops::get(row, 4, "o_stream")?,
                        event_type: ops::get(row, 5, "o_event_type")?,
                        payload: ops::get(row, 6, "o_payload")?,
                        tags: ops::get(row, 7, "o_tags")?,
                    })
                })
                .collect(),
            "conflict" => Err(EventStorageError::AppendConflict {
                conflicting: events::position(ops::get(first, 1, "o_position")?)?,
            }),
            other => Err(EventStorageError::corrupt(format!(
                "append: unknown outcome {other:?}"
            ))),
        }
    }

    fn is_key_violation(&self, err: &tokio_postgres::Error) -> bool {
        err.as_db_error().is_some_and(|db| {
            *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                && db.constraint() == Some(self.inner.events.keys_constraint.as_str())
        })
    }

    async fn read(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        query.validate()?;
        options.validate()?;
        let what = "read_events";
        let bound = events::read_bound(options.direction, options.start);
        let limit = i64::try_from(options.limit)
            .map_err(|_| EventStorageError::internal("a validated limit does not fit in i64"))?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&bound, &limit];
        for filter in [&query.streams, &query.event_types, &query.tags] {
            if !filter.is_empty() {
                params.push(filter);
            }
        }
        let sql = self.inner.events.read(options.direction, query);
        self.timed(what, async {
            let mut connection = self.checkout(what).await?;
            let rows = connection
                .query(sql, &params)
                .await
                .map_err(|e| e.into_storage(what))?;
            let read = events::read_from_rows(&rows, options.direction)?;
            let Some(newest) = read.hidden_newest else {
                return Ok(read.events);
            };
            // The barrier hid committed events: transactions older than the newest one were
            // still in flight. A forwards read that filled its limit has its answer anyway;
            // otherwise wait (briefly) for them, so that a read returns what was committed
            // before it began, then read again.
            let filled = read.events.len() == options.limit;
            if (options.direction == Direction::Forwards && filled)
                || !self.wait_for_horizon(&mut connection, &newest).await?
            {
                return Ok(read.events);
            }
            let rows = connection
                .query(sql, &params)
                .await
                .map_err(|e| e.into_storage(what))?;
            Ok(events::read_from_rows(&rows, options.direction)?.events)
        })
        .await
    }

    /// Waits, polling, until every transaction older than `xid` has finished, for at most the
    /// visibility wait (and half the call timeout). Says whether they did.
    async fn wait_for_horizon(
        &self,
        connection: &mut Checkout,
        xid: &str,
    ) -> Result<bool, EventStorageError> {
        let wait = self.inner.visibility_wait.min(self.inner.call_timeout / 2);
        if wait.is_zero() {
            return Ok(false);
        }
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(target: "tenure_postgres", ?wait, "read: older transactions still in flight; returning what the barrier allows");
                return Ok(false);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(20));
            let rows = connection
                .query(&self.inner.events.horizon_passed, &[&xid])
                .await
                .map_err(|e| e.into_storage("read_events"))?;
            let passed = match rows.first() {
                Some(row) => ops::get::<bool>(row, 0, "horizon passed")?,
                None => return Err(EventStorageError::internal("read_events: no row")),
            };
            if passed {
                return Ok(true);
            }
        }
    }

    async fn place_bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        validate_bookmark(reader, tags)?;
        let tags = normalize_tags(tags);
        let at = position.get_i64();
        let rows = self
            .query(
                "bookmark",
                &self.inner.events.bookmark,
                &[&reader, &at, &tags],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(ValidationError::new(
                Field::Position,
                Reason::NoSuchEvent {
                    position: position.get(),
                },
            )
            .into());
        };
        Ok(Bookmark {
            reader: reader.to_owned(),
            position,
            tags,
            placed_at: events::timestamp(ops::get(row, 0, "placed_at")?, "placed_at")?,
        })
    }

    /// Runs one statement within the call timeout.
    async fn query_one(
        &self,
        what: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, EventStorageError> {
        let mut rows = self.query(what, sql, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(EventStorageError::internal(format!(
                "{what}: expected one row, got {n}"
            ))),
        }
    }

    /// Runs one statement (one round trip: a prepared statement, cached per connection, in
    /// autocommit) within the call timeout.
    async fn query(
        &self,
        what: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, EventStorageError> {
        self.timed(what, async {
            let mut connection = self.checkout(what).await?;
            connection
                .query(sql, params)
                .await
                .map_err(|e| e.into_storage(what))
        })
        .await
    }

    /// Runs `work` (which checks a connection out with [`checkout`](Self::checkout)) within
    /// the call timeout, unless the storage is closed.
    async fn timed<T>(
        &self,
        what: &'static str,
        work: impl Future<Output = Result<T, EventStorageError>>,
    ) -> Result<T, EventStorageError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        let timeout = self.inner.call_timeout;
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(target: "tenure_postgres", what, ?timeout, "call timed out");
                Err(EventStorageError::unavailable(format!(
                    "{what}: no answer from PostgreSQL within {timeout:?}; the outcome is unknown"
                )))
            }
        }
    }

    /// A pooled connection for one call.
    async fn checkout(&self, what: &'static str) -> Result<Checkout, EventStorageError> {
        let object = self
            .inner
            .pool
            .get()
            .await
            .map_err(|e| from_pool(what, e))?;
        Ok(Checkout {
            object: Some(object),
            reusable: true,
        })
    }
}

async fn run(
    client: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, params).await
}

/// A pooled connection checked out for one call. If the call is abandoned while a statement is
/// in flight (a timeout, a dropped future), or the connection broke, or the call asked for it
/// ([`discard`](Self::discard)), the connection is taken out of the pool and closed instead of
/// being handed to the next caller with an answer still pending, a dead socket, or a state in
/// doubt.
struct Checkout {
    object: Option<Object>,
    reusable: bool,
}

/// Why a statement on a checked-out connection failed.
enum Failed {
    /// The server or the driver said no.
    Pg(tokio_postgres::Error),
    /// The connection was already given up (a bug if it ever happens).
    Gone,
}

impl Failed {
    fn into_storage(self, what: &str) -> EventStorageError {
        match self {
            Failed::Pg(err) => from_pg(what, err),
            Failed::Gone => EventStorageError::internal(format!("{what}: no connection")),
        }
    }
}

impl Checkout {
    /// Runs one statement.
    async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Failed> {
        let Some(client) = self.object.as_ref() else {
            return Err(Failed::Gone);
        };
        // Until the answer is in, the connection must not go back to the pool.
        self.reusable = false;
        let result = run(client, sql, params).await;
        self.reusable = !matches!(&result, Err(e) if connection_broken(e));
        result.map_err(Failed::Pg)
    }

    /// Closes the connection instead of returning it to the pool.
    fn discard(&mut self) {
        self.reusable = false;
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if !self.reusable
            && let Some(object) = self.object.take()
        {
            drop(Object::take(object));
        }
    }
}

#[async_trait]
impl EventStorage for PostgresEventStorage {
    fn name(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::from([Capability::Lease, Capability::Events, Capability::Bookmarks])
    }

    /// One call of the `<prefix>request_lease_v1` function, in autocommit.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (or hitting the call timeout) leaves the outcome unknown: the
    /// server may still complete the call. The connection is then closed rather than reused.
    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        self.request(request, None)
            .await
            .map(|(_, response)| response)
    }

    /// One call of the `<prefix>release_lease_v1` function, in autocommit.
    ///
    /// # Cancel safety
    ///
    /// As for [`request_lease`](Self::request_lease): the outcome of a dropped call is unknown.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.release(lease_name, owner, None).await.map(|_| ())
    }

    /// One read of the leases table, with the database's `now()`.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        let rows = self
            .query("get_leases", &self.inner.statements.leases, &[])
            .await?;
        ops::snapshot_from_rows(&rows)
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
        self.contenders(lease_name, None).await
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
        self.append_events(request).await
    }

    /// One statement, behind the barrier: only events whose writing transaction is older than
    /// every transaction still in flight. If the barrier hides committed events the read
    /// needs, it waits for at most the [visibility
    /// wait](PostgresEventStorageBuilder::visibility_wait) and reads again.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.read(query, options).await
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
        self.place_bookmark(reader, position, tags).await
    }

    /// One read of `<prefix>bookmarks`.
    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        validate_reader(reader)?;
        let rows = self
            .query("get_bookmark", &self.inner.events.get_bookmark, &[&reader])
            .await?;
        rows.first().map(events::bookmark_from_row).transpose()
    }

    /// One delete; removing a bookmark that does not exist does nothing.
    async fn remove_bookmark(&self, reader: &str) -> Result<(), EventStorageError> {
        validate_reader(reader)?;
        self.query(
            "remove_bookmark",
            &self.inner.events.remove_bookmark,
            &[&reader],
        )
        .await
        .map(|_| ())
    }

    /// One read of `<prefix>bookmarks`, ordered by reader (byte order).
    async fn get_bookmarks(&self) -> Result<Vec<Bookmark>, EventStorageError> {
        let rows = self
            .query("get_bookmarks", &self.inner.events.bookmarks, &[])
            .await?;
        rows.iter().map(events::bookmark_from_row).collect()
    }

    /// Marks the storage (and every clone) closed and, if the storage built its own pool,
    /// closes the pool: idle connections are closed at once, busy ones when their call ends.
    /// A pool passed in with [`pool`](PostgresEventStorageBuilder::pool) stays open.
    async fn close(&self) -> Result<(), EventStorageError> {
        self.close_pool_if_owned();
        Ok(())
    }
}
