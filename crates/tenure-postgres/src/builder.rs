//! Building a [`PostgresEventStorage`]: where the connections come from (a URL, or the
//! application's own pool of either driver), which prefix, which schema mode, and how long a
//! call may take.

use std::fmt;
use std::time::Duration;

use tenure_ports::{BoxError, EventStorageError};

use crate::changes::{Notifications, Source as ListenerSource};
use crate::connection::{Driver, Link, UrlError};
use crate::prefix::{DEFAULT_PREFIX, PrefixError, TablePrefix};
use crate::schema::{self, SchemaMode};
use crate::storage::{Adapter, Engine, PostgresDriver, PostgresEventStorage, on_adapter};
use tenure_conninfo::{ResolveError, redact};

/// The default pool size for a pool built from a URL.
pub const DEFAULT_POOL_SIZE: usize = 8;
/// The default bound on one call, from asking the pool for a connection to the answer.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound on how long a read waits for older transactions to finish (see
/// [`PostgresEventStorageBuilder::visibility_wait`]).
pub const DEFAULT_VISIBILITY_WAIT: Duration = Duration::from_millis(250);
/// The default bound on the schema work of [`PostgresEventStorageBuilder::build`].
pub const DEFAULT_SCHEMA_TIMEOUT: Duration = Duration::from_secs(30);

enum Source {
    None,
    Url(String),
    Environment,
    Pool(ApplicationPool),
}

/// A pool the application owns, of either driver, for
/// [`PostgresEventStorageBuilder::pool`]: made with `.into()` (or implicitly) from a
/// `deadpool_postgres::Pool` (feature `deadpool`) or a `sqlx::PgPool` (feature `sqlx-0_9`).
pub struct ApplicationPool(PoolOf);

enum PoolOf {
    #[cfg(feature = "deadpool")]
    Deadpool(deadpool_postgres::Pool),
    #[cfg(feature = "sqlx-0_9")]
    Sqlx09(sqlx::PgPool),
}

impl ApplicationPool {
    /// The driver of the pool.
    pub fn driver(&self) -> PostgresDriver {
        match self.0 {
            #[cfg(feature = "deadpool")]
            PoolOf::Deadpool(_) => PostgresDriver::Deadpool,
            #[cfg(feature = "sqlx-0_9")]
            PoolOf::Sqlx09(_) => PostgresDriver::Sqlx09,
        }
    }
}

impl fmt::Debug for ApplicationPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApplicationPool({})", self.driver())
    }
}

#[cfg(feature = "deadpool")]
impl From<deadpool_postgres::Pool> for ApplicationPool {
    fn from(pool: deadpool_postgres::Pool) -> Self {
        ApplicationPool(PoolOf::Deadpool(pool))
    }
}

#[cfg(feature = "sqlx-0_9")]
impl From<sqlx::PgPool> for ApplicationPool {
    fn from(pool: sqlx::PgPool) -> Self {
        ApplicationPool(PoolOf::Sqlx09(pool))
    }
}

/// The driver [`PostgresEventStorageBuilder::url`] builds its pool with unless told otherwise:
/// deadpool if it is compiled in, else sqlx 0.9.
const DEFAULT_DRIVER: PostgresDriver = {
    #[cfg(feature = "deadpool")]
    {
        PostgresDriver::Deadpool
    }
    #[cfg(not(feature = "deadpool"))]
    {
        PostgresDriver::Sqlx09
    }
};

impl PostgresEventStorage {
    /// A builder: give it [`url`](PostgresEventStorageBuilder::url) or
    /// [`pool`](PostgresEventStorageBuilder::pool), then
    /// [`build`](PostgresEventStorageBuilder::build).
    pub fn builder() -> PostgresEventStorageBuilder {
        PostgresEventStorageBuilder::default()
    }
}

