//! Fenced bookmarks against a real server, where the conformance kit cannot reach: many
//! writers racing on one reader's fence, a takeover committing while a zombie writes, and a
//! bookmark table of the first schema version upgraded in place.
//!
//! The verdict of the race comes from the database's own record, not from the adapter: the
//! instant each accepted write was placed (read under the row lock, so in the order the
//! writes were decided on), checked by the conformance kit's history checker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{admin, builder, fresh_prefix, fresh_storage};
use tenure_ports::domain::LeaseName;
use tenure_ports::{
    AppendRequest, EventPosition, EventStorage, EventStorageError, Fence, FencingToken,
    LeaseRequest, NewEvent, Timestamp,
};
use tenure_postgres::{PostgresEventStorage, SchemaMode};
use tenure_tck::history::{FencedWrite, Violation, check};

const WRITERS: u64 = 16;
const WRITES_EACH: u64 = 25;

/// One write of the race: its token, and when it was placed (`None`: refused, naming the
/// newer token).
struct Written {
    token: u64,
    placed_at: Option<Timestamp>,
    newer: Option<u64>,
}

async fn one_event(storage: &PostgresEventStorage) -> EventPosition {
    let stored = storage
        .append(&AppendRequest::new(vec![NewEvent::new(
            "s",
            "T",
            json!({ "n": 1 }),
        )]))
        .await
        .unwrap();
    stored[0].position
}

/// 16 writers, writer `w` writing tokens `w + 1`, `w + 1 + 16`, …: the tokens interleave
/// between writers, and which write reaches the row first is up to the scheduler. `fenced`
/// false: the same writes, unfenced (the negative control).
async fn race(storage: Arc<PostgresEventStorage>, fenced: bool) -> Vec<Written> {
    let position = one_event(&storage).await;
    // No row of this lease exists: only the reader's fence decides.
    let lease = LeaseName::new("raced-projection").unwrap();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let storage = Arc::clone(&storage);
        let lease = lease.clone();
        writers.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for k in 0..WRITES_EACH {
                let token = w + 1 + k * WRITERS;
                let fence = Fence::new(lease.clone(), FencingToken::new(token).unwrap());
                let answer = if fenced {
                    storage
                        .bookmark_fenced("raced", position, &[], &fence)
                        .await
                } else {
                    storage.bookmark("raced", position, &[]).await
                };
                written.push(match answer {
                    Ok(bookmark) => Written {
                        token,
                        placed_at: Some(bookmark.placed_at),
                        newer: None,
                    },
                    Err(EventStorageError::Fenced {
                        newer, token: t, ..
                    }) => {
                        assert_eq!(t, token, "the refusal names the write's own token");
                        Written {
                            token,
                            placed_at: None,
                            newer: Some(newer),
                        }
                    }
                    Err(other) => panic!("token {token}: {other}"),
                });
            }
            written
        }));
    }
    let mut all = Vec::new();
    for writer in writers {
        all.extend(writer.await.unwrap());
    }
    all
}

/// The accepted writes in the order the database placed them, as the history checker reads
/// a fence's decisions.
fn decisions(written: &[Written]) -> Vec<FencedWrite> {
    let mut accepted: Vec<&Written> = written.iter().filter(|w| w.placed_at.is_some()).collect();
    accepted.sort_by_key(|w| w.placed_at);
    accepted
        .into_iter()
        .map(|w| FencedWrite {
            lease_name: "raced-projection".to_owned(),
            owner: "writer".to_owned(),
            token: FencingToken::new(w.token).unwrap(),
            accepted: true,
        })
        .collect()
}

