//! Processor test support: a timeline of what projections and bookmark writes did, in the
//! order they did it; a projection that records itself on it; and checks over it.
//!
//! The tests run on tokio's current-thread runtime in paused time, so many things happen at
//! the same `Instant`: the timeline's order (a mutex taken by every mark) is the order that
//! counts, and the instants are kept for timing assertions only.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tenure_election::{
    Batch, ElectorConfig, FencingGuard, LeaderElector, Processor, ProcessorConfig, ProcessorError,
    Projection, StaleToken,
};
use tenure_memory::MemoryEventStorage;
use tenure_ports::{AppendRequest, EventStorage, MAX_APPEND_EVENTS, NewEvent};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

use super::{Backend, Faulty, ms};

/// One thing that happened.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Mark {
    /// `by`'s projection started a batch under `token`. `holder`, `holder_token` and `live`
    /// are the storage's lease record at that moment.
    Started {
        by: String,
        token: u64,
        first: u64,
        last: u64,
        holder: String,
        holder_token: u64,
        live: bool,
    },
    /// `by`'s projection ended; `completed` is false when it was dropped (cancelled).
    Finished {
        by: String,
        token: u64,
        completed: bool,
    },
    /// A bookmark was written through `by`'s storage handle.
    Bookmarked { by: String, position: u64 },
    /// The storage answered `LeaderStepDownRequested` to this owner's request.
    StepDownRequested(String),
    /// Whatever a test wants to place among the rest.
    Note(String),
}

/// Marks in the order they happened, with the (paused) instant of each.
#[derive(Clone, Default, Debug)]
pub struct Timeline(Arc<Mutex<Vec<(Instant, Mark)>>>);

impl Timeline {
    pub fn push(&self, mark: Mark) {
        self.0.lock().unwrap().push((Instant::now(), mark));
    }

    pub fn marks(&self) -> Vec<(Instant, Mark)> {
        self.0.lock().unwrap().clone()
    }

    /// Every bookmark written: (by, position), in order.
    pub fn bookmarks(&self) -> Vec<(String, u64)> {
        self.marks()
            .into_iter()
            .filter_map(|(_, m)| match m {
                Mark::Bookmarked { by, position } => Some((by, position)),
                _ => None,
            })
            .collect()
    }

    /// Every batch started: (by, token, first, last), in order.
    pub fn batches(&self) -> Vec<(String, u64, u64, u64)> {
        self.marks()
            .into_iter()
            .filter_map(|(_, m)| match m {
                Mark::Started {
                    by,
                    token,
                    first,
                    last,
                    ..
                } => Some((by, token, first, last)),
                _ => None,
            })
            .collect()
    }

    /// The index of the first mark satisfying `pred`.
    pub fn index_of(&self, pred: impl Fn(&Mark) -> bool) -> Option<usize> {
        self.marks().iter().position(|(_, m)| pred(m))
    }

    /// Checks that at no moment did two processors project: every start is followed by the
    /// same processor's end before anyone starts again; that each projection started while
    /// its processor held the live lease with its token; and that tokens never go backwards.
    /// Returns the number of projections checked.
    pub fn assert_one_projector_at_a_time(&self) -> usize {
        let mut open: Option<(String, u64)> = None;
        let mut last_token = 0;
        let mut count = 0;
        for (at, mark) in self.marks() {
            match mark {
                Mark::Started {
                    by,
                    token,
                    first,
                    holder,
                    holder_token,
                    live,
                    ..
                } => {
                    assert!(
                        open.is_none(),
                        "{by} started {first} at {at:?} while {open:?} was projecting"
                    );
                    assert!(
                        live && holder == by && holder_token == token,
                        "{by} projected {first} with token {token}, but the storage says \
                         {holder} holds token {holder_token} (live: {live})"
                    );
                    assert!(token >= last_token, "tokens went backwards");
                    last_token = token;
                    open = Some((by, token));
                    count += 1;
                }
                Mark::Finished { by, token, .. } => {
                    assert_eq!(open.take(), Some((by, token)), "an end without its start");
                }
                Mark::Bookmarked { .. } | Mark::StepDownRequested(_) | Mark::Note(_) => {}
            }
        }
        count
    }

