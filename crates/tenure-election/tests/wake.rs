//! Wake-ups: with a storage that reports lease changes, a release reaches a standby and a
//! step-down request reaches the holder at once, not at their next poll; without one, the
//! same handovers happen by polling. Real time, with poll intervals (200 s) far beyond the
//! tests' patience (5 s), so that only a wake-up can pass them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    Capabilities, Capability, Contender, EventStorage, EventStorageError, LeaseRequest,
    LeaseResponse, LeaseSnapshot, async_trait,
};
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(5);
const LONG_TTL: Duration = Duration::from_secs(600);

/// The in-memory storage with its lease changes hidden: only polling is left.
#[derive(Debug)]
struct PollingOnly(MemoryEventStorage);

#[async_trait]
impl EventStorage for PollingOnly {
    fn name(&self) -> &str {
        "polling-only"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::from([Capability::Lease])
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        self.0.request_lease(request).await
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.0.release_lease(lease_name, owner).await
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.0.get_leases().await
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        self.0.get_lease_contenders(lease_name).await
    }
}

fn elector(
    storage: &Arc<dyn EventStorage>,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> LeaderElector {
    let config = ElectorConfig::new("wake", ttl)
        .with_owner(owner)
        .with_priority(priority);
    LeaderElector::start(storage.clone(), config).unwrap()
}

async fn until(elector: &LeaderElector, wanted: impl Fn(&LeadershipState) -> bool) -> bool {
    let mut state = elector.subscribe();
    timeout(PATIENCE, state.wait_for(|s| wanted(s)))
        .await
        .is_ok()
}

/// `a` leads, `b` stands by, `a` releases (shuts down): does `b` lead within the patience?
async fn release_handover(storage: Arc<dyn EventStorage>, ttl: Duration) -> bool {
    let a = elector(&storage, "a", 0, ttl);
    assert!(until(&a, LeadershipState::is_leader).await);
    let b = elector(&storage, "b", 0, ttl);
    assert!(until(&b, LeadershipState::is_standby).await);
    a.shutdown().await.unwrap();
    let led = until(&b, LeadershipState::is_leader).await;
    b.shutdown().await.unwrap();
    led
}

#[tokio::test]
async fn a_release_wakes_the_standby_without_waiting_for_its_poll() {
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    assert!(release_handover(storage, LONG_TTL).await);
}

#[tokio::test]
async fn a_step_down_request_reaches_the_holder_without_waiting_for_its_poll() {
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let a = elector(&storage, "a", 0, LONG_TTL);
    assert!(until(&a, LeadershipState::is_leader).await);
    let b = elector(&storage, "b", 10, LONG_TTL);
    assert!(
        until(&a, LeadershipState::is_step_down_requested).await,
        "the holder did not hear the step-down request"
    );
    // The holder hands over (a release), which wakes the contender in turn.
    a.release().await.unwrap();
    assert!(until(&b, LeadershipState::is_leader).await);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn without_lease_changes_a_release_waits_for_the_poll() {
    // The negative control: the same handover, the changes hidden, is not taken up within
    // the patience: what passes above is the wake-up, not a poll.
    let storage: Arc<dyn EventStorage> = Arc::new(PollingOnly(MemoryEventStorage::new()));
    assert!(!release_handover(storage, LONG_TTL).await);
}

#[tokio::test]
async fn without_lease_changes_handovers_still_happen_by_polling() {
    // A 1.5 s ttl polls every 0.5 s: well within the patience.
    let storage: Arc<dyn EventStorage> = Arc::new(PollingOnly(MemoryEventStorage::new()));
    assert!(release_handover(storage, Duration::from_millis(1_500)).await);
}
