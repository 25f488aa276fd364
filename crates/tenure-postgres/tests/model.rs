//! The SQL functions decide exactly what the domain's state machine decides.
//!
//! The lease decision of this backend is computed in PL/pgSQL (one round trip per call). This
//! test is what allows that: the conformance kit's differential check
//! (`tenure_tck::differential`, the same generator and comparison the domain's own model test
//! uses) plays its cases against the real functions on a real server, with the `now` it
//! chooses, on both drivers; every answer, every transition and, after every step, the lease
//! record, the live registrations and every stored registration must agree with the domain.
//!
//! The check must be able to fail: the negative control installs a function with an
//! off-by-one at expiry (a holder may still renew at the exact microsecond its lease expires)
//! and requires the check to catch it with a small case.
//!
//! The differential check plays `request_lease_v1` (what processes of an earlier release
//! call, refreshing every registration) and `request_lease_v4` with the sighting implied by the
//! storage's own clock (with which the sighted rule is the plain one), which keeps a standby's
//! fresh registration (`RequestOutcome::keeping_fresh_registration`, declared to the check by
//! `keeps_fresh_registrations`) and answers an unchallenged renewal from the lease record,
//! sparing the registrations (`RequestOutcome::sparing_registrations_on_unchallenged_renewal`,
//! declared by `spares_registrations_on_unchallenged_renewals`; its negative control stops the
//! trigger that raises the record's bound of the registrations' priorities), and
//! `request_lease_v5` the same way, for every caller (the adapter calls it for a caller that
//! did not hold the lease at its last answer; it reads in another order and must decide what
//! v4 decides; its negative control moves its own freshness bound), and the adapter's own call
//! for a caller that held the lease (the renewal statement, one `UPDATE` that answers an
//! unchallenged renewal without a function call, then v4 where it answers nothing) the same way,
//! for every caller; its negative controls move the statement's liveness test by one
//! microsecond and its test of the registrations' bound by one priority. The sighted rule itself,
//! `decide_request_sighted` followed by all three, is checked by
//! `sighted_sql_decisions_match_the_domain`: random steps on one lease, each request through
//! v4, v5 or the holder's call at random, with a sighting chosen around the stored tenure (none, its token and
//! heartbeat for a ttl and one microsecond either side of it, another token, another
//! heartbeat), compared answer by answer and record by record with the domain; its negative
//! controls move the sighting's bound by one microsecond in v4 and in v5 and require the check
//! to notice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, SystemTime};

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use tenure_ports::domain::{
    LeaseName, Owner, RecordWrite, Timestamp, Transition, ValidLeaseRequest, decide_release,
    decide_request_sighted,
};
use tenure_ports::{
    BoxError, Contender, EventStorageError, FencingToken, Lease, LeaseRequest, LeaseResponse,
    Sighting,
};
use tenure_postgres::{PostgresDriver, PostgresEventStorage};
use tenure_tck::differential::{self, Decided, DecisionSystem, Observed};

/// The real functions on one prefix, called with the check's `now`.
struct Sql {
    runtime: tokio::runtime::Runtime,
    storage: PostgresEventStorage,
    admin: tokio_postgres::Client,
    prefix: String,
    /// Which function a request calls.
    calls: Calls,
    /// A renewal statement in place of the shipped one ([`Calls::RenewalImplied`]), for a
    /// negative control.
    renewal: Option<String>,
}

/// Which function the differential check's requests call.
#[derive(Clone, Copy, Debug)]
enum Calls {
    /// `request_lease_v1`, as a process of an earlier release does.
    V1,
    /// `request_lease_v4` with the sighting implied by the stored record and `now`
    /// (`Sighting::on_storage_clock`, with which the sighted rule is the plain one).
    V4Implied,
    /// `request_lease_v5` (the adapter's call for a caller that did not hold the lease at its
    /// last answer), for every caller, with the implied sighting.
    V5Implied,
    /// The adapter's own call for a caller that held the lease at its last answer (the renewal
    /// statement, then `request_lease_v4` where it answers nothing), for every caller, with the
    /// implied sighting.
    RenewalImplied,
}

