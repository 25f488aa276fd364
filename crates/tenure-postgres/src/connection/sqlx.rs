//! The sqlx 0.9 driver, through a `sqlx::PgPool`.
//!
//! Statements are persistent (prepared once per connection, in sqlx's statement cache); rows
//! are read as raw binary values (`try_get_raw`) and decoded by the adapter (`decode`), so no
//! sqlx type mapping (and none of its `chrono`/`time` features) is involved.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgPoolOptions, PgRow, PgValueFormat};
use sqlx::types::Json;
use sqlx::{
    Arguments, AssertSqlSafe, Connection as _, PgPool, Postgres, Row as _, TypeInfo as _,
    ValueRef as _,
};

use super::{Driver, GRACE, Param, Sql, UrlError};
use crate::decode::{BoxError, Row, Value};
use crate::error::Failure;
use tenure_conninfo::ConnInfo;
use tokio::sync::oneshot;

/// A `sqlx::PgPool`, as a [`Driver`].
///
/// A sqlx connection has no task of its own watching its socket, so a pool that does not ping
/// before each call (`test_before_acquire(false)`, as the pools this crate builds) hands out
/// connections the server has long closed, after a restart or a failover, one failed call
/// each. So once a connection had to be discarded, the next checkouts ping first (as many as
/// the pool holds connections), discarding the dead ones before any statement is sent: after a
/// fault, calls cost a round trip more until the pool is known to be sound again; in steady
/// state they cost nothing.
///
/// sqlx pings every connection given back to a `PgPool` (a round trip, so that a connection
/// left in doubt by a dropped future is not handed out), which costs a call on a busy pool
/// nearly a second round trip. A pool the storage built is the storage's alone, so its
/// connections are kept checked out between calls ([`give_back`](Driver::give_back)) and only
/// abandoned or broken ones go back to sqlx. A connection of an application's pool is kept for
/// at most [`LINGER`] after its call, for the storage's next call (while the storage's calls
/// follow each other closely, as under load, they share connections without a ping each), then
/// goes back to the application's pool; and never while one of the storage's calls waits in
/// that pool.
///
/// When every connection of a pool the storage built is busy with its calls, a checkout waits
/// for the next one they give back, which is handed to it directly: no ping, no task, no
/// place in sqlx's queue (a connection closed meanwhile sends the oldest such wait to the pool,
/// which may open one). Otherwise a connect is not dropped with a caller that gave up: a
/// checkout that finds no idle connection waits for one in a task of its own, so that a
/// connection set up for a caller that left serves the next one instead of being thrown away
/// half made. A wait that cannot connect (the pool is full) ends when its caller leaves.
pub(crate) struct Sqlx {
    pool: PgPool,
    /// How many checkouts still ping first.
    suspect: AtomicU32,
    /// The connections kept between calls.
    kept: Arc<Mutex<Kept>>,
    /// How long a connection is kept after its call: for as long as the storage runs if it
    /// built the pool, [`LINGER`] on an application's pool.
    linger: Option<Duration>,
}

/// How long a connection of an application's pool is kept after a call for the storage's next
/// one, before it goes back to the application's pool (and sqlx pings it).
///
/// Long enough for a call that follows closely (a busy storage's next call comes within
/// microseconds), short against anything an application waits for.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// The connections a storage keeps between calls (each with when its call ended), and the
/// storage's calls that wait for one: while any waits in the pool, a connection given back goes
/// to the pool, where it waits.
#[derive(Default)]
struct Kept {
    idle: Vec<(PoolConnection<Postgres>, Instant)>,
    /// How many checkouts wait in the pool (sqlx's queue).
    waiting: usize,
    /// The checkouts of a full pool the storage built, oldest first, each waiting for a
    /// connection one of the storage's calls gives back ([`Sqlx::acquire`]).
    handoff: VecDeque<oneshot::Sender<PoolConnection<Postgres>>>,
    /// A task gives back connections kept longer than the linger.
    reaping: bool,
}

