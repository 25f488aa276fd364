//! The tokio-postgres 0.7 driver, through a deadpool-postgres 0.14 pool.
//!
//! Statements are prepared once per connection (`prepare_cached`); rows are read as raw
//! binary values and decoded by the adapter (`decode`). The pools this driver builds connect
//! and abandon calls as [`paced`](super::paced) says; an application's pool is used as it is.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use futures::TryStreamExt;
#[cfg(not(feature = "tls"))]
use tokio_postgres::NoTls;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

use super::paced::{PacedConnect, Pacing};
use super::{Driver, Param, Sql, UrlError};
use crate::decode::{BoxError, Row, Value};
use crate::error::Failure;
use tenure_conninfo::ConnInfo;

/// The TLS connector of the pools this driver builds.
#[cfg(feature = "tls")]
type Tls = super::tls::MakeRustls;
#[cfg(not(feature = "tls"))]
type Tls = NoTls;

/// A deadpool-postgres pool, as a [`Driver`].
pub(crate) struct Deadpool {
    pool: Pool,
    /// For pools this driver built: their paced connects, and the bound on draining an
    /// abandoned call's connection without a cancel (the connect timeout: closing it would
    /// cost a connect).
    paced: Option<(Arc<Pacing<Tls>>, Duration)>,
}

impl Deadpool {
    /// The driver over an application's `pool`.
    pub(crate) fn new(pool: Pool) -> Self {
        Deadpool { pool, paced: None }
    }

    /// A pool of at most `size` connections for `info`, whose callers wait at most `timeout`
    /// (for a connection, for a connect, for a recycle). Unless the string sets them, `application_name` is `tenure` and the connect timeout
    /// (of the connect itself, which goes on when its caller left) is `connect_timeout`.
    /// Connects are paced and detached from their callers ([`paced`](super::paced)).
    pub(crate) fn from_conninfo(
        info: &ConnInfo,
        size: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, UrlError> {
        #[cfg(feature = "tls")]
        let (config, tls) =
            super::tls::tokio_postgres(info, connect_timeout).map_err(UrlError::Url)?;
        #[cfg(not(feature = "tls"))]
        let (config, tls) = (
            super::config::tokio_config(info, connect_timeout).map_err(UrlError::Url)?,
            NoTls,
        );
        let pacing = Pacing::new(tls, size);
        let manager = Manager::from_connect(
            config,
            PacedConnect(Arc::clone(&pacing)),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .map_err(|e| UrlError::Pool(e.to_string().into()))?;
        Ok(Deadpool {
            pool,
            paced: Some((pacing, connect_timeout)),
        })
    }
}

/// Whether a checkout of `pool` now would open a connection: none is idle, and the pool has
/// room for another. A guess (the pool changes meanwhile) that only decides where the checkout
/// runs.
fn opens_a_connection(pool: &Pool) -> bool {
    let status = pool.status();
    status.available == 0 && status.size < status.max_size
}

fn from_pg(err: tokio_postgres::Error) -> Failure {
    match err.as_db_error() {
        Some(db) => Failure::Server {
            code: db.code().code().to_owned(),
            constraint: db.constraint().map(str::to_owned),
            message: db.message().to_owned(),
            source: Box::new(err),
        },
        // No SQLSTATE: the connection broke, or the client could not talk to the server.
        None => Failure::Connection(Box::new(err)),
    }
}

fn from_pool(err: PoolError) -> Failure {
    match err {
        PoolError::Closed => Failure::PoolClosed,
        PoolError::Backend(err) => from_pg(err),
        PoolError::Timeout(kind) => Failure::PoolTimeout(format!("{kind:?}")),
        other => Failure::Pool(other.to_string().into()),
    }
}

impl Driver for Deadpool {
    type Connection = Object;
    type Row = tokio_postgres::Row;

    async fn checkout(&self) -> Result<Object, Failure> {
        if self.paced.is_none()
            && opens_a_connection(&self.pool)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // An application's pool opens a connection inside `get`, and a caller that leaves
            // meanwhile (its request carried by another's call, its timeout) would throw the
            // half-made connection away: with eight callers renewing on a pool of eight, 602
            // sessions were opened in one second, enough to overflow the server's queue of
            // connections being accepted. In a task of its own the connect finishes, and the
            // pool keeps the connection when nobody waits for it any more. (The pools this
            // driver builds detach their connects themselves: `paced`.)
            let pool = self.pool.clone();
            return match runtime.spawn(async move { pool.get().await }).await {
                Ok(got) => got.map_err(from_pool),
                Err(e) => Err(Failure::Driver(
                    format!("the task that checked a connection out ended: {e}").into(),
                )),
            };
        }
        self.pool.get().await.map_err(from_pool)
    }

    async fn query(
        connection: &mut Object,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, Failure> {
        let statement = connection.prepare_cached(sql).await.map_err(from_pg)?;
        connection
            .query_raw(&statement, params)
            .await
            .map_err(from_pg)?
            .try_collect()
            .await
            .map_err(from_pg)
    }

    async fn forget_statements(connection: &mut Object) -> Result<(), Failure> {
        // The cached statements are closed on the server as they drop.
        connection.statement_cache.clear();
        Ok(())
    }

    async fn script(connection: &mut Object, sql: &str) -> Result<(), Failure> {
        connection.batch_execute(sql).await.map_err(from_pg)
    }

    fn discard(&self, connection: Object) {
        drop(Object::take(connection));
    }

    fn max_size(&self) -> usize {
        self.pool.status().max_size
    }

    fn abandon(&self, connection: Object) {
        match (&self.paced, tokio::runtime::Handle::try_current()) {
            (Some((pacing, bound)), Ok(_)) => pacing.abandon(connection, *bound),
            _ => self.discard(connection),
        }
    }

    fn close(&self) {
        self.pool.close();
        if let Some((pacing, _)) = &self.paced {
            pacing.close();
        }
    }
}

/// Binds each parameter with tokio-postgres's own encoder for its type.
impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        self.to_sql_checked(ty, out)
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value, by the encoder of the variant (see `to_sql_checked`).
        true
    }

    fn to_sql_checked(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match *self {
            Param::Text(v) => v.to_sql_checked(ty, out),
            Param::OptionalText(v) => v.to_sql_checked(ty, out),
            Param::Int8(v) => v.to_sql_checked(ty, out),
            Param::Bool(v) => v.to_sql_checked(ty, out),
            Param::Texts(v) => v.to_sql_checked(ty, out),
            Param::TextRefs(v) => v.to_sql_checked(ty, out),
            Param::Int8s(v) => v.to_sql_checked(ty, out),
            Param::Bools(v) => v.to_sql_checked(ty, out),
            Param::Jsonbs(v) => v.to_sql_checked(ty, out),
        }
    }
}

/// A column as it came: its type and its bytes, for `decode`.
struct Raw<'a>(Value<'a>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(Raw(Value {
            oid: ty.oid(),
            raw: Some(raw),
        }))
    }

    fn from_sql_null(ty: &Type) -> Result<Self, BoxError> {
        Ok(Raw(Value {
            oid: ty.oid(),
            raw: None,
        }))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

impl Row for tokio_postgres::Row {
    fn value(&self, idx: usize) -> Result<Value<'_>, BoxError> {
        self.try_get::<_, Raw<'_>>(idx)
            .map(|raw| raw.0)
            .map_err(Into::into)
    }
}
