//! The SQL functions decide exactly what the domain's state machine decides.
//!
//! The lease decision of this backend is computed in PL/pgSQL (one round trip per call). This
//! property test is what allows that: random sequences of requests, releases and clock steps by
//! several owners on one lease run both through `tenure_ports::domain::decide_request` /
//! `decide_release` (on a model of the two tables) and through the real functions on a real
//! server, with the same `now`; every response, every transition, and after every step the
//! lease record, the live registrations and the contenders listing must be equal, and every
//! stored registration must be one the domain keeps too (the storage keeps the holder's
//! registration in the lease record, not in a row of its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tenure_ports::domain::{self, RecordWrite};
use tenure_ports::{Contender, Lease, LeaseName, LeaseRequest, Owner, Timestamp};
use tenure_postgres::{PostgresDriver, PostgresEventStorage};

const OWNERS: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Clone, Debug)]
enum Op {
    Request {
        owner: usize,
        priority: i64,
        ttl_ms: u64,
    },
    Release {
        owner: usize,
    },
    Advance {
        micros: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..OWNERS.len(), -1i64..=2, prop_oneof![Just(1u64), Just(10), Just(50), Just(100)])
            .prop_map(|(owner, priority, ttl_ms)| Op::Request { owner, priority, ttl_ms }),
        1 => (0..OWNERS.len()).prop_map(|owner| Op::Release { owner }),
        3 => prop_oneof![
            (0i64..120).prop_map(|ms| ms * 1000),
            Just(1i64),
            Just(999),
        ]
        .prop_map(|micros| Op::Advance { micros }),
    ]
}

/// The two tables of one lease, as the domain sees them.
#[derive(Default)]
struct Model {
    record: Option<Lease>,
    contenders: Vec<Contender>,
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    storage: PostgresEventStorage,
    admin: tokio_postgres::Client,
    prefix: String,
}

