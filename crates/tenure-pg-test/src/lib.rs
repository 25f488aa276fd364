//! Test support for Tenure's PostgreSQL backend, and nothing else: it is not published.
//!
//! [`server`] finds a PostgreSQL server for a test run, in this order:
//!
//! 1. the server named by the environment, as the `tenure` command reads it:
//!    `TENURE_DATABASE_URL`, else `TENURE_PG_URL` (its old, deprecated name for the tests),
//!    else `DATABASE_URL`, else libpq's `PG*` variables ([`URL_VARIABLES`]);
//! 2. a container started through testcontainers, when this crate is built with the `docker`
//!    feature and a Docker engine answers on its socket (`DOCKER_HOST`, or
//!    `/var/run/docker.sock`);
//! 3. a local server on `127.0.0.1:5432` (user `postgres`, database `postgres`) if one answers;
//!
//! and otherwise fails, with a message naming those three ways. `TENURE_PG_SOURCE=container`
//! or `local` (what `cargo xtask` sets) allows only the one way it names, `TENURE_PG_VERSION`
//! picks the container's PostgreSQL version and makes any other version an error, and
//! `TENURE_PG_IMAGE` names the container's image ([`Settings`]). It prints once, to stderr,
//! which server it uses and its version (passwords redacted). `docs/testing.md` tells the
//! whole story, the local image recipe included.
//!
//! Each test then works under its own table prefix ([`unique_prefix`]) and removes what it
//! created with a [`PrefixGuard`], also when it fails (the guard cleans up in `Drop`).
//!
//! The `docker` feature is off by default because it brings about 190 crates into every test
//! build; `cargo xtask` turns it on, in a target directory of its own, for the runs it makes
//! in containers.

#![deny(missing_docs)]

pub mod cluster;
#[cfg(feature = "docker")]
mod container;
mod database;
mod server;
mod settings;
pub mod tls;

pub use database::{TempDatabase, with_database, with_user};
pub use server::{LOCAL_URL, Origin, Server, find, required_server, server};
pub use settings::{DEFAULT_IMAGE, DEFAULT_VERSION, Settings, Source, URL_VARIABLES};

#[cfg(feature = "docker")]
pub use container::{OWNER_LABEL, RUN_LABEL};

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::{Client, NoTls};

#[cfg(not(feature = "docker"))]
mod container {
    pub(crate) const ENABLED: bool = false;

    pub(crate) fn start(_: &crate::Settings) -> Result<String, String> {
        Err("this build lacks the `docker` feature of tenure-pg-test \
             (`--features tenure-pg-test/docker`)"
            .to_owned())
    }
}

/// The secret the strings of [`secret_forms`] hide, as written and as decoded.
pub const SECRET: &str = "Sx3cr3t-Pw";
/// The percent-encoded secret of [`secret_forms`] (`p%40ss-Sx9`), and decoded (`p@ss-Sx9`).
pub const ENCODED_SECRET: [&str; 2] = ["p%40ss-Sx9", "p@ss-Sx9"];

/// Connection strings for the server at `host:port` (user and database `postgres`) holding a
/// password in each form a string can: a URL's user-info, a `password=` query parameter, a
/// key/value `password` unquoted and quoted, each percent-encoded where a URL allows it. For
/// the tests that check that no output shows a password ([`SECRET`], [`ENCODED_SECRET`]).
pub fn secret_forms(host: &str, port: u16) -> Vec<String> {
    let [encoded, _] = ENCODED_SECRET;
    vec![
        format!("postgres://postgres:{SECRET}@{host}:{port}/postgres"),
        format!("postgres://postgres@{host}:{port}/postgres?password={SECRET}"),
        format!("host={host} port={port} user=postgres dbname=postgres password={SECRET}"),
        format!("host={host} port={port} user=postgres password='{SECRET} x\\y' dbname=postgres"),
        format!("postgresql://postgres:{encoded}@{host}:{port}/postgres"),
        format!("postgres://postgres@{host}:{port}/postgres?%70assword={encoded}"),
    ]
}

/// Whether `text` shows any form of the secrets of [`secret_forms`].
pub fn shows_a_secret(text: &str) -> bool {
    text.contains(SECRET) || ENCODED_SECRET.iter().any(|s| text.contains(s))
}

/// A connection to `url`, driven by a task on the current tokio runtime.
///
/// TLS as `sslmode` and `sslrootcert` ask, with the storage's own connector
/// (`tenure_postgres::tokio_postgres_config`); a string that connector refuses is handed to
/// tokio-postgres as it is, for its own error.
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let tls = tenure_conninfo::ConnInfo::parse(url)
        .ok()
        .and_then(|mut info| {
            // Not counted among the storage's own connections (`tenure`).
            if info.get("application_name").is_none() {
                info.set("application_name", "tenure-pg-test");
            }
            tenure_postgres::tokio_postgres_config(&info, CONNECT_TIMEOUT).ok()
        });
    let client = match tls {
        Some((config, tls)) => {
            let (client, connection) = config.connect(tls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client
        }
        None => {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client
        }
    };
    Ok(client)
}

