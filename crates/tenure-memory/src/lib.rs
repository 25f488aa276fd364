//! The embedded in-memory backend of Tenure.
//!
//! [`MemoryEventStorage`] keeps leases, the event log and bookmarks in the process's memory. Clones share one state, so
//! every task and thread holding a clone contends for real: a test, a demo, or several
//! components of one process can elect a leader without a database. Its clock is the storage
//! clock: the system clock by default, or a [`ManualClock`] injected with
//! [`MemoryEventStorage::with_clock`] so that tests move time instead of waiting for it.
//!
//! It is not shared between processes and keeps nothing across a restart: for leader
//! election among replicas, use `tenure-postgres`.
//!
//! ```
//! use std::time::Duration;
//! use tenure_memory::MemoryEventStorage;
//! use tenure_ports::{EventStorage, LeaseRequest, LeaseStatus};
//!
//! # tokio_test_block_on(async {
//! let storage = MemoryEventStorage::new();
//! let a = LeaseRequest::new("jobs", "a", 0, Duration::from_secs(30));
//! let b = LeaseRequest::new("jobs", "b", 0, Duration::from_secs(30));
//! assert_eq!(storage.request_lease(&a).await?.status, LeaseStatus::Leader);
//! assert_eq!(storage.clone().request_lease(&b).await?.status, LeaseStatus::Standby);
//! # Ok::<(), tenure_ports::EventStorageError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

#![deny(missing_docs)]

mod log;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tenure_ports::domain::{self, RecordWrite};
use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Capability, Clock, Contender, EventPosition, EventQuery,
    EventStorage, EventStorageError, Lease, LeaseName, LeaseRequest, LeaseResponse, LeaseSnapshot,
    Owner, ReadOptions, StoredEvent, SystemClock, async_trait, sort_contenders,
};

pub use log::{Change, EventLog, Journal};
pub use tenure_ports::ManualClock;

/// An in-memory storage. Clones share one state and one clock.
#[derive(Clone, Debug)]
pub struct MemoryEventStorage {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    closed: AtomicBool,
    leases: Mutex<BTreeMap<LeaseName, LeaseEntry>>,
    /// The log has a lock of its own: appends and reads never wait on a lease call.
    log: Mutex<LogState>,
}

#[derive(Debug)]
struct LogState {
    log: EventLog,
    journal: Option<Box<dyn Journal>>,
}

impl LogState {
    fn parts(&mut self) -> (&mut EventLog, Option<&mut dyn Journal>) {
        let journal: Option<&mut dyn Journal> = match &mut self.journal {
            Some(journal) => Some(journal.as_mut()),
            None => None,
        };
        (&mut self.log, journal)
    }
}

/// One lease's record and its contenders, kept together so that one lock covers a decision.
#[derive(Debug, Default)]
struct LeaseEntry {
    record: Option<Lease>,
    contenders: HashMap<Owner, Contender>,
}

impl MemoryEventStorage {
    /// An empty storage on the system clock.
    pub fn new() -> Self {
        MemoryEventStorage::with_clock(Arc::new(SystemClock::new()))
    }