on_each_driver! {
/// The accepted tokens never go down in the order they were placed, and every refusal names a
/// token above its own that was accepted. The same writes unfenced are caught by the checker
/// (the control that shows the check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_writers_on_one_fence_never_move_it_backwards(driver: PostgresDriver) {
    let guard = fresh_prefix();
    let storage = builder(driver, &guard)
        .pool_size(16)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .unwrap();
    let storage = Arc::new(storage);
    let written = race(Arc::clone(&storage), true).await;
    let report = check(&[], &[], &decisions(&written));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let accepted: Vec<u64> = written
        .iter()
        .filter(|w| w.placed_at.is_some())
        .map(|w| w.token)
        .collect();
    let refused: Vec<&Written> = written.iter().filter(|w| w.newer.is_some()).collect();
    assert_eq!(accepted.len() + refused.len(), (WRITERS * WRITES_EACH) as usize);
    for w in &refused {
        let newer = w.newer.unwrap();
        assert!(newer > w.token, "token {} refused by {newer}", w.token);
        assert!(
            accepted.contains(&newer),
            "token {} refused by {newer}, which was never accepted",
            w.token
        );
    }
    // The highest token is always accepted, and it is the fence the bookmark is left with.
    assert!(accepted.contains(&(WRITERS * WRITES_EACH)));
    println!(
        "{} fenced writes: {} accepted, {} refused, 0 violations",
        written.len(),
        accepted.len(),
        refused.len()
    );

    // The control: unfenced, the same interleaving is accepted out of order.
    let (control, _control_guard) = fresh_storage(driver).await;
    let written = race(Arc::new(control), false).await;
    let report = check(&[], &[], &decisions(&written));
    assert!(
        report
            .violations
            .iter()
            .any(|v| matches!(v, Violation::WriteAcceptedOutOfOrder { .. })),
        "the unfenced control should be caught accepting tokens out of order"
    );
    println!(
        "control, unfenced: {} writes, {} accepted out of order",
        written.len(),
        report.violations.len()
    );
    Arc::try_unwrap(storage).unwrap().close().await.unwrap();
}
}

on_each_driver! {
/// A takeover that has updated the lease row but not committed holds the zombie's fenced
/// write until it commits; the write then sees the new token and is refused: no acquisition
/// comes between the check and the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_waits_for_a_takeover_in_flight_and_is_refused(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let position = one_event(&storage).await;
    let ttl = Duration::from_secs(30);
    let first = storage
        .request_lease(&LeaseRequest::new("held", "zombie", 0, ttl))
        .await
        .unwrap();
    let name = LeaseName::new("held").unwrap();
    let zombie = Fence::new(name, first.fencing_token);

    // A takeover in flight: the row carries the next token, uncommitted.
    let mut admin = admin().await;
    let tx = admin.transaction().await.unwrap();
    tx.execute(
        &format!(
            "UPDATE {}leases SET fencing_token = fencing_token + 1, owner = 'successor' \
             WHERE lease_name = 'held'",
            guard.prefix()
        ),
        &[],
    )
    .await
    .unwrap();
    let write = tokio::spawn(async move {
        let answer = storage
            .bookmark_fenced("projection", position, &[], &zombie)
            .await;
        (storage, answer)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!write.is_finished(), "the fenced write did not wait for the lease row");
    tx.commit().await.unwrap();
    let (storage, answer) = write.await.unwrap();
    match answer {
        Err(EventStorageError::Fenced { token, newer, .. }) => {
            assert_eq!(token, first.fencing_token.get());
            assert_eq!(newer, first.fencing_token.get() + 1);
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert_eq!(storage.get_bookmark("projection").await.unwrap(), None);
    storage.close().await.unwrap();
}
}

on_each_driver! {
/// A bookmark table of the first schema version (no `fence_token`) gets the column from
/// `Ensure`, keeps its rows, and its bookmarks can then be fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_adds_the_fence_to_an_older_bookmark_table(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let position = one_event(&storage).await;
    storage.bookmark("old", position, &[]).await.unwrap();
    storage.close().await.unwrap();
    let admin = admin().await;
    admin
        .batch_execute(&format!(
            "ALTER TABLE {}bookmarks DROP COLUMN fence_token",
            guard.prefix()
        ))
        .await
        .unwrap();
    let refused = builder(driver, &guard)
        .schema_mode(SchemaMode::Validate)
        .build()
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        refused.to_string().contains("fence_token"),
        "Validate names the missing column: {refused}"
    );
    let storage = builder(driver, &guard)
        .schema_mode(SchemaMode::Ensure)
        .build()
        .await
        .unwrap();
    assert_eq!(
        storage.get_bookmark("old").await.unwrap().map(|b| b.position),
        Some(position)
    );
    let fence = Fence::new(
        LeaseName::new("upgraded").unwrap(),
        FencingToken::new(2).unwrap(),
    );
    storage
        .bookmark_fenced("old", position, &[], &fence)
        .await
        .unwrap();
    let older = Fence::new(fence.lease_name.clone(), FencingToken::new(1).unwrap());
    assert!(matches!(
        storage.bookmark_fenced("old", position, &[], &older).await,
        Err(EventStorageError::Fenced { newer: 2, .. })
    ));
    storage.close().await.unwrap();
}
}
