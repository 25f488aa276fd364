//! Leases: the SQL of each lease call, and the calls themselves, on any driver.
//!
//! The counterpart of `tenure_ports::lease`. Each call is one statement in autocommit (a
//! holder's, at most two; a call that carries others, at most three): a call of a function
//! shipped in `migrations/`, which serializes the calls on one lease with a transaction-scoped
//! advisory lock, reads the clock after the lock, decides, and writes (or the holder's renewal
//! statement, which does the same; or, for carried standbys whose registration is fresh, a read
//! that writes nothing and needs no lock, [`kept`]). Every
//! statement is built once per storage from the validated prefix; every value travels as a
//! bind parameter.
//!
//! A request calls `request_lease_v4` with the caller's sighting of the lease's tenure: the
//! storage keeps a [`Sightings`] of what each of its owners saw, on this process's monotonic
//! clock, sends [`Sightings::before`] with each request and records [`Sightings::after`] from
//! each answer (see `migrations/0006_lease_functions_v2.sql`; `0008_lease_functions_v3.sql` for the standby's
//! registration kept while fresh; `0009_lease_functions_v4.sql` for the renewal answered from
//! the lease record when no registration can challenge it). A caller that did not hold the lease
//! at its last answer calls `request_lease_v5` instead, which decides exactly what v4 decides
//! and answers a standby whose registration is fresh from two index look-ups
//! (`0011_lease_functions_v5.sql`); a caller that held it sends the renewal statement first, one
//! `UPDATE` that answers an unchallenged renewal without a function call ([`renewal_sql`]), and
//! calls v4 where it answers nothing. Requests that waited for a connection are carried
//! together ([`carpool`]); renewals so carried are renewed by one `UPDATE` for all of them
//! ([`renewals`]), and standbys so carried whose registration is fresh are answered by one
//! read ([`kept`]), before `request_leases_v1` decides what is left.

