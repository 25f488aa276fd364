//! The processor against the in-memory backend, in paused tokio time: the storage's clock is
//! tokio's, so a ttl runs out on the storage exactly as time is advanced here.
//!
//! Every projection and every bookmark write is recorded on one timeline, in the order it
//! happened; the checks over it are in `support/processing.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use support::processing::{
    Effects, LEASE, Mark, Recorder, Replica, append_orders, bookmark_of, elector_config,
    eventually, processor_config,
};
use support::{Backend, ms, wait_for_leader, wait_until};
use tenure_election::{FencingGuard, LeadershipState};
use tokio::time::sleep;

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
    wait_until(&p2.elector, LeadershipState::is_standby).await;

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

#[tokio::test(start_paused = true)]
async fn the_bookmark_is_read_again_on_every_tenure_never_cached() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    let recorder = |name: &str| Recorder::new(name, LEASE, &backend, &fence, &effects);
    append_orders(&backend.memory, 0, 150).await;

    let p1 = Replica::start(
        &backend,
        "p1",
        elector_config(),
        processor_config(),
        recorder("p1"),
    );
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 150
    })
    .await;

    // p2 outranks p1 and takes over; it moves the bookmark on.
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config().with_priority(5),
        processor_config(),
        recorder("p2"),
    );
    assert_eq!(wait_for_leader(&p2.elector).await.0, 2);
    append_orders(&backend.memory, 150, 100).await;
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 250
    })
    .await;

    // p2 goes away; p1 leads again and resumes from p2's bookmark, not from its own 150.
    p2.task.abort();
    p2.elector.shutdown().await.unwrap();
    assert_eq!(wait_for_leader(&p1.elector).await.0, 3);
    append_orders(&backend.memory, 250, 50).await;
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 300
    })
    .await;

    let batches = backend.timeline.batches();
    assert_eq!(
        batches,
        vec![
            ("p1".into(), 1, 1, 100),
            ("p1".into(), 1, 101, 150),
            ("p2".into(), 2, 151, 250),
            ("p1".into(), 3, 251, 300),
        ]
    );
    assert!(effects.counts().values().all(|n| *n == 1));
    p1.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_step_down_lets_the_batch_in_progress_finish_and_be_bookmarked_then_releases() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 1_000).await;
    let slow = Recorder {
        work: ms(80),
        ..Recorder::new("p1", LEASE, &backend, &fence, &effects)
    };
    let p1 = Replica::start(&backend, "p1", elector_config(), processor_config(), slow);
    wait_for_leader(&p1.elector).await;
    sleep(ms(130)).await; // p1 is in its second batch
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config().with_priority(5),
        processor_config(),
        Recorder::new("p2", LEASE, &backend, &fence, &effects),
    );
    assert_eq!(wait_for_leader(&p2.elector).await.0, 2);

    let marks = backend.timeline.marks();
    let asked = backend
        .timeline
        .index_of(|m| matches!(m, Mark::StepDownRequested(o) if o == "p1"))
        .unwrap();
    // Asked in the middle of a batch: the last thing p1 did before was to start one.
    let Mark::Started { last, .. } = marks[..asked]
        .iter()
        .rev()
        .find_map(|(_, m)| match m {
            Mark::Started { .. } | Mark::Finished { .. } => Some(m.clone()),
            _ => None,
        })
        .unwrap()
    else {
        panic!("the step-down came between two batches");
    };
    // That batch finished, was bookmarked, and nothing else was started; then the release.
    let after: Vec<Mark> = marks[asked + 1..]
        .iter()
        .map(|(_, m)| m.clone())
        .take_while(|m| !matches!(m, Mark::Started { by, .. } if by == "p2"))
        .collect();
    assert_eq!(
        after,
        vec![
            Mark::Finished {
                by: "p1".into(),
                token: 1,
                completed: true
            },
            Mark::Bookmarked {
                by: "p1".into(),
                position: last
            },
        ]
    );
    let released = backend.calls_of("p1", "release");
    assert_eq!(released.len(), 1);
    let bookmarked_at = marks
        .iter()
        .find(|(_, m)| matches!(m, Mark::Bookmarked { position, .. } if *position == last))
        .unwrap()
        .0;
    assert_eq!(released[0].sent, bookmarked_at, "released at once");

    // p2 resumes right after p1's last batch: nothing is projected twice.
    let batches = backend.timeline.batches();
    let p2_first = batches.iter().find(|b| b.0 == "p2").unwrap();
    assert_eq!(p2_first.2, last + 1);
    eventually(ms(2_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 1_000
    })
    .await;
    assert!(effects.counts().values().all(|n| *n == 1));
    backend.timeline.assert_one_projector_at_a_time();
    p1.task.abort();
    p2.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_lapse_cancels_the_projection_in_progress_and_nothing_is_bookmarked_after_it() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 300).await;
    let slow = Recorder {
        work: ms(200),
        ..Recorder::new("p1", LEASE, &backend, &fence, &effects)
    };
    let p1 = Replica::start(&backend, "p1", elector_config(), processor_config(), slow);
    wait_for_leader(&p1.elector).await;
    sleep(ms(10)).await;
    p1.lease_handle.set(support::Fault::Fail); // renewals fail from now on
    let deadline = backend.last_confirmed_send("p1") + ms(297);

    // The first batch (0 to 200 ms) completes within the tenure; the second (from 200 ms)
    // is dropped at the deadline, 297 ms, and not bookmarked.
    eventually(ms(1_000), async || !p1.elector.state().is_leader()).await;
    let marks = backend.timeline.marks();
    let cancelled = marks
        .iter()
        .find(|(_, m)| {
            matches!(
                m,
                Mark::Finished {
                    completed: false,
                    ..
                }
            )
        })
        .unwrap();
    assert_eq!(cancelled.0, deadline);
    assert_eq!(backend.timeline.bookmarks(), vec![("p1".into(), 100)]);
    assert!(!effects.contains(101));

    // Once renewals work again, a new tenure starts over from the bookmark.
    p1.lease_handle.set(support::Fault::None);
    assert_eq!(wait_for_leader(&p1.elector).await.0, 2);
    eventually(ms(2_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 300
    })
    .await;
    let batches = backend.timeline.batches();
    assert_eq!(
        batches[..3],
        [
            ("p1".into(), 1, 1, 100),
            ("p1".into(), 1, 101, 200),
            ("p1".into(), 2, 101, 200),
        ]
    );
    assert!(effects.counts().values().all(|n| *n == 1));
    p1.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_caught_up_processor_picks_up_new_events_within_the_idle_poll() {
    let backend = Backend::new();
    append_orders(&backend.memory, 0, 10).await;
    let (elector, _) = backend.elector(elector_config().with_owner("p1"));
    // A projection whose state is Send but not Sync still runs in a spawned task.
    let seen = std::cell::Cell::new(0);
    let positions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let projection = {
        let positions = Arc::clone(&positions);
        move |batch: tenure_election::Batch| {
            seen.set(seen.get() + batch.len());
            let positions = Arc::clone(&positions);
            async move {
                let now = tokio::time::Instant::now();
                positions
                    .lock()
                    .unwrap()
                    .extend(batch.events().iter().map(|e| (e.position.get(), now)));
                Ok::<(), std::convert::Infallible>(())
            }
        }
    };
    let mut processor = tenure_election::Processor::new(
        Arc::new(backend.memory.clone()),
        elector,
        processor_config(),
        projection,
    )
    .unwrap();
    let task = tokio::spawn(async move { processor.run().await });

    eventually(ms(100), async || {
        bookmark_of(&backend.memory, LEASE).await == 10
    })
    .await;
    sleep(ms(55)).await;
    let appended_at = tokio::time::Instant::now();
    append_orders(&backend.memory, 10, 5).await;
    eventually(ms(100), async || {
        bookmark_of(&backend.memory, LEASE).await == 15
    })
    .await;
    let positions = positions.lock().unwrap().clone();
    assert_eq!(positions.len(), 15);
    let picked_up = positions.last().unwrap().1;
    assert!(picked_up - appended_at <= ms(20), "within one idle poll");
    task.abort();
}
