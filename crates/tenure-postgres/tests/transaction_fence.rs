//! The fence in the caller's transaction (`TransactionFence`), on a tokio-postgres transaction
//! and on a sqlx transaction: one meaning with the in-memory `FencingGuard` (the same steps,
//! the same answers), a zombie's effect rolled back with its fence, and 16 writers with
//! interleaved tokens whose accepted effects, in the order the database committed them, are
//! checked by the conformance kit's history checker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use support::{admin, fresh_storage, server, sqlx_pool};
use tenure_election::FencingGuard;
use tenure_pg_test::PrefixGuard;
use tenure_ports::{EventStorage as _, FencingToken};
use tenure_postgres::{FenceError, TransactionFence};
use tenure_tck::history::{FencedWrite, Violation, check};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// A prefix with the schema ensured (the fence comes with it) and a table for the effects.
async fn scene() -> PrefixGuard {
    let (storage, guard) = fresh_storage(tenure_postgres::PostgresDriver::Deadpool).await;
    storage.close().await.unwrap();
    admin()
        .await
        .batch_execute(&format!(
            "CREATE TABLE {p}effects (seq bigint GENERATED ALWAYS AS IDENTITY, \
             resource text NOT NULL, token bigint NOT NULL)",
            p = guard.prefix()
        ))
        .await
        .unwrap();
    guard
}

/// One transaction on a tokio-postgres client: the effect, then the fence (or the effect
/// alone when `fence` is `None`: the control); committed only if the fence accepts.
async fn write_tokio(
    client: &mut tokio_postgres::Client,
    prefix: &str,
    fence: Option<&TransactionFence>,
    resource: &str,
    token: FencingToken,
) -> Result<(), FenceError> {
    let tx = client.transaction().await.unwrap();
    if let Some(fence) = fence {
        fence.check(&tx, resource, token).await?;
    }
    tx.execute(
        &format!("INSERT INTO {prefix}effects (resource, token) VALUES ($1, $2)"),
        &[&resource, &token.get_i64()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

/// The same on a sqlx transaction, with the effect written before the fence: the refusal must
/// take it back.
async fn write_sqlx(
    pool: &tenure_postgres::sqlx_0_9::PgPool,
    prefix: &str,
    fence: &TransactionFence,
    resource: &str,
    token: FencingToken,
) -> Result<(), FenceError> {
    use tenure_postgres::sqlx_0_9 as sqlx;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {prefix}effects (resource, token) VALUES ($1, $2)"
    )))
    .bind(resource)
    .bind(token.get_i64())
    .execute(&mut *tx)
    .await
    .unwrap();
    fence.check_sqlx(&mut tx, resource, token).await?;
    tx.commit().await.unwrap();
    Ok(())
}

