//! One replica of the demo's order dispatcher: an elector, and a [`Processor`] that, only
//! while the elector leads, reads the orders after the bookmark, dispatches them downstream
//! stamped with the fencing token, and moves the bookmark after each batch.

use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use anyhow::Context as _;
use tenure_election::{
    Batch, ElectorConfig, ElectorError, LeaderElector, LeadershipState, Processor, ProcessorConfig,
    ProcessorError, Projection, StaleToken,
};
use tenure_ports::{EventPosition, EventStorage, EventStorageError, Fence, FencingToken};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use super::narrator::Narrator;
use super::orders::{Downstream, Order, Shop, describe};

/// The most orders a dispatcher reads, dispatches and bookmarks at a time.
const BATCH_SIZE: usize = 10;

/// Everything a replica needs to know.
#[derive(Clone)]
pub struct Setup {
    pub storage: Arc<dyn EventStorage>,
    pub lease: String,
    pub ttl: Duration,
    pub narrator: Arc<Narrator>,
    pub downstream: Arc<Downstream>,
    pub shop: Arc<Shop>,
}

impl Setup {
    /// Every replica reads the same orders and moves the same bookmark, named after the lease:
    /// the bookmark names the position, not the replica.
    fn processor_config(&self) -> ProcessorConfig {
        ProcessorConfig::new(self.lease.as_str())
            .with_query(self.shop.query())
            .with_batch_size(BATCH_SIZE)
            .with_idle_poll(self.ttl / 4)
    }
}

/// A replica's elector settings: the defaults, except that a storage call may take three
/// quarters of the poll interval (ttl/4) instead of half. The demo is run on laptops and
/// shared CI machines, where a commit can stall for a few hundred milliseconds; with a short
/// ttl, half a poll interval would tell such a stall as a failed renewal, which the story does
/// not need (a leader renews at every poll and holds until its deadline either way).
pub fn elector_config(lease: &str, ttl: Duration, name: &str) -> ElectorConfig {
    ElectorConfig::new(lease, ttl)
        .with_owner(name)
        .with_call_timeout(ttl / 4)
}

/// Something the demo asks a dispatcher to do at its next batch.
enum Plan {
    /// Dispatch the batch, tell which orders, then hang until killed: the crash comes before
    /// the bookmark.
    CrashAfterBatch(oneshot::Sender<Vec<u64>>),
    /// Check the lease, tell which orders are about to go, then block until thawed, and
    /// dispatch them.
    FreezeBeforeBatch {
        frozen: oneshot::Sender<Vec<u64>>,
        thaw: mpsc::Receiver<()>,
    },
}

/// How the demo steers a replica from outside.
#[derive(Default)]
struct Control {
    /// Stop between batches and shut down gracefully (release).
    stop: Notify,
    /// What to do at the next batch.
    plan: Mutex<Option<Plan>>,
    /// A thawed zombie's batch: its last position, its token and its orders.
    unbookmarked: Mutex<Option<(EventPosition, FencingToken, Vec<u64>)>>,
}

impl Control {
    fn set_plan(&self, plan: Plan) {
        *self.plan.lock().unwrap_or_else(PoisonError::into_inner) = Some(plan);
    }

    fn set_unbookmarked(&self, position: EventPosition, token: FencingToken, orders: Vec<u64>) {
        *self
            .unbookmarked
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((position, token, orders));
    }

