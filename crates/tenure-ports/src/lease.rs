//! Leases: the types a lease call takes and answers, the snapshot of every lease, and the order
//! of contenders.
//!
//! The lease half of the SPI, beside the event half in `events`: the
//! [`EventStorage`](crate::EventStorage) methods `request_lease`, `release_lease`, `get_leases`
//! and `get_lease_contenders` take and return these. The rules themselves (who leads, when a
//! lease expires, when a holder is asked to step down) are the domain's, in `tenure-domain`;
//! the types are re-exported from it so that a backend needs only this crate.

pub use tenure_domain::{
    Contender, FencingToken, Lease, LeaseName, LeaseRequest, LeaseResponse, LeaseStatus, Owner,
    Timestamp,
};

/// A snapshot of every lease record, with the storage's clock at the time of the snapshot.
///
/// Judge liveness with `lease.is_expired_at(snapshot.now)`: both instants come from the same
/// clock, the storage's.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LeaseSnapshot {
    /// The storage's clock when the snapshot was taken.
    pub now: Timestamp,
    /// Every lease record, expired ones included, ordered by lease name.
    pub leases: Vec<Lease>,
}

impl LeaseSnapshot {
    /// The leases that are live at [`LeaseSnapshot::now`].
    pub fn live(&self) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(|l| l.is_live_at(self.now))
    }

    /// The record of `lease_name`, if there is one.
    pub fn get(&self, lease_name: &str) -> Option<&Lease> {
        self.leases.iter().find(|l| l.lease_name == *lease_name)
    }
}

/// Orders contenders as [`get_lease_contenders`] promises: priority, highest first, then
/// owner.
///
/// [`get_lease_contenders`]: crate::EventStorage::get_lease_contenders
pub fn sort_contenders(contenders: &mut [Contender]) {
    contenders.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.owner.cmp(&b.owner))
    });
}
