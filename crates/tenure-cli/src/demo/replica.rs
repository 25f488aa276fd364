//! One replica of the demo's order dispatcher: an elector, and a dispatch loop that runs only
//! while it leads and stamps every batch it publishes with its fencing token.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use tenure_election::{ElectorConfig, FencingGuard, LeaderElector, LeaderLease, LeadershipState};
use tenure_ports::{EventStorage, FencingToken};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::narrator::Narrator;

/// The system the dispatchers publish to. It keeps the highest fencing token it has accepted
/// and refuses batches stamped with an older one.
#[derive(Debug, Default)]
pub struct Downstream {
    guard: FencingGuard,
    lease: String,
    accepted: Mutex<Vec<(String, u64)>>,
    rejected: Mutex<Vec<(String, u64, u64)>>,
}

impl Downstream {
    pub fn new(lease: &str) -> Arc<Self> {
        Arc::new(Downstream {
            lease: lease.to_owned(),
            ..Downstream::default()
        })
    }

    /// Publishes one batch from `who`; returns how many batches this token has published so
    /// far, or the rejection.
    fn publish(
        &self,
        who: &str,
        token: FencingToken,
    ) -> Result<usize, tenure_election::StaleToken> {
        self.guard
            .admit_with(&self.lease, token, || {
                let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
                accepted.push((who.to_owned(), token.get()));
                accepted.iter().filter(|(_, t)| *t == token.get()).count()
            })
            .inspect_err(|stale| {
                self.rejected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((who.to_owned(), stale.stale.get(), stale.current.get()));
            })
    }

    /// Every accepted batch: who published it, with which token.
    pub fn accepted(&self) -> Vec<(String, u64)> {
        self.accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every rejected batch: who, its token, and the token already accepted.
    pub fn rejected(&self) -> Vec<(String, u64, u64)> {
        self.rejected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How the demo steers a replica from outside.
#[derive(Debug, Default)]
struct Control {
    /// Finish the current batch and shut down gracefully (release).
    stop: Notify,
    /// Freeze mid-batch: see [`Replica::freeze`].
    freeze: Notify,
    /// Wake a frozen dispatcher.
    thaw: Notify,
}

/// A running replica.
#[derive(Debug)]
pub struct Replica {
    pub name: &'static str,
    pub elector: LeaderElector,
    control: Arc<Control>,
    task: JoinHandle<()>,
}

/// Everything a replica needs to know.
#[derive(Clone)]
pub struct Setup {
    pub storage: Arc<dyn EventStorage>,
    pub lease: String,
    pub ttl: Duration,
    pub narrator: Arc<Narrator>,
    pub downstream: Arc<Downstream>,
}

impl Setup {
    /// One batch every quarter ttl.
    fn batch_interval(&self) -> Duration {
        self.ttl / 4
    }
}

impl Replica {
    /// Starts replica `name` with `priority`: its elector begins requesting at once.
    pub fn start(setup: &Setup, name: &'static str, priority: i64) -> anyhow::Result<Replica> {
        let config = ElectorConfig::new(setup.lease.as_str(), setup.ttl)
            .with_owner(name)
            .with_priority(priority);
        let elector = LeaderElector::start(Arc::clone(&setup.storage), config)
            .with_context(|| format!("starting {name}"))?;
        let control = Arc::new(Control::default());
        let task = tokio::spawn(run(
            setup.clone(),
            name,
            elector.clone(),
            Arc::clone(&control),
        ));
        Ok(Replica {
            name,
            elector,
            control,
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

    /// A crash: the process dies, nothing is released.
    pub fn crash(&self, narrator: &Narrator) {
        self.task.abort();
        self.elector.abort();
        narrator.end_tenure(self.name, "crashed");
    }

    /// A stop-the-world pause (a long GC pause, a suspended VM): the elector stops renewing
    /// and the dispatcher is stuck mid-batch with the token it had, until [`thaw`](Self::thaw).
    pub fn freeze(&self, narrator: &Narrator) {
        // The freeze is signalled before the elector stops: stopping it ends the tenure, and a
        // dispatcher woken by that first (on another worker thread) would stop cleanly instead
        // of freezing. With the permit already stored, its biased select takes the freeze.
        self.control.freeze.notify_one();
        self.elector.abort();
        narrator.end_tenure(self.name, "froze, then was fenced off");
    }

    /// Ends the pause: the dispatcher carries on where it stopped.
    pub fn thaw(&self) {
        self.control.thaw.notify_one();
    }

    /// A graceful shutdown: finish the current batch, then release the lease.
    pub async fn shut_down(self) -> anyhow::Result<()> {
        self.control.stop.notify_one();
        self.task
            .await
            .with_context(|| format!("{} did not shut down cleanly", self.name))
    }
}

/// The replica's life: dispatch while leader; on a stop, finish and release.
async fn run(setup: Setup, name: &'static str, elector: LeaderElector, control: Arc<Control>) {
    tokio::select! {
        _ = elector.run_while_leader(|lease| dispatch(&setup, name, lease, &control)) => {}
        () = control.stop.notified() => {}
    }
    if let Err(error) = elector.shutdown().await {
        setup
            .narrator
            .say(name, format!("shutdown failed: {error}"));
    }
}

/// Dispatches batches for one tenure.
async fn dispatch(setup: &Setup, name: &'static str, lease: LeaderLease, control: &Control) {
    let narrator = &setup.narrator;
    let token = lease.token();
    narrator.say(
        name,
        format!("dispatching orders, every batch stamped with token {token}"),
    );
    loop {
        match setup.downstream.publish(name, token) {
            Ok(1) => narrator.say(
                "downstream",
                format!("accepted the first batch from {name} (token {token})"),
            ),
            Ok(_) => {}
            Err(stale) => narrator.say(
                "downstream",
                format!("REJECTED a batch from {name}: {stale}"),
            ),
        }
        tokio::select! {
            // A freeze comes first: a frozen process does not notice that its lease is gone.
            biased;
            () = control.freeze.notified() => {
                narrator.say(
                    name,
                    format!("FREEZES mid-batch, holding token {token} (a simulated stop-the-world pause)"),
                );
                control.thaw.notified().await;
                narrator.say(
                    name,
                    format!("wakes up, still believing it leads, and publishes its batch with token {token}"),
                );
                // A zombie does not check its lease again: that is the point. It publishes.
                if let Err(stale) = setup.downstream.publish(name, token) {
                    narrator.say("downstream", format!("REJECTED the batch from {name}: {stale}"));
                }
                return;
            }
            () = lease.lost() => {
                narrator.say(name, "stopped dispatching: it no longer holds the lease");
                return;
            }
            () = lease.step_down_requested() => {
                narrator.say(name, "finishing its current batch before handing over");
                sleep(setup.batch_interval() / 4).await;
                return;
            }
            () = sleep(setup.batch_interval()) => {}
        }
    }
}
