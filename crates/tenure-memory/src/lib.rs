//! The embedded in-memory backend of Tenure.
//!
//! [`MemoryEventStorage`] keeps leases, the event log and bookmarks in the process's memory. Clones share one state, so
//! every task and thread holding a clone contends for real: a test, a demo, or several
//! components of one process can elect a leader without a database. Its clock is the storage
//! clock: the system clock by default, or a [`ManualClock`](tenure_ports::ManualClock) injected with
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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tenure_ports::Timestamp;
use tenure_ports::domain::ValidLeaseRequest;
use tenure_ports::domain::{self, RecordWrite, Transition};
use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Capability, Clock, Contender, EventPosition, EventQuery,
    EventStorage, EventStorageError, Fence, Lease, LeaseChange, LeaseChangeKind, LeaseChanges,
    LeaseName, LeaseRequest, LeaseResponse, LeaseSnapshot, Owner, ReadOptions, StoredEvent,
    SystemClock, async_trait, sort_contenders,
};
use tokio::sync::broadcast;

pub use log::{Change, EventLog, IssuedToken, Journal};

/// An in-memory storage. Clones share one state and one clock.
#[derive(Clone, Debug)]
pub struct MemoryEventStorage {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    closed: AtomicBool,
    /// The leases, spread over shards by name, each shard with a lock of its own: calls on one
    /// lease are serialized, and calls on different leases rarely wait on each other.
    leases: [ShardLock; SHARDS],
    /// The log has a lock of its own: appends and reads never wait on a lease call.
    log: Mutex<LogState>,
    /// Lease changes, for [`EventStorage::lease_changes`]: sent under the lease's shard lock,
    /// so in the order the decisions were made (a send never blocks), received by each
    /// subscription.
    changes: broadcast::Sender<LeaseChange>,
}

/// How many changes a subscription may fall behind before it is told it missed some.
const CHANGES_BUFFERED: usize = 1024;

/// A subscription to a memory storage's lease changes.
#[derive(Debug)]
struct Subscription(broadcast::Receiver<LeaseChange>);

