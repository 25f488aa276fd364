//! What an elector believes about its lease, as published through its `watch` channel.

use std::fmt;

use tenure_ports::{FencingToken, Owner};
use tokio::time::Instant;

/// An elector's view of its lease. Read it with
/// [`LeaderElector::state`](crate::LeaderElector::state) or follow it with
/// [`LeaderElector::subscribe`](crate::LeaderElector::subscribe).
///
/// `valid_until` is an instant of this process's monotonic clock (tokio's, so that paused-time
/// tests see it move): the instant the last confirmed request was sent, plus the ttl, less the
/// [safety margin](crate::safety_margin). The elector leaves the leader states **at** that
/// instant unless a renewal was confirmed before it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum LeadershipState {
    /// Not known to hold the lease: before the first answer, after a failed or timed-out
    /// request, after leadership lapsed, and after a release.
    Unknown,
    /// Another owner holds the live lease; this elector is registered as a contender. The
    /// holder is this elector's own owner id while it waits out a tenure under that id that
    /// it did not start (another process using the same id, or a predecessor within the ttl).
    Standby {
        /// The holder.
        holder: Owner,
        /// The holder's fencing token.
        token: FencingToken,
    },
    /// This elector holds the lease and is the single legitimate processor.
    Leader {
        /// This tenure's fencing token.
        token: FencingToken,
        /// Until when leadership holds without a further confirmed renewal.
        valid_until: Instant,
    },
    /// This elector still holds the lease, but a live contender with a strictly higher
    /// priority waits: finish the current unit of work, then release.
    StepDownRequested {
        /// This tenure's fencing token.
        token: FencingToken,
        /// Until when leadership holds without a further confirmed renewal.
        valid_until: Instant,
    },
}

impl LeadershipState {
    /// Whether this elector holds the lease (`Leader` or `StepDownRequested`).
    pub fn is_leader(&self) -> bool {
        self.leader_token().is_some()
    }

    /// This elector's own token, while it holds the lease.
    pub fn leader_token(&self) -> Option<FencingToken> {
        self.tenure().map(|(token, _)| token)
    }

    /// Until when leadership holds, while this elector holds the lease.
    pub fn valid_until(&self) -> Option<Instant> {
        self.tenure().map(|(_, valid_until)| valid_until)
    }

    /// Whether this elector stands by: another holds the lease, as the storage said.
    pub fn is_standby(&self) -> bool {
        matches!(self, LeadershipState::Standby { .. })
    }

    /// Whether a step-down is requested.
    pub fn is_step_down_requested(&self) -> bool {
        matches!(self, LeadershipState::StepDownRequested { .. })
    }

    /// The token and deadline of the current tenure, if this elector holds the lease.
    pub(crate) fn tenure(&self) -> Option<(FencingToken, Instant)> {
        match self {
            LeadershipState::Leader { token, valid_until }
            | LeadershipState::StepDownRequested { token, valid_until } => {
                Some((*token, *valid_until))
            }
            LeadershipState::Unknown | LeadershipState::Standby { .. } => None,
        }
    }
}

impl fmt::Display for LeadershipState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeadershipState::Unknown => f.write_str("unknown"),
            LeadershipState::Standby { holder, token } => {
                write!(f, "standby (leader {holder}, token {token})")
            }
            LeadershipState::Leader { token, .. } => write!(f, "leader (token {token})"),
            LeadershipState::StepDownRequested { token, .. } => {
                write!(f, "leader, step-down requested (token {token})")
            }
        }
    }
}
