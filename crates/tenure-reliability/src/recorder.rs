//! A storage wrapper that records every lease call and can make one owner's calls hang.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tenure_ports::{
    Capabilities, EventStorage, EventStorageError, LeaseRequest, LeaseResponse, LeaseSnapshot,
    async_trait,
};
use tenure_tck::history::History;
use tokio::time::Instant;

/// Wraps a storage: every `request_lease` is recorded in a [`History`], every
/// `release_lease` invocation is timed, and an owner can be made to hang until an instant (a
/// paused process, a partition): its calls wait until then and fail as `Unavailable`, without
/// reaching the storage.
#[derive(Debug)]
pub struct RecordingStorage {
    inner: Arc<dyn EventStorage>,
    history: Arc<History>,
    releases: Mutex<HashMap<String, Vec<Instant>>>,
    hung_until: Mutex<HashMap<String, Instant>>,
    hung_calls: AtomicU64,
}

impl RecordingStorage {
    /// Wraps `inner`, recording into `history`.
    pub fn new(inner: Arc<dyn EventStorage>, history: Arc<History>) -> Self {
        RecordingStorage {
            inner,
            history,
            releases: Mutex::new(HashMap::new()),
            hung_until: Mutex::new(HashMap::new()),
            hung_calls: AtomicU64::new(0),
        }
    }

    /// Makes `owner`'s calls hang until `until`.
    pub fn hang(&self, owner: &str, until: Instant) {
        self.hung_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(owner.to_owned(), until);
    }

    /// How many calls hung.
    pub fn hung_calls(&self) -> u64 {
        self.hung_calls.load(Ordering::Relaxed)
    }

    /// The first instant, at or after `since`, at which `owner` invoked `release_lease`.
    pub fn first_release_since(&self, owner: &str, since: Instant) -> Option<Instant> {
        let releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = releases.get(owner)?;
        // Recorded in invocation order, so sorted.
        mine.get(mine.partition_point(|at| *at < since)).copied()
    }

    /// Waits out a hang of `owner`, if one is in force, and fails the call as a partition would.
    async fn hang_if_told(&self, owner: &str) -> Result<(), EventStorageError> {
        let until = self
            .hung_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(owner)
            .copied();
        match until {
            Some(until) if Instant::now() < until => {
                self.hung_calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep_until(until).await;
                Err(EventStorageError::unavailable("injected hang"))
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl EventStorage for RecordingStorage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let invoked = Instant::now();
        let result = match self.hang_if_told(&request.owner).await {
            Ok(()) => self.inner.request_lease(request).await,
            Err(err) => Err(err),
        };
        self.history.record_call(tenure_tck::history::Call {
            lease_name: request.lease_name.clone(),
            owner: request.owner.clone(),
            invoked,
            completed: Instant::now(),
            response: result.as_ref().ok().cloned(),
        });
        result
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(owner.to_owned())
            .or_default()
            .push(Instant::now());
        self.hang_if_told(owner).await?;
        self.inner.release_lease(lease_name, owner).await
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.inner.get_leases().await
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<tenure_ports::Contender>, EventStorageError> {
        self.inner.get_lease_contenders(lease_name).await
    }

    async fn close(&self) -> Result<(), EventStorageError> {
        self.inner.close().await
    }
}