async fn effects(prefix: &str) -> Vec<(String, i64)> {
    admin()
        .await
        .query(
            &format!("SELECT resource, token FROM {prefix}effects ORDER BY seq"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The steps both fences take, and what each must answer (`Err(current)`: refused).
const STEPS: &[(&str, u64, Result<(), u64>)] = &[
    ("a", 3, Ok(())),
    ("a", 3, Ok(())), // the same tenure writes again
    ("a", 5, Ok(())), // a new tenure raises the bar
    ("a", 4, Err(5)), // the zombie
    ("b", 1, Ok(())), // resources are independent
    ("a", 5, Ok(())),
    ("b", 2, Ok(())),
    ("b", 1, Err(2)),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_meaning_with_the_fencing_guard_and_the_zombie_rolled_back() {
    let guard = scene().await;
    let p = guard.prefix();
    let fence = TransactionFence::new(p).unwrap();
    let memory = FencingGuard::new();
    let mut client = admin().await;
    let pool = sqlx_pool(&server().url, 2).await;
    for (i, &(resource, token, expected)) in STEPS.iter().enumerate() {
        let in_memory = memory
            .admit(resource, t(token))
            .map_err(|e| e.current.get());
        assert_eq!(in_memory, expected, "FencingGuard, step {i}");
        // Alternate the drivers: they share one fence table.
        let answer = if i % 2 == 0 {
            write_tokio(&mut client, p, Some(&fence), resource, t(token)).await
        } else {
            write_sqlx(&pool, p, &fence, resource, t(token)).await
        };
        let answer = answer.map_err(|e| match e {
            FenceError::Stale {
                current,
                token: stale,
                ..
            } => {
                assert_eq!(stale, token);
                current
            }
            other => panic!("step {i}: {other}"),
        });
        assert_eq!(answer, expected, "TransactionFence, step {i}");
    }
    // Only the accepted steps left an effect: the zombies' were rolled back with their fence.
    let accepted: Vec<(String, i64)> = STEPS
        .iter()
        .filter(|s| s.2.is_ok())
        .map(|s| (s.0.to_owned(), i64::try_from(s.1).unwrap()))
        .collect();
    assert_eq!(effects(p).await, accepted);
    pool.close().await;
}

/// 16 writers, writer `w` writing tokens `w + 1`, `w + 17`, …, each in a transaction of its
/// own; `fenced` false: the same without the fence (the control).
async fn race(prefix: &str, fenced: bool) -> (usize, Vec<u64>) {
    let fence = Arc::new(TransactionFence::new(prefix).unwrap());
    let mut writers = Vec::new();
    for w in 0..16_u64 {
        let fence = Arc::clone(&fence);
        let prefix = prefix.to_owned();
        writers.push(tokio::spawn(async move {
            let mut client = admin().await;
            let mut refused = Vec::new();
            for k in 0..20 {
                let token = w + 1 + k * 16;
                let fence = fenced.then_some(&*fence);
                match write_tokio(&mut client, &prefix, fence, "raced", t(token)).await {
                    Ok(()) => {}
                    Err(FenceError::Stale { current, .. }) => {
                        assert!(current > token, "{token} refused by {current}");
                        refused.push(token);
                    }
                    Err(other) => panic!("{other}"),
                }
            }
            refused.len()
        }));
    }
    let mut refused = 0;
    for writer in writers {
        refused += writer.await.unwrap();
    }
    let accepted = effects(prefix)
        .await
        .into_iter()
        .map(|(_, token)| token.unsigned_abs())
        .collect();
    (refused, accepted)
}

fn decisions(accepted: &[u64]) -> Vec<FencedWrite> {
    accepted
        .iter()
        .map(|&token| FencedWrite {
            lease_name: "raced".to_owned(),
            owner: "writer".to_owned(),
            token: t(token),
            accepted: true,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_writers_on_one_transaction_fence_commit_in_token_order() {
    let guard = scene().await;
    let (refused, accepted) = race(guard.prefix(), true).await;
    let report = check(&[], &[], &decisions(&accepted));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(refused + accepted.len(), 320);
    assert!(
        accepted.contains(&320),
        "the highest token is always accepted"
    );
    println!(
        "320 fenced transactions: {} committed, {refused} refused, 0 violations",
        accepted.len()
    );

    let control = scene().await;
    let (_, accepted) = race(control.prefix(), false).await;
    let report = check(&[], &[], &decisions(&accepted));
    assert!(
        report
            .violations
            .iter()
            .any(|v| matches!(v, Violation::WriteAcceptedOutOfOrder { .. })),
        "without the fence the same writers commit out of token order"
    );
    println!(
        "control, no fence: {} out-of-order commits",
        report.violations.len()
    );
}

/// The exactly-once recipe (docs/election.md, "At least once, and exactly once"): one
/// transaction writes the effects of the events after the projection's own position, the new
/// position and the fence. Returns how many effects it applied, or the fence's refusal.
async fn project_exactly_once(
    client: &mut tokio_postgres::Client,
    prefix: &str,
    fence: &TransactionFence,
    token: FencingToken,
    events: std::ops::RangeInclusive<i64>,
) -> Result<u64, FenceError> {
    let tx = client.transaction().await.unwrap();
    fence.check(&tx, "projection", token).await?;
    let position: i64 = tx
        .query_one(
            &format!(
                "SELECT position FROM {prefix}positions WHERE reader = 'projection' FOR UPDATE"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mut applied = 0;
    for event in events.clone().filter(|e| *e > position) {
        tx.execute(
            &format!("INSERT INTO {prefix}effects (resource, token) VALUES ($1, $2)"),
            &[&format!("event-{event}"), &token.get_i64()],
        )
        .await
        .unwrap();
        applied += 1;
    }
    tx.execute(
        &format!("UPDATE {prefix}positions SET position = greatest(position, $1) WHERE reader = 'projection'"),
        &[events.end()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Ok(applied)
}

/// Neither a takeover nor a zombie causes a duplicate or a lost event: the first holder
/// commits events 1–10 and dies before its bookmark; the second resumes from the old bookmark,
/// is handed 1–15 again and applies 11–15 only; the first wakes up with 11–20 and its token 1,
/// and its transaction is refused by the fence and rolled back. Every event 1–15 has exactly
/// one effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exactly_once_recipe_survives_a_takeover_and_a_zombie() {
    let guard = scene().await;
    let p = guard.prefix();
    let mut client = admin().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE {p}positions (reader text PRIMARY KEY, position bigint NOT NULL); \
             INSERT INTO {p}positions VALUES ('projection', 0)"
        ))
        .await
        .unwrap();
    let fence = TransactionFence::new(p).unwrap();
    assert_eq!(
        project_exactly_once(&mut client, p, &fence, t(1), 1..=10)
            .await
            .unwrap(),
        10
    );
    // The takeover re-delivers from the storage's bookmark, which never moved.
    assert_eq!(
        project_exactly_once(&mut client, p, &fence, t(2), 1..=15)
            .await
            .unwrap(),
        5
    );
    match project_exactly_once(&mut client, p, &fence, t(1), 11..=20).await {
        Err(FenceError::Stale {
            token: 1,
            current: 2,
            ..
        }) => {}
        other => panic!("the zombie's transaction: {other:?}"),
    }
    let mut effects: Vec<String> = effects(p).await.into_iter().map(|(e, _)| e).collect();
    effects.sort();
    let mut expected: Vec<String> = (1..=15).map(|e| format!("event-{e}")).collect();
    expected.sort();
    assert_eq!(effects, expected, "each event's effect exactly once");
}
