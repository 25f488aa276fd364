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

mod builder;
mod composite;
mod error;
mod events;
mod ops;
mod prefix;
mod schema;
mod storage;

pub use builder::{
    BuildError, DEFAULT_CALL_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_SCHEMA_TIMEOUT,
    DEFAULT_VISIBILITY_WAIT, PostgresEventStorageBuilder,
};
pub use error::redact;
pub use prefix::{DEFAULT_PREFIX, MAX_PREFIX_BYTES, PrefixError, TablePrefix};
pub use schema::{SchemaMode, ddl};
pub use storage::PostgresEventStorage;

/// The pool type accepted by [`PostgresEventStorageBuilder::pool`], re-exported so that an
/// application uses the same version.
pub use deadpool_postgres;
