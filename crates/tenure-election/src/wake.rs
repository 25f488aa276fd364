//! Wake-ups: requesting at once when the storage says the lease changed, instead of at the
//! next poll.
//!
//! When the storage has [`Capability::LeaseChanges`], a campaign subscribes once and, between
//! its requests, also waits for a change of its lease: a release (a standby can acquire it
//! now) or a step-down request (the holder hears `LeaderStepDownRequested` at its next
//! renewal, so it renews now), or missed changes. Any of them makes it send its request at
//! once; the poll's schedule is not moved, so the poll stays the correctness path: a lost
//! wake-up costs at most one poll interval, never safety, since a wake-up only ever causes an
//! earlier request whose answer is judged as always. A campaign ignores wake-ups while it
//! stands aside after a release, so that the contender it released for gets the lease.
//!
//! A storage without the capability, or whose subscription ends, leaves the campaign polling.

use std::future::pending;

use tenure_ports::{Capability, EventStorage, LeaseChanges, LeaseName};
use tracing::debug;

/// A subscription to `storage`'s lease changes, if it has them.
pub(crate) fn subscribe(storage: &dyn EventStorage) -> Option<Box<dyn LeaseChanges>> {
    if !storage.capabilities().contains(Capability::LeaseChanges) {
        return None;
    }
    match storage.lease_changes() {
        Ok(changes) => Some(changes),
        Err(error) => {
            debug!(%error, "no lease changes: polling only");
            None
        }
    }
}

/// Waits for the next change of the subscription (forever without one); `true` if it should
/// wake a campaign for `lease_name`. A subscription that ends is dropped (polling only).
///
/// # Cancel safety
///
/// Cancel safe, as [`LeaseChanges::next`] is.
pub(crate) async fn next(
    changes: &mut Option<Box<dyn LeaseChanges>>,
    lease_name: &LeaseName,
) -> bool {
    let Some(subscription) = changes.as_mut() else {
        return pending().await;
    };
    match subscription.next().await {
        Some(change) => change.wakes(lease_name),
        None => {
            *changes = None;
            false
        }
    }
}
