//! The answers of the lease statements, as the domain's values.

use std::time::Duration;

use tenure_ports::domain::Transition;
use tenure_ports::{
    Contender, EventStorageError, FencingToken, Lease, LeaseName, LeaseResponse, LeaseSnapshot,
    LeaseStatus, Owner,
};

use super::{Columns, Composite, Row, get};

fn corrupt(message: impl Into<String>) -> EventStorageError {
    EventStorageError::corrupt(message)
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
    row: impl Columns<'a>,
    at: usize,
    lease_name: LeaseName,
) -> Result<Lease, EventStorageError> {
    Ok(Lease {
        lease_name,
        owner: owner(row.column(at, "owner")?)?,
        priority: row.column(at + 1, "priority")?,
        fencing_token: token(row.column(at + 2, "fencing_token")?)?,
        acquired_at: row.column(at + 3, "acquired_at")?,
        heartbeat_at: row.column(at + 4, "heartbeat_at")?,
        ttl: ttl_from_micros(row.column(at + 5, "ttl_micros")?)?,
        // An answer shows a live tenure, never a released one; the snapshot reads it.
        released_at: None,
    })
}

/// Whether a row of `request_leases_v1`'s call was decided: its answer, or NULL for a
/// request left undecided (see `migrations/0012_lease_requests_carried.sql`).
pub(crate) fn decided(row: &impl Row) -> Result<bool, EventStorageError> {
    row.value(0)
        .map(|value| value.raw.is_some())
        .map_err(|e| EventStorageError::corrupt_with("request_leases_v1's answer", e))
}

/// The answer of `request_lease_v1`: one `<prefix>lease_outcome_v1` (o_status, o_transition,
/// then the lease record's columns as [`lease_at`] reads them).
pub(crate) fn response(
    lease_name: LeaseName,
    row: &impl Row,
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
    let lease = lease_at(outcome, 2, lease_name)?;
    Ok((
        transition,
        LeaseResponse {
            status,
            fencing_token: lease.fencing_token,
            lease,
        },
    ))
}

/// The answer of `release_lease_v1`: whether the record was backdated.
pub(crate) fn released(row: &impl Row) -> Result<bool, EventStorageError> {
    get(row, 0, "o_released")
}

/// The answer of the leases statement.
pub(crate) fn snapshot<R: Row>(rows: &[R]) -> Result<LeaseSnapshot, EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("get_leases: no row"));
    };
    let now = get(first, 0, "now")?;
    let mut leases = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(name) = get::<Option<String>>(row, 1, "lease_name")? else {
            continue; // the outer join's row when there is no lease
        };
        let name = LeaseName::new(name)
            .map_err(|e| EventStorageError::corrupt_with("a stored lease name is invalid", e))?;
        let mut lease = lease_at(row, 2, name)?;
        lease.released_at = get(row, 8, "released_at")?;
        leases.push(lease);
    }
    leases.sort_by(|a, b| a.lease_name.cmp(&b.lease_name));
    Ok(LeaseSnapshot { now, leases })
}

/// The answer of the contenders statement: `now` and every registration, live or not, one per
/// owner (the latest, should an owner appear both as holder and as contender).
pub(crate) fn contenders<R: Row>(
    lease_name: &LeaseName,
    rows: &[R],
) -> Result<(tenure_ports::Timestamp, Vec<Contender>), EventStorageError> {
    let Some(first) = rows.first() else {
        return Err(EventStorageError::internal("get_lease_contenders: no row"));
    };
    let now = get(first, 0, "now")?;
    let mut contenders = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(name) = get::<Option<String>>(row, 1, "owner")? else {
            continue;
        };
        let contender = Contender {
            lease_name: lease_name.clone(),
            owner: owner(name)?,
            priority: get(row, 2, "priority")?,
            last_seen: get(row, 3, "last_seen")?,
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
