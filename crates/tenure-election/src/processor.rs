//! The lease-driven processor: the lease decides who processes, the bookmark decides from
//! where, the event log is what is processed.

mod config;
mod error;
mod projection;
mod stop;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tenure_ports::{Capability, EventPosition, EventStorage, EventStorageError, Fence};
use tokio::time::sleep;
use tracing::{debug, info, trace, warn};

use crate::elector::LeaderElector;
use crate::error::ElectorError;
use crate::lease::LeaderLease;
use crate::{metrics, observe};
use stop::Stop;

pub use config::{
    DEFAULT_BATCH_SIZE, DEFAULT_CALL_TIMEOUT, DEFAULT_IDLE_POLL, ProcessorConfig,
    ProcessorConfigError,
};
pub use error::ProcessorError;
pub use projection::{Batch, Projection};

/// Projects the event log, batch by batch, only while its [`LeaderElector`] holds the lease,
/// resuming from the bookmark the previous holder left.
///
/// Every replica of a service runs one, with the same lease and the same reader; the elector
/// decides which one works. Whenever its elector becomes leader (the elector polls the lease
/// every ttl/3, so this is the guide's `tick`), the processor:
///
/// 1. **reads the bookmark**: after winning, every time, never cached from start-up, since the
///    previous holder moved it;
/// 2. **reads the next batch** of events matching the query after it (at most the batch size);
/// 3. **projects it**: calls the [`Projection`] with the [`Batch`], which carries the fencing
///    token to stamp effects with;
/// 4. **checks that the tenure still holds, then moves the bookmark** to the batch's last
///    event, and goes on with the next batch at once, or after the idle poll once it has
///    caught up;
/// 5. on a **step-down request**, finishes the batch in progress (projection and bookmark),
///    then **releases** the lease, so that the contender that asked takes over at its next
///    request.
///
/// It **stops processing the moment leadership lapses**: between batches it starts nothing
/// more, and a projection in progress is **cancelled** (dropped at its next `.await`, see
/// [`Projection`]); no bookmark is written after the tenure ended, since validity is checked
/// right before the write. When the elector leads again, everything starts again from step 1.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use tenure_election::{Batch, ElectorConfig, LeaderElector, Processor, ProcessorConfig};
/// use tenure_memory::MemoryEventStorage;
/// use tenure_ports::{AppendRequest, EventStorage, NewEvent};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let storage = Arc::new(MemoryEventStorage::new());
/// let orders = (1..=3).map(|n| NewEvent::new(format!("order-{n}"), "OrderPlaced", json!({})));
/// storage.append(&AppendRequest::new(orders.collect())).await?;
///
/// let elector = LeaderElector::start(
///     storage.clone(),
///     ElectorConfig::new("order-dispatcher", Duration::from_secs(3)).with_owner("pod-a"),
/// )?;
/// let (progress, mut dispatched) = tokio::sync::watch::channel(0);
/// let dispatch = move |batch: Batch| {
///     let progress = progress.clone();
///     async move {
///         for event in batch.events() {
///             // publish(event, batch.token()): the receiving side fences on the token
///         }
///         progress.send_modify(|n| *n += batch.len());
///         Ok::<(), std::io::Error>(())
///     }
/// };
/// let config = ProcessorConfig::new("order-dispatcher").with_batch_size(100);
/// let mut processor = Processor::new(storage.clone(), elector.clone(), config, dispatch)?;
///
/// // Run until the three orders are dispatched: the batch is finished and bookmarked first.
/// processor
///     .run_until(async move {
///         let _ = dispatched.wait_for(|n| *n == 3).await;
///     })
///     .await?;
/// let bookmark = storage.get_bookmark("order-dispatcher").await?;
/// assert_eq!(bookmark.map(|b| b.position.get()), Some(3));
/// elector.shutdown().await?; // hands the lease over at once
/// # Ok(())
/// # }
/// ```
///
/// # Delivery: at least once
///
/// The bookmark is written *after* the projection. A process that crashes between the two,
/// or whose tenure ends between them, leaves the bookmark before the batch, and the next
/// holder projects that batch again. A batch is never skipped, and the bookmark never passes
/// an event that was not projected; but a batch may be projected twice, once per tenure, and
/// the lease cannot change that: the guide says so too ("the lease does not make processing
/// exactly-once"). Bounding it: at most one batch per change of holder.
///
/// # Exactly once against the projection's own store
///
/// Where effects must happen once, the projection keeps **its own position in its own
/// store, written atomically with its effects, and fenced by the token**:
///
/// 1. in one transaction of the projection's store: refuse the write if a higher token has
///    written (the fence), read the projection's own position, apply the effects of only the
///    events after it, and store the batch's last position as the new own position;
/// 2. commit; only then does the processor move the bookmark, which has become a hint of
///    where to start reading, no longer the truth.
///
/// A re-delivered batch then finds its events at or below the own position and applies
/// nothing; a zombie (a holder paused past its ttl) finds a higher token and is refused.
/// In memory, with [`FencingGuard::admit_with`](crate::FencingGuard::admit_with) as the
/// transaction:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use tenure_election::{Batch, FencingGuard, Projection, StaleToken};
/// use tenure_ports::EventPosition;
///
/// /// The projection's own store: its effects and its position, changed together.
/// #[derive(Default)]
/// struct Ledger {
///     fence: FencingGuard,
///     state: Mutex<(Option<EventPosition>, Vec<u64>)>, // (own position, effects)
/// }
///
/// struct ExactlyOnce(Arc<Ledger>);
///
/// impl Projection for ExactlyOnce {
///     type Error = StaleToken;
///
///     async fn project(&mut self, batch: Batch) -> Result<(), StaleToken> {
///         let ledger = &self.0;
///         // Fence and write in one step: a superseded tenure writes nothing.
///         ledger.fence.admit_with(batch.lease().lease_name().as_str(), batch.token(), || {
///             let mut state = ledger.state.lock().unwrap_or_else(|e| e.into_inner());
///             let (own_position, effects) = &mut *state;
///             for event in batch.events() {
///                 if Some(event.position) > *own_position {
///                     effects.push(event.position.get()); // the effect
///                 }
///             }
///             *own_position = (*own_position).max(Some(batch.last_position()));
///         })
///     }
/// }
/// ```
///
/// In PostgreSQL, the same as one transaction (see [`FencingGuard`](crate::FencingGuard) for
/// the fence table):
///
/// ```sql
/// BEGIN;
/// -- 0 rows: a newer tenure has written; ROLLBACK
/// INSERT INTO lease_fences AS f (lease_name, fencing_token) VALUES ($lease, $token)
/// ON CONFLICT (lease_name) DO UPDATE SET fencing_token = EXCLUDED.fencing_token
///  WHERE f.fencing_token <= EXCLUDED.fencing_token;
/// SELECT position FROM projection_positions WHERE reader = $reader FOR UPDATE;
/// -- apply the effects of the batch's events after that position only, then:
/// UPDATE projection_positions SET position = $last WHERE reader = $reader;
/// COMMIT;
/// ```
///
/// # Cancel safety
///
/// [`run`](Self::run) and [`run_until`](Self::run_until) may be dropped at any `.await`:
/// a projection in progress is dropped with them and its batch is not bookmarked (projected
/// again later, as after a crash); a bookmark write in flight may or may not land. The
/// elector keeps campaigning and holding the lease: drop the processor's future first, then
/// [`shutdown`](LeaderElector::shutdown) the elector to hand over at once. To stop between
/// batches instead, use [`run_until`](Self::run_until).
///
/// # Events
///
/// `tracing` events carry `lease`, `owner`, `token` and `reader`, and an `action`:
///
/// | `action` | level | when | also |
/// |---|---|---|---|
/// | `resumed` | info | a tenure starts (or restarts after an unconfirmed call) from the bookmark | `position` |
/// | `projected` | debug | a batch was projected | `first`, `last`, `count` |
/// | `bookmarked` | debug | the bookmark moved | `position` |
/// | `caught_up` | debug | a read found fewer events than a batch | `position` |
/// | `stepping_down` | info | a step-down was requested: the batch in progress is done, the lease is released next | `position` (the tenure's last bookmark) |
/// | `stopped` | info | the tenure ended (`reason`: `lost`, `step_down`) or [`run_until`](Self::run_until)'s signal fired (`stop_signal`) | `reason`, `position` |
/// | `cancelled` | warn | the tenure ended during a projection: it was dropped | `first`, `last` |
/// | `not_bookmarked` | warn | the tenure ended after a projection, before its bookmark | `first`, `last` |
/// | `retrying` | warn | a storage call was not confirmed: retried after the idle poll | `operation`, `error` |
/// | `fenced` | warn | the storage refused the bookmark write: a newer tenure wrote it or holds the lease; the tenure ends | `operation`, `error` |
/// | `failed` | warn | the projection failed; [`run`](Self::run) returns its error | `first`, `last`, `error` |
///
/// # Limits
///
/// * Bookmark writes are fenced by the tenure's token on a storage with
///   [`Capability::FencedBookmarks`] (memory, file): a late write of a superseded tenure is
///   refused (the `fenced` event) and ends the tenure like a lost lease, so the bookmark never
///   moves backwards. On other storages (PostgreSQL, for now) they are not: the processor
///   checks validity right before writing and bounds the write by the tenure's deadline, but
///   a backend that commits a write after its caller gave up on it could land an old holder's
///   bookmark after the new holder's. The exactly-once recipe above does not depend on the
///   bookmark and is immune to that.
/// * A projection is cancelled at its next `.await`; synchronous work between two `.await`s
///   runs to its end (check [`Batch::is_valid`]).
pub struct Processor<P> {
    core: Core,
    projection: P,
}