/// Configures and builds a [`PostgresEventStorage`]; see [`PostgresEventStorage::builder`].
///
/// ```no_run
/// # async fn f() -> Result<(), tenure_postgres::BuildError> {
/// use std::time::Duration;
/// use tenure_postgres::{PostgresEventStorage, SchemaMode};
/// let storage = PostgresEventStorage::builder()
///     .url("postgres://app@db.internal/app")
///     .prefix("billing_")
///     .schema_mode(SchemaMode::Validate)
///     .pool_size(4)
///     .call_timeout(Duration::from_secs(2))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct PostgresEventStorageBuilder {
    source: Source,
    driver: PostgresDriver,
    prefix: String,
    schema_mode: SchemaMode,
    pool_size: usize,
    call_timeout: Duration,
    connect_timeout: Option<Duration>,
    visibility_wait: Duration,
    schema_timeout: Duration,
    notifications: bool,
}

impl fmt::Debug for PostgresEventStorageBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::None => "none".to_owned(),
            Source::Url(url) => redact(url),
            Source::Environment => "the environment".to_owned(),
            Source::Pool(pool) => format!("an existing {} pool", pool.driver()),
        };
        f.debug_struct("PostgresEventStorageBuilder")
            .field("source", &source)
            .field("driver", &self.driver)
            .field("prefix", &self.prefix)
            .field("schema_mode", &self.schema_mode)
            .field("pool_size", &self.pool_size)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("visibility_wait", &self.visibility_wait)
            .field("schema_timeout", &self.schema_timeout)
            .field("notifications", &self.notifications)
            .finish()
    }
}

impl Default for PostgresEventStorageBuilder {
    fn default() -> Self {
        PostgresEventStorageBuilder {
            source: Source::None,
            driver: DEFAULT_DRIVER,
            prefix: DEFAULT_PREFIX.to_owned(),
            schema_mode: SchemaMode::default(),
            pool_size: DEFAULT_POOL_SIZE,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: None,
            visibility_wait: DEFAULT_VISIBILITY_WAIT,
            schema_timeout: DEFAULT_SCHEMA_TIMEOUT,
            notifications: true,
        }
    }
}

