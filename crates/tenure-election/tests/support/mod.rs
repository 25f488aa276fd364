//! Test support: an in-memory storage whose clock is tokio's (so paused time moves the
//! storage's clock too), wrapped per contender to fail, hang or slow down on demand, with a
//! log of every call and a timeline of every bookmark written (and of whatever a test's
//! projections record in it: see `processing`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod processing;

use tenure_election::{ElectorConfig, LeaderElector, LeadershipState};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{
    AppendRequest, Bookmark, Capabilities, Capability, Clock, Contender, EventPosition, EventQuery,
    EventStorage, EventStorageError, Fence, LeaseRequest, LeaseResponse, LeaseSnapshot,
    LeaseStatus, ReadOptions, StoredEvent, Timestamp, async_trait,
};
use tokio::time::Instant;

use processing::{Mark, Timeline};

/// The storage clock of a paused-time test: a fixed base plus tokio's elapsed time.
#[derive(Debug)]
pub struct TokioClock {
    origin: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.origin.elapsed().as_micros()).unwrap();
        Timestamp::from_micros(1_767_225_600_000_000 + elapsed)
    }
}

/// What a contender's storage handle does to its calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    /// Pass calls through.
    None,
    /// Fail every call with `Unavailable`.
    Fail,
    /// Never answer.
    Hang,
    /// Answer after this long.
    Slow(Duration),
}

/// One call seen by a handle.
#[derive(Clone, Debug)]
pub struct Call {
    pub owner: String,
    pub kind: &'static str,
    pub sent: Instant,
    /// The status answered, or `None` for an error or a call that never answered.
    pub status: Option<LeaseStatus>,
}

/// One shared in-memory storage on tokio's clock, and a log of every call to it.
#[derive(Clone, Debug)]
pub struct Backend {
    pub memory: MemoryEventStorage,
    pub origin: Instant,
    /// Every bookmark written through a handle, in order, among what projections record.
    pub timeline: Timeline,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Backend {
    pub fn new() -> Self {
        let origin = Instant::now();
        Backend {
            memory: MemoryEventStorage::with_clock(Arc::new(TokioClock { origin })),
            origin,
            timeline: Timeline::default(),
            calls: Arc::default(),
        }
    }

    /// A handle for one contender, with its own fault switch.
    pub fn handle(&self) -> Faulty {
        self.labelled("")
    }

    /// A handle whose bookmark writes are recorded as made by `label`.
    pub fn labelled(&self, label: &str) -> Faulty {
        Faulty {
            backend: self.clone(),
            label: label.to_owned(),
            fault: Arc::new(Mutex::new(Fault::None)),
        }
    }

    /// Starts an elector on a fresh handle.
    pub fn elector(&self, config: ElectorConfig) -> (LeaderElector, Faulty) {
        let handle = self.handle();
        let elector = LeaderElector::start(Arc::new(handle.clone()), config).unwrap();
        (elector, handle)
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls of `owner` of `kind` (`request` or `release`).
    pub fn calls_of(&self, owner: &str, kind: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.owner == owner && c.kind == kind)
            .collect()
    }

    /// When `owner` last sent a request that was confirmed as holding the lease.
    pub fn last_confirmed_send(&self, owner: &str) -> Instant {
        self.calls_of(owner, "request")
            .into_iter()
            .filter(|c| c.status.is_some_and(LeaseStatus::holds_lease))
            .map(|c| c.sent)
            .next_back()
            .expect("a confirmed request")
    }

    fn record(&self, call: Call) -> usize {
        let mut calls = self.calls.lock().unwrap();
        calls.push(call);
        calls.len() - 1
    }

    fn answered(&self, index: usize, status: LeaseStatus) {
        self.calls.lock().unwrap()[index].status = Some(status);
    }
}

/// A contender's handle on the shared storage.
#[derive(Clone, Debug)]
pub struct Faulty {
    backend: Backend,
    label: String,
    fault: Arc<Mutex<Fault>>,
}

impl Faulty {
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    async fn inject(&self) -> Result<(), EventStorageError> {
        let fault = *self.fault.lock().unwrap();
        match fault {
            Fault::None => Ok(()),
            Fault::Fail => Err(EventStorageError::unavailable("injected failure")),
            Fault::Hang => std::future::pending().await,
            Fault::Slow(by) => {
                tokio::time::sleep(by).await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl EventStorage for Faulty {
    fn name(&self) -> &str {
        "faulty-memory"
    }

    fn capabilities(&self) -> Capabilities {
        // Lease changes are not passed on: these tests judge the poll-driven elector, on
        // paused time. Every other capability is, faults and all.
        self.backend
            .memory
            .capabilities()
            .without(Capability::LeaseChanges)
    }

    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let index = self.backend.record(Call {
            owner: request.owner.clone(),
            kind: "request",
            sent: Instant::now(),
            status: None,
        });
        self.inject().await?;
        let response = self.backend.memory.request_lease(request).await?;
        self.backend.answered(index, response.status);
        if response.status == LeaseStatus::LeaderStepDownRequested {
            // Placed before the elector learns of it: nothing it does in reaction comes first.
            self.backend
                .timeline
                .push(Mark::StepDownRequested(request.owner.clone()));
        }
        Ok(response)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        self.backend.record(Call {
            owner: owner.to_owned(),
            kind: "release",
            sent: Instant::now(),
            status: None,
        });
        self.inject().await?;
        self.backend.memory.release_lease(lease_name, owner).await
    }

    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        self.backend.memory.get_leases().await
    }

    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        self.backend.memory.get_lease_contenders(lease_name).await
    }

    async fn append(&self, request: &AppendRequest) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.inject().await?;
        self.backend.memory.append(request).await
    }

    async fn read_events(
        &self,
        query: &EventQuery,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.inject().await?;
        self.backend.memory.read_events(query, options).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
    ) -> Result<Bookmark, EventStorageError> {
        self.inject().await?;
        let bookmark = self.backend.memory.bookmark(reader, position, tags).await?;
        self.backend.timeline.push(Mark::Bookmarked {
            by: self.label.clone(),
            position: position.get(),
        });
        Ok(bookmark)
    }

    async fn bookmark_fenced(
        &self,
        reader: &str,
        position: EventPosition,
        tags: &[String],
        fence: &Fence,
    ) -> Result<Bookmark, EventStorageError> {
        self.inject().await?;
        let bookmark = self
            .backend
            .memory
            .bookmark_fenced(reader, position, tags, fence)
            .await?;
        self.backend.timeline.push(Mark::Bookmarked {
            by: self.label.clone(),
            position: position.get(),
        });
        Ok(bookmark)
    }

    async fn get_bookmark(&self, reader: &str) -> Result<Option<Bookmark>, EventStorageError> {
        self.inject().await?;
        self.backend.memory.get_bookmark(reader).await
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `elector`'s state satisfies `pred`; returns when that happened.
pub async fn wait_until(
    elector: &LeaderElector,
    pred: impl FnMut(&LeadershipState) -> bool,
) -> Instant {
    let mut state = elector.subscribe();
    state.wait_for(pred).await.expect("the elector is running");
    Instant::now()
}

/// Waits until `elector` leads; returns its token and when.
pub async fn wait_for_leader(elector: &LeaderElector) -> (u64, Instant) {
    let at = wait_until(elector, LeadershipState::is_leader).await;
    (elector.state().leader_token().unwrap().get(), at)
}