impl Kept {
    fn lock(kept: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
        kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets go of every kept connection: back to the pool inside a Tokio runtime (sqlx gives a
    /// connection back in a task), closed outside one. The checkouts waiting for a handed
    /// connection go on waiting in the pool (which is closed, if the storage closed).
    fn release(kept: &Mutex<Kept>) {
        let (idle, handoff) = {
            let mut guard = Kept::lock(kept);
            (
                std::mem::take(&mut guard.idle),
                std::mem::take(&mut guard.handoff),
            )
        };
        drop(handoff);
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(idle);
        } else {
            idle.into_iter().for_each(|(c, _)| drop(c.detach()));
        }
    }

    /// Sends the oldest checkout still waiting for a handed connection to wait in the pool
    /// instead: a connection was closed, so the pool may open one.
    fn wake_one(kept: &Mutex<Kept>) {
        let mut guard = Kept::lock(kept);
        while let Some(waiter) = guard.handoff.pop_front() {
            if !waiter.is_closed() {
                break;
            }
        }
    }

    /// Takes back `connection` after a call that left it sound: hands it to the oldest
    /// checkout waiting for one, else keeps it for the next call (for at most `linger`, if
    /// set), unless calls wait in the pool or the pool is closed: then it goes back to the pool.
    fn give_back(
        kept: &Arc<Mutex<Kept>>,
        pool: &PgPool,
        linger: Option<Duration>,
        mut connection: PoolConnection<Postgres>,
    ) {
        let mut guard = Kept::lock(kept);
        while let Some(waiter) = guard.handoff.pop_front() {
            // A waiter whose caller left sends the connection back.
            match waiter.send(connection) {
                Ok(()) => return,
                Err(back) => connection = back,
            }
        }
        if guard.waiting > 0 || pool.is_closed() {
            drop(guard);
            return drop(connection);
        }
        if let Some(linger) = linger
            && !guard.reaping
        {
            // Only inside a runtime can the connection go back later.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                drop(guard);
                return drop(connection);
            };
            guard.reaping = true;
            drop(runtime.spawn(Kept::reap(Arc::clone(kept), linger)));
        }
        guard.idle.push((connection, Instant::now()));
    }

    /// Gives back, every `linger`, the connections kept longer than that, until none is kept.
    async fn reap(kept: Arc<Mutex<Kept>>, linger: Duration) {
        loop {
            tokio::time::sleep(linger).await;
            let (expired, reaping): (Vec<_>, bool) = {
                let mut guard = Kept::lock(&kept);
                let now = Instant::now();
                let expired;
                (expired, guard.idle) = std::mem::take(&mut guard.idle)
                    .into_iter()
                    .partition(|(_, since)| now.duration_since(*since) >= linger);
                guard.reaping = !guard.idle.is_empty();
                (expired, guard.reaping)
            };
            // Back to the pool outside the lock.
            drop(expired);
            if !reaping {
                return;
            }
        }
    }
}

/// A connection that a wait in the pool got ([`Sqlx::wait_in_pool`]), on its way to the call
/// that waited. If that call left before it arrived (its request was carried by another's call,
/// or it timed out), the wait's task drops it: it then goes back as a call's connection goes
/// back after the call ([`Kept::give_back`]), to the oldest call waiting for a handed connection,
/// instead of into sqlx's pool, where those calls do not look. Dropped into sqlx's pool, such
/// connections sat idle there while every call of the storage waited to be handed one, until
/// the call timeout: a pool of 8 under load whose connections were all killed at once, in 6 of
/// 38 runs (`every_connection_of_its_own_pool_killed_at_once`; one of them before the kill, on
/// the fresh pool).
struct Acquired {
    connection: Option<PoolConnection<Postgres>>,
    kept: Arc<Mutex<Kept>>,
    pool: PgPool,
    linger: Option<Duration>,
}

impl Acquired {
    /// The connection, for the call that waited.
    fn take(mut self) -> Option<PoolConnection<Postgres>> {
        self.connection.take()
    }
}

impl Drop for Acquired {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            Kept::give_back(&self.kept, &self.pool, self.linger, connection);
        }
    }
}

impl Drop for Sqlx {
    fn drop(&mut self) {
        Kept::release(&self.kept);
    }
}

impl Sqlx {
    /// The driver over an application's `pool`.
    pub(crate) fn new(pool: PgPool) -> Self {
        Sqlx {
            pool,
            suspect: AtomicU32::new(0),
            kept: Arc::default(),
            linger: Some(LINGER),
        }
    }

