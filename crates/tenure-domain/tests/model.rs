//! The lease state machine against a naive reference model, through the conformance kit's
//! differential check.
//!
//! `Model` is a deliberately naive implementation of the lease contract, written from the
//! contract alone, with plain integer microseconds and owner names as strings; it shares no
//! code with the domain. [`tenure_tck::differential::check_decisions`] plays the kit's cases
//! (2 to 6 owners with multi-byte and 255-byte names, extreme priorities, ttls up to 7 days,
//! clock steps landing exactly on an expiry and one microsecond either side) against it and
//! against `tenure_domain` applied to a plain store, and requires every answer and every stored
//! record and registration to be equal; it also checks the contract's invariants on every
//! answer and fails if its generator did not reach every rule. The same check is what a
//! backend that decides in its own code (the PostgreSQL functions) runs.
//!
//! A second property checks input validation against the contract: names of 1 to 255 bytes
//! without control characters, ttls from 1 ms to 7 days, valid and invalid values alike.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use tenure_domain::{
    Contender, FencingToken, Field, Lease, LeaseName, LeaseRequest, LeaseResponse, LeaseStatus,
    Owner, Reason, Timestamp, Transition, ValidLeaseRequest, validate_ttl,
};
use tenure_ports::BoxError;
use tenure_tck::differential::{self, Decided, DecisionSystem, Observed};

/// The number of cases when `PROPTEST_CASES` is not set.
const DEFAULT_CASES: u32 = 256;

/// The test's configuration: `PROPTEST_CASES` if set, otherwise [`DEFAULT_CASES`].
fn config() -> Config {
    let from_env = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        from_env.cases
    } else {
        DEFAULT_CASES
    };
    Config {
        cases,
        source_file: Some(file!()),
        ..from_env
    }
}

type TestResult = Result<(), TestCaseError>;

// ---------------------------------------------------------------------------------------------
// The reference model: the contract, naively, in integers.
// ---------------------------------------------------------------------------------------------

/// Whole microseconds in `d`, computed here and not by the domain.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_nanos() / 1_000).unwrap_or(i64::MAX)
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct ModelLease {
    owner: String,
    priority: i64,
    token: u64,
    acquired_at: i64,
    heartbeat_at: i64,
    ttl: i64,
    released_at: Option<i64>,
}