    fn take_plan(&self) -> Option<Plan> {
        self.plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// A running replica.
pub struct Replica {
    pub name: &'static str,
    pub elector: LeaderElector,
    control: Arc<Control>,
    /// The token of the last tenure whose first batch was dispatched and told.
    first_batch: watch::Receiver<Option<FencingToken>>,
    thaw: Mutex<Option<mpsc::Sender<()>>>,
    task: JoinHandle<()>,
}

impl Replica {
    /// Starts replica `name` with `priority`: its elector begins requesting at once, and its
    /// processor waits to lead.
    pub fn start(setup: &Setup, name: &'static str, priority: i64) -> anyhow::Result<Replica> {
        let config = elector_config(&setup.lease, setup.ttl, name).with_priority(priority);
        let elector = LeaderElector::start(Arc::clone(&setup.storage), config)
            .with_context(|| format!("starting {name}"))?;
        let control = Arc::new(Control::default());
        let (told, first_batch) = watch::channel(None);
        let dispatcher = Dispatcher {
            name,
            narrator: Arc::clone(&setup.narrator),
            downstream: Arc::clone(&setup.downstream),
            control: Arc::clone(&control),
            told,
        };
        let processor = Processor::new(
            Arc::clone(&setup.storage),
            elector.clone(),
            setup.processor_config(),
            dispatcher,
        );
        let processor = match processor {
            Ok(processor) => processor,
            Err(error) => {
                elector.abort();
                return Err(error).with_context(|| format!("starting {name}'s processor"));
            }
        };
        let task = tokio::spawn(run(
            processor,
            name,
            Arc::clone(&setup.narrator),
            Arc::clone(&control),
        ));
        Ok(Replica {
            name,
            elector,
            control,
            first_batch,
            thaw: Mutex::new(None),
            task,
        })
    }

    /// Follows this replica's state.
    pub fn state(&self) -> watch::Receiver<LeadershipState> {
        self.elector.subscribe()
    }

    /// Waits until this replica's state satisfies `pred`.
    pub async fn wait_for(&self, pred: impl FnMut(&LeadershipState) -> bool) -> anyhow::Result<()> {
        self.state()
            .wait_for(pred)
            .await
            .map(|_| ())
            .with_context(|| format!("{} stopped unexpectedly", self.name))
    }

    /// Waits until this replica is elected.
    pub async fn elected(&self) -> anyhow::Result<()> {
        self.wait_for(LeadershipState::is_leader).await
    }

    /// Waits until this replica leads and has dispatched its tenure's first batch, so that
    /// the story of its election is told before the demo moves on.
    pub async fn leads(&self) -> anyhow::Result<()> {
        let lease = self
            .elector
            .wait_for_leadership()
            .await
            .with_context(|| format!("{} stopped unexpectedly", self.name))?;
        self.first_batch
            .clone()
            .wait_for(|told| *told == Some(lease.token()))
            .await
            .map(|_| ())
            .with_context(|| format!("{} stopped unexpectedly", self.name))
    }

    /// Waits for this replica's next batch to be dispatched, and returns its orders; the
    /// replica then hangs before it can bookmark them, until [`crash`](Self::crash).
    pub async fn dispatch_one_more_batch(&self) -> anyhow::Result<Vec<u64>> {
        let (done, dispatched) = oneshot::channel();
        self.control.set_plan(Plan::CrashAfterBatch(done));
        dispatched
            .await
            .with_context(|| format!("{} stopped before its next batch", self.name))
    }

    /// A crash: the process dies, nothing is released, nothing more is bookmarked.
    pub fn crash(&self, narrator: &Narrator) {
        self.task.abort();
        self.elector.abort();
        narrator.end_tenure(self.name, "crashed");
    }

    /// A stop-the-world pause (a long GC pause, a suspended VM) at the worst moment: at its
    /// next batch, after checking that it still leads and before dispatching. The elector
    /// stops renewing, and the dispatcher stays stuck with its token and its orders until
    /// [`thaw`](Self::thaw). Returns the orders it holds.
    pub async fn freeze(&self, narrator: &Narrator) -> anyhow::Result<Vec<u64>> {
        let (frozen, held) = oneshot::channel();
        let (thaw, thawed) = mpsc::channel();
        *self.thaw.lock().unwrap_or_else(PoisonError::into_inner) = Some(thaw);
        self.control.set_plan(Plan::FreezeBeforeBatch {
            frozen,
            thaw: thawed,
        });
        let orders = held
            .await
            .with_context(|| format!("{} stopped before its next batch", self.name))?;
        // The elector is stopped only once the dispatcher is frozen: stopping it ends the
        // tenure, and a processor that saw that first would stop cleanly instead of freezing.
        self.elector.abort();
        narrator.end_tenure(self.name, "froze, then was fenced off");
        Ok(orders)
    }

    /// After a thawed zombie stopped: the bookmark its processor would have written after its
    /// batch, written as it would (fenced by its old token), and told with the storage's
    /// answer. The chapter's second fence.
    pub async fn zombie_bookmark(
        &self,
        storage: &dyn EventStorage,
        lease: &str,
        narrator: &Narrator,
    ) {
        let taken = self
            .control
            .unbookmarked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((position, token, orders)) = taken else {
            return;
        };
        let Ok(lease_name) = tenure_ports::domain::LeaseName::new(lease) else {
            return;
        };
        let last_order = orders.last().copied().unwrap_or(0);
        let line = match storage
            .bookmark_fenced(lease, position, &[], &Fence::new(lease_name, token))
            .await
        {
            Err(refused @ EventStorageError::Fenced { .. }) => format!(
                "REFUSED {}'s bookmark at order {last_order} (token {token}): {refused}",
                self.name
            ),
            Err(other) => format!("could not answer {}'s bookmark: {other}", self.name),
            Ok(_) => format!(
                "ACCEPTED from a superseded tenure: {}'s bookmark at order {last_order}",
                self.name
            ),
        };
        narrator.say("storage", line);
    }

    /// Ends the pause: the dispatcher carries on where it stopped.
    pub fn thaw(&self) {
        if let Some(thaw) = self
            .thaw
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = thaw.send(());
        }
    }

    /// A graceful shutdown: stop between batches (the last one bookmarked), then release
    /// the lease.
    pub async fn shut_down(mut self) -> anyhow::Result<()> {
        self.control.stop.notify_one();
        self.thaw();
        self.stopped().await
    }

    /// Waits until the replica has stopped of its own accord (and told why).
    pub async fn stopped(&mut self) -> anyhow::Result<()> {
        (&mut self.task)
            .await
            .with_context(|| format!("{} did not stop cleanly", self.name))
    }
}

/// The replica's life: process while leader, until told to stop; then release.
async fn run(
    mut processor: Processor<Dispatcher>,
    name: &'static str,
    narrator: Arc<Narrator>,
    control: Arc<Control>,
) {
    match processor.run_until(control.stop.notified()).await {
        Ok(()) => {}
        Err(ProcessorError::Projection {
            error: DispatchError::Rejected(_),
            ..
        }) => narrator.say(
            name,
            "stops: the rejection tells it that it no longer leads",
        ),
        // Its elector was stopped under it (a freeze): there is nothing to say.
        Err(ProcessorError::Elector(ElectorError::Stopped)) => {}
        Err(error) => narrator.say(name, format!("processor stopped: {error}")),
    }
    if let Err(error) = processor.elector().shutdown().await {
        narrator.say(name, format!("shutdown failed: {error}"));
    }
}

/// Why a batch was not dispatched.
#[derive(Debug)]
enum DispatchError {
    /// The downstream refused it: a newer tenure has dispatched.
    Rejected(StaleToken),
    /// An event of the orders stream carries no order number.
    NotAnOrder(EventPosition),
}

impl std::fmt::Display for DispatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DispatchError::Rejected(stale) => write!(f, "the downstream refused it: {stale}"),
            DispatchError::NotAnOrder(position) => {
                write!(f, "the event at position {position} is not an order")
            }
        }
    }
}

