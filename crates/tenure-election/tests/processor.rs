//! The processor against the in-memory backend, in paused tokio time: the storage's clock is
//! tokio's, so a ttl runs out on the storage exactly as time is advanced here.
//!
//! Every projection and every bookmark write is recorded on one timeline, in the order it
//! happened; the checks over it are in `support/processing.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use support::processing::{
    Effects, Mark, Recorder, Replica, append_orders, bookmark_of, eventually,
};
use support::{Backend, is_standby, ms, wait_for_leader, wait_until};
use tenure_election::{ElectorConfig, FencingGuard, ProcessorConfig};
use tokio::time::sleep;

const LEASE: &str = "order-dispatcher";

/// ttl 300 ms: poll 100 ms, call timeout 50 ms, safety margin 3 ms.
fn elector_config() -> ElectorConfig {
    ElectorConfig::new(LEASE, ms(300))
}

/// Batches of 100, an idle poll of 20 ms.
fn processor_config() -> ProcessorConfig {
    ProcessorConfig::new(LEASE)
        .with_batch_size(100)
        .with_idle_poll(ms(20))
}

#[tokio::test(start_paused = true)]
async fn three_processors_over_ten_thousand_events_survive_a_crash_and_a_step_down() {
    const TOTAL: usize = 10_000;
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    let recorder = |name: &str| Recorder::new(name, LEASE, &backend, &fence, &effects);

    // A producer appends 100 orders every 10 ms while the processors work: a second's worth.
    append_orders(&backend.memory, 0, 1_000).await;
    let producer = tokio::spawn({
        let memory = backend.memory.clone();
        async move {
            for from in (1_000..TOTAL).step_by(100) {
                sleep(ms(10)).await;
                append_orders(&memory, from, 100).await;
            }
        }
    });

    let p1 = Replica::start(
        &backend,
        "p1",
        elector_config(),
        processor_config(),
        recorder("p1"),
    );
    assert_eq!(wait_for_leader(&p1.elector).await.0, 1);
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config(),
        processor_config(),
        recorder("p2"),
    );
    wait_until(&p2.elector, is_standby).await;

    // Crash p1 in the middle of a batch, once it has got well into the log.
    let timeline = backend.timeline.clone();
    eventually(ms(5_000), async || {
        bookmark_of(&backend.memory, LEASE).await >= 3_000
            && matches!(timeline.marks().last(), Some((_, Mark::Started { by, .. })) if by == "p1")
    })
    .await;
    p1.crash();
    let crashed_at = timeline.marks().len();
    let p1_bookmark = bookmark_of(&backend.memory, LEASE).await;

    // p2 takes over once p1's lease has expired, and resumes from p1's bookmark.
    assert_eq!(wait_for_leader(&p2.elector).await.0, 2);

    // Later, a higher-priority processor joins: p2 finishes its batch, bookmarks, releases.
    eventually(ms(5_000), async || {
        bookmark_of(&backend.memory, LEASE).await >= 6_000
    })
    .await;
    let p3 = Replica::start(
        &backend,
        "p3",
        elector_config().with_priority(10),
        processor_config(),
        recorder("p3"),
    );
    assert_eq!(wait_for_leader(&p3.elector).await.0, 3);

    // p3 projects the rest.
    producer.await.unwrap();
    eventually(ms(5_000), async || {
        bookmark_of(&backend.memory, LEASE).await == TOTAL as u64
    })
    .await;
    sleep(ms(100)).await; // nothing more happens once caught up

    // Every event was projected, at least once.
    let counts = effects.counts();
    assert_eq!(counts.len(), TOTAL);
    assert_eq!(counts.keys().next(), Some(&1));
    assert_eq!(counts.keys().next_back(), Some(&(TOTAL as u64)));
    let twice: Vec<u64> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| *p)
        .collect();
    assert!(twice.len() <= 100, "at most one batch again: {twice:?}");

    // No two processors ever projected at once, each under the current token; bookmarks
    // only moved forwards.
    let projections = timeline.assert_one_projector_at_a_time();
    assert!(projections >= TOTAL / 100);
    timeline.assert_bookmarks_move_forwards();

    // The crash: p1 neither projected nor bookmarked after it, and p2 resumed from p1's
    // bookmark.
    let marks = timeline.marks();
    assert!(marks[crashed_at..].iter().all(|(_, m)| match m {
        Mark::Started { by, .. } | Mark::Bookmarked { by, .. } => by != "p1",
        _ => true,
    }));
    let batches = timeline.batches();
    let p2_first = batches.iter().find(|b| b.0 == "p2").unwrap();
    assert_eq!((p2_first.1, p2_first.2), (2, p1_bookmark + 1));
    // The batch p1 was projecting when it died was dropped, never bookmarked, and is the
    // first one p2 projected.
    let p1_last = batches.iter().rev().find(|b| b.0 == "p1").unwrap();
    assert_eq!(p1_last.2, p1_bookmark + 1);
    assert!(
        marks[crashed_at..]
            .iter()
            .any(|(_, m)| matches!(m, Mark::Finished { by, completed: false, .. } if by == "p1"))
    );

    // The step-down: p2 started nothing after being asked, its last batch completed and was
    // bookmarked, it released, and p3 resumed right after it: nothing projected twice.
    let asked = timeline
        .index_of(|m| matches!(m, Mark::StepDownRequested(owner) if owner == "p2"))
        .unwrap();
    assert!(
        marks[asked..]
            .iter()
            .all(|(_, m)| !matches!(m, Mark::Started { by, .. } if by == "p2"))
    );
    let p2_last_bookmark = timeline
        .bookmarks()
        .iter()
        .rev()
        .find(|b| b.0 == "p2")
        .unwrap()
        .1;
    let p3_first = batches.iter().find(|b| b.0 == "p3").unwrap();
    assert_eq!((p3_first.1, p3_first.2), (3, p2_last_bookmark + 1));
    assert!(
        marks
            .iter()
            .all(|(_, m)| !matches!(m, Mark::Finished { by, completed: false, .. } if by == "p2"))
    );
    assert_eq!(backend.calls_of("p2", "release").len(), 1);
    assert!(
        backend.calls_of("p1", "release").is_empty(),
        "a crash releases nothing"
    );

    // Every effect was admitted by the downstream's fence, in token order.
    assert_eq!(fence.highest(LEASE).map(|t| t.get()), Some(3));
    let tokens: Vec<u64> = effects.all().iter().map(|e| e.token).collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]));

    for replica in [&p2, &p3] {
        replica.task.abort();
        replica.elector.shutdown().await.unwrap();
    }
}
