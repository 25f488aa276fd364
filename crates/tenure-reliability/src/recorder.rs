//! A storage wrapper that records every lease call and can make one owner's calls hang.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tenure_ports::{
    Capabilities, EventStorage, EventStorageError, LeaseChanges, LeaseRequest, LeaseResponse,
    LeaseSnapshot, async_trait,
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
    releases: Mutex<HashMap<(String, String), Vec<Instant>>>,
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

    /// The first instant, at or after `since`, at which `owner` invoked `release_lease` on
    /// `lease_name`.
    pub fn first_release_since(
        &self,
        lease_name: &str,
        owner: &str,
        since: Instant,
    ) -> Option<Instant> {
        let releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = releases.get(&(lease_name.to_owned(), owner.to_owned()))?;
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

    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        self.inner.lease_changes()
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        // A call whose future is dropped (the caller's timeout) is recorded as failed: its
        // outcome is unknown.
        let mut pending = Pending {
            history: &self.history,
            call: Some(tenure_tck::history::Call {
                lease_name: request.lease_name.clone(),
                owner: request.owner.clone(),
                invoked: Instant::now(),
                completed: Instant::now(),
                response: None,
            }),
        };
        let result = match self.hang_if_told(&request.owner).await {
            Ok(()) => self.inner.request_lease(request).await,
            Err(err) => Err(err),
        };
        if let Some(mut call) = pending.call.take() {
            call.completed = Instant::now();
            call.response = result.as_ref().ok().cloned();
            self.history.record_call(call);
        }
        result
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((lease_name.to_owned(), owner.to_owned()))
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

/// Records a call as failed if it is dropped before it completes.
struct Pending<'a> {
    history: &'a History,
    call: Option<tenure_tck::history::Call>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(mut call) = self.call.take() {
            call.completed = Instant::now();
            self.history.record_call(call);
        }
    }
}