impl Sql {
    fn new(driver: PostgresDriver) -> (Sql, tenure_pg_test::PrefixGuard) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (storage, guard) = runtime.block_on(support::fresh_storage(driver));
        let admin = runtime.block_on(support::admin());
        let sql = Sql {
            runtime,
            storage,
            admin,
            prefix: guard.prefix().to_owned(),
            calls: Calls::V1,
            renewal: None,
        };
        (sql, guard)
    }

    /// The lease record as stored, with the record's `has_contenders` flag.
    async fn record(&self, lease_name: &LeaseName) -> Result<Option<(Lease, bool)>, BoxError> {
        let p = &self.prefix;
        let row = self
            .admin
            .query_opt(
                &format!(
                    "SELECT owner, priority, fencing_token, acquired_at, heartbeat_at, \
                            ttl_micros, has_contenders, released_at \
                       FROM {p}leases WHERE lease_name = $1"
                ),
                &[&lease_name.as_str()],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let at =
            |t: SystemTime| Timestamp::from_system_time(t).ok_or("a stored instant out of range");
        let lease = Lease {
            lease_name: lease_name.clone(),
            owner: Owner::new(row.get::<_, String>(0))?,
            priority: row.get(1),
            fencing_token: FencingToken::new(u64::try_from(row.get::<_, i64>(2))?)
                .ok_or("a stored token of 0")?,
            acquired_at: at(row.get(3))?,
            heartbeat_at: at(row.get(4))?,
            ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(5))?),
            released_at: row.get::<_, Option<SystemTime>>(7).map(at).transpose()?,
        };
        Ok(Some((lease, row.get(6))))
    }

    /// Every stored registration row, live or not.
    async fn rows(&self, lease_name: &LeaseName) -> Result<Vec<Contender>, BoxError> {
        let p = &self.prefix;
        self.admin
            .query(
                &format!(
                    "SELECT owner, priority, last_seen, ttl_micros FROM {p}lease_contenders \
                      WHERE lease_name = $1"
                ),
                &[&lease_name.as_str()],
            )
            .await?
            .into_iter()
            .map(|row| {
                Ok(Contender {
                    lease_name: lease_name.clone(),
                    owner: Owner::new(row.get::<_, String>(0))?,
                    priority: row.get(1),
                    last_seen: Timestamp::from_system_time(row.get(2)).ok_or("last_seen")?,
                    ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(3))?),
                })
            })
            .collect()
    }
}

impl Sql {
    /// `request` as `via` makes it, with exactly `sighting` and `now` standing in for the
    /// database clock.
    async fn sighted(
        &self,
        via: Via,
        request: &LeaseRequest,
        now: Timestamp,
        sighting: Option<Sighting>,
    ) -> Result<(Transition, LeaseResponse), EventStorageError> {
        match (via, &self.renewal) {
            (Via::V4, _) => {
                self.storage
                    .request_lease_sighted_at(request, now, sighting)
                    .await
            }
            (Via::V5, _) => {
                self.storage
                    .request_lease_unheld_sighted_at(request, now, sighting)
                    .await
            }
            (Via::Renewal, None) => {
                self.storage
                    .request_lease_renewing_at(request, now, sighting)
                    .await
            }
            (Via::Renewal, Some(statement)) => {
                self.storage
                    .request_lease_renewing_with_at(request, now, sighting, statement)
                    .await
            }
        }
    }
}

