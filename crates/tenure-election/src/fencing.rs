//! The downstream half of fencing: refuse work stamped with a token older than one already
//! accepted.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tenure_ports::FencingToken;

/// Keeps, per lease, the highest fencing token accepted, and rejects anything older.
///
/// A leader that was paused past its ttl (a long GC pause, a suspended VM) wakes up still
/// believing it leads; self-demotion cannot help it, because it was not running. Its writes
/// carry its old token, and by then a new leader has written with a higher one: the guard on
/// the receiving side refuses them. A token equal to the highest accepted is accepted (the
/// same tenure writes many times); a token from a new tenure raises the bar for everybody.
///
/// The check and the write must be **one atomic step**: checking, then writing, would let an
/// old leader's write that passed the check land after a newer leader's. Use
/// [`admit_with`](Self::admit_with), which runs the write while holding this lease's lock, or
/// make the check part of the write itself, as in the PostgreSQL recipe below.
///
/// It is safe to share between threads (`Arc<FencingGuard>`); leases do not block each
/// other. It lives in memory: a downstream service that restarts must reload the highest
/// token of each lease from its own store (or keep the check in that store, as below).
///
/// ```
/// use tenure_election::FencingGuard;
/// use tenure_ports::FencingToken;
/// # fn t(n: u64) -> FencingToken { FencingToken::new(n).unwrap() }
/// let guard = FencingGuard::new();
/// let mut outbox = Vec::new();
/// guard.admit_with("order-dispatcher", t(3), || outbox.push("batch 1 from token 3"))?;
/// guard.admit_with("order-dispatcher", t(4), || outbox.push("batch 2 from token 4"))?;
/// // The zombie with token 3 wakes up:
/// let stale = guard.admit_with("order-dispatcher", t(3), || outbox.push("late batch")).unwrap_err();
/// assert_eq!((stale.stale, stale.current), (t(3), t(4)));
/// assert_eq!(outbox.len(), 2);
/// # Ok::<(), tenure_election::StaleToken>(())
/// ```
///
/// # The same check in PostgreSQL
///
/// When the downstream is a table, let the database do the check in the statement that
/// writes, so that no check-then-write race exists. Keep the highest token with the data:
///
/// ```sql
/// CREATE TABLE dispatch_state (
///     id            text   PRIMARY KEY,
///     payload       text   NOT NULL,
///     fencing_token bigint NOT NULL DEFAULT 0
/// );
///
/// -- $1 = id, $2 = payload, $3 = the writer's fencing token
/// UPDATE dispatch_state
///    SET payload = $2, fencing_token = $3
///  WHERE id = $1 AND $3 >= fencing_token;
/// ```
///
/// One row updated: accepted. No row updated: rejected, a newer tenure has written (the
/// row's lock serializes concurrent writers, and the condition is re-checked on the latest
/// row version). To fence many tables by one lease, keep one row per lease and take it in the
/// transaction of every write:
///
/// ```sql
/// CREATE TABLE lease_fences (lease_name text PRIMARY KEY, fencing_token bigint NOT NULL);
///
/// -- first statement of each writing transaction; 0 rows affected: roll back, stale token
/// INSERT INTO lease_fences AS f (lease_name, fencing_token) VALUES ($1, $2)
/// ON CONFLICT (lease_name) DO UPDATE SET fencing_token = EXCLUDED.fencing_token
///  WHERE f.fencing_token <= EXCLUDED.fencing_token;
/// ```
///
/// Both statements are tested against a real PostgreSQL in this crate's tests.
#[derive(Debug, Default)]
pub struct FencingGuard {
    leases: Mutex<HashMap<String, Arc<Mutex<Option<FencingToken>>>>>,
}

/// A write refused because a newer tenure of the lease has already written.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StaleToken {
    /// The lease.
    pub lease_name: String,
    /// The token the write carried.
    pub stale: FencingToken,
    /// The highest token accepted for the lease.
    pub current: FencingToken,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fencing token {} for lease {:?}: token {} was already accepted",
            self.stale, self.lease_name, self.current
        )
    }
}

impl std::error::Error for StaleToken {}

impl FencingGuard {
    /// A guard that has accepted nothing yet.
    pub fn new() -> Self {
        FencingGuard::default()
    }

    /// Accepts `token` for `lease_name` if it is not older than the highest accepted so far,
    /// and records it. Only for a write that cannot be reordered after this call; otherwise
    /// use [`admit_with`](Self::admit_with).
    ///
    /// # Errors
    ///
    /// [`StaleToken`] if a higher token was accepted before.
    pub fn admit(&self, lease_name: &str, token: FencingToken) -> Result<(), StaleToken> {
        self.admit_with(lease_name, token, || ())
    }

    /// Accepts `token` as [`admit`](Self::admit) does and, if accepted, runs `write` before any
    /// other token of this lease can be checked, so that accepted writes happen in token order.
    /// `write` should be short and must not use this guard.
    ///
    /// # Errors
    ///
    /// [`StaleToken`] if a higher token was accepted before; `write` is not run.
    pub fn admit_with<T>(
        &self,
        lease_name: &str,
        token: FencingToken,
        write: impl FnOnce() -> T,
    ) -> Result<T, StaleToken> {
        let slot = self.slot(lease_name);
        // A panic in an earlier `write` leaves a token that was rightly accepted: the data is
        // consistent, so a poisoned lock is used as it is.
        let mut highest = slot.lock().unwrap_or_else(PoisonError::into_inner);
        match *highest {
            Some(current) if token < current => Err(StaleToken {
                lease_name: lease_name.to_owned(),
                stale: token,
                current,
            }),
            _ => {
                *highest = Some(token);
                Ok(write())
            }
        }
    }

    /// The highest token accepted for `lease_name`, if any.
    pub fn highest(&self, lease_name: &str) -> Option<FencingToken> {
        let slot = self
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lease_name)
            .cloned()?;
        *slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, lease_name: &str) -> Arc<Mutex<Option<FencingToken>>> {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(leases.entry(lease_name.to_owned()).or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn older_is_rejected_equal_and_newer_accepted_per_lease() {
        let guard = FencingGuard::new();
        assert_eq!(guard.highest("a"), None);
        guard.admit("a", t(2)).unwrap();
        guard.admit("a", t(2)).unwrap();
        let err = guard.admit("a", t(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stale fencing token 1 for lease \"a\": token 2 was already accepted"
        );
        guard.admit("b", t(1)).unwrap(); // another lease has its own bar
        guard.admit("a", t(5)).unwrap();
        assert_eq!(guard.highest("a"), Some(t(5)));
        assert_eq!(guard.highest("b"), Some(t(1)));
    }

    #[test]
    fn a_rejected_write_is_not_run() {
        let guard = FencingGuard::new();
        guard.admit("a", t(3)).unwrap();
        let mut ran = false;
        assert!(guard.admit_with("a", t(2), || ran = true).is_err());
        assert!(!ran);
    }
}
