//! An event the storage cannot decode (issue 16): written by another writer, past the
//! adapter's validation, with a payload nested deeper than the drivers' JSON decoder reads. A
//! read returns the events before it (a short read) and the read that starts at it fails with
//! `Corrupt` naming its position; a `Processor` projects everything before it and stops with
//! that error. On each driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use support::{admin, fresh_storage};
use tenure_election::{
    Batch, ElectorConfig, LeaderElector, Processor, ProcessorConfig, ProcessorError,
};
use tenure_ports::{
    AppendRequest, EventPosition, EventQuery, EventStorage, EventStorageError, NewEvent,
    ReadOptions,
};

fn event(n: u64) -> NewEvent {
    NewEvent::new("orders", "Placed", json!({ "n": n }))
}

on_each_driver! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_event_is_named_and_hides_none_before_it(driver: PostgresDriver) {
    let (storage, guard) = fresh_storage(driver).await;
    let before = storage
        .append(&AppendRequest::new(vec![event(1), event(2)]))
        .await
        .unwrap();
    // 200 levels: jsonb stores it, serde_json (both drivers decode with it) stops at 128.
    let deep = format!("{}0{}", "[".repeat(200), "]".repeat(200));
    let bad: i64 = admin()
        .await
        .query_one(
            &format!(
                "INSERT INTO {}events (stream, event_type, payload, tags, recorded_at, \
                 transaction_id) VALUES ('orders', 'Placed', $1::text::jsonb, '{{}}', now(), \
                 pg_current_xact_id()) RETURNING position",
                guard.prefix()
            ),
            &[&deep],
        )
        .await
        .unwrap()
        .get(0);
    let bad = EventPosition::new(u64::try_from(bad).unwrap()).unwrap();
    storage
        .append(&AppendRequest::new(vec![event(3)]))
        .await
        .unwrap();

    let all = EventQuery::all();
    let first = storage.read_events(&all, ReadOptions::forwards()).await.unwrap();
    let positions = |events: &[tenure_ports::StoredEvent]| {
        events.iter().map(|e| e.position).collect::<Vec<_>>()
    };
    assert_eq!(positions(&first), positions(&before), "the events before it");
    let error = storage
        .read_events(&all, ReadOptions::forwards().starting_after(Some(before[1].position)))
        .await
        .unwrap_err();
    assert!(matches!(error, EventStorageError::Corrupt { .. }), "{error:?}");
    assert!(
        error.to_string().contains(&format!("position {bad}")),
        "the error does not name the event: {error}"
    );
    // Backwards from the end, the event after it is read first.
    let last = storage.read_events(&all, ReadOptions::backwards()).await.unwrap();
    assert_eq!(last.len(), 1);
    assert!(last[0].position > bad);

    // A processor projects the events before it, then stops naming it.
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let elector = LeaderElector::start(
        storage.clone(),
        ElectorConfig::new("undecodable", Duration::from_secs(5)).with_owner("p"),
    )
    .unwrap();
    let projected = Arc::new(Mutex::new(Vec::new()));
    let mut processor = Processor::new(
        storage.clone(),
        elector.clone(),
        ProcessorConfig::new("undecodable").with_idle_poll(Duration::from_millis(20)),
        {
            let projected = projected.clone();
            move |batch: Batch| {
                projected.lock().unwrap().extend(batch.events().iter().map(|e| e.position));
                async { Ok::<(), Infallible>(()) }
            }
        },
    )
    .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), processor.run())
        .await
        .expect("the processor stopped")
        .unwrap_err();
    assert!(
        matches!(
            &stopped,
            ProcessorError::Storage { operation: "read_events", error: EventStorageError::Corrupt { .. } }
        ),
        "{stopped:?}"
    );
    assert!(stopped.to_string().contains(&format!("position {bad}")), "{stopped}");
    assert_eq!(*projected.lock().unwrap(), positions(&before));
    elector.shutdown().await.unwrap();
}
}