impl DecisionSystem for Sql {
    fn request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<Decided, BoxError> {
        let request = LeaseRequest::new(
            request.lease_name.as_str(),
            request.owner.as_str(),
            request.priority,
            request.ttl,
        );
        let (transition, response) = self.runtime.block_on(async {
            let implied = || async {
                let lease_name = LeaseName::new(request.lease_name.clone())?;
                Ok::<_, BoxError>(
                    self.record(&lease_name)
                        .await?
                        .map(|(lease, _)| Sighting::on_storage_clock(&lease, now)),
                )
            };
            Ok::<_, BoxError>(match self.calls {
                Calls::V1 => self.storage.request_lease_at(&request, now).await?,
                Calls::V4Implied => {
                    self.sighted(Via::V4, &request, now, implied().await?)
                        .await?
                }
                Calls::V5Implied => {
                    self.sighted(Via::V5, &request, now, implied().await?)
                        .await?
                }
                Calls::RenewalImplied => {
                    self.sighted(Via::Renewal, &request, now, implied().await?)
                        .await?
                }
            })
        })?;
        Ok(Decided::new(response).with_transition(transition))
    }

    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        Ok(self.runtime.block_on(self.storage.release_lease_at(
            lease_name.as_str(),
            owner.as_str(),
            now,
        ))?)
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        self.runtime.block_on(async {
            let record = self.record(lease_name).await?;
            let rows = self.rows(lease_name).await?;
            // The renewal's shortcut: a record that says it has no registrations has none.
            if let Some((_, false)) = &record
                && !rows.is_empty()
            {
                return Err(format!("has_contenders is false with rows {rows:?}").into());
            }
            // The storage keeps the holder's registration in the record, not in a row of its
            // own: the adapter's listing is what the live registrations are.
            let live = self
                .storage
                .get_lease_contenders_at(lease_name.as_str(), now)
                .await?;
            Ok(Observed::new(record.map(|(lease, _)| lease), live).with_stored_contenders(rows))
        })
    }

    fn keeps_fresh_registrations(&self) -> bool {
        !matches!(self.calls, Calls::V1)
    }

    fn spares_registrations_on_unchallenged_renewals(&self) -> bool {
        !matches!(self.calls, Calls::V1)
    }
}

fn sql_decisions_match_the_domain(driver: PostgresDriver, calls: Calls) {
    let (mut sql, guard) = Sql::new(driver);
    sql.calls = calls;
    let config = differential::Config::from_env_or(128);
    if let Err(mismatch) = differential::check_decisions_with(config, &mut sql) {
        panic!("the SQL functions and the domain disagree on {driver}: {mismatch}");
    }
    drop(guard);
}

#[test]
fn sql_decisions_match_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool, Calls::V1);
}

#[test]
fn sql_decisions_match_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09, Calls::V1);
}

#[test]
fn v4_with_the_storage_clocks_sighting_matches_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool, Calls::V4Implied);
}

#[test]
fn v4_with_the_storage_clocks_sighting_matches_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09, Calls::V4Implied);
}

#[test]
fn a_holders_call_with_the_storage_clocks_sighting_matches_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool, Calls::RenewalImplied);
}

#[test]
fn a_holders_call_with_the_storage_clocks_sighting_matches_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09, Calls::RenewalImplied);
}

#[test]
fn v5_with_the_storage_clocks_sighting_matches_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool, Calls::V5Implied);
}

#[test]
fn v5_with_the_storage_clocks_sighting_matches_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09, Calls::V5Implied);
}

