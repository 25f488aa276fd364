//! Standbys' requests carried together, those whose registration is fresh answered by one read
//! before `request_leases_v1` decides what it leaves ([`kept_sql`]).
//!
//! Past capacity, standbys' requests wait for a turn of the lane and the first to get one
//! carries the others ([`carpool`](super::carpool)). `request_leases_v1` decides each by a
//! call of `request_lease_v5`, whose PL/pgSQL machinery (a function call in a loop, a lock, a
//! clock reading, two look-ups, each a statement of its own) is most of what a standby costs
//! the server when its registration is fresh and nothing is written: at the elector's cadence,
//! one standby's request in two (`0011_lease_functions_v5.sql`).
//!
//! The read answers exactly what v5 answers such a request, request by request: the lease
//! record is live and held by someone else (rule 4), the record says registrations exist, and
//! the caller's registration has this request's priority and ttl and is younger than half its
//! ttl (`tenure_domain::Contender::is_fresh_at`); the answer is `standby`, from the record.
//! Any other request (the record expired, held by the caller, no fresh registration) gets no
//! row and goes to `request_leases_v1`. Only requests with a sighting are sent: a contender
//! with none has not been answered about the lease by this storage, and most likely has no
//! registration to keep.
//!
//! **Without the lease's lock, and why that decides as v5 does.** v5 takes the lease's advisory
//! lock, then reads the clock, then reads: the lock orders the decisions that write. This read
//! writes nothing, and one `SELECT` reads both tables at one snapshot, then the clock (in a
//! materialized subquery, once, after the snapshot was taken). Its answer is v5's for the
//! state that snapshot shows at that clock reading, and it may be placed, among the calls on
//! that lease, right after the last one the snapshot shows: every call the snapshot shows
//! committed before the clock was read, and every call it does not show committed after the
//! statement started, so after this request was sent, and none of those must come before it.
//! Nor can such a later call, with an earlier clock reading, have decided against the state it
//! answers from: the answer needs the record live at its reading, and the only decisions that
//! replace a live holder are its own release (valid at any clock) and a takeover, which needs
//! the record expired at its own reading. A standby told `standby` a moment
//! before a release it did not see is answered as it would have been one call earlier, as any
//! request that crosses a release is. Leaving the lock out also means the read never waits on
//! a lease whose decision is under way, and never makes a decision wait on it.
//!
//! Several requests for one lease read the same snapshot and write nothing, so they may all be
//! answered: the answered ones first, then the rest in their order (`tests/carried.rs` holds
//! this against v5 in turn).

use crate::connection::{Checkout, Driver, Sql};
use crate::error::Failure;

use super::carpool::Load;
use super::together::{self, Left, requests};

/// The kept standbys' read for many requests. Parameters: the lease names, owners,
/// priorities and ttls in µs as four arrays (and, in tests, the clock as `$5`); `now` is the
/// clock's expression. It answers one row per request whose registration is kept: v5's answer
/// (`standby`, `standby`, from the record), then the request's place in the arrays (from 1).
/// It writes nothing.
pub(super) fn kept_sql(p: &str, now: &str) -> String {
    format!(
        "/* {p}keep_standbys */ WITH c AS MATERIALIZED (SELECT {now} AS now) \
         SELECT ROW('standby'::text, 'standby'::text, l.owner, l.priority, l.fencing_token, \
                    l.acquired_at, l.heartbeat_at, l.ttl_micros), u.i \
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) \
                    WITH ORDINALITY AS u(lease_name, owner, priority, ttl_micros, i) \
                CROSS JOIN c \
                JOIN {p}leases AS l ON l.lease_name = u.lease_name \
                JOIN {p}lease_contenders AS k \
                  ON k.lease_name = u.lease_name AND k.owner = u.owner \
          WHERE l.owner <> u.owner \
            AND c.now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond' \
            AND l.has_contenders \
            AND k.priority = u.priority AND k.ttl_micros = u.ttl_micros \
            AND k.last_seen <= c.now \
            AND 2 * (c.now - k.last_seen) < k.ttl_micros * interval '1 microsecond'"
    )
}

/// The places in `load` (0 for its own request, then each carried one's from 1) of the
/// requests with a sighting: those the read is sent.
fn sighted_in_load<R>(load: &Load<R>) -> Vec<usize> {
    requests(load)
        .enumerate()
        .filter(|(_, r)| r.seen != [0; 3])
        .map(|(i, _)| i)
        .collect()
}

/// Sends the kept standbys' read `sql` (with `clock`, in tests) for the requests of `load`
/// with a sighting ([`sighted_in_load`]), tells each kept carried request its answer, and
/// gives back what is left ([`together::answer`]).
pub(super) async fn keep<D: Driver>(
    connection: &mut Checkout<'_, D>,
    sql: &Sql,
    clock: Option<i64>,
    load: Load<D::Row>,
) -> Result<Left<D::Row>, (Failure, Load<D::Row>)> {
    let sent = sighted_in_load(&load);
    together::answer(connection, (sql, "keep_standbys"), clock, load, sent).await
}

#[cfg(test)]
mod tests {
    use super::super::together::load_of;
    use super::*;

    #[test]
    fn only_sighted_requests_are_sent() {
        let (mut load, _answers) = load_of(&["a", "b", "a", "c"]);
        load.others[0].0.seen = [1, 2, 3];
        load.others[1].0.seen = [4, 0, 0];
        assert_eq!(sighted_in_load(&load), [1, 2]);
        load.own.seen = [1, 1, 0];
        assert_eq!(sighted_in_load(&load), [0, 1, 2]);
    }
}
