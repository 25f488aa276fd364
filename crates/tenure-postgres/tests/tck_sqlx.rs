//! The whole conformance kit against PostgreSQL on the sqlx 0.9 driver, built as a sqlx
//! application builds it: from its own `sqlx::PgPool`. Every scenario gets a storage on a fresh
//! prefix, whose tables and functions are dropped afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use tenure_postgres::PostgresEventStorage;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async {
    let guard = support::fresh_prefix();
    let pool = support::sqlx_pool(&support::server().url, 4).await;
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(guard.prefix())
        .call_timeout(std::time::Duration::from_secs(10))
        .build()
        .await
        .expect("building a storage on the application's sqlx pool");
    Subject::new(storage)
        .with_suite_name("postgres-sqlx")
        .with_teardown(async move {
            pool.close().await;
            drop(guard)
        })
});
