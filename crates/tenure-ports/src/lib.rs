//! The storage SPI of Tenure: what a backend implements and what an application calls.
//!
//! [`EventStorage`] is the one trait: async, `Send + Sync`, and object safe, so that an
//! application can hold an `Arc<dyn EventStorage>` and switch backends by configuration.
//! [`Capability`] says which optional parts a backend offers; [`EventStorageError`] is the one
//! error type. Embedded backends take their storage clock from a [`Clock`].
//!
//! This crate makes no lease decisions (they live in `tenure-domain`, re-exported here as
//! [`domain`]) and contains no backend: see `tenure-memory` and `tenure-postgres`, and
//! `tenure-tck` for the conformance kit every backend must pass.
//!
//! # Writing a backend
//!
//! Implement [`EventStorage`]: `name` and `capabilities` are required; every lease method has a
//! default body that returns [`EventStorageError::Unsupported`], so an adapter without leases
//! compiles and the conformance kit skips its lease scenarios. A backend that offers leases:
//!
//! 1. validates every input ([`LeaseRequest::validate`], [`LeaseName::new`], [`Owner::new`])
//!    and returns [`EventStorageError::InvalidRequest`] before writing anything;
//! 2. serializes the calls on one lease, reads the record, the lease's contenders and `now`
//!    from its own clock;
//! 3. applies [`decide_request`](domain::decide_request) or
//!    [`decide_release`](domain::decide_release), writing exactly what the outcome says.
//!
//! Then it runs `tenure_tck::tck_suite!` in its tests.

#![deny(missing_docs)]

mod capability;
mod clock;
mod error;

pub use async_trait::async_trait;
pub use capability::{Capabilities, Capability};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{BoxError, EventStorageError};

/// The lease rules, re-exported so that a backend needs only this crate.
pub use tenure_domain as domain;
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

/// A storage of events, bookmarks and leases.
///
/// Every method may be called concurrently from many tasks and threads, on the same value or
/// on clones of it. Errors follow [`EventStorageError`]; in particular
/// [`EventStorageError::Unavailable`] means "not confirmed", never "refused".
///
/// # Cancel safety
///
/// Dropping a lease call's future before it completes leaves the outcome unknown, exactly as
/// a timeout does: the call may or may not have taken effect. The storage stays consistent.
#[async_trait]
pub trait EventStorage: Send + Sync + std::fmt::Debug {
    /// A short name of the backend, e.g. `memory` or `postgres`.
    fn name(&self) -> &str;

    /// The optional parts of the SPI this backend offers.
    fn capabilities(&self) -> Capabilities;

    /// Acquires, renews, or registers as a contender for a lease, in one atomic step, and says
    /// what the caller should do. See the lease contract for the rules.
    async fn request_lease(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseResponse, EventStorageError> {
        let _ = request;
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Releases `lease_name` if `owner` holds it (it is expired at once, keeping its token) and
    /// withdraws `owner`'s registration. Releasing a lease one does not hold does nothing and
    /// is not an error.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> Result<(), EventStorageError> {
        let _ = (lease_name, owner);
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Every lease record, expired ones included, with the storage's `now`.
    async fn get_leases(&self) -> Result<LeaseSnapshot, EventStorageError> {
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// The live contenders of `lease_name` (the holder included, if it is still requesting),
    /// ordered by priority, highest first, then by owner.
    async fn get_lease_contenders(
        &self,
        lease_name: &str,
    ) -> Result<Vec<Contender>, EventStorageError> {
        let _ = lease_name;
        Err(EventStorageError::Unsupported(Capability::Lease))
    }

    /// Releases the storage's resources. Every later call, on this value or on any clone of
    /// it, fails with [`EventStorageError::Closed`]. Closing twice is harmless. Leases held
    /// through the storage are not released by closing it: they expire.
    async fn close(&self) -> Result<(), EventStorageError> {
        Ok(())
    }
}

/// Orders contenders as [`EventStorage::get_lease_contenders`] promises: priority, highest
/// first, then owner.
pub fn sort_contenders(contenders: &mut [Contender]) {
    contenders.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.owner.cmp(&b.owner))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Bare;

    #[async_trait]
    impl EventStorage for Bare {
        fn name(&self) -> &str {
            "bare"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }
    }

    fn assert_send_sync<T: Send + Sync>(_: &T) {}

    #[tokio::test]
    async fn defaults_are_unsupported_and_dyn_works_across_spawn() {
        let storage: Arc<dyn EventStorage> = Arc::new(Bare);
        assert_send_sync(&storage);
        let handle = tokio::spawn({
            let storage = Arc::clone(&storage);
            async move {
                storage
                    .request_lease(&LeaseRequest::new(
                        "l",
                        "o",
                        0,
                        std::time::Duration::from_secs(1),
                    ))
                    .await
            }
        });
        let result = handle.await.unwrap();
        assert!(matches!(
            result,
            Err(EventStorageError::Unsupported(Capability::Lease))
        ));
        assert!(matches!(
            storage.release_lease("l", "o").await,
            Err(EventStorageError::Unsupported(Capability::Lease))
        ));
        assert!(storage.get_leases().await.is_err());
        assert!(storage.get_lease_contenders("l").await.is_err());
        assert!(storage.close().await.is_ok());
        assert_eq!(storage.name(), "bare");
    }

    #[test]
    fn errors_keep_their_source() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let err = EventStorageError::unavailable_with("request_lease", io);
        assert!(err.is_unconfirmed());
        assert_eq!(err.to_string(), "storage unavailable: request_lease");
        assert_eq!(err.source().unwrap().to_string(), "reset by peer");
        let invalid: EventStorageError = tenure_domain::LeaseName::new("").unwrap_err().into();
        assert_eq!(invalid.to_string(), "invalid lease_name: must not be empty");
    }

    #[test]
    fn system_clock_never_goes_backwards() {
        let clock = SystemClock::new();
        let mut last = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }
}
