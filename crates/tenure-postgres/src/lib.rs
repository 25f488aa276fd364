//! The PostgreSQL backend of Tenure: leader-election leases that several processes, on several
//! machines, contend for through one database, and the event log and bookmarks that the
//! elected process works through.
//!
//! [`PostgresEventStorage`] implements [`tenure_ports::EventStorage`] with every capability.
//!
//! **Leases** live in two tables, `<prefix>leases` and `<prefix>lease_contenders`, kept apart
//! from the event log. Each lease call is one statement in autocommit: a call of a PL/pgSQL
//! function shipped in `migrations/postgres/`, which takes a transaction-scoped advisory lock on
//! the lease in a statement of its own, reads the clock *after* the lock, decides, and writes.
//! One round trip and one commit per call, which is the floor for a durable lease. Every
//! timestamp comes from the database's clock; none is ever sent by a client. The leases table
//! never needs `DELETE`. The decision itself is the domain's
//! ([`tenure_ports::domain::decide_request`] and
//! [`decide_release`](tenure_ports::domain::decide_release)) computed in SQL; the crate's
//! property test runs random sequences of requests and releases by several owners against
//! both, on a real server with the same `now`, and requires the same responses and the same
//! stored rows.
//!
//! **Events** live in `<prefix>events` (position, id, stream, type, `jsonb` payload, `text[]`
//! tags, instant, and the writing transaction's id), with `<prefix>event_keys` for idempotency
//! keys; **bookmarks** in `<prefix>bookmarks`. An append is one call of
//! `<prefix>append_events_v1`: conditional appends are serialized with every append of the
//! prefix by an advisory lock, and positions are drawn in the order of the writing
//! transactions' ids. A read returns only events written by transactions older than every
//! transaction still in flight (the `pg_snapshot_xmin` barrier), so that reading on from the
//! last position returned never skips an event that commits late. The events table needs no
//! `UPDATE` or `DELETE`. Appends and reads take no lock that a lease call takes, and lease calls
//! never touch the event tables.
//!
//! The conformance kit (`tenure-tck`) runs against all of it in real time.
//!
//! It is not a migration tool and not a connection manager: it uses the application's pool or
//! builds a small one, applies its own DDL only in [`SchemaMode::Ensure`], and leaves the rest
//! of the database alone. Without TLS support of its own, it takes a pool built with the
//! application's TLS connector.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
//! use tenure_postgres::PostgresEventStorage;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = PostgresEventStorage::builder()
//!     .url("postgres://app@db.internal/app")
//!     .build()
//!     .await?;
//! let request = LeaseRequest::new("order-dispatcher", "pod-7f3a9", 0, Duration::from_secs(30));
//! if storage.request_lease(&request).await?.status != LeaseStatus::Standby {
//!     // process, stamping work with the fencing token
//! }
//! # Ok(()) }
//! ```
//!
//! See `docs/postgres.md` for the tables, privileges, schema modes, the barrier, the clock, and
//! failover.

#![deny(missing_docs)]

#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod builder;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod connection;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod decode;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod error;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod events;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod lease;
mod prefix;
mod redact;
mod schema;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod storage;
#[cfg(all(feature = "testing", any(feature = "deadpool", feature = "sqlx-0_9")))]
mod testing;

#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub use builder::{
    ApplicationPool, BuildError, DEFAULT_CALL_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_SCHEMA_TIMEOUT,
    DEFAULT_VISIBILITY_WAIT, PostgresEventStorageBuilder,
};
pub use prefix::{DEFAULT_PREFIX, MAX_PREFIX_BYTES, PrefixError, TablePrefix};
pub use redact::redact;
pub use schema::{SchemaMode, ddl};
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub use storage::{PostgresDriver, PostgresEventStorage};

/// deadpool-postgres 0.14, whose `Pool` [`PostgresEventStorageBuilder::pool`] accepts,
/// re-exported so that an application uses the same version.
#[cfg(feature = "deadpool")]
pub use deadpool_postgres;
/// sqlx 0.9 (with its `postgres` and `runtime-tokio` features), whose `PgPool`
/// [`PostgresEventStorageBuilder::pool`] accepts, re-exported under its major version so
/// that an application uses the same one (and a later major can sit beside it).
#[cfg(feature = "sqlx-0_9")]
pub use sqlx as sqlx_0_9;
/// tokio-postgres 0.7, the driver under [`deadpool_postgres`] (for its `Config`, `NoTls`, and
/// TLS connectors).
#[cfg(feature = "deadpool")]
pub use tokio_postgres;
