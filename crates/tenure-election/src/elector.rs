//! The handle an application holds: start, watch, run work while leader, hand over, stop.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tenure_ports::{EventStorage, LeaseName, Owner};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use crate::campaign::{Campaign, Command};
use crate::config::{ElectorConfig, ValidConfig};
use crate::error::ElectorError;
use crate::lease::LeaderLease;
use crate::state::LeadershipState;

/// Campaigns for one lease on a storage, in a task of its own.
///
/// It calls `request_lease` every poll interval (measured from one request's sending to the
/// next, so call latency never shifts the cadence), publishes what it learns as a
/// [`LeadershipState`], and leaves the leader states at the instant leadership can no longer
/// be confirmed: the sending of the last confirmed request, plus the ttl, less the
/// [safety margin](crate::safety_margin), even while a call hangs.
///
/// Clones are handles to the same campaign. When the last handle is dropped, the campaign
/// releases the lease and stops in the background; [`shutdown`](Self::shutdown) does the
/// same and waits for it.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tenure_election::{ElectorConfig, LeaderElector};
/// use tenure_memory::MemoryEventStorage;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tenure_election::ElectorError> {
/// let storage = Arc::new(MemoryEventStorage::new());
/// let config = ElectorConfig::new("order-dispatcher", Duration::from_secs(3)).with_owner("pod-a");
/// let elector = LeaderElector::start(storage, config)?;
///
/// let dispatched = elector
///     .run_while_leader(|lease| async move {
///         // Stamp every write with lease.token(); stop when lease.lost() completes.
///         lease.token().get()
///     })
///     .await?;
/// assert_eq!(dispatched, 1);
/// elector.shutdown().await?; // releases the lease: the next contender takes it at once
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElector {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ValidConfig,
    commands: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<LeadershipState>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl LeaderElector {
    /// Validates `config` and starts campaigning on `storage` in a new task of the current
    /// tokio runtime. The first request goes out at once.
    pub fn start(
        storage: Arc<dyn EventStorage>,
        config: ElectorConfig,
    ) -> Result<LeaderElector, ElectorError> {
        Self::start_validated(storage, config.validate()?)
    }

    /// Starts campaigning with a configuration validated already (its owner id, generated
    /// or given, is the one used), as [`start`](Self::start) does.
    ///
    /// # Errors
    ///
    /// [`ElectorError::NoRuntime`] outside a tokio runtime.
    pub fn start_validated(
        storage: Arc<dyn EventStorage>,
        config: ValidConfig,
    ) -> Result<LeaderElector, ElectorError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ElectorError::NoRuntime)?;
        let (state_tx, state_rx) = watch::channel(LeadershipState::Unknown);
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        debug!(
            lease = %config.lease_name(), owner = %config.owner(), priority = config.priority(),
            ttl_ms = config.ttl().as_millis(), poll_ms = config.poll_interval().as_millis(),
            "starting leader election"
        );
        let campaign = Campaign::new(storage, config.clone(), state_tx, commands_rx);
        let task = runtime.spawn(campaign.run());
        Ok(LeaderElector {
            inner: Arc::new(Inner {
                config,
                commands: commands_tx,
                state: state_rx,
                task: Mutex::new(Some(task)),
            }),
        })
    }

    /// The validated configuration, with its defaults filled in.
    pub fn config(&self) -> &ValidConfig {
        &self.inner.config
    }

    /// The lease contended for.
    pub fn lease_name(&self) -> &LeaseName {
        self.inner.config.lease_name()
    }

    /// This contender's owner id (generated once, at start, unless configured).
    pub fn owner(&self) -> &Owner {
        self.inner.config.owner()
    }

    /// The current state.
    pub fn state(&self) -> LeadershipState {
        self.inner.state.borrow().clone()
    }

    /// A receiver that follows every change of state. Its channel closes when the elector
    /// stops.
    pub fn subscribe(&self) -> watch::Receiver<LeadershipState> {
        self.inner.state.clone()
    }

    /// Waits until this elector holds the lease and returns the tenure.
    ///
    /// # Errors
    ///
    /// [`ElectorError::Stopped`] if the elector stops first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for_leadership(&self) -> Result<LeaderLease, ElectorError> {
        let mut state = self.inner.state.clone();
        loop {
            // A leader state whose deadline has passed is on its way out (the campaign
            // publishes the lapse at that instant): wait for what comes next.
            let token = state
                .wait_for(|s| s.valid_until().is_some_and(|v| Instant::now() < v))
                .await
                .map_err(|_| ElectorError::Stopped)?
                .leader_token()
                .ok_or(ElectorError::Stopped)?;
            let lease = LeaderLease::new(
                self.lease_name().clone(),
                self.owner().clone(),
                token,
                state.clone(),
            );
            if lease.is_valid() {
                return Ok(lease);
            }
            if state.has_changed().is_err() {
                // The elector stopped while it held the lease (it was aborted): nobody
                // confirms that tenure any more.
                return Err(ElectorError::Stopped);
            }
        }
    }

    /// Runs `work` whenever this elector leads, until it finishes while still leading.
    ///
    /// Each time the elector becomes leader, `work` is called with the tenure's
    /// [`LeaderLease`]. The work should stop when [`LeaderLease::lost`] completes (it is not
    /// cancelled for it: wrap it in [`LeaderLease::until_lost`] for that), and finish its
    /// current unit of work and return when [`LeaderLease::step_down_requested`] completes.
    /// When it returns:
    ///
    /// * **after a step-down was requested** during the tenure: the elector releases the lease
    ///   so that the waiting contender takes over at its next request, stands aside for one
    ///   ttl, and the loop waits for the next tenure;
    /// * **after the tenure ended** (lapsed, taken over): its output is dropped and the loop
    ///   waits for the next tenure;
    /// * **while still leader**, with no step-down: its output is returned and the elector
    ///   **keeps the lease** and keeps renewing it. Run more work, or call
    ///   [`shutdown`](Self::shutdown) to hand over.
    ///
    /// # Errors
    ///
    /// [`ElectorError::Stopped`] if the elector stops while waiting for a tenure.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work at its current `.await`; the elector keeps
    /// campaigning. Drop it, then [`shutdown`](Self::shutdown), to stop work before releasing.
    pub async fn run_while_leader<F, Fut>(&self, mut work: F) -> Result<Fut::Output, ElectorError>
    where
        F: FnMut(LeaderLease) -> Fut,
        Fut: Future,
    {
        loop {
            let lease = self.wait_for_leadership().await?;
            let output = work(lease.clone()).await;
            if !lease.is_valid() {
                continue;
            }
            if lease.step_down_seen() || lease.is_step_down_requested() {
                match self.release().await {
                    Ok(()) | Err(ElectorError::Release(_)) => continue,
                    Err(error) => return Err(error),
                }
            }
            return Ok(output);
        }
    }

    /// Hands over: ends the current tenure, releases the lease so that the next contender's
    /// request acquires it at once, and stands aside for one ttl before contending again.
    /// Releasing a lease this elector does not hold only withdraws its registration.
    ///
    /// A request in flight is answered (or times out) first, so that it cannot land after
    /// the release and take the lease back.
    ///
    /// # Errors
    ///
    /// [`ElectorError::Release`] if the storage did not confirm the release (the lease then
    /// expires after its ttl); [`ElectorError::Stopped`] if the elector has stopped.
    pub async fn release(&self) -> Result<(), ElectorError> {
        let (done, result) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Release(done))
            .map_err(|_| ElectorError::Stopped)?;
        result
            .await
            .map_err(|_| ElectorError::Stopped)?
            .map_err(ElectorError::Release)
    }

    /// Stops campaigning and releases the lease, so that the next contender takes over at its
    /// next request instead of after a ttl. The state becomes
    /// [`Unknown`](LeadershipState::Unknown) (and every [`LeaderLease::lost`] completes)
    /// before the release is sent; stop the work first. Waits for the campaign's task to end.
    /// Shutting down a stopped elector does nothing.
    ///
    /// # Errors
    ///
    /// [`ElectorError::Release`] if the storage did not confirm the release; the elector is
    /// stopped all the same.
    pub async fn shutdown(&self) -> Result<(), ElectorError> {
        let (done, result) = oneshot::channel();
        let outcome = match self.inner.commands.send(Command::Shutdown(done)) {
            Ok(()) => match result.await {
                Ok(released) => released.map_err(ElectorError::Release),
                Err(_) => Ok(()), // stopped meanwhile
            },
            Err(_) => Ok(()), // already stopped
        };
        if let Some(task) = self.take_task() {
            let _ = task.await;
        }
        outcome
    }

    /// Stops the elector at once **without releasing**, as a crash would: the lease stays
    /// held on the storage until its ttl runs out, and every [`LeaderLease`] of this elector
    /// ends. For tests and demonstrations; use [`shutdown`](Self::shutdown) otherwise.
    pub fn abort(&self) {
        if let Some(task) = self.take_task() {
            task.abort();
        }
    }

    fn take_task(&self) -> Option<JoinHandle<()>> {
        self.inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
