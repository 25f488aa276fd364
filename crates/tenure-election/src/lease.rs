//! One tenure, as seen by the work done under it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tenure_ports::{FencingToken, LeaseName, Owner};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::state::LeadershipState;

/// One uninterrupted tenure of a lease: its fencing token, and signals for when it ends.
///
/// Handed to the work by [`LeaderElector::run_while_leader`](crate::LeaderElector::run_while_leader)
/// and returned by [`LeaderElector::wait_for_leadership`](crate::LeaderElector::wait_for_leadership).
/// Clones watch the same tenure.
///
/// A tenure is named by its token. If leadership lapsed (no renewal confirmed in time) and a
/// later request confirms the *same* token, the contract guarantees that no other owner held
/// the lease in between, so the lease is valid again; [`lost`](Self::lost) may still have
/// completed in the meantime, and work that saw it should have stopped.
///
/// * [`token`](Self::token): stamp every write made under this tenure with it, so that a
///   downstream store can refuse writes from a superseded leader (see
///   [`FencingGuard`](crate::FencingGuard)).
/// * [`lost`](Self::lost): completes the moment leadership can no longer be confirmed: stop
///   acting as leader.
/// * [`step_down_requested`](Self::step_down_requested): completes when a contender with a
///   higher priority waits (or the tenure ended): finish the current unit of work and return.
#[derive(Clone, Debug)]
pub struct LeaderLease {
    lease_name: LeaseName,
    owner: Owner,
    token: FencingToken,
    state: watch::Receiver<LeadershipState>,
    /// Whether the work was told of a step-down during this tenure (shared by clones).
    step_down_seen: Arc<AtomicBool>,
}

/// The tenure ended before the guarded future finished; see [`LeaderLease::until_lost`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LeadershipLost {
    /// The token of the tenure that ended.
    pub token: FencingToken,
}

impl std::fmt::Display for LeadershipLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "leadership (token {}) was lost", self.token)
    }
}

impl std::error::Error for LeadershipLost {}

impl LeaderLease {
    pub(crate) fn new(
        lease_name: LeaseName,
        owner: Owner,
        token: FencingToken,
        state: watch::Receiver<LeadershipState>,
    ) -> Self {
        LeaderLease {
            lease_name,
            owner,
            token,
            state,
            step_down_seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The lease's name.
    pub fn lease_name(&self) -> &LeaseName {
        &self.lease_name
    }

    /// The holder: this elector's owner id.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// This tenure's fencing token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Until when this tenure holds without a further confirmed renewal, or `None` once it
    /// has ended.
    pub fn valid_until(&self) -> Option<Instant> {
        self.current()
    }

    /// Whether this tenure still holds: the elector still holds the lease with this token and
    /// its deadline has not passed. Check it right before a side effect that must not be
    /// done twice, and stamp the side effect with the [token](Self::token) all the same.
    pub fn is_valid(&self) -> bool {
        self.current().is_some()
    }

    /// Whether a step-down is requested now. It may be withdrawn (the higher-priority
    /// contender went away); [`step_down_requested`](Self::step_down_requested) does not wait
    /// for that.
    pub fn is_step_down_requested(&self) -> bool {
        let requested = self.is_valid() && self.state.borrow().is_step_down_requested();
        if requested {
            self.step_down_seen.store(true, Ordering::Release);
        }
        requested
    }

    /// Whether the work was told of a step-down during this tenure, by
    /// [`is_step_down_requested`](Self::is_step_down_requested) or
    /// [`step_down_requested`](Self::step_down_requested), even if it was withdrawn since.
    pub fn step_down_seen(&self) -> bool {
        self.step_down_seen.load(Ordering::Acquire)
    }

    /// Completes when this tenure ends: the deadline passed without a confirmed renewal,
    /// another owner took the lease, the lease was released, or the elector stopped.
    /// Completes at once if it already ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) {
        let mut state = self.state.clone();
        loop {
            let Some(valid_until) = self.current_in(&mut state) else {
                return;
            };
            tokio::select! {
                changed = state.changed() => if changed.is_err() { return },
                () = sleep_until(valid_until) => return,
            }
        }
    }

    /// Completes when a step-down is requested during this tenure, or when the tenure ends:
    /// either way it is time to finish the current unit of work and stop taking new work.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn step_down_requested(&self) {
        let mut state = self.state.clone();
        loop {
            let Some(valid_until) = self.current_in(&mut state) else {
                return;
            };
            if state.borrow().is_step_down_requested() {
                self.step_down_seen.store(true, Ordering::Release);
                return;
            }
            tokio::select! {
                changed = state.changed() => if changed.is_err() { return },
                () = sleep_until(valid_until) => return,
            }
        }
    }

    /// Runs `work` until it finishes or this tenure ends, whichever comes first. If the tenure
    /// ends first, `work` is dropped at its current `.await` and the result is
    /// [`LeadershipLost`].
    pub async fn until_lost<F: Future>(&self, work: F) -> Result<F::Output, LeadershipLost> {
        tokio::select! {
            biased;
            () = self.lost() => Err(LeadershipLost { token: self.token }),
            output = work => Ok(output),
        }
    }

    /// The deadline of this tenure if it still holds.
    fn current(&self) -> Option<Instant> {
        let mut state = self.state.clone();
        self.current_in(&mut state)
    }

    /// The deadline of this tenure in `state`, marking the state seen. `None` if the elector
    /// holds another token or none, if the deadline has passed, or if the elector stopped.
    fn current_in(&self, state: &mut watch::Receiver<LeadershipState>) -> Option<Instant> {
        if state.has_changed().is_err() {
            return None; // the elector stopped: nobody confirms this tenure any more
        }
        let (token, valid_until) = state.borrow_and_update().tenure()?;
        (token == self.token && Instant::now() < valid_until).then_some(valid_until)
    }
}
