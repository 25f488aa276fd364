//! How a processor fails and recovers: typed errors from the projection and from the storage,
//! retries of unconfirmed storage calls, its stop signal, its query, and configurations
//! refused before anything runs. Paused tokio time, in-memory backend on tokio's clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::processing::{LEASE, processor_config};

use std::error::Error as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use support::processing::{
    Effects, Mark, Recorder, Replica, append_orders, bookmark_of, eventually,
};
use support::{Backend, Fault, ms, wait_for_leader};
use tenure_election::{
    Batch, ElectorConfig, FencingGuard, LeaderElector, Processor, ProcessorConfig,
    ProcessorConfigError, ProcessorError,
};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, Capabilities, Capability, EventQuery, EventStorage, EventStorageError, NewEvent,
    async_trait,
};
use tokio::time::sleep;

fn elector_config(owner: &str) -> ElectorConfig {
    support::processing::elector_config().with_owner(owner)
}

/// A projection's own error type.
#[derive(Debug, PartialEq, Eq)]
struct Refused(u64);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "downstream refused event {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Completes once `reader`'s bookmark is at `position`.
async fn bookmark_reaches(storage: &MemoryEventStorage, position: u64) {
    while bookmark_of(storage, LEASE).await < position {
        sleep(ms(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_projection_stops_the_processor_with_its_typed_error_and_a_rerun_retries() {
    let backend = Backend::new();
    append_orders(&backend.memory, 0, 250).await;
    let (elector, _) = backend.elector(elector_config("p1"));
    let fail_once = Arc::new(AtomicBool::new(true));
    let projected = Arc::new(Mutex::new(Vec::new()));
    let projection = {
        let (fail_once, projected) = (Arc::clone(&fail_once), Arc::clone(&projected));
        move |batch: Batch| {
            let (fail_once, projected) = (Arc::clone(&fail_once), Arc::clone(&projected));
            async move {
                let first = batch.first_position().get();
                if first == 101 && fail_once.swap(false, Ordering::SeqCst) {
                    return Err(Refused(first));
                }
                let mut projected = projected.lock().unwrap();
                projected.extend(batch.events().iter().map(|e| e.position.get()));
                Ok(())
            }
        }
    };
    let mut processor = Processor::new(
        Arc::new(backend.memory.clone()),
        elector.clone(),
        processor_config(),
        projection,
    )
    .unwrap();

    let error = processor.run().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the projection failed on events 101 to 200 (token 1): downstream refused event 101"
    );
    assert_eq!(
        error.source().unwrap().to_string(),
        "downstream refused event 101"
    );
    let ProcessorError::Projection {
        error,
        token,
        first,
        last,
    } = error
    else {
        panic!("not a projection error: {error:?}");
    };
    assert_eq!(error, Refused(101));
    assert_eq!((token.get(), first.get(), last.get()), (1, 101, 200));
    assert_eq!(
        bookmark_of(&backend.memory, LEASE).await,
        100,
        "not moved past the batch"
    );
    assert_eq!(
        elector.state().leader_token().map(|t| t.get()),
        Some(1),
        "lease kept"
    );
    assert!(backend.calls_of("p1", "release").is_empty());

    // Running again retries from the bookmark, under the same tenure.
    processor
        .run_until(bookmark_reaches(&backend.memory, 250))
        .await
        .unwrap();
    assert_eq!(*projected.lock().unwrap(), (1..=250).collect::<Vec<u64>>());
    elector.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_storage_calls_are_retried_from_the_bookmark_while_the_lease_is_kept() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 1_000).await;
    let p1 = Replica::start(
        &backend,
        "p1",
        elector_config("p1"),
        processor_config().with_call_timeout(ms(50)),
        Recorder::new("p1", LEASE, &backend, &fence, &effects),
    );
    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await >= 300
    })
    .await;

    // Every event call fails, then hangs: nothing is projected, and nothing stops.
    p1.storage_handle.set(Fault::Fail);
    sleep(ms(100)).await;
    let stuck_at = bookmark_of(&backend.memory, LEASE).await;
    p1.storage_handle.set(Fault::Hang);
    sleep(ms(200)).await;
    assert_eq!(bookmark_of(&backend.memory, LEASE).await, stuck_at);
    assert!(!p1.task.is_finished());
    p1.storage_handle.set(Fault::None);

    eventually(ms(1_000), async || {
        bookmark_of(&backend.memory, LEASE).await == 1_000
    })
    .await;
    assert_eq!(effects.counts().len(), 1_000);
    backend.timeline.assert_one_projector_at_a_time();
    backend.timeline.assert_bookmarks_move_forwards();
    assert!(
        backend.timeline.batches().iter().all(|b| b.1 == 1),
        "one tenure throughout: the lease does not depend on the event calls"
    );
    p1.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_storage_that_refuses_for_good_stops_the_processor_with_a_typed_error() {
    let backend = Backend::new();
    let (elector, _) = backend.elector(elector_config("p1"));
    wait_for_leader(&elector).await;
    backend.memory.close().await.unwrap();
    let mut processor = Processor::new(
        Arc::new(backend.memory.clone()),
        elector,
        processor_config(),
        |_: Batch| async { Ok::<(), Refused>(()) },
    )
    .unwrap();
    let error = processor.run().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "get_bookmark failed: the storage is closed"
    );
    assert!(matches!(
        error,
        ProcessorError::Storage {
            operation: "get_bookmark",
            error: EventStorageError::Closed
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn run_until_finishes_the_batch_in_progress_then_returns_keeping_the_lease() {
    let backend = Backend::new();
    let fence = Arc::new(FencingGuard::new());
    let effects = Effects::default();
    append_orders(&backend.memory, 0, 1_000).await;
    let (elector, _) = backend.elector(elector_config("p1"));
    let slow = Recorder {
        work: ms(50),
        ..Recorder::new("p1", LEASE, &backend, &fence, &effects)
    };
    let mut processor = Processor::new(
        Arc::new(backend.labelled("p1")),
        elector.clone(),
        processor_config(),
        slow,
    )
    .unwrap();

    // The signal fires 20 ms into the first batch: the batch runs to its end and is
    // bookmarked, and nothing more is started.
    let started = tokio::time::Instant::now();
    processor.run_until(sleep(ms(20))).await.unwrap();
    assert_eq!(started.elapsed(), ms(50));
    assert_eq!(backend.timeline.bookmarks(), vec![("p1".into(), 100)]);
    assert_eq!(backend.timeline.batches().len(), 1);
    assert_eq!(elector.state().leader_token().map(|t| t.get()), Some(1));
    assert!(backend.calls_of("p1", "release").is_empty());

    // Run again: it reads the bookmark and goes on.
    processor
        .run_until(bookmark_reaches(&backend.memory, 300))
        .await
        .unwrap();
    assert_eq!(backend.timeline.batches()[1].2, 101);
    assert!(backend.timeline.marks().iter().all(|(_, m)| !matches!(
        m,
        Mark::Finished {
            completed: false,
            ..
        }
    )));
    elector.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_query_selects_the_events_and_the_bookmark_points_at_the_last_match() {
    let backend = Backend::new();
    let events = (1..=20)
        .map(|n| {
            let event_type = if n % 2 == 1 {
                "OrderPlaced"
            } else {
                "OrderCancelled"
            };
            NewEvent::new(format!("order-{n}"), event_type, json!({ "n": n }))
        })
        .collect();
    backend
        .memory
        .append(&AppendRequest::new(events))
        .await
        .unwrap();
    let (elector, _) = backend.elector(elector_config("p1"));
    let seen = Arc::new(Mutex::new(Vec::<Vec<u64>>::new()));
    let projection = {
        let seen = Arc::clone(&seen);
        move |batch: Batch| {
            let seen = Arc::clone(&seen);
            async move {
                let positions = batch.events().iter().map(|e| e.position.get()).collect();
                seen.lock().unwrap().push(positions);
                Ok::<(), Refused>(())
            }
        }
    };
    let config = ProcessorConfig::new(LEASE)
        .with_query(EventQuery::all().of_type("OrderPlaced"))
        .with_batch_size(4)
        .with_idle_poll(ms(20))
        .with_bookmark_tags(vec!["dispatcher:v1".into()]);
    let mut processor = Processor::new(
        Arc::new(backend.labelled("p1")),
        elector.clone(),
        config,
        projection,
    )
    .unwrap();
    processor
        .run_until(bookmark_reaches(&backend.memory, 19))
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![vec![1, 3, 5, 7], vec![9, 11, 13, 15], vec![17, 19]]
    );
    let bookmark = backend.memory.get_bookmark(LEASE).await.unwrap().unwrap();
    assert_eq!(bookmark.position.get(), 19);
    assert_eq!(bookmark.tags, vec!["dispatcher:v1".to_owned()]);
    assert_eq!(processor.config().batch_size(), 4);
    elector.shutdown().await.unwrap();
}

/// A storage with leases only.
#[derive(Debug)]
struct LeasesOnly;

#[async_trait]
impl EventStorage for LeasesOnly {
    fn name(&self) -> &str {
        "leases-only"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::from([Capability::Lease])
    }
}

#[tokio::test]
async fn a_processor_that_cannot_run_is_refused_before_anything_runs() {
    let storage = Arc::new(MemoryEventStorage::new());
    let elector = LeaderElector::start(storage.clone(), elector_config("p1")).unwrap();
    let noop = |_: Batch| async { Ok::<(), Refused>(()) };

    let error = Processor::new(
        Arc::new(LeasesOnly),
        elector.clone(),
        processor_config(),
        noop,
    )
    .unwrap_err();
    assert_eq!(error, ProcessorConfigError::Unsupported(Capability::Events));
    assert_eq!(
        error.to_string(),
        "a processor needs a storage that supports events"
    );

    let error = Processor::new(
        storage.clone(),
        elector.clone(),
        ProcessorConfig::new("bad\0reader"),
        noop,
    )
    .unwrap_err();
    assert!(matches!(error, ProcessorConfigError::Reader(_)));
    assert!(error.to_string().contains("reader"), "{error}");

    let error = Processor::new(
        storage,
        elector.clone(),
        processor_config().with_batch_size(0),
        noop,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid batch size: 0 must be between 1 and 10000"
    );
    elector.shutdown().await.unwrap();
}