    /// A connection of the pool: a kept or idle one at once; else, from a full pool the
    /// storage built, the next one its calls give back; else one waited for in the pool, in a
    /// task of its own (see the type's docs).
    async fn acquire(&self) -> Result<PoolConnection<Postgres>, Failure> {
        // Taking a kept connection and registering as waiting are one step, under the lock
        // that `give_back` decides under: no connection is kept while a call waits.
        let handed = {
            let mut guard = Kept::lock(&self.kept);
            // The one kept longest is the first to go back: take the newest.
            if let Some((connection, _)) = guard.idle.pop() {
                return Ok(connection);
            }
            if let Some(connection) = self.pool.try_acquire() {
                return Ok(connection);
            }
            // Every connection of a full pool the storage built is busy with one of its calls
            // (or on its way back from an abandoned one): the next given back is handed over
            // here, without sqlx's queue, its ping on every connection given back to it, or a
            // task per wait. Past capacity, these made most of the sqlx driver's cost per call
            // (`docs/benchmarks.md`, tenth session). An application's pool also serves the
            // application, whose connections go back to the pool, so its waits stay there.
            if self.linger.is_none() && full(&self.pool) {
                let (hand, handed) = oneshot::channel();
                guard.handoff.push_back(hand);
                Some(handed)
            } else {
                guard.waiting += 1;
                None
            }
        };
        if let Some(handed) = handed {
            if let Ok(connection) = handed.await {
                return Ok(connection);
            }
            // Sent on: a connection was closed (the pool may open one), or the storage closed.
            let mut guard = Kept::lock(&self.kept);
            if let Some((connection, _)) = guard.idle.pop() {
                return Ok(connection);
            }
            guard.waiting += 1;
        }
        self.wait_in_pool().await
    }

    /// A connection waited for in the pool, in a task of its own; the caller registered as
    /// waiting.
    async fn wait_in_pool(&self) -> Result<PoolConnection<Postgres>, Failure> {
        /// Unregisters the waiting call when the wait ends, also in a task whose caller left.
        struct Waited(Arc<Mutex<Kept>>);
        impl Drop for Waited {
            fn drop(&mut self) {
                let mut guard = Kept::lock(&self.0);
                guard.waiting = guard.waiting.saturating_sub(1);
            }
        }
        let waited = Waited(Arc::clone(&self.kept));
        let pool = self.pool.clone();
        // A wait that starts with the pool full can only end with a connection another call
        // gives back, and it ends when its caller leaves (a timeout, or its request carried
        // by another's call), unless by then a connection was closed meanwhile and the pool
        // is not full any more (the wait may be opening one). Left in sqlx's queue, such waits
        // were served ahead of the calls that still wait, each taking a connection only to
        // give it back with a ping: past capacity, with thousands of callers leaving, the pool
        // served them instead of calls (`scale`'s 3x overload on sqlx: goodput fell to 544
        // calls a second, `docs/benchmarks.md`). Any other wait may connect, and goes on.
        let cancellable = full(&self.pool);
        let (_stays, left) = oneshot::channel::<()>();
        let (kept, linger) = (Arc::clone(&self.kept), self.linger);
        let wait = async move {
            // sqlx's acquire future holds a whole connect (some 29 KB): boxed, so that the
            // task (whose future is moved into its cell when spawned) stays small, and so that
            // it is not part of every call's future either (see `lease::tests`).
            let mut acquire = Box::pin(pool.acquire());
            let acquired = if cancellable {
                tokio::select! {
                    biased;
                    acquired = &mut acquire => acquired,
                    // Nobody reads the error: the caller left.
                    _ = left => if full(&pool) {
                        Err(sqlx::Error::PoolTimedOut)
                    } else {
                        acquire.await
                    },
                }
            } else {
                acquire.await
            };
            drop(waited);
            acquired.map(|connection| Acquired {
                connection: Some(connection),
                kept,
                pool,
                linger,
            })
        };
        let acquired = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => match runtime.spawn(wait).await {
                Ok(acquired) => acquired,
                Err(_) => return Err(Failure::PoolClosed),
            },
            Err(_) => Box::pin(wait).await,
        };
        acquired
            .map_err(failure)?
            .take()
            .ok_or_else(|| Failure::Driver("a connection waited for was given up".into()))
    }

    fn suspect_everything(&self) {
        self.suspect
            .store(self.pool.options().get_max_connections(), Ordering::Relaxed);
    }

    /// A pool of at most `size` connections for `info`, kept between calls, waiting at most
    /// `timeout` for a connection (connecting included; a connect whose caller left goes on
    /// for up to `connect_timeout`), and connecting lazily. Unless the string sets it,
    /// `application_name` is `tenure`. Connections are not pinged before each call (sqlx's
    /// `test_before_acquire`): a broken one fails its call as `Unavailable` and is replaced.
    pub(crate) fn from_conninfo(
        info: &ConnInfo,
        size: usize,
        connect_timeout: Duration,
    ) -> Result<Self, UrlError> {
        let options = super::config::sqlx_options(info).map_err(UrlError::Url)?;
        let size = u32::try_from(size)
            .map_err(|_| UrlError::Pool(format!("pool size {size} is too large").into()))?;
        let pool = PgPoolOptions::new()
            .max_connections(size)
            .min_connections(0)
            .acquire_timeout(connect_timeout)
            .test_before_acquire(false)
            .connect_lazy_with(options);
        Ok(Sqlx {
            pool,
            suspect: AtomicU32::new(0),
            kept: Arc::default(),
            linger: None,
        })
    }
}

