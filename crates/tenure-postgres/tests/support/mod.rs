//! What the integration tests share: the server of this run, and storages on fresh prefixes
//! that are dropped afterwards (also when a test fails).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tenure_pg_test::{PrefixGuard, Server};
use tenure_postgres::{
    PostgresDriver, PostgresEventStorage, PostgresEventStorageBuilder, SchemaMode,
};

/// Both drivers, for the tests that run on each.
pub const DRIVERS: [PostgresDriver; 2] = [PostgresDriver::Deadpool, PostgresDriver::Sqlx09];

/// Defines the test `$name` twice, as `$name::deadpool` and `$name::sqlx`, with `$driver`
/// bound to the driver each runs on.
#[macro_export]
macro_rules! on_each_driver {
    ($(#[$attr:meta])* async fn $name:ident($driver:ident: PostgresDriver) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($driver: tenure_postgres::PostgresDriver) $body

            $(#[$attr])*
            async fn deadpool() {
                run(tenure_postgres::PostgresDriver::Deadpool).await
            }

            $(#[$attr])*
            async fn sqlx() {
                run(tenure_postgres::PostgresDriver::Sqlx09).await
            }
        }
    };
}

/// A pool of the application's own, as a sqlx user has one: `sqlx::PgPool` with sqlx's
/// default settings.
pub async fn sqlx_pool(url: &str, size: u32) -> tenure_postgres::sqlx_0_9::PgPool {
    tenure_postgres::sqlx_0_9::postgres::PgPoolOptions::new()
        .max_connections(size)
        .connect(url)
        .await
        .expect("a sqlx pool on the test server")
}

/// A deadpool pool of the application's own, as an application builds one: `size`
/// connections, deadpool-postgres's default (fast) recycling, no TLS.
pub fn deadpool_pool(url: &str, size: usize) -> tenure_postgres::deadpool_postgres::Pool {
    let config = url
        .parse::<tokio_postgres::Config>()
        .expect("the test server's URL");
    let manager = tenure_postgres::deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    tenure_postgres::deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .build()
        .expect("a deadpool pool on the test server")
}

/// The test server's URL with `application_name` set, so that a test can find (or kill) the
/// sessions of the storage it builds.
pub fn url_named(application_name: &str) -> String {
    let url = &server().url;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={application_name}")
}

/// The server of this test run; fails the test (never skips it) when there is none.
pub fn server() -> &'static Server {
    tenure_pg_test::required_server()
}

/// A fresh prefix, dropped when the guard is.
pub fn fresh_prefix() -> PrefixGuard {
    PrefixGuard::new(server().url.clone(), tenure_pg_test::unique_prefix())
}

/// A builder on the test server with `prefix`, building its pool from the URL with `driver`.
pub fn builder(driver: PostgresDriver, prefix: &PrefixGuard) -> PostgresEventStorageBuilder {
    PostgresEventStorage::builder()
        .url(server().url.clone())
        .driver(driver)
        .prefix(prefix.prefix())
        .pool_size(4)
        .call_timeout(Duration::from_secs(10))
}

/// [`builder`] with the sessions named `application_name` ([`url_named`]).
pub fn named_builder(
    driver: PostgresDriver,
    prefix: &PrefixGuard,
    application_name: &str,
) -> PostgresEventStorageBuilder {
    builder(driver, prefix).url(url_named(application_name))
}

/// A storage on a fresh prefix, schema ensured. Keep the guard alive as long as the storage.
pub async fn fresh_storage(driver: PostgresDriver) -> (PostgresEventStorage, PrefixGuard) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .expect("building a storage on the test server");
    (storage, guard)
}

/// A plain connection to the test server.
pub async fn admin() -> tokio_postgres::Client {
    server()
        .connect()
        .await
        .expect("connecting to the test server")
}

/// The advisory lock key of `lease_name` under `prefix`, as the lease functions compute it.
pub const LOCK_KEY_SQL: &str = "hashtextextended($1::text || 'leases:' || $2::text, 0)";

/// Waits until a statement under `prefix` calling `function` waits on a lock; its pid.
pub async fn blocked_on_lock(prefix: &str, function: &str) -> i32 {
    blocked_on_lock_where(prefix, function, None).await
}

/// [`blocked_on_lock`] in `database` only: for tests that share a prefix in databases of their
/// own, where another test's call may be waiting on its own lock at the same moment.
pub async fn blocked_on_lock_in(database: &str, prefix: &str, function: &str) -> i32 {
    blocked_on_lock_where(prefix, function, Some(database)).await
}

async fn blocked_on_lock_where(prefix: &str, function: &str, database: Option<&str>) -> i32 {
    let client = admin().await;
    let pattern = format!("%{prefix}{function}%");
    for _ in 0..1000 {
        if let Some(row) = client
            .query_opt(
                "SELECT pid FROM pg_stat_activity \
                  WHERE wait_event_type = 'Lock' AND query LIKE $1 \
                    AND ($2::text IS NULL OR datname = $2) LIMIT 1",
                &[&pattern, &database],
            )
            .await
            .unwrap()
        {
            return row.get(0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no call of {prefix}{function} ever waited on a lock");
}

/// The server processes of the sessions whose `application_name` is `name`, in order.
pub async fn backends(name: &str) -> Vec<i32> {
    backends_seen_by(&admin().await, name).await
}

/// [`backends`] once there are `count` of them: the session that made a storage's schema ends
/// after the storage is built, and may still be listed for a moment.
pub async fn settled_backends(name: &str, count: usize) -> Vec<i32> {
    let admin = admin().await;
    let mut listed = backends_seen_by(&admin, name).await;
    for _ in 0..250 {
        if listed.len() == count {
            return listed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        listed = backends_seen_by(&admin, name).await;
    }
    panic!("{listed:?} are listed for {name}, not {count}");
}

async fn backends_seen_by(admin: &tokio_postgres::Client, name: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = admin
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    pids.sort_unstable();
    pids
}

/// A tiny deterministic generator (xorshift), so that a test's random choices replay.
pub struct XorShift(pub u64);

impl XorShift {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
