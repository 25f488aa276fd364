//! The fencing guard under concurrency, and the PostgreSQL recipes from its docs against a
//! real PostgreSQL (found by `tenure-pg-test`: `TENURE_DATABASE_URL`, or the local server).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tenure_election::FencingGuard;
use tenure_pg_test::unique_name;
use tenure_ports::FencingToken;
use tokio_postgres::Client;

fn t(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

#[test]
fn concurrent_writers_are_admitted_in_token_order_only() {
    const THREADS: usize = 8;
    const WRITES: u64 = 2_000;
    let guard = Arc::new(FencingGuard::new());
    let next = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let rejected = Arc::new(AtomicU64::new(0));

    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (guard, next, accepted, rejected) = (
                Arc::clone(&guard),
                Arc::clone(&next),
                Arc::clone(&accepted),
                Arc::clone(&rejected),
            );
            std::thread::spawn(move || {
                for _ in 0..WRITES {
                    // Tokens arrive roughly, not strictly, in order; four writes share each.
                    let token = t(next.fetch_add(1, Ordering::SeqCst) / 4 + 1);
                    match guard.admit_with("orders", token, || accepted.lock().unwrap().push(token))
                    {
                        Ok(()) => {}
                        Err(stale) => {
                            assert_eq!(stale.stale, token);
                            assert!(stale.current > stale.stale);
                            rejected.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    // Another lease is fenced on its own.
                    guard.admit(&format!("other-{i}"), token).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }

    let accepted = accepted.lock().unwrap();
    assert!(
        accepted.windows(2).all(|w| w[0] <= w[1]),
        "an accepted write never follows a newer token's"
    );
    let total = THREADS as u64 * WRITES;
    assert_eq!(
        accepted.len() as u64 + rejected.load(Ordering::SeqCst),
        total
    );
    assert_eq!(guard.highest("orders"), accepted.last().copied());
    assert_eq!(guard.highest("orders"), Some(t((total - 1) / 4 + 1)));
}

// ---------------------------------------------------------------------------------------
// The PostgreSQL recipes.

async fn connect() -> Option<Client> {
    let server = tenure_pg_test::required_server();
    Some(server.connect().await.expect("connecting to PostgreSQL"))
}

/// Runs `body` on tables it creates, and drops them whether it passes or panics.
async fn with_tables<F, Fut>(tables: &[&str], body: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(client) = connect().await else {
        return;
    };
    let outcome = tokio::spawn(body()).await;
    for table in tables {
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
            .await
            .unwrap();
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conditional_update_accepts_equal_and_newer_tokens_only() {
    let table = unique_name("fence_rows");
    let body_table = table.clone();
    with_tables(&[&table], move || async move {
        let table = body_table;
        let client = connect().await.unwrap();
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (
                     id text PRIMARY KEY,
                     payload text NOT NULL,
                     fencing_token bigint NOT NULL DEFAULT 0,
                     accepted bigint[] NOT NULL DEFAULT '{{}}'
                 );
                 INSERT INTO {table} (id, payload) VALUES ('orders', '');"
            ))
            .await
            .unwrap();
        // The recipe of the docs, plus a log of accepted tokens for the test to check.
        let write = format!(
            "UPDATE {table}
                SET payload = $2, fencing_token = $3, accepted = accepted || $3
              WHERE id = $1 AND $3 >= fencing_token"
        );
        let update = |token: i64| {
            let (client, write) = (&client, &write);
            async move {
                client
                    .execute(
                        write.as_str(),
                        &[&"orders", &format!("from {token}"), &token],
                    )
                    .await
                    .unwrap()
            }
        };
        assert_eq!(update(1).await, 1);
        assert_eq!(update(2).await, 1);
        assert_eq!(update(1).await, 0, "the zombie's write is rejected");
        assert_eq!(update(2).await, 1, "the same tenure writes again");

        // Concurrent writers on their own connections, tokens roughly in order.
        let next = Arc::new(AtomicU64::new(8));
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let (next, write) = (Arc::clone(&next), write.clone());
                tokio::spawn(async move {
                    let client = connect().await.unwrap();
                    for _ in 0..50 {
                        let token = i64::try_from(next.fetch_add(1, Ordering::SeqCst) / 3).unwrap();
                        client
                            .execute(write.as_str(), &[&"orders", &"concurrent", &token])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let row = client
            .query_one(
                &format!("SELECT fencing_token, accepted FROM {table} WHERE id = 'orders'"),
                &[],
            )
            .await
            .unwrap();
        let (highest, accepted): (i64, Vec<i64>) = (row.get(0), row.get(1));
        assert_eq!(&accepted[..3], &[1, 2, 2]);
        assert!(accepted.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(highest, (8 + 200 - 1) / 3);
        assert_eq!(accepted.last(), Some(&highest));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_fence_row_guards_a_whole_transaction() {
    let fences = unique_name("fence_leases");
    let outbox = unique_name("fence_outbox");
    let (f, o) = (fences.clone(), outbox.clone());
    with_tables(&[&fences, &outbox], move || async move {
        let (fences, outbox) = (f, o);
        let client = connect().await.unwrap();
        client
            .batch_execute(&format!(
                "CREATE TABLE {fences} (lease_name text PRIMARY KEY, fencing_token bigint NOT NULL);
                 CREATE TABLE {outbox} (id bigserial PRIMARY KEY, fencing_token bigint NOT NULL);"
            ))
            .await
            .unwrap();
        let fence = format!(
            "INSERT INTO {fences} AS f (lease_name, fencing_token) VALUES ($1, $2)
             ON CONFLICT (lease_name) DO UPDATE SET fencing_token = EXCLUDED.fencing_token
              WHERE f.fencing_token <= EXCLUDED.fencing_token"
        );
        let publish = format!("INSERT INTO {outbox} (fencing_token) VALUES ($1)");

        // One writing transaction: fence first, then write; a stale token rolls back.
        async fn fenced_write(client: &mut Client, fence: &str, publish: &str, token: i64) -> bool {
            let tx = client.transaction().await.unwrap();
            if tx.execute(fence, &[&"orders", &token]).await.unwrap() == 0 {
                tx.rollback().await.unwrap();
                return false;
            }
            tx.execute(publish, &[&token]).await.unwrap();
            tx.commit().await.unwrap();
            true
        }

        let mut client = client;
        assert!(fenced_write(&mut client, &fence, &publish, 3).await);
        assert!(fenced_write(&mut client, &fence, &publish, 4).await);
        assert!(!fenced_write(&mut client, &fence, &publish, 3).await);
        assert!(fenced_write(&mut client, &fence, &publish, 4).await);

        let next = Arc::new(AtomicU64::new(15));
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let (next, fence, publish) = (Arc::clone(&next), fence.clone(), publish.clone());
                tokio::spawn(async move {
                    let mut client = connect().await.unwrap();
                    for _ in 0..30 {
                        let token = i64::try_from(next.fetch_add(1, Ordering::SeqCst) / 3).unwrap();
                        fenced_write(&mut client, &fence, &publish, token).await;
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let published: Vec<i64> = client
            .query(
                &format!("SELECT fencing_token FROM {outbox} ORDER BY id"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(
            &published[..3],
            &[3, 4, 4],
            "the stale write left nothing behind"
        );
        assert!(
            published.windows(2).all(|w| w[0] <= w[1]),
            "writes land in token order"
        );
        let highest: i64 = client
            .query_one(&format!("SELECT fencing_token FROM {fences}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(highest, (15 + 120 - 1) / 3);
    })
    .await;
}
