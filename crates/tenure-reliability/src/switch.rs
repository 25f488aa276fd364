//! A storage whose target can be switched while electors use it: a failover, as a client
//! that follows a DNS name or a connection-string change would see it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use tenure_ports::{
    Capabilities, Contender, EventStorage, EventStorageError, LeaseChanges, LeaseRequest,
    LeaseResponse, LeaseSnapshot, async_trait,
};

/// Delegates the lease calls to the current target; [`switch_to`](Self::switch_to) replaces
/// it. Calls in flight finish on the target they started on.
#[derive(Debug)]
pub struct SwitchableStorage {
    target: RwLock<Arc<dyn EventStorage>>,
    switches: AtomicU64,
    answered_since_switch: AtomicU64,
}

impl SwitchableStorage {
    /// Starts on `target`.
    pub fn new(target: Arc<dyn EventStorage>) -> Self {
        SwitchableStorage {
            target: RwLock::new(target),
            switches: AtomicU64::new(0),
            answered_since_switch: AtomicU64::new(0),
        }
    }

    /// From now on, calls go to `target`.
    pub fn switch_to(&self, target: Arc<dyn EventStorage>) {
        *self.target.write().unwrap_or_else(PoisonError::into_inner) = target;
        self.answered_since_switch.store(0, Ordering::Release);
        self.switches.fetch_add(1, Ordering::AcqRel);
    }

    /// How many lease requests were answered since the last switch.
    pub fn answered_since_switch(&self) -> u64 {
        self.answered_since_switch.load(Ordering::Acquire)
    }

    fn current(&self) -> Arc<dyn EventStorage> {
        Arc::clone(&self.target.read().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl EventStorage for SwitchableStorage {
    fn name(&self) -> &str {
        "switchable"
    }

    fn capabilities(&self) -> Capabilities {
        self.current().capabilities()
    }

    // The target's at subscription time: after a switch, wake-ups of the new target are not
    // heard until the elector subscribes again (a wake-up is only a hint; polls still come).
    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        self.current().lease_changes()
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let switches = self.switches.load(Ordering::Acquire);
        let response = self.current().request_lease(request).await?;
        if self.switches.load(Ordering::Acquire) == switches {
            self.answered_since_switch.fetch_add(1, Ordering::AcqRel);
        }
        Ok(response)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.current().release_lease(lease_name, owner).await
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.current().get_leases().await
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        self.current().get_lease_contenders(lease_name).await
    }

    async fn close(&self) -> Result<(), EventStorageError> {
        self.current().close().await
    }
}
