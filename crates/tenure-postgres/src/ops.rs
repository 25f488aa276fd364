//! The SQL of each lease call, and the conversion of its rows into domain values.
//!
//! Every statement is built once per storage from the validated prefix; every value travels as
//! a bind parameter.

use std::time::{Duration, SystemTime};

use tenure_ports::domain::Transition;
use tenure_ports::{
    Contender, EventStorageError, FencingToken, Lease, LeaseName, LeaseResponse, LeaseSnapshot,
    LeaseStatus, Owner, Timestamp,
};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::composite::Composite;
use crate::prefix::TablePrefix;

/// The statements of one storage, with its prefix in place.
pub(crate) struct Statements {
    pub(crate) request: String,
    pub(crate) request_at: String,
    pub(crate) release: String,
    pub(crate) release_at: String,
    pub(crate) leases: String,
    pub(crate) contenders: String,
}

impl Statements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let p = prefix.as_str();
        Statements {
            // Called as a scalar: one column, a `<prefix>lease_outcome_v1` (see `composite`).
            request: format!("SELECT {p}request_lease_v1($1, $2, $3, $4)"),
            request_at: format!("SELECT {p}request_lease_v1($1, $2, $3, $4, $5)"),
            release: format!("SELECT o_released FROM {p}release_lease_v1($1, $2)"),
            release_at: format!("SELECT o_released FROM {p}release_lease_v1($1, $2, $3)"),
            // One statement, so that `now()` is the instant of the statement's snapshot; the
            // outer join yields one row (with NULLs) when there is no lease at all.
            leases: format!(
                "SELECT now(), l.lease_name, l.owner, l.priority, l.fencing_token, \
                        l.acquired_at, l.heartbeat_at, l.ttl_micros, l.released_at \
                   FROM (SELECT) AS one LEFT JOIN {p}leases AS l ON true"
            ),
            // The holder's registration is the lease record itself (see the migration).
            contenders: format!(
                "SELECT now(), c.owner, c.priority, c.last_seen, c.ttl_micros \
                   FROM (SELECT) AS one \
                   LEFT JOIN (SELECT owner, priority, last_seen, ttl_micros \
                                FROM {p}lease_contenders WHERE lease_name = $1 \
                              UNION ALL \
                              SELECT owner, priority, heartbeat_at, ttl_micros \
                                FROM {p}leases WHERE lease_name = $1) AS c ON true"
            ),
        }
    }
}

/// A validated ttl (1 ms to 7 days, whole microseconds) as the `bigint` the tables keep.
pub(crate) fn ttl_micros(ttl: Duration) -> Result<i64, EventStorageError> {
    i64::try_from(ttl.as_micros())
        .map_err(|_| EventStorageError::internal("a validated ttl does not fit in i64 micros"))
}

/// Reads column `idx` (named `name` in messages) of `row`.
pub(crate) fn get<'a, T: FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    name: &str,
) -> Result<T, EventStorageError> {
    row.column(idx, name)
}

/// A row, or a composite value, whose columns are read by position.
trait Columns<'a> {
    /// Column `idx` (named `name` in messages).
    fn column<T: FromSql<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError>;
}

impl<'a> Columns<'a> for &'a Row {
    fn column<T: FromSql<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError> {
        self.try_get(idx).map_err(|e| {
            EventStorageError::corrupt_with(format!("unexpected value in column {name}"), e)
        })
    }
}

impl<'a> Columns<'a> for &Composite<'a> {
    fn column<T: FromSql<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError> {
        self.field(idx).map_err(|e| {
            EventStorageError::corrupt(format!("unexpected value in field {name}: {e}"))
        })
    }
}

fn corrupt(message: impl Into<String>) -> EventStorageError {
    EventStorageError::corrupt(message)
}

fn timestamp(time: SystemTime, name: &str) -> Result<Timestamp, EventStorageError> {
    Timestamp::from_system_time(time).ok_or_else(|| corrupt(format!("{name} is out of range")))
}

fn ttl_from_micros(micros: i64) -> Result<Duration, EventStorageError> {
    u64::try_from(micros)
        .ok()
        .filter(|&m| m > 0)
        .map(Duration::from_micros)
        .ok_or_else(|| corrupt(format!("ttl_micros {micros} is not positive")))
}

fn token(value: i64) -> Result<FencingToken, EventStorageError> {
    u64::try_from(value)
        .ok()
        .and_then(FencingToken::new)
        .ok_or_else(|| corrupt(format!("fencing token {value} is not positive")))
}

