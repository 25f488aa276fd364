//! Renewals carried together, renewed in one `UPDATE` before `request_leases_v1` decides what
//! it leaves ([`renewals_sql`]).
//!
//! Under load, renewals wait for a connection and the first to get one carries the others
//! ([`carpool`](super::carpool)). `request_leases_v1` decides each by a call of
//! `request_lease_v4`, whose PL/pgSQL machinery is most of a renewal's cost on the server when
//! nothing is to be decided but the renewal itself: with `pgbench` (8 clients, 64 held leases
//! per call, the arrays built in the statement on both sides), `request_leases_v1` served 820
//! calls a second and this statement 1,847, about 33 µs of the server's time per renewal
//! against 12 (`docs/benchmarks.md`, fifteenth session). Past capacity every renewal is
//! carried (`benches/scale.rs`' overloads), so this is what a renewal costs there.
//!
//! The statement renews exactly what [`renewal_sql`](super::renewal_sql) renews, request by
//! request: the caller's live record, with no registration above its priority. It only tries
//! each lease's lock, as `request_leases_v1` does, so that no two calls wait on each other; a
//! request whose lock is held elsewhere is left for `request_leases_v1`, which tries again and
//! leaves it to its own call. Only requests whose lease appears once in the load are sent:
//! those left undecided are then decided in their order, after the renewed ones, and a lease's
//! requests stay in their order (two renewals of one lease, from two owners of one storage,
//! are rare; both go to `request_leases_v1`). Leases differ, so their decisions commute, and
//! the whole is decided as the same requests in turn would be, the renewed ones first
//! (`tests/carried.rs`).

use crate::connection::{Checkout, Driver, Sql};
use crate::error::Failure;

use super::carpool::Load;
use super::together::{self, Left, requests};

/// The holders' renewals of many leases, in one `UPDATE`. Parameters: the lease names, owners,
/// priorities and ttls in µs as four arrays (and, in tests, the clock as `$5`); `now` is the
/// clock's expression. It answers one row per renewed request: v4's answer (as
/// [`renewal_sql`](super::renewal_sql) answers it), then the request's place in the arrays
/// (from 1). A request it does not answer is not written.
///
/// Each lease's advisory lock is tried in a materialized subquery (`r`), in order; the clock is
/// read once, in a second one (`c`) that counts `r`'s rows, and so after every lock was tried;
/// every condition is then judged at that reading. As in the statement for one, an `UPDATE`
/// under READ COMMITTED that finds its row changed by a transaction that committed meanwhile
/// judges the newest version again, at the same reading. A request whose lock was not had is
/// filtered out before its row is locked, so the statement waits on no lease it did not lock.
pub(super) fn renewals_sql(p: &str, now: &str) -> String {
    format!(
        "/* {p}renew_leases */ WITH r AS MATERIALIZED ( \
             SELECT u.i, u.lease_name, u.owner, u.priority, u.ttl_micros, \
                    pg_try_advisory_xact_lock(hashtextextended('{p}leases:' || u.lease_name, 0)) \
                        AS locked \
               FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) \
                    WITH ORDINALITY AS u(lease_name, owner, priority, ttl_micros, i)), \
         c AS MATERIALIZED ( \
             SELECT {now} AS now FROM (SELECT count(*) FROM r) AS all_tried) \
         UPDATE {p}leases AS l \
            SET priority = r.priority, heartbeat_at = c.now, ttl_micros = r.ttl_micros \
           FROM r, c \
          WHERE r.locked AND l.lease_name = r.lease_name AND l.owner = r.owner \
            AND c.now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond' \
            AND (NOT l.has_contenders OR l.contender_priority_bound <= r.priority) \
        RETURNING ROW('leader'::text, 'renewed'::text, l.owner, l.priority, l.fencing_token, \
                      l.acquired_at, l.heartbeat_at, l.ttl_micros), r.i"
    )
}

/// The places in `load` (0 for its own request, then each carried one's from 1) of the
/// requests whose lease appears once in it: those the statement may renew.
fn alone_in_load<R>(load: &Load<R>) -> Vec<usize> {
    let names: Vec<&str> = requests(load).map(|r| r.lease_name.as_str()).collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_unstable_by_key(|&i| names[i]);
    let mut once: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|&(k, &i)| {
            let same = |other: Option<&usize>| other.is_some_and(|&j| names[j] == names[i]);
            !same(k.checked_sub(1).and_then(|k| order.get(k))) && !same(order.get(k + 1))
        })
        .map(|(_, &i)| i)
        .collect();
    once.sort_unstable();
    once
}

/// Sends the renewal statement `sql` (with `clock`, in tests) for the requests of `load` that
/// it may renew ([`alone_in_load`]), tells each renewed carried request its answer, and gives
/// back what is left ([`together::answer`]).
pub(super) async fn renew<D: Driver>(
    connection: &mut Checkout<'_, D>,
    sql: &Sql,
    clock: Option<i64>,
    load: Load<D::Row>,
) -> Result<Left<D::Row>, (Failure, Load<D::Row>)> {
    let sent = alone_in_load(&load);
    together::answer(connection, (sql, "renew_leases"), clock, load, sent).await
}

#[cfg(test)]
mod tests {
    use super::super::together::load_of;
    use super::*;

    #[test]
    fn only_leases_that_appear_once_are_sent() {
        let (load, _answers) = load_of(&["a", "b", "a", "c", "d", "c"]);
        assert_eq!(alone_in_load(&load), [1, 4]);
        let (load, _answers) = load_of(&["a"]);
        assert_eq!(alone_in_load(&load), [0]);
    }
}
