//! Building a [`PostgresEventStorage`]: where the connections come from, which prefix, which
//! schema mode, and how long a call may take.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tenure_ports::{BoxError, EventStorageError};
use tokio_postgres::NoTls;

use crate::error::{from_pool, redact, scrub};
use crate::prefix::{DEFAULT_PREFIX, PrefixError, TablePrefix};
use crate::schema::{self, SchemaMode};
use crate::storage::PostgresEventStorage;

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
    Pool(Pool),
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
    prefix: String,
    schema_mode: SchemaMode,
    pool_size: usize,
    call_timeout: Duration,
    visibility_wait: Duration,
    schema_timeout: Duration,
}

impl fmt::Debug for PostgresEventStorageBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::None => "none".to_owned(),
            Source::Url(url) => redact(url),
            Source::Pool(_) => "an existing pool".to_owned(),
        };
        f.debug_struct("PostgresEventStorageBuilder")
            .field("source", &source)
            .field("prefix", &self.prefix)
            .field("schema_mode", &self.schema_mode)
            .field("pool_size", &self.pool_size)
            .field("call_timeout", &self.call_timeout)
            .field("visibility_wait", &self.visibility_wait)
            .field("schema_timeout", &self.schema_timeout)
            .finish()
    }
}

impl Default for PostgresEventStorageBuilder {
    fn default() -> Self {
        PostgresEventStorageBuilder {
            source: Source::None,
            prefix: DEFAULT_PREFIX.to_owned(),
            schema_mode: SchemaMode::default(),
            pool_size: DEFAULT_POOL_SIZE,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            visibility_wait: DEFAULT_VISIBILITY_WAIT,
            schema_timeout: DEFAULT_SCHEMA_TIMEOUT,
        }
    }
}

impl PostgresEventStorageBuilder {
    /// Connect with a connection string: a URL (`postgres://user:password@host:5432/db`) or
    /// libpq key/value pairs. The storage builds and owns its pool (without TLS: to use TLS,
    /// build a pool with your connector and pass it to [`pool`](Self::pool)). Unless the string
    /// sets them, `application_name` is `tenure` and the connect timeout is the call timeout.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.source = Source::Url(url.into());
        self
    }

    /// Use the application's own pool. [`close`](tenure_ports::EventStorage::close) then only
    /// closes this storage, not the pool, which belongs to the application; the
    /// [`pool_size`](Self::pool_size) setting does not apply.
    #[must_use]
    pub fn pool(mut self, pool: Pool) -> Self {
        self.source = Source::Pool(pool);
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
        ] {
            if value.is_zero() {
                return Err(BuildError::Setting {
                    name,
                    reason: "must be greater than zero".into(),
                });
            }
        }
        let (pool, owns_pool, target) = match self.source {
            Source::None => return Err(BuildError::NoConnection),
            Source::Pool(pool) => (pool, false, "an application-provided pool".to_owned()),
            Source::Url(url) => {
                if self.pool_size == 0 {
                    return Err(BuildError::Setting {
                        name: "pool_size",
                        reason: "must be at least 1".into(),
                    });
                }
                let pool = pool_from_url(&url, self.pool_size, self.call_timeout)?;
                (pool, true, redact(&url))
            }
        };
        tracing::debug!(target: "tenure_postgres", %prefix, %target, mode = ?self.schema_mode, "building the storage");
        let storage = PostgresEventStorage::new(
            pool,
            prefix,
            self.call_timeout,
            self.visibility_wait,
            owns_pool,
            target,
        );
        if self.schema_mode != SchemaMode::None {
            let work = apply_schema_mode(&storage, self.schema_mode);
            match tokio::time::timeout(self.schema_timeout, work).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    storage.close_pool_if_owned();
                    return Err(err.into());
                }
                Err(_) => {
                    storage.close_pool_if_owned();
                    return Err(EventStorageError::unavailable(format!(
                        "the schema work did not finish within {:?}",
                        self.schema_timeout
                    ))
                    .into());
                }
            }
        }
        Ok(storage)
    }
}

async fn apply_schema_mode(
    storage: &PostgresEventStorage,
    mode: SchemaMode,
) -> Result<(), EventStorageError> {
    let mut client = storage
        .pool()
        .get()
        .await
        .map_err(|e| from_pool("connecting for the schema check", e))?;
    if mode == SchemaMode::Ensure
        && let Err(err) = schema::ensure(&mut client, storage.prefix()).await
    {
        // The connection may be inside a failed transaction: never give it back.
        drop(deadpool_postgres::Object::take(client));
        return Err(err);
    }
    schema::validate(&**client, storage.prefix()).await
}

fn pool_from_url(url: &str, size: usize, timeout: Duration) -> Result<Pool, BuildError> {
    let password = password_of(url);
    let mut config = tokio_postgres::Config::from_str(url).map_err(|e| BuildError::Url {
        url: redact(url),
        reason: scrub(&e.to_string(), password.as_deref()),
    })?;
    if config.get_application_name().is_none() {
        config.application_name("tenure");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .build()
        .map_err(|e| BuildError::Pool(e.to_string().into()))
}

/// The password a connection string carries, if any, to scrub it from driver messages.
fn password_of(url: &str) -> Option<String> {
    tokio_postgres::Config::from_str(url)
        .ok()
        .and_then(|c| {
            c.get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        })
        .or_else(|| {
            // Unparseable: take the userinfo's password by hand.
            let rest = &url[url.find("://")? + 3..];
            let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
            let userinfo = &authority[..authority.rfind('@')?];
            userinfo.split_once(':').map(|(_, p)| p.to_owned())
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_passwords_to_scrub() {
        assert_eq!(password_of("postgres://u:pw@h/db").as_deref(), Some("pw"));
        assert_eq!(password_of("host=h password=pw").as_deref(), Some("pw"));
        assert_eq!(
            password_of("postgres://u:pw@h:notaport/db").as_deref(),
            Some("pw")
        );
        assert_eq!(password_of("postgres://u@h/db"), None);
    }
}