/// Everything but the projection, so that the processor's future is `Send` with a projection
/// that is only `Send`.
struct Core {
    storage: Arc<dyn EventStorage>,
    elector: LeaderElector,
    config: ProcessorConfig,
    /// Whether the storage fences bookmark writes ([`Capability::FencedBookmarks`]).
    fenced_bookmarks: bool,
}

/// How a tenure ended, as far as the processor is concerned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TenureEnd {
    /// Leadership lapsed, was taken over, or the elector stopped.
    Lost,
    /// A step-down was requested and the batch in progress is done.
    StepDown,
    /// The stop signal of [`Processor::run_until`] fired.
    Stopped,
    /// The storage refused a bookmark write of this tenure: a newer one exists, whether the
    /// elector has heard of it yet or not.
    Fenced,
}

impl TenureEnd {
    fn as_str(self) -> &'static str {
        match self {
            TenureEnd::Lost => "lost",
            TenureEnd::StepDown => "step_down",
            TenureEnd::Stopped => "stop_signal",
            TenureEnd::Fenced => "fenced",
        }
    }
}

/// How one storage call ended.
enum Outcome<T> {
    Done(T),
    /// Not confirmed (unavailable or timed out).
    Unconfirmed,
    /// The tenure ended during the call.
    Ended,
    /// The storage refused the call's write: a newer tenure exists.
    Fenced,
}

