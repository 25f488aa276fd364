//! Hooks for the crate's property test, behind the `testing` feature: lease calls with a
//! stand-in for the database clock, and what they decided. An application has no use for
//! them, and a build without the feature has none of them.

use tenure_ports::domain::Transition;
use tenure_ports::{Contender, EventStorageError, LeaseRequest, LeaseResponse, Timestamp};

use crate::lease::{self, Clock};
use crate::storage::{Engine, PostgresEventStorage, on_adapter};

impl PostgresEventStorage {
    /// Runs `request` with `now` standing in for the database clock, and says how the record
    /// changed.
    pub async fn request_lease_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::request(&a.link, &a.leases, request, Clock::At(now)).await
        })
    }

    /// Runs a release with `now` standing in for the database clock; says whether the record
    /// was backdated.
    pub async fn release_lease_at(
        &self,
        lease_name: &str,
        owner: &str,
        now: Timestamp,
    ) -> Result<bool, EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::release(&a.link, &a.leases, lease_name, owner, Clock::At(now)).await
        })
    }

    /// The contenders of `lease_name` live at `now` instead of the database clock.
    pub async fn get_lease_contenders_at(
        &self,
        lease_name: &str,
        now: Timestamp,
    ) -> Result<Vec<Contender>, EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::contenders(&a.link, &a.leases, lease_name, Clock::At(now)).await
        })
    }
}