impl PostgresEventStorageBuilder {
    /// Connect with a connection string: a URL (`postgres://user:password@host:5432/db`) or
    /// libpq key/value pairs (`host=db user=app sslmode=verify-full`), read by
    /// [`tenure_conninfo`]. As in libpq, the `PG*` variables (and the password file) fill in
    /// what the string leaves out. The storage builds and owns its pool, on the
    /// [`driver`](Self::driver) chosen, with TLS as `sslmode` asks (see `docs/postgres.md`,
    /// "Connecting"). Unless the string sets it, `application_name` is `tenure`; connecting is
    /// bounded by the call timeout.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.source = Source::Url(url.into());
        self
    }

    /// Connect to the server the environment names, as the `tenure` command does:
    /// `TENURE_DATABASE_URL`, else `DATABASE_URL`, else libpq's `PG*` variables
    /// ([`tenure_conninfo::resolve`]). Building fails with [`BuildError::NoServer`], naming the
    /// variables tried, when none is set.
    #[must_use]
    pub fn url_from_env(mut self) -> Self {
        self.source = Source::Environment;
        self
    }

    /// The driver of the pool that [`url`](Self::url) builds (default: deadpool if the
    /// `deadpool` feature is on, else sqlx 0.9). A pool passed to [`pool`](Self::pool) brings
    /// its own driver.
    #[must_use]
    pub fn driver(mut self, driver: PostgresDriver) -> Self {
        self.driver = driver;
        self
    }

    /// Use the application's own pool: a `deadpool_postgres::Pool` or a `sqlx::PgPool`, of
    /// the versions re-exported by this crate. [`close`](tenure_ports::EventStorage::close)
    /// then only closes this storage, not the pool, which belongs to the application; the
    /// [`pool_size`](Self::pool_size) setting does not apply.
    ///
    /// A sqlx pool runs each lease call on a connection of its own, so its settings matter:
    /// with sqlx's default `test_before_acquire(true)` every call costs one more round trip (a
    /// ping) before its statement. sqlx also pings every connection given back to it, so the
    /// storage keeps a connection of a `PgPool` for at most 2 ms after its call, for its next
    /// call, and never while one of its calls waits in the pool. Connections the adapter
    /// abandoned (a timeout, a broken connection) are detached from the pool and closed.
    #[must_use]
    pub fn pool(mut self, pool: impl Into<ApplicationPool>) -> Self {
        self.source = Source::Pool(pool.into());
        self
    }

    /// The table prefix (default `tenure_`); see [`TablePrefix`] for what is accepted.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What to do to the schema when building (default [`SchemaMode::Ensure`]).
    #[must_use]
    pub fn schema_mode(mut self, mode: SchemaMode) -> Self {
        self.schema_mode = mode;
        self
    }

    /// The maximum number of connections of a pool built from a URL (default 8, at least 1).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// The bound on one call, waiting for a connection included (default 5 s). A call that
    /// takes longer fails with [`EventStorageError::Unavailable`]: its outcome is unknown. Keep
    /// it well below the ttls you request.
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The bound on setting up one new connection of a pool the storage builds (default: the
    /// call timeout; a `connect_timeout` in the connection string wins).
    ///
    /// A connect does not end with the call that needed it: it goes on in a task of its own
    /// (on the deadpool driver at most two at once per storage), and a connection made after
    /// its caller gave up serves the next call. So under overload, when calls time out while
    /// connections are being set up, the server is not made to fork backend after backend for
    /// callers that left, and the pool fills up instead (`docs/postgres.md`, "Under
    /// overload"). On the sqlx driver it is the pool's `acquire_timeout`.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long a read may wait for transactions older than the newest committed event to
    /// finish (default 250 ms; never more than half the call timeout; zero: never wait).
    ///
    /// A read returns only events written by transactions older than every transaction still
    /// in flight anywhere in the cluster (the `pg_snapshot_xmin` barrier), so that it never
    /// returns a position beyond an event that may still commit. Right after an append
    /// commits, an older transaction (another append, a lease call, anyone's) may still be
    /// running, and the barrier hides the new events. A read that finds committed events
    /// hidden waits, up to this long, for the barrier to pass them, then reads again: so a read
    /// that starts after an append returned sees its events, unless a transaction stays open
    /// longer than this. After the wait it returns what the barrier allows, never more.
    #[must_use]
    pub fn visibility_wait(mut self, wait: Duration) -> Self {
        self.visibility_wait = wait;
        self
    }

    /// The bound on the schema work done by [`build`](Self::build) (default 30 s).
    #[must_use]
    pub fn schema_timeout(mut self, timeout: Duration) -> Self {
        self.schema_timeout = timeout;
        self
    }

    /// Whether the storage wakes its electors with `LISTEN`/`NOTIFY` (default `true`): with
    /// it on, the storage has [`Capability::LeaseChanges`](tenure_ports::Capability::LeaseChanges)
    /// and keeps one session connection of its own (not one of the pool) listening on
    /// `<prefix>lease_changes`, opened when the storage is built, so that a release or a
    /// step-down request reaches the waiting electors in milliseconds instead of at their next
    /// poll (`docs/postgres.md`, "Wake-ups").
    ///
    /// Turn it off behind a PgBouncer in **transaction** pooling mode, where `LISTEN` silently
    /// does nothing (the session it was sent in is not the one notifications would arrive
    /// on): the storage then does not list the capability, and the electors poll, as they do
    /// on any storage without it. Turning it off changes nothing in the database (the
    /// triggers still notify, and nobody listens).
    ///
    /// A storage built on an application's deadpool pool ([`pool`](Self::pool)) has no
    /// wake-ups whatever this says: deadpool does not tell the settings its connections are
    /// made with, and its connections drop their notifications. Build it from a
    /// [`url`](Self::url) (or on a sqlx pool) for them.
    #[must_use]
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Checks the settings, creates the pool (if given a URL), and applies the schema mode.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no storage behind; an `Ensure` that was running is rolled
    /// back by the server (its transaction never commits), and is safe to run again.
    pub async fn build(self) -> Result<PostgresEventStorage, BuildError> {
        let prefix = TablePrefix::new(self.prefix)?;
        for (name, value) in [
            ("call_timeout", self.call_timeout),
            ("schema_timeout", self.schema_timeout),
            (
                "connect_timeout",
                self.connect_timeout.unwrap_or(self.call_timeout),
            ),
        ] {
            if value.is_zero() {
                return Err(BuildError::Setting {
                    name,
                    reason: "must be greater than zero".into(),
                });
            }
        }
        let connect_timeout = self.connect_timeout.unwrap_or(self.call_timeout);
        let settings = Settings {
            prefix,
            call_timeout: self.call_timeout,
            visibility_wait: self.visibility_wait,
        };
        let (engine, target, listener) = match self.source {
            Source::None => return Err(BuildError::NoConnection),
            Source::Pool(pool) => {
                let target = format!("an application-provided {} pool", pool.driver());
                let (engine, listener) = match pool.0 {
                    #[cfg(feature = "deadpool")]
                    PoolOf::Deadpool(pool) => (
                        Engine::Deadpool(
                            settings
                                .adapter(crate::connection::deadpool::Deadpool::new(pool), false),
                        ),
                        Err("an application's deadpool pool does not tell its connection settings"),
                    ),
                    #[cfg(feature = "sqlx-0_9")]
                    PoolOf::Sqlx09(pool) => {
                        let options = ListenerSource::sqlx((*pool.connect_options()).clone());
                        (
                            Engine::Sqlx09(
                                settings.adapter(crate::connection::sqlx::Sqlx::new(pool), false),
                            ),
                            Ok(options),
                        )
                    }
                };
                (engine, target, listener)
            }
            Source::Url(_) | Source::Environment => {
                if self.pool_size == 0 {
                    return Err(BuildError::Setting {
                        name: "pool_size",
                        reason: "must be at least 1".into(),
                    });
                }
                let explicit = match &self.source {
                    Source::Url(url) => Some(url.as_str()),
                    _ => None,
                };
                let found = tenure_conninfo::resolve(explicit).map_err(|e| match e {
                    ResolveError::Invalid { error, .. } => BuildError::Url {
                        url: explicit.map_or_else(|| "from the environment".to_owned(), redact),
                        reason: error.to_string(),
                    },
                    other => BuildError::NoServer(other),
                })?;
                let (size, timeout) = (self.pool_size, self.call_timeout);
                let url_error = |e: UrlError| match e {
                    UrlError::Url(reason) => BuildError::Url {
                        url: found.shown.clone(),
                        reason,
                    },
                    UrlError::Pool(err) => BuildError::Pool(err),
                };
                let info = &found.info;
                let listener = listener_source(self.driver, info, timeout).map_err(url_error)?;
                let engine = match self.driver {
                    #[cfg(feature = "deadpool")]
                    PostgresDriver::Deadpool => Engine::Deadpool(
                        settings.adapter(
                            crate::connection::deadpool::Deadpool::from_conninfo(
                                info,
                                size,
                                timeout,
                                self.connect_timeout.unwrap_or(timeout),
                            )
                            .map_err(url_error)?,
                            true,
                        ),
                    ),
                    #[cfg(feature = "sqlx-0_9")]
                    PostgresDriver::Sqlx09 => Engine::Sqlx09(
                        settings.adapter(
                            crate::connection::sqlx::Sqlx::from_conninfo(
                                info,
                                size,
                                self.connect_timeout.unwrap_or(timeout),
                            )
                            .map_err(url_error)?,
                            true,
                        ),
                    ),
                };
                (engine, found.shown.clone(), Ok(listener))
            }
        };
        let changes = match listener {
            _ if !self.notifications => Notifications::off("turned off by the builder"),
            Ok(source) => Notifications::on(source, &settings.prefix, connect_timeout),
            Err(reason) => Notifications::off(reason),
        };
        let storage = PostgresEventStorage::new(engine, target, changes);
        tracing::debug!(target: "tenure_postgres", storage = ?storage, mode = ?self.schema_mode, "building the storage");
        if self.schema_mode != SchemaMode::None {
            let work = async {
                on_adapter!(storage.engine(), a => {
                    schema::apply(&a.link, &a.prefix, self.schema_mode).await
                })
            };
            let outcome = tokio::time::timeout(self.schema_timeout, work).await;
            let failed = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err),
                Err(_) => Some(EventStorageError::unavailable(format!(
                    "the schema work did not finish within {:?}",
                    self.schema_timeout
                ))),
            };
            if let Some(err) = failed {
                storage.close_now();
                return Err(err.into());
            }
        }
        // The listener is started here rather than by the first subscription, so that a
        // subscription taken once `build` returned hears every later change (and the first
        // handover after start-up is as quick as the others). Its connection attempt and its
        // `LISTEN` are each bounded by the connect timeout.
        storage.start_notifications(connect_timeout * 2).await;
        Ok(storage)
    }
}

