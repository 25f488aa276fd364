//! Sightings kept on the caller's side, for a backend whose storage clock is another
//! machine's.
//!
//! A takeover of a lease that expired without a release needs the taker's own sighting of
//! that tenure, unchanged for a whole ttl on its monotonic clock (see
//! [`Sighting`](crate::domain::Sighting)). A database server's clock is not the contender's,
//! so the adapter in the contender's process keeps what each of its owners saw:
//! [`Sightings::before`] gives the sighting to send with a request, [`Sightings::after`]
//! records what the answer showed.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tenure_domain::{FencingToken, Lease, Sighting, Timestamp};

/// At most this many (lease, owner) pairs are remembered; past it, the ones unused for
/// [`IDLE`] are forgotten, then the least recently used until three quarters of it are left
/// (so that each pruning frees a quarter at least, and the walks over the table it costs are
/// paid once per many insertions). Forgetting is safe, but not free: it delays a takeover,
/// and an owner that held its lease loses the hint that its next request is a renewal
/// ([`Sightings::held_at_last_answer`]), which an adapter uses to let renewals pass standbys'
/// requests when its connections are scarce. So the pairs in use are never the ones forgotten
/// while others are older, and the bound is far above what one process calls for: a
/// table of 65,536 pairs, emptied whenever it filled, made every leader of a process with
/// 81,000 pairs (27,000 leases × 3 contenders) a newcomer every few seconds, and a third of
/// their renewals late under overload (`docs/benchmarks.md`, 2026-12-07). About 130 bytes a
/// pair: 34 MB when full.
const CAPACITY: usize = 1 << 18;
const IDLE: Duration = Duration::from_secs(600);

/// What the owners of one process have seen of their leases' tenures, on this process's
/// monotonic clock.
#[derive(Debug, Default)]
pub struct Sightings {
    table: Mutex<Table>,
}

/// The sightings, one per (lease, owner) pair, in one map keyed by the pair's bytes
/// ([`Table::key`]): a look-up hashes once and probes once. (A map of leases holding a map of
/// owners hashed twice and probed twice, and it was the adapter's costliest step of a lease call
/// after the decoding of the answer: about 1,100 instructions of the 24,000 that the benchmark
/// process spent per renewal without TLS, and more in time, as each probe of a large table
/// misses the cache.)
#[derive(Debug, Default)]
struct Table {
    by_pair: HashMap<Box<[u8]>, Seen>,
    /// The key of the last look-up, kept so that a look-up allocates nothing.
    scratch: Vec<u8>,
}