mod carpool;
mod kept;
mod renewals;
mod together;

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tenure_ports::domain::Transition;
use tenure_ports::{
    Contender, EventStorageError, LeaseName, LeaseRequest, LeaseResponse, LeaseSnapshot, Owner,
    Sighting, Sightings, sort_contenders,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub(crate) use self::carpool::Carpools;
use self::carpool::{Carpool, Carried, Load, Outcome, Passenger, Ticket};
use crate::connection::lane::{self, Standing};
use crate::connection::{
    Checkout, Detached, Driver, Link, Param, Sql, at_most_one_row, one_row, timed_out,
};
use crate::decode;
use crate::error::Failure;
use crate::prefix::TablePrefix;

/// The lease statements of one storage, with its prefix in place.
pub(crate) struct LeaseStatements {
    /// `request_lease_v4`, with the sighting: the call of a caller that held the lease at its
    /// last answer (a renewal, tried first).
    request: Sql,
    /// `request_lease_v5`, with the sighting: the call of every other caller (a standby whose
    /// registration is fresh, answered first).
    request_unheld: Sql,
    /// A holder's renewal that no registration can challenge, in one `UPDATE` without a
    /// function call ([`renewal_sql`]); answers no row where `request` must decide.
    renewal: Sql,
    /// `request_leases_v1`: the requests that waited for a connection (renewals with
    /// renewals, standbys' with standbys'), carried in one call ([`carpool`]); one row per
    /// request, its answer, or NULL where it was left undecided.
    request_carried: Sql,
    /// Renewals carried together, in one `UPDATE`, before `request_carried` decides what it
    /// leaves ([`renewals`]).
    renewals: Sql,
    /// Standbys' requests carried together, those whose registration is fresh answered by
    /// one read before `request_carried` decides what it leaves ([`kept`]).
    kept: Sql,
    release: Sql,
    /// `request` with the clock argument (see [`Clock::At`]).
    #[cfg(feature = "testing")]
    request_at: Sql,
    /// `request_unheld` with the clock argument.
    #[cfg(feature = "testing")]
    request_unheld_at: Sql,
    /// `renewal` with the clock argument.
    #[cfg(feature = "testing")]
    renewal_at: Sql,
    /// `request_carried` with the clock argument.
    #[cfg(feature = "testing")]
    request_carried_at: Sql,
    /// `renewals` with the clock argument.
    #[cfg(feature = "testing")]
    renewals_at: Sql,
    /// `kept` with the clock argument.
    #[cfg(feature = "testing")]
    kept_at: Sql,
    /// `request_lease_v1`, what a process of the previous release calls (see [`Version::V1`]).
    #[cfg(feature = "testing")]
    request_v1: Sql,
    /// `request_v1` with the clock argument.
    #[cfg(feature = "testing")]
    request_v1_at: Sql,
    /// `release` with the clock argument.
    #[cfg(feature = "testing")]
    release_at: Sql,
    leases: Sql,
    contenders: Sql,
}

impl LeaseStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let p = prefix.as_str();
        LeaseStatements {
            // Called as a scalar: one column, a `<prefix>lease_outcome_v1` (see
            // `decode::composite`).
            request: format!("SELECT {p}request_lease_v4($1, $2, $3, $4, $5, $6, $7)").into(),
            request_unheld: format!("SELECT {p}request_lease_v5($1, $2, $3, $4, $5, $6, $7)")
                .into(),
            renewal: renewal_sql(p, "clock_timestamp()").into(),
            request_carried: format!(
                "SELECT CASE WHEN o_decided THEN o_outcome END \
                   FROM {p}request_leases_v1($1, $2, $3, $4, $5, $6, $7, $8)"
            )
            .into(),
            renewals: renewals::renewals_sql(p, "clock_timestamp()").into(),
            kept: kept::kept_sql(p, "clock_timestamp()").into(),
            release: format!("SELECT o_released FROM {p}release_lease_v1($1, $2)").into(),
            #[cfg(feature = "testing")]
            request_at: format!(
                "SELECT {p}request_lease_v4($1, $2, $3, $4, $5, $6, $7, {})",
                at(8)
            )
            .into(),
            #[cfg(feature = "testing")]
            request_unheld_at: format!(
                "SELECT {p}request_lease_v5($1, $2, $3, $4, $5, $6, $7, {})",
                at(8)
            )
            .into(),
            #[cfg(feature = "testing")]
            renewal_at: renewal_sql(p, &at(5)).into(),
            #[cfg(feature = "testing")]
            request_carried_at: format!(
                "SELECT CASE WHEN o_decided THEN o_outcome END \
                   FROM {p}request_leases_v1($1, $2, $3, $4, $5, $6, $7, $8, {})",
                at(9)
            )
            .into(),
            #[cfg(feature = "testing")]
            renewals_at: renewals::renewals_sql(p, &at(5)).into(),
            #[cfg(feature = "testing")]
            kept_at: kept::kept_sql(p, &at(5)).into(),
            #[cfg(feature = "testing")]
            request_v1: format!("SELECT {p}request_lease_v1($1, $2, $3, $4)").into(),
            #[cfg(feature = "testing")]
            request_v1_at: format!("SELECT {p}request_lease_v1($1, $2, $3, $4, {})", at(5)).into(),
            #[cfg(feature = "testing")]
            release_at: format!(
                "SELECT o_released FROM {p}release_lease_v1($1, $2, {})",
                at(3)
            )
            .into(),
            // One statement, so that `now()` is the instant of the statement's snapshot; the
            // outer join yields one row (with NULLs) when there is no lease at all.
            leases: format!(
                "SELECT now(), l.lease_name, l.owner, l.priority, l.fencing_token, \
                        l.acquired_at, l.heartbeat_at, l.ttl_micros, l.released_at \
                   FROM (SELECT) AS one LEFT JOIN {p}leases AS l ON true"
            )
            .into(),
            // The holder's registration is the lease record itself (see the migration).
            contenders: format!(
                "SELECT now(), c.owner, c.priority, c.last_seen, c.ttl_micros \
                   FROM (SELECT) AS one \
                   LEFT JOIN (SELECT owner, priority, last_seen, ttl_micros \
                                FROM {p}lease_contenders WHERE lease_name = $1 \
                              UNION ALL \
                              SELECT owner, priority, heartbeat_at, ttl_micros \
                                FROM {p}leases WHERE lease_name = $1) AS c ON true"
            )
            .into(),
        }
    }

    /// The request of a caller that held the lease at its last answer (`request_lease_v4`)
    /// or of any other (`request_lease_v5`), with the clock argument when `at` is set (tests).
    fn request(&self, held: bool, at: Option<i64>) -> &Sql {
        #[cfg(feature = "testing")]
        if at.is_some() {
            return if held {
                &self.request_at
            } else {
                &self.request_unheld_at
            };
        }
        let _ = at;
        if held {
            &self.request
        } else {
            &self.request_unheld
        }
    }

    /// The renewal statement ([`renewal_sql`]), with the clock argument when `at` is set.
    pub(crate) fn renewal(&self, at: Option<i64>) -> &Sql {
        #[cfg(feature = "testing")]
        if at.is_some() {
            return &self.renewal_at;
        }
        let _ = at;
        &self.renewal
    }

    /// `request_leases_v1`, with the clock argument when `at` is set.
    fn carried(&self, at: Option<i64>) -> &Sql {
        #[cfg(feature = "testing")]
        if at.is_some() {
            return &self.request_carried_at;
        }
        let _ = at;
        &self.request_carried
    }

    /// The renewal statement for many ([`renewals::renewals_sql`]), with the clock argument
    /// when `at` is set.
    pub(crate) fn renewals(&self, at: Option<i64>) -> &Sql {
        #[cfg(feature = "testing")]
        if at.is_some() {
            return &self.renewals_at;
        }
        let _ = at;
        &self.renewals
    }

    /// The kept standbys' read for many ([`kept::kept_sql`]), with the clock argument when
    /// `at` is set.
    pub(crate) fn kept(&self, at: Option<i64>) -> &Sql {
        #[cfg(feature = "testing")]
        if at.is_some() {
            return &self.kept_at;
        }
        let _ = at;
        &self.kept
    }

    /// `request_lease_v1`, with the clock argument when `at` is set.
    #[cfg(feature = "testing")]
    fn request_v1(&self, at: Option<i64>) -> &Sql {
        if at.is_some() {
            &self.request_v1_at
        } else {
            &self.request_v1
        }
    }
}

