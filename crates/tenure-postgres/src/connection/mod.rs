//! Connection handling: the seam between the adapter and a driver, and what every call does
//! with a connection whichever driver provides it.
//!
//! A [`Driver`] does four things: check a connection out of its pool, run one statement on it
//! (prepared and cached per connection, in autocommit, binary results), run a script (the DDL),
//! and take a connection out of its pool for good. Everything else lives once, above it: the
//! SQL (in `lease`, `events` and `schema`), the decoding of the answers (`decode`), the mapping
//! of failures (`error`), the call timeout and the closed flag ([`Link`]), and the rule that a
//! connection whose call broke is closed, never reused, and one whose call was abandoned is
//! reused only once its statement is known to be over ([`Checkout`], [`Driver::abandon`]).
//!
//! The drivers, each behind its feature: [`deadpool`] (tokio-postgres 0.7 and deadpool-postgres
//! 0.14) and [`sqlx`] (sqlx 0.9).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenure_ports::EventStorageError;

use crate::decode::Row;
use crate::error::Failure;

#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub(crate) mod config;
#[cfg(feature = "deadpool")]
pub(crate) mod deadpool;
pub(crate) mod lane;
#[cfg(feature = "deadpool")]
pub(crate) mod paced;
#[cfg(feature = "sqlx-0_9")]
pub(crate) mod sqlx;
#[cfg(feature = "tls")]
pub(crate) mod tls;

/// How long an abandoned call's statement may go on before its connection is given up on: the
/// deadpool driver then sends a cancel request, the sqlx driver closes it (see each driver's
/// `abandon`).
pub(crate) const GRACE: Duration = Duration::from_millis(50);

/// How long a connection that is let go of (its pool closed, or it was taken out of the pool)
/// may take to end its session as PostgreSQL expects, with the Terminate message, before its
/// socket is cut. A session whose socket is cut is counted as abandoned by the server
/// (`pg_stat_database.sessions_abandoned`) and logged as an unexpected EOF, which an operator
/// reads as a crashed client or a failed network.
pub(crate) const GOODBYE: Duration = Duration::from_millis(100);

/// The text of one statement, built once per storage and shared with the driver's statement
/// cache without a copy.
pub(crate) type Sql = Arc<str>;

