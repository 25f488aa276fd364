//! The lease rules of Tenure, and nothing else.
//!
//! This crate holds the types of the lease contract ([`LeaseRequest`], [`LeaseResponse`],
//! [`Lease`], [`FencingToken`], [`Contender`], the storage-clock [`Timestamp`]), the validation
//! of every input ([`LeaseName`], [`Owner`], [`validate_ttl`], each failure a
//! [`ValidationError`] naming the field and the reason), and the lease state machine as pure
//! functions ([`decide_request`], [`decide_release`]). Every backend applies these functions;
//! no backend makes a lease decision of its own (one that does, in SQL for speed, proves that
//! it agrees with `tenure_tck::differential::check_decisions`).
//!
//! It is not a storage and not a runtime: it does no I/O, reads no clock, spawns nothing and
//! depends on no async runtime. The storage SPI lives in `tenure-ports`, the backends in
//! `tenure-memory`, `tenure-file` and `tenure-postgres`, the election loop in
//! `tenure-election`.
//!
//! ```
//! use std::time::Duration;
//! use tenure_domain::{decide_request, LeaseRequest, LeaseStatus, Timestamp};
//!
//! let now = Timestamp::from_micros(0);
//! let a = LeaseRequest::new("order-dispatcher", "pod-a", 0, Duration::from_secs(30)).validate()?;
//! let b = LeaseRequest::new("order-dispatcher", "pod-b", 0, Duration::from_secs(30)).validate()?;
//!
//! let first = decide_request(None, &[], &a, now)?;
//! assert_eq!(first.response.status, LeaseStatus::Leader);
//!
//! let second = decide_request(Some(first.record()), &[first.contender.clone()], &b, now)?;
//! assert_eq!(second.response.status, LeaseStatus::Standby);
//! assert_eq!(second.response.fencing_token, first.response.fencing_token);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The lease contract
//!
//! What every backend does, and what a caller may rely on. The storage operations are those of
//! `tenure_ports::EventStorage`: `request_lease`, `release_lease`, `get_leases`,
//! `get_lease_contenders`; the rules below are made by this crate's functions.
//!
//! ## Valid input
//!
//! * `lease_name` and `owner`: 1 to [`MAX_NAME_BYTES`] (255) bytes of UTF-8, no control
//!   characters (NUL included).
//! * `ttl`: from [`MIN_TTL`] (1 ms) to [`MAX_TTL`] (7 days), truncated to whole microseconds.
//! * `priority`: any `i64`.
//!
//! Anything else is refused with a [`ValidationError`] naming the [`Field`] and the
//! [`Reason`] (a backend returns it as `EventStorageError::InvalidRequest`) before anything is
//! written. The same rules apply to a release.
//!
//! ## A request at storage time `now`
//!
//! All steps for one lease happen atomically with respect to every other call on that lease
//! ([`decide_request`]).
//!
//! 1. **The contender is registered**: the pair (lease, owner) is recorded with the request's
//!    priority and ttl and `last_seen = now` (a [`Contender`]). A contender is *live* while
//!    `now < last_seen + ttl`. A backend whose every write costs (a database server) may keep
//!    a standby's registration as it is while it has the request's priority and ttl and is
//!    younger than half its ttl ([`RequestOutcome::keeping_fresh_registration`]): a contender
//!    whose requests come less than a ttl apart stays live throughout either way, and one that
//!    stops lapses between half a ttl and a ttl after its last request.
//! 2. **No record yet**: it is created with this owner, fencing token 1,
//!    `acquired_at = heartbeat_at = now`, the request's priority and ttl. The caller holds it.
//! 3. **The same owner holds the live record** (`now < heartbeat_at + ttl`): a renewal.
//!    `heartbeat_at = now`; ttl and priority take the request's values; the token and
//!    `acquired_at` are unchanged. **The same owner, but the record expired or was
//!    released**: a new acquisition, not a renewal: token + 1, `acquired_at = heartbeat_at =
//!    now`. A token names one uninterrupted tenure, not an owner: an owner id reused by a
//!    restarted process, or a holder that lapsed while paused, never shares a token with the
//!    work it did before the lapse.
//! 4. **Another owner holds the live record**: the record is not touched; the answer is
//!    [`LeaseStatus::Standby`] with the holder's current token.
//! 5. **Another owner's record has expired**: a takeover. The caller becomes the owner with
//!    token + 1, `acquired_at = heartbeat_at = now`, the request's priority and ttl. If the record
//!    was released, at once; if it merely expired, only once the caller has itself seen that
//!    tenure (its token and heartbeat) unchanged for a whole ttl on its own monotonic clock (a
//!    [`Sighting`] that [covers](Sighting::covers) the record); until then the caller stands by
//!    (as in rule 4) and the record is not touched. On an embedded backend the storage's clock
//!    is the caller's monotonic clock and the record's own heartbeat is that sighting
//!    ([`decide_request`]); a backend on another machine's clock passes the caller's
//!    ([`decide_request_sighted`]).
//! 6. **The status of a holder** (cases 2, 3 and 5): [`LeaseStatus::LeaderStepDownRequested`]
//!    when some live contender other than the holder has a priority strictly greater than the
//!    holder's (just updated) priority; [`LeaseStatus::Leader`] otherwise. Equal or lower
//!    priorities never ask for it. The storage never revokes a live lease: a holder that keeps
//!    renewing keeps it.
//! 7. **A bounded registry**: contenders that stopped requesting are not live and never count;
//!    they are pruned, so that any number of owners coming and going leaves the registry
//!    bounded.
//!
//! Expiry is exact to the microsecond: at `now == heartbeat_at + ttl` the lease has expired.
//!
//! ## A release
//!
//! [`decide_release`]: if `owner` holds the record, its heartbeat is backdated so that the
//! lease is expired at the storage's `now` (`heartbeat_at = min(heartbeat_at, now - ttl)`);
//! the record, its owner and its token stay (a release never deletes it, so the token
//! survives). The owner's registration is withdrawn, whether or not it held the lease.
//! Releasing a lease one does not hold, one that was taken over, one that does not exist, or
//! twice, does nothing else and is not an error; a release never touches a record held by
//! another owner. The next request by any contender acquires the lease at once (rule 3 or 5),
//! with a new token, without waiting out a ttl.
//!
//! ## Inspection
//!
//! `get_leases` answers a snapshot of every record, expired ones included, with the storage's
//! `now` at the time of the snapshot, so that liveness is judged on the storage's clock
//! ([`Lease::is_expired_at`]) rather than the caller's. `get_lease_contenders` answers the
//! live contenders of one lease, highest priority first.
//!
//! ## Clocks
//!
//! Liveness is judged on the storage's clock ([`Timestamp`], microseconds), never on a
//! contender's. The embedded backends measure it on a monotonic clock (wall-clock instants are
//! for display only). A database backend reads the database's clock in the same statement
//! that decides. A step of a server's clock must not make two leaders: a takeover of a lease
//! that merely expired (not one that was released) also requires the taker to have seen that
//! tenure unchanged for a whole ttl on its own monotonic clock (rule 5; the PostgreSQL adapter
//! keeps its callers' sightings with `tenure_ports::Sightings` and sends them with every
//! request). The holder demotes itself a ttl after it *sent* its last confirmed renewal; the
//! taker's sighting of that renewal begins after it was written, so the holder has stopped
//! first, whatever the server's clock did.
//!
//! **The cost**: a contender whose first sight of a lease comes after it expired without a
//! release waits up to one more ttl before taking it over. A standby that starts after every
//! other replica died (a crash, not a release) leads up to one ttl later than the expiry alone
//! would allow; a released lease is taken over at once.
//!
//! ## Fencing tokens
//!
//! A [`FencingToken`] starts at 1, increases by one on every acquisition of a lease that was
//! not live (a takeover, or the same owner coming back after expiry or release), is stable
//! across the renewals of a live lease, and never resets or goes backwards: not on release,
//! not on the restart of a persistent backend (the file backend, which never persists a lease,
//! persists each lease's highest issued token at every acquisition, and continues above it
//! after reopening, with no lease held). Every response carries the current token: the
//! caller's own when it holds the lease, the holder's when it stands by. Stamp outgoing work
//! with it, so that downstream can refuse work from a superseded leader.
//!
//! ## What the caller must do
//!
//! Between two responses to the same owner that both hold the lease with the same token, no
//! other owner has held it, *provided* the caller stops acting as leader as soon as it cannot
//! confirm a renewal within the ttl it asked for, measured on its own monotonic clock from the
//! moment it **sent** the last request that succeeded. A failed or hung request is not
//! evidence of leadership. Poll at about a third of the ttl. `tenure-election` does all of
//! this for a caller, and never adopts a tenure it did not start: a first answer that renews a
//! lease acquired before the elector started (the same owner id used by another live process,
//! or by a predecessor that died within the ttl) is not leadership; it waits for that tenure to
//! end and acquires a new one, with a new token.

#![deny(missing_docs)]

mod lease;
mod machine;
mod sighting;
mod time;
mod validation;

pub use lease::{
    Contender, FencingToken, Lease, LeaseRequest, LeaseResponse, LeaseStatus, ValidLeaseRequest,
};
pub use machine::{
    DecisionError, RecordWrite, ReleaseOutcome, RequestOutcome, Transition, decide_release,
    decide_request, decide_request_sighted,
};
pub use sighting::Sighting;
pub use time::Timestamp;
pub use validation::{
    Field, LeaseName, MAX_NAME_BYTES, MAX_TTL, MIN_TTL, Owner, Reason, ValidationError, check_name,
    validate_ttl,
};