/// A holder's renewal that no registration can challenge, decided in one `UPDATE` of the lease
/// record, without the call of a PL/pgSQL function: `request_lease_v4`'s first statement and its
/// early answer (`0009_lease_functions_v4.sql`, rule 3 with
/// `RequestOutcome::sparing_registrations_on_unchallenged_renewal`). Parameters: lease name,
/// owner, priority, ttl in µs (and, in tests, the clock as `$5`); `now` is the clock's
/// expression. It answers one row, v4's answer (`leader`, `renewed`), where the caller holds the
/// live lease and the lease has no registrations or none above the request's priority (the
/// record's bound, `contender_priority_bound`; NULL, unknown, never qualifies); otherwise it
/// answers no row and writes nothing, and the caller calls v4, which decides every case.
///
/// The order v4 keeps, lock then clock, holds within the one statement: the advisory lock is
/// taken in a subquery that cannot be flattened (`OFFSET 0`, and a volatile function in its
/// output, which the planner neither removes nor moves), and the clock is read in the output
/// of a second such subquery over it, so after the lock is granted. The record may be read
/// before the lock (the plan reads it first, and takes the lock only when it is the caller's);
/// under READ COMMITTED an `UPDATE` that finds its row changed by a transaction that committed
/// meanwhile re-reads the newest version and checks the conditions again, with the same clock
/// reading, so the decision is made on the record as the previous holder of the lock left it.
/// The answer is an anonymous row with the fields of `<prefix>lease_outcome_v1`, decoded as
/// the functions' answers are: a cast to that type would make the prepared plan depend on the
/// type, which an upgrade may re-create, and the server does not re-plan for that ("cache
/// lookup failed for type", where a function's call is refused and prepared anew).
/// The leading comment names the statement where the server shows it (`pg_stat_activity`,
/// `pg_stat_statements`, the log), as a function's name does. Why one statement: the function
/// call's own machinery cost the server's renewal rate 0.06 to 0.07 of the floor's (`pgbench`:
/// 0.82x through v4, 0.88x to 0.89x this way; `docs/benchmarks.md`).
fn renewal_sql(p: &str, now: &str) -> String {
    format!(
        "/* {p}renew_lease */ UPDATE {p}leases AS l \
            SET priority = $3, heartbeat_at = c.now, ttl_micros = $4 \
           FROM (SELECT {now} AS now \
                   FROM (SELECT pg_advisory_xact_lock(hashtextextended('{p}leases:' || $1, 0)) \
                         OFFSET 0) AS locked \
                 OFFSET 0) AS c \
          WHERE l.lease_name = $1 AND l.owner = $2 \
            AND c.now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond' \
            AND (NOT l.has_contenders OR l.contender_priority_bound <= $3) \
        RETURNING ROW('leader'::text, 'renewed'::text, l.owner, l.priority, l.fencing_token, \
                      l.acquired_at, l.heartbeat_at, l.ttl_micros)"
    )
}

/// The functions' optional clock argument, from the bound `bigint` `$n` of microseconds since
/// the Unix epoch (exact: the product stays below 2^53 microseconds).
#[cfg(feature = "testing")]
fn at(n: usize) -> String {
    format!("timestamptz 'epoch' + ${n}::bigint * interval '1 microsecond'")
}

/// The instant a call decides at.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Clock {
    /// The database's `now()`, read after the lock: every shipped call.
    Database,
    /// A stand-in for the database clock, passed as the functions' optional last argument;
    /// only with the `testing` feature, for the property test.
    #[cfg(feature = "testing")]
    At(tenure_ports::Timestamp),
}

/// A validated ttl (1 ms to 7 days, whole microseconds) as the `bigint` the tables keep.
fn ttl_micros(ttl: std::time::Duration) -> Result<i64, EventStorageError> {
    i64::try_from(ttl.as_micros())
        .map_err(|_| EventStorageError::internal("a validated ttl does not fit in i64 micros"))
}

/// Which sighting a request sends, and which function it calls.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Version<'a> {
    /// This release's functions with the storage's own sighting: [`Sightings::before`] is
    /// sent, and the answer is recorded with [`Sightings::after`]; `request_lease_v4` for a
    /// caller that held the lease at its last answer, `request_lease_v5` for any other. Every
    /// shipped call. (Named after no version, so that the next one renames nothing.)
    Current(&'a Sightings),
    /// `request_lease_v4` with exactly this sighting, nothing recorded; for the property test.
    #[cfg(feature = "testing")]
    CurrentGiven(Option<Sighting>),
    /// `request_lease_v5` with exactly this sighting, nothing recorded; for the property test.
    #[cfg(feature = "testing")]
    UnheldGiven(Option<Sighting>),
    /// A holder's own call with exactly this sighting, nothing recorded, for the property test:
    /// the renewal statement ([`renewal_sql`], or `renewal` in its place, for a negative
    /// control), then `request_lease_v4` where it answers no row.
    #[cfg(feature = "testing")]
    RenewalGiven {
        sighting: Option<Sighting>,
        renewal: Option<&'a Sql>,
    },
    /// `request_lease_v1`, no sighting: a process of the previous release, for the
    /// rolling-upgrade test and the clock-step test's negative control.
    #[cfg(feature = "testing")]
    V1,
}

/// The sighting as the three arguments of `request_lease_v4` and `_v5`: token (0 for none),
/// heartbeat in µs since the Unix epoch, and µs unchanged (saturating: a longer sighting covers
/// every ttl).
fn sighting_params(sighting: Option<&Sighting>) -> [i64; 3] {
    match sighting {
        None => [0, 0, 0],
        Some(s) => [
            i64::try_from(s.fencing_token.get()).unwrap_or(i64::MAX),
            s.heartbeat_at.as_micros(),
            i64::try_from(s.unchanged_for.as_micros()).unwrap_or(i64::MAX),
        ],
    }
}