/// The bound on connecting, for the helpers' own connections.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A name no other test (in this process or another) uses: `<tag>_<pid>_<n>_<random>`, in
/// lowercase ASCII, usable as an identifier or a prefix part. Keep `tag` short.
pub fn unique_name(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = RandomState::new().hash_one(n) % 0x10000;
    format!("{tag}_{}_{n}_{random:04x}", std::process::id())
}

/// A fresh table prefix, ending in `_`.
pub fn unique_prefix() -> String {
    format!("{}_", unique_name("t"))
}

/// Drops every table, function and composite type in the current schema whose name starts with
/// `prefix`.
/// `prefix` must be `[a-z0-9_]+` (as [`unique_prefix`] makes them).
pub async fn drop_prefix(client: &Client, prefix: &str) -> Result<(), String> {
    if prefix.is_empty()
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("refusing to drop objects of prefix {prefix:?}"));
    }
    let rows = client
        .query(
            "SELECT 'DROP TABLE IF EXISTS ' || quote_ident(c.relname) || ' CASCADE' \
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') \
                AND left(c.relname, length($1)) = $1 \
             UNION ALL \
             SELECT 'DROP FUNCTION IF EXISTS ' || p.oid::regprocedure::text \
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
              WHERE n.nspname = current_schema() AND left(p.proname, length($1)) = $1 \
             UNION ALL \
             SELECT 'DROP TYPE IF EXISTS ' || quote_ident(t.typname) || ' CASCADE' \
               FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
                    JOIN pg_class c ON c.oid = t.typrelid \
              WHERE n.nspname = current_schema() AND c.relkind = 'c' \
                AND left(t.typname, length($1)) = $1",
            &[&prefix],
        )
        .await
        .map_err(|e| e.to_string())?;
    for row in rows {
        let statement: String = row.get(0);
        client
            .batch_execute(&statement)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Drops a prefix's objects when dropped, even while a test panics. The cleanup runs on a
/// thread of its own (with its own runtime), so it works inside or outside a tokio runtime.
#[derive(Debug)]
pub struct PrefixGuard {
    url: String,
    prefix: String,
}

impl PrefixGuard {
    /// Guards `prefix` on the server at `url`.
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        PrefixGuard {
            url: url.into(),
            prefix: prefix.into(),
        }
    }

    /// The guarded prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl Drop for PrefixGuard {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        let cleanup = run_detached(move || async move {
            let client = connect(&url).await.map_err(|e| e.to_string())?;
            drop_prefix(&client, &prefix).await
        });
        if let Err(err) = cleanup {
            eprintln!(
                "tenure-pg-test: could not drop prefix {}: {err}",
                self.prefix
            );
        }
    }
}

/// Runs `sql` ([`serialized`]) on the server at `url` when dropped, even while a test panics:
/// the cleanup of roles and schemas a test created.
#[derive(Debug)]
pub struct DropGuard {
    url: String,
    sql: String,
}

impl DropGuard {
    /// A guard that will run `sql` on `url`.
    pub fn new(url: impl Into<String>, sql: impl Into<String>) -> Self {
        DropGuard {
            url: url.into(),
            sql: sql.into(),
        }
    }

    /// A guard that drops `role` and everything it owns or was granted.
    pub fn role(url: impl Into<String>, role: &str) -> Self {
        DropGuard::new(
            url,
            format!("DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}"),
        )
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Err(err) = execute_detached(&self.url, &serialized(&self.sql)) {
            eprintln!("tenure-pg-test: cleanup failed: {err}");
        }
    }
}

/// `sql` (one or more statements) as one transaction that first takes a lock shared by every
/// test: for role and privilege changes, which PostgreSQL cannot run concurrently on one
/// object (two `GRANT ... ON SCHEMA public` at once fail with "tuple concurrently updated").
pub fn serialized(sql: &str) -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock(7243517419005871); {sql}; COMMIT;")
}

/// Runs `sql` on the server at `url` from a thread of its own (usable in `Drop`, inside or
/// outside a runtime), for cleanups such as dropping a role.
pub fn execute_detached(url: &str, sql: &str) -> Result<(), String> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    run_detached(move || async move {
        let client = connect(&url).await.map_err(|e| e.to_string())?;
        client.batch_execute(&sql).await.map_err(|e| e.to_string())
    })
}

/// Runs the future `make` returns to completion on a thread and runtime of its own, so that it
/// works inside or outside a runtime (in `Drop`, before the first test's runtime exists).
fn run_detached<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T, String>
where
    T: Send + 'static,
    F: Future<Output = Result<T, String>>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(make())
    })
    .join()
    .map_err(|_| "the thread of a detached call panicked".to_owned())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_safe() {
        let a = unique_prefix();
        let b = unique_prefix();
        assert_ne!(a, b);
        assert!(a.len() <= 42, "{a}");
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        );
    }
}
