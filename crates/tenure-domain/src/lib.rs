//! The lease rules of Tenure, and nothing else.
//!
//! This crate holds the types of the lease contract ([`LeaseRequest`], [`LeaseResponse`],
//! [`Lease`], [`FencingToken`], [`Contender`], the storage-clock [`Timestamp`]), the validation
//! of every input ([`LeaseName`], [`Owner`], [`validate_ttl`], each failure a
//! [`ValidationError`] naming the field and the reason), and the lease state machine as pure
//! functions ([`decide_request`], [`decide_release`]). Every backend applies these functions;
//! no backend makes a lease decision of its own.
//!
//! It is not a storage and not a runtime: it does no I/O, reads no clock, spawns nothing and
//! depends on no async runtime. The storage SPI lives in `tenure-ports`, the backends in
//! `tenure-memory` and `tenure-postgres`, the election loop in `tenure-election`.
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