/// `request_lease`: one call of `<prefix>request_lease_v4` or `_v5` (or, in tests, `_v1`); says
/// how the record changed.
pub(crate) async fn request<D: Driver>(
    link: &Arc<Link<D>>,
    statements: &LeaseStatements,
    carpools: &Carpools<D::Row>,
    request: &LeaseRequest,
    clock: Clock,
    version: Version<'_>,
) -> Result<(Transition, LeaseResponse), EventStorageError> {
    // Checked in place: a validated copy of the request would cost two allocations per call,
    // and only the answer needs an owned name, made here, before anything is sent.
    let (lease_name, ttl) = request.check_with_lease_name()?;
    let ttl_micros = ttl_micros(ttl)?;
    let at = match clock {
        Clock::Database => None,
        #[cfg(feature = "testing")]
        Clock::At(at) => Some(at.as_micros()),
    };
    let sent_at = Instant::now();
    // The statement (with its clock argument, in tests), the sighting to send, whether the
    // caller held the lease at its last answer (a test's call counts as a renewal), the
    // registry to record the answer in, and the renewal statement its own call tries first (a
    // holder's).
    let (sql, sighting, held, kept, renewal) = match version {
        Version::Current(kept) => {
            let last =
                kept.last_answer(request.lease_name.as_str(), request.owner.as_str(), sent_at);
            let held = last.is_some_and(|last| last.held);
            let sql = statements.request(held, at);
            let renewal = held.then(|| statements.renewal(at));
            (
                sql,
                last.map(|last| last.sighting),
                held,
                Some(kept),
                renewal,
            )
        }
        #[cfg(feature = "testing")]
        Version::CurrentGiven(sighting) => {
            (statements.request(true, at), sighting, true, None, None)
        }
        #[cfg(feature = "testing")]
        Version::UnheldGiven(sighting) => {
            (statements.request(false, at), sighting, true, None, None)
        }
        #[cfg(feature = "testing")]
        Version::RenewalGiven { sighting, renewal } => {
            let renewal = renewal.unwrap_or_else(|| statements.renewal(at));
            (
                statements.request(true, at),
                sighting,
                true,
                None,
                Some(renewal),
            )
        }
        #[cfg(feature = "testing")]
        Version::V1 => (statements.request_v1(at), None, true, None, None),
    };
    #[cfg(feature = "testing")]
    let sighted = !matches!(version, Version::V1);
    #[cfg(not(feature = "testing"))]
    let sighted = true;
    let [seen_token, seen_heartbeat, seen_for] = sighting_params(sighting.as_ref());
    let (name, owner) = (request.lease_name.as_str(), request.owner.as_str());
    let clock_param = Param::Int8(at.unwrap_or_default());
    let params = if sighted {
        [
            Param::Text(name),
            Param::Text(owner),
            Param::Int8(request.priority),
            Param::Int8(ttl_micros),
            Param::Int8(seen_token),
            Param::Int8(seen_heartbeat),
            Param::Int8(seen_for),
            clock_param,
        ]
    } else {
        [
            Param::Text(name),
            Param::Text(owner),
            Param::Int8(request.priority),
            Param::Int8(ttl_micros),
            clock_param,
            Param::Int8(0),
            Param::Int8(0),
            Param::Int8(0),
        ]
    };
    let count = 4 + if sighted { 3 } else { 0 } + usize::from(at.is_some());
    let params = &params[..count];
    let renewal_params = [
        Param::Text(name),
        Param::Text(owner),
        Param::Int8(request.priority),
        Param::Int8(ttl_micros),
        clock_param,
    ];
    let renewal = renewal.map(|sql| (sql, &renewal_params[..4 + usize::from(at.is_some())]));
    // A caller that held the lease at its last answer is renewing: it checks a connection out
    // directly, ahead of standbys, which take a turn of the lane first when connections are
    // scarce (see `Link::yielding_turn`). Each waits with the others of its kind, to be carried
    // by the first that gets a connection ([`carpool`]).
    let (carpool, access) = if held {
        (&carpools.renewals, Access::Direct)
    } else {
        // A contender with a sighting has had an answer about the lease: established.
        let standing = match sighting {
            Some(_) => Standing::Established,
            None => Standing::Newcomer,
        };
        (&carpools.standbys, Access::Lane(standing))
    };
    // Carried with others only as this release calls, on the database's clock: the carrying
    // call has no clock argument, and calls v4 or v5.
    // Made only when it waits or carries others: a request that gets a connection at once
    // with nobody waiting copies nothing.
    let carried = (kept.is_some() && at.is_none()).then_some(|| Carried {
        lease_name: name.to_owned(),
        owner: owner.to_owned(),
        priority: request.priority,
        ttl_micros,
        seen: [seen_token, seen_heartbeat, seen_for],
        held,
    });
    let way = Way {
        link,
        statements,
        sql,
        params,
        renewal,
        access,
        patience: lane::patience(ttl),
    };
    let row = link.timed(WHAT, || way.request(carpool, carried)).await?;
    let decided = decode::lease::response(lease_name, &row)?;
    if let Some(kept) = kept {
        kept.after(&decided.1.lease, request.owner.as_str(), Instant::now());
    }
    Ok(decided)
}

/// What the lease calls are called in errors and logs.
const WHAT: &str = "request_lease";

/// How a request gets to a connection.
#[derive(Clone, Copy, Debug)]
enum Access {
    /// A renewal: checks a connection out at once.
    Direct,
    /// A standby's request: a turn of the standbys' lane first, as a waiter of this standing
    /// ([`lane`]).
    Lane(Standing),
}

/// A connection for a request's call, with the lane's turn it took (if any); the connection
/// goes back before the turn.
struct Seat<'a, D: Driver> {
    connection: Checkout<'a, D>,
    turn: Option<lane::Turn<'a>>,
}

impl<D: Driver> Seat<'_, D> {
    /// One statement of a lease call on this seat's connection.
    async fn call(
        &mut self,
        sql: &Sql,
        params: &[Param<'_>],
    ) -> Result<Vec<D::Row>, EventStorageError> {
        self.connection
            .query(sql, params)
            .await
            .map_err(|e| e.into_storage(WHAT))
    }
}

