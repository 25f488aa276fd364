//! The taker's own evidence that a tenure has ended: a sighting on its monotonic clock.
//!
//! Expiry is judged on the storage's clock, and a storage's clock can step: NTP, an operator,
//! a VM migration. A step forward of a database server's clock makes a lease that its holder
//! renewed a moment ago look expired; a contender that took it over at once would lead beside
//! a holder that, on its own monotonic clock, still has most of a ttl to go. So a **takeover of
//! a lease that merely expired** (not one that was released) also needs the taker to have seen
//! that very tenure (its token and heartbeat) unchanged for a whole ttl on its own monotonic
//! clock, the rule client-go's leader election applies to its observed record. The holder
//! demotes itself a ttl after it *sent* its last confirmed renewal, and the taker's sighting
//! of that renewal begins after it was made, so the holder is gone first, whatever the
//! storage's clock did.
//!
//! The cost: a contender that first sees an expired tenure waits up to one ttl before taking
//! it over (a standby that starts after every other replica died, say). A released lease is
//! taken over at once: the release itself says the tenure ended.
//!
//! An embedded backend's storage clock *is* the contender's monotonic clock (one process), so
//! the record's own heartbeat is the sighting ([`Sighting::on_storage_clock`], what
//! [`decide_request`](crate::decide_request) assumes). A backend whose clock is another
//! machine's (PostgreSQL) keeps its callers' sightings on their side and decides with
//! [`decide_request_sighted`](crate::decide_request_sighted).

use std::time::Duration;

use crate::lease::{FencingToken, Lease};
use crate::time::Timestamp;

/// What a contender has seen of a lease's tenure, on its own monotonic clock: the tenure's
/// token and heartbeat, and for how long it has seen exactly those.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Sighting {
    /// The token of the tenure seen.
    pub fencing_token: FencingToken,
    /// Its heartbeat, as the storage reported it.
    pub heartbeat_at: Timestamp,
    /// How long the contender has seen that token and heartbeat unchanged, measured on its
    /// own monotonic clock, from the first answer that showed them to the sending of the
    /// request it comes with.
    pub unchanged_for: Duration,
}

impl Sighting {
    /// A sighting of `lease` unchanged since its heartbeat, for a storage whose clock is the
    /// contender's own monotonic clock.
    pub fn on_storage_clock(lease: &Lease, now: Timestamp) -> Sighting {
        Sighting {
            fencing_token: lease.fencing_token,
            heartbeat_at: lease.heartbeat_at,
            unchanged_for: now.saturating_duration_since(lease.heartbeat_at),
        }
    }

    /// Whether it is a sighting of `lease`'s current tenure and heartbeat that has lasted at
    /// least the lease's ttl: enough to take over that tenure if it has expired.
    pub fn covers(&self, lease: &Lease) -> bool {
        self.fencing_token == lease.fencing_token
            && self.heartbeat_at == lease.heartbeat_at
            && self.unchanged_for >= lease.ttl
    }
}
