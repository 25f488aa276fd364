//! An elector never adopts a tenure it did not start.
//!
//! The storage knows a holder by its owner id only. Two processes given the same id (a
//! copied configuration), or a process restarted with its predecessor's id within the ttl,
//! are one holder to it: the newcomer's first request *renews* the tenure the other process
//! started, and the newcomer would act as leader with the same token, beside it.
//!
//! The rule, from the contract: an answer that holds the lease is this elector's own when its
//! token names a tenure this elector started, or when that answer itself started the tenure.
//! A request that starts a tenure (rules 2, 3 after expiry or release, and 5) sets
//! `acquired_at` and `heartbeat_at` both to the storage's `now`; a renewal moves only
//! `heartbeat_at`, which is then later than `acquired_at`. Any other holding answer renews a
//! tenure acquired before this elector's request: it is *foreign*, and the elector waits it
//! out (without renewing it) before it contends again.
//!
//! Two limits, both on the side of caution or of the storage's clock resolution: an
//! acquisition whose answer was lost (a timeout) makes the elector's own tenure look foreign
//! at the next renewal, so it waits one ttl and acquires a new token; and a renewal by a twin
//! in the very microsecond the other acquired the lease would look like an acquisition.

use std::time::Duration;

use tenure_ports::{FencingToken, Lease, LeaseSnapshot};

/// Whose tenure a holding answer is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Holding {
    /// A tenure this elector started: act as leader.
    Own,
    /// A tenure acquired before this elector's request, under the same owner id.
    Foreign,
}

/// Classifies a holding answer's lease record; `own` is the token of the last tenure this
/// elector started, if any.
pub(crate) fn holding(own: Option<FencingToken>, lease: &Lease) -> Holding {
    if own == Some(lease.fencing_token) || lease.acquired_at == lease.heartbeat_at {
        Holding::Own
    } else {
        Holding::Foreign
    }
}

/// What a snapshot of the leases says of a foreign tenure being waited out.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Verdict {
    /// The tenure is over (expired, released, taken over, or the record is gone): contend.
    Ended,
    /// The tenure is still live on the storage's clock.
    Live {
        /// Whether somebody renewed it since `seen` (this elector does not): a live process
        /// uses the same owner id.
        renewed: bool,
        /// How long it stays live without a further renewal, on the storage's clock.
        remaining: Duration,
        /// The record as the snapshot has it, to compare the next snapshot with.
        record: Lease,
    },
}

/// Judges the foreign tenure `seen` (the record as last seen) against `snapshot`.
pub(crate) fn judge(snapshot: &LeaseSnapshot, seen: &Lease) -> Verdict {
    let current = snapshot
        .leases
        .iter()
        .find(|l| l.lease_name == seen.lease_name);
    match current {
        Some(record)
            if record.owner == seen.owner
                && record.fencing_token == seen.fencing_token
                && record.is_live_at(snapshot.now) =>
        {
            Verdict::Live {
                renewed: record.heartbeat_at > seen.heartbeat_at,
                remaining: record.expires_at().saturating_duration_since(snapshot.now),
                record: record.clone(),
            }
        }
        _ => Verdict::Ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_ports::Timestamp;

    fn lease(token: u64, acquired: i64, heartbeat: i64) -> Lease {
        Lease {
            lease_name: "jobs".try_into().unwrap(),
            owner: "pod-a".try_into().unwrap(),
            priority: 0,
            fencing_token: FencingToken::new(token).unwrap(),
            acquired_at: Timestamp::from_micros(acquired),
            heartbeat_at: Timestamp::from_micros(heartbeat),
            ttl: Duration::from_secs(1),
            released_at: None,
        }
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn an_answer_that_started_the_tenure_or_renews_an_own_one_is_own() {
        assert_eq!(holding(None, &lease(3, 10, 10)), Holding::Own);
        assert_eq!(holding(Some(token(3)), &lease(3, 10, 500)), Holding::Own);
    }

    #[test]
    fn a_renewal_of_a_tenure_this_elector_did_not_start_is_foreign() {
        assert_eq!(holding(None, &lease(3, 10, 500)), Holding::Foreign);
        // An own earlier tenure does not make a later one own.
        assert_eq!(
            holding(Some(token(2)), &lease(3, 10, 500)),
            Holding::Foreign
        );
    }

    #[test]
    fn a_snapshot_tells_an_ended_tenure_from_a_renewed_one() {
        let seen = lease(3, 10, 500);
        let snapshot = |now: i64, leases: Vec<Lease>| LeaseSnapshot {
            now: Timestamp::from_micros(now),
            leases,
        };
        // Unchanged and live: not renewed, live until heartbeat + ttl.
        assert_eq!(
            judge(&snapshot(600, vec![seen.clone()]), &seen),
            Verdict::Live {
                renewed: false,
                remaining: Duration::from_micros(1_000_500 - 600),
                record: seen.clone(),
            }
        );
        // Renewed by somebody: a live twin.
        let renewed = lease(3, 10, 900);
        assert!(matches!(
            judge(&snapshot(950, vec![renewed]), &seen),
            Verdict::Live { renewed: true, .. }
        ));
        // Expired at the storage's now (exactly at heartbeat + ttl), a new token, no record.
        assert_eq!(
            judge(&snapshot(1_000_500, vec![seen.clone()]), &seen),
            Verdict::Ended
        );
        assert_eq!(
            judge(&snapshot(600, vec![lease(4, 600, 600)]), &seen),
            Verdict::Ended
        );
        assert_eq!(judge(&snapshot(600, vec![]), &seen), Verdict::Ended);
    }
}