/// How one pass (from reading the bookmark on) ended.
enum Pass {
    /// The tenure is over.
    End(TenureEnd),
    /// A storage call was not confirmed: pause, then read the bookmark again, since a
    /// bookmark write may or may not have landed.
    Unconfirmed,
}

impl<T> Outcome<T> {
    /// The call's value, or how the pass ends without it.
    fn done(self) -> Result<T, Pass> {
        match self {
            Outcome::Done(value) => Ok(value),
            Outcome::Unconfirmed => Err(Pass::Unconfirmed),
            Outcome::Ended => Err(Pass::End(TenureEnd::Lost)),
            Outcome::Fenced => Err(Pass::End(TenureEnd::Fenced)),
        }
    }
}

/// A `tracing` event with the fields every processor event carries.
macro_rules! emit {
    ($level:ident, $lease:expr, $reader:expr, $($rest:tt)+) => {
        $level!(
            lease = %$lease.lease_name(), owner = %$lease.owner(), token = $lease.token().get(),
            reader = $reader, $($rest)+
        )
    };
}

impl<P: Projection> Processor<P> {
    /// A processor that projects with `projection` while `elector` holds its lease, reading
    /// and bookmarking on `storage` as `config` says. `storage` is usually the one the
    /// elector runs on. Nothing runs until [`run`](Self::run) or
    /// [`run_until`](Self::run_until).
    ///
    /// # Errors
    ///
    /// [`ProcessorConfigError`] for a setting the storage would refuse, or a storage that
    /// lacks the event log or bookmarks.
    pub fn new(
        storage: Arc<dyn EventStorage>,
        elector: LeaderElector,
        config: ProcessorConfig,
        projection: P,
    ) -> Result<Self, ProcessorConfigError> {
        config.validate()?;
        let capabilities = storage.capabilities();
        for needed in [Capability::Events, Capability::Bookmarks] {
            if !capabilities.contains(needed) {
                return Err(ProcessorConfigError::Unsupported(needed));
            }
        }
        Ok(Processor {
            core: Core {
                fenced_bookmarks: capabilities.contains(Capability::FencedBookmarks),
                storage,
                elector,
                config,
            },
            projection,
        })
    }

