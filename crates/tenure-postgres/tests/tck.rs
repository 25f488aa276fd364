//! The whole conformance kit against PostgreSQL, in real time on the database's clock. Every
//! scenario gets a storage on a fresh prefix, whose tables and functions are dropped afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async {
    let guard = support::fresh_prefix();
    let storage = support::builder(tenure_postgres::PostgresDriver::Deadpool, &guard)
        .build()
        .await
        .expect("building a storage on the test server");
    Subject::new(storage)
        .with_suite_name("postgres")
        .with_teardown(async move { drop(guard) })
});