/// Replaces the one occurrence of `shipped` in `function`'s definition with `broken`, for a
/// negative control; `moved` is the failure message when `shipped` is not found exactly once.
fn break_function(sql: &Sql, function: &str, shipped: &str, broken: &str, moved: &str) {
    sql.runtime.block_on(async {
        let definition: String = sql
            .admin
            .query_one(
                "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = $1",
                &[&function],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(definition.matches(shipped).count(), 1, "{moved}");
        sql.admin
            .batch_execute(&definition.replace(shipped, broken))
            .await
            .unwrap();
    });
}

/// The renewal's liveness test in the shipped function, and its off-by-one: `<=` lets the
/// holder renew at the very microsecond its lease expires, where the domain says the lease is
/// expired (a new tenure, a new token).
const LIVE: &str = "AND v_now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";
const OFF_BY_ONE: &str = "AND v_now <= l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";

/// The seed of the negative controls: the same minimal case every time (its size depends on the
/// random case the shrinking started from).
const SEED: u64 = 1;

/// What a negative control breaks.
#[derive(Clone, Copy, Debug)]
enum Broken<'a> {
    /// A shipped function (named without its prefix).
    Function(&'a str),
    /// The renewal statement a holder's own call sends first ([`Calls::RenewalImplied`]).
    RenewalStatement,
}

/// The negative control of the differential check: with `target` broken (`shipped` replaced
/// by `broken`), the check must fail with a minimal case of at most `steps` steps. `calls`
/// picks the function the requests call; `moved` and `passed` are the messages when the
/// shipped text is not found and when the check passes.
fn caught_with_a_small_case(
    calls: Calls,
    target: Broken<'_>,
    [shipped, broken]: [&str; 2],
    steps: usize,
    [moved, passed]: [&str; 2],
) {
    let (mut sql, guard) = Sql::new(PostgresDriver::Deadpool);
    sql.calls = calls;
    match target {
        Broken::Function(function) => {
            let function = format!("{}{function}", guard.prefix());
            break_function(&sql, &function, shipped, broken, moved);
        }
        Broken::RenewalStatement => {
            let statement = sql.storage.renewal_statement_at();
            assert_eq!(statement.matches(shipped).count(), 1, "{moved}");
            sql.renewal = Some(statement.replace(shipped, broken));
        }
    }
    let mismatch = differential::check_decisions_with(
        differential::Config::with_cases(256).with_seed(SEED),
        &mut sql,
    )
    .expect_err(passed);
    let case = mismatch
        .case
        .as_ref()
        .expect("a minimal case, not a failure of the whole check");
    assert!(
        case.steps.len() <= steps,
        "the minimal case is not small ({} steps): {mismatch}",
        case.steps.len()
    );
    println!("caught, as it should be: {mismatch}");
    drop(guard);
}

#[test]
fn the_check_catches_an_off_by_one_at_expiry() {
    caught_with_a_small_case(
        Calls::V1,
        Broken::Function("request_lease_v1"),
        [LIVE, OFF_BY_ONE],
        6,
        [
            "the renewal's liveness test moved: update the negative control",
            "the check passed a function that renews an expired lease",
        ],
    );
}

/// The fresh registration's bound in `request_lease_v4`, and its off-by-one: a registration
/// exactly half a ttl old would still be kept.
const FRESH: &str = "AND 2 * (v_now - c.last_seen) < c.ttl_micros * interval '1 microsecond'";
const FRESH_OFF_BY_ONE: &str =
    "AND 2 * (v_now - c.last_seen) <= c.ttl_micros * interval '1 microsecond'";

#[test]
fn the_check_catches_a_registration_kept_at_half_its_ttl() {
    caught_with_a_small_case(
        Calls::V4Implied,
        Broken::Function("request_lease_v4"),
        [FRESH, FRESH_OFF_BY_ONE],
        6,
        [
            "the fresh registration's bound moved: update the negative control",
            "the check passed a function that keeps a registration at half its ttl",
        ],
    );
}

/// The same off-by-one in `request_lease_v5`'s own answer for a standby, which does not reach
/// v4.
#[test]
fn the_check_catches_a_registration_kept_at_half_its_ttl_by_v5() {
    caught_with_a_small_case(
        Calls::V5Implied,
        Broken::Function("request_lease_v5"),
        [FRESH, FRESH_OFF_BY_ONE],
        6,
        [
            "v5's fresh registration's bound moved: update the negative control",
            "the check passed a v5 that keeps a registration at half its ttl",
        ],
    );
}

/// The bound of the registrations' priorities on the lease record, and a trigger that no longer
/// raises it: a standby that raises its priority above the holder's is then missed by the
/// holder's next renewal, answered from the record (`leader` where the domain asks the holder
/// to step down).
const RAISED: &str = "AND contender_priority_bound < NEW.priority";
const NOT_RAISED: &str = "AND contender_priority_bound < NEW.priority AND false";

/// The renewal statement's liveness test, and its off-by-one (as [`LIVE`] in the functions).
const RENEWAL_LIVE: &str = "c.now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";
const RENEWAL_OFF_BY_ONE: &str =
    "c.now <= l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";

#[test]
fn the_check_catches_an_off_by_one_at_expiry_in_the_renewal_statement() {
    caught_with_a_small_case(
        Calls::RenewalImplied,
        Broken::RenewalStatement,
        [RENEWAL_LIVE, RENEWAL_OFF_BY_ONE],
        6,
        [
            "the renewal statement's liveness test moved: update the negative control",
            "the check passed a renewal statement that renews an expired lease",
        ],
    );
}

/// The renewal statement's test of the registrations' bound, and a bound taken one too high:
/// a renewal answered from the record when a registration one priority above the holder's
/// must ask it to step down.
const RENEWAL_BOUND: &str = "l.contender_priority_bound <= $3)";
const RENEWAL_BOUND_OFF_BY_ONE: &str = "l.contender_priority_bound <= $3 + 1)";

#[test]
fn the_check_catches_a_renewal_statement_that_misses_a_challenger() {
    caught_with_a_small_case(
        Calls::RenewalImplied,
        Broken::RenewalStatement,
        [RENEWAL_BOUND, RENEWAL_BOUND_OFF_BY_ONE],
        8,
        [
            "the renewal statement's bound test moved: update the negative control",
            "the check passed a renewal statement that misses a challenger",
        ],
    );
}

#[test]
fn the_check_catches_a_priority_bound_that_is_not_raised() {
    caught_with_a_small_case(
        Calls::V4Implied,
        Broken::Function("priority_bound_v1"),
        [RAISED, NOT_RAISED],
        8,
        [
            "the bound's trigger moved: update the negative control",
            "the check passed a bound that a higher registration does not raise",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// The sighted rule: request_lease_v4 against decide_request_sighted, kept lazily.
// ---------------------------------------------------------------------------------------------

/// The sighting a request sends, relative to the stored tenure at that moment.
#[derive(Clone, Copy, Debug)]
enum Seen {
    /// No sighting.
    None,
    /// The stored token and heartbeat, unchanged for the lease's ttl + `offset` µs.
    Tenure { offset: i64 },
    /// The stored token and heartbeat, for far longer than any ttl.
    Long,
    /// Another token (the stored one + 1), for a ttl.
    OtherToken,
    /// The stored heartbeat ± 1 µs, for a ttl.
    OtherHeartbeat { later: bool },
}

#[derive(Clone, Debug)]
enum SightedStep {
    Request {
        owner: usize,
        ttl_ms: u64,
        priority: i64,
        seen: Seen,
        /// Which call: each must decide the same for any caller.
        via: Via,
    },
    Release {
        owner: usize,
    },
    Advance {
        micros: i64,
    },
    /// To the stored lease's expiry + `offset` µs (never back).
    ToExpiry {
        offset: i64,
    },
}

/// The call a sighted request goes through.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// `request_lease_v4`.
    V4,
    /// `request_lease_v5` (the call of a caller that did not hold the lease at its last
    /// answer).
    V5,
    /// A holder's own call: the renewal statement, then v4 where it answers nothing.
    Renewal,
}

fn via_strategy() -> impl Strategy<Value = Via> {
    prop_oneof![Just(Via::V4), Just(Via::V5), Just(Via::Renewal)]
}

fn seen_strategy() -> impl Strategy<Value = Seen> {
    prop_oneof![
        3 => Just(Seen::None),
        6 => (-1i64..=1).prop_map(|offset| Seen::Tenure { offset }),
        1 => Just(Seen::Long),
        1 => Just(Seen::OtherToken),
        1 => any::<bool>().prop_map(|later| Seen::OtherHeartbeat { later }),
    ]
}

fn sighted_step_strategy() -> impl Strategy<Value = SightedStep> {
    prop_oneof![
        8 => (0usize..3, 1u64..=20, -1i64..=1, seen_strategy(), via_strategy()).prop_map(
            |(owner, ttl_ms, priority, seen, via)| SightedStep::Request {
                owner,
                ttl_ms,
                priority,
                seen,
                via,
            }
        ),
        1 => (0usize..3).prop_map(|owner| SightedStep::Release { owner }),
        3 => prop_oneof![Just(0i64), 1i64..=30_000].prop_map(|micros| SightedStep::Advance { micros }),
        3 => (-1i64..=1).prop_map(|offset| SightedStep::ToExpiry { offset }),
    ]
}

/// What the domain keeps for the lease (as `tenure_tck::differential::Reference` does).
#[derive(Default)]
struct Model {
    record: Option<Lease>,
    contenders: BTreeMap<Owner, Contender>,
}

/// What the sighted check reached, to require every branch of the rule.
#[derive(Default, Debug)]
struct SightedCoverage {
    taken_over_sighted: u64,
    taken_over_released: u64,
    refused_expired: u64,
    steps: u64,
}

fn sighting_for(record: &Lease, seen: Seen) -> Option<Sighting> {
    let ttl = record.ttl;
    let tenure = |unchanged_for| Sighting {
        fencing_token: record.fencing_token,
        heartbeat_at: record.heartbeat_at,
        unchanged_for,
    };
    match seen {
        Seen::None => None,
        Seen::Tenure { offset } => Some(tenure(match offset {
            -1 => ttl - Duration::from_micros(1),
            0 => ttl,
            _ => ttl + Duration::from_micros(1),
        })),
        Seen::Long => Some(tenure(Duration::from_secs(86_400 * 365))),
        Seen::OtherToken => Some(Sighting {
            fencing_token: record.fencing_token.next().unwrap_or(FencingToken::FIRST),
            ..tenure(ttl)
        }),
        Seen::OtherHeartbeat { later } => Some(Sighting {
            heartbeat_at: Timestamp::from_micros(
                record.heartbeat_at.as_micros() + if later { 1 } else { -1 },
            ),
            ..tenure(ttl)
        }),
    }
}

fn play_sighted(
    sql: &Sql,
    lease: &str,
    steps: &[SightedStep],
    coverage: &mut SightedCoverage,
) -> Result<(), TestCaseError> {
    let fail = |what: String| TestCaseError::fail(what);
    let lease_name = LeaseName::new(lease).map_err(|e| fail(e.to_string()))?;
    let owners = ["pod-a", "pod-b", "βeta"];
    let mut model = Model::default();
    let mut now: i64 = 1_764_000_000_000_000;
    for (i, step) in steps.iter().enumerate() {
        coverage.steps += 1;
        let at = Timestamp::from_micros(now);
        match *step {
            SightedStep::Request {
                owner,
                ttl_ms,
                priority,
                seen,
                via,
            } => {
                let request = LeaseRequest::new(
                    lease,
                    owners[owner],
                    priority,
                    Duration::from_millis(ttl_ms),
                );
                let valid = request.validate().map_err(|e| fail(e.to_string()))?;
                let sighting = model.record.as_ref().and_then(|r| sighting_for(r, seen));
                let registered: Vec<Contender> = model.contenders.values().cloned().collect();
                let expected = decide_request_sighted(
                    model.record.as_ref(),
                    &registered,
                    &valid,
                    at,
                    sighting.as_ref(),
                )
                .map_err(|e| fail(e.to_string()))?
                .keeping_fresh_registration(&registered, at)
                .sparing_registrations_on_unchallenged_renewal(&registered);
                let (transition, response) = sql
                    .runtime
                    .block_on(sql.sighted(via, &request, at, sighting))
                    .map_err(|e| fail(format!("step {i}: {e}")))?;
                prop_assert_eq!(
                    (transition, &response),
                    (expected.transition, &expected.response),
                    "step {} ({:?}) with {:?}: SQL (left) and domain disagree",
                    i,
                    step,
                    sighting
                );
                if let Some(before) = &model.record
                    && before.owner != valid.owner
                    && !before.is_live_at(at)
                {
                    match transition {
                        Transition::TakenOver if before.is_released() => {
                            coverage.taken_over_released += 1;
                        }
                        Transition::TakenOver => coverage.taken_over_sighted += 1,
                        _ => coverage.refused_expired += 1,
                    }
                }
                if expected.transition.record_write() != RecordWrite::None {
                    model.record = Some(expected.response.lease.clone());
                }
                for gone in &expected.pruned {
                    model.contenders.remove(gone);
                }
                model
                    .contenders
                    .insert(expected.contender.owner.clone(), expected.contender);
            }
            SightedStep::Release { owner } => {
                let owner = Owner::new(owners[owner]).map_err(|e| fail(e.to_string()))?;
                let expected = decide_release(model.record.as_ref(), &lease_name, &owner, at)
                    .map_err(|e| fail(e.to_string()))?;
                let touched = sql
                    .runtime
                    .block_on(sql.storage.release_lease_at(lease, owner.as_str(), at))
                    .map_err(|e| fail(format!("step {i}: {e}")))?;
                prop_assert_eq!(touched, expected.updated.is_some(), "step {}: release", i);
                if let Some(updated) = expected.updated {
                    model.record = Some(updated);
                }
                model.contenders.remove(&expected.withdrawn);
            }
            SightedStep::Advance { micros } => now += micros,
            SightedStep::ToExpiry { offset } => {
                if let Some(r) = &model.record {
                    let expiry = r.heartbeat_at.as_micros()
                        + i64::try_from(r.ttl.as_micros()).unwrap_or(i64::MAX);
                    now = now.max(expiry + offset);
                }
            }
        }
        let stored = sql
            .runtime
            .block_on(sql.record(&lease_name))
            .map_err(|e| fail(format!("step {i}: {e}")))?
            .map(|(lease, _)| lease);
        prop_assert_eq!(
            &stored,
            &model.record,
            "step {}: the stored record (left)",
            i
        );
    }
    Ok(())
}

/// Plays `cases` sighted cases; the first disagreement, shrunk, as an error.
fn check_sighted(sql: &Sql, cases: u32) -> Result<SightedCoverage, String> {
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let coverage = std::cell::RefCell::new(SightedCoverage::default());
    let played = std::cell::Cell::new(0u64);
    let strategy = prop::collection::vec(sighted_step_strategy(), 1..=30);
    runner
        .run(&strategy, |steps| {
            let n = played.get();
            played.set(n + 1);
            play_sighted(
                sql,
                &format!("sighted-{n}"),
                &steps,
                &mut coverage.borrow_mut(),
            )
        })
        .map_err(|e| e.to_string())?;
    Ok(coverage.into_inner())
}

fn sighted_sql_decisions_match_the_domain(driver: PostgresDriver) {
    let (sql, guard) = Sql::new(driver);
    let cases = differential::Config::from_env_or(256).cases;
    let coverage = check_sighted(&sql, cases).unwrap_or_else(|e| {
        panic!(
            "request_lease_v4, v5 or the renewal statement and decide_request_sighted disagree: {e}"
        )
    });
    println!("{driver}: {coverage:?}");
    assert!(
        coverage.taken_over_sighted > 0
            && coverage.taken_over_released > 0
            && coverage.refused_expired > 0,
        "the generator did not reach every branch of the sighted rule: {coverage:?}"
    );
    drop(guard);
}

#[test]
fn sighted_sql_decisions_match_the_domain_on_deadpool() {
    sighted_sql_decisions_match_the_domain(PostgresDriver::Deadpool);
}

#[test]
fn sighted_sql_decisions_match_the_domain_on_sqlx() {
    sighted_sql_decisions_match_the_domain(PostgresDriver::Sqlx09);
}

/// The sighting's bound in `request_lease_v4`, and its off-by-one: a sighting one microsecond
/// short of the ttl would be enough.
const SEEN_FOR_TTL: &str = "AND p_seen_for_micros >= v_lease.ttl_micros";
const SEEN_FOR_TTL_OFF_BY_ONE: &str = "AND p_seen_for_micros >= v_lease.ttl_micros - 1";

/// With `function`'s sighting bound one microsecond short, the sighted check must fail.
fn sighted_check_catches_a_sighting_one_microsecond_short(function: &str) {
    let (sql, guard) = Sql::new(PostgresDriver::Deadpool);
    let function = format!("{}{function}", guard.prefix());
    break_function(
        &sql,
        &function,
        SEEN_FOR_TTL,
        SEEN_FOR_TTL_OFF_BY_ONE,
        "the sighting's bound moved: update the negative control",
    );
    let error = check_sighted(&sql, 256)
        .expect_err("the check passed a function that takes over a ttl less one microsecond");
    assert!(error.contains("disagree"), "{error}");
    println!("caught, as it should be: {error}");
    drop(guard);
}

#[test]
fn the_sighted_check_catches_a_sighting_one_microsecond_short() {
    sighted_check_catches_a_sighting_one_microsecond_short("request_lease_v4");
}

#[test]
fn the_sighted_check_catches_a_sighting_one_microsecond_short_in_v5() {
    sighted_check_catches_a_sighting_one_microsecond_short("request_lease_v5");
}
