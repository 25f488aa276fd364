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

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, SystemTime};

use tenure_ports::domain::{LeaseName, Owner, Timestamp, ValidLeaseRequest};
use tenure_ports::{BoxError, Contender, FencingToken, Lease, LeaseRequest};
use tenure_postgres::{PostgresDriver, PostgresEventStorage};
use tenure_tck::differential::{self, Decided, DecisionSystem, Observed};

/// The real functions on one prefix, called with the check's `now`.
struct Sql {
    runtime: tokio::runtime::Runtime,
    storage: PostgresEventStorage,
    admin: tokio_postgres::Client,
    prefix: String,
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
        let (transition, response) = self
            .runtime
            .block_on(self.storage.request_lease_at(&request, now))?;
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
}

fn sql_decisions_match_the_domain(driver: PostgresDriver) {
    let (mut sql, guard) = Sql::new(driver);
    let config = differential::Config::from_env_or(128);
    if let Err(mismatch) = differential::check_decisions_with(config, &mut sql) {
        panic!("the SQL functions and the domain disagree on {driver}: {mismatch}");
    }
    drop(guard);
}

#[test]
fn sql_decisions_match_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool);
}

#[test]
fn sql_decisions_match_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09);
}

/// The renewal's liveness test in the shipped function, and its off-by-one: `<=` lets the
/// holder renew at the very microsecond its lease expires, where the domain says the lease is
/// expired (a new tenure, a new token).
const LIVE: &str = "AND v_now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";
const OFF_BY_ONE: &str = "AND v_now <= l.heartbeat_at + l.ttl_micros * interval '1 microsecond'";

#[test]
fn the_check_catches_an_off_by_one_at_expiry() {
    let (mut sql, guard) = Sql::new(PostgresDriver::Deadpool);
    let function = format!("{}request_lease_v1", guard.prefix());
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
        assert_eq!(
            definition.matches(LIVE).count(),
            1,
            "the renewal's liveness test moved: update the negative control"
        );
        sql.admin
            .batch_execute(&definition.replace(LIVE, OFF_BY_ONE))
            .await
            .unwrap();
    });
    let mismatch =
        differential::check_decisions_with(differential::Config::with_cases(256), &mut sql)
            .expect_err("the check passed a function that renews an expired lease");
    let case = mismatch
        .case
        .as_ref()
        .expect("a minimal case, not a failure of the whole check");
    assert!(
        case.steps.len() <= 6,
        "the minimal case is not small ({} steps): {mismatch}",
        case.steps.len()
    );
    println!("caught, as it should be: {mismatch}");
    drop(guard);
}