impl std::error::Error for DispatchError {}

/// The projection: dispatches each batch of orders downstream, stamped with the token.
struct Dispatcher {
    name: &'static str,
    narrator: Arc<Narrator>,
    downstream: Arc<Downstream>,
    control: Arc<Control>,
    /// The token of the last tenure whose first batch was dispatched and told.
    told: watch::Sender<Option<FencingToken>>,
}

impl Projection for Dispatcher {
    type Error = DispatchError;

    async fn project(&mut self, batch: Batch) -> Result<(), DispatchError> {
        let orders = batch
            .events()
            .iter()
            .map(|e| Order::from_event(e).ok_or(DispatchError::NotAnOrder(e.position)))
            .collect::<Result<Vec<_>, _>>()?;
        let numbers: Vec<u64> = orders.iter().map(|o| o.number).collect();
        // Right before the effect: is this tenure still on? (The processor cancels a
        // projection only at an `.await`, and there is none from here to the dispatch.)
        if !batch.is_valid() {
            return Ok(()); // not bookmarked: left to the next leader
        }
        let token = batch.token();
        match self.control.take_plan() {
            None => self.dispatch(&batch, &orders, false),
            Some(Plan::CrashAfterBatch(done)) => {
                self.dispatch(&batch, &orders, true)?;
                let _ = done.send(numbers);
                // The crash comes now, before the processor can bookmark the batch.
                std::future::pending().await
            }
            Some(Plan::FreezeBeforeBatch { frozen, thaw }) => {
                self.narrator.say(
                    self.name,
                    format!(
                        "FREEZES mid-batch, holding token {token} and {} to dispatch \
                         (a simulated stop-the-world pause)",
                        describe(&numbers)
                    ),
                );
                let _ = frozen.send(numbers.clone());
                // A paused process runs nothing at all, not even the processor's watch on
                // its lease: the thread is blocked, and when it wakes it goes straight on to
                // the dispatch it was about to make. (An error only means the demo is gone.)
                let _ = tokio::task::block_in_place(|| thaw.recv());
                self.narrator.say(
                    self.name,
                    format!(
                        "wakes up, still believing it leads, and dispatches {} with token {token}",
                        describe(&numbers)
                    ),
                );
                // What its processor would bookmark after the batch, under its old token: the
                // demo writes it once the zombie has stopped (an `.await` here would let the
                // processor cancel the projection, which knows the tenure is over).
                if let Some(last) = batch.events().last() {
                    self.control
                        .set_unbookmarked(last.position, token, numbers.clone());
                }
                self.dispatch(&batch, &orders, false)
            }
        }
    }
}

impl Dispatcher {
    /// Delivers the batch. Tells it if `always_tell`, if it is the first of a tenure, or if
    /// it repeats orders; other batches go by quietly.
    fn dispatch(
        &mut self,
        batch: &Batch,
        orders: &[Order],
        always_tell: bool,
    ) -> Result<(), DispatchError> {
        let token = batch.token();
        let numbers: Vec<u64> = orders.iter().map(|o| o.number).collect();
        let repeated = match self.downstream.deliver(self.name, token, orders) {
            Ok(repeated) => repeated,
            Err(stale) => {
                self.narrator.say(
                    "downstream",
                    format!(
                        "REJECTED {}'s batch of {}: {stale}",
                        self.name,
                        describe(&numbers)
                    ),
                );
                return Err(DispatchError::Rejected(stale));
            }
        };
        let again = if repeated.is_empty() {
            String::new()
        } else {
            format!(", {} for the second time", describe(&repeated))
        };
        for order in orders {
            self.narrator.note_order(order.position.get(), order.number);
        }
        if always_tell || !repeated.is_empty() || *self.told.borrow() != Some(token) {
            self.narrator.say(
                self.name,
                format!("dispatched {} (token {token}){again}", describe(&numbers)),
            );
        }
        self.told.send_replace(Some(token));
        Ok(())
    }
}
