//! Test support for Tenure's PostgreSQL backend, and nothing else: it is not published.
//!
//! [`server`] finds a PostgreSQL server for a test run, in this order:
//!
//! 1. the server named by the `TENURE_PG_URL` environment variable;
//! 2. a container started through testcontainers, when this crate is built with the `docker`
//!    feature and a Docker engine answers on its socket (`DOCKER_HOST`, or
//!    `/var/run/docker.sock`);
//! 3. a local server on `127.0.0.1:5432` (user `postgres`, database `postgres`) if one answers;
//!
//! and otherwise fails, with a message naming those three ways. It prints once, to stderr,
//! which one it uses (passwords redacted).
//!
//! Each test then works under its own table prefix ([`unique_prefix`]) and removes what it
//! created with a [`PrefixGuard`], also when it fails (the guard cleans up in `Drop`).
//!
//! The `docker` feature is off by default because it brings about 190 crates into every test
//! build; CI and developers point `TENURE_PG_URL` at a server or run one locally.

#![deny(missing_docs)]

pub mod cluster;
mod database;

pub use database::{TempDatabase, with_database};

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

/// The connection string used for a local server.
pub const LOCAL_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Where the server of this test run comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// `TENURE_PG_URL`.
    Environment,
    /// A container started for this process through testcontainers.
    Container,
    /// The local server on `127.0.0.1:5432`.
    Local,
}

/// A PostgreSQL server to test against.
#[derive(Clone, Debug)]
pub struct Server {
    /// Its connection string (it may carry a password: print [`Server::redacted_url`]).
    pub url: String,
    /// Where it comes from.
    pub origin: Origin,
}

impl Server {
    /// The connection string with its password, if any, replaced by `***`.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// A new connection, driven on the current tokio runtime.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        connect(&self.url).await
    }
}

/// The server for this test run, for tests and benchmarks that need one: they fail, never
/// skip, without PostgreSQL.
///
/// # Panics
///
/// When no server can be found, with the message of [`server`], which names the three ways to
/// provide one.
pub fn required_server() -> &'static Server {
    match server() {
        Ok(server) => server,
        Err(message) => panic!("{message}"),
    }
}

/// The server for this test run, found once per process (see the crate documentation).
pub fn server() -> Result<&'static Server, String> {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let found = find();
            match &found {
                Ok(server) => eprintln!(
                    "tenure-pg-test: using PostgreSQL from {} ({})",
                    match server.origin {
                        Origin::Environment => "TENURE_PG_URL",
                        Origin::Container => "a testcontainers container",
                        Origin::Local => "the local server on 127.0.0.1:5432",
                    },
                    server.redacted_url()
                ),
                Err(message) => eprintln!("tenure-pg-test: {message}"),
            }
            found
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn find() -> Result<Server, String> {
    if let Ok(url) = std::env::var("TENURE_PG_URL")
        && !url.trim().is_empty()
    {
        return Ok(Server {
            url,
            origin: Origin::Environment,
        });
    }
    let docker = docker_socket();
    let mut docker_note = String::new();
    if let Some(socket) = &docker {
        match container::start() {
            Ok(Some(url)) => {
                return Ok(Server {
                    url,
                    origin: Origin::Container,
                });
            }
            Ok(None) => {
                docker_note = format!(
                    " (a Docker engine answers on {socket}, but this build lacks the `docker` \
                     feature of tenure-pg-test)"
                );
            }
            Err(err) => docker_note = format!(" (starting a container failed: {err})"),
        }
    }
    let local: SocketAddr = ([127, 0, 0, 1], 5432).into();
    if TcpStream::connect_timeout(&local, Duration::from_secs(1)).is_ok() {
        return Ok(Server {
            url: LOCAL_URL.to_owned(),
            origin: Origin::Local,
        });
    }
    Err(format!(
        "no PostgreSQL server to test against. Set TENURE_PG_URL to a server's URL; or build \
         with `--features tenure-pg-test/docker` on a machine where a Docker engine answers{}; \
         or start a local server on 127.0.0.1:5432 with user postgres (on Debian: \
         pg_ctlcluster <version> main start)",
        if docker.is_none() {
            " (none does here)".to_owned()
        } else {
            docker_note
        }
    ))
}

/// The Docker engine's socket, if something answers on it.
fn docker_socket() -> Option<String> {
    let path = match std::env::var("DOCKER_HOST") {
        Ok(host) => host.strip_prefix("unix://")?.to_owned(),
        Err(_) => "/var/run/docker.sock".to_owned(),
    };
    std::os::unix::net::UnixStream::connect(&path)
        .ok()
        .map(|_| path)
}

#[cfg(feature = "docker")]
mod container {
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::testcontainers::ImageExt;
    use testcontainers_modules::testcontainers::runners::AsyncRunner;

    /// A current PostgreSQL image (the module's default tag is far older).
    const TAG: &str = "17-alpine";

    /// Starts a container on a thread that keeps it (and the runtime it needs) alive for the
    /// rest of the process; testcontainers' reaper removes it after the process ends.
    pub(crate) fn start() -> Result<Option<String>, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = tx.send(Err(err.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                let started = async {
                    let container = Postgres::default()
                        .with_tag(TAG)
                        .start()
                        .await
                        .map_err(|e| e.to_string())?;
                    let host = container.get_host().await.map_err(|e| e.to_string())?;
                    let port = container
                        .get_host_port_ipv4(5432)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((
                        container,
                        format!("postgres://postgres:postgres@{host}:{port}/postgres"),
                    ))
                };
                match started.await {
                    Ok((container, url)) => {
                        let _ = tx.send(Ok(url));
                        std::future::pending::<()>().await;
                        drop(container);
                    }
                    Err(err) => {
                        let _ = tx.send(Err(err));
                    }
                }
            });
        });
        rx.recv()
            .map_err(|e| e.to_string())
            .and_then(|r| r)
            .map(Some)
    }
}

#[cfg(not(feature = "docker"))]
mod container {
    pub(crate) fn start() -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// A connection to `url`, driven by a task on the current tokio runtime.
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

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
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = connect(&url).await.map_err(|e| e.to_string())?;
                drop_prefix(&client, &prefix).await
            })
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!(
                "tenure-pg-test: could not drop prefix {}: {err}",
                self.prefix
            ),
            Err(_) => eprintln!("tenure-pg-test: cleanup of prefix {} panicked", self.prefix),
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
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let client = connect(&url).await.map_err(|e| e.to_string())?;
            client.batch_execute(&sql).await.map_err(|e| e.to_string())
        })
    })
    .join()
    .map_err(|_| "the cleanup thread panicked".to_owned())?
}

/// `url` with the password of a `scheme://user:password@host` URL replaced by `***`.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "(a key/value connection string)".to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &url[..scheme_end + 3],
                &rest[..colon],
                &rest[at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
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

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert!(!redact("host=h password=pw").contains("pw"));
    }
}