/// Where the listener of a storage built from a connection string connects: the same server,
/// with the same settings and TLS as the pool of `driver`.
#[cfg_attr(not(feature = "deadpool"), allow(unused_variables))]
fn listener_source(
    driver: PostgresDriver,
    info: &tenure_conninfo::ConnInfo,
    timeout: Duration,
) -> Result<ListenerSource, UrlError> {
    Ok(match driver {
        #[cfg(all(feature = "deadpool", feature = "tls"))]
        PostgresDriver::Deadpool => {
            let (config, tls) =
                crate::connection::tls::tokio_postgres(info, timeout).map_err(UrlError::Url)?;
            ListenerSource::tokio(config, tls)
        }
        #[cfg(all(feature = "deadpool", not(feature = "tls")))]
        PostgresDriver::Deadpool => ListenerSource::tokio(
            crate::connection::config::tokio_config(info, timeout).map_err(UrlError::Url)?,
            tokio_postgres::NoTls,
        ),
        #[cfg(feature = "sqlx-0_9")]
        PostgresDriver::Sqlx09 => ListenerSource::sqlx(
            crate::connection::config::sqlx_options(info).map_err(UrlError::Url)?,
        ),
    })
}

/// What every adapter is built with, whichever its driver.
struct Settings {
    prefix: TablePrefix,
    call_timeout: Duration,
    visibility_wait: Duration,
}