/// One bind parameter, in the types the statements take. Each driver binds it with its own
/// encoder for the same PostgreSQL type.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Param<'a> {
    /// `text`.
    Text(&'a str),
    /// `text`, or NULL.
    OptionalText(Option<&'a str>),
    /// `bigint`.
    Int8(i64),
    /// `boolean`.
    Bool(bool),
    /// `text[]`.
    Texts(&'a [String]),
    /// `text[]`, borrowed.
    TextRefs(&'a [&'a str]),
    /// `bigint[]`.
    Int8s(&'a [i64]),
    /// `boolean[]`.
    Bools(&'a [bool]),
    /// `jsonb[]`.
    Jsonbs(&'a [&'a serde_json::Value]),
}

/// Why a driver could not make a pool from a connection string.
#[derive(Debug)]
pub(crate) enum UrlError {
    /// The string does not parse (the reason, password scrubbed).
    Url(String),
    /// The pool could not be created.
    Pool(tenure_ports::BoxError),
}

/// A connection pool, seen from the adapter.
///
/// Implementations must not cache answers or retry: one call of [`query`](Driver::query) is
/// one statement sent once.
pub(crate) trait Driver: Send + Sync + 'static {
    /// A connection checked out of the pool; dropping it gives it back.
    type Connection: Send;
    /// A row of an answer.
    type Row: Row + Send + Sync;

    /// A connection from the pool (waiting for one, or opening one).
    fn checkout(&self) -> impl Future<Output = Result<Self::Connection, Failure>> + Send;

    /// Runs one statement, prepared (and cached on the connection), with `params`, in
    /// autocommit unless a script opened a transaction; the rows come in binary format.
    fn query(
        connection: &mut Self::Connection,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, Failure>> + Send;

    /// Forgets the statements prepared on `connection`, so that the next [`query`] prepares
    /// them anew (after a schema change made them stale).
    ///
    /// [`query`]: Driver::query
    fn forget_statements(
        connection: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), Failure>> + Send;

    /// Runs a script of statements without parameters (the simple query protocol).
    fn script(
        connection: &mut Self::Connection,
        sql: &str,
    ) -> impl Future<Output = Result<(), Failure>> + Send;

    /// Takes `connection` out of the pool and closes it.
    fn discard(&self, connection: Self::Connection);

    /// Takes `connection` back after a call that left it sound: by default gives it back to
    /// the pool.
    fn give_back(&self, connection: Self::Connection) {
        drop(connection);
    }

    /// The most connections the pool holds.
    fn max_size(&self) -> usize;

    /// Deals with `connection`, whose call was abandoned with a statement in flight (its
    /// statement's outcome is unknown, and its answer may still arrive on it): by default
    /// closes it; the deadpool driver's own pools keep it once it is idle again, after a cancel
    /// request if it is not within [`GRACE`] ([`paced`]); the sqlx driver keeps it if it is idle
    /// within [`GRACE`].
    fn abandon(&self, connection: Self::Connection) {
        self.discard(connection);
    }

    /// Closes the pool: idle connections at once, busy ones when they come back.
    fn close(&self);

    /// Gives back to an application's pool the connections kept between calls (the sqlx
    /// driver keeps them for a moment, see its docs), when the storage closes; by default
    /// there are none.
    fn let_go(&self) {}
}

/// A driver with what every call needs around it: the call timeout, whether the storage is
/// closed, and the lane that keeps standbys' requests from taking every connection.
pub(crate) struct Link<D> {
    driver: D,
    call_timeout: Duration,
    owns_pool: bool,
    closed: AtomicBool,
    /// Turns to check a connection out for calls that yield to renewals
    /// ([`yielding_turn`](Self::yielding_turn)): one fewer than the pool's
    /// connections (at least one), so that while the pool is saturated a renewal waits for at
    /// most one call ahead of it, never for a queue of standbys. Established contenders go
    /// before newcomers, and a waiter out of patience behind the others ([`lane`]).
    yielding: lane::Lane,
}

impl<D: Driver> Link<D> {
    /// `driver`, whose pool the storage closes when closed if `owns_pool`.
    pub(crate) fn new(driver: D, call_timeout: Duration, owns_pool: bool) -> Self {
        let turns = driver.max_size().saturating_sub(1).max(1);
        Link {
            driver,
            call_timeout,
            owns_pool,
            closed: AtomicBool::new(false),
            yielding: lane::Lane::new(turns),
        }
    }

    /// The bound on one call.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Whether the storage was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the storage closed, and closes the pool if the storage built it (else gives
    /// back what it kept of the application's).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if self.owns_pool {
            self.driver.close();
        } else {
            self.driver.let_go();
        }
    }

    /// Runs the future `work` makes (which checks a connection out with
    /// [`checkout`](Self::checkout)) within the call timeout, unless the storage is closed.
    ///
    /// `work` is a closure so that its future is made here, inside the timeout: a future passed
    /// in as an argument of an `async fn` is held twice in the caller's future (as the argument,
    /// and as what is awaited), and every layer of a call copies what it holds.
    pub(crate) async fn timed<T, F>(
        &self,
        what: &'static str,
        work: impl FnOnce() -> F,
    ) -> Result<T, EventStorageError>
    where
        F: Future<Output = Result<T, EventStorageError>>,
    {
        if self.is_closed() {
            return Err(EventStorageError::Closed);
        }
        let timeout = self.call_timeout;
        match tokio::time::timeout(timeout, work()).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(what, timeout)),
        }
    }

    /// A pooled connection for one call.
    pub(crate) async fn checkout(
        &self,
        what: &'static str,
    ) -> Result<Checkout<'_, D>, EventStorageError> {
        let connection = self
            .driver
            .checkout()
            .await
            .map_err(|e| e.into_storage(what))?;
        Ok(Checkout {
            driver: &self.driver,
            connection: Some(connection),
            reusable: true,
            in_flight: false,
        })
    }

    /// Runs one statement (one round trip: a prepared statement, cached per connection, in
    /// autocommit) within the call timeout.
    pub(crate) async fn query(
        &self,
        what: &'static str,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<Vec<D::Row>, EventStorageError> {
        self.timed(what, || async {
            let mut connection = self.checkout(what).await?;
            connection
                .query(sql, params)
                .await
                .map_err(|e| e.into_storage(what))
        })
        .await
    }

    /// Runs one statement that answers exactly one row, within the call timeout.
    pub(crate) async fn query_one(
        &self,
        what: &'static str,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<D::Row, EventStorageError> {
        one_row(what, self.query(what, sql, params).await?)
    }

    /// Moves `connection`, fresh from [`checkout`](Self::checkout) (with the yielding lane's
    /// `turn` it was checked out under, if any), out of its call, so that a task of its own
    /// can go on with it when the call's caller leaves: see [`Detached`].
    pub(crate) fn detach(
        self: &Arc<Self>,
        connection: Checkout<'_, D>,
        turn: Option<lane::Turn<'_>>,
    ) -> Detached<D> {
        let connection = connection.into_fresh();
        Detached {
            link: Arc::clone(self),
            connection,
            turn: turn.map(lane::Turn::keep).is_some(),
        }
    }

    /// How many standbys' requests wait for a turn of the yielding lane.
    #[cfg(feature = "testing")]
    pub(crate) fn waiting_in_lane(&self) -> usize {
        self.yielding.waiting()
    }

    /// A turn of the yielding lane, for a call that yields to renewals (a standby's request):
    /// to be held while it checks a connection out and runs its statement, as a waiter of
    /// `standing` that keeps its place in the lane's order of arrival for `patience` ([`lane`]:
    /// established contenders before newcomers, and past capacity the turns go to calls that
    /// still have time).
    ///
    /// # Cancel safety
    ///
    /// As [`lane::Lane::turn`]: cancel safe.
    pub(crate) async fn yielding_turn(
        &self,
        standing: lane::Standing,
        patience: Duration,
    ) -> lane::Turn<'_> {
        self.yielding.turn(standing, patience).await
    }
}