/// Whether `pool` holds as many connections as it may (a connect under way counts).
fn full(pool: &PgPool) -> bool {
    pool.size() >= pool.options().get_max_connections()
}

fn failure(err: sqlx::Error) -> Failure {
    #[cfg(feature = "tls")]
    if let sqlx::Error::Io(io) = &err
        && let Some(why) = super::tls::reason(io)
    {
        return Failure::Connection(format!("TLS handshake failed: {why}").into());
    }
    match err {
        sqlx::Error::Database(db) => Failure::Server {
            code: db.code().map(|c| c.into_owned()).unwrap_or_default(),
            constraint: db.constraint().map(str::to_owned),
            message: db.message().to_owned(),
            source: Box::new(sqlx::Error::Database(db)),
        },
        sqlx::Error::PoolClosed => Failure::PoolClosed,
        sqlx::Error::PoolTimedOut => Failure::PoolTimeout("wait".to_owned()),
        err @ (sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Configuration(_)) => Failure::Connection(Box::new(err)),
        other => Failure::Driver(Box::new(other)),
    }
}

/// Binds each parameter with sqlx's own encoder for its type.
fn arguments(params: &[Param<'_>]) -> Result<PgArguments, Failure> {
    let mut arguments = PgArguments::default();
    // The buffer sized once: grown from empty, it was reallocated four or five times for a
    // lease request's seven parameters. Callgrind, `benches/client-cost.sh`: binding them
    // took about 2,900 instructions per renewal, 1,600 sized once; the renewal, 29,500 and
    // 27,500 in all.
    arguments.reserve(params.len(), params.iter().map(encoded_len).sum());
    for param in params {
        match *param {
            Param::Text(v) => arguments.add(v),
            Param::OptionalText(v) => arguments.add(v),
            Param::Int8(v) => arguments.add(v),
            Param::Bool(v) => arguments.add(v),
            Param::Texts(v) => arguments.add(v),
            Param::TextRefs(v) => arguments.add(v),
            Param::Int8s(v) => arguments.add(v),
            Param::Bools(v) => arguments.add(v),
            Param::Jsonbs(v) => arguments.add(v.iter().map(Json).collect::<Vec<_>>()),
        }
        .map_err(Failure::Driver)?;
    }
    Ok(arguments)
}

/// About how many bytes `param` takes in sqlx's argument buffer: its length prefix and its
/// value in PostgreSQL's binary format (an array's header and each element's prefix; a JSON
/// value counted at 64 bytes, as its text is not at hand).
fn encoded_len(param: &Param<'_>) -> usize {
    /// An array's header: dimensions, flags, element type, then one dimension's length and
    /// lower bound.
    const ARRAY: usize = 20;
    fn prefixed(len: usize) -> usize {
        4 + len
    }
    /// An array of elements of these lengths.
    fn array(lens: impl Iterator<Item = usize>) -> usize {
        prefixed(ARRAY + lens.map(prefixed).sum::<usize>())
    }
    match *param {
        Param::Text(v) => prefixed(v.len()),
        Param::OptionalText(v) => prefixed(v.map_or(0, str::len)),
        Param::Int8(_) => prefixed(8),
        Param::Bool(_) => prefixed(1),
        Param::Texts(v) => array(v.iter().map(String::len)),
        Param::TextRefs(v) => array(v.iter().map(|t| t.len())),
        Param::Int8s(v) => array(std::iter::repeat_n(8, v.len())),
        Param::Bools(v) => array(std::iter::repeat_n(1, v.len())),
        Param::Jsonbs(v) => array(std::iter::repeat_n(1 + 64, v.len())),
    }
}

impl Driver for Sqlx {
    type Connection = PoolConnection<Postgres>;
    type Row = PgRow;

    async fn checkout(&self) -> Result<PoolConnection<Postgres>, Failure> {
        // Bounded: each failed ping discards a connection, and the pool holds so many.
        for _ in 0..=self.pool.options().get_max_connections() {
            let mut connection = self.acquire().await?;
            if self.suspect.load(Ordering::Relaxed) == 0 {
                return Ok(connection);
            }
            match connection.ping().await {
                Ok(()) => {
                    let _ = self
                        .suspect
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
                    return Ok(connection);
                }
                Err(err) => {
                    tracing::debug!(target: "tenure_postgres", %err, "a pooled connection is dead; discarding it");
                    self.discard(connection);
                }
            }
        }
        Err(Failure::Connection(
            "every pooled connection was dead, and so were the new ones".into(),
        ))
    }

    async fn query(
        connection: &mut PoolConnection<Postgres>,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<Vec<PgRow>, Failure> {
        let arguments = arguments(params)?;
        sqlx::query_with(AssertSqlSafe(Sql::clone(sql)), arguments)
            .persistent(true)
            .fetch_all(&mut **connection)
            .await
            .map_err(failure)
    }

    async fn forget_statements(connection: &mut PoolConnection<Postgres>) -> Result<(), Failure> {
        connection.clear_cached_statements().await.map_err(failure)
    }

    async fn script(connection: &mut PoolConnection<Postgres>, sql: &str) -> Result<(), Failure> {
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&mut **connection)
            .await
            .map(|_| ())
            .map_err(failure)
    }

    fn discard(&self, connection: PoolConnection<Postgres>) {
        // Out of the pool (which may open another), then dropped: the socket is closed. The
        // fault may have hit the pool's other connections too.
        drop(connection.detach());
        self.suspect_everything();
        Kept::wake_one(&self.kept);
    }

    /// An abandoned call's connection is taken back as after a sound call if it answers a
    /// ping within [`GRACE`] (sqlx reads and drops the abandoned statement's answer first), and
    /// is closed otherwise (a statement waiting on a lock, say: sqlx does not expose the key a
    /// cancel request needs). Before, every abandoned connection was closed, so a storage whose
    /// calls all timed out replaced its connections as fast as they were abandoned.
    fn abandon(&self, mut connection: PoolConnection<Postgres>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.discard(connection);
        };
        let (kept, pool, linger) = (Arc::clone(&self.kept), self.pool.clone(), self.linger);
        runtime.spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(GRACE, connection.ping()).await {
                return Kept::give_back(&kept, &pool, linger, connection);
            }
            tracing::debug!(target: "tenure_postgres", "an abandoned call's connection stayed busy: closed");
            let closing = connection.detach();
            Kept::wake_one(&kept);
            let _ = tokio::time::timeout(GRACE, closing.close()).await;
        });
    }

    fn give_back(&self, connection: PoolConnection<Postgres>) {
        Kept::give_back(&self.kept, &self.pool, self.linger, connection);
    }

    fn max_size(&self) -> usize {
        usize::try_from(self.pool.options().get_max_connections()).unwrap_or(usize::MAX)
    }

    fn close(&self) {
        // Marks the pool closed at once; closing its connections takes a task (the kept ones
        // close as they drop into the closed pool).
        let pool = self.pool.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { pool.close().await })),
            Err(_) => drop(pool.close()),
        }
        Kept::release(&self.kept);
    }

    fn let_go(&self) {
        Kept::release(&self.kept);
    }
}

