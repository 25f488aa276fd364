//! Being told that a lease changed: the optional wake-up path of [`Capability::LeaseChanges`].
//!
//! A storage that can tell its callers when a lease was released, acquired, or asked to step
//! down hands out subscriptions ([`EventStorage::lease_changes`]); an elector that has one
//! requests at once on a change instead of at its next poll, so that a graceful handover takes
//! milliseconds instead of up to a poll interval. The poll stays the correctness path: a change
//! that is never delivered costs at most one poll interval, never safety, because a change only
//! ever causes an earlier `request_lease`, whose answer is decided as always.
//!
//! A subscription that may have missed changes (it fell behind, or the storage lost its
//! notification channel and got it back) says so with [`LeaseChange::Missed`]: every waiting
//! caller then requests at once.
//!
//! [`Capability::LeaseChanges`]: crate::Capability::LeaseChanges
//! [`EventStorage::lease_changes`]: crate::EventStorage::lease_changes

use std::fmt::Debug;

use crate::LeaseName;

/// What happened to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseChangeKind {
    /// Its holder released it: it can be acquired at once.
    Released,
    /// A new tenure began (a new fencing token). Informational: it wakes no elector, and a
    /// storage may leave out a lease's first tenure, which nobody can be waiting for
    /// (PostgreSQL does, so that a cold start of thousands of new leases does not serialize
    /// their commits on its notification lock).
    Acquired,
    /// A live contender with a higher priority than the holder's registered: the holder's
    /// next renewal is answered `LeaderStepDownRequested`.
    StepDownRequested,
}

/// One notification of a subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseChange {
    /// `lease_name` changed as `kind` says.
    Changed {
        /// The lease.
        lease_name: LeaseName,
        /// What happened.
        kind: LeaseChangeKind,
    },
    /// Changes may have been missed: every lease may have changed.
    Missed,
}

impl LeaseChange {
    /// Whether a caller waiting on `lease_name` should request it now: a release or a
    /// step-down request of that lease, or missed changes.
    pub fn wakes(&self, lease_name: &LeaseName) -> bool {
        match self {
            LeaseChange::Changed {
                lease_name: l,
                kind,
            } => {
                l == lease_name
                    && matches!(
                        kind,
                        LeaseChangeKind::Released | LeaseChangeKind::StepDownRequested
                    )
            }
            LeaseChange::Missed => true,
        }
    }
}

/// A subscription to a storage's lease changes.
///
/// # Cancel safety
///
/// [`next`](LeaseChanges::next) is cancel safe in every implementation of this crate's
/// backends: dropping its future loses no change (the next call returns it). An
/// implementation must keep that promise: an elector waits on it inside `select!`.
#[crate::async_trait]
pub trait LeaseChanges: Send + Sync + Debug {
    /// Waits for the next change; `None` once no change can come (the storage is gone).
    async fn next(&mut self) -> Option<LeaseChange>;
}
