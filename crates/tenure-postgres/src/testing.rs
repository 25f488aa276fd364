//! Hooks for the crate's tests, behind the `testing` feature: lease calls with a stand-in for
//! the database clock, and what they decided; how many calls wait in the standbys' lane. An
//! application has no use for them, and a build without the feature has none of them.

use tenure_ports::domain::Transition;
use tenure_ports::{
    Contender, EventStorageError, LeaseRequest, LeaseResponse, Sighting, Timestamp,
};

use crate::lease::{self, Clock, Version};
use crate::storage::{Engine, PostgresEventStorage, on_adapter};

impl PostgresEventStorage {
    /// Runs `request` through `request_lease_v1` (no sighting: the previous release's rule)
    /// with `now` standing in for the database clock, and says how the record changed.
    pub async fn request_lease_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        self.request_lease_with(request, now, Version::V1).await
    }

    /// Runs `request` through `request_lease_v4` (the function of a caller that held the
    /// lease at its last answer) with exactly `sighting` (not the storage's
    /// own, and nothing is recorded) and `now` standing in for the database clock, and says
    /// how the record changed.
    pub async fn request_lease_sighted_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
        sighting: Option<Sighting>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        self.request_lease_with(request, now, Version::CurrentGiven(sighting))
            .await
    }

    /// [`request_lease_sighted_at`](Self::request_lease_sighted_at) through
    /// `request_lease_v5`, the function of a caller that did not hold the lease at its last
    /// answer (which must decide the same for any caller).
    pub async fn request_lease_unheld_sighted_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
        sighting: Option<Sighting>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        self.request_lease_with(request, now, Version::UnheldGiven(sighting))
            .await
    }

    /// [`request_lease_sighted_at`](Self::request_lease_sighted_at) as a holder's own call
    /// makes it: the renewal statement first (one `UPDATE`, see
    /// [`renewal_statement_at`](Self::renewal_statement_at)), then `request_lease_v4` where it
    /// answers nothing (which must decide the same for any caller).
    pub async fn request_lease_renewing_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
        sighting: Option<Sighting>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        self.request_lease_with(
            request,
            now,
            Version::RenewalGiven {
                sighting,
                renewal: None,
            },
        )
        .await
    }

    /// [`request_lease_renewing_at`](Self::request_lease_renewing_at) with `statement` in
    /// place of the renewal statement (same parameters), for a negative control.
    pub async fn request_lease_renewing_with_at(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
        sighting: Option<Sighting>,
        statement: &str,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        let statement: crate::connection::Sql = statement.into();
        self.request_lease_with(
            request,
            now,
            Version::RenewalGiven {
                sighting,
                renewal: Some(&statement),
            },
        )
        .await
    }

    /// The text of the renewal statement that a holder's own call sends first, as the
    /// `…_renewing_at` calls send it: with the clock as its fifth parameter (µs since the Unix
    /// epoch); a negative control edits it.
    pub fn renewal_statement_at(&self) -> String {
        on_adapter!(self.engine(), a => a.leases.renewal(Some(0)).to_string())
    }

    /// Holders' renewals, each with exactly its sighting, carried together in one call as a
    /// renewal that got a connection carries those that wait for one, with `now` standing in
    /// for the database clock: the renewal statement for many (one `UPDATE` that renews every
    /// unchallenged holder whose lease appears once among them), then `request_leases_v1` for
    /// the requests it left, then `request_lease_v4` for any left undecided. The answers, in
    /// order; nothing is recorded.
    pub async fn request_leases_renewing_at(
        &self,
        requests: &[(LeaseRequest, Option<Sighting>)],
        now: Timestamp,
    ) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
        self.request_leases_carried_at((requests, true), now, None)
            .await
    }

    /// [`request_leases_renewing_at`](Self::request_leases_renewing_at) with `statement` in
    /// place of the renewal statement for many (same parameters), for a negative control.
    pub async fn request_leases_renewing_with_at(
        &self,
        requests: &[(LeaseRequest, Option<Sighting>)],
        now: Timestamp,
        statement: &str,
    ) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
        self.request_leases_carried_at((requests, true), now, Some(statement))
            .await
    }

    /// The text of the renewal statement for many, as
    /// [`request_leases_renewing_at`](Self::request_leases_renewing_at) sends it: with the
    /// clock as its fifth parameter (µs since the Unix epoch).
    pub fn renewals_statement_at(&self) -> String {
        on_adapter!(self.engine(), a => a.leases.renewals(Some(0)).to_string())
    }

    /// Standbys' requests (callers that did not hold the lease at their last answer), each with
    /// exactly its sighting, carried together in one call as a standby's request that got a
    /// turn and a connection carries those that wait, with `now` standing in for the database
    /// clock: the kept standbys' read (one `SELECT` that answers every sighted request whose
    /// registration is fresh), then `request_leases_v1` for the requests it left, then
    /// `request_lease_v5` for any left undecided. The answers, in order; nothing is recorded.
    pub async fn request_leases_standing_by_at(
        &self,
        requests: &[(LeaseRequest, Option<Sighting>)],
        now: Timestamp,
    ) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
        self.request_leases_carried_at((requests, false), now, None)
            .await
    }

    /// [`request_leases_standing_by_at`](Self::request_leases_standing_by_at) with `statement`
    /// in place of the kept standbys' read (same parameters), for a negative control.
    pub async fn request_leases_standing_by_with_at(
        &self,
        requests: &[(LeaseRequest, Option<Sighting>)],
        now: Timestamp,
        statement: &str,
    ) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
        self.request_leases_carried_at((requests, false), now, Some(statement))
            .await
    }

    /// Requests carried together, holders' renewals if `held` (else standbys' requests), with
    /// `statement` (if any) in place of the statement sent first.
    async fn request_leases_carried_at(
        &self,
        (requests, held): (&[(LeaseRequest, Option<Sighting>)], bool),
        now: Timestamp,
        statement: Option<&str>,
    ) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
        let statement: Option<crate::connection::Sql> = statement.map(Into::into);
        on_adapter!(self.engine(), a => {
            lease::request_carried_at(&a.link, &a.leases, (requests, held), now, statement.as_ref())
                .await
        })
    }

    /// The text of the kept standbys' read, as
    /// [`request_leases_standing_by_at`](Self::request_leases_standing_by_at) sends it: with
    /// the clock as its fifth parameter (µs since the Unix epoch).
    pub fn kept_statement_at(&self) -> String {
        on_adapter!(self.engine(), a => a.leases.kept(Some(0)).to_string())
    }

    /// One lease request as `version` makes it, with `now` standing in for the database clock.
    async fn request_lease_with(
        &self,
        request: &LeaseRequest,
        now: Timestamp,
        version: Version<'_>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        on_adapter!(self.engine(), a => {
            lease::request(&a.link, &a.leases, &a.carpools, request, Clock::At(now), version).await
        })
    }

    /// Makes this storage's lease requests call `request_lease_v1`, without a sighting, as a
    /// process of the previous release does (`true`), or `request_lease_v4` again (`false`).
    /// For the rolling-upgrade test, and the clock-step test's negative control.
    pub fn call_request_lease_v1(&self, v1: bool) {
        on_adapter!(self.engine(), a => {
            a.calls_v1.store(v1, std::sync::atomic::Ordering::Relaxed)
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

    /// How many standbys' requests wait for a turn of the lane that keeps them from taking
    /// every connection: a test that orders callers in the lane waits for them to be there.
    pub fn waiting_in_lane(&self) -> usize {
        on_adapter!(self.engine(), a => a.link.waiting_in_lane())
    }

    /// How many renewals wait for a connection, to be carried by the first that gets one (those
    /// whose callers left counted until they are dropped).
    pub fn renewals_waiting(&self) -> usize {
        on_adapter!(self.engine(), a => a.carpools.renewals.waiting())
    }
}
