//! Sightings kept on the caller's side, for a backend whose storage clock is another
//! machine's.
//!
//! A takeover of a lease that expired without a release needs the taker's own sighting of
//! that tenure, unchanged for a whole ttl on its monotonic clock (see
//! [`Sighting`](crate::domain::Sighting)). A database server's clock is not the contender's,
//! so the adapter in the contender's process keeps what each of its owners saw:
//! [`Sightings::before`] gives the sighting to send with a request, [`Sightings::after`]
//! records what the answer showed.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tenure_domain::{FencingToken, Lease, Sighting, Timestamp};

/// At most this many (lease, owner) pairs are remembered; past it, the ones unused for
/// [`IDLE`] are forgotten, then all. Forgetting is always safe: it only delays a takeover.
const CAPACITY: usize = 65_536;
const IDLE: Duration = Duration::from_secs(600);

/// What the owners of one process have seen of their leases' tenures, on this process's
/// monotonic clock.
#[derive(Debug, Default)]
pub struct Sightings {
    by_lease: Mutex<HashMap<String, HashMap<String, Seen>>>,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    token: FencingToken,
    heartbeat_at: Timestamp,
    /// When an answer first showed this token and heartbeat.
    since: Instant,
    last_used: Instant,
    /// Whether the last answer showed this owner holding the lease.
    held: bool,
}

impl Sightings {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Sightings::default()
    }

    /// The sighting `owner` has of `lease_name`'s tenure, for a request it sends at `sent_at`.
    pub fn before(&self, lease_name: &str, owner: &str, sent_at: Instant) -> Option<Sighting> {
        let mut by_lease = self.by_lease.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = by_lease.get_mut(lease_name)?.get_mut(owner)?;
        seen.last_used = sent_at;
        Some(Sighting {
            fencing_token: seen.token,
            heartbeat_at: seen.heartbeat_at,
            unchanged_for: sent_at.saturating_duration_since(seen.since),
        })
    }

    /// Records that an answer to `owner`, received at `received_at`, showed `lease`: the
    /// sighting goes on if it shows the same token and heartbeat, and starts again otherwise.
    pub fn after(&self, lease: &Lease, owner: &str, received_at: Instant) {
        let mut by_lease = self.by_lease.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = by_lease
            .get_mut(lease.lease_name.as_str())
            .and_then(|owners| owners.get_mut(owner))
        {
            if seen.token != lease.fencing_token || seen.heartbeat_at != lease.heartbeat_at {
                *seen = Seen::new(lease, owner, received_at);
            }
            seen.held = holds(lease, owner);
            seen.last_used = received_at;
            return;
        }
        if by_lease.values().map(HashMap::len).sum::<usize>() >= CAPACITY {
            prune(&mut by_lease, received_at);
        }
        by_lease
            .entry(lease.lease_name.as_str().to_owned())
            .or_default()
            .insert(owner.to_owned(), Seen::new(lease, owner, received_at));
    }

    /// Whether the last answer to `owner` about `lease_name` showed `owner` holding it: its
    /// next request is most likely a renewal, which an adapter may let pass standbys' requests
    /// when its connections are scarce. Only a hint: the answer is decided as always.
    pub fn held_at_last_answer(&self, lease_name: &str, owner: &str) -> bool {
        let by_lease = self.by_lease.lock().unwrap_or_else(PoisonError::into_inner);
        by_lease
            .get(lease_name)
            .and_then(|owners| owners.get(owner))
            .is_some_and(|seen| seen.held)
    }

    /// Forgets what `owner` saw of `lease_name` (after its release, say).
    pub fn forget(&self, lease_name: &str, owner: &str) {
        let mut by_lease = self.by_lease.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(owners) = by_lease.get_mut(lease_name) {
            owners.remove(owner);
            if owners.is_empty() {
                by_lease.remove(lease_name);
            }
        }
    }
}

impl Seen {
    fn new(lease: &Lease, owner: &str, at: Instant) -> Seen {
        Seen {
            token: lease.fencing_token,
            heartbeat_at: lease.heartbeat_at,
            since: at,
            last_used: at,
            held: holds(lease, owner),
        }
    }
}

/// Whether `lease` shows `owner` holding it.
fn holds(lease: &Lease, owner: &str) -> bool {
    lease.owner.as_str() == owner && lease.released_at.is_none()
}

fn prune(by_lease: &mut HashMap<String, HashMap<String, Seen>>, now: Instant) {
    for owners in by_lease.values_mut() {
        owners.retain(|_, seen| now.saturating_duration_since(seen.last_used) < IDLE);
    }
    by_lease.retain(|_, owners| !owners.is_empty());
    if by_lease.values().map(HashMap::len).sum::<usize>() >= CAPACITY {
        by_lease.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tenure_domain::{LeaseName, Owner};

    fn lease(token: u64, heartbeat: i64) -> Lease {
        Lease {
            lease_name: LeaseName::new("l").unwrap(),
            owner: Owner::new("holder").unwrap(),
            priority: 0,
            fencing_token: FencingToken::new(token).unwrap(),
            acquired_at: Timestamp::from_micros(0),
            heartbeat_at: Timestamp::from_micros(heartbeat),
            ttl: Duration::from_secs(1),
            released_at: None,
        }
    }

    #[test]
    fn the_holder_at_the_last_answer_is_told_apart() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        assert!(!sightings.held_at_last_answer("l", "holder"));
        sightings.after(&lease(1, 10), "holder", t0);
        sightings.after(&lease(1, 10), "b", t0);
        assert!(sightings.held_at_last_answer("l", "holder"));
        assert!(!sightings.held_at_last_answer("l", "b"));
        let mut released = lease(1, 5);
        released.released_at = Some(Timestamp::from_micros(5));
        sightings.after(&released, "holder", t0);
        assert!(!sightings.held_at_last_answer("l", "holder"));
    }

    #[test]
    fn a_sighting_lasts_while_the_tenure_and_heartbeat_stay_the_same() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        let after = |d: u64| t0 + Duration::from_millis(d);
        assert_eq!(sightings.before("l", "b", t0), None);
        sightings.after(&lease(1, 10), "b", after(0));
        sightings.after(&lease(1, 10), "b", after(400));
        let seen = sightings.before("l", "b", after(900)).unwrap();
        assert_eq!(seen.unchanged_for, Duration::from_millis(900));
        assert_eq!(seen.heartbeat_at, Timestamp::from_micros(10));
        // A renewal (a new heartbeat) starts the sighting again; so does a new token.
        sightings.after(&lease(1, 20), "b", after(1000));
        assert_eq!(
            sightings
                .before("l", "b", after(1500))
                .unwrap()
                .unchanged_for,
            Duration::from_millis(500)
        );
        sightings.after(&lease(2, 20), "b", after(1600));
        assert_eq!(
            sightings
                .before("l", "b", after(1600))
                .unwrap()
                .unchanged_for,
            Duration::ZERO
        );
        // Owners are kept apart, and a release forgets.
        assert_eq!(sightings.before("l", "c", after(1600)), None);
        sightings.forget("l", "b");
        assert_eq!(sightings.before("l", "b", after(1700)), None);
    }

    #[test]
    fn the_registry_stays_bounded() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        for n in 0..CAPACITY + 10 {
            sightings.after(&lease(1, 0), &format!("owner-{n}"), t0);
        }
        let total: usize = sightings
            .by_lease
            .lock()
            .unwrap()
            .values()
            .map(HashMap::len)
            .sum();
        assert!(total <= CAPACITY, "{total}");
    }
}
