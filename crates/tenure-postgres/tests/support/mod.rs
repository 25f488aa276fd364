//! What the integration tests share: the server of this run, and storages on fresh prefixes
//! that are dropped afterwards (also when a test fails).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tenure_pg_test::{PrefixGuard, Server};
use tenure_postgres::{PostgresEventStorage, PostgresEventStorageBuilder, SchemaMode};

/// The server of this test run; fails the test (never skips it) when there is none.
pub fn server() -> &'static Server {
    tenure_pg_test::required_server()
}

/// A fresh prefix, dropped when the guard is.
pub fn fresh_prefix() -> PrefixGuard {
    PrefixGuard::new(server().url.clone(), tenure_pg_test::unique_prefix())
}

/// A builder on the test server with `prefix`.
pub fn builder(prefix: &PrefixGuard) -> PostgresEventStorageBuilder {
    PostgresEventStorage::builder()
        .url(server().url.clone())
        .prefix(prefix.prefix())
        .pool_size(4)
        .call_timeout(Duration::from_secs(10))
}

/// A storage on a fresh prefix, schema ensured. Keep the guard alive as long as the storage.
pub async fn fresh_storage() -> (PostgresEventStorage, PrefixGuard) {
    let guard = fresh_prefix();
    let storage = builder(&guard)
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
    let client = admin().await;
    let pattern = format!("%{prefix}{function}%");
    for _ in 0..1000 {
        if let Some(row) = client
            .query_opt(
                "SELECT pid FROM pg_stat_activity \
                  WHERE wait_event_type = 'Lock' AND query LIKE $1 LIMIT 1",
                &[&pattern],
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