/// The way of one request: its own call, or a place in another request's call ([`carpool`]).
struct Way<'a, 'p, D> {
    link: &'a Arc<Link<D>>,
    statements: &'a LeaseStatements,
    /// Its own call: `request_lease_v4` or `_v5` (or, in tests, another).
    sql: &'a Sql,
    params: &'a [Param<'p>],
    /// A holder's: the renewal statement and its parameters, which its own call tries before
    /// `sql` ([`renewal_sql`]).
    renewal: Option<(&'a Sql, &'a [Param<'p>])>,
    access: Access,
    /// How long it keeps its place in the order of arrival, in the lane and in its carpool
    /// ([`lane::patience`]).
    patience: Duration,
}

/// How a request that may be carried starts: with a connection at once, or aboard its
/// carpool with its ticket, its answer's receiver, and what it got first.
enum Start<'a, D: Driver> {
    AtOnce(Seat<'a, D>),
    Boarded(u64, oneshot::Receiver<Outcome<D::Row>>, Waited<'a, D>),
}

/// What a waiting request got first.
enum Waited<'a, D: Driver> {
    Carried(Result<Outcome<D::Row>, oneshot::error::RecvError>),
    Taken,
    Seated(Result<Seat<'a, D>, EventStorageError>),
}

impl<'a, D: Driver> Way<'a, '_, D> {
    /// Takes a connection if one is to be had at once, and calls for itself and for the
    /// requests of its kind that wait (none, below capacity); else waits for a connection, or
    /// for another request's call to carry `carried` (when set), and with a connection calls
    /// for itself and for those that wait.
    async fn request(
        &self,
        carpool: &Carpool<D::Row>,
        carried: Option<impl Fn() -> Carried>,
    ) -> Result<D::Row, EventStorageError> {
        let Some(carried) = carried else {
            return self.alone().await;
        };
        // Its own future, so that the connection's future it holds, awaited twice, does not
        // stay in this one's state beside the call's future (the size test below).
        let start = self.start(carpool, &carried).await?;
        let (id, answer, waited) = match start {
            Start::AtOnce(mut seat) => {
                let others = carpool.take_waiting(Instant::now());
                if others.is_empty() {
                    return self.own_call(&mut seat).await;
                }
                let load = Load {
                    own: carried(),
                    others,
                };
                return carrying(self.carry(seat, load)).await;
            }
            Start::Boarded(id, answer, waited) => (id, answer, waited),
        };
        let outcome = match waited {
            Waited::Carried(outcome) => outcome,
            Waited::Taken => answer.await,
            Waited::Seated(Ok(mut seat)) => match carpool.take(id, Instant::now()) {
                Some(load) if load.others.is_empty() => return self.own_call(&mut seat).await,
                Some(load) => return carrying(self.carry(seat, load)).await,
                // Another request's call carries it: its answer comes from there.
                None => {
                    drop(seat);
                    answer.await
                }
            },
            Waited::Seated(Err(e)) => {
                if carpool.withdraw(id) {
                    return Err(e);
                }
                // Taken by another request's call meanwhile: that call decides it.
                answer.await
            }
        };
        match outcome {
            Ok(Outcome::Answered(row)) => Ok(row),
            Ok(Outcome::Alone) => self.alone().await,
            Ok(Outcome::Failed(why)) => Err(EventStorageError::unavailable(format!(
                "{WHAT}: {why}; the outcome is unknown"
            ))),
            Err(_) => Err(EventStorageError::unavailable(format!(
                "{WHAT}: the call that carried this request got no answer within {:?}; the \
                 outcome is unknown",
                self.link.call_timeout()
            ))),
        }
    }

    /// A connection at once, or a place in `carpool` and what it got first: the connection,
    /// or its request carried by another's call.
    async fn start(
        &self,
        carpool: &Carpool<D::Row>,
        carried: &impl Fn() -> Carried,
    ) -> Result<Start<'a, D>, EventStorageError> {
        let mut seat = pin!(self.seat());
        // Polled once with this task's waker, and not dropped if it is not ready: its place in
        // the lane and in the pool's queue is kept, and a connection it is opening is not
        // thrown away.
        if let Poll::Ready(seat) = poll_fn(|cx| Poll::Ready(seat.as_mut().poll(cx))).await {
            return Ok(Start::AtOnce(seat?));
        }
        let Ticket {
            id,
            mut answer,
            mut taken,
        } = carpool.board(carried(), self.patience);
        let waited = tokio::select! {
            biased;
            outcome = &mut answer => Waited::Carried(outcome),
            // Taken by another request's call: no connection or turn is needed any more (the
            // wait for them ends with this future).
            _ = &mut taken => Waited::Taken,
            seat = &mut seat => Waited::Seated(seat),
        };
        Ok(Start::Boarded(id, answer, waited))
    }

    /// A connection, after a turn of the lane for a standby's request.
    async fn seat(&self) -> Result<Seat<'a, D>, EventStorageError> {
        let turn = match self.access {
            Access::Direct => None,
            Access::Lane(standing) => Some(self.link.yielding_turn(standing, self.patience).await),
        };
        Ok(Seat {
            connection: self.link.checkout(WHAT).await?,
            turn,
        })
    }

    /// Its own call, on a connection of its own.
    async fn alone(&self) -> Result<D::Row, EventStorageError> {
        let mut seat = self.seat().await?;
        self.own_call(&mut seat).await
    }

    /// Its own call on `seat`: a holder's renewal statement first, where it has one, then,
    /// unless that answered, `sql`.
    async fn own_call(&self, seat: &mut Seat<'a, D>) -> Result<D::Row, EventStorageError> {
        if let Some((sql, params)) = self.renewal
            && let Some(row) = at_most_one_row(WHAT, seat.call(sql, params).await?)?
        {
            return Ok(row);
        }
        one_row(WHAT, seat.call(self.sql, self.params).await?)
    }

    /// On `seat`, in a task of its own bounded by the call timeout: one call for its own
    /// request and those of `load`; each carried request is told its [`Outcome`]. If this
    /// request's caller leaves (its own timeout, a dropped future), the call goes on, and the
    /// requests it carries still get their answers.
    fn carry(
        &self,
        seat: Seat<'a, D>,
        load: Load<D::Row>,
    ) -> JoinHandle<Result<D::Row, EventStorageError>> {
        let detached = self.link.detach(seat.connection, seat.turn);
        let sql = CarrySql::new(self.statements, load.own.held, None);
        tokio::spawn(carry_detached(detached, sql, load))
    }
}

