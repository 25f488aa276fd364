//! A zombie processor's late bookmark is refused by the storage's fence and ends its tenure:
//! the bookmark never moves backwards, and the zombie does not resume until its elector hears
//! of the newer tenure.
//!
//! The zombie is staged inside its own projection: while it projects its first batch, the
//! storage's clock jumps past the ttl (as if the zombie had been paused that long; its
//! elector, on its own clock and polling every 10 s, still believes in its tenure), a
//! successor takes the expired lease through the storage, and bookmarks further. The
//! verdict is read from the storage and from what the projection saw.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tenure_election::{
    Batch, ElectorConfig, LeaderElector, Processor, ProcessorConfig, Projection,
};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, EventPosition, EventStorage, Fence, LeaseName, LeaseRequest, ManualClock,
    NewEvent,
};

const LEASE: &str = "fenced-projection";
const TTL: Duration = Duration::from_secs(30);

/// Projects nothing but records what it saw; during its first batch, the lease is taken over
/// and the successor bookmarks at position 8.
struct Zombie {
    storage: MemoryEventStorage,
    clock: ManualClock,
    seen: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Projection for Zombie {
    type Error = std::convert::Infallible;

    async fn project(&mut self, batch: Batch) -> Result<(), Self::Error> {
        let first_batch = self.seen.lock().unwrap().is_empty();
        self.seen
            .lock()
            .unwrap()
            .push((batch.token().get(), batch.last_position().get()));
        if first_batch {
            self.clock.advance(TTL + Duration::from_millis(1));
            let successor = self
                .storage
                .request_lease(&LeaseRequest::new(LEASE, "successor", 0, TTL))
                .await
                .unwrap();
            let fence = Fence::new(LeaseName::new(LEASE).unwrap(), successor.fencing_token);
            self.storage
                .bookmark_fenced(LEASE, EventPosition::new(8).unwrap(), &[], &fence)
                .await
                .unwrap();
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_superseded_processors_bookmark_is_refused_and_never_moves_it_back() {
    let clock = ManualClock::new();
    let memory = MemoryEventStorage::with_clock(Arc::new(clock.clone()));
    let events: Vec<NewEvent> = (1..=10)
        .map(|n| NewEvent::new("s", "T", json!({ "n": n })))
        .collect();
    memory.append(&AppendRequest::new(events)).await.unwrap();
    let storage: Arc<dyn EventStorage> = Arc::new(memory.clone());
    let elector = LeaderElector::start(
        storage.clone(),
        ElectorConfig::new(LEASE, TTL).with_owner("zombie"),
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = ProcessorConfig::new(LEASE)
        .with_batch_size(4)
        .with_idle_poll(Duration::from_millis(10));
    let mut processor = Processor::new(
        storage.clone(),
        elector,
        config,
        Zombie {
            storage: memory.clone(),
            clock: clock.clone(),
            seen: seen.clone(),
        },
    )
    .unwrap();
    processor
        .run_until(tokio::time::sleep(Duration::from_millis(500)))
        .await
        .unwrap();

    let bookmark = memory.get_bookmark(LEASE).await.unwrap().unwrap();
    assert_eq!(
        bookmark.position.get(),
        8,
        "the successor's bookmark stands"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1, 4)],
        "the zombie projected its first batch once, then stopped: its bookmark (4) was \
         refused and it did not resume its superseded tenure"
    );
    processor.elector().shutdown().await.unwrap();
}