    /// Checks that every bookmark written lies beyond the one before.
    pub fn assert_bookmarks_move_forwards(&self) {
        let bookmarks = self.bookmarks();
        for pair in bookmarks.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "the bookmark moved backwards: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}

/// One effect of a projection: an event's position, by whom and under which token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Effect {
    pub position: u64,
    pub token: u64,
}

/// The effects every projection made, in order: the "downstream system".
#[derive(Clone, Default, Debug)]
pub struct Effects(Arc<Mutex<Vec<Effect>>>);

impl Effects {
    pub fn all(&self) -> Vec<Effect> {
        self.0.lock().unwrap().clone()
    }

    /// How many times each position was projected.
    pub fn counts(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for effect in self.all() {
            *counts.entry(effect.position).or_default() += 1;
        }
        counts
    }

    pub fn contains(&self, position: u64) -> bool {
        self.all().iter().any(|e| e.position == position)
    }

    pub fn push_all(&self, effects: impl IntoIterator<Item = Effect>) {
        self.0.lock().unwrap().extend(effects);
    }
}

/// A projection that records itself on the backend's timeline, checks the storage's lease
/// record as it starts, takes `work` to project a batch, and writes its effects through a
/// fencing guard shared by every replica (the downstream's fence).
#[derive(Clone, Debug)]
pub struct Recorder {
    pub name: String,
    pub lease: String,
    pub backend: Backend,
    pub fence: Arc<FencingGuard>,
    pub effects: Effects,
    pub work: Duration,
    /// After writing the effects of the batch holding this position, hang forever: a
    /// process that is about to crash between its projection and its bookmark.
    pub hang_after: Option<u64>,
}

impl Recorder {
    pub fn new(
        name: &str,
        lease: &str,
        backend: &Backend,
        fence: &Arc<FencingGuard>,
        effects: &Effects,
    ) -> Self {
        Recorder {
            name: name.to_owned(),
            lease: lease.to_owned(),
            backend: backend.clone(),
            fence: Arc::clone(fence),
            effects: effects.clone(),
            work: ms(5),
            hang_after: None,
        }
    }
}

/// Records the end of a projection, also when it is dropped before finishing.
struct Finish {
    timeline: Timeline,
    by: String,
    token: u64,
    completed: bool,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.timeline.push(Mark::Finished {
            by: self.by.clone(),
            token: self.token,
            completed: self.completed,
        });
    }
}

impl Projection for Recorder {
    type Error = StaleToken;

    async fn project(&mut self, batch: Batch) -> Result<(), StaleToken> {
        let token = batch.token().get();
        let snapshot = self.backend.memory.get_leases().await.unwrap();
        let record = snapshot.get(&self.lease).unwrap();
        self.backend.timeline.push(Mark::Started {
            by: self.name.clone(),
            token,
            first: batch.first_position().get(),
            last: batch.last_position().get(),
            holder: record.owner.to_string(),
            holder_token: record.fencing_token.get(),
            live: record.is_live_at(snapshot.now),
        });
        let mut finish = Finish {
            timeline: self.backend.timeline.clone(),
            by: self.name.clone(),
            token,
            completed: false,
        };
        sleep(self.work).await;
        let effects = batch.events().iter().map(|e| Effect {
            position: e.position.get(),
            token,
        });
        self.fence.admit_with(&self.lease, batch.token(), || {
            self.effects.push_all(effects)
        })?;
        if self.hang_after.is_some_and(|p| {
            (batch.first_position().get()..=batch.last_position().get()).contains(&p)
        }) {
            std::future::pending::<()>().await;
        }
        finish.completed = true;
        Ok(())
    }
}