/// The answer of a call that carries others, from its task ([`Way::carry`]).
async fn carrying<R>(
    call: JoinHandle<Result<R, EventStorageError>>,
) -> Result<R, EventStorageError> {
    match call.await {
        Ok(answer) => answer,
        Err(e) => Err(EventStorageError::internal(format!(
            "{WHAT}: the task of the call that carried this request ended: {e}"
        ))),
    }
}

/// The statement a call that carries others sends first, for the requests it can answer
/// together.
enum First {
    /// For renewals: the renewal statement for many ([`renewals::renewals_sql`]).
    Renewals(Sql),
    /// For standbys' requests: the kept standbys' read for many ([`kept::kept_sql`]).
    Kept(Sql),
}

/// The statements of a call that carries others, and the clock argument (tests).
struct CarrySql {
    /// Sent first ([`First`]).
    first: First,
    /// `request_leases_v1`.
    carried: Sql,
    /// The own request's own call, where the others left it undecided.
    own: Sql,
    clock: Option<i64>,
}

impl CarrySql {
    /// For a load of renewals (`held`) or of standbys' requests, with the clock argument when
    /// `at` is set (tests).
    fn new(statements: &LeaseStatements, held: bool, at: Option<i64>) -> Self {
        CarrySql {
            first: if held {
                First::Renewals(Sql::clone(statements.renewals(at)))
            } else {
                First::Kept(Sql::clone(statements.kept(at)))
            },
            carried: Sql::clone(statements.carried(at)),
            own: Sql::clone(statements.request(held, at)),
            clock: at,
        }
    }
}

/// The task of a call that carries others: [`carry`] on `detached`, within the call timeout.
async fn carry_detached<D: Driver>(
    mut detached: Detached<D>,
    sql: CarrySql,
    load: Load<D::Row>,
) -> Result<D::Row, EventStorageError> {
    let timeout = detached.link().call_timeout();
    let (connection, turn) = detached.attach();
    let mut seat = Seat { connection, turn };
    match tokio::time::timeout(timeout, carry(&mut seat, &sql, load)).await {
        Ok(answer) => answer,
        Err(_) => Err(timed_out(WHAT, timeout)),
    }
}

/// On `seat`: the statement for the requests it can answer together ([`First`]: for renewals,
/// the renewal statement for many; for standbys, the kept standbys' read); then one call of
/// `request_leases_v1` for the requests of `load` it left, the own one first; each carried
/// request is told its [`Outcome`]; the own request's answer, from its own call on the same
/// connection if both left it undecided.
async fn carry<D: Driver>(
    seat: &mut Seat<'_, D>,
    sql: &CarrySql,
    load: Load<D::Row>,
) -> Result<D::Row, EventStorageError> {
    let first = match &sql.first {
        First::Renewals(first) => {
            renewals::renew(&mut seat.connection, first, sql.clock, load).await
        }
        First::Kept(first) => kept::keep(&mut seat.connection, first, sql.clock, load).await,
    };
    let (answered, load) = match first {
        Ok(left) => (left.own, left.load),
        Err((e, load)) => {
            let e = e.into_storage(WHAT);
            fail(load.others, &e);
            return Err(e);
        }
    };
    if let Some(row) = answered {
        // Answered: the others it left still get their call, whose failure is theirs.
        if !load.others.is_empty() {
            let _ = carry_others(seat, sql, None, load.others).await;
        }
        return Ok(row);
    }
    if let Some(row) = carry_others(seat, sql, Some(&load.own), load.others).await? {
        return Ok(row);
    }
    // Its own request was left undecided (its lease's lock is held elsewhere): its own call,
    // on the same connection, as the request would have made it.
    alone_on(seat, sql, &load.own).await
}

/// `request`'s own call (`sql.own`, with `sql.clock` in tests) on `seat`: a carried request
/// that the carrying call left undecided.
async fn alone_on<D: Driver>(
    seat: &mut Seat<'_, D>,
    sql: &CarrySql,
    request: &Carried,
) -> Result<D::Row, EventStorageError> {
    let [seen_token, seen_heartbeat, seen_for] = request.seen;
    let params = [
        Param::Text(&request.lease_name),
        Param::Text(&request.owner),
        Param::Int8(request.priority),
        Param::Int8(request.ttl_micros),
        Param::Int8(seen_token),
        Param::Int8(seen_heartbeat),
        Param::Int8(seen_for),
        Param::Int8(sql.clock.unwrap_or_default()),
    ];
    let params = &params[..7 + usize::from(sql.clock.is_some())];
    one_row(WHAT, seat.call(&sql.own, params).await?)
}

/// Tells each of `others` that the call carrying it failed with `e`.
fn fail<R>(others: Vec<Passenger<R>>, e: &EventStorageError) {
    let why = format!("the call that carried this request failed: {e}");
    for (_, answer) in others {
        let _ = answer.send(Outcome::Failed(why.clone()));
    }
}

