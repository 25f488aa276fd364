//! PostgreSQL connection strings for Tenure: one parser, one resolver, one redactor.
//!
//! Every part of Tenure that names a PostgreSQL server (the library's builder, the `tenure`
//! command, its demo, the tests, the benchmarks and `cargo xtask`) goes through this crate, so
//! that a server is named the same way everywhere and a password is hidden the same way
//! everywhere. It depends on nothing but `std`.
//!
//! * [`ConnInfo::parse`] reads both forms libpq accepts: URLs
//!   (`postgres://user:secret@host:5432/db?sslmode=require`) and key/value strings
//!   (`host=db user=app password='a b' sslmode=verify-full`), with percent-decoding, quoting
//!   and escapes as libpq has them.
//! * [`resolve`] finds the server to use: an explicit string, else `TENURE_DATABASE_URL`, else
//!   `DATABASE_URL`, else libpq's `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
//!   `PGSSLMODE`, `PGSSLROOTCERT`; like psql, libpq's variables and the password file
//!   (`PGPASSFILE`, else `~/.pgpass`) also fill in what the chosen string leaves out. When
//!   nothing names a server, the error lists every variable it tried.
//! * [`redact`] hides every secret a connection string carries (a URL's user-info password,
//!   `password=` in its query, in a key/value string quoted or not, percent-encoded or not),
//!   and [`scrub`] removes them from any other text, such as a driver's error message.
//!
//! It is not a driver: it opens no connection and knows nothing of TLS beyond the names of
//! the `sslmode` values. The drivers (`tenure-postgres`) turn a [`ConnInfo`] into their own
//! configuration.
//!
//! ```
//! use tenure_conninfo::{ConnInfo, SslMode, redact};
//!
//! let info = ConnInfo::parse("postgres://app:s%40cret@db.internal:6432/orders?sslmode=verify-full")?;
//! assert_eq!(info.host(), Some("db.internal"));
//! assert_eq!(info.port(), Some("6432"));
//! assert_eq!(info.password(), Some("s@cret"));
//! assert_eq!(info.ssl_mode()?, SslMode::VerifyFull);
//! assert_eq!(
//!     redact("postgres://app:s%40cret@db.internal:6432/orders"),
//!     "postgres://app:***@db.internal:6432/orders"
//! );
//! assert!(!format!("{info:?}").contains("cret"));
//! # Ok::<(), tenure_conninfo::ParseError>(())
//! ```

#![forbid(unsafe_code)]

mod env;
mod parse;
mod redact;

pub use env::{
    LIBPQ_VARIABLES, NAMING_VARIABLES, PASSFILE_VARIABLE, ResolveError, Resolved, Source,
    TEST_URL_VARIABLES, URL_VARIABLES, resolve, resolve_with,
};
pub use parse::{ConnInfo, ParseError, SslMode};
pub use redact::{redact, scrub, secrets};