/// One replica: an elector and a processor in a task of its own.
pub struct Replica {
    pub name: String,
    pub elector: LeaderElector,
    /// The elector's storage handle (lease calls).
    pub lease_handle: Faulty,
    /// The processor's storage handle (events and bookmarks).
    pub storage_handle: Faulty,
    pub task: JoinHandle<Result<Infallible, ProcessorError<StaleToken>>>,
}

impl Replica {
    /// Starts a replica projecting with `projection` under `elector_config`.
    pub fn start<P>(
        backend: &Backend,
        name: &str,
        elector_config: ElectorConfig,
        config: ProcessorConfig,
        projection: P,
    ) -> Replica
    where
        P: Projection<Error = StaleToken> + 'static,
    {
        let (elector, lease_handle) = backend.elector(elector_config.with_owner(name));
        let storage_handle = backend.labelled(name);
        let mut processor = Processor::new(
            Arc::new(storage_handle.clone()),
            elector.clone(),
            config,
            projection,
        )
        .unwrap();
        let task = tokio::spawn(async move { processor.run().await });
        Replica {
            name: name.to_owned(),
            elector,
            lease_handle,
            storage_handle,
            task,
        }
    }

    /// Dies as a crash would: the processor's task and the elector stop at the same instant,
    /// nothing is released, no bookmark is written.
    pub fn crash(&self) {
        self.task.abort();
        self.elector.abort();
    }
}

/// Appends `n` events, `order-<i>` / `OrderPlaced`, in as few appends as allowed.
pub async fn append_orders(storage: &MemoryEventStorage, from: usize, n: usize) {
    let events: Vec<NewEvent> = (from..from + n)
        .map(|i| NewEvent::new(format!("order-{i}"), "OrderPlaced", json!({ "n": i })))
        .collect();
    for chunk in events.chunks(MAX_APPEND_EVENTS) {
        storage
            .append(&AppendRequest::new(chunk.to_vec()))
            .await
            .unwrap();
    }
}

/// The position `reader`'s bookmark is at (0: none).
pub async fn bookmark_of(storage: &MemoryEventStorage, reader: &str) -> u64 {
    storage
        .get_bookmark(reader)
        .await
        .unwrap()
        .map_or(0, |b| b.position.get())
}

/// Waits (in paused time, 1 ms at a time, at most `limit`) until `pred` holds.
pub async fn eventually(limit: Duration, mut pred: impl AsyncFnMut() -> bool) -> Instant {
    let give_up = Instant::now() + limit;
    loop {
        if pred().await {
            return Instant::now();
        }
        assert!(Instant::now() < give_up, "gave up waiting after {limit:?}");
        sleep(ms(1)).await;
    }
}

/// The `tracing` events of this thread (a paused-time test runs on one), each as its fields
/// by name, with the message under `message`.
#[derive(Clone, Default, Debug)]
pub struct Captured(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl Captured {
    /// Captures this thread's events until the guard is dropped.
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.clone())
    }

    /// The events whose `action` field is `action`.
    pub fn with_action(&self, action: &str) -> Vec<BTreeMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.get("action").is_some_and(|a| a == action))
            .cloned()
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = BTreeMap::new();
        fields.insert("level".to_owned(), event.metadata().level().to_string());
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(fields);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// The lease every processor test contends for.
pub const LEASE: &str = "order-dispatcher";

/// ttl 300 ms: poll 100 ms, call timeout 50 ms, safety margin 3 ms.
pub fn elector_config() -> ElectorConfig {
    ElectorConfig::new(LEASE, super::ms(300))
}

/// Batches of 100, an idle poll of 20 ms.
pub fn processor_config() -> ProcessorConfig {
    ProcessorConfig::new(LEASE)
        .with_batch_size(100)
        .with_idle_poll(super::ms(20))
}
