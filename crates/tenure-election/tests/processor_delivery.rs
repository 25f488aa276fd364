//! What the processor delivers: at least once, and exactly once with the recipe from its
//! docs (the projection keeps its own position in its own store, written atomically with its
//! effects and fenced by the token).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use support::processing::{
    Effect, Effects, LEASE, Mark, Recorder, Replica, append_orders, bookmark_of, elector_config,
    eventually, processor_config,
};
use support::{Backend, ms, wait_for_leader, wait_until};
use tenure_election::{
    Batch, ElectorConfig, FencingGuard, LeadershipState, Projection, StaleToken,
};
use tenure_ports::EventPosition;

#[tokio::test(start_paused = true)]
async fn a_batch_whose_bookmark_was_not_written_is_projected_again_by_the_next_owner() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 250).await;

    // p1 writes the effects of its second batch (101..=200), then dies before the bookmark.
    let doomed = Recorder {
        hang_after: Some(150),
        ..Recorder::new("p1", LEASE, &backend, &fence, &effects)
    };
    let p1 = Replica::start(&backend, "p1", elector_config(), processor_config(), doomed);
    wait_for_leader(&p1.elector).await;
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config(),
        processor_config(),
        Recorder::new("p2", LEASE, &backend, &fence, &effects),
    );
    wait_until(&p2.elector, LeadershipState::is_standby).await;
    eventually(ms(1_000), async || effects.contains(200)).await;
    p1.crash();

    assert_eq!(wait_for_leader(&p2.elector).await.0, 2);
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 250
    })
    .await;

    // The bookmark p1 never wrote sent p2 back to 101: that batch was projected twice.
    assert_eq!(
        backend.timeline.bookmarks(),
        vec![("p1".into(), 100), ("p2".into(), 200), ("p2".into(), 250)]
    );
    let counts = effects.counts();
    assert!((1..=100).chain(201..=250).all(|p| counts[&p] == 1));
    assert!((101..=200).all(|p| counts[&p] == 2));
    let twice: Vec<Effect> = effects
        .all()
        .into_iter()
        .filter(|e| e.position == 150)
        .collect();
    assert_eq!(
        twice,
        vec![
            Effect {
                position: 150,
                token: 1
            },
            Effect {
                position: 150,
                token: 2
            }
        ]
    );
    // Still, never two at once: p1's projection ended (dropped by the crash) before p2
    // started.
    backend.timeline.assert_one_projector_at_a_time();
    p2.task.abort();
}

/// A real-time test: a holder that stops running (a long pause: here the thread blocks)
/// right after projecting outlives its tenure, and must not bookmark when it wakes up.
#[tokio::test]
async fn a_holder_paused_past_its_ttl_after_projecting_writes_no_bookmark() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 250).await;
    // A ttl of 1 s, paused for 1.2 s: wide margins for a busy machine's real time.
    let (elector, _) = backend.elector(ElectorConfig::new(LEASE, ms(1_000)).with_owner("p1"));
    let projection = {
        let (fence, effects) = (Arc::clone(&fence), effects.clone());
        move |batch: Batch| {
            let (fence, effects) = (Arc::clone(&fence), effects.clone());
            async move {
                let token = batch.token().get();
                fence.admit_with(LEASE, batch.token(), || {
                    effects.push_all(batch.events().iter().map(|e| Effect {
                        position: e.position.get(),
                        token,
                    }));
                })?;
                if token == 1 && batch.first_position().get() == 101 {
                    // Paused past the ttl, between the projection and its bookmark; nothing
                    // on this thread runs meanwhile, the elector's renewals included.
                    std::thread::sleep(ms(1_200));
                }
                Ok::<(), StaleToken>(())
            }
        }
    };
    let mut processor = tenure_election::Processor::new(
        Arc::new(backend.labelled("p1")),
        elector.clone(),
        processor_config(),
        projection,
    )
    .unwrap();
    let task = tokio::spawn(async move { processor.run().await });

    eventually(ms(5_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 250
    })
    .await;
    // No bookmark at 200 under token 1: the pause ended the tenure, and the processor saw
    // it before writing. The batch was projected again under a new tenure.
    assert_eq!(
        backend.timeline.bookmarks(),
        vec![("p1".into(), 100), ("p1".into(), 200), ("p1".into(), 250)]
    );
    let counts = effects.counts();
    assert!((101..=200).all(|p| counts[&p] == 2));
    let tokens: Vec<u64> = effects
        .all()
        .iter()
        .filter(|e| e.position == 101)
        .map(|e| e.token)
        .collect();
    assert_eq!(tokens, vec![1, 2]);
    task.abort();
    elector.shutdown().await.unwrap();
}

