//! A fence inside the caller's own transaction: the PostgreSQL counterpart of
//! `tenure_election::FencingGuard`, for downstreams whose effects are written to PostgreSQL.
//!
//! [`TransactionFence::check`] (tokio-postgres) and [`TransactionFence::check_sqlx`] (sqlx 0.9)
//! call `<prefix>fence_v1(resource, token)` on the caller's client or connection, inside
//! whatever transaction it has open. The function keeps, per resource, the highest token
//! accepted: a token at or above it is accepted and becomes the resource's token; a lower one
//! raises SQLSTATE `TF001`, which aborts the caller's transaction, so the effect and the fence
//! commit or roll back together. The fence's row stays locked until that transaction ends, so
//! two tenures' transactions on one resource are decided one after the other. The table and
//! the function are created by [`SchemaMode::Ensure`](crate::SchemaMode::Ensure) with the rest
//! of the schema (and checked by `Validate`); see `docs/postgres.md`, "A fence in your
//! transaction".

use tenure_ports::FencingToken;

use crate::prefix::{PrefixError, TablePrefix};

/// The SQLSTATE `fence_v1` raises for a stale token.
pub const STALE_TOKEN_SQLSTATE: &str = "TF001";

/// Calls the fence of one prefix in the caller's transaction.
///
/// ```no_run
/// # #[cfg(feature = "deadpool")]
/// # async fn f(client: &mut tokio_postgres::Client, token: tenure_ports::FencingToken)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use tenure_postgres::{FenceError, TransactionFence};
///
/// let fence = TransactionFence::new("tenure_")?;
/// let tx = client.transaction().await?;
/// match fence.check(&tx, "order-dispatcher", token).await {
///     Ok(()) => {
///         tx.execute("INSERT INTO shipments (order_id) VALUES ($1)", &[&42_i64]).await?;
///         tx.commit().await?;
///     }
///     // A newer tenure has written: the transaction is aborted; drop it (rolls back).
///     Err(FenceError::Stale { .. }) => {}
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TransactionFence {
    statement: String,
}

/// Why a fence check did not accept the token.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// A higher token was accepted for the resource before: the writer's tenure is over. The
    /// caller's transaction is aborted (the server raised an error in it).
    #[error(
        "stale fencing token {token} for resource {resource:?}: token {current} was already accepted"
    )]
    Stale {
        /// The resource.
        resource: String,
        /// The token the write carried.
        token: u64,
        /// The highest token accepted for the resource.
        current: u64,
    },
    /// The call failed for another reason (the connection, a missing fence table, a missing
    /// privilege); the transaction's outcome is the caller's to decide.
    #[error("the fence check failed: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl TransactionFence {
    /// The fence of the tables with `prefix` (as given to the storage's builder).
    ///
    /// # Errors
    ///
    /// [`PrefixError`] if `prefix` is not a valid prefix.
    pub fn new(prefix: &str) -> Result<Self, PrefixError> {
        let prefix = TablePrefix::new(prefix)?;
        Ok(TransactionFence {
            statement: format!("SELECT {prefix}fence_v1($1, $2)"),
        })
    }

    /// Checks and raises the fence of `resource` with `token` on `client`, inside its open
    /// transaction (a `tokio_postgres::Transaction`, or a client whose transaction was begun
    /// by hand; outside a transaction the fence commits at once, and fences nothing after it).
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`] if a higher token was accepted for `resource`: the transaction
    /// is aborted; [`FenceError::Database`] for any other failure.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the transaction in an unknown state: roll it back.
    #[cfg(feature = "deadpool")]
    pub async fn check<C: tokio_postgres::GenericClient + Sync>(
        &self,
        client: &C,
        resource: &str,
        token: FencingToken,
    ) -> Result<(), FenceError> {
        match client
            .query_one(self.statement.as_str(), &[&resource, &token.get_i64()])
            .await
        {
            Ok(_) => Ok(()),
            Err(error) => {
                let stale = error.as_db_error().and_then(|db| {
                    (db.code().code() == STALE_TOKEN_SQLSTATE)
                        .then(|| stale(resource, token, db.detail()))
                });
                Err(stale.unwrap_or_else(|| FenceError::Database(Box::new(error))))
            }
        }
    }

    /// Checks and raises the fence of `resource` with `token` on a sqlx connection, inside
    /// its open transaction (pass `&mut *tx` for a `sqlx::Transaction`). As
    /// [`check`](Self::check).
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    ///
    /// # Cancel safety
    ///
    /// As [`check`](Self::check).
    #[cfg(feature = "sqlx-0_9")]
    pub async fn check_sqlx(
        &self,
        connection: &mut sqlx::PgConnection,
        resource: &str,
        token: FencingToken,
    ) -> Result<(), FenceError> {
        let answer = sqlx::query(sqlx::AssertSqlSafe(self.statement.clone()))
            .bind(resource)
            .bind(token.get_i64())
            .fetch_one(connection)
            .await;
        match answer {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db))
                if db.code().as_deref() == Some(STALE_TOKEN_SQLSTATE) =>
            {
                let detail = db
                    .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .and_then(|pg| pg.detail());
                Err(stale(resource, token, detail))
            }
            Err(error) => Err(FenceError::Database(Box::new(error))),
        }
    }
}

/// The refusal, with the accepted token the server put in the error's detail.
fn stale(resource: &str, token: FencingToken, detail: Option<&str>) -> FenceError {
    FenceError::Stale {
        resource: resource.to_owned(),
        token: token.get(),
        current: detail.and_then(|d| d.parse().ok()).unwrap_or(0),
    }
}
