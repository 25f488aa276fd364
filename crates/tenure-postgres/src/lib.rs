//! The PostgreSQL backend of Tenure: leader-election leases that several processes, on several
//! machines, contend for through one database, and the event log and bookmarks that the
//! elected process works through.
//!
//! [`PostgresEventStorage`] implements [`tenure_ports::EventStorage`] with every capability.
//!
//! **Leases** live in two tables, `<prefix>leases` and `<prefix>lease_contenders`, kept apart
//! from the event log. Each lease call is one statement in autocommit: a call of a PL/pgSQL
//! function shipped in the crate's `migrations/`, which takes a transaction-scoped advisory lock on
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
//! **Fencing.** A bookmark written with
//! [`bookmark_fenced`](tenure_ports::EventStorage::bookmark_fenced) is refused, in the same
//! statement, once a newer tenure wrote it or holds the lease. For a downstream that writes
//! its effects to PostgreSQL, [`TransactionFence`] checks and raises a resource's highest
//! accepted token inside the caller's own transaction (tokio-postgres or sqlx), so that the
//! effect and the fence commit or roll back together; `examples/exactly_once.rs` builds
//! exactly-once processing on it.
//!
//! The conformance kit (`tenure-tck`) runs against all of it in real time, on each driver.
//!
//! **Wake-ups.** Triggers on the lease tables `NOTIFY` `<prefix>lease_changes` on a release, an
//! acquisition or a step-down request (never on a renewal); the storage listens on one
//! session connection of its own and offers them as
//! [`Capability::LeaseChanges`](tenure_ports::Capability::LeaseChanges), so that electors hand
//! over in milliseconds. Behind a transaction-pooling PgBouncer, where `LISTEN` does nothing,
//! turn them off with [`notifications(false)`](PostgresEventStorageBuilder::notifications);
//! electors then poll. `docs/postgres.md`, "Wake-ups".
//!
//! It is not a migration tool and not a connection manager: it uses the application's pool or
//! builds a small one, applies its own DDL only in [`SchemaMode::Ensure`], and leaves the rest
//! of the database alone.
//!
//! # Drivers and features
//!
//! One adapter, two drivers, chosen à la carte: a build with one compiles none of the other.
//! The SQL, the decoding of the answers, the schema modes, the table prefix, the errors and the
//! call timeout are the same code on both (the `connection` module is the seam).
//!
//! | feature | driver | accepts | from |
//! |---|---|---|---|
//! | `deadpool` (default) | tokio-postgres 0.7 | a `deadpool_postgres::Pool` of deadpool-postgres 0.14 | [`url`](PostgresEventStorageBuilder::url) (libpq key/value strings too) or [`pool`](PostgresEventStorageBuilder::pool) |
//! | `sqlx-0_9` | sqlx 0.9 (`postgres`, `runtime-tokio`, `json`; with `tls`, `tls-rustls-ring-native-roots`) | a `sqlx::PgPool` of sqlx 0.9 | [`url`](PostgresEventStorageBuilder::url) with [`driver`](PostgresEventStorageBuilder::driver)`(PostgresDriver::Sqlx09)`, or [`pool`](PostgresEventStorageBuilder::pool) |
//! | `tls` (default) | rustls with `ring` (no OpenSSL, no cmake), the system's roots | - | `sslmode` (`disable` to `verify-full`) and `sslrootcert` with libpq's meaning, on both drivers (`docs/postgres.md`, "Connecting") |
//!
//! A connection string is read by [`tenure_conninfo`] (re-exported): a URL or a key/value
//! string, with libpq's `PG*` variables filling in what it leaves out;
//! [`url_from_env`](PostgresEventStorageBuilder::url_from_env) takes the server from
//! `TENURE_DATABASE_URL`, `DATABASE_URL` or the `PG*` variables, as the `tenure` command does.
//!
//! The pool types are re-exported, so that an application names the same versions:
//! [`deadpool_postgres`] and [`tokio_postgres`] with `deadpool`, `sqlx_0_9` (the `sqlx` crate,
//! named after its major so that a later major can sit beside it) with `sqlx-0_9`. A sqlx
//! application depends on `tenure-postgres = { default-features = false, features =
//! ["sqlx-0_9"] }`. sqlx 0.9 needs Rust 1.94, newer than the 1.89 the rest of Tenure needs:
//! only the `sqlx-0_9` feature raises it. The driver-independent types ([`PostgresEventStorage`],
//! its builder, [`SchemaMode`], [`TablePrefix`]) name no driver type; a pool enters through
//! [`ApplicationPool`], made from either pool with `.into()`.
//!
//! With no driver feature the crate still offers [`ddl`], [`TablePrefix`] and [`redact`].
//!
//! # On deadpool, from a URL
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
//! The PostgreSQL guide
//! (<https://github.com/tenure-rs/tenure/blob/main/docs/postgres.md>) tells the tables,
//! privileges, schema modes, the barrier, the clock, and failover.
#![cfg_attr(
    feature = "sqlx-0_9",
    doc = concat!(
        "\n# On sqlx, from the application's own `PgPool`\n\n",
        "Build the storage on the pool, elect with `tenure-election`, release and close ",
        "(the crate's `examples/sqlx_election.rs`, also in the README):\n\n",
        "```no_run\n",
        include_str!("../examples/sqlx_election.rs"),
        "```\n",
    )
)]
#![deny(missing_docs)]

#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod builder;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod changes;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod connection;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod decode;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod error;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod events;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod fence;
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
mod lease;
mod prefix;
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
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub use fence::{FenceError, STALE_TOKEN_SQLSTATE, TransactionFence};
pub use prefix::{DEFAULT_PREFIX, MAX_PREFIX_BYTES, PrefixError, TablePrefix};
pub use schema::{SchemaMode, ddl};
#[cfg(any(feature = "deadpool", feature = "sqlx-0_9"))]
pub use storage::{PostgresDriver, PostgresEventStorage};
/// Connection strings as Tenure reads them: parsing, the environment, redaction.
pub use tenure_conninfo;
/// The one redactor of Tenure (from `tenure-conninfo`): a connection string with its
/// secrets replaced by `***`.
pub use tenure_conninfo::redact;

#[cfg(feature = "sqlx-0_9")]
pub use connection::config::sqlx_connect_options;
#[cfg(all(feature = "deadpool", feature = "tls"))]
pub use connection::tls::{MakeRustls, RustlsConnect, RustlsStream, tokio_postgres_config};

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