    /// An empty storage on `clock`, e.g. a [`ManualClock`] in tests.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryEventStorage::from_parts(clock, EventLog::new(), None)
    }

    /// A storage whose event log starts as `log` and whose every change to the log is first
    /// recorded by `journal`: the building block of a persistent embedded backend, which
    /// replays its journal into an [`EventLog`] and hands both over. Leases are never
    /// journaled: a lease held by a process that no longer runs must expire, not be revived.
    pub fn with_journal(clock: Arc<dyn Clock>, log: EventLog, journal: Box<dyn Journal>) -> Self {
        MemoryEventStorage::from_parts(clock, log, Some(journal))
    }

    fn from_parts(clock: Arc<dyn Clock>, log: EventLog, journal: Option<Box<dyn Journal>>) -> Self {
        MemoryEventStorage {
            shared: Arc::new(Shared {
                clock,
                closed: AtomicBool::new(false),
                leases: Mutex::new(BTreeMap::new()),
                log: Mutex::new(LogState { log, journal }),
            }),
        }
    }

    /// The storage's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The number of stored contender registrations, live or not, over all leases.
    /// The registry is bounded: registrations that are no longer live are pruned.
    pub fn contender_registrations(&self) -> Result<usize, EventStorageError> {
        Ok(self
            .lock()?
            .values()
            .map(|entry| entry.contenders.len())
            .sum())
    }

    /// Locks the event log, the same way as [`Self::lock`].
    fn lock_log(&self) -> Result<MutexGuard<'_, LogState>, EventStorageError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        Ok(self
            .shared
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Locks the state. No lock is ever held across an `.await`: every method locks, decides
    /// and unlocks synchronously.
    fn lock(&self) -> Result<MutexGuard<'_, BTreeMap<LeaseName, LeaseEntry>>, EventStorageError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        // A panic while the lock was held cannot leave a half-applied decision behind: the
        // state is only written after the decision is made, so the data is still consistent.
        Ok(self
            .shared
            .leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl Default for MemoryEventStorage {
    fn default() -> Self {
        MemoryEventStorage::new()
    }
}

#[async_trait]
impl EventStorage for MemoryEventStorage {
    fn name(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::from([Capability::Lease, Capability::Events, Capability::Bookmarks])
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let request = request.validate()?;
        let mut leases = self.lock()?;
        let now = self.shared.clock.now();
        let entry = leases.entry(request.lease_name.clone()).or_default();
        let contenders: Vec<Contender> = entry.contenders.values().cloned().collect();
        let outcome = domain::decide_request(entry.record.as_ref(), &contenders, &request, now)?;

        if outcome.transition.record_write() != RecordWrite::None {
            entry.record = Some(outcome.response.lease.clone());
        }
        for owner in &outcome.pruned {
            entry.contenders.remove(owner);
        }
        entry
            .contenders
            .insert(outcome.contender.owner.clone(), outcome.contender);
        Ok(outcome.response)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let owner = Owner::new(owner)?;
        let mut leases = self.lock()?;
        let now = self.shared.clock.now();
        let Some(entry) = leases.get_mut(&lease_name) else {
            return Ok(());
        };
        let outcome = domain::decide_release(entry.record.as_ref(), &lease_name, &owner, now)?;
        if let Some(updated) = outcome.updated {
            entry.record = Some(updated);
        }
        entry.contenders.remove(&outcome.withdrawn);
        if entry.record.is_none() && entry.contenders.is_empty() {
            leases.remove(&lease_name);
        }
        Ok(())
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        let leases = self.lock()?;
        let now = self.shared.clock.now();
        Ok(LeaseSnapshot {
            now,
            leases: leases
                .values()
                .filter_map(|entry| entry.record.clone())
                .collect(),
        })
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let leases = self.lock()?;
        let now = self.shared.clock.now();
        let mut live: Vec<Contender> = leases
            .get(&lease_name)
            .map(|entry| {
                entry
                    .contenders
                    .values()
                    .filter(|c| c.is_live_at(now))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        sort_contenders(&mut live);
        Ok(live)
    }

    async fn append(&self, request: &AppendRequest) -> Result<Vec<StoredEvent>, EventStorageError> {
        let mut state = self.lock_log()?;
        let now = self.shared.clock.now();
        let (log, journal) = state.parts();
        log.append(request, now, journal)
    }

    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.lock_log()?.log.read(query, options)
    }

    async fn bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        let mut state = self.lock_log()?;
        let now = self.shared.clock.now();
        let (log, journal) = state.parts();
        log.bookmark(reader, position, tags, now, journal)
    }

    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        self.lock_log()?.log.get_bookmark(reader)
    }

    async fn remove_bookmark(&self, reader: &str) -> Result<(), EventStorageError> {
        let mut state = self.lock_log()?;
        let (log, journal) = state.parts();
        log.remove_bookmark(reader, journal)
    }

    async fn get_bookmarks(&self) -> Result<Vec<Bookmark>, EventStorageError> {
        Ok(self.lock_log()?.log.bookmarks())
    }

    async fn close(&self) -> Result<(), EventStorageError> {
        self.shared.closed.store(true, Ordering::Release);
        Ok(())
    }
}

/// The README's examples, compiled and run as doctests so that they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