impl ModelLease {
    fn live_at(&self, now: i64) -> bool {
        now < self.heartbeat_at + self.ttl
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ModelContender {
    priority: i64,
    last_seen: i64,
    ttl: i64,
}

impl ModelContender {
    fn live_at(&self, now: i64) -> bool {
        now < self.last_seen + self.ttl
    }
}

/// One lease of the model.
#[derive(Clone, Default, Debug)]
struct ModelState {
    lease: Option<ModelLease>,
    contenders: BTreeMap<String, ModelContender>,
}

/// Every lease of the model, by name.
#[derive(Default, Debug)]
struct Model {
    leases: BTreeMap<String, ModelState>,
}

impl ModelState {
    fn request(&mut self, owner: &str, priority: i64, ttl: i64, now: i64) -> Transition {
        self.contenders.insert(
            owner.to_owned(),
            ModelContender {
                priority,
                last_seen: now,
                ttl,
            },
        );
        self.contenders
            .retain(|other, c| other == owner || c.live_at(now));
        let fresh = |token| ModelLease {
            owner: owner.to_owned(),
            priority,
            token,
            acquired_at: now,
            heartbeat_at: now,
            ttl,
            released_at: None,
        };
        match self.lease.clone() {
            None => {
                self.lease = Some(fresh(1));
                Transition::Created
            }
            Some(lease) if lease.live_at(now) && lease.owner == owner => {
                self.lease = Some(ModelLease {
                    priority,
                    heartbeat_at: now,
                    ttl,
                    ..lease
                });
                Transition::Renewed
            }
            Some(lease) if lease.live_at(now) => Transition::Standby,
            Some(lease) => {
                self.lease = Some(fresh(lease.token + 1));
                if lease.owner == owner {
                    Transition::Reacquired
                } else {
                    Transition::TakenOver
                }
            }
        }
    }

    fn status(&self, transition: Transition, owner: &str, now: i64) -> LeaseStatus {
        let priority = self.lease.as_ref().map_or(0, |l| l.priority);
        if transition == Transition::Standby {
            LeaseStatus::Standby
        } else if self
            .contenders
            .iter()
            .any(|(other, c)| other != owner && c.live_at(now) && c.priority > priority)
        {
            LeaseStatus::LeaderStepDownRequested
        } else {
            LeaseStatus::Leader
        }
    }

    /// Backdates the holder's heartbeat to `min(heartbeat_at, now - ttl)`; says whether that
    /// changed it.
    fn release(&mut self, owner: &str, now: i64) -> bool {
        let mut touched = false;
        if let Some(lease) = self.lease.as_mut()
            && lease.owner == owner
            && now - lease.ttl < lease.heartbeat_at
        {
            lease.heartbeat_at = now - lease.ttl;
            lease.released_at = Some(now);
            touched = true;
        }
        self.contenders.remove(owner);
        touched
    }
}

fn lease_of(name: &LeaseName, l: &ModelLease) -> Result<Lease, BoxError> {
    Ok(Lease {
        lease_name: name.clone(),
        owner: Owner::new(l.owner.as_str())?,
        priority: l.priority,
        fencing_token: FencingToken::new(l.token).ok_or("a model token of 0")?,
        acquired_at: Timestamp::from_micros(l.acquired_at),
        heartbeat_at: Timestamp::from_micros(l.heartbeat_at),
        ttl: Duration::from_micros(u64::try_from(l.ttl)?),
        released_at: l.released_at.map(Timestamp::from_micros),
    })
}

impl DecisionSystem for Model {
    fn request(
        &mut self,
        request: &ValidLeaseRequest,
        now: Timestamp,
    ) -> Result<Decided, BoxError> {
        let now = now.as_micros();
        let state = self
            .leases
            .entry(request.lease_name.as_str().to_owned())
            .or_default();
        let owner = request.owner.as_str();
        let transition = state.request(owner, request.priority, micros(request.ttl), now);
        let status = state.status(transition, owner, now);
        let lease = lease_of(
            &request.lease_name,
            state
                .lease
                .as_ref()
                .ok_or("no model record after a request")?,
        )?;
        Ok(Decided::new(LeaseResponse {
            status,
            fencing_token: lease.fencing_token,
            lease,
        })
        .with_transition(transition))
    }

    fn release(
        &mut self,
        lease_name: &LeaseName,
        owner: &Owner,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        let state = self
            .leases
            .entry(lease_name.as_str().to_owned())
            .or_default();
        Ok(state.release(owner.as_str(), now.as_micros()))
    }

    fn observe(&mut self, lease_name: &LeaseName, now: Timestamp) -> Result<Observed, BoxError> {
        let Some(state) = self.leases.get(lease_name.as_str()) else {
            return Ok(Observed::default());
        };
        let record = state
            .lease
            .as_ref()
            .map(|l| lease_of(lease_name, l))
            .transpose()?;
        let stored = state
            .contenders
            .iter()
            .map(|(owner, c)| {
                Ok(Contender {
                    lease_name: lease_name.clone(),
                    owner: Owner::new(owner.as_str())?,
                    priority: c.priority,
                    last_seen: Timestamp::from_micros(c.last_seen),
                    ttl: Duration::from_micros(u64::try_from(c.ttl)?),
                })
            })
            .collect::<Result<Vec<Contender>, BoxError>>()?;
        let live = stored
            .iter()
            .filter(|c| c.is_live_at(now))
            .cloned()
            .collect();
        Ok(Observed::new(record, live).with_stored_contenders(stored))
    }
}

#[test]
fn lease_state_machine_matches_the_model() {
    let config = differential::Config::from_env_or(DEFAULT_CASES);
    match differential::check_decisions_with(config, &mut Model::default()) {
        Ok(report) => eprintln!(
            "{} cases, {} steps: {:?}",
            report.cases, report.steps, report.coverage
        ),
        Err(mismatch) => panic!("{mismatch}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Validation.
// ---------------------------------------------------------------------------------------------

/// The contract's control characters: Unicode general category Cc.
fn is_control(c: char) -> bool {
    c <= '\u{1f}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// Every reason the contract gives for refusing `text` (empty when it is valid).
fn name_faults(text: &str) -> Vec<Reason> {
    if text.is_empty() {
        return vec![Reason::Empty];
    }
    let mut faults = Vec::new();
    if text.len() > 255 {
        faults.push(Reason::TooLong {
            len: text.len(),
            max: 255,
        });
    }
    if let Some((at, _)) = text.char_indices().find(|&(_, c)| is_control(c)) {
        faults.push(Reason::ControlCharacter { at });
    }
    faults
}

fn ttl_fault(ttl: Duration) -> Option<Reason> {
    let one_ms = Duration::from_millis(1);
    let seven_days = Duration::from_secs(7 * 24 * 3600);
    if ttl < one_ms {
        Some(Reason::TooShort { min: one_ms })
    } else if ttl > seven_days {
        Some(Reason::TooLarge { max: seven_days })
    } else {
        None
    }
}

fn name_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        6 => prop::char::range('a', 'z'),
        2 => prop::sample::select(vec!['é', 'β', '🦀', '-', ' ', '\u{a0}', '\u{200b}']),
        1 => prop::sample::select(vec!['\0', '\t', '\n', '\u{1b}', '\u{7f}', '\u{85}', '\u{9f}']),
    ];
    prop_oneof![
        1 => Just(String::new()),
        3 => prop::collection::vec(piece.clone(), 1..=12).prop_map(|v| v.into_iter().collect()),
        // Around the 255-byte limit, with multi-byte characters straddling it.
        3 => (240usize..=260, prop::option::of(prop::sample::select(vec!['é', '🦀', '\0'])))
            .prop_map(|(len, extra)| {
                let mut s = "a".repeat(len);
                if let Some(c) = extra {
                    s.push(c);
                }
                s
            }),
        2 => any::<String>(),
        1 => prop::collection::vec(piece, 200..=300).prop_map(|v| v.into_iter().collect()),
    ]
}

fn any_ttl_strategy() -> impl Strategy<Value = Duration> {
    let ms = Duration::from_millis(1);
    let week = Duration::from_secs(7 * 24 * 3600);
    prop_oneof![
        Just(Duration::ZERO),
        Just(ms),
        Just(ms - Duration::from_nanos(1)),
        Just(ms + Duration::from_nanos(1)),
        Just(week),
        Just(week - Duration::from_nanos(1)),
        Just(week + Duration::from_nanos(1)),
        Just(Duration::MAX),
        (0u64..=2_000_000).prop_map(Duration::from_nanos),
        (0u64..=2 * 7 * 24 * 3600, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        any::<u64>().prop_map(Duration::from_nanos),
    ]
}

fn check_name_result<T: AsRef<str>>(
    field: Field,
    text: &str,
    result: Result<T, tenure_domain::ValidationError>,
) -> TestResult {
    let faults = name_faults(text);
    match result {
        Ok(name) => {
            prop_assert!(
                faults.is_empty(),
                "{:?} accepted as {}: {:?}",
                text,
                field,
                faults
            );
            prop_assert_eq!(name.as_ref(), text);
        }
        Err(e) => {
            prop_assert_eq!(e.field, field);
            prop_assert!(
                faults.contains(&e.reason),
                "{:?} refused as {} for {:?}, expected one of {:?}",
                text,
                field,
                e.reason,
                faults
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn inputs_are_validated_per_the_contract(
        lease_name in name_strategy(),
        owner in name_strategy(),
        priority in any::<i64>(),
        ttl in any_ttl_strategy(),
    ) {
        check_name_result(Field::LeaseName, &lease_name, LeaseName::new(lease_name.clone()))?;
        check_name_result(Field::Owner, &owner, Owner::new(owner.as_str()))?;

        let ttl_result = validate_ttl(ttl);
        match (ttl_fault(ttl), &ttl_result) {
            (None, Ok(kept)) => {
                prop_assert_eq!(kept.as_nanos(), ttl.as_nanos() / 1_000 * 1_000, "not truncated");
            }
            (Some(reason), Err(e)) => {
                prop_assert_eq!(e.field, Field::Ttl);
                prop_assert_eq!(&e.reason, &reason);
            }
            (expected, got) => {
                prop_assert!(false, "ttl {:?}: expected fault {:?}, got {:?}", ttl, expected, got);
            }
        }

        // A whole request: refused for its first bad field, in the order lease_name, owner, ttl.
        let request = LeaseRequest::new(lease_name.clone(), owner.clone(), priority, ttl);
        let first_fault = if !name_faults(&lease_name).is_empty() {
            Some(Field::LeaseName)
        } else if !name_faults(&owner).is_empty() {
            Some(Field::Owner)
        } else if ttl_fault(ttl).is_some() {
            Some(Field::Ttl)
        } else {
            None
        };
        match (request.validate(), first_fault) {
            (Ok(valid), None) => {
                prop_assert_eq!(valid.lease_name.as_str(), lease_name.as_str());
                prop_assert_eq!(valid.owner.as_str(), owner.as_str());
                prop_assert_eq!(valid.priority, priority);
                prop_assert_eq!(valid.ttl.as_nanos(), ttl.as_nanos() / 1_000 * 1_000);
            }
            (Err(e), Some(field)) => prop_assert_eq!(e.field, field),
            (got, expected) => {
                prop_assert!(false, "request validation: expected {:?}, got {:?}", expected, got);
            }
        }
        // The check in place agrees with it, error for error, and gives the same name and ttl.
        match (request.validate(), request.check_with_lease_name()) {
            (Ok(valid), Ok((name, kept))) => {
                prop_assert_eq!(name, valid.lease_name);
                prop_assert_eq!(kept, valid.ttl);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "validate {:?} but check_with_lease_name {:?}", a, b),
        }
    }
}