/// On `seat`: one call of `request_leases_v1` for `own` (if set) and `others`; each of
/// `others` is told its [`Outcome`]; `own`'s answer if it was decided.
async fn carry_others<D: Driver>(
    seat: &mut Seat<'_, D>,
    sql: &CarrySql,
    own: Option<&Carried>,
    others: Vec<Passenger<D::Row>>,
) -> Result<Option<D::Row>, EventStorageError> {
    let requests: Vec<&Carried> = own
        .into_iter()
        .chain(others.iter().map(|(r, _)| r))
        .collect();
    let sent = carried_call(&mut seat.connection, &sql.carried, &requests, sql.clock).await;
    match sent {
        Ok(rows) if rows.len() == requests.len() => {
            let mut rows = rows.into_iter();
            let own = own.and_then(|_| rows.next());
            for ((_, answer), row) in others.into_iter().zip(rows) {
                let outcome = match decode::lease::decided(&row) {
                    Ok(true) => Outcome::Answered(row),
                    Ok(false) => Outcome::Alone,
                    Err(e) => Outcome::Failed(e.to_string()),
                };
                let _ = answer.send(outcome);
            }
            Ok(own.filter(|row| decode::lease::decided(row).unwrap_or(false)))
        }
        Ok(rows) => {
            let why = format!(
                "request_leases_v1 answered {} rows for {} requests",
                rows.len(),
                requests.len()
            );
            for (_, answer) in others {
                let _ = answer.send(Outcome::Failed(why.clone()));
            }
            Err(EventStorageError::internal(format!("{WHAT}: {why}")))
        }
        // Refused as a whole, in autocommit: nothing was written, and the connection is
        // sound. Each goes on its own, to its own error or answer.
        Err(e @ Failure::Server { .. }) if !e.connection_broken() => {
            tracing::debug!(target: "tenure_postgres", error = ?e.server_message(), "carried requests refused; each goes on its own");
            for (_, answer) in others {
                let _ = answer.send(Outcome::Alone);
            }
            Ok(None)
        }
        Err(e) => {
            let e = e.into_storage(WHAT);
            fail(others, &e);
            Err(e)
        }
    }
}

/// One call of `request_leases_v1` (`sql`, with `clock`, in tests) for `requests`.
async fn carried_call<D: Driver>(
    connection: &mut Checkout<'_, D>,
    sql: &Sql,
    requests: &[&Carried],
    clock: Option<i64>,
) -> Result<Vec<D::Row>, Failure> {
    let names: Vec<&str> = requests.iter().map(|r| r.lease_name.as_str()).collect();
    let owners: Vec<&str> = requests.iter().map(|r| r.owner.as_str()).collect();
    let column = |f: fn(&Carried) -> i64| requests.iter().map(|r| f(r)).collect::<Vec<i64>>();
    let priorities = column(|r| r.priority);
    let ttls = column(|r| r.ttl_micros);
    let tokens = column(|r| r.seen[0]);
    let heartbeats = column(|r| r.seen[1]);
    let unchanged = column(|r| r.seen[2]);
    let held: Vec<bool> = requests.iter().map(|r| r.held).collect();
    let params = [
        Param::TextRefs(&names),
        Param::TextRefs(&owners),
        Param::Int8s(&priorities),
        Param::Int8s(&ttls),
        Param::Int8s(&tokens),
        Param::Int8s(&heartbeats),
        Param::Int8s(&unchanged),
        Param::Bools(&held),
        Param::Int8(clock.unwrap_or_default()),
    ];
    connection
        .query(sql, &params[..8 + usize::from(clock.is_some())])
        .await
}

/// `requests` (holders' renewals if `held`, else standbys' requests, with exactly these
/// sightings) carried together in one call as a request that got a connection carries the
/// others of its kind that wait, with `at` standing in for the database clock: the statement
/// for those it can answer together ([`First`]), then `request_leases_v1` for those it left,
/// then (as each would go on its own) `request_lease_v4` or `_v5` for any left undecided. The
/// answers in order; nothing is recorded. For the property tests (`tests/carried.rs`), which
/// pass `first` in place of the first statement in negative controls.
#[cfg(feature = "testing")]
pub(crate) async fn request_carried_at<D: Driver>(
    link: &Arc<Link<D>>,
    statements: &LeaseStatements,
    (requests, held): (&[(LeaseRequest, Option<Sighting>)], bool),
    at: tenure_ports::Timestamp,
    first: Option<&Sql>,
) -> Result<Vec<(Transition, LeaseResponse)>, EventStorageError> {
    let at = at.as_micros();
    let (mut carried, mut names) = (Vec::new(), Vec::new());
    for (request, sighting) in requests {
        let (name, ttl) = request.check_with_lease_name()?;
        names.push(name);
        carried.push(Carried {
            lease_name: request.lease_name.as_str().to_owned(),
            owner: request.owner.as_str().to_owned(),
            priority: request.priority,
            ttl_micros: ttl_micros(ttl)?,
            seen: sighting_params(sighting.as_ref()),
            held,
        });
    }
    let mut carried = carried.into_iter();
    let Some(own) = carried.next() else {
        return Ok(Vec::new());
    };
    let (others, answers): (Vec<_>, Vec<_>) = carried
        .map(|request| {
            let (tell, told) = oneshot::channel();
            ((request.clone(), tell), (request, told))
        })
        .unzip();
    let mut seat = Seat {
        connection: link.checkout(WHAT).await?,
        turn: None,
    };
    let mut sql = CarrySql::new(statements, held, Some(at));
    if let Some(first) = first {
        sql.first = match sql.first {
            First::Renewals(_) => First::Renewals(Sql::clone(first)),
            First::Kept(_) => First::Kept(Sql::clone(first)),
        };
    }
    let mut rows = vec![carry(&mut seat, &sql, Load { own, others }).await?];
    for (request, mut told) in answers {
        let row = match told.try_recv() {
            Ok(Outcome::Answered(row)) => row,
            Ok(Outcome::Alone) => alone_on(&mut seat, &sql, &request).await?,
            Ok(Outcome::Failed(why)) => return Err(EventStorageError::unavailable(why)),
            Err(_) => {
                return Err(EventStorageError::internal(
                    "a carried request was not told its outcome",
                ));
            }
        };
        rows.push(row);
    }
    names
        .into_iter()
        .zip(rows)
        .map(|(name, row)| decode::lease::response(name, &row))
        .collect()
}

