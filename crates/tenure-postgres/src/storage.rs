//! The storage: one function call per lease call, on a pooled connection, within a deadline.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tenure_ports::domain::Transition;
use tenure_ports::{
    Capabilities, Capability, Contender, EventStorage, EventStorageError, LeaseName, LeaseRequest,
    LeaseResponse, LeaseSnapshot, Owner, Timestamp, async_trait, sort_contenders,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::builder::PostgresEventStorageBuilder;
use crate::error::{connection_broken, from_pg, from_pool};
use crate::ops::{self, Statements};
use crate::prefix::TablePrefix;

/// Leases in PostgreSQL: `<prefix>leases` and `<prefix>lease_contenders`, one short
/// transaction per call on a pool, serialized per lease by a transaction-scoped advisory lock,
/// on the database's clock.
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
    call_timeout: Duration,
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
        owns_pool: bool,
        target: String,
    ) -> Self {
        PostgresEventStorage {
            inner: Arc::new(Inner {
                pool,
                statements: Statements::new(&prefix),
                prefix,
                call_timeout,
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
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        let timeout = self.inner.call_timeout;
        let work = async {
            let object = self
                .inner
                .pool
                .get()
                .await
                .map_err(|e| from_pool(what, e))?;
            let mut checkout = Checkout {
                object: Some(object),
                in_flight: true,
            };
            let result = match checkout.object.as_ref() {
                Some(client) => run(client, sql, params).await,
                None => return Err(EventStorageError::internal("no connection")),
            };
            // A connection that broke is dropped here rather than offered to the next caller.
            checkout.in_flight = matches!(&result, Err(e) if connection_broken(e));
            result.map_err(|e| from_pg(what, e))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(target: "tenure_postgres", what, ?timeout, "lease call timed out");
                Err(EventStorageError::unavailable(format!(
                    "{what}: no answer from PostgreSQL within {timeout:?}; the outcome is unknown"
                )))
            }
        }
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

/// A pooled connection checked out for one statement. If the call is abandoned while the
/// statement is in flight (a timeout, a dropped future), or the connection broke, the
/// connection is taken out of the pool and closed instead of being handed to the next caller
/// with an answer still pending or a dead socket.
struct Checkout {
    object: Option<Object>,
    in_flight: bool,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if self.in_flight
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
        Capabilities::from([Capability::Lease])
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

    /// Marks the storage (and every clone) closed and, if the storage built its own pool,
    /// closes the pool: idle connections are closed at once, busy ones when their call ends.
    /// A pool passed in with [`pool`](PostgresEventStorageBuilder::pool) stays open.
    async fn close(&self) -> Result<(), EventStorageError> {
        self.close_pool_if_owned();
        Ok(())
    }
}
