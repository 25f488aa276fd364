//! What a processor hands its projection: one batch of events, and the tenure it is projected
//! under.

use std::future::Future;

use tenure_ports::{EventPosition, FencingToken, StoredEvent};

use crate::lease::LeaderLease;

/// What a [`Processor`](crate::Processor) does with each batch of events.
///
/// `project` is called with one [`Batch`] at a time, in log order, only while this process
/// holds the lease. Return `Ok(())` once the batch's effects are done: the processor then
/// moves the bookmark past the batch. Return an error to stop the processor with
/// [`ProcessorError::Projection`](crate::ProcessorError::Projection); the bookmark stays
/// where it was, so that the batch is projected again when the processor runs again.
///
/// # Delivery: at least once
///
/// A batch is projected again when its bookmark was not written: the process crashed, or
/// its tenure ended, between the projection and the bookmark. Make the effects idempotent,
/// or keep the position in the projection's own store, written in the same transaction as
/// the effects and fenced by [`Batch::token`], which makes them exactly once (see
/// [`Processor`](crate::Processor), "Exactly once").
///
/// # Cancel safety
///
/// When the tenure ends during `project` (the lease lapsed, was taken over, or the elector
/// stopped), the processor drops the returned future at its next `.await`: the projection is
/// **cancelled**, not run to its end, so that no two processes ever project at once. Work
/// between two `.await`s is not interrupted: a long computation should check
/// [`Batch::is_valid`] (or await something) now and then, and every effect that must not
/// happen twice should be checked with [`Batch::is_valid`] right before it and stamped with
/// [`Batch::token`] for the receiving side to fence.
///
/// # Closures
///
/// Any `FnMut(Batch) -> impl Future<Output = Result<(), E>>` is a projection, so that simple
/// cases need no type of their own:
///
/// ```
/// use tenure_election::{Batch, Projection};
/// fn check(_: impl Projection) {}
/// check(|batch: Batch| async move {
///     for event in batch.events() {
///         println!("{} at token {}", event.position, batch.token());
///     }
///     Ok::<(), std::io::Error>(())
/// });
/// ```
pub trait Projection: Send {
    /// What a failed projection says. It is returned to the caller of
    /// [`Processor::run`](crate::Processor::run), wrapped in
    /// [`ProcessorError::Projection`](crate::ProcessorError::Projection).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Projects one batch. See the trait's documentation for what is expected.
    fn project(&mut self, batch: Batch) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

impl<F, Fut, E> Projection for F
where
    F: FnMut(Batch) -> Fut + Send,
    Fut: Future<Output = Result<(), E>> + Send,
    E: std::error::Error + Send + Sync + 'static,
{
    type Error = E;

    fn project(&mut self, batch: Batch) -> impl Future<Output = Result<(), E>> + Send {
        self(batch)
    }
}

/// One batch of events, handed to a [`Projection`] with the tenure it is projected under.
///
/// It is never empty. Its events match the processor's query and follow each other in log
/// order, directly after [`after`](Self::after) (the bookmark the batch was read from).
#[derive(Clone, Debug)]
pub struct Batch {
    events: Vec<StoredEvent>,
    first: EventPosition,
    last: EventPosition,
    after: Option<EventPosition>,
    lease: LeaderLease,
}

impl Batch {
    /// A batch of `events`, or `None` if there are none.
    pub(crate) fn new(
        events: Vec<StoredEvent>,
        after: Option<EventPosition>,
        lease: LeaderLease,
    ) -> Option<Batch> {
        let first = events.first()?.position;
        let last = events.last()?.position;
        Some(Batch {
            events,
            first,
            last,
            after,
            lease,
        })
    }

    /// The events, oldest first.
    pub fn events(&self) -> &[StoredEvent] {
        &self.events
    }

    /// The events, taken out of the batch.
    pub fn into_events(self) -> Vec<StoredEvent> {
        self.events
    }

    /// How many events the batch has (at least one).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Always `false`: a batch has at least one event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The position of the first event.
    pub fn first_position(&self) -> EventPosition {
        self.first
    }

    /// The position of the last event: where the bookmark goes once the batch is projected.
    pub fn last_position(&self) -> EventPosition {
        self.last
    }

    /// The bookmark the batch was read after (`None`: from the beginning of the log).
    pub fn after(&self) -> Option<EventPosition> {
        self.after
    }

    /// The fencing token of the tenure the batch is projected under: stamp every effect
    /// with it.
    pub fn token(&self) -> FencingToken {
        self.lease.token()
    }

    /// Whether the tenure still holds. Check it right before an effect that must not happen
    /// twice.
    pub fn is_valid(&self) -> bool {
        self.lease.is_valid()
    }

    /// The tenure itself: its lease name, owner, deadline, and the signals of its end.
    pub fn lease(&self) -> &LeaderLease {
        &self.lease
    }
}