/// A connection checked out for a call, and the lane's turn it was checked out under (if any),
/// moved out of the call ([`Link::detach`]) into a task of its own, with the storage's link:
/// the call goes on there however long its caller waits. Made into a [`Checkout`] and a turn
/// again with [`attach`](Self::attach); dropped before that, it gives both back.
pub(crate) struct Detached<D: Driver> {
    link: Arc<Link<D>>,
    connection: Option<D::Connection>,
    turn: bool,
}

impl<D: Driver> Detached<D> {
    /// The connection as a [`Checkout`] again, and the turn (if any), given back when they are
    /// dropped, the connection first.
    pub(crate) fn attach(&mut self) -> (Checkout<'_, D>, Option<lane::Turn<'_>>) {
        let turn = std::mem::take(&mut self.turn).then(|| self.link.yielding.taken_over());
        let checkout = Checkout {
            driver: &self.link.driver,
            connection: self.connection.take(),
            reusable: true,
            in_flight: false,
        };
        (checkout, turn)
    }

    /// The storage's link.
    pub(crate) fn link(&self) -> &Link<D> {
        &self.link
    }
}

impl<D: Driver> Drop for Detached<D> {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            self.link.driver.give_back(connection);
        }
        if std::mem::take(&mut self.turn) {
            drop(self.link.yielding.taken_over());
        }
    }
}

