//! The lease records, requests and responses of the contract.

use std::fmt;
use std::time::Duration;

use crate::time::Timestamp;
use crate::validation::{Field, LeaseName, Owner, ValidationError, check_name, validate_ttl};

/// A fencing token: a positive 64-bit integer naming one uninterrupted tenure of a lease.
///
/// It starts at 1, increases by one on every acquisition of a lease that was not live, stays
/// the same across renewals, and never goes backwards. Stamp outgoing work with it so that a
/// downstream store can refuse work from a superseded leader. Tokens are at most `i64::MAX`,
/// so that every backend (PostgreSQL's `bigint` included) can store every token.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a lease's first tenure.
    pub const FIRST: FencingToken = FencingToken(1);

    /// The largest token: `i64::MAX`.
    pub const MAX: FencingToken = FencingToken(i64::MAX as u64);

    /// A token with value `value`, or `None` if it is 0 or above `i64::MAX`.
    pub const fn new(value: u64) -> Option<Self> {
        if value == 0 || value > i64::MAX as u64 {
            None
        } else {
            Some(FencingToken(value))
        }
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The token's value as an `i64` (always positive), for storages that keep signed integers.
    pub const fn get_i64(self) -> i64 {
        self.0 as i64
    }

    /// The token after this one, or `None` once [`FencingToken::MAX`] is reached.
    pub const fn next(self) -> Option<Self> {
        FencingToken::new(self.0 + 1)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A request for a lease: acquisition, renewal and contender registration in one call.
///
/// The fields are plain data; a storage validates them (see [`LeaseRequest::validate`]) and
/// refuses the call with an error naming the field before anything is written.
///
/// ```
/// use std::time::Duration;
/// use tenure_domain::LeaseRequest;
/// let request = LeaseRequest::new("order-dispatcher", "pod-7f3a9", 0, Duration::from_secs(30));
/// assert!(request.validate().is_ok());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LeaseRequest {
    /// The lease's name, unique within the storage.
    pub lease_name: String,
    /// This instance's identity, stable for its lifetime.
    pub owner: String,
    /// Higher wins a planned handover: a live contender with a strictly higher priority than
    /// the holder's makes the holder's answer [`LeaseStatus::LeaderStepDownRequested`].
    pub priority: i64,
    /// How long the lease (and this contender's registration) stays live after this request,
    /// on the storage's clock. 1 ms to 7 days; truncated to whole microseconds.
    pub ttl: Duration,
}

impl LeaseRequest {
    /// A request with the given fields.
    pub fn new(
        lease_name: impl Into<String>,
        owner: impl Into<String>,
        priority: i64,
        ttl: Duration,
    ) -> Self {
        LeaseRequest {
            lease_name: lease_name.into(),
            owner: owner.into(),
            priority,
            ttl,
        }
    }

    /// Checks every field as the contract says, in the order `lease_name`, `owner`, `ttl`.
    pub fn validate(&self) -> Result<ValidLeaseRequest, ValidationError> {
        let ttl = self.check()?;
        Ok(ValidLeaseRequest {
            lease_name: LeaseName::from_checked(&self.lease_name),
            owner: Owner::from_checked(&self.owner),
            priority: self.priority,
            ttl,
        })
    }

    /// Checks every field exactly as [`LeaseRequest::validate`] does, with the same errors in
    /// the same order, without building a [`ValidLeaseRequest`]; returns the ttl truncated to
    /// whole microseconds. For a backend that keeps validated names and answers a request with
    /// them, allocating nothing on its hot path.
    pub fn check(&self) -> Result<Duration, ValidationError> {
        check_name(Field::LeaseName, &self.lease_name)?;
        check_name(Field::Owner, &self.owner)?;
        validate_ttl(self.ttl)
    }

    /// [`LeaseRequest::check`], and the lease's name as a [`LeaseName`]: for a backend that
    /// answers with a name it does not keep, the name checked once and allocated once.
    pub fn check_with_lease_name(&self) -> Result<(LeaseName, Duration), ValidationError> {
        let ttl = self.check()?;
        Ok((LeaseName::from_checked(&self.lease_name), ttl))
    }
}

/// A [`LeaseRequest`] whose fields passed validation; the ttl is in whole microseconds.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ValidLeaseRequest {
    /// The lease's name.
    pub lease_name: LeaseName,
    /// The requesting contender.
    pub owner: Owner,
    /// The contender's priority.
    pub priority: i64,
    /// The requested ttl, between [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL),
    /// in whole microseconds.
    pub ttl: Duration,
}

