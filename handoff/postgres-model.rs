//! The SQL functions decide exactly what the domain's state machine decides: the kit's
//! differential check (`tenure_tck::differential`) against the real functions on a real server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tenure_ports::domain::{LeaseName, Owner, Timestamp, ValidLeaseRequest};
use tenure_ports::{BoxError, Contender, FencingToken, Lease, LeaseRequest};
use tenure_postgres::PostgresEventStorage;
use tenure_tck::differential::{self, Decided, DecisionSystem, Observed};

/// The real functions, called with the check's `now`.
struct Sql {
    runtime: tokio::runtime::Runtime,
    storage: PostgresEventStorage,
    admin: tokio_postgres::Client,
    prefix: String,
}

impl DecisionSystem for Sql {
    fn request(&mut self, request: &ValidLeaseRequest, now: Timestamp) -> Result<Decided, BoxError> {
        let request = LeaseRequest::new(
            request.lease_name.as_str(),
            request.owner.as_str(),
            request.priority,
            request.ttl,
        );
        let (transition, response) = self
            .runtime
            .block_on(self.storage.request_lease_at_for_tests(&request, now))?;
        Ok(Decided::new(response).with_transition(transition))
    }

    fn release(&mut self, lease_name: &LeaseName, owner: &Owner, now: Timestamp) -> Result<bool, BoxError> {
        Ok(self.runtime.block_on(self.storage.release_lease_at_for_tests(
            lease_name.as_str(),
            owner.as_str(),
            now,
        ))?)
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        self.runtime.block_on(async {
            let p = &self.prefix;
            let lease = lease_name.as_str();
            let record = self
                .admin
                .query_opt(
                    &format!(
                        "SELECT owner, priority, fencing_token, acquired_at, heartbeat_at, \
                                ttl_micros, has_contenders FROM {p}leases WHERE lease_name = $1"
                    ),
                    &[&lease],
                )
                .await?;
            let has_contenders = record.as_ref().map(|row| row.get::<_, bool>(6));
            let record = record
                .map(|row| -> Result<Lease, BoxError> {
                    Ok(Lease {
                        lease_name: lease_name.clone(),
                        owner: Owner::new(row.get::<_, String>(0))?,
                        priority: row.get(1),
                        fencing_token: FencingToken::new(u64::try_from(row.get::<_, i64>(2))?)
                            .ok_or("a stored token of 0")?,
                        acquired_at: Timestamp::from_system_time(row.get(3)).ok_or("acquired_at")?,
                        heartbeat_at: Timestamp::from_system_time(row.get(4))
                            .ok_or("heartbeat_at")?,
                        ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(5))?),
                    })
                })
                .transpose()?;
            let rows = self
                .admin
                .query(
                    &format!(
                        "SELECT owner, priority, last_seen, ttl_micros FROM {p}lease_contenders \
                          WHERE lease_name = $1"
                    ),
                    &[&lease],
                )
                .await?
                .into_iter()
                .map(|row| -> Result<Contender, BoxError> {
                    Ok(Contender {
                        lease_name: lease_name.clone(),
                        owner: Owner::new(row.get::<_, String>(0))?,
                        priority: row.get(1),
                        last_seen: Timestamp::from_system_time(row.get(2)).ok_or("last_seen")?,
                        ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(3))?),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            // The renewal's shortcut: a record that says it has no registrations has none.
            if has_contenders == Some(false) && !rows.is_empty() {
                return Err(format!("has_contenders is false with rows {rows:?}").into());
            }
            // The adapter's listing is what the live registrations are (the storage keeps the
            // holder's registration in the record, not in a row of its own).
            let live = self
                .storage
                .get_lease_contenders_at_for_tests(lease, now)
                .await?;
            Ok(Observed::new(record, live).with_stored_contenders(rows))
        })
    }
}

#[test]
fn sql_decisions_match_the_domain() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (storage, guard) = runtime.block_on(support::fresh_storage());
    let admin = runtime.block_on(support::admin());
    let mut sql = Sql {
        runtime,
        storage,
        admin,
        prefix: guard.prefix().to_owned(),
    };
    let config = differential::Config::from_env_or(128);
    if let Err(mismatch) = differential::check_decisions_with(config, &mut sql) {
        panic!("the SQL functions and the domain disagree: {mismatch}");
    }
    drop(guard);
}