/// The error of a call `what` that got no answer within `timeout` (logged as it is made).
pub(crate) fn timed_out(what: &'static str, timeout: Duration) -> EventStorageError {
    tracing::warn!(target: "tenure_postgres", what, ?timeout, "call timed out");
    EventStorageError::unavailable(format!(
        "{what}: no answer from PostgreSQL within {timeout:?}; the outcome is unknown"
    ))
}

/// The row of an answer that has one, if any; more is an error.
pub(crate) fn at_most_one_row<R>(
    what: &'static str,
    mut rows: Vec<R>,
) -> Result<Option<R>, EventStorageError> {
    match rows.len() {
        0 | 1 => Ok(rows.pop()),
        n => Err(EventStorageError::internal(format!(
            "{what}: expected at most one row, got {n}"
        ))),
    }
}

/// The one row of an answer that must have exactly one.
pub(crate) fn one_row<R>(what: &'static str, mut rows: Vec<R>) -> Result<R, EventStorageError> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(EventStorageError::internal(format!(
            "{what}: expected one row, got {n}"
        ))),
    }
}

/// A pooled connection checked out for one call. If the connection broke, or the call asked
/// for it ([`discard`](Self::discard)), the connection is taken out of the pool and closed
/// instead of being handed to the next caller with a dead socket or a state in doubt. If the
/// call is abandoned while a statement is in flight (a timeout, a dropped future), the driver's
/// [`Driver::abandon`] decides (it closes it).
pub(crate) struct Checkout<'a, D: Driver> {
    driver: &'a D,
    connection: Option<D::Connection>,
    reusable: bool,
    /// A statement was sent and its answer is not in (the call is abandoned if dropped now).
    in_flight: bool,
}

impl<D: Driver> Checkout<'_, D> {
    /// Runs one statement.
    pub(crate) async fn query(
        &mut self,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<Vec<D::Row>, Failure> {
        let Some(connection) = self.connection.as_mut() else {
            return Err(Failure::Driver("the connection was given up".into()));
        };
        // Until the answer is in, the connection must not go back to the pool.
        self.reusable = false;
        self.in_flight = true;
        let mut result = D::query(connection, sql, params).await;
        if matches!(&result, Err(e) if e.plan_invalidated()) {
            // A schema change (an upgrade re-created the answer type or a function) left this
            // connection's prepared plans stale, and the statement did not run: prepare it
            // anew, once. Each stale connection of the pool heals at its first call.
            tracing::info!(target: "tenure_postgres", "prepared statements outdated by a schema change; preparing them again");
            if D::forget_statements(connection).await.is_ok() {
                result = D::query(connection, sql, params).await;
            }
        }
        self.in_flight = false;
        self.reusable = !matches!(&result, Err(e) if e.connection_broken());
        result
    }

    /// Runs a script; the connection is closed afterwards unless it succeeded.
    pub(crate) async fn script(&mut self, sql: &str) -> Result<(), Failure> {
        let Some(connection) = self.connection.as_mut() else {
            return Err(Failure::Driver("the connection was given up".into()));
        };
        self.reusable = false;
        let result = D::script(connection, sql).await;
        self.reusable = result.is_ok();
        result
    }

    /// Closes the connection instead of returning it to the pool.
    pub(crate) fn discard(&mut self) {
        self.reusable = false;
    }

    /// The connection, if it is fresh from the pool or its last statement left it sound (for
    /// [`Link::detach`]); otherwise it is dealt with as on drop, and `None`.
    fn into_fresh(mut self) -> Option<D::Connection> {
        if self.reusable && !self.in_flight {
            self.connection.take()
        } else {
            None
        }
    }
}

impl<D: Driver> Drop for Checkout<'_, D> {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        if self.reusable {
            self.driver.give_back(connection);
        } else if self.in_flight {
            self.driver.abandon(connection);
        } else {
            self.driver.discard(connection);
        }
    }
}
