//! A schema change under load: the answer type re-created (as an upgrade of the shipped
//! functions does) while a storage has its statements prepared on its connections. Every
//! call after the schema is right again succeeds, on both drivers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::{admin, builder, fresh_storage};
use tenure_ports::{EventStorage, LeaseRequest};
use tenure_postgres::SchemaMode;

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_recover_after_the_answer_type_is_recreated(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let p = guard.prefix();
    let ttl = Duration::from_secs(30);
    // Prepare the statements on every connection of the pool (4): concurrent calls.
    let requests: Vec<LeaseRequest> = (0..8)
        .map(|n| LeaseRequest::new(format!("l{n}"), "a", 0, ttl))
        .collect();
    for _ in 0..3 {
        for answer in futures_join(calls(&storage, &requests)).await {
            answer.unwrap();
        }
    }
    admin()
        .await
        .batch_execute(&format!("DROP TYPE {p}lease_outcome_v1 CASCADE"))
        .await
        .unwrap();
    let ensured = builder(driver, &guard)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .unwrap();
    ensured.close().await.unwrap();
    // Every connection of the old storage had the old plan: each call must succeed.
    for round in 0..3 {
        for (n, answer) in futures_join(calls(&storage, &requests)).await.into_iter().enumerate() {
            let answer = answer.unwrap_or_else(|e| panic!("round {round}, lease l{n}: {e}"));
            assert!(answer.status.holds_lease());
        }
    }
    storage.close().await.unwrap();
}
}

/// One `request_lease` per request, each on a clone of `storage`.
fn calls(
    storage: &tenure_postgres::PostgresEventStorage,
    requests: &[LeaseRequest],
) -> impl Iterator<
    Item = impl std::future::Future<
        Output = Result<tenure_ports::LeaseResponse, tenure_ports::EventStorageError>,
    > + Send
           + 'static,
> {
    requests.iter().cloned().map({
        let storage = storage.clone();
        move |r| {
            let storage = storage.clone();
            async move { storage.request_lease(&r).await }
        }
    })
}

/// The calls at once, so that they spread over the pool's connections.
async fn futures_join<T: Send + 'static>(
    calls: impl Iterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = calls.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}