/// What an owner's last answer about a lease left for its next request
/// ([`Sightings::last_answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastAnswer {
    /// The sighting to send.
    pub sighting: Sighting,
    /// Whether the answer showed the owner holding the lease: its next request is most likely
    /// a renewal ([`Sightings::held_at_last_answer`]).
    pub held: bool,
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
        self.last_answer(lease_name, owner, sent_at)
            .map(|last| last.sighting)
    }

    /// What `owner`'s last answer about `lease_name` left for a request it sends at `sent_at`,
    /// in one look at the table: the sighting to send ([`before`](Self::before)) and whether
    /// it held the lease ([`held_at_last_answer`](Self::held_at_last_answer)). `None` when it
    /// had no answer (or it was forgotten).
    pub fn last_answer(
        &self,
        lease_name: &str,
        owner: &str,
        sent_at: Instant,
    ) -> Option<LastAnswer> {
        let mut table = self.lock();
        let seen = table.get_mut(lease_name, owner)?;
        seen.last_used = sent_at;
        Some(LastAnswer {
            sighting: Sighting {
                fencing_token: seen.token,
                heartbeat_at: seen.heartbeat_at,
                unchanged_for: sent_at.saturating_duration_since(seen.since),
            },
            held: seen.held,
        })
    }

    /// Records that an answer to `owner`, received at `received_at`, showed `lease`: the
    /// sighting goes on if it shows the same token and heartbeat, and starts again otherwise.
    pub fn after(&self, lease: &Lease, owner: &str, received_at: Instant) {
        let mut table = self.lock();
        if let Some(seen) = table.get_mut(lease.lease_name.as_str(), owner) {
            if seen.token != lease.fencing_token || seen.heartbeat_at != lease.heartbeat_at {
                *seen = Seen::new(lease, owner, received_at);
            }
            seen.held = holds(lease, owner);
            seen.last_used = received_at;
            return;
        }
        if table.by_pair.len() >= CAPACITY {
            table.prune(received_at);
        }
        // `get_mut` left the pair's key in `scratch`.
        let key = Box::from(table.scratch.as_slice());
        table
            .by_pair
            .insert(key, Seen::new(lease, owner, received_at));
    }

    /// Whether the last answer to `owner` about `lease_name` showed `owner` holding it: its
    /// next request is most likely a renewal, which an adapter may let pass standbys' requests
    /// when its connections are scarce. Only a hint: the answer is decided as always.
    pub fn held_at_last_answer(&self, lease_name: &str, owner: &str) -> bool {
        self.lock()
            .get_mut(lease_name, owner)
            .is_some_and(|seen| seen.held)
    }

    /// Forgets what `owner` saw of `lease_name` (after its release, say).
    pub fn forget(&self, lease_name: &str, owner: &str) {
        self.lock().remove(lease_name, owner);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
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

impl Table {
    /// Writes the key of (`lease_name`, `owner`) into `key`: the lease name's length, then
    /// both names' bytes. The length keeps every pair apart, whatever bytes the names hold.
    fn key(key: &mut Vec<u8>, lease_name: &str, owner: &str) {
        key.clear();
        key.extend_from_slice(&lease_name.len().to_le_bytes());
        key.extend_from_slice(lease_name.as_bytes());
        key.extend_from_slice(owner.as_bytes());
    }

    /// The sighting of (`lease_name`, `owner`), if any; leaves the pair's key in `scratch`.
    fn get_mut(&mut self, lease_name: &str, owner: &str) -> Option<&mut Seen> {
        Table::key(&mut self.scratch, lease_name, owner);
        self.by_pair.get_mut(self.scratch.as_slice())
    }

    /// Forgets the sighting of (`lease_name`, `owner`), if any.
    fn remove(&mut self, lease_name: &str, owner: &str) {
        Table::key(&mut self.scratch, lease_name, owner);
        self.by_pair.remove(self.scratch.as_slice());
    }

    /// Forgets the sightings unused for [`IDLE`] at `now`, then the least recently used until
    /// three quarters of [`CAPACITY`] are left.
    fn prune(&mut self, now: Instant) {
        self.by_pair
            .retain(|_, seen| now.saturating_duration_since(seen.last_used) < IDLE);
        let keep = CAPACITY / 4 * 3;
        let Some(excess) = self.by_pair.len().checked_sub(keep).filter(|&n| n > 0) else {
            return;
        };
        // The last use of the newest pair to forget: every pair used before it goes, and of
        // those used at that very instant, only as many as the bound needs.
        let mut uses: Vec<Instant> = self.by_pair.values().map(|seen| seen.last_used).collect();
        let (_, &mut cut, _) = uses.select_nth_unstable(excess - 1);
        let mut at_cut = excess - uses.iter().filter(|&&used| used < cut).count();
        self.by_pair
            .retain(|_, seen| match seen.last_used.cmp(&cut) {
                Ordering::Less => false,
                Ordering::Greater => true,
                Ordering::Equal if at_cut > 0 => {
                    at_cut -= 1;
                    false
                }
                Ordering::Equal => true,
            });
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
        // One look gives both: the sighting to send and whether the owner held the lease.
        let last = sightings.last_answer("l", "holder", t0).unwrap();
        assert!(last.held);
        assert_eq!(Some(last.sighting), sightings.before("l", "holder", t0));
        assert!(!sightings.last_answer("l", "b", t0).unwrap().held);
        assert_eq!(sightings.last_answer("l", "nobody", t0), None);
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
        let total = sightings.lock().by_pair.len();
        assert!(total <= CAPACITY, "{total}");
    }

    #[test]
    fn the_least_recently_used_pairs_are_forgotten_first() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        let at = |n: usize| t0 + Duration::from_micros(n as u64);
        // The table fills, each pair a microsecond after the one before; then the first pair
        // asks again, and is the most recently used.
        for n in 0..CAPACITY {
            sightings.after(&lease(1, 0), &format!("owner-{n}"), at(n));
        }
        assert!(sightings.before("l", "owner-0", at(CAPACITY)).is_some());
        // One more pair prunes the table: a quarter of it goes, the least recently used.
        sightings.after(&lease(1, 0), "newcomer", at(CAPACITY + 1));
        let total = sightings.lock().by_pair.len();
        assert_eq!(total, CAPACITY / 4 * 3 + 1);
        let kept = |owner: &str| sightings.lock().get_mut("l", owner).is_some();
        assert!(kept("owner-0"), "the pair used last is kept");
        assert!(kept("newcomer"));
        assert!(kept(&format!("owner-{}", CAPACITY - 1)));
        assert!(!kept("owner-1"), "the pair used least recently goes");
        assert!(!kept(&format!("owner-{}", CAPACITY / 4)));
        assert!(kept(&format!("owner-{}", CAPACITY / 4 + 1)));
    }

    #[test]
    fn pairs_whose_names_join_alike_are_kept_apart() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        let named = |name: &str, token: u64| {
            let mut lease = lease(token, 0);
            lease.lease_name = LeaseName::new(name).unwrap();
            sightings.after(&lease, if name == "ab" { "c" } else { "bc" }, t0);
        };
        named("ab", 1);
        named("a", 2);
        let token = |lease: &str, owner: &str| {
            sightings
                .before(lease, owner, t0)
                .map(|seen| seen.fencing_token.get())
        };
        assert_eq!(token("ab", "c"), Some(1));
        assert_eq!(token("a", "bc"), Some(2));
        assert_eq!(token("abc", ""), None);
    }

    #[test]
    fn the_count_follows_insertions_and_forgetting() {
        let sightings = Sightings::new();
        let t0 = Instant::now();
        for owner in ["a", "b", "c"] {
            sightings.after(&lease(1, 0), owner, t0);
        }
        sightings.after(&lease(1, 5), "a", t0);
        sightings.forget("l", "b");
        sightings.forget("l", "nobody");
        sightings.forget("other", "a");
        assert_eq!(sightings.lock().by_pair.len(), 2);
    }
}