    /// Processes until an error stops it; it never returns `Ok`.
    ///
    /// # Errors
    ///
    /// See [`ProcessorError`]: a failed projection, a storage that refuses a call for a
    /// reason other than being unavailable, or a stopped elector.
    ///
    /// # Cancel safety
    ///
    /// See [`Processor`], "Cancel safety".
    pub async fn run(&mut self) -> Result<Infallible, ProcessorError<P::Error>> {
        loop {
            self.run_until(std::future::pending()).await?;
        }
    }

    /// Processes until `stop` completes, then returns `Ok(())` at the next batch boundary:
    /// a batch in progress is projected and bookmarked first (unless the tenure ends
    /// meanwhile). The lease is not released: shut the elector down for that.
    ///
    /// Called again after it returned (even with an error), it starts over by waiting for
    /// leadership and reading the bookmark.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    ///
    /// # Cancel safety
    ///
    /// See [`Processor`], "Cancel safety".
    pub async fn run_until<S>(&mut self, stop: S) -> Result<(), ProcessorError<P::Error>>
    where
        S: Future<Output = ()>,
    {
        let stop = std::pin::pin!(stop);
        let mut stop = Stop::new(stop);
        // The token of a tenure the storage refused: not resumed, even while the elector
        // still believes in it (until its next request tells it otherwise).
        let mut superseded = None;
        loop {
            let lease = tokio::select! {
                biased;
                () = stop.fired() => return Ok(()),
                lease = self.core.elector.wait_for_leadership() => lease?,
            };
            if superseded.is_some_and(|token| lease.token() <= token) {
                let mut state = self.core.elector.subscribe();
                tokio::select! {
                    biased;
                    () = stop.fired() => return Ok(()),
                    _ = state.changed() => {}
                }
                continue;
            }
            let mut bookmarked = None;
            let end = self.tenure(&lease, &mut stop, &mut bookmarked).await?;
            let reader = self.core.config.reader();
            let position = bookmarked.map(EventPosition::get);
            emit!(
                info,
                lease,
                reader,
                action = "stopped",
                reason = end.as_str(),
                position,
                "stopped processing"
            );
            match end {
                TenureEnd::Lost => {}
                TenureEnd::Fenced => superseded = Some(lease.token()),
                TenureEnd::Stopped => return Ok(()),
                TenureEnd::StepDown => match self.core.elector.release().await {
                    // Not confirmed: the lease expires after its ttl instead (the elector
                    // logged it).
                    Ok(()) | Err(ElectorError::Release(_)) => {}
                    Err(error) => return Err(error.into()),
                },
            }
        }
    }

    /// One tenure: pass after pass from the bookmark, until it ends. `bookmarked` follows
    /// the last bookmark written.
    async fn tenure<S: Future<Output = ()>>(
        &mut self,
        lease: &LeaderLease,
        stop: &mut Stop<'_, S>,
        bookmarked: &mut Option<EventPosition>,
    ) -> Result<TenureEnd, ProcessorError<P::Error>> {
        // Looked up once per tenure, not per batch (see `crate::metrics`).
        let figures = metrics::ProcessorFigures::new(self.core.config.reader());
        let end = loop {
            match self.pass(lease, stop, bookmarked, &figures).await? {
                Pass::End(end) => break end,
                Pass::Unconfirmed => {
                    if let Some(end) = self.core.pause(lease, stop).await {
                        break end;
                    }
                }
            }
        };
        if end == TenureEnd::StepDown {
            emit!(
                info,
                lease,
                self.core.config.reader(),
                action = "stepping_down",
                position = bookmarked.map(EventPosition::get),
                "step-down requested: the batch in progress is done, releasing"
            );
        }
        Ok(end)
    }