/// The projection's own store: its effects and its own position, changed in one step and
/// fenced by the token (the recipe in `Processor`'s docs, "Exactly once").
#[derive(Debug, Default)]
struct Ledger {
    fence: FencingGuard,
    state: Mutex<LedgerState>,
}

#[derive(Debug, Default)]
struct LedgerState {
    position: Option<EventPosition>,
    applied: Vec<Effect>,
}

impl Ledger {
    /// One transaction: refuse a superseded tenure, apply the events after the own position,
    /// move the own position. Returns how many events were applied.
    fn commit(&self, batch: &Batch) -> Result<usize, StaleToken> {
        self.fence.admit_with(LEASE, batch.token(), || {
            let mut state = self.state.lock().unwrap();
            let before = state.applied.len();
            for event in batch.events() {
                if Some(event.position) > state.position {
                    state.applied.push(Effect {
                        position: event.position.get(),
                        token: batch.token().get(),
                    });
                }
            }
            state.position = state.position.max(Some(batch.last_position()));
            state.applied.len() - before
        })
    }

    fn position(&self) -> u64 {
        self.state
            .lock()
            .unwrap()
            .position
            .map_or(0, EventPosition::get)
    }
}

struct ExactlyOnce {
    ledger: Arc<Ledger>,
    /// After committing the batch holding this position, keep the batch and hang: a process
    /// that stops between its commit and its bookmark, with a copy of its write in hand.
    hang_after: Option<u64>,
    kept: Arc<Mutex<Option<Batch>>>,
}

impl Projection for ExactlyOnce {
    type Error = StaleToken;

    async fn project(&mut self, batch: Batch) -> Result<(), StaleToken> {
        self.ledger.commit(&batch)?;
        let range = batch.first_position().get()..=batch.last_position().get();
        if self.hang_after.is_some_and(|p| range.contains(&p)) {
            *self.kept.lock().unwrap() = Some(batch);
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_projection_keeping_its_own_fenced_position_is_exactly_once() {
    let backend = Backend::new();
    append_orders(&backend.memory, 0, 250).await;
    let ledger = Arc::new(Ledger::default());
    let kept = Arc::new(Mutex::new(None));
    let projection = |hang_after| ExactlyOnce {
        ledger: Arc::clone(&ledger),
        hang_after,
        kept: Arc::clone(&kept),
    };

    // The same story as the at-least-once test: p1 commits 101..=200, dies before the
    // bookmark, and p2 is handed that batch again.
    let p1 = Replica::start(
        &backend,
        "p1",
        elector_config(),
        processor_config(),
        projection(Some(150)),
    );
    wait_for_leader(&p1.elector).await;
    let p2 = Replica::start(
        &backend,
        "p2",
        elector_config(),
        processor_config(),
        projection(None),
    );
    wait_until(&p2.elector, LeadershipState::is_standby).await;
    eventually(ms(1_000), async || ledger.position() == 200).await;
    p1.crash();
    assert_eq!(wait_for_leader(&p2.elector).await.0, 2);
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 250
    })
    .await;

    // The batch was delivered twice (p2 bookmarked 200), but applied once.
    assert_eq!(
        backend.timeline.bookmarks(),
        vec![("p1".into(), 100), ("p2".into(), 200), ("p2".into(), 250)]
    );
    let applied = ledger.state.lock().unwrap().applied.clone();
    assert_eq!(
        applied.iter().map(|e| e.position).collect::<Vec<_>>(),
        (1..=250).collect::<Vec<_>>(),
        "every event applied exactly once, in order"
    );
    assert!(
        applied
            .iter()
            .all(|e| e.token == if e.position <= 200 { 1 } else { 2 })
    );

    // Had p1 only been paused with its commit in flight, the commit would land now, after
    // p2's: the fence refuses it and nothing is applied.
    let zombie = kept.lock().unwrap().take().unwrap();
    let refused = ledger.commit(&zombie).unwrap_err();
    assert_eq!((refused.stale.get(), refused.current.get()), (1, 2));
    assert_eq!(ledger.state.lock().unwrap().applied.len(), 250);
    assert!(backend.timeline.marks().iter().all(
        |(_, m)| !matches!(m, Mark::Bookmarked { by, position } if by == "p1" && *position > 100)
    ));
    p2.task.abort();
}