impl Harness {
    /// Reads what the server stores for `lease`: the record, every registration, and the
    /// record's `has_contenders` flag.
    fn stored(&self, lease: &str) -> (Option<Lease>, Vec<Contender>, Option<bool>) {
        self.runtime.block_on(async {
            let name = LeaseName::new(lease).unwrap();
            let p = &self.prefix;
            let record = self
                .admin
                .query_opt(
                    &format!(
                        "SELECT owner, priority, fencing_token, acquired_at, heartbeat_at, \
                                ttl_micros, has_contenders, released_at \
                           FROM {p}leases WHERE lease_name = $1"
                    ),
                    &[&lease],
                )
                .await
                .unwrap();
            let flag = record.as_ref().map(|row| row.get::<_, bool>(6));
            let record = record.map(|row| Lease {
                lease_name: name.clone(),
                owner: Owner::new(row.get::<_, String>(0)).unwrap(),
                priority: row.get(1),
                fencing_token: tenure_ports::FencingToken::new(
                    u64::try_from(row.get::<_, i64>(2)).unwrap(),
                )
                .unwrap(),
                acquired_at: Timestamp::from_system_time(row.get(3)).unwrap(),
                heartbeat_at: Timestamp::from_system_time(row.get(4)).unwrap(),
                ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(5)).unwrap()),
                released_at: row
                    .get::<_, Option<std::time::SystemTime>>(7)
                    .map(|at| Timestamp::from_system_time(at).unwrap()),
            });
            let contenders = self
                .admin
                .query(
                    &format!(
                        "SELECT owner, priority, last_seen, ttl_micros FROM {p}lease_contenders \
                          WHERE lease_name = $1 ORDER BY owner"
                    ),
                    &[&lease],
                )
                .await
                .unwrap()
                .into_iter()
                .map(|row| Contender {
                    lease_name: name.clone(),
                    owner: Owner::new(row.get::<_, String>(0)).unwrap(),
                    priority: row.get(1),
                    last_seen: Timestamp::from_system_time(row.get(2)).unwrap(),
                    ttl: Duration::from_micros(u64::try_from(row.get::<_, i64>(3)).unwrap()),
                })
                .collect();
            (record, contenders, flag)
        })
    }

    fn run(&self, lease: &str, ops: &[Op]) -> Result<(), TestCaseError> {
        let mut model = Model::default();
        // 2026-01-01T00:00:00Z, then moved only by the ops.
        let mut now = Timestamp::from_micros(1_767_225_600_000_000);
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Advance { micros } => {
                    now = Timestamp::from_micros(now.as_micros() + micros);
                    continue;
                }
                Op::Request {
                    owner,
                    priority,
                    ttl_ms,
                } => {
                    let request = LeaseRequest::new(
                        lease,
                        OWNERS[owner],
                        priority,
                        Duration::from_millis(ttl_ms),
                    );
                    let valid = request.validate().unwrap();
                    let expected = domain::decide_request(
                        model.record.as_ref(),
                        &model.contenders,
                        &valid,
                        now,
                    )
                    .unwrap();
                    let (transition, response) = self
                        .runtime
                        .block_on(self.storage.request_lease_at(&request, now))
                        .unwrap();
                    prop_assert_eq!(transition, expected.transition, "step {}: {:?}", step, op);
                    prop_assert_eq!(&response, &expected.response, "step {}: {:?}", step, op);
                    if expected.transition.record_write() != RecordWrite::None {
                        model.record = Some(expected.response.lease.clone());
                    }
                    model
                        .contenders
                        .retain(|c| !expected.pruned.contains(&c.owner) && c.owner != valid.owner);
                    model.contenders.push(expected.contender);
                }
                Op::Release { owner } => {
                    let name = LeaseName::new(lease).unwrap();
                    let who = Owner::new(OWNERS[owner]).unwrap();
                    let expected =
                        domain::decide_release(model.record.as_ref(), &name, &who, now).unwrap();
                    let released = self
                        .runtime
                        .block_on(self.storage.release_lease_at(lease, OWNERS[owner], now))
                        .unwrap();
                    prop_assert_eq!(
                        released,
                        expected.updated.is_some(),
                        "step {}: {:?}",
                        step,
                        op
                    );
                    if let Some(updated) = expected.updated {
                        model.record = Some(updated);
                    }
                    model.contenders.retain(|c| c.owner != expected.withdrawn);
                }
            }
            model.contenders.sort_by(|a, b| a.owner.cmp(&b.owner));
            let (record, rows, has_contenders) = self.stored(lease);
            // The renewal's shortcut: a record that says it has no registrations has none.
            prop_assert!(
                has_contenders != Some(false) || rows.is_empty(),
                "has_contenders is false with rows {:?} after step {}: {:?}",
                rows,
                step,
                op
            );
            prop_assert_eq!(
                &record,
                &model.record,
                "record after step {}: {:?}",
                step,
                op
            );
            // The storage keeps the holder's registration in the record rather than in a row
            // of its own. Every row it keeps is one the domain keeps (so it is as bounded) ...
            for row in &rows {
                prop_assert!(
                    model.contenders.contains(row),
                    "row {:?} after step {}: {:?} is not in the model {:?}",
                    row,
                    step,
                    op,
                    model.contenders
                );
            }
            // ... and the registrations that are live, which are all that any later decision
            // or listing can see (time only moves forward), are exactly the domain's.
            let mut effective = rows.clone();
            if let Some(holder) = &record {
                effective.push(Contender {
                    lease_name: holder.lease_name.clone(),
                    owner: holder.owner.clone(),
                    priority: holder.priority,
                    last_seen: holder.heartbeat_at,
                    ttl: holder.ttl,
                });
            }
            let live = |all: &[Contender]| {
                let mut live: Vec<Contender> =
                    all.iter().filter(|c| c.is_live_at(now)).cloned().collect();
                live.sort_by(|a, b| a.owner.cmp(&b.owner));
                live
            };
            prop_assert_eq!(
                live(&effective),
                live(&model.contenders),
                "live registrations after step {}: {:?}",
                step,
                op
            );
            // And the adapter's listing says the same.
            let listed = self
                .runtime
                .block_on(self.storage.get_lease_contenders_at(lease, now))
                .unwrap();
            let mut expected = live(&model.contenders);
            tenure_ports::sort_contenders(&mut expected);
            prop_assert_eq!(listed, expected, "listing after step {}: {:?}", step, op);
        }
        Ok(())
    }
}

#[test]
fn sql_decisions_match_the_domain_on_deadpool() {
    sql_decisions_match_the_domain(PostgresDriver::Deadpool);
}

#[test]
fn sql_decisions_match_the_domain_on_sqlx() {
    sql_decisions_match_the_domain(PostgresDriver::Sqlx09);
}

fn sql_decisions_match_the_domain(driver: PostgresDriver) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (storage, guard) = runtime.block_on(support::fresh_storage(driver));
    let admin = runtime.block_on(support::admin());
    let harness = Harness {
        runtime,
        storage,
        admin,
        prefix: guard.prefix().to_owned(),
    };
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(128);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        // A lease of its own for every case (and every shrinking step): no state carries over.
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        harness.run(&format!("lease-{n}"), &ops)
    });
    if let Err(err) = result {
        panic!("the SQL functions and the domain disagree on {driver}: {err}");
    }
    drop(guard);
}