impl Settings {
    fn adapter<D: Driver>(&self, driver: D, owns_pool: bool) -> Adapter<D> {
        Adapter::new(
            Link::new(driver, self.call_timeout, owns_pool),
            self.prefix.clone(),
            self.visibility_wait,
        )
    }
}

/// Why a storage could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Neither [`url`](PostgresEventStorageBuilder::url) nor
    /// [`pool`](PostgresEventStorageBuilder::pool) was given.
    #[error("no connection given: call url(..) or pool(..) on the builder")]
    NoConnection,
    /// The table prefix is not acceptable.
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    /// The connection string could not be parsed. `url` is redacted.
    #[error("invalid connection string {url}: {reason}")]
    Url {
        /// The connection string, password redacted.
        url: String,
        /// What is wrong with it (password scrubbed).
        reason: String,
    },
    /// Nothing names a server ([`url_from_env`](PostgresEventStorageBuilder::url_from_env)):
    /// the message names the variables tried.
    #[error(transparent)]
    NoServer(ResolveError),
    /// A setting is out of range.
    #[error("invalid setting {name}: {reason}")]
    Setting {
        /// The setting's builder method.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The pool could not be created.
    #[error("could not create the connection pool")]
    Pool(#[source] BoxError),
    /// The database could not be reached, or the schema is missing or wrong.
    #[error(transparent)]
    Storage(#[from] EventStorageError),
}