impl Row for PgRow {
    fn value(&self, idx: usize) -> Result<Value<'_>, BoxError> {
        let value = self.try_get_raw(idx)?;
        let oid = value.type_info().oid().map(|oid| oid.0).ok_or_else(|| {
            format!(
                "column {idx} has no type OID ({})",
                value.type_info().name()
            )
        })?;
        if value.is_null() {
            return Ok(Value { oid, raw: None });
        }
        if value.format() != PgValueFormat::Binary {
            return Err(format!("column {idx} came in text format").into());
        }
        Ok(Value {
            oid,
            raw: Some(value.as_bytes()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of `driver`'s checkouts wait in its pool.
    fn waiting(driver: &Sqlx) -> usize {
        Kept::lock(&driver.kept).waiting
    }

    /// How many checkouts wait for a connection handed over by another call.
    fn waiting_for_a_hand(driver: &Sqlx) -> usize {
        Kept::lock(&driver.kept)
            .handoff
            .iter()
            .filter(|w| !w.is_closed())
            .count()
    }

    /// Waits until `done` says so, polling every millisecond, for at most 5 s (the caller's
    /// assertion then says what did not happen).
    async fn settle(done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A checkout of `driver`'s, in a task of its own.
    fn checkout_in_task(
        driver: &Arc<Sqlx>,
    ) -> tokio::task::JoinHandle<Result<PoolConnection<Postgres>, Failure>> {
        let driver = Arc::clone(driver);
        tokio::spawn(async move { driver.checkout().await })
    }

    /// A storage's own pool of one connection, with it checked out, and a checkout waiting for
    /// it in a task.
    async fn one_held_one_waiting() -> (
        Arc<Sqlx>,
        PoolConnection<Postgres>,
        tokio::task::JoinHandle<Result<PoolConnection<Postgres>, Failure>>,
    ) {
        let info = ConnInfo::parse(&tenure_pg_test::required_server().url).unwrap();
        let driver = Arc::new(Sqlx::from_conninfo(&info, 1, Duration::from_secs(60)).unwrap());
        let held = driver.checkout().await.unwrap();
        let waiter = checkout_in_task(&driver);
        settle(|| waiting_for_a_hand(&driver) > 0).await;
        assert_eq!(
            waiting_for_a_hand(&driver),
            1,
            "the checkout waits for a hand"
        );
        assert_eq!(waiting(&driver), 0, "and not in the pool");
        (driver, held, waiter)
    }

    /// Checks that the waiting checkout got a connection within 5 s, and that it serves a
    /// statement; then closes the pool.
    async fn served(
        driver: Arc<Sqlx>,
        waiter: tokio::task::JoinHandle<Result<PoolConnection<Postgres>, Failure>>,
        why: &str,
    ) {
        let mut got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("{why}: the waiting checkout got no connection"))
            .unwrap()
            .unwrap();
        let rows = Sqlx::query(&mut got, &Sql::from("SELECT 1"), &[]).await;
        assert_eq!(rows.unwrap().len(), 1, "{why}: the connection serves calls");
        drop(got);
        driver.pool.close().await;
    }

    #[tokio::test]
    async fn a_connection_given_back_is_handed_to_the_waiting_checkout() {
        let (driver, held, waiter) = one_held_one_waiting().await;
        driver.give_back(held);
        served(driver, waiter, "given back").await;
    }

    #[tokio::test]
    async fn a_checkout_waiting_for_a_hand_connects_when_a_connection_is_closed() {
        let (driver, held, waiter) = one_held_one_waiting().await;
        // Nothing is given back: the pool is no longer full, and the waiter opens a connection.
        driver.discard(held);
        served(driver, waiter, "discarded").await;
    }

    #[tokio::test]
    async fn an_abandoned_call_s_connection_is_handed_to_the_waiting_checkout() {
        for sleep in ["0.01", "0.5"] {
            // Idle again within the grace (taken back), and busy past it (closed).
            let (driver, mut held, waiter) = one_held_one_waiting().await;
            let sql = Sql::from(format!("SELECT pg_sleep({sleep})"));
            let call =
                tokio::time::timeout(Duration::from_millis(2), Sqlx::query(&mut held, &sql, &[]))
                    .await;
            assert!(call.is_err(), "the call is abandoned in flight");
            driver.abandon(held);
            served(
                driver,
                waiter,
                &format!("abandoned during a sleep of {sleep} s"),
            )
            .await;
        }
    }

    /// A relay on a loopback port to the test server that connects each session it accepts
    /// only once `gate` gives it a permit: a connect that stalls until the test lets it through.
    async fn gated_relay(gate: Arc<tokio::sync::Semaphore>) -> String {
        let url = &tenure_pg_test::required_server().url;
        let row = tenure_pg_test::connect(url)
            .await
            .unwrap()
            .query_one("SELECT host(inet_server_addr()), inet_server_port()", &[])
            .await
            .unwrap();
        let (host, port): (Option<String>, Option<i32>) = (row.get(0), row.get(1));
        let target = format!(
            "{}:{}",
            host.expect("the test server is reached over TCP"),
            port.expect("the test server is reached over TCP")
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (target, gate) = (target.clone(), Arc::clone(&gate));
                tokio::spawn(async move {
                    let Ok(permit) = gate.acquire_owned().await else {
                        return;
                    };
                    permit.forget();
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        let mut info = ConnInfo::parse(url).unwrap();
        info.set("host", "127.0.0.1");
        info.remove("hostaddr");
        info.set("port", local.to_string());
        info.to_key_value_string()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_whose_caller_left_is_handed_to_the_next_waiting_checkout() {
        // A storage's own pool of two, through a relay whose connects wait for the test.
        let gate = Arc::new(tokio::sync::Semaphore::new(1));
        let info = ConnInfo::parse(&gated_relay(Arc::clone(&gate)).await).unwrap();
        let driver = Arc::new(Sqlx::from_conninfo(&info, 2, Duration::from_secs(60)).unwrap());
        let held = driver.checkout().await.unwrap();
        // A checkout that finds the pool not full waits in it, opening a connection (stalled).
        let left = checkout_in_task(&driver);
        settle(|| waiting(&driver) > 0).await;
        assert_eq!(waiting(&driver), 1, "the first checkout waits in the pool");
        // The next finds it full (the connect counts) and waits for a connection handed over.
        let waiter = checkout_in_task(&driver);
        settle(|| waiting_for_a_hand(&driver) > 0).await;
        assert_eq!(
            waiting_for_a_hand(&driver),
            1,
            "the second waits for a hand"
        );
        // The first caller leaves (carried by another's call, say); its connect goes on and
        // completes. Its connection must reach the waiting checkout: the held one never comes
        // back during the test.
        left.abort();
        assert!(left.await.unwrap_err().is_cancelled());
        gate.add_permits(1);
        let mut got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiting checkout got no connection: the departed caller's went astray")
            .unwrap()
            .unwrap();
        let rows = Sqlx::query(&mut got, &Sql::from("SELECT 1"), &[]).await;
        assert_eq!(rows.unwrap().len(), 1, "the connection serves calls");
        drop((got, held));
        driver.pool.close().await;
    }

    #[tokio::test]
    async fn a_wait_for_a_full_pool_ends_when_its_caller_leaves() {
        // An application's pool, whose waits stay in the pool (a storage's own pool hands its
        // connections over instead, tested above); sqlx's own bound on a wait (60 s) is far
        // beyond the test's.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_lazy(&tenure_pg_test::required_server().url)
            .unwrap();
        let driver = Sqlx::new(pool);
        let held = driver.checkout().await.unwrap();
        for _ in 0..10 {
            let gave_up = tokio::time::timeout(Duration::from_millis(5), driver.checkout()).await;
            assert!(gave_up.is_err(), "the pool's only connection is held");
        }
        // A wait left in the pool's queue would end only when the connection is given back.
        settle(|| waiting(&driver) == 0).await;
        assert_eq!(waiting(&driver), 0, "waits outlived their callers");
        drop(held);
        // Its session ended with PostgreSQL's Terminate message, not cut.
        driver.pool.close().await;
    }
}