#[async_trait]
impl LeaseChanges for Subscription {
    async fn next(&mut self) -> Option<LeaseChange> {
        // `recv` is cancel safe: a change not yet taken stays in the channel.
        match self.0.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(LeaseChange::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
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
///
/// The registrations are a plain `Vec`, in the shape the domain reads them, so that a decision
/// is made on them in place; the registry is bounded (stale ones are pruned at every request),
/// so a linear search stays short.
#[derive(Debug)]
struct LeaseEntry {
    /// The last validated request on this lease. Its names are shared (not copied) by every
    /// record and answer of the lease, and a holder renewing in a loop finds its own request
    /// here and is decided on it as it is, once its priority and ttl are set.
    last: ValidLeaseRequest,
    record: Option<Lease>,
    contenders: Vec<Contender>,
}

impl LeaseEntry {
    fn new(first: ValidLeaseRequest) -> Self {
        LeaseEntry {
            last: first,
            record: None,
            contenders: Vec::new(),
        }
    }

    /// The validated `owner` this lease already knows (a registration or the record's
    /// holder), shared rather than copied; `None` for an owner it has not seen.
    fn known_owner(&self, owner: &str) -> Option<Owner> {
        self.contenders
            .iter()
            .map(|c| &c.owner)
            .chain(self.record.as_ref().map(|r| &r.owner))
            .find(|known| **known == *owner)
            .cloned()
    }

    /// Decides `request` (checked; its ttl truncated to `ttl`) at `now` and writes what the
    /// outcome says.
    /// An acquisition (a new token) is first handed to `issued`, which persists it where a
    /// journal asks for that; if it fails, nothing is written and the call fails.
    fn decide_request(
        &mut self,
        request: &LeaseRequest,
        ttl: std::time::Duration,
        now: Timestamp,
        issued: impl FnOnce(&Lease) -> Result<(), EventStorageError>,
    ) -> Result<(LeaseResponse, Option<LeaseChangeKind>), EventStorageError> {
        if self.last.owner != *request.owner.as_str() {
            self.last.owner = match self.known_owner(&request.owner) {
                Some(owner) => owner,
                None => Owner::new(&request.owner)?,
            };
        }
        self.last.priority = request.priority;
        self.last.ttl = ttl;
        let request = &self.last;
        let outcome = domain::decide_request(self.record.as_ref(), &self.contenders, request, now)?;
        // A step-down request is news to the holder only for a new (or newly higher, or
        // revived) registration: the scan runs for outranking standbys alone, never on a
        // renewal, and before the registrations are updated below.
        let change = if outcome.transition.is_acquisition() {
            Some(LeaseChangeKind::Acquired)
        } else if outcome.transition == Transition::Standby
            && request.priority > outcome.response.lease.priority
            && !self.contenders.iter().any(|c| {
                c.owner == request.owner && c.priority == request.priority && c.is_live_at(now)
            })
        {
            Some(LeaseChangeKind::StepDownRequested)
        } else {
            None
        };
        if outcome.transition.is_acquisition() {
            issued(&outcome.response.lease)?;
        }
        if outcome.transition.record_write() != RecordWrite::None {
            store_record(&mut self.record, &outcome.response.lease);
        }
        if !outcome.pruned.is_empty() {
            self.contenders
                .retain(|c| !outcome.pruned.contains(&c.owner));
        }
        match self
            .contenders
            .iter_mut()
            .find(|c| c.owner == outcome.contender.owner)
        {
            Some(registration) => *registration = outcome.contender,
            None => self.contenders.push(outcome.contender),
        }
        Ok((outcome.response, change))
    }
}

impl MemoryEventStorage {
    /// An empty storage on the system clock.
    pub fn new() -> Self {
        MemoryEventStorage::with_clock(Arc::new(SystemClock::new()))
    }

    /// An empty storage on `clock`, e.g. a [`ManualClock`](tenure_ports::ManualClock) in tests.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryEventStorage::from_parts(clock, EventLog::new(), None)
    }

    /// A storage whose event log starts as `log` and whose every change to the log is first
    /// recorded by `journal`: the building block of a persistent embedded backend, which
    /// replays its journal into an [`EventLog`] and hands both over. Leases are never
    /// journaled: a lease held by a process that no longer runs must expire, not be revived.
    /// Only each lease's highest issued token is ([`Change::TokenIssued`], at every
    /// acquisition): each lease of [`EventLog::issued_tokens`] starts as a record of that
    /// token's tenure, released at the storage's first instant, so that no lease is held and
    /// the next acquisition continues above it, as the lease contract's rules decide.
    pub fn with_journal(clock: Arc<dyn Clock>, log: EventLog, journal: Box<dyn Journal>) -> Self {
        let storage = MemoryEventStorage::from_parts(clock, log, Some(journal));
        storage.seed_issued_tokens();
        storage
    }

    /// Starts each lease the log holds a token of as that tenure, released now.
    fn seed_issued_tokens(&self) {
        let now = self.shared.clock.now();
        let tokens: Vec<(String, IssuedToken)> = {
            let state = self
                .shared
                .log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state
                .log
                .issued_tokens()
                .iter()
                .map(|(name, issued)| (name.clone(), issued.clone()))
                .collect()
        };
        for (name, issued) in tokens {
            // Names the journal accepted were valid when written; one that is not (a damaged
            // but checksummed file cannot hold one) is skipped rather than trusted.
            let Ok(first) = LeaseRequest::new(
                name.as_str(),
                issued.owner.as_str(),
                0,
                tenure_ports::domain::MIN_TTL,
            )
            .validate() else {
                continue;
            };
            let record = Lease {
                lease_name: first.lease_name.clone(),
                owner: first.owner.clone(),
                priority: 0,
                fencing_token: issued.token,
                acquired_at: now,
                heartbeat_at: now,
                ttl: first.ttl,
                released_at: None,
            };
            // The domain's release of that tenure: backdated, marked released.
            let Ok(outcome) =
                domain::decide_release(Some(&record), &first.lease_name, &first.owner, now)
            else {
                continue;
            };
            let Ok(mut shard) = self.lock(&name) else {
                return;
            };
            let mut entry = LeaseEntry::new(first);
            entry.record = Some(outcome.updated.unwrap_or(record));
            shard.insert(entry.last.lease_name.clone(), entry);
        }
    }

    fn from_parts(clock: Arc<dyn Clock>, log: EventLog, journal: Option<Box<dyn Journal>>) -> Self {
        MemoryEventStorage {
            shared: Arc::new(Shared {
                clock,
                closed: AtomicBool::new(false),
                leases: std::array::from_fn(|_| ShardLock(Mutex::new(Shard::new()))),
                log: Mutex::new(LogState { log, journal }),
                changes: broadcast::channel(CHANGES_BUFFERED).0,
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
            .lock_all()?
            .iter()
            .flat_map(|shard| shard.values())
            .map(|entry| entry.contenders.len())
            .sum())
    }

    /// Locks the event log, the same way as [`Self::lock`].
    /// Journals the token an acquisition issued, when there is a journal (the lease shard is
    /// locked: the log's lock is taken after it, never the other way round).
    /// Tells the subscribers (if any) that `lease_name` changed.
    fn announce(&self, lease_name: &LeaseName, kind: LeaseChangeKind) {
        // No subscriber is not an error: nobody is waiting.
        let _ = self.shared.changes.send(LeaseChange::Changed {
            lease_name: lease_name.clone(),
            kind,
        });
    }

    fn journal_token(&self, lease: &Lease) -> Result<(), EventStorageError> {
        let mut state = self.lock_log()?;
        let (log, journal) = state.parts();
        let Some(journal) = journal else {
            return Ok(());
        };
        let change = Change::TokenIssued {
            lease_name: lease.lease_name.as_str(),
            owner: lease.owner.as_str(),
            token: lease.fencing_token,
        };
        journal.record(change)?;
        log.apply(change)
    }

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

    /// Locks the shard that holds `lease_name`. No lock is ever held across an `.await`: every
    /// method locks, decides and unlocks synchronously.
    fn lock(&self, lease_name: &str) -> Result<MutexGuard<'_, Shard>, EventStorageError> {
        self.lock_shard(&self.shared.leases[shard_of(lease_name)].0)
    }

    /// Locks every shard, always in the same order (so that two callers cannot deadlock), for a
    /// consistent view of all leases.
    fn lock_all(&self) -> Result<Vec<MutexGuard<'_, Shard>>, EventStorageError> {
        self.shared
            .leases
            .iter()
            .map(|shard| self.lock_shard(&shard.0))
            .collect()
    }

    fn lock_shard<'a>(
        &self,
        shard: &'a Mutex<Shard>,
    ) -> Result<MutexGuard<'a, Shard>, EventStorageError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        // A panic while the lock was held cannot leave a half-applied decision behind: the
        // state is only written after the decision is made, so the data is still consistent.
        Ok(shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Makes `slot` equal to `new`. When the names are the same (a renewal, the common write), only
/// the other fields are copied, which spares the shared names' reference counts.
fn store_record(slot: &mut Option<Lease>, new: &Lease) {
    match slot {
        Some(old) if old.lease_name == new.lease_name && old.owner == new.owner => {
            // Exhaustive, so that a field added to `Lease` cannot be forgotten here.
            let Lease {
                lease_name: _,
                owner: _,
                priority,
                fencing_token,
                acquired_at,
                heartbeat_at,
                ttl,
                released_at,
            } = *new;
            old.priority = priority;
            old.fencing_token = fencing_token;
            old.acquired_at = acquired_at;
            old.heartbeat_at = heartbeat_at;
            old.ttl = ttl;
            old.released_at = released_at;
        }
        _ => *slot = Some(new.clone()),
    }
}

/// The number of lease shards.
const SHARDS: usize = 16;

/// Some of the leases, by name.
type Shard = BTreeMap<LeaseName, LeaseEntry>;

/// A shard's lock, alone on its cache lines, so that threads busy with leases of different
/// shards do not slow each other down by writing to one line.
#[derive(Debug)]
#[repr(align(128))]
struct ShardLock(Mutex<Shard>);

/// The shard of `lease_name`: FNV-1a over its bytes, stable across runs.
fn shard_of(lease_name: &str) -> usize {
    let hash = lease_name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (hash % SHARDS as u64) as usize
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
        Capabilities::from([
            Capability::Lease,
            Capability::Events,
            Capability::Bookmarks,
            Capability::LeaseChanges,
            Capability::FencedBookmarks,
        ])
    }

    fn lease_changes(&self) -> Result<Box<dyn LeaseChanges>, EventStorageError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EventStorageError::Closed);
        }
        Ok(Box::new(Subscription(self.shared.changes.subscribe())))
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        // The same checks, in the same order, as `LeaseRequest::validate`; the validated names
        // are the ones this storage already keeps, when it knows them.
        let ttl = request.check()?;
        let mut leases = self.lock(&request.lease_name)?;
        let now = self.shared.clock.now();
        let issued = |lease: &Lease| self.journal_token(lease);
        let (response, change) = match leases.get_mut(request.lease_name.as_str()) {
            Some(entry) => entry.decide_request(request, ttl, now, issued)?,
            None => {
                let first = request.validate()?;
                leases
                    .entry(first.lease_name.clone())
                    .or_insert_with(|| LeaseEntry::new(first))
                    .decide_request(request, ttl, now, issued)?
            }
        };
        if let Some(kind) = change {
            self.announce(&response.lease.lease_name, kind);
        }
        Ok(response)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let owner = Owner::new(owner)?;
        let mut leases = self.lock(lease_name.as_str())?;
        let now = self.shared.clock.now();
        let Some(entry) = leases.get_mut(&lease_name) else {
            return Ok(());
        };
        let outcome = domain::decide_release(entry.record.as_ref(), &lease_name, &owner, now)?;
        if let Some(updated) = outcome.updated {
            entry.record = Some(updated);
            self.announce(&lease_name, LeaseChangeKind::Released);
        }
        entry.contenders.retain(|c| c.owner != outcome.withdrawn);
        if entry.record.is_none() && entry.contenders.is_empty() {
            leases.remove(&lease_name);
        }
        Ok(())
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        let shards = self.lock_all()?;
        let now = self.shared.clock.now();
        let mut leases: Vec<Lease> = shards
            .iter()
            .flat_map(|shard| shard.values())
            .filter_map(|entry| entry.record.clone())
            .collect();
        leases.sort_by(|a, b| a.lease_name.cmp(&b.lease_name));
        Ok(LeaseSnapshot { now, leases })
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        let lease_name = LeaseName::new(lease_name)?;
        let leases = self.lock(lease_name.as_str())?;
        let now = self.shared.clock.now();
        let mut live: Vec<Contender> = leases
            .get(&lease_name)
            .map(|entry| {
                entry
                    .contenders
                    .iter()
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

    async fn bookmark_fenced(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
    ) -> Result<Bookmark, EventStorageError> {
        // The lease's lock, then the log's (the order of every other path): no acquisition of
        // the lease comes between reading its token and writing the bookmark.
        let leases = self.lock(fence.lease_name.as_str())?;
        let lease_token = leases
            .get(&fence.lease_name)
            .and_then(|entry| entry.record.as_ref())
            .map(|record| record.fencing_token);
        let mut state = self.lock_log()?;
        let now = self.shared.clock.now();
        let (log, journal) = state.parts();
        let placed = log.bookmark_fenced(reader, position, tags, fence, lease_token, now, journal);
        drop(state);
        drop(leases);
        placed
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