    /// Reads the bookmark, then projects and bookmarks batch after batch, until the tenure
    /// ends or a storage call is not confirmed.
    async fn pass<S: Future<Output = ()>>(
        &mut self,
        lease: &LeaderLease,
        stop: &mut Stop<'_, S>,
        bookmarked: &mut Option<EventPosition>,
        figures: &metrics::ProcessorFigures,
    ) -> Result<Pass, ProcessorError<P::Error>> {
        let (core, projection) = (&self.core, &mut self.projection);
        let reader = core.config.reader();
        let bookmark = core.storage.get_bookmark(reader);
        let mut after = match core
            .call(lease, &figures.get_bookmark, bookmark)
            .await?
            .done()
        {
            Ok(bookmark) => bookmark.map(|b| b.position),
            Err(pass) => return Ok(pass),
        };
        emit!(
            info,
            lease,
            reader,
            action = "resumed",
            position = after.map(EventPosition::get),
            "processing from the bookmark"
        );
        loop {
            if let Some(end) = between_batches(lease, stop).await {
                return Ok(Pass::End(end));
            }
            let read = core
                .storage
                .read_events(core.config.query(), core.config.read_options(after));
            let events = match core.call(lease, &figures.read_events, read).await?.done() {
                Ok(events) => events,
                Err(pass) => return Ok(pass),
            };
            let caught_up = events.len() < core.config.batch_size();
            if let Some(batch) = Batch::new(events, after, lease.clone()) {
                let last = batch.last_position();
                let tally = (batch.len(), batch.events().last().map(|e| e.recorded_at));
                if let Some(end) = core.project(projection, lease, batch).await? {
                    return Ok(Pass::End(end));
                }
                // Fenced by the tenure's token where the storage can: a late write of this
                // tenure, after a successor's, is refused instead of moving the bookmark back.
                let fence = Fence::new(lease.lease_name().clone(), lease.token());
                let tags = core.config.bookmark_tags();
                let write = if core.fenced_bookmarks {
                    core.storage.bookmark_fenced(reader, last, tags, &fence)
                } else {
                    core.storage.bookmark(reader, last, tags)
                };
                if let Err(pass) = core.call(lease, &figures.bookmark, write).await?.done() {
                    return Ok(pass);
                }
                emit!(
                    debug,
                    lease,
                    reader,
                    action = "bookmarked",
                    position = last.get(),
                    "bookmark moved"
                );
                figures.projected(tally.0, tally.1);
                after = Some(last);
                *bookmarked = after;
            }
            if caught_up {
                emit!(
                    trace,
                    lease,
                    reader,
                    action = "caught_up",
                    position = after.map(EventPosition::get),
                    "caught up"
                );
                if let Some(end) = core.pause(lease, stop).await {
                    return Ok(Pass::End(end));
                }
            }
        }
    }
}

impl<P> Processor<P> {
    /// The elector that decides when this processor works.
    pub fn elector(&self) -> &LeaderElector {
        &self.core.elector
    }

    /// The configuration.
    pub fn config(&self) -> &ProcessorConfig {
        &self.core.config
    }

    /// The projection.
    pub fn projection(&self) -> &P {
        &self.projection
    }

    /// The projection, mutably (between runs).
    pub fn projection_mut(&mut self) -> &mut P {
        &mut self.projection
    }

    /// The projection, taken out of the processor.
    pub fn into_projection(self) -> P {
        self.projection
    }
}

impl<P> fmt::Debug for Processor<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("storage", &self.core.storage)
            .field("elector", &self.core.elector)
            .field("config", &self.core.config)
            .field("projection", &std::any::type_name::<P>())
            .finish()
    }
}