/// `release_lease`: one call of `<prefix>release_lease_v1`; says whether the record was
/// backdated.
pub(crate) async fn release<D: Driver>(
    link: &Link<D>,
    statements: &LeaseStatements,
    lease_name: &str,
    owner: &str,
    clock: Clock,
) -> Result<bool, EventStorageError> {
    let lease_name = LeaseName::new(lease_name)?;
    let owner = Owner::new(owner)?;
    let (sql, at) = match clock {
        Clock::Database => (&statements.release, None),
        #[cfg(feature = "testing")]
        Clock::At(at) => (&statements.release_at, Some(at.as_micros())),
    };
    let params = [
        Param::Text(lease_name.as_str()),
        Param::Text(owner.as_str()),
        Param::Int8(at.unwrap_or_default()),
    ];
    let params = if at.is_some() {
        &params[..]
    } else {
        &params[..2]
    };
    let row = link.query_one("release_lease", sql, params).await?;
    decode::lease::released(&row)
}

/// `get_leases`: one read of the leases table, with the database's `now()`.
pub(crate) async fn leases<D: Driver>(
    link: &Link<D>,
    statements: &LeaseStatements,
) -> Result<LeaseSnapshot, EventStorageError> {
    let rows = link.query("get_leases", &statements.leases, &[]).await?;
    decode::lease::snapshot(&rows)
}

/// `get_lease_contenders`: the live registrations of `lease_name`, judged at `clock`.
pub(crate) async fn contenders<D: Driver>(
    link: &Link<D>,
    statements: &LeaseStatements,
    lease_name: &str,
    clock: Clock,
) -> Result<Vec<Contender>, EventStorageError> {
    let lease_name = LeaseName::new(lease_name)?;
    let rows = link
        .query(
            "get_lease_contenders",
            &statements.contenders,
            &[Param::Text(lease_name.as_str())],
        )
        .await?;
    let (now, all) = decode::lease::contenders(&lease_name, &rows)?;
    let now = match clock {
        Clock::Database => now,
        #[cfg(feature = "testing")]
        Clock::At(at) => at,
    };
    let mut live: Vec<Contender> = all.into_iter().filter(|c| c.is_live_at(now)).collect();
    sort_contenders(&mut live);
    Ok(live)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tenure_conninfo::ConnInfo;
    use tenure_ports::{LeaseRequest, Sightings};

    use super::{Carpools, Clock, LeaseStatements, Version, request};
    use crate::connection::{Driver, Link};
    use crate::prefix::TablePrefix;

    /// The most bytes a lease request's future may hold, whichever the driver.
    ///
    /// Every layer of a call (the adapter's, the SPI's box, the caller's) moves the future it
    /// awaits, so its size is paid several times per call. sqlx's `acquire` future holds a
    /// whole connect (about 29 KB): held inline, it made the sqlx driver's request 59 KB, and
    /// deadpool's was 4.5 KB with the call's work held twice by `Link::timed`. Both fixed, the
    /// benchmark process's CPU per renewal (`client µs/call` in the `lease_latency`
    /// benchmark) fell by about 10 µs on sqlx and 5 µs on deadpool. Then 1.3 KB
    /// on sqlx, 2.6 KB on deadpool; with requests carried together, 4.4 KB on deadpool with the
    /// carrying call inline, and 1.8 KB on sqlx, 3.4 KB on deadpool with it boxed; with the
    /// connection's future polled once before boarding, 5.7 KB on deadpool while that future
    /// was held in the request's own state (awaited twice), 3.7 KB (and 2.0 KB on sqlx) with
    /// it in a future of its own (`Way::start`); the same with the carrying call in a task of
    /// its own (`Way::carry`).
    const MOST: usize = 4096;

    fn size_of_request<D: Driver>(link: &Arc<Link<D>>) -> usize {
        let statements = LeaseStatements::new(&TablePrefix::new("tenure_").unwrap());
        let sightings = Sightings::new();
        let carpools = Carpools::default();
        let lease = LeaseRequest::new("lease", "owner", 0, Duration::from_secs(3));
        let future = request(
            link,
            &statements,
            &carpools,
            &lease,
            Clock::Database,
            Version::Current(&sightings),
        );
        std::mem::size_of_val(&future)
    }

    fn info() -> ConnInfo {
        // Never connected to: the pools connect lazily, and no call is made.
        ConnInfo::parse("postgres://tenure@127.0.0.1:1/tenure").unwrap()
    }

    #[cfg(feature = "deadpool")]
    #[tokio::test]
    async fn a_lease_request_on_deadpool_holds_no_large_future() {
        let timeout = Duration::from_secs(1);
        let driver =
            crate::connection::deadpool::Deadpool::from_conninfo(&info(), 8, timeout, timeout)
                .unwrap();
        let size = size_of_request(&Arc::new(Link::new(driver, timeout, true)));
        assert!(size <= MOST, "a lease request's future is {size} bytes");
    }

    #[cfg(feature = "sqlx-0_9")]
    #[tokio::test]
    async fn a_lease_request_on_sqlx_holds_no_large_future() {
        let timeout = Duration::from_secs(1);
        let driver = crate::connection::sqlx::Sqlx::from_conninfo(&info(), 8, timeout).unwrap();
        let size = size_of_request(&Arc::new(Link::new(driver, timeout, true)));
        assert!(size <= MOST, "a lease request's future is {size} bytes");
    }
}