/// The record of a lease: who holds (or last held) it, with which token, since when.
///
/// A released or expired lease keeps its record, owner and token; liveness is judged with
/// [`Lease::is_expired_at`] against an instant from the storage's clock, never the caller's.
/// How a tenure that is no longer live ended is [`Lease::is_released`]: released by its
/// holder, or expired.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Lease {
    /// The lease's name.
    pub lease_name: LeaseName,
    /// The holder, or the last holder if the lease has expired.
    pub owner: Owner,
    /// The holder's priority, as of its last request.
    pub priority: i64,
    /// The token of the current (or last) tenure.
    pub fencing_token: FencingToken,
    /// When the current tenure began (storage clock).
    pub acquired_at: Timestamp,
    /// When the holder last renewed it (storage clock); backdated by a release.
    pub heartbeat_at: Timestamp,
    /// The ttl of the holder's last request.
    pub ttl: Duration,
    /// When the holder released this tenure (storage clock); `None` while it is held and when
    /// it ended by expiry. A new tenure starts without it. Only records read with
    /// `get_leases` can carry it: a lease call's answer shows a live tenure.
    pub released_at: Option<Timestamp>,
}

impl Lease {
    /// The first instant at which the lease is no longer live: `heartbeat_at + ttl`.
    pub fn expires_at(&self) -> Timestamp {
        self.heartbeat_at.saturating_add(self.ttl)
    }

    /// Whether the lease has expired at `now`, an instant of the **storage's** clock
    /// (for example [`LeaseSnapshot::now`](https://docs.rs/tenure-ports)). A lease is live while
    /// `now < heartbeat_at + ttl`.
    pub fn is_expired_at(&self, now: Timestamp) -> bool {
        now >= self.expires_at()
    }

    /// Whether the lease is live at `now` (the negation of [`Lease::is_expired_at`]).
    pub fn is_live_at(&self, now: Timestamp) -> bool {
        !self.is_expired_at(now)
    }

    /// Whether this tenure ended by a release (rather than by expiry): `released_at` is set
    /// and later than the last heartbeat. (A release backdates the heartbeat below its own
    /// instant; a heartbeat at or after a release belongs to a later tenure or renewal.)
    pub fn is_released(&self) -> bool {
        self.released_at.is_some_and(|at| at > self.heartbeat_at)
    }
}

/// A contender's registration for a lease: recorded by every request, withdrawn by a release.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Contender {
    /// The lease it contends for.
    pub lease_name: LeaseName,
    /// The contender.
    pub owner: Owner,
    /// Its priority, as of its last request.
    pub priority: i64,
    /// When it last requested the lease (storage clock).
    pub last_seen: Timestamp,
    /// The ttl of its last request.
    pub ttl: Duration,
}

impl Contender {
    /// Whether the contender is live at `now` (storage clock): `now < last_seen + ttl`.
    pub fn is_live_at(&self, now: Timestamp) -> bool {
        now < self.last_seen.saturating_add(self.ttl)
    }

    /// Whether the registration is younger than half its ttl at `now`: `last_seen <= now` and
    /// `2 × (now - last_seen) < ttl`. A backend that keeps such a registration as it is
    /// ([`RequestOutcome::keeping_fresh_registration`](crate::RequestOutcome::keeping_fresh_registration))
    /// writes nothing for a standby's request that changes nothing.
    pub fn is_fresh_at(&self, now: Timestamp) -> bool {
        self.last_seen <= now
            && now
                .saturating_duration_since(self.last_seen)
                .saturating_mul(2)
                < self.ttl
    }
}

/// What a caller should do, according to the storage.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum LeaseStatus {
    /// You hold the lease and are the single legitimate processor: process.
    Leader,
    /// You still hold the lease, but a live contender with a strictly higher priority is
    /// waiting: finish the current unit of work, then release.
    LeaderStepDownRequested,
    /// Someone else holds a live lease; you are registered as a contender: keep requesting.
    Standby,
}

impl LeaseStatus {
    /// Whether the caller holds the lease (`Leader` or `LeaderStepDownRequested`).
    pub fn holds_lease(self) -> bool {
        !matches!(self, LeaseStatus::Standby)
    }
}

impl fmt::Display for LeaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseStatus::Leader => "leader",
            LeaseStatus::LeaderStepDownRequested => "leader (step-down requested)",
            LeaseStatus::Standby => "standby",
        })
    }
}

/// The answer to a [`LeaseRequest`].
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LeaseResponse {
    /// What the caller should do.
    pub status: LeaseStatus,
    /// The lease's current token: the caller's own when it holds the lease, the holder's when
    /// it stands by.
    pub fencing_token: FencingToken,
    /// The lease record after the call.
    pub lease: Lease,
}