impl Core {
    /// Projects one batch, cancelled if the tenure ends first. `Some` when the tenure has
    /// ended: the batch must not be bookmarked.
    async fn project<P: Projection>(
        &self,
        projection: &mut P,
        lease: &LeaderLease,
        batch: Batch,
    ) -> Result<Option<TenureEnd>, ProcessorError<P::Error>> {
        let reader = self.config.reader();
        let (first, last, count) = (batch.first_position(), batch.last_position(), batch.len());
        match lease.until_lost(projection.project(batch)).await {
            Err(_) => {
                emit!(
                    warn,
                    lease,
                    reader,
                    action = "cancelled",
                    first = first.get(),
                    last = last.get(),
                    "leadership lost during a projection: it was cancelled, and the batch is \
                     left to the next holder"
                );
                return Ok(Some(TenureEnd::Lost));
            }
            Ok(Err(error)) => {
                emit!(warn, lease, reader, action = "failed", first = first.get(),
                    last = last.get(), error = %error,
                    "the projection failed; the bookmark stays before the batch");
                return Err(ProcessorError::Projection {
                    error,
                    token: lease.token(),
                    first,
                    last,
                });
            }
            Ok(Ok(())) => emit!(
                debug,
                lease,
                reader,
                action = "projected",
                first = first.get(),
                last = last.get(),
                count,
                "batch projected"
            ),
        }
        // Never bookmark after the tenure ended: the next holder may have moved on. (The
        // bookmark call is bounded by the tenure too; this says why in the log.)
        if lease.is_valid() {
            Ok(None)
        } else {
            emit!(
                warn,
                lease,
                reader,
                action = "not_bookmarked",
                first = first.get(),
                last = last.get(),
                "leadership lost after a projection, before its bookmark: the next holder \
                 projects the batch again"
            );
            Ok(Some(TenureEnd::Lost))
        }
    }

    /// Makes one storage call, bounded by the call timeout and by the tenure.
    async fn call<T, E>(
        &self,
        lease: &LeaderLease,
        figures: &metrics::CallFigures,
        call: impl Future<Output = Result<T, EventStorageError>>,
    ) -> Result<Outcome<T>, ProcessorError<E>> {
        let operation = figures.op();
        let target = (lease.lease_name(), lease.owner(), Some(lease.token()));
        let call = observe::storage_call(figures, target, self.config.call_timeout(), call);
        let error = match lease.until_lost(call).await {
            Err(_) => return Ok(Outcome::Ended),
            Ok(Ok(Ok(value))) => return Ok(Outcome::Done(value)),
            Ok(Ok(Err(error @ EventStorageError::Fenced { .. }))) => {
                // A newer tenure has written or holds the lease: this one is over, whatever
                // the elector has heard yet.
                emit!(warn, lease, self.config.reader(), action = "fenced", operation,
                    error = %error, "refused by the storage's fence: the tenure has ended");
                return Ok(Outcome::Fenced);
            }
            Ok(Ok(Err(error))) if !error.is_unconfirmed() => {
                return Err(ProcessorError::Storage { operation, error });
            }
            Ok(Ok(Err(error))) => error.to_string(),
            Ok(Err(_)) => format!(
                "no answer within the call timeout of {:?}",
                self.config.call_timeout()
            ),
        };
        emit!(warn, lease, self.config.reader(), action = "retrying", operation, error = %error,
            "storage call not confirmed; retrying from the bookmark after the idle poll");
        Ok(Outcome::Unconfirmed)
    }

    /// Waits for the idle poll, or until the tenure ends, a step-down is requested, or the
    /// stop signal fires, whichever comes first (`None`: the idle poll passed).
    async fn pause<S: Future<Output = ()>>(
        &self,
        lease: &LeaderLease,
        stop: &mut Stop<'_, S>,
    ) -> Option<TenureEnd> {
        tokio::select! {
            biased;
            () = lease.lost() => Some(TenureEnd::Lost),
            () = lease.step_down_requested() => Some(if lease.is_valid() {
                TenureEnd::StepDown
            } else {
                TenureEnd::Lost
            }),
            () = stop.fired() => Some(TenureEnd::Stopped),
            () = sleep(self.config.idle_poll()) => None,
        }
    }
}

/// Whether the tenure should end before the next batch, and why.
async fn between_batches<S: Future<Output = ()>>(
    lease: &LeaderLease,
    stop: &mut Stop<'_, S>,
) -> Option<TenureEnd> {
    if !lease.is_valid() {
        Some(TenureEnd::Lost)
    } else if lease.is_step_down_requested() {
        Some(TenureEnd::StepDown)
    } else if stop.has_fired().await {
        Some(TenureEnd::Stopped)
    } else {
        None
    }
}