fn owner(value: String) -> Result<Owner, EventStorageError> {
    Owner::new(value).map_err(|e| EventStorageError::corrupt_with("a stored owner is invalid", e))
}

/// The columns of a lease record, starting at `at`: owner, priority, fencing_token,
/// acquired_at, heartbeat_at, ttl_micros.
fn lease_at<'a>(
    row: impl Columns<'a> + Copy,
    at: usize,
    lease_name: LeaseName,
) -> Result<Lease, EventStorageError> {
    Ok(Lease {
        lease_name,
        owner: owner(row.column(at, "owner")?)?,
        priority: row.column(at + 1, "priority")?,
        fencing_token: token(row.column(at + 2, "fencing_token")?)?,
        acquired_at: timestamp(row.column(at + 3, "acquired_at")?, "acquired_at")?,
        heartbeat_at: timestamp(row.column(at + 4, "heartbeat_at")?, "heartbeat_at")?,
        ttl: ttl_from_micros(row.column(at + 5, "ttl_micros")?)?,
        // An answer shows a live tenure, never a released one; the snapshot reads it.
        released_at: None,
    })
}

/// The answer of `request_lease_v1`: one `<prefix>lease_outcome_v1` (o_status, o_transition,
/// then the lease record's columns as [`lease_at`] reads them).
pub(crate) fn response_from_row(
    lease_name: &LeaseName,
    row: &Row,
) -> Result<(Transition, LeaseResponse), EventStorageError> {
    let outcome: Composite<'_> = get(row, 0, "request_lease_v1")?;
    let outcome = &outcome;
    let status = match outcome.column::<&str>(0, "o_status")? {
        "leader" => LeaseStatus::Leader,
        "leader_step_down_requested" => LeaseStatus::LeaderStepDownRequested,
        "standby" => LeaseStatus::Standby,
        other => return Err(corrupt(format!("unknown lease status {other:?}"))),
    };
    let transition = match outcome.column::<&str>(1, "o_transition")? {
        "created" => Transition::Created,
        "renewed" => Transition::Renewed,
        "reacquired" => Transition::Reacquired,
        "taken_over" => Transition::TakenOver,
        "standby" => Transition::Standby,
        other => return Err(corrupt(format!("unknown lease transition {other:?}"))),
    };
    let lease = lease_at(outcome, 2, lease_name.clone())?;
    Ok((
        transition,
        LeaseResponse {
            status,
            fencing_token: lease.fencing_token,
            lease,
        },
    ))
}

/// The answer of the leases statement.
pub(crate) fn snapshot_from_rows(rows: &[Row]) -> Result<LeaseSnapshot, EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("get_leases: no row"));
    };
    let now = timestamp(get(first, 0, "now")?, "now")?;
    let mut leases = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(name) = get::<Option<String>>(row, 1, "lease_name")? else {
            continue; // the outer join's row when there is no lease
        };
        let name = LeaseName::new(name)
            .map_err(|e| EventStorageError::corrupt_with("a stored lease name is invalid", e))?;
        let mut lease = lease_at(row, 2, name)?;
        lease.released_at = get::<Option<SystemTime>>(row, 8, "released_at")?
            .map(|at| timestamp(at, "released_at"))
            .transpose()?;
        leases.push(lease);
    }
    leases.sort_by(|a, b| a.lease_name.cmp(&b.lease_name));
    Ok(LeaseSnapshot { now, leases })
}

/// The answer of the contenders statement: `now` and every registration, live or not, one per
/// owner (the latest, should an owner appear both as holder and as contender).
pub(crate) fn contenders_from_rows(
    lease_name: &LeaseName,
    rows: &[Row],
) -> Result<(Timestamp, Vec<Contender>), EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("get_lease_contenders: no row"));
    };
    let now = timestamp(get(first, 0, "now")?, "now")?;
    let mut contenders = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(name) = get::<Option<String>>(row, 1, "owner")? else {
            continue;
        };
        let contender = Contender {
            lease_name: lease_name.clone(),
            owner: owner(name)?,
            priority: get(row, 2, "priority")?,
            last_seen: timestamp(get(row, 3, "last_seen")?, "last_seen")?,
            ttl: ttl_from_micros(get(row, 4, "ttl_micros")?)?,
        };
        match contenders
            .iter_mut()
            .find(|c: &&mut Contender| c.owner == contender.owner)
        {
            Some(known) if known.last_seen < contender.last_seen => *known = contender,
            Some(_) => {}
            None => contenders.push(contender),
        }
    }
    Ok((now, contenders))
}
